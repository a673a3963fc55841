//! The suite cannot pass having skipped what it must run. Tests that need the real claude CLI
//! or root and user namespaces are `#[ignore]`d (cargo counts them as "ignored");
//! `scripts/test` includes them when the machine has what they need and sets
//! `CODER_TEST_IGNORED_INCLUDED`. Under `CI=true` a run without them fails here, so a bare
//! `cargo test` in CI cannot pass with the end-to-end and adversarial suites left out.

mod common;

use common::Bounded;

#[test]
fn ci_runs_the_ignored_tests_too() {
    if std::env::var("CI").as_deref() != Ok("true") {
        return;
    }
    assert!(
        std::env::var_os("CODER_TEST_IGNORED_INCLUDED").is_some(),
        "CI=true but the #[ignore]d tests (real claude CLI, root and user namespaces) are not \
         included: run scripts/test (it adds --include-ignored), not a bare cargo test"
    );
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_claude_cli_is_there_when_ignored_tests_run() {
    let claude = common::real_claude();
    let out = std::process::Command::new(&claude)
        .arg("--version")
        .output_within(std::time::Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{} --version: {out:?}",
        claude.display()
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn root_and_user_namespaces_are_there_when_ignored_tests_run() {
    common::require_root_and_user_namespaces();
}
