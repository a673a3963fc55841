//! The one JSON object coder prints on stdout, success or failure.
//!
//! Field names here are the public contract (DESIGN §2) consumed by scripts and other agents:
//! they never change name or meaning, extra fields may be added. The published JSON Schema
//! (`schema/envelope.schema.json`) describes the same shape and is checked against real
//! envelopes in the tests.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::exit::ErrorKind;
use crate::pipeline::retry::SideEffectClass;
use crate::stream::UpstreamErrorType;
use crate::stream::Usage;
use crate::text::Secrets;

/// The value of the envelope's `tool` field.
pub const TOOL_NAME: &str = "coder";

#[derive(Debug, Serialize)]
pub struct Envelope {
    pub success: bool,
    pub tool: &'static str,
    /// The session the CLI confirmed in its stream; `null` when none was (see README).
    #[serde(rename = "SESSION_ID")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// `--json-schema` (DESIGN §9): the final answer, validated against the schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
    /// `--json-schema`: the repair turn an invalid answer got, when it got one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_repair: Option<SchemaRepair>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_detail: Option<ErrorDetail>,
    /// The plan file: written by `coder plan`, carried out by `--plan` (DESIGN §9);
    /// an absolute path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_file: Option<String>,
    /// `coder plan`: the plan's text as the run left it (capped, with a marker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// What the run changed in the workspace, measured by coder (DESIGN §8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<crate::workspace::Changes>,
    /// The unified diff of those changes (`--return-diff`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<crate::workspace::DiffText>,
    /// The `--verify` checks and their verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<crate::workspace::verify::Verification>,
    /// The weak-model fallback, when it was triggered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<crate::pipeline::fallback::Fallback>,
    /// What the end-of-run git guard moved aside (`quarantined`), or why it could not
    /// check everything (`incomplete`); absent when it found nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::gitguard::GuardReport>,
    /// `--worktree`: the branch the run's work was committed on (DESIGN §10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::workspace::worktree::WorktreeReport>,
    /// `--backend auto`: which backend was chosen and how (DESIGN §10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<crate::routing::RoutingReport>,
    /// `needs_input`: what the model asked with `ask_user` (DESIGN §9).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<crate::pipeline::questions::Question>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_messages: Option<Vec<Box<RawValue>>>,
    /// Every attempt, on failures and whenever there was more than one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptSummary>,
    /// The run's transcript file, when one was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    /// What coder changed in the CLI's defaults for the backend (DESIGN §12).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub applied_workarounds: Vec<crate::config::Workaround>,
    /// Non-fatal notices (e.g. an environment variable coder removed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Not serialised: the process exit code this envelope goes with.
    #[serde(skip)]
    pub exit_code: u8,
}

/// `error_detail`: always carries the first seven fields; the rest appear when they apply.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ErrorDetail {
    pub message: String,
    /// The child's exit code; `null` when it was killed by a signal or never ran.
    pub exit_code: Option<i32>,
    pub last_lines: Vec<String>,
    pub json_decode_errors: u64,
    pub idle_timeout_s: f64,
    /// `0` means no cap.
    pub max_duration_s: f64,
    pub retries: u32,
    /// The signal that ended the child (`SIGKILL`), when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The HTTP status of an upstream failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// The CLI's own error class (`rate_limit`, `authentication_failed`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_error: Option<UpstreamErrorType>,
    /// The tool call that was running when the run was stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_tool: Option<String>,
    /// For upstream errors: whether a retry can help.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// For upstream errors: whether the session's history itself is rejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_poisoned: Option<bool>,
    /// For upstream errors: the provider's error, classified (DESIGN §12).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_error: Option<crate::pipeline::provider::ProviderError>,
    /// Why the failure was not retried, when retries were asked for or side effects exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_refused: Option<String>,
    /// How to continue the session after a failure that already changed things.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_hint: Option<String>,
    /// What the user can do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// `scope_violation`: the changed paths outside every `--scope` glob.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_scope: Option<Vec<String>>,
    /// `schema_mismatch`: why the final answer does not match `--json-schema`, as short
    /// messages starting with a JSON pointer (`/items/0/name: …`, `(root): …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_errors: Option<Vec<String>>,
}

