//! Other names of what is masked or held: a secret's hard links and symlinks to it,
//! found by a second walk that runs only when a masked file has more than one link, and
//! names the agent could reach a held file by.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use globset::GlobSet;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, fstatat};

use crate::sandbox::SandboxError;
use crate::sandbox::listing::Kind;

use super::dirs::{file_kind, list_dir, open_beneath, open_dir_beneath, out_of_reach, walk_error};
use super::{Inside, Mask, MaskKind, ScanLimits, ScanOutput, TreeScan, Walker, mask, push_mask};

/// Masks for symlinked secrets' targets and for other names of masked files.
pub(super) struct LinkPass<'a> {
    pub(super) out: &'a mut ScanOutput,
    pub(super) limits: ScanLimits,
}

impl LinkPass<'_> {
    /// A symlink named like a secret shows its target's content: mask the target when it
    /// lies in a scanned root. Targets elsewhere are either not granted at all (the kernel
    /// denies them) or system files that are readable anyway.
    pub(super) fn follow_symlinks(
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
                        cancel: tree.cancel,
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
    pub(super) fn hold_other_names(
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
    /// ino; [`linked_never_visible`](crate::sandbox::home::linked_never_visible)) masked as secrets: a hard link to
    /// `~/.ssh/authorized_keys` in a `--write` directory let the agent append its key
    /// (round twenty-three's second review). One held read-only is hidden instead.
    pub(super) fn mask_home_keys(
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
    pub(super) fn add_hard_links(&mut self, linked: &HashMap<(u64, u64), Vec<PathBuf>>) {
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

/// Whether the walk may skip `stat` for an entry: a plain file the listing calls regular,
/// whose name matches nothing, needs no mask. Its only other use was its link count (other
/// names of a secret), which [`other_names`] finds when a masked secret has more than one.
/// Directories, symlinks, `.git` entries, matches and untyped entries are all `stat`ed.
/// A mount point lists as the type of what it covers, and a file can only be mounted
/// over a file, so the type is right for mount points too.
pub(super) fn skips_stat(
    listed: Option<Kind>,
    git_entry: bool,
    secret: bool,
    protected: bool,
) -> bool {
    listed == Some(Kind::File) && !git_entry && !secret && !protected
}

/// Regular files held read-only (masked themselves, or in a directory held read-only)
/// that have other names, by (dev, ino): [`LinkPass::hold_other_names`] holds those names
/// too. The walk skipped `stat` inside held directories and did not look at link counts
/// of what it held, so each held path is looked at again here, from its tree's
/// descriptor (no symlink followed), and must still be what the scan saw. Held
/// directories are few and small (a git dir's `hooks`, `.vscode`); more entries in them
/// than [`MAX_HELD_ENTRIES`] fail the scan closed.
pub(super) fn held_with_other_names(
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
pub(super) struct HeldLook {
    /// (dev, ino) of held regular files with more than one name.
    pub(super) linked: HashSet<(u64, u64)>,
    /// Symlinks inside held directories (a hook installed as `hooks/pre-commit ->
    /// ../../tools/pre-commit`): what they lead to is held too ([`guard_held_links`](crate::sandbox::scan::guard_held_links)).
    pub(super) links: Vec<PathBuf>,
}

/// Every entry below the directory open as `top` (at `path`), `stat`ed (no symlink
/// followed, directories entered, at most `limits.max_depth` deep): `visit` gets each
/// entry that is not a directory, with its path.
pub(super) fn stat_every_entry(
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
pub(super) fn linked_files_under(
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
pub(super) fn other_names(
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
pub(super) fn names_out_of_sight(
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

/// Most entries [`held_with_other_names`] looks at in directories held read-only (a git
/// dir's `hooks`, `.vscode`, `.claude`: tens to hundreds in a real project).
pub(super) const MAX_HELD_ENTRIES: usize = 100_000;
