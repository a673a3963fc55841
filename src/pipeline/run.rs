//! The run mode end to end: arguments -> request -> child spec -> supervised attempt ->
//! verdict -> envelope, with the guarantees that hold whatever happens in between: exactly
//! one envelope on stdout, an exit code that agrees with it, and panics turned into
//! `unexpected_exception` envelopes instead of a backtrace and silence.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Instant;

use std::time::Duration;

use uuid::Uuid;

use crate::config;
use crate::exit::{ErrorKind, cancelled_exit_code};
use crate::journal::dirstats::DirStats;
use crate::journal::progress::{self, Progress};
use crate::journal::transcript::{self, Transcript};
use crate::journal::{Journal, Note};
use crate::pipeline::admission;
use crate::pipeline::child;
use crate::pipeline::cli_home::CliHome;
use crate::pipeline::envelope::{
    AttemptOutcome, AttemptSummary, Envelope, ErrorDetail, Metrics, SchemaRepair,
};
use crate::pipeline::fallback::{self, Fallback};
use crate::pipeline::observation::Observation;
use crate::pipeline::outcome::{self, Failure, LimitsForMessages, Verdict};
use crate::pipeline::provider;
use crate::pipeline::request::{RequestFrom, RunRequest, SessionChoice};
use crate::pipeline::retry::{self, Backoff, RetryDecision, SideEffects};
use crate::pipeline::session::{self, SessionLock, SessionRecord, SessionStore};
use crate::pipeline::snapshot::{self, Snapshot};
use crate::pipeline::structured::{self, Answer, Judgement};
use crate::replay::{Cassette, ReplayServer, ServeOptions};
use crate::sandbox::proxy::{Egress, Hold};
use crate::sandbox::{Policy, RunDirCleanup};
use crate::stream::Pipe;
use crate::stream::{Decoded, Line};
use crate::supervise::{self, AttemptEnd, CancelSignals, Limits, StopCause, signals::signal_name};
use crate::workspace::Ledger;
use crate::workspace::verify::{self, Check, CheckEnd, VerdictKind, Verification};
use serde_json::json;

/// Runs a validated request and returns its envelope (metrics always filled in), writing
/// the run's transcript and, on a terminal, its progress.
pub async fn run(request: RunRequest) -> Envelope {
    crate::phases::mark("run.start");
    let run_started = Instant::now();
    let run_id = request.run_id.clone().unwrap_or_else(new_run_id);
    // An envelope of a run that ends before it starts still reports the run's limits
    // (DESIGN §2's error_detail), not zeros.
    let (idle_timeout, max_duration) = (request.idle_timeout, request.max_duration);
    let with_limits = |mut envelope: Envelope| {
        if let Some(detail) = envelope.error_detail.as_mut() {
            detail.idle_timeout_s = idle_timeout.as_secs_f64();
            detail.max_duration_s = max_duration.unwrap_or_default().as_secs_f64();
        }
        envelope
    };
    let state_dir = match config::state_dir() {
        Ok(dir) => dir,
        Err(e) => {
            return with_limits(Envelope::early_failure(
                ErrorKind::ConfigError,
                e.to_string(),
            ));
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
            // A Ctrl-C at a terminal reaches the git that makes the checkout too: its
            // failure is then the signal's doing, and the run was cancelled.
            return match pending_signal(&mut signals).await {
                Some(signo) => {
                    let name = signal_name(signo);
                    let mut cancelled = Envelope::early_failure(
                        ErrorKind::Cancelled,
                        format!("cancelled by {name} before the run started"),
                    );
                    cancelled.exit_code = crate::exit::cancelled_exit_code(signo);
                    with_limits(cancelled)
                }
                None => with_limits(*envelope),
            };
        }
    };
    let runs_dir = transcript::runs_dir(&state_dir);
    let transcript_path = request
        .transcript
        .clone()
        .unwrap_or_else(|| runs_dir.join(format!("{run_id}.jsonl")));
    if request.transcript.is_none() {
        // Owner-only, and made so if an older coder left it readable to others.
        let _ = session::private_dir(&runs_dir);
    }
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

    if let Some(progress) = &journal.progress {
        progress.clear();
    }
    journal
        .transcript
        .note(Note::Outcome(outcome_note(&envelope, run_started)));
    // The transcripts' retention ran beside the child (see [`HistoryStats`]); what is left
    // of it is waited for here, with the stat-ing of the sessions.
    let sessions_seen = journal.history.take();
    match journal.transcript.finish() {
        Some(error) => envelope.warnings.push(error.to_owned()),
        None => {
            envelope.transcript = Some(transcript_path.display().to_string());
            // Session records and histories age out with the same retention.
            let retention = transcript::Retention::default();
            SessionStore::new(&state_dir).enforce_retention(
                retention.max_runs,
                retention.max_bytes,
                request.session.id(),
                &sessions_seen,
            );
        }
    }
    crate::phases::mark("journal.done");
    // The run's directories are gone before coder exits, as before; their removal only
    // overlapped with the transcript's end and the sessions' retention above.
    teardown.join();
    crate::phases::mark("teardown.joined");
    envelope
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

impl RunJournal {
    /// Opens the run's transcript (its `start` record written), its progress on a
    /// terminal, and what the history's retention will need; the secrets it redacts are
    /// the environment's and `backend`'s.
    fn start(
        request: &RunRequest,
        run_id: &str,
        backend: Option<&config::ResolvedBackend>,
        process_env: &[(OsString, OsString)],
        state_dir: &std::path::Path,
        transcript_path: &std::path::Path,
    ) -> RunJournal {
        let runs_dir = transcript::runs_dir(state_dir);
        let mut secrets = child::secret_values(process_env);
        if let Some(backend) = backend {
            // A key written into the config file is a secret whatever its variable is called.
            secrets.extend(
                backend
                    .secret_values()
                    .into_iter()
                    .filter_map(|s| s.to_str().map(str::to_owned)),
            );
        }
        let redaction = crate::text::Secrets::new(&secrets);
        let mut journal = RunJournal {
            transcript: Transcript::create(transcript_path.to_path_buf(), secrets),
            progress: progress::wanted(request.quiet)
                .then(|| Progress::start(request.idle_timeout).with_secrets(redaction.clone())),
            history: HistoryStats::Pending {
                runs: request
                    .transcript
                    .is_none()
                    .then(|| (runs_dir, transcript_path.to_path_buf())),
                sessions: SessionStore::new(state_dir).dir().to_path_buf(),
            },
            redaction: redaction.clone(),
            trash: TrashPruning::Pending(state_dir.to_path_buf()),
        };
        journal.transcript.note(Note::Start(json!({
                "run_id": run_id,
                "coder_version": env!("CARGO_PKG_VERSION"),
                "workspace": request.workspace,
                "backend": backend.map_or_else(|| requested_backend(request), |b| b.name().to_owned()),
                "sandbox": request.sandbox.as_str(),
                "session": match request.session {
                    SessionChoice::New(id) => json!({"new": id}),
                    SessionChoice::Resume(id) => json!({"resume": id}),
                },
                "prompt": crate::text::head_with_marker(&request.prompt, TRANSCRIPT_PROMPT_BYTES),
                "prompt_bytes": request.prompt.len(),
                "idle_timeout_s": request.idle_timeout.as_secs_f64(),
                "max_duration_s": request.max_duration.map_or(0.0, |d| d.as_secs_f64()),
                "max_retries": request.max_retries,
        })));
        journal
    }
}

/// Removes what a run made for itself (the CLI's config dir, the policy's run dir, the
/// placeholders in the workspace) on a thread of its own, once the run's last sandboxed
/// process is gone, and releases the session locks after it.
///
/// On ext4 under write load every `rmdir` and `unlink` can wait milliseconds for the
/// journal (measured 2 to 14 ms each on the development machine), and a sandboxed run
/// removes about twenty names: one after another on the run's path, those waits added
/// up to tens of milliseconds. Here they overlap with each other (the run dir, the CLI's
/// dir and each level of placeholders on their own threads) and with the transcript's
/// end; [`Teardown::join`] (or dropping it) waits for them, so nothing is left behind
/// when coder exits.
#[derive(Default)]
struct Teardown(Option<std::thread::JoinHandle<()>>);

impl Teardown {
    /// Starts removing `prepared`'s directories; the rest of it is dropped here.
    fn start(&mut self, prepared: PreparedRun) {
        let PreparedRun {
            cli_home,
            _run_dir: run_dir,
            locks,
            ..
        } = prepared;
        let work = move || {
            std::thread::scope(|s| {
                // A thread that cannot be started drops its closure, and with it the
                // CliHome, here: the removal then just does not overlap.
                let _ = std::thread::Builder::new().spawn_scoped(s, move || drop(cli_home));
                drop(run_dir);
            });
            drop(locks);
        };
        // Likewise: with no thread to spare, the work is done before going on.
        self.0 = std::thread::Builder::new()
            .name("coder-teardown".into())
            .spawn(work)
            .ok();
    }

    fn join(&mut self) {
        if let Some(handle) = self.0.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        self.join();
    }
}

/// How much of the prompt the transcript's `start` entry keeps (64 KiB); `prompt_bytes`
/// gives the full size. The child always gets the whole prompt.
const TRANSCRIPT_PROMPT_BYTES: usize = 64 * 1024;

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

/// The run's journal: the transcript, and the progress line when one is drawn.
struct RunJournal {
    transcript: Transcript,
    progress: Option<Progress>,
    history: HistoryStats,
    /// Empties the placeholder trash of earlier runs while the child runs (see
    /// `sandbox::trash`): started at its first line, stopped when the attempts end.
    trash: TrashPruning,
    /// The run's credentials, for what it records outside the journal too (the store's
    /// cooldown message).
    redaction: crate::text::Secrets,
}

/// The transcripts' retention, and the times and sizes of the sessions kept from earlier
/// runs for the sessions' retention at the run's end, on a thread of their own from the
/// child's first line on, while coder waits for the child.
///
/// Deleting the oldest transcripts once they are over the cap took 5 to 7 ms per 64 MB
/// file on ext4 under load when it came after the run's own transcript was finished, on
/// the way to the envelope; and with hundreds of sessions kept, stat-ing each one took
/// milliseconds more. Here both overlap with the child's run, and the run's end waits only
/// for what is left of them (nothing unless the child's run was shorter). The retention
/// counts the run's own transcript at its size then (see
/// [`transcript::enforce_retention`]), so transcripts can exceed the cap by at most the
/// rest of one run's transcript until the next run. A run whose child never wrote a line
/// does both at its end.
enum HistoryStats {
    /// Not started yet: the transcripts' directory and the run's own transcript in it
    /// (`None` for a `--transcript` of the caller's, which has no retention), and the
    /// sessions' directory.
    Pending {
        runs: Option<(std::path::PathBuf, std::path::PathBuf)>,
        sessions: std::path::PathBuf,
    },
    Taking(std::thread::JoinHandle<DirStats>),
    Taken,
}

impl HistoryStats {
    /// Starts the thread, once; with no thread to spare, does the work here.
    fn start(&mut self) -> Option<DirStats> {
        if !matches!(self, HistoryStats::Pending { .. }) {
            return None;
        }
        let HistoryStats::Pending { runs, sessions } = std::mem::replace(self, HistoryStats::Taken)
        else {
            return None;
        };
        let (retained, listed) = (runs.clone(), sessions.clone());
        let spawned = std::thread::Builder::new()
            .name("history-stats".into())
            .spawn(move || retention_and_stats(retained, &listed));
        match spawned {
            Ok(handle) => {
                *self = HistoryStats::Taking(handle);
                None
            }
            Err(_) => Some(retention_and_stats(runs, &sessions)),
        }
    }

    /// Waits for the thread (starting it first if the child never wrote a line) and
    /// returns what it found of the sessions.
    fn take(&mut self) -> DirStats {
        if let Some(done) = self.start() {
            return done;
        }
        match std::mem::replace(self, HistoryStats::Taken) {
            HistoryStats::Taking(handle) => handle.join().unwrap_or_default(),
            _ => DirStats::default(),
        }
    }
}

/// [`HistoryStats`]' work: the transcripts' retention in `runs` (the directory, and the
/// run's own transcript, which it keeps), then the sessions' times and sizes.
fn retention_and_stats(
    runs: Option<(std::path::PathBuf, std::path::PathBuf)>,
    sessions: &std::path::Path,
) -> DirStats {
    if let Some((dir, own)) = runs {
        let _ = transcript::enforce_retention(&dir, transcript::Retention::default(), &own);
    }
    DirStats::of(sessions)
}

impl Journal for RunJournal {
    fn line(&mut self, pipe: Pipe, line: Line, decoded: Option<&Decoded>) -> Option<Vec<u8>> {
        // Done in place only when no thread could be started; then the sessions' retention
        // stats every file at the end.
        let _ = self.history.start();
        self.trash.start();
        if let Some(progress) = self.progress.as_mut() {
            progress.activity();
            if let Some(decoded) = decoded {
                progress.event(&decoded.event);
            }
        }
        self.transcript.child_line(pipe, line, decoded)
    }

    fn flush(&mut self) {
        self.transcript.flush();
    }

    fn note(&mut self, note: Note<'_>) {
        if let (Note::Queued(data), Some(progress)) = (&note, self.progress.as_mut()) {
            progress.set_phase(match data["state"].as_str() {
                Some("waiting") => "queued: waiting for a slot",
                _ => "starting claude",
            });
        }
        self.transcript.note(note);
    }
}

/// The pruning of the placeholder trash: once per run, while its child runs.
enum TrashPruning {
    /// Not started: coder's state directory.
    Pending(std::path::PathBuf),
    /// Held only to be dropped, which stops it.
    Running {
        _pruner: crate::sandbox::TrashPruner,
    },
    Stopped,
}

impl TrashPruning {
    fn start(&mut self) {
        if let TrashPruning::Pending(state_dir) = self {
            *self = TrashPruning::Running {
                _pruner: crate::sandbox::TrashPruner::start(state_dir),
            };
        }
    }

    /// Stops it before its next removal, for good (it is not waited for).
    fn stop(&mut self) {
        *self = TrashPruning::Stopped;
    }
}

/// The backend name as asked for, before resolution (for records of runs that fail it).
fn requested_backend(request: &RunRequest) -> String {
    request
        .backend
        .backend
        .clone()
        .unwrap_or_else(|| "default".to_owned())
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
    // The change ledger's "before" (DESIGN §8): beside the sandbox's setup and the CLI's
    // start where the proxy holds the agent until it is done, else first (see `snapshot`).
    crate::phases::mark("ledger.start");
    // A git snapshot too: a change that lands while it is taken, after the run's first
    // process started, is reported with a warning, as the plain walk's (a child that
    // writes before its first request, like the tests' fake CLI, had its edit taken for
    // the "before" without a word before `GitRepo::changed_since`).
    let alongside = request.sandbox.is_confined()
        && !snapshot::cli_may_run_commands_at_start(&request.workspace);
    let mut snapshot = Snapshot::start(&request.workspace, state_dir, alongside).await;
    crate::phases::mark(if alongside {
        "ledger.started"
    } else {
        "ledger.done"
    });
    let hold = snapshot.hold();
    let prepared = PreparedRun::prepare(
        request,
        backend,
        process_env,
        state_dir,
        &journal.redaction,
        &mut run,
        hold,
    );
    let mut prepared = match prepared.await {
        Ok(prepared) => prepared,
        Err(envelope) => {
            return with_snapshot(
                *envelope,
                &mut snapshot,
                &mut run,
                request,
                &[],
                journal,
                signals,
            )
            .await;
        }
    };
    snapshot.set_up(prepared.denial_policy.clone());
    if !alongside || prepared.egress.is_none() {
        // No proxy holds the agent: the snapshot is done before it starts.
        snapshot.finish().await;
        // The plain scan's cache holds its hash key: kept only where the agent cannot reach it.
        let policy = prepared.policy.as_ref();
        if let Some(ledger) = snapshot.ledger_mut() {
            let exposed = ledger
                .cache_path()
                .is_some_and(|path| snapshot::agent_reaches(policy, path));
            ledger.keep_cache(exposed);
        }
    }
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
    // Every sandboxed process of the run (agent, checks, repairs) is gone.
    let mut envelope = prepared.guard_git(envelope, &run, journal);
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
            });
            let exclude = prepared.placeholders(request);
            let envelope =
                with_snapshot(envelope, snapshot, run, request, &exclude, journal, signals).await;
            Err(Box::new(prepared.guard_git(envelope, run, journal)))
        }
    }
}

