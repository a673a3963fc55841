//! What an attempt came to: the classification of a finished attempt into success or one
//! [`ErrorKind`] (defined, with its exit code, in [`crate::exit`]), with the message, hint
//! and upstream details the envelope reports.

use crate::exit::{ErrorKind, cancelled_exit_code};
use crate::pipeline::observation::Observation;
use crate::sandbox::helper::HelperStage;
use crate::stream::{ResultSubtype, TerminalReason, UpstreamErrorType};
use crate::supervise::{AttemptEnd, SpawnError, StopCause, signals::signal_name};

/// The classified end of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Success { result: String },
    Failure(Failure),
}

/// A classified failure, before it is dressed as an envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: ErrorKind,
    /// The one-line `error` of the envelope.
    pub summary: String,
    /// The longer `error_detail.message`.
    pub message: String,
    pub http_status: Option<u16>,
    pub upstream_error: Option<UpstreamErrorType>,
    pub hint: Option<String>,
    /// For `cancelled`: the signal coder received.
    pub cancel_signal: Option<i32>,
}

impl Failure {
    fn new(kind: ErrorKind, summary: impl Into<String>, message: impl Into<String>) -> Self {
        Failure {
            kind,
            summary: summary.into(),
            message: message.into(),
            http_status: None,
            upstream_error: None,
            hint: None,
            cancel_signal: None,
        }
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    #[cfg(test)]
    pub(crate) fn for_tests(kind: ErrorKind) -> Self {
        Failure::new(kind, kind.as_str(), kind.as_str())
    }

    /// The process exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match (self.kind, self.cancel_signal) {
            (ErrorKind::Cancelled, Some(signal)) => cancelled_exit_code(signal),
            (kind, _) => kind.exit_code(),
        }
    }
}

/// Limits the attempt ran under, for messages.
#[derive(Debug, Clone, Copy)]
pub struct LimitsForMessages {
    pub idle_timeout_s: f64,
    pub max_duration_s: f64,
}

/// Classifies an ended attempt from how it ended and what its stream showed, following the
/// CLI's measured signals: `is_error`, `subtype`, `terminal_reason`, `api_error_status`, the
/// synthetic `<synthetic>` assistant message, and the exit status.
pub fn classify(end: &AttemptEnd, obs: &Observation, limits: LimitsForMessages) -> Verdict {
    if let Some(failure) = stopped_failure(&end.cause, obs, limits) {
        return Verdict::Failure(failure);
    }
    if let Some(result) = &obs.result {
        return classify_result(result, obs);
    }
    Verdict::Failure(no_result_failure(end, obs))
}

/// The failure a stop of coder's (a signal, a watchdog, a spawn error, a provider remedy,
/// questions) makes of the attempt, whatever its stream showed; `None` when the child
/// ended on its own (or lingered after its result) and the stream decides.
fn stopped_failure(
    cause: &StopCause,
    obs: &Observation,
    limits: LimitsForMessages,
) -> Option<Failure> {
    let pending = obs
        .pending_tool()
        .map(|t| format!(" while {t} was running"))
        .unwrap_or_default();
    let failure = match cause {
        StopCause::Cancelled(signal) => cancelled(*signal, &pending),
        StopCause::IdleTimeout {
            provider_wait: Some(wait),
        } => provider_unanswered(wait.as_secs_f64()),
        StopCause::IdleTimeout {
            provider_wait: None,
        } => silent_for(limits.idle_timeout_s, &pending),
        StopCause::TotalTimeout => over_max_duration(limits.max_duration_s, &pending),
        StopCause::SpawnFailed(error) => spawn_failure(error),
        StopCause::AuthRejected => auth_rejected(),
        StopCause::RateLimited { cli_retries } => rate_limited(*cli_retries),
        StopCause::QuestionsAsked => questions_asked(obs),
        StopCause::Finished | StopCause::LingeredAfterResult => return None,
    };
    Some(failure)
}

