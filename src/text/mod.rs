//! One home for the text rules every part of coder applies the same way, so that two
//! copies of a rule can never disagree (DESIGN §7):
//!
//! - [`redact`]: keeping credentials out of everything coder prints or stores, in every
//!   spelling (literal or JSON-escaped), also where a text is cut;
//! - [`names`]: which environment variables hold credentials;
//! - [`tool_result`]: a tool result's content as text;
//! - [`path`]: finding an executable on `PATH`;
//! - [`stdin`]: reading the task from standard input;
//! - [`one_line`]: shortening text to one line for messages;
//! - [`shell_quote`]: a word for a copy-pasteable shell command in a hint;
//! - [`diff_path`]: a path as a diff's header names it;
//! - [`terminal_safe`]: text for a terminal, its control characters made visible;
//! - [`json`]: parsing the JSON a user gives, refusing a key given twice;
//! - [`near_miss`]: the known name a mistyped one likely means.
//!
//! This module is a leaf: it depends on nothing else in the crate (only `std`, `serde`,
//! `serde_json`, `memchr` and `aho-corasick`), so any module may use it without an import cycle.

pub mod json;
pub mod names;
pub mod path;
pub mod redact;
pub mod stdin;
pub mod tool_result;

pub use names::is_secret_name;
pub use redact::{REDACTED, Secrets};

/// Levenshtein distance with adjacent transpositions (`rnus` is one edit from `runs`).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// The name in `known` that `given` likely means: the same once case and `-`/`_` are set
/// aside (`Prompt`, `return-metrics`), else the nearest within two edits (one for names
/// under four letters), when only one name is that near.
pub fn near_miss<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    let plain = |k: &str| k.to_ascii_lowercase().replace('-', "_");
    let given = plain(given);
    if let Some(same) = known.iter().find(|k| plain(k) == given) {
        return Some(same);
    }
    let mut near = known.iter().copied().filter(|k| {
        let allowed = if k.len() < 4 { 1 } else { 2 };
        edit_distance(&given, &plain(k)) <= allowed
    });
    let first = near.next()?;
    // Two spellings of one name (`PROMPT`, `prompt`) are one candidate.
    near.all(|k| plain(k) == plain(first)).then_some(first)
}

/// A flag's value that is not empty or only white space (a clap `value_parser`): an empty
/// `--target ""` (a shell variable that was not set) would otherwise be taken silently,
/// as nothing or as the default.
pub fn non_blank(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        return Err("it is empty: give a value, or leave the flag out".to_owned());
    }
    Ok(value.to_owned())
}

