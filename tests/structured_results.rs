//! Structured results (DESIGN §9) end to end: `--json-schema` through the built `coder`.
//! The real `claude` CLI against replay cassettes shows the schema reaching the model's
//! request (as the CLI's `StructuredOutput` tool), a valid answer returned as `structured`,
//! an invalid one repaired in one resumed turn that quotes the validation errors, and a
//! model that never gets it right ending in `schema_mismatch` (exit 6). The fake child shows
//! what the CLI is given, that coder re-validates what the CLI reports, and that bad
//! schemas are refused before anything starts.
//!
//! The CLI comes from `CODER_TEST_CLAUDE_BIN`, else the project-local install; without it
//! the CLI tests skip loudly, except under CI, where they fail.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Coder, Fake, ReplayScene, steps};
use serde_json::{Value, json};

/// The schema of every test: a verdict from a fixed set and a non-negative count.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "verdict": {"enum": ["pass", "fail"]},
            "count": {"type": "integer", "minimum": 0}
        },
        "required": ["verdict", "count"],
        "additionalProperties": false
    })
}

fn write_schema(dir: &Path) -> String {
    let path = dir.join("answer.schema.json");
    std::fs::write(&path, serde_json::to_string_pretty(&schema()).unwrap()).unwrap();
    path.display().to_string()
}

fn scene_coder(scene: &ReplayScene) -> Coder {
    scene.coder_within(Duration::from_secs(180))
}

