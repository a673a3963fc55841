//! The run mode end to end: arguments -> request -> child spec -> supervised attempt ->
//! verdict -> envelope, with the guarantees that hold whatever happens in between: exactly
//! one envelope on stdout, an exit code that agrees with it, and panics turned into
//! `unexpected_exception` envelopes instead of a backtrace and silence.
//!
//! The stages live beside this file: [`journal`] (transcript, progress, retention),
//! [`attempt`] (what is prepared once, each supervised attempt, what a failure leads to,
//! the teardown), [`changes`] (the ledger's before and after in the envelope), [`checks`]
//! (git guard, `--verify` and repair turns, `--schema`, the weak-model fallback) and
//! [`state`] (what the run knows across attempts, and every envelope it can end with).

use std::ffi::OsString;
use std::time::Instant;

use serde_json::json;
use uuid::Uuid;

use crate::config;
use crate::exit::ErrorKind;
use crate::journal::Note;
use crate::journal::transcript;
use crate::pipeline::admission;
use crate::pipeline::envelope::Envelope;
use crate::pipeline::provider;
use crate::pipeline::request::{RequestFrom, RunRequest};
use crate::pipeline::session::{self, SessionStore};
use crate::pipeline::snapshot::{self, Snapshot};
use crate::supervise::{self, CancelSignals, signals::signal_name};
use crate::workspace::verify::{Check, VerdictKind, Verification};

use attempt::{PreparedRun, Teardown};
use changes::{finished_ledger, with_outcome_times, with_snapshot};
use journal::RunJournal;
use state::Run;

mod attempt;
mod changes;
mod checks;
mod journal;
mod state;

/// Runs a validated request and returns its envelope (metrics always filled in), writing
/// the run's transcript and, on a terminal, its progress.
pub async fn run(request: RunRequest) -> Envelope {
    crate::phases::mark("run.start");
    let run_started = Instant::now();
    let run_id = request.run_id.clone().unwrap_or_else(new_run_id);
    let (idle_timeout, max_duration) = (request.idle_timeout, request.max_duration);
    let with_limits = |envelope| with_limits(envelope, idle_timeout, max_duration);
    let state_dir = match config::state_dir() {
        Ok(dir) => dir,
        Err(e) => {
            // No transcript: there is no state directory to write it in.
            return with_limits(failed_before_start(Envelope::early_failure(
                ErrorKind::ConfigError,
                e.to_string(),
            )));
        }
    };
    // From here on SIGINT, SIGTERM and SIGHUP only cancel: one that arrives while the
    // worktree is made or the store is reached (seconds, on a big repository or a far
    // server) is acted on at the run's first wait, and the worktree is cleaned up, instead
    // of killing coder with a checkout and branch left behind and no envelope.
    let mut signals = match CancelSignals::install() {
        Ok(signals) => signals,
        Err(e) => {
            return with_limits(Envelope::early_failure(
                ErrorKind::UnexpectedException,
                format!("cannot install signal handlers: {e}"),
            ));
        }
    };
    // `--backend auto` and `--worktree` rewrite the request before anything reads it.
    let mut request = request;
    let many = match crate::pipeline::many::begin(&mut request, &run_id, &state_dir) {
        Ok(many) => many,
        Err(envelope) => {
            let envelope = cancelled_or(*envelope, &mut signals).await;
            let envelope = recorded_before_start(envelope, &request, &run_id, &state_dir);
            return with_limits(envelope);
        }
    };
    let transcript_path = transcript_path(&request, &run_id, &state_dir);
    let process_env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let backend = config::resolve_backend(&request.backend, &process_env);
    let mut journal = RunJournal::start(
        &request,
        &run_id,
        backend.as_ref().ok(),
        &process_env,
        &state_dir,
        &transcript_path,
    );
    let redaction = journal.redaction.clone();

    let mut teardown = Teardown::default();
    let mut envelope = run_attempts(
        &request,
        backend,
        &process_env,
        &state_dir,
        run_started,
        &mut signals,
        &mut journal,
        &mut teardown,
    )
    .await;
    many.finish(&mut envelope, &request, &redaction);
    if let Some(role) = &request.plan {
        crate::pipeline::plan::attach(&mut envelope, role, &redaction);
    }
    // The one place the finished envelope is redacted: before it is recorded or printed.
    envelope.redact(&redaction);

    end_journal(
        &mut envelope,
        &mut journal,
        &request,
        &state_dir,
        &transcript_path,
        run_started,
    );
    crate::phases::mark("journal.done");
    // The run's directories are gone before coder exits, as before; their removal only
    // overlapped with the transcript's end and the sessions' retention above.
    teardown.join();
    crate::phases::mark("teardown.joined");
    envelope
}

