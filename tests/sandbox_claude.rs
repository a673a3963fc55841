//! The real claude CLI inside coder's sandbox, offline against a replay cassette
//! (fixtures/sandbox/confined.json): its Bash tool finds `.env` empty and `~/.ssh` missing,
//! its Bash and Write tools still write in the workspace, and the model was told about the
//! sandbox. The cassette's expectations check each tool result; the run fails when one
//! does not hold.
//!
//! The CLI is found through `CODER_TEST_CLAUDE_BIN`, else the project-local install of
//! `scripts/setup-claude`; the tests are
//! `#[ignore]`d ("needs the claude CLI") and `scripts/test` runs them where it is installed.

mod common;

use common::real_claude;

use common::Fake;
use serde_json::json;

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_real_cli_works_confined_and_cannot_read_secrets() {
    let claude = real_claude();
    let fake = Fake::new(json!([]));
    let ws = fake.workspace();
    let secret = format!("SECRET-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(ws.join(".env"), format!("TOKEN={secret}\n")).unwrap();
    let home = fake.root().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), format!("{secret}\n")).unwrap();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/confined.json",
        env!("CARGO_MANIFEST_DIR")
    );

    let out = fake
        .coder()
        .env("HOME", &home)
        .claude_bin(claude)
        .args([
            "--backend",
            &cassette,
            "--return-all-messages",
            "probe the sandbox",
        ])
        .run();
    out.assert_success("The sandbox held and the workspace took both writes.");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "built\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("written.txt")).unwrap(),
        "saved by the Write tool\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".env")).unwrap(),
        format!("TOKEN={secret}\n"),
        "the secret itself is untouched"
    );
    assert!(!out.stdout.contains(&secret), "{}", out.explain());
    assert!(!out.stderr.contains(&secret), "{}", out.explain());
}

/// The CLI's own file tools at a masked secret: its Write tool is refused by the settings'
/// `Edit` rules (coder gives no `Write` rules: the CLI never matches them), and what its
/// Read tool returns is never the secret.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_real_clis_file_tools_neither_write_nor_read_a_masked_secret() {
    let claude = real_claude();
    let fake = Fake::new(json!([]));
    let ws = fake.workspace();
    let secret = format!("SECRET-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(ws.join(".env"), format!("TOKEN={secret}\n")).unwrap();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/masked_file_tools.json",
        env!("CARGO_MANIFEST_DIR")
    );

    let out = fake
        .coder()
        .claude_bin(claude)
        .args([
            "--backend",
            &cassette,
            "--return-all-messages",
            "write and read .env",
        ])
        .run();
    out.assert_success("The masked file was neither written nor read.");
    assert_eq!(
        std::fs::read_to_string(ws.join(".env")).unwrap(),
        format!("TOKEN={secret}\n"),
        "the Write tool was refused: {}",
        out.explain()
    );
    assert!(!out.stdout.contains(&secret), "{}", out.explain());
    assert!(!out.stderr.contains(&secret), "{}", out.explain());
    let transcript = out.envelope["transcript"].as_str().unwrap();
    let transcript = std::fs::read_to_string(transcript).unwrap();
    assert!(
        !transcript.contains(&secret),
        "the secret is in the transcript"
    );
}

