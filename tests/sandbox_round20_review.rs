//! Round twenty's review: what round nineteen added, attacked by someone who did not write
//! it. Chiefly the work-tree scripts rule (`src/sandbox/config_text.rs`, read by the
//! scan): the scan holds read-only the files of the work tree that the commands of the
//! user's git config run (an `!` alias, a filter driver, a relative `core.fsmonitor`),
//! reading each command's words at the top of the work tree and after `cd DIR`, `-C DIR`
//! or `--chdir DIR`. Each attack below is a command the user's own config runs that names
//! a file of the work tree in a way that reading did not see: the agent writes the file
//! in the sandbox, and the user's next `git` runs it outside. Every attack runs through
//! the built binary (`coder sandbox`) as root and as uid 65534, each with its control:
//! the same under `--mode danger-full-access`, where the user's git does run the payload.
//!
//! Found open when this review started, closed with it (each test failed on the branch's
//! start, `30a5892`):
//! * **A backslash in the command.** `!sh tools/my\ fmt.sh` (a blank escaped, the other
//!   way to write round eighteen's quoted `'tools/my fmt.sh'`) was split at the blank and
//!   its `tools/my\` dropped (a `\` is in no file name the scan offers); `tools/f\mt.sh`
//!   was dropped whole. The words are read as the shell reads them now.
//! * **`env -Ctools`.** Round nineteen's `-C DIR` rule read the directory only as the next
//!   word; `env`, `make` and `tar` also take it attached.
//! * **`cd 'my tools'`.** The words after a `cd` were read from the plain split, which
//!   cuts a quoted directory at its blank.
//! * **`$PWD`, `$(pwd)`.** The shell's own names for the top of the work tree, where git
//!   runs these commands, were dropped as words the shell expands (round eighteen read
//!   only `$(git rev-parse --show-toplevel)` as the top).
//! * **`PATH=tools/bin:$PATH fmt`.** A bare program name run from a directory of the work
//!   tree the line puts on `PATH` was read at the top alone.
//! * **`python3 tools/fmt`.** An interpreter given a directory runs its `__main__.py`
//!   (`node`: `index.js`); the word named a directory, which the scan does not hold.
//!
//! * **A new top of the user's config.** git runs a config's commands at the top of the
//!   work tree it is in, and the scan holds their scripts at the tops that exist when the
//!   run starts. The agent made new ones: `sub/.git` a file reading `gitdir: ../.git` (or
//!   a directory, or `sub` itself, of a `HEAD` and a `commondir` leading to the user's
//!   `.git`), or its own `git worktree add wt`; each is a work tree (or a git dir) whose
//!   config is the user's, and the user's `git fmt` in it ran the agent's
//!   `sub/tools/fmt.sh`. The end-of-run guard left them: the pointers lead inside the
//!   tree, to a git dir it knew. It moves them aside now.
//! * **A stopped guard's record dropped unchecked.** A later run dropped a record whose
//!   tree was not at its path ("removed since"): renamed away by another run's agent and
//!   back, the tree's leftovers were then taken for the user's. Such a record stays now.
//! * **The workspace tools' base by another name.** `coder fs`/`coder mcp` refused the
//!   home directory by `$HOME`'s path alone: with `HOME` unset or elsewhere, or through a
//!   bind mount, the user's home was served.
//!
//! Looked at and held, or left (SECURITY.md): a killed run's record still skips a tree
//! that is gone. `.git` pointers made outside the guarded trees (`/tmp` with
//! `--allow-tmp`) were not looked at; round twenty-one's guard moves those that lead to
//! the user's repositories aside
//! ([`a_git_pointer_left_in_tmp_makes_a_top_of_the_users_config`]).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::Bounded;
use common::review_tree::{Tree, who};
use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD, own_script};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round20-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open: none (round twenty-one closed "pointer in /tmp").
const KNOWN_OPEN: &[&str] = &[];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// [`sandbox_fixture::alias_attack`] on this file's repository and ratchet: the user's
/// `scripts`, run by the alias `git fmt` = `alias`; the agent's command `attack`.
fn alias_attack(name: &str, scripts: &[&str], alias: &str, attack: &str) {
    sandbox_fixture::alias_attack(&REPO, KNOWN_OPEN, name, (scripts, alias), attack);
}

