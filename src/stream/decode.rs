//! Decoding one line of the child's stdout into an [`Event`], leniently: a line that is not
//! an event is a counted fact, not an error.
//!
//! Each line is parsed once. The wire types borrow from the line and type only the fields
//! coder acts on; the rest is skipped (`IgnoredAny`), and the byte ranges the transcript
//! lifts are located in the same pass ([`EventSpans`]). Lines over [`LONG_LINE_BYTES`] are
//! read from a copy whose long strings are elided, so a megabyte tool result costs a scan
//! of its quotes rather than a full decode. Shorter `user` lines, which are recorded whole
//! and so must be valid, are read from such a copy too, with every string left out checked
//! and the line's UTF-8 checked once for the decoder and the transcript ([`crate::stream`]'s
//! `elide` module). `assistant` lines are read by borrowing, with the wire types of their
//! own event only, wherever that gives the same event (the `assistant` module). Before
//! either, the CLI's own shape of an `assistant` or `user` line is read by hand, without
//! serde, wherever that gives the same event (the `hand` module).

use std::ops::Range;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::assistant::{
    ASSISTANT_LINE_START, CODER_TOOL_PREFIX, STRUCTURED_TOOL, decode_assistant_line, span_in,
    status_code, string_of, string_span_in, summary_detail_and_path, tool_summary, usage_of,
};
use super::elide::{Elided, free_of_control_bytes};
use super::event::{
    AssistantEvent, Decoded, Event, EventSpans, ResultEvent, ResultSubtype, TerminalReason,
    ToolResult, ToolUse, UpstreamErrorType,
};
use super::hand::{read_assistant_line, read_user_line};
use super::lenient::ArrayOrNothing;

/// Lines longer than this are kept by their head only wherever coder records them (the
/// transcript), so they are decoded with [`decode_long_line`].
pub const LONG_LINE_BYTES: usize = 256 * 1024;

/// Why a stdout line is not an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not valid JSON (or not UTF-8).
    NotJson,
    /// Valid JSON, but not an object with a string `type`.
    NotAnEvent,
    /// The line was longer than the cap and was cut.
    Truncated,
}

/// Decodes one stdout line into its event.
pub fn decode_event(line: &[u8]) -> Result<Event, DecodeError> {
    decode_line(line).map(|decoded| decoded.event)
}

/// Decodes one stdout line: its event, and where the fields a transcript lifts lie in it.
///
/// The line is parsed once. Everything coder does not read is skipped without being
/// materialised, and the fields it only copies or searches (ids, usage, tool results'
/// content) are located rather than decoded, so a megabyte tool result is scanned once and
/// never copied. A `user` line, most of a busy run's bytes, is read the cheaper way of
/// [`decode_user_line`] when it can be.
pub fn decode_line(line: &[u8]) -> Result<Decoded, DecodeError> {
    if line.starts_with(USER_LINE_START)
        && let Some(decoded) = decode_user_line(line)
    {
        return Ok(decoded);
    }
    decode_general(line)
}

/// Decodes a `user` line with its long strings (a tool result's text, and the CLI's copy
/// of it) left out of the parse, but checked: the line is checked for UTF-8 and for raw
/// control bytes as a whole, once, and each string left out for what serde would refuse
/// in it (see [`Elided::checked`]). What is left is parsed in full, so the line is exactly
/// as valid as a full parse would find it, and reads as the same event. The line's UTF-8
/// check is handed on ([`EventSpans::utf8`]), so that the transcript need not repeat it.
///
/// `None` where the general reading must decide: the line is not UTF-8 or holds a control
/// byte or a string serde would refuse, or is not a `user` event after all.
fn decode_user_line(line: &[u8]) -> Option<Decoded> {
    // A SIMD check: std's stops at every non-ASCII character of ordinary text, and took
    // as long as the rest of the reading of a `user` line.
    let text = simdutf8::basic::from_utf8(line).ok()?;
    if !free_of_control_bytes(line) {
        return None;
    }
    // The CLI's own shape, read by hand (the `hand` module); serde reads the rest.
    if let Some(decoded) = read_user_line(text) {
        return Some(decoded);
    }
    let elided = Elided::checked(line, CHECKED_ELIDED_STRING_BYTES)?;
    let wire = serde_json::from_slice::<WireEvent<'_, StreamedBlocks<'_>>>(&elided.text).ok()?;
    if wire.kind != "user" {
        return None;
    }
    let mut decoded = wire.into_decoded(&elided.text);
    locate_in_original(&elided, &mut decoded);
    decoded.spans.utf8 = true;
    Some(decoded)
}

