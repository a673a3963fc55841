//! Round twenty-three's review: round twenty-two's fixes (fix22) attacked by someone who
//! did not write them. Chiefly the `PATH` a held script's `#!/usr/bin/env PROG` is found
//! through (`config_text::path_dirs`, `scan::guard_interpreter`): each attack below is a
//! command the user's own git config runs whose interpreter (or program) the line finds
//! through a `PATH` spelled in a way that reading did not see; the agent writes it in the
//! sandbox and the user's next `git` runs it outside. Every attack runs through the built
//! binary (`coder sandbox`) as root and as uid 65534, each with its control: the same
//! under `--mode danger-full-access`, where the user's git does run the payload.
//!
//! Found open and closed here (each test failed on the branch's start, `e81120f`):
//! * **The `env` program's `PATH`.** `#!/usr/bin/env -Spython3` and `--split-string=`
//!   (the program taken for an option); `PATH=:$PATH` and `PATH=.:$PATH` (dropped); a
//!   `PATH` a sourced file sets (`. ./env.sh && tools/fmt.py`); a `PATH` another config's
//!   line sets (read after the script's interpreter was looked for).
//! * **The end-of-run walk of `/tmp`.** A pointer in another user's world-writable
//!   directory (`/tmp/.X11-unix/x/.git`: passed over since round twenty-two); a `.git`
//!   symlink to a `gitdir:` file (read without following).
//! * **Grants and the home directory.** A mount of `~/.config` or `~/.ssh` below the
//!   workspace or a grant; `--read ~`, `--read ~/.config`, `--write ~/.ssh` themselves.
//! * **Loops over `find`.** `find d | while read f; do sh "$f"; done`; `git submodule
//!   foreach --recursive` (nested submodules).
//!
//! Looked at and held: `export PATH=…`, `env PATH=…` after `cd`, a relative `gitdir:` in
//! `/tmp`, a workspace `.git` symlink to a `gitdir:` file (the workspace's own guard).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::sandbox_fixture::{self, GitFx as Fx, NOBODY, RepoStyle, SCRIPT_PAYLOAD, own_script};
use common::{Bounded, CODER};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round23-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open: none (round twenty-four closed `xargs -a`, the scripts an `xargs
/// -a LIST` list names).
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

/// A tree for one arm of the `/tmp` attacks (`ws`, `home`, coder's `state`) in
/// `/var/tmp`, given to the arm's user (as round twenty-one's second review's).
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    victim: u32,
}

impl Tree {
    fn new(victim: u32) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("coder-r23-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["ws", "home", "state", "xdg"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        if victim == NOBODY {
            sandbox_fixture::give_to_nobody(&root);
        }
        Tree {
            _dir: dir,
            root,
            victim,
        }
    }

    /// Runs `script` as root in a mount namespace of its own with a fresh tmpfs on
    /// `/tmp` (coder's binary bound at `$ROOT/coder-bin` first): what it printed. The
    /// script has `$VICTIM`, `$OTHER` (the other arm's uid), `$CODER`, `$ROOT` and
    /// `victim CMD…` (as the victim).
    fn scenario(&self, script: &str) -> String {
        let prelude = r#"set -u
touch "$ROOT/coder-bin" && mount --bind "$CODER" "$ROOT/coder-bin" || { echo NO-BIN-MOUNT; exit 97; }
CODER=$ROOT/coder-bin
mount -t tmpfs -o mode=1777 tmpfs /tmp || { echo NO-TMP-MOUNT; exit 97; }
victim() { if [ "$VICTIM" = 0 ]; then "$@"; else setpriv --reuid="$VICTIM" --regid="$VICTIM" --clear-groups "$@"; fi; }
"#;
        let mut cmd = Command::new("/usr/bin/timeout");
        cmd.args([
            "120",
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
        ])
        .arg(format!("{prelude}{script}"));
        sandbox_fixture::user_env(&mut cmd, &self.root, sandbox_fixture::PATH);
        let other = if self.victim == 0 { NOBODY } else { 0 };
        cmd.env("VICTIM", self.victim.to_string())
            .env("OTHER", other.to_string())
            .env("CODER", CODER)
            .env("ROOT", &self.root);
        sandbox_fixture::printed(&cmd.output_bounded())
    }
}

