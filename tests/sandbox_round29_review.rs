//! Round twenty-nine's review: round twenty-eight's held-scripts class (any word of a
//! held script naming a script of the tree), its keys (Claude Code's global config and
//! device keys, Gemini CLI's, `pkexec`'s caller, key variables over the TLS trust stores)
//! and perf28's speed levers, attacked by one who has read the code, through the built
//! binary, root and uid 65534, each with a control (`--mode danger-full-access`, or
//! without what makes the attack) showing the attack works without the sandbox.
//!
//! * **The git config a held command sets**: `git -c core.hooksPath=DIR`, `git config
//!   core.hooksPath DIR`, `GIT_CONFIG_KEY_n`, `git config include.path FILE` on an
//!   alias's line or in a held script: a hooks directory or an included config is no
//!   "script" by its look, and was the agent's to fill.
//! * **What a held script names, as bash reads it**: an absolute word, `~+/`, `$"…"`;
//!   and what a hook runs (a git dir's hooks and a `core.hooksPath`'s were never read).
//! * **The class's idea** (open, a ratchet): a file held by its look, and ssh run with
//!   `-F` on the user's config.
//! * **Logins**: Claude Code's backups of its global config (`primaryApiKey`), Codex's
//!   and Gemini CLI's token stores; a grant that is, or lies in, a mount of the home or of
//!   a key; the home keys through symlinks (perf28's levers, held); a key variable at
//!   `/dev/null` (held); an absent key a variable names in the workspace.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round29-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits). `ssh -F config` was
/// here until round thirty's review (`ssh -F FILE` read as a sourced file).
const KNOWN_OPEN: &[&str] = &[];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// The agent's hook: `ci/gh/pre-commit`, a `#!` line and executable, that creates the
/// marker `$M`.
const PLANT_HOOK: &str = "mkdir -p ci/gh && printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" \
                          > ci/gh/pre-commit; chmod +x ci/gh/pre-commit; echo PLANTED";

/// The agent's config: `ci/team.gitconfig` with a `core.fsmonitor` that creates the
/// marker `$M` at the next `git status`.
const PLANT_CONFIG: &str = "mkdir -p ci && printf '[core]\\n\\tfsmonitor = \"touch %s; \
                            false\"\\n' \"$M\" > ci/team.gitconfig; echo PLANTED";

/// One attack through git's own settings: (name, `git ci`'s alias, the held script
/// `tools/ci.sh` it may run, what the user has at the start, the agent's plant).
type Setting = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
);

/// A command the user's config runs sets git's config for the git it runs, or for good:
/// a hooks directory (`core.hooksPath`) or an included config (`include.path`) it names
/// holds no file that "looks like a script" (round twenty-eight's class): a directory,
/// and a config with no suffix, no `#!`, not executable. git runs the hooks of the one
/// and the `core.fsmonitor` of the other. `HOOK` is the user's `ci/gh/pre-commit`,
/// `CONFIG` the user's `ci/team.gitconfig`.
const SETTINGS: &[Setting] = &[
    (
        "alias: git -c core.hooksPath, the hooks there",
        "!git -c core.hooksPath=ci/gh commit -q --allow-empty -m x",
        "",
        &["HOOK"],
        PLANT_HOOK,
    ),
    (
        "script: git -c core.hooksPath, the hooks there",
        "!sh tools/ci.sh",
        "git -c core.hooksPath=ci/gh commit -q --allow-empty -m x",
        &["HOOK"],
        PLANT_HOOK,
    ),
    (
        "script: git -c core.hooksPath, no hooks yet",
        "!sh tools/ci.sh",
        "git -c core.hooksPath=ci/gh commit -q --allow-empty -m x",
        &[],
        PLANT_HOOK,
    ),
    (
        "script: git config core.hooksPath",
        "!sh tools/ci.sh",
        "git config core.hooksPath ci/gh\ngit commit -q --allow-empty -m x",
        &[],
        PLANT_HOOK,
    ),
    (
        "script: GIT_CONFIG_KEY_0",
        "!sh tools/ci.sh",
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=ci/gh \
         git commit -q --allow-empty -m x",
        &["HOOK"],
        PLANT_HOOK,
    ),
    (
        "script: git config include.path, the config there",
        "!sh tools/ci.sh",
        "git config include.path ../ci/team.gitconfig\ngit status >/dev/null",
        &["CONFIG"],
        PLANT_CONFIG,
    ),
    (
        "script: git config include.path, no config yet",
        "!sh tools/ci.sh",
        "git config include.path ../ci/team.gitconfig\ngit status >/dev/null",
        &[],
        PLANT_CONFIG,
    ),
    (
        "script: git -c include.path=$PWD/…",
        "!sh tools/ci.sh",
        "git -c include.path=\"$PWD/ci/team.gitconfig\" status >/dev/null",
        &["CONFIG"],
        PLANT_CONFIG,
    ),
    (
        "script: GIT_CONFIG_GLOBAL",
        "!sh tools/ci.sh",
        "GIT_CONFIG_GLOBAL=ci/team.gitconfig git status >/dev/null",
        &["CONFIG"],
        PLANT_CONFIG,
    ),
    (
        "alias: git -c include.path=$PWD/…",
        "!git -c include.path=\"$PWD/ci/team.gitconfig\" status >/dev/null",
        "",
        &["CONFIG"],
        PLANT_CONFIG,
    ),
];

