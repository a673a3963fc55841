//! The sandbox's glob lists compiled for the walk (case-insensitive, bytes), and whether a
//! name is protected where it stands (a dependency directory's contents are not the
//! user's configs).

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::sandbox::{GlobList, SandboxError};

use super::{Mask, MaskKind};

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
pub(super) const DEPENDENCY_DIRS: [&str; 3] = ["node_modules", "vendor", "site-packages"];

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
pub(super) const NOT_A_DEPENDENCY_DIR: &str = "coder-not-a-dependency-dir";

/// The names a protected glob stands for even before they exist: a glob of plain names
/// (`.envrc`, `.mcp.json`) is that path; `NAME/**` (`.claude/**`) is the directory
/// `NAME`; `**/` before either (`**/.envrc`, `**/.claude/**`: the name in every directory)
/// is the name at the root. Globs with wildcards elsewhere protect what exists at the
/// start; what appears during the run is moved aside at its end ([`gitguard`](crate::sandbox::gitguard)).
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
