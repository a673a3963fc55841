//! Round twenty's second review: the two changes merged last (the CLI's per-run home on a
//! tmpfs, `config::scratch`; `changes.ignored`, `workspace::ignored`), attacked by someone
//! who did not write them. Every attack runs through the built binary as root and as uid
//! 65534, confined (`workspace-write`) and unconfined (`danger-full-access`, the control:
//! the payload lands there too, and the report does not depend on the sandbox).
//!
//! Found open, closed here:
//! * **A directory made unlistable hid what the agent wrote in it.** `git add -A` passes
//!   over a directory it cannot read with a warning on stderr and succeeds; coder's ledger
//!   read only its status. An agent running as the user (uid 65534 here; any user but
//!   root) that wrote `src/evil.sh` and then `chmod 311 src` (the file stays usable by
//!   name) had it in neither `changes.files` nor `changes.ignored`, and a file in a new
//!   directory of ignored files likewise, with nothing said. The ledger now reads git's
//!   "could not open directory" warnings: such directories are named in a warning, and
//!   the changes are marked unseen (no `--scope` check vouches for the run).
//! * **An ignored file was counted twice.** git lists an untracked directory holding only
//!   ignored files (`new/`) and each of them (`new/x.pth`); the walk of `new/` reached the
//!   file again, so it was listed twice and `count` was too high. Roots below another are
//!   left out now.
//! * **An ignored write before the snapshot started was missed.** The walk looked from
//!   the start of the "before" snapshot, which a confined run takes while its CLI starts;
//!   the safety net for a process of the run that writes before it ends (a CLI running
//!   commands as it starts) covered `changes.files` only. A `src/early.pth` written then
//!   was in no list (a warning named `src` as changed, nothing more). The walk looks from
//!   the run's first process now, when that is earlier.
//! * **`CODER_SCRATCH_DIR` inside the workspace put the CLI's home in `changes`.** The
//!   ledger left coder's state directory out of the workspace's comparison, not the
//!   scratch directory: an unconfined run (a confined one is refused) listed the CLI's
//!   home, its `.credentials.json` included, in `changes.files`, and `--return-diff`
//!   showed the login's text (redaction masks only the token shapes it knows). It is left
//!   out like the state directory now.
//!
//! Found open, closed in round twenty-one: outside git, the plain walk run as the agent's
//! user cannot open a directory the agent made `0311`: it passed over it, so a file
//! written there was missed and the directory's old files showed as `deleted`, with no
//! word of why (`outside_git_a_file_in_a_directory_made_unlistable`). The walk now
//! records such a directory: a warning names it, the changes are marked unseen, and its
//! old files are not called deleted.
//!
//! Looked at and held: a process the agent leaves running (`setsid`, in the background)
//! to write under an ignored path after the run is gone by then, confined or not (coder
//! ends the run's whole tree before the ledger looks); `/dev/shm/coder-<uid>` made first by
//! another user, or a symlink there, is refused by `fstat` of what was opened with
//! `O_NOFOLLOW` and the run falls back to the state directory with a warning; `/dev/shm`
//! is sticky, so no other user can rename coder's directory there once checked; the
//! agent's `/dev/shm` is a private tmpfs holding only its own CLI home.

mod common;

use common::review_tree::{Tree, changes, ignored, warned, who};
use common::sandbox_fixture;
use serde_json::Value;

/// The user's repository (`.gitignore` ignoring `*.pth`, a tracked `src/a.txt`), for each
/// arm and mode: (case, tree, the envelope of a run whose agent ran `payload`).
fn runs(payload: &str) -> Vec<(String, Tree, Value)> {
    common::require_root_and_user_namespaces();
    let files = [(".gitignore", "*.pth\n"), ("src/a.txt", "a\n")];
    let mut runs = Vec::new();
    for owner in sandbox_fixture::owners() {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::repo("coder-r20b-", owner, &["ws/src"], &files, &[]);
            let env = tree.run(&["--sandbox", mode], &format!("{payload} && echo PLANTED"));
            assert!(
                common::review_tree::result(&env).contains("PLANTED"),
                "{case}: the payload did not run: {env}"
            );
            runs.push((case, tree, env));
        }
    }
    runs
}

