//! The snapshot of a workspace that is not in a git work tree: a bounded walk that records
//! each file's size, modification time and a keyed hash of its content, and keeps the
//! content of small text files so changed lines can be counted afterwards.
//!
//! The walk follows no symlink (a link is recorded by its target text) and stops at fixed
//! caps, so a huge or hostile tree costs bounded time and memory: past [`Caps::files`]
//! files the rest is not tracked and the ledger says `truncated`; past [`Caps::hash_bytes`]
//! bytes, files are compared by their stat data only (size, times, change time and
//! identity included). The hash is keyed with a
//! secret key (random per run, or kept with the scan cache where the agent cannot read
//! it), so the agent cannot craft a change that hashes the same.
//!
//! A [`Prior`] scan (the persistent cache of [`super::scan_cache`], or the run's "before"
//! for its "after") spares reading files whose stat data is unchanged, as git's index
//! does: an entry is reused only when the file's device, inode, size, modification and
//! change times and mode are all the same, and its times are older than the prior scan's
//! start by more than [`RACY_MARGIN_NS`] (git's "racily clean" rule: a change within the
//! same timestamp tick as the prior look would otherwise go unseen). The change time
//! cannot be set by a program, so restoring a file's size and modification time (`touch
//! -d`) does not hide a change.
//!
//! The same argument spares listing directories again: a directory whose device, inode and
//! change time are those the cache's scan saw (older than its start by the same margin)
//! has the entries it had then, which the walk takes from the cache ([`KeptDirs`]); each
//! file's stat data is still taken afresh.

use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

/// How much older than a prior scan's start a file's times must be for its entry to be
/// reused: more than the coarsest timestamp of the file systems the cache is used on
/// (one second) plus the lag of the kernel's coarse clock.
pub const RACY_MARGIN_NS: i128 = 2_000_000_000;

/// Limits of one scan.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Files (and symlinks) tracked at most.
    pub files: usize,
    /// Bytes of content hashed at most.
    pub hash_bytes: u64,
    /// Bytes of content kept (for line counts and diffs) at most, in all.
    pub keep_bytes: u64,
    /// Largest single file whose content is kept.
    pub keep_file_bytes: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            files: 100_000,
            hash_bytes: 1 << 30,
            keep_bytes: 64 << 20,
            keep_file_bytes: 1 << 20,
        }
    }
}

/// One file as the scan saw it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub size: u64,
    pub mtime_ns: i128,
    pub mode: u32,
    /// Identity and change time, for reusing the entry in a later scan ([`Prior`]).
    pub dev: u64,
    pub ino: u64,
    pub ctime_ns: i128,
    /// Keyed hash of the content; `None` past the hashing budget.
    pub hash: Option<u64>,
    pub binary: bool,
    /// Number of lines, when the whole file was read.
    pub lines: Option<u64>,
    /// The content, for small text files within the budget.
    pub content: Option<Content>,
}

/// Kept content: in memory, or in a scan cache file read when needed.
#[derive(Debug, Clone)]
pub enum Content {
    Bytes(Arc<[u8]>),
    Stored {
        file: Arc<std::fs::File>,
        offset: u64,
        len: u64,
    },
}

impl Entry {
    /// An entry holding nothing but `meta`'s stat data: a stand-in, or what [`look`]
    /// fills in.
    fn blank(meta: &Stat) -> Entry {
        Entry {
            size: meta.size,
            mtime_ns: meta.mtime_ns,
            mode: meta.kept_mode(),
            dev: meta.dev,
            ino: meta.ino,
            ctime_ns: meta.ctime_ns,
            hash: None,
            binary: false,
            lines: None,
            content: None,
        }
    }

    /// The kept content, read from the cache file if it is there; `None` when it was not
    /// kept, or the cache file no longer holds what was hashed (then it is as if the
    /// content had not been kept).
    pub fn content_bytes(&self, key: &Key) -> Option<Arc<[u8]>> {
        match self.content.as_ref()? {
            Content::Bytes(bytes) => Some(bytes.clone()),
            Content::Stored { file, offset, len } => {
                let mut bytes = vec![0u8; usize::try_from(*len).ok()?];
                file.read_exact_at(&mut bytes, *offset).ok()?;
                (Some(hash(key, &bytes)) == self.hash).then(|| bytes.into())
            }
        }
    }

    /// The kept content's length, without reading it.
    fn kept_len(&self) -> Option<u64> {
        match self.content.as_ref()? {
            Content::Bytes(bytes) => Some(bytes.len() as u64),
            Content::Stored { len, .. } => Some(*len),
        }
    }

    /// Whether `meta` (a fresh look at the same path) shows the file unchanged since this
    /// entry was taken, by a scan that started after `trusted_before_ns` + the margin.
    fn still_valid(&self, meta: &Stat, trusted_before_ns: i128) -> bool {
        self.dev == meta.dev
            && self.ino == meta.ino
            && self.size == meta.size
            && self.mtime_ns == meta.mtime_ns
            && self.ctime_ns == meta.ctime_ns
            && self.mode == meta.kept_mode()
            && self.mtime_ns < trusted_before_ns
            && self.ctime_ns < trusted_before_ns
    }

    /// Whether `other` (a later look at the same path) holds different content.
    pub fn differs(&self, other: &Entry) -> bool {
        match (self.hash, other.hash) {
            (Some(a), Some(b)) => a != b || self.mode != other.mode,
            // Past the hashing budget on either side: by all the stat data, the change
            // time and identity included, which no writer can put back (round sixteen's
            // review: an edit that kept the size and put the mtime back, `touch -d`,
            // behind a sparse file that took the budget, was reported unchanged).
            _ => {
                self.size != other.size
                    || self.mtime_ns != other.mtime_ns
                    || self.mode != other.mode
                    || self.ctime_ns != other.ctime_ns
                    || self.ino != other.ino
                    || self.dev != other.dev
            }
        }
    }
}

/// The files of a directory tree, by path relative to its root (bytes, `/`-separated).
#[derive(Debug, Default)]
pub struct Scan {
    pub entries: Entries,
    /// More files existed than the cap allows.
    pub truncated: bool,
    /// The last path scanned (in [`walk_order`]).
    pub last: Option<Vec<u8>>,
    /// When the walk started (ns since the epoch, the system clock).
    pub started_ns: i128,
    /// Files whose entry came from the prior scan / files read.
    pub reused: u64,
    pub read: u64,
    /// Every directory walked, with its change time: a directory that changed after some
    /// moment may have lost files the listing no longer saw. A later scan takes the
    /// entries of one that has not changed since from this scan instead of listing it
    /// again ([`Dir::whole`]).
    pub dirs: Vec<Dir>,
    /// Directories whose entries were read from the file system (not taken from a prior
    /// scan's [`Scan::dirs`]).
    pub listed: u64,
    /// Files the listing found that were gone when their stat data was taken.
    pub vanished: Vec<Vec<u8>>,
    /// Directories the walk found and could not go into, in walk order: what they hold is
    /// unknown to this scan (see [`Unwalked`]).
    pub unwalked: Vec<(Vec<u8>, Unwalked)>,
}

/// Why a directory the walk found was not walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwalked {
    /// It could not be opened: no read or search permission (`chmod 311`, which leaves
    /// its files usable by name), or gone or swapped for something else since listed.
    Unreadable,
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl Scan {
    /// What changed at or after `since_ns` (ns since the epoch, the system clock) while
    /// this scan walked: files by change time, files gone between listing and stat, and
    /// directories by change time (which may hide deletions).
    pub fn changed_since(&self, since_ns: i128) -> Changed {
        Changed {
            files: self
                .entries
                .iter()
                .filter(|(_, e)| e.ctime_ns >= since_ns)
                .map(|(path, _)| path.to_vec())
                .chain(self.vanished.iter().cloned())
                .collect(),
            dirs: self
                .dirs
                .iter()
                .filter(|dir| dir.ctime_ns >= since_ns)
                .map(|dir| dir.path.clone())
                .collect(),
        }
    }
}

/// A directory a scan walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dir {
    /// Relative to the root (the root itself: empty).
    pub path: Vec<u8>,
    pub dev: u64,
    pub ino: u64,
    /// Its change time: taken after its listing, or when its entries came from a prior
    /// scan, the one that proved them unchanged.
    pub ctime_ns: i128,
    /// Its files in the scan's entries and its subdirectories in [`Scan::dirs`] are all of
    /// its entries that the walk keeps: it was listed to the end, none of its files was
    /// gone by the time of its stat data, and every subdirectory was walked. Only such a
    /// directory's entries are taken by a later scan ([`KeptDirs`]).
    pub whole: bool,
}

/// A scan's entries in walk order ([`walk_order`]), their paths one after the other in
/// one buffer: the order the listing gives them, so a scan is built by appending and a
/// prior scan is matched with a new one by walking both (no map to build, search or drop).
#[derive(Debug, Default, Clone)]
pub struct Entries {
    paths: Vec<u8>,
    /// The end of each entry's path in `paths` (it starts where the previous ends): apart
    /// from the entries, so that walking the paths touches only them.
    ends: Vec<usize>,
    items: Vec<Entry>,
}

