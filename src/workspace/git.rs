//! Snapshots of a git workspace as tree objects, through a private index, with git run
//! so that nothing from the workspace can execute.
//!
//! coder runs these git commands itself, outside the sandbox, over a tree the agent could
//! write (DESIGN §5: nothing the agent writes may run outside the sandbox). What git would
//! otherwise read and act on is pinned down here:
//! * the environment is cleared (no `GIT_DIR`, `GIT_CONFIG_*`, `GIT_INDEX_FILE` of the
//!   caller), the system and global config are off (`GIT_CONFIG_NOSYSTEM`,
//!   `GIT_CONFIG_GLOBAL=/dev/null`), and the repository's git dir and work tree are passed
//!   explicitly, fixed when the run starts (a `.git` the agent plants later is not used);
//! * the settings that let git take a file as unchanged from less than all its stat data
//!   (`core.trustctime`, `core.checkStat`, `core.ignoreStat`) are overridden;
//! * every setting that runs a program is overridden on the command line, which wins over
//!   the repository's config: `core.fsmonitor`, `core.hooksPath`, `core.attributesFile`,
//!   and for every `filter.<driver>` the config defines (an in-tree `.gitattributes` can
//!   name any of them) its `clean`, `smudge` and `process` commands, emptied, and its
//!   `required` flag, cleared; the drivers are listed again at every snapshot, as the
//!   config may include a work-tree file the agent wrote (`include.path`); diffs are made with `--no-ext-diff --no-textconv`;
//! * the user's index is never written: `git add -A` runs on a copy of it (or a fresh one)
//!   in a private temporary directory, and new objects go to a private object directory
//!   with the repository's own as an alternate, so the repository is not changed at all.
//!   In a run that directory is in coder's state directory, which no sandbox grant may
//!   reach: in the host's `/tmp`, where `--allow-tmp` grants the agent everything, the
//!   agent marked its edits "assume unchanged" in that index (the ledger then said
//!   "unchanged"), and made its object directories symlinks through which coder's git
//!   wrote wherever the agent chose.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::scan::Changed;
use crate::config::run_dirs::{self, RunLock};
use crate::supervise::tree::{own_run, pidfd_kill, pidfd_open};

/// A changed path and its (added, removed) line counts; `None` for a binary file.
pub type NumStat = (Vec<u8>, Option<(u64, u64)>);

/// Why a git snapshot could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("git {what} failed: {stderr}")]
    Failed { what: &'static str, stderr: String },
    #[error(
        "the repository's config defines a filter driver coder cannot switch off on git's \
         command line (a name with `=`, or not UTF-8): {name:?}; no snapshot is taken, \
         since git would run it"
    )]
    Driver { name: String },
    #[error("cannot read the change ledger's own index (an index format coder does not know)")]
    Index,
    #[error(
        "git stopped while it waited to open a FIFO (a named pipe) in the work tree, such as \
         a `.gitignore` or `.gitattributes` made a FIFO; nothing would ever have written it"
    )]
    Fifo,
    #[error(
        "git stopped while it held {what} open, which no git of coder's reads (a file of the \
         work tree that the config includes, made a symlink to it?): its read may never end"
    )]
    NotAFile { what: String },
    #[error(
        "git stopped after {seconds} s of reading the repository's configuration alone, which \
         takes a git milliseconds (a config that includes a file of the work tree, made to \
         include others many times over?)"
    )]
    ConfigTooSlow { seconds: u64 },
}

impl GitError {
    /// Whether coder's watcher killed the git (see [`watched_run`]).
    fn was_killed(&self) -> bool {
        matches!(
            self,
            GitError::Fifo | GitError::NotAFile { .. } | GitError::ConfigTooSlow { .. }
        )
    }
}

/// The directory of the ledger's private git directories in coder's state directory.
pub const SCRATCH_DIR: &str = "ledger-git";

/// A private temporary directory, removed on drop.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
    /// The run's hold on it, in a directory shared with other coders (see [`PrivateDir::new_in`]).
    _lock: Option<RunLock>,
}

