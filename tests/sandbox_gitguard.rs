//! The end-of-run git guard (`src/sandbox/gitguard.rs`), attacked: a sandboxed command
//! makes a git repository (or git metadata) whose config or hooks run a command, and the
//! *user's* own git runs in it after coder has exited, outside any sandbox. The payload
//! must not run. Each attack has a control: the same command under
//! `--sandbox danger-full-access` (no guard), where the user's git does run the payload,
//! so no check passes by construction. Every attack runs as root and as uid 65534 (coder
//! and the user's git both as `nobody`).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::sandbox_fixture::{self, GitFx as Fx, Launch, RepoStyle, arms};
use common::{Fake, steps};
use serde_json::json;

/// Every fixture here: the user's repository on git's default branch, its README root's.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-gitguard-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// One attack ([`sandbox_fixture::attack`], none known open): `script` plants it (the
/// payload is `touch "$M"`; `$M` is set for the sandboxed command), `user` is what the user
/// runs afterwards (git args and the directory, relative to the workspace). Confined: the
/// payload never runs and the guard reports the move; unconfined (the control): the user's
/// git runs it.
fn attack(name: &str, setup: fn(&Fx), script: &str, user: (&str, &[&str])) {
    sandbox_fixture::attack(&REPO, &[], name, setup, script, user);
}

fn none(_: &Fx) {}

