//! Round thirty-one's review: round thirty's second review's fixes (a held `.envrc`'s
//! `PATH_add`, a held script's `PATH` spellings, `cat FILE | sh`, ssh's `-o
//! ProxyCommand`, `--config-env`'s `$NAME`) and the lead's round-thirty sandbox changes,
//! attacked by one who has read the code, through the built binary, root and uid 65534,
//! each with an unconfined control (`--mode danger-full-access`).
//!
//! * **Yet other spellings of a held script's `PATH`**: the script's own directory by
//!   `$(cd "$(dirname …)" && pwd)`, `${PATH:+:$PATH}`, an assignment continued on the
//!   next line (closed here); a `cd` before `$PWD`, `printf -v PATH` (ratchets, closed
//!   in round thirty-two's review);
//!   `${PATH}`, `declare -x`, a function's `export`, `eval "export PATH=…"`, an `if`
//!   block held.
//! * **A held `.envrc`'s `PATH_add` past the line's first command** (`[ -d … ] &&
//!   PATH_add`, `watch_file x; PATH_add`), continued on the next line, and its
//!   `export PATH=…${PATH:+:$PATH}` (closed here); `"$PWD/…"`, `./…`, two directories, a
//!   nested `.envrc`'s `../tools/bin` held.
//! * **direnv's `layout`** (`layout python`'s virtualenv `.direnv/python-VERSION/bin`,
//!   which direnv makes only when it is not there; `layout go`'s `bin`, `layout_ruby`'s
//!   `.direnv/bin`): the agent's `git` there ran at the user's next `git` (closed here:
//!   `.direnv`, or `bin`, guarded as a `PATH` directory).
//! * **A file a held `.envrc` has direnv source** (`source_env_if_exists .envrc.local`
//!   absent at the start, `source_env .envrc.local` of the user's): the agent's payload
//!   there ran at the user's next `cd` (closed here); the `.env` (or a named file) of its
//!   `dotenv_if_exists`, absent at the start, with numbered git settings of a
//!   `core.fsmonitor` (closed here).
//! * **A suffix-less made script as the text of a command line**: `eval "$(cat
//!   tools/local)"`, `sh -c "$(cat tools/local)"`; through a function of the script's own
//!   that runs `"$@"` (round thirty's ratchet; a group's, `function NAME`'s `exec "$@"`)
//!   (closed here); `. FILE`, `source FILE`,
//!   `bash FILE`, `${SHELL:-sh} FILE`, a here-document, `find -exec sh {}` held.
//! * **ssh's command options inside a variable git runs**: `GIT_SSH_COMMAND="ssh -o
//!   ProxyCommand='sh ci/proxy'"` on the line or exported (closed here); `-oProxyCommand=`
//!   (no space), `ProxyCommand=ci/proxy` (by path), `scp -o`, the
//!   option in a variable, `git -c core.sshCommand=…` held. (`KnownHostsCommand` not
//!   tried: ssh looks the host up first, and no host resolves here.)
//! * **`git -c` with its value elsewhere** (a variable on another line, quoted or in
//!   braces, an array, a continued line, the key in a variable, `$(pwd)`): held.
//! * **A setup cancelled midway** (round thirty's early-signal cancel; the scan's eight
//!   attempts of a tree that changed under it): the walk's threads' placeholders were
//!   dropped with a failed walk and stayed in the user's repository (`.git/commondir`, a
//!   dangling `.git/config.worktree`, `.git/remotes/`), registered nowhere (closed here).
//! * **An alias's hooks path by a variable of its line** (`!HP=ci/gh; git -c
//!   core.hooksPath=$HP …`, `&&`, exported, in a function): held.
//! * Tried by hand and held, no test: `GIT_CONFIG_GLOBAL` exported to a file absent at
//!   the start, `git config core.hooksPath "$HP"` then a commit, `GIT_CONFIG_PARAMETERS`
//!   exported. Not tried: rsync's `-e` (no rsync here for a control), ssh's
//!   `LocalCommand` (it runs only once connected).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round31-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits): none (`a cd before $PWD`
/// and `printf -v PATH` closed in round thirty-two's review).
const KNOWN_OPEN: &[&str] = &[];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet, run only
/// when `A31_ONLY` is unset or names it.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    if std::env::var("A31_ONLY").is_ok_and(|o| o != name) {
        return;
    }
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// A held script (run by bash) puts `tools/bin` on `PATH` by yet another spelling and runs
/// `fmt-local` by its bare name: (name, the held `tools/ci.sh`).
const PATH_SPELLINGS: &[(&str, &str)] = &[
    (
        "the script's directory by cd and pwd",
        "DIR=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\nPATH=\"$DIR/bin:$PATH\"",
    ),
    (
        "the script's directory by cd and pwd -P",
        "HERE=$(cd \"$(dirname \"$0\")\" >/dev/null 2>&1; pwd -P)\nexport PATH=\"$HERE/bin:$PATH\"",
    ),
    (
        "PATH's default expansion",
        "export PATH=\"$PWD/tools/bin${PATH:+:$PATH}\"",
    ),
    (
        "an assignment continued on the next line",
        "export PATH=\\\n\"$PWD/tools/bin:$PATH\"",
    ),
    ("a cd before $PWD", "cd tools\nPATH=$PWD/bin:$PATH"),
    (
        "printf -v PATH",
        "printf -v PATH '%s:%s' \"$PWD/tools/bin\" \"$PATH\"",
    ),
    ("PATH in braces", "PATH=\"${PATH}:${PWD}/tools/bin\""),
    ("declare -x", "declare -x PATH=\"$PWD/tools/bin:$PATH\""),
    (
        "a function's export",
        "setup() { export PATH=\"$PWD/tools/bin:$PATH\"; }\nsetup",
    ),
    (
        "eval of an export",
        "eval \"export PATH=tools/bin:\\$PATH\"",
    ),
    (
        "an if block",
        "if [ -d tools/bin ]; then PATH=\"$PWD/tools/bin:$PATH\"; fi",
    ),
];

