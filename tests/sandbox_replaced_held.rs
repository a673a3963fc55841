//! A held file the user replaces outside the sandbox while a run goes on. A read-only
//! mount sits on its place (the dentry); a rename over it in the host's mount namespace
//! deletes that place, and the kernel detaches every mount on it in the other namespaces:
//! the sandbox then shows the new file, writable where the tree is. `git config`, `git
//! remote add` and `git push -u` write `.git/config` so (a lock file renamed over it), so
//! a user working in the repository while an unattended run goes on freed the config for
//! the agent, which set `core.fsmonitor` and the user's next `git status` ran it (found by
//! the lead in round thirty-two, from a CI failure that the host's `useradd` caused).
//! Through the built binary, root and uid 65534, with an unconfined control.

mod common;

use std::io::BufRead;
use std::process::Stdio;
use std::time::Duration;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, printed};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-replaced-held-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// The agent: says `READY`, waits (20 s at most) for the user's `go`, then appends a
/// `core.fsmonitor` that touches the marker to `.git/config` and says whether it could.
const AGENT: &str = "echo READY; i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; \
                     i=$((i+1)); done; printf '[core]\\n\\tfsmonitor = \"touch %s; false\"\\n' \
                     \"$M\" >> .git/config && echo WROTE; true";

/// Runs `agent` (which says `READY`, waits for `go`, then says `WROTE` once it wrote)
/// through `coder sandbox --mode MODE`; once it is ready, the user (outside) does `user`
/// and gives the go-ahead. The agent's and coder's output.
fn with_the_user_between(fx: &Fx, mode: &str, agent: &str, user: &dyn Fn(&Fx)) -> String {
    let ws = fx.ws();
    let mut child = fx
        .sandbox_in(&ws, &["--mode", mode], agent)
        .env("M", fx.marker())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(ready, "READY", "{mode}");
    user(fx);
    fx.own_file(&ws, "go", "");
    let out = child.wait_with_output().unwrap();
    let said: Vec<String> = rx.try_iter().collect();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{mode}: {stderr}");
    assert!(
        said.iter().any(|l| l == "WROTE"),
        "{mode}: the agent could not write the replaced file (the attack did not run): \
         {said:?} {stderr}"
    );
    format!("{}\n{stderr}", said.join("\n"))
}

/// After [`with_the_user_between`]: the user's `git USER…` runs the payload unconfined
/// (the control), and confined it does not and the guard said so.
fn user_git_runs_it_only_unconfined(fx: &Fx, mode: &str, out: &str, user: &[&str]) {
    let _ = std::fs::remove_file(fx.marker());
    let git_out = fx.git(&fx.ws(), user);
    let ran = fx.marker().exists();
    if mode == "danger-full-access" {
        assert!(
            ran,
            "control: the user's git must run the payload: {out}\n{git_out}"
        );
    } else {
        assert!(
            !ran,
            "the user's git ran the agent's payload: {out}\n{git_out}"
        );
        assert!(out.contains("guard:"), "no quarantine reported: {out}");
    }
}

/// The user's `git config user.name` during the run rewrites `.git/config` by a rename;
/// the agent then writes the new one. Confined, the end-of-run guard filters it (the
/// user's name stays, the agent's `core.fsmonitor` goes to the quarantine) and the user's
/// next `git status` runs nothing; unconfined, it runs the agent's command.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_config_the_user_rewrites_during_a_run_is_not_the_agents_to_write() {
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let out = with_the_user_between(&fx, mode, AGENT, &|fx| {
                fx.git(&fx.ws(), &["config", "user.name", "Someone Else"]);
            });
            user_git_runs_it_only_unconfined(&fx, mode, &out, &["status"]);
            let name = fx.git(&fx.ws(), &["config", "user.name"]);
            assert!(
                name.contains("Someone Else"),
                "{mode} nobody={nobody}: the user's own change is lost: {name}"
            );
        }
    }
}

