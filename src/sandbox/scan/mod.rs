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
//!
//! The walk is [`Walker`] here; beside it: [`git_dirs`] (git directories and pointers),
//! [`held`] (configs and what the user's programs run), [`placeholders`] (absent
//! protected names), [`links`] (other names of masked and held files), [`dirs`] (opening
//! and listing beneath a descriptor) and [`globs`] (the compiled glob lists).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use globset::GlobSet;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat2};
use nix::sys::stat::{FileStat, fstat, fstatat};
use serde::{Deserialize, Serialize};

use super::SandboxError;
use super::listing::{DirSummary, ScanListings, ctime_of, is_git_dir_listing, is_git_name};
use super::listing_cache::{Kept, KeptDir, Recorder, TreeKept};
use super::scan_watch::{CheckedTree, ScanWatch, TreeMoved};
use dirs::{is_plain_relative, open_dir_beneath, out_of_reach_warning, walk_error};
use held::{ConfigWalk, ForeignName, MAX_INCLUDED, NamedBy};
use links::{
    HeldLook, LinkPass, MAX_HELD_ENTRIES, held_with_other_names, names_out_of_sight, other_names,
    skips_stat,
};

pub(crate) use super::listing::Kind;

mod dirs;
mod git_dirs;
mod globs;
mod held;
mod links;
mod placeholders;

pub(crate) use dirs::{beneath, file_kind, list_dir_kinds, open_beneath, out_of_reach};
pub(crate) use globs::{compile_globs, is_protected, literal_protected, self_mask};

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
    /// Looked at once per directory and per held script: the caller was stopped.
    pub cancel: &'a super::SetupCancel,
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
    /// The same keys (dev, ino), for the look for their other names in the private root
    /// ([`super::hostmask::HostSecrets`]).
    pub home_key_links: Vec<(u64, u64)>,
    /// Protected globs (a writable tree's root, the glob relative to it) the end-of-run
    /// guard moves aside what the run made or changed at: the names Python imports at
    /// start in a directory a held line puts on `PYTHONPATH` ([`held`]'s
    /// `guard_python_path`), and the files held scripts run by path that were absent at
    /// the start (`Walker::move_aside_if_made`).
    pub made_aside_globs: Vec<(PathBuf, String)>,
}

/// Scans of trees that kept changing under them before coder gives up. Runs started at
/// once in one workspace (an orchestrator's parallel calls) each make their placeholders
/// once, and each batch another run makes during a scan costs this one a scan more: with
/// three, one run of six started at once failed now and then after its third scan ("…
/// appeared … in each of 3 scans"; round thirty's CI). Eight leaves room for seven at
/// once, and a tree that really keeps changing still ends in a refusal.
const SCAN_ATTEMPTS: usize = 8;

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
    let keys = super::home::KeyPlaces::default();
    scan_trees_with(trees, deny, (limits, &keys), created)
}

