//! Round twenty-six's second review: fix26's changes (held scripts followed however deep,
//! relocating variables expanded, list entries held as the script completes them,
//! wrappers' option values passed over, the home's never-visible places resolved once per
//! run) and round twenty-five's second review's own (the key-link walk, unlisted
//! directories shown empty), attacked by one who has read the code, through the built
//! binary, root and uid 65534, each with a control (`--mode danger-full-access`, or
//! without what makes the attack) showing the attack works without the sandbox.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::Bounded;
use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle, append_to, run_text};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round26b-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits): a tool in a directory the
/// helper cannot list. (`env -S`'s command string inside a script and a shell named by a
/// variable's default were closed in round twenty-seven's review.)
const KNOWN_OPEN: &[&str] = &["tool in an unlistable directory"];

/// [`sandbox_fixture::held_file_attack`] on this file's repository and ratchet.
fn held_file_attack(name: &str, setup: impl Fn(&Fx, &Path), script: &str, user: &[&str]) {
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, script, user);
}

/// Lines of a held script (run by `git fmt` = `!bash tools/ci.sh`) that run the user's
/// `tools/x.sh`, each spelled in a way the held scripts' reader
/// (`config_text::script_run_words`) did not follow: the program named by its path
/// (`/bin/sh`, `/usr/bin/env`), an interpreter's option that takes a value (`bash -o
/// pipefail`), and wrappers the reader does not know (`flock`, `setpriv`, `eval`, `exec
/// -a`, `taskset` with a mask in letters, `env -S`).
const SPELLINGS: &[(&str, &str)] = &[
    ("plain", "sh tools/x.sh"),
    ("shell by path", "/bin/sh tools/x.sh"),
    ("env by path", "/usr/bin/env sh tools/x.sh"),
    ("bash -o value", "bash -o pipefail tools/x.sh"),
    ("bash -O value", "bash -O extglob tools/x.sh"),
    ("bash --rcfile value", "bash --rcfile /dev/null tools/x.sh"),
    ("flock", "flock tools sh tools/x.sh"),
    ("setpriv", "setpriv --nnp sh tools/x.sh"),
    ("eval", "eval sh tools/x.sh"),
    ("exec -a", "exec -a ci sh tools/x.sh"),
    ("taskset hex mask", "taskset f sh tools/x.sh"),
    ("env -S", "env -S 'sh tools/x.sh'"),
    // An unset variable with a default: `$SHELL` itself is the test user's login shell
    // (`nologin` for uid 65534 on some machines), which made the control fail there.
    ("shell from a variable", "${CI_SHELL:-sh} tools/x.sh"),
];

/// A held script running the user's `tools/x.sh` by each of [`SPELLINGS`]: the agent
/// appends to `tools/x.sh`, the user's `git fmt` runs it. Both arms; control unconfined.
/// Every spelling but `plain` ran the payload before this round's second review; those
/// on [`KNOWN_OPEN`] still do.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_held_script_runs_by_other_spellings_are_not_the_agents_to_write() {
    for (name, line) in SPELLINGS {
        held_file_attack(
            name,
            |fx, ws| {
                sandbox_fixture::own_script(fx, ws, "tools/x.sh");
                fx.own_file(ws, "tools/ci.sh", &format!("{line}\n"));
                fx.git(ws, &["config", "alias.fmt", "!bash tools/ci.sh"]);
            },
            &append_to("tools/x.sh"),
            &["fmt"],
        );
    }
}

/// A directory of this test's own in `/opt` (a system directory the sandbox shows), with
/// `mode`.
fn opt_dir(mode: u32) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("coder-round26b-")
        .tempdir_in("/opt")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

/// A program the user runs from a system directory others can enter but not list
/// (`/opt/tools`, mode 0711, root's: `/opt/tools/bin/tool`). Once any home key has another
/// name (`~/.aws/credentials` hard-linked at `/opt/backup/credentials`), round twenty-five's
/// second review shows every such directory empty to a run whose helper cannot list it
/// (uid 65534), so the tool is gone, with no word of why (`No such file or directory`;
/// the agent's build or the user's checks fail). Open (a ratchet, [`KNOWN_OPEN`]): for
/// uid 65534 with the link, the tool does not run. Control: without the link it runs;
/// root lists the directory and runs it either way.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_tool_in_a_directory_the_user_cannot_list_still_runs_when_a_key_has_another_name() {
    let name = "tool in an unlistable directory";
    let tools = opt_dir(0o711);
    let tool = tools.path().join("bin/tool");
    sandbox_fixture::write(&tool, "#!/bin/sh\necho TOOL-RAN\n");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = tools.path().join("bin");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let backup = opt_dir(0o755);
    for nobody in sandbox_fixture::arms() {
        for linked in [true, false] {
            let fx = Fixture::new("coder-round26b-tool-", nobody, &["ws", "home", "state"]);
            let key = fx.root().join("home/.aws/credentials");
            sandbox_fixture::write(&key, "AWS-SECRET\n");
            fx.own(fx.root());
            let link = backup.path().join("credentials");
            let _ = std::fs::remove_file(&link);
            if linked {
                std::fs::hard_link(&key, &link).unwrap();
            }
            let (rc, out) = fx.sandbox(&[], &format!("'{}'; echo SERVED", tool.display()));
            let who = format!("{name}: nobody={nobody} linked={linked}");
            assert!(out.contains("SERVED"), "{who}: rc={rc}: {out}");
            let ran = out.contains("TOOL-RAN");
            if nobody && linked && KNOWN_OPEN.contains(&name) {
                assert!(!ran, "{who}: fixed? take it off KNOWN_OPEN: {out}");
            } else {
                assert!(ran, "{who}: the tool did not run: {out}");
            }
            let _ = std::fs::remove_file(&link);
        }
    }
}

