//! Round thirty's review: round twenty-nine's fixes (the git settings a held command sets,
//! hooks read as held scripts, the made-scripts guard and its build-output exemption, the
//! config dir's `agents`/`commands`/`skills` held as files, the home keys resolved once),
//! attacked by one who has read the code, through the built binary, root and uid 65534,
//! each with an unconfined control (`--mode danger-full-access`).
//!
//! * **Other spellings of the git settings a held script gives its git**:
//!   `GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` exported on lines of their own,
//!   `GIT_CONFIG_PARAMETERS`, `git --config-env=KEY=NAME` (closed here).
//! * **A program a held script finds through the `PATH` it sets**: absent at the start
//!   in `tools/bin` (or with `tools/bin` itself absent), the agent's to make; a `git`
//!   there shadowed the user's (closed here); the top itself on `PATH` (open, a ratchet).
//! * **A made script without a script's suffix**, run by `eval`, `trap`, `xargs`, `bash
//!   -lc` (closed here: read as run words); by a function's `"$@"` (a ratchet until
//!   round thirty-one's review).
//! * **Other mount shapes showing a home key** than round twenty-nine's bind of the home:
//!   a bind of the home's parent, an overlay whose lower layer is the home.
//! * **A view of the home under a system tree the private root shows** (`/opt/h` a bind of
//!   the home, `/opt/ssh` of `~/.ssh`, an overlay of the home): read in
//!   `workspace-write`, no grant asked (closed here: masked).
//! * **What the git dir's own hooks run, absent at the start** (closed here): the
//!   made-scripts guard's globs from the walk's threads were dropped, and a virtualenv
//!   was exempt like a build's output (the hook `pre-commit install` writes).
//! * **A config a held command hands to `ssh -F`** (round twenty-nine's ratchet, closed
//!   here): `ProxyCommand` is code in a file no look tells from data.
//! * **Found held** (kept as passing tests): a bare git dir a held script's `--git-dir`
//!   or `GIT_DIR` names, `.git/hooks` a symlink into the work tree, a bind of the home's
//!   parent, `git -c core.sshCommand='ssh -F …'` in a held script and `GIT_SSH_COMMAND`
//!   on an alias's line. Tried by hand and held, no test: `includeIf.onbranch:…path` and
//!   `export GIT_CONFIG_GLOBAL` in a held script, `python3 -m tools.local` guarded by
//!   `[ -f tools/local.py ]`, `KUBECONFIG` through a symlinked directory the agent
//!   re-points or naming a list of absent files, a dangling `KUBECONFIG` symlink into
//!   the workspace (the workspace refused), an outside config included by the
//!   repository with a hard link in the workspace.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round30-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
/// A program a held script finds on a `PATH` holding the top of the tree
/// (`PATH="$PWD:$PATH"`): the top is not held whole (it is the workspace).
const KNOWN_OPEN: &[&str] = &["the top on PATH"];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet, run only
/// when `A30_ONLY` is unset or names it.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    if std::env::var("A30_ONLY").is_ok_and(|o| o != name) {
        return;
    }
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// Spellings of `core.hooksPath=ci/gh` for the git a held script runs that round
/// twenty-nine's reader (`KEY=VALUE`, `KEY VALUE`, a numbered key and value on one line)
/// did not read: (name, the held `tools/ci.sh`).
const HOOKS_PATH_SPELLINGS: &[(&str, &str)] = &[
    (
        "numbered key and value exported on lines of their own",
        "export GIT_CONFIG_COUNT=1\nexport GIT_CONFIG_KEY_0=core.hooksPath\n\
         export GIT_CONFIG_VALUE_0=ci/gh\ngit commit -q --allow-empty -m x",
    ),
    (
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_PARAMETERS=\"'core.hooksPath'='ci/gh'\" git commit -q --allow-empty -m x",
    ),
    (
        "--config-env with the variable on the line",
        "HP=ci/gh git --config-env=core.hooksPath=HP commit -q --allow-empty -m x",
    ),
    (
        "--config-env with the variable exported before",
        "export HP=ci/gh\ngit --config-env core.hooksPath=HP commit -q --allow-empty -m x",
    ),
];

