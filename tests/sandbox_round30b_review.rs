//! Round thirty's second review: round thirty's fixes (the git settings a held script
//! gives its git by other spellings, the `PATH` directories a held script sets, ssh's
//! `-F` config, suffix-less names run by `eval`/`trap`/`xargs`/`bash -lc`, the scan
//! threads' made-aside globs), attacked by one who has read the code, through the built
//! binary, root and uid 65534, each with an unconfined control (`--mode
//! danger-full-access`).
//!
//! * **Past the readers' caps**: 64 numbered git settings before the one that counts, eight
//!   assignments before a `--config-env`'s variable on its line (closed here); a
//!   variable given seventeen values (open, a ratchet: the script's variables are read
//!   with at most sixteen readings a line).
//! * **Other spellings of a `PATH` directory**: `PATH+=`, `$(dirname "$0")/bin`, a
//!   variable, a direnv `.envrc`'s `PATH_add` (closed here); `PATH=$PATH:DIR` and `env
//!   PATH=…` held.
//! * **A suffix-less made script** fed by `cat FILE | sh` (closed here); `sh < FILE`,
//!   `exec sh`, `command sh` held.
//! * **ssh's command options**: `-o ProxyCommand='sh ci/proxy'` (closed here); a held ssh
//!   config's `ProxyCommand`/`Match exec` script, the repository's `core.sshCommand`
//!   naming `ssh -F`, a `GIT_SSH` wrapper running `ssh -F` held.
//! * **Views of the home under `/opt`** by a bind of its parent or a symlink: held; what
//!   holds no key (a bind of `~/notes`, a tmpfs) still read.
//! * **The walk threads' dropped `outside_held`**: a nested repository's outside include
//!   with a hard link in the tree held (the late walks see it; not a hole as tried).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round30b-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
/// A variable given more values than a line is read with (sixteen: `export HP=x0` …
/// `export HP=x15`, then `export HP=ci/gh`): the readings past the cap are dropped, and
/// the value that counts with them.
const KNOWN_OPEN: &[&str] = &["a variable given seventeen values"];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet, run only
/// when `A30B_ONLY` is unset or names it.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    if std::env::var("A30B_ONLY").is_ok_and(|o| o != name) {
        return;
    }
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// `n` numbered settings of no consequence (`GIT_CONFIG_KEY_i=x.yi`), exported on lines of
/// their own, from 0.
fn numbered_filler(n: usize) -> String {
    (0..n)
        .map(|i| format!("export GIT_CONFIG_KEY_{i}=x.y{i}\nexport GIT_CONFIG_VALUE_{i}=v\n"))
        .collect()
}

/// Spellings of `core.hooksPath=ci/gh` for the git a held script runs past what round
/// thirty's reader reads: (name, the held `tools/ci.sh`).
fn hooks_path_spellings() -> Vec<(&'static str, String)> {
    vec![
        (
            "a numbered setting past 64 others",
            format!(
                "{}export GIT_CONFIG_KEY_64=core.hooksPath\nexport GIT_CONFIG_VALUE_64=ci/gh\n\
                 export GIT_CONFIG_COUNT=65\ngit commit -q --allow-empty -m x",
                numbered_filler(64)
            ),
        ),
        (
            "--config-env past eight assignments on its line",
            "A=1 B=1 C=1 D=1 E=1 F=1 G=1 H=1 HP=ci/gh git --config-env=core.hooksPath=HP \
             commit -q --allow-empty -m x"
                .to_string(),
        ),
        (
            "a variable given seventeen values",
            format!(
                "{}export HP=ci/gh\ngit --config-env=core.hooksPath=HP commit -q --allow-empty -m x",
                (0..16)
                    .map(|i| format!("export HP=x{i}\n"))
                    .collect::<String>()
            ),
        ),
        (
            "a numbered value from a variable",
            "HP=ci/gh\nexport GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath\n\
             export GIT_CONFIG_VALUE_0=\"$HP\"\ngit commit -q --allow-empty -m x"
                .to_string(),
        ),
        (
            "numbered settings through env",
            "env GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=ci/gh \
             git commit -q --allow-empty -m x"
                .to_string(),
        ),
    ]
}

/// Each of [`hooks_path_spellings`]: no `ci/gh` at the start; the agent makes
/// `ci/gh/pre-commit`, the user's `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hooks_path_given_by_yet_other_spellings_is_not_the_agents_to_fill() {
    for (name, script) in hooks_path_spellings() {
        held_file_attack(
            name,
            |fx, ws| sandbox_fixture::user_ci(fx, ws, "sh", &script),
            sandbox_fixture::PLANT_CI_GH_HOOK,
            &["ci"],
        );
    }
}

