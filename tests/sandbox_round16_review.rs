//! Round sixteen's review: the change ledger's new private git dir, its read budget and
//! the plain walk it falls back to, and the sandbox's `commondir` placeholder, attacked
//! by someone who has read them. Every attack runs as root and as uid 65534, each with a
//! control showing that its setup lands.
//!
//! Found open when this review started, closed with it:
//! * **`--scope` passed whatever the agent changed once the ledger failed.** The agent
//!   can make the git ledger fail at will (a sparse file past its 1 GiB read budget; a
//!   FIFO or garbage in `.git/objects/info/alternates`, which the agent may write): the
//!   envelope then has no `changes`, and the scope was checked against nothing, so a run
//!   that wrote outside `--scope` succeeded. Now a scope that cannot be checked fails the
//!   run (`scope_violation`, saying why).
//! * **`--scope` read the listed changes only.** `changes.files` stops at 1000 entries:
//!   a thousand paths changed inside the scope, sorted before one outside it, left that
//!   one off the list and unchecked. The scope now reads every changed path; and a walk
//!   cut at its file cap, or nested repositories left out, fail a scoped run as above.
//! * **An edit the plain walk did not hash was compared by size and mtime.** Past its
//!   1 GiB hashing budget the walk compared a file by size, mtime and mode, all the
//!   agent's to put back: an earlier run's agent left a sparse file just under 1 GiB that
//!   sorts first, the next run's agent edited a file behind it keeping its size and put
//!   its mtime back (`touch -d`), and the ledger said nothing changed. The change time
//!   and the inode are compared too now. (A git workspace gets the plain walk when
//!   discovery finds no repository: the agent may write `.git/HEAD`, and garbage there
//!   makes the next run's `rev-parse` say "not a git repository", silently.)
//! * **A file left in `.git` stopped every later run's sandbox.** The `commondir`
//!   placeholder was written under `.coder-commondir-PID-N` with `O_EXCL`; the git dir is
//!   the agent's to write, and coder's pid is foreseeable (pid 1 as a container's entry
//!   point): a file left at that name failed the open, and every later run ended in a
//!   `sandbox_error`. The name is random now.
//! * **A workspace made to look like a git dir chose what the ledger saw (below the git
//!   guard).** `HEAD`, `objects/`, `refs/`, `config` (`core.worktree = .`) and
//!   `info/exclude` in a workspace without `.git`: git's discovery takes it for a
//!   repository, and the ledger copied its exclude. The end-of-run git guard moves
//!   `core.worktree` aside, which held; with the key back, a file the exclude named was
//!   left out of the next run's ledger. coder's git now refuses a repository discovered
//!   as a bare one (`safe.bareRepository=explicit`).
//! * **Code written into an `ident` span was not in the ledger.** With `ident` set for a
//!   file (the project's `.gitattributes`, or one an earlier run committed), `git add`
//!   records `$Id: ANYTHING $` as `$Id$`: the agent wrote `x = "$Id: "; import os;
//!   os.system(...); "$"` and the ledger said nothing changed. The private git dir's
//!   `info/attributes` unsets `ident` now.
//! * **A broken `HEAD` handed the ledger to a repository around the workspace.** The
//!   agent may write `.git/HEAD`; with garbage there git looks further up, and a
//!   repository around the workspace that ignores its files (`ws/*.txt`) made the next
//!   run's ledger report nothing, silently. Discovery that passed over a `.git` of the
//!   workspace now warns, and the plain walk measures.
//! * **A file of empty lines made coder's own git take gigabytes.** git's line diff holds
//!   some forty bytes a line of both sides; a 500 MiB file of empty lines (within the read
//!   budget and git's 512 MiB big-file threshold) had `diff-tree --numstat`, unconfined,
//!   ask for about 20 GiB. The ledger's git gets `RLIMIT_DATA` of 2 GiB: past it the file
//!   stays listed without line counts, with a warning.
//!
//! Looked at and held (no test of their own here):
//! * `.git/objects/info/alternates` (the agent may write it) pointing anywhere: the
//!   snapshots read only objects through it, the ones a diff reads are hashed first
//!   (`unverified_blobs`); made a FIFO or garbage it fails the ledger (now a failed
//!   scope). Reading an object outside the sandbox into the diff needs its id, which the
//!   agent cannot list.
//! * garbage in `.git/HEAD` makes the next run's discovery say "not a git repository",
//!   silently: that run is measured by the plain walk (see the budget item above).
//! * the copied `info/exclude`: `info/` is read-only in the sandbox; a FIFO or symlink
//!   there is refused by `copy_plain_file`.
//!
//! Seen, not pursued: `.gitattributes` can still shape what the ledger shows of a file
//! it lists: `-diff` makes a text file's diff "Binary files differ" (no line counts, no
//! diff; the file and the `.gitattributes` change are listed), `text`/`eol` hide a change
//! of line endings alone. A run's files that `.gitignore` already ignores are not in
//! `changes` (git's semantics), so not checked against `--scope` either. The ledger's
//! snapshots write up to 1 GiB (the read budget, compressed) into coder's state directory
//! per run, removed at its end.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::time::Duration;