/// Quotes `text` (a path, a backend name) for a copy-pasteable shell command.
pub fn shell_quote(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:@".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// `side` (`a/`, `b/`) and `path` as a diff's header names them, git's way: as they are,
/// or in double quotes with C escapes (`\n`, `\"`, `\\`, `\303\251`) when the path holds a
/// control character, a quote, a backslash or a byte past ASCII (`core.quotePath`'s
/// default). Round thirty-two's review: coder's own diff wrote a path holding a line
/// break as it is, and the agent's file named `x⏎--- /dev/null⏎+++ b/.envrc⏎@@ …` made
/// the diff a section of its choosing for whoever applies it.
pub fn diff_path(side: &str, path: &str) -> String {
    let plain = |b: u8| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\';
    if path.bytes().all(plain) {
        return format!("{side}{path}");
    }
    let mut out = format!("\"{side}");
    for b in path.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            _ if plain(b) => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

/// `text` for a terminal: every control character but line feed and tab (C0, DEL, and
/// the C1 range, where U+009B is a CSI to some terminals) written as its escape (`\u{1b}`).
///
/// What coder prints for people holds the agent's text (tool calls and their output, its
/// answer, names of files it made). Printed raw, an escape sequence in it acts on the
/// user's terminal: `ESC [2K` and a carriage return erased the line naming a tool call
/// from `coder runs show`, and OSC 52 wrote the user's clipboard (round nineteen's
/// review, `sandbox_round19_review::the_agents_text_does_not_drive_the_users_terminal`).
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `json` (serde's output) with the characters [`terminal_safe`] escapes that JSON leaves
/// raw (DEL and the C1 range: serde escapes only C0) written as JSON's own escapes
/// (`\u009b`): the same value to any parser, nothing that drives a terminal. The envelope,
/// `coder fs` and `coder runs --json` print the agent's text (its answer, names of files
/// it made, a file's content) to a terminal as often as to a program, and a U+009B (CSI to
/// some terminals) in it went there raw (round twenty-one's review).
pub fn json_terminal_safe(json: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !json.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The first line of `text`, cut to `max_chars` characters with an ellipsis.
///
/// The ellipsis also tells [`Secrets::redact`] where a text was cut, so that a secret cut
/// here before redaction leaves no long prefix behind.
pub fn one_line(text: &str, max_chars: usize) -> String {
    // A short text without line breaks is its own first line, whole (the common case: a
    // tool call's path or command; the general way collects it char by char).
    if text.len() <= max_chars && !text.contains(['\n', '\r']) {
        return text.to_owned();
    }
    let first = text.lines().next().unwrap_or("");
    let mut out: String = first.chars().take(max_chars).collect();
    if first.chars().count() > max_chars || text.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

/// `text` if it is at most `max_bytes` long; else its head cut at a character boundary at
/// most `max_bytes` in, followed by an explicit marker with the full size
/// (`… [truncated: 104857600 bytes in all]`).
pub fn head_with_marker(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max_bytes {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    std::borrow::Cow::Owned(format!(
        "{}… [truncated: {} bytes in all]",
        &text[..cut],
        text.len()
    ))
}

#[cfg(test)]
mod terminal_tests {
    use super::{json_terminal_safe, terminal_safe};

    #[test]
    fn json_keeps_its_value_and_loses_what_drives_a_terminal() {
        let value = serde_json::json!({"a": "x\u{1b}[2K\u{9b}2J\u{7f}y\u{e9}"});
        let json = serde_json::to_string(&value).unwrap();
        let safe = json_terminal_safe(&json);
        assert!(!safe.chars().any(|c| c.is_control()), "{safe}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
        assert!(matches!(
            json_terminal_safe("{}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(terminal_safe("a\tb\nc"), "a\tb\nc");
        assert_eq!(
            terminal_safe("x\u{1b}[2K\r\u{7}\u{9b}\u{7f}"),
            "x\\u{1b}[2K\\u{d}\\u{7}\\u{9b}\\u{7f}"
        );
    }
}

#[cfg(test)]
mod head_tests {
    use super::head_with_marker;

    #[test]
    fn heads_are_cut_at_a_character_boundary_with_the_full_size() {
        assert_eq!(head_with_marker("short", 10), "short");
        let cut = head_with_marker("ééé", 3);
        assert_eq!(cut, "é… [truncated: 6 bytes in all]");
    }
}

#[cfg(test)]
mod tests {
    use super::{near_miss, one_line};

    #[test]
    fn a_near_miss_names_the_one_name_it_likely_means() {
        let known = [
            "PROMPT",
            "prompt",
            "cd",
            "sandbox",
            "wait_s",
            "repair_turns",
            "return_diff",
        ];
        assert_eq!(near_miss("Prompt", &known), Some("PROMPT"));
        assert_eq!(near_miss("promt", &known), Some("PROMPT"));
        assert_eq!(near_miss("repiar-turns", &known), Some("repair_turns"));
        assert_eq!(near_miss("wait", &known), Some("wait_s"));
        assert_eq!(near_miss("sandbx", &known), Some("sandbox"));
        // Short names allow one edit; far names and ties give nothing.
        assert_eq!(near_miss("cx", &known), Some("cd"));
        assert_eq!(near_miss("xy", &known), None);
        assert_eq!(near_miss("colour", &known), None);
        assert_eq!(
            near_miss("return_diffs", &["return_diff", "return_diffz"]),
            None
        );
    }

    #[test]
    fn one_line_keeps_the_first_line_cut_with_an_ellipsis() {
        // The short texts taken whole, and the texts around them taken the general way.
        let cases = [
            ("", ""),
            ("npm test", "npm test"),
            ("a\r", "a\r"),
            ("a\rb", "a\rb"),
            ("a\r\nb", "a…"),
            ("a\n", "a"),
            ("\nb", "…"),
        ];
        for (text, shown) in cases {
            assert_eq!(one_line(text, 80), shown, "{text:?}");
        }
        let exact = "é".repeat(40);
        assert_eq!(one_line(&exact, 40), exact);
        assert_eq!(one_line(&exact, 39), format!("{}…", "é".repeat(39)));
        let long = "x".repeat(81);
        assert_eq!(one_line(&long, 80), format!("{}…", "x".repeat(80)));
        assert_eq!(one_line(&long[..80], 80), long[..80]);
    }
}

#[cfg(test)]
mod diff_path_tests {
    use super::diff_path;

    #[test]
    fn a_name_git_would_quote_is_quoted_as_git_quotes_it() {
        assert_eq!(diff_path("a/", "src/x y.rs"), "a/src/x y.rs");
        assert_eq!(diff_path("b/", "é/x"), "\"b/\\303\\251/x\"");
        assert_eq!(
            diff_path("a/", "x\n+++ b/\"q\"\\\t"),
            "\"a/x\\n+++ b/\\\"q\\\"\\\\\\t\""
        );
    }
}
