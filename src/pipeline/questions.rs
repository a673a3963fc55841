//! Questions (DESIGN §9): the model's way to stop and ask the caller when the task's
//! constraints are unclear or conflict, and the caller's way to answer.
//!
//! With questions on, the child gets one MCP server of coder's own (`--mcp-config` naming
//! `coder ask-server`, server name `coder`), which offers one tool, `ask_user` (the CLI calls
//! it `mcp__coder__ask_user`). The server (`commands::ask_server`) only checks the call's
//! input and, when it is valid, never answers: coder sees the call in the CLI's stream
//! (which the agent's own commands cannot forge, see `sandbox::nest`), takes the questions
//! from it with the same check ([`parse_questions`]), and stops the CLI tree. The run ends
//! `needs_input` with the questions; the session record keeps them, and a resume with
//! `--answers` sends the answers back, question by question ([`answers_prompt`]).
//!
//! This module holds what both sides share: the question type and its limits, the tool's
//! input schema, the child's MCP config, and the answers' parsing and wording. It reads no
//! session state itself (the request does, through `pipeline::session`).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The MCP server's name in the child's config (the CLI prefixes its tools with it).
pub const SERVER_NAME: &str = "coder";
/// The tool's own name on the server.
pub const TOOL_NAME: &str = "ask_user";
/// The tool's name as the CLI offers it to the model and reports it in the stream.
pub const CLI_TOOL_NAME: &str = "mcp__coder__ask_user";
/// coder's hidden subcommand that serves the tool (stdio, inside the sandbox).
pub const SERVER_ARG: &str = "ask-server";

/// At most this many questions in one call.
pub const MAX_QUESTIONS: usize = 10;
/// At most this many options for one question.
pub const MAX_OPTIONS: usize = 10;
/// The longest question, option or reason, in characters.
pub const MAX_TEXT_CHARS: usize = 2000;
/// The longest answer, in characters.
pub const MAX_ANSWER_CHARS: usize = 64 * 1024;

/// One question the model asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub question: String,
    /// Suggested answers (the caller may answer otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Why the model cannot go on without the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// What the tool's description tells the model.
pub const TOOL_DESCRIPTION: &str = "Ask the person who gave you this task one or more \
questions, when its requirements are unclear, conflict with each other or with the \
contract, or a decision only they can make blocks you. The run stops when you call this \
tool: the caller reads the questions and resumes this session with the answers. Ask \
everything you need in one call; do not use it for things you can find out yourself.";

/// The tool's JSON Schema input.
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_QUESTIONS,
                "items": {
                    "type": "object",
                    "properties": {
                        "question": {"type": "string", "description": "the question, self-contained"},
                        "options": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_OPTIONS,
                                    "description": "suggested answers, if there are natural choices"},
                        "why": {"type": "string", "description": "why you cannot go on without the answer"}
                    },
                    "required": ["question"]
                }
            }
        },
        "required": ["questions"]
    })
}

/// The questions of an `ask_user` call, or why its input is not acceptable (a message for
/// the model, which can call again). Unknown keys are ignored; types and limits are not.
pub fn parse_questions(input: &Value) -> Result<Vec<Question>, String> {
    let list = input
        .get("questions")
        .and_then(Value::as_array)
        .ok_or("the input needs \"questions\": a list of {\"question\", \"options\", \"why\"}")?;
    if list.is_empty() {
        return Err("\"questions\" is empty: ask at least one question".into());
    }
    if list.len() > MAX_QUESTIONS {
        return Err(format!(
            "{} questions: ask at most {MAX_QUESTIONS} in one call",
            list.len()
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let n = i + 1;
            let text = |key: &str| -> Result<Option<String>, String> {
                match item.get(key) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) if s.chars().count() > MAX_TEXT_CHARS => Err(format!(
                        "question {n}: \"{key}\" is longer than {MAX_TEXT_CHARS} characters"
                    )),
                    Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
                    Some(_) => Err(format!("question {n}: \"{key}\" must be a string")),
                }
            };
            if !item.is_object() {
                return Err(format!("question {n} must be an object with \"question\""));
            }
            let question = text("question")?
                .filter(|q| !q.is_empty())
                .ok_or(format!("question {n} has no \"question\" text"))?;
            let options = match item.get("options") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(options)) if options.len() > MAX_OPTIONS => {
                    return Err(format!(
                        "question {n}: at most {MAX_OPTIONS} options, not {}",
                        options.len()
                    ));
                }
                Some(Value::Array(options)) => options
                    .iter()
                    .map(|o| match o.as_str() {
                        Some(s) if s.chars().count() <= MAX_TEXT_CHARS => Ok(s.trim().to_owned()),
                        Some(_) => Err(format!(
                            "question {n}: an option is longer than {MAX_TEXT_CHARS} characters"
                        )),
                        None => Err(format!("question {n}: every option must be a string")),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(format!("question {n}: \"options\" must be a list")),
            };
            Ok(Question {
                question,
                options,
                why: text("why")?.filter(|w| !w.is_empty()),
            })
        })
        .collect()
}

