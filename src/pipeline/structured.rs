//! Structured results (DESIGN §9): `--json-schema FILE|JSON` read and checked before the
//! run, the model's final answer picked from what the CLI reported, validated by coder
//! itself, and the prompt of the one repair turn an invalid answer gets.
//!
//! What the CLI does with `--json-schema` (2.1.330, measured against the replay server):
//! it offers the model a tool `StructuredOutput` whose `input_schema` is the schema as
//! given (no `tool_choice`, no word in the system prompt). A valid call ends the turn at
//! once: the result carries `structured_output` (the call's input) and, as `result`, its
//! compact JSON. An invalid call gets an error tool result (`Output does not match required
//! schema: /answer: must be integer`) and the model tries again; after 5 invalid calls the
//! result is `is_error`, subtype `error_max_structured_output_retries`. A model that answers
//! in text only gets one synthetic nudge (`[structured-output-enforce] You MUST call the
//! StructuredOutput tool …`); if it still answers in text the run "succeeds" with that text
//! and no `structured_output`. So coder validates either the `structured_output` or, failing
//! that, the result text read as JSON (vendors' models do not always call the tool), with
//! its own validator: the answer in the envelope never rests on the child's word alone.
//!
//! This module decides nothing about turns or envelopes; `pipeline::run` does.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

/// The longest schema coder passes: the CLI takes it as one argv string, and Linux refuses
/// a single argument over 128 KiB (`MAX_ARG_STRLEN`).
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// At most this many validation errors are reported (and put in the repair prompt).
pub const MAX_SCHEMA_ERRORS: usize = 20;

/// Each reported validation error is cut to this many characters.
const MAX_ERROR_CHARS: usize = 240;

/// A schema file larger than this is refused before it is parsed.
const MAX_SCHEMA_FILE_BYTES: u64 = 1024 * 1024;

/// Why `--json-schema` cannot be used. Every message is one line and names the input.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("{what} is empty: give the JSON Schema (an object) or a file holding one")]
    Empty { what: String },
    #[error("{what} {path}: cannot read the file: {reason}")]
    Unreadable {
        what: String,
        path: String,
        reason: String,
    },
    #[error("{what} is not valid JSON ({origin}): {reason}")]
    NotJson {
        what: String,
        origin: String,
        reason: String,
    },
    #[error("{what} is not a valid JSON Schema ({origin}): {reason}")]
    Invalid {
        what: String,
        origin: String,
        reason: String,
    },
    #[error(
        "{what} must describe a JSON object (\"type\": \"object\" at its root): the claude CLI \
         offers it as the input schema of its StructuredOutput tool, whose input is always an \
         object ({origin})"
    )]
    NotObjectRoot { what: String, origin: String },
    #[error(
        "{what} is {bytes} bytes as compact JSON; at most {MAX_SCHEMA_BYTES} fit on the claude \
         command line ({origin})"
    )]
    TooLarge {
        what: String,
        origin: String,
        bytes: usize,
    },
}

/// Whether `text` is JSON (of any type).
fn is_json(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok()
}

/// A checked JSON Schema: what the CLI is given, and coder's own validator for it.
#[derive(Clone)]
pub struct JsonSchema {
    value: Arc<Value>,
    /// The schema as compact JSON: the CLI's `--json-schema` argument.
    compact: Arc<str>,
    validator: Arc<jsonschema::Validator>,
}

impl std::fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSchema")
            .field("schema", &self.compact)
            .finish_non_exhaustive()
    }
}