use common::Bounded;
use common::review_tree::{Tree, VAR_TMP, changes, error_kind, result, warned, who};
use common::sandbox_fixture::{self, NOBODY};
use serde_json::Value;

/// Attacks of this file measured open today.
const KNOWN_OPEN: &[&str] = &[];

/// A tree for runs of a fake CLI as one arm's user: workspace `ws` holding `files` (name,
/// content) with an mtime well in the past, committed to a git repository when `git` (a
/// plain directory otherwise), `home`, coder's `state`, in `/var/tmp`.
fn new_tree(owner: Option<u32>, files: &[(&str, &str)], git: bool) -> Tree {
    let tree = Tree::bare("coder-r16-", VAR_TMP, owner, &[]);
    tree.write_old(files);
    if git {
        tree.git(&["init", "-q"]);
        tree.git(&["add", "-A"]);
        tree.git(&["commit", "-qm", "init"]);
    }
    tree.give_away();
    tree
}

/// coder as the arm's user on a fake CLI whose payload is `payload`: its envelope.
fn run(tree: &Tree, extra: &[&str], payload: &str, deadline: Duration) -> Value {
    run_as(tree, &[], extra, payload, deadline)
}

/// [`run`], coder started directly (no `timeout` between), or by `wrap` (a program and its
/// arguments that end by running the rest of the command line, as root; the arm's user
/// is taken by `setpriv` at its end) when given.
fn run_as(tree: &Tree, wrap: &[&str], extra: &[&str], payload: &str, deadline: Duration) -> Value {
    let bin = tree.fake_claude(payload);
    let mut cmd = match wrap.split_first() {
        Some((program, args)) => {
            let mut cmd = std::process::Command::new(program);
            cmd.args(args);
            if tree.owner.is_some() {
                cmd.args([
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                ]);
            }
            cmd.arg(common::CODER);
            cmd
        }
        None => {
            let mut cmd = std::process::Command::new(common::CODER);
            sandbox_fixture::as_owner(&mut cmd, tree.owner);
            cmd
        }
    };
    cmd.arg("--cd")
        .arg(tree.ws())
        .arg("--claude-bin")
        .arg(&bin)
        .args(extra)
        .arg("go");
    sandbox_fixture::user_env(&mut cmd, &tree.root, sandbox_fixture::PATH);
    let out = common::run_bounded(&mut cmd, deadline)
        .unwrap_or_else(|_| panic!("coder did not end within {deadline:?}"));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"))
}

/// The agent writes outside `--scope` and leaves a sparse file of 2 GiB (no disk), past
/// the git ledger's read budget: the ledger fails, the envelope has no `changes`, and the
/// scope was checked against nothing, so the run succeeded. Now a scope that cannot be
/// checked fails the run. Control: the ledger's git was stopped (the budget's warning):
/// without the defence nothing would have been checked. (On a loaded machine the fake
/// agent's file may be there for the "before" already, which then falls back to the
/// plain walk since round eighteen, and the scope is checked against its changes.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_ledger_made_to_fail_does_not_pass_a_change_outside_the_scope() {
    common::require_root_and_user_namespaces();
    let name = "scope unchecked when the ledger fails";
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let tree = new_tree(owner, &[("keep.txt", "k\n")], true);
        let payload = "echo x > outside.txt && truncate -s 2G big.bin && echo PLANTED";
        let env = run(
            &tree,
            &["--scope", "keep.txt"],
            payload,
            Duration::from_secs(120),
        );
        assert!(result(&env).contains("PLANTED"), "{case}: {env}");
        assert!(
            warned(&env, "GiB of the workspace's files"),
            "{case}: control: the ledger's git was not stopped: {env}"
        );
        // The "after" stopped: no changes at all. Or, when the fake agent's file was
        // already there for the "before" (a loaded machine), the "before" stopped and
        // fell back to the plain walk, which measured the run.
        let measured = !env["changes"].is_null();
        if KNOWN_OPEN.contains(&name) {
            assert_eq!(env["success"], true, "{case}: {name} is closed: {env}");
        } else {
            assert_eq!(error_kind(&env), "scope_violation", "{case}: {env}");
            let error = env["error"].as_str().unwrap_or_default();
            assert!(
                if measured {
                    error.contains("outside.txt")
                } else {
                    error.contains("cannot check the run against --scope")
                },
                "{case}: {env}"
            );
        }
    }
}

