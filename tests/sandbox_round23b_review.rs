//! Round twenty-three's second review: the two changes of the round no one but their
//! authors had attacked, attacked through the built binary, root and uid 65534, each with
//! an unconfined control: the nested domain's writable roots (`nest.rs`: the CLI's own
//! scratch kept from tool commands) and the refusal of grants touching the home
//! directory's never-visible entries (`policy.rs`).

mod common;

use common::Bounded;
use common::sandbox_fixture::{self, owners};
use serde_json::Value;

/// The CLI's own scratch (`$CLAUDE_CODE_TMPDIR/claude-<uid>/`) is kept from tool commands
/// by the nested domain, but the CLI's file tools (Write, Edit, NotebookEdit) run in the
/// CLI's own domain, which writes there. A Bash call links `scratchlink` in the workspace
/// to `claude-<uid>/` (a symlink: Landlock checks no link target), and the Write tool
/// writes `{{workspace}}/scratchlink/planted-by-write`: it landed in `claude-<uid>/`, both
/// arms, until this review. coder now denies the CLI's file tools its scratch names by
/// the CLI's own permission rules (which check the symlink-resolved path). Real CLI,
/// offline against `fixtures/sandbox/cli_scratch_write_tool.json`, root and uid 65534;
/// control unconfined (no rules: the write lands).
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_clis_write_tool_does_not_write_its_own_scratch_through_a_link() {
    let claude = common::real_claude();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/cli_scratch_write_tool.json",
        env!("CARGO_MANIFEST_DIR")
    );
    for owner in owners() {
        for confined in [true, false] {
            let (_dir, root) = sandbox_fixture::temp_root("coder-round23b-");
            for d in ["ws", "home", "tmp"] {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
            if let Some(uid) = owner {
                sandbox_fixture::chown_tree(&root, uid);
            }
            let mut extra = vec!["--backend", &cassette, "--return-all-messages"];
            if !confined {
                extra.extend(["--sandbox", "danger-full-access"]);
            }
            let out = sandbox_fixture::coder_as(
                &root,
                owner,
                &root.join("ws"),
                &claude,
                &extra,
                "write the CLI's scratch with its Write tool",
            )
            .env("TMPDIR", root.join("tmp"))
            .output_bounded();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let who = format!("{owner:?} confined={confined}");
            let env: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{who}: no envelope ({e}): {out:?}"));
            assert!(
                stdout.contains("LINKED"),
                "{who}: the link was not made: {stdout}"
            );
            let planted = stdout.contains("PLANTED-IN-SCRATCH");
            assert!(
                planted || stdout.contains("NOT-IN-SCRATCH"),
                "{who}: the check did not run: {stdout}"
            );
            if !confined {
                assert!(planted, "{who}: control: the Write tool wrote: {stdout}");
                continue;
            }
            assert_eq!(env["result"], "The honest answer.", "{who}: {env}");
            assert!(
                !planted,
                "{who}: the CLI's Write tool wrote its scratch through a link: {stdout}"
            );
        }
    }
}