/// Each of [`HOOKS_PATH_SPELLINGS`]: no `ci/gh` at the start; the agent makes
/// `ci/gh/pre-commit`, the user's `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hooks_path_a_held_script_gives_its_git_by_other_spellings_is_not_the_agents_to_fill() {
    for (name, script) in HOOKS_PATH_SPELLINGS {
        held_file_attack(
            name,
            |fx, ws| sandbox_fixture::user_ci(fx, ws, "sh", script),
            sandbox_fixture::PLANT_CI_GH_HOOK,
            &["ci"],
        );
    }
}

/// A held script puts a directory of the tree on `PATH` and runs a program by its bare
/// name: (name, the held `tools/ci.sh`, the program the agent makes). `tools/bin` holds
/// the user's `.keep` at the start; `scripts/bin` is absent.
const PATH_PROGRAMS: &[(&str, &str, &str)] = &[
    (
        "an optional program in a PATH directory",
        "PATH=\"$PWD/tools/bin:$PATH\"\ncommand -v fmt-local >/dev/null && fmt-local",
        "tools/bin/fmt-local",
    ),
    (
        "git shadowed in a PATH directory",
        "export PATH=tools/bin:$PATH\ngit status >/dev/null",
        "tools/bin/git",
    ),
    (
        "the top on PATH",
        "PATH=\"$PWD:$PATH\"\ncommand -v fmt-local >/dev/null && fmt-local",
        "fmt-local",
    ),
    (
        "a PATH directory absent at the start",
        "export PATH=$PWD/scripts/bin:$PATH\ncommand -v lint-local >/dev/null && lint-local",
        "scripts/bin/lint-local",
    ),
];

/// Each of [`PATH_PROGRAMS`]: the agent makes the program (a `#!/bin/sh` that creates
/// the marker), the user's `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_a_held_script_finds_on_the_path_it_sets_is_not_the_agents_to_make() {
    for (name, script, program) in PATH_PROGRAMS {
        let attack = |name: &str, setup: &dyn Fn(&Fx, &Path), plant: &str, user: &[&str]| {
            held_file_attack(name, setup, plant, user)
        };
        sandbox_fixture::path_program_attack(attack, name, ("sh", script), program);
    }
}

/// The agent's `ci/ssh_config`: a `ProxyCommand` that creates the marker `$M`.
const PLANT_SSH_CONFIG: &str = "mkdir -p ci; printf 'Host *\\n  ProxyCommand sh -c \"touch %s\"\\n' \
                                \"$M\" > ci/ssh_config; echo PLANTED";

/// ssh's `-F` config named by a held command: (name, `git sync`'s alias, the held
/// `tools/sync.sh` it may run). ssh never reaches a host: the `ProxyCommand` runs first.
const SSH_CONFIGS: &[(&str, &str, &str)] = &[
    (
        "git -c core.sshCommand in a held script",
        "!sh tools/sync.sh",
        "git -c core.sshCommand='ssh -F ci/ssh_config' ls-remote ssh://git@example.invalid/x          >/dev/null 2>&1; true",
    ),
    (
        "ssh -qF with options in a held script",
        "!sh tools/sync.sh",
        "ssh -qF ci/ssh_config -o BatchMode=yes git@example.invalid true >/dev/null 2>&1; true",
    ),
    (
        "GIT_SSH_COMMAND on the alias's line",
        "!GIT_SSH_COMMAND='ssh -F ci/ssh_config' git ls-remote ssh://git@example.invalid/x          >/dev/null 2>&1; true",
        "",
    ),
];