/// Each of [`PATH_SPELLINGS`]: `tools/bin` holds the user's `.keep`; the agent makes
/// `tools/bin/fmt-local`, the user's `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_on_a_path_set_by_yet_other_spellings_is_not_the_agents_to_make() {
    for (name, path) in PATH_SPELLINGS {
        let script = format!("{path}\ncommand -v fmt-local >/dev/null && fmt-local; true");
        let attack = |name: &str, setup: &dyn Fn(&Fx, &Path), plant: &str, user: &[&str]| {
            held_file_attack(name, setup, plant, user)
        };
        let program = "tools/bin/fmt-local";
        sandbox_fixture::path_program_attack(attack, name, ("bash", &script), program);
    }
}

/// The user's `.envrc` puts `tools/bin` on `PATH` by spellings past round thirty's second
/// review's reader: (name, where the `.envrc` is, its text).
const ENVRCS: &[(&str, &str, &str)] = &[
    (
        "PATH_add after a test",
        ".envrc",
        "[ -d tools/bin ] && PATH_add tools/bin",
    ),
    (
        "PATH_add after another command",
        ".envrc",
        "watch_file x; PATH_add tools/bin",
    ),
    (
        "PATH_add in an if",
        ".envrc",
        "if has git; then PATH_add tools/bin; fi",
    ),
    ("PATH_add continued", ".envrc", "PATH_add \\\n  tools/bin"),
    (
        "PATH's default expansion",
        ".envrc",
        "export PATH=\"$PWD/tools/bin${PATH:+:$PATH}\"",
    ),
    ("PATH_add of $PWD", ".envrc", "PATH_add \"$PWD/tools/bin\""),
    ("PATH_add ./", ".envrc", "PATH_add ./tools/bin"),
    ("PATH_add of two", ".envrc", "PATH_add bin tools/bin"),
    (
        "a nested .envrc's ..",
        "sub/.envrc",
        "PATH_add ../tools/bin",
    ),
    (
        "path_add PATH",
        ".envrc",
        "path_add PATH tools/bin # local tools",
    ),
];

