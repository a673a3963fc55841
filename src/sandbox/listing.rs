//! What one directory's listing says to the end-of-run git guard, and the listings the
//! start-of-run scan already read, so that the guard need not list an unchanged
//! directory a second time.
//!
//! Why: the scan before the run and the guard after it each listed every directory of the
//! writable trees; at 100k files the two `getdents` passes were most of a sandboxed run's
//! set-up cost. The guard needs three things of a directory's entries ([`DirSummary`]):
//! whether git would take it for a git dir, its `.git` files and symlinks, and its
//! subdirectories. All three follow from the names and types of the entries alone, and a
//! directory's entries cannot change without its change time (ctime) moving: creating,
//! removing or renaming an entry, and changing the directory's mode, all set it, and no
//! unprivileged process can set a ctime back (`utimensat` sets only atime and mtime).
//!
//! So the scan records, for each directory it lists, its (dev, ino), its ctime and the
//! summary ([`ScanListings`]); the guard `fstat`s a directory before listing it and uses
//! the record when the identity and ctime are the same. What the guard reads *inside* a
//! git dir or a `.git` file does not depend on the listing and is always read afresh.
//! The same argument lets the scan itself skip directories an earlier run listed
//! ([`super::listing_cache`]).
//!
//! Where a record could lie, none is kept or used:
//! * a ctime not older than the scan's start by [`RACY_MARGIN_NS`]: a change in the same
//!   clock tick as the recorded one (or within a file system's timestamp granularity,
//!   one second on ext4 with small inodes) could leave the ctime as it was ("racy git");
//! * file systems whose ctime coder does not trust to move (network and FUSE file systems
//!   can report cached or synthetic times): only ext4, XFS, Btrfs and tmpfs are trusted,
//!   decided per device;
//! * a listing with an entry of unknown type (no `d_type`);
//! * an encrypted directory (ext4 fscrypt): without its key it lists encoded names, and
//!   any process, unprivileged, can add the key to the file system's keyring during the
//!   run, after which it lists the real ones (a `.git`, a git dir's `HEAD`) with its
//!   ctime untouched.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::stat::FileStat;

/// How much older than the scan's start a directory's ctime must be for its record to be
/// used: one second of timestamp granularity, and as much again for clock ticks.
pub const RACY_MARGIN_NS: i128 = 2_000_000_000;

/// What a `stat` (or a listing's `d_type`) says an entry is, as far as the scan and the
/// git guard care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

/// A ctime, in nanoseconds since the epoch.
pub(crate) type Ctime = i128;

/// The parts of a directory's listing the git guard acts on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DirSummary {
    /// Entries listed (for the guard's cap).
    pub(crate) entries: usize,
    /// Git would take it for a git dir: `HEAD`, and `commondir` or both `objects` and
    /// `refs`, of any type, without case (git's `is_git_directory`, loosened; in a
    /// case-folding directory `HEAD` finds `head`).
    pub(crate) git_dir: bool,
    /// Subdirectories, and `.git` entries (any case) that are files or symlinks, in
    /// listing order.
    pub(crate) children: Vec<(OsString, Kind)>,
}

impl DirSummary {
    /// The summary of a listing whose every entry has a known type.
    pub(crate) fn of<'a>(
        entries: impl Iterator<Item = (&'a OsString, Kind)> + Clone,
    ) -> DirSummary {
        let git_dir = is_git_dir_listing(entries.clone().map(|(name, _)| name));
        let children = entries
            .clone()
            .filter(|(name, kind)| {
                *kind == Kind::Dir
                    || (is_git_entry_name(name) && matches!(kind, Kind::File | Kind::Symlink))
            })
            .map(|(name, kind)| (name.clone(), kind))
            .collect();
        DirSummary {
            entries: entries.count(),
            git_dir,
            children,
        }
    }
}

/// Whether a directory with these entries is one git would take for a git dir: `HEAD`,
/// and `commondir` or both `objects` and `refs`, of any type, without case (git's
/// `is_git_directory`, loosened). The start scan and the git guard both ask this.
pub(crate) fn is_git_dir_listing<'a>(names: impl Iterator<Item = &'a OsString> + Clone) -> bool {
    let has = |wanted: &str| names.clone().any(|name| folds_to(name, wanted));
    has("HEAD") && (has("commondir") || (has("objects") && has("refs")))
}

