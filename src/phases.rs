//! Phase timestamps for attributing a run's cost (`CODER_TRACE_PHASES=FILE`).
//!
//! When the variable names a file, the supervisor appends one line per phase to it:
//! `<CLOCK_MONOTONIC µs> <pid> <phase>`. `coder sandbox` marks its own phases too
//! (`sandbox.main`, `scan.start`, `scan.walked` (before the check that the tree
//! held still), `scan.done`, `policy.done`, `sandbox.confined` in the
//! forked child, then `sandbox.exited`, `sandbox.guarded`, `sandbox.cleaned`). The
//! sandbox helper started before its spec (the first attempt's) gets coder's own open
//! trace file, inherited ([`TRACE_FD_VAR`]; it never opens the path itself: relative, the
//! path would resolve in the workspace, and either way an agent could redirect it between
//! coder's open and the helper's, which runs unconfined; forked from coder, it has the
//! file open already), and marks `helper.main` (its start), `helper.prepared` (namespaces
//! and their init made), `helper.spec` (spec read, process set up), `sandbox.mounted`
//! (private root built), `sandbox.pivoted` and `sandbox.confined`; coder marks
//! `run.start` (runtime up), `helper.joined` (the helper taken for the attempt) and
//! `spec.sent`; the rest of `sandbox.confined -> child.spawned` is the program's
//! `execve`. After the child: `child.drained`, `attempts.done`, `verified`,
//! `teardown.started`, `journal.done`, `teardown.joined`, `coder.exit`. A git ledger's
//! comparison marks `ledger.after_snapshot` and `ledger.index_kept` (see
//! `workspace::git::GitRepo::keep_index`), and on the thread beside it
//! `ledger.ignored_listed` and `ledger.ignored_walked` (see `workspace::ignored`).
//! The clock is the one a harness reads with `time.monotonic_ns()`, so its own
//! timestamps (before the spawn, at the exit) line up with coder's. The file is opened
//! once and kept open (close-on-exec). Unset, a mark costs one check of a `OnceLock`.
//! It is a diagnostic, not a log: failures to write are ignored. A file and not stderr,
//! because stderr carries the metrics line that callers parse.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::OnceLock;

/// The environment variable that names the trace file.
pub const TRACE_VAR: &str = "CODER_TRACE_PHASES";

/// The variable that gives the sandbox helper started early coder's trace file: the number
/// of the descriptor it inherits (see `supervise::spawn::StartedHelper`).
pub const TRACE_FD_VAR: &str = "CODER_TRACE_PHASES_FD";

static SINK: OnceLock<Option<File>> = OnceLock::new();

fn sink() -> Option<&'static File> {
    SINK.get_or_init(|| {
        let path = std::env::var_os(TRACE_VAR).filter(|p| !p.is_empty())?;
        OpenOptions::new().create(true).append(true).open(path).ok()
    })
    .as_ref()
}

/// coder's trace file, when it traces (opened now if not yet).
pub fn file() -> Option<&'static File> {
    sink()
}

/// For the sandbox helper, before its first mark: its trace goes to `file` (coder's own,
/// inherited) or nowhere. The path in [`TRACE_VAR`] is never opened there.
pub fn inherit(file: Option<File>) {
    let _ = SINK.set(file);
}

/// Records that `phase` starts (or ended) now.
pub fn mark(phase: &str) {
    let Some(mut file) = sink() else {
        return;
    };
    let line = format!("{} {} {phase}\n", monotonic_us(), std::process::id());
    // One write per line on an O_APPEND file: lines of several processes do not mix.
    let _ = file.write_all(line.as_bytes());
}

/// Records `child.first_line` the first time it is called in this process.
pub fn mark_first_line() {
    static SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if sink().is_some() && !SEEN.swap(true, std::sync::atomic::Ordering::Relaxed) {
        mark("child.first_line");
    }
}

fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, owned `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs * 1_000_000 + nanos / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_moves_forward() {
        let a = monotonic_us();
        let b = monotonic_us();
        assert!(a > 0 && b >= a);
    }
}
