//! Empty placeholder directories leave the user's tree by a rename, not an `rmdir`.
//!
//! Removing an empty directory on ext4 frees its block through the journal: 0.3 to 5 ms
//! per `rmdir` on the development machine under write load (an empty file's `unlink`:
//! 0.01 to 0.03 ms), and a run of the default sandbox in an empty workspace removes eight
//! placeholder directories at its end, on the path to coder's exit. Moving one into the
//! trash in coder's state directory frees nothing (0.02 to 0.1 ms), when both are on one
//! filesystem; elsewhere the placeholder is removed as before.
//!
//! What a rename moves is not what an `rmdir` would have refused: a directory someone
//! wrote into, or another directory swapped in under the placeholder's name. So what
//! arrives in the trash is checked there, under its new name, to be the placeholder
//! (device and inode) and empty; anything else is renamed back where it was. The trash is
//! emptied by `rmdir` alone, never recursively, by later runs while their agent runs
//! ([`Pruner`]): a directory that someone wrote into at the very last moment (through a
//! descriptor of it, since its name was gone) stays in the trash rather than being
//! deleted. The trash lives in the placeholders' lease directory, which no run's agent
//! may reach ([`super::policy`] refuses such grants).

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, RenameFlags, openat, renameat2};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::scan::Placeholder;

/// The placeholders' lease directory's name in coder's state directory (see
/// `sandbox::lease`), where the trash lives.
pub(crate) const LEASE_DIR: &str = "placeholders";

/// The trash's name in the lease directory.
const TRASH_DIR: &str = "trash";

/// At most this many entries are pruned by one run: the trash of one earlier run or a few.
const PRUNE_PER_RUN: usize = 256;

/// A trash holding this many entries takes no more: runs too short for their pruning to
/// keep up (a CLI that fails at once, back to back) remove their placeholders as before
/// until later runs have emptied it.
const TRASH_LIMIT: usize = 256;

/// The trash, open for one release of placeholders.
pub(crate) struct Trash {
    fd: OwnedFd,
    dev: u64,
}

/// What [`Trash::take`] did with a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// It is out of the tree (moved), or was no longer there to take.
    Done,
    /// Not moved (another filesystem, or the rename failed): remove it the old way.
    NotMoved,
}

impl Trash {
    /// The trash in the lease directory `lease_dir`, created (mode 0700) when absent;
    /// `None` when it cannot be had or is full (placeholders are then removed as before).
    pub(crate) fn open(lease_dir: &Path) -> Option<Trash> {
        let path = lease_dir.join(TRASH_DIR);
        match nix::unistd::mkdir(&path, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(_) => return None,
        }
        let fd = open_dir(AT_FDCWD, &path).ok()?;
        let dev = nix::sys::stat::fstat(fd.as_fd()).ok()?.st_dev;
        let listing = nix::dir::Dir::from_fd(fd.try_clone().ok()?).ok()?;
        // `.` and `..` included.
        (entries(listing, TRASH_LIMIT + 2).len() < TRASH_LIMIT + 2).then_some(Trash { fd, dev })
    }

    /// Moves the empty directory placeholder `p` into the trash, if it is still what
    /// coder made; anything else found there (a swapped directory, one written into)
    /// goes back under its name.
    pub(crate) fn take(&self, p: &Placeholder) -> Taken {
        // Everything below is relative to the placeholder's parent, opened once with no
        // symlink on the way: a directory on the path swapped for a symlink meanwhile (by
        // a process no lock excludes, such as another state directory's agent) can neither
        // choose what is taken nor where a refused entry goes back to.
        let (Some(parent), Some(leaf)) = (p.path.parent(), p.path.file_name()) else {
            return Taken::NotMoved;
        };
        let parent = match super::sys::open_nofollow_dir(parent) {
            Ok(fd) => fd,
            // Gone, or its path now leads through a symlink: not coder's to touch.
            Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => return Taken::Done,
            Err(_) => return Taken::NotMoved,
        };
        let Ok(meta) = nix::sys::stat::fstatat(
            parent.as_fd(),
            leaf,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) else {
            return Taken::Done;
        };
        let is_dir = meta.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR;
        if meta.st_dev != p.dev || meta.st_ino != p.ino || !is_dir {
            // Not coder's any more: left alone, as `Placeholder::remove` leaves it.
            return Taken::Done;
        }
        if meta.st_dev != self.dev {
            return Taken::NotMoved;
        }
        // Unique among the trash's entries: no other directory has this inode while this
        // one exists.
        let name = format!("{:x}-{:x}", p.dev, p.ino);
        let moved = renameat2(
            parent.as_fd(),
            leaf,
            self.fd.as_fd(),
            name.as_str(),
            RenameFlags::RENAME_NOREPLACE,
        );
        if moved.is_err() {
            return Taken::NotMoved;
        }
        if !self.holds_empty(&name, p) {
            // Back into the directory it was taken from; should its name have been taken
            // meanwhile, it stays in the trash, which is never emptied recursively.
            let _ = renameat2(
                self.fd.as_fd(),
                name.as_str(),
                parent.as_fd(),
                leaf,
                RenameFlags::RENAME_NOREPLACE,
            );
        }
        Taken::Done
    }

