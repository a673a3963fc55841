//! Rough edges a new user ran into, each shown as the user sees it through the built
//! binary: the envelope (or the subcommand's output) and the exit code.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Bounded, Coder, Fake, steps};
use serde_json::json;

/// Under root the runs below start as uid 65534 (permissions do not bind root), with a
/// home and a state directory of their own in `root`; otherwise as the user running the
/// tests.
fn as_unprivileged(coder: Coder, root: &Path) -> Coder {
    if !nix::unistd::geteuid().is_root() {
        return coder;
    }
    let own = root.join("nobody");
    for dir in [own.join("home"), own.join("state")] {
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    }
    coder
        .env("HOME", own.join("home"))
        .env("CODER_STATE_DIR", own.join("state"))
        .through([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A workspace the user may not enter or list, in every sandbox mode, and one the user may
/// not write under `workspace-write`, are the caller's `--cd` to fix: a `config_error` (78)
/// naming the workspace and what is missing, before anything starts. They used to fail
/// after the sandbox's scan as `sandbox_error` ("sandbox setup: open …: EACCES",
/// "create placeholder …/.git: EACCES"), and unconfined as `command_not_found` ("cannot
/// execute …/claude: Permission denied": the spawn's chdir had failed).
#[test]
fn a_workspace_the_user_cannot_enter_or_write_is_a_config_error_naming_it() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    // The path down to the workspace is open to everyone; the workspace itself is the
    // test's (root's, or this user's with its permissions taken away).
    chmod(fake.root(), 0o755);
    let ws = fake.workspace();
    chmod(ws, 0o700);
    let closed = nix::unistd::geteuid().is_root();
    if !closed {
        chmod(ws, 0o000);
    }
    for mode in ["read-only", "workspace-write", "danger-full-access"] {
        let out = as_unprivileged(fake.coder(), fake.root())
            .args(["--sandbox", mode, "task"])
            .deadline(Duration::from_secs(20))
            .run();
        let detail = out.assert_failure("config_error", 78);
        let message = detail["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("--cd {}: permission denied", ws.display()))
                && message.contains("read and search (x) permission"),
            "{mode}: {}",
            out.explain()
        );
    }
    // Readable but not writable: refused under workspace-write only, saying how to go on.
    chmod(ws, if closed { 0o755 } else { 0o555 });
    let out = as_unprivileged(fake.coder(), fake.root())
        .arg("task")
        .deadline(Duration::from_secs(20))
        .run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("--cd {}: permission denied", ws.display()))
            && message
                .contains("workspace-write sandbox (the default) needs a workspace you can write")
            && message.contains("--sandbox read-only"),
        "{}",
        out.explain()
    );
    // `coder sandbox` says the same on stderr, with exit 78 instead of 71.
    let mut sandbox = if closed {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(common::CODER);
        cmd
    } else {
        Command::new(common::CODER)
    };
    let out = sandbox
        .args(["sandbox", "--cd"])
        .arg(ws)
        .args(["--", "true"])
        .env(
            "CODER_STATE_DIR",
            if closed {
                fake.root().join("nobody/state")
            } else {
                fake.state_dir()
            },
        )
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("needs a workspace you can write") && stderr.contains("--mode read-only"),
        "{stderr}"
    );
    chmod(ws, 0o755);
    assert!(!fake.has_record(), "the child ran");
}

/// coder with its stdout on `/dev/full` (every write fails with ENOSPC), reading stderr.
fn to_full_device(fake: &Fake, args: &[&str]) -> (Option<i32>, String) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let mut child = Command::new(common::CODER)
        .args(args)
        .env_remove("CODER_CLAUDE_BIN")
        .env_remove("CODER_BACKEND")
        .env_remove("CODER_CONFIG")
        .env("XDG_CONFIG_HOME", fake.root().join("xdg-config"))
        .env("CODER_STATE_DIR", fake.state_dir())
        .env("ANTHROPIC_AUTH_TOKEN", common::SECRET_TOKEN)
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .stdin(std::process::Stdio::null())
        .stdout(full)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn coder");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let status = common::wait_within(&mut child, Duration::from_secs(30));
    (status.code(), reader.join().unwrap())
}

/// A stdout that cannot be written (a full disk; not a reader that went away) loses no
/// envelope: it goes to stderr after a line saying why, and the exit status is 74. The run
/// mode used to drop the envelope and exit 0, as if the run had been reported.
#[test]
fn an_envelope_stdout_cannot_take_goes_to_stderr_with_exit_74() {
    let fake = Fake::new(json!(steps::answer("the work is done")));
    let ws = fake.workspace().to_str().unwrap().to_owned();
    let bin = fake.bin().to_str().unwrap().to_owned();
    let (code, stderr) = to_full_device(&fake, &["--cd", &ws, "--claude-bin", &bin, "task"]);
    assert_eq!(code, Some(74), "{stderr}");
    assert!(
        stderr.contains("coder: cannot write to stdout: No space left on device"),
        "{stderr}"
    );
    let envelope: serde_json::Value = stderr
        .lines()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no envelope on stderr: {stderr}"));
    assert_eq!(envelope["success"], true, "{stderr}");
    assert_eq!(envelope["result"], "the work is done", "{stderr}");
    // The same for an envelope of bad arguments, and for a subcommand's output.
    let (code, stderr) = to_full_device(&fake, &["--cd", &ws, "--sandbox", "nope", "task"]);
    assert_eq!(code, Some(74), "{stderr}");
    assert!(
        stderr.contains("\"error_kind\":\"config_error\""),
        "{stderr}"
    );
    let (code, stderr) = to_full_device(&fake, &["prompt", "task"]);
    assert_eq!(code, Some(74), "{stderr}");
    assert!(stderr.contains("cannot write to stdout"), "{stderr}");
}

/// A config file that does not parse is reported once, by the check that reads it: `coder
/// doctor` skips the egress check (its probe, `coder sandbox -- true`, reads the same file)
/// instead of failing it with a hint about network namespaces, and `coder sandbox` names
/// the file once ("config file X: config file X, line 1: …" before).
#[test]
fn a_broken_config_file_is_one_problem_named_once() {
    let tmp = tempfile::tempdir().unwrap();
    let config_dir = tmp.path().join("xdg/coder");
    std::fs::create_dir_all(&config_dir).unwrap();
    let config = config_dir.join("config.toml");
    std::fs::write(&config, "default_backend = \"glm\n").unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let cassette = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/cassettes/plain.json");
    let coder = |args: &[&str]| {
        let mut cmd = Command::new(common::CODER);
        cmd.args(args)
            .env_remove("CODER_CONFIG")
            .env_remove("CODER_BACKEND")
            .env("XDG_CONFIG_HOME", tmp.path().join("xdg"))
            .env("CODER_STATE_DIR", tmp.path().join("state"))
            .stdin(std::process::Stdio::null());
        cmd.output_bounded()
    };
    let out = coder(&[
        "doctor",
        "--json",
        "--backend",
        &format!("replay:{cassette}"),
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check: {report}"))
    };
    assert_eq!(check("config")["status"], "fail", "{report}");
    let egress = check("egress");
    assert_eq!(egress["status"], "skip", "{report}");
    assert_eq!(egress["summary"], "the config file is unusable", "{report}");
    assert_eq!(out.status.code(), Some(1), "{report}");

    let out = coder(&["sandbox", "--cd", ws.to_str().unwrap(), "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!(
            "coder sandbox: config file {}: line 1: invalid basic string, expected `\"`",
            config.display()
        ),
        "{stderr}"
    );
}

/// `coder plan --help` offers only what a plan run takes: its `--sandbox` used to read
/// "read-only, workspace-write (default) or danger-full-access", and `--write`,
/// `--allow-tmp`, `--worktree` and `--plan` were listed, all of which it refuses.
#[test]
fn plan_help_offers_no_flag_plan_refuses() {
    let help = |args: &[&str]| {
        let out = Command::new(common::CODER)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output_bounded();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8(out.stdout).unwrap()
    };
    let plan = help(&["plan", "--help"]);
    assert!(
        plan.contains("--sandbox <MODE>       Only read-only"),
        "{plan}"
    );
    assert!(!plan.contains("workspace-write (default)"), "{plan}");
    let options = plan
        .split("Run flags (backend")
        .next()
        .and_then(|head| head.split("Options:").nth(1))
        .unwrap_or_else(|| panic!("no options in: {plan}"));
    for flag in ["--write <", "--allow-tmp", "--worktree", "--plan <"] {
        assert!(!options.contains(flag), "{flag} offered: {plan}");
    }
    // The refusal is still spelled out, and the run mode still offers them all.
    assert!(plan.contains("--write, --allow-tmp, --worktree and --plan are refused"));
    let run = help(&["--help"]);
    for flag in [
        "workspace-write (default)",
        "--write <",
        "--allow-tmp",
        "--worktree",
        "--plan <",
    ] {
        assert!(run.contains(flag), "{flag} missing: {run}");
    }
}

/// `--backend auto` (routing, README "Routing") is named where a user looks for backend
/// names: the run's and the plan's `--help` listed every choice but it.
#[test]
fn run_help_names_backend_auto() {
    for args in [&["--help"][..], &["plan", "--help"][..]] {
        let out = Command::new(common::CODER)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output_bounded();
        let help = String::from_utf8(out.stdout).unwrap();
        let backend = help
            .split("--backend <NAME>")
            .nth(1)
            .and_then(|rest| rest.split("--config").next())
            .unwrap_or_else(|| panic!("no --backend in: {help}"));
        assert!(
            backend.contains("auto[:NAME,NAME,…] to let coder pick by what has worked"),
            "{args:?}: {help}"
        );
    }
}

/// A `--claude-bin` that is not the claude CLI and prints nothing (`/bin/true`, a shim that
/// does nothing) says so and how to check, as a wrapper printing other text already did;
/// it was a bare "no session id in the stream".
#[test]
fn a_claude_bin_that_prints_nothing_is_named_as_the_likely_cause() {
    let fake = Fake::new(json!([steps::exit(0)]));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("protocol_missing_session", 1);
    assert_eq!(
        out.envelope["error"],
        "no session id in the stream: claude printed nothing",
        "{}",
        out.explain()
    );
    assert!(
        detail["hint"].as_str().is_some_and(
            |h| h.starts_with("check that --claude-bin") && h.contains("claude --version")
        ),
        "{}",
        out.explain()
    );
    // A CLI that printed events but no session id keeps the plain message.
    let fake = Fake::new(json!([{"step": "init", "session_id": null}, steps::exit(0)]));
    let out = fake.coder().arg("task").run();
    out.assert_failure("protocol_missing_session", 1);
    assert_eq!(
        out.envelope["error"],
        "no session id in the stream",
        "{}",
        out.explain()
    );
}

/// A directory in the workspace the user may not list (another uid's, which the user may
/// enter but not read, mode 0711; or the user's own, mode 000, which the agent could
/// `chmod` back) stops a confined run, as the scan must read every directory the agent
/// can reach; the envelope's hint now says which path and what to do about it, instead of
/// "run `coder doctor`" (which checks nothing of the kind). (Another uid's directory the
/// user may not even enter is left out: `sandbox_workspace`.)
#[test]
fn an_unreadable_directory_in_the_workspace_is_named_in_the_hint() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    chmod(fake.root(), 0o755);
    let ws = fake.workspace();
    let locked = ws.join("pgdata");
    std::fs::create_dir(&locked).unwrap();
    let root = nix::unistd::geteuid().is_root();
    if root {
        // The workspace is the run's user's; the directory in it stays root's.
        std::os::unix::fs::chown(ws, Some(65534), Some(65534)).unwrap();
        chmod(&locked, 0o711);
    } else {
        chmod(&locked, 0o000);
    }
    let out = as_unprivileged(fake.coder(), fake.root())
        .arg("task")
        .deadline(Duration::from_secs(30))
        .run();
    let detail = out.assert_failure("sandbox_error", 71);
    let hint = detail["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains(&format!("may not open or change {}", locked.display()))
            && hint.contains("give yourself access to it")
            && hint.contains("--sandbox danger-full-access"),
        "{}",
        out.explain()
    );
    // The same directory given with --read (the workspace itself made readable without
    // it): the hint speaks of the grant, not of the workspace.
    std::fs::rename(&locked, fake.root().join("pgdata")).unwrap();
    let outside = fake.root().join("pgdata");
    let out = as_unprivileged(fake.coder(), fake.root())
        .arg("--read")
        .arg(&outside)
        .arg("task")
        .deadline(Duration::from_secs(30))
        .run();
    chmod(&outside, 0o755);
    let detail = out.assert_failure("sandbox_error", 71);
    let hint = detail["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains(&format!("may not open or change {}", outside.display()))
            && hint.contains("leave it out of the grants (--read, --write)"),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}

/// With coder's state directory inside the workspace (allowed unconfined), the default
/// store is refused there; the hint used to say "put the store outside the workspace (the
/// default is <state>/coder.db)", which is where it was: it now names what moves it.
#[test]
fn a_default_store_inside_the_workspace_says_how_to_move_it() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let state = fake.workspace().join("state");
    let out = fake
        .coder()
        .env("CODER_STATE_DIR", &state)
        .args(["--sandbox", "danger-full-access", "task"])
        .run();
    let detail = out.assert_failure("config_error", 78);
    assert!(
        detail["message"]
            .as_str()
            .unwrap()
            .contains("lies inside the workspace"),
        "{}",
        out.explain()
    );
    let hint = detail["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("--store, CODER_STORE") && hint.contains("moves with CODER_STATE_DIR"),
        "{}",
        out.explain()
    );
}

