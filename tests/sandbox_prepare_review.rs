//! Independent review of the sandbox helper prepared before its spec (faee40c,
//! `confine::prepare` / `confine_prepared`, `sandbox::helper`'s `&FD` form), written as an
//! attacker who has read it. Since that commit the first attempt's helper enters the
//! sandbox's namespaces (a user namespace too when not root), becomes their init and then
//! waits, unconfined, for coder to send the policy: through the policy's scan and through
//! the whole admission queue (`max_concurrent`), which can last minutes.
//!
//! The window is held open here the way a user meets it: a first run holds the backend's
//! only slot, a second run queues with its helper prepared. Then, for each arm (coder as
//! root, coder as uid 65534 on the user-namespace path):
//! * another local user (65534 against root, 65533 against 65534) tries every door of the
//!   prepared helper: `/proc/PID/{mem,environ,root,cwd,fd}`, its spec pipe reopened through
//!   `/proc` for writing, its namespace files, `nsenter`, a signal, `ptrace` (`strace -p`).
//!   Control: the helper's owner, through the same script, gets in (so every probe can
//!   succeed; same-user access is the documented trust boundary, SECURITY.md);
//! * the first run's *confined agent*, told the helper's host pids, tries the same;
//! * then the queued run goes on and its agent still sees its secret masked;
//! * coder SIGKILLed while its helper waits, or at any moment of the helper's start:
//!   nothing of the helper or its namespaces survives. Two guards hold this each alone
//!   (the parent-death signals, and end-of-file on the spec pipe, whose only writer is
//!   coder): against a build with both removed (init without its death signal, an empty
//!   spec waited on) both kill tests fail, in both arms;
//! * the phase trace (`CODER_TRACE_PHASES`), which since that commit reaches the early
//!   helper: the helper must not reopen its path itself, unconfined, where an earlier
//!   agent can redirect it (a relative path resolved in the workspace, a symlink planted
//!   there). That one was open when this review started (the helper appended its marks to
//!   `~/.bashrc`, outside any grant, in both arms) and is closed with it: the helper now
//!   writes to coder's own open trace file, inherited.
//!
//! `KNOWN_OPEN` is the ratchet of attacks still open: an attack on it must stay open (its
//! test asserts the write does land), one off it must be blocked.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::sandbox_fixture::{NOBODY, arms, chown_tree, coder_as, temp_root};
use common::{Bounded, Deadline, pid_alive};

/// Attacks of this file measured open today (the test names).
const KNOWN_OPEN: &[&str] = &[];

/// The other local user when coder runs as 65534.
const ANOTHER_USER: u32 = 65533;

/// How long a run, a wait for the prepared helper, or a probe may take.
const DEADLINE: Duration = Duration::from_secs(90);

