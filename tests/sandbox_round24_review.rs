//! Round twenty-four's review: round twenty-three's changes (the nested domain of tool
//! commands, the CLI's `Edit` deny rules for its scratch, the held virtualenv, the
//! never-visible refusals) attacked again by one who has read the code, through the built
//! binary, root and uid 65534, each with an unconfined control.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD, owners};

/// The CLI's `Edit` deny rules for its own scratch (`claude-<uid>/`, `cc-socks/`) spelled
/// the scratch's path as it is, and the CLI reads a rule as a gitignore glob: with the
/// state directory `st[a]te?\x` (a user's choice, `CODER_STATE_DIR`), `[a]` was a
/// character class that never matched the scratch, and the Write tool wrote
/// `claude-<uid>/planted-by-write` through a workspace link, both arms, as before round
/// twenty-three's second review. The rule now has `?` for each such character. Real CLI,
/// offline against `fixtures/sandbox/cli_scratch_write_tool.json`; control unconfined.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_scratch_rules_hold_for_a_state_directory_spelled_with_glob_characters() {
    sandbox_fixture::write_tool_scratch_attack(Some(std::ffi::OsStr::new("st[a]te?\\x")));
}

/// Every git fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round24-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (each asserts that its payload still lands; the list only shrinks;
/// SECURITY.md Known limits): a `sitecustomize.py` in a directory a held file's
/// `PYTHONPATH=` names; the `dist-packages` of a Python installed as a prefix in the work
/// tree (not a virtualenv). Closed in the same round by fix24: the scripts a list names
/// when it reaches `xargs` or a `while read` loop on standard input (siblings of round
/// twenty-three's `xargs -a`).
const KNOWN_OPEN: &[&str] = &[];

/// The system python's `pythonX.Y`.
fn python_version() -> String {
    let out = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')",
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The user's virtualenv `.venv` (its `python3` a link to the system's, an `activate`
/// that puts `.venv/bin` on `PATH` and `activate_extra` after) and `git fmt` =
/// `!. .venv/bin/activate && tools/fmt.py`, a `#!/usr/bin/env python3` script: the
/// round-twenty-three form whose `pyvenv.cfg` and `site-packages` are held.
fn venv_fixture(fx: &Fx, ws: &Path, activate_extra: &str) {
    fx.own_file(
        ws,
        ".venv/bin/activate",
        &format!("PATH=\"$PWD/.venv/bin:$PATH\"; export PATH\n{activate_extra}"),
    );
    fx.own_file(
        ws,
        ".venv/pyvenv.cfg",
        "home = /usr/bin\ninclude-system-site-packages = false\n",
    );
    let python = ws.join(".venv/bin/python3");
    std::os::unix::fs::symlink("/usr/bin/python3", &python).unwrap();
    fx.own_entry(&python);
    let site = format!(".venv/lib/{}/site-packages/README.txt", python_version());
    fx.own_file(ws, &site, "");
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
}

/// The line the agent's `.pth` (or `sitecustomize.py`) holds: touch the marker.
const PTH_LINE: &str = "printf 'import os; os.system(\"touch %s\")\\n' \"$M\"";

fn venv_attack(name: &str, activate_extra: &'static str, script: &str) {
    let setup = move |fx: &Fx, ws: &Path| venv_fixture(fx, ws, activate_extra);
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, &["fmt"]);
}

/// The same `PYTHONPATH=$PWD/src`, the agent's `sitecustomize` a package
/// (`src/sitecustomize/__init__.py`), or the user's own `src/sitecustomize.py` appended
/// to. Held since round twenty-five (the names `sitecustomize*`/`usercustomize*` there
/// are held when present, and moved aside by the end-of-run guard when made). Both
/// arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_sitecustomize_package_or_the_users_own_on_a_held_pythonpath_is_not_the_agents() {
    const EXTRA: &str = "PYTHONPATH=\"$PWD/src\"; export PYTHONPATH\n";
    venv_attack(
        "venv pythonpath sitecustomize package",
        EXTRA,
        &format!(
            "mkdir -p src/sitecustomize; {PTH_LINE} > src/sitecustomize/__init__.py; echo PLANTED"
        ),
    );
    let setup = |fx: &Fx, ws: &Path| {
        venv_fixture(fx, ws, EXTRA);
        fx.own_file(ws, "src/sitecustomize.py", "pass\n");
    };
    sandbox_fixture::held_file_attack(
        &REPO,
        KNOWN_OPEN,
        "venv pythonpath users sitecustomize",
        setup,
        &format!("{PTH_LINE} >> src/sitecustomize.py; echo PLANTED"),
        &["fmt"],
    );
}

