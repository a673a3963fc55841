//! Snapshots of a git workspace as tree objects, through a private index, with git run
//! so that nothing from the workspace can execute.
//!
//! coder runs these git commands itself, outside the sandbox, over a tree the agent could
//! write (DESIGN §5: nothing the agent writes may run outside the sandbox). What git would
//! otherwise read and act on is pinned down here:
//! * the environment is cleared (no `GIT_DIR`, `GIT_CONFIG_*`, `GIT_INDEX_FILE` of the
//!   caller), the system and global config are off (`GIT_CONFIG_NOSYSTEM`,
//!   `GIT_CONFIG_GLOBAL=/dev/null`), and every setting that runs a program is overridden
//!   on the command line ([`base_command`]);
//! * the snapshots' git runs in a git directory of coder's own ([`make_private_git_dir`]):
//!   its config is coder's text, with only the settings that decide what `git add`
//!   records for a file copied from the repository's (checked against their known
//!   values), its objects are private with the repository's as an alternate, its
//!   `info/exclude` a copy. So the repository's config is read once, at discovery
//!   (`rev-parse` and the copied settings, with the safety settings), and never by a
//!   snapshot. Until round fifteen the snapshots ran in the repository's git directory
//!   and switched off, by name, each filter driver its config defined: a config may
//!   include a file of the work tree (`include.path`), and a driver the agent defined
//!   there between coder's listing and git's next read of the config ran as coder,
//!   outside the sandbox; `refs/replace` could change what an object read as;
//! * the settings that let git take a file as unchanged from less than all its stat data
//!   (`core.trustctime`, `core.checkStat`, `core.ignoreStat`) are overridden; diffs are
//!   made with `--no-ext-diff --no-textconv`;
//! * the user's index is never written: `git add -A` runs on a copy of it (or a fresh one)
//!   in a private directory, and new objects go to the private object directory, so the
//!   repository is not changed at all. In a run that directory is in coder's state
//!   directory, which no sandbox grant may reach: in the host's `/tmp`, where
//!   `--allow-tmp` grants the agent everything, the agent marked its edits "assume
//!   unchanged" in that index (the ledger then said "unchanged"), and made its object
//!   directories symlinks through which coder's git wrote wherever the agent chose;
//! * a watcher stops any git of coder's that waits to open a FIFO or keeps reading what
//!   may never end ([`watched_run`]): a `.gitignore` made a FIFO, an included config made
//!   a symlink to `/proc/self/fd/1`.
//! * no object is read through a replacement (`GIT_NO_REPLACE_OBJECTS`), and the objects a
//!   diff reads, which are the repository's (the agent may rewrite them in place), are
//!   checked first: [`GitRepo::unverified_blobs`] hashes each (`blob SIZE\0CONTENT`,
//!   SHA-1 or SHA-256 as the repository's format says) as one `git cat-file --batch`
//!   streams it, and names those that do not hash to their id.
//! * a repository nested in the workspace (a gitlink to `git add -A`, or one `git add`
//!   refuses for want of a commit) is snapshotted as a [`Part`] of its own by the same
//!   commands, with coder's private git dir and a private index of its own:
//!   the nested repository's `.git`, the agent's to write, is never read.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::scan::Changed;
use crate::config::run_dirs::{self, RunLock};

mod command;
mod discovery;
mod error;
mod index;
mod objects;
mod watch;

use command::limit_memory;
use discovery::skipped_repository;
use index::{Kept, KeptIndex, copy_plain_file, write_new_private_file};
use objects::{ObjectFormat, ObjectHasher, check_batch, hex, pack_index_ids, unhex};
use watch::watched_output;

pub(crate) use command::{base_command, find_git, output, output_of_config};
pub(crate) use discovery::{git_could_find_a_repository, users_hooks_dir};
pub use error::GitError;
pub use index::KEPT_INDEX_DIR;
pub(crate) use watch::{SharedCpuBudget, config_output, watched_run};

/// A changed path and its (added, removed) line counts; `None` for a binary file.
pub type NumStat = (Vec<u8>, Option<(u64, u64)>);

/// One file of `git diff-tree --raw`: what the two trees name for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChange {
    /// Relative to the workspace.
    pub path: Vec<u8>,
    pub old_mode: u32,
    /// Zero-padded to 32 bytes; all zeros when the file is not in the "before" tree.
    pub old_oid: [u8; 32],
    pub new_mode: u32,
    pub new_oid: [u8; 32],
}

/// What `git diff-tree --raw --numstat` said: the trees' side ([`RawChange`]) and the
/// line counts ([`NumStat`]) of every changed file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiffStat {
    pub raw: Vec<RawChange>,
    pub counts: Vec<NumStat>,
}

/// The directory of the ledger's private git directories in coder's state directory.
pub const SCRATCH_DIR: &str = "ledger-git";

/// The name of the ledger's private git directory in its scratch directory.
const PRIVATE_GIT_DIR: &str = "git";

/// The settings of the repository's config that decide what `git add` records for a
/// file (line endings, the executable bit, symlinks, case), each with the values it
/// may take: copied into the private git directory, checked against these and written
/// out by coder; nothing else of the config is.
const COPIED_SETTINGS: &[(&str, &[&str])] = &[
    ("core.autocrlf", &["true", "false", "input"]),
    ("core.eol", &["lf", "crlf", "native"]),
    ("core.filemode", BOOLEAN),
    ("core.symlinks", BOOLEAN),
    ("core.ignorecase", BOOLEAN),
    ("core.precomposeunicode", BOOLEAN),
];

const BOOLEAN: &[&str] = &["true", "false", "yes", "no", "on", "off", "1", "0"];

/// The [`COPIED_SETTINGS`] the repository's config sets, as `(key, value)`; values that
/// are none of a key's known ones are left out. Read with every safety setting of
/// [`base_command`], the watcher's too ([`watched_run`]): the config may include a file of
/// the work tree.
fn copied_settings(program: &Path, workspace: &Path) -> Result<Vec<(String, String)>, GitError> {
    let mut cmd = base_command(program, workspace);
    cmd.args([
        "config",
        "-z",
        "--get-regexp",
        r"^core\.(autocrlf|eol|filemode|symlinks|ignorecase|precomposeunicode)$",
    ]);
    let out = config_output(&mut cmd)?;
    // Exit 1: none is set.
    if !out.status.success() && out.status.code() != Some(1) {
        return Err(GitError::Failed {
            what: "config",
            stderr: crate::text::one_line(&String::from_utf8_lossy(&out.stderr), 300),
        });
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|record| {
            let record = std::str::from_utf8(record).ok()?;
            let (key, value) = record.split_once('\n')?;
            let key = key.to_ascii_lowercase();
            let value = value.to_ascii_lowercase();
            let (_, allowed) = COPIED_SETTINGS.iter().find(|(name, _)| *name == key)?;
            allowed.contains(&value.as_str()).then_some((key, value))
        })
        .collect())
}

