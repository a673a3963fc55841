//! Supervision: the idle and total watchdogs, the end of a run driven by the `result` event,
//! and whole-tree kills of children that linger, ignore SIGTERM or leave descendants holding
//! the pipes (with and without `setsid`). Every run is checked for leftover processes by the
//! harness.

mod common;

use std::time::Duration;

use common::{Fake, steps};
use serde_json::json;

#[test]
fn silence_is_idle_timeout_naming_the_pending_tool() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "tool_use", "name": "Bash", "id": "toolu_slow",
         "input": {"command": "cargo build --release", "description": "Build"}},
        steps::sleep(60.0)
    ]));
    let out = fake.coder().args(["--timeout", "0.5", "build it"]).run();
    let detail = out.assert_failure("idle_timeout", 124);
    assert_eq!(detail["idle_timeout_s"], 0.5, "{}", out.explain());
    assert_eq!(
        detail["pending_tool"],
        json!("Bash(cargo build --release)"),
        "names the pending tool: {}",
        out.explain()
    );
    assert_eq!(
        out.envelope["error"],
        json!("no output for 0.5 s while Bash(cargo build --release) was running"),
        "{}",
        out.explain()
    );
    assert!(
        out.elapsed < Duration::from_secs(10),
        "stopped soon after the idle limit: {:?}",
        out.elapsed
    );
    let session = fake.record().flag_value("--session-id");
    assert_eq!(out.session_id(), session.as_deref(), "{}", out.explain());
}

#[test]
fn silence_before_the_first_byte_is_idle_timeout() {
    let fake = Fake::new(json!([steps::sleep(60.0)]));
    let out = fake.coder().args(["--timeout", "0.5", "task"]).run();
    out.assert_failure("idle_timeout", 124);
    // coder chose the id (--session-id), but the CLI never confirmed it: a resume of an
    // id the CLI never created could only fail, so none is reported.
    assert!(fake.record().flag_value("--session-id").is_some());
    assert_eq!(
        out.envelope["SESSION_ID"],
        serde_json::Value::Null,
        "{}",
        out.explain()
    );
}

#[test]
fn any_output_resets_the_idle_clock() {
    // 4.8 s of activity against a 2 s idle limit: stderr lines, then bytes of a stdout line
    // that is not finished yet (each gap 0.4 s, so a loaded machine's slow start of the
    // fake still leaves 1.6 s of margin).
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "repeat", "times": 6, "steps": [
            steps::stderr("still working"),
            steps::sleep(0.4)
        ]},
        {"step": "repeat", "times": 6, "steps": [
            {"step": "raw", "text": " "},
            steps::sleep(0.4)
        ]},
        {"step": "raw", "text": "\n"},
        steps::result_ok("slow but alive"),
    ]));
    let out = fake.coder().args(["--timeout", "2", "task"]).run();
    out.assert_success("slow but alive");
}

#[test]
fn max_duration_is_timeout_even_with_output() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "repeat", "times": 200, "steps": [
            steps::text("progress"),
            steps::sleep(0.1)
        ]},
        steps::result_ok("too late")
    ]));
    let out = fake
        .coder()
        .args(["--timeout", "5", "--max-duration", "1", "task"])
        .run();
    let detail = out.assert_failure("timeout", 124);
    assert_eq!(detail["max_duration_s"], 1.0, "{}", out.explain());
    assert!(
        out.elapsed < Duration::from_secs(10),
        "stopped at the cap: {:?}",
        out.elapsed
    );
}

#[test]
fn child_lingering_after_its_result_is_killed_and_the_run_succeeds() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::text("done"),
        steps::result_ok("done"),
        {"step": "linger", "seconds": 3600}
    ]));
    let out = fake.coder().args(["--timeout", "30", "task"]).run();
    out.assert_success("done");
    assert!(
        out.elapsed < Duration::from_secs(15),
        "the drain after the result is short: {:?}",
        out.elapsed
    );
}

