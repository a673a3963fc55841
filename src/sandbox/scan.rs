//! Finding what must be masked or protected: files matching the non-accessible globs
//! (secrets), the protected globs (tool configs the user's own programs run), and every git
//! dir's `config`, `config.worktree`, `commondir`, `hooks/`, `info/`, `remotes/` and
//! `branches/`.
//!
//! The walk starts from a directory *descriptor* and goes down with `openat`-style calls
//! that refuse symlinks, so renaming or swapping a directory on the path while it runs
//! cannot redirect it; names are bytes throughout (a non-UTF-8 name is matched and masked
//! like any other). Globs match case-insensitively (`APP.PEM` is as secret as `app.pem`).
//! The walk never follows symlinks and ignores `.gitignore` (secrets are usually ignored
//! files). It is a snapshot taken right before the agent starts; files created later are
//! the agent's own. A snapshot of a tree that held still: every directory the walk relied
//! on is checked to be unchanged at its end, or the scan is taken again
//! ([`super::scan_watch`]), because a directory moved across the walk would escape it.
//! Depth and match count are capped, and a scan over a cap is an error, because a
//! partial list of secrets is worse than none: it looks like protection.
//!
//! Cost: a plain file whose name matches nothing is known from the directory listing's
//! `d_type` alone (no `stat`), which is most of a big tree; other names (hard links) of a
//! masked secret are then found by a second walk that runs only when a secret has more
//! than one link ([`skips_stat`], [`other_names`]).
//! A directory an earlier run listed and that has not changed since is not listed again:
//! its entries that need a look come from [`super::listing_cache`], and one with none is
//! not even opened.
//!
//! What is read here (a `.git` file's `gitdir:`, a `commondir`) only ever *adds*
//! protection; it never widens a grant (DESIGN §5). A protected name that does not exist
//! yet gets a placeholder (an empty directory, or inside a git dir a symlink to a path
//! that can never exist, which git reads as "absent") so that a mount can make it
//! un-creatable; placeholders are removed after the run ([`Placeholder::remove`]).

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};

use serde::{Deserialize, Serialize};

use super::config_text::{self, CommandWord, include_paths};
pub(crate) use super::listing::Kind;
use super::listing::{DirSummary, ScanListings, ctime_of, is_git_dir_listing, is_git_name};
use super::listing_cache::{Kept, KeptDir, Recorder, TreeKept};
use super::scan_watch::{CheckedTree, ScanWatch, TreeMoved};
use super::{GlobList, SandboxError};

/// A child name no real file has: a directory is a container of secrets when this
/// hypothetical child of it would match (`secrets/` for `**/secrets/**`).
pub(crate) const PROBE_CHILD: &str = "\u{1}coder-probe";

/// Where a placeholder symlink points: a path below a character device, which can never
/// exist (every lookup fails with `ENOTDIR`, which git treats as a missing file).
pub const ABSENT_TARGET: &str = "/dev/null/coder-absent";

/// Files in every git dir that a later, unconfined `git` reads as code or as a pointer to
/// code. Absent ones get a placeholder symlink (git reads it as absent), except
/// `commondir`, whose mere existence git checks with `lstat`: it gets [`COMMONDIR_SELF`].
const GIT_GUARDED_FILES: [(&str, PlaceholderKind); 3] = [
    ("config", PlaceholderKind::Symlink),
    ("config.worktree", PlaceholderKind::Symlink),
    ("commondir", PlaceholderKind::CommonDirSelf),
];

/// The content of a placeholder `commondir`: the common dir is the git dir itself, which
/// is what a missing `commondir` means.
pub const COMMONDIR_SELF: &[u8] = b".\n";
/// Directories in every git dir with the same role; absent ones are created (git would).
/// `remotes/` and `branches/` are git's legacy remote definitions: a file there names where
/// `git fetch NAME` and `git push NAME` go for a remote the config does not define.
const GIT_GUARDED_DIRS: [&str; 4] = ["hooks", "info", "remotes", "branches"];

/// How a masked path is covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskKind {
    /// An empty read-only file is bind-mounted over the file: it reads as empty, cannot be
    /// written, removed, renamed or linked.
    Empty,
    /// The path is bind-mounted over itself read-only: visible, unchangeable. Used for
    /// directories of secrets (whose files are masked one by one), git dirs' hooks and
    /// config, and protected tool configs.
    ReadOnly,
    /// The path is bind-mounted over itself, still writable: its contents can change but
    /// the name cannot be removed, renamed or replaced (a mount point is busy). Used for
    /// `.git` directories, whose objects, refs and index must stay writable.
    Pin,
}

/// One mount to apply over a path found by the scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mask {
    /// Canonical absolute path.
    #[serde(with = "super::bytes")]
    pub path: PathBuf,
    pub kind: MaskKind,
    pub is_dir: bool,
    /// Device and inode seen by the scan; the mount is refused if they changed since.
    pub dev: u64,
    pub ino: u64,
    /// True for files hidden because they match a non-accessible glob (as opposed to
    /// protected read-only).
    pub secret: bool,
}

/// What coder created for a protected name that did not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceholderKind {
    /// An empty directory.
    Dir,
    /// A symlink to [`ABSENT_TARGET`].
    Symlink,
    /// A `commondir` file holding `COMMONDIR_SELF`.
    CommonDirSelf,
}

/// A name coder created so that a mount can cover it; removed after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placeholder {
    #[serde(with = "super::bytes")]
    pub path: PathBuf,
    pub kind: PlaceholderKind,
    pub dev: u64,
    pub ino: u64,
}

impl Placeholder {
    /// Remove the placeholder if it is still what coder made (same inode; an empty
    /// directory or a symlink to [`ABSENT_TARGET`]). Anything else is left alone.
    pub fn remove(&self) {
        let Ok(meta) = fs::symlink_metadata(&self.path) else {
            return;
        };
        if meta.dev() != self.dev || meta.ino() != self.ino {
            return;
        }
        match self.kind {
            // rmdir removes only an empty directory.
            PlaceholderKind::Dir => {
                let _ = fs::remove_dir(&self.path);
            }
            PlaceholderKind::Symlink => {
                if fs::read_link(&self.path).is_ok_and(|t| t == Path::new(ABSENT_TARGET)) {
                    let _ = fs::remove_file(&self.path);
                }
            }
            PlaceholderKind::CommonDirSelf => {
                if meta.is_file() && fs::read(&self.path).is_ok_and(|t| t == COMMONDIR_SELF) {
                    let _ = fs::remove_file(&self.path);
                }
            }
        }
    }
}

/// Caps on the secret scan. Over a cap the scan fails closed instead of guessing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanLimits {
    /// Deepest directory level walked below a scanned root.
    pub max_depth: usize,
    /// Most masks (files and directories) one policy may carry.
    pub max_matches: usize,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits {
            max_depth: 64,
            max_matches: 8192,
        }
    }
}

/// One tree to scan: a granted root, open as a directory descriptor.
pub(crate) struct TreeScan<'a> {
    /// Canonical absolute path of the root (for the masks' paths and messages).
    pub root: &'a Path,
    /// The root itself, opened once by the caller.
    pub fd: BorrowedFd<'a>,
    /// The agent may write here: git dirs are guarded and placeholders made.
    pub writable: bool,
    /// Protected globs, relative to this root (every tree the agent may write).
    pub protect: Option<&'a GlobSet>,
    /// The literal protected names to hold even when absent (see [`literal_protected`]).
    pub protect_literal: &'a [PathBuf],
    /// This tree's listings kept from the last run ([`super::listing_cache`]).
    pub kept: Option<&'a TreeKept>,
}

/// What a scan found.
#[derive(Debug, Default)]
pub(crate) struct ScanOutput {
    pub masks: Vec<Mask>,
    pub placeholders: Vec<Placeholder>,
    /// Things the user should know (a git dir outside the workspace, ...).
    pub warnings: Vec<String>,
    /// Device and inode of every git dir guarded, and of every `.git` file or symlink
    /// held read-only: what the end-of-run git guard knows to be the user's.
    pub git_known: Vec<(u64, u64)>,
    /// The listings of the writable trees' directories, for the end-of-run git guard.
    pub listings: ScanListings,
    /// The listings the next run may reuse, per tree ([`super::listing_cache`]).
    pub kept: Kept,
    /// (dev, ino) of secret files masked whole that have other names (hard links): the
    /// walk skips `stat` for plain files, so their other names are found by
    /// [`other_names`] afterwards.
    linked_secrets: HashSet<(u64, u64)>,
    /// Paths git configs include (as named, with their include depth) that lie outside
    /// the tree whose walk met them: the writable tree that holds them guards them once
    /// every tree is walked ([`guard_foreign_includes`]).
    foreign_includes: Vec<ForeignName>,
    /// Directories the walk could not enter and the agent cannot either
    /// ([`out_of_reach`]): not scanned, named in one warning.
    out_of_reach: Vec<PathBuf>,
    /// Directories pinned by this part of the walk ([`Walker::pin_dirs_down_to`]): the
    /// directories above many protected entries are pinned once, not once per entry
    /// (each pin counts against the cap on masks).
    pinned: HashSet<PathBuf>,
    /// What files git reads as config or runs as hooks from outside every tree (the hooks
    /// and configs of a repository a workspace is a subdirectory or linked worktree of,
    /// the user's global config, an included file elsewhere) have in the trees: other
    /// names (hard links) and, for hooks, symlinks, held by [`guard_held_links`] as those
    /// of a held directory.
    outside_held: HeldLook,
    /// (dev, ino) of the files of the home directory's never-visible entries (`~/.ssh`,
    /// …) that have more than one name ([`super::home::linked_never_visible`]): their
    /// names in the trees are masked as secrets.
    linked_home_keys: HashSet<(u64, u64)>,
}

/// Scans of trees that kept changing under them before coder gives up.
const SCAN_ATTEMPTS: usize = 3;

