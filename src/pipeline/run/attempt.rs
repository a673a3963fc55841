//! One prepared run and its attempts: what is set up once (the CLI's home, the sandbox's
//! run directory, the session lock, the replay server), each attempt through the
//! supervisor, what a failure leads to (a retry, a remedy, a stop), and the teardown of
//! what was prepared.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use serde_json::json;
use uuid::Uuid;

use crate::config;
use crate::exit::ErrorKind;
use crate::journal::{Journal, Note};
use crate::pipeline::child;
use crate::pipeline::cli_home::CliHome;
use crate::pipeline::envelope::{AttemptOutcome, Envelope};
use crate::pipeline::observation::Observation;
use crate::pipeline::outcome::{self, Failure, Verdict};
use crate::pipeline::provider;
use crate::pipeline::request::{RequestFrom, RunRequest, SessionChoice};
use crate::pipeline::retry::{self, Backoff, RetryDecision, SideEffects};
use crate::pipeline::session::{self, SessionLock, SessionRecord, SessionStore};
use crate::pipeline::structured::Answer;
use crate::replay::{Cassette, ReplayServer, ServeOptions};
use crate::sandbox::proxy::{Egress, Hold};
use crate::sandbox::{Policy, RunDirCleanup};
use crate::supervise::{self, CancelSignals, StopCause};

use super::journal::RunJournal;
use super::state::{AttemptRecord, Run, Stop};

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
pub(super) struct Teardown(Option<std::thread::JoinHandle<()>>);

