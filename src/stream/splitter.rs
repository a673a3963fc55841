//! The line splitter: raw bytes from a pipe in, complete lines out, never more than a cap
//! for one line.
//!
//! The child's pipes are not trusted: lines can be megabytes long (a tool result holding a
//! whole file), bytes need not be UTF-8, and a crashing child can print anything. So the
//! splitter works on bytes, never allocates more than its cap for one line, and reports an
//! over-long line as truncated instead of growing without bound. Large line buffers are
//! handed back and reused ([`SpareBuffer`]) so a stream of big lines does not allocate per
//! line.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Default cap on one line: 64 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Which of the child's pipes a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pipe {
    Stdout,
    Stderr,
}

/// One complete line produced by [`LineSplitter`], without its `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line's bytes, at most the splitter's cap.
    pub bytes: Vec<u8>,
    /// How many bytes of the line were dropped because it was longer than the cap.
    pub dropped: u64,
}

impl Line {
    /// Whether the line was cut at the cap.
    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }
}

/// Splits a byte stream on `\n`, holding at most `max_line_bytes` of any line.
///
/// Bytes past the cap are counted and discarded until the next newline, so memory stays
/// bounded by the cap however long a line is. A final line without a newline is returned by
/// [`LineSplitter::finish`].
#[derive(Debug)]
pub struct LineSplitter {
    max_line_bytes: usize,
    pending: Vec<u8>,
    dropped: u64,
    spare: Option<Arc<SpareBuffer>>,
}

/// A line that outgrows this takes the [`SpareBuffer`], if one is offered.
const SPARE_TAKEN_AT: usize = 64 * 1024;
/// Smaller buffers are not kept for reuse: the allocator serves them from its heap, cheaply.
const SPARE_MIN_BYTES: usize = 1024 * 1024;
/// Larger buffers are not kept for reuse: one outsized line must not pin its memory for
/// the rest of the run.
const SPARE_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Large line buffers handed back by whoever consumed the lines, for the splitter to fill
/// again.
///
/// A long tool result is one line of megabytes. Built in a fresh buffer, each such line
/// faults in every page of it, and freeing it on another thread unmaps them again, which
/// interrupts the thread reading the pipe: together a third of that thread's time on a
/// fast stream. Reusing buffers avoids both, at the price of keeping them resident, so
/// few are kept: a buffer offered while more than two large ones exist (a
/// line being filled and one being decoded) is freed, and so is one of more than 16 MiB.
/// The supervisor's queue counts a line by its buffer's capacity, not its length, so a
/// short line in a reused buffer cannot let a third one fill up meanwhile.
#[derive(Debug, Default)]
pub struct SpareBuffer {
    slot: Mutex<Option<Vec<u8>>>,
    /// Buffers of at least [`SPARE_MIN_BYTES`] alive, wherever they are.
    large: AtomicUsize,
}

/// How many large line buffers may be kept for reuse.
const LARGE_BUFFERS: usize = 2;