impl Entries {
    pub fn with_capacity(entries: usize, path_bytes: usize) -> Entries {
        Entries {
            paths: Vec::with_capacity(path_bytes),
            ends: Vec::with_capacity(entries),
            items: Vec::with_capacity(entries),
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn path_at(&self, at: usize) -> &[u8] {
        let start = at.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.paths[start..self.ends[at]]
    }

    /// Appends `path`, which must come after every path held in walk order; `false` (and
    /// nothing added) when it does not.
    pub fn push(&mut self, path: &[u8], entry: Entry) -> bool {
        if let Some(last) = self.items.len().checked_sub(1)
            && !walk_order(self.path_at(last), path).is_lt()
        {
            return false;
        }
        self.paths.extend_from_slice(path);
        self.ends.push(self.paths.len());
        self.items.push(entry);
        true
    }

    fn position(&self, path: &[u8]) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.items.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match walk_order(self.path_at(mid), path) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    pub fn get(&self, path: &[u8]) -> Option<&Entry> {
        self.position(path).map(|at| &self.items[at])
    }

    pub fn contains_key(&self, path: &[u8]) -> bool {
        self.position(path).is_some()
    }

    /// Paths and entries in walk order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        (0..self.items.len()).map(|at| (self.path_at(at), &self.items[at]))
    }

    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(|(path, _)| path)
    }
}

/// For tests, as a map's indexing: panics on a path it does not hold.
#[cfg(test)]
impl std::ops::Index<&[u8]> for Entries {
    type Output = Entry;

    fn index(&self, path: &[u8]) -> &Entry {
        match self.get(path) {
            Some(entry) => entry,
            None => panic!("no entry for {}", String::from_utf8_lossy(path)),
        }
    }
}

/// In any order; a path given twice keeps its last entry (as a map's insertion would).
impl FromIterator<(Vec<u8>, Entry)> for Entries {
    fn from_iter<I: IntoIterator<Item = (Vec<u8>, Entry)>>(iter: I) -> Entries {
        let mut all: Vec<(Vec<u8>, Entry)> = iter.into_iter().collect();
        // Stable: of equal paths, the last one given is last.
        all.sort_by(|a, b| walk_order(&a.0, &b.0));
        let mut out = Entries::with_capacity(all.len(), all.iter().map(|(p, _)| p.len()).sum());
        let mut all = all.into_iter().peekable();
        while let Some((path, entry)) = all.next() {
            if all.peek().is_some_and(|(next, _)| *next == path) {
                continue;
            }
            out.push(&path, entry);
        }
        out
    }
}

/// Paths a scan saw changing after a moment (see [`Scan::changed_since`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    pub files: Vec<Vec<u8>>,
    pub dirs: Vec<Vec<u8>>,
}

/// A scan whose entries may be reused (see the module doc). One per scan, held while it
/// runs: its size beside a reference does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Prior<'a> {
    /// A scan used up by the new one (the loaded cache): reused entries are moved out of
    /// it, not copied, so the two are never both whole in memory.
    Owned(Scan),
    /// A scan kept for later (the run's "before", compared with its "after"): reused
    /// entries are copied.
    Borrowed(&'a Scan),
}

impl Prior<'_> {
    fn scan(&self) -> &Scan {
        match self {
            Prior::Owned(scan) => scan,
            Prior::Borrowed(scan) => scan,
        }
    }

    fn trusted_before_ns(&self) -> i128 {
        self.scan().started_ns - RACY_MARGIN_NS
    }

    /// The entry for `path` when `meta` shows its file unchanged since (taken out of an
    /// owned scan whether or not it is still valid: no later look wants it). Paths are
    /// asked for in walk order: `cursor` (0 at first) is where the last one was, so the
    /// prior scan is walked once beside the new one.
    fn take_valid(&mut self, path: &[u8], meta: &Stat, cursor: &mut usize) -> Option<Entry> {
        let trusted = self.trusted_before_ns();
        let entries = &self.scan().entries;
        let at = loop {
            if *cursor >= entries.len() {
                return None;
            }
            let held = entries.path_at(*cursor);
            if held == path {
                break *cursor;
            }
            if walk_order(held, path).is_gt() {
                return None;
            }
            *cursor += 1;
        };
        *cursor += 1;
        match self {
            Prior::Owned(scan) => {
                let old = &mut scan.entries.items[at];
                let content = old.content.take();
                Some(Entry { content, ..*old }).filter(|old| old.still_valid(meta, trusted))
            }
            Prior::Borrowed(scan) => Some(&scan.entries.items[at])
                .filter(|old| old.still_valid(meta, trusted))
                .cloned(),
        }
    }
}

/// The hash key: both scans of one ledger (and a cache with its scans) use the same one.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(pub [u64; 2]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    pub fn random() -> Key {
        // The system's random source; should it fail, the standard library's own seed.
        let word =
            |n: u64| getrandom::u64().unwrap_or_else(|_| std::hash::RandomState::new().hash_one(n));
        Key([word(0), word(1)])
    }
}

/// The system clock in ns since the epoch (0 if it is before it).
pub fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// Walks `root` within `caps`, depth first in name order, so that a cut scan holds every
/// path up to its last one in [`walk_order`] and none after it. Entries of `prior` whose
/// file is unchanged are reused instead of reading the file.
pub fn scan(root: &Path, caps: &Caps, key: &Key, prior: Option<&mut Prior<'_>>) -> Scan {
    finish(list(root, caps), root, caps, key, prior)
}

/// The first half of a [`scan`]: the tree's files listed and their stat data taken, none
/// read yet (needs neither the key nor a prior scan, which can be loaded meanwhile).
pub struct Listed {
    started_ns: i128,
    listing: Listing,
    stats: Vec<Option<Stat>>,
}

/// Lists `root` within `caps` and takes every listed file's stat data (see [`scan`]).
pub fn list(root: &Path, caps: &Caps) -> Listed {
    list_kept(root, caps, None)
}

/// [`list`], taking the entries of each directory that has not changed since `kept` (the
/// persistent cache's scan) from it instead of listing the directory again (see
/// [`KeptDirs`]).
pub fn list_kept(root: &Path, caps: &Caps, kept: Option<&Scan>) -> Listed {
    let started_ns = now_ns();
    let mut kept = kept.map(|scan| KeptDirs::new(scan, root));
    // The names, in walk order, up to the cap; then their stat data, on two threads (the
    // scan's time is mostly `fstatat`).
    let mut listing = Listing {
        cap: caps.files,
        skipped: kernel_mounts_below(root)
            .into_iter()
            .map(|mount| mount.rel)
            .collect(),
        ..Listing::default()
    };
    match open_dir(root) {
        Some(fd) => {
            listing.list(fd, &[], 0, &mut kept);
        }
        // The root itself made unreadable: nothing of it is known.
        None => listing.unwalked.push((Vec::new(), Unwalked::Unreadable)),
    }
    crate::phases::mark("ledger.scan.listed");
    let stats = listing.stat_all(root);
    crate::phases::mark("ledger.scan.stated");
    Listed {
        started_ns,
        listing,
        stats,
    }
}

/// The second half of a [`scan`]: in walk order (the budgets are spent in that order),
/// each listed file's entry reused from `prior` or read.
pub fn finish(
    listed: Listed,
    root: &Path,
    caps: &Caps,
    key: &Key,
    prior: Option<&mut Prior<'_>>,
) -> Scan {
    let Listed {
        started_ns,
        mut listing,
        stats,
    } = listed;
    let mut out = Scan {
        started_ns,
        truncated: listing.truncated,
        unwalked: std::mem::take(&mut listing.unwalked),
        ..Scan::default()
    };
    let mut walker = Walker {
        caps,
        prior,
        cursor: 0,
        // Only files on the root's own file system are reused: another one mounted inside
        // may keep time by a clock of its own.
        root_dev: std::fs::symlink_metadata(root).map_or(u64::MAX, |m| m.dev()),
        budget: Budget {
            hash_left: caps.hash_bytes,
            keep_left: caps.keep_bytes,
        },
    };
    // The last path scanned, whatever became of it.
    out.last = listing.found.last().map(|found| {
        let mut path = Vec::new();
        listing.path_into(found, &mut path);
        path
    });
    let looked = LookedAt { root, key };
    // The common warm case: the listing is the used-up prior's own paths one for one
    // (nothing added, removed or gone): its entries are brought up to date where they lie,
    // not moved into a new scan (13 MB of fresh memory at 100k files).
    match same_paths(&listing, &stats, walker.prior.as_deref_mut()) {
        Some(entries) => looked.update_in_place(&listing, &stats, entries, &mut walker, &mut out),
        None => looked.fill(&mut listing, stats, &mut walker, &mut out),
    }
    crate::phases::mark("ledger.scan.looked");
    out.listed = listing.listed;
    out.dirs = listing.seen;
    crate::phases::mark("ledger.scan.done");
    out
}

/// Where the files of a [`finish`] are read, and the key their content is hashed with.
struct LookedAt<'a> {
    root: &'a Path,
    key: &'a Key,
}