/// The held `site-packages` moved away with its parent (`lib/` renamed) and a new one made
/// in its place, holding the agent's `.pth`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_held_site_packages_renamed_away_with_its_parent_is_not_replaced() {
    venv_attack(
        "venv lib renamed",
        "",
        &format!(
            "v=$(basename .venv/lib/python*); mv .venv/lib .venv/lib.old; \
             mkdir -p .venv/lib/$v/site-packages; {PTH_LINE} > .venv/lib/$v/site-packages/x.pth; \
             echo PLANTED"
        ),
    );
}

/// The whole virtualenv renamed away (its held `pyvenv.cfg`, `activate` and
/// `site-packages` with it) and a new `.venv` of the agent's made in its place.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_held_virtualenv_renamed_away_is_not_replaced() {
    venv_attack(
        "venv renamed",
        "",
        &format!(
            "v=$(basename .venv/lib/python*); mv .venv .venv.old; \
             mkdir -p .venv/bin .venv/lib/$v/site-packages; cp .venv.old/pyvenv.cfg .venv/; \
             cp .venv.old/bin/activate .venv/bin/; ln -s /usr/bin/python3 .venv/bin/python3; \
             {PTH_LINE} > .venv/lib/$v/site-packages/x.pth; echo PLANTED"
        ),
    );
}

/// `activate` (held, sourced by the line) also sets `PYTHONPATH=$PWD/src`, as many
/// projects' do: `site` imports `sitecustomize` from any `sys.path` entry, and the agent
/// writes `src/sitecustomize.py`. A ratchet until round twenty-five: the scan read a held
/// line's `PATH=`, not its `PYTHONPATH=`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_sitecustomize_on_the_pythonpath_a_held_activate_sets_is_not_the_agents_to_add() {
    venv_attack(
        "venv pythonpath sitecustomize",
        "PYTHONPATH=\"$PWD/src\"; export PYTHONPATH\n",
        &format!("mkdir -p src; {PTH_LINE} > src/sitecustomize.py; echo PLANTED"),
    );
}

/// The never-visible refusals compared grants with `$HOME`'s entries alone: root started
/// with another `HOME` (sudo keeping the caller's, a service's, this suite's own) had
/// `--read /root/.config` and `--write /root/.config` (where `gh/hosts.yml` is, or would
/// be made) granted, and `coder plan --plan-file /root/.netrc` accepted, though each is
/// refused with `HOME=/root`. The user entry's home directory counts too now (as it does
/// for the workspace since round twenty-three's second review). Root only: uid 65534's
/// entry names `/nonexistent`. Nothing in `/root` is written: the agent's script only
/// says it was served. Control: `--read /root/.pyenv` (or another directory without keys) is still served.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_user_entrys_home_keys_are_refused_under_another_home() {
    use sandbox_fixture::{Fixture, run_text};
    if !nix::unistd::geteuid().is_root() {
        panic!("needs root: the user entry's home directory of root is /root");
    }
    let claude = common::real_claude();
    let fx = Fixture::new("coder-round24-account-", false, &["ws", "home", "state"]);
    let account = Path::new("/root");
    for flag in ["--read", "--write"] {
        let grant = account.join(".config");
        let args = [flag, grant.to_str().unwrap()];
        let (rc, out) = run_text(&mut fx.sandbox_in(&fx.ws(), &args, "echo SERVED"));
        assert!(
            rc != 0 && out.contains("never granted") && !out.contains("SERVED"),
            "{flag} /root/.config with HOME elsewhere: {out}"
        );
    }
    let plan_file = [".netrc", ".git-credentials", ".pypirc"]
        .iter()
        .map(|n| account.join(n))
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .expect("one of /root/.netrc, .git-credentials, .pypirc is absent");
    let cassette = format!(
        "replay:{}/fixtures/sandbox/plan_key_file.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut cmd = fx.command(common::CODER);
    cmd.args(["plan", "--cd"])
        .arg(fx.ws())
        .arg("--plan-file")
        .arg(&plan_file)
        .arg("--claude-bin")
        .arg(&claude)
        .args(["--backend", &cassette, "make a plan"])
        .env("PATH", sandbox_fixture::PATH)
        .env("ANTHROPIC_AUTH_TOKEN", "test-token")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9");
    let (rc, out) = run_text(&mut cmd);
    let made = std::fs::symlink_metadata(&plan_file).is_ok();
    if made {
        std::fs::remove_file(&plan_file).unwrap();
    }
    assert!(
        rc != 0 && out.contains("keys and tokens") && !made,
        "--plan-file {} with HOME elsewhere: made={made}: {out}",
        plan_file.display()
    );
    let other = [".pyenv", ".cargo", ".rustup", ".npm", ".cache", ".local"]
        .iter()
        .map(|n| account.join(n))
        .find(|p| p.is_dir())
        .expect("a directory of /root without keys (.pyenv, .cargo, .npm, …)");
    let args = ["--read", other.to_str().unwrap()];
    let (rc, out) = run_text(&mut fx.sandbox_in(&fx.ws(), &args, "echo SERVED"));
    assert!(
        rc == 0 && out.contains("SERVED"),
        "control: --read {}: {out}",
        other.display()
    );
}

