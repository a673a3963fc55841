//! A look into a git index file for entries git would take as unchanged without looking at
//! their file: "assume unchanged" (`CE_VALID`, set by `git update-index
//! --assume-unchanged` or under `core.ignoreStat`) and "skip worktree" (`git update-index
//! --skip-worktree`, sparse checkouts).
//!
//! The change ledger's git starts from a copy of the user's index, which the agent may
//! write: with those bits on an entry, `git add -A` never reads that file again, and the
//! agent's edits of it are reported unchanged, by that run or by any later one. Reading the
//! entries' flags here costs a few milliseconds for 100 000 entries; git is asked to clear
//! them (see `super::git`) only when some entry has one.
//!
//! The format (git's `Documentation/gitformat-index.txt`): a 12-byte header (`DIRC`,
//! version 2, 3 or 4, the number of entries), then the entries: 40 bytes of stat data, the
//! object id (20 or 32 bytes), 16 bits of flags (`0x8000` assume valid, `0x4000` extended,
//! the low 12 bits the name's length, `0xFFF` for "longer"), with version 3 and later 16
//! more bits when extended (`0x4000` skip worktree), then the name: NUL-padded to a multiple
//! of eight bytes in versions 2 and 3, prefix-compressed (a varint, then a NUL-terminated
//! rest) in version 4.

/// The flags word's "assume valid" bit.
const ASSUME_VALID: u16 = 0x8000;
/// The flags word's "an extended flags word follows" bit.
const EXTENDED: u16 = 0x4000;
/// The extended flags word's "skip worktree" bit.
const SKIP_WORKTREE: u16 = 0x4000;
/// The low bits of the flags word: the name's length, or this for "look for its NUL".
const NAME_MASK: u16 = 0x0fff;
/// The stat data at the start of every entry.
const STAT_LEN: usize = 40;

/// Whether any entry of `index` (the bytes of an index file whose object ids are
/// `hash_len` bytes long) is marked "assume unchanged" or "skip worktree"; `None` when the
/// bytes are not an index this reads (another version, cut short).
pub fn has_unlooked_entries(index: &[u8], hash_len: usize) -> Option<bool> {
    let mut found = false;
    each_entry(index, hash_len, |entry| {
        found = entry.flags & ASSUME_VALID != 0 || entry.extended & SKIP_WORKTREE != 0;
        !found
    })?;
    Some(found)
}

/// `index` with the stat data of every entry whose object id `forget` picks cleared (so
/// that git reads that file again rather than take the id from the entry), and its
/// trailing checksum made anew; `None` when the bytes are not an index this reads.
///
/// The change ledger keeps the index of a run's last snapshot for the next run. Its ids
/// of files the repository has no object for name objects of the run's private store,
/// which goes with the run: an entry git trusted by its stat data would name a blob the
/// next run cannot read.
pub fn forget_stat_of(
    index: &[u8],
    hash_len: usize,
    forget: impl Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    let mut out = index.to_vec();
    let mut cleared = Vec::new();
    each_entry(index, hash_len, |entry| {
        let oid = &index[entry.start + STAT_LEN..entry.start + STAT_LEN + hash_len];
        if forget(oid) {
            cleared.push(entry.start);
        }
        true
    })?;
    for start in cleared {
        // ctime, mtime, device and inode (the mode at 24 stays), and the size: a file
        // matches none of them.
        out[start..start + 24].fill(0);
        out[start + 36..start + STAT_LEN].fill(0);
    }
    let body = out.len().checked_sub(hash_len)?;
    let sum: Vec<u8> = match hash_len {
        20 => <sha1::Sha1 as sha1::Digest>::digest(&out[..body]).to_vec(),
        32 => <sha2::Sha256 as sha2::Digest>::digest(&out[..body]).to_vec(),
        _ => return None,
    };
    out[body..].copy_from_slice(&sum);
    Some(out)
}

/// Where one entry of an index lies, and its flags.
struct EntryAt {
    /// The offset of its stat data.
    start: usize,
    flags: u16,
    /// The extended flags word (0 when there is none).
    extended: u16,
}

