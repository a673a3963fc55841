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
//! So a run also holds an exclusive `flock` on its directory itself ([`RunLock::make_dir`];
//! older coders, and `--worktree`'s checkouts, on a lock file beside it). The kernel drops
//! it when the last process holding it ends, however it ends, in whatever namespace. A run
//! counts as alive while its lock is held, or while its PID names a process here: the PID
//! still speaks for directories made by coders older than the lock. Neither sign alone
//! ends a run early; a reused PID only keeps a dead run's directory a little longer.
//!
//! The directory is locked rather than a file beside it because every file coder creates
//! costs: on an ext4 without a journal each new inode scans past the ones freed in the
//! last half minute (0.2 to 0.4 ms under churn, BENCHMARKS.md round nineteen), and a lock
//! file was made and removed twice a run. The directory exists unlocked for a moment after
//! its `mkdir`: a pruner that finds it so removes it holding the lock itself, and the run,
//! once it has the lock, sees its directory gone from its path and makes it again.

use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};

/// The directory of the CLI's per-run config homes in coder's state directory.
pub const CLI_RUNS_DIR: &str = "cli-runs";

/// The suffix of a run directory's lock file: `<runs>/<pid>-<id>.lock` beside
/// `<runs>/<pid>-<id>/`.
const LOCK_SUFFIX: &str = ".lock";

/// A run's hold on its directory: while any process holds it, no other coder removes the
/// directory, whichever PID namespace it looks from. Dropping it removes the lock file, if
/// it has one (after the directory, which its owner removes first).
#[derive(Debug)]
pub struct RunLock {
    path: Option<PathBuf>,
    _lock: Flock<fs::File>,
}

/// How many times [`RunLock::make_dir`] makes its directory again after a pruner removed it.
const MAKE_TRIES: usize = 8;

impl RunLock {
    /// Make the run directory `dir` (mode 0700; it must not exist) and lock it: the lock
    /// is on the directory itself, no file beside it. Another coder may hold it for the
    /// moment its liveness check (or its removal of what it took for a dead run) takes:
    /// waited for, up to [`TAKE_WAIT`]; a directory a pruner removed meanwhile is made
    /// again. Fails if the path turns into anything else than the directory made here.
    pub fn make_dir(dir: &Path) -> std::io::Result<RunLock> {
        use std::os::unix::fs::DirBuilderExt;
        let deadline = Instant::now() + TAKE_WAIT;
        for _ in 0..MAKE_TRIES {
            fs::DirBuilder::new().mode(0o700).create(dir)?;
            let file = match open_dir(dir) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let lock =
                super::state_file::lock_until(file, FlockArg::LockExclusiveNonblock, deadline)?;
            let held = lock.metadata()?;
            match fs::symlink_metadata(dir) {
                Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                    return Ok(RunLock {
                        path: None,
                        _lock: lock,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Ok(_) => return Err(std::io::Error::other("the run directory was replaced")),
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "the run directory was removed again and again",
        ))
    }

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
        Ok(RunLock {
            path: Some(path),
            _lock: lock,
        })
    }

    /// Remove the lock file, still holding the lock: for a run whose directory is gone,
    /// and which may end by a signal's default action rather than by dropping this.
    pub fn unlink(&self) {
        if let Some(path) = &self.path {
            let _ = fs::remove_file(path);
        }
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

/// Whether the coder of run directory `dir`, named after `pid`, still runs: the directory
/// itself is locked ([`RunLock::make_dir`]), or its lock file beside it is, or its PID
/// speaks for it ([`is_live`]).
pub fn run_is_live(dir: &Path, pid: u32) -> bool {
    open_dir(dir).is_ok_and(is_held) || is_live(&lock_path(dir), pid)
}

/// `dir` opened for a lock, without following a symlink.
fn open_dir(dir: &Path) -> std::io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
}

/// Whether some process holds `lock` exclusively (a missing or unreadable file: no).
fn lock_is_held(lock: &Path) -> bool {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(lock)
        .is_ok_and(is_held)
}

/// Whether some process holds an exclusive lock on `file`.
fn is_held(file: fs::File) -> bool {
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
            prune_if_dead(&path, pid);
        } else if path.extension().is_some_and(|e| e == "lock")
            && !path.with_extension("").exists()
            && !is_live(&path, pid)
        {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Removes run directory `dir` if its coder is gone, holding its lock meanwhile: a run
/// that has just made it and waits for the lock then finds it gone and makes it again
/// ([`RunLock::make_dir`]).
fn prune_if_dead(dir: &Path, pid: u32) {
    let Ok(file) = open_dir(dir) else {
        return;
    };
    let Ok(_held) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
        return;
    };
    let lock = lock_path(dir);
    if !is_live(&lock, pid) {
        remove_tree(dir);
        let _ = fs::remove_file(&lock);
    }
}

/// Removes the tree at `path` (never following a symlink), also where its last user took
/// permissions away: an agent that makes a directory of its run's temp or config dir
/// unreadable (`chmod 000`, as a non-root user) stopped `remove_dir_all` there, and the
/// run's directory, with whatever the agent wrote in it, stayed for good, every later
/// run failing to prune it. Permissions are given back on the way down (directories
/// only, as `lstat` sees them). Only for trees whose writers are gone: a directory
/// swapped for a symlink in between would have its target's mode changed. Best effort:
/// what cannot be removed stays (see [`try_remove_tree`]).
pub fn remove_tree(path: &Path) {
    let _ = try_remove_tree(path);
}

/// At most this many entries are looked at by one [`try_remove_tree`] (each removal,
/// each descent and each return counts): a tree it cannot empty is not retried forever.
const REMOVAL_STEPS: u64 = 50_000_000;

/// Removes the tree at `path` as [`remove_tree`] does, saying whether it is gone.
///
/// The walk holds two directory descriptors whatever the tree's depth, and no recursion:
/// it goes down by name and back up by `..`, each step up checked against the device and
/// inode it came down from. The standard library's `remove_dir_all` recurses once per
/// level and holds a descriptor per level: an agent that left a chain of 30 000 nested
/// directories in its `$TMPDIR` overflowed the stack of the thread that removed it at the
/// run's end, and coder aborted (`SIGABRT`); the tree stayed in the state directory, and
/// a chain deeper than the descriptor limit was never removed (round eighteen's review).
pub fn try_remove_tree(path: &Path) -> std::io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return fs::remove_file(path);
    }
    let top = open_dir_giving_back(nix::fcntl::AT_FDCWD, path)?;
    empty_tree(top)?;
    fs::remove_dir(path)
}