/// Whether a lookup of `wanted` (ASCII) could find `name` in a case-folding directory
/// (ext4 and f2fs `+F`, which compare names after Unicode NFD and case folding): ASCII
/// letters in any case, and the two other characters that fold to an ASCII letter, the long
/// s (U+017F, `objectſ`) and the Kelvin sign (U+212A). Applied to every directory: a
/// directory's flag is not worth a call, and elsewhere such names are merely unusual.
fn folds_to(name: &OsString, wanted: &str) -> bool {
    let name = name.as_bytes();
    if name.is_ascii() {
        return name.eq_ignore_ascii_case(wanted.as_bytes());
    }
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    let folded = name.chars().map(|c| match c {
        '\u{17F}' => 's',
        '\u{212A}' => 'k',
        c => c.to_ascii_lowercase(),
    });
    folded.eq(wanted.chars().map(|c| c.to_ascii_lowercase()))
}

/// Whether a name is one git acts on by name: `.git`, or a part of a git dir's shape
/// (`HEAD`, `commondir`, `objects`, `refs`), in any case.
pub(crate) fn is_git_name(name: &OsString) -> bool {
    is_git_entry_name(name)
        || ["HEAD", "commondir", "objects", "refs"]
            .iter()
            .any(|wanted| folds_to(name, wanted))
}

/// `.git` in any case: what git looks for in a case-insensitive directory too.
pub(crate) fn is_git_entry_name(name: &OsString) -> bool {
    name.as_bytes().eq_ignore_ascii_case(b".git")
}

/// The directories the start-of-run scan listed, by (dev, ino), with their ctime and path
/// then.
///
/// The path is part of the record: what the guard decides from an unchanged listing
/// depends on where the directory is (a protected glob matches a path, and nothing below
/// `node_modules` is protected), and renaming a directory moves the ctime of it and its
/// parents only, not of what lies below it. A package's `node_modules/sub/.claude/`,
/// rewritten (a write moves no directory's ctime) and carried to `tools/sub/.claude/` by
/// renaming `node_modules`, sits in directories whose (dev, ino, ctime) are the scan's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanListings {
    /// Records whose ctime is older than this are usable.
    trusted_before: Ctime,
    dirs: HashMap<(u64, u64), (Ctime, PathBuf, DirSummary)>,
    /// Devices already looked at, and whether their file system's ctime is trusted.
    devices: HashMap<u64, bool>,
}

impl ScanListings {
    /// Listings of a scan starting now. File times come from the coarse real-time clock,
    /// which lags this one by at most a tick: far less than the margin.
    pub fn starting_now() -> ScanListings {
        let now = crate::workspace::scan::now_ns();
        ScanListings {
            trusted_before: now - RACY_MARGIN_NS,
            ..ScanListings::default()
        }
    }

    /// Record the listing of the directory `st` describes, at `path` (`dir`, its open
    /// descriptor, decides the file system); one that could not be trusted later is not
    /// kept.
    pub(crate) fn record(
        &mut self,
        dir: BorrowedFd<'_>,
        st: &FileStat,
        path: &Path,
        summary: DirSummary,
    ) {
        if self.usable(st)
            && self.trusted_device(dir, st.st_dev)
            && super::sys::is_encrypted(dir) == Ok(false)
        {
            self.insert(st, path, summary);
        }
    }

    /// This scan's racy limit: records of ctimes from then on are neither kept nor used.
    pub(crate) fn trusted_before(&self) -> Ctime {
        self.trusted_before
    }

    /// Record a listing kept from an earlier run ([`super::listing_cache`]), whose file
    /// system passed a stricter check than [`ScanListings::record`]'s when it was kept.
    pub(crate) fn record_kept(&mut self, st: &FileStat, path: &Path, summary: DirSummary) {
        self.insert(st, path, summary);
    }

    /// Record without the file system check (which [`ScanListings::record`] adds).
    fn insert(&mut self, st: &FileStat, path: &Path, summary: DirSummary) {
        if self.usable(st) {
            self.dirs.insert(
                (st.st_dev, st.st_ino),
                (ctime_of(st), path.to_path_buf(), summary),
            );
        }
    }

    /// The recorded listing of the directory `st` describes (its `fstat` now), found at
    /// `path`, when that directory's entries cannot have changed since and it is where the
    /// scan listed it.
    pub(crate) fn unchanged(&self, st: &FileStat, path: &Path) -> Option<&DirSummary> {
        let (ctime, at, summary) = self.dirs.get(&(st.st_dev, st.st_ino))?;
        (*ctime == ctime_of(st) && at == path && self.usable(st)).then_some(summary)
    }

    /// No records yet, trusting what `self` trusts (for another thread of the same scan).
    pub(crate) fn empty_like(&self) -> ScanListings {
        ScanListings {
            trusted_before: self.trusted_before,
            ..ScanListings::default()
        }
    }