/// Scan `trees` for secrets (`deny`), protected names and git dirs, again when a
/// directory moved while they were read ([`super::scan_watch`]): what is returned was
/// read from trees that held still.
///
/// Every placeholder made, by any attempt and whatever the outcome, is moved to `created`:
/// only the caller may remove them, once no other run can be relying on them
/// ([`super::lease`]). A later attempt finds an earlier one's placeholders as ordinary
/// names and masks them as such.
pub(crate) fn scan_trees(
    trees: &[TreeScan<'_>],
    deny: &GlobSet,
    limits: ScanLimits,
    created: &mut Vec<Placeholder>,
) -> Result<ScanOutput, SandboxError> {
    let checked: Vec<CheckedTree<'_>> = trees
        .iter()
        .map(|t| CheckedTree {
            root: t.root,
            fd: t.fd,
        })
        .collect();
    // Read once: the agent cannot reach these files, so they hold still across attempts.
    let mut home_keys = HashSet::new();
    for home in super::policy::homes_here() {
        let places = super::policy::never_visible_places(&home);
        home_keys.extend(super::home::linked_never_visible(&places)?);
    }
    let mut attempt = 1;
    loop {
        let mut out = ScanOutput {
            linked_home_keys: home_keys.clone(),
            listings: ScanListings::starting_now(),
            ..ScanOutput::default()
        };
        let watch = ScanWatch::new(out.listings.trusted_before())?;
        let scanned = scan_once(trees, deny, limits, &watch, &mut out);
        created.append(&mut out.placeholders);
        let moved = match scanned {
            Ok(()) => {
                crate::phases::mark("scan.walked");
                let matters = |tree: usize, rel: &Path, is_dir: bool| {
                    new_entry_matters(&trees[tree], deny, rel, is_dir)
                };
                let checked = watch.check(&checked, matters);
                watch.release();
                match checked {
                    Ok(()) => return Ok(out),
                    Err(moved) => moved,
                }
            }
            Err(e) => match raced(&e) {
                Some(moved) => moved,
                None => return Err(e),
            },
        };
        if attempt == SCAN_ATTEMPTS {
            return Err(SandboxError::TreeMoving {
                path: moved.path,
                what: moved.what,
                attempts: attempt,
            });
        }
        attempt += 1;
    }
}

/// A walk that failed because what it had listed was no longer there (gone, or now a
/// symlink or a file), or because `openat2` met a rename on its way (`EAGAIN`, and
/// `EXDEV` for a path that a rename took out from beneath its directory): the tree
/// changed under it.
fn raced(e: &SandboxError) -> Option<TreeMoved> {
    match e {
        SandboxError::Syscall {
            errno: Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EAGAIN | Errno::EXDEV,
            path,
            ..
        } => Some(TreeMoved {
            path: PathBuf::from(path),
            what: "moved",
        }),
        _ => None,
    }
}

/// Whether an entry that appeared at `rel` during the scan could change what it finds
/// (outside secret and protected directories, where every entry does): a directory,
/// a name git or a glob acts on. A plain file named like nothing is just a file.
fn new_entry_matters(tree: &TreeScan<'_>, deny: &GlobSet, rel: &Path, is_dir: bool) -> bool {
    is_dir
        || rel
            .file_name()
            .is_some_and(|name| is_git_name(&name.to_os_string()))
        || deny.is_match(rel)
        || tree.protect.is_some_and(|set| is_protected(set, rel))
}

/// One scan of `trees`, every directory it relies on witnessed by `watch`.
fn scan_once(
    trees: &[TreeScan<'_>],
    deny: &GlobSet,
    limits: ScanLimits,
    watch: &ScanWatch,
    out: &mut ScanOutput,
) -> Result<(), SandboxError> {
    let mut linked = HashMap::new();
    let mut symlinks = Vec::new();
    for (index, tree) in trees.iter().enumerate() {
        let watch = TreeWatch { watch, tree: index };
        let mut kept = Recorder::new(out.listings.trusted_before());
        for part in walk_in_parallel(tree, deny, limits, &out.listings, watch)? {
            out.absorb(part.out, limits, tree.root)?;
            kept.absorb(part.recorder);
            for (id, names) in part.linked {
                linked.entry(id).or_insert_with(Vec::new).extend(names);
            }
            symlinks.extend(part.symlinks);
        }
        out.kept.trees.push(kept.into_tree());
        if tree.writable {
            let mut walker = Walker {
                tree,
                deny,
                limits,
                out,
                linked: &mut linked,
                symlinks: &mut symlinks,
                queue: None,
                recorder: None,
                watch: Some(watch),
            };
            walker.hold_absent_protected()?;
            walker.guard_enclosing_includes()?;
        }
    }
    let late = LateWalks {
        trees,
        deny,
        limits,
        watch,
    };
    guard_foreign_includes(&late, out, &mut linked, &mut symlinks)?;
    if let Some(warning) = out_of_reach_warning(&mut out.out_of_reach) {
        out.warnings.push(warning);
    }
    let held = guard_held_links(&late, out, &mut linked, &mut symlinks)?;
    // The threads finish in any order: sort what reaches the user or the masks' order.
    out.warnings.sort();
    out.warnings.dedup();
    symlinks.sort();
    for names in linked.values_mut() {
        names.sort();
    }
    let mut scan = LinkPass { out, limits };
    scan.follow_symlinks(trees, deny, symlinks)?;
    if !scan.out.out_of_reach.is_empty() {
        for (path, st, root) in names_out_of_sight(trees, limits)? {
            let hidden = mask(path, MaskKind::Empty, &st, true);
            match scan.out.masks.iter_mut().find(|m| m.path == hidden.path) {
                // Held read-only (a protected name): still readable, so hidden instead.
                Some(held) => *held = hidden,
                None => push_mask(scan.out, limits, hidden, &root)?,
            }
        }
    }
    let keys = std::mem::take(&mut scan.out.linked_home_keys);
    if !scan.out.linked_secrets.is_empty() || !held.is_empty() || !keys.is_empty() {
        let mut wanted: HashSet<(u64, u64)> =
            scan.out.linked_secrets.union(&held).copied().collect();
        wanted.extend(&keys);
        linked = other_names(trees, &wanted, limits)?;
    }
    scan.mask_home_keys(&linked, &keys, trees)?;
    scan.add_hard_links(&linked);
    scan.hold_other_names(&linked, &held);
    Ok(())
}

/// What the guards that run once every tree is walked ([`guard_foreign_includes`],
/// [`guard_held_links`]) need of the scan: each hands a path met in one tree to every
/// writable tree, whose walker holds it when it is that tree's.
struct LateWalks<'s, 'a> {
    trees: &'s [TreeScan<'a>],
    deny: &'s GlobSet,
    limits: ScanLimits,
    watch: &'s ScanWatch,
}

impl LateWalks<'_, '_> {
    /// Runs `guard` with a walker of each writable tree in turn.
    fn in_each_writable_tree(
        &self,
        out: &mut ScanOutput,
        linked: &mut HashMap<(u64, u64), Vec<PathBuf>>,
        symlinks: &mut Vec<PathBuf>,
        mut guard: impl FnMut(&mut Walker<'_, '_>) -> Result<(), SandboxError>,
    ) -> Result<(), SandboxError> {
        for (index, tree) in self.trees.iter().enumerate().filter(|(_, t)| t.writable) {
            let mut walker = Walker {
                tree,
                deny: self.deny,
                limits: self.limits,
                out: &mut *out,
                linked: &mut *linked,
                symlinks: &mut *symlinks,
                queue: None,
                recorder: None,
                watch: Some(TreeWatch {
                    watch: self.watch,
                    tree: index,
                }),
            };
            guard(&mut walker)?;
        }
        Ok(())
    }
}

/// The included paths that lay outside the tree whose git config named them (an include
/// of a file in a `--write` directory), guarded by the writable tree that holds them:
/// each path once, in every writable tree (a tree that does not hold it passes it on,
/// and it is not taken again); what those files include in turn, the same way.
fn guard_foreign_includes(
    late: &LateWalks<'_, '_>,
    out: &mut ScanOutput,
    linked: &mut HashMap<(u64, u64), Vec<PathBuf>>,
    symlinks: &mut Vec<PathBuf>,
) -> Result<(), SandboxError> {
    let mut taken = HashSet::new();
    loop {
        let pending: Vec<ForeignName> = std::mem::take(&mut out.foreign_includes)
            .into_iter()
            .filter(|name| taken.insert(name.target.clone()))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        if taken.len() > MAX_INCLUDED {
            return Err(SandboxError::ScanLimit {
                what: "the number of files git configs include",
                limit: MAX_INCLUDED,
                path: pending[0].target.clone(),
            });
        }
        late.in_each_writable_tree(out, linked, symlinks, |walker| {
            let mut walk = ConfigWalk::new(None);
            for name in &pending {
                walk.work_tree.clone_from(&name.work_tree);
                walker.guard_include(&name.target, name.depth, &mut walk, name.named_by)?;
            }
            Ok(())
        })?;
    }
}

/// What the symlinks inside directories held read-only lead to, held as an included file
/// is ([`Walker::guard_include`], without reading it as a git config): the file read-only,
/// each link and directory on the way guarded, a missing one held absent. A hook installed
/// the usual way (`.git/hooks/pre-commit -> ../../tools/pre-commit`) was the agent's to
/// write through `tools/pre-commit`, and the user's next `git commit` ran what it wrote
/// (round seventeen's second review). A held directory a link leads to is looked into in
/// turn, each link once. Returns the held files with other names
/// ([`held_with_other_names`]), of what was held before and of what this held.
fn guard_held_links(
    late: &LateWalks<'_, '_>,
    out: &mut ScanOutput,
    linked: &mut HashMap<(u64, u64), Vec<PathBuf>>,
    symlinks: &mut Vec<PathBuf>,
) -> Result<HashSet<(u64, u64)>, SandboxError> {
    let (trees, limits) = (late.trees, late.limits);
    let mut look = held_with_other_names(trees, &out.masks, limits)?;
    let outside = std::mem::take(&mut out.outside_held);
    look.linked.extend(outside.linked);
    look.links.extend(outside.links);
    let mut held = std::mem::take(&mut look.linked);
    let mut taken = HashSet::new();
    loop {
        let pending: Vec<PathBuf> = std::mem::take(&mut look.links)
            .into_iter()
            .filter(|link| taken.insert(link.clone()))
            .collect();
        if pending.is_empty() {
            return Ok(held);
        }
        if taken.len() > MAX_HELD_ENTRIES {
            return Err(SandboxError::ScanLimit {
                what: "the number of entries in directories held read-only",
                limit: MAX_HELD_ENTRIES,
                path: pending[0].clone(),
            });
        }
        let from = out.masks.len();
        late.in_each_writable_tree(out, linked, symlinks, |walker| {
            let mut walk = ConfigWalk::new(None);
            for link in &pending {
                walker.guard_include(link, 0, &mut walk, NamedBy::Link)?;
            }
            Ok(())
        })?;
        look = held_with_other_names(trees, &out.masks[from..], limits)?;
        held.extend(std::mem::take(&mut look.linked));
    }
}

impl ScanOutput {
    /// Take in what one of the walk's threads found; the cap on matches holds for the sum.
    fn absorb(
        &mut self,
        part: ScanOutput,
        limits: ScanLimits,
        root: &Path,
    ) -> Result<(), SandboxError> {
        self.masks.extend(part.masks);
        if self.masks.len() > limits.max_matches {
            return Err(over_the_match_cap(limits, root));
        }
        self.placeholders.extend(part.placeholders);
        self.warnings.extend(part.warnings);
        self.git_known.extend(part.git_known);
        self.listings.absorb(part.listings);
        self.linked_secrets.extend(part.linked_secrets);
        self.foreign_includes.extend(part.foreign_includes);
        self.pinned.extend(part.pinned);
        self.out_of_reach.extend(part.out_of_reach);
        Ok(())
    }
}

/// What one thread of the walk found.
struct WalkPart {
    out: ScanOutput,
    recorder: Recorder,
    linked: HashMap<(u64, u64), Vec<PathBuf>>,
    symlinks: Vec<PathBuf>,
}

/// Directories waiting in the queue before the calling thread, which walks alone until
/// then, starts the others. A small tree (an empty workspace, a `--read` dir of a few
/// files) is walked without starting a thread: on a loaded machine a new thread can wait
/// milliseconds to be scheduled, and the walk's end waited for it even when it found
/// nothing left to do. A big tree reaches this within its first few listings.
const WALK_HELP_AFTER: usize = 16;

fn walk_in_parallel(
    tree: &TreeScan<'_>,
    deny: &GlobSet,
    limits: ScanLimits,
    listings: &ScanListings,
    watch: TreeWatch<'_>,
) -> Result<Vec<WalkPart>, SandboxError> {
    let top =
        open_dir_beneath(tree.fd, Path::new(".")).map_err(|e| walk_error(tree.root, "open", e))?;
    let st = fstat(top.as_fd()).map_err(|e| walk_error(tree.root, "inspect", e))?;
    let queue = Queue::new(Task {
        dir: TaskDir::Open(top),
        st,
        rel: PathBuf::new(),
        depth: 0,
        inside: Inside::default(),
    });
    let worker = |help: &dyn Fn(&Queue)| {
        let mut part = WalkPart {
            out: ScanOutput {
                listings: listings.empty_like(),
                ..ScanOutput::default()
            },
            recorder: Recorder::new(listings.trusted_before()),
            linked: HashMap::new(),
            symlinks: Vec::new(),
        };
        let mut walker = Walker {
            tree,
            deny,
            limits,
            out: &mut part.out,
            linked: &mut part.linked,
            symlinks: &mut part.symlinks,
            queue: Some(&queue),
            recorder: Some(&mut part.recorder),
            watch: Some(watch),
        };
        while let Some(task) = queue.next() {
            let result = walker.task(task);
            queue.done(result.is_err());
            result?;
            help(&queue);
        }
        Ok(part)
    };
    let results: Vec<Result<WalkPart, SandboxError>> = std::thread::scope(|scope| {
        let others = std::cell::RefCell::new(Vec::new());
        let started = std::cell::Cell::new(false);
        let help = |queue: &Queue| {
            if started.get() || queue.waiting() < WALK_HELP_AFTER {
                return;
            }
            started.set(true);
            let mut others = others.borrow_mut();
            for _ in 1..super::sys::walk_threads() {
                // A thread that cannot be started: the ones running take its share.
                match std::thread::Builder::new().spawn_scoped(scope, || worker(&|_| {})) {
                    Ok(handle) => others.push(handle),
                    Err(_) => break,
                }
            }
        };
        let mut results = vec![worker(&help)];
        for handle in others.take() {
            results.push(handle.join().unwrap_or_else(|_| {
                Err(SandboxError::io(
                    format!("scan {}", tree.root.display()),
                    std::io::Error::other("a walk thread panicked"),
                ))
            }));
        }
        results
    });
    results.into_iter().collect()
}

/// A directory waiting to be walked.
struct Task {
    dir: TaskDir,
    /// The directory's `stat`, as its parent saw it.
    st: FileStat,
    rel: PathBuf,
    depth: usize,
    inside: Inside,
}

enum TaskDir {
    /// A tree's top, already open.
    Open(OwnedFd),
    /// A name in a directory already listed (opened when the task is taken, so that
    /// waiting directories hold no descriptor of their own).
    Child(Arc<OwnedFd>, OsString),
}

/// The walk's shared queue: tasks, how many are being worked on, and whether one failed.
/// A thread that finds the queue empty waits while another may still add to it.
struct Queue {
    state: Mutex<QueueState>,
    changed: Condvar,
    /// Masks pushed by all threads (the cap on matches is for the whole tree).
    matches: AtomicUsize,
}

struct QueueState {
    tasks: Vec<Task>,
    busy: usize,
    failed: bool,
}

impl Queue {
    fn new(first: Task) -> Queue {
        Queue {
            state: Mutex::new(QueueState {
                tasks: vec![first],
                busy: 0,
                failed: false,
            }),
            changed: Condvar::new(),
            matches: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, task: Task) {
        self.lock().tasks.push(task);
        self.changed.notify_one();
    }

    /// The next directory to walk; `None` when the walk is over (or failed).
    fn next(&self) -> Option<Task> {
        let mut state = self.lock();
        loop {
            if state.failed {
                return None;
            }
            if let Some(task) = state.tasks.pop() {
                state.busy += 1;
                return Some(task);
            }
            if state.busy == 0 {
                return None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// How many directories wait to be walked.
    fn waiting(&self) -> usize {
        self.lock().tasks.len()
    }

    /// A task taken with [`Queue::next`] is finished (its subdirectories queued).
    fn done(&self, failed: bool) {
        let mut state = self.lock();
        state.busy -= 1;
        state.failed |= failed;
        if state.busy == 0 || failed {
            self.changed.notify_all();
        }
    }
}

/// What the walk is inside of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Inside {
    /// A directory of secrets: every file below is masked.
    secret: bool,
    /// A protected directory (mounted read-only as a whole).
    protected: bool,
}

struct Walker<'a, 'b> {
    tree: &'b TreeScan<'a>,
    deny: &'b GlobSet,
    limits: ScanLimits,
    out: &'b mut ScanOutput,
    /// Regular files with more than one link, by (dev, ino): other names of a secret.
    linked: &'b mut HashMap<(u64, u64), Vec<PathBuf>>,
    /// Symlinks whose name matched a glob; their targets are masked when in scope.
    symlinks: &'b mut Vec<PathBuf>,
    /// Where subdirectories go when several threads walk the tree; `None` walks them
    /// here, depth first.
    queue: Option<&'b Queue>,
    /// Where listings the next run may reuse go (`None`: walks of another shape than the
    /// tree's own, which are not kept).
    recorder: Option<&'b mut Recorder>,
    /// What shows the directories walked held still ([`super::scan_watch`]); `None` for
    /// walks that only add to what the tree's own walk found.
    watch: Option<TreeWatch<'b>>,
}

/// The scan's watch, and which of its trees a walker is in.
#[derive(Clone, Copy)]
struct TreeWatch<'b> {
    watch: &'b ScanWatch,
    tree: usize,
}

impl<'a> Walker<'a, '_> {
    /// Walk a directory taken from the queue.
    fn task(&mut self, task: Task) -> Result<(), SandboxError> {
        let (dir, path_only) = match task.dir {
            TaskDir::Open(fd) => (fd, false),
            TaskDir::Child(parent, name) => {
                let kept = (task.depth <= self.limits.max_depth)
                    .then(|| self.kept(&task.st, &task.rel, task.inside))
                    .flatten();
                // Kept from the last run, unchanged, and nothing in it needs a look: the
                // directory is not even opened.
                if let Some(kept) = kept
                    && kept.is_quiet()
                {
                    if let Some(w) = self.watch {
                        w.watch.kept(w.tree, &task.st, &task.rel);
                    }
                    self.reuse(&task.st, &task.rel, kept);
                    return Ok(());
                }
                // Kept but with entries to look at: those are looked up by name, so an
                // `O_PATH` descriptor will do (`walk` reopens it to list if the directory
                // changed after all).
                let flags = match kept {
                    Some(_) => OFlag::O_PATH | OFlag::O_DIRECTORY,
                    None => OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                };
                let fd = openat2(parent.as_fd(), Path::new(&name), beneath(flags))
                    .map_err(|e| walk_error(&self.tree.root.join(&task.rel), "open", e))?;
                (fd, kept.is_some())
            }
        };
        self.walk(dir, path_only, &task.rel, task.depth, task.inside)
    }

    /// The last run's listing of the directory `st` describes at `rel`, when it is still
    /// what the directory holds and this walk may use it.
    fn kept(&self, st: &FileStat, rel: &Path, inside: Inside) -> Option<&'a KeptDir> {
        let tree: Option<&'a TreeKept> = self.tree.kept;
        if inside != Inside::default() || self.recorder.is_none() {
            return None;
        }
        tree?.get(st, rel, self.out.listings.trusted_before())
    }

    /// Use a kept listing: for the git guard, and to keep for the next run.
    fn reuse(&mut self, st: &FileStat, rel: &Path, kept: &KeptDir) {
        if self.tree.writable {
            let path = self.tree.root.join(rel);
            self.out
                .listings
                .record_kept(st, &path, kept.summary.clone());
        }
        if let Some(recorder) = self.recorder.as_deref_mut() {
            recorder.carry(st, kept);
        }
    }

    /// Walk the directory open as `dir` (with `O_PATH` when `path_only`).
    fn walk(
        &mut self,
        dir: OwnedFd,
        path_only: bool,
        rel: &Path,
        depth: usize,
        inside: Inside,
    ) -> Result<(), SandboxError> {
        let here = self.tree.root.join(rel);
        if depth > self.limits.max_depth {
            return Err(SandboxError::ScanLimit {
                what: "the directory depth",
                limit: self.limits.max_depth,
                path: here,
            });
        }
        // Taken before the listing: a change while it is read moves the ctime past this.
        let st = fstat(dir.as_fd()).map_err(|e| walk_error(&here, "inspect", e))?;
        let (entries, git_dir, mut fresh) = match self.kept(&st, rel, inside) {
            Some(kept) => {
                if let Some(w) = self.watch {
                    w.watch.kept(w.tree, &st, rel);
                }
                self.reuse(&st, rel, kept);
                let entries = kept.attention.iter().map(|(n, k)| (n.clone(), Some(*k)));
                (entries.collect(), kept.summary.git_dir, None)
            }
            None => {
                // Opened `O_PATH` on the strength of a record that no longer holds:
                // reopen the same directory (its `fstat` above stays the one before the
                // listing) to read it.
                let readable = if path_only {
                    let fd = open_dir_beneath(dir.as_fd(), Path::new("."))
                        .map_err(|e| walk_error(&here, "open", e))?;
                    Some(fd)
                } else {
                    None
                };
                if let Some(w) = self.watch {
                    let special = inside != Inside::default();
                    w.watch
                        .before_listing(w.tree, dir.as_fd(), &st, rel, special, &here)?;
                }
                self.list(readable.as_ref().unwrap_or(&dir), &st, rel, &here)?
            }
        };
        let dir = Arc::new(dir);
        // A git dir not named `.git` (a bare repository, a separate git dir): git finds
        // it by discovery or through a `.git` file, so it is guarded like one.
        // (A `.git` directory was guarded when its parent met it.)
        let named_git = rel.file_name().is_some_and(|n| n == ".git");
        if self.tree.writable && !inside.secret && git_dir && !named_git {
            self.guard_git_dir(rel)?;
        }
        // Whether the directories down to this one are pinned (see below).
        let mut pinned = false;
        for (name, listed) in entries {
            let rel_child = rel.join(&name);
            let git_entry = name == ".git" && self.tree.writable && !inside.secret;
            let secret = inside.secret || self.deny.is_match(&rel_child);
            let protect = |p: &Path| self.tree.protect.is_some_and(|set| is_protected(set, p));
            let protected = !inside.protected && protect(&rel_child);
            if skips_stat(listed, git_entry, secret, protected) {
                continue;
            }
            if let (Some(fresh), Some(kind)) = (fresh.as_mut(), listed) {
                fresh.attention.push((name.clone(), kind));
            }
            let path = self.tree.root.join(&rel_child);
            let st = match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Gone since the listing: wherever it went in the trees, the directory it
                // entered reports it ([`super::scan_watch`]).
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(walk_error(&path, "inspect", e)),
            };
            let kind = file_kind(&st);
            // The directories above a protected entry are pinned (not renamed nor
            // removed): its read-only mount moves with a renamed parent, and the agent
            // renamed `tools` of `--protect 'tools/ci/**'`, made a `tools/ci` of its own
            // and wrote the protected file's name there (round seventeen's review).
            let holds = !secret
                && !inside.protected
                && (protected || (kind == Kind::Dir && protect(&rel_child.join(PROBE_CHILD))));
            if holds && !pinned && !rel.as_os_str().is_empty() {
                self.pin_dirs_down_to(rel)?;
                pinned = true;
            }
            if git_entry {
                self.git_entry(dir.as_fd(), &rel_child, &st)?;
                // A `.git` directory is walked for secrets too: a directory holding one,
                // moved into it (another agent may make a `.git` of its own, or rename a
                // directory to `.git`), would otherwise never be masked.
                if kind != Kind::Dir {
                    continue;
                }
            }
            match kind {
                Kind::Dir if out_of_reach(dir.as_fd(), &name, &st) => {
                    self.out.out_of_reach.push(path);
                }
                Kind::Dir => {
                    let child = || {
                        open_dir_beneath(dir.as_fd(), Path::new(&name))
                            .map_err(|e| walk_error(&path, "open", e))
                    };
                    let mut next = inside;
                    if inside.secret {
                    } else if secret || self.deny.is_match(rel_child.join(PROBE_CHILD)) {
                        self.push(mask(path.clone(), MaskKind::ReadOnly, &st, true))?;
                        next.secret = true;
                    } else if !inside.protected
                        && (protected || protect(&rel_child.join(PROBE_CHILD)))
                    {
                        self.push(mask(path.clone(), MaskKind::ReadOnly, &st, false))?;
                        next.protected = true;
                    }
                    match self.queue {
                        Some(queue) => queue.push(Task {
                            dir: TaskDir::Child(dir.clone(), name),
                            st,
                            rel: rel_child,
                            depth: depth + 1,
                            inside: next,
                        }),
                        None => self.walk(child()?, false, &rel_child, depth + 1, next)?,
                    }
                }
                Kind::File => {
                    if st.st_nlink > 1 {
                        self.linked
                            .entry((st.st_dev, st.st_ino))
                            .or_default()
                            .push(path.clone());
                    }
                    if secret {
                        if st.st_nlink > 1 {
                            self.out.linked_secrets.insert((st.st_dev, st.st_ino));
                        }
                        self.push(mask(path, MaskKind::Empty, &st, true))?;
                    } else if protected {
                        self.push(mask(path, MaskKind::ReadOnly, &st, false))?;
                    }
                }
                Kind::Symlink => {
                    if secret {
                        self.symlinks.push(path.clone());
                    }
                    if protected && !secret {
                        self.guard_link(path, &st)?;
                    }
                }
                Kind::Other => {}
            }
        }
        if let (Some(fresh), Some(recorder)) = (fresh, self.recorder.as_deref_mut())
            && inside == Inside::default()
        {
            recorder.record(dir.as_fd(), &st, fresh);
        }
        Ok(())
    }

    /// List `dir` (described by `st`, its `fstat` before the listing): its entries, whether
    /// git would take it for a git dir, and when every entry's type is known, the start of
    /// what the next run may reuse (the walk adds the entries it looks at). The git guard
    /// gets what it needs of the listing, so that it need not list the directory again
    /// when it is unchanged after the run ([`ScanListings`]).
    #[allow(clippy::type_complexity)]
    fn list(
        &mut self,
        dir: &OwnedFd,
        st: &FileStat,
        rel: &Path,
        here: &Path,
    ) -> Result<(Vec<(OsString, Option<Kind>)>, bool, Option<KeptDir>), SandboxError> {
        let entries = list_dir_kinds(dir).map_err(|e| walk_error(here, "list", e))?;
        let git_dir = is_git_dir_listing(entries.iter().map(|(n, _)| n));
        if !entries.iter().all(|(_, kind)| kind.is_some()) {
            return Ok((entries, git_dir, None));
        }
        let typed = entries
            .iter()
            .filter_map(|(name, kind)| kind.map(|k| (name, k)));
        let summary = DirSummary::of(typed);
        if self.tree.writable {
            self.out
                .listings
                .record(dir.as_fd(), st, here, summary.clone());
        }
        let fresh = KeptDir {
            rel: rel.to_path_buf(),
            ctime: ctime_of(st),
            summary,
            attention: Vec::new(),
        };
        Ok((entries, git_dir, Some(fresh)))
    }

    fn push(&mut self, mask: Mask) -> Result<(), SandboxError> {
        // The cap holds for all threads together, so the walk stops at the first match
        // over it, whichever thread finds it.
        if let Some(queue) = self.queue
            && queue.matches.fetch_add(1, Ordering::Relaxed) >= self.limits.max_matches
        {
            return Err(over_the_match_cap(self.limits, self.tree.root));
        }
        push_mask(self.out, self.limits, mask, self.tree.root)
    }

    /// A `.git` entry anywhere in a writable tree: the entry itself may not be removed,
    /// renamed or replaced, and the git dir it stands for is guarded.
    fn git_entry(
        &mut self,
        parent: BorrowedFd<'_>,
        rel: &Path,
        st: &FileStat,
    ) -> Result<(), SandboxError> {
        let path = self.tree.root.join(rel);
        let top = rel == Path::new(".git");
        let git_dir = match file_kind(st) {
            Kind::Dir => {
                self.push(mask(path.clone(), MaskKind::Pin, st, false))?;
                let is_git_dir = self.guard_git_dir(rel)?;
                self.nested_git_dirs(rel)?;
                if top {
                    self.check_commondir(&path, rel)?;
                }
                is_git_dir.then(|| path.clone())
            }
            Kind::File => {
                self.push(mask(path.clone(), MaskKind::ReadOnly, st, false))?;
                self.out.git_known.push((st.st_dev, st.st_ino));
                let target = read_gitfile(parent, &path)?;
                // Asked before the guard makes placeholders (a `commondir`) there.
                let is_git_dir = target.as_deref().is_some_and(is_git_dir_path);
                self.git_pointer(&path, target.clone(), top)?;
                target.filter(|_| is_git_dir)
            }
            Kind::Symlink => {
                self.push(mask(path.clone(), MaskKind::ReadOnly, st, false))?;
                self.out.git_known.push((st.st_dev, st.st_ino));
                let target = fs::canonicalize(&path).ok();
                // Asked before the guard makes placeholders (a `commondir`) there.
                let is_git_dir = target.as_deref().is_some_and(is_git_dir_path);
                self.git_pointer(&path, target.clone(), top)?;
                target.filter(|_| is_git_dir)
            }
            Kind::Other => None,
        };
        // The tree's own `.git` is [`Walker::guard_enclosing_includes`]'s.
        match (git_dir, path.parent()) {
            (Some(git_dir), Some(work_tree)) if !top => {
                self.guard_work_tree_commands(work_tree, &git_dir)
            }
            _ => Ok(()),
        }
    }

    /// The files of the work tree at `work_tree` (the directory of a `.git` in this tree)
    /// that the commands of every config its git reads run, read against its top: those
    /// of the git dir's own `config` and `config.worktree`, of its common dir's `config`
    /// (a linked worktree's `.git/worktrees/x` has none of its own), and of the user's
    /// global and system configs, with what they include ([`Walker::guard_includes`]). A
    /// git dir is read against the work tree of its own name only when it is `.git` or
    /// names one by `core.worktree` ([`Walker::guard_git_dir`]): the user's
    /// `~/.gitconfig` alias `!sh tools/fmt.sh` ran a nested repository's
    /// `sub/tools/fmt.sh`, the repository's own alias a linked worktree's
    /// `.worktrees/feat/tools/fmt.sh`, and a separate git dir's `core.fsmonitor` its work
    /// tree's script, each the agent's to write (round eighteen's second review).
    fn guard_work_tree_commands(
        &mut self,
        work_tree: &Path,
        git_dir: &Path,
    ) -> Result<(), SandboxError> {
        let Ok(top) = fs::canonicalize(work_tree) else {
            return Ok(());
        };
        let mut configs = vec![git_dir.join("config"), git_dir.join("config.worktree")];
        if let Some(text) = read_config(&git_dir.join("commondir")) {
            let common = git_dir.join(OsStr::from_bytes(trim_ascii(&text)));
            configs.push(common.join("config"));
        }
        configs.extend(user_git_configs());
        let mut walk = ConfigWalk::new(Some(top));
        for config in &configs {
            // Read through a link (a dotfiles `~/.gitconfig`), its includes against the
            // directory of the name git opens.
            let base = config.parent().unwrap_or(Path::new("/")).to_path_buf();
            let resolved = fs::canonicalize(config).unwrap_or_else(|_| config.clone());
            self.guard_includes(&resolved, &base, 0, &mut walk)?;
        }
        Ok(())
    }

    /// A `.git` file or symlink leads to `target`: guard it when it lies in this tree;
    /// for the workspace's own `.git`, say that git metadata elsewhere stays read-only.
    fn git_pointer(
        &mut self,
        entry: &Path,
        target: Option<PathBuf>,
        top: bool,
    ) -> Result<(), SandboxError> {
        let Some(target) = target else {
            return Ok(());
        };
        match target.strip_prefix(self.tree.root) {
            Ok(rel) if is_plain_relative(rel) && !rel.as_os_str().is_empty() => {
                let rel = rel.to_path_buf();
                if open_beneath(self.tree.fd, &rel, OFlag::O_PATH | OFlag::O_DIRECTORY).is_ok() {
                    self.guard_git_dir(&rel)?;
                    if top {
                        self.check_commondir(&target, &rel)?;
                    }
                }
            }
            _ if top => self.out.warnings.push(outside_warning(entry, &target)),
            _ => {}
        }
        Ok(())
    }

    /// A git dir's `commondir` names where its config and hooks live: guard it when it
    /// lies in this tree, warn when it lies outside.
    fn check_commondir(&mut self, gitdir: &Path, rel: &Path) -> Result<(), SandboxError> {
        let Ok(text) = fs::read(gitdir.join("commondir")) else {
            return Ok(());
        };
        let text = trim_ascii(&text);
        let common = gitdir.join(OsStr::from_bytes(text));
        let Ok(common) = fs::canonicalize(&common) else {
            return Ok(());
        };
        match common.strip_prefix(self.tree.root) {
            Ok(crel) if is_plain_relative(crel) && crel != rel => {
                let crel = crel.to_path_buf();
                if open_beneath(self.tree.fd, &crel, OFlag::O_PATH | OFlag::O_DIRECTORY).is_ok() {
                    self.guard_git_dir(&crel)?;
                }
            }
            Ok(_) => {}
            Err(_) => self
                .out
                .warnings
                .push(outside_warning(&gitdir.join("commondir"), &common)),
        }
        Ok(())
    }

    /// Submodules' git dirs (`modules/**`) and linked worktrees' own dirs (`worktrees/*`)
    /// inside the git dir at `rel`.
    fn nested_git_dirs(&mut self, rel: &Path) -> Result<(), SandboxError> {
        let worktrees = rel.join("worktrees");
        for name in self.child_dirs(&worktrees)? {
            let child = worktrees.join(name);
            if self.is_git_dir_at(&child)? {
                self.guard_git_dir(&child)?;
            }
        }
        let mut pending = vec![(rel.join("modules"), 0usize)];
        while let Some((dir, depth)) = pending.pop() {
            if depth > self.limits.max_depth {
                return Err(SandboxError::ScanLimit {
                    what: "the directory depth",
                    limit: self.limits.max_depth,
                    path: self.tree.root.join(&dir),
                });
            }
            for name in self.child_dirs(&dir)? {
                let child = dir.join(name);
                if self.is_git_dir_at(&child)? {
                    self.guard_git_dir(&child)?;
                    // A submodule's own submodules live in its git dir's modules/.
                    pending.push((child.join("modules"), depth + 1));
                } else {
                    // Submodule names with slashes nest (`modules/a/b`).
                    pending.push((child, depth + 1));
                }
            }
        }
        Ok(())
    }

    /// Whether the directory at `rel` is a git dir to git (and to the end-of-run git
    /// guard): `HEAD`, and `commondir` or both `objects` and `refs`
    /// ([`is_git_dir_listing`]). A `HEAD` alone was enough here, and the agent left a
    /// `.git/modules/y` of a `HEAD` and a `config` whose commands named more files than
    /// the scan takes: no git reads that config, the end-of-run guard (git's test) left
    /// it, and every later run failed at setup (round eighteen's second review).
    fn is_git_dir_at(&self, rel: &Path) -> Result<bool, SandboxError> {
        let path = self.tree.root.join(rel);
        let dir = match open_beneath(self.tree.fd, rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(false),
            Err(e) => return Err(walk_error(&path, "open", e)),
        };
        let names = list_dir(&dir).map_err(|e| walk_error(&path, "list", e))?;
        Ok(is_git_dir_listing(names.iter()))
    }

    /// Names of the subdirectories of `rel` (none when it does not exist).
    fn child_dirs(&self, rel: &Path) -> Result<Vec<OsString>, SandboxError> {
        let path = self.tree.root.join(rel);
        let dir = match open_beneath(self.tree.fd, rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(Vec::new()),
            Err(e) => return Err(walk_error(&path, "open", e)),
        };
        let mut dirs = Vec::new();
        for name in list_dir(&dir).map_err(|e| walk_error(&path, "list", e))? {
            if let Ok(st) = fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                && file_kind(&st) == Kind::Dir
            {
                dirs.push(name);
            }
        }
        Ok(dirs)
    }

    /// Read-only `config`, `config.worktree`, `commondir`, `hooks/`, `info/`, `remotes/`,
    /// `branches/` in the git dir at `rel`, with placeholders for the absent ones; whether
    /// git took it for a git dir when the scan came.
    fn guard_git_dir(&mut self, rel: &Path) -> Result<bool, SandboxError> {
        let path = self.tree.root.join(rel);
        let dir = open_beneath(self.tree.fd, rel, OFlag::O_PATH | OFlag::O_DIRECTORY)
            .map_err(|e| walk_error(&path, "open", e))?;
        let st = nix::sys::stat::fstat(dir.as_fd()).map_err(|e| walk_error(&path, "inspect", e))?;
        // Known (the end-of-run guard leaves it as the user's) only when git takes it for a
        // git dir now, before any placeholder is made in it: a `sub/.git` of a `HEAD` and
        // the agent's `config` alone, left by one run (the guard, git's test, passed it
        // by), was guarded as the user's by the next, whose agent added `objects/` and
        // `refs/`, and the user's `git status` in `sub` ran its fsmonitor (round
        // eighteen's second review).
        let is_git_dir = self.is_git_dir_at(rel)?;
        if is_git_dir {
            self.out.git_known.push((st.st_dev, st.st_ino));
        }
        for (name, absent) in GIT_GUARDED_FILES {
            self.guard_entry(dir.as_fd(), &path.join(name), name, absent)?;
        }
        for name in GIT_GUARDED_DIRS {
            self.guard_entry(dir.as_fd(), &path.join(name), name, PlaceholderKind::Dir)?;
        }
        // git runs a repository's commands at the top of its work tree: the directory
        // of a `.git`; a git dir of another name (a submodule's `.git/modules/x`) names
        // it by `core.worktree`, or has none.
        let work_tree = if rel.file_name() == Some(OsStr::new(".git")) {
            path.parent().map(Path::to_path_buf)
        } else {
            read_config(&path.join("config"))
                .and_then(|text| config_text::core_worktree(&text))
                .and_then(|named| fs::canonicalize(path.join(OsStr::from_bytes(&named))).ok())
        };
        // Its configs only when git reads them: those of a `HEAD` and a `config` alone,
        // which the agent of an earlier run may leave (the end-of-run guard asks git's
        // test too), named more files than the scan takes, and failed every later run.
        if is_git_dir {
            let mut walk = ConfigWalk::new(work_tree);
            for name in ["config", "config.worktree"] {
                self.guard_includes(&path.join(name), &path, 0, &mut walk)?;
            }
        }
        Ok(is_git_dir)
    }

    /// The files of this tree that the git config at `config` includes (`include.path`,
    /// `includeIf.*.path`), and those they include in turn: read-only, each directory
    /// between the tree's root and them pinned (a renamed parent would let the agent put
    /// a file of its own at the included path), a symlink on the last step guarded as a
    /// link. A config that includes a work-tree file (`include.path =
    /// ../shared.gitconfig`, a project's way to share settings) handed that file to the
    /// agent, and a `core.fsmonitor` or filter driver it wrote there ran in the user's own
    /// next `git status`, outside the sandbox. An included file that does not exist is
    /// held absent ([`Walker::hold_absent_include`]), and one in another writable tree is
    /// that tree's to hold ([`guard_foreign_includes`]).
    ///
    /// Each file is read once (`seen`): an agent of an earlier run that made the included
    /// file include another fifty times, and that one another, had this walk git's 50^8
    /// includes. More than [`MAX_INCLUDED`] files fail the scan closed, as more secrets
    /// than its cap do.
    ///
    /// Relative includes are read against `base`, the directory of the name git opened
    /// `config` by (git does not resolve a symlink to the included file first).
    fn guard_includes(
        &mut self,
        config: &Path,
        base: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        // git's own limit on nested includes.
        const MAX_INCLUDE_DEPTH: usize = 10;
        if depth > MAX_INCLUDE_DEPTH
            || !walk.seen.insert((config.to_path_buf(), base.to_path_buf()))
        {
            return Ok(());
        }
        if walk.seen.len() > MAX_INCLUDED {
            return Err(SandboxError::ScanLimit {
                what: "the number of files git configs include",
                limit: MAX_INCLUDED,
                path: config.to_path_buf(),
            });
        }
        let Some(text) = read_config(config) else {
            return Ok(());
        };
        for value in include_paths(&text) {
            let Some(named) = expand_user_path(Path::new(OsStr::from_bytes(&value))) else {
                continue;
            };
            self.guard_include(&base.join(named), depth, walk, NamedBy::Config)?;
        }
        self.guard_command_files(&text, depth, walk)
    }

    /// One included path, `target` as the config names it (unresolved): the file, or its
    /// first missing name, when it lies in this tree; otherwise it is left to the
    /// writable tree that holds it ([`ScanOutput::foreign_includes`]).
    fn guard_include(
        &mut self,
        target: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
        named_by: NamedBy,
    ) -> Result<(), SandboxError> {
        if let Some(absent) = self.guard_links_on_the_way(target, &mut 0)? {
            return self.hold_absent_include(target, &absent, depth, walk, named_by);
        }
        let (Some(named_parent), Some(name)) = (target.parent(), target.file_name()) else {
            return Ok(());
        };
        let Ok(parent) = fs::canonicalize(named_parent) else {
            return Ok(());
        };
        let Some(rel_parent) = self.rel_in_tree(&parent) else {
            return self.guard_named_elsewhere(target, named_parent, depth, walk, named_by);
        };
        let Some(dir) = self.pinned_dir(&rel_parent) else {
            return Ok(());
        };
        let path = parent.join(name);
        let Ok(st) = fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return Ok(());
        };
        if named_by == NamedBy::Command {
            self.guard_venv(&path, depth, walk)?;
        }
        match file_kind(&st) {
            Kind::File => {
                self.push(mask(path.clone(), MaskKind::ReadOnly, &st, false))?;
                if named_by == NamedBy::Config {
                    self.guard_includes(&path, named_parent, depth + 1, walk)?;
                }
                if named_by == NamedBy::Command {
                    self.guard_interpreter(&path, depth, walk)?;
                }
            }
            Kind::Symlink => {
                self.guard_link(path.clone(), &st)?;
                if named_by == NamedBy::Config
                    && let Ok(resolved) = fs::canonicalize(&path)
                {
                    self.guard_includes(&resolved, named_parent, depth + 1, walk)?;
                }
                if named_by == NamedBy::Command
                    && let Ok(resolved) = fs::canonicalize(&path)
                {
                    self.guard_interpreter(&resolved, depth, walk)?;
                }
            }
            Kind::Dir if named_by == NamedBy::HeldDir => {
                self.push(mask(path.clone(), MaskKind::ReadOnly, &st, false))?;
            }
            Kind::Dir | Kind::Other => {}
        }
        Ok(())
    }

    /// [`Walker::guard_include`] of a `target` named outside this tree: a link there may
    /// lead into it (a hook of a repository above the workspace, `.git/hooks/pre-commit
    /// -> ../../sub/tools/pre-commit`), and the file it leads to is held here (the links
    /// and directories on the way are, by [`Walker::guard_links_on_the_way`]); otherwise
    /// an include is another writable tree's to hold.
    fn guard_named_elsewhere(
        &mut self,
        target: &Path,
        named_parent: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
        named_by: NamedBy,
    ) -> Result<(), SandboxError> {
        let resolved = fs::canonicalize(target).ok();
        let Some((resolved, rel)) = resolved.and_then(|r| Some((r.clone(), self.rel_in_tree(&r)?)))
        else {
            self.pass_on(target, depth, named_by, walk);
            if named_by == NamedBy::Config {
                // What a file outside this tree includes may be in it (`~/x.gitconfig`
                // including `~/proj/shared.gitconfig`): not read until round seventeen's
                // second review, so that file was the agent's.
                if let Ok(resolved) = fs::canonicalize(target) {
                    self.note_other_names(&resolved);
                    self.guard_includes(&resolved, named_parent, depth + 1, walk)?;
                }
            }
            return Ok(());
        };
        if rel.as_os_str().is_empty() {
            return Ok(());
        }
        let Ok(fd) = open_beneath(self.tree.fd, &rel, OFlag::O_PATH) else {
            return Ok(());
        };
        let st = fstat(fd.as_fd()).map_err(|e| walk_error(&resolved, "inspect", e))?;
        if file_kind(&st) == Kind::Dir && named_by == NamedBy::HeldDir {
            self.push(mask(resolved.clone(), MaskKind::ReadOnly, &st, false))?;
        } else if file_kind(&st) == Kind::File {
            self.push(mask(resolved.clone(), MaskKind::ReadOnly, &st, false))?;
            if named_by == NamedBy::Config {
                self.guard_includes(&resolved, named_parent, depth + 1, walk)?;
            }
            if named_by == NamedBy::Command {
                self.guard_interpreter(&resolved, depth, walk)?;
            }
        }
        Ok(())
    }

    /// The interpreter a held command file's `#!` line names by path, held as the file
    /// is (a link to it guarded as a link): a virtualenv's console script
    /// (`.venv/bin/fmt`, whose `#!` pip writes as the venv's own `python`, a link in the
    /// work tree) was held, and the agent replaced the link with its own program, which
    /// the kernel then ran for the user's `git fmt` (round twenty-one's review). A
    /// relative one is read from the top of the work tree, where git runs commands. One
    /// found through `PATH` (`#!/usr/bin/env python3`) is looked for in each directory
    /// the configs' commands put on `PATH` ([`config_text::path_dirs`]), held there
    /// present or not: `. .venv/bin/activate && tools/fmt.py` ran the venv's `python3`,
    /// a link the agent replaced (round twenty-one's review, a ratchet until round
    /// twenty-two). Chains are followed as far as the include depth.
    fn guard_interpreter(
        &mut self,
        script: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let Some(line) = read_shebang(script) else {
            return Ok(());
        };
        let mut named: Vec<Vec<u8>> = line.first().cloned().into_iter().collect();
        match env_program(&line) {
            Some(name) if !name.contains(&b'/') => {
                named.extend(
                    walk.path_dirs
                        .iter()
                        .map(|dir| [dir.as_slice(), b"/", &name].concat()),
                );
                if !walk.env_programs.iter().any(|(known, _)| *known == name) {
                    walk.env_programs.push((name, depth));
                }
            }
            Some(path) => named.push(path),
            None => {}
        }
        for interpreter in named {
            self.guard_one_interpreter(&interpreter, depth, walk)?;
        }
        Ok(())
    }

    /// One interpreter of [`Walker::guard_interpreter`], read from the top of the work
    /// tree; chains followed as far as the include depth.
    fn guard_one_interpreter(
        &mut self,
        interpreter: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        const MAX_DEPTH: usize = 10;
        let Some(target) = config_path(interpreter, walk.work_tree.as_deref()) else {
            return Ok(());
        };
        if depth >= MAX_DEPTH || !walk.commands.insert(target.clone()) {
            return Ok(());
        }
        self.guard_include(&target, depth + 1, walk, NamedBy::Command)
    }

    /// Directories put on `PATH` ([`config_text::path_dirs`], or a held script's
    /// [`config_text::script_path_dirs`]) added to the walk's, each with the programs of
    /// the `#!/usr/bin/env` lines met so far held in it: a `PATH` read after the script
    /// (one a file the line sources sets, `. ./env.sh && tools/fmt.py`; another config's
    /// line) was never searched for them (round twenty-three's review).
    fn add_path_dirs(
        &mut self,
        dirs: Vec<Vec<u8>>,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for dir in dirs {
            if walk.path_dirs.contains(&dir) {
                continue;
            }
            walk.path_dirs.push(dir.clone());
            for (name, depth) in walk.env_programs.clone() {
                let interpreter = [dir.as_slice(), b"/", &name].concat();
                self.guard_one_interpreter(&interpreter, depth, walk)?;
            }
        }
        Ok(())
    }

    /// What a virtualenv's interpreter reads at its start, held when a held command is
    /// one (`VENV/bin/python*` beside a `VENV/pyvenv.cfg`): `pyvenv.cfg` (its `home`,
    /// `include-system-site-packages`) and each `VENV/lib*/python*/site-packages/` whole,
    /// whose `.pth` files `site` runs and whose `sitecustomize`/`usercustomize` it
    /// imports: the held `tools/fmt.py` of `. .venv/bin/activate && tools/fmt.py` ran
    /// the agent's `.venv/lib/python3.11/site-packages/x.pth` (round twenty-two's known
    /// limit). The agent cannot install into that virtualenv during the run.
    fn guard_venv(
        &mut self,
        program: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let is_python = program
            .file_name()
            .is_some_and(|n| n.as_bytes().starts_with(b"python"));
        let Some(bin) = program
            .parent()
            .filter(|b| b.file_name() == Some(OsStr::new("bin")))
        else {
            return Ok(());
        };
        let Some(venv) = bin.parent().filter(|_| is_python) else {
            return Ok(());
        };
        let cfg = venv.join("pyvenv.cfg");
        if !walk.commands.insert(cfg.clone()) || fs::symlink_metadata(&cfg).is_err() {
            return Ok(());
        }
        self.guard_include(&cfg, depth + 1, walk, NamedBy::Link)?;
        let Ok(libs) = fs::read_dir(venv) else {
            return Ok(());
        };
        for lib in libs
            .flatten()
            .filter(|e| e.file_name().as_bytes().starts_with(b"lib"))
        {
            let Ok(versions) = fs::read_dir(lib.path()) else {
                continue;
            };
            for version in versions.flatten() {
                if version.file_name().as_bytes().starts_with(b"python") {
                    let site = version.path().join("site-packages");
                    self.guard_include(&site, depth + 1, walk, NamedBy::HeldDir)?;
                }
            }
        }
        Ok(())
    }

    /// `target`, named by a config outside this tree or a command of one, handed to the
    /// writable tree that holds it ([`ScanOutput::foreign_includes`]); what a link names
    /// is asked of every writable tree already.
    fn pass_on(&mut self, target: &Path, depth: usize, named_by: NamedBy, walk: &ConfigWalk) {
        if named_by != NamedBy::Link {
            self.out.foreign_includes.push(ForeignName {
                target: target.to_path_buf(),
                depth,
                named_by,
                work_tree: walk.work_tree.clone(),
            });
        }
    }

    /// The files of the work tree that the commands of a config text run
    /// ([`config_text::command_words`]), held as an included file is but not read as a
    /// config: a filter driver's `clean = sh tools/strip.sh`, selected by the project's
    /// `.gitattributes`, ran what the agent wrote in `tools/strip.sh` at the user's next
    /// `git add`, outside the sandbox (round seventeen's review). A word is read against
    /// the top of the work tree, where git runs these commands; a bare word (`sh
    /// strip.sh`) is held only when a file is there, one with a `/` also when absent.
    /// The directories the text names for git to run from (`core.hooksPath`,
    /// `init.templateDir`) are held too.
    fn guard_command_files(
        &mut self,
        text: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        self.guard_hooks_paths(text, depth, walk)?;
        self.guard_template_dirs(text, depth, walk)?;
        let Some(top) = walk.work_tree.clone() else {
            return Ok(());
        };
        self.add_path_dirs(config_text::path_dirs(text), walk)?;
        // First: a word met held-if-present is not looked at again.
        self.guard_entry_points(text, &top, depth, walk)?;
        for word in config_text::command_words(text)
            .into_iter()
            .chain(submodule_words(text, &top))
        {
            self.guard_command_word(word, &top, depth, walk)?;
        }
        self.guard_xargs_lists(text, &top, depth, walk)
    }

    /// The entry points an interpreter of the text's commands runs for a word that is no
    /// file ([`config_text::interpreted_entries`]), held present or not: in the
    /// directory the word names (`tools/fmt/index.js`, `package.json`, `__main__.py`),
    /// and beside it for node (`tools/fmt.js`, tried first), also when the word names
    /// nothing yet (a word with a `/`: the word itself is held absent then). Held only
    /// when present, the agent added them (round twenty-three's Known limits).
    fn guard_entry_points(
        &mut self,
        text: &[u8],
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for (word, interpreter) in config_text::interpreted_entries(text) {
            let Some(target) = config_path(&word, Some(top)) else {
                continue;
            };
            let named: Vec<Vec<u8>> = match fs::metadata(&target) {
                Ok(meta) if meta.is_dir() => interpreter
                    .in_dir
                    .iter()
                    .map(|main| [&word[..], b"/", main].concat())
                    .chain(interpreter.suffixes.iter().map(|s| [&word[..], s].concat()))
                    .collect(),
                Ok(_) => continue,
                Err(_) if word.contains(&b'/') => interpreter
                    .suffixes
                    .iter()
                    .map(|s| [&word[..], s].concat())
                    .collect(),
                Err(_) => continue,
            };
            for entry in named {
                let word = CommandWord {
                    word: entry,
                    is_path: true,
                    whole_dir: false,
                };
                self.guard_command_word(word, top, depth, walk)?;
            }
        }
        Ok(())
    }

    /// The entries of each list file an `xargs` of the text's commands runs
    /// ([`config_text::xargs_lists`]), read from the top of the work tree, held as words
    /// of the line: `xargs -n1 -a tools/checks.list sh` ran the agent's
    /// `tools/checks/a.sh` (round twenty-three's review, a ratchet until round
    /// twenty-four). The list itself is held too (`-atools/checks.list` is no word of
    /// the line). A list larger than [`MAX_SCRIPT_BYTES`] is not read.
    fn guard_xargs_lists(
        &mut self,
        text: &[u8],
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let lists = config_text::xargs_lists(text).into_iter().map(|l| (l, top));
        self.guard_lists(lists, top, depth, walk)
    }

    /// [`Walker::guard_xargs_lists`] for `lists`, each read from its own base directory
    /// (a script's own lists may be spelled from its directory); their entries are words
    /// of a line run from `top`.
    fn guard_lists<'p>(
        &mut self,
        lists: impl IntoIterator<Item = (Vec<u8>, &'p Path)>,
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for (list, base) in lists {
            let is_path = list.contains(&b'/');
            let word = CommandWord {
                word: list.clone(),
                is_path,
                whole_dir: false,
            };
            self.guard_command_word(word, base, depth, walk)?;
            let Some(text) = config_path(&list, Some(base)).and_then(|p| read_script(&p)) else {
                continue;
            };
            for entry in config_text::list_entries(&text) {
                let is_path = entry.contains(&b'/');
                let word = CommandWord {
                    word: entry,
                    is_path,
                    whole_dir: false,
                };
                self.guard_command_word(word, top, depth, walk)?;
            }
        }
        Ok(())
    }

    /// One word of [`Walker::guard_command_files`]: the file it names held (a glob's
    /// directory whole) and what that file reads in turn.
    fn guard_command_word(
        &mut self,
        word: CommandWord,
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let CommandWord {
            word,
            is_path,
            whole_dir,
        } = word;
        let Some(target) = config_path(&word, Some(top)) else {
            return Ok(());
        };
        // A glob's directory is keyed apart from a file of the same name: one command
        // may name `ci` as a file, another read `ci/*`.
        let key = if whole_dir {
            target.join("*")
        } else {
            target.clone()
        };
        if !walk.commands.insert(key) || !is_path && fs::symlink_metadata(&target).is_err() {
            return Ok(());
        }
        if walk.commands.len() > MAX_COMMAND_FILES {
            return Err(SandboxError::ScanLimit {
                what: "the number of files the commands of git configs name",
                limit: MAX_COMMAND_FILES,
                path: target,
            });
        }
        // A glob's directory is held whole, unless that is this tree or holds it
        // (`for f in sub/*` with the workspace in `sub`): as a hooks directory.
        let named_by = if !whole_dir {
            NamedBy::Command
        } else if fs::canonicalize(&target)
            .ok()
            .is_some_and(|dir| self.tree.root.starts_with(&dir))
        {
            return Ok(());
        } else {
            NamedBy::HeldDir
        };
        self.guard_include(&target, depth, walk, named_by)?;
        if named_by == NamedBy::Command {
            self.guard_what_it_reads(&target, top, depth, walk, 1)?;
        }
        Ok(())
    }

    /// What a file the commands run makes run in turn, held like it: the files a shell
    /// script sources ([`config_text::sourced_words`], each read from the top of the work
    /// tree and from the script's own directory) or runs by path
    /// ([`config_text::run_words`], held only when present), and the file a `package.json`'s `main`
    /// names (node runs it for the directory). Then theirs, down to
    /// [`MAX_SOURCE_LEVELS`]; a file larger than [`MAX_SCRIPT_BYTES`] is not read.
    fn guard_what_it_reads(
        &mut self,
        file: &Path,
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
        level: usize,
    ) -> Result<(), SandboxError> {
        if level > MAX_SOURCE_LEVELS {
            return Ok(());
        }
        let (Some(text), Some(dir)) = (read_script(file), file.parent()) else {
            return Ok(());
        };
        let named: Vec<(PathBuf, bool)> = if file.file_name() == Some(OsStr::new("package.json")) {
            let Some(main) = config_text::package_main(&text) else {
                return Ok(());
            };
            let main = PathBuf::from(OsStr::from_bytes(&main));
            let mut with_js = main.clone().into_os_string();
            with_js.push(".js");
            vec![
                (dir.join(&main), true),
                (dir.join(with_js), false),
                (dir.join(&main).join("index.js"), false),
            ]
        } else {
            // The `PATH` it sets is the line's when it is sourced (`. ./env.sh &&
            // tools/fmt.py`), read from the top as the line's is.
            self.add_path_dirs(config_text::script_path_dirs(&text), walk)?;
            // The `xargs` lists it runs, and what they name ([`Walker::guard_lists`]).
            let lists: Vec<(Vec<u8>, &Path)> = config_text::script_xargs_lists(&text)
                .into_iter()
                .map(|(list, base)| match base {
                    config_text::SourceBase::WorkingDir => (list, top),
                    config_text::SourceBase::ScriptDir => (list, dir),
                })
                .collect();
            self.guard_lists(lists, top, depth, walk)?;
            // Held when absent only from where the shell reads it (a placeholder made
            // from the other would be made for nothing); from the other, when there.
            // What it runs by path, only when there ([`config_text::run_words`]).
            let run = config_text::run_words(&text)
                .into_iter()
                .map(|(word, base)| (word, base, false));
            config_text::sourced_words(&text)
                .into_iter()
                .map(|(word, base)| (word, base, true))
                .chain(run)
                .flat_map(|(word, base, sourced)| {
                    let is_path = sourced && word.contains(&b'/');
                    let (first, other) = match base {
                        config_text::SourceBase::WorkingDir => (top, dir),
                        config_text::SourceBase::ScriptDir => (dir, top),
                    };
                    [(first, is_path), (other, false)]
                        .into_iter()
                        .filter_map(|(base, is_path)| {
                            Some((config_path(&word, Some(base))?, is_path))
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        for (target, is_path) in named {
            if !walk.commands.insert(target.clone())
                || !is_path && fs::symlink_metadata(&target).is_err()
            {
                continue;
            }
            // Past the cap, what is left is not followed, with a warning: a file sourced by
            // a bare name absent at the start (`. lib.sh`) may be the agent's, and failing
            // every later run on what it names would be the agent's to decide.
            if walk.commands.len() > MAX_COMMAND_FILES {
                const SAID: &str = "the scripts your git config runs source more than";
                if !self.out.warnings.iter().any(|w| w.starts_with(SAID)) {
                    self.out.warnings.push(format!(
                        "{SAID} {MAX_COMMAND_FILES} files; {} and the rest are not held \
                         read-only: check them before running git in this work tree",
                        target.display()
                    ));
                }
                return Ok(());
            }
            self.guard_include(&target, depth, walk, NamedBy::Command)?;
            self.guard_what_it_reads(&target, top, depth, walk, level + 1)?;
        }
        Ok(())
    }

    /// The hooks directory (`core.hooksPath`): relative to the top of the work tree, held
    /// whole. Only the workspace's own repository's was asked of the user's git
    /// (`users_hooks_dir`): a nested repository's `core.hooksPath = scripts/hooks`, or the
    /// user's global `core.hooksPath = git-hooks` in it, left `sub/scripts/hooks/pre-commit`
    /// the agent's to write, and the user's next commit there ran it (round eighteen's
    /// second review).
    fn guard_hooks_paths(
        &mut self,
        text: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for value in config_text::hooks_paths(text) {
            let Some(target) = config_path(&value, walk.work_tree.as_deref()) else {
                continue;
            };
            if !walk.commands.insert(target.clone()) {
                continue;
            }
            // A hooks directory that is a work tree itself, or holds this tree
            // (`core.hooksPath = .`): its hooks by name, where there are any, not the
            // whole tree.
            let whole = fs::canonicalize(&target).ok().is_some_and(|dir| {
                Some(&dir) == walk.work_tree.as_ref() || self.tree.root.starts_with(&dir)
            });
            if !whole {
                self.guard_include(&target, depth, walk, NamedBy::HeldDir)?;
                continue;
            }
            for hook in config_text::GIT_HOOK_NAMES {
                let hook = target.join(hook);
                if fs::symlink_metadata(&hook).is_ok() && walk.commands.insert(hook.clone()) {
                    self.guard_include(&hook, depth, walk, NamedBy::Command)?;
                }
            }
        }
        Ok(())
    }

    /// The template directory (`init.templateDir`), whose `hooks/` and `config` git copies
    /// into every repository the user makes: the global `init.templateDir` of a dotfiles
    /// workspace's `git-templates` let the agent write a `post-checkout` the user's next
    /// `git clone` ran, anywhere (round eighteen's second review). Held whole, unless it
    /// holds this tree.
    fn guard_template_dirs(
        &mut self,
        text: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for value in config_text::template_dirs(text) {
            let Some(target) = config_path(&value, walk.work_tree.as_deref()) else {
                continue;
            };
            let holds_tree = fs::canonicalize(&target)
                .ok()
                .is_some_and(|dir| self.tree.root.starts_with(&dir));
            if !holds_tree && walk.commands.insert(target.clone()) {
                self.guard_include(&target, depth, walk, NamedBy::HeldDir)?;
            }
        }
        Ok(())
    }

    /// A config file outside every tree (`path`, no symlink followed) with more than one
    /// name: its names in the trees are held ([`ScanOutput::outside_held`]); a
    /// `~/.gitconfig` hard-linked into a dotfiles workspace was the agent's to write
    /// through that name (round seventeen's second review).
    fn note_other_names(&mut self, path: &Path) {
        if let Ok(meta) = fs::symlink_metadata(path)
            && meta.file_type().is_file()
            && meta.nlink() > 1
        {
            self.out
                .outside_held
                .linked
                .insert((meta.dev(), meta.ino()));
        }
    }

    /// The directory at `rel` in this tree, opened `O_PATH`, with each directory from the
    /// root down to it pinned; `None` when it cannot be reached.
    fn pinned_dir(&mut self, rel: &Path) -> Option<OwnedFd> {
        self.pin_dirs_down_to(rel).ok()?;
        open_beneath(self.tree.fd, rel, OFlag::O_PATH | OFlag::O_DIRECTORY).ok()
    }

    /// `dir` (canonical) relative to this tree's root, when it is in it.
    fn rel_in_tree(&self, dir: &Path) -> Option<PathBuf> {
        let rel = dir.strip_prefix(self.tree.root).ok()?;
        is_plain_relative(rel).then(|| rel.to_path_buf())
    }

    /// An included path whose name `absent.path` (the included file itself, or a directory
    /// on the way to it) does not exist: a placeholder is made there and held read-only,
    /// so the agent cannot make the file the user's git would read next; its kind is
    /// [`AbsentAt`]'s. A name on the way that exists but is not a directory is pinned
    /// instead. The link is visible to the agent's own `git add -A`, hence the warning.
    fn hold_absent_include(
        &mut self,
        target: &Path,
        absent: &AbsentName,
        depth: usize,
        walk: &ConfigWalk,
        named_by: NamedBy,
    ) -> Result<(), SandboxError> {
        let (Some(parent), Some(name)) = (absent.path.parent(), absent.path.file_name()) else {
            return Ok(());
        };
        let Ok(parent) = fs::canonicalize(parent) else {
            return Ok(());
        };
        let Some(rel_parent) = self.rel_in_tree(&parent) else {
            self.pass_on(target, depth, named_by, walk);
            return Ok(());
        };
        let Some(dir) = self.pinned_dir(&rel_parent) else {
            return Ok(());
        };
        let path = parent.join(name);
        let kind = match absent.place {
            AbsentAt::File | AbsentAt::DirThenUp => PlaceholderKind::Symlink,
            AbsentAt::Dir => PlaceholderKind::Dir,
            AbsentAt::NotADir => {
                return match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Ok(st) if file_kind(&st) != Kind::Dir => {
                        self.push(mask(path, MaskKind::Pin, &st, false))
                    }
                    _ => Ok(()),
                };
            }
        };
        match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            // Held by an earlier include of the same path.
            Ok(_) => return Ok(()),
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(walk_error(&path, "inspect", e)),
        }
        let Some(st) = self.make_placeholder(dir.as_fd(), name, &path, kind)? else {
            return Ok(());
        };
        if kind == PlaceholderKind::Symlink {
            let by = match named_by {
                NamedBy::Config => "the repository's git config includes",
                NamedBy::Link => "a link in a directory held read-only names",
                NamedBy::Command => "a command of the repository's git config names",
                NamedBy::HeldDir => {
                    "a `core.hooksPath` or `init.templateDir` of a git config names"
                }
            };
            self.out.warnings.push(format!(
                "{}, which {by}, did not exist: the sandbox holds it absent for this run \
                 (a symlink to {ABSENT_TARGET}, removed afterwards), so the agent cannot \
                 create it",
                path.display()
            ));
        }
        self.push(mask(path, MaskKind::ReadOnly, &st, false))
    }

    /// [`Walker::guard_includes`] of the repository this tree lies in, when its git dir is
    /// above the tree (a workspace in a subdirectory of a repository), or named by the
    /// tree's own `.git` file (a workspace that is a linked worktree of a repository
    /// elsewhere): that git dir is out of the agent's reach, but what its config includes
    /// from the tree is not. (A `.git` directory at the root is the walk's, or the sandbox's
    /// placeholder.)
    fn guard_enclosing_includes(&mut self) -> Result<(), SandboxError> {
        // The user's global and system configs, read by every git the user runs: one
        // that is (a link to) a file of this tree, or includes one (a dotfiles repository
        // as the workspace, `[include] path = ~/dotfiles/gitconfig` in `~/.gitconfig`),
        // handed that file to the agent (round seventeen's second review).
        let own = self.tree.root.join(".git");
        let dot_git = std::iter::once(own.clone())
            .filter(|own| fs::symlink_metadata(own).is_ok_and(|m| m.is_file()))
            .chain(
                self.tree
                    .root
                    .ancestors()
                    .skip(1)
                    .map(|dir| dir.join(".git")),
            )
            .find(|dot_git| fs::symlink_metadata(dot_git).is_ok());
        // Where git runs the commands of those configs for this tree: the top of its
        // repository's work tree (this tree's root when it has a `.git` of its own).
        let top = match &dot_git {
            Some(enclosing) if fs::symlink_metadata(&own).is_err() => enclosing.parent(),
            _ => None,
        }
        .unwrap_or(self.tree.root)
        .to_path_buf();
        let mut walk = ConfigWalk::new(Some(top));
        for config in user_git_configs() {
            let base = config.parent().unwrap_or(Path::new("/")).to_path_buf();
            self.guard_include(&config, 0, &mut walk, NamedBy::Config)?;
            self.guard_includes(&config, &base, 0, &mut walk)?;
        }
        // The tree's own git dir's configs (the walk's too) read again with the user's,
        // as git reads them together: the `PATH` one's line sets is the other's
        // interpreters' (`alias.fmt = !PATH=tools/bin:$PATH git lint` in `~/.gitconfig`,
        // the repository's `alias.lint = !tools/fmt.py`, `#!/usr/bin/env python3`: round
        // twenty-three's review).
        if fs::symlink_metadata(&own).is_ok_and(|m| m.is_dir()) {
            for name in ["config", "config.worktree"] {
                self.guard_includes(&own.join(name), &own, 0, &mut walk)?;
            }
        }
        let Some(dot_git) = dot_git else {
            return Ok(());
        };
        let git_dir = if dot_git.is_dir() {
            Some(dot_git)
        } else {
            read_config(&dot_git).and_then(|text| {
                let line = text
                    .split(|b| *b == b'\n')
                    .find_map(|l| l.strip_prefix(b"gitdir:"))?;
                let parent = dot_git.parent()?;
                fs::canonicalize(parent.join(OsStr::from_bytes(trim_ascii(line)))).ok()
            })
        };
        let Some(git_dir) = git_dir else {
            return Ok(());
        };
        let mut configs = vec![git_dir.join("config"), git_dir.join("config.worktree")];
        if let Some(common) = read_config(&git_dir.join("commondir")).and_then(|text| {
            fs::canonicalize(git_dir.join(OsStr::from_bytes(trim_ascii(&text)))).ok()
        }) {
            configs.push(common.join("config"));
        }
        for config in &configs {
            let base = config.parent().unwrap_or(Path::new("/")).to_path_buf();
            self.note_other_names(config);
            self.guard_includes(config, &base, 0, &mut walk)?;
        }
        // Its hooks: one with a second name in this tree (a hard link), or a symlink into
        // it, was the agent's to write, and the user's next commit in the repository ran
        // it (round seventeen's second review). The hooks are in the common dir.
        for config in &configs {
            let Some(hooks) = config
                .parent()
                .and_then(|dir| fs::canonicalize(dir.join("hooks")).ok())
            else {
                continue;
            };
            let Ok(dir) = nix::fcntl::open(
                &hooks,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            let mut looked = 0;
            linked_files_under(
                dir,
                &hooks,
                self.limits,
                &mut looked,
                &mut self.out.outside_held,
            )?;
        }
        Ok(())
    }

    /// Each symlink of this tree on the way to the included path `target` (as the config
    /// names it, unresolved), guarded as a link, the directories above it pinned: the
    /// included file itself is found through the resolved path, and `include.path =
    /// ../link/shared.gitconfig` with `link -> conf` left `link` the agent's to replace
    /// with a directory holding a `shared.gitconfig` of its own. A link is followed one hop
    /// at a time (at most `MAX_HOPS`, the kernel's 40), so each link of a chain to the
    /// included file is guarded, not just the first and the end.
    ///
    /// Returns the first name on the (resolved) way that does not exist, if one does not.
    fn guard_links_on_the_way(
        &mut self,
        target: &Path,
        hops: &mut usize,
    ) -> Result<Option<AbsentName>, SandboxError> {
        const MAX_HOPS: usize = 40;
        let mut so_far = PathBuf::new();
        let mut parts = target.components();
        while let Some(part) = parts.next() {
            so_far.push(part);
            let meta = match fs::symlink_metadata(&so_far) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let rest = parts.as_path();
                    let place = if rest.as_os_str().is_empty() {
                        AbsentAt::File
                    } else if rest.components().any(|c| c == Component::ParentDir) {
                        AbsentAt::DirThenUp
                    } else {
                        AbsentAt::Dir
                    };
                    return Ok(Some(AbsentName {
                        path: so_far,
                        place,
                    }));
                }
                // A name on the way that is not a directory (`README` of `../README/x`):
                // git finds nothing there, and the agent must not make it a directory.
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                    return Ok(so_far.parent().map(|entry| AbsentName {
                        path: entry.to_path_buf(),
                        place: AbsentAt::NotADir,
                    }));
                }
                Err(_) => return Ok(None),
            };
            if !meta.file_type().is_symlink() {
                if meta.is_dir() && parts.clone().next() == Some(Component::ParentDir) {
                    // `conf/..`: `conf` renamed and replaced by a link would lead elsewhere.
                    self.pin_dir_on_the_way(&so_far);
                }
                continue;
            }
            self.guard_link_on_the_way(&so_far)?;
            *hops += 1;
            let Ok(link) = fs::read_link(&so_far) else {
                return Ok(None);
            };
            if *hops > MAX_HOPS {
                return Ok(None);
            }
            let next = so_far
                .parent()
                .unwrap_or(Path::new("/"))
                .join(link)
                .join(parts.as_path());
            return self.guard_links_on_the_way(&next, hops);
        }
        // The directory the way ends in: a link to `conf/real.gitconfig` held the link and
        // the file, and the agent renamed `conf` and made its own (round seventeen's
        // second review).
        if let Some(parent) = so_far.parent() {
            self.pin_dir_on_the_way(parent);
        }
        Ok(None)
    }

    /// [`Walker::guard_links_on_the_way`]: the directory `dir` (and each above it) pinned,
    /// when it is of this tree.
    fn pin_dir_on_the_way(&mut self, dir: &Path) {
        let Some(rel) = fs::canonicalize(dir)
            .ok()
            .and_then(|dir| self.rel_in_tree(&dir))
        else {
            return;
        };
        // As for the other pins of this walk: a directory that cannot be opened is not
        // one the way goes through.
        let _ = self.pin_dirs_down_to(&rel);
    }

    /// [`Walker::guard_links_on_the_way`]: the symlink at `link`, when it is of this tree.
    fn guard_link_on_the_way(&mut self, link: &Path) -> Result<(), SandboxError> {
        let (Some(parent), Some(name)) = (link.parent(), link.file_name()) else {
            return Ok(());
        };
        let Ok(parent) = fs::canonicalize(parent) else {
            return Ok(());
        };
        let Some(dir) = self
            .rel_in_tree(&parent)
            .and_then(|rel| self.pinned_dir(&rel))
        else {
            return Ok(());
        };
        let Ok(st) = fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return Ok(());
        };
        if matches!(file_kind(&st), Kind::Symlink) {
            self.guard_link(parent.join(name), &st)?;
        }
        Ok(())
    }

    /// Pins every directory of this tree from its root (excluded) down to `rel`.
    fn pin_dirs_down_to(&mut self, rel: &Path) -> Result<(), SandboxError> {
        let mut so_far = PathBuf::new();
        for name in rel.components() {
            so_far.push(name);
            let path = self.tree.root.join(&so_far);
            if !self.out.pinned.insert(path.clone()) {
                continue;
            }
            let fd = open_beneath(self.tree.fd, &so_far, OFlag::O_PATH | OFlag::O_DIRECTORY)
                .map_err(|e| walk_error(&path, "open", e))?;
            let st =
                nix::sys::stat::fstat(fd.as_fd()).map_err(|e| walk_error(&path, "inspect", e))?;
            self.push(mask(path, MaskKind::Pin, &st, false))?;
        }
        Ok(())
    }

    /// A read-only mask over `dir/name`, creating a placeholder of `absent` kind first when
    /// the name does not exist.
    fn guard_entry(
        &mut self,
        dir: BorrowedFd<'_>,
        path: &Path,
        name: &str,
        absent: PlaceholderKind,
    ) -> Result<(), SandboxError> {
        let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => match self.make_placeholder(dir, name, path, absent)? {
                Some(st) => st,
                None => return Ok(()),
            },
            Err(e) => return Err(walk_error(path, "inspect", e)),
        };
        match file_kind(&st) {
            Kind::Symlink => self.guard_link(path.to_path_buf(), &st),
            Kind::Dir | Kind::File => {
                self.push(mask(path.to_path_buf(), MaskKind::ReadOnly, &st, false))
            }
            Kind::Other => Ok(()),
        }
    }

    /// A protected symlink: the link itself is pinned read-only, and its target too when
    /// it lies in this tree (a `hooks` symlink into the workspace would be as good as a
    /// writable `hooks/`).
    fn guard_link(&mut self, path: PathBuf, st: &FileStat) -> Result<(), SandboxError> {
        self.push(mask(path.clone(), MaskKind::ReadOnly, st, false))?;
        let Ok(target) = fs::canonicalize(&path) else {
            return Ok(());
        };
        let Ok(rel) = target.strip_prefix(self.tree.root) else {
            return Ok(());
        };
        if !is_plain_relative(rel) || rel.as_os_str().is_empty() {
            return Ok(());
        }
        let Ok(fd) = open_beneath(self.tree.fd, rel, OFlag::O_PATH) else {
            return Ok(());
        };
        let st =
            nix::sys::stat::fstat(fd.as_fd()).map_err(|e| walk_error(&target, "inspect", e))?;
        if matches!(file_kind(&st), Kind::Dir | Kind::File) {
            self.push(mask(target, MaskKind::ReadOnly, &st, false))?;
        }
        Ok(())
    }

    /// Literal protected names (`.envrc`, `.claude`) that do not exist get an empty
    /// directory as placeholder, mounted read-only, so the agent cannot create them. A
    /// directory, because git ignores empty directories: the agent's `git add -A` does not
    /// pick it up.
    fn hold_absent_protected(&mut self) -> Result<(), SandboxError> {
        if self.tree.protect.is_some() {
            self.hold_absent_git()?;
        }
        for rel in self.tree.protect_literal {
            let Some(parent_rel) = rel.parent() else {
                continue;
            };
            let Some(name) = rel.file_name() else {
                continue;
            };
            let parent =
                match open_beneath(self.tree.fd, parent_rel, OFlag::O_PATH | OFlag::O_DIRECTORY) {
                    Ok(fd) => fd,
                    // A missing parent: the literal name is held at its first missing level by
                    // the entry for that level, when the user listed it; otherwise not held.
                    Err(_) => continue,
                };
            let path = self.tree.root.join(rel);
            match fstatat(parent.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(_) => {}
                Err(Errno::ENOENT) => {
                    let made =
                        self.make_placeholder(parent.as_fd(), name, &path, PlaceholderKind::Dir)?;
                    let Some(st) = made else {
                        continue;
                    };
                    self.push(mask(path, MaskKind::ReadOnly, &st, false))?;
                    // Its parents pinned, as those of a protected entry the walk met.
                    if !parent_rel.as_os_str().is_empty() {
                        self.pin_dirs_down_to(parent_rel)?;
                    }
                }
                Err(e) => return Err(walk_error(&path, "inspect", e)),
            }
        }
        Ok(())
    }
}

