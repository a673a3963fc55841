//! The snapshot of a workspace that is not in a git work tree: a bounded walk that records
//! each file's size, modification time and a keyed hash of its content, and keeps the
//! content of small text files so changed lines can be counted afterwards.
//!
//! The walk follows no symlink (a link is recorded by its target text) and stops at fixed
//! caps, so a huge or hostile tree costs bounded time and memory: past [`Caps::files`]
//! files the rest is not tracked and the ledger says `truncated`; past [`Caps::hash_bytes`]
//! bytes, files are compared by size and modification time only. The hash is keyed with a
//! key chosen at random per run, so the agent cannot craft a change that hashes the same.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

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
    /// Keyed hash of the content; `None` past the hashing budget.
    pub hash: Option<u64>,
    pub binary: bool,
    /// Number of lines, when the whole file was read.
    pub lines: Option<u64>,
    /// The content, for small text files within the budget.
    pub content: Option<Arc<[u8]>>,
}

impl Entry {
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
}

/// The hash key of a run: both scans of one ledger must use the same one.
#[derive(Debug, Clone)]
pub struct Key(std::hash::RandomState);

impl Key {
    pub fn random() -> Key {
        Key(std::hash::RandomState::new())
    }
}

/// Walks `root` within `caps`, depth first in name order, so that a cut scan holds every
/// path up to its last one in [`walk_order`] and none after it.
pub fn scan(root: &Path, caps: &Caps, key: &Key) -> Scan {
    let mut out = Scan::default();
    let mut budget = Budget {
        hash_left: caps.hash_bytes,
        keep_left: caps.keep_bytes,
    };
    walk(root, &[], caps, key, &mut budget, &mut out, 0);
    out
}

/// Directories nested deeper than this are not entered (no real tree is that deep).
const MAX_DEPTH: usize = 256;

/// Scans `rel` below `root`; `false` once the cap is reached.
fn walk(
    root: &Path,
    rel: &[u8],
    caps: &Caps,
    key: &Key,
    budget: &mut Budget,
    out: &mut Scan,
    depth: usize,
) -> bool {
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
        let Ok(meta) = std::fs::symlink_metadata(item.path()) else {
            continue;
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            if depth < MAX_DEPTH && !walk(root, &path, caps, key, budget, out, depth + 1) {
                return false;
            }
            continue;
        }
        if !kind.is_file() && !kind.is_symlink() {
            continue;
        }
        if out.entries.len() >= caps.files {
            out.truncated = true;
            return false;
        }
        let entry = look(&item.path(), &meta, caps, key, budget);
        out.last = Some(path.clone());
        out.entries.insert(path, entry);
    }
    true
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
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        mode: meta.mode() & 0o170111,
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
    let Ok(file) = std::fs::File::open(path) else {
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
            entry.content = Some(bytes.into());
        }
    }
    entry
}

fn hash(key: &Key, bytes: &[u8]) -> u64 {
    let mut hasher = key.0.build_hasher();
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
        let scan = scan(dir.path(), &caps, &Key::random());
        assert!(scan.truncated);
        assert_eq!(scan.entries.len(), 5);
    }
}
