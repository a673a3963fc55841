//! Host data that is not the user's files but sits inside granted system paths: password
//! hashes, private keys of the machine, the kernel's key list. The agent may run as root
//! (uid 0 without capabilities still passes every owner check), so file modes do not
//! hide these; every confined mode masks them in the private root.
//!
//! Files are covered by an empty read-only file, directories by an empty read-only tmpfs.
//! Paths that are symlinks or missing are left alone (there is nothing, or the link's
//! target is masked where it lives when it is listed too). `/root` needs no mask: the
//! private root holds only granted paths, so it exists there only when it is the granted
//! home or holds a granted toolchain.

use std::collections::HashSet;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirEntryExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::MsFlags;
use serde::{Deserialize, Serialize};

use super::{SandboxError, sys};

/// The user's keys that the private root may show through a system path (round
/// twenty-four's second review): the never-visible places a variable moves out of the
/// home directory or a home key's symlink leads out of it
/// ([`super::home::places_outside_home`]: `AWS_SHARED_CREDENTIALS_FILE=
/// /opt/ci/aws-creds`, `DOCKER_CONFIG=/opt/ci/docker`), masked where they exist in the
/// private root as the host's secrets are; and the home keys that have other names
/// ([`super::home::linked_never_visible`]), whose names in the private root outside the
/// scanned trees (`/opt/backup/credentials`) are looked for and masked
/// ([`hide_linked_keys`]). Made by the policy, used by the helper.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSecrets {
    /// The relocated places that exist, canonical.
    #[serde(default, with = "super::bytes::vec")]
    pub places: Vec<PathBuf>,
    /// (dev, ino) of each home key with more than one name.
    #[serde(default)]
    pub linked: Vec<(u64, u64)>,
    /// The trees the scan walked, canonical: their names of the keys are the scan's to
    /// mask, and the look here does not enter them.
    #[serde(default, with = "super::bytes::vec")]
    pub scanned: Vec<PathBuf>,
}

/// Files read as empty in every confined mode.
pub(crate) const HOST_SECRET_FILES: [&str; 9] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    // Key descriptions of the user's keyrings, and scheduler dumps naming every task of
    // the machine (other namespaces included).
    "/proc/keys",
    "/proc/key-users",
    "/proc/sched_debug",
    "/proc/timer_list",
];

/// Directories shown empty in every confined mode.
pub(crate) const HOST_SECRET_DIRS: [&str; 1] = ["/etc/ssl/private"];

/// Mask the host's secrets inside the private root being built at `new_root` (before the
/// pivot). Returns how many masks were mounted.
pub(crate) fn hide_host_secrets(
    new_root: &Path,
    policy: &super::Policy,
) -> Result<usize, SandboxError> {
    let users = &policy.host_secrets;
    let inside = |path: &Path| -> PathBuf { new_root.join(path.strip_prefix("/").unwrap_or(path)) };
    let mut files: Vec<PathBuf> = HOST_SECRET_FILES.iter().map(PathBuf::from).collect();
    files.extend(ssh_host_keys(&inside(Path::new("/etc/ssh"))));
    files.extend(users.places.iter().cloned());
    let (linked, unlisted) = linked_key_names(new_root, policy)?;
    files.extend(linked);
    let files: Vec<PathBuf> = files
        .iter()
        .map(|f| {
            if f.starts_with(new_root) {
                f.clone()
            } else {
                inside(f)
            }
        })
        .filter(|f| fs::symlink_metadata(f).is_ok_and(|m| m.is_file()))
        .collect();
    // Each once: a second mask on a path mounts on the empty file's own name, which then
    // cannot be removed, and the run failed (a relocated key with another name is both a
    // place and a name the look finds; round twenty-five's second review).
    let mut files = files;
    files.sort();
    files.dedup();

    let mut count = bind_empties(new_root, &files, false)?;
    let dirs = HOST_SECRET_DIRS.iter().map(Path::new);
    let places = users.places.iter().map(|dir| inside(dir));
    for target in dirs.map(inside).chain(places).chain(unlisted) {
        if !fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        nix::mount::mount(
            Some("tmpfs"),
            &target,
            Some("tmpfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("size=4k,mode=0755"),
        )
        .map_err(|e| SandboxError::sys("mount tmpfs", target.display(), e))?;
        count += 1;
    }
    Ok(count)
}

/// How deep below the shared `/tmp` sockets are looked for: tmux's (`tmux-UID/default`),
/// X11's (`.X11-unix/X0`), ssh-agent's (`ssh-XXXX/agent.N`) and editors' IPC sockets
/// (`vscode-ipc-*.sock`) lie within two levels.
const TMP_SOCKET_DEPTH: usize = 2;
/// At most this many entries of `/tmp` are looked at.
const TMP_SOCKET_ENTRIES: usize = 16_384;

/// With the shared `/tmp` granted (`--allow-tmp`), cover each pathname UNIX socket in it
/// (within [`TMP_SOCKET_DEPTH`] levels) with an empty read-only file inside the private
/// root being built at `new_root`, so that `connect()` finds no socket there. Landlock ABI
/// 7 does not mediate `connect()`, and the network namespace does not separate pathname
/// sockets: through a tmux server's or an editor's socket the agent could run commands
/// outside the sandbox. Sockets made after this point stay reachable. A socket gone
/// before its mask is skipped. Returns how many were covered.
pub(crate) fn hide_tmp_sockets(new_root: &Path) -> Result<usize, SandboxError> {
    use std::os::unix::fs::FileTypeExt;
    let mut sockets = Vec::new();
    let mut pending = vec![(new_root.join("tmp"), 0)];
    let mut seen = 0;
    while let Some((dir, depth)) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > TMP_SOCKET_ENTRIES {
                break;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_socket() {
                sockets.push(entry.path());
            } else if kind.is_dir() && depth + 1 < TMP_SOCKET_DEPTH {
                pending.push((entry.path(), depth + 1));
            }
        }
    }
    bind_empties(new_root, &sockets, true)
}