/// Coder received `signal` and stopped the tree.
fn cancelled(signal: i32, pending: &str) -> Failure {
    let name = signal_name(signal);
    let mut failure = Failure::new(
        ErrorKind::Cancelled,
        format!("cancelled by {name}"),
        format!("coder received {name}{pending}; the child process tree was stopped"),
    );
    failure.cancel_signal = Some(signal);
    failure
}

/// A request to the provider stayed unanswered past the backend's `provider_wait_s`.
fn provider_unanswered(secs: f64) -> Failure {
    Failure::new(
        ErrorKind::IdleTimeout,
        format!("no answer from the provider for {secs} s"),
        format!(
            "a request to the provider stayed unanswered for {secs} s (the backend's \
             provider_wait_s, which extends --timeout while a request is in flight); \
             the run was stopped"
        ),
    )
    .hint("the provider is queueing requests: try later, or raise provider_wait_s in the backend's config")
}

/// The CLI printed nothing for `--timeout` seconds.
fn silent_for(secs: f64, pending: &str) -> Failure {
    Failure::new(
        ErrorKind::IdleTimeout,
        format!("no output for {secs} s{pending}"),
        format!(
            "the claude CLI printed nothing on stdout or stderr for {secs} s{pending}; the run was stopped"
        ),
    )
    .hint("raise --timeout if the task legitimately runs silent that long, or check the backend")
}

/// The run reached `--max-duration`.
fn over_max_duration(secs: f64, pending: &str) -> Failure {
    Failure::new(
        ErrorKind::Timeout,
        format!("run exceeded --max-duration of {secs} s{pending}"),
        format!("the run reached its --max-duration of {secs} s{pending} and was stopped"),
    )
    .hint("raise --max-duration (0 means no cap) or split the task")
}

/// The backend answered 401 and coder stopped the CLI at its first retry.
fn auth_rejected() -> Failure {
    let mut failure = Failure::new(
        ErrorKind::UpstreamError,
        "API Error: 401 the backend rejected the key",
        "the backend API failed: API Error: 401 the backend rejected the key; coder \
         stopped the claude CLI at its first retry (a retry with the same key fails \
         the same way)",
    )
    .hint("check the backend's API key variable and base URL (coder doctor)");
    failure.http_status = Some(401);
    failure.upstream_error = Some(UpstreamErrorType::AuthenticationFailed);
    failure
}

/// The backend answered 429 and coder stopped the CLI's fast retries.
fn rate_limited(cli_retries: u32) -> Failure {
    let mut failure = Failure::new(
        ErrorKind::UpstreamError,
        "API Error: 429 rate limit reached",
        format!(
            "the backend API failed: API Error: 429 rate limit reached; the claude CLI \
             retried {cli_retries} times and coder stopped it: this vendor counts fast \
             retries toward its risk control, so coder backs off itself"
        ),
    );
    failure.http_status = Some(429);
    failure.upstream_error = Some(UpstreamErrorType::RateLimit);
    failure
}

/// The model called `ask_user`; coder stopped the run to hand the questions over.
fn questions_asked(obs: &Observation) -> Failure {
    let asked = obs.questions.as_ref().map_or(0, Vec::len);
    let heads: Vec<String> = obs
        .questions
        .iter()
        .flatten()
        .map(|q| crate::text::one_line(&q.question, 80))
        .collect();
    Failure::new(
        ErrorKind::NeedsInput,
        format!(
            "the model asked {asked} question(s) and waits for answers: {}",
            crate::text::one_line(&heads.join(" | "), 200)
        ),
        format!(
            "the model called ask_user with {asked} question(s) (in `questions`); \
             coder stopped the run there"
        ),
    )
    .hint(
        "resume this session with --session-id SESSION_ID --answers '[\"answer 1\", …]' \
         (one answer per question, in order)",
    )
}