impl PrivateDir {
    /// A fresh directory `<prefix>-<id>` in coder's `$TMPDIR`.
    pub fn new(prefix: &str) -> std::io::Result<PrivateDir> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(PrivateDir { path, _lock: None })
    }

    /// A fresh directory `<pid>-<id>` in `base` (made 0700 when absent), held by a run
    /// lock; those of coders that are gone (killed before they removed theirs) are removed
    /// first.
    pub fn new_in(base: &Path) -> std::io::Result<PrivateDir> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(base)?;
        run_dirs::prune_dead_run_dirs(base);
        let path = base.join(format!(
            "{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let lock = RunLock::take(&path)?;
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(PrivateDir {
            path,
            _lock: Some(lock),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        // Before the lock file, which goes when the lock is dropped.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A workspace inside a git work tree, with what every command needs to stay safe.
#[derive(Debug)]
pub struct GitRepo {
    program: PathBuf,
    git_dir: PathBuf,
    work_tree: PathBuf,
    /// The workspace itself (the commands' working directory: `add -A .` covers it).
    workspace: PathBuf,
    /// The workspace relative to the work tree (`""` or `sub/dir/`).
    prefix: String,
    /// `-c` overrides for the filter drivers the config defines (as of the last snapshot).
    filter_overrides: std::sync::Mutex<Vec<String>>,
    /// The private index and object directory.
    scratch: PrivateDir,
    /// Bytes of an object id (20 for SHA-1, 32 for SHA-256).
    hash_len: usize,
}

/// A snapshot of the workspace: the tree `git write-tree` named (for line counts and the
/// diff), and what the private index said of every file under the workspace (paths
/// relative to it), which alone decides what changed (see [`super::git_index::entries`]).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub tree: String,
    pub entries: Vec<super::git_index::Entry>,
}

impl GitRepo {
    /// The repository `workspace` belongs to, if it is in a (non-bare) work tree and git
    /// is installed; `None` otherwise (the caller falls back to a plain scan). The private
    /// index and objects are kept in coder's `$TMPDIR`: for tests and tools without a run.
    pub fn discover(workspace: &Path) -> Option<GitRepo> {
        GitRepo::discover_in(workspace, None)
    }

    /// [`GitRepo::discover`], keeping the private index and objects under `state_dir`
    /// (coder's state directory, which no run's agent may reach) when given.
    pub fn discover_in(workspace: &Path, state_dir: Option<&Path>) -> Option<GitRepo> {
        if !git_could_find_a_repository(workspace) {
            return None;
        }
        let program = find_git(workspace)?;
        let mut probe = base_command(&program, workspace);
        probe.args([
            "rev-parse",
            "--absolute-git-dir",
            "--show-toplevel",
            "--show-object-format",
            "--show-prefix",
        ]);
        probe.stderr(Stdio::null());
        let out = config_output(&mut probe).ok()?;
        if !out.status.success() {
            return None;
        }
        let text = String::from_utf8(out.stdout).ok()?;
        let mut lines = text.lines();
        let git_dir = PathBuf::from(lines.next()?);
        let work_tree = PathBuf::from(lines.next()?);
        let hash_len = match lines.next()? {
            "sha1" => 20,
            "sha256" => 32,
            _ => return None,
        };
        let prefix = lines.next().unwrap_or("").to_owned();
        let scratch = match state_dir {
            Some(state) => PrivateDir::new_in(&state.join(SCRATCH_DIR)),
            None => PrivateDir::new("coder-ledger"),
        }
        .ok()?;
        std::fs::create_dir(scratch.path().join("objects")).ok()?;
        let repo = GitRepo {
            program,
            git_dir,
            work_tree,
            workspace: workspace.to_path_buf(),
            prefix,
            filter_overrides: std::sync::Mutex::new(Vec::new()),
            scratch,
            hash_len,
        };
        *repo.overrides() = repo.filter_drivers().ok()?;
        // Start from a copy of the user's index: its stat data spares hashing every file.
        // A second copy keeps what it listed (see [`GitRepo::changed_since`]).
        let _ = copy_plain_file(&repo.git_dir.join("index"), &repo.index());
        if repo.clear_unlooked_entries().is_err() {
            // Start afresh rather than from entries git would not look at.
            let _ = std::fs::remove_file(repo.index());
        }
        let _ = std::fs::copy(repo.index(), repo.start_index());
        Some(repo)
    }

    /// Clears the "assume unchanged" and "skip worktree" bits of the private index's
    /// entries (see [`super::git_index`]): the user's index is the agent's to write, and
    /// `git add -A` never reads a file whose entry has one, so an agent that set them in
    /// one run had its edits of those files reported unchanged by every later run. Only
    /// when some entry has one (a read of the index, not a git process, otherwise).
    fn clear_unlooked_entries(&self) -> Result<(), GitError> {
        let Ok(bytes) = std::fs::read(self.index()) else {
            // No index: a fresh one has no bits.
            return Ok(());
        };
        if super::git_index::has_unlooked_entries(&bytes, self.hash_len) == Some(false) {
            return Ok(());
        }
        let mut list = self.command();
        list.args(["ls-files", "-v", "-z"]);
        let listed = output("ls-files -v", list)?;
        let (mut assumed, mut skipped) = (Vec::new(), Vec::new());
        for record in listed.split(|b| *b == 0) {
            // `<tag> <path>`: a lower-case tag is "assume unchanged", `S` "skip worktree".
            let (Some(tag), Some(path)) = (record.first(), record.get(2..)) else {
                continue;
            };
            if tag.is_ascii_lowercase() {
                assumed.extend_from_slice(path);
                assumed.push(0);
            }
            if tag.eq_ignore_ascii_case(&b'S') {
                skipped.extend_from_slice(path);
                skipped.push(0);
            }
        }
        // One bit per command: `update-index` applies only the first such option given.
        for (option, paths) in [
            ("--no-assume-unchanged", assumed),
            ("--no-skip-worktree", skipped),
        ] {
            if !paths.is_empty() {
                self.update_index(option, &paths)?;
            }
        }
        Ok(())
    }

    /// `git update-index -z OPTION --stdin` of the private index, fed `paths`.
    fn update_index(&self, option: &str, paths: &[u8]) -> Result<(), GitError> {
        use std::io::Write;
        let mut cmd = self.command();
        cmd.args(["update-index", "-z", option, "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let out = watched_run(&mut cmd, |mut child| {
            if let Some(mut stdin) = child.stdin.take() {
                // A git that stopped reading says why on stderr and in its status.
                let _ = stdin.write_all(paths);
            }
            child.wait_with_output()
        })
        .inspect_err(|e| {
            if e.was_killed() {
                self.killed();
            }
        })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(GitError::Failed {
                what: "update-index",
                stderr: crate::text::one_line(&String::from_utf8_lossy(&out.stderr), 300),
            })
        }
    }

    fn index(&self) -> PathBuf {
        self.scratch.path().join("index")
    }

    /// The user's index as it was when the snapshot started (absent: it had none).
    fn start_index(&self) -> PathBuf {
        self.scratch.path().join("index.start")
    }

    /// The entries of `index` under the workspace, relative to it.
    fn listed(&self, index: &Path) -> Result<Vec<Vec<u8>>, GitError> {
        let mut cmd = self.command();
        cmd.env("GIT_INDEX_FILE", index).args(["ls-files", "-z"]);
        let out = output("ls-files", cmd)?;
        Ok(out
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(<[u8]>::to_vec)
            .collect())
    }

    /// What may have changed after `since_ns` (ns since the epoch, the system clock: when
    /// the run's first process started) and before the last snapshot's `git add` was done
    /// (call right after it): its "before" may hold such a change as if it were the
    /// workspace's state before the run.
    ///
    /// Files: every entry of the snapshot's index whose file's ctime, taken now, is at or
    /// after `since_ns`, or which is gone (the ctime only grows, so a file `git add` read
    /// after a change made then says so now; the index's own stat data would not: git
    /// takes it before it reads the file, and keeps whole seconds unless built with
    /// `USE_NSEC`). That covers untracked files `git add` picked up too. Directories: the
    /// workspace and every directory above an entry of the snapshot's index or of the
    /// user's index as it was when it began, whose ctime is at or after `since_ns` or
    /// which is gone: a file deleted from one may be missing from the "before" and so from
    /// the changes. Untracked files that were the only ones of their directory, deleted
    /// before `git add` looked, are not seen.
    pub fn changed_since(&self, since_ns: i128) -> Result<Changed, GitError> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let staged = self.listed(&self.index())?;
        // An index this git cannot read (the snapshot's own started afresh then): the
        // directories of the snapshot's entries only.
        let earlier = self.listed(&self.start_index()).unwrap_or_default();
        let changed_at = |relative: &[u8]| -> bool {
            let path = self.workspace.join(std::ffi::OsStr::from_bytes(relative));
            match std::fs::symlink_metadata(path) {
                Ok(meta) => {
                    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
                        >= since_ns
                }
                // Gone, or cannot be looked at: assume the worst.
                Err(_) => true,
            }
        };
        let mut dirs = std::collections::BTreeSet::new();
        dirs.insert(Vec::new());
        for path in staged.iter().chain(&earlier) {
            for (i, b) in path.iter().enumerate() {
                if *b == b'/' {
                    dirs.insert(path[..i].to_vec());
                }
            }
        }
        Ok(Changed {
            files: staged.into_iter().filter(|p| changed_at(p)).collect(),
            dirs: dirs.into_iter().filter(|d| changed_at(d)).collect(),
        })
    }

    /// The `-c` settings that neutralise every filter driver the config defines.
    fn filter_drivers(&self) -> Result<Vec<String>, GitError> {
        let mut cmd = self.command();
        cmd.args(["config", "--name-only", "--get-regexp", r"^filter\."]);
        // Exit 1 means "no such key": no driver.
        let out = config_output(&mut cmd)?;
        driver_overrides(&out.stdout)
    }

    fn overrides(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.filter_overrides
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A git command on this repository with every safety setting applied.
    fn command(&self) -> Command {
        let mut cmd = base_command(&self.program, &self.workspace);
        for setting in self.overrides().iter() {
            cmd.arg("-c").arg(setting);
        }
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(&self.git_dir);
        let mut work_tree = OsString::from("--work-tree=");
        work_tree.push(&self.work_tree);
        cmd.arg(git_dir).arg(work_tree);
        cmd.env("GIT_INDEX_FILE", self.index())
            .env("GIT_OBJECT_DIRECTORY", self.scratch.path().join("objects"))
            .env(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                self.git_dir.join("objects"),
            );
        cmd
    }

    /// The workspace's content now, as a tree id (`.gitignore` applies).
    pub fn snapshot(&self) -> Result<Snapshot, GitError> {
        self.snapshot_excluding(&[])
    }

    /// The same, leaving out `exclude` (paths relative to the workspace).
    pub fn snapshot_excluding(&self, exclude: &[String]) -> Result<Snapshot, GitError> {
        let mut args: Vec<String> = vec!["add".into(), "-A".into(), "--".into(), ".".into()];
        args.extend(exclude.iter().map(|p| format!(":(exclude,literal){p}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // The drivers are listed again now, since the config may include a file of the
        // work tree (`include.path`) that the agent has written since the run began,
        // defining a driver its `.gitattributes` names. Every command that reads the index
        // may run one (a racily clean entry is hashed again, by `write-tree` too), so
        // every later command gets them.
        let drivers = self.filter_drivers()?;
        {
            let mut overrides = self.overrides();
            overrides.extend(drivers);
            overrides.sort_unstable();
            overrides.dedup();
        }
        let added = self.run("add", &args);
        if let Err(e) = added {
            if e.was_killed() {
                return Err(e);
            }
            // A copied index git cannot use (a split index, a newer format): start afresh.
            let _ = std::fs::remove_file(self.index());
            self.run("add", &args)?;
        }
        let tree = self.run("write-tree", &["write-tree"])?;
        Ok(Snapshot {
            tree: String::from_utf8_lossy(&tree).trim().to_owned(),
            entries: self.workspace_entries()?,
        })
    }

    /// The private index's entries under the workspace, relative to it.
    fn workspace_entries(&self) -> Result<Vec<super::git_index::Entry>, GitError> {
        let bytes = std::fs::read(self.index())?;
        super::git_index::entries(&bytes, self.hash_len, self.prefix.as_bytes())
            .ok_or(GitError::Index)
    }

    /// `git diff-tree` between two trees, limited to (and relative to) the workspace,
    /// leaving out `exclude` (paths relative to the workspace).
    fn diff_tree(&self, format: &[&str], trees: [&str; 2], exclude: &[String]) -> Command {
        let mut cmd = self.command();
        cmd.args([
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
        ]);
        if !self.prefix.is_empty() {
            cmd.arg(format!("--relative={}", self.prefix));
        }
        cmd.args(format).args(trees);
        if !exclude.is_empty() {
            cmd.args(["--", "."]);
            cmd.args(exclude.iter().map(|p| format!(":(exclude,literal){p}")));
        }
        cmd
    }

    /// `path -> (added, removed)` line counts; `None` for binary files.
    pub fn numstat(
        &self,
        before: &str,
        after: &str,
        exclude: &[String],
    ) -> Result<Vec<NumStat>, GitError> {
        let cmd = self.diff_tree(&["--numstat"], [before, after], exclude);
        let out = output("diff-tree", cmd)?;
        let mut list = Vec::new();
        for record in out.split(|b| *b == 0).filter(|f| !f.is_empty()) {
            let mut parts = record.splitn(3, |b| *b == b'\t');
            let (Some(added), Some(removed), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let number = |n: &[u8]| std::str::from_utf8(n).ok()?.parse::<u64>().ok();
            let counts = number(added).zip(number(removed));
            list.push((path.to_vec(), counts));
        }
        Ok(list)
    }

    /// The unified diff between two trees: at most `cap` bytes kept, and the full size.
    pub fn patch(
        &self,
        before: &str,
        after: &str,
        exclude: &[String],
        cap: usize,
    ) -> Result<(Vec<u8>, u64), GitError> {
        let mut cmd = self.diff_tree(&["-p"], [before, after], exclude);
        // `-z` only changes the raw formats; patches keep their usual quoting.
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
        watched_run(&mut cmd, |child| read_capped(child, cap))?
    }

    fn run(&self, what: &'static str, args: &[&str]) -> Result<Vec<u8>, GitError> {
        let mut cmd = self.command();
        cmd.args(args);
        let out = output(what, cmd);
        if out.as_ref().is_err_and(GitError::was_killed) {
            self.killed();
        }
        out
    }

    /// After a git of the private index was killed: its lock is coder's to remove (else
    /// every later command of the run fails on it).
    fn killed(&self) {
        let _ = std::fs::remove_file(self.scratch.path().join("index.lock"));
    }
}

/// `git config --name-only --get-regexp '^filter\.'` in a repository (`cmd`, a git on it
/// with no other arguments yet): the `-c` settings that switch off every filter driver
/// its config defines ([`driver_overrides`]).
pub(crate) fn filter_overrides(mut cmd: Command) -> Result<Vec<String>, GitError> {
    cmd.args(["config", "--name-only", "--get-regexp", r"^filter\."]);
    // Exit 1 means "no such key": no driver.
    let out = config_output(&mut cmd)?;
    driver_overrides(&out.stdout)
}

/// The `-c` settings that switch off every filter driver named in `listing` (the output
/// of `git config --name-only --get-regexp '^filter\.'`).
fn driver_overrides(listing: &[u8]) -> Result<Vec<String>, GitError> {
    // A name `-c` cannot spell is refused, never spelled otherwise: `-c` takes the key
    // up to the first `=` (so `filter.a=b.clean=` set `filter.a`, and the agent's driver
    // `a=b` ran as coder), and a name that is not UTF-8 would come back changed.
    let text = std::str::from_utf8(listing).map_err(|_| GitError::Driver {
        name: String::from_utf8_lossy(listing).into_owned(),
    })?;
    let mut drivers: Vec<&str> = text
        .lines()
        .filter_map(|key| key.strip_prefix("filter."))
        .filter_map(|rest| rest.rsplit_once('.').map(|(name, _)| name))
        .collect();
    drivers.sort_unstable();
    drivers.dedup();
    if let Some(name) = drivers.iter().find(|name| name.contains('=')) {
        return Err(GitError::Driver {
            name: (*name).to_owned(),
        });
    }
    Ok(drivers
        .iter()
        .flat_map(|name| {
            [
                format!("filter.{name}.clean="),
                format!("filter.{name}.smudge="),
                format!("filter.{name}.process="),
                format!("filter.{name}.required=false"),
            ]
        })
        .collect())
}

/// Copies `from` to `to` (created 0600, not there before) when `from` is a regular file,
/// opened without following a symlink or waiting on a FIFO: the user's index is the
/// agent's to replace, and a FIFO there held the copy (and with it the next run's
/// snapshot, and that run) forever; a symlink had coder copy whatever it named.
fn copy_plain_file(from: &Path, to: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut source = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(from)?;
    if !source.metadata()?.is_file() {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    let mut target = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    std::io::copy(&mut source, &mut target)
}

/// The output of `git diff-tree -p` (`child`): at most `cap` bytes kept, and the full size.
fn read_capped(
    mut child: std::process::Child,
    cap: usize,
) -> std::io::Result<Result<(Vec<u8>, u64), GitError>> {
    let mut kept = Vec::new();
    let mut total: u64 = 0;
    if let Some(mut stdout) = child.stdout.take() {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match stdout.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e);
                }
            };
            total += n as u64;
            let room = cap.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
    }
    let status = child.wait()?;
    if !status.success() {
        return Ok(Err(GitError::Failed {
            what: "diff-tree -p",
            stderr: format!("exit status {status}"),
        }));
    }
    Ok(Ok((kept, total)))
}

/// Whether `git rev-parse`, started in `workspace` by [`base_command`], could find a
/// repository: false only when no directory from the workspace up to `/` holds a `.git`
/// entry or a `HEAD` entry (of any file type, or one that cannot be looked at). That is
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
    canonical.ancestors().any(|dir| {
        [".git", "HEAD"].iter().any(|name| {
            !matches!(std::fs::symlink_metadata(dir.join(name)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        })
    })
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
    let mut cmd = Command::new(program);
    cmd.current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_PAGER", "cat")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_NO_LAZY_FETCH", "1")
        .stdin(Stdio::null());
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
    ] {
        cmd.arg("-c").arg(setting);
    }
    cmd
}

/// How often [`watched_run`] looks at what its git waits for.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a git of coder's that reads nothing but the configuration ([`config_output`])
/// may run: a config read takes milliseconds, and one that takes more is spinning on
/// includes (see [`config_output`]).
pub(crate) const CONFIG_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// Starts `cmd` as one of coder's own processes ([`own_run`]) and hands it to `f`, which
/// waits for it; meanwhile a [`Watch`] kills it, and the result is the error saying why,
/// as soon as it does what no git of coder's has a reason to do: wait to open a FIFO, or
/// keep reading something that may never end.
///
/// git opens every `.gitignore` and `.gitattributes` of the work tree, and the config's
/// includes, without looking at their type first, and follows a symlink to an include: one
/// the agent made a FIFO held coder's git waiting for a writer forever, and one made a
/// symlink to `/proc/self/fd/1` had git read its own stdout pipe, which nothing writes
/// (or `/proc/PID/fd/N`, another process's pipe, `/dev/tty`, `/proc/kmsg`). Each held the
/// run's end forever, and every later run's snapshot of that workspace too (the file
/// stays). Landlock cannot refuse these: it lets a pipe reached through `/proc` be opened.
pub(crate) fn watched_run<T>(
    cmd: &mut Command,
    f: impl FnOnce(std::process::Child) -> std::io::Result<T>,
) -> Result<T, GitError> {
    watched_run_within(cmd, None, f)
}

/// [`watched_run`], the git also killed once it has run for `deadline` (when given).
fn watched_run_within<T>(
    cmd: &mut Command,
    deadline: Option<std::time::Duration>,
    f: impl FnOnce(std::process::Child) -> std::io::Result<T>,
) -> Result<T, GitError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stopped: std::sync::Mutex<Option<GitError>> = std::sync::Mutex::new(None);
    let done = AtomicBool::new(false);
    let result = own_run(cmd, |child| {
        let pid = child.id();
        // Opened while the child is not reaped yet, so the pid is this child's: a signal
        // through it can never reach a process that got the pid later.
        let pidfd = libc::pid_t::try_from(pid)
            .ok()
            .and_then(|pid| pidfd_open(nix::unistd::Pid::from_raw(pid)).ok());
        std::thread::scope(|s| {
            let mut watcher = None;
            if let Some(pidfd) = &pidfd {
                let (done, stopped) = (&done, &stopped);
                watcher = std::thread::Builder::new()
                    .name("ledger-git-watch".into())
                    .spawn_scoped(s, move || {
                        let mut watch = Watch {
                            deadline: deadline.map(|d| (std::time::Instant::now() + d, d)),
                            ..Watch::default()
                        };
                        while !done.load(Ordering::Relaxed) {
                            if let Some(why) = watch.look(pid)
                                && kill_tree(pid, pidfd)
                            {
                                *stopped
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
                                return;
                            }
                            std::thread::park_timeout(WATCH_EVERY);
                        }
                    })
                    .ok();
            }
            let result = f(child);
            done.store(true, Ordering::Relaxed);
            // Not a poll interval later: the scope waits for it.
            if let Some(watcher) = &watcher {
                watcher.thread().unpark();
            }
            result
        })
    })?;
    let stopped = stopped
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match stopped {
        Some(why) => Err(why),
        None => Ok(result),
    }
}

/// [`Command::output`] through [`watched_run`].
fn watched_output(cmd: &mut Command) -> Result<std::process::Output, GitError> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    watched_run(cmd, std::process::Child::wait_with_output)
}

/// [`watched_output`] for a git that reads the configuration and nothing else of size
/// (`rev-parse` of the repository's paths, `config --get`), stopped after
/// [`CONFIG_DEADLINE`]. The watcher stops a git on what it holds, never on regular
/// files: a config that includes a file of the work tree let the agent make it include
/// another one fifty times over, that one another, and so on over git's ten levels, and
/// every git of coder's spun on 50^8 opens of small files forever (round fifteen's
/// review). Each snapshot's first git reads the config alone (the "before"'s probe, the
/// listing of filter drivers before each `git add`), so such a config fails the snapshot
/// there, and a later run's probe falls back to the plain walk.
pub(crate) fn config_output(cmd: &mut Command) -> Result<std::process::Output, GitError> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    watched_run_within(
        cmd,
        Some(CONFIG_DEADLINE),
        std::process::Child::wait_with_output,
    )
}

