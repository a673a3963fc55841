//! Proving that the start scan read a tree that held still: every directory the scan
//! relied on is shown unchanged from the moment it was read to the end of the scan, or
//! the scan is taken again.
//!
//! Why: the walk reads one directory at a time, and another process (a second agent
//! confined to the same workspace, which cannot read the secrets but may rename the
//! directories above them) can move a directory out of one it has not read yet into one
//! it already has. The walk then never meets that directory, its secrets get no mask, and
//! this run's agent reads them. Refusing symlinks and opening beneath descriptors (see
//! `scan`) does nothing against that: nothing is redirected, the tree just changes shape.
//!
//! Two witnesses, chosen per directory when the walk reads it:
//! * **Its ctime**, for directories whose ctime is older than the scan's start by the
//!   racy margin on a file system that keeps ctimes honestly (the same rule that lets
//!   the listing cache trust a record, [`super::listing`]): adding, removing or renaming
//!   an entry sets the ctime to the current time, which is then necessarily newer, and no
//!   unprivileged process can set a ctime back. At the end each such directory is looked
//!   up again *by its path* from the tree's descriptor; the same inode with the same
//!   ctime shows its entries are the ones the scan used. The kept listings of earlier
//!   runs are trusted only under that rule, so every directory the walk did not list
//!   falls here.
//! * **An inotify watch** (entries created, moved in, hard-linked), added before the
//!   directory is listed, for the rest: a ctime from the last two seconds can take a
//!   change in the same clock tick without moving. What the listing missed, the watch
//!   reports. An event that cannot change what the scan finds is let pass (a plain file
//!   whose name matches no glob and no git name, outside secret and protected
//!   directories: a build writing its logs does not restart the scan), and so are the
//!   placeholders coder itself creates, one event for each.
//!
//! A directory gets its placeholders only after it is watched and its ctime taken once
//! more; its ctime witness then ends at that moment, the watch covers the rest.
//!
//! Why this is enough: a directory the walk never met must have entered a directory it
//! read, after that read (otherwise the read would have listed it), which the witness of
//! that directory reports. Moves after the check are the helper's business: each mask is
//! mounted only on the inode the scan found at its path (`Mask::dev`, `Mask::ino`), and
//! a mount then travels with its file.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::stat::{FileStat, fstat, fstatat};

use super::SandboxError;
use super::listing::{Ctime, ctime_of, trusted_file_system};

/// How a directory the scan relied on is shown unchanged at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Witness {
    /// Its ctime then (taken before it was read).
    Ctime(Ctime),
    /// A watch added before it was listed.
    Watch,
}

/// One directory whose entries the scan used.
#[derive(Debug)]
struct SeenDir {
    /// Index of its tree in the scan's trees.
    tree: usize,
    rel: PathBuf,
    dev: u64,
    ino: u64,
    witness: Witness,
    /// Inside a directory of secrets or a protected one, where every new entry counts.
    inside_special: bool,
}

#[derive(Debug, Default)]
struct WatchState {
    seen: Vec<SeenDir>,
    /// What each watch is on, by (dev, ino).
    watches: HashMap<WatchDescriptor, (u64, u64)>,
    /// Directories coder is about to change itself: their ctime once a watch was on them.
    changing: HashMap<(u64, u64), Ctime>,
    /// Placeholders coder creates, by (parent dev, parent ino, name): one event each.
    expected: HashSet<(u64, u64, OsString)>,
    /// Devices looked at, and whether their file system keeps ctimes honestly.
    devices: HashMap<u64, bool>,
}

/// The watch over one scan (all its trees and threads).
#[derive(Debug)]
pub(crate) struct ScanWatch {
    inotify: Inotify,
    /// Ctimes from this instant on are racy (`ScanListings::trusted_before`).
    trusted_before: Ctime,
    state: Mutex<WatchState>,
}

/// What the check found moving: a directory and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeMoved {
    pub path: PathBuf,
    pub what: &'static str,
}

/// A tree as the check needs it: its root (for messages) and its descriptor.
pub(crate) struct CheckedTree<'a> {
    pub root: &'a Path,
    pub fd: BorrowedFd<'a>,
}

