//! Failures the child reports or causes, one per row of the error-kind table, each with its
//! exit code, the fixed `error_detail` fields, and the session id when one is known.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{Fake, Outcome, steps};
use serde_json::json;

const UNKNOWN_SESSION: &str = "99999999-2222-4333-8444-555555555555";

/// The session id the child was started with.
fn child_session(fake: &Fake) -> String {
    let record = fake.record();
    record
        .flag_value("--session-id")
        .or_else(|| record.flag_value("--resume"))
        .expect("a session flag")
}

fn assert_session_reported(out: &Outcome, fake: &Fake) {
    assert_eq!(
        out.session_id(),
        Some(child_session(fake).as_str()),
        "SESSION_ID in a failure: {}",
        out.explain()
    );
}

#[test]
fn missing_executable_is_command_not_found_with_install_hint() {
    let fake = Fake::new(json!([]));
    let missing = fake.root().join("no-such-dir/claude");
    let out = fake.coder().claude_bin(&missing).arg("task").run();
    let detail = out.assert_failure("command_not_found", 127);
    let text = format!("{} {}", out.envelope["error"], detail).to_lowercase();
    assert!(
        text.contains("install"),
        "an install hint: {}",
        out.explain()
    );
    assert!(
        text.contains("no-such-dir"),
        "names the path: {}",
        out.explain()
    );
}