impl LookedAt<'_> {
    /// Reads the file at `path` (relative to the root) for its entry.
    fn read(&self, path: &[u8], stat: &Stat, walker: &mut Walker<'_, '_>) -> Entry {
        let full = self.root.join(std::ffi::OsStr::from_bytes(path));
        look(&full, stat, walker.caps, self.key, &mut walker.budget)
    }

    /// The warm case of [`finish`]: `entries` (the prior's, one per listed path) kept where
    /// they lie (moving 100k entries out and back in rewrote 13 MB that did not change);
    /// only a file read again replaces its entry.
    fn update_in_place(
        &self,
        listing: &Listing,
        stats: &[Option<Stat>],
        mut entries: Entries,
        walker: &mut Walker<'_, '_>,
        out: &mut Scan,
    ) {
        let trusted = walker
            .prior
            .as_deref()
            .map_or(i128::MIN, Prior::trusted_before_ns);
        let mut path = Vec::new();
        for ((found, stat), item) in listing.found.iter().zip(stats).zip(&mut entries.items) {
            let Some(stat) = stat else {
                continue;
            };
            let valid = stat.dev == walker.root_dev && item.still_valid(stat, trusted);
            if valid && walker.budgeted_in_place(item, stat) {
                out.reused += 1;
            } else {
                out.read += 1;
                listing.path_into(found, &mut path);
                *item = self.read(&path, stat, walker);
            }
        }
        out.entries = entries;
    }

    /// The general case of [`finish`]: a new scan's entries appended in the listing's
    /// order, which is the walk's (a path out of that order, which the listing never
    /// gives, would be left out and the scan called cut).
    fn fill(
        &self,
        listing: &mut Listing,
        stats: Vec<Option<Stat>>,
        walker: &mut Walker<'_, '_>,
        out: &mut Scan,
    ) {
        let path_bytes = listing.names.len()
            + listing
                .found
                .iter()
                .map(|f| listing.dirs[f.dir].len() + 1)
                .sum::<usize>();
        out.entries = Entries::with_capacity(listing.found.len(), path_bytes);
        let mut path = Vec::new();
        for (found, stat) in listing.found.iter().zip(stats) {
            listing.path_into(found, &mut path);
            // What the listing said is a file may be gone, or something else, by now.
            let Some(stat) = stat.filter(|s| s.is_file() || s.is_symlink()) else {
                out.vanished.push(path.clone());
                // Its directory's listing no longer says what is there.
                Listing::not_whole(&listing.dir_seen, &mut listing.seen, found.dir);
                continue;
            };
            let entry = match walker.reuse(&path, &stat) {
                Some(entry) => {
                    out.reused += 1;
                    entry
                }
                None => {
                    out.read += 1;
                    self.read(&path, &stat, walker)
                }
            };
            if !out.entries.push(&path, entry) {
                out.truncated = true;
                Listing::not_whole(&listing.dir_seen, &mut listing.seen, found.dir);
            }
        }
    }
}

/// Directories nested deeper than this are not entered (no real tree is that deep).
pub const MAX_DEPTH: usize = 256;

/// Files listed per unit of the stat threads' work.
const STAT_CHUNK: usize = 256;

/// Below this many files, one thread stats them all.
const STAT_THREADED: usize = 4 * STAT_CHUNK;

/// The stat data a scan uses.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    mode: u32,
}

impl Stat {
    fn of(st: &libc::stat) -> Stat {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stat {
            dev: st.st_dev,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
            mode: st.st_mode,
        }
    }

    fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    fn is_file(&self) -> bool {
        self.kind() == libc::S_IFREG
    }

    fn is_symlink(&self) -> bool {
        self.kind() == libc::S_IFLNK
    }

    /// The mode bits an entry keeps: the type and the execute bits.
    fn kept_mode(&self) -> u32 {
        self.mode & 0o170111
    }
}

/// A file (or symlink) the listing found: its directory and name.
struct Found {
    /// Index in [`Listing::dirs`].
    dir: usize,
    /// Range in [`Listing::names`].
    name: std::ops::Range<usize>,
}

/// The files of a tree in walk order (depth first, names sorted), up to a cap, as the
/// directories' listings give them (their types from `d_type`: no `stat` yet).
#[derive(Default)]
struct Listing {
    cap: usize,
    /// Directories holding found files, relative to the root.
    dirs: Vec<Vec<u8>>,
    /// Each of `dirs` as listed: device and inode (`None`: unknown).
    dir_ids: Vec<Option<(u64, u64)>>,
    /// Each of `dirs`: its index in `seen` (`None`: its stat data failed, no record).
    dir_seen: Vec<Option<usize>>,
    /// The found files' names, one after the other.
    names: Vec<u8>,
    found: Vec<Found>,
    /// More files existed than the cap allows.
    truncated: bool,
    /// Every walked directory (see [`Scan::dirs`]).
    seen: Vec<Dir>,
    /// Directories read from the file system (not taken from a prior scan).
    listed: u64,
    /// Mount points of the kernel's own file systems below the root (relative to it),
    /// not walked ([`kernel_mounts_below`]).
    skipped: Vec<Vec<u8>>,
    /// Directories found and not walked (see [`Scan::unwalked`]).
    unwalked: Vec<(Vec<u8>, Unwalked)>,
}

impl Listing {
    /// Writes the path of `found` (relative to the root) into `path`.
    fn path_into(&self, found: &Found, path: &mut Vec<u8>) {
        let dir = &self.dirs[found.dir];
        path.clear();
        path.extend_from_slice(dir);
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&self.names[found.name.clone()]);
    }

    /// Marks directory `dir` (an index into `dirs`) of a listing's `dir_seen` and `seen`
    /// as not walked whole: a file of it vanished before its stat, or the scan left it
    /// out. (Fields, not `&mut self`: the caller holds the listing's files meanwhile.)
    fn not_whole(dir_seen: &[Option<usize>], seen: &mut [Dir], dir: usize) {
        if let Some(seen) = dir_seen
            .get(dir)
            .copied()
            .flatten()
            .and_then(|at| seen.get_mut(at))
        {
            seen.whole = false;
        }
    }

    /// Lists the directory open as `dir` (at `rel` below the root); `false` once the cap
    /// is reached. Subdirectories are opened relative to it, never through a symlink.
    /// Where `kept` holds the directory unchanged, its entries are taken from there.
    fn list(
        &mut self,
        dir: std::os::fd::OwnedFd,
        rel: &[u8],
        depth: usize,
        kept: &mut Option<KeptDirs<'_>>,
    ) -> bool {
        // The names one after the other in one buffer, with their types.
        let mut buf: Vec<u8> = Vec::new();
        let mut items: Vec<(std::ops::Range<usize>, Kind)> = Vec::new();
        let mut whole = true;
        let (fd, st) = self.entries_now(dir, rel, kept, &mut buf, &mut items, &mut whole);
        let me = st.as_ref().map(|st| {
            self.seen.push(Dir {
                path: rel.to_vec(),
                dev: st.st_dev,
                ino: st.st_ino,
                ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
                whole: false,
            });
            self.seen.len() - 1
        });
        let ident = st.map(|st| (st.st_dev, st.st_ino));
        let mut here = None;
        for (range, kind) in items {
            let name = &buf[range];
            match kind {
                Kind::Dir => {
                    match self.list_subdir(fd.as_ref(), rel, name, depth, kept) {
                        Some(walked_whole) => whole &= walked_whole,
                        None => return false,
                    }
                    continue;
                }
                Kind::Other => continue,
                Kind::Symlink if depth == 0 && is_absent_placeholder(fd.as_ref(), name) => {
                    continue;
                }
                Kind::File | Kind::Symlink => {}
            }
            if self.found.len() >= self.cap {
                self.truncated = true;
                return false;
            }
            let dir = *here.get_or_insert_with(|| {
                self.dirs.push(rel.to_vec());
                self.dir_ids.push(ident);
                self.dir_seen.push(me);
                self.dirs.len() - 1
            });
            let start = self.names.len();
            self.names.extend_from_slice(name);
            self.found.push(Found {
                dir,
                name: start..self.names.len(),
            });
        }
        if let Some(me) = me {
            self.seen[me].whole = whole;
        }
        true
    }

    /// The entries of directory `rel` into `buf` and `items`, in name order: taken from
    /// `kept` when the directory has not changed since, else read (counted in `listed`;
    /// `whole` cleared when the read was cut). Returns the directory (`None`: its read
    /// failed) and its stat data, taken before the entries are taken from `kept` (a change
    /// after that look moves the change time past it) or after they are read (a removal
    /// the read missed does).
    fn entries_now(
        &mut self,
        dir: std::os::fd::OwnedFd,
        rel: &[u8],
        kept: &mut Option<KeptDirs<'_>>,
        buf: &mut Vec<u8>,
        items: &mut Vec<(std::ops::Range<usize>, Kind)>,
        whole: &mut bool,
    ) -> (Option<std::os::fd::OwnedFd>, Option<libc::stat>) {
        use std::os::fd::AsFd;
        if let Some(kept) = kept.as_mut()
            && let Ok(now) = nix::sys::stat::fstat(&dir)
            && kept.entries_of(rel, &now, dir.as_fd(), buf, items)
        {
            return (Some(dir), Some(now));
        }
        self.listed += 1;
        buf.clear();
        items.clear();
        let fd = read_dir(dir, buf, items, whole);
        items.sort_unstable_by(|a, b| buf[a.0.clone()].cmp(&buf[b.0.clone()]));
        let st = fd.as_ref().and_then(|fd| nix::sys::stat::fstat(fd).ok());
        (fd, st)
    }

    /// Walks subdirectory `name` of `rel` (open as `parent`): whether it was walked whole
    /// (a mount of the kernel's, one too deep or one that cannot be opened is not, and is
    /// named in `unwalked` where the comparison must leave it alone), or `None` when the
    /// walk stops at the cap.
    fn list_subdir(
        &mut self,
        parent: Option<&std::os::fd::OwnedFd>,
        rel: &[u8],
        name: &[u8],
        depth: usize,
        kept: &mut Option<KeptDirs<'_>>,
    ) -> Option<bool> {
        use std::os::fd::AsFd;
        let mut path = rel.to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name);
        if self.skipped.contains(&path) {
            return Some(false);
        }
        if depth >= MAX_DEPTH {
            self.unwalked.push((path, Unwalked::TooDeep));
            return Some(false);
        }
        // One the walk cannot open (the agent's `chmod 311`, its files still usable by
        // name) was passed over in silence: its new files missed, its old ones taken as
        // deleted (round twenty's second review). It is named now, and the comparison
        // leaves what it held alone.
        let Some(child) = parent.and_then(|fd| open_dir_at(fd.as_fd(), name)) else {
            self.unwalked.push((path, Unwalked::Unreadable));
            return Some(false);
        };
        let before = self.seen.len();
        if !self.list(child, &path, depth + 1, kept) {
            return None;
        }
        // A subdirectory without a record of its own would be left out of a later walk
        // that takes this directory's entries from this one.
        Some(self.seen.len() > before)
    }

    /// Every found file's stat data (`None`: gone), on two threads for a big listing.
    fn stat_all(&self, root: &Path) -> Vec<Option<Stat>> {
        let mut stats = vec![None; self.found.len()];
        // Units of work: runs of files of one directory, at most STAT_CHUNK long.
        let mut units = Vec::new();
        let mut rest: &mut [Option<Stat>] = &mut stats;
        let mut at = 0;
        while at < self.found.len() {
            let dir = self.found[at].dir;
            let mut end = at + 1;
            while end < self.found.len() && end - at < STAT_CHUNK && self.found[end].dir == dir {
                end += 1;
            }
            let (unit, tail) = rest.split_at_mut(end - at);
            units.push((&self.found[at..end], unit));
            rest = tail;
            at = end;
        }
        let threaded = self.found.len() >= STAT_THREADED;
        let queue = std::sync::Mutex::new(units.into_iter());
        let work = || {
            let mut open: Option<(usize, std::os::fd::OwnedFd)> = None;
            loop {
                let next = match queue.lock() {
                    Ok(mut q) => q.next(),
                    Err(_) => None,
                };
                let Some((found, out)) = next else {
                    break;
                };
                let dir = found[0].dir;
                if open.as_ref().is_none_or(|(d, _)| *d != dir) {
                    open = reopen_dir(root, &self.dirs[dir], self.dir_ids[dir]).map(|fd| (dir, fd));
                }
                let Some((_, fd)) = &open else {
                    continue;
                };
                for (f, slot) in found.iter().zip(out.iter_mut()) {
                    let name = std::ffi::OsStr::from_bytes(&self.names[f.name.clone()]);
                    // Relative to the open directory, never following a symlink.
                    *slot =
                        nix::sys::stat::fstatat(fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                            .ok()
                            .map(|st| Stat::of(&st));
                }
            }
        };
        std::thread::scope(|s| {
            let helper = threaded
                .then(|| {
                    std::thread::Builder::new()
                        .name("ledger-stat".into())
                        .spawn_scoped(s, work)
                        .ok()
                })
                .flatten();
            work();
            if let Some(helper) = helper {
                let _ = helper.join();
            }
        });
        stats
    }
}

