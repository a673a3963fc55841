//! Round twenty-five's review: round twenty-four's sandbox changes (the relocated
//! never-visible places, the home directory's never-visible list, the hard-link masking
//! of home keys) attacked by one who has read the code, through the built binary, root
//! and uid 65534, each with a control showing the attack works without the sandbox (or
//! without what makes the file a key).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle, run_text};

/// Every git fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round25-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
const KNOWN_OPEN: &[&str] = &[];

/// A key a variable moves outside the home directory: the variable, its value relative to
/// the fixture's `vault/` (a `:` list for `KUBECONFIG`), and the file holding the key,
/// relative to `vault/` (not named as a secret is, which the scan would mask anyway).
struct Relocated {
    var: &'static str,
    value: &'static str,
    key: &'static str,
}

/// Variables that move a key elsewhere, as the tools that read them do, that round
/// twenty-four's `RELOCATED_SECRETS` did not list.
const RELOCATED: &[Relocated] = &[
    Relocated {
        var: "KUBECONFIG",
        value: "kube/prod.yaml",
        key: "kube/prod.yaml",
    },
    // kubectl reads each file of a `:` list.
    Relocated {
        var: "KUBECONFIG",
        value: "none.yaml:kube/prod.yaml",
        key: "kube/prod.yaml",
    },
    Relocated {
        var: "CARGO_HOME",
        value: "cargo",
        key: "cargo/credentials.toml",
    },
    // cargo still reads the old name when credentials.toml is absent.
    Relocated {
        var: "CARGO_HOME",
        value: "cargo",
        key: "cargo/credentials",
    },
    Relocated {
        var: "NPM_CONFIG_USERCONFIG",
        value: "npmrc",
        key: "npmrc",
    },
    Relocated {
        var: "npm_config_userconfig",
        value: "npmrc",
        key: "npmrc",
    },
    Relocated {
        var: "NETRC",
        value: "netrc",
        key: "netrc",
    },
    Relocated {
        var: "CLOUDSDK_CONFIG",
        value: "gcloud",
        key: "gcloud/credentials.db",
    },
    Relocated {
        var: "GOOGLE_APPLICATION_CREDENTIALS",
        value: "sa.json",
        key: "sa.json",
    },
    Relocated {
        var: "AZURE_CONFIG_DIR",
        value: "azure",
        key: "azure/msal_token_cache.json",
    },
    Relocated {
        var: "PGPASSFILE",
        value: "pgpass",
        key: "pgpass",
    },
];

