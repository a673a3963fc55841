//! The run mode's sandbox options: an extra `--write` root is writable by the agent, and
//! without it the same write outside the workspace is refused by the kernel.

mod common;

use common::{Fake, steps};
use serde_json::json;

fn writes_outside(target: &std::path::Path) -> Fake {
    Fake::new(json!([
        steps::init(),
        {"step": "touch", "path": target.join("out.txt").to_str().unwrap(), "text": "written"},
        steps::text("wrote it"),
        steps::result_ok("wrote it"),
    ]))
}

#[test]
fn an_extra_write_root_is_writable_and_nothing_else_outside_the_workspace() {
    let outside = tempfile::tempdir().unwrap();
    let fake = writes_outside(outside.path());
    let out = fake
        .coder()
        .arg("--write")
        .arg(outside.path())
        .arg("write it")
        .run();
    out.assert_success("wrote it");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("out.txt")).unwrap(),
        "written"
    );

    let elsewhere = tempfile::tempdir().unwrap();
    let fake = writes_outside(elsewhere.path());
    let out = fake.coder().arg("write it").run();
    assert_eq!(out.envelope["success"], false, "{}", out.explain());
    assert!(!elsewhere.path().join("out.txt").exists());
}