/// What [`watched_run`]'s watcher saw of one git at its last look.
///
/// A git is stopped when one of its threads sleeps in the kernel's FIFO open, waiting for
/// a writer (`wait_for_partner`, what `/proc/PID/task/TID/wchan` names), or when the same
/// descriptor of its own is [`suspect`] at two looks in a row. One look is not enough:
/// `git` may be a wrapper script, and a shell reads the pipe of a command substitution
/// (`$(...)`) for a moment after its writer has gone; a read that never ends stays.
#[derive(Debug, Default)]
struct Watch {
    /// (process, descriptor, target) of each suspect descriptor at the last look.
    suspects: Vec<(u32, u32, PathBuf)>,
    /// When the git is stopped whatever it does, and the time it was given.
    deadline: Option<(std::time::Instant, std::time::Duration)>,
}

impl Watch {
    /// Looks at `pid` and every process below it: a `git` that is a wrapper script which
    /// does not `exec` runs the real git as its child, and only that child reads what the
    /// config includes (a watcher of the wrapper alone never saw it, and held the run).
    fn look(&mut self, pid: u32) -> Option<GitError> {
        if let Some((at, given)) = self.deadline
            && std::time::Instant::now() >= at
        {
            return Some(GitError::ConfigTooSlow {
                seconds: given.as_secs(),
            });
        }
        let mut tree = vec![pid];
        tree.extend(descendants(pid));
        if tree.iter().any(|process| waits_on_a_fifo(*process)) {
            return Some(GitError::Fifo);
        }
        let now: Vec<(u32, u32, PathBuf)> = tree
            .iter()
            .flat_map(|process| {
                suspects(*process)
                    .into_iter()
                    .map(move |(number, target)| (*process, number, target))
            })
            .collect();
        let held = now
            .iter()
            .find(|suspect| self.suspects.contains(suspect))
            .map(|(_, _, target)| GitError::NotAFile {
                what: target.display().to_string(),
            });
        self.suspects = now;
        held
    }
}