/// A held script (the user's `git ci` runs `tools/ci.sh`) that the user edits with `sed
/// -i` during the run (a rename over it); the agent then appends to the new one.
/// Confined, the guard moves it aside and the user's `git ci` runs nothing of the agent's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_held_script_the_user_edits_during_a_run_is_not_the_agents_to_write() {
    let agent = "echo READY; i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; \
                 i=$((i+1)); done; printf 'touch \"%s\"\\n' \"$M\" >> tools/ci.sh \
                 && echo WROTE; true";
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            sandbox_fixture::user_ci(&fx, &fx.ws(), "sh", "echo ci");
            let out = with_the_user_between(&fx, mode, agent, &|fx| {
                let sed = fx
                    .command("sed")
                    .args(["-i", "s/echo ci/echo ci2/", "tools/ci.sh"])
                    .current_dir(fx.ws())
                    .status()
                    .unwrap();
                assert!(sed.success());
            });
            user_git_runs_it_only_unconfined(&fx, mode, &out, &["ci"]);
        }
    }
}

/// The quarantine keeps the config as it was at the end of the run (the user's change
/// and the agent's key), for the user to look at.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_replaced_config_is_kept_in_the_quarantine() {
    let fx = Fx::new(&REPO, false);
    let ws = fx.ws();
    let mut child = fx
        .sandbox_in(&ws, &["--mode", "workspace-write"], AGENT)
        .env("M", fx.marker())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    fx.git(&ws, &["config", "user.name", "Someone Else"]);
    fx.own_file(&ws, "go", "");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(child.wait().unwrap().success());
    assert!(rest.iter().any(|l| l == "WROTE"), "{rest:?}");
    let kept = std::fs::read_to_string(ws.join(".git/coder-quarantine-1/config")).unwrap();
    assert!(kept.contains("fsmonitor"), "{kept}");
    assert!(kept.contains("Someone Else"), "{kept}");
    let status = printed(
        &fx.command("git")
            .args(["config", "core.fsmonitor"])
            .current_dir(&ws)
            .output()
            .unwrap(),
    );
    assert!(!status.contains("touch"), "{status}");
}

/// An include file the repository's config names inside its git dir (`include.path =
/// extra.config`, held read-only as the config is) that the user rewrites with `git
/// config --file .git/extra.config` during the run (a rename over it); the agent then
/// appends a `core.fsmonitor` to the new one. Confined, the guard takes it away and the
/// user's next `git status` runs nothing of the agent's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_include_in_the_git_dir_the_user_rewrites_during_a_run_is_not_the_agents_to_write() {
    let agent = "echo READY; i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; \
                 i=$((i+1)); done; printf '[core]\\n\\tfsmonitor = \"touch %s; false\"\\n' \
                 \"$M\" >> .git/extra.config && echo WROTE; true";
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            fx.own_file(
                &ws,
                ".git/extra.config",
                "[user]\n\temail = me@example.com\n",
            );
            fx.git(&ws, &["config", "include.path", "extra.config"]);
            let out = with_the_user_between(&fx, mode, agent, &|fx| {
                fx.git(
                    &fx.ws(),
                    &[
                        "config",
                        "--file",
                        ".git/extra.config",
                        "user.name",
                        "Someone Else",
                    ],
                );
            });
            user_git_runs_it_only_unconfined(&fx, mode, &out, &["status"]);
        }
    }
}

/// A `.env` masked as a secret that the user saves during the run (an editor's save: a
/// new file renamed over it) takes its mask along: the agent reads the new one, confined
/// as unconfined. Still open (SECURITY.md, Known limits): this asserts the hole is still
/// there, and that the end-of-run guard at least names the secret to treat as disclosed.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_secret_the_user_saves_during_a_run_is_readable_and_named_after_it() {
    let agent = "echo READY; i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; \
                 i=$((i+1)); done; cat .env && echo && echo WROTE; true";
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            fx.own_file(&fx.ws(), ".env", "TOKEN=first\n");
            let out = with_the_user_between(&fx, mode, agent, &|fx| {
                fx.own_file(&fx.ws(), ".env.new", "TOKEN=second-one\n");
                let ws = fx.ws();
                std::fs::rename(ws.join(".env.new"), ws.join(".env")).unwrap();
            });
            assert!(
                out.contains("TOKEN=second-one"),
                "{mode} nobody={nobody}: the replaced secret is no longer readable (close \
                 the Known limits entry): {out}"
            );
            let named = out.contains("secret guard:") && out.contains("/.env was replaced");
            assert_eq!(
                named,
                mode != "danger-full-access",
                "{mode} nobody={nobody}: {out}"
            );
        }
    }
}

