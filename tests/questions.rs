//! Questions (DESIGN §9) end to end: the built `coder`, the real `claude` CLI and the replay
//! cassette `ask_user.json`, under the default sandbox. The model's `mcp__coder__ask_user`
//! call ends the run `needs_input` (exit 5) with the questions and the session; a resume with
//! `--answers` sends them back (the cassette's expectations check what the CLI sent); the
//! tool is offered only when questions are on. Bad `--answers` input, and the ask server's
//! own protocol, run through the binary without the CLI.
//!
//! The CLI comes from `CODER_TEST_CLAUDE_BIN`, else the project-local install.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{CODER, Coder, Fake, ReplayScene, run_bounded};
use serde_json::{Value, json};

fn scene() -> ReplayScene {
    ReplayScene::new("ask_user.json", 0)
}

fn coder(scene: &ReplayScene) -> Coder {
    scene.coder_within(Duration::from_secs(120))
}

/// The replay server answered every request as scripted: each `expect` held (the ask turn's
/// includes that the very first request offered the tool).
fn assert_no_replay_problems(out: &common::Outcome) {
    let problems: Vec<&Value> = out.envelope["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w.as_str().is_some_and(|w| w.starts_with("replay:")))
        .collect();
    assert!(problems.is_empty(), "{problems:?}: {}", out.explain());
}

/// `coder runs show RUN` for the run whose envelope is `envelope`, in `state_dir`.
fn runs_show(state_dir: &Path, envelope: &Value) -> String {
    let transcript = envelope["transcript"].as_str().expect("a transcript path");
    let run_id = Path::new(transcript).file_stem().unwrap().to_str().unwrap();
    let out = run_bounded(
        Command::new(CODER)
            .args(["runs", "show", run_id])
            .env("CODER_STATE_DIR", state_dir),
        Duration::from_secs(30),
    )
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_question_ends_the_run_and_the_answers_resume_it() {
    let scene = scene();
    let asked = coder(&scene)
        .args(["--allow-questions", "paint the fence"])
        .run();
    let detail = asked.assert_failure("needs_input", 5);
    assert_no_replay_problems(&asked);
    assert_eq!(
        asked.envelope["questions"],
        json!([
            {"question": "Which colour should the fence be?", "options": ["red", "blue"],
             "why": "the task names no colour"},
            {"question": "Should the gate be painted too?"}
        ]),
        "{}",
        asked.explain()
    );
    let session = asked.session_id().expect("SESSION_ID").to_owned();
    // Two questions, two answers in the hint's list (it showed one `"…"`), and the plain
    // hint beside it defers to it (it said `--session-id SESSION_ID`, a placeholder).
    assert!(
        detail["resume_hint"]
            .as_str()
            .is_some_and(|h| h.contains(&session) && h.contains(r#"--answers '["…", "…"]'"#)),
        "{}",
        asked.explain()
    );
    assert!(
        detail["hint"]
            .as_str()
            .is_some_and(|h| h.contains("resume_hint") && !h.contains("SESSION_ID")),
        "{}",
        asked.explain()
    );
    // Stopped at the call, not by a watchdog, and the call changed nothing.
    assert!(
        asked.elapsed < Duration::from_secs(60),
        "{}",
        asked.explain()
    );
    assert_eq!(asked.envelope["attempts"][0]["side_effects"], "read_only");
    let shown = runs_show(&scene.fake.state_dir(), &asked.envelope);
    assert!(
        shown.contains("questions (2):")
            && shown.contains("1. Which colour should the fence be?")
            && shown.contains("options: red | blue"),
        "{shown}"
    );

    // One answer for two questions: refused before anything runs.
    let short = coder(&scene)
        .args(["--session-id", &session, "--answers", r#"["blue"]"#])
        .run();
    short.assert_failure("config_error", 78);
    assert!(
        short.envelope["error"]
            .as_str()
            .is_some_and(|e| e.contains("asked 2 question(s)")),
        "{}",
        short.explain()
    );

    // The answers, from a file: the resumed request carries the first run's call in its
    // history and each answer under its question (the cassette's `expect`).
    let answers = scene.fake.root().join("answers.json");
    std::fs::write(&answers, r#"["blue", "no, leave the gate"]"#).unwrap();
    let resumed = coder(&scene)
        .args(["--session-id", &session, "--answers"])
        .arg(answers.clone())
        .run();
    resumed.assert_success("Painted the fence blue and left the gate alone.");
    assert_eq!(resumed.session_id(), Some(session.as_str()));
    assert_no_replay_problems(&resumed);

    // Answered: a second --answers has nothing to answer.
    let again = coder(&scene)
        .args(["--session-id", &session, "--answers"])
        .arg(answers)
        .run();
    again.assert_failure("config_error", 78);
    assert!(
        again.envelope["error"]
            .as_str()
            .is_some_and(|e| e.contains("no open questions")),
        "{}",
        again.explain()
    );
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_tool_is_offered_only_when_questions_are_on() {
    let scene = scene();
    let contract = scene.fake.root().join("contract.md");
    std::fs::write(&contract, "# Contract\nPaint only what is asked.\n").unwrap();
    let contract = contract.to_str().unwrap().to_owned();
    let request = scene.fake.root().join("request.json");
    std::fs::write(
        &request,
        json!({"PROMPT": "plain task", "allow_questions": true}).to_string(),
    )
    .unwrap();
    let request = request.to_str().unwrap().to_owned();
    let cases: [(&[&str], &str); 4] = [
        (&["plain task"], "ask_user was not offered."),
        (
            &["--contract", &contract, "plain task"],
            "ask_user was offered.",
        ),
        (
            &["--contract", &contract, "--no-questions", "plain task"],
            "ask_user was not offered.",
        ),
        (&["--request", &request], "ask_user was offered."),
    ];
    for (args, expected) in cases {
        let out = coder(&scene).args(args.iter().copied()).run();
        assert_eq!(
            out.envelope["result"],
            json!(expected),
            "{args:?}: {}",
            out.explain()
        );
        out.assert_success(expected);
        assert_no_replay_problems(&out);
    }
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn an_invalid_call_gets_the_servers_error_and_the_run_goes_on() {
    let scene = scene();
    let out = coder(&scene).args(["--allow-questions", "ask badly"]).run();
    // The server's message reached the model as the tool result (the cassette's `when`).
    out.assert_success("The server refused the empty call; going on without asking.");
    assert_no_replay_problems(&out);
    assert!(out.envelope.get("questions").is_none(), "{}", out.explain());
}

#[test]
fn bad_answers_are_config_errors_before_anything_runs() {
    let fake = Fake::new(json!([]));
    let unknown = "11111111-2222-4333-8444-555555555555";
    let cases: [(&[&str], &str); 8] = [
        (&["--answers", r#"["blue"]"#, "go"], "--session-id"),
        (
            &["--session-id", unknown, "--answers", r#"["blue""#],
            "malformed --answers JSON",
        ),
        (&["--session-id", unknown, "--answers", "[]"], "empty list"),
        (
            &["--session-id", unknown, "--answers", "[1]"],
            "not a string",
        ),
        (
            &["--session-id", unknown, "--answers", r#"[" "]"#],
            "is empty",
        ),
        (
            &[
                "--session-id",
                unknown,
                "--answers",
                "/nonexistent/answers.json",
            ],
            "not a readable file (no such file); expected a list of answers",
        ),
        (
            &["--session-id", unknown, "--answers", "blue, no"],
            "--answers blue, no: not JSON, and not a readable file (no such file); expected \
             a list of answers in the questions' order, like [\"blue\", \"keep the old API\"]",
        ),
        (
            &["--session-id", unknown, "--answers", r#"["blue"]"#],
            "no open questions",
        ),
    ];
    for (args, says) in cases {
        let out = fake.coder().args(args.iter().copied()).run();
        out.assert_failure("config_error", 78);
        assert!(
            out.envelope["error"]
                .as_str()
                .is_some_and(|e| e.contains(says)),
            "{args:?} should say {says:?}: {}",
            out.explain()
        );
    }
    let both = fake
        .coder()
        .args(["--allow-questions", "--no-questions", "go"])
        .run();
    both.assert_failure("config_error", 2);
    let request = fake.root().join("request.json");
    std::fs::write(
        &request,
        json!({"PROMPT": "", "SESSION_ID": unknown, "answers": {"answers": "blue"}}).to_string(),
    )
    .unwrap();
    let out = fake.coder().arg("--request").arg(request).run();
    out.assert_failure("config_error", 78);
    assert!(!fake.has_record(), "no bad input may start the child");
}

/// A JSON-RPC exchange with `coder ask-server`.
struct Server {
    child: std::process::Child,
    stdout: BufReader<std::process::ChildStdout>,
    _deadline: common::Deadline,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(CODER)
            .arg("ask-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let deadline = common::Deadline::kill_after(&child, Duration::from_secs(20));
        Server {
            child,
            stdout,
            _deadline: deadline,
        }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn reply(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }
}

#[test]
fn the_ask_server_lists_its_tool_refuses_bad_calls_and_holds_a_good_one() {
    let mut server = Server::start();
    server.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}));
    let init = server.reply();
    assert_eq!(init["id"], 1);
    // It gave up its rights before reading (a Landlock domain of its own, which sets
    // no_new_privs; this test process has not).
    let no_new_privs = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("NoNewPrivs:").map(|v| v.trim().to_owned()))
    };
    assert_eq!(no_new_privs(std::process::id()).as_deref(), Some("0"));
    assert_eq!(no_new_privs(server.child.id()).as_deref(), Some("1"));
    assert_eq!(init["result"]["serverInfo"]["name"], "coder");
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let list = server.reply();
    assert_eq!(list["id"], 2, "the notification got no reply: {list}");
    assert_eq!(list["result"]["tools"][0]["name"], "ask_user");
    assert_eq!(
        list["result"]["tools"][0]["inputSchema"]["required"],
        json!(["questions"])
    );
    server.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "ask_user", "arguments": {"questions": [{"question": 7}]}}}));
    let bad = server.reply();
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert!(
        bad["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("question 1")
    );
    // A valid call is held; the next request is still served, and its reply comes first.
    server.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "ask_user", "arguments": {"questions": [{"question": "Why?"}]}}}));
    server.send(json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}));
    assert_eq!(server.reply()["id"], 5);
    // coder's stop sends SIGTERM to the CLI and this server at once: the server must not
    // end first (the CLI would answer the held call "Connection closed" and ask the model
    // again), so it still serves after SIGTERM, until its input ends.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    server.send(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    assert_eq!(server.reply()["id"], 7, "the server ended on SIGTERM");
    server.send(json!({"jsonrpc": "2.0", "id": 6, "method": "resources/list"}));
    assert_eq!(server.reply()["error"]["code"], -32601);
    // End of input ends the server at once.
    drop(server.child.stdin.take());
    let status = common::wait_within(&mut server.child, Duration::from_secs(5));
    assert!(status.success(), "{status:?}");
}

/// Whether a SIGTERM sent to process `pid` waits to be taken (`ShdPnd`, its shared
/// pending set in `/proc/PID/status`; the server blocks it and reads a signalfd).
fn sigterm_pending(pid: &str) -> bool {
    const SIGTERM_BIT: u64 = 1 << (15 - 1);
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("ShdPnd:"))
                .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & SIGTERM_BIT != 0)
}

