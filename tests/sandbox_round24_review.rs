//! Round twenty-four's review: round twenty-three's changes (the nested domain of tool
//! commands, the CLI's `Edit` deny rules for its scratch, the held virtualenv, the
//! never-visible refusals) attacked again by one who has read the code, through the built
//! binary, root and uid 65534, each with an unconfined control.

mod common;

use common::Bounded;
use common::sandbox_fixture::{self, owners};
use serde_json::Value;

/// The CLI's `Edit` deny rules for its own scratch (`claude-<uid>/`, `cc-socks/`) spelled
/// the scratch's path as it is, and the CLI reads a rule as a gitignore glob: with the
/// state directory `st[a]te?\x` (a user's choice, `CODER_STATE_DIR`), `[a]` was a
/// character class that never matched the scratch, and the Write tool wrote
/// `claude-<uid>/planted-by-write` through a workspace link, both arms, as before round
/// twenty-three's second review. The rule now has `?` for each such character. Real CLI,
/// offline against `fixtures/sandbox/cli_scratch_write_tool.json`; control unconfined.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_scratch_rules_hold_for_a_state_directory_spelled_with_glob_characters() {
    let claude = common::real_claude();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/cli_scratch_write_tool.json",
        env!("CARGO_MANIFEST_DIR")
    );
    for owner in owners() {
        for confined in [true, false] {
            let (_dir, root) = sandbox_fixture::temp_root("coder-round24-");
            let state = root.join("st[a]te?\\x");
            for d in [
                root.join("ws"),
                root.join("home"),
                root.join("tmp"),
                state.clone(),
            ] {
                std::fs::create_dir_all(d).unwrap();
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
            .env("CODER_STATE_DIR", &state)
            .output_bounded();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let who = format!("{owner:?} confined={confined}");
            let env: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{who}: no envelope ({e}): {out:?}"));
            assert!(stdout.contains("LINKED"), "{who}: no link: {stdout}");
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
                "{who}: the Write tool wrote the CLI's scratch under a state directory \
                 spelled with glob characters: {stdout}"
            );
        }
    }
}