/// A file written into a tracked directory, and an ignored one into a new directory, each
/// directory then made unlistable (`0311`): each file is reported, or its directory named
/// in a warning. Root's git reads them anyway (it lists both); uid 65534's cannot.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_file_in_a_directory_made_unlistable_is_not_passed_over_in_silence() {
    let payload = "echo evil > src/evil.sh && mkdir new && echo x > new/x.pth \
                   && chmod 311 src new";
    for (case, tree, env) in runs(payload) {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(tree.ws().join("src"))
            .unwrap()
            .permissions();
        // The control: it lands unconfined. (Confined, coder's end gives the user's read
        // permission back to directories the agent made unreadable.)
        if case.ends_with("danger-full-access") {
            assert_eq!(mode.mode() & 0o777, 0o311, "{case}: the chmod did not land");
        }
        assert!(tree.ws().join("src/evil.sh").exists(), "{case}");
        let unread = |dir: &str| warned(&env, "could not be read") && warned(&env, dir);
        let listed = changes(&env).iter().any(|(p, _)| p == "src/evil.sh");
        assert!(
            listed || unread("src/"),
            "{case}: src/evil.sh unseen: {env}"
        );
        let listed = ignored(&env).iter().any(|(p, _)| p == "new/x.pth");
        assert!(listed || unread("new/"), "{case}: new/x.pth unseen: {env}");
        // The tree's removal needs to list them.
        for dir in ["src", "new"] {
            let open = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(tree.ws().join(dir), open).unwrap();
        }
    }
}

/// The directory made unlistable has a newline in its name (`a<LF>b`), which split git's
/// warning over two lines and made coder's reading of it drop the directory: the file in
/// it was in neither list and nothing was said (found after round twenty, by reading).
/// Now: listed, or the directory is named in a warning (which also makes a `--scope`
/// check say the run cannot be vouched for).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_directory_named_with_a_newline_and_made_unlistable_is_not_passed_over() {
    let payload = "d=$(printf 'a\\nb') && mkdir \"$d\" && echo evil > \"$d/evil.sh\" \
                   && chmod 311 \"$d\"";
    for (case, tree, env) in runs(payload) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tree.ws().join("a\nb");
        assert!(
            dir.join("evil.sh").exists(),
            "{case}: the payload did not land"
        );
        let listed = changes(&env).iter().any(|(p, _)| p == "a\nb/evil.sh");
        let said = warned(&env, "could not be read") && warned(&env, "a\nb/");
        assert!(
            listed || said,
            "{case}: a\\nb/evil.sh unseen, nothing said: {env}"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// An ignored file in a new directory of ignored files alone (which git lists with the
/// file) is listed and counted once.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_ignored_file_git_lists_with_its_directory_is_counted_once() {
    for (case, _tree, env) in runs("mkdir new && echo x > new/x.pth") {
        let found: Vec<String> = ignored(&env).into_iter().map(|(p, _)| p).collect();
        assert_eq!(found, ["new/", "new/x.pth"], "{case}: {env}");
        assert_eq!(env["changes"]["ignored"]["count"], 2, "{case}: {env}");
    }
}

