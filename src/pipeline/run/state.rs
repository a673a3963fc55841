//! What a run knows across its attempts ([`Run`]): the backend it took, its attempts, its
//! metrics and hints, and every envelope it can end with (success, failure, cancelled,
//! refused), so each is made in one place.

use std::time::Duration;
use std::time::Instant;

use serde_json::json;

use crate::config;
use crate::exit::{ErrorKind, cancelled_exit_code};
use crate::pipeline::admission;
use crate::pipeline::envelope::{AttemptOutcome, AttemptSummary, Envelope, ErrorDetail, Metrics};
use crate::pipeline::observation::Observation;
use crate::pipeline::outcome::{Failure, LimitsForMessages};
use crate::pipeline::provider;
use crate::pipeline::request::{RequestFrom, RunRequest, SessionChoice};
use crate::pipeline::retry::{self, SideEffects};
use crate::pipeline::structured::Answer;
use crate::supervise::{AttemptEnd, Limits, signals::signal_name};

use super::ANSWER_AS_HINTED;

/// State shared by all attempts of one run, and the envelope builders.
pub(super) struct Run {
    pub(super) started: Instant,
    pub(super) limits: Limits,
    pub(super) message_limits: LimitsForMessages,
    pub(super) return_all_messages: bool,
    pub(super) workspace: std::path::PathBuf,
    /// `--sandbox read-only`: no write of the agent can have happened (but to the plan
    /// file of a plan run).
    pub(super) read_only: bool,
    /// `coder plan`: the plan file, the one file the agent may have written.
    pub(super) plan_file: Option<std::path::PathBuf>,
    /// Who wrote the request: a resume hint is a command line, or the MCP tool's arguments.
    pub(super) request_from: RequestFrom,
    pub(super) retries: u32,
    pub(super) attempts: Vec<AttemptSummary>,
    pub(super) warnings: Vec<String>,
    pub(super) usage: crate::pipeline::envelope::TokenUsage,
    pub(super) tool_calls: std::collections::BTreeMap<String, u64>,
    pub(super) tool_time: std::collections::BTreeMap<String, Duration>,
    pub(super) denials: Vec<crate::sandbox::Denial>,
    pub(super) backend: String,
    /// The backend was named (`--backend`, `CODER_BACKEND`), not the config's default: a
    /// resume hint must name it too, or the resume would run on the default one.
    backend_named: bool,
    /// The config file and the claude executable the run was given (`--config`,
    /// `--claude-bin` or their variables): a resume hint names them, or a pasted resume
    /// found neither the file's backend nor a CLI that is not on `PATH`.
    given_files: GivenFiles,
    /// Files of failed Edit/MultiEdit calls (the fallback's trigger).
    pub(super) failed_edits: Vec<String>,
    /// Who serves the backend's API (how its errors are read, whether its cost is real).
    pub(super) provider: provider::Provider,
    /// `applied_workarounds` of every envelope.
    pub(super) workarounds: Vec<config::Workaround>,
    /// What the verified outcome cost, for `metrics.outcome_ms`.
    pub(super) outcome_times: crate::pipeline::envelope::OutcomeTimes,
    /// Provider remedies applied to every attempt from now on (DESIGN §12), in order.
    pub(super) remedies: Vec<provider::Remedy>,
    /// Why this run switched its backend to the compat request shape, for the store, so
    /// that later runs start there.
    pub(super) compat_learned: Option<String>,
    /// `--json-schema`: what the last attempt offered as its answer.
    pub(super) answer: Option<Answer>,
    /// Stops the sandbox's setup midway when a cancelling signal arrives (see
    /// `CancelSignals::cancel_setup`).
    pub(super) setup_cancel: crate::sandbox::SetupCancel,
    /// What to check when the backend rejects the key: which key, sent where.
    pub(super) auth_hint: Option<String>,
}

impl Run {
    /// Takes what the run reports and obeys of its resolved `backend`: its warnings, name,
    /// provider, retry limits and workarounds; and says when sandbox flags were given to a
    /// run that confines nothing.
    pub(super) fn take_backend(&mut self, backend: &config::ResolvedBackend, request: &RunRequest) {
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
        self.auth_hint = Some(provider::auth_hint(
            backend.name(),
            backend.credential().map(|c| &c.source),
            backend.base_url(),
        ));
    }

