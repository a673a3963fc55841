//! The real `claude` CLI against the replay server, offline: the shipped cassettes must drive
//! the CLI the way a provider would, tools included, and its failures must surface in the
//! CLI's own result line as they do with a real provider.
//!
//! The CLI is found through `CODER_TEST_CLAUDE_BIN`, else the project-local install made by
//! `scripts/setup-claude`. The tests that need it are
//! `#[ignore]`d ("needs the claude CLI"): `scripts/test` runs them where the CLI is installed
//! (always under `CI=true`); run without it, they fail.

mod common;

use common::real_claude;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use coder::replay::{Cassette, ReplayReport, ReplayServer, RequestOutcome, ServeOptions};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::Semaphore;

/// Each CLI process takes about 200 MB and a core for a moment; two at a time is plenty.
static CLI_SLOTS: Semaphore = Semaphore::const_new(2);

/// No scenario here takes more than a few seconds; this only bounds a broken one.
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn cassette(name: &str) -> Cassette {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/cassettes")
        .join(name);
    Cassette::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// A private HOME, config dir, temp dir and workspace for CLI runs.
struct Scene {
    _root: tempfile::TempDir,
    home: PathBuf,
    tmp: PathBuf,
    workspace: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let tmp = root.path().join("tmp");
        let workspace = root.path().join("workspace");
        for dir in [&home, &tmp, &workspace] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Scene {
            workspace: std::fs::canonicalize(&workspace).unwrap(),
            _root: root,
            home,
            tmp,
        }
    }

    async fn serve(&self, name: &str) -> ReplayServer {
        ReplayServer::start(
            cassette(name),
            ServeOptions {
                port: 0,
                workspace: Some(self.workspace.clone()),
            },
        )
        .await
        .unwrap()
    }

    /// Serves cassette `name`, runs the CLI against it (as [`Scene::claude`]) and shuts the
    /// server down: the run and what the server saw.
    async fn play(
        &self,
        bin: &Path,
        name: &str,
        prompt: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (Run, ReplayReport) {
        let server = self.serve(name).await;
        let run = self.claude(bin, &server, prompt, args, env).await;
        (run, server.shutdown().await)
    }

    /// Runs `claude -p --output-format stream-json --verbose ARGS` in the workspace with the
    /// prompt on stdin.
    async fn claude(
        &self,
        bin: &Path,
        server: &ReplayServer,
        prompt: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Run {
        let _slot = CLI_SLOTS.acquire().await.unwrap();
        let mut command = Command::new(bin);
        command
            .args(["-p", "--output-format", "stream-json", "--verbose"])
            .args(args)
            .current_dir(&self.workspace)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .env("HOME", &self.home)
            .env("CLAUDE_CONFIG_DIR", self.home.join(".claude"))
            .env("TMPDIR", &self.tmp)
            .env("CLAUDE_CODE_TMPDIR", &self.tmp)
            .env("ANTHROPIC_BASE_URL", server.base_url())
            .env("ANTHROPIC_AUTH_TOKEN", "dummy")
            .env("ANTHROPIC_MODEL", "glm-4.7")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("API_TIMEOUT_MS", "30000")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(prompt.as_bytes()).await.unwrap();
        drop(stdin);
        let output = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
            .await
            .expect("the claude CLI did not finish in time")
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let lines = stdout
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        Run {
            code: output.status.code(),
            lines,
            stdout,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

struct Run {
    code: Option<i32>,
    lines: Vec<Value>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn result(&self) -> &Value {
        self.lines
            .iter()
            .rev()
            .find(|line| line["type"] == "result")
            .unwrap_or_else(|| {
                panic!(
                    "no result line\nstdout:\n{}\nstderr:\n{}",
                    self.stdout, self.stderr
                )
            })
    }

    fn session_id(&self) -> String {
        self.result()["session_id"].as_str().unwrap().to_string()
    }

    /// Names of the tools whose results came back without error.
    fn tools_that_ran(&self) -> Vec<String> {
        let mut names = Vec::new();
        for line in &self.lines {
            if line["type"] != "assistant" {
                continue;
            }
            for block in line["message"]["content"].as_array().into_iter().flatten() {
                if block["type"] != "tool_use" {
                    continue;
                }
                let succeeded = self.lines.iter().any(|user| {
                    user["type"] == "user"
                        && user["message"]["content"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|r| {
                                r["tool_use_id"] == block["id"]
                                    && r["is_error"] != Value::Bool(true)
                            })
                });
                if succeeded {
                    names.push(block["name"].as_str().unwrap().to_string());
                }
            }
        }
        names
    }

    fn describe(&self) -> String {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn assert_clean(report: &ReplayReport) {
    assert!(report.problems().is_empty(), "{:#?}", report);
}

#[tokio::test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
async fn plain_cassette_answers_the_cli() {
    let bin = real_claude();
    let scene = Scene::new();
    let (run, report) = scene.play(&bin, "plain.json", "say hi", &[], &[]).await;

    assert_eq!(run.code, Some(0), "{}", run.describe());
    let result = run.result();
    assert_eq!(result["is_error"], false, "{}", run.describe());
    assert_eq!(result["result"], "Hello from the replay cassette.");
    assert_clean(&report);
    assert_eq!(report.turn_requests().count(), 1);
    assert_eq!(report.requests[0].target, "/v1/messages?beta=true");
    assert_eq!(report.requests[0].stream, Some(true));
}

#[tokio::test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
async fn demo_cassette_writes_edits_and_runs_in_the_workspace() {
    let bin = real_claude();
    let scene = Scene::new();
    let (run, report) = scene
        .play(
            &bin,
            "demo.json",
            "make a greeting script",
            &["--permission-mode", "acceptEdits"],
            &[],
        )
        .await;

    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.result()["is_error"], false, "{}", run.describe());
    assert!(
        run.result()["result"]
            .as_str()
            .unwrap()
            .starts_with("Done:")
    );
    assert_eq!(run.tools_that_ran(), ["Write", "Edit", "Bash"]);
    let script = std::fs::read_to_string(scene.workspace.join("greet.sh")).unwrap();
    assert_eq!(script, "#!/bin/sh\necho \"Hello, replay\"\n");
    let greeting = std::fs::read_to_string(scene.workspace.join("greeting.txt")).unwrap();
    assert_eq!(greeting.trim(), "Hello, replay");
    assert_clean(&report);
    assert_eq!(report.turn_requests().count(), 4);
    assert_eq!(report.turns_left, 0);
}

#[tokio::test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
async fn tools_cassette_runs_with_allowed_tools() {
    let bin = real_claude();
    let scene = Scene::new();
    let (run, report) = scene
        .play(
            &bin,
            "tools.json",
            "finalise the notes",
            &["--allowedTools", "Write Edit Bash"],
            &[],
        )
        .await;

    assert_eq!(run.result()["is_error"], false, "{}", run.describe());
    assert_eq!(run.tools_that_ran(), ["Write", "Edit", "Bash"]);
    let notes = std::fs::read_to_string(scene.workspace.join("notes.txt")).unwrap();
    assert_eq!(notes, "status: final\nowner: replay\n");
    let summary = std::fs::read_to_string(scene.workspace.join("summary.txt")).unwrap();
    assert_eq!(summary, "status: final\n");
    assert_clean(&report);
}

#[tokio::test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
async fn http_500_ends_the_run_with_api_error_status_500() {
    let bin = real_claude();
    let scene = Scene::new();
    let (run, report) = scene
        .play(
            &bin,
            "http_500.json",
            "say hi",
            &[],
            &[("CLAUDE_CODE_MAX_RETRIES", "1")],
        )
        .await;

    assert_eq!(run.code, Some(1), "{}", run.describe());
    let result = run.result();
    assert_eq!(result["is_error"], true);
    assert_eq!(result["api_error_status"], 500, "{}", run.describe());
    let retries = run
        .lines
        .iter()
        .filter(|l| l["type"] == "system" && l["subtype"] == "api_retry")
        .count();
    assert_eq!(retries, 1, "one retry announced");
    assert_eq!(
        report.turn_requests().count(),
        2,
        "the first request and one retry"
    );
    assert!(
        report
            .requests
            .iter()
            .all(|r| r.outcome == RequestOutcome::ErrorFault && r.status == 500)
    );
    assert_clean(&report);
}

#[tokio::test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
async fn rate_limit_and_auth_failures_reach_the_result_line() {
    let bin = real_claude();
    for (cassette, status) in [("http_429.json", 429), ("http_401.json", 401)] {
        let scene = Scene::new();
        let (run, report) = scene.play(&bin, cassette, "say hi", &[], &[]).await;
        assert_eq!(run.code, Some(1), "{cassette}: {}", run.describe());
        assert_eq!(run.result()["is_error"], true, "{cassette}");
        assert_eq!(
            run.result()["api_error_status"],
            status,
            "{cassette}: {}",
            run.describe()
        );
        assert_eq!(
            report.turn_requests().count(),
            1,
            "{cassette}: no retries asked for"
        );
    }
}

#[tokio::test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
async fn a_resumed_session_sends_the_first_runs_history() {
    let bin = real_claude();
    let scene = Scene::new();

    let (first, report) = scene
        .play(&bin, "resume.json", "here is the first task", &[], &[])
        .await;
    assert_eq!(
        first.result()["result"],
        "Noted. The code word is PAPAYA-7.",
        "{}",
        first.describe()
    );
    assert_eq!(report.requests[0].turn, Some(1));
    let session = first.session_id();

    // A fresh server, as a later coder run would start: only a real resume meets the
    // second turn's expectation.
    let (resumed, report) = scene
        .play(
            &bin,
            "resume.json",
            "now the second task",
            &["--resume", &session],
            &[],
        )
        .await;
    assert_eq!(resumed.code, Some(0), "{}", resumed.describe());
    assert_eq!(
        resumed.result()["result"],
        "Earlier I told you the code word: PAPAYA-7."
    );
    assert_eq!(resumed.session_id(), session);
    assert_clean(&report);
    assert_eq!(report.requests[0].turn, Some(2));

    // Without the resume the history is missing, and both the CLI and the report say so.
    let (fresh, report) = scene
        .play(&bin, "resume.json", "now the second task", &[], &[])
        .await;
    assert_eq!(fresh.result()["is_error"], true, "{}", fresh.describe());
    let text = fresh.result()["result"].as_str().unwrap();
    assert!(
        text.contains("turn 2 (\"resumed run\") expectation not met"),
        "{text}"
    );
    assert!(!report.unmet_expectations.is_empty());
    assert_eq!(report.unmet_expectations[0].turn, 2);
}

#[tokio::test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
async fn max_turns_stops_the_cli_after_the_tool_turn() {
    let bin = real_claude();
    let scene = Scene::new();
    let (run, report) = scene
        .play(
            &bin,
            "max_turns.json",
            "look around",
            &["--max-turns", "1", "--allowedTools", "Bash"],
            &[],
        )
        .await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert_eq!(
        run.result()["subtype"],
        "error_max_turns",
        "{}",
        run.describe()
    );
    assert_eq!(run.tools_that_ran(), ["Bash"]);
    assert_eq!(report.turn_requests().count(), 1);
    assert_eq!(report.turns_left, 1);
}

#[tokio::test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
async fn a_dropped_stream_is_recovered_by_the_plain_fallback() {
    let bin = real_claude();
    let scene = Scene::new();
    let (run, report) = scene
        .play(
            &bin,
            "drop_recovered.json",
            "say hi",
            &[],
            &[("CLAUDE_CODE_MAX_RETRIES", "1")],
        )
        .await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(
        run.result()["result"],
        "Recovered through the non-streaming fallback."
    );
    let dropped = report
        .requests
        .iter()
        .filter(|r| r.outcome == RequestOutcome::Dropped)
        .count();
    assert!(dropped >= 1, "{report:#?}");
    assert_eq!(report.requests.last().unwrap().stream, Some(false));
    assert_clean(&report);
}
