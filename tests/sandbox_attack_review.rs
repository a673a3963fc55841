//! Independent review of the end-of-run git guard (`src/sandbox/gitguard.rs`,
//! `src/sandbox/gitconfig.rs`) and of `--worktree` (`src/workspace/worktree.rs`), written
//! as an attacker who has read them. The question for every rule: what else reaches the
//! same resource after the run, when the user runs git unconfined in their workspace?
//!
//! Every attack runs as root and as uid 65534, each with a control (`danger-full-access`,
//! or the same layout without the trick) showing that the payload does run or land
//! without the protection, so no check passes by construction. Only what the *user* sees
//! after coder exited counts: their own git, outside any sandbox, must not run the
//! agent's command; a run's writes must stay in its grant.
//!
//! Three attacks were open when this review started, all closed with it:
//! * a merge strategy left in an operation in progress (`rebase-merge/strategy`,
//!   `options.strategy` in `sequencer/opts`) that names a path: `git rebase --continue` /
//!   `git cherry-pick --continue` run `git merge-<strategy>`, and `git-merge-/x` is a file
//!   in the work tree;
//! * a `--worktree` run from a subdirectory whose path is a symlink in the base commit: the
//!   run's workspace, and its write grant, became the symlink's target;
//! * a long chain of `commondir`s: the guard followed it by recursion and coder died of a
//!   stack overflow before its report, and so did every later coder running its guard.
//!
//! `KNOWN_OPEN` is the ratchet of attacks still open (none today): an attack on it must
//! stay open (its test asserts the payload *does* run), one off it must be blocked, so the
//! list can only shrink.

mod common;

use std::process::Command;

use common::Bounded;
use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, arms};
use serde_json::Value;

/// Attacks of this file measured open today (names of the `attack` calls).
const KNOWN_OPEN: &[&str] = &[];

/// Every fixture here: the user's repository on `main`, its README the arm's user's (an
/// agent running as uid 65534 rewrites it), and `GIT_EDITOR=true` for the user's
/// `--continue`s.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-attack-review-",
    init: &["init", "-q", "-b", "main"],
    readme_owned: true,
    env: &[("GIT_EDITOR", "true")],
};

/// One attack, as in `tests/sandbox_gitguard.rs` ([`sandbox_fixture::attack`]): `script`
/// plants it (the payload is `touch "$M"`), then the user runs `user.1` in `user.0`
/// (relative to the workspace). Confined: the payload never runs and the guard reports what
/// it moved (unless the attack is on `KNOWN_OPEN`, where it must still run); unconfined: it
/// runs.
fn attack(name: &str, setup: fn(&Fx), script: &str, user: (&str, &[&str])) {
    sandbox_fixture::attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

fn none(_: &Fx) {}

const COMMIT: &str = "git -c user.name=a -c user.email=a@b commit -qm x --no-verify";

/// Writes `git-merge-/evil` in the work tree: what `git merge-/evil` runs.
const EVIL_STRATEGY: &str = "mkdir -p git-merge- && \
     printf '#!/bin/sh\\ntouch \"%s\"\\nexit 1\\n' \"$M\" > git-merge-/evil && \
     chmod +x git-merge-/evil";

/// An interactive rebase the agent leaves stopped (`break`) in the user's own repository,
/// with one `pick` left that git must merge (its parent is not `HEAD`) and a `strategy`
/// file naming a path: `git rebase --continue` runs `git merge-/evil`, which git executes
/// as `./git-merge-/evil` from the work tree. The guard only commented out `exec` lines.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_rebase_left_in_progress_with_a_path_as_merge_strategy() {
    attack(
        "rebase strategy",
        none,
        &format!(
            "echo a > f && git add f && {COMMIT} && echo b > g && git add g && {COMMIT} && \
             GIT_SEQUENCE_EDITOR=\"sed -i -e '1i break' -e '1d'\" git -c user.name=a \
             -c user.email=a@b rebase -i HEAD~2 >/dev/null 2>&1; \
             test -d .git/rebase-merge && {EVIL_STRATEGY} && \
             echo /evil > .git/rebase-merge/strategy && echo PLANTED"
        ),
        ("", &["rebase", "--continue"]),
    );
}

/// The same through the sequencer: a `cherry-pick` of three commits stopped on a conflict,
/// resolved, with `options.strategy = /evil` in `sequencer/opts` (git's own config syntax,
/// here spelled with a legacy `[Options]` header and a quoted value). `git cherry-pick
/// --continue` commits the resolution, then picks the rest with the agent's strategy.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_cherry_pick_left_in_progress_with_a_path_as_merge_strategy() {
    attack(
        "sequencer strategy",
        none,
        &format!(
            "git checkout -qb side && echo b > g && git add g && {COMMIT} && \
             echo c > h && git add h && {COMMIT} && echo d > README && {COMMIT} -a && \
             git checkout -q main && echo e > README && {COMMIT} -a && \
             git -c user.name=a -c user.email=a@b cherry-pick side side~2 side~1 \
             >/dev/null 2>&1; git checkout --theirs README && git add README && \
             test -f .git/sequencer/todo && {EVIL_STRATEGY} && \
             printf '[Options]\\n\\tStrategy = \"/evil\"\\n' > .git/sequencer/opts && \
             echo PLANTED"
        ),
        ("", &["cherry-pick", "--continue"]),
    );
}

