//! The run transcript: one JSON object per line, written as the run happens, so that a run
//! killed at any point (even by SIGKILL) leaves a readable record up to its last written
//! entry.
//!
//! Entries come from two sources: coder itself (`start`, `spawn`, `attempt`, `watchdog`,
//! `kill`, `outcome`) and the child (`event` for each stream-json line, `stderr` and `noise`
//! for everything else). Each has a UTC timestamp, the CLI's own `uuid` as `id` and its
//! `parent_tool_use_id` as `parent_id` where the event has them, and token usage where the
//! event carries it. Credentials are redacted (every JSON spelling, see
//! [`crate::text::redact`]; a line cut at its head loses any piece of a key across the cut)
//! and very long lines are cut, so a transcript is safe to attach to a bug report and cannot
//! grow by a whole tool result per line.
//!
//! Transcripts live in `<state>/runs/<run-id>.jsonl`; the oldest are deleted when there are
//! more than [`Retention::max_runs`] or they take more than [`Retention::max_bytes`]
//! ([`enforce_retention`]). A run does this while its child runs, from the child's first
//! line on, not after its own transcript is finished (on ext4 under load each deleted 64 MB
//! transcript cost 5 to 7 ms on the way to the envelope): it counts its own transcript at
//! its size then and never deletes it, so the transcripts can exceed the cap by at most
//! what the latest run wrote after that, until the next run's retention counts it whole
//! (with runs at once, by what each of them wrote after its own retention).
//! Another live run's transcript is the newest or nearly (it is being written), so it goes
//! last, as before. Each deletion is one `unlink` of a whole file: a run cancelled or
//! killed during its retention leaves no half-deleted transcript, only fewer deleted.
//!
//! A transcript holds the whole conversation, so it is created owner-only (0600, in
//! directories created 0700), never chmod-ed afterwards. It is opened without following a
//! symlink in its last component, and `--transcript` may not lie inside the workspace
//! ([`check_location`]): the agent could otherwise plant a symlink there (or on a
//! directory on its way) and have coder overwrite any file the user can write.

use std::borrow::Cow;
use std::fs::File;
use std::io::{IoSlice, Write};
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::stream::Pipe;
use crate::stream::{Decoded, EventSpans, Line};
use crate::text::redact::{
    Ending, Secrets, awaits_token, redact_continued, redact_cut_tokens_bytes, redact_tokens_bytes,
};

use super::Note;

/// Longest child line kept whole in a transcript.
const MAX_ENTRY_BYTES: usize = crate::stream::LONG_LINE_BYTES;

/// How much of a longer line is kept: enough to see what it was (the event's type, the
/// tool result it carries and the start of its text) without a transcript growing by a
/// tool result per line, or its writer re-escaping megabytes nobody reads.
const LONG_LINE_HEAD_BYTES: usize = 16 * 1024;

/// How many transcripts, and how many bytes of them, to keep.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub max_runs: usize,
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_runs: 200,
            max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// Opens `path` for writing, truncated, created 0600, refusing a symlink as its last
/// component (`O_NOFOLLOW`).
fn open_private(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// Refuses a `--transcript` path that lies inside `workspace` (canonical) lexically or once
/// symlinks in its existing directories are resolved, or whose last component is a
/// symlink. The message says why and what to do.
pub fn check_location(path: &Path, workspace: &Path) -> Result<(), String> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("--transcript {}: {e}", path.display()))?
            .join(path)
    };
    let inside = || {
        format!(
            "--transcript {} lies inside the workspace {}: the agent could replace it, or a \
             directory on its way, with a symlink and make coder overwrite any file; write \
             the transcript outside the workspace",
            path.display(),
            workspace.display()
        )
    };
    let lexical: PathBuf = absolute.components().fold(PathBuf::new(), |mut acc, c| {
        match c {
            std::path::Component::ParentDir => {
                acc.pop();
            }
            std::path::Component::CurDir => {}
            other => acc.push(other),
        }
        acc
    });
    if lexical.starts_with(workspace) {
        return Err(inside());
    }
    if std::fs::symlink_metadata(&absolute).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(format!(
            "--transcript {} is a symlink; coder does not follow one there (it could point \
             at any file): name the real file",
            path.display()
        ));
    }
    // Caught here, not when the run writes it: the run would go on without its record.
    if absolute.is_dir() {
        return Err(format!(
            "--transcript {} is a directory: name the file to write, e.g. {}",
            path.display(),
            path.join("run.jsonl").display()
        ));
    }
    let existing = absolute
        .ancestors()
        .skip(1)
        .find_map(|dir| std::fs::canonicalize(dir).ok());
    if existing.is_some_and(|dir| dir.starts_with(workspace)) {
        return Err(inside());
    }
    // The workspace under another path (a bind mount of it, or of a directory in it).
    if crate::sandbox::root_holding(&absolute, &[workspace.to_path_buf()]).is_some() {
        return Err(inside());
    }
    Ok(())
}

/// The directory transcripts are kept in.
pub fn runs_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("runs")
}