impl Walker<'_, '_> {
    /// coder is about to create `name` in `dir` (at `path`): the scan's watch takes over
    /// from the directory's ctime.
    /// A placeholder of `kind` made at `name` in `dir` (`path`) and recorded for removal
    /// after the run; `None` when nobody in the run may create that name
    /// ([`nobody_may_create`]), so none is needed. A `--write` directory the caller may
    /// read but not write failed every run's setup ("create placeholder …/.git: EACCES")
    /// though the agent could make nothing there either.
    fn make_placeholder(
        &mut self,
        dir: BorrowedFd<'_>,
        name: impl AsRef<OsStr>,
        path: &Path,
        kind: PlaceholderKind,
    ) -> Result<Option<FileStat>, SandboxError> {
        let name = name.as_ref();
        self.before_placeholder(dir, name, path)?;
        let st = match create_placeholder(dir, name, kind) {
            Ok(st) => st,
            Err(e) if nobody_may_create(dir, e) => return Ok(None),
            // The directory is coder's user's, who (and so the agent) took its own write
            // or search bit away: an agent that left a `.git/worktrees/x` with a `HEAD`
            // and mode 0555 failed every later unprivileged run's setup here (round
            // eighteen's second review). The owner's bits are given back, as the end-of-
            // run git guard does, and said.
            Err(e @ (Errno::EACCES | Errno::EPERM)) => {
                let Some(mode) = restore_owner_write(dir) else {
                    return Err(walk_error(path, "create placeholder", e));
                };
                self.out.warnings.push(format!(
                    "{} was not writable by its owner (mode {mode:o}): the sandbox gave the \
                     owner write and search permission back, to hold {} absent",
                    path.parent().unwrap_or(path).display(),
                    path.display()
                ));
                self.before_placeholder(dir, name, path)?;
                create_placeholder(dir, name, kind)
                    .map_err(|e| walk_error(path, "create placeholder", e))?
            }
            Err(e) => return Err(walk_error(path, "create placeholder", e)),
        };
        self.out.placeholders.push(Placeholder {
            path: path.to_path_buf(),
            kind,
            dev: st.st_dev,
            ino: st.st_ino,
        });
        Ok(Some(st))
    }

