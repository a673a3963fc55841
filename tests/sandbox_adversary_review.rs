//! An adversarial review of what surrounds the sandbox rather than its mounts: the CLI's
//! per-run config dir, coder's state directory and the files coder reads back after a run.
//! Written as an attacker who has read the code; every attack runs as root and as uid
//! 65534 where the attack applies, each with a control (`danger-full-access`, or the same
//! layout without the trick) showing that the payload does land without the protection.
//!
//! Found open when this review started, closed with it:
//! * the run's `CLAUDE_CONFIG_DIR` is fresh, so none of the names the sandbox keeps
//!   read-only there (`settings.json`, `agents/`, …) existed and none was held: a tool
//!   command wrote `settings.json` with a hook, the CLI (2.1.330) reloaded it mid-run and
//!   ran the hook with `/bin/sh` in its own Landlock domain, outside the nested one of tool
//!   commands, where it could write a forged event into the CLI's stdout; and the config
//!   dir itself, in a parent the agent may write, could be renamed away and replaced;
//! * `--transcript` and a SQLite `--store` were refused inside the workspace only: in
//!   `/tmp` with `--allow-tmp` (or a `--write` dir) the agent rewrote them;
//! * a `projects` in the config dir replaced by a symlink made coder copy a file of the
//!   session's name from wherever it pointed into its session store, which the next
//!   resume handed to the agent;
//! * a state directory inside a default read grant (`/opt`, `/etc`, a home toolchain)
//!   showed every run's transcripts and sessions to every agent;
//! * a directory the agent made unreadable in its run's temp or config dir kept the run's
//!   directory in coder's state for good.
//!
//! * a host process's UNIX socket in the shared `/tmp` (tmux, X11, ssh-agent, an
//!   editor's IPC) was reachable with `--allow-tmp`: those present at the start are now
//!   covered (one made during the run still is reachable).
//!
//! Two held and are kept as regression guards: an ask server the agent starts with a
//! stdin that never closes does not outlive a confined run; and the names of the CLI's
//! config dir that its own sandbox keeps and coder does not hold (`plugins/`, `hooks/`,
//! `session-env/`, `shell-snapshots/`, `rules/`, `output-styles/`, `workflows/`) run
//! nothing outside the nested domain of tool commands during a run.
//!
//! `KNOWN_OPEN` lists attacks still open (none today): an attack on it asserts that its
//! payload still lands, so the list can only shrink.

mod common;

use std::path::Path;

use common::Bounded;
use common::sandbox_fixture::{self, NOBODY};
use serde_json::Value;

/// Attacks of this file measured open today.
const KNOWN_OPEN: &[&str] = &[];

/// A tree for runs of a fake CLI as one arm's user: workspace `ws`, `home`, coder's
/// `state`, in `/var/tmp` (out of the host's `/tmp` that `--allow-tmp` grants).
struct Tree {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    owner: Option<u32>,
}

impl Tree {
    fn new(owner: Option<u32>) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("coder-adversary-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        for d in ["ws", "home", "state", "xdg"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Tree {
            _dir: dir,
            root,
            owner,
        }
    }

    /// Runs a fake CLI whose payload is `payload` (in the CLI's own domain, as `coder`
    /// would start it) with `extra` flags; returns the envelope.
    fn run(&self, extra: &[&str], payload: &str) -> Value {
        let bin = self.root.join("fake-claude");
        std::fs::write(&bin, sandbox_fixture::payload_claude(payload)).unwrap();
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        if self.owner.is_some() {
            sandbox_fixture::give_to_nobody(&self.root);
        }
        let ws = self.root.join("ws");
        let out = sandbox_fixture::coder_as(&self.root, self.owner, &ws, &bin, extra, "go")
            .output_bounded();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"))
    }
}

/// [`Tree::run`] in a tree of its own.
fn run_payload(owner: Option<u32>, extra: &[&str], payload: &str) -> Value {
    Tree::new(owner).run(extra, payload)
}

fn who(owner: Option<u32>) -> &'static str {
    if owner.is_some() { "nobody" } else { "root" }
}