/// `schema_repair`: the one repair turn of an answer that did not match `--json-schema`.
#[derive(Debug, Clone, Serialize)]
pub struct SchemaRepair {
    /// The validation errors of the answer before the repair (what the repair prompt said).
    pub errors: Vec<String>,
    /// Whether the answer after the repair turn matches the schema.
    pub fixed: bool,
}

/// `metrics`: what the run cost and did. Present on failures too.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Metrics {
    pub wall_ms: u64,
    pub time_to_first_event_ms: Option<u64>,
    pub time_to_first_token_ms: Option<u64>,
    pub turns: u64,
    pub usage: TokenUsage,
    pub tool_calls: BTreeMap<String, u64>,
    /// Milliseconds spent in each tool, from the call to its result.
    pub tool_time_ms: BTreeMap<String, u64>,
    /// Operations the sandbox refused, as `{tool, path, class}` (paths only, never contents).
    pub sandbox_denials: Vec<crate::sandbox::Denial>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub stdout_lines: u64,
    pub stderr_lines: u64,
    pub events: u64,
    pub json_decode_errors: u64,
    pub truncated_lines: u64,
    pub api_retries: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_ms: Option<u64>,
    /// The CLI's `total_cost_usd`; `null` for non-Anthropic backends, whose prices the
    /// CLI does not know.
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cli_version: Option<String>,
    /// Milliseconds the run waited for a slot on its backend (`max_concurrent`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<u64>,
    /// What checking the outcome cost (DESIGN §8): the ledger, the checks, the extra turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome_ms: Option<OutcomeTimes>,
}

/// Milliseconds spent on the verified outcome, beside the agent's own work.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OutcomeTimes {
    /// The change ledger's snapshot before the agent (its own duration), and its
    /// comparison after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_before_ms: Option<u64>,
    /// How long the run waited on that snapshot: all of it when it is taken first, else
    /// the longest time the egress proxy held a request for it plus the time the run
    /// awaited it (before the `--verify` baseline, at the end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_wait_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_after_ms: Option<u64>,
    /// `--verify`: the baseline, the check after the agent and the final one (after the
    /// last repair turn), as far as they ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_baseline_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_after_agent_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_final_ms: Option<u64>,
    /// Each repair turn (the agent's attempt, not the check after it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repair_turns_ms: Vec<u64>,
    /// The weak-model fallback turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_ms: Option<u64>,
    /// The `--json-schema` repair turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_repair_ms: Option<u64>,
}

impl Metrics {
    /// Redacts the texts metrics carry (names the model or tools reported, denied paths).
    fn redact(&mut self, secrets: &Secrets) {
        let maybe = |s: &mut Option<String>| s.iter_mut().for_each(|s| secrets.redact_string(s));
        maybe(&mut self.backend);
        maybe(&mut self.model);
        maybe(&mut self.cli_version);
        maybe(&mut self.signal);
        for denial in &mut self.sandbox_denials {
            secrets.redact_string(&mut denial.tool);
            maybe(&mut denial.path);
        }
        let keys = |map: &mut BTreeMap<String, u64>| {
            *map = std::mem::take(map)
                .into_iter()
                .map(|(k, v)| (secrets.redact(&k).into_owned(), v))
                .collect();
        };
        keys(&mut self.tool_calls);
        keys(&mut self.tool_time_ms);
    }
}

#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl From<Usage> for TokenUsage {
    fn from(u: Usage) -> Self {
        TokenUsage {
            input: u.input_tokens,
            output: u.output_tokens,
            cache_read: u.cache_read_input_tokens,
            cache_write: u.cache_creation_input_tokens,
        }
    }
}

impl Envelope {
    /// An envelope with nothing but its outcome, session and exit code set.
    fn bare(success: bool, session_id: Option<String>, exit_code: u8) -> Self {
        Envelope {
            success,
            tool: TOOL_NAME,
            session_id,
            result: None,
            error: None,
            error_kind: None,
            error_detail: None,
            plan_file: None,
            plan: None,
            changes: None,
            diff: None,
            verification: None,
            fallback: None,
            structured: None,
            schema_repair: None,
            sandbox: None,
            worktree: None,
            routing: None,
            questions: None,
            metrics: None,
            all_messages: None,
            attempts: Vec::new(),
            transcript: None,
            applied_workarounds: Vec::new(),
            warnings: Vec::new(),
            exit_code,
        }
    }

    pub fn success(session_id: Option<String>, result: String) -> Self {
        Envelope {
            result: Some(result),
            ..Envelope::bare(true, session_id, 0)
        }
    }

