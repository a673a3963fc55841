//! The `git` commands coder runs itself, outside the sandbox: which `git` (never one the
//! workspace can reach), its environment cleared and every setting that would run a
//! program overridden ([`base_command`]), its heap capped, and its output read through
//! the watcher ([`super::watch`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::GitError;
use super::watch::{config_output, watched_output};

/// `git` in `cwd` with the environment cleared but for a system `PATH` and the C locale,
/// never prompting or taking optional locks, stdin closed.
fn cleared_git(program: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null());
    cmd
}

/// A git of the user's own configuration (its home, its global and system configs) in
/// `workspace`, with the environment otherwise cleared and `core.fsmonitor` off.
pub(super) fn users_git(program: &Path, workspace: &Path) -> Command {
    let mut cmd = cleared_git(program, workspace);
    // What decides which configs the user's own git reads.
    for var in [
        "HOME",
        "XDG_CONFIG_HOME",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_NOSYSTEM",
    ] {
        if let Some(value) = std::env::var_os(var) {
            cmd.env(var, value);
        }
    }
    cmd.args(["-c", "core.fsmonitor=false", "-c", "protocol.allow=never"]);
    cmd
}

/// The `git` coder runs for `workspace`, outside the sandbox: the first on `PATH`, leaving
/// out relative directories and every directory inside the workspace, and a `git` that
/// leads (through symlinks) into it. A user's `PATH` may hold a directory of the project
/// (an activated virtualenv's `.venv/bin`, direnv's `PATH_add bin`, `node_modules/.bin`
/// under `npm run`): the agent wrote a `git` there, and the next run's ledger ran it as
/// coder, outside the sandbox.
pub(crate) fn find_git(workspace: &Path) -> Option<PathBuf> {
    let path_var = std::env::var_os("PATH")?;
    let inside = std::fs::canonicalize(workspace).ok()?;
    let dirs: Vec<PathBuf> = std::env::split_paths(&path_var)
        .filter(|dir| dir.is_absolute())
        .filter(|dir| {
            std::fs::canonicalize(dir).is_ok_and(|dir| !dir.starts_with(&inside))
                && std::fs::canonicalize(dir.join("git")).is_ok_and(|git| !git.starts_with(&inside))
        })
        .collect();
    let path_var = std::env::join_paths(dirs).ok()?;
    crate::text::path::find_on_path(
        std::ffi::OsStr::new("git"),
        &path_var,
        workspace,
        crate::text::path::RelativeDirs::Skip,
    )
}

/// `git` with a cleared environment, no system or global config, and the settings that
/// run programs overridden; the repository is found from `cwd` only when the caller
/// passes no `--git-dir`.
pub(crate) fn base_command(program: &Path, cwd: &Path) -> Command {
    let mut cmd = cleared_git(program, cwd);
    cmd.env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PAGER", "cat")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_NO_LAZY_FETCH", "1")
        // An object is read as itself, never as what a `refs/replace/` ref (the agent's to
        // write) says replaces it.
        .env("GIT_NO_REPLACE_OBJECTS", "1");
    for setting in [
        "core.fsmonitor=false",
        "core.hooksPath=/dev/null",
        "core.attributesFile=/dev/null",
        "core.untrackedCache=false",
        "core.splitIndex=false",
        "core.sparseCheckout=false",
        // Whether a file is read again is decided from all its stat data, the ctime
        // included, whatever the repository's config trusts: with `core.trustctime =
        // false` (or `core.checkStat = minimal`) an edit that kept the size and put the
        // mtime back was never read, and the ledger said "unchanged"; `core.ignoreStat`
        // would mark every file it hashes "assume unchanged" in the private index.
        "core.trustctime=true",
        "core.checkStat=default",
        "core.ignoreStat=false",
        "diff.external=",
        "protocol.allow=never",
        // A directory with a `HEAD` is a git dir to git's discovery when no `.git` is
        // found: the agent made the workspace one (its own `config` with `core.worktree
        // = .`, its own `info/exclude`), and the next run's ledger took it for the
        // repository, with the exclude naming what the ledger should not see (round
        // sixteen's review; the end-of-run git guard moves `core.worktree` aside, this
        // holds below it). A repository coder means is named with `--git-dir`.
        "safe.bareRepository=explicit",
    ] {
        cmd.arg("-c").arg(setting);
    }
    cmd
}

/// The heap a snapshot's or diff's git may take at most ([`limit_memory`]).
const MEMORY_LIMIT: u64 = 2 << 30;

/// Caps the data segment (`RLIMIT_DATA`: the heap and private writable mappings, not the
/// packs git maps read-only) of the git `cmd` starts at [`MEMORY_LIMIT`]. git's line diff
/// (`diff-tree --numstat`, `-p`) holds some forty bytes per line of both sides: a file of
/// 500 MiB of empty lines the agent added (under the 1 GiB read budget and git's 512 MiB
/// big-file threshold) had coder's own git, unconfined, ask for some 20 GiB (round
/// sixteen's review). A git that reaches the cap dies; the ledger keeps the file listed,
/// without line counts, and warns.
pub(super) fn limit_memory(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, and calls only
    // `getrlimit` and `setrlimit`, which are async-signal-safe; it touches no memory of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_DATA, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Only ever lowered (a user's own lower limit stays).
            limit.rlim_cur = limit.rlim_cur.min(MEMORY_LIMIT as libc::rlim_t);
            limit.rlim_max = limit.rlim_max.min(MEMORY_LIMIT as libc::rlim_t);
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The output of `cmd`, a git of coder's watched by [`watched_run`](crate::workspace::git::watch::watched_run), or why it failed.
pub(crate) fn output(what: &'static str, mut cmd: Command) -> Result<Vec<u8>, GitError> {
    let out = watched_output(&mut cmd)?;
    succeeded(what, out)
}

/// [`output`] of a git that reads the configuration alone (see [`config_output`]).
pub(crate) fn output_of_config(what: &'static str, mut cmd: Command) -> Result<Vec<u8>, GitError> {
    let out = config_output(&mut cmd)?;
    succeeded(what, out)
}

/// `out`'s stdout when its git succeeded, else why it failed.
pub(super) fn succeeded(
    what: &'static str,
    out: std::process::Output,
) -> Result<Vec<u8>, GitError> {
    if out.status.success() {
        Ok(out.stdout)
    } else {
        // The status too: a git killed by a signal says nothing on stderr.
        let stderr = crate::text::one_line(&String::from_utf8_lossy(&out.stderr), 300);
        let stderr = match stderr.trim() {
            "" => out.status.to_string(),
            text => format!("{text} ({})", out.status),
        };
        Err(GitError::Failed { what, stderr })
    }
}
