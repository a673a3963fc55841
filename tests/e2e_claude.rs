//! End to end: the built `coder`, the real `claude` CLI (pinned version) and coder's replay
//! backend on 127.0.0.1. Each test asserts what a caller sees (envelope, exit code), what the
//! agent did to the workspace, and that no process of the run is left.
//!
//! The CLI comes from `CODER_TEST_CLAUDE_BIN`, else the project-local install made by
//! `scripts/setup-claude`. Every test here is
//! `#[ignore]`d ("needs the claude CLI"): `scripts/test` runs them where the CLI is installed
//! (always under `CI=true`), and one run without the CLI fails.

mod common;

use common::Bounded;

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Coder, ReplayScene};
use nix::sys::signal::Signal;

/// A workspace, coder's state and a config file with one replay backend `e2e` for
/// `cassette`, with the CLI's own API retries limited to `cli_retries`.
/// The shared replay scene, with this file's helpers.
struct Scene(ReplayScene);

impl std::ops::Deref for Scene {
    type Target = ReplayScene;

    fn deref(&self) -> &ReplayScene {
        &self.0
    }
}

impl Scene {
    fn new(cassette: &str, cli_retries: u32) -> Scene {
        Scene(ReplayScene::new(cassette, cli_retries))
    }

    fn coder(&self) -> Coder {
        self.coder_within(Duration::from_secs(120))
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.workspace().join(name))
            .unwrap_or_else(|e| panic!("{name} in the workspace: {e}"))
    }
}

