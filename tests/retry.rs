//! Retries only when they cannot duplicate side effects, on the documented schedule, and
//! cancellable; resumes only where the session lives, one driver at a time.

mod common;

use std::time::{Duration, Instant};

use common::{Fake, steps};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

fn http_503() -> Value {
    json!({"step": "result", "is_error": true, "text": "API Error: 503 overloaded",
           "terminal_reason": "api_error", "api_error_status": 503})
}

fn fails_once_then_answers() -> Value {
    json!([
        steps::init(),
        {"step": "first_time", "flag": "failed-once",
         "then": [http_503(), steps::exit(1)],
         "else": [steps::text("second time lucky"), steps::result_ok("second time lucky")]},
    ])
}

fn attempt_entries(fake: &Fake, kind: &str) -> Vec<Value> {
    let runs = fake.state_dir().join("runs");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(runs).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        out.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|e| e["source"] == "coder" && e["kind"] == kind),
        );
    }
    out
}

#[test]
fn a_transient_failure_without_side_effects_is_retried_once_and_succeeds() {
    let fake = Fake::new(fails_once_then_answers());
    let out = fake.coder().args(["--max-retries", "2", "task"]).run();
    out.assert_success("second time lucky");
    let attempts = out.envelope["attempts"]
        .as_array()
        .expect("attempts listed");
    assert_eq!(attempts.len(), 2, "{}", out.explain());
    assert_eq!(attempts[0]["outcome"], "upstream_error");
    assert_eq!(attempts[0]["side_effects"], "none");
    assert!(
        attempts[0]["retry"]
            .as_str()
            .unwrap()
            .starts_with("retried after")
    );
    assert_eq!(attempts[1]["outcome"], "success");
    // A retry of a new session is a new session.
    assert_ne!(attempts[0]["session_id"], attempts[1]["session_id"]);
    assert_eq!(out.envelope["SESSION_ID"], attempts[1]["session_id"]);
}

#[test]
fn without_max_retries_nothing_is_retried() {
    let fake = Fake::new(fails_once_then_answers());
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["retries"], 0);
    assert_eq!(detail["retryable"], true);
    assert_eq!(out.envelope["attempts"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_failure_after_a_write_is_not_retried_and_says_how_to_resume() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "tool_use", "name": "Write", "input": {"file_path": "a.txt", "content": "x"}},
        {"step": "tool_result", "content": "File created"},
        http_503(),
        steps::exit(1),
    ]));
    let out = fake.coder().args(["--max-retries", "3", "task"]).run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["retries"], 0);
    let refused = detail["retry_refused"].as_str().unwrap();
    assert!(refused.contains("Write"), "{refused}");
    let hint = detail["resume_hint"].as_str().unwrap();
    let session = out.session_id().unwrap();
    assert!(hint.contains(&format!("--session-id {session}")), "{hint}");
    let attempts = out.envelope["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["side_effects"], "mutating");
    assert_eq!(attempts[0]["tools"], json!(["Write"]));
}

/// The words of a shell command as the resume hints write it (plain words, '…' and "…").
fn shell_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, ' ') => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// A run on a named backend tells the user to resume on that backend: the hint, followed
/// word for word, resumes the session instead of being refused for the wrong backend.
#[test]
fn the_resume_hint_of_a_named_backend_resumes_on_it() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "first_time", "flag": "wrote-once",
         "then": [
            {"step": "tool_use", "name": "Write", "input": {"file_path": "a.txt", "content": "x"}},
            {"step": "tool_result", "content": "File created"},
            http_503(),
            steps::exit(1)],
         "else": [steps::text("carried on"), steps::result_ok("carried on")]},
    ]));
    let out = fake
        .coder()
        .env("ZAI_API_KEY", "zai-test-key")
        .args(["--backend", "glm", "task"])
        .run();
    let detail = out.assert_failure("upstream_error", 1);
    let hint = detail["resume_hint"].as_str().expect("a resume hint");
    assert!(hint.contains("--backend glm"), "{hint}");
    let command = hint
        .split_once("to continue where it stopped: coder ")
        .map(|(_, command)| command)
        .unwrap_or_else(|| panic!("no command in the hint: {hint}"));

    // The hint names the run's `--claude-bin` too: followed word for word, it needs no other.
    let resumed = fake
        .coder()
        .no_cd()
        .no_claude_bin()
        .env("ZAI_API_KEY", "zai-test-key")
        .args(shell_words(command))
        .run();
    resumed.assert_success("carried on");
    assert_eq!(resumed.session_id(), out.session_id());
    assert_eq!(
        fake.record().flag_value("--resume").as_deref(),
        out.session_id()
    );
}