/// The failure of an attempt whose child ended on its own without a result line.
fn no_result_failure(end: &AttemptEnd, obs: &Observation) -> Failure {
    if let Some(synthetic) = &obs.synthetic_error {
        let text = &synthetic.text;
        let mut failure = Failure::new(
            ErrorKind::UpstreamError,
            crate::text::one_line(text, 200),
            format!("the claude CLI reported an API failure and ended without a result: {text}"),
        );
        failure.http_status = synthetic.http_status;
        failure.upstream_error.clone_from(&synthetic.error);
        return failure;
    }
    let exit = describe_exit(end);
    let tail = obs
        .last_line_head()
        .map(|l| format!("; last output: {l}"))
        .unwrap_or_default();
    if obs.json_decode_errors > 0 && obs.events == 0 {
        return Failure::new(
            ErrorKind::JsonDecode,
            format!("stdout was not stream-json ({} undecodable lines)", obs.json_decode_errors),
            format!(
                "the child {exit} and printed {} lines on stdout that are not stream-json events, and no result{tail}",
                obs.json_decode_errors
            ),
        ).hint("check that --claude-bin points at the claude CLI, not a wrapper that prints other text");
    }
    if let Some(failure) = launch_failure(end, obs, &tail) {
        return failure;
    }
    if end.exit_code != Some(0) {
        return Failure::new(
            ErrorKind::SubprocessError,
            format!("claude {exit} without a result"),
            format!("the claude CLI {exit} before printing a result{tail}"),
        );
    }
    if obs.session_id.is_none() && obs.stdout_bytes == 0 {
        // Not even a line: the executable is most likely not the claude CLI (`true`, a
        // shim that does nothing), which the CLI itself never does.
        return Failure::new(
            ErrorKind::ProtocolMissingSession,
            "no session id in the stream: claude printed nothing",
            format!("the claude CLI exited 0 without printing anything on stdout{tail}"),
        )
        .hint(
            "check that --claude-bin (or CODER_CLAUDE_BIN, or `claude` on PATH) is the \
                 claude CLI: `claude --version` prints \"… (Claude Code)\"; coder doctor checks it",
        );
    }
    if obs.session_id.is_none() {
        return Failure::new(
            ErrorKind::ProtocolMissingSession,
            "no session id in the stream",
            format!("the claude CLI exited 0 without a system/init event or any session id{tail}"),
        );
    }
    Failure::new(
        ErrorKind::EmptyResult,
        "claude ended without a result",
        format!("the claude CLI exited 0 without printing a result event{tail}"),
    )
}

/// A child that exited 127 or 126 before printing a byte on stdout: a shell's or `env`'s
/// "not found" / "cannot execute", for a `#!/usr/bin/env node` launcher with no `node` on
/// PATH most often. The CLI never was running: `command_not_found` (127, not retried), as
/// for a `--claude-bin` that cannot be executed at all; it was `subprocess_error`
/// (exit 1, retryable), which reads as a crash of the CLI.
fn launch_failure(end: &AttemptEnd, obs: &Observation, tail: &str) -> Option<Failure> {
    let code = end.exit_code.filter(|c| matches!(c, 126 | 127))?;
    if obs.stdout_bytes > 0 || obs.events > 0 {
        return None;
    }
    let what = match code {
        127 => "did not find a program it starts",
        _ => "could not execute a program it starts",
    };
    Some(
        Failure::new(
            ErrorKind::CommandNotFound,
            format!("the claude CLI never started: its launcher {what} (exit {code})"),
            format!("the claude executable exited {code} before printing anything{tail}"),
        )
        .hint(
            "check --claude-bin (or CODER_CLAUDE_BIN, or `claude` on PATH): a claude installed \
             by npm is a script that needs node on PATH, also inside the sandbox; coder doctor \
             checks the CLI",
        ),
    )
}

