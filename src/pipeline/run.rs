//! The run mode end to end: arguments -> request -> child spec -> supervised attempt ->
//! verdict -> envelope, with the guarantees that hold whatever happens in between: exactly
//! one envelope on stdout, an exit code that agrees with it, and panics turned into
//! `unexpected_exception` envelopes instead of a backtrace and silence.

use std::ffi::OsString;
use std::time::Instant;

use std::time::Duration;

use uuid::Uuid;

use crate::config;
use crate::exit::{ErrorKind, cancelled_exit_code};
use crate::journal::progress::{self, Progress};
use crate::journal::transcript::{self, Transcript};
use crate::pipeline::child;
use crate::pipeline::envelope::{AttemptSummary, Envelope, ErrorDetail, Metrics};
use crate::pipeline::observation::Observation;
use crate::pipeline::observation::Pipe;
use crate::pipeline::outcome::{self, Failure, LimitsForMessages, Verdict};
use crate::pipeline::request::{RunRequest, SessionChoice};
use crate::pipeline::retry::{self, Backoff, RetryDecision, SideEffects};
use crate::pipeline::session::{self, SessionRecord, SessionStore};
use crate::replay::{Cassette, ReplayServer, ServeOptions};
use crate::stream::{Decoded, Line};
use crate::supervise::{
    self, AttemptEnd, CancelSignals, Journal, Limits, StopCause, signals::signal_name,
};
use serde_json::json;

/// Runs a validated request and returns its envelope (metrics always filled in), writing
/// the run's transcript and, on a terminal, its progress.
pub async fn run(request: RunRequest) -> Envelope {
    let run_started = Instant::now();
    let run_id = new_run_id();
    let state_dir = session::state_dir();
    let runs_dir = transcript::runs_dir(&state_dir);
    let transcript_path = request
        .transcript
        .clone()
        .unwrap_or_else(|| runs_dir.join(format!("{run_id}.jsonl")));
    let process_env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let backend = config::resolve_backend(&request.backend, &process_env);
    let mut secrets = child::secret_values(&process_env);
    if let Ok(backend) = &backend {
        // A key written into the config file is a secret whatever its variable is called.
        secrets.extend(
            backend
                .secret_values()
                .into_iter()
                .filter_map(|s| s.to_str().map(str::to_owned)),
        );
    }
    let mut journal = RunJournal {
        transcript: Transcript::create(transcript_path.clone(), secrets),
        progress: progress::wanted(request.quiet).then(|| Progress::start(request.idle_timeout)),
    };
    journal.transcript.coder(
        "start",
        json!({
            "run_id": run_id,
            "coder_version": env!("CARGO_PKG_VERSION"),
            "workspace": request.workspace,
            "backend": backend.as_ref().map_or_else(|_| requested_backend(&request), |b| b.name().to_owned()),
            "sandbox": request.sandbox.as_str(),
            "session": match request.session {
                SessionChoice::New(id) => json!({"new": id}),
                SessionChoice::Resume(id) => json!({"resume": id}),
            },
            "prompt": request.prompt,
            "idle_timeout_s": request.idle_timeout.as_secs_f64(),
            "max_duration_s": request.max_duration.map_or(0.0, |d| d.as_secs_f64()),
            "max_retries": request.max_retries,
        }),
    );

    let mut envelope =
        run_attempts(&request, backend, &process_env, run_started, &mut journal).await;

    if let Some(progress) = &journal.progress {
        progress.clear();
    }
    journal.transcript.coder(
        "outcome",
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
        }),
    );
    match journal.transcript.finish() {
        Some(error) => envelope.warnings.push(error.to_owned()),
        None => {
            envelope.transcript = Some(transcript_path.display().to_string());
            if request.transcript.is_none() {
                let _ = transcript::enforce_retention(
                    &runs_dir,
                    transcript::Retention::default(),
                    &transcript_path,
                );
            }
        }
    }
    envelope
}

/// A sortable run id: UTC time plus a random suffix (`20261121T133652Z-1a2b3c4d`).
fn new_run_id() -> String {
    let stamp = transcript::timestamp(std::time::SystemTime::now());
    let compact: String = stamp
        .chars()
        .take(19)
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    let suffix = Uuid::new_v4().simple().to_string();
    format!("{compact}Z-{}", &suffix[..8])
}

