//! Round twenty-eight's review: round twenty-seven's fixes (a held script's files as the
//! interpreter completes them, wrappers, `cd`, listed directories, logins moved by a
//! variable, the other agents' logins) attacked by one who has read the code, through the
//! built binary, root and uid 65534, each with a control (`--mode danger-full-access`, or
//! without what makes the attack) showing the attack works without the sandbox.
//!
//! * **A held script's file named by any spelling**: some twenty programs and syntaxes
//!   the held scripts' run words did not know (`bash -lc`, `sh -c '. x'`, `xargs`,
//!   `strace -o`, `setarch`, `sg -c`, `unshare`, `watch`, `tclsh`, `coproc`, `trap`, a
//!   `case` arm, backquotes, `eval`, a function of the script's, `NODE_OPTIONS`, `env -C`,
//!   `make -C`, `cd` then `.`): closed as a class (any word naming a script of the tree).
//!   Brace expansions, `$'…'` and a `for` loop's words, on the alias's line too.
//! * **A directory a held script runs every file of**: named literally (`run-parts
//!   tools/checks`, a `for` over a glob, `find … -exec sh`), or listed and run by
//!   spellings the reader passed over.
//! * **What the class rules leave the agent's**: a data file a held script edits, a
//!   directory it finds files in but runs none of (held).
//! * **Spellings found held** before this review (held, guards against a regression).
//! * **Logins**: Claude Code's device keys and global config (`primaryApiKey`), also where
//!   `CLAUDE_CONFIG_DIR` moves it; Gemini CLI's `.env`; the `pkexec` caller's keys.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD, run_text};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round28-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits): a module perl loads by
/// `PERL5OPT` from a `PERL5LIB` directory (a file no word of the script names).
/// And a directory a program of the project's runs the files of (python's `glob`).
/// And a glob a held script runs without a loop (`sh tools/x.s?`).
const KNOWN_OPEN: &[&str] = &[
    "perl PERL5OPT",
    "python globs a directory",
    "a glob in a run word",
];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// A file of the user's: a script (`#!/bin/sh`, mode 0755); a makefile; perl's (a `#!`
/// naming perl, a module ending true); a Tcl script (no `#!`, not executable: its
/// suffix alone says what it is).
fn user_file(fx: &Fx, ws: &Path, rel: &str) {
    if rel.ends_with(".mk") {
        fx.own_file(ws, rel, "all:\n\t@true\n");
    } else if rel.ends_with(".pl") || rel.ends_with(".pm") {
        fx.own_file(ws, rel, "#!/usr/bin/perl\n1;\n");
    } else if rel.ends_with(".tcl") {
        fx.own_file(ws, rel, "\n");
    } else {
        sandbox_fixture::own_script(fx, ws, rel);
    }
}

/// One attack of a held script (`tools/ci.sh`, run by `git fmt` = `!bash tools/ci.sh`):
/// (name, the script's text, the user's files, the file the agent appends its payload
/// to).
type Spelling = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
);

/// [`held_file_attack`] of each of `spellings`. Both arms; control unconfined.
fn held_script_attacks(spellings: &[Spelling]) {
    for (name, script, files, target) in spellings {
        held_file_attack(
            name,
            |fx, ws| {
                for file in *files {
                    user_file(fx, ws, file);
                }
                fx.own_file(ws, "tools/ci.sh", &format!("{script}\n"));
                fx.git(ws, &["config", "alias.fmt", "!bash tools/ci.sh"]);
            },
            &sandbox_fixture::append_payload(target),
            &["fmt"],
        );
    }
}