/// The run's sandbox arguments with the config file's: its `deny` globs first, then
/// `--deny` (both add to the defaults); its `allow_hosts` join `--allow-host`.
fn agent_sandbox_args(
    request: &RunRequest,
    backend: &config::ResolvedBackend,
) -> crate::sandbox::AgentSandboxArgs {
    let mut args = request.sandbox_args.clone();
    args.deny = backend
        .deny_globs()
        .iter()
        .chain(&request.sandbox_args.deny)
        .cloned()
        .collect();
    args.allow_hosts
        .extend(backend.allow_hosts().iter().cloned());
    args
}

impl PreparedRun {
    /// Runs attempts of `request` until one succeeds or a failure ends the run (retrying
    /// what DESIGN §6 allows); its envelope.
    async fn attempt_loop(
        &mut self,
        request: RunRequest,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Envelope {
        let mut request = request;
        let prepared = self;
        let mut session = request.session;
        let mut backoff = Backoff::standard();
        loop {
            let (verdict, attempt) = prepared
                .attempt(&request, session, run, signals, journal)
                .await;
            let failure = match verdict {
                Verdict::Success { result } => {
                    run.record_attempt(session, &attempt, AttemptOutcome::Success, None);
                    return run.success_envelope(session, result, attempt);
                }
                Verdict::Failure(failure) => failure,
            };
            match after_failure(&request, run, &attempt, failure) {
                NextStep::Remedy {
                    kind,
                    remedy,
                    class,
                } => {
                    let action = provider::class_name(class);
                    run.record_attempt(
                        session,
                        &attempt,
                        AttemptOutcome::Failed(kind),
                        Some(format!("{action}: {}", remedy.describe())),
                    );
                    run.apply_remedy(remedy);
                    if remedy == provider::Remedy::CompatShape {
                        run.compat_learned = Some(action.clone());
                    }
                    journal.note(Note::Remedy(
                        json!({"class": action, "remedy": remedy.describe()}),
                    ));
                    // Work done so far lives in the session: resume it. A session that holds
                    // only the prompt gains nothing over a fresh one with the same prompt.
                    let ran_tools = !attempt.effects.mutating_tools.is_empty()
                        || !attempt.effects.read_tools.is_empty();
                    if ran_tools && attempt.observation.session_id.is_some() {
                        session = SessionChoice::Resume(session.id());
                        request.prompt = remedy.nudge(class).into();
                    } else {
                        session = SessionChoice::New(Uuid::new_v4());
                        prepared.lock_session(session);
                    }
                }
                NextStep::Stop(stop) => {
                    if let Some(error) = stop.provider_error.as_ref().filter(|e| e.session_poisoned)
                        && let Err(e) = prepared
                            .store
                            .mark_poisoned(session.id(), &provider::class_name(error.class))
                    {
                        run.warnings
                            .push(format!("cannot mark the session as not resumable: {e}"));
                    }
                    run.record_attempt(
                        session,
                        &attempt,
                        AttemptOutcome::Failed(stop.failure.kind),
                        stop.refusal.clone(),
                    );
                    return run.failure_envelope(session, *stop, attempt);
                }
                NextStep::Retry { kind, delay } => {
                    let standard = backoff.next().unwrap_or(Duration::from_secs(1));
                    let delay = delay.unwrap_or(standard);
                    run.record_attempt(
                        session,
                        &attempt,
                        AttemptOutcome::Failed(kind),
                        Some(format!("retried after {:.1} s", delay.as_secs_f64())),
                    );
                    journal.note(Note::Retry { delay });
                    if let Some(progress) = journal.progress.as_mut() {
                        progress.set_phase(format!("retrying in {:.1} s", delay.as_secs_f64()));
                    }
                    let cancelled = tokio::select! {
                        biased;
                        signo = signals.recv() => Some(signo),
                        _ = tokio::time::sleep(delay) => None,
                    };
                    if let Some(signo) = cancelled {
                        return run.cancelled_during_backoff(session, signo, attempt);
                    }
                    run.retries += 1;
                    if let SessionChoice::New(_) = session {
                        // The failed attempt may have created its session; a fresh attempt
                        // needs a fresh id.
                        session = SessionChoice::New(Uuid::new_v4());
                        prepared.lock_session(session);
                    }
                }
            }
        }
    }
}

/// Everything a run needs before its first attempt, built once: the backend (with its
/// replay server), the program, the session store and locks, the sandbox policy and the
/// helper started early for the first attempt.
struct PreparedRun {
    backend: config::ResolvedBackend,
    replay_server: Option<ReplayServer>,
    /// The CLI's config dir, fresh for this run (removed when the run ends).
    cli_home: CliHome,
    child_base_env: Vec<(OsString, OsString)>,
    program: std::path::PathBuf,
    store: SessionStore,
    locks: Vec<SessionLock>,
    helper: Option<supervise::spawn::StartedHelper>,
    policy: Option<Policy>,
    denial_policy: Option<Arc<Policy>>,
    /// The egress proxy a confined child reaches the network through (see
    /// `sandbox::proxy`), shared by every attempt.
    egress: Option<Arc<Egress>>,
    /// Removes the policy's per-run directory when the run ends.
    _run_dir: RunDirCleanup,
}

/// One finished attempt: how the process ended, what it said, and what it may have
/// changed.
struct AttemptRecord {
    end: AttemptEnd,
    observation: Observation,
    effects: SideEffects,
}

impl PreparedRun {
    /// Builds the run's fixed parts, or the envelope of the failure that stops it before
    /// any attempt (config, missing CLI, session conflicts, sandbox).
    async fn prepare(
        request: &RunRequest,
        backend: Result<config::ResolvedBackend, config::ConfigError>,
        process_env: &[(OsString, OsString)],
        state_dir: &std::path::Path,
        secrets: &crate::text::Secrets,
        run: &mut Run,
        hold: Option<Hold>,
    ) -> Result<PreparedRun, Box<Envelope>> {
        let early = |run: &Run, kind: ErrorKind, message: String| {
            Box::new(run.early_envelope(kind, message.clone(), message, None))
        };
        // A run that cannot start for want of a backend or a CLI reports a mistake in the
        // caller's own sandbox arguments first (a `--write` path that does not exist, a
        // workspace holding coder's state): it is the cheaper one to fix, and the other
        // error would come back once the first is fixed. On the way to the CLI the policy
        // checks them all again.
        let arguments_first =
            |run: &Run, envelope: Box<Envelope>| match crate::sandbox::check_agent_arguments(
                request.sandbox,
                &request.workspace,
                &request.sandbox_args,
            ) {
                Err(bad) => Box::new(sandbox_failure(run, &bad)),
                Ok(()) => envelope,
            };
        let mut backend = backend
            .map_err(|e| arguments_first(run, early(run, ErrorKind::ConfigError, e.to_string())))?;
        let replay_server = start_replay_server(request, &mut backend)
            .await
            .map_err(|message| early(run, ErrorKind::ConfigError, message))?;
        backend
            .ensure_claude_config_dir()
            .map_err(|e| early(run, ErrorKind::ConfigError, e.to_string()))?;
        run.take_backend(&backend, request);
        let mut child_base_env = config::child_environment(process_env, &backend);

        let path_var = std::env::var_os("PATH");
        let program = child::resolve_program(request.claude_bin.as_deref(), path_var.as_deref())
            .map_err(|e| {
                arguments_first(
                    run,
                    Box::new(run.early_envelope(
                        ErrorKind::CommandNotFound,
                        format!("claude CLI not found: {e}"),
                        format!("cannot run the claude CLI: {e}"),
                        Some(child::INSTALL_HINT.to_owned()),
                    )),
                )
            })?;

        // Session safety: one driver per session, and resumes only where the session lives.
        let store = SessionStore::new(state_dir).redacting(secrets.clone());
        if let SessionChoice::Resume(id) = request.session {
            let tool_arguments = request.request_from == RequestFrom::McpTool;
            store
                .check_resume(id, &request.workspace, backend.name())
                .map_err(|e| early(run, ErrorKind::ConfigError, e.message_for(tool_arguments)))?;
        }
        let lock = store
            .lock(request.session.id())
            .map_err(|e| early(run, ErrorKind::ConfigError, e.to_string()))?;
        // The CLI's config dir: fresh for this run, in every sandbox mode (see cli_home).
        let cli_home = CliHome::for_run(request, &backend, state_dir, &store)
            .map_err(|e| early(run, ErrorKind::ConfigError, e.to_string()))?;
        cli_home.apply_env(&mut child_base_env);
        run.warnings.extend(cli_home.notes().iter().cloned());
        crate::phases::mark("cli_home.done");

        // A confined child starts through the helper. Started now, its own start overlaps
        // with resolving the policy; it serves the first attempt (dropped unused, it just
        // exits). It is started on the spawner thread, so that this thread resolves the
        // policy while the spawn waits for the helper's `execve`.
        let helper = request
            .sandbox
            .is_confined()
            .then(|| supervise::spawn::PendingHelper::start(&request.workspace));
        crate::phases::mark("helper.spawned");

        // The sandbox: resolved once per run here, applied by the helper to every attempt.
        let preview = child::build(request, program.clone(), child_base_env.clone());
        let policy = crate::sandbox::policy_for_agent(
            request.sandbox,
            &request.workspace,
            &program,
            &preview.env,
            &agent_sandbox_args(request, &backend),
            request.plan.as_ref().and_then(|p| p.writable_file()),
        )
        .map_err(|e| Box::new(sandbox_failure(run, &e)))?;
        crate::phases::mark("policy.done");
        if let Some(policy) = &policy {
            run.warnings.extend(policy.warnings.iter().cloned());
        }
        let helper = helper.and_then(supervise::spawn::PendingHelper::join);
        crate::phases::mark("helper.joined");
        Ok(PreparedRun {
            _run_dir: RunDirCleanup::new(policy.as_ref()),
            denial_policy: policy.clone().map(Arc::new),
            egress: policy
                .as_ref()
                .map(|p| Arc::new(Egress::held(p.network.allow.clone(), hold))),
            policy,
            backend,
            replay_server,
            cli_home,
            child_base_env,
            program,
            store,
            locks: vec![lock],
            helper,
        })
    }