    /// Take in the records of another thread of the same scan (the larger map takes in
    /// the smaller, so the whole tree's table is not grown step by step).
    pub(crate) fn absorb(&mut self, mut other: ScanListings) {
        if other.dirs.len() > self.dirs.len() {
            std::mem::swap(&mut self.dirs, &mut other.dirs);
        }
        self.dirs.extend(other.dirs);
        self.devices.extend(other.devices);
    }

    pub fn len(&self) -> usize {
        self.dirs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    fn usable(&self, st: &FileStat) -> bool {
        ctime_of(st) < self.trusted_before
    }

    fn trusted_device(&mut self, dir: BorrowedFd<'_>, dev: u64) -> bool {
        *self
            .devices
            .entry(dev)
            .or_insert_with(|| trusted_file_system(dir))
    }
}

pub(crate) fn ctime_of(st: &FileStat) -> Ctime {
    i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec)
}

/// Whether the file system holding `dir` keeps a directory's ctime honestly (local disk
/// file systems and tmpfs).
pub(crate) fn trusted_file_system(dir: BorrowedFd<'_>) -> bool {
    use nix::sys::statfs::{BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
    nix::sys::statfs::fstatfs(dir).is_ok_and(|fs| {
        [
            EXT4_SUPER_MAGIC,
            XFS_SUPER_MAGIC,
            BTRFS_SUPER_MAGIC,
            TMPFS_MAGIC,
        ]
        .contains(&fs.filesystem_type())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[(&str, Kind)]) -> Vec<(OsString, Kind)> {
        list.iter().map(|(n, k)| (OsString::from(n), *k)).collect()
    }

    fn summary(list: &[(&str, Kind)]) -> DirSummary {
        let entries = names(list);
        DirSummary::of(entries.iter().map(|(n, k)| (n, *k)))
    }

    #[test]
    fn git_dir_shapes_without_case() {
        let bare = summary(&[
            ("HEAD", Kind::File),
            ("objects", Kind::Dir),
            ("refs", Kind::Dir),
        ]);
        assert!(bare.git_dir);
        let worktree = summary(&[("head", Kind::Symlink), ("commondir", Kind::File)]);
        assert!(worktree.git_dir);
        let half = summary(&[("HEAD", Kind::File), ("objects", Kind::Dir)]);
        assert!(!half.git_dir);
        // What a case-folding directory finds for `objects` and `refs`.
        let folded = summary(&[
            ("head", Kind::File),
            ("object\u{17F}", Kind::Dir),
            ("REF\u{17F}", Kind::Dir),
        ]);
        assert!(folded.git_dir);
        let other = summary(&[
            ("HEAD", Kind::File),
            ("objécts", Kind::Dir),
            ("refs", Kind::Dir),
        ]);
        assert!(!other.git_dir);
    }

    #[test]
    fn children_are_dirs_and_git_files_or_links() {
        let s = summary(&[
            (".GIT", Kind::File),
            (".git", Kind::Dir),
            ("a.rs", Kind::File),
            ("link", Kind::Symlink),
            ("src", Kind::Dir),
        ]);
        assert_eq!(s.entries, 5);
        assert_eq!(
            s.children,
            names(&[
                (".GIT", Kind::File),
                (".git", Kind::Dir),
                ("src", Kind::Dir)
            ])
        );
    }

    #[test]
    fn a_recent_or_changed_ctime_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = nix::sys::stat::stat(dir.path()).unwrap();
        let mut listings = ScanListings::starting_now();
        // Just made: inside the racy margin, so not recorded.
        let at = dir.path();
        listings.insert(&st, at, DirSummary::default());
        assert!(listings.is_empty());
        // An old directory is recorded and found while its identity, ctime and path stay.
        st.st_ctime -= 10;
        listings.insert(&st, at, DirSummary::default());
        assert_eq!(listings.len(), 1);
        assert!(listings.unchanged(&st, at).is_some());
        let mut later = st;
        later.st_ctime_nsec = (later.st_ctime_nsec + 1) % 1_000_000_000;
        later.st_ctime += 1;
        assert!(listings.unchanged(&later, at).is_none());
        let mut other = st;
        other.st_ino += 1;
        assert!(listings.unchanged(&other, at).is_none());
        // Found elsewhere (an ancestor renamed): not the scan's listing of that path.
        assert!(listings.unchanged(&st, &at.join("moved")).is_none());
        // A ctime that moved into the racy margin is not used even if it matched.
        let mut recent = listings.clone();
        recent.trusted_before = ctime_of(&st);
        assert!(recent.unchanged(&st, at).is_none());
    }
}
