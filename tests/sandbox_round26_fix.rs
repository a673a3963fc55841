//! Round twenty-six's fixes of what round twenty-five left open (SECURITY.md, Known
//! limits). Each attack runs through the built binary (`coder sandbox`) as root and as
//! uid 65534, each with its control: the same under `--mode danger-full-access` (or
//! without what makes the file a key), where the attack works.
//!
//! * **A held script's chain of any length**: followed script by script, past the four
//!   levels of round twenty-five; more files than the scan holds refuse the run.
//! * **A relocated key named by a relative value** (`AWS_SHARED_CREDENTIALS_FILE=
//!   vault/aws-creds`): read against coder's working directory and the home directory.
//! * **A list naming directories whose scripts a held script runs**: the agent adds a
//!   script of its own there (the directory is held whole).
//! * **Keys the never-visible list did not know** (pip's, rclone's, poetry's, helm's, …,
//!   in the home directory or where `PIP_CONFIG_FILE`, `RCLONE_CONFIG`, `XDG_CONFIG_HOME`
//!   move them), and **the invoking user's home under `sudo`** (`SUDO_USER`).
//! * **A wrapper's option whose value is no number** (`env -u X sh tools/x.sh`, `timeout
//!   -s KILL 5 sh …`): the wrapped command is read.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::Bounded;
use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle, run_text};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round26-fix-",
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

/// The agent appends its payload to `target`.
fn append_to(target: &str) -> String {
    format!(
        "{} >> {target}; echo PLANTED",
        sandbox_fixture::SCRIPT_PAYLOAD
    )
}

/// The user's `git fmt` = `!sh tools/s1.sh`, and `tools/s1.sh` … `tools/s{n-1}.sh` each
/// running the next by path (alternating `sh tools/sN.sh` and `. tools/sN.sh`), the last
/// a script of the user's.
fn chain(fx: &Fx, ws: &Path, n: usize) {
    for i in 1..n {
        let how = if i % 2 == 0 { "." } else { "sh" };
        let next = format!("{how} tools/s{}.sh\n", i + 1);
        fx.own_file(ws, &format!("tools/s{i}.sh"), &next);
    }
    sandbox_fixture::own_script(fx, ws, &format!("tools/s{n}.sh"));
    fx.git(ws, &["config", "alias.fmt", "!sh tools/s1.sh"]);
}

/// A chain of forty held scripts: the agent appends to the last. Round twenty-five
/// followed four levels and stopped without a word.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_last_script_of_a_chain_of_forty_is_not_the_agents_to_write() {
    held_file_attack(
        "chain of forty scripts",
        |fx, ws| chain(fx, ws, 40),
        &append_to("tools/s40.sh"),
        &["fmt"],
    );
}

/// A chain of more scripts than the scan holds (1,100 against its 1,024 files): the run
/// is refused with a `config_error` (exit 78) naming the cause, and the agent's command
/// never runs; unconfined, it runs.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_chain_longer_than_the_scan_holds_refuses_the_run() {
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            chain(&fx, &ws, 1100);
            let cmd = fx.sandbox_in(&ws, &["--mode", mode], &append_to("tools/s1100.sh"));
            let (rc, out) = run_text(&mut { cmd });
            let who = format!("nobody={nobody} {mode}");
            if mode == "danger-full-access" {
                assert!(rc == 0 && out.contains("PLANTED"), "{who}: control: {out}");
                continue;
            }
            assert_eq!(rc, 78, "{who}: {out}");
            assert!(!out.contains("PLANTED"), "{who}: the agent ran: {out}");
            assert!(
                out.contains("the scripts your git config's commands run name more than 1024"),
                "{who}: {out}"
            );
        }
    }
}