/// Makes coder's own git directory at `dir` for the ledger's snapshots of a repository
/// whose common git directory is `common_dir`: its config is coder's text (the object
/// format and the [`copied_settings`]), its object directory is private with the
/// repository's as its one alternate (new objects are written here, the repository's
/// are read), and its `info/exclude` is a copy of the repository's (a regular file of at
/// most a few MiB). Nothing else of the repository's git directory is read by the
/// ledger's git: not its config (with its includes, which a file of the work tree the
/// agent writes may be, and which defined filter drivers between coder's listing of them
/// and git's next read), not its hooks, refs (`refs/replace` changes what an object
/// reads as) or `info/attributes`.
fn make_private_git_dir(
    dir: &Path,
    common_dir: &Path,
    format: ObjectFormat,
    settings: &[(String, String)],
) -> std::io::Result<()> {
    use std::fmt::Write as _;
    for sub in ["objects/info", "refs/heads", "info"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/coder-ledger\n")?;
    let mut alternate = common_dir.join("objects").into_os_string();
    alternate.push("\n");
    std::fs::write(
        dir.join("objects/info/alternates"),
        alternate.as_encoded_bytes(),
    )?;
    let version = match format {
        ObjectFormat::Sha1 => 0,
        ObjectFormat::Sha256 => 1,
    };
    // Objects compressed fast: they are the ledger's own, for one run.
    let mut config = format!(
        "[core]\n\trepositoryformatversion = {version}\n\tbare = false\n\tsafecrlf = false\n\
         \tcompression = 1\n"
    );
    for (key, value) in settings {
        if let Some(name) = key.strip_prefix("core.") {
            let _ = writeln!(config, "\t{name} = {value}");
        }
    }
    if format == ObjectFormat::Sha256 {
        config.push_str("[extensions]\n\tobjectformat = sha256\n");
    }
    std::fs::write(dir.join("config"), config)?;
    // Above every `.gitattributes` of the work tree: no `$Id$` is collapsed. With `ident`
    // set there, `git add` records `$Id: ANYTHING $` (to the next `$` on its line) as
    // `$Id$`: the agent wrote code into such a span (`x = "$Id: "; import os; ...; "$"`)
    // and the ledger said the file was unchanged (round sixteen's review). And `diff` is
    // left unspecified (`!diff`), so git tells text from binary by the content: a
    // `-diff` or `binary` there had a text file's edit listed with no line counts and
    // shown as "Binary files differ", lines nobody saw.
    std::fs::write(dir.join("info/attributes"), "* -ident !diff\n")?;
    const EXCLUDE_CAP: u64 = 4 << 20;
    let exclude = common_dir.join("info/exclude");
    let fits = std::fs::symlink_metadata(&exclude).is_ok_and(|m| m.len() <= EXCLUDE_CAP);
    if fits {
        let _ = copy_plain_file(&exclude, &dir.join("info/exclude"));
    }
    Ok(())
}

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
        let lock = RunLock::make_dir(&path)?;
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
    /// The private index and object directory.
    scratch: PrivateDir,
    /// Bytes of an object id (20 for SHA-1, 32 for SHA-256).
    hash_len: usize,
    /// The object directory of each nested part seeded from its repository's own index
    /// (see [`GitRepo::seed_part`]): an alternate of that part's commands.
    part_objects: std::sync::Mutex<std::collections::HashMap<Vec<u8>, PathBuf>>,
    /// Whether a snapshot was taken (only the first, the "before", seeds a part).
    snapshotted: std::sync::atomic::AtomicBool,
    /// The directories git could not read during the snapshot under way (see
    /// [`unreadable_dirs`]), relative to the workspace.
    unreadable: std::sync::Mutex<Vec<Vec<u8>>>,
    /// Where the index of this run's last snapshot is kept for the next run on the same
    /// work tree ([`GitRepo::keep_index`]); `None` without a state directory.
    kept: Option<KeptIndex>,
}

/// A snapshot of the workspace: the tree `git write-tree` named (for line counts and the
/// diff), and what the private index said of every file under the workspace (paths
/// relative to it), which alone decides what changed (see [`super::git_index::entries`]).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub tree: String,
    pub entries: Vec<super::git_index::Entry>,
    /// The repositories nested in the workspace, each snapshotted as its own part (see
    /// [`Part`]), sorted by path.
    pub nested: Vec<Part>,
    /// Nested repositories not looked into: more than [`MAX_NESTED`] of them.
    pub nested_skipped: usize,
    /// Directories `git add` could not read (relative to the workspace, sorted): what
    /// they hold is in neither side of the comparison nor in the ignored walk's list.
    pub unreadable: Vec<Vec<u8>>,
}

/// A repository nested in the workspace (a submodule's checkout, a vendored clone, one
/// the agent made): `git add -A` records it as one gitlink, the commit its `HEAD` names,
/// so an edit inside it would not show. Its work tree is snapshotted apart, by coder's
/// git in coder's private git dir (the nested repository's own config,
/// index and hooks are never read: the agent may have written them) and a private index
/// of its own, `git add -A` run there: its `.gitignore` files apply, a repository nested
/// in it is a part of its own.
#[derive(Debug, Clone)]
pub struct Part {
    /// Relative to the workspace, without a trailing `/`.
    pub path: Vec<u8>,
    pub tree: String,
    /// Relative to the part's own directory.
    pub entries: Vec<super::git_index::Entry>,
}

/// Nested repositories snapshotted at most (each costs a `git add -A` and a `write-tree`).
pub const MAX_NESTED: usize = 256;

/// The mode of a gitlink entry.
pub const GITLINK_MODE: u32 = 0o160000;

/// The directories git says it could not open (`LC_ALL=C`: `warning: could not open
/// directory 'src/': Permission denied`), relative to the part it ran in.
///
/// Why: `git add -A` passes over a directory it cannot read (mode `0311`, which an agent
/// running as the user sets on a directory it wrote a file into: the file stays usable by
/// name) with a warning on stderr, and succeeds. What it holds was in neither
/// `changes.files` nor `changes.ignored`, with nothing said (round twenty's second review).
///
/// Every occurrence of git's words counts, whatever the name holds: the agent chooses the
/// name, and one with a newline (`a\nb`) or a `'` in it split or cut a line-by-line
/// reading, which then passed the directory over in silence. The name runs to the first
/// `': ` after the words (a name holding `': ` is cut there, still reported), else to the
/// end of that line.
fn unreadable_dirs(stderr: &[u8]) -> impl Iterator<Item = &[u8]> {
    const SAID: &[u8] = b"could not open directory '";
    const CLOSE: &[u8] = b"': ";
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let mut rest = stderr;
    std::iter::from_fn(move || {
        let at = find(rest, SAID)?;
        let name = &rest[at + SAID.len()..];
        let end = find(name, CLOSE)
            .or_else(|| name.iter().position(|b| *b == b'\n'))
            .unwrap_or(name.len());
        rest = &name[end..];
        Some(&name[..end])
    })
}

/// What `git add` says of a repository nested without a commit (`LC_ALL=C`).
const NO_COMMIT: &str = "does not have a commit checked out";

/// What `git rev-parse` said of the repository a workspace is in.
struct Probe {
    program: PathBuf,
    git_dir: PathBuf,
    work_tree: PathBuf,
    format: ObjectFormat,
    common_dir: PathBuf,
    prefix: String,
}

impl Probe {
    /// `rev-parse --absolute-git-dir --show-toplevel --show-object-format
    /// --path-format=absolute --git-common-dir --show-prefix`'s output, line by line.
    fn read(program: PathBuf, stdout: &[u8]) -> Option<Probe> {
        let text = std::str::from_utf8(stdout).ok()?;
        let mut lines = text.lines();
        Some(Probe {
            program,
            git_dir: PathBuf::from(lines.next()?),
            work_tree: PathBuf::from(lines.next()?),
            format: ObjectFormat::named(lines.next()?)?,
            common_dir: PathBuf::from(lines.next()?),
            prefix: lines.next().unwrap_or("").to_owned(),
        })
    }
}

impl GitRepo {
    /// The repository `workspace` belongs to, if it is in a (non-bare) work tree and git
    /// is installed; `None` otherwise (the caller falls back to a plain scan). The private
    /// index and objects are kept in coder's `$TMPDIR`: for tests and tools without a run.
    pub fn discover(workspace: &Path) -> Option<GitRepo> {
        GitRepo::discover_in(workspace, None).ok().flatten()
    }