const COMMIT: &str = "git -c user.name=a -c user.email=a@b commit -qm x --no-verify";

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn gitlink_to_an_agent_repo_with_fsmonitor() {
    attack(
        "gitlink+fsmonitor",
        none,
        &format!(
            "git init -q n && cd n && git config core.fsmonitor \"touch '$M'; false\" && \
             echo a > f && git add f && {COMMIT} && cd .. && git add n 2>/dev/null; \
             echo PLANTED"
        ),
        ("", &["status", "--short"]),
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn nested_repo_without_gitlink_runs_fsmonitor_on_status() {
    attack(
        "nested fsmonitor",
        none,
        "git init -q sub/n && git -C sub/n config core.fsmonitor \"touch '$M'; false\" && \
         echo a > sub/n/f && echo PLANTED",
        ("sub/n", &["status", "--short"]),
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn filter_clean_selected_by_gitattributes() {
    attack(
        "filter clean",
        none,
        "git init -q n && git -C n config filter.x.clean \"touch '$M'; cat\" && \
         echo '* filter=x' > n/.gitattributes && echo a > n/f && echo PLANTED",
        ("n", &["add", "-A"]),
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn include_path_to_an_agent_file() {
    attack(
        "include.path",
        none,
        "printf '[core]\\n\\tfsmonitor = touch %s; false\\n' \"$M\" > inc.cfg && \
         git init -q n && git -C n config include.path ../../inc.cfg && echo PLANTED",
        ("n", &["status", "--short"]),
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn gitfile_to_an_agent_made_gitdir() {
    attack(
        "gitfile",
        none,
        "mkdir -p hidden w && git init -q --separate-git-dir=\"$PWD/hidden/gd\" w && \
         git -C w config core.fsmonitor \"touch '$M'; false\" && test -f w/.git && \
         echo PLANTED",
        ("w", &["status", "--short"]),
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn commondir_to_an_agent_made_common_dir() {
    attack(
        "commondir",
        none,
        "git init -q n && mkdir -p evil && cp -r n/.git/objects n/.git/refs evil/ && \
         printf '[core]\\n\\tfsmonitor = touch %s; false\\n' \"$M\" > evil/config && \
         echo ../../evil > n/.git/commondir && echo PLANTED",
        ("n", &["status", "--short"]),
    );
}

/// The user's repository enables per-worktree config (their choice, read-only to the
/// agent); the agent adds a worktree and sets `core.fsmonitor` in its `config.worktree`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn worktree_config_of_an_agent_made_worktree() {
    fn setup(fx: &Fx) {
        fx.git(&fx.ws(), &["config", "extensions.worktreeConfig", "true"]);
    }
    attack(
        "worktree config",
        setup,
        "git worktree add -q wt 2>&1 && \
         git -C wt config --worktree core.fsmonitor \"touch '$M'; false\" && echo PLANTED",
        ("wt", &["status", "--short"]),
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn hooks_of_an_agent_repo_on_commit() {
    attack(
        "hooks",
        none,
        "git init -q n && printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" > n/.git/hooks/pre-commit && \
         chmod +x n/.git/hooks/pre-commit && echo a > n/f && git -C n add f && echo PLANTED",
        ("n", &["commit", "-qm", "x"]),
    );
}

/// A new submodule git dir inside the user's own (guarded) `.git`: `.git/modules/x`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn new_submodule_gitdir_inside_the_guarded_git_dir() {
    attack(
        "modules",
        none,
        "mkdir -p .git/modules && git init -q --separate-git-dir=\"$PWD/.git/modules/x\" x && \
         git -C x config core.fsmonitor \"touch '$M'; false\" && echo PLANTED",
        ("x", &["status", "--short"]),
    );
}

/// `.git` pointing outside the tree (here at the user's home, where the agent cannot
/// write, but the guard cannot know that): the entry is renamed, never followed.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn gitfile_pointing_outside_is_renamed_not_followed() {
    for nobody in arms() {
        let fx = Fx::new(&REPO, nobody);
        let outside = fx.root().join("home/repo");
        fx.git(&fx.root().join("home"), &["init", "-q", "repo"]);
        let before = std::fs::read(outside.join(".git/config")).unwrap();
        let script = format!(
            "mkdir w && printf 'gitdir: {}\\n' > w/.git && echo PLANTED",
            outside.join(".git").display()
        );
        let (rc, out) = fx.sandbox("workspace-write", &script);
        assert_eq!(rc, 0, "{out}");
        assert!(out.contains("PLANTED"), "{out}");
        assert!(!fx.ws().join("w/.git").exists(), "not renamed: {out}");
        assert!(fx.ws().join("w/.git.coder-quarantine-1").is_file(), "{out}");
        assert_eq!(std::fs::read(outside.join(".git/config")).unwrap(), before);
        assert!(
            !outside.join(".git/coder-quarantine-1").exists(),
            "the guard wrote outside the tree"
        );
    }
}

/// A plain `git init` (and a clone-like remote) keeps its config untouched: only
/// command-running keys make the guard act.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_inert_agent_repo_is_left_alone() {
    for nobody in arms() {
        let fx = Fx::new(&REPO, nobody);
        let (rc, out) = fx.sandbox(
            "workspace-write",
            "git init -q n && git -C n remote add origin https://example.invalid/x.git && \
             echo a > n/f && git -C n add f && git -C n -c user.name=a -c user.email=a@b \
             commit -qm x && echo DONE",
        );
        assert_eq!(rc, 0, "{out}");
        assert!(out.contains("DONE"), "{out}");
        assert!(!out.contains("git guard"), "{out}");
        assert!(!fx.ws().join("n/.git/coder-quarantine-1").exists());
        let log = fx.git(&fx.ws().join("n"), &["log", "--oneline"]);
        assert!(log.contains(" x"), "{log}");
    }
}

/// A tree deeper than the guard walks fails closed: `coder sandbox` exits 71 and says so.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_walk_over_its_cap_fails_closed() {
    common::require_root_and_user_namespaces();
    let fx = Fx::new(&REPO, false);
    let (rc, out) = fx.sandbox(
        "workspace-write",
        "d=.; i=0; while [ $i -lt 300 ]; do d=$d/d; i=$((i+1)); done; mkdir -p $d && echo DEEP",
    );
    assert!(out.contains("DEEP"), "{out}");
    assert_eq!(rc, 71, "{out}");
    assert!(out.contains("git guard incomplete"), "{out}");
}

/// The run mode: the `--verify` command runs under the run's sandbox after the agent, so
/// a repository it makes is guarded too; the envelope reports the move.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_repo_made_by_the_verify_command() {
    common::require_root_and_user_namespaces();
    for mode in ["workspace-write", "danger-full-access"] {
        let fake = Fake::new(json!([steps::init(), steps::result_ok("ok")]));
        let marker = fake.root().join("PWNED");
        let check = format!(
            "git init -q n && git -C n config core.fsmonitor \"touch '{}'; false\" && \
             echo a > n/f",
            marker.display()
        );
        let out = fake
            .coder()
            .deadline(Duration::from_secs(120))
            .args([
                "--sandbox",
                mode,
                "--verify",
                &check,
                "--no-verify-baseline",
                "--repair-turns",
                "0",
                "do it",
            ])
            .run();
        let _ = std::fs::remove_file(&marker);
        let _ = Command::new("timeout")
            .args(["30", "git", "status", "--short"])
            .current_dir(fake.workspace().join("n"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        if mode == "danger-full-access" {
            assert!(marker.exists(), "control: {}", out.explain());
            assert!(out.envelope.get("sandbox").is_none(), "{}", out.explain());
        } else {
            out.assert_success("ok");
            assert!(!marker.exists(), "payload ran: {}", out.explain());
            let q = &out.envelope["sandbox"]["quarantined"];
            assert!(
                q.as_array().is_some_and(|a| a.iter().any(|e| e["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("n/.git"))
                    && e["moved"] == json!(["config"]))),
                "{}",
                out.explain()
            );
        }
    }
}

/// `commondir` read as git reads it: git cuts trailing CR/LF/space/tab only, so
/// `evil<FF>` (form feed kept) is the common dir git uses, while a decoy `evil` sits
/// beside it. A guard that trimmed like Rust's `trim_ascii_end` would clean the decoy.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn commondir_is_read_exactly_like_git() {
    attack(
        "commondir parse",
        none,
        "git init -q n && e=\"$(printf 'evil\\f')\" && mkdir -p \"$e\" evil && \
         cp -r n/.git/objects n/.git/refs \"$e\"/ && cp -r n/.git/objects n/.git/refs evil/ && \
         printf '[core]\\n\\tfsmonitor = touch %s; false\\n' \"$M\" > \"$e/config\" && \
         printf '../../evil\\f\\n' > n/.git/commondir && echo PLANTED",
        ("n", &["status", "--short"]),
    );
}

/// A bare repository the user already had in the workspace (not named `.git`) is guarded
/// for the whole run like any git dir: its config and hooks cannot be changed, and the
/// end-of-run guard leaves the user's own hooks where they are. Control: unconfined, the
/// config changes.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_pre_existing_bare_repo_is_guarded_and_left_alone() {
    for nobody in arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            fx.git(&fx.ws(), &["init", "-q", "--bare", "srv.git"]);
            let hook = fx.ws().join("srv.git/hooks/post-update");
            std::fs::write(&hook, "#!/bin/sh\nexit 0\n").unwrap();
            let before = std::fs::read(fx.ws().join("srv.git/config")).unwrap();
            let (rc, out) = fx.sandbox(
                mode,
                "git -C srv.git config core.hooksPath /x; echo x > srv.git/hooks/pre-receive; \
                 echo PLANTED",
            );
            assert_eq!(rc, 0, "{out}");
            let after = std::fs::read(fx.ws().join("srv.git/config")).unwrap();
            if mode == "danger-full-access" {
                assert_ne!(after, before, "control: {out}");
            } else {
                assert_eq!(after, before, "nobody={nobody}: config changed: {out}");
                assert!(!fx.ws().join("srv.git/hooks/pre-receive").exists(), "{out}");
                assert!(hook.exists(), "the user's hook was moved: {out}");
                assert!(!out.contains("git guard"), "{out}");
            }
        }
    }
}

/// coder killed with SIGKILL runs no guard of its own; the next coder that sets up a
/// sandbox (same state dir, any workspace) runs the dead run's guard from the record left in
/// its run directory. Shown with the hole first: between the two, the user's git does run
/// the payload.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_guard_of_a_killed_run_is_done_by_the_next_one() {
    for nobody in arms() {
        let fx = Fx::new(&REPO, nobody);
        fx.kill_a_run_that_armed_a_repo();
        let (rc, out) = fx.sandbox("workspace-write", "echo PLANTED");
        assert_eq!(rc, 0, "{out}");
        assert!(
            out.contains("after an earlier run whose coder was killed"),
            "nobody={nobody}: {out}"
        );
        let _ = fx.git(&fx.ws().join("n"), &["status", "--short"]);
        assert!(!fx.marker().exists(), "nobody={nobody}: payload ran: {out}");
    }
}

/// A killed run's guard record is done by the next coder that sets up a sandbox, in any
/// workspace; a tree not at its path then was skipped and the record dropped. The agent
/// of another run with a grant over the workspace's parent (the test stands for it,
/// renaming the tree) renamed it away while a run elsewhere started, and back: the next
/// run in the tree took the killed run's repository for the user's, and the user's
/// `git status` there ran its `core.fsmonitor`. Now such a record is kept as a stopped
/// guard's is, and checked when the tree is back. As root and as uid 65534; control: the
/// payload is armed after the kill.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_killed_runs_guard_outlives_its_tree_renamed_away() {
    for nobody in arms() {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        fx.kill_a_run_that_armed_a_repo();
        let elsewhere = fx.run_elsewhere_while_away();
        let (_, second) = fx.sandbox("workspace-write", "echo SECOND");
        let _ = fx.git(&ws.join("n"), &["status", "--short"]);
        assert!(
            !fx.marker().exists(),
            "nobody={nobody}: the user's git ran the payload\n{elsewhere}\n{second}"
        );
    }
}

/// The agent's plant for the stopped-guard tests: a nested repository whose
/// `core.fsmonitor` runs the payload at the user's `git status` there, and a Claude Code
/// project settings file with a hook in a subdirectory (a protected tool config the start
/// scan of the next run would hold as the user's).
const PLANT_BEYOND_THE_CAP: &str = "git init -q n && git -C n config core.fsmonitor \"touch '$M'; false\" && \
     mkdir -p pkg/.claude && \
     printf '{\"hooks\":{\"SessionStart\":[{\"hooks\":[{\"type\":\"command\",\"command\":\"touch %s\"}]}]}}' \"$M\" \
     > pkg/.claude/settings.json && echo PLANTED";

/// A guard that stops at its entry cap (lowered through a debug build's test hook) fails
/// its run closed and leaves what it did not reach: until round nineteen the next run's
/// scan took the agent's nested repository for the user's (the guard then left it alone)
/// and held its `pkg/.claude/settings.json` as the user's, and the user's `git status`
/// ran the agent's `core.fsmonitor`. The stopped guard's record stays in the state
/// directory now, and the next run checks those trees again before its scan, and says so.
/// The control: between the two runs the user's git does run the payload (the hole the
/// stopped guard leaves). As root and as uid 65534.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_guard_stopped_at_its_cap_is_finished_before_the_next_run_trusts_the_tree() {
    for nobody in arms() {
        let fx = Fx::new(&REPO, nobody);
        let out = fx.stop_a_guard_armed(PLANT_BEYOND_THE_CAP);
        assert!(
            out.contains("git guard incomplete") && out.contains("the next run checks"),
            "nobody={nobody}: {out}"
        );
        let (rc, out) = fx.sandbox("workspace-write", "echo SECOND");
        assert_eq!(rc, 0, "nobody={nobody}: {out}");
        let _ = fx.git(&fx.ws().join("n"), &["status", "--short"]);
        assert!(!fx.marker().exists(), "nobody={nobody}: payload ran: {out}");
        assert!(
            !fx.ws().join("pkg/.claude/settings.json").exists(),
            "nobody={nobody}: the agent's hook is still where Claude Code reads it: {out}"
        );
        assert!(
            out.contains("after an earlier run whose end-of-run guard stopped short")
                && out.contains("git guard: in")
                && out.contains("tool-config guard"),
            "nobody={nobody}: the second run does not say what it did: {out}"
        );
        // Done once: a third run has nothing to say.
        let (rc, out) = fx.sandbox("workspace-write", "echo THIRD");
        assert_eq!(rc, 0, "nobody={nobody}: {out}");
        assert!(!out.contains("stopped short"), "nobody={nobody}: {out}");
    }
}

/// The run mode fails closed too: a tree the guard cannot finish (here made by the
/// `--verify` command, deeper than the walk goes) turns a success into `sandbox_error` with
/// `sandbox.incomplete` naming the place; the agent's result stays in the envelope.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_incomplete_guard_fails_the_run_closed() {
    common::require_root_and_user_namespaces();
    let fake = Fake::new(json!([steps::init(), steps::result_ok("ok")]));
    let check = "d=.; i=0; while [ $i -lt 300 ]; do d=$d/d; i=$((i+1)); done; mkdir -p $d";
    let out = fake
        .coder()
        .deadline(Duration::from_secs(120))
        .args([
            "--verify",
            check,
            "--no-verify-baseline",
            "--repair-turns",
            "0",
            "do it",
        ])
        .run();
    out.assert_failure("sandbox_error", 71);
    let why = out.envelope["sandbox"]["incomplete"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("deeper than 256 levels"), "{}", out.explain());
    assert_eq!(out.envelope["result"], "ok", "{}", out.explain());
}

/// The run mode: a guard that stops short (a tree deeper than it walks, made by the
/// `--verify` command) keeps its record, and the next run checks those trees again before
/// its scan; while that stops short too, the run is refused (`sandbox_error`, the agent
/// never started) with an envelope naming why and the record to remove. Once the user
/// removes the tree, the next run goes ahead and its warnings say what was checked.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_guard_that_stops_again_refuses_the_next_run_until_the_tree_is_fixed() {
    common::require_root_and_user_namespaces();
    let fake = Fake::new(json!([steps::init(), steps::result_ok("ok")]));
    let check = "d=deep; i=0; while [ $i -lt 300 ]; do d=$d/d; i=$((i+1)); done; mkdir -p $d";
    let run = |args: &[&str]| {
        fake.coder()
            .deadline(Duration::from_secs(120))
            .args(args)
            .run()
    };
    let first = run(&[
        "--verify",
        check,
        "--no-verify-baseline",
        "--repair-turns",
        "0",
        "do it",
    ]);
    first.assert_failure("sandbox_error", 71);
    let why = first.envelope["sandbox"]["incomplete"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("deeper than 256 levels") && why.contains("the next run checks"),
        "{}",
        first.explain()
    );
    let second = run(&["do it"]);
    second.assert_failure("sandbox_error", 71);
    let said = second.envelope.to_string();
    assert!(
        said.contains("stopped before it had checked")
            && said.contains("deeper than 256 levels")
            && said.contains("guards-stopped"),
        "{}",
        second.explain()
    );
    assert!(second.envelope["result"].is_null(), "{}", second.explain());
    std::fs::remove_dir_all(fake.workspace().join("deep")).unwrap();
    let third = run(&["do it"]);
    assert_eq!(
        third.envelope["success"],
        json!(true),
        "{}",
        third.explain()
    );
    let warned = third.envelope["warnings"].to_string();
    assert!(
        warned.contains("after an earlier run whose end-of-run guard stopped short"),
        "{}",
        third.explain()
    );
}