/// Whether the root's entry `name` is the sandbox's placeholder for an absent `.git`: a
/// symlink to [`crate::sandbox::ABSENT_TARGET`], below a character device, so nothing a
/// user keeps. The sandbox makes it while the "before" may be walking (DESIGN §8): caught,
/// it took one of the cap's places (a workspace of exactly [`Caps::files`] files lost its
/// last one and its scan came out truncated, which rewrote the cache), and whether it was
/// caught changed what the cache held. Left out of the walk, it changes neither; the
/// comparison leaves it out anyway (the ledger's `exclude`). A `.git` replaced by anything
/// else changes the root, which is then listed again.
fn is_absent_placeholder(dir: Option<&std::os::fd::OwnedFd>, name: &[u8]) -> bool {
    if name != b".git" {
        return false;
    }
    dir.is_some_and(|fd| {
        nix::fcntl::readlinkat(fd, std::ffi::OsStr::from_bytes(name))
            .is_ok_and(|target| target == std::ffi::OsStr::new(crate::sandbox::ABSENT_TARGET))
    })
}

/// Reads the directory open as `dir`: its entries' names one after the other into `buf`,
/// with their types from the listing (where the file system gives none, an `lstat`);
/// `whole` is cleared when the listing ended on an error. Gives back a descriptor of the
/// directory, for opening its subdirectories.
fn read_dir(
    dir: std::os::fd::OwnedFd,
    buf: &mut Vec<u8>,
    items: &mut Vec<(std::ops::Range<usize>, Kind)>,
    whole: &mut bool,
) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    let Ok(mut stream) = nix::dir::Dir::from_fd(dir) else {
        *whole = false;
        return None;
    };
    let fd = stream.as_fd().try_clone_to_owned().ok();
    for entry in stream.iter() {
        let Ok(entry) = entry else {
            *whole = false;
            break;
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let kind = match entry.file_type() {
            Some(nix::dir::Type::Directory) => Kind::Dir,
            Some(nix::dir::Type::File) => Kind::File,
            Some(nix::dir::Type::Symlink) => Kind::Symlink,
            Some(_) => Kind::Other,
            None => match fd.as_ref().and_then(|fd| {
                nix::sys::stat::fstatat(
                    fd,
                    entry.file_name(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .ok()
            }) {
                Some(st) => Kind::of(st.st_mode),
                None => Kind::Other,
            },
        };
        let start = buf.len();
        buf.extend_from_slice(name);
        items.push((start..buf.len(), kind));
    }
    // One descriptor per level of the walk held while it goes down, not two.
    drop(stream);
    fd
}

/// The directories of a prior scan (the persistent cache's) whose entries a new walk takes
/// instead of listing them again. A directory's entries cannot change without its change
/// time moving (creating, removing or renaming an entry sets it, and no program can set it
/// back), so a directory whose device, inode and change time are those the prior scan
/// saw, older than that scan's start by [`RACY_MARGIN_NS`] (a change within the same
/// tick would leave it as it was), holds the entries it held then: its files are the
/// prior's entries one level below it, its subdirectories the prior's directories one
/// level below it. Not taken: a directory the prior scan did not walk whole
/// ([`Dir::whole`]), one on another file system than the root's (it may keep time by a
/// clock of its own), an encrypted one (fscrypt: it lists other names once a key is
/// added, and its change time does not move). The files' stat data is taken afresh as
/// ever: only the names are the prior's.
pub struct KeptDirs<'a> {
    scan: &'a Scan,
    trusted_before_ns: i128,
    root_dev: u64,
    /// Where the walk is in the prior's directories and entries: both are walked once, in
    /// walk order, beside the new walk.
    dir_cursor: usize,
    entry_cursor: usize,
}

impl<'a> KeptDirs<'a> {
    fn new(scan: &'a Scan, root: &Path) -> KeptDirs<'a> {
        KeptDirs {
            scan,
            trusted_before_ns: scan.started_ns - RACY_MARGIN_NS,
            root_dev: std::fs::symlink_metadata(root).map_or(u64::MAX, |m| m.dev()),
            dir_cursor: 0,
            entry_cursor: 0,
        }
    }

    /// The entries of the directory at `rel` (`st`: its stat data now, taken before
    /// anything else; `fd`: it, open) into `buf` and `items`, when the prior scan holds it
    /// unchanged; `false` otherwise (`buf` and `items` may then hold part of them).
    /// Directories are asked for in walk order.
    fn entries_of(
        &mut self,
        rel: &[u8],
        st: &libc::stat,
        fd: std::os::fd::BorrowedFd<'_>,
        buf: &mut Vec<u8>,
        items: &mut Vec<(std::ops::Range<usize>, Kind)>,
    ) -> bool {
        if !self.holds_unchanged(rel, st, fd) {
            return false;
        }
        let mut prefix = rel.to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        let mut push = |name: &[u8], kind: Kind| {
            let start = buf.len();
            buf.extend_from_slice(name);
            items.push((start..buf.len(), kind));
        };
        for name in self.subdirectories(&prefix) {
            push(name, Kind::Dir);
        }
        let entries = &self.scan.entries;
        self.entry_cursor = first_where(self.entry_cursor, entries.len(), |at| {
            walk_order(entries.path_at(at), rel).is_gt()
        });
        // A file or a symlink: the walk treats both alike (their stat data decides), so
        // which one is not looked up here.
        for name in files_below(entries, self.entry_cursor, &prefix) {
            push(name, Kind::File);
        }
        items.sort_unstable_by(|a, b| buf[a.0.clone()].cmp(&buf[b.0.clone()]));
        true
    }

    /// Whether the prior scan walked the directory at `rel` whole and it is unchanged since
    /// (`st`, `fd`: it now), moving the directory cursor to it.
    fn holds_unchanged(
        &mut self,
        rel: &[u8],
        st: &libc::stat,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> bool {
        let dirs = &self.scan.dirs;
        while self.dir_cursor < dirs.len() && walk_order(&dirs[self.dir_cursor].path, rel).is_lt() {
            self.dir_cursor += 1;
        }
        let Some(dir) = dirs.get(self.dir_cursor).filter(|d| d.path == rel) else {
            return false;
        };
        let ctime = i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec);
        let unchanged = dir.whole
            && dir.dev == st.st_dev
            && dir.ino == st.st_ino
            && dir.ctime_ns == ctime
            && ctime < self.trusted_before_ns
            && st.st_dev == self.root_dev;
        unchanged && crate::sandbox::is_encrypted(fd) == Ok(false)
    }

    /// The names of the prior's directories one level below `prefix` (the directory at the
    /// cursor's path and a slash): they follow it in walk order.
    fn subdirectories<'p>(&'p self, prefix: &'p [u8]) -> impl Iterator<Item = &'p [u8]> + 'p {
        self.scan.dirs[self.dir_cursor + 1..]
            .iter()
            .map_while(move |sub| sub.path.strip_prefix(prefix))
            .filter(|name| !name.contains(&b'/'))
    }
}

/// The names of the prior's entries one level below `prefix` from `at` on (the first
/// entry past the directory's own path in walk order): those of a subdirectory follow one
/// another and are passed over whole.
fn files_below<'e>(
    entries: &'e Entries,
    mut at: usize,
    prefix: &'e [u8],
) -> impl Iterator<Item = &'e [u8]> + 'e {
    std::iter::from_fn(move || {
        while at < entries.len() {
            let path = entries.path_at(at);
            let name = path.strip_prefix(prefix)?;
            let Some(slash) = name.iter().position(|b| *b == b'/') else {
                at += 1;
                return Some(name);
            };
            let below = &path[..prefix.len() + slash + 1];
            at = first_where(at + 1, entries.len(), |i| {
                !entries.path_at(i).starts_with(below)
            });
        }
        None
    })
}

