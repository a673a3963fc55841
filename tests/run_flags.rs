//! Each run-mode flag through the built binary, checked by its effect (not by being
//! accepted): the limits fire at the given values, retries happen that many times,
//! `--request` values take effect and flags override them, the sandbox flags change what the
//! child can read and write on the host, the backend flags reach the child's environment,
//! the prompt flags reach the prompt on its stdin, and `runs list -n` limits the listing.
//! Every effect is shown against a control run without the flag.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Bounded, Fake, read_transcript, steps};
use serde_json::{Value, json};

/// A child that talks (so the idle clock never fires) for far longer than any cap here.
fn chatty() -> Value {
    json!([
        steps::init(),
        {"step": "repeat", "times": 400, "steps": [steps::text("progress"), steps::sleep(0.05)]},
        steps::result_ok("too late"),
    ])
}

/// A child that fails transiently every time (a 503, no tool call: retryable).
fn always_503() -> Value {
    json!([
        steps::init(),
        {"step": "result", "is_error": true, "text": "API Error: 503 overloaded",
         "terminal_reason": "api_error", "api_error_status": 503},
        steps::exit(1),
    ])
}

/// Entries of `kind` written by coder itself in the run's transcript.
fn coder_entries(out: &common::Outcome, kind: &str) -> Vec<Value> {
    let path = out.envelope["transcript"]
        .as_str()
        .unwrap_or_else(|| panic!("no transcript: {}", out.explain()));
    read_transcript(Path::new(path))
        .into_iter()
        .filter(|e| e["source"] == "coder" && e["kind"] == kind)
        .collect()
}

#[test]
fn max_duration_stops_the_run_at_the_given_duration() {
    let fake = Fake::new(chatty());
    let out = fake
        .coder()
        .args([
            "--timeout",
            "10",
            "--max_duration",
            "1.5",
            "--kill-grace",
            "0.5",
        ])
        .arg("task")
        .run();
    let detail = out.assert_failure("timeout", 124);
    assert_eq!(detail["max_duration_s"], 1.5, "{}", out.explain());
    // Not before the cap, and soon after it (the child would talk for 20 s).
    assert!(
        out.elapsed >= Duration::from_millis(1500),
        "stopped before the cap: {:?}",
        out.elapsed
    );
    assert!(
        out.elapsed < Duration::from_secs(6),
        "stopped long after the cap: {:?}",
        out.elapsed
    );

    // The control: a larger cap lets the same child run past 1.5 s.
    let fake = Fake::new(chatty());
    let out = fake
        .coder()
        .args([
            "--timeout",
            "10",
            "--max-duration",
            "3",
            "--kill-grace",
            "0.5",
        ])
        .arg("task")
        .run();
    out.assert_failure("timeout", 124);
    assert!(out.elapsed >= Duration::from_secs(3), "{:?}", out.elapsed);
}

#[test]
fn max_retries_makes_exactly_that_many_more_attempts() {
    let fake = Fake::new(always_503());
    let out = fake.coder().args(["--max_retries", "2", "task"]).run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["retries"], 2, "{}", out.explain());
    assert_eq!(
        out.envelope["attempts"].as_array().map(Vec::len),
        Some(3),
        "{}",
        out.explain()
    );
    // Three children were really started, each with its own session.
    let spawns = coder_entries(&out, "spawn");
    assert_eq!(spawns.len(), 3, "{spawns:#?}");
    // Backoff 0.5 s then 1 s (with jitter) between them.
    assert!(
        out.elapsed >= Duration::from_millis(1200),
        "{:?}",
        out.elapsed
    );

    let fake = Fake::new(always_503());
    let out = fake.coder().args(["--max-retries", "0", "task"]).run();
    out.assert_failure("upstream_error", 1);
    assert_eq!(coder_entries(&out, "spawn").len(), 1);
}