/// `coder route stats` and `route explain` line their columns up whatever the backends'
/// names: a `replay:PATH` backend (the README's way to try routing without a key) pushed
/// every column of its row out from under its header.
#[test]
fn route_tables_line_up_with_long_backend_names() {
    let fake = Fake::new(json!(steps::answer("routed")));
    let cassette = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/cassettes/plain.json");
    let backend = format!("replay:{cassette}");
    fake.coder()
        .args(["--backend", &format!("auto:{backend}"), "task"])
        .run()
        .assert_success("routed");
    let route = |args: &[&str]| {
        let out = Command::new(common::CODER)
            .arg("route")
            .args(args)
            .env("CODER_STATE_DIR", fake.state_dir())
            .env_remove("CODER_STORE")
            .stdin(std::process::Stdio::null())
            .output_bounded();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(0), "{text}");
        text
    };
    let stats = route(&["stats"]);
    let lines: Vec<&str> = stats.lines().collect();
    assert_eq!(lines.len(), 2, "{stats}");
    assert_eq!(
        lines[0].find("bucket"),
        lines[1].find("d0/"),
        "columns:\n{stats}"
    );
    assert_eq!(lines[0].len(), lines[1].len(), "columns:\n{stats}");
    let explain = route(&["explain", "--backend", &format!("auto:{backend}"), "task"]);
    let lines: Vec<&str> = explain.lines().collect();
    let (header, row) = (lines[1], lines[2]);
    assert!(row.starts_with(&backend), "{explain}");
    // The header's "alpha" sits right of the backend column, as the row's alpha does.
    assert!(
        header.find("alpha").is_some_and(|i| i > backend.len()),
        "columns:\n{explain}"
    );
    assert_eq!(
        header.find("  P(chosen)").map(|i| i - 6),
        row.find("0.778").map(|i| i - 1),
        "columns:\n{explain}"
    );
}

/// `coder runs list` keeps one line per run: the workspace column lines up after a long
/// `replay:PATH` backend, and a workspace whose name holds a newline is shown quoted
/// instead of splitting its row in two.
#[test]
fn runs_list_keeps_one_aligned_line_per_run() {
    let fake = Fake::new(json!(steps::answer("listed")));
    let odd = fake.root().join("new\nline");
    std::fs::create_dir(&odd).unwrap();
    let cassette = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/cassettes/plain.json");
    fake.coder()
        .args(["--backend", &format!("replay:{cassette}"), "task"])
        .run()
        .assert_success("listed");
    fake.coder()
        .cd(&odd)
        .args(["--sandbox", "danger-full-access", "task"])
        .run()
        .assert_success("listed");
    let out = Command::new(common::CODER)
        .args(["runs", "list"])
        .env("CODER_STATE_DIR", fake.state_dir())
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let column = lines[0].find("workspace").unwrap();
    assert_eq!(
        lines[1].get(column..),
        Some(format!("{:?}", odd.to_str().unwrap()).as_str()),
        "{text}"
    );
    assert_eq!(lines[2].get(column..), fake.workspace().to_str(), "{text}");
}

/// A backend cooling down after a used-up quota (the vendor's reset time) refused every run
/// until then, with no way to end it when the quota came back sooner (a plan changed) but
/// deleting the store. `coder route forget NAME` ends it now, and the refusal's hint says
/// so, with a command that can be pasted.
#[test]
fn route_forget_ends_a_cooldown_the_hint_names() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.db");
    let config = dir.path().join("coder.toml");
    std::fs::write(&config, "[backends.solo]\npreset = \"inherit\"\n").unwrap();
    let on_store = |fake: &Fake| {
        fake.coder()
            .arg("--store")
            .arg(&store)
            .arg("--config")
            .arg(&config)
            .args(["--backend", "solo"])
    };
    let quota = "API Error: 429 {\"error\":{\"code\":\"1308\",\"message\":\"Usage limit reached \
                 for 5 hour. Your limit will reset at 2099-01-01 08:00:00\"}}";
    let hit = Fake::new(json!([
        {"step": "init"},
        {"step": "result", "is_error": true, "api_error_status": 429, "text": quota},
    ]));
    on_store(&hit)
        .arg("one")
        .run()
        .assert_failure("upstream_error", 1);
    let next = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "back"}]));
    let out = on_store(&next).arg("two").run();
    let detail = out.assert_failure("upstream_error", 1);
    // The command names the run's store: a bare `coder route forget solo` looked in the
    // default store, found nothing to forget, and the next run was refused all the same.
    let hint = detail["hint"].as_str().unwrap_or_default();
    let command = hint
        .split('`')
        .nth(1)
        .filter(|_| hint.contains("` ends the cooldown"))
        .unwrap_or_else(|| panic!("no command in the hint: {}", out.explain()));
    assert_eq!(
        command,
        format!("coder route --store {} forget solo", store.display()),
        "{}",
        out.explain()
    );
    // Pasted as it is, with neither the config file nor the store in the environment.
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("coder() {{ \"$CODER\" \"$@\"; }}; {command}"),
        ])
        .env("CODER", common::CODER)
        .env_remove("CODER_CONFIG")
        .env_remove("CODER_STORE")
        .env("CODER_STATE_DIR", dir.path().join("state"))
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("1 cooldown(s) of solo"), "{said}");
    on_store(&next).arg("three").run().assert_success("back");
}

/// A Write refused in a `read-only` workspace is a `read_only` denial in
/// `metrics.sandbox_denials`: Landlock answers it with EACCES, which was reported as
/// `outside_sandbox`, as if the agent had reached outside its grants.
#[test]
fn a_write_refused_in_a_read_only_workspace_is_a_read_only_denial() {
    let refused = "<tool_use_error>EACCES: permission denied, open 'greet.sh'</tool_use_error>";
    let fake = Fake::with_state_outside_workspace(json!([
        steps::init(),
        {"step": "tool_use", "name": "Write", "id": "w1",
         "input": {"file_path": "greet.sh", "content": "echo hi\n"}},
        {"step": "emit", "json": {
            "type": "user",
            "message": {"role": "user", "content": [
                {"tool_use_id": "w1", "type": "tool_result", "content": refused, "is_error": true}
            ]},
            "parent_tool_use_id": null,
            "uuid": "u-w1"
        }},
        steps::result_ok("could not write"),
    ]));
    let out = fake
        .coder()
        .args(["--sandbox", "read-only", "--return-metrics", "task"])
        .run();
    out.assert_success("could not write");
    assert_eq!(
        out.envelope["metrics"]["sandbox_denials"],
        json!([{"tool": "Write", "path": "greet.sh", "class": "read_only"}]),
        "{}",
        out.explain()
    );
}

/// `coder doctor --backend replay:CASSETTE` with a cassette that does not parse fails its
/// backend check, as every run on it fails (`config_error`); it said "ok" and exit 0 ("a
/// run can start").
#[test]
fn doctor_fails_a_replay_cassette_a_run_cannot_load() {
    let tmp = tempfile::tempdir().unwrap();
    let cassette = tmp.path().join("broken.json");
    std::fs::write(&cassette, "{\"version\": 1\n").unwrap();
    let out = Command::new(common::CODER)
        .args(["doctor", "--json", "--backend"])
        .arg(format!("replay:{}", cassette.display()))
        .env_remove("CODER_CONFIG")
        .env("XDG_CONFIG_HOME", tmp.path().join("xdg"))
        .env("CODER_STATE_DIR", tmp.path().join("state"))
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let backend = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "backend")
        .cloned()
        .unwrap();
    assert_eq!(backend["status"], "fail", "{report}");
    assert!(
        backend["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("malformed cassette {}", cassette.display())),
        "{report}"
    );
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert_eq!(report["ok"], false, "{report}");
}

/// A changed file whose name is not UTF-8 is listed with U+FFFD in place of its bad bytes
/// (JSON strings are text); a warning now says so, as two such names can look alike and a
/// `--scope` glob matches that spelling. It was listed so without a word.
#[test]
fn a_changed_path_that_is_not_utf8_is_listed_with_a_warning() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "run_tool", "command": "printf 'x\\n' > \"$(printf 'f\\377.txt')\""},
        steps::result_ok("made it"),
    ]));
    let out = fake.coder().arg("task").run();
    out.assert_success("made it");
    let files = out.envelope["changes"]["files"].as_array().unwrap();
    assert!(
        files.iter().any(|f| f["path"] == "f\u{FFFD}.txt"),
        "{}",
        out.explain()
    );
    let warnings = out.envelope["warnings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.starts_with("1 changed path(s) are not valid UTF-8"))),
        "{}",
        out.explain()
    );
}

/// `coder doctor --json` with a built-in state and config of its own; returns the report
/// and the exit code.
fn doctor_json(root: &Path, args: &[&str]) -> (serde_json::Value, Option<i32>) {
    let out = Command::new(common::CODER)
        .args(["doctor", "--json"])
        .args(args)
        .env_remove("CODER_CONFIG")
        .env_remove("CODER_BACKEND")
        .env("XDG_CONFIG_HOME", root.join("xdg"))
        .env("CODER_STATE_DIR", root.join("state"))
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (report, out.status.code())
}

/// The check named `name` of a doctor report.
fn doctor_check(report: &serde_json::Value, name: &str) -> serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no {name} check: {report}"))
}

