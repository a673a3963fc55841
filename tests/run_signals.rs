//! SIGINT, SIGTERM and SIGHUP to coder: the child tree is killed first, then coder still
//! prints its envelope (`cancelled`, exit 128 + signal).

mod common;

use std::time::Duration;

use common::{Fake, marked_processes, pid_alive, steps};
use nix::sys::signal::Signal;
use serde_json::json;

/// A child busy in a tool call, with a descendant in its own session, that tells the test
/// when both are running.
fn busy_child(ignore_sigterm: bool) -> Fake {
    let mut scenario = vec![];
    if ignore_sigterm {
        scenario.push(json!({"step": "ignore_sigterm", "signals": ["TERM", "INT", "HUP"]}));
    }
    scenario.extend([
        steps::init(),
        json!({"step": "tool_use", "name": "Bash", "input": {"command": "make test"}}),
        json!({"step": "spawn_grandchild", "setsid": true, "hold_pipes": true,
               "ignore_sigterm": ignore_sigterm, "sleep": 3600, "pid_file": "grandchild.pid"}),
        json!({"step": "wait_file", "path": "grandchild.pid", "timeout": 10}),
        steps::touch("ready"),
        steps::sleep(3600.0),
    ]);
    Fake::new(json!(scenario))
}

fn cancel_with(signal: Signal, exit: i32, ignore_sigterm: bool) {
    let fake = busy_child(ignore_sigterm);
    let running = fake.coder().args(["--timeout", "60", "task"]).spawn();
    fake.wait_for_file("ready", Duration::from_secs(20));
    // The leftover check after the run can only mean something if it sees live processes.
    assert!(
        marked_processes(fake.marker()).len() >= 2,
        "the child and its grandchild are visible in /proc"
    );
    running.signal(signal);
    let out = running.wait();
    let detail = out.assert_failure("cancelled", exit);
    let session = fake.record().flag_value("--session-id");
    assert_eq!(out.session_id(), session.as_deref(), "{}", out.explain());
    assert!(detail["last_lines"].is_array());
    // The pids the child wrote are its PID namespace's; the marker finds the processes
    // from here: neither the child nor its grandchild is left.
    fake.wait_for_file("grandchild.pid", Duration::from_secs(1));
    common::assert_no_process_left(fake.marker());
}

#[test]
fn sigint_cancels_the_run() {
    cancel_with(Signal::SIGINT, 130, false);
}

#[test]
fn sigterm_cancels_the_run() {
    cancel_with(Signal::SIGTERM, 143, false);
}

#[test]
fn sighup_cancels_the_run() {
    cancel_with(Signal::SIGHUP, 129, false);
}

#[test]
fn cancel_kills_a_tree_that_ignores_sigterm() {
    cancel_with(Signal::SIGTERM, 143, true);
}

/// Ctrl-C twice: the second signal, during the grace between SIGTERM and SIGKILL, cuts it
/// short. A tree that ignores SIGTERM held coder for the whole `--kill-grace` however
/// often the user pressed Ctrl-C (newuser32).
#[test]
fn a_second_signal_cuts_the_kill_grace_short() {
    let fake = busy_child(true);
    let trace = fake.root().join("phases.trace");
    let running = fake
        .coder()
        .args(["--timeout", "120", "--kill-grace", "90", "task"])
        .env("CODER_TRACE_PHASES", &trace)
        .deadline(Duration::from_secs(80))
        .spawn();
    fake.wait_for_file("ready", Duration::from_secs(20));
    running.signal(Signal::SIGINT);
    common::wait_for_phase(&trace, "tree.grace", Duration::from_secs(20));
    let second = std::time::Instant::now();
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.assert_failure("cancelled", 130);
    assert!(
        second.elapsed() < Duration::from_secs(30),
        "coder took {:?} after the second SIGINT",
        second.elapsed()
    );
    fake.wait_for_file("grandchild.pid", Duration::from_secs(1));
    common::assert_no_process_left(fake.marker());
}

