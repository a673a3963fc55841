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
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round20-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (none in this suite yet).
const KNOWN_OPEN: &[&str] = &[];

/// The payload a shell script of the work tree gets: `touch "$M"` appended, as the arm's
/// shell writes it.
const SCRIPT_PAYLOAD: &str = "printf 'touch \"%s\"\\n' \"$M\"";

/// `setup` makes the user's repository and config in `ws`; `script` is the agent's, run
/// through `coder sandbox` (it prints `PLANTED` once its writes are done, whether they
/// landed or not); `user` is the user's git afterwards, outside any sandbox. Confined, the
/// payload must not run; unconfined (the control), it must.
fn held_file_attack(name: &str, setup: fn(&Fx, &Path), script: &str, user: &[&str]) {
    let open = KNOWN_OPEN.contains(&name);
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            setup(&fx, &ws);
            let (rc, out) = sandbox_fixture::run_text(
                fx.sandbox_in(&ws, &["--mode", mode], script)
                    .env("M", fx.marker()),
            );
            assert_eq!(rc, 0, "{name} nobody={nobody} {mode}: {out}");
            assert!(
                out.contains("PLANTED"),
                "{name}: the attack did not run: {out}"
            );
            let _ = std::fs::remove_file(fx.marker());
            let git_out = fx.git(&ws, user);
            let ran = fx.marker().exists();
            if mode == "danger-full-access" || open {
                assert!(
                    ran,
                    "{name} nobody={nobody} {mode}: control: {out}\n{git_out}"
                );
            } else {
                assert!(
                    !ran,
                    "{name} nobody={nobody}: the user's git ran the agent's payload: \
                     {out}\n{git_out}"
                );
            }
        }
    }
}

/// A script of the user's (mode 0755, the arm's user's).
fn own_script(fx: &Fx, ws: &Path, rel: &str) {
    let script = fx.own_file(ws, rel, "#!/bin/sh\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The alias names its scripts with backslashes, as the shell allows: a blank escaped
/// (`tools/my\ fmt.sh`) and a letter escaped for nothing (`tools/e\sc.sh`). The scan
/// dropped both words (a `\` in them), and the agent appended to both scripts.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_named_with_a_backslash_is_not_the_agents_to_write() {
    held_file_attack(
        "backslash",
        |fx, ws| {
            own_script(fx, ws, "tools/my fmt.sh");
            own_script(fx, ws, "tools/esc.sh");
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    r"!sh tools/my\ fmt.sh; sh tools/e\sc.sh",
                ],
            );
        },
        &format!(
            "{SCRIPT_PAYLOAD} >> 'tools/my fmt.sh'; {SCRIPT_PAYLOAD} >> tools/esc.sh; \
             echo PLANTED"
        ),
        &["fmt"],
    );
}

/// `env -Ctools ./fmt.sh`: `env`'s `-C` with its directory in the same word, which round
/// nineteen's `-C DIR` rule did not read.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_run_through_an_attached_env_chdir_is_not_the_agents_to_write() {
    held_file_attack(
        "env -Cdir",
        |fx, ws| {
            own_script(fx, ws, "tools/fmt.sh");
            fx.git(ws, &["config", "alias.fmt", "!env -Ctools ./fmt.sh"]);
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/fmt.sh; echo PLANTED"),
        &["fmt"],
    );
}

/// `cd 'my tools' && ./fmt.sh`: the directory has a blank, and the words after the `cd`
/// were read in `my/` (then `my/tools`), not in `my tools`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_after_cd_into_a_quoted_directory_is_not_the_agents_to_write() {
    held_file_attack(
        "cd quoted dir",
        |fx, ws| {
            own_script(fx, ws, "my tools/fmt.sh");
            fx.git(ws, &["config", "alias.fmt", "!cd 'my tools' && ./fmt.sh"]);
        },
        &format!("{SCRIPT_PAYLOAD} >> 'my tools/fmt.sh'; echo PLANTED"),
        &["fmt"],
    );
}

/// The top of the work tree spelled as the shell knows it (`"$PWD/…"`, `"$(pwd)/…"`):
/// the words were dropped as ones the shell expands.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_named_from_pwd_is_not_the_agents_to_write() {
    held_file_attack(
        "pwd",
        |fx, ws| {
            own_script(fx, ws, "tools/a.sh");
            own_script(fx, ws, "tools/b.sh");
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    "!sh \"$PWD/tools/a.sh\" && sh \"$(pwd)/tools/b.sh\"",
                ],
            );
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/a.sh; {SCRIPT_PAYLOAD} >> tools/b.sh; echo PLANTED"),
        &["fmt"],
    );
}

/// `PATH=tools/bin:$PATH fmt`: the program is `tools/bin/fmt`, and the bare word `fmt`
/// was read at the top of the work tree alone.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_on_a_path_the_alias_sets_is_not_the_agents_to_write() {
    held_file_attack(
        "PATH=dir",
        |fx, ws| {
            own_script(fx, ws, "tools/bin/fmt");
            fx.git(ws, &["config", "alias.fmt", "!PATH=tools/bin:$PATH fmt"]);
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/bin/fmt; echo PLANTED"),
        &["fmt"],
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