    fn before_placeholder(
        &self,
        dir: BorrowedFd<'_>,
        name: impl AsRef<OsStr>,
        path: &Path,
    ) -> Result<(), SandboxError> {
        match self.watch {
            Some(w) => w.watch.before_placeholder(dir, name.as_ref(), path),
            None => Ok(()),
        }
    }

    /// A workspace without `.git` keeps it that way: a placeholder symlink (which git
    /// reads as absent, so a parent repository is still found) is mounted over the name,
    /// so the agent cannot `git init` a repository whose config the user's git would run.
    fn hold_absent_git(&mut self) -> Result<(), SandboxError> {
        let path = self.tree.root.join(".git");
        match fstatat(self.tree.fd, ".git", AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(()),
            Err(Errno::ENOENT) => {
                let fd = self.tree.fd;
                match self.make_placeholder(fd, ".git", &path, PlaceholderKind::Symlink)? {
                    Some(st) => self.push(mask(path, MaskKind::ReadOnly, &st, false)),
                    None => Ok(()),
                }
            }
            Err(e) => Err(walk_error(&path, "inspect", e)),
        }
    }
}

/// The path a value of a git config names (`~/` expanded, as git does), relative to the
/// top of the work tree `top`; without one, only an absolute path names anything.
fn config_path(value: &[u8], top: Option<&Path>) -> Option<PathBuf> {
    let named = expand_user_path(Path::new(OsStr::from_bytes(value)))?;
    match top {
        Some(top) => Some(top.join(named)),
        None if named.is_absolute() => Some(named),
        None => None,
    }
}