/// A held script puts a directory of the tree on `PATH` by another spelling and runs a
/// program by its bare name: (name, the held `tools/ci.sh`, run by bash, the program the
/// agent makes).
/// `tools/bin` holds the user's `.keep` at the start.
const PATH_PROGRAMS: &[(&str, &str, &str)] = &[
    (
        "PATH+= appended",
        "PATH+=:$PWD/tools/bin\ncommand -v fmt-local >/dev/null && fmt-local",
        "tools/bin/fmt-local",
    ),
    (
        "PATH=$PATH:DIR",
        "PATH=$PATH:tools/bin\ncommand -v fmt-local >/dev/null && fmt-local",
        "tools/bin/fmt-local",
    ),
    (
        "the script's directory's bin",
        "PATH=\"$(dirname \"$0\")/bin:$PATH\"\ncommand -v fmt-local >/dev/null && fmt-local",
        "tools/bin/fmt-local",
    ),
    (
        "the directory from a variable",
        "B=tools/bin\nPATH=\"$PWD/$B:$PATH\"\ncommand -v fmt-local >/dev/null && fmt-local",
        "tools/bin/fmt-local",
    ),
    (
        "the top from rev-parse",
        "PATH=$(git rev-parse --show-toplevel)/tools/bin:$PATH\nexport PATH\n\
         command -v fmt-local >/dev/null && fmt-local",
        "tools/bin/fmt-local",
    ),
    (
        "env PATH= on the line",
        "env PATH=tools/bin:$PATH sh -c 'command -v fmt-local >/dev/null && fmt-local'",
        "tools/bin/fmt-local",
    ),
];

/// Each of [`PATH_PROGRAMS`]: the agent makes the program (a `#!/bin/sh` that creates the
/// marker), the user's `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_found_on_a_path_set_by_other_spellings_is_not_the_agents_to_make() {
    for (name, script, program) in PATH_PROGRAMS {
        let attack = |name: &str, setup: &dyn Fn(&Fx, &Path), plant: &str, user: &[&str]| {
            held_file_attack(name, setup, plant, user)
        };
        sandbox_fixture::path_program_attack(attack, name, ("bash", script), program);
    }
}

/// A held script runs `tools/local`, absent at the start and without a script's suffix,
/// by other spellings than round thirty's: (name, the held `tools/ci.sh`).
const SUFFIXLESS_RUNS: &[(&str, &str)] = &[
    (
        "sh reading it on stdin",
        "[ -f tools/local ] && sh < tools/local; true",
    ),
    (
        "piped into sh",
        "[ -f tools/local ] && cat tools/local | sh; true",
    ),
    ("exec sh", "[ -f tools/local ] && exec sh tools/local; true"),
    ("command sh", "command sh tools/local; true"),
];

/// Each of [`SUFFIXLESS_RUNS`]: the agent makes `tools/local`, the user's `git ci` runs
/// it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_made_script_without_a_suffix_run_by_yet_other_spellings_is_moved_aside() {
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

/// The user's held `ci/ssh_config` runs a script of the tree: (name, its text, the script,
/// there at the start, that the agent appends to). ssh never reaches a host.
const SSH_CONFIG_SCRIPTS: &[(&str, &str, &str)] = &[
    (
        "a ProxyCommand's script",
        "Host *\n  ProxyCommand sh ci/proxy.sh %h %p\n",
        "ci/proxy.sh",
    ),
    (
        "a Match exec's script",
        "Match exec \"sh ci/vpn.sh\"\n  User git\n",
        "ci/vpn.sh",
    ),
];

/// Each of [`SSH_CONFIG_SCRIPTS`]: the user's `git sync` runs `ssh -F ci/ssh_config` from
/// a held script; the agent writes the script the config runs. Both arms; control
/// unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_a_held_ssh_config_runs_is_not_the_agents_to_write() {
    for (name, config, script) in SSH_CONFIG_SCRIPTS {
        held_file_attack(
            name,
            |fx, ws| {
                fx.own_file(ws, "ci/ssh_config", config);
                fx.own_file(ws, script, "true\n");
                fx.own_file(
                    ws,
                    "tools/sync.sh",
                    "ssh -F ci/ssh_config -o BatchMode=yes git@example.invalid true \
                     >/dev/null 2>&1; true\n",
                );
                fx.git(ws, &["config", "alias.sync", "!sh tools/sync.sh"]);
            },
            &sandbox_fixture::append_payload(script),
            &["sync"],
        );
    }
}

