//! Bad input never reaches the child: each case ends in one `config_error` envelope (exit 78,
//! or 2 for a command-line usage error) and the child is not started.

mod common;

use common::{Coder, Fake, Outcome, steps};
use serde_json::json;

/// A fake that would succeed, so any run that gets as far as the child is visible.
fn fake() -> Fake {
    Fake::new(json!(steps::answer("should not run")))
}

fn assert_config_error(fake: &Fake, out: &Outcome, exit: i32) {
    let detail = out.assert_failure("config_error", exit);
    assert!(
        detail["exit_code"].is_null(),
        "no child ran: {}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child must not be started");
}

fn run(fake: &Fake, configure: impl FnOnce(Coder) -> Coder) -> Outcome {
    configure(fake.coder()).run()
}

#[test]
fn missing_cd() {
    let fake = fake();
    let out = run(&fake, |c| c.no_cd().arg("task"));
    assert_config_error(&fake, &out, 78);
    assert!(
        out.envelope["error"].as_str().unwrap().contains("--cd"),
        "{}",
        out.explain()
    );
}

#[test]
fn cd_that_does_not_exist() {
    let fake = fake();
    let missing = fake.root().join("nowhere");
    let out = run(&fake, |c| c.cd(&missing).arg("task"));
    assert_config_error(&fake, &out, 78);
    assert!(
        out.envelope["error"].as_str().unwrap().contains("nowhere")
            || out.detail()["message"]
                .as_str()
                .unwrap()
                .contains("nowhere"),
        "names the directory: {}",
        out.explain()
    );
}

#[test]
fn cd_that_is_a_file() {
    let fake = fake();
    let file = fake.root().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = run(&fake, |c| c.cd(&file).arg("task"));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn empty_prompt_argument() {
    let fake = fake();
    let out = run(&fake, |c| c.arg(""));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn blank_prompt_argument() {
    let fake = fake();
    let out = run(&fake, |c| c.arg("  \n\t "));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn empty_prompt_on_stdin() {
    let fake = fake();
    let out = run(&fake, |c| c.stdin(""));
    assert_config_error(&fake, &out, 78);
    let fake = fake_again();
    let out = run(&fake, |c| c.arg("-").stdin("\n"));
    assert_config_error(&fake, &out, 78);
}

fn fake_again() -> Fake {
    fake()
}

#[test]
fn no_prompt_and_no_stdin() {
    // stdin is /dev/null: nothing to read.
    let fake = fake();
    let out = run(&fake, |c| c);
    assert_config_error(&fake, &out, 78);
}

#[test]
fn negative_durations() {
    for args in [["--timeout=-1", "task"], ["--max-duration=-5", "task"]] {
        let fake = fake();
        let out = run(&fake, |c| c.args(args));
        assert_config_error(&fake, &out, 78);
    }
}

#[test]
fn non_numeric_durations() {
    for args in [
        ["--timeout", "soon"],
        ["--max-duration", "1h"],
        ["--timeout", "NaN"],
    ] {
        let fake = fake();
        let out = run(&fake, |c| c.args(args).arg("task"));
        assert_config_error(&fake, &out, 78);
    }
}

#[test]
fn malformed_request_json() {
    for body in [
        "{not json",
        "[1, 2]",
        "{\"PROMPT\": 5}",
        "{\"PROMPT\": \"task\", \"timeout\": \"soon\"}",
    ] {
        let fake = fake();
        let path = fake.root().join("request.json");
        std::fs::write(&path, body).unwrap();
        let out = run(&fake, |c| c.arg("--request").arg(&path));
        assert_config_error(&fake, &out, 78);
    }
}

#[test]
fn request_file_that_does_not_exist() {
    let fake = fake();
    let path = fake.root().join("no-request.json");
    let out = run(&fake, |c| c.arg("--request").arg(&path));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn malformed_request_on_stdin() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--request", "-"]).stdin("{\"PROMPT\": "));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn request_with_bad_cd() {
    let fake = fake();
    let body = json!({"PROMPT": "task", "cd": fake.root().join("nowhere")}).to_string();
    let out = run(&fake, |c| c.no_cd().args(["--request", "-"]).stdin(body));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn session_id_that_is_not_a_uuid() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--session-id", "not-a-session", "task"]));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn unknown_flag_is_a_usage_error_with_an_envelope() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--frobnicate", "task"]));
    assert_config_error(&fake, &out, 2);
    assert!(
        out.envelope["error"]
            .as_str()
            .unwrap()
            .contains("--frobnicate")
            || out.detail()["message"]
                .as_str()
                .unwrap()
                .contains("--frobnicate"),
        "names the flag: {}",
        out.explain()
    );
}

#[test]
fn unknown_sandbox_mode_is_a_usage_error() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--sandbox", "wide-open", "task"]));
    assert_config_error(&fake, &out, 2);
}