/// The user's `tools/checks.list` names `tools/checks/a.sh`, and the alias `git fmt` =
/// `alias` runs what the list names; the agent appends its payload to `a.sh`.
fn list_attack(name: &str, alias: &'static str) {
    let attack = sandbox_fixture::append_to(sandbox_fixture::CHECK_SCRIPT);
    let list = [sandbox_fixture::CHECKS_LIST];
    sandbox_fixture::checks_attack(&REPO, KNOWN_OPEN, name, &list, alias, &attack);
}

/// Siblings of round twenty-three's open `xargs -a LIST sh`: the list given to `xargs`
/// on its standard input, by a redirection or a pipe.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_list_fed_to_xargs_names_are_not_the_agents_to_write() {
    list_attack("xargs < list", "!xargs -n1 sh < tools/checks.list");
    list_attack("cat list | xargs", "!cat tools/checks.list | xargs -n1 sh");
}

/// Another sibling: a `while read` loop over the list by a redirection.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_while_read_over_a_list_runs_are_not_the_agents_to_write() {
    list_attack(
        "while read < list",
        "!while read -r f; do sh \"$f\"; done < tools/checks.list",
    );
}

/// The CLI's Write tool (its own domain, which writes the scratch) tries the scratch by
/// paths its deny rules might not see: a dangling workspace link to a new name of
/// `claude-<uid>/` (the CLI refuses to write through a symlink anyway, unconfined too), a
/// new directory below a link to it, and `//` and `/./` through a link (a `/../` is
/// resolved by name first, into the workspace). All held (the CLI checks the resolved
/// path, and the nearest existing ancestor's for a path not made yet). A link flipped between a directory of the agent's
/// and the scratch by a background Bash loop while the Write tool wrote was tried too,
/// 60 writes (renameat2 RENAME_EXCHANGE): the CLI checks the resolution again before
/// writing and refused or wrote the agent's directory every time; not kept as a test (a
/// race). Real CLI, offline against `fixtures/sandbox/round24_write_tool_scratch.json`,
/// both arms; control unconfined (every write but the dangling link's lands).
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_write_tool_finds_no_other_spelling_of_the_clis_scratch() {
    let names = ["planted-newdir", "planted-ds", "planted-dot"];
    for owner in owners() {
        for confined in [true, false] {
            let run = sandbox_fixture::cli_probe(
                owner,
                confined,
                "round24_write_tool_scratch.json",
                "write the CLI's scratch by another spelling",
                |_| Vec::new(),
            );
            let (stdout, who, env) = (&run.stdout, &run.who, &run.envelope);
            assert!(
                stdout.contains("LINKED") && stdout.contains("CHECKED"),
                "{who}: the Bash calls did not run: {stdout}"
            );
            let verdict = if confined { "ABSENT" } else { "PLANTED" };
            assert!(
                stdout.contains("ABSENT dangling-planted\\n"),
                "{who}: dangling: {stdout}"
            );
            for name in names {
                assert!(
                    stdout.contains(&format!("{verdict} {name}\\n")),
                    "{who}: {name}: {stdout}"
                );
            }
            if confined {
                assert_eq!(env["result"], "The honest answer.", "{who}: {env}");
            }
        }
    }
}