impl JsonSchema {
    /// `--json-schema FILE|JSON`: text starting with `{` is the schema itself, anything
    /// else names a file holding it. `what` names the input in messages.
    pub fn from_arg(arg: &str, what: &str) -> Result<JsonSchema, SchemaError> {
        if arg.trim().is_empty() {
            return Err(SchemaError::Empty {
                what: what.to_owned(),
            });
        }
        if arg.trim_start().starts_with('{') {
            return JsonSchema::from_text(arg, what, "inline JSON");
        }
        let path = Path::new(arg);
        let unreadable = |reason: String| SchemaError::Unreadable {
            what: what.to_owned(),
            path: arg.to_owned(),
            reason,
        };
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            // JSON that is no object (`[…]`, `true`) and names no file: the schema is what
            // is wrong, and its check says so.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_json(arg) => {
                return JsonSchema::from_text(arg, what, "inline JSON");
            }
            Err(e) => return Err(unreadable(io_reason(&e))),
        };
        if !meta.is_file() {
            return Err(unreadable("not a regular file".to_owned()));
        }
        if meta.len() > MAX_SCHEMA_FILE_BYTES {
            return Err(unreadable(format!(
                "{} bytes is too large for a schema",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| unreadable(io_reason(&e)))?;
        JsonSchema::from_text(&text, what, &format!("file {arg}"))
    }

    /// The `json_schema` of a `--request` file or an MCP call: an object is the schema, a
    /// string is read like the flag's argument.
    pub fn from_request_value(value: &Value, what: &str) -> Result<JsonSchema, SchemaError> {
        match value {
            Value::String(text) => JsonSchema::from_arg(text, what),
            other => JsonSchema::from_value(other.clone(), what, "inline JSON"),
        }
    }

    fn from_text(text: &str, what: &str, origin: &str) -> Result<JsonSchema, SchemaError> {
        let value: Value =
            crate::text::json::parse_strict(text).map_err(|e| SchemaError::NotJson {
                what: what.to_owned(),
                origin: origin.to_owned(),
                reason: e.to_string(),
            })?;
        JsonSchema::from_value(value, what, origin)
    }

    /// Checks `value` against its meta-schema (the draft it names, else 2020-12), builds
    /// the validator, and makes sure the CLI can take it.
    pub fn from_value(value: Value, what: &str, origin: &str) -> Result<JsonSchema, SchemaError> {
        let invalid = |reason: String| SchemaError::Invalid {
            what: what.to_owned(),
            origin: origin.to_owned(),
            reason: crate::text::one_line(&reason, 300),
        };
        if !value.is_object() {
            return Err(invalid(format!(
                "a schema is a JSON object, not {}",
                type_name(&value)
            )));
        }
        // Building also checks the schema against its meta-schema; external `$ref`s are
        // not fetched (no network or file resolver is compiled in), so they fail here.
        let validator = jsonschema::validator_for(&value).map_err(|e| {
            if let Some(uri) = external_ref(&e) {
                return invalid(format!(
                    "\"$ref\": {uri:?} names a schema elsewhere, and coder fetches none (from \
                     the network or from files): put it in this schema, under \"$defs\", and \
                     refer to it as \"#/$defs/NAME\""
                ));
            }
            let at = e.instance_path().as_str();
            if at.is_empty() {
                invalid(e.to_string())
            } else {
                invalid(format!("at {at}: {e}"))
            }
        })?;
        if value.get("type").and_then(Value::as_str) != Some("object") {
            return Err(SchemaError::NotObjectRoot {
                what: what.to_owned(),
                origin: origin.to_owned(),
            });
        }
        let compact = value.to_string();
        if compact.len() > MAX_SCHEMA_BYTES {
            return Err(SchemaError::TooLarge {
                what: what.to_owned(),
                origin: origin.to_owned(),
                bytes: compact.len(),
            });
        }
        Ok(JsonSchema {
            value: Arc::new(value),
            compact: compact.into(),
            validator: Arc::new(validator),
        })
    }

    /// The CLI's `--json-schema` argument.
    pub fn cli_arg(&self) -> &str {
        &self.compact
    }

    /// The schema itself.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// `instance`'s validation errors (empty when it is valid): short messages, each
    /// starting with the JSON pointer of the offending value (`(root)` for the whole).
    pub fn errors(&self, instance: &Value) -> Vec<String> {
        self.validator
            .iter_errors(instance)
            .take(MAX_SCHEMA_ERRORS)
            .map(|e| {
                let at = e.instance_path().as_str();
                let at = if at.is_empty() { "(root)" } else { at };
                crate::text::one_line(&format!("{at}: {e}"), MAX_ERROR_CHARS)
            })
            .collect()
    }
}

/// The URI of an external `$ref` the schema could not be built for, if that was the error
/// (the library's own words name its cargo features, `resolve-http`, which say nothing to a
/// user).
fn external_ref(e: &jsonschema::ValidationError<'_>) -> Option<String> {
    match e.kind() {
        jsonschema::error::ValidationErrorKind::Referencing(
            jsonschema::ReferencingError::Unretrievable { uri, .. },
        ) => Some(uri.clone()),
        _ => None,
    }
}

/// What the model offered as its answer in one attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The result's `structured_output`: a `StructuredOutput` call the CLI accepted.
    Structured(Value),
    /// The result text, when the CLI reported no `structured_output`.
    Text(String),
    /// The CLI gave up after its own retries (`error_max_structured_output_retries`): the
    /// input of the last call, and the CLI's words.
    Exhausted {
        last_call: Option<Value>,
        cli_error: String,
    },
}

