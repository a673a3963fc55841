//! The watcher of coder's own gits ([`watched_run`]): each runs beside a thread that
//! kills it, with the error saying why, when it waits to open a FIFO or on a lease,
//! keeps reading a descriptor that may never end, reads more than a budget, or spends
//! more CPU than the budget its run's gits share ([`SharedCpuBudget`]). git opens what
//! the agent wrote (ignore files, attributes, the config's includes) without looking at
//! its type first, and Landlock cannot refuse a pipe reached through `/proc`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::GitError;
use crate::supervise::tree::{own_run, pidfd_kill, pidfd_open};

/// How often [`watched_run`] looks at what its git waits for.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a git of coder's that reads nothing but the configuration ([`config_output`])
/// may run: a config read takes milliseconds, and one that takes more is spinning on
/// includes (see [`config_output`]). Every run waits for it before its agent's first
/// request: an include fan-out sized to take just under the deadline slowed each later
/// run's start by as much, 20 s until round sixteen.
pub(crate) const CONFIG_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts `cmd` as one of coder's own processes ([`own_run`]) and hands it to `f`, which
/// waits for it; meanwhile a [`Watch`] kills it, and the result is the error saying why,
/// as soon as it does what no git of coder's has a reason to do: wait to open a FIFO, or
/// keep reading something that may never end.
///
/// git opens every `.gitignore` and `.gitattributes` of the work tree, and the config's
/// includes, without looking at their type first, and follows a symlink to an include: one
/// the agent made a FIFO held coder's git waiting for a writer forever, and one made a
/// symlink to `/proc/self/fd/1` had git read its own stdout pipe, which nothing writes
/// (or `/proc/PID/fd/N`, another process's pipe, `/dev/tty`, `/proc/kmsg`). Each held the
/// run's end forever, and every later run's snapshot of that workspace too (the file
/// stays). Landlock cannot refuse these: it lets a pipe reached through `/proc` be opened.
pub(crate) fn watched_run<T>(
    cmd: &mut Command,
    f: impl FnOnce(std::process::Child) -> std::io::Result<T>,
) -> Result<T, GitError> {
    watched_run_within(cmd, None, f)
}

/// [`watched_run`], the git also killed once it has run for `deadline` (when given).
fn watched_run_within<T>(
    cmd: &mut Command,
    deadline: Option<std::time::Duration>,
    f: impl FnOnce(std::process::Child) -> std::io::Result<T>,
) -> Result<T, GitError> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stopped: std::sync::Mutex<Option<GitError>> = std::sync::Mutex::new(None);
    let done = AtomicBool::new(false);
    let cpu_left = CPU_LEFT.with(std::cell::Cell::get);
    // The CPU time the watcher last saw the git spend, in milliseconds.
    let cpu_seen = AtomicU64::new(0);
    let result = own_run(cmd, |child| {
        let pid = child.id();
        // Opened while the child is not reaped yet, so the pid is this child's: a signal
        // through it can never reach a process that got the pid later.
        let pidfd = libc::pid_t::try_from(pid)
            .ok()
            .and_then(|pid| pidfd_open(nix::unistd::Pid::from_raw(pid)).ok());
        std::thread::scope(|s| {
            let mut watcher = None;
            if let Some(pidfd) = &pidfd {
                let (done, stopped, cpu_seen) = (&done, &stopped, &cpu_seen);
                watcher = std::thread::Builder::new()
                    .name("ledger-git-watch".into())
                    .spawn_scoped(s, move || {
                        let mut watch = Watch {
                            deadline: deadline.map(|d| (std::time::Instant::now() + d, d)),
                            cpu_left,
                            ..Watch::default()
                        };
                        while !done.load(Ordering::Relaxed) {
                            let why = watch.look(pid);
                            let ms = u64::try_from(watch.cpu_seen.as_millis()).unwrap_or(u64::MAX);
                            cpu_seen.store(ms, Ordering::Relaxed);
                            if let Some(why) = why {
                                // Whether or not it is still there to be signalled (it may
                                // have ended meanwhile): what it did is reported.
                                kill_tree(pid, pidfd);
                                *stopped
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
                                return;
                            }
                            std::thread::park_timeout(WATCH_EVERY);
                        }
                    })
                    .ok();
            }
            let result = f(child);
            done.store(true, Ordering::Relaxed);
            // Not a poll interval later: the scope waits for it.
            if let Some(watcher) = &watcher {
                watcher.thread().unpark();
            }
            result
        })
    });
    // What this git spent is no longer the next one's to spend ([`SharedCpuBudget`]).
    if let Some(left) = cpu_left {
        let spent = std::time::Duration::from_millis(cpu_seen.load(Ordering::Relaxed));
        CPU_LEFT.with(|cell| cell.set(Some(left.saturating_sub(spent))));
    }
    let result = result?;
    let stopped = stopped
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match stopped {
        Some(why) => Err(why),
        None => Ok(result),
    }
}

