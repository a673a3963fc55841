//! The index of each work tree's last snapshot, kept in coder's state directory so the
//! next snapshot re-hashes only files whose stat data changed ([`KeptIndex`]); the
//! least recently stored go first.

use std::path::{Path, PathBuf};

use super::objects::hex;

/// How many work trees' indexes are kept; the least recently stored go first.
pub(super) const KEPT_INDEXES: usize = 64;

/// Where the ledger keeps the index of one work tree's last snapshot (see
/// [`GitRepo::keep_index`](crate::workspace::git::GitRepo::keep_index)): `<state>/ledger-index/<key>.index`, and each nested part's as
/// `<key>.<part key>.index`; the key is a hash of the workspace's and the git dir's
/// canonical paths.
#[derive(Debug)]
pub(super) struct KeptIndex {
    pub(super) dir: PathBuf,
    pub(super) key: String,
}

impl KeptIndex {
    pub(super) fn of(state_dir: &Path, workspace: &Path, git_dir: &Path) -> Option<KeptIndex> {
        use sha2::Digest;
        let workspace = std::fs::canonicalize(workspace).ok()?;
        let git_dir = std::fs::canonicalize(git_dir).ok()?;
        let mut hasher = sha2::Sha256::new();
        hasher.update(workspace.as_os_str().as_encoded_bytes());
        hasher.update([0]);
        hasher.update(git_dir.as_os_str().as_encoded_bytes());
        Some(KeptIndex {
            dir: state_dir.join(KEPT_INDEX_DIR),
            key: hex(&hasher.finalize()[..16]),
        })
    }

    /// The kept index of nested part `part` (`""`: the workspace).
    pub(super) fn part(&self, part: &[u8]) -> PathBuf {
        use sha1::Digest;
        if part.is_empty() {
            return self.dir.join(format!("{}.index", self.key));
        }
        let part = hex(&sha1::Sha1::digest(part)[..8]);
        self.dir.join(format!("{}.{part}.index", self.key))
    }

    /// The list kept beside `part`'s index: that index's checksum, then the ids of the
    /// blobs whose entries must not be trusted (each `hash_len` bytes).
    pub(super) fn private_list(&self, part: &[u8]) -> PathBuf {
        self.part(part).with_extension("private")
    }

    /// Keeps the private index at `index` (a hard link: git replaces an index by a
    /// rename, never in place, so the link holds it as it is now; a copy where a link
    /// cannot be made) and, beside it, the ids of the blobs in the run's private store,
    /// whose entries the next run must not trust ([`KeptIndex::load`]). The entries' stat
    /// data is cleared there, not here: the next run's "before" snapshot runs beside the
    /// CLI's start, and this is on the way to the run's envelope (30 to 60 ms for
    /// 100 000 files). Each file whole or not at all (a temporary name renamed).
    pub(super) fn store(&self, part: &[u8], index: &Path, hash_len: usize, private: &[[u8; 32]]) {
        use std::io::{Read, Seek, SeekFrom};
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir);
        let mut checksum = vec![0u8; hash_len];
        let read = std::fs::File::open(index).and_then(|mut file| {
            file.seek(SeekFrom::End(-i64::try_from(hash_len).unwrap_or(0)))?;
            file.read_exact(&mut checksum)
        });
        if read.is_err() {
            return;
        }
        let mut list = checksum;
        for id in private {
            list.extend_from_slice(&id[..hash_len]);
        }
        let temporary =
            |target: &Path| target.with_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
        let target = self.private_list(part);
        let list_temporary = temporary(&target);
        if write_new_private_file(&list_temporary, &list).is_err()
            || std::fs::rename(&list_temporary, &target).is_err()
        {
            let _ = std::fs::remove_file(&list_temporary);
            return;
        }
        let target = self.part(part);
        let index_temporary = temporary(&target);
        // Owner-only, as everything in the state directory: git wrote the index 0644
        // (the private scratch directory around it is 0700).
        let linked = std::fs::hard_link(index, &index_temporary)
            .and_then(|()| {
                std::fs::set_permissions(
                    &index_temporary,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
            })
            .or_else(|_| {
                let _ = std::fs::remove_file(&index_temporary);
                copy_plain_file(index, &index_temporary).map(|_| ())
            });
        if linked.is_err() || std::fs::rename(&index_temporary, &target).is_err() {
            let _ = std::fs::remove_file(&index_temporary);
        }
    }

