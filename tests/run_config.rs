//! Bad input never reaches the child: each case ends in one `config_error` envelope (exit 78,
//! or 2 for a command-line usage error) and the child is not started.

mod common;

use common::{Coder, Fake, Outcome, steps};
use serde_json::json;

/// A fake that would succeed, so any run that gets as far as the child is visible.
fn fake() -> Fake {
    Fake::new(json!(steps::answer("should not run")))
}

fn assert_config_error(fake: &Fake, out: &Outcome, exit: i32) {
    let detail = out.assert_failure("config_error", exit);
    assert!(
        detail["exit_code"].is_null(),
        "no child ran: {}",
        out.explain()
    );
    assert!(!fake.has_record(), "the child must not be started");
}

fn run(fake: &Fake, configure: impl FnOnce(Coder) -> Coder) -> Outcome {
    configure(fake.coder()).run()
}

#[test]
fn missing_cd() {
    let fake = fake();
    let out = run(&fake, |c| c.no_cd().arg("task"));
    assert_config_error(&fake, &out, 78);
    assert!(
        out.envelope["error"].as_str().unwrap().contains("--cd"),
        "{}",
        out.explain()
    );
}

#[test]
fn cd_that_does_not_exist() {
    let fake = fake();
    let missing = fake.root().join("nowhere");
    let out = run(&fake, |c| c.cd(&missing).arg("task"));
    assert_config_error(&fake, &out, 78);
    assert!(
        out.envelope["error"].as_str().unwrap().contains("nowhere")
            || out.detail()["message"]
                .as_str()
                .unwrap()
                .contains("nowhere"),
        "names the directory: {}",
        out.explain()
    );
}

#[test]
fn cd_that_is_a_file() {
    let fake = fake();
    let file = fake.root().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = run(&fake, |c| c.cd(&file).arg("task"));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn empty_prompt_argument() {
    let fake = fake();
    let out = run(&fake, |c| c.arg(""));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn blank_prompt_argument() {
    let fake = fake();
    let out = run(&fake, |c| c.arg("  \n\t "));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn empty_prompt_on_stdin() {
    let fake = fake();
    let out = run(&fake, |c| c.stdin(""));
    assert_config_error(&fake, &out, 78);
    let fake = fake_again();
    let out = run(&fake, |c| c.arg("-").stdin("\n"));
    assert_config_error(&fake, &out, 78);
}

fn fake_again() -> Fake {
    fake()
}

#[test]
fn no_prompt_and_no_stdin() {
    // stdin is /dev/null: nothing to read.
    let fake = fake();
    let out = run(&fake, |c| c);
    assert_config_error(&fake, &out, 78);
}

#[test]
fn negative_durations() {
    for args in [["--timeout=-1", "task"], ["--max-duration=-5", "task"]] {
        let fake = fake();
        let out = run(&fake, |c| c.args(args));
        assert_config_error(&fake, &out, 78);
    }
}

#[test]
fn non_numeric_durations() {
    for args in [
        ["--timeout", "soon"],
        ["--max-duration", "1h"],
        ["--timeout", "NaN"],
    ] {
        let fake = fake();
        let out = run(&fake, |c| c.args(args).arg("task"));
        assert_config_error(&fake, &out, 78);
    }
}

/// A timeout below a nanosecond is zero: refused like 0, not a run stopped at once.
#[test]
fn a_timeout_that_rounds_to_zero() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--timeout", "0.0000000001", "task"]));
    assert_config_error(&fake, &out, 78);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(error.contains("greater than 0 seconds"), "{error}");
}

#[test]
fn malformed_request_json() {
    for body in [
        "{not json",
        "[1, 2]",
        "{\"PROMPT\": 5}",
        "{\"PROMPT\": \"task\", \"timeout\": \"soon\"}",
    ] {
        let fake = fake();
        let path = fake.root().join("request.json");
        std::fs::write(&path, body).unwrap();
        let out = run(&fake, |c| c.arg("--request").arg(&path));
        assert_config_error(&fake, &out, 78);
    }
}

#[test]
fn request_file_that_does_not_exist() {
    let fake = fake();
    let path = fake.root().join("no-request.json");
    let out = run(&fake, |c| c.arg("--request").arg(&path));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn malformed_request_on_stdin() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--request", "-"]).stdin("{\"PROMPT\": "));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn request_with_bad_cd() {
    let fake = fake();
    let body = json!({"PROMPT": "task", "cd": fake.root().join("nowhere")}).to_string();
    let out = run(&fake, |c| c.no_cd().args(["--request", "-"]).stdin(body));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn session_id_that_is_not_a_uuid() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--session-id", "not-a-session", "task"]));
    assert_config_error(&fake, &out, 78);
}

#[test]
fn unknown_flag_is_a_usage_error_with_an_envelope() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--frobnicate", "task"]));
    assert_config_error(&fake, &out, 2);
    assert!(
        out.envelope["error"]
            .as_str()
            .unwrap()
            .contains("--frobnicate")
            || out.detail()["message"]
                .as_str()
                .unwrap()
                .contains("--frobnicate"),
        "names the flag: {}",
        out.explain()
    );
}

/// A flag that needs another names the missing one (clap lists it on a line of its own).
#[test]
fn a_flag_missing_the_flag_it_needs_is_named() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--worktree-base", "main", "task"]));
    assert_config_error(&fake, &out, 2);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(
        error.contains("required arguments were not provided: --worktree"),
        "{error}"
    );
}

