//! Round twenty-three's review: round twenty-two's fixes (fix22) attacked by someone who
//! did not write them. Chiefly the `PATH` a held script's `#!/usr/bin/env PROG` is found
//! through (`config_text::path_dirs`, `scan::guard_interpreter`): each attack below is a
//! command the user's own git config runs whose interpreter (or program) the line finds
//! through a `PATH` spelled in a way that reading did not see; the agent writes it in the
//! sandbox and the user's next `git` runs it outside. Every attack runs through the built
//! binary (`coder sandbox`) as root and as uid 65534, each with its control: the same
//! under `--mode danger-full-access`, where the user's git does run the payload.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD, own_script};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round23-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open.
const KNOWN_OPEN: &[&str] = &[];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet.
fn held_file_attack(name: &str, setup: fn(&Fx, &Path), script: &str, user: &[&str]) {
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// The user's `tools/fmt.py` (0755) whose `#!` line is `shebang`, and `alias.fmt = !LINE`.
fn env_script(fx: &Fx, ws: &Path, shebang: &str, line: &str) {
    let script = fx.own_file(ws, "tools/fmt.py", &format!("{shebang}\nprint(1)\n"));
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    fx.git(ws, &["config", "alias.fmt", line]);
}

/// The agent's script: a `python3` of its own (a shell script leaving the mark) at `at`.
fn plant_python(at: &str) -> String {
    format!(
        "mkdir -p \"$(dirname {at})\"; rm -f {at}; {{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} \
         > {at}; chmod +x {at}; echo PLANTED"
    )
}

/// `PATH=.:$PATH tools/fmt.py`, `#!/usr/bin/env python3`: the line puts the top itself
/// first on `PATH`; `.` was dropped as a word of dots, and the agent added `./python3`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_on_a_dot_path_entry_is_not_the_agents_to_add() {
    held_file_attack(
        "PATH=.",
        |fx, ws| {
            env_script(
                fx,
                ws,
                "#!/usr/bin/env python3",
                "!PATH=.:$PATH tools/fmt.py",
            );
        },
        &plant_python("python3"),
        &["fmt"],
    );
}

/// `PATH=:$PATH tools/fmt.py`: an empty entry of `PATH` is the working directory (the
/// top, where git runs the alias), as `.` is.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_on_an_empty_path_entry_is_not_the_agents_to_add() {
    held_file_attack(
        "PATH=:",
        |fx, ws| {
            env_script(
                fx,
                ws,
                "#!/usr/bin/env python3",
                "!PATH=:$PATH tools/fmt.py",
            );
        },
        &plant_python("python3"),
        &["fmt"],
    );
}

/// `. ./env.sh && tools/fmt.py`, the user's `env.sh` putting `tools/bin` on `PATH`: the
/// sourced file is held, the `PATH` it sets is not read.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_on_a_path_a_sourced_file_sets_is_not_the_agents_to_add() {
    held_file_attack(
        "PATH in a sourced file",
        |fx, ws| {
            fx.own_file(ws, "env.sh", "PATH=\"$PWD/tools/bin:$PATH\"\nexport PATH\n");
            own_script(fx, ws, "tools/bin/other");
            env_script(
                fx,
                ws,
                "#!/usr/bin/env python3",
                "!. ./env.sh && tools/fmt.py",
            );
        },
        &plant_python("tools/bin/python3"),
        &["fmt"],
    );
}

/// `#!/usr/bin/env -Spython3` (the `-S` value attached, as the kernel passes the rest of
/// the line as one argument): the program was read as an option and passed over.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_of_an_attached_split_string_is_not_the_agents_to_add() {
    held_file_attack(
        "env -Sprog",
        |fx, ws| {
            own_script(fx, ws, "tools/bin/other");
            env_script(
                fx,
                ws,
                "#!/usr/bin/env -Spython3",
                "!PATH=tools/bin:$PATH tools/fmt.py",
            );
        },
        &plant_python("tools/bin/python3"),
        &["fmt"],
    );
}

/// `#!/usr/bin/env --split-string=python3 -u`: the long spelling of `-S`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_of_a_long_split_string_is_not_the_agents_to_add() {
    held_file_attack(
        "env --split-string=",
        |fx, ws| {
            own_script(fx, ws, "tools/bin/other");
            env_script(
                fx,
                ws,
                "#!/usr/bin/env --split-string=python3 -u",
                "!PATH=tools/bin:$PATH tools/fmt.py",
            );
        },
        &plant_python("tools/bin/python3"),
        &["fmt"],
    );
}

/// `export PATH=tools/bin:$PATH && tools/fmt.py` (held: the `PATH=` word is read where
/// it stands).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_on_an_exported_path_is_not_the_agents_to_add() {
    held_file_attack(
        "export PATH",
        |fx, ws| {
            env_script(
                fx,
                ws,
                "#!/usr/bin/env python3",
                "!export PATH=tools/bin:$PATH && tools/fmt.py",
            );
        },
        &plant_python("tools/bin/python3"),
        &["fmt"],
    );
}

/// `env PATH=tools/bin:$PATH tools/fmt.py`, and `cd tools && PATH=bin:$PATH ./fmt.py`
/// (held).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_on_an_env_path_after_cd_is_not_the_agents_to_add() {
    held_file_attack(
        "env PATH after cd",
        |fx, ws| {
            env_script(
                fx,
                ws,
                "#!/usr/bin/env python3",
                "!cd tools && env PATH=bin:$PATH ./fmt.py",
            );
        },
        &plant_python("tools/bin/python3"),
        &["fmt"],
    );
}

/// The user's global `alias.fmt = !PATH=tools/bin:$PATH git lint` and the repository's
/// `alias.lint = !tools/fmt.py` (`#!/usr/bin/env python3`): the `PATH` is another
/// config's, read after the script's interpreter was looked for.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_on_a_path_another_config_sets_is_not_the_agents_to_add() {
    held_file_attack(
        "PATH from another config",
        |fx, ws| {
            own_script(fx, ws, "tools/bin/other");
            env_script(fx, ws, "#!/usr/bin/env python3", "!tools/fmt.py");
            fx.git(ws, &["config", "alias.lint", "!tools/fmt.py"]);
            fx.git(
                ws,
                &[
                    "config",
                    "--global",
                    "alias.fmt",
                    "!PATH=tools/bin:$PATH git lint",
                ],
            );
            fx.git(ws, &["config", "--unset", "alias.fmt"]);
        },
        &plant_python("tools/bin/python3"),
        &["fmt"],
    );
}
