//! Round fourteen's review of the forked sandbox helper: the first attempt's helper is
//! forked by coder at the run's start instead of exec'd, so until the agent's `execve` the
//! helper and the init it forks (PID 1 of the agent's PID namespace) are copies of coder's
//! memory: its arguments, its environment (provider keys the agent is never given), its
//! heap. Every attack runs as the agent would, inside the sandbox, as root and as uid 65534
//! (the unprivileged user-namespace path), each with a control showing the probe reads
//! what it looks for where nothing stops it.
//!
//! Held (tests here): every file of `/proc/1` and `/proc/1/task/1` the agent can open
//! holds none of coder's secrets (`cmdline` shows the exec'd helper's arguments;
//! `environ`, `mem`, `maps`, `auxv`, `fd/`, `cwd`, `root`, `exe` are refused); `ptrace`,
//! `process_vm_readv`, `pidfd_getfd`, `kcmp` and every signal to init are refused; the
//! agent holds no descriptor but its stdio, with the phase trace (an open file the fork
//! keeps) on; in `--sandbox read-only` the same; a retry's sandbox (an exec'd helper's)
//! and `coder sandbox`'s (a fork of `coder sandbox`, holding the caller's credentials)
//! show none either.
//!
//! Found open, closed with this review: init's memory could be dumped: the agent may
//! raise init's `RLIMIT_CORE` (`prlimit --pid 1`, no ptrace right needed), and the fork,
//! whose documentation said it made itself not dumpable, did not: a core of init written
//! on any crash would have held coder's environment and heap (`coder sandbox`'s init the
//! same, with its caller's credentials). Every sandbox's init is now not dumpable from its
//! fork on (the agent's own `execve` makes the agent dumpable again). No way for the agent
//! to crash init was found (signals to it are refused, and it allocates nothing while it
//! waits), so this closes what a crash would have left.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::Bounded;
use common::review_tree::{self, Tree, who};
use common::sandbox_fixture;

/// What coder's environment holds that the agent's never does, and what its task says.
const SECRET_VAR: &str = "ZAI_API_KEY";
const SECRET: &str = "zai-r14secret-41c7";
const OTHER_VAR: &str = "CODER_R14_PRIVATE";
const OTHER: &str = "var-r14secret-9e02";
const TASK: &str = "task-r14secret-d5a3";
/// The part every marker shares, which the probe greps for.
const MARK: &str = "r14secret";

/// A tree for one arm's runs: workspace `ws`, `home`, coder's `state`, `xdg`, in the
/// temporary directory, given to uid 65534 for that arm.
fn new_tree(owner: Option<u32>) -> Tree {
    Tree::new("coder-r14fork-", std::env::temp_dir(), owner, &[])
}

/// coder started on a fake CLI running `payload`, with the secrets in its environment
/// and its task; not waited for.
fn command(tree: &Tree, extra: &[&str], payload: &str) -> std::process::Command {
    let mut cmd = tree.coder(extra, payload, TASK);
    cmd.env(SECRET_VAR, SECRET).env(OTHER_VAR, OTHER);
    cmd
}

/// Runs it to its end: the envelope's `result` (the payload's output).
fn run(tree: &Tree, extra: &[&str], payload: &str) -> String {
    let envelope = review_tree::envelope(&command(tree, extra, payload).output_bounded());
    envelope["result"]
        .as_str()
        .unwrap_or_else(|| panic!("no result: {envelope}"))
        .to_string()
}

/// Greps every file of `/proc/$P` and `/proc/$P/task/$P` the agent can read (and the
/// links it can resolve) for the markers; prints `FOUND:` with each marker's tail, then
/// `OWNENV:` clean or not (the agent's own environment must not hold them, or the probe
/// proves nothing).
fn grep_script(pid: &str) -> String {
    format!(
        r#"P={pid}
for f in /proc/$P/* /proc/$P/task/$P/* /proc/$P/attr/*; do
  case "$f" in */pagemap|*/mem) continue;; esac
  [ -f "$f" ] && head -c 1000000 "$f" 2>/dev/null
done | tr '\0' '\n' | grep -a -o '[a-z]*-{MARK}-[0-9a-f][0-9a-f]*' | sort -u | rev | sed 's/^/FOUND:/'
for l in cwd root exe fd/0 fd/1 fd/2 fd/3 fd/4 fd/5 fd/6; do readlink /proc/$P/$l 2>/dev/null; done \
  | grep -a -o '[a-z]*-{MARK}-[0-9a-f][0-9a-f]*' | rev | sed 's/^/FOUND:/'
if env | grep -q {MARK}; then echo OWNENV:dirty; else echo OWNENV:clean; fi
printf 'CMDLINE:'; tr '\0' ' ' < /proc/$P/cmdline; echo
"#
    )
}