impl ScanWatch {
    /// Let go of the watch without waiting: closing an inotify descriptor that held
    /// watches waits for the kernel's grace period on its marks (5 to 16 ms measured here,
    /// at load 3 to 5, and far longer now and then), which nothing needs to wait for.
    ///
    /// The thread that closes it is created with every signal blocked: `coder sandbox`
    /// takes its signals on a signalfd with them blocked in its own thread, and a thread
    /// still closing without them blocked would take a SIGTERM's default action and kill
    /// coder instead of letting it reach the command (seen: 14 runs in 40 at load 4).
    pub(crate) fn release(self) {
        use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
        let mut old = SigSet::empty();
        let blocked =
            pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), Some(&mut old)).is_ok();
        // Not blocked: close here, waiting, rather than risk the process's signals.
        if blocked {
            // A thread that cannot start drops its closure here, closing synchronously.
            let _ = std::thread::Builder::new()
                .name("scan-watch-close".into())
                .spawn(move || drop(self));
            let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        }
    }

    pub(crate) fn new(trusted_before: Ctime) -> Result<ScanWatch, SandboxError> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| unwatchable("inotify_init1", "the scan", e))?;
        Ok(ScanWatch {
            inotify,
            trusted_before,
            state: Mutex::new(WatchState::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The directory open as `dir` (its `fstat` before the listing is `st`) is about to be
    /// listed at `rel` in tree `tree`.
    pub(crate) fn before_listing(
        &self,
        tree: usize,
        dir: BorrowedFd<'_>,
        st: &FileStat,
        rel: &Path,
        inside_special: bool,
        here: &Path,
    ) -> Result<(), SandboxError> {
        let witness = if self.ctime_holds(dir, st) {
            Witness::Ctime(ctime_of(st))
        } else {
            self.watch(dir, st, here)?;
            Witness::Watch
        };
        self.see(tree, rel, st, witness, inside_special);
        Ok(())
    }

    /// The directory `st` describes at `rel` is known from a listing kept from an earlier
    /// run, which is only ever kept with a ctime that [`ScanWatch::before_listing`] would
    /// take as its witness.
    pub(crate) fn kept(&self, tree: usize, st: &FileStat, rel: &Path) {
        self.see(tree, rel, st, Witness::Ctime(ctime_of(st)), false);
    }

    /// coder is about to create `name` in the directory open as `dir`: from now on a watch
    /// covers it, and its ctime witness ends here.
    pub(crate) fn before_placeholder(
        &self,
        dir: BorrowedFd<'_>,
        name: &std::ffi::OsStr,
        here: &Path,
    ) -> Result<(), SandboxError> {
        let before = fstat(dir).map_err(|e| unwatchable("inspect", here, e))?;
        self.watch(dir, &before, here)?;
        // Taken again once the watch is on: a change between the two is in this ctime.
        let st = fstat(dir).map_err(|e| unwatchable("inspect", here, e))?;
        let mut state = self.lock();
        state
            .changing
            .entry((st.st_dev, st.st_ino))
            .or_insert(ctime_of(&st));
        state
            .expected
            .insert((st.st_dev, st.st_ino, name.to_os_string()));
        Ok(())
    }

    fn ctime_holds(&self, dir: BorrowedFd<'_>, st: &FileStat) -> bool {
        if ctime_of(st) >= self.trusted_before {
            return false;
        }
        let known = self.lock().devices.get(&st.st_dev).copied();
        known.unwrap_or_else(|| {
            let trusted = trusted_file_system(dir);
            self.lock().devices.insert(st.st_dev, trusted);
            trusted
        })
    }

    fn watch(&self, dir: BorrowedFd<'_>, st: &FileStat, here: &Path) -> Result<(), SandboxError> {
        // The descriptor, not a path: the directory watched is the one listed.
        let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let flags =
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_ONLYDIR;
        let wd = self
            .inotify
            .add_watch(path.as_str(), flags)
            .map_err(|e| unwatchable("inotify_add_watch", here, e))?;
        self.lock().watches.insert(wd, (st.st_dev, st.st_ino));
        Ok(())
    }

    fn see(&self, tree: usize, rel: &Path, st: &FileStat, witness: Witness, special: bool) {
        self.lock().seen.push(SeenDir {
            tree,
            rel: rel.to_path_buf(),
            dev: st.st_dev,
            ino: st.st_ino,
            witness,
            inside_special: special,
        });
    }

    /// Whether every directory the scan relied on is as it was read. `matters` says
    /// whether a new entry (tree, path relative to it, a directory?) could change what the
    /// scan finds outside secret and protected directories.
    pub(crate) fn check(
        &self,
        trees: &[CheckedTree<'_>],
        matters: impl Fn(usize, &Path, bool) -> bool,
    ) -> Result<(), TreeMoved> {
        let state = self.lock();
        check_ctimes(trees, &state.seen, &state.changing)?;
        let by_id: HashMap<(u64, u64), &SeenDir> =
            state.seen.iter().map(|d| ((d.dev, d.ino), d)).collect();
        let mut expected = state.expected.clone();
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => return Ok(()),
                Err(_) => return Err(moved(trees[0].root, "could not be watched to the end")),
            };
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    return Err(moved(trees[0].root, "changed too often to follow"));
                }
                let (Some(&id), Some(name)) = (state.watches.get(&event.wd), event.name) else {
                    continue;
                };
                if expected.remove(&(id.0, id.1, name.clone())) {
                    continue;
                }
                // A directory coder watched only to make its placeholders (inside a git
                // dir, which the scan does not list) is not one the scan relied on.
                let Some(dir) = by_id.get(&id) else {
                    continue;
                };
                let rel = dir.rel.join(&name);
                let is_dir = event.mask.contains(AddWatchFlags::IN_ISDIR);
                if dir.inside_special || matters(dir.tree, &rel, is_dir) {
                    let path = trees[dir.tree].root.join(&rel);
                    return Err(TreeMoved {
                        path,
                        what: "appeared",
                    });
                }
            }
        }
    }
}