/// A key moved out of the home directory by a variable round twenty-four did not list
/// (`KUBECONFIG`, also as a `:` list; `CARGO_HOME`'s `credentials.toml` and
/// `credentials`; `NPM_CONFIG_USERCONFIG`; `NETRC`; `CLOUDSDK_CONFIG`;
/// `GOOGLE_APPLICATION_CREDENTIALS`; `AZURE_CONFIG_DIR`; `PGPASSFILE`): `--read` of the
/// directory holding it was granted and the agent read the key, where `~/.kube/config`,
/// `~/.cargo/credentials.toml`, `~/.npmrc`, `~/.netrc` would have been refused.
/// Control: the same grant without the variable is served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_a_key_another_variable_relocates_is_refused() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for r in RELOCATED {
            for set in [true, false] {
                let fx = Fixture::new("coder-round25-reloc-", nobody, &["ws", "home", "state"]);
                let vault = fx.root().join("vault");
                sandbox_fixture::write(&vault.join(r.key), "KEY-SECRET\n");
                fx.own(fx.root());
                let script = format!("cat '{}/{}'; echo SERVED", vault.display(), r.key);
                let mut cmd =
                    fx.sandbox_in(&fx.ws(), &["--read", vault.to_str().unwrap()], &script);
                if set {
                    let value: Vec<String> = r
                        .value
                        .split(':')
                        .map(|v| vault.join(v).display().to_string())
                        .collect();
                    cmd.env(r.var, value.join(":"));
                }
                let (rc, out) = run_text(&mut cmd);
                let who = format!("nobody={nobody} {}={} set={set}", r.var, r.value);
                let served = rc == 0 && out.contains("KEY-SECRET");
                if set && out.contains("KEY-SECRET") {
                    broken.push(format!("{who}: the key was served (rc {rc}): {out}"));
                } else if !set && !served {
                    broken.push(format!("{who}: control: {out}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Home files SECURITY.md itself names as holding passwords and tokens, and others that
/// do, kept out of the default grants but missing from the never-visible list: a grant of
/// the directory holding them (`--read ~/.m2`, `--read ~/.gradle`, a directory that is
/// neither the home directory nor holds a listed key) showed them. Control: unconfined.
const HOME_KEYS: &[(&str, &str)] = &[
    (".m2", "settings.xml"),
    (".m2", "settings-security.xml"),
    (".gradle", "gradle.properties"),
    (".azure", "msal_token_cache.json"),
    (".terraform.d", "credentials.tfrc.json"),
    (".gem", "credentials"),
    (".local", "share/keyrings/login.keyring"),
];

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_of_a_home_directory_holding_unlisted_keys_is_refused() {
    let broken = sandbox_fixture::home_key_grants("coder-round25-homekey-", HOME_KEYS);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A tree outside `/tmp` (the home directory and coder's state must not be under a
/// shared `/tmp` that `--allow-tmp` grants), removed when dropped.
fn outside_tmp(prefix: &str, nobody: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in ["home/.aws", "state"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    sandbox_fixture::write(&root.join("home/.aws/credentials"), "AWS-SECRET\n");
    if nobody {
        sandbox_fixture::give_to_nobody(&root);
    }
    (dir, root)
}

/// A hard link the user keeps to `~/.aws/credentials` in `/tmp` (a backup, `cp -al`),
/// the home directory elsewhere on the same filesystem: with `--allow-tmp`, the agent
/// reads it (and could write through it). Round twenty-four masked a key's other names in
/// the scanned trees (workspace, `--read`, `--write`) only; `/tmp` is not one. Held since
/// fix25's walk of what the private root shows. Control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_home_keys_other_name_in_a_shared_tmp_is_not_read() {
    let name = "home key linked into /tmp";
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let (_keep, outside) = outside_tmp("coder-round25-tmplink-", nobody);
            let fx = Fixture::new("coder-round25-tmplink-", nobody, &["ws", "bak"]);
            let link = fx.root().join("bak/credentials");
            std::fs::hard_link(outside.join("home/.aws/credentials"), &link).unwrap();
            fx.own(fx.root());
            let script = format!("cat '{}'; echo SERVED", link.display());
            let mut args = vec!["--allow-tmp"];
            if !confined {
                args.extend(["--mode", "danger-full-access"]);
            }
            let mut cmd = fx.sandbox_in(&fx.ws(), &args, &script);
            cmd.env("HOME", outside.join("home"))
                .env("CODER_STATE_DIR", outside.join("state"));
            let (_rc, out) = run_text(&mut cmd);
            let who = format!("{name}: nobody={nobody} confined={confined}");
            assert!(out.contains("SERVED"), "{who}: not served: {out}");
            let read = out.contains("AWS-SECRET");
            if confined && KNOWN_OPEN.contains(&name) {
                assert!(read, "{who}: fixed? take it off KNOWN_OPEN: {out}");
            } else {
                assert_eq!(read, !confined, "{who}: {out}");
            }
        }
    }
}

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

use sandbox_fixture::{CHECK_SCRIPT, CHECKS_LIST, append_to};

/// [`sandbox_fixture::checks_attack`] on this file's repository and ratchet.
fn checks_attack(name: &str, files: &[(&str, &str)], alias: &str, attack: &str) {
    sandbox_fixture::checks_attack(&REPO, KNOWN_OPEN, name, files, alias, attack);
}

/// The user's `tools/checks.list` names `tools/checks/a.sh`, and the user's held
/// `tools/ci.sh` (run by `git fmt` = `!INTERP tools/ci.sh`) runs what the list names by
/// `line`, a spelling other than the `xargs` ones round twenty-four holds: the agent
/// appends to `tools/checks/a.sh`.
fn list_run_by(name: &str, interp: &str, line: &str) {
    checks_attack(
        name,
        &[CHECKS_LIST, ("tools/ci.sh", &format!("{line}\n"))],
        &format!("!{interp} tools/ci.sh"),
        &append_to(CHECK_SCRIPT),
    );
}

/// `for f in $(cat tools/checks.list); do sh "$f"; done`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_for_loop_over_a_list_runs_are_not_the_agents_to_write() {
    list_run_by(
        "for over $(cat list)",
        "sh",
        "for f in $(cat tools/checks.list); do sh \"$f\"; done",
    );
}

/// `mapfile -t L < tools/checks.list` (bash), then each run.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_mapfile_list_names_are_not_the_agents_to_write() {
    list_run_by(
        "mapfile list",
        "bash",
        "mapfile -t L < tools/checks.list; for f in \"${L[@]}\"; do sh \"$f\"; done",
    );
}

/// `while read -r f; do sh "$f"; done < tools/checks.list` in a held script (round
/// twenty-four holds it on an alias's line).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_read_loop_in_a_held_script_runs_are_not_the_agents_to_write() {
    list_run_by(
        "while read in a held script",
        "sh",
        "while read -r f; do sh \"$f\"; done < tools/checks.list",
    );
}

/// `sed 's/^/sh /' tools/checks.list | sh`: the list made into a script.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_sed_made_script_runs_are_not_the_agents_to_write() {
    list_run_by(
        "sed list | sh",
        "sh",
        "sed 's/^/sh /' tools/checks.list | sh",
    );
}