/// clap says only that "one or more arguments" are not UTF-8: coder names which, and a
/// non-UTF-8 path before it (paths may be any bytes) is not blamed.
#[test]
fn a_non_utf8_argument_is_named() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let bytes = |b: &[u8]| OsString::from_vec(b.to_vec());
    let fake = fake();
    let contract = fake.root().join(bytes(b"contract-\xff.md"));
    std::fs::write(&contract, "be careful").unwrap();
    let out = run(&fake, |c| {
        c.arg("--contract")
            .arg(&contract)
            .arg("--timeout")
            .arg(bytes(b"3\xff"))
            .arg("task")
    });
    assert_config_error(&fake, &out, 2);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(error.contains("of --timeout is not valid UTF-8"), "{error}");

    let out = run(&fake, |c| c.arg(bytes(b"fix \xfe it")));
    assert_config_error(&fake, &out, 2);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(
        error.contains("the PROMPT argument \"fix \u{fffd} it\" is not valid UTF-8"),
        "{error}"
    );
}

/// The commonest slips get clap's tips and coder's own: a task of several words without
/// quotes, a misspelt flag.
#[test]
fn usage_errors_carry_their_tips() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["fix", "the", "bug"]));
    assert_config_error(&fake, &out, 2);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(
        error.contains("unexpected argument 'the'") && error.contains("put it in quotes"),
        "{error}"
    );
    let out = run(&fake, |c| c.args(["--timeot", "5", "task"]));
    assert_config_error(&fake, &out, 2);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(
        error.contains("a similar argument exists: '--timeout'"),
        "{error}"
    );
}

#[test]
fn unknown_sandbox_mode_is_a_usage_error() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--sandbox", "wide-open", "task"]));
    assert_config_error(&fake, &out, 2);
}

/// The claude CLI takes at most 10 MiB (10485760 UTF-16 code units) of prompt on its stdin
/// and exits with a vendor-looking error past that: coder refuses such a prompt itself,
/// naming the limit, and an endless stdin is not buffered until memory runs out.
#[test]
fn a_prompt_over_the_clis_limit_is_refused_naming_it() {
    const LIMIT: usize = 10 * 1024 * 1024;
    let fake = fake();
    let out = run(&fake, |c| c.stdin(vec![b'x'; LIMIT + 1]).arg("-"));
    assert_config_error(&fake, &out, 78);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(
        error.contains("too large") && error.contains("10 MiB") && error.contains("10485760"),
        "{error}"
    );

    // Multi-byte text counts as the CLI counts it: 4 Mi CJK characters are 12 MiB of UTF-8
    // but only 4 Mi code units, and reach the child.
    let big = Fake::new(json!(steps::answer("read it")));
    let out = big
        .coder()
        .stdin("写".repeat(4 * 1024 * 1024).into_bytes())
        .arg("-")
        .deadline(std::time::Duration::from_secs(60))
        .run();
    out.assert_success("read it");

    // More than 3 bytes per code unit's worth is refused without reading it all.
    let endless = fake_with_endless_stdin();
    assert_eq!(endless.status.code(), Some(78), "{endless:?}");
    let envelope: serde_json::Value = serde_json::from_slice(&endless.stdout).unwrap();
    assert!(
        envelope["error"]
            .as_str()
            .is_some_and(|e| e.contains("10 MiB")),
        "{envelope}"
    );
}

/// `coder --cd DIR -` with /dev/zero as its stdin.
fn fake_with_endless_stdin() -> std::process::Output {
    use common::Bounded;
    let fake = fake();
    let zero = std::fs::File::open("/dev/zero").unwrap();
    std::process::Command::new(common::CODER)
        .arg("--cd")
        .arg(fake.workspace())
        .arg("--claude-bin")
        .arg(fake.bin())
        .arg("-")
        .env("CODER_STATE_DIR", fake.state_dir())
        .env("ANTHROPIC_AUTH_TOKEN", common::SECRET_TOKEN)
        .stdin(zero)
        .output_within(std::time::Duration::from_secs(60))
}