    /// Holds `session`'s lock for the rest of the run (best effort: a fresh id is unique).
    fn lock_session(&mut self, session: SessionChoice) {
        if let Ok(lock) = self.store.lock(session.id()) {
            self.locks.push(lock);
        }
    }

    /// Runs one supervised attempt on `session`; returns its verdict and record.
    async fn attempt(
        &mut self,
        request: &RunRequest,
        session: SessionChoice,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> (Verdict, AttemptRecord) {
        let attempt_request = RunRequest {
            session,
            ..request.clone()
        };
        let mut spec = child::build(
            &attempt_request,
            self.program.clone(),
            self.child_base_env.clone(),
        );
        spec.args.extend(self.backend.cli_args());
        apply_remedies(&mut spec, &run.remedies);
        if let Some(policy) = &self.policy {
            child::confine(&mut spec, policy.clone());
            spec.egress = self.egress.clone();
        }
        let mut observation =
            Observation::new(Instant::now(), request.return_all_messages, spec.secrets())
                .with_sandbox(self.denial_policy.clone())
                .with_questions(request.allow_questions);
        journal.note(Note::Attempt {
            attempt: run.attempts.len() + 1,
            session_id: session.id().to_string(),
        });
        if let Some(progress) = journal.progress.as_mut() {
            progress.set_phase("starting claude");
        }
        let end = supervise::run_attempt(
            &spec,
            self.helper.take(),
            &run.limits,
            &mut observation,
            signals,
            journal,
        )
        .await;
        note_egress(self.egress.as_deref(), &mut observation, journal);
        let verdict = outcome::classify(&end, &observation, run.message_limits);
        if request.checks.json_schema.is_some() {
            run.answer = Answer::of(
                observation.result.as_ref(),
                observation.last_structured_call.as_ref(),
            );
        }
        self.report_replay_problems(run);
        let started = !matches!(end.cause, StopCause::SpawnFailed(_));
        if started && observation.session_id.is_some() {
            if let Err(e) = self.cli_home.keep_history(session.id(), &self.store) {
                run.warnings.push(format!(
                    "cannot keep the session's history for resumes: {e}"
                ));
            }
            remember_session(
                &self.store,
                session,
                request,
                self.backend.name(),
                &observation,
                run,
            );
        }
        let effects = SideEffects::from_tool_calls(
            started,
            observation.tool_calls.keys().map(String::as_str),
        );
        (
            verdict,
            AttemptRecord {
                end,
                observation,
                effects,
            },
        )
    }

    /// The cassette's own view: requests it could not answer as scripted, as warnings.
    fn report_replay_problems(&self, run: &mut Run) {
        let Some(server) = &self.replay_server else {
            return;
        };
        for problem in server.report().problems() {
            let warning = format!("replay: {problem}");
            if !run.warnings.contains(&warning) {
                run.warnings.push(warning);
            }
        }
    }
}

/// Puts the provider remedies' flags and variables into the child's spec (a variable the
/// backend already set is overridden).
fn apply_remedies(spec: &mut child::ChildSpec, remedies: &[provider::Remedy]) {
    for remedy in remedies {
        let (args, vars) = remedy.cli_changes();
        spec.args.extend(args.iter().map(OsString::from));
        for (name, value) in vars {
            spec.env.retain(|(k, _)| k != name);
            spec.env.push((OsString::from(name), OsString::from(value)));
        }
    }
}

/// After an attempt: what the proxy refused becomes sandbox denials, and its counts go to
/// the transcript (`egress` note), which shows that the backend was reached through it.
fn note_egress(egress: Option<&Egress>, observation: &mut Observation, journal: &mut RunJournal) {
    let Some(log) = egress.map(Egress::take_log) else {
        return;
    };
    journal.note(Note::Egress(
        json!({"allowed": log.allowed, "denied": log.denied, "denials": log.denials}),
    ));
    for denial in log.denials {
        if !observation.denials.contains(&denial) {
            observation.denials.push(denial);
        }
    }
}

/// The envelope of a sandbox that cannot be set up (fail closed).
fn sandbox_failure(run: &Run, e: &crate::sandbox::SandboxError) -> Envelope {
    // A bad argument (a --read/--write path, a glob, an --allow-host value, a plan file
    // the policy cannot take, a grant reaching coder's state) is the caller's to change,
    // not a sandbox that cannot be had.
    if e.is_bad_argument() {
        let message = match e {
            crate::sandbox::SandboxError::Path {
                what: crate::sandbox::PathRole::PlanFile,
                ..
            } => format!("--plan-file: {e}"),
            _ => e.to_string(),
        };
        return run.early_envelope(ErrorKind::ConfigError, message.clone(), message, None);
    }
    run.early_envelope(
        ErrorKind::SandboxError,
        format!("sandbox: {e}"),
        format!("the sandbox cannot be set up: {e}"),
        Some(sandbox_failure_hint(e, &run.workspace)),
    )
}

/// What to do about a sandbox that cannot be set up. A path coder may not open or change
/// (a directory in the workspace another user owns, such as a container's data directory;
/// a `--read` path of another user's) is a permission to fix, which `coder doctor` does
/// not check.
fn sandbox_failure_hint(e: &crate::sandbox::SandboxError, workspace: &std::path::Path) -> String {
    use nix::errno::Errno;
    match e {
        crate::sandbox::SandboxError::Syscall {
            path,
            errno: Errno::EACCES | Errno::EPERM,
            ..
        } => {
            let uid = nix::unistd::geteuid();
            if std::path::Path::new(path).starts_with(workspace) {
                format!(
                    "coder (uid {uid}) may not open or change {path}: a confined run reads \
                     every directory of the workspace it may enter (to mask secrets in it) and \
                     guards its git and tool configs (another user's directory you may not \
                     enter at all is left out); give yourself access to it, move it out of the \
                     workspace, or use --sandbox danger-full-access"
                )
            } else {
                format!(
                    "coder (uid {uid}) may not open or change {path}: give yourself access to \
                     it, or leave it out of the grants (--read, --write)"
                )
            }
        }
        _ => "run `coder doctor`; --sandbox danger-full-access runs without confinement".to_owned(),
    }
}

/// A replay backend gets its base URL from a local replay server, which lives as long as
/// the run. `Ok(None)` for every other backend.
async fn start_replay_server(
    request: &RunRequest,
    backend: &mut config::ResolvedBackend,
) -> Result<Option<ReplayServer>, String> {
    let Some(path) = backend
        .replay_cassette()
        .filter(|_| backend.base_url().is_none())
        .map(std::path::Path::to_path_buf)
    else {
        return Ok(None);
    };
    let options = ServeOptions {
        port: 0,
        workspace: Some(request.workspace.clone()),
    };
    let started = match Cassette::load(&path) {
        Ok(cassette) => ReplayServer::start(cassette, options).await,
        Err(e) => Err(e),
    };
    match started {
        Ok(server) => {
            *backend = backend.clone().with_base_url(&server.base_url());
            Ok(Some(server))
        }
        Err(e) => Err(format!("backend '{}': {e}", backend.name())),
    }
}

/// What follows a failed attempt.
enum NextStep {
    /// Try again after `delay` (the provider's backoff) or the standard backoff.
    Retry {
        kind: ErrorKind,
        delay: Option<Duration>,
    },
    /// Change a setting and go on (a provider remedy, DESIGN §12): not a blind retry.
    Remedy {
        kind: ErrorKind,
        remedy: provider::Remedy,
        class: provider::ProviderClass,
    },
    /// The run ends with this failure.
    Stop(Box<Stop>),
}

/// A failure that ends the run, with how the envelope explains it.
struct Stop {
    failure: Failure,
    upstream: Option<retry::UpstreamClass>,
    /// `error_detail.provider_error` (DESIGN §12).
    provider_error: Option<provider::ProviderError>,
    /// Why a retry was not made, when the user could have expected one.
    refusal: Option<String>,
}

/// What to do after a transient upstream failure ended a run that changed nothing, naming
/// the retry setting as the caller gives it: run again, or let coder retry; after
/// `retried` retries (of `allowed`), run again later, or allow more where the limit was
/// what stopped them (a rate limit's own cap of three, or the clock, was not).
fn transient_hint(from: RequestFrom, retried: u32, allowed: u32) -> String {
    let setting = match from {
        RequestFrom::File => "--max-retries N",
        RequestFrom::McpTool => "max_retries",
    };
    if retried == 0 {
        return format!(
            "a transient failure, and the attempt changed nothing: run again, or set \
             {setting} to have coder retry it with backoff"
        );
    }
    let more = if retried >= allowed {
        format!(", or with a higher {setting}")
    } else {
        String::new()
    };
    format!(
        "a transient failure that lasted through {retried} retr{}, and no attempt changed \
         anything: run again later (the provider may be down for a while){more}",
        if retried == 1 { "y" } else { "ies" }
    )
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

/// Decides whether a failed attempt is retried (DESIGN §6): a retryable kind, no side
/// effects a retry could repeat, retries and time left. Upstream failures are classified
/// per provider first ([`provider::classify`], DESIGN §12): that decides whether they are
/// transient at all, and how long to wait.
fn after_failure(
    request: &RunRequest,
    run: &Run,
    attempt: &AttemptRecord,
    mut failure: Failure,
) -> NextStep {
    let mut provider_error = (failure.kind == ErrorKind::UpstreamError)
        .then(|| provider::classify_failure(&failure, run.provider));
    let out_of_time = run
        .limits
        .deadline
        .is_some_and(|deadline| Instant::now() >= deadline);
    // A provider remedy changes the request, so it is not a retry: it goes first, once.
    let mut remedy_refusal = None;
    if let Some(error) = provider_error.as_mut()
        && let Some(remedy) = provider::Remedy::for_class(error.class)
    {
        if run.remedies.contains(&remedy) {
            provider::after_remedy_failed(error, remedy);
            let why = format!("coder already tried: {}", remedy.exhausted());
            failure.hint = Some(why.clone());
            remedy_refusal = Some(why);
        } else if !out_of_time {
            return NextStep::Remedy {
                kind: failure.kind,
                remedy,
                class: error.class,
            };
        }
    }
    let upstream = provider_error.as_ref().map(|e| retry::UpstreamClass {
        retryable: e.retryable,
        session_poisoned: e.session_poisoned,
    });
    if failure.hint.is_none() {
        failure.hint = provider_error.as_ref().and_then(provider::hint);
    }
    // A transient failure (a 5xx, a broken connection) of a run without retries said
    // nothing of what to do: `retryable: true` alone does not name `--max-retries`.
    let retries_left = request.max_retries.saturating_sub(run.retries);
    let mut decision = retry::decide(
        &failure,
        upstream,
        &attempt.effects,
        request.sandbox,
        retries_left,
    );
    if let Some(refusal) = provider_error
        .as_ref()
        .and_then(|e| provider::refuse_retry(e, run.retries))
    {
        decision = RetryDecision::Refuse(refusal);
    }
    let refusal = match decision {
        RetryDecision::Retry if !out_of_time => {
            return NextStep::Retry {
                kind: failure.kind,
                delay: provider_error
                    .as_ref()
                    .and_then(|e| provider::retry_delay(e, run.retries)),
            };
        }
        RetryDecision::Retry => Some("the run is out of time (--max-duration)".into()),
        RetryDecision::Refuse(why) if request.max_retries > 0 => Some(why),
        RetryDecision::Refuse(why) if !attempt.effects.mutating_tools.is_empty() => Some(why),
        RetryDecision::Refuse(_) => None,
    };
    // A transient failure (a 5xx, a broken connection, a rate limit) that ends the run
    // said nothing of what to do: `retryable: true` alone does not name `--max-retries`,
    // and `retry_refused` only says that none are left.
    if failure.hint.is_none()
        && attempt.effects.mutating_tools.is_empty()
        && provider_error.as_ref().is_some_and(|e| e.retryable)
    {
        failure.hint = Some(transient_hint(
            request.request_from,
            run.retries,
            request.max_retries,
        ));
    }
    NextStep::Stop(Box::new(Stop {
        failure,
        upstream,
        provider_error,
        refusal: remedy_refusal.or(refusal),
    }))
}

fn remember_session(
    store: &SessionStore,
    session: SessionChoice,
    request: &RunRequest,
    backend: &str,
    observation: &Observation,
    run: &mut Run,
) {
    let now = session::now_secs();
    let existing = store.load(session.id()).ok().flatten();
    // Open questions (DESIGN §9): the ones just asked; else kept until a run succeeds.
    let answered = observation.result.as_ref().is_some_and(|r| !r.is_error);
    let questions = match &observation.questions {
        Some(asked) => Some(asked.clone()),
        None if answered => None,
        None => existing.as_ref().and_then(|r| r.questions.clone()),
    };
    let record = SessionRecord {
        session_id: session.id(),
        workspace: request.workspace.clone(),
        backend: backend.to_owned(),
        cli_version: observation.cli_version.clone(),
        poisoned: existing.as_ref().and_then(|r| r.poisoned.clone()),
        created_at: existing.map_or(now, |r| r.created_at),
        updated_at: now,
        questions,
    };
    if let Err(e) = store.save(&record) {
        run.warnings
            .push(format!("cannot record the session for safe resumes: {e}"));
    }
}

/// State shared by all attempts of one run, and the envelope builders.
struct Run {
    started: Instant,
    limits: Limits,
    message_limits: LimitsForMessages,
    return_all_messages: bool,
    workspace: std::path::PathBuf,
    /// `--sandbox read-only`: no write of the agent can have happened (but to the plan
    /// file of a plan run).
    read_only: bool,
    /// `coder plan`: the plan file, the one file the agent may have written.
    plan_file: Option<std::path::PathBuf>,
    /// Who wrote the request: a resume hint is a command line, or the MCP tool's arguments.
    request_from: RequestFrom,
    retries: u32,
    attempts: Vec<AttemptSummary>,
    warnings: Vec<String>,
    usage: crate::pipeline::envelope::TokenUsage,
    tool_calls: std::collections::BTreeMap<String, u64>,
    tool_time: std::collections::BTreeMap<String, Duration>,
    denials: Vec<crate::sandbox::Denial>,
    backend: String,
    /// The backend was named (`--backend`, `CODER_BACKEND`), not the config's default: a
    /// resume hint must name it too, or the resume would run on the default one.
    backend_named: bool,
    /// Files of failed Edit/MultiEdit calls (the fallback's trigger).
    failed_edits: Vec<String>,
    /// Who serves the backend's API (how its errors are read, whether its cost is real).
    provider: provider::Provider,
    /// `applied_workarounds` of every envelope.
    workarounds: Vec<config::Workaround>,
    /// What the verified outcome cost, for `metrics.outcome_ms`.
    outcome_times: crate::pipeline::envelope::OutcomeTimes,
    /// Provider remedies applied to every attempt from now on (DESIGN §12), in order.
    remedies: Vec<provider::Remedy>,
    /// Why this run switched its backend to the compat request shape, for the store, so
    /// that later runs start there.
    compat_learned: Option<String>,
    /// `--json-schema`: what the last attempt offered as its answer.
    answer: Option<Answer>,
}

impl Run {
    /// Takes what the run reports and obeys of its resolved `backend`: its warnings, name,
    /// provider, retry limits and workarounds; and says when sandbox flags were given to a
    /// run that confines nothing.
    fn take_backend(&mut self, backend: &config::ResolvedBackend, request: &RunRequest) {
        self.warnings.extend(backend.warnings().iter().cloned());
        let unused = request.sandbox_args.given_flags();
        if !request.sandbox.is_confined() && !unused.is_empty() {
            self.warnings.push(format!(
                "{} had no effect: --sandbox danger-full-access does not confine the agent, \
                 which may read, write and reach whatever you can",
                unused.join(", ")
            ));
        }
        self.backend = backend.name().to_owned();
        self.provider = backend.provider();
        self.limits.rate_limit_retries_allowed = backend.rate_limit_retries_allowed();
        self.workarounds = backend.applied_workarounds();
        self.limits.provider_wait = backend.provider_wait();
    }

    fn new(request: &RunRequest, started: Instant) -> Self {
        Run {
            started,
            limits: Limits {
                idle: request.idle_timeout,
                deadline: request.max_duration.map(|d| started + d),
                kill_grace: request.kill_grace,
                max_line_bytes: request.max_line_bytes,
                provider_wait: None,
                rate_limit_retries_allowed: None,
            },
            message_limits: LimitsForMessages {
                idle_timeout_s: request.idle_timeout.as_secs_f64(),
                max_duration_s: request.max_duration.map_or(0.0, |d| d.as_secs_f64()),
            },
            return_all_messages: request.return_all_messages,
            workspace: request.workspace.clone(),
            read_only: request.sandbox == crate::sandbox::Mode::ReadOnly,
            plan_file: request
                .plan
                .as_ref()
                .and_then(|p| p.writable_file())
                .map(std::path::Path::to_path_buf),
            request_from: request.request_from,
            retries: 0,
            attempts: Vec::new(),
            warnings: Vec::new(),
            usage: Default::default(),
            tool_calls: Default::default(),
            tool_time: Default::default(),
            denials: Vec::new(),
            backend: requested_backend(request),
            backend_named: request.backend.backend.is_some(),
            failed_edits: Vec::new(),
            provider: provider::Provider::Other,
            workarounds: Vec::new(),
            outcome_times: Default::default(),
            remedies: Vec::new(),
            compat_learned: None,
            answer: None,
        }
    }

    /// How to continue a run that stopped after `tools` may have changed things: a command
    /// line, or under `coder mcp` the `coder` tool's arguments (its caller has no shell).
    fn continue_hint(&self, tools: &str, id: &str) -> String {
        let what = if self.read_only && self.plan_file.is_none() {
            format!(
                "the agent tried to change things ({tools}); the read-only sandbox refused every write"
            )
        } else if self.plan_file.is_some() {
            format!("the agent may have written part of the plan ({tools})")
        } else {
            format!("the agent ran tools that may have changed things ({tools})")
        };
        if self.request_from == RequestFrom::McpTool {
            let arguments = self.tool_arguments(id, json!({"PROMPT": "continue"}));
            return format!(
                "{what}; to continue where it stopped, call the coder tool with {arguments}"
            );
        }
        let ws = crate::text::shell_quote(&self.workspace.display().to_string());
        match &self.plan_file {
            // A plan run continues as one, with the same plan file.
            Some(plan) => format!(
                "{what}; to continue where it stopped: coder plan --cd {ws}{} --plan-file {} \
                 --session-id {id} \"continue\"",
                self.backend_flag(),
                crate::text::shell_quote(&plan.display().to_string()),
            ),
            None => format!(
                "{what}; to continue where it stopped: coder --cd {ws}{} --session-id {id} \"continue\"",
                self.backend_flag(),
            ),
        }
    }

    /// How to have the agent go on after its work failed the `--verify` check (its repair
    /// turns spent): the same session, with the same check.
    fn verify_hint(&self, id: &str, command: &str) -> String {
        let what = "the check still fails after the agent's work";
        let task = "the check still fails: fix it";
        if self.request_from == RequestFrom::McpTool {
            let arguments = self.tool_arguments(id, json!({"PROMPT": task, "verify": command}));
            return format!(
                "{what}; to have the agent go on, call the coder tool with {arguments}"
            );
        }
        format!(
            "{what}; to have the agent go on: coder --cd {}{} --session-id {id} --verify {} \"{task}\"",
            crate::text::shell_quote(&self.workspace.display().to_string()),
            self.backend_flag(),
            crate::text::shell_quote(command),
        )
    }

    /// How to answer the `asked` questions of a `needs_input` run (see
    /// [`Run::continue_hint`]): the answers list has one `"…"` per question, so a caller
    /// asked two sees it must give two.
    fn answer_hint(&self, id: &str, asked: usize) -> String {
        let answers = vec!["…"; asked.max(1)];
        if self.request_from == RequestFrom::McpTool {
            let arguments = self.tool_arguments(id, json!({"PROMPT": "", "answers": answers}));
            return format!(
                "answer with the coder tool's arguments {arguments} (one answer per question, \
                 in order)"
            );
        }
        let list = serde_json::to_string(&answers)
            .unwrap_or_default()
            .replace("\",\"", "\", \"");
        // A plan run's questions are answered in a plan run, writing the same plan file:
        // a plain `coder` resume would carry the plan session on in workspace-write.
        let command = match &self.plan_file {
            Some(plan) => format!(
                "coder plan --cd {}{} --plan-file {}",
                crate::text::shell_quote(&self.workspace.display().to_string()),
                self.backend_flag(),
                crate::text::shell_quote(&plan.display().to_string()),
            ),
            None => format!(
                "coder --cd {}{}",
                crate::text::shell_quote(&self.workspace.display().to_string()),
                self.backend_flag(),
            ),
        };
        format!(
            "answer with: {command} --session-id {id} --answers {} (one answer per question, \
             in order)",
            crate::text::shell_quote(&list),
        )
    }

    /// The `coder` MCP tool's arguments that resume session `id` where this run ran (on
    /// its backend, when it named one), with `extra` added.
    fn tool_arguments(&self, id: &str, mut extra: serde_json::Value) -> serde_json::Value {
        extra["cd"] = json!(self.workspace);
        extra["SESSION_ID"] = json!(id);
        if self.backend_named {
            extra["backend"] = json!(self.backend);
        }
        extra
    }

    /// ` --backend NAME` for a command that must run on this run's backend (a resume: the
    /// session record refuses another backend), when the run named it; else nothing.
    fn backend_flag(&self) -> String {
        if self.backend_named {
            format!(" --backend {}", crate::text::shell_quote(&self.backend))
        } else {
            String::new()
        }
    }

    /// Applies `remedy` to every later attempt, and lists what it changed in
    /// `applied_workarounds`.
    fn apply_remedy(&mut self, remedy: provider::Remedy) {
        if !self.remedies.contains(&remedy) {
            self.remedies.push(remedy);
        }
        if let Some(workaround) = remedy.workaround()
            && !self.workarounds.contains(&workaround)
        {
            self.workarounds.push(workaround);
        }
    }

    fn record_attempt(
        &mut self,
        session: SessionChoice,
        attempt: &AttemptRecord,
        outcome: AttemptOutcome,
        retry: Option<String>,
    ) {
        let observation = &attempt.observation;
        let usage: crate::pipeline::envelope::TokenUsage = observation.usage().into();
        self.usage.input += usage.input;
        self.usage.output += usage.output;
        self.usage.cache_read += usage.cache_read;
        self.usage.cache_write += usage.cache_write;
        for (tool, count) in &observation.tool_calls {
            *self.tool_calls.entry(tool.clone()).or_default() += count;
        }
        for (tool, time) in &observation.tool_time {
            *self.tool_time.entry(tool.clone()).or_default() += *time;
        }
        if observation.questions_unavailable {
            let warning = "questions were on, but the CLI reported coder's MCP server (coder \
                           ask-server) as not connected: the model could not call ask_user"
                .to_owned();
            if !self.warnings.contains(&warning) {
                self.warnings.push(warning);
            }
        }
        for path in &observation.failed_edits {
            if !self.failed_edits.contains(path) {
                self.failed_edits.push(path.clone());
            }
        }
        for denial in &observation.denials {
            if !self.denials.contains(denial) {
                self.denials.push(denial.clone());
            }
        }
        let effects = &attempt.effects;
        self.attempts.push(AttemptSummary {
            attempt: self.attempts.len() as u32 + 1,
            session_id: session.id().to_string(),
            outcome,
            duration_ms: attempt.end.duration.as_millis() as u64,
            side_effects: effects.class(),
            tools: effects
                .mutating_tools
                .iter()
                .chain(&effects.read_tools)
                .cloned()
                .collect(),
            exit_code: attempt.end.exit_code,
            retry,
        });
    }

    fn metrics(&self, observation: &Observation, end: Option<&AttemptEnd>) -> Metrics {
        let result = observation.result.as_ref();
        Metrics {
            wall_ms: self.started.elapsed().as_millis() as u64,
            time_to_first_event_ms: observation.first_event_after.map(|d| d.as_millis() as u64),
            time_to_first_token_ms: observation.first_token_after.map(|d| d.as_millis() as u64),
            turns: observation.turns(),
            usage: self.usage,
            tool_calls: self.tool_calls.clone(),
            tool_time_ms: self
                .tool_time
                .iter()
                .map(|(tool, time)| (tool.clone(), time.as_millis() as u64))
                .collect(),
            sandbox_denials: self.denials.clone(),
            stdout_bytes: observation.stdout_bytes,
            stderr_bytes: observation.stderr_bytes,
            stdout_lines: observation.stdout_lines,
            stderr_lines: observation.stderr_lines,
            events: observation.events,
            json_decode_errors: observation.json_decode_errors,
            truncated_lines: observation.truncated_lines,
            api_retries: observation.api_retries,
            exit_code: end.and_then(|e| e.exit_code),
            signal: end.and_then(|e| e.exit_signal).map(signal_name),
            attempts: self.attempts.len().max(1) as u32,
            api_ms: result.and_then(|r| r.duration_api_ms),
            cost_usd: result
                .and_then(|r| r.total_cost_usd)
                .filter(|_| self.provider.reports_real_cost()),
            backend: Some(self.backend.clone()),
            model: observation.model.clone(),
            cli_version: observation.cli_version.clone(),
            queue_ms: None,
            outcome_ms: None,
        }
    }

    fn finish(
        &self,
        mut envelope: Envelope,
        observation: Option<&mut Observation>,
        end: Option<&AttemptEnd>,
    ) -> Envelope {
        let empty = Observation::new(self.started, false, Vec::new());
        let metrics = match &observation {
            Some(obs) => self.metrics(obs, end),
            None => self.metrics(&empty, end),
        };
        if self.return_all_messages {
            envelope.all_messages = Some(
                observation
                    .map(|o| o.take_all_messages())
                    .unwrap_or_default(),
            );
        }
        envelope.metrics = Some(metrics);
        envelope.warnings = self.warnings.clone();
        envelope.applied_workarounds = self.workarounds.clone();
        if !envelope.success || self.attempts.len() > 1 {
            envelope.attempts = self.attempts.clone();
        }
        envelope
    }

    fn detail(&self, message: String) -> ErrorDetail {
        ErrorDetail {
            message,
            idle_timeout_s: self.message_limits.idle_timeout_s,
            max_duration_s: self.message_limits.max_duration_s,
            retries: self.retries,
            ..ErrorDetail::default()
        }
    }

    /// A failure before any attempt ran.
    fn early_envelope(
        &self,
        kind: ErrorKind,
        summary: String,
        message: String,
        hint: Option<String>,
    ) -> Envelope {
        // No CLI ran, so no session was confirmed (a resumed id is the caller's own).
        let mut detail = self.detail(message);
        detail.hint = hint;
        self.finish(Envelope::failure(kind, None, summary, detail), None, None)
    }

    /// The session the envelope may report: only one the CLI confirmed in its stream,
    /// and only if it is the one coder asked for. The child's word alone is not enough: a
    /// different id would make the caller resume a session coder never recorded for this
    /// workspace. The second value explains an id that was left out.
    fn confirmed_session(
        &self,
        session: SessionChoice,
        observation: &Observation,
    ) -> (Option<String>, Option<String>) {
        let asked = session.id().to_string();
        match observation.session_id.as_deref() {
            Some(seen) if seen == asked => (Some(asked), None),
            Some(seen) => (
                None,
                Some(format!(
                    "the CLI reported session {seen}, not the session {asked} coder asked for; \
                     SESSION_ID is left out"
                )),
            ),
            None => (None, None),
        }
    }

    fn success_envelope(
        &self,
        session: SessionChoice,
        result: String,
        attempt: AttemptRecord,
    ) -> Envelope {
        let AttemptRecord {
            end,
            mut observation,
            ..
        } = attempt;
        let (session_id, mismatch) = self.confirmed_session(session, &observation);
        let unconfirmed = session_id.is_none() && mismatch.is_none();
        let degraded = provider::degraded(&result);
        let mut envelope = self.finish(
            Envelope::success(session_id, result),
            Some(&mut observation),
            Some(&end),
        );
        envelope.warnings.extend(mismatch);
        envelope.warnings.extend(degraded);
        if unconfirmed {
            envelope.warnings.push(
                "the CLI never confirmed its session in the stream: SESSION_ID is null and this \
                 run cannot be resumed"
                    .to_owned(),
            );
        }
        envelope
    }

    fn failure_envelope(
        &self,
        session: SessionChoice,
        stop: Stop,
        attempt: AttemptRecord,
    ) -> Envelope {
        let Stop {
            failure,
            upstream,
            provider_error,
            refusal,
        } = stop;
        let AttemptRecord {
            end,
            mut observation,
            effects,
            ..
        } = attempt;
        let end = &end;
        let exit_code = failure.exit_code();
        let (session_id, mismatch) = self.confirmed_session(session, &observation);
        let mut detail = self.detail(failure.message);
        detail.exit_code = end.exit_code;
        detail.last_lines = observation.last_lines();
        detail.json_decode_errors = observation.json_decode_errors;
        detail.signal = end.exit_signal.map(signal_name);
        detail.http_status = failure.http_status;
        detail.upstream_error = failure.upstream_error;
        detail.retryable = upstream.map(|u| u.retryable);
        detail.session_poisoned = upstream.map(|u| u.session_poisoned);
        detail.provider_error = provider_error;
        detail.pending_tool = observation.pending_tool().map(str::to_owned);
        detail.hint = failure.hint;
        detail.retry_refused = refusal;
        let resumable = observation.session_id.is_some()
            && !upstream.is_some_and(|u| u.session_poisoned)
            && failure.kind != ErrorKind::Cancelled;
        if resumable
            && !effects.mutating_tools.is_empty()
            && let Some(id) = &session_id
        {
            let tools = effects
                .mutating_tools
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            detail.resume_hint = Some(self.continue_hint(&tools, id));
        }
        if failure.kind == ErrorKind::NeedsInput
            && let Some(id) = &session_id
        {
            let asked = observation.questions.as_ref().map_or(0, Vec::len);
            detail.resume_hint = Some(self.answer_hint(id, asked));
            detail.hint = Some(ANSWER_AS_HINTED.to_owned());
        }
        let asked = (failure.kind == ErrorKind::NeedsInput)
            .then(|| observation.questions.take())
            .flatten();
        let mut envelope = Envelope::failure(failure.kind, session_id, failure.summary, detail);
        envelope.questions = asked;
        envelope.exit_code = exit_code;
        let mut envelope = self.finish(envelope, Some(&mut observation), Some(end));
        envelope.warnings.extend(mismatch);
        envelope
    }

    fn cancelled_during_backoff(
        &self,
        session: SessionChoice,
        signo: i32,
        attempt: AttemptRecord,
    ) -> Envelope {
        let AttemptRecord {
            end,
            mut observation,
            ..
        } = attempt;
        let end = &end;
        let name = signal_name(signo);
        let mut detail = self.detail(format!(
            "coder received {name} while waiting to retry; no attempt was running"
        ));
        detail.last_lines = observation.last_lines();
        detail.json_decode_errors = observation.json_decode_errors;
        let mut envelope = Envelope::failure(
            ErrorKind::Cancelled,
            self.confirmed_session(session, &observation).0,
            format!("cancelled by {name}"),
            detail,
        );
        envelope.exit_code = cancelled_exit_code(signo);
        self.finish(envelope, Some(&mut observation), Some(end))
    }
}

// ---- Verified outcomes (DESIGN §8): the change ledger, --verify and repair turns, the
// weak-model fallback and --scope, applied around the attempts above. ----

/// The snapshot's times into the run's `outcome_ms` (once it is finished or given up).
fn note_snapshot_times(run: &mut Run, snapshot: &Snapshot) {
    let (before, wait) = snapshot.times_ms();
    run.outcome_times.ledger_before_ms = before;
    run.outcome_times.ledger_wait_ms = Some(wait);
}

/// After the attempts: the finished ledger (awaited unless a signal comes first), its
/// warnings in `envelope`.
async fn finished_ledger(
    mut envelope: Envelope,
    snapshot: &mut Snapshot,
    run: &mut Run,
    signals: &mut CancelSignals,
) -> (Option<Ledger>, Envelope) {
    let _ = snapshot.finish_or_cancel(signals).await;
    note_snapshot_times(run, snapshot);
    let (ledger, warnings) = snapshot.take();
    envelope.warnings.extend(warnings);
    (ledger, envelope)
}

/// `envelope` with [`attach_changes`] of the run's snapshot, on the ways out before the
/// attempts: the snapshot is awaited first, unless a signal comes.
async fn with_snapshot(
    mut envelope: Envelope,
    snapshot: &mut Snapshot,
    run: &mut Run,
    request: &RunRequest,
    exclude: &[String],
    journal: &mut RunJournal,
    signals: &mut CancelSignals,
) -> Envelope {
    let _ = snapshot.finish_or_cancel(signals).await;
    note_snapshot_times(run, snapshot);
    envelope.warnings.extend(snapshot.take_warnings());
    attach_changes(&mut envelope, snapshot.ledger(), request, exclude, journal).await;
    // These envelopes get no other outcome times: the snapshot's are still worth showing.
    if let Some(times) = envelope
        .metrics
        .as_mut()
        .and_then(|m| m.outcome_ms.as_mut())
    {
        times.ledger_before_ms = run.outcome_times.ledger_before_ms;
        times.ledger_wait_ms = run.outcome_times.ledger_wait_ms;
    }
    envelope
}

/// `metrics.outcome_ms`: the times the run kept, the ledger's comparison measured when the
/// changes were attached, and each check's own duration from `verification`.
fn with_outcome_times(
    mut envelope: Envelope,
    mut times: crate::pipeline::envelope::OutcomeTimes,
) -> Envelope {
    let check_ms = |c: &Option<Check>| c.as_ref().map(|c| c.duration_ms);
    if let Some(v) = &envelope.verification {
        times.verify_baseline_ms = check_ms(&v.baseline);
        times.verify_after_agent_ms = check_ms(&v.after_agent);
        times.verify_final_ms = check_ms(&v.final_check);
    }
    if let Some(metrics) = envelope.metrics.as_mut() {
        times.ledger_after_ms = metrics.outcome_ms.as_ref().and_then(|t| t.ledger_after_ms);
        metrics.outcome_ms = Some(times);
    }
    envelope
}

/// The workspace's changes since `ledger` (with the diff when asked), or a warning.
async fn measure(
    ledger: Option<&Ledger>,
    diff: bool,
    exclude: &[String],
) -> Result<
    (
        crate::workspace::Changes,
        Option<crate::workspace::DiffText>,
    ),
    String,
> {
    let Some(ledger) = ledger else {
        return Err("cannot measure the workspace's changes: the snapshot failed".to_owned());
    };
    // The ledger is borrowed: a blocking section on this thread (the runtime has others).
    tokio::task::block_in_place(|| ledger.changes(diff, exclude)).map_err(|e| e.to_string())
}

/// The workspace's content changes since `ledger` ([`Ledger::content_changes`]: no walk
/// of the ignored paths), `None` when they cannot be measured.
fn content_changes(
    ledger: Option<&Ledger>,
    exclude: &[String],
) -> Option<crate::workspace::Changes> {
    let ledger = ledger?;
    tokio::task::block_in_place(|| ledger.content_changes(exclude)).ok()
}

/// Puts the run's `changes` (and `diff`) into `envelope`, and notes them.
async fn attach_changes(
    envelope: &mut Envelope,
    ledger: Option<&Ledger>,
    request: &RunRequest,
    exclude: &[String],
    journal: &mut RunJournal,
) {
    let started = Instant::now();
    let measured = measure(ledger, request.checks.return_diff, exclude).await;
    if let Some(metrics) = envelope.metrics.as_mut() {
        metrics.outcome_ms.get_or_insert_default().ledger_after_ms =
            Some(started.elapsed().as_millis() as u64);
    }
    match measured {
        Ok((mut changes, diff)) => {
            envelope.warnings.append(&mut changes.warnings);
            journal.note(Note::Changes(json!({
                "method": ledger.map(Ledger::method),
                "changes": changes,
            })));
            envelope.changes = Some(changes);
            envelope.diff = diff;
        }
        Err(warning) => envelope.warnings.push(warning),
    }
}

/// What changed under ignored paths (`changes.ignored`, DESIGN §8), said where it
/// matters: with `--scope`, a warning naming those outside it (not a violation: ignored
/// paths are the project's build outputs, which a scoped build writes; see SECURITY.md);
/// with a verdict `passed` or `fixed`, `verification.ignored_changes` and a warning naming
/// them (the check may have run what the agent wrote there).
fn note_ignored_changes(envelope: &mut Envelope, scope: Option<&crate::workspace::scope::Scope>) {
    let Some(ignored) = envelope.changes.as_ref().and_then(|c| c.ignored.clone()) else {
        return;
    };
    if let Some(scope) = scope {
        let outside = scope.outside(ignored.paths.iter().map(|c| c.path.trim_end_matches('/')));
        let unlisted = ignored.count.saturating_sub(ignored.paths.len() as u64);
        if !outside.is_empty() || unlisted > 0 {
            let mut names = outside.iter().take(10).cloned().collect::<Vec<_>>();
            if unlisted > 0 || outside.len() > names.len() {
                names.push(format!(
                    "and up to {} more",
                    unlisted + (outside.len() - names.len()) as u64
                ));
            }
            envelope.warnings.push(format!(
                "the run changed {} path(s) under ignored paths (`changes.ignored`) outside \
                 --scope, not checked as a scope violation: {}",
                outside.len() as u64 + unlisted,
                names.join(", ")
            ));
        }
    }
    if let Some(verification) = envelope.verification.as_mut()
        && matches!(
            verification.verdict,
            VerdictKind::Passed | VerdictKind::Fixed
        )
    {
        verification.ignored_changes = Some(ignored.count);
        let verdict = match verification.verdict {
            VerdictKind::Fixed => "fixed",
            _ => "passed",
        };
        envelope.warnings.push(format!(
            "the --verify verdict `{verdict}` comes after the run changed {} path(s) under \
             ignored paths, which the check may have run (not in `changes.files`): {}",
            ignored.count,
            ignored.named(10)
        ));
    }
}

/// A run cancelled during a `--verify` check after the agent's turn keeps what that turn
/// ended with: its confirmed session (to resume it) and its answer, and the stream events
/// when asked for. They were lost before: the envelope said nothing of the work done.
fn keep_the_agents_turn(cancelled: &mut Envelope, agent: Envelope) {
    cancelled.session_id = agent.session_id;
    cancelled.result = agent.result;
    if cancelled.all_messages.is_some() {
        cancelled.all_messages = agent.all_messages;
    }
}

/// A `--verify` check that a signal to coder stopped: the signal, and which check it was
/// (the envelope's message says what was cancelled).
struct CheckCancelled {
    signo: i32,
    during: &'static str,
    /// The checks that ran, the cancelled one last (as `final`, with what it printed until
    /// then): the cancelled envelope still says what ran.
    verification: Option<Verification>,
}

impl PreparedRun {
    /// The end-of-run git guard (`sandbox::gitguard`): git dirs the run made lose their
    /// command-running config and hooks; when the guard cannot check everything, the run
    /// fails closed (`sandbox_error`).
    fn guard_git(&self, mut envelope: Envelope, run: &Run, journal: &mut RunJournal) -> Envelope {
        let Some(policy) = &self.policy else {
            return envelope;
        };
        let report = tokio::task::block_in_place(|| crate::sandbox::guard_git_after_run(policy));
        if report.is_empty() {
            return envelope;
        }
        journal.note(Note::GitGuard(json!(report)));
        envelope.warnings.extend(report.lines());
        let incomplete = report.incomplete.clone();
        envelope.sandbox = Some(report);
        match incomplete {
            Some(why) => run.fail(
                envelope,
                ErrorKind::SandboxError,
                format!("the end-of-run git guard could not check the workspace: {why}"),
                |_| {},
            ),
            None => envelope,
        }
    }

    /// The sandbox's placeholders for absent protected names, relative to the workspace:
    /// coder made them, not the agent, and they go when the run ends.
    fn placeholders(&self, request: &RunRequest) -> Vec<String> {
        self.policy
            .iter()
            .flat_map(|p| &p.placeholders)
            .filter_map(|p| p.path.strip_prefix(&request.workspace).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    /// Runs the `--verify` command once under the run's sandbox and notes it; `Err` with
    /// the signal, and the check as far as it got, when coder was cancelled meanwhile.
    async fn check(
        &mut self,
        request: &RunRequest,
        phase: &str,
        run: &Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Result<Check, (i32, Option<Check>)> {
        let Some(config) = &request.checks.verify else {
            return Err((0, None));
        };
        let mut base = child::build(request, self.program.clone(), self.child_base_env.clone());
        if let Some(policy) = &self.policy {
            child::confine(&mut base, policy.clone());
            base.egress = self.egress.clone();
        }
        let spec = verify::check_spec(&config.command, &base);
        // The check's end stops every process coder started, an idle pre-started helper
        // too: give it up now (the next attempt starts its own).
        drop(self.helper.take());
        if let Some(progress) = journal.progress.as_mut() {
            progress.set_phase(format!("verify ({phase})"));
        }
        let end = verify::run_check(&spec, config.timeout, run.limits.kill_grace, signals).await;
        let (check, cancelled) = match end {
            CheckEnd::Done(check) => (check, None),
            CheckEnd::Cancelled(check, signo) => (check, Some(signo)),
        };
        journal.note(Note::Verify(json!({
            "phase": phase,
            "command": config.command,
            "exit_code": check.exit_code,
            "passed": check.passed,
            "duration_ms": check.duration_ms,
            "timed_out": check.timed_out,
            "signal": check.signal,
            "output_bytes": check.output_bytes,
            "error": check.error,
            "tail": check.tail_text,
        })));
        match cancelled {
            Some(signo) => Err((signo, Some(check))),
            None => Ok(check),
        }
    }

    /// The `--verify` check after the agent and, while it fails and the session can be
    /// resumed, up to `repair_turns` repair turns each followed by the check again; `envelope`
    /// becomes the last turn's. None without `--verify`.
    async fn checks_and_repairs(
        &mut self,
        envelope: &mut Envelope,
        request: &RunRequest,
        baseline: Option<Check>,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Result<Option<Verification>, CheckCancelled> {
        let Some(config) = &request.checks.verify else {
            return Ok(None);
        };
        let mut after_agent = None;
        let mut final_check = None;
        let mut repairs = 0;
        // A cancelled check ends the run: what ran is reported, the cancelled check last.
        let cancelled = |(signo, partial): (i32, Option<Check>),
                         during: &'static str,
                         baseline: &Option<Check>,
                         after_agent: Option<Check>,
                         repairs: u32| CheckCancelled {
            signo,
            during,
            verification: Some(Verification {
                command: config.command.clone(),
                baseline: baseline.clone(),
                after_agent,
                final_check: partial,
                verdict: VerdictKind::NotRun,
                repair_turns: repairs,
                ignored_changes: None,
                repair_skipped: None,
            }),
        };
        if envelope.success {
            final_check = Some(
                self.check(request, "after_agent", run, signals, journal)
                    .await
                    .map_err(|e| {
                        cancelled(e, "the check after the agent", &baseline, None, repairs)
                    })?,
            );
        }
        // A check that could not be started is no failure the model can repair.
        let not_started = |check: &Option<Check>| check.as_ref().is_some_and(|c| c.not_started);
        while let Some(check) = final_check.as_ref().filter(|c| !c.passed && !c.not_started)
            && repairs < config.repair_turns
            && envelope.success
            && let Some(session) = resumable(envelope)
        {
            repairs += 1;
            let prompt = repair_prompt(&config.command, check);
            journal.note(Note::Repair(
                json!({"turn": repairs, "exit_code": check.exit_code}),
            ));
            let repair = RunRequest {
                prompt: prompt.into(),
                session,
                ..request.clone()
            };
            let turn_started = Instant::now();
            *envelope = self.attempt_loop(repair, run, signals, journal).await;
            run.outcome_times
                .repair_turns_ms
                .push(turn_started.elapsed().as_millis() as u64);
            if after_agent.is_none() {
                after_agent = final_check.take();
            }
            // A repair turn a signal stopped ends the run: no check follows (it went on to
            // run the whole check, minutes of a test suite, after the user's Ctrl-C).
            if envelope.error_kind == Some(ErrorKind::Cancelled) {
                final_check = None;
                break;
            }
            final_check = Some(
                self.check(request, "after_repair", run, signals, journal)
                    .await
                    .map_err(|e| {
                        cancelled(
                            e,
                            "the check after a repair turn",
                            &baseline,
                            after_agent.clone(),
                            repairs,
                        )
                    })?,
            );
        }
        let repair_skipped = (not_started(&final_check) && repairs < config.repair_turns)
            .then(|| crate::workspace::verify::NOT_STARTED_NO_REPAIR.to_owned());
        Ok(Some(Verification {
            command: config.command.clone(),
            verdict: VerdictKind::of(baseline.as_ref(), final_check.as_ref()),
            baseline,
            after_agent,
            final_check,
            repair_turns: repairs,
            ignored_changes: None,
            repair_skipped,
        }))
    }

    /// After the agent: the fallback turn, the checks and repair turns, the ledger and
    /// the scope, each folded into `envelope`.
    #[allow(clippy::too_many_arguments)]
    async fn verified(
        &mut self,
        mut envelope: Envelope,
        request: &RunRequest,
        ledger: Option<Ledger>,
        baseline: Option<Check>,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Envelope {
        let ledger = ledger.as_ref();
        let exclude = self.placeholders(request);
        let fallback = self
            .fallback(&mut envelope, request, ledger, run, signals, journal)
            .await;
        let verification = match self
            .checks_and_repairs(&mut envelope, request, baseline, run, signals, journal)
            .await
        {
            Ok(verification) => verification,
            Err(CheckCancelled {
                signo,
                during,
                verification,
            }) => {
                let mut cancelled = run.cancelled_outside_attempt(signo, during);
                cancelled.verification = verification;
                keep_the_agents_turn(&mut cancelled, envelope);
                attach_changes(&mut cancelled, ledger, request, &exclude, journal).await;
                return cancelled;
            }
        };
        // The structured answer is judged last: a fallback or repair turn gives a new one.
        let check_failed = verification
            .as_ref()
            .and_then(|v| v.final_check.as_ref())
            .is_some_and(|c| !c.passed);
        envelope = self
            .structured(envelope, request, run, signals, journal, !check_failed)
            .await;
        attach_changes(&mut envelope, ledger, request, &exclude, journal).await;
        envelope.fallback = fallback;
        // A scope is checked against every change, or the run cannot be vouched for
        // (round sixteen's review: the agent made the ledger fail, with a sparse file of
        // more than the git ledger's read budget, or cut its walk, and what it changed
        // outside the scope went unchecked).
        let (out_of_scope, unchecked) = match (&request.checks.scope, &envelope.changes) {
            (Some(_), None) => (
                Vec::new(),
                Some("the workspace's changes could not be measured"),
            ),
            (Some(_), Some(changes)) if changes.unseen => (
                Vec::new(),
                Some("part of the workspace was not looked at (see the warnings)"),
            ),
            (Some(scope), Some(changes)) => (scope.outside(changes.paths()), None),
            _ => (Vec::new(), None),
        };
        let failed_check = verification
            .as_ref()
            .and_then(|v| v.final_check.as_ref())
            .filter(|c| !c.passed)
            .cloned();
        envelope.verification = verification;
        note_ignored_changes(&mut envelope, request.checks.scope.as_ref());
        if let Some(why) = unchecked {
            envelope = run.fail(
                envelope,
                ErrorKind::ScopeViolation,
                format!("cannot check the run against --scope: {why}"),
                |_| {},
            );
        } else if !out_of_scope.is_empty() {
            let summary = format!(
                "the run changed {} path(s) outside --scope: {}",
                out_of_scope.len(),
                crate::text::one_line(&out_of_scope.join(", "), 200)
            );
            let hint = scope_hint(request.request_from, request.worktree.is_some());
            envelope = run.fail(envelope, ErrorKind::ScopeViolation, summary, |detail| {
                detail.out_of_scope = Some(out_of_scope);
                detail.hint = Some(hint);
            });
        } else if let Some(check) = failed_check {
            let summary = match check.exit_code {
                Some(code) => format!("the --verify check failed with exit code {code}"),
                None if check.not_started => format!(
                    "the --verify check could not run: {}; no repair turn was spent on it",
                    check.error.clone().unwrap_or_default()
                ),
                None => format!(
                    "the --verify check failed: {}",
                    check.error.clone().unwrap_or_else(|| "killed".to_owned())
                ),
            };
            let hint = envelope
                .session_id
                .clone()
                // Only for a run whose own failure is the check's.
                .filter(|_| !check.not_started && envelope.success)
                .zip(request.checks.verify.as_ref())
                .map(|(id, verify)| run.verify_hint(&id, &verify.command));
            envelope = run.fail(envelope, ErrorKind::VerifyFailed, summary, |detail| {
                detail.exit_code = check.exit_code;
                let from = check.tail.len().saturating_sub(outcome_tail_len());
                detail.last_lines = check.tail[from..].to_vec();
                detail.signal = check.signal.clone();
                detail.resume_hint = detail.resume_hint.take().or(hint);
            });
        }
        envelope
    }

    /// Structured results (DESIGN §9): the final answer validated against `--json-schema`
    /// and returned as `structured`; an invalid one gets one repair turn, then the run fails
    /// with `schema_mismatch`. A run that failed for another reason keeps its failure, and
    /// one that fails its `--verify` check anyway (`!may_repair`) only gets a warning.
    async fn structured(
        &mut self,
        envelope: Envelope,
        request: &RunRequest,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
        may_repair: bool,
    ) -> Envelope {
        let Some(schema) = request.checks.json_schema.clone() else {
            return envelope;
        };
        let answered = |e: &Envelope| e.success || e.error_kind == Some(ErrorKind::SchemaMismatch);
        if !answered(&envelope) {
            return envelope;
        }
        let mut envelope = envelope;
        let mut errors = match judge(run.answer.as_ref(), &schema) {
            Judgement::Valid { value, .. } => {
                envelope.structured = Some(value);
                return envelope;
            }
            Judgement::Invalid { errors } => errors,
        };
        if !may_repair && envelope.success {
            // The run fails its --verify check anyway: that is its verdict; no turn is
            // spent on the answer's form.
            envelope.warnings.push(crate::text::one_line(
                &format!(
                    "the answer does not match --json-schema either ({})",
                    errors.join("; ")
                ),
                300,
            ));
            return envelope;
        }
        if may_repair && let Some(session) = resumable(&envelope) {
            journal.note(Note::Repair(json!({"turn": 1, "schema_errors": errors})));
            let repair = RunRequest {
                prompt: structured::repair_prompt(&schema, &errors).into(),
                session,
                ..request.clone()
            };
            run.answer = None;
            let turn_started = Instant::now();
            envelope = self.attempt_loop(repair, run, signals, journal).await;
            run.outcome_times.schema_repair_ms = Some(turn_started.elapsed().as_millis() as u64);
            let before = std::mem::take(&mut errors);
            let judged = answered(&envelope).then(|| judge(run.answer.as_ref(), &schema));
            envelope.schema_repair = Some(SchemaRepair {
                errors: before,
                fixed: matches!(judged, Some(Judgement::Valid { .. })),
            });
            match judged {
                Some(Judgement::Valid { value, .. }) => {
                    envelope.structured = Some(value);
                    return envelope;
                }
                Some(Judgement::Invalid { errors: after }) => errors = after,
                // The repair turn failed otherwise: that failure stands.
                None => return envelope,
            }
        }
        let summary = format!(
            "the answer does not match --json-schema ({} error{}): {}",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" },
            errors.first().map_or("", String::as_str)
        );
        let summary = crate::text::one_line(&summary, 300);
        if envelope.error_kind == Some(ErrorKind::SchemaMismatch) {
            // The CLI gave up on its own: coder's verdict is the envelope's summary, the
            // CLI's words stay in error_detail.message.
            envelope.error = Some(summary.clone());
        }
        run.fail(envelope, ErrorKind::SchemaMismatch, summary, |detail| {
            detail.schema_errors = Some(errors)
        })
    }

    /// The weak-model fallback (see `pipeline::fallback`): at most one extra turn.
    async fn fallback(
        &mut self,
        envelope: &mut Envelope,
        request: &RunRequest,
        ledger: Option<&Ledger>,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Option<Fallback> {
        if !envelope.success {
            return None;
        }
        let exclude = self.placeholders(request);
        let changes = content_changes(ledger, &exclude)?;
        let (trigger, files) = fallback::trigger(
            &request.workspace,
            &changes,
            &run.failed_edits,
            envelope.result.as_deref(),
            run.read_only,
        )?;
        let session = resumable(envelope)?;
        let used = envelope.metrics.as_ref().map_or(0, |m| m.turns);
        let turns_left = match request.max_turns {
            Some(max) if u64::from(max) <= used => {
                envelope.warnings.push(format!(
                    "the weak-model fallback ({}) was not tried: --max-turns {max} is used up",
                    serde_json::to_value(trigger).map_or_else(|_| String::new(), |v| v.to_string())
                ));
                return None;
            }
            Some(max) => Some(max - used as u32),
            None => None,
        };
        journal.note(Note::Fallback(json!({"trigger": trigger, "files": files})));
        let turn = RunRequest {
            prompt: fallback::prompt(trigger, &files).into(),
            session,
            max_turns: turns_left,
            ..request.clone()
        };
        let turn_started = Instant::now();
        *envelope = self.attempt_loop(turn, run, signals, journal).await;
        run.outcome_times.fallback_ms = Some(turn_started.elapsed().as_millis() as u64);
        let applied = content_changes(ledger, &exclude)
            .is_some_and(|c| c.files_changed > changes.files_changed);
        Some(Fallback {
            trigger,
            files,
            applied,
        })
    }
}

/// The verdict on what the last attempt answered (no answer at all is invalid too).
fn judge(answer: Option<&Answer>, schema: &structured::JsonSchema) -> Judgement {
    match answer {
        Some(answer) => answer.judge(schema),
        None => Judgement::Invalid {
            errors: vec!["(root): the run ended without an answer".to_owned()],
        },
    }
}

/// The session a follow-up turn resumes: the one the envelope confirmed.
fn resumable(envelope: &Envelope) -> Option<SessionChoice> {
    envelope
        .session_id
        .as_deref()
        .and_then(|id| Uuid::parse_str(id).ok())
        .map(SessionChoice::Resume)
}

/// `error_detail.last_lines` holds at most this many lines of a failing check.
fn outcome_tail_len() -> usize {
    crate::pipeline::observation::LAST_LINES
}

/// Bytes of a failing check's output the repair prompt quotes at most (its end).
const REPAIR_TAIL_BYTES: usize = 8 * 1024;

/// The repair turn's prompt: the command, its exit code and the end of its output.
fn repair_prompt(command: &str, check: &Check) -> String {
    let tail = &check.tail_text;
    let mut from = tail.len().saturating_sub(REPAIR_TAIL_BYTES);
    while !tail.is_char_boundary(from) {
        from += 1;
    }
    let status = match (check.exit_code, &check.error) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(error)) => error.clone(),
        (None, None) => "no exit code (killed)".to_owned(),
    };
    format!(
        "The check `{command}` fails after your changes ({status}). The end of its output:\n\
         ```\n{}\n```\nFix the cause so that the check passes; do not change or skip the \
         check itself. Answer in one line when done.",
        tail[from..].trim_end()
    )
}

impl Run {
    /// `envelope` turned into a failure of `kind` (a success's result and metrics kept);
    /// an envelope that already failed keeps its kind and only gets `edit`'s details.
    fn fail(
        &self,
        mut envelope: Envelope,
        kind: ErrorKind,
        summary: String,
        edit: impl FnOnce(&mut ErrorDetail),
    ) -> Envelope {
        if !envelope.success {
            if let Some(detail) = envelope.error_detail.as_mut() {
                edit(detail);
            }
            return envelope;
        }
        let mut detail = self.detail(summary.clone());
        edit(&mut detail);
        envelope.success = false;
        envelope.error = Some(summary);
        envelope.error_kind = Some(kind);
        envelope.error_detail = Some(detail);
        envelope.exit_code = kind.exit_code();
        envelope.attempts = self.attempts.clone();
        envelope
    }

    /// coder was cancelled by `signo` while `what` ran (no attempt was running).
    fn cancelled_outside_attempt(&self, signo: i32, what: &str) -> Envelope {
        let name = signal_name(signo);
        let mut envelope = self.early_envelope(
            ErrorKind::Cancelled,
            format!("cancelled by {name}"),
            format!("coder received {name} while {what} ran; its process tree was stopped"),
            None,
        );
        envelope.exit_code = cancelled_exit_code(signo);
        envelope
    }
}

impl Run {
    /// coder was cancelled by `signo` while the run waited for a backend slot: nothing
    /// had started, so there was no process tree to stop.
    fn cancelled_while_queued(&self, signo: i32, queue_ms: u64) -> Envelope {
        let name = signal_name(signo);
        let mut envelope = self.early_envelope(
            ErrorKind::Cancelled,
            format!("cancelled by {name} while queued"),
            format!(
                "coder received {name} while the run waited for a backend slot (phase \
                 queued); it was cancelled before it started: the claude CLI never ran"
            ),
            None,
        );
        envelope.exit_code = cancelled_exit_code(signo);
        if let Some(metrics) = envelope.metrics.as_mut() {
            metrics.queue_ms = Some(queue_ms);
        }
        envelope
    }

    /// The envelope of a run admission refused (a cooling backend, no store, no slot in
    /// time, or a signal while queued).
    fn refused(&self, refusal: admission::Refusal) -> Envelope {
        match refusal {
            admission::Refusal::Cancelled(signo, queue_ms) => {
                self.cancelled_while_queued(signo, queue_ms)
            }
            admission::Refusal::Fail(refused) => {
                let refused = *refused;
                let mut envelope = self.early_envelope(
                    refused.kind,
                    refused.summary,
                    refused.message,
                    refused.hint,
                );
                if let Some(detail) = envelope.error_detail.as_mut() {
                    detail.provider_error = refused.provider_error;
                }
                if let Some(metrics) = envelope.metrics.as_mut() {
                    metrics.queue_ms = refused.queue_ms;
                }
                envelope
            }
        }
    }
}

/// The `hint` of a `needs_input` run whose `resume_hint` says how to answer: the generic
/// one named `--session-id SESSION_ID` (a flag to a caller of the MCP tool, a resume a
/// `--worktree` run cannot have) beside a resume hint that says it exactly.
const ANSWER_AS_HINTED: &str = "the model's questions are in `questions`: answer each one, in \
     order, as resume_hint says";

#[cfg(test)]
mod tests {
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