/// The same chain in the run mode (`coder --cd WS --claude-bin FAKE TASK`): a
/// `config_error` envelope naming the cause, and the agent (a fake CLI that plants a
/// marker) never starts; unconfined, it runs.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_chain_longer_than_the_scan_holds_is_a_config_error_of_the_run() {
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            chain(&fx, &ws, 1100);
            let bin = fx.root().join("fake-claude");
            std::fs::write(&bin, sandbox_fixture::payload_claude("touch AGENT-RAN")).unwrap();
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
            let owner = nobody.then_some(65534);
            let extra: &[&str] = if confined {
                &[]
            } else {
                &["--sandbox", "danger-full-access"]
            };
            let out = sandbox_fixture::coder_as(fx.root(), owner, &ws, &bin, extra, "go")
                .output_bounded();
            let env: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"));
            let who = format!("nobody={nobody} confined={confined}");
            let ran = ws.join("AGENT-RAN").exists();
            if !confined {
                assert!(ran, "{who}: control: {env}");
                continue;
            }
            assert!(!ran, "{who}: the agent ran: {env}");
            assert_eq!(env["error_kind"], "config_error", "{who}: {env}");
            assert!(
                env.to_string().contains("name more than 1024 files"),
                "{who}: {env}"
            );
        }
    }
}