/// The agent changes 1000 files inside `--scope` (they sort first) and one outside it:
/// `changes.files` stops at 1000 entries, and the scope read only those. Now it reads
/// every changed path. Control: the one outside is not on the envelope's list.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_thousand_changes_inside_the_scope_do_not_hide_one_outside_it() {
    common::require_root_and_user_namespaces();
    let name = "scope reads the listed changes only";
    for git in [true, false] {
        for owner in [None, Some(NOBODY)] {
            let case = format!("{} {}", who(owner), if git { "git" } else { "plain" });
            let tree = new_tree(owner, &[("keep.txt", "k\n")], git);
            let payload = "mkdir a && for i in $(seq 1000); do echo $i > a/$i; done && \
                           echo x > outside.txt && echo PLANTED";
            let env = run(&tree, &["--scope", "a"], payload, Duration::from_secs(120));
            assert!(result(&env).contains("PLANTED"), "{case}: {env}");
            assert_eq!(env["changes"]["files_changed"], 1001, "{case}: {env}");
            assert!(
                !changes(&env).iter().any(|(p, _)| p == "outside.txt"),
                "{case}: control: the change outside is listed: {env}"
            );
            if KNOWN_OPEN.contains(&name) {
                assert_eq!(env["success"], true, "{case}: {name} is closed: {env}");
            } else {
                assert_eq!(error_kind(&env), "scope_violation", "{case}: {env}");
                assert_eq!(
                    env["error_detail"]["out_of_scope"],
                    serde_json::json!(["outside.txt"]),
                    "{case}: {env}"
                );
            }
        }
    }
}

/// A workspace measured by the plain walk (no git; a git one whose `.git/HEAD` the agent
/// filled with garbage gets it too). An earlier run's agent leaves `0.bin`, sparse, just
/// under the walk's 1 GiB hashing budget, so that it takes the budget and `t.txt`
/// behind it is not hashed, and touches `t.txt`'s mode (so no cached entry spares it).
/// The next run's agent rewrites `t.txt` with its size kept and its mtime put back: the
/// walk compared an unhashed file by size, mtime and mode, and said nothing changed.
/// Control: the file's content changed while its size and mtime did not.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_edit_behind_the_plain_walks_hash_budget_is_seen() {
    common::require_root_and_user_namespaces();
    let name = "plain walk compares unhashed files by size and mtime";
    let deadline = Duration::from_secs(300);
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let tree = new_tree(owner, &[("t.txt", "before\n")], false);
        let plant = "truncate -s 1073741821 0.bin && chmod 600 t.txt && echo PLANTED";
        let env = run(&tree, &[], plant, deadline);
        assert!(result(&env).contains("PLANTED"), "{case}: {env}");
        let file = tree.ws().join("t.txt");
        let stat = |p: &std::path::Path| {
            let m = std::fs::metadata(p).unwrap();
            (m.len(), m.modified().unwrap())
        };
        let was = stat(&file);
        let edit = "m=$(stat -c %y t.txt) && printf 'AFTER!\\n' > t.txt && touch -d \"$m\" t.txt \
                    && echo EDITED";
        let env = run(&tree, &[], edit, deadline);
        assert!(result(&env).contains("EDITED"), "{case}: {env}");
        assert_eq!(
            (stat(&file), std::fs::read_to_string(&file).unwrap()),
            (was, "AFTER!\n".to_owned()),
            "{case}: control: size and mtime kept, content changed"
        );
        let seen = changes(&env).contains(&("t.txt".into(), "modified".into()));
        if KNOWN_OPEN.contains(&name) {
            assert!(!seen, "{case}: {name} is closed: {env}");
        } else {
            assert!(seen, "{case}: the edit is not in the ledger: {env}");
        }
    }
}