/// No process may still run inside the workspace (the CLI and its tools run there).
fn assert_no_process_in(workspace: &Path) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .filter(|e| {
                std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(workspace))
            })
            .map(|e| {
                let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                format!(
                    "{}: {}",
                    e.file_name().to_string_lossy(),
                    String::from_utf8_lossy(&cmdline).replace('\0', " ")
                )
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left behind: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn plain_answer() {
    let scene = Scene::new("plain.json", 0);
    let out = scene.coder().args(["--return-metrics", "say hi"]).run();
    out.assert_success("Hello from the replay cassette.");
    assert_eq!(out.envelope["SESSION_ID"].as_str().map(str::len), Some(36));
    // The cassette's usage, as the CLI summed it, reaches the metrics.
    let metrics = &out.envelope["metrics"];
    assert_eq!(metrics["usage"]["input"], 12, "{metrics}");
    assert_eq!(metrics["usage"]["output"], 7, "{metrics}");
    assert_eq!(metrics["turns"], 1);
    assert_eq!(metrics["attempts"], 1);
    assert!(metrics["time_to_first_event_ms"].as_u64().is_some());
    assert!(metrics["time_to_first_token_ms"].as_u64().is_some());
    assert!(metrics["model"].is_string());
    assert_no_process_in(scene.workspace());
}

/// coder gives the CLI a fresh config dir every run, seeded with what the CLI (2.1.330)
/// writes there on its first start. The real CLI then finds nothing to do at startup: it
/// leaves `.claude.json` exactly as coder wrote it (an incomplete seed costs a rewrite of
/// the file behind a lock, a `backups/` copy and an `fsync` on every run). A newer CLI
/// that writes more on a first start fails this test: the seed (`src/pipeline/cli_home.rs`)
/// needs its new keys.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_cli_finds_its_config_dir_warm_and_leaves_it_as_seeded() {
    let scene = Scene::new("plain.json", 0);
    // A wrapper around the real CLI keeps what its config dir held before and after.
    let kept = scene.fake.root().join("kept");
    std::fs::create_dir(&kept).unwrap();
    let wrapper = scene.fake.root().join("claude-wrapper");
    let cfg = "\"$CLAUDE_CONFIG_DIR\"";
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncp {cfg}/.claude.json '{k}/before'\n'{cli}' \"$@\"\nrc=$?\n\
             cp {cfg}/.claude.json '{k}/after'\nls -A {cfg} > '{k}/names'\nexit $rc\n",
            k = kept.display(),
            cli = scene.claude.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = scene
        .coder()
        .claude_bin(&wrapper)
        .args(["--sandbox", "danger-full-access", "say hi"])
        .run();
    out.assert_success("Hello from the replay cassette.");
    let read = |name: &str| std::fs::read_to_string(kept.join(name)).unwrap();
    let seeded: serde_json::Value = serde_json::from_str(&read("before")).unwrap();
    assert_eq!(seeded["hasCompletedOnboarding"], true, "{seeded}");
    assert_eq!(
        read("after"),
        read("before"),
        "the CLI rewrote .claude.json"
    );
    let names = read("names");
    assert!(!names.lines().any(|n| n == "backups"), "{names}");
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn write_edit_and_bash_change_the_workspace() {
    let scene = Scene::new("demo.json", 0);
    let out = scene
        .coder()
        .args(["--return-metrics", "write greet.sh and save its greeting"])
        .run();
    out.assert_success(
        "Done: greet.sh now says \"Hello, replay\", and greeting.txt holds the greeting.",
    );
    assert_eq!(
        scene.read("greet.sh"),
        "#!/bin/sh\necho \"Hello, replay\"\n"
    );
    assert_eq!(scene.read("greeting.txt").trim(), "Hello, replay");
    let tools = &out.envelope["metrics"]["tool_calls"];
    assert_eq!(
        (
            tools["Write"].as_u64(),
            tools["Edit"].as_u64(),
            tools["Bash"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(out.envelope["metrics"]["cli_version"], "2.1.330");
    assert_no_process_in(scene.workspace());

    // `coder runs show` gives a readable account of this real tool-use run.
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["runs", "show", "last", "--json", "--state-dir"])
        .arg(scene.fake.state_dir())
        .output_bounded();
    assert!(shown.status.success(), "{shown:?}");
    let account: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let tools: Vec<&str> = account["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["Write", "Edit", "Bash"], "{account:#}");
    assert!(
        account["tool_calls"][2]["result"]
            .as_str()
            .is_some_and(|r| r.contains("Hello, replay")),
        "{account:#}"
    );
    assert_eq!(account["outcome"]["success"], true);
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn resume_continues_the_same_session_with_its_history() {
    let scene = Scene::new("resume.json", 0);
    // The CLI's homes in a scratch directory of this test's own (`CODER_SCRATCH_DIR`): the
    // default, `/dev/shm/coder-<uid>`, is shared with every other run on the machine.
    let scratch = scene.fake.root().join("scratch");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&scratch)
        .unwrap();
    let first = scene
        .coder()
        .env("CODER_SCRATCH_DIR", &scratch)
        .arg("first task: remember the word")
        .run();
    assert_eq!(first.envelope["success"], true, "{}", first.explain());
    let session = first.session_id().unwrap().to_owned();
    // The cassette's second turn expects the first answer in the request's history; a
    // request without it gets a 400 naming the unmet expectation.
    let second = scene
        .coder()
        .env("CODER_SCRATCH_DIR", &scratch)
        .args(["--session-id", &session, "second task: what was the word?"])
        .run();
    assert_eq!(second.envelope["success"], true, "{}", second.explain());
    assert_eq!(second.session_id(), Some(session.as_str()));
    // Each run had a fresh CLI config dir, removed after it; the history the resume needed
    // came from coder's own store, owner-only.
    let state = scene.fake.state_dir();
    let history = state.join("sessions").join(format!("{session}.jsonl"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&history).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", history.display());
    let left: Vec<_> = std::fs::read_dir(scratch.join("cli-runs"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "per-run config dirs left: {left:?}");
    assert_no_process_in(scene.workspace());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn an_unknown_session_is_protocol_missing_session() {
    let scene = Scene::new("plain.json", 0);
    let unknown = "99999999-2222-4333-8444-555555555555";
    let out = scene.coder().args(["--session-id", unknown, "hi"]).run();
    let detail = out.assert_failure("protocol_missing_session", 1);
    assert!(
        detail["message"]
            .as_str()
            .unwrap()
            .contains("No conversation found"),
        "{}",
        out.explain()
    );
    assert_eq!(out.session_id(), Some(unknown));
    assert_no_process_in(scene.workspace());
}

fn upstream(cassette_name: &str, status: u64) {
    let scene = Scene::new(cassette_name, 1);
    let out = scene.coder().arg("hi").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(
        detail["http_status"].as_u64(),
        Some(status),
        "{}",
        out.explain()
    );
    assert_no_process_in(scene.workspace());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn http_500_is_an_upstream_error_with_its_status() {
    upstream("http_500.json", 500);
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn http_429_is_an_upstream_error_with_its_status() {
    upstream("http_429.json", 429);
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn http_401_is_an_upstream_error_with_its_status() {
    upstream("http_401.json", 401);
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_stalled_stream_is_an_idle_timeout() {
    let scene = Scene::new("stall.json", 0);
    let out = scene.coder().args(["--timeout", "3", "hi"]).run();
    let detail = out.assert_failure("idle_timeout", 124);
    assert_eq!(detail["idle_timeout_s"], 3.0);
    assert_no_process_in(scene.workspace());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_slow_server_past_max_duration_is_a_timeout() {
    let scene = Scene::new("slow.json", 0);
    let out = scene
        .coder()
        .args(["--max-duration", "4", "--timeout", "60", "hi"])
        .run();
    let detail = out.assert_failure("timeout", 124);
    assert_eq!(detail["max_duration_s"], 4.0);
    assert_no_process_in(scene.workspace());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_turn_limit_is_max_turns() {
    let scene = Scene::new("max_turns.json", 0);
    let out = scene.coder().args(["--max-turns", "1", "run it"]).run();
    out.assert_failure("max_turns", 1);
    assert!(out.session_id().is_some());
    assert_no_process_in(scene.workspace());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn sigterm_to_coder_mid_run_is_cancelled() {
    let scene = Scene::new("slow.json", 0);
    let running = scene.coder().args(["--timeout", "60", "hi"]).spawn();
    // Wait until the CLI is really running: its init event reaches the transcript.
    let runs = scene.fake.state_dir().join("runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_dir(&runs).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(r#""subtype":"init""#))
        })
    }) {
        assert!(Instant::now() < deadline, "the CLI never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    running.signal(Signal::SIGTERM);
    let out = running.wait();
    let detail = out.assert_failure("cancelled", 143);
    assert!(detail["message"].as_str().unwrap().contains("SIGTERM"));
    assert!(out.session_id().is_some());
    assert_no_process_in(scene.workspace());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_retryable_upstream_failure_is_retried_to_success() {
    let scene = Scene::new("flaky_500.json", 0);
    let out = scene.coder().args(["--max-retries", "1", "hi"]).run();
    out.assert_success("Answered on the second attempt.");
    let attempts = out.envelope["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{}", out.explain());
    assert_eq!(attempts[0]["outcome"], "upstream_error");
    assert_eq!(attempts[0]["side_effects"], "none");
    assert_no_process_in(scene.workspace());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_run_that_leaves_the_cassettes_script_says_so() {
    let scene = Scene::new("resume.json", 0);
    // The second turn expects a resumed history; a new session cannot meet it.
    let out = scene.coder().arg("second task without history").run();
    out.assert_failure("upstream_error", 1);
    let warnings = out.envelope["warnings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.starts_with("replay:") && w.contains("expect"))),
        "{}",
        out.explain()
    );
}

/// The real CLI in a `--worktree` run (DESIGN §10): its tools work in the private checkout
/// (git reads the repository's objects through the read-only alternate), the work lands
/// on the branch, and the user's checkout is untouched.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_real_cli_works_in_a_worktree_and_the_work_lands_on_its_branch() {
    let scene = Scene::new("demo.json", 0);
    let ws = scene.workspace();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output_bounded();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    std::fs::write(ws.join("README.md"), "# demo\n").unwrap();
    git(&["init", "-q"]);
    git(&["add", "README.md"]);
    git(&["commit", "-q", "-m", "init"]);
    let out = scene
        .coder()
        .args(["--worktree", "write greet.sh and save its greeting"])
        .run();
    out.assert_success(
        "Done: greet.sh now says \"Hello, replay\", and greeting.txt holds the greeting.",
    );
    let branch = out.envelope["worktree"]["branch"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        git(&["show", &format!("{branch}:greet.sh")]),
        "#!/bin/sh\necho \"Hello, replay\"\n"
    );
    assert_eq!(
        git(&["log", "-1", "--format=%s", &branch]).trim(),
        "write greet.sh and save its greeting"
    );
    assert!(!ws.join("greet.sh").exists());
    let left = std::fs::read_dir(scene.fake.state_dir().join("worktrees"))
        .unwrap()
        .count();
    assert_eq!(left, 0, "the checkout was removed");
}

/// `--backend auto` with the real CLI: two replay backends, one chosen, the run succeeds on
/// it and the envelope and ledger say which.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_real_cli_runs_on_the_backend_routing_chose() {
    let scene = Scene::new("plain.json", 0);
    let cassette = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cassettes/plain.json");
    let mut config = std::fs::read_to_string(&scene.config).unwrap();
    config.push_str(&format!(
        "[backends.e2e2]\nkind = \"replay\"\ncassette = {:?}\n",
        cassette.display().to_string()
    ));
    std::fs::write(&scene.config, config).unwrap();
    let out = scene
        .fake
        .coder()
        .claude_bin(scene.claude.clone())
        .arg("--config")
        .arg(scene.config.clone())
        .args(["--backend", "auto:e2e,e2e2", "say hello"])
        .deadline(Duration::from_secs(120))
        .run();
    assert_eq!(out.envelope["success"], true, "{}", out.explain());
    let chosen = out.envelope["routing"]["chosen"].as_str().unwrap();
    assert!(["e2e", "e2e2"].contains(&chosen));
    // The choice and its outcome are in the run's store (the default SQLite file).
    let db = rusqlite::Connection::open(scene.fake.state_dir().join("coder.db")).unwrap();
    let (recorded, outcome): (String, Option<String>) = db
        .query_row("SELECT chosen, outcome FROM routing_choices", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!(recorded, chosen);
    assert_eq!(outcome.as_deref(), Some("success"));
}