/// `coder doctor --backend replay:CASSETTE` named the replay backend's provider
/// "anthropic" (its base URL is unset until the replay server starts, and no base URL
/// means Anthropic's API); it is coder's own replay server, `other`, as in a run.
#[test]
fn doctor_names_the_replay_backend_provider_other() {
    let tmp = tempfile::tempdir().unwrap();
    let cassette = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/cassettes/plain.json");
    let (report, _) = doctor_json(tmp.path(), &["--backend", &format!("replay:{cassette}")]);
    let compat = doctor_check(&report, "compat");
    assert_eq!(compat["detail"]["provider"], "other", "{report}");
    assert!(
        compat["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("provider other;")),
        "{report}"
    );
    // Where it is served, in words: it read "…(replay of …): (set when the replay server
    // starts), key from …".
    assert_eq!(
        doctor_check(&report, "backend")["summary"],
        format!(
            "replay:{cassette} (replay of {cassette}): served on 127.0.0.1 by coder once a \
             run starts, key from a dummy replay token as ANTHROPIC_AUTH_TOKEN"
        ),
        "{report}"
    );
}

/// `coder route explain --json` (and `route stats --json`) are read by programs, but their
/// errors were a line on stderr and nothing on stdout: a bad backend, an empty task, a
/// misspelt flag. They are a `config_error` envelope now, as a run's errors are.
#[test]
fn route_json_errors_are_envelopes() {
    let tmp = tempfile::tempdir().unwrap();
    let route = |args: &[&str]| {
        let out = Command::new(common::CODER)
            .arg("route")
            .args(args)
            .env_remove("CODER_CONFIG")
            .env_remove("CODER_BACKEND")
            .env_remove("CODER_STORE")
            .env("XDG_CONFIG_HOME", tmp.path().join("xdg"))
            .env("CODER_STATE_DIR", tmp.path().join("state"))
            .stdin(std::process::Stdio::null())
            .output_bounded();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let envelope: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{args:?}: stdout is no JSON ({e}): {stdout:?}"));
        (envelope, out.status.code())
    };
    for (args, exit, says) in [
        (
            &["explain", "--json", "--backend", "auto:nope", "task"][..],
            78,
            "\"nope\" is not a usable backend",
        ),
        (&["explain", "--json"][..], 78, "the prompt is empty"),
        (
            &["explain", "--json", "--bogus", "task"][..],
            2,
            "unexpected argument '--bogus'",
        ),
        (
            &["stats", "--json", "--bogus"][..],
            2,
            "unexpected argument '--bogus'",
        ),
    ] {
        let (envelope, code) = route(args);
        assert_eq!(code, Some(exit), "{args:?}: {envelope}");
        assert_eq!(envelope["success"], false, "{envelope}");
        assert_eq!(envelope["error_kind"], "config_error", "{envelope}");
        assert!(
            envelope["error"].as_str().is_some_and(|e| e.contains(says)),
            "{args:?}: {envelope}"
        );
    }
}

/// A run that cannot start for want of credentials reports the caller's own mistake in
/// its arguments first: a `--write` path that does not exist, a workspace holding coder's
/// state directory. The credentials error came first, and the path error only once that
/// was fixed (a key found, a login made), for a mistake that was there all along.
#[test]
fn a_bad_path_is_reported_before_missing_credentials() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let without_credentials = |coder: Coder| {
        coder
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("CLAUDE_CODE_OAUTH_TOKEN")
    };
    // The credentials error itself, with nothing else wrong, worded for the command line
    // (it named the MCP tool's argument too, to a caller who never started `coder mcp`).
    let out = without_credentials(fake.coder()).arg("task").run();
    let detail = out.assert_failure("config_error", 78);
    assert!(
        detail["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("backend 'inherit' has no credentials")
                && m.contains("pick another backend (--backend: glm,")
                && !m.contains("mcp")),
        "{}",
        out.explain()
    );
    let missing = fake.root().join("no-such-dir");
    let out = without_credentials(fake.coder())
        .arg("--write")
        .arg(&missing)
        .arg("task")
        .run();
    out.assert_failure("config_error", 78);
    assert_eq!(
        out.envelope["error"],
        format!("--write {}: does not exist", missing.display()),
        "{}",
        out.explain()
    );
    // The workspace holds coder's state directory.
    let out = without_credentials(fake.coder())
        .env("CODER_STATE_DIR", fake.workspace().join("state"))
        .arg("task")
        .run();
    let detail = out.assert_failure("config_error", 78);
    assert!(
        detail["message"].as_str().is_some_and(|m| m
            .contains("(the workspace, a --write path or a writable cache), which reaches it")
            && m.contains("set CODER_STATE_DIR elsewhere")),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}

/// A relative `cd` in a `--request` file is taken from the file's directory, as a config
/// file's paths are: a job file kept beside its workspace means the same wherever coder
/// is started from. It was taken from coder's current directory, so the same file ran in
/// another directory, or failed, depending on where the caller stood.
#[test]
fn a_relative_cd_in_a_request_file_is_taken_from_the_file_directory() {
    let fake = Fake::new(json!(steps::answer("ran in place")));
    let jobs = fake.root().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    let job = jobs.join("job.json");
    std::fs::write(&job, r#"{"PROMPT": "task", "cd": "../ws"}"#).unwrap();
    let out = fake.coder().no_cd().arg("--request").arg(&job).run();
    out.assert_success("ran in place");
    assert_eq!(
        fake.record().cwd(),
        fake.workspace().canonicalize().unwrap(),
        "{}",
        out.explain()
    );
    // A relative `cd` that leads nowhere names the directory it was taken from.
    std::fs::write(&job, r#"{"PROMPT": "task", "cd": "no-such"}"#).unwrap();
    let out = fake.coder().no_cd().arg("--request").arg(&job).run();
    let detail = out.assert_failure("config_error", 78);
    assert!(
        detail["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!(
                "\"cd\" of the --request JSON, {}: no such directory",
                jobs.join("no-such").display()
            ))),
        "{}",
        out.explain()
    );
}

/// A `--plan`, `--contract`, `--guardrails` or `--codex` file that cannot be read says
/// what is wrong in words: "Is a directory (os error 21)" and "No such file or directory
/// (os error 2)" were the OS's own text.
#[test]
fn a_document_flag_naming_no_file_says_so_in_words() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let dir = fake.workspace().to_path_buf();
    let missing = fake.root().join("plan.md");
    for (flag, path, problem) in [
        ("--plan", &dir, "is a directory; name a file"),
        ("--plan", &missing, "no such file"),
        ("--contract", &dir, "is a directory; name a file"),
        ("--guardrails", &missing, "no such file"),
    ] {
        let out = fake.coder().arg(flag).arg(path).arg("task").run();
        out.assert_failure("config_error", 78);
        assert_eq!(
            out.envelope["error"],
            format!("{flag} {}: {problem}", path.display()),
            "{}",
            out.explain()
        );
    }
    assert!(!fake.has_record(), "the child ran");
}

/// A misspelt subcommand (`coder doctr`) reads as a task without `--cd`; the error said
/// only "--cd is required", which sends the user looking for a workspace. It now names the
/// subcommand meant. A word that is near no subcommand keeps the plain message.
#[test]
fn a_misspelt_subcommand_is_named() {
    let run = |word: &str| {
        let out = Command::new(common::CODER)
            .arg(word)
            .env("CODER_STATE_DIR", tempfile::tempdir().unwrap().path())
            .stdin(std::process::Stdio::null())
            .output_bounded();
        let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(78), "{envelope}");
        envelope["error"].as_str().unwrap_or_default().to_owned()
    };
    for (word, meant) in [("doctr", "doctor"), ("rnus", "runs"), ("mpc", "mcp")] {
        let error = run(word);
        assert!(
            error.starts_with(&format!(
                "{word:?} is no subcommand: did you mean `coder {meant}`?"
            )) && error.contains("--cd is required"),
            "{error}"
        );
    }
    assert!(run("refactor").starts_with("--cd is required"));
}

/// A value of the wrong type in a `--request` JSON names its key and what the key takes, as
/// README says (`"repair_turns" in the --request JSON must be …`): serde's own message
/// named only the types ("invalid type: integer `5`, expected path string"), and then, with
/// the key, still in serde's words ("expected a JSON number", "expected a sequence").
#[test]
fn a_request_value_of_the_wrong_type_names_its_key() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    for (body, said) in [
        (
            json!({"PROMPT": "task", "cd": 5}),
            "\"cd\" in the --request JSON must be a string (got 5, a number)",
        ),
        (
            json!({"PROMPT": "task", "timeout": "10"}),
            "\"timeout\" in the --request JSON must be a number of seconds greater than 0, \
             like 300 or 0.5 (got \"10\", a string)",
        ),
        (
            json!({"PROMPT": "task", "scope": "src"}),
            "\"scope\" in the --request JSON must be a list of globs, like [\"src/**\"] (got \
             \"src\", a string)",
        ),
        (
            json!({"PROMPT": "task", "verify": "true", "repair_turns": "x"}),
            "\"repair_turns\" in the --request JSON must be a whole number from 0 to 10 (got \
             \"x\", a string)",
        ),
        (
            json!({"PROMPT": "task", "return_metrics": "yes"}),
            "\"return_metrics\" in the --request JSON must be true or false (got \"yes\", a \
             string)",
        ),
        (
            json!({"PROMPT": "task", "sandbox": "readonly"}),
            "\"sandbox\" in the --request JSON must be \"read-only\", \"workspace-write\" or \
             \"danger-full-access\" (got \"readonly\")",
        ),
        (
            json!({"PROMPT": "task", "max_retries": 1.5}),
            "\"max_retries\" in the --request JSON must be a whole number from 0 to 100 (got \
             \"1.5\")",
        ),
        (
            json!({"PROMPT": "task", "Return-Metrics": true}),
            "\"Return-Metrics\" is no key of the --request JSON: did you mean \
             \"return_metrics\"?",
        ),
        (
            json!({"PROMPT": "task", "verify": "true", "repiar_turns": 1}),
            "\"repiar_turns\" is no key of the --request JSON: did you mean \
             \"repair_turns\"?",
        ),
        // Both spellings of one key: serde's "duplicate field `PROMPT`" named one.
        (
            json!({"PROMPT": "task", "prompt": "other task"}),
            "\"PROMPT\" in the --request JSON and \"prompt\" are one key given twice: keep one",
        ),
    ] {
        let out = fake
            .coder()
            .args(["--request", "-"])
            .stdin(body.to_string())
            .run();
        out.assert_failure("config_error", 78);
        assert_eq!(
            out.envelope["error_detail"]["message"],
            said,
            "{}",
            out.explain()
        );
    }
    assert!(!fake.has_record(), "the child ran");
}

/// A `--request` JSON with several bad fields names them all in one message, in the file's
/// order: it named the first only, and the user fixed them one run at a time.
#[test]
fn every_problem_of_a_request_file_is_named_at_once() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let request = fake.root().join("request.json");
    std::fs::write(
        &request,
        r#"{"PROMPT": "task", "timeout": -1, "sandbox": "foo", "bogus": 1, "repair_turns": 11}"#,
    )
    .unwrap();
    let out = fake.coder().arg("--request").arg(&request).run();
    out.assert_failure("config_error", 78);
    let message = out.envelope["error_detail"]["message"].as_str().unwrap();
    let expected = format!(
        "the --request JSON in {} has 4 problems: \
         \"timeout\" in the --request JSON must be a non-negative number of seconds (got \"-1\"); \
         \"sandbox\" in the --request JSON must be \"read-only\", \"workspace-write\" or \
         \"danger-full-access\" (got \"foo\"); \
         \"bogus\" is no key of the --request JSON (its keys: PROMPT, prompt, cd, ",
        request.display()
    );
    assert!(message.starts_with(&expected), "{}", out.explain());
    assert!(
        message.ends_with(
            "; \"repair_turns\" in the --request JSON must be a whole number from 0 to 10 \
             (got \"11\")"
        ),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}

/// Sandbox flags given with `--sandbox danger-full-access` do nothing; a run said nothing
/// about it, and a user who meant to keep `--deny`'s secrets masked would not know they
/// were not. A warning names them now.
#[test]
fn sandbox_flags_without_a_sandbox_are_named_in_a_warning() {
    let fake = Fake::new(json!(steps::answer("done")));
    let out = fake
        .coder()
        .args(["--sandbox", "danger-full-access", "--deny", "*.secret"])
        .arg("--read")
        .arg(fake.root())
        .arg("task")
        .run();
    out.assert_success("done");
    assert_eq!(
        out.envelope["warnings"],
        json!([
            "--read, --deny had no effect: --sandbox danger-full-access does not confine the \
             agent, which may read, write and reach whatever you can"
        ]),
        "{}",
        out.explain()
    );
}

