//! Where a run's per-run scratch lives: the files coder makes new for every run and
//! removes at its end (the CLI's private home, `cli-runs/<pid>-<id>`), on a tmpfs when one
//! is usable, else in coder's state directory as before.
//!
//! Why: on a file system like this project's machine (an ext4 without a journal) every
//! new inode scans past the ones freed in the last half minute, 0.2 to 0.4 ms each under
//! churn, and a run made a dozen of them for the CLI's home alone, plus what the CLI makes
//! there (BENCHMARKS.md, rounds nineteen and twenty). A tmpfs makes one in microseconds.
//!
//! The places, first usable wins ([`Scratch::choose`]):
//! 1. `$CODER_SCRATCH_DIR` when set: the user's choice, on any file system;
//! 2. `$XDG_RUNTIME_DIR/coder` when `XDG_RUNTIME_DIR` is a tmpfs owned by this user with
//!    no group or other permission (a systemd login's), not under `/tmp` or `/dev/shm`;
//! 3. `/dev/shm/coder-<euid>`;
//! 4. the state directory.
//!
//! `/dev/shm` is shared by every user and the name is predictable, so another user can
//! make it first (a directory of theirs, or a symlink to one). coder's directory there is
//! made with mode 0700 and then opened without following a symlink and checked by
//! `fstat` to be a directory of this user with no group or other permission, on a tmpfs;
//! anything else is never used, and the run says so in its warnings. Every place is
//! checked the same way. A place with less free room than [`MIN_FREE_BYTES`] or
//! [`MIN_FREE_INODES`] is passed over (Docker's `/dev/shm` is 64 MiB): what the CLI
//! writes in its home then goes to disk rather than filling the memory other programs'
//! shared memory lives in.
//!
//! The sandbox's per-run directory of coder's own files (`sandbox/<pid>-<id>`: the git
//! identity, the git guard's record, the nesting wrapper's link, the masks' empty file)
//! lives here too (round twenty-one). The agent's `TMPDIR` does not: an agent may fill it
//! with anything of any size, so it is a directory of its own in the state directory
//! (`sandbox-tmp/<pid>-<id>-tmp`, on disk), never in a scratch place.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::run_dirs::CLI_RUNS_DIR;

/// The directory of the sandbox's per-run directories in a scratch place (and, the
/// stopped guards' records among them, in the state directory).
pub const SANDBOX_RUNS_DIR: &str = "sandbox";

/// The environment variable naming the scratch directory outright.
pub const SCRATCH_VAR: &str = "CODER_SCRATCH_DIR";

/// The shared tmpfs every Linux system has.
const SHM: &str = "/dev/shm";

/// A tmpfs place needs this much free room to be used: four times what the CLI's home of
/// a long resumed session holds (its history, copied in, tens of MiB at most), and above
/// Docker's default `/dev/shm` of 64 MiB, which is too small to share with the programs
/// whose POSIX shared memory lives there.
pub const MIN_FREE_BYTES: u64 = 128 << 20;

/// And this many free inodes (a CLI home holds a few dozen).
pub const MIN_FREE_INODES: u64 = 4096;

/// Which place [`Scratch::choose`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScratchPlace {
    /// `$CODER_SCRATCH_DIR`.
    Given,
    /// `$XDG_RUNTIME_DIR/coder`.
    Runtime,
    /// `/dev/shm/coder-<euid>`.
    Shm,
    /// coder's state directory.
    State,
}

/// The scratch directory of this run.
#[derive(Debug, Clone)]
pub struct Scratch {
    root: PathBuf,
    place: ScratchPlace,
    /// Why a place was refused, for the run's warnings.
    notes: Vec<String>,
}

/// Why a candidate place was not used.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// Missing, not a tmpfs, or too full: nothing to report.
    #[error("{0}")]
    Quiet(String),
    /// Someone else's, a symlink, or open to others: reported.
    #[error("{0}")]
    Unsafe(String),
}

impl Scratch {
    /// The scratch place for this process's environment and coder's state directory
    /// `state_dir` (see the module's header).
    pub fn choose(state_dir: &Path) -> Scratch {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        let mut notes = Vec::new();
        let candidates = [
            (ScratchPlace::Given, var(SCRATCH_VAR), false),
            (
                ScratchPlace::Runtime,
                var("XDG_RUNTIME_DIR").filter(|d| runtime_dir_usable(d)),
                true,
            ),
            (ScratchPlace::Shm, Some(PathBuf::from(SHM)), true),
        ];
        for (place, base, tmpfs) in candidates {
            let Some(base) = base else { continue };
            let root = match place {
                ScratchPlace::Given => base,
                ScratchPlace::Runtime => base.join("coder"),
                _ => base.join(format!("coder-{}", nix::unistd::geteuid())),
            };
            match own_private_dir(&root, tmpfs) {
                Ok(()) => return Scratch { root, place, notes },
                Err(Refusal::Unsafe(why)) => notes.push(why),
                Err(Refusal::Quiet(_)) => {}
            }
            if place == ScratchPlace::Given {
                break;
            }
        }
        Scratch {
            root: state_dir.to_path_buf(),
            place: ScratchPlace::State,
            notes,
        }
    }

