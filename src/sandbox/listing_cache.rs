//! The start-of-run scan's listings kept from one run to the next, so that a big workspace
//! whose directories did not change is not listed again.
//!
//! Why: at 100k files, listing every directory (`getdents`) and matching every name
//! against the secret and protected globs was most of a sandboxed run's set-up, and it
//! found the same thing run after run. The argument that lets the end-of-run git guard
//! reuse the start scan's listing of an unchanged directory ([`super::listing`]) holds
//! across runs too: a directory's entries cannot change without its ctime moving, and no
//! unprivileged process can set a ctime back.
//!
//! What is kept, per directory whose listing the scan read ([`KeptDir`]): its (dev, ino)
//! and ctime, its path below the scanned root, the guard's [`DirSummary`], and the
//! entries the walk had to look at (`stat`): every entry but the plain files whose names
//! matched no glob. Those depend on the globs and the path, so the whole cache is bound
//! to a fingerprint of the trees scanned, the globs, coder's version and the boot
//! ([`fingerprint`]); a different fingerprint discards it. A kept directory whose walk
//! would look at nothing (no subdirectory, no match, not a git dir) is not even opened.
//! Everything the walk reads *about* an entry (its `stat`, a `.git` file's target, a
//! `commondir`) is read afresh each run: only which names exist is remembered.
//!
//! Where a record could lie, none is kept ([`Recorder`]); the rules of [`super::listing`]
//! plus:
//! * only ext4, XFS and tmpfs (not Btrfs: a snapshot copies inode numbers and ctimes to a
//!   new subvolume, whose anonymous device number may be one a deleted subvolume had);
//! * only outside a directory of secrets or a protected directory (where every entry is
//!   looked at anyway);
//! * a different boot: a tmpfs made after a reboot reuses inode numbers.
//!
//! The file lives in coder's state directory (`<state>/listings/<id>.cache`, owner-only,
//! written whole and renamed, checksummed). It holds no secret, but it decides what is
//! masked, so it must not be writable by an agent: a run whose policy grants write
//! access into `<state>/listings` (by any path to it, a bind mount too) neither reads nor
//! writes a cache, and removes them all, every workspace's, before the agent starts and at
//! the end (the caller, `policy.rs`). What remains trusted is that nothing but coder
//! writes to coder's state directory, and that the clock is not stepped back by more than
//! the racy margin onto a recorded ctime.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::hash::Hasher;
use std::io::{Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::sys::stat::FileStat;

use super::listing::{Ctime, DirSummary, Kind, ctime_of};
use crate::le_reader::LeReader;

const MAGIC: &[u8; 16] = b"coder-listings1\n";

/// Records held at most (a larger file is not one this coder wrote).
const MAX_RECORDS: u64 = 50_000_000;

/// One directory as the scan listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeptDir {
    /// Its path below the scanned root (the globs match on it).
    pub(crate) rel: PathBuf,
    pub(crate) ctime: Ctime,
    /// What the end-of-run git guard needs of the listing.
    pub(crate) summary: DirSummary,
    /// The entries the walk looked at, in listing order.
    pub(crate) attention: Vec<(OsString, Kind)>,
}

impl KeptDir {
    /// Nothing in the directory needs a look: it need not be opened.
    pub(crate) fn is_quiet(&self) -> bool {
        self.attention.is_empty() && !self.summary.git_dir
    }
}

/// The kept directories of one scanned tree, by (dev, ino). Shared (`Arc`): a listing
/// still valid is carried from the loaded cache into the next one without a copy (at 1M
/// files, 20k directories, the copies and their maps were a third of the scan's heap).
#[derive(Debug, Default)]
pub(crate) struct TreeKept {
    dirs: HashMap<(u64, u64), Arc<KeptDir>>,
}