/// `--cd /proc/self` (or another system tree the user cannot write) is a workspace no
/// confined run may have, whatever its permissions: the message says so, under the default
/// `workspace-write` as under `read-only`. It used to say "not writable … make it writable,
/// or pass --sandbox read-only", which only led to the other refusal.
#[test]
fn a_system_tree_as_workspace_is_named_as_such_not_as_unwritable() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    for mode in ["workspace-write", "read-only"] {
        let out = fake
            .coder()
            .cd("/proc/self")
            .args(["--sandbox", mode, "task"])
            .run();
        let detail = out.assert_failure("config_error", 78);
        let message = detail["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("--cd /proc/")
                && message.ends_with(
                    ": lies in /proc, a system tree that is never a workspace; use a project \
                     directory"
                ),
            "{mode}: {}",
            out.explain()
        );
    }
    let out = Command::new(common::CODER)
        .args(["sandbox", "--cd", "/proc/self", "--", "true"])
        .env("CODER_STATE_DIR", fake.state_dir())
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("--cd /proc/self: lies in /proc, a system tree"),
        "{stderr}"
    );
    assert!(!fake.has_record(), "the child ran");
}

/// A `--json-schema` with a `$ref` to another document (a URL, a file beside it) is refused
/// in words that say what to do: coder fetches no schema, so the referenced one goes under
/// `$defs`. The message used to be the library's, naming its cargo features ("`resolve-http`
/// feature or a custom resolver is required to resolve external schemas via HTTP").
#[test]
fn a_schema_with_an_external_ref_says_to_put_it_under_defs() {
    for reference in ["https://example.com/answer.json", "answer.json#/x"] {
        let fake = Fake::new(json!(steps::answer("should not run")));
        let schema = json!({"type": "object", "properties": {"a": {"$ref": reference}}});
        let out = fake
            .coder()
            .args(["--json-schema", &schema.to_string(), "task"])
            .run();
        out.assert_failure("config_error", 78);
        let error = out.envelope["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("names a schema elsewhere, and coder fetches none")
                && error.contains("under \"$defs\"")
                && !error.contains("feature"),
            "{reference}: {}",
            out.explain()
        );
        assert!(!fake.has_record(), "the child ran");
    }
}

/// `coder route explain --help` describes explain and offers its `--json`: it printed the
/// run mode's help ("Run one coding task …", the run's exit codes, no `--json`), as if
/// explain ran a task. The `--json` flags of `route stats`, `runs list` and `runs show` say
/// what they do (their help lines were blank).
#[test]
fn route_explain_help_describes_explain_and_its_json_flag() {
    let help = |args: &[&str]| {
        let out = Command::new(common::CODER)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output_bounded();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for flag in ["--help", "-h"] {
        let explain = help(&["route", "explain", "--cd", ".", flag]);
        assert!(
            explain.starts_with("The bucket a task falls in")
                && explain.contains("Usage: coder route explain [OPTIONS] [PROMPT]")
                && explain.contains("Print the explanation as JSON")
                && explain.contains("--scope <GLOB>")
                && !explain.contains("Run one coding task")
                && !explain.contains("Exit codes:"),
            "{flag}: {explain}"
        );
    }
    for args in [
        &["route", "stats", "--help"][..],
        &["runs", "list", "--help"][..],
        &["runs", "show", "--help"][..],
    ] {
        let text = help(args);
        let json = text
            .lines()
            .find(|l| l.trim_start().starts_with("--json"))
            .unwrap_or_else(|| panic!("no --json in {text}"));
        assert!(json.contains("JSON"), "{args:?}: {text}");
    }
}

/// Ctrl-C while the agent works still says what it changed: the cancelled envelope lists
/// the file the agent wrote before the signal. It had no `changes`, only the warning that
/// the run "was cancelled before the change ledger's snapshot was done", though the
/// snapshot had long been taken (it was given up unread whenever a signal had come).
#[test]
fn a_run_cancelled_while_the_agent_works_lists_what_it_changed() {
    let fake = Fake::new(json!([
        steps::init(),
        steps::touch("../made.txt"),
        steps::sleep(300.0),
        steps::result_ok("never"),
    ]));
    let running = fake.coder().args(["--kill-grace", "0.2", "task"]).spawn();
    common::wait_for_path(&fake.workspace().join("made.txt"), Duration::from_secs(30));
    running.signal(nix::sys::signal::Signal::SIGINT);
    let out = running.wait();
    out.assert_failure("cancelled", 130);
    let listed = out.envelope["changes"]["files"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f["path"] == "made.txt" && f["status"] == "added");
    assert!(listed, "{}", out.explain());
    assert!(out.envelope["warnings"].is_null(), "{}", out.explain());
}

/// The file tools of `coder fs` and `coder mcp` refuse a base a confined run refuses as its
/// workspace (`/`, the home directory) and one holding coder's state directory: with
/// `--base` at the home directory (where an MCP host may start `coder mcp`, whose base
/// defaults to the current directory) a model's `read-file` read the CLI's login copy in
/// the state directory and `create-file` wrote beside the session histories.
#[test]
fn file_tools_refuse_a_base_holding_keys_or_coder_state() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let state = home.join(".local/state/coder");
    std::fs::create_dir_all(state.join("claude")).unwrap();
    std::fs::write(state.join("claude/.credentials.json"), "{\"k\": \"v\"}\n").unwrap();
    let project = root.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let fs_at = |base: &Path, payload: &str| {
        let out = Command::new(common::CODER)
            .args(["fs", "read-file", "--base"])
            .arg(base)
            .arg(payload)
            .env("HOME", &home)
            .env("CODER_STATE_DIR", &state)
            .stdin(std::process::Stdio::null())
            .output_bounded();
        let answer: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        (out.status.code(), answer)
    };
    let (code, answer) = fs_at(
        &home,
        r#"{"path": ".local/state/coder/claude/.credentials.json"}"#,
    );
    assert_eq!(code, Some(1), "{answer}");
    assert_eq!(answer["code"], "C210", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("is the home directory")),
        "{answer}"
    );
    let (code, answer) = fs_at(Path::new("/"), r#"{"path": "etc/hostname"}"#);
    assert_eq!(
        (code, &answer["code"]),
        (Some(1), &json!("C210")),
        "{answer}"
    );
    // A state directory elsewhere, in a project folder: that folder is refused too.
    std::fs::create_dir_all(project.join("state")).unwrap();
    let out = Command::new(common::CODER)
        .args(["fs", "list-folder", "--base"])
        .arg(&project)
        .arg("{}")
        .env("HOME", &home)
        .env("CODER_STATE_DIR", project.join("state"))
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("holds coder's state directory")),
        "{answer}"
    );
    // `coder mcp` started from the home directory (its default base) says to pass --base.
    let out = Command::new(common::CODER)
        .arg("mcp")
        .current_dir(&home)
        .env("HOME", &home)
        .env("CODER_STATE_DIR", &state)
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("is the home directory") && stderr.contains("pass --base"),
        "{stderr}"
    );
}

/// `CODER_STORE_OPTIONAL=1` (the usual way to switch a variable on) makes a run go on
/// without an unreachable store, as `--store-optional` does; it was refused as "invalid
/// value '1' for '--store-optional' [possible values: true, false]", naming a flag the user
/// had not given.
#[test]
fn store_optional_from_the_environment_takes_1() {
    let fake = Fake::new(json!(steps::answer("done")));
    let not_a_database = fake.root().join("a-directory");
    std::fs::create_dir_all(&not_a_database).unwrap();
    for on in ["1", "yes"] {
        let out = fake
            .coder()
            .arg("--store")
            .arg(&not_a_database)
            .env("CODER_STORE_OPTIONAL", on)
            .arg("task")
            .run();
        out.assert_success("done");
        assert!(
            out.envelope["warnings"]
                .to_string()
                .contains("(--store-optional)"),
            "{on}: {}",
            out.explain()
        );
    }
    let out = fake
        .coder()
        .arg("--store")
        .arg(&not_a_database)
        .env("CODER_STORE_OPTIONAL", "0")
        .arg("task")
        .run();
    out.assert_failure("config_error", 78);
}

/// `coder doctor --json` and `coder runs … --json` with a mistake in their arguments answer
/// with a `config_error` envelope on stdout (exit 2), as `coder route … --json` does: a
/// program reading their JSON got clap's text on stderr and nothing on stdout.
#[test]
fn doctor_and_runs_json_usage_errors_are_envelopes() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &["doctor", "--json", "--connect-timeout", "0"][..],
            "invalid value '0' for '--connect-timeout <SECS>'",
        ),
        (
            &["runs", "list", "--json", "--limit", "0"][..],
            "invalid value '0' for '--limit <LIMIT>'",
        ),
        (&["runs", "show", "--json"][..], "<RUN>"),
    ] {
        assert_config_error_envelope(args, &tmp.path().join("state"), says, 2);
    }
}

/// `coder ARGS` with `CODER_STATE_DIR=state` prints a `config_error` envelope on stdout
/// whose `error` holds `says`, and exits `code`.
fn assert_config_error_envelope(args: &[&str], state: &std::path::Path, says: &str, code: i32) {
    let out = Command::new(common::CODER)
        .args(args)
        .env("CODER_STATE_DIR", state)
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let envelope: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{args:?}: stdout is no JSON ({e}): {stdout:?}"));
    assert_eq!(out.status.code(), Some(code), "{args:?}: {envelope}");
    assert_eq!(envelope["error_kind"], "config_error", "{envelope}");
    assert!(
        envelope["error"].as_str().is_some_and(|e| e.contains(says)),
        "{args:?}: {envelope}"
    );
}

/// `runs show|list --json` that cannot answer (no such run, a state directory that is a
/// file) print the reason as a `config_error` envelope on stdout, as their argument
/// mistakes do: they printed a line on stderr and nothing on stdout, which a script
/// that asked for JSON reads as a broken tool.
#[test]
fn runs_json_failures_are_envelopes() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let file = file.to_str().unwrap();
    for (args, says, code) in [
        (
            &["runs", "show", "nosuchrun", "--json"][..],
            "no run matches \"nosuchrun\"",
            1,
        ),
        (
            &["runs", "list", "--json", "--state-dir", file][..],
            "not a directory",
            78,
        ),
    ] {
        assert_config_error_envelope(args, &tmp.path().join("state"), says, code);
    }
    // Without --json: the line on stderr, as before.
    let out = Command::new(common::CODER)
        .args(["runs", "show", "nosuchrun"])
        .env("CODER_STATE_DIR", tmp.path().join("state"))
        .stdin(std::process::Stdio::null())
        .output_bounded();
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run matches"));
    assert_eq!(out.status.code(), Some(1));
}

/// `--worktree --sandbox danger-full-access` warns about no flag the user did not give: the
/// read grants a confined agent needs for the checkout's git dir were added to the user's
/// `--read` list, and the run warned "--read had no effect".
#[test]
fn an_unconfined_worktree_run_names_no_flag_it_was_not_given() {
    let fake = Fake::new(json!(steps::answer("done")));
    common::git_init_with_a_commit(fake.workspace());
    let out = fake
        .coder()
        .args(["--worktree", "--sandbox", "danger-full-access", "task"])
        .run();
    out.assert_success("done");
    assert!(
        out.envelope["worktree"]["branch"].is_string(),
        "{}",
        out.explain()
    );
    assert!(out.envelope["warnings"].is_null(), "{}", out.explain());
}