/// Bind an empty read-only file over each of `targets` (paths in the private root at
/// `new_root`); a target that is gone (or became a symlink) is skipped when `gone_ok`.
/// Returns how many were covered.
fn bind_empties(
    new_root: &Path,
    targets: &[PathBuf],
    gone_ok: bool,
) -> Result<usize, SandboxError> {
    if targets.is_empty() {
        return Ok(0);
    }
    let empty = new_root.join(".coder-empty");
    fs::write(&empty, b"").map_err(|e| SandboxError::io("create the empty mask", e))?;
    fs::set_permissions(&empty, fs::Permissions::from_mode(0o444))
        .map_err(|e| SandboxError::io("chmod the empty mask", e))?;
    let mut count = 0;
    for target in targets {
        match bind_empty(&empty, target) {
            Ok(()) => count += 1,
            Err(Bind::Target(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR)) if gone_ok => {}
            Err(e) => return Err(e.into_error(target)),
        }
    }
    fs::remove_file(&empty).map_err(|e| SandboxError::io("remove the empty mask", e))?;
    Ok(count)
}

/// Why [`bind_empty`] failed: opening its target, or a mount step.
enum Bind {
    Target(Errno),
    Step(&'static str, Errno),
}

impl Bind {
    fn into_error(self, target: &Path) -> SandboxError {
        match self {
            Bind::Target(e) => SandboxError::sys("open", target.display(), e),
            Bind::Step(what, e) => SandboxError::sys(what, target.display(), e),
        }
    }
}

/// `ssh_host_*_key` files (the private halves) in `dir`.
fn ssh_host_keys(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ssh_host_") && n.ends_with("_key"))
        })
        .collect()
}

/// Tries of [`bind_empty`] on a target replaced between its opening and the mount.
const BIND_TRIES: usize = 4;

/// Binds `empty` over `target`. A target the host replaces by a rename meanwhile (a
/// `useradd` or `passwd` rewriting `/etc/shadow`) is deleted under the descriptor, and the
/// mount on it fails with `ENOENT`: the new file at its path is opened and covered instead
/// (a run on a machine whose accounts changed during its setup failed with a sandbox
/// error).
fn bind_empty(empty: &Path, target: &Path) -> Result<(), Bind> {
    let source = sys::open_nofollow(empty).map_err(|e| Bind::Step("open", e))?;
    let mut tries = 0;
    loop {
        let tree = sys::clone_tree(source.as_fd()).map_err(|e| Bind::Step("open_tree", e))?;
        sys::set_read_only(tree.as_fd()).map_err(|e| Bind::Step("mount_setattr", e))?;
        let target_fd = sys::open_nofollow(target).map_err(Bind::Target)?;
        match sys::move_mount(tree.as_fd(), target_fd.as_fd()) {
            Err(Errno::ENOENT) if tries + 1 < BIND_TRIES => tries += 1,
            other => return other.map_err(|e| Bind::Step("move_mount", e)),
        }
    }
}

