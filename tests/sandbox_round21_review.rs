//! Round twenty-one's review: what round twenty's helpers and lead fixed, attacked by
//! someone who did not write it. Chiefly the work-tree scripts rule
//! (`src/sandbox/config_text.rs`, read by the scan): the scan holds read-only the files of
//! the work tree that the commands of the user's git config run, reading each command's
//! words as the shell reads them. Each attack below is a command the user's own config
//! runs that reaches a file of the work tree in a way that reading did not see: the agent
//! writes the file in the sandbox, and the user's next `git` runs it outside. Every attack
//! runs through the built binary (`coder sandbox`) as root and as uid 65534, each with its
//! control: the same under `--mode danger-full-access`, where the user's git does run the
//! payload.
//!
//! Found open when this review started, closed with it (each test failed on the branch's
//! start, `0c9cad2`):
//! * **A glob.** `!for f in tools/checks/*.sh; do sh "$f"; done` runs every script of a
//!   directory; the word was dropped as one the shell expands, and the agent both wrote
//!   the user's `tools/checks/a.sh` and added its own `b.sh`.
//! * **A program that runs a directory.** `!run-parts tools/checks`, `!cd tools && find
//!   checks -type f -exec sh {} \;`: the word named a directory, which the scan does not
//!   hold. It is held whole now, as a glob's directory is.
//! * **A path after an expansion coder cannot read.** `sh "$(git root)"/tools/fmt.sh`
//!   with the user's `alias.root = rev-parse --show-toplevel`, or `${T}/tools/b.sh`: the
//!   word left was `/tools/fmt.sh`, absolute, held nowhere. What follows such an
//!   expansion is read from the top now, held when a file is there.
//! * **A held script's interpreter.** `.venv/bin/fmt`, held, runs by its `#!` the venv's
//!   `python`, a link in the work tree the agent replaced. The `#!` path is held now.
//! * **A virtualenv's `activate`.** `. .venv/bin/activate && lint` runs `.venv/bin/lint`,
//!   read at the top alone; `activate`'s directory is read as a `PATH=` directory now.
//! * **A shell line inside quotes.** `!sh -c 'cd "my tools" && ./fmt.sh'`: the quoted
//!   line's own words were read from the plain split (cut at the blank in `my tools`)
//!   alone, never as the inner shell reads them.
//! * **The git dir spelled by rev-parse.** `!sh "$(git rev-parse --git-dir)/scripts/x.sh"`
//!   (or `--git-common-dir`, `--absolute-git-dir`): the word was dropped as one the shell
//!   expands, and a git dir's files other than its config, hooks and info are the agent's
//!   to write.
//! * **A decoy at a dead run's tree.** A killed (or stopped) run's guard record whose tree
//!   is gone is kept since round twenty; one with an empty directory at the tree's path
//!   was checked against that, found clean and dropped, and the tree put back held the
//!   dead run's armed repository. Records know their trees by device and inode now.
//! * **C1 controls in coder's JSON.** The envelope, `coder runs --json` and `coder fs`
//!   printed the agent's U+009B raw (serde escapes C0 only).
//!
//! * **A mount of the home directory below the base.** `coder fs` (and a confined run)
//!   refused the home directory as the base or an ancestor of it, by path and inode, but
//!   served a base holding a bind mount of it (`project/h`).
//!
//! Looked at and held: `coder fs`/`coder mcp`'s base (each path is resolved under the
//! canonical base taken once, so a base renamed and replaced by a link to the home
//! directory serves nothing outside it); `count_argument` (0 refused, large lowered, no
//! count unbounded); `~+` (not expanded by `dash`, git's `sh`).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD, own_script};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round21-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// A held script run by a virtualenv's interpreter (`. .venv/bin/activate && tools/fmt.py`,
/// `#!/usr/bin/env python3`, the venv's `python3` a link to the system's): the script and
/// the link were held, and the agent added a `.pth` file to the venv's `site-packages`,
/// which `site` runs at every start of that interpreter, so the user's `git fmt` ran the
/// agent's line (round twenty-two's known limit). Closed in round twenty-three.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_a_held_scripts_virtualenv_runs_at_start_is_not_the_agents_to_add() {
    held_file_attack(
        "venv pth",
        |fx, ws| {
            fx.own_file(
                ws,
                ".venv/bin/activate",
                "PATH=\"$PWD/.venv/bin:$PATH\"; export PATH\n",
            );
            fx.own_file(
                ws,
                ".venv/pyvenv.cfg",
                "home = /usr/bin\ninclude-system-site-packages = false\n",
            );
            let python = ws.join(".venv/bin/python3");
            std::os::unix::fs::symlink("/usr/bin/python3", &python).unwrap();
            fx.own_entry(&python);
            let version = std::process::Command::new("/usr/bin/python3")
                .args([
                    "-c",
                    "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')",
                ])
                .output()
                .unwrap();
            let version = String::from_utf8(version.stdout).unwrap();
            fx.own_file(
                ws,
                &format!(".venv/lib/{}/site-packages/README.txt", version.trim()),
                "",
            );
            let script = fx.own_file(ws, "tools/fmt.py", "#!/usr/bin/env python3\nprint(1)\n");
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    "!. .venv/bin/activate && tools/fmt.py",
                ],
            );
        },
        "for d in .venv/lib/python*/site-packages; do printf 'import os; os.system(\"touch %s\")\\n' \"$M\" > \"$d/x.pth\"; done; echo PLANTED",
        &["fmt"],
    );
}