#[test]
fn request_file_values_take_effect_and_flags_override_them() {
    let silent = json!([steps::init(), steps::sleep(30.0)]);
    let request = |fake: &Fake| {
        let path = fake.root().join("request.json");
        std::fs::write(
            &path,
            json!({"PROMPT": "from the request", "timeout": 0.4, "max_retries": 1,
                   "max_duration": 60, "sandbox": "read-only", "return_metrics": true})
            .to_string(),
        )
        .unwrap();
        path
    };

    let fake = Fake::with_state_outside_workspace(silent.clone());
    let out = fake.coder().arg("--request").arg(request(&fake)).run();
    let detail = out.assert_failure("idle_timeout", 124);
    assert_eq!(detail["idle_timeout_s"], 0.4, "{}", out.explain());
    assert_eq!(detail["max_duration_s"], 60.0, "{}", out.explain());
    // read-only makes an idle timeout retryable: the request's max_retries took effect.
    assert_eq!(detail["retries"], 1, "{}", out.explain());
    assert!(out.envelope["metrics"].is_object(), "{}", out.explain());
    assert_eq!(fake.record().stdin(), "from the request");

    // Flags win over the request file.
    let fake = Fake::with_state_outside_workspace(silent);
    let out = fake
        .coder()
        .arg("--request")
        .arg(request(&fake))
        .args([
            "--timeout",
            "0.6",
            "--max-retries",
            "0",
            "--max-duration",
            "40",
        ])
        .arg("from the flag")
        .run();
    let detail = out.assert_failure("idle_timeout", 124);
    assert_eq!(detail["idle_timeout_s"], 0.6, "{}", out.explain());
    assert_eq!(detail["max_duration_s"], 40.0, "{}", out.explain());
    assert_eq!(detail["retries"], 0, "{}", out.explain());
    assert_eq!(fake.record().stdin(), "from the flag");
}

/// A child that tries to write `new.txt` in the workspace (its files live beside it).
fn writes_in_the_workspace() -> Fake {
    Fake::with_state_outside_workspace(json!([
        steps::init(),
        {"step": "try_write", "path": "../ws/new.txt", "text": "agent was here"},
        steps::result_ok("tried"),
    ]))
}

#[test]
fn read_only_bypasses_the_clis_prompts_and_the_kernel_refuses_writes() {
    let fake = writes_in_the_workspace();
    let out = fake
        .coder()
        .args(["--sandbox", "read-only", "write it"])
        .run();
    out.assert_success("tried");
    // coder's one permission mode: the kernel enforces the sandbox, not the CLI's prompts.
    assert_eq!(
        fake.record().flag_value("--permission-mode").as_deref(),
        Some(coder::pipeline::child::PERMISSION_MODE)
    );
    assert_eq!(coder::pipeline::child::PERMISSION_MODE, "bypassPermissions");
    assert!(
        !fake.workspace().join("new.txt").exists(),
        "a read-only run wrote the workspace; stderr:\n{}",
        out.stderr
    );

    // The control: the same child under workspace-write writes the file.
    let fake = writes_in_the_workspace();
    let out = fake.coder().arg("write it").run();
    out.assert_success("tried");
    assert_eq!(
        std::fs::read_to_string(fake.workspace().join("new.txt")).unwrap(),
        "agent was here"
    );
}

#[test]
fn a_broad_write_root_is_a_config_error_and_nothing_starts() {
    // The filesystem root, and an ancestor of the home directory: refused before anything
    // starts, as a config_error naming the path (it used to be a sandbox_error).
    let fake = Fake::new(json!(steps::answer("should not run")));
    let home = fake.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    for root in [Path::new("/"), fake.root()] {
        let out = fake
            .coder()
            .env("HOME", &home)
            .arg("--write")
            .arg(root)
            .arg("task")
            .run();
        let detail = out.assert_failure("config_error", 78);
        assert!(
            detail["message"]
                .as_str()
                .unwrap()
                .contains(&format!("--write {}", root.display())),
            "{}",
            out.explain()
        );
        assert!(!fake.has_record(), "the child ran despite --write {root:?}");
    }
    // The control: a narrow --write runs.
    let narrow = fake.root().join("out");
    std::fs::create_dir_all(&narrow).unwrap();
    fake.coder()
        .env("HOME", &home)
        .arg("--write")
        .arg(&narrow)
        .arg("task")
        .run()
        .assert_success("should not run");
}

fn copies(from: &Path) -> Value {
    json!([
        steps::init(),
        {"step": "copy", "from": from.to_str().unwrap(), "to": "../copied.txt"},
        steps::result_ok("copied"),
    ])
}