/// The child's `--mcp-config`: coder's own binary as the `coder` server, serving `ask_user`,
/// always loaded.
pub fn mcp_config(coder_exe: &std::path::Path) -> String {
    json!({
        "mcpServers": {
            SERVER_NAME: {
                "type": "stdio",
                "command": coder_exe,
                "args": [SERVER_ARG],
                // The CLI defers MCP tools behind its tool search by default: the model
                // would not see ask_user in its first request (measured, CLI 2.1.330).
                "alwaysLoad": true,
            }
        }
    })
    .to_string()
}

/// `--allow-questions`, `--no-questions`, `--answers` (DESIGN §9).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct QuestionArgs {
    /// Offer the model the ask_user tool: it may stop the run to ask questions
    /// (needs_input). On by default with --contract, --guardrails or --answers.
    #[arg(long = "allow-questions", visible_alias = "allow_questions", action = clap::ArgAction::SetTrue, conflicts_with = "no_questions")]
    pub allow_questions: bool,

    /// Do not offer the ask_user tool, even with --contract or --guardrails.
    #[arg(long = "no-questions", action = clap::ArgAction::SetTrue)]
    pub no_questions: bool,

    /// Answers to the questions a session asked (a JSON list, in the questions' order, or
    /// a file holding one); needs --session-id of that session. A PROMPT, if given, follows
    /// the answers.
    #[arg(long, value_name = "FILE|JSON", value_parser = crate::text::non_blank)]
    pub answers: Option<String>,
}

impl QuestionArgs {
    /// Whether questions are on: the explicit flags (or the request file's
    /// `allow_questions`) win; else on when the prompt carries a contract or guardrails,
    /// or the run answers earlier questions.
    pub fn enabled(&self, from_file: Option<bool>, framed: bool, answering: bool) -> bool {
        if self.no_questions {
            return false;
        }
        if self.allow_questions {
            return true;
        }
        from_file.unwrap_or(framed || answering)
    }
}

/// The answers given to `--answers` or the request file's `answers`: JSON text, a file
/// holding it, or (from a request file) the JSON value itself. `name` is how messages name
/// them: the flag, or the field as its writer spelt it.
pub fn read_answers(name: &str, arg: &str) -> Result<Vec<String>, String> {
    if arg.trim().is_empty() {
        return Err(format!(
            "{name} is empty: {ANSWERS_SHAPE}, or a file holding them"
        ));
    }
    let trimmed = arg.trim_start();
    let text = if trimmed.starts_with('[') || trimmed.starts_with('{') || trimmed.starts_with('"') {
        arg.to_owned()
    } else {
        let path = std::path::Path::new(arg);
        let meta = std::fs::metadata(path).map_err(|e| {
            format!(
                "{name} {arg}: not JSON, and not a readable file ({}); {ANSWERS_SHAPE}, \
                 or a file holding them",
                crate::pipeline::prompt::file_problem(&e)
            )
        })?;
        if !meta.is_file() || meta.len() > 4 * 1024 * 1024 {
            return Err(format!("{name} {arg}: not a regular file of at most 4 MiB"));
        }
        std::fs::read_to_string(path).map_err(|e| format!("{name} {arg}: {e}"))?
    };
    let value: Value = crate::text::json::parse_strict(&text)
        .map_err(|e| format!("malformed {name} JSON: {e} ({ANSWERS_SHAPE})"))?;
    answers_of(name, &value)
}

/// What `--answers` must look like, for messages.
const ANSWERS_SHAPE: &str = "expected a list of answers in the questions' order, like \
[\"blue\", \"keep the old API\"], or {\"answers\": [...]}; an answer may also be \
{\"answer\": \"…\"}";