#[test]
fn child_ignoring_sigterm_is_killed_after_the_grace_period() {
    let fake = Fake::new(json!([
        {"step": "ignore_sigterm"},
        steps::init(),
        steps::sleep(3600.0)
    ]));
    let out = fake
        .coder()
        .args(["--timeout", "0.5", "--kill-grace", "1", "task"])
        .run();
    out.assert_failure("idle_timeout", 124);
    // The child's own pid is its PID namespace's; the marker finds it from here.
    common::assert_no_process_left(fake.marker());
    assert!(
        out.elapsed >= Duration::from_millis(1400),
        "SIGKILL only after the grace period: {:?}",
        out.elapsed
    );
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
}

#[test]
fn stubborn_child_lingering_after_result_is_killed() {
    let fake = Fake::new(json!([
        {"step": "ignore_sigterm", "signals": ["TERM", "INT", "HUP"]},
        steps::init(),
        steps::result_ok("done anyway"),
        {"step": "linger", "seconds": 3600}
    ]));
    let out = fake.coder().args(["--kill-grace", "0.5", "task"]).run();
    out.assert_success("done anyway");
}

/// A child that leaves a descendant holding its stdout and stderr open, then exits 0.
fn with_grandchild(setsid: bool, ignore_sigterm: bool, result: bool) -> Fake {
    let mut scenario = vec![
        steps::init(),
        json!({
            "step": "spawn_grandchild", "setsid": setsid, "hold_pipes": true,
            "ignore_sigterm": ignore_sigterm, "sleep": 3600, "pid_file": "grandchild.pid"
        }),
        json!({"step": "wait_file", "path": "grandchild.pid", "timeout": 10}),
    ];
    if result {
        scenario.push(steps::result_ok("done"));
    }
    scenario.push(steps::exit(0));
    Fake::new(json!(scenario))
}

fn assert_grandchild_gone(fake: &Fake) {
    fake.wait_for_file("grandchild.pid", Duration::from_secs(1));
    common::assert_no_process_left(fake.marker());
}

#[test]
fn grandchild_holding_the_pipes_does_not_keep_a_finished_run_alive() {
    let fake = with_grandchild(false, false, true);
    let out = fake.coder().args(["--timeout", "30", "task"]).run();
    out.assert_success("done");
    assert_grandchild_gone(&fake);
}

#[test]
fn setsid_grandchild_holding_the_pipes_is_killed() {
    let fake = with_grandchild(true, false, true);
    let out = fake.coder().args(["--timeout", "30", "task"]).run();
    out.assert_success("done");
    assert_grandchild_gone(&fake);
}

#[test]
fn setsid_grandchild_ignoring_sigterm_is_killed() {
    let fake = with_grandchild(true, true, true);
    let out = fake
        .coder()
        .args(["--timeout", "30", "--kill-grace", "0.5", "task"])
        .run();
    out.assert_success("done");
    assert_grandchild_gone(&fake);
}

#[test]
fn child_exiting_without_result_while_a_grandchild_holds_the_pipes() {
    let fake = with_grandchild(true, false, false);
    let out = fake.coder().args(["--timeout", "30", "task"]).run();
    out.assert_failure("empty_result", 1);
    assert!(
        out.elapsed < Duration::from_secs(15),
        "the child's exit ends the run: {:?}",
        out.elapsed
    );
    assert_grandchild_gone(&fake);
}

#[test]
fn idle_timeout_kills_grandchildren_too() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "spawn_grandchild", "setsid": true, "hold_pipes": false,
         "ignore_sigterm": true, "sleep": 3600, "pid_file": "grandchild.pid"},
        {"step": "wait_file", "path": "grandchild.pid", "timeout": 10},
        steps::sleep(3600.0)
    ]));
    let out = fake
        .coder()
        .args(["--timeout", "0.5", "--kill-grace", "0.5", "task"])
        .run();
    out.assert_failure("idle_timeout", 124);
    assert_grandchild_gone(&fake);
}