/// When the CLI exits normally it ends its MCP servers with SIGTERM and waits for them,
/// killing one only after 400 ms: every `--allow-questions` run took that much longer
/// while the server held through every SIGTERM. A SIGTERM from its parent (the CLI) with
/// no call held ends it at once; one from anyone else (coder's tree stop) does not.
#[test]
fn the_ask_server_ends_on_its_clis_sigterm_when_nothing_is_held() {
    let mut server = Server::start();
    server.send(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    assert_eq!(server.reply()["id"], 1);
    let pid = server.child.id().to_string();
    // From another process: the tree stop's SIGTERM, which the server outlives.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    // Until the server has taken that signal (its signalfd read): a second SIGTERM while
    // the first is still pending merges with it, and only the first sender is seen.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while sigterm_pending(&pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never took the first SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    assert_eq!(
        server.reply()["id"],
        2,
        "the server ended on another's SIGTERM"
    );
    // From its parent, with stdin still open: it ends now, not at a later SIGKILL.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = common::wait_within(&mut server.child, Duration::from_secs(5));
    assert!(status.success(), "{status:?}");
}

/// A run that ends `needs_input` had its CLI stopped by coder, on purpose: the CLI exits
/// 143 on coder's SIGTERM, and `error_detail.exit_code` said 143, as if the CLI had failed.
/// The envelope now says what happened: no exit code of the CLI's own (`null`), and the
/// signal coder stopped it with.
#[test]
fn a_needs_input_run_reports_the_signal_coder_stopped_the_cli_with() {
    let fake = Fake::new(json!([
        {"step": "on_signal", "signal": "TERM", "exit": 143},
        {"step": "init"},
        {"step": "tool_use", "name": "mcp__coder__ask_user", "id": "q1",
         "input": {"questions": [{"question": "Which colour?"}]}},
        {"step": "linger", "seconds": 60},
    ]));
    let out = fake
        .coder()
        .args(["--allow-questions", "paint the fence"])
        .run();
    let detail = out.assert_failure("needs_input", 5);
    assert_eq!(
        out.envelope["questions"],
        json!([{"question": "Which colour?"}]),
        "{}",
        out.explain()
    );
    assert!(detail["exit_code"].is_null(), "{}", out.explain());
    assert_eq!(detail["signal"], "SIGTERM", "{}", out.explain());
}

