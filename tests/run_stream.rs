//! The child's output as coder reads it: huge lines, floods, invalid UTF-8 and noise, the
//! `last_lines` window (stdout and stderr in order) and redaction of credentials.

mod common;

use common::{Fake, SECRET_TOKEN, steps};
use serde_json::json;

const MIB: u64 = 1024 * 1024;

#[test]
fn a_20_mib_tool_result_line_is_read_whole() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "tool_use", "name": "Read", "input": {"file_path": "big.log"}},
        {"step": "long_line", "bytes": 20 * MIB, "kind": "tool_result"},
        steps::text("the log is long"),
        steps::result_ok("the log is long"),
    ]));
    let out = fake.coder().args(["--return-metrics", "task"]).run();
    out.assert_success("the log is long");
    let m = &out.envelope["metrics"];
    assert!(m["stdout_bytes"].as_u64().unwrap() > 20 * MIB, "{m}");
    assert_eq!(m["json_decode_errors"], 0, "{m}");
    assert_eq!(m["tool_calls"], json!({"Read": 1}), "{m}");
}

#[test]
fn megabytes_of_events_and_stderr_noise() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "flood", "bytes": 8 * MIB, "kind": "events"},
        {"step": "flood", "bytes": 2 * MIB, "kind": "noise", "stream": "stderr"},
        {"step": "flood", "bytes": 4 * MIB, "kind": "events", "line_bytes": 200},
        steps::result_ok("survived the flood"),
    ]));
    let out = fake.coder().args(["--return-metrics", "task"]).run();
    out.assert_success("survived the flood");
    let m = &out.envelope["metrics"];
    assert!(m["stdout_bytes"].as_u64().unwrap() >= 12 * MIB, "{m}");
    assert!(m["stderr_bytes"].as_u64().unwrap() >= 2 * MIB, "{m}");
    // 8 MiB in 4 KiB lines, 4 MiB in lines of a few hundred bytes.
    assert!(m["stdout_lines"].as_u64().unwrap() > 8_000, "{m}");
    assert_eq!(m["json_decode_errors"], 0, "{m}");
}

#[test]
fn every_line_of_a_burst_is_seen_and_recorded_in_order() {
    // Short lines (about 540 bytes, the event's smallest) written 64 KiB at a time:
    // hundreds arrive at once, more than the supervisor handles per wake-up (a line taken
    // at the end of one was once lost).
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "flood", "bytes": 2 * MIB, "kind": "events", "line_bytes": 200},
        steps::result_ok("all there"),
    ]));
    let out = fake.coder().args(["--return-metrics", "task"]).run();
    out.assert_success("all there");
    let transcript = common::read_transcript(std::path::Path::new(
        out.envelope["transcript"].as_str().unwrap(),
    ));
    let floods: Vec<u64> = transcript
        .iter()
        .filter_map(|entry| {
            let text = entry["event"]["message"]["content"][0]["text"].as_str()?;
            text.strip_prefix("flood ")?.split(' ').next()?.parse().ok()
        })
        .collect();
    assert!(floods.len() > 3_000, "{} flood lines", floods.len());
    let expected: Vec<u64> = (1..=floods.len() as u64).collect();
    assert!(
        floods == expected,
        "a flood line is missing or out of order"
    );
    let m = &out.envelope["metrics"];
    assert_eq!(m["stdout_lines"], floods.len() as u64 + 2, "{m}");
    assert_eq!(m["events"], floods.len() as u64 + 2, "{m}");
}

#[test]
fn invalid_utf8_and_noise_are_counted_but_not_fatal() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "raw", "hex": "8081fffe0a"},
        {"step": "emit", "text": "Debugger attached."},
        {"step": "raw", "hex": "7b2274797065223a22617373697374616e74c3"},
        {"step": "raw", "text": "\n"},
        steps::text("fine"),
        steps::result_ok("fine"),
    ]));
    let out = fake.coder().args(["--return-metrics", "task"]).run();
    out.assert_success("fine");
    assert_eq!(
        out.envelope["metrics"]["json_decode_errors"],
        3,
        "{}",
        out.explain()
    );
}

#[test]
fn noise_is_kept_in_last_lines() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "raw", "hex": "6e6f697365ff0a"},
        {"step": "emit", "text": "plain noise line"},
        steps::exit(5),
    ]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("subprocess_error", 1);
    assert_eq!(detail["json_decode_errors"], 2, "{}", out.explain());
    let lines = out.last_lines();
    assert!(lines.iter().any(|l| l.contains("noise")), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("plain noise line")),
        "{lines:?}"
    );
}

#[test]
fn final_line_without_newline_is_not_lost() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "emit", "text": "last words without newline", "newline": false},
        steps::exit(4),
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_failure("subprocess_error", 1);
    assert!(
        out.last_lines()
            .iter()
            .any(|l| l.contains("last words without newline")),
        "{}",
        out.explain()
    );
}

