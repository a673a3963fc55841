//! What a person or an orchestrator sees of a run besides the envelope: the JSONL
//! transcript (also after coder is SIGKILLed), `coder runs list/show`, retention, and the
//! progress line that appears on a terminal and never on a pipe.

mod common;

use common::Bounded;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Fake, read_transcript, steps};
use serde_json::{Value, json};

const CODER: &str = env!("CARGO_BIN_EXE_coder");

fn tool_run() -> Value {
    json!([
        steps::init(),
        {"step": "tool_use", "name": "Bash", "input": {"command": "make test"}, "id": "toolu_1"},
        {"step": "tool_result", "content": "all 12 tests passed"},
        // A subagent's events, under the Task call that started it.
        {"step": "tool_use", "name": "Task", "input": {"prompt": "look"}, "id": "toolu_task"},
        {"step": "tool_use", "name": "Grep", "input": {"pattern": "x"}, "id": "toolu_sub",
         "parent_tool_use_id": "toolu_task"},
        {"step": "tool_result", "content": "no match", "tool_use_id": "toolu_sub",
         "parent_tool_use_id": "toolu_task"},
        {"step": "tool_result", "content": "nothing found", "tool_use_id": "toolu_task"},
        steps::text("Tests pass."),
        {"step": "result", "text": "Tests pass.", "num_turns": 2,
         "usage": {"input_tokens": 100, "output_tokens": 20}},
    ])
}

fn runs(fake: &Fake, args: &[&str]) -> String {
    let out = Command::new(CODER)
        .arg("runs")
        .args(args)
        .arg("--state-dir")
        .arg(fake.state_dir())
        .output_bounded();
    assert!(out.status.success(), "coder runs {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_run_writes_a_transcript_that_runs_list_and_show_read_back() {
    let fake = Fake::new(tool_run());
    let out = fake.coder().arg("run the tests").run();
    out.assert_success("Tests pass.");
    let path = out.envelope["transcript"]
        .as_str()
        .unwrap_or_else(|| panic!("no transcript: {}", out.explain()));
    assert!(path.starts_with(&*fake.state_dir().to_string_lossy()));
    let entries = read_transcript(Path::new(path));
    let kinds: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["source"].as_str().unwrap(), e["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds.first(), Some(&("coder", "start")));
    assert_eq!(kinds.last(), Some(&("coder", "outcome")));
    for expected in [("coder", "attempt"), ("coder", "spawn"), ("child", "event")] {
        assert!(
            kinds.contains(&expected),
            "{expected:?} missing in {kinds:?}"
        );
    }
    assert!(
        entries
            .iter()
            .all(|e| e["ts"].as_str().is_some_and(|t| t.ends_with('Z')))
    );
    // The child's events keep their ids and parent ids; the secret in coder's environment
    // never appears.
    let events: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "event").collect();
    assert!(events.iter().all(|e| e.get("id").is_some()), "{events:?}");
    for e in &events {
        // Each entry's id is the CLI's own uuid of that event.
        assert_eq!(e["id"], e["event"]["uuid"], "{e}");
    }
    let under_task: Vec<&Value> = events
        .iter()
        .copied()
        .filter(|e| e["parent_id"] == "toolu_task")
        .collect();
    assert_eq!(
        under_task.len(),
        2,
        "the subagent's two events: {events:#?}"
    );
    assert_eq!(
        under_task[0]["event"]["message"]["content"][0]["id"],
        "toolu_sub"
    );
    assert_eq!(
        under_task[1]["event"]["message"]["content"][0]["tool_use_id"],
        "toolu_sub"
    );
    assert!(
        events
            .iter()
            .filter(|e| e["parent_id"] != "toolu_task")
            .all(|e| e["parent_id"].is_null()),
        "{events:#?}"
    );
    let text = std::fs::read_to_string(path).unwrap();
    assert!(!text.contains(common::SECRET_TOKEN));

    let listed: Vec<Value> = serde_json::from_str(&runs(&fake, &["list", "--json"])).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["outcome"], "success");
    assert_eq!(listed[0]["tokens_in"], 100);
    assert_eq!(listed[0]["tokens_out"], 20);
    assert_eq!(listed[0]["session_id"], out.envelope["SESSION_ID"]);

    let shown: Value = serde_json::from_str(&runs(&fake, &["show", "last", "--json"])).unwrap();
    assert_eq!(shown["prompt_head"], "run the tests");
    assert_eq!(shown["tool_calls"][0]["tool"], "Bash");
    assert_eq!(shown["tool_calls"][0]["result"], "all 12 tests passed");
    let readable = runs(&fake, &["show", listed[0]["run_id"].as_str().unwrap()]);
    assert!(readable.contains("Bash(command=make test)"), "{readable}");
    assert!(readable.contains("→ all 12 tests passed"), "{readable}");
    assert!(readable.contains("outcome   success"), "{readable}");
}