#[test]
fn non_executable_file_is_command_not_found() {
    let fake = Fake::new(json!([]));
    let plain = fake.root().join("claude-not-executable");
    std::fs::write(&plain, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = fake.coder().claude_bin(&plain).arg("task").run();
    out.assert_failure("command_not_found", 127);
}

#[test]
fn claude_missing_from_path_is_command_not_found() {
    let fake = Fake::new(json!([]));
    let empty_bin = fake.root().join("empty-bin");
    std::fs::create_dir_all(&empty_bin).unwrap();
    let out = fake
        .coder()
        .no_claude_bin()
        .env("PATH", &empty_bin)
        .arg("task")
        .run();
    let detail = out.assert_failure("command_not_found", 127);
    let text = format!("{} {}", out.envelope["error"], detail).to_lowercase();
    assert!(
        text.contains("install"),
        "an install hint: {}",
        out.explain()
    );
}

#[test]
fn api_error_result_is_upstream_error_with_http_status() {
    let fake = Fake::new(json!([
        {"step": "replay", "file": "api-error-500.jsonl"},
        steps::exit(1)
    ]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["http_status"], 500, "{}", out.explain());
    assert_eq!(detail["exit_code"], 1, "{}", out.explain());
    assert_session_reported(&out, &fake);
    assert!(
        out.envelope["error"].as_str().unwrap().contains("500"),
        "{}",
        out.explain()
    );
}

#[test]
fn rate_limit_is_upstream_error_429() {
    let fake = Fake::new(json!([
        {"step": "replay", "file": "api-error-429.jsonl"},
        steps::exit(1)
    ]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["http_status"], 429, "{}", out.explain());
}

#[test]
fn not_logged_in_is_upstream_error() {
    let fake = Fake::new(json!([
        {"step": "replay", "file": "auth-not-logged-in.jsonl"},
        steps::exit(1)
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_failure("upstream_error", 1);
    assert_session_reported(&out, &fake);
}

#[test]
fn synthetic_error_without_result_is_upstream_error() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "api_retry", "error_status": 529, "error": "overloaded"},
        {"step": "synthetic_error", "error": "server_error", "api_error_status": 529,
         "text": "API Error: 529 Overloaded (fake)."},
        steps::exit(1)
    ]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["http_status"], 529, "{}", out.explain());
}

#[test]
fn undecodable_stdout_without_result_is_json_decode() {
    let fake = Fake::new(json!([
        {"step": "emit", "text": "<html>502 Bad Gateway</html>"},
        {"step": "raw", "hex": "c328ff0a"},
        {"step": "emit", "text": "{\"type\": \"result\", \"trunc"},
        steps::exit(0)
    ]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("json_decode", 1);
    assert_eq!(detail["json_decode_errors"], 3, "{}", out.explain());
    // Nothing in the stream confirmed a session, so none is reported.
    assert_eq!(
        out.envelope["SESSION_ID"],
        serde_json::Value::Null,
        "{}",
        out.explain()
    );
}

#[test]
fn resume_of_unknown_session_is_protocol_missing_session() {
    let fake = Fake::new(json!([
        {"step": "replay", "file": "resume-unknown-session.jsonl", "keep_session": true},
        steps::stderr(&format!("No conversation found with session ID: {UNKNOWN_SESSION}")),
        steps::exit(1)
    ]));
    let out = fake
        .coder()
        .args(["--session-id", UNKNOWN_SESSION, "go on"])
        .run();
    out.assert_failure("protocol_missing_session", 1);
    assert_eq!(out.session_id(), Some(UNKNOWN_SESSION), "{}", out.explain());
}

#[test]
fn empty_result_text_is_empty_result() {
    let fake = Fake::new(json!([steps::init(), steps::result_ok(""), steps::exit(0)]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("empty_result", 1);
    assert_eq!(detail["exit_code"], 0, "{}", out.explain());
    assert_session_reported(&out, &fake);
}

#[test]
fn clean_exit_without_result_is_empty_result() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::text("thinking about it"),
        steps::exit(0)
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_failure("empty_result", 1);
    assert_session_reported(&out, &fake);
}

#[test]
fn nonzero_exit_without_result_is_subprocess_error() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::stderr("Error: something broke inside the CLI"),
        steps::exit(3)
    ]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("subprocess_error", 1);
    assert_eq!(detail["exit_code"], 3, "{}", out.explain());
    assert!(
        out.last_lines()
            .iter()
            .any(|l| l.contains("something broke inside the CLI")),
        "stderr in last_lines: {}",
        out.explain()
    );
    assert_session_reported(&out, &fake);
}

#[test]
fn argument_error_of_the_cli_is_subprocess_error() {
    // What the real CLI does on a bad flag: a line on stderr, no stdout, exit 1.
    let fake = Fake::new(json!([
        steps::stderr("error: unknown option '--frobnicate'"),
        steps::exit(1)
    ]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("subprocess_error", 1);
    assert_eq!(detail["exit_code"], 1, "{}", out.explain());
    assert!(
        out.last_lines().iter().any(|l| l.contains("--frobnicate")),
        "{}",
        out.explain()
    );
}

#[test]
fn child_killed_by_signal_is_subprocess_error() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::text("about to crash"),
        {"step": "kill_self", "signal": "KILL"}
    ]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("subprocess_error", 1);
    assert!(detail["exit_code"].is_null(), "{}", out.explain());
    let text = format!("{} {}", out.envelope["error"], detail["message"]);
    assert!(
        text.contains("SIGKILL"),
        "names the signal: {}",
        out.explain()
    );
    assert_session_reported(&out, &fake);
}

#[test]
fn turn_limit_is_max_turns() {
    let fake = Fake::new(json!([
        {"step": "replay", "file": "max-turns.jsonl"},
        steps::exit(1)
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_failure("max_turns", 1);
    assert_session_reported(&out, &fake);
}

#[test]
fn budget_limit_is_max_turns() {
    let fake = Fake::new(json!([
        {"step": "replay", "file": "max-budget.jsonl"},
        steps::exit(1)
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_failure("max_turns", 1);
}

#[test]
fn failure_detail_reports_the_configured_limits() {
    let fake = Fake::new(json!([steps::init(), steps::exit(2)]));
    let out = fake
        .coder()
        .args(["--timeout", "42.5", "--max-duration", "600", "task"])
        .run();
    let detail = out.assert_failure("subprocess_error", 1);
    assert_eq!(detail["idle_timeout_s"], 42.5, "{}", out.explain());
    assert_eq!(detail["max_duration_s"], 600.0, "{}", out.explain());
    assert_eq!(detail["retries"], 0, "{}", out.explain());
    assert_eq!(detail["json_decode_errors"], 0, "{}", out.explain());
}

#[test]
fn failure_detail_reports_the_default_limits() {
    let fake = Fake::new(json!([steps::init(), steps::exit(2)]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("subprocess_error", 1);
    assert_eq!(detail["idle_timeout_s"], 300.0, "{}", out.explain());
    assert_eq!(detail["max_duration_s"], 1800.0, "{}", out.explain());
}

#[test]
fn clean_exit_with_no_session_in_the_stream_is_protocol_missing_session() {
    let fake = Fake::new(json!([
        {"step": "init", "session_id": null},
        steps::exit(0)
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_failure("protocol_missing_session", 1);
}

#[test]
fn a_panic_in_coder_is_unexpected_exception_with_an_envelope() {
    let fake = Fake::new(json!(steps::answer("unused")));
    let out = fake.coder().env("CODER_DEBUG_PANIC", "1").arg("task").run();
    out.assert_failure("unexpected_exception", 70);
}