/// `awk '{ system("sh " $0) }' tools/checks.list`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_awk_loop_over_a_list_runs_are_not_the_agents_to_write() {
    list_run_by(
        "awk system over list",
        "sh",
        "awk '{ system(\"sh \" $0) }' tools/checks.list",
    );
}

/// `xargs -I{} sh {} < tools/checks.list` on the alias's line (held since round
/// twenty-four: a regression test).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_xargs_replace_string_runs_are_not_the_agents_to_write() {
    checks_attack(
        "xargs -I{} < list",
        &[CHECKS_LIST],
        "!xargs -I{} sh {} < tools/checks.list",
        &append_to(CHECK_SCRIPT),
    );
}

/// The user's `git fmt` = `!sh < tools/ci.sh`: the script read on a shell's standard
/// input, not named as its argument.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_a_shell_reads_on_standard_input_is_not_the_agents_to_write() {
    held_file_attack(
        "sh < script",
        |fx, ws| {
            sandbox_fixture::own_script(fx, ws, "tools/ci.sh");
            fx.git(ws, &["config", "alias.fmt", "!sh < tools/ci.sh"]);
        },
        &append_to("tools/ci.sh"),
        &["fmt"],
    );
}

/// The user's `git fmt` = `!bash -c "$(cat tools/ci.sh)"`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_a_shell_runs_as_its_command_string_is_not_the_agents_to_write() {
    held_file_attack(
        "bash -c $(cat script)",
        |fx, ws| {
            sandbox_fixture::own_script(fx, ws, "tools/ci.sh");
            fx.git(
                ws,
                &["config", "alias.fmt", "!bash -c \"$(cat tools/ci.sh)\""],
            );
        },
        &append_to("tools/ci.sh"),
        &["fmt"],
    );
}