/// [`Command::output`] through [`watched_run`].
pub(super) fn watched_output(cmd: &mut Command) -> Result<std::process::Output, GitError> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    watched_run(cmd, std::process::Child::wait_with_output)
}

/// [`watched_output`] for a git that reads the configuration and nothing else of size
/// (`rev-parse` of the repository's paths, `config --get`), stopped after
/// [`CONFIG_DEADLINE`]. The watcher stops a git on what it holds, never on regular
/// files: a config that includes a file of the work tree let the agent make it include
/// another one fifty times over, that one another, and so on over git's ten levels, and
/// every git of coder's spun on 50^8 opens of small files forever (round fifteen's
/// review). The gits that read the repository's config are of this kind (discovery's
/// probe and copied settings, `--worktree`'s probe and identity); the snapshots' own git
/// reads coder's private config only. A run whose probe was stopped measures its changes
/// by the plain walk, and says why.
pub(crate) fn config_output(cmd: &mut Command) -> Result<std::process::Output, GitError> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    watched_run_within(
        cmd,
        Some(CONFIG_DEADLINE),
        std::process::Child::wait_with_output,
    )
}

/// What [`watched_run`]'s watcher saw of one git at its last look.
///
/// A git is stopped when one of its threads sleeps in the kernel's FIFO open, waiting for
/// a writer (`wait_for_partner`, what `/proc/PID/task/TID/wchan` names), or when the same
/// descriptor of its own is [`suspect`](OpenFd::suspect) at two looks in a row, or when it has read more
/// than [`READ_BUDGET`], or when its deadline (if any) has passed. One look is not enough
/// for a descriptor: `git` may be a wrapper script, and a shell reads the pipe of a
/// command substitution (`$(...)`) for a moment after its writer has gone; a read that
/// never ends stays.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// (process, descriptor, target) of each suspect descriptor at the last look.
    suspects: Vec<(u32, u32, PathBuf)>,
    /// When the git is stopped whatever it does, and the time it was given.
    deadline: Option<(std::time::Instant, std::time::Duration)>,
    /// What is left of a [`SharedCpuBudget`], when one is held; [`cpu_budget`] otherwise.
    cpu_left: Option<std::time::Duration>,
    /// The CPU time the git and the processes below it had spent at the last look.
    cpu_seen: std::time::Duration,
    /// Whether a thread of the git (or below it) waited on a lease at the last look.
    leased: bool,
}