/// Most entries [`linked_key_names`] looks at in the private root; past it the run fails
/// closed (a key's other name would go unseen).
const MAX_LINK_LOOK_ENTRIES: usize = 4_000_000;

/// How a directory's entries are looked at by [`linked_key_names`], by its file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// Nothing of the user's files (`/proc`, `/sys`): not entered.
    Kernel,
    /// The inode number in a listing is the file's (ext4, xfs, btrfs, tmpfs, f2fs): only
    /// an entry with a key's number is `stat`ed.
    InodeTrusted,
    /// Anything else (overlayfs, FUSE, NFS): every file is `stat`ed.
    StatEach,
}

fn listing_of(dir: &Path) -> Listing {
    use nix::sys::statfs as sfs;
    let Ok(fs) = sfs::statfs(dir) else {
        return Listing::StatEach;
    };
    let kind = fs.filesystem_type();
    if [
        sfs::PROC_SUPER_MAGIC,
        sfs::SYSFS_MAGIC,
        sfs::CGROUP2_SUPER_MAGIC,
    ]
    .contains(&kind)
    {
        Listing::Kernel
    } else if [
        sfs::EXT4_SUPER_MAGIC,
        sfs::XFS_SUPER_MAGIC,
        sfs::BTRFS_SUPER_MAGIC,
        sfs::TMPFS_MAGIC,
        sfs::F2FS_SUPER_MAGIC,
    ]
    .contains(&kind)
    {
        Listing::InodeTrusted
    } else {
        Listing::StatEach
    }
}

/// The names, in the private root being built at `new_root`, of the home keys that have
/// other names (`users.linked`), outside the scanned trees: a hard link the user made to
/// `~/.aws/credentials` at `/opt/backup/credentials` (a backup's snapshot) was read
/// through the system's `/opt` (round twenty-four's second review). The walk covers
/// what the agent will see (the system's paths, the home directory's toolchains and
/// caches, coder's own directories), whole: the link counts cannot tell when every
/// name is found, the private root showing one name at more than one place. Cost:
/// nothing when no key has another name; else
/// a listing of every directory the private root shows, a `stat` only for an entry
/// whose inode number is a key's on the usual file systems (every file on others):
/// on this machine's 134,000 entries of `/usr`, `/etc` and `/opt`, 0.5 to 1 s a run
/// (BENCHMARKS.md, round twenty-five).
///
/// With them, the directories the look could enter but not list (mode 0711, another
/// user's): the agent opens a name it knows there (`/opt/backup/credentials`, round
/// twenty-five's second review), so they are shown empty, but for one holding a granted
/// path or the home directory.
fn linked_key_names(
    new_root: &Path,
    policy: &super::Policy,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), SandboxError> {
    let users = &policy.host_secrets;
    if users.linked.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let inside = |path: &Path| new_root.join(path.strip_prefix("/").unwrap_or(path));
    // The walk runs whole (see above): no link counts to account for.
    let keys: HashSet<(u64, u64)> = users.linked.iter().copied().collect();
    let skip: Vec<PathBuf> = users.scanned.iter().map(|p| inside(p)).collect();
    let mut look = LinkLook {
        keys,
        skip,
        found: Vec::new(),
        looked: 0,
    };
    look.mount_points(new_root)?;
    let mut pending = vec![new_root.to_path_buf()];
    let mut unlisted = Vec::new();
    while let Some(dir) = pending.pop() {
        let listing = listing_of(&dir);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(_) => {
                if entered_unlisted(&dir, new_root, policy) {
                    unlisted.push(dir);
                }
                continue;
            }
        };
        if listing == Listing::Kernel {
            continue;
        }
        for entry in entries.flatten() {
            look.entry(&dir, &entry, listing, &mut pending)?;
        }
    }
    Ok((look.found, unlisted))
}