/// A chain of held scripts run by path, six deep (`tools/s1.sh` runs `sh tools/s2.sh`,
/// …): the last is past the walk's depth; the agent appends to it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_last_script_of_a_long_chain_is_not_the_agents_to_write() {
    held_file_attack(
        "chain of six scripts",
        |fx, ws| {
            for i in 1..6 {
                fx.own_file(
                    ws,
                    &format!("tools/s{i}.sh"),
                    &format!("sh tools/s{}.sh\n", i + 1),
                );
            }
            sandbox_fixture::own_script(fx, ws, "tools/s6.sh");
            fx.git(ws, &["config", "alias.fmt", "!sh tools/s1.sh"]);
        },
        &append_to("tools/s6.sh"),
        &["fmt"],
    );
}

/// `AWS_SHARED_CREDENTIALS_FILE=~/vault/aws-creds`, the `~` left for the AWS tools to
/// expand (botocore does; a quoted shell assignment, a systemd unit, a `.env` file leave
/// it so): round twenty-four counts a relocated key only when its variable is absolute,
/// so `--read ~/vault` (a directory of the home directory that holds no listed key) was
/// granted and the agent read the keys. Control: the same grant without the variable.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_a_relocated_key_spelled_from_home_is_refused() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for set in [true, false] {
            let fx = Fixture::new("coder-round25-tilde-", nobody, &["ws", "home", "state"]);
            let vault = fx.root().join("home/vault");
            sandbox_fixture::write(&vault.join("aws-creds"), "AWS-SECRET\n");
            fx.own(fx.root());
            let script = format!("cat '{}/aws-creds'; echo SERVED", vault.display());
            let mut cmd = fx.sandbox_in(&fx.ws(), &["--read", vault.to_str().unwrap()], &script);
            if set {
                cmd.env("AWS_SHARED_CREDENTIALS_FILE", "~/vault/aws-creds");
            }
            let (rc, out) = run_text(&mut cmd);
            let who = format!("nobody={nobody} set={set}");
            let served = rc == 0 && out.contains("AWS-SECRET");
            if set && out.contains("AWS-SECRET") {
                broken.push(format!("{who}: the key was served (rc {rc}): {out}"));
            } else if !set && !served {
                broken.push(format!("{who}: control: {out}"));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// `list_alias`: the user's `tools/checks.list` names `tools/checks/a.sh`, run by the
/// alias line `git fmt` = `alias`; the agent appends to `tools/checks/a.sh`.
fn list_run_by_alias(name: &str, alias: &str) {
    let list = ("tools/checks.list", "# checks\ntools/checks/a.sh\n");
    checks_attack(name, &[list], alias, &append_to(CHECK_SCRIPT));
}

/// `git fmt` = `!grep -v '^#' tools/checks.list | xargs -n1 sh`: the list filtered
/// before `xargs` (round twenty-four read `cat`'s and `<`'s lists only).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_filtered_list_fed_to_xargs_names_are_not_the_agents_to_write() {
    list_run_by_alias(
        "grep list | xargs",
        "!grep -v '^#' tools/checks.list | xargs -n1 sh",
    );
}

/// `git fmt` = `!for f in $(grep -v '^#' tools/checks.list); do sh $f; done`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_alias_for_loop_over_a_list_runs_are_not_the_agents_to_write() {
    list_run_by_alias(
        "alias for over $(grep list)",
        "!for f in $(grep -v '^#' tools/checks.list); do sh $f; done",
    );
}

/// A held script: `grep -v '^#' tools/checks.list | while read -r f; do sh "$f"; done`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_grep_fed_loop_in_a_held_script_runs_are_not_the_agents_to_write() {
    list_run_by(
        "grep list | while read in a script",
        "sh",
        "grep -v '^#' tools/checks.list | while read -r f; do sh \"$f\"; done",
    );
}

/// The state directory spelled with `..` and with `!` and `\` (characters gitignore's
/// matcher treats specially, negation and escape): the scratch rules name the canonical
/// run directory, each such character made `?`, so they still deny the CLI's Write tool
/// its scratch through a link (held). Real CLI, both arms, control unconfined.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_scratch_rules_hold_for_a_state_directory_spelled_with_dots_and_escapes() {
    sandbox_fixture::write_tool_scratch_attack(Some(std::ffi::OsStr::new("sub/../!st\\a**te")));
}