/// An envelope of a run that ends before it starts still reports the run's limits
/// (DESIGN §2's `error_detail`), not zeros.
fn with_limits(
    mut envelope: Envelope,
    idle_timeout: std::time::Duration,
    max_duration: Option<std::time::Duration>,
) -> Envelope {
    if let Some(detail) = envelope.error_detail.as_mut() {
        detail.idle_timeout_s = idle_timeout.as_secs_f64();
        detail.max_duration_s = max_duration.unwrap_or_default().as_secs_f64();
    }
    envelope
}

/// Where the run's transcript goes: `--transcript`, else `RUN_ID.jsonl` in the state
/// directory's owner-only `runs/`.
fn transcript_path(
    request: &RunRequest,
    run_id: &str,
    state_dir: &std::path::Path,
) -> std::path::PathBuf {
    if let Some(path) = &request.transcript {
        return path.clone();
    }
    let runs_dir = transcript::runs_dir(state_dir);
    // Owner-only, and made so if an older coder left it readable to others.
    let _ = session::private_dir(&runs_dir);
    runs_dir.join(format!("{run_id}.jsonl"))
}

/// The envelope of a run that could not begin (its worktree, `--backend auto`), or, when
/// a signal arrived meanwhile, a cancellation: a Ctrl-C at a terminal reaches the git that
/// makes the checkout too, and its failure is then the signal's doing.
async fn cancelled_or(envelope: Envelope, signals: &mut CancelSignals) -> Envelope {
    match pending_signal(signals).await {
        Some(signo) => {
            let name = signal_name(signo);
            let mut cancelled = Envelope::early_failure(
                ErrorKind::Cancelled,
                format!("cancelled by {name} before the run started"),
            );
            cancelled.exit_code = crate::exit::cancelled_exit_code(signo);
            cancelled
        }
        None => envelope,
    }
}

/// The transcript's end: the progress line cleared, the outcome noted, the file closed
/// (its path in the envelope, or a warning why not), and the sessions' retention.
fn end_journal(
    envelope: &mut Envelope,
    journal: &mut RunJournal,
    request: &RunRequest,
    state_dir: &std::path::Path,
    transcript_path: &std::path::Path,
    run_started: Instant,
) {
    if let Some(progress) = &journal.progress {
        progress.clear();
    }
    journal
        .transcript
        .note(Note::Outcome(outcome_note(envelope, run_started)));
    // The transcripts' retention ran beside the child (see [`HistoryStats`]); what is left
    // of it is waited for here, with the stat-ing of the sessions.
    let sessions_seen = journal.history.take();
    match journal.transcript.finish() {
        Some(error) => envelope.warnings.push(error.to_owned()),
        None => {
            envelope.transcript = Some(transcript_path.display().to_string());
            // Session records and histories age out with the same retention.
            let retention = transcript::Retention::default();
            SessionStore::new(state_dir).enforce_retention(
                retention.max_runs,
                retention.max_bytes,
                request.session.id(),
                &sessions_seen,
            );
        }
    }
}

/// The signal that arrived already, if any (not waiting for one).
async fn pending_signal(signals: &mut CancelSignals) -> Option<i32> {
    tokio::select! {
        biased;
        signo = signals.recv() => Some(signo),
        () = std::future::ready(()) => None,
    }
}