/// An interactive rebase the agent leaves in progress in the user's own repository, with an
/// `exec` line in its to-do list: `git status` tells the user to `git rebase --continue`,
/// which runs the remaining to-do outside the sandbox.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_rebase_left_in_progress_with_an_exec_line() {
    attack(
        "rebase exec",
        none,
        &format!(
            "echo a > f && git add f && {COMMIT} && \
             GIT_SEQUENCE_EDITOR=\"sed -i '1i break'\" git -c user.name=a -c user.email=a@b \
             rebase -i HEAD~1 >/dev/null 2>&1; \
             printf 'exec touch %s\\n' \"$M\" >> .git/rebase-merge/git-rebase-todo && echo PLANTED"
        ),
        ("", &["rebase", "--continue"]),
    );
}

/// The guard skips listing a directory whose change time is what the start scan saw. So
/// every attack here lands in directories that existed, old, before the run: a new repo
/// deep in an old tree, a `.git` file and a bare-repo shape in old directories, a repo
/// moved in over an old empty one, and one made inside an old user's nested repo's work
/// tree. Each must still be found; each is then checked the way the user would meet it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn attacks_in_directories_older_than_the_run_are_found() {
    for nobody in arms() {
        let fx = Fx::new(&REPO, nobody);
        for d in ["a/b/c", "w", "bare", "moved/x", "spare"] {
            std::fs::create_dir_all(fx.ws().join(d)).unwrap();
        }
        fx.own(&fx.ws());
        common::age_past_the_racy_margin(&fx.ws());
        let fsmonitor = "core.fsmonitor \"touch '$M'; false\"";
        let (rc, out) = fx.sandbox(
            "workspace-write",
            &format!(
                "set -e; git init -q a/b/c/n && git -C a/b/c/n config {fsmonitor}; \
                 git init -q --separate-git-dir=\"$PWD/spare/gd\" w && \
                 git -C w config {fsmonitor}; \
                 git init -q --bare bare/r.git && mv bare/r.git/* bare/ && \
                 git --git-dir=bare config {fsmonitor}; \
                 git init -q t && git -C t config {fsmonitor} && rm -r moved/x && \
                 mv t moved/x; echo PLANTED"
            ),
        );
        assert_eq!(rc, 0, "nobody={nobody}: {out}");
        assert!(out.contains("PLANTED"), "{out}");
        for (dir, args) in [
            ("a/b/c/n", &["status", "--short"][..]),
            ("w", &["status", "--short"][..]),
            ("moved/x", &["status", "--short"][..]),
            (
                "",
                &["--git-dir=bare", "--work-tree=.", "status", "--short"][..],
            ),
        ] {
            let _ = std::fs::remove_file(fx.marker());
            let git_out = fx.git(&fx.ws().join(dir), args);
            assert!(
                !fx.marker().exists(),
                "nobody={nobody}: the user's git in {dir:?} ran the payload: {out}\n{git_out}"
            );
        }
        for quarantined in ["a/b/c/n/.git", "spare/gd", "bare", "moved/x/.git"] {
            assert!(
                out.contains(&format!("{}", fx.ws().join(quarantined).display())),
                "nobody={nobody}: no quarantine of {quarantined}: {out}"
            );
        }
    }
}

