//! Finding what must be masked: files matching the non-accessible globs, directories of
//! secrets, `.git/hooks` and `.git/config`.
//!
//! Globs match case-insensitively (`APP.PEM` is as secret as `app.pem`). The walk never follows symlinks and ignores `.gitignore` (secrets are usually ignored
//! files). It is a snapshot taken right before the agent starts; files created later are
//! the agent's own. Depth and match count are capped, and a scan over a cap is an error,
//! because a partial list of secrets is worse than none: it looks like protection.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use serde::{Deserialize, Serialize};

use super::SandboxError;

/// A child name no real file has: a directory is a container of secrets when this
/// hypothetical child of it would match (`secrets/` for `**/secrets/**`).
const PROBE_CHILD: &str = "\u{1}coder-probe";

/// How a masked path is covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskKind {
    /// An empty read-only file is bind-mounted over the file: it reads as empty, cannot be
    /// written, removed, renamed or linked.
    Empty,
    /// The path is bind-mounted over itself read-only: visible, unchangeable. Used for
    /// directories of secrets (whose files are masked one by one), `.git/hooks` and
    /// `.git/config`.
    ReadOnly,
}

/// One mount to apply over a path found by the scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mask {
    /// Canonical absolute path.
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

/// Where the workspace's git metadata lives.
#[derive(Debug, Default)]
pub(crate) struct GitDirs {
    /// The repository's git dir for this checkout (`.git`, or a linked worktree's dir).
    pub gitdir: Option<PathBuf>,
    /// The common dir holding hooks, config, objects and refs.
    pub common: Option<PathBuf>,
    /// The common dir when it lies outside the workspace (linked worktree): it must be
    /// granted so that commits work.
    pub common_outside: Option<PathBuf>,
}

/// Locate the git dirs of `workspace` (`.git` directory, or a `.git` file naming one).
pub(crate) fn git_dirs(workspace: &Path) -> GitDirs {
    let dot_git = workspace.join(".git");
    let gitdir = match fs::metadata(&dot_git) {
        Ok(meta) if meta.is_dir() => fs::canonicalize(&dot_git).ok(),
        Ok(meta) if meta.is_file() => fs::read_to_string(&dot_git)
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("gitdir:"))
                    .map(|p| workspace.join(p.trim()))
            })
            .and_then(|p| fs::canonicalize(p).ok()),
        _ => None,
    };
    let Some(gitdir) = gitdir else {
        return GitDirs::default();
    };
    let common = fs::read_to_string(gitdir.join("commondir"))
        .ok()
        .and_then(|rel| fs::canonicalize(gitdir.join(rel.trim())).ok())
        .unwrap_or_else(|| gitdir.clone());
    let common_outside = (!common.starts_with(workspace)).then(|| common.clone());
    GitDirs {
        gitdir: Some(gitdir),
        common: Some(common),
        common_outside,
    }
}

/// Read-only masks over the repository's hooks and config, so the agent cannot plant code
/// that a later, unconfined `git` would run. A missing `hooks/` is created first (git
/// would create it too), otherwise the agent could create it.
pub(crate) fn git_guards(git: &GitDirs) -> Result<Vec<Mask>, SandboxError> {
    let mut masks = Vec::new();
    if let Some(common) = &git.common {
        let hooks = common.join("hooks");
        if fs::symlink_metadata(&hooks).is_err() {
            fs::create_dir(&hooks)
                .map_err(|e| SandboxError::io(format!("create {}", hooks.display()), e))?;
        }
        masks.extend(read_only_mask(&hooks)?);
        masks.extend(read_only_mask(&common.join("config"))?);
    }
    if let Some(gitdir) = &git.gitdir {
        masks.extend(read_only_mask(&gitdir.join("config.worktree"))?);
    }
    Ok(masks)
}

