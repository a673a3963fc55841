//! Placeholders are shared by every run in a tree: who may remove them, and when.
//!
//! A protected name that does not exist gets a placeholder ([`super::scan`]) so that a
//! mount can make it un-creatable. A second run started in the same tree meanwhile finds
//! that placeholder, takes it for an ordinary name and mounts its own mask over it. If the
//! first run then removed its placeholder, the kernel would detach the second run's mask
//! with it (a mount point unlinked in one mount namespace is unmounted in all of them), and
//! the second run's agent could create `.claude/settings.json` or a `.git` that the user's
//! own tools later obey. So no run removes a placeholder while another live run's tree
//! holds it:
//!
//! * every run holds a shared `flock` on a lock file for each of its writable roots, from
//!   before its scan until its processes are gone ([`PlaceholderLease::take`]);
//! * every placeholder a run creates is written to a registry the moment the scan ends
//!   ([`PlaceholderLease::register`]), so a run whose coder dies leaves a record, not
//!   an orphan; a run that cannot record them (the registry stays locked past its wait)
//!   keeps them itself and removes them at its end like registered ones;
//! * at the end a run drops its holds, and removes each registered placeholder for which
//!   it gets an exclusive lock on every directory from `/` to the placeholder's parent:
//!   a live run whose root contains the placeholder holds one of those shared
//!   ([`PlaceholderLease::release`]). What cannot be removed now stays registered: the run
//!   that ends last removes it.
//!
//! The lock files and the registry live in coder's state directory (`placeholders/`). A
//! run whose writable trees reach it is refused ([`super::policy`]): an agent that could
//! remove these locks could make another run's ending unmask its own run, and one that
//! held them could block every later run. A lock file stands for a directory by its
//! device and inode, so every path to one directory (a bind mount, a tree an agent
//! renamed) names one lock; they are hashed onto at most [`LOCK_FILES`] files, so the
//! directory does not grow with every workspace ever used, and two directories sharing
//! one only ever make a run more careful (a removal waits for the last run). A registered
//! placeholder whose path now passes through a symlink is forgotten, not removed (the
//! symlink could lead to another run's placeholder). Runs with different state
//! directories (other users, or a `CODER_STATE_DIR` of their own) share neither locks nor
//! registry, so they do not exclude each other: a limit stated in SECURITY.md.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use super::SandboxError;
use super::scan::{Placeholder, PlaceholderKind};
use super::trash::{LEASE_DIR, Taken, Trash};
use crate::config::state_file::{self, lock_until};

/// How long a run waits for another run to finish removing placeholders in its tree, or
/// for the registry, before it gives up.
const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// The registry's name in the lease directory.
const REGISTRY: &str = "registry.json";

/// A registry longer than this is not padded over but emptied first ([`Registry::save`]).
const PAD_LIMIT: usize = 1 << 20;

/// Lock files at most: directories (by device and inode) are hashed onto these.
const LOCK_FILES: u64 = 4096;

/// A run's hold on its writable trees' placeholders. Dropping it without
/// [`PlaceholderLease::release`] (a coder that dies) only drops the holds: the registry
/// keeps what the run created for a later run to remove.
#[derive(Debug)]
pub struct PlaceholderLease {
    dir: PathBuf,
    /// The shared locks on the writable roots' lock files; emptied by `release`.
    held: Mutex<Vec<Flock<fs::File>>>,
    /// Placeholders this run made that `register` could not record (the registry stayed
    /// locked, or could not be written): `release` removes them like registered ones,
    /// else no run ever would.
    unregistered: Mutex<Vec<Placeholder>>,
}

impl PlaceholderLease {
    /// Hold `roots` (canonical writable trees) shared, waiting while another run holds one
    /// exclusively (it is removing placeholders there). The lease directory is created in
    /// `state_dir` when absent.
    pub fn take(state_dir: &Path, roots: &[PathBuf]) -> Result<PlaceholderLease, SandboxError> {
        let dir = Self::dir_in(state_dir)?;
        let deadline = Instant::now() + WAIT_LIMIT;
        let mut held = Vec::with_capacity(roots.len());
        for root in roots {
            let file = open_lock_file(&dir, root)?;
            let lock = lock_until(file, FlockArg::LockSharedNonblock, deadline)
                .map_err(|_| SandboxError::PlaceholdersBusy { path: root.clone() })?;
            held.push(lock);
        }
        Ok(PlaceholderLease {
            dir,
            held: Mutex::new(held),
            unregistered: Mutex::new(Vec::new()),
        })
    }