impl TreeKept {
    /// The kept listing of the directory `st` describes, found at `rel`, when its entries
    /// cannot have changed since (`trusted_before`: this scan's racy limit).
    pub(crate) fn get(
        &self,
        st: &FileStat,
        rel: &Path,
        trusted_before: Ctime,
    ) -> Option<&Arc<KeptDir>> {
        let kept = self.dirs.get(&(st.st_dev, st.st_ino))?;
        (kept.ctime == ctime_of(st) && kept.ctime < trusted_before && kept.rel == rel)
            .then_some(kept)
    }

    pub(crate) fn len(&self) -> usize {
        self.dirs.len()
    }
}

/// What one scan keeps for the next: per tree, in the trees' order.
#[derive(Debug, Default)]
pub struct Kept {
    pub(crate) trees: Vec<TreeKept>,
}

impl Kept {
    pub fn dirs(&self) -> usize {
        self.trees.iter().map(TreeKept::len).sum()
    }
}

/// Collects the listings one thread of the walk may keep.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    /// This scan's racy limit: ctimes from then on are not kept.
    trusted_before: Ctime,
    dirs: HashMap<(u64, u64), Arc<KeptDir>>,
    /// Devices looked at, and whether their ctimes hold across runs.
    devices: HashMap<u64, bool>,
}

impl Recorder {
    pub(crate) fn new(trusted_before: Ctime) -> Recorder {
        Recorder {
            trusted_before,
            ..Recorder::default()
        }
    }

    /// Keep the listing of `dir` (described by `st`, its own `fstat` taken before it was
    /// listed) when a later run may trust it.
    pub(crate) fn record(&mut self, dir: BorrowedFd<'_>, st: &FileStat, kept: KeptDir) {
        if kept.ctime != ctime_of(st) || kept.ctime >= self.trusted_before {
            return;
        }
        let held = *self
            .devices
            .entry(st.st_dev)
            .or_insert_with(|| ctime_held_across_runs(dir));
        if held && super::sys::is_encrypted(dir) == Ok(false) {
            self.dirs.insert((st.st_dev, st.st_ino), Arc::new(kept));
        }
    }

    /// Keep again a listing found in the cache and still valid (shared, not copied).
    pub(crate) fn carry(&mut self, st: &FileStat, kept: &Arc<KeptDir>) {
        self.dirs.insert((st.st_dev, st.st_ino), Arc::clone(kept));
    }

    /// Take in another thread's records of the same tree. The larger map takes in the
    /// smaller: growing a small one to the whole tree's size held both tables at each step.
    pub(crate) fn absorb(&mut self, mut other: Recorder) {
        if other.dirs.len() > self.dirs.len() {
            std::mem::swap(&mut self.dirs, &mut other.dirs);
        }
        self.dirs.extend(other.dirs);
        self.devices.extend(other.devices);
    }

    pub(crate) fn into_tree(self) -> TreeKept {
        TreeKept { dirs: self.dirs }
    }
}

/// File systems whose directory ctimes move on every change and whose (dev, ino) name one
/// directory for the life of the boot.
fn ctime_held_across_runs(dir: BorrowedFd<'_>) -> bool {
    use nix::sys::statfs::{EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
    nix::sys::statfs::fstatfs(dir).is_ok_and(|fs| {
        [EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, TMPFS_MAGIC].contains(&fs.filesystem_type())
    })
}

/// One scanned tree, as far as what its walk finds depends on it.
pub(crate) struct TreeShape<'a> {
    pub(crate) root: &'a Path,
    pub(crate) writable: bool,
    pub(crate) protected: bool,
}

/// What the kept listings depend on besides the directories themselves: the format,
/// coder's version, this boot, the trees and the globs. `None` without a boot id.
pub(crate) fn fingerprint(
    trees: &[TreeShape<'_>],
    deny_globs: &[String],
    protect_globs: &[String],
) -> Option<u64> {
    let boot = std::fs::read("/proc/sys/kernel/random/boot_id").ok()?;
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0x6c69_7374, 0x696e_6773);
    let mut field = |bytes: &[u8]| {
        h.write_u64(bytes.len() as u64);
        h.write(bytes);
    };
    field(MAGIC);
    field(env!("CARGO_PKG_VERSION").as_bytes());
    field(&boot);
    for tree in trees {
        field(tree.root.as_os_str().as_bytes());
        field(&[u8::from(tree.writable), u8::from(tree.protected)]);
    }
    field(b"deny");
    for glob in deny_globs {
        field(glob.as_bytes());
    }
    field(b"protect");
    for glob in protect_globs {
        field(glob.as_bytes());
    }
    Some(h.finish())
}