/// Calls `visit` with every entry of `index` in turn, while it returns `true`; `None` when
/// the bytes are not an index this reads.
fn each_entry(
    index: &[u8],
    hash_len: usize,
    mut visit: impl FnMut(&EntryAt) -> bool,
) -> Option<()> {
    let header = index.get(..12)?;
    if &header[..4] != b"DIRC" || hash_len > 32 {
        return None;
    }
    let version = u32::from_be_bytes(header[4..8].try_into().ok()?);
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = u32::from_be_bytes(header[8..12].try_into().ok()?);
    let mut at = 12usize;
    for _ in 0..count {
        let start = at;
        let flags_at = start.checked_add(STAT_LEN + hash_len)?;
        let flags = u16::from_be_bytes(index.get(flags_at..flags_at + 2)?.try_into().ok()?);
        let mut name_at = flags_at + 2;
        let mut extended = 0;
        if version >= 3 && flags & EXTENDED != 0 {
            extended = u16::from_be_bytes(index.get(name_at..name_at + 2)?.try_into().ok()?);
            name_at += 2;
        }
        at = if version == 4 {
            // The varint of the bytes taken from the previous name, then the rest.
            let mut rest = name_at;
            while *index.get(rest)? & 0x80 != 0 {
                rest += 1;
            }
            rest += 1;
            rest + nul_from(index, rest)? + 1
        } else {
            let len = match flags & NAME_MASK {
                NAME_MASK => nul_from(index, name_at)?,
                len => usize::from(len),
            };
            // The entry, NUL-padded (at least one NUL) to a multiple of eight bytes.
            start + ((name_at - start + len + 8) & !7)
        };
        if at > index.len() {
            return None;
        }
        if !visit(&EntryAt {
            start,
            flags,
            extended,
        }) {
            break;
        }
    }
    Some(())
}

/// One entry of an index: its path (below the prefix asked for) and what it says of the
/// file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: Vec<u8>,
    /// 0, or 1 to 3 for the sides of a conflict.
    pub stage: u8,
    pub mode: u32,
    /// The object id, zero-padded to 32 bytes.
    pub oid: [u8; 32],
}

/// The entries of `index` (as [`has_unlooked_entries`] reads it) whose path starts with
/// `prefix`, that prefix cut, sorted by path and stage; `None` when the bytes are not an
/// index this reads.
///
/// The change ledger compares these, not the tree objects `git write-tree` names: a tree
/// that already exists in the repository is not written again, and the repository's
/// objects are the agent's to rewrite (`.git/objects` is writable): a "before" tree
/// rewritten to list the agent's new content made `git diff-tree` report the edit
/// unchanged. The index is coder's own, in its state directory.
pub fn entries(index: &[u8], hash_len: usize, prefix: &[u8]) -> Option<Vec<Entry>> {
    let header = index.get(..12)?;
    if &header[..4] != b"DIRC" || hash_len > 32 {
        return None;
    }
    let version = u32::from_be_bytes(header[4..8].try_into().ok()?);
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = u32::from_be_bytes(header[8..12].try_into().ok()?);
    let mut out = Vec::new();
    // The previous entry's whole name (version 4 names are told relative to it).
    let mut name: Vec<u8> = Vec::new();
    let mut at = 12usize;
    for _ in 0..count {
        let start = at;
        let mode_at = start.checked_add(24)?;
        let mode = u32::from_be_bytes(index.get(mode_at..mode_at + 4)?.try_into().ok()?);
        let mut oid = [0u8; 32];
        oid[..hash_len].copy_from_slice(index.get(start + STAT_LEN..start + STAT_LEN + hash_len)?);
        let flags_at = start + STAT_LEN + hash_len;
        let flags = u16::from_be_bytes(index.get(flags_at..flags_at + 2)?.try_into().ok()?);
        let stage = u8::try_from((flags >> 12) & 3).ok()?;
        let mut name_at = flags_at + 2;
        if version >= 3 && flags & EXTENDED != 0 {
            name_at += 2;
        }
        if version == 4 {
            // git's varint: seven bits a byte, high bit "more", each continuation adding one.
            let mut byte = *index.get(name_at)?;
            let mut strip = u64::from(byte & 0x7f);
            let mut rest = name_at + 1;
            while byte & 0x80 != 0 {
                byte = *index.get(rest)?;
                rest += 1;
                strip = strip.checked_add(1)?.checked_mul(128)? + u64::from(byte & 0x7f);
            }
            let keep = name.len().checked_sub(usize::try_from(strip).ok()?)?;
            let len = nul_from(index, rest)?;
            name.truncate(keep);
            name.extend_from_slice(&index[rest..rest + len]);
            at = rest + len + 1;
        } else {
            let len = match flags & NAME_MASK {
                NAME_MASK => nul_from(index, name_at)?,
                len => usize::from(len),
            };
            name.clear();
            name.extend_from_slice(index.get(name_at..name_at + len)?);
            at = start + ((name_at - start + len + 8) & !7);
        }
        if at > index.len() {
            return None;
        }
        if let Some(path) = name.strip_prefix(prefix) {
            out.push(Entry {
                path: path.to_vec(),
                stage,
                mode,
                oid,
            });
        }
    }
    // git writes them in this order; an index that is not is read all the same.
    out.sort_unstable_by(|a, b| (&a.path, a.stage).cmp(&(&b.path, b.stage)));
    Some(out)
}

