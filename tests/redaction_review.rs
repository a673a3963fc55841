//! Attacks on the transcript's redaction where a long event line is written from its own
//! buffer (searched in three overlapping pieces: the entry's head with the line's first
//! bytes, the line, the line's last bytes with the closing brace) and where the pre-filter
//! searches `\u` escapes only with the first two hex digits of the secrets' characters.
//!
//! The fake child prints event lines of 2 KiB and more (and lines at the thresholds) with a
//! secret coder knows from its environment, or a token shape, at every offset near the
//! pieces' joins, in raw and JSON-escaped spellings. No spelling of a secret may reach the
//! transcript: not in its raw bytes, not in its decoded strings. Every line carries a
//! marker, and the transcript must hold every marker and a `[REDACTED]` per attack line, so
//! a test cannot pass because the lines went missing.

mod common;

use common::{Fake, json_strings as strings, notice, steps, transcript_of};
use serde_json::{Value, json};

/// ANTHROPIC_AUTH_TOKEN: 24 bytes.
const KEY: &str = "zq7-Ky3pW9vXm2Lr8Tn4Bc6H";
/// GITHUB_TOKEN: the shortest value redacted (6 bytes).
const SHORT: &str = "h7Qz-2";
/// AWS_SECRET_ACCESS_KEY: 40 bytes with `/` and `+` (JSON may escape `/`).
const LONG: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY+EXAMPLEK";
/// MY_API_KEY: non-ASCII characters, one astral (a surrogate pair when escaped).
const WIDE: &str = "pässwörd✓𝄞42x";

/// The JSON `\u` escape of `c` (a surrogate pair for an astral character).
fn escape(c: char, upper: bool) -> String {
    let mut units = [0u16; 2];
    c.encode_utf16(&mut units)
        .iter()
        .map(|u| {
            if upper {
                format!("\\u{u:04X}")
            } else {
                format!("\\u{u:04x}")
            }
        })
        .collect()
}

/// Spellings of `secret` inside a JSON string: literal, its first character escaped in
/// upper case, every character escaped in lower case, every other character escaped in
/// alternating case, and `/` as `\/`.
fn spellings(secret: &str) -> Vec<String> {
    let mut chars = secret.chars();
    let first = chars.next().unwrap();
    let mut out = vec![
        secret.to_owned(),
        format!("{}{}", escape(first, true), chars.as_str()),
        secret.chars().map(|c| escape(c, false)).collect(),
        secret
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 1 {
                    escape(c, i % 4 == 1)
                } else {
                    c.to_string()
                }
            })
            .collect(),
    ];
    if secret.contains('/') {
        out.push(secret.replace('/', "\\/"));
    }
    out
}

/// Fails when the transcript holds a secret literally, in one of the `spelled` forms, or
/// in a decoded string; or lacks a marker of `marks`, or has fewer than `redactions`.
fn assert_clean(
    raw: &[u8],
    secrets: &[&str],
    spelled: &[String],
    marks: &[String],
    redactions: usize,
) {
    let text = String::from_utf8_lossy(raw);
    for s in secrets
        .iter()
        .map(|s| s.to_string())
        .chain(spelled.iter().cloned())
    {
        if let Some(at) = text.find(&s) {
            let bytes = text.as_bytes();
            let around = &bytes[at.saturating_sub(100)..(at + s.len() + 100).min(bytes.len())];
            panic!(
                "the transcript holds {s:?}: …{}…",
                String::from_utf8_lossy(around)
            );
        }
    }
    // Every entry is JSON but where a secret spanning JSON syntax was cut out of it.
    let mut decoded = String::new();
    for line in text.lines() {
        if let Ok(entry) = serde_json::from_str::<Value>(line) {
            decoded.push_str(&strings(&entry));
            decoded.push('\n');
        } else {
            assert!(
                line.contains("[REDACTED]"),
                "a transcript line is not JSON: {line:.300}"
            );
        }
    }
    for s in secrets {
        assert!(!decoded.contains(s), "a decoded string holds {s:?}");
    }
    for mark in marks {
        assert!(
            text.contains(mark.as_str()),
            "{mark} missing: the line did not arrive"
        );
    }
    let found = text.matches("[REDACTED]").count();
    assert!(
        found >= redactions,
        "{found} redactions, {redactions} expected at least"
    );
}

fn env_all() -> Vec<(&'static str, &'static str)> {
    vec![
        ("ANTHROPIC_AUTH_TOKEN", KEY),
        ("GITHUB_TOKEN", SHORT),
        ("AWS_SECRET_ACCESS_KEY", LONG),
        ("MY_API_KEY", WIDE),
    ]
}

