//! `coder mcp` driven by a real MCP client: the official Python SDK (`pip install mcp`)
//! over stdio, with the scenarios in `tests/mcp/client.py`: tool listing and schemas, the
//! jailed file tools and their error codes, bad input that must not kill the server, a
//! `coder` run against the replay backend with the real claude CLI (and a question answered
//! through it), a run that outlives `wait_s` (progress, `coder_wait`, `coder_status`,
//! `coder_cancel`), a request the client cancels, and a client that disconnects: no process
//! may be left in the workspace.
//!
//! They need the `mcp` package and the claude CLI, so they are `#[ignore]`d (a plain
//! `cargo test` counts them as ignored); `scripts/test` installs both and runs them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Bounded;

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
const CASSETTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/cassettes");

/// Fails the test unless `python3` has the `mcp` package. The tests are `#[ignore]`d, so a
/// plain `cargo test` lists them as ignored; `scripts/test` installs the package and runs
/// them (and under CI=true refuses to go on without it).
fn require_python_mcp() {
    let ok = Command::new("python3")
        .args(["-c", "import mcp.client.stdio"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status_bounded()
        .success();
    assert!(
        ok,
        "python3 cannot import the MCP SDK: pip install mcp==2.3.0 (scripts/test does)"
    );
}

/// A private root: the base (with a secret in it), state and config dirs.
struct Scene {
    root: tempfile::TempDir,
    base: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("base");
        for dir in ["base/src", "state", "xdg", "home"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::fs::write(base.join(".env"), "TOKEN=hunter2\n").unwrap();
        std::fs::write(root.path().join("outside"), "outside\n").unwrap();
        let base = std::fs::canonicalize(base).unwrap();
        Scene { root, base }
    }

    /// Runs one scenario of the client under `deadline`; panics with its output on failure.
    fn client(&self, scenario: &str, claude: Option<&Path>, deadline: Duration) -> String {
        self.client_through(&[], scenario, claude, deadline)
    }

    /// [`Scene::client`] started through `through` (`sh -c '…; exec "$@"' sh`).
    fn client_through(
        &self,
        through: &[&str],
        scenario: &str,
        claude: Option<&Path>,
        deadline: Duration,
    ) -> String {
        let root = self.root.path();
        let mut cmd = match through.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg("python3");
                cmd
            }
            None => Command::new("python3"),
        };
        cmd.arg(CLIENT)
            .arg(scenario)
            .current_dir(root)
            .env("MCP_TEST_CODER", env!("CARGO_BIN_EXE_coder"))
            .env("MCP_TEST_BASE", &self.base)
            .env("MCP_TEST_CASSETTES", CASSETTES)
            .env("CODER_STATE_DIR", root.join("state"))
            .env("XDG_CONFIG_HOME", root.join("xdg"))
            .env("CODER_MCP_PROGRESS_MS", "1000")
            .env_remove("CODER_CONFIG")
            .env_remove("CODER_BACKEND")
            .env_remove("CLAUDECODE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(claude) = claude {
            cmd.env("CODER_CLAUDE_BIN", claude);
        }
        let mut child = cmd.spawn().unwrap();
        let start = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if start.elapsed() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "the MCP client ({scenario}) overran {deadline:?}:\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && stdout.contains(&format!("OK {scenario}")),
            "the MCP client ({scenario}) failed: {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

#[test]
#[ignore = "needs the MCP Python SDK and the claude CLI: scripts/test runs it"]
fn tools_schemas_fs_tools_and_bad_input() {
    require_python_mcp();
    let scene = Scene::new();
    scene.client("basic", None, Duration::from_secs(60));
    // What the client deleted is gone; the secret is untouched.
    assert!(!scene.base.join("src/m.txt").exists());
    assert_eq!(
        std::fs::read_to_string(scene.base.join(".env")).unwrap(),
        "TOKEN=hunter2\n"
    );
}

#[test]
#[ignore = "needs the MCP Python SDK and the claude CLI: scripts/test runs it"]
fn a_run_completes_within_wait_s_and_is_recorded() {
    require_python_mcp();
    let claude = common::real_claude();
    let scene = Scene::new();
    let stdout = scene.client("run", Some(&claude), Duration::from_secs(120));
    let run_id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RUN_ID "))
        .unwrap_or_else(|| panic!("no RUN_ID: {stdout}"))
        .trim()
        .to_owned();
    // The runs went through the run mode (the first, the checked one and the refused
    // one): `coder runs` knows them, by the run_id the server answered with.
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["runs", "list", "--json", "--state-dir"])
        .arg(scene.root.path().join("state"))
        .output_bounded();
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_id"] == run_id.as_str()),
        "{run_id} not in {runs}"
    );
    let show = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["runs", "show", &run_id, "--json", "--state-dir"])
        .arg(scene.root.path().join("state"))
        .output_bounded();
    let account: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(account["run_id"], run_id.as_str(), "{account}");
    assert_eq!(account["outcome"]["success"], true, "{account}");
}

