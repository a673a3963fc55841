//! Per-run directories in coder's state directory, and whether their coder still runs.
//!
//! A run leaves directories behind when its coder is killed (the sandbox's run dir, the
//! CLI's private home, a `--worktree` checkout), so each later run removes those whose
//! coder is gone. They are named after their coder's PID, but a PID alone cannot tell
//! whether that coder is gone: a coder in another PID namespace that shares the state
//! directory (two containers mounting one home, a CI runner's cache volume) has a PID
//! that names nothing here, or some other process. Judged by its PID alone, such a live
//! run would lose its directory mid-run.
//!
//! So a run also holds an exclusive `flock` on a lock file beside its directory
//! ([`RunLock`]), taken before the directory is made. The kernel drops it when the last
//! process holding it ends, however it ends, in whatever namespace. A run counts as alive
//! while its lock is held, or while its PID names a process here: the PID still speaks for
//! directories made by coders older than the lock. Neither sign alone ends a run early;
//! a reused PID only keeps a dead run's directory a little longer.

use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The directory of the CLI's per-run config homes in coder's state directory.
pub const CLI_RUNS_DIR: &str = "cli-runs";

/// The suffix of a run directory's lock file: `<runs>/<pid>-<id>.lock` beside
/// `<runs>/<pid>-<id>/`.
const LOCK_SUFFIX: &str = ".lock";

/// A run's hold on its directory: while any process holds it, no other coder removes the
/// directory, whichever PID namespace it looks from. Dropping it removes the lock file
/// (after the directory, which its owner removes first).
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
    _lock: Flock<fs::File>,
}

impl RunLock {
    /// Create and lock the lock file of the run directory `dir` (about to be made).
    pub fn take(dir: &Path) -> std::io::Result<RunLock> {
        Self::take_at(lock_path(dir))
    }

    /// Create and lock `path` as a run's lock file. Another coder may hold it shared for
    /// the moment its liveness check takes: waited for, up to [`TAKE_WAIT`].
    pub fn take_at(path: PathBuf) -> std::io::Result<RunLock> {
        let file = super::state_file::open(&path)?;
        let deadline = Instant::now() + TAKE_WAIT;
        let lock = super::state_file::lock_until(file, FlockArg::LockExclusiveNonblock, deadline)?;
        Ok(RunLock { path, _lock: lock })
    }

    /// Remove the lock file, still holding the lock: for a run whose directory is gone,
    /// and which may end by a signal's default action rather than by dropping this.
    pub fn unlink(&self) {
        let _ = fs::remove_file(&self.path);
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Unlinked while still locked: a coder that opens it meanwhile finds it held.
        self.unlink();
    }
}

/// How long a run waits for its new lock file, held shared by another coder's check.
const TAKE_WAIT: Duration = Duration::from_secs(10);

/// The lock file of run directory `dir`.
pub fn lock_path(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(LOCK_SUFFIX);
    PathBuf::from(name)
}

/// Whether the coder of the run whose lock file is `lock` and whose PID is `pid` still
/// runs: its lock is held, or `pid` is this process or names a process here.
pub fn is_live(lock: &Path, pid: u32) -> bool {
    lock_is_held(lock)
        || pid == std::process::id()
        || Path::new("/proc").join(pid.to_string()).exists()
}

/// Whether some process holds `lock` exclusively (a missing or unreadable file: no).
fn lock_is_held(lock: &Path) -> bool {
    let Ok(file) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(lock)
    else {
        return false;
    };
    matches!(
        Flock::lock(file, FlockArg::LockSharedNonblock),
        Err((_, Errno::EWOULDBLOCK))
    )
}

/// The PID a run directory's name starts with (`<pid>-<anything>`).
pub fn pid_of_run_dir(name: &std::ffi::OsStr) -> Option<u32> {
    name.to_str()?.split('-').next()?.parse().ok()
}

/// Removes the per-run directories under `base` whose coder is gone ([`is_live`]):
/// entries named `<pid>-<anything>`, owned by this user, with their lock files; and lock
/// files whose directory never came (a coder killed between the two). Best effort: what
/// cannot be removed stays for the next run to try.
pub fn prune_dead_run_dirs(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = pid_of_run_dir(&name) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let path = entry.path();
        if meta.uid() != me {
            continue;
        }
        if meta.is_dir() {
            let lock = lock_path(&path);
            if !is_live(&lock, pid) {
                remove_tree(&path);
                let _ = fs::remove_file(&lock);
            }
        } else if path.extension().is_some_and(|e| e == "lock")
            && !path.with_extension("").exists()
            && !is_live(&path, pid)
        {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Removes the tree at `path` (never following a symlink), also where its last user took
/// permissions away: an agent that makes a directory of its run's temp or config dir
/// unreadable (`chmod 000`, as a non-root user) stopped `remove_dir_all` there, and the
/// run's directory, with whatever the agent wrote in it, stayed for good, every later
/// run failing to prune it. Permissions are given back on the way down (directories
/// only, as `lstat` sees them), then the tree is removed. Only for trees whose writers
/// are gone: a directory swapped for a symlink in between would have its target's mode
/// changed.
pub fn remove_tree(path: &Path) {
    if fs::remove_dir_all(path).is_ok() || fs::symlink_metadata(path).is_err() {
        return;
    }
    fn open_up(dir: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    open_up(&entry.path());
                }
            }
        }
    }
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        open_up(path);
    }
    let _ = fs::remove_dir_all(path);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PID that names no process here (beyond the kernel's default `pid_max`).
    const NO_SUCH_PID: u32 = 4_194_304 + 17;

    #[test]
    fn a_held_lock_keeps_a_run_whose_pid_names_nothing_here() {
        // A coder in another PID namespace: its PID is not in this /proc.
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join(format!("{NO_SUCH_PID}-abc"));
        let lock = RunLock::take(&run).unwrap();
        fs::create_dir(&run).unwrap();
        prune_dead_run_dirs(dir.path());
        assert!(run.is_dir(), "a live run's directory was pruned");
        drop(lock);
        assert!(!lock_path(&run).exists(), "the lock file goes with its run");
        prune_dead_run_dirs(dir.path());
        assert!(!run.exists(), "a dead run's directory stays");
    }

    #[test]
    fn a_lock_file_left_by_a_dead_coder_goes_and_an_unlocked_old_run_goes_by_its_pid() {
        let dir = tempfile::tempdir().unwrap();
        let orphan = dir.path().join(format!("{NO_SUCH_PID}-orphan.lock"));
        fs::write(&orphan, "").unwrap();
        let old = dir.path().join(format!("{NO_SUCH_PID}-old"));
        fs::create_dir(&old).unwrap();
        let mine = dir.path().join(format!("{}-mine", std::process::id()));
        fs::create_dir(&mine).unwrap();
        prune_dead_run_dirs(dir.path());
        assert!(!orphan.exists());
        assert!(!old.exists());
        assert!(mine.is_dir(), "this process's own directory is kept");
    }
}