/// `"scope": []` in a `--request` JSON (a caller's generated list of allowed paths that came
/// out empty) is a `config_error`: it was taken as no scope at all, and the run could
/// change anything without a `scope_violation`.
#[test]
fn an_empty_scope_list_in_a_request_is_refused() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let out = fake
        .coder()
        .args(["--request", "-"])
        .stdin(json!({"PROMPT": "task", "scope": []}).to_string())
        .run();
    out.assert_failure("config_error", 78);
    assert!(
        out.envelope["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("\"scope\" in the --request JSON is an empty list")),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}

/// `coder runs show PREFIX` with a prefix of several runs' ids says so and asks for more of
/// the id: it said "no run matches", as if there were none.
#[test]
fn runs_show_of_a_shared_prefix_says_it_is_ambiguous() {
    let fake = Fake::new(json!(steps::answer("done")));
    for _ in 0..2 {
        fake.coder().arg("task").run().assert_success("done");
    }
    let ids: Vec<String> = std::fs::read_dir(fake.state_dir().join("runs"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".jsonl")
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    // The ids start with the run's UTC date: "2" is a prefix of both.
    let out = Command::new(common::CODER)
        .args(["runs", "show", "2"])
        .env("CODER_STATE_DIR", fake.state_dir())
        .stdin(std::process::Stdio::null())
        .output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("2 runs in")
            && stderr.contains("start with \"2\"; give more of the run id"),
        "{stderr}"
    );
}

/// A `--verify` command longer than the kernel passes in one argument (128 KiB) is a
/// `config_error` naming the way out: it could never start, yet the agent ran, and its
/// repair turn was asked to fix "Argument list too long" with the whole command in its
/// prompt.
#[test]
fn a_verify_command_too_long_to_start_is_refused_up_front() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let command = format!("echo {}", "x".repeat(200_000));
    let out = fake
        .coder()
        .args(["--request", "-"])
        .stdin(json!({"PROMPT": "task", "verify": command}).to_string())
        .run();
    out.assert_failure("config_error", 78);
    assert!(
        out.envelope["error"].as_str().is_some_and(|e| e
            .starts_with("\"verify\" in the --request JSON is 200005 bytes")
            && e.contains("put the check in a script")),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}

/// A value of a `--request` JSON is named as its field, not as a flag the caller never
/// gave (`"repair_turns": 3` without `verify` said "--repair-turns needs --verify CMD");
/// a flag on the command line is still named as the flag.
#[test]
fn request_fields_are_named_as_fields_and_flags_as_flags() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let cases = [
        (
            json!({"PROMPT": "task", "repair_turns": 3}),
            &[][..],
            "\"repair_turns\" in the --request JSON needs --verify CMD",
        ),
        (
            json!({"PROMPT": "task", "verify": "true", "repair_turns": 11}),
            &[][..],
            "\"repair_turns\" in the --request JSON must be a whole number from 0 to 10",
        ),
        (
            json!({"PROMPT": "task", "verify": "true", "verify_timeout": 1e300}),
            &[][..],
            "\"verify_timeout\" in the --request JSON is too large",
        ),
        (
            json!({"PROMPT": "task", "answers": []}),
            &[][..],
            "\"answers\" in the --request JSON is an empty list",
        ),
        (
            json!({"PROMPT": "task", "answers": ["blue"],
                   "SESSION_ID": "3f0c0c8e-1111-4222-8333-444455556666"}),
            &[][..],
            "\"answers\" in the --request JSON: session 3f0c0c8e-1111-4222-8333-444455556666 \
             has no open questions",
        ),
        (
            json!({"PROMPT": "task", "verify": "true"}),
            &["--repair-turns", "11"][..],
            "--repair-turns must be a whole number from 0 to 10",
        ),
    ];
    for (request, flags, says) in cases {
        let out = fake
            .coder()
            .args(["--request", "-"])
            .args(flags)
            .stdin(request.to_string())
            .run();
        out.assert_failure("config_error", 78);
        assert!(
            out.envelope["error"]
                .as_str()
                .is_some_and(|e| e.starts_with(says)),
            "{request}: {}",
            out.explain()
        );
    }
    assert!(!fake.has_record(), "the child ran");
}

/// A non-UTF-8 argument of `coder fs`, `coder prompt` and `coder route explain` is named
/// (clap said "invalid UTF-8 was detected in one or more arguments", whichever it was).
#[test]
fn a_non_utf8_argument_of_a_subcommand_is_named() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"fix \xff it");
    let state = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["fs", "read-file", "--base", "."],
            "coder fs: the JSON argument",
        ),
        (&["prompt"], "coder prompt: the PROMPT argument"),
        (
            &["prompt", "--target"],
            "coder prompt: the value \"fix \u{fffd} it\" of --target",
        ),
        (
            &["route", "explain"],
            "coder route explain: the PROMPT argument",
        ),
        (
            &["route", "explain", "--target"],
            "coder route explain: the value \"fix \u{fffd} it\" of --target",
        ),
    ];
    for (args, says) in cases {
        let out = Command::new(common::CODER)
            .args(args)
            .arg(bad)
            .env("CODER_STATE_DIR", state.path())
            .stdin(std::process::Stdio::null())
            .output_bounded();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(says) && stderr.contains("is not valid UTF-8"),
            "{args:?}: {stderr}"
        );
    }
}

/// A `--store` that cannot be a store says what it is and what to do: a directory was
/// "unable to open database file", a refused PostgreSQL connection "error connecting to
/// server" (its cause left out), and any file that is not a database, `/etc/passwd`
/// included, was to be "moved away".
#[test]
fn a_store_that_cannot_be_used_says_why() {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database\n".repeat(100)).unwrap();
    let refused = "postgres://coder@127.0.0.1:1/coder";
    let cases = [
        (
            dir.path().display().to_string(),
            format!(
                "it is a directory; name a database file, such as {}",
                dir.path().join("coder.db").display()
            ),
        ),
        (
            refused.to_owned(),
            "error connecting to server: Connection refused".to_owned(),
        ),
        (
            text.display().to_string(),
            "point --store at another file (coder creates a new store where none exists)"
                .to_owned(),
        ),
    ];
    for (store, says) in cases {
        let out = Command::new(common::CODER)
            .args(["route", "stats", "--store", &store])
            .env("CODER_STATE_DIR", state.path())
            .stdin(std::process::Stdio::null())
            .output_bounded();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{store}: {stderr}");
        assert!(stderr.contains(&says), "{store}: {stderr}");
    }
}

/// Empty arguments say they are empty: `coder fs VERB --base DIR ''` said "payload is not
/// JSON: EOF while parsing a value at line 1 column 0", and `coder runs show ''` "no run
/// matches \"\"".
#[test]
fn empty_fs_payload_and_run_id_say_they_are_empty() {
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(common::CODER)
        .args(["fs", "read-file", "--base"])
        .arg(state.path())
        .arg(" ")
        .env("CODER_STATE_DIR", state.path().join("state"))
        .output_bounded();
    assert_eq!(out.status.code(), Some(1));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(error["code"], "C210");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("the JSON payload is empty")),
        "{error}"
    );
    std::fs::create_dir_all(state.path().join("state/runs")).unwrap();
    let out = Command::new(common::CODER)
        .args(["runs", "show", ""])
        .env("CODER_STATE_DIR", state.path().join("state"))
        .output_bounded();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("coder runs show: RUN is empty"),
        "{out:?}"
    );
    // A --base of coder fs and coder mcp that does not exist: the same.
    let out = Command::new(common::CODER)
        .args(["fs", "read-file", "--base"])
        .arg(state.path().join("nowhere"))
        .arg(r#"{"path": "a"}"#)
        .output_bounded();
    assert_eq!(out.status.code(), Some(1));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        error["message"],
        format!(
            "--base {}: no such directory; give an existing folder",
            state.path().join("nowhere").display()
        )
    );
    let out = Command::new(common::CODER)
        .args(["mcp", "--base"])
        .arg(state.path().join("nowhere"))
        .stdin(std::process::Stdio::null())
        .output_bounded();
    assert_eq!(out.status.code(), Some(78));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with(&format!(
            "coder mcp: --base {}: no such directory",
            state.path().join("nowhere").display()
        )),
        "{out:?}"
    );
    // A --state-dir that does not exist: said in words, not "(os error 2)".
    let missing = state.path().join("nowhere");
    let out = Command::new(common::CODER)
        .args(["runs", "list", "--state-dir"])
        .arg(&missing)
        .output_bounded();
    assert_eq!(out.status.code(), Some(78));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "coder runs: --state-dir {}: no such directory; pass coder's state directory \
             (where its runs/ are)",
            missing.display()
        )
    );
}

/// A debug build run from a shell with a small stack (`ulimit -s 512`, as some CI images
/// set) overflowed it ("thread 'main' has overflowed its stack", SIGABRT, no envelope):
/// the run's futures are deep and their frames large. A run and a plan, with the real CLI
/// against the replay backend, now end in their envelopes.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_small_stack_limit_does_not_overflow_a_run() {
    let small = ["sh", "-c", "ulimit -s 512 && exec \"$@\"", "sh"];
    let scene = common::ReplayScene::new("plain.json", 0);
    let out = scene
        .coder_within(Duration::from_secs(120))
        .through(small)
        .arg("say hi")
        .run();
    out.assert_success("Hello from the replay cassette.");
    let scene = common::ReplayScene::new("plan_answer_only.json", 0);
    let out = scene
        .fake
        .coder()
        .no_cd()
        .no_claude_bin()
        .through(small)
        .arg("plan")
        .arg("--cd")
        .arg(scene.workspace())
        .arg("--claude-bin")
        .arg(&scene.claude)
        .arg("--config")
        .arg(&scene.config)
        .args(["--backend", "e2e", "plan it"])
        .deadline(Duration::from_secs(120))
        .run();
    assert_eq!(out.envelope["success"], true, "{}", out.explain());
}

/// clap's tips sent the user the wrong way: `coder route forget --json` said "to pass
/// '--json' as a value, use '-- --json'" (forget takes a backend name, not a task), `coder
/// prompt --cd` offered the look-alike `--codex` (and showed it in the usage line), and
/// `coder --cd ws runs list` read `runs` as the task ("put it in quotes"). They now name
/// where the flag belongs, and say that a subcommand comes first. `route forget --json`
/// named only `route stats` (explain reads its `--json` outside clap), and `route explain
/// --jsn` offered the run's `--json_schema`.
#[test]
fn usage_tips_name_where_a_flag_or_subcommand_belongs() {
    let state = tempfile::tempdir().unwrap();
    let coder = |args: &[&str]| {
        let out = Command::new(common::CODER)
            .args(args)
            .env("CODER_STATE_DIR", state.path())
            .stdin(std::process::Stdio::null())
            .output_bounded();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (stdout, stderr)
    };
    let error = |stdout: &str| {
        let envelope: serde_json::Value = serde_json::from_str(stdout).unwrap();
        assert_eq!(envelope["error_kind"], "config_error", "{envelope}");
        envelope["error"].as_str().unwrap_or_default().to_owned()
    };
    let (stdout, _) = coder(&["route", "forget", "--json"]);
    let said = error(&stdout);
    assert!(
        said.contains(
            "--json is an option of coder route stats and coder route explain, not of coder \
             route forget"
        ) && !said.contains("-- --json"),
        "{said}"
    );
    // explain takes --json outside clap: a look-alike of it is offered as --json, not as
    // the run's --json_schema (nor shown as given in the usage line).
    let (_, stderr) = coder(&["route", "explain", "--jsn"]);
    assert!(
        stderr.contains("a similar argument exists: '--json'")
            && stderr.contains("Usage: coder route explain [OPTIONS] [PROMPT]")
            && !stderr.contains("json_schema")
            && !stderr.contains("json-schema"),
        "{stderr}"
    );
    let said = error(&coder(&["route", "explain", "--jsn", "--json"]).0);
    assert!(
        said.contains("a similar argument exists: '--json'"),
        "{said}"
    );
    let (_, stderr) = coder(&["prompt", "--cd", "ws", "task"]);
    assert!(
        stderr
            .contains("--cd is an option of a run (coder --cd DIR \"task\"), not of coder prompt")
            && !stderr.contains("--codex"),
        "{stderr}"
    );
    // A real look-alike is still offered.
    let (_, stderr) = coder(&["prompt", "--codx", "x", "task"]);
    assert!(
        stderr.contains("a similar argument exists: '--codex'"),
        "{stderr}"
    );
    let ws = state.path().to_str().unwrap();
    for (args, sub) in [
        (&["--cd", ws, "runs", "list"][..], "runs"),
        (&["--cd", ws, "plan", "the task"][..], "plan"),
    ] {
        let said = error(&coder(args).0);
        assert!(
            said.contains(&format!(
                "'{sub}' is a subcommand: name it first, before any option: coder {sub} …"
            )) && said.ends_with(&format!("(see coder {sub} --help)"))
                && !said.contains("put it in quotes"),
            "{said}"
        );
    }
}

