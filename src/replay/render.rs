//! Turns a cassette response into what the Messages API sends: one JSON message for a
//! plain request, or the SSE event sequence of a streaming one.
//!
//! The event sequence follows the real API exactly, because the CLI's stream parser is the
//! thing under test: `message_start`, `ping`, then per content block `content_block_start`,
//! its deltas (`text_delta`, `input_json_delta`, `thinking_delta` + `signature_delta`) and
//! `content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`.
//! Deltas carry at most [`DELTA_CHARS`] characters each, so a fault "after N events" lands
//! at a predictable place (see `docs/cassettes.md` for the numbering).

use serde_json::{Value, json};

use super::cassette::{Block, ResponseSpec};

/// The longest text carried by one delta event.
pub(crate) const DELTA_CHARS: usize = 48;

/// Placeholder signature for thinking blocks that do not give one (base64 of
/// `replay-thinking-signature`).
const DEFAULT_SIGNATURE: &str = "cmVwbGF5LXRoaW5raW5nLXNpZ25hdHVyZQ==";

/// Input tokens reported when a cassette gives none.
const DEFAULT_INPUT_TOKENS: u64 = 12;

/// Values a rendered message takes from the server rather than from the cassette.
pub(crate) struct RenderContext<'a> {
    pub model: &'a str,
    pub message_id: String,
    /// Prefix of the generated tool_use ids; each block adds its position.
    pub tool_id_prefix: String,
}

/// A message ready to send either way.
pub(crate) struct Rendered {
    /// The complete message, as a non-streaming answer.
    pub message: Value,
    /// The SSE events of a streaming answer: (event name, data).
    pub events: Vec<(&'static str, Value)>,
}

/// Encodes one SSE event.
pub(crate) fn sse_event(name: &str, data: &Value) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

/// The Anthropic error body.
pub(crate) fn error_body(error_type: &str, message: &str, request_id: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    })
}

pub(crate) fn render(response: &ResponseSpec, context: &RenderContext<'_>) -> Rendered {
    let content: Vec<Value> = response
        .content
        .iter()
        .enumerate()
        .map(|(position, block)| block_json(block, position, context))
        .collect();
    let has_tool_use = response
        .content
        .iter()
        .any(|b| matches!(b, Block::ToolUse { .. }));
    let stop_reason = response
        .stop_reason
        .clone()
        .unwrap_or_else(|| if has_tool_use { "tool_use" } else { "end_turn" }.to_string());
    let usage_spec = response.usage.clone().unwrap_or_default();
    let input_tokens = usage_spec.input_tokens.unwrap_or(DEFAULT_INPUT_TOKENS);
    let output_tokens = usage_spec
        .output_tokens
        .unwrap_or_else(|| estimate_tokens(&content));
    let usage = json!({
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": usage_spec.cache_creation_input_tokens,
        "cache_read_input_tokens": usage_spec.cache_read_input_tokens,
        "output_tokens": output_tokens,
    });

    let message = json!({
        "id": context.message_id,
        "type": "message",
        "role": "assistant",
        "model": context.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": response.stop_sequence,
        "usage": usage,
    });

    let mut events = Vec::new();
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    events.push((
        "message_start",
        json!({"type": "message_start", "message": {
            "id": context.message_id,
            "type": "message",
            "role": "assistant",
            "model": context.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": start_usage,
        }}),
    ));
    events.push(("ping", json!({"type": "ping"})));
    for (index, block) in content.iter().enumerate() {
        block_events(block, index, &mut events);
    }
    events.push((
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": response.stop_sequence},
            "usage": usage,
        }),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    Rendered { message, events }
}

/// A block as it appears in a complete message.
fn block_json(block: &Block, position: usize, context: &RenderContext<'_>) -> Value {
    match block {
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::ToolUse { id, name, input } => json!({
            "type": "tool_use",
            "id": id.clone().unwrap_or_else(|| format!("{}_{}", context.tool_id_prefix, position + 1)),
            "name": name,
            "input": input,
        }),
        Block::Thinking {
            thinking,
            signature,
        } => json!({
            "type": "thinking",
            "thinking": thinking,
            "signature": signature.as_deref().unwrap_or(DEFAULT_SIGNATURE),
        }),
        Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
    }
}