/// One line per secret, spelling and offset (0 to 45), made by `line(mark, spelling,
/// offset)`; the transcript of them all must hold none of the secrets.
fn assert_clean_at_every_offset(line: impl Fn(&str, &str, usize) -> String) {
    let mut lines = Vec::new();
    let mut spelled = Vec::new();
    let mut marks = Vec::new();
    for secret in [SHORT, KEY, LONG, WIDE] {
        for form in spellings(secret) {
            for offset in 0..=45 {
                let mark = format!("mark{:04}", lines.len());
                lines.push(line(&mark, &form, offset));
                marks.push(mark);
            }
            spelled.push(form);
        }
    }
    let raw = transcript_of(&lines, &env_all());
    spelled.retain(|s| !s.is_empty());
    assert_clean(
        &raw,
        &[SHORT, KEY, LONG, WIDE],
        &spelled,
        &marks,
        lines.len(),
    );
}

#[test]
fn secrets_at_every_offset_before_the_line_end_in_every_spelling() {
    // The end piece is the line's last 39 bytes (the longest secret, 40, less one) and
    // `}`: the secret ends 0 to 45 bytes before the string's quote, so it lies in that
    // piece, across its start, and before it. Line lengths go round 2048.
    assert_clean_at_every_offset(|mark, form, tail| notice(mark, form, tail, 2046 + (tail % 5)));
}

