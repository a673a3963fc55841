//! The child's output as data: [`splitter`] cuts the raw bytes of a pipe into bounded
//! lines, [`decode`] reads a line as one of the stream-json [`event`]s coder understands.
//!
//! Neither side is trusted: lines can be megabytes long, bytes need not be UTF-8, and a
//! crashing child can print anything. The splitter never holds more than its cap for a
//! line; the decoder types only the fields coder acts on and treats a line that is not an
//! event as a counted fact, not an error.

mod assistant;
pub mod decode;
mod elide;
pub mod event;
mod hand;
mod lenient;
pub mod splitter;

pub use assistant::STRUCTURED_TOOL;
pub use decode::{DecodeError, LONG_LINE_BYTES, decode_event, decode_line, decode_long_line};
pub use event::{
    AssistantEvent, Decoded, Event, EventSpans, ResultEvent, ResultSubtype, TerminalReason,
    ToolResult, ToolUse, UpstreamErrorType, Usage,
};
pub use splitter::{DEFAULT_MAX_LINE_BYTES, Line, LineSplitter, Pipe, SpareBuffer};

/// A small deterministic generator (xorshift) for the stream's randomised unit tests, so
/// they need no crate.
#[cfg(test)]
pub(crate) struct Xorshift(pub(crate) u64);

#[cfg(test)]
impl Xorshift {
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
