//! Credentials in what coder prints besides the envelope and the transcript: `coder
//! doctor`'s report (text and `--json`), the config-error message of a base URL that is not
//! one, and `coder sandbox`'s git-guard lines, which name paths the sandboxed command
//! chose. A password in a URL's user info is no known value and has no token shape, so it
//! must be hidden where the URL is shown; a value coder knows from its environment must be
//! redacted in every such line. Each test also checks the line is there (the URL's host,
//! the guard's move), so none passes because the output went missing.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{Bounded, Fake, steps};
use serde_json::json;

/// A password with no token shape: only its place in the URL says it is one.
const PASSWORD: &str = "Zq81Lm9Xv2Pw7Rb4Hc6NqT5";
/// A credential in coder's environment (`GITHUB_TOKEN`), without a token shape either.
const KNOWN: &str = "Wv7Nk2Qp9Lx4Rt6Ys1Bd";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn doctor(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_coder"))
        .arg("doctor")
        .args(args)
        .env_clear()
        .env("PATH", home.join("empty-bin"))
        .env("HOME", home)
        .env("ZAI_API_KEY", "sk-very-secret-value-0123456789")
        .env("GITHUB_TOKEN", KNOWN)
        .stdin(Stdio::null())
        .output_bounded()
}

#[test]
fn doctor_shows_a_base_url_without_its_password_nor_a_known_value() {
    let home = tempfile::tempdir().unwrap();
    let url = format!("https://coder:{PASSWORD}@127.0.0.1:9/{KNOWN}/");
    for json in [false, true] {
        let mut args = vec![
            "--backend",
            "glm",
            "--base-url",
            &url,
            "--connect-timeout",
            "0.2",
        ];
        if json {
            args.push("--json");
        }
        let out = doctor(home.path(), &args);
        let all = text(&out);
        assert!(
            all.contains("https://coder:[REDACTED]@127.0.0.1:9/[REDACTED]/"),
            "the backend line shows the URL, hidden: {all}"
        );
        assert!(!all.contains(PASSWORD), "{all}");
        assert!(!all.contains(KNOWN), "{all}");
    }
}

#[test]
fn a_bad_base_url_is_refused_without_its_password_or_a_key_given_in_its_place() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let cases = [
        (
            format!("htp://coder:{PASSWORD}@example.com/"),
            "base URL 'htp://coder:[REDACTED]@example.com/' (from --base-url)".to_owned(),
        ),
        // A key pasted where the URL goes: only its first characters are shown.
        (
            PASSWORD.to_owned(),
            "base URL 'Zq8… (23 characters)' (from --base-url)".to_owned(),
        ),
    ];
    for (url, shown) in cases {
        let out = fake
            .coder()
            .args(["--backend", "glm", "--base-url", &url, "task"])
            .env("ZAI_API_KEY", "sk-very-secret-value-0123456789")
            .run();
        let detail = out.assert_failure("config_error", 78);
        let message = detail["message"].as_str().unwrap();
        assert!(message.contains(&shown), "{}", out.explain());
        assert!(!out.stdout.contains(PASSWORD), "{}", out.explain());
        assert!(!out.stderr.contains(PASSWORD), "{}", out.explain());
    }
}

#[test]
fn sandbox_git_guard_lines_redact_a_known_value_in_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    let home = ws.with_file_name("home");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    // The command makes a repository named after the credential, with a hook: the guard
    // moves the hook and names the repository's path.
    let script = format!(
        "git init -q {KNOWN} && printf '#!/bin/sh\\ntrue\\n' > {KNOWN}/.git/hooks/pre-commit \
         && chmod +x {KNOWN}/.git/hooks/pre-commit"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["sandbox", "--", "/bin/sh", "-c", &script])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &home)
        .env("GITHUB_TOKEN", KNOWN)
        .current_dir(&ws)
        .stdin(Stdio::null())
        .output_bounded();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains("coder sandbox: git guard: in ") && err.contains("[REDACTED]"),
        "the guard reported the move: {err}"
    );
    assert!(!err.contains(KNOWN), "{err}");
    assert!(ws.join(KNOWN).join(".git").exists(), "{err}");
}

/// The key pasted where the config file names its variable (`key_env = "<the key>"`): the
/// run's `config_error` and `coder doctor` show only its first characters (they printed it
/// three times: `reads its API key from $KEY, … export KEY=<your key>`).
#[test]
fn a_key_pasted_as_key_env_is_not_printed() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[backends.mine]\nbase_url = \"https://x.example\"\nkey_env = \"{PASSWORD}\"\n"),
    )
    .unwrap();
    let fake = Fake::new(json!(steps::answer("should not run")));
    let out = fake
        .coder()
        .arg("--config")
        .arg(&config)
        .args(["--backend", "mine", "task"])
        .run();
    let detail = out.assert_failure("config_error", 78);
    assert!(
        detail["message"].as_str().unwrap().contains(
            "key_env 'Zq8… (23 characters)' names no set variable and looks like an API key"
        ),
        "{}",
        out.explain()
    );
    assert!(!out.stdout.contains(PASSWORD), "{}", out.explain());
    let config = config.to_str().unwrap();
    let report = text(&doctor(
        home.path(),
        &[
            "--config",
            config,
            "--backend",
            "mine",
            "--connect-timeout",
            "0.2",
        ],
    ));
    assert!(report.contains("looks like an API key"), "{report}");
    assert!(!report.contains(PASSWORD), "{report}");
}

/// An `--allow-host` given with a user and password (a URL pasted whole, or `user:pw@host`)
/// is refused without printing them, by the run mode and by `coder sandbox`.
#[test]
fn an_allow_host_with_a_password_is_refused_without_it() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    for value in [
        format!("https://coder:{PASSWORD}@example.com"),
        format!("coder:{PASSWORD}@example.com:8443"),
    ] {
        let out = fake.coder().args(["--allow-host", &value, "task"]).run();
        let detail = out.assert_failure("config_error", 78);
        assert!(
            detail["message"]
                .as_str()
                .unwrap()
                .contains("invalid --allow-host \"[REDACTED]@example.com"),
            "{}",
            out.explain()
        );
        assert!(!out.stdout.contains(PASSWORD), "{}", out.explain());
        let sandbox = Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(["sandbox", "--cd"])
            .arg(fake.workspace())
            .args(["--allow-host", &value, "--", "true"])
            .stdin(Stdio::null())
            .output_bounded();
        let all = text(&sandbox);
        assert!(all.contains("without a user or password"), "{all}");
        assert!(!all.contains(PASSWORD), "{all}");
    }
}