/// The user reinstalls the repository's hooks during the run (a fresh `hooks.new/` put in
/// place of the old with `rm -rf .git/hooks && mv`, as a hook installer or a setup step
/// does): the removal of the held directory takes its read-only mount along, and the
/// agent appends to the new hook. (Made ready first, the new directory cannot have the
/// old one's inode number; a `mkdir` after the `rm` may, see below.) Confined, the guard takes the hook away and the user's next commit
/// runs nothing of the agent's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn hooks_the_user_reinstalls_during_a_run_are_not_the_agents_to_write() {
    let agent = "echo READY; i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; \
                 i=$((i+1)); done; printf 'touch \"%s\"\\n' \"$M\" >> .git/hooks/pre-commit \
                 && echo WROTE; true";
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let out = with_the_user_between(&fx, mode, agent, &|fx| {
                let reinstall = fx
                    .command("sh")
                    .args([
                        "-c",
                        "mkdir .git/hooks.new && printf '#!/bin/sh\\ntrue\\n' \
                         > .git/hooks.new/pre-commit && chmod +x .git/hooks.new/pre-commit \
                         && rm -rf .git/hooks && mv .git/hooks.new .git/hooks",
                    ])
                    .current_dir(fx.ws())
                    .status()
                    .unwrap();
                assert!(reinstall.success());
            });
            user_git_runs_it_only_unconfined(
                &fx,
                mode,
                &out,
                &["commit", "-q", "--allow-empty", "-m", "x"],
            );
        }
    }
}

/// The user's branch switch during the run removes the held `.claude/` (the other branch
/// has none) and makes it again (back on the first): the new directory is free of the
/// read-only mount, and the agent writes `settings.json` there (its hooks would run in
/// the user's next Claude Code session). ext4 gives a directory made right after a
/// removal the number just freed, and the guard took it for the held one by device and
/// inode number, so the agent's file stayed exactly when the number came back (round
/// thirty-two's second review). The guard now also asks when it was made (its birth
/// time, after the hold began): moved aside either way, where the file system keeps
/// birth times; where it keeps none, the reused number still passes (SECURITY.md, Known
/// limits).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_claude_dir_the_user_makes_again_even_with_its_old_inode_number_is_not_the_agents() {
    use std::os::unix::fs::MetadataExt;
    let agent = "echo READY; i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; \
                 i=$((i+1)); done; printf '{\"agent\": \"%s\"}\\n' \"$M\" \
                 > .claude/settings.json && echo WROTE; true";
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            fx.own_file(&ws, ".claude/settings.json", "{}\n");
            let before = std::fs::metadata(ws.join(".claude")).unwrap().ino();
            let out = with_the_user_between(&fx, mode, agent, &|fx| {
                let again = fx
                    .command("sh")
                    .args([
                        "-c",
                        "rm -rf .claude && mkdir .claude && echo '{}' > .claude/settings.json",
                    ])
                    .current_dir(fx.ws())
                    .status()
                    .unwrap();
                assert!(again.success());
            });
            let reused = std::fs::metadata(ws.join(".claude")).unwrap().ino() == before;
            let now = std::fs::read_to_string(ws.join(".claude/settings.json")).unwrap_or_default();
            let stays = now.contains("agent");
            let births = std::fs::metadata(ws.join(".claude"))
                .and_then(|m| m.created())
                .is_ok();
            let expected = mode == "danger-full-access" || (reused && !births);
            assert_eq!(
                stays, expected,
                "{mode} nobody={nobody} inode number reused={reused}, birth times={births}: \
                 .claude/settings.json \
                 after the run: {now}\n{out}"
            );
        }
    }
}
