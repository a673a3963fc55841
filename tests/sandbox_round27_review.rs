//! Round twenty-seven's review: round twenty-six's second review's fixes (held scripts run
//! by other spellings, wrappers with operands, relocating variables over system
//! directories), the node preloads, and the lead's refactors of the scan, the policy and
//! the key-link walk, attacked by one who has read the code, through the built binary,
//! root and uid 65534, each with a control (`--mode danger-full-access`, or without what
//! makes the attack) showing the attack works without the sandbox.
//!
//! * **A held script's files by other spellings**: what an interpreter completes
//!   (`python3 -m`, node's suffixes), `--require=`, `--env-file`, `BASH_ENV`, perl's
//!   `-I`/`-M`, `make -f`, `awk -f`, a process substitution, wrappers (`time -o`,
//!   `prlimit`, `script -c`, `flock -c`), a directory entered by `cd`; the alias's own
//!   line too; a listed directory run by `run-parts` or `find -exec`.
//! * **An absent file one script sources and another runs**: the walk's keying.
//! * **Logins**: Claude Code's where a variable moves it, the other coding agents' and the
//!   deploy CLIs'; the `doas` user's keys (held).
//! * **Refactor guards**: every other name of two home keys masked (held).
//! * **The held scripts' cap pushed by the agent** (open, a ratchet).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD, run_text};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round27-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits). The held scripts' cap
/// reached by a script the agent makes where the user's names an absent one was closed
/// in round twenty-nine (the made script is moved aside at the run's end).
const KNOWN_OPEN: &[&str] = &["cd into a listed directory", "suffix swapped by the shell"];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// Lines of a held script (`tools/ci.sh`, run by `git fmt` = `!bash tools/ci.sh`) that
/// run a file of the user's by a spelling the held scripts' reader
/// (`config_text::script_run_words`) did not follow before this review: an interpreter
/// that completes the name it is given (`python3 -m`, node's suffixes), an option whose
/// value is a file it runs (`--require=`, `BASH_ENV`, perl's `-I`/`-M`), a program file
/// (`make -f`, `awk -f`), a process substitution, and wrappers the reader did not know;
/// and two that were held already (a script fed on standard input). Each: (name, line,
/// the user's files, the file the agent appends its payload to).
const SPELLINGS: &[(&str, &str, &[&str], &str)] = &[
    (
        "python -m in a script",
        "python3 -m tools.strip",
        &["tools/strip.py"],
        "tools/strip.py",
    ),
    (
        "node without its suffix",
        "node tools/fmt",
        &["tools/fmt.js"],
        "tools/fmt.js",
    ),
    (
        "node preload without its suffix",
        "node -r ./tools/hook tools/fmt.js",
        &["tools/hook.js", "tools/fmt.js"],
        "tools/hook.js",
    ),
    (
        "node --require=",
        "node --require=./tools/hook.js tools/fmt.js",
        &["tools/hook.js", "tools/fmt.js"],
        "tools/hook.js",
    ),
    (
        "BASH_ENV",
        "BASH_ENV=tools/env.sh bash tools/x.sh",
        &["tools/env.sh", "tools/x.sh"],
        "tools/env.sh",
    ),
    (
        "perl -M from -I",
        "perl -Itools -MHook tools/x.pl",
        &["tools/Hook.pm", "tools/x.pl"],
        "tools/Hook.pm",
    ),
    (
        "perl -I spaced",
        "perl -I tools tools/x.pl",
        &["tools/x.pl"],
        "tools/x.pl",
    ),
    (
        "sh reading stdin",
        "sh < tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "cat into sh",
        "cat tools/x.sh | sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "time -o",
        "/usr/bin/time -o /dev/null sh tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "prlimit",
        "prlimit --nofile=1024 sh tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "make -f",
        "make -s -f tools/ci.mk",
        &["tools/ci.mk"],
        "tools/ci.mk",
    ),
    (
        "awk -f",
        "awk -f tools/x.awk /dev/null",
        &["tools/x.awk"],
        "tools/x.awk",
    ),
    (
        "process substitution",
        "bash <(cat tools/x.sh)",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "source stdin",
        ". /dev/stdin < tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "flock -c",
        "flock tools -c 'sh tools/x.sh'",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "script -qec",
        "script -qec 'sh tools/x.sh' /dev/null",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
];

/// A file of the user's for [`SPELLINGS`]: a script (`#!/bin/sh`, mode 0755), or for
/// perl one whose `#!` names perl (perl hands a file whose `#!` does not to that program).
fn user_file(fx: &Fx, ws: &Path, rel: &str) {
    if rel.ends_with(".mk") {
        fx.own_file(ws, rel, "all:\n\t@true\n");
    } else if rel.ends_with(".pl") || rel.ends_with(".pm") {
        fx.own_file(ws, rel, "#!/usr/bin/perl\n");
    } else {
        sandbox_fixture::own_script(fx, ws, rel);
    }
}

/// A held script running the user's file by each of [`SPELLINGS`]: the agent appends its
/// payload to the file, the user's `git fmt` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_files_a_held_script_runs_by_other_spellings_are_not_the_agents_to_write() {
    for (name, line, files, target) in SPELLINGS {
        held_file_attack(
            name,
            |fx, ws| {
                for file in *files {
                    user_file(fx, ws, file);
                }
                fx.own_file(ws, "tools/ci.sh", &format!("{line}\n"));
                fx.git(ws, &["config", "alias.fmt", "!bash tools/ci.sh"]);
            },
            &sandbox_fixture::append_payload(target),
            &["fmt"],
        );
    }
}

