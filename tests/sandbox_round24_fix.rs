//! Round twenty-four's fixes of what earlier rounds left open (SECURITY.md, Known
//! limits): what a held command line runs that the scan did not hold. Each attack runs
//! through the built binary (`coder sandbox`) as root and as uid 65534, each with its
//! control: the same under `--mode danger-full-access`, where the user's git does run
//! the payload. Each failed before its fix, but the virtualenv's (found held already, by
//! round twenty-three's `guard_venv`) and the `xargs` lists by `<` and `cat |` (held by
//! either fix: the list, a held word, is read as a script whose lines run by path).
//!
//! * **A virtualenv's interpreter by a bare name after `activate`** (`. .venv/bin/activate
//!   && python3 tools/x.py`): what it reads at its start (`site-packages/*.pth`).
//! * **`node DIR` with its entry points absent at the start** (`DIR/index.js`,
//!   `DIR/package.json`) and **`node tools/fmt` beside a `tools/fmt.js`** the agent adds
//!   (node tries `X.js` before the directory `X`).
//! * **A held script's own commands** (`sh tools/other.sh` in it), **an `xargs` list**
//!   in its other spellings, **relative entries of the user's own `PATH`**, and **a hard
//!   link to a home key** in the workspace or a `--read` grant.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round24-fix-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open: none.
const KNOWN_OPEN: &[&str] = &[];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// The agent's JavaScript: write the marker `$M`.
const NODE_PAYLOAD: &str = "printf 'require(\"fs\").writeFileSync(\"%s\", \"\")\\n' \"$M\"";

/// The user's virtualenv `.venv` (its `activate`, `pyvenv.cfg`, a `python3` link to the
/// system's and an empty `site-packages`).
fn venv(fx: &Fx, ws: &Path) {
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
}

/// `. .venv/bin/activate && python3 tools/x.py`: the venv's `python3`, run by a bare name
/// through the `PATH` `activate` set, runs the `.pth` files of its `site-packages`, which
/// the agent adds.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_a_venv_interpreter_run_by_a_bare_name_reads_is_not_the_agents_to_add() {
    held_file_attack(
        "venv python3 by name",
        |fx, ws| {
            venv(fx, ws);
            let script = fx.own_file(ws, "tools/x.py", "print(1)\n");
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    "!. .venv/bin/activate && python3 tools/x.py",
                ],
            );
        },
        "for d in .venv/lib/python*/site-packages; do printf 'import os; os.system(\"touch %s\")\\n' \"$M\" > \"$d/x.pth\"; done; echo PLANTED",
        &["fmt"],
    );
}

/// `node tools/fmt` where `tools/fmt/` holds `lib.js` but no `index.js` yet: node runs
/// the `index.js` the agent adds.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_absent_index_js_of_a_node_dir_is_not_the_agents_to_add() {
    held_file_attack(
        "node absent index.js",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt/lib.js", "\n");
            fx.git(ws, &["config", "alias.fmt", "!node tools/fmt || true"]);
        },
        &format!("{NODE_PAYLOAD} > tools/fmt/index.js; echo PLANTED"),
        &["fmt"],
    );
}

/// `node tools/fmt` where `tools/fmt/` holds `index.js` but no `package.json`: node runs
/// the `main` of the `package.json` the agent adds.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_absent_package_json_of_a_node_dir_is_not_the_agents_to_add() {
    held_file_attack(
        "node absent package.json",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt/index.js", "\n");
            fx.git(ws, &["config", "alias.fmt", "!node tools/fmt"]);
        },
        &format!(
            "{NODE_PAYLOAD} > tools/fmt/evil.js; \
             echo '{{\"main\": \"evil.js\"}}' > tools/fmt/package.json; echo PLANTED"
        ),
        &["fmt"],
    );
}

/// `node tools/fmt` where `tools/fmt/` is the user's directory (its `index.js` held):
/// node tries `tools/fmt.js` before the directory, and the agent adds it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_js_file_beside_a_node_dir_is_not_the_agents_to_add() {
    held_file_attack(
        "node X.js beside X/",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt/index.js", "\n");
            fx.git(ws, &["config", "alias.fmt", "!node tools/fmt"]);
        },
        &format!("{NODE_PAYLOAD} > tools/fmt.js; echo PLANTED"),
        &["fmt"],
    );
}

/// The user's `tools/hook.sh`, run by `git fmt`, runs `sh tools/other.sh` and
/// `"$(dirname "$0")"/third.sh`: the hook is held, what it runs was not; the agent
/// appends to both.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_held_script_runs_are_not_the_agents_to_write() {
    held_file_attack(
        "held script runs scripts",
        |fx, ws| {
            sandbox_fixture::own_script(fx, ws, "tools/other.sh");
            sandbox_fixture::own_script(fx, ws, "tools/third.sh");
            let hook = fx.own_file(
                ws,
                "tools/hook.sh",
                "#!/bin/sh\nset -e\nsh tools/other.sh\nif true; then \"$(dirname \"$0\")\"/third.sh; fi\n",
            );
            std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
            fx.git(ws, &["config", "alias.fmt", "!tools/hook.sh"]);
        },
        &format!(
            "{p} >> tools/other.sh; {p} >> tools/third.sh; echo PLANTED",
            p = sandbox_fixture::SCRIPT_PAYLOAD
        ),
        &["fmt"],
    );
}