/// A run cancelled after the agent began to change things (here: a Write, then a request
/// the backend never answers) says how to go on from there, as any other stop does:
/// `resume_hint` with its session, which resumes with the Write in its history. A
/// cancelled run had no hint, and a user who pressed Ctrl-C to redirect the agent had to
/// build the command (newuser32).
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_run_cancelled_after_a_write_says_how_to_continue() {
    let scene = common::ReplayScene::new("cancel_mid_run.json", 0);
    let transcript = scene.fake.root().join("run.jsonl");
    let running = scene
        .coder_within(Duration::from_secs(60))
        .arg("--transcript")
        .arg(&transcript)
        .arg("start the work")
        .spawn();
    // The Write's result reached the CLI's session before the request that stalls.
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while !std::fs::read_to_string(&transcript)
        .unwrap_or_default()
        .contains("tool_result")
    {
        assert!(std::time::Instant::now() < deadline, "no tool result");
        std::thread::sleep(Duration::from_millis(20));
    }
    running.signal(Signal::SIGINT);
    let out = running.wait();
    let detail = out.assert_failure("cancelled", 130);
    let session = out.session_id().unwrap_or_default().to_owned();
    let hint = detail["resume_hint"].as_str().unwrap_or_default();
    assert!(
        hint.starts_with("the agent ran tools that may have changed things (Write)")
            && hint.ends_with(&format!("--session-id {session} \"continue\"")),
        "{}",
        out.explain()
    );
    let resumed = scene
        .coder_within(Duration::from_secs(60))
        .args(["--session-id", &session, "continue"])
        .run();
    resumed.assert_success("Continued where it stopped.");
}

#[test]
fn cancel_before_the_child_printed_anything() {
    let fake = Fake::new(json!([steps::touch("ready"), steps::sleep(3600.0)]));
    let running = fake.coder().arg("task").spawn();
    fake.wait_for_file("ready", Duration::from_secs(20));
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.assert_failure("cancelled", 130);
}

/// Unconfined (`danger-full-access`), the program is started without the helper: it must
/// still lead its own process group, and die with coder when coder is SIGKILLed.
#[test]
fn an_unconfined_child_leads_its_group_and_dies_with_a_killed_coder() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::touch("ready"),
        steps::sleep(60.0)
    ]));
    let mut coder = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(fake.coder().argv())
        .args(["--sandbox", "danger-full-access", "task"])
        .env("CODER_STATE_DIR", fake.state_dir())
        .env("ANTHROPIC_AUTH_TOKEN", "coder-test-token")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    fake.wait_for_file("ready", Duration::from_secs(20));
    let record = fake.record();
    assert_eq!(record.pgid(), record.pid(), "the child leads its own group");
    assert!(pid_alive(record.pid()));
    coder.kill().unwrap();
    assert!(!coder.wait().unwrap().success());
    common::assert_no_process_left(fake.marker());
}

/// Whether `pid`'s main thread sleeps in a read of its stdin or a poll (`read(0, …)`,
/// `poll`, `ppoll`), from `/proc/PID/syscall`.
fn waits_on_stdin(pid: u32) -> bool {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    let mut fields = text.split_whitespace();
    matches!(
        (fields.next(), fields.next()),
        (Some("0"), Some("0x0")) | (Some("7" | "271"), _)
    )
}

/// `echo task | coder` whose pipe never ends (`sleep | coder`, a forgotten heredoc): a
/// Ctrl-C while coder waits for the prompt (or the `--request -` JSON) still ends in a
/// `cancelled` envelope that says what it waited for.
#[test]
fn sigint_while_waiting_for_the_prompt_on_stdin_is_cancelled() {
    for (args, awaited) in [
        (&[][..], "waited for the prompt on stdin"),
        (
            &["--request", "-"][..],
            "waited for the --request JSON on stdin",
        ),
    ] {
        sigint_while_waiting_on_stdin(args, awaited);
    }
}

