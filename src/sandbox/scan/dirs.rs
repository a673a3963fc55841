//! Opening and listing beneath a directory descriptor: every open refuses symlinks and
//! stays below where it started (`openat2` with `RESOLVE_BENEATH`), so a directory swapped
//! during the walk cannot redirect it; and what the walk says of a directory it cannot
//! reach.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, SFlag};

use crate::sandbox::SandboxError;
use crate::sandbox::listing::Kind;

pub(crate) fn file_kind(st: &FileStat) -> Kind {
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFDIR => Kind::Dir,
        SFlag::S_IFREG => Kind::File,
        SFlag::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

pub(super) fn walk_error(path: &Path, op: &'static str, errno: Errno) -> SandboxError {
    SandboxError::sys(op, crate::sandbox::bytes::short(path), errno)
}

/// A relative path of plain names only (no `..`, no root, no `.`).
pub(super) fn is_plain_relative(rel: &Path) -> bool {
    rel.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The entries of the directory open as `dir` (sorted, without `.` and `..`).
pub(super) fn list_dir(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    Ok(list_dir_kinds(dir)?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

/// The entries of the directory open as `dir` with the type the listing gives (`d_type`;
/// `None` where the file system does not say), sorted, without `.` and `..`. The walk and
/// the git guard read this before any `stat`.
pub(crate) fn list_dir_kinds(dir: &OwnedFd) -> Result<Vec<(OsString, Option<Kind>)>, Errno> {
    let dup = dir
        .try_clone()
        .map_err(|e| e.raw_os_error().map_or(Errno::EBADF, Errno::from_raw))?;
    let mut stream = nix::dir::Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for entry in stream.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let kind = entry.file_type().map(|t| match t {
            nix::dir::Type::Directory => Kind::Dir,
            nix::dir::Type::File => Kind::File,
            nix::dir::Type::Symlink => Kind::Symlink,
            _ => Kind::Other,
        });
        names.push((OsStr::from_bytes(name).to_os_string(), kind));
    }
    names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(names)
}

/// Whether the directory `name` in `dir` (`st` its `stat`) is out of reach of this process
/// and of the agent alike: not searchable by coder's effective ids (the kernel asked, ACLs
/// included) and not owned by coder's user (whose agent could `chmod` it back). A
/// workspace holding another user's data directory (a container's database files, mode
/// 0700) failed every confined run's scan with `EACCES`; what neither can enter holds
/// nothing the agent could read or write, so it is left out. Anything else the walk cannot
/// open still fails it closed (a directory it may search but not list: the agent can
/// reach names in it the scan never saw). Root reaches everything (its capabilities), so
/// this is never true for root.
pub(crate) fn out_of_reach(dir: BorrowedFd<'_>, name: &OsStr, st: &FileStat) -> bool {
    // Searchable by everyone: the common case, answered before any call (the walk asks
    // this of every directory).
    if st.st_mode & 0o001 != 0 {
        return false;
    }
    let euid = nix::unistd::geteuid().as_raw();
    if euid == 0 || st.st_uid == euid {
        return false;
    }
    matches!(
        nix::unistd::faccessat(
            dir,
            name,
            nix::unistd::AccessFlags::X_OK,
            AtFlags::AT_EACCESS | AtFlags::AT_SYMLINK_NOFOLLOW,
        ),
        Err(Errno::EACCES)
    )
}

/// One warning naming the directories left out as [`out_of_reach`] (at most five, and how
/// many more), or none.
pub(super) fn out_of_reach_warning(dirs: &mut [PathBuf]) -> Option<String> {
    const NAMED: usize = 5;
    if dirs.is_empty() {
        return None;
    }
    dirs.sort();
    let named: Vec<String> = dirs
        .iter()
        .take(NAMED)
        .map(|d| d.display().to_string())
        .collect();
    let more = match dirs.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "not scanned, as neither you nor the agent may enter them (another user's, \
         without search permission): {}{more}",
        named.join(", ")
    ))
}

pub(crate) fn beneath(flags: OFlag) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        )
}

pub(super) fn open_dir_beneath(dir: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, Errno> {
    openat2(dir, rel, beneath(OFlag::O_RDONLY | OFlag::O_DIRECTORY))
}

/// Open `rel` beneath the directory `dir`, refusing symlinks (the last component itself
/// is opened, a symlink included, with `O_PATH`) and anything that leaves `dir`.
///
/// A path that fits in `PATH_MAX` is resolved by one `openat2`, whose `RESOLVE_BENEATH`
/// and `RESOLVE_NO_SYMLINKS` hold for every component; a longer one goes one name at a
/// time, which lifts `PATH_MAX` off deep trees. (One call instead of one per component
/// matters where this runs a thousand times: the helper opens every mask target.)
pub(crate) fn open_beneath(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
) -> Result<OwnedFd, Errno> {
    let names: Vec<&OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(Errno::EXDEV),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, parents)) = names.split_last() else {
        return openat2(dir, ".", beneath(flags));
    };
    if rel.as_os_str().len() < libc::PATH_MAX as usize {
        return openat2(dir, rel, beneath(flags));
    }
    let mut current: Option<OwnedFd> = None;
    for name in parents {
        let at = current.as_ref().map_or(dir, |fd| fd.as_fd());
        current = Some(openat2(
            at,
            *name,
            beneath(OFlag::O_PATH | OFlag::O_DIRECTORY),
        )?);
    }
    let at = current.as_ref().map_or(dir, |fd| fd.as_fd());
    openat2(at, *last, beneath(flags))
}