/// Siblings of round twenty-three's hard link to `~/.ssh/authorized_keys` in a `--write`
/// directory still open (each asserts that it lands; the list only shrinks): none. The
/// same link in the workspace, and a link to `~/.config/gh/hosts.yml` (the GitHub token,
/// under a name the secret scan does not mask) in a `--read` directory, were closed in
/// the same round by fix24 (the home's never-visible files with other names are found
/// and those names masked as secrets).
const KNOWN_OPEN_HARD_LINKS: &[&str] = &[];

/// A hard link the user made (`cp -al`, a backup's snapshot) to a never-visible file of
/// the home directory, inside the workspace (the agent appends its key to
/// `authorized_keys`) or a `--read` directory (the agent reads the GitHub token). Root and
/// uid 65534; control: the same with `--mode danger-full-access` lands.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hard_link_to_a_home_secret_in_the_workspace_or_a_read_grant_is_not_the_agents() {
    use sandbox_fixture::{Fixture, run_text};
    let cases = [
        ("workspace key", ".ssh/authorized_keys", "ws/notes", None),
        (
            "read token",
            ".config/gh/hosts.yml",
            "r/notes",
            Some("--read"),
        ),
    ];
    for (name, secret, link_rel, flag) in cases {
        for nobody in sandbox_fixture::arms() {
            for confined in [true, false] {
                let fx = Fixture::new("coder-round24-link-", nobody, &["ws", "r", "home", "state"]);
                let secret = fx.root().join("home").join(secret);
                sandbox_fixture::write(&secret, "USER-SECRET\n");
                let link = fx.root().join(link_rel);
                std::fs::hard_link(&secret, &link).unwrap();
                fx.own(fx.root());
                let r = fx.root().join("r");
                let mut args = Vec::new();
                if let Some(flag) = flag {
                    args.extend([flag, r.to_str().unwrap()]);
                }
                if !confined {
                    args.extend(["--mode", "danger-full-access"]);
                }
                let script = format!(
                    "cat '{0}'; echo AGENT-KEY >> '{0}'; echo DONE",
                    link.display()
                );
                let (_rc, out) =
                    run_text(&mut fx.sandbox_in(&fx.root().join("ws"), &args, &script));
                let landed = if flag.is_some() {
                    out.contains("USER-SECRET")
                } else {
                    std::fs::read_to_string(&secret)
                        .unwrap()
                        .contains("AGENT-KEY")
                };
                let who = format!("{name} nobody={nobody} confined={confined}");
                let open = KNOWN_OPEN_HARD_LINKS.contains(&name);
                assert_eq!(
                    landed,
                    !confined || open,
                    "{who} (known open: {open}): the attack landed: {landed}: {out}"
                );
            }
        }
    }
}

/// The never-visible entries were looked for in the home directory only: with
/// `XDG_CONFIG_HOME` elsewhere (`root/cfg`, as gh and git read it), `--read root/cfg` and
/// `--cd root/cfg` showed `gh/hosts.yml` (the GitHub token) and `git/credentials`, and
/// with `GH_CONFIG_DIR=root/tok` `--read root/tok` showed the token: `~/.config` is
/// refused for the same files. The places those variables (and `GNUPGHOME`,
/// `DOCKER_CONFIG`, `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`) name count too now,
/// where they exist. Both arms; control: the same directories without the variables are
/// served (they are no one's keys then).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_relocated_config_home_keeps_its_keys_never_visible() {
    use sandbox_fixture::{Fixture, run_text};
    for nobody in sandbox_fixture::arms() {
        let fx = Fixture::new("coder-round24-xdg-", nobody, &["ws", "home", "state"]);
        let cfg = fx.root().join("cfg");
        let tok = fx.root().join("tok");
        sandbox_fixture::write(&cfg.join("gh/hosts.yml"), "GH-TOKEN\n");
        sandbox_fixture::write(&cfg.join("git/credentials"), "GIT-TOKEN\n");
        sandbox_fixture::write(&tok.join("hosts.yml"), "GH-TOKEN\n");
        fx.own(fx.root());
        let ws = fx.ws();
        let show = "cat gh/hosts.yml hosts.yml 2>/dev/null; echo SERVED";
        let cases: [(&str, &Path, &Path, bool); 3] = [
            ("XDG_CONFIG_HOME", &cfg, &ws, true),
            ("XDG_CONFIG_HOME", &cfg, &cfg, false),
            ("GH_CONFIG_DIR", &tok, &ws, true),
        ];
        for (var, dir, cd, read) in cases {
            for set in [true, false] {
                let dir_s = dir.to_str().unwrap();
                let args: Vec<&str> = if read { vec!["--read", dir_s] } else { vec![] };
                let script = format!("cd '{dir_s}' && {show}");
                let mut cmd = fx.sandbox_in(cd, &args, &script);
                if set {
                    cmd.env(var, dir);
                } else {
                    cmd.env_remove(var);
                }
                let (rc, out) = run_text(&mut cmd);
                let who = format!(
                    "nobody={nobody} {var} set={set} read={read} --cd {}",
                    cd.display()
                );
                if set {
                    assert!(
                        rc != 0 && !out.contains("GH-TOKEN") && out.contains("never"),
                        "{who}: the token was served: {out}"
                    );
                } else {
                    assert!(rc == 0 && out.contains("GH-TOKEN"), "{who}: control: {out}");
                }
            }
        }
    }
}

