//! What a real run hands the child for a backend, recorded by the fake claude
//! (fixtures/fake-claude.py): the preset's variables and CLI flags arrive, the caller's
//! unrelated secrets and a parent session's markers do not, the prompt flags shape stdin,
//! the CLI's state goes to coder's private directory, and config mistakes come back as
//! `config_error` envelopes without starting the child.

mod common;

use common::real_claude;

use common::{Coder, Fake, SECRET_TOKEN, steps};
use serde_json::json;
use std::path::PathBuf;

fn answering() -> Fake {
    Fake::new(json!(steps::answer("recorded")))
}

/// A run whose HOME is a fresh directory inside the fake's temp dir.
fn coder(fake: &Fake) -> Coder {
    let home = fake.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    fake.coder().env("HOME", home)
}

#[test]
fn a_glm_run_gives_the_child_the_presets_environment_and_nothing_else() {
    let fake = answering();
    let out = coder(&fake)
        .env("ZAI_API_KEY", "zai-test-key")
        .env("ANTHROPIC_API_KEY", "sk-stray")
        .env("GITHUB_TOKEN", "ghp_hidden")
        .env("LANG", "C.UTF-8")
        .args(["--backend", "glm", "say hi"])
        .run();
    out.assert_success("recorded");
    assert!(
        out.envelope["warnings"]
            .to_string()
            .contains("ANTHROPIC_API_KEY"),
        "the dropped stray key is reported: {}",
        out.explain()
    );

    let record = fake.record();
    let env = record.env();
    let var = |name: &str| env.get(name).map(String::as_str);
    assert_eq!(
        var("ANTHROPIC_BASE_URL"),
        Some("https://api.z.ai/api/anthropic")
    );
    assert_eq!(var("ANTHROPIC_AUTH_TOKEN"), Some("zai-test-key"));
    assert_eq!(var("ANTHROPIC_MODEL"), Some("glm-4.7"));
    assert_eq!(var("ANTHROPIC_DEFAULT_OPUS_MODEL"), Some("glm-4.7"));
    assert_eq!(var("ANTHROPIC_DEFAULT_HAIKU_MODEL"), Some("glm-4.5-air"));
    assert_eq!(var("CLAUDE_CODE_SUBAGENT_MODEL"), Some("glm-4.7"));
    assert_eq!(var("CLAUDE_CODE_MAX_RETRIES"), Some("3"));
    assert_eq!(var("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), Some("1"));
    assert_eq!(var("CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS"), Some("1"));
    assert_eq!(var("DISABLE_TELEMETRY"), Some("1"));
    assert_eq!(var("LANG"), Some("C.UTF-8"));
    // The vendor's 50-minute header timeout is capped below coder's idle limit.
    assert_eq!(var("API_TIMEOUT_MS"), Some("270000"));
    for hidden in [
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "CLAUDECODE",
        "ZAI_API_KEY",
    ] {
        assert_eq!(var(hidden), None, "{hidden} reached the child");
    }
    assert!(
        !env.values().any(|v| v == SECRET_TOKEN),
        "the caller's own ANTHROPIC_AUTH_TOKEN reached a glm child"
    );

    assert!(
        record.has_flag("--disallowedTools=WebSearch"),
        "{:?}",
        record.argv()
    );
    assert!(
        record.flag_value("--append-system-prompt").is_some(),
        "{:?}",
        record.argv()
    );
    assert_eq!(record.stdin(), "say hi");
}

#[test]
fn claude_state_goes_to_a_fresh_per_run_directory_not_the_users() {
    // Per-run config dirs are made in coder's scratch place (a tmpfs of the user's, else
    // the state directory): `<scratch>/cli-runs/<pid>-<id>/claude`, removed after the run.
    let state = tempfile::tempdir().unwrap();
    let fake = Fake::new(json!([steps::init(), steps::result_ok("done")]));
    let out = coder(&fake)
        .env("CODER_STATE_DIR", state.path())
        .env("MINIMAX_API_KEY", "mm")
        .args(["--backend", "minimax", "t"])
        .run();
    out.assert_success("done");
    let env = fake.record().env();
    let dir = PathBuf::from(&env["CLAUDE_CONFIG_DIR"]);
    let scratch = dir.ancestors().nth(3).unwrap();
    let own_places = [
        state.path().to_path_buf(),
        PathBuf::from(format!("/dev/shm/coder-{}", nix::unistd::geteuid())),
    ];
    assert!(
        dir.ancestors().nth(2).unwrap().ends_with("cli-runs")
            && dir.ends_with("claude")
            && (own_places.iter().any(|p| p == scratch) || scratch.ends_with("coder")),
        "{dir:?}"
    );
    assert!(!dir.exists(), "the per-run dir outlived its run");
    assert_eq!(
        env.get("ANTHROPIC_BASE_URL").map(String::as_str),
        Some("https://api.minimax.io/anthropic")
    );
    let home = fake.root().join("home");
    assert!(!home.join(".claude").exists() && !home.join(".claude.json").exists());
}

#[test]
fn prompt_flags_reach_the_child_assembled() {
    let fake = answering();
    let guardrails = fake.root().join("guardrails.md");
    std::fs::write(&guardrails, "Never touch migrations.\n").unwrap();
    let out = coder(&fake)
        .arg("--guardrails")
        .arg(&guardrails)
        .args(["--acceptance", "tests pass", "fix the login bug"])
        .run();
    out.assert_success("recorded");
    let stdin = fake.record().stdin();
    assert!(
        stdin.starts_with("# Task\n\nfix the login bug\n"),
        "{stdin}"
    );
    assert!(stdin.contains("Never touch migrations."), "{stdin}");
    assert!(stdin.contains("QUESTION:"), "{stdin}");
}

#[test]
fn the_default_backend_passes_the_callers_claude_settings() {
    let fake = answering();
    let out = coder(&fake).arg("t").run();
    out.assert_success("recorded");
    let env = fake.record().env();
    assert_eq!(
        env.get("ANTHROPIC_AUTH_TOKEN").map(String::as_str),
        Some(SECRET_TOKEN)
    );
    assert_eq!(
        env.get("ANTHROPIC_BASE_URL").map(String::as_str),
        Some("http://127.0.0.1:9")
    );
    assert!(!env.contains_key("CLAUDECODE"));
}

#[test]
fn config_problems_are_config_error_envelopes_and_start_nothing() {
    let fake = answering();
    let bad_config = fake.root().join("bad.toml");
    std::fs::write(&bad_config, "[backends.x]\nbase_url = 5\n").unwrap();
    let bad_config = bad_config.to_string_lossy().into_owned();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], String);
    let cases: [Case; 5] = [
        (
            &["--backend", "deepseek", "t"],
            &[],
            "$DEEPSEEK_API_KEY, which is not set".into(),
        ),
        (
            &["--backend", "nope", "t"],
            &[],
            "unknown backend 'nope'".into(),
        ),
        (
            &["--backend", "glm", "t"],
            &[("ZAI_API_KEY", "k"), ("CODER_BASE_URL", "ftp://x")],
            "is not an http:// or https:// URL".into(),
        ),
        (
            &["--contract", "/nonexistent/contract.md", "t"],
            &[],
            "--contract /nonexistent/contract.md".into(),
        ),
        (
            &["t"],
            &[("CODER_CONFIG", &bad_config)],
            format!("{bad_config}, line 2"),
        ),
    ];
    for (args, env, expected) in cases {
        let mut run = coder(&fake).args(args.iter().copied());
        for (k, v) in env {
            run = run.env(k, v);
        }
        let out = run.run();
        out.assert_failure("config_error", 78);
        let error = out.envelope["error"].as_str().unwrap();
        assert!(error.contains(&expected), "{args:?}: {}", out.explain());
        assert!(!fake.has_record(), "{args:?} started the child");
    }
}