/// coder as a container's entry point (pid 1 of its pid namespace, here `unshare
/// --pid`): an earlier run's agent left `.coder-commondir-1-0` (and the names of the
/// next pids and counters) in `.git`, which it may write. The `commondir` placeholder
/// was written under that name with `O_EXCL`: the open failed, and every later run
/// ended in a `sandbox_error`. Control: the planted files are still there, at the names
/// the old code used.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_file_left_at_the_commondir_placeholders_temporary_name_does_not_stop_later_runs() {
    common::require_root_and_user_namespaces();
    let name = "foreseeable commondir temporary name";
    let wrap = ["unshare", "--pid", "--fork", "--mount-proc"];
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let tree = new_tree(owner, &[("a.txt", "a\n")], true);
        let plant = "for p in $(seq 1 64); do for n in 0 1 2 3; do \
                     : > .git/.coder-commondir-$p-$n; done; done && echo PLANTED";
        let env = run_as(&tree, &wrap, &[], plant, Duration::from_secs(120));
        assert!(result(&env).contains("PLANTED"), "{case}: {env}");
        assert!(
            tree.ws().join(".git/.coder-commondir-1-0").exists(),
            "{case}: control: nothing planted"
        );
        let env = run_as(
            &tree,
            &wrap,
            &[],
            "echo y >> a.txt; echo AGAIN",
            Duration::from_secs(120),
        );
        if KNOWN_OPEN.contains(&name) {
            assert_eq!(
                error_kind(&env),
                "sandbox_error",
                "{case}: {name} is closed: {env}"
            );
        } else {
            assert!(result(&env).contains("AGAIN"), "{case}: next run: {env}");
            assert!(
                changes(&env).contains(&("a.txt".into(), "modified".into())),
                "{case}: next run: {env}"
            );
        }
    }
}

/// A workspace without git: the agent makes the workspace itself look like a git
/// directory (`HEAD`, `objects/`, `refs/`, a `config` with `core.worktree = .`) with an
/// `info/exclude` of its own, naming the file the next run's agent adds. git takes a
/// directory with a `HEAD` for a git dir when no `.git` is found, and the ledger's private
/// git dir copies that repository's `info/exclude`. Held: the end-of-run git guard moves
/// `core.worktree` aside, so the next run's discovery finds a bare repository with no
/// work tree, warns, and the plain walk lists the file. Below the guard, though, nothing
/// held: with the key put back (as if the guard had missed it) coder's discovery took the
/// workspace for that repository and the file was left out of the ledger. Now coder's
/// git takes no repository it finds as a bare one (`safe.bareRepository = explicit`).
/// Control: the user's own git takes the workspace for a repository that hides the file.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_workspace_made_to_look_like_a_git_dir_does_not_choose_what_the_ledger_sees() {
    common::require_root_and_user_namespaces();
    let name = "workspace made a git dir, below the git guard";
    let deadline = Duration::from_secs(120);
    let config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n";
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let tree = new_tree(owner, &[("a.txt", "a\n")], false);
        let plant = "mkdir -p objects refs/heads info && echo 'ref: refs/heads/main' > HEAD && \
                     printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n' > config && \
                     echo 'hidden*' > info/exclude && echo PLANTED";
        let env = run(&tree, &[], plant, deadline);
        assert!(result(&env).contains("PLANTED"), "{case}: {env}");
        let env = run(
            &tree,
            &[],
            "echo x >> a.txt && echo evil > hidden.sh && echo AGAIN",
            deadline,
        );
        assert!(result(&env).contains("AGAIN"), "{case}: {env}");
        // Listed; "modified" when the "before" saw it already (the fake CLI's payload
        // does not wait for it: a file changed after the run's first process started).
        let in_ledger = |env: &Value, file: &str| changes(env).iter().any(|(p, _)| p == file);
        assert!(
            in_ledger(&env, "hidden.sh"),
            "{case}: the git guard no longer holds: {env}"
        );
        // Below the guard: the key put back.
        std::fs::write(tree.ws().join("config"), config).unwrap();
        let mut status = std::process::Command::new("git");
        status
            .args(["status", "--porcelain", "--untracked-files=all"])
            .current_dir(tree.ws())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", tree.root.join("home"));
        sandbox_fixture::as_owner(&mut status, owner);
        let out = status.output_bounded();
        let listed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && listed.contains("a.txt") && !listed.contains("hidden"),
            "{case}: control: the user's git does not hide the file: {out:?}"
        );
        let env = run(&tree, &[], "echo evil > hidden2.sh && echo THIRD", deadline);
        assert!(result(&env).contains("THIRD"), "{case}: {env}");
        let seen = in_ledger(&env, "hidden2.sh");
        if KNOWN_OPEN.contains(&name) {
            assert!(!seen, "{case}: {name} is closed: {env}");
        } else {
            assert!(seen, "{case}: the added file is not in the ledger: {env}");
            assert!(warned(&env, "bare repository"), "{case}: {env}");
        }
    }
}