/// What the config-dir payload managed: `WROTE-<name>` for each name it created or
/// replaced in `$CLAUDE_CONFIG_DIR` (for the directories the CLI lists: a directory made
/// there, over whatever holds the name, or the held name written), `WROTE-moved` when it
/// renamed the dir itself away and put a new one with a `settings.json` in its place.
const CONFIG_DIR_PAYLOAD: &str = r#"c="$CLAUDE_CONFIG_DIR"
for n in settings.json settings.local.json CLAUDE.md; do
  rm -f "$c/$n" 2>/dev/null; echo '{"hooks":{}}' > "$c/$n" 2>/dev/null && echo "WROTE-$n"
done
for n in agents commands skills; do
  { mkdir -p "$c/$n/x" || { rm -rf "$c/$n" && mkdir -p "$c/$n/x"; } \
    || { printf 'x' > "$c/$n" && test -s "$c/$n"; }; } 2>/dev/null && echo "WROTE-$n"
done
mv "$c" "$c.moved" 2>/dev/null && mkdir "$c" && echo '{"hooks":{}}' > "$c/settings.json" \
  && echo WROTE-moved"#;

const CONFIG_NAMES: [&str; 7] = [
    "settings.json",
    "settings.local.json",
    "CLAUDE.md",
    "agents",
    "commands",
    "skills",
    "moved",
];

/// The CLI reloads `$CLAUDE_CONFIG_DIR/settings.json` during a run and runs its hooks
/// with `/bin/sh` in its own Landlock domain, outside the nested one of tool commands
/// (measured with 2.1.330: a `PreToolUse` hook written by one Bash call ran before the
/// next and wrote into `/proc/<CLI>/fd/1`). So no name the CLI loads code or instructions
/// from may be created, replaced or removed there, and the dir may not be renamed away
/// and replaced, by the agent (here the fake CLI's own payload, which is no more
/// privileged than a tool command in this respect). Control: unconfined, every one of
/// them lands.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_config_dir_names_the_cli_loads_code_from_cannot_be_planted() {
    common::require_root_and_user_namespaces();
    let name = "config dir names";
    for owner in [None, Some(NOBODY)] {
        let env = run_payload(owner, &[], CONFIG_DIR_PAYLOAD);
        let result = env["result"].as_str().unwrap_or_default().to_owned();
        assert_eq!(env["success"], true, "{}: {env}", who(owner));
        let landed: Vec<&str> = CONFIG_NAMES
            .iter()
            .copied()
            .filter(|n| result.contains(&format!("WROTE-{n}")))
            .collect();
        if KNOWN_OPEN.contains(&name) {
            assert!(
                !landed.is_empty(),
                "{}: now blocked, take it off KNOWN_OPEN",
                who(owner)
            );
        } else {
            assert!(
                landed.is_empty(),
                "{}: the agent planted {landed:?}: {env}",
                who(owner)
            );
        }

        let env = run_payload(
            owner,
            &["--sandbox", "danger-full-access"],
            CONFIG_DIR_PAYLOAD,
        );
        let result = env["result"].as_str().unwrap_or_default();
        for n in CONFIG_NAMES {
            assert!(
                result.contains(&format!("WROTE-{n}")),
                "{}: control: {n} did not land unconfined: {env}",
                who(owner)
            );
        }
    }
}

