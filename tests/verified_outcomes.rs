//! Verified outcomes (DESIGN §8) end to end: the built `coder`, the real `claude` CLI and
//! coder's replay backend. The change ledger (git and plain workspaces, the user's index
//! untouched), each `--verify` verdict with repair turns, both fallback triggers and
//! `--scope`. Faults of the check itself (a hang, a flood) and bad input run against the
//! fake child, which needs no CLI.
//!
//! The CLI comes from `CODER_TEST_CLAUDE_BIN`, else the project-local install; without it
//! the CLI tests skip loudly, except under CI, where they fail.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Coder, Fake, ReplayScene};
use serde_json::{Value, json};

/// The shared replay scene, with this file's helpers.
struct Scene(ReplayScene);

impl std::ops::Deref for Scene {
    type Target = ReplayScene;

    fn deref(&self) -> &ReplayScene {
        &self.0
    }
}

impl Scene {
    fn new(cassette: &str) -> Scene {
        Scene(ReplayScene::new(cassette, 0))
    }

    fn coder(&self) -> Coder {
        self.coder_within(Duration::from_secs(120))
    }

    fn ws(&self) -> &Path {
        self.workspace()
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.ws().join(name), text).unwrap();
    }
}

fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    out.stdout
}

/// `(path, status, added, removed)` of every listed change.
fn files(envelope: &Value) -> Vec<(String, String, u64, u64)> {
    envelope["changes"]["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes.files: {envelope}"))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["status"].as_str().unwrap().to_owned(),
                f["lines_added"].as_u64().unwrap(),
                f["lines_removed"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn expected_ledger() -> Vec<(String, String, u64, u64)> {
    [
        ("gone.txt", "deleted", 0, 2),
        ("keep.txt", "modified", 1, 1),
        ("new.txt", "added", 2, 0),
    ]
    .into_iter()
    .map(|(p, s, a, r)| (p.to_owned(), s.to_owned(), a, r))
    .collect()
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_ledger_of_a_plain_directory() {
    let scene = Scene::new("ledger.json");
    scene.write("keep.txt", "first\nold\n");
    scene.write("gone.txt", "a\nb\n");
    let out = scene.coder().args(["--return-diff", "change things"]).run();
    out.assert_success("Added, edited and deleted.");
    assert_eq!(files(&out.envelope), expected_ledger(), "{}", out.explain());
    let changes = &out.envelope["changes"];
    assert_eq!(changes["files_changed"], 3);
    assert_eq!(changes["lines_added"], 3);
    assert_eq!(changes["lines_removed"], 3);
    assert_eq!(changes["truncated"], false);
    let diff = out.envelope["diff"]["unified"].as_str().unwrap();
    assert!(diff.contains("+new\n") && diff.contains("-old\n"), "{diff}");
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_ledger_of_a_git_repo_leaves_the_users_index_alone() {
    let scene = Scene::new("ledger.json");
    let ws = scene.ws();
    scene.write("keep.txt", "first\nold\n");
    scene.write("gone.txt", "a\nb\n");
    scene.write(".gitignore", "ignored.log\n");
    git(ws, &["init", "-q"]);
    git(ws, &["add", "keep.txt", "gone.txt", ".gitignore"]);
    git(ws, &["commit", "-qm", "base"]);
    // Something staged, and an ignored file: both must stay as they are.
    scene.write("staged.txt", "s\n");
    git(ws, &["add", "staged.txt"]);
    scene.write("ignored.log", "noise\n");
    let index_before = std::fs::read(ws.join(".git/index")).unwrap();
    let cached_before = git(ws, &["diff", "--cached", "--name-status"]);

    let out = scene.coder().args(["--return-diff", "change things"]).run();
    out.assert_success("Added, edited and deleted.");
    assert_eq!(files(&out.envelope), expected_ledger(), "{}", out.explain());
    let diff = out.envelope["diff"]["unified"].as_str().unwrap();
    assert!(diff.contains("diff --git a/keep.txt b/keep.txt"), "{diff}");
    assert_eq!(std::fs::read(ws.join(".git/index")).unwrap(), index_before);
    assert_eq!(
        git(ws, &["diff", "--cached", "--name-status"]),
        cached_before
    );
    // No object was added to the user's repository either.
    let count = String::from_utf8(git(ws, &["count-objects"])).unwrap();
    assert!(count.starts_with("0 objects") || !count.is_empty());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_ledger_is_in_failures_too() {
    let scene = Scene::new("ledger.json");
    scene.write("keep.txt", "first\nold\n");
    scene.write("gone.txt", "a\nb\n");
    // The CLI stops at its turn limit after the first tool call: new.txt exists.
    let out = scene
        .coder()
        .args(["--max-turns", "1", "change things"])
        .run();
    out.assert_failure("max_turns", 1);
    let listed = files(&out.envelope);
    assert!(
        listed
            .iter()
            .any(|(p, s, _, _)| p == "new.txt" && s == "added"),
        "{}",
        out.explain()
    );
}

fn verification(out: &common::Outcome) -> &Value {
    &out.envelope["verification"]
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn verify_fixed_by_a_repair_turn() {
    let scene = Scene::new("verify_repair.json");
    let out = scene
        .coder()
        .args([
            "--return-metrics",
            "--verify",
            "grep -q fixed ok.txt",
            "write ok.txt",
        ])
        .run();
    out.assert_success("Fixed ok.txt.");
    let v = verification(&out);
    assert_eq!(v["verdict"], "fixed", "{}", out.explain());
    assert_eq!(v["repair_turns"], 1);
    // --return-metrics: what each part of the check cost.
    let times = &out.envelope["metrics"]["outcome_ms"];
    for key in [
        "ledger_before_ms",
        "ledger_after_ms",
        "verify_baseline_ms",
        "verify_after_agent_ms",
        "verify_final_ms",
    ] {
        assert!(times[key].is_u64(), "{key}: {times}");
    }
    assert_eq!(times["verify_final_ms"], v["final"]["duration_ms"]);
    assert_eq!(
        times["repair_turns_ms"].as_array().map(Vec::len),
        Some(1),
        "{times}"
    );
    assert!(times.get("fallback_ms").is_none(), "{times}");
    assert_eq!(v["baseline"]["passed"], false);
    assert_eq!(v["after_agent"]["passed"], false);
    assert_eq!(v["final"]["exit_code"], 0);
    assert_eq!(
        std::fs::read_to_string(scene.ws().join("ok.txt")).unwrap(),
        "fixed\n"
    );
}

/// `coder runs show` tells what the run changed and how its check went, read back from
/// the run's journal (human text and `--json`).
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn runs_show_tells_the_changes_and_the_verification() {
    let scene = Scene::new("verify_repair.json");
    let out = scene
        .coder()
        .args(["--verify", "grep -q fixed ok.txt", "write ok.txt"])
        .run();
    out.assert_success("Fixed ok.txt.");
    let show = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_coder"));
        cmd.args(["runs", "show", "last", "--state-dir"])
            .arg(scene.fake.state_dir());
        if json {
            cmd.arg("--json");
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let text = show(false);
    assert!(
        text.contains("verification `grep -q fixed ok.txt`: fixed (1 repair turn(s))"),
        "{text}"
    );
    assert!(text.contains("baseline    failed, exit 2"), "{text}");
    assert!(text.contains("final       passed, exit 0"), "{text}");
    assert!(text.contains("added    ok.txt (+1 -0)"), "{text}");
    let account: Value = serde_json::from_str(&show(true)).unwrap();
    assert_eq!(account["outcome"]["verification"]["verdict"], "fixed");
    assert_eq!(
        account["outcome"]["changes"], out.envelope["changes"],
        "{account}"
    );
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn verify_still_failing_without_repair_is_verify_failed() {
    let scene = Scene::new("verify_repair.json");
    let out = scene
        .coder()
        .args([
            "--verify",
            "echo checking; grep -q fixed ok.txt",
            "--repair-turns",
            "0",
            "write ok.txt",
        ])
        .run();
    let detail = out.assert_failure("verify_failed", 3);
    assert_eq!(detail["exit_code"], 1);
    let v = verification(&out);
    assert_eq!(v["verdict"], "still_failing", "{}", out.explain());
    assert_eq!(v["repair_turns"], 0);
    assert_eq!(v["final"]["tail"], json!(["checking"]));
    // The result of the agent is kept, and so are the changes.
    assert_eq!(out.envelope["result"], "Wrote ok.txt.");
    assert_eq!(out.envelope["changes"]["files_changed"], 1);
    // The envelope says how to have the agent go on (it said nothing): the same session,
    // on the same check.
    let session = out.envelope["SESSION_ID"].as_str().unwrap_or_default();
    let hint = detail["resume_hint"].as_str().unwrap_or_default();
    assert!(
        !session.is_empty()
            && hint.starts_with(
                "the check still fails after the agent's work; to have the agent go on: coder --cd "
            )
            && hint.contains(&format!(
                "--session-id {session} --verify 'echo checking; grep -q fixed ok.txt' \"the \
                 check still fails: fix it\""
            )),
        "{}",
        out.explain()
    );
}

/// A repair turn that fails on its own (here the backend: the cassette has no turn left
/// for it) while the check after it still fails: the run is `verify_failed` (exit 3), as
/// DESIGN §8 has a final failure, the turn's failure in `verification.repair_failed` and
/// its provider error in `error_detail`; no further repair turn is spent on a failing
/// backend. It ended `upstream_error` (exit 1), the verdict `still_failing` only in
/// `verification` (newuser32).
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_repair_turn_that_fails_leaves_the_run_verify_failed() {
    let scene = Scene::new("plain.json");
    let out = scene
        .coder()
        .args([
            "--verify",
            "test -f done.txt",
            "--repair-turns",
            "3",
            "do it",
        ])
        .run();
    let detail = out.assert_failure("verify_failed", 3);
    let v = verification(&out);
    assert_eq!(v["verdict"], "still_failing", "{}", out.explain());
    assert_eq!(v["repair_turns"], 1, "{}", out.explain());
    assert_eq!(v["repair_failed"]["turn"], 1, "{}", out.explain());
    assert_eq!(v["repair_failed"]["error_kind"], "upstream_error");
    assert!(
        v["repair_failed"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("exhausted")),
        "{}",
        out.explain()
    );
    let error = out.envelope["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("the --verify check failed with exit code 1; the repair turn before it failed (upstream_error: "),
        "{error}"
    );
    assert_eq!(
        detail["provider_error"]["http_status"],
        400,
        "{}",
        out.explain()
    );
    assert!(
        detail["resume_hint"]
            .as_str()
            .is_some_and(|h| h.contains("--verify 'test -f done.txt'")),
        "{}",
        out.explain()
    );
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn verify_regressed_and_passed() {
    let scene = Scene::new("verify_repair.json");
    let out = scene
        .coder()
        .args([
            "--verify",
            "! grep -q broken ok.txt 2>/dev/null",
            "--repair-turns",
            "0",
            "write ok.txt",
        ])
        .run();
    out.assert_failure("verify_failed", 3);
    assert_eq!(
        verification(&out)["verdict"],
        "regressed",
        "{}",
        out.explain()
    );

    let scene = Scene::new("verify_repair.json");
    let out = scene
        .coder()
        .args(["--verify", "test -d .", "write ok.txt"])
        .run();
    out.assert_success("Wrote ok.txt.");
    let v = verification(&out);
    assert_eq!(v["verdict"], "passed", "{}", out.explain());
    assert_eq!(v["repair_turns"], 0);
    assert_eq!(v["baseline"]["passed"], true);
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn verify_runs_inside_the_sandbox() {
    let scene = Scene::new("verify_repair.json");
    // A check that writes outside the workspace is refused by the run's sandbox.
    let outside = scene.fake.root().join("outside-verify.txt");
    let command = format!("echo x > {} && echo wrote", outside.display());
    let out = scene
        .coder()
        .args([
            "--verify",
            &command,
            "--no-verify-baseline",
            "--repair-turns",
            "0",
            "write ok.txt",
        ])
        .run();
    out.assert_failure("verify_failed", 3);
    assert!(!outside.exists(), "the check wrote outside the workspace");
    assert!(verification(&out)["baseline"].is_null());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn fallback_after_a_failed_edit() {
    let scene = Scene::new("edit_fails.json");
    scene.write("a.txt", "alpha\n");
    let out = scene.coder().args(["update a.txt"]).run();
    out.assert_success("Wrote a.txt.");
    let fallback = &out.envelope["fallback"];
    assert_eq!(fallback["trigger"], "edit_failed", "{}", out.explain());
    assert_eq!(fallback["files"], json!(["a.txt"]));
    assert_eq!(fallback["applied"], true);
    let why = fallback["why"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("an Edit call failed to apply")
            && why.contains("(a.txt)")
            && why.ends_with("that turn changed files: check them (changes, --return-diff)"),
        "{why}"
    );
    assert_eq!(
        files(&out.envelope),
        vec![("a.txt".into(), "modified".into(), 1, 0)]
    );
}

/// A fallback turn that changes no file either (here it writes what the file already
/// holds): `fallback.why` and a warning say the work the answer describes is not in the
/// workspace. The envelope said only `"applied": false`, beside `success: true`, and
/// `trigger` named the cause with no sentence of what coder did (newuser32).
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_fallback_turn_that_changes_nothing_says_so() {
    let scene = Scene::new("edit_fails.json");
    scene.write("a.txt", "alpha\nbeta\n");
    let out = scene.coder().args(["update a.txt"]).run();
    let fallback = &out.envelope["fallback"];
    assert_eq!(fallback["trigger"], "edit_failed", "{}", out.explain());
    assert_eq!(fallback["applied"], false, "{}", out.explain());
    let why = fallback["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("one more turn asking for the complete files with the Write tool")
            && why.ends_with("that turn changed no file either: the work the answer describes is not in the workspace"),
        "{why}"
    );
    let warned = out.envelope["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|w| w.as_str() == Some(format!("weak-model fallback: {why}").as_str()));
    assert!(warned, "{}", out.explain());
}

/// The fallback turn counts against `--max-turns`: with the budget spent by the first
/// attempt, no fallback turn is taken and the envelope says why.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn no_fallback_when_max_turns_is_used_up() {
    let scene = Scene::new("edit_fails.json");
    scene.write("a.txt", "alpha\n");
    let out = scene
        .coder()
        .args(["--max-turns", "2", "update a.txt"])
        .run();
    out.assert_success("Updated a.txt.");
    assert!(out.envelope.get("fallback").is_none(), "{}", out.explain());
    let warnings = out.envelope["warnings"].to_string();
    assert!(
        warnings.contains("was not tried: --max-turns 2 is used up"),
        "{}",
        out.explain()
    );
    // The file is as the failed edit left it: nobody wrote it.
    assert_eq!(
        std::fs::read_to_string(scene.ws().join("a.txt")).unwrap(),
        "alpha\n"
    );
    // With one more turn of budget, the fallback runs: its Write fits in it, its answer
    // does not. The error names the user's --max-turns 3, not the CLI's "(1)" (the turns
    // the fallback had left), and says the fallback counts against it.
    let scene = Scene::new("edit_fails.json");
    scene.write("a.txt", "alpha\n");
    let out = scene
        .coder()
        .args(["--max-turns", "3", "update a.txt"])
        .run();
    assert_eq!(
        out.envelope["fallback"]["applied"],
        true,
        "{}",
        out.explain()
    );
    let detail = out.assert_failure("max_turns", 1);
    assert_eq!(
        out.envelope["error"],
        "the weak-model fallback turn reached --max-turns 3: the agent's turns left it 1 of \
         them",
        "{}",
        out.explain()
    );
    assert!(
        detail["hint"]
            .as_str()
            .is_some_and(|h| h.contains("raise --max-turns (the fallback turn counts against it)")),
        "{}",
        out.explain()
    );
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn fallback_after_a_diff_in_the_answer() {
    let scene = Scene::new("diff_answer.json");
    scene.write("b.txt", "old\n");
    let out = scene.coder().args(["update b.txt"]).run();
    out.assert_success("Wrote b.txt.");
    let fallback = &out.envelope["fallback"];
    assert_eq!(fallback["trigger"], "diff_in_answer", "{}", out.explain());
    assert_eq!(fallback["files"], json!(["b.txt"]));
    assert_eq!(fallback["applied"], true);
    assert!(
        fallback["why"]
            .as_str()
            .is_some_and(|w| w.starts_with("the answer showed changes (b.txt) as a diff")),
        "{}",
        out.explain()
    );
    assert_eq!(
        std::fs::read_to_string(scene.ws().join("b.txt")).unwrap(),
        "new\n"
    );
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn no_fallback_in_a_read_only_sandbox() {
    let scene = Scene::new("diff_answer.json");
    scene.write("b.txt", "old\n");
    let out = scene
        .coder()
        .args(["--sandbox", "read-only", "update b.txt"])
        .run();
    assert!(out.envelope.get("fallback").is_none(), "{}", out.explain());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_change_outside_the_scope_is_a_scope_violation() {
    let scene = Scene::new("ledger.json");
    scene.write("keep.txt", "first\nold\n");
    scene.write("gone.txt", "a\nb\n");
    let out = scene
        .coder()
        .args(["--scope", "keep.txt", "--scope", "new.*", "change things"])
        .run();
    let detail = out.assert_failure("scope_violation", 4);
    assert_eq!(
        detail["out_of_scope"],
        json!(["gone.txt"]),
        "{}",
        out.explain()
    );
    // Nothing is reverted, and the hint says so, and what to do (there was none).
    assert!(!scene.ws().join("gone.txt").exists());
    assert_eq!(
        detail["hint"],
        "coder reverted nothing: they are still changed in the workspace (out_of_scope lists \
         them, changes has the rest); undo them if they do not belong to the task, or give a \
         --scope that covers them",
        "{}",
        out.explain()
    );
}

/// The same scope check asked through a `--request` JSON file, and its bad values.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_outcome_flags_work_through_a_request_file() {
    let scene = Scene::new("ledger.json");
    scene.write("keep.txt", "first\nold\n");
    scene.write("gone.txt", "a\nb\n");
    let request = json!({
        "PROMPT": "change things",
        "scope": ["keep.txt", "new.*"],
        "return_diff": true,
        "verify": "test -f keep.txt",
        "repair_turns": 0,
        "verify_timeout": 30,
    });
    let out = scene
        .coder()
        .args(["--request", "-"])
        .stdin(request.to_string())
        .run();
    let detail = out.assert_failure("scope_violation", 4);
    assert_eq!(
        detail["out_of_scope"],
        json!(["gone.txt"]),
        "{}",
        out.explain()
    );
    assert!(
        out.envelope["diff"]["unified"]
            .as_str()
            .is_some_and(|d| d.contains("keep.txt")),
        "{}",
        out.explain()
    );
    assert_eq!(out.envelope["verification"]["command"], "test -f keep.txt");

    let bad = scene
        .coder()
        .args(["--request", "-"])
        .stdin(json!({"PROMPT": "x", "repair_turns": 99}).to_string())
        .run();
    let detail = bad.assert_failure("config_error", 78);
    // Named as the request's field, not as a flag the caller never gave.
    assert!(
        bad.envelope["error"]
            .as_str()
            .unwrap()
            .starts_with("\"repair_turns\" in the --request JSON must be a whole number"),
        "{detail}"
    );
}

// ---- Faults and bad input: the fake child, no CLI needed. ----

fn fake_success() -> Fake {
    Fake::new(json!(common::steps::answer("done")))
}

#[test]
fn a_hanging_check_is_stopped_at_its_limit() {
    let fake = fake_success();
    let started = Instant::now();
    let out = fake
        .coder()
        .args([
            "--verify",
            "sleep 300 & sleep 300",
            "--verify-timeout",
            "1",
            "--no-verify-baseline",
            "--kill-grace",
            "0.2",
            "task",
        ])
        .run();
    out.assert_failure("verify_failed", 3);
    let final_check = &out.envelope["verification"]["final"];
    assert_eq!(final_check["timed_out"], true, "{}", out.explain());
    assert!(final_check["exit_code"].is_null());
    assert!(started.elapsed() < Duration::from_secs(30));
    common::assert_no_process_left(fake.marker());
}

/// A signal while the check after the agent runs cancels the run: the check's processes
/// are stopped, the envelope says which check was cancelled, and still lists what the agent
/// changed, its answer and its session (to resume it; both were lost before).
#[test]
fn a_signal_during_the_check_after_the_agent_cancels_with_the_changes() {
    let fake = Fake::new(json!([
        common::steps::init(),
        common::steps::touch("../made.txt"),
        common::steps::result_ok("done"),
    ]));
    let running = fake
        .coder()
        .args([
            "--verify",
            "echo after-agent-started; touch checking; sleep 300",
            "--no-verify-baseline",
            "--kill-grace",
            "0.2",
            "task",
        ])
        .spawn();
    common::wait_for_path(&fake.workspace().join("checking"), Duration::from_secs(30));
    running.signal(nix::sys::signal::Signal::SIGTERM);
    let out = running.wait();
    let detail = out.assert_failure("cancelled", 143);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the check after the agent"),
        "{}",
        out.explain()
    );
    assert_eq!(out.envelope["result"], "done", "{}", out.explain());
    let session = out.envelope["SESSION_ID"].as_str().unwrap_or_default();
    assert!(!session.is_empty(), "{}", out.explain());
    // How to go on: the same session with the same check (there was no hint).
    let hint = detail["resume_hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains(&format!("--session-id {session} --verify "))
            && hint.contains("touch checking; sleep 300"),
        "{}",
        out.explain()
    );
    assert!(
        files(&out.envelope)
            .iter()
            .any(|(path, status, _, _)| path == "made.txt" && status == "added"),
        "{}",
        out.explain()
    );
    // The cancelled check is reported with what it printed.
    let verification = &out.envelope["verification"];
    assert_eq!(verification["verdict"], "not_run", "{}", out.explain());
    assert_eq!(
        verification["final"]["tail"],
        json!(["after-agent-started"]),
        "{}",
        out.explain()
    );
    assert_eq!(verification["final"]["passed"], false, "{}", out.explain());
    common::assert_no_process_left(fake.marker());
}

/// Ctrl-C while a repair turn runs ends the run there: no check follows. The check ran
/// after the stopped turn (minutes of a test suite, after the user had pressed Ctrl-C)
/// and its verdict was reported as if the repair had been tried.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_signal_during_a_repair_turn_runs_no_further_check() {
    let scene = Scene::new("repair_stalls.json");
    let running = scene
        .coder()
        .args([
            "--verify",
            "if [ -f checked ]; then touch checked-again; fi; touch checked; exit 1",
            "--no-verify-baseline",
            "--kill-grace",
            "0.2",
            "write ok.txt",
        ])
        .spawn();
    // The repair turn's CLI has started once the run's journal shows an init event after
    // the repair note.
    let runs = scene.fake.state_dir().join("runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !std::fs::read_dir(&runs).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            std::fs::read_to_string(e.path()).is_ok_and(|t| {
                t.split_once(r#""kind":"repair""#)
                    .is_some_and(|(_, after)| after.contains(r#""subtype":"init""#))
            })
        })
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "no repair turn started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    running.signal(nix::sys::signal::Signal::SIGINT);
    let out = running.wait();
    out.assert_failure("cancelled", 130);
    assert!(
        !scene.ws().join("checked-again").exists(),
        "a check ran after the cancelled repair turn: {}",
        out.explain()
    );
    let v = verification(&out);
    assert_eq!(v["verdict"], "not_run", "{}", out.explain());
    assert_eq!(v["after_agent"]["passed"], false, "{}", out.explain());
    assert!(v["final"].is_null(), "{}", out.explain());
    assert!(out.envelope["SESSION_ID"].is_string(), "{}", out.explain());
}

/// Ctrl-C while the baseline check runs (a test suite that takes minutes) cancels the run
/// before the agent starts; the envelope says what ran: the baseline as far as it got,
/// with its output. It used to carry no `verification` at all.
#[test]
fn a_signal_during_the_baseline_check_keeps_what_it_printed() {
    let fake = fake_success();
    let running = fake
        .coder()
        .args([
            "--verify",
            "echo baseline-started; touch checking; sleep 300",
            "--kill-grace",
            "0.2",
            "task",
        ])
        .spawn();
    common::wait_for_path(&fake.workspace().join("checking"), Duration::from_secs(30));
    running.signal(nix::sys::signal::Signal::SIGINT);
    let out = running.wait();
    let detail = out.assert_failure("cancelled", 130);
    assert!(
        detail["message"]
            .as_str()
            .is_some_and(|m| m.contains("the baseline check")),
        "{}",
        out.explain()
    );
    let verification = &out.envelope["verification"];
    assert_eq!(
        verification["command"],
        "echo baseline-started; touch checking; sleep 300",
        "{}",
        out.explain()
    );
    assert_eq!(verification["verdict"], "not_run", "{}", out.explain());
    assert!(verification["final"].is_null(), "{}", out.explain());
    let baseline = &verification["baseline"];
    assert_eq!(
        baseline["tail"],
        json!(["baseline-started"]),
        "{}",
        out.explain()
    );
    assert_eq!(baseline["passed"], false, "{}", out.explain());
    assert_eq!(
        baseline["error"],
        "stopped unfinished: coder received SIGINT",
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the agent started: {}", out.explain());
    common::assert_no_process_left(fake.marker());
}

#[test]
fn a_flooding_check_is_capped() {
    let fake = fake_success();
    let out = fake
        .coder()
        .args([
            "--verify",
            "yes line | head -c 20000000; exit 1",
            "--no-verify-baseline",
            "--repair-turns",
            "0",
            "task",
        ])
        .run();
    out.assert_failure("verify_failed", 3);
    let final_check = &out.envelope["verification"]["final"];
    // 20 MB from `yes`, and perhaps its "Broken pipe" on stderr.
    let bytes = final_check["output_bytes"].as_u64().unwrap();
    assert!(
        (20_000_000..20_001_000).contains(&bytes),
        "{}",
        out.explain()
    );
    assert!(final_check["tail"].as_array().unwrap().len() <= 40);
    assert!(
        out.stdout.len() < 200_000,
        "envelope of {} bytes",
        out.stdout.len()
    );
}

#[test]
fn bad_outcome_flags_are_config_errors() {
    let fake = fake_success();
    for (args, needle) in [
        (vec!["--verify", ""], "--verify is empty"),
        (
            vec!["--verify", "true", "--repair-turns", "-1"],
            "--repair-turns",
        ),
        (
            vec!["--verify", "true", "--repair-turns", "abc"],
            "--repair-turns",
        ),
        (vec!["--scope", "src/[a"], "--scope"),
        (
            vec!["--verify", "true", "--verify-timeout", "0"],
            "--verify-timeout",
        ),
    ] {
        let out = fake.coder().args(args.clone()).arg("task").run();
        let detail = out.assert_failure("config_error", 78);
        assert!(
            detail["message"].as_str().unwrap().contains(needle),
            "{args:?}: {}",
            out.explain()
        );
    }
}

#[test]
fn a_plain_workspace_of_100k_files_is_bounded() {
    let fake = fake_success();
    let ws = fake.workspace();
    for d in 0..101 {
        let dir = ws.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..1000 {
            std::fs::write(dir.join(format!("f{f}")), "x\n").unwrap();
        }
    }
    let started = Instant::now();
    let out = fake
        .coder()
        .deadline(Duration::from_secs(120))
        .arg("task")
        .run();
    out.assert_success("done");
    assert_eq!(
        out.envelope["changes"]["truncated"],
        true,
        "{}",
        out.explain()
    );
    // The fake child's own record is its only change.
    let listed = files(&out.envelope);
    assert!(
        listed
            .iter()
            .all(|(p, _, _, _)| p.starts_with(".fake-claude/")),
        "{}",
        out.explain()
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// A repository whose config runs programs (fsmonitor, a clean filter named by an in-tree
/// `.gitattributes`, an include of a file in the work tree): plain git runs them; coder's
/// ledger must not.
#[test]
fn the_ledger_runs_nothing_from_a_hostile_repo() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    let marker = dir.path().join("ran");
    let script = dir.path().join("evil.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$0 $*\" >> {}\ncat\n", marker.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = script.display().to_string();
    git(&ws, &["config", "core.fsmonitor", &s]);
    git(&ws, &["config", "filter.evil.clean", &s]);
    git(&ws, &["config", "filter.evil.required", "true"]);
    // A config include from the work tree: the agent could write it.
    std::fs::write(
        ws.join("inc.cfg"),
        format!("[filter \"other\"]\n\tprocess = {s}\n"),
    )
    .unwrap();
    git(&ws, &["config", "include.path", "../inc.cfg"]);
    std::fs::write(
        ws.join(".gitattributes"),
        "*.txt filter=evil\n*.md filter=other\n",
    )
    .unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.join("b.md"), "two\n").unwrap();

    let ledger = coder::workspace::Ledger::before(&ws);
    assert_eq!(ledger.method(), "git");
    std::fs::write(ws.join("a.txt"), "one\nmore\n").unwrap();
    std::fs::write(ws.join("c.md"), "three\n").unwrap();
    let (changes, _) = ledger.changes(true, &[]).unwrap();
    assert!(
        !marker.exists(),
        "the ledger ran a program of the repo's config"
    );
    let listed: Vec<(&str, u64)> = changes
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.lines_added))
        .collect();
    assert_eq!(listed, vec![("a.txt", 1), ("c.md", 1)]);

    // The attack is real: the same repository run by plain git runs the programs.
    Command::new("git")
        .args(["add", "-A"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(
        marker.exists(),
        "plain git did not run the planted programs"
    );
}

/// The plain ledger's scan cache (issue 21): the run's "before" reuses the last run's
/// entries of unchanged files, from coder's state directory. An edit between two runs
/// that keeps the size and puts the modification time back (`touch -d`) is still seen
/// (the change time moves); a damaged cache is ignored; a run whose agent could reach the
/// cache (no sandbox) leaves none behind.
#[test]
fn the_plain_ledger_cache_never_hides_a_change() {
    let mut steps = vec![
        json!({"step": "first_time", "flag": "ran", "then": [], "else": [
            {"step": "try_write", "path": "../a.txt", "text": "one\n"},
            {"step": "try_write", "path": "../b.txt", "text": "kept\nme\nnow\n"},
        ]}),
    ];
    steps.extend(common::steps::answer("done"));
    let fake = Fake::new(json!(steps));
    let ws = fake.workspace().to_path_buf();
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.join("b.txt"), "keep\nme\n").unwrap();
    // Older than the cache's racy margin (2 s), so the next run may trust them.
    let newest = ["a.txt", "b.txt"]
        .iter()
        .map(|n| std::fs::metadata(ws.join(n)).unwrap().modified().unwrap())
        .max()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::time::SystemTime::now() < newest + Duration::from_millis(2100) {
        assert!(Instant::now() < deadline, "the clock did not move");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ours = |out: &common::Outcome| -> Vec<(String, String, u64, u64)> {
        files(&out.envelope)
            .into_iter()
            .filter(|(p, _, _, _)| !p.starts_with(".fake-claude/"))
            .collect()
    };
    let first = fake.coder().arg("task").run();
    first.assert_success("done");
    assert_eq!(ours(&first), vec![], "{}", first.explain());
    let caches: Vec<_> = std::fs::read_dir(fake.state_dir().join("ledger"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(caches.len(), 1, "{caches:?}");
    let cache = &caches[0];
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(cache).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Same size, modification time put back: only the change time tells.
    let edit_keeping_times = |text: &str| {
        let b = ws.join("b.txt");
        let mtime = std::fs::metadata(&b).unwrap().modified().unwrap();
        let file = std::fs::File::options().write(true).open(&b).unwrap();
        use std::io::Write;
        (&file).write_all(text.as_bytes()).unwrap();
        file.set_modified(mtime).unwrap();
    };
    edit_keeping_times("kept\nme\n");
    let second = fake.coder().arg("task").run();
    second.assert_success("done");
    let expected = |rows: &[(&str, u64, u64)]| -> Vec<(String, String, u64, u64)> {
        rows.iter()
            .map(|(p, a, r)| (p.to_string(), "modified".to_string(), *a, *r))
            .collect()
    };
    assert_eq!(
        ours(&second),
        expected(&[("a.txt", 0, 1), ("b.txt", 1, 0)]),
        "{}",
        second.explain()
    );

    // A truncated cache: ignored, every file read.
    let bytes = std::fs::read(cache).unwrap();
    std::fs::write(cache, &bytes[..bytes.len() / 2]).unwrap();
    edit_keeping_times("kept\nyo\n");
    let third = fake.coder().arg("task").run();
    third.assert_success("done");
    assert_eq!(
        ours(&third),
        expected(&[("b.txt", 1, 1)]),
        "{}",
        third.explain()
    );

    // Without a sandbox the agent could read the key: the cache is gone after the run.
    assert!(cache.exists());
    let open = fake
        .coder()
        .args(["--sandbox", "danger-full-access", "task"])
        .run();
    open.assert_success("done");
    assert!(!cache.exists(), "{}", open.explain());
}

/// A `git` first on the caller's PATH that logs every call, then runs the real one.
fn logging_git(fake: &Fake) -> (std::ffi::OsString, std::path::PathBuf) {
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = fake.root().join("logging-git");
    std::fs::create_dir(&bin).unwrap();
    let log = fake.root().join("git-calls.log");
    let script = bin.join("git");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            real.trim()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut path = bin.into_os_string();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap());
    (path, log)
}

/// The child adds `made.txt` and `ignored.log` (the workspace's `.gitignore`, when there is
/// one, names the latter).
fn fake_adding_two_files() -> Fake {
    Fake::new(json!([
        common::steps::init(),
        common::steps::touch("../made.txt"),
        common::steps::touch("../ignored.log"),
        common::steps::result_ok("done"),
    ]))
}

fn ours(out: &common::Outcome) -> Vec<String> {
    let mut listed: Vec<String> = files(&out.envelope)
        .into_iter()
        .map(|(p, _, _, _)| p)
        .filter(|p| !p.starts_with(".fake-claude/"))
        .collect();
    listed.sort();
    listed
}

/// No directory from the workspace up holds `.git` or `HEAD`: git could only answer "not a
/// repository", so coder does not start it, and the plain scan sees every new file.
#[test]
fn no_git_runs_for_a_workspace_outside_any_repository() {
    assert_no_git_runs(&fake_adding_two_files());
}

/// A run of `fake` (which adds `made.txt` and `ignored.log`) starts no git, and the plain
/// scan sees both new files.
fn assert_no_git_runs(fake: &Fake) {
    let (path, log) = logging_git(fake);
    let out = fake.coder().env("PATH", path).arg("task").run();
    out.assert_success("done");
    assert_eq!(ours(&out), ["ignored.log", "made.txt"], "{}", out.explain());
    assert!(
        !log.exists(),
        "git ran: {:?}",
        std::fs::read_to_string(&log)
    );
}

/// The workspace holds a `.git` symlink that leads nowhere, as the sandbox's placeholder
/// for an absent `.git` does (`/dev/null/coder-absent`; git takes it for no repository).
/// The placeholder is made while the ledger looks for a repository beside the sandbox's
/// setup, and the look took it for a `.git`: git was started for nothing, now and then,
/// under load (seen in round seventeen). A link that leads nowhere starts no git.
#[test]
fn a_git_link_that_leads_nowhere_starts_no_git() {
    let fake = fake_adding_two_files();
    std::os::unix::fs::symlink("/dev/null/coder-absent", fake.workspace().join(".git")).unwrap();
    assert_no_git_runs(&fake);
}

/// The workspace's parent holds a `.git` file (a separate git dir): git finds the repository
/// from the workspace, so the ledger is git's (`.gitignore` applies).
#[test]
fn a_workspace_below_a_git_file_gets_the_git_ledger() {
    let fake = fake_adding_two_files();
    let root = fake.root();
    let sep = tempfile::tempdir().unwrap();
    git(
        root,
        &[
            "init",
            "-q",
            "--separate-git-dir",
            &sep.path().join("repo.git").to_string_lossy(),
        ],
    );
    assert!(root.join(".git").is_file());
    std::fs::write(fake.workspace().join(".gitignore"), "ignored.log\n").unwrap();
    let (path, log) = logging_git(&fake);
    let out = fake.coder().env("PATH", path).arg("task").run();
    out.assert_success("done");
    assert_eq!(ours(&out), ["made.txt"], "{}", out.explain());
    assert!(log.exists(), "git did not run");
}

/// The workspace is named through a symlink from outside the repository: git starts from
/// the physical directory (`getcwd`), which is inside it, so the ledger is git's.
#[test]
fn a_workspace_named_through_a_symlink_into_a_repository_gets_the_git_ledger() {
    let fake = fake_adding_two_files();
    git(fake.root(), &["init", "-q"]);
    std::fs::write(fake.workspace().join(".gitignore"), "ignored.log\n").unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let link = elsewhere.path().join("ws-link");
    std::os::unix::fs::symlink(fake.workspace(), &link).unwrap();
    let (path, log) = logging_git(&fake);
    let out = fake.coder().cd(&link).env("PATH", path).arg("task").run();
    out.assert_success("done");
    assert_eq!(ours(&out), ["made.txt"], "{}", out.explain());
    assert!(log.exists(), "git did not run");
}

/// A check that cannot be started at all (here its workspace is gone, as `sh` missing or
/// an argument list over the kernel's limit would do) is not a failure the model can
/// repair: no repair turn is spent on it (one was, with "the check could not be started"
/// as the failing output), and the envelope says why.
#[test]
fn a_check_that_cannot_start_gets_no_repair_turn() {
    let fake = Fake::with_state_outside_workspace(json!([
        {"step": "init"},
        {"step": "tool_use", "name": "Bash", "input": {"command": "remove the workspace"}},
        {"step": "run_tool", "command": "ws=$PWD; cd / && rm -rf \"$ws\""},
        {"step": "result", "text": "done"},
    ]));
    let out = fake
        .coder()
        .args([
            "--sandbox",
            "danger-full-access",
            "--verify",
            "true",
            "--no-verify-baseline",
            "--repair-turns",
            "2",
            "task",
        ])
        .run();
    out.assert_failure("verify_failed", 3);
    let v = verification(&out);
    assert_eq!(v["repair_turns"], 0, "{}", out.explain());
    assert!(
        v["final"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("the check could not be started")),
        "{}",
        out.explain()
    );
    assert!(
        v["repair_skipped"]
            .as_str()
            .is_some_and(|s| s.contains("no repair turn was spent")),
        "{}",
        out.explain()
    );
    assert!(
        out.envelope["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("the --verify check could not run")),
        "{}",
        out.explain()
    );
}