    /// Whether the trash's entry `name` is the placeholder `p` and empty. An entry that is
    /// gone (pruned meantime by another run, which only removes empty directories) is.
    fn holds_empty(&self, name: &str, p: &Placeholder) -> bool {
        let fd = match open_dir(self.fd.as_fd(), name) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return true,
            Err(_) => return false,
        };
        let same = nix::sys::stat::fstat(fd.as_fd())
            .is_ok_and(|st| st.st_dev == p.dev && st.st_ino == p.ino);
        let empty = same && fd.try_clone().is_ok_and(is_empty_dir);
        if empty {
            // It waits in coder's state directory now, where nothing is open to others
            // (a placeholder is made 0755, and `tests/sandbox_attacks.rs` c8-state-modes
            // checks every mode there); one that goes back keeps its mode.
            let _ = nix::sys::stat::fchmod(fd.as_fd(), Mode::S_IRWXU);
        }
        empty
    }
}

/// Whether the directory open as `fd` holds nothing but `.` and `..` (and can be read).
fn is_empty_dir(fd: OwnedFd) -> bool {
    let Ok(mut dir) = nix::dir::Dir::from_fd(fd) else {
        return false;
    };
    dir.iter()
        .all(|entry| entry.is_ok_and(|e| matches!(e.file_name().to_bytes(), b"." | b"..")))
}

/// `name` beneath `dir`, opened to be listed (no symlink followed at its end).
fn open_dir<P: ?Sized + nix::NixPath>(dir: impl AsFd, name: &P) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(dir, name, flags, Mode::empty())
}

/// Up to `most` names of `dir`'s entries, up to the first error (a directory that cannot
/// be read keeps failing).
fn entries(mut dir: nix::dir::Dir, most: usize) -> Vec<OsString> {
    dir.iter()
        .map_while(Result::ok)
        .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_owned())
        .take(most)
        .collect()
}

/// Empties the trash of earlier runs on a thread of its own, while this run's agent runs:
/// `rmdir` of each entry (a directory someone wrote into stays). [`Pruner::stop`] (or
/// dropping it) asks the thread to stop before its next removal; it is never waited for,
/// so it cannot hold coder's exit for more than the one removal under way.
pub struct Pruner {
    stop: Arc<AtomicBool>,
}

impl Pruner {
    /// Starts pruning the trash of the lease directory in `state_dir`, if there is one.
    pub fn start(state_dir: &Path) -> Pruner {
        let stop = Arc::new(AtomicBool::new(false));
        let trash = state_dir.join(LEASE_DIR).join(TRASH_DIR);
        let flag = stop.clone();
        let _ = std::thread::Builder::new()
            .name("coder-trash".into())
            .spawn(move || prune(&trash, &flag));
        Pruner { stop }
    }

