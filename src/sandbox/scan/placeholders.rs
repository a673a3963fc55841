//! Placeholders: a protected name that does not exist yet gets an empty directory (or,
//! in a git dir, a symlink to a path that can never exist, which git reads as absent),
//! made so that a read-only mount over it makes the name un-creatable for the run.

use std::ffi::OsStr;
use std::fs;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, Mode, fstat, fstatat};

use crate::sandbox::SandboxError;
use crate::sandbox::listing::Kind;

use super::dirs::{file_kind, open_beneath, walk_error};
use super::{ABSENT_TARGET, COMMONDIR_SELF, MaskKind, Placeholder, PlaceholderKind, Walker, mask};

impl<'a> Walker<'a, '_> {
    /// Literal protected names (`.envrc`, `.claude`) that do not exist get an empty
    /// directory as placeholder, mounted read-only, so the agent cannot create them. A
    /// directory, because git ignores empty directories: the agent's `git add -A` does not
    /// pick it up.
    pub(super) fn hold_absent_protected(&mut self) -> Result<(), SandboxError> {
        if self.tree.protect.is_some() {
            self.hold_absent_git()?;
        }
        for rel in self.tree.protect_literal {
            let Some(parent_rel) = rel.parent() else {
                continue;
            };
            let Some(name) = rel.file_name() else {
                continue;
            };
            let parent =
                match open_beneath(self.tree.fd, parent_rel, OFlag::O_PATH | OFlag::O_DIRECTORY) {
                    Ok(fd) => fd,
                    // A missing parent: the literal name is held at its first missing level by
                    // the entry for that level, when the user listed it; otherwise not held.
                    Err(_) => continue,
                };
            let path = self.tree.root.join(rel);
            match fstatat(parent.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(_) => {}
                Err(Errno::ENOENT) => {
                    let made =
                        self.make_placeholder(parent.as_fd(), name, &path, PlaceholderKind::Dir)?;
                    let Some(st) = made else {
                        continue;
                    };
                    self.push(mask(path, MaskKind::ReadOnly, &st, false))?;
                    // Its parents pinned, as those of a protected entry the walk met.
                    if !parent_rel.as_os_str().is_empty() {
                        self.pin_dirs_down_to(parent_rel)?;
                    }
                }
                Err(e) => return Err(walk_error(&path, "inspect", e)),
            }
        }
        Ok(())
    }
}

impl Walker<'_, '_> {
    /// coder is about to create `name` in `dir` (at `path`): the scan's watch takes over
    /// from the directory's ctime.
    /// A placeholder of `kind` made at `name` in `dir` (`path`) and recorded for removal
    /// after the run; `None` when nobody in the run may create that name
    /// ([`nobody_may_create`]), so none is needed. A `--write` directory the caller may
    /// read but not write failed every run's setup ("create placeholder …/.git: EACCES")
    /// though the agent could make nothing there either.
    pub(super) fn make_placeholder(
        &mut self,
        dir: BorrowedFd<'_>,
        name: impl AsRef<OsStr>,
        path: &Path,
        kind: PlaceholderKind,
    ) -> Result<Option<FileStat>, SandboxError> {
        let name = name.as_ref();
        self.before_placeholder(dir, name, path)?;
        let st = match create_placeholder(dir, name, kind) {
            Ok(st) => st,
            Err(e) if nobody_may_create(dir, e) => return Ok(None),
            // The directory is coder's user's, who (and so the agent) took its own write
            // or search bit away: an agent that left a `.git/worktrees/x` with a `HEAD`
            // and mode 0555 failed every later unprivileged run's setup here (round
            // eighteen's second review). The owner's bits are given back, as the end-of-
            // run git guard does, and said.
            Err(e @ (Errno::EACCES | Errno::EPERM)) => {
                let Some(mode) = restore_owner_write(dir) else {
                    return Err(walk_error(path, "create placeholder", e));
                };
                self.out.warnings.push(format!(
                    "{} was not writable by its owner (mode {mode:o}): the sandbox gave the \
                     owner write and search permission back, to hold {} absent",
                    path.parent().unwrap_or(path).display(),
                    path.display()
                ));
                self.before_placeholder(dir, name, path)?;
                create_placeholder(dir, name, kind)
                    .map_err(|e| walk_error(path, "create placeholder", e))?
            }
            Err(e) => return Err(walk_error(path, "create placeholder", e)),
        };
        self.out.placeholders.push(Placeholder {
            path: path.to_path_buf(),
            kind,
            dev: st.st_dev,
            ino: st.st_ino,
        });
        Ok(Some(st))
    }

