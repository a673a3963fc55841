//! `--verify CMD`: a deterministic check of the agent's work, run by coder (DESIGN §8).
//!
//! The command runs as `sh -c CMD` in the workspace under the run's own sandbox: the same
//! policy, helper and egress proxy as the agent (it is the agent's code being run), with
//! the credentials of the child's environment removed. Each check is bounded: after
//! `--verify-timeout` the whole process tree is stopped (SIGTERM, a grace, SIGKILL) and
//! the check counts as failed; its output is read concurrently and only the last
//! [`TAIL_BYTES`] are kept (the envelope shows the last [`TAIL_LINES`] lines of them).
//! Anything the command leaves running after it exits is stopped too.
//!
//! The checks are compared into a [`VerdictKind`]: the baseline (before the agent, unless
//! skipped) against the final check (after the agent and any repair turns).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::pipeline::child::ChildSpec;
use crate::supervise::CancelSignals;
use crate::supervise::signals::signal_name;
use crate::supervise::tree::stop_tree_or_sooner;
use crate::text::Secrets;

/// Bytes of a check's output kept (the end of it).
pub const TAIL_BYTES: usize = 64 * 1024;
/// Lines of that tail shown in the envelope.
pub const TAIL_LINES: usize = 40;
/// Characters of one tail line shown in the envelope.
const LINE_CHARS: usize = 500;
/// How long the pipes may stay open after the command exited (a background process
/// holding them) before the rest of its tree is stopped.
const DRAIN: Duration = Duration::from_millis(300);

/// One run of the check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `null` when it was killed (timeout, signal) or could not start.
    pub exit_code: Option<i32>,
    pub passed: bool,
    pub duration_ms: u64,
    /// The last lines of its output (stdout and stderr, as they came).
    pub tail: Vec<String>,
    /// Stopped at `--verify-timeout`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Bytes of output in all (only the tail is kept).
    pub output_bytes: u64,
    /// Could not be started: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Not serialised: the kept tail, for the repair prompt and the transcript.
    #[serde(skip)]
    pub tail_text: String,
    /// Not serialised (`error` says why): the command could not be started at all (`sh`
    /// could not be executed, its directory was gone), which no change the model makes to
    /// the workspace can fix.
    #[serde(skip)]
    pub not_started: bool,
}

/// `passed | fixed | still_failing | regressed | not_run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// The final check passed, and so did the baseline (or there was none).
    Passed,
    /// The final check passed where the baseline failed.
    Fixed,
    /// The final check failed, as did the baseline (or there was none).
    StillFailing,
    /// The final check failed where the baseline passed.
    Regressed,
    /// No final check: the agent's run itself failed.
    NotRun,
}

impl VerdictKind {
    pub fn of(baseline: Option<&Check>, final_check: Option<&Check>) -> VerdictKind {
        let Some(final_check) = final_check else {
            return VerdictKind::NotRun;
        };
        match (baseline.map(|b| b.passed), final_check.passed) {
            (Some(false), true) => VerdictKind::Fixed,
            (_, true) => VerdictKind::Passed,
            (Some(true), false) => VerdictKind::Regressed,
            (_, false) => VerdictKind::StillFailing,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Passed => "passed",
            VerdictKind::Fixed => "fixed",
            VerdictKind::StillFailing => "still_failing",
            VerdictKind::Regressed => "regressed",
            VerdictKind::NotRun => "not_run",
        }
    }
}

/// The envelope's `verification`.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    pub command: String,
    /// `null` with `--no-verify-baseline`.
    pub baseline: Option<Check>,
    /// The check right after the agent, when repair turns followed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_agent: Option<Check>,
    #[serde(rename = "final")]
    pub final_check: Option<Check>,
    pub verdict: VerdictKind,
    /// Repair turns used.
    pub repair_turns: u32,
    /// With a verdict `passed` or `fixed`: entries changed under ignored paths during the
    /// run (`changes.ignored.count`), which the check may have run (DESIGN §8). Absent
    /// when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored_changes: Option<u64>,
    /// Why no repair turn followed a failing check although some were allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair_skipped: Option<String>,
    /// A repair turn that itself failed (the backend's error, a limit): the check after
    /// it still ran and decides the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair_failed: Option<RepairFailed>,
}

/// `verification.repair_failed`: which repair turn failed, and how.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepairFailed {
    pub turn: u32,
    pub error_kind: crate::exit::ErrorKind,
    pub error: String,
}

/// `repair_skipped` of a check that could not be started.
pub const NOT_STARTED_NO_REPAIR: &str = "the check could not be started, which no change to \
the workspace can fix: no repair turn was spent; fix the command or what it needs (`sh`, the \
workspace directory, the size of its arguments and environment)";