/// The fake `claude` of every run. In a workspace holding `hold` it says it runs, waits
/// for `target` (the prepared helper's host pids, written by the test), runs `probe.sh` on
/// them as the confined agent and reports what opened. In one holding `plant` it makes
/// `trace.log` a symlink to the path `plant` names. It then reports what `.env` shows, and
/// with `fds` what its descriptors are.
const CLAUDE: &str = r#"#!/bin/bash
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac; shift
done
cat >/dev/null
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","tools":[],"model":"m"}'
out=""
if [ -e hold ]; then
  touch running
  i=0
  while [ ! -e target ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done
  out="PROBED $(sh ./probe.sh $(cat target) 2>&1 | tr -d '"\\' | tr '\n' ' ')"
fi
if [ -e plant ]; then ln -s "$(cat plant)" trace.log && out="$out PLANTED"; fi
if [ -e .env ]; then out="$out env: $(cat .env 2>&1 | tr -d '"\\' | tr '\n' ' ')"; fi
if [ -e fds ]; then out="$out fds: $(for f in /proc/$$/fd/*; do readlink $f; done | tr -d '"\\' | tr '\n' ' ')"; fi
echo '{"type":"result","subtype":"success","is_error":false,"result":"done: '"$out"'","session_id":"'"$sid"'","num_turns":1}'
"#;

/// `sh probe.sh PID SPEC_FD PID…`: one line `OPEN <door> <pid>` per door of a process that
/// opens to the caller. The first pid's `SPEC_FD` is the helper's spec pipe.
const PROBE: &str = r#"
probe() {
  P=$1; F=$2
  (exec 3</proc/$P/mem) 2>/dev/null && echo "OPEN mem $P"
  (exec 3</proc/$P/environ) 2>/dev/null && echo "OPEN environ $P"
  ls /proc/$P/root/ >/dev/null 2>&1 && echo "OPEN root $P"
  ls /proc/$P/cwd/ >/dev/null 2>&1 && echo "OPEN cwd $P"
  ls /proc/$P/fd/ >/dev/null 2>&1 && echo "OPEN fd $P"
  if [ -n "$F" ]; then (exec 3>/proc/$P/fd/$F) 2>/dev/null && echo "OPEN spec-pipe $P"; fi
  for ns in user mnt net pid ipc uts; do
    (exec 3</proc/$P/ns/$ns) 2>/dev/null && echo "OPEN ns/$ns $P"
  done
  nsenter -t $P -m -n true 2>/dev/null && echo "OPEN nsenter $P"
  nsenter -t $P -U -m -n --preserve-credentials true 2>/dev/null && echo "OPEN nsenter-user $P"
  kill -0 $P 2>/dev/null && echo "OPEN signal $P"
  timeout 2 strace -qq -e trace=none -o /dev/null -p $P 2>/dev/null
  [ $? = 124 ] && echo "OPEN ptrace $P"
}
[ $# -ge 2 ] && probe "$1" "$2"
[ $# -ge 3 ] && probe "$3" ""
echo PROBE-END
"#;

/// A tree for one arm: the fake CLI and the probe, a config whose backend `solo` allows
/// one run at once, workspace `a` (the run holding the slot) and `b` (the queued run,
/// with a secret), given to uid 65534 in that arm.
struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    owner: Option<u32>,
}

const SECRET: &str = "SECRET=prepared-3e8a1c";

impl Scene {
    fn new(nobody: bool) -> Scene {
        let (dir, root) = temp_root("coder-prepare-review-");
        for d in ["a", "b", "home", "xdg", "state-a", "state-b"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let claude = root.join("claude");
        std::fs::write(&claude, CLAUDE).unwrap();
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(root.join("a/probe.sh"), PROBE).unwrap();
        std::fs::write(root.join("a/hold"), "").unwrap();
        std::fs::write(root.join("b/.env"), SECRET).unwrap();
        std::fs::write(root.join("home/.bashrc"), "# the user's bashrc\n").unwrap();
        std::fs::write(
            root.join("coder.toml"),
            "[backends.solo]\npreset = \"inherit\"\nmax_concurrent = 1\n",
        )
        .unwrap();
        let owner = nobody.then_some(NOBODY);
        if let Some(uid) = owner {
            chown_tree(&root, uid);
        }
        Scene {
            _dir: dir,
            root,
            owner,
        }
    }

    /// coder on workspace `ws` with state dir `state`, on the shared store's `solo`
    /// backend, as the arm's user, from the tree's root; stdout and stderr piped.
    fn coder(&self, ws: &str, state: &str) -> Command {
        let store = self.root.join("store.db");
        let config = self.root.join("coder.toml");
        let extra = [
            "--store",
            store.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--backend",
            "solo",
        ];
        let mut cmd = coder_as(
            &self.root,
            self.owner,
            &self.root.join(ws),
            &self.root.join("claude"),
            &extra,
            "task",
        );
        cmd.env("CODER_STATE_DIR", self.root.join(state))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Starts the run holding the slot and waits until its CLI runs.
    fn hold_slot(&self) -> Child {
        let child = self.coder("a", "state-a").spawn().unwrap();
        wait_for(
            || self.root.join("a/running").exists(),
            "the first run's CLI",
        );
        child
    }

    /// Lets the run holding the slot go on (its agent probes `pids`, if any) and end.
    fn release(&self, pids: &str) {
        let target = self.root.join("a/target");
        std::fs::write(&target, pids).unwrap();
        if let Some(uid) = self.owner {
            chown_tree(&target, uid);
        }
    }
}

/// Polls `done` until it holds; fails the test after [`DEADLINE`].
fn wait_for(mut done: impl FnMut() -> bool, what: &str) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < DEADLINE, "waited too long for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn namespace(pid: u32, ns: &str) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).ok()
}

/// A queued run's helper, prepared and waiting for its spec.
struct Prepared {
    coder: u32,
    /// The helper coder spawned (the outer waiter).
    outer: u32,
    /// Its child, init of the sandbox's new PID namespace.
    init: u32,
    /// The spec pipe's number in the helper (`&N`).
    spec_fd: u32,
}

/// Waits until the run started as `timeout coder …` (`run`) has a helper whose child is
/// in a PID namespace of its own.
fn wait_prepared(run: &Child) -> Prepared {
    let ours = namespace(std::process::id(), "pid").unwrap();
    let mut found = None;
    wait_for(
        || {
            for coder in children(run.id()) {
                for outer in children(coder) {
                    let argv = cmdline(outer);
                    let Some(spec) = argv.iter().find_map(|a| a.strip_prefix('&')) else {
                        continue;
                    };
                    let spec_fd = spec.parse().unwrap();
                    for init in children(outer) {
                        if namespace(init, "pid").is_some_and(|ns| ns != ours) {
                            found = Some(Prepared {
                                coder,
                                outer,
                                init,
                                spec_fd,
                            });
                            return true;
                        }
                    }
                }
            }
            false
        },
        "the queued run's prepared helper",
    );
    found.unwrap()
}

/// `probe.sh` on `prepared`'s init (with its spec pipe) and outer process, as `uid` (root
/// when `None`): the doors that opened.
fn probe_as(scene: &Scene, uid: Option<u32>, prepared: &Prepared) -> Vec<String> {
    let mut cmd = Command::new("sh");
    cmd.arg(scene.root.join("a/probe.sh"))
        .arg(prepared.init.to_string())
        .arg(prepared.spec_fd.to_string())
        .arg(prepared.outer.to_string())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::null());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output_within(DEADLINE);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("PROBE-END"),
        "the probe did not finish: {out:?}"
    );
    text.lines()
        .filter(|l| l.starts_with("OPEN"))
        .map(str::to_owned)
        .collect()
}

/// Waits for a spawned coder with a deadline; its output.
fn finish(child: Child) -> Output {
    let guard = Deadline::kill_after(&child, DEADLINE);
    let out = child.wait_with_output().unwrap();
    drop(guard);
    out
}

fn envelope(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no envelope ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// While a queued run's helper waits prepared (in its namespaces, unconfined, for minutes
/// if the queue is long), neither another local user nor a concurrent run's confined
/// agent gets into it by any door: memory, environment, root, working directory,
/// descriptors, the spec pipe (a spec of their own), its namespaces, signals, ptrace. The
/// owner does (control). The run then goes on confined: its agent sees its secret masked.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_prepared_helper_is_out_of_reach_of_other_users_and_of_confined_agents() {
    let name = "a_prepared_helper_is_out_of_reach_of_other_users_and_of_confined_agents";
    assert!(!KNOWN_OPEN.contains(&name));
    for nobody in arms() {
        let scene = Scene::new(nobody);
        let first = scene.hold_slot();
        let queued = scene.coder("b", "state-b").spawn().unwrap();
        let _guards = (
            Deadline::kill_after(&first, DEADLINE),
            Deadline::kill_after(&queued, DEADLINE),
        );
        let prepared = wait_prepared(&queued);
        // Still waiting for its spec: the queue holds it back.
        assert!(pid_alive(prepared.init as i32));

        let attacker = if nobody { ANOTHER_USER } else { NOBODY };
        let opened = probe_as(&scene, Some(attacker), &prepared);
        assert!(
            opened.is_empty(),
            "nobody={nobody}: uid {attacker} got into the prepared helper: {opened:?}"
        );
        // Control: its owner gets in through the same doors.
        let owned = probe_as(&scene, scene.owner, &prepared);
        for door in [
            "OPEN fd",
            "OPEN ns/mnt",
            "OPEN ns/net",
            "OPEN signal",
            "OPEN ptrace",
        ] {
            assert!(
                owned.iter().any(|l| l.starts_with(door)),
                "nobody={nobody}: control: the owner's probe misses {door:?}: {owned:?}"
            );
        }
        // The spec pipe is init's only: init is not dumpable (round fourteen), so only
        // a process with CAP_SYS_PTRACE on the host, root, reopens it.
        assert_eq!(
            owned.iter().any(|l| l.starts_with("OPEN spec-pipe")),
            !nobody,
            "nobody={nobody}: control: only root reopens init's spec pipe: {owned:?}"
        );

        // The concurrent run's confined agent, told the host pids.
        scene.release(&format!(
            "{} {} {}",
            prepared.init, prepared.spec_fd, prepared.outer
        ));
        let first = envelope(&finish(first));
        let said = first["result"].as_str().unwrap_or_default().to_owned();
        assert!(said.contains("PROBE-END"), "nobody={nobody}: {first}");
        assert!(
            !said.contains("OPEN"),
            "nobody={nobody}: a confined agent got into another run's prepared helper: {said}"
        );

        let queued = envelope(&finish(queued));
        assert_eq!(queued["success"], true, "nobody={nobody}: {queued}");
        let said = queued["result"].as_str().unwrap_or_default();
        assert!(said.contains("env:"), "nobody={nobody}: {queued}");
        assert!(
            !said.contains(SECRET),
            "nobody={nobody}: the queued run's agent read its secret: {queued}"
        );
    }
}

/// coder SIGKILLed (or cancelled with SIGTERM, while queued) while its helper waits
/// prepared for the spec: the helper's processes end with it (parent-death signals, the
/// spec pipe's end), and no process is left in the namespaces they made (an unconfined
/// process in them could be handed anything later).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_coder_killed_while_its_helper_waits_leaves_nothing_in_the_namespaces() {
    use nix::sys::signal::Signal;
    for (nobody, signal) in arms()
        .into_iter()
        .flat_map(|n| [(n, Signal::SIGKILL), (n, Signal::SIGTERM)])
    {
        let scene = Scene::new(nobody);
        let first = scene.hold_slot();
        let queued = scene.coder("b", "state-b").spawn().unwrap();
        let _guards = (
            Deadline::kill_after(&first, DEADLINE),
            Deadline::kill_after(&queued, DEADLINE),
        );
        let prepared = wait_prepared(&queued);
        let namespaces: Vec<PathBuf> = ["pid", "mnt", "net", "user"]
            .iter()
            .filter_map(|ns| namespace(prepared.init, ns))
            // The user namespace is the host's for root: not the helper's own.
            .filter(|ns| Some(ns) != namespace(std::process::id(), "user").as_ref())
            .collect();
        assert!(namespaces.len() >= 3, "nobody={nobody}: {namespaces:?}");
        // Held open, the namespaces keep their inode numbers, which the kernel would
        // otherwise give to the next ones made (a concurrent test's).
        let _held: Vec<std::fs::File> = ["pid", "mnt", "net", "user"]
            .iter()
            .filter_map(|ns| std::fs::File::open(format!("/proc/{}/ns/{ns}", prepared.init)).ok())
            .collect();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(prepared.coder as i32), signal).unwrap();
        let in_them = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| pid_alive(*pid as i32))
                .filter(|pid| {
                    ["pid", "mnt", "net", "user"]
                        .iter()
                        .filter_map(|ns| namespace(*pid, ns))
                        .any(|ns| namespaces.contains(&ns))
                })
                .collect::<Vec<_>>()
        };
        let started = Instant::now();
        while !in_them().is_empty() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = in_them();
        assert!(
            left.is_empty(),
            "nobody={nobody} {signal}: processes left in the dead run's namespaces: {:?}",
            left.iter().map(|p| (p, cmdline(*p))).collect::<Vec<_>>()
        );
        assert!(!pid_alive(prepared.outer as i32) && !pid_alive(prepared.init as i32));
        scene.release("");
        let first = finish(first);
        assert!(first.status.success(), "nobody={nobody}: {first:?}");
        let queued = finish(queued);
        if signal == Signal::SIGTERM {
            // Cancelled while queued: coder reports it and the CLI never started.
            let envelope = envelope(&queued);
            assert_eq!(envelope["success"], false, "nobody={nobody}: {envelope}");
        }
    }
}

