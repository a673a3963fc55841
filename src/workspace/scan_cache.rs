//! The persistent cache of a plain workspace's scan, so that a run's "before" snapshot
//! reads only the files that changed since the last run (see [`super::scan::Prior`]).
//!
//! One file per workspace, `<state>/ledger/<id>.cache` (the id a hash of the workspace's
//! canonical path), owner-only, in coder's state directory: outside the workspace and
//! never granted to the agent, since it holds the hash key (the caller removes it when a
//! run's sandbox could reach it, so a key the agent may have read is never used again).
//! It holds, per file, the stat data git's index keeps (device, inode, size, modification
//! and change times, mode), the keyed hash, line count and binary flag, and the kept
//! content of small text files, read back only for files that turn out changed.
//!
//! The file is written whole to a temporary name and renamed, so a reader sees one
//! complete version. A file that is not exactly what was written (wrong magic or
//! version, another workspace's path, a bad checksum of the header and entries, a wrong
//! length) is ignored and the scan reads everything. Each stored content is checked
//! against its entry's keyed hash when it is read. The cache is used only on file
//! systems whose timestamps come from this kernel's clock (the racy rule compares them
//! with it); elsewhere every file is read, as before.
//!
//! The head (10 MB at 100k files) is parsed from a read-only mapping of the file
//! ([`Mapped`]), not read into fresh memory: its load is on the warm "before" snapshot's
//! path, and copying it cost a sixth of the load (the copy and the page faults of 10 MB of
//! new memory). A mapped file that shrinks under its reader kills it (`SIGBUS`); this one
//! never does: coder replaces it only by renaming a new file over it and removes it only
//! by unlinking, and no agent can reach it (it is owner-only in coder's state directory,
//! and removed when a run's sandbox could reach it: an agent that could write it could
//! also signal coder). Where the mapping is refused, the head is read as before.

use std::hash::Hasher;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::scan::{Content, Dir, Entries, Entry, Key, Scan};
use crate::le_reader::LeReader;

const MAGIC: &[u8; 16] = b"coder-ledger\0v2\n";
/// The buffer the cache's kept contents are written through (see [`CacheFile::store`]).
const STORE_BUFFER_BYTES: usize = 256 * 1024;

/// Entries held at most (a larger file is not a cache this coder wrote).
const MAX_ENTRIES: u64 = 10_000_000;

/// Where a workspace's cache lives, and which workspace it is for.
#[derive(Debug, Clone)]
pub struct CacheFile {
    path: PathBuf,
    /// The workspace's canonical path, as recorded in the file.
    workspace: Vec<u8>,
}

/// A loaded cache: its entries (contents left in the file) and its key.
pub struct Loaded {
    pub scan: Scan,
    pub key: Key,
}