/// One attack on the end-of-run walk of `/tmp` (`--allow-tmp`), for each arm and mode:
/// `setup` runs as root first (`$OTHER` may make a directory of the other arm's user);
/// the agent's `plant` (its payload `touch $ROOT/marker` in `$D/tools/fmt.sh`, `$D`
/// the directory it makes a new top of the user's repository) prints `PLANTED`; then the
/// user's `git fmt` (`alias.fmt = !sh tools/fmt.sh`) in `$D`. Confined the payload must
/// not run unless `open`; unconfined (the control) it must.
fn tmp_attack(name: &str, setup: &str, dir: &str, plant: &str) {
    let open = KNOWN_OPEN.contains(&name);
    for victim in sandbox_fixture::victims() {
        for mode in ["workspace-write", "danger-full-access"] {
            let tree = Tree::new(victim);
            let out = tree.scenario(&format!(
                r##"cd "$ROOT"
victim git init -q ws
victim git -C ws config alias.fmt '!sh tools/fmt.sh'
{setup}
D={dir}
agent='mkdir -p "$D/tools" && printf "#!/bin/sh\ntouch $ROOT/marker\n" > "$D/tools/fmt.sh" && {plant} && echo PLANTED'
victim env D="$D" "$CODER" sandbox --mode {mode} --allow-tmp --cd "$ROOT/ws" -- sh -c "$agent" 2>&1
(cd "$D" && victim git fmt) 2>&1
[ -e "$ROOT/marker" ] && echo PAYLOAD-RAN
"##
            ));
            assert!(out.contains("PLANTED"), "{name} uid {victim} {mode}: {out}");
            let confined = mode == "workspace-write";
            assert_eq!(
                out.contains("PAYLOAD-RAN"),
                !confined || open,
                "{name} uid {victim} {mode} (known open: {open}): {out}"
            );
        }
    }
}

/// A pointer in another user's world-writable sticky directory of `/tmp` (as
/// `/tmp/.X11-unix` and `/tmp/.ICE-unix` are root's on most desktops): the walk passes
/// over another user's directories since round twenty-two, and the agent's own
/// directory in one was never looked at.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_pointer_in_another_users_sticky_directory_of_tmp_is_moved_aside() {
    tmp_attack(
        "pointer in another user's sticky dir",
        "mkdir -m 1777 /tmp/.X11-unix && chown \"$OTHER\" /tmp/.X11-unix",
        "/tmp/.X11-unix/x",
        r#"echo "gitdir: $ROOT/ws/.git" > "$D/.git""#,
    );
}

/// `.git` a symlink to a file of `gitdir:` (git follows it, and reads the file): the walk
/// read the link without following it and took it for no pointer.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_dot_git_symlink_to_a_gitdir_file_in_tmp_is_moved_aside() {
    tmp_attack(
        "symlink to a gitdir file",
        "",
        "/tmp/s",
        r#"echo "gitdir: $ROOT/ws/.git" > "$D/pointer" && ln -s pointer "$D/.git""#,
    );
}

/// A relative `gitdir:` (held).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_relative_pointer_in_tmp_is_moved_aside() {
    tmp_attack(
        "relative gitdir",
        "",
        "/tmp/r",
        r#"echo "gitdir: ../..$ROOT/ws/.git" > "$D/.git""#,
    );
}

/// Another local user's chain of world-writable directories 300 deep in `/tmp`: entered
/// now (the agent may write there), it must not stop the walk closed and refuse every
/// later confined run, as round twenty-one's second review's deep tree did.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn another_users_deep_writable_chain_in_tmp_does_not_refuse_later_runs() {
    for victim in sandbox_fixture::victims() {
        let tree = Tree::new(victim);
        let out = tree.scenario(
            r#"cd "$ROOT"
victim git init -q ws
setpriv --reuid="$OTHER" --regid="$OTHER" --clear-groups sh -c 'cd /tmp && for i in $(seq 300); do mkdir -m 1777 d && cd d || exit; done && echo DEEP'
victim "$CODER" sandbox --allow-tmp --cd "$ROOT/ws" -- true >/dev/null 2>&1
echo "first=$?"
victim "$CODER" sandbox --cd "$ROOT/ws" -- echo SECOND-RAN 2>&1
echo "second=$?"
"#,
        );
        for want in ["DEEP", "first=0", "SECOND-RAN", "second=0"] {
            assert!(out.contains(want), "uid {victim}: no {want}: {out}");
        }
    }
}