/// The run's journal: the transcript, and the progress line when one is drawn.
struct RunJournal {
    transcript: Transcript,
    progress: Option<Progress>,
}

impl Journal for RunJournal {
    fn line(&mut self, pipe: Pipe, line: &Line, decoded: Option<&Decoded>) {
        self.transcript.child_line(pipe, line, decoded);
        if let Some(progress) = self.progress.as_mut() {
            progress.activity();
            if let Some(decoded) = decoded {
                progress.event(&decoded.event);
            }
        }
    }

    fn note(&mut self, kind: &str, data: serde_json::Value) {
        self.transcript.coder(kind, data);
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

async fn run_attempts(
    request: &RunRequest,
    backend: Result<config::ResolvedBackend, config::ConfigError>,
    process_env: &[(OsString, OsString)],
    run_started: Instant,
    journal: &mut RunJournal,
) -> Envelope {
    let request = request.clone();
    let mut signals = match CancelSignals::install() {
        Ok(signals) => signals,
        Err(e) => {
            return Envelope::early_failure(
                ErrorKind::UnexpectedException,
                format!("cannot install signal handlers: {e}"),
            );
        }
    };
    let mut run = Run::new(&request, run_started);
    if let Err(e) = supervise::tree::become_subreaper() {
        run.warnings.push(format!(
            "cannot become a child subreaper ({e}); detached descendants may escape cleanup"
        ));
    }

    // The backend: a config_error before anything else is looked up or spawned.
    let backend = match backend {
        Ok(backend) => backend,
        Err(e) => {
            return run.early_envelope(ErrorKind::ConfigError, e.to_string(), e.to_string(), None);
        }
    };
    // A replay backend gets its base URL from a local replay server, which lives as long
    // as the run.
    let mut backend = backend;
    let replay_cassette = backend
        .replay_cassette()
        .filter(|_| backend.base_url().is_none())
        .map(std::path::Path::to_path_buf);
    let replay_server = match replay_cassette {
        None => None,
        Some(path) => {
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
                    backend = backend.with_base_url(&server.base_url());
                    Some(server)
                }
                Err(e) => {
                    let message = format!("backend '{}': {e}", backend.name());
                    return run.early_envelope(
                        ErrorKind::ConfigError,
                        message.clone(),
                        message,
                        None,
                    );
                }
            }
        }
    };
    if let Err(e) = backend.ensure_claude_config_dir() {
        return run.early_envelope(ErrorKind::ConfigError, e.to_string(), e.to_string(), None);
    }
    run.warnings.extend(backend.warnings().iter().cloned());
    run.backend = backend.name().to_owned();
    let child_base_env = config::child_environment(process_env, &backend);

    let path_var = std::env::var_os("PATH");
    let program = match child::resolve_program(request.claude_bin.as_deref(), path_var.as_deref()) {
        Ok(program) => program,
        Err(e) => {
            return run.early_envelope(
                ErrorKind::CommandNotFound,
                format!("claude CLI not found: {e}"),
                format!("cannot run the claude CLI: {e}"),
                Some(child::INSTALL_HINT.to_owned()),
            );
        }
    };

    // Session safety: one driver per session, and resumes only where the session lives.
    let store = SessionStore::new(&session::state_dir());
    let backend_name = backend.name().to_owned();
    if let SessionChoice::Resume(id) = request.session
        && let Err(e) = store.check_resume(id, &request.workspace, &backend_name)
    {
        return run.early_envelope(ErrorKind::ConfigError, e.to_string(), e.to_string(), None);
    }
    let mut session = request.session;
    let mut locks = Vec::new();
    match store.lock(session.id()) {
        Ok(lock) => locks.push(lock),
        Err(e) => {
            return run.early_envelope(ErrorKind::ConfigError, e.to_string(), e.to_string(), None);
        }
    }

    // A confined child starts through the helper. Started now, its own start overlaps with
    // resolving the policy; it serves the first attempt (dropped unused, it just exits).
    let mut helper = request
        .sandbox
        .is_confined()
        .then(|| supervise::spawn::StartedHelper::start(&request.workspace).ok())
        .flatten();