/// Attacks still open: none (round twenty-two closed
/// [`an_interpreter_found_through_the_lines_path_is_the_agents_to_replace`]).
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

/// The alias runs every script of `tools/checks/` through a glob: the agent appends to the
/// user's `a.sh` and adds a `b.sh` of its own.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_glob_of_an_alias_runs_are_not_the_agents_to_write() {
    alias_attack(
        "glob",
        &["tools/checks/a.sh"],
        "!for f in tools/checks/*.sh; do sh \"$f\"; done",
        &format!(
            "{SCRIPT_PAYLOAD} >> tools/checks/a.sh; {SCRIPT_PAYLOAD} > tools/checks/b.sh; \
             echo PLANTED"
        ),
    );
}

/// A glob after `cd`: `cd tools && for f in checks/*; do sh "$f"; done`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_glob_runs_after_cd_are_not_the_agents_to_write() {
    alias_attack(
        "glob after cd",
        &["tools/checks/a.sh"],
        "!cd tools && for f in checks/*; do sh \"$f\"; done",
        &format!("{SCRIPT_PAYLOAD} > tools/checks/b.sh; echo PLANTED"),
    );
}

/// `run-parts tools/checks` runs every executable of the directory: the agent appends to
/// the user's `a` and adds a `b` of its own.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_run_parts_runs_are_not_the_agents_to_write() {
    alias_attack(
        "run-parts",
        &["tools/checks/a"],
        "!run-parts tools/checks",
        &format!(
            "{SCRIPT_PAYLOAD} >> tools/checks/a; {{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} \
             > tools/checks/b; chmod +x tools/checks/b; echo PLANTED"
        ),
    );
}

/// `cd tools && find checks -type f -exec sh {} ;`: the files `find` finds, run.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_find_exec_runs_are_not_the_agents_to_write() {
    alias_attack(
        "find -exec",
        &["tools/checks/a.sh"],
        "!cd tools && find checks -type f -exec sh {} \\;",
        &format!("{SCRIPT_PAYLOAD} > tools/checks/b.sh; echo PLANTED"),
    );
}

