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

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::MsFlags;

use super::{SandboxError, sys};

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
pub(crate) fn hide_host_secrets(new_root: &Path) -> Result<usize, SandboxError> {
    let inside = |path: &Path| -> PathBuf { new_root.join(path.strip_prefix("/").unwrap_or(path)) };
    let mut files: Vec<PathBuf> = HOST_SECRET_FILES.iter().map(PathBuf::from).collect();
    files.extend(ssh_host_keys(&inside(Path::new("/etc/ssh"))));
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

    let mut count = bind_empties(new_root, &files, false)?;
    for dir in HOST_SECRET_DIRS {
        let target = inside(Path::new(dir));
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

fn bind_empty(empty: &Path, target: &Path) -> Result<(), Bind> {
    let source = sys::open_nofollow(empty).map_err(|e| Bind::Step("open", e))?;
    let tree = sys::clone_tree(source.as_fd()).map_err(|e| Bind::Step("open_tree", e))?;
    sys::set_read_only(tree.as_fd()).map_err(|e| Bind::Step("mount_setattr", e))?;
    let target_fd = sys::open_nofollow(target).map_err(Bind::Target)?;
    sys::move_mount(tree.as_fd(), target_fd.as_fd()).map_err(|e| Bind::Step("move_mount", e))
}