/// The first index in `lo..hi` where `past` holds, `hi` if none: `past` is false then
/// true over the range (a binary search).
fn first_where(mut lo: usize, mut hi: usize, past: impl Fn(usize) -> bool) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if past(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The type of a listed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

impl Kind {
    fn of(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// The kernel's own file systems (`/proc`, `/sys` and the like): nothing in them is a
/// workspace's content, and a walk of them is slow and reads as ever-changing (a run in
/// `/` with `danger-full-access` listed `proc/1/net/...` among its changes, after 26 s).
/// `devtmpfs` is the host's `/dev` wherever it is mounted (a chroot's `dev`, bound in as
/// its `proc` and `sys` are): a workspace holding it granted the agent the host's `/dev`,
/// where it made files as root (round seventeen's review); the mounts are `nodev`, which
/// stops a device's open, not a file made in the directory. The others below it are the
/// kernel's too (the ledger's watcher already took `selinuxfs`, `smackfs` and `resctrl`
/// as such, `on_pseudo_fs`).
const KERNEL_FILE_SYSTEMS: &[&str] = &[
    "proc",
    "sysfs",
    "devpts",
    "devtmpfs",
    "selinuxfs",
    "smackfs",
    "resctrl",
    "rpc_pipefs",
    "nfsd",
    "binder",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "bpf",
    "pstore",
    "efivarfs",
    "configfs",
    "fusectl",
    "mqueue",
    "binfmt_misc",
    "nsfs",
    "autofs",
    "hugetlbfs",
];

/// A kernel file system ([`KERNEL_FILE_SYSTEMS`]) mounted below a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelMount {
    /// Its mount point, relative to the directory.
    pub rel: Vec<u8>,
    /// Its type, as `mountinfo` names it (`proc`, `sysfs`, ...).
    pub fstype: String,
}

/// The mount points of [`KERNEL_FILE_SYSTEMS`] below `root`, from `/proc/self/mountinfo`
/// (read again only when it changed, see [`super::mountinfo`]; a workspace has none below
/// it as a rule). The sandbox refuses a
/// workspace with one; the ledger does not walk them.
pub(crate) fn kernel_mounts_below(root: &Path) -> Vec<KernelMount> {
    let Ok(root) = std::fs::canonicalize(root) else {
        return Vec::new();
    };
    let Ok(table) = super::mountinfo::table() else {
        return Vec::new();
    };
    mounts_below(&table, root.as_os_str().as_bytes())
}

/// The type of the kernel file system ([`KERNEL_FILE_SYSTEMS`]) that the directory open
/// as `dir` lies on, if it lies on one: its mount's id (`mnt_id` of its `fdinfo`) looked
/// up in `/proc/self/mountinfo`. [`kernel_mounts_below`] sees the mounts below a tree,
/// not the one it is in: a tree that is the mount point of the host's `/dev` bound
/// elsewhere (`/mnt/hostdev`), or a directory inside it, was granted whole (round
/// seventeen's review), though `/dev` itself is never a workspace. By the mount, not
/// `statfs`: `devtmpfs` says it is a `tmpfs`.
pub(crate) fn kernel_mount_holding(dir: std::os::fd::BorrowedFd<'_>) -> Option<String> {
    use std::os::fd::AsRawFd;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", dir.as_raw_fd())).ok()?;
    let id = info
        .lines()
        .find_map(|line| line.strip_prefix("mnt_id:"))?
        .trim()
        .as_bytes()
        .to_vec();
    let table = super::mountinfo::table().ok()?;
    mount_type(&table, &id).filter(|fstype| KERNEL_FILE_SYSTEMS.contains(&fstype.as_str()))
}

/// The file system type of the mount whose id is `id` in a `mountinfo` text.
fn mount_type(table: &[u8], id: &[u8]) -> Option<String> {
    table.split(|b| *b == b'\n').find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        if fields.first() != Some(&id) {
            return None;
        }
        let dash = fields.iter().position(|f| *f == b"-")?;
        std::str::from_utf8(fields.get(dash + 1)?)
            .ok()
            .map(str::to_owned)
    })
}

/// [`kernel_mounts_below`] of a `mountinfo` text: each line is `ID PARENT MAJ:MIN ROOT
/// MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`, the paths with
/// spaces and the like as octal escapes (`\040`).
fn mounts_below(table: &[u8], root: &[u8]) -> Vec<KernelMount> {
    let root = if root == b"/" { &b""[..] } else { root };
    table
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let fields: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
            let point = super::mountinfo::unescape(fields.get(4)?).into_os_string();
            let point = std::os::unix::ffi::OsStrExt::as_bytes(point.as_os_str());
            let dash = fields.iter().position(|f| *f == b"-")?;
            let fstype = std::str::from_utf8(fields.get(dash + 1)?).ok()?;
            let rel = point.strip_prefix(root)?.strip_prefix(b"/")?;
            (KERNEL_FILE_SYSTEMS.contains(&fstype) && !rel.is_empty()).then(|| KernelMount {
                rel: rel.to_vec(),
                fstype: fstype.to_owned(),
            })
        })
        .collect()
}

/// The directory `name` in the one open as `parent`, opened without following a symlink.
pub(crate) fn open_dir_at(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &[u8],
) -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::OFlag;
    nix::fcntl::openat(
        parent,
        std::ffi::OsStr::from_bytes(name),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
}

/// A listed directory (`rel` below the root) opened again for its files' stat data: by
/// path (the kernel's fast walk), then held to be the very directory the listing read
/// (`ident`: its device and inode then). One swapped since, for a symlink or another
/// directory, is not used: its files are then taken as gone, which the scan reports.
fn reopen_dir(root: &Path, rel: &[u8], ident: Option<(u64, u64)>) -> Option<std::os::fd::OwnedFd> {
    let ident = ident?;
    let dir = open_dir(&root.join(std::ffi::OsStr::from_bytes(rel)))?;
    let st = nix::sys::stat::fstat(&dir).ok()?;
    (st.st_dev, st.st_ino).eq(&ident).then_some(dir)
}

pub(crate) fn open_dir(path: &Path) -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::OFlag;
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
}

/// The entries of `prior`, taken out of it, when it is a used-up scan ([`Prior::Owned`])
/// whose paths are the listing's one for one and every listed file is still a file or a
/// symlink (none gone); `None` otherwise, `prior` untouched.
fn same_paths(
    listing: &Listing,
    stats: &[Option<Stat>],
    prior: Option<&mut Prior<'_>>,
) -> Option<Entries> {
    let Some(Prior::Owned(prior)) = prior else {
        return None;
    };
    if prior.entries.len() != listing.found.len()
        || !stats
            .iter()
            .all(|s| s.is_some_and(|s| s.is_file() || s.is_symlink()))
    {
        return None;
    }
    for (at, found) in listing.found.iter().enumerate() {
        let name = &listing.names[found.name.clone()];
        if !is_path_of(prior.entries.path_at(at), &listing.dirs[found.dir], name) {
            return None;
        }
    }
    Some(std::mem::take(&mut prior.entries))
}

/// Whether `path` is `dir`/`name` (`name` alone when `dir` is the root, empty), compared
/// in place: the warm run asks this of every file, and building each path to compare it
/// cost a copy of every path.
fn is_path_of(path: &[u8], dir: &[u8], name: &[u8]) -> bool {
    if dir.is_empty() {
        return path == name;
    }
    path.len() == dir.len() + 1 + name.len()
        && path.starts_with(dir)
        && path[dir.len()] == b'/'
        && path.ends_with(name)
}

struct Walker<'a, 'p> {
    caps: &'a Caps,
    prior: Option<&'a mut Prior<'p>>,
    /// Where the walk is in the prior scan (see [`Prior::take_valid`]).
    cursor: usize,
    root_dev: u64,
    budget: Budget,
}

impl Walker<'_, '_> {
    /// The prior scan's entry for `path`, when the file is unchanged since and the entry
    /// holds what reading the file now would give within the budgets (which are charged
    /// as if it had been read).
    fn reuse(&mut self, path: &[u8], meta: &Stat) -> Option<Entry> {
        let prior = self.prior.as_deref_mut()?;
        if meta.dev != self.root_dev {
            return None;
        }
        let entry = prior.take_valid(path, meta, &mut self.cursor)?;
        self.budgeted(entry, meta)
    }

    /// A prior entry found still valid for the file `meta` describes, when it holds what
    /// reading the file now would give within the budgets (which are charged as if it had
    /// been read).
    fn budgeted(&mut self, mut entry: Entry, meta: &Stat) -> Option<Entry> {
        self.budgeted_in_place(&mut entry, meta).then_some(entry)
    }

    /// [`Walker::budgeted`] on an entry where it lies: `false` (the entry untouched) when
    /// it does not hold what reading the file would give, and the file must be read.
    fn budgeted_in_place(&mut self, entry: &mut Entry, meta: &Stat) -> bool {
        if meta.is_symlink() {
            return true;
        }
        let size = entry.size;
        if size > self.budget.hash_left {
            // Past the hashing budget: compared by stat data only, as a fresh look would.
            entry.hash = None;
            entry.binary = false;
            entry.lines = None;
            entry.content = None;
            return true;
        }
        if entry.hash.is_none() {
            return false;
        }
        let keep =
            !entry.binary && size <= self.caps.keep_file_bytes && size <= self.budget.keep_left;
        if keep && entry.kept_len() != Some(size) {
            return false;
        }
        self.budget.hash_left -= size;
        if keep {
            self.budget.keep_left -= size;
        } else if entry.content.is_some() {
            entry.content = None;
        }
        true
    }
}