#[test]
fn result_without_trailing_newline_still_counts() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "emit", "newline": false, "json": {
            "type": "result", "subtype": "success", "is_error": false,
            "result": "no newline", "num_turns": 1}},
        steps::exit(0),
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_success("no newline");
}

#[test]
fn last_lines_are_the_last_20_of_stdout_and_stderr_in_order() {
    // Alternate the pipes with a pause, so the order of arrival is mostly the order of
    // writing. Lines 6 and 7, either side of the cut, share a pipe: which 20 are the last
    // then does not depend on the order of arrival across pipes, which a loaded machine may
    // swap for lines written 30 ms apart.
    let on_stderr = |i: u32| i > 7 && i.is_multiple_of(2);
    let mut scenario = vec![steps::init()];
    for i in 1..=26 {
        let text = format!("line {i:02}");
        if on_stderr(i) {
            scenario.push(json!({"step": "stderr", "text": text}));
        } else {
            scenario.push(steps::text(&text));
        }
        scenario.push(steps::sleep(0.03));
    }
    scenario.push(steps::exit(9));
    let fake = Fake::new(json!(scenario));
    let out = fake.coder().arg("task").run();
    out.assert_failure("subprocess_error", 1);
    let lines = out.last_lines();
    assert_eq!(lines.len(), 20, "{lines:?}");
    // The last 20 written are the ones kept; each pipe's lines stay in their order (the
    // order across the two pipes is the order of arrival, so it is not asserted).
    let numbers: Vec<u32> = lines
        .iter()
        .map(|l| {
            let at = l.find("line ").unwrap_or_else(|| panic!("{l}")) + 5;
            l[at..at + 2].parse().unwrap()
        })
        .collect();
    let mut sorted = numbers.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (7..=26).collect::<Vec<u32>>(), "{lines:?}");
    for stderr in [false, true] {
        let pipe: Vec<u32> = numbers
            .iter()
            .copied()
            .filter(|&n| on_stderr(n) == stderr)
            .collect();
        assert!(pipe.windows(2).all(|w| w[0] < w[1]), "{lines:?}");
    }
}

#[test]
fn credentials_are_redacted_from_last_lines() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::stderr(&format!("request failed: Authorization: Bearer {SECRET_TOKEN}")),
        {"step": "emit", "text": format!("token={SECRET_TOKEN}")},
        steps::exit(1),
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_failure("subprocess_error", 1);
    assert!(
        !out.stdout.contains(SECRET_TOKEN),
        "the credential leaked into the envelope: {}",
        out.stdout
    );
    assert!(
        out.last_lines()
            .iter()
            .any(|l| l.contains("request failed")),
        "the line itself is kept: {}",
        out.explain()
    );
}

#[test]
fn a_long_tool_result_is_read_from_its_own_content_and_kept_by_its_head() {
    // Over the 256 KiB a transcript keeps whole: decoded up to the CLI's copy of the output.
    let output = format!(
        "{}cat: /etc/shadow: Permission denied",
        "log line\n".repeat(40_000)
    );
    let copy = format!(
        "{}mv: cannot move '/srv/decoy': Permission denied",
        "log line\n".repeat(40_000)
    );
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "tool_use", "name": "Bash", "input": {"command": "cat /etc/shadow"}, "id": "t1"},
        {"step": "emit", "json": {
            "type": "user",
            "message": {"role": "user", "content": [
                {"tool_use_id": "t1", "type": "tool_result", "content": output, "is_error": true}
            ]},
            "parent_tool_use_id": null,
            "uuid": "u-long",
            "tool_use_result": {"stdout": copy, "stderr": "", "interrupted": false},
            "tool_result_meta": []
        }},
        steps::result_ok("done"),
    ]));
    let out = fake.coder().args(["--return-metrics", "task"]).run();
    out.assert_success("done");
    let m = &out.envelope["metrics"];
    assert_eq!(m["json_decode_errors"], 0, "{m}");
    assert_eq!(m["tool_calls"], json!({"Bash": 1}), "{m}");
    // The denial in the result itself is found; the one only in the copy is not looked at.
    assert_eq!(
        m["sandbox_denials"],
        json!([{"tool": "Bash", "path": "/etc/shadow", "class": "outside_sandbox"}]),
        "{m}"
    );
    let transcript = out.envelope["transcript"].as_str().unwrap();
    let entry = common::read_transcript(std::path::Path::new(transcript))
        .into_iter()
        .find(|e| e["kind"] == "event_truncated")
        .expect("the long line is in the transcript");
    assert!(
        entry["text"]
            .as_str()
            .unwrap()
            .starts_with(r#"{"type":"user""#)
    );
    assert!(entry["truncated_bytes"].as_u64().unwrap() > 0, "{entry}");
}