/// [`check_ctime`] for every directory witnessed by its ctime, on as many threads as the
/// walk used: each is a path lookup from the tree's root, a few thousand in a big tree.
fn check_ctimes(
    trees: &[CheckedTree<'_>],
    seen: &[SeenDir],
    changing: &HashMap<(u64, u64), Ctime>,
) -> Result<(), TreeMoved> {
    let threads = super::sys::walk_threads();
    let chunk = seen.len().div_ceil(threads).max(1);
    let check = |dirs: &[SeenDir]| {
        dirs.iter().try_for_each(|dir| match dir.witness {
            Witness::Ctime(then) => check_ctime(trees, dir, then, changing),
            Witness::Watch => Ok(()),
        })
    };
    std::thread::scope(|scope| {
        let mut chunks = seen.chunks(chunk);
        let first = chunks.next().unwrap_or(&[]);
        let others: Vec<_> = chunks
            .map(|dirs| scope.spawn(move || check(dirs)))
            .collect();
        let mut result = check(first);
        for handle in others {
            let theirs = handle
                .join()
                .unwrap_or_else(|_| Err(moved(trees[0].root, "could not be checked")));
            result = result.and(theirs);
        }
        result
    })
}

/// The directory `dir` still at its path, the same inode, with the ctime it had when it
/// was read (or when coder began to change it itself).
fn check_ctime(
    trees: &[CheckedTree<'_>],
    dir: &SeenDir,
    then: Ctime,
    changing: &HashMap<(u64, u64), Ctime>,
) -> Result<(), TreeMoved> {
    let tree = &trees[dir.tree];
    let path = || tree.root.join(&dir.rel);
    let now = if dir.rel.as_os_str().is_empty() {
        fstat(tree.fd)
    } else {
        fstatat(tree.fd, &dir.rel, AtFlags::AT_SYMLINK_NOFOLLOW)
    };
    let now = now.map_err(|_| moved(&path(), "is gone"))?;
    if (now.st_dev, now.st_ino) != (dir.dev, dir.ino) {
        return Err(moved(&path(), "was replaced"));
    }
    let last = changing
        .get(&(dir.dev, dir.ino))
        .copied()
        .unwrap_or_else(|| ctime_of(&now));
    if last != then {
        return Err(moved(&path(), "changed"));
    }
    Ok(())
}

fn moved(path: &Path, what: &'static str) -> TreeMoved {
    TreeMoved {
        path: path.to_path_buf(),
        what,
    }
}

fn unwatchable(op: &'static str, path: impl AsRef<Path>, errno: Errno) -> SandboxError {
    let path = path.as_ref();
    match errno {
        Errno::ENOSPC | Errno::EMFILE => SandboxError::ScanUnwatchable {
            path: path.to_path_buf(),
            reason: format!(
                "{op}: {errno} (the inotify limits fs.inotify.max_user_watches and \
                 fs.inotify.max_user_instances are reached)"
            ),
        },
        _ => SandboxError::sys(op, super::bytes::short(path), errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::fd::AsFd;

    fn tree(dir: &Path) -> std::os::fd::OwnedFd {
        crate::sandbox::sys::open_nofollow(dir).unwrap()
    }

    fn st(path: &Path) -> FileStat {
        nix::sys::stat::stat(path).unwrap()
    }

    fn nothing_matters(_: usize, _: &Path, is_dir: bool) -> bool {
        is_dir
    }

    #[test]
    fn a_directory_moved_into_a_watched_one_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join("aa")).unwrap();
        fs::create_dir_all(root.join("zz/d")).unwrap();
        let fd = tree(root);
        // Everything here is new: racy, so watched.
        let watch = ScanWatch::new(0).unwrap();
        let aa = tree(&root.join("aa"));
        watch
            .before_listing(
                0,
                aa.as_fd(),
                &st(&root.join("aa")),
                Path::new("aa"),
                false,
                root,
            )
            .unwrap();
        fs::rename(root.join("zz/d"), root.join("aa/d")).unwrap();
        let trees = [CheckedTree {
            root,
            fd: fd.as_fd(),
        }];
        let moved = watch.check(&trees, nothing_matters).unwrap_err();
        assert_eq!(moved.path, root.join("aa/d"));
        assert_eq!(moved.what, "appeared");
    }

    #[test]
    fn a_plain_file_that_matters_to_no_glob_is_let_pass_and_so_is_a_placeholder() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let fd = tree(root);
        let watch = ScanWatch::new(0).unwrap();
        watch
            .before_listing(0, fd.as_fd(), &st(root), Path::new(""), false, root)
            .unwrap();
        fs::write(root.join("build.log"), "x").unwrap();
        watch
            .before_placeholder(fd.as_fd(), std::ffi::OsStr::new("hooks"), root)
            .unwrap();
        fs::create_dir(root.join("hooks")).unwrap();
        let trees = [CheckedTree {
            root,
            fd: fd.as_fd(),
        }];
        assert_eq!(watch.check(&trees, nothing_matters), Ok(()));
        // A second directory of that name is not coder's.
        fs::create_dir(root.join("other")).unwrap();
        assert!(watch.check(&trees, nothing_matters).is_err());
    }

    #[test]
    fn an_old_directory_is_witnessed_by_its_ctime_and_by_its_path() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join("old/sub")).unwrap();
        let fd = tree(root);
        // A trusted-before far in the future makes every ctime old.
        let watch = ScanWatch::new(i128::MAX).unwrap();
        let old = tree(&root.join("old"));
        watch
            .before_listing(
                0,
                old.as_fd(),
                &st(&root.join("old")),
                Path::new("old"),
                false,
                root,
            )
            .unwrap();
        let trees = [CheckedTree {
            root,
            fd: fd.as_fd(),
        }];
        assert_eq!(watch.check(&trees, nothing_matters), Ok(()));
        fs::create_dir(root.join("old/new")).unwrap();
        let moved = watch.check(&trees, nothing_matters).unwrap_err();
        // On a file system whose ctimes are not trusted, the watch saw it instead.
        assert!(moved.path.starts_with(root.join("old")), "{moved:?}");
        if trusted_file_system(fd.as_fd()) {
            assert_eq!(moved.what, "changed");
            fs::rename(root.join("old"), root.join("gone")).unwrap();
            let moved = watch.check(&trees, nothing_matters).unwrap_err();
            assert_eq!(moved.what, "is gone");
        }
    }
}
