//! Attack review of redaction in what coder keeps for later runs.
//!
//! The store (DESIGN §10):
//! a quota failure's message is recorded with the backend's cooldown and shown by every
//! later run refused by it — on this machine, or on another one sharing the store, whose
//! environment does not hold the key and so cannot redact it. A vendor that echoes the
//! caller's key in its error (a key named in an auth or quota message) must leave the key
//! neither in the store's file nor in a later run's envelope.
//!
//! The repository (`--worktree`, DESIGN §10): the branch's commit takes its message from
//! the task, which can name the key.
//!
//! And one value coder did not count among the run's secrets at all: a credential the
//! config file's `env` table gives the child, which coder's own environment does not hold.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox_fixture::{coder_as, payload_claude};
use common::{Bounded, Fake, json_strings as strings};
use serde_json::json;

/// The first machine's key: shaped like no well-known token, so only its value redacts it.
const KEY: &str = "zq7-Ky3pW9vXm2Lr8Tn4Bc6H";
/// The second machine's key.
const OTHER_KEY: &str = "Pm5-Hd2qX8wRk4Nv7Js3Ya1G";

/// A Z.ai quota failure (1308, with its reset time) whose message names the key the child
/// was given, as the child sees it.
fn quota_text_naming_the_key() -> String {
    "API Error: 429 {\"error\":{\"code\":\"1308\",\"message\":\"Usage limit reached for key \
     {{env:ANTHROPIC_AUTH_TOKEN}}. Your limit will reset at 2099-01-01 08:00:00\"}}"
        .to_owned()
}

fn config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("coder.toml");
    std::fs::write(
        &path,
        "[backends.solo]\npreset = \"inherit\"\nmax_concurrent = 4\n",
    )
    .unwrap();
    path
}

/// Every byte of the SQLite store (its main file and write-ahead log), as text.
fn store_bytes(store: &Path) -> String {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-journal"] {
        let mut name = store.as_os_str().to_owned();
        name.push(suffix);
        if let Ok(bytes) = std::fs::read(&name) {
            all.extend(bytes);
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

#[test]
fn a_cooldown_recorded_from_an_error_naming_the_key_keeps_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.db");
    let config = config(dir.path());
    let on_store = |fake: &Fake, key: &str| {
        fake.coder()
            .env("ANTHROPIC_AUTH_TOKEN", key)
            .arg("--store")
            .arg(&store)
            .arg("--config")
            .arg(&config)
            .args(["--backend", "solo"])
    };
    let hit = Fake::new(json!([
        {"step": "init"},
        {"step": "result", "is_error": true, "api_error_status": 429,
         "text": quota_text_naming_the_key()},
    ]));
    let out = on_store(&hit, KEY).arg("one").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["provider_error"]["class"], "quota_exhausted");
    // The run itself shows the message, redacted (the child did name the key).
    let shown = strings(&out.envelope);
    assert!(!shown.contains(KEY), "{shown}");
    assert!(
        shown.contains("Usage limit reached for key [REDACTED]"),
        "{}",
        out.explain()
    );
    let kept = store_bytes(&store);
    assert!(
        kept.contains("Usage limit reached for key"),
        "the store kept no cooldown message: the test would pass for the wrong reason"
    );
    assert!(
        !kept.contains(KEY),
        "the store's file holds the key in the cooldown's message"
    );

    // Another machine on the same store, with its own key: refused by the cooldown, it
    // shows the recorded message, and cannot know the first key to redact it.
    let next = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "never"}]));
    let out = on_store(&next, OTHER_KEY).arg("two").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert!(
        !next.has_record(),
        "a cooling backend must not start the CLI"
    );
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cooling down") && message.contains("Usage limit reached for key"),
        "{message}"
    );
    let shown = strings(&out.envelope);
    assert!(
        !shown.contains(KEY),
        "a later run prints the first run's key: {message}"
    );
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::null())
        .output_bounded();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--worktree` commits the run's changes with the task's first line as the message: a
/// task that names the key (the caller pasted it into the prompt) must not put it into
/// the repository's history, where a push would publish it.
#[test]
fn a_worktree_commit_message_taken_from_a_task_naming_the_key_holds_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    let bin = root.join("fake-claude");
    std::fs::write(&bin, payload_claude("echo hello > new.txt")).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let task = format!("Call the API with key {KEY} and save the answer");
    let out = coder_as(&root, None, &repo, &bin, &["--worktree"], &task)
        .env("ANTHROPIC_AUTH_TOKEN", KEY)
        .output_bounded();
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"));
    assert_eq!(envelope["success"], true, "{out:?}");
    assert!(!strings(&envelope).contains(KEY), "{envelope}");
    let branch = envelope["worktree"]["branch"]
        .as_str()
        .unwrap_or_else(|| panic!("no worktree in {envelope}"));
    assert!(envelope["worktree"]["commit"].is_string(), "{envelope}");
    let subject = git(&repo, &["log", "-1", "--format=%B", branch]);
    assert!(
        subject.starts_with("Call the API with key"),
        "the commit took no message from the task: {subject}"
    );
    assert!(
        !subject.contains(KEY),
        "the branch's commit message holds the key: {subject}"
    );
}

/// A credential-named variable the config file gives the child (`env = { … }`), which
/// coder's own environment does not hold: the child can print it like its key.
#[test]
fn a_credential_the_config_gives_the_child_is_redacted_everywhere() {
    const TOKEN: &str = "Wd4-Qs8Lx2Vn6Kj1Hb9Tm3Pz";
    let fake = Fake::new(json!([
        {"step": "init"},
        {"step": "stderr", "text": "stderr: {{env:SERVICE_TOKEN}}"},
        {"step": "assistant_text", "text": "told: {{env:SERVICE_TOKEN}}"},
        {"step": "result", "text": "done with {{env:SERVICE_TOKEN}}"},
    ]));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("coder.toml");
    std::fs::write(
        &config,
        format!("[backends.solo]\npreset = \"inherit\"\nenv = {{ SERVICE_TOKEN = \"{TOKEN}\" }}\n"),
    )
    .unwrap();
    let out = fake
        .coder()
        .arg("--config")
        .arg(&config)
        .args(["--backend", "solo", "--return-all-messages", "task"])
        .run();
    assert_eq!(
        fake.record().env().get("SERVICE_TOKEN").map(String::as_str),
        Some(TOKEN),
        "the child did not get the variable: the test would pass for the wrong reason"
    );
    assert_eq!(
        out.envelope["result"],
        json!("done with [REDACTED]"),
        "{}",
        out.explain()
    );
    assert!(
        !out.stdout.contains(TOKEN),
        "the envelope holds the token: {}",
        out.stdout
    );
    let path = out.envelope["transcript"].as_str().unwrap();
    let raw = std::fs::read_to_string(path).unwrap();
    assert!(!raw.contains(TOKEN), "the transcript holds the token");
    assert!(
        raw.contains("stderr: [REDACTED]"),
        "the stderr line went missing"
    );
}
