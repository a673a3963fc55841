//! What a run leaves behind and shows while it runs: the JSONL [`transcript`] (one per
//! run, secrets redacted), the terminal [`progress`] line, and [`runs`], which reads
//! transcripts back for `coder runs`.
//!
//! The supervisor reports through the [`Journal`] trait, in lines of the child's output and
//! typed [`Note`]s of what coder did; it knows nothing of files or terminals, and this
//! module knows nothing of processes.

pub mod dirstats;
pub mod progress;
pub mod runs;
pub mod transcript;

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use crate::stream::{Decoded, Line, Pipe};

/// Where the supervisor reports what happens, as it happens (the transcript, the progress
/// display). Implementations must return quickly: the supervisor's deadlines wait while
/// they run. (The transcript hands batches of entries to a thread of its own and waits
/// only when four are already queued, that is when its disk is slower than the child's
/// output.)
pub trait Journal {
    /// A complete line of the child's output; `decoded` is its decoded form, if it is an
    /// event. The journal may keep the line's buffer (the transcript records most lines
    /// whole, so it takes them rather than copying them); it hands the buffer back when it
    /// did not keep it, for the pipe reader to reuse.
    fn line(&mut self, pipe: Pipe, line: Line, decoded: Option<&Decoded>) -> Option<Vec<u8>>;
    /// The lines at hand have been handled: whatever was recorded goes out now. Lines may
    /// be held back until this is called, so that a fast stream is recorded in batches;
    /// the supervisor calls it before it waits for more output.
    fn flush(&mut self) {}
    /// Something coder did.
    fn note(&mut self, note: Note<'_>);
}

/// A journal that records nothing.
pub struct NoJournal;

impl Journal for NoJournal {
    fn line(&mut self, _: Pipe, line: Line, _: Option<&Decoded>) -> Option<Vec<u8>> {
        Some(line.bytes)
    }
    fn note(&mut self, _: Note<'_>) {}
}

/// Why the supervisor stopped an attempt before it ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchdogReason {
    /// No output for the idle limit.
    IdleTimeout,
    /// The run's total deadline passed.
    Timeout,
    /// coder received SIGINT, SIGTERM or SIGHUP.
    Cancelled,
    /// The child printed its result but did not exit in time.
    LingeredAfterResult,
}

/// One thing coder did, as the transcript records it (`{"coder": KIND, "data": {...}}`).
/// The kinds are a fixed set; their data is part of the transcript format that
/// `coder runs` reads back.
#[derive(Debug, Clone)]
pub enum Note<'a> {
    /// The run began: its id, workspace, backend, sandbox, session, prompt and limits.
    Start(Value),
    /// An attempt is about to start.
    Attempt { attempt: usize, session_id: String },
    /// The child was spawned.
    Spawn { pid: i32, program: &'a Path },
    /// A watchdog or signal stopped the attempt; the tool call in flight, if any.
    Watchdog {
        reason: WatchdogReason,
        pending_tool: Option<&'a str>,
    },
    /// Processes of the tree were still running at the end and were stopped.
    Kill { processes: usize, escalated: bool },
    /// What the sandbox's egress proxy let through and refused during an attempt.
    Egress(Value),
    /// The failed attempt is retried after this delay.
    Retry { delay: Duration },
    /// A `--verify` check ran: its phase (`baseline`, `after_agent`, `after_repair`), exit
    /// code, duration and the kept tail of its output.
    Verify(Value),
    /// The change ledger of the run (coder's own measure of what changed).
    Changes(Value),
    /// The weak-model fallback turn was started: its trigger and files.
    Fallback(Value),
    /// A repair turn was started after a failing check.
    Repair(Value),
    /// A provider error was met with a changed setting (DESIGN §12): its class and remedy.
    Remedy(Value),
    /// The end-of-run git guard moved something aside or could not finish.
    GitGuard(Value),
    /// The run ended: the envelope's gist.
    Outcome(Value),
    /// The run waits for a slot on its backend (`state: waiting`), or got one after waiting
    /// (`state: admitted`, with `queue_ms`).
    Queued(Value),
}

impl Note<'_> {
    /// The entry's `coder` field.
    pub fn kind(&self) -> &'static str {
        match self {
            Note::Start(_) => "start",
            Note::Attempt { .. } => "attempt",
            Note::Spawn { .. } => "spawn",
            Note::Watchdog { .. } => "watchdog",
            Note::Kill { .. } => "kill",
            Note::Retry { .. } => "retry",
            Note::Egress(_) => "egress",
            Note::Verify(_) => "verify",
            Note::Changes(_) => "changes",
            Note::Fallback(_) => "fallback",
            Note::Repair(_) => "repair",
            Note::Remedy(_) => "provider_remedy",
            Note::GitGuard(_) => "git_guard",
            Note::Outcome(_) => "outcome",
            Note::Queued(_) => "queued",
        }
    }

    /// The entry's `data` field.
    pub fn into_data(self) -> Value {
        match self {
            Note::Start(data)
            | Note::Outcome(data)
            | Note::Egress(data)
            | Note::Verify(data)
            | Note::Changes(data)
            | Note::Fallback(data)
            | Note::Repair(data)
            | Note::Remedy(data)
            | Note::GitGuard(data)
            | Note::Queued(data) => data,
            Note::Attempt {
                attempt,
                session_id,
            } => json!({"attempt": attempt, "session_id": session_id}),
            Note::Spawn { pid, program } => json!({"pid": pid, "program": program}),
            Note::Watchdog {
                reason,
                pending_tool,
            } => json!({"reason": reason, "pending_tool": pending_tool}),
            Note::Kill {
                processes,
                escalated,
            } => json!({"processes": processes, "escalated_to_sigkill": escalated}),
            Note::Retry { delay } => json!({"delay_ms": delay.as_millis() as u64}),
        }
    }
}