/// SIGKILL to the process of `pidfd` (`pid`) and to every process below it, those first:
/// the real git of a wrapper script holds coder's output pipes too, and coder waits for
/// their end. Each one below is signalled through a pidfd opened while its parent is the
/// one seen (a pid reused meanwhile has another parent). False when `pid` itself could
/// not be signalled.
fn kill_tree(pid: u32, pidfd: &std::os::fd::OwnedFd) -> bool {
    let mut below = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        for child in children(parent) {
            if below.len() >= 1024 {
                break;
            }
            let Ok(raw) = libc::pid_t::try_from(child) else {
                continue;
            };
            let Ok(fd) = pidfd_open(nix::unistd::Pid::from_raw(raw)) else {
                continue;
            };
            if parent_of(child) == Some(parent) {
                below.push(fd);
                queue.push(child);
            }
        }
    }
    for fd in below.iter().rev() {
        let _ = pidfd_kill(fd);
    }
    pidfd_kill(pidfd)
}

/// The children of `pid`, as `/proc/PID/task/TID/children` lists them.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The `PPid:` of `/proc/PID/status`.
fn parent_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("PPid:"))
        .and_then(|ppid| ppid.trim().parse().ok())
}

/// The descriptors (number, target) of process `pid` that are [`suspect`].
fn suspects(pid: u32) -> Vec<(u32, PathBuf)> {
    let Some(table) = fd_table(pid) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, PathBuf)> = table
        .iter()
        .filter(|fd| fd.number > 2 && fd.suspect())
        .filter(|fd| !inherited_from_coder(fd.number, &fd.target))
        .map(|fd| (fd.number, fd.target.clone()))
        .collect();
    if found.iter().any(|(_, target)| is_anonymous_pipe(target)) {
        // A pipe that another descriptor of its own, or any of a process it started,
        // holds too is one it made (a command substitution, `fetch`'s pipes to its
        // `upload-pack`). Its own standard three are coder's and do not count, so its
        // stdout reopened through `/proc` is still suspect.
        let below: Vec<PathBuf> = descendants(pid)
            .into_iter()
            .filter_map(fd_table)
            .flatten()
            .map(|fd| fd.target)
            .collect();
        found.retain(|(number, target)| {
            let made_here = table
                .iter()
                .any(|fd| fd.number > 2 && fd.number != *number && fd.target == *target)
                || below.contains(target);
            !is_anonymous_pipe(target) || !made_here
        });
    }
    found
}