/// An open transcript. Writing never fails the run: the first I/O error disables the
/// transcript and is reported once as a warning.
///
/// Entries are written by a thread of their own, so that formatting, redacting and writing
/// them (a fifth of the work per byte of a fast stream) overlaps with reading and decoding
/// the child's output. They travel in batches: the child's lines are gathered until
/// [`Transcript::flush`] (the supervisor calls it whenever it has handled the lines at
/// hand) or until [`BATCH_BYTES`] of them are waiting, and coder's own entries go out at
/// once. The writer thread writes everything it has taken with one `write` (a `writev`:
/// a long event line that needs no redaction goes from its own buffer, not copied), as
/// soon as nothing more is queued. The queue between the two is short, so memory stays
/// bounded.
///
/// Batches matter on a fast stream: one hand-off (and wake-up) per line cost as much as
/// the writing, and a `write` of each 4 KB entry costs the kernel about twice the time of
/// the same bytes in 64 KB writes, and the file's deletion four times as long (small
/// page-cache folios).
pub struct Transcript {
    path: PathBuf,
    writer: Option<Writer>,
    error: Option<String>,
}

struct Writer {
    queue: SyncSender<Vec<Entry>>,
    thread: JoinHandle<Option<String>>,
    /// Entries not yet handed to the writer thread, and their bytes.
    batch: Vec<Entry>,
    batch_bytes: usize,
}

/// How many batches may wait for the writer thread.
const QUEUED_BATCHES: usize = 4;

/// A batch of the child's lines goes to the writer thread once it holds this many bytes,
/// flushed or not. With [`QUEUED_BATCHES`], what waits for the writer stays under
/// `QUEUED_BATCHES * (BATCH_BYTES + MAX_ENTRY_BYTES)` (1.5 MiB).
const BATCH_BYTES: usize = 128 * 1024;

/// The writer thread writes what it has formatted once nothing more is queued or once it
/// holds this much.
const WRITE_BYTES: usize = 1024 * 1024;

/// One entry on its way to the writer thread, formatted there.
enum Entry {
    Coder {
        at: SystemTime,
        kind: &'static str,
        data: Value,
    },
    Child {
        at: SystemTime,
        pipe: Pipe,
        /// The line, or its head ([`LONG_LINE_HEAD_BYTES`]) when it is longer than
        /// [`MAX_ENTRY_BYTES`].
        bytes: Vec<u8>,
        /// Bytes of the line left out (beyond the head, or dropped by the splitter).
        cut: u64,
        /// For event lines: where the lifted fields lie in `bytes`.
        spans: Option<EventSpans>,
    },
}

impl Transcript {
    /// Creates `path` (and its directory).
    pub fn create(path: PathBuf, secrets: Vec<String>) -> Transcript {
        let opened = path
            .parent()
            .map_or(Ok(()), |dir| {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
            })
            .and_then(|()| open_private(&path));
        let file = match opened {
            Ok(file) => file,
            Err(e) => {
                let error = format!("cannot write the transcript {}: {e}", path.display());
                return Transcript {
                    path,
                    writer: None,
                    error: Some(error),
                };
            }
        };
        let (queue, batches) = std::sync::mpsc::sync_channel::<Vec<Entry>>(QUEUED_BATCHES);
        let mut sink = Sink {
            out: file,
            secrets: Secrets::new(secrets),
            pending: Vec::new(),
            lines: Vec::new(),
            lines_held: 0,
            scratch: Vec::new(),
            stderr_awaits: false,
            stamp: Stamp::default(),
        };
        let shown = path.display().to_string();
        let thread = std::thread::Builder::new()
            .name("coder-transcript".into())
            .spawn(move || {
                while let Ok(batch) = batches.recv() {
                    let mut written = sink.format(batch);
                    // Whatever else is queued already goes out with it, in one write.
                    while written.is_ok() && sink.held() < WRITE_BYTES {
                        match batches.try_recv() {
                            Ok(batch) => written = sink.format(batch),
                            Err(_) => break,
                        }
                    }
                    if let Err(e) = written.and_then(|()| sink.write_pending()) {
                        return Some(format!("transcript {shown} stopped: {e}"));
                    }
                }
                None
            });
        match thread {
            Ok(thread) => Transcript {
                path,
                writer: Some(Writer {
                    queue,
                    thread,
                    batch: Vec::new(),
                    batch_bytes: 0,
                }),
                error: None,
            },
            Err(e) => Transcript {
                error: Some(format!(
                    "cannot write the transcript {}: {e}",
                    path.display()
                )),
                path,
                writer: None,
            },
        }
    }

    /// Writes out every entry recorded so far and closes the transcript. Returns the
    /// write error that disabled it, if any.
    pub fn finish(&mut self) -> Option<&str> {
        self.flush();
        if let Some(writer) = self.writer.take() {
            drop(writer.queue);
            self.error = match writer.thread.join() {
                Ok(error) => error,
                Err(_) => Some(format!(
                    "transcript {} stopped: its writer failed",
                    self.path.display()
                )),
            };
        }
        self.error.as_deref()
    }

    /// Records one of coder's own entries, and hands it to the writer at once with the
    /// lines recorded before it.
    pub fn note(&mut self, note: Note<'_>) {
        self.push(
            Entry::Coder {
                at: SystemTime::now(),
                kind: note.kind(),
                data: note.into_data(),
            },
            0,
        );
        self.flush();
    }

