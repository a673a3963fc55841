//! Finding and stopping every process of a run.
//!
//! A process group alone is not enough: the CLI starts each Bash tool in its own session
//! (measured: `setsid`, its own process group), so `kill(-pgid)` misses exactly the
//! processes most likely to linger. coder therefore makes itself a child subreaper: every
//! orphaned descendant, however it detached, is re-parented to coder, and "the run's
//! processes" are simply all of coder's descendants, found by walking `/proc`. Stopping them
//! is SIGTERM to the group and to each descendant, a grace period, then SIGKILL until none
//! is left, reaping the orphans coder inherited along the way.
//!
//! All but coder's own helpers: a process coder starts for itself while a run's tree may be
//! stopped (the change ledger's `git`, whose "before" snapshot runs beside the agent) is
//! started through [`own_run`] and is neither signalled nor reaped by a stop, nor is
//! anything below it. Without that, an agent that ended while the snapshot's `git
//! write-tree` ran had it killed by the stop of its tree (SIGTERM), and the run lost its
//! change ledger.

use std::collections::HashMap;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// How often the tree is re-examined while waiting for it to exit.
const POLL: Duration = Duration::from_millis(10);
/// Upper bound on SIGKILL rounds (a fork bomb racing the sweep still loses: each round
/// kills every process that exists, and a killed process cannot fork).
const KILL_ROUNDS: usize = 500;

/// Makes the current process a child subreaper, so orphaned descendants are re-parented to
/// it instead of to init.
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// coder's own helper processes that are running: `(pid, start time)`, the start time
/// being `/proc/PID/stat`'s (clock ticks since boot), so that a process that later gets a
/// pid the kernel reused is not taken for one of them. Held while one is being started and
/// while the process table is read, so a table never shows one that is not listed yet.
static OWN: Mutex<Vec<(i32, Option<u64>)>> = Mutex::new(Vec::new());

fn own() -> MutexGuard<'static, Vec<(i32, Option<u64>)>> {
    OWN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Removes its process from [`OWN`] when dropped (after `f` of [`own_run`] returned: the
/// process has been waited for by then, or is given up).
struct Listed(i32);

impl Drop for Listed {
    fn drop(&mut self) {
        own().retain(|(pid, _)| *pid != self.0);
    }
}

/// Starts `cmd` as one of coder's own helper processes (see the module's note), hands the
/// child to `f` (which should wait for it) and returns what `f` returns. A stop of a run's
/// tree meanwhile leaves the process and its descendants alone.
pub fn own_run<T>(
    cmd: &mut Command,
    f: impl FnOnce(Child) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let (child, _listed) = {
        let mut own = own();
        let child = cmd.spawn()?;
        let pid = child.id() as i32;
        let start = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| parse_stat(&stat))
            .and_then(|entry| entry.start);
        own.push((pid, start));
        (child, Listed(pid))
    };
    f(child)
}

/// [`Command::output`] for one of coder's own helper processes (see [`own_run`]).
pub fn own_output(cmd: &mut Command) -> std::io::Result<Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    own_run(cmd, Child::wait_with_output)
}

/// A process as seen in `/proc/PID/stat`.
#[derive(Debug, Clone, Copy)]
struct ProcEntry {
    ppid: i32,
    /// Exited but not yet reaped (`Z`) or dead (`X`).
    gone: bool,
    /// When it started (clock ticks since boot).
    start: Option<u64>,
}

fn read_proc_table() -> HashMap<i32, ProcEntry> {
    let mut table = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(parsed) = parse_stat(&stat) {
            table.insert(pid, parsed);
        }
    }
    table
}

/// Parses `pid (comm) state ppid ...`; `comm` may contain spaces and parentheses.
fn parse_stat(stat: &str) -> Option<ProcEntry> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    // Field 22 of the line; `state` is field 3.
    let start = fields.nth(22 - 5).and_then(|f| f.parse().ok());
    Some(ProcEntry {
        ppid,
        gone: matches!(state, "Z" | "X" | "x"),
        start,
    })
}

/// All descendants of `root` (excluding it): (pid, parent pid, gone); coder's own helper
/// processes ([`own_run`]) and what is below them are left out.
fn descendants(root: i32) -> Vec<(i32, i32, bool)> {
    let (table, own) = {
        let own = own();
        (read_proc_table(), own.clone())
    };
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, entry) in &table {
        children.entry(entry.ppid).or_default().push(*pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            let entry = table.get(child);
            if own.contains(&(*child, entry.and_then(|e| e.start))) {
                continue;
            }
            if let Some(entry) = entry {
                out.push((*child, entry.ppid, entry.gone));
            }
            stack.push(*child);
        }
    }
    out
}

