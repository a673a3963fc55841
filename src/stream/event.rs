//! The subset of the `claude` stream-json events coder understands, as typed values: what
//! the decoder produces and the observation, progress line and transcript consume.
//!
//! Only the fields coder acts on are here; everything else in an event is skipped by the
//! decoder without being materialised.

use std::ops::Range;

use serde::Deserialize;

/// A stream-json event, reduced to what supervision, classification and metrics need.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `system/init`: the first line, before any request.
    Init {
        session_id: Option<String>,
        model: Option<String>,
        cli_version: Option<String>,
        /// MCP servers that did not connect (`mcp_servers[].status` other than
        /// `connected`), by name.
        mcp_failed: Vec<String>,
    },
    /// `system/api_retry`: the CLI is about to retry an API request.
    ApiRetry {
        attempt: Option<u64>,
        error_status: Option<u16>,
        error: Option<UpstreamErrorType>,
    },
    /// An `assistant` line: one content block of a model response, or the CLI's synthetic
    /// error message (`model: "<synthetic>"`).
    Assistant(AssistantEvent),
    /// A `user` line: tool results going back to the model.
    User { tool_results: Vec<ToolResult> },
    /// The `result` line that ends a run.
    Result(ResultEvent),
    /// Any other event type (`system/task_started`, `stream_event`, …).
    Other {
        kind: String,
        subtype: Option<String>,
        session_id: Option<String>,
    },
}

impl Event {
    /// The event's `session_id`, where it carries one.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            Event::Init { session_id, .. } | Event::Other { session_id, .. } => {
                session_id.as_deref()
            }
            Event::Assistant(a) => a.session_id.as_deref(),
            Event::Result(r) => r.session_id.as_deref(),
            Event::ApiRetry { .. } | Event::User { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantEvent {
    pub session_id: Option<String>,
    pub message_id: Option<String>,
    pub model: Option<String>,
    /// `error` of a synthetic error message (`server_error`, `rate_limit`, …).
    pub error: Option<UpstreamErrorType>,
    pub api_error_status: Option<u16>,
    pub texts: Vec<String>,
    pub tool_uses: Vec<ToolUse>,
    pub usage: Option<Usage>,
}

impl AssistantEvent {
    /// Whether this is the CLI's own error message rather than model output.
    pub fn is_synthetic(&self) -> bool {
        self.model.as_deref() == Some("<synthetic>") || self.error.is_some()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    pub id: String,
    pub name: String,
    /// The file the call targets (`file_path`, `notebook_path` or `path`), if any.
    pub path: Option<String>,
    /// A short, single-line description of the call (`Bash(npm test)`), for messages.
    pub summary: String,
    /// The whole input of a `StructuredOutput` call (the tool the CLI offers for
    /// `--json-schema`); other tools' inputs are only summarised.
    pub structured_input: Option<serde_json::Value>,
    /// The call's input, kept only for coder's own tools (`mcp__coder__*`, DESIGN §9).
    pub input: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub tool_use_id: String,
    pub is_error: bool,
    /// Where the result's `content` (its raw JSON) lies in the decoded line, so that it can
    /// be searched without decoding the line again. `None` when the line was decoded the
    /// general way (see [`decode_line`](super::decode_line)), or the result has no content.
    pub content: Option<Range<usize>>,
}

/// One decoded stdout line: the event, and where in the line the fields a transcript lifts
/// out of it lie.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub event: Event,
    pub spans: EventSpans,
}

/// Where in an event's line the raw JSON of the fields a transcript lifts lies (each a
/// range of the line's bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSpans {
    /// The CLI's `uuid` of the event, when it is a string.
    pub uuid: Option<Range<usize>>,
    /// `parent_tool_use_id`, when it is a string.
    pub parent_tool_use_id: Option<Range<usize>>,
    /// The event's token usage: the top-level `usage` (a result), else an assistant
    /// message's `usage`.
    pub usage: Option<Range<usize>>,
    /// The decoder checked the whole line and found it UTF-8 (false: not checked, which
    /// says nothing either way), so whoever records the line need not check it again.
    pub utf8: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

/// Defines an enum for one of the CLI's open string fields: the values coder acts on, and
/// `Other` for any the CLI may add, kept verbatim.
macro_rules! cli_values {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
            /// A value coder does not act on, verbatim.
            Other(String),
        }

        impl $name {
            pub fn parse(text: &str) -> Self {
                match text {
                    $($text => $name::$variant,)+
                    other => $name::Other(other.to_owned()),
                }
            }

            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Other(text) => text,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

cli_values! {
    /// The `result` event's `subtype`. API failures also say `success` (with `is_error`).
    ResultSubtype {
        Success = "success",
        ErrorMaxTurns = "error_max_turns",
        ErrorMaxBudgetUsd = "error_max_budget_usd",
        ErrorDuringExecution = "error_during_execution",
        /// `--json-schema`: the model's `StructuredOutput` calls failed the CLI's own
        /// validation 5 times (2.1.330).
        ErrorMaxStructuredOutputRetries = "error_max_structured_output_retries",
    }
}

cli_values! {
    /// The `result` event's `terminal_reason`: why the CLI's loop ended.
    TerminalReason {
        Completed = "completed",
        MaxTurns = "max_turns",
        BudgetExhausted = "budget_exhausted",
        ApiError = "api_error",
        StructuredOutputRetryExhausted = "structured_output_retry_exhausted",
    }
}

cli_values! {
    /// The error class of a failed API call: the synthetic assistant message's `error`,
    /// an `api_retry` line's `error`, or the result's `api_error_type`.
    UpstreamErrorType {
        ServerError = "server_error",
        RateLimit = "rate_limit",
        Overloaded = "overloaded",
        AuthenticationFailed = "authentication_failed",
        ModelNotFound = "model_not_found",
        Unknown = "unknown",
        ApiError = "api_error",
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResultEvent {
    pub subtype: Option<ResultSubtype>,
    pub is_error: bool,
    pub result: Option<String>,
    pub session_id: Option<String>,
    pub num_turns: Option<u64>,
    pub terminal_reason: Option<TerminalReason>,
    pub api_error_status: Option<u16>,
    pub api_error_type: Option<UpstreamErrorType>,
    pub errors: Vec<String>,
    /// `--json-schema`: the input of the model's valid `StructuredOutput` call.
    pub structured_output: Option<serde_json::Value>,
    pub usage: Option<Usage>,
    pub duration_ms: Option<u64>,
    pub duration_api_ms: Option<u64>,
    pub total_cost_usd: Option<f64>,
}
