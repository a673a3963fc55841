//! The cassette: a versioned JSON script of the answers a replay server gives, one turn per
//! model request, with the faults and request expectations each turn carries.
//!
//! Parsing is strict (unknown fields are errors) because a typo in a hand-written cassette
//! would otherwise silently change what a test proves. Everything that can be checked
//! without a request (exclusive fields, counts, block shapes) is checked at load time, so a
//! server never starts on a cassette it cannot play. The format is documented for users in
//! `docs/cassettes.md`; this file is its single implementation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::ReplayError;
use super::matcher::RequestMatch;

/// The only cassette format version this build reads.
pub const CASSETTE_VERSION: u64 = 1;

/// The placeholder replaced, in tool_use inputs, by the workspace given to the server.
pub const WORKSPACE_PLACEHOLDER: &str = "{{workspace}}";

/// A loaded, validated cassette.
#[derive(Debug, Clone)]
pub struct Cassette {
    pub(crate) origin: String,
    pub(crate) name: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) turns: Vec<Turn>,
}

impl Cassette {
    /// Reads and validates the cassette at `path`.
    pub fn load(path: &Path) -> Result<Cassette, ReplayError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReplayError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        parse(&text, path.display().to_string())
    }

    /// Parses and validates a cassette held in memory.
    pub fn from_json(text: &str) -> Result<Cassette, ReplayError> {
        parse(text, "(inline JSON)".to_string())
    }

    /// Where the cassette came from: its path, or `(inline JSON)`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The cassette's `name`, when it has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// How many turns the cassette holds.
    pub fn turn_count(&self) -> usize {
        self.turns.len()
    }

    /// Whether any tool_use input uses the `{{workspace}}` placeholder.
    pub fn uses_workspace(&self) -> bool {
        self.turns.iter().any(|turn| {
            turn.response.as_ref().is_some_and(|response| {
                response.content.iter().any(|block| match block {
                    Block::ToolUse { input, .. } => value_mentions(input, WORKSPACE_PLACEHOLDER),
                    _ => false,
                })
            })
        })
    }

    /// Replaces `{{workspace}}` in every string of every tool_use input.
    pub(crate) fn with_workspace(mut self, workspace: &Path) -> Cassette {
        let replacement = workspace.display().to_string();
        for turn in &mut self.turns {
            if let Some(response) = &mut turn.response {
                for block in &mut response.content {
                    if let Block::ToolUse { input, .. } = block {
                        replace_in_strings(input, WORKSPACE_PLACEHOLDER, &replacement);
                    }
                }
            }
        }
        self
    }
}

/// One scripted answer. `times` consecutive requests may be answered by it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Turn {
    #[serde(default)]
    pub name: Option<String>,
    /// Only requests matching this may take the turn.
    #[serde(default)]
    pub when: Option<RequestMatch>,
    /// A request that takes the turn but does not satisfy this is answered 400.
    #[serde(default)]
    pub expect: Option<RequestMatch>,
    #[serde(default = "one")]
    pub times: u32,
    /// Wait this long before sending the response headers.
    #[serde(default)]
    pub delay_ms: u64,
    /// Wait this long between two SSE events.
    #[serde(default)]
    pub event_delay_ms: u64,
    #[serde(default)]
    pub response: Option<ResponseSpec>,
    #[serde(default)]
    pub error: Option<ErrorSpec>,
    /// Send this many SSE events, then keep the connection open and silent.
    #[serde(default)]
    pub stall_after_events: Option<usize>,
    /// Send this many SSE events, then reset the connection.
    #[serde(default)]
    pub drop_after_events: Option<usize>,
    /// Send this many SSE events, then an `error` event, then end the stream.
    #[serde(default)]
    pub stream_error: Option<StreamErrorSpec>,
    /// Before the events of a stream, send SSE comments (`: keep-alive`) for a while, the
    /// way DeepSeek holds a queued request open.
    #[serde(default)]
    pub keepalive: Option<KeepAliveSpec>,
}

/// SSE keep-alive comments sent after the headers and before the first event.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeepAliveSpec {
    /// Time between two comments.
    pub every_ms: u64,
    /// How long the comments go on before the events start.
    pub for_ms: u64,
}