impl Watch {
    /// Looks at `pid` and every process below it: a `git` that is a wrapper script which
    /// does not `exec` runs the real git as its child, and only that child reads what the
    /// config includes (a watcher of the wrapper alone never saw it, and held the run).
    fn look(&mut self, pid: u32) -> Option<GitError> {
        if let Some((at, given)) = self.deadline
            && std::time::Instant::now() >= at
        {
            return Some(GitError::ConfigTooSlow {
                seconds: given.as_secs(),
            });
        }
        let mut tree = vec![pid];
        tree.extend(descendants(pid));
        if tree.iter().any(|process| waits_in(*process, FIFO_WAIT)) {
            return Some(GitError::Fifo);
        }
        // An open of a leased file waits for the lease's holder: one that gives it up when
        // asked (a file server) does so at once, the agent holding its own files' leases
        // while it lives held the "before" snapshot's git 45 s per file (round eighteen).
        // Two looks in a row, as for a descriptor.
        let leased = tree.iter().any(|process| waits_in(*process, LEASE_WAIT));
        if leased && self.leased {
            return Some(GitError::Leased);
        }
        self.leased = leased;
        let cpu: std::time::Duration = tree.iter().filter_map(|process| cpu_time(*process)).sum();
        self.cpu_seen = self.cpu_seen.max(cpu);
        if cpu > self.cpu_left.unwrap_or_else(cpu_budget) {
            return Some(GitError::CpuTooMuch {
                millis: u64::try_from(cpu_budget().as_millis()).unwrap_or(u64::MAX),
            });
        }
        let read: u64 = tree.iter().filter_map(|process| bytes_read(*process)).sum();
        if read > READ_BUDGET {
            return Some(GitError::ReadTooMuch {
                gib: READ_BUDGET >> 30,
            });
        }
        let now: Vec<(u32, u32, PathBuf)> = tree
            .iter()
            .flat_map(|process| {
                suspects(*process)
                    .into_iter()
                    .map(move |(number, target)| (*process, number, target))
            })
            .collect();
        let held = now
            .iter()
            .find(|suspect| self.suspects.contains(suspect))
            .map(|(_, _, target)| GitError::NotAFile {
                what: target.display().to_string(),
            });
        self.suspects = now;
        held
    }
}

/// What a git of coder's, with the processes below it, may read through `read` at most
/// (the snapshots' `git add` streams every blob so: `core.bigFileThreshold=1`; a file
/// mapped instead would not be counted). A sparse file of
/// terabytes (`truncate -s 8T`) costs the agent no disk, and git hours to hash
/// (round fifteen's review); the plain walk hashes at most 1 GiB.
pub(super) const READ_BUDGET: u64 = 1 << 30;

/// What a git of coder's, with the processes below it, may spend on the CPU at most. git
/// matches every new file against every pattern of the `.gitignore` files above it: the
/// agent wrote one of 200,000 patterns and made 50,000 files, and the ledger's `git add`
/// spun for hours, unconfined, with the run waiting on it and every later run in the
/// workspace too (round eighteen). A real snapshot takes seconds at a million files.
const CPU_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

thread_local! {
    /// What the gits of coder's this thread runs may still spend on the CPU between them,
    /// while a [`SharedCpuBudget`] is held.
    static CPU_LEFT: std::cell::Cell<Option<std::time::Duration>> =
        const { std::cell::Cell::new(None) };
}

/// While held, the gits of coder's that this thread runs ([`watched_run`]) share one
/// [`CPU_BUDGET`]: each is stopped once they have spent it between them. A snapshot
/// runs a `git add` for the workspace and one for each repository nested in it (up to
/// [`MAX_NESTED`](crate::workspace::git::MAX_NESTED)), and a diff one git per part: with a budget per git, the agent gave
/// each of 256 nested repositories a `.gitignore` that held its `git add` just under the
/// budget, and the ledger's snapshot ran for 256 budgets, in its run and every later
/// one's "before" (round eighteen's second review). A git that ends between two looks
/// of its watcher ([`WATCH_EVERY`]) is counted as far as the last look saw it.
pub(crate) struct SharedCpuBudget {
    /// Whether a budget was already held when this one started (it goes on being drawn
    /// on, and stays when this one ends).
    nested: bool,
}

impl SharedCpuBudget {
    pub(crate) fn start() -> SharedCpuBudget {
        let nested = CPU_LEFT.with(|cell| {
            let held = cell.get().is_some();
            if !held {
                cell.set(Some(cpu_budget()));
            }
            held
        });
        SharedCpuBudget { nested }
    }
}