/// Lines of a held script that run the user's file by a program or syntax the held
/// scripts' run words (`config_text::script_run_words`) did not know: each ran the
/// agent's edit at the user's `git fmt` before this review (checked). The reader grew a
/// spelling per finding for five rounds; these are closed as a class: any word of a held
/// script that names a script of the tree (executable, a `#!` line, or a script's
/// suffix) is held, whatever stands around it (`scan::held::scripts_named`).
const ANY_SPELLINGS: &[Spelling] = &[
    (
        "sh -c sourcing",
        "sh -c '. tools/x.sh'",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "bash -lc",
        "bash -lc 'sh tools/x.sh'",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "bash -ec",
        "bash -ec 'sh tools/x.sh'",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "sh -c positional",
        "sh -c 'sh \"$1\"' _ tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "NODE_OPTIONS for the command",
        "NODE_OPTIONS='--require ./tools/hook.js' node tools/fmt.js",
        &["tools/hook.js", "tools/fmt.js"],
        "tools/hook.js",
    ),
    (
        "NODE_OPTIONS exported",
        "export NODE_OPTIONS=--require=./tools/hook.js; node tools/fmt.js",
        &["tools/hook.js", "tools/fmt.js"],
        "tools/hook.js",
    ),
    (
        "xargs runs its command once",
        "xargs sh tools/x.sh < /dev/null",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "strace -o",
        "strace -f -o /dev/null sh tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "setarch",
        "setarch x86_64 sh tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "sg -c",
        "sg \"$(id -gn)\" -c 'sh tools/x.sh'",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "unshare",
        "unshare sh tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "watch",
        "watch -g -n 0.1 -t sh tools/x.sh >/dev/null 2>&1 </dev/null & sleep 0.5; kill $! 2>/dev/null; true",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "tclsh",
        "tclsh tools/x.tcl",
        &["tools/x.tcl"],
        "tools/x.tcl",
    ),
    (
        "coproc",
        "coproc sh tools/x.sh; wait",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "trap string",
        "trap 'sh tools/x.sh' EXIT",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "case arm",
        "case x in x) sh tools/x.sh;; esac",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "backquotes",
        "echo `sh tools/x.sh`",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "eval string",
        "eval 'sh tools/x.sh'",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "a function of the script's",
        "run() { echo \"+ $*\"; \"$@\"; }\nrun sh tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "env -C",
        "env -C scripts sh x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "env --chdir=",
        "env --chdir=scripts sh x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "make -C -f",
        "make -s -C scripts -f ci.mk",
        &["scripts/ci.mk"],
        "scripts/ci.mk",
    ),
    (
        "cd then source",
        "cd scripts && . ./x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "python -um cluster",
        "python3 -um tools.strip",
        &["tools/strip.py"],
        "tools/strip.py",
    ),
    (
        "brace expansion",
        "sh tools/{x,y}.sh",
        &["tools/x.sh", "tools/y.sh"],
        "tools/x.sh",
    ),
    (
        "ANSI-C quoting",
        "sh $'tools/x.sh'",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "a for loop's literal words",
        "for s in x y; do sh tools/$s.sh; done",
        &["tools/x.sh", "tools/y.sh"],
        "tools/y.sh",
    ),
    (
        "a glob in a run word",
        "sh tools/x.s?",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "perl PERL5OPT",
        "PERL5LIB=tools PERL5OPT=-MHook perl tools/x.pl",
        &["tools/Hook.pm", "tools/x.pl"],
        "tools/Hook.pm",
    ),
];

/// Each of [`ANY_SPELLINGS`]: the agent appends its payload to the user's file, the
/// user's `git fmt` runs it. Both arms; control unconfined. Open ones are on
/// [`KNOWN_OPEN`].
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_files_a_held_script_names_by_any_spelling_are_not_the_agents_to_write() {
    held_script_attacks(ANY_SPELLINGS);
}