/// A read-only self-mount of `path` if it exists and is not a symlink.
pub(crate) fn read_only_mask(path: &Path) -> Result<Option<Mask>, SandboxError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() || meta.is_file() => Ok(Some(Mask {
            path: path.to_path_buf(),
            kind: MaskKind::ReadOnly,
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

/// Compile the non-accessible globs. `*` does not cross `/`; `**` does.
pub(crate) fn compile_globs(globs: &[String]) -> Result<GlobSet, SandboxError> {
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        let compiled = GlobBuilder::new(glob)
            .literal_separator(true)
            .case_insensitive(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| SandboxError::Glob {
                glob: glob.clone(),
                reason: e.kind().to_string(),
            })?;
        builder.add(compiled);
    }
    builder.build().map_err(|e| SandboxError::Glob {
        glob: globs.join(", "),
        reason: e.kind().to_string(),
    })
}

/// Masks for everything under `roots` that matches `globs` (paths relative to each root).
pub(crate) fn secret_masks(
    roots: &[PathBuf],
    globs: &[String],
    limits: ScanLimits,
) -> Result<Vec<Mask>, SandboxError> {
    if globs.is_empty() {
        return Ok(Vec::new());
    }
    let set = compile_globs(globs)?;
    let mut scan = Scan {
        set: &set,
        limits,
        masks: Vec::new(),
        linked: HashMap::new(),
        symlinks: Vec::new(),
        root: PathBuf::new(),
    };
    for root in roots {
        if !root.is_dir() {
            continue;
        }
        scan.root = root.clone();
        scan.walk(root, Path::new(""), 0, false)?;
    }
    scan.follow_symlinks(roots)?;
    scan.add_hard_links();
    Ok(scan.masks)
}

struct Scan<'a> {
    set: &'a GlobSet,
    limits: ScanLimits,
    masks: Vec<Mask>,
    /// Regular files with more than one link, by (dev, ino): other names of a secret.
    linked: HashMap<(u64, u64), Vec<PathBuf>>,
    /// Symlinks whose name matched a glob; their targets are masked when in scope.
    symlinks: Vec<PathBuf>,
    root: PathBuf,
}

impl Scan<'_> {
    fn walk(
        &mut self,
        dir: &Path,
        rel: &Path,
        depth: usize,
        inside_secret: bool,
    ) -> Result<(), SandboxError> {
        if depth > self.limits.max_depth {
            return Err(SandboxError::ScanLimit {
                what: "the directory depth",
                limit: self.limits.max_depth,
                path: dir.to_path_buf(),
            });
        }
        let entries = fs::read_dir(dir)
            .map_err(|e| SandboxError::io(format!("scan {}", dir.display()), e))?;
        let mut names: Vec<_> = entries
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| SandboxError::io(format!("scan {}", dir.display()), e))?;
        names.sort();
        for name in names {
            let path = dir.join(&name);
            let rel_child = rel.join(&name);
            let meta = fs::symlink_metadata(&path)
                .map_err(|e| SandboxError::io(format!("scan {}", path.display()), e))?;
            let matched = inside_secret || self.set.is_match(&rel_child);
            if meta.is_dir() {
                if inside_secret {
                    self.walk(&path, &rel_child, depth + 1, true)?;
                } else if matched || self.set.is_match(rel_child.join(PROBE_CHILD)) {
                    self.push(Mask {
                        path: path.clone(),
                        kind: MaskKind::ReadOnly,
                        is_dir: true,
                        dev: meta.dev(),
                        ino: meta.ino(),
                        secret: true,
                    })?;
                    self.walk(&path, &rel_child, depth + 1, true)?;
                } else if name != ".git" {
                    self.walk(&path, &rel_child, depth + 1, false)?;
                }
            } else if meta.is_file() {
                if meta.nlink() > 1 {
                    self.linked
                        .entry((meta.dev(), meta.ino()))
                        .or_default()
                        .push(path.clone());
                }
                if matched {
                    self.push(empty_mask(path, &meta))?;
                }
            } else if meta.file_type().is_symlink() && matched {
                self.symlinks.push(path);
            }
        }
        Ok(())
    }

    fn push(&mut self, mask: Mask) -> Result<(), SandboxError> {
        if self.masks.len() >= self.limits.max_matches {
            return Err(SandboxError::ScanLimit {
                what: "the number of matching paths",
                limit: self.limits.max_matches,
                path: self.root.clone(),
            });
        }
        self.masks.push(mask);
        Ok(())
    }

    /// A symlink named like a secret shows its target's content: mask the target when it
    /// lies in a scanned root. Targets elsewhere are either not granted at all (the kernel
    /// denies them) or system files that are readable anyway.
    fn follow_symlinks(&mut self, roots: &[PathBuf]) -> Result<(), SandboxError> {
        for link in std::mem::take(&mut self.symlinks) {
            let Ok(target) = fs::canonicalize(&link) else {
                continue;
            };
            let Some(root) = roots.iter().find(|r| target.starts_with(r)) else {
                continue;
            };
            if self
                .masks
                .iter()
                .any(|m| target.starts_with(&m.path) && m.is_dir)
                || self.masks.iter().any(|m| m.path == target)
            {
                continue;
            }
            let meta = fs::metadata(&target)
                .map_err(|e| SandboxError::io(format!("scan {}", target.display()), e))?;
            self.root = root.clone();
            if meta.is_dir() {
                self.push(Mask {
                    path: target.clone(),
                    kind: MaskKind::ReadOnly,
                    is_dir: true,
                    dev: meta.dev(),
                    ino: meta.ino(),
                    secret: true,
                })?;
                self.walk(&target, Path::new(""), 0, true)?;
            } else if meta.is_file() {
                self.push(empty_mask(target, &meta))?;
            }
        }
        Ok(())
    }

    /// Other names (hard links) of a masked file carry the same content: mask them too.
    fn add_hard_links(&mut self) {
        let mut extra = Vec::new();
        for mask in self.masks.iter().filter(|m| m.kind == MaskKind::Empty) {
            if let Some(paths) = self.linked.get(&(mask.dev, mask.ino)) {
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
            if !self.masks.iter().any(|m| m.path == mask.path) {
                self.masks.push(mask);
            }
        }
    }
}

