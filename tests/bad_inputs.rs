//! Bad input a user or an orchestrator gives, refused up front with a clear message and the
//! error kind DESIGN §2 names for it: a workspace no confined run may have, duplicate keys
//! in `--request` JSON, empty flag values, a negative MCP `wait_s`.

mod common;

use common::{Bounded, Fake, steps};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// A refused workspace (`/`, a system tree, the home directory, an ancestor of it) is the
/// caller's `--cd` to change: `config_error` (78) naming the path, before anything reads the
/// workspace (it used to be `sandbox_error`, 71, after the change ledger had walked all of
/// `/`).
#[test]
fn a_refused_workspace_is_a_config_error_and_nothing_starts() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let home = fake.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home = std::fs::canonicalize(&home).unwrap();
    let cases: [(&Path, &str); 4] = [
        (Path::new("/"), "filesystem root"),
        (Path::new("/etc"), "system tree"),
        (&home, "home directory"),
        (fake.root(), "home directory or one of its ancestors"),
    ];
    for (dir, why) in cases {
        let out = fake
            .coder()
            .env("HOME", &home)
            .cd(dir)
            .deadline(Duration::from_secs(20))
            .arg("task")
            .run();
        let detail = out.assert_failure("config_error", 78);
        let message = detail["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("--cd {}: ", dir.display())) && message.contains(why),
            "{}",
            out.explain()
        );
        assert!(
            out.envelope.get("changes").is_none(),
            "nothing read the workspace: {}",
            out.explain()
        );
        assert!(!fake.has_record(), "the child ran in {dir:?}");
    }
}