/// What the transcript records of a finished run: what `coder runs show` renders.
fn outcome_note(envelope: &Envelope, run_started: Instant) -> serde_json::Value {
    json!({
        "success": envelope.success,
        "error_kind": envelope.error_kind,
        "error": envelope.error,
        "exit_code": envelope.exit_code,
        "SESSION_ID": envelope.session_id,
        "result": envelope.result.as_deref().map(|r| crate::text::one_line(r, 500)),
        "duration_ms": run_started.elapsed().as_millis() as u64,
        "metrics": envelope.metrics,
        "attempts": envelope.attempts,
        // What `coder runs show` renders of the verified outcome (DESIGN §8, §10).
        "changes": envelope.changes,
        "verification": envelope.verification,
        "fallback": envelope.fallback,
        // `--json-schema` (DESIGN §9): the answer, or why it did not match.
        "structured": envelope.structured,
        "schema_repair": envelope.schema_repair,
        "schema_errors": envelope.error_detail.as_ref().and_then(|d| d.schema_errors.as_ref()),
        "worktree": envelope.worktree,
        "routing": envelope.routing,
        "questions": envelope.questions,
        "sandbox": envelope.sandbox,
        // `coder runs show` shows the plan's path and first lines (DESIGN §9).
        "plan_file": envelope.plan_file,
        "plan_head": envelope.plan.as_deref().map(crate::pipeline::plan::head_lines),
        // What a reader of a past run must not miss (unread directories, ignored
        // changes outside the scope, guards): `coder runs show` lists them.
        "warnings": envelope.warnings,
    })
}

/// A sortable run id: UTC start time to the microsecond, plus a random suffix
/// (`20261121T133652.123456Z-1a2b3c4d`). Names sort by start time, so `coder runs` lists
/// newest first even for runs started in the same second.
pub fn new_run_id() -> String {
    let now = std::time::SystemTime::now();
    let stamp = transcript::timestamp(now);
    let compact: String = stamp
        .chars()
        .take(19)
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    let micros = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_micros());
    let suffix = Uuid::new_v4().simple().to_string();
    format!("{compact}.{micros:06}Z-{}", &suffix[..8])
}

// The signals come from `run`, which listens from before the worktree is made.
#[allow(clippy::too_many_arguments)]
async fn run_attempts(
    request: &RunRequest,
    backend: Result<config::ResolvedBackend, config::ConfigError>,
    process_env: &[(OsString, OsString)],
    state_dir: &std::path::Path,
    run_started: Instant,
    signals: &mut CancelSignals,
    journal: &mut RunJournal,
    teardown: &mut Teardown,
) -> Envelope {
    let mut run = Run::new(request, run_started);
    if let Err(e) = supervise::tree::become_subreaper() {
        run.warnings.push(format!(
            "cannot become a child subreaper ({e}); detached descendants may escape cleanup"
        ));
    }
    let set_up = set_up_run(
        request,
        backend,
        process_env,
        state_dir,
        &mut run,
        signals,
        journal,
    );
    let (mut snapshot, mut prepared) = match set_up.await {
        Ok(set_up) => set_up,
        Err(envelope) => return failed_before_start(*envelope),
    };
    // Slots and cooldowns (DESIGN §10): may wait in phase `queued`, or refuse to start.
    let admission = match admission::admit(
        request,
        &prepared.backend,
        state_dir,
        run.limits.deadline,
        signals,
        journal,
        &mut run.warnings,
    )
    .await
    {
        Ok(admission) => admission,
        Err(refusal) => {
            let envelope = run.refused(refusal);
            let exclude = prepared.placeholders(request);
            return with_snapshot(
                envelope,
                &mut snapshot,
                &mut run,
                request,
                &exclude,
                journal,
                signals,
            )
            .await;
        }
    };
    // A backend that needed the compat request shape before starts in it (DESIGN §12).
    if admission.remembered_shape().await == Some(crate::store::RequestShape::Compat) {
        run.apply_remedy(provider::Remedy::CompatShape);
    }
    let baseline = match baseline_check(
        &mut prepared,
        request,
        &mut snapshot,
        &mut run,
        signals,
        journal,
    )
    .await
    {
        Ok(baseline) => baseline,
        Err(envelope) => return *envelope,
    };
    snapshot.mark_started();
    let envelope = prepared
        .attempt_loop(request.clone(), &mut run, signals, journal)
        .await;
    crate::phases::mark("attempts.done");
    journal.trash.stop();
    let (ledger, envelope) = finished_ledger(envelope, &mut snapshot, &mut run, signals).await;
    let envelope = prepared
        .verified(
            envelope, request, ledger, baseline, &mut run, signals, journal,
        )
        .await;
    crate::phases::mark("verified");
    let envelope = with_outcome_times(envelope, run.outcome_times.clone());
    close_run(envelope, prepared, admission, &mut run, journal, teardown).await
}