/// A home key's *directory* kept elsewhere and linked into place (`~/.aws/sso` a symlink
/// to `~/dotfiles/aws-sso/`, its `cache/token.json` the SSO token): `--read ~/dotfiles`
/// shows the token (the refusal compares the never-visible entries resolved, `~/.aws`),
/// and a hard link to it in the workspace is read (the hard-link walk follows a symlink
/// to a file, not to a directory). The file form was round twenty-four's second review's
/// ratchet; a fix counting file symlinks' targets only would have left this one. Both are
/// held since fix25's merge: the grant is refused, and without it the workspace's link is
/// masked. Control: the same with `~/.aws/sso` a directory of its own (the grant then
/// holds no key).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_home_keys_directory_a_symlink_leads_to_is_not_read() {
    let name = "read a stowed key directory";
    for nobody in sandbox_fixture::arms() {
        for stowed in [true, false] {
            let fx = Fixture::new(
                "coder-round25-stowdir-",
                nobody,
                &["ws", "home/.aws", "state"],
            );
            let home = fx.root().join("home");
            let token = home.join("dotfiles/aws-sso/cache/token.json");
            sandbox_fixture::write(&token, "SSO-SECRET\n");
            if stowed {
                std::os::unix::fs::symlink("../dotfiles/aws-sso", home.join(".aws/sso")).unwrap();
                std::fs::hard_link(&token, fx.ws().join("notes")).unwrap();
            } else {
                sandbox_fixture::write(&home.join(".aws/sso/cache/token.json"), "OTHER\n");
                sandbox_fixture::write(&fx.ws().join("notes"), "none\n");
            }
            fx.own(fx.root());
            let dotfiles = home.join("dotfiles");
            let script = format!(
                "cat notes '{}/aws-sso/cache/token.json'; echo SERVED",
                dotfiles.display()
            );
            let (rc, out) = fx.sandbox(&["--read", dotfiles.to_str().unwrap()], &script);
            let who = format!("{name}: nobody={nobody} stowed={stowed}");
            let read = out.matches("SSO-SECRET").count();
            if !stowed {
                assert!(rc == 0 && read == 1, "{who}: control: {out}");
                continue;
            }
            assert_eq!(read, 0, "{who}: the token was read: {out}");
            assert!(out.contains("never granted"), "{who}: not refused: {out}");
            // Without the grant the run goes on: the token's hard link in the workspace.
            let (rc, out) = fx.sandbox(&[], "cat notes; echo SERVED");
            assert!(
                rc == 0 && out.contains("SERVED"),
                "{who}: not served: {out}"
            );
            assert!(
                !out.contains("SSO-SECRET"),
                "{who}: the link in the workspace was read: {out}"
            );
        }
    }
}

/// The agent's line that makes `file` (JS) write the marker when loaded.
fn js_payload(file: &str) -> String {
    format!(
        "printf \"import('fs').then(f => f.writeFileSync('%s', ''))\\n\" \"$M\" >> {file}; echo PLANTED"
    )
}

/// The agent's line that makes `file` (Python) write the marker when run or imported.
fn py_payload(file: &str) -> String {
    format!("printf \"open('%s', 'w')\\n\" \"$M\" >> {file}; echo PLANTED")
}

/// The user's files (path, text) and `git fmt` = `alias`; the agent's `attack`.
fn entry_point_attack(name: &str, files: &[(&str, &str)], alias: &str, attack: &str) {
    held_file_attack(
        name,
        |fx, ws| {
            for (rel, text) in files {
                fx.own_file(ws, rel, text);
            }
            fx.git(ws, &["config", "alias.fmt", alias]);
        },
        attack,
        &["fmt"],
    );
}

/// `git fmt` = `!node --import ./tools/hook.mjs tools/fmt.js`: node loads the module
/// `--import` names before the script.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_module_node_imports_first_is_not_the_agents_to_write() {
    entry_point_attack(
        "node --import",
        &[("tools/hook.mjs", "\n"), ("tools/fmt.js", "\n")],
        "!node --import ./tools/hook.mjs tools/fmt.js",
        &js_payload("tools/hook.mjs"),
    );
}