    pub fn failure(
        kind: ErrorKind,
        session_id: Option<String>,
        summary: String,
        detail: ErrorDetail,
    ) -> Self {
        Envelope {
            error: Some(summary),
            error_kind: Some(kind),
            error_detail: Some(detail),
            ..Envelope::bare(false, session_id, kind.exit_code())
        }
    }

    /// A failure that happened before any child ran (bad input, a bug in coder).
    pub fn early_failure(kind: ErrorKind, message: impl Into<String>) -> Self {
        let message = message.into();
        let detail = ErrorDetail {
            message: message.clone(),
            ..ErrorDetail::default()
        };
        Envelope::failure(kind, None, crate::text::one_line(&message, 300), detail)
    }

    /// Redacts every text the envelope carries: known secrets in every spelling and
    /// credential-shaped tokens, in `result`, `error`, `error_detail`, `warnings`,
    /// `attempts`, `metrics` (also printed by `--log-metrics`) and the decoded strings of
    /// `all_messages`. Called once where the envelope is finished, before it is recorded or
    /// printed; redacting twice changes nothing.
    pub fn redact(&mut self, secrets: &Secrets) {
        let text = |s: &mut String| secrets.redact_string(s);
        let maybe = |s: &mut Option<String>| s.iter_mut().for_each(|s| secrets.redact_string(s));
        maybe(&mut self.result);
        maybe(&mut self.error);
        maybe(&mut self.plan);
        if let Some(detail) = self.error_detail.as_mut() {
            text(&mut detail.message);
            secrets.redact_lines(&mut detail.last_lines);
            if let Some(UpstreamErrorType::Other(name)) = detail.upstream_error.as_mut() {
                text(name);
            }
            for field in [
                &mut detail.pending_tool,
                &mut detail.retry_refused,
                &mut detail.resume_hint,
                &mut detail.hint,
                &mut detail.signal,
            ] {
                maybe(field);
            }
        }
        self.warnings.iter_mut().for_each(text);
        for question in self.questions.iter_mut().flatten() {
            text(&mut question.question);
            question.options.iter_mut().for_each(text);
            maybe(&mut question.why);
        }
        if let Some(changes) = self.changes.as_mut() {
            changes.files.iter_mut().for_each(|f| text(&mut f.path));
            for ignored in changes.ignored.iter_mut().flat_map(|i| &mut i.paths) {
                text(&mut ignored.path);
            }
        }
        if let Some(diff) = self.diff.as_mut() {
            text(&mut diff.unified);
        }
        if let Some(verification) = self.verification.as_mut() {
            verification.redact(secrets);
        }
        if let Some(detail) = self.error_detail.as_mut() {
            detail.out_of_scope.iter_mut().flatten().for_each(text);
            detail.schema_errors.iter_mut().flatten().for_each(text);
            if let Some(provider) = detail.provider_error.as_mut() {
                maybe(&mut provider.code);
                maybe(&mut provider.retry_at);
            }
        }
        self.redact_reports(secrets);
        if let Some(repair) = self.schema_repair.as_mut() {
            repair.errors.iter_mut().for_each(text);
        }
        if let Some(value) = self.structured.as_mut() {
            secrets.redact_value(value);
        }
        for attempt in &mut self.attempts {
            attempt.tools.iter_mut().for_each(text);
            maybe(&mut attempt.retry);
        }
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.redact(secrets);
        }
        for message in self.all_messages.iter_mut().flatten() {
            if let Some(redacted) = secrets.redact_json_text(message.get())
                && let Ok(raw) = RawValue::from_string(redacted)
            {
                *message = raw;
            }
        }
    }

    /// The reports of what coder did around the run, whose texts come from the model (the
    /// fallback's files, named in its answer), the agent (the paths of git dirs it made)
    /// or git (a worktree's note).
    fn redact_reports(&mut self, secrets: &Secrets) {
        let text = |s: &mut String| secrets.redact_string(s);
        if let Some(fallback) = self.fallback.as_mut() {
            fallback.files.iter_mut().for_each(text);
            text(&mut fallback.why);
        }
        if let Some(guard) = self.sandbox.as_mut() {
            for moved in &mut guard.quarantined {
                text(&mut moved.path);
                text(&mut moved.to);
                moved.moved.iter_mut().for_each(text);
            }
            guard.incomplete.iter_mut().for_each(text);
        }
        if let Some(worktree) = self.worktree.as_mut() {
            text(&mut worktree.base_ref);
            worktree.note.iter_mut().for_each(text);
        }
        self.plan_file.iter_mut().for_each(text);
    }

    /// The envelope as one line of JSON.
    pub fn to_json_line(&self) -> String {
        match serde_json::to_string(self) {
            Ok(text) => text,
            // Serialising these types cannot fail (no maps with non-string keys, no custom
            // serialisers); still, never print nothing.
            Err(e) => format!(
                r#"{{"success":false,"tool":"coder","SESSION_ID":null,"error":"cannot serialise envelope: {}","error_kind":"unexpected_exception","error_detail":{{"message":"cannot serialise envelope","exit_code":null,"last_lines":[],"json_decode_errors":0,"idle_timeout_s":0,"max_duration_s":0,"retries":0}}}}"#,
                e.to_string().replace(['"', '\\'], "'")
            ),
        }
    }
}