fn copied(fake: &Fake) -> String {
    std::fs::read_to_string(fake.workspace().join("copied.txt")).unwrap()
}

#[test]
fn read_grants_a_path_outside_the_workspace() {
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("notes.txt");
    std::fs::write(&file, "outside notes").unwrap();

    let fake = Fake::new(copies(&file));
    fake.coder()
        .arg("--read")
        .arg(outside.path())
        .arg("read it")
        .run()
        .assert_success("copied");
    assert_eq!(copied(&fake), "outside notes");

    let fake = Fake::new(copies(&file));
    fake.coder().arg("read it").run().assert_success("copied");
    assert!(
        copied(&fake).starts_with("<unreadable"),
        "{}",
        copied(&fake)
    );
}

#[test]
fn deny_makes_matching_workspace_files_read_as_empty() {
    let run = |deny: bool| {
        // Relative to the scenario's directory, inside the workspace.
        let fake = Fake::new(copies(Path::new("../model.weights")));
        std::fs::write(fake.workspace().join("model.weights"), "PRIVATE-WEIGHTS").unwrap();
        let mut coder = fake.coder();
        if deny {
            coder = coder.args(["--deny", "*.weights"]);
        }
        coder.arg("read it").run().assert_success("copied");
        copied(&fake)
    };
    assert_eq!(run(true), "");
    assert_eq!(run(false), "PRIVATE-WEIGHTS");
}

#[test]
fn allow_tmp_lets_the_agent_write_the_shared_tmp() {
    let name = format!("coder-allow-tmp-{}", uuid::Uuid::new_v4());
    let target = Path::new("/tmp").join(&name);
    let scenario = json!([
        steps::init(),
        {"step": "try_write", "path": target.to_str().unwrap(), "text": "shared"},
        steps::result_ok("tried"),
    ]);

    let fake = Fake::new(scenario.clone());
    fake.coder().arg("write").run().assert_success("tried");
    assert!(!target.exists(), "the private temp leaked to /tmp");

    // The fake's state directory is under /tmp, which --allow-tmp would give the agent:
    // refused before anything runs, naming the way out.
    let fake = Fake::new(scenario.clone());
    let refused = fake.coder().args(["--allow-tmp", "write"]).run();
    refused.assert_failure("config_error", 78);
    assert!(
        refused.envelope["error"]
            .as_str()
            .is_some_and(|e| e.contains("--allow-tmp") && e.contains("CODER_STATE_DIR")),
        "{}",
        refused.explain()
    );
    assert!(!fake.has_record(), "the refused run started the child");

    let fake = Fake::new(scenario);
    let state = tempfile::Builder::new()
        .prefix("coder-state-")
        .tempdir_in("/var/tmp")
        .unwrap();
    fake.coder()
        .env("CODER_STATE_DIR", state.path())
        .args(["--allow-tmp", "write"])
        .run()
        .assert_success("tried");
    let written = std::fs::read_to_string(&target);
    let _ = std::fs::remove_file(&target);
    assert_eq!(written.unwrap(), "shared");
}

#[test]
fn tool_caches_makes_the_home_caches_writable() {
    let run = |caches: bool| {
        let fake = Fake::new(json!([
            steps::init(),
            {"step": "try_write", "path": "$HOME/.cache/pip/tool.db", "text": "cached"},
            steps::result_ok("tried"),
        ]));
        let home = fake.root().join("home");
        std::fs::create_dir_all(home.join(".cache/pip")).unwrap();
        let mut coder = fake.coder().env("HOME", &home);
        if caches {
            coder = coder.arg("--tool-caches");
        }
        coder.arg("build").run().assert_success("tried");
        std::fs::read_to_string(home.join(".cache/pip/tool.db")).ok()
    };
    assert_eq!(run(true).as_deref(), Some("cached"));
    assert_eq!(run(false), None);
}