/// The cache file of the workspace `workspace` (canonical) in `dir` (coder's
/// `<state>/listings`).
pub fn cache_path_in(dir: &Path, workspace: &Path) -> PathBuf {
    let mut id = siphasher::sip::SipHasher13::new_with_keys(0, 0);
    id.write(workspace.as_os_str().as_bytes());
    dir.join(format!("{:016x}.cache", id.finish()))
}

/// The kept listings at `path` for a scan of `trees` trees with this fingerprint; empty
/// when there is no usable file.
pub fn load(path: &Path, fingerprint: u64, trees: usize) -> Kept {
    read_file(path)
        .and_then(|bytes| parse(&bytes, fingerprint, trees))
        .unwrap_or_else(|| Kept {
            trees: (0..trees).map(|_| TreeKept::default()).collect(),
        })
}

fn read_file(path: &Path) -> Option<Vec<u8>> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // coder's own file, as it writes it.
    let uid = nix::unistd::geteuid().as_raw();
    if !meta.is_file() || meta.mode() & 0o077 != 0 || meta.uid() != uid {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Write `kept` to `path` (whole, then renamed into place), unless `path` already holds
/// exactly that. A failure leaves no cache or the previous one; either is safe.
pub fn store(path: &Path, fingerprint: u64, kept: &Kept) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let bytes = encode(fingerprint, kept);
    // Unchanged (no directory's listing moved since the run before): the cache on disk is
    // these very bytes, and rewriting it would make one more inode on the run's path
    // (round twenty-one). Compared whole, as `load` reads it (owner-only, this user's).
    let same_len = std::fs::symlink_metadata(path).is_ok_and(|m| m.len() == bytes.len() as u64);
    if same_len && read_file(path).is_some_and(|old| old == bytes) {
        return Ok(());
    }
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map_or("cache".into(), OsStr::to_string_lossy),
        std::process::id()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut file| file.write_all(&bytes))
        .and_then(|()| {
            // Renamed over an existing file, ext4 (`auto_da_alloc`) allocates and starts
            // writing the new file's blocks inside `rename`, on the run's path: 0.6 ms
            // typical at 100k files, 9 ms seen, against 0.15 ms for unlink then rename.
            // A run that starts in between finds no cache and lists every directory, as
            // a first run does.
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            std::fs::rename(&tmp, path)
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Remove every cache in `dir` (coder's `<state>/listings`): an agent could write there,
/// and then any workspace's file. A symlink the agent left in the directory's place goes,
/// not what it points to; only names coder gives its files are removed (this runs outside
/// the sandbox, on a path the agent could have redirected).
pub fn remove_all(dir: &Path) {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = entry.file_name();
                let name = name.as_bytes();
                if name.ends_with(b".cache") || name.ends_with(b".tmp") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Ok(_) => {
            let _ = std::fs::remove_file(dir);
        }
        Err(_) => {}
    }
}

// ---- The format, integers little-endian: MAGIC, u64 fingerprint, u32 trees, then per
// tree u64 records and the records, then u64 checksum of everything before it. A record:
// u64 dev, u64 ino, i64 ctime seconds, u32 ctime nanoseconds, u64 entries, u8 git dir,
// name rel, u32 children and the (kind, name) pairs, u32 attention and the pairs. A name:
// u32 length, bytes.

fn checksum(bytes: &[u8]) -> u64 {
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0x6b65_7074, 0x6469_7273);
    h.write(bytes);
    h.finish()
}

fn encode(fingerprint: u64, kept: &Kept) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + kept.dirs() * 64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&fingerprint.to_le_bytes());
    out.extend_from_slice(&(kept.trees.len() as u32).to_le_bytes());
    for tree in &kept.trees {
        out.extend_from_slice(&(tree.dirs.len() as u64).to_le_bytes());
        for (&(dev, ino), dir) in &tree.dirs {
            encode_dir(&mut out, dev, ino, dir);
        }
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn encode_dir(out: &mut Vec<u8>, dev: u64, ino: u64, dir: &KeptDir) {
    let name = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    let pairs = |out: &mut Vec<u8>, list: &[(OsString, Kind)]| {
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for (entry, kind) in list {
            out.push(kind_byte(*kind));
            name(out, entry.as_bytes());
        }
    };
    out.extend_from_slice(&dev.to_le_bytes());
    out.extend_from_slice(&ino.to_le_bytes());
    let secs = dir.ctime.div_euclid(1_000_000_000) as i64;
    let nanos = dir.ctime.rem_euclid(1_000_000_000) as u32;
    out.extend_from_slice(&secs.to_le_bytes());
    out.extend_from_slice(&nanos.to_le_bytes());
    out.extend_from_slice(&(dir.summary.entries as u64).to_le_bytes());
    out.push(u8::from(dir.summary.git_dir));
    name(out, dir.rel.as_os_str().as_bytes());
    pairs(out, &dir.summary.children);
    pairs(out, &dir.attention);
}

fn kind_byte(kind: Kind) -> u8 {
    match kind {
        Kind::Dir => 1,
        Kind::File => 2,
        Kind::Symlink => 3,
        Kind::Other => 4,
    }
}

fn kind_of(byte: u8) -> Option<Kind> {
    Some(match byte {
        1 => Kind::Dir,
        2 => Kind::File,
        3 => Kind::Symlink,
        4 => Kind::Other,
        _ => return None,
    })
}

/// The format's own parts, on top of [`LeReader`].
trait ReadListing {
    fn name(&mut self) -> Option<OsString>;
    fn pairs(&mut self) -> Option<Vec<(OsString, Kind)>>;
}

impl ReadListing for LeReader<'_> {
    fn name(&mut self) -> Option<OsString> {
        let len = self.u32()? as usize;
        Some(OsStr::from_bytes(self.take(len)?).to_os_string())
    }

    fn pairs(&mut self) -> Option<Vec<(OsString, Kind)>> {
        let count = self.u32()? as usize;
        // Each pair takes at least five bytes: a count beyond the rest is not ours.
        if count > self.remaining() / 5 {
            return None;
        }
        (0..count)
            .map(|_| {
                let kind = kind_of(self.u8()?)?;
                Some((self.name()?, kind))
            })
            .collect()
    }
}

