//! Bad input a user or an orchestrator gives, refused up front with a clear message and the
//! error kind DESIGN §2 names for it: a workspace no confined run may have, duplicate keys
//! in `--request` JSON, empty flag values, a negative MCP `wait_s`.

mod common;

use common::{Fake, steps};
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