    // The sandbox: resolved once per run here, applied by the helper to every attempt.
    let preview = child::build(&request, program.clone(), child_base_env.clone());
    let policy = match crate::sandbox::policy_for_agent(
        request.sandbox,
        &request.workspace,
        &program,
        &preview.env,
        &with_config_hosts(&request.sandbox_args, backend.allow_hosts()),
    ) {
        Ok(policy) => policy,
        Err(e) => {
            return run.early_envelope(
                ErrorKind::SandboxError,
                format!("sandbox: {e}"),
                format!("the sandbox cannot be set up: {e}"),
                Some(
                    "run `coder doctor`; --sandbox danger-full-access runs without confinement"
                        .to_owned(),
                ),
            );
        }
    };
    let _run_dir = crate::sandbox::RunDirCleanup::new(policy.as_ref());
    let denial_policy = policy.clone().map(std::sync::Arc::new);
    let egress = egress_for(policy.as_ref());

    let mut backoff = Backoff::standard();
    loop {
        let attempt_request = RunRequest {
            session,
            ..request.clone()
        };
        let mut spec = child::build(&attempt_request, program.clone(), child_base_env.clone());
        spec.args.extend(backend.cli_args());
        if let Some(policy) = &policy {
            child::confine(&mut spec, policy.clone());
            spec.egress = egress.clone();
        }
        let mut observation =
            Observation::new(Instant::now(), request.return_all_messages, spec.secrets())
                .with_sandbox(denial_policy.clone());
        journal.note(
            "attempt",
            json!({"attempt": run.attempts.len() + 1, "session_id": session.id()}),
        );
        if let Some(progress) = journal.progress.as_mut() {
            progress.set_phase("starting claude");
        }
        let end = supervise::run_attempt(
            &spec,
            helper.take(),
            &run.limits,
            &mut observation,
            &mut signals,
            journal,
        )
        .await;
        note_egress(egress.as_deref(), &mut observation, journal);
        let verdict = outcome::classify(&end, &observation, run.message_limits);
        if let Some(server) = &replay_server {
            // The cassette's own view: a request it could not answer as scripted.
            for problem in server.report().problems() {
                let warning = format!("replay: {problem}");
                if !run.warnings.contains(&warning) {
                    run.warnings.push(warning);
                }
            }
        }
        let started = !matches!(end.cause, StopCause::SpawnFailed(_));
        if started && observation.session_id.is_some() {
            remember_session(
                &store,
                session,
                &request,
                &backend_name,
                &observation,
                &mut run,
            );
        }
        let effects = SideEffects::from_tool_calls(
            started,
            observation.tool_calls.keys().map(String::as_str),
        );
        let failure = match verdict {
            Verdict::Success { result } => {
                run.record_attempt(session, &end, &observation, &effects, "success", None);
                return run.success_envelope(session, result, &end, observation);
            }
            Verdict::Failure(failure) => failure,
        };
        let upstream = (failure.kind == ErrorKind::UpstreamError).then(|| {
            retry::classify_upstream(
                failure.http_status,
                failure.upstream_error.as_deref(),
                &failure.message,
            )
        });
        let retries_left = request.max_retries.saturating_sub(run.retries);
        let decision = retry::decide(&failure, upstream, &effects, request.sandbox, retries_left);
        let out_of_time = run
            .limits
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline);
        match decision {
            RetryDecision::Retry if !out_of_time => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(1));
                run.record_attempt(
                    session,
                    &end,
                    &observation,
                    &effects,
                    failure.kind.as_str(),
                    Some(format!("retried after {:.1} s", delay.as_secs_f64())),
                );
                journal.note("retry", json!({"delay_ms": delay.as_millis() as u64}));
                if let Some(progress) = journal.progress.as_mut() {
                    progress.set_phase(format!("retrying in {:.1} s", delay.as_secs_f64()));
                }
                let cancelled = tokio::select! {
                    biased;
                    signo = signals.recv() => Some(signo),
                    _ = tokio::time::sleep(delay) => None,
                };
                if let Some(signo) = cancelled {
                    return run.cancelled_during_backoff(session, signo, &end, observation);
                }
                run.retries += 1;
                if let SessionChoice::New(_) = session {
                    // The failed attempt may have created its session; a fresh attempt needs
                    // a fresh id.
                    session = SessionChoice::New(Uuid::new_v4());
                    if let Ok(lock) = store.lock(session.id()) {
                        locks.push(lock);
                    }
                }
            }
            decision => {
                let refusal = match decision {
                    RetryDecision::Refuse(why) if request.max_retries > 0 => Some(why),
                    RetryDecision::Retry => Some("the run is out of time (--max-duration)".into()),
                    RetryDecision::Refuse(why) if !effects.mutating_tools.is_empty() => Some(why),
                    RetryDecision::Refuse(_) => None,
                };
                run.record_attempt(
                    session,
                    &end,
                    &observation,
                    &effects,
                    failure.kind.as_str(),
                    refusal.clone(),
                );
                return run.failure_envelope(
                    session,
                    failure,
                    upstream,
                    refusal,
                    &effects,
                    &end,
                    observation,
                );
            }
        }
    }
}