/// `git fmt` = `!node -r ./tools/hook.js tools/fmt.js`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_module_node_requires_first_is_not_the_agents_to_write() {
    entry_point_attack(
        "node -r",
        &[("tools/hook.js", "\n"), ("tools/fmt.js", "\n")],
        "!node -r ./tools/hook.js tools/fmt.js",
        &js_payload("tools/hook.js"),
    );
}

/// `git fmt` = `!NODE_OPTIONS=--require=./tools/hook.js node tools/fmt.js`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_module_node_options_requires_is_not_the_agents_to_write() {
    entry_point_attack(
        "NODE_OPTIONS --require",
        &[("tools/hook.js", "\n"), ("tools/fmt.js", "\n")],
        "!NODE_OPTIONS=--require=./tools/hook.js node tools/fmt.js",
        &js_payload("tools/hook.js"),
    );
}

/// `git fmt` = `!node tools/fmt.mjs`: the ES module itself.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_es_module_node_runs_is_not_the_agents_to_write() {
    entry_point_attack(
        "node x.mjs",
        &[("tools/fmt.mjs", "\n")],
        "!node tools/fmt.mjs",
        &js_payload("tools/fmt.mjs"),
    );
}

/// `git fmt` = `!/usr/bin/python3 -m tools.fmt`: the module `-m` names, `tools/fmt.py`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_module_python_m_runs_is_not_the_agents_to_write() {
    entry_point_attack(
        "python -m module",
        &[("tools/fmt.py", "\n")],
        "!/usr/bin/python3 -m tools.fmt",
        &py_payload("tools/fmt.py"),
    );
}

/// `git fmt` = `!/usr/bin/python3 -m tools.fmt` without `tools/__init__.py`: python
/// imports the package's `__init__.py` first when there is one; the agent adds it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_package_init_python_m_imports_is_not_the_agents_to_add() {
    entry_point_attack(
        "python -m package __init__",
        &[("tools/fmt.py", "\n")],
        "!/usr/bin/python3 -m tools.fmt",
        &py_payload("tools/__init__.py"),
    );
}

/// The spellings by which a held script (`tools/ci.sh`, run by `git fmt` = `!sh
/// tools/ci.sh`) runs the user's `tools/x.sh` through another program: each named
/// attack appends to `tools/x.sh`.
const RUN_BY_PATH: &[(&str, &str)] = &[
    ("exec sh", "exec sh tools/x.sh"),
    ("command sh", "command sh tools/x.sh"),
    ("env sh", "env sh tools/x.sh"),
    ("env VAR=1 sh", "env FOO=1 sh tools/x.sh"),
    ("bash -c", "bash -c 'sh tools/x.sh'"),
    ("nohup sh", "nohup sh tools/x.sh"),
    ("timeout sh", "timeout 30 sh tools/x.sh"),
    ("nice sh", "nice -n 5 sh tools/x.sh"),
    ("if then sh", "if true; then sh tools/x.sh; fi"),
    ("function body", "f() { sh tools/x.sh; }\nf"),
    ("subshell", "( sh tools/x.sh )"),
    ("cd then ./", "cd tools && ./x.sh"),
];

/// A held script running the user's `tools/x.sh` by each of [`RUN_BY_PATH`]'s spellings:
/// the agent appends to it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_held_script_runs_through_another_program_are_not_the_agents_to_write() {
    for (name, line) in RUN_BY_PATH {
        held_file_attack(
            name,
            |fx, ws| {
                sandbox_fixture::own_script(fx, ws, "tools/x.sh");
                fx.own_file(ws, "tools/ci.sh", &format!("{line}\n"));
                fx.git(ws, &["config", "alias.fmt", "!sh tools/ci.sh"]);
            },
            &append_to("tools/x.sh"),
            &["fmt"],
        );
    }
}