/// The alias names its scripts with backslashes, as the shell allows: a blank escaped
/// (`tools/my\ fmt.sh`) and a letter escaped for nothing (`tools/e\sc.sh`). The scan
/// dropped both words (a `\` in them), and the agent appended to both scripts.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_named_with_a_backslash_is_not_the_agents_to_write() {
    alias_attack(
        "backslash",
        &["tools/my fmt.sh", "tools/esc.sh"],
        r"!sh tools/my\ fmt.sh; sh tools/e\sc.sh",
        &format!(
            "{SCRIPT_PAYLOAD} >> 'tools/my fmt.sh'; {SCRIPT_PAYLOAD} >> tools/esc.sh; \
             echo PLANTED"
        ),
    );
}

/// `env -Ctools ./fmt.sh`: `env`'s `-C` with its directory in the same word, which round
/// nineteen's `-C DIR` rule did not read.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_run_through_an_attached_env_chdir_is_not_the_agents_to_write() {
    alias_attack(
        "env -Cdir",
        &["tools/fmt.sh"],
        "!env -Ctools ./fmt.sh",
        &format!("{SCRIPT_PAYLOAD} >> tools/fmt.sh; echo PLANTED"),
    );
}

/// `cd 'my tools' && ./fmt.sh`: the directory has a blank, and the words after the `cd`
/// were read in `my/` (then `my/tools`), not in `my tools`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_after_cd_into_a_quoted_directory_is_not_the_agents_to_write() {
    alias_attack(
        "cd quoted dir",
        &["my tools/fmt.sh"],
        "!cd 'my tools' && ./fmt.sh",
        &format!("{SCRIPT_PAYLOAD} >> 'my tools/fmt.sh'; echo PLANTED"),
    );
}

/// The top of the work tree spelled as the shell knows it (`"$PWD/…"`, `"$(pwd)/…"`):
/// the words were dropped as ones the shell expands.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_named_from_pwd_is_not_the_agents_to_write() {
    alias_attack(
        "pwd",
        &["tools/a.sh", "tools/b.sh"],
        "!sh \"$PWD/tools/a.sh\" && sh \"$(pwd)/tools/b.sh\"",
        &format!("{SCRIPT_PAYLOAD} >> tools/a.sh; {SCRIPT_PAYLOAD} >> tools/b.sh; echo PLANTED"),
    );
}

/// `PATH=tools/bin:$PATH fmt`: the program is `tools/bin/fmt`, and the bare word `fmt`
/// was read at the top of the work tree alone.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_on_a_path_the_alias_sets_is_not_the_agents_to_write() {
    alias_attack(
        "PATH=dir",
        &["tools/bin/fmt"],
        "!PATH=tools/bin:$PATH fmt",
        &format!("{SCRIPT_PAYLOAD} >> tools/bin/fmt; echo PLANTED"),
    );
}

/// `python3 tools/fmt`: Python runs the directory's `__main__.py`; the word named a
/// directory, which the scan does not hold.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_main_file_of_a_directory_python_runs_is_not_the_agents_to_write() {
    held_file_attack(
        "python dir",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt/__main__.py", "pass\n");
            fx.git(ws, &["config", "alias.fmt", "!python3 tools/fmt"]);
        },
        "printf 'open(\"%s\", \"w\")\\n' \"$M\" >> tools/fmt/__main__.py; echo PLANTED",
        &["fmt"],
    );
}

/// A held script sources another (`. ./tools/lib.sh`, `. "$(dirname "$0")/lib2.sh"`):
/// the sourced files ran as the script does, and were the agent's to write (round
/// twenty's Known limits; closed in round twenty-one, failed before).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_file_a_held_script_sources_is_not_the_agents_to_write() {
    held_file_attack(
        "sourced",
        |fx, ws| {
            fx.own_file(
                ws,
                "tools/hook.sh",
                "#!/bin/sh\n. ./tools/lib.sh\n. \"$(dirname \"$0\")/lib2.sh\"\n",
            );
            own_script(fx, ws, "tools/lib.sh");
            own_script(fx, ws, "tools/lib2.sh");
            fx.git(ws, &["config", "alias.fmt", "!sh tools/hook.sh"]);
        },
        &format!(
            "{SCRIPT_PAYLOAD} >> tools/lib.sh; {SCRIPT_PAYLOAD} >> tools/lib2.sh; echo PLANTED"
        ),
        &["fmt"],
    );
}