impl Drop for SharedCpuBudget {
    fn drop(&mut self) {
        if !self.nested {
            CPU_LEFT.with(|cell| cell.set(None));
        }
    }
}

/// [`CPU_BUDGET`], or in a debug build the milliseconds `CODER_TEST_GIT_CPU_BUDGET_MS`
/// names (TEST HOOK: a test cannot wait a minute).
fn cpu_budget() -> std::time::Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("CODER_TEST_GIT_CPU_BUDGET_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        return std::time::Duration::from_millis(ms);
    }
    CPU_BUDGET
}

/// The CPU time process `pid` has used, with that of the children it has waited for
/// (`utime`, `stime`, `cutime`, `cstime` of `/proc/PID/stat`).
fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command's name may hold spaces and parentheses: the fields follow the last `)`.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    // `state` is the third field of the line and the first here; `utime` is the 14th.
    let ticks: u64 = fields
        .get(11..15)?
        .iter()
        .map(|n| n.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| *n > 0)?;
    Some(std::time::Duration::from_millis(
        ticks.saturating_mul(1000) / per_second,
    ))
}

/// The bytes process `pid` has read (`rchar` of `/proc/PID/io`).
fn bytes_read(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("rchar:"))
        .and_then(|n| n.trim().parse().ok())
}

/// SIGKILL to the process of `pidfd` (`pid`) and to every process below it: the real
/// git of a wrapper script holds coder's output pipes too, and coder waits for their end.
/// Each one below is found first and signalled through a pidfd opened while its parent is
/// the one seen (a pid reused meanwhile has another parent); `pid` is signalled before
/// them, so that it cannot end normally (and have its result taken) while they are
/// signalled one by one.
fn kill_tree(pid: u32, pidfd: &std::os::fd::OwnedFd) {
    let mut below = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        for child in children(parent) {
            if below.len() >= 1024 {
                break;
            }
            let Ok(raw) = libc::pid_t::try_from(child) else {
                continue;
            };
            let Ok(fd) = pidfd_open(nix::unistd::Pid::from_raw(raw)) else {
                continue;
            };
            if parent_of(child) == Some(parent) {
                below.push(fd);
                queue.push(child);
            }
        }
    }
    let _ = pidfd_kill(pidfd);
    for fd in below.iter().rev() {
        let _ = pidfd_kill(fd);
    }
}

/// The children of `pid`, as `/proc/PID/task/TID/children` lists them.
pub(super) fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The `PPid:` of `/proc/PID/status`.
pub(super) fn parent_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("PPid:"))
        .and_then(|ppid| ppid.trim().parse().ok())
}

/// The descriptors (number, target) of process `pid` that are [`suspect`](OpenFd::suspect).
fn suspects(pid: u32) -> Vec<(u32, PathBuf)> {
    let Some(table) = fd_table(pid) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, PathBuf)> = table
        .iter()
        .filter(|fd| fd.number > 2 && fd.suspect())
        .filter(|fd| !inherited_from_coder(fd.number, &fd.target))
        .map(|fd| (fd.number, fd.target.clone()))
        .collect();
    if found.iter().any(|(_, target)| is_anonymous_pipe(target)) {
        // A pipe that another descriptor of its own, or any of a process it started,
        // holds too is one it made (a command substitution, `fetch`'s pipes to its
        // `upload-pack`). Its own standard three are coder's and do not count, so its
        // stdout reopened through `/proc` is still suspect; nor do descriptors coder
        // inherited (a `make` jobserver's pipe, which every process below coder holds at
        // coder's number), so that one reopened through `/proc/self/fd` is suspect too:
        // git read the jobserver's tokens, taking them from `make`, until the deadline.
        let made = |fd: &OpenFd| !inherited_from_coder(fd.number, &fd.target);
        let below: Vec<PathBuf> = descendants(pid)
            .into_iter()
            .filter_map(fd_table)
            .flatten()
            .filter(made)
            .map(|fd| fd.target)
            .collect();
        found.retain(|(number, target)| {
            let made_here = table.iter().any(|fd| {
                fd.number > 2 && made(fd) && fd.number != *number && fd.target == *target
            }) || below.contains(target);
            !is_anonymous_pipe(target) || !made_here
        });
    }
    found
}

