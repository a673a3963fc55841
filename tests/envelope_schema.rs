//! Every envelope coder prints conforms to the published schema (schema/envelope.schema.json):
//! success, failures before and after the child ran, retries, metrics and all_messages.

mod common;

use common::Bounded;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/envelope.schema.json"),
    )
    .unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\ncat >/dev/null\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_string_lossy().into_owned()
}

fn envelope(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(args)
        .env("CODER_STATE_DIR", dir.join("state"))
        .env("ANTHROPIC_AUTH_TOKEN", "coder-test-token")
        .env_remove("CODER_CLAUDE_BIN")
        .output_bounded();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "exactly one line: {stdout}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn envelopes_of_every_shape_match_the_schema() {
    let validator = schema();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.to_str().unwrap();
    let ok = script(
        dir.path(),
        "ok",
        r#"echo '{"type":"system","subtype":"init","session_id":"s"}'
echo '{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Read","input":{"file_path":"x"}}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,"usage":{"input_tokens":1,"output_tokens":2}}'"#,
    );
    let fails = script(
        dir.path(),
        "fails",
        r#"echo '{"type":"system","subtype":"init","session_id":"s"}'
echo '{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":500,"result":"API Error: 500"}'
exit 1"#,
    );
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "--cd",
            ws,
            "--claude-bin",
            &ok,
            "t",
            "--return-metrics",
            "--return-all-messages",
        ],
        vec![
            "--cd",
            ws,
            "--claude-bin",
            &fails,
            "t",
            "--return-metrics",
            "--max-retries",
            "1",
        ],
        vec!["--cd", ws, "--claude-bin", "/nonexistent/claude", "t"],
        vec!["--cd", "/nonexistent", "t"],
        vec!["--no-such-flag"],
    ];
    for args in cases {
        let value = envelope(dir.path(), &args);
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{args:?} -> {value}\n{errors:#?}");
    }
}