/// A Python installed in the work tree as a prefix, not a virtualenv (a conda `--prefix
/// ./env`, pixi's `.pixi/envs/default`): its own `lib/python3.11/` (here links to the
/// system's stdlib, one per entry) and the user's `git fmt` =
/// `!.pixi/envs/default/bin/python3 tools/fmt.py`. The interpreter is held as the line's program, but round twenty-three's
/// guard holds only a virtualenv's (`pyvenv.cfg` beside `bin/`): the agent adds
/// `.pixi/envs/default/lib/python3/dist-packages/x.pth` (Debian's `site` reads a prefix's
/// `dist-packages`, others its `lib/pythonX.Y/site-packages`), which runs at every start of
/// that interpreter, and the user's `git fmt` ran it. A ratchet until round twenty-five,
/// which holds such a prefix whole when a held command is its interpreter.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_a_held_prefix_installed_python_runs_at_start_is_not_the_agents_to_add() {
    prefix_python_attack(
        "prefix python dist-packages",
        &format!(
            "for d in .pixi/envs/default/lib/python3/dist-packages .pixi/envs/default/lib/python*/site-packages; do \
             mkdir -p $d && {PTH_LINE} > $d/x.pth; done; echo PLANTED"
        ),
    );
}

/// The same prefix moved away whole (`.pixi` renamed) and one of the agent's made in its
/// place: a copy of the system's `python3` and the same stdlib links, with its `.pth`.
/// Held since round twenty-five (the names on the way to the held prefix are pinned).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_held_prefix_installed_python_renamed_away_is_not_replaced() {
    prefix_python_attack(
        "prefix python renamed away",
        &format!(
            "mv .pixi .pixi.old; mkdir -p .pixi/envs/default/bin; \
             cp -a .pixi.old/envs/default/lib .pixi/envs/default/; \
             cp /usr/bin/python3 .pixi/envs/default/bin/python3; \
             for d in .pixi/envs/default/lib/python3/dist-packages .pixi/envs/default/lib/python*/site-packages; do \
             mkdir -p $d && {PTH_LINE} > $d/x.pth; done; echo PLANTED"
        ),
    );
}

/// [`what_a_held_prefix_installed_python_runs_at_start_is_not_the_agents_to_add`]'s
/// prefix (`.pixi/envs/default`, its stdlib links to the system's) and `git fmt`, attacked
/// by `script`.
fn prefix_python_attack(name: &str, script: &str) {
    let version = python_version();
    let stdlib = Path::new("/usr/lib").join(&version);
    assert!(
        stdlib.join("os.py").exists(),
        "needs the system's stdlib at {}",
        stdlib.display()
    );
    let setup = move |fx: &Fx, ws: &Path| {
        let lib = ws.join(".pixi/envs/default/lib").join(&version);
        fx.own_file(ws, &format!(".pixi/envs/default/lib/{version}/.keep"), "");
        for entry in std::fs::read_dir(&stdlib).unwrap().flatten() {
            let name = entry.file_name();
            if name == "site-packages" || name == "dist-packages" {
                continue;
            }
            let link = lib.join(&name);
            std::os::unix::fs::symlink(entry.path(), &link).unwrap();
            fx.own_entry(&link);
        }
        let python = fx.own_file(ws, ".pixi/envs/default/bin/python3", "");
        std::fs::copy("/usr/bin/python3", &python).unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        fx.own_file(ws, "tools/fmt.py", "print(1)\n");
        fx.git(
            ws,
            &[
                "config",
                "alias.fmt",
                "!.pixi/envs/default/bin/python3 tools/fmt.py",
            ],
        );
    };
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, &["fmt"]);
}