fn one() -> u32 {
    1
}

impl Turn {
    /// `turn 3 ("edit the file")`, 1-based, for messages to people.
    pub fn label(&self, index: usize) -> String {
        match &self.name {
            Some(name) => format!("turn {} ({name:?})", index + 1),
            None => format!("turn {}", index + 1),
        }
    }
}

/// A successful assistant message.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResponseSpec {
    pub content: Vec<Block>,
    /// Defaults to `tool_use` when a tool_use block is present, else `end_turn`.
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
    #[serde(default)]
    pub usage: Option<UsageSpec>,
    /// Defaults to the cassette's `model`, then to the request's `model`.
    #[serde(default)]
    pub model: Option<String>,
    /// Defaults to a fresh `msg_replay_…` id.
    #[serde(default)]
    pub id: Option<String>,
}

/// A content block of a response.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Block {
    Text {
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: Option<String>,
        name: String,
        input: Value,
    },
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
}

/// Token counts reported for a response. Absent counts are 0, except `output_tokens`,
/// which defaults to a rough count of the content.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageSpec {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

/// An HTTP error answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorSpec {
    pub status: u16,
    /// The Anthropic error type; defaults from the status (429 → `rate_limit_error`, …).
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    /// Extra response headers, such as `retry-after`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A body sent instead of the Anthropic error shape: a JSON value, or a string sent as is.
    #[serde(default)]
    pub body: Option<Value>,
}

/// An `event: error` in the middle of a stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamErrorSpec {
    pub after_events: usize,
    #[serde(default = "overloaded", rename = "type")]
    pub error_type: String,
    #[serde(default)]
    pub message: Option<String>,
    /// The HTTP status a non-streaming request gets instead; defaults from the type.
    #[serde(default)]
    pub status: Option<u16>,
}

fn overloaded() -> String {
    "overloaded_error".to_string()
}