/// The order of the walk: path components compared one by one. The same as comparing the
/// bytes with `/` taken as lower than any byte of a name (names hold no NUL), which is
/// how it is done: at the first byte that differs.
pub fn walk_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let rank = |c: u8| if c == b'/' { 0 } else { c };
    // The first byte that differs, eight at a time (the walk compares paths that share
    // long prefixes, once or more per file).
    let common = a.len().min(b.len());
    let mut at = 0;
    for (x, y) in a[..common].chunks_exact(8).zip(b[..common].chunks_exact(8)) {
        let (mut wx, mut wy) = ([0u8; 8], [0u8; 8]);
        wx.copy_from_slice(x);
        wy.copy_from_slice(y);
        let diff = u64::from_le_bytes(wx) ^ u64::from_le_bytes(wy);
        if diff != 0 {
            at += diff.trailing_zeros() as usize / 8;
            return rank(a[at]).cmp(&rank(b[at]));
        }
        at += 8;
    }
    match a[at..common]
        .iter()
        .zip(&b[at..common])
        .find(|(x, y)| x != y)
    {
        Some((x, y)) => rank(*x).cmp(&rank(*y)),
        None => a.len().cmp(&b.len()),
    }
}

struct Budget {
    hash_left: u64,
    keep_left: u64,
}

fn look(path: &Path, meta: &Stat, caps: &Caps, key: &Key, budget: &mut Budget) -> Entry {
    let mut entry = Entry::blank(meta);
    if meta.is_symlink() {
        if let Ok(target) = std::fs::read_link(path) {
            let bytes = target.as_os_str().as_bytes();
            entry.hash = Some(hash(key, bytes));
        }
        return entry;
    }
    if entry.size > budget.hash_left {
        return entry;
    }
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        // Not through a symlink, and not blocking on a FIFO swapped in since the stat.
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
    };
    let Ok(file) = file else {
        return entry;
    };
    let mut bytes = Vec::new();
    // Never more than the budget, even if the file grew since its stat.
    if (&file)
        .take(budget.hash_left)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return entry;
    }
    // The stat data were taken before (a pass of their own): a file written since holds
    // content newer than they say. Its times after the read go with what was read, so
    // that a change made after the run's first process started is seen as one
    // (`Scan::changed_since`) instead of hiding in the "before" (found by round
    // thirteen's review, `tests/sandbox_round13_review.rs`).
    if let Ok(now) = file.metadata() {
        let ctime_ns = i128::from(now.ctime()) * 1_000_000_000 + i128::from(now.ctime_nsec());
        if ctime_ns != entry.ctime_ns || now.ino() != entry.ino {
            entry.ctime_ns = ctime_ns;
            entry.mtime_ns = i128::from(now.mtime()) * 1_000_000_000 + i128::from(now.mtime_nsec());
            entry.size = now.len();
            entry.ino = now.ino();
        }
    }
    budget.hash_left = budget.hash_left.saturating_sub(bytes.len() as u64);
    entry.hash = Some(hash(key, &bytes));
    entry.binary = is_binary(&bytes);
    if !entry.binary {
        entry.lines = Some(count_lines(&bytes));
        let len = bytes.len() as u64;
        if len <= caps.keep_file_bytes && len <= budget.keep_left {
            budget.keep_left -= len;
            entry.content = Some(Content::Bytes(bytes.into()));
        }
    }
    entry
}

/// The keyed hash of `bytes` (SipHash-1-3).
pub fn hash(key: &Key, bytes: &[u8]) -> u64 {
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(key.0[0], key.0[1]);
    hasher.write(bytes);
    hasher.finish()
}

/// Git's rule: a NUL in the first 8000 bytes makes a file binary.
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(8000)].contains(&0)
}

/// Lines as diff counts them: a last line without a newline still counts.
pub fn count_lines(bytes: &[u8]) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', bytes).count() as u64;
    newlines + u64::from(!bytes.is_empty() && !bytes.ends_with(b"\n"))
}

/// Lines added and removed between two texts, counted as multisets: a line present more
/// often after than before is added, and the reverse removed. This equals a line diff's
/// counts except for lines that only moved, which it does not count.
pub fn line_delta(before: &[u8], after: &[u8]) -> (u64, u64) {
    let mut counts: std::collections::HashMap<&[u8], i64> = std::collections::HashMap::new();
    for line in split_lines(before) {
        *counts.entry(line).or_default() -= 1;
    }
    for line in split_lines(after) {
        *counts.entry(line).or_default() += 1;
    }
    counts.values().fold((0, 0), |(added, removed), n| {
        if *n > 0 {
            (added + *n as u64, removed)
        } else {
            (added, removed + n.unsigned_abs())
        }
    })
}