    /// Asks the thread to stop before its next removal.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for Pruner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes up to [`PRUNE_PER_RUN`] empty directories from `trash` until `stop` is set.
fn prune(trash: &Path, stop: &AtomicBool) {
    let Ok(fd) = open_dir(AT_FDCWD, trash) else {
        return;
    };
    let Ok(listing) = fd
        .try_clone()
        .map_err(drop)
        .and_then(|f| nix::dir::Dir::from_fd(f).map_err(drop))
    else {
        return;
    };
    let names = entries(listing, PRUNE_PER_RUN + 2);
    for name in names.iter().filter(|n| *n != "." && *n != "..") {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let _ = unlinkat(fd.as_fd(), name.as_os_str(), UnlinkatFlags::RemoveDir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::PlaceholderKind;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    struct Fx {
        _dir: tempfile::TempDir,
        lease: std::path::PathBuf,
        ws: std::path::PathBuf,
    }

    fn fx() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let (lease, ws) = (root.join("placeholders"), root.join("ws"));
        fs::create_dir(&lease).unwrap();
        fs::create_dir(&ws).unwrap();
        Fx {
            _dir: dir,
            lease,
            ws,
        }
    }

    fn placeholder_dir(path: &Path) -> Placeholder {
        fs::create_dir(path).unwrap();
        let meta = fs::symlink_metadata(path).unwrap();
        Placeholder {
            path: path.to_path_buf(),
            kind: PlaceholderKind::Dir,
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    fn trash_names(fx: &Fx) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(fx.lease.join(TRASH_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_empty_placeholder_leaves_the_tree_into_the_trash() {
        let fx = fx();
        let p = placeholder_dir(&fx.ws.join(".claude"));
        let trash = Trash::open(&fx.lease).unwrap();
        assert_eq!(trash.take(&p), Taken::Done);
        assert!(!fx.ws.join(".claude").exists());
        let name = format!("{:x}-{:x}", p.dev, p.ino);
        assert_eq!(trash_names(&fx), std::slice::from_ref(&name));
        // Closed to others, like everything else in coder's state directory.
        let mode = fs::metadata(fx.lease.join(TRASH_DIR).join(name))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn a_placeholder_someone_wrote_into_stays_with_what_they_wrote() {
        let fx = fx();
        let p = placeholder_dir(&fx.ws.join(".claude"));
        fs::write(fx.ws.join(".claude/settings.json"), "{}").unwrap();
        assert_eq!(Trash::open(&fx.lease).unwrap().take(&p), Taken::Done);
        assert_eq!(
            fs::read_to_string(fx.ws.join(".claude/settings.json")).unwrap(),
            "{}"
        );
        assert!(trash_names(&fx).is_empty());
    }

    #[test]
    fn another_directory_under_the_placeholders_name_is_left_alone() {
        let fx = fx();
        let p = placeholder_dir(&fx.ws.join(".vscode"));
        // Swapped while the placeholder still exists elsewhere: another inode.
        fs::rename(&p.path, fx.ws.join("elsewhere")).unwrap();
        fs::create_dir(&p.path).unwrap();
        let swapped = fs::symlink_metadata(&p.path).unwrap().ino();
        assert_eq!(Trash::open(&fx.lease).unwrap().take(&p), Taken::Done);
        assert_eq!(fs::symlink_metadata(&p.path).unwrap().ino(), swapped);
        assert!(trash_names(&fx).is_empty());
    }

    #[test]
    fn a_full_trash_takes_nothing_more() {
        let fx = fx();
        let trash = fx.lease.join(TRASH_DIR);
        fs::create_dir(&trash).unwrap();
        for n in 0..TRASH_LIMIT {
            fs::create_dir(trash.join(n.to_string())).unwrap();
        }
        assert!(Trash::open(&fx.lease).is_none());
        fs::remove_dir(trash.join("0")).unwrap();
        assert!(Trash::open(&fx.lease).is_some());
    }

    #[test]
    fn pruning_removes_empty_entries_and_keeps_the_others() {
        let fx = fx();
        let (p, q) = (
            placeholder_dir(&fx.ws.join(".idea")),
            placeholder_dir(&fx.ws.join(".husky")),
        );
        let trash = Trash::open(&fx.lease).unwrap();
        assert_eq!((trash.take(&p), trash.take(&q)), (Taken::Done, Taken::Done));
        // Written into through a descriptor kept from before the move.
        let kept = format!("{:x}-{:x}", q.dev, q.ino);
        fs::write(fx.lease.join(TRASH_DIR).join(&kept).join("late"), "x").unwrap();
        prune(&fx.lease.join(TRASH_DIR), &AtomicBool::new(false));
        assert_eq!(trash_names(&fx), [kept]);
    }

    #[test]
    fn a_stopped_pruner_removes_nothing() {
        let fx = fx();
        let p = placeholder_dir(&fx.ws.join(".idea"));
        assert_eq!(Trash::open(&fx.lease).unwrap().take(&p), Taken::Done);
        prune(&fx.lease.join(TRASH_DIR), &AtomicBool::new(true));
        assert_eq!(trash_names(&fx).len(), 1);
    }
}