#[test]
fn model_and_base_url_reach_the_childs_environment() {
    let fake = Fake::new(json!(steps::answer("ok")));
    let out = fake
        .coder()
        .args(["--model", "glm-test-model"])
        .args(["--base-url", "http://127.0.0.1:4567/anthropic"])
        .arg("task")
        .run();
    out.assert_success("ok");
    let env = fake.record().env();
    assert_eq!(
        env.get("ANTHROPIC_MODEL").map(String::as_str),
        Some("glm-test-model")
    );
    assert_eq!(
        env.get("ANTHROPIC_BASE_URL").map(String::as_str),
        Some("http://127.0.0.1:4567/anthropic")
    );

    // Without the flags the child gets coder's own base URL and no model override.
    let fake = Fake::new(json!(steps::answer("ok")));
    fake.coder().arg("task").run().assert_success("ok");
    let env = fake.record().env();
    assert_ne!(
        env.get("ANTHROPIC_MODEL").map(String::as_str),
        Some("glm-test-model")
    );
    assert_eq!(
        env.get("ANTHROPIC_BASE_URL").map(String::as_str),
        Some("http://127.0.0.1:9")
    );
}

#[test]
fn the_task_fields_reach_the_prompt_on_the_childs_stdin() {
    let fake = Fake::new(json!(steps::answer("ok")));
    fake.coder()
        .args(["--task-type", "bugfix"])
        .args(["--target", "src/parse.rs"])
        .args(["--requirement", "REQ-parse-empty-input"])
        .args(["--constraint", "CON-no-new-dependencies"])
        .args(["--acceptance", "ACC-cargo-test-passes"])
        .arg("Fix the parser")
        .run()
        .assert_success("ok");
    let prompt = fake.record().stdin();
    for field in [
        "Fix the parser",
        "bugfix",
        "src/parse.rs",
        "REQ-parse-empty-input",
        "CON-no-new-dependencies",
        "ACC-cargo-test-passes",
    ] {
        assert!(prompt.contains(field), "{field} missing from:\n{prompt}");
    }

    // Without the fields the task goes untouched.
    let fake = Fake::new(json!(steps::answer("ok")));
    fake.coder()
        .arg("Fix the parser")
        .run()
        .assert_success("ok");
    assert_eq!(fake.record().stdin(), "Fix the parser");
}

#[test]
fn runs_list_n_limits_the_listing_to_the_newest() {
    let fake = Fake::new(json!(steps::answer("ok")));
    let mut sessions = Vec::new();
    for i in 0..3 {
        let out = fake.coder().arg(format!("task {i}")).run();
        out.assert_success("ok");
        sessions.push(out.envelope["SESSION_ID"].clone());
    }
    let list = |n: &str| -> Vec<Value> {
        let out = std::process::Command::new(common::CODER)
            .args(["runs", "list", "--json", "-n", n, "--state-dir"])
            .arg(fake.state_dir())
            .output_bounded();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let two = list("2");
    let ids: Vec<&Value> = two.iter().map(|r| &r["session_id"]).collect();
    assert_eq!(ids, [&sessions[2], &sessions[1]], "{two:#?}");
    assert_eq!(list("10").len(), 3);
}

#[test]
fn a_retried_resumed_session_keeps_its_id() {
    let session = uuid::Uuid::new_v4().to_string();
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "first_time", "flag": "failed-once",
         "then": [{"step": "result", "is_error": true, "text": "API Error: 529 overloaded",
                   "terminal_reason": "api_error", "api_error_status": 529},
                  steps::exit(1)],
         "else": [steps::text("resumed"), steps::result_ok("resumed")]},
    ]));
    let out = fake
        .coder()
        .args(["--session-id", &session, "--max-retries", "1", "continue"])
        .run();
    out.assert_success("resumed");
    assert_eq!(
        out.session_id(),
        Some(session.as_str()),
        "{}",
        out.explain()
    );
    let attempts = out.envelope["attempts"].as_array().expect("two attempts");
    assert_eq!(attempts.len(), 2, "{}", out.explain());
    for attempt in attempts {
        assert_eq!(attempt["session_id"], json!(session), "{}", out.explain());
    }
    // The retry resumed the same session (the last child's argv) instead of starting anew.
    let record = fake.record();
    assert_eq!(
        record.flag_value("--resume").as_deref(),
        Some(session.as_str())
    );
    assert!(!record.has_flag("--session-id"), "{:?}", record.argv());
}