#[test]
fn transcript_of_a_sigkilled_coder_is_readable_up_to_the_kill() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "tool_use", "name": "Bash", "input": {"command": "long job"}, "id": "toolu_9"},
        steps::touch("ready"),
        steps::sleep(30.0),
    ]));
    let transcript = fake.root().join("killed.jsonl");
    let mut coder = Command::new(CODER)
        .args(fake.coder().argv())
        .arg("--transcript")
        .arg(&transcript)
        .arg("work")
        .env("CODER_STATE_DIR", fake.state_dir())
        .env("ANTHROPIC_AUTH_TOKEN", "coder-test-token")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _deadline = common::Deadline::kill_after(&coder, common::DEFAULT_DEADLINE);
    fake.wait_for_file("ready", Duration::from_secs(20));
    // The touch comes after the events; give the supervisor's loop the events it already has.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains("toolu_9")) {
        assert!(
            Instant::now() < deadline,
            "events never reached the transcript"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    coder.kill().unwrap();
    let status = coder.wait().unwrap();
    assert!(!status.success());
    // The child dies with coder (parent-death signal).
    common::assert_no_process_left(fake.marker());

    let entries = read_transcript(&transcript);
    assert_eq!(entries[0]["kind"], "start");
    assert!(
        entries
            .iter()
            .any(|e| e["kind"] == "event" && e["event"]["type"] == "assistant")
    );
    assert!(!entries.iter().any(|e| e["kind"] == "outcome"));
    let shown: Value = serde_json::from_str(&runs(
        &fake,
        &["show", transcript.to_str().unwrap(), "--json"],
    ))
    .unwrap();
    assert_eq!(shown["outcome"]["unfinished"], true);
    assert_eq!(shown["tool_calls"][0]["tool"], "Bash");
}