/// The general reading of a line (see [`decode_line`]).
fn decode_general(line: &[u8]) -> Result<Decoded, DecodeError> {
    // A line that is UTF-8 (checked at SIMD speed) is parsed as text: serde then does not
    // check again each string it decodes (std's check, which stops at every non-ASCII
    // character of an assistant's prose), and the verdict is handed to the transcript.
    let text = simdutf8::basic::from_utf8(line).ok();
    // An `assistant` line, two thirds of a busy run's lines, is read by borrowing where it
    // can be (see the `assistant` module).
    if line.starts_with(ASSISTANT_LINE_START)
        && let Some(text) = text
    {
        // The CLI's own shape, read by hand (the `hand` module), else by borrowing.
        if let Some(decoded) = read_assistant_line(text) {
            return Ok(decoded);
        }
        if let Some(mut decoded) = decode_assistant_line(line, text) {
            decoded.spans.utf8 = true;
            return Ok(decoded);
        }
    }
    read_wire(line, text)
}

/// The general reading of a line without the fast reading of `assistant` lines, for the
/// tests that compare the two.
#[cfg(test)]
pub(super) fn general_reading(line: &[u8]) -> Result<Decoded, DecodeError> {
    read_wire(line, simdutf8::basic::from_utf8(line).ok())
}

/// Reads `line` through the wire types of every event; `text` is the line when it is UTF-8.
fn read_wire(line: &[u8], text: Option<&str>) -> Result<Decoded, DecodeError> {
    // Fast path: content blocks are read in place, and a tool result's megabytes are skipped
    // rather than buffered. It is stricter than the general path (where a block with a
    // mistyped field only means "no blocks"), so on any error the line is decoded again the
    // general way, which gives the same event or classifies the error.
    let streamed = match text {
        Some(text) => serde_json::from_str::<WireEvent<'_, StreamedBlocks<'_>>>(text),
        None => serde_json::from_slice(line),
    };
    let decoded = match streamed {
        Ok(wire) => wire.into_decoded(line),
        Err(_) => {
            let wire = match text {
                Some(text) => serde_json::from_str::<WireEvent<'_, WireContent>>(text),
                None => serde_json::from_slice(line),
            };
            let wire = wire.map_err(|e| {
                if e.is_data() {
                    DecodeError::NotAnEvent
                } else {
                    DecodeError::NotJson
                }
            })?;
            wire.into_decoded(line)
        }
    };
    Ok(Decoded {
        spans: EventSpans {
            utf8: text.is_some(),
            ..decoded.spans
        },
        ..decoded
    })
}

/// Decodes a long line (see [`LONG_LINE_BYTES`]): like [`decode_line`], with two
/// shortcuts for the `user` lines that carry large tool results, which are most of the
/// bytes of a busy run.
///
/// - The CLI's second copy of a tool's output, the top-level `tool_use_result` that follows
///   the message, is neither read nor checked. coder reads a tool result from the message;
///   the copy is about half of every large line.
/// - Long strings (a tool result's text) are located by their quotes alone and left out of
///   the parse: their escapes are not decoded, so they cost a search for
///   quotes rather than a JSON string scan, several times slower on text with a newline
///   every few dozen bytes.
///
/// Neither shortcut checks what it skips. Since a long line is never recorded whole,
/// checking its syntax protects nothing, and the content that is searched for denials is
/// decoded in full when a denial marker is found in it. Any other line, or a head that does
/// not parse, is decoded the general way.
pub fn decode_long_line(line: &[u8]) -> Result<Decoded, DecodeError> {
    const COPY_KEY: &[u8] = br#""tool_use_result":"#;
    // The first `,"tool_use_result":` outside a string, found by the scan of the strings
    // themselves (a search of its own read the megabytes of the message once more). The
    // head is parsed with the object closed in place of the key's comma, which succeeds
    // only if the key is at the top level.
    if let Some((mut elided, copy_found)) =
        Elided::unchecked_head(line, ELIDED_STRING_BYTES, Some(COPY_KEY))
    {
        if copy_found {
            elided.text.push(b'}');
        }
        let wire = serde_json::from_slice::<WireEvent<'_, StreamedBlocks<'_>>>(&elided.text);
        if let Ok(wire) = wire
            && wire.kind == "user"
        {
            let mut decoded = wire.into_decoded(&elided.text);
            locate_in_original(&elided, &mut decoded);
            return Ok(decoded);
        }
    }
    decode_general(line)
}

/// Strings at least this long are left out of the parse of a long line.
const ELIDED_STRING_BYTES: usize = 1024;

/// Strings at least this long are left out of the parse of a `user` line recorded whole
/// (see [`decode_user_line`]).
const CHECKED_ELIDED_STRING_BYTES: usize = 64;

/// How every `user` line the CLI prints begins.
const USER_LINE_START: &[u8] = br#"{"type":"user","#;