/// `--backend ""` would silently mean the default backend: it is refused with a
/// `config_error` that says the flag is empty (also through `coder doctor`). An empty
/// variable is unset, as every `CODER_*` variable is: `CODER_BACKEND=` and `CODER_CONFIG=`
/// run with the defaults.
#[test]
fn an_empty_backend_flag_is_refused_and_empty_variables_are_unset() {
    let fake = fake();
    let out = run(&fake, |c| c.args(["--backend", "", "task"]));
    assert_config_error(&fake, &out, 78);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(error.contains("--backend is empty"), "{error}");

    let ok = Fake::new(json!(steps::answer("ran")));
    let out = ok
        .coder()
        .env("CODER_BACKEND", "")
        .env("CODER_CONFIG", "")
        .arg("task")
        .run();
    out.assert_success("ran");

    use common::Bounded;
    let doctor = std::process::Command::new(common::CODER)
        .args(["doctor", "--backend", ""])
        .env("CODER_STATE_DIR", fake.state_dir())
        .output_bounded();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(1), "{report}");
    assert!(report.contains("--backend is empty"), "{report}");
}

/// The options of a check (`--verify-timeout`, `--repair-turns`, `--no-verify-baseline`,
/// or their `--request` keys) without `--verify` would be silently ignored: each is a
/// `config_error` naming the option and the `--verify` it needs. With `verify` in the
/// request JSON the flag is accepted.
#[test]
fn verify_options_without_verify_are_refused() {
    let fake = fake();
    let flags: [&[&str]; 3] = [
        &["--verify-timeout", "30"],
        &["--repair-turns", "2"],
        &["--no-verify-baseline"],
    ];
    for flag in flags {
        let out = run(&fake, |c| c.args(flag).arg("task"));
        assert_config_error(&fake, &out, 78);
        let error = out.envelope["error"].as_str().unwrap();
        assert!(
            error.contains(flag[0]) && error.contains("needs --verify"),
            "{error}"
        );
    }
    let out = run(&fake, |c| {
        c.args(["--request", "-"])
            .stdin(json!({"PROMPT": "task", "verify_timeout": 30}).to_string())
    });
    assert_config_error(&fake, &out, 78);

    let ok = Fake::new(json!(steps::answer("checked")));
    let out = ok
        .coder()
        .args(["--sandbox", "danger-full-access", "--request", "-"])
        .args(["--verify-timeout", "30", "--no-verify-baseline"])
        .stdin(json!({"PROMPT": "task", "verify": "true"}).to_string())
        .run();
    out.assert_success("checked");
    assert_eq!(out.envelope["verification"]["verdict"], "passed");
}

/// An infinite duration is refused naming the flag; only `--max-duration`, for which 0
/// means "none", is told how to ask for no limit (an idle timeout or a kill grace has no
/// such value, and was sent to `--max-duration` before).
#[test]
fn an_infinite_duration_gets_a_hint_only_where_one_exists() {
    let fake = fake();
    for (flag, hint) in [
        ("--max-duration", Some("use --max-duration 0")),
        ("--timeout", None),
        ("--kill-grace", None),
        ("--verify-timeout", None),
    ] {
        let out = run(&fake, |c| c.args([flag, "inf", "--verify", "true", "task"]));
        assert_config_error(&fake, &out, 78);
        let error = out.envelope["error"].as_str().unwrap();
        assert!(error.contains(flag) && error.contains("finite"), "{error}");
        match hint {
            Some(hint) => assert!(error.contains(hint), "{error}"),
            None => assert!(!error.contains("--max-duration"), "{error}"),
        }
    }
}

/// `--transcript` naming a directory is refused before the run, which would otherwise go
/// ahead and lose its record with only a warning.
#[test]
fn a_transcript_that_is_a_directory_is_refused() {
    let fake = fake();
    let dir = fake.root().join("records");
    std::fs::create_dir(&dir).unwrap();
    let out = run(&fake, |c| c.arg("--transcript").arg(&dir).arg("task"));
    assert_config_error(&fake, &out, 78);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(
        error.contains("--transcript") && error.contains("is a directory"),
        "{error}"
    );
}

/// A `--scope` glob that can never match a changed path (absolute, or leaving the
/// workspace with `..`) would make every change a violation: refused, saying scope globs
/// are relative to the workspace.
#[test]
fn a_scope_outside_the_workspace_is_refused() {
    let fake = fake();
    for glob in ["/etc/**", "../sibling/**", "src/../../x"] {
        let out = run(&fake, |c| c.args(["--scope", glob, "task"]));
        assert_config_error(&fake, &out, 78);
        let error = out.envelope["error"].as_str().unwrap();
        assert!(
            error.contains(glob) && error.contains("relative to the workspace"),
            "{error}"
        );
    }
}

/// An empty `cd` in the `--request` JSON says the value is empty, instead of "--cd : no
/// such directory".
#[test]
fn an_empty_cd_in_the_request_is_named_empty() {
    let fake = fake();
    let out = run(&fake, |c| {
        c.no_cd()
            .args(["--request", "-"])
            .stdin(json!({"PROMPT": "task", "cd": ""}).to_string())
    });
    assert_config_error(&fake, &out, 78);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(error.contains("--cd is empty"), "{error}");
}