    /// Records one line of the child's output; `decoded` is its decoded form, if it is an
    /// event. A line recorded whole is taken as it is, without a copy; otherwise its
    /// buffer is handed back, for reuse.
    ///
    /// A line in a buffer much larger than itself (a reused one, see
    /// [`crate::stream::SpareBuffer`]) is copied instead, so that the entries waiting for
    /// the writer hold no more memory than their bytes.
    pub fn child_line(
        &mut self,
        pipe: Pipe,
        line: Line,
        decoded: Option<&Decoded>,
    ) -> Option<Vec<u8>> {
        if self.writer.is_none() {
            return Some(line.bytes);
        }
        let Line { bytes, dropped } = line;
        let len = bytes.len();
        let (kept, returned) = if len > MAX_ENTRY_BYTES {
            (bytes[..LONG_LINE_HEAD_BYTES].to_vec(), Some(bytes))
        } else if bytes.capacity() > 2 * MAX_ENTRY_BYTES {
            (bytes.clone(), Some(bytes))
        } else {
            (bytes, None)
        };
        let held = kept.capacity();
        let cut = (len - kept.len()) as u64 + dropped;
        self.push(
            Entry::Child {
                at: SystemTime::now(),
                pipe,
                bytes: kept,
                cut,
                spans: decoded.map(|d| d.spans.clone()),
            },
            held,
        );
        returned
    }

    /// Hands the entries recorded so far to the writer thread.
    pub fn flush(&mut self) {
        let Some(writer) = &mut self.writer else {
            return;
        };
        if writer.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut writer.batch);
        writer.batch_bytes = 0;
        if writer.queue.send(batch).is_err() {
            // The writer stopped on an error; `finish` reports it.
            self.finish();
        }
    }

    /// Adds an entry of about `bytes` bytes to the batch, sent once it is large enough.
    fn push(&mut self, entry: Entry, bytes: usize) {
        let Some(writer) = &mut self.writer else {
            return;
        };
        writer.batch.push(entry);
        writer.batch_bytes += bytes;
        if writer.batch_bytes >= BATCH_BYTES {
            self.flush();
        }
    }
}

impl Drop for Transcript {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The writer thread's end: formats, redacts and writes entries.
struct Sink {
    out: File,
    secrets: Secrets,
    /// Formatted entries not yet written, one per line, but for the lines in `lines`.
    pending: Vec<u8>,
    /// Event lines written as they are, each where it goes in `pending` (its entry's head
    /// before, its closing brace after), with the part of it written.
    lines: Vec<(usize, Vec<u8>, Range<usize>)>,
    /// The memory `lines` hold.
    lines_held: usize,
    /// Room for the joins of an entry's pieces, searched for what redaction acts on.
    scratch: Vec<u8>,
    /// Whether the last stderr line ended in `Bearer` (or an `Authorization` header), so
    /// that a token starting the next one is redacted (`redact::awaits_token`).
    stderr_awaits: bool,
    /// The last entry's timestamp.
    stamp: Stamp,
}

/// The last timestamp formatted, and its millisecond: a busy stream's entries come a few
/// dozen to the millisecond, and formatting one took about a thousand instructions (an
/// allocation and the calendar arithmetic).
#[derive(Debug, Default)]
struct Stamp {
    millis: Option<u128>,
    text: String,
}

impl Stamp {
    /// [`timestamp`] of `at`, formatted again only when its millisecond changed.
    fn of(&mut self, at: SystemTime) -> &str {
        let millis = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .map(|since| since.as_millis());
        if millis.is_none() || millis != self.millis {
            self.text = timestamp(at);
            self.millis = millis;
        }
        &self.text
    }
}

/// An event line at least this long is written from its own buffer, not copied into the
/// pending bytes (see [`Sink::written_as_is`]); a shorter one costs less to copy than to
/// search in pieces and hand to the kernel apart.
const WRITTEN_AS_IS_BYTES: usize = 2048;

/// The most buffers one `writev` is given (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

impl Sink {
    /// Formats a batch of entries onto the pending bytes.
    fn format(&mut self, batch: Vec<Entry>) -> std::io::Result<()> {
        batch
            .into_iter()
            .try_for_each(|entry| self.format_entry(entry))
    }

    /// The memory the entries not yet written hold.
    fn held(&self) -> usize {
        self.pending.len() + self.lines_held
    }

    /// Writes the pending entries with one write (a `writev` of the pending bytes and the
    /// lines written as they are, in order): a killed coder loses at most the entries not
    /// yet written, which are the ones still queued or being formatted.
    fn write_pending(&mut self) -> std::io::Result<()> {
        let result = if self.lines.is_empty() {
            self.out.write_all(&self.pending)
        } else {
            let mut slices = Vec::with_capacity(2 * self.lines.len() + 1);
            let mut from = 0;
            for (at, line, part) in &self.lines {
                slices.push(IoSlice::new(&self.pending[from..*at]));
                slices.push(IoSlice::new(&line[part.clone()]));
                from = *at;
            }
            slices.push(IoSlice::new(&self.pending[from..]));
            write_all_slices(&mut self.out, &mut slices)
        };
        self.pending.clear();
        self.lines.clear();
        self.lines_held = 0;
        result
    }