/// The agent adds a file of 64 MiB of empty lines: under the ledger's 1 GiB read budget
/// and git's 512 MiB big-file threshold, so `diff-tree --numstat` counts its lines, and
/// git's line diff holds some forty bytes a line: coder's own git, unconfined, took
/// about 2.8 GiB for it (and some 20 GiB for 500 MiB, which the budget allows). Now the
/// ledger's git may take 2 GiB of heap (`RLIMIT_DATA`): it stops there, and the file
/// stays listed, without line counts, with a warning. Control: the user's own git takes
/// more than 2 GiB to count the same file's lines.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_file_of_empty_lines_does_not_make_the_ledgers_git_take_gigabytes() {
    common::require_root_and_user_namespaces();
    let name = "ledger's git memory unbounded";
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let payload = "head -c 67108864 /dev/zero | tr '\\0' '\\n' > big.txt && echo PLANTED";
        // Unconfined: the "before" snapshot is taken before the agent starts (a confined
        // fake CLI's payload does not wait for it, and a snapshot that saw the file already
        // made it "modified", unmeasured). The ledger's git is coder's, confined or not.
        let tree = new_tree(owner, &[("a.txt", "a\n")], true);
        let unconfined = ["--sandbox", "danger-full-access"];
        let env = run(&tree, &unconfined, payload, Duration::from_secs(180));
        assert!(result(&env).contains("PLANTED"), "{case}: {env}");
        let big = env["changes"]["files"]
            .as_array()
            .and_then(|files| files.iter().find(|f| f["path"] == "big.txt"))
            .cloned()
            .unwrap_or_else(|| panic!("{case}: big.txt is not listed: {env}"));
        assert_eq!(big["status"], "added", "{case}: {env}");
        if KNOWN_OPEN.contains(&name) {
            assert_eq!(
                big["lines_added"],
                64 << 20,
                "{case}: {name} is closed: {env}"
            );
        } else {
            assert_eq!(big["lines_added"], 0, "{case}: {env}");
            assert!(
                warned(&env, "cannot compare the snapshots' trees"),
                "{case}: {env}"
            );
        }
        if owner.is_none() {
            let out = std::process::Command::new("/usr/bin/time")
                .args(["-f", "%M", "git", "diff", "--no-index", "--numstat"])
                .args(["/dev/null", "big.txt"])
                .current_dir(tree.ws())
                .output_bounded();
            let kib: u64 = String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .and_then(|l| l.trim().parse().ok())
                .unwrap_or_else(|| panic!("control: no peak size: {out:?}"));
            assert!(kib > 2 << 20, "control: the user's git took only {kib} KiB");
        }
    }
}

