//! Provider errors: what an upstream failure *is* on the vendor behind the CLI, and what coder
//! does about it (DESIGN §12, `reference/provider-quirks.md` §5b).
//!
//! The CLI passes a vendor's error body to us only as text (`API Error: Request rejected
//! (429) · Usage limit reached … [1308]`), plus an HTTP status and its own coarse error class.
//! The status alone is misleading: Z.ai answers an exhausted quota, a fair-use throttle and a
//! real rate limit all with 429, and only the first of those may be retried. So this module
//! reads the text and classifies the failure into a [`ProviderClass`] by walking the rows of
//! §5b in the order the reference prescribes (fatal and poisoning classes first, so a 429
//! whose body says "balance" is never retried), then attaches the [`ProviderAction`] coder
//! takes. It is pure: no I/O, no clock other than the one passed in; the run pipeline
//! ([`crate::pipeline::run`]) acts on the result and the envelope reports it as
//! `error_detail.provider_error`.
//!
//! Hand-written matching instead of `regex`: the patterns are few and fixed, and coder does
//! not otherwise need the regex engine at run time.

use serde::Serialize;

pub use crate::config::Provider;
use crate::config::Workaround;
use crate::stream::UpstreamErrorType;

/// What went wrong upstream: one row (or a sub-row) of §5b.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderClass {
    /// Row 11: bad or missing key.
    AuthError,
    /// Row 11: the balance is used up (402, 1113, 1008).
    BillingError,
    /// Row 11: the plan expired or does not include the model (1309, 1311).
    PlanError,
    /// Row 9: Z.ai fair-use throttling (1313); retrying feeds its risk control.
    ProviderThrottled,
    /// Row 10: a usage quota is used up until a reset time (1308, 1310, 1316, 1317, 2056).
    QuotaExhausted,
    /// Row 12: the vendor does not know the model id (1211, "Unknown Model").
    ModelNotFound,
    /// Row 6: an image or document block the vendor cannot take; the session is poisoned.
    UnsupportedContent,
    /// Row 1: the vendor rejects `role:"system"` inside `messages` (CLI ≥ 2.1.154 sends it).
    SystemRole,
    /// Row 2: Anthropic's validator wants a thinking block before the tool use.
    ThinkingSchema,
    /// Row 3: DeepSeek wants its reasoning passed back.
    ThinkingRoundtrip,
    /// Row 4: DeepSeek rejects thinking disabled together with an effort (subagents).
    EffortConflict,
    /// Row 5: a server tool (WebSearch) the vendor rejects.
    UnsupportedTool,
    /// Row 7: MiniMax 2013 on a tool pair in the history.
    InvalidHistory,
    /// Row 13: the conversation is longer than the context window.
    ContextOverflow,
    /// Row 8: rate or concurrency limit; retry later.
    RateLimited,
    /// Row 14: 5xx without a quota code.
    ProviderUnavailable,
    /// Row 15: the connection failed.
    Network,
    /// None of the rows.
    Unknown,
}

/// What coder does about a provider error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderAction {
    /// Retried (within `--max-retries`, and only without side effects) after the vendor's
    /// backoff: `retry_after_s` when known.
    RetryWithBackoff,
    /// Not retried: the same request fails the same way, or retrying makes it worse.
    Fail,
    /// Not retried: the quota resets at `retry_at` (or the next window).
    WaitForReset,
    /// Not retried and never resumed: the session's history itself is rejected.
    NeverResume,
}

/// A changed setting (or a plain resume) coder applies to the next attempt after a provider
/// error, instead of giving up (§5b's "retry with a changed setting"). Each is applied at
/// most once per run; none is a blind retry of the same request, so none counts against
/// `--max-retries` or waits for `--max-retries` to allow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Remedy {
    /// `--bare` and `CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1`: no `role:"system"` message,
    /// no reminder blocks, tools inline (the CLI then offers Bash, Edit and Read only).
    CompatShape,
    /// `CLAUDE_CODE_DISABLE_THINKING=1`: the measured fix for the thinking-schema 400 (a
    /// resume with thinking on fails the same way).
    ThinkingOff,
    /// `--disallowedTools Task,Agent`: no subagent sends thinking disabled with an effort.
    NoSubagents,
    /// `--disallowedTools WebSearch,WebFetch`.
    NoWebTools,
    /// The session resumed as it was.
    ResumeOnce,
}

impl Remedy {
    /// The remedy for a class, if it has one.
    pub fn for_class(class: ProviderClass) -> Option<Remedy> {
        Some(match class {
            ProviderClass::SystemRole => Remedy::CompatShape,
            ProviderClass::ThinkingSchema | ProviderClass::ThinkingRoundtrip => Remedy::ThinkingOff,
            ProviderClass::EffortConflict => Remedy::NoSubagents,
            ProviderClass::UnsupportedTool => Remedy::NoWebTools,
            ProviderClass::InvalidHistory => Remedy::ResumeOnce,
            _ => return None,
        })
    }