/// The run's setup before any wait for a slot: the ledger's "before" snapshot begun, the
/// run's fixed parts prepared (the backend, the CLI, the session, the sandbox's policy,
/// which a signal stops midway), and the snapshot finished first where the agent could
/// act before it would be.
async fn set_up_run(
    request: &RunRequest,
    backend: Result<config::ResolvedBackend, config::ConfigError>,
    process_env: &[(OsString, OsString)],
    state_dir: &std::path::Path,
    run: &mut Run,
    signals: &mut CancelSignals,
    journal: &RunJournal,
) -> Result<(Snapshot, PreparedRun), Box<Envelope>> {
    let (mut snapshot, alongside) = match begin_snapshot(request, state_dir, signals).await {
        Ok(begun) => begun,
        Err(signo) => {
            return Err(Box::new(
                run.cancelled_during_setup(signo, "the change ledger's snapshot"),
            ));
        }
    };
    let hold = snapshot.hold();
    // A signal from here to the policy's end stops the sandbox's setup midway; one that
    // came before (while the worktree was made, the snapshot begun) stops it at once.
    let listening = signals.cancel_setup(run.setup_cancel.clone());
    let prepared = PreparedRun::prepare(
        request,
        backend,
        process_env,
        state_dir,
        &journal.redaction,
        run,
        hold,
    )
    .await;
    if let Ok(listening) = listening {
        listening.abort();
    }
    let prepared = prepared?;
    snapshot.set_up(prepared.denial_policy.clone());
    if (!alongside || prepared.egress.is_none())
        && let Err(signo) = finish_snapshot_before_agent(&mut snapshot, &prepared, signals).await
    {
        return Err(Box::new(
            run.cancelled_during_setup(signo, "the change ledger's snapshot"),
        ));
    }
    Ok((snapshot, prepared))
}

/// The envelope of a run whose setup failed (a missing key, a refused grant, a bad
/// backend): nothing of the run started in the workspace, so its changes are none, said
/// without waiting for the "before" snapshot under way beside the setup. It made such a
/// `config_error` wait for a whole walk of the workspace (2.4 to 3 s at 100k files, and
/// every time: the walk's cache is kept only by a run that gets past its setup; perf26b,
/// round twenty-six). The snapshot's thread is left to the runtime's end.
fn failed_before_start(mut envelope: Envelope) -> Envelope {
    envelope.changes = Some(crate::workspace::Changes::default());
    envelope
}

/// The envelope of a run that could not begin (its worktree, `--backend auto`), made as
/// every other setup failure's (a missing key, a bad cassette): no changes, said at once,
/// and a transcript, so `coder runs` lists it. These had neither, unlike the rest.
fn recorded_before_start(
    envelope: Envelope,
    request: &RunRequest,
    run_id: &str,
    state_dir: &std::path::Path,
) -> Envelope {
    let run_started = Instant::now();
    let transcript_path = transcript_path(request, run_id, state_dir);
    let process_env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    // Named as a run's transcript names it, and its key redacted, where it resolves.
    let backend = config::resolve_backend(&request.backend, &process_env).ok();
    let mut journal = RunJournal::start(
        request,
        run_id,
        backend.as_ref(),
        &process_env,
        state_dir,
        &transcript_path,
    );
    let mut envelope = failed_before_start(envelope);
    envelope.redact(&journal.redaction);
    end_journal(
        &mut envelope,
        &mut journal,
        request,
        state_dir,
        &transcript_path,
        run_started,
    );
    envelope
}