/// The markers a probe's output says it found (printed reversed: coder's envelope
/// redacts a provider key it sees written out).
fn found(out: &str) -> Vec<String> {
    out.split_whitespace()
        .filter_map(|w| w.strip_prefix("FOUND:"))
        .map(|w| w.chars().rev().collect())
        .collect()
}

/// Nothing of coder's environment, arguments or task is in any file of the sandbox's
/// `/proc/1` (init, forked from coder) the agent can open, in either confined mode.
/// Control: unconfined (`danger-full-access`), the same probe on the agent's parent
/// (coder itself) finds all three, so it would find them wherever they show.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_sandboxs_init_shows_the_agent_none_of_coders_secrets_in_proc() {
    for owner in sandbox_fixture::owners() {
        let tree = new_tree(owner);
        for mode in ["workspace-write", "read-only"] {
            let out = run(&tree, &["--sandbox", mode], &grep_script("1"));
            assert!(out.contains("OWNENV:clean"), "{}: {out}", who(owner));
            assert!(
                out.contains("CMDLINE:coder-helper __exec-helper &"),
                "{} {mode}: init is not the forked helper: {out}",
                who(owner)
            );
            assert_eq!(
                found(&out),
                Vec::<String>::new(),
                "{} {mode}: coder's secrets in the sandbox's /proc/1: {out}",
                who(owner)
            );
        }
        let control = run(
            &tree,
            &["--sandbox", "danger-full-access"],
            &grep_script("$PPID"),
        );
        assert!(control.contains("OWNENV:clean"), "{control}");
        for marker in [SECRET, OTHER, TASK] {
            assert!(
                found(&control).iter().any(|f| f == marker),
                "{}: control: the probe did not find {marker} in coder's own /proc: {control}",
                who(owner)
            );
        }
    }
}