#[test]
fn an_authentication_failure_is_not_retried() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "synthetic_error", "error": "authentication_failed", "api_error_status": 401,
         "text": "Invalid API key"},
        {"step": "result", "is_error": true, "text": "Invalid API key",
         "terminal_reason": "api_error", "api_error_status": 401},
        steps::exit(1),
    ]));
    let out = fake.coder().args(["--max-retries", "3", "task"]).run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["http_status"], 401);
    assert_eq!(detail["retryable"], false);
    assert!(detail["retry_refused"].as_str().unwrap().contains("401"));
    assert_eq!(out.envelope["attempts"].as_array().map(Vec::len), Some(1));
}

#[test]
fn retries_follow_the_backoff_schedule() {
    let fake = Fake::new(json!([steps::init(), http_503(), steps::exit(1)]));
    let started = Instant::now();
    let out = fake.coder().args(["--max-retries", "2", "task"]).run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["retries"], 2);
    assert_eq!(out.envelope["attempts"].as_array().map(Vec::len), Some(3));
    let delays: Vec<u64> = attempt_entries(&fake, "retry")
        .iter()
        .map(|e| e["data"]["delay_ms"].as_u64().unwrap())
        .collect();
    // 0.5 s then 1 s, each within ±20 % jitter.
    assert_eq!(delays.len(), 2, "{delays:?}");
    assert!((400..=600).contains(&delays[0]), "{delays:?}");
    assert!((800..=1200).contains(&delays[1]), "{delays:?}");
    assert!(started.elapsed() >= Duration::from_millis(delays[0] + delays[1]));
}

#[test]
fn sigint_during_the_backoff_cancels_the_run() {
    let fake = Fake::new(json!([steps::init(), http_503(), steps::exit(1)]));
    // A long backoff is not configurable, so catch the first one: the retry entry is written
    // to the transcript just before the wait begins.
    let running = fake.coder().args(["--max-retries", "5", "task"]).spawn();
    let deadline = Instant::now() + Duration::from_secs(20);
    while attempt_entries(&fake, "retry").is_empty() {
        assert!(Instant::now() < deadline, "no retry was scheduled");
        std::thread::sleep(Duration::from_millis(5));
    }
    running.signal(Signal::SIGINT);
    let out = running.wait();
    let detail = out.assert_failure("cancelled", 130);
    assert!(detail["message"].as_str().unwrap().contains("SIGINT"));
    // The run stopped during the first or second backoff, far from using all five retries.
    let attempts = out.envelope["attempts"].as_array().unwrap().len();
    assert!(attempts <= 2, "{}", out.explain());
}

#[test]
fn two_runs_of_one_session_at_once_are_refused_immediately() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::touch("running"),
        {"step": "wait_file", "path": "release", "timeout": 30},
        steps::text("done"),
        steps::result_ok("done"),
    ]));
    let session = uuid::Uuid::new_v4().to_string();
    let running = fake
        .coder()
        .args(["--session-id", &session, "continue"])
        .spawn();
    fake.wait_for_file("running", Duration::from_secs(20));
    let started = Instant::now();
    // Another child (its own marker), the same workspace and coder state.
    let other = Fake::new(json!(steps::answer("should not run")));
    let second = other
        .coder()
        .cd(fake.workspace())
        .env("CODER_STATE_DIR", fake.state_dir())
        .env("ANTHROPIC_AUTH_TOKEN", "coder-test-token")
        .args(["--session-id", &session, "continue too"])
        .run();
    assert!(!other.has_record(), "the second child must not start");
    let detail = second.assert_failure("config_error", 78);
    assert!(
        detail["message"]
            .as_str()
            .unwrap()
            .contains("another coder process"),
        "{}",
        second.explain()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused without waiting"
    );
    std::fs::write(fake.file("release"), "go").unwrap();
    running.wait().assert_success("done");
}