impl Teardown {
    /// Starts removing `prepared`'s directories; the rest of it is dropped here.
    pub(super) fn start(&mut self, prepared: PreparedRun) {
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

    pub(super) fn join(&mut self) {
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

impl PreparedRun {
    /// Runs attempts of `request` until one succeeds or a failure ends the run (retrying
    /// what DESIGN §6 allows); its envelope.
    pub(super) async fn attempt_loop(
        &mut self,
        request: RunRequest,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Envelope {
        let mut attempts = Attempts {
            session: request.session,
            request,
            backoff: Backoff::standard(),
            run,
            signals,
            journal,
        };
        loop {
            let (verdict, attempt) = self
                .attempt(
                    &attempts.request,
                    attempts.session,
                    attempts.run,
                    attempts.signals,
                    attempts.journal,
                )
                .await;
            let failure = match verdict {
                Verdict::Success { result } => {
                    let session = attempts.session;
                    let run = attempts.run;
                    run.record_attempt(session, &attempt, AttemptOutcome::Success, None);
                    return run.success_envelope(session, result, attempt);
                }
                Verdict::Failure(failure) => failure,
            };
            match after_failure(&attempts.request, attempts.run, &attempt, failure) {
                NextStep::Remedy {
                    kind,
                    remedy,
                    class,
                } => attempts.remedied(self, &attempt, kind, remedy, class),
                NextStep::Stop(stop) => return attempts.stopped(self, *stop, attempt),
                NextStep::Retry { kind, delay } => {
                    if let Err(envelope) = attempts.wait_to_retry(self, attempt, kind, delay).await
                    {
                        return *envelope;
                    }
                }
            }
        }
    }
}

/// The state one run's attempts carry from one to the next: the request (its prompt a
/// remedy's nudge once resumed), the session the next attempt uses, the backoff.
struct Attempts<'a> {
    request: RunRequest,
    session: SessionChoice,
    backoff: Backoff,
    run: &'a mut Run,
    signals: &'a mut CancelSignals,
    journal: &'a mut RunJournal,
}

impl Attempts<'_> {
    /// A provider remedy (DESIGN §12) changes a setting and the run goes on: in the same
    /// session where the attempt did work, else in a fresh one.
    fn remedied(
        &mut self,
        prepared: &mut PreparedRun,
        attempt: &AttemptRecord,
        kind: ErrorKind,
        remedy: provider::Remedy,
        class: provider::ProviderClass,
    ) {
        let action = provider::class_name(class);
        self.run.record_attempt(
            self.session,
            attempt,
            AttemptOutcome::Failed(kind),
            Some(format!("{action}: {}", remedy.describe())),
        );
        self.run.apply_remedy(remedy);
        if remedy == provider::Remedy::CompatShape {
            self.run.compat_learned = Some(action.clone());
        }
        self.journal.note(Note::Remedy(
            json!({"class": action, "remedy": remedy.describe()}),
        ));
        // Work done so far lives in the session: resume it. A session that holds only the
        // prompt gains nothing over a fresh one with the same prompt.
        let ran_tools =
            !attempt.effects.mutating_tools.is_empty() || !attempt.effects.read_tools.is_empty();
        if ran_tools && attempt.observation.session_id.is_some() {
            self.session = SessionChoice::Resume(self.session.id());
            self.request.prompt = remedy.nudge(class).into();
        } else {
            self.session = SessionChoice::New(Uuid::new_v4());
            prepared.lock_session(self.session);
        }
    }

    /// The run ends with `stop`: a session the vendor poisoned is marked not resumable.
    fn stopped(&mut self, prepared: &PreparedRun, stop: Stop, attempt: AttemptRecord) -> Envelope {
        let session = self.session;
        if let Some(error) = stop.provider_error.as_ref().filter(|e| e.session_poisoned)
            && let Err(e) = prepared
                .store
                .mark_poisoned(session.id(), &provider::class_name(error.class))
        {
            self.run
                .warnings
                .push(format!("cannot mark the session as not resumable: {e}"));
        }
        self.run.record_attempt(
            session,
            &attempt,
            AttemptOutcome::Failed(stop.failure.kind),
            stop.refusal.clone(),
        );
        self.run.failure_envelope(session, stop, attempt)
    }

    /// Wait out the provider's delay (or the standard backoff) before the next attempt;
    /// `Err`: the run's envelope, cancelled meanwhile.
    async fn wait_to_retry(
        &mut self,
        prepared: &mut PreparedRun,
        attempt: AttemptRecord,
        kind: ErrorKind,
        delay: Option<Duration>,
    ) -> Result<(), Box<Envelope>> {
        let standard = self.backoff.next().unwrap_or(Duration::from_secs(1));
        let delay = delay.unwrap_or(standard);
        self.run.record_attempt(
            self.session,
            &attempt,
            AttemptOutcome::Failed(kind),
            Some(format!("retried after {:.1} s", delay.as_secs_f64())),
        );
        self.journal.note(Note::Retry { delay });
        if let Some(progress) = self.journal.progress.as_mut() {
            progress.set_phase(format!("retrying in {:.1} s", delay.as_secs_f64()));
        }
        let cancelled = tokio::select! {
            biased;
            signo = self.signals.recv() => Some(signo),
            _ = tokio::time::sleep(delay) => None,
        };
        if let Some(signo) = cancelled {
            return Err(Box::new(self.run.cancelled_during_backoff(
                self.session,
                signo,
                attempt,
            )));
        }
        self.run.retries += 1;
        if let SessionChoice::New(_) = self.session {
            // The failed attempt may have created its session; a fresh attempt needs a
            // fresh id.
            self.session = SessionChoice::New(Uuid::new_v4());
            prepared.lock_session(self.session);
        }
        Ok(())
    }
}

/// Everything a run needs before its first attempt, built once: the backend (with its
/// replay server), the program, the session store and locks, the sandbox policy and the
/// helper started early for the first attempt.
pub(super) struct PreparedRun {
    pub(super) backend: config::ResolvedBackend,
    replay_server: Option<ReplayServer>,
    /// The CLI's config dir, fresh for this run (removed when the run ends).
    pub(super) cli_home: CliHome,
    pub(super) child_base_env: Vec<(OsString, OsString)>,
    pub(super) program: std::path::PathBuf,
    pub(super) store: SessionStore,
    pub(super) locks: Vec<SessionLock>,
    pub(super) helper: Option<supervise::spawn::StartedHelper>,
    pub(super) policy: Option<Policy>,
    pub(super) denial_policy: Option<Arc<Policy>>,
    /// The egress proxy a confined child reaches the network through (see
    /// `sandbox::proxy`), shared by every attempt.
    pub(super) egress: Option<Arc<Egress>>,
    /// Removes the policy's per-run directory when the run ends.
    _run_dir: RunDirCleanup,
}

impl PreparedRun {
    /// Builds the run's fixed parts, or the envelope of the failure that stops it before
    /// any attempt (config, missing CLI, session conflicts, sandbox).
    pub(super) async fn prepare(
        request: &RunRequest,
        backend: Result<config::ResolvedBackend, config::ConfigError>,
        process_env: &[(OsString, OsString)],
        state_dir: &std::path::Path,
        secrets: &crate::text::Secrets,
        run: &mut Run,
        hold: Option<Hold>,
    ) -> Result<PreparedRun, Box<Envelope>> {
        let (backend, replay_server) = backend_for_run(request, backend, run).await?;
        run.take_backend(&backend, request);
        let mut child_base_env = config::child_environment(process_env, &backend);
        let program = claude_program(request, run)?;
        let (store, lock) = session_store(request, state_dir, secrets, &backend, run)?;
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
        // A signal meanwhile stops its scan (`run.setup_cancel`, see `run_attempts`).
        let preview = child::build(request, program.clone(), child_base_env.clone());
        let policy = crate::sandbox::policy_for_agent(
            request.sandbox,
            &request.workspace,
            &program,
            &preview.env,
            &agent_sandbox_args(request, &backend),
            (
                request.plan.as_ref().and_then(|p| p.writable_file()),
                &request.key_places,
            ),
            &run.setup_cancel,
        );
        let policy = policy.map_err(|e| Box::new(sandbox_failure(run, &e)))?;
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
    pub(super) async fn attempt(
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
pub(super) fn sandbox_failure(run: &Run, e: &crate::sandbox::SandboxError) -> Envelope {
    if let crate::sandbox::SandboxError::Cancelled { signal } = *e {
        return run.cancelled_during_setup(signal, "the sandbox's setup");
    }
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

/// The envelope of a run stopped before any attempt, its message both short and long.
fn early(run: &Run, kind: ErrorKind, message: String) -> Box<Envelope> {
    Box::new(run.early_envelope(kind, message.clone(), message, None))
}

/// A run that cannot start for want of a backend or a CLI reports a mistake in the
/// caller's own sandbox arguments first (a `--write` path that does not exist, a
/// workspace holding coder's state): it is the cheaper one to fix, and the other error
/// would come back once the first is fixed. On the way to the CLI the policy checks them
/// all again.
fn arguments_first(request: &RunRequest, run: &Run, envelope: Box<Envelope>) -> Box<Envelope> {
    match crate::sandbox::check_agent_arguments(
        request.sandbox,
        &request.workspace,
        &request.sandbox_args,
    ) {
        Err(bad) => Box::new(sandbox_failure(run, &bad)),
        Ok(()) => envelope,
    }
}

/// The run's backend, with its replay server started when it is coder's replay backend,
/// and the CLI config dir it names made.
async fn backend_for_run(
    request: &RunRequest,
    backend: Result<config::ResolvedBackend, config::ConfigError>,
    run: &Run,
) -> Result<(config::ResolvedBackend, Option<ReplayServer>), Box<Envelope>> {
    let tool_arguments = request.request_from == RequestFrom::McpTool;
    let mut backend = backend.map_err(|e| {
        arguments_first(
            request,
            run,
            early(run, ErrorKind::ConfigError, e.message_for(tool_arguments)),
        )
    })?;
    let replay_server = start_replay_server(request, &mut backend)
        .await
        .map_err(|message| early(run, ErrorKind::ConfigError, message))?;
    backend
        .ensure_claude_config_dir()
        .map_err(|e| early(run, ErrorKind::ConfigError, e.to_string()))?;
    Ok((backend, replay_server))
}

/// The claude CLI to run (`--claude-bin`, `CODER_CLAUDE_BIN`, or `claude` on `PATH`).
fn claude_program(request: &RunRequest, run: &Run) -> Result<std::path::PathBuf, Box<Envelope>> {
    let path_var = std::env::var_os("PATH");
    child::resolve_program(request.claude_bin.as_deref(), path_var.as_deref()).map_err(|e| {
        arguments_first(
            request,
            run,
            Box::new(run.early_envelope(
                ErrorKind::CommandNotFound,
                format!("claude CLI not found: {e}"),
                format!("cannot run the claude CLI: {e}"),
                Some(child::INSTALL_HINT.to_owned()),
            )),
        )
    })
}

/// Session safety: one driver per session (its lock), and resumes only where the session
/// lives.
fn session_store(
    request: &RunRequest,
    state_dir: &std::path::Path,
    secrets: &crate::text::Secrets,
    backend: &config::ResolvedBackend,
    run: &Run,
) -> Result<(SessionStore, SessionLock), Box<Envelope>> {
    let store = SessionStore::new(state_dir).redacting(secrets.clone());
    let plan_file = plan_written(request);
    if let SessionChoice::Resume(id) = request.session {
        let tool_arguments = request.request_from == RequestFrom::McpTool;
        store
            .check_resume(id, &request.workspace, backend.name(), plan_file.is_some())
            .map_err(|e| early(run, ErrorKind::ConfigError, e.message_for(tool_arguments)))?;
    }
    let lock = store
        .lock(request.session.id())
        .map_err(|e| early(run, ErrorKind::ConfigError, e.to_string()))?;
    Ok((store, lock))
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
    let remedy_refusal = match remedy_first(run, provider_error.as_mut(), &mut failure, out_of_time)
    {
        Ok(refusal) => refusal,
        Err(remedy) => return remedy,
    };
    let upstream = provider_error.as_ref().map(|e| retry::UpstreamClass {
        retryable: e.retryable,
        session_poisoned: e.session_poisoned,
    });
    // A rejected key: which key, sent where (the outcome's own hint names neither).
    if provider_error
        .as_ref()
        .is_some_and(|e| e.class == provider::ProviderClass::AuthError)
        && run.auth_hint.is_some()
    {
        failure.hint = run.auth_hint.clone();
    }
    if failure.hint.is_none() {
        failure.hint = provider_error.as_ref().and_then(provider::hint);
    }
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

/// A provider remedy changes the request, so it is not a retry: it goes first, once.
/// `Err` with the step that takes it; `Ok` with why it is not taken again (also the
/// failure's hint) when it was, or `None` when the error has no remedy or the run is out
/// of time.
fn remedy_first(
    run: &Run,
    provider_error: Option<&mut provider::ProviderError>,
    failure: &mut Failure,
    out_of_time: bool,
) -> Result<Option<String>, NextStep> {
    let Some(error) = provider_error else {
        return Ok(None);
    };
    let Some(remedy) = provider::Remedy::for_class(error.class) else {
        return Ok(None);
    };
    if run.remedies.contains(&remedy) {
        provider::after_remedy_failed(error, remedy);
        let why = format!("coder already tried: {}", remedy.exhausted());
        failure.hint = Some(why.clone());
        return Ok(Some(why));
    }
    if out_of_time {
        return Ok(None);
    }
    Err(NextStep::Remedy {
        kind: failure.kind,
        remedy,
        class: error.class,
    })
}

/// The plan file a `coder plan` run writes (`None` for any other run).
fn plan_written(request: &RunRequest) -> Option<&Path> {
    match &request.plan {
        Some(crate::pipeline::request::PlanRole::Write { file }) => Some(file),
        _ => None,
    }
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
        plan_file: plan_written(request)
            .map(Path::to_path_buf)
            .or_else(|| existing.as_ref().and_then(|r| r.plan_file.clone())),
        created_at: existing.map_or(now, |r| r.created_at),
        updated_at: now,
        questions,
    };
    if let Err(e) = store.save(&record) {
        run.warnings
            .push(format!("cannot record the session for safe resumes: {e}"));
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