/// [`scan_trees`] with the home directories' never-visible places resolved once for the
/// run (`keys`, [`super::home::KeyPlaces`]).
pub(crate) fn scan_trees_with(
    trees: &[TreeScan<'_>],
    deny: &GlobSet,
    (limits, keys): (ScanLimits, &super::home::KeyPlaces),
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
    for home in super::home::homes_here() {
        let places = keys.places_there(&home);
        home_keys.extend(super::home::linked_never_visible(&places)?);
    }
    let home_key_links: Vec<(u64, u64)> = home_keys.iter().copied().collect();
    let mut attempt = 1;
    loop {
        let mut out = ScanOutput {
            linked_home_keys: home_keys.clone(),
            home_key_links: home_key_links.clone(),
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
/// `EXDEV` for a path that a rename took out from beneath its directory), or because a
/// name it found absent was there when it made its placeholder (`EEXIST`: another run
/// starting in the same tree made its own placeholder there a moment before; the next
/// attempt masks it as the name it now is): the tree changed under it.
fn raced(e: &SandboxError) -> Option<TreeMoved> {
    match e {
        SandboxError::Syscall {
            op: "create placeholder",
            errno: Errno::EEXIST,
            path,
        } => Some(TreeMoved {
            path: PathBuf::from(path),
            what: "appeared",
        }),
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
        let mut parts =
            walk_in_parallel(tree, deny, limits, &out.listings, watch).map_err(|(e, made)| {
                out.placeholders.extend(made);
                e
            })?;
        // Every part's placeholders first: an `absorb` that fails (the cap on matches)
        // must not drop those of the parts after it.
        for part in &mut parts {
            out.placeholders.append(&mut part.out.placeholders);
        }
        for part in parts {
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
        // Those of a git dir met by the walk (its hooks' scripts, its configs'
        // `PYTHONPATH`): round thirty's review found them dropped here, and the agent's
        // `tools/local.sh` that the user's `.git/hooks/pre-commit` runs when there ran at
        // the next commit.
        for glob in part.made_aside_globs {
            if !self.made_aside_globs.contains(&glob) {
                self.made_aside_globs.push(glob);
            }
        }
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
) -> Result<Vec<WalkPart>, (SandboxError, Vec<Placeholder>)> {
    let top = open_dir_beneath(tree.fd, Path::new("."))
        .map_err(|e| (walk_error(tree.root, "open", e), Vec::new()))?;
    let st = fstat(top.as_fd()).map_err(|e| (walk_error(tree.root, "inspect", e), Vec::new()))?;
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
        let mut walked = Ok(());
        while let Some(task) = queue.next() {
            walked = walker.task(task);
            queue.done(walked.is_err());
            if walked.is_err() {
                break;
            }
            help(&queue);
        }
        (Some(part), walked)
    };
    type Walked = (Option<WalkPart>, Result<(), SandboxError>);
    let results: Vec<Walked> = std::thread::scope(|scope| {
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
                let panicked = SandboxError::io(
                    format!("scan {}", tree.root.display()),
                    std::io::Error::other("a walk thread panicked"),
                );
                (None, Err(panicked))
            }));
        }
        results
    });
    parts_or_placeholders(results)
}

/// The walk's parts, or its first error with the placeholders every part made: the
/// caller removes them (round thirty-one's review: a walk that failed, a signal's
/// cancel or a race with another run's scan, dropped its threads' parts, and the
/// placeholders they had made, `.git/commondir`, a dangling `.git/config.worktree`,
/// `.envrc/`, stayed in the user's tree for good, registered nowhere).
fn parts_or_placeholders(
    results: Vec<(Option<WalkPart>, Result<(), SandboxError>)>,
) -> Result<Vec<WalkPart>, (SandboxError, Vec<Placeholder>)> {
    let mut parts = Vec::new();
    let mut failed = None;
    for (part, walked) in results {
        parts.extend(part);
        if let Err(e) = walked {
            failed.get_or_insert(e);
        }
    }
    match failed {
        None => Ok(parts),
        Some(e) => Err((
            e,
            parts
                .into_iter()
                .flat_map(|part| part.out.placeholders)
                .collect(),
        )),
    }
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

/// A directory as the walk reads it: the entries it looks at (with their kinds when
/// the listing gave them), whether git would take it for a git dir, and the start of its
/// record for the next run.
type ListedDir = (Vec<(OsString, Option<Kind>)>, bool, Option<KeptDir>);

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
    fn kept(&self, st: &FileStat, rel: &Path, inside: Inside) -> Option<&'a Arc<KeptDir>> {
        let tree: Option<&'a TreeKept> = self.tree.kept;
        if inside != Inside::default() || self.recorder.is_none() {
            return None;
        }
        tree?.get(st, rel, self.out.listings.trusted_before())
    }

    /// Use a kept listing: for the git guard, and to keep for the next run.
    fn reuse(&mut self, st: &FileStat, rel: &Path, kept: &Arc<KeptDir>) {
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

    /// Holds the directory at `path` (`rel`, `st`) whole when it is a secret's (`secret`,
    /// or it would hold one) or protected (`protected`, or what it would hold is), unless
    /// a directory above it is held so already; what its walk is inside of then. The
    /// globs are matched against what it would hold only where that decides.
    fn hold_dir(
        &mut self,
        path: &Path,
        rel: &Path,
        st: &FileStat,
        inside: Inside,
        (secret, protected): (bool, bool),
    ) -> Result<Inside, SandboxError> {
        let mut next = inside;
        if inside.secret {
        } else if secret || self.deny.is_match(rel.join(PROBE_CHILD)) {
            self.push(mask(path.to_path_buf(), MaskKind::ReadOnly, st, true))?;
            next.secret = true;
        } else if !inside.protected
            && (protected
                || (self.tree.protect).is_some_and(|set| is_protected(set, &rel.join(PROBE_CHILD))))
        {
            self.push(mask(path.to_path_buf(), MaskKind::ReadOnly, st, false))?;
            next.protected = true;
        }
        Ok(next)
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
        self.tree.cancel.check()?;
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
        let (entries, git_dir, mut fresh) =
            self.entries_here(&dir, &st, (path_only, inside), rel, &here)?;
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
            // A link too: direnv loads an `.envrc` that is a link (`ln -s config/envrc
            // .envrc`) in the link's directory (round thirty-two's review: its `PATH_add
            // tools/bin` was never read, and the agent's `tools/bin/git` ran).
            let file_or_link = matches!(kind, Kind::File | Kind::Symlink);
            if protected && file_or_link && name == ".envrc" && self.tree.writable {
                self.guard_envrc_path(&rel_child)?;
            }
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
                    let next =
                        self.hold_dir(&path, &rel_child, &st, inside, (secret, protected))?;
                    match self.queue {
                        Some(queue) => queue.push(Task {
                            dir: TaskDir::Child(dir.clone(), name),
                            st,
                            rel: rel_child,
                            depth: depth + 1,
                            inside: next,
                        }),
                        None => {
                            let child = open_dir_beneath(dir.as_fd(), Path::new(&name))
                                .map_err(|e| walk_error(&path, "open", e))?;
                            self.walk(child, false, &rel_child, depth + 1, next)?;
                        }
                    }
                }
                Kind::File => self.file_entry(path, &st, secret, protected)?,
                Kind::Symlink if secret => self.symlinks.push(path),
                Kind::Symlink if protected => self.guard_link(path, &st)?,
                Kind::Symlink | Kind::Other => {}
            }
        }
        if let (Some(fresh), Some(recorder)) = (fresh, self.recorder.as_deref_mut())
            && inside == Inside::default()
        {
            recorder.record(dir.as_fd(), &st, fresh);
        }
        Ok(())
    }

    /// The entries of `dir` (described by `st`) the walk looks at, whether git would take it
    /// for a git dir, and the start of its record for the next run: those a run before
    /// kept, when its record still holds, else a fresh listing (`path_only`: `dir` was
    /// opened `O_PATH`, and is reopened to be read).
    fn entries_here(
        &mut self,
        dir: &OwnedFd,
        st: &FileStat,
        (path_only, inside): (bool, Inside),
        rel: &Path,
        here: &Path,
    ) -> Result<ListedDir, SandboxError> {
        if let Some(kept) = self.kept(st, rel, inside) {
            if let Some(w) = self.watch {
                w.watch.kept(w.tree, st, rel);
            }
            self.reuse(st, rel, kept);
            let entries = kept.attention.iter().map(|(n, k)| (n.clone(), Some(*k)));
            return Ok((entries.collect(), kept.summary.git_dir, None));
        }
        // Opened `O_PATH` on the strength of a record that no longer holds: reopen the
        // same directory (its `fstat` above stays the one before the listing) to read it.
        let readable = if path_only {
            let fd = open_dir_beneath(dir.as_fd(), Path::new("."))
                .map_err(|e| walk_error(here, "open", e))?;
            Some(fd)
        } else {
            None
        };
        if let Some(w) = self.watch {
            let special = inside != Inside::default();
            w.watch
                .before_listing(w.tree, dir.as_fd(), st, rel, special, here)?;
        }
        self.list(readable.as_ref().unwrap_or(dir), st, rel, here)
    }

    /// A file the walk met at `path`: its other names noted when it has more than one;
    /// masked empty when `secret`, held read-only when `protected`.
    fn file_entry(
        &mut self,
        path: PathBuf,
        st: &FileStat,
        secret: bool,
        protected: bool,
    ) -> Result<(), SandboxError> {
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
            self.push(mask(path, MaskKind::Empty, st, true))?;
        } else if protected {
            self.push(mask(path, MaskKind::ReadOnly, st, false))?;
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
    ) -> Result<ListedDir, SandboxError> {
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_program_an_env_shebang_runs_is_read() {
        let line =
            |s: &str| -> Vec<Vec<u8>> { s.split(' ').map(|w| w.as_bytes().to_vec()).collect() };
        let program = |s: &str| env_program(&line(s)).map(|p| String::from_utf8(p).unwrap());
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

    use super::held::env_program;
    use super::placeholders::create_placeholder;
    use super::*;
    use crate::sandbox::DEFAULT_DENY_GLOBS;
    use crate::sandbox::GlobList;
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
            cancel: &crate::sandbox::SetupCancel::default(),
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

    /// A walk that fails midway (here a directory too deep; a signal's cancel, a race with
    /// another run's scan) hands back every placeholder its threads made, which the
    /// caller removes: round thirty-one's review found them dropped with the failed
    /// threads' parts, and `.git/commondir`, a dangling `.git/config.worktree` and
    /// `.git/remotes/` left in the user's repository for good.
    #[test]
    fn a_failed_walk_leaves_no_placeholder_behind() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        let git = std::process::Command::new("git")
            .args(["init", "-q"])
            .arg(&ws)
            .status()
            .unwrap();
        assert!(git.success());
        let _ = fs::remove_dir_all(ws.join(".git/branches"));
        fs::create_dir_all(ws.join("z/y/x/w/v")).unwrap();
        for i in 0..40 {
            fs::create_dir_all(ws.join(format!("d{i}/e"))).unwrap();
        }
        let before = listing(&ws);
        let shallow = ScanLimits {
            max_depth: 3,
            max_matches: 8192,
        };
        let err = scan_limited(&ws, &globs(), &[".envrc".into()], true, shallow).unwrap_err();
        assert!(matches!(err, SandboxError::ScanLimit { .. }), "{err}");
        assert_eq!(listing(&ws), before);
    }

    /// The names below `ws` (not `.git/objects`), sorted.
    fn listing(ws: &Path) -> Vec<String> {
        let mut names = Vec::new();
        let mut dirs = vec![ws.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.ends_with(".git/objects") {
                    continue;
                }
                if entry.file_type().unwrap().is_dir() {
                    dirs.push(path.clone());
                }
                names.push(path.strip_prefix(ws).unwrap().display().to_string());
            }
        }
        names.sort();
        names
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