    /// What the remedy changes in the CLI's arguments and environment.
    pub fn cli_changes(
        self,
    ) -> (
        &'static [&'static str],
        &'static [(&'static str, &'static str)],
    ) {
        match self {
            Remedy::CompatShape => (
                &["--bare"],
                &[("CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS", "1")],
            ),
            Remedy::ThinkingOff => (&[], &[("CLAUDE_CODE_DISABLE_THINKING", "1")]),
            Remedy::NoSubagents => (&["--disallowedTools", "Task,Agent"], &[]),
            Remedy::NoWebTools => (&["--disallowedTools", "WebSearch,WebFetch"], &[]),
            Remedy::ResumeOnce => (&[], &[]),
        }
    }

    /// The `applied_workarounds` entry this remedy amounts to (a plain resume changes no
    /// setting).
    pub fn workaround(self) -> Option<Workaround> {
        Some(match self {
            Remedy::CompatShape => Workaround::CompatShape,
            Remedy::ThinkingOff => Workaround::ThinkingOff,
            Remedy::NoSubagents => Workaround::SubagentsDisallowed,
            Remedy::NoWebTools => Workaround::WebToolsDisallowed,
            Remedy::ResumeOnce => return None,
        })
    }

    /// What coder does, in words (attempt notes, the transcript).
    pub fn describe(self) -> &'static str {
        match self {
            Remedy::CompatShape => {
                "switched the backend to the compat request shape (--bare, experimental betas off)"
            }
            Remedy::ThinkingOff => "resumed with extended thinking off",
            Remedy::NoSubagents => "resumed with subagents disallowed",
            Remedy::NoWebTools => "resumed with WebSearch and WebFetch disallowed",
            Remedy::ResumeOnce => "resumed the session once",
        }
    }

    /// The prompt of a resumed attempt: the model learns why its turn was cut short.
    pub fn nudge(self, class: ProviderClass) -> String {
        format!(
            "The provider rejected the last request ({}); coder changed the request and \
             resumed the session. Continue the task from where it stopped.",
            class_name(class)
        )
    }

    /// The failure when the same class comes back after the remedy: what coder tried.
    pub fn exhausted(self) -> &'static str {
        match self {
            Remedy::CompatShape => {
                "the vendor rejects Claude Code's request shape even in compat mode (--bare, experimental betas off); use a proxy that hoists system messages, or pin an older CLI"
            }
            Remedy::ThinkingOff => "it failed again with extended thinking off",
            Remedy::NoSubagents => "it failed again with subagents disallowed",
            Remedy::NoWebTools => "it failed again with WebSearch and WebFetch disallowed",
            Remedy::ResumeOnce => {
                "it failed again after one resume: the session's history is broken for this vendor (session poisoned)"
            }
        }
    }
}

/// Row 16: a run that succeeded although a feature quietly failed on the vendor (an image
/// the model never saw, a web search that found nothing): a warning naming the likely
/// cause, from the result text.
pub fn degraded(result: &str) -> Option<String> {
    const IMAGE: [&str; 6] = [
        "can't see the image",
        "cannot see the image",
        "unable to see the image",
        "can't view the image",
        "cannot view the image",
        "unable to view the image",
    ];
    let lower = result.to_ascii_lowercase().replace('’', "'");
    if IMAGE.iter().any(|p| lower.contains(p)) {
        return Some(
            "degraded: the answer says the model could not see an image; this backend's \
             model may not take images (they reach it as nothing): describe the image in \
             text or use a vision model"
                .to_owned(),
        );
    }
    if lower.contains("did 0 searches") {
        return Some(
            "degraded: the web search found nothing (\"Did 0 searches\"): this backend does \
             not run Anthropic's server-side search; configure the vendor's MCP search server"
                .to_owned(),
        );
    }
    None
}

/// Marks `error` as what it is after `remedy` was applied and the same class came back:
/// not retried, and for a broken tool pair the session poisoned.
pub fn after_remedy_failed(error: &mut ProviderError, remedy: Remedy) {
    error.retryable = false;
    error.action = ProviderAction::Fail;
    if remedy == Remedy::ResumeOnce {
        error.session_poisoned = true;
        error.action = ProviderAction::NeverResume;
    }
}

/// `error_detail.provider_error`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderError {
    pub class: ProviderClass,
    pub provider: Provider,
    /// The vendor's own error code (`1308`, `2013`), when the text carries one.
    pub code: Option<String>,
    pub http_status: Option<u16>,
    pub retryable: bool,
    pub session_poisoned: bool,
    /// Seconds to wait before a retry, when known (from the text, or the vendor's backoff).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<f64>,
    /// When a quota resets, RFC 3339 UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
    pub action: ProviderAction,
}

/// What the stream showed about one upstream failure.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signals<'a> {
    /// `api_error_status`, the synthetic message's status or the last `api_retry` status.
    pub status: Option<u16>,
    /// The CLI's own error class.
    pub cli_error: Option<&'a UpstreamErrorType>,
    /// The result text (`API Error: …`) or the synthetic assistant's text.
    pub text: &'a str,
    /// The last tool the model called before the failure.
    pub last_tool: Option<&'a str>,
    /// Who serves the API, as the backend says (its `provider`, else its base URL);
    /// `None` or `Other`: read from the error's text.
    pub provider: Option<Provider>,
}