/// One open descriptor of a process.
struct OpenFd {
    number: u32,
    /// What `/proc/PID/fd/N` names: a path, or `pipe:[INODE]` and the like.
    target: PathBuf,
    meta: std::fs::Metadata,
    /// Whether it lies on one of the kernel's pseudo file systems ([`on_pseudo_fs`]).
    pseudo: bool,
    /// Its open flags (`/proc/PID/fdinfo/N`).
    flags: u32,
}

impl OpenFd {
    /// Whether a read of it may never end, or it is nothing a git of coder's reads: a
    /// readable pipe, FIFO, socket, device other than the memory devices (`/dev/null`,
    /// `/dev/zero`, `/dev/urandom`: git opens `/dev/null` itself), or a file of `/proc`
    /// or `/sys` (`/proc/kmsg` waits). A pipe it only writes to is a shell's copy of its
    /// own stdout or stderr.
    fn suspect(&self) -> bool {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        const MEMORY_DEVICES: u32 = 1;
        let readable = self.flags & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32;
        let kind = self.meta.file_type();
        if kind.is_fifo() {
            return readable;
        }
        if kind.is_char_device() {
            let rdev = self.meta.rdev();
            let (major, minor) = (libc::major(rdev), libc::minor(rdev));
            return !(major == MEMORY_DEVICES && matches!(minor, 3 | 5 | 7 | 8 | 9));
        }
        !(kind.is_file() || kind.is_dir())
            || self.pseudo
            || self.target.starts_with("/proc")
            || self.target.starts_with("/sys")
    }
}