/// The user's repository config includes files of the work tree (`include.path =
/// ../shared.gitconfig`, a project's way to share settings; here one at the root and one
/// in `conf/git/`, both committed and the arm's user's to write). The agent writes an
/// fsmonitor into one, replaces the other, and renames the directory above it to put a
/// file of its own at the included path: the included files are held read-only and the
/// directories above them pinned, so the user's next `git status` runs nothing. Control:
/// unconfined, it runs the payload.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn files_the_users_config_includes_are_out_of_the_agents_reach() {
    included_files_attack("");
}

/// The same with the workspace a subdirectory of the repository (`sub/`), whose git dir
/// is out of the agent's reach but whose config includes files of the workspace.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn files_the_enclosing_repositorys_config_includes_are_out_of_the_agents_reach() {
    included_files_attack("sub");
}

/// [`files_the_users_config_includes_are_out_of_the_agents_reach`] with the workspace at
/// `sub` of the repository (`""`: its root), the included files in it.
fn included_files_attack(sub: &str) {
    let payload = "printf '[core]\\n\\tfsmonitor = touch %s; false\\n' \"$M\"";
    let script = format!(
        "{payload} >> shared.gitconfig; \
         rm -f conf/git/shared.gitconfig; {payload} > conf/git/shared.gitconfig; \
         mv conf conf.old; mkdir -p conf/git; {payload} > conf/git/shared.gitconfig; \
         echo PLANTED"
    );
    let under = |name: &str| Path::new(sub).join(name);
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let repo = fx.ws();
            let ws = repo.join(sub);
            std::fs::create_dir_all(ws.join("conf/git")).unwrap();
            std::fs::write(ws.join("shared.gitconfig"), "[user]\n\tname = shared\n").unwrap();
            std::fs::write(ws.join("conf/git/shared.gitconfig"), "").unwrap();
            for entry in [
                "",
                "shared.gitconfig",
                "conf",
                "conf/git",
                "conf/git/shared.gitconfig",
            ] {
                fx.own_entry(&ws.join(entry));
            }
            fx.git(&repo, &["add", "-A"]);
            fx.git(&repo, &["commit", "-qm", "shared config"]);
            for file in ["shared.gitconfig", "conf/git/shared.gitconfig"] {
                let include = Path::new("..").join(under(file));
                let include = include.to_str().unwrap();
                fx.git(&repo, &["config", "--add", "include.path", include]);
            }
            let (rc, out) = sandbox_fixture::run_text(
                fx.sandbox_in(&ws, &["--mode", mode], &script)
                    .env("M", fx.marker()),
            );
            assert_eq!(rc, 0, "nobody={nobody} {mode}: {out}");
            assert!(out.contains("PLANTED"), "the attack did not run: {out}");
            let _ = std::fs::remove_file(fx.marker());
            let git_out = fx.git(&repo, &["status", "--short"]);
            let ran = fx.marker().exists();
            if mode == "danger-full-access" {
                assert!(
                    ran,
                    "nobody={nobody} sub={sub:?}: control: {out}\n{git_out}"
                );
            } else {
                assert!(
                    !ran,
                    "nobody={nobody} sub={sub:?}: the user's git ran the agent's payload: \
                     {out}\n{git_out}"
                );
            }
        }
    }
}