    /// The kept index of `part`, with the stat data of the entries its list names
    /// cleared, so that git hashes those files again: their blobs were in the private
    /// store of the run that kept it, which went with that run. [`Kept::Unusable`] when
    /// the list is not that index's (two coders of the same work tree stored theirs at
    /// once): neither may be trusted with the other's.
    pub(super) fn load(&self, part: &[u8], hash_len: usize) -> Kept {
        let Ok(index) = std::fs::read(self.part(part)) else {
            return Kept::Absent;
        };
        let Ok(list) = std::fs::read(self.private_list(part)) else {
            return Kept::Unusable;
        };
        let matches = index.len() >= hash_len
            && list.len() >= hash_len
            && (list.len() - hash_len).is_multiple_of(hash_len)
            && list[..hash_len] == index[index.len() - hash_len..];
        if !matches {
            return Kept::Unusable;
        }
        let private: std::collections::HashSet<&[u8]> = list[hash_len..].chunks(hash_len).collect();
        if private.is_empty() {
            return Kept::Usable(index);
        }
        match crate::workspace::git_index::forget_stat_of(&index, hash_len, |oid| {
            private.contains(oid)
        }) {
            Some(bytes) => Kept::Usable(bytes),
            None => Kept::Unusable,
        }
    }

    /// Removes the kept indexes (and lists) of all but the [`KEPT_INDEXES`] work trees stored last
    /// (a workspace made for one run, by a test or a CI job, would otherwise leave its
    /// index for good), and temporary files of a coder killed while it stored one.
    pub(super) fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut by_key: std::collections::HashMap<String, (std::time::SystemTime, Vec<PathBuf>)> =
            std::collections::HashMap::new();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((key, _)) = name.split_once('.') else {
                continue;
            };
            let modified = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            if name.ends_with(".tmp") {
                if modified < hour_ago {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            }
            let slot = by_key
                .entry(key.to_owned())
                .or_insert((std::time::UNIX_EPOCH, Vec::new()));
            // The list is written at each store; an index is a link to one git wrote.
            if name.ends_with(".private") {
                slot.0 = slot.0.max(modified);
            }
            slot.1.push(entry.path());
        }
        if by_key.len() <= KEPT_INDEXES {
            return;
        }
        let mut keys: Vec<_> = by_key.into_values().collect();
        keys.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
        for (_, files) in keys.into_iter().skip(KEPT_INDEXES) {
            for file in files {
                let _ = std::fs::remove_file(file);
            }
        }
    }
}

/// What [`KeptIndex::load`] found.
pub(super) enum Kept {
    /// No index kept for this work tree: the user's is where to start.
    Absent,
    /// The index to start from.
    Usable(Vec<u8>),
    /// An index that may not be trusted: start afresh (every file hashed).
    Unusable,
}

/// Writes `bytes` to `path`, which must not exist (created 0600).
pub(super) fn write_new_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(bytes)
}

/// Files [`copy_plain_file`] copies at most: an index of a million files is some 100 MiB.
const MAX_COPIED: u64 = 512 << 20;

/// Copies `from` to `to` (created 0600, not there before) when `from` is a regular file
/// of at most [`MAX_COPIED`] bytes, opened without following a symlink or waiting on a
/// FIFO: the user's index is the agent's to replace, and a FIFO there held the copy (and
/// with it the next run's snapshot, and that run) forever; a symlink had coder copy
/// whatever it named. A nested repository's index made a sparse file of 2 GiB (no disk
/// to its writer) was copied whole into the state directory and read into coder's memory
/// by every later run's "before", unwatched (round seventeen's review): at a terabyte
/// the disk fills and coder dies. Past the cap the copy fails, and the index starts
/// afresh (every file hashed, within the read budget).
pub(super) fn copy_plain_file(from: &Path, to: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut source = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(from)?;
    let meta = source.metadata()?;
    if !meta.is_file() || meta.len() > MAX_COPIED {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    // A file that grows while it is copied stops at the cap too.
    let mut source = std::io::Read::take(&mut source, MAX_COPIED);
    let mut target = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    std::io::copy(&mut source, &mut target)
}

/// The directory of the indexes the ledger keeps between runs, in coder's state directory.
pub const KEPT_INDEX_DIR: &str = "ledger-index";