/// The default Anthropic error type for an HTTP status.
pub(crate) fn error_type_for_status(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The default HTTP status for an Anthropic error type.
pub(crate) fn status_for_error_type(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// The top-level shape of a cassette file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CassetteFile {
    /// Checked by `VersionProbe` before this shape is parsed; named so that
    /// `deny_unknown_fields` accepts it.
    #[serde(rename = "version")]
    _version: u64,
    #[serde(default)]
    name: Option<String>,
    /// For the people reading the cassette.
    #[serde(default, rename = "description")]
    _description: Option<String>,
    #[serde(default)]
    model: Option<String>,
    turns: Vec<Turn>,
}

/// Read first, so a cassette of another version is refused with that reason rather than
/// with whatever field the newer format added.
#[derive(Deserialize)]
struct VersionProbe {
    #[serde(default)]
    version: Option<Value>,
}

fn parse(text: &str, origin: String) -> Result<Cassette, ReplayError> {
    let json_error = |source| ReplayError::Json {
        origin: origin.clone(),
        source,
    };
    let probe: VersionProbe = serde_json::from_str(text).map_err(json_error)?;
    match probe.version {
        Some(Value::Number(n)) if n.as_u64() == Some(CASSETTE_VERSION) => {}
        Some(other) => {
            return Err(invalid(
                &origin,
                format!("`version` is {other}; this coder reads version {CASSETTE_VERSION}"),
            ));
        }
        None => {
            return Err(invalid(
                &origin,
                format!("missing `\"version\": {CASSETTE_VERSION}`"),
            ));
        }
    }
    let file: CassetteFile = serde_json::from_str(text).map_err(json_error)?;
    if file.turns.is_empty() {
        return Err(invalid(&origin, "`turns` is empty".to_string()));
    }
    for (index, turn) in file.turns.iter().enumerate() {
        validate_turn(turn, index).map_err(|message| invalid(&origin, message))?;
    }
    Ok(Cassette {
        origin,
        name: file.name,
        model: file.model,
        turns: file.turns,
    })
}

fn invalid(origin: &str, message: String) -> ReplayError {
    ReplayError::Invalid {
        origin: origin.to_string(),
        message,
    }
}

fn validate_turn(turn: &Turn, index: usize) -> Result<(), String> {
    let label = turn.label(index);
    if turn.times == 0 {
        return Err(format!("{label}: `times` must be at least 1"));
    }
    match (&turn.response, &turn.error) {
        (Some(_), Some(_)) => {
            return Err(format!("{label}: has both `response` and `error`"));
        }
        (None, None) => {
            return Err(format!("{label}: needs a `response` or an `error`"));
        }
        _ => {}
    }
    let stream_faults = [
        turn.stall_after_events.is_some(),
        turn.drop_after_events.is_some(),
        turn.stream_error.is_some(),
    ]
    .iter()
    .filter(|set| **set)
    .count();
    if stream_faults > 1 {
        return Err(format!(
            "{label}: `stall_after_events`, `drop_after_events` and `stream_error` exclude each other"
        ));
    }
    if let Some(keepalive) = turn.keepalive {
        if turn.error.is_some() {
            return Err(format!(
                "{label}: `keepalive` holds a stream open before its events; it needs a `response`, not an `error`"
            ));
        }
        if keepalive.every_ms == 0 {
            return Err(format!("{label}: `keepalive.every_ms` must be at least 1"));
        }
    }
    if let Some(error) = &turn.error {
        if stream_faults > 0 {
            return Err(format!(
                "{label}: a stream fault needs a `response` to cut, not an `error`"
            ));
        }
        validate_error(error, &label)?;
    }
    if let Some(stream_error) = &turn.stream_error
        && let Some(status) = stream_error.status
        && !(400..=599).contains(&status)
    {
        return Err(format!(
            "{label}: stream_error status {status} is not in 400..=599"
        ));
    }
    if let Some(response) = &turn.response {
        validate_tool_uses(response, &label)?;
    }
    Ok(())
}

/// An error turn's status is an HTTP error's, and its headers can be written as such.
fn validate_error(error: &ErrorSpec, label: &str) -> Result<(), String> {
    if !(400..=599).contains(&error.status) {
        return Err(format!(
            "{label}: error status {} is not in 400..=599",
            error.status
        ));
    }
    for name in error.headers.keys() {
        if !is_header_name(name) {
            return Err(format!("{label}: {name:?} is not a valid header name"));
        }
    }
    for value in error.headers.values() {
        if value.contains(['\r', '\n']) {
            return Err(format!(
                "{label}: header value {value:?} contains a line break"
            ));
        }
    }
    Ok(())
}

/// Every `tool_use` block of a response names its tool and gives it an object as input.
fn validate_tool_uses(response: &ResponseSpec, label: &str) -> Result<(), String> {
    for (position, block) in response.content.iter().enumerate() {
        if let Block::ToolUse { name, input, .. } = block {
            if name.is_empty() {
                return Err(format!(
                    "{label}: tool_use block {} has an empty `name`",
                    position + 1
                ));
            }
            if !input.is_object() {
                return Err(format!(
                    "{label}: tool_use block {} (`{name}`): `input` must be a JSON object",
                    position + 1
                ));
            }
        }
    }
    Ok(())
}

/// RFC 9110 token characters.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn value_mentions(value: &Value, needle: &str) -> bool {
    match value {
        Value::String(s) => s.contains(needle),
        Value::Array(items) => items.iter().any(|item| value_mentions(item, needle)),
        Value::Object(map) => map.values().any(|item| value_mentions(item, needle)),
        _ => false,
    }
}

fn replace_in_strings(value: &mut Value, needle: &str, replacement: &str) {
    match value {
        Value::String(s) if s.contains(needle) => *s = s.replace(needle, replacement),
        Value::Array(items) => {
            for item in items {
                replace_in_strings(item, needle, replacement);
            }
        }
        Value::Object(map) => {
            for item in map.values_mut() {
                replace_in_strings(item, needle, replacement);
            }
        }
        _ => {}
    }
}