fn sigint_while_waiting_on_stdin(args: &[&str], awaited: &str) {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let fake = Fake::new(json!(steps::answer("should not run")));
    let mut command = Command::new(common::CODER);
    common::default_cancelling_signals(&mut command);
    let mut child = command
        .args(args)
        .arg("--cd")
        .arg(fake.workspace())
        .arg("--claude-bin")
        .arg(fake.bin())
        .env("CODER_STATE_DIR", fake.state_dir())
        .env("ANTHROPIC_AUTH_TOKEN", common::SECRET_TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kept open and silent for the whole test.
    let _stdin = child.stdin.take();
    let watchdog = common::Deadline::kill_after(&child, Duration::from_secs(30));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !waits_on_stdin(child.id()) {
        assert!(
            std::time::Instant::now() < deadline,
            "coder never waited on its stdin"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        Signal::SIGINT,
    )
    .unwrap();
    let status = common::wait_within(&mut child, Duration::from_secs(20));
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    drop(watchdog);
    assert_eq!(status.code(), Some(130), "{status:?}, stdout: {stdout}");
    let envelope: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(envelope["error_kind"], "cancelled", "{envelope}");
    assert!(
        envelope["error"]
            .as_str()
            .is_some_and(|e| e.contains("SIGINT") && e.contains(awaited)),
        "{envelope}"
    );
    assert!(!fake.has_record(), "the child must not be started");
}

/// A signal in the gap between reading the prompt from stdin and the run listening for
/// signals (held open by coder's debug-only test hook) still ends in the `cancelled`
/// envelope, with no child started: the signal waits, held, for the run to take it.
#[test]
fn a_signal_right_after_the_prompt_was_read_is_cancelled() {
    for (signal, exit) in [(Signal::SIGTERM, 143), (Signal::SIGINT, 130)] {
        let fake = Fake::new(json!(steps::answer("should not run")));
        let gap = fake.root().join("in-the-gap");
        let running = fake
            .coder()
            .env("CODER_TEST_HOOK_PAUSE_AFTER_PROMPT", &gap)
            .stdin("the task")
            .arg("-")
            .spawn();
        common::wait_for_path(&gap, Duration::from_secs(20));
        running.signal(signal);
        std::fs::remove_file(&gap).unwrap();
        let out = running.wait();
        out.assert_failure("cancelled", exit);
        assert!(!fake.has_record(), "the child ran: {}", out.explain());
    }
}

/// A signal while coder checks its arguments, the prompt given as one, says so: it said
/// "while coder waited for the prompt on stdin", which it never read.
#[test]
fn a_signal_while_the_arguments_are_checked_names_no_stdin() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let gap = fake.root().join("args-checked");
    let running = fake
        .coder()
        .env("CODER_TEST_HOOK_PAUSE_ARGS_CHECKED", &gap)
        .arg("the task")
        .spawn();
    common::wait_for_path(&gap, Duration::from_secs(20));
    running.signal(Signal::SIGTERM);
    std::fs::remove_file(&gap).unwrap();
    let out = running.wait();
    out.assert_failure("cancelled", 143);
    assert_eq!(
        out.envelope["error"],
        "cancelled by SIGTERM before the run started, while coder checked its arguments",
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran: {}", out.explain());
}

/// A SIGINT the caller set to be ignored (`trap '' INT` in a CI runner's or nohup's shell)
/// stays ignored for the whole run, as it does for any POSIX tool: sent while the
/// arguments are checked, or while the agent works, it neither cancels the run nor kills
/// coder. It was held while the arguments were checked and then cancelled the run as soon
/// as coder listened for signals, and a SIGINT during the run cancelled it.
#[test]
fn an_ignored_sigint_stays_ignored_for_the_whole_run() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::touch("ready"),
        // Long enough for a SIGINT that coder took to have cancelled the run.
        steps::sleep(2.0),
        steps::text("done"),
        steps::result_ok("done"),
    ]));
    let gap = fake.root().join("args-checked");
    let running = fake
        .coder()
        .through(["sh", "-c", "trap '' INT; exec \"$@\"", "sh"])
        .env("CODER_TEST_HOOK_PAUSE_ARGS_CHECKED", &gap)
        .arg("the task")
        .spawn();
    common::wait_for_path(&gap, Duration::from_secs(20));
    running.signal(Signal::SIGINT);
    std::fs::remove_file(&gap).unwrap();
    fake.wait_for_file("ready", Duration::from_secs(20));
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.assert_success("done");
}

/// With SIGINT ignored, SIGTERM still cancels the run.
#[test]
fn sigterm_cancels_a_run_whose_sigint_is_ignored() {
    let fake = busy_child(false);
    let running = fake
        .coder()
        .through(["sh", "-c", "trap '' INT; exec \"$@\"", "sh"])
        .args(["--timeout", "60", "task"])
        .spawn();
    fake.wait_for_file("ready", Duration::from_secs(20));
    running.signal(Signal::SIGTERM);
    running.wait().assert_failure("cancelled", 143);
    common::assert_no_process_left(fake.marker());
}

/// A run whose change ledger is snapshotted before the CLI starts (`danger-full-access`:
/// no proxy holds the CLI while it is taken) is cancelled by a SIGTERM during that
/// snapshot at once. The first snapshot of a big workspace takes seconds (9 s at 100k
/// files on a cold cache), and the signal waited for its end; the test stretches it to a
/// minute (`CODER_TEST_LEDGER_DELAY_MS`).
#[test]
fn sigterm_during_the_ledgers_snapshot_cancels_the_run_at_once() {
    let fake = Fake::new(json!([steps::init()]));
    let trace = fake.root().join("phases.trace");
    let running = fake
        .coder()
        .args(["--sandbox", "danger-full-access", "task"])
        .env("CODER_TEST_LEDGER_DELAY_MS", "60000")
        .env("CODER_TRACE_PHASES", &trace)
        .deadline(Duration::from_secs(50))
        .spawn();
    common::wait_for_phase(&trace, "ledger.start", Duration::from_secs(20));
    let within = Duration::from_secs(20);
    common::cancel_during_setup(&fake, running, "the change ledger's snapshot", within);
}