/// The user's own rebase with a built-in strategy is not touched: `-s ours` stays, and the
/// rebase goes on as the user started it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_builtin_strategy_of_a_rebase_in_progress_is_left_alone() {
    for nobody in arms() {
        let fx = Fx::new(&REPO, nobody);
        let (rc, out) = fx.sandbox(
            "workspace-write",
            &format!(
                "echo a > f && git add f && {COMMIT} && \
                 GIT_SEQUENCE_EDITOR=\"sed -i '1i break'\" git -c user.name=a \
                 -c user.email=a@b rebase -s ours -i HEAD~1 >/dev/null 2>&1; \
                 cat .git/rebase-merge/strategy && echo DONE"
            ),
        );
        assert_eq!(rc, 0, "{out}");
        assert!(out.contains("ours") && out.contains("DONE"), "{out}");
        assert!(!out.contains("git guard"), "nobody={nobody}: {out}");
        assert_eq!(
            std::fs::read_to_string(fx.ws().join(".git/rebase-merge/strategy")).unwrap(),
            "ours\n"
        );
    }
}

/// An `x` spelled with tabs and blanks, in the to-do list of a rebase in a *linked
/// worktree* the user made before the run (its git dir is `.git/worktrees/wt`, guarded at
/// the start, not the top-level `.git`).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_exec_line_in_a_linked_worktrees_rebase() {
    fn setup(fx: &Fx) {
        fx.git(&fx.ws(), &["worktree", "add", "-q", "wt"]);
    }
    attack(
        "worktree rebase x",
        setup,
        &format!(
            "cd wt && echo a > f && git add f && {COMMIT} && \
             GIT_SEQUENCE_EDITOR=\"sed -i '1i break'\" git -c user.name=a -c user.email=a@b \
             rebase -i HEAD~1 >/dev/null 2>&1; d=$(git rev-parse --git-dir) && \
             printf '\\t x \\ttouch %s\\n' \"$M\" >> $d/rebase-merge/git-rebase-todo && \
             echo PLANTED"
        ),
        ("wt", &["rebase", "--continue"]),
    );
}

/// A repository hidden under a directory the walk cannot list: `chmod 111` keeps it
/// traversable (the user's git still reaches `hide/n` by its path) but unreadable (a
/// listing fails), so a walk that skipped what it cannot read would miss it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_repo_under_a_directory_that_cannot_be_listed() {
    attack(
        "unlistable dir",
        none,
        "mkdir hide && git init -q hide/n && \
         git -C hide/n config core.fsmonitor \"touch '$M'; false\" && echo a > hide/n/f && \
         chmod 111 hide && echo PLANTED",
        ("hide/n", &["status", "--short"]),
    );
}

/// The workspace root itself made a bare repository (`HEAD`, `objects/`, `refs/`, `config`
/// beside the project's files) in a workspace with no `.git`: git's discovery takes the
/// directory itself as the git dir once coder's `.git` placeholder is gone, so a plain
/// `git fetch` there runs the agent's `core.sshCommand`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_workspace_root_made_a_bare_repository() {
    fn setup(fx: &Fx) {
        std::fs::remove_dir_all(fx.ws().join(".git")).unwrap();
    }
    attack(
        "root bare repo",
        setup,
        "git init -q --bare . && git config core.sshCommand \"touch '$M'; false\" && \
         git config remote.origin.url ssh://example.invalid/x.git && echo PLANTED",
        ("", &["fetch", "-q", "origin"]),
    );
}

/// Config syntax git reads and a naive filter might not: a mixed-case section and key, a
/// quoted value with escaped quotes, split by a continuation line. (The agent's own git
/// reads it as `core.fsmonitor`, which the script checks.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn config_spelled_in_odd_syntax() {
    attack(
        "odd config syntax",
        none,
        r#"git init -q n && cat >> n/.git/config <<EOF && git -C n config --get core.fsmonitor && echo a > n/f && echo PLANTED
[CoRe]
    FsMonitor = "touch \"$M\"; \\
 false"
EOF
"#,
        ("n", &["status", "--short"]),
    );
}