/// An include's path as git expands it (`interpolate_path`): `~/` (or `~` alone) from
/// `HOME`, `~user/` from the user's entry; `None` when git cannot expand it either (it
/// then skips the include). The scan skipped every include starting with `~` ("the home
/// directory is never in a writable tree"), but a workspace under the home directory is
/// the usual case: `include.path = ~/proj/shared.gitconfig` left the file the agent's
/// (round seventeen's second review). coder runs with the user's `HOME`, as the user's git
/// does.
fn expand_user_path(named: &Path) -> Option<PathBuf> {
    let bytes = named.as_os_str().as_bytes();
    let Some(rest) = bytes.strip_prefix(b"~") else {
        return Some(named.to_path_buf());
    };
    let (user, tail) = match rest.iter().position(|b| *b == b'/') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &b""[..]),
    };
    let home = if user.is_empty() {
        PathBuf::from(std::env::var_os("HOME")?)
    } else {
        let name = std::str::from_utf8(user).ok()?;
        nix::unistd::User::from_name(name).ok()??.dir
    };
    Some(home.join(OsStr::from_bytes(tail)))
}

/// The config files every git of the user reads besides a repository's own, as git finds
/// them in coder's environment (the user's): the system one (`GIT_CONFIG_SYSTEM` or
/// `/etc/gitconfig`, unless `GIT_CONFIG_NOSYSTEM`) and the global ones
/// (`GIT_CONFIG_GLOBAL`, or `$XDG_CONFIG_HOME/git/config` and `~/.gitconfig`).
fn user_git_configs() -> Vec<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut configs = Vec::new();
    let no_system = env("GIT_CONFIG_NOSYSTEM").is_some_and(|v| {
        !matches!(
            v.to_string_lossy().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    });
    if !no_system {
        configs
            .push(env("GIT_CONFIG_SYSTEM").map_or_else(|| "/etc/gitconfig".into(), PathBuf::from));
    }
    if let Some(global) = env("GIT_CONFIG_GLOBAL") {
        configs.push(PathBuf::from(global));
    } else {
        let home = env("HOME").map(PathBuf::from);
        if let Some(xdg) = env("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".config")))
        {
            configs.push(xdg.join("git/config"));
        }
        if let Some(home) = home {
            configs.push(home.join(".gitconfig"));
        }
    }
    configs.retain(|c| c.is_absolute());
    configs
}

/// The first name on the way to an included path that does not exist, or the name that is
/// not a directory where the way needs one ([`Walker::guard_links_on_the_way`]).
struct AbsentName {
    path: PathBuf,
    place: AbsentAt,
}

/// What names a path [`Walker::guard_include`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NamedBy {
    /// A git config's include: the file is a config, whose own includes are held too, and
    /// one outside this tree is another writable tree's to hold.
    Config,
    /// A symlink in a directory held read-only ([`guard_held_links`]), given as the path:
    /// what it leads to is not read; every writable tree is asked already.
    Link,
    /// A word of a command a git config runs ([`Walker::guard_command_files`]): the file
    /// is not read; one outside this tree is another writable tree's to hold.
    Command,
    /// A `core.hooksPath` or `init.templateDir` of a git config: the directory is held
    /// whole (read-only), or absent; one outside this tree is another writable tree's to
    /// hold.
    HeldDir,
}