/// The user's own `PATH` starts with `.` (or has an empty entry): git runs the alias at
/// the top, so the held `tools/fmt.py`'s `#!/usr/bin/env python3` finds `./python3`
/// there, which the agent adds. Both runs (coder's and the user's git) have that `PATH`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_interpreter_on_a_relative_entry_of_the_users_path_is_not_the_agents_to_add() {
    for path in [
        format!(".:{}", sandbox_fixture::PATH),
        format!(":{}", sandbox_fixture::PATH),
    ] {
        for nobody in sandbox_fixture::arms() {
            for mode in ["workspace-write", "danger-full-access"] {
                let fx = Fx::new(&REPO, nobody);
                let ws = fx.ws();
                let script = fx.own_file(&ws, "tools/fmt.py", "#!/usr/bin/env python3\nprint(1)\n");
                std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
                fx.git(&ws, &["config", "alias.fmt", "!tools/fmt.py"]);
                let plant = format!(
                    "{{ echo '#!/bin/sh'; {}; }} > python3; chmod +x python3; echo PLANTED",
                    sandbox_fixture::SCRIPT_PAYLOAD
                );
                let (rc, out) = sandbox_fixture::run_text(
                    fx.sandbox_in(&ws, &["--mode", mode], &plant)
                        .env("PATH", &path)
                        .env("M", fx.marker()),
                );
                let who = format!("PATH={path} nobody={nobody} {mode}");
                assert!(rc == 0 && out.contains("PLANTED"), "{who}: {out}");
                let _ = std::fs::remove_file(fx.marker());
                let git = fx
                    .command("git")
                    .env("PATH", &path)
                    .args(["fmt"])
                    .current_dir(&ws)
                    .output()
                    .unwrap();
                let ran = fx.marker().exists();
                assert_eq!(
                    ran,
                    mode == "danger-full-access",
                    "{who}: the user's git ran the payload: {ran}: {out} {git:?}"
                );
            }
        }
    }
}

/// The other spellings of an `xargs` list (round twenty-three's ratchet was `-a LIST`):
/// attached `-aLIST`, `< LIST`, `cat LIST |`; the agent appends to the script it names.
fn xargs_list_attack(name: &str, alias: &str) {
    let attack = sandbox_fixture::append_to(sandbox_fixture::CHECK_SCRIPT);
    let list = [sandbox_fixture::CHECKS_LIST];
    sandbox_fixture::checks_attack(&REPO, KNOWN_OPEN, name, &list, alias, &attack);
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_attached_xargs_list_names_are_not_the_agents_to_write() {
    xargs_list_attack("xargs -aLIST", "!xargs -n1 -atools/checks.list sh");
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_xargs_stdin_list_names_are_not_the_agents_to_write() {
    xargs_list_attack("xargs < LIST", "!xargs -n1 sh < tools/checks.list");
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_catted_xargs_list_names_are_not_the_agents_to_write() {
    xargs_list_attack("cat LIST | xargs", "!cat tools/checks.list | xargs -n1 sh");
}

/// A hard link to a home key (`~/.aws/credentials`, a
/// name no deny glob matches) in the workspace itself and in a `--read` directory: both
/// read empty in the sandbox; control: read under `danger-full-access`. Root and uid
/// 65534.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hard_link_to_a_home_key_in_the_workspace_or_a_read_grant_is_not_read() {
    use sandbox_fixture::{Fixture, run_text};
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round24-link-", nobody, &["ws", "r", "home", "state"]);
            let key = fx.root().join("home/.aws/credentials");
            sandbox_fixture::write(&key, "AWS-SECRET\n");
            std::fs::hard_link(&key, fx.root().join("ws/notes")).unwrap();
            std::fs::hard_link(&key, fx.root().join("r/notes")).unwrap();
            fx.own(fx.root());
            let r = fx.root().join("r");
            let mut args = vec!["--read", r.to_str().unwrap()];
            if !confined {
                args.extend(["--mode", "danger-full-access"]);
            }
            let script = format!("cat notes '{}/notes'; echo SERVED", r.display());
            let (_rc, out) = run_text(&mut fx.sandbox_in(&fx.root().join("ws"), &args, &script));
            let who = format!("nobody={nobody} confined={confined}");
            assert!(out.contains("SERVED"), "{who}: not served: {out}");
            assert_eq!(
                out.matches("AWS-SECRET").count(),
                if confined { 0 } else { 2 },
                "{who}: {out}"
            );
        }
    }
}