/// Start the change ledger's "before" (DESIGN §8): beside the sandbox's setup and the
/// CLI's start where the proxy holds the agent until it is done (`true` with it), else
/// first (see `snapshot`).
///
/// A git snapshot too: a change that lands while it is taken, after the run's first
/// process started, is reported with a warning, as the plain walk's (a child that writes
/// before its first request, like the tests' fake CLI, had its edit taken for the
/// "before" without a word before `GitRepo::changed_since`).
/// A signal while a serial snapshot is taken gives it up (`Err(signal)`): the first
/// snapshot of a big workspace takes seconds, and the signal waited for its end.
async fn begin_snapshot(
    request: &RunRequest,
    state_dir: &std::path::Path,
    signals: &mut CancelSignals,
) -> Result<(Snapshot, bool), i32> {
    crate::phases::mark("ledger.start");
    let alongside = request.sandbox.is_confined()
        && !snapshot::cli_may_run_commands_at_start(&request.workspace);
    let mut snapshot = Snapshot::start(&request.workspace, state_dir, alongside);
    if !alongside {
        snapshot.finish_or_cancel(signals).await?;
    }
    crate::phases::mark(if alongside {
        "ledger.started"
    } else {
        "ledger.done"
    });
    Ok((snapshot, alongside))
}

/// No proxy holds the agent: the snapshot is done before it starts, unless a cancelling
/// signal comes first (`Err(signal)`: the first run's snapshot of a big workspace takes
/// seconds, and the signal waited for it). The plain scan's cache holds its hash key:
/// kept only where the agent cannot reach it.
async fn finish_snapshot_before_agent(
    snapshot: &mut Snapshot,
    prepared: &PreparedRun,
    signals: &mut CancelSignals,
) -> Result<(), i32> {
    snapshot.finish_or_cancel(signals).await?;
    let policy = prepared.policy.as_ref();
    if let Some(ledger) = snapshot.ledger_mut() {
        let exposed = ledger
            .cache_path()
            .is_some_and(|path| snapshot::agent_reaches(policy, path));
        ledger.keep_cache(exposed);
    }
    Ok(())
}

/// The run's end once every sandboxed process of it (agent, checks, repairs) is gone:
/// the git guard, the request shape learned, then the admission slot released (a quota
/// failure starts the backend's cooldown), and the prepared run handed to the teardown.
async fn close_run(
    envelope: Envelope,
    prepared: PreparedRun,
    admission: admission::Admission,
    run: &mut Run,
    journal: &mut RunJournal,
    teardown: &mut Teardown,
) -> Envelope {
    let mut envelope = prepared.guard_git(envelope, run, journal);
    if let Some(reason) = run.compat_learned.take() {
        admission
            .remember_compat_shape(&reason, &mut envelope, &journal.redaction)
            .await;
    }
    // Last: the slot is released and a quota failure starts the backend's cooldown.
    admission.finish(&mut envelope, &journal.redaction).await;
    teardown.start(prepared);
    crate::phases::mark("teardown.started");
    envelope
}

/// The `--verify` baseline check (DESIGN §8), when asked for: run in the workspace
/// before the agent, once the change ledger's "before" is done. `Err`: the run's
/// envelope, cancelled while it ran (the baseline as far as it got in it).
async fn baseline_check(
    prepared: &mut PreparedRun,
    request: &RunRequest,
    snapshot: &mut Snapshot,
    run: &mut Run,
    signals: &mut CancelSignals,
    journal: &mut RunJournal,
) -> Result<Option<Check>, Box<Envelope>> {
    let Some(verify) = request.checks.verify.as_ref().filter(|v| v.baseline) else {
        return Ok(None);
    };
    // The check runs in the workspace, and no proxy stands in its way: it waits.
    let check = match snapshot.finish_or_cancel(signals).await {
        Ok(()) => {
            snapshot.mark_started();
            prepared
                .check(request, "baseline", run, signals, journal)
                .await
        }
        Err(signo) => Err((signo, None)),
    };
    match check {
        Ok(check) => Ok(Some(check)),
        Err((signo, partial)) => {
            let mut envelope = run.cancelled_outside_attempt(signo, "the baseline check");
            // The baseline as far as it got (what it printed until the signal).
            envelope.verification = partial.map(|baseline| Verification {
                command: verify.command.clone(),
                baseline: Some(baseline),
                after_agent: None,
                final_check: None,
                verdict: VerdictKind::NotRun,
                repair_turns: 0,
                ignored_changes: None,
                repair_skipped: None,
                repair_failed: None,
            });
            let exclude = prepared.placeholders(request);
            let envelope =
                with_snapshot(envelope, snapshot, run, request, &exclude, journal, signals).await;
            Err(Box::new(prepared.guard_git(envelope, run, journal)))
        }
    }
}