    /// The directory of the lock files and the registry in `state_dir`, created (mode
    /// 0700) when absent: it exists once this returns, so callers can resolve it.
    pub fn dir_in(state_dir: &Path) -> Result<PathBuf, SandboxError> {
        let dir = state_dir.join(LEASE_DIR);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| SandboxError::io(format!("create {}", dir.display()), e))?;
        Ok(dir)
    }

    /// Add `placeholders` (just created by this run) to the registry.
    pub fn register(&self, placeholders: &[Placeholder]) -> Result<(), SandboxError> {
        if placeholders.is_empty() {
            return Ok(());
        }
        let registered = Registry::open(&self.dir).and_then(|mut registry| {
            registry.entries.extend(placeholders.iter().cloned());
            registry.save()
        });
        if registered.is_err() {
            lock_ignoring_poison(&self.unregistered).extend(placeholders.iter().cloned());
        }
        registered
    }

    /// Drop this run's holds, then remove every registered placeholder that no live run's
    /// tree holds. Call it once the run's last process is gone; calling it again only
    /// retries what is still registered. Errors leave entries for a later run.
    pub fn release(&self) {
        lock_ignoring_poison(&self.held).clear();
        let own = std::mem::take(&mut *lock_ignoring_poison(&self.unregistered));
        // Without the registry, this run's own unregistered placeholders are still removed
        // (under the same exclusive locks); what must stay of them cannot be recorded.
        let mut registry = Registry::open(&self.dir).ok();
        let mut entries = own;
        if let Some(registry) = registry.as_mut() {
            entries.append(&mut registry.entries);
        }
        if entries.is_empty() {
            return;
        }
        let mut exclusive = ExclusiveDirs::new(&self.dir);
        let mut free = Vec::new();
        let mut kept = Vec::new();
        for placeholder in entries {
            if !exclusive.holds_every_dir_above(&placeholder.path) {
                kept.push(placeholder);
            } else if reached_without_symlinks(&placeholder.path) {
                free.push(placeholder);
            }
            // Else forgotten, not removed: its path now leads elsewhere (an agent turned a
            // directory on it into a symlink), perhaps to another run's placeholder.
        }
        remove_placeholders(&free, Trash::open(&self.dir).as_ref());
        match registry.as_mut() {
            Some(registry) => {
                registry.entries = kept;
                let _ = registry.save();
            }
            None => lock_ignoring_poison(&self.unregistered).extend(kept),
        }
        // The exclusive locks go only now: no run scans these trees until the
        // placeholders are gone.
        drop(exclusive);
    }
}

/// `mutex`'s guard, also when a thread panicked holding it (the lists stay usable).
fn lock_ignoring_poison<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The registry of placeholders not yet removed, locked for as long as it is open.
struct Registry {
    file: Flock<fs::File>,
    entries: Vec<Placeholder>,
}

impl Registry {
    fn open(dir: &Path) -> Result<Registry, SandboxError> {
        let path = dir.join(REGISTRY);
        let io = |e: std::io::Error| SandboxError::io(format!("open {}", path.display()), e);
        let file = state_file::open(&path).map_err(io)?;
        let deadline = Instant::now() + WAIT_LIMIT;
        let mut file = lock_until(file, FlockArg::LockExclusiveNonblock, deadline)
            .map_err(|e| io(std::io::Error::from(e)))?;
        let mut text = Vec::new();
        file.read_to_end(&mut text).map_err(io)?;
        // A registry that does not parse (a coder killed while writing it) is started
        // afresh: what it named stays in the tree as ordinary empty names.
        let entries = serde_json::from_slice(&text).unwrap_or_default();
        Ok(Registry { file, entries })
    }

    /// Writes the entries over the old text in place, padded with blanks (JSON's
    /// whitespace) to the old length, then cuts the blanks off. The file never becomes
    /// empty: on an ext4 mounted with `discard`, truncating a written file to nothing
    /// frees its block, and the next write allocates one again, 1.4 to 2.4 ms each on the
    /// development machine (a `discard`, and the delayed allocation's flush that a
    /// truncation to zero asks for), paid on the path to the agent's start (`register`)
    /// and again to coder's exit (`release`); a shorter length within the first block
    /// frees nothing. Every state of the file between the two steps parses as the new
    /// entries, as the one write parsed as the old or the new before.
    fn save(&mut self) -> Result<(), SandboxError> {
        let io = |e: std::io::Error| SandboxError::io("write the placeholder registry", e);
        let text = serde_json::to_vec(&self.entries).map_err(|e| io(e.into()))?;
        let file: &fs::File = &self.file;
        let old = file.metadata().map_err(io)?.len();
        let mut padded = text.clone();
        match usize::try_from(old) {
            Ok(old) if old <= PAD_LIMIT => padded.resize(padded.len().max(old), b' '),
            // Not a registry coder wrote (it stays far smaller): started afresh.
            _ => file.set_len(0).map_err(io)?,
        }
        file.write_all_at(&padded, 0).map_err(io)?;
        if padded.len() > text.len() {
            file.set_len(text.len() as u64).map_err(io)?;
        }
        Ok(())
    }
}