#[test]
#[ignore = "needs the MCP Python SDK and the claude CLI: scripts/test runs it"]
fn a_long_run_reports_progress_and_is_cancelled() {
    require_python_mcp();
    let claude = common::real_claude();
    let scene = Scene::new();
    scene.client("long", Some(&claude), Duration::from_secs(150));
}

/// A server started with SIGTERM ignored (`trap '' TERM`, as some runners start jobs) still
/// stops a run with its cancelled envelope: the run, which keeps an inherited ignored
/// signal ignored, gets SIGTERM back at its default. Without that, coder_cancel waited out
/// the grace period and SIGKILLed the run, which printed no envelope.
#[test]
#[ignore = "needs the MCP Python SDK and the claude CLI: scripts/test runs it"]
fn a_server_started_with_sigterm_ignored_still_cancels_its_runs() {
    require_python_mcp();
    let claude = common::real_claude();
    let scene = Scene::new();
    let through = ["sh", "-c", "trap '' TERM; exec \"$@\"", "sh"];
    scene.client_through(&through, "long", Some(&claude), Duration::from_secs(150));
}

#[test]
#[ignore = "needs the MCP Python SDK and the claude CLI: scripts/test runs it"]
fn a_client_that_goes_away_leaves_nothing_behind() {
    require_python_mcp();
    let claude = common::real_claude();
    let scene = Scene::new();
    scene.client("disconnect", Some(&claude), Duration::from_secs(120));
}