/// The top spelled by the user's own alias (`alias.root = rev-parse --show-toplevel`, a
/// common one): `sh "$(git root)/tools/fmt.sh"` left the word `/tools/fmt.sh`, and so
/// does any expansion coder cannot read before a path (`$TOP/tools/x.sh`).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_named_after_an_unread_expansion_is_not_the_agents_to_write() {
    held_file_attack(
        "after an expansion",
        |fx, ws| {
            own_script(fx, ws, "tools/fmt.sh");
            own_script(fx, ws, "tools/b.sh");
            fx.git(ws, &["config", "alias.root", "rev-parse --show-toplevel"]);
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    "!sh \"$(git root)\"/tools/fmt.sh && T=$(git root) && sh ${T}/tools/b.sh",
                ],
            );
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/fmt.sh; {SCRIPT_PAYLOAD} >> tools/b.sh; echo PLANTED"),
        &["fmt"],
    );
}

/// A virtualenv's console script (`.venv/bin/fmt`, its `#!` naming the venv's own
/// `python` by absolute path, as pip writes it) run by the user's alias: the script is
/// held, but the interpreter the kernel runs it with, a link in the work tree, was the
/// agent's to replace with its own program.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_interpreter_a_held_scripts_shebang_names_is_not_the_agents_to_replace() {
    held_file_attack(
        "shebang",
        |fx, ws| {
            let shebang = format!("#!{}/.venv/bin/python\nprint('fmt')\n", ws.display());
            let script = fx.own_file(ws, ".venv/bin/fmt", &shebang);
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            let python = ws.join(".venv/bin/python");
            std::os::unix::fs::symlink("/usr/bin/python3", &python).unwrap();
            fx.own_entry(&python);
            fx.git(ws, &["config", "alias.fmt", "!.venv/bin/fmt"]);
        },
        &format!(
            "rm -f .venv/bin/python; {{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} > .venv/bin/python; \
             chmod +x .venv/bin/python; echo PLANTED"
        ),
        &["fmt"],
    );
}

/// `. .venv/bin/activate && lint`: the activate script puts the venv's `bin` first on
/// `PATH`, and the bare `lint` runs `.venv/bin/lint`, which was read at the top alone.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_a_virtualenvs_activate_puts_on_path_is_not_the_agents_to_write() {
    held_file_attack(
        "activate",
        |fx, ws| {
            fx.own_file(
                ws,
                ".venv/bin/activate",
                "PATH=\"$PWD/.venv/bin:$PATH\"; export PATH\n",
            );
            own_script(fx, ws, ".venv/bin/lint");
            fx.git(
                ws,
                &["config", "alias.lint", "!. .venv/bin/activate && lint"],
            );
        },
        &format!("{SCRIPT_PAYLOAD} >> .venv/bin/lint; echo PLANTED"),
        &["lint"],
    );
}

/// `. .venv/bin/activate && tools/fmt.py`, whose `#!/usr/bin/env python3` finds the
/// venv's `python3` (a link in the work tree) through the `PATH` the line set: the script
/// was held, the interpreter not (the scan followed a `#!` path, not a `PATH` search).
/// Open here (a ratchet) until round twenty-two: the agent replaced the link and the
/// user's `git fmt` ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_found_through_the_lines_path_is_the_agents_to_replace() {
    held_file_attack(
        "env shebang",
        |fx, ws| {
            fx.own_file(
                ws,
                ".venv/bin/activate",
                "PATH=\"$PWD/.venv/bin:$PATH\"; export PATH\n",
            );
            let python = ws.join(".venv/bin/python3");
            std::os::unix::fs::symlink("/usr/bin/python3", &python).unwrap();
            fx.own_entry(&python);
            let script = fx.own_file(ws, "tools/fmt.py", "#!/usr/bin/env python3\nprint(1)\n");
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    "!. .venv/bin/activate && tools/fmt.py",
                ],
            );
        },
        &format!(
            "rm -f .venv/bin/python3; {{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} \
             > .venv/bin/python3; chmod +x .venv/bin/python3; echo PLANTED"
        ),
        &["fmt"],
    );
}

