//! What coder adds to the envelope on request: `all_messages` (every parsed event, in order)
//! and `metrics` (in the envelope with `--return-metrics`, on stderr with `--log-metrics`).

mod common;

use common::{Fake, steps};
use serde_json::{Value, json};

/// Three tool calls (two Bash, one Read), their results, an answer; token usage in the
/// result; one line of noise on stdout.
fn tool_scenario() -> Value {
    json!([
        steps::init(),
        {"step": "tool_use", "name": "Bash", "input": {"command": "ls"}, "id": "toolu_1"},
        {"step": "tool_result", "content": "a.txt"},
        {"step": "emit", "text": "this line is not JSON"},
        {"step": "tool_use", "name": "Read", "input": {"file_path": "a.txt"}, "id": "toolu_2"},
        {"step": "tool_result", "content": "hello"},
        {"step": "tool_use", "name": "Bash", "input": {"command": "wc a.txt"}, "id": "toolu_3"},
        {"step": "tool_result", "content": "1 1 6"},
        steps::text("It says hello."),
        {"step": "result", "text": "It says hello.", "num_turns": 4,
         "usage": {"input_tokens": 1200, "output_tokens": 345,
                   "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 10}},
    ])
}

#[test]
fn all_messages_holds_every_parsed_event_in_order() {
    let fake = Fake::new(tool_scenario());
    let out = fake
        .coder()
        .args(["--return-all-messages", "read a.txt"])
        .run();
    out.assert_success("It says hello.");
    let messages = out.envelope["all_messages"]
        .as_array()
        .unwrap_or_else(|| panic!("all_messages: {}", out.explain()));
    let types: Vec<&str> = messages
        .iter()
        .map(|m| m["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        types,
        [
            "system",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "result"
        ],
        "the noise line is not an event"
    );
    assert_eq!(messages[1]["message"]["content"][0]["id"], "toolu_1");
    assert_eq!(messages[3]["message"]["content"][0]["id"], "toolu_2");
    assert_eq!(messages[8]["result"], "It says hello.");
}

#[test]
fn all_messages_is_absent_unless_asked() {
    let fake = Fake::new(json!(steps::answer("plain")));
    let out = fake.coder().arg("task").run();
    out.assert_success("plain");
    assert!(
        out.envelope.get("all_messages").is_none(),
        "{}",
        out.explain()
    );
    assert!(out.envelope.get("metrics").is_none(), "{}", out.explain());
}

#[test]
fn all_messages_is_returned_on_failure_too() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::text("working"),
        steps::exit(3)
    ]));
    let out = fake.coder().args(["--return-all-messages", "task"]).run();
    out.assert_failure("subprocess_error", 1);
    let messages = out.envelope["all_messages"]
        .as_array()
        .expect("all_messages");
    assert_eq!(messages.len(), 2, "{}", out.explain());
}

fn assert_tool_metrics(m: &Value) {
    assert!(m["wall_ms"].as_u64().is_some(), "wall time: {m}");
    assert!(
        m["time_to_first_event_ms"].as_u64().is_some(),
        "time to first event: {m}"
    );
    assert!(
        m["time_to_first_event_ms"].as_u64() <= m["wall_ms"].as_u64(),
        "{m}"
    );
    assert_eq!(m["turns"], 4, "{m}");
    assert_eq!(m["usage"]["input"], 1200, "{m}");
    assert_eq!(m["usage"]["output"], 345, "{m}");
    assert_eq!(m["usage"]["cache_read"], 1000, "{m}");
    assert_eq!(m["usage"]["cache_write"], 10, "{m}");
    assert_eq!(m["tool_calls"], json!({"Bash": 2, "Read": 1}), "{m}");
    assert_eq!(m["json_decode_errors"], 1, "{m}");
    assert_eq!(m["stdout_lines"], 10, "{m}");
    assert!(m["stdout_bytes"].as_u64().unwrap_or(0) > 1000, "{m}");
    assert_eq!(m["exit_code"], 0, "{m}");
    assert!(m["signal"].is_null(), "{m}");
}

#[test]
fn return_metrics_reports_the_run() {
    let fake = Fake::new(tool_scenario());
    let out = fake.coder().args(["--return-metrics", "read a.txt"]).run();
    out.assert_success("It says hello.");
    assert_tool_metrics(&out.envelope["metrics"]);
}

#[test]
fn log_metrics_writes_one_json_line_on_stderr() {
    let fake = Fake::new(tool_scenario());
    let out = fake.coder().args(["--log-metrics", "read a.txt"]).run();
    out.assert_success("It says hello.");
    assert!(out.envelope.get("metrics").is_none(), "{}", out.explain());
    assert_tool_metrics(&out.logged_metrics());
}

#[test]
fn metrics_of_a_child_killed_by_a_signal() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "kill_self", "signal": "SEGV"}
    ]));
    let out = fake.coder().args(["--return-metrics", "task"]).run();
    let detail = out.assert_failure("subprocess_error", 1);
    assert!(detail["exit_code"].is_null(), "{}", out.explain());
    let m = &out.envelope["metrics"];
    assert!(m["exit_code"].is_null(), "{m}");
    assert!(
        m["signal"].as_str().is_some_and(|s| s.contains("SEGV")),
        "{m}"
    );
}