impl CacheFile {
    /// The cache of `workspace` (canonical) under `state_dir`; `None` when the workspace's
    /// file system keeps time by a clock of its own (network and FUSE file systems).
    pub fn for_workspace(state_dir: &Path, workspace: &Path) -> Option<CacheFile> {
        if !local_clock(workspace) {
            return None;
        }
        let bytes = workspace.as_os_str().as_bytes().to_vec();
        let mut id = siphasher::sip::SipHasher13::new_with_keys(0, 0);
        id.write(&bytes);
        Some(CacheFile {
            path: state_dir
                .join("ledger")
                .join(format!("{:016x}.cache", id.finish())),
            workspace: bytes,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cache's entries and key, or `None` when there is no usable cache.
    pub fn load(&self) -> Option<Loaded> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
            .ok()?;
        let meta = file.metadata().ok()?;
        // coder's own file, as it writes it.
        if !meta.is_file() || meta.mode() & 0o077 != 0 || meta.uid() != current_uid() {
            return None;
        }
        // The header and entries only; the contents stay in the file until needed.
        let mut prefix = [0u8; MAGIC.len() + 8];
        file.read_exact(&mut prefix).ok()?;
        if prefix[..MAGIC.len()] != MAGIC[..] {
            return None;
        }
        let head_len = u64::from_le_bytes(prefix[MAGIC.len()..].try_into().ok()?);
        if head_len > meta.len() || head_len < prefix.len() as u64 {
            return None;
        }
        let head_len = usize::try_from(head_len).ok()?;
        if let Some(head) = Mapped::of(&file, head_len) {
            let file = Arc::new(file);
            return parse(head.bytes(), meta.len(), &self.workspace, &file);
        }
        let mut head = Vec::with_capacity(head_len);
        head.extend_from_slice(&prefix);
        (&mut file)
            .take((head_len - prefix.len()) as u64)
            .read_to_end(&mut head)
            .ok()?;
        let file = Arc::new(file);
        parse(&head, meta.len(), &self.workspace, &file)
    }

    /// Writes `scan` (taken with `key`) as the cache, replacing the old one whole.
    pub fn store(&self, scan: &Scan, key: &Key) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let (head, blobs) = encode(scan, key, &self.workspace);
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let written = (|| {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            // The kept contents are small files' (one blob each, 100k of them at 100k
            // files): written through a buffer, a few hundred system calls, not one each.
            let mut out = std::io::BufWriter::with_capacity(STORE_BUFFER_BYTES, file);
            out.write_all(&head)?;
            for blob in blobs {
                out.write_all(&blob)?;
            }
            out.flush()?;
            drop(out);
            std::fs::rename(&tmp, &self.path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Removes the cache (its key may have been seen).
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The first bytes of a file, mapped read-only (see the module doc for why, and why the
/// file cannot shrink under it); unmapped when dropped.
struct Mapped {
    at: std::ptr::NonNull<libc::c_void>,
    len: usize,
}

impl Mapped {
    /// The first `len` bytes of `file` (no longer than it), with every page mapped now
    /// (`MAP_POPULATE`: one call instead of a fault per page); `None` when the mapping is
    /// refused.
    fn of(file: &std::fs::File, len: usize) -> Option<Mapped> {
        use std::os::fd::AsRawFd;
        if len == 0 {
            return None;
        }
        // SAFETY: a new private, read-only mapping of `len` bytes of an open file, at an
        // address the kernel picks; it aliases no memory of this process.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return None;
        }
        Some(Mapped {
            at: std::ptr::NonNull::new(at)?,
            len,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, mapped until `self` is dropped,
        // within the file's length when it was mapped, and the file is never written in
        // place nor shortened (the module doc says why).
        unsafe { std::slice::from_raw_parts(self.at.as_ptr().cast::<u8>(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `of` made, which no borrow outlives (`bytes`
        // borrows `self`).
        unsafe {
            libc::munmap(self.at.as_ptr(), self.len);
        }
    }
}

fn current_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Whether the file system of `path` stamps times with this kernel's clock.
pub fn local_clock(path: &Path) -> bool {
    const LOCAL: [i64; 8] = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // f2fs
        0x794C_7630, // overlayfs
        0x2FC1_2FC1, // zfs
        0xCA45_1A4E, // bcachefs
    ];
    nix::sys::statfs::statfs(path).is_ok_and(|fs| {
        #[allow(clippy::unnecessary_cast)] // the field's type differs between targets
        let kind = fs.filesystem_type().0 as i64;
        LOCAL.contains(&kind)
    })
}

// ---- The format: all integers little-endian.
// MAGIC, u64 length of this head (up to and including the checksum), u32 workspace
// length, workspace, key (2 x u64), i64 scan start (ns), u64 entry count, the entries (in
// walk order, `scan::walk_order`), u64 blob bytes, u64 checksum (of everything before
// it), the blobs. Since v2, between the entries and the blob bytes: u64 directory count,
// the directories walked whole (`scan::Dir::whole`, in walk order): u32 path length,
// path, u64 dev, u64 ino, i64 ctime (ns).
// An entry: u32 path length, path, u64 size, i64 mtime, i64 ctime (ns), u32 mode, u64 dev,
// u64 ino, u8 flags (1 hash, 2 binary, 4 lines, 8 content), u64 hash, u64 lines, u64
// content length (its bytes follow the previous entry's in the blob area).

/// An entry's bytes besides its path.
const ENTRY_FIXED: usize = 4 + 8 * 3 + 4 + 8 * 2 + 1 + 8 * 3;

const HAS_HASH: u8 = 1;
const BINARY: u8 = 2;
const HAS_LINES: u8 = 4;
const HAS_CONTENT: u8 = 8;

/// The head's checksum, which catches a damaged or cut file (the cache is coder's own, in
/// its private state directory: there is no forger to resist, and a public key would not
/// resist one anyway). xxHash64's round on four lanes of 8-byte words (not its exact
/// output): a 10 MB head in about 1 ms, where SipHash took 6 on the snapshot's path.
fn checksum(bytes: &[u8]) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P3: u64 = 0x1656_67B1_9E37_79F9;
    let round = |acc: u64, word: u64| {
        acc.wrapping_add(word.wrapping_mul(P2))
            .rotate_left(31)
            .wrapping_mul(P1)
    };
    let word = |at: &[u8]| {
        let mut w = [0u8; 8];
        w[..at.len().min(8)].copy_from_slice(&at[..at.len().min(8)]);
        u64::from_le_bytes(w)
    };
    let mut lanes = [P1.wrapping_add(P2), P2, 0, P1.wrapping_neg()];
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = round(*lane, word(&block[i * 8..]));
        }
    }
    let mut h = lanes
        .iter()
        .enumerate()
        .fold(bytes.len() as u64, |h, (i, lane)| {
            (h ^ round(0, *lane))
                .rotate_left(27 + i as u32)
                .wrapping_mul(P1)
                .wrapping_add(P3)
        });
    for tail in blocks.remainder().chunks(8) {
        h = (h ^ round(0, word(tail)))
            .rotate_left(27)
            .wrapping_mul(P1)
            .wrapping_add(P3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

fn encode(scan: &Scan, key: &Key, workspace: &[u8]) -> (Vec<u8>, Vec<Arc<[u8]>>) {
    // Exactly the head's size (entries that are left out make it smaller).
    let path_bytes: usize = scan.entries.keys().map(<[u8]>::len).sum();
    let mut out = Vec::with_capacity(
        MAGIC.len() + 60 + workspace.len() + path_bytes + scan.entries.len() * ENTRY_FIXED,
    );
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(workspace.len() as u32).to_le_bytes());
    out.extend_from_slice(workspace);
    out.extend_from_slice(&key.0[0].to_le_bytes());
    out.extend_from_slice(&key.0[1].to_le_bytes());
    out.extend_from_slice(&(scan.started_ns as i64).to_le_bytes());
    let mut blobs = Vec::new();
    let mut blob_bytes: u64 = 0;
    let mut count: u64 = 0;
    let count_at = out.len();
    out.extend_from_slice(&0u64.to_le_bytes());
    // Stored contents of one old cache file, read once when first needed.
    let mut old: Option<(Arc<std::fs::File>, Vec<u8>)> = None;
    // The directories of entries left out: a later scan must list them again, or it would
    // not see those files at all.
    let mut left_out: Vec<&[u8]> = Vec::new();
    for (path, entry) in scan.entries.iter() {
        let Some(content) = kept_content(entry, key, &mut old) else {
            left_out.push(parent_of(path));
            continue;
        };
        if !write_entry(&mut out, path, entry, content.as_deref()) {
            left_out.push(parent_of(path));
            continue;
        }
        if let Some(content) = content {
            blob_bytes += content.len() as u64;
            blobs.push(content);
        }
        count += 1;
    }
    out[count_at..count_at + 8].copy_from_slice(&count.to_le_bytes());
    left_out.sort_unstable();
    left_out.dedup();
    write_dirs(&mut out, scan, &left_out);
    out.extend_from_slice(&blob_bytes.to_le_bytes());
    let head_len = out.len() as u64 + 8;
    out[MAGIC.len()..MAGIC.len() + 8].copy_from_slice(&head_len.to_le_bytes());
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    (out, blobs)
}

/// The directory part of a relative `path` ("" at the top).
fn parent_of(path: &[u8]) -> &[u8] {
    path.iter()
        .rposition(|b| *b == b'/')
        .map_or(&path[..0], |at| &path[..at])
}

/// The content `entry` keeps for the next scan (`Some(None)`: none), or `None` when the
/// entry must be left out: its stored content in an old cache file is not what was hashed,
/// so the next scan reads the file again.
fn kept_content(
    entry: &Entry,
    key: &Key,
    old: &mut Option<(Arc<std::fs::File>, Vec<u8>)>,
) -> Option<Option<Arc<[u8]>>> {
    match &entry.content {
        None => Some(None),
        Some(Content::Bytes(bytes)) => Some(Some(bytes.clone())),
        Some(Content::Stored { file, offset, len }) => match stored(old, file, *offset, *len) {
            Some(bytes) if Some(super::scan::hash(key, &bytes)) == entry.hash => Some(Some(bytes)),
            _ => None,
        },
    }
}

/// Appends one entry's record (its content goes to the blob area after the head); false,
/// with nothing written, when a field does not fit the format (the entry is left out).
fn write_entry(out: &mut Vec<u8>, path: &[u8], entry: &Entry, content: Option<&[u8]>) -> bool {
    let (Ok(mtime), Ok(ctime), Ok(path_len)) = (
        i64::try_from(entry.mtime_ns),
        i64::try_from(entry.ctime_ns),
        u32::try_from(path.len()),
    ) else {
        return false;
    };
    let mut flags = 0;
    for (set, flag) in [
        (entry.hash.is_some(), HAS_HASH),
        (entry.binary, BINARY),
        (entry.lines.is_some(), HAS_LINES),
        (content.is_some(), HAS_CONTENT),
    ] {
        if set {
            flags |= flag;
        }
    }
    out.extend_from_slice(&path_len.to_le_bytes());
    out.extend_from_slice(path);
    out.extend_from_slice(&entry.size.to_le_bytes());
    out.extend_from_slice(&mtime.to_le_bytes());
    out.extend_from_slice(&ctime.to_le_bytes());
    out.extend_from_slice(&entry.mode.to_le_bytes());
    out.extend_from_slice(&entry.dev.to_le_bytes());
    out.extend_from_slice(&entry.ino.to_le_bytes());
    out.push(flags);
    out.extend_from_slice(&entry.hash.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&entry.lines.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&content.map_or(0, |c| c.len() as u64).to_le_bytes());
    true
}

/// Appends the directories listed whole, but those holding an entry that was left out
/// (`left_out`, sorted): a later scan must list them again.
fn write_dirs(out: &mut Vec<u8>, scan: &Scan, left_out: &[&[u8]]) {
    let dirs: Vec<(&Dir, i64, u32)> = scan
        .dirs
        .iter()
        .filter(|dir| dir.whole && left_out.binary_search(&&dir.path[..]).is_err())
        .filter_map(|dir| {
            Some((
                dir,
                i64::try_from(dir.ctime_ns).ok()?,
                u32::try_from(dir.path.len()).ok()?,
            ))
        })
        .collect();
    out.extend_from_slice(&(dirs.len() as u64).to_le_bytes());
    for (dir, ctime, path_len) in dirs {
        out.extend_from_slice(&path_len.to_le_bytes());
        out.extend_from_slice(&dir.path);
        out.extend_from_slice(&dir.dev.to_le_bytes());
        out.extend_from_slice(&dir.ino.to_le_bytes());
        out.extend_from_slice(&ctime.to_le_bytes());
    }
}

/// A stored content of an old cache file, from its blob area read whole once.
fn stored(
    old: &mut Option<(Arc<std::fs::File>, Vec<u8>)>,
    file: &Arc<std::fs::File>,
    offset: u64,
    len: u64,
) -> Option<Arc<[u8]>> {
    let fresh = !old.as_ref().is_some_and(|(f, _)| Arc::ptr_eq(f, file));
    if fresh {
        let size = file.metadata().ok()?.len();
        let mut all = vec![0u8; usize::try_from(size).ok()?];
        file.read_exact_at(&mut all, 0).ok()?;
        *old = Some((file.clone(), all));
    }
    let (_, all) = old.as_ref()?;
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    all.get(start..end).map(Arc::from)
}

fn parse(
    bytes: &[u8],
    file_len: u64,
    workspace: &[u8],
    file: &Arc<std::fs::File>,
) -> Option<Loaded> {
    let mut r = LeReader::new(bytes);
    if r.take(MAGIC.len())? != MAGIC {
        return None;
    }
    r.u64()?;
    let ws_len = r.u32()? as usize;
    if r.take(ws_len)? != workspace {
        return None;
    }
    let key = Key([r.u64()?, r.u64()?]);
    let started_ns = i128::from(r.i64()?);
    let count = r.u64()?;
    if count > MAX_ENTRIES {
        return None;
    }
    // The head ends with the blob area's size and the checksum of everything before it:
    // checked first, so the entries are parsed once, straight into the map.
    let entries_end = bytes.len().checked_sub(16)?;
    let sum_at = entries_end + 8;
    let blob_bytes = u64::from_le_bytes(bytes.get(entries_end..sum_at)?.try_into().ok()?);
    let sum = u64::from_le_bytes(bytes.get(sum_at..)?.try_into().ok()?);
    if entries_end < r.position() || checksum(&bytes[..sum_at]) != sum {
        return None;
    }
    // The blobs follow the head, in entry order.
    let blobs_start = bytes.len() as u64;
    if blobs_start.checked_add(blob_bytes)? != file_len {
        return None;
    }
    let mut offset = blobs_start;
    // The file holds them in walk order, the scan's own: appended as they come, and a
    // file out of that order is not used.
    let count = usize::try_from(count).ok()?;
    let path_bytes = bytes
        .len()
        .saturating_sub(count.saturating_mul(ENTRY_FIXED));
    let mut entries = Entries::with_capacity(count.min(1 << 20), path_bytes.min(64 << 20));
    for _ in 0..count {
        let (path, entry) = read_entry(&mut r, file, file_len, &mut offset)?;
        if !entries.push(path, entry) {
            return None;
        }
    }
    let dirs = read_dirs(&mut r)?;
    if r.position() != entries_end {
        return None;
    }
    Some(Loaded {
        scan: Scan {
            entries,
            dirs,
            started_ns,
            ..Scan::default()
        },
        key,
    })
}

/// One entry's record; its content (if any) is at `offset` in the blob area, which moves
/// past it. `None` when the record is cut short or its content runs past the file.
fn read_entry<'a>(
    r: &mut LeReader<'a>,
    file: &Arc<std::fs::File>,
    file_len: u64,
    offset: &mut u64,
) -> Option<(&'a [u8], Entry)> {
    let path_len = r.u32()? as usize;
    let path = r.take(path_len)?;
    let size = r.u64()?;
    let mtime_ns = i128::from(r.i64()?);
    let ctime_ns = i128::from(r.i64()?);
    let mode = r.u32()?;
    let dev = r.u64()?;
    let ino = r.u64()?;
    let flags = r.u8()?;
    let hash = r.u64()?;
    let lines = r.u64()?;
    let content_len = r.u64()?;
    let content = if flags & HAS_CONTENT != 0 {
        let end = offset.checked_add(content_len)?;
        if end > file_len {
            return None;
        }
        let stored = Content::Stored {
            file: file.clone(),
            offset: *offset,
            len: content_len,
        };
        *offset = end;
        Some(stored)
    } else {
        None
    };
    let entry = Entry {
        size,
        mtime_ns,
        mode,
        dev,
        ino,
        ctime_ns,
        hash: (flags & HAS_HASH != 0).then_some(hash),
        binary: flags & BINARY != 0,
        lines: (flags & HAS_LINES != 0).then_some(lines),
        content,
    };
    Some((path, entry))
}

/// The directories listed whole, each once and in walk order (the walk beside them relies
/// on it); `None` otherwise.
fn read_dirs(r: &mut LeReader<'_>) -> Option<Vec<Dir>> {
    let dir_count = r.u64()?;
    if dir_count > MAX_ENTRIES {
        return None;
    }
    let mut dirs: Vec<Dir> = Vec::with_capacity(usize::try_from(dir_count).ok()?.min(1 << 16));
    for _ in 0..dir_count {
        let path_len = r.u32()? as usize;
        let path = r.take(path_len)?.to_vec();
        let dir = Dir {
            path,
            dev: r.u64()?,
            ino: r.u64()?,
            ctime_ns: i128::from(r.i64()?),
            whole: true,
        };
        if dirs
            .last()
            .is_some_and(|last| !super::scan::walk_order(&last.path, &dir.path).is_lt())
        {
            return None;
        }
        dirs.push(dir);
    }
    Some(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::scan::{Caps, Prior, scan};

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let state = dir.path().join("state");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::write(ws.join("b.bin"), b"\0\x01\x02").unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/c.txt"), "three\n").unwrap();
        let ws = std::fs::canonicalize(&ws).unwrap();
        (dir, ws, state)
    }

    /// A scan whose start is well past every file's times, as if taken later.
    fn aged(mut scan: Scan) -> Scan {
        scan.started_ns += 10 * super::super::scan::RACY_MARGIN_NS;
        scan
    }

    /// The directories walked whole are kept, in walk order; one of a file the cache
    /// leaves out is not (a later walk taking its entries would miss that file).
    #[test]
    fn whole_directories_are_kept_unless_a_file_of_theirs_is_left_out() {
        let (_dir, ws, state) = setup();
        std::fs::create_dir(ws.join("sub/deeper")).unwrap();
        let key = Key::random();
        let first = aged(scan(&ws, &Caps::default(), &key, None));
        let cache = CacheFile::for_workspace(&state, &ws).unwrap();
        cache.store(&first, &key).unwrap();
        let loaded = cache.load().unwrap();
        assert_eq!(loaded.scan.dirs, first.dirs);
        assert_eq!(loaded.scan.dirs.len(), 3);

        // A modification time past what the file holds: `sub/c.txt` is left out.
        let mut odd = aged(scan(&ws, &Caps::default(), &key, None));
        let entries: Entries = odd
            .entries
            .iter()
            .map(|(path, entry)| {
                let mut entry = entry.clone();
                if path == b"sub/c.txt" {
                    entry.mtime_ns = i128::MAX;
                }
                (path.to_vec(), entry)
            })
            .collect();
        odd.entries = entries;
        cache.store(&odd, &key).unwrap();
        let loaded = cache.load().unwrap();
        assert!(!loaded.scan.entries.contains_key(b"sub/c.txt"));
        let kept: Vec<&[u8]> = loaded.scan.dirs.iter().map(|d| &d.path[..]).collect();
        assert_eq!(kept, [&b""[..], b"sub/deeper"]);
    }

    #[test]
    fn a_stored_scan_loads_back_with_its_key_and_contents() {
        let (_dir, ws, state) = setup();
        let key = Key::random();
        let first = aged(scan(&ws, &Caps::default(), &key, None));
        let cache = CacheFile::for_workspace(&state, &ws).unwrap();
        cache.store(&first, &key).unwrap();
        let mode = std::fs::metadata(cache.path()).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        let loaded = cache.load().unwrap();
        assert_eq!(loaded.key, key);
        assert_eq!(loaded.scan.entries.len(), 3);
        let a = &loaded.scan.entries[b"a.txt".as_slice()];
        assert_eq!(
            a.content_bytes(&key).as_deref(),
            Some(b"one\ntwo\n".as_slice())
        );
        assert_eq!(a.lines, Some(2));
        assert!(loaded.scan.entries[b"b.bin".as_slice()].binary);

        let mut prior = Prior::Owned(loaded.scan);
        let second = scan(&ws, &Caps::default(), &key, Some(&mut prior));
        assert_eq!((second.reused, second.read), (3, 0));
        // Stored again from stored contents: still the same.
        cache.store(&aged(second), &key).unwrap();
        let again = cache.load().unwrap();
        let c = &again.scan.entries[b"sub/c.txt".as_slice()];
        assert_eq!(
            c.content_bytes(&key).as_deref(),
            Some(b"three\n".as_slice())
        );
    }

    /// Every one-bit flip, in the blocks of 32 bytes and in the tail, and every cut or
    /// added zero byte, changes the checksum.
    #[test]
    fn the_checksum_sees_each_flipped_bit_and_each_length() {
        let bytes: Vec<u8> = (0..101u32).map(|i| (i * 37 % 251) as u8).collect();
        let sum = checksum(&bytes);
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[at] ^= 1 << bit;
                assert_ne!(checksum(&bad), sum, "byte {at} bit {bit}");
            }
        }
        let mut seen = std::collections::HashSet::new();
        for len in 0..bytes.len() {
            assert!(seen.insert(checksum(&bytes[..len])), "length {len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_ne!(checksum(&longer), sum);
    }

    #[test]
    fn a_damaged_or_foreign_cache_is_not_used() {
        let (_dir, ws, state) = setup();
        let key = Key::random();
        let first = aged(scan(&ws, &Caps::default(), &key, None));
        let cache = CacheFile::for_workspace(&state, &ws).unwrap();
        cache.store(&first, &key).unwrap();
        let good = std::fs::read(cache.path()).unwrap();
        let put = |bytes: &[u8]| {
            std::fs::remove_file(cache.path()).unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(cache.path())
                .unwrap()
                .write_all(bytes)
                .unwrap();
        };
        // Truncated anywhere, or one bit flipped in the header or an entry.
        for cut in [0, 10, good.len() / 2, good.len() - 1] {
            put(&good[..cut]);
            assert!(cache.load().is_none(), "cut at {cut}");
        }
        for at in [20, good.len() / 2] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            put(&bad);
            assert!(cache.load().is_none(), "bit flipped at {at}");
        }
        // Longer than written.
        let mut long = good.clone();
        long.push(0);
        put(&long);
        assert!(cache.load().is_none());
        // A copy of another workspace's cache.
        let other = ws.parent().unwrap().join("other");
        std::fs::create_dir(&other).unwrap();
        let other = CacheFile::for_workspace(&state, &other).unwrap();
        std::fs::copy(cache.path(), other.path()).unwrap();
        put(&good);
        assert!(other.load().is_none());
        assert!(cache.load().is_some());
        // Readable by others: not coder's own.
        std::fs::set_permissions(
            cache.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        assert!(cache.load().is_none());
    }

    #[test]
    fn a_stored_content_that_does_not_match_its_hash_is_not_used() {
        let (_dir, ws, state) = setup();
        let key = Key::random();
        let first = aged(scan(&ws, &Caps::default(), &key, None));
        let cache = CacheFile::for_workspace(&state, &ws).unwrap();
        cache.store(&first, &key).unwrap();
        let mut bytes = std::fs::read(cache.path()).unwrap();
        // The blob area is the file's tail: "one\ntwo\n" then "three\n".
        let n = bytes.len();
        bytes[n - 1] = b'X';
        std::fs::write(cache.path(), &bytes).unwrap();
        let loaded = cache.load().unwrap();
        let c = &loaded.scan.entries[b"sub/c.txt".as_slice()];
        assert_eq!(c.content_bytes(&key), None);
        // Stored again, the damaged file is left out (the next scan reads it).
        cache.store(&loaded.scan, &key).unwrap();
        let again = cache.load().unwrap();
        assert!(!again.scan.entries.contains_key(b"sub/c.txt".as_slice()));
        assert!(again.scan.entries.contains_key(b"a.txt".as_slice()));
    }

    /// The mapping holds the file's first bytes, as many as asked for, and keeps them
    /// after the file is replaced by a rename (as `store` replaces it); nothing is mapped
    /// for no bytes.
    #[test]
    fn a_mapped_head_is_the_files_first_bytes_and_outlives_a_rename_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("head");
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let head = Mapped::of(&file, 12_345).unwrap();
        let newer = dir.path().join("newer");
        std::fs::write(&newer, vec![7u8; 20_000]).unwrap();
        std::fs::rename(&newer, &path).unwrap();
        assert_eq!(head.bytes(), &bytes[..12_345]);
        assert!(Mapped::of(&file, 0).is_none());
    }
}