/// Whether `path` (followed: a `/proc/PID/fd/N` names what is open) lies on a file system
/// of the kernel's own, whose files may be read for ever (`trace_pipe` of `tracefs`,
/// `/proc/kmsg`), wherever it is mounted: a `procfs`, `sysfs` or `tracefs` mounted outside
/// `/proc` and `/sys` (a container's `/host/proc`, `/host/sys`) was not suspect by its
/// path, and git read `trace_pipe` through an include made a symlink to it until
/// something else stopped it ([`CONFIG_DEADLINE`] for a git that reads the config alone;
/// nothing for a `git add` or `fetch`).
fn on_pseudo_fs(path: &Path) -> bool {
    use nix::sys::statfs::{self as fs, FsType};
    const CONFIGFS_MAGIC: FsType = FsType(0x6265_6570);
    const PSTOREFS_MAGIC: FsType = FsType(0x6165_676c);
    const EFIVARFS_MAGIC: FsType = FsType(0xde5e_81e4);
    let Ok(found) = fs::statfs(path) else {
        return false;
    };
    [
        fs::PROC_SUPER_MAGIC,
        fs::SYSFS_MAGIC,
        fs::TRACEFS_MAGIC,
        fs::DEBUGFS_MAGIC,
        fs::CGROUP_SUPER_MAGIC,
        fs::CGROUP2_SUPER_MAGIC,
        fs::SECURITYFS_MAGIC,
        fs::BPF_FS_MAGIC,
        fs::SELINUX_MAGIC,
        fs::SMACK_MAGIC,
        fs::RDTGROUP_SUPER_MAGIC,
        fs::NSFS_MAGIC,
        CONFIGFS_MAGIC,
        PSTOREFS_MAGIC,
        EFIVARFS_MAGIC,
    ]
    .contains(&found.filesystem_type())
}

