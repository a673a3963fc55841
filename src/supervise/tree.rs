//! Finding and stopping every process of a run.
//!
//! A process group alone is not enough: the CLI starts each Bash tool in its own session
//! (measured: `setsid`, its own process group), so `kill(-pgid)` misses exactly the
//! processes most likely to linger. coder therefore makes itself a child subreaper: every
//! orphaned descendant, however it detached, is re-parented to coder, and "the run's
//! processes" are simply all of coder's descendants, found by walking `/proc`. Stopping them
//! is SIGTERM to the group and to each descendant, a grace period, then SIGKILL until none
//! is left, reaping the orphans coder inherited along the way.

use std::collections::HashMap;
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

/// A process as seen in `/proc/PID/stat`.
#[derive(Debug, Clone, Copy)]
struct ProcEntry {
    ppid: i32,
    /// Exited but not yet reaped (`Z`) or dead (`X`).
    gone: bool,
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
    Some(ProcEntry {
        ppid,
        gone: matches!(state, "Z" | "X" | "x"),
    })
}

/// All descendants of `root` (excluding it): (pid, parent pid, gone).
fn descendants(root: i32) -> Vec<(i32, i32, bool)> {
    let table = read_proc_table();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, entry) in &table {
        children.entry(entry.ppid).or_default().push(*pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if let Some(entry) = table.get(child) {
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
    let mut report = KillReport::default();
    let initial = live_descendants();
    report.found = initial.len();
    if initial.is_empty() {
        reap_orphans(child_pid);
        return report;
    }
    signal_all(child_pid, &initial, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    loop {
        reap_orphans(child_pid);
        if live_descendants().is_empty() {
            return report;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let entry = parse_stat("42 (a) b (c)) S 7 42 42 0 -1").unwrap();
        assert_eq!(entry.ppid, 7);
        assert!(!entry.gone);
        assert!(parse_stat("43 (x) Z 1 0").unwrap().gone);
        assert!(parse_stat("garbage").is_none());
    }
}