/// Where the answer in the envelope came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerSource {
    /// The CLI's `structured_output` (the model called `StructuredOutput`).
    StructuredOutput,
    /// The result text, read as JSON.
    ResultText,
    /// The last `StructuredOutput` call of an attempt the CLI gave up on.
    LastCall,
}

/// The verdict on an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    Valid { value: Value, source: AnswerSource },
    Invalid { errors: Vec<String> },
}

impl Answer {
    /// The answer of an attempt from its result event and its last `StructuredOutput`
    /// call; `None` when the attempt ended without a result.
    pub fn of(
        result: Option<&crate::stream::ResultEvent>,
        last_call: Option<&Value>,
    ) -> Option<Answer> {
        let result = result?;
        if result.subtype == Some(crate::stream::ResultSubtype::ErrorMaxStructuredOutputRetries) {
            return Some(Answer::Exhausted {
                last_call: last_call.cloned(),
                cli_error: result.errors.join("; "),
            });
        }
        if result.is_error {
            return None;
        }
        if let Some(value) = &result.structured_output {
            return Some(Answer::Structured(value.clone()));
        }
        result.result.clone().map(Answer::Text)
    }

    /// Validates the answer against `schema`.
    pub fn judge(&self, schema: &JsonSchema) -> Judgement {
        let (value, source) = match self {
            Answer::Structured(value) => (value.clone(), AnswerSource::StructuredOutput),
            Answer::Text(text) => match json_in_text(text) {
                Ok(value) => (value, AnswerSource::ResultText),
                Err(reason) => {
                    return Judgement::Invalid {
                        errors: vec![format!("(root): the answer is not JSON ({reason})")],
                    };
                }
            },
            Answer::Exhausted {
                last_call,
                cli_error,
            } => {
                let errors = last_call
                    .as_ref()
                    .map(|call| schema.errors(call))
                    .filter(|errors| !errors.is_empty())
                    .unwrap_or_else(|| {
                        vec![crate::text::one_line(
                            &format!("(root): the claude CLI gave up: {cli_error}"),
                            MAX_ERROR_CHARS,
                        )]
                    });
                return Judgement::Invalid { errors };
            }
        };
        let errors = schema.errors(&value);
        if errors.is_empty() {
            Judgement::Valid { value, source }
        } else {
            Judgement::Invalid { errors }
        }
    }
}

/// The JSON a text answer holds: the whole text, else the last fenced code block, else
/// the span from its first `{` to its last `}` (models often wrap JSON in a sentence or a
/// ```json fence).
pub fn json_in_text(text: &str) -> Result<Value, String> {
    let whole = serde_json::from_str::<Value>(text.trim());
    let whole_error = match whole {
        Ok(value) => return Ok(value),
        Err(e) => e.to_string(),
    };
    if let Some(block) = last_fenced_block(text)
        && let Ok(value) = serde_json::from_str::<Value>(block.trim())
    {
        return Ok(value);
    }
    if let (Some(start), Some(end)) = (text.find('{'), text.rfind('}'))
        && start < end
        && let Ok(value) = serde_json::from_str::<Value>(&text[start..=end])
    {
        return Ok(value);
    }
    Err(whole_error)
}

/// The content of the last ``` fenced block of `text`, without its info string.
fn last_fenced_block(text: &str) -> Option<&str> {
    let close = text.rfind("```")?;
    let open = text[..close].rfind("```")?;
    let inner = &text[open + 3..close];
    // Drop the info string (`json`) on the opening line.
    Some(inner.split_once('\n').map_or(inner, |(_, rest)| rest))
}