    /// [`GitRepo::discover`], keeping the private index and objects under `state_dir`
    /// (coder's state directory, which no run's agent may reach) when given. `Err` when
    /// coder's watcher stopped the git that reads the repository's config
    /// ([`GitError::was_killed`]), or when that git failed in a workspace that is in a
    /// repository (a broken config, dubious ownership): the caller falls back to a plain
    /// scan as for `None`, but says why.
    pub fn discover_in(
        workspace: &Path,
        state_dir: Option<&Path>,
    ) -> Result<Option<GitRepo>, GitError> {
        let stopped = |e: GitError| match e {
            // The workspace is in a repository git cannot use as it is (a broken config,
            // dubious ownership, a git that died): the user is told why the plain walk.
            GitError::Failed { .. } => Err(e),
            e if e.was_killed() => Err(e),
            _ => Ok(None),
        };
        let probe = match GitRepo::probe(workspace) {
            Ok(Some(probe)) => probe,
            Ok(None) => return Ok(None),
            Err(e) => return stopped(e),
        };
        let settings = match copied_settings(&probe.program, workspace) {
            Ok(settings) => settings,
            Err(e) => return stopped(e),
        };
        Ok(GitRepo::made(workspace, state_dir, probe, &settings))
    }

    /// Where the repository is, by `git rev-parse` in `workspace`.
    fn probe(workspace: &Path) -> Result<Option<Probe>, GitError> {
        if !git_could_find_a_repository(workspace) {
            return Ok(None);
        }
        let Some(program) = find_git(workspace) else {
            return Ok(None);
        };
        let mut probe = base_command(&program, workspace);
        probe.args([
            "rev-parse",
            "--absolute-git-dir",
            "--show-toplevel",
            "--show-object-format",
            "--path-format=absolute",
            "--git-common-dir",
            "--show-prefix",
        ]);
        let out = config_output(&mut probe)?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains("not a git repository") {
                return Ok(None);
            }
            return Err(GitError::Failed {
                what: "rev-parse",
                stderr: match std::os::unix::process::ExitStatusExt::signal(&out.status) {
                    Some(signal) => format!("killed by signal {signal}"),
                    None => crate::text::one_line(&stderr, 300),
                },
            });
        }
        let Some(probe) = Probe::read(program, &out.stdout) else {
            return Ok(None);
        };
        if let Some(skipped) = skipped_repository(workspace, &probe.work_tree) {
            return Err(GitError::Failed {
                what: "rev-parse",
                stderr: format!(
                    "{} is not a repository git can use (its HEAD broken?), and git found \
                     the one around it instead ({}), whose ignore rules are not the \
                     workspace's",
                    skipped.display(),
                    probe.work_tree.display()
                ),
            });
        }
        Ok(Some(probe))
    }

    /// The repository [`GitRepo::probe`] found, with its private directories made.
    fn made(
        workspace: &Path,
        state_dir: Option<&Path>,
        probe: Probe,
        settings: &[(String, String)],
    ) -> Option<GitRepo> {
        let scratch = match state_dir {
            Some(state) => PrivateDir::new_in(&state.join(SCRATCH_DIR)),
            None => PrivateDir::new("coder-ledger"),
        }
        .ok()?;
        make_private_git_dir(
            &scratch.path().join(PRIVATE_GIT_DIR),
            &probe.common_dir,
            probe.format,
            settings,
        )
        .ok()?;
        let kept = state_dir.and_then(|state| KeptIndex::of(state, workspace, &probe.git_dir));
        let repo = GitRepo {
            kept,
            program: probe.program,
            git_dir: probe.git_dir,
            work_tree: probe.work_tree,
            workspace: workspace.to_path_buf(),
            prefix: probe.prefix,
            part_objects: Default::default(),
            snapshotted: Default::default(),
            unreadable: Default::default(),
            scratch,
            hash_len: probe.format.hash_len(),
        };
        // Start from a copy of the index the last run kept, or else of the user's: its
        // stat data spares hashing every file. A second copy keeps what it listed (see
        // [`GitRepo::changed_since`]).
        match repo.kept.as_ref().map(|k| k.load(b"", repo.hash_len)) {
            Some(Kept::Usable(bytes)) => {
                let _ = write_new_private_file(&repo.index(), &bytes);
            }
            // Another coder's kept index beside this one's list: start afresh.
            Some(Kept::Unusable) => {}
            Some(Kept::Absent) | None => {
                let _ = copy_plain_file(&repo.git_dir.join("index"), &repo.index());
            }
        }
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
        self.clear_unlooked_entries_at(b"")
    }

    /// [`GitRepo::clear_unlooked_entries`] of nested part `part`'s private index.
    fn clear_unlooked_entries_at(&self, part: &[u8]) -> Result<(), GitError> {
        let Ok(bytes) = std::fs::read(self.part_index(part)) else {
            // No index: a fresh one has no bits.
            return Ok(());
        };
        if super::git_index::has_unlooked_entries(&bytes, self.hash_len) == Some(false) {
            return Ok(());
        }
        let mut list = self.command_at(part);
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
                self.update_index(part, option, &paths)?;
            }
        }
        Ok(())
    }

    /// `git update-index -z OPTION --stdin` of the private index, fed `paths`.
    fn update_index(&self, part: &[u8], option: &str, paths: &[u8]) -> Result<(), GitError> {
        use std::io::Write;
        let mut cmd = self.command_at(part);
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
                self.killed_at(part);
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

    /// The index the snapshot started from, as it was then (the one the last run kept, or
    /// the user's; absent: there was none).
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
    /// user's index as it was when it began, whose ctime is at or after `since_ns`, or
    /// which is gone and whose nearest directory still there has such a ctime: a file
    /// deleted from one may be missing from the "before" and so from the changes.
    /// Untracked files that were the only ones of their directory, deleted before `git
    /// add` looked, are not seen.
    ///
    /// A directory gone from a directory whose ctime is older than `since_ns` was gone
    /// before the run's first process started (removing or renaming it sets its parent's
    /// ctime): one the last run's agent made and the user removed between the runs (`git
    /// clean -fd`, `rm -rf build`) is no change during this snapshot. It was reported as
    /// one whenever the CLI started before the snapshot was done.
    pub fn changed_since(&self, since_ns: i128) -> Result<Changed, GitError> {
        let staged = self.listed(&self.index())?;
        // An index this git cannot read (the snapshot's own started afresh then): the
        // directories of the snapshot's entries only.
        let earlier = self.listed(&self.start_index()).unwrap_or_default();
        let changed_at = |relative: &[u8]| -> bool {
            // Gone, or cannot be looked at: assume the worst.
            self.ctime_ns(relative)
                .is_none_or(|ctime| ctime >= since_ns)
        };
        let dir_changed_at = |relative: &[u8]| -> bool {
            let mut at = relative;
            loop {
                if let Some(ctime) = self.ctime_ns(at) {
                    return ctime >= since_ns;
                }
                if at.is_empty() || !self.is_gone(at) {
                    return true;
                }
                // Gone: its nearest directory still there says when.
                at = at
                    .iter()
                    .rposition(|b| *b == b'/')
                    .map_or(&[][..], |i| &at[..i]);
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
            dirs: dirs.into_iter().filter(|d| dir_changed_at(d)).collect(),
        })
    }

    /// The ctime (ns since the epoch) of `relative` in the workspace, not following a
    /// symlink there; `None` when it cannot be looked at.
    fn ctime_ns(&self, relative: &[u8]) -> Option<i128> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let path = self.workspace.join(std::ffi::OsStr::from_bytes(relative));
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()))
    }

    /// Whether `relative` is not in the workspace (no such entry, or a file where a
    /// directory on its way was), as opposed to there but not to be looked at.
    fn is_gone(&self, relative: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let path = self.workspace.join(std::ffi::OsStr::from_bytes(relative));
        matches!(
            std::fs::symlink_metadata(path).map_err(|e| e.raw_os_error()),
            Err(Some(libc::ENOENT | libc::ENOTDIR))
        )
    }

    /// What `.gitignore` leaves out of nested part `part` (`""`: the workspace), relative to
    /// the workspace, a directory ignored whole as one path ending with `/`: `git ls-files
    /// --others --ignored --exclude-standard --directory` over the part's private index,
    /// so exactly what the last snapshot's `git add -A` did not record (see
    /// [`super::ignored`]).
    pub fn ignored(&self, part: &[u8]) -> Result<Vec<Vec<u8>>, GitError> {
        let mut cmd = self.command_at(part);
        cmd.args([
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            "--exclude-standard",
            "--directory",
            "--",
            ".",
        ]);
        let out = output("ls-files", cmd).inspect_err(|e| {
            if e.was_killed() {
                self.killed_at(part);
            }
        })?;
        Ok(out
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| join(part, p))
            .collect())
    }

    /// Keeps the private index of the last snapshot, and of each nested part, for the
    /// next run on this work tree, which starts from it instead of the user's index.
    ///
    /// Why: the user's index is the agent's to write, and git takes an entry whose stat
    /// data matches its file as saying what the file holds. An agent that wrote an entry
    /// with a file's exact stat data (read with `stat`, checksum made anew) and the id of
    /// the content the next run would give that file had the next run's "before" hold
    /// that content: the next run's edit of the file was reported unchanged. An index of
    /// coder's own, written by its git once the agent's tree was gone, in the state
    /// directory no agent reaches, has only ids git hashed from the files. Entries whose
    /// blob is in this run's private object store (which goes with the run) have their
    /// stat data cleared, so the next run hashes those files again. Best effort: a run
    /// without it starts from the user's index as before.
    pub fn keep_index(&self) {
        let Some(kept) = &self.kept else {
            return;
        };
        let private: Vec<[u8; 32]> = self.private_object_ids().into_iter().collect();
        let mut parts = vec![Vec::new()];
        parts.extend(
            self.part_objects
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .keys()
                .cloned(),
        );
        for part in parts {
            kept.store(&part, &self.part_index(&part), self.hash_len, &private);
        }
        kept.prune();
    }

    /// The ids of the objects in the private store (loose, and in packs), zero-padded to
    /// 32 bytes.
    fn private_object_ids(&self) -> std::collections::HashSet<[u8; 32]> {
        let objects = self.scratch.path().join(PRIVATE_GIT_DIR).join("objects");
        let mut ids = std::collections::HashSet::new();
        let Ok(dirs) = std::fs::read_dir(&objects) else {
            return ids;
        };
        for dir in dirs.flatten() {
            let name = dir.file_name();
            let name = name.to_string_lossy();
            if name == "pack" {
                let packs = std::fs::read_dir(dir.path())
                    .into_iter()
                    .flatten()
                    .flatten();
                for pack in packs.filter(|p| p.path().extension().is_some_and(|e| e == "idx")) {
                    if let Ok(idx) = std::fs::read(pack.path()) {
                        ids.extend(pack_index_ids(&idx, self.hash_len));
                    }
                }
            } else if name.len() == 2 {
                let loose = std::fs::read_dir(dir.path())
                    .into_iter()
                    .flatten()
                    .flatten();
                for object in loose {
                    let full = format!("{name}{}", object.file_name().to_string_lossy());
                    if full.len() == self.hash_len * 2
                        && let Some(id) = unhex(full.as_bytes(), self.hash_len)
                    {
                        ids.insert(id);
                    }
                }
            }
        }
        ids
    }

    /// A git command on this repository with every safety setting applied.
    ///
    /// Its git directory is coder's private one ([`make_private_git_dir`]), not the
    /// repository's: nothing of the repository's config, hooks, refs or attributes file is
    /// read, only its objects (through an alternate) and the work tree.
    fn command(&self) -> Command {
        self.command_at(b"")
    }

    /// The directory of nested part `part` (relative to the workspace; `""`: the
    /// workspace itself).
    fn part_dir(&self, part: &[u8]) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        if part.is_empty() {
            self.workspace.clone()
        } else {
            self.workspace.join(std::ffi::OsStr::from_bytes(part))
        }
    }

    /// The private index of nested part `part` (its directory made when absent).
    fn part_index(&self, part: &[u8]) -> PathBuf {
        use sha1::Digest;
        if part.is_empty() {
            return self.index();
        }
        let dir = self
            .scratch
            .path()
            .join("nested")
            .join(hex(&sha1::Sha1::digest(part)));
        let _ = std::fs::create_dir_all(&dir);
        dir.join("index")
    }

    /// [`GitRepo::command`] for nested part `part`: run in its directory, which is its
    /// work tree, with its private index; the git dir is the workspace's repository's.
    fn command_at(&self, part: &[u8]) -> Command {
        let dir = self.part_dir(part);
        let mut cmd = base_command(&self.program, &dir);
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(self.scratch.path().join(PRIVATE_GIT_DIR));
        let mut work_tree = OsString::from("--work-tree=");
        work_tree.push(if part.is_empty() {
            &self.work_tree
        } else {
            &dir
        });
        cmd.arg(git_dir).arg(work_tree);
        cmd.env("GIT_INDEX_FILE", self.part_index(part));
        limit_memory(&mut cmd);
        // A nested part's own objects, besides the private ones and the repository's
        // (the private git dir's alternate).
        if let Some(objects) = self
            .part_objects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(part)
        {
            cmd.env("GIT_ALTERNATE_OBJECT_DIRECTORIES", objects);
        }
        cmd
    }

    /// The workspace's content now, as a tree id (`.gitignore` applies).
    pub fn snapshot(&self) -> Result<Snapshot, GitError> {
        self.snapshot_excluding(&[])
    }

    /// The same, leaving out `exclude` (paths relative to the workspace).
    pub fn snapshot_excluding(&self, exclude: &[String]) -> Result<Snapshot, GitError> {
        let exclude: Vec<Vec<u8>> = exclude.iter().map(|p| p.as_bytes().to_vec()).collect();
        self.take_unreadable();
        let refused = match self.add_all(b"", &exclude) {
            Err(e) if !e.was_killed() => {
                // A copied index git cannot use (a split index, a newer format): start
                // afresh.
                let _ = std::fs::remove_file(self.index());
                self.add_all(b"", &exclude)?
            }
            added => added?,
        };
        let tree = self.run("write-tree", &["write-tree"])?;
        let entries = self.workspace_entries()?;
        let first = !self
            .snapshotted
            .swap(true, std::sync::atomic::Ordering::Relaxed);
        let (nested, nested_skipped) = self.nested_parts(&entries, refused, &exclude, first)?;
        Ok(Snapshot {
            tree: String::from_utf8_lossy(&tree).trim().to_owned(),
            entries,
            nested,
            nested_skipped,
            unreadable: self.take_unreadable(),
        })
    }

    /// The directories git could not read since the last call, sorted, deduplicated.
    fn take_unreadable(&self) -> Vec<Vec<u8>> {
        let mut dirs = std::mem::take(
            &mut *self
                .unreadable
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// `git add -A` of nested part `part` (`""`: the workspace), leaving out `exclude`
    /// (relative to the workspace): the repositories nested there without a commit, which
    /// `git add` refuses (it can record a nested repository only as its `HEAD` commit),
    /// are left out too, and returned (relative to the workspace) to be parts of their own.
    /// Only when the first `git add` fails on one: a dry run lists them all, then the
    /// second `git add` leaves them out.
    fn add_all(&self, part: &[u8], exclude: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, GitError> {
        let here: Vec<Vec<u8>> = exclude
            .iter()
            .filter_map(|p| below(part, p))
            .filter(|p| !p.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        let add = |extra: &[&str], out: &[Vec<u8>]| {
            let mut cmd = self.command_at(part);
            // Every blob streamed through `read`, which the watcher counts ([`READ_BUDGET`]);
            // for `add` alone: a diff takes a blob over the threshold as binary.
            cmd.args(["-c", "core.bigFileThreshold=1", "add"])
                .args(extra)
                .args(["-A", "--", "."]);
            cmd.args(out.iter().map(|p| exclude_spec(p)));
            let out = watched_output(&mut cmd);
            if out.as_ref().is_err_and(GitError::was_killed) {
                self.killed_at(part);
            }
            if let Ok(out) = &out {
                self.unreadable
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(unreadable_dirs(&out.stderr).map(|p| {
                        // The workspace's paths are said from the work tree's top.
                        let p = if part.is_empty() {
                            p.strip_prefix(self.prefix.as_bytes()).unwrap_or(p)
                        } else {
                            p
                        };
                        join(part, p)
                    }));
            }
            out
        };
        let first = add(&[], &here)?;
        if first.status.success() {
            return Ok(Vec::new());
        }
        let failed = |out: &std::process::Output| GitError::Failed {
            what: "add",
            stderr: crate::text::one_line(&String::from_utf8_lossy(&out.stderr), 300),
        };
        if !String::from_utf8_lossy(&first.stderr).contains(NO_COMMIT) {
            return Err(failed(&first));
        }
        let listed = add(&["--dry-run", "--ignore-errors"], &here)?;
        // Index paths, relative to the part's work tree (the workspace's: its prefix).
        let prefix: &[u8] = if part.is_empty() {
            self.prefix.as_bytes()
        } else {
            b""
        };
        let refused: Vec<Vec<u8>> = refused_repositories(&listed.stderr)
            .into_iter()
            .filter_map(|p| p.strip_prefix(prefix).map(<[u8]>::to_vec))
            .collect();
        if refused.is_empty() {
            return Err(failed(&first));
        }
        let mut out = here;
        out.extend(refused.iter().cloned());
        let second = add(&[], &out)?;
        if !second.status.success() {
            return Err(failed(&second));
        }
        Ok(refused.into_iter().map(|p| join(part, &p)).collect())
    }

    /// Snapshots every repository nested in the workspace as a part of its own: the
    /// gitlinks among `entries` (the workspace's), those `git add` refused (`refused`),
    /// and so on down; at most [`MAX_NESTED`], the number of those left also returned. A
    /// nested directory that is not a directory of the workspace itself (a symlink on its
    /// way, swapped in since `git add` looked) is left out. Nothing runs, and no
    /// directory is read, when the workspace has none (the common case).
    fn nested_parts(
        &self,
        entries: &[super::git_index::Entry],
        refused: Vec<Vec<u8>>,
        exclude: &[Vec<u8>],
        seed: bool,
    ) -> Result<(Vec<Part>, usize), GitError> {
        use std::os::unix::ffi::OsStrExt;
        let mut queue: std::collections::VecDeque<Vec<u8>> =
            gitlinks(b"", entries).chain(refused).collect();
        if queue.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let workspace = std::fs::canonicalize(&self.workspace)?;
        let mut parts: Vec<Part> = Vec::new();
        let mut skipped = 0;
        while let Some(path) = queue.pop_front() {
            if exclude.iter().any(|x| below(x, &path).is_some())
                || parts.iter().any(|p| p.path == path)
            {
                continue;
            }
            if parts.len() >= MAX_NESTED {
                skipped += 1;
                continue;
            }
            let under = workspace.join(std::ffi::OsStr::from_bytes(&path));
            match std::fs::canonicalize(self.part_dir(&path)) {
                Ok(dir) if dir == under => {}
                // A gitlink without its directory (a submodule removed from the work
                // tree): nothing there to look at.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // Not a directory of the workspace (swapped for a symlink since `git add`
                // looked): not read, and said.
                _ => {
                    skipped += 1;
                    continue;
                }
            }
            if seed {
                self.seed_part(&path, &workspace);
            }
            let refused = match self.add_all(&path, exclude) {
                Err(e) if seed && !e.was_killed() => {
                    // A seed git cannot use: afresh.
                    let _ = std::fs::remove_file(self.part_index(&path));
                    self.add_all(&path, exclude)?
                }
                added => added?,
            };
            let mut cmd = self.command_at(&path);
            // An entry of the seed whose object the nested repository lacks: the diff
            // reads no object it has not checked (see [`GitRepo::unverified_blobs`]).
            cmd.args(["write-tree", "--missing-ok"]);
            let tree = output("write-tree", cmd).inspect_err(|e| {
                if e.was_killed() {
                    self.killed_at(&path);
                }
            })?;
            let bytes = std::fs::read(self.part_index(&path))?;
            let part_entries =
                super::git_index::entries(&bytes, self.hash_len, b"").ok_or(GitError::Index)?;
            queue.extend(gitlinks(&path, &part_entries).chain(refused));
            parts.push(Part {
                path,
                tree: String::from_utf8_lossy(&tree).trim().to_owned(),
                entries: part_entries,
            });
        }
        parts.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((parts, skipped))
    }

    /// Starts nested part `part`'s private index from a copy of its repository's own index
    /// (as the workspace's starts from the user's: its stat data spares hashing every
    /// file, entries git would not look at cleared), with that repository's object
    /// directory an alternate of the part's commands. Only for the "before" snapshot: the
    /// agent may write that index, and at the "after" one a repository it made would
    /// tell coder what its files hold. Only a `.git` directory, or a `.git` file naming
    /// one, within the workspace or the workspace's git dir, without a `:` in its path
    /// (the list of alternates is `:`-separated); nothing otherwise (the part is hashed
    /// whole).
    fn seed_part(&self, part: &[u8], workspace: &Path) {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = self.part_dir(part);
        let dot_git = dir.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            return;
        };
        let git_dir = if meta.is_dir() {
            dot_git
        } else if meta.is_file() && meta.len() < 4096 {
            let mut text = String::new();
            let read = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&dot_git)
                .and_then(|mut f| f.read_to_string(&mut text));
            let Some(named) = read
                .ok()
                .and_then(|_| text.strip_prefix("gitdir: "))
                .map(str::trim_end)
            else {
                return;
            };
            dir.join(named)
        } else {
            return;
        };
        let Ok(git_dir) = std::fs::canonicalize(&git_dir) else {
            return;
        };
        let inside = |bound: &Path| git_dir.starts_with(bound);
        let own_git_dir = std::fs::canonicalize(&self.git_dir).ok();
        if !(inside(workspace) || own_git_dir.as_deref().is_some_and(inside)) {
            return;
        }
        let objects = git_dir.join("objects");
        let objects_ok = std::fs::symlink_metadata(&objects).is_ok_and(|m| m.is_dir())
            && !objects.as_os_str().as_encoded_bytes().contains(&b':');
        if !objects_ok {
            return;
        }
        let index = self.part_index(part);
        let _ = std::fs::remove_file(&index);
        let seeded = match self.kept.as_ref().map(|k| k.load(part, self.hash_len)) {
            Some(Kept::Usable(bytes)) => write_new_private_file(&index, &bytes).is_ok(),
            Some(Kept::Unusable) => false,
            Some(Kept::Absent) | None => copy_plain_file(&git_dir.join("index"), &index).is_ok(),
        };
        if !seeded {
            let _ = std::fs::remove_file(&index);
            return;
        }
        self.part_objects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(part.to_vec(), objects);
        if self.clear_unlooked_entries_at(part).is_err() {
            let _ = std::fs::remove_file(&index);
        }
    }

    /// The id of the empty tree (the side of a part that was not there), which git knows
    /// without its object.
    pub fn empty_tree(&self) -> String {
        ObjectHasher::new(self.hash_len, "tree", 0)
            .map(|h| hex(&h.finish()[..self.hash_len]))
            .unwrap_or_default()
    }

    /// The private index's entries under the workspace, relative to it.
    fn workspace_entries(&self) -> Result<Vec<super::git_index::Entry>, GitError> {
        let bytes = std::fs::read(self.index())?;
        super::git_index::entries(&bytes, self.hash_len, self.prefix.as_bytes())
            .ok_or(GitError::Index)
    }

    /// `git diff-tree` between two trees, limited to (and relative to) the workspace,
    /// leaving out `exclude` (paths relative to the workspace) and `also_out` (the same,
    /// as bytes: files whose diff coder does not trust).
    fn diff_tree(
        &self,
        part: &[u8],
        format: &[&str],
        trees: [&str; 2],
        exclude: &[String],
        also_out: &[Vec<u8>],
    ) -> Command {
        use std::os::unix::ffi::OsStrExt;
        let mut cmd = self.command_at(part);
        cmd.args([
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
        ]);
        if !part.is_empty() {
            // The patch's paths relative to the workspace (its raw and numstat paths stay
            // relative to the part).
            for (option, side) in [("--src-prefix=", "a/"), ("--dst-prefix=", "b/")] {
                let mut arg = format!("{option}{side}").into_bytes();
                arg.extend_from_slice(part);
                arg.push(b'/');
                cmd.arg(std::ffi::OsStr::from_bytes(&arg));
            }
        } else if !self.prefix.is_empty() {
            cmd.arg(format!("--relative={}", self.prefix));
        }
        cmd.args(format).args(trees);
        if !exclude.is_empty() || !also_out.is_empty() {
            cmd.args(["--", "."]);
            cmd.args(exclude.iter().map(|p| format!(":(exclude,literal){p}")));
            cmd.args(also_out.iter().map(|p| exclude_spec(p)));
        }
        cmd
    }

    /// What `git diff-tree` finds between two trees: each changed file's object ids and
    /// modes on both sides as the trees say (`--raw`), and its line counts (`--numstat`),
    /// in one run; `untrusted` left out. Of nested part `part` (`""`: the workspace),
    /// paths relative to it.
    pub fn diff_stat(
        &self,
        part: &[u8],
        before: &str,
        after: &str,
        exclude: &[String],
        untrusted: &[Vec<u8>],
    ) -> Result<DiffStat, GitError> {
        let cmd = self.diff_tree(
            part,
            &["--raw", "--numstat"],
            [before, after],
            exclude,
            untrusted,
        );
        let out = output("diff-tree", cmd)?;
        Ok(parse_raw_numstat(&out, self.hash_len))
    }

    /// The unified diff between two trees: at most `cap` bytes kept, and the full size;
    /// `untrusted` left out. Of nested part `part` as [`GitRepo::diff_stat`]; the patch's
    /// own paths are relative to the workspace.
    pub fn patch(
        &self,
        part: &[u8],
        before: &str,
        after: &str,
        exclude: &[String],
        untrusted: &[Vec<u8>],
        cap: usize,
    ) -> Result<(Vec<u8>, u64), GitError> {
        let mut cmd = self.diff_tree(part, &["-p"], [before, after], exclude, untrusted);
        // `-z` only changes the raw formats; patches keep their usual quoting.
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
        watched_run(&mut cmd, |child| read_capped(child, cap))?
    }

    /// Which of `oids` (blobs, zero-padded to 32 bytes) the repository's object store
    /// (with the private one) does not hold as a blob whose content hashes to its name:
    /// forged (a loose object rewritten in place, a pack rewritten, a replacement), or
    /// missing. One `git cat-file --batch`; each object is hashed here as it streams by.
    /// Of nested part `part` (`""`: the workspace), whose commands may read its
    /// repository's objects too.
    pub fn unverified_blobs(
        &self,
        part: &[u8],
        oids: &[[u8; 32]],
    ) -> Result<Vec<[u8; 32]>, GitError> {
        use std::io::Write;
        if oids.is_empty() {
            return Ok(Vec::new());
        }
        let hash_len = self.hash_len;
        let mut input = Vec::with_capacity(oids.len() * (2 * hash_len + 1));
        for oid in oids {
            input.extend_from_slice(hex(&oid[..hash_len]).as_bytes());
            input.push(b'\n');
        }
        let mut cmd = self.command_at(part);
        cmd.args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let checked = watched_run(&mut cmd, |mut child| {
            let stdin = child.stdin.take();
            let stdout = child.stdout.take();
            let checked = std::thread::scope(|s| {
                // Fed from a thread of its own: git writes while it reads.
                s.spawn(move || {
                    if let Some(mut stdin) = stdin {
                        let _ = stdin.write_all(&input);
                    }
                });
                stdout.map(|out| check_batch(std::io::BufReader::new(out), hash_len))
            });
            let status = child.wait()?;
            Ok((checked, status))
        })
        .inspect_err(|e| {
            if e.was_killed() {
                self.killed_at(part);
            }
        })?;
        let (Some(Ok(verdicts)), status) = checked else {
            return Err(GitError::Failed {
                what: "cat-file --batch",
                stderr: "its output could not be read".to_owned(),
            });
        };
        if !status.success() {
            return Err(GitError::Failed {
                what: "cat-file --batch",
                stderr: status.to_string(),
            });
        }
        let good: std::collections::HashSet<[u8; 32]> = verdicts
            .into_iter()
            .filter(|(_, ok)| *ok)
            .map(|(oid, _)| oid)
            .collect();
        Ok(oids
            .iter()
            .filter(|o| !good.contains(*o))
            .copied()
            .collect())
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
        self.killed_at(b"");
    }

    /// [`GitRepo::killed`] for nested part `part`'s index.
    fn killed_at(&self, part: &[u8]) {
        let _ = std::fs::remove_file(self.part_index(part).with_extension("lock"));
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

/// `path` relative to `dir` when it is `dir` itself (`""`) or below it; `dir` `""` is the
/// workspace, holding every path.
pub(crate) fn below<'a>(dir: &[u8], path: &'a [u8]) -> Option<&'a [u8]> {
    if dir.is_empty() {
        return Some(path);
    }
    let rest = path.strip_prefix(dir)?;
    match rest {
        [] => Some(rest),
        [b'/', rest @ ..] => Some(rest),
        _ => None,
    }
}

/// `part/path` (`path` when `part` is `""`).
pub(crate) fn join(part: &[u8], path: &[u8]) -> Vec<u8> {
    let mut joined = part.to_vec();
    if !joined.is_empty() {
        joined.push(b'/');
    }
    joined.extend_from_slice(path);
    joined
}

/// A pathspec leaving out `path` (literal, relative to the command's directory) and what
/// is below it.
fn exclude_spec(path: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    let mut spec = b":(exclude,literal)".to_vec();
    spec.extend_from_slice(path);
    std::ffi::OsStr::from_bytes(&spec).to_owned()
}

/// The gitlinks among `entries` (of nested part `part`), relative to the workspace.
fn gitlinks<'a>(
    part: &'a [u8],
    entries: &'a [super::git_index::Entry],
) -> impl Iterator<Item = Vec<u8>> + 'a {
    entries
        .iter()
        .filter(|e| e.mode == GITLINK_MODE && e.stage == 0)
        .map(move |e| join(part, &e.path))
}

