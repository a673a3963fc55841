//! The snapshot of a workspace that is not in a git work tree: a bounded walk that records
//! each file's size, modification time and a keyed hash of its content, and keeps the
//! content of small text files so changed lines can be counted afterwards.
//!
//! The walk follows no symlink (a link is recorded by its target text) and stops at fixed
//! caps, so a huge or hostile tree costs bounded time and memory: past [`Caps::files`]
//! files the rest is not tracked and the ledger says `truncated`; past [`Caps::hash_bytes`]
//! bytes, files are compared by size and modification time only. The hash is keyed with a
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

use std::collections::BTreeMap;
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
    fn still_valid(&self, meta: &std::fs::Metadata, trusted_before_ns: i128) -> bool {
        self.dev == meta.dev()
            && self.ino == meta.ino()
            && self.size == meta.len()
            && self.mtime_ns == mtime_ns(meta)
            && self.ctime_ns == ctime_ns(meta)
            && self.mode == meta.mode() & 0o170111
            && self.mtime_ns < trusted_before_ns
            && self.ctime_ns < trusted_before_ns
    }

    /// Whether `other` (a later look at the same path) holds different content.
    pub fn differs(&self, other: &Entry) -> bool {
        match (self.hash, other.hash) {
            (Some(a), Some(b)) => a != b || self.mode != other.mode,
            _ => {
                self.size != other.size
                    || self.mtime_ns != other.mtime_ns
                    || self.mode != other.mode
            }
        }
    }
}

/// The files of a directory tree, by path relative to its root (bytes, `/`-separated).
#[derive(Debug, Default)]
pub struct Scan {
    pub entries: BTreeMap<Vec<u8>, Entry>,
    /// More files existed than the cap allows.
    pub truncated: bool,
    /// The last path scanned (in [`walk_order`]).
    pub last: Option<Vec<u8>>,
    /// When the walk started (ns since the epoch, the system clock).
    pub started_ns: i128,
    /// Files whose entry came from the prior scan / files read.
    pub reused: u64,
    pub read: u64,
}

/// A scan whose entries may be reused (see the module doc).
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
    /// owned scan whether or not it is still valid: no later look wants it).
    fn take_valid(&mut self, path: &[u8], meta: &std::fs::Metadata) -> Option<Entry> {
        let trusted = self.trusted_before_ns();
        match self {
            Prior::Owned(scan) => scan
                .entries
                .remove(path)
                .filter(|old| old.still_valid(meta, trusted)),
            Prior::Borrowed(scan) => scan
                .entries
                .get(path)
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
    let mut out = Scan {
        started_ns: now_ns(),
        ..Scan::default()
    };
    let mut walker = Walker {
        caps,
        key,
        prior,
        // Only files on the root's own file system are reused: another one mounted inside
        // may keep time by a clock of its own.
        root_dev: std::fs::symlink_metadata(root).map_or(u64::MAX, |m| m.dev()),
        budget: Budget {
            hash_left: caps.hash_bytes,
            keep_left: caps.keep_bytes,
        },
    };
    walker.walk(root, &[], &mut out, 0);
    out
}

/// Directories nested deeper than this are not entered (no real tree is that deep).
const MAX_DEPTH: usize = 256;

struct Walker<'a, 'p> {
    caps: &'a Caps,
    key: &'a Key,
    prior: Option<&'a mut Prior<'p>>,
    root_dev: u64,
    budget: Budget,
}

impl Walker<'_, '_> {
    /// Scans `rel` below `root`; `false` once the cap is reached.
    fn walk(&mut self, root: &Path, rel: &[u8], out: &mut Scan, depth: usize) -> bool {
        let dir = root.join(std::ffi::OsStr::from_bytes(rel));
        let Ok(read) = std::fs::read_dir(&dir) else {
            return true;
        };
        let mut names: Vec<_> = read.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for item in names {
            let mut path = rel.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(item.file_name().as_bytes());
            // Relative to the open directory (`fstatat`), never following a symlink.
            let Ok(meta) = item.metadata() else {
                continue;
            };
            let kind = meta.file_type();
            if kind.is_dir() {
                if depth < MAX_DEPTH && !self.walk(root, &path, out, depth + 1) {
                    return false;
                }
                continue;
            }
            if !kind.is_file() && !kind.is_symlink() {
                continue;
            }
            if out.entries.len() >= self.caps.files {
                out.truncated = true;
                return false;
            }
            let reused = self.reuse(&path, &meta);
            let entry = match reused {
                Some(entry) => {
                    out.reused += 1;
                    entry
                }
                None => {
                    out.read += 1;
                    look(&item.path(), &meta, self.caps, self.key, &mut self.budget)
                }
            };
            out.last = Some(path.clone());
            out.entries.insert(path, entry);
        }
        true
    }

    /// The prior scan's entry for `path`, when the file is unchanged since and the entry
    /// holds what reading the file now would give within the budgets (which are charged
    /// as if it had been read).
    fn reuse(&mut self, path: &[u8], meta: &std::fs::Metadata) -> Option<Entry> {
        let prior = self.prior.as_deref_mut()?;
        if meta.dev() != self.root_dev {
            return None;
        }
        let mut entry = prior.take_valid(path, meta)?;
        if meta.file_type().is_symlink() {
            return Some(entry);
        }
        let size = entry.size;
        if size > self.budget.hash_left {
            // Past the hashing budget: compared by stat data only, as a fresh look would.
            entry.hash = None;
            entry.binary = false;
            entry.lines = None;
            entry.content = None;
            return Some(entry);
        }
        entry.hash?;
        let keep =
            !entry.binary && size <= self.caps.keep_file_bytes && size <= self.budget.keep_left;
        if keep && entry.kept_len() != Some(size) {
            return None;
        }
        self.budget.hash_left -= size;
        if keep {
            self.budget.keep_left -= size;
        } else {
            entry.content = None;
        }
        Some(entry)
    }
}

/// The order of the walk: path components compared one by one.
pub fn walk_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.split(|c| *c == b'/').cmp(b.split(|c| *c == b'/'))
}

struct Budget {
    hash_left: u64,
    keep_left: u64,
}

fn look(
    path: &Path,
    meta: &std::fs::Metadata,
    caps: &Caps,
    key: &Key,
    budget: &mut Budget,
) -> Entry {
    let mut entry = Entry {
        size: meta.len(),
        mtime_ns: mtime_ns(meta),
        mode: meta.mode() & 0o170111,
        dev: meta.dev(),
        ino: meta.ino(),
        ctime_ns: ctime_ns(meta),
        hash: None,
        binary: false,
        lines: None,
        content: None,
    };
    if meta.file_type().is_symlink() {
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
    if file.take(budget.hash_left).read_to_end(&mut bytes).is_err() {
        return entry;
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

fn mtime_ns(meta: &std::fs::Metadata) -> i128 {
    i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec())
}

fn ctime_ns(meta: &std::fs::Metadata) -> i128 {
    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
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
            entries: BTreeMap::from([(b"f".to_vec(), stale.clone())]),
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