    /// Formats one entry onto the pending bytes, in place: an entry is copied once, from
    /// the line into the pending bytes (twice when it must be redacted), except a long
    /// event line that needs no redaction, which is written from its own buffer.
    fn format_entry(&mut self, entry: Entry) -> std::io::Result<()> {
        let as_is = match &entry {
            Entry::Child {
                at,
                bytes: line,
                cut: 0,
                spans: Some(spans),
                ..
            } => self.written_as_is(*at, line, spans),
            _ => None,
        };
        let entry = match (as_is, entry) {
            (Some(part), Entry::Child { bytes, .. }) => {
                self.lines_held += bytes.capacity();
                self.lines.push((self.pending.len(), bytes, part));
                self.pending.extend_from_slice(b"}\n");
                return Ok(());
            }
            (_, entry) => entry,
        };
        let start = self.pending.len();
        let formatted = self.format_in_place(entry);
        if formatted.is_err() {
            self.pending.truncate(start);
        }
        formatted?;
        // The entry is JSON: a secret is found in every spelling JSON gives it, in coder's
        // own data (the prompt) and in the child's events alike. Most entries hold nothing
        // that could need it, which one pass tells.
        if self.secrets.surely_clean(&self.pending[start..]) {
            self.pending.push(b'\n');
            return Ok(());
        }
        if let Some(redacted) = self
            .secrets
            .redact_known(&self.pending[start..], Ending::Whole)
        {
            self.pending.truncate(start);
            self.pending.extend_from_slice(&redacted);
        }
        if let Cow::Owned(redacted) = redact_tokens_bytes(&self.pending[start..]) {
            self.pending.truncate(start);
            self.pending.extend_from_slice(&redacted);
        }
        // A `…` (the prompt's head, a text the child cut) may cut a token short.
        if let Some(redacted) = redact_cut_tokens_bytes(&self.pending[start..], Ending::Whole) {
            self.pending.truncate(start);
            self.pending.extend_from_slice(&redacted);
        }
        self.pending.push(b'\n');
        Ok(())
    }

