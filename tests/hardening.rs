//! What a new user tripped over (issue: hardening), each through the binary: the order of
//! `coder runs`, closed pipes, where state goes without `HOME`, messages for bad input.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{Bounded, Fake, steps};
use serde_json::Value;

const CODER: &str = env!("CARGO_BIN_EXE_coder");
const DEADLINE: Duration = Duration::from_secs(30);

/// Waits for `child` up to [`DEADLINE`]; kills it and fails the test past that.
fn wait_bounded(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("coder did not exit within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `cmd` to its end within [`DEADLINE`]: its stdout, and how it ended.
fn stdout_of(cmd: &mut Command) -> (String, ExitStatus) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    (text, wait_bounded(&mut child))
}

fn runs_json(state: &Path, args: &[&str]) -> Value {
    let (text, status) = stdout_of(
        Command::new(CODER)
            .arg("runs")
            .args(args)
            .arg("--state-dir")
            .arg(state),
    );
    assert!(status.success(), "coder runs {args:?}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn runs_started_in_the_same_second_are_listed_newest_first() {
    let fake = Fake::new(Value::Array(steps::answer("done")));
    // Pairs of quick runs: with ids ordered only to the second, the newer run of a pair
    // came first half of the time.
    for round in 0..5 {
        let older = fake.coder().arg("first").run();
        older.assert_success("done");
        let newer = fake.coder().arg("second").run();
        newer.assert_success("done");
        let last = runs_json(&fake.state_dir(), &["show", "last", "--json"]);
        assert_eq!(
            last["prompt_head"], "second",
            "round {round}: `runs show last` is not the newest run: {last}"
        );
        let listed = runs_json(&fake.state_dir(), &["list", "--json", "-n", "2"]);
        assert_eq!(
            listed[0]["path"], newer.envelope["transcript"],
            "round {round}: newest first: {listed}"
        );
        assert_eq!(listed[1]["path"], older.envelope["transcript"]);
    }
}

/// Writes `count` minimal transcripts into a fresh state dir.
fn many_runs(count: usize) -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    let runs = state.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    for i in 0..count {
        let id = format!("20261123T120000.{i:06}Z-abcdef{:02}", i % 100);
        let start = serde_json::json!({
            "ts": "2026-11-23T12:00:00.000Z", "source": "coder", "kind": "start",
            "data": {"run_id": id, "workspace": format!("/work/{}", "w".repeat(200)),
                     "backend": "replay"}
        });
        std::fs::write(runs.join(format!("{id}.jsonl")), format!("{start}\n")).unwrap();
    }
    state
}

#[test]
fn a_closed_pipe_ends_every_listing_quietly() {
    let state = many_runs(300);
    for args in [
        vec!["runs", "list", "--json", "-n", "300"],
        vec!["runs", "list", "-n", "300"],
        vec!["runs", "show", "last", "--json"],
        vec!["doctor", "--json"],
        vec!["prompt", "a task"],
    ] {
        let mut child = Command::new(CODER)
            .args(&args)
            .arg("--state-dir")
            .arg(state.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if args[0] != "runs" {
            // Subcommands without --state-dir: rebuild the command without it.
            let _ = child.kill();
            let _ = child.wait();
            child = Command::new(CODER)
                .args(&args)
                .env("CODER_STATE_DIR", state.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
        }
        // Read a little, then close the pipe: `| head -c 10`.
        let mut head = [0u8; 10];
        let mut stdout = child.stdout.take().unwrap();
        let _ = stdout.read(&mut head);
        drop(stdout);
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = wait_bounded(&mut child);
        assert_ne!(status.code(), Some(101), "{args:?} panicked: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        if args[0] == "runs" {
            assert!(status.success(), "{args:?}: {status:?} {stderr}");
        }
    }
}

#[test]
fn without_home_coder_says_where_state_goes_and_never_uses_a_shared_tmp() {
    let fake = Fake::new(Value::Array(steps::answer("done")));
    let shared = Path::new("/tmp/coder-state");
    let existed = shared.exists();
    let out = fake
        .coder()
        .env_remove("HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("CODER_STATE_DIR")
        .arg("task")
        .run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(message.contains("CODER_STATE_DIR"), "{message}");
    assert!(
        !fake.has_record(),
        "the CLI must not start without a state dir"
    );
    if !existed {
        assert!(!shared.exists(), "coder created {}", shared.display());
    }
}

#[test]
fn the_inherit_backend_without_credentials_fails_fast_with_a_config_error() {
    let fake = Fake::new(Value::Array(steps::answer("done")));
    let out = fake
        .coder()
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("CLAUDE_CODE_OAUTH_TOKEN")
        .env("HOME", fake.root())
        .arg("task")
        .run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(message.contains("ANTHROPIC_API_KEY"), "{message}");
    assert!(message.contains("--backend"), "{message}");
    assert!(!fake.has_record(), "the CLI was started: {}", out.explain());
    assert!(
        detail["last_lines"].as_array().is_none_or(Vec::is_empty),
        "{detail}"
    );
}

#[test]
fn all_messages_stop_at_their_cap_with_a_marker_of_what_was_dropped() {
    let fake = Fake::new(serde_json::json!([
        steps::init(),
        {"step": "flood", "bytes": 40 * 1024 * 1024, "kind": "events", "line_bytes": 65536},
        steps::text("done"),
        steps::result_ok("done"),
    ]));
    let out = fake
        .coder()
        .deadline(Duration::from_secs(120))
        .args(["--return-all-messages", "task"])
        .run();
    out.assert_success("done");
    let messages = out.envelope["all_messages"].as_array().unwrap();
    let kept: usize = messages.iter().map(|m| m.to_string().len()).sum();
    assert!(kept <= 33 * 1024 * 1024, "all_messages holds {kept} bytes");
    let marker = messages.last().unwrap();
    assert_eq!(marker["type"], "coder_truncated", "{marker}");
    assert!(marker["dropped_messages"].as_u64().unwrap() > 0, "{marker}");
    assert!(
        marker["dropped_bytes"].as_u64().unwrap() > 7 * 1024 * 1024,
        "{marker}"
    );
    assert_eq!(marker["max_bytes"], 32 * 1024 * 1024);
}

#[test]
fn the_transcript_keeps_the_head_of_a_huge_prompt_and_its_size() {
    let fake = Fake::new(Value::Array(steps::answer("done")));
    let prompt = format!("{}END-OF-PROMPT", "p".repeat(1024 * 1024));
    let out = fake.coder().stdin(prompt.clone()).arg("-").run();
    out.assert_success("done");
    // The child got all of it.
    assert!(fake.record().stdin().ends_with("END-OF-PROMPT"));
    let transcript =
        common::read_transcript(Path::new(out.envelope["transcript"].as_str().unwrap()));
    let start = &transcript[0]["data"];
    let kept = start["prompt"].as_str().unwrap();
    assert!(kept.len() < 70 * 1024, "{} bytes kept", kept.len());
    assert!(
        kept.ends_with(&format!("[truncated: {} bytes in all]", prompt.len())),
        "{}",
        &kept[kept.len() - 80..]
    );
    assert_eq!(start["prompt_bytes"], prompt.len());
}

#[test]
fn session_records_age_out_with_the_transcripts_retention() {
    let fake = Fake::new(Value::Array(steps::answer("done")));
    let sessions = fake.state_dir().join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(86_400);
    for _ in 0..205 {
        let id = uuid::Uuid::new_v4();
        let record = sessions.join(format!("{id}.json"));
        std::fs::write(
            &record,
            format!(r#"{{"session_id":"{id}","workspace":"/w","backend":"b","created_at":1,"updated_at":1}}"#),
        )
        .unwrap();
        std::fs::write(sessions.join(format!("{id}.jsonl")), "{}\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&record)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let out = fake.coder().arg("task").run();
    out.assert_success("done");
    let names: Vec<String> = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let records = names.iter().filter(|n| n.ends_with(".json")).count();
    let histories = names.iter().filter(|n| n.ends_with(".jsonl")).count();
    assert_eq!(records, 200, "{names:?}");
    assert!(
        histories <= 200,
        "histories go with their records: {histories}"
    );
    let this_run = out.envelope["SESSION_ID"].as_str().unwrap();
    assert!(
        names.contains(&format!("{this_run}.json")),
        "the new session's record stays"
    );
}

#[test]
fn doctor_and_a_run_give_the_same_pinned_install_hint() {
    let fake = Fake::new(Value::Array(steps::answer("done")));
    let missing = fake.root().join("nowhere/claude");
    let run = fake.coder().claude_bin(&missing).arg("task").run();
    let detail = run.assert_failure("command_not_found", 127);
    let run_hint = detail["hint"].as_str().unwrap().to_owned();
    let (text, _) = stdout_of(
        Command::new(CODER)
            .args(["doctor", "--json"])
            .env_clear()
            .env("PATH", fake.root().join("empty-bin"))
            .env("HOME", fake.root())
            .env("ANTHROPIC_AUTH_TOKEN", "coder-test-token"),
    );
    let report: Value = serde_json::from_str(&text).unwrap();
    let claude = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "claude")
        .unwrap();
    assert_eq!(claude["hints"][0], run_hint, "{claude}");
    let pinned = format!(
        "@anthropic-ai/claude-code@{}",
        coder::doctor::TESTED_CLAUDE_VERSION
    );
    assert!(run_hint.contains(&pinned), "{run_hint}");
    assert!(
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/setup-claude"))
            .unwrap()
            .contains(coder::doctor::TESTED_CLAUDE_VERSION),
        "scripts/setup-claude pins the same version"
    );
}

#[test]
fn a_prompt_too_long_says_so_and_is_not_retried() {
    let fake = Fake::new(serde_json::json!([
        steps::init(),
        {"step": "synthetic_error", "error": "invalid_request", "api_error_status": 400,
         "text": "Prompt is too long"},
        {"step": "result", "is_error": true, "api_error_status": 400,
         "text": "Prompt is too long"},
        steps::exit(1),
    ]));
    let out = fake.coder().args(["--max-retries", "2", "task"]).run();
    let detail = out.assert_failure("upstream_error", 1);
    let message = detail["message"].as_str().unwrap();
    assert!(message.contains("context window"), "{message}");
    assert!(!message.contains("the backend API failed"), "{message}");
    assert!(
        detail["hint"].as_str().unwrap().contains("fresh session"),
        "{detail}"
    );
    assert_eq!(detail["retryable"], false, "{detail}");
    assert_eq!(out.envelope["attempts"].as_array().unwrap().len(), 1);
}

#[test]
fn a_runtime_dir_beneath_dev_shm_does_not_break_the_sandbox() {
    // The agent gets a /dev/shm of its own: run dirs made beneath the host's were hidden
    // by it, and every confined run failed.
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let runtime = tempfile::Builder::new()
        .prefix("coder-test-xdg-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let (text, status) = stdout_of(
        Command::new(CODER)
            .args(["sandbox", "--mode", "workspace-write", "--cd"])
            .arg(&ws)
            .args(["--", "sh", "-c", "echo \"$TMPDIR\" > tmpdir; echo ran"])
            .env("CODER_STATE_DIR", dir.path().join("state"))
            .env("XDG_RUNTIME_DIR", runtime.path()),
    );
    assert_eq!(status.code(), Some(0), "{text}");
    assert_eq!(text.trim(), "ran");
    let tmpdir = std::fs::read_to_string(ws.join("tmpdir")).unwrap();
    assert!(
        !tmpdir.starts_with("/dev/shm"),
        "the run dir went beneath /dev/shm: {tmpdir}"
    );
}

#[test]
fn coder_sandbox_leaves_no_per_call_directory_in_any_mode() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let state = dir.path().join("state");
    for mode in ["workspace-write", "read-only", "danger-full-access"] {
        let (text, status) = stdout_of(
            Command::new(CODER)
                .args(["sandbox", "--mode", mode, "--cd"])
                .arg(&ws)
                .args(["--", "sh", "-c", "echo \"$TMPDIR\"; exit 3"])
                .env("CODER_STATE_DIR", &state)
                .env("XDG_RUNTIME_DIR", ""),
        );
        assert_eq!(status.code(), Some(3), "{mode}: the command's exit status");
        assert!(
            !text.trim().is_empty(),
            "{mode}: a private TMPDIR was given"
        );
        let left: Vec<_> = std::fs::read_dir(state.join("sandbox"))
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{mode}: left behind {left:?}");
    }
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_demo_ends_by_saying_where_the_claude_cli_is_and_how_to_use_it() {
    let claude = common::real_claude();
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo"))
        .env("CODER_DEMO_BIN", CODER)
        .env("CODER_STATE_DIR", tempfile::tempdir().unwrap().keep())
        .output_within(Duration::from_secs(300));
    assert!(out.status.success(), "{out:?}");
    let envelope: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(envelope["success"], true, "{envelope}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("export CODER_CLAUDE_BIN="), "{last}");
    // The path it names is a claude that runs.
    let named = last
        .split("export CODER_CLAUDE_BIN=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap();
    let version = Command::new(named).arg("--version").output_bounded();
    assert!(
        String::from_utf8_lossy(&version.stdout).contains("Claude Code"),
        "{named} (the suite's is {})",
        claude.display()
    );
}

/// `coder --help` names every subcommand there is (each of which answers `--help`), and its
/// `--sandbox` values are described in words a user knows, not by Rust variant names.
#[test]
fn the_run_modes_help_names_every_subcommand_in_user_words() {
    let (help, status) = stdout_of(Command::new(CODER).arg("--help"));
    assert!(status.success(), "{help}");
    let others = help
        .lines()
        .skip_while(|l| !l.starts_with("Other commands:"))
        .take_while(|l| !l.starts_with("Exit codes:"))
        .collect::<Vec<_>>()
        .join(" ");
    for sub in [
        "plan", "doctor", "prompt", "runs", "route", "replay", "sandbox", "mcp", "fs",
    ] {
        assert!(
            others.contains(&format!("coder {sub}")),
            "`coder {sub}` is missing from: {others}"
        );
        let (text, status) = stdout_of(Command::new(CODER).args([sub, "--help"]));
        assert!(status.success(), "coder {sub} --help: {text}");
    }
    for internal in ["ReadOnly", "WorkspaceWrite", "DangerFullAccess"] {
        assert!(!help.contains(internal), "{internal} in the help:\n{help}");
    }
    assert!(help.contains("129/130/143 cancelled"), "{help}");
}
