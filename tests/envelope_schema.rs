//! Every envelope coder prints conforms to the published schema (schema/envelope.schema.json):
//! success, failures before and after the child ran, retries, metrics and all_messages.

mod common;

use common::Bounded;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/envelope.schema.json"),
    )
    .unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\ncat >/dev/null\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_string_lossy().into_owned()
}

fn envelope(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(args)
        .env("CODER_STATE_DIR", dir.join("state"))
        .env("ANTHROPIC_AUTH_TOKEN", "coder-test-token")
        .env_remove("CODER_CLAUDE_BIN")
        .output_bounded();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "exactly one line: {stdout}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn envelopes_of_every_shape_match_the_schema() {
    let validator = schema();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.to_str().unwrap();
    let ok = script(
        dir.path(),
        "ok",
        r#"echo '{"type":"system","subtype":"init","session_id":"s"}'
echo '{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Read","input":{"file_path":"x"}}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,"usage":{"input_tokens":1,"output_tokens":2}}'"#,
    );
    let fails = script(
        dir.path(),
        "fails",
        r#"echo '{"type":"system","subtype":"init","session_id":"s"}'
echo '{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":500,"result":"API Error: 500"}'
exit 1"#,
    );
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "--cd",
            ws,
            "--claude-bin",
            &ok,
            "t",
            "--return-metrics",
            "--return-all-messages",
        ],
        vec![
            "--cd",
            ws,
            "--claude-bin",
            &fails,
            "t",
            "--return-metrics",
            "--max-retries",
            "1",
        ],
        vec!["--cd", ws, "--claude-bin", "/nonexistent/claude", "t"],
        vec!["--cd", "/nonexistent", "t"],
        vec!["--no-such-flag"],
    ];
    for args in cases {
        let value = envelope(dir.path(), &args);
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{args:?} -> {value}\n{errors:#?}");
    }
}

/// The schema object at `pointer` (a JSON pointer into the schema).
fn schema_object(pointer: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/envelope.schema.json"),
    )
    .unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    schema
        .pointer(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in the schema"))
        .clone()
}

fn keys(value: &serde_json::Value) -> std::collections::BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