/// The absolute form of a workspace path given on the command line or by a caller: the
/// tools of the CLI compare absolute paths, so a relative or symlinked path would put
/// written files "outside" the workspace in their eyes.
pub(crate) fn absolute_workspace(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Cassette, String> {
        Cassette::from_json(text).map_err(|e| e.to_string())
    }

    #[test]
    fn minimal_cassette_loads() {
        let cassette = load(
            r#"{"version":1,"turns":[{"response":{"content":[{"type":"text","text":"hi"}]}}]}"#,
        )
        .unwrap();
        assert_eq!(cassette.turn_count(), 1);
        assert_eq!(cassette.turns[0].times, 1);
    }

    #[test]
    fn wrong_or_missing_version_is_refused() {
        let err = load(r#"{"version":2,"turns":[]}"#).unwrap_err();
        assert!(err.contains("`version` is 2"), "{err}");
        let err = load(r#"{"turns":[]}"#).unwrap_err();
        assert!(err.contains("missing `\"version\": 1`"), "{err}");
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = load("{\n  \"version\": 1,\n  \"turns\": [,]\n}").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("(inline JSON)"), "{err}");
    }

    #[test]
    fn unknown_fields_are_named() {
        let err = load(r#"{"version":1,"turns":[{"respones":{"content":[]}}]}"#).unwrap_err();
        assert!(err.contains("unknown field `respones`"), "{err}");
        let err =
            load(r#"{"version":1,"turns":[{"response":{"content":[{"type":"text","txt":"a"}]}}]}"#)
                .unwrap_err();
        assert!(err.contains("txt"), "{err}");
        let err = load(r#"{"version":1,"turns":[{"response":{"content":[{"type":"image"}]}}]}"#)
            .unwrap_err();
        assert!(err.contains("image"), "{err}");
    }

    #[test]
    fn inconsistent_turns_are_refused_with_their_label() {
        let cases = [
            (
                r#"{"name":"x","times":0,"response":{"content":[]}}"#,
                "turn 1 (\"x\"): `times`",
            ),
            (r#"{}"#, "needs a `response` or an `error`"),
            (
                r#"{"response":{"content":[]},"error":{"status":500}}"#,
                "both `response` and `error`",
            ),
            (r#"{"error":{"status":200}}"#, "not in 400..=599"),
            (
                r#"{"error":{"status":500},"stall_after_events":2}"#,
                "needs a `response` to cut",
            ),
            (
                r#"{"response":{"content":[]},"stall_after_events":2,"drop_after_events":3}"#,
                "exclude each other",
            ),
            (
                r#"{"response":{"content":[{"type":"tool_use","name":"Bash","input":"ls"}]}}"#,
                "must be a JSON object",
            ),
            (
                r#"{"error":{"status":429,"headers":{"retry after":"1"}}}"#,
                "not a valid header name",
            ),
        ];
        for (turn, expected) in cases {
            let text = format!(r#"{{"version":1,"turns":[{turn}]}}"#);
            let err = load(&text).unwrap_err();
            assert!(err.contains(expected), "{turn}: {err}");
        }
    }

    #[test]
    fn workspace_placeholder_is_replaced_in_tool_inputs_only() {
        let cassette = load(
            r#"{"version":1,"turns":[{"response":{"content":[
                {"type":"text","text":"{{workspace}} stays"},
                {"type":"tool_use","name":"Write","input":{"file_path":"{{workspace}}/a.txt","nested":["{{workspace}}"]}}
            ]}}]}"#,
        )
        .unwrap();
        assert!(cassette.uses_workspace());
        let resolved = cassette.with_workspace(Path::new("/ws"));
        let content = &resolved.turns[0].response.as_ref().unwrap().content;
        match &content[0] {
            Block::Text { text } => assert_eq!(text, "{{workspace}} stays"),
            other => panic!("{other:?}"),
        }
        match &content[1] {
            Block::ToolUse { input, .. } => {
                assert_eq!(input["file_path"], "/ws/a.txt");
                assert_eq!(input["nested"][0], "/ws");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn default_error_types_follow_the_status() {
        assert_eq!(error_type_for_status(429), "rate_limit_error");
        assert_eq!(error_type_for_status(503), "api_error");
        assert_eq!(status_for_error_type("overloaded_error"), 529);
        assert_eq!(status_for_error_type("something_new"), 500);
    }
}