fn cassette(name: &str) -> String {
    format!(
        "replay:{}/fixtures/cassettes/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn a_replay_backend_points_the_child_at_a_local_server_with_a_dummy_token() {
    let fake = answering();
    let out = coder(&fake)
        .args(["--backend", &cassette("plain.json"), "t"])
        .run();
    out.assert_success("recorded");
    let env = fake.record().env();
    let url = env.get("ANTHROPIC_BASE_URL").expect("a base URL");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert_eq!(
        env.get("ANTHROPIC_AUTH_TOKEN").map(String::as_str),
        Some(coder::config::REPLAY_TOKEN)
    );
    assert!(
        !env.values().any(|v| v == SECRET_TOKEN),
        "the caller's token leaked"
    );

    let broken = fake.root().join("broken.json");
    std::fs::write(&broken, "{\"version\": 1, \"turns\": [").unwrap();
    let fake = answering();
    let out = coder(&fake)
        .arg("--backend")
        .arg(format!("replay:{}", broken.display()))
        .arg("t")
        .run();
    out.assert_failure("config_error", 78);
    assert!(!fake.has_record());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_real_cli_runs_offline_through_a_replay_backend() {
    let claude = real_claude();
    let fake = answering();
    let out = coder(&fake)
        .claude_bin(claude)
        .args(["--backend", &cassette("plain.json"), "say hi"])
        .run();
    out.assert_success("Hello from the replay cassette.");
}

/// `applied_workarounds` says what coder changed: the caller's `ANTHROPIC_API_KEY` is
/// listed as dropped only when the caller had one to drop.
#[test]
fn caller_api_key_dropped_is_reported_only_when_there_was_a_key() {
    let workarounds = |out: &common::Outcome| -> Vec<String> {
        out.envelope["applied_workarounds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w.as_str().map(str::to_owned))
            .collect()
    };
    let without = answering();
    let out = coder(&without)
        .env("ZAI_API_KEY", "zai-test-key")
        .env_remove("ANTHROPIC_API_KEY")
        .args(["--backend", "glm", "say hi"])
        .run();
    out.assert_success("recorded");
    assert!(
        !workarounds(&out)
            .iter()
            .any(|w| w == "caller_api_key_dropped"),
        "no caller key, yet reported as dropped: {}",
        out.explain()
    );

    let with = answering();
    let out = coder(&with)
        .env("ZAI_API_KEY", "zai-test-key")
        .env("ANTHROPIC_API_KEY", "sk-stray")
        .args(["--backend", "glm", "say hi"])
        .run();
    out.assert_success("recorded");
    assert!(
        workarounds(&out)
            .iter()
            .any(|w| w == "caller_api_key_dropped"),
        "{}",
        out.explain()
    );
    assert_eq!(with.record().env().get("ANTHROPIC_API_KEY"), None);
}