/// The phase trace reaches the prepared helper, which marks its phases from init before
/// anything is confined. It must write them where coder writes its own (the file coder
/// opened), never reopen the path itself: a relative path would resolve in the workspace,
/// where an earlier run's agent planted `trace.log` as a symlink to `~/.bashrc` (a file no
/// grant lets it write), and an absolute one in a directory an agent can write could be
/// swapped between coder's open and the helper's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_phase_trace_is_not_reopened_by_the_helper_where_an_agent_redirects_it() {
    let name = "the_phase_trace_is_not_reopened_by_the_helper_where_an_agent_redirects_it";
    let open = KNOWN_OPEN.contains(&name);
    for nobody in arms() {
        let scene = Scene::new(nobody);
        std::fs::remove_file(scene.root.join("b/.env")).unwrap();
        let bashrc = scene.root.join("home/.bashrc");
        let before = std::fs::read_to_string(&bashrc).unwrap();
        // The earlier run: its agent plants the symlink.
        let plant = scene.root.join("b/plant");
        std::fs::write(&plant, "../home/.bashrc").unwrap();
        if let Some(uid) = scene.owner {
            chown_tree(&plant, uid);
        }
        let earlier = envelope(&finish(scene.coder("b", "state-b").spawn().unwrap()));
        assert!(
            earlier["result"]
                .as_str()
                .is_some_and(|r| r.contains("PLANTED")),
            "nobody={nobody}: the agent could not plant the symlink: {earlier}"
        );
        std::fs::remove_file(&plant).unwrap();
        std::fs::write(scene.root.join("b/fds"), "").unwrap();
        // The user's next run, traced to a path relative to where they run coder.
        let run = scene
            .coder("b", "state-b")
            .env("CODER_TRACE_PHASES", "trace.log")
            .spawn()
            .unwrap();
        let out = envelope(&finish(run));
        assert_eq!(out["success"], true, "nobody={nobody}: {out}");
        let after = std::fs::read_to_string(&bashrc).unwrap();
        let trace = std::fs::read_to_string(scene.root.join("trace.log")).unwrap_or_default();
        if open {
            assert_ne!(
                after, before,
                "nobody={nobody}: closed now, remove from KNOWN_OPEN"
            );
            continue;
        }
        assert_eq!(
            after, before,
            "nobody={nobody}: the helper wrote through the agent's symlink"
        );
        assert!(
            trace.contains("helper.spec") && trace.contains("sandbox.confined"),
            "nobody={nobody}: the helper's marks are not in coder's trace file: {trace}"
        );
        assert!(
            trace.contains("helper.spawned"),
            "nobody={nobody}: coder's own marks are missing: {trace}"
        );
        // The trace descriptor the helper inherits stops there: the agent has stdio (and
        // its shell's script) only.
        let said = out["result"].as_str().unwrap_or_default();
        let fds = said.split_once("fds:").map(|(_, f)| f).unwrap_or_default();
        assert!(
            fds.contains("pipe:") && !fds.contains("trace"),
            "nobody={nobody}: the agent's descriptors: {said}"
        );
    }
}