    fn format_in_place(&mut self, entry: Entry) -> std::io::Result<()> {
        let bytes = &mut self.pending;
        match entry {
            Entry::Coder { at, kind, data } => {
                let entry = json!({
                    "ts": self.stamp.of(at),
                    "source": "coder",
                    "kind": kind,
                    "data": data,
                });
                serde_json::to_writer(&mut *bytes, &entry)?;
            }
            Entry::Child {
                at,
                pipe,
                bytes: line,
                cut,
                spans,
            } => {
                let ts = self.stamp.of(at);
                // The decoder may have checked the line's UTF-8 already.
                let utf8 = || {
                    spans.as_ref().is_some_and(|s| s.utf8)
                        || simdutf8::basic::from_utf8(&line).is_ok()
                };
                match &spans {
                    Some(spans) if cut == 0 && utf8() => event_entry(bytes, ts, &line, spans),
                    _ => {
                        let kind = match (pipe, spans.is_some()) {
                            (Pipe::Stderr, _) => "stderr",
                            (Pipe::Stdout, true) => "event_truncated",
                            (Pipe::Stdout, false) => "noise",
                        };
                        let stderr = matches!(pipe, Pipe::Stderr);
                        let after_bearer = stderr && std::mem::take(&mut self.stderr_awaits);
                        let entry = text_entry(&self.secrets, ts, kind, &line, cut, after_bearer);
                        self.stderr_awaits =
                            stderr && cut == 0 && entry["text"].as_str().is_some_and(awaits_token);
                        serde_json::to_writer(&mut *bytes, &entry)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Sink {
    /// For a long event line that is UTF-8 and needs no redaction: writes its entry's head
    /// onto the pending bytes and returns the part of the line the entry holds, to be
    /// written from the line's own buffer, followed by `}`. `None` (nothing written)
    /// otherwise.
    ///
    /// The entry is searched in pieces (its head with the line's first bytes, the line,
    /// the line's last bytes with the `}`), the pieces overlapping by the longest pattern
    /// less one byte, so that a match across a join is found as it would be in the whole.
    fn written_as_is(
        &mut self,
        at: SystemTime,
        line: &[u8],
        spans: &EventSpans,
    ) -> Option<Range<usize>> {
        let start = line.len() - line.trim_ascii_start().len();
        let part = start..start + line[start..].trim_ascii_end().len();
        let overlap = self.secrets.surely_clean_span().saturating_sub(1);
        if part.len() < WRITTEN_AS_IS_BYTES || part.len() <= 2 * overlap {
            return None;
        }
        if !(spans.utf8 || simdutf8::basic::from_utf8(line).is_ok()) {
            return None;
        }
        let head_at = self.pending.len();
        event_head(&mut self.pending, self.stamp.of(at), line, spans);
        let body = &line[part.clone()];
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.pending[head_at..]);
        self.scratch.extend_from_slice(&body[..overlap]);
        let mut clean = self.secrets.surely_clean(&self.scratch) && self.secrets.surely_clean(body);
        if clean {
            self.scratch.clear();
            self.scratch
                .extend_from_slice(&body[body.len() - overlap..]);
            self.scratch.push(b'}');
            clean = self.secrets.surely_clean(&self.scratch);
        }
        if clean {
            Some(part)
        } else {
            self.pending.truncate(head_at);
            None
        }
    }
}

/// Writes all of `slices`, at most [`IOV_MAX`] at a time.
fn write_all_slices(out: &mut File, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let at_once = slices.len().min(IOV_MAX);
        match out.write_vectored(&slices[..at_once]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut slices, written),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `{"ts":…,"source":"child","kind":"event","id":…,"parent_id":…,"usage":…,"event":<line>}`
///
/// The event is copied verbatim, never re-serialised, and the lifted fields are copied
/// from where the decoder found them: a megabyte tool result costs one copy.
fn event_entry(entry: &mut Vec<u8>, ts: &str, line: &[u8], spans: &EventSpans) {
    event_head(entry, ts, line, spans);
    entry.extend_from_slice(line.trim_ascii());
    entry.push(b'}');
}

/// What comes before the event in its entry ([`event_entry`]), `"event":` included.
fn event_head(entry: &mut Vec<u8>, ts: &str, line: &[u8], spans: &EventSpans) {
    let raw = |span: &Option<Range<usize>>| span.clone().and_then(|s| line.get(s));
    entry.extend_from_slice(br#"{"ts":"#);
    // A timestamp holds nothing JSON escapes.
    entry.push(b'"');
    entry.extend_from_slice(ts.as_bytes());
    entry.push(b'"');
    entry.extend_from_slice(br#","source":"child","kind":"event""#);
    for (key, value) in [
        (&br#","id":"#[..], raw(&spans.uuid)),
        (br#","parent_id":"#, raw(&spans.parent_tool_use_id)),
        (br#","usage":"#, raw(&spans.usage)),
    ] {
        if let Some(value) = value {
            entry.extend_from_slice(key);
            entry.extend_from_slice(value);
        }
    }
    entry.extend_from_slice(br#","event":"#);
}

/// A line kept as text. It is redacted before it is embedded: embedding escapes its
/// backslashes, so a secret spelled with JSON escapes in the line (the head of an event
/// line is JSON) would no longer read as one in the entry. A line cut at the head loses a
/// piece of a secret across the cut too.
fn text_entry(
    secrets: &Secrets,
    ts: &str,
    kind: &str,
    head: &[u8],
    cut: u64,
    after_bearer: bool,
) -> Value {
    let text = text_of(head);
    let ending = if cut > 0 { Ending::Cut } else { Ending::Whole };
    let mut text = secrets.redact_ending(&text, ending);
    if after_bearer && let Cow::Owned(out) = redact_continued(&text) {
        text = Cow::Owned(out);
    }
    let mut entry = json!({
        "ts": ts,
        "source": "child",
        "kind": kind,
        "text": text,
    });
    if cut > 0 {
        entry["truncated_bytes"] = json!(cut);
    }
    entry
}

/// `bytes` as text: borrowed when they are UTF-8 (a character cut at the end is dropped),
/// else decoded lossily. The check runs a word at a time; the lossy decoder goes byte by
/// byte, so it is kept for the rare text that needs it.
fn text_of(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.into(),
        Err(e) if e.error_len().is_none() => {
            // Only the last character is incomplete: the head was cut inside it.
            String::from_utf8_lossy(&bytes[..e.valid_up_to()])
        }
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Deletes the oldest transcripts (by modification time) beyond the retention limits, as
/// `dir` is now: each file is counted at its size now. `keep` (the calling run's own
/// transcript, usually still being written) is never deleted. Each deletion is one
/// `unlink`, oldest last in line, so a pass cut short anywhere (coder killed) leaves only
/// fewer deletions for the next run to make.
pub fn enforce_retention(dir: &Path, retention: Retention, keep: &Path) -> std::io::Result<usize> {
    let mut runs: Vec<(SystemTime, u64, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    // Newest first.
    runs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.2.cmp(&a.2)));
    let mut total = 0u64;
    let mut removed = 0;
    for (index, (_, size, path)) in runs.iter().enumerate() {
        total += size;
        let over = index >= retention.max_runs || total > retention.max_bytes;
        if over && path != keep && std::fs::remove_file(path).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Formats a time as RFC 3339 UTC with milliseconds (`2026-11-21T12:28:02.574Z`).
pub fn timestamp(time: SystemTime) -> String {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    let Ok(year @ 0..=9999) = u64::try_from(year) else {
        return format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            since.subsec_millis()
        );
    };
    // Digit by digit: `format!` took 3,000 instructions a time, once per transcript entry.
    let mut text = String::with_capacity(24);
    for (value, width, after) in [
        (year, 4, '-'),
        (u64::from(month), 2, '-'),
        (u64::from(day), 2, 'T'),
        (rem / 3600, 2, ':'),
        (rem % 3600 / 60, 2, ':'),
        (rem % 60, 2, '.'),
        (u64::from(since.subsec_millis()), 3, 'Z'),
    ] {
        for place in (0..width).rev() {
            let digit = value / 10u64.pow(place) % 10;
            text.push(char::from(b'0' + digit as u8));
        }
        text.push(after);
    }
    text
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's method).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A transcript's entries, one JSON object per line.
    fn entries(text: &str) -> Vec<Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_264_082_574);
        assert_eq!(timestamp(t), "2026-11-21T12:28:02.574Z");
        assert_eq!(
            timestamp(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(timestamp(leap), "2000-02-29T00:00:00.000Z");
        // As `format!` writes them, over every month of four centuries and every field,
        // and past the year 9999.
        let times = (0..20_000u64)
            .map(|step| step * 631_152_007 + step % 1000)
            .chain((30..40).map(|step| step * 10_000_000_000_000));
        for millis in times {
            let at = Duration::from_millis(millis);
            let since = SystemTime::UNIX_EPOCH + at;
            let (secs, rem) = (at.as_secs() / 86_400, at.as_secs() % 86_400);
            let (year, month, day) = civil_from_days(secs as i64);
            let expected = format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
                rem / 3600,
                rem % 3600 / 60,
                rem % 60,
                at.subsec_millis()
            );
            assert_eq!(timestamp(since), expected);
            let mut head = Vec::new();
            event_head(&mut head, &expected, b"{}", &EventSpans::default());
            assert!(head.starts_with(format!("{{\"ts\":{}", Value::from(expected)).as_bytes()));
        }
    }

    #[test]
    fn stamps_reused_within_a_millisecond_are_the_timestamps() {
        let mut stamp = Stamp::default();
        let base = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_264_082_574);
        let mut rng = crate::stream::Xorshift(77);
        let mut at = base;
        for _ in 0..5_000 {
            // Steps of microseconds, within and across milliseconds and seconds, and
            // sometimes back in time (a clock set back).
            at = match rng.below(10) {
                0 => at - Duration::from_micros(rng.below(5_000) as u64),
                _ => at + Duration::from_micros(rng.below(1_500) as u64),
            };
            assert_eq!(stamp.of(at), timestamp(at));
        }
        let before = SystemTime::UNIX_EPOCH - Duration::from_millis(5);
        assert_eq!(stamp.of(before), timestamp(before));
        assert_eq!(stamp.of(base), timestamp(base));
    }

    /// An entry as the copying path formats and redacts it.
    fn copied_entry(secrets: &Secrets, ts: &str, line: &[u8]) -> Vec<u8> {
        let spans = crate::stream::decode_line(line).unwrap().spans;
        let mut entry = Vec::new();
        event_entry(&mut entry, ts, line, &spans);
        let entry = secrets.redact_known(&entry, Ending::Whole).unwrap_or(entry);
        let entry = redact_tokens_bytes(&entry).into_owned();
        redact_cut_tokens_bytes(&entry, Ending::Whole).unwrap_or(entry)
    }

    #[test]
    fn long_events_written_as_they_are_read_as_if_copied() {
        // Secrets that a search of the line alone would miss: across the entry's head and
        // the line, and across the line and the entry's closing brace.
        let secrets = vec![r#"vent":{"uuid"#.to_owned(), r#"9zq7"}}"#.to_owned()];
        let filler = r#"café — line\n \"quoted\" "#.repeat(200);
        let event = |text: &str, end: &str| {
            format!(
                r#"{{"type":"user","uuid":"u1","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"{text}"}}]}},"z":"{end}"}}"#
            )
        };
        let lines = [
            event(&filler, "plain"),
            event(&format!("{filler} ghp_0123456789abcdefABCDEF"), "x"),
            event(&format!("sk-ant-api03-AAAA1111BBBB2222 {filler}"), "x"),
            event(&filler, "9zq7"),
            event(&filler, "x").replace(
                r#"{"type":"user","uuid":"u1","#,
                r#"{"uuid":"u1","type":"user","#,
            ),
            format!("  {}  ", event(&filler, "spaces around")),
            event("a short result", "short"),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut t = Transcript::create(path.clone(), secrets.clone());
        for line in &lines {
            let bytes = line.as_bytes().to_vec();
            let decoded = crate::stream::decode_line(&bytes).ok();
            assert!(decoded.is_some(), "{line}");
            t.child_line(Pipe::Stdout, Line { bytes, dropped: 0 }, decoded.as_ref());
        }
        assert_eq!(t.finish(), None);
        let written = std::fs::read(&path).unwrap();
        let written: Vec<&[u8]> = written.split(|&b| b == b'\n').collect();
        assert_eq!(written.len(), lines.len() + 1);
        let redaction = Secrets::new(secrets);
        for (entry, line) in written.iter().zip(&lines) {
            // `{"ts":"` and the 24 characters of the time, which no secret here is near.
            let ts = String::from_utf8_lossy(&entry[7..31]).into_owned();
            let expected = copied_entry(&redaction, &ts, line.as_bytes());
            assert_eq!(
                String::from_utf8_lossy(entry),
                String::from_utf8_lossy(&expected)
            );
        }
        let redacted: Vec<bool> = written[..lines.len()]
            .iter()
            .map(|entry| entry.windows(10).any(|w| w == b"[REDACTED]"))
            .collect();
        assert_eq!(redacted, [false, true, true, true, true, false, false]);
    }

    #[test]
    fn entries_are_written_line_by_line_and_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs/r.jsonl");
        let mut t = Transcript::create(path.clone(), vec!["sk-very-secret".into()]);
        t.note(Note::Start(json!({"prompt": "use sk-very-secret"})));
        let event = br#"{"type":"assistant","uuid":"u1","parent_tool_use_id":"p1","message":{"usage":{"input_tokens":3}}}"#;
        t.child_line(
            Pipe::Stdout,
            Line {
                bytes: event.to_vec(),
                dropped: 0,
            },
            crate::stream::decode_line(event).ok().as_ref(),
        );
        t.child_line(
            Pipe::Stderr,
            Line {
                bytes: b"\xffwarn".to_vec(),
                dropped: 0,
            },
            None,
        );
        let leaky = br#"{"type":"user","uuid":"u2","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"key=sk-very-secret"}]}}"#;
        t.child_line(
            Pipe::Stdout,
            Line {
                bytes: leaky.to_vec(),
                dropped: 0,
            },
            crate::stream::decode_line(leaky).ok().as_ref(),
        );
        assert_eq!(t.finish(), None);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines = entries(&text);
        assert_eq!(lines.len(), 4);
        // The event is copied verbatim.
        assert_eq!(
            lines[1]["event"],
            serde_json::from_slice::<Value>(event).unwrap()
        );
        assert_eq!(lines[3]["id"], "u2");
        assert_eq!(
            lines[3]["event"]["message"]["content"][0]["content"],
            "key=[REDACTED]"
        );
        assert!(!text.contains("sk-very-secret"));
        assert_eq!(lines[0]["data"]["prompt"], "use [REDACTED]");
        assert_eq!(lines[1]["id"], "u1");
        assert_eq!(lines[1]["parent_id"], "p1");
        assert_eq!(lines[1]["usage"]["input_tokens"], 3);
        assert_eq!(lines[2]["kind"], "stderr");
    }

    #[test]
    fn a_bearer_token_on_the_next_stderr_line_is_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut t = Transcript::create(path.clone(), vec![]);
        for text in [
            "> Authorization: Bearer",
            "Tk9Lm3Np7Qr1St5UvWxYz2Gh8",
            "Tk9Lm3Np7Qr1St5UvWxYz2Gh9 is not after a bearer",
        ] {
            let bytes = text.as_bytes().to_vec();
            t.child_line(Pipe::Stderr, Line { bytes, dropped: 0 }, None);
        }
        assert_eq!(t.finish(), None);
        let lines = entries(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(lines[1]["text"], "[REDACTED]");
        assert_eq!(
            lines[2]["text"],
            "Tk9Lm3Np7Qr1St5UvWxYz2Gh9 is not after a bearer"
        );
    }

    #[test]
    fn batches_keep_lines_and_notes_in_order_and_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut t = Transcript::create(path.clone(), vec!["sk-very-secret".into()]);
        let mut expected = Vec::new();
        for i in 0..300usize {
            // Sizes that close batches at every kind of boundary: one line exactly the
            // batch size, one just under, several batches between flushes.
            let len = match i {
                100 => BATCH_BYTES,
                101 => BATCH_BYTES - 1,
                _ => i * 997 % 9000 + 20,
            };
            let mut bytes = format!("{i} sk-very-secret ").into_bytes();
            bytes.resize(len, b'x');
            if i % 3 == 0 {
                bytes[len - 1] = 0xff;
            }
            t.child_line(Pipe::Stderr, Line { bytes, dropped: 0 }, None);
            expected.push(format!("line {i}"));
            if i % 50 == 0 {
                t.note(Note::Start(json!({ "i": i })));
                expected.push(format!("note {i}"));
            }
            if i % 40 == 0 {
                t.flush();
            }
        }
        assert_eq!(t.finish(), None);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("sk-very-secret"));
        let seen: Vec<String> = entries(&text)
            .iter()
            .map(|e| match e["kind"].as_str().unwrap() {
                "stderr" => {
                    let text = e["text"].as_str().unwrap();
                    let i = text.split(' ').next().unwrap();
                    assert!(text.starts_with(&format!("{i} [REDACTED] x")), "{i}");
                    format!("line {i}")
                }
                _ => format!("note {}", e["data"]["i"]),
            })
            .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn event_lines_are_embedded_only_when_they_are_utf8() {
        // The decoder vouches for the UTF-8 of the `user` lines it reads the fast way; a
        // line it does not vouch for is checked here, and kept as text when it is not.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut t = Transcript::create(path.clone(), vec![]);
        // The CLI's copy of a tool's output is not read, so a line with bytes that are not
        // UTF-8 there is still an event.
        let good = format!(
            r#"{{"type":"user","uuid":"u1","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"ok"}}]}},"tool_use_result":{{"stdout":"{}"}}}}"#,
            "é".repeat(100)
        );
        let mut bad = good.clone().into_bytes();
        let at = memchr::memchr(0xc3, &bad).unwrap();
        bad[at] = 0xff;
        for bytes in [good.as_bytes().to_vec(), bad] {
            let decoded = crate::stream::decode_line(&bytes).unwrap();
            assert_eq!(decoded.spans.utf8, bytes == good.as_bytes());
            let line = Line { bytes, dropped: 0 };
            t.child_line(Pipe::Stdout, line, Some(&decoded));
        }
        assert_eq!(t.finish(), None);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines = entries(&text);
        assert_eq!(lines[0]["kind"], "event");
        assert_eq!(lines[0]["id"], "u1");
        assert_eq!(
            lines[0]["event"],
            serde_json::from_str::<Value>(&good).unwrap()
        );
        assert_eq!(lines[1]["kind"], "event_truncated");
        assert!(lines[1]["text"].as_str().unwrap().contains('\u{fffd}'));
    }

    #[test]
    fn lines_recorded_whole_are_taken_and_other_buffers_handed_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut t = Transcript::create(path.clone(), vec![]);
        let line = |bytes: Vec<u8>| Line { bytes, dropped: 0 };
        assert_eq!(
            t.child_line(Pipe::Stderr, line(b"short".to_vec()), None),
            None
        );
        // A short line in a large (reused) buffer is copied: the buffer comes back whole.
        let mut reused = Vec::with_capacity(4 * MAX_ENTRY_BYTES);
        reused.extend_from_slice(b"in a reused buffer");
        let back = t.child_line(Pipe::Stderr, line(reused), None).unwrap();
        assert_eq!(back, b"in a reused buffer");
        assert!(back.capacity() >= 4 * MAX_ENTRY_BYTES);
        // A line longer than an entry keeps its head; the line comes back.
        let back = t.child_line(Pipe::Stderr, line(vec![b'a'; MAX_ENTRY_BYTES + 1]), None);
        assert_eq!(back.map(|b| b.len()), Some(MAX_ENTRY_BYTES + 1));
        assert_eq!(t.finish(), None);
        let text = std::fs::read_to_string(&path).unwrap();
        let texts: Vec<usize> = entries(&text)
            .iter()
            .map(|e| e["text"].as_str().unwrap().len())
            .collect();
        assert_eq!(texts, [5, 18, LONG_LINE_HEAD_BYTES]);
    }

    #[test]
    fn long_and_undecodable_lines_keep_their_head_as_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut t = Transcript::create(path.clone(), vec![]);
        let mut long = br#"{"type":"user","message":{"content":""#.to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_ENTRY_BYTES));
        long.extend_from_slice(br#""}}"#);
        let decoded = crate::stream::decode_line(&long).unwrap();
        let line = Line {
            bytes: long.clone(),
            dropped: 5,
        };
        t.child_line(Pipe::Stdout, line, Some(&decoded));
        let noise = Line {
            bytes: "é not json".as_bytes().to_vec(),
            dropped: 0,
        };
        t.child_line(Pipe::Stdout, noise, None);
        assert_eq!(t.finish(), None);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines = entries(&text);
        assert_eq!(lines[0]["kind"], "event_truncated");
        assert_eq!(
            lines[0]["text"].as_str().unwrap().len(),
            LONG_LINE_HEAD_BYTES
        );
        assert_eq!(
            lines[0]["truncated_bytes"],
            (long.len() - LONG_LINE_HEAD_BYTES + 5) as u64
        );
        assert_eq!(lines[1]["kind"], "noise");
        assert_eq!(lines[1]["text"], "é not json");
    }

    #[test]
    fn an_unwritable_transcript_is_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let mut t = Transcript::create(dir.path().join("file/r.jsonl"), vec![]);
        t.note(Note::Start(json!({})));
        let error = t.finish().unwrap();
        assert!(error.contains("cannot write the transcript"), "{error}");
    }

    #[test]
    fn retention_counts_the_own_transcript_as_it_stands_and_never_deletes_it() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: usize, secs: u64| {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![b'x'; bytes]).unwrap();
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
                .unwrap();
        };
        // Over the cap of 250 bytes: three of 100. The run's own transcript has just its
        // first entries, and (a clock set back) the oldest time of all.
        for (name, secs) in [("a.jsonl", 1000), ("b.jsonl", 2000), ("c.jsonl", 3000)] {
            write(name, 100, secs);
        }
        write("own.jsonl", 10, 10);
        let cap = Retention {
            max_runs: 10,
            max_bytes: 250,
        };
        let own = dir.path().join("own.jsonl");
        assert_eq!(enforce_retention(dir.path(), cap, &own).unwrap(), 1);
        assert_eq!(
            sorted_names(dir.path()),
            vec!["b.jsonl", "c.jsonl", "own.jsonl"]
        );
        // The run writes on: over the cap by what it wrote since, until the next run's
        // retention counts it whole (the next run's own transcript is newer still).
        std::fs::write(&own, vec![b'x'; 100]).unwrap();
        write("next.jsonl", 10, 4000);
        let next = dir.path().join("next.jsonl");
        assert_eq!(enforce_retention(dir.path(), cap, &next).unwrap(), 1);
        assert_eq!(
            sorted_names(dir.path()),
            vec!["c.jsonl", "next.jsonl", "own.jsonl"]
        );
    }

    /// The names in `dir`, sorted.
    fn sorted_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn retention_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("{i}.jsonl")), vec![b'x'; 100]).unwrap();
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + i);
            File::options()
                .write(true)
                .open(dir.path().join(format!("{i}.jsonl")))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        let keep = dir.path().join("0.jsonl");
        let removed = enforce_retention(
            dir.path(),
            Retention {
                max_runs: 2,
                max_bytes: u64::MAX,
            },
            &keep,
        )
        .unwrap();
        assert_eq!(removed, 2);
        let left = sorted_names(dir.path());
        assert_eq!(left, vec!["0.jsonl", "3.jsonl", "4.jsonl"]);
        let removed = enforce_retention(
            dir.path(),
            Retention {
                max_runs: 10,
                max_bytes: 150,
            },
            &keep,
        )
        .unwrap();
        assert_eq!(removed, 1);
    }
}