fn split_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    body.split(|b| *b == b'\n')
        .filter(move |_| !bytes.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_own_mounts_below_the_root_are_found_in_mountinfo() {
        let table = b"22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
            23 1 0:22 / /sys rw - sysfs sysfs rw\n\
            24 1 8:1 / / rw - ext4 /dev/vda rw\n\
            25 24 0:5 / /work/ws/my\\040proc rw shared:1 - proc proc rw\n\
            26 24 8:2 / /work/ws/data rw - ext4 /dev/vdb rw\n\
            27 24 0:23 / /work/wsx/proc rw - proc proc rw\n";
        let rels = |root: &[u8]| -> Vec<Vec<u8>> {
            mounts_below(table, root)
                .into_iter()
                .map(|m| m.rel)
                .collect()
        };
        assert_eq!(
            rels(b"/"),
            [
                b"proc".to_vec(),
                b"sys".to_vec(),
                b"work/ws/my proc".to_vec(),
                b"work/wsx/proc".to_vec()
            ]
        );
        assert_eq!(
            mounts_below(table, b"/work/ws"),
            [KernelMount {
                rel: b"my proc".to_vec(),
                fstype: "proc".into()
            }]
        );
        assert!(rels(b"/work/ws/my proc").is_empty());
        assert_eq!(mount_type(table, b"25").as_deref(), Some("proc"));
        assert_eq!(mount_type(table, b"26").as_deref(), Some("ext4"));
        assert_eq!(mount_type(table, b"2"), None);
    }

    #[test]
    fn symlinked_directories_are_entries_not_walked_and_the_walk_keeps_its_order() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "x\n").unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/deep.txt"), "1\n").unwrap();
        std::fs::write(root.join("a.txt"), "2\n").unwrap();
        std::fs::write(root.join("z.txt"), "3\n").unwrap();
        std::os::unix::fs::symlink("a", root.join("inner")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        let key = Key::random();
        let whole = scan(root, &Caps::default(), &key, None);
        // In walk order: `a/` before `a.txt`.
        let paths: Vec<&[u8]> = whole.entries.keys().collect();
        assert_eq!(
            paths,
            [&b"a/b/deep.txt"[..], b"a.txt", b"inner", b"out", b"z.txt"]
        );
        assert_eq!(
            whole.entries[&b"out"[..]].mode & libc::S_IFMT,
            libc::S_IFLNK
        );
        // Cut at two files: the first two in walk order (`a/` before `a.txt`).
        let caps = Caps {
            files: 2,
            ..Caps::default()
        };
        let cut = scan(root, &caps, &key, None);
        assert!(cut.truncated);
        let kept: Vec<&[u8]> = cut.entries.keys().collect();
        assert_eq!(kept, [&b"a/b/deep.txt"[..], b"a.txt"]);
        assert_eq!(cut.last.as_deref(), Some(&b"a.txt"[..]));
        // Every listed directory's change time is kept (the root, a, a/b).
        assert_eq!(whole.dirs.len(), 3);
    }

    /// The sandbox's placeholder for an absent `.git` (made while the "before" may walk)
    /// takes no place under the cap and is not listed: a workspace of exactly the cap's
    /// files is scanned whole with it. Any other `.git` symlink is a file like another.
    #[test]
    fn the_sandboxs_absent_git_placeholder_takes_no_place_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        for name in ["a.txt", "b.txt", "sub/c.txt"] {
            std::fs::write(root.join(name), "x\n").unwrap();
        }
        let absent = crate::sandbox::ABSENT_TARGET;
        std::os::unix::fs::symlink(absent, root.join(".git")).unwrap();
        let key = Key::random();
        let caps = Caps {
            files: 3,
            ..Caps::default()
        };
        let got = scan(root, &caps, &key, None);
        assert!(!got.truncated, "the placeholder cut the scan");
        let paths: Vec<&[u8]> = got.entries.keys().collect();
        assert_eq!(paths, [&b"a.txt"[..], b"b.txt", b"sub/c.txt"]);
        // Below the root, or pointing elsewhere: listed and counted.
        std::os::unix::fs::symlink(absent, root.join("sub/.git")).unwrap();
        let cut = scan(root, &caps, &key, None);
        assert!(cut.truncated);
        std::fs::remove_file(root.join(".git")).unwrap();
        std::os::unix::fs::symlink("/dev/null", root.join(".git")).unwrap();
        let whole = scan(root, &Caps::default(), &key, None);
        let paths: Vec<&[u8]> = whole.entries.keys().collect();
        assert_eq!(
            paths,
            [&b".git"[..], b"a.txt", b"b.txt", b"sub/.git", b"sub/c.txt"]
        );
    }

    /// A walk beside a prior scan's directories takes the entries of those unchanged since
    /// (listing none of them again) and lists the others: either way it finds exactly
    /// what a walk of its own finds.
    #[test]
    fn unchanged_directories_are_taken_from_the_prior_scan_changed_ones_listed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["a/b/c", "d", "e/f", "g"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "a/x.txt",
            "a/b/y.txt",
            "a/b/c/z.txt",
            "a.txt",
            "a/b.txt",
            "g/1",
        ] {
            std::fs::write(root.join(f), "1\n").unwrap();
        }
        std::os::unix::fs::symlink("a", root.join("link")).unwrap();
        let key = Key::random();
        let caps = Caps::default();
        let walk =
            |kept: Option<&Scan>| finish(list_kept(root, &caps, kept), root, &caps, &key, None);
        let paths =
            |scan: &Scan| -> Vec<Vec<u8>> { scan.entries.keys().map(<[u8]>::to_vec).collect() };
        let dirs =
            |scan: &Scan| -> Vec<Vec<u8>> { scan.dirs.iter().map(|d| d.path.clone()).collect() };
        let mut prior = walk(None);
        assert_eq!(prior.listed, 8);
        assert!(prior.dirs.iter().all(|d| d.whole));
        // As if it had been taken well after every change so far.
        prior.started_ns += 10 * RACY_MARGIN_NS;

        let same = walk(Some(&prior));
        assert_eq!(same.listed, 0, "every directory is unchanged");
        assert_eq!(paths(&same), paths(&prior));
        assert_eq!(dirs(&same), dirs(&prior));
        assert_eq!(
            same.entries[&b"link"[..]].mode & libc::S_IFMT,
            libc::S_IFLNK
        );

        // Files added and removed change their directories, which are listed again; a
        // file's content changed in place changes no directory, and its stat data is
        // taken afresh all the same.
        std::fs::write(root.join("d/new.txt"), "2\n").unwrap();
        std::fs::write(root.join("e/f/g.txt"), "2\n").unwrap();
        std::fs::remove_file(root.join("a/b/c/z.txt")).unwrap();
        std::fs::create_dir(root.join("g/h")).unwrap();
        std::fs::write(root.join("g/h/2"), "2\n").unwrap();
        std::fs::write(root.join("a/x.txt"), "changed\n").unwrap();
        let fresh = walk(None);
        let kept = walk(Some(&prior));
        assert_eq!(kept.listed, 5, "d, e/f, a/b/c, g and the new g/h");
        assert_eq!(paths(&kept), paths(&fresh));
        assert_eq!(dirs(&kept), dirs(&fresh));
        assert!(kept.entries.contains_key(b"d/new.txt") && kept.entries.contains_key(b"g/h/2"));
        assert!(!kept.entries.contains_key(b"a/b/c/z.txt"));
        assert_eq!(kept.entries[&b"a/x.txt"[..]].size, 8);

        // A directory the prior did not walk whole, or saw too recently, is listed again.
        let mut partial = walk(None);
        partial.started_ns += 10 * RACY_MARGIN_NS;
        partial
            .dirs
            .iter_mut()
            .find(|d| d.path == b"a/b")
            .unwrap()
            .whole = false;
        assert_eq!(walk(Some(&partial)).listed, 1);
        partial.started_ns -= 10 * RACY_MARGIN_NS;
        assert_eq!(walk(Some(&partial)).listed, 9);
    }

    /// A used-up prior whose paths are the listing's is brought up to date where it lies:
    /// the same entries as the walk beside a kept prior gives (a changed file read again,
    /// a racily clean one too, the others reused).
    #[test]
    fn a_prior_with_the_same_paths_is_updated_in_place_as_the_walk_beside_it_would() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        for f in ["a/b/1.txt", "a/2.txt", "3.txt", "4.bin"] {
            std::fs::write(root.join(f), "same\n").unwrap();
        }
        let key = Key::random();
        let caps = Caps::default();
        let aged = || {
            let mut prior = scan(root, &caps, &key, None);
            prior.started_ns += 10 * RACY_MARGIN_NS;
            prior
        };
        let (mut prior, owned) = (aged(), aged());
        std::fs::write(root.join("a/2.txt"), "changed\n").unwrap();
        let beside = scan(root, &caps, &key, Some(&mut Prior::Borrowed(&prior)));
        let in_place = scan(root, &caps, &key, Some(&mut Prior::Owned(owned)));
        type View = Vec<(Vec<u8>, u64, Option<u64>, Option<u64>)>;
        let view = |scan: &Scan| -> View {
            scan.entries
                .iter()
                .map(|(path, e)| (path.to_vec(), e.size, e.hash, e.lines))
                .collect()
        };
        assert_eq!(view(&in_place), view(&beside));
        assert_eq!((in_place.reused, in_place.read), (3, 1));
        assert_eq!((beside.reused, beside.read), (3, 1));
        assert_eq!(in_place.entries[&b"a/2.txt"[..]].size, 8);
        assert_eq!(in_place.dirs, beside.dirs);
        // Budgets smaller than the tree, spent in walk order: the in-place update strips
        // and keeps exactly what the walk beside the prior does, and what reading every
        // file does.
        for (hash_bytes, keep_bytes) in [(12, 64), (64, 7), (0, 0)] {
            let small = Caps {
                hash_bytes,
                keep_bytes,
                ..Caps::default()
            };
            let beside = scan(root, &small, &key, Some(&mut Prior::Borrowed(&prior)));
            // The same prior as the one beside (taken before the change), owned.
            let owned = Scan {
                entries: prior.entries.clone(),
                dirs: prior.dirs.clone(),
                started_ns: prior.started_ns,
                ..Scan::default()
            };
            let in_place = scan(root, &small, &key, Some(&mut Prior::Owned(owned)));
            let kept = |scan: &Scan| -> Vec<Option<u64>> {
                scan.entries.iter().map(|(_, e)| e.kept_len()).collect()
            };
            let fresh = scan(root, &small, &key, None);
            assert_eq!(view(&in_place), view(&fresh), "{hash_bytes} {keep_bytes}");
            assert_eq!(kept(&in_place), kept(&fresh), "{hash_bytes} {keep_bytes}");
            assert_eq!(view(&in_place), view(&beside), "{hash_bytes} {keep_bytes}");
            assert_eq!(kept(&in_place), kept(&beside), "{hash_bytes} {keep_bytes}");
            assert_eq!(
                (in_place.reused, in_place.read),
                (beside.reused, beside.read)
            );
        }
        // Racily clean (the prior as recent as the files): every file is read again.
        prior.started_ns -= 10 * RACY_MARGIN_NS;
        let racy = scan(root, &caps, &key, Some(&mut Prior::Owned(prior)));
        assert_eq!((racy.reused, racy.read), (0, 4));
    }

    #[test]
    fn a_path_is_matched_with_its_directory_and_name_in_place() {
        assert!(is_path_of(b"a.txt", b"", b"a.txt"));
        assert!(is_path_of(b"a/b/c", b"a/b", b"c"));
        for (path, dir, name) in [
            (&b"a.txt"[..], &b""[..], &b"a.tx"[..]),
            (b"x/a.txt", b"", b"a.txt"),
            (b"a/bc", b"a/b", b"c"),
            (b"a/b-c", b"a/b", b"c"),
            (b"a/bc", b"a", b"c"),
            (b"ab/c", b"a", b"b/c"),
            (b"x/b/c", b"a/b", b"c"),
            (b"a/b/d", b"a/b", b"c"),
            (b"a/b/c/", b"a/b", b"c"),
        ] {
            assert!(
                !is_path_of(path, dir, name),
                "{:?} is not {:?} / {:?}",
                String::from_utf8_lossy(path),
                String::from_utf8_lossy(dir),
                String::from_utf8_lossy(name)
            );
        }
    }

    /// A directory whose listing is not all of what the walk keeps is not whole: one
    /// with a file gone before its stat data, or with a subdirectory not walked.
    #[test]
    fn a_directory_not_walked_whole_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("open/deep")).unwrap();
        std::fs::create_dir_all(root.join("gone")).unwrap();
        std::fs::write(root.join("gone/f"), "1\n").unwrap();
        std::fs::write(root.join("open/deep/f"), "1\n").unwrap();
        let caps = Caps::default();
        let mut listed = list(root, &caps);
        // As if `gone/f` had gone between the listing and its stat data (walk order: the
        // first file).
        std::fs::remove_file(root.join("gone/f")).unwrap();
        listed.stats[0] = None;
        let scan = finish(listed, root, &caps, &Key::random(), None);
        assert_eq!(scan.vanished, [b"gone/f".to_vec()]);
        let whole = |path: &[u8]| scan.dirs.iter().find(|d| d.path == path).unwrap().whole;
        assert!(!whole(b"gone"));
        assert!(whole(b"open") && whole(b"open/deep") && whole(b""));
        // Cut by the cap: neither the directory cut nor those above it.
        std::fs::write(root.join("open/deep/g"), "1\n").unwrap();
        let one = Caps {
            files: 1,
            ..Caps::default()
        };
        let cut = super::scan(root, &one, &Key::random(), None);
        assert!(cut.truncated);
        assert!(cut.dirs.iter().all(|d| !d.whole || d.path == b"gone"));
    }

    /// The byte comparison with `/` lowest is the component-by-component one.
    #[test]
    fn walk_order_compares_components() {
        let by_components =
            |a: &[u8], b: &[u8]| a.split(|c| *c == b'/').cmp(b.split(|c| *c == b'/'));
        let paths: [&[u8]; 12] = [
            b"a", b"a.txt", b"a/b", b"a/b.c", b"a-b", b"a/b/c", b"ab", b"a\x01", b"b", b"a b",
            b"a/\xff", b"\xff/a",
        ];
        for a in paths {
            for b in paths {
                assert_eq!(walk_order(a, b), by_components(a, b), "{a:?} {b:?}");
            }
        }
        // Longer paths, differing at every place of an eight-byte word and past it.
        let base: Vec<u8> = b"pkg00001/src/mod/long-name.rs".to_vec();
        for at in 0..base.len() {
            for by in [b'/', b'.', b'a', b'\x01', b'\xff'] {
                let mut other = base.clone();
                other[at] = by;
                for (a, b) in [(&base, &other), (&other, &base)] {
                    assert_eq!(walk_order(a, b), by_components(a, b), "{a:?} {b:?}");
                }
            }
            let cut = &base[..at];
            assert_eq!(walk_order(cut, &base), by_components(cut, &base));
        }
    }

    /// Entries in walk order: found by path, built from any order (the last of a path
    /// given twice kept), and never appended out of order.
    #[test]
    fn entries_keep_the_walk_order() {
        let entry = |size| Entry {
            size,
            mtime_ns: 0,
            mode: libc::S_IFREG,
            dev: 0,
            ino: 0,
            ctime_ns: 0,
            hash: None,
            binary: false,
            lines: None,
            content: None,
        };
        let entries: Entries = [
            (b"a.txt".to_vec(), entry(1)),
            (b"a/b".to_vec(), entry(2)),
            (b"z".to_vec(), entry(3)),
            (b"a.txt".to_vec(), entry(4)),
        ]
        .into_iter()
        .collect();
        let keys: Vec<&[u8]> = entries.keys().collect();
        assert_eq!(keys, [&b"a/b"[..], b"a.txt", b"z"]);
        assert_eq!(entries[b"a.txt".as_slice()].size, 4);
        assert_eq!(entries.get(b"a/b").map(|e| e.size), Some(2));
        assert!(entries.get(b"a").is_none() && !entries.contains_key(b"y"));
        let mut more = entries.clone();
        assert!(!more.push(b"a.txt", entry(5)));
        assert!(!more.push(b"z", entry(5)));
        assert!(more.push(b"z/a", entry(5)));
        assert_eq!(more.len(), 4);
    }

    /// A prior scan with files the new one no longer has, and without files it has: the
    /// walk beside it reuses exactly the unchanged ones it holds.
    #[test]
    fn the_walk_beside_a_prior_scan_matches_paths_across_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in ["b", "d", "f", "h"] {
            std::fs::write(root.join(name), name).unwrap();
        }
        std::fs::create_dir(root.join("c")).unwrap();
        std::fs::write(root.join("c/x"), "x").unwrap();
        let key = Key::random();
        let mut first = scan(root, &Caps::default(), &key, None);
        first.started_ns += 10 * RACY_MARGIN_NS;
        // Gone from the tree: b, c/x; new: a, e, g, c.txt.
        std::fs::remove_file(root.join("b")).unwrap();
        std::fs::remove_file(root.join("c/x")).unwrap();
        for name in ["a", "e", "g", "c.txt"] {
            std::fs::write(root.join(name), name).unwrap();
        }
        let copy = Scan {
            entries: first.entries.clone(),
            started_ns: first.started_ns,
            ..Scan::default()
        };
        for mut prior in [Prior::Borrowed(&first), Prior::Owned(copy)] {
            let again = scan(root, &Caps::default(), &key, Some(&mut prior));
            assert_eq!((again.reused, again.read), (3, 4));
            let keys: Vec<&[u8]> = again.entries.keys().collect();
            assert_eq!(keys, [&b"a"[..], b"c.txt", b"d", b"e", b"f", b"g", b"h"]);
        }
    }

    #[test]
    fn lines_and_deltas() {
        assert_eq!(count_lines(b""), 0);
        assert_eq!(count_lines(b"a"), 1);
        assert_eq!(count_lines(b"a\nb\n"), 2);
        assert_eq!(line_delta(b"a\nb\nc\n", b"a\nB\nc\nd\n"), (2, 1));
        assert_eq!(line_delta(b"", b"x\n"), (1, 0));
        assert_eq!(line_delta(b"x\n", b""), (0, 1));
        assert!(is_binary(b"a\0b"));
        assert!(!is_binary(b"plain"));
    }

    /// A prior entry whose stat data matches the file but whose hash is of older content
    /// (a change within the timestamp tick of the prior look): reused only when the prior
    /// scan started well after the file's times.
    #[test]
    fn a_racily_clean_entry_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let key = Key::random();
        std::fs::write(dir.path().join("f"), "aaaa\n").unwrap();
        let first = scan(dir.path(), &Caps::default(), &key, None);
        std::fs::write(dir.path().join("f"), "bbbb\n").unwrap();
        let now = scan(dir.path(), &Caps::default(), &key, None);
        let stale = Entry {
            hash: first.entries[b"f".as_slice()].hash,
            content: first.entries[b"f".as_slice()].content.clone(),
            ..now.entries[b"f".as_slice()].clone()
        };
        let forged = |started_ns| Scan {
            entries: [(b"f".to_vec(), stale.clone())].into_iter().collect(),
            started_ns,
            ..Scan::default()
        };
        let racy = forged(now.started_ns);
        let again = scan(
            dir.path(),
            &Caps::default(),
            &key,
            Some(&mut Prior::Borrowed(&racy)),
        );
        assert_eq!((again.reused, again.read), (0, 1));
        assert_eq!(
            again.entries[b"f".as_slice()].hash,
            now.entries[b"f".as_slice()].hash
        );
        // The control: had the prior look been long after the change, it would be trusted.
        let old = forged(now.started_ns + 10 * RACY_MARGIN_NS);
        let trusted = scan(
            dir.path(),
            &Caps::default(),
            &key,
            Some(&mut Prior::Owned(old)),
        );
        assert_eq!((trusted.reused, trusted.read), (1, 0));
    }

    /// Enough files for the two stat threads, in names whose walk order is not their byte
    /// order (`d/x` before `d.txt`): the cut keeps exactly the first files of the walk,
    /// and a second scan reuses every one of them.
    #[test]
    fn a_threaded_walk_keeps_the_walk_order_and_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let mut all = Vec::new();
        for d in 0..12 {
            let sub = dir.path().join(format!("d{d:02}"));
            std::fs::create_dir(&sub).unwrap();
            for f in 0..150 {
                std::fs::write(sub.join(format!("f{f:03}")), format!("{d} {f}\n")).unwrap();
                all.push(format!("d{d:02}/f{f:03}").into_bytes());
            }
            std::fs::write(dir.path().join(format!("d{d:02}.txt")), "x\n").unwrap();
            all.push(format!("d{d:02}.txt").into_bytes());
        }
        all.sort_by(|a, b| walk_order(a, b));
        let cap = 1500;
        assert!(cap >= STAT_THREADED && all.len() > cap);
        let caps = Caps {
            files: cap,
            ..Caps::default()
        };
        let key = Key::random();
        let first = scan(dir.path(), &caps, &key, None);
        assert!(first.truncated);
        assert_eq!(first.read, cap as u64);
        let got: Vec<_> = first.entries.keys().map(<[u8]>::to_vec).collect();
        assert_eq!(got, all[..cap]);
        assert_eq!(first.last.as_deref(), Some(all[cap - 1].as_slice()));
        let e = &first.entries[b"d03/f007".as_slice()];
        assert_eq!(e.content_bytes(&key).as_deref(), Some(b"3 7\n".as_slice()));
        let mut aged = first;
        aged.started_ns += 10 * RACY_MARGIN_NS;
        let again = scan(dir.path(), &caps, &key, Some(&mut Prior::Owned(aged)));
        assert_eq!((again.reused, again.read), (cap as u64, 0));
    }

    /// The stat data taken on two threads, by runs of each directory's files (files
    /// before and after a subdirectory are two runs), are each file's own.
    #[test]
    fn stat_data_taken_on_two_threads_are_each_files_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut all = Vec::new();
        for d in 0..6 {
            for sub in ["", "/m", "/m/n"] {
                let at = format!("d{d}{sub}");
                std::fs::create_dir_all(dir.path().join(&at)).unwrap();
                // Names on both sides of the subdirectory `m` and `n`.
                for f in 0..300 {
                    let name = format!("{at}/{}{f:03}", if f % 2 == 0 { "a" } else { "z" });
                    std::fs::write(dir.path().join(&name), "x".repeat(f)).unwrap();
                    all.push(name);
                }
            }
        }
        assert!(all.len() > 4 * STAT_THREADED);
        let got = scan(dir.path(), &Caps::default(), &Key::random(), None);
        assert!(got.vanished.is_empty() && !got.truncated);
        assert_eq!(got.entries.len(), all.len());
        for name in &all {
            let meta = std::fs::symlink_metadata(dir.path().join(name)).unwrap();
            let entry = &got.entries[name.as_bytes()];
            assert_eq!((entry.ino, entry.size), (meta.ino(), meta.len()), "{name}");
        }
    }

    /// A listed directory opened again for its files' stat data must be the one the
    /// listing read: swapped since for a symlink to another directory, it is not used.
    #[test]
    fn a_directory_swapped_since_its_listing_is_not_opened_again() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let ident = |path: &Path| {
            let meta = std::fs::metadata(path).unwrap();
            Some((meta.dev(), meta.ino()))
        };
        let listed = ident(&root.join("a/b"));
        assert!(reopen_dir(root, b"a/b", listed).is_some());
        assert!(reopen_dir(root, b"", ident(root)).is_some());
        assert!(reopen_dir(root, b"a/b", None).is_none());
        std::fs::rename(root.join("a/b"), root.join("moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("a/b")).unwrap();
        assert!(reopen_dir(root, b"a/b", listed).is_none());
        std::fs::remove_file(root.join("a/b")).unwrap();
        std::fs::create_dir(root.join("a/b")).unwrap();
        assert!(reopen_dir(root, b"a/b", listed).is_none());
    }

    #[test]
    fn caps_bound_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("f{i}")), "x\n").unwrap();
        }
        let caps = Caps {
            files: 5,
            ..Caps::default()
        };
        let scan = scan(dir.path(), &caps, &Key::random(), None);
        assert!(scan.truncated);
        assert_eq!(scan.entries.len(), 5);
    }
}