impl Verification {
    pub fn redact(&mut self, secrets: &Secrets) {
        secrets.redact_string(&mut self.command);
        for check in [
            &mut self.baseline,
            &mut self.after_agent,
            &mut self.final_check,
        ]
        .into_iter()
        .flatten()
        {
            secrets.redact_lines(&mut check.tail);
            secrets.redact_string(&mut check.tail_text);
            if let Some(error) = check.error.as_mut() {
                secrets.redact_string(error);
            }
        }
        if let Some(failed) = self.repair_failed.as_mut() {
            secrets.redact_string(&mut failed.error);
        }
    }
}

/// How a check ended, besides its result.
pub enum CheckEnd {
    Done(Check),
    /// coder got this signal while the check ran (its tree is stopped).
    Cancelled(Check, i32),
}

/// The child spec of `sh -c command` in `base`'s workspace, with `base`'s confinement
/// and environment minus credentials.
pub fn check_spec(command: &str, base: &ChildSpec) -> ChildSpec {
    let mut env: Vec<_> = base
        .env
        .iter()
        .filter(|(k, _)| !crate::text::is_secret_name(k))
        .cloned()
        .collect();
    env.retain(|(k, _)| k != "IS_SANDBOX");
    ChildSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), command.into()],
        env,
        cwd: base.cwd.clone(),
        stdin: "".into(),
        policy: base.policy.clone(),
        egress: base.egress.clone(),
    }
}

/// The kept end of a stream of output.
#[derive(Default)]
struct Tail {
    bytes: std::collections::VecDeque<u8>,
    total: u64,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        self.bytes.extend(chunk);
        let excess = self.bytes.len().saturating_sub(TAIL_BYTES);
        self.bytes.drain(..excess);
    }
}

/// Why a check's wait ended.
enum CheckStop {
    Exited(std::io::Result<std::process::ExitStatus>),
    TimedOut,
    Signal(i32),
}

/// Runs one check of `spec`, stopped after `limit`; `grace` between SIGTERM and SIGKILL.
pub async fn run_check(
    spec: &ChildSpec,
    limit: Duration,
    grace: Duration,
    signals: &mut CancelSignals,
) -> CheckEnd {
    let started = Instant::now();
    let tail = Arc::new(Mutex::new(Tail::default()));
    let spawned = match crate::supervise::spawn::spawn(spec, None).await {
        Ok(spawned) => spawned,
        Err(e) => return CheckEnd::Done(not_started(started, &e)),
    };
    let crate::supervise::spawn::Spawned {
        mut child,
        pid,
        stdin,
        stdout,
        stderr,
    } = spawned;
    drop(stdin);
    let mut readers = [
        tokio::spawn(read_into(stdout, tail.clone())),
        tokio::spawn(read_into(stderr, tail.clone())),
    ];
    let stop = tokio::select! {
        status = child.wait() => CheckStop::Exited(status),
        _ = tokio::time::sleep(limit) => CheckStop::TimedOut,
        signo = signals.recv() => CheckStop::Signal(signo),
    };
    if matches!(stop, CheckStop::Exited(_)) {
        // Give the pipes a moment to deliver what the command wrote before it exited.
        let _ = tokio::time::timeout(DRAIN, join_readers(&mut readers)).await;
    }
    // Whatever is left of the tree (a timed-out command, a background process) goes;
    // stopped for a signal, a second one cuts the grace short.
    let hurry = matches!(stop, CheckStop::Signal(_)).then_some(signals);
    stop_tree_or_sooner(Some(pid), grace, hurry).await;
    let status = match stop {
        CheckStop::Exited(ref status) => status.as_ref().ok().copied(),
        _ => child.wait().await.ok(),
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), join_readers(&mut readers)).await;
    let check = finished_check(&stop, status, &tail, limit, started);
    match stop {
        CheckStop::Signal(signo) => CheckEnd::Cancelled(check, signo),
        _ => CheckEnd::Done(check),
    }
}

/// Waits for the output readers that have not ended (each is awaited once at most: a
/// join handle must not be polled after it completed).
async fn join_readers(readers: &mut [tokio::task::JoinHandle<()>]) {
    for reader in readers.iter_mut() {
        if !reader.is_finished() {
            let _ = reader.await;
        }
    }
}

/// The check that could not be started (`sh` missing, the argument list too long): it did
/// not pass, and no repair turn can make it run.
fn not_started(started: Instant, error: &dyn std::fmt::Display) -> Check {
    Check {
        exit_code: None,
        passed: false,
        duration_ms: started.elapsed().as_millis() as u64,
        tail: Vec::new(),
        timed_out: false,
        signal: None,
        output_bytes: 0,
        error: Some(format!("the check could not be started: {error}")),
        tail_text: String::new(),
        not_started: true,
    }
}