/// Each of [`SETTINGS`]: the agent plants its hook or config, the user's `git ci` runs
/// it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_git_config_a_held_command_sets_is_not_the_agents_to_fill() {
    for (name, alias, script, files, plant) in SETTINGS {
        held_file_attack(
            name,
            |fx, ws| {
                for file in *files {
                    match *file {
                        "HOOK" => sandbox_fixture::own_script(fx, ws, "ci/gh/pre-commit"),
                        _ => drop(fx.own_file(ws, "ci/team.gitconfig", "[user]\n\tx = 1\n")),
                    }
                }
                if !script.is_empty() {
                    fx.own_file(ws, "tools/ci.sh", &format!("{script}\n"));
                }
                fx.git(ws, &["config", "alias.ci", alias]);
            },
            plant,
            &["ci"],
        );
    }
}

/// Spellings of a held script's word that round twenty-eight's class ("any word naming a
/// script of the tree") did not read (its reading, not its idea): the script named by its
/// absolute path (dropped with the system's `/usr/bin/time`), bash's tilde-plus (`~+`,
/// the working directory) and its `$"…"` (a translated string). Each: (name, the held
/// script `tools/ci.sh` run by `git fmt` = `!bash tools/ci.sh`, `@WS@` the workspace's
/// path). The agent appends its payload to the user's `tools/x.sh`.
const WORD_SPELLINGS: &[(&str, &str)] = &[
    (
        "an absolute word behind strace",
        "strace -f -o /dev/null sh @WS@/tools/x.sh",
    ),
    ("tilde-plus", "sh ~+/tools/x.sh"),
    ("a translated string", "sh $\"tools/x.sh\""),
];

/// Each of [`WORD_SPELLINGS`]: the user's `git fmt` runs the agent's edit of
/// `tools/x.sh`. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_files_a_held_script_names_by_bash_words_are_not_the_agents_to_write() {
    for (name, script) in WORD_SPELLINGS {
        held_file_attack(
            name,
            |fx, ws| {
                sandbox_fixture::own_script(fx, ws, "tools/x.sh");
                let script = script.replace("@WS@", ws.to_str().unwrap());
                fx.own_file(ws, "tools/ci.sh", &format!("{script}\n"));
                fx.git(ws, &["config", "alias.fmt", "!bash tools/ci.sh"]);
            },
            &sandbox_fixture::append_payload("tools/x.sh"),
            &["fmt"],
        );
    }
}