/// Claude Code's login moved by the variables the CLI reads it through: `CLAUDE_CONFIG_DIR`
/// (its `.credentials.json`), `CLAUDE_SECURESTORAGE_CONFIG_DIR` (the same) and
/// `CLAUDE_CODE_HOST_CREDS_FILE` (the file itself). Each: (variable, its value in the
/// vault, the key's name in the vault).
const CLAUDE_LOGINS: &[(&str, &str, &str)] = &[
    ("CLAUDE_CONFIG_DIR", "", ".credentials.json"),
    ("CLAUDE_SECURESTORAGE_CONFIG_DIR", "", ".credentials.json"),
    ("CLAUDE_CODE_HOST_CREDS_FILE", "creds.json", "creds.json"),
];

/// `--read vault` where one of [`CLAUDE_LOGINS`]'s variables puts the user's Claude login
/// (a second Claude Code profile, `CLAUDE_CONFIG_DIR=~/.claude-work`): the home's
/// `~/.claude/.credentials.json` has been never visible since round twenty-six, the
/// relocated one was served. Control: the same grant without the variable is served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_claude_login_a_variable_moves_is_not_granted() {
    let broken = sandbox_fixture::relocated_key_grants(
        "coder-round27-login-",
        "home/claude-work",
        CLAUDE_LOGINS,
        "LOGIN-SECRET",
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The agent's `NODE_OPTIONS` in the user's env file `tools/ci.env`, preloading a module
/// of its own that makes the marker.
const ENV_FILE_ATTACK: &str = r#"printf 'require("fs").writeFileSync("%s", "")\n' "$M" > tools/mine.js; printf 'NODE_OPTIONS=--require ./tools/mine.js\n' > tools/ci.env; echo PLANTED"#;

/// A held script's `node --env-file tools/ci.env tools/fmt.js`: node obeys the
/// `NODE_OPTIONS` of the file, and the agent rewrote it to preload its own module. Both
/// arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_env_file_a_held_script_gives_node_is_not_the_agents_to_write() {
    for (name, line) in [
        (
            "env file apart",
            "node --env-file tools/ci.env tools/fmt.js",
        ),
        (
            "env file with =",
            "node --env-file=tools/ci.env tools/fmt.js",
        ),
    ] {
        held_file_attack(
            name,
            |fx, ws| {
                sandbox_fixture::own_script(fx, ws, "tools/fmt.js");
                fx.own_file(ws, "tools/ci.env", "CI=1\n");
                fx.own_file(ws, "tools/ci.sh", &format!("{line}\n"));
                fx.git(ws, &["config", "alias.fmt", "!bash tools/ci.sh"]);
            },
            ENV_FILE_ATTACK,
            &["fmt"],
        );
    }
}

/// [`SPELLINGS`] as the line of the alias itself (`git fmt` = `!LINE`), read by the
/// config's own reader (`config_text::command_words`), not the held scripts'.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_files_an_alias_runs_by_other_spellings_are_not_the_agents_to_write() {
    // git runs an alias with `sh`, which has no process substitution.
    let spellings = SPELLINGS
        .iter()
        .filter(|(name, ..)| *name != "process substitution");
    for (name, line, files, target) in spellings {
        let name = format!("alias: {name}");
        held_file_attack(
            &name,
            |fx, ws| {
                for file in *files {
                    user_file(fx, ws, file);
                }
                fx.git(ws, &["config", "alias.fmt", &format!("!{line}")]);
            },
            &sandbox_fixture::append_payload(target),
            &["fmt"],
        );
    }
    held_file_attack(
        "alias: env file",
        |fx, ws| {
            sandbox_fixture::own_script(fx, ws, "tools/fmt.js");
            fx.own_file(ws, "tools/ci.env", "CI=1\n");
            let line = "!node --env-file tools/ci.env tools/fmt.js";
            fx.git(ws, &["config", "alias.fmt", line]);
        },
        ENV_FILE_ATTACK,
        &["fmt"],
    );
}