fn is_anonymous_pipe(target: &Path) -> bool {
    target.as_os_str().as_encoded_bytes().starts_with(b"pipe:[")
}

/// `pid`'s open descriptors; `None` when they cannot be read (it has exited).
fn fd_table(pid: u32) -> Option<Vec<OpenFd>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let table = dir
        .flatten()
        .filter_map(|fd| {
            let number: u32 = fd.file_name().to_str()?.parse().ok()?;
            // Through the magic link: the type of what the descriptor is open on.
            let meta = std::fs::metadata(fd.path()).ok()?;
            let pseudo = on_pseudo_fs(&fd.path());
            let target = std::fs::read_link(fd.path()).ok()?;
            let flags = fd_flags(&format!("/proc/{pid}/fdinfo/{number}"))?;
            Some(OpenFd {
                number,
                target,
                meta,
                pseudo,
                flags,
            })
        })
        .collect();
    Some(table)
}

/// The `flags:` (octal) of an `fdinfo` file.
fn fd_flags(fdinfo: &str) -> Option<u32> {
    let info = std::fs::read_to_string(fdinfo).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
}

/// Every process below `pid` (its children's, through `/proc/PID/task/TID/children`).
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        for child in children(parent) {
            if !found.contains(&child) && found.len() < 1024 {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// Whether coder holds descriptor `number` on `target` without close-on-exec: then its git
/// got it from coder at its start. coder opens every descriptor of its own close-on-exec,
/// so such a one was given to coder by its parent (a `make` jobserver's pipe); a git led
/// to reopen it (through `/proc/self/fd`) gets another number, one coder's descriptor does
/// not hold.
fn inherited_from_coder(number: u32, target: &Path) -> bool {
    const O_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
    std::fs::read_link(format!("/proc/self/fd/{number}")).is_ok_and(|ours| ours == target)
        && fd_flags(&format!("/proc/self/fdinfo/{number}"))
            .is_some_and(|flags| flags & O_CLOEXEC == 0)
}

/// Whether a thread of process `pid` sleeps in the kernel's FIFO open, waiting for a
/// writer.
fn waits_on_a_fifo(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read(task.path().join("wchan")).is_ok_and(|w| w == b"wait_for_partner")
    })
}