/// A chain of 15 000 git dirs, each `commondir` naming the next (`c0 -> c1 -> …`), beside a
/// repository with `core.fsmonitor`. A guard that followed `commondir` by recursion went as
/// deep as the chain: coder died of a stack overflow before its report (no
/// `sandbox_error`, the repository left armed), and so did every later coder sharing its
/// state dir, which runs a killed run's guard first. Git reads one level of `commondir`;
/// so does the guard now.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_long_chain_of_commondirs() {
    attack(
        "commondir chain",
        none,
        "git init -q n && git -C n config core.fsmonitor \"touch '$M'; false\" && \
         echo a > n/f && /usr/bin/python3 -c \"
import os
for i in range(15000):
    os.mkdir('c%d' % i)
    open('c%d/HEAD' % i, 'w').write('ref: refs/heads/main\\n')
    open('c%d/commondir' % i, 'w').write('../c%d\\n' % (i + 1))
\" && echo PLANTED",
        ("n", &["status", "--short"]),
    );
}

// ------------------------------------------------------------------------- --worktree

/// `--worktree --worktree-base pr` from `repo/sub`, where `sub` is a real directory in the
/// user's checkout but a symlink to another project in the commit `pr` (an earlier agent
/// committed it, or it is a branch under review). The checkout has the symlink at the
/// prefix, so the run's workspace — and its write grant — would be the other project.
/// Control: the same run where `pr` has `sub` as a directory, and the payload's file lands
/// on the run's branch.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_worktree_prefix_that_is_a_symlink_in_the_base_commit() {
    common::require_root_and_user_namespaces();
    for owner in [None, Some(sandbox_fixture::NOBODY)] {
        for symlink in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(dir.path()).unwrap();
            std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let repo = root.join("repo");
            let victim = root.join("victim");
            for d in [repo.join("sub"), victim.clone(), root.join("home")] {
                std::fs::create_dir_all(d).unwrap();
            }
            std::fs::write(victim.join("file"), "original\n").unwrap();
            std::fs::write(repo.join("sub/keep"), "k\n").unwrap();
            let git = |args: &[&str]| {
                let o = Command::new("git")
                    .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
                    .args(args)
                    .current_dir(&repo)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("HOME", "/nonexistent")
                    .output_bounded();
                assert!(o.status.success(), "git {args:?}: {o:?}");
            };
            git(&["init", "-q", "-b", "main"]);
            git(&["add", "sub"]);
            git(&["commit", "-qm", "init"]);
            git(&["checkout", "-qb", "pr"]);
            if symlink {
                // From <state>/worktrees/<run-id>/sub: up to the temp root, then victim.
                git(&["rm", "-rq", "sub"]);
                std::os::unix::fs::symlink("../../../victim", repo.join("sub")).unwrap();
            } else {
                std::fs::write(repo.join("sub/more"), "m\n").unwrap();
            }
            git(&["add", "-A"]);
            git(&["commit", "-qm", "pr"]);
            git(&["checkout", "-q", "main"]);
            assert!(repo.join("sub").is_dir() && !repo.join("sub").is_symlink());
            let bin = root.join("fake-claude");
            std::fs::write(
                &bin,
                sandbox_fixture::payload_claude("pwd -P; echo planted > planted.txt && echo WROTE"),
            )
            .unwrap();
            std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            if owner.is_some() {
                sandbox_fixture::give_to_nobody(&root);
            }
            let mut cmd = sandbox_fixture::coder_as(
                &root,
                owner,
                &repo.join("sub"),
                &bin,
                &["--worktree", "--worktree-base", "pr"],
                "do it",
            );
            let out = cmd.output_bounded();
            let env: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"));
            let who = if owner.is_some() { "nobody" } else { "root" };
            if symlink {
                assert!(
                    !victim.join("planted.txt").exists(),
                    "{who}: the run wrote through the symlinked prefix: {env}"
                );
                assert_eq!(env["error_kind"], "config_error", "{who}: {env}");
                let error = env["error"].as_str().unwrap_or_default();
                assert!(error.contains("not a directory in the checkout"), "{env}");
            } else {
                assert_eq!(env["success"], true, "{who}: control: {env}");
                assert!(
                    env["result"].as_str().unwrap_or_default().contains("WROTE"),
                    "{env}"
                );
                let branch = env["worktree"]["branch"].as_str().unwrap().to_owned();
                let o = Command::new("git")
                    .args(["-c", "safe.directory=*", "show"])
                    .arg(format!("{branch}:sub/planted.txt"))
                    .current_dir(&repo)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .output_bounded();
                assert_eq!(String::from_utf8_lossy(&o.stdout), "planted\n", "{env}");
            }
            assert_eq!(
                std::fs::read_to_string(victim.join("file")).unwrap(),
                "original\n"
            );
            let left: Vec<_> = std::fs::read_dir(root.join("state/worktrees"))
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "{who}: checkout left: {left:?}");
        }
    }
}

#[test]
fn the_ratchet_names_only_attacks_of_this_file() {
    let text = include_str!("sandbox_attack_review.rs");
    for name in KNOWN_OPEN {
        assert!(
            text.contains(&format!("attack(\n        \"{name}\"")),
            "{name} is on KNOWN_OPEN but no attack has that name"
        );
    }
}