/// Classifies an upstream failure (§5b, evaluated in the reference's order:
/// 11 → 9 → 10 → 12 → 6 → 1 → 2 → 3 → 4 → 5 → 7 → 13 → 8 → 14 → 15).
pub fn classify(signals: &Signals<'_>) -> ProviderError {
    let text = signals.text;
    let lower = text.to_ascii_lowercase();
    let status = signals.status.or_else(|| status_in_text(&lower));
    let provider = match signals.provider {
        None | Some(Provider::Other) => provider_from_text(&lower),
        Some(known) => known,
    };
    let class = class_of(status, signals.cli_error, &lower, signals.last_tool);
    let mut error = ProviderError {
        class,
        provider,
        code: vendor_code(&lower),
        http_status: status,
        retryable: false,
        session_poisoned: false,
        retry_after_s: None,
        retry_at: None,
        action: ProviderAction::Fail,
    };
    match class {
        ProviderClass::RateLimited => {
            error.retryable = true;
            error.action = ProviderAction::RetryWithBackoff;
            error.retry_after_s = retry_after_in_text(&lower).or(match provider {
                // No Retry-After header from these vendors, and blind fast retries feed
                // Z.ai's risk control: the reference's 30 s first step.
                Provider::Zai | Provider::Minimax | Provider::Deepseek => Some(30.0),
                Provider::Anthropic | Provider::Other => None,
            });
        }
        ProviderClass::ProviderUnavailable | ProviderClass::Network => {
            error.retryable = true;
            error.action = ProviderAction::RetryWithBackoff;
            error.retry_after_s = retry_after_in_text(&lower);
        }
        ProviderClass::QuotaExhausted => {
            error.action = ProviderAction::WaitForReset;
            error.retry_at = reset_time(text, provider);
        }
        ProviderClass::UnsupportedContent => {
            error.session_poisoned = true;
            error.action = ProviderAction::NeverResume;
        }
        ProviderClass::Unknown => {
            error.retryable = matches!(status, Some(429 | 529 | 500..=599))
                || (status.is_none()
                    && matches!(
                        signals.cli_error,
                        Some(UpstreamErrorType::ServerError | UpstreamErrorType::Overloaded)
                    ));
            if error.retryable {
                error.action = ProviderAction::RetryWithBackoff;
            }
        }
        _ => {}
    }
    error
}

/// Classifies a failure the outcome step marked `upstream_error`.
pub fn classify_failure(
    failure: &crate::pipeline::outcome::Failure,
    provider: Provider,
) -> ProviderError {
    classify(&Signals {
        status: failure.http_status,
        cli_error: failure.upstream_error.as_ref(),
        text: &failure.message,
        last_tool: None,
        provider: Some(provider),
    })
}

/// Rate limits are retried at most this many times, whatever `--max-retries` says: more
/// only hammers a vendor that has said no (Z.ai's risk control counts it).
pub const MAX_RATE_LIMIT_RETRIES: u32 = 3;

/// The longest coder waits before retrying a rate-limited request.
const MAX_RATE_LIMIT_WAIT_S: f64 = 300.0;

/// Why this provider error is not retried, when its class forbids it; `None` leaves the
/// decision to the general rules (`retry::decide`).
pub fn refuse_retry(error: &ProviderError, retries_done: u32) -> Option<String> {
    let why = match error.class {
        ProviderClass::QuotaExhausted => match &error.retry_at {
            Some(at) => format!("the provider's usage quota is used up until {at}; coder never retries it"),
            None => "the provider's usage quota is used up (until the next window); coder never retries it".to_owned(),
        },
        ProviderClass::ProviderThrottled => {
            "the provider is throttling this key for fair use; retrying would make it worse".to_owned()
        }
        ProviderClass::AuthError => "the provider refused the key (authentication); a retry fails the same way".to_owned(),
        ProviderClass::BillingError => "the provider's balance is used up; a retry fails the same way".to_owned(),
        ProviderClass::PlanError => "the provider's plan does not allow this request; a retry fails the same way".to_owned(),
        ProviderClass::UnsupportedContent => {
            "the session holds content the provider rejects (session poisoned); it is never retried or resumed".to_owned()
        }
        ProviderClass::RateLimited if retries_done >= MAX_RATE_LIMIT_RETRIES => format!(
            "rate limited after {retries_done} retries; coder stops at {MAX_RATE_LIMIT_RETRIES} for rate limits"
        ),
        _ if !error.retryable => {
            format!("{} from the provider is not transient", class_name(error.class))
        }
        _ => return None,
    };
    Some(match error.http_status {
        Some(status) => format!("HTTP {status}: {why}"),
        None => why,
    })
}

/// The wait before retry number `retries_done + 1`: the vendor's own figure when the text
/// gave one, else for rate limits the vendor backoff (30 s, 60 s, 120 s, capped at 5 min);
/// `None` means the standard backoff.
pub fn retry_delay(error: &ProviderError, retries_done: u32) -> Option<std::time::Duration> {
    let base = error.retry_after_s?;
    let seconds = if error.class == ProviderClass::RateLimited && base >= 30.0 {
        base * f64::from(1u32 << retries_done.min(4))
    } else {
        base
    };
    Some(std::time::Duration::from_secs_f64(
        seconds.min(MAX_RATE_LIMIT_WAIT_S),
    ))
}