fn empty_mask(path: PathBuf, meta: &fs::Metadata) -> Mask {
    Mask {
        path,
        kind: MaskKind::Empty,
        is_dir: false,
        dev: meta.dev(),
        ino: meta.ino(),
        secret: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::DEFAULT_DENY_GLOBS;

    fn globs() -> Vec<String> {
        DEFAULT_DENY_GLOBS.iter().map(|g| g.to_string()).collect()
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
        let masks =
            secret_masks(std::slice::from_ref(&ws), &globs(), ScanLimits::default()).unwrap();
        assert_eq!(
            paths(&masks, &ws),
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
    fn caps_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(ws.join("a/b/c/d")).unwrap();
        fs::write(ws.join("a/b/c/d/.env"), "x").unwrap();
        let shallow = ScanLimits {
            max_depth: 2,
            max_matches: 10,
        };
        let err = secret_masks(std::slice::from_ref(&ws), &globs(), shallow).unwrap_err();
        assert!(matches!(err, SandboxError::ScanLimit { .. }), "{err}");
        for i in 0..3 {
            fs::write(ws.join(format!("{i}.key")), "x").unwrap();
        }
        let few = ScanLimits {
            max_depth: 10,
            max_matches: 2,
        };
        let err = secret_masks(std::slice::from_ref(&ws), &globs(), few).unwrap_err();
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
        let masks =
            secret_masks(std::slice::from_ref(&ws), &globs(), ScanLimits::default()).unwrap();
        assert_eq!(
            paths(&masks, &ws),
            vec!["copy.txt:Empty", "real.txt:Empty", "server.key:Empty"]
        );
    }

    #[test]
    fn bad_glob_is_reported() {
        let err = compile_globs(&["a[".to_string()]).unwrap_err();
        assert!(err.to_string().contains("a["), "{err}");
    }

    #[test]
    fn git_guards_cover_hooks_and_config() {
        let dir = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(ws.join(".git")).unwrap();
        fs::write(ws.join(".git/config"), "[core]").unwrap();
        let git = git_dirs(&ws);
        assert!(git.common_outside.is_none());
        let masks = git_guards(&git).unwrap();
        assert_eq!(
            paths(&masks, &ws),
            vec![".git/config:ReadOnly", ".git/hooks:ReadOnly"]
        );
    }
}
