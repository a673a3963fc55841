//! Round twenty-two's review: the parts of the sandbox little attacked so far, attacked by
//! someone who did not write them (the egress proxy, the seccomp table, inherited
//! descriptors and `/proc`, the CLI's own `git`, what coder prints of the agent's text).
//! Every attack runs through the built binary, as root and as uid 65534 where the sandbox
//! decides, each with its control.
//!
//! Found open when this review started, closed with it (each test failed on the branch's
//! start, `f91ccfe`):
//! * **The CLI's own git dir in the tool commands' `TMPDIR`.** Around every Bash call the
//!   CLI (2.1.330) snapshots the work tree with its own `git` (`update-index --add`,
//!   `status`, `write-tree`), in its own Landlock domain, with `GIT_DIR` (and
//!   `GIT_CONFIG_GLOBAL`) in `$CLAUDE_CODE_TMPDIR/claude-<uid>/bash-edit-diff/<id>/`: the
//!   run's `TMPDIR`, which tool commands write. A tool command that added a clean filter
//!   to that git dir's `config` and `* filter=…` to its `info/attributes` had the CLI's git
//!   run it outside the nested domain, where it wrote forged stream events into the CLI's
//!   stdout through `/proc/<CLI>/fd/1`: the very thing the nesting exists to stop. The
//!   name is an empty file held read-only now, so the CLI makes no such git dir.
//! * **C1 controls in `--log-metrics`.** The metrics line coder prints on stderr quotes the
//!   agent's text (a denial's path, a tool call's name) as serde writes it, which escapes
//!   C0 only: a U+009B (CSI to some terminals) from a tool result went to the terminal raw.
//!   Round twenty-one escaped the envelope, `coder runs --json` and `coder fs`; this line
//!   was left.
//!
//! Looked at and held (probed by hand with `coder sandbox`, root and uid 65534, unless a
//! test is named):
//! * the proxy's matching of what a request names against the allow-list
//!   ([`the_proxy_takes_no_other_spelling_of_an_allowed_address`]);
//! * the i386 system-call ABI (`int 0x80` `unshare(CLONE_NEWUSER)` from a static probe:
//!   the process is killed by the filter's architecture check); `socketpair` of every
//!   family but AF_UNIX fails; `open_tree_attr`, `quotactl_fd`, `fanotify_init`,
//!   `vhangup` fail (no capability) though the table does not name them;
//! * `TIOCSTI` on the terminal `coder sandbox` runs under (no `/dev/tty`, `EPERM`);
//! * the CLI's other `git` calls: at the workspace's top with `core.fsmonitor`,
//!   `core.hooksPath` and the hooks overridden; none ran in a repository the agent made
//!   and `cd`-ed into (`strace` of a replayed run).
//!
//! Seen and not examined: the CLI's messaging socket (`$XDG_RUNTIME_DIR/cc-socks/<pid>.sock`,
//! the run's `TMPDIR`), which tool commands may connect to by design; what it does with a
//! message's `file_attachments` (the CLI writes them, in its own domain) was not read.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::Bounded;
use common::sandbox_fixture::{self, owners};
use serde_json::Value;

/// A fake `claude` whose one Bash call gets a result naming a path with C1 controls (as
/// `cat` prints a name the agent chose), under a tool name with them too.
const C1_CLAUDE: &str = r#"#!/bin/bash
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac; shift
done
cat >/dev/null
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","tools":["Bash"],"model":"m"}'
echo '{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash\u009b2J","input":{"command":"cat x"}}]},"session_id":"'"$sid"'"}'
echo '{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"cat: /w/\u009b2J\u009b31mevil: Permission denied","is_error":true}]},"session_id":"'"$sid"'"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'"$sid"'","num_turns":1}'
"#;

/// `--log-metrics` prints the run's metrics on stderr, a terminal as often as not; they
/// quote the agent's text. Confined (the denial is recognised only there), as root and as
/// uid 65534: no raw C1 control reaches stderr. Control: the decoded line holds the
/// agent's U+009B, so the text did reach it and is escaped, not dropped.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_metrics_line_prints_no_c1_control_of_the_agents() {
    for owner in owners() {
        let (_dir, root) = sandbox_fixture::temp_root("coder-round22-");
        for d in ["ws", "home", "bin"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let bin = root.join("bin/claude");
        std::fs::write(&bin, C1_CLAUDE).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        if let Some(uid) = owner {
            sandbox_fixture::chown_tree(&root, uid);
        }
        let out = sandbox_fixture::coder_as(
            &root,
            owner,
            &root.join("ws"),
            &bin,
            &["--log-metrics"],
            "say done",
        )
        .output_bounded();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{owner:?}: {}",
            sandbox_fixture::printed(&out)
        );
        let line = stderr
            .lines()
            .find(|l| l.starts_with("{\"wall_ms\""))
            .unwrap_or_else(|| panic!("{owner:?}: no metrics line: {stderr}"));
        let metrics: Value = serde_json::from_str(line).unwrap();
        let quoted = metrics["sandbox_denials"].to_string() + &metrics["tool_calls"].to_string();
        assert!(
            quoted.contains('\u{9b}'),
            "{owner:?}: control: the agent's text is in the metrics: {line}"
        );
        assert!(
            !stderr.contains('\u{9b}'),
            "{owner:?}: a raw C1 control of the agent's reached stderr: {stderr:?}"
        );
    }
}