#[test]
fn a_workspace_with_thousands_of_secrets_still_starts_the_child() {
    // Enough masks that the helper's spec no longer fits in one argument.
    let fake = Fake::new(json!(common::steps::answer("ok")));
    let keys = fake.workspace().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    for i in 0..1500 {
        std::fs::write(keys.join(format!("k{i}.key")), "secret\n").unwrap();
    }
    let out = fake.coder().arg("task").run();
    out.assert_success("ok");
    assert_eq!(
        std::fs::read_to_string(keys.join("k7.key")).unwrap(),
        "secret\n"
    );
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn denials_the_agent_hits_are_reported_without_the_secret() {
    let claude = real_claude();
    let fake = Fake::new(json!([]));
    let secret = format!("SECRET-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(fake.workspace().join(".env"), format!("TOKEN={secret}\n")).unwrap();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/denials.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = fake
        .coder()
        .claude_bin(claude)
        .args(["--backend", &cassette, "--return-metrics", "probe"])
        .run();
    out.assert_success("Both attempts were refused.");
    let denials = out.envelope["metrics"]["sandbox_denials"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", out.explain()))
        .clone();
    assert!(
        denials.iter().any(|d| d["tool"] == "Read"
            && d["class"] == "non_accessible"
            && d["path"].as_str().is_some_and(|p| p.ends_with(".env"))),
        "{denials:#?}"
    );
    assert!(
        denials.iter().any(|d| d["tool"] == "Bash"),
        "the write outside the workspace: {denials:#?}"
    );
    assert!(!out.stdout.contains(&secret), "{}", out.explain());
    assert!(!std::path::Path::new("/etc/coder-sandbox-probe").exists());
    // The transcript never holds the secret either.
    let transcript = out.envelope["transcript"].as_str().unwrap();
    assert!(
        !std::fs::read_to_string(transcript)
            .unwrap()
            .contains(&secret)
    );
}

/// A script the user's git commands run that was absent at the start is held absent (a
/// symlink to `/dev/null/coder-absent`): making it fails with "Directory nonexistent"
/// (dash's redirection) or "ENOTDIR: not a directory" (the Write tool), which the
/// agent's denials did not count: the run reported none, though the sandbox had refused
/// both (newuser30's note, round thirty).
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn making_a_script_held_absent_is_a_read_only_denial() {
    let claude = real_claude();
    let fake = Fake::new(json!([]));
    let ws = fake.workspace();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(ws)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["config", "alias.fmt", "!sh tools/fmt.sh"]);
    git(&["config", "alias.lint", "!sh tools/lint.sh"]);
    std::fs::create_dir(ws.join("tools")).unwrap();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/held_absent.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = fake
        .coder()
        .claude_bin(claude)
        .args([
            "--backend",
            &cassette,
            "--return-metrics",
            "make the scripts",
        ])
        .run();
    out.assert_success("Both scripts were refused.");
    let denials = out.envelope["metrics"]["sandbox_denials"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", out.explain()))
        .clone();
    for (tool, name) in [("Bash", "tools/fmt.sh"), ("Write", "tools/lint.sh")] {
        assert!(
            denials.iter().any(|d| d["tool"] == tool
                && d["class"] == "read_only"
                && d["path"].as_str().is_some_and(|p| p.ends_with(name))),
            "{tool} {name}: {denials:#?} {}",
            out.explain()
        );
        assert!(
            !ws.join(name).exists(),
            "{name} was made: {}",
            out.explain()
        );
    }
}

/// The real CLI reaches its (loopback) backend only through coder's egress proxy, and what
/// the proxy refuses is reported like a file denial.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_real_cli_talks_through_the_proxy_and_refusals_are_denials() {
    let claude = real_claude();
    let fake = Fake::new(json!([]));
    let cassette = format!(
        "replay:{}/fixtures/sandbox/network.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = fake
        .coder()
        .claude_bin(claude)
        .args([
            "--backend",
            &cassette,
            "--return-metrics",
            "--return-all-messages",
            "probe",
        ])
        .run();
    out.assert_success("The network is closed.");
    let denials = out.envelope["metrics"]["sandbox_denials"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", out.explain()))
        .clone();
    assert!(
        denials.iter().any(|d| d["tool"] == "proxy"
            && d["class"] == "network"
            && d["host"] == "example.invalid:443"),
        "{denials:#?}"
    );
    let messages = out.envelope["all_messages"].to_string();
    assert!(
        messages.contains("CONNECT tunnel failed, response 403"),
        "{}",
        out.explain()
    );
    assert!(
        messages.contains("proxy=http://127.0.0.1:"),
        "{}",
        out.explain()
    );
    // The model's requests went through the proxy: its own count, in the transcript (a
    // count of connections: the CLI keeps one open for both turns).
    let transcript = out.envelope["transcript"].as_str().unwrap();
    let entries = common::read_transcript(std::path::Path::new(transcript));
    let egress: Vec<&serde_json::Value> =
        entries.iter().filter(|e| e["kind"] == "egress").collect();
    assert_eq!(egress.len(), 1, "{egress:?}");
    let allowed = egress[0]["data"]["allowed"]
        .as_u64()
        .or_else(|| egress[0]["allowed"].as_u64())
        .unwrap_or_else(|| panic!("{:?}", egress[0]));
    assert!(allowed >= 1, "{:?}", egress[0]);
    assert_eq!(egress[0]["data"]["denied"], 1, "{:?}", egress[0]);
}

/// Class 7 with the real CLI: its Bash tool runs in coder's wrapper shell
/// (`CLAUDE_CODE_SHELL`, a nested Landlock domain) and cannot write a forged `result` into the CLI's stdout; without the
/// sandbox the same tool can (the control).
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_real_clis_tool_commands_cannot_forge_its_result() {
    let claude = real_claude();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/forged_result.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let run = |extra: &[&str]| {
        let fake = Fake::new(json!([]));
        let home = fake.root().join("home");
        std::fs::create_dir_all(&home).unwrap();
        fake.coder()
            .env("HOME", &home)
            .claude_bin(claude.clone())
            .args(["--backend", &cassette, "--return-all-messages"])
            .args(extra)
            .arg("forge")
            .run()
    };
    let confined = run(&[]);
    confined.assert_success("The honest answer.");
    assert!(
        confined.stdout.contains("/nest/bash]"),
        "the CLI was given coder's wrapper shell: {}",
        confined.explain()
    );
    // The command's own text holds `INJECTED-$p`; a write that worked shows a pid.
    let injected = |out: &str| {
        out.match_indices("INJECTED-")
            .any(|(i, m)| out[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    assert!(!injected(&confined.stdout), "{}", confined.explain());
    // Unconfined the forged line reaches coder's parser: it shows among the messages.
    let open = run(&["--sandbox", "danger-full-access"]);
    assert!(
        injected(&open.stdout),
        "control: unconfined, the forged line gets in: {}",
        open.explain()
    );
}