/// In the workspace: `sub/.git` a symlink to a file of `gitdir: ../.git` (the user's git
/// dir) makes `sub` a new top of the user's config, where the agent wrote
/// `sub/tools/fmt.sh`; the user's `git fmt` in `sub` runs it unless the end-of-run guard
/// moves the link aside.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_dot_git_symlink_to_a_gitdir_file_in_the_workspace_is_moved_aside() {
    sandbox_fixture::attack(
        &REPO,
        KNOWN_OPEN,
        "workspace symlink to a gitdir file",
        |fx| {
            fx.git(&fx.ws(), &["config", "alias.fmt", "!sh tools/fmt.sh"]);
        },
        &format!(
            "mkdir -p sub/tools && {SCRIPT_PAYLOAD} > sub/tools/fmt.sh && \
             echo 'gitdir: ../.git' > sub/pointer && ln -s pointer sub/.git && echo PLANTED"
        ),
        ("sub", &["fmt"]),
    );
}

/// A bind mount of a directory of the home directory that holds what is never visible
/// (`~/.config`, whose `gh/hosts.yml` holds the user's GitHub token; `~/.ssh`, whose
/// `authorized_keys` lets in whoever is in it) below the workspace or a `--read` or
/// `--write` grant (`project/h`): the masks of the home directory's secrets are by
/// path, and round twenty-two refuses a mount of the home directory itself only.
/// Control: the same with a bind mount of another directory is read and written. Root's
/// arm and uid 65534's (the mount is root's either way).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_mount_of_a_home_subdirectory_holding_secrets_is_not_served() {
    use common::Bounded;
    let mut leaks = Vec::new();
    for nobody in sandbox_fixture::arms() {
        let (_keep, root) = sandbox_fixture::temp_root("coder-round23-mnt-");
        let [home, other, project, state, ws] =
            ["home", "other", "project", "state", "ws"].map(|d| root.join(d));
        for dir in [&other, &state, &ws, &project.join("h")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        sandbox_fixture::write(&home.join(".config/gh/hosts.yml"), "GH-TOKEN\n");
        sandbox_fixture::write(&home.join(".ssh/authorized_keys"), "HOME-KEYS\n");
        sandbox_fixture::write(&other.join("gh/hosts.yml"), "OTHER\n");
        sandbox_fixture::write(&other.join("authorized_keys"), "OTHER\n");
        if nobody {
            sandbox_fixture::give_to_nobody(&root);
        }
        let (p, h) = (project.to_str().unwrap(), project.join("h"));
        let coder = |args: &[&str]| {
            let mut cmd = sandbox_fixture::as_arm(nobody, 60, common::CODER);
            cmd.args(args)
                .env_clear()
                .env("PATH", sandbox_fixture::PATH)
                .env("HOME", &home)
                .env("CODER_STATE_DIR", &state)
                .current_dir("/");
            sandbox_fixture::printed(&cmd.output_bounded())
        };
        let w = ws.to_str().unwrap();
        let cases: [(&Path, &str, Vec<&str>, &str); 3] = [
            (
                &home.join(".config"),
                "workspace",
                vec!["sandbox", "--cd", p, "--", "cat", "h/gh/hosts.yml"],
                "GH-TOKEN",
            ),
            (
                &home.join(".config"),
                "--read",
                vec![
                    "sandbox",
                    "--cd",
                    w,
                    "--read",
                    p,
                    "--",
                    "cat",
                    "../project/h/gh/hosts.yml",
                ],
                "GH-TOKEN",
            ),
            (
                &home.join(".ssh"),
                "--write",
                vec![
                    "sandbox",
                    "--cd",
                    w,
                    "--write",
                    p,
                    "--",
                    "sh",
                    "-c",
                    "echo AGENT-KEY >> ../project/h/authorized_keys; cat ../project/h/authorized_keys",
                ],
                "HOME-KEYS",
            ),
        ];
        for (source, how, args, secret) in cases {
            for (from, is_secret) in [(&other, false), (&source.to_path_buf(), true)] {
                sandbox_fixture::must_run(Command::new("mount").arg("--bind").arg(from).arg(&h));
                let _umount = sandbox_fixture::Umount(h.clone());
                let out = coder(&args);
                let case = format!("nobody={nobody} {how} secret={is_secret}");
                if is_secret {
                    let keys = std::fs::read_to_string(home.join(".ssh/authorized_keys")).unwrap();
                    if out.contains(secret) || keys.contains("AGENT") {
                        leaks.push(format!("{case}: reached the home directory's: {out}"));
                    }
                } else {
                    assert!(out.contains("OTHER"), "{case}: control: {out}");
                }
            }
        }
    }
    assert!(leaks.is_empty(), "{leaks:#?}");
}