/// The start, delta and stop events of one block of a complete message.
fn block_events(block: &Value, index: usize, events: &mut Vec<(&'static str, Value)>) {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    let text_of = |key: &str| {
        block
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let start = match kind {
        "text" => json!({"type": "text", "text": ""}),
        "tool_use" => json!({
            "type": "tool_use",
            "id": block["id"],
            "name": block["name"],
            "input": {},
        }),
        "thinking" => json!({"type": "thinking", "thinking": "", "signature": ""}),
        _ => block.clone(),
    };
    events.push((
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": start}),
    ));
    let mut delta = |delta: Value| {
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    };
    match kind {
        "text" => {
            for piece in pieces(&text_of("text")) {
                delta(json!({"type": "text_delta", "text": piece}));
            }
        }
        "tool_use" => {
            for piece in pieces(&block["input"].to_string()) {
                delta(json!({"type": "input_json_delta", "partial_json": piece}));
            }
        }
        "thinking" => {
            for piece in pieces(&text_of("thinking")) {
                delta(json!({"type": "thinking_delta", "thinking": piece}));
            }
            delta(json!({"type": "signature_delta", "signature": text_of("signature")}));
        }
        _ => {}
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    ));
}

/// `text` cut into pieces of at most [`DELTA_CHARS`] characters (none for empty text).
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(DELTA_CHARS)
        .map(|piece| piece.iter().collect())
        .collect()
}

/// About four characters a token, at least one.
fn estimate_tokens(content: &[Value]) -> u64 {
    let chars: usize = content.iter().map(|b| b.to_string().len()).sum();
    (chars as u64 / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::cassette::Cassette;

    fn response(content: Value) -> ResponseSpec {
        let text = json!({"version": 1, "turns": [{"response": {"content": content}}]}).to_string();
        let cassette = Cassette::from_json(&text).unwrap();
        cassette.turns[0].response.clone().unwrap()
    }

    fn context() -> RenderContext<'static> {
        RenderContext {
            model: "glm-4.7",
            message_id: "msg_1".into(),
            tool_id_prefix: "toolu_replay_1".into(),
        }
    }

    fn names(rendered: &Rendered) -> Vec<String> {
        rendered
            .events
            .iter()
            .map(|(name, data)| {
                let delta = data["delta"]["type"].as_str().map(|t| format!(":{t}"));
                format!("{name}{}", delta.unwrap_or_default())
            })
            .collect()
    }

    #[test]
    fn the_event_sequence_matches_the_api() {
        let text = "x".repeat(DELTA_CHARS + 1);
        let rendered = render(
            &response(json!([
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": text},
                {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}
            ])),
            &context(),
        );
        assert_eq!(
            names(&rendered),
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta:thinking_delta",
                "content_block_delta:signature_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta:text_delta",
                "content_block_delta:text_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta:input_json_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(rendered.message["stop_reason"], "tool_use");
        assert_eq!(rendered.message["content"][2]["id"], "toolu_replay_1_3");
        assert_eq!(
            rendered.events[10].1["content_block"]["id"],
            "toolu_replay_1_3"
        );
        assert_eq!(rendered.events[13].1["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn deltas_reassemble_to_the_message() {
        let text = "héllo wörld, ".repeat(20);
        let input = json!({"file_path": "/ws/ä.txt", "content": "line\n".repeat(30)});
        let rendered = render(
            &response(json!([
                {"type": "text", "text": text},
                {"type": "tool_use", "name": "Write", "input": input}
            ])),
            &context(),
        );
        let mut text_out = String::new();
        let mut json_out = String::new();
        for (_, data) in &rendered.events {
            match data["delta"]["type"].as_str() {
                Some("text_delta") => text_out.push_str(data["delta"]["text"].as_str().unwrap()),
                Some("input_json_delta") => {
                    json_out.push_str(data["delta"]["partial_json"].as_str().unwrap())
                }
                _ => {}
            }
        }
        assert_eq!(text_out, text);
        assert_eq!(serde_json::from_str::<Value>(&json_out).unwrap(), input);
        assert_eq!(rendered.message["stop_reason"], "tool_use");
    }

    #[test]
    fn usage_and_stop_reason_come_from_the_cassette_when_given() {
        let text = json!({"version": 1, "turns": [{"response": {
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "max_tokens",
            "usage": {"input_tokens": 100, "output_tokens": 7, "cache_read_input_tokens": 5}
        }}]})
        .to_string();
        let cassette = Cassette::from_json(&text).unwrap();
        let rendered = render(cassette.turns[0].response.as_ref().unwrap(), &context());
        assert_eq!(rendered.message["stop_reason"], "max_tokens");
        assert_eq!(rendered.message["usage"]["input_tokens"], 100);
        assert_eq!(rendered.message["usage"]["output_tokens"], 7);
        assert_eq!(rendered.message["usage"]["cache_read_input_tokens"], 5);
        assert_eq!(rendered.events[0].1["message"]["usage"]["output_tokens"], 1);
        let delta = &rendered.events[rendered.events.len() - 2].1;
        assert_eq!(delta["usage"]["output_tokens"], 7);
    }

    #[test]
    fn sse_encoding_is_one_event_per_blank_line() {
        let bytes = sse_event("ping", &json!({"type": "ping"}));
        assert_eq!(bytes, b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
    }
}