/// `AWS_SHARED_CREDENTIALS_FILE` relative (a `.env` file's, read by botocore against the
/// working directory of the process): `vault/aws-creds` from the home directory, and
/// `home/vault/aws-creds` from coder's own working directory; round twenty-five counted
/// absolute and `~`-spelled values only, so `--read ~/vault` was granted and the agent
/// read the key. Control: the same grant without the variable is served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_a_relocated_key_named_by_a_relative_value_is_refused() {
    let mut broken = Vec::new();
    for (value, from_root) in [("vault/aws-creds", false), ("home/vault/aws-creds", true)] {
        for nobody in sandbox_fixture::arms() {
            for set in [true, false] {
                let fx = Fixture::new("coder-round26-relkey-", nobody, &["ws", "home", "state"]);
                let vault = fx.root().join("home/vault");
                sandbox_fixture::write(&vault.join("aws-creds"), "AWS-SECRET\n");
                fx.own(fx.root());
                let script = format!("cat '{}/aws-creds'; echo SERVED", vault.display());
                let grant = ["--read", vault.to_str().unwrap()];
                let mut cmd = fx.sandbox_in(&fx.ws(), &grant, &script);
                cmd.current_dir(if from_root { fx.root() } else { Path::new("/") });
                if set {
                    cmd.env("AWS_SHARED_CREDENTIALS_FILE", value);
                }
                let (rc, out) = run_text(&mut cmd);
                let who = format!("{value}: nobody={nobody} set={set}");
                sandbox_fixture::judge_key(&mut broken, &who, set, (rc, &out), "AWS-SECRET");
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The user's `tools/checks.list` names the directory `tools/checks`, and the user's held
/// `tools/ci.sh` (run by `git fmt` = `!sh tools/ci.sh`) runs every `*.sh` there: the
/// agent adds `tools/checks/b.sh` of its own (holding the user's `a.sh` is not enough).
/// Control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_added_to_a_directory_a_list_names_is_not_run() {
    held_file_attack(
        "new script in a listed directory",
        |fx, ws| {
            sandbox_fixture::own_script(fx, ws, "tools/checks/a.sh");
            fx.own_file(ws, "tools/checks.list", "tools/checks\n");
            let ci = "for d in $(cat tools/checks.list); do\n  for f in \"$d\"/*.sh; do sh \"$f\"; done\ndone\n";
            fx.own_file(ws, "tools/ci.sh", ci);
            fx.git(ws, &["config", "alias.fmt", "!sh tools/ci.sh"]);
        },
        &format!(
            "{} > tools/checks/b.sh; echo PLANTED",
            sandbox_fixture::SCRIPT_PAYLOAD
        ),
        &["fmt"],
    );
}

/// Spellings of a wrapped command whose wrapper's option value is no number, each
/// running `tools/x.sh`: round twenty-five read the value as the program and stopped.
const WRAPPED: &[(&str, &str)] = &[
    ("env -u", "env -u NOPE sh tools/x.sh"),
    ("env -C", "env -C . sh tools/x.sh"),
    ("timeout -s", "timeout -s KILL 30 sh tools/x.sh"),
    ("timeout -k", "timeout -k 1m 30 sh tools/x.sh"),
    ("ionice -c idle", "ionice -c idle sh tools/x.sh"),
    ("nice -n then env -u", "nice -n 5 env -u NOPE sh tools/x.sh"),
    ("stdbuf -o L", "stdbuf -o L sh tools/x.sh"),
];

/// A held script running the user's `tools/x.sh` by each of [`WRAPPED`]'s spellings: the
/// agent appends to it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_wrapper_with_an_option_value_runs_are_not_the_agents_to_write() {
    for (name, line) in WRAPPED {
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

/// Home keys the never-visible list did not hold until round twenty-six: the directory
/// granted, the key in it. Control: unconfined.
const HOME_KEYS: &[(&str, &str)] = &[
    (".config/rclone", "rclone.conf"),
    (".config/pip", "pip.conf"),
    (".pip", "pip.conf"),
    (".config/pypoetry", "auth.toml"),
    (".config/helm", "registry/config.json"),
    (".config/containers", "auth.json"),
    (".bundle", "config"),
    (".kaggle", "kaggle.json"),
    (".oci", "config"),
    (".ivy2", ".credentials"),
    (".claude", ".credentials.json"),
];

/// `--read ~/DIR` of a home directory holding one of [`HOME_KEYS`]: refused (or the key
/// not shown). Control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_of_a_home_directory_holding_other_tools_keys_is_refused() {
    let broken = sandbox_fixture::home_key_grants("coder-round26-homekey-", HOME_KEYS);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Variables that move one of those keys (the variable, its value relative to the
/// fixture's `vault/`, the key relative to `vault/`).
const RELOCATED: &[(&str, &str, &str)] = &[
    ("PIP_CONFIG_FILE", "pip.conf", "pip.conf"),
    ("RCLONE_CONFIG", "rclone.conf", "rclone.conf"),
    ("XDG_CONFIG_HOME", "", "rclone/rclone.conf"),
    ("XDG_CONFIG_HOME", "", "pip/pip.conf"),
    ("POETRY_CONFIG_DIR", "", "auth.toml"),
];

/// `--read vault` where a variable of [`RELOCATED`] puts the key: refused. Control: the
/// same grant without the variable is served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_another_tools_relocated_key_is_refused() {
    let broken = sandbox_fixture::relocated_key_grants(
        "coder-round26-reloc-",
        "vault",
        RELOCATED,
        "KEY-SECRET",
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// coder started through `sudo` by a user whose home is neither `$HOME` (root's, as
/// `sudo` sets it) nor the process's user entry's: `SUDO_USER` names them, and `--read`
/// of their `~/.ssh` was granted. Refused now. Control: without `SUDO_USER`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_sudo_users_keys_are_not_granted() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for set in [true, false] {
            let fx = Fixture::new("coder-round26-sudo-", nobody, &["ws", "home", "state"]);
            let alice = fx.root().join("alice");
            let ssh = alice.join(".ssh");
            sandbox_fixture::write(&ssh.join("authorized_keys"), "KEY-SECRET\n");
            fx.own(fx.root());
            let user = sandbox_fixture::TestUser::new("c26s", &alice);
            let script = format!("cat '{}/authorized_keys'; echo SERVED", ssh.display());
            let mut cmd = fx.sandbox_in(&fx.ws(), &["--read", ssh.to_str().unwrap()], &script);
            if set {
                cmd.env("SUDO_USER", &user.0);
            }
            let (rc, out) = run_text(&mut cmd);
            let who = format!("nobody={nobody} set={set}");
            sandbox_fixture::judge_key(&mut broken, &who, set, (rc, &out), "KEY-SECRET");
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