/// A repository nested in the workspace (`sub`, met by the walk's threads) includes a
/// config outside every tree that has a second name (a hard link) in the workspace: the
/// agent writes a `core.fsmonitor` through that name, the user's `git -C sub status`
/// runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_outside_config_a_nested_repository_includes_is_not_the_agents_to_write() {
    held_file_attack(
        "a nested repository's outside include with a name in the tree",
        |fx, ws| {
            let outside = ws.parent().unwrap().join("shared.gitconfig");
            sandbox_fixture::write(&outside, "[user]\n\tname = u\n");
            fx.own(&outside);
            let sub = ws.join("sub");
            std::fs::create_dir(&sub).unwrap();
            fx.own(&sub);
            fx.git(&sub, &["init", "-q"]);
            fx.git(&sub, &["config", "include.path", outside.to_str().unwrap()]);
            std::fs::create_dir(ws.join("notes")).unwrap();
            fx.own(&ws.join("notes"));
            std::fs::hard_link(&outside, ws.join("notes/shared.txt")).unwrap();
        },
        "printf '[core]\\n\\tfsmonitor = \"touch %s; false\"\\n' \"$M\" >> notes/shared.txt; \
         echo PLANTED",
        &["-C", "sub", "status"],
    );
}

/// How the host shows the home under `/opt` by other shapes than round thirty's: (name,
/// the mount, the file read below the mount, from the home). `parent`: a bind of the
/// fixture's root (the home's parent); `link`: `/opt/…` a symlink to the home, no mount.
/// A bind of `/` there was tried once by hand and held (the key masked); it is not kept:
/// while it is mounted every other run on the machine whose state `/` shows is refused.
/// The home's block device mounted again: this container may not mount it, not tried.
const OTHER_OPT_VIEWS: &[(&str, &str)] = &[
    ("a bind of the home's parent", "parent"),
    ("a symlink to the home", "link"),
];