fn parse(bytes: &[u8], fingerprint: u64, trees: usize) -> Option<Kept> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if checksum(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut r = LeReader::new(body);
    if r.take(MAGIC.len())? != MAGIC || r.u64()? != fingerprint || r.u32()? as usize != trees {
        return None;
    }
    let mut kept = Kept::default();
    for _ in 0..trees {
        let count = r.u64()?;
        if count > MAX_RECORDS {
            return None;
        }
        // Sized once (a record takes at least 49 bytes): growing the map step by step held
        // two tables at each step.
        let room = usize::try_from(count).ok()?.min(r.remaining() / 49);
        let mut tree = TreeKept {
            dirs: HashMap::with_capacity(room),
        };
        for _ in 0..count {
            let (key, dir) = parse_dir(&mut r)?;
            tree.dirs.insert(key, Arc::new(dir));
        }
        kept.trees.push(tree);
    }
    (r.remaining() == 0).then_some(kept)
}

fn parse_dir(r: &mut LeReader<'_>) -> Option<((u64, u64), KeptDir)> {
    let dev = r.u64()?;
    let ino = r.u64()?;
    let secs = r.i64()?;
    let nanos = r.u32()?;
    let entries = usize::try_from(r.u64()?).ok()?;
    let git_dir = match r.u8()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let rel = PathBuf::from(r.name()?);
    let children = r.pairs()?;
    let attention = r.pairs()?;
    let dir = KeptDir {
        rel,
        ctime: i128::from(secs) * 1_000_000_000 + i128::from(nanos),
        summary: DirSummary {
            entries,
            git_dir,
            children,
        },
        attention,
    };
    Some(((dev, ino), dir))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn sample() -> Kept {
        let dir = KeptDir {
            rel: PathBuf::from("src/a"),
            ctime: 1_700_000_000_123_456_789,
            summary: DirSummary {
                entries: 3,
                git_dir: false,
                children: vec![(OsString::from("sub"), Kind::Dir)],
            },
            attention: vec![
                (OsString::from(".env"), Kind::File),
                (OsString::from("sub"), Kind::Dir),
            ],
        };
        let mut tree = TreeKept::default();
        tree.dirs.insert((7, 42), Arc::new(dir));
        Kept {
            trees: vec![tree, TreeKept::default()],
        }
    }

    #[test]
    fn kept_listings_load_back_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("listings/x.cache");
        store(&path, 99, &sample()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        let loaded = load(&path, 99, 2);
        assert_eq!(loaded.trees.len(), 2);
        assert_eq!(loaded.trees[0].dirs, sample().trees[0].dirs);
    }

    #[test]
    fn an_unchanged_cache_is_not_rewritten_a_changed_or_foreign_one_is() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.cache");
        store(&path, 99, &sample()).unwrap();
        let ino = || std::fs::metadata(&path).unwrap().ino();
        let first = ino();
        store(&path, 99, &sample()).unwrap();
        assert_eq!(ino(), first, "the same bytes were written again");
        store(&path, 98, &sample()).unwrap();
        let second = ino();
        assert_ne!(second, first, "a changed cache was kept");
        assert_eq!(load(&path, 98, 2).trees[0].dirs, sample().trees[0].dirs);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        store(&path, 98, &sample()).unwrap();
        assert_ne!(ino(), second, "a file open to others was kept");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    }

    #[test]
    fn another_fingerprint_a_damaged_or_foreign_file_loads_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.cache");
        store(&path, 99, &sample()).unwrap();
        assert_eq!(load(&path, 98, 2).dirs(), 0, "other globs or trees");
        assert_eq!(load(&path, 99, 3).dirs(), 0, "other number of trees");
        let good = std::fs::read(&path).unwrap();
        for at in [0, 20, good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(load(&path, 99, 2).dirs(), 0, "flipped byte {at}");
        }
        std::fs::write(&path, &good[..good.len() - 3]).unwrap();
        assert_eq!(load(&path, 99, 2).dirs(), 0, "truncated");
        // Readable by others: not a file coder wrote.
        std::fs::write(&path, &good).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load(&path, 99, 2).dirs(), 0, "mode 0644");
    }

    #[test]
    fn a_kept_dir_is_found_only_by_its_identity_ctime_and_place() {
        let tmp = tempfile::tempdir().unwrap();
        let mut st = nix::sys::stat::stat(tmp.path()).unwrap();
        st.st_ctime -= 10;
        let mut tree = TreeKept::default();
        tree.dirs.insert(
            (st.st_dev, st.st_ino),
            Arc::new(KeptDir {
                rel: PathBuf::from("a"),
                ctime: ctime_of(&st),
                summary: DirSummary::default(),
                attention: Vec::new(),
            }),
        );
        let limit = ctime_of(&st) + 1;
        assert!(tree.get(&st, Path::new("a"), limit).is_some());
        assert!(tree.get(&st, Path::new("a"), limit - 1).is_none(), "racy");
        assert!(
            tree.get(&st, Path::new("b"), limit).is_none(),
            "moved elsewhere"
        );
        let mut later = st;
        later.st_ctime_nsec = (later.st_ctime_nsec + 1) % 1_000_000_000;
        assert!(
            tree.get(&later, Path::new("a"), i128::MAX).is_none(),
            "ctime moved"
        );
        let mut other = st;
        other.st_ino += 1;
        assert!(
            tree.get(&other, Path::new("a"), limit).is_none(),
            "another inode"
        );
    }
}
