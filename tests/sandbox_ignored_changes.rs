//! `changes.ignored` (DESIGN §8): what a run changed under the paths `.gitignore` ignores,
//! which the git ledger (`git add -A` semantics) leaves out of `changes.files`. Each case
//! runs a fake CLI whose payload changes an ignored tree, through the built binary, as
//! root and as uid 65534, confined (`workspace-write`) and unconfined
//! (`danger-full-access`, the control: the payload lands there too, and the report does not
//! depend on the sandbox). Round nineteen's review found such changes in nothing coder
//! reported (`sandbox_round19_review.rs` has its two attacks).
//!
//! The cases are the ways an entry's change time moves that a walk pruned by directory
//! times would miss or a "before" snapshot would need: an in-place write to an existing
//! file (its directory is untouched), a directory moved in, a symlink planted (not
//! followed), a deletion (its directory's change); a workspace outside git (the plain
//! walk, which has every file in `changes.files` already); and a build's write to `target/`
//! under `--scope 'src/**'`, which only warns.

mod common;

use common::Bounded;
use common::review_tree::{Tree, changes, error_kind, ignored, warned, who};
use common::sandbox_fixture;
use serde_json::Value;

/// The user's repository (`.gitignore` ignoring `.venv/` and `target/`, a tracked
/// `src/a.txt`, and the ignored `old` files, written and committed before the run), for
/// each arm and mode: (case, tree, the envelope of a run with `extra` flags whose agent
/// ran `payload`).
fn runs(extra: &[&str], payload: &str) -> Vec<(String, Tree, Value)> {
    common::require_root_and_user_namespaces();
    let files = [
        (".gitignore", ".venv/\ntarget/\n"),
        ("src/a.txt", "a\n"),
        (".venv/lib/site/old.pth", "import os\n"),
        (".venv/bin/activate", "# activate\n"),
        ("target/debug/old", "old\n"),
    ];
    let dirs = [
        "ws/src",
        "ws/.venv/lib/site",
        "ws/.venv/bin",
        "ws/target/debug",
    ];
    let mut runs = Vec::new();
    for owner in sandbox_fixture::owners() {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::repo("coder-ignored-", owner, &dirs, &files, &[]);
            let mut args = vec!["--sandbox", mode];
            args.extend(extra);
            let env = tree.run(&args, &format!("{payload} && echo PLANTED"));
            assert!(
                common::review_tree::result(&env).contains("PLANTED"),
                "{case}: the payload did not run: {env}"
            );
            runs.push((case, tree, env));
        }
    }
    runs
}

/// Writes over the start of an existing ignored file, in place (same inode).
const IN_PLACE: &str =
    "printf 'import evil' | dd of=.venv/lib/site/old.pth conv=notrunc status=none";

/// An in-place write to an existing ignored file (same inode, its directory untouched) is
/// `modified`; its directory is not listed.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_in_place_edit_of_an_ignored_file_is_reported() {
    for (case, tree, env) in runs(&[], IN_PLACE) {
        let text = std::fs::read_to_string(tree.ws().join(".venv/lib/site/old.pth")).unwrap();
        assert!(text.starts_with("import evil"), "{case}: {text}");
        let found = ignored(&env);
        assert!(
            found.contains(&(".venv/lib/site/old.pth".into(), "modified".into())),
            "{case}: {env}"
        );
        assert!(
            !found.iter().any(|(p, _)| p == ".venv/lib/site/"),
            "{case}: {env}"
        );
        assert_eq!(
            env["changes"]["ignored"]["truncated"], false,
            "{case}: {env}"
        );
        assert!(changes(&env).is_empty(), "{case}: {env}");
    }
}

/// A directory made in `$TMPDIR` and moved into an ignored tree is reported, `added`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_directory_moved_into_an_ignored_tree_is_reported() {
    let payload = "d=$(mktemp -d) && mkdir \"$d/evil\" && echo x > \"$d/evil/f\" \
                   && mv \"$d/evil\" .venv/lib/site/evil";
    for (case, tree, env) in runs(&[], payload) {
        assert!(tree.ws().join(".venv/lib/site/evil/f").exists(), "{case}");
        let found = ignored(&env);
        assert!(
            found.contains(&(".venv/lib/site/evil/".into(), "added".into())),
            "{case}: {env}"
        );
        assert!(
            found.contains(&(".venv/lib/site/".into(), "modified".into())),
            "{case}: {env}"
        );
    }
}