/// The processes whose working directory is `dir` or below it.
fn working_in(dir: &std::path::Path) -> Vec<(u32, Vec<String>)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| pid_alive(*pid as i32))
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .map(|pid| (pid, cmdline(pid)))
        .collect()
}

/// coder SIGKILLed at any moment of its helper's start (before the death signal is armed,
/// while it enters the namespaces, forks init, waits for the spec): whatever the helper
/// had done, it and its init end (the spec pipe's only writer is gone), and nothing is
/// left working in the workspace.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_coder_killed_at_any_moment_of_its_helpers_start_leaves_nothing_running() {
    for nobody in arms() {
        let scene = Scene::new(nobody);
        let ws = scene.root.join("b");
        let mut prepared_at_kill = 0;
        for step in 0..30u64 {
            let run = scene.coder("b", "state-b").spawn().unwrap();
            let _guard = Deadline::kill_after(&run, DEADLINE);
            let started = Instant::now();
            // The kill lands `step` × 0.3 ms after the helper is seen spawned.
            let mut found = None;
            while found.is_none() && started.elapsed() < DEADLINE {
                found = children(run.id()).into_iter().find_map(|coder| {
                    children(coder)
                        .into_iter()
                        .find(|p| cmdline(*p).iter().any(|a| a == "__exec-helper"))
                        .map(|helper| (coder, helper))
                });
            }
            let (coder, helper) = found.expect("the helper spawned");
            let seen = Instant::now();
            while seen.elapsed() < Duration::from_micros(step * 300) {
                std::hint::spin_loop();
            }
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(coder as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            if !children(helper).is_empty() {
                prepared_at_kill += 1;
            }
            let _ = finish(run);
            let waited = Instant::now();
            while !working_in(&ws).is_empty() && waited.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let left = working_in(&ws);
            assert!(
                left.is_empty(),
                "nobody={nobody} step {step}: left running after coder died: {left:?}"
            );
        }
        eprintln!("nobody={nobody}: {prepared_at_kill} of 30 kills met a prepared helper");
        // Some kills must have met a helper with its init forked, some one without.
        assert!(
            (1..30).contains(&prepared_at_kill),
            "nobody={nobody}: {prepared_at_kill} of 30 kills met a prepared helper"
        );
    }
}