/// A `--worktree` run that asks questions cannot be resumed with the answers: its session
/// lived in the checkout, which is removed. The resume hint said `--cd <the removed
/// checkout> --session-id … --answers`, which failed ("no such directory"); it names the
/// branch to start the next run from instead.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_worktree_run_that_asks_says_how_to_go_on_from_its_branch() {
    let scene = scene();
    common::git_init_with_a_commit(scene.workspace());
    let asked = coder(&scene)
        .args(["--worktree", "--allow-questions", "paint the fence"])
        .run();
    let detail = asked.assert_failure("needs_input", 5);
    let branch = asked.envelope["worktree"]["branch"]
        .as_str()
        .unwrap_or_default();
    let hint = detail["resume_hint"].as_str().unwrap_or_default();
    assert!(
        !branch.is_empty()
            && hint.contains("cannot be resumed")
            && hint.contains(&format!("--worktree-base {branch}"))
            && !hint.contains("/worktrees/"),
        "{}",
        asked.explain()
    );
}

/// A `--worktree` run started from a `--request` file that asks: its resume hint named
/// `--worktree-base`, a flag the caller never wrote, and the plain hint said to resume the
/// session, which a worktree run cannot. It gives the `--request` JSON to start the next
/// run from the branch now, and followed as written (the task filled in), that run starts
/// there.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_request_files_worktree_run_that_asks_names_the_request_fields() {
    let scene = scene();
    common::git_init_with_a_commit(scene.workspace());
    let request = scene.fake.root().join("job.json");
    let job = json!({"PROMPT": "paint the fence", "cd": scene.workspace(), "worktree": true,
                     "allow_questions": true});
    std::fs::write(&request, job.to_string()).unwrap();
    let asked = coder(&scene).no_cd().arg("--request").arg(&request).run();
    let detail = asked.assert_failure("needs_input", 5);
    let branch = asked.envelope["worktree"]["branch"]
        .as_str()
        .unwrap_or_default();
    let hint = detail["resume_hint"].as_str().unwrap_or_default();
    assert!(
        !branch.is_empty()
            && hint.contains(&format!(r#""worktree_base": "{branch}""#))
            && !hint.contains("--worktree"),
        "{}",
        asked.explain()
    );
    assert!(
        !detail["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("--session-id"),
        "{}",
        asked.explain()
    );
    // Followed: the JSON from the hint, with the task, in a new request file.
    let mut next: Value = serde_json::from_str(&hint[hint.find('{').unwrap()..]).unwrap();
    next["PROMPT"] = json!("plain task");
    std::fs::write(&request, next.to_string()).unwrap();
    let went_on = coder(&scene).no_cd().arg("--request").arg(&request).run();
    went_on.assert_success("ask_user was not offered.");
    assert_eq!(
        went_on.envelope["worktree"]["base_ref"],
        branch,
        "{}",
        went_on.explain()
    );
}