fn classify_result(result: &crate::stream::ResultEvent, obs: &Observation) -> Verdict {
    let subtype = result.subtype.as_ref().map_or("", ResultSubtype::as_str);
    let reason = result
        .terminal_reason
        .as_ref()
        .map_or("", TerminalReason::as_str);
    let errors = result.errors.join("; ");
    if !result.is_error && matches!(result.subtype, None | Some(ResultSubtype::Success)) {
        return match result.result.as_deref().map(str::trim) {
            Some(text) if !text.is_empty() => Verdict::Success {
                result: result.result.clone().unwrap_or_default(),
            },
            _ => Verdict::Failure(Failure::new(
                ErrorKind::EmptyResult,
                "claude finished with an empty result",
                "the claude CLI reported success but its result text is empty",
            )),
        };
    }
    let failure = structured_gave_up(result, &errors)
        .or_else(|| at_limit(result, subtype, &errors))
        .or_else(|| missing_session(result, &errors))
        .or_else(|| upstream_failure(result, obs, &errors))
        .unwrap_or_else(|| {
            let text = result_text(result, &errors);
            Failure::new(
                ErrorKind::SubprocessError,
                crate::text::one_line(&format!("claude failed ({subtype}): {text}"), 200),
                format!("the claude CLI ended with an error result ({subtype}, {reason}): {text}"),
            )
        });
    Verdict::Failure(failure)
}

/// The result's text, or its errors where it has none.
fn result_text(result: &crate::stream::ResultEvent, errors: &str) -> String {
    result
        .result
        .clone()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| errors.to_owned())
}

/// `--json-schema` (DESIGN §9): the CLI gave up on a structured answer; the run decides
/// on a repair turn from here.
fn structured_gave_up(result: &crate::stream::ResultEvent, errors: &str) -> Option<Failure> {
    if result.subtype != Some(ResultSubtype::ErrorMaxStructuredOutputRetries)
        && result.terminal_reason != Some(TerminalReason::StructuredOutputRetryExhausted)
    {
        return None;
    }
    let what = if errors.is_empty() {
        "the model gave no answer matching --json-schema".to_owned()
    } else {
        errors.to_owned()
    };
    Some(Failure::new(
        ErrorKind::SchemaMismatch,
        crate::text::one_line(&what, 200),
        format!("the claude CLI gave up on a structured answer: {what}"),
    ))
}

/// The run stopped at its turn or budget limit.
fn at_limit(result: &crate::stream::ResultEvent, subtype: &str, errors: &str) -> Option<Failure> {
    let at_limit = matches!(
        result.subtype,
        Some(ResultSubtype::ErrorMaxTurns | ResultSubtype::ErrorMaxBudgetUsd)
    ) || matches!(
        result.terminal_reason,
        Some(TerminalReason::MaxTurns | TerminalReason::BudgetExhausted)
    );
    if !at_limit {
        return None;
    }
    let what = if errors.is_empty() {
        format!("stopped at its limit ({subtype})")
    } else {
        errors.to_owned()
    };
    Some(
        Failure::new(
            ErrorKind::MaxTurns,
            what.clone(),
            format!("the claude CLI {what}"),
        )
        .hint("resume the session with SESSION_ID to continue, or raise the limit"),
    )
}

/// The session to resume does not exist (for the CLI).
fn missing_session(result: &crate::stream::ResultEvent, errors: &str) -> Option<Failure> {
    let missing = result.errors.iter().any(|e| {
        e.contains("No conversation found") || e.contains("--resume requires a valid session")
    });
    missing.then(|| {
        Failure::new(
            ErrorKind::ProtocolMissingSession,
            crate::text::one_line(errors, 200),
            format!("the session to resume does not exist: {errors}"),
        )
        .hint("resume only a SESSION_ID from an earlier run with the same backend and config; omit --session-id to start a new session")
    })
}