/// One walk of git configs and what they include ([`Walker::guard_includes`]).
struct ConfigWalk {
    /// Each config read, with the directory its relative includes are read against: each
    /// is read once.
    seen: HashSet<(PathBuf, PathBuf)>,
    /// The files the configs' commands name, each looked at once.
    commands: HashSet<PathBuf>,
    /// The top of the work tree git runs the configs' commands in, when there is one.
    work_tree: Option<PathBuf>,
    /// The directories the configs' commands put on `PATH` ([`config_text::path_dirs`]).
    path_dirs: Vec<Vec<u8>>,
    /// The programs held scripts' `#!/usr/bin/env` lines run, each with its depth: held
    /// in every directory of `path_dirs`, those added later too.
    env_programs: Vec<(Vec<u8>, usize)>,
}

impl ConfigWalk {
    fn new(work_tree: Option<PathBuf>) -> ConfigWalk {
        ConfigWalk {
            seen: HashSet::new(),
            commands: HashSet::new(),
            work_tree,
            // The user's own `PATH` (coder runs with it, as the user's git does): its
            // relative entries name directories of the work tree.
            path_dirs: std::env::var_os("PATH")
                .map(|p| config_text::relative_path_entries(p.as_bytes()))
                .unwrap_or_default(),
            env_programs: Vec::new(),
        }
    }
}

/// A path a config or a command of one names outside the tree whose config it is, left
/// to the writable tree that holds it ([`guard_foreign_includes`]).
#[derive(Debug)]
struct ForeignName {
    target: PathBuf,
    depth: usize,
    named_by: NamedBy,
    work_tree: Option<PathBuf>,
}

/// Where on the way to an included path [`AbsentName`] is, which decides how it is held.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AbsentAt {
    /// The included file's own name: a symlink to nowhere (an empty directory there would
    /// stop every git command).
    File,
    /// A directory above it: an empty directory (git shows none).
    Dir,
    /// A directory above it with `..` after it on the way (`missing/../x`): a symlink to
    /// nowhere. An empty directory made the path resolve (to `x`) where git found nothing
    /// at the start, and `x` was the agent's to write for as long as the placeholder
    /// stayed (round seventeen's second review).
    DirThenUp,
    /// An existing name that is not a directory (`README` of `README/x`): git finds
    /// nothing below it (`ENOTDIR`). It is pinned (still writable, not removed nor
    /// replaced): the agent replaced `README` with a directory holding `x`.
    NotADir,
}

/// Masks for symlinked secrets' targets and for other names of masked files.
struct LinkPass<'a> {
    out: &'a mut ScanOutput,
    limits: ScanLimits,
}