/// The fsmonitor payload a script appends to (`>>`) or writes as a git config.
const FSMONITOR_PAYLOAD: &str = "printf '[core]\\n\\tfsmonitor = touch %s; false\\n' \"$M\"";

/// A file the sandbox holds read-only, reached another way: `setup` prepares the
/// repository at `ws` (as root; it gives what it makes to the arm's user) and returns
/// extra `coder sandbox` arguments, `script` plants the payload and prints `PLANTED`,
/// then the user runs `git USER` in the workspace. Confined: the payload never runs;
/// unconfined (the control): it does.
fn held_file_attack(name: &str, setup: fn(&Fx, &Path) -> Vec<String>, script: &str, user: &[&str]) {
    let launch = |fx: &Fx, ws: &Path| Launch {
        args: setup(fx, ws),
        ..Launch::default()
    };
    sandbox_fixture::held_attack(
        name,
        false,
        &|nobody| Fx::new(&REPO, nobody),
        &launch,
        script,
        user,
    );
}

/// The included config has a second name in the work tree (a hard link the user made,
/// or a checkout tool did): the agent appends an fsmonitor through that name.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_included_file_is_not_written_through_its_other_name() {
    held_file_attack(
        "include+hard link",
        |fx, ws| {
            fx.own_file(ws, "shared.gitconfig", "[user]\n\tname = shared\n");
            fx.own_file(ws, "notes/keep", "");
            std::fs::hard_link(ws.join("shared.gitconfig"), ws.join("notes/copy.txt")).unwrap();
            fx.git(
                ws,
                &["config", "--add", "include.path", "../shared.gitconfig"],
            );
            Vec::new()
        },
        &format!("{FSMONITOR_PAYLOAD} >> notes/copy.txt; echo PLANTED"),
        &["status", "--short"],
    );
}