    pub(super) fn new(request: &RunRequest, started: Instant) -> Self {
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
            given_files: GivenFiles {
                config: request.backend.config.clone(),
                claude_bin: request.claude_bin.clone(),
            },
            failed_edits: Vec::new(),
            provider: provider::Provider::Other,
            workarounds: Vec::new(),
            outcome_times: Default::default(),
            remedies: Vec::new(),
            compat_learned: None,
            answer: None,
            setup_cancel: Default::default(),
            auth_hint: None,
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
                self.resume_flags(),
                crate::text::shell_quote(&plan.display().to_string()),
            ),
            None => format!(
                "{what}; to continue where it stopped: coder --cd {ws}{} --session-id {id} \"continue\"",
                self.resume_flags(),
            ),
        }
    }

    /// How to have the agent go on after its work failed the `--verify` check (its repair
    /// turns spent): the same session, with the same check.
    /// The check's own limit is kept when it was not the default: a check that hung under
    /// `--verify-timeout 5` would otherwise hang ten minutes in the resumed run.
    pub(super) fn verify_hint(
        &self,
        id: &str,
        verify: &crate::pipeline::request::VerifyConfig,
    ) -> String {
        let what = "the check still fails after the agent's work";
        let task = "the check still fails: fix it";
        let command = verify.command.as_str();
        let timeout = (verify.timeout != crate::pipeline::request::DEFAULT_VERIFY_TIMEOUT)
            .then_some(verify.timeout.as_secs_f64());
        if self.request_from == RequestFrom::McpTool {
            let mut extra = json!({"PROMPT": task, "verify": command});
            if let Some(secs) = timeout {
                extra["verify_timeout"] = json!(secs);
            }
            let arguments = self.tool_arguments(id, extra);
            return format!(
                "{what}; to have the agent go on, call the coder tool with {arguments}"
            );
        }
        format!(
            "{what}; to have the agent go on: coder --cd {}{} --session-id {id} --verify {}{} \"{task}\"",
            crate::text::shell_quote(&self.workspace.display().to_string()),
            self.resume_flags(),
            crate::text::shell_quote(command),
            timeout.map_or(String::new(), |secs| format!(" --verify-timeout {secs}")),
        )
    }

    /// How to go on after a signal stopped the check of the agent's finished work: the
    /// same session, with the same check, which runs first thing (`--verify` checks before
    /// and after the turn; the agent is told to go on only where the check fails).
    pub(super) fn check_cancelled_hint(
        &self,
        id: &str,
        verify: &crate::pipeline::request::VerifyConfig,
    ) -> String {
        let what = "the agent's turn ended; its check was cancelled before it finished";
        let task = "continue: make the check pass if it fails";
        let command = verify.command.as_str();
        if self.request_from == RequestFrom::McpTool {
            let arguments = self.tool_arguments(id, json!({"PROMPT": task, "verify": command}));
            return format!("{what}; to check it and go on, call the coder tool with {arguments}");
        }
        format!(
            "{what}; to check it and go on: coder --cd {}{} --session-id {id} --verify {} \"{task}\"",
            crate::text::shell_quote(&self.workspace.display().to_string()),
            self.resume_flags(),
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
                self.resume_flags(),
                crate::text::shell_quote(&plan.display().to_string()),
            ),
            None => format!(
                "coder --cd {}{}",
                crate::text::shell_quote(&self.workspace.display().to_string()),
                self.resume_flags(),
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
    pub(super) fn tool_arguments(
        &self,
        id: &str,
        mut extra: serde_json::Value,
    ) -> serde_json::Value {
        extra["cd"] = json!(self.workspace);
        extra["SESSION_ID"] = json!(id);
        if self.backend_named {
            extra["backend"] = json!(self.backend);
        }
        extra
    }

    /// The flags a resume of this run needs to run as it did: ` --config FILE` and
    /// ` --claude-bin PATH` when the run was given them, ` --backend NAME` when it named
    /// its backend (the session record refuses another backend); else nothing.
    fn resume_flags(&self) -> String {
        let quoted = |p: &std::path::Path| crate::text::shell_quote(&p.display().to_string());
        let mut flags = String::new();
        if let Some(config) = &self.given_files.config {
            flags.push_str(&format!(" --config {}", quoted(config)));
        }
        if self.backend_named {
            flags.push_str(&format!(
                " --backend {}",
                crate::text::shell_quote(&self.backend)
            ));
        }
        if let Some(bin) = &self.given_files.claude_bin {
            flags.push_str(&format!(" --claude-bin {}", quoted(bin)));
        }
        flags
    }

    /// Applies `remedy` to every later attempt, and lists what it changed in
    /// `applied_workarounds`.
    pub(super) fn apply_remedy(&mut self, remedy: provider::Remedy) {
        if !self.remedies.contains(&remedy) {
            self.remedies.push(remedy);
        }
        if let Some(workaround) = remedy.workaround()
            && !self.workarounds.contains(&workaround)
        {
            self.workarounds.push(workaround);
        }
    }

    pub(super) fn record_attempt(
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

    pub(super) fn metrics(&self, observation: &Observation, end: Option<&AttemptEnd>) -> Metrics {
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

    pub(super) fn finish(
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

    pub(super) fn detail(&self, message: String) -> ErrorDetail {
        ErrorDetail {
            message,
            idle_timeout_s: self.message_limits.idle_timeout_s,
            max_duration_s: self.message_limits.max_duration_s,
            retries: self.retries,
            ..ErrorDetail::default()
        }
    }

    /// A failure before any attempt ran.
    pub(super) fn early_envelope(
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

    pub(super) fn success_envelope(
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

    pub(super) fn failure_envelope(
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
        // A cancelled run too: the user who stopped a run that had begun to change
        // things (Ctrl-C) is told how to go on from there, as after any other stop; the
        // CLI's session keeps every turn up to the signal.
        let resumable =
            observation.session_id.is_some() && !upstream.is_some_and(|u| u.session_poisoned);
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

    pub(super) fn cancelled_during_backoff(
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

impl Run {
    /// `envelope` turned into a failure of `kind` (a success's result and metrics kept);
    /// an envelope that already failed keeps its kind and only gets `edit`'s details.
    pub(super) fn fail(
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
    pub(super) fn cancelled_outside_attempt(&self, signo: i32, what: &str) -> Envelope {
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
    /// The envelope of a run a signal stopped before the CLI started, `during` a step of
    /// its setup (`the sandbox's setup`, `the change ledger's snapshot`) that used to hold
    /// the signal until it ended (seconds, on a big workspace).
    pub(super) fn cancelled_during_setup(&self, signo: i32, during: &str) -> Envelope {
        let name = signal_name(signo);
        let mut envelope = self.early_envelope(
            ErrorKind::Cancelled,
            format!("cancelled by {name} during {during}"),
            format!(
                "coder received {name} during {during}; the run was cancelled before it \
                 started: the claude CLI never ran"
            ),
            None,
        );
        envelope.exit_code = cancelled_exit_code(signo);
        envelope
    }

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
    pub(super) fn refused(&self, refusal: admission::Refusal) -> Envelope {
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

/// One finished attempt: how the process ended, what it said, and what it may have
/// changed.
pub(super) struct AttemptRecord {
    pub(super) end: AttemptEnd,
    pub(super) observation: Observation,
    pub(super) effects: SideEffects,
}

/// A failure that ends the run, with how the envelope explains it.
pub(super) struct Stop {
    pub(super) failure: Failure,
    pub(super) upstream: Option<retry::UpstreamClass>,
    /// `error_detail.provider_error` (DESIGN §12).
    pub(super) provider_error: Option<provider::ProviderError>,
    /// Why a retry was not made, when the user could have expected one.
    pub(super) refusal: Option<String>,
}

/// The backend name as asked for, before resolution (for records of runs that fail it).
pub(super) fn requested_backend(request: &RunRequest) -> String {
    request
        .backend
        .backend
        .clone()
        .unwrap_or_else(|| "default".to_owned())
}

/// The files a run was given by flag or variable that a resume of it needs again.
#[derive(Debug, Default)]
struct GivenFiles {
    config: Option<std::path::PathBuf>,
    claude_bin: Option<std::path::PathBuf>,
}