/// The backend's API failed (a status, an error type, or the CLI's synthetic message): a
/// prompt over the context window is told apart.
fn upstream_failure(
    result: &crate::stream::ResultEvent,
    obs: &Observation,
    errors: &str,
) -> Option<Failure> {
    let upstream = result.terminal_reason == Some(TerminalReason::ApiError)
        || result.api_error_status.is_some()
        || result.api_error_type.is_some()
        || obs.synthetic_error.is_some();
    if !upstream {
        return None;
    }
    let status = result
        .api_error_status
        .or_else(|| obs.synthetic_error.as_ref().and_then(|s| s.http_status))
        .or(obs.last_retry_status);
    let text = result_text(result, errors);
    if is_context_overflow(&text) {
        let mut failure = Failure::new(
            ErrorKind::UpstreamError,
            crate::text::one_line(
                &format!("the prompt is too long for the model: {text}"),
                200,
            ),
            format!(
                "the conversation (the task plus what the session already holds) is longer \
                 than the model's context window: {text}"
            ),
        )
        .hint("shorten the task or its documents, or start a fresh session instead of resuming");
        failure.http_status = status;
        return Some(failure);
    }
    let mut failure = Failure::new(
        ErrorKind::UpstreamError,
        crate::text::one_line(&text, 200),
        format!("the backend API failed: {text}"),
    );
    failure.http_status = status;
    failure.upstream_error = obs
        .synthetic_error
        .as_ref()
        .and_then(|s| s.error.clone())
        .or_else(|| result.api_error_type.clone());
    if matches!(status, Some(401 | 403))
        || failure.upstream_error == Some(UpstreamErrorType::AuthenticationFailed)
    {
        failure = failure.hint("check the backend's API key variable and base URL (coder doctor)");
    }
    Some(failure)
}

/// The CLI's or the vendor's words for a request over the context window ("Prompt is too
/// long", Z.ai's 1261, "maximum context length").
pub fn is_context_overflow(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    [
        "prompt is too long",
        "prompt too long",
        "maximum context length",
        "context length",
    ]
    .iter()
    .any(|marker| lower.contains(marker))
        || lower.contains("(1261)")
        || lower.contains("\"1261\"")
}

fn describe_exit(end: &AttemptEnd) -> String {
    match (end.exit_code, end.exit_signal) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("was killed by {}", signal_name(signal)),
        (None, None) => "ended".to_owned(),
    }
}

