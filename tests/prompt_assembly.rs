//! Prompt assembly: snapshots of assembled prompts (fixtures/prompt/*.expected.md), the
//! task sent untouched when nothing frames it, and `coder prompt` end to end.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use coder::config::ConfigError;
use coder::pipeline::prompt::{PromptArgs, assemble_prompt};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/prompt")
        .join(name)
}

/// Compares with a fixture; `CODER_UPDATE_FIXTURES=1` rewrites it instead
/// (refused under `CI=true`).
fn assert_snapshot(name: &str, actual: &str) {
    let path = fixture(name);
    if common::update_fixtures() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (CODER_UPDATE_FIXTURES=1 creates it)",
            path.display()
        )
    });
    assert_eq!(actual, expected, "snapshot {}", path.display());
}

/// Fixture paths relative to the crate root, so the `source` attribute is stable.
fn rel(name: &str) -> PathBuf {
    Path::new("fixtures/prompt").join(name)
}

fn in_crate_root() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
}

const TASK: &str = "Add a token-bucket rate limiter to the API gateway.";

#[test]
fn without_framing_flags_the_task_is_sent_as_is() {
    let task = "  fix the {{flaky}} test\n\nin src/a.rs  \n";
    assert_eq!(assemble_prompt(task, &PromptArgs::default()).unwrap(), task);
}

#[test]
fn everything_given() {
    in_crate_root();
    let args = PromptArgs {
        contract: Some(rel("contract.md")),
        guardrails: Some(rel("guardrails.md")),
        codex: Some(rel("codex.md")),
        task_type: Some("feature".into()),
        targets: vec!["src/limit.rs".into(), "tests/limit.rs".into()],
        requirements: vec![
            "Buckets are per API key.".into(),
            "Refill continuously,\nnot once a second.".into(),
        ],
        constraints: vec!["No global locks on the request path.".into()],
        acceptance: vec![
            "cargo test passes".into(),
            "a burst of 101 requests gets one Deny".into(),
        ],
        ..PromptArgs::default()
    };
    let prompt = assemble_prompt(TASK, &args).unwrap();
    assert_snapshot("full.expected.md", &prompt);
    assert!(
        prompt.contains("{{task}} in a document"),
        "documents are not templated"
    );
    assert!(
        prompt.contains("QUESTION:"),
        "a contract asks the model to stop and ask"
    );
}

#[test]
fn guardrails_alone_still_ask_to_stop_rather_than_widen_scope() {
    in_crate_root();
    let args = PromptArgs {
        guardrails: Some(rel("guardrails.md")),
        ..PromptArgs::default()
    };
    let prompt = assemble_prompt(TASK, &args).unwrap();
    assert_snapshot("guardrails-only.expected.md", &prompt);
}

#[test]
fn lists_without_documents_do_not_add_the_scope_rule() {
    let args = PromptArgs {
        task_type: Some("migration".into()),
        requirements: vec!["Keep the old column until the backfill ends.".into()],
        ..PromptArgs::default()
    };
    let prompt = assemble_prompt("Move users.email to a separate table.", &args).unwrap();
    assert_snapshot("lists-only.expected.md", &prompt);
    assert!(!prompt.contains("QUESTION:"));
}

#[test]
fn unusable_documents_are_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (dir.path().join("missing.md"), None, "--contract "),
        (
            dir.path().join("empty.md"),
            Some(b"  \n".to_vec()),
            "the file is empty",
        ),
        (
            dir.path().join("binary.md"),
            Some(vec![0xff, 0xfe, 0x00]),
            "not UTF-8 text",
        ),
        (
            dir.path().join("huge.md"),
            Some(vec![b'a'; 300 * 1024]),
            "larger than 256 KiB",
        ),
    ];
    for (path, content, expected) in cases {
        if let Some(bytes) = content {
            std::fs::write(&path, bytes).unwrap();
        }
        let args = PromptArgs {
            contract: Some(path.clone()),
            ..PromptArgs::default()
        };
        let err = assemble_prompt(TASK, &args).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::PromptFile {
                    flag: "contract",
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(expected) && msg.contains(&path.display().to_string()),
            "{msg}"
        );
    }
}

fn coder_prompt(args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_coder"))
        .arg("prompt")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _deadline = common::Deadline::kill_after(&child, common::COMMAND_DEADLINE);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn coder_prompt_prints_the_same_prompt_a_run_would_send() {
    let out = coder_prompt(&["--guardrails", "fixtures/prompt/guardrails.md", TASK], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    in_crate_root();
    let args = PromptArgs {
        guardrails: Some(rel("guardrails.md")),
        ..PromptArgs::default()
    };
    let expected = assemble_prompt(TASK, &args).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);

    // The task from stdin, sent as is.
    let out = coder_prompt(&["-"], "exact task\n");
    assert!(out.status.success());
    assert_eq!(out.stdout, b"exact task\n");
}

/// On a terminal the prompt ends with a newline (the shell's prompt started on its last
/// line); into a pipe it stays the very bytes (above). The terminal is `script`'s pty.
#[test]
fn coder_prompt_ends_its_line_on_a_terminal() {
    let command = format!("'{}' prompt 'a task'", env!("CARGO_BIN_EXE_coder"));
    let child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs coder on a pseudo-terminal");
    let _deadline = common::Deadline::kill_after(&child, common::COMMAND_DEADLINE);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // The terminal writes a newline as CR LF.
    assert!(
        out.stdout.ends_with(b"a task\r\n"),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn coder_prompt_reports_errors_on_one_line_with_the_config_exit_code() {
    let out = coder_prompt(&["--codex", "fixtures/prompt/nope.md", "task"], "");
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("coder prompt: --codex fixtures/prompt/nope.md: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(out.stdout.is_empty());

    let out = coder_prompt(&[], "   \n");
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no task given"));

    let out = coder_prompt(&["--no-such-flag", "task"], "");
    assert_eq!(out.status.code(), Some(2));
}