/// Each of [`SSH_CONFIGS`]: the user's `ci/ssh_config` is there at the start; the agent
/// writes a `ProxyCommand` into it, the user's `git sync` runs it. Both arms; control
/// unconfined. `ssh -qF` ran the payload confined before this round's change (checked);
/// the other two were held before (a git setting's command words), kept as found held.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_ssh_config_a_held_command_names_is_not_the_agents_to_write() {
    for (name, alias, script) in SSH_CONFIGS {
        held_file_attack(
            name,
            |fx, ws| {
                fx.own_file(ws, "ci/ssh_config", "Host *\n  User git\n");
                if !script.is_empty() {
                    fx.own_file(ws, "tools/sync.sh", &format!("{script}\n"));
                }
                fx.git(ws, &["config", "alias.sync", alias]);
            },
            PLANT_SSH_CONFIG,
            &["sync"],
        );
    }
}

/// A held script runs `tools/local`, absent at the start and without a script's suffix,
/// by a spelling the run words did not follow (round twenty-nine's second review moved
/// aside only names with a script's suffix so spelled): (name, the held `tools/ci.sh`).
const SUFFIXLESS_RUNS: &[(&str, &str)] = &[
    ("eval", "eval 'sh tools/local'"),
    ("trap", "trap 'sh tools/local' EXIT"),
    ("xargs", "echo | xargs -n1 sh tools/local"),
    ("bash -lc", "bash -lc 'sh tools/local'"),
    (
        "a function's \"$@\"",
        "run() { \"$@\"; }\nrun sh tools/local",
    ),
];

/// Each of [`SUFFIXLESS_RUNS`]: the agent makes `tools/local`, the user's `git ci` runs
/// it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_made_script_without_a_suffix_run_by_other_spellings_is_moved_aside() {
    for (name, script) in SUFFIXLESS_RUNS {
        held_file_attack(
            name,
            |fx, ws| sandbox_fixture::user_ci(fx, ws, "sh", script),
            &format!(
                "mkdir -p tools; {{ {}; }} > tools/local; echo PLANTED",
                sandbox_fixture::SCRIPT_PAYLOAD
            ),
            &["ci"],
        );
    }
}

/// Found held: a held script's git pointed at another git dir of the tree, and a git
/// dir's `hooks` that is a symlink into the work tree. Each: (name, setup run by `sh` in
/// the workspace as the arm's user, the agent's plant, the user's git). Both arms;
/// control unconfined.
const HELD_GIT_DIRS: &[(&str, &str, &str, &[&str])] = &[
    (
        "a bare git dir a held script's --git-dir names",
        "git init -q --bare ci/m.git && mkdir -p tools && \
         echo 'git --git-dir=ci/m.git --work-tree=. status >/dev/null 2>&1; true' > tools/ci.sh \
         && git config alias.ci '!sh tools/ci.sh'",
        "printf '[core]\\n\\tbare = false\\n\\tfsmonitor = \"touch %s; false\"\\n' \"$M\" \
         > ci/m.git/config; echo PLANTED",
        &["ci"],
    ),
    (
        "a bare git dir a held script's GIT_DIR names",
        "git init -q --bare ci/m.git && mkdir -p tools && \
         echo 'GIT_DIR=ci/m.git GIT_WORK_TREE=. git status >/dev/null 2>&1; true' > tools/ci.sh \
         && git config alias.ci '!sh tools/ci.sh'",
        "printf '[core]\\n\\tbare = false\\n\\tfsmonitor = \"touch %s; false\"\\n' \"$M\" \
         > ci/m.git/config; echo PLANTED",
        &["ci"],
    ),
    (
        ".git/hooks a symlink to the work tree's githooks, the hook there",
        "mkdir githooks && printf '#!/bin/sh\\ntrue\\n' > githooks/pre-commit && \
         chmod +x githooks/pre-commit && rm -rf .git/hooks && ln -s ../githooks .git/hooks",
        "printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" > githooks/pre-commit; echo PLANTED",
        &["commit", "-q", "--allow-empty", "-m", "x"],
    ),
    (
        ".git/hooks a symlink to the work tree's githooks, no hook yet",
        "mkdir githooks && rm -rf .git/hooks && ln -s ../githooks .git/hooks",
        "printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" > githooks/pre-commit; \
         chmod +x githooks/pre-commit; echo PLANTED",
        &["commit", "-q", "--allow-empty", "-m", "x"],
    ),
];