/// Exclusive locks on directories' lock files, taken without waiting and remembered (held
/// or refused) for the rest of one release. Remembered by lock file, not by directory: two
/// directories of one release that hash onto the same file (a few in a thousand releases)
/// must find it held by this release, since a second `flock` on a new descriptor of that
/// file would be refused by the first and leave the placeholder for a run that never comes.
struct ExclusiveDirs<'a> {
    dir: &'a Path,
    taken: HashMap<u64, Option<Flock<fs::File>>>,
}

impl<'a> ExclusiveDirs<'a> {
    fn new(dir: &'a Path) -> Self {
        ExclusiveDirs {
            dir,
            taken: HashMap::new(),
        }
    }

    /// Whether every directory from `/` to `path`'s parent is locked exclusively (taking
    /// the locks not yet tried): then no live run's tree contains `path`.
    fn holds_every_dir_above(&mut self, path: &Path) -> bool {
        let Some(parent) = path.parent() else {
            return false;
        };
        parent.ancestors().all(|dir| self.holds(dir))
    }

    fn holds(&mut self, dir: &Path) -> bool {
        let slot = lock_slot(dir);
        if let Some(taken) = self.taken.get(&slot) {
            return taken.is_some();
        }
        let lock = open_slot(self.dir, slot)
            .ok()
            .and_then(|file| Flock::lock(file, FlockArg::LockExclusiveNonblock).ok());
        let held = lock.is_some();
        self.taken.insert(slot, lock);
        held
    }
}

/// The lock file standing for directory `path` (created empty when absent), named by the
/// directory's device and inode: every path to one directory names the same lock (a bind
/// mount of the tree elsewhere; a tree an agent renamed while a run works in it). A path
/// that cannot be inspected is named by a hash of its text.
fn open_lock_file(dir: &Path, path: &Path) -> Result<fs::File, SandboxError> {
    open_slot(dir, lock_slot(path))
}

/// Lock file number `slot` of the lease directory `dir` (created empty when absent).
fn open_slot(dir: &Path, slot: u64) -> Result<fs::File, SandboxError> {
    let lock_path = dir.join(format!("{slot:03x}.lock"));
    state_file::open(&lock_path)
        .map_err(|e| SandboxError::io(format!("open {}", lock_path.display()), e))
}

/// Which of the [`LOCK_FILES`] stands for directory `path`: a hash of its device and
/// inode, or of its path's text when it cannot be inspected.
fn lock_slot(path: &Path) -> u64 {
    let hash = match fs::metadata(path) {
        Ok(meta) => fnv1a(&[meta.dev().to_le_bytes(), meta.ino().to_le_bytes()].concat()),
        Err(_) => fnv1a(path.as_os_str().as_bytes()),
    };
    hash % LOCK_FILES
}

/// Whether every directory from `/` down to `path`'s parent is a directory, not a
/// symlink: the registered path then leads to the name the scan made, not through a
/// symlink an agent left to another run's placeholder. Called under the exclusive locks
/// of all these directories: no live run's agent can change them meanwhile.
fn reached_without_symlinks(path: &Path) -> bool {
    path.parent().is_some_and(|parent| {
        parent
            .ancestors()
            .all(|dir| fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()))
    })
}