/// The answers in a JSON value (see [`ANSWERS_SHAPE`]).
pub fn answers_of(name: &str, value: &Value) -> Result<Vec<String>, String> {
    let list = match value {
        Value::Array(list) => list,
        Value::Object(map) => match map.get("answers") {
            Some(Value::Array(list)) => list,
            _ => return Err(format!("bad {name}: {ANSWERS_SHAPE}")),
        },
        _ => return Err(format!("bad {name}: {ANSWERS_SHAPE}")),
    };
    if list.is_empty() {
        return Err(format!("{name} is an empty list: {ANSWERS_SHAPE}"));
    }
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let text = match item {
                Value::String(s) => Some(s.as_str()),
                Value::Object(map) => map.get("answer").and_then(Value::as_str),
                _ => None,
            };
            match text.map(str::trim) {
                Some("") => Err(format!("{name}: answer {} is empty", i + 1)),
                Some(t) if t.chars().count() > MAX_ANSWER_CHARS => Err(format!(
                    "{name}: answer {} is longer than {MAX_ANSWER_CHARS} characters",
                    i + 1
                )),
                Some(t) => Ok(t.to_owned()),
                None => Err(format!(
                    "bad {name}: answer {} is not a string ({ANSWERS_SHAPE})",
                    i + 1
                )),
            }
        })
        .collect()
}

/// The resumed turn's prompt: each question with its answer, then `further` (the caller's
/// own prompt, if any). The counts must agree (checked by the caller).
pub fn answers_prompt(questions: &[Question], answers: &[String], further: Option<&str>) -> String {
    let mut text = String::from(
        "Here are the answers to the questions you asked with ask_user (the earlier call was \
         interrupted on purpose so that they could be asked):\n",
    );
    for (i, (q, a)) in questions.iter().zip(answers).enumerate() {
        text.push_str(&format!("\n{}. Question: {}\n", i + 1, q.question));
        text.push_str(&format!("   Answer: {}\n", a.replace('\n', "\n   ")));
    }
    match further.map(str::trim).filter(|f| !f.is_empty()) {
        Some(further) => {
            text.push_str("\nFurther instructions:\n");
            text.push_str(further);
        }
        None => text.push_str("\nContinue the task with these answers."),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_checked_and_trimmed() {
        let q = parse_questions(&json!({"questions": [
            {"question": " Which colour? ", "options": ["red", "blue"], "why": "unclear", "extra": 1},
            {"question": "Keep the API?"}
        ]}))
        .unwrap();
        assert_eq!(q[0].question, "Which colour?");
        assert_eq!(q[0].options, ["red", "blue"]);
        assert_eq!(q[1].why, None);
        for bad in [
            json!({}),
            json!({"questions": []}),
            json!({"questions": [{"question": ""}]}),
            json!({"questions": [{"question": 3}]}),
            json!({"questions": ["text"]}),
            json!({"questions": [{"question": "q", "options": "a"}]}),
            json!({"questions": [{"question": "x".repeat(MAX_TEXT_CHARS + 1)}]}),
            json!({"questions": vec![json!({"question": "q"}); MAX_QUESTIONS + 1]}),
        ] {
            assert!(parse_questions(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn answers_take_three_shapes_and_refuse_the_rest() {
        assert_eq!(
            read_answers("--answers", r#"["a", "b"]"#).unwrap(),
            ["a", "b"]
        );
        assert_eq!(
            read_answers("--answers", r#"{"answers": [{"answer": "a"}]}"#).unwrap(),
            ["a"]
        );
        for bad in [
            "[",
            "[]",
            "[1]",
            r#"[""]"#,
            r#"{"x": []}"#,
            "\"a\"",
            "/nonexistent/answers",
        ] {
            assert!(read_answers("--answers", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_prompt_pairs_each_question_with_its_answer() {
        let questions = parse_questions(&json!({"questions": [
            {"question": "Which colour?"}, {"question": "Size?"}
        ]}))
        .unwrap();
        let text = answers_prompt(&questions, &["blue".into(), "big\nvery".into()], None);
        assert!(
            text.contains("1. Question: Which colour?\n   Answer: blue\n"),
            "{text}"
        );
        assert!(
            text.contains("2. Question: Size?\n   Answer: big\n   very\n"),
            "{text}"
        );
        assert!(text.ends_with("Continue the task with these answers."));
        let text = answers_prompt(&questions, &["a".into(), "b".into()], Some("then commit"));
        assert!(text.ends_with("Further instructions:\nthen commit"));
    }
}