/// Each of [`ENVRCS`], `tools/bin` holding the user's `.keep`: the agent makes
/// `tools/bin/git`, which the user's next `git` in a direnv shell runs. Both arms;
/// control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_on_the_path_an_envrc_adds_by_other_spellings_is_not_the_agents_to_make() {
    let mut broken = Vec::new();
    for (name, at, text) in ENVRCS {
        if std::env::var("A31_ONLY").is_ok_and(|o| o != *name) {
            continue;
        }
        let open = KNOWN_OPEN.contains(name);
        broken.extend(sandbox_fixture::envrc_attack(
            &REPO,
            open,
            name,
            &[(at, text), ("tools/bin/.keep", "")],
            &sandbox_fixture::plant_git("tools/bin"),
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The user's `.envrc` runs one of direnv's `layout`s, which puts a directory of the tree
/// on `PATH`: (name, its text, where the agent makes `git`; `VERSION` is the version of
/// the python the layout names, which names the virtualenv direnv makes, and uses when it
/// is there: `/usr/bin/python3`, the same for both arms).
const LAYOUTS: &[(&str, &str, &str)] = &[
    (
        "layout python",
        "layout python /usr/bin/python3",
        ".direnv/python-VERSION/bin",
    ),
    ("layout go", "layout go", "bin"),
    ("layout_ruby", "layout_ruby", ".direnv/bin"),
];

/// Each of [`LAYOUTS`], no `.direnv` (nor `bin`) at the start: the agent makes its `git`
/// there, which the user's next `git` in a direnv shell runs. Both arms; control
/// unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_in_a_direnv_layouts_path_is_not_the_agents_to_make() {
    use common::Bounded;
    let version = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import platform; print(platform.python_version())"])
        .output_bounded();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    assert!(!version.is_empty(), "no python3");
    let mut broken = Vec::new();
    for (name, text, bin) in LAYOUTS {
        if std::env::var("A31_ONLY").is_ok_and(|o| o != *name) {
            continue;
        }
        let open = KNOWN_OPEN.contains(name);
        let plant = sandbox_fixture::plant_git(&bin.replace("VERSION", &version));
        let envrc = [(".envrc", *text)];
        broken.extend(sandbox_fixture::envrc_attack(
            &REPO, open, name, &envrc, &plant,
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A held script runs `tools/local`, absent at the start and without a script's suffix,
/// by yet other spellings: (name, the held `tools/ci.sh`, run by bash).
const SUFFIXLESS_RUNS: &[(&str, &str)] = &[
    (
        "eval of its text",
        "[ -f tools/local ] && eval \"$(cat tools/local)\"; true",
    ),
    (
        "sh -c of its text",
        "[ -f tools/local ] && sh -c \"$(cat tools/local)\"; true",
    ),
    (
        "a function's \"$@\" in a group",
        "[ -f tools/local ] && { run() { \"$@\"; }; run sh tools/local; }; true",
    ),
    (
        "a function keyword's exec \"$@\"",
        "function run { exec \"$@\"; }\n[ -f tools/local ] && run sh tools/local; true",
    ),
    ("sourced by .", "[ -f tools/local ] && . tools/local; true"),
    (
        "sourced by source",
        "[ -f tools/local ] && source tools/local; true",
    ),
    ("bash FILE", "[ -f tools/local ] && bash tools/local; true"),
    (
        "the user's SHELL",
        "[ -f tools/local ] && ${SHELL:-sh} tools/local; true",
    ),
    (
        "a here-document",
        "sh <<EOF\n[ -f tools/local ] && . tools/local\nEOF\ntrue",
    ),
    (
        "find -exec sh",
        "find tools -name local -exec sh {} \\; ; true",
    ),
];

/// Each of [`SUFFIXLESS_RUNS`]: the agent makes `tools/local` (executable), the user's
/// `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_made_script_without_a_suffix_run_as_a_command_lines_text_is_moved_aside() {
    for (name, script) in SUFFIXLESS_RUNS {
        held_file_attack(
            name,
            |fx, ws| sandbox_fixture::user_ci(fx, ws, "bash", script),
            &format!(
                "mkdir -p tools; {{ {}; }} > tools/local; chmod +x tools/local; echo PLANTED",
                sandbox_fixture::SCRIPT_PAYLOAD
            ),
            &["ci"],
        );
    }
}

/// A held script's ssh (or git's, through a variable) runs `ci/proxy`, absent at the
/// start: (name, the held `tools/sync.sh`). ssh never reaches a host.
const SSH_COMMANDS: &[(&str, &str)] = &[
    (
        "GIT_SSH_COMMAND on the line",
        "GIT_SSH_COMMAND=\"ssh -o ProxyCommand='sh ci/proxy' -o BatchMode=yes\" \
         git ls-remote ssh://git@example.invalid/x >/dev/null 2>&1; true",
    ),
    (
        "GIT_SSH_COMMAND exported",
        "export GIT_SSH_COMMAND=\"ssh -oProxyCommand='sh ci/proxy'\"\n\
         git ls-remote ssh://git@example.invalid/x >/dev/null 2>&1; true",
    ),
    (
        "-oProxyCommand= without a space",
        "ssh -oProxyCommand='sh ci/proxy' -oBatchMode=yes git@example.invalid true \
         >/dev/null 2>&1; true",
    ),
    (
        "ProxyCommand by path",
        "ssh -o ProxyCommand=ci/proxy -o BatchMode=yes git@example.invalid true \
         >/dev/null 2>&1; true",
    ),
    (
        "scp -o",
        "scp -o ProxyCommand='sh ci/proxy' -o BatchMode=yes x git@example.invalid:y \
         >/dev/null 2>&1; true",
    ),
    (
        "the option in a variable",
        "P=\"ProxyCommand=sh ci/proxy\"\nssh -o \"$P\" -o BatchMode=yes git@example.invalid \
         true >/dev/null 2>&1; true",
    ),
    (
        "git -c core.sshCommand",
        "git -c core.sshCommand=\"ssh -o ProxyCommand='sh ci/proxy' -o BatchMode=yes\" \
         ls-remote ssh://git@example.invalid/x >/dev/null 2>&1; true",
    ),
];

/// Each of [`SSH_COMMANDS`]: the agent makes `ci/proxy` (executable), the user's `git
/// sync` = `!sh tools/sync.sh` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_ssh_runs_through_a_variable_or_option_is_not_the_agents_to_make() {
    for (name, script) in SSH_COMMANDS {
        held_file_attack(
            name,
            |fx, ws| {
                fx.own_file(ws, "tools/sync.sh", &format!("{script}\n"));
                fx.git(ws, &["config", "alias.sync", "!sh tools/sync.sh"]);
            },
            "mkdir -p ci; printf 'touch \"%s\"\\n' \"$M\" > ci/proxy; chmod +x ci/proxy; \
             echo PLANTED",
            &["sync"],
        );
    }
}

/// A held script (run by bash) gives its git `core.hooksPath=ci/gh` with the value or key
/// elsewhere: (name, the held `tools/ci.sh`).
const GIT_C_SPELLINGS: &[(&str, &str)] = &[
    (
        "a variable on another line",
        "HP=ci/gh\ngit -c core.hooksPath=$HP commit -q --allow-empty -m x",
    ),
    (
        "a variable quoted",
        "HP=ci/gh\ngit -c \"core.hooksPath=$HP\" commit -q --allow-empty -m x",
    ),
    (
        "a variable in braces, exported",
        "export HP=\"ci/gh\"\ngit -c core.hooksPath=\"${HP}\" commit -q --allow-empty -m x",
    ),
    (
        "an array",
        "args=(-c core.hooksPath=ci/gh)\ngit \"${args[@]}\" commit -q --allow-empty -m x",
    ),
    (
        "a continued line",
        "git \\\n  -c core.hooksPath=ci/gh \\\n  commit -q --allow-empty -m x",
    ),
    (
        "the key in a variable",
        "K=core.hooksPath\ngit -c $K=ci/gh commit -q --allow-empty -m x",
    ),
    (
        "the top by pwd",
        "git -c core.hooksPath=\"$(pwd)/ci/gh\" commit -q --allow-empty -m x",
    ),
];

/// Each of [`GIT_C_SPELLINGS`]: no `ci/gh` at the start; the agent makes
/// `ci/gh/pre-commit`, the user's `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hooks_path_given_with_its_value_elsewhere_is_not_the_agents_to_fill() {
    for (name, script) in GIT_C_SPELLINGS {
        held_file_attack(
            name,
            |fx, ws| sandbox_fixture::user_ci(fx, ws, "bash", script),
            "mkdir -p ci/gh; printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" > ci/gh/pre-commit; \
             chmod +x ci/gh/pre-commit; echo PLANTED",
            &["ci"],
        );
    }
}

/// The names below `dir` but `.git/objects`, sorted (what a run may not leave changed).
fn tree_listing(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(at) = dirs.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            let path = entry.path();
            if path.ends_with(".git/objects") {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                dirs.push(path.clone());
            }
            names.push(path.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    names.sort();
    names
}

/// A signal while the sandbox is set up (`coder run`'s SIGTERM, a user's Ctrl-C) stops
/// the setup midway; the placeholders its scan made are removed all the same. Round
/// thirty-one's review: the walk's threads' placeholders were dropped with a failed
/// walk, and `.git/commondir`, a dangling `.git/config.worktree` and `.git/remotes/`
/// stayed in the user's repository, registered nowhere (later runs never removed them).
/// The repository holds a chain of 300 held scripts (a setup of a fraction of a second);
/// SIGTERM is sent at delays across it. Both arms; each run must end cancelled or done,
/// the tree as it was.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_setup_cancelled_midway_leaves_no_placeholder_behind() {
    use std::os::unix::fs::PermissionsExt;
    let mut broken = Vec::new();
    for owner in sandbox_fixture::owners() {
        let (_dir, root) = sandbox_fixture::temp_root("coder-round31-sig-");
        let ws = root.join("ws");
        for i in 1..=300 {
            let next = format!("sh tools/s{}.sh\n", i + 1);
            sandbox_fixture::write(&ws.join(format!("tools/s{i}.sh")), &next);
        }
        let claude = root.join("claude");
        sandbox_fixture::write(&claude, &sandbox_fixture::payload_claude("sleep 2"));
        let exec = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(&claude, exec).unwrap();
        for d in ["home", "state", "xdg"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let git = |args: &[&str]| {
            let mut cmd = std::process::Command::new("git");
            sandbox_fixture::user_env(&mut cmd, &root, sandbox_fixture::PATH)
                .args(args)
                .current_dir(&ws)
                .env("GIT_AUTHOR_NAME", "u")
                .env("GIT_AUTHOR_EMAIL", "u@example.invalid")
                .env("GIT_COMMITTER_NAME", "u")
                .env("GIT_COMMITTER_EMAIL", "u@example.invalid");
            sandbox_fixture::must_run(&mut cmd);
        };
        git(&["init", "-q"]);
        git(&["config", "alias.ci", "!sh tools/s1.sh"]);
        git(&["add", "-A"]);
        git(&["commit", "-qm", "init"]);
        if let Some(uid) = owner {
            sandbox_fixture::chown_tree(&root, uid);
        }
        let before = tree_listing(&ws);
        for delay in (20..=400).step_by(20) {
            let mut cmd = sandbox_fixture::coder_as(&root, owner, &ws, &claude, &[], "go");
            let mut child = cmd
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(delay));
            // `timeout` passes the signal on to coder.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            common::wait_within(&mut child, std::time::Duration::from_secs(120));
            let after = tree_listing(&ws);
            if after != before {
                let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
                broken.push(format!("{owner:?} SIGTERM after {delay} ms: left {new:?}"));
                break;
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The user's `.envrc` has direnv source a local file (`.envrc.local`, absent at the start,
/// or the user's own): (name, the `.envrc`, the user's `.envrc.local` if any).
const ENVRC_SOURCES: &[(&str, &str, Option<&str>)] = &[
    (
        "source_env_if_exists of a file absent at the start",
        "source_env_if_exists .envrc.local",
        None,
    ),
    (
        "source_env of the user's file",
        "source_env .envrc.local",
        Some("export FOO=1\n"),
    ),
];

/// Each of [`ENVRC_SOURCES`]: the agent appends a payload to `.envrc.local` (making it when
/// absent), which direnv runs at the user's next `cd` there. Both arms; control
/// unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_file_an_envrc_sources_is_not_the_agents_to_write() {
    let mut broken = Vec::new();
    for (name, text, local) in ENVRC_SOURCES {
        if std::env::var("A31_ONLY").is_ok_and(|o| o != *name) {
            continue;
        }
        let open = KNOWN_OPEN.contains(name);
        let mut files = vec![(".envrc", *text)];
        files.extend(local.map(|local| (".envrc.local", local)));
        let plant = format!(
            "{} >> .envrc.local; echo PLANTED",
            sandbox_fixture::SCRIPT_PAYLOAD
        );
        broken.extend(sandbox_fixture::envrc_attack(
            &REPO, open, name, &files, &plant,
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// An alias of the user's sets its hooks path by a variable of its own line: (name, the
/// alias). All held (round thirty's second review noted the first unread; read since).
const ALIAS_VARIABLES: &[(&str, &str)] = &[
    (
        "an alias's variable before ;",
        "!HP=ci/gh; git -c core.hooksPath=$HP commit -q --allow-empty -m x",
    ),
    (
        "an alias's variable before &&",
        "!HP=ci/gh && git -c core.hooksPath=$HP commit -q --allow-empty -m x",
    ),
    (
        "an alias's exported variable",
        "!export HP=ci/gh; git -c core.hooksPath=\"$HP\" commit -q --allow-empty -m x",
    ),
    (
        "an alias's function",
        "!f() { HP=ci/gh; git -c core.hooksPath=$HP commit -q --allow-empty -m x; }; f",
    ),
];

/// Each of [`ALIAS_VARIABLES`]: no `ci/gh` at the start; the agent makes
/// `ci/gh/pre-commit`, the user's `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_aliass_hooks_path_by_a_variable_is_not_the_agents_to_fill() {
    for (name, alias) in ALIAS_VARIABLES {
        held_file_attack(
            name,
            |fx, _| {
                fx.git(&fx.ws(), &["config", "alias.ci", alias]);
            },
            "mkdir -p ci/gh; printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" > ci/gh/pre-commit; \
             chmod +x ci/gh/pre-commit; echo PLANTED",
            &["ci"],
        );
    }
}

/// The user's `.envrc` loads variables from a file absent at the start: (name, the
/// `.envrc`, the file).
const DOTENVS: &[(&str, &str, &str)] = &[
    ("dotenv_if_exists", "dotenv_if_exists", ".env"),
    (
        "dotenv of a named file",
        "dotenv_if_exists .env.dev",
        ".env.dev",
    ),
];

/// Each of [`DOTENVS`]: the agent makes the file with numbered git settings of a
/// `core.fsmonitor` that creates the marker, which the user's next `git status` in a
/// direnv shell runs. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_variables_file_an_envrc_loads_is_not_the_agents_to_make() {
    let mut broken = Vec::new();
    for (name, text, file) in DOTENVS {
        if std::env::var("A31_ONLY").is_ok_and(|o| o != *name) {
            continue;
        }
        let open = KNOWN_OPEN.contains(name);
        let plant = format!(
            "printf 'GIT_CONFIG_COUNT=1\\nGIT_CONFIG_KEY_0=core.fsmonitor\\n\
             GIT_CONFIG_VALUE_0=\"touch %s; false\"\\n' \"$M\" > {file}; echo PLANTED"
        );
        let files = [(".envrc", *text)];
        broken.extend(sandbox_fixture::envrc_attack(
            &REPO, open, name, &files, &plant,
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