/// The agent's plant for [`the_scripts_cap_is_the_agents_to_push`]: the script the
/// user's held `tools/ci.sh` names but that is absent at the start (`tools/gen.sh`, a
/// build's output), made to run 1,100 scripts of the agent's.
const CAP_PLANT: &str = r#"mkdir -p tools/g && i=0 && while [ $i -lt 1100 ]; do i=$((i+1)); : > tools/g/$i.sh; echo "sh tools/g/$i.sh"; done > tools/gen.sh && echo PLANTED"#;

/// The 1,024 files' cap of the held scripts (round twenty-six refuses a run past it, the
/// rest would be the agent's to write) is the agent's to reach: a script the user's held
/// script runs by path but that is absent at the start is not held (SECURITY.md, Known
/// limits: a placeholder would keep a build from making it), and the agent makes it name
/// 1,100 scripts. Every later run in the workspace was refused (`config_error`) until the
/// user removed them. Closed in round twenty-nine: the script the run made is moved aside
/// at its end, and the later run starts (off [`KNOWN_OPEN`]). Control: the same later run
/// without the plant starts. Both arms.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_cap_is_the_agents_to_push() {
    let name = "cap pushed by the agent";
    for nobody in sandbox_fixture::arms() {
        for planted in [true, false] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            fx.own_file(&ws, "tools/ci.sh", "sh tools/gen.sh\n");
            fx.git(&ws, &["config", "alias.fmt", "!sh tools/ci.sh"]);
            let plant = if planted { CAP_PLANT } else { "echo PLANTED" };
            let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], plant));
            let who = format!("{name}: nobody={nobody} planted={planted}");
            assert!(
                rc == 0 && out.contains("PLANTED"),
                "{who}: first run: {out}"
            );
            let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], "echo LATER-RAN"));
            let refused = rc == 78 && out.contains("name more than 1024");
            if planted && KNOWN_OPEN.contains(&name) {
                assert!(
                    refused,
                    "{who}: closed? take it off KNOWN_OPEN: rc {rc}: {out}"
                );
                assert!(!out.contains("LATER-RAN"), "{who}: {out}");
            } else {
                assert!(
                    rc == 0 && out.contains("LATER-RAN"),
                    "{who}: rc {rc}: {out}"
                );
            }
        }
    }
}

/// Two home keys (`~/.aws/credentials`, `~/.ssh/id_ed25519`), each with several other
/// names: in the workspace (the scan's to mask) and in a system directory the private
/// root shows (`/opt`, the helper's look), one of them two levels down. The lead's
/// refactors of round twenty-six (924c844, 47102d1: the link counts replaced by a set of
/// keys; 6578b2f: the places resolved once a run) must mask every name, none left
/// readable once a count would have said all were found. Held (a guard against a
/// regression). Control: unconfined, every name is read.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn every_other_name_of_two_home_keys_is_masked() {
    use std::os::unix::fs::PermissionsExt;
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round27-links-", nobody, &["ws", "home", "state"]);
            let aws = fx.root().join("home/.aws/credentials");
            let ssh = fx.root().join("home/.ssh/id_ed25519");
            sandbox_fixture::write(&aws, "AWS-SECRET\n");
            sandbox_fixture::write(&ssh, "SSH-SECRET\n");
            let opt = tempfile::Builder::new()
                .prefix("coder-round27-")
                .tempdir_in("/opt")
                .unwrap();
            let ws = fx.ws();
            let names = [
                (&aws, ws.join("notes")),
                (&aws, opt.path().join("a/credentials")),
                (&aws, opt.path().join("b/c/creds2")),
                (&ssh, opt.path().join("k/id")),
                (&ssh, ws.join("sub/id2")),
            ];
            for (key, name) in &names {
                std::fs::create_dir_all(name.parent().unwrap()).unwrap();
                std::fs::hard_link(key, name).unwrap();
            }
            for dir in ["a", "b", "b/c", "k"] {
                let dir = opt.path().join(dir);
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            std::fs::set_permissions(opt.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            fx.own(fx.root());
            let script: String = names
                .iter()
                .map(|(_, name)| format!("cat '{}'; ", name.display()))
                .chain(["echo SERVED".to_string()])
                .collect();
            let args: &[&str] = if confined {
                &[]
            } else {
                &["--mode", "danger-full-access"]
            };
            let (rc, out) = run_text(&mut fx.sandbox_in(&ws, args, &script));
            let who = format!("nobody={nobody} confined={confined}");
            assert!(out.contains("SERVED"), "{who}: rc {rc}: {out}");
            let read = |s: &str| out.matches(s).count();
            if confined {
                assert_eq!(
                    (read("AWS-SECRET"), read("SSH-SECRET")),
                    (0, 0),
                    "{who}: {out}"
                );
            } else {
                assert_eq!(
                    (read("AWS-SECRET"), read("SSH-SECRET")),
                    (3, 2),
                    "{who}: {out}"
                );
            }
        }
    }
}