/// The home directory itself as a `--read` path, and a `--read` or `--write` path that
/// is, holds or lies in one of its never-visible entries (`~/.config` with its
/// `gh/hosts.yml`, `~/.ssh`, a symlink to `~/.config`): each showed the token, or took the
/// agent's line in `authorized_keys` (round twenty-two refused a mount of the home
/// directory below a grant, not the grant itself). Control: `--read ~/.config/nvim` is
/// granted and read.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_of_the_home_directory_or_its_keys_is_refused() {
    use sandbox_fixture::Fixture;
    for nobody in sandbox_fixture::arms() {
        let fx = Fixture::new("coder-round23-grant-", nobody, &["ws", "home", "state"]);
        let home = fx.root().join("home");
        sandbox_fixture::write(&home.join(".config/gh/hosts.yml"), "GH-TOKEN\n");
        sandbox_fixture::write(&home.join(".config/nvim/init.lua"), "NVIM\n");
        sandbox_fixture::write(&home.join(".ssh/authorized_keys"), "HOME-KEYS\n");
        std::os::unix::fs::symlink(home.join(".config"), fx.root().join("cfg")).unwrap();
        fx.own(fx.root());
        let h = home.to_str().unwrap().to_owned();
        let cfg = fx.root().join("cfg").to_str().unwrap().to_owned();
        let read_token = format!("cat {h}/.config/gh/hosts.yml");
        let add_key = format!("echo AGENT >> {h}/.ssh/authorized_keys");
        let cases = [
            ("--read", h.clone(), read_token.clone()),
            ("--read", format!("{h}/.config"), read_token.clone()),
            ("--read", cfg, read_token.clone()),
            ("--write", format!("{h}/.config/gh"), read_token),
            ("--write", format!("{h}/.ssh"), add_key),
        ];
        for (flag, path, script) in cases {
            let (rc, out) = fx.sandbox(&[flag, &path], &script);
            let keys = std::fs::read_to_string(home.join(".ssh/authorized_keys")).unwrap();
            assert!(
                rc != 0 && !out.contains("GH-TOKEN") && !keys.contains("AGENT"),
                "nobody={nobody} {flag} {path}: granted: {out}"
            );
        }
        let nvim = format!("{h}/.config/nvim");
        let (rc, out) = fx.sandbox(&["--read", &nvim], &format!("cat {nvim}/init.lua"));
        assert!(
            rc == 0 && out.contains("NVIM"),
            "nobody={nobody}: control: {out}"
        );
    }
}