/// `sh -c 'cd "my tools" && ./fmt.sh'`: a shell line in quotes, itself with a quoted
/// directory; its words were read in `my/`, not in `my tools/`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_of_a_quoted_shell_line_is_not_the_agents_to_write() {
    alias_attack(
        "quoted shell line",
        &["my tools/fmt.sh"],
        "!sh -c 'cd \"my tools\" && ./fmt.sh'",
        &format!("{SCRIPT_PAYLOAD} >> 'my tools/fmt.sh'; echo PLANTED"),
    );
}

/// The git dir spelled as `git rev-parse` prints it: `.git/scripts/a.sh` and `b.sh` are
/// the user's, outside the git dir's config, hooks and info, which the sandbox holds.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_named_from_the_git_dir_is_not_the_agents_to_write() {
    alias_attack(
        "git dir",
        &[".git/scripts/a.sh", ".git/scripts/b.sh"],
        "!sh \"$(git rev-parse --git-dir)/scripts/a.sh\" && \
                     sh `git rev-parse --git-common-dir`/scripts/b.sh",
        &format!(
            "{SCRIPT_PAYLOAD} >> .git/scripts/a.sh; {SCRIPT_PAYLOAD} >> .git/scripts/b.sh; \
             echo PLANTED"
        ),
    );
}

/// A killed run's guard record is done by the next coder that sets up a sandbox; since
/// round twenty one whose tree is gone from its path is kept. The agent of another run
/// with a grant over the workspace's parent (the test stands for it) renames the tree
/// away and leaves an empty directory of its own at its path while a run elsewhere
/// starts, then puts the tree back: the record was checked against the decoy, found
/// clean and dropped, the next run in the tree took the killed run's repository for the
/// user's, and the user's `git status` there ran its `core.fsmonitor`. As root and as uid
/// 65534; control: the payload is armed after the kill.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_killed_runs_guard_is_not_done_on_a_decoy_at_its_trees_path() {
    for nobody in sandbox_fixture::arms() {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        fx.kill_a_run_that_armed_a_repo();
        let elsewhere = fx.run_elsewhere_while_replaced(true);
        let (_, second) = fx.sandbox("workspace-write", "echo SECOND");
        let _ = fx.git(&ws.join("n"), &["status", "--short"]);
        assert!(
            !fx.marker().exists(),
            "nobody={nobody}: the user's git ran the payload\n{elsewhere}\n{second}"
        );
    }
}

/// The same decoy for a stopped guard's record (`<state>/sandbox/guards-stopped/`): a
/// guard that stopped at its entry cap (lowered through a debug build's hook) keeps its
/// record for every later run to check; checked against the decoy, it was dropped.
/// Control: the payload is armed between the runs.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_stopped_guards_record_is_not_checked_on_a_decoy_at_its_trees_path() {
    for nobody in sandbox_fixture::arms() {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        fx.stop_a_guard_armed(sandbox_fixture::ARMED_REPO);
        let elsewhere = fx.run_elsewhere_while_replaced(true);
        let (_, second) = fx.sandbox("workspace-write", "echo SECOND");
        let _ = fx.git(&ws.join("n"), &["status", "--short"]);
        assert!(
            !fx.marker().exists(),
            "nobody={nobody}: the user's git ran the payload\n{elsewhere}\n{second}"
        );
    }
}

/// A fake CLI whose answer ends in a C1 CSI (U+009B, `ESC [` to some terminals) and a DEL.
const C1_CLAUDE: &str = r#"#!/bin/bash
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac; shift
done
cat >/dev/null
s='"session_id":"'"$sid"'"'
echo '{"type":"system","subtype":"init",'"$s"',"tools":[],"model":"m"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done\u009b2J\u007f",'"$s"',"num_turns":1}'
"#;