/// JSON-RPC 2.0 §5.1 over stdio without a client library: a line that is not JSON gets a
/// parse error (-32700, `id` null), JSON that is no message an invalid request (-32600,
/// with its id when it has one); notifications, known or not, and blank lines get no
/// answer; and the server goes on answering real requests in between. Every answer is
/// written before the server exits at the end of its input.
#[test]
fn input_that_is_not_a_message_gets_a_json_rpc_error() {
    let scene = Scene::new();
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}});
    let lines = [
        init.to_string(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        "hello, server".to_owned(),
        String::new(),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list""#.to_owned(),
        r#"{"jsonrpc":"2.0","id":3}"#.to_owned(),
        "[1, 2]".to_owned(),
        r#"{"jsonrpc":"2.0","method":"$/lsp/chatter"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#.to_owned(),
        // Params that do not fit tools/call: invalid params, not "Method not found".
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read-file","arguments":[]}}"#
            .to_owned(),
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":5}}"#.to_owned(),
    ];
    let input = scene.root.path().join("input.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["mcp", "--base"])
        .arg(&scene.base)
        .env("CODER_STATE_DIR", scene.root.path().join("state"))
        .env("XDG_CONFIG_HOME", scene.root.path().join("xdg"))
        .env_remove("CODER_CONFIG")
        .stdin(std::fs::File::open(&input).unwrap())
        .output_bounded();
    assert!(out.status.success(), "{out:?}");
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let by_id = |id: serde_json::Value| answers.iter().filter(move |a| a["id"] == id);
    let codes = |id: serde_json::Value| -> Vec<i64> {
        by_id(id)
            .filter_map(|a| a["error"]["code"].as_i64())
            .collect()
    };
    let mut null_codes = codes(serde_json::Value::Null);
    null_codes.sort_unstable();
    assert_eq!(null_codes, [-32700, -32700, -32600], "{answers:#?}");
    assert_eq!(codes(serde_json::json!(3)), [-32600], "{answers:#?}");
    assert!(by_id(serde_json::json!(1)).any(|a| a["result"].is_object()));
    assert!(
        by_id(serde_json::json!(4)).any(|a| a["result"]["tools"].is_array()),
        "{answers:#?}"
    );
    assert!(
        answers.iter().all(|a| a["jsonrpc"] == "2.0"),
        "{answers:#?}"
    );
    for id in [5, 6] {
        assert_eq!(codes(serde_json::json!(id)), [-32602], "{answers:#?}");
    }
    assert_eq!(answers.len(), 8, "{answers:#?}");
}

/// The `coder` tool's `cd` that cannot be used is named with what is wrong with it (and a
/// bad `sandbox` or `SESSION_ID` as the tool's own arguments): it answered with the OS's
/// text ("cd /base/nope: No such file or directory (os error 2)"),
/// and a `..` out of the base that does not exist was "no such file" rather than outside
/// the base.
#[test]
fn a_bad_cd_of_the_coder_tool_is_named_with_what_is_wrong() {
    let scene = Scene::new();
    std::fs::write(scene.base.join("file.txt"), "x\n").unwrap();
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}});
    let call = |id: u32, cd: &str| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "coder", "arguments": {"PROMPT": "task", "cd": cd}}})
        .to_string()
    };
    let lines = [
        init.to_string(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        call(2, "nope"),
        call(3, "../nowhere"),
        call(4, "/etc"),
        call(5, "file.txt"),
        serde_json::json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "coder", "arguments": {"PROMPT": "task", "sandbox": "bogus"}}})
        .to_string(),
        serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "coder", "arguments": {"PROMPT": "task", "SESSION_ID": "nope"}}})
        .to_string(),
    ];
    let input = scene.root.path().join("input.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["mcp", "--base"])
        .arg(&scene.base)
        .env("CODER_STATE_DIR", scene.root.path().join("state"))
        .env("XDG_CONFIG_HOME", scene.root.path().join("xdg"))
        .env_remove("CODER_CONFIG")
        .stdin(std::fs::File::open(&input).unwrap())
        .output_bounded();
    assert!(out.status.success(), "{out:?}");
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let text = |id: u32| -> String {
        let answer = answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id}: {answers:#?}"));
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let base = scene.base.display();
    assert_eq!(
        text(2),
        format!(
            "bad arguments: cd \"nope\" ({base}/nope): no such directory; a relative cd is \
             taken from the server's base {base}"
        )
    );
    let parent = scene.base.parent().unwrap().display();
    for (id, given, leads) in [
        (3, "../nowhere", format!("{parent}/nowhere")),
        (4, "/etc", "/etc".to_owned()),
    ] {
        assert_eq!(
            text(id),
            format!(
                "bad arguments: cd {given:?} leads to {leads}, outside the server's base \
                 {base}; give a directory inside the base (relative to it, or absolute)"
            )
        );
    }
    assert!(
        text(5).ends_with("file.txt) is not a directory; give the workspace directory"),
        "{}",
        text(5)
    );
    // Other arguments are named as the tool's, not as fields of a `--request` JSON on
    // stdin (how the server hands them to the run), which the caller never wrote.
    assert_eq!(
        text(6),
        "bad arguments: sandbox: unknown sandbox mode \"bogus\" (expected read-only, \
         workspace-write or danger-full-access)"
    );
    assert!(
        text(7).starts_with("bad arguments: SESSION_ID must be a session UUID"),
        "{}",
        text(7)
    );
}

/// One `coder mcp` session over a file on stdin: the handshake, then `calls` (tool name,
/// arguments) with ids 1, 2, …; each call's `result`, in order. The real claude CLI is
/// the runs' when `claude` names it.
fn raw_session(
    scene: &Scene,
    calls: &[(&str, serde_json::Value)],
    claude: Option<&Path>,
) -> Vec<serde_json::Value> {
    let requests: Vec<(&str, serde_json::Value)> = calls
        .iter()
        .map(|(name, arguments)| {
            (
                "tools/call",
                serde_json::json!({"name": name, "arguments": arguments}),
            )
        })
        .collect();
    raw_requests(scene, &requests, claude)
}

/// [`raw_session`] of any requests (method, params): each one's `result`, in order.
fn raw_requests(
    scene: &Scene,
    requests: &[(&str, serde_json::Value)],
    claude: Option<&Path>,
) -> Vec<serde_json::Value> {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}});
    let mut lines = vec![
        init.to_string(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
    ];
    for (id, (method, params)) in requests.iter().enumerate() {
        lines.push(
            serde_json::json!({"jsonrpc": "2.0", "id": id + 1, "method": method,
                "params": params})
            .to_string(),
        );
    }
    let input = scene.root.path().join("calls.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_coder"));
    command
        .args(["mcp", "--base"])
        .arg(&scene.base)
        .env("CODER_STATE_DIR", scene.root.path().join("state"))
        .env("XDG_CONFIG_HOME", scene.root.path().join("xdg"))
        .env_remove("CODER_CONFIG")
        .env_remove("CODER_BACKEND")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("CLAUDE_CODE_OAUTH_TOKEN")
        .stdin(std::fs::File::open(&input).unwrap());
    if let Some(claude) = claude {
        command.env("CODER_CLAUDE_BIN", claude);
    }
    let out = command.output_within(Duration::from_secs(120));
    assert!(out.status.success(), "{out:?}");
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (1..=requests.len())
        .map(|id| {
            answers
                .iter()
                .find(|a| a["id"] == id)
                .unwrap_or_else(|| panic!("no answer to {id}: {answers:#?}"))["result"]
                .clone()
        })
        .collect()
}