/// A Bash call starts a process that adds a clean filter to every git dir the CLI makes
/// for its snapshots (`$CLAUDE_CODE_TMPDIR/claude-*/bash-edit-diff/*/`); the next Bash call
/// changes files, and the CLI's own `git update-index --add` runs the filter, which notes
/// `RAN-BY-filter` and writes a forged `result` line (`INJECTED-<pid>`) into the CLI's
/// stdout. Real CLI, offline against `fixtures/sandbox/cli_git_dir_filter.json`. Confined,
/// as root and as uid 65534: the filter never runs, nothing forged reaches the envelope,
/// and the Bash tool still works (the third call answers). Control: unconfined, with the
/// same `TMPDIR`, the filter runs in the CLI's domain and its lines are in the envelope.
/// The CLI gives up its snapshot when its git is slow (a loaded machine: the tool result
/// says `"bashEditDiff":{…"unavailable":true}`), and then nothing runs a filter: such a
/// control is tried again, up to [`CONTROL_TRIES`] times.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_clis_own_git_runs_no_filter_a_tool_command_planted() {
    for owner in owners() {
        let who = format!("{owner:?} confined=true");
        let (stdout, env, ran) = filter_attack(owner, true);
        assert_eq!(env["result"], "The honest answer.", "{who}: {env}");
        assert!(
            ran.is_empty() && !injected(&stdout),
            "{who}: the CLI's own git ran the tool command's filter: {ran:?} {stdout}"
        );
        let who = format!("{owner:?} confined=false");
        let mut tries = Vec::new();
        for _ in 0..CONTROL_TRIES {
            let (stdout, _, ran) = filter_attack(owner, false);
            if injected(&stdout) && ran.contains("RAN-BY-filter") {
                break;
            }
            let gave_up = stdout.contains("\"unavailable\":true");
            tries.push(format!("{ran:?} (snapshot given up: {gave_up}) {stdout}"));
            assert!(
                gave_up && tries.len() < CONTROL_TRIES,
                "{who}: control: the CLI's git runs the filter, whose lines get in: {tries:#?}"
            );
        }
    }
}

/// How many times the filter attack's control is run before it counts as broken.
const CONTROL_TRIES: usize = 4;

/// One run of the filter attack as `owner`, confined or not: its stdout, its envelope,
/// and what the filter noted in the workspace (`forge-ran`).
fn filter_attack(owner: Option<u32>, confined: bool) -> (String, Value, String) {
    let run = sandbox_fixture::cli_probe(
        owner,
        confined,
        "cli_git_dir_filter.json",
        "plant a filter in the CLI's git dir",
        |root| {
            sandbox_fixture::must_run(
                Command::new("git")
                    .args(["init", "-q"])
                    .arg(root.join("ws")),
            );
            Vec::new()
        },
    );
    let (stdout, who) = (&run.stdout, &run.who);
    assert!(
        stdout.contains("PLANTED") && stdout.contains("TRIGGERED"),
        "{who}: the Bash calls did not all run: {stdout}"
    );
    let ran = std::fs::read_to_string(run.root.join("ws/forge-ran")).unwrap_or_default();
    (run.stdout.clone(), run.envelope.clone(), ran)
}