/// A workspace that is, holds or lies in one of the home directory's never-visible
/// entries (`--cd ~/.config` for a dotfiles checkout, `--cd ~/.config/gh`, `--cd ~/.ssh`):
/// the secret scan masks by name, and `~/.config`'s `gh/hosts.yml` (the GitHub token) was
/// read by the agent as any workspace file (the lead, after round twenty-three's review
/// named the case). Refused now, as a grant of them is. Control: `--cd ~/.config/nvim`
/// runs and reads its files.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_workspace_holding_the_home_directorys_keys_is_refused() {
    use sandbox_fixture::{Fixture, run_text};
    for nobody in sandbox_fixture::arms() {
        let fx = Fixture::new("coder-round23-cd-", nobody, &["ws", "home", "state"]);
        let home = fx.root().join("home");
        sandbox_fixture::write(&home.join(".config/gh/hosts.yml"), "GH-TOKEN\n");
        sandbox_fixture::write(&home.join(".config/nvim/init.lua"), "NVIM\n");
        sandbox_fixture::write(&home.join(".ssh/authorized_keys"), "HOME-KEYS\n");
        fx.own(fx.root());
        let script = "cat gh/hosts.yml hosts.yml authorized_keys 2>/dev/null; echo AGENT >> x";
        for dir in [".config", ".config/gh", ".ssh"] {
            let ws = home.join(dir);
            let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], script));
            assert!(
                rc != 0 && !out.contains("GH-TOKEN") && !out.contains("HOME-KEYS"),
                "nobody={nobody} --cd ~/{dir}: served: {out}"
            );
            assert!(
                out.contains("never visible to an agent") && !ws.join("x").exists(),
                "nobody={nobody} --cd ~/{dir}: {out}"
            );
        }
        let nvim = home.join(".config/nvim");
        let (rc, out) = run_text(&mut fx.sandbox_in(&nvim, &[], "cat init.lua"));
        assert!(
            rc == 0 && out.contains("NVIM"),
            "nobody={nobody}: control: {out}"
        );
    }
}

/// `find tools/checks -type f | while read f; do sh "$f"; done`: a loop over what `find`
/// lists, fed by a pipe (round twenty-two held the `for f in $(find …)` form only); the
/// agent appends to the user's `a.sh` and adds a `b.sh` of its own.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_while_read_over_find_runs_are_not_the_agents_to_write() {
    alias_attack(
        "while read over find",
        &["tools/checks/a.sh"],
        "!find tools/checks -type f | while read f; do sh \"$f\"; done",
        &format!(
            "{SCRIPT_PAYLOAD} >> tools/checks/a.sh; {SCRIPT_PAYLOAD} > tools/checks/b.sh; \
             echo PLANTED"
        ),
    );
}

/// A commit in `dir` as the fixture's user, with a fixed identity.
fn commit_in(fx: &Fx, dir: &Path) {
    fx.git(dir, &["add", "."]);
    fx.git(
        dir,
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

/// `git submodule foreach --recursive 'sh tools/x.sh'` runs `tools/x.sh` in a nested
/// submodule too (`sub/inner`); round twenty-two reads the words in each directory the
/// top's `.gitmodules` names, not in those of a submodule's own `.gitmodules`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_script_a_recursive_submodule_foreach_runs_is_not_the_agents_to_write() {
    held_file_attack(
        "submodule foreach --recursive",
        |fx, ws| {
            let sub = ws.join("sub");
            fx.git(ws, &["init", "-q", "sub"]);
            fx.git(&sub, &["init", "-q", "inner"]);
            own_script(fx, ws, "sub/inner/tools/x.sh");
            commit_in(fx, &sub.join("inner"));
            fx.own_file(
                ws,
                "sub/.gitmodules",
                "[submodule \"inner\"]\n\tpath = inner\n\turl = ./inner\n",
            );
            commit_in(fx, &sub);
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
                    "!git submodule foreach -q --recursive 'sh tools/x.sh 2>/dev/null || :'",
                ],
            );
        },
        &format!("{SCRIPT_PAYLOAD} >> sub/inner/tools/x.sh; echo PLANTED"),
        &["fmt"],
    );
}

/// `xargs -a tools/checks.list sh`: the list is the user's file, held as a word of the
/// line; the scripts it names are read by `xargs`, not by the shell, and were the
/// agent's to write (a ratchet until round twenty-four: each entry is held now).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_xargs_list_names_are_not_the_agents_to_write() {
    held_file_attack(
        "xargs -a",
        |fx, ws| {
            own_script(fx, ws, "tools/checks/a.sh");
            fx.own_file(ws, "tools/checks.list", "tools/checks/a.sh\n");
            fx.git(
                ws,
                &["config", "alias.fmt", "!xargs -n1 -a tools/checks.list sh"],
            );
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/checks/a.sh; echo PLANTED"),
        &["fmt"],
    );
}