/// The class as the envelope spells it.
pub fn class_name(class: ProviderClass) -> String {
    serde_json::to_value(class)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The class of an upstream error from its HTTP status, the CLI's error type, its text
/// (lower-cased) and the last tool called: the rows of `provider-quirks.md`'s table, in
/// its order of precedence (the account first, then the request's shape, then what is
/// transient).
fn class_of(
    status: Option<u16>,
    cli_error: Option<&UpstreamErrorType>,
    lower: &str,
    last_tool: Option<&str>,
) -> ProviderClass {
    account_class(status, cli_error, lower)
        .or_else(|| request_class(status, lower, last_tool))
        .or_else(|| transient_class(status, cli_error, lower))
        .unwrap_or(ProviderClass::Unknown)
}

/// Rows 9 to 12 and the account's own errors: plan, balance, key, fair use, quota, model.
fn account_class(
    status: Option<u16>,
    cli_error: Option<&UpstreamErrorType>,
    lower: &str,
) -> Option<ProviderClass> {
    // Row 11.
    if any_code(lower, &["1309", "1311"]) || (lower.contains("plan") && lower.contains("expired")) {
        return Some(ProviderClass::PlanError);
    }
    if status == Some(402)
        || any_code(lower, &["1113", "1008"])
        || lower.contains("insufficient balance")
    {
        return Some(ProviderClass::BillingError);
    }
    if matches!(status, Some(401 | 403))
        || any_code(lower, &["1004", "2049"])
        || lower.contains("not authorized")
        || cli_error == Some(&UpstreamErrorType::AuthenticationFailed)
    {
        return Some(ProviderClass::AuthError);
    }
    // Row 9.
    if any_code(lower, &["1313"]) || lower.contains("fair use") || lower.contains("fair-use") {
        return Some(ProviderClass::ProviderThrottled);
    }
    // Row 10.
    if any_code(lower, &["1308", "1310", "1316", "1317", "2056"])
        || lower.contains("usage limit")
        || lower.contains("limit exhausted")
    {
        return Some(ProviderClass::QuotaExhausted);
    }
    // Row 12.
    if any_code(lower, &["1211"])
        || ["unknown model", "model not found", "invalid model"]
            .iter()
            .any(|m| lower.contains(m))
        || cli_error == Some(&UpstreamErrorType::ModelNotFound)
    {
        return Some(ProviderClass::ModelNotFound);
    }
    None
}

/// Rows 1 to 7: what the request carried that this vendor refuses (content, a system
/// role, thinking blocks, effort, a tool, a broken history).
fn request_class(
    status: Option<u16>,
    lower: &str,
    last_tool: Option<&str>,
) -> Option<ProviderClass> {
    let bad_request = matches!(status, None | Some(400 | 422));
    // Row 6.
    let content =
        (lower.contains("image") || lower.contains("document")) && lower.contains("not support");
    if (bad_request && (content || any_code(lower, &["1210"])))
        || (content && status.is_none_or(|s| s < 500))
    {
        return Some(ProviderClass::UnsupportedContent);
    }
    // Row 1.
    if bad_request
        && [
            "unknown variant `system`",
            "unknown variant system",
            "input should be 'user' or 'assistant'",
            "invalid message role: system",
            "role must be either 'user' or 'assistant'",
        ]
        .iter()
        .any(|m| lower.contains(m))
    {
        return Some(ProviderClass::SystemRole);
    }
    // Row 2.
    if lower.contains("redacted_thinking") && lower.contains("but found") {
        return Some(ProviderClass::ThinkingSchema);
    }
    // Row 3.
    if lower.contains("missing reasoning_content")
        || ((lower.contains("reasoning_content") || lower.contains("content[].thinking"))
            && lower.contains("must be passed back"))
    {
        return Some(ProviderClass::ThinkingRoundtrip);
    }
    // Row 4.
    if lower.contains("thinking options type cannot be disabled when reasoning_effort") {
        return Some(ProviderClass::EffortConflict);
    }
    // Row 5.
    let web_tool = last_tool.is_some_and(|t| t == "WebSearch" || t == "WebFetch");
    if bad_request
        && (has_web_search_tool_type(lower)
            || (lower.contains("input_schema") && lower.contains("web_search"))
            || (web_tool && lower.contains("tool_choice")))
    {
        return Some(ProviderClass::UnsupportedTool);
    }
    // Row 7.
    if any_code(lower, &["2013"])
        && (lower.contains("tool call result does not follow")
            || (lower.contains("tool id(") && lower.contains("not found"))
            || lower.contains("invalid function arguments json"))
    {
        return Some(ProviderClass::InvalidHistory);
    }
    None
}

/// Rows 13 to 15: the context overflowing, rate limits, the vendor down, the network.
fn transient_class(
    status: Option<u16>,
    cli_error: Option<&UpstreamErrorType>,
    lower: &str,
) -> Option<ProviderClass> {
    // Row 13.
    if crate::pipeline::outcome::is_context_overflow(lower) {
        return Some(ProviderClass::ContextOverflow);
    }
    // Row 8.
    let busy = any_code(
        lower,
        &["1302", "1303", "1305", "1312", "1002", "1041", "2045"],
    ) || ["concurrency", "rate limit", "overloaded"]
        .iter()
        .any(|m| lower.contains(m));
    if matches!(status, Some(429))
        || (matches!(status, None | Some(529)) && busy)
        || matches!(
            cli_error,
            Some(UpstreamErrorType::RateLimit | UpstreamErrorType::Overloaded)
        ) && status.is_none_or(|s| s == 429 || s == 529)
    {
        return Some(ProviderClass::RateLimited);
    }
    // Row 14.
    if status.is_some_and(|s| (500..600).contains(&s))
        || cli_error == Some(&UpstreamErrorType::ServerError) && status.is_some()
        || ["internal server error", "server overloaded"]
            .iter()
            .any(|m| lower.contains(m))
    {
        return Some(ProviderClass::ProviderUnavailable);
    }
    // Row 15.
    if [
        "connection closed mid-response",
        "econnreset",
        "econnrefused",
        "stream idle",
        "request timed out",
        "empty or malformed response",
        "socket hang up",
        "connection error",
    ]
    .iter()
    .any(|m| lower.contains(m))
        || (status.is_none() && cli_error == Some(&UpstreamErrorType::ServerError))
    {
        return Some(ProviderClass::Network);
    }
    None
}

/// What the user can do about a class coder does not act on by itself.
pub fn hint(error: &ProviderError) -> Option<String> {
    let text = match error.class {
        ProviderClass::AuthError => {
            "check the backend's API key variable and base URL (coder doctor); a 401 is never retried"
        }
        ProviderClass::BillingError => "recharge the account: its balance is used up",
        ProviderClass::PlanError => {
            "the plan expired or does not include this model; check the plan or pick a model it includes"
        }
        ProviderClass::ProviderThrottled => {
            "the vendor is throttling this key for fair use; retrying makes it worse (risk control can end in a ban): wait, and lower the request rate"
        }
        ProviderClass::QuotaExhausted => return Some(quota_hint(error.retry_at.as_deref())),
        ProviderClass::ModelNotFound => {
            "the vendor does not know a model id: set every slot (model, opus, sonnet, haiku, subagent) in the backend profile"
        }
        ProviderClass::UnsupportedContent => {
            "the vendor cannot read an image or document block; the session now holds one and cannot be resumed: start a new session without it"
        }
        ProviderClass::SystemRole => {
            "the vendor rejects the request shape of Claude Code ≥ 2.1.154 (role \"system\" in messages): use a hoisting proxy, or run the CLI with --bare and CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1"
        }
        ProviderClass::ThinkingSchema => {
            "a thinking block was lost on the way (a proxy?): resume the session with a new prompt, or set CLAUDE_CODE_DISABLE_THINKING=1"
        }
        ProviderClass::ThinkingRoundtrip => {
            "the vendor wants its reasoning passed back: resume with CLAUDE_CODE_DISABLE_THINKING=1"
        }
        ProviderClass::EffortConflict => {
            "a subagent sent thinking disabled with an effort level: resume with --disallowedTools Task"
        }
        ProviderClass::UnsupportedTool => {
            "the vendor rejects the web search server tool: disallow WebSearch/WebFetch and use the vendor's MCP search"
        }
        ProviderClass::InvalidHistory => {
            "the vendor rejects a tool call pair in the history: resume once; if it fails again, start a new session"
        }
        ProviderClass::ContextOverflow => {
            "shorten the task or its documents, or start a fresh session instead of resuming"
        }
        ProviderClass::RateLimited
        | ProviderClass::ProviderUnavailable
        | ProviderClass::Network
        | ProviderClass::Unknown => return None,
    };
    Some(text.to_owned())
}

/// What to check when backend `name` rejects its key (401/403): the key it sent (the
/// variable that holds it) and where it sent it, and the doctor command for that backend.
/// It said "check the backend's API key variable and base URL", naming neither.
pub fn auth_hint(
    name: &str,
    source: Option<&crate::config::KeySource>,
    base_url: Option<&str>,
) -> String {
    use crate::config::KeySource;
    let to = base_url.map(|url| format!(" to {url}")).unwrap_or_default();
    let doctor = format!("coder doctor --backend {}", crate::text::shell_quote(name));
    let key = match source {
        Some(KeySource::Replay) => {
            return format!(
                "the replay cassette of backend '{name}' answered with an auth error (a \
                 replay backend sends a dummy token and checks none)"
            );
        }
        Some(KeySource::Variable(var)) => format!("the key in ${var}"),
        Some(KeySource::ConfigFile) => "the key in the config file (api_key)".to_owned(),
        None => "the caller's own key (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, \
                 CLAUDE_CODE_OAUTH_TOKEN, or the claude login)"
            .to_owned(),
    };
    format!(
        "backend '{name}' sent {key}{to}, and the vendor refused it: check that it is this \
         vendor's key, valid, and for this base URL ({doctor}); a 401 is never retried"
    )
}

/// A used-up quota's hint, with the reset time when the vendor gave one: "after
/// retry_at" sent the user looking for the field.
fn quota_hint(retry_at: Option<&str>) -> String {
    match retry_at {
        Some(at) => format!(
            "the usage quota is used up until {at} (provider_error.retry_at): run again \
             then, or on another backend (--backend NAME or --backend auto)"
        ),
        None => "the usage quota is used up: run again when it resets (the vendor did not \
                 say when; Z.ai's quotas are per 5 hours), or on another backend \
                 (--backend NAME or --backend auto)"
            .to_owned(),
    }
}

/// Whether `code` occurs in `lower` as a whole number (no digit on either side).
fn has_code(lower: &str, code: &str) -> bool {
    lower.match_indices(code).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

fn any_code(lower: &str, codes: &[&str]) -> bool {
    codes.iter().any(|code| has_code(lower, code))
}

/// `web_search_<digits>` (the server tool's type).
fn has_web_search_tool_type(lower: &str) -> bool {
    lower.match_indices("web_search_").any(|(at, m)| {
        lower[at + m.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// Every vendor error code coder knows (Z.ai, MiniMax).
const VENDOR_CODES: &[&str] = &[
    "1113", "1210", "1211", "1214", "1261", "1301", "1302", "1303", "1304", "1305", "1308", "1309",
    "1310", "1311", "1312", "1313", "1316", "1317", "1000", "1001", "1002", "1004", "1008", "1024",
    "1026", "1027", "1033", "1039", "1041", "2013", "2045", "2049", "2056",
];

/// The vendor code in an error text, in the forms the vendors write it: `"code":"1302"`,
/// `"code":1302`, `[1305]`, `(2013)`.
fn vendor_code(lower: &str) -> Option<String> {
    let wrapped = |code: &str| {
        [
            format!("\"code\":\"{code}\""),
            format!("\"code\": \"{code}\""),
            format!("\"code\":{code}"),
            format!("[{code}]"),
            format!("({code})"),
        ]
        .iter()
        .any(|form| lower.contains(form.as_str()))
    };
    VENDOR_CODES
        .iter()
        .find(|code| wrapped(code))
        .map(|code| (*code).to_owned())
}

/// A status the CLI wrote into its text: `API Error: 429 …` or `Request rejected (429)`.
fn status_in_text(lower: &str) -> Option<u16> {
    let after = |marker: &str| {
        lower.find(marker).and_then(|at| {
            let digits: String = lower[at + marker.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits
                .parse::<u16>()
                .ok()
                .filter(|s| (400..600).contains(s))
        })
    };
    after("api error: ").or_else(|| after("request rejected ("))
}

/// Guesses the vendor from the shape of its error (for proxies and replay servers).
fn provider_from_text(lower: &str) -> Provider {
    let zai_codes = [
        "1113", "1210", "1211", "1261", "1302", "1303", "1305", "1308", "1309", "1310", "1311",
        "1312", "1313", "1316", "1317",
    ];
    let minimax_codes = ["2013", "2045", "2049", "2056", "1002", "1008", "1041"];
    match vendor_code(lower) {
        Some(code) if zai_codes.contains(&code.as_str()) => Provider::Zai,
        Some(code) if minimax_codes.contains(&code.as_str()) => Provider::Minimax,
        _ if lower.contains("reasoning_content") || lower.contains("insufficient balance") => {
            Provider::Deepseek
        }
        _ => Provider::Other,
    }
}

/// `retry after 12 s`, `retry-after: 12`, `try again in 12s`, `retry in 12 seconds`.
fn retry_after_in_text(lower: &str) -> Option<f64> {
    [
        "retry after ",
        "retry-after: ",
        "try again in ",
        "retry in ",
    ]
    .iter()
    .find_map(|marker| {
        let at = lower.find(marker)?;
        let number: String = lower[at + marker.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        number.parse::<f64>().ok().filter(|s| *s >= 0.0)
    })
}

/// The reset time in a quota message (`… will reset at 2026-11-24 03:00:00`, or a
/// `next_flush_time`), as RFC 3339 UTC. Without a zone the time is the vendor's local time
/// (Beijing, UTC+8, for the Chinese vendors).
fn reset_time(text: &str, provider: Provider) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let start = ["reset at ", "resets at ", "next_flush_time"]
        .iter()
        .find_map(|m| lower.find(m).map(|at| at + m.len()))?;
    let rest = &text[start..];
    let first_digit = rest.find(|c: char| c.is_ascii_digit())?;
    if first_digit > 4 {
        return None;
    }
    parse_local_datetime(&rest[first_digit..], provider.local_offset_hours())
}

/// `YYYY-MM-DD[ T]HH:MM[:SS]` with an optional `Z` or `±HH:MM`, else `default_offset_h`.
fn parse_local_datetime(s: &str, default_offset_h: i64) -> Option<String> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') || !matches!(b.get(10), Some(b' ' | b'T'))
    {
        return None;
    }
    let (hour, minute) = (num(11, 2)?, num(14, 2)?);
    let (second, mut at) = if b.get(16) == Some(&b':') {
        (num(17, 2)?, 19)
    } else {
        (0, 16)
    };
    if at < b.len() && b[at] == b'.' {
        at += 1;
        while at < b.len() && b[at].is_ascii_digit() {
            at += 1;
        }
    }
    let offset_min = match b.get(at) {
        Some(b'Z' | b'z') => 0,
        Some(sign @ (b'+' | b'-')) => {
            let minutes = num(at + 1, 2)? * 60 + num(at + 4, 2)?;
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => default_offset_h * 60,
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(format_utc(local - offset_min * 60))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn format_utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProviderAction as A;
    use ProviderClass as C;

    /// Through a loopback proxy, as in the replay tests: the provider comes from the text.
    fn text(status: Option<u16>, text: &str) -> ProviderError {
        classify(&Signals {
            status,
            text,
            provider: Some(Provider::from_base_url(Some("http://127.0.0.1:3456"))),
            ..Signals::default()
        })
    }

    /// Every row of §5b, with texts from the reference (vendor docs and issues).
    #[test]
    fn every_row_of_the_table() {
        let zai_429 = "API Error: Request rejected (429) · Usage limit reached for 5 hour. Your limit will reset at 2026-11-24 03:00:00";
        type Row<'a> = (&'a str, Option<u16>, &'a str, C, A, bool, bool);
        let cases: &[Row<'_>] = &[
            // (row, status, text, class, action, retryable, poisoned)
            (
                "11 401",
                Some(401),
                "API Error: 401 {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}",
                C::AuthError,
                A::Fail,
                false,
                false,
            ),
            (
                "11 402",
                Some(402),
                "API Error: 402 Insufficient Balance",
                C::BillingError,
                A::Fail,
                false,
                false,
            ),
            (
                "11 429 balance",
                Some(429),
                "API Error: 429 {\"error\":{\"code\":\"1113\",\"message\":\"Insufficient balance or no resource package. Please recharge.\"}}",
                C::BillingError,
                A::Fail,
                false,
                false,
            ),
            (
                "11 1311",
                Some(429),
                "API Error: 429 {\"error\":{\"code\":\"1311\",\"message\":\"The current subscription plan does not include access to this model\"}}",
                C::PlanError,
                A::Fail,
                false,
                false,
            ),
            (
                "11 minimax 2049",
                Some(401),
                "API Error: 401 invalid api key (2049)",
                C::AuthError,
                A::Fail,
                false,
                false,
            ),
            (
                "9 1313",
                Some(429),
                "API Error: 429 {\"error\":{\"code\":\"1313\",\"message\":\"Your account is subject to fair use throttling\"}}",
                C::ProviderThrottled,
                A::Fail,
                false,
                false,
            ),
            (
                "10 1308",
                Some(429),
                "API Error: 429 {\"error\":{\"code\":\"1308\",\"message\":\"Usage limit reached for 5 hour. Your limit will reset at 2026-11-24 03:00:00\"}}",
                C::QuotaExhausted,
                A::WaitForReset,
                false,
                false,
            ),
            (
                "10 text only",
                None,
                zai_429,
                C::QuotaExhausted,
                A::WaitForReset,
                false,
                false,
            ),
            (
                "10 minimax 2056",
                Some(429),
                "API Error: 429 usage limit exceeded (2056)",
                C::QuotaExhausted,
                A::WaitForReset,
                false,
                false,
            ),
            (
                "12 1211",
                Some(400),
                "API Error: 400 {\"error\":{\"code\":\"1211\",\"message\":\"Unknown Model, please check the model code.\"}}",
                C::ModelNotFound,
                A::Fail,
                false,
                false,
            ),
            (
                "12 invalid model",
                Some(400),
                "API Error: 400 model: invalid model name 'glm-4.7'",
                C::ModelNotFound,
                A::Fail,
                false,
                false,
            ),
            (
                "6 1210",
                Some(400),
                "API Error: 400 {\"error\":{\"code\":\"1210\",\"message\":\"Invalid API parameter, please check the documentation.\"}}",
                C::UnsupportedContent,
                A::NeverResume,
                false,
                true,
            ),
            (
                "6 images",
                Some(400),
                "API Error: 400 image blocks are not supported",
                C::UnsupportedContent,
                A::NeverResume,
                false,
                true,
            ),
            (
                "1 zai 422",
                Some(422),
                "API Error: 422 {\"detail\":[{\"type\":\"literal_error\",\"loc\":[\"body\",\"messages\",1,\"role\"],\"msg\":\"Input should be 'user' or 'assistant'\"}]}",
                C::SystemRole,
                A::Fail,
                false,
                false,
            ),
            (
                "1 deepseek",
                Some(400),
                "API Error: 400 Failed to deserialize the JSON body into the target type: messages[1].role: unknown variant `system`, expected `user` or `assistant`",
                C::SystemRole,
                A::Fail,
                false,
                false,
            ),
            (
                "1 minimax",
                Some(400),
                "API Error: 400 invalid params, chat content has invalid message role: system (2013)",
                C::SystemRole,
                A::Fail,
                false,
                false,
            ),
            (
                "2",
                Some(400),
                "API Error: 400 messages.3.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block",
                C::ThinkingSchema,
                A::Fail,
                false,
                false,
            ),
            (
                "3",
                Some(400),
                "API Error: 400 The content[].thinking in the thinking mode must be passed back to the API",
                C::ThinkingRoundtrip,
                A::Fail,
                false,
                false,
            ),
            (
                "3b",
                Some(400),
                "API Error: 400 Missing reasoning_content field in the assistant message at message index 3",
                C::ThinkingRoundtrip,
                A::Fail,
                false,
                false,
            ),
            (
                "4",
                Some(400),
                "API Error: 400 thinking options type cannot be disabled when reasoning_effort is set",
                C::EffortConflict,
                A::Fail,
                false,
                false,
            ),
            (
                "5",
                Some(422),
                "API Error: 422 {\"detail\":[{\"loc\":[\"body\",\"tools\",0,\"input_schema\"],\"msg\":\"Field required\",\"input\":{\"type\":\"web_search_20250305\"}}]}",
                C::UnsupportedTool,
                A::Fail,
                false,
                false,
            ),
            (
                "7",
                Some(400),
                "API Error: 400 invalid params, tool result's tool id(call_function_x_1) not found (2013)",
                C::InvalidHistory,
                A::Fail,
                false,
                false,
            ),
            (
                "13",
                Some(400),
                "API Error: 400 {\"error\":{\"code\":\"1261\",\"message\":\"Prompt exceeds max length\"}}",
                C::ContextOverflow,
                A::Fail,
                false,
                false,
            ),
            (
                "13b",
                Some(400),
                "API Error: 400 prompt is too long: 210000 tokens > 200000 maximum",
                C::ContextOverflow,
                A::Fail,
                false,
                false,
            ),
            (
                "8 1302",
                Some(429),
                "API Error: 429 {\"error\":{\"code\":\"1302\",\"message\":\"High concurrency usage of this API, please reduce concurrency or contact customer service to increase limits\"}}",
                C::RateLimited,
                A::RetryWithBackoff,
                true,
                false,
            ),
            (
                "8 1305",
                Some(529),
                "API Error: 529 [1305][The service may be temporarily overloaded, please try again later][trace-id]",
                C::RateLimited,
                A::RetryWithBackoff,
                true,
                false,
            ),
            (
                "8 plain 429",
                Some(429),
                "API Error: Request rejected (429) · Rate limit reached for requests",
                C::RateLimited,
                A::RetryWithBackoff,
                true,
                false,
            ),
            (
                "14",
                Some(500),
                "API Error: 500 {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}",
                C::ProviderUnavailable,
                A::RetryWithBackoff,
                true,
                false,
            ),
            (
                "14 503",
                Some(503),
                "API Error: 503 Server Overloaded",
                C::ProviderUnavailable,
                A::RetryWithBackoff,
                true,
                false,
            ),
            (
                "15",
                None,
                "API Error: Connection closed mid-response",
                C::Network,
                A::RetryWithBackoff,
                true,
                false,
            ),
            (
                "15b",
                None,
                "API Error: Connection error. (ECONNREFUSED)",
                C::Network,
                A::RetryWithBackoff,
                true,
                false,
            ),
            (
                "unknown 418",
                Some(418),
                "API Error: 418 teapot",
                C::Unknown,
                A::Fail,
                false,
                false,
            ),
        ];
        for (row, status, body, class, action, retryable, poisoned) in cases {
            let e = text(*status, body);
            assert_eq!(e.class, *class, "row {row}: {body}");
            assert_eq!(e.action, *action, "row {row}");
            assert_eq!(e.retryable, *retryable, "row {row}");
            assert_eq!(e.session_poisoned, *poisoned, "row {row}");
        }
    }

    #[test]
    fn a_429_that_says_balance_or_quota_is_not_retried() {
        for body in [
            "API Error: 429 Insufficient Balance",
            "API Error: Request rejected (429) · Usage limit reached … will reset at 2026-11-24 03:00:00",
            "API Error: 429 [1313] fair use",
        ] {
            assert!(!text(Some(429), body).retryable, "{body}");
        }
    }

    #[test]
    fn text_alone_gives_status_code_provider_and_reset_time() {
        let e = text(
            None,
            "API Error: Request rejected (429) · Usage limit reached for 5 hour. Your limit will reset at 2026-11-24 03:00:00",
        );
        assert_eq!(e.http_status, Some(429));
        assert_eq!(e.class, C::QuotaExhausted);
        // Beijing time is UTC+8.
        assert_eq!(e.retry_at.as_deref(), Some("2026-11-23T19:00:00Z"));
        let e = text(
            Some(429),
            r#"API Error: 429 {"error":{"code":"1308","message":"Usage limit reached for 5 hour. Your limit will reset at 2026-01-01 05:30:00"}}"#,
        );
        assert_eq!(e.code.as_deref(), Some("1308"));
        assert_eq!(e.provider, Provider::Zai);
        assert_eq!(e.retry_at.as_deref(), Some("2025-12-31T21:30:00Z"));
        let e = text(
            Some(400),
            "API Error: 400 invalid params (2013) tool call result does not follow tool call",
        );
        assert_eq!(
            (e.code.as_deref(), e.provider),
            (Some("2013"), Provider::Minimax)
        );
    }

    #[test]
    fn reset_times_with_zones_and_without_one() {
        assert_eq!(
            parse_local_datetime("2026-03-01T00:00:00Z", 8).as_deref(),
            Some("2026-03-01T00:00:00Z")
        );
        assert_eq!(
            parse_local_datetime("2026-03-01 07:15:00+08:00]", 0).as_deref(),
            Some("2026-02-28T23:15:00Z")
        );
        assert_eq!(
            parse_local_datetime("2024-03-01 01:00", 8).as_deref(),
            Some("2024-02-29T17:00:00Z"),
            "leap day"
        );
        assert_eq!(parse_local_datetime("tomorrow", 8), None);
        assert_eq!(parse_local_datetime("2026-13-01 00:00:00", 8), None);
        assert_eq!(reset_time("usage limit exceeded", Provider::Zai), None);
    }

    #[test]
    fn rate_limits_carry_the_vendor_backoff() {
        let e = text(
            Some(429),
            "API Error: 429 [1302] concurrency, retry after 7 s",
        );
        assert_eq!(e.retry_after_s, Some(7.0));
        let e = text(Some(429), "API Error: 429 {\"error\":{\"code\":\"1302\"}}");
        assert_eq!((e.provider, e.retry_after_s), (Provider::Zai, Some(30.0)));
        let anthropic = classify(&Signals {
            status: Some(429),
            text: "API Error: 429 rate limited",
            provider: Some(Provider::from_base_url(Some("https://api.anthropic.com"))),
            ..Signals::default()
        });
        assert_eq!(
            (anthropic.provider, anthropic.retry_after_s),
            (Provider::Anthropic, None)
        );
    }

    #[test]
    fn codes_need_whole_numbers_and_web_tools_need_context() {
        assert!(!has_code("took 13080 ms", "1308"));
        assert!(has_code("[1308]", "1308"));
        let e = classify(&Signals {
            status: Some(400),
            text: "API Error: 400 tool_choice is not supported in thinking mode",
            last_tool: Some("WebSearch"),
            ..Signals::default()
        });
        assert_eq!(e.class, C::UnsupportedTool);
        assert_ne!(
            text(
                Some(400),
                "API Error: 400 tool_choice is not supported in thinking mode"
            )
            .class,
            C::UnsupportedTool
        );
    }

    #[test]
    fn providers_from_base_urls() {
        for (url, p) in [
            (None, Provider::Anthropic),
            (Some("https://api.z.ai/api/anthropic"), Provider::Zai),
            (
                Some("https://open.bigmodel.cn/api/anthropic"),
                Provider::Zai,
            ),
            (
                Some("https://api.deepseek.com/anthropic"),
                Provider::Deepseek,
            ),
            (
                Some("https://api.minimaxi.com/anthropic"),
                Provider::Minimax,
            ),
            (Some("http://127.0.0.1:3456"), Provider::Other),
            (Some("https://evil-z.ai.example.com"), Provider::Other),
        ] {
            assert_eq!(Provider::from_base_url(url), p, "{url:?}");
        }
        assert!(Provider::Anthropic.reports_real_cost());
        assert!(!Provider::Zai.reports_real_cost());
    }
}