/// The kernel calls that read or take from another process, and signals (a crash of
/// init could print or dump its memory), aimed at init from inside the sandbox: each is
/// refused. Control: unconfined, the same calls aimed at a child of the agent succeed.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_agent_can_neither_trace_read_take_from_nor_signal_the_sandboxs_init() {
    // `1`: the sandbox's init; `child`: a fork of the probe (same layout), paused.
    let probe = |target: &str| {
        format!(
            r#"/usr/bin/python3 - {target} <<'PY'
import ctypes, os, sys, signal
libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "child":
    t = os.fork()
    if t == 0:
        signal.pause(); os._exit(0)
else:
    t = int(sys.argv[1])
def sc(name, n, *a):
    r = libc.syscall(ctypes.c_long(n), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
    print(name + ":" + ("ok" if r >= 0 else "EPERM" if ctypes.get_errno() in (1, 13) else "err%d" % ctypes.get_errno()))
    return r
class iov(ctypes.Structure): _fields_ = [("b", ctypes.c_void_p), ("l", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
mine = iov(ctypes.cast(buf, ctypes.c_void_p), 8)
theirs = iov(ctypes.cast(buf, ctypes.c_void_p), 8)
sc("process_vm_readv", 310, t, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
fd = libc.syscall(434, t, 0)
if fd >= 0:
    sc("pidfd_getfd", 438, fd, 0, 0)
else:
    print("pidfd_getfd:EPERM")
sc("kcmp", 312, t, os.getpid(), 0, 0, 0)
try:
    open("/proc/%d/mem" % t, "rb").close(); print("mem:ok")
except PermissionError:
    print("mem:EPERM")
sc("ptrace_seize", 101, 0x4206, t, 0, 0)
for sig in (6, 11, 10):
    try:
        os.kill(t, sig); print("kill%d:ok" % sig)
    except PermissionError:
        print("kill%d:EPERM" % sig)
    except ProcessLookupError:
        print("kill%d:gone" % sig)
PY
"#
        )
    };
    let calls = [
        "process_vm_readv",
        "pidfd_getfd",
        "kcmp",
        "mem",
        "ptrace_seize",
    ];
    for owner in sandbox_fixture::owners() {
        let tree = new_tree(owner);
        let out = run(&tree, &[], &probe("1"));
        for call in calls.iter().chain(&["kill6", "kill11", "kill10"]) {
            assert!(
                out.contains(&format!("{call}:EPERM")),
                "{}: {call} on the sandbox's init was not refused: {out}",
                who(owner)
            );
        }
        // A child of the probe's: what nothing stops.
        let control = run(&tree, &["--sandbox", "danger-full-access"], &probe("child"));
        for call in calls {
            assert!(
                control.contains(&format!("{call}:ok")),
                "{}: control: {call} on the agent's own child failed unconfined: {control}",
                who(owner)
            );
        }
        assert!(control.contains("kill6:ok"), "{control}");
    }
}

/// The fork keeps the descriptors an exec would have closed (those coder opened
/// close-on-exec: its own ends of the helper's pipes, the phase trace): the agent holds
/// none of them, only its stdio. Control: the trace shows the helper that started it was
/// the forked one (`helper.main` before `run.start`, in the same file coder writes).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_agent_holds_no_descriptor_the_fork_kept() {
    for owner in sandbox_fixture::owners() {
        let tree = new_tree(owner);
        let trace = tree.root.join("state/trace.txt");
        let out = command(&tree, &[], "ls /proc/self/fd | tr '\\n' ' '; echo; echo TARGETS; for f in /proc/self/fd/*; do readlink $f; done")
            .env("CODER_TRACE_PHASES", &trace)
            .output_bounded();
        let envelope = review_tree::envelope(&out);
        let result = envelope["result"].as_str().unwrap_or_default();
        // `ls` itself opens one directory (3); the fake's `$( … )` holds its own pipe.
        let fds: Vec<&str> = result
            .trim_start_matches("done: ")
            .split(" TARGETS")
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert!(
            fds.len() >= 3 && fds.iter().all(|fd| ["0", "1", "2", "3"].contains(fd)),
            "{}: the agent holds more than its stdio: {result}",
            who(owner)
        );
        assert!(
            !result.contains("trace.txt") && !result.contains("state/"),
            "{}: the agent holds one of coder's files: {result}",
            who(owner)
        );
        let phases = std::fs::read_to_string(&trace).unwrap();
        assert!(
            phases.contains("helper.main") && phases.contains("helper.prepared"),
            "{}: control: the helper did not write coder's trace: {phases}",
            who(owner)
        );
    }
}

/// The host pid of the sandbox's init whose agent's command line names `root`: a process
/// whose innermost pid is 1 with a child naming the tree.
fn find_init(root: &Path) -> Option<u32> {
    let root = root.to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let inner_one = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|ns| {
                ns.split_whitespace().last() == Some("1") && ns.split_whitespace().count() > 1
            });
        if !inner_one {
            continue;
        }
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        let names_tree = children.split_whitespace().any(|child| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&root))
        });
        if names_tree {
            return Some(pid);
        }
    }
    None
}

/// The agent may raise the sandbox's init's core limit (`prlimit` needs no ptrace
/// right), and `core_pattern` writes a crashed process's core where it runs: a core of
/// init, a copy of coder's memory (or of `coder sandbox`'s, with the caller's
/// credentials its command never gets), would hold that environment and heap. Init is not
/// dumpable (the kernel then writes no core, whatever the limit), which its `/proc` shows
/// on the host as owned by root while it runs as uid 65534. The root arm's `/proc` is
/// root's either way: there the test checks only the agent's `prlimit`. Control: the
/// agent process itself, the same uid, is dumpable (its `/proc` is the user's).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_sandboxs_init_is_not_dumpable() {
    for owner in sandbox_fixture::owners() {
        for via_sandbox in [false, true] {
            let tree = new_tree(owner);
            let ws = tree.ws();
            let payload = format!(
                "cd '{}' && prlimit --pid 1 --core=unlimited && echo RAISED; : > ready; \
                 i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
                ws.display()
            );
            let mut cmd = if via_sandbox {
                let mut cmd = sandbox_fixture::bash_sandbox(
                    owner,
                    &ws,
                    &tree.root.join("home"),
                    &[],
                    &payload,
                );
                cmd.env(SECRET_VAR, SECRET);
                cmd
            } else {
                command(&tree, &[], &payload)
            };
            let child = cmd
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let how = if via_sandbox {
                "coder sandbox"
            } else {
                "coder run"
            };
            common::wait_for_path(&ws.join("ready"), Duration::from_secs(60));
            let init = find_init(&tree.root);
            let agent = init.and_then(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .ok()?
                    .split_whitespace()
                    .next()?
                    .parse::<u32>()
                    .ok()
            });
            let owner_of = |pid: Option<u32>| {
                pid.and_then(|p| std::fs::metadata(format!("/proc/{p}/environ")).ok())
                    .map(|m| m.uid())
            };
            let (init_owner, agent_owner) = (owner_of(init), owner_of(agent));
            let go = ws.join("go");
            std::fs::write(&go, "").unwrap();
            std::os::unix::fs::lchown(&go, owner, owner).unwrap();
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(init.is_some(), "{} {how}: init not found", who(owner));
            assert!(
                stdout.contains("RAISED"),
                "{} {how}: the agent could not raise init's core limit (then say so): {stdout}",
                who(owner)
            );
            if let Some(uid) = owner {
                assert_eq!(
                    agent_owner,
                    Some(uid),
                    "{how}: control: the agent's own /proc is not the user's"
                );
                assert_eq!(
                    init_owner,
                    Some(0),
                    "{how}: the sandbox's init is dumpable (its /proc is the user's)"
                );
            }
        }
    }
}