/// The schema is quoted in the repair prompt up to this many bytes.
const REPAIR_SCHEMA_BYTES: usize = 16 * 1024;

/// The repair turn's prompt: the validation errors and the schema.
pub fn repair_prompt(schema: &JsonSchema, errors: &[String]) -> String {
    let list: String = errors.iter().map(|e| format!("- {e}\n")).collect();
    let schema_text = serde_json::to_string_pretty(schema.value())
        .unwrap_or_else(|_| schema.cli_arg().to_owned());
    let schema_part = if schema_text.len() <= REPAIR_SCHEMA_BYTES {
        format!("The schema:\n```json\n{schema_text}\n```\n")
    } else {
        "The schema is the one given with the task (too long to repeat here).\n".to_owned()
    };
    format!(
        "Your final answer does not match the JSON Schema this task requires. Validation \
         errors (JSON pointer: problem):\n{list}\n{schema_part}Answer again with the \
         corrected result: call the StructuredOutput tool once, with an input that matches \
         the schema. Do not change any files for this."
    )
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> JsonSchema {
        JsonSchema::from_value(
            json!({"type": "object", "properties": {"answer": {"type": "integer"}},
                   "required": ["answer"]}),
            "--json-schema",
            "inline JSON",
        )
        .unwrap()
    }

    #[test]
    fn errors_carry_json_pointers() {
        let errors = schema().errors(&json!({"answer": "x"}));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("/answer: "), "{errors:?}");
        let errors = schema().errors(&json!({}));
        assert!(errors[0].starts_with("(root): "), "{errors:?}");
        assert!(errors[0].contains("answer"), "{errors:?}");
    }

    #[test]
    fn bad_schemas_are_refused_with_a_reason() {
        let bad = JsonSchema::from_arg("{\"type\":", "--json-schema").unwrap_err();
        assert!(matches!(bad, SchemaError::NotJson { .. }), "{bad}");
        let bad = JsonSchema::from_arg(r#"{"type": "objekt"}"#, "--json-schema").unwrap_err();
        assert!(matches!(bad, SchemaError::Invalid { .. }), "{bad}");
        let bad = JsonSchema::from_arg(r#"{"type": "array"}"#, "--json-schema").unwrap_err();
        assert!(matches!(bad, SchemaError::NotObjectRoot { .. }), "{bad}");
        let bad = JsonSchema::from_arg("/nonexistent/schema.json", "--json-schema").unwrap_err();
        assert!(bad.to_string().contains("no such file"), "{bad}");
        let remote = r#"{"type": "object", "$ref": "https://example.com/s.json"}"#;
        let bad = JsonSchema::from_arg(remote, "--json-schema").unwrap_err();
        assert!(matches!(bad, SchemaError::Invalid { .. }), "{bad}");
    }

    #[test]
    fn text_answers_are_read_as_json() {
        assert_eq!(json_in_text(" {\"a\": 1} ").unwrap(), json!({"a": 1}));
        let fenced = "Here it is:\n```json\n{\"a\": 2}\n```\nDone.";
        assert_eq!(json_in_text(fenced).unwrap(), json!({"a": 2}));
        assert_eq!(
            json_in_text("The answer is {\"a\": 3}.").unwrap(),
            json!({"a": 3})
        );
        assert!(json_in_text("no json here").is_err());
    }

    #[test]
    fn judgement_prefers_structured_output() {
        let s = schema();
        assert_eq!(
            Answer::Structured(json!({"answer": 1})).judge(&s),
            Judgement::Valid {
                value: json!({"answer": 1}),
                source: AnswerSource::StructuredOutput
            }
        );
        assert!(matches!(
            Answer::Text("{\"answer\": 1.5}".into()).judge(&s),
            Judgement::Invalid { errors } if errors[0].starts_with("/answer")
        ));
        let exhausted = Answer::Exhausted {
            last_call: Some(json!({"answer": "x"})),
            cli_error: "gave up".into(),
        };
        assert!(matches!(
            exhausted.judge(&s),
            Judgement::Invalid { errors } if errors[0].starts_with("/answer")
        ));
    }
}