/// A key given twice in the `--request` JSON (or in `--answers`/`--json-schema` JSON) is
/// refused naming the key; the last one used to win silently.
#[test]
fn a_key_given_twice_in_request_json_is_refused() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let request = fake.root().join("request.json");
    std::fs::write(
        &request,
        r#"{"PROMPT": "fix the bug", "sandbox": "read-only", "sandbox": "danger-full-access"}"#,
    )
    .unwrap();
    let out = fake.coder().arg("--request").arg(&request).run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap();
    assert!(
        message.contains("the key \"sandbox\" is given twice"),
        "{}",
        out.explain()
    );
    // From stdin, and nested inside a value the request carries.
    let out = fake
        .coder()
        .arg("--request")
        .arg("-")
        .stdin(r#"{"PROMPT": "x", "json_schema": {"type": "object", "type": "array"}}"#)
        .run();
    let detail = out.assert_failure("config_error", 78);
    assert!(
        detail["message"]
            .as_str()
            .unwrap()
            .contains("\"type\" is given twice (at $.json_schema.type)"),
        "{}",
        out.explain()
    );
    let out = fake
        .coder()
        .arg("--json-schema")
        .arg(r#"{"type": "object", "required": [], "required": ["a"]}"#)
        .arg("task")
        .run();
    let detail = out.assert_failure("config_error", 78);
    assert!(
        detail["message"]
            .as_str()
            .unwrap()
            .contains("\"required\" is given twice"),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child ran");
}

/// A flag given an empty (or blank) value, as a shell variable that was not set gives it,
/// is a usage error naming the flag; `--target ""` and the like used to be taken as
/// nothing, `--store ""` as the default store.
#[test]
fn an_empty_flag_value_is_refused_naming_the_flag() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let flags = [
        "--target",
        "--task-type",
        "--requirement",
        "--constraint",
        "--acceptance",
        "--deny",
        "--protect",
        "--allow-host",
        "--store",
        "--json-schema",
        "--answers",
    ];
    for flag in flags {
        for value in ["", "  "] {
            let out = fake.coder().arg(flag).arg(value).arg("task").run();
            let detail = out.assert_failure("config_error", 2);
            let message = detail["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("for '{flag} <")) && message.contains("it is empty"),
                "{flag} {value:?}: {}",
                out.explain()
            );
        }
    }
    // An empty CODER_STORE still counts as unset, as every CODER_* variable does.
    fake.coder()
        .env("CODER_STORE", "")
        .arg("task")
        .run()
        .assert_success("should not run");
    // `coder sandbox` refuses them too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["sandbox", "--cd"])
        .arg(fake.workspace())
        .args(["--deny", "", "--", "true"])
        .stdin(std::process::Stdio::null())
        .output_bounded();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("'--deny <GLOB>': it is empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The same values empty in a `--request` JSON say what is empty, not that a file named ""
/// cannot be read.
#[test]
fn an_empty_value_in_request_json_says_it_is_empty() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let cases = [
        (
            json!({"PROMPT": "x", "json_schema": ""}),
            "\"json_schema\" in the --request JSON is empty: give the JSON Schema",
        ),
        (
            json!({"PROMPT": "x", "answers": " "}),
            "\"answers\" in the --request JSON is empty: expected a list of answers",
        ),
    ];
    for (request, says) in cases {
        let out = fake
            .coder()
            .arg("--request")
            .arg("-")
            .stdin(request.to_string())
            .run();
        let detail = out.assert_failure("config_error", 78);
        assert!(
            detail["message"].as_str().unwrap().contains(says),
            "{}",
            out.explain()
        );
    }
    assert!(!fake.has_record(), "the child ran");
}

/// A run refused before it starts for `--worktree` outside a git work tree, or a `--backend
/// auto` with no usable backend, still reports the run's limits in `error_detail` (they
/// were 0 and 0).
#[test]
fn a_run_refused_before_it_starts_reports_its_limits() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    for args in [&["--worktree"][..], &["--backend", "auto:glm"][..]] {
        let out = fake
            .coder()
            .args(args)
            .args(["--timeout", "5", "--max-duration", "9", "task"])
            .env_remove("ZAI_API_KEY")
            .run();
        let detail = out.assert_failure("config_error", 78);
        assert_eq!(detail["idle_timeout_s"], json!(5.0), "{}", out.explain());
        assert_eq!(detail["max_duration_s"], json!(9.0), "{}", out.explain());
    }
    assert!(!fake.has_record(), "the child ran");
}

/// `coder help` and `coder help SUBCOMMAND` print the usage, as git and cargo do (it was
/// taken as a prompt and failed with "--cd is required").
#[test]
fn help_as_a_word_prints_the_usage() {
    for (args, says) in [
        (&["help"][..], "Usage: coder"),
        (&["help", "runs"][..], "Usage: coder runs"),
        (&["help", "sandbox"][..], "Usage: coder sandbox"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(args)
            .output_bounded();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(stdout.contains(says), "{args:?}: {stdout}");
        assert!(!stdout.contains("--cd is required"), "{args:?}: {stdout}");
    }
}

/// `coder help NAME` for a name that is no subcommand says so and fails; it printed the
/// top usage and exited 0, as if that were the subcommand's help.
#[test]
fn help_for_an_unknown_subcommand_fails_and_names_the_known_ones() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["help", "nosuch"])
        .output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr.contains("no subcommand \"nosuch\""), "{stderr}");
    assert!(
        stderr.contains("runs") && stderr.contains("sandbox"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
}

/// A `config_error` follows one rule for `changes` and `transcript`: one about the request
/// itself (a flag, the prompt, `--cd`) comes before any run and has neither; one of a run
/// whose setup failed has `changes` (none: nothing of it started) and its transcript. A
/// `--worktree` outside git and an unknown `--backend auto:` name had neither, while a
/// missing key or cassette, failing at the same point of a valid request, had both.
#[test]
fn config_errors_carry_changes_and_transcript_by_one_rule() {
    let fake = Fake::new(json!(steps::answer("should not run")));
    let setup_failures: [&[&str]; 3] = [
        &["--worktree"],
        &["--backend", "auto:nosuch"],
        &["--backend", "replay:/nonexistent/cassette.json"],
    ];
    for args in setup_failures {
        let out = fake.coder().args(args).arg("task").run();
        out.assert_failure("config_error", 78);
        assert_eq!(
            out.envelope["changes"]["files_changed"],
            json!(0),
            "{args:?}: {}",
            out.explain()
        );
        let transcript = out.envelope["transcript"].as_str().unwrap_or_else(|| {
            panic!("{args:?}: no transcript: {}", out.explain());
        });
        let text = std::fs::read_to_string(transcript).unwrap();
        assert!(text.contains("\"config_error\""), "{args:?}: {text}");
        // The backend is named as a run's transcript names it (it said "default").
        if args == ["--worktree"] {
            assert!(text.contains("\"backend\":\"inherit\""), "{text}");
        }
    }
    let request_refusals: [&[&str]; 2] = [&["--timeout", "abc"], &["--max-turns", "0"]];
    for args in request_refusals {
        let out = fake.coder().args(args).arg("task").run();
        out.assert_failure("config_error", 78);
        assert!(
            out.envelope.get("changes").is_none() && out.envelope.get("transcript").is_none(),
            "{args:?}: {}",
            out.explain()
        );
    }
    assert!(!fake.has_record(), "the child ran");
}