/// FNV-1a, 64 bits: the same lock file for every coder version.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Remove what coder created for absent protected names, deepest first (a placeholder may
/// sit inside another's directory). Directories go into `trash` when it takes them (a
/// rename, see `sandbox::trash`); the rest of one depth is removed side by side, on up to
/// [`PLACEHOLDER_REMOVERS`] threads: on a journalling filesystem under load each `rmdir`
/// can wait milliseconds for the journal, and these waits then overlap instead of adding
/// up.
pub(crate) fn remove_placeholders(placeholders: &[Placeholder], trash: Option<&Trash>) {
    let mut sorted: Vec<&Placeholder> = placeholders.iter().collect();
    let depth = |p: &Placeholder| p.path.components().count();
    sorted.sort_by_key(|p| std::cmp::Reverse(depth(p)));
    for level in sorted.chunk_by(|a, b| depth(a) == depth(b)) {
        // Directories go to the trash one after the other (a rename each); what it does
        // not take is removed side by side.
        let moved = |p: &&Placeholder| {
            p.kind == PlaceholderKind::Dir && trash.is_some_and(|t| t.take(p) == Taken::Done)
        };
        let level: Vec<&Placeholder> = level.iter().copied().filter(|p| !moved(p)).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let remove = || {
            while let Some(p) = level.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                p.remove();
            }
        };
        std::thread::scope(|s| {
            for _ in 1..level.len().min(PLACEHOLDER_REMOVERS) {
                // A thread that cannot be started: the others (and this one) take its share.
                if std::thread::Builder::new().spawn_scoped(s, remove).is_err() {
                    break;
                }
            }
            remove();
        });
    }
}