/// Moves the spans of `decoded`, found in the copy, to the original.
fn locate_in_original(elided: &Elided, decoded: &mut Decoded) {
    let spans = &mut decoded.spans;
    for span in [
        &mut spans.uuid,
        &mut spans.parent_tool_use_id,
        &mut spans.usage,
    ]
    .into_iter()
    .flatten()
    {
        elided.original_range(span);
    }
    if let Event::User { tool_results } = &mut decoded.event {
        for span in tool_results.iter_mut().filter_map(|r| r.content.as_mut()) {
            elided.original_range(span);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Wire types: the JSON shapes, with everything coder does not read skipped.

#[derive(Deserialize)]
struct WireEvent<'a, C> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    uuid: Option<&'a RawValue>,
    #[serde(default, borrow)]
    parent_tool_use_id: Option<&'a RawValue>,
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    // system/init
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    claude_code_version: Option<String>,
    #[serde(default)]
    mcp_servers: Option<Vec<WireMcpServer>>,
    // system/api_retry
    #[serde(default)]
    attempt: Option<u64>,
    #[serde(default)]
    error_status: Option<serde_json::Value>,
    // assistant (synthetic) and api_retry
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    api_error_status: Option<serde_json::Value>,
    #[serde(default)]
    api_error_type: Option<String>,
    #[serde(default = "none", borrow)]
    message: Option<WireMessage<'a, C>>,
    // result
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default)]
    result: Option<serde_json::Value>,
    #[serde(default)]
    num_turns: Option<u64>,
    #[serde(default)]
    terminal_reason: Option<String>,
    #[serde(default)]
    errors: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    structured_output: Option<serde_json::Value>,
    #[serde(default, borrow)]
    usage: Option<&'a RawValue>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    duration_api_ms: Option<u64>,
    #[serde(default)]
    total_cost_usd: Option<f64>,
}

#[derive(Deserialize)]
struct WireMessage<'a, C> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default = "none")]
    content: Option<C>,
    #[serde(default, borrow)]
    usage: Option<&'a RawValue>,
}

/// A message's content: its blocks, if it has any.
trait ContentBlocks<'a> {
    type Content: ContentSpan;
    fn into_blocks(self) -> Vec<WireBlock<Self::Content>>;
}

/// A tool result's content as read: located in the line, or skipped.
trait ContentSpan {
    fn span(&self, line: &[u8]) -> Option<Range<usize>>;
}

impl ContentSpan for &RawValue {
    fn span(&self, line: &[u8]) -> Option<Range<usize>> {
        span_in(line, self)
    }
}

impl ContentSpan for IgnoredAny {
    fn span(&self, _: &[u8]) -> Option<Range<usize>> {
        None
    }
}

/// The general reading of a message's content: an array of blocks or, failing that,
/// anything else (a user message whose content is a plain string). Serde buffers the
/// whole value to try the variants in turn.
#[derive(Deserialize)]
#[serde(untagged)]
enum WireContent {
    Blocks(Vec<WireBlock<IgnoredAny>>),
    Text(IgnoredAny),
}

impl ContentBlocks<'_> for WireContent {
    type Content = IgnoredAny;

    fn into_blocks(self) -> Vec<WireBlock<IgnoredAny>> {
        match self {
            WireContent::Blocks(blocks) => blocks,
            WireContent::Text(_) => Vec::new(),
        }
    }
}

/// The fast reading of a message's content: an array is read block by block as it is
/// parsed; any other value yields no blocks. Fails where a block does not fit
/// [`WireBlock`], which [`WireContent`] would read as "no blocks". A tool result's content
/// is located in the line (borrowed), not copied.
type StreamedBlocks<'a> = ArrayOrNothing<WireBlock<&'a RawValue>>;

impl<'a> ContentBlocks<'a> for StreamedBlocks<'a> {
    type Content = &'a RawValue;

    fn into_blocks(self) -> Vec<WireBlock<&'a RawValue>> {
        self.0
    }
}

/// One entry of `system/init`'s `mcp_servers`.
#[derive(Deserialize)]
struct WireMcpServer {
    #[serde(default)]
    name: String,
    #[serde(default)]
    status: String,
}

#[derive(Deserialize)]
struct WireBlock<C> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<serde_json::Value>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    is_error: Option<bool>,
    // tool_result content can be megabytes: never materialised.
    #[serde(default = "none")]
    content: Option<C>,
}

/// The default of an optional field of generic type (`#[serde(default)]` would require the
/// type itself to implement `Default`).
fn none<T>() -> Option<T> {
    None
}