/// A hook with a second name in the work tree (`ln tools/pre-commit .git/hooks/`): the
/// agent appends a command to `tools/pre-commit`, and the user's next commit ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hook_is_not_written_through_its_other_name() {
    held_file_attack(
        "hook+hard link",
        |fx, ws| {
            let tool = own_script(fx, ws, "tools/pre-commit");
            std::fs::hard_link(&tool, ws.join(".git/hooks/pre-commit")).unwrap();
            Vec::new()
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/pre-commit; echo PLANTED"),
        &["commit", "-q", "--allow-empty", "-m", "user's commit"],
    );
}
/// The config includes files that do not exist yet, one beside the workspace's root and
/// one below directories that do not exist either: the agent makes them, and the user's
/// next `git status` read its fsmonitor. (The sandbox holds each absent at its first
/// missing name.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_included_file_absent_at_the_start_is_not_the_agents_to_make() {
    held_file_attack(
        "absent include",
        |fx, ws| {
            for include in ["../absent.gitconfig", "../new/dir/x.gitconfig"] {
                fx.git(ws, &["config", "--add", "include.path", include]);
            }
            Vec::new()
        },
        &format!(
            "{FSMONITOR_PAYLOAD} > absent.gitconfig; \
             mkdir -p new/dir && {FSMONITOR_PAYLOAD} > new/dir/x.gitconfig; echo PLANTED"
        ),
        &["status", "--short"],
    );
}