/// The sandbox options with the config file's `allow_hosts` added to `--allow-host`.
fn with_config_hosts(
    args: &crate::sandbox::AgentSandboxArgs,
    config_hosts: &[String],
) -> crate::sandbox::AgentSandboxArgs {
    let mut args = args.clone();
    args.allow_hosts.extend(config_hosts.iter().cloned());
    args
}

/// The run's egress proxy, for a confined child (see `sandbox::proxy`).
fn egress_for(
    policy: Option<&crate::sandbox::Policy>,
) -> Option<std::sync::Arc<crate::sandbox::proxy::Egress>> {
    policy.map(|p| std::sync::Arc::new(crate::sandbox::proxy::Egress::new(p.network.allow.clone())))
}

/// After an attempt: what the proxy refused becomes sandbox denials, and its counts go to
/// the transcript (`egress` note), which shows that the backend was reached through it.
fn note_egress(
    egress: Option<&crate::sandbox::proxy::Egress>,
    observation: &mut Observation,
    journal: &mut RunJournal,
) {
    let Some(log) = egress.map(crate::sandbox::proxy::Egress::take_log) else {
        return;
    };
    journal.note(
        "egress",
        json!({"allowed": log.allowed, "denied": log.denied, "denials": log.denials}),
    );
    for denial in log.denials {
        if !observation.denials.contains(&denial) {
            observation.denials.push(denial);
        }
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
    let record = SessionRecord {
        session_id: session.id(),
        workspace: request.workspace.clone(),
        backend: backend.to_owned(),
        cli_version: observation.cli_version.clone(),
        created_at: existing.map_or(now, |r| r.created_at),
        updated_at: now,
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
    requested_session: SessionChoice,
    retries: u32,
    attempts: Vec<AttemptSummary>,
    warnings: Vec<String>,
    usage: crate::pipeline::envelope::TokenUsage,
    tool_calls: std::collections::BTreeMap<String, u64>,
    tool_time: std::collections::BTreeMap<String, Duration>,
    denials: Vec<crate::sandbox::Denial>,
    backend: String,
}

impl Run {
    fn new(request: &RunRequest, started: Instant) -> Self {
        Run {
            started,
            limits: Limits {
                idle: request.idle_timeout,
                deadline: request.max_duration.map(|d| started + d),
                kill_grace: request.kill_grace,
                max_line_bytes: request.max_line_bytes,
            },
            message_limits: LimitsForMessages {
                idle_timeout_s: request.idle_timeout.as_secs_f64(),
                max_duration_s: request.max_duration.map_or(0.0, |d| d.as_secs_f64()),
            },
            return_all_messages: request.return_all_messages,
            workspace: request.workspace.clone(),
            requested_session: request.session,
            retries: 0,
            attempts: Vec::new(),
            warnings: Vec::new(),
            usage: Default::default(),
            tool_calls: Default::default(),
            tool_time: Default::default(),
            denials: Vec::new(),
            backend: requested_backend(request),
        }
    }

    fn record_attempt(
        &mut self,
        session: SessionChoice,
        end: &AttemptEnd,
        observation: &Observation,
        effects: &SideEffects,
        outcome: &'static str,
        retry: Option<String>,
    ) {
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
        for denial in &observation.denials {
            if !self.denials.contains(denial) {
                self.denials.push(denial.clone());
            }
        }
        self.attempts.push(AttemptSummary {
            attempt: self.attempts.len() as u32 + 1,
            session_id: session.id().to_string(),
            outcome,
            duration_ms: end.duration.as_millis() as u64,
            side_effects: effects.class(),
            tools: effects
                .mutating_tools
                .iter()
                .chain(&effects.read_tools)
                .cloned()
                .collect(),
            exit_code: end.exit_code,
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
            cost_usd: result.and_then(|r| r.total_cost_usd),
            backend: Some(self.backend.clone()),
            model: observation.model.clone(),
            cli_version: observation.cli_version.clone(),
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
        let session = match self.requested_session {
            SessionChoice::Resume(id) => Some(id.to_string()),
            SessionChoice::New(_) => None,
        };
        let mut detail = self.detail(message);
        detail.hint = hint;
        self.finish(
            Envelope::failure(kind, session, summary, detail),
            None,
            None,
        )
    }

    fn session_of(
        &self,
        session: SessionChoice,
        observation: &Observation,
        end: &AttemptEnd,
    ) -> Option<String> {
        let started = !matches!(end.cause, StopCause::SpawnFailed(_));
        observation.session_id.clone().or_else(|| {
            (started || matches!(session, SessionChoice::Resume(_)))
                .then(|| session.id().to_string())
        })
    }

    fn success_envelope(
        &self,
        session: SessionChoice,
        result: String,
        end: &AttemptEnd,
        mut observation: Observation,
    ) -> Envelope {
        let envelope = Envelope::success(self.session_of(session, &observation, end), result);
        self.finish(envelope, Some(&mut observation), Some(end))
    }

    #[allow(clippy::too_many_arguments)]
    fn failure_envelope(
        &self,
        session: SessionChoice,
        failure: Failure,
        upstream: Option<retry::UpstreamClass>,
        refusal: Option<String>,
        effects: &SideEffects,
        end: &AttemptEnd,
        mut observation: Observation,
    ) -> Envelope {
        let exit_code = failure.exit_code();
        let session_id = self.session_of(session, &observation, end);
        let mut detail = self.detail(failure.message);
        detail.exit_code = end.exit_code;
        detail.last_lines = observation.last_lines();
        detail.json_decode_errors = observation.json_decode_errors;
        detail.signal = end.exit_signal.map(signal_name);
        detail.http_status = failure.http_status;
        detail.upstream_error = failure.upstream_error;
        detail.retryable = upstream.map(|u| u.retryable);
        detail.session_poisoned = upstream.map(|u| u.session_poisoned);
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
            detail.resume_hint = Some(format!(
                "the agent already changed things ({}); to continue where it stopped: coder --cd {} --session-id {id} \"continue\"",
                effects
                    .mutating_tools
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                shell_quote(&self.workspace.display().to_string()),
            ));
        }
        let mut envelope = Envelope::failure(failure.kind, session_id, failure.summary, detail);
        envelope.exit_code = exit_code;
        self.finish(envelope, Some(&mut observation), Some(end))
    }

    fn cancelled_during_backoff(
        &self,
        session: SessionChoice,
        signo: i32,
        end: &AttemptEnd,
        mut observation: Observation,
    ) -> Envelope {
        let name = signal_name(signo);
        let mut detail = self.detail(format!(
            "coder received {name} while waiting to retry; no attempt was running"
        ));
        detail.last_lines = observation.last_lines();
        detail.json_decode_errors = observation.json_decode_errors;
        let mut envelope = Envelope::failure(
            ErrorKind::Cancelled,
            self.session_of(session, &observation, end),
            format!("cancelled by {name}"),
            detail,
        );
        envelope.exit_code = cancelled_exit_code(signo);
        self.finish(envelope, Some(&mut observation), Some(end))
    }
}

/// Quotes a path for a copy-pasteable shell command.
fn shell_quote(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:@".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}