/// The run's account from `coder runs show last` (human form).
fn runs_show(state_dir: &Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["runs", "show", "last", "--state-dir"])
        .arg(state_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_valid_structured_answer_is_returned() {
    // The cassette's only turn expects the StructuredOutput tool with this run's schema in
    // its input_schema: a request without it gets a 400 and the run fails.
    let scene = ReplayScene::new("structured_ok.json", 0);
    let schema_file = write_schema(scene.fake.root());
    let out = scene_coder(&scene)
        .args(["--json-schema", &schema_file, "check the project"])
        .run();
    out.assert_success(r#"{"verdict":"pass","count":3}"#);
    assert_eq!(
        out.envelope["structured"],
        json!({"verdict": "pass", "count": 3}),
        "{}",
        out.explain()
    );
    assert!(
        out.envelope.get("schema_repair").is_none(),
        "{}",
        out.explain()
    );
    let warnings = out.envelope["warnings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(warnings.is_empty(), "{}", out.explain());

    let shown = runs_show(&scene.fake.state_dir());
    assert!(
        shown.contains("structured (matches --json-schema)")
            && shown.contains("\"verdict\": \"pass\""),
        "{shown}"
    );
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn an_answer_out_of_schema_is_repaired_in_one_turn() {
    // The model answers in text (the CLI's own nudge does not help); the JSON in it has a
    // verdict outside the enum. The repair turn's request must quote the error ("/verdict:
    // …") and still offer StructuredOutput, or the cassette answers 400.
    let scene = ReplayScene::new("structured_repair.json", 0);
    let inline = schema().to_string();
    let out = scene_coder(&scene)
        .args(["--json-schema", &inline, "check the project"])
        .run();
    out.assert_success(r#"{"verdict":"fail","count":3}"#);
    let env = &out.envelope;
    assert_eq!(env["structured"], json!({"verdict": "fail", "count": 3}));
    let repair = &env["schema_repair"];
    assert_eq!(repair["fixed"], true, "{}", out.explain());
    let errors: Vec<&str> = repair["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("/verdict: ") && errors[0].contains("maybe"),
        "{errors:?}"
    );
    // Two attempts of one session: the answer, and the resumed repair turn.
    let attempts = env["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{}", out.explain());
    assert_eq!(attempts[0]["session_id"], attempts[1]["session_id"]);
    assert_eq!(env["SESSION_ID"], attempts[0]["session_id"]);
    assert!(
        env["warnings"].as_array().is_none_or(Vec::is_empty),
        "{}",
        out.explain()
    );

    let shown = runs_show(&scene.fake.state_dir());
    assert!(
        shown.contains("schema repair turn fixed the answer"),
        "{shown}"
    );
    assert!(shown.contains("\"verdict\": \"fail\""), "{shown}");
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn an_answer_that_stays_out_of_schema_is_schema_mismatch() {
    // The CLI rejects each of 5 StructuredOutput calls itself and gives up; coder's repair
    // turn (whose request must quote "/count: ") fails the same way.
    let scene = ReplayScene::new("structured_mismatch.json", 0);
    let schema_file = write_schema(scene.fake.root());
    let out = scene_coder(&scene)
        .args(["--json-schema", &schema_file, "check the project"])
        .run();
    let detail = out.assert_failure("schema_mismatch", 6);
    let errors = detail["schema_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{}", out.explain());
    let error = errors[0].as_str().unwrap();
    assert!(
        error.starts_with("/count: ") && error.contains("three"),
        "{error}"
    );
    let env = &out.envelope;
    assert!(
        env["error"]
            .as_str()
            .unwrap()
            .starts_with("the answer does not match --json-schema"),
        "{}",
        out.explain()
    );
    assert!(env.get("structured").is_none(), "{}", out.explain());
    assert_eq!(env["schema_repair"]["fixed"], false, "{}", out.explain());
    assert_eq!(
        env["attempts"].as_array().unwrap().len(),
        2,
        "{}",
        out.explain()
    );
    // The answer tool changes nothing: no resume hint about side effects.
    assert!(detail.get("resume_hint").is_none(), "{}", out.explain());
    // What to do next: where it did not match, and the two ways out.
    let hint = detail["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("error_detail.schema_errors") && hint.contains("loosen --json-schema"),
        "{}",
        out.explain()
    );
    assert!(
        env["warnings"].as_array().is_none_or(Vec::is_empty),
        "{}",
        out.explain()
    );

    let shown = runs_show(&scene.fake.state_dir());
    assert!(
        shown.contains("structured: the answer does not match --json-schema")
            && shown.contains("/count: "),
        "{shown}"
    );
}

// ---- The fake child: what the CLI is given, coder's own validation, bad input ----

/// A result event with `structured_output`, as CLI 2.1.330 prints it.
fn structured_result(value: Value) -> Value {
    json!({"step": "result", "text": value.to_string(),
           "extra": {"structured_output": value}})
}

#[test]
fn the_schema_goes_to_the_cli_as_compact_json() {
    let fake = Fake::new(json!([
        steps::init(),
        structured_result(json!({"verdict": "pass", "count": 0}))
    ]));
    let schema_file = write_schema(fake.root());
    let out = fake
        .coder()
        .args(["--json-schema", &schema_file, "task"])
        .run();
    out.assert_success(&json!({"verdict": "pass", "count": 0}).to_string());
    assert_eq!(
        out.envelope["structured"],
        json!({"verdict": "pass", "count": 0})
    );
    let given = fake.record().flag_value("--json-schema").unwrap();
    assert_eq!(serde_json::from_str::<Value>(&given).unwrap(), schema());
    assert!(!given.contains('\n'), "{given}");
}

#[test]
fn coder_validates_what_the_cli_reports() {
    // A child whose structured_output breaks the schema: coder does not take its word. The
    // repair turn resumes the session with the errors; the second answer is valid.
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "first_time", "flag": "answered",
         "then": [structured_result(json!({"verdict": "pass", "count": -1}))],
         "else": [structured_result(json!({"verdict": "pass", "count": 1}))]}
    ]));
    let out = fake
        .coder()
        .args(["--json-schema", &schema().to_string(), "task"])
        .run();
    assert_eq!(out.code, Some(0), "{}", out.explain());
    assert_eq!(
        out.envelope["structured"],
        json!({"verdict": "pass", "count": 1})
    );
    let repair = &out.envelope["schema_repair"];
    assert_eq!(repair["fixed"], true, "{}", out.explain());
    assert!(
        repair["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("/count: "),
        "{}",
        out.explain()
    );
    // The last child was the repair turn: it resumed the session, its prompt quoted the
    // error and the schema, and it was given the schema again.
    let record = fake.record();
    assert_eq!(
        record.flag_value("--resume").as_deref(),
        out.envelope["SESSION_ID"].as_str()
    );
    let prompt = record.stdin();
    assert!(
        prompt.contains("- /count: ") && prompt.contains("\"minimum\": 0"),
        "{prompt}"
    );
    assert!(record.has_flag("--json-schema"));
}

#[test]
fn a_text_answer_is_read_as_json() {
    // No structured_output (the model answered in text): the JSON in a ```json fence is the
    // answer when it matches.
    let text = "Done.\n```json\n{\"verdict\": \"fail\", \"count\": 2}\n```";
    let fake = Fake::new(json!([steps::init(), steps::result_ok(text)]));
    let out = fake
        .coder()
        .args(["--json-schema", &schema().to_string(), "task"])
        .run();
    out.assert_success(text);
    assert_eq!(
        out.envelope["structured"],
        json!({"verdict": "fail", "count": 2})
    );
}

#[test]
fn an_answer_that_is_not_json_fails_after_its_repair_turn() {
    let fake = Fake::new(json!(steps::answer("I could not decide.")));
    let out = fake
        .coder()
        .args(["--json-schema", &schema().to_string(), "task"])
        .run();
    let detail = out.assert_failure("schema_mismatch", 6);
    let errors = detail["schema_errors"].as_array().unwrap();
    assert!(
        errors[0]
            .as_str()
            .unwrap()
            .starts_with("(root): the answer is not JSON"),
        "{}",
        out.explain()
    );
    assert_eq!(out.envelope["schema_repair"]["fixed"], false);
    assert_eq!(out.envelope["attempts"].as_array().unwrap().len(), 2);
    // An orchestrator reading only the envelope learns where the answer is and what to do.
    let hint = detail["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("`result`")
            && hint.contains("--json-schema")
            && hint.contains("--session-id"),
        "{}",
        out.explain()
    );
    assert!(
        out.envelope["result"]
            .as_str()
            .is_some_and(|r| r.contains("could not decide")),
        "{}",
        out.explain()
    );
}

#[test]
fn a_schema_in_the_request_file_is_used() {
    let fake = Fake::new(json!([
        steps::init(),
        structured_result(json!({"verdict": "pass", "count": 5}))
    ]));
    let request = json!({"PROMPT": "task", "json_schema": schema()});
    let out = fake
        .coder()
        .args(["--request", "-"])
        .stdin(request.to_string())
        .run();
    assert_eq!(out.code, Some(0), "{}", out.explain());
    assert_eq!(
        out.envelope["structured"],
        json!({"verdict": "pass", "count": 5})
    );
    let given = fake.record().flag_value("--json-schema").unwrap();
    assert_eq!(serde_json::from_str::<Value>(&given).unwrap(), schema());
}

/// Bad `--json-schema` input: a one-line `config_error` (exit 78) naming the problem, and
/// no child started.
#[test]
fn bad_schemas_are_config_errors_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let not_json = dir.path().join("broken.json");
    std::fs::write(&not_json, "{\"type\": \"object\",").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--json-schema".into(), "{\"type\": ".into()],
            "--json-schema is not valid JSON",
        ),
        (
            vec!["--json-schema".into(), not_json.display().to_string()],
            "--json-schema is not valid JSON (file ",
        ),
        (
            vec!["--json-schema".into(), "/nonexistent/schema.json".into()],
            "cannot read the file: no such file",
        ),
        (
            vec!["--json-schema".into(), r#"{"type": "objekt"}"#.into()],
            "--json-schema is not a valid JSON Schema",
        ),
        (
            vec![
                "--json-schema".into(),
                r#"{"type": "object", "properties": {"a": {"minimum": "0"}}}"#.into(),
            ],
            "at /properties/a/minimum",
        ),
        (
            vec!["--json-schema".into(), r#"{"type": "array"}"#.into()],
            "must describe a JSON object",
        ),
        // JSON that is no object, and no file of that name: the schema is what is wrong,
        // not a file. It was "--json-schema [1]: cannot read the file: no such file".
        (
            vec!["--json-schema".into(), r#"[{"type": "object"}]"#.into()],
            "--json-schema is not a valid JSON Schema (inline JSON): a schema is a JSON \
             object, not an array",
        ),
        (
            vec!["--json-schema".into(), "true".into()],
            "--json-schema is not a valid JSON Schema (inline JSON): a schema is a JSON \
             object, not a boolean",
        ),
    ];
    for (args, expected) in cases {
        let fake = Fake::new(json!(steps::answer("unused")));
        let out = fake.coder().args(&args).arg("task").run();
        out.assert_failure("config_error", 78);
        let error = out.envelope["error"].as_str().unwrap();
        assert!(error.contains(expected), "{args:?}: {error}");
        assert!(!fake.has_record(), "{args:?}: the child must not start");
        assert_eq!(out.stdout.trim().lines().count(), 1, "{}", out.stdout);
    }

    // The same checks for the request file's json_schema.
    let fake = Fake::new(json!(steps::answer("unused")));
    let request = json!({"PROMPT": "task", "json_schema": {"type": "object", "required": "a"}});
    let out = fake
        .coder()
        .args(["--request", "-"])
        .stdin(request.to_string())
        .run();
    out.assert_failure("config_error", 78);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(
        error.contains("\"json_schema\" in the --request JSON is not a valid JSON Schema"),
        "{error}"
    );
    assert!(!fake.has_record());
}

#[test]
fn a_run_that_fails_its_check_spends_no_turn_on_the_answer() {
    // --verify fails and has no repair turns left: that is the run's verdict; the answer
    // out of schema only adds a warning, and no schema repair turn runs.
    let fake = Fake::new(json!(steps::answer("not json")));
    let out = fake
        .coder()
        .args(["--sandbox", "danger-full-access", "--verify", "false"])
        .args(["--no-verify-baseline", "--repair-turns", "0"])
        .args(["--json-schema", &schema().to_string(), "task"])
        .run();
    out.assert_failure("verify_failed", 3);
    assert!(
        out.envelope.get("schema_repair").is_none(),
        "{}",
        out.explain()
    );
    let warnings = out.envelope["warnings"].to_string();
    assert!(
        warnings.contains("the answer does not match --json-schema either"),
        "{}",
        out.explain()
    );
}