/// `python3 -W ignore tools/fmt`: an option with its value before the directory; the
/// value was read as the program, and the directory's `__main__.py` left the agent's
/// (closed in round twenty-one, failed before).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_main_file_after_an_option_with_a_value_is_not_the_agents_to_write() {
    held_file_attack(
        "python -W dir",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt/__main__.py", "pass\n");
            fx.git(ws, &["config", "alias.fmt", "!python3 -W ignore tools/fmt"]);
        },
        "printf 'open(\"%s\", \"w\")\\n' \"$M\" >> tools/fmt/__main__.py; echo PLANTED",
        &["fmt"],
    );
}

/// `node tools/fmt` with a `package.json` whose `main` is `lib/cli.js`: node runs that
/// file, not `index.js`. The agent appends to it, or points `main` at a file of its own;
/// neither was held (closed in round twenty-one, failed before).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_main_file_a_package_json_names_is_not_the_agents_to_write() {
    held_file_attack(
        "node package main",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt/package.json", "{\"main\": \"lib/cli.js\"}\n");
            fx.own_file(ws, "tools/fmt/lib/cli.js", "\n");
            fx.git(ws, &["config", "alias.fmt", "!node tools/fmt"]);
        },
        "P=$(printf 'require(\"fs\").writeFileSync(\"%s\", \"\")' \"$M\"); \
         echo \"$P\" >> tools/fmt/lib/cli.js; echo \"$P\" > tools/fmt/evil.js; \
         echo '{\"main\": \"evil.js\"}' > tools/fmt/package.json; echo PLANTED",
        &["fmt"],
    );
}

/// The agent makes `sub/.git` a file reading `gitdir: ../.git`: `sub` becomes a work tree
/// of the user's own repository, and git runs the user's config's commands at its top.
/// The alias's `tools/fmt.sh`, held at the top the scan knew, is `sub/tools/fmt.sh`
/// there, the agent's. The end-of-run guard left the pointer (it leads into the tree).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_new_git_file_to_the_users_git_dir_does_not_make_a_top_of_the_agents() {
    held_file_attack(
        "gitfile to the user's .git",
        users_alias,
        &format!(
            "mkdir -p sub/tools && echo 'gitdir: ../.git' > sub/.git && \
             {{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} > sub/tools/fmt.sh; echo PLANTED"
        ),
        &["-C", "sub", "fmt"],
    );
}

/// The same through a new `sub/.git` directory of a `HEAD` and a `commondir` leading to
/// the user's `.git`: a git dir whose config is the user's, its work tree `sub`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_new_git_dir_sharing_the_users_common_dir_does_not_make_a_top_of_the_agents() {
    held_file_attack(
        "commondir to the user's .git",
        users_alias,
        &format!(
            "mkdir -p sub/tools sub/.git && echo \"ref: $(git symbolic-ref HEAD)\" > sub/.git/HEAD && \
             echo \"$PWD/.git\" > sub/.git/commondir && \
             {{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} > sub/tools/fmt.sh; echo PLANTED"
        ),
        &["-C", "sub", "fmt"],
    );
}

/// The same through a new directory that is a git dir itself (`HEAD`, and a `commondir`
/// leading to the user's `.git`): git takes it for a repository without a work tree and
/// runs an alias there, in `sub`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_new_bare_git_dir_sharing_the_users_common_dir_does_not_run_the_agents_scripts() {
    held_file_attack(
        "bare dir with commondir",
        users_alias,
        &format!(
            "mkdir -p sub/tools && echo \"ref: $(git symbolic-ref HEAD)\" > sub/HEAD && \
             echo \"$PWD/.git\" > sub/commondir && \
             {{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} > sub/tools/fmt.sh; echo PLANTED"
        ),
        &["-C", "sub", "fmt"],
    );
}

