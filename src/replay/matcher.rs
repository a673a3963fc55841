//! Conditions on a Messages API request, used two ways by a cassette turn: `when` decides
//! whether a request may take the turn, `expect` checks a request that took it.
//!
//! Every condition reads the request body as the CLI sends it (JSON), tolerating both
//! shapes of `content` (a string or a list of blocks), and explains a failure in words a
//! person can act on, quoting what the request held instead.

use crate::text::tool_result::{Join, content_text};
use serde::Deserialize;
use serde_json::Value;

/// A set of conditions; all given conditions must hold.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestMatch {
    /// The text blocks of the last `user` message contain this.
    #[serde(default)]
    pub last_user_text_contains: Option<String>,
    /// A tool_result in the last `user` message contains this.
    #[serde(default)]
    pub last_tool_result_contains: Option<String>,
    /// Some string anywhere in `messages` (text, tool inputs, tool results) contains this.
    #[serde(default)]
    pub messages_contain: Option<String>,
    /// The `system` prompt contains this.
    #[serde(default)]
    pub system_contains: Option<String>,
    /// Some message in `messages` has this role (the CLI sends `system` messages).
    #[serde(default)]
    pub has_message_role: Option<String>,
    /// `tools` offers a tool of this name.
    #[serde(default)]
    pub tools_include: Option<String>,
    /// Some tool's `input_schema`, as compact JSON, contains this (e.g. the schema a
    /// `--json-schema` run gives the CLI's `StructuredOutput` tool).
    #[serde(default)]
    pub tool_schema_contains: Option<String>,
    /// The request asks for a stream (`true`) or a plain JSON answer (`false`).
    #[serde(default)]
    pub stream: Option<bool>,
    /// The request's `model` equals this.
    #[serde(default)]
    pub model: Option<String>,
    /// The request turns extended thinking on (`true`: a `thinking` field whose type is not
    /// `disabled`) or off (`false`).
    #[serde(default)]
    pub thinking: Option<bool>,
}

/// Whether the request turns extended thinking on: a `thinking` object whose `type` is not
/// `disabled` (the CLI sends `adaptive` or `enabled`; `CLAUDE_CODE_DISABLE_THINKING=1` sends
/// none).
fn thinking_enabled(body: &Value) -> bool {
    body.get("thinking")
        .is_some_and(|t| t.get("type").and_then(Value::as_str) != Some("disabled"))
}

/// How much of the request's own text a failure message quotes.
const QUOTE_CHARS: usize = 160;