/// The check as it ended: its exit, output tail and, when it did not finish, why.
fn finished_check(
    stop: &CheckStop,
    status: Option<std::process::ExitStatus>,
    tail: &Mutex<Tail>,
    limit: Duration,
    started: Instant,
) -> Check {
    use std::os::unix::process::ExitStatusExt;
    let (text, total) = {
        let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        let bytes: Vec<u8> = tail.bytes.iter().copied().collect();
        (String::from_utf8_lossy(&bytes).into_owned(), tail.total)
    };
    let timed_out = matches!(stop, CheckStop::TimedOut);
    let cancelled = match stop {
        CheckStop::Signal(signo) => Some(*signo),
        _ => None,
    };
    let exit_code = if timed_out {
        None
    } else {
        status.and_then(|s| s.code())
    };
    let error = match cancelled {
        // What it printed until then is kept: the check did not finish, so it did not pass.
        Some(signo) => Some(format!(
            "stopped unfinished: coder received {}",
            signal_name(signo)
        )),
        None => timed_out.then(|| {
            format!(
                "stopped after {:.1} s (--verify-timeout)",
                limit.as_secs_f64()
            )
        }),
    };
    Check {
        exit_code,
        passed: exit_code == Some(0) && cancelled.is_none(),
        duration_ms: started.elapsed().as_millis() as u64,
        tail: tail_lines(&text),
        timed_out,
        signal: status.and_then(|s| s.signal()).map(signal_name),
        output_bytes: total,
        error,
        tail_text: text,
        not_started: false,
    }
}

async fn read_into<R: tokio::io::AsyncRead + Unpin>(mut pipe: R, tail: Arc<Mutex<Tail>>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => tail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]),
        }
    }
}

/// The last [`TAIL_LINES`] lines of `text`, each cut to a readable length.
pub fn tail_lines(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(TAIL_LINES);
    lines[from..]
        .iter()
        .map(|l| crate::text::one_line(l, LINE_CHARS))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(passed: bool) -> Check {
        Check {
            exit_code: Some(if passed { 0 } else { 1 }),
            passed,
            duration_ms: 1,
            tail: Vec::new(),
            timed_out: false,
            signal: None,
            output_bytes: 0,
            error: None,
            tail_text: String::new(),
            not_started: false,
        }
    }

    #[test]
    fn verdicts() {
        let (ok, bad) = (check(true), check(false));
        assert_eq!(VerdictKind::of(Some(&ok), Some(&ok)), VerdictKind::Passed);
        assert_eq!(VerdictKind::of(Some(&bad), Some(&ok)), VerdictKind::Fixed);
        assert_eq!(
            VerdictKind::of(Some(&bad), Some(&bad)),
            VerdictKind::StillFailing
        );
        assert_eq!(
            VerdictKind::of(Some(&ok), Some(&bad)),
            VerdictKind::Regressed
        );
        assert_eq!(VerdictKind::of(None, Some(&bad)), VerdictKind::StillFailing);
        assert_eq!(VerdictKind::of(None, Some(&ok)), VerdictKind::Passed);
        assert_eq!(VerdictKind::of(Some(&ok), None), VerdictKind::NotRun);
    }

    #[test]
    fn a_token_on_the_tail_line_after_bearer_is_redacted() {
        let mut failed = check(false);
        failed.tail = vec![
            "> Authorization: Bearer".to_owned(),
            "Tk9Lm3Np7Qr1St5UvWxYz2Gh8".to_owned(),
            "FAILED".to_owned(),
        ];
        failed.tail_text = failed.tail.join("\n");
        let mut verification = Verification {
            command: "make test".to_owned(),
            baseline: None,
            after_agent: None,
            final_check: Some(failed),
            verdict: VerdictKind::StillFailing,
            repair_turns: 0,
            ignored_changes: None,
            repair_skipped: None,
            repair_failed: None,
        };
        verification.redact(&Secrets::default());
        let tail = &verification.final_check.as_ref().unwrap().tail;
        assert_eq!(tail[1], "[REDACTED]");
        assert_eq!(tail[2], "FAILED");
    }

    #[test]
    fn the_tail_keeps_the_end() {
        let mut tail = Tail::default();
        for _ in 0..100 {
            tail.push(&[b'x'; 1024]);
        }
        tail.push(b"end");
        assert_eq!(tail.bytes.len(), TAIL_BYTES);
        assert_eq!(tail.total, 100 * 1024 + 3);
        let text = (0..100).map(|i| format!("l{i}\n")).collect::<String>();
        let lines = tail_lines(&text);
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines.last().unwrap(), "l99");
    }
}