/// The output of `cmd`, a git of coder's watched by [`watched_run`], or why it failed.
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
fn succeeded(what: &'static str, out: std::process::Output) -> Result<Vec<u8>, GitError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `script` run by `sh` as a git of coder's would be: what [`watched_output`] returned,
    /// within a deadline (a watcher that missed a read that never ends fails the test).
    fn watched_sh(script: &str) -> Result<std::process::Output, GitError> {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).stdin(Stdio::null());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(watched_output(&mut cmd));
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("the watcher did not stop the process within 20 s")
    }

    #[test]
    fn a_process_that_reads_its_own_output_pipe_is_stopped() {
        for fd in [1, 2] {
            let out = watched_sh(&format!("exec cat /proc/self/fd/{fd}"));
            assert!(
                matches!(&out, Err(GitError::NotAFile { what }) if what.starts_with("pipe:[")),
                "fd {fd}: {out:?}"
            );
        }
    }

    #[test]
    fn a_wrapper_whose_child_reads_its_own_output_pipe_is_stopped() {
        // A `git` that is a wrapper script and does not `exec` the real one: the child
        // reads the pipe, and holds coder's output pipes open until it is killed too.
        for fd in [1, 2] {
            let out = watched_sh(&format!("cat /proc/self/fd/{fd}; true"));
            assert!(
                matches!(&out, Err(GitError::NotAFile { what }) if what.starts_with("pipe:[")),
                "fd {fd}: {out:?}"
            );
        }
        let out = watched_sh("sh -c 'cat /proc/self/fd/1; true'; true");
        assert!(
            matches!(&out, Err(GitError::NotAFile { what }) if what.starts_with("pipe:[")),
            "two levels down: {out:?}"
        );
    }

    #[test]
    fn a_wrapper_whose_child_waits_on_a_fifo_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let out = watched_sh(&format!("cat {}; true", fifo.display()));
        assert!(matches!(out, Err(GitError::Fifo)), "{out:?}");
    }

    #[test]
    fn what_a_wrappers_child_makes_for_itself_is_left_alone() {
        let out = watched_sh(
            "sh -c 'a=$(sleep 0.2; echo a); echo x | (sleep 0.2; cat) >/dev/null; \
             { sleep 0.2; } 2>/dev/null; echo \"$a\"'; true",
        )
        .expect("left alone");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"a\n");
    }

    #[test]
    fn a_process_that_reads_another_processs_pipe_is_stopped() {
        let mut other = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let out = watched_sh(&format!("exec cat /proc/{}/fd/0", other.id()));
        let _ = other.kill();
        let _ = other.wait();
        assert!(
            matches!(&out, Err(GitError::NotAFile { what }) if what.starts_with("pipe:[")),
            "{out:?}"
        );
    }

    #[test]
    fn pipes_a_process_makes_for_itself_are_left_alone() {
        // A wrapper script: command substitutions, a pipeline, a copy of its stderr while
        // a redirection holds fd 2, each held over several of the watcher's looks.
        let out = watched_sh(
            "a=$(sleep 0.2; echo a); echo x | (sleep 0.2; cat) >/dev/null; \
             { sleep 0.2; } 2>/dev/null; b=$(cat /dev/null); echo \"$a\"",
        )
        .expect("left alone");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"a\n");
    }

    #[test]
    fn what_a_git_may_hold_open() {
        let open = |path: &str, flags: u32| OpenFd {
            number: 3,
            target: PathBuf::from(path),
            meta: std::fs::metadata(path).unwrap(),
            pseudo: on_pseudo_fs(Path::new(path)),
            flags,
        };
        let read = libc::O_RDONLY as u32;
        let write = libc::O_WRONLY as u32;
        assert!(!open("/dev/null", read).suspect());
        assert!(!open("/dev/urandom", read).suspect());
        assert!(!open("/etc/hostname", read).suspect());
        assert!(!open("/tmp", read).suspect());
        assert!(open("/proc/self/status", read).suspect());
        assert!(open("/sys/kernel/mm", read).suspect());
        let tty = std::path::Path::new("/dev/tty");
        if tty.exists() {
            assert!(open("/dev/tty", read).suspect());
        }
        let (r, _w) = nix::unistd::pipe().unwrap();
        let pipe = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&r));
        assert!(open(&pipe, read).suspect());
        assert!(!open(&pipe, write).suspect());
    }

    #[test]
    fn a_filter_driver_the_agent_adds_to_an_included_config_runs_nothing() {
        // The user's config includes a file of the work tree (`include.path`, a common way
        // to share a repository's filters and aliases): the agent can write it, and so
        // defines a filter driver after coder listed the drivers at the run's start.
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .current_dir(&ws)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        };
        git(&["init", "-q"]);
        git(&["config", "include.path", "../shared.gitconfig"]);
        std::fs::write(ws.join("a.txt"), "a\n").unwrap();
        let repo = GitRepo::discover(&ws).unwrap();
        repo.snapshot().unwrap();
        // What the agent writes during its run.
        let marker = ws.join("ran-outside-the-sandbox");
        std::fs::write(
            ws.join("shared.gitconfig"),
            format!(
                "[filter \"x\"]\n\tclean = \"touch '{}'; cat\"\n",
                marker.display()
            ),
        )
        .unwrap();
        std::fs::write(ws.join(".gitattributes"), "*.txt filter=x\n").unwrap();
        std::fs::write(ws.join("a.txt"), "changed\n").unwrap();
        // The run's end: the "after" snapshot, by coder, outside the sandbox.
        repo.snapshot().unwrap();
        assert!(!marker.exists(), "the agent's filter ran as coder");
    }

    #[test]
    fn git_is_asked_when_any_directory_up_the_tree_has_a_git_entry_or_head() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        assert!(!git_could_find_a_repository(&deep));
        // A `.git` of any type, two levels up.
        std::fs::write(root.path().join("a/.git"), "gitdir: elsewhere\n").unwrap();
        assert!(git_could_find_a_repository(&deep));
        std::fs::remove_file(root.path().join("a/.git")).unwrap();
        // A directory git could take as a (bare) git dir: it holds `HEAD`.
        std::os::unix::fs::symlink("nowhere", root.path().join("a/b/HEAD")).unwrap();
        assert!(git_could_find_a_repository(&deep));
        // A path that does not resolve: git decides.
        assert!(git_could_find_a_repository(&root.path().join("missing")));
    }
}
