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

/// Other ways for a tool command into the CLI's scratch, all held: a hard link of a file
/// of `claude-<uid>/` into the workspace, a rename out of it, the nest wrapper
/// (`$CLAUDE_CODE_SHELL`) re-executed with `CLAUDE_CODE_TMPDIR` pointing at
/// `claude-<uid>/` (so that its cwd file would be made there) or with `CODER_NEST_WRITE`
/// listing `/` (domains intersect: the re-executed wrapper's domain is nested in the
/// tool's), a cwd file's name made a directory or a FIFO beforehand. Ordinary writes still
/// work: the workspace, `TMPDIR`, a `--write` directory, `/dev/shm`. Real CLI, offline
/// against `fixtures/sandbox/nest_escapes.json`, root and uid 65534; control unconfined
/// (the hard link, the rename and the names are made).
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn tool_commands_find_no_other_way_into_the_clis_scratch() {
    let claude = common::real_claude();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/nest_escapes.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let escapes = ["hardlink", "rename", "cwdfile-as-dir", "fifo"];
    let held_only_confined = ["reexec", "reexec-root"];
    let work = ["ws", "tmpdir", "write-dir", "shm"];
    for owner in owners() {
        for confined in [true, false] {
            let (_dir, root) = sandbox_fixture::temp_root("coder-round23b-");
            for d in ["ws", "home", "tmp", "extra"] {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
            let extra_dir = root.join("extra");
            std::fs::write(root.join("ws/extra-dir"), extra_dir.to_str().unwrap()).unwrap();
            if let Some(uid) = owner {
                sandbox_fixture::chown_tree(&root, uid);
            }
            let write = extra_dir.to_str().unwrap();
            let mut extra = vec!["--backend", &cassette, "--return-all-messages"];
            extra.extend(["--write", write]);
            if !confined {
                extra.extend(["--sandbox", "danger-full-access"]);
            }
            let out = sandbox_fixture::coder_as(
                &root,
                owner,
                &root.join("ws"),
                &claude,
                &extra,
                "find another way into the CLI's scratch",
            )
            .env("TMPDIR", root.join("tmp"))
            .output_bounded();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let who = format!("{owner:?} confined={confined}");
            let env: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{who}: no envelope ({e}): {out:?}"));
            assert!(
                stdout.contains("PROBED") && stdout.contains("WAITED"),
                "{who}: the Bash calls did not all run: {stdout}"
            );
            let says = |verdict: &str, name: &str| stdout.contains(&format!("{verdict} {name}\\n"));
            for name in work {
                assert!(
                    says("WROTE", name),
                    "{who}: {name} is not written: {stdout}"
                );
            }
            for name in escapes {
                let expected = if confined { "DENIED" } else { "WROTE" };
                assert!(says(expected, name), "{who}: {name}: {stdout}");
            }
            if confined {
                for name in held_only_confined {
                    assert!(says("DENIED", name), "{who}: {name}: {stdout}");
                }
                assert_eq!(env["result"], "The honest answer.", "{who}: {env}");
            }
        }
    }
}
