//! Runs that succeed: the envelope, the child's command line, environment, cwd and stdin,
//! every way of giving the prompt, the spec-name aliases and the `--request` form.

mod common;

use std::path::Path;

use common::{Fake, Outcome, steps};
use serde_json::{Value, json};

const RESUMED: &str = "11111111-2222-4333-8444-555555555555";

fn canonical(p: &Path) -> std::path::PathBuf {
    std::fs::canonicalize(p).expect("canonicalize")
}

fn assert_fresh_session(out: &Outcome, fake: &Fake) -> String {
    let record = fake.record();
    let id = record
        .flag_value("--session-id")
        .unwrap_or_else(|| panic!("no --session-id in {:?}", record.argv()));
    let parsed = uuid::Uuid::parse_str(&id).expect("--session-id is a UUID");
    assert_eq!(parsed.get_version_num(), 4, "a fresh random UUID: {id}");
    assert!(!record.has_flag("--resume"), "{:?}", record.argv());
    assert_eq!(out.session_id(), Some(id.as_str()), "{}", out.explain());
    id
}

#[test]
fn success_envelope_carries_result_and_session() {
    let fake = Fake::new(json!(steps::answer("all done")));
    let out = fake.coder().arg("fix the bug").run();
    out.assert_success("all done");
    assert_fresh_session(&out, &fake);
    // The session's record stays; its lock goes with the run.
    let kept: Vec<String> = std::fs::read_dir(fake.state_dir().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(kept.iter().any(|n| n.ends_with(".json")), "{kept:?}");
    assert!(!kept.iter().any(|n| n.ends_with(".lock")), "{kept:?}");
}

#[test]
fn child_command_line_is_stream_json_with_prompt_on_closed_stdin() {
    // The child waits at most 5 s for stdin to close, so a coder that leaves it open fails
    // fast instead of hanging.
    let fake = Fake::new(json!({
        "stdin": "none",
        "steps": [
            {"step": "wait_stdin", "timeout": 5, "on_timeout": "exit"},
            steps::init(),
            steps::result_ok("done"),
        ]
    }));
    let out = fake.coder().arg("rename the helper function").run();
    out.assert_success("done");
    let record = fake.record();
    let argv = record.argv();
    assert!(
        record.has_flag("-p") || record.has_flag("--print"),
        "{argv:?}"
    );
    assert_eq!(
        record.flag_value("--output-format").as_deref(),
        Some("stream-json")
    );
    assert!(record.has_flag("--verbose"), "{argv:?}");
    assert!(record.flag_value("--permission-mode").is_some(), "{argv:?}");
    assert_fresh_session(&out, &fake);
    assert!(
        !argv
            .iter()
            .any(|a| a.contains("rename the helper function")),
        "the prompt goes on stdin, not on the command line: {argv:?}"
    );
    assert!(
        record.stdin().contains("rename the helper function"),
        "{record:?}"
    );
    assert!(record.stdin_eof(), "stdin is closed after the prompt");
    assert_eq!(canonical(&record.cwd()), canonical(fake.workspace()));
    let env = record.env();
    assert!(
        !env.contains_key("CLAUDECODE"),
        "CLAUDECODE removed: {env:?}"
    );
}

#[test]
fn child_environment_is_an_allow_list() {
    let fake = Fake::new(json!(steps::answer("ok")));
    let out = fake
        .coder()
        .env("CODER_TEST_NOT_ALLOWED", "1")
        .env("GITHUB_TOKEN", "ghp_fake_should_not_travel")
        .arg("task")
        .run();
    out.assert_success("ok");
    let env = fake.record().env();
    assert!(
        !env.contains_key("CODER_TEST_NOT_ALLOWED") && !env.contains_key("GITHUB_TOKEN"),
        "only allow-listed variables reach the child: {env:?}"
    );
    assert!(env.contains_key("PATH"), "{env:?}");
    assert!(!env.contains_key("CLAUDECODE"), "{env:?}");
}

#[test]
fn each_run_gets_a_new_session_id() {
    let first = Fake::new(json!(steps::answer("one")));
    let second = Fake::new(json!(steps::answer("two")));
    let a = first.coder().arg("task").run();
    let b = second.coder().arg("task").run();
    a.assert_success("one");
    b.assert_success("two");
    assert_ne!(
        assert_fresh_session(&a, &first),
        assert_fresh_session(&b, &second)
    );
}

#[test]
fn session_id_resumes_that_session() {
    let fake = Fake::new(json!(steps::answer("continued")));
    let out = fake.coder().args(["--session-id", RESUMED, "go on"]).run();
    out.assert_success("continued");
    let record = fake.record();
    assert_eq!(record.flag_value("--resume").as_deref(), Some(RESUMED));
    assert!(!record.has_flag("--session-id"), "{:?}", record.argv());
    assert_eq!(out.session_id(), Some(RESUMED));
}

#[test]
fn spec_name_session_alias_resumes_too() {
    let fake = Fake::new(json!(steps::answer("continued")));
    let out = fake.coder().args(["--SESSION_ID", RESUMED, "go on"]).run();
    out.assert_success("continued");
    assert_eq!(
        fake.record().flag_value("--resume").as_deref(),
        Some(RESUMED)
    );
}

fn prompt_reaches_child(configure: impl FnOnce(common::Coder) -> common::Coder, prompt: &str) {
    let fake = Fake::new(json!(steps::answer("ok")));
    let out = configure(fake.coder()).run();
    out.assert_success("ok");
    let stdin = fake.record().stdin();
    assert!(
        stdin.contains(prompt),
        "child stdin {stdin:?} lacks {prompt:?}"
    );
}

#[test]
fn prompt_from_positional_argument() {
    prompt_reaches_child(|c| c.arg("positional task"), "positional task");
}

#[test]
fn prompt_from_prompt_flag_and_its_alias() {
    prompt_reaches_child(|c| c.args(["--prompt", "flag task"]), "flag task");
    prompt_reaches_child(|c| c.args(["--PROMPT", "spec task"]), "spec task");
}

#[test]
fn prompt_from_stdin_when_absent_or_dash() {
    prompt_reaches_child(|c| c.stdin("task from stdin\n"), "task from stdin");
    prompt_reaches_child(|c| c.arg("-").stdin("dash task\n"), "dash task");
}

#[test]
fn prompt_with_unicode_and_newlines_is_passed_verbatim() {
    let prompt = "Fix the façade:\n  - keep «quotes»\n  - emoji 🦀\n";
    prompt_reaches_child(|c| c.arg(prompt), prompt.trim_end());
}

#[test]
fn child_that_never_reads_a_large_prompt_does_not_wedge_coder() {
    // 1 MiB does not fit in a pipe buffer: writing it must not block the run.
    let fake = Fake::new(json!({"stdin": "none", "steps": steps::answer("ignored stdin")}));
    let prompt = "p".repeat(1 << 20);
    let out = fake.coder().arg("-").stdin(prompt).run();
    out.assert_success("ignored stdin");
}

#[test]
fn claude_bin_from_environment() {
    let fake = Fake::new(json!(steps::answer("via env")));
    let out = fake
        .coder()
        .no_claude_bin()
        .env("CODER_CLAUDE_BIN", fake.bin())
        .arg("task")
        .run();
    out.assert_success("via env");
}

#[test]
fn spec_name_aliases_are_accepted() {
    let fake = Fake::new(json!(steps::answer("aliased")));
    let out = fake
        .coder()
        .args([
            "--return_all_messages",
            "--return_metrics",
            "--log_metrics",
            "--max_duration",
            "100",
            "--max_retries",
            "0",
            "--PROMPT",
            "aliased task",
        ])
        .run();
    out.assert_success("aliased");
    assert!(out.envelope["all_messages"].is_array(), "{}", out.explain());
    assert!(out.envelope["metrics"].is_object(), "{}", out.explain());
    out.logged_metrics();
}

fn request_json(fake: &Fake) -> Value {
    json!({
        "PROMPT": "task from the request",
        "cd": fake.workspace(),
        "SESSION_ID": RESUMED,
        "return_all_messages": true,
        "return_metrics": true,
        "timeout": 20,
        "max_duration": 60,
        "max_retries": 0,
        "log_metrics": false,
    })
}

fn assert_request_applied(fake: &Fake, out: &Outcome) {
    out.assert_success("from request");
    let record = fake.record();
    assert!(
        record.stdin().contains("task from the request"),
        "{record:?}"
    );
    assert_eq!(record.flag_value("--resume").as_deref(), Some(RESUMED));
    assert_eq!(canonical(&record.cwd()), canonical(fake.workspace()));
    assert_eq!(
        out.envelope["all_messages"].as_array().map(Vec::len),
        Some(3),
        "{}",
        out.explain()
    );
    assert!(out.envelope["metrics"].is_object(), "{}", out.explain());
}

#[test]
fn request_file_gives_the_parameters() {
    let fake = Fake::new(json!(steps::answer("from request")));
    let path = fake.root().join("request.json");
    std::fs::write(&path, request_json(&fake).to_string()).unwrap();
    let out = fake.coder().no_cd().arg("--request").arg(&path).run();
    assert_request_applied(&fake, &out);
}

#[test]
fn request_from_stdin() {
    let fake = Fake::new(json!(steps::answer("from request")));
    let body = request_json(&fake).to_string();
    let out = fake
        .coder()
        .no_cd()
        .args(["--request", "-"])
        .stdin(body)
        .run();
    assert_request_applied(&fake, &out);
}

#[test]
fn realistic_tool_run_succeeds() {
    let fake = Fake::new(json!([
        {"step": "replay", "file": "tool-use-bash-write.jsonl"},
        steps::stderr("[claude-code:unrecognized_model] {\"model\":\"glm-4.7\",\"query_source\":\"sdk\"}"),
    ]));
    let out = fake.coder().arg("create files").run();
    out.assert_success("Done: both tools ran.");
}

#[test]
fn a_session_started_by_coder_can_be_resumed_in_its_workspace() {
    let fake = Fake::new(json!(steps::answer("turn done")));
    let first = fake.coder().arg("first turn").run();
    first.assert_success("turn done");
    let id = first.session_id().expect("SESSION_ID").to_string();
    let second = fake
        .coder()
        .args(["--session-id", &id, "second turn"])
        .run();
    second.assert_success("turn done");
    assert_eq!(fake.record().flag_value("--resume"), Some(id.clone()));
    assert_eq!(second.session_id(), Some(id.as_str()));
}

#[test]
fn resuming_a_session_from_another_workspace_is_refused() {
    let home = Fake::new(json!(steps::answer("turn done")));
    let first = home.coder().arg("first turn").run();
    first.assert_success("turn done");
    let id = first.session_id().expect("SESSION_ID").to_string();
    let elsewhere = Fake::new(json!(steps::answer("should not run")));
    let out = elsewhere
        .coder()
        .env("CODER_STATE_DIR", home.state_dir())
        .args(["--session-id", &id, "second turn"])
        .run();
    out.assert_failure("config_error", 78);
    assert!(!elsewhere.has_record(), "the child must not be started");
    let message = out.envelope["error"].as_str().unwrap();
    assert!(
        message.contains(&home.workspace().to_string_lossy().into_owned()),
        "says where the session lives: {}",
        out.explain()
    );
}