/// The config includes a file of another directory the agent may write (`--write`).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_included_file_in_a_write_dir_is_held() {
    held_file_attack(
        "include in --write dir",
        |fx, ws| {
            let extra = fx.root().join("extra");
            std::fs::create_dir_all(&extra).unwrap();
            fx.own_entry(&extra);
            let shared = extra.join("shared.gitconfig");
            std::fs::write(&shared, "[user]\n\tname = shared\n").unwrap();
            fx.own_entry(&shared);
            let absent = extra.join("later/x.gitconfig");
            for include in [&shared, &absent] {
                fx.git(
                    ws,
                    &["config", "--add", "include.path", include.to_str().unwrap()],
                );
            }
            vec!["--write".into(), extra.display().to_string()]
        },
        &format!(
            "cd ../extra && {FSMONITOR_PAYLOAD} >> shared.gitconfig; \
             mkdir -p later && {FSMONITOR_PAYLOAD} > later/x.gitconfig; echo PLANTED"
        ),
        &["status", "--short"],
    );
}

/// An empty shell script at `rel` in `ws`, executable, the arm's user's.
fn own_script(fx: &Fx, ws: &Path, rel: &str) -> std::path::PathBuf {
    let script = fx.own_file(ws, rel, "#!/bin/sh\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// The payload a script of the work tree gets: `touch "$M"` appended, as the arm's shell
/// writes it.
const SCRIPT_PAYLOAD: &str = "printf 'touch \"%s\"\\n' \"$M\"";

/// An `!` alias of the repository's config runs two scripts of the work tree, one named
/// bare (`sh lint.sh`, read at the top of the work tree) and one by a path: the agent
/// appends its payload to both, and the user's next `git fmt` ran them.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_alias_runs_are_not_the_agents_to_write() {
    held_file_attack(
        "alias scripts",
        |fx, ws| {
            fx.own_file(ws, "lint.sh", "true\n");
            fx.own_file(ws, "tools/fmt.sh", "true\n");
            fx.git(
                ws,
                &["config", "alias.fmt", "!sh lint.sh && sh tools/fmt.sh"],
            );
            Vec::new()
        },
        &format!("{SCRIPT_PAYLOAD} >> lint.sh; {SCRIPT_PAYLOAD} >> tools/fmt.sh; echo PLANTED"),
        &["fmt"],
    );
}

/// An alias changes directory before it runs a script (`cd tools && ./fmt.sh`), as
/// scripts that expect their own directory are run: the script git runs is
/// `tools/fmt.sh`, and the scan read `./fmt.sh` at the top, held nothing, and the user's
/// next `git fmt` ran the agent's payload. So does a bare name after `cd` (`sh lint.sh`
/// in `ci/`).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_an_alias_runs_after_cd_is_not_the_agents_to_write() {
    held_file_attack(
        "alias script after cd",
        |fx, ws| {
            own_script(fx, ws, "tools/fmt.sh");
            fx.own_file(ws, "ci/lint.sh", "true\n");
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    "!cd tools && ./fmt.sh && cd ../ci && sh lint.sh",
                ],
            );
            Vec::new()
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/fmt.sh; {SCRIPT_PAYLOAD} >> ci/lint.sh; echo PLANTED"),
        &["fmt"],
    );
}