/// A relocating variable that names a system directory the sandbox shows, or one that
/// holds one (`DOCKER_CONFIG=/etc`, `=/usr`, `=/`): the whole place is a key, so the
/// private root would show `/etc` empty (the agent's DNS, TLS roots and user names gone;
/// the run fails in ways that do not name the variable), or the secret scan of `/usr`
/// stopped with a `sandbox_error` blaming the workspace. A `config_error` (exit 78)
/// naming the variable, in the run mode too (the agent never starts). Round
/// twenty-eight: a TLS trust store, a place holding one or a file in one
/// (`=/etc/ssl/certs`, `=/etc/ssl`, its CA bundle), likewise: its CA roots were hidden
/// and every HTTPS call of the agent failed on a certificate, naming nothing. Control: the same runs with the variable naming a place
/// of its own in `/opt`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_relocating_variable_naming_a_system_directory_is_a_config_error() {
    let own = opt_dir(0o755);
    for nobody in sandbox_fixture::arms() {
        // A file of the trust store too (its CA bundle): the first one there is.
        let store_file = std::fs::read_dir("/etc/ssl/certs")
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.is_file())
            .unwrap();
        let store_file = store_file.to_str().unwrap();
        for value in [
            "/etc",
            "/usr",
            "/",
            "/etc/ssl/certs",
            "/etc/ssl",
            store_file,
            "",
        ] {
            let fx = Fixture::new("coder-round26b-sysvar-", nobody, &["ws", "home", "state"]);
            let bin = fx.root().join("fake-claude");
            std::fs::write(&bin, sandbox_fixture::payload_claude("touch AGENT-RAN")).unwrap();
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
            fx.own(fx.root());
            let control = value.is_empty();
            let var = if control {
                own.path().to_str().unwrap()
            } else {
                value
            };
            let who = format!("nobody={nobody} DOCKER_CONFIG={var}");
            let (rc, out) = run_text(
                fx.sandbox_in(&fx.ws(), &[], "cat /etc/hostname >/dev/null && echo SERVED")
                    .env("DOCKER_CONFIG", var),
            );
            if control {
                assert!(rc == 0 && out.contains("SERVED"), "{who}: control: {out}");
            } else {
                assert_eq!(rc, 78, "{who}: {out}");
                // `/` holds the workspace too, refused as such before this review.
                assert!(var == "/" || out.contains("DOCKER_CONFIG"), "{who}: {out}");
            }
            let ws = fx.ws();
            let owner = nobody.then_some(65534);
            let out = sandbox_fixture::coder_as(fx.root(), owner, &ws, &bin, &[], "go")
                .env("DOCKER_CONFIG", var)
                .output_bounded();
            let env: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{who}: no envelope ({e}): {out:?}"));
            let ran = ws.join("AGENT-RAN").exists();
            if control {
                assert!(ran, "{who}: control: {env}");
                continue;
            }
            assert!(!ran, "{who}: the agent ran: {env}");
            assert_eq!(env["error_kind"], "config_error", "{who}: {env}");
            let named = env.to_string().contains("DOCKER_CONFIG");
            assert!(var == "/" || named, "{who}: {env}");
        }
    }
}

/// The module a held script's `node -r` (`--require`, `--import`) preloads: round
/// twenty-six's second review taught the held scripts' reader to pass over an
/// interpreter's option value to find the file run, and so passed over `./tools/hook.js`
/// in `node -r ./tools/hook.js tools/fmt.js`, which node runs first (before, the hook was
/// taken for the file and `tools/fmt.js` was the one missed). Found by the lead's last
/// pass. Each spelling: the agent appends to the hook, the user's `git fmt` runs the held
/// `tools/ci.sh`. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_module_a_held_scripts_node_preloads_is_not_the_agents_to_write() {
    for (name, line) in [
        ("node -r", "node -r ./tools/hook.js tools/fmt.js"),
        (
            "node --require",
            "node --require ./tools/hook.js tools/fmt.js",
        ),
        (
            "node --import",
            "node --import ./tools/hook.js tools/fmt.js",
        ),
    ] {
        let ci = format!("{line}\n");
        let files = [
            ("tools/hook.js", "// the user's hook\n"),
            ("tools/fmt.js", "// the user's formatter\n"),
            ("tools/ci.sh", ci.as_str()),
        ];
        let attack = "printf \"require('fs').writeFileSync('%s', '')\\n\" \"$M\" >> tools/hook.js; \
                      echo PLANTED";
        sandbox_fixture::checks_attack(&REPO, KNOWN_OPEN, name, &files, "!sh tools/ci.sh", attack);
    }
}