/// Spellings next to round twenty-seven's fixes that were held already when this review
/// tried them (guards against a regression): python's `-mMOD`, a line continued, `cd
/// dir/` and `cd a/../b`, a redirection or `&&` touching the word, a command
/// substitution in an assignment, node's `-C` value, a quoted program, `exec ./x`, a
/// quoted name inside `bash -c "…"`, `sh -s < "x"`; and six more ways into a directory
/// before a relative run (round twenty-seven's `cd` fix, f9bb18f).
const HELD_SPELLINGS: &[Spelling] = &[
    (
        "python -mMOD",
        "python3 -mtools.strip",
        &["tools/strip.py"],
        "tools/strip.py",
    ),
    (
        "line continuation",
        "sh \\\n  tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "cd trailing slash",
        "cd scripts/ && sh x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "cd through ..",
        "cd tools/../scripts && sh x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "redirection touching the word",
        "sh tools/x.sh>/dev/null",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "&& touching",
        "true&&sh tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "substitution in an assignment",
        "v=$(sh tools/x.sh)",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "node -C value",
        "node -C development tools/fmt.js",
        &["tools/fmt.js"],
        "tools/fmt.js",
    ),
    (
        "quoted program",
        "'sh' tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "exec by path",
        "exec ./tools/x.sh",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "quoted name in bash -c",
        "bash -c \"sh 'tools/x.sh'\"",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
    (
        "cd up from the script's directory",
        "cd \"$(dirname \"$0\")/../scripts\" && sh x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "cd from rev-parse's top",
        "cd \"$(git rev-parse --show-toplevel)/scripts\" && sh x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "cd through a variable",
        "D=scripts; cd \"$D\" && sh x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "cd inside sh -c",
        "sh -c \"cd scripts && sh x.sh\"",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "builtin cd",
        "builtin cd scripts && sh x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "pushd then source",
        "pushd scripts >/dev/null && source x.sh",
        &["scripts/x.sh"],
        "scripts/x.sh",
    ),
    (
        "sh -s from a quoted file",
        "sh -s < \"tools/x.sh\"",
        &["tools/x.sh"],
        "tools/x.sh",
    ),
];

/// Each of [`HELD_SPELLINGS`]: held. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn spellings_next_to_round_twenty_sevens_fixes_are_held() {
    held_script_attacks(HELD_SPELLINGS);
}

/// What the class rule of [`ANY_SPELLINGS`] leaves the agent's to write: a file a held
/// script names that is no script (`tools/release.sh` counting `Cargo.toml`'s lines and
/// appending to `CHANGELOG.md`), and a directory whose files it finds but runs none of
/// (`find src -name '*.orig' -exec rm {} \;`), so a project's release or version script
/// does not freeze what the agent is there to change. Both arms: the agent's edit lands, as
/// unconfined. (A file such a script reads with `sed`, `cat`, `grep` and kin is held as
/// a list since round twenty-five, before this review: `sed -i … Cargo.toml` holds it.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_data_file_a_held_script_names_stays_the_agents_to_edit() {
    for nobody in sandbox_fixture::arms() {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        fx.own_file(&ws, "CHANGELOG.md", "# Changes\n");
        fx.own_file(&ws, "Cargo.toml", "[package]\n");
        fx.own_file(&ws, "src/lib.rs", "\n");
        let release = "wc -l Cargo.toml\nprintf '## 1\\n' >> CHANGELOG.md\n\
                       find src -name '*.orig' -exec rm {} \\;\nsh tools/x.sh\n";
        fx.own_file(&ws, "tools/release.sh", release);
        sandbox_fixture::own_script(&fx, &ws, "tools/x.sh");
        fx.git(&ws, &["config", "alias.release", "!sh tools/release.sh"]);
        let edit = "echo EDITED >> CHANGELOG.md && echo EDITED >> Cargo.toml && \
                    echo EDITED > src/new.rs && echo DONE";
        let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], edit));
        assert!(rc == 0 && out.contains("DONE"), "nobody={nobody}: {out}");
        for file in ["CHANGELOG.md", "Cargo.toml", "src/new.rs"] {
            let text = std::fs::read_to_string(ws.join(file)).unwrap();
            assert!(text.contains("EDITED"), "nobody={nobody}: {file}: {text}");
        }
        // The script it runs is held all the same.
        let (_, out) =
            run_text(&mut fx.sandbox_in(&ws, &[], &sandbox_fixture::append_payload("tools/x.sh")));
        assert!(out.contains("PLANTED"), "nobody={nobody}: {out}");
        let text = std::fs::read_to_string(ws.join("tools/x.sh")).unwrap();
        assert_eq!(text, "#!/bin/sh\n", "nobody={nobody}: {out}");
    }
}