/// A fake CLI whose first attempt fails as an overloaded API does (retried: nothing was
/// written), and whose second runs `payload`, as `payload_claude` does. The flag is in the
/// run's temporary directory, which both attempts share.
fn fails_once_claude(payload: &str) -> String {
    sandbox_fixture::payload_claude(payload).replacen(
        "cat >/dev/null\n",
        r#"cat >/dev/null
if [ ! -e "$TMPDIR/r14-once" ]; then
  : > "$TMPDIR/r14-once"
  echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","tools":[],"model":"m"}'
  echo '{"type":"result","subtype":"success","is_error":true,"result":"API Error: 503 overloaded","terminal_reason":"api_error","api_error_status":503,"session_id":"'"$sid"'"}'
  exit 1
fi
"#,
        1,
    )
}

/// A retry's attempt is started by an exec'd helper (the forked one is the first
/// attempt's only): its sandbox's `/proc/1` shows none of coder's secrets either (its
/// `cmdline` is the spec: the agent's own command, policy and paths).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_retrys_sandbox_shows_none_of_coders_secrets_either() {
    for owner in sandbox_fixture::owners() {
        let tree = new_tree(owner);
        let bin = tree.root.join("fake-claude");
        let mut cmd = command(&tree, &["--max-retries", "2"], "");
        // `command` wrote a plain fake; this one fails once first.
        std::fs::write(&bin, fails_once_claude(&grep_script("1"))).unwrap();
        let out = cmd.output_bounded();
        let envelope = review_tree::envelope(&out);
        let result = envelope["result"].as_str().unwrap_or_default();
        assert!(
            result.contains("OWNENV:clean"),
            "{}: the retry did not run the probe: {envelope}",
            who(owner)
        );
        // The exec'd helper takes its spec as an argument; the forked one reads a pipe.
        assert!(
            result.contains("CMDLINE:coder-helper __exec-helper {"),
            "{}: the retry's init is not an exec'd helper: {result}",
            who(owner)
        );
        assert_eq!(
            found(result),
            Vec::<String>::new(),
            "{}: coder's secrets in the retry's /proc/1: {result}",
            who(owner)
        );
    }
}

/// `coder sandbox`'s init is a fork of `coder sandbox` itself, whose environment holds the
/// caller's credentials (which its command is not given): none of them shows in any file
/// of `/proc/1` the command can open. Control: the command's environment lacks it too
/// (else the probe proves nothing), and unconfined the probe finds it in its parent's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn coder_sandboxs_init_shows_the_command_none_of_the_callers_credentials() {
    for owner in sandbox_fixture::owners() {
        let tree = new_tree(owner);
        let run = |mode: &str, pid: &str| {
            let out = sandbox_fixture::bash_sandbox(
                owner,
                &tree.ws(),
                &tree.root.join("home"),
                &["--mode", mode],
                &grep_script(pid),
            )
            .env(SECRET_VAR, SECRET)
            .output_bounded();
            sandbox_fixture::printed(&out)
        };
        let out = run("workspace-write", "1");
        assert!(out.contains("OWNENV:clean"), "{}: {out}", who(owner));
        assert_eq!(
            found(&out),
            Vec::<String>::new(),
            "{}: the caller's credentials in coder sandbox's /proc/1: {out}",
            who(owner)
        );
        let control = run("danger-full-access", "$PPID");
        assert!(
            found(&control).iter().any(|f| f == SECRET),
            "{}: control: the probe did not find the credential in coder sandbox's own /proc: {control}",
            who(owner)
        );
    }
}