/// The whole attack with the real CLI, offline against a cassette
/// (`fixtures/sandbox/hook_forged_result.json`): a Bash call writes a `PreToolUse` hook
/// into `$CLAUDE_CONFIG_DIR/settings.json`, a second waits for the CLI to reload it, and
/// the hook, run before the third, writes a forged `result` line (`INJECTED-<CLI pid>`)
/// into the CLI's stdout through `/proc/$PPID/fd/1`. Confined, the settings file is held
/// read-only and the run's answer is the model's. Control: unconfined, the forged line
/// reaches coder. Runs as the test's user (root) only: the real CLI is installed for it.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_hook_planted_in_the_clis_config_dir_cannot_forge_its_result() {
    let claude = common::real_claude();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/hook_forged_result.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let run = |extra: &[&str]| {
        let fake = common::Fake::new(serde_json::json!([]));
        let home = fake.root().join("home");
        std::fs::create_dir_all(&home).unwrap();
        fake.coder()
            .env("HOME", &home)
            .claude_bin(claude.clone())
            .args(["--backend", &cassette, "--return-all-messages"])
            .args(extra)
            .arg("plant a hook")
            .run()
    };
    // The forged line's text: `INJECTED-` and a pid (the cassette itself holds the bare word).
    let injected = |out: &str| {
        out.match_indices("INJECTED-")
            .any(|(i, m)| out[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    let confined = run(&[]);
    confined.assert_success("The honest answer.");
    assert!(!injected(&confined.stdout), "{}", confined.explain());
    assert!(
        confined.stdout.contains("Read-only file system"),
        "the plant was refused by the mount: {}",
        confined.explain()
    );
    let open = run(&["--sandbox", "danger-full-access"]);
    assert!(
        injected(&open.stdout),
        "control: unconfined, the hook runs and its forged line gets in: {}",
        open.explain()
    );
}

/// The names of the CLI's config dir that its own sandbox keeps from tool commands and
/// coder does not hold (SECURITY.md, "Names of the config dir coder does not hold"), each
/// planted by a Bash call with everything that could run code, through the real CLI
/// (2.1.330) offline against a cassette (`fixtures/sandbox/config_names_forged_result.json`):
/// a line appended to the shell snapshot every later Bash command sources; an installed
/// plugin with a registered marketplace and a `PreToolUse` hook; `hooks/hooks.json` and
/// `hooks/PreToolUse.sh`; a `session-env` hook file; files in `rules/`, `output-styles/`,
/// `workflows/`. Each runs `forge.sh`, which notes the vehicle that ran it and writes a
/// forged `result` line (`INJECTED-<pid>`) into the CLI's stdout through `/proc/$PPID/fd/1`.
/// Confined, for root and for uid 65534: the plant lands, only the snapshot's line ever
/// runs (no name made the CLI run anything in its own domain), and it runs in the nested
/// domain of tool commands, so the answer is the model's. Control: unconfined, the same
/// snapshot line runs in the CLI's domain and its forged line becomes the run's result.
/// A regression guard for a newer CLI: nothing here is held by coder, so no fix makes it
/// pass; it failing means one of these names came to matter.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn names_the_cli_keeps_in_its_config_dir_run_nothing_outside_the_nested_domain() {
    common::require_root_and_user_namespaces();
    let claude = common::real_claude();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/config_names_forged_result.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let injected = |out: &str| {
        out.match_indices("INJECTED-")
            .any(|(i, m)| out[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    for owner in [None, Some(NOBODY)] {
        for confined in [true, false] {
            let tree = Tree::new(owner);
            if owner.is_some() {
                sandbox_fixture::give_to_nobody(&tree.root);
            }
            let mut extra = vec!["--backend", &cassette, "--return-all-messages"];
            if !confined {
                extra.extend(["--sandbox", "danger-full-access"]);
            }
            let out = sandbox_fixture::coder_as(
                &tree.root,
                owner,
                &tree.root.join("ws"),
                &claude,
                &extra,
                "plant in the config dir",
            )
            .output_bounded();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let env: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{}: no envelope ({e}): {out:?}", who(owner)));
            assert!(
                stdout.contains("SNAPSHOTS-1") && stdout.contains("PLANTED"),
                "{} (confined={confined}): the plant did not land: {stdout}",
                who(owner)
            );
            let ran = std::fs::read_to_string(tree.root.join("ws/forge-ran")).unwrap_or_default();
            if !confined {
                assert!(
                    injected(&stdout),
                    "{}: control: unconfined, the snapshot's forged line gets in: {stdout}",
                    who(owner)
                );
                continue;
            }
            assert_eq!(env["result"], "The honest answer.", "{}: {env}", who(owner));
            assert!(!injected(&stdout), "{}: forged: {stdout}", who(owner));
            let vehicles: std::collections::BTreeSet<&str> = ran.lines().collect();
            assert_eq!(
                vehicles,
                ["RAN-BY-snapshot"].into(),
                "{}: only the snapshot, sourced by the tool's own shell, runs: {stdout}",
                who(owner)
            );
        }
    }
}

/// A directory in the host's `/tmp` that the arm's user owns, removed on drop.
fn shared_tmp(owner: Option<u32>) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("coder-adversary-")
        .tempdir_in("/tmp")
        .unwrap();
    if owner.is_some() {
        sandbox_fixture::give_to_nobody(dir.path());
    }
    dir
}

/// `--transcript` and a SQLite `--store` are refused inside the workspace, where the agent
/// could rewrite them: the transcript a user reads afterwards, the store whose slots,
/// cooldowns and routing ledger every later run trusts. Every other grant the agent may
/// write reaches them just as well: here `/tmp` through `--allow-tmp` (a `--write` of their
/// directory is the same). Both are refused there too, before anything runs, and the
/// payload never lands. Controls: the same paths without `--allow-tmp` run (the agent does
/// not see them); unconfined, the payload lands.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_transcript_or_store_in_a_writable_grant_is_refused() {
    common::require_root_and_user_namespaces();
    for owner in [None, Some(NOBODY)] {
        for (flag, file) in [("--transcript", "t.jsonl"), ("--store", "coder.db")] {
            let tmp = shared_tmp(owner);
            let path = tmp.path().join(file);
            let target = path.to_str().unwrap();
            let payload = format!("echo FORGED > '{target}' && echo WROTE");
            let name = format!("{flag} in a writable grant");
            let landed = || {
                std::fs::read(&path)
                    .unwrap_or_default()
                    .starts_with(b"FORGED\n")
            };

            let env = run_payload(owner, &["--allow-tmp", flag, target], &payload);
            if KNOWN_OPEN.contains(&name.as_str()) {
                assert!(landed(), "{}: {name}: now blocked: {env}", who(owner));
            } else {
                assert_eq!(
                    env["error_kind"],
                    "config_error",
                    "{}: {name}: {env}",
                    who(owner)
                );
                let error = env["error"].as_str().unwrap_or_default();
                assert!(error.contains(target), "{}: {name}: {env}", who(owner));
                assert!(
                    !landed(),
                    "{}: {name}: the payload landed: {env}",
                    who(owner)
                );
            }

            let _ = std::fs::remove_file(&path);
            let env = run_payload(owner, &[flag, target], &payload);
            assert_eq!(
                env["success"],
                true,
                "{}: {name}: control: {env}",
                who(owner)
            );
            assert!(
                !landed(),
                "{}: {name}: control: landed confined: {env}",
                who(owner)
            );

            let _ = std::fs::remove_file(&path);
            let env = run_payload(
                owner,
                &["--sandbox", "danger-full-access", flag, target],
                &payload,
            );
            assert!(
                landed(),
                "{}: {name}: control: unconfined: {env}",
                who(owner)
            );
        }
    }
}

/// After each attempt coder copies the session's history out of the run's config dir into
/// its session store, from which a resume copies it back into the next run's config dir.
/// The agent may write that config dir: a `projects` it replaced by a symlink made coder
/// (outside the sandbox) look for the history wherever the symlink pointed, and copy a file
/// of that name from there into the store, where the next resume handed it to the agent.
/// Here the file is a session log of the user's own CLI (`~/.claude/projects/*/`) with the
/// same id. The copy now refuses a symlinked `projects`. Control: the same run whose
/// `projects` is a real directory holding the history keeps it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_symlinked_projects_dir_does_not_make_coder_copy_a_file_from_elsewhere() {
    common::require_root_and_user_namespaces();
    let name = "symlinked projects";
    for owner in [None, Some(NOBODY)] {
        for symlink in [true, false] {
            let tree = Tree::new(owner);
            let first = tree.run(&[], "true");
            let id = first["SESSION_ID"].as_str().unwrap().to_owned();
            let outside = tree.root.join("home/.claude/projects/-elsewhere");
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(outside.join(format!("{id}.jsonl")), "USER-SECRET\n").unwrap();
            let payload = if symlink {
                format!(
                    "rm -rf \"$CLAUDE_CONFIG_DIR/projects\" && \
                     ln -s '{}' \"$CLAUDE_CONFIG_DIR/projects\" && echo LINKED",
                    outside.parent().unwrap().display()
                )
            } else {
                format!(
                    "mkdir -p \"$CLAUDE_CONFIG_DIR/projects/-x\" && \
                     echo OWN-HISTORY > \"$CLAUDE_CONFIG_DIR/projects/-x/{id}.jsonl\" && echo LINKED"
                )
            };
            let env = tree.run(&["--session-id", &id], &payload);
            assert!(
                env["result"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("LINKED"),
                "{}: {env}",
                who(owner)
            );
            let kept = tree.root.join(format!("state/sessions/{id}.jsonl"));
            let kept = std::fs::read_to_string(&kept).unwrap_or_default();
            if !symlink {
                assert_eq!(kept, "OWN-HISTORY\n", "{}: control: {env}", who(owner));
            } else if KNOWN_OPEN.contains(&name) {
                assert!(kept.contains("USER-SECRET"), "{}: now blocked", who(owner));
            } else {
                assert!(
                    !kept.contains("USER-SECRET"),
                    "{}: coder copied the file the symlink led to: {env}",
                    who(owner)
                );
            }
        }
    }
}

/// coder's state directory (`CODER_STATE_DIR`) inside a tree every run may read (`/opt`,
/// `/etc`, `/usr`, a home toolchain): every agent read every run's transcripts and
/// sessions there, and could hold the locks other runs wait for. Such a run is refused,
/// naming the grant, before anything runs. Controls: the same transcript in a state
/// directory elsewhere is out of the agent's sight and the run works; unconfined, the
/// agent reads it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_state_directory_in_a_default_read_grant_is_refused() {
    let name = "state dir in /opt";
    for nobody in sandbox_fixture::arms() {
        let who = if nobody { "nobody" } else { "root" };
        let opt = tempfile::Builder::new()
            .prefix("coder-adversary-state-")
            .tempdir_in("/opt")
            .unwrap();
        let script = "cat \"$S/runs/old.jsonl\" 2>/dev/null; echo RAN";
        let plant = |state: &Path| {
            sandbox_fixture::write(&state.join("runs/old.jsonl"), "OTHER-RUN-TRANSCRIPT\n");
        };
        plant(opt.path());
        let fx = sandbox_fixture::Fixture::new("coder-adversary-", nobody, &["ws", "home"])
            .with_var("CODER_STATE_DIR", opt.path())
            .with_var("S", opt.path());
        fx.own(fx.root());
        fx.own(opt.path());
        let (rc, out) = fx.sandbox(&[], script);
        if KNOWN_OPEN.contains(&name) {
            assert!(
                out.contains("OTHER-RUN-TRANSCRIPT"),
                "{who}: now blocked: {out}"
            );
        } else {
            assert_ne!(rc, 0, "{who}: not refused: {out}");
            assert!(
                out.contains("every agent may read") && !out.contains("RAN"),
                "{who}: the agent ran: {out}"
            );
        }
        let (_, out) = fx.sandbox(&["--mode", "danger-full-access"], script);
        assert!(
            out.contains("OTHER-RUN-TRANSCRIPT"),
            "{who}: control: unconfined: {out}"
        );

        let state = fx.root().join("state");
        plant(&state);
        fx.own(&state);
        let fx = fx.with_var("CODER_STATE_DIR", &state).with_var("S", &state);
        let (rc, out) = fx.sandbox(&[], script);
        assert!(
            rc == 0 && out.contains("RAN") && !out.contains("OTHER-RUN-TRANSCRIPT"),
            "{who}: control: a state directory elsewhere: {out}"
        );
    }
}

/// The directories coder removes after a run, and the next run prunes when a coder died
/// (the sandbox's run directory with the agent's `$TMPDIR`, the CLI's config dir in
/// `cli-runs/`): an agent running as a non-root user made a directory in them unreadable
/// (`chmod 000`), `remove_dir_all` stopped there, and the run's directory, with whatever
/// the agent wrote in it, stayed in coder's state for good (every later run failed to
/// prune it too). Both are now removed whole. The payload really ran (`LOCKED`); as root
/// the permissions never stopped the removal, so that arm is a regression guard.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_directory_the_agent_made_unreadable_is_still_removed() {
    common::require_root_and_user_namespaces();
    let name = "unreadable run dir";
    let payload = "mkdir -p \"$TMPDIR/x/y\" \"$CLAUDE_CONFIG_DIR/q/r\" && \
                   chmod 000 \"$TMPDIR/x\" \"$CLAUDE_CONFIG_DIR/q\" && echo LOCKED && \
                   echo \"HOME=$CLAUDE_CONFIG_DIR\"";
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::new(owner);
        let env = tree.run(&[], payload);
        assert!(
            env["result"]
                .as_str()
                .unwrap_or_default()
                .contains("LOCKED"),
            "{}: the payload did not run: {env}",
            who(owner)
        );
        // The CLI's home may be on a tmpfs shared with other runs (`/dev/shm/coder-<uid>`):
        // this run's own, by the name it reported.
        let result = env["result"].as_str().unwrap_or_default();
        let home = result.split("HOME=").nth(1).unwrap_or_default();
        let home = Path::new(home.split_whitespace().next().unwrap_or_default());
        let mut left: Vec<String> = ["state/sandbox", "state/cli-runs"]
            .iter()
            .flat_map(|d| std::fs::read_dir(tree.root.join(d)).into_iter().flatten())
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path().display().to_string())
            .collect();
        let run_home = home.parent().unwrap_or(home);
        assert!(run_home.is_absolute(), "no home reported: {env}");
        if run_home.exists() {
            left.push(run_home.display().to_string());
        }
        if KNOWN_OPEN.contains(&name) {
            assert!(!left.is_empty(), "{}: now blocked", who(owner));
        } else {
            assert!(left.is_empty(), "{}: left behind: {left:?}", who(owner));
        }
    }
}