fn spawn_failure(error: &SpawnError) -> Failure {
    match error {
        SpawnError::Helper(failure) if failure.stage == HelperStage::Exec => Failure::new(
            ErrorKind::CommandNotFound,
            failure.message.clone(),
            failure.message.clone(),
        )
        .hint(crate::pipeline::child::INSTALL_HINT),
        SpawnError::Helper(failure) if failure.stage == HelperStage::Sandbox => Failure::new(
            ErrorKind::SandboxError,
            failure.message.clone(),
            failure.message.clone(),
        )
        .hint("run `coder doctor`; --sandbox danger-full-access runs without confinement"),
        other => Failure::new(
            ErrorKind::SubprocessError,
            other.to_string(),
            format!("the child process could not be started: {other}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::sandbox::helper::HelperFailure;
    use crate::stream::{Line, Pipe};
    use crate::supervise::KillReport;

    const SESSION: &str = "0b8f3a52-6f0e-4d3c-9d62-1f2a3b4c5d6e";

    fn observed(lines: &[&str]) -> Observation {
        let mut obs = Observation::new(Instant::now(), false, Vec::new());
        for text in lines {
            let line = Line {
                bytes: text.as_bytes().to_vec(),
                dropped: 0,
            };
            obs.observe_line(Pipe::Stdout, &line);
        }
        obs
    }

    fn init() -> String {
        serde_json::json!({"type": "system", "subtype": "init", "session_id": SESSION}).to_string()
    }

    fn result(fields: serde_json::Value) -> String {
        let mut ev = serde_json::json!({"type": "result", "subtype": "success",
            "is_error": false, "session_id": SESSION, "result": "done"});
        for (k, v) in fields.as_object().into_iter().flatten() {
            ev[k] = v.clone();
        }
        ev.to_string()
    }

    fn end(cause: StopCause, exit_code: Option<i32>, exit_signal: Option<i32>) -> AttemptEnd {
        AttemptEnd {
            cause,
            exit_code,
            exit_signal,
            duration: Duration::from_millis(10),
            kill: KillReport::default(),
        }
    }

    fn helper(stage: HelperStage) -> StopCause {
        StopCause::SpawnFailed(SpawnError::Helper(HelperFailure {
            stage,
            errno: Some(2),
            message: "helper failed".to_string(),
        }))
    }

    const LIMITS: LimitsForMessages = LimitsForMessages {
        idle_timeout_s: 300.0,
        max_duration_s: 1800.0,
    };

    /// One row per outcome the classifier can produce; each `ErrorKind` appears at least once
    /// unless it is decided outside `classify` (bad arguments, coder's own panics).
    #[test]
    fn every_error_kind_is_classified_from_its_end_and_stream() {
        let ok = result(serde_json::json!({}));
        let rows: Vec<(&str, AttemptEnd, Vec<String>, Option<ErrorKind>)> = vec![
            (
                "success",
                end(StopCause::Finished, Some(0), None),
                vec![init(), ok.clone()],
                None,
            ),
            (
                "success, child lingered",
                end(StopCause::LingeredAfterResult, None, Some(15)),
                vec![init(), ok.clone()],
                None,
            ),
            (
                "idle",
                end(
                    StopCause::IdleTimeout {
                        provider_wait: None,
                    },
                    None,
                    Some(9),
                ),
                vec![init()],
                Some(ErrorKind::IdleTimeout),
            ),
            (
                "total",
                end(StopCause::TotalTimeout, None, Some(9)),
                vec![init()],
                Some(ErrorKind::Timeout),
            ),
            (
                "not found",
                end(helper(HelperStage::Exec), None, None),
                vec![],
                Some(ErrorKind::CommandNotFound),
            ),
            (
                "sandbox",
                end(helper(HelperStage::Sandbox), None, None),
                vec![],
                Some(ErrorKind::SandboxError),
            ),
            (
                "setup",
                end(helper(HelperStage::Setup), None, None),
                vec![],
                Some(ErrorKind::SubprocessError),
            ),
            (
                "cancelled",
                end(StopCause::Cancelled(libc::SIGTERM), None, Some(15)),
                vec![init()],
                Some(ErrorKind::Cancelled),
            ),
            (
                "api error",
                end(StopCause::Finished, Some(1), None),
                vec![
                    init(),
                    result(
                        serde_json::json!({"is_error": true, "result": "API Error: 503",
                    "terminal_reason": "api_error", "api_error_status": 503}),
                    ),
                ],
                Some(ErrorKind::UpstreamError),
            ),
            (
                "synthetic error, no result",
                end(StopCause::Finished, Some(1), None),
                vec![
                    init(),
                    serde_json::json!({"type": "assistant", "session_id": SESSION,
                    "message": {"model": "<synthetic>", "role": "assistant",
                        "content": [{"type": "text", "text": "API Error: 500 boom"}]},
                    "is_api_error_message": true, "api_error_status": 500,
                    "error": "server_error"})
                    .to_string(),
                ],
                Some(ErrorKind::UpstreamError),
            ),
            (
                "garbage",
                end(StopCause::Finished, Some(0), None),
                vec!["not json".to_string(), "still not".to_string()],
                Some(ErrorKind::JsonDecode),
            ),
            (
                "crash",
                end(StopCause::Finished, Some(2), None),
                vec![init()],
                Some(ErrorKind::SubprocessError),
            ),
            (
                "killed",
                end(StopCause::Finished, None, Some(9)),
                vec![init()],
                Some(ErrorKind::SubprocessError),
            ),
            (
                "no session",
                end(StopCause::Finished, Some(0), None),
                vec![],
                Some(ErrorKind::ProtocolMissingSession),
            ),
            (
                "unknown session",
                end(StopCause::Finished, Some(1), None),
                vec![result(
                    serde_json::json!({"is_error": true, "subtype": "error_during_execution",
                    "errors": ["No conversation found with session ID: x"]}),
                )],
                Some(ErrorKind::ProtocolMissingSession),
            ),
            (
                "no result",
                end(StopCause::Finished, Some(0), None),
                vec![init()],
                Some(ErrorKind::EmptyResult),
            ),
            (
                "empty result",
                end(StopCause::Finished, Some(0), None),
                vec![init(), result(serde_json::json!({"result": "  "}))],
                Some(ErrorKind::EmptyResult),
            ),
            (
                "max turns",
                end(StopCause::Finished, Some(1), None),
                vec![
                    init(),
                    result(serde_json::json!({"is_error": true, "subtype": "error_max_turns"})),
                ],
                Some(ErrorKind::MaxTurns),
            ),
            (
                "structured output retries exhausted (--json-schema)",
                end(StopCause::Finished, Some(1), None),
                vec![
                    init(),
                    result(serde_json::json!({"is_error": true,
                    "subtype": "error_max_structured_output_retries",
                    "terminal_reason": "structured_output_retry_exhausted",
                    "errors": ["Failed to provide valid structured output after 5 attempts"]})),
                ],
                Some(ErrorKind::SchemaMismatch),
            ),
            (
                "error result",
                end(StopCause::Finished, Some(1), None),
                vec![
                    init(),
                    result(serde_json::json!({"is_error": true,
                    "subtype": "error_during_execution", "result": "tool crashed"})),
                ],
                Some(ErrorKind::SubprocessError),
            ),
        ];
        let mut seen = Vec::new();
        for (name, end, lines, expected) in rows {
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let verdict = classify(&end, &observed(&lines), LIMITS);
            let got = match &verdict {
                Verdict::Success { .. } => None,
                Verdict::Failure(f) => Some(f.kind),
            };
            assert_eq!(got, expected, "{name}: {verdict:?}");
            if let Verdict::Failure(f) = &verdict {
                assert!(!f.summary.is_empty() && !f.summary.contains('\n'), "{name}");
                assert!(!f.message.is_empty(), "{name}");
            }
            seen.extend(got);
        }
        // Decided before or outside an attempt: argument/config checks, coder's own panics,
        // and the verdicts on what the finished run changed (workspace checks after it).
        // (schema_mismatch is both: the CLI's own give-up, and coder's check after it.)
        let elsewhere = [
            ErrorKind::ConfigError,
            ErrorKind::UnexpectedException,
            ErrorKind::VerifyFailed,
            ErrorKind::ScopeViolation,
            ErrorKind::NeedsInput,
        ];
        for kind in ErrorKind::ALL {
            assert_eq!(
                seen.contains(&kind),
                !elsewhere.contains(&kind),
                "{kind}: classify's table must cover every kind it can produce"
            );
        }
    }

    #[test]
    fn cancelled_exit_codes_follow_the_signal() {
        let verdict = classify(
            &end(StopCause::Cancelled(libc::SIGINT), None, None),
            &observed(&[]),
            LIMITS,
        );
        let Verdict::Failure(f) = verdict else {
            panic!("cancelled is a failure")
        };
        assert_eq!(f.exit_code(), 130);
        let verdict = classify(
            &end(StopCause::Cancelled(libc::SIGTERM), None, None),
            &observed(&[]),
            LIMITS,
        );
        let Verdict::Failure(f) = verdict else {
            panic!("cancelled is a failure")
        };
        assert_eq!(f.exit_code(), 143);
    }
}