/// [`raw_session`] of calls that all fail: each one's error text.
fn tool_texts(scene: &Scene, calls: &[(&str, serde_json::Value)]) -> Vec<String> {
    raw_session(scene, calls, None)
        .into_iter()
        .map(|result| {
            assert_eq!(result["isError"], true, "{result}");
            result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// The message of a tool error: the envelope's `error` when the run answered, else the
/// server's own text.
fn tool_error_message(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(envelope) => envelope["error"].as_str().unwrap_or_default().to_owned(),
        Err(_) => text.to_owned(),
    }
}

/// Mistakes in the `coder` tool's arguments are named as the tool's arguments (the caller
/// never wrote `--verify-timeout`, `--session-id` or a `--request` JSON), with the type or
/// range wrong, and numbers quoted as written (`1e300`, not 301 digits).
#[test]
fn the_coder_tool_names_its_own_arguments_never_flags() {
    let scene = Scene::new();
    let session = "3f0c0c8e-1111-4222-8333-444455556666";
    let cases = [
        (
            json_args(r#"{"PROMPT":"t","verify_timeout":5}"#),
            "verify_timeout needs verify (the check command)",
        ),
        (
            json_args(r#"{"PROMPT":"t","no_verify_baseline":true}"#),
            "no_verify_baseline needs verify (the check command)",
        ),
        (
            json_args(r#"{"PROMPT":"t","verify":"true","repair_turns":50}"#),
            "repair_turns must be a whole number from 0 to 10 (got \"50\")",
        ),
        (
            json_args(r#"{"PROMPT":"t","verify":"true","repair_turns":1e300}"#),
            "repair_turns must be a whole number from 0 to 10 (got \"1e+300\")",
        ),
        (
            json_args(r#"{"PROMPT":"t","verify":"true","repair_turns":2.5}"#),
            "repair_turns must be a whole number from 0 to 10 (got \"2.5\")",
        ),
        (
            json_args(r#"{"PROMPT":"t","verify":"true","verify_timeout":1e300}"#),
            "verify_timeout is too large: 1e+300 seconds is more than a year",
        ),
        (
            json_args(r#"{"PROMPT":"t","verify":""}"#),
            "verify is empty: give the check command",
        ),
        (
            json_args(r#"{"PROMPT":"t","answers":["blue"]}"#),
            "answers is for the questions a session asked: give that session's SESSION_ID",
        ),
        (
            json_args(&format!(
                r#"{{"PROMPT":"t","worktree":true,"SESSION_ID":"{session}"}}"#
            )),
            "worktree cannot resume a session",
        ),
        (
            json_args(r#"{"PROMPT":"t","scope":[]}"#),
            "scope is an empty list",
        ),
        (
            // No backend and no credentials: the way out is named as the tool's argument.
            json_args(r#"{"PROMPT":"t"}"#),
            "backend 'inherit' has no credentials",
        ),
        (
            json_args(r#"{"PROMPT":"t","scope":["/abs/**"]}"#),
            "scope \"/abs/**\" is not a valid glob: it is absolute",
        ),
        (
            json_args(r#"{"PROMPT":"t","json_schema":{"type":"string"}}"#),
            "json_schema must describe a JSON object",
        ),
        (
            json_args(r#"{"PROMPT":"t","max_retries":1e0}"#),
            "max_retries must be a whole number from 0 to 100 (got \"1.0\")",
        ),
        (
            json_args(r#"{"PROMPT":"t","timeout":-1}"#),
            "timeout must be a non-negative number of seconds (got \"-1\")",
        ),
        (
            json_args(r#"{"PROMPT":"t","wait_s":1e300}"#),
            "bad arguments: wait_s must be a number of seconds from 0 to 3600 (got 1e+300)",
        ),
        (
            json_args(r#"{"PROMPT":"t","backend":""}"#),
            "bad arguments: backend is empty",
        ),
        (
            json_args(r#"{"PROMPT":"t","repair_turns":"2"}"#),
            "bad arguments: repair_turns must be a whole number from 0 to 10 (got \"2\")",
        ),
        (
            json_args(r#"{"PROMPT":"t","scope":"src"}"#),
            "bad arguments: scope must be a list of glob strings",
        ),
        (
            json_args(r#"{"PROMPT":"t","allow_questions":1}"#),
            "bad arguments: allow_questions must be true or false (got 1)",
        ),
        (
            json_args(r#"{"PROMPT":"t","json_schema":"{}"}"#),
            "bad arguments: json_schema must be a JSON Schema object",
        ),
        (
            // Unknown arguments are named with the one they likely mean, all at once and
            // beside the wrong types (serde named the first, as "unknown field").
            json_args(r#"{"PROMPT":"t","promt":"t"}"#),
            "bad arguments: unknown argument \"promt\": did you mean \"PROMPT\"?",
        ),
        (
            json_args(r#"{"PROMPT":"t","sandbx":"read-only","repair_turns":"2"}"#),
            "bad arguments: unknown argument \"sandbx\": did you mean \"sandbox\"?; \
             repair_turns must be a whole number from 0 to 10 (got \"2\")",
        ),
        (
            json_args(r#"{"PROMPT":"t","colour":"red"}"#),
            "bad arguments: unknown argument \"colour\" (the coder tool takes: ",
        ),
        (
            // A string was read as a file name by the run: any JSON file the server could
            // read, outside its base, went to the model as the answers.
            json_args(&format!(
                r#"{{"PROMPT":"","answers":"/etc/passwd","SESSION_ID":"{session}"}}"#
            )),
            "bad arguments: answers must be a list of answers in the questions' order",
        ),
    ];
    let calls: Vec<(&str, serde_json::Value)> = cases
        .iter()
        .map(|(args, _)| ("coder", args.clone()))
        .collect();
    let texts = tool_texts(&scene, &calls);
    for ((args, says), text) in cases.iter().zip(&texts) {
        let message = tool_error_message(text);
        assert!(message.starts_with(says), "{args}: {message}");
        assert!(
            !message.contains("--request") && !message.contains("--verify"),
            "{args}: {message}"
        );
        assert!(
            !message.contains("--backend") || message.contains("the backend argument"),
            "{args}: {message}"
        );
    }
}

/// The follow-up tools name an unknown argument too, with the one it likely means or the
/// arguments they take, before looking for the run (serde's "unknown field `wait`,
/// expected `run_id` or `wait_s`" named no tool).
#[test]
fn the_follow_up_tools_name_an_unknown_argument() {
    let scene = Scene::new();
    let cases = [
        (
            "coder_wait",
            serde_json::json!({"run_id": "nope", "wait": 3}),
            "bad arguments: unknown argument \"wait\": did you mean \"wait_s\"?",
        ),
        (
            "coder_status",
            serde_json::json!({"run_id": "nope", "verbose": true}),
            "bad arguments: unknown argument \"verbose\" (the coder_status tool takes: run_id)",
        ),
    ];
    let calls: Vec<(&str, serde_json::Value)> = cases
        .iter()
        .map(|(tool, args, _)| (*tool, args.clone()))
        .collect();
    for ((tool, _, says), text) in cases.iter().zip(tool_texts(&scene, &calls)) {
        assert_eq!(text, *says, "{tool}");
    }
}

/// A JSON text parsed keeping its numbers as written (`1e300`, `1e0`).
fn json_args(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

/// `coder mcp` whose stdout cannot be written says so in its own words (it printed rmcp's
/// "Send message error Transport [coder::commands::mcp_stdio::LineTransport<…>] error: No
/// space left on device", exit 1), exits 74 like every subcommand whose stdout fails, and
/// ends quietly when the client closed its end (a broken pipe is the client going away).
#[test]
fn a_server_whose_stdout_cannot_be_written_says_so() {
    let scene = Scene::new();
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}});
    let input = scene.root.path().join("init.jsonl");
    std::fs::write(&input, format!("{init}\n")).unwrap();
    // Through `sh`: the harness captures stdout itself.
    let server = |redirect: &str| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("\"$0\" mcp --base \"$1\" {redirect}"))
            .arg(env!("CARGO_BIN_EXE_coder"))
            .arg(&scene.base)
            .env("CODER_STATE_DIR", scene.root.path().join("state"))
            .env("XDG_CONFIG_HOME", scene.root.path().join("xdg"))
            .env_remove("CODER_CONFIG")
            .stdin(std::fs::File::open(&input).unwrap());
        cmd
    };
    let out = server(">/dev/full").output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{stderr}");
    assert!(
        stderr.starts_with("coder mcp: cannot write to stdout (No space left on device"),
        "{stderr}"
    );
    assert!(!stderr.contains("Transport ["), "{stderr}");

    // A pipe whose reader is gone before the server starts (inherited: `pipe` sets no
    // close-on-exec).
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&write);
    let out = server(&format!(">&{fd}")).output_bounded();
    drop(write);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");

    let out = server("").stdin(Stdio::null()).output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("coder mcp: stdin ended before a client initialized the MCP session"),
        "{stderr}"
    );
}

/// A resume from another `cd` than the session's names the tool's arguments (`cd`,
/// `SESSION_ID`), not the flags `--cd` and `--session-id` the caller never wrote.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_resume_in_another_cd_names_the_tools_arguments() {
    let scene = Scene::new();
    for dir in ["a", "b"] {
        std::fs::create_dir_all(scene.base.join(dir)).unwrap();
    }
    let backend = format!("replay:{CASSETTES}/plain.json");
    let claude = common::real_claude();
    let first = raw_session(
        &scene,
        &[(
            "coder",
            serde_json::json!({"PROMPT": "say hi", "cd": "a", "backend": backend}),
        )],
        Some(&claude),
    );
    let envelope = &first[0]["structuredContent"];
    assert_eq!(envelope["success"], true, "{envelope}");
    let session = envelope["SESSION_ID"].as_str().unwrap().to_owned();
    let again = raw_session(
        &scene,
        &[(
            "coder",
            serde_json::json!({"PROMPT": "again", "cd": "b", "backend": backend,
                               "SESSION_ID": session}),
        )],
        Some(&claude),
    );
    let envelope = &again[0]["structuredContent"];
    assert_eq!(envelope["error_kind"], "config_error", "{envelope}");
    let error = envelope["error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "resume it with cd {}",
            scene.base.join("a").display()
        )) && error.contains("leave SESSION_ID out")
            && !error.contains("--"),
        "{error}"
    );
}

/// A `--worktree` run's resume hint over MCP could not name the base to go on from (the
/// tool had no `worktree_base`): it said to merge the branch by hand. The tool takes
/// `worktree_base` now, the hint names it, and a new run started as the hint says starts
/// from the branch; a base without `worktree` is refused, named as the tool's arguments.
#[test]
#[ignore = "needs the MCP Python SDK and the claude CLI: scripts/test runs it"]
fn a_worktree_runs_hint_names_worktree_base_and_works() {
    require_python_mcp();
    let claude = common::real_claude();
    let scene = Scene::new();
    let repo = scene.base.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    common::git_init_with_a_commit(&repo);
    scene.client("worktree", Some(&claude), Duration::from_secs(180));
}

/// A plain run of the `coder` tool resuming a `coder plan` session would carry the
/// read-only planning on as a run that may write the workspace: refused, worded for the
/// tool's caller (its `SESSION_ID`, "this tool"), naming how to go on planning and how to
/// carry the plan out. The plan session is made by `coder plan` on the command line, in
/// the server's state directory.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_coder_tool_does_not_resume_a_plan_session_as_a_run() {
    let scene = Scene::new();
    let ws = scene.base.join("a");
    std::fs::create_dir_all(&ws).unwrap();
    let backend = format!("replay:{CASSETTES}/plan_question.json");
    let claude = common::real_claude();
    let plan = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["plan", "--cd"])
        .arg(&ws)
        .args(["--backend", &backend, "--claude-bin"])
        .arg(&claude)
        .arg("plan the migration")
        .env("CODER_STATE_DIR", scene.root.path().join("state"))
        .env("XDG_CONFIG_HOME", scene.root.path().join("xdg"))
        .env_remove("CODER_CONFIG")
        .env_remove("CODER_BACKEND")
        .stdin(Stdio::null())
        .output_within(Duration::from_secs(120));
    let planned: serde_json::Value = String::from_utf8_lossy(&plan.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no envelope: {plan:?}"));
    let session = planned["SESSION_ID"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let plan_file = planned["plan_file"].as_str().unwrap_or_default().to_owned();
    assert!(!session.is_empty() && !plan_file.is_empty(), "{planned}");
    let resumed = raw_session(
        &scene,
        &[(
            "coder",
            serde_json::json!({"PROMPT": "go on", "cd": "a", "backend": backend,
                               "SESSION_ID": session}),
        )],
        Some(&claude),
    );
    let envelope = &resumed[0]["structuredContent"];
    assert_eq!(envelope["error_kind"], "config_error", "{envelope}");
    let error = envelope["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("is a plan session")
            && error.contains("this tool does not resume")
            && error.contains(&format!(
                "coder plan --plan-file {plan_file} --session-id {session}"
            ))
            && error.contains(&format!("coder --plan {plan_file}"))
            && error.contains("leave SESSION_ID out")
            && !error.contains("--cd"),
        "{error}"
    );
}

/// What a model reads in the tool list is enough to call a tool right the first time: the
/// file tools' counts give their default and limit (`tree`'s depth said `minimum: 0`, no
/// default, no limit, though 0 is refused and 50 was taken as 10 without a word), line
/// numbers say they are 1-based, and the `coder` tool's times say they are seconds. A
/// count over its limit is taken as the limit and the result's `notes` say so.
#[test]
fn tool_schemas_give_units_defaults_and_limits_and_results_say_what_was_cut() {
    let scene = Scene::new();
    let results = raw_requests(
        &scene,
        &[
            ("tools/list", serde_json::json!({})),
            (
                "tools/call",
                serde_json::json!({"name": "tree", "arguments": {"depth": 50}}),
            ),
            (
                "tools/call",
                serde_json::json!({"name": "list-folder", "arguments": {"limit": 1000}}),
            ),
        ],
        None,
    );
    let tools = results[0]["tools"].as_array().unwrap();
    let schema = |tool: &str, arg: &str| {
        tools.iter().find(|t| t["name"] == tool).unwrap()["inputSchema"]["properties"][arg].clone()
    };
    for (tool, arg, default, max) in [
        ("tree", "depth", 3, 10),
        ("tree", "per_folder_limit", 50, 500),
        ("list-folder", "limit", 200, 1000),
        ("search", "max_results", 100, 1000),
    ] {
        let s = schema(tool, arg);
        assert!(
            s["minimum"] == 1 && s["maximum"] == max && s["default"] == default,
            "{tool} {arg}: {s}"
        );
    }
    assert_eq!(schema("read-file", "start_line")["minimum"], 1);
    for arg in ["timeout", "max_duration", "verify_timeout", "wait_s"] {
        let described = schema("coder", arg)["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(described.contains("seconds"), "{arg}: {described}");
    }
    let tree = &results[1]["structuredContent"];
    let tree = if tree.is_null() {
        serde_json::from_str(results[1]["content"][0]["text"].as_str().unwrap()).unwrap()
    } else {
        tree.clone()
    };
    assert_eq!(tree["depth"], 10, "{tree}");
    assert_eq!(
        tree["notes"],
        serde_json::json!(["depth 50 is over its limit of 10: 10 was used"]),
        "{tree}"
    );
    assert!(
        results[2].to_string().contains("\"entries\"") && !results[2].to_string().contains("notes"),
        "{}",
        results[2]
    );
}
