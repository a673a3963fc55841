//! Keys in output (issue 14, class 11): the backend key the child is given must appear in
//! no channel coder prints or stores — the envelope (`result`, `error`, `error_detail`,
//! `last_lines`, `all_messages`), stderr (`--log-metrics`), the transcript and `coder runs
//! show` — in any spelling: literal, `\u`-escaped in a JSON line, or cut in two at the
//! 1,000-character `last_lines` cut, the 200-character error summary or the transcript's
//! 16 KiB long-line head.
//!
//! The fake child prints the key as it finds it in its own environment (`{{env:…}}`). A
//! control text of the same shape, which is not a key, goes through every channel next to
//! it and must come out unchanged: the test fails if a channel stops carrying the child's
//! text (and so would pass for the wrong reason) or if redaction mangles ordinary text.

mod common;

use common::Bounded;

use std::path::Path;
use std::process::Command;

use common::{CODER, Fake, Outcome, json_strings as strings, read_transcript, steps};
use serde_json::{Value, json};

/// The backend key: shaped like no well-known token, so only its value can redact it.
const KEY: &str = "zq7-Ky3pW9vXm2Lr8Tn4Bc6H";
/// The control: the same shape, not a key.
const CONTROL: &str = "Pm5-Hd2qX8wRk4Nv7Js3Ya1G";
/// The key as the child sees it.
const ENV_KEY: &str = "{{env:ANTHROPIC_AUTH_TOKEN}}";

/// The 16 KiB head a transcript keeps of a line longer than 256 KiB.
const TRANSCRIPT_HEAD: usize = 16 * 1024;

/// A stderr line longer than the transcript keeps, with `text` across the head's end
/// (10 bytes of it kept).
fn across_transcript_cut(fill: &str, text: &str) -> Value {
    let line = format!(
        "{}{text}{}",
        fill.repeat(TRANSCRIPT_HEAD - 10),
        fill.repeat(270 * 1024)
    );
    steps::stderr(&line)
}

/// `\u`-escaped spellings of the key in a JSON text.
fn escaped_spellings() -> Vec<String> {
    vec![
        format!("\\u007a{}", &KEY[1..]),
        KEY.chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect(),
    ]
}

/// Fails when `text` holds 8 or more consecutive characters of the key, literally or
/// `\u`-escaped as the child spelled it.
fn assert_no_key(channel: &str, text: &str) {
    for start in 0..=KEY.len() - 8 {
        let piece = &KEY[start..start + 8];
        assert!(
            !text.contains(piece),
            "{channel} holds {piece:?} of the key:\n{}",
            around(text, piece)
        );
    }
    for spelled in escaped_spellings() {
        assert!(
            !text.contains(&spelled[..12]),
            "{channel} holds the escaped key"
        );
    }
}

fn around(text: &str, piece: &str) -> String {
    let at = text.find(piece).unwrap_or(0);
    let (lo, hi) = (at.saturating_sub(120), (at + 120).min(text.len()));
    String::from_utf8_lossy(&text.as_bytes()[lo..hi]).into_owned()
}

/// Checks the transcript and `coder runs show` of a finished run; returns the transcript.
fn check_records(fake: &Fake, out: &Outcome) -> String {
    let path = out.envelope["transcript"]
        .as_str()
        .unwrap_or_else(|| panic!("no transcript: {}", out.explain()));
    let raw = std::fs::read_to_string(path).unwrap();
    assert_no_key("the transcript", &raw);
    let decoded: String = read_transcript(Path::new(path))
        .iter()
        .map(strings)
        .collect::<Vec<_>>()
        .join("\n");
    assert_no_key("the transcript's decoded strings", &decoded);
    for args in [&["show", "last"][..], &["show", "last", "--json"]] {
        let shown = Command::new(CODER)
            .arg("runs")
            .args(args)
            .arg("--state-dir")
            .arg(fake.state_dir())
            .output_bounded();
        assert!(shown.status.success(), "{shown:?}");
        let shown = String::from_utf8(shown.stdout).unwrap();
        assert_no_key("coder runs show", &shown);
        assert!(
            shown.contains(CONTROL),
            "runs show lost the control: {shown}"
        );
    }
    decoded
}

fn coder(fake: &Fake) -> common::Coder {
    fake.coder().env("ANTHROPIC_AUTH_TOKEN", KEY)
}