impl LinkPass<'_> {
    /// A symlink named like a secret shows its target's content: mask the target when it
    /// lies in a scanned root. Targets elsewhere are either not granted at all (the kernel
    /// denies them) or system files that are readable anyway.
    fn follow_symlinks(
        &mut self,
        trees: &[TreeScan<'_>],
        deny: &GlobSet,
        links: Vec<PathBuf>,
    ) -> Result<(), SandboxError> {
        for link in links {
            let Ok(target) = fs::canonicalize(&link) else {
                continue;
            };
            let Some(tree) = trees.iter().find(|t| target.starts_with(t.root)) else {
                continue;
            };
            let masks = &self.out.masks;
            if masks
                .iter()
                .any(|m| m.secret && m.is_dir && target.starts_with(&m.path))
                || masks.iter().any(|m| m.secret && m.path == target)
            {
                continue;
            }
            let Ok(rel) = target.strip_prefix(tree.root) else {
                continue;
            };
            let fd = open_beneath(tree.fd, rel, OFlag::O_PATH)
                .map_err(|e| walk_error(&target, "open", e))?;
            let st =
                nix::sys::stat::fstat(fd.as_fd()).map_err(|e| walk_error(&target, "inspect", e))?;
            match file_kind(&st) {
                Kind::Dir => {
                    push_mask(
                        self.out,
                        self.limits,
                        mask(target.clone(), MaskKind::ReadOnly, &st, true),
                        tree.root,
                    )?;
                    let mut linked = HashMap::new();
                    let mut symlinks = Vec::new();
                    let sub = TreeScan {
                        root: tree.root,
                        fd: tree.fd,
                        writable: false,
                        protect: None,
                        protect_literal: &[],
                        kept: None,
                    };
                    let mut walker = Walker {
                        tree: &sub,
                        deny,
                        limits: self.limits,
                        out: self.out,
                        linked: &mut linked,
                        symlinks: &mut symlinks,
                        queue: None,
                        recorder: None,
                        watch: None,
                    };
                    let dir = open_beneath(tree.fd, rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
                        .map_err(|e| walk_error(&target, "open", e))?;
                    let inside = Inside {
                        secret: true,
                        protected: false,
                    };
                    walker.walk(dir, false, rel, 0, inside)?;
                }
                Kind::File => {
                    if st.st_nlink > 1 {
                        self.out.linked_secrets.insert((st.st_dev, st.st_ino));
                    }
                    push_mask(
                        self.out,
                        self.limits,
                        mask(target, MaskKind::Empty, &st, true),
                        tree.root,
                    )?
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Other names (hard links) of a file held read-only write the same file: hold them
    /// too. A hook or an included git config with a second name elsewhere in the workspace
    /// (`ln tools/pre-commit .git/hooks/`) was the agent's to write through that name,
    /// and the user's next `git commit` ran what it wrote. Names inside a directory held
    /// read-only already are.
    fn hold_other_names(
        &mut self,
        linked: &HashMap<(u64, u64), Vec<PathBuf>>,
        held: &HashSet<(u64, u64)>,
    ) {
        let mut extra = Vec::new();
        for id in held {
            for path in linked.get(id).into_iter().flatten() {
                let masks = &self.out.masks;
                let covered = masks.iter().any(|m| {
                    m.path == *path
                        || (m.is_dir && m.kind == MaskKind::ReadOnly && path.starts_with(&m.path))
                });
                if !covered && !extra.iter().any(|m: &Mask| m.path == *path) {
                    extra.push(Mask {
                        path: path.clone(),
                        kind: MaskKind::ReadOnly,
                        is_dir: false,
                        dev: id.0,
                        ino: id.1,
                        secret: false,
                    });
                }
            }
        }
        self.out.masks.extend(extra);
    }

    /// Names in the trees of the home directory's never-visible files (`keys`, by dev and
    /// ino; [`super::home::linked_never_visible`]) masked as secrets: a hard link to
    /// `~/.ssh/authorized_keys` in a `--write` directory let the agent append its key
    /// (round twenty-three's second review). One held read-only is hidden instead.
    fn mask_home_keys(
        &mut self,
        linked: &HashMap<(u64, u64), Vec<PathBuf>>,
        keys: &HashSet<(u64, u64)>,
        trees: &[TreeScan<'_>],
    ) -> Result<(), SandboxError> {
        for id in keys {
            for path in linked.get(id).into_iter().flatten() {
                let hidden = Mask {
                    path: path.clone(),
                    kind: MaskKind::Empty,
                    is_dir: false,
                    dev: id.0,
                    ino: id.1,
                    secret: true,
                };
                match self.out.masks.iter_mut().find(|m| m.path == *path) {
                    Some(held) => *held = hidden,
                    None => {
                        let root = trees
                            .iter()
                            .find(|t| path.starts_with(t.root))
                            .map_or(Path::new("/"), |t| t.root);
                        push_mask(self.out, self.limits, hidden, root)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Other names (hard links) of a masked file carry the same content: mask them too.
    fn add_hard_links(&mut self, linked: &HashMap<(u64, u64), Vec<PathBuf>>) {
        let mut extra = Vec::new();
        for mask in self.out.masks.iter().filter(|m| m.kind == MaskKind::Empty) {
            if let Some(paths) = linked.get(&(mask.dev, mask.ino)) {
                for path in paths {
                    if *path != mask.path {
                        extra.push(Mask {
                            path: path.clone(),
                            ..mask.clone()
                        });
                    }
                }
            }
        }
        for mask in extra {
            if !self.out.masks.iter().any(|m| m.path == mask.path) {
                self.out.masks.push(mask);
            }
        }
    }
}

fn push_mask(
    out: &mut ScanOutput,
    limits: ScanLimits,
    mask: Mask,
    root: &Path,
) -> Result<(), SandboxError> {
    if out.masks.len() >= limits.max_matches {
        return Err(over_the_match_cap(limits, root));
    }
    out.masks.push(mask);
    Ok(())
}

fn over_the_match_cap(limits: ScanLimits, root: &Path) -> SandboxError {
    SandboxError::ScanLimit {
        what: "the number of matching paths",
        limit: limits.max_matches,
        path: root.to_path_buf(),
    }
}

fn outside_warning(entry: &Path, target: &Path) -> String {
    format!(
        "git metadata of the workspace lies outside it ({} -> {}); it stays read-only in \
         the sandbox, so git commands that write it (commit, branch, fetch) fail. Pass \
         --write {} to allow them",
        super::bytes::short(entry),
        super::bytes::short(target),
        super::bytes::short(target),
    )
}

/// The most files the git configs of one git dir may include, all levels together.
const MAX_INCLUDED: usize = 256;
/// How many levels of sourced files (a script sourcing one that sources another) the
/// scan follows from a file the commands run.
const MAX_SOURCE_LEVELS: usize = 4;

/// The largest script (or `package.json`) the scan reads for what it sources.
const MAX_SCRIPT_BYTES: u64 = 256 * 1024;

/// The text of the regular file `path` (symlinks followed: the shell follows them), when
/// it is no larger than [`MAX_SCRIPT_BYTES`]; never waits on a FIFO.
fn read_script(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_SCRIPT_BYTES {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_SCRIPT_BYTES).read_to_end(&mut text).ok()?;
    Some(text)
}

/// The most files the commands of one git dir's configs may name, all levels together.
const MAX_COMMAND_FILES: usize = 1024;
/// Most entries [`held_with_other_names`] looks at in directories held read-only (a git
/// dir's `hooks`, `.vscode`, `.claude`: tens to hundreds in a real project).
const MAX_HELD_ENTRIES: usize = 100_000;

/// The text of the git config at `path`, a regular file of at most 1 MiB opened without
/// following a symlink on its last step or waiting on a FIFO; `None` otherwise.
fn read_config(path: &Path) -> Option<Vec<u8>> {
    read_plain_file(path, 1 << 20)
}

/// The first `cap` bytes of `path` when it is a plain file (no symlink followed at its
/// end); `None` otherwise. Looked at before it is opened: opening a device may act (a
/// watchdog starts its timer, a tape rewinds), and the scan reads files outside every
/// tree too.
fn read_plain_file(path: &Path, cap: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    if !fs::symlink_metadata(path).ok()?.is_file() {
        return None;
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    file.take(cap).read_to_end(&mut text).ok()?;
    Some(text)
}

/// The words of what `git submodule foreach` runs ([`config_text::foreach_words`]), each
/// read in every submodule's directory the work tree's `.gitmodules` names, and those
/// their own `.gitmodules` name in turn ([`submodule_dirs`]).
fn submodule_words(text: &[u8], top: &Path) -> Vec<CommandWord> {
    let words = config_text::foreach_words(text);
    if words.is_empty() {
        return Vec::new();
    }
    let paths = submodule_dirs(top);
    paths
        .iter()
        .flat_map(|path| {
            words.iter().map(move |w| CommandWord {
                word: [path.as_slice(), b"/", &w.word].concat(),
                is_path: w.is_path,
                whole_dir: w.whole_dir,
            })
        })
        .collect()
}

/// The submodule directories of the work tree at `top`, from its top: those its
/// `.gitmodules` names, and those theirs name, four levels deep and 256 in all. `git
/// submodule foreach --recursive` runs its command in a nested submodule too, and round
/// twenty-two read the top's `.gitmodules` alone: the agent wrote `sub/inner/tools/x.sh`
/// (round twenty-three's review). Without `--recursive` the nested ones are held for
/// nothing, which costs little.
fn submodule_dirs(top: &Path) -> Vec<Vec<u8>> {
    const MAX_LEVELS: usize = 4;
    const MAX_DIRS: usize = 256;
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    let mut level: Vec<Vec<u8>> = vec![Vec::new()];
    for _ in 0..MAX_LEVELS {
        let mut next = Vec::new();
        for base in &level {
            let gitmodules = top.join(OsStr::from_bytes(base)).join(".gitmodules");
            let Some(text) = read_plain_file(&gitmodules, MAX_SCRIPT_BYTES) else {
                continue;
            };
            for path in config_text::submodule_paths(&text) {
                let path = match base.is_empty() {
                    true => path,
                    false => [base.as_slice(), b"/", &path].concat(),
                };
                if dirs.len() < MAX_DIRS && !dirs.contains(&path) {
                    dirs.push(path.clone());
                    next.push(path);
                }
            }
        }
        level = next;
    }
    dirs
}

/// The words of `path`'s `#!` line (the interpreter path first), as the kernel reads it
/// (at most 256 bytes, blanks after `#!` skipped); `None` for a file without one.
fn read_shebang(path: &Path) -> Option<Vec<Vec<u8>>> {
    let head = read_plain_file(path, 256)?;
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|b| *b == b'\n').unwrap_or(line.len())];
    let words: Vec<Vec<u8>> = line
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    (!words.is_empty()).then_some(words)
}

/// The program a `#!` line runs through `env` (`python3` of `#!/usr/bin/env python3`,
/// of `#!/usr/bin/env -S python3 -u`, of `#!/usr/bin/env -u X A=1 python3`); `None`
/// when the interpreter is not `env`, or names no program. A split string attached to
/// its option (`-Spython3`, `-vS python3`, `--split-string=python3 -u`: the kernel
/// passes the rest of the line as one argument, and `env` splits it) is read as the
/// words it holds: the program was taken for an option and passed over (round
/// twenty-three's review).
fn env_program(line: &[Vec<u8>]) -> Option<Vec<u8>> {
    let (interpreter, args) = line.split_first()?;
    if interpreter.rsplit(|b| *b == b'/').next() != Some(b"env".as_slice()) {
        return None;
    }
    let mut args: std::collections::VecDeque<Vec<u8>> = args.iter().cloned().collect();
    while let Some(arg) = args.pop_front() {
        if let Some(option) = arg.strip_prefix(b"--") {
            if let Some(split) = option.strip_prefix(b"split-string=") {
                args.push_front(split.to_vec());
            } else if [b"unset".as_slice(), b"chdir", b"argv0"].contains(&option) {
                args.pop_front();
            }
        } else if let Some(cluster) = arg.strip_prefix(b"-") {
            env_short_options(cluster, &mut args);
        } else if !arg.contains(&b'=') {
            return Some(arg);
        }
    }
    None
}

/// One `-xyz` cluster of `env`'s short options ([`env_program`]): an option with a value
/// takes the rest of the cluster, or the next argument; `-S`'s value goes back on `args`
/// as words of their own.
fn env_short_options(cluster: &[u8], args: &mut std::collections::VecDeque<Vec<u8>>) {
    const VALUE_OPTIONS: &[u8] = b"uCPaS";
    let Some(at) = cluster.iter().position(|b| VALUE_OPTIONS.contains(b)) else {
        return;
    };
    let rest = &cluster[at + 1..];
    let value = if rest.is_empty() {
        args.pop_front().unwrap_or_default()
    } else {
        rest.to_vec()
    };
    if cluster[at] == b'S' {
        for word in value
            .split(|b| *b == b' ' || *b == b'\t')
            .filter(|w| !w.is_empty())
            .rev()
        {
            args.push_front(word.to_vec());
        }
    }
}

/// The target of a `.git` file (`gitdir: PATH`, relative to the file's directory),
/// canonical; `None` when it names nothing.
fn read_gitfile(parent: BorrowedFd<'_>, path: &Path) -> Result<Option<PathBuf>, SandboxError> {
    let fd = match openat2(
        parent,
        ".git",
        OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS),
    ) {
        Ok(fd) => fd,
        Err(_) => return Ok(None),
    };
    let mut text = Vec::new();
    fs::File::from(fd)
        .take(4096)
        .read_to_end(&mut text)
        .map_err(|e| SandboxError::io(format!("read {}", super::bytes::short(path)), e))?;
    let Some(line) = text
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"gitdir:"))
    else {
        return Ok(None);
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    Ok(fs::canonicalize(dir.join(OsStr::from_bytes(trim_ascii(line)))).ok())
}

fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &bytes[start..end.max(start)]
}

/// Whether `err`, met by coder creating a name in `dir`, means the agent cannot create it
/// either: the directory is on a read-only mount (the agent's mounts keep the flag, and it
/// may not mount), or the kernel refused coder's user the write and the directory is not
/// that user's. Its owner could `chmod` it, and so could the agent, which runs as the same
/// user (with no capability over a directory of another user): that case still fails.
fn nobody_may_create(dir: BorrowedFd<'_>, err: Errno) -> bool {
    match err {
        Errno::EROFS => true,
        Errno::EACCES | Errno::EPERM => {
            fstat(dir).is_ok_and(|st| st.st_uid != nix::unistd::geteuid().as_raw())
        }
        _ => false,
    }
}

/// Whether the directory at `path` (anywhere, looked at by name) is a git dir to git
/// ([`is_git_dir_listing`]).
fn is_git_dir_path(path: &Path) -> bool {
    fs::read_dir(path).is_ok_and(|entries| {
        let names: Vec<OsString> = entries.flatten().map(|e| e.file_name()).collect();
        is_git_dir_listing(names.iter())
    })
}

/// Gives the owner of the directory open as `dir` (an `O_PATH` descriptor) write and
/// search permission when coder's user owns it and it lacks one of them: the mode it had
/// before, or `None` when nothing was changed.
fn restore_owner_write(dir: BorrowedFd<'_>) -> Option<u32> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    let st = fstat(dir).ok()?;
    let mode = st.st_mode & 0o7777;
    if st.st_uid != nix::unistd::geteuid().as_raw()
        || file_kind(&st) != Kind::Dir
        || mode & 0o300 == 0o300
    {
        return None;
    }
    // The directory itself through its descriptor's link (`fchmod` refuses an `O_PATH`
    // descriptor): no name is looked up again.
    let link = format!("/proc/self/fd/{}", dir.as_raw_fd());
    fs::set_permissions(link, fs::Permissions::from_mode(mode | 0o300)).ok()?;
    Some(mode)
}

fn create_placeholder(
    dir: BorrowedFd<'_>,
    name: impl AsRef<OsStr>,
    kind: PlaceholderKind,
) -> Result<FileStat, Errno> {
    let name = name.as_ref();
    match kind {
        PlaceholderKind::Dir => {
            nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(0o755))?
        }
        PlaceholderKind::Symlink => nix::unistd::symlinkat(ABSENT_TARGET, dir, name)?,
        PlaceholderKind::CommonDirSelf => create_commondir_placeholder(dir, name)?,
    }
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// A `commondir` holding [`COMMONDIR_SELF`], whole from the moment its name exists: it
/// is written under a temporary name and renamed into place (never over a file that
/// appeared meanwhile). A git of the user's, or the change ledger's probe that runs beside
/// the sandbox's setup, that found the name but read it before the write got nothing and
/// died ("failed to read .git/commondir: Success"), and the ledger fell back to its plain
/// walk.
fn create_commondir_placeholder(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    use std::io::Write;
    // A name nobody can foretell: the git dir is the agent's to write, and a file it left
    // at a name made of coder's pid and a counter (a pid a container's coder always
    // gets) failed this `O_EXCL` open, and with it every later run's sandbox setup
    // (round sixteen's review).
    let temporary = format!(".coder-commondir-{}", uuid::Uuid::new_v4().simple());
    let fd = openat2(
        dir,
        temporary.as_str(),
        OpenHow::new()
            .flags(
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
            )
            .mode(Mode::from_bits_truncate(0o644))
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS),
    )?;
    let placed = fs::File::from(fd)
        .write_all(COMMONDIR_SELF)
        .map_err(|e| e.raw_os_error().map_or(Errno::EIO, Errno::from_raw))
        .and_then(|()| {
            nix::fcntl::renameat2(
                dir,
                temporary.as_str(),
                dir,
                name,
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            )
        });
    if placed.is_err() {
        let _ = nix::unistd::unlinkat(
            dir,
            temporary.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    placed
}

pub(crate) fn file_kind(st: &FileStat) -> Kind {
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFDIR => Kind::Dir,
        SFlag::S_IFREG => Kind::File,
        SFlag::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

fn mask(path: PathBuf, kind: MaskKind, st: &FileStat, secret: bool) -> Mask {
    Mask {
        path,
        kind,
        is_dir: file_kind(st) == Kind::Dir,
        dev: st.st_dev,
        ino: st.st_ino,
        secret,
    }
}

fn walk_error(path: &Path, op: &'static str, errno: Errno) -> SandboxError {
    SandboxError::sys(op, super::bytes::short(path), errno)
}

/// A relative path of plain names only (no `..`, no root, no `.`).
fn is_plain_relative(rel: &Path) -> bool {
    rel.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The entries of the directory open as `dir` (sorted, without `.` and `..`).
fn list_dir(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    Ok(list_dir_kinds(dir)?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

/// The entries of the directory open as `dir` with the type the listing gives (`d_type`;
/// `None` where the file system does not say), sorted, without `.` and `..`. The walk and
/// the git guard read this before any `stat`.
pub(crate) fn list_dir_kinds(dir: &OwnedFd) -> Result<Vec<(OsString, Option<Kind>)>, Errno> {
    let dup = dir
        .try_clone()
        .map_err(|e| e.raw_os_error().map_or(Errno::EBADF, Errno::from_raw))?;
    let mut stream = nix::dir::Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for entry in stream.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let kind = entry.file_type().map(|t| match t {
            nix::dir::Type::Directory => Kind::Dir,
            nix::dir::Type::File => Kind::File,
            nix::dir::Type::Symlink => Kind::Symlink,
            _ => Kind::Other,
        });
        names.push((OsStr::from_bytes(name).to_os_string(), kind));
    }
    names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(names)
}

/// Whether the directory `name` in `dir` (`st` its `stat`) is out of reach of this process
/// and of the agent alike: not searchable by coder's effective ids (the kernel asked, ACLs
/// included) and not owned by coder's user (whose agent could `chmod` it back). A
/// workspace holding another user's data directory (a container's database files, mode
/// 0700) failed every confined run's scan with `EACCES`; what neither can enter holds
/// nothing the agent could read or write, so it is left out. Anything else the walk cannot
/// open still fails it closed (a directory it may search but not list: the agent can
/// reach names in it the scan never saw). Root reaches everything (its capabilities), so
/// this is never true for root.
pub(crate) fn out_of_reach(dir: BorrowedFd<'_>, name: &OsStr, st: &FileStat) -> bool {
    // Searchable by everyone: the common case, answered before any call (the walk asks
    // this of every directory).
    if st.st_mode & 0o001 != 0 {
        return false;
    }
    let euid = nix::unistd::geteuid().as_raw();
    if euid == 0 || st.st_uid == euid {
        return false;
    }
    matches!(
        nix::unistd::faccessat(
            dir,
            name,
            nix::unistd::AccessFlags::X_OK,
            AtFlags::AT_EACCESS | AtFlags::AT_SYMLINK_NOFOLLOW,
        ),
        Err(Errno::EACCES)
    )
}

/// One warning naming the directories left out as [`out_of_reach`] (at most five, and how
/// many more), or none.
fn out_of_reach_warning(dirs: &mut [PathBuf]) -> Option<String> {
    const NAMED: usize = 5;
    if dirs.is_empty() {
        return None;
    }
    dirs.sort();
    let named: Vec<String> = dirs
        .iter()
        .take(NAMED)
        .map(|d| d.display().to_string())
        .collect();
    let more = match dirs.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "not scanned, as neither you nor the agent may enter them (another user's, \
         without search permission): {}{more}",
        named.join(", ")
    ))
}

/// Whether the walk may skip `stat` for an entry: a plain file the listing calls regular,
/// whose name matches nothing, needs no mask. Its only other use was its link count (other
/// names of a secret), which [`other_names`] finds when a masked secret has more than one.
/// Directories, symlinks, `.git` entries, matches and untyped entries are all `stat`ed.
/// A mount point lists as the type of what it covers, and a file can only be mounted
/// over a file, so the type is right for mount points too.
fn skips_stat(listed: Option<Kind>, git_entry: bool, secret: bool, protected: bool) -> bool {
    listed == Some(Kind::File) && !git_entry && !secret && !protected
}

/// Regular files held read-only (masked themselves, or in a directory held read-only)
/// that have other names, by (dev, ino): [`LinkPass::hold_other_names`] holds those names
/// too. The walk skipped `stat` inside held directories and did not look at link counts
/// of what it held, so each held path is looked at again here, from its tree's
/// descriptor (no symlink followed), and must still be what the scan saw. Held
/// directories are few and small (a git dir's `hooks`, `.vscode`); more entries in them
/// than [`MAX_HELD_ENTRIES`] fail the scan closed.
fn held_with_other_names(
    trees: &[TreeScan<'_>],
    masks: &[Mask],
    limits: ScanLimits,
) -> Result<HeldLook, SandboxError> {
    let mut found = HeldLook::default();
    let mut looked = 0usize;
    for held in masks
        .iter()
        .filter(|m| m.kind == MaskKind::ReadOnly && !m.secret)
    {
        let Some(tree) = trees
            .iter()
            .filter(|t| t.writable && held.path.starts_with(t.root))
            .max_by_key(|t| t.root.as_os_str().len())
        else {
            continue;
        };
        let Ok(rel) = held.path.strip_prefix(tree.root) else {
            continue;
        };
        let Ok(st) = nix::sys::stat::fstatat(
            tree.fd,
            if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                rel
            },
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) else {
            continue;
        };
        if (st.st_dev, st.st_ino) != (held.dev, held.ino) {
            continue;
        }
        match file_kind(&st) {
            Kind::File if st.st_nlink > 1 => {
                found.linked.insert((st.st_dev, st.st_ino));
            }
            Kind::Dir => {
                let dir = open_dir_beneath(tree.fd, rel)
                    .map_err(|e| walk_error(&held.path, "open", e))?;
                linked_files_under(dir, &held.path, limits, &mut looked, &mut found)?;
            }
            _ => {}
        }
    }
    Ok(found)
}

/// What [`held_with_other_names`] found.
#[derive(Debug, Default)]
struct HeldLook {
    /// (dev, ino) of held regular files with more than one name.
    linked: HashSet<(u64, u64)>,
    /// Symlinks inside held directories (a hook installed as `hooks/pre-commit ->
    /// ../../tools/pre-commit`): what they lead to is held too ([`guard_held_links`]).
    links: Vec<PathBuf>,
}

/// Every entry below the directory open as `top` (at `path`), `stat`ed (no symlink
/// followed, directories entered, at most `limits.max_depth` deep): `visit` gets each
/// entry that is not a directory, with its path.
fn stat_every_entry(
    top: OwnedFd,
    path: &Path,
    limits: ScanLimits,
    mut visit: impl FnMut(&Path, &FileStat) -> Result<(), SandboxError>,
) -> Result<(), SandboxError> {
    let mut pending = vec![(top, path.to_path_buf(), 0usize)];
    while let Some((dir, here, depth)) = pending.pop() {
        if depth > limits.max_depth {
            return Err(SandboxError::ScanLimit {
                what: "the directory depth",
                limit: limits.max_depth,
                path: here,
            });
        }
        for name in list_dir(&dir).map_err(|e| walk_error(&here, "list", e))? {
            let child = here.join(&name);
            let st = match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(walk_error(&child, "inspect", e)),
            };
            if file_kind(&st) == Kind::Dir {
                // Left out as the walk leaves it out (and names it in its warning): this
                // walk failed every run whose secret had a second name on `EACCES`.
                if out_of_reach(dir.as_fd(), name.as_os_str(), &st) {
                    continue;
                }
                let fd = open_dir_beneath(dir.as_fd(), Path::new(&name))
                    .map_err(|e| walk_error(&child, "open", e))?;
                pending.push((fd, child, depth + 1));
            } else {
                visit(&child, &st)?;
            }
        }
    }
    Ok(())
}

/// [`held_with_other_names`] in the held directory open as `top` (at `path`): its files
/// and links count against [`MAX_HELD_ENTRIES`].
fn linked_files_under(
    top: OwnedFd,
    path: &Path,
    limits: ScanLimits,
    looked: &mut usize,
    found: &mut HeldLook,
) -> Result<(), SandboxError> {
    stat_every_entry(top, path, limits, |entry, st| {
        *looked += 1;
        if *looked > MAX_HELD_ENTRIES {
            return Err(SandboxError::ScanLimit {
                what: "the number of entries in directories held read-only",
                limit: MAX_HELD_ENTRIES,
                path: entry.to_path_buf(),
            });
        }
        match file_kind(st) {
            Kind::File if st.st_nlink > 1 => {
                found.linked.insert((st.st_dev, st.st_ino));
            }
            Kind::Symlink => found.links.push(entry.to_path_buf()),
            _ => {}
        }
        Ok(())
    })
}

/// Other names, anywhere in `trees`, of the files in `wanted` (by dev and ino): secrets
/// masked whole, and files held read-only. The walk skipped `stat` for plain files, so
/// this second walk runs only when such a file has more than one link, which is rare. It
/// visits what the walk visits (no symlink is followed) and `stat`s every entry.
fn other_names(
    trees: &[TreeScan<'_>],
    wanted: &HashSet<(u64, u64)>,
    limits: ScanLimits,
) -> Result<HashMap<(u64, u64), Vec<PathBuf>>, SandboxError> {
    let mut found: HashMap<(u64, u64), Vec<PathBuf>> = HashMap::new();
    for tree in trees {
        let top = open_dir_beneath(tree.fd, Path::new("."))
            .map_err(|e| walk_error(tree.root, "open", e))?;
        stat_every_entry(top, tree.root, limits, |path, st| {
            if file_kind(st) == Kind::File && wanted.contains(&(st.st_dev, st.st_ino)) {
                found
                    .entry((st.st_dev, st.st_ino))
                    .or_default()
                    .push(path.to_path_buf());
            }
            Ok(())
        })?;
    }
    Ok(found)
}

/// Files in `trees` with more names than the trees show, when the walk left a directory
/// out ([`out_of_reach`]): another name may be a secret's in it, which no walk saw (a
/// container's `data/.env` hard-linked as `notes.txt`). They are masked as secrets are,
/// every name of theirs the trees show; a file linked from outside the workspace is
/// masked too, as which of its names are where cannot be told.
fn names_out_of_sight(
    trees: &[TreeScan<'_>],
    limits: ScanLimits,
) -> Result<Vec<(PathBuf, FileStat, PathBuf)>, SandboxError> {
    type Names = HashMap<PathBuf, (FileStat, PathBuf)>;
    let mut seen: HashMap<(u64, u64), (u64, Names)> = HashMap::new();
    for tree in trees {
        let top = open_dir_beneath(tree.fd, Path::new("."))
            .map_err(|e| walk_error(tree.root, "open", e))?;
        stat_every_entry(top, tree.root, limits, |path, st| {
            if file_kind(st) == Kind::File && st.st_nlink > 1 {
                seen.entry((st.st_dev, st.st_ino))
                    .or_insert_with(|| (st.st_nlink, HashMap::new()))
                    .1
                    .insert(path.to_path_buf(), (*st, tree.root.to_path_buf()));
            }
            Ok(())
        })?;
    }
    let mut unseen: Vec<(PathBuf, FileStat, PathBuf)> = seen
        .into_values()
        .filter(|(links, names)| (names.len() as u64) < *links)
        .flat_map(|(_, names)| names.into_iter().map(|(p, (st, root))| (p, st, root)))
        .collect();
    unseen.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(unseen)
}

pub(crate) fn beneath(flags: OFlag) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        )
}

fn open_dir_beneath(dir: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, Errno> {
    openat2(dir, rel, beneath(OFlag::O_RDONLY | OFlag::O_DIRECTORY))
}

/// Open `rel` beneath the directory `dir`, refusing symlinks (the last component itself
/// is opened, a symlink included, with `O_PATH`) and anything that leaves `dir`.
///
/// A path that fits in `PATH_MAX` is resolved by one `openat2`, whose `RESOLVE_BENEATH`
/// and `RESOLVE_NO_SYMLINKS` hold for every component; a longer one goes one name at a
/// time, which lifts `PATH_MAX` off deep trees. (One call instead of one per component
/// matters where this runs a thousand times: the helper opens every mask target.)
pub(crate) fn open_beneath(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
) -> Result<OwnedFd, Errno> {
    let names: Vec<&OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(Errno::EXDEV),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, parents)) = names.split_last() else {
        return openat2(dir, ".", beneath(flags));
    };
    if rel.as_os_str().len() < libc::PATH_MAX as usize {
        return openat2(dir, rel, beneath(flags));
    }
    let mut current: Option<OwnedFd> = None;
    for name in parents {
        let at = current.as_ref().map_or(dir, |fd| fd.as_fd());
        current = Some(openat2(
            at,
            *name,
            beneath(OFlag::O_PATH | OFlag::O_DIRECTORY),
        )?);
    }
    let at = current.as_ref().map_or(dir, |fd| fd.as_fd());
    openat2(at, *last, beneath(flags))
}

/// Compile globs. `*` does not cross `/`; `**` does.
pub(crate) fn compile_globs(list: GlobList, globs: &[String]) -> Result<GlobSet, SandboxError> {
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        let compiled = GlobBuilder::new(glob)
            .literal_separator(true)
            .case_insensitive(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| SandboxError::Glob {
                list,
                glob: glob.clone(),
                reason: e.kind().to_string(),
            })?;
        builder.add(compiled);
    }
    builder.build().map_err(|e| SandboxError::Glob {
        list,
        glob: globs.join(", "),
        reason: e.kind().to_string(),
    })
}

/// Directories of other projects' code that an installer writes and replaces whole (npm's
/// `node_modules`, Go's and Composer's `vendor`, Python's `site-packages`): the protected
/// globs do not reach below them. Packages ship `.vscode/`, `.husky/` or `.envrc`; held
/// read-only, they made `npm ci` (which removes the tree first) fail, and no program of
/// the user's reads a tool config there: an editor, direnv, the CLI and the hook managers
/// start from the directory the user works in, never from inside a package.
const DEPENDENCY_DIRS: [&str; 3] = ["node_modules", "vendor", "site-packages"];

/// Whether `rel` (relative to its tree) is protected by `set`: it matches, and no
/// directory above it is one of [`DEPENDENCY_DIRS`], unless a glob that matches it names
/// that directory itself. A glob matching whatever the directory is called
/// (`**/.vscode/**`) does not reach below it; one the user wrote for a path there
/// (`--protect 'vendor/hooks/**'`, their own vendored hook scripts) is honoured: dropped,
/// it protected nothing and said nothing.
pub(crate) fn is_protected(set: &GlobSet, rel: &Path) -> bool {
    let is_dependency = |part: &OsStr| DEPENDENCY_DIRS.iter().any(|dir| part == OsStr::new(dir));
    let below_one = rel
        .parent()
        .is_some_and(|parent| parent.components().any(|c| is_dependency(c.as_os_str())));
    if !below_one {
        return set.is_match(rel);
    }
    let matched = set.matches(rel);
    if matched.is_empty() {
        return false;
    }
    // The same path with every dependency directory above it renamed: a glob that no
    // longer matches named one.
    let parts: Vec<&OsStr> = rel.components().map(|c| c.as_os_str()).collect();
    let last = parts.len().saturating_sub(1);
    let renamed: PathBuf = parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            if i < last && is_dependency(part) {
                OsStr::new(NOT_A_DEPENDENCY_DIR)
            } else {
                part
            }
        })
        .collect();
    let elsewhere = set.matches(&renamed);
    matched.iter().any(|i| !elsewhere.contains(i))
}

/// The name [`is_protected`] puts in place of a dependency directory to tell the globs
/// that name it from those that match any name there.
const NOT_A_DEPENDENCY_DIR: &str = "coder-not-a-dependency-dir";

/// The names a protected glob stands for even before they exist: a glob of plain names
/// (`.envrc`, `.mcp.json`) is that path; `NAME/**` (`.claude/**`) is the directory
/// `NAME`; `**/` before either (`**/.envrc`, `**/.claude/**`: the name in every directory)
/// is the name at the root. Globs with wildcards elsewhere protect what exists at the
/// start; what appears during the run is moved aside at its end ([`super::gitguard`]).
pub(crate) fn literal_protected(globs: &[String]) -> Vec<PathBuf> {
    let is_literal =
        |part: &str| !part.is_empty() && !part.contains(['*', '?', '[', ']', '{', '}', '\\']);
    let mut names = Vec::new();
    for glob in globs {
        let glob = glob.trim_start_matches("./");
        let glob = glob.strip_prefix("**/").unwrap_or(glob);
        let prefix = glob.strip_suffix("/**").unwrap_or(glob);
        let parts: Vec<&str> = prefix.split('/').collect();
        if parts
            .iter()
            .all(|p| is_literal(p) && *p != "." && *p != "..")
        {
            names.push(parts.iter().collect::<PathBuf>());
        }
    }
    names.sort();
    names.dedup();
    names
}

/// A self-mount of `kind` (read-only, or a pin) of `path` if it exists and is not a
/// symlink (outside the workspace: the CLI's config dir and the names in it).
pub(crate) fn self_mask(path: &Path, kind: MaskKind) -> Result<Option<Mask>, SandboxError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() || meta.is_file() => Ok(Some(Mask {
            path: path.to_path_buf(),
            kind,
            is_dir: meta.is_dir(),
            dev: meta.dev(),
            ino: meta.ino(),
            secret: false,
        })),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SandboxError::io(format!("inspect {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_program_an_env_shebang_runs_is_read() {
        let line =
            |s: &str| -> Vec<Vec<u8>> { s.split(' ').map(|w| w.as_bytes().to_vec()).collect() };
        let program = |s: &str| super::env_program(&line(s)).map(|p| String::from_utf8(p).unwrap());
        assert_eq!(program("/usr/bin/env python3").as_deref(), Some("python3"));
        assert_eq!(
            program("/usr/bin/env -S python3 -u").as_deref(),
            Some("python3")
        );
        assert_eq!(
            program("/usr/bin/env -u X A=1 node").as_deref(),
            Some("node")
        );
        assert_eq!(
            program("/usr/bin/env -Spython3").as_deref(),
            Some("python3")
        );
        assert_eq!(
            program("/usr/bin/env -vS python3").as_deref(),
            Some("python3")
        );
        assert_eq!(
            program("/usr/bin/env --split-string=python3 -u").as_deref(),
            Some("python3")
        );
        assert_eq!(
            program("/usr/bin/env -uX -CX node").as_deref(),
            Some("node")
        );
        assert_eq!(program("/usr/bin/python3 -u"), None);
        assert_eq!(program("/usr/bin/env"), None);
    }

    use super::*;
    use crate::sandbox::DEFAULT_DENY_GLOBS;
    use std::os::unix::ffi::OsStringExt;

    fn globs() -> Vec<String> {
        DEFAULT_DENY_GLOBS.iter().map(|g| g.to_string()).collect()
    }

    fn scan(
        ws: &Path,
        deny: &[String],
        protect: &[String],
        writable: bool,
    ) -> Result<ScanOutput, SandboxError> {
        scan_limited(ws, deny, protect, writable, ScanLimits::default())
    }

    fn scan_limited(
        ws: &Path,
        deny: &[String],
        protect: &[String],
        writable: bool,
        limits: ScanLimits,
    ) -> Result<ScanOutput, SandboxError> {
        let fd = crate::sandbox::sys::open_nofollow(ws).unwrap();
        let deny = compile_globs(GlobList::Deny, deny)?;
        let protect_set = compile_globs(GlobList::Protect, protect)?;
        let literal = literal_protected(protect);
        let tree = TreeScan {
            root: ws,
            fd: fd.as_fd(),
            writable,
            protect: Some(&protect_set),
            protect_literal: &literal,
            kept: None,
        };
        let mut created = Vec::new();
        let scanned = scan_trees(&[tree], &deny, limits, &mut created);
        match scanned {
            Ok(mut out) => {
                out.placeholders = created;
                Ok(out)
            }
            Err(e) => {
                created.iter().for_each(Placeholder::remove);
                Err(e)
            }
        }
    }

    fn paths(masks: &[Mask], root: &Path) -> Vec<String> {
        let mut v: Vec<_> = masks
            .iter()
            .map(|m| {
                let rel = m.path.strip_prefix(root).unwrap().display().to_string();
                format!("{rel}:{:?}", m.kind)
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn finds_default_secrets_and_leaves_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        for f in [
            ".env",
            ".env.local",
            "deep/a/b/.env",
            "config/app.pem",
            "config/app.PEM",
            "id.key",
            "secrets/db.txt",
            "secrets/nested/x",
            "src/main.rs",
            ".envrc",
            "not.env",
            "keys/readme.md",
        ] {
            let p = ws.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, "x").unwrap();
        }
        let out = scan(&ws, &globs(), &[], false).unwrap();
        assert_eq!(
            paths(&out.masks, &ws),
            vec![
                ".env.local:Empty",
                ".env:Empty",
                "config/app.PEM:Empty",
                "config/app.pem:Empty",
                "deep/a/b/.env:Empty",
                "id.key:Empty",
                "secrets/db.txt:Empty",
                "secrets/nested/x:Empty",
                "secrets:ReadOnly",
            ]
        );
    }

    #[test]
    fn non_utf8_names_are_masked() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        let odd = OsString::from_vec(b"a\xff.pem".to_vec());
        fs::write(ws.join(&odd), "x").unwrap();
        let out = scan(&ws, &globs(), &[], false).unwrap();
        assert_eq!(out.masks.len(), 1);
        assert_eq!(out.masks[0].path, ws.join(&odd));
        let json = serde_json::to_string(&out.masks[0]).unwrap();
        let back: Mask = serde_json::from_str(&json).unwrap();
        assert_eq!(back, out.masks[0]);
    }

    #[test]
    fn caps_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(ws.join("a/b/c/d")).unwrap();
        fs::write(ws.join("a/b/c/d/.env"), "x").unwrap();
        let shallow = ScanLimits {
            max_depth: 2,
            max_matches: 10,
        };
        let err = scan_limited(&ws, &globs(), &[], false, shallow).unwrap_err();
        assert!(matches!(err, SandboxError::ScanLimit { .. }), "{err}");
        assert!(err.to_string().contains("a/b/c"), "{err}");
        for i in 0..3 {
            fs::write(ws.join(format!("{i}.key")), "x").unwrap();
        }
        let few = ScanLimits {
            max_depth: 10,
            max_matches: 2,
        };
        let err = scan_limited(&ws, &globs(), &[], false, few).unwrap_err();
        assert!(matches!(err, SandboxError::ScanLimit { .. }), "{err}");
    }

    #[test]
    fn symlinked_and_hard_linked_secrets_are_masked_at_their_target() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        fs::write(ws.join("real.txt"), "secret").unwrap();
        std::os::unix::fs::symlink("real.txt", ws.join(".env")).unwrap();
        fs::write(ws.join("server.key"), "k").unwrap();
        fs::hard_link(ws.join("server.key"), ws.join("copy.txt")).unwrap();
        let out = scan(&ws, &globs(), &[], false).unwrap();
        assert_eq!(
            paths(&out.masks, &ws),
            vec!["copy.txt:Empty", "real.txt:Empty", "server.key:Empty"]
        );
    }

    /// The walk skips `stat` for unmatched plain files; other names of a secret are still
    /// found wherever they sit (before or after the secret in walk order, deeper, inside
    /// a secret dir's sibling, behind a symlinked secret), and a plain file with several
    /// names but no secret among them stays unmasked.
    #[test]
    fn other_names_of_secrets_are_found_without_stat_of_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(ws.join("a/b/c")).unwrap();
        fs::create_dir_all(ws.join("z")).unwrap();
        fs::write(ws.join("a/b/c/notes.txt"), "secret").unwrap();
        fs::hard_link(ws.join("a/b/c/notes.txt"), ws.join("z/id_rsa")).unwrap();
        fs::hard_link(ws.join("a/b/c/notes.txt"), ws.join("0first.txt")).unwrap();
        fs::write(ws.join("target.txt"), "t").unwrap();
        fs::hard_link(ws.join("target.txt"), ws.join("a/other.txt")).unwrap();
        std::os::unix::fs::symlink("target.txt", ws.join(".env")).unwrap();
        fs::write(ws.join("plain.txt"), "p").unwrap();
        fs::hard_link(ws.join("plain.txt"), ws.join("a/plain2.txt")).unwrap();
        let out = scan(&ws, &globs(), &[], false).unwrap();
        assert_eq!(
            paths(&out.masks, &ws),
            vec![
                "0first.txt:Empty",
                "a/b/c/notes.txt:Empty",
                "a/other.txt:Empty",
                "target.txt:Empty",
                "z/id_rsa:Empty",
            ]
        );
    }

    #[test]
    fn dependency_dirs_stop_only_the_globs_that_do_not_name_them() {
        let globs = ["**/.vscode/**", "vendor/hooks/**", "**/.envrc"].map(String::from);
        let set = compile_globs(GlobList::Protect, &globs).unwrap();
        let p = |rel: &str| is_protected(&set, Path::new(rel));
        assert!(p("pkg/.vscode/tasks.json"));
        assert!(!p("node_modules/x/.vscode/tasks.json"));
        assert!(!p("pkg/vendor/x/.envrc"));
        // The glob names `vendor`: honoured below it, a default there still not.
        assert!(p("vendor/hooks/pre-commit.sh"));
        assert!(p("vendor/hooks/.vscode/tasks.json"));
        assert!(!p("vendor/other/.vscode/tasks.json"));
        assert!(!p("pkg/vendor/hooks/pre-commit.sh"));
        assert!(!p("vendor/.envrc"));
        assert!(p(".envrc"));
    }

    #[test]
    fn bad_glob_is_reported() {
        let err = compile_globs(GlobList::Protect, &["a[".to_string()]).unwrap_err();
        assert!(err.to_string().contains("--protect glob \"a[\""), "{err}");
    }

    #[test]
    fn every_git_dir_is_guarded_and_absent_names_are_held() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(ws.join(".git/config"), "[core]").unwrap();
        fs::create_dir_all(ws.join(".git/modules/sub/objects")).unwrap();
        fs::create_dir_all(ws.join(".git/modules/sub/refs")).unwrap();
        fs::write(ws.join(".git/modules/sub/HEAD"), "x").unwrap();
        // Not a git dir to git (no `objects`, `refs` nor `commondir`): left alone.
        fs::create_dir_all(ws.join(".git/modules/not")).unwrap();
        fs::write(ws.join(".git/modules/not/HEAD"), "x").unwrap();
        fs::create_dir_all(ws.join("nested/.git")).unwrap();
        let protect = vec![".envrc".to_string(), ".claude/**".to_string()];
        let out = scan(&ws, &globs(), &protect, true).unwrap();
        let got = paths(&out.masks, &ws);
        for want in [
            ".git:Pin",
            ".git/config:ReadOnly",
            ".git/config.worktree:ReadOnly",
            ".git/commondir:ReadOnly",
            ".git/hooks:ReadOnly",
            ".git/info:ReadOnly",
            ".git/modules/sub/config:ReadOnly",
            ".git/modules/sub/hooks:ReadOnly",
            "nested/.git:Pin",
            "nested/.git/config:ReadOnly",
            ".envrc:ReadOnly",
            ".claude:ReadOnly",
        ] {
            assert!(
                got.contains(&want.to_string()),
                "{want} missing from {got:?}"
            );
        }
        assert!(
            !got.iter().any(|m| m.starts_with(".git/modules/not/")),
            "{got:?}"
        );
        assert_eq!(
            fs::read_link(ws.join(".git/config.worktree")).unwrap(),
            Path::new(ABSENT_TARGET)
        );
        assert_eq!(fs::read(ws.join(".git/commondir")).unwrap(), COMMONDIR_SELF);
        assert!(ws.join(".envrc").is_dir());
        for p in &out.placeholders {
            p.remove();
        }
        assert!(fs::symlink_metadata(ws.join(".git/commondir")).is_err());
        assert!(fs::symlink_metadata(ws.join(".git/config.worktree")).is_err());
        assert!(fs::symlink_metadata(ws.join(".envrc")).is_err());
        assert!(ws.join(".git/hooks").is_dir(), "pre-existing names stay");
    }

    #[test]
    fn the_default_protected_names_are_held_in_every_directory() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        for file in [
            "pkg/.claude/settings.json",
            "pkg/.mcp.json",
            "pkg/CLAUDE.local.md",
            "a/b/.vscode/tasks.json",
            "a/.envrc",
            ".pre-commit-config.yaml",
            "svc/lefthook.yml",
            "svc/.lintstagedrc.json",
            "web/lint-staged.config.mjs",
            "web/.simple-git-hooks.cjs",
            "src/main.rs",
        ] {
            fs::create_dir_all(ws.join(file).parent().unwrap()).unwrap();
            fs::write(ws.join(file), "x").unwrap();
        }
        let protect: Vec<String> = crate::sandbox::DEFAULT_PROTECT_GLOBS
            .iter()
            .map(|g| g.to_string())
            .collect();
        let out = scan(&ws, &globs(), &protect, true).unwrap();
        let got = paths(&out.masks, &ws);
        for want in [
            "pkg/.claude:ReadOnly",
            "pkg/.mcp.json:ReadOnly",
            "pkg/CLAUDE.local.md:ReadOnly",
            "a/b/.vscode:ReadOnly",
            "a/.envrc:ReadOnly",
            ".pre-commit-config.yaml:ReadOnly",
            "svc/lefthook.yml:ReadOnly",
            "svc/.lintstagedrc.json:ReadOnly",
            "web/lint-staged.config.mjs:ReadOnly",
            "web/.simple-git-hooks.cjs:ReadOnly",
            // Their directories pinned, and the root's absent names held as before.
            "pkg:Pin",
            "a/b:Pin",
            ".claude:ReadOnly",
            ".envrc:ReadOnly",
        ] {
            assert!(
                got.contains(&want.to_string()),
                "{want} missing from {got:?}"
            );
        }
        assert!(!got.iter().any(|m| m.starts_with("src")), "{got:?}");
        // Hook managers' configs are held where they exist, never made at the root.
        assert!(
            !out.placeholders
                .iter()
                .any(|p| p.path.starts_with(ws.join("svc")) || p.path.ends_with("lefthook.yml")),
            "{:?}",
            out.placeholders
        );
        for p in &out.placeholders {
            p.remove();
        }
    }

    /// A git that reads `commondir` while the placeholder is made finds it absent or whole,
    /// never empty (git dies on an empty one), and no temporary name is left behind.
    #[test]
    fn a_commondir_placeholder_is_never_seen_half_written() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        let git_dir = fs::File::open(dir.path()).unwrap();
        let path = dir.path().join("commondir");
        let done = AtomicBool::new(false);
        let empty_reads = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut empty = 0;
                while !done.load(Ordering::Relaxed) {
                    if fs::read(&path).is_ok_and(|text| text.is_empty()) {
                        empty += 1;
                    }
                }
                empty
            });
            for _ in 0..2000 {
                create_placeholder(git_dir.as_fd(), "commondir", PlaceholderKind::CommonDirSelf)
                    .unwrap();
                assert_eq!(fs::read(&path).unwrap(), COMMONDIR_SELF);
                fs::remove_file(&path).unwrap();
            }
            done.store(true, Ordering::Relaxed);
            reader.join().unwrap()
        });
        assert_eq!(empty_reads, 0, "the reader saw an empty commondir");
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_commondir_placeholder_is_not_made_over_a_file_that_exists() {
        let dir = tempfile::tempdir().unwrap();
        let git_dir = fs::File::open(dir.path()).unwrap();
        fs::write(dir.path().join("commondir"), "../elsewhere\n").unwrap();
        let made = create_placeholder(git_dir.as_fd(), "commondir", PlaceholderKind::CommonDirSelf);
        assert_eq!(made.err(), Some(Errno::EEXIST));
        assert_eq!(
            fs::read(dir.path().join("commondir")).unwrap(),
            b"../elsewhere\n"
        );
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "a temporary name is left"
        );
    }

    #[test]
    fn a_git_file_pointing_outside_adds_a_warning_not_a_guard() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let ws = root.join("ws");
        fs::create_dir_all(root.join("home")).unwrap();
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join(".git"), "gitdir: ../home\n").unwrap();
        let out = scan(&ws, &globs(), &[], true).unwrap();
        assert_eq!(paths(&out.masks, &ws), vec![".git:ReadOnly"]);
        assert!(!root.join("home/hooks").exists());
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    }

    #[test]
    fn the_directories_above_protected_entries_are_pinned_once() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        for i in 0..200 {
            fs::create_dir_all(ws.join(format!("x/d{i}"))).unwrap();
            fs::write(ws.join(format!("x/d{i}/run.sh")), "").unwrap();
        }
        let limits = ScanLimits {
            max_depth: 64,
            max_matches: 450,
        };
        // 200 files, `x` and its 200 directories pinned: some 401 masks (`x` once per
        // thread of the walk; pinned once per entry, `x` alone took 200).
        let out = scan_limited(&ws, &globs(), &["**/*.sh".to_string()], true, limits).unwrap();
        let pins: Vec<&Path> = out
            .masks
            .iter()
            .filter(|m| m.kind == MaskKind::Pin)
            .map(|m| m.path.as_path())
            .collect();
        assert!(pins.len() < 220, "{:?}", paths(&out.masks, &ws));
        assert_eq!(pins.iter().collect::<HashSet<_>>().len(), 201);
        assert!(
            out.masks
                .iter()
                .any(|m| m.kind == MaskKind::Pin && m.path == ws.join("x")),
            "the shared parent is pinned"
        );
    }

    #[test]
    fn literal_protected_names() {
        let globs: Vec<String> = [
            ".claude/**",
            ".mcp.json",
            "**/*.sh",
            "a/b.json",
            "x/*/y",
            "**/.envrc",
            "**/.vscode/**",
            "**/.pre-commit-config.{yaml,yml}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            literal_protected(&globs),
            vec![
                PathBuf::from(".claude"),
                PathBuf::from(".envrc"),
                PathBuf::from(".mcp.json"),
                PathBuf::from(".vscode"),
                PathBuf::from("a/b.json")
            ]
        );
    }
}