/// coder started through `doas` (round twenty-six counted `DOAS_USER`'s home with
/// `SUDO_USER`'s, tested under `sudo` only): `--read` of the invoking user's `~/.ssh`
/// and of their `~/.config` (holding `gh/hosts.yml`) is refused, and a hard link to their key in
/// the workspace is masked. Held. Control: without `DOAS_USER`, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_doas_users_keys_are_not_granted() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for set in [true, false] {
            let fx = Fixture::new("coder-round27-doas-", nobody, &["ws", "home", "state"]);
            let alice = fx.root().join("alice");
            let key = alice.join(".ssh/authorized_keys");
            sandbox_fixture::write(&key, "KEY-SECRET\n");
            sandbox_fixture::write(&alice.join(".config/gh/hosts.yml"), "GH-SECRET\n");
            std::fs::hard_link(&key, fx.ws().join("notes")).unwrap();
            fx.own(fx.root());
            let user = sandbox_fixture::TestUser::new("c27d", &alice);
            let grants: [(&str, String, &str); 3] = [
                (
                    "--read",
                    alice.join(".ssh").display().to_string(),
                    "KEY-SECRET",
                ),
                (
                    "--read",
                    alice.join(".config").display().to_string(),
                    "GH-SECRET",
                ),
                ("--cd", fx.ws().display().to_string(), "KEY-SECRET"),
            ];
            for (flag, path, secret) in grants {
                let script = format!(
                    "cat '{path}/authorized_keys' '{path}/gh/hosts.yml' '{path}/notes' \
                     2>/dev/null; echo SERVED"
                );
                let args: Vec<&str> = if flag == "--read" {
                    vec!["--read", &path]
                } else {
                    Vec::new()
                };
                let mut cmd = fx.sandbox_in(&fx.ws(), &args, &script);
                if set {
                    // Alice's key is in the workspace by its other name: served unless
                    // her home counts.
                    cmd.env("DOAS_USER", &user.0);
                }
                let (rc, out) = run_text(&mut cmd);
                let who = format!("nobody={nobody} {flag} {path} set={set}");
                sandbox_fixture::judge_key(&mut broken, &who, set, (rc, &out), secret);
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Round twenty-six's own list of what its list entries' rule leaves (SECURITY.md, Known
/// limits): a held script (`git fmt` = `!bash tools/ci.sh`) that runs the scripts of the
/// directories `tools/checks.list` names, or a completion the shell builds by other means,
/// each: (name, the list's text, the script's text, the user's script the agent appends
/// to).
const LISTED_DIRS: &[(&str, &str, &str, &str)] = &[
    (
        "run-parts over a listed directory",
        "tools/checks\n",
        "for d in $(cat tools/checks.list); do run-parts \"$d\"; done\n",
        "tools/checks/a",
    ),
    (
        "find -exec over a listed directory",
        "tools/checks\n",
        "for d in $(cat tools/checks.list); do find \"$d\" -name '*.sh' -exec sh {} \\; ; done\n",
        "tools/checks/a.sh",
    ),
    (
        "cd into a listed directory",
        "tools/checks\n",
        "for d in $(cat tools/checks.list); do (cd \"$d\" && for f in *.sh; do sh \"$f\"; done); done\n",
        "tools/checks/a.sh",
    ),
    (
        "suffix swapped by the shell",
        "tools/checks/a.x\n",
        "for f in $(cat tools/checks.list); do sh \"${f%.x}.sh\"; done\n",
        "tools/checks/a.sh",
    ),
];

/// Each of [`LISTED_DIRS`]: the agent appends its payload to the user's script there,
/// the user's `git fmt` runs it. Both arms; control unconfined. Open ones are on
/// [`KNOWN_OPEN`].
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_of_a_listed_directory_run_other_ways_are_not_the_agents_to_write() {
    for (name, list, script, target) in LISTED_DIRS {
        held_file_attack(
            name,
            |fx, ws| {
                sandbox_fixture::own_script(fx, ws, target);
                fx.own_file(ws, "tools/checks.list", list);
                fx.own_file(ws, "tools/ci.sh", script);
                fx.git(ws, &["config", "alias.fmt", "!bash tools/ci.sh"]);
            },
            &sandbox_fixture::append_payload(target),
            &["fmt"],
        );
    }
}

/// The logins of the other coding agents and deploy CLIs a user of this tool keeps in
/// the home directory, which round twenty-six's lists did not name: OpenAI Codex's
/// `~/.codex/auth.json`, Gemini CLI's `~/.gemini/oauth_creds.json`, Supabase's
/// `~/.supabase/access-token`, firebase-tools' `configstore/firebase-tools.json`,
/// Vercel's `auth.json`, Cloudflare wrangler's `config/default.toml`. Each: (directory
/// granted, the key in it).
const AGENT_LOGINS: &[(&str, &str)] = &[
    (".codex", "auth.json"),
    (".gemini", "oauth_creds.json"),
    (".supabase", "access-token"),
    (".config/configstore", "firebase-tools.json"),
    (".local/share/com.vercel.cli", "auth.json"),
    (".config/.wrangler", "config/default.toml"),
    (".wrangler", "config/default.toml"),
];

/// `--read ~/DIR` of each of [`AGENT_LOGINS`]: refused (or the key masked). Both arms;
/// control unconfined, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_of_another_coding_agents_login_is_refused() {
    let broken = sandbox_fixture::home_key_grants("coder-round27-agentkey-", AGENT_LOGINS);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A file one held script sources (`. tools/lib.sh`, held even when absent: a placeholder
/// keeps the agent from making it) and another runs (`sh tools/lib.sh`, held only when
/// there), absent at the start. The scan keys each file it reads once; the run word,
/// read first, must not take the place of the sourced one. The agent makes
/// `tools/lib.sh`, the user's `git fmt` sources it. Both orders; both arms; control
/// unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_absent_file_one_script_sources_and_another_runs_is_not_the_agents_to_make() {
    for (name, first, second) in [
        (
            "run then sourced",
            "sh tools/lib.sh 2>/dev/null",
            ". tools/lib.sh",
        ),
        (
            "sourced then run",
            ". tools/lib.sh",
            "sh tools/lib.sh 2>/dev/null",
        ),
    ] {
        held_file_attack(
            name,
            |fx, ws| {
                fx.own_file(ws, "tools/a.sh", &format!("{first}\n"));
                fx.own_file(ws, "tools/b.sh", &format!("{second}\n"));
                fx.own_file(ws, "tools/ci.sh", "sh tools/a.sh; sh tools/b.sh\n");
                fx.git(ws, &["config", "alias.fmt", "!sh tools/ci.sh"]);
            },
            &format!("{SCRIPT_PAYLOAD} > tools/lib.sh; echo PLANTED"),
            &["fmt"],
        );
    }
}

/// A held script (`tools/ci.sh`) that enters another directory of the work tree before
/// running the user's `scripts/x.sh` by a name relative to it (`cd scripts && sh x.sh`,
/// `./x.sh`, in a subshell, through `pushd`). The alias's own line reads the words after
/// `cd` in its directory (round twenty's review); a held script's lines are read in the
/// top and in the script's own directory only. Each: (name, the script's line).
const ENTERED: &[(&str, &str)] = &[
    ("cd then sh", "cd scripts && sh x.sh"),
    ("cd then by path", "cd scripts; ./x.sh"),
    ("subshell cd", "(cd scripts && sh x.sh)"),
    ("pushd", "pushd scripts >/dev/null && sh x.sh"),
];

/// Each of [`ENTERED`]: the agent appends its payload to `scripts/x.sh`, the user's `git
/// fmt` runs it. Both arms; control unconfined. Open ones are on [`KNOWN_OPEN`].
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_held_script_runs_after_cd_are_not_the_agents_to_write() {
    for (name, line) in ENTERED {
        held_file_attack(
            name,
            |fx, ws| {
                sandbox_fixture::own_script(fx, ws, "scripts/x.sh");
                fx.own_file(ws, "tools/ci.sh", &format!("{line}\n"));
                fx.git(ws, &["config", "alias.fmt", "!bash tools/ci.sh"]);
            },
            &sandbox_fixture::append_payload("scripts/x.sh"),
            &["fmt"],
        );
    }
}