/// Whether the forged `INJECTED-<pid>` result line reached the output.
fn injected(stdout: &str) -> bool {
    stdout
        .match_indices("INJECTED-")
        .any(|(i, m)| stdout[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
}

/// The egress proxy's matching, through `coder sandbox --allow-host 127.0.0.1:PORT`, as
/// root and as uid 65534: other spellings of the allowed address (`[::ffff:127.0.0.1]`,
/// `2130706433`, `127.1`, `0x7f.0.0.1`, `localhost`), another port and a URI with a user
/// part get no tunnel; the allowed one and its harmless variants (a trailing dot, `+PORT`)
/// reach the listener, and only they do. Held when this review started: a regression
/// guard for the proxy's parser (`sandbox::allow`).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_proxy_takes_no_other_spelling_of_an_allowed_address() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (accepted, reached) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            drop(stream);
            if accepted.send(()).is_err() {
                return;
            }
        }
    });
    let allowed = [
        format!("CONNECT 127.0.0.1:{port}"),
        format!("CONNECT 127.0.0.1.:{port}"),
        format!("CONNECT 127.0.0.1:+{port}"),
    ];
    let refused = [
        format!("CONNECT [::ffff:127.0.0.1]:{port}"),
        format!("CONNECT 2130706433:{port}"),
        format!("CONNECT 127.1:{port}"),
        format!("CONNECT 0x7f.0.0.1:{port}"),
        format!("CONNECT localhost:{port}"),
        format!("CONNECT 127.0.0.1:{}", port.wrapping_add(1)),
        format!("GET http://127.0.0.1:{port}@evil.example/"),
    ];
    let probe = allowed
        .iter()
        .chain(&refused)
        .map(|line| {
            format!(
                "exec 3<>/dev/tcp/127.0.0.1/3128; printf '%s HTTP/1.1\\r\\n\\r\\n' '{line}' >&3; \
                 read -r status <&3; echo \"{line} => $status\"; exec 3<&-"
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    for owner in owners() {
        let (_dir, root) = sandbox_fixture::temp_root("coder-round22-proxy-");
        for d in ["ws", "home"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        if let Some(uid) = owner {
            sandbox_fixture::chown_tree(&root, uid);
        }
        let allow = format!("127.0.0.1:{port}");
        let out = sandbox_fixture::bash_sandbox(
            owner,
            &root.join("ws"),
            &root.join("home"),
            &["--allow-host", &allow],
            &probe,
        )
        .output_bounded();
        let text = sandbox_fixture::printed(&out);
        for line in &allowed {
            assert!(
                text.contains(&format!("{line} => HTTP/1.1 200")),
                "{owner:?}: control: {line} is the allowed destination: {text}"
            );
        }
        for line in &refused {
            let answer = format!("{line} => HTTP/1.1 ");
            let status = text
                .find(&answer)
                .map(|i| &text[i + answer.len()..i + answer.len() + 3]);
            assert!(
                matches!(status, Some("403") | Some("400")),
                "{owner:?}: {line} was not refused: {text}"
            );
        }
        // Each allowed request reached the listener once (its tunnel was opened before
        // the 200 was sent), and nothing else did.
        for line in &allowed {
            reached
                .recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("{owner:?}: {line} never reached the listener"));
        }
        assert!(
            reached.try_recv().is_err(),
            "{owner:?}: a refused request reached the listener: {text}"
        );
    }
}

/// The CLI's own scratch: `$CLAUDE_CODE_TMPDIR/claude-<uid>/` (task outputs it reads back,
/// its snapshot git dirs, bundled skills, hook templates) and `$XDG_RUNTIME_DIR/cc-socks/`
/// (its messaging socket), which the CLI's own sandbox keeps from tool commands. A Bash
/// call appends to a running background task's output, makes a file in `claude-<uid>/`,
/// in `cc-socks/` and in an `fswatch-probe-*` directory. Real CLI, offline against
/// `fixtures/sandbox/cli_scratch_writes.json`. Confined, as root and as uid 65534: every
/// write is denied, the background task completes with its own output, and later Bash
/// calls run and keep their working directory (`cd sub` is seen by the next call). Control:
/// unconfined, every write lands.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn tool_commands_do_not_write_the_clis_own_scratch() {
    let targets = [
        "/planted",
        "/tasks/",
        "cc-socks/sock-planted",
        "/fswatch-probe",
    ];
    for owner in owners() {
        for confined in [true, false] {
            // Unconfined, the CLI's scratch is then `root/tmp` (not the host's `/tmp`).
            let run = sandbox_fixture::cli_probe(
                owner,
                confined,
                "cli_scratch_writes.json",
                "write the CLI's scratch",
                |_| Vec::new(),
            );
            let (stdout, who, env) = (&run.stdout, &run.who, &run.envelope);
            assert!(
                stdout.contains("PROBED") && stdout.contains("WAITED"),
                "{who}: the Bash calls did not all run: {stdout}"
            );
            let lines: Vec<&str> = stdout
                .split("\\n")
                .flat_map(|l| l.split('"'))
                .filter(|l| l.starts_with("WROTE ") || l.starts_with("DENIED "))
                .collect();
            for target in targets {
                let wrote = lines
                    .iter()
                    .any(|l| l.starts_with("WROTE") && l.contains(target));
                let denied = lines
                    .iter()
                    .any(|l| l.starts_with("DENIED") && l.contains(target));
                if confined {
                    assert!(
                        denied && !wrote,
                        "{who}: a tool command wrote the CLI's {target}: {lines:?}"
                    );
                } else {
                    assert!(wrote, "{who}: control: {target} is written: {lines:?}");
                }
            }
            if !confined {
                continue;
            }
            assert_eq!(env["result"], "The honest answer.", "{who}: {env}");
            let done = env["all_messages"].as_array().unwrap().iter().any(|m| {
                m["subtype"] == "task_notification"
                    && m["status"] == "completed"
                    && m["output_file"]
                        .as_str()
                        .is_some_and(|f| f.ends_with(".output"))
            });
            assert!(
                done,
                "{who}: the background task did not complete: {stdout}"
            );
            assert!(
                stdout.contains("/ws/sub\\n") || stdout.contains("/ws/sub\""),
                "{who}: the working directory a Bash call left is lost: {stdout}"
            );
            assert!(
                !stdout.contains("-cwd: Permission denied"),
                "{who}: the shell could not note its working directory: {stdout}"
            );
        }
    }
}