/// A symlink planted in an ignored tree is reported as itself (`added`), not followed.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_symlink_planted_in_an_ignored_tree_is_reported() {
    for (case, tree, env) in runs(&[], "ln -s /usr/bin .venv/bin/python3") {
        assert!(
            std::fs::symlink_metadata(tree.ws().join(".venv/bin/python3"))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{case}"
        );
        let found = ignored(&env);
        assert!(
            found.contains(&(".venv/bin/python3".into(), "added".into())),
            "{case}: {env}"
        );
        assert!(
            !found
                .iter()
                .any(|(p, _)| p.starts_with(".venv/bin/python3/")),
            "{case}: the walk followed the link: {env}"
        );
    }
}

/// A file deleted from an ignored tree shows as its directory's change.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_deletion_in_an_ignored_tree_is_reported_as_its_directory() {
    for (case, tree, env) in runs(&[], "rm .venv/lib/site/old.pth") {
        assert!(!tree.ws().join(".venv/lib/site/old.pth").exists(), "{case}");
        assert!(
            ignored(&env).contains(&(".venv/lib/site/".into(), "modified".into())),
            "{case}: {env}"
        );
    }
}

/// A build's write to `target/` under `--scope 'src/**'` is no scope violation: the run
/// succeeds, `changes.ignored` lists it, and a warning names it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_build_into_target_under_a_scope_only_warns() {
    let payload = "mkdir -p target/debug/deps && echo x > target/debug/deps/libfoo.rlib \
                   && echo y >> target/debug/old && echo b >> src/a.txt";
    for (case, tree, env) in runs(&["--scope", "src/**"], payload) {
        assert_eq!(env["success"], true, "{case}: {env}");
        assert_eq!(error_kind(&env), "", "{case}: {env}");
        assert_eq!(
            changes(&env),
            vec![("src/a.txt".to_owned(), "modified".to_owned())],
            "{case}: {env}"
        );
        let found = ignored(&env);
        for want in [
            ("target/debug/deps/", "added"),
            ("target/debug/deps/libfoo.rlib", "added"),
            ("target/debug/old", "modified"),
        ] {
            assert!(
                found.contains(&(want.0.to_owned(), want.1.to_owned())),
                "{case}: {want:?}: {env}"
            );
        }
        assert!(warned(&env, "outside --scope"), "{case}: {env}");
        assert!(warned(&env, "target/debug/old"), "{case}: {env}");
        // Read back later, `coder runs show` tells the same: the ignored changes and the
        // warning (it showed neither before round twenty-one).
        let mut show = std::process::Command::new(common::CODER);
        show.args(["runs", "show", "last"]);
        sandbox_fixture::user_env(&mut show, &tree.root, sandbox_fixture::PATH);
        sandbox_fixture::as_owner(&mut show, tree.owner);
        let shown = show.output_bounded();
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.status.success(), "{case}: {shown:?}");
        for want in [
            "changed under ignored paths (",
            "added    target/debug/deps/libfoo.rlib",
            "modified target/debug/old",
            "warnings (",
            "outside --scope",
        ] {
            assert!(text.contains(want), "{case}: {want:?} not in:\n{text}");
        }
    }
}

/// Outside git there is nothing ignored: the plain walk (no `.gitignore` applies) lists
/// a file planted in `.venv` in `changes.files`, as it did before `changes.ignored`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn outside_git_the_plain_walk_lists_every_file() {
    common::require_root_and_user_namespaces();
    for owner in sandbox_fixture::owners() {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::bare(
                "coder-ignored-plain-",
                common::review_tree::VAR_TMP,
                owner,
                &["ws/.venv/lib/site"],
            );
            tree.write_old(&[(".gitignore", ".venv/\n"), ("a.txt", "a\n")]);
            tree.give_away();
            let env = tree.run(
                &["--sandbox", mode],
                "echo 'import os' > .venv/lib/site/zz.pth && echo PLANTED",
            );
            assert!(
                common::review_tree::result(&env).contains("PLANTED"),
                "{case}: {env}"
            );
            assert_eq!(
                changes(&env),
                vec![(".venv/lib/site/zz.pth".to_owned(), "added".to_owned())],
                "{case}: {env}"
            );
            assert!(env["changes"].get("ignored").is_none(), "{case}: {env}");
        }
    }
}
