//! The environment, arguments and prompt a real run hands to the child, recorded by a fake
//! claude script: the backend's variables arrive, the caller's unrelated secrets and a
//! parent session's markers do not, and config errors come back as `config_error`
//! envelopes.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let setup = Setup {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir(setup.workspace()).unwrap();
        std::fs::create_dir(setup.dir.path().join("home")).unwrap();
        setup
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// A fake claude that records its environment, arguments and stdin in the workspace
    /// (its working directory), writes its state into `CLAUDE_CONFIG_DIR` as the real CLI
    /// does, and answers like a successful one-turn run.
    fn fake_claude(&self) -> PathBuf {
        let path = self.dir.path().join("claude");
        std::fs::write(
            &path,
            r#"#!/bin/sh
env > recorded-env
printf '%s\n' "$@" > recorded-args
cat > recorded-stdin
if [ -n "$CLAUDE_CONFIG_DIR" ]; then echo '{}' > "$CLAUDE_CONFIG_DIR/.claude.json"; fi
sid=none
while [ $# -gt 0 ]; do
  if [ "$1" = "--session-id" ]; then sid="$2"; fi
  shift
done
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"recorded","session_id":"'"$sid"'"}'
"#,
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> (Value, Output) {
        let out = Command::new(env!("CARGO_BIN_EXE_coder"))
            .arg("--cd")
            .arg(self.workspace())
            .arg("--claude-bin")
            .arg(self.fake_claude())
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.dir.path().join("home"))
            .env("CODER_STATE_DIR", self.state())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let envelope = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("not one JSON envelope ({e}): {stdout}"));
        (envelope, out)
    }

    fn recorded(&self, name: &str) -> String {
        std::fs::read_to_string(self.workspace().join(name)).unwrap()
    }

    fn recorded_env(&self) -> Vec<(String, String)> {
        self.recorded("recorded-env")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[test]
fn a_glm_run_gives_the_child_the_presets_environment_and_nothing_else() {
    let setup = Setup::new();
    let (envelope, out) = setup.run(
        &[
            "--backend",
            "glm",
            "--sandbox",
            "danger-full-access",
            "say hi",
        ],
        &[
            ("ZAI_API_KEY", "zai-test-key"),
            ("ANTHROPIC_API_KEY", "sk-stray"),
            ("GITHUB_TOKEN", "ghp_hidden"),
            ("CLAUDECODE", "1"),
            ("LANG", "C.UTF-8"),
        ],
    );
    assert_eq!(envelope["success"], true, "{envelope}");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        envelope["warnings"]
            .to_string()
            .contains("ANTHROPIC_API_KEY"),
        "the stray key is reported: {envelope}"
    );

    let env = setup.recorded_env();
    assert_eq!(
        get(&env, "ANTHROPIC_BASE_URL"),
        Some("https://api.z.ai/api/anthropic")
    );
    assert_eq!(get(&env, "ANTHROPIC_AUTH_TOKEN"), Some("zai-test-key"));
    assert_eq!(get(&env, "ANTHROPIC_MODEL"), Some("glm-4.7"));
    assert_eq!(
        get(&env, "ANTHROPIC_DEFAULT_HAIKU_MODEL"),
        Some("glm-4.5-air")
    );
    assert_eq!(get(&env, "CLAUDE_CODE_MAX_RETRIES"), Some("3"));
    assert_eq!(
        get(&env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"),
        Some("1")
    );
    assert_eq!(get(&env, "LANG"), Some("C.UTF-8"));
    // The vendor's 50-minute header timeout is capped below coder's idle limit.
    assert_eq!(get(&env, "API_TIMEOUT_MS"), Some("270000"));
    let private = setup.state().join("claude");
    assert_eq!(get(&env, "CLAUDE_CONFIG_DIR"), private.to_str());
    assert!(private.is_dir(), "the private config dir is created");
    for hidden in [
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "CLAUDECODE",
        "ZAI_API_KEY",
    ] {
        assert_eq!(get(&env, hidden), None, "{hidden} reached the child");
    }

    let args = setup.recorded("recorded-args");
    assert!(
        args.lines().any(|a| a == "--disallowedTools=WebSearch"),
        "{args}"
    );
    assert!(
        args.lines().any(|a| a == "--append-system-prompt"),
        "{args}"
    );
    assert_eq!(setup.recorded("recorded-stdin"), "say hi");
}

#[test]
fn prompt_flags_reach_the_child_assembled() {
    let setup = Setup::new();
    let guardrails = setup.dir.path().join("guardrails.md");
    std::fs::write(&guardrails, "Never touch migrations.\n").unwrap();
    let (envelope, _) = setup.run(
        &[
            "--sandbox",
            "danger-full-access",
            "--guardrails",
            guardrails.to_str().unwrap(),
            "--acceptance",
            "tests pass",
            "fix the login bug",
        ],
        &[("ANTHROPIC_API_KEY", "sk-inherit")],
    );
    assert_eq!(envelope["success"], true, "{envelope}");
    let stdin = setup.recorded("recorded-stdin");
    assert!(
        stdin.starts_with("# Task\n\nfix the login bug\n"),
        "{stdin}"
    );
    assert!(stdin.contains("Never touch migrations."), "{stdin}");
    assert!(stdin.contains("QUESTION:"), "{stdin}");
    // The default backend passes the caller's own key through.
    assert_eq!(
        get(&setup.recorded_env(), "ANTHROPIC_API_KEY"),
        Some("sk-inherit")
    );
}

#[test]
fn config_problems_are_config_error_envelopes() {
    let setup = Setup::new();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 4] = [
        (
            &["--backend", "deepseek", "t"],
            &[],
            "$DEEPSEEK_API_KEY, which is not set",
        ),
        (&["--backend", "nope", "t"], &[], "unknown backend 'nope'"),
        (
            &["--backend", "glm", "t"],
            &[("ZAI_API_KEY", "k"), ("CODER_BASE_URL", "ftp://x")],
            "is not an http:// or https:// URL",
        ),
        (
            &["--contract", "/nonexistent/contract.md", "t"],
            &[],
            "--contract /nonexistent/contract.md",
        ),
    ];
    for (args, env, expected) in cases {
        let (envelope, out) = setup.run(args, env);
        assert_eq!(
            envelope["error_kind"], "config_error",
            "{args:?}: {envelope}"
        );
        assert!(
            envelope["error"].as_str().unwrap().contains(expected),
            "{args:?}: {envelope}"
        );
        assert_eq!(out.status.code(), Some(78), "{args:?}");
    }
    assert!(
        !setup.workspace().join("recorded-env").exists(),
        "nothing was spawned"
    );

    let config = setup.dir.path().join("bad.toml");
    std::fs::write(&config, "[backends.x]\nbase_url = 5\n").unwrap();
    let (envelope, _) = setup.run(&["t"], &[("CODER_CONFIG", config.to_str().unwrap())]);
    assert_eq!(envelope["error_kind"], "config_error");
    assert!(
        envelope["error"]
            .as_str()
            .unwrap()
            .contains(&format!("{}, line 2", config.display())),
        "{envelope}"
    );
}

#[test]
fn the_default_sandbox_run_writes_claude_state_only_to_the_private_dir() {
    let setup = Setup::new();
    let (envelope, _) = setup.run(&["--backend", "minimax", "t"], &[("MINIMAX_API_KEY", "mm")]);
    assert_eq!(envelope["success"], true, "{envelope}");
    let env = setup.recorded_env();
    assert_eq!(
        get(&env, "ANTHROPIC_BASE_URL"),
        Some("https://api.minimax.io/anthropic")
    );
    assert_eq!(get(&env, "ANTHROPIC_AUTH_TOKEN"), Some("mm"));
    assert!(setup.state().join("claude/.claude.json").is_file());
    assert!(
        !setup.dir.path().join("home/.claude").exists(),
        "the user's ~/.claude was touched"
    );
    assert!(!setup.dir.path().join("home/.claude.json").exists());
}
