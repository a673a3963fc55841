//! Round 18c: an attack review of the protected tool configs in every directory, their
//! exclusion below dependency directories (`node_modules`, `vendor`, `site-packages`) and
//! the end-of-run guard that moves aside a protected name the start scan did not hold.
//!
//! The guard looks only at directories whose entries changed since the scan (their
//! (dev, ino, ctime) as the scan listed them): in an unchanged directory, it reasons, every
//! protected name is one the scan held. That holds only while the directory's *path* is
//! the one the scan saw. Below a dependency directory nothing is held (packages ship
//! `.vscode/`, `.husky/`), so a package's `node_modules/sub/.claude/settings.json` is
//! writable; the agent rewrites it (a write to a file moves no directory's ctime) and
//! renames `node_modules` to `tools`: only `tools` itself changed, `tools/sub` and
//! `tools/sub/.claude` are the directories the scan listed, untouched, and
//! `tools/sub/.claude/settings.json`, a protected path now, holds the agent's hooks
//! past the guard. Claude Code run in `tools/sub` loads them; direnv sources
//! `tools/sub/.envrc` the same way.
//!
//! Each attack runs through `coder run` on a fake CLI whose payload is a shell script, as
//! root and as uid 65534, with a control under `--sandbox danger-full-access` where the
//! file the user's program reads holds the agent's text.

mod common;

use common::review_tree::{Tree, who};
use common::sandbox_fixture::NOBODY;

/// The text the agent writes; a file holding it is the agent's.
const AGENT: &str = "AGENT-PAYLOAD";

/// Attacks of this file measured open today: an attack on it asserts that its payload
/// still lands confined, so the list can only shrink.
const KNOWN_OPEN: &[&str] = &[];

/// A package's tool configs below `node_modules`, rewritten, then `node_modules` renamed
/// to a name no dependency directory has: the configs now sit at protected paths, in
/// directories whose entries did not change since the scan.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_dependency_dir_renamed_away_does_not_carry_tool_configs_past_the_guard() {
    common::require_root_and_user_namespaces();
    let name = "dependency dir renamed";
    let files = [
        ("node_modules/sub/.claude/settings.json", "{}\n"),
        ("node_modules/sub/.envrc", "export A=1\n"),
        ("node_modules/sub/index.js", "\n"),
    ];
    let payload = "set -e; \
         echo '{\"hooks\":\"AGENT-PAYLOAD\"}' > node_modules/sub/.claude/settings.json; \
         echo 'touch /tmp/x # AGENT-PAYLOAD' > node_modules/sub/.envrc; \
         mv node_modules tools; echo PLANTED";
    let read_later = ["tools/sub/.claude/settings.json", "tools/sub/.envrc"];
    for owner in [None, Some(NOBODY)] {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{name} {} {mode}", who(owner));
            let tree = Tree::repo(
                "coder-r18c-",
                owner,
                &["ws/node_modules/sub/.claude"],
                &files,
                &[],
            );
            // Old enough that the scan's listings of them are trusted by the guard.
            common::age_past_the_racy_margin(&tree.ws());
            let env = tree.run(&["--sandbox", mode], payload);
            let ws = tree.ws();
            let landed = read_later.iter().any(|path| {
                std::fs::read_to_string(ws.join(path))
                    .unwrap_or_default()
                    .contains(AGENT)
            });
            if mode == "danger-full-access" {
                assert!(landed, "{case}: control: the payload did not land\n{env}");
                continue;
            }
            if KNOWN_OPEN.contains(&name) {
                assert!(landed, "{case}: closed now: take it off KNOWN_OPEN\n{env}");
                continue;
            }
            assert!(
                !landed,
                "{case}: a protected tool config holds the agent's text\n{env}"
            );
            let reported = env["sandbox"]["quarantined"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|q| q["kind"] == "tool_config");
            assert!(reported, "{case}: nothing reported moved aside\n{env}");
        }
    }
}