/// Threads that remove one depth's placeholders at most.
const PLACEHOLDER_REMOVERS: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::PlaceholderKind;
    use std::os::unix::fs::MetadataExt;

    fn placeholder_dir(path: &Path) -> Placeholder {
        fs::create_dir(path).unwrap();
        let meta = fs::symlink_metadata(path).unwrap();
        Placeholder {
            path: path.to_path_buf(),
            kind: PlaceholderKind::Dir,
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    struct Fx {
        _dir: tempfile::TempDir,
        state: PathBuf,
        ws: PathBuf,
    }

    /// A new directory in `parent` whose lock file is none of those of `avoid` and its
    /// ancestors: two directories sharing a lock file make a removal wait on purpose,
    /// which the tests of independent trees must not meet by chance.
    fn dir_apart(parent: &Path, prefix: &str, avoid: &Path) -> PathBuf {
        let taken: Vec<u64> = avoid.ancestors().map(lock_slot).collect();
        // A lock file follows the inode: make directories until one lands apart (those
        // that did not stay, so that their inodes are not handed out again).
        (0..)
            .map(|n| parent.join(format!("{prefix}{n}")))
            .find(|d| {
                fs::create_dir(d).unwrap();
                !taken.contains(&lock_slot(d))
            })
            .unwrap()
    }

    fn fx() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let ws = root.join("ws");
        fs::create_dir_all(&ws).unwrap();
        Fx {
            _dir: dir,
            state: root.join("state"),
            ws,
        }
    }

    #[test]
    fn released_placeholder_directories_go_to_the_trash() {
        let fx = fx();
        let lease = PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).unwrap();
        let p = placeholder_dir(&fx.ws.join(".claude"));
        lease.register(std::slice::from_ref(&p)).unwrap();
        lease.release();
        assert!(!fx.ws.join(".claude").exists());
        let trash = fx.state.join(LEASE_DIR).join("trash");
        assert!(trash.join(format!("{:x}-{:x}", p.dev, p.ino)).is_dir());
    }

    #[test]
    fn the_run_that_ends_last_removes_what_the_first_made() {
        let fx = fx();
        let first = PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).unwrap();
        first
            .register(&[placeholder_dir(&fx.ws.join(".claude"))])
            .unwrap();
        let second = PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).unwrap();
        first.release();
        assert!(fx.ws.join(".claude").is_dir(), "a live run still holds it");
        second.release();
        assert!(!fx.ws.join(".claude").exists());
    }

    #[test]
    fn a_run_in_an_enclosing_or_a_nested_tree_holds_the_placeholders_too() {
        let fx = fx();
        let sub = dir_apart(&fx.ws, "sub", &fx.ws);
        // A run of the whole workspace keeps a placeholder inside `sub` that a run of
        // `sub` made, and a run of `sub` keeps those inside `sub` only.
        let outer = PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).unwrap();
        let inner = PlaceholderLease::take(&fx.state, std::slice::from_ref(&sub)).unwrap();
        inner
            .register(&[placeholder_dir(&sub.join(".vscode"))])
            .unwrap();
        outer
            .register(&[placeholder_dir(&fx.ws.join(".envrc"))])
            .unwrap();
        inner.release();
        assert!(
            sub.join(".vscode").is_dir(),
            "the outer run's tree holds it"
        );
        let again = PlaceholderLease::take(&fx.state, std::slice::from_ref(&sub)).unwrap();
        outer.release();
        assert!(
            !fx.ws.join(".envrc").exists(),
            "outside the nested run's tree"
        );
        assert!(sub.join(".vscode").is_dir(), "inside the nested run's tree");
        again.release();
        assert!(!sub.join(".vscode").exists());
    }

    #[test]
    fn a_sibling_tree_does_not_hold_them() {
        let fx = fx();
        let other = dir_apart(fx.ws.parent().unwrap(), "other", &fx.ws);
        let run = PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).unwrap();
        let sibling = PlaceholderLease::take(&fx.state, std::slice::from_ref(&other)).unwrap();
        run.register(&[placeholder_dir(&fx.ws.join(".idea"))])
            .unwrap();
        run.release();
        assert!(!fx.ws.join(".idea").exists());
        sibling.release();
    }

    /// A new directory in `parent` whose lock file is that of `twin` (a directory made
    /// for each try, kept, so that inodes are not handed out again).
    fn dir_sharing_lock_file(parent: &Path, twin: &Path) -> PathBuf {
        let slot = lock_slot(twin);
        (0..)
            .map(|n| parent.join(format!("twin{n}")))
            .find(|d| {
                fs::create_dir(d).unwrap();
                lock_slot(d) == slot
            })
            .unwrap()
    }

    #[test]
    fn two_trees_on_one_lock_file_both_lose_their_placeholders_when_no_run_holds_them() {
        // The fresh CI machine's flake: one release met two directories hashed onto the
        // same lock file and refused itself the second lock.
        let fx = fx();
        let twin = dir_sharing_lock_file(fx.ws.parent().unwrap(), &fx.ws);
        let run = PlaceholderLease::take(&fx.state, &[fx.ws.clone(), twin.clone()]).unwrap();
        run.register(&[
            placeholder_dir(&fx.ws.join(".claude")),
            placeholder_dir(&twin.join(".claude")),
        ])
        .unwrap();
        run.release();
        assert!(!fx.ws.join(".claude").exists());
        assert!(!twin.join(".claude").exists());
    }

    #[test]
    fn a_run_waits_while_placeholders_are_being_removed_and_then_gives_up() {
        let fx = fx();
        let first = PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).unwrap();
        drop(first);
        let held = Flock::lock(
            open_lock_file(&fx.state.join(LEASE_DIR), &fx.ws).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        let file = open_lock_file(&fx.state.join(LEASE_DIR), &fx.ws).unwrap();
        let soon = Instant::now() + Duration::from_millis(30);
        assert_eq!(
            lock_until(file, FlockArg::LockSharedNonblock, soon).err(),
            Some(nix::errno::Errno::EWOULDBLOCK)
        );
        drop(held);
        assert!(PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).is_ok());
    }

    #[test]
    fn a_shorter_registry_is_written_over_the_longer_one_in_place() {
        let fx = fx();
        let run = PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).unwrap();
        let long = [
            placeholder_dir(&fx.ws.join(".claude")),
            placeholder_dir(&fx.ws.join(".vscode")),
        ];
        run.register(&long).unwrap();
        let path = fx.state.join(LEASE_DIR).join(REGISTRY);
        let before = fs::symlink_metadata(&path).unwrap();
        let mut registry = Registry::open(&fx.state.join(LEASE_DIR)).unwrap();
        registry.entries.truncate(1);
        registry.save().unwrap();
        drop(registry);
        let after = fs::symlink_metadata(&path).unwrap();
        assert_eq!(after.ino(), before.ino(), "written in place");
        let text = fs::read(&path).unwrap();
        assert_eq!(
            text,
            serde_json::to_vec(&long[..1]).unwrap(),
            "no blanks left"
        );
        // What the file holds between the padded write and the cut parses as the new list.
        fs::write(&path, [&text[..], b"      "].concat()).unwrap();
        let registry = Registry::open(&fx.state.join(LEASE_DIR)).unwrap();
        assert_eq!(registry.entries, long[..1]);
    }

    #[test]
    fn a_registered_name_that_is_no_longer_the_placeholder_is_left_alone() {
        let fx = fx();
        let run = PlaceholderLease::take(&fx.state, std::slice::from_ref(&fx.ws)).unwrap();
        run.register(&[placeholder_dir(&fx.ws.join(".claude"))])
            .unwrap();
        fs::write(fx.ws.join(".claude/settings.json"), "{}").unwrap();
        run.release();
        assert!(fx.ws.join(".claude/settings.json").exists());
        let registry = fs::read(fx.state.join(LEASE_DIR).join(REGISTRY)).unwrap();
        assert_eq!(registry, b"[]", "tried once, then forgotten");
    }
}