/// The user's `pre-commit` hook runs a script of the work tree: the hook was held, what
/// it runs was not read at all (an alias's script is, and a hook that is a symlink into
/// the tree). Each: (name, where the hook is: the git dir's `hooks/`, a `core.hooksPath`
/// of the repository's config, or of the user's `~/.gitconfig` outside every tree; the
/// hook's line, `@WS@` the workspace's path). Absolute paths are what hook managers write.
const HOOKS: &[(&str, &str, &str)] = &[
    ("a hook runs a script", "hooks", "sh tools/x.sh"),
    ("a hook execs a script", "hooks", "exec ./tools/x.sh \"$@\""),
    (
        "a hook's absolute word",
        "hooks",
        "strace -f -o /dev/null sh @WS@/tools/x.sh",
    ),
    (
        "a hooksPath hook runs a script",
        "hooksPath",
        "sh tools/x.sh",
    ),
    (
        "a global hooksPath hook execs a script",
        "global",
        "exec ./tools/x.sh",
    ),
];

/// Each of [`HOOKS`]: the agent appends its payload to the user's `tools/x.sh`, the user's
/// `git commit` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_hook_runs_are_not_the_agents_to_write() {
    for (name, place, line) in HOOKS {
        held_file_attack(
            name,
            |fx, ws| {
                sandbox_fixture::own_script(fx, ws, "tools/x.sh");
                let line = line.replace("@WS@", ws.to_str().unwrap());
                let dir = match *place {
                    "hooks" => ws.join(".git/hooks"),
                    "hooksPath" => {
                        fx.git(ws, &["config", "core.hooksPath", "ci/hooks"]);
                        ws.join("ci/hooks")
                    }
                    _ => {
                        let dir = fx.root().join("home/githooks");
                        let global = format!("[core]\n\thooksPath = {}\n", dir.display());
                        sandbox_fixture::write(&fx.root().join("home/.gitconfig"), &global);
                        dir
                    }
                };
                let hook = dir.join("pre-commit");
                sandbox_fixture::write(&hook, &format!("#!/bin/sh\n{line}\n"));
                let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
                std::fs::set_permissions(&hook, executable).unwrap();
                fx.own(&dir);
            },
            &sandbox_fixture::append_payload("tools/x.sh"),
            &["commit", "-q", "--allow-empty", "-m", "x"],
        );
    }
}

/// Claude Code's backups of its global config (`~/.claude.json`, whose `primaryApiKey`
/// round twenty-eight made never visible): the CLI copies it to
/// `~/.claude/backups/.claude.json.backup.<ms>` (and `.corrupted.<ms>`), five kept, and
/// older CLIs to `~/.claude.json.backup`. Each: (the directory granted, the file),
/// relative to the home directory.
const CLAUDE_BACKUPS: &[(&str, &str)] = &[
    (".claude/backups", ".claude.json.backup.1764400000000"),
    (".claude/backups", ".claude.json.corrupted.1764400000000"),
    ("", ".claude.json.backup"),
];

/// Each of [`CLAUDE_BACKUPS`]: `--read` of its directory (of the file, for the home's
/// own) and a hard link to it in the workspace. Both arms; control unconfined, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn claude_codes_config_backups_are_never_visible() {
    let broken = keys_never_visible(CLAUDE_BACKUPS);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// `--read` of `dir` (of the file, where `dir` is empty) of a home holding each of `keys`
/// (`(dir, file)`), and a hard link to the file in the workspace: what went wrong, one
/// line each. Both arms; control unconfined, served.
fn keys_never_visible(keys: &[(&str, &str)]) -> Vec<String> {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for (dir, file) in keys {
            for confined in [true, false] {
                let fx = Fixture::new("coder-round29-key-", nobody, &["ws", "home", "state"]);
                let key = fx.root().join("home").join(dir).join(file);
                sandbox_fixture::write(&key, "{\"primaryApiKey\": \"KEY-SECRET\"}\n");
                std::fs::hard_link(&key, fx.ws().join("notes")).unwrap();
                fx.own(fx.root());
                let granted = match *dir {
                    "" => key.clone(),
                    _ => key.parent().unwrap().to_path_buf(),
                };
                let granted = granted.display().to_string();
                let key = key.display().to_string();
                let reads = [
                    (vec!["--read", granted.as_str()], key.clone()),
                    (Vec::new(), "notes".to_string()),
                ];
                for (mut args, path) in reads {
                    if !confined {
                        args.extend(["--mode", "danger-full-access"]);
                    }
                    let (rc, out) = fx.sandbox(&args, &format!("cat '{path}'; echo SERVED"));
                    let who =
                        format!("nobody={nobody} ~/{dir}/{file} as {path} confined={confined}");
                    sandbox_fixture::judge_key(
                        &mut broken,
                        &who,
                        confined,
                        (rc, &out),
                        "KEY-SECRET",
                    );
                }
            }
        }
    }
    broken
}