/// A bind mount of one key *file* (not its directory) in the workspace or a `--read`
/// directory: `~/.ssh/authorized_keys` on `ws/keys`, `~/.config/gh/hosts.yml` on
/// `r/hosts`. Held: both refused as mounts of a never-visible entry. Both arms (the
/// mounts made by the test, as root); control: a mount of another file of the home
/// directory is served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_bind_mount_of_one_home_key_file_in_a_grant_is_refused() {
    use sandbox_fixture::{Fixture, run_text};
    for nobody in sandbox_fixture::arms() {
        let mut fx = Fixture::new(
            "coder-round24-mount-",
            nobody,
            &["ws", "r", "home", "state"],
        );
        let home = fx.root().join("home");
        let keys = home.join(".ssh/authorized_keys");
        let token = home.join(".config/gh/hosts.yml");
        let other = home.join("notes.txt");
        for (file, text) in [
            (&keys, "USER-KEY\n"),
            (&token, "GH-TOKEN\n"),
            (&other, "OTHER\n"),
        ] {
            sandbox_fixture::write(file, text);
        }
        for name in ["ws/keys", "r/hosts", "r/other"] {
            sandbox_fixture::write(&fx.root().join(name), "");
        }
        fx.own(fx.root());
        let (ws, r) = (fx.ws(), fx.root().join("r"));
        fx.mount(&["--bind"], &keys, &ws.join("keys"));
        fx.mount(&["--bind"], &token, &r.join("hosts"));
        let r_s = r.to_str().unwrap().to_string();
        let script = "cat keys; echo AGENT-KEY >> keys; echo SERVED";
        let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], script));
        let who = format!("nobody={nobody}");
        assert!(
            rc != 0 && !out.contains("SERVED") && out.contains("mount"),
            "{who}: a workspace holding a mount of authorized_keys: {out}"
        );
        let (rc, out) = run_text(&mut fx.sandbox_in(
            &fx.root().join("state"),
            &["--read", &r_s],
            &format!("cat '{r_s}/hosts'; echo SERVED"),
        ));
        assert!(
            rc != 0 && !out.contains("GH-TOKEN") && out.contains("mount"),
            "{who}: --read of a directory holding a mount of hosts.yml: {out}"
        );
        assert_eq!(std::fs::read_to_string(&keys).unwrap(), "USER-KEY\n");
        let mut fx2 = Fixture::new(
            "coder-round24-mount2-",
            nobody,
            &["ws", "r", "home", "state"],
        );
        let other2 = fx2.root().join("home/notes.txt");
        sandbox_fixture::write(&other2, "OTHER\n");
        sandbox_fixture::write(&fx2.root().join("r/other"), "");
        fx2.own(fx2.root());
        let r2 = fx2.root().join("r");
        fx2.mount(&["--bind"], &other2, &r2.join("other"));
        let r2_s = r2.to_str().unwrap().to_string();
        let (rc, out) = run_text(&mut fx2.sandbox_in(
            &fx2.ws(),
            &["--read", &r2_s],
            &format!("cat '{r2_s}/other'; echo SERVED"),
        ));
        assert!(
            rc == 0 && out.contains("OTHER"),
            "{who}: control: a mount of another home file: {out}"
        );
    }
}

/// A held file with a second name the user made (`ln tools/pre-commit
/// .git/hooks/pre-commit`, as some projects' setup scripts install hooks): the hook is
/// held read-only by its path, but the same file under `tools/pre-commit` is the agent's
/// to write, and the user's `git commit` would run the hook. A sibling of round
/// twenty-three's hard-linked home key. Held: `tools/pre-commit` is read-only in the
/// sandbox too (the scan holds the file's other name). Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_held_hook_hard_linked_from_the_work_tree_is_not_the_agents_to_write() {
    let setup = |fx: &Fx, ws: &Path| {
        sandbox_fixture::own_script(fx, ws, "tools/pre-commit");
        let hook = ws.join(".git/hooks/pre-commit");
        let _ = std::fs::remove_file(&hook);
        std::fs::hard_link(ws.join("tools/pre-commit"), &hook).unwrap();
    };
    sandbox_fixture::held_file_attack(
        &REPO,
        KNOWN_OPEN,
        "hard-linked hook",
        setup,
        &format!("{SCRIPT_PAYLOAD} >> tools/pre-commit; echo PLANTED"),
        &["commit", "-q", "--allow-empty", "-m", "user"],
    );
}