/// The offset of the first NUL at or after `from`, relative to `from`.
fn nul_from(bytes: &[u8], from: usize) -> Option<usize> {
    bytes.get(from..)?.iter().position(|b| *b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// A repository with a few files indexed in `version`, and an entry whose name is
    /// longer than 0xFFF bytes (without its file: no path that long can be opened).
    fn repo(version: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        git(ws, &["init", "-q"]);
        git(ws, &["config", "index.version", version]);
        for name in ["a", "b.txt", "ccccccccccccccc", "d/e"] {
            let path = ws.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, name).unwrap();
        }
        git(ws, &["add", "-A"]);
        let long: Vec<String> = (0..45).map(|i| format!("{i:0>100}")).collect();
        let empty_blob = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391";
        git(ws, &["hash-object", "-w", "/dev/null"]);
        let info = format!("100644,{empty_blob},b/{}", long.join("/"));
        git(ws, &["update-index", "--add", "--cacheinfo", &info]);
        dir
    }

    fn look(dir: &Path) -> Option<bool> {
        has_unlooked_entries(&std::fs::read(dir.join(".git/index")).unwrap(), 20)
    }

    #[test]
    fn every_index_version_is_read_and_each_bit_is_found() {
        for version in ["2", "3", "4"] {
            for (bit, file) in [
                ("--assume-unchanged", "ccccccccccccccc"),
                ("--skip-worktree", "d/e"),
            ] {
                let dir = repo(version);
                assert_eq!(look(dir.path()), Some(false), "version {version}");
                git(dir.path(), &["update-index", bit, file]);
                git(
                    dir.path(),
                    &["update-index", &format!("--index-version={version}")],
                );
                assert_eq!(look(dir.path()), Some(true), "version {version} {bit}");
            }
        }
    }

    #[test]
    fn the_entries_of_every_version_are_what_git_lists() {
        for version in ["2", "3", "4"] {
            let dir = repo(version);
            git(dir.path(), &["update-index", "--skip-worktree", "d/e"]);
            let bytes = std::fs::read(dir.path().join(".git/index")).unwrap();
            let read: std::collections::BTreeMap<Vec<u8>, (u32, Vec<u8>)> =
                entries(&bytes, 20, b"")
                    .unwrap()
                    .into_iter()
                    .map(|e| (e.path, (e.mode, e.oid[..20].to_vec())))
                    .collect();
            let under_d = entries(&bytes, 20, b"d/").unwrap();
            assert_eq!(under_d.len(), 1, "version {version}");
            assert_eq!(under_d[0].path, b"e");
            let out = Command::new("git")
                .current_dir(dir.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .args(["ls-files", "-s", "-z"])
                .output()
                .unwrap();
            let listed: std::collections::BTreeMap<Vec<u8>, (u32, Vec<u8>)> = out
                .stdout
                .split(|b| *b == 0)
                .filter(|r| !r.is_empty())
                .map(|r| {
                    let text = String::from_utf8_lossy(r);
                    let (meta, path) = text.split_once('\t').unwrap();
                    let mut meta = meta.split(' ');
                    let mode = u32::from_str_radix(meta.next().unwrap(), 8).unwrap();
                    let oid = meta.next().unwrap();
                    let oid: Vec<u8> = (0..20)
                        .map(|i| u8::from_str_radix(&oid[2 * i..2 * i + 2], 16).unwrap())
                        .collect();
                    (path.as_bytes().to_vec(), (mode, oid))
                })
                .collect();
            assert_eq!(read, listed, "version {version}");
        }
    }

    #[test]
    fn what_is_not_an_index_is_not_read() {
        assert_eq!(has_unlooked_entries(b"", 20), None);
        assert_eq!(has_unlooked_entries(b"DIRC\0\0\0\x05\0\0\0\0", 20), None);
        // One entry announced, none there.
        assert_eq!(has_unlooked_entries(b"DIRC\0\0\0\x02\0\0\0\x01", 20), None);
        assert_eq!(
            has_unlooked_entries(b"DIRC\0\0\0\x02\0\0\0\0", 20),
            Some(false)
        );
    }
}