/// One open descriptor of a process.
struct OpenFd {
    number: u32,
    /// What `/proc/PID/fd/N` names: a path, or `pipe:[INODE]` and the like.
    target: PathBuf,
    meta: std::fs::Metadata,
    /// Whether it lies on one of the kernel's pseudo file systems ([`on_pseudo_fs`]).
    pseudo: bool,
    /// Its open flags (`/proc/PID/fdinfo/N`).
    flags: u32,
}

impl OpenFd {
    /// Whether a read of it may never end, or it is nothing a git of coder's reads: a
    /// readable pipe, FIFO, socket, device other than the memory devices (`/dev/null`,
    /// `/dev/zero`, `/dev/urandom`: git opens `/dev/null` itself), or a file of `/proc`
    /// or `/sys` (`/proc/kmsg` waits). A pipe it only writes to is a shell's copy of its
    /// own stdout or stderr.
    fn suspect(&self) -> bool {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        const MEMORY_DEVICES: u32 = 1;
        let readable = self.flags & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32;
        let kind = self.meta.file_type();
        if kind.is_fifo() {
            return readable;
        }
        if kind.is_char_device() {
            let rdev = self.meta.rdev();
            let (major, minor) = (libc::major(rdev), libc::minor(rdev));
            return !(major == MEMORY_DEVICES && matches!(minor, 3 | 5 | 7 | 8 | 9));
        }
        !(kind.is_file() || kind.is_dir())
            || self.pseudo
            || self.target.starts_with("/proc")
            || self.target.starts_with("/sys")
    }
}

/// Whether `path` (followed: a `/proc/PID/fd/N` names what is open) lies on a file system
/// of the kernel's own, whose files may be read for ever (`trace_pipe` of `tracefs`,
/// `/proc/kmsg`), wherever it is mounted: a `procfs`, `sysfs` or `tracefs` mounted outside
/// `/proc` and `/sys` (a container's `/host/proc`, `/host/sys`) was not suspect by its
/// path, and git read `trace_pipe` through an include made a symlink to it until
/// something else stopped it ([`CONFIG_DEADLINE`] for a git that reads the config alone;
/// nothing for a `git add` or `fetch`).
pub(super) fn on_pseudo_fs(path: &Path) -> bool {
    use nix::sys::statfs::{self as fs, FsType};
    const CONFIGFS_MAGIC: FsType = FsType(0x6265_6570);
    const PSTOREFS_MAGIC: FsType = FsType(0x6165_676c);
    const EFIVARFS_MAGIC: FsType = FsType(0xde5e_81e4);
    let Ok(found) = fs::statfs(path) else {
        return false;
    };
    [
        fs::PROC_SUPER_MAGIC,
        fs::SYSFS_MAGIC,
        fs::TRACEFS_MAGIC,
        fs::DEBUGFS_MAGIC,
        fs::CGROUP_SUPER_MAGIC,
        fs::CGROUP2_SUPER_MAGIC,
        fs::SECURITYFS_MAGIC,
        fs::BPF_FS_MAGIC,
        fs::SELINUX_MAGIC,
        fs::SMACK_MAGIC,
        fs::RDTGROUP_SUPER_MAGIC,
        fs::NSFS_MAGIC,
        CONFIGFS_MAGIC,
        PSTOREFS_MAGIC,
        EFIVARFS_MAGIC,
    ]
    .contains(&found.filesystem_type())
}

fn is_anonymous_pipe(target: &Path) -> bool {
    target.as_os_str().as_encoded_bytes().starts_with(b"pipe:[")
}