/// The descendants of coder that are still running.
pub fn live_descendants() -> Vec<i32> {
    descendants(std::process::id() as i32)
        .into_iter()
        .filter(|(_, _, gone)| !gone)
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Reaps exited orphans re-parented to coder. `keep` is the direct child whose status the
/// runtime collects itself.
fn reap_orphans(keep: Option<i32>) {
    let me = std::process::id() as i32;
    for (pid, ppid, gone) in descendants(me) {
        if gone && ppid == me && Some(pid) != keep {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// What stopping the tree took.
#[derive(Debug, Clone, Copy, Default)]
pub struct KillReport {
    /// Processes that were still running when the stop began.
    pub found: usize,
    /// Whether SIGKILL was needed after the grace period.
    pub escalated: bool,
}

/// Stops every process of the run: SIGTERM to the child's group and every descendant,
/// wait up to `grace`, then SIGKILL until nothing is left. `child_pid` is the direct child
/// (also its process group id); its own exit status is left for the caller to collect.
pub async fn stop_tree(child_pid: Option<i32>, grace: Duration) -> KillReport {
    stop_tree_or_sooner(child_pid, grace, None).await
}

/// [`stop_tree`], whose grace a cancelling signal that arrives during it (`hurry`: the
/// user pressed Ctrl-C again) cuts short.
pub async fn stop_tree_or_sooner(
    child_pid: Option<i32>,
    grace: Duration,
    mut hurry: Option<&mut super::CancelSignals>,
) -> KillReport {
    let mut report = KillReport::default();
    let initial = live_descendants();
    report.found = initial.len();
    if initial.is_empty() {
        reap_orphans(child_pid);
        return report;
    }
    signal_all(child_pid, &initial, Signal::SIGTERM);
    crate::phases::mark("tree.grace");
    let deadline = Instant::now() + grace;
    loop {
        reap_orphans(child_pid);
        if live_descendants().is_empty() {
            return report;
        }
        if Instant::now() >= deadline {
            break;
        }
        match hurry.as_deref_mut() {
            Some(signals) => {
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = signals.recv() => break,
                }
            }
            None => tokio::time::sleep(POLL).await,
        }
    }
    report.escalated = true;
    for _ in 0..KILL_ROUNDS {
        let live = live_descendants();
        if live.is_empty() {
            break;
        }
        signal_all(child_pid, &live, Signal::SIGKILL);
        tokio::time::sleep(Duration::from_millis(2)).await;
        reap_orphans(child_pid);
    }
    report
}

fn signal_all(group: Option<i32>, pids: &[i32], signal: Signal) {
    if let Some(group) = group {
        let _ = killpg(Pid::from_raw(group), signal);
    }
    for pid in pids {
        let _ = kill(Pid::from_raw(*pid), signal);
    }
}

/// Last-resort cleanup when a run is abandoned without an orderly stop (a panic unwinding
/// through the supervisor): SIGKILL everything at once, synchronously.
pub fn kill_all_now(child_pid: Option<i32>) {
    for _ in 0..KILL_ROUNDS {
        let live = live_descendants();
        if live.is_empty() {
            break;
        }
        signal_all(child_pid, &live, Signal::SIGKILL);
        std::thread::sleep(Duration::from_millis(2));
        reap_orphans(child_pid);
    }
}

/// `pidfd_open(2)` of `pid` (Linux 5.3).
pub(crate) fn pidfd_open(pid: nix::unistd::Pid) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(std::io::Error::other)?;
    // SAFETY: the kernel just returned this descriptor, owned by nobody else; pidfds are
    // close-on-exec.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// SIGKILL to the process of `pidfd`; false when it is gone (reaped) or the call failed.
pub(crate) fn pidfd_kill(pidfd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: `pidfd_send_signal(2)` with a descriptor we own, a signal number, a null
    // `siginfo` (the kernel fills it as for `kill`) and no flags; it writes no memory of
    // ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let entry = parse_stat("42 (a) b (c)) S 7 42 42 0 -1").unwrap();
        assert_eq!(entry.ppid, 7);
        assert!(!entry.gone);
        assert_eq!(entry.start, None);
        let line = "42 (x) S 7 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 123456 1 2";
        assert_eq!(parse_stat(line).unwrap().start, Some(123_456));
        assert!(parse_stat("43 (x) Z 1 0").unwrap().gone);
        assert!(parse_stat("garbage").is_none());
    }
}