fn names(value: &serde_json::Value) -> std::collections::BTreeSet<String> {
    value
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// Checks one envelope object of the schema against its serde type: `full` is the type with
/// every optional field set, `minimal` with every optional field unset. The schema's
/// properties must be exactly the fields `full` serialises, its `required` exactly those
/// `minimal` still serialises, and a closed object must say `additionalProperties: false`.
fn assert_schema_matches(
    pointer: &str,
    full: serde_json::Value,
    minimal: serde_json::Value,
    closed: bool,
) {
    let object = schema_object(pointer);
    assert_eq!(
        keys(&object["properties"]),
        keys(&full),
        "{pointer}: schema properties vs the serde type's fields"
    );
    assert_eq!(
        names(&object["required"]),
        keys(&minimal),
        "{pointer}: schema required vs the fields always serialised"
    );
    if closed {
        assert_eq!(
            object["additionalProperties"],
            serde_json::json!(false),
            "{pointer} is closed"
        );
    }
}

#[test]
fn the_schema_names_exactly_the_fields_of_the_serde_types() {
    use coder::exit::ErrorKind;
    use coder::pipeline::envelope::{
        AttemptOutcome, AttemptSummary, Envelope, ErrorDetail, Metrics, TokenUsage,
    };
    use coder::pipeline::retry::SideEffectClass;
    use coder::sandbox::{Denial, DenialClass};
    use serde_json::to_value;

    let detail = ErrorDetail {
        signal: Some("SIGKILL".into()),
        http_status: Some(503),
        upstream_error: Some(coder::stream::UpstreamErrorType::Overloaded),
        pending_tool: Some("Bash(x)".into()),
        retryable: Some(true),
        session_poisoned: Some(false),
        retry_refused: Some("why".into()),
        resume_hint: Some("how".into()),
        out_of_scope: Some(vec!["src/elsewhere.rs".into()]),
        schema_errors: Some(vec!["/count: \"3\" is not of type \"integer\"".into()]),
        provider_error: Some(coder::pipeline::provider::classify(
            &coder::pipeline::provider::Signals {
                status: Some(429),
                text: "API Error: Request rejected (429) · Usage limit reached, will reset at 2026-11-24 03:00:00",
                ..Default::default()
            },
        )),
        hint: Some("hint".into()),
        ..ErrorDetail::default()
    };
    assert_schema_matches(
        "/properties/error_detail",
        to_value(&detail).unwrap(),
        to_value(ErrorDetail::default()).unwrap(),
        true,
    );

    let denial = Denial {
        tool: "Bash".into(),
        path: Some("/x".into()),
        host: Some("h:443".into()),
        class: DenialClass::OutsideSandbox,
    };
    let denial_minimal = Denial {
        host: None,
        ..denial.clone()
    };
    assert_schema_matches(
        "/properties/metrics/properties/sandbox_denials/items",
        to_value(&denial).unwrap(),
        to_value(&denial_minimal).unwrap(),
        true,
    );

    let metrics = Metrics {
        api_ms: Some(1),
        cost_usd: Some(0.5),
        backend: Some("b".into()),
        model: Some("m".into()),
        cli_version: Some("v".into()),
        queue_ms: Some(1),
        outcome_ms: Some(coder::pipeline::envelope::OutcomeTimes {
            ledger_before_ms: Some(1),
            ledger_wait_ms: Some(0),
            ledger_after_ms: Some(1),
            verify_baseline_ms: Some(1),
            verify_after_agent_ms: Some(1),
            verify_final_ms: Some(1),
            repair_turns_ms: vec![1],
            fallback_ms: Some(1),
            schema_repair_ms: Some(1),
        }),
        ..Metrics::default()
    };
    assert_schema_matches(
        "/properties/metrics/properties/outcome_ms",
        to_value(metrics.outcome_ms.as_ref().unwrap()).unwrap(),
        to_value(coder::pipeline::envelope::OutcomeTimes::default()).unwrap(),
        true,
    );
    assert_schema_matches(
        "/properties/metrics",
        to_value(&metrics).unwrap(),
        to_value(Metrics::default()).unwrap(),
        true,
    );
    assert_schema_matches(
        "/properties/metrics/properties/usage",
        to_value(TokenUsage::default()).unwrap(),
        to_value(TokenUsage::default()).unwrap(),
        true,
    );

    let attempt = AttemptSummary {
        attempt: 1,
        session_id: "s".into(),
        outcome: AttemptOutcome::Failed(ErrorKind::Timeout),
        duration_ms: 1,
        side_effects: SideEffectClass::None,
        tools: Vec::new(),
        exit_code: Some(1),
        retry: Some("retried".into()),
    };
    let attempt_minimal = AttemptSummary {
        exit_code: None,
        retry: None,
        ..attempt.clone()
    };
    assert_schema_matches(
        "/properties/attempts/items",
        to_value(&attempt).unwrap(),
        to_value(&attempt_minimal).unwrap(),
        true,
    );

    // The envelope itself is open (DESIGN §2: extra fields are allowed), but every field
    // coder prints is named.
    let mut full = Envelope::failure(ErrorKind::Timeout, Some("s".into()), "e".into(), detail);
    full.result = Some("r".into());
    full.metrics = Some(metrics);
    full.all_messages = Some(vec![
        serde_json::value::RawValue::from_string("{}".into()).unwrap(),
    ]);
    full.attempts = vec![attempt];
    full.transcript = Some("t".into());
    full.warnings = vec!["w".into()];
    let ignored = coder::workspace::ignored::IgnoredChanges {
        paths: vec![coder::workspace::ignored::IgnoredChange {
            path: ".venv/bin/check".into(),
            status: coder::workspace::ignored::IgnoredStatus::Added,
        }],
        count: 1,
        truncated: false,
    };
    assert_schema_matches(
        "/properties/changes/properties/ignored",
        to_value(&ignored).unwrap(),
        to_value(&ignored).unwrap(),
        true,
    );
    assert_schema_matches(
        "/properties/changes/properties/ignored/properties/paths/items",
        to_value(&ignored.paths[0]).unwrap(),
        to_value(&ignored.paths[0]).unwrap(),
        true,
    );
    let changes = coder::workspace::Changes {
        ignored: Some(ignored),
        ..Default::default()
    };
    assert_schema_matches(
        "/properties/changes",
        to_value(&changes).unwrap(),
        to_value(coder::workspace::Changes::default()).unwrap(),
        false,
    );
    full.changes = Some(changes);
    full.diff = Some(coder::workspace::DiffText {
        unified: String::new(),
        bytes: 0,
        truncated: false,
    });
    full.verification = Some(coder::workspace::verify::Verification {
        command: "make test".into(),
        baseline: None,
        after_agent: None,
        final_check: None,
        verdict: coder::workspace::verify::VerdictKind::StillFailing,
        repair_turns: 0,
        ignored_changes: Some(1),
        repair_skipped: Some(coder::workspace::verify::NOT_STARTED_NO_REPAIR.into()),
        repair_failed: Some(coder::workspace::verify::RepairFailed {
            turn: 1,
            error_kind: coder::exit::ErrorKind::UpstreamError,
            error: "API Error: 529".into(),
        }),
    });
    full.applied_workarounds = vec![coder::config::Workaround::CliRetriesCapped];
    full.fallback = Some(coder::pipeline::fallback::Fallback::new(
        coder::pipeline::fallback::Trigger::EditFailed,
        Vec::new(),
        false,
    ));
    let guard = coder::sandbox::gitguard::GuardReport {
        quarantined: vec![coder::sandbox::gitguard::Quarantined {
            path: "/w/n/.git".into(),
            moved: vec!["config".into()],
            to: "/w/n/.git/coder-quarantine-1".into(),
            kind: coder::sandbox::gitguard::QuarantineKind::Git,
            // Never both in a run; the sample names every field.
            after_checkout: coder::workspace::worktree::AfterCheckout {
                in_commit: Some("c0ffee:n/.envrc.coder-quarantine-1".into()),
                removed: true,
            },
        }],
        incomplete: Some("why".into()),
        secrets_replaced: Vec::new(),
    };
    assert_schema_matches(
        "/properties/sandbox",
        to_value(&guard).unwrap(),
        to_value(coder::sandbox::gitguard::GuardReport::default()).unwrap(),
        true,
    );
    assert_schema_matches(
        "/properties/sandbox/properties/quarantined/items",
        to_value(&guard.quarantined[0]).unwrap(),
        to_value(coder::sandbox::gitguard::Quarantined {
            after_checkout: Default::default(),
            ..guard.quarantined[0].clone()
        })
        .unwrap(),
        true,
    );
    full.sandbox = Some(guard);
    let worktree = coder::workspace::worktree::WorktreeReport {
        branch: "coder/x".into(),
        base: "b".into(),
        base_ref: "HEAD".into(),
        commit: None,
        note: Some("n".into()),
        kept: Some("/state/worktrees/x".into()),
    };
    let worktree_minimal = coder::workspace::worktree::WorktreeReport {
        note: None,
        kept: None,
        ..worktree.clone()
    };
    assert_schema_matches(
        "/properties/worktree",
        to_value(&worktree).unwrap(),
        to_value(&worktree_minimal).unwrap(),
        true,
    );
    full.worktree = Some(worktree);
    let routing = coder::routing::RoutingReport {
        chosen: "glm".into(),
        candidates: vec!["glm".into()],
        bucket: serde_json::json!({}),
        propensity: 1.0,
        policy: coder::routing::policy::PolicyKind::Thompson,
        cooling: vec!["deepseek".into()],
    };
    let routing_minimal = coder::routing::RoutingReport {
        cooling: Vec::new(),
        ..routing.clone()
    };
    assert_schema_matches(
        "/properties/routing",
        to_value(&routing).unwrap(),
        to_value(&routing_minimal).unwrap(),
        true,
    );
    full.routing = Some(routing);
    full.plan_file = Some("/state/plans/r.md".into());
    full.plan = Some("# Plan".into());
    let repair = coder::pipeline::envelope::SchemaRepair {
        errors: vec!["(root): \"verdict\" is a required property".into()],
        fixed: true,
    };
    assert_schema_matches(
        "/properties/schema_repair",
        to_value(&repair).unwrap(),
        to_value(&repair).unwrap(),
        true,
    );
    full.schema_repair = Some(repair);
    full.structured = Some(serde_json::json!({"verdict": "pass"}));
    let question = coder::pipeline::questions::Question {
        question: "Which colour?".into(),
        options: vec!["red".into()],
        why: Some("unclear".into()),
    };
    let question_minimal = coder::pipeline::questions::Question {
        options: Vec::new(),
        why: None,
        ..question.clone()
    };
    assert_schema_matches(
        "/properties/questions/items",
        to_value(&question).unwrap(),
        to_value(&question_minimal).unwrap(),
        true,
    );
    full.questions = Some(vec![question]);
    let mut minimal = Envelope::success(None, "r".into());
    minimal.result = None;
    assert_schema_matches(
        "",
        serde_json::from_str(&full.to_json_line()).unwrap(),
        serde_json::from_str(&minimal.to_json_line()).unwrap(),
        false,
    );
}