/// The look for other names of the home's keys in the private root ([`linked_key_names`]).
struct LinkLook {
    /// The keys' (device, inode).
    keys: HashSet<(u64, u64)>,
    /// The scanned trees, in the private root: not walked again.
    skip: Vec<PathBuf>,
    /// The names found, each once.
    found: Vec<PathBuf>,
    /// The entries looked at so far, against [`MAX_LINK_LOOK_ENTRIES`].
    looked: usize,
}

impl LinkLook {
    /// Each mount point of the private root (below `new_root`) that is a key: a file
    /// mounted on a file (one granted alone; a bind mount the host had in a granted tree)
    /// shows in its directory's listing by the inode number of the file beneath.
    fn mount_points(&mut self, new_root: &Path) -> Result<(), SandboxError> {
        let table = crate::workspace::mountinfo::table()
            .map_err(|e| SandboxError::io("read /proc/self/mountinfo", e))?;
        let points = table
            .split(|&b| b == b'\n')
            .filter_map(|line| line.split(|&b| b == b' ').nth(4))
            .map(crate::workspace::mountinfo::unescape)
            .filter(|point| point.starts_with(new_root) && point != new_root);
        for point in points {
            if let Ok(meta) = fs::symlink_metadata(&point)
                && !self.skip.iter().any(|s| point.starts_with(s))
            {
                self.found_if_key(point, &meta);
            }
        }
        Ok(())
    }

    /// One entry of `dir` (listed as `listing` says): a directory to walk goes on
    /// `pending`, a key's other name into `found`. Only an entry that may be a key is
    /// looked up (its inode number, where the listing's can be trusted).
    fn entry(
        &mut self,
        dir: &Path,
        entry: &fs::DirEntry,
        listing: Listing,
        pending: &mut Vec<PathBuf>,
    ) -> Result<(), SandboxError> {
        self.looked += 1;
        if self.looked > MAX_LINK_LOOK_ENTRIES {
            return Err(SandboxError::ScanLimit {
                what: "the entries the sandbox shows, looking for other names of a home key",
                limit: MAX_LINK_LOOK_ENTRIES,
                path: dir.to_path_buf(),
            });
        }
        let path = entry.path();
        let kind = entry.file_type().ok();
        if kind.is_some_and(|k| k.is_dir()) {
            if !self.skip.contains(&path) {
                pending.push(path);
            }
            return Ok(());
        }
        let may_be_file = kind.is_none_or(|k| k.is_file());
        let maybe_key = listing != Listing::InodeTrusted
            || self.keys.iter().any(|&(_, ino)| ino == entry.ino());
        if !may_be_file || !maybe_key {
            return Ok(());
        }
        let Ok(meta) = fs::symlink_metadata(&path) else {
            return Ok(());
        };
        if meta.is_dir() && !self.skip.contains(&path) {
            pending.push(path);
        } else {
            self.found_if_key(path, &meta);
        }
        Ok(())
    }

    /// `path` into `found` when it is a key's file (`meta`: its own stat data) and not
    /// there yet. No end once the link counts are accounted for: one name shown at two
    /// places (a directory the host bind-mounts twice, the binds here being recursive)
    /// counts twice, and the second stayed readable (round twenty-five's second review).
    fn found_if_key(&mut self, path: PathBuf, meta: &fs::Metadata) {
        if self.keys.contains(&(meta.dev(), meta.ino()))
            && meta.is_file()
            && !self.found.contains(&path)
        {
            self.found.push(path);
        }
    }
}

/// Whether `dir` (in the private root at `new_root`), which the look could not list, can
/// be entered, and holds neither a granted path nor the home directory (shown empty, it
/// would hide them).
fn entered_unlisted(dir: &Path, new_root: &Path, policy: &super::Policy) -> bool {
    let Ok(outside) = dir.strip_prefix(new_root).map(|p| Path::new("/").join(p)) else {
        return false;
    };
    let holds = |path: &Path| path.starts_with(&outside);
    outside != Path::new("/")
        && nix::unistd::access(dir, nix::unistd::AccessFlags::X_OK).is_ok()
        && !policy.roots.iter().any(|r| holds(&r.path))
        && !policy.home.as_deref().is_some_and(holds)
}