/// The JSON coder prints for the user (the envelope, `coder runs --json`, `coder fs`)
/// holds the agent's text: its answer, a file's content. serde escapes C0 controls, not
/// the C1 range nor DEL, and a U+009B the agent wrote reached the user's terminal raw
/// (round nineteen made `coder runs show` safe; its JSON was left as "escaped by JSON").
/// Each is the same JSON value now, escaped. Control: the parsed value holds the
/// character (the agent's text is all there).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_agents_text_in_coders_json_does_not_drive_the_users_terminal() {
    use common::Bounded;
    use common::review_tree::{Tree, VAR_TMP, who};
    for owner in sandbox_fixture::owners() {
        let case = who(owner);
        let tree = Tree::new("coder-r21-c1-", VAR_TMP, owner, &[]);
        let bin = tree.root.join("fake-claude");
        std::fs::write(&bin, C1_CLAUDE).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(tree.ws().join("notes.txt"), "x\u{9b}2J\u{7f}\n").unwrap();
        tree.give_away();
        let out = sandbox_fixture::coder_as(&tree.root, owner, &tree.ws(), &bin, &[], "go")
            .output_bounded();
        let env = common::review_tree::envelope(&out);
        assert!(
            env["result"].as_str().unwrap_or("").contains('\u{9b}'),
            "{case}: control: the agent's answer is not in the envelope: {env}"
        );
        assert!(
            !common::review_tree::drives_a_terminal(&out.stdout),
            "{case}: envelope: {env}"
        );
        let coder = |args: &[&str]| {
            let mut cmd = std::process::Command::new(common::CODER);
            cmd.args(args);
            sandbox_fixture::user_env(&mut cmd, &tree.root, sandbox_fixture::PATH);
            sandbox_fixture::as_owner(&mut cmd, owner);
            let out = cmd.output_bounded();
            assert!(out.status.success(), "{case}: coder {args:?}: {out:?}");
            out.stdout
        };
        let ws = tree.ws();
        let payload = r#"{"path":"notes.txt"}"#;
        let read = ["fs", "read-file", "--base", ws.to_str().unwrap(), payload];
        for args in [
            &["runs", "show", "last", "--json"][..],
            &["runs", "list", "--json"],
            &read,
        ] {
            let shown = coder(args);
            let value: serde_json::Value = serde_json::from_slice(&shown)
                .unwrap_or_else(|e| panic!("{case}: coder {args:?} is not JSON: {e}"));
            assert!(
                value.to_string().contains('\u{9b}') || args[0] == "runs" && args[1] == "list",
                "{case}: control: coder {args:?} lost the text: {value}"
            );
            assert!(
                !common::review_tree::drives_a_terminal(&shown),
                "{case}: coder {args:?} sent a control character: {value}"
            );
        }
    }
}

