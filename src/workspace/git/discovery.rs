//! Which repository git would find for a workspace, and where its hooks are, decided
//! without letting anything of the workspace run: a cheap walk that says whether git
//! could find one at all, the nearest `.git` above the workspace, and the hooks path
//! the user's own git would use (the sandbox holds those hooks).

use std::path::{Path, PathBuf};

use super::command::{find_git, users_git};
use super::watch::config_output;

/// Whether `git rev-parse`, started in `workspace` by [`base_command`](crate::workspace::git::command::base_command), could find a
/// repository: false only when no directory from the workspace up to `/` holds a `.git`
/// entry or a `HEAD` entry (of any file type, or one that cannot be looked at; a `.git`
/// symlink that leads nowhere does not count, as git does not take it either). That is
/// git's own discovery, over-approximated: with the environment cleared there is no
/// `GIT_DIR`, `GIT_WORK_TREE` or `GIT_CEILING_DIRECTORIES`, so git walks up from its
/// working directory (the physical path, as `getcwd` gives it: hence the canonical path
/// here) and at each level takes `.git` (a directory or a `.git` file) or the directory
/// itself when it is a git directory, which needs `HEAD`; it stops at a file-system
/// boundary, which this walk does not (so it only says "could" more often). When false,
/// spawning git (a few milliseconds, more under load) would only end in "not a git
/// repository"; when the path cannot be resolved git is asked.
pub(crate) fn git_could_find_a_repository(workspace: &Path) -> bool {
    let Ok(canonical) = std::fs::canonicalize(workspace) else {
        return true;
    };
    let absent = |found: std::io::Result<std::fs::Metadata>| {
        matches!(found, Err(e) if matches!(e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory))
    };
    // `.git` followed: a `.git` symlink that leads nowhere is no repository to git, and
    // the sandbox's placeholder for an absent `.git` is one (a link to `/dev/null/…`),
    // made while this check may run beside the sandbox's setup: taken for a `.git`, it
    // started git for nothing. `HEAD` not followed: a symlink `HEAD` to an unborn
    // branch's ref is a repository's (git's legacy form).
    canonical.ancestors().any(|dir| {
        !absent(std::fs::metadata(dir.join(".git")))
            || !absent(std::fs::symlink_metadata(dir.join("HEAD")))
    })
}

/// The directory from which the user's own git runs the hooks of `workspace`'s
/// repository, as git names it, symlinks unresolved (absolute, or relative to the
/// workspace): `git rev-parse --git-path hooks`, which reads `core.hooksPath` from every
/// config the user's git reads (the system's and the user's global one included, which
/// [`base_command`](crate::workspace::git::command::base_command) leaves out; a relative value is the work tree's). The sandbox holds
/// it read-only when it lies in the workspace: a project's `git config core.hooksPath
/// scripts/hooks` handed the agent the user's next `git commit` (round seventeen's
/// review). Nothing runs: `rev-parse` and `config` read no index (no `core.fsmonitor`),
/// run no hook and no filter; a git stopped by the watcher (a config that includes a
/// FIFO) says nothing.
///
/// When git takes the nearest `.git` for no repository (the agent may write its `HEAD`,
/// `refs/` and `objects/`: garbage in `HEAD` had the next run's git say nothing, and that
/// run's agent put `HEAD` back and wrote the hook), or finds another repository than that
/// one, the nearest repository's own config files are read by name instead
/// ([`configured_hooks_path`]): the user's git reads them once the repository is whole.
pub(crate) fn users_hooks_dir(workspace: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if !git_could_find_a_repository(workspace) {
        return None;
    }
    let program = find_git(workspace)?;
    let nearest = nearest_repository(workspace);
    let mut cmd = users_git(&program, workspace);
    cmd.args(["rev-parse", "--absolute-git-dir", "--git-path", "hooks"]);
    let asked = config_output(&mut cmd)
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| {
            let mut lines = out.stdout.split(|b| *b == b'\n');
            let git_dir = PathBuf::from(std::ffi::OsStr::from_bytes(lines.next()?));
            let hooks = lines.next().filter(|l| !l.is_empty())?;
            Some((git_dir, workspace.join(std::ffi::OsStr::from_bytes(hooks))))
        });
    let same = |found: &Path, nearest: &Path| {
        std::fs::canonicalize(found).ok() == std::fs::canonicalize(nearest).ok()
    };
    match (asked, nearest) {
        (Some((_, hooks)), None) => Some(hooks),
        (Some((found, hooks)), Some((_, git_dir))) if same(&found, &git_dir) => Some(hooks),
        (_, Some((top, git_dir))) => configured_hooks_path(&program, workspace, &top, &git_dir),
        (None, None) => None,
    }
}

