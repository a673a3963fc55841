//! A tool result's content as text. The CLI writes a tool result's `content` either as a
//! string or as an array of parts (`{"type": "text", "text": …}`, images, …); every reader
//! of tool results (denial detection, `coder runs show`, the replay matcher) wants the text
//! of it, joined in the way that suits its output.

use serde_json::Value;

/// How the text parts of an array content are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// One part per line: keeps line-based readers (denial detection, matching) exact.
    Lines,
    /// One line for display (`coder runs show`).
    Spaces,
}

impl Join {
    fn separator(self) -> &'static str {
        match self {
            Join::Lines => "\n",
            Join::Spaces => " ",
        }
    }
}

/// The text of a tool result's `content`: the string itself, or the `text` of every part of
/// an array that has one (parts without text, such as images, are skipped), joined by
/// `join`. `None` for any other JSON value (absent, `null`, a number, an object).
pub fn content_text(content: &Value, join: Join) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(join.separator()),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_and_text_parts() {
        assert_eq!(
            content_text(&json!("plain"), Join::Lines).as_deref(),
            Some("plain")
        );
        let parts = json!([
            {"type": "text", "text": "a"},
            {"type": "image", "source": {}},
            {"type": "text", "text": "b"},
        ]);
        assert_eq!(content_text(&parts, Join::Lines).as_deref(), Some("a\nb"));
        assert_eq!(content_text(&parts, Join::Spaces).as_deref(), Some("a b"));
        assert_eq!(content_text(&Value::Null, Join::Lines), None);
        assert_eq!(content_text(&json!({"x": 1}), Join::Spaces), None);
    }
}