/// Removes what it can of the directory open as `dir`: every non-directory, every empty
/// directory. Returns the first subdirectory left (not in `stuck`) to descend into, or
/// `None` when everything here is gone or stuck. `steps` counts entries against
/// [`REMOVAL_STEPS`].
fn remove_entries(
    dir_fd: std::os::fd::BorrowedFd<'_>,
    stuck: &std::collections::HashSet<(libc::dev_t, libc::ino_t)>,
    steps: &mut u64,
) -> std::io::Result<Option<std::ffi::OsString>> {
    use nix::unistd::{UnlinkatFlags, unlinkat};
    let listing = nix::fcntl::openat(
        dir_fd,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let mut dir = nix::dir::Dir::from_fd(listing)?;
    for entry in dir.iter() {
        *steps += 1;
        if *steps > REMOVAL_STEPS {
            return Err(std::io::Error::other("too many entries to remove"));
        }
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let is_dir = match entry.file_type() {
            Some(nix::dir::Type::Directory) => true,
            Some(_) => false,
            None => nix::sys::stat::fstatat(dir_fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
        };
        if !is_dir {
            let _ = unlinkat(dir_fd, name, UnlinkatFlags::NoRemoveDir);
            continue;
        }
        if unlinkat(dir_fd, name, UnlinkatFlags::RemoveDir).is_ok() {
            continue;
        }
        let Ok(st) =
            nix::sys::stat::fstatat(dir_fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR && !stuck.contains(&(st.st_dev, st.st_ino)) {
            let name = std::ffi::OsStr::from_bytes(name.to_bytes());
            return Ok(Some(name.to_os_string()));
        }
    }
    Ok(None)
}

/// Empties the directory open as `top`, iteratively (see [`try_remove_tree`]).
fn empty_tree(top: std::os::fd::OwnedFd) -> std::io::Result<()> {
    use nix::unistd::{UnlinkatFlags, unlinkat};
    use std::collections::HashSet;
    use std::ffi::OsString;
    use std::os::fd::AsFd;

    let identity = |fd: std::os::fd::BorrowedFd<'_>| {
        nix::sys::stat::fstat(fd).map(|st| (st.st_dev, st.st_ino))
    };
    // The directories from the top down to the current one: each one's name in its
    // parent, and the parent's identity (to check the way back up).
    let mut way: Vec<(OsString, (libc::dev_t, libc::ino_t))> = Vec::new();
    // Directories emptied as far as they go that still could not be removed.
    let mut stuck: HashSet<(libc::dev_t, libc::ino_t)> = HashSet::new();
    let mut current = top;
    let mut steps = 0u64;
    loop {
        let descend = remove_entries(current.as_fd(), &stuck, &mut steps)?;
        if let Some(name) = descend {
            steps += 1;
            match open_dir_giving_back(current.as_fd(), name.as_os_str()) {
                Ok(child) => {
                    way.push((name, identity(current.as_fd())?));
                    current = child;
                }
                Err(_) => {
                    if let Ok(st) = nix::sys::stat::fstatat(
                        current.as_fd(),
                        name.as_os_str(),
                        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                    ) {
                        stuck.insert((st.st_dev, st.st_ino));
                    }
                }
            }
            continue;
        }
        // Everything here is gone or stuck: back up, and remove this directory.
        let Some((name, parent_identity)) = way.pop() else {
            return Ok(());
        };
        let here = identity(current.as_fd())?;
        let parent = nix::fcntl::openat(
            current.as_fd(),
            "..",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        if identity(parent.as_fd())? != parent_identity {
            return Err(std::io::Error::other(
                "a directory moved during its removal",
            ));
        }
        if unlinkat(parent.as_fd(), name.as_os_str(), UnlinkatFlags::RemoveDir).is_err() {
            stuck.insert(here);
        }
        current = parent;
    }
}

/// `name` beneath `dir`, opened as a directory without following a symlink; if this user
/// may not read, enter or write it (an agent's `chmod 000`), its mode is given back
/// (0700) first. The mode is set on the directory opened (`O_PATH`, then through its
/// `/proc/self/fd` link), never by name: the name checked with `lstat` and then changed
/// by `fchmodat`, which follows a symlink, could be swapped for a link in between by an
/// agent racing the MCP server's recursive `delete-file`, whose mode 0700 then went to
/// whatever the link named, outside the base (round nineteen's review, found by reading:
/// `sandbox_round19_review::a_recursive_delete_raced_with_a_symlink_changes_no_mode_outside`
/// did not catch the window).
fn open_dir_giving_back<P: ?Sized + nix::NixPath>(
    dir: impl std::os::fd::AsFd,
    name: &P,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsFd, AsRawFd};
    let path_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let held = nix::fcntl::openat(dir.as_fd(), name, path_flags, nix::sys::stat::Mode::empty())
        .map_err(|e| match e {
            Errno::ELOOP => Errno::ENOTDIR,
            e => e,
        })?;
    let st = nix::sys::stat::fstat(held.as_fd())?;
    if st.st_mode & 0o700 != 0o700 {
        let _ = nix::sys::stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            format!("/proc/self/fd/{}", held.as_raw_fd()).as_str(),
            nix::sys::stat::Mode::from_bits_truncate(0o700),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        );
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    Ok(nix::fcntl::openat(
        held.as_fd(),
        ".",
        flags,
        nix::sys::stat::Mode::empty(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PID that names no process here (beyond the kernel's default `pid_max`).
    const NO_SUCH_PID: u32 = 4_194_304 + 17;

    #[test]
    fn a_chain_deeper_than_the_stack_and_the_descriptor_limit_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("run");
        fs::create_dir(&top).unwrap();
        // Made by descriptor, one level at a time (a path this deep is no path).
        let mut current = nix::fcntl::openat(
            nix::fcntl::AT_FDCWD,
            &top,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        for level in 0..20_000 {
            nix::sys::stat::mkdirat(
                &current,
                "d",
                nix::sys::stat::Mode::from_bits_truncate(0o700),
            )
            .unwrap();
            if level == 100 {
                // A level the agent closed, and a file and a symlink out beside it.
                nix::unistd::symlinkat(dir.path(), &current, "out").unwrap();
            }
            let next = nix::fcntl::openat(
                &current,
                "d",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                nix::sys::stat::Mode::empty(),
            )
            .unwrap();
            if level == 200 {
                nix::sys::stat::fchmod(&next, nix::sys::stat::Mode::empty()).unwrap();
            }
            current = next;
        }
        drop(current);
        let outside = dir.path().join("keep.txt");
        fs::write(&outside, "kept").unwrap();
        // A thread with a small stack: nothing here may recurse per level.
        let removed = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || try_remove_tree(&top).map(|()| top))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert!(!removed.exists());
        assert_eq!(fs::read_to_string(&outside).unwrap(), "kept");
    }

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
    fn a_run_directory_holds_its_own_lock_and_makes_no_lock_file() {
        // A coder in another PID namespace: only the lock speaks for it.
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join(format!("{NO_SUCH_PID}-abc"));
        let lock = RunLock::make_dir(&run).unwrap();
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            names,
            [run.file_name().unwrap()],
            "nothing beside the run's directory"
        );
        assert_eq!(fs::metadata(&run).unwrap().mode() & 0o777, 0o700);
        assert!(run_is_live(&run, NO_SUCH_PID));
        prune_dead_run_dirs(dir.path());
        assert!(run.is_dir(), "a live run's directory was pruned");
        assert!(
            RunLock::make_dir(&run).is_err(),
            "a second run took the same directory"
        );
        drop(lock);
        assert!(!run_is_live(&run, NO_SUCH_PID));
        prune_dead_run_dirs(dir.path());
        assert!(!run.exists(), "a dead run's directory stays");
    }

    #[test]
    fn a_run_directory_pruned_before_its_lock_is_made_again() {
        // Pruners run all the while: each new directory is unlocked for a moment after its
        // `mkdir`; once `make_dir` returns, it is the run's and stays.
        let dir = tempfile::tempdir().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let pruners: Vec<_> = (0..2)
            .map(|_| {
                let (base, stop) = (dir.path().to_path_buf(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        prune_dead_run_dirs(&base);
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut held = Vec::new();
        for i in 0..100 {
            assert!(Instant::now() < deadline, "no progress");
            let run = dir.path().join(format!("{NO_SUCH_PID}-{i}"));
            let lock = RunLock::make_dir(&run).unwrap_or_else(|e| panic!("{i}: {e}"));
            held.push((lock, run));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for pruner in pruners {
            pruner.join().unwrap();
        }
        for (_lock, run) in &held {
            assert!(
                run.is_dir(),
                "{} was pruned while its run held it",
                run.display()
            );
        }
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