/// A `--request` file that is missing or a directory is named in words, not as the raw
/// OS error ("No such file or directory (os error 2)", "Is a directory (os error 21)").
#[test]
fn a_request_file_that_cannot_be_read_says_why_in_words() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, why) in [
        ("missing.json", "no such file"),
        (
            ".",
            "it is a directory; name the JSON file (or - for stdin)",
        ),
    ] {
        let path = tmp.path().join(name);
        let out = Command::new(common::CODER)
            .arg("--request")
            .arg(&path)
            .env("CODER_STATE_DIR", tmp.path())
            .stdin(std::process::Stdio::null())
            .output_bounded();
        assert_eq!(out.status.code(), Some(78), "{out:?}");
        let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            envelope["error"],
            format!("cannot read --request file {}: {why}", path.display()),
            "{envelope}"
        );
    }
}

/// `coder runs list -n -1` read `-1` as an unknown flag ("unexpected argument '-1'
/// found"); a negative count is now named as the value of `--limit` that is out of range.
#[test]
fn a_negative_runs_limit_is_named_as_the_limit() {
    let state = tempfile::tempdir().unwrap();
    for args in [
        &["runs", "list", "-n", "-1"][..],
        &["runs", "list", "--limit", "-1", "--json"],
    ] {
        let out = Command::new(common::CODER)
            .args(args)
            .env("CODER_STATE_DIR", state.path())
            .output_bounded();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            said.contains("invalid value '-1' for '--limit <LIMIT>': -1 is not in 1..="),
            "{args:?}: {said}"
        );
    }
}

/// `coder --cd ws runs` started a real run with the task "runs": a task that is exactly a
/// subcommand's name (or `help`), after the run's flags, is refused with a tip that says the
/// subcommand comes first and how to run that task all the same (`--`, `--prompt`).
#[test]
fn a_task_that_is_a_subcommand_name_is_refused_with_a_tip() {
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path().to_str().unwrap();
    let coder = |args: &[&str]| {
        let out = Command::new(common::CODER)
            .args(args)
            .env("CODER_STATE_DIR", state.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env_remove("CLAUDE_CODE_OAUTH_TOKEN")
            .stdin(std::process::Stdio::null())
            .output_bounded();
        let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            out.status.code(),
            envelope["error"].as_str().unwrap_or("").to_owned(),
        )
    };
    for sub in ["runs", "route", "doctor"] {
        let (code, said) = coder(&["--cd", ws, sub]);
        assert_eq!(code, Some(2), "{said}");
        assert!(
            said.contains(&format!(
                "'{sub}' is a subcommand: name it first, before any option: coder {sub} …"
            )) && said.contains(&format!("put -- before it (coder --cd DIR -- {sub})"))
                && said.contains(&format!("--prompt {sub}")),
            "{said}"
        );
    }
    let (code, said) = coder(&["--cd", ws, "help"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("'help' is a subcommand (see coder help [SUBCOMMAND] or coder --help)")
            && said.contains("put -- before it (coder --cd DIR -- help)"),
        "{said}"
    );
    // The ways out the tip names are taken as the task (here they stop at the missing key).
    for args in [
        &["--cd", ws, "--", "runs"][..],
        &["--cd", ws, "--prompt", "runs"],
    ] {
        let (code, said) = coder(args);
        assert_eq!(code, Some(78), "{args:?}: {said}");
        assert!(said.contains("has no credentials"), "{args:?}: {said}");
    }
}

/// A worktree base from a `--request` file that names no commit was reported as
/// `--worktree-base "nope"`, a flag the caller never wrote; it is named as the request's
/// field now (and as the flag when the flag gave it). So is `worktree` outside a
/// repository.
#[test]
fn a_request_files_worktree_keys_are_named_as_its_fields() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    common::git_init_with_a_commit(fake.workspace());
    let request = fake.root().join("job.json");
    let job = json!({"PROMPT": "x", "cd": fake.workspace(), "worktree": true,
                     "worktree_base": "nope"});
    std::fs::write(&request, job.to_string()).unwrap();
    let from_file = fake.coder().no_cd().arg("--request").arg(&request).run();
    from_file.assert_failure("config_error", 78);
    assert_eq!(
        from_file.envelope["error"],
        r#""worktree_base": "nope" in the --request JSON names no commit in the repository"#,
        "{}",
        from_file.explain()
    );
    let by_flag = fake
        .coder()
        .no_cd()
        .args(["--worktree", "--worktree-base", "nope", "--request"])
        .arg(&request)
        .run();
    by_flag.assert_failure("config_error", 78);
    assert_eq!(
        by_flag.envelope["error"],
        r#"--worktree-base "nope" names no commit in the repository"#,
        "{}",
        by_flag.explain()
    );
    let plain = fake.root().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(
        &request,
        json!({"PROMPT": "x", "cd": plain, "worktree": true}).to_string(),
    )
    .unwrap();
    let outside = fake.coder().no_cd().arg("--request").arg(&request).run();
    outside.assert_failure("config_error", 78);
    let error = outside.envelope["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(r#""worktree" in the --request JSON: "#)
            && error.ends_with("is not inside a git work tree"),
        "{}",
        outside.explain()
    );
}

/// A config file value of the wrong type names its key and table and what the key takes:
/// serde's words named Rust's types ("expected u32", "expected struct RawProfile") and no
/// key, so the user had to count lines and guess what "u32" meant.
#[test]
fn a_config_value_of_the_wrong_type_names_its_key_in_words() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let config = fake.root().join("coder.toml");
    for (text, said) in [
        (
            "[backends.glm]\nmax_concurrent = \"two\"\n",
            "line 2: max_concurrent in [backends.glm] must be a whole number, 0 or more (got \
             string \"two\")",
        ),
        (
            "[backends]\nglm = 5\n",
            "line 2: glm in [backends] must be a table (got integer `5`)",
        ),
        (
            "deny = [\"*.pem\", 5]\n",
            "line 1: each item of deny must be a string (got integer `5`)",
        ),
        (
            "pass_env = \"HOME\"\n",
            "line 1: pass_env must be a list (got string \"HOME\")",
        ),
        (
            "[backends.glm]\nprovider = \"nope\"\n",
            "line 2: provider in [backends.glm] must be one of \"anthropic\", \"zai\", \
             \"deepseek\", \"minimax\", \"other\" (got \"nope\")",
        ),
        // A misspelt key: serde listed the table's 23 keys as "unknown field `…`, expected
        // one of `description`, …".
        (
            "[backends.glm]\nmax_concurent = 2\n",
            "line 2: unknown key \"max_concurent\" in [backends.glm]: did you mean \
             \"max_concurrent\"?",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = fake.coder().arg("--config").arg(&config).arg("task").run();
        out.assert_failure("config_error", 78);
        let expected = format!("config file {}, {said}", config.display());
        assert_eq!(out.envelope["error"], json!(expected), "{}", out.explain());
    }
    assert!(!fake.has_record(), "the child ran");
}

/// A relative `CODER_STATE_DIR` is refused naming it: it was ignored as the XDG variables'
/// relative values are, and the state (transcripts, sessions) went to the home directory
/// while the user looked for it where the variable said.
#[test]
fn a_relative_state_dir_is_refused_not_ignored() {
    let fake = Fake::new(json!(steps::answer("done")));
    let home = fake.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = fake
        .coder()
        .env("CODER_STATE_DIR", "state")
        .env("HOME", &home)
        .env_remove("XDG_STATE_HOME")
        .arg("task")
        .run();
    out.assert_failure("config_error", 78);
    assert!(
        out.envelope["error"]
            .as_str()
            .unwrap()
            .starts_with("CODER_STATE_DIR=\"state\" is a relative path: set it to an absolute one"),
        "{}",
        out.explain()
    );
    assert!(!home.join(".local").exists(), "the state went to the home");
    assert!(!fake.has_record(), "the child ran");
    // `coder runs` says the same.
    let runs = std::process::Command::new(common::CODER)
        .args(["runs", "list"])
        .env("CODER_STATE_DIR", "state")
        .env("HOME", &home)
        .output_bounded();
    assert_eq!(runs.status.code(), Some(78), "{runs:?}");
    assert!(
        String::from_utf8_lossy(&runs.stderr)
            .contains("CODER_STATE_DIR=\"state\" is a relative path"),
        "{runs:?}"
    );
    // `coder sandbox` too, with the run mode's exit code for it (78; it was 71, "the
    // sandbox cannot be set up", for a state directory that cannot be placed).
    let sandbox = std::process::Command::new(common::CODER)
        .args(["sandbox", "--cd"])
        .arg(fake.workspace())
        .args(["--", "true"])
        .env("CODER_STATE_DIR", "state")
        .env("HOME", &home)
        .output_bounded();
    assert_eq!(sandbox.status.code(), Some(78), "{sandbox:?}");
    assert!(
        String::from_utf8_lossy(&sandbox.stderr)
            .contains("CODER_STATE_DIR=\"state\" is a relative path"),
        "{sandbox:?}"
    );
}

/// An unknown backend a user did not type says where it came from: the config file's
/// `default_backend` (with its line) or `CODER_BACKEND`. The message was the one of a
/// mistyped `--backend`, and a user who gave no `--backend` had nothing to look for.
#[test]
fn an_unknown_backend_not_typed_says_where_it_came_from() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let config = fake.root().join("coder.toml");
    std::fs::write(&config, "\ndefault_backend = \"glmm\"\n").unwrap();
    let out = fake.coder().arg("--config").arg(&config).arg("task").run();
    out.assert_failure("config_error", 78);
    let expected = format!(
        "unknown backend 'glmm' (the default_backend of config file {}, line 2) (did you mean \
         'glm'?); known backends: ",
        config.display()
    );
    let error = out.envelope["error_detail"]["message"].as_str().unwrap();
    assert!(error.starts_with(&expected), "{}", out.explain());
    let out = fake.coder().env("CODER_BACKEND", "glmm").arg("task").run();
    out.assert_failure("config_error", 78);
    let error = out.envelope["error_detail"]["message"].as_str().unwrap();
    assert!(
        error.starts_with(
            "unknown backend 'glmm' (CODER_BACKEND is set to it) (did you mean 'glm'?); known \
             backends: "
        ),
        "{}",
        out.explain()
    );
    // A typed one says only what it likely means; a name near none, nothing.
    let out = fake.coder().args(["--backend", "glmm", "task"]).run();
    let error = out.envelope["error_detail"]["message"].as_str().unwrap();
    assert!(
        error.starts_with("unknown backend 'glmm' (did you mean 'glm'?); known backends: "),
        "{}",
        out.explain()
    );
    let out = fake.coder().args(["--backend", "zzz", "task"]).run();
    let error = out.envelope["error_detail"]["message"].as_str().unwrap();
    assert!(
        error.starts_with("unknown backend 'zzz'; known backends: "),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}

