//! Git directories met by the walk: a `.git` directory or file (`gitdir:`), `commondir`,
//! repositories nested below, and the names in each that git runs or reads as its config
//! (`config`, `hooks/`, `info/`, …), held read-only; what is read here only adds
//! protection.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, fstatat};

use crate::sandbox::SandboxError;
use crate::sandbox::config_text::{self};
use crate::sandbox::listing::Kind;
use crate::sandbox::listing::is_git_dir_listing;

use super::dirs::{file_kind, is_plain_relative, list_dir, open_beneath, walk_error};
use super::held::{ConfigWalk, read_config, trim_ascii, user_git_configs};
use super::{
    GIT_GUARDED_DIRS, GIT_GUARDED_FILES, MaskKind, PlaceholderKind, Walker, mask, outside_warning,
};

impl<'a> Walker<'a, '_> {
    /// A `.git` entry anywhere in a writable tree: the entry itself may not be removed,
    /// renamed or replaced, and the git dir it stands for is guarded.
    pub(super) fn git_entry(
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
    pub(super) fn guard_work_tree_commands(
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
    pub(super) fn git_pointer(
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
    pub(super) fn check_commondir(
        &mut self,
        gitdir: &Path,
        rel: &Path,
    ) -> Result<(), SandboxError> {
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
    pub(super) fn nested_git_dirs(&mut self, rel: &Path) -> Result<(), SandboxError> {
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
    pub(super) fn is_git_dir_at(&self, rel: &Path) -> Result<bool, SandboxError> {
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
    pub(super) fn child_dirs(&self, rel: &Path) -> Result<Vec<OsString>, SandboxError> {
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
    pub(super) fn guard_git_dir(&mut self, rel: &Path) -> Result<bool, SandboxError> {
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
            self.guard_hook_scripts(&path.join("hooks"), 0, &mut walk)?;
        }
        Ok(is_git_dir)
    }
}

/// The target of a `.git` file (`gitdir: PATH`, relative to the file's directory),
/// canonical; `None` when it names nothing.
pub(super) fn read_gitfile(
    parent: BorrowedFd<'_>,
    path: &Path,
) -> Result<Option<PathBuf>, SandboxError> {
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
        .map_err(|e| SandboxError::io(format!("read {}", crate::sandbox::bytes::short(path)), e))?;
    let Some(line) = text
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"gitdir:"))
    else {
        return Ok(None);
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    Ok(fs::canonicalize(dir.join(OsStr::from_bytes(trim_ascii(line)))).ok())
}

/// Whether the directory at `path` (anywhere, looked at by name) is a git dir to git
/// ([`is_git_dir_listing`]).
pub(super) fn is_git_dir_path(path: &Path) -> bool {
    fs::read_dir(path).is_ok_and(|entries| {
        let names: Vec<OsString> = entries.flatten().map(|e| e.file_name()).collect();
        is_git_dir_listing(names.iter())
    })
}