/// The other agents' token files beside the logins round twenty-seven hid: Codex's MCP
/// servers' OAuth tokens where there is no keyring (`~/.codex/.credentials.json`), and
/// Gemini CLI's encrypted token store (`~/.gemini/mcp-oauth-tokens-v2.json`, its key
/// derived from the host and user names, which its newer versions also keep the login
/// in). Each: (the directory granted, the file).
const AGENT_TOKENS: &[(&str, &str)] = &[
    (".codex", ".credentials.json"),
    (".gemini", "mcp-oauth-tokens-v2.json"),
];

/// Each of [`AGENT_TOKENS`], as [`claude_codes_config_backups_are_never_visible`]. Both
/// arms; control unconfined, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_other_agents_token_stores_are_never_visible() {
    let broken = keys_never_visible(AGENT_TOKENS);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// `--read vault` where `CLAUDE_CONFIG_DIR=vault` holds the CLI's backups of its global
/// config (`vault/backups/.claude.json.backup.<ms>`, and the older CLIs'
/// `vault/.claude.json.backup`). Both arms; control without the variable, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn claude_config_backups_a_variable_moves_are_not_granted() {
    let keys = [
        (
            "CLAUDE_CONFIG_DIR",
            "",
            "backups/.claude.json.backup.1764400000000",
        ),
        ("CLAUDE_CONFIG_DIR", "", ".claude.json.backup"),
    ];
    let broken = sandbox_fixture::relocated_key_grants(
        "coder-round29-cfgdir-",
        "home/claude-work",
        &keys,
        "{\"primaryApiKey\": \"KEY-SECRET\"}",
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Another path to the home directory or to one of its keys, made by a bind mount (a
/// second mount of the home, an automounter's, a container's): `mnt` shows `~/.ssh`, `h`
/// the home directory. Each: (what is granted, relative to the fixture's root, as
/// `--read` or as the workspace; the file read there). Only a mount strictly beneath a
/// grant was looked at.
const MOUNTED_KEYS: &[(&str, &str, &str)] = &[
    ("--read", "mnt", "id_x"),
    ("--read", "h", ".ssh/id_x"),
    ("--read", "h/.ssh", "id_x"),
    ("--read", "h/.config", "gh/hosts.yml"),
    ("--cd", "mnt", "id_x"),
    ("--cd", "h/.config", "gh/hosts.yml"),
];

/// Each of [`MOUNTED_KEYS`]: the key must not show (the grant refused). Both arms;
/// control unconfined (`--read`), or the user's own `cat` through the mount (`--cd`),
/// served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_that_is_or_lies_in_a_mount_of_the_home_is_refused() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for (how, granted, file) in MOUNTED_KEYS {
            for confined in [true, false] {
                let mut fx = Fixture::new("coder-round29-mnt-", nobody, &["ws", "home", "state"]);
                let home = fx.root().join("home");
                sandbox_fixture::write(&home.join(".ssh/id_x"), "KEY-SECRET\n");
                sandbox_fixture::write(&home.join(".config/gh/hosts.yml"), "KEY-SECRET\n");
                for (dir, shown) in [("mnt", home.join(".ssh")), ("h", home.clone())] {
                    let at = fx.root().join(dir);
                    std::fs::create_dir(&at).unwrap();
                    fx.mount(&["--bind"], &shown, &at);
                }
                fx.own(fx.root());
                let granted = fx.root().join(granted);
                let path = granted.join(file).display().to_string();
                let mut args = match *how {
                    "--read" => vec!["--read", granted.to_str().unwrap()],
                    _ => Vec::new(),
                };
                if !confined {
                    args.extend(["--mode", "danger-full-access"]);
                }
                let ws = match *how {
                    "--cd" => granted.clone(),
                    _ => fx.ws(),
                };
                let script = format!("cat '{path}'; echo SERVED");
                // A workspace of keys is refused in every mode (`--cd ~/.ssh` is): its
                // control is the user's own `cat` through the mount.
                let mut cmd = match (*how, confined) {
                    ("--cd", false) => {
                        let mut cat = fx.command("sh");
                        cat.args(["-c", &script]);
                        cat
                    }
                    _ => fx.sandbox_in(&ws, &args, &script),
                };
                let (rc, out) = sandbox_fixture::run_text(&mut cmd);
                let who = format!(
                    "nobody={nobody} {how} {} confined={confined}",
                    granted.display()
                );
                sandbox_fixture::judge_key(&mut broken, &who, confined, (rc, &out), "KEY-SECRET");
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The home's keys reached through symlinks, as perf28's levers resolve them (name by
/// name from the canonical home, `home::resolve_beneath`, a symlink falling back to the
/// whole-path resolution; the symlinks under a key looked for only in the keys that are
/// there). Each: (name, the home's layout as `(path, target)` pairs relative to the
/// fixture's root, a target of `KEY` a file holding the key and any other a symlink's
/// target, then the `--read` grant and the file read, relative to the root).
type LinkedKey = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);

/// Found held: the home itself a symlink (`HOME=root/home -> realhome`), a key directory a
/// relative symlink with `..` out of the home, a file under a key a symlink out of it, a
/// key a symlink through a symlinked directory.
const LINKED_KEYS: &[LinkedKey] = &[
    (
        "a symlinked home",
        &[("realhome/.ssh/id_x", "KEY"), ("home", "realhome")],
        "realhome/.ssh",
        "realhome/.ssh/id_x",
    ),
    (
        "a key dir a relative symlink out of the home",
        &[
            ("dotfiles/cfg/gh/hosts.yml", "KEY"),
            ("home/.config", "../dotfiles/cfg"),
        ],
        "dotfiles/cfg",
        "dotfiles/cfg/gh/hosts.yml",
    ),
    (
        "a file under a key a symlink out of it",
        &[
            ("elsewhere/files/id_x", "KEY"),
            ("home/.ssh/id_linked", "../../elsewhere/files/id_x"),
        ],
        "elsewhere/files",
        "elsewhere/files/id_x",
    ),
    (
        "a key through a symlinked directory",
        &[
            ("vault/real/aws/credentials", "KEY"),
            ("vault/link", "real"),
            ("home/.aws", "../vault/link/aws"),
        ],
        "vault",
        "vault/real/aws/credentials",
    ),
];

/// Each of [`LINKED_KEYS`]: the key must not show. Both arms; control unconfined, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_home_keys_reached_through_symlinks_stay_hidden() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for (name, layout, granted, file) in LINKED_KEYS {
            for confined in [true, false] {
                let fx = Fixture::new("coder-round29-link-", nobody, &["ws", "state"]);
                for (path, target) in *layout {
                    let path = fx.root().join(path);
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    match *target {
                        "KEY" => sandbox_fixture::write(&path, "KEY-SECRET\n"),
                        target => std::os::unix::fs::symlink(target, &path).unwrap(),
                    }
                }
                std::fs::create_dir_all(fx.root().join("home")).unwrap();
                fx.own(fx.root());
                let granted = fx.root().join(granted);
                let mut args = vec!["--read", granted.to_str().unwrap()];
                if !confined {
                    args.extend(["--mode", "danger-full-access"]);
                }
                let script = format!("cat '{}'; echo SERVED", fx.root().join(file).display());
                let (rc, out) = fx.sandbox(&args, &script);
                let who = format!("nobody={nobody} {name} confined={confined}");
                sandbox_fixture::judge_key(&mut broken, &who, confined, (rc, &out), "KEY-SECRET");
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A key variable set to `/dev/null` (pip's documented way to read no config,
/// `PIP_CONFIG_FILE=/dev/null`; `KUBECONFIG=/dev/null` alike) masks nothing the agent
/// needs: `/dev/null` stays the null device inside. Both arms (found held).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_key_variable_naming_dev_null_leaves_the_null_device() {
    for nobody in sandbox_fixture::arms() {
        for var in [
            "PIP_CONFIG_FILE",
            "KUBECONFIG",
            "AWS_SHARED_CREDENTIALS_FILE",
        ] {
            let fx = Fixture::new("coder-round29-null-", nobody, &["ws", "home", "state"])
                .with_var(var, "/dev/null");
            fx.own(fx.root());
            let script = "test -c /dev/null && echo x > /dev/null && echo NULL-OK";
            let (rc, out) = fx.sandbox(&[], script);
            assert!(
                rc == 0 && out.contains("NULL-OK"),
                "nobody={nobody} {var}: {out}"
            );
        }
    }
}

/// The class's idea, not its reading: a held script (`tools/sync.sh`, run by `git sync`)
/// hands the user's `ci/ssh_config` to ssh (`GIT_SSH_COMMAND='ssh -F ci/ssh_config'`),
/// which runs its `ProxyCommand`; no suffix, no `#!`, not executable, so no script by its
/// look. The agent writes a `ProxyCommand` there, the user's `git sync` ran it (a ratchet
/// until round thirty: `ssh -F FILE` is read as a sourced file now). Both arms; control
/// unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_config_a_held_script_hands_to_ssh_is_not_the_agents_to_write() {
    let sync = "GIT_SSH_COMMAND='ssh -F ci/ssh_config' git ls-remote \
                ssh://git@example.invalid/x.git >/dev/null 2>&1; true";
    held_file_attack(
        "ssh -F config",
        |fx, ws| {
            fx.own_file(ws, "ci/ssh_config", "Host *\n  User git\n");
            fx.own_file(ws, "tools/sync.sh", &format!("{sync}\n"));
            fx.git(ws, &["config", "alias.sync", "!sh tools/sync.sh"]);
        },
        "printf 'Host *\\n  ProxyCommand sh -c \"touch %s\"\\n' \"$M\" > ci/ssh_config; \
         echo PLANTED",
        &["sync"],
    );
}

/// The agent's kubeconfig at `kubeconfig` in its working directory: a user whose exec
/// credential plugin creates the marker `$M` (kubectl runs it before it connects).
const PLANT_KUBECONFIG: &str = r#"cat > kubeconfig <<YAML
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:9"}
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: sh
      args: ["-c", "touch $M; echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"x\"}}'"]
      interactiveMode: Never
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
YAML
echo PLANTED"#;

/// A key variable naming a file of the workspace that is not there yet
/// (`KUBECONFIG=$PWD/kubeconfig` from a project's `.envrc`, before the cluster is made):
/// the relocated keys count where they exist only (round twenty-four's choice: an absent
/// one would refuse the project for a name), and the agent made the file; the user's
/// next `kubectl` (the same variable) ran its exec credential plugin. Now held absent.
/// Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_absent_key_a_variable_names_in_the_workspace_is_not_the_agents_to_make() {
    let kubectl = Path::new("/usr/bin/kubectl");
    assert!(kubectl.exists(), "this attack needs kubectl");
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fixture::new("coder-round29-kube-", nobody, &["ws", "home", "state"]);
            let marker = fx.root().join("home/PWNED");
            let kubeconfig = fx.ws().join("kubeconfig");
            let fx = fx.with_var("KUBECONFIG", kubeconfig).with_var("M", &marker);
            fx.own(fx.root());
            let (rc, out) = fx.sandbox(&["--mode", mode], PLANT_KUBECONFIG);
            assert!(
                rc == 0 && out.contains("PLANTED"),
                "nobody={nobody} {mode}: {out}"
            );
            let _ = std::fs::remove_file(&marker);
            let user = sandbox_fixture::printed(
                &fx.command(kubectl)
                    .args(["get", "pods", "--request-timeout=2s"])
                    .output()
                    .unwrap(),
            );
            let unconfined = mode == "danger-full-access";
            assert_eq!(
                marker.exists(),
                unconfined,
                "nobody={nobody} {mode}: the user's kubectl ran the agent's plugin: {}\n{out}\n{user}",
                marker.exists()
            );
        }
    }
}