/// The same through `env -C DIR` (coreutils' `--chdir`), which enters a directory as
/// `cd` does: found by attacking the `cd` rule above, which held nothing of
/// `!env -C tools ./fmt.sh` (the agent wrote `tools/fmt.sh`).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_an_alias_runs_through_env_chdir_is_not_the_agents_to_write() {
    held_file_attack(
        "alias script through env -C",
        |fx, ws| {
            own_script(fx, ws, "tools/fmt.sh");
            fx.git(ws, &["config", "alias.fmt", "!env -C tools ./fmt.sh"]);
            Vec::new()
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/fmt.sh; echo PLANTED"),
        &["fmt"],
    );
}

/// A filter driver names a script that does not exist yet (nor does its directory): the
/// agent makes it, and the user's next `git add` ran it. (The sandbox holds it absent.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_a_filter_names_absent_at_the_start_is_not_the_agents_to_make() {
    held_file_attack(
        "absent filter script",
        |fx, ws| {
            fx.own_file(ws, ".gitattributes", "*.txt filter=strip\n");
            fx.own_file(ws, "a.txt", "a\n");
            fx.git(ws, &["config", "filter.strip.clean", "sh scripts/strip.sh"]);
            Vec::new()
        },
        &format!(
            "mkdir -p scripts; {{ {SCRIPT_PAYLOAD}; echo cat; }} > scripts/strip.sh; \
             echo b >> a.txt; echo PLANTED"
        ),
        &["add", "-A"],
    );
}

/// A repository nested in the workspace has a relative `core.fsmonitor`, which git runs
/// at the top of *that* work tree: the agent appends its payload to `sub/fsmon.sh`, and
/// the user's next `git status` in `sub` ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_nested_repositorys_fsmonitor_script_is_not_the_agents_to_write() {
    held_file_attack(
        "nested fsmonitor script",
        |fx, ws| {
            own_script(fx, ws, "sub/fsmon.sh");
            fx.git(&ws.join("sub"), &["init", "-q"]);
            fx.git(&ws.join("sub"), &["add", "."]);
            fx.git(
                &ws.join("sub"),
                &[
                    "-c",
                    "user.name=a",
                    "-c",
                    "user.email=a@b",
                    "commit",
                    "-qm",
                    "x",
                ],
            );
            fx.git(&ws.join("sub"), &["config", "core.fsmonitor", "./fsmon.sh"]);
            Vec::new()
        },
        &format!("{SCRIPT_PAYLOAD} >> sub/fsmon.sh; echo PLANTED"),
        &["-C", "sub", "status", "--short"],
    );
}