/// How one attempt ended, as the envelope's `attempts[].outcome` names it: `success` or
/// the failure's error kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Success,
    Failed(ErrorKind),
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Success => "success",
            AttemptOutcome::Failed(kind) => kind.as_str(),
        }
    }
}

impl Serialize for AttemptOutcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One attempt, as listed in the envelope.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptSummary {
    pub attempt: u32,
    pub session_id: String,
    /// `success` or the failure's error kind.
    pub outcome: AttemptOutcome,
    pub duration_ms: u64,
    pub side_effects: SideEffectClass,
    pub tools: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What happened next: retried, or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_envelope_has_the_contract_fields_only() {
        let env = Envelope::success(Some("u".into()), "done".into());
        assert_eq!(
            env.to_json_line(),
            r#"{"success":true,"tool":"coder","SESSION_ID":"u","result":"done"}"#
        );
    }

    #[test]
    fn vendor_model_and_agent_texts_in_reports_are_redacted() {
        const KEY: &str = "zk-Tq81Lm9Xv2Pw7Rb4Hc6N";
        let planted = format!("x {KEY} ghp_H5jD8sF2kL0qW9eR4tY7uI1o");
        let mut env = Envelope::early_failure(ErrorKind::ConfigError, "bad");
        if let Some(detail) = env.error_detail.as_mut() {
            detail.provider_error = Some(crate::pipeline::provider::ProviderError {
                class: crate::pipeline::provider::ProviderClass::AuthError,
                provider: crate::pipeline::provider::Provider::Zai,
                code: Some(planted.clone()),
                http_status: Some(401),
                retryable: false,
                session_poisoned: false,
                retry_after_s: None,
                retry_at: Some(planted.clone()),
                action: crate::pipeline::provider::ProviderAction::Fail,
            });
        }
        env.fallback = Some(crate::pipeline::fallback::Fallback::new(
            crate::pipeline::fallback::Trigger::DiffInAnswer,
            vec![planted.clone()],
            false,
        ));
        env.sandbox = Some(crate::sandbox::gitguard::GuardReport {
            quarantined: vec![crate::sandbox::gitguard::Quarantined {
                path: planted.clone(),
                moved: vec![planted.clone()],
                to: planted.clone(),
                kind: crate::sandbox::gitguard::QuarantineKind::ToolConfig,
                after_checkout: Default::default(),
            }],
            incomplete: Some(planted.clone()),
            secrets_replaced: Vec::new(),
        });
        env.redact(&Secrets::new([KEY]));
        let line = env.to_json_line();
        assert!(!line.contains(&KEY[3..]), "{line}");
        assert!(!line.contains("H5jD8sF2"), "{line}");
        assert_eq!(line.matches("[REDACTED]").count(), 16, "{line}");
    }

    #[test]
    fn failure_envelope_always_has_error_detail_fields() {
        let env = Envelope::early_failure(ErrorKind::ConfigError, "bad --cd");
        let value: serde_json::Value = serde_json::from_str(&env.to_json_line()).unwrap();
        assert_eq!(value["error_kind"], "config_error");
        for key in [
            "message",
            "exit_code",
            "last_lines",
            "json_decode_errors",
            "idle_timeout_s",
            "max_duration_s",
            "retries",
        ] {
            assert!(
                value["error_detail"].get(key).is_some(),
                "missing error_detail.{key}"
            );
        }
        assert_eq!(env.exit_code, 78);
    }
}