/// A fixture whose coder state is a tmpfs of its own (the directory returned, to drop
/// after the fixture): a view of `/` under `/opt` (this file's or another test's running
/// beside it) reaches no state directory, which coder would refuse.
fn fixture_with_state_apart(nobody: bool) -> (tempfile::TempDir, Fixture) {
    let state = tempfile::Builder::new()
        .prefix("coder-round30b-state-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let mut fx = Fixture::new("coder-round30b-opt-", nobody, &["ws", "home"])
        .with_var("CODER_STATE_DIR", state.path());
    fx.mount(&["-t", "tmpfs"], Path::new("tmpfs"), state.path());
    fx.own(state.path());
    (state, fx)
}

/// Each of [`OTHER_OPT_VIEWS`]: a `workspace-write` run with no grant must not read
/// `~/.ssh/id_x` through `/opt`. Both arms; control unconfined. A run with no grant: the
/// regression a user would see is a refusal, which the control's success rules out for
/// the same tree.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_view_of_the_home_under_a_system_tree_by_other_shapes_is_not_read() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for (name, shape) in OTHER_OPT_VIEWS {
            for confined in [true, false] {
                let opt = tempfile::Builder::new()
                    .prefix("coder-round30b-")
                    .tempdir_in("/opt")
                    .unwrap();
                let (_state, mut fx) = fixture_with_state_apart(nobody);
                let (root, home) = (fx.root().to_path_buf(), fx.root().join("home"));
                sandbox_fixture::write(&home.join(".ssh/id_x"), "KEY-SECRET\n");
                fx.own(fx.root());
                let at = opt.path().join("v");
                std::fs::create_dir(&at).unwrap();
                let file = match *shape {
                    "parent" => {
                        fx.mount(&["--bind"], &root, &at);
                        at.join("home/.ssh/id_x")
                    }
                    _ => {
                        std::fs::remove_dir(&at).unwrap();
                        std::os::unix::fs::symlink(&home, &at).unwrap();
                        at.join(".ssh/id_x")
                    }
                };
                let args: &[&str] = if confined {
                    &["--mode", "workspace-write"]
                } else {
                    &["--mode", "danger-full-access"]
                };
                let script = format!("cat '{}'; echo SERVED", file.display());
                let (rc, out) =
                    sandbox_fixture::run_text(&mut fx.sandbox_in(&fx.ws(), args, &script));
                let who = format!("nobody={nobody} {name} confined={confined}");
                sandbox_fixture::judge_key(&mut broken, &who, confined, (rc, &out), "KEY-SECRET");
                if confined && !out.contains("SERVED") {
                    broken.push(format!("{who}: the run was refused: {out}"));
                }
                drop(fx);
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// What a user keeps under `/opt` beside such views stays readable: a bind of a
/// directory of the home that holds no key (`~/notes`), a tmpfs. Both arms, confined
/// (`workspace-write`): the file is shown.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_ordinary_mount_under_a_system_tree_is_still_read() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for shape in ["notes", "tmpfs"] {
            let opt = tempfile::Builder::new()
                .prefix("coder-round30b-")
                .tempdir_in("/opt")
                .unwrap();
            let (_state, mut fx) = fixture_with_state_apart(nobody);
            let home = fx.root().join("home");
            sandbox_fixture::write(&home.join(".ssh/id_x"), "KEY-SECRET\n");
            sandbox_fixture::write(&home.join("notes/a.txt"), "NOTES-TEXT\n");
            fx.own(fx.root());
            let at = opt.path().to_path_buf();
            if shape == "notes" {
                fx.mount(&["--bind"], &home.join("notes"), &at);
            } else {
                fx.mount(&["-t", "tmpfs"], Path::new("tmpfs"), &at);
                sandbox_fixture::write(&at.join("a.txt"), "NOTES-TEXT\n");
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            let script = format!("cat '{}'; echo SERVED", at.join("a.txt").display());
            let (rc, out) = sandbox_fixture::run_text(&mut fx.sandbox_in(
                &fx.ws(),
                &["--mode", "workspace-write"],
                &script,
            ));
            if rc != 0 || !out.contains("NOTES-TEXT") {
                broken.push(format!(
                    "nobody={nobody} {shape}: not shown (rc {rc}): {out}"
                ));
            }
            drop(fx);
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// ssh's config or command reached other ways than round thirty's: (name, setup run by
/// `sh` in the workspace as the arm's user, the agent's plant, the user's git).
const SSH_OTHER_WAYS: &[(&str, &str, &str, &[&str])] = &[
    (
        "the repository's core.sshCommand names ssh -F",
        "mkdir -p ci && printf 'Host *\\n  User git\\n' > ci/ssh_config && \
         git config core.sshCommand 'ssh -F ci/ssh_config -o BatchMode=yes'",
        "printf 'Host *\\n  ProxyCommand sh -c \"touch %s\"\\n' \"$M\" > ci/ssh_config; \
         echo PLANTED",
        &["ls-remote", "ssh://git@example.invalid/x"],
    ),
    (
        "a held script's GIT_SSH wrapper runs ssh -F",
        "mkdir -p ci tools && printf 'Host *\\n  User git\\n' > ci/ssh_config && \
         printf '#!/bin/sh\\nexec ssh -F ci/ssh_config -o BatchMode=yes \"$@\"\\n' > ci/ssh-wrap && \
         chmod +x ci/ssh-wrap && \
         echo 'GIT_SSH=ci/ssh-wrap git ls-remote ssh://git@example.invalid/x >/dev/null 2>&1; true' \
         > tools/sync.sh && git config alias.sync '!sh tools/sync.sh'",
        "printf 'Host *\\n  ProxyCommand sh -c \"touch %s\"\\n' \"$M\" > ci/ssh_config; \
         echo PLANTED",
        &["sync"],
    ),
    (
        "a held script's ssh -o ProxyCommand runs a file absent at the start",
        "mkdir -p tools && echo \"ssh -o ProxyCommand='sh ci/proxy' -o BatchMode=yes \
         git@example.invalid true >/dev/null 2>&1; true\" > tools/sync.sh && \
         git config alias.sync '!sh tools/sync.sh'",
        "mkdir -p ci; printf 'touch \"%s\"\\n' \"$M\" > ci/proxy; echo PLANTED",
        &["sync"],
    ),
];

/// Each of [`SSH_OTHER_WAYS`]. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_ssh_config_or_command_reached_other_ways_is_not_the_agents_to_write() {
    for (name, setup, plant, user) in SSH_OTHER_WAYS {
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

/// The user's `.envrc` (held: a protected name) puts `tools/bin` on `PATH`
/// (`PATH_add tools/bin`, direnv's), absent at the start or holding the user's `.keep`;
/// the agent makes `tools/bin/git`, which the user's next `git` in a direnv shell runs.
/// Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_on_the_path_an_envrc_adds_is_not_the_agents_to_make() {
    if std::env::var("A30B_ONLY").is_ok_and(|o| o != "envrc") {
        return;
    }
    let name = "an .envrc's PATH_add";
    let open = KNOWN_OPEN.contains(&name);
    let envrc = (".envrc", "PATH_add tools/bin");
    let plant = sandbox_fixture::plant_git("tools/bin");
    let mut broken = Vec::new();
    for files in [&[envrc, ("tools/bin/.keep", "")][..], &[envrc]] {
        broken.extend(sandbox_fixture::envrc_attack(
            &REPO, open, name, files, &plant,
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