/// A `--store` URL that names no store (`ftp://…`) is a mistake in the arguments and is
/// reported before a missing key, as README says of argument mistakes: the user who set
/// the key met it only then, one run later.
#[test]
fn a_bad_store_url_is_reported_before_a_missing_key() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let out = fake
        .coder()
        .env_remove("ZAI_API_KEY")
        .args([
            "--backend",
            "glm",
            "--store",
            "ftp://db.example/coder",
            "task",
        ])
        .run();
    out.assert_failure("config_error", 78);
    assert!(
        out.envelope["error"]
            .as_str()
            .unwrap()
            .starts_with("bad store URL: unsupported store scheme 'ftp://'"),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}

/// A `--request` key that is one of the run's flags (`backend`, `model`, `deny`: the
/// MCP tool takes `backend`, so a request file is written with it) is named as the flag
/// to give beside `--request`; it was "no key of the --request JSON" followed by the list
/// of keys, once for each such key, and the envelope's `error` was cut inside the first
/// list. Keys that are just unknown get the list once.
#[test]
fn a_request_key_that_is_a_flag_is_named_as_the_flag() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let body = json!({"PROMPT": "task", "backend": "glm", "zzz": 1, "base-url": "u", "qqq": 2});
    let out = fake
        .coder()
        .args(["--request", "-"])
        .stdin(body.to_string())
        .run();
    out.assert_failure("config_error", 78);
    let message = out.envelope["error_detail"]["message"].as_str().unwrap();
    let parts: Vec<&str> = message
        .strip_prefix("the --request JSON in stdin has 4 problems: ")
        .unwrap_or_else(|| panic!("{}", out.explain()))
        .split("; ")
        .collect();
    assert_eq!(
        parts[0],
        "\"backend\" is a flag, not a key of the --request JSON: give --backend beside \
         --request",
        "{message}"
    );
    assert!(
        parts[1].starts_with("\"zzz\" is no key of the --request JSON (its keys: PROMPT, "),
        "{message}"
    );
    assert_eq!(
        parts[2],
        "\"base-url\" is a flag, not a key of the --request JSON: give --base-url beside \
         --request",
        "{message}"
    );
    assert_eq!(
        parts[3], "\"qqq\" is no key of the --request JSON",
        "{message}"
    );
    // What the envelope's short `error` keeps names what to do about the first key.
    let error = out.envelope["error"].as_str().unwrap();
    assert!(error.contains("give --backend beside --request"), "{error}");
    assert!(!fake.has_record(), "the child ran");
}

/// A key the vendor rejects (401), the usual first run with a new key: the hint names the
/// variable the key came from, where it was sent and the doctor command for that backend.
/// It said "check the backend's API key variable and base URL (coder doctor)", naming
/// neither, and `coder doctor` alone checks the default backend.
#[test]
fn a_rejected_key_is_named_with_where_it_went() {
    let fake = Fake::new(json!([
        {"step": "init"},
        {"step": "result", "is_error": true, "api_error_status": 401,
         "text": "API Error: 401 {\"error\":{\"message\":\"token expired or incorrect\"}}"},
    ]));
    let config = fake.root().join("coder.toml");
    std::fs::write(
        &config,
        "[backends.work]\npreset = \"glm\"\nkey_env = \"WORK_GLM_KEY\"\n",
    )
    .unwrap();
    let out = fake
        .coder()
        .arg("--config")
        .arg(&config)
        .env("WORK_GLM_KEY", "k3y-not-a-real-one-0123456789")
        .args(["--backend", "work", "task"])
        .run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["provider_error"]["class"], "auth_error");
    assert_eq!(
        detail["hint"],
        "backend 'work' sent the key in $WORK_GLM_KEY to https://api.z.ai/api/anthropic, and \
         the vendor refused it: check that it is this vendor's key, valid, and for this base \
         URL (coder doctor --backend work); a 401 is never retried",
        "{}",
        out.explain()
    );
}

/// `--cd /tmp` with coder's state directory under /tmp is refused (the agent could write
/// it), and the refusal says why: the workspace reaches it. It said the state directory
/// "lies under /tmp, which --allow-tmp gives the agent", and to drop a flag the user had
/// not given. With --allow-tmp and another workspace, that is what it says.
#[test]
fn a_workspace_holding_the_state_directory_is_named_not_allow_tmp() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let own = tempfile::Builder::new()
        .prefix("coder-test-state-")
        .tempdir_in("/tmp")
        .unwrap();
    let state = own.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let state = std::fs::canonicalize(&state).unwrap();
    let refusal = |coder: Coder| {
        let out = coder.env("CODER_STATE_DIR", &state).arg("task").run();
        out.assert_failure("config_error", 78);
        out.envelope["error"].as_str().unwrap().to_owned()
    };
    let error = refusal(fake.coder().cd("/tmp"));
    assert_eq!(
        error,
        format!(
            "coder's state directory {}: the agent may write /tmp (the workspace, a --write \
             path or a writable cache), which reaches it: it could unlock the placeholders \
             other runs rely on and read their transcripts; set CODER_STATE_DIR elsewhere or \
             narrow the grant",
            state.display()
        )
    );
    let error = refusal(fake.coder().arg("--allow-tmp"));
    assert!(
        error.contains("it lies under /tmp, which --allow-tmp gives the agent"),
        "{error}"
    );
    // `coder sandbox` says the same.
    let out = Command::new(common::CODER)
        .args(["sandbox", "--cd", "/tmp", "--", "true"])
        .env("CODER_STATE_DIR", &state)
        .stdin(std::process::Stdio::null())
        .output_bounded();
    assert_eq!(out.status.code(), Some(78));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("the agent may write /tmp (the workspace") && !said.contains("--allow-tmp"),
        "{said}"
    );
    assert!(!fake.has_record(), "the child ran");
}

/// A `--verify` command the shell cannot find (a typo, a tool not installed in the
/// sandbox's view) failed as "the --verify check failed with exit code 127", which reads as
/// the project's tests failing. It now says what 127 with "not found" means, and the hint
/// gives the `coder sandbox` command that runs the check as the run did; that command,
/// pasted, shows the same. A check that exits 127 on its own says nothing more.
#[test]
fn a_check_the_shell_cannot_find_says_so() {
    let fake = Fake::new(json!(steps::answer("done")));
    let out = fake
        .coder()
        .args([
            "--verify",
            "nosuchcmd-xyz --all",
            "--repair-turns",
            "0",
            "task",
        ])
        .run();
    let detail = out.assert_failure("verify_failed", 3);
    assert_eq!(
        out.envelope["error"],
        "the --verify check failed with exit code 127: the shell did not find a command of it \
         (a typo, or a tool that is not installed or not on PATH inside the sandbox)",
        "{}",
        out.explain()
    );
    let hint = detail["hint"].as_str().unwrap_or_default();
    let command = hint.split('`').nth(1).unwrap_or_default();
    assert_eq!(
        command,
        format!(
            "coder sandbox --cd {} -- sh -c 'nosuchcmd-xyz --all'",
            fake.workspace().display()
        ),
        "{hint}"
    );
    let pasted = Command::new("sh")
        .args([
            "-c",
            &format!("coder() {{ \"$CODER\" \"$@\"; }}; {command}"),
        ])
        .env("CODER", common::CODER)
        .env("CODER_STATE_DIR", fake.state_dir())
        .stdin(std::process::Stdio::null())
        .output_bounded();
    assert_eq!(pasted.status.code(), Some(127), "{pasted:?}");
    assert!(
        String::from_utf8_lossy(&pasted.stderr).contains("nosuchcmd-xyz: not found"),
        "{pasted:?}"
    );
    // Its own exit code 127: no guess about the shell.
    let out = fake
        .coder()
        .args(["--verify", "exit 127", "--repair-turns", "0", "task"])
        .run();
    let detail = out.assert_failure("verify_failed", 3);
    assert_eq!(
        out.envelope["error"],
        "the --verify check failed with exit code 127"
    );
    assert!(detail.get("hint").is_none(), "{detail}");
}

/// A tool config the agent made (`pkg/.envrc`, `pkg/.claude/settings.json`) is moved aside
/// by the end-of-run guard; `changes` listed it at the name the agent gave it, which no
/// longer existed, so a CI step that copied or committed `changes.files[].path` failed on
/// it (round thirty's note). Each such entry now says where the file is
/// (`quarantined_to`, relative to the workspace, a path that exists); other entries have
/// none, and `--return-diff` names it there too. In a plain workspace and in a git one.
#[test]
fn a_quarantined_change_says_where_the_file_is_now() {
    for git in [false, true] {
        let fake = Fake::new(json!([
            steps::init(),
            {"step": "touch", "path": "../pkg/.envrc", "text": "export X=1\n"},
            {"step": "touch", "path": "../pkg/.claude/settings.json", "text": "{}\n"},
            {"step": "touch", "path": "../pkg/b.txt", "text": "b\n"},
            steps::result_ok("done"),
        ]));
        if git {
            common::git_init_with_a_commit(fake.workspace());
        }
        let out = fake.coder().args(["--return-diff", "task"]).run();
        out.assert_success("done");
        let files = out.envelope["changes"]["files"].as_array().unwrap();
        // The diff names each moved file where it is now: applied elsewhere, it made the
        // agent's `.envrc` there.
        let diff = out.envelope["diff"]["unified"].as_str().unwrap_or_default();
        for (gone, now) in [
            (
                "+++ b/pkg/.envrc\n",
                "+++ b/pkg/.envrc.coder-quarantine-1\n",
            ),
            (
                "+++ b/pkg/.claude/settings.json\n",
                "+++ b/pkg/.claude.coder-quarantine-1/settings.json\n",
            ),
        ] {
            assert!(!diff.contains(gone), "git={git}: {gone} in {diff}");
            assert!(diff.contains(now), "git={git}: {now} not in {diff}");
        }
        assert!(diff.contains("+++ b/pkg/b.txt\n"), "git={git}: {diff}");
        let entry = |path: &str| {
            files
                .iter()
                .find(|f| f["path"] == path)
                .unwrap_or_else(|| panic!("git={git}: {path} listed: {}", out.explain()))
        };
        for (path, now) in [
            ("pkg/.envrc", "pkg/.envrc.coder-quarantine-1"),
            (
                "pkg/.claude/settings.json",
                "pkg/.claude.coder-quarantine-1/settings.json",
            ),
        ] {
            assert_eq!(
                entry(path)["quarantined_to"],
                now,
                "git={git}: {}",
                out.explain()
            );
            assert!(!fake.workspace().join(path).exists(), "git={git}: {path}");
            assert!(fake.workspace().join(now).exists(), "git={git}: {now}");
        }
        assert!(
            entry("pkg/b.txt").get("quarantined_to").is_none(),
            "git={git}"
        );
    }
}

/// The replay backend's notes of a cassette run out: a confined run's CLI sends its later
/// requests through coder's egress proxy, in absolute form, and the notes named the first
/// request as a path (`POST /v1/messages?beta=true`) and each later one as a whole URL
/// (`POST http://127.0.0.1:PORT/v1/messages?beta=true`), one warning per request, since
/// each message named its request number. They are now one warning, the path alone.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn an_exhausted_cassette_is_one_note_naming_the_path() {
    let scene = common::ReplayScene::new("plain.json", 2);
    let out = scene
        .coder_within(Duration::from_secs(120))
        .args(["--verify", "false", "--no-verify-baseline", "task"])
        .run();
    let notes: Vec<&str> = out.envelope["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str())
        .filter(|w| w.starts_with("replay: "))
        .collect();
    assert_eq!(notes.len(), 1, "{}", out.explain());
    let note = notes[0];
    assert!(
        note.starts_with("replay: requests ")
            && note.contains("(POST /v1/messages?beta=true, ")
            && note.ends_with("exhausted after 1 turns: no turn left to answer it")
            && !note.contains("http://"),
        "{note}"
    );
}