impl<'a, C: ContentBlocks<'a>> WireEvent<'a, C> {
    fn into_decoded(self, line: &[u8]) -> Decoded {
        let message_usage = self.message.as_ref().and_then(|m| m.usage);
        let usage_raw = self
            .usage
            .or(message_usage.filter(|_| self.kind == "assistant"));
        Decoded {
            spans: EventSpans {
                uuid: string_span_in(line, self.uuid),
                parent_tool_use_id: string_span_in(line, self.parent_tool_use_id),
                usage: usage_raw.and_then(|raw| span_in(line, raw)),
                utf8: false,
            },
            event: self.into_event(line),
        }
    }

    fn into_event(self, line: &[u8]) -> Event {
        match (&*self.kind, self.subtype.as_deref()) {
            ("system", Some("init")) => Event::Init {
                session_id: self.session_id,
                model: self.model,
                cli_version: self.claude_code_version,
                mcp_failed: self
                    .mcp_servers
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|s| s.status != "connected")
                    .map(|s| s.name)
                    .collect(),
            },
            ("system", Some("api_retry")) => Event::ApiRetry {
                attempt: self.attempt,
                error_status: status_code(self.error_status),
                error: string_of(self.error)
                    .as_deref()
                    .map(UpstreamErrorType::parse),
            },
            ("assistant", _) => Event::Assistant(self.assistant_event()),
            ("user", _) => Event::User {
                tool_results: self.tool_results(line),
            },
            ("result", _) => Event::Result(self.result_event()),
            (kind, _) => Event::Other {
                kind: kind.to_owned(),
                subtype: self.subtype,
                session_id: self.session_id,
            },
        }
    }

    /// An assistant event: its texts and tool calls, and the error the CLI set on it.
    fn assistant_event(self) -> AssistantEvent {
        let mut event = AssistantEvent {
            session_id: self.session_id,
            error: string_of(self.error)
                .as_deref()
                .map(UpstreamErrorType::parse),
            api_error_status: status_code(self.api_error_status),
            ..AssistantEvent::default()
        };
        let Some(message) = self.message else {
            return event;
        };
        event.message_id = message.id.clone();
        event.model = message.model.clone();
        event.usage = usage_of(message.usage);
        for block in message.blocks() {
            match block.kind.as_deref() {
                Some("text") => event.texts.extend(block.text),
                Some("tool_use") => event.tool_uses.push(tool_use(block)),
                _ => {}
            }
        }
        event
    }

    /// A user event's tool results, their content as spans of `line`.
    fn tool_results(self, line: &[u8]) -> Vec<ToolResult> {
        let Some(message) = self.message else {
            return Vec::new();
        };
        message
            .blocks()
            .filter(|b| b.kind.as_deref() == Some("tool_result"))
            .map(|b| ToolResult {
                content: b.content.as_ref().and_then(|c| c.span(line)),
                tool_use_id: b.tool_use_id.unwrap_or_default(),
                is_error: b.is_error.unwrap_or(false),
            })
            .collect()
    }

    /// The run's result event.
    fn result_event(self) -> ResultEvent {
        ResultEvent {
            subtype: self.subtype.as_deref().map(ResultSubtype::parse),
            is_error: self.is_error.unwrap_or(false),
            result: string_of(self.result),
            session_id: self.session_id,
            num_turns: self.num_turns,
            terminal_reason: self.terminal_reason.as_deref().map(TerminalReason::parse),
            api_error_status: status_code(self.api_error_status),
            api_error_type: self.api_error_type.as_deref().map(UpstreamErrorType::parse),
            errors: self
                .errors
                .unwrap_or_default()
                .into_iter()
                .filter_map(|e| string_of(Some(e)))
                .collect(),
            structured_output: self.structured_output.filter(|v| !v.is_null()),
            usage: usage_of(self.usage),
            duration_ms: self.duration_ms,
            duration_api_ms: self.duration_api_ms,
            total_cost_usd: self.total_cost_usd,
        }
    }
}

/// An assistant's `tool_use` block: its one-line summary and path, and its input where
/// coder reads it (the structured-answer tool's, and coder's own tools').
fn tool_use<C>(block: WireBlock<C>) -> ToolUse {
    let name = block.name.as_deref().unwrap_or("?");
    let (detail, path) = summary_detail_and_path(block.input.as_ref());
    let summary = tool_summary(name, detail);
    let path = path.map(str::to_owned);
    let structured = name == STRUCTURED_TOOL;
    let ours = block
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with(CODER_TOOL_PREFIX));
    ToolUse {
        summary,
        path,
        structured_input: structured.then(|| block.input.clone()).flatten(),
        input: block.input.filter(|_| ours),
        id: block.id.unwrap_or_default(),
        name: block.name.unwrap_or_else(|| "?".to_owned()),
    }
}