/// `coder fs` (and so `coder mcp`) refuses the home directory as its base by path and by
/// device and inode, the base and its ancestors: a bind mount of the home directory
/// *below* the base (`project/h`) was served, and so was a confined run's workspace
/// holding one (the agent read every dotfile through `h/`; with the state directory in
/// the home, that run was refused for the state directory only). Each refuses it now.
/// Control: the same with a bind mount of another directory is served and read. Root's
/// arm and uid 65534's (the mount is root's either way).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_mount_of_the_home_directory_below_the_base_is_refused() {
    for nobody in sandbox_fixture::arms() {
        with_home_mounted("coder-round21-mnt-", nobody, |tree, is_home, coder| {
            let base = tree.project.to_str().unwrap();
            let read = coder(&["fs", "--base", base, "read-file", r#"{"path":"h/marker"}"#]);
            let ran = coder(&["sandbox", "--cd", base, "--", "cat", "h/marker"]);
            let case = format!("nobody={nobody} home={is_home}");
            if is_home {
                assert!(
                    read.contains("C210") && read.contains("home directory"),
                    "{case}: coder fs served the home directory: {read}"
                );
                assert!(
                    !ran.contains("HOME-SECRET") && ran.contains("home directory"),
                    "{case}: the sandbox read the home directory: {ran}"
                );
            } else {
                assert!(read.contains("OTHER"), "{case}: control: {read}");
                assert!(ran.contains("OTHER"), "{case}: control: {ran}");
            }
        });
    }
}

/// The tree of the home-mount attacks, below a fresh root given to uid 65534 on its arm.
struct HomeTree {
    /// The home directory: `marker` reads `HOME-SECRET`.
    home: PathBuf,
    /// Holds `h`, the mount point.
    project: PathBuf,
    /// A workspace of its own.
    ws: PathBuf,
}

/// Calls `attack(tree, is_home, coder)` with `project/h` a bind mount of another directory
/// (`marker` reads `OTHER`: the control), then of the home directory; `coder(args)` runs
/// coder as the arm with that `HOME` and a state directory of its own, from `/`, and
/// returns what it printed.
fn with_home_mounted(
    prefix: &str,
    nobody: bool,
    attack: impl Fn(&HomeTree, bool, &dyn Fn(&[&str]) -> String),
) {
    use common::Bounded;
    let (_keep, root) = sandbox_fixture::temp_root(prefix);
    let [home, other, project, state, ws] =
        ["home", "other", "project", "state", "ws"].map(|d| root.join(d));
    for dir in [&home, &other, &project, &state, &ws, &project.join("h")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(home.join("marker"), "HOME-SECRET\n").unwrap();
    std::fs::write(other.join("marker"), "OTHER\n").unwrap();
    if nobody {
        sandbox_fixture::give_to_nobody(&root);
    }
    let tree = HomeTree { home, project, ws };
    for (source, is_home) in [(&other, false), (&tree.home, true)] {
        sandbox_fixture::must_run(
            std::process::Command::new("mount")
                .arg("--bind")
                .arg(source)
                .arg(tree.project.join("h")),
        );
        let _umount = sandbox_fixture::Umount(tree.project.join("h"));
        let coder = |args: &[&str]| {
            let mut cmd = sandbox_fixture::as_arm(nobody, 60, common::CODER);
            cmd.args(args)
                .env_clear()
                .env("PATH", sandbox_fixture::PATH)
                .env("HOME", &tree.home)
                .env("CODER_STATE_DIR", &state)
                .current_dir("/");
            sandbox_fixture::printed(&cmd.output_bounded())
        };
        attack(&tree, is_home, &coder);
    }
}

/// `PATH=tools/bin:$PATH tools/fmt.py`, whose `#!/usr/bin/env -S python3 -u` looks for
/// `python3` in `tools/bin` first, where none is at the start: the agent adds its own
/// (round twenty-two, with the ratchet above).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_absent_from_the_lines_path_dir_is_not_the_agents_to_add() {
    held_file_attack(
        "env -S shebang, absent interpreter",
        |fx, ws| {
            own_script(fx, ws, "tools/bin/other");
            let script = fx.own_file(
                ws,
                "tools/fmt.py",
                "#!/usr/bin/env -S python3 -u\nprint(1)\n",
            );
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            fx.git(
                ws,
                &["config", "alias.fmt", "!PATH=tools/bin:$PATH tools/fmt.py"],
            );
        },
        &format!(
            "{{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} > tools/bin/python3; \
             chmod +x tools/bin/python3; echo PLANTED"
        ),
        &["fmt"],
    );
}

/// A `--write` or `--read` directory holding a bind mount of the home directory
/// (`project/h`): the agent wrote (or read) every dotfile through `h/`, past the masks of
/// the home directory's secrets, which are by path; a workspace holding one has been
/// refused since round twenty-one. Each grant is refused now (round twenty-two). Control:
/// the same with a bind mount of another directory is granted, written and read. Root's
/// arm and uid 65534's (the mount is root's either way).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_a_mount_of_the_home_directory_is_refused() {
    for nobody in sandbox_fixture::arms() {
        with_home_mounted("coder-round22-mnt-", nobody, |tree, is_home, coder| {
            let marker = tree.project.join("h/marker");
            let marker = marker.to_str().unwrap();
            let (ws, project) = (tree.ws.to_str().unwrap(), tree.project.to_str().unwrap());
            let run = |grant: &str, line: &str| {
                coder(&[
                    "sandbox", "--cd", ws, grant, project, "--", "sh", "-c", line,
                ])
            };
            let wrote = run("--write", &format!("echo AGENT >> {marker}; cat {marker}"));
            let read = run("--read", &format!("cat {marker}"));
            let now = std::fs::read_to_string(marker).unwrap();
            let case = format!("nobody={nobody} home={is_home}");
            if is_home {
                for (grant, out) in [("--write", &wrote), ("--read", &read)] {
                    assert!(
                        !out.contains("HOME-SECRET") && out.contains("home directory"),
                        "{case}: {grant} reached the home directory: {out}"
                    );
                }
                assert_eq!(
                    now, "HOME-SECRET\n",
                    "{case}: the agent wrote the home directory"
                );
            } else {
                assert!(
                    wrote.contains("AGENT") && now.contains("AGENT"),
                    "{case}: {wrote}"
                );
                assert!(read.contains("OTHER"), "{case}: control: {read}");
            }
        });
    }
}