/// A held makefile's optional include of a makefile that is not there yet (`-include
/// tools/local.mk`, `sinclude`, the usual way to let a developer override settings): the
/// agent makes it, the user's `make` (`git ci` = `!make -s -f tools/ci.mk`, or a held
/// script's `strace -o LOG make …`) runs its `$(shell …)`. Each: (name, the alias, the
/// held script `tools/ci.sh` if any, the include line). Both arms; control unconfined.
const MAKE_INCLUDES: &[(&str, &str, &str, &str)] = &[
    (
        "make -include",
        "!make -s -f tools/ci.mk",
        "",
        "-include tools/local.mk",
    ),
    (
        "make sinclude",
        "!make -s -f tools/ci.mk",
        "",
        "sinclude tools/local.mk",
    ),
    (
        "make -include through a held script",
        "!sh tools/ci.sh",
        "strace -f -o /dev/null make -s -f tools/ci.mk",
        "-include tools/local.mk",
    ),
];

/// Each of [`MAKE_INCLUDES`]. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_makefile_a_held_makefile_includes_is_not_the_agents_to_make() {
    for (name, alias, script, include) in MAKE_INCLUDES {
        held_file_attack(
            name,
            |fx, ws| {
                fx.own_file(ws, "tools/ci.mk", &format!("{include}\nall:\n\t@true\n"));
                if !script.is_empty() {
                    fx.own_file(ws, "tools/ci.sh", &format!("{script}\n"));
                }
                fx.git(ws, &["config", "alias.ci", alias]);
            },
            &sandbox_fixture::append_payload("tools/local.mk"),
            &["ci"],
        );
    }
}