/// The project marks `*.py` with git's `ident` attribute (a `.gitattributes` of its own,
/// or one an earlier run's agent committed): `git add` records `$Id: ANYTHING $` (to
/// the next `$` on its line) as `$Id$`. The agent writes code into such a span; the
/// ledger's `git add` recorded the same blob, and the edit was not in `changes`. Now the
/// ledger's private git dir unsets `ident` for every path (`info/attributes`, above the
/// work tree's). Control: the user's own git records no change.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn code_written_into_an_ident_span_is_in_the_ledger() {
    common::require_root_and_user_namespaces();
    let name = "ident hides an edit";
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let tree = new_tree(
            owner,
            &[
                ("a.py", "x = \"$Id$\"\n"),
                (".gitattributes", "*.py ident\n"),
            ],
            true,
        );
        let payload =
            "printf 'x = \"$Id: \"; import os; os.system(\"id\"); \"$\"\\n' > a.py && echo EDITED";
        let env = run(&tree, &["--return-diff"], payload, Duration::from_secs(120));
        assert!(result(&env).contains("EDITED"), "{case}: {env}");
        assert!(
            std::fs::read_to_string(tree.ws().join("a.py"))
                .unwrap()
                .contains("os.system"),
            "{case}: control: the edit did not land"
        );
        let seen = changes(&env).contains(&("a.py".into(), "modified".into()));
        if KNOWN_OPEN.contains(&name) {
            assert!(!seen, "{case}: {name} is closed: {env}");
        } else {
            assert!(seen, "{case}: the edit is not in the ledger: {env}");
            // Unless the "before" saw the edit already (the fake CLI's payload does not
            // wait for it): then it is listed unmeasured, without lines or diff.
            let measured = env["changes"]["lines_added"].as_u64().unwrap_or(0) > 0;
            assert!(
                !measured
                    || env["diff"]["unified"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("os.system"),
                "{case}: the diff does not show the code: {env}"
            );
        }
        let mut add = std::process::Command::new("sh");
        add.args(["-c", "git add -A && git diff --cached --name-only"])
            .current_dir(tree.ws())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", tree.root.join("home"));
        sandbox_fixture::as_owner(&mut add, owner);
        let out = add.output_bounded();
        assert!(
            out.status.success() && out.stdout.is_empty(),
            "{case}: control: the user's git records a change: {out:?}"
        );
    }
}

/// The workspace is a repository nested in another, which ignores some of its files (`ws/*.txt`
/// in the outer one's `.gitignore`: a vendored or scratch checkout). An earlier run's agent writes
/// garbage into `.git/HEAD` (the agent may: commits work): git then takes `ws` for no
/// repository and finds the outer one, where everything in `ws` is ignored, and the next
/// run's ledger saw no change at all. Now discovery that passed over a `.git` of the
/// workspace warns, and the plain walk measures. Control: the user's own git, in the
/// workspace, shows nothing of the edit.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_broken_head_does_not_hand_the_ledger_to_a_repository_that_ignores_the_workspace() {
    common::require_root_and_user_namespaces();
    let name = "broken HEAD hands the ledger to the outer repository";
    let deadline = Duration::from_secs(120);
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let mut tree = new_tree(None, &[("a.txt", "a\n"), ("b.md", "b\n")], true);
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
                .args(args)
                .current_dir(&tree.root)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", tree.root.join("home"))
                .output_bounded();
            assert!(out.status.success(), "outer git {args:?}: {out:?}");
        };
        git(&["init", "-q"]);
        std::fs::write(
            tree.root.join(".gitignore"),
            "/ws/*.txt\n/state/\n/home/\n/xdg/\n/fake-claude\n",
        )
        .unwrap();
        git(&["add", ".gitignore"]);
        git(&["commit", "-qm", "outer"]);
        tree.owner = owner;
        tree.give_away();
        let env = run(
            &tree,
            &[],
            "printf 'garbage\\n' > .git/HEAD && echo PLANTED",
            deadline,
        );
        assert!(result(&env).contains("PLANTED"), "{case}: {env}");
        let env = run(&tree, &[], "echo x >> a.txt && echo AGAIN", deadline);
        assert!(result(&env).contains("AGAIN"), "{case}: {env}");
        let seen = changes(&env).contains(&("a.txt".into(), "modified".into()));
        if KNOWN_OPEN.contains(&name) {
            assert!(!seen, "{case}: {name} is closed: {env}");
        } else {
            assert!(seen, "{case}: the edit is not in the ledger: {env}");
            assert!(
                warned(&env, "not a repository git can use"),
                "{case}: {env}"
            );
        }
        let mut status = std::process::Command::new("git");
        status
            .args(["status", "--porcelain"])
            .current_dir(tree.ws())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", tree.root.join("home"));
        sandbox_fixture::as_owner(&mut status, owner);
        let out = status.output_bounded();
        assert!(
            out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("a.txt"),
            "{case}: control: the user's git shows the edit: {out:?}"
        );
    }
}