impl<'a, C: ContentBlocks<'a>> WireMessage<'a, C> {
    fn blocks(self) -> impl Iterator<Item = WireBlock<C::Content>> {
        self.content
            .map(ContentBlocks::into_blocks)
            .unwrap_or_default()
            .into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::event::*;

    #[test]
    fn decodes_init_result_and_synthetic_error() {
        let init = br#"{"type":"system","subtype":"init","session_id":"s1","model":"glm-4.7","claude_code_version":"2.1.330","mcp_servers":[{"name":"coder","status":"failed"},{"name":"ok","status":"connected"}]}"#;
        assert_eq!(
            decode_event(init).unwrap(),
            Event::Init {
                session_id: Some("s1".into()),
                model: Some("glm-4.7".into()),
                cli_version: Some("2.1.330".into()),
                mcp_failed: vec!["coder".into()],
            }
        );
        let result = br#"{"duration_api_ms":0,"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":500,"api_error_type":"api_error","result":"API Error: 500","session_id":"s1"}"#;
        let Event::Result(r) = decode_event(result).unwrap() else {
            panic!("not a result")
        };
        assert!(r.is_error);
        assert_eq!(r.api_error_status, Some(500));
        assert_eq!(r.terminal_reason, Some(TerminalReason::ApiError));
        let synthetic = br#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error"}]},"error":"rate_limit","api_error_status":429}"#;
        let Event::Assistant(a) = decode_event(synthetic).unwrap() else {
            panic!("not assistant")
        };
        assert!(a.is_synthetic());
        assert_eq!(a.api_error_status, Some(429));
        assert_eq!(a.error, Some(UpstreamErrorType::RateLimit));
    }

    #[test]
    fn decodes_tool_use_and_tool_result() {
        let line = br#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"npm test\nmore"}}]}}"#;
        let Event::Assistant(a) = decode_event(line).unwrap() else {
            panic!()
        };
        assert_eq!(a.tool_uses[0].summary, "Bash(npm test…)");
        let line = br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"big"}],"is_error":true}]}}"#;
        let Event::User { tool_results } = decode_event(line).unwrap() else {
            panic!()
        };
        assert_eq!(tool_results.len(), 1);
        assert_eq!(tool_results[0].tool_use_id, "t1");
        assert!(tool_results[0].is_error);
        let content = tool_results[0].content.clone().unwrap();
        assert_eq!(&line[content], br#"[{"type":"text","text":"big"}]"#);
        let line = br#"{"type":"user","message":{"role":"user","content":"plain"}}"#;
        assert_eq!(
            decode_event(line).unwrap(),
            Event::User {
                tool_results: vec![]
            }
        );
    }

    #[test]
    fn locates_the_fields_a_transcript_lifts() {
        let text = |line: &[u8], span: Option<Range<usize>>| {
            span.map(|s| String::from_utf8(line[s].to_vec()).unwrap())
        };
        let line = br#"{"type":"assistant","uuid":"u\"1","parent_tool_use_id":null,"message":{"id":"m1","usage":{"input_tokens":3,"output_tokens":4},"content":[]}}"#;
        let decoded = decode_line(line).unwrap();
        assert_eq!(text(line, decoded.spans.uuid).as_deref(), Some(r#""u\"1""#));
        assert_eq!(decoded.spans.parent_tool_use_id, None);
        assert_eq!(
            text(line, decoded.spans.usage).as_deref(),
            Some(r#"{"input_tokens":3,"output_tokens":4}"#)
        );
        let Event::Assistant(a) = decoded.event else {
            panic!()
        };
        assert_eq!(a.usage.unwrap().output_tokens, 4);

        // A result's usage is its own; a tool result's message usage is not lifted.
        let line =
            br#"{"type":"result","usage":{"input_tokens":9},"uuid":7,"parent_tool_use_id":"t1"}"#;
        let decoded = decode_line(line).unwrap();
        assert_eq!(
            text(line, decoded.spans.usage).as_deref(),
            Some(r#"{"input_tokens":9}"#)
        );
        assert_eq!(decoded.spans.uuid, None);
        assert_eq!(
            text(line, decoded.spans.parent_tool_use_id).as_deref(),
            Some(r#""t1""#)
        );
        let line = br#"{"type":"user","message":{"usage":{"input_tokens":1},"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}"#;
        let decoded = decode_line(line).unwrap();
        assert_eq!(decoded.spans.usage, None);
        let Event::User { tool_results } = decoded.event else {
            panic!()
        };
        assert_eq!(
            text(line, tool_results[0].content.clone()).as_deref(),
            Some(r#""ok""#)
        );
    }

    #[test]
    fn long_lines_are_read_up_to_the_copy_of_the_tool_output() {
        let line = br#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"a \",\"tool_use_result\":"}]},"uuid":"u1","tool_use_result":{"stdout":"a \",\"tool_use_result\":"},"tool_result_meta":[]}"#;
        let long = decode_long_line;
        let decoded = long(line).unwrap();
        assert_eq!(decoded, unchecked(decode_general(line).unwrap()));
        let Event::User { tool_results } = &decoded.event else {
            panic!()
        };
        let content = tool_results[0].content.clone().unwrap();
        assert_eq!(&line[content], br#""a \",\"tool_use_result\":""#);
        assert_eq!(&line[decoded.spans.uuid.unwrap()], br#""u1""#);

        // The copy is not checked...
        let broken =
            br#"{"type":"user","message":{"content":[]},"tool_use_result":{"stdout":"\q"}}"#;
        assert!(long(broken).is_ok());
        assert_eq!(decode_general(broken), Err(DecodeError::NotJson));
        // ...but everything before it is, and a key of that name below the top level is
        // not taken for it.
        let broken = br#"{"type":"user","message":{"content":"\q"},"tool_use_result":{}}"#;
        assert_eq!(long(broken), Err(DecodeError::NotJson));
        let nested = br#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","x":1,"tool_use_result":2}]}}"#;
        assert_eq!(long(nested), decode_general(nested));
        let not_user =
            br#"{"type":"assistant","message":{"id":"m1"},"tool_use_result":1,"session_id":"s"}"#;
        assert_eq!(long(not_user), decode_general(not_user));
    }

    #[test]
    fn long_strings_are_skipped_by_their_quotes_with_the_same_result() {
        let contents = [
            "x".repeat(3000),
            // Escaped quotes and backslashes, one just before the closing quote.
            format!("a\\\"b\\\\{}\\\\", "\\n\\\"".repeat(600)),
            format!("{}\\u00e9\\\\\\\"", "é".repeat(700)),
            "short \\\" one".to_owned(),
            "y".repeat(ELIDED_STRING_BYTES - 1),
            "z".repeat(ELIDED_STRING_BYTES),
        ];
        for content in &contents {
            let line = format!(
                r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"t1","type":"tool_result","content":"{content}","is_error":true}},{{"type":"tool_result","tool_use_id":"t2","content":[{{"type":"text","text":"{content}"}}]}}]}},"parent_tool_use_id":"p1","session_id":"s","uuid":"u1","tool_use_result":{{"stdout":"{content}"}}}}"#
            );
            let line = line.as_bytes();
            let long = decode_long_line(line).unwrap();
            // The general reading, without the copy that it would check.
            let cut = line.len() - r#","tool_use_result":{"stdout":""}}"#.len() - content.len();
            let mut head = line[..cut].to_vec();
            head.push(b'}');
            assert_eq!(long, unchecked(decode_general(&head).unwrap()), "{content}");
            let Event::User { tool_results } = &long.event else {
                panic!()
            };
            let text = |span: Option<Range<usize>>| &line[span.unwrap()];
            assert_eq!(
                text(tool_results[0].content.clone()),
                format!(r#""{content}""#).as_bytes()
            );
            assert!(text(tool_results[1].content.clone()).starts_with(br#"[{"type":"text""#));
            assert_eq!(text(long.spans.uuid.clone()), br#""u1""#);
            assert_eq!(text(long.spans.parent_tool_use_id.clone()), br#""p1""#);
        }
        // What a skipped string holds is not checked; an unclosed string is.
        let skipped = format!(
            r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"\q{}"}}]}}}}"#,
            "x".repeat(ELIDED_STRING_BYTES)
        );
        assert!(decode_long_line(skipped.as_bytes()).is_ok());
        assert_eq!(
            decode_general(skipped.as_bytes()),
            Err(DecodeError::NotJson)
        );
        let unclosed = format!(
            r#"{{"type":"user","message":{{"content":"{}"#,
            "x".repeat(5000)
        );
        assert_eq!(
            decode_long_line(unclosed.as_bytes()),
            Err(DecodeError::NotJson)
        );
    }

    use crate::stream::Xorshift;

    impl Xorshift {
        /// JSON string contents (escaped): plain text, escapes of every kind, quotes and
        /// backslashes in runs, raw UTF-8; short or long.
        fn json_text(&mut self) -> String {
            const PIECES: [&str; 12] = [
                "fn main() {",
                r"\n",
                r#"\""#,
                r"\\",
                r"\\\\",
                r#"\\\""#,
                r"\t",
                r"\u00e9",
                "é",
                "𝄞",
                " ",
                r"\/",
            ];
            let len = [0, 3, 40, 400, 3000][self.below(5)];
            (0..len).map(|_| PIECES[self.below(PIECES.len())]).collect()
        }
    }

    #[test]
    fn the_elided_reading_of_long_lines_agrees_with_the_general_one() {
        let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
        for case in 0..300 {
            let mut blocks = Vec::new();
            for b in 0..1 + rng.below(3) {
                let text = rng.json_text();
                let content = match rng.below(3) {
                    0 => format!(r#""{text}""#),
                    1 => format!(r#"[{{"type":"text","text":"{text}"}},{{"type":"image"}}]"#),
                    _ => format!(r#"{{"odd":"{text}"}}"#),
                };
                let error = [",\"is_error\":true", "", ",\"is_error\":false"][rng.below(3)];
                blocks.push(format!(
                    r#"{{"tool_use_id":"t{b}","type":"tool_result","content":{content}{error}}}"#
                ));
            }
            let head = format!(
                r#"{{"type":"user","message":{{"role":"user","content":[{}]}},"parent_tool_use_id":"p{}","session_id":"s","uuid":"u{case}"}}"#,
                blocks.join(","),
                rng.below(1000),
            );
            let copy = format!(r#","tool_use_result":{{"stdout":"{}"}}}}"#, rng.json_text());
            let line = format!("{}{copy}", &head[..head.len() - 1]);
            let general = decode_general(head.as_bytes()).map(unchecked);
            let elided = decode_long_line(line.as_bytes());
            assert_eq!(elided, general, "case {case}: {line}");
            assert!(elided.is_ok(), "case {case}: {line}");
            // And it was read the fast way: the copy without long strings is valid JSON
            // (a wrong guess at a string's end would leave it broken, and the fallback to
            // the general reading would hide that).
            let copy = Elided::unchecked(head.as_bytes(), ELIDED_STRING_BYTES).unwrap();
            assert!(
                serde_json::from_slice::<IgnoredAny>(&copy.text).is_ok(),
                "case {case}"
            );
            // The spans point at the same bytes in the line as in its head.
            if let Ok(Decoded {
                event: Event::User { tool_results },
                ..
            }) = &elided
            {
                for result in tool_results {
                    let span = result.content.clone().unwrap();
                    assert!(
                        serde_json::from_slice::<serde_json::Value>(&line.as_bytes()[span]).is_ok()
                    );
                }
            }
        }
    }

    /// A decoded line without its UTF-8 verdict: the reading of a long line, which is never
    /// recorded whole, does not check it.
    fn unchecked(mut decoded: Decoded) -> Decoded {
        decoded.spans.utf8 = false;
        decoded
    }

    /// The general reading, with the UTF-8 check the `user` path hands on.
    fn general_checked(line: &[u8]) -> Result<Decoded, DecodeError> {
        decode_general(line).map(|mut decoded| {
            decoded.spans.utf8 = true;
            decoded
        })
    }

    #[test]
    fn user_lines_read_with_their_long_strings_left_out_agree_with_the_general_reading() {
        let mut rng = Xorshift(0x5851_f42d_4c95_7f2d);
        for case in 0..400 {
            let mut blocks = Vec::new();
            for b in 0..1 + rng.below(3) {
                let text = rng.json_text();
                let content = match rng.below(4) {
                    0 => format!(r#""{text}""#),
                    1 => format!(r#"[{{"type":"text","text":"{text}"}},{{"type":"image"}}]"#),
                    2 => format!(r#"{{"odd":"{text}"}}"#),
                    _ => "7".to_owned(),
                };
                let error = [",\"is_error\":true", "", ",\"is_error\":false"][rng.below(3)];
                // An id long enough to be left out, were it not read.
                let id = format!("t{b}{}", "i".repeat(rng.below(3) * 40));
                blocks.push(format!(
                    r#"{{"tool_use_id":"{id}","type":"tool_result","content":{content}{error}}}"#
                ));
            }
            let line = format!(
                r#"{{"type":"user","message":{{"role":"user","content":[{}]}},"parent_tool_use_id":"p{}","session_id":"s","uuid":"u{case}","tool_use_result":{{"stdout":"{}","stderr":"","interrupted":false}}}}"#,
                blocks.join(","),
                rng.below(1000),
                rng.json_text(),
            );
            let line = line.as_bytes();
            let fast = decode_user_line(line);
            assert!(fast.is_some(), "case {case}: not read the fast way");
            assert_eq!(fast.map(Ok), Some(general_checked(line)), "case {case}");
            assert_eq!(decode_line(line), general_checked(line), "case {case}");
            let Ok(Decoded {
                event: Event::User { tool_results },
                spans,
            }) = decode_line(line)
            else {
                panic!("case {case}: not a user event")
            };
            assert!(!tool_results.is_empty() && spans.uuid.is_some());
        }
    }

    #[test]
    fn user_lines_the_fast_reading_cannot_vouch_for_are_read_the_general_way() {
        let long = "x".repeat(CHECKED_ELIDED_STRING_BYTES * 2);
        let line = |content: &[u8]| {
            let mut line = br#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":""#.to_vec();
            line.extend_from_slice(content);
            line.extend_from_slice(br#""}]},"uuid":"u1"}"#);
            line
        };
        for (content, general) in [
            // Invalid in any string: the general reading refuses the line too.
            (format!(r"{long}\q"), Err(DecodeError::NotJson)),
            (format!(r"{long}\u12"), Err(DecodeError::NotJson)),
            (
                format!("{long}\tafter a raw tab"),
                Err(DecodeError::NotJson),
            ),
            (format!("{long}\u{1}"), Err(DecodeError::NotJson)),
            (format!(r"{long}\"), Err(DecodeError::NotJson)),
            // A lone surrogate, refused in a `String` but not in a skipped value.
            (format!(r"{long}\uD800"), Ok(())),
            (format!(r"\uDC00{long}"), Ok(())),
            (format!(r"{long}\uD800\n"), Ok(())),
        ] {
            let line = line(content.as_bytes());
            assert_eq!(decode_user_line(&line), None, "{content}");
            assert_eq!(decode_line(&line), decode_general(&line), "{content}");
            assert_eq!(decode_line(&line).map(|_| ()), general, "{content}");
        }
        // Bytes that are not UTF-8: in a tool result's content, the line is not JSON (as
        // it always was); in a string nothing reads (the CLI's copy of the output), the
        // line still decodes, as it always has, but is not vouched for as UTF-8.
        let mut content = long.as_bytes().to_vec();
        content.extend_from_slice(&[0xff, 0xfe, b' ', 0xc3]);
        let invalid = line(&content);
        assert_eq!(decode_user_line(&invalid), None);
        assert_eq!(decode_line(&invalid), Err(DecodeError::NotJson));
        let mut invalid = line(b"ok");
        invalid.truncate(invalid.len() - 1);
        invalid.extend_from_slice(br#","tool_use_result":{"stdout":""#);
        invalid.extend_from_slice(&content);
        invalid.extend_from_slice(br#""}}"#);
        assert_eq!(decode_user_line(&invalid), None);
        let decoded = decode_line(&invalid).unwrap();
        assert!(!decoded.spans.utf8);
        assert_eq!(Ok(decoded), decode_general(&invalid));
        // Not a user event after all, or its keys in another order: the general reading.
        let other = br#"{"type":"user","type":"assistant","message":{"id":"m1","content":[]}}"#;
        assert_eq!(decode_user_line(other), None);
        assert_eq!(decode_line(other), decode_general(other));
        let reordered = br#"{"uuid":"u1","type":"user","message":{"content":[]}}"#;
        assert_eq!(decode_line(reordered), decode_general(reordered));
        // A key spelled with escapes is still read.
        let escaped = format!(
            r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool\u005fuse_id":"{long}","content":"{long}"}}]}}}}"#
        );
        let decoded = decode_user_line(escaped.as_bytes()).unwrap();
        let Event::User { tool_results } = &decoded.event else {
            panic!()
        };
        assert_eq!(tool_results[0].tool_use_id, long);
        assert_eq!(Ok(decoded), general_checked(escaped.as_bytes()));
    }

    #[test]
    fn a_huge_user_line_is_read_the_fast_way() {
        let text = r#"fn main() {\n    println!(\"é\");\n}\n"#.repeat(30_000);
        let line = format!(
            r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"{text}"}}]}},"uuid":"u1","tool_use_result":{{"stdout":"{text}"}}}}"#
        );
        assert!(line.len() > 1_000_000);
        let decoded = decode_user_line(line.as_bytes()).unwrap();
        assert!(decoded.spans.utf8);
        assert_eq!(Ok(decoded), general_checked(line.as_bytes()));
    }

    #[test]
    fn a_block_that_does_not_fit_means_no_blocks() {
        let line = br#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":5},{"type":"tool_use","id":"t1","name":"Bash"}]}}"#;
        let Event::Assistant(a) = decode_event(line).unwrap() else {
            panic!()
        };
        assert_eq!(a.message_id.as_deref(), Some("m1"));
        assert!(a.texts.is_empty() && a.tool_uses.is_empty());
        let line = br#"{"type":"user","message":{"content":{"unexpected":"object"}}}"#;
        assert_eq!(
            decode_event(line).unwrap(),
            Event::User {
                tool_results: vec![]
            }
        );
        // A syntax error inside the content is still an undecodable line.
        let line =
            br#"{"type":"user","message":{"content":[{"type":"tool_result","content":"a\qb"}]}}"#;
        assert_eq!(decode_event(line), Err(DecodeError::NotJson));
    }

    #[test]
    fn classifies_undecodable_lines() {
        assert_eq!(decode_event(b"hello"), Err(DecodeError::NotJson));
        assert_eq!(decode_event(b"\xff"), Err(DecodeError::NotJson));
        assert_eq!(decode_event(b"[1,2]"), Err(DecodeError::NotAnEvent));
        assert_eq!(
            decode_event(br#"{"no":"type"}"#),
            Err(DecodeError::NotAnEvent)
        );
        assert!(matches!(
            decode_event(br#"{"type":"stream_event","event":{}}"#),
            Ok(Event::Other { .. })
        ));
    }
}