#[test]
fn old_transcripts_are_pruned_to_the_retention_limit() {
    let fake = Fake::new(json!(steps::answer("ok")));
    let runs_dir = fake.state_dir().join("runs");
    std::fs::create_dir_all(&runs_dir).unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(86_400);
    for i in 0..205 {
        let path = runs_dir.join(format!("20200101T0000{i:03}Z-old.jsonl"));
        std::fs::write(&path, "{}\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let out = fake.coder().arg("hi").run();
    out.assert_success("ok");
    let left: Vec<String> = std::fs::read_dir(&runs_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 200, "retention keeps 200 runs");
    let newest = Path::new(out.envelope["transcript"].as_str().unwrap());
    assert!(newest.exists(), "the run's own transcript is kept");
}

/// The transcripts in `dir`: (total bytes, names).
fn transcripts(dir: &Path) -> (u64, Vec<String>) {
    let mut total = 0;
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        total += entry.metadata().unwrap().len();
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    (total, names)
}

#[test]
fn transcripts_over_the_byte_cap_are_pruned_while_the_child_runs() {
    const CAP: u64 = 512 * 1024 * 1024;
    let fake = Fake::new(json!([
        steps::init(),
        steps::touch("running"),
        {"step": "wait_file", "path": "release", "timeout": 30},
        steps::text("ok"),
        steps::result_ok("ok"),
    ]));
    let runs_dir = fake.state_dir().join("runs");
    std::fs::create_dir_all(&runs_dir).unwrap();
    // Three sparse transcripts of a third of the cap and a byte: over the cap by three.
    let day_ago = std::time::SystemTime::now() - Duration::from_secs(86_400);
    for i in 0..3u64 {
        let path = runs_dir.join(format!("20200101T00000{i}Z-old.jsonl"));
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(CAP / 3 + 1).unwrap();
        file.set_modified(day_ago + Duration::from_secs(i)).unwrap();
    }
    let oldest = runs_dir.join("20200101T000000Z-old.jsonl");
    let running = fake.coder().arg("hi").spawn();
    fake.wait_for_file("running", Duration::from_secs(20));
    // The child is held: the oldest goes now, not after the run's transcript is finished.
    let deadline = Instant::now() + Duration::from_secs(20);
    while oldest.exists() {
        assert!(
            Instant::now() < deadline,
            "the oldest transcript is still there while the child runs"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(fake.file("release"), "go").unwrap();
    let first = running.wait();
    first.assert_success("ok");
    let first_path = Path::new(first.envelope["transcript"].as_str().unwrap()).to_owned();
    let first_len = std::fs::metadata(&first_path).unwrap().len();
    let (total, names) = transcripts(&runs_dir);
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(
        total <= CAP + first_len,
        "{total} bytes kept, over the cap and one transcript"
    );

    // Meanwhile another run finished a transcript of a third of the cap: over the cap
    // again. The next run brings all but its own within it.
    let other = runs_dir.join("20300101T000000Z-other.jsonl");
    std::fs::File::create(&other)
        .unwrap()
        .set_len(CAP / 3 + 1)
        .unwrap();
    let second = fake.coder().arg("again").run();
    second.assert_success("ok");
    let second_path = Path::new(second.envelope["transcript"].as_str().unwrap()).to_owned();
    let second_len = std::fs::metadata(&second_path).unwrap().len();
    let (total, names) = transcripts(&runs_dir);
    assert!(first_path.exists() && second_path.exists(), "{names:?}");
    assert!(other.exists(), "{names:?}");
    assert!(
        !runs_dir.join("20200101T000001Z-old.jsonl").exists(),
        "the oldest left is deleted: {names:?}"
    );
    assert!(
        total - second_len <= CAP,
        "{total} bytes kept, over the cap and the newest transcript"
    );
}

/// Runs coder with stderr on a pseudo-terminal; returns (stdout, what the terminal showed).
fn run_on_pty(fake: &Fake, args: &[&str]) -> (String, String) {
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    // SAFETY: openpty writes two descriptors into the provided integers; the name, termios
    // and winsize arguments may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors were just opened by openpty and are owned here.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = Command::new(CODER)
        .args(fake.coder().argv())
        .args(args)
        .env("CODER_STATE_DIR", fake.state_dir())
        .env("ANTHROPIC_AUTH_TOKEN", "coder-test-token")
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let _deadline = common::Deadline::kill_after(&child, common::DEFAULT_DEADLINE);
    let reader = std::thread::spawn(move || {
        let mut file = std::fs::File::from(master);
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the last writer (coder) has closed the terminal.
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.extend_from_slice(&buf[..n]);
        }
        let _ = file.as_raw_fd();
        String::from_utf8_lossy(&shown).into_owned()
    });
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child.wait().unwrap();
    (stdout, reader.join().unwrap())
}

fn slow_tool_run() -> Value {
    json!([
        steps::init(),
        {"step": "tool_use", "name": "Bash", "input": {"command": "npm test"}, "id": "toolu_1"},
        steps::sleep(1.0),
        {"step": "tool_result", "content": "ok"},
        steps::text("done"),
        steps::result_ok("done"),
    ])
}

#[test]
fn progress_is_drawn_on_a_terminal_and_cleared_before_the_envelope() {
    let fake = Fake::new(slow_tool_run());
    let (stdout, terminal) = run_on_pty(&fake, &["test it"]);
    let envelope: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(envelope["success"], true, "{stdout}");
    assert!(
        terminal.contains("running Bash(npm test)"),
        "the terminal showed: {terminal:?}"
    );
    assert!(terminal.contains("turn"), "{terminal:?}");
    // Cleared at the end: the last thing written is an erase, not a progress line.
    let tail = terminal.rsplit("tokens").next().unwrap_or("");
    assert!(
        tail.contains("\u{1b}["),
        "no clearing sequence after the last line: {terminal:?}"
    );
    // stdout holds the envelope and nothing else.
    assert_eq!(stdout.lines().count(), 1);
}

/// The token count is the run's: a repair turn (a second CLI invocation, each of whose
/// `result` reports only its own usage, 12 in / 7 out here) adds to it. It was set to the
/// last invocation's, and fell back to 12 / 7 as the repair turn ended (newuser32).
#[test]
fn progress_counts_the_tokens_of_every_turn_of_the_run() {
    let fake = Fake::new(json!([steps::init(), steps::result_ok("done")]));
    let (stdout, terminal) = run_on_pty(
        &fake,
        &[
            "--no-verify-baseline",
            "--verify",
            "sleep 0.6; false",
            "--repair-turns",
            "1",
            "test it",
        ],
    );
    let envelope: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(envelope["verification"]["repair_turns"], 1, "{stdout}");
    assert!(
        terminal.contains("tokens 24 in / 14 out"),
        "the terminal showed: {terminal:?}"
    );
}

#[test]
fn progress_never_appears_on_a_pipe_or_with_quiet() {
    let fake = Fake::new(slow_tool_run());
    let out = fake.coder().arg("test it").run();
    out.assert_success("done");
    assert!(!out.stderr.contains("running Bash"), "{}", out.stderr);
    let fake = Fake::new(slow_tool_run());
    let (stdout, terminal) = run_on_pty(&fake, &["--quiet", "test it"]);
    assert!(stdout.contains(r#""success":true"#), "{stdout}");
    assert!(!terminal.contains("running Bash"), "{terminal:?}");
}

/// `--state-dir` that is a regular file or does not exist is a mistake, not "no recorded
/// runs": `coder runs list` and `coder runs show` say so and exit 78 (with `--json`, as a
/// `config_error` envelope on stdout). A state directory
/// without any run yet still lists nothing, successfully.
#[test]
fn runs_refuses_a_state_dir_that_is_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.txt");
    std::fs::write(&file, "not a directory").unwrap();
    let missing = dir.path().join("no-such-state");
    for (state, why) in [(&file, "not a directory"), (&missing, "no such directory")] {
        for args in [&["list"][..], &["list", "--json"], &["show", "last"]] {
            let out = Command::new(CODER)
                .arg("runs")
                .args(args)
                .arg("--state-dir")
                .arg(state)
                .output_bounded();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(78), "{args:?}: {stderr}");
            if args.contains(&"--json") {
                // Asked for JSON: the mistake is a config_error envelope on stdout.
                let envelope: serde_json::Value = serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("{args:?}: stdout is no JSON ({e}): {out:?}"));
                assert_eq!(envelope["error_kind"], "config_error", "{envelope}");
                let error = envelope["error"].as_str().unwrap_or_default();
                assert!(
                    error.contains("--state-dir") && error.contains(why),
                    "{args:?}: {envelope}"
                );
                continue;
            }
            assert!(
                stderr.contains("--state-dir") && stderr.contains(why),
                "{args:?}: {stderr}"
            );
            assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        }
    }
    let empty = dir.path().join("empty-state");
    std::fs::create_dir(&empty).unwrap();
    let out = Command::new(CODER)
        .args(["runs", "list", "--json", "--state-dir"])
        .arg(&empty)
        .output_bounded();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

/// `coder runs list -n 0` is a usage error naming the value: it printed "no recorded
/// runs", which was not true.
#[test]
fn runs_list_of_zero_runs_is_a_usage_error() {
    let fake = Fake::new(json!(steps::answer("done")));
    fake.coder().arg("task").run().assert_success("done");
    let out = Command::new(CODER)
        .args(["runs", "list", "-n", "0", "--state-dir"])
        .arg(fake.state_dir())
        .output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'0'") && stderr.contains("--limit"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
}
