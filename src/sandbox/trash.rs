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
//!
//! coder's own per-run directories (the CLI's config dir of a run, which the CLI fills
//! with a dozen directories) go the same way into a second trash, `<state>/trash`, by one
//! rename ([`discard_own`]), and later runs remove them whole while their agent runs. Only
//! a tree whose every entry is owner-only (directories 0700, files 0600, nothing else) is
//! moved: everything coder keeps in its state directory is, and a tree that is not is
//! removed in place as before. So that the CLI's own files are owner-only from the
//! start, the config dir gets a default ACL of owner-only ([`make_owner_only_inherited`]).

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
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

/// coder's own trash in its state directory: per-run directories of coder's alone (the
/// CLI's config dir of a run), removed whole by later runs.
const OWN_TRASH: &str = "trash";

/// coder's own trash takes no more once it holds this many (two a run: the CLI's config
/// dir and the sandbox's run dir).
const OWN_LIMIT: usize = 128;

/// A tree of more entries than this is removed in place: its check would cost more than
/// it saves, and its removal is a later run's work too long to hide behind an agent.
const OWN_TREE_LIMIT: usize = 4096;

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

/// Gives directory `dir` a default ACL of owner-only (`u::rwx,g::-,o::-`): what is created
/// in it from now on, by anyone, at any depth, gets no group or other permission whatever
/// mode it asks for (the umask no longer applies there), and its directories inherit the
/// ACL. False where the file system has no ACLs (then nothing changed).
pub fn make_owner_only_inherited(dir: &Path) -> bool {
    // The kernel's POSIX ACL xattr: version 2, then (tag, permissions, id) entries,
    // little-endian; the three base entries carry no id.
    const VERSION: u32 = 2;
    const USER_OBJ: u16 = 0x01;
    const GROUP_OBJ: u16 = 0x04;
    const OTHER: u16 = 0x20;
    const NO_ID: u32 = u32::MAX;
    let mut value = VERSION.to_le_bytes().to_vec();
    for (tag, perm) in [(USER_OBJ, 7u16), (GROUP_OBJ, 0), (OTHER, 0)] {
        value.extend_from_slice(&tag.to_le_bytes());
        value.extend_from_slice(&perm.to_le_bytes());
        value.extend_from_slice(&NO_ID.to_le_bytes());
    }
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` and the name are NUL-terminated strings and `value` is valid for
    // `value.len()` bytes, all alive for the call; `lsetxattr` only reads them.
    let rc = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            c"system.posix_acl_default".as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    rc == 0
}

/// Moves coder's own per-run directory `dir` (in `state_dir`, on its file system, no
/// writer of it left) into `state_dir`'s trash by one rename, for a later run's [`Pruner`]
/// to remove, when every entry of it is owner-only; false when it was not moved (an entry
/// open to others or neither directory nor file, another file system, a full trash, an
/// error): the caller removes it.
pub fn discard_own(state_dir: &Path, dir: &Path) -> bool {
    if !owner_only_tree(dir) {
        return false;
    }
    let trash = state_dir.join(OWN_TRASH);
    match nix::unistd::mkdir(&trash, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(_) => return false,
    }
    let (Ok(fd), Some(name)) = (open_dir(AT_FDCWD, &trash), dir.file_name()) else {
        return false;
    };
    let full = fd
        .try_clone()
        .ok()
        .and_then(|f| nix::dir::Dir::from_fd(f).ok())
        .is_none_or(|listing| entries(listing, OWN_LIMIT + 2).len() >= OWN_LIMIT + 2);
    !full
        && renameat2(
            AT_FDCWD,
            dir,
            fd.as_fd(),
            name,
            RenameFlags::RENAME_NOREPLACE,
        )
        .is_ok()
}

/// Whether `dir` and everything beneath it are directories of mode 0700 and regular files
/// of mode 0600 (as `lstat` sees them: a symlink is neither), at most [`OWN_TREE_LIMIT`].
fn owner_only_tree(dir: &Path) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let owner_only_dir =
            std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.mode() & 0o7777 == 0o700);
        let Ok(listing) = std::fs::read_dir(&dir)
            .map_err(drop)
            .and_then(|l| owner_only_dir.then_some(l).ok_or(()))
        else {
            return false;
        };
        for entry in listing {
            seen += 1;
            let Ok(entry) = entry else {
                return false;
            };
            let Ok(meta) = entry.metadata() else {
                return false;
            };
            if seen > OWN_TREE_LIMIT {
                return false;
            }
            if meta.is_dir() {
                stack.push(entry.path());
            } else if !(meta.is_file() && meta.mode() & 0o7777 == 0o600) {
                return false;
            }
        }
    }
    true
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
    /// Starts pruning the trash of the lease directory in `state_dir`, then coder's own
    /// trash there, if there are any.
    pub fn start(state_dir: &Path) -> Pruner {
        let stop = Arc::new(AtomicBool::new(false));
        let trash = state_dir.join(LEASE_DIR).join(TRASH_DIR);
        let own = state_dir.join(OWN_TRASH);
        let flag = stop.clone();
        let _ = std::thread::Builder::new()
            .name("coder-trash".into())
            .spawn(move || {
                prune(&trash, &flag);
                prune_own(&own, &flag);
            });
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

/// Removes up to [`OWN_LIMIT`] of coder's own trashed directories, whole, until `stop`.
fn prune_own(trash: &Path, stop: &AtomicBool) {
    let Ok(listing) = open_dir(AT_FDCWD, trash).and_then(nix::dir::Dir::from_fd) else {
        return;
    };
    for name in entries(listing, OWN_LIMIT + 2) {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if name != "." && name != ".." {
            // Symlinks inside are removed, not followed; permissions are given back on
            // the way down.
            crate::config::run_dirs::remove_tree(&trash.join(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::PlaceholderKind;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

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
    fn coders_own_directories_go_to_its_trash_and_later_runs_remove_them_whole() {
        let fx = fx();
        let state = fx.lease.parent().unwrap().to_path_buf();
        let run = state.join("cli-runs").join("1-abc");
        fs::create_dir_all(&run).unwrap();
        fs::set_permissions(&run, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(make_owner_only_inherited(&run));
        // Made with the modes a program asks for by default (0777, 0666, less the umask).
        fs::create_dir_all(run.join("claude/projects/p")).unwrap();
        fs::write(run.join("claude/projects/p/s.jsonl"), "{}").unwrap();
        assert!(discard_own(&state, &run));
        assert!(!run.exists());
        let moved = state.join(OWN_TRASH).join("1-abc/claude/projects/p");
        assert!(moved.is_dir());
        assert_eq!(fs::metadata(&moved).unwrap().mode() & 0o777, 0o700);
        prune_own(&state.join(OWN_TRASH), &AtomicBool::new(false));
        assert_eq!(fs::read_dir(state.join(OWN_TRASH)).unwrap().count(), 0);
    }

    #[test]
    fn a_tree_with_anything_open_to_others_is_not_moved() {
        let fx = fx();
        let state = fx.lease.parent().unwrap().to_path_buf();
        let open_dir = state.join("a");
        fs::create_dir_all(open_dir.join("x")).unwrap();
        fs::set_permissions(&open_dir, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(open_dir.join("x"), fs::Permissions::from_mode(0o755)).unwrap();
        let link = state.join("b");
        fs::create_dir(&link).unwrap();
        fs::set_permissions(&link, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("/etc", link.join("l")).unwrap();
        let wide_file = state.join("c");
        fs::create_dir(&wide_file).unwrap();
        fs::set_permissions(&wide_file, fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(wide_file.join("f"), "x").unwrap();
        fs::set_permissions(wide_file.join("f"), fs::Permissions::from_mode(0o644)).unwrap();
        for dir in [&open_dir, &link, &wide_file] {
            assert!(!discard_own(&state, dir), "{}", dir.display());
            assert!(dir.is_dir());
        }
    }

    /// A run dir as the agent may leave it: owner-only, with a hard link to a file of the
    /// user's (0600, within its grants) beside its own files.
    fn run_dir_with_link(state: &Path, user_file: &Path) -> std::path::PathBuf {
        let run = state.join("sandbox").join("1-run");
        fs::create_dir_all(run.join("tmp/sub")).unwrap();
        for d in [&run, &run.join("tmp"), &run.join("tmp/sub")] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o700)).unwrap();
        }
        fs::hard_link(user_file, run.join("tmp/sub/link")).unwrap();
        run
    }

    #[test]
    fn a_hard_link_to_a_users_file_is_only_unlinked_never_changed() {
        let fx = fx();
        let state = fx.lease.parent().unwrap().to_path_buf();
        let user_file = fx.ws.join("secret");
        fs::write(&user_file, "mine").unwrap();
        fs::set_permissions(&user_file, fs::Permissions::from_mode(0o600)).unwrap();
        let run = run_dir_with_link(&state, &user_file);
        // Owner-only (a hard link is a plain 0600 file): moved whole, then pruned.
        assert!(discard_own(&state, &run));
        prune_own(&state.join(OWN_TRASH), &AtomicBool::new(false));
        assert_eq!(fs::read_dir(state.join(OWN_TRASH)).unwrap().count(), 0);
        let meta = fs::metadata(&user_file).unwrap();
        assert_eq!(fs::read_to_string(&user_file).unwrap(), "mine");
        assert_eq!((meta.mode() & 0o7777, meta.nlink()), (0o600, 1));
    }

    #[test]
    fn giving_permissions_back_changes_no_linked_file() {
        // The in-place removal of a tree the agent made hard to remove (a directory it
        // left unwritable) gives permissions back to directories only: a hard-linked file
        // of the user's keeps its mode.
        let fx = fx();
        let state = fx.lease.parent().unwrap().to_path_buf();
        let user_file = fx.ws.join("ro");
        fs::write(&user_file, "mine").unwrap();
        fs::set_permissions(&user_file, fs::Permissions::from_mode(0o400)).unwrap();
        let run = run_dir_with_link(&state, &user_file);
        fs::set_permissions(run.join("tmp/sub"), fs::Permissions::from_mode(0o500)).unwrap();
        assert!(
            !discard_own(&state, &run),
            "a 0500 directory is not owner-only"
        );
        crate::config::run_dirs::remove_tree(&run);
        assert!(!run.exists());
        let meta = fs::metadata(&user_file).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.nlink()), (0o400, 1));
    }

    #[test]
    fn a_fifo_or_socket_keeps_a_tree_out_of_the_trash() {
        let fx = fx();
        let state = fx.lease.parent().unwrap().to_path_buf();
        let fifo = state.join("f");
        fs::create_dir(&fifo).unwrap();
        fs::set_permissions(&fifo, fs::Permissions::from_mode(0o700)).unwrap();
        nix::unistd::mkfifo(&fifo.join("p"), Mode::from_bits_truncate(0o600)).unwrap();
        let sock = state.join("s");
        fs::create_dir(&sock).unwrap();
        fs::set_permissions(&sock, fs::Permissions::from_mode(0o700)).unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(sock.join("l")).unwrap();
        fs::set_permissions(sock.join("l"), fs::Permissions::from_mode(0o600)).unwrap();
        for dir in [&fifo, &sock] {
            assert!(!discard_own(&state, dir), "{}", dir.display());
            assert!(dir.is_dir());
        }
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