impl SpareBuffer {
    /// Offers the buffer of a consumed line. It is kept if it is worth reusing and there is
    /// room; otherwise it is freed.
    pub fn offer(&self, mut bytes: Vec<u8>) {
        if bytes.capacity() < SPARE_MIN_BYTES {
            return;
        }
        let kept = bytes.capacity() <= SPARE_MAX_BYTES
            && self.large.load(Ordering::Relaxed) <= LARGE_BUFFERS
            && match self.slot.lock() {
                Ok(mut slot) if slot.is_none() => {
                    bytes.clear();
                    *slot = Some(bytes);
                    true
                }
                _ => false,
            };
        if !kept {
            let _ = self
                .large
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    fn take(&self) -> Option<Vec<u8>> {
        self.slot.lock().ok()?.take()
    }

    /// Counts a line buffer that has just grown large.
    fn grown(&self) {
        self.large.fetch_add(1, Ordering::Relaxed);
    }
}

impl LineSplitter {
    pub fn new(max_line_bytes: usize) -> Self {
        LineSplitter {
            max_line_bytes: max_line_bytes.max(1),
            pending: Vec::new(),
            dropped: 0,
            spare: None,
        }
    }

    /// A splitter that builds long lines in the buffers offered to `spare`.
    pub fn with_spare(max_line_bytes: usize, spare: Arc<SpareBuffer>) -> Self {
        LineSplitter {
            spare: Some(spare),
            ..LineSplitter::new(max_line_bytes)
        }
    }

    /// Feeds a chunk, calling `emit` for every line it completes.
    pub fn feed(&mut self, mut chunk: &[u8], mut emit: impl FnMut(Line)) {
        while let Some(pos) = memchr::memchr(b'\n', chunk) {
            self.append(&chunk[..pos]);
            emit(self.take());
            chunk = &chunk[pos + 1..];
        }
        self.append(chunk);
    }

    /// Ends the stream: returns the unterminated last line, if there is one.
    pub fn finish(&mut self) -> Option<Line> {
        if self.pending.is_empty() && self.dropped == 0 {
            None
        } else {
            Some(self.take())
        }
    }

    /// The buffer of the line being built, with room for `chunk` more bytes, to read
    /// the pipe straight into: only once the line is long (a megabyte tool result), and
    /// while `chunk` more bytes stay under the cap. Copying every read of such a line from
    /// the read buffer cost the reader as much as the read itself. After the read, call
    /// [`LineSplitter::feed_read_into`].
    pub fn read_into(&mut self, chunk: usize) -> Option<&mut Vec<u8>> {
        let room = self.max_line_bytes.saturating_sub(self.pending.len());
        if self.pending.len() < SPARE_TAKEN_AT || room < chunk || self.dropped > 0 {
            return None;
        }
        self.reserve(chunk);
        Some(&mut self.pending)
    }

    /// Takes the bytes read into the line's buffer (see [`LineSplitter::read_into`]) from
    /// `from` on, calling `emit` for every line they complete. What follows the first
    /// newline among them is moved to `scratch` (at least as long as the read) and fed
    /// from there.
    pub fn feed_read_into(&mut self, from: usize, scratch: &mut [u8], mut emit: impl FnMut(Line)) {
        let Some(newline) = memchr::memchr(b'\n', &self.pending[from..]) else {
            return;
        };
        let end = from + newline;
        let rest = self.pending.len() - end - 1;
        scratch[..rest].copy_from_slice(&self.pending[end + 1..]);
        self.pending.truncate(end);
        emit(self.take());
        self.feed(&scratch[..rest], emit);
    }

    fn append(&mut self, bytes: &[u8]) {
        let room = self.max_line_bytes.saturating_sub(self.pending.len());
        let kept = bytes.len().min(room);
        self.reserve(kept);
        self.pending.extend_from_slice(&bytes[..kept]);
        self.dropped += (bytes.len() - kept) as u64;
    }

    /// Makes room for `more` bytes of the line, in the spare buffer once it is long.
    fn reserve(&mut self, more: usize) {
        let needed = self.pending.len() + more;
        if needed <= self.pending.capacity() {
            return;
        }
        if needed > SPARE_TAKEN_AT {
            self.reuse_spare();
        }
        let small = self.pending.capacity() < SPARE_MIN_BYTES;
        self.pending.reserve(more);
        if small
            && self.pending.capacity() >= SPARE_MIN_BYTES
            && let Some(spare) = &self.spare
        {
            spare.grown();
        }
    }

    /// Moves the line being built into the spare buffer, if one is offered and larger.
    fn reuse_spare(&mut self) {
        let Some(spare) = &self.spare else {
            return;
        };
        let Some(mut reused) = spare.take() else {
            return;
        };
        if reused.capacity() > self.pending.capacity() {
            reused.extend_from_slice(&self.pending);
            reused = std::mem::replace(&mut self.pending, reused);
        }
        // The smaller of the two goes back (or is freed, if it is not worth keeping).
        spare.offer(reused);
    }

    fn take(&mut self) -> Line {
        let line = Line {
            bytes: std::mem::take(&mut self.pending),
            dropped: self.dropped,
        };
        self.dropped = 0;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(max: usize, chunks: &[&[u8]]) -> Vec<Line> {
        let mut splitter = LineSplitter::new(max);
        let mut lines = Vec::new();
        for chunk in chunks {
            splitter.feed(chunk, |l| lines.push(l));
        }
        lines.extend(splitter.finish());
        lines
    }

    #[test]
    fn splits_lines_across_chunk_boundaries() {
        let lines = split_all(100, &[b"ab", b"c\nde", b"f\n\ng"]);
        let texts: Vec<&[u8]> = lines.iter().map(|l| l.bytes.as_slice()).collect();
        assert_eq!(texts, vec![&b"abc"[..], b"def", b"", b"g"]);
        assert!(lines.iter().all(|l| !l.truncated()));
    }

    #[test]
    fn long_lines_are_built_in_the_buffer_handed_back() {
        let spare = Arc::new(SpareBuffer::default());
        let mut splitter = LineSplitter::with_spare(usize::MAX, spare.clone());
        let mut feed = |bytes: &[u8]| {
            let mut lines = Vec::new();
            for chunk in bytes.chunks(256 << 10) {
                splitter.feed(chunk, |line| lines.push(line));
            }
            lines
        };
        let long: Vec<u8> = (0..3 << 20).map(|i| b'a' + (i % 26) as u8).collect();
        let stream = [&long[..], b"\n"].concat();

        let first = feed(&stream).pop().unwrap();
        assert_eq!(first.bytes, long);
        let buffer = first.bytes.as_ptr();
        spare.offer(first.bytes);
        // A short line leaves it alone; the next long one is built in it.
        let lines = feed(&[b"short\n", &stream[..]].concat());
        assert_eq!(lines[0].bytes, b"short");
        assert_eq!(lines[1].bytes, long);
        assert_eq!(lines[1].bytes.as_ptr(), buffer);
    }

    #[test]
    fn lines_read_straight_into_their_buffer_are_the_same_lines() {
        let mut stream = Vec::new();
        for (i, len) in [10, 200_000, 5, 70_000, 1_000_000, 3, 0, 300_000, 65_536]
            .iter()
            .enumerate()
        {
            stream.extend((0..*len).map(|j| b'a' + ((i + j) % 26) as u8));
            stream.push(b'\n');
        }
        stream.extend_from_slice(b"unterminated");
        for cap in [usize::MAX, 250_000] {
            for chunk in [1000, 4096, 65_536, 100_003] {
                let chunks: Vec<&[u8]> = stream.chunks(chunk).collect();
                let expected = split_all(cap, &chunks);
                let spare = Arc::new(SpareBuffer::default());
                let mut splitter = LineSplitter::with_spare(cap, spare);
                let mut lines = Vec::new();
                let mut scratch = vec![0; chunk];
                let mut straight = 0;
                for read in chunks {
                    match splitter.read_into(chunk) {
                        Some(line) => {
                            straight += 1;
                            let from = line.len();
                            line.extend_from_slice(read);
                            splitter.feed_read_into(from, &mut scratch, |l| lines.push(l));
                        }
                        None => splitter.feed(read, |l| lines.push(l)),
                    }
                }
                lines.extend(splitter.finish());
                assert_eq!(lines, expected, "cap {cap}, reads of {chunk}");
                assert!(straight > 0, "cap {cap}, reads of {chunk}");
            }
        }
    }

    #[test]
    fn spare_buffers_are_few_and_large() {
        let spare = SpareBuffer::default();
        spare.offer(Vec::with_capacity(SPARE_MIN_BYTES - 1));
        assert!(spare.take().is_none(), "a small buffer is not kept");
        spare.offer(Vec::with_capacity(SPARE_MAX_BYTES + 1));
        assert!(spare.take().is_none(), "an outsized buffer is not kept");
        let kept = Vec::<u8>::with_capacity(SPARE_MIN_BYTES);
        let kept_at = kept.as_ptr();
        spare.offer(kept);
        spare.offer(Vec::with_capacity(SPARE_MIN_BYTES));
        assert_eq!(spare.take().map(|b| b.as_ptr()), Some(kept_at));
        assert!(spare.take().is_none(), "one buffer is kept at most");
    }

    #[test]
    fn no_trailing_line_after_final_newline() {
        assert_eq!(split_all(100, &[b"a\n"]).len(), 1);
        assert!(split_all(100, &[]).is_empty());
    }

    #[test]
    fn caps_long_lines_and_counts_dropped_bytes() {
        let lines = split_all(4, &[b"abcdef", b"gh\nxy\n"]);
        assert_eq!(lines[0].bytes, b"abcd");
        assert_eq!(lines[0].dropped, 4);
        assert_eq!(lines[1].bytes, b"xy");
        assert_eq!(lines[1].dropped, 0);
    }

    #[test]
    fn the_cap_holds_in_a_reused_buffer() {
        let spare = Arc::new(SpareBuffer::default());
        spare.offer(Vec::with_capacity(4 << 20));
        let cap = 2 << 20;
        let mut splitter = LineSplitter::with_spare(cap, spare);
        let mut lines = Vec::new();
        let long = vec![b'x'; 3 << 20];
        for chunk in [&long[..], b"\nshort\n"].concat().chunks(256 << 10) {
            splitter.feed(chunk, |line| lines.push(line));
        }
        assert_eq!(lines[0].bytes.len(), cap);
        assert!(lines[0].bytes.capacity() >= 4 << 20, "built in the spare");
        assert_eq!(lines[0].dropped, (1 << 20) as u64);
        assert!(lines[0].truncated());
        assert_eq!(lines[1].bytes, b"short");
        assert_eq!(lines[1].dropped, 0);
    }

    #[test]
    fn keeps_invalid_utf8_bytes() {
        let lines = split_all(100, &[b"\xff\xfe\n"]);
        assert_eq!(lines[0].bytes, b"\xff\xfe");
    }
}