/// The processes, anywhere on the host, whose environment holds `token`.
fn processes_with(token: &str) -> Vec<u32> {
    let needle = token.as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

/// Polls `check` every 20 ms until it holds or `within` passes; whether it held.
fn eventually(within: std::time::Duration, check: impl Fn() -> bool) -> bool {
    let end = std::time::Instant::now() + within;
    while std::time::Instant::now() < end {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    check()
}

/// `coder ask-server` blocks SIGTERM, SIGINT and SIGHUP by design (it must outlive the
/// CLI's stop) and ends when its stdin closes. An agent can start one itself whose stdin
/// never closes (`sleep | coder ask-server`): it must still not outlive a confined run,
/// however the run ends — here by its coder being SIGKILLed mid-run (the PID namespace
/// ends with its init, which dies with coder), and by the run simply finishing. A
/// regression guard: both held when this review started. Control: unconfined, the same
/// server does outlive its killed coder (no PID namespace holds it; a documented limit of
/// `danger-full-access`), so the check can see a leftover.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_ask_server_the_agent_starts_does_not_outlive_the_run() {
    common::require_root_and_user_namespaces();
    for owner in [None, Some(NOBODY)] {
        for (killed, confined) in [(true, true), (false, true), (true, false)] {
            let tree = Tree::new(owner);
            let token = format!("CODER_ADVERSARY_{}", uuid::Uuid::new_v4().simple());
            let payload = format!(
                "(env {token}=1 sleep 1000 | env {token}=1 '{}' ask-server) >/dev/null 2>&1 & \
                 touch '{}'; {}",
                common::CODER,
                tree.root.join("ws/started").display(),
                if killed {
                    "sleep 1000".to_owned()
                } else {
                    format!(
                        "while [ ! -e '{}' ]; do sleep 0.05; done; echo FINISHED",
                        tree.root.join("ws/go").display()
                    )
                }
            );
            let bin = tree.root.join("fake-claude");
            std::fs::write(&bin, sandbox_fixture::payload_claude(&payload)).unwrap();
            std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            if owner.is_some() {
                sandbox_fixture::give_to_nobody(&tree.root);
            }
            let mut cmd = sandbox_fixture::coder_as(
                &tree.root,
                owner,
                &tree.root.join("ws"),
                &bin,
                if confined {
                    &[]
                } else {
                    &["--sandbox", "danger-full-access"]
                },
                "go",
            );
            let mut coder = cmd
                .stdout(std::fs::File::create(tree.root.join("envelope")).unwrap())
                .spawn()
                .unwrap();
            let started = || tree.root.join("ws/started").exists();
            let servers = || processes_with(&token);
            assert!(
                eventually(std::time::Duration::from_secs(30), || started()
                    && servers().len() >= 2),
                "{}: the payload never started its server: {:?}",
                who(owner),
                std::fs::read_to_string(tree.root.join("envelope"))
            );
            if !killed {
                std::fs::write(tree.root.join("ws/go"), "").unwrap();
            } else {
                // `timeout` runs coder as its child: kill coder itself.
                let children =
                    std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", coder.id()))
                        .unwrap();
                for pid in children.split_whitespace() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid.parse().unwrap()),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            let _ = coder.wait();
            if !confined {
                std::thread::sleep(std::time::Duration::from_millis(500));
                let left = servers();
                for pid in &left {
                    let pid = nix::unistd::Pid::from_raw(*pid as i32);
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                }
                assert!(
                    !left.is_empty(),
                    "{}: control: nothing outlived coder",
                    who(owner)
                );
                continue;
            }
            assert!(
                eventually(std::time::Duration::from_secs(10), || servers().is_empty()),
                "{} (killed={killed}): left running: {:?}",
                who(owner),
                servers()
            );
        }
    }
}

impl Tree {
    /// `coder sandbox ARGS --cd ws -- sh -c SCRIPT` as the tree's user: its exit code and
    /// what it printed.
    fn sandbox(&self, args: &[&str], script: &str) -> (i32, String) {
        if self.owner.is_some() {
            sandbox_fixture::give_to_nobody(&self.root);
        }
        let mut cmd = sandbox_fixture::as_arm(self.owner.is_some(), 60, common::CODER);
        cmd.env_clear()
            .env("PATH", sandbox_fixture::PATH)
            .env("HOME", self.root.join("home"))
            .env("CODER_STATE_DIR", self.root.join("state"))
            .arg("sandbox")
            .args(args)
            .arg("--cd")
            .arg(self.root.join("ws"))
            .args(["--", "sh", "-c", script]);
        sandbox_fixture::run_text(&mut cmd)
    }
}

/// A pathname UNIX socket a host process listens on in the shared `/tmp` (a tmux
/// server's, X11's, an ssh-agent's, an editor's IPC socket) was reachable from the sandbox
/// with `--allow-tmp`: Landlock ABI 7 does not mediate `connect()` on it, and the network
/// namespace does not separate pathname sockets. Through tmux or an editor's IPC that is
/// a command run outside the sandbox. The sockets in `/tmp` when the run starts (two
/// levels deep, where tmux, X11 and ssh-agent keep theirs) are now covered with an empty
/// file; one made later stays reachable (SECURITY.md). Controls: unconfined the message
/// arrives; without `--allow-tmp` the socket does not exist for the agent.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_host_socket_in_the_shared_tmp_is_reachable_with_allow_tmp() {
    use std::io::Read;
    common::require_root_and_user_namespaces();
    let name = "host socket in /tmp";
    for owner in [None, Some(NOBODY)] {
        let tmp = shared_tmp(owner);
        let path = tmp.path().join("sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        listener.set_nonblocking(true).unwrap();
        let heard = || {
            let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while std::time::Instant::now() < end {
                if let Ok((mut conn, _)) = listener.accept() {
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                        .unwrap();
                    let mut got = String::new();
                    let _ = conn.read_to_string(&mut got);
                    return got;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            String::new()
        };
        let script = format!(
            "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
             s.connect('{}'); s.sendall(b'ESCAPED')\" && echo SENT",
            path.display()
        );
        let tree = Tree::new(owner);
        let (_, out) = tree.sandbox(&["--allow-tmp"], &script);
        let got = heard();
        if KNOWN_OPEN.contains(&name) {
            assert_eq!(
                got,
                "ESCAPED",
                "{}: now blocked, take it off KNOWN_OPEN: {out}",
                who(owner)
            );
        } else {
            assert_eq!(
                got,
                "",
                "{}: the host listener heard the agent: {out}",
                who(owner)
            );
        }
        let (_, out) = tree.sandbox(&[], &script);
        assert_eq!(
            heard(),
            "",
            "{}: control: reached without --allow-tmp: {out}",
            who(owner)
        );
        let (_, out) = tree.sandbox(&["--mode", "danger-full-access"], &script);
        assert_eq!(
            heard(),
            "ESCAPED",
            "{}: control: unconfined: {out}",
            who(owner)
        );
    }
}