/// The workspace is a directory of the user's repository (`--cd sub`): the repository's
/// `pre-commit` (or alias) runs `sh sub/tools/x.sh`, read against the repository's top,
/// where git runs it. The sandbox's placeholder `.git` in `sub` was taken for a
/// repository of its own, so the enclosing one's commands were read against `sub`
/// (`sub/sub/tools/x.sh`), and its hooks not at all. Each: (name, how the user's
/// repository runs it, the user's git). Both arms; control unconfined.
const ENCLOSING: &[(&str, &str, &[&str])] = &[
    (
        "an enclosing repository's hook",
        "HOOK",
        &["commit", "-q", "--allow-empty", "-m", "x"],
    ),
    (
        "an enclosing repository's alias",
        "!sh sub/tools/x.sh",
        &["fmt"],
    ),
];

/// Each of [`ENCLOSING`]: the agent, in `sub`, appends its payload to `tools/x.sh`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_enclosing_repository_runs_are_not_the_agents_to_write() {
    for (name, how, user) in ENCLOSING {
        let setup = |fx: &Fx, ws: &Path| {
            sandbox_fixture::own_script(fx, ws, "sub/tools/x.sh");
            match *how {
                "HOOK" => {
                    let hook = ws.join(".git/hooks/pre-commit");
                    sandbox_fixture::write(&hook, "#!/bin/sh\nsh sub/tools/x.sh\n");
                    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
                    std::fs::set_permissions(&hook, executable).unwrap();
                }
                alias => drop(fx.git(ws, &["config", "alias.fmt", alias])),
            }
            sandbox_fixture::Launch {
                cd: "sub".into(),
                args: Vec::new(),
            }
        };
        sandbox_fixture::held_attack(
            name,
            KNOWN_OPEN.contains(name),
            &|nobody| Fx::new(&REPO, nobody),
            &setup,
            &sandbox_fixture::append_payload("tools/x.sh"),
            user,
        );
    }
}