/// The agent's own `git worktree add wt`: a linked worktree of the user's repository,
/// whose config (the common dir's) is the user's; its `tools/fmt.sh` is the agent's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_worktree_the_agent_adds_is_not_a_top_of_the_users_config() {
    held_file_attack(
        "git worktree add",
        users_alias,
        &format!(
            "git worktree add -q wt >/dev/null 2>&1; {SCRIPT_PAYLOAD} >> wt/tools/fmt.sh; \
             echo PLANTED"
        ),
        &["-C", "wt", "fmt"],
    );
}

/// The user's repository, committed, with `alias.fmt = !sh tools/fmt.sh`.
fn users_alias(fx: &Fx, ws: &Path) {
    own_script(fx, ws, "tools/fmt.sh");
    fx.git(ws, &["config", "alias.fmt", "!sh tools/fmt.sh"]);
    fx.git(ws, &["add", "-A"]);
    fx.git(
        ws,
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
}

/// `coder fs --base BASE list-folder` as the arm's user, with `HOME` set to `home` (or
/// unset) and coder's state elsewhere: its exit code and what it printed.
fn fs_list(nobody: bool, base: &Path, home: Option<&Path>, state: &Path) -> (i32, String) {
    let mut cmd = sandbox_fixture::as_arm(nobody, 60, common::CODER);
    cmd.args(["fs", "--base"])
        .arg(base)
        .args(["list-folder", r#"{"path":"."}"#])
        .env_clear()
        .env("PATH", sandbox_fixture::PATH)
        .env("CODER_STATE_DIR", state)
        .current_dir("/");
    if let Some(home) = home {
        cmd.env("HOME", home);
    }
    let out = cmd.output_bounded();
    (
        out.status.code().unwrap_or(-1),
        sandbox_fixture::printed(&out),
    )
}

/// The workspace tools refuse the home directory as their base, but compared `$HOME`'s
/// path alone: a host that starts `coder mcp` without `HOME`, or with a `HOME` of its
/// own, in the user's home, and a bind mount of the home directory, were served (every
/// dotfile and key to read and rewrite). Root's arm covers all three (its entry's home is
/// `/root`); uid 65534's, whose entry names no directory, the bind mount. Control: a
/// project directory is served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_workspace_tools_refuse_the_home_directory_by_any_name() {
    for nobody in sandbox_fixture::arms() {
        let (_keep, root) = sandbox_fixture::temp_root("coder-round20-fs-");
        let (home, mount, project, state) = (
            root.join("home"),
            root.join("mnt"),
            root.join("project"),
            root.join("state"),
        );
        for dir in [&home, &mount, &project, &state] {
            std::fs::create_dir(dir).unwrap();
        }
        if nobody {
            sandbox_fixture::give_to_nobody(&root);
        }
        let (rc, out) = fs_list(nobody, &project, Some(&home), &state);
        assert_eq!(rc, 0, "control nobody={nobody}: a project is served: {out}");
        sandbox_fixture::must_run(
            std::process::Command::new("mount")
                .arg("--bind")
                .arg(&home)
                .arg(&mount),
        );
        let _umount = sandbox_fixture::Umount(mount.clone());
        let mut refused = vec![(mount.clone(), Some(home.clone()), "a bind mount of HOME")];
        if !nobody {
            refused.push((PathBuf::from("/root"), None, "the user's home, HOME unset"));
            refused.push((
                PathBuf::from("/root"),
                Some(project.clone()),
                "the user's home, HOME elsewhere",
            ));
        }
        for (base, home, what) in refused {
            let (rc, out) = fs_list(nobody, &base, home.as_deref(), &state);
            assert!(
                rc == 1 && out.contains("C210") && out.contains("home directory"),
                "nobody={nobody}: {what} was served: {out}"
            );
        }
    }
}

/// A stopped guard's record (`<state>/sandbox/guards-stopped/`) is checked again by every
/// later run, and a record whose tree was not at its path was dropped unchecked ("a
/// temporary workspace removed since"). The agent of another run with a grant over the
/// workspace's parent (the test stands for it, renaming the tree) renamed the tree away
/// while a run elsewhere started, and back: the record was gone, the next run in the tree
/// took the stopped guard's leftovers for the user's, and the user's `git status` ran the
/// agent's `core.fsmonitor`. As root and as uid 65534; control: the payload is armed
/// between the runs (the hole the record exists to close).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_stopped_guards_record_outlives_its_tree_renamed_away() {
    let open = KNOWN_OPEN.contains(&"stopped guard record");
    for nobody in sandbox_fixture::arms() {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        fx.stop_a_guard_armed(sandbox_fixture::ARMED_REPO);
        let elsewhere = fx.run_elsewhere_while_away();
        let (_, second) = fx.sandbox("workspace-write", "echo SECOND");
        let _ = fx.git(&ws.join("n"), &["status", "--short"]);
        let ran = fx.marker().exists();
        assert_eq!(
            ran, open,
            "nobody={nobody}: the user's git ran the payload: {ran}\n{elsewhere}\n{second}"
        );
    }
}

/// With `--allow-tmp` the agent leaves `/tmp/x/.git` reading `gitdir: <workspace>/.git`
/// (or a `.git` directory of a `HEAD` and a `commondir` leading there) beside its
/// `/tmp/x/tools/fmt.sh`: a top of the user's config outside every tree the end-of-run
/// guard walked, and the user's `git fmt` in `/tmp/x` ran the agent's script. Closed in
/// round twenty-one: the guard also looks in `/tmp` (with `--allow-tmp`) for such new
/// pointers and moves them aside. As root and as uid 65534; the control: unconfined, the
/// user's git runs the payload.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_pointer_left_in_tmp_makes_a_top_of_the_users_config() {
    common::require_root_and_user_namespaces();
    const GITFILE: &str = "echo 'gitdir: {ws}/.git' > {a}/.git";
    const COMMONDIR: &str = "mkdir {a}/.git && echo 'ref: refs/heads/main' > {a}/.git/HEAD \
                             && echo '{ws}/.git' > {a}/.git/commondir";
    for owner in sandbox_fixture::owners() {
        for mode in ["workspace-write", "danger-full-access"] {
            for (how, pointer) in [("gitfile", GITFILE), ("commondir", COMMONDIR)] {
                let case = format!("{} {mode} {how}", who(owner));
                let tree = Tree::repo(
                    "coder-round20-tmp-",
                    owner,
                    &[],
                    &[("README", "r\n")],
                    &[("alias.fmt", "!sh tools/fmt.sh")],
                );
                let away = tempfile::Builder::new()
                    .prefix("coder-round20-top-")
                    .tempdir_in("/tmp")
                    .unwrap();
                let away = std::fs::canonicalize(away.keep()).unwrap();
                std::fs::set_permissions(&away, std::fs::Permissions::from_mode(0o755)).unwrap();
                if owner.is_some() {
                    sandbox_fixture::give_to_nobody(&away);
                }
                let marker = tree.root.join("marker");
                let a = away.display().to_string();
                let ws = tree.ws().display().to_string();
                let payload = format!(
                    "mkdir -p {a}/tools && {} && \
                     printf '#!/bin/sh\\ntouch {m}\\n' > {a}/tools/fmt.sh && echo PLANTED",
                    pointer.replace("{a}", &a).replace("{ws}", &ws),
                    m = marker.display()
                );
                let env = tree.run(&["--allow-tmp", "--sandbox", mode], &payload);
                assert!(
                    common::review_tree::result(&env).contains("PLANTED"),
                    "{case}: the payload did not run: {env}"
                );
                let mut git = std::process::Command::new("git");
                git.args(["fmt"])
                    .current_dir(&away)
                    .env("HOME", tree.root.join("home"))
                    .env("GIT_CONFIG_NOSYSTEM", "1");
                sandbox_fixture::as_owner(&mut git, owner);
                let out = git.output_bounded();
                let ran = marker.exists();
                let _ = std::fs::remove_dir_all(&away);
                let confined = mode == "workspace-write";
                assert_eq!(ran, !confined, "{case}: {out:?}\n{env}");
                if confined {
                    assert!(
                        common::review_tree::warned(&env, "git guard"),
                        "{case}: the move is not reported: {env}"
                    );
                }
            }
        }
    }
}