/// The work tree and git dir of the nearest `.git` at or above `workspace` (a directory,
/// or a file naming one), whether git takes it for a repository now or not.
fn nearest_repository(workspace: &Path) -> Option<(PathBuf, PathBuf)> {
    let canonical = std::fs::canonicalize(workspace).ok()?;
    canonical.ancestors().find_map(|top| {
        let dot_git = top.join(".git");
        let meta = std::fs::symlink_metadata(&dot_git).ok()?;
        if meta.is_dir() {
            return Some((top.to_path_buf(), dot_git));
        }
        if !meta.is_file() || meta.len() > 4096 {
            return None;
        }
        let text = std::fs::read(&dot_git).ok()?;
        let named = text.strip_prefix(b"gitdir:")?.trim_ascii();
        use std::os::unix::ffi::OsStrExt;
        Some((
            top.to_path_buf(),
            top.join(std::ffi::OsStr::from_bytes(named)),
        ))
    })
}

/// `core.hooksPath` as the user's git will read it from the repository at `top` (git dir
/// `git_dir`) once that repository is whole, each config file asked by name in git's
/// order (the work tree's `config.worktree`, the repository's `config`, the global, the
/// system one), with their includes: joined to `top` when relative. `None` when none
/// sets it (the hooks are then the git dir's, which the sandbox guards).
fn configured_hooks_path(
    program: &Path,
    workspace: &Path,
    top: &Path,
    git_dir: &Path,
) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let common = std::fs::read(git_dir.join("commondir"))
        .ok()
        .map(|text| git_dir.join(std::ffi::OsStr::from_bytes(text.trim_ascii())))
        .unwrap_or_else(|| git_dir.to_path_buf());
    let worktree = git_dir.join("config.worktree");
    let config = common.join("config");
    let scopes: [&[&std::ffi::OsStr]; 4] = [
        &["--file".as_ref(), worktree.as_os_str()],
        &["--file".as_ref(), config.as_os_str()],
        &["--global".as_ref()],
        &["--system".as_ref()],
    ];
    for scope in scopes {
        let mut cmd = users_git(program, workspace);
        cmd.args(["config", "--includes", "--type=path"])
            .args(scope)
            .args(["--get", "core.hooksPath"]);
        let Ok(out) = config_output(&mut cmd) else {
            continue;
        };
        let value = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
        if out.status.success() && !value.is_empty() {
            return Some(top.join(std::ffi::OsStr::from_bytes(value)));
        }
    }
    None
}

/// The first `.git` (a directory or a `.git` file, not a symlink: the sandbox's
/// placeholder for an absent one is) in `workspace` or a directory above it below
/// `top`, the work tree git found: a repository git passed over. The agent may write a
/// repository's `HEAD`; with garbage there git takes the directory for none and looks
/// further up, and in a repository around the workspace that ignores it (`inner/` in
/// its `.gitignore`) the next run's ledger saw no change at all (round sixteen's
/// review).
pub(super) fn skipped_repository(workspace: &Path, top: &Path) -> Option<PathBuf> {
    let workspace = std::fs::canonicalize(workspace).ok()?;
    let top = std::fs::canonicalize(top).ok()?;
    if workspace == top || !workspace.starts_with(&top) {
        return None;
    }
    workspace
        .ancestors()
        .take_while(|dir| *dir != top)
        .map(|dir| dir.join(".git"))
        .find(|dot_git| std::fs::symlink_metadata(dot_git).is_ok_and(|m| m.is_dir() || m.is_file()))
}