    pub(super) fn before_placeholder(
        &self,
        dir: BorrowedFd<'_>,
        name: impl AsRef<OsStr>,
        path: &Path,
    ) -> Result<(), SandboxError> {
        match self.watch {
            Some(w) => w.watch.before_placeholder(dir, name.as_ref(), path),
            None => Ok(()),
        }
    }

    /// A workspace without `.git` keeps it that way: a placeholder symlink (which git
    /// reads as absent, so a parent repository is still found) is mounted over the name,
    /// so the agent cannot `git init` a repository whose config the user's git would run.
    pub(super) fn hold_absent_git(&mut self) -> Result<(), SandboxError> {
        let path = self.tree.root.join(".git");
        match fstatat(self.tree.fd, ".git", AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(()),
            Err(Errno::ENOENT) => {
                let fd = self.tree.fd;
                match self.make_placeholder(fd, ".git", &path, PlaceholderKind::Symlink)? {
                    Some(st) => self.push(mask(path, MaskKind::ReadOnly, &st, false)),
                    None => Ok(()),
                }
            }
            Err(e) => Err(walk_error(&path, "inspect", e)),
        }
    }
}

/// Whether `err`, met by coder creating a name in `dir`, means the agent cannot create it
/// either: the directory is on a read-only mount (the agent's mounts keep the flag, and it
/// may not mount), or the kernel refused coder's user the write and the directory is not
/// that user's. Its owner could `chmod` it, and so could the agent, which runs as the same
/// user (with no capability over a directory of another user): that case still fails.
pub(super) fn nobody_may_create(dir: BorrowedFd<'_>, err: Errno) -> bool {
    match err {
        Errno::EROFS => true,
        Errno::EACCES | Errno::EPERM => {
            fstat(dir).is_ok_and(|st| st.st_uid != nix::unistd::geteuid().as_raw())
        }
        _ => false,
    }
}

/// Gives the owner of the directory open as `dir` (an `O_PATH` descriptor) write and
/// search permission when coder's user owns it and it lacks one of them: the mode it had
/// before, or `None` when nothing was changed.
pub(super) fn restore_owner_write(dir: BorrowedFd<'_>) -> Option<u32> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    let st = fstat(dir).ok()?;
    let mode = st.st_mode & 0o7777;
    if st.st_uid != nix::unistd::geteuid().as_raw()
        || file_kind(&st) != Kind::Dir
        || mode & 0o300 == 0o300
    {
        return None;
    }
    // The directory itself through its descriptor's link (`fchmod` refuses an `O_PATH`
    // descriptor): no name is looked up again.
    let link = format!("/proc/self/fd/{}", dir.as_raw_fd());
    fs::set_permissions(link, fs::Permissions::from_mode(mode | 0o300)).ok()?;
    Some(mode)
}

pub(super) fn create_placeholder(
    dir: BorrowedFd<'_>,
    name: impl AsRef<OsStr>,
    kind: PlaceholderKind,
) -> Result<FileStat, Errno> {
    let name = name.as_ref();
    match kind {
        PlaceholderKind::Dir => {
            nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(0o755))?
        }
        PlaceholderKind::Symlink => nix::unistd::symlinkat(ABSENT_TARGET, dir, name)?,
        PlaceholderKind::CommonDirSelf => create_commondir_placeholder(dir, name)?,
    }
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// A `commondir` holding [`COMMONDIR_SELF`], whole from the moment its name exists: it
/// is written under a temporary name and renamed into place (never over a file that
/// appeared meanwhile). A git of the user's, or the change ledger's probe that runs beside
/// the sandbox's setup, that found the name but read it before the write got nothing and
/// died ("failed to read .git/commondir: Success"), and the ledger fell back to its plain
/// walk.
pub(super) fn create_commondir_placeholder(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    use std::io::Write;
    // A name nobody can foretell: the git dir is the agent's to write, and a file it left
    // at a name made of coder's pid and a counter (a pid a container's coder always
    // gets) failed this `O_EXCL` open, and with it every later run's sandbox setup
    // (round sixteen's review).
    let temporary = format!(".coder-commondir-{}", uuid::Uuid::new_v4().simple());
    let fd = openat2(
        dir,
        temporary.as_str(),
        OpenHow::new()
            .flags(
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
            )
            .mode(Mode::from_bits_truncate(0o644))
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS),
    )?;
    let placed = fs::File::from(fd)
        .write_all(COMMONDIR_SELF)
        .map_err(|e| e.raw_os_error().map_or(Errno::EIO, Errno::from_raw))
        .and_then(|()| {
            nix::fcntl::renameat2(
                dir,
                temporary.as_str(),
                dir,
                name,
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            )
        });
    if placed.is_err() {
        let _ = nix::unistd::unlinkat(
            dir,
            temporary.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    placed
}