/// Each of [`HELD_GIT_DIRS`] (found held).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn other_git_dirs_a_held_command_reaches_are_not_the_agents_to_fill() {
    for (name, setup, plant, user) in HELD_GIT_DIRS {
        held_file_attack(
            name,
            |fx, ws| {
                let out = fx
                    .command("sh")
                    .args(["-c", setup])
                    .current_dir(ws)
                    .output();
                assert!(out.unwrap().status.success(), "{name}: setup");
            },
            plant,
            user,
        );
    }
}

/// How a fixture's root shows the home another way: a bind mount of the fixture's root
/// (the home's parent) at `p`, or an overlay whose lower layer is the home at `o`.
/// Each: (name, the mount, the `--read` grant relative to the root, the file read there).
const MOUNT_SHAPES: &[(&str, &str, &str, &str)] = &[
    (
        "a bind of the home's parent, its home",
        "parent",
        "p/home",
        ".ssh/id_x",
    ),
    (
        "a bind of the home's parent, its key",
        "parent",
        "p/home/.ssh",
        "id_x",
    ),
    (
        "a bind of the home's parent, whole",
        "parent",
        "p",
        "home/.ssh/id_x",
    ),
    ("an overlay of the home", "overlay", "o", ".ssh/id_x"),
    (
        "an overlay of the home, its key",
        "overlay",
        "o/.ssh",
        "id_x",
    ),
];