/// `for f in $(find tools/checks -type f); do sh "$f"; done`: a loop runs every file
/// `find` lists, without `-exec` or `xargs`; the agent appends to the user's `a.sh` and
/// adds a `b.sh` of its own (round twenty-two: the directory is held whole now).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_loop_over_find_runs_are_not_the_agents_to_write() {
    alias_attack(
        "for over find",
        &["tools/checks/a.sh"],
        "!for f in $(find tools/checks -type f); do sh \"$f\"; done",
        &format!(
            "{SCRIPT_PAYLOAD} >> tools/checks/a.sh; {SCRIPT_PAYLOAD} > tools/checks/b.sh; \
             echo PLANTED"
        ),
    );
}

/// The same through a pipe: `find tools/checks -type f | while read -r f; do sh "$f";
/// done` (round twenty-two's known limit; round twenty-three reads `read`'s variable as
/// the loop's).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_while_read_over_find_runs_are_not_the_agents_to_write() {
    alias_attack(
        "while read over find",
        &["tools/checks/a.sh"],
        "!find tools/checks -type f | while read -r f; do sh \"$f\"; done",
        &format!("{SCRIPT_PAYLOAD} > tools/checks/b.sh; echo PLANTED"),
    );
}

/// `git submodule foreach 'sh tools/x.sh'` runs `tools/x.sh` in each submodule: its words
/// were read at the top of the work tree only, and the agent appended to the submodule's
/// `sub/tools/x.sh` (round twenty-two: read in each directory `.gitmodules` names too).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_script_a_submodule_foreach_runs_is_not_the_agents_to_write() {
    held_file_attack(
        "submodule foreach",
        |fx, ws| {
            let sub = ws.join("sub");
            fx.git(ws, &["init", "-q", "sub"]);
            own_script(fx, ws, "sub/tools/x.sh");
            fx.git(&sub, &["add", "."]);
            fx.git(
                &sub,
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
            fx.own_file(
                ws,
                ".gitmodules",
                "[submodule \"sub\"]\n\tpath = sub\n\turl = ./sub\n",
            );
            fx.git(ws, &["add", ".gitmodules", "sub"]);
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    "!git submodule foreach -q 'sh tools/x.sh'",
                ],
            );
        },
        &format!("{SCRIPT_PAYLOAD} >> sub/tools/x.sh; echo PLANTED"),
        &["fmt"],
    );
}