impl RequestMatch {
    /// The conditions `body` does not meet, each as one sentence; empty when all hold.
    pub fn unmet(&self, body: &Value) -> Vec<String> {
        let messages = body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let last_user = messages
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"));
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        [
            self.unmet_last_user_text(last_user),
            self.unmet_last_tool_result(last_user),
            self.unmet_messages_contain(messages),
            self.unmet_system(body),
            self.unmet_message_role(messages),
            self.unmet_tools_include(tools),
            self.unmet_tool_schema(tools),
            self.unmet_stream(body),
            self.unmet_model(body),
            self.unmet_thinking(body),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn unmet_last_user_text(&self, last_user: Option<&Value>) -> Option<String> {
        let needle = self.last_user_text_contains.as_ref()?;
        let texts = last_user
            .map(|m| text_blocks(m.get("content")))
            .unwrap_or_default();
        if texts.iter().any(|t| t.contains(needle.as_str())) {
            return None;
        }
        Some(match last_user {
            None => format!("last_user_text_contains {needle:?}: the request has no user message"),
            Some(_) => format!(
                "last_user_text_contains {needle:?}: the last user message reads {}",
                quote(&texts.join(" | "))
            ),
        })
    }

    fn unmet_last_tool_result(&self, last_user: Option<&Value>) -> Option<String> {
        let needle = self.last_tool_result_contains.as_ref()?;
        let results = last_user
            .map(|m| tool_results(m.get("content")))
            .unwrap_or_default();
        if results.is_empty() {
            Some(format!(
                "last_tool_result_contains {needle:?}: the last user message has no tool_result"
            ))
        } else if !results.iter().any(|t| t.contains(needle.as_str())) {
            Some(format!(
                "last_tool_result_contains {needle:?}: the last tool_result reads {}",
                quote(&results.join(" | "))
            ))
        } else {
            None
        }
    }

    fn unmet_messages_contain(&self, messages: &[Value]) -> Option<String> {
        let needle = self.messages_contain.as_ref()?;
        let found = messages
            .iter()
            .any(|m| any_string(m, &|s| s.contains(needle.as_str())));
        (!found).then(|| {
            format!(
                "messages_contain {needle:?}: no message contains it ({} messages sent)",
                messages.len()
            )
        })
    }

    fn unmet_message_role(&self, messages: &[Value]) -> Option<String> {
        let role = self.has_message_role.as_ref()?;
        let found = messages
            .iter()
            .any(|m| m.get("role").and_then(Value::as_str) == Some(role.as_str()));
        (!found).then(|| format!("has_message_role {role:?}: no message has that role"))
    }

    fn unmet_system(&self, body: &Value) -> Option<String> {
        let needle = self.system_contains.as_ref()?;
        let found = body
            .get("system")
            .is_some_and(|s| any_string(s, &|t| t.contains(needle.as_str())));
        (!found)
            .then(|| format!("system_contains {needle:?}: the system prompt does not contain it"))
    }

    fn unmet_tools_include(&self, tools: &[Value]) -> Option<String> {
        let tool = self.tools_include.as_ref()?;
        let found = tools
            .iter()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(tool.as_str()));
        (!found).then(|| format!("tools_include {tool:?}: no tool of that name is offered"))
    }

    fn unmet_tool_schema(&self, tools: &[Value]) -> Option<String> {
        let needle = self.tool_schema_contains.as_ref()?;
        let found = tools.iter().any(|t| {
            t.get("input_schema")
                .is_some_and(|s| s.to_string().contains(needle.as_str()))
        });
        (!found)
            .then(|| format!("tool_schema_contains {needle:?}: no tool's input_schema contains it"))
    }

    fn unmet_stream(&self, body: &Value) -> Option<String> {
        let stream = self.stream?;
        let actual = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        (actual != stream).then(|| format!("stream {stream}: the request has stream {actual}"))
    }

    fn unmet_model(&self, body: &Value) -> Option<String> {
        let model = self.model.as_ref()?;
        let actual = body.get("model").and_then(Value::as_str).unwrap_or("");
        (actual != model).then(|| format!("model {model:?}: the request asks for {actual:?}"))
    }

    fn unmet_thinking(&self, body: &Value) -> Option<String> {
        let wanted = self.thinking?;
        let actual = thinking_enabled(body);
        (actual != wanted).then(|| {
            format!(
                "thinking {wanted}: the request has thinking {}",
                if actual { "on" } else { "off" }
            )
        })
    }

    /// A short description of the conditions, for "no turn matches" messages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let mut push = |key: &str, value: &Option<String>| {
            if let Some(v) = value {
                parts.push(format!("{key} {v:?}"));
            }
        };
        push("last_user_text_contains", &self.last_user_text_contains);
        push("last_tool_result_contains", &self.last_tool_result_contains);
        push("messages_contain", &self.messages_contain);
        push("system_contains", &self.system_contains);
        push("has_message_role", &self.has_message_role);
        push("tools_include", &self.tools_include);
        push("tool_schema_contains", &self.tool_schema_contains);
        push("model", &self.model);
        if let Some(stream) = self.stream {
            parts.push(format!("stream {stream}"));
        }
        if let Some(thinking) = self.thinking {
            parts.push(format!("thinking {thinking}"));
        }
        if parts.is_empty() {
            "any request".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// The text of the `text` blocks of a message's content (or the content itself when it is
/// a plain string).
fn text_blocks(content: Option<&Value>) -> Vec<&str> {
    match content {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    }
}

/// The content of each tool_result block, flattened to text.
fn tool_results(content: Option<&Value>) -> Vec<String> {
    let Some(Value::Array(blocks)) = content else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|b| {
            b.get("content")
                .and_then(|content| content_text(content, Join::Lines))
                .unwrap_or_default()
        })
        .collect()
}

/// Whether any string value inside `value` satisfies `test`.
fn any_string(value: &Value, test: &dyn Fn(&str) -> bool) -> bool {
    match value {
        Value::String(s) => test(s),
        Value::Array(items) => items.iter().any(|item| any_string(item, test)),
        Value::Object(map) => map.values().any(|item| any_string(item, test)),
        _ => false,
    }
}

/// `"…the last 160 characters"`: the end of a text is where a prompt or a tool's output
/// usually says what matters.
fn quote(text: &str) -> String {
    let count = text.chars().count();
    if count <= QUOTE_CHARS {
        format!("{text:?}")
    } else {
        let tail: String = text.chars().skip(count - QUOTE_CHARS).collect();
        format!("\"…{}", &format!("{tail:?}")[1..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matcher(value: Value) -> RequestMatch {
        serde_json::from_value(value).unwrap()
    }

    fn first_request() -> Value {
        json!({
            "model": "glm-4.7",
            "stream": true,
            "system": [{"type": "text", "text": "You are a Claude agent"}],
            "tools": [{"name": "Bash"}, {"name": "Write"}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "<system-reminder>x</system-reminder>"},
                    {"type": "text", "text": "first task: remember PAPAYA"}
                ]},
                {"role": "system", "content": "environment"}
            ]
        })
    }

    fn tool_result_request() -> Value {
        json!({
            "messages": [
                {"role": "user", "content": "do it"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "Write", "input": {"file_path": "/ws/a"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1",
                     "content": [{"type": "text", "text": "File created successfully at: /ws/a"}]}
                ]}
            ]
        })
    }