/// `CODER_SCRATCH_DIR` inside the workspace: a confined run is refused (the agent would
/// reach other runs' CLI homes), and no run lists the CLI's home (its login, its
/// session) in `changes` or shows it in the diff.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_scratch_directory_inside_the_workspace_is_not_in_the_changes() {
    common::require_root_and_user_namespaces();
    const LOGIN: &str = "{\"claudeAiOauth\":{\"accessToken\":\"not-a-token-shape-R20B\"}}\n";
    for owner in sandbox_fixture::owners() {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let dirs = ["ws/src", "state/claude"];
            let tree = Tree::repo("coder-r20b-", owner, &dirs, &[("a", "a\n")], &[]);
            std::fs::write(tree.root.join("state/claude/.credentials.json"), LOGIN).unwrap();
            tree.give_away();
            let scratch = tree.ws().join(".scratch");
            let env = tree.run_with(
                &["--sandbox", mode, "--return-diff"],
                "echo PLANTED",
                &[("CODER_SCRATCH_DIR", scratch.to_str().unwrap())],
            );
            if mode == "workspace-write" {
                assert_eq!(
                    common::review_tree::error_kind(&env),
                    "config_error",
                    "{case}: {env}"
                );
            } else {
                assert!(
                    common::review_tree::result(&env).contains("PLANTED"),
                    "{case}: {env}"
                );
            }
            let text = env.to_string();
            assert!(
                !text.contains("R20B"),
                "{case}: the login is in the envelope: {env}"
            );
            assert!(
                !changes(&env).iter().any(|(p, _)| p.starts_with(".scratch")),
                "{case}: {env}"
            );
        }
    }
}

/// A write under an ignored path by a process of the run that started before the
/// "before" snapshot (the snapshot made late by the test hook, as when the run's CLI runs
/// commands as it starts) is reported: the walk looks from the run's first process.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_ignored_write_before_the_snapshot_started_is_reported() {
    common::require_root_and_user_namespaces();
    let files = [(".gitignore", "*.pth\n"), ("src/a.txt", "a\n")];
    for owner in sandbox_fixture::owners() {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::repo("coder-r20b-", owner, &["ws/src"], &files, &[]);
            let env = tree.run_with(
                &["--sandbox", mode],
                "echo x > src/early.pth && echo PLANTED",
                &[("CODER_TEST_LEDGER_DELAY_MS", "1500")],
            );
            assert!(tree.ws().join("src/early.pth").exists(), "{case}: {env}");
            assert!(
                ignored(&env).iter().any(|(p, _)| p == "src/early.pth"),
                "{case}: {env}"
            );
        }
    }
}

/// Outside git, the plain walk: a file written into a directory then made unlistable
/// (`0311`). Root's walk reads it anyway (it lists the file). uid 65534's cannot open the
/// directory: it passed over it in silence until round twenty-one, so the new file was
/// missed and the directory's old files showed as `deleted`. Now a warning names the
/// directory, and none of its old files is called deleted.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn outside_git_a_file_in_a_directory_made_unlistable() {
    use std::os::unix::fs::PermissionsExt;
    common::require_root_and_user_namespaces();
    let payload = "echo evil > src/evil.sh && chmod 311 src && echo PLANTED";
    for owner in sandbox_fixture::owners() {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::bare(
                "coder-r20b-",
                common::review_tree::VAR_TMP,
                owner,
                &["ws/src"],
            );
            tree.write_old(&[("src/a.txt", "a\n")]);
            tree.give_away();
            let env = tree.run(&["--sandbox", mode], payload);
            assert!(
                common::review_tree::result(&env).contains("PLANTED"),
                "{case}: {env}"
            );
            // The control: the chmod landed (the file stays, usable by name).
            assert!(tree.ws().join("src/evil.sh").exists(), "{case}: {env}");
            let found = changes(&env);
            let listed = found.iter().any(|(p, _)| p == "src/evil.sh");
            if owner.is_none() {
                assert!(listed, "{case}: {env}");
            } else {
                assert!(
                    listed || (warned(&env, "could not be read") && warned(&env, "src/")),
                    "{case}: src/evil.sh passed over in silence: {env}"
                );
            }
            assert!(
                !found
                    .iter()
                    .any(|(p, s)| p == "src/a.txt" && s == "deleted"),
                "{case}: an old file of the unreadable directory shown deleted: {env}"
            );
            let back = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(tree.ws().join("src"), back).unwrap();
        }
    }
}