/// The repositories `git add --dry-run --ignore-errors` refused for want of a commit, from
/// its stderr (`error: 'PATH/' does not have a commit checked out`, one a line; index
/// paths, the trailing `/` cut). A path with a newline is not read (the second `git add`
/// then fails on it, as the first did).
fn refused_repositories(stderr: &[u8]) -> Vec<Vec<u8>> {
    let tail = format!("/' {NO_COMMIT}");
    stderr
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            line.strip_prefix(b"error: '")?
                .strip_suffix(tail.as_bytes())
                .filter(|p| !p.is_empty())
                .map(<[u8]>::to_vec)
        })
        .collect()
}

/// Parses `git diff-tree -z --raw --numstat` output: git writes every raw record
/// (`:MODE MODE OID OID STATUS`, NUL, the path, NUL) before the numstat ones (`ADDED`, tab,
/// `REMOVED`, tab, the path, NUL; `-` for a binary file's counts).
pub fn parse_raw_numstat(out: &[u8], hash_len: usize) -> DiffStat {
    let mut stat = DiffStat::default();
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(field) = fields.next() {
        if let Some(header) = field.strip_prefix(b":") {
            let Some(path) = fields.next() else { break };
            let mut parts = header.split(|b| *b == b' ');
            let mode = |m: Option<&[u8]>| {
                std::str::from_utf8(m?)
                    .ok()
                    .and_then(|m| u32::from_str_radix(m, 8).ok())
            };
            let (Some(old_mode), Some(new_mode)) = (mode(parts.next()), mode(parts.next())) else {
                continue;
            };
            let (Some(old_oid), Some(new_oid)) = (
                parts.next().and_then(|o| unhex(o, hash_len)),
                parts.next().and_then(|o| unhex(o, hash_len)),
            ) else {
                continue;
            };
            stat.raw.push(RawChange {
                path: path.to_vec(),
                old_mode,
                old_oid,
                new_mode,
                new_oid,
            });
            continue;
        }
        let mut parts = field.splitn(3, |b| *b == b'\t');
        let (Some(added), Some(removed), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let number = |n: &[u8]| std::str::from_utf8(n).ok()?.parse::<u64>().ok();
        let counts = number(added).zip(number(removed));
        stat.counts.push((path.to_vec(), counts));
    }
    stat
}

#[cfg(test)]
mod tests {
    use super::index::KEPT_INDEXES;
    use super::*;

    /// git's words for each directory it could not open, whatever the name holds: a
    /// newline, a quote, the words' own `': ` (cut, still reported), the last line
    /// without its end.
    #[test]
    fn every_directory_git_could_not_open_is_read() {
        let stderr = b"warning: could not open directory 'src/': Permission denied\n\
            warning: could not open directory 'a\nb/': Permission denied\n\
            warning: LF will be replaced by CRLF\n\
            warning: could not open directory 'it's/': Permission denied\n\
            warning: could not open directory 'x': y/': Permission denied\n\
            warning: could not open directory 'cut";
        let got: Vec<&[u8]> = unreadable_dirs(stderr).collect();
        let want: Vec<&[u8]> = vec![b"src/", b"a\nb/", b"it's/", b"x", b"cut"];
        assert_eq!(got, want);
        assert_eq!(
            unreadable_dirs(b"warning: nothing of the kind\n").count(),
            0
        );
    }

    #[test]
    fn a_filter_driver_the_agent_adds_to_an_included_config_runs_nothing() {
        // The user's config includes a file of the work tree (`include.path`, a common way
        // to share a repository's filters and aliases): the agent can write it, and so
        // defines a filter driver during the run; the snapshots' git never reads it.
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

    /// `git` in `dir` with no config but the repository's, asserting success.
    fn user_git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The line counts of `a.txt` after appending a line, through the private git dir.
    fn counts_after_an_appended_line(ws: &Path) -> Option<(u64, u64)> {
        let repo = GitRepo::discover(ws).unwrap();
        let before = repo.snapshot().unwrap();
        let text = std::fs::read_to_string(ws.join("a.txt")).unwrap();
        std::fs::write(ws.join("a.txt"), format!("{text}more\n")).unwrap();
        let after = repo.snapshot().unwrap();
        let counts = repo
            .diff_stat(b"", &before.tree, &after.tree, &[], &[])
            .unwrap()
            .counts;
        assert_eq!(counts.len(), 1, "{counts:?}");
        assert_eq!(counts[0].0, b"a.txt");
        counts[0].1
    }

    #[test]
    fn a_sha256_repository_and_a_linked_worktree_are_measured_through_the_private_git_dir() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let main = root.join("main");
        std::fs::create_dir(&main).unwrap();
        user_git(&main, &["init", "-q", "--object-format=sha256"]);
        std::fs::write(main.join("a.txt"), "a\n").unwrap();
        user_git(&main, &["add", "-A"]);
        user_git(&main, &["commit", "-qm", "start"]);
        assert_eq!(counts_after_an_appended_line(&main), Some((1, 0)));
        // A linked worktree: its git dir has no objects of its own (they are the common
        // dir's), which the private git dir's alternate must name.
        user_git(&main, &["worktree", "add", "-q", "../linked"]);
        assert_eq!(
            counts_after_an_appended_line(&root.join("linked")),
            Some((1, 0))
        );
    }

    /// The index kept for the next run: git reads it (its checksum made anew, for both
    /// hashes), the entry of a file whose blob is only in the run's private store has no
    /// stat data (hashed again next time), a committed file's keeps it, and the next run
    /// starts from it rather than from the user's index.
    #[test]
    fn the_index_kept_for_the_next_run_forgets_the_stat_data_of_private_blobs() {
        for format in ["sha1", "sha256"] {
            let dir = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(dir.path()).unwrap();
            let (ws, state) = (root.join("ws"), root.join("state"));
            std::fs::create_dir_all(&ws).unwrap();
            user_git(&ws, &["init", "-q", &format!("--object-format={format}")]);
            std::fs::write(ws.join("a.txt"), "a\n").unwrap();
            user_git(&ws, &["add", "-A"]);
            user_git(&ws, &["commit", "-qm", "start"]);
            let repo = GitRepo::discover_in(&ws, Some(&state)).unwrap().unwrap();
            repo.snapshot().unwrap();
            std::fs::write(ws.join("new.txt"), "new\n").unwrap();
            repo.snapshot().unwrap();
            repo.keep_index();
            let Kept::Usable(loaded) = repo.kept.as_ref().unwrap().load(b"", repo.hash_len) else {
                panic!("{format}: the kept index is not usable");
            };
            let kept = root.join("loaded-index");
            std::fs::write(&kept, loaded).unwrap();
            let listed = Command::new("git")
                .current_dir(&ws)
                .env("GIT_INDEX_FILE", &kept)
                .args(["ls-files", "--debug"])
                .output()
                .unwrap();
            assert!(listed.status.success(), "{format}: {listed:?}");
            let listed = String::from_utf8_lossy(&listed.stdout);
            let stat_of = |name: &str| {
                let at = listed.find(&format!("{name}\n")).unwrap();
                listed[at..].lines().nth(1).unwrap().to_owned()
            };
            assert_eq!(stat_of("new.txt"), "  ctime: 0:0", "{format}: {listed}");
            assert_ne!(stat_of("a.txt"), "  ctime: 0:0", "{format}: {listed}");
            drop(repo);
            // The user's index, which lists no `new.txt`, is not where the next run starts.
            let next = GitRepo::discover_in(&ws, Some(&state)).unwrap().unwrap();
            let started = std::fs::read(next.index()).unwrap();
            let entries =
                crate::workspace::git_index::entries(&started, next.hash_len, b"").unwrap();
            assert!(
                entries.iter().any(|e| e.path == b"new.txt"),
                "{format}: {entries:?}"
            );
        }
    }

    /// A kept index whose list of private blobs is another one's (two coders of one work
    /// tree stored theirs at once) is not used, and one without a list neither.
    #[test]
    fn a_kept_index_is_used_only_with_its_own_list() {
        let dir = tempfile::tempdir().unwrap();
        let kept = KeptIndex {
            dir: dir.path().join("kept"),
            key: "k".repeat(32),
        };
        let index = dir.path().join("index");
        let mut bytes = b"DIRC\0\0\0\x02\0\0\0\0".to_vec();
        bytes.extend(<sha1::Sha1 as sha1::Digest>::digest(&bytes));
        std::fs::write(&index, &bytes).unwrap();
        assert!(matches!(kept.load(b"", 20), Kept::Absent));
        std::fs::set_permissions(&index, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        kept.store(b"", &index, 20, &[]);
        assert!(matches!(kept.load(b"", 20), Kept::Usable(b) if b == bytes));
        for file in [kept.part(b""), kept.private_list(b"")] {
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&file).unwrap().permissions(),
            );
            assert_eq!(mode & 0o777, 0o600, "{}", file.display());
        }
        let mut other = bytes.clone();
        other[11] = 1;
        std::fs::write(kept.private_list(b""), &other[other.len() - 20..]).unwrap();
        assert!(
            matches!(kept.load(b"", 20), Kept::Usable(_)),
            "same checksum bytes"
        );
        std::fs::write(kept.private_list(b""), [0u8; 20]).unwrap();
        assert!(matches!(kept.load(b"", 20), Kept::Unusable));
        std::fs::remove_file(kept.private_list(b"")).unwrap();
        assert!(matches!(kept.load(b"", 20), Kept::Unusable));
    }

    /// Kept indexes of more than [`KEPT_INDEXES`] work trees: the least recently stored
    /// go, with their nested parts', and a killed coder's temporary file once it is old.
    #[test]
    fn kept_indexes_are_pruned_to_the_most_recent_work_trees() {
        let dir = tempfile::tempdir().unwrap();
        let kept = |n: usize| KeptIndex {
            dir: dir.path().to_path_buf(),
            key: format!("{n:032x}"),
        };
        let set_age = |path: &Path, seconds_ago: u64| {
            let at = std::time::SystemTime::now() - std::time::Duration::from_secs(seconds_ago);
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(at)
                .unwrap();
        };
        let total = KEPT_INDEXES + 2;
        let index = dir.path().join("an-index");
        std::fs::write(&index, [7u8; 40]).unwrap();
        for n in 0..total {
            kept(n).store(b"", &index, 20, &[]);
            kept(n).store(b"nested", &index, 20, &[]);
            // Work tree 0 is the oldest.
            for part in [&b""[..], b"nested"] {
                set_age(&kept(n).private_list(part), 100 * (total - n) as u64);
            }
        }
        let stale = dir.path().join(format!("{:032x}.index.abc.tmp", 0));
        std::fs::write(&stale, "x").unwrap();
        set_age(&stale, 7200);
        kept(total - 1).prune();
        for n in 0..total {
            let files =
                [&b""[..], b"nested"].map(|part| [kept(n).part(part), kept(n).private_list(part)]);
            let there = files.iter().flatten().filter(|f| f.exists()).count();
            assert_eq!(there, if n >= 2 { 4 } else { 0 }, "work tree {n}");
        }
        assert!(!stale.exists());
    }

    #[test]
    fn only_known_values_of_the_settings_that_decide_a_files_content_are_copied() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        user_git(&ws, &["init", "-q"]);
        for (key, value) in [
            ("core.autocrlf", "Input"),
            ("core.eol", "evil\n[filter \"x\"]"),
            ("core.fileMode", "false"),
            ("core.hooksPath", "/tmp/hooks"),
        ] {
            user_git(&ws, &["config", key, value]);
        }
        let mut copied = copied_settings(Path::new("git"), &ws).unwrap();
        copied.sort();
        assert_eq!(
            copied,
            [
                ("core.autocrlf".to_owned(), "input".to_owned()),
                ("core.filemode".to_owned(), "false".to_owned()),
            ]
        );
    }

    #[test]
    fn the_repositories_git_add_refuses_are_read_from_its_errors() {
        let stderr = b"add 'a'\nerror: 's 3/' does not have a commit checked out\n\
            error: 'w/it's/' does not have a commit checked out\n\
            error: unable to index file 'x'\nfatal: adding files failed\n";
        assert_eq!(
            refused_repositories(stderr),
            [b"s 3".to_vec(), b"w/it's".to_vec()]
        );
        assert_eq!(below(b"", b"a/b"), Some(&b"a/b"[..]));
        assert_eq!(below(b"a", b"a/b"), Some(&b"b"[..]));
        assert_eq!(below(b"a", b"a"), Some(&b""[..]));
        assert_eq!(below(b"a", b"ab/c"), None);
        assert_eq!(join(b"", b"x"), b"x");
        assert_eq!(join(b"a/b", b"x"), b"a/b/x");
    }

    /// A workspace below the repository's top: `git add` names a refused repository by
    /// its path from the top; it is a part all the same, its path from the workspace.
    #[test]
    fn a_repository_without_a_commit_below_a_workspace_in_a_subdirectory_is_a_part() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ws = root.join("ws");
        let git = |at: &Path, args: &[&str]| {
            let out = Command::new("git")
                .current_dir(at)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        };
        git(&root, &["init", "-q"]);
        std::fs::create_dir_all(ws.join("bare")).unwrap();
        std::fs::write(ws.join("bare/x.c"), "x\n").unwrap();
        git(&ws.join("bare"), &["init", "-q"]);
        let repo = GitRepo::discover(&ws).unwrap();
        let snapshot = repo.snapshot().unwrap();
        let paths: Vec<(&[u8], Vec<&[u8]>)> = snapshot
            .nested
            .iter()
            .map(|p| {
                (
                    p.path.as_slice(),
                    p.entries.iter().map(|e| e.path.as_slice()).collect(),
                )
            })
            .collect();
        assert_eq!(paths, [(&b"bare"[..], vec![&b"x.c"[..]])]);
        assert!(snapshot.entries.is_empty(), "{:?}", snapshot.entries);
    }

    #[test]
    fn raw_and_numstat_records_are_read_apart_whatever_the_paths_hold() {
        let a = "1".repeat(40);
        let b = "2".repeat(40);
        let z = "0".repeat(40);
        // A path that looks like a raw header, one with a tab, a binary file's counts.
        let out = format!(
            ":100644 100644 {a} {b} M\0:odd\0:000000 120000 {z} {b} A\0x\ty\0\
             3\t1\t:odd\0-\t-\tx\ty\0"
        );
        let stat = parse_raw_numstat(out.as_bytes(), 20);
        let oid = |hex: &str| unhex(hex.as_bytes(), 20).unwrap();
        assert_eq!(
            stat.raw,
            [
                RawChange {
                    path: b":odd".to_vec(),
                    old_mode: 0o100644,
                    old_oid: oid(&a),
                    new_mode: 0o100644,
                    new_oid: oid(&b),
                },
                RawChange {
                    path: b"x\ty".to_vec(),
                    old_mode: 0,
                    old_oid: [0; 32],
                    new_mode: 0o120000,
                    new_oid: oid(&b),
                },
            ]
        );
        assert_eq!(
            stat.counts,
            [(b":odd".to_vec(), Some((3, 1))), (b"x\ty".to_vec(), None)]
        );
        assert_eq!(hex(&oid(&a)[..20]), a);
        assert_eq!(unhex(b"12", 20), None);
    }

    /// `cat-file --batch` output as git writes it: a blob whose content hashes to its
    /// name passes, a rewritten one, a missing one and a tree under a blob's name do not
    /// (SHA-1 and SHA-256, the ids `git hash-object` gives).
    #[test]
    fn a_blob_passes_only_when_its_content_hashes_to_its_name() {
        // `printf 'hello\n' | git hash-object --stdin` (and with `--object-format=sha256`).
        let sha1 = "ce013625030ba8dba906f756967f9e9ca394464a";
        let sha256 = "2cf8d83d9ee29543b34a87727421fdecb7e3f3a183d337639025de576db9ebb4";
        for (hash_len, name) in [(20, sha1), (32, sha256)] {
            let other = "a".repeat(2 * hash_len);
            let stream = format!(
                "{name} blob 6\nhello\n\n{name} blob 6\nHELLO\n\n{other} missing\n\
                 {name} tree 6\nhello\n\n"
            );
            let verdicts =
                check_batch(std::io::Cursor::new(stream.into_bytes()), hash_len).unwrap();
            let oid = |hex: &str| unhex(hex.as_bytes(), hash_len).unwrap();
            assert_eq!(
                verdicts,
                [
                    (oid(name), true),
                    (oid(name), false),
                    (oid(&other), false),
                    (oid(name), false),
                ],
                "{hash_len}"
            );
            // Cut short: an error, never a verdict.
            let cut = format!("{name} blob 6\nhel");
            assert!(check_batch(std::io::Cursor::new(cut.into_bytes()), hash_len).is_err());
        }
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
        std::fs::remove_file(root.path().join("a/b/HEAD")).unwrap();
        // A `.git` symlink that leads nowhere (the sandbox's placeholder) is none.
        std::os::unix::fs::symlink("/dev/null/coder-absent", root.path().join("a/.git")).unwrap();
        assert!(!git_could_find_a_repository(&deep));
        // A path that does not resolve: git decides.
        assert!(git_could_find_a_repository(&root.path().join("missing")));
    }
}