#[test]
fn secrets_at_every_offset_after_the_line_start() {
    // The first piece is the entry's head and the line's first 39 bytes: the secret as
    // the event's first key, after 0 to 45 bytes of padding.
    assert_clean_at_every_offset(|mark, form, pad| {
        let body = notice(mark, "", 0, 2048 + pad % 3);
        format!(r#"{{"{}{form}":1,{}"#, "p".repeat(pad), &body[1..])
    });
}

#[test]
fn secrets_across_the_entry_head_and_the_closing_brace() {
    // Values that only the whole entry holds: one across the entry's `"event":` and the
    // line's first bytes, one across the line's last bytes and the entry's `}`. With and
    // without whitespace around the line (which the entry leaves out), at 2048 bytes
    // after the trim, and one byte less.
    const HEAD: &str = r#"nt":{"type"#;
    const END: &str = r#"Q9zq7"}}"#;
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for len in [2047, 2048, 2049, 4096] {
        for (before, after) in [("", ""), ("  ", "  "), ("\t", " \t")] {
            let mark = format!("mark{:04}", lines.len());
            let event = notice(&mark, "", 0, len - 13);
            let event = format!(r#"{},"z":"Q9zq7"}}"#, &event[..event.len() - 1]);
            lines.push(format!("{before}{event}{after}"));
            marks.push(mark);
        }
    }
    let raw = transcript_of(&lines, &[("JOIN_TOKEN", HEAD), ("END_TOKEN", END)]);
    // Every line starts `{"type"` (the head's secret) and ends `"}` (the end's): two each.
    assert_clean(&raw, &[HEAD, END], &[], &marks, 2 * lines.len());
}

#[test]
fn token_shapes_at_every_offset_near_the_joins() {
    // No known value: the pieces overlap by `github_pat_` less one byte (10).
    let tokens = [
        "ghp_0123456789abcdefABCDEF0123",
        "github_pat_11ABCDEFG0123456789abcdef",
        "sk-ant-api03-AAAA1111BBBB2222cccc",
    ];
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for token in tokens
        .iter()
        .map(|t| t.to_string())
        .chain(["Bearer abc123def456ghi789jkl".to_owned()])
    {
        for tail in 0..=14 {
            let mark = format!("mark{:04}", lines.len());
            lines.push(notice(&mark, &format!("{token} "), tail, 2048 + tail % 2));
            marks.push(mark);
        }
        for pad in 0..=14 {
            let mark = format!("mark{:04}", lines.len());
            let body = notice(&mark, "", 0, 2048);
            lines.push(format!(
                r#"{{"{}{token}":1,{}"#,
                "-".repeat(pad),
                &body[1..]
            ));
            marks.push(mark);
        }
    }
    let raw = transcript_of(&lines, &[]);
    let text = String::from_utf8_lossy(&raw);
    for token in tokens {
        // The part after the prefix is the credential.
        let secret = &token[token.find(['_', '-']).unwrap() + 1..];
        let secret = secret.trim_start_matches("pat_");
        assert!(!text.contains(secret), "the transcript holds {token}");
    }
    assert!(
        !text.contains("abc123def456ghi789jkl"),
        "the transcript holds the bearer token"
    );
    assert_clean(&raw, &[], &[], &marks, lines.len());
}

#[test]
fn a_long_secret_sets_the_overlap_at_the_size_threshold() {
    // A 1,100-byte value: the pieces overlap by 1,099 bytes, so a line is written as it
    // is only above 2,198 bytes. Lines round that size, the long value and the short one
    // near both ends.
    let long: String = (0..1100)
        .map(|i| char::from(b"aB3-"[i % 4] + (i / 4 % 20) as u8))
        .collect();
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for len in [2196, 2197, 2198, 2199, 2200, 2300, 3400] {
        for tail in [0, 1, 2, 5] {
            let mark = format!("mark{:04}", lines.len());
            lines.push(notice(&mark, SHORT, tail, len));
            marks.push(mark);
            let mark = format!("mark{:04}", lines.len());
            let body = notice(&mark, "", 0, len);
            lines.push(format!(
                r#"{{"{}{SHORT}":1,{}"#,
                "p".repeat(tail),
                &body[1..]
            ));
            marks.push(mark);
        }
        let mark = format!("mark{:04}", lines.len());
        lines.push(notice(&mark, &long, 0, len + 1100));
        marks.push(mark);
    }
    let raw = transcript_of(&lines, &[("GITHUB_TOKEN", SHORT), ("BIG_SECRET", &long)]);
    assert_clean(&raw, &[SHORT, &long], &[], &marks, lines.len());
}

#[test]
fn escapes_of_characters_no_secret_holds_leave_other_escapes_whole() {
    // `\u` escapes of other characters (the pre-filter skips them) beside a secret spelled
    // with escapes of its own characters in one long line: the secret goes, the rest stays.
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for form in spellings(WIDE).into_iter().chain(spellings(KEY)) {
        let mark = format!("mark{:04}", lines.len());
        lines.push(notice(
            &mark,
            &format!(r"\u4e2d\u2714\n\u001b[0m {form}"),
            3,
            2100,
        ));
        marks.push(mark);
    }
    let raw = transcript_of(&lines, &env_all());
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.contains(r"\u4e2d\u2714\n\u001b[0m "),
        "other escapes were lost"
    );
    assert_clean(&raw, &[KEY, WIDE], &[], &marks, lines.len());
}

#[test]
fn a_cut_or_broken_long_event_line_loses_the_secret() {
    // Over 256 KiB (cut to its 16 KiB head: the key across the cut, and whole inside),
    // and a long line with a byte that is not UTF-8.
    let mut scenario = vec![steps::init()];
    let head = 16 * 1024;
    let mark = "mark-cut";
    let prefix = format!(r#"{{"type":"system","subtype":"notice","text":"{mark} "#);
    let big = format!(
        "{prefix}{}{KEY}{}\"}}",
        "a".repeat(head - prefix.len() - 10),
        "b".repeat(270 * 1024)
    );
    scenario.push(json!({"step": "emit", "text": big}));
    let inside = format!("{prefix}{KEY} {}\"}}", "c".repeat(270 * 1024));
    scenario.push(json!({"step": "emit", "text": inside}));
    let broken = format!("{prefix}mark-broken {}", "d".repeat(2100));
    let mut hex: String = broken.bytes().map(|b| format!("{b:02x}")).collect();
    hex.push_str("ff");
    hex.extend(
        format!(" {LONG} \"}}\n")
            .bytes()
            .map(|b| format!("{b:02x}")),
    );
    scenario.push(json!({"step": "raw", "hex": hex}));
    scenario.push(steps::result_ok("done"));
    let fake = Fake::new(Value::Array(scenario));
    let out = fake
        .coder()
        .env("ANTHROPIC_AUTH_TOKEN", KEY)
        .env("AWS_SECRET_ACCESS_KEY", LONG)
        .arg("task")
        .run();
    assert_eq!(out.envelope["success"], json!(true), "{}", out.explain());
    let raw = std::fs::read(out.envelope["transcript"].as_str().unwrap()).unwrap();
    let text = String::from_utf8_lossy(&raw);
    for piece in KEY.as_bytes().windows(8).chain(LONG.as_bytes().windows(8)) {
        let piece = std::str::from_utf8(piece).unwrap();
        assert!(
            !text.contains(piece),
            "the transcript holds {piece:?} of a secret"
        );
    }
    assert_clean(
        &raw,
        &[KEY, LONG],
        &[],
        &[mark.to_owned(), "mark-broken".to_owned()],
        3,
    );
}

#[test]
fn a_secret_value_ending_in_a_newline_is_still_redacted() {
    // A value read from a file keeps its final newline (an env file, `export K="$(cat f;
    // echo)"`); the child prints the value without it (or its JSON spelling `\n`).
    let marks: Vec<String> = (0..3).map(|i| format!("mark{i:04}")).collect();
    let lines = vec![
        notice(&marks[0], LONG, 2, 2100),
        notice(&marks[1], LONG, 0, 100),
        notice(&marks[2], &format!(r"{LONG}\n"), 0, 100),
    ];
    let value = format!("{LONG}\n");
    let raw = transcript_of(&lines, &[("AWS_SECRET_ACCESS_KEY", &value)]);
    assert_clean(&raw, &[LONG], &spellings(LONG), &marks, lines.len());
}