/// Each of [`MOUNT_SHAPES`]: `--read` of the grant must not show `~/.ssh/id_x`. Both
/// arms; control unconfined. The binds of the parent were held; both overlays served the
/// key confined before this round's change (observed, both arms).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_showing_the_home_through_other_mount_shapes_is_refused() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for (name, shape, granted, file) in MOUNT_SHAPES {
            for confined in [true, false] {
                let mut fx = Fixture::new("coder-round30-mnt-", nobody, &["ws", "home", "state"]);
                let (root, home) = (fx.root().to_path_buf(), fx.root().join("home"));
                sandbox_fixture::write(&home.join(".ssh/id_x"), "KEY-SECRET\n");
                for d in ["p", "o", "up", "work"] {
                    std::fs::create_dir(root.join(d)).unwrap();
                }
                fx.own(fx.root());
                match *shape {
                    "parent" => {
                        fx.mount(&["--bind"], &root, &root.join("p"));
                    }
                    _ => {
                        let options = format!(
                            "lowerdir={},upperdir={},workdir={}",
                            home.display(),
                            root.join("up").display(),
                            root.join("work").display()
                        );
                        fx.mount(
                            &["-t", "overlay", "-o", &options],
                            Path::new("overlay"),
                            &root.join("o"),
                        );
                    }
                }
                let granted = root.join(granted);
                let mut args = vec!["--read", granted.to_str().unwrap()];
                if !confined {
                    args.extend(["--mode", "danger-full-access"]);
                }
                let script = format!("cat '{}'; echo SERVED", granted.join(file).display());
                let (rc, out) =
                    sandbox_fixture::run_text(&mut fx.sandbox_in(&fx.ws(), &args, &script));
                let who = format!("nobody={nobody} {name} confined={confined}");
                sandbox_fixture::judge_key(&mut broken, &who, confined, (rc, &out), "KEY-SECRET");
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// How the host shows the home under `/opt` (a system tree every confined mode shows
/// read-only, with its submounts): (name, the mount, the file read below the mount).
const OPT_VIEWS: &[(&str, &str, &str)] = &[
    ("a bind of the home", "home", ".ssh/id_x"),
    ("a bind of ~/.ssh", "ssh", "id_x"),
    ("an overlay of the home", "overlay", ".ssh/id_x"),
];

/// Each of [`OPT_VIEWS`]: a `workspace-write` run with no grant must not read
/// `~/.ssh/id_x` there. Both arms; control unconfined. Each served the key confined
/// before this round's change (observed).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_view_of_the_home_under_a_system_tree_is_not_read() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for (name, shape, file) in OPT_VIEWS {
            for confined in [true, false] {
                // Dropped after the fixture, which unmounts first.
                let opt = tempfile::Builder::new()
                    .prefix("coder-round30-")
                    .tempdir_in("/opt")
                    .unwrap();
                let mut fx = Fixture::new("coder-round30-opt-", nobody, &["ws", "home", "state"]);
                let (root, home) = (fx.root().to_path_buf(), fx.root().join("home"));
                sandbox_fixture::write(&home.join(".ssh/id_x"), "KEY-SECRET\n");
                for d in ["up", "work"] {
                    std::fs::create_dir(root.join(d)).unwrap();
                }
                fx.own(fx.root());
                let at = opt.path().to_path_buf();
                match *shape {
                    "home" => fx.mount(&["--bind"], &home, &at),
                    "ssh" => fx.mount(&["--bind"], &home.join(".ssh"), &at),
                    _ => {
                        let options = format!(
                            "lowerdir={},upperdir={},workdir={}",
                            home.display(),
                            root.join("up").display(),
                            root.join("work").display()
                        );
                        fx.mount(
                            &["-t", "overlay", "-o", &options],
                            Path::new("overlay"),
                            &at,
                        );
                    }
                }
                let args: &[&str] = if confined {
                    &["--mode", "workspace-write"]
                } else {
                    &["--mode", "danger-full-access"]
                };
                let script = format!("cat '{}'; echo SERVED", at.join(file).display());
                let (rc, out) =
                    sandbox_fixture::run_text(&mut fx.sandbox_in(&fx.ws(), args, &script));
                let who = format!("nobody={nobody} {name} confined={confined}");
                sandbox_fixture::judge_key(&mut broken, &who, confined, (rc, &out), "KEY-SECRET");
                drop(fx);
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The hook `pre-commit install` writes (pre-commit 3.x), `@PY@` the virtualenv's python
/// it was installed from.
const PRE_COMMIT_HOOK: &str = r#"#!/usr/bin/env bash
# File generated by pre-commit: https://pre-commit.com
INSTALL_PYTHON=@PY@
ARGS=(hook-impl --config=.pre-commit-config.yaml --hook-type=pre-commit)
HERE="$(cd "$(dirname "$0")" && pwd)"
ARGS+=(--hook-dir "$HERE" -- "$@")
if [ -x "$INSTALL_PYTHON" ]; then
    exec "$INSTALL_PYTHON" -mpre_commit "${ARGS[@]}"
elif command -v pre-commit > /dev/null; then
    exec pre-commit "${ARGS[@]}"
else
    echo '`pre-commit` not found.' 1>&2
    exit 1
fi
"#;

/// The user's `.git/hooks/pre-commit` runs a file absent at the start: (name, the hook,
/// `@WS@` the workspace's path, the file the agent makes, executable, as a `#!/bin/sh`
/// that creates the marker). The user's `git commit` runs it.
const GIT_DIR_HOOKS: &[(&str, &str, &str)] = &[
    (
        "an optional script the git dir's hook runs",
        "#!/bin/sh\n[ -f tools/local.sh ] && sh tools/local.sh\nexit 0\n",
        "tools/local.sh",
    ),
    (
        "the pre-commit framework's hook, no virtualenv at the start",
        PRE_COMMIT_HOOK,
        ".venv/bin/python3",
    ),
];

/// Each of [`GIT_DIR_HOOKS`]. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_the_git_dirs_hooks_run_absent_at_the_start_is_moved_aside() {
    for (name, hook, made) in GIT_DIR_HOOKS {
        let plant = format!(
            "p={made}; mkdir -p \"$(dirname \"$p\")\"; printf '#!/bin/sh\\ntouch \"%s\"\\n' \
             \"$M\" > \"$p\"; chmod +x \"$p\"; echo PLANTED"
        );
        held_file_attack(
            name,
            |fx, ws| {
                let py = ws.join(".venv/bin/python3");
                let text = hook.replace("@PY@", py.to_str().unwrap());
                let path = fx.own_file(ws, ".git/hooks/pre-commit", &text);
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            },
            &plant,
            &["commit", "-q", "--allow-empty", "-m", "x"],
        );
    }
}