    /// Scratch in `root` as it is, unchecked (a test's, or the state directory).
    pub fn at(root: &Path) -> Scratch {
        Scratch {
            root: root.to_path_buf(),
            place: ScratchPlace::Given,
            notes: Vec::new(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn place(&self) -> ScratchPlace {
        self.place
    }

    /// The directory of the CLI's per-run homes.
    pub fn cli_runs(&self) -> PathBuf {
        self.root.join(CLI_RUNS_DIR)
    }

    /// The directory of the sandbox's per-run directories of coder's own files, for the
    /// runs of coder's state directory `state_dir` ([`sandbox_runs_in`]).
    pub fn sandbox_runs(&self, state_dir: &Path) -> PathBuf {
        sandbox_runs_in(&self.root, state_dir)
    }

    /// Why a place before the one taken was refused (someone else's, a symlink, open to
    /// others), one sentence each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// The directory of the sandbox's per-run directories in scratch place `place` for the
/// runs of the state directory `state_dir`: its `sandbox/` when the place is the state
/// directory, else `sandbox/<dev>-<ino>-<birth>` of the state directory. A scratch place
/// is shared by every state directory of this user, and a killed run's git guard is done
/// by a later run of its own state directory, which keeps the record of a guard that
/// stops short and refuses the runs it concerns (`sandbox::gitguard`): a run of another
/// state directory must not take it over.
///
/// The birth time is part of the name because ext4 gives a deleted directory's inode to
/// the next one made: a state directory made after another was deleted took over its
/// killed runs (their trees long gone), and warned of them in every run (CI met it with
/// the test suites' throw-away state directories). Where the file system keeps no birth
/// time the name is `<dev>-<ino>` alone.
pub fn sandbox_runs_in(place: &Path, state_dir: &Path) -> PathBuf {
    let runs = place.join(SANDBOX_RUNS_DIR);
    if place == state_dir {
        return runs;
    }
    match std::fs::metadata(state_dir) {
        Ok(meta) => runs.join(state_dir_identity(&meta)),
        // No state directory yet: nothing of its runs can be anywhere.
        Err(_) => runs.join("unknown"),
    }
}

/// The name of one state directory's runs in a scratch place: device, inode and (where
/// the file system keeps it) birth time in nanoseconds, in hex.
fn state_dir_identity(meta: &std::fs::Metadata) -> String {
    let birth = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    match birth {
        Some(since) => format!("{:x}-{:x}-{:x}", meta.dev(), meta.ino(), since.as_nanos()),
        None => format!("{:x}-{:x}", meta.dev(), meta.ino()),
    }
}

/// The scratch directory `$CODER_SCRATCH_DIR` names (absolute), made or not, usable or
/// not: the ledger leaves it out of a workspace that holds it.
pub fn given() -> Option<PathBuf> {
    std::env::var_os(SCRATCH_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// Every scratch root of this user that exists and is this user's own, the state
/// directory's included: where a killed run's scratch may be, and what no agent may reach.
/// The environment decides which places a run takes, and it may differ between runs.
pub fn places(state_dir: &Path) -> Vec<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut found = vec![state_dir.to_path_buf()];
    let candidates = [
        var(SCRATCH_VAR),
        // Only where a run could have taken it ([`Scratch::choose`]): under `/tmp` an
        // agent with `--allow-tmp` makes it, 0700 and this user's, with a forged record
        // of a killed run that the next run's guard would act on.
        var("XDG_RUNTIME_DIR")
            .filter(|d| runtime_dir_usable(d))
            .map(|d| d.join("coder")),
        Some(Path::new(SHM).join(format!("coder-{}", nix::unistd::geteuid()))),
    ];
    for dir in candidates.into_iter().flatten() {
        if dir.is_absolute() && is_own_private_dir(&dir) && !found.contains(&dir) {
            found.push(dir);
        }
    }
    found
}

/// Whether `XDG_RUNTIME_DIR` at `dir` is a systemd login's: a tmpfs directory of this
/// user with no group or other permission, not under `/tmp` (which `--allow-tmp` gives an
/// agent) or `/dev/shm` (the `/dev/shm` place is checked on its own).
fn runtime_dir_usable(dir: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(dir) else {
        return false;
    };
    if real.starts_with("/tmp") || real.starts_with(SHM) {
        return false;
    }
    open_checked(&real, true).is_ok()
}

/// Whether `dir` is a directory of this user with no group or other permission.
fn is_own_private_dir(dir: &Path) -> bool {
    open_checked(dir, false).is_ok()
}

/// Makes `dir` (mode 0700, its parent must exist) unless it exists, then checks it
/// ([`open_checked`]) and the room left in it.
fn own_private_dir(dir: &Path, tmpfs: bool) -> Result<(), Refusal> {
    if tmpfs && !dir.parent().is_some_and(is_tmpfs_dir) {
        return Err(Refusal::Quiet("not a tmpfs".into()));
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Refusal::Quiet(e.to_string())),
    }
    let file = open_checked(dir, tmpfs)?;
    let room = nix::sys::statvfs::fstatvfs(&file)
        .map_err(|e| Refusal::Quiet(format!("statvfs {}: {e}", dir.display())))?;
    let bytes = room.blocks_available().saturating_mul(room.fragment_size());
    if tmpfs && (bytes < MIN_FREE_BYTES || room.files_available() < MIN_FREE_INODES) {
        return Err(Refusal::Quiet(format!("{} is nearly full", dir.display())));
    }
    Ok(())
}

/// `dir` opened without following a symlink (`O_PATH | O_NOFOLLOW | O_DIRECTORY`), and checked by
/// `fstat` on what was opened: a directory owned by this process's effective user, no
/// group or other permission, on a tmpfs when `tmpfs`.
fn open_checked(dir: &Path, tmpfs: bool) -> Result<std::fs::File, Refusal> {
    // `O_PATH`: no read permission needed, so a directory of another user's that this
    // one may not read is found and named too, not passed over in silence.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => Refusal::Unsafe(format!(
                "{} is not a directory (a symlink?): not used for this run's scratch",
                dir.display()
            )),
            _ => Refusal::Quiet(e.to_string()),
        })?;
    let meta = file.metadata().map_err(|e| Refusal::Quiet(e.to_string()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(Refusal::Unsafe(format!(
            "{} belongs to uid {} with mode {:o}, not to this user (uid {me}) alone: not used \
             for this run's scratch",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    if tmpfs && !is_tmpfs(&file) {
        return Err(Refusal::Quiet("not a tmpfs".into()));
    }
    Ok(file)
}

fn is_tmpfs(file: &std::fs::File) -> bool {
    nix::sys::statfs::fstatfs(file)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

fn is_tmpfs_dir(dir: &Path) -> bool {
    nix::sys::statfs::statfs(dir)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn refusal(dir: &Path, tmpfs: bool) -> Option<Refusal> {
        own_private_dir(dir, tmpfs).err()
    }

    #[test]
    fn a_new_directory_is_made_owner_only_and_used() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("coder-x");
        assert!(refusal(&dir, false).is_none());
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o7777, 0o700);
        assert!(is_own_private_dir(&dir));
    }

    #[test]
    fn a_symlink_or_a_directory_open_to_others_is_refused_and_said() {
        let base = tempfile::tempdir().unwrap();
        let target = base.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = base.path().join("coder-link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(refusal(&link, false), Some(Refusal::Unsafe(_))));
        let open = base.path().join("coder-open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(refusal(&open, false), Some(Refusal::Unsafe(_))));
        // Untouched: the mode is not "fixed", the link not followed.
        assert_eq!(std::fs::metadata(&open).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    }

    #[test]
    #[ignore = "needs root: scripts/test runs it"]
    fn a_directory_of_another_user_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("coder-0");
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        std::os::unix::fs::lchown(&dir, Some(65534), Some(65534)).unwrap();
        assert!(matches!(refusal(&dir, false), Some(Refusal::Unsafe(_))));
    }

    #[test]
    fn a_place_not_on_a_tmpfs_is_passed_over_quietly_where_a_tmpfs_is_wanted() {
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
        let base = tempfile::tempdir_in(target).unwrap();
        assert!(
            !is_tmpfs_dir(base.path()),
            "the build's target directory is a tmpfs"
        );
        let dir = base.path().join("coder-x");
        assert!(matches!(refusal(&dir, true), Some(Refusal::Quiet(_))));
    }

    /// A state directory made after another was deleted gets its inode on ext4 (the
    /// build's file system here, as the CI machine's): its runs' directory in a scratch
    /// place must not be the deleted one's, whose killed runs' trees are gone.
    #[test]
    fn a_state_directory_on_a_reused_inode_has_runs_of_its_own() {
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
        let base = tempfile::tempdir_in(target).unwrap();
        let place = base.path().join("scratch");
        let (first, second) = (base.path().join("state-a"), base.path().join("state-b"));
        // ext4 gives a freed inode to the next directory made, unless another process on
        // the machine makes a file in between (a CI run beside busy builds missed it once
        // in a single try): each try frees a fresh inode.
        let reused = (0..100).find_map(|_| {
            std::fs::create_dir(&first).unwrap();
            let ino = std::fs::metadata(&first).unwrap().ino();
            let before = sandbox_runs_in(&place, &first);
            std::fs::remove_dir(&first).unwrap();
            std::fs::create_dir(&second).unwrap();
            if std::fs::metadata(&second).unwrap().ino() == ino {
                return Some(before);
            }
            std::fs::remove_dir(&second).unwrap();
            None
        });
        let before =
            reused.expect("the file system never gave the inode again: the case is not met");
        assert_ne!(sandbox_runs_in(&place, &second), before);
    }
}