/// Claude Code's files beside its login that hold a key: its device keys
/// (`~/.claude/.device-keys.json`) and its global config (`~/.claude.json`, and the older
/// `~/.claude/.config.json`), whose `primaryApiKey` is where the CLI keeps a Console API
/// key without a keychain (Linux), and whose MCP servers' `env` holds theirs. The CLI's
/// own list of the files it protects names each beside `.credentials.json`. And Gemini
/// CLI's beside its login (`~/.gemini/.env`, where its `GEMINI_API_KEY` is kept, and its
/// MCP servers' OAuth tokens). Each: the file, relative to the home directory.
const CLAUDE_KEYS: &[&str] = &[
    ".claude/.device-keys.json",
    ".claude.json",
    ".claude/.config.json",
    ".gemini/.env",
    ".gemini/mcp-oauth-tokens.json",
];

/// Each of [`CLAUDE_KEYS`]: `--read` of the file itself, and a hard link to it in the
/// workspace (`cp -al` of a home backup). Round twenty-six made the login never visible,
/// not these: a grant of `~/.claude` was refused for the login's sake, the file or its
/// link was served. Both arms; control unconfined, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn claude_codes_other_keys_are_never_visible() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for rel in CLAUDE_KEYS {
            for confined in [true, false] {
                let fx = Fixture::new("coder-round28-claude-", nobody, &["ws", "home", "state"]);
                let key = fx.root().join("home").join(rel);
                sandbox_fixture::write(&key, "{\"primaryApiKey\": \"KEY-SECRET\"}\n");
                std::fs::hard_link(&key, fx.ws().join("notes")).unwrap();
                fx.own(fx.root());
                let key = key.display().to_string();
                let reads = [
                    (vec!["--read", key.as_str()], key.clone()),
                    (Vec::new(), "notes".to_string()),
                ];
                for (mut args, path) in reads {
                    if !confined {
                        args.extend(["--mode", "danger-full-access"]);
                    }
                    let (rc, out) = fx.sandbox(&args, &format!("cat '{path}'; echo SERVED"));
                    let who = format!("nobody={nobody} {rel} as {path} confined={confined}");
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
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// coder started through `pkexec`, which names its caller by `PKEXEC_UID` (a number; `sudo`
/// and `doas` name theirs by `SUDO_USER` and `DOAS_USER`, counted since round twenty-six):
/// `--read` of the caller's `~/.ssh` and a hard link to their key in the workspace. Both
/// arms; control without `PKEXEC_UID`, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_pkexec_callers_keys_are_not_granted() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for set in [true, false] {
            let fx = Fixture::new("coder-round28-pkexec-", nobody, &["ws", "home", "state"]);
            let alice = fx.root().join("alice");
            let key = alice.join(".ssh/authorized_keys");
            sandbox_fixture::write(&key, "KEY-SECRET\n");
            std::fs::hard_link(&key, fx.ws().join("notes")).unwrap();
            fx.own(fx.root());
            let user = sandbox_fixture::TestUser::new("c28p", &alice);
            let uid = nix::unistd::User::from_name(&user.0)
                .unwrap()
                .unwrap()
                .uid
                .as_raw();
            let ssh = alice.join(".ssh").display().to_string();
            let ws = fx.ws().display().to_string();
            for (args, path) in [(vec!["--read", ssh.as_str()], &ssh), (Vec::new(), &ws)] {
                let script =
                    format!("cat '{path}/authorized_keys' '{path}/notes' 2>/dev/null; echo SERVED");
                let mut cmd = fx.sandbox_in(&fx.ws(), &args, &script);
                if set {
                    cmd.env("PKEXEC_UID", uid.to_string());
                }
                let (rc, out) = run_text(&mut cmd);
                let who = format!("nobody={nobody} {args:?} {path} set={set}");
                sandbox_fixture::judge_key(&mut broken, &who, set, (rc, &out), "KEY-SECRET");
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// `--read vault` where `CLAUDE_CONFIG_DIR=vault` (a second Claude Code profile) holds the
/// CLI's global config with its `primaryApiKey` (`vault/.claude.json`): counted as the
/// home's `~/.claude.json` is ([`claude_codes_other_keys_are_never_visible`]). Both arms;
/// control without the variable, served.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_claude_config_a_variable_moves_is_not_granted() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        for set in [true, false] {
            let fx = Fixture::new("coder-round28-cfgdir-", nobody, &["ws", "home", "state"]);
            let vault = fx.root().join("home/claude-work");
            let key = "{\"primaryApiKey\": \"KEY-SECRET\"}\n";
            sandbox_fixture::write(&vault.join(".claude.json"), key);
            fx.own(fx.root());
            let script = format!("cat '{}/.claude.json'; echo SERVED", vault.display());
            let mut cmd = fx.sandbox_in(&fx.ws(), &["--read", vault.to_str().unwrap()], &script);
            if set {
                cmd.env("CLAUDE_CONFIG_DIR", &vault);
            }
            let (rc, out) = run_text(&mut cmd);
            let who = format!("nobody={nobody} set={set}");
            sandbox_fixture::judge_key(&mut broken, &who, set, (rc, &out), "KEY-SECRET");
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A held script (`tools/ci.sh`, run by `git fmt` = `!bash tools/ci.sh`) that runs every
/// file of a directory: (name, the script's text, the user's files, the agent's command).
/// The directory named literally was not held at all (only one a list names, `"$d"`,
/// since round twenty-seven's review), and a listed one run by some spellings was not:
/// the agent rewrote `tools/checks/a.sh` or added `tools/checks/b.sh`, the user's `git
/// fmt` ran it. Each failed before this review's change (checked).
const DIRS_RUN: &[(&str, &str, &[&str], &str)] = &[
    (
        "run-parts of a directory",
        "run-parts tools/checks",
        &["tools/checks/a"],
        "APPEND tools/checks/a",
    ),
    (
        "run-parts: a script added",
        "run-parts tools/checks",
        &["tools/checks/a"],
        "ADD tools/checks/b",
    ),
    (
        "a for loop over a glob: a script added",
        "for f in tools/checks/*.sh; do sh \"$f\"; done",
        &["tools/checks/a.sh"],
        "ADD tools/checks/b.sh",
    ),
    (
        "a for loop over a glob on three lines",
        "for f in tools/checks/*.sh; do\n  sh \"$f\"\ndone",
        &["tools/checks/a.sh"],
        "ADD tools/checks/b.sh",
    ),
    (
        "a glob in bash -c",
        "bash -c 'for f in tools/checks/*.sh; do sh \"$f\"; done'",
        &["tools/checks/a.sh"],
        "ADD tools/checks/b.sh",
    ),
    (
        "a glob given to xargs",
        "ls tools/checks/*.sh | xargs -n1 sh",
        &["tools/checks/a.sh"],
        "ADD tools/checks/b.sh",
    ),
    (
        "find -exec sh of a directory",
        "find tools/checks -name '*.sh' -exec sh {} \\;",
        &["tools/checks/a.sh"],
        "APPEND tools/checks/a.sh",
    ),
    (
        "find piped to a read loop",
        "find tools/checks -name '*.sh' | while read -r f; do sh \"$f\"; done",
        &["tools/checks/a.sh"],
        "ADD tools/checks/b.sh",
    ),
    (
        "a directory in a variable",
        "D=tools/checks; find \"$D\" -name '*.sh' -exec sh {} \\;",
        &["tools/checks/a.sh"],
        "APPEND tools/checks/a.sh",
    ),
    (
        "a listed directory run by run-parts with an option",
        "while read -r d; do run-parts --exit-on-error \"$d\"; done < tools/checks.list",
        &["tools/checks/a", "LIST"],
        "APPEND tools/checks/a",
    ),
    (
        "a listed directory run by run-parts --regex RE",
        "for d in $(cat tools/checks.list); do run-parts --regex '.*' \"$d\"; done",
        &["tools/checks/a", "LIST"],
        "APPEND tools/checks/a",
    ),
    (
        "a listed directory found and piped to xargs",
        "for d in $(cat tools/checks.list); do find \"$d\" -print0 | xargs -0 -n1 sh; done",
        &["tools/checks/a.sh", "LIST"],
        "APPEND tools/checks/a.sh",
    ),
    (
        "a listed directory's files run by find -exec {}",
        "for d in $(cat tools/checks.list); do find \"$d\" -type f -exec {} \\; ; done",
        &["tools/checks/a.sh", "LIST"],
        "APPEND tools/checks/a.sh",
    ),
    (
        "a listed directory's files run as commands",
        "for d in $(cat tools/checks.list); do for f in \"$d\"/*; do \"$f\"; done; done",
        &["tools/checks/a.sh", "LIST"],
        "APPEND tools/checks/a.sh",
    ),
    (
        "python globs a directory",
        "python3 -c 'import glob, subprocess; [subprocess.run([\"sh\", f]) for f in glob.glob(\"tools/checks/*.sh\")]'",
        &["tools/checks/a.sh"],
        "ADD tools/checks/b.sh",
    ),
];

/// Each of [`DIRS_RUN`]: `LIST` is the user's `tools/checks.list` naming `tools/checks`;
/// the agent appends its payload to a script there (`APPEND`) or adds one (`ADD`, a `#!`
/// line and executable, as `run-parts` needs). Both arms; control unconfined. Open ones are on [`KNOWN_OPEN`].
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_of_a_directory_a_held_script_runs_are_not_the_agents_to_write() {
    for (name, script, files, attack) in DIRS_RUN {
        let (how, target) = attack.split_once(' ').unwrap();
        let attack = match how {
            "ADD" => format!(
                "echo '#!/bin/sh' > {target}; {SCRIPT_PAYLOAD} >> {target}; chmod +x {target}; \
                 echo PLANTED"
            ),
            _ => sandbox_fixture::append_payload(target),
        };
        held_file_attack(
            name,
            |fx, ws| {
                for file in *files {
                    match *file {
                        "LIST" => drop(fx.own_file(ws, "tools/checks.list", "tools/checks\n")),
                        file => sandbox_fixture::own_script(fx, ws, file),
                    }
                }
                fx.own_file(ws, "tools/ci.sh", &format!("{script}\n"));
                fx.git(ws, &["config", "alias.fmt", "!bash tools/ci.sh"]);
            },
            &attack,
            &["fmt"],
        );
    }
}

/// Spellings of the alias's own line (`git fmt` = `!LINE`, read by `config_text::command_words`,
/// not the held scripts' reader): a bash it runs expands braces and `$'…'`, which `sh`
/// does not; held are a `for` loop's words and a glob. Each: (name, the line, the user's
/// file the agent appends its payload to).
const ALIAS_SPELLINGS: &[(&str, &str, &str)] = &[
    (
        "alias: brace expansion in bash -c",
        "!bash -c \"sh tools/{x,y}.sh\"",
        "tools/x.sh",
    ),
    (
        "alias: ANSI-C quoting in bash -c",
        "!bash -c \"sh $'tools/x.sh'\"",
        "tools/x.sh",
    ),
    (
        "alias: a for loop's words",
        "!for s in x y; do sh tools/$s.sh; done",
        "tools/y.sh",
    ),
    ("alias: a glob run", "!sh tools/x.s?", "tools/x.sh"),
];

/// Each of [`ALIAS_SPELLINGS`]: the agent appends its payload to the user's script, the
/// user's `git fmt` runs it. Both arms; control unconfined. The first two failed before
/// this review's change (checked).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_files_an_alias_runs_by_bash_spellings_are_not_the_agents_to_write() {
    for (name, line, target) in ALIAS_SPELLINGS {
        held_file_attack(
            name,
            |fx, ws| {
                sandbox_fixture::own_script(fx, ws, "tools/x.sh");
                sandbox_fixture::own_script(fx, ws, "tools/y.sh");
                fx.git(ws, &["config", "alias.fmt", line]);
            },
            &sandbox_fixture::append_payload(target),
            &["fmt"],
        );
    }
}