/// `pid`'s open descriptors; `None` when they cannot be read (it has exited).
fn fd_table(pid: u32) -> Option<Vec<OpenFd>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let table = dir
        .flatten()
        .filter_map(|fd| {
            let number: u32 = fd.file_name().to_str()?.parse().ok()?;
            // Through the magic link: the type of what the descriptor is open on.
            let meta = std::fs::metadata(fd.path()).ok()?;
            let pseudo = on_pseudo_fs(&fd.path());
            let target = std::fs::read_link(fd.path()).ok()?;
            let flags = fd_flags(&format!("/proc/{pid}/fdinfo/{number}"))?;
            Some(OpenFd {
                number,
                target,
                meta,
                pseudo,
                flags,
            })
        })
        .collect();
    Some(table)
}

/// The `flags:` (octal) of an `fdinfo` file.
fn fd_flags(fdinfo: &str) -> Option<u32> {
    let info = std::fs::read_to_string(fdinfo).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
}

/// Every process below `pid` (its children's, through `/proc/PID/task/TID/children`).
pub(super) fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        for child in children(parent) {
            if !found.contains(&child) && found.len() < 1024 {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// Whether coder holds descriptor `number` on `target` without close-on-exec: then its git
/// got it from coder at its start. coder opens every descriptor of its own close-on-exec,
/// so such a one was given to coder by its parent (a `make` jobserver's pipe); a git led
/// to reopen it (through `/proc/self/fd`) gets another number, one coder's descriptor does
/// not hold.
fn inherited_from_coder(number: u32, target: &Path) -> bool {
    const O_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
    std::fs::read_link(format!("/proc/self/fd/{number}")).is_ok_and(|ours| ours == target)
        && fd_flags(&format!("/proc/self/fdinfo/{number}"))
            .is_some_and(|flags| flags & O_CLOEXEC == 0)
}

/// Where (`/proc/PID/task/TID/wchan`) a thread sleeps in the kernel's FIFO open, waiting
/// for a writer.
const FIFO_WAIT: &[u8] = b"wait_for_partner";

/// Where a thread sleeps whose `open` waits for the holder of a lease on the file
/// (`F_SETLEASE`) to give it up.
const LEASE_WAIT: &[u8] = b"__break_lease";

/// Whether a thread of process `pid` sleeps in the kernel at `wchan`.
fn waits_in(pid: u32, wchan: &[u8]) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .any(|task| std::fs::read(task.path().join("wchan")).is_ok_and(|w| w == wchan))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `script` run by `sh` as a git of coder's would be: what [`watched_output`] returned,
    /// within a deadline (a watcher that missed a read that never ends fails the test).
    fn watched_sh(script: &str) -> Result<std::process::Output, GitError> {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).stdin(Stdio::null());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(watched_output(&mut cmd));
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("the watcher did not stop the process within 20 s")
    }

    #[test]
    fn a_process_that_reads_its_own_output_pipe_is_stopped() {
        for fd in [1, 2] {
            let out = watched_sh(&format!("exec cat /proc/self/fd/{fd}"));
            assert!(
                matches!(&out, Err(GitError::NotAFile { what }) if what.starts_with("pipe:[")),
                "fd {fd}: {out:?}"
            );
        }
    }

    #[test]
    fn a_wrapper_whose_child_reads_its_own_output_pipe_is_stopped() {
        // A `git` that is a wrapper script and does not `exec` the real one: the child
        // reads the pipe, and holds coder's output pipes open until it is killed too.
        for fd in [1, 2] {
            let out = watched_sh(&format!("cat /proc/self/fd/{fd}; true"));
            assert!(
                matches!(&out, Err(GitError::NotAFile { what }) if what.starts_with("pipe:[")),
                "fd {fd}: {out:?}"
            );
        }
        let out = watched_sh("sh -c 'cat /proc/self/fd/1; true'; true");
        assert!(
            matches!(&out, Err(GitError::NotAFile { what }) if what.starts_with("pipe:[")),
            "two levels down: {out:?}"
        );
    }

    #[test]
    fn a_wrapper_whose_child_waits_on_a_fifo_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let out = watched_sh(&format!("cat {}; true", fifo.display()));
        assert!(matches!(out, Err(GitError::Fifo)), "{out:?}");
    }

    /// A file another process holds a write lease on (`F_SETLEASE`, ignoring the
    /// `SIGIO` that asks it to give the lease up): an open of it waits 45 s; the watcher
    /// stops it at its second look.
    #[test]
    fn an_open_that_waits_on_a_lease_is_stopped() {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("leased");
        std::fs::write(&file, "x\n").unwrap();
        let holder = "import fcntl, os, signal, sys, time\n\
                      signal.signal(signal.SIGIO, signal.SIG_IGN)\n\
                      fd = os.open(sys.argv[1], os.O_RDONLY)\n\
                      fcntl.fcntl(fd, 1024, fcntl.F_WRLCK)\n\
                      print('leased', flush=True)\n\
                      time.sleep(120)\n";
        let mut holder = Command::new("python3")
            .args(["-c", holder])
            .arg(&file)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let stdout = holder.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "leased\n");
        let out = watched_sh(&format!("cat {}; true", file.display()));
        let _ = holder.kill();
        let _ = holder.wait();
        assert!(matches!(out, Err(GitError::Leased)), "{out:?}");
    }

    #[test]
    fn what_a_wrappers_child_makes_for_itself_is_left_alone() {
        let out = watched_sh(
            "sh -c 'a=$(sleep 0.2; echo a); echo x | (sleep 0.2; cat) >/dev/null; \
             { sleep 0.2; } 2>/dev/null; echo \"$a\"'; true",
        )
        .expect("left alone");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"a\n");
    }

    #[test]
    fn a_process_that_reads_another_processs_pipe_is_stopped() {
        let mut other = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let out = watched_sh(&format!("exec cat /proc/{}/fd/0", other.id()));
        let _ = other.kill();
        let _ = other.wait();
        assert!(
            matches!(&out, Err(GitError::NotAFile { what }) if what.starts_with("pipe:[")),
            "{out:?}"
        );
    }

    #[test]
    fn pipes_a_process_makes_for_itself_are_left_alone() {
        // A wrapper script: command substitutions, a pipeline, a copy of its stderr while
        // a redirection holds fd 2, each held over several of the watcher's looks.
        let out = watched_sh(
            "a=$(sleep 0.2; echo a); echo x | (sleep 0.2; cat) >/dev/null; \
             { sleep 0.2; } 2>/dev/null; b=$(cat /dev/null); echo \"$a\"",
        )
        .expect("left alone");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"a\n");
    }

    #[test]
    fn what_a_git_may_hold_open() {
        let open = |path: &str, flags: u32| OpenFd {
            number: 3,
            target: PathBuf::from(path),
            meta: std::fs::metadata(path).unwrap(),
            pseudo: on_pseudo_fs(Path::new(path)),
            flags,
        };
        let read = libc::O_RDONLY as u32;
        let write = libc::O_WRONLY as u32;
        assert!(!open("/dev/null", read).suspect());
        assert!(!open("/dev/urandom", read).suspect());
        assert!(!open("/etc/hostname", read).suspect());
        assert!(!open("/tmp", read).suspect());
        assert!(open("/proc/self/status", read).suspect());
        assert!(open("/sys/kernel/mm", read).suspect());
        let tty = std::path::Path::new("/dev/tty");
        if tty.exists() {
            assert!(open("/dev/tty", read).suspect());
        }
        let (r, _w) = nix::unistd::pipe().unwrap();
        let pipe = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&r));
        assert!(open(&pipe, read).suspect());
        assert!(!open(&pipe, write).suspect());
    }

    #[test]
    fn a_process_cpu_time_is_read_from_proc() {
        let mut child = Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec sleep 5",
            ])
            .spawn()
            .unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut spent = std::time::Duration::ZERO;
        while spent < std::time::Duration::from_millis(20) && std::time::Instant::now() < deadline {
            spent = cpu_time(pid).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(spent >= std::time::Duration::from_millis(20), "{spent:?}");
        assert_eq!(cpu_time(u32::MAX), None);
    }
}