    #[test]
    fn tool_schema_contains_reads_the_input_schemas() {
        let request = json!({"tools": [
            {"name": "Bash", "input_schema": {"type": "object"}},
            {"name": "StructuredOutput", "input_schema":
                {"type": "object", "properties": {"answer": {"type": "integer"}}}}
        ]});
        let m = matcher(json!({"tool_schema_contains": "\"answer\":{\"type\":\"integer\"}"}));
        assert!(m.unmet(&request).is_empty());
        let m = matcher(json!({"tool_schema_contains": "\"verdict\""}));
        let unmet = m.unmet(&request);
        assert!(unmet[0].starts_with("tool_schema_contains"), "{unmet:?}");
        assert!(!m.unmet(&first_request()).is_empty());
    }

    #[test]
    fn an_empty_matcher_matches_anything() {
        assert!(RequestMatch::default().unmet(&json!({})).is_empty());
        assert_eq!(RequestMatch::default().describe(), "any request");
    }

    #[test]
    fn last_user_text_skips_the_trailing_system_message() {
        let m = matcher(json!({"last_user_text_contains": "first task"}));
        assert!(m.unmet(&first_request()).is_empty());
        let m = matcher(json!({"last_user_text_contains": "second task"}));
        let unmet = m.unmet(&first_request());
        assert_eq!(unmet.len(), 1);
        assert!(unmet[0].contains("remember PAPAYA"), "{unmet:?}");
    }

    #[test]
    fn tool_results_are_read_in_both_content_shapes() {
        let m = matcher(json!({"last_tool_result_contains": "File created"}));
        assert!(m.unmet(&tool_result_request()).is_empty());
        let mut plain = tool_result_request();
        plain["messages"][2]["content"][0]["content"] = json!("File created, plain");
        assert!(m.unmet(&plain).is_empty());
        let m = matcher(json!({"last_tool_result_contains": "updated"}));
        let unmet = m.unmet(&tool_result_request());
        assert!(unmet[0].contains("reads \"File created"), "{unmet:?}");
        let unmet = m.unmet(&first_request());
        assert!(unmet[0].contains("has no tool_result"), "{unmet:?}");
    }

    #[test]
    fn thinking_is_on_unless_absent_or_disabled() {
        let on = matcher(json!({"thinking": true}));
        let off = matcher(json!({"thinking": false}));
        let mut body = first_request();
        body["thinking"] = json!({"type": "adaptive"});
        assert!(on.unmet(&body).is_empty() && off.unmet(&body).len() == 1);
        body["thinking"] = json!({"type": "disabled"});
        assert!(off.unmet(&body).is_empty());
        body.as_object_mut().unwrap().remove("thinking");
        assert!(off.unmet(&body).is_empty());
        assert!(
            on.unmet(&body)[0].contains("has thinking off"),
            "{:?}",
            on.unmet(&body)
        );
    }

    #[test]
    fn messages_contain_searches_every_string() {
        assert!(
            matcher(json!({"messages_contain": "/ws/a"}))
                .unmet(&tool_result_request())
                .is_empty()
        );
        let unmet = matcher(json!({"messages_contain": "PAPAYA!"})).unmet(&first_request());
        assert!(unmet[0].contains("2 messages sent"), "{unmet:?}");
    }

    #[test]
    fn all_conditions_must_hold_and_each_failure_is_listed() {
        let m = matcher(json!({
            "system_contains": "Claude agent",
            "has_message_role": "system",
            "tools_include": "Edit",
            "stream": false,
            "model": "glm-4.7"
        }));
        let unmet = m.unmet(&first_request());
        assert_eq!(unmet.len(), 2, "{unmet:?}");
        assert!(unmet[0].starts_with("tools_include \"Edit\""));
        assert!(unmet[1].starts_with("stream false"));
    }

    #[test]
    fn long_quotes_keep_the_end() {
        let long = format!("{}END", "a".repeat(500));
        let q = quote(&long);
        assert!(q.starts_with("\"…"));
        assert!(q.ends_with("END\""));
        assert!(q.chars().count() < 200);
    }
}