/// What to do about a `scope_violation`: the envelope said only what changed outside the
/// scope, not that it is still there (coder reverts nothing), nor how to go on.
fn scope_hint(from: RequestFrom, worktree: bool) -> String {
    let scope = match from {
        RequestFrom::File => "--scope",
        RequestFrom::McpTool => "scope",
    };
    let place = if worktree {
        "they are in the worktree branch's commit"
    } else {
        "they are still changed in the workspace"
    };
    format!(
        "coder reverted nothing: {place} (out_of_scope lists them, changes has the rest); \
         undo them if they do not belong to the task, or give a {scope} that covers them"
    )
}

// ---- Verified outcomes (DESIGN §8): the change ledger, --verify and repair turns, the
// weak-model fallback and --scope, applied around the attempts above. ----

/// The `hint` of a `needs_input` run whose `resume_hint` says how to answer: the generic
/// one named `--session-id SESSION_ID` (a flag to a caller of the MCP tool, a resume a
/// `--worktree` run cannot have) beside a resume hint that says it exactly.
const ANSWER_AS_HINTED: &str = "the model's questions are in `questions`: answer each one, in \
     order, as resume_hint says";

#[cfg(test)]
mod tests {
    use super::journal::HistoryStats;
    use super::*;

    /// `n` sparse transcripts of `bytes` each in `dir`, aged by their index (0 oldest).
    fn old_transcripts(dir: &std::path::Path, n: usize, bytes: u64) {
        for i in 0..n {
            let file = std::fs::File::create(dir.join(format!("old{i}.jsonl"))).unwrap();
            file.set_len(bytes).unwrap();
            let age = std::time::Duration::from_secs(86_400 - i as u64);
            file.set_modified(std::time::SystemTime::now() - age)
                .unwrap();
        }
    }

    #[test]
    fn transcripts_over_the_cap_are_deleted_beside_the_child_not_at_the_end() {
        let state = tempfile::tempdir().unwrap();
        let runs = state.path().join("runs");
        std::fs::create_dir(&runs).unwrap();
        let cap = transcript::Retention::default().max_bytes;
        // Three of a third of the cap each, and the run's own transcript: over the cap.
        old_transcripts(&runs, 3, cap / 3 + 1);
        let own = runs.join("own.jsonl");
        std::fs::write(&own, b"{}\n").unwrap();
        let mut history = HistoryStats::Pending {
            runs: Some((runs.clone(), own.clone())),
            sessions: state.path().join("sessions"),
        };
        // The child's first line starts it; the run's end (`take`) is not reached here.
        assert!(history.start().is_none());
        let HistoryStats::Taking(handle) = std::mem::replace(&mut history, HistoryStats::Taken)
        else {
            panic!("no thread started");
        };
        handle.join().unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&runs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec!["old1.jsonl", "old2.jsonl", "own.jsonl"]);
    }

    #[test]
    fn a_run_whose_child_never_wrote_a_line_applies_retention_at_its_end() {
        let state = tempfile::tempdir().unwrap();
        let runs = state.path().join("runs");
        std::fs::create_dir(&runs).unwrap();
        let cap = transcript::Retention::default().max_bytes;
        old_transcripts(&runs, 3, cap / 2);
        let own = runs.join("own.jsonl");
        std::fs::write(&own, b"{}\n").unwrap();
        let mut history = HistoryStats::Pending {
            runs: Some((runs.clone(), own.clone())),
            sessions: state.path().join("sessions"),
        };
        history.take();
        assert!(own.exists(), "the run's own transcript is kept");
        assert_eq!(std::fs::read_dir(&runs).unwrap().count(), 2);
    }
}