#[test]
fn a_successful_run_prints_and_stores_the_key_nowhere() {
    let escaped_event = |spelled: &str| {
        json!({"step": "emit", "text": format!(
            r#"{{"type":"system","subtype":"notice","text":"escaped {spelled} next to {CONTROL}"}}"#
        )})
    };
    let spellings = escaped_spellings();
    let fake = Fake::new(json!([
        steps::init(),
        steps::text(&format!("the key is {ENV_KEY}, the control {CONTROL}")),
        escaped_event(&spellings[0]),
        escaped_event(&spellings[1]),
        {"step": "tool_use", "name": CONTROL, "input": {"command": format!("curl -H 'x-api-key: {ENV_KEY}'")}},
        {"step": "tool_result", "content": format!("read {ENV_KEY} and {CONTROL}")},
        steps::stderr(&format!("stderr: {ENV_KEY} {CONTROL}")),
        across_transcript_cut("y", ENV_KEY),
        across_transcript_cut("z", CONTROL),
        steps::result_ok(&format!("done with {ENV_KEY} and {CONTROL}")),
    ]));
    let out = coder(&fake)
        .args(["--return-all-messages", "--log-metrics"])
        .arg(format!("use {KEY} and {CONTROL}"))
        .run();
    assert_eq!(out.envelope["success"], json!(true), "{}", out.explain());
    // The child did see the key.
    assert_eq!(
        fake.record()
            .env()
            .get("ANTHROPIC_AUTH_TOKEN")
            .map(String::as_str),
        Some(KEY)
    );
    assert_eq!(
        out.envelope["result"],
        json!(format!("done with [REDACTED] and {CONTROL}"))
    );
    assert_no_key("stdout", &out.stdout);
    assert_no_key("the envelope's strings", &strings(&out.envelope));
    assert_no_key("stderr", &out.stderr);
    let messages = strings(&out.envelope["all_messages"]);
    for expected in [
        format!("the key is [REDACTED], the control {CONTROL}"),
        format!("escaped [REDACTED] next to {CONTROL}"),
        format!("read [REDACTED] and {CONTROL}"),
    ] {
        assert!(messages.contains(&expected), "{expected:?} in {messages}");
    }
    let metrics = out
        .stderr
        .lines()
        .find(|l| l.contains("wall_ms"))
        .unwrap_or_else(|| panic!("no --log-metrics line: {}", out.explain()));
    assert!(metrics.contains(CONTROL), "{metrics}");

    let transcript = check_records(&fake, &out);
    for expected in [
        format!("use [REDACTED] and {CONTROL}"),
        format!("stderr: [REDACTED] {CONTROL}"),
        format!("escaped [REDACTED] next to {CONTROL}"),
        // The control across the 16 KiB cut keeps its first 10 bytes; the key loses them.
        format!("{}{}", "z".repeat(64), &CONTROL[..10]),
        format!("{}[REDACTED]", "y".repeat(64)),
    ] {
        assert!(
            transcript.contains(&expected),
            "{expected:?} missing in the transcript"
        );
    }
}

#[test]
fn a_failed_run_prints_and_stores_the_key_nowhere() {
    // The error summary is cut at 200 characters, `last_lines` at 1,000: both cuts fall
    // inside the key (and, for the control, inside the control).
    let at = |n: usize, fill: &str, text: &str| format!("{}{text} tail", fill.repeat(n));
    let fake = Fake::new(json!([
        steps::init(),
        steps::stderr(&at(990, "x", ENV_KEY)),
        steps::stderr(&at(990, "w", CONTROL)),
        {"step": "emit", "text": format!(
            r#"{{"type":"system","subtype":"notice","text":"\u007a{} {CONTROL}"}}"#, &KEY[1..]
        )},
        {"step": "result", "is_error": true, "api_error_status": 401,
         "text": at(190, "e", &format!("{ENV_KEY} {CONTROL}"))},
    ]));
    let out = coder(&fake).arg(format!("task {CONTROL}")).run();
    assert_eq!(out.envelope["success"], json!(false), "{}", out.explain());
    assert_no_key("stdout", &out.stdout);
    assert_no_key("the envelope's strings", &strings(&out.envelope));
    assert_no_key("stderr", &out.stderr);

    let detail = &out.envelope["error_detail"];
    let message = detail["message"].as_str().unwrap();
    assert!(message.contains("[REDACTED]"), "{message}");
    assert!(message.contains(CONTROL), "{message}");
    let lines: Vec<&str> = detail["last_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let line_of = |fill: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(&fill.repeat(10)))
            .unwrap_or_else(|| panic!("no {fill} line in {lines:?}"))
    };
    assert_eq!(
        line_of("x"),
        format!("{}[REDACTED] …[line truncated]", "x".repeat(990))
    );
    assert_eq!(
        line_of("w"),
        format!("{}{} …[line truncated]", "w".repeat(990), &CONTROL[..10])
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("[REDACTED] {CONTROL}"))),
        "the escaped key in a JSON line: {lines:?}"
    );
    check_records(&fake, &out);
}