/// A CI job whose `HOME` is read-only (or not the job user's), with no `CODER_STATE_DIR`:
/// the run failed with "cannot create the claude config directory
/// $HOME/.local/state/coder/claude: Permission denied", which names neither coder's state
/// directory nor what places it. It now says the directory lies in coder's state
/// directory, placed by `HOME`, and to set `CODER_STATE_DIR`; set so, the run goes on.
#[test]
fn a_home_coder_cannot_write_says_to_set_the_state_dir() {
    let fake = Fake::new(json!(steps::answer("done")));
    chmod(fake.root(), 0o755);
    let home = fake.root().join("ro-home");
    std::fs::create_dir(&home).unwrap();
    chmod(&home, 0o555);
    let state = fake.root().join("job-state");
    std::fs::create_dir(&state).unwrap();
    let root = nix::unistd::geteuid().is_root();
    let job = |coder: Coder| {
        let coder = coder
            .env_remove("CODER_STATE_DIR")
            .env_remove("XDG_STATE_HOME")
            .env("HOME", &home)
            .arg("task");
        match root {
            // Permissions do not bind root: the job runs as uid 65534.
            true => coder.through([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]),
            false => coder,
        }
    };
    if root {
        for dir in [fake.workspace().to_path_buf(), state.clone()] {
            Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(&dir)
                .status_bounded();
        }
    }
    let out = job(fake.coder()).deadline(Duration::from_secs(30)).run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap();
    assert!(
        message.contains("Permission denied")
            && message.contains(
                "it lies in coder's state directory, placed by HOME ($HOME/.local/state/coder): \
                 set CODER_STATE_DIR to a private directory you can write"
            ),
        "{}",
        out.explain()
    );
    let out = job(fake.coder())
        .env("CODER_STATE_DIR", &state)
        .deadline(Duration::from_secs(30))
        .run();
    out.assert_success("done");
}

/// A check that hung until `--verify-timeout 0.5` stopped it: the resume hint's command
/// dropped the limit, so the resumed run, pasted from a CI log, waited the default ten
/// minutes on the same hang. The hint keeps a limit that is not the default; with the
/// default it names none.
#[test]
fn the_verify_hint_keeps_the_checks_own_limit() {
    let fake = Fake::new(json!(steps::answer("done")));
    let hint = |args: &[&str]| {
        let out = fake
            .coder()
            .args(args)
            .args(["--no-verify-baseline", "--repair-turns", "0", "task"])
            .run();
        let detail = out.assert_failure("verify_failed", 3);
        detail["resume_hint"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let hung = hint(&["--verify", "sleep 30", "--verify-timeout", "0.5"]);
    assert!(
        hung.contains("--verify 'sleep 30' --verify-timeout 0.5 \"the check still fails"),
        "{hung}"
    );
    let failed = hint(&["--verify", "false"]);
    assert!(
        failed.contains("--verify false \"the check") && !failed.contains("--verify-timeout"),
        "{failed}"
    );
}

/// A resume hint pasted from a CI log ran without the run's `--config` and `--claude-bin`:
/// the file's backend was unknown and a CLI not on `PATH` was not found. The hint names
/// both when the run was given them (the backend too, as before).
#[test]
fn a_resume_hint_keeps_the_config_file_and_the_claude_bin() {
    let fake = Fake::new(json!(steps::answer("done")));
    let config = fake.root().join("team config.toml");
    std::fs::write(&config, "[backends.work]\npreset = \"inherit\"\n").unwrap();
    let out = fake
        .coder()
        .arg("--config")
        .arg(&config)
        .args([
            "--backend",
            "work",
            "--verify",
            "false",
            "--no-verify-baseline",
        ])
        .args(["--repair-turns", "0", "task"])
        .run();
    let detail = out.assert_failure("verify_failed", 3);
    let hint = detail["resume_hint"].as_str().unwrap_or_default();
    for flag in [
        format!(" --config '{}'", config.display()),
        " --backend work".to_owned(),
        format!(" --claude-bin {}", fake.bin().display()),
    ] {
        assert!(hint.contains(&flag), "{flag:?} not in {hint}");
    }
}

/// A `--claude-bin` script whose interpreter is missing, as an npm-installed claude is in
/// a CI image without node: `#!/usr/bin/env node` exits 127 with env's "No such file or
/// directory" and was `subprocess_error` ("claude exited with code 127 without a result",
/// exit 1, retried with --max-retries), read as a crash of the CLI; a `#!` naming an
/// absent path failed "cannot execute X: No such file or directory", though X exists. Both
/// are now `command_not_found` (127), not retried, saying what is missing.
#[test]
fn a_claude_bin_whose_interpreter_is_missing_is_command_not_found() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let bin = fake.root().join("bin/node_modules/@coder-test/claude-code");
    let via_env = bin.join("claude-env");
    std::fs::write(&via_env, "#!/usr/bin/env coder-test-no-such-node\n").unwrap();
    let absent = bin.join("claude-abs");
    std::fs::write(&absent, "#!/no/such/node --flag\n").unwrap();
    for script in [&via_env, &absent] {
        chmod(script, 0o755);
    }
    for sandbox in ["workspace-write", "danger-full-access"] {
        let out = fake
            .coder()
            .claude_bin(&via_env)
            .args(["--sandbox", sandbox, "--max-retries", "2", "task"])
            .run();
        let detail = out.assert_failure("command_not_found", 127);
        assert_eq!(
            out.envelope["error"],
            "the claude CLI never started: its launcher did not find a program it starts \
             (exit 127)",
            "{sandbox}: {}",
            out.explain()
        );
        assert!(
            detail["hint"]
                .as_str()
                .unwrap_or_default()
                .contains("needs node on PATH")
                && out.envelope["attempts"].as_array().map(Vec::len) == Some(1),
            "{sandbox}: {}",
            out.explain()
        );
        let out = fake
            .coder()
            .claude_bin(&absent)
            .args(["--sandbox", sandbox, "task"])
            .run();
        out.assert_failure("command_not_found", 127);
        assert_eq!(
            out.envelope["error"],
            format!(
                "cannot execute {}: it is a script whose interpreter does not exist (its first \
                 line: #!/no/such/node --flag)",
                absent.display()
            ),
            "{sandbox}: {}",
            out.explain()
        );
    }
    assert!(!fake.has_record(), "the child ran");
}

/// `coder doctor` on a machine whose runs share a store it cannot reach: a run fails with
/// `config_error` ("cannot reach the store …"), but the doctor said `ok` (the reason only
/// in the `compat` line's parentheses), and refused `--store`, the flag the runs were
/// given. It takes `--store` and `--store-optional` (and `CODER_STORE`, as before) and
/// fails a `store` check, a warning with `--store-optional`, as a run would go on then.
#[test]
fn doctor_fails_a_store_a_run_cannot_open() {
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://coder@127.0.0.1:{port}/fleet");
    let (report, code) = doctor_json(tmp.path(), &["--store", &url]);
    let store = doctor_check(&report, "store");
    assert!(
        store["status"] == "fail"
            && store["summary"]
                .as_str()
                .unwrap_or_default()
                .starts_with(&format!("cannot reach the store {url}"))
            && store["hints"][0]
                .as_str()
                .unwrap_or_default()
                .contains("--store-optional")
            && code == Some(1),
        "{report}"
    );
    let (report, _) = doctor_json(tmp.path(), &["--store", &url, "--store-optional"]);
    assert_eq!(doctor_check(&report, "store")["status"], "warn", "{report}");
    // A run given the same store: the config_error the doctor foretold.
    let fake = Fake::new(json!(steps::answer("should not run")));
    let out = fake.coder().args(["--store", &url, "task"]).run();
    out.assert_failure("config_error", 78);
    // Unset, the default store is fine before any run made it.
    let (report, _) = doctor_json(tmp.path(), &[]);
    assert_eq!(doctor_check(&report, "store")["status"], "ok", "{report}");
}

/// `coder run --cd DIR "task"`, as other tools spell a run: "run" was taken as the task and
/// the real, quoted task refused as a stray word ("the task is one argument: put it in
/// quotes"); with the task on stdin, the run went ahead with the task "run" and stdin's
/// ignored. Both now say there is no run subcommand (exit 2), before anything starts; the
/// task "run" is still given after the options.
#[test]
fn a_run_subcommand_says_there_is_none() {
    let fake = Fake::new(json!(steps::answer("done")));
    let says = "coder has no run subcommand: a run is coder --cd DIR \"task\"";
    let out = fake
        .coder()
        .no_cd()
        .no_claude_bin()
        .arg("run")
        .arg("--cd")
        .arg(fake.workspace())
        .arg("--claude-bin")
        .arg(fake.bin())
        .arg("fix the failing test")
        .run();
    out.assert_failure("config_error", 2);
    assert!(
        out.envelope["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with(says),
        "{}",
        out.explain()
    );
    let out = fake
        .coder()
        .no_cd()
        .no_claude_bin()
        .arg("run")
        .arg("--cd")
        .arg(fake.workspace())
        .arg("--claude-bin")
        .arg(fake.bin())
        .stdin("fix the failing test")
        .run();
    out.assert_failure("config_error", 2);
    assert!(!fake.has_record(), "the child ran: {}", out.explain());
    fake.coder()
        .args(["--", "run"])
        .run()
        .assert_success("done");
}

/// `--return-diff` outside git (coder's own whole-file diff): a script made executable
/// read as its every line removed and added again, a new symbolic link as "Large files …
/// differ", and a new empty file got the hunk `@@ -0,0 +0,0 @@`, which patch tools
/// refuse. They are now git's `old mode`/`new mode` lines alone, "Symbolic links …
/// differ", and no hunk.
#[test]
fn a_plain_diff_names_mode_changes_links_and_empty_files() {
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "tool_use", "name": "Bash", "input": {"command": "edit"}},
        {"step": "run_tool", "command": "chmod +x s.sh && ln -s k link && : > empty"},
        steps::result_ok("done"),
    ]));
    std::fs::write(fake.workspace().join("s.sh"), "echo a\n").unwrap();
    std::fs::write(fake.workspace().join("k"), "k\n").unwrap();
    let out = fake.coder().args(["--return-diff", "task"]).run();
    out.assert_success("done");
    let diff = out.envelope["diff"]["unified"].as_str().unwrap_or_default();
    assert!(
        diff.contains("diff a/s.sh b/s.sh\nold mode 100644\nnew mode 100755\n")
            && !diff.contains("-echo a\n+echo a\n")
            && diff.contains("diff a/link b/link\nSymbolic links /dev/null and b/link differ\n")
            && diff.contains("diff a/empty b/empty\n--- /dev/null\n+++ b/empty\n")
            && !diff.contains("@@ -0,0 +0,0 @@"),
        "{diff}"
    );
}

/// A task piped in from a file that is not UTF-8 (a Latin-1 `é` in a generated prompt):
/// the run said only "the prompt on stdin is not valid UTF-8", leaving the user to find
/// the byte in a file of megabytes. It now names the byte's offset, its line and its
/// value, and how to convert the text.
#[test]
fn a_prompt_that_is_not_utf8_names_where() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let out = fake
        .coder()
        .arg("-")
        .stdin(b"fix\nthe \xe9t\xe9 bug\n".to_vec())
        .run();
    out.assert_failure("config_error", 78);
    assert_eq!(
        out.envelope["error"],
        "the prompt on stdin is not valid UTF-8: it stops being UTF-8 at byte 8 (line 2, byte \
         0xe9); convert the text to UTF-8 (iconv -t UTF-8) or remove that byte",
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}
