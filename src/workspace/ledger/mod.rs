//! The change ledger: a snapshot of the workspace taken before the agent runs, compared
//! with one taken after, as the envelope's `changes` (and, asked for, `diff`).
//!
//! In a git work tree the snapshots are tree objects written through a private index
//! (see [`super::git`]): `git add -A` semantics, so `.gitignore` applies and the counts are
//! git's own (`diff-tree --numstat`). Which files changed is read from coder's own two
//! indexes; the counts and the diff read the repository's objects, so for each changed
//! file coder first checks that the blobs its indexes name hash to their ids, and that
//! the trees git compares name the same blobs: a file that fails keeps its place in the
//! list, without lines or diff, and a warning names it. Each repository nested in the
//! workspace (a gitlink to `git add -A`) is a part compared on its own (see
//! [`super::git::Part`]), its paths joined to the workspace's.
//!
//! Elsewhere they are bounded stat+hash scans (see [`super::scan`]), whose line counts
//! are exact for added and deleted files and count changed lines as a multiset for
//! modified ones (lines that only moved are not counted).
//! The "after" scan reuses the "before" entries of files whose stat data is unchanged, and
//! with a state directory the "before" reuses the last run's (the persistent cache of
//! [`super::scan_cache`]), so only changed files are read.
//!
//! The "before" may be taken while the run sets up its sandbox and starts the CLI
//! (`pipeline::snapshot`). So that the order of the two does not change the result, the
//! paths the sandbox made (`exclude`: placeholders for absent protected names) are left
//! out of both sides of the comparison, and [`Ledger::changed_since`] finds what changed
//! while the snapshot was under way after something of the run started (a plain walk from
//! its own stat data, a git snapshot by a look at what its index holds once `git add` is
//! done): those files are reported as modified (or deleted) whatever their content says.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::git::{GitRepo, Snapshot};
use super::ignored::IgnoredChanges;
use super::scan::{self, Caps, Key, Prior, Scan};
use super::scan_cache::CacheFile;

mod git_compare;
mod plain_compare;

use git_compare::git_changes;
use plain_compare::{Sides, plain_changes};

/// Files listed in `changes.files` at most (the totals count them all).
pub const MAX_LISTED: usize = 1000;
/// Bytes of `diff.unified` at most.
pub const DIFF_CAP: usize = 256 * 1024;

/// `"added" | "modified" | "deleted"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeStatus {
    Added,
    Modified,
    Deleted,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    pub status: ChangeStatus,
    pub lines_added: u64,
    pub lines_removed: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
    /// Where the file is now when the end-of-run guard moved it aside (a tool config or
    /// script the agent made: `pkg/.envrc.coder-quarantine-1`), relative to the
    /// workspace; `path` is the name the agent gave it, which no longer exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantined_to: Option<String>,
}

/// The envelope's `changes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    pub files: Vec<FileChange>,
    pub files_changed: u64,
    pub lines_added: u64,
    pub lines_removed: u64,
    /// The file list, or the scan itself, was cut at its cap.
    pub truncated: bool,
    /// What changed under the paths `.gitignore` ignores (a git workspace only: a plain
    /// walk has every file in `files`); absent when nothing did. Apart from `files`, whose
    /// counts are the project's content: build outputs would flood them (see
    /// [`super::ignored`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored: Option<IgnoredChanges>,
    /// What the envelope's `warnings` should say about these counts (not serialised
    /// here).
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// The changed paths past [`MAX_LISTED`], left out of `files` (not serialised): a
    /// `--scope` check reads them too (see [`Changes::paths`]).
    #[serde(skip)]
    pub unlisted: Vec<String>,
    /// Some of the workspace was not looked at (not serialised): the plain walk was cut
    /// at its file cap, or nested repositories were left out. What changed there is
    /// unknown, so no `--scope` check can vouch for the run.
    #[serde(skip)]
    pub unseen: bool,
}

impl Changes {
    fn from_list(mut list: Vec<FileChange>, scan_truncated: bool) -> Changes {
        list.sort_by(|a, b| a.path.cmp(&b.path));
        let mut changes = Changes {
            files_changed: list.len() as u64,
            lines_added: list.iter().map(|f| f.lines_added).sum(),
            lines_removed: list.iter().map(|f| f.lines_removed).sum(),
            truncated: scan_truncated || list.len() > MAX_LISTED,
            unlisted: list
                .iter()
                .skip(MAX_LISTED)
                .map(|f| f.path.clone())
                .collect(),
            unseen: scan_truncated,
            files: list,
            warnings: Vec::new(),
            ignored: None,
        };
        // Paths are reported as JSON strings: bytes that are not UTF-8 are shown as U+FFFD,
        // so two such names can look alike, and a --scope glob sees that spelling.
        let lossy = changes
            .files
            .iter()
            .map(|f| f.path.as_str())
            .chain(changes.unlisted.iter().map(String::as_str))
            .filter(|p| p.contains(char::REPLACEMENT_CHARACTER))
            .count();
        if lossy > 0 {
            changes.warnings.push(format!(
                "{lossy} changed path(s) are not valid UTF-8: `changes` shows their invalid bytes \
                 as U+FFFD (two such names can look alike, and --scope globs \
                 match that spelling)"
            ));
        }
        changes.files.truncate(MAX_LISTED);
        changes
    }

    /// Every changed path, for scope checks: the listed ones, then those past
    /// [`MAX_LISTED`] (round sixteen's review: an agent that changed a thousand paths
    /// inside the scope first had its change outside it left off the list, and unchecked).
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files
            .iter()
            .map(|f| f.path.as_str())
            .chain(self.unlisted.iter().map(String::as_str))
    }
}

/// The envelope's `diff` (`--return-diff`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffText {
    /// A unified diff, cut at [`DIFF_CAP`] bytes (at a line end) with a marker line.
    pub unified: String,
    /// The whole diff's size in bytes.
    pub bytes: u64,
    pub truncated: bool,
}

impl DiffText {
    fn new(mut kept: Vec<u8>, total: u64) -> DiffText {
        let truncated = total > kept.len() as u64;
        if truncated {
            if let Some(end) = kept.iter().rposition(|b| *b == b'\n') {
                kept.truncate(end + 1);
            }
            kept.extend_from_slice(
                format!("[diff truncated: {} of {total} bytes shown]\n", kept.len()).as_bytes(),
            );
        }
        DiffText {
            unified: String::from_utf8_lossy(&kept).into_owned(),
            bytes: total,
            truncated,
        }
    }
}

/// The "before" half of a ledger.
pub struct Ledger {
    workspace: PathBuf,
    before: Before,
    /// coder's own directories inside the workspace (its state directory, when the user
    /// put it there), relative to it: never the agent's changes, on either side.
    own: Vec<String>,
    /// Why the workspace's repository was not used, when coder's watcher stopped the git
    /// that reads its config ([`GitRepo::discover_in`]): said with the changes of the
    /// plain walk used instead.
    stopped: Option<String>,
    /// When the "before" began, by the coarse clock file times come from (see
    /// [`super::ignored`]): what changed under ignored paths since is the run's.
    started_ns: i128,
}

enum Before {
    Git {
        /// Boxed: it is large beside the other variants.
        repo: Box<GitRepo>,
        tree: Snapshot,
        /// Files `git add` may have read after the run's first process started (see
        /// [`Ledger::changed_since`]): their "before" is not known.
        unknown: std::collections::BTreeSet<Vec<u8>>,
    },
    Plain {
        scan: Arc<Scan>,
        key: Key,
        caps: Caps,
        /// Whether the "after" may reuse the "before" entries (the file system's times
        /// come from this kernel's clock).
        reuse: bool,
        cache: Option<Cache>,
        /// Files the walk saw changing after the run's first process started (see
        /// [`Ledger::changed_since`]): their "before" is not known.
        unknown: std::collections::BTreeSet<Vec<u8>>,
    },
    /// The snapshot failed; the reason goes into a warning.
    Failed(String),
}

/// The persistent cache of a plain workspace: written (in the background) once the caller
/// says the agent cannot reach it, removed when it could.
struct Cache {
    file: CacheFile,
    writer: Option<std::thread::JoinHandle<()>>,
    exposed: bool,
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if let Before::Plain {
            cache: Some(cache), ..
        } = &mut self.before
        {
            if let Some(writer) = cache.writer.take() {
                let _ = writer.join();
            }
            if cache.exposed {
                // Whatever the agent may have left there is not used by a later run.
                cache.file.remove();
            }
        }
    }
}

/// Why no ledger could be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot measure the workspace's changes: {0}")]
pub struct LedgerError(String);

/// [`GitRepo::snapshot_excluding`], its gits sharing one CPU budget
/// ([`super::git::SharedCpuBudget`]).
fn snapshot_sharing_cpu(
    repo: &GitRepo,
    exclude: &[String],
) -> Result<Snapshot, super::git::GitError> {
    let _cpu = super::git::SharedCpuBudget::start();
    repo.snapshot_excluding(exclude)
}

/// The "before" of a plain walk of `workspace`, with the persistent scan cache under
/// `state_dir` when given (see [`Ledger::keep_cache`]).
fn plain_before(workspace: &Path, caps: Caps, state_dir: Option<&Path>) -> Before {
    let canonical = std::fs::canonicalize(workspace).ok();
    let file = state_dir
        .zip(canonical.as_deref())
        .and_then(|(state, ws)| CacheFile::for_workspace(state, ws));
    // The cache first: the directories unchanged since it was written are not
    // listed again, their entries are the cache's (`scan::KeptDirs`).
    let loaded = file.as_ref().and_then(CacheFile::load);
    crate::phases::mark("ledger.cache_loaded");
    let listed = scan::list_kept(workspace, &caps, loaded.as_ref().map(|loaded| &loaded.scan));
    let (key, scan) = match loaded {
        Some(loaded) => {
            let mut prior = Prior::Owned(loaded.scan);
            let scan = scan::finish(listed, workspace, &caps, &loaded.key, Some(&mut prior));
            // What is left of the cache's entries (100k of them take a few ms
            // to free) is freed off the snapshot's path; inline if no thread.
            let _ = std::thread::Builder::new()
                .name("ledger-free".into())
                .spawn(move || drop(prior));
            (loaded.key, scan)
        }
        None => {
            let key = Key::random();
            let scan = scan::finish(listed, workspace, &caps, &key, None);
            (key, scan)
        }
    };
    Before::Plain {
        scan: Arc::new(scan),
        key,
        caps,
        reuse: canonical.is_some_and(|ws| super::scan_cache::local_clock(&ws)),
        cache: file.map(|file| Cache {
            file,
            writer: None,
            exposed: false,
        }),
        unknown: Default::default(),
    }
}

/// The coarse clock's tick at most (`HZ` 100).
const COARSE_TICK_NS: i128 = 10_000_000;

impl Ledger {
    /// Snapshots `workspace` now (blocking: a big tree takes a while; see BENCHMARKS.md).
    pub fn before(workspace: &Path) -> Ledger {
        Ledger::before_with(workspace, Caps::default())
    }

    pub fn before_with(workspace: &Path, caps: Caps) -> Ledger {
        Ledger::before_in(workspace, caps, None)
    }

    /// The same, with the persistent scan cache of a plain workspace kept under
    /// `state_dir` (see [`Ledger::keep_cache`]).
    pub fn before_cached(workspace: &Path, state_dir: &Path) -> Ledger {
        Ledger::before_in(workspace, Caps::default(), Some(state_dir))
    }

    pub fn before_in(workspace: &Path, caps: Caps, state_dir: Option<&Path>) -> Ledger {
        let started_ns = super::ignored::coarse_now_ns();
        // The scratch directory the user named too (`CODER_SCRATCH_DIR`): the CLI's home
        // of this run, with its login and its session, is made there meanwhile.
        let own: Vec<String> = state_dir
            .map(Path::to_path_buf)
            .into_iter()
            .chain(crate::config::scratch::given())
            .filter_map(|dir| inside(workspace, &dir))
            .collect();
        let (discovered, mut stopped) = match GitRepo::discover_in(workspace, state_dir) {
            Ok(repo) => (repo, None),
            Err(e) => (
                None,
                Some(format!(
                    "{e}; the changes are measured by a plain walk of the workspace instead"
                )),
            ),
        };
        let before = match discovered {
            Some(repo) => match snapshot_sharing_cpu(&repo, &own) {
                Ok(tree) => Before::Git {
                    repo: Box::new(repo),
                    tree,
                    unknown: Default::default(),
                },
                // coder's watcher stopped git on what the work tree holds (a FIFO, a read
                // past its budget, a `.gitignore` of endless patterns): what stopped it
                // stays for every later run, none of which would measure anything. The
                // plain walk reads no git file and has budgets of its own.
                Err(e) if e.was_killed() => {
                    stopped = Some(format!(
                        "{e}; the changes are measured by a plain walk of the workspace instead"
                    ));
                    plain_before(workspace, caps, state_dir)
                }
                Err(e) => Before::Failed(e.to_string()),
            },
            None => plain_before(workspace, caps, state_dir),
        };
        Ledger {
            workspace: workspace.to_path_buf(),
            before,
            own,
            stopped,
            started_ns,
        }
    }

    /// Where the persistent scan cache is (a plain workspace with a state directory).
    pub fn cache_path(&self) -> Option<&Path> {
        match &self.before {
            Before::Plain {
                cache: Some(cache), ..
            } => Some(cache.file.path()),
            _ => None,
        }
    }

    /// Once the run's sandbox is known: when the agent cannot reach the cache, write this
    /// run's "before" as the next run's cache (in the background); when it could
    /// (`exposed`), remove the cache now and again when the ledger is dropped, so that a
    /// key the agent may have read, or a cache it may have written, is never used.
    pub fn keep_cache(&mut self, exposed: bool) {
        let Before::Plain {
            scan,
            key,
            cache: Some(cache),
            ..
        } = &mut self.before
        else {
            return;
        };
        if exposed {
            cache.exposed = true;
            cache.file.remove();
            return;
        }
        if cache.writer.is_some() || (scan.read == 0 && !scan.truncated && scan.reused > 0) {
            // Nothing read means nothing the cache does not already say (a directory that
            // changed without any file changing is listed again on each run until a file
            // does: not worth a rewrite of the whole cache).
            return;
        }
        let (file, scan, key) = (cache.file.clone(), scan.clone(), key.clone());
        cache.writer = std::thread::Builder::new()
            .name("ledger-cache".into())
            .spawn(move || {
                let _ = file.store(&scan, &key);
            })
            .ok();
    }

    /// What the "before" snapshot saw changing at or after `since_ns` (ns since the epoch,
    /// the system clock: when the run's first process in the workspace started): such
    /// files are reported as changed from now on, whatever their content; directories
    /// that changed may hide deletions. `None` when nothing did. A plain walk knows it
    /// from its own stat data; a git snapshot looks again at what its index holds (see
    /// [`GitRepo::changed_since`]): call this right after the snapshot. When that look
    /// fails, the ledger fails too (its "before" cannot be vouched for).
    pub fn changed_since(&mut self, since_ns: i128) -> Option<scan::Changed> {
        // The walk of the ignored paths looks from then too (a tick earlier: file times
        // come from the coarse clock, at most a tick behind the one `since_ns` is read
        // by). From the snapshot's own start, it missed what the run's processes wrote
        // there before (round twenty's second review).
        self.started_ns = self.started_ns.min(since_ns - COARSE_TICK_NS);
        let changed = match &mut self.before {
            Before::Plain { scan, unknown, .. } => {
                let changed = scan.changed_since(since_ns);
                unknown.extend(changed.files.iter().cloned());
                changed
            }
            Before::Git { repo, unknown, .. } => match repo.changed_since(since_ns) {
                Ok(changed) => {
                    unknown.extend(changed.files.iter().cloned());
                    changed
                }
                Err(e) => {
                    self.before = Before::Failed(format!(
                        "cannot tell what changed while the snapshot was taken: {e}"
                    ));
                    return None;
                }
            },
            Before::Failed(_) => return None,
        };
        (changed != scan::Changed::default()).then_some(changed)
    }

    /// For measurements: files of the "before" scan reused from the cache, and read.
    pub fn scan_counts(&self) -> Option<(u64, u64)> {
        match &self.before {
            Before::Plain { scan, .. } => Some((scan.reused, scan.read)),
            _ => None,
        }
    }

    /// `"git"` or `"scan"`: how the snapshots are taken.
    pub fn method(&self) -> &'static str {
        match self.before {
            Before::Git { .. } => "git",
            _ => "scan",
        }
    }

    /// Compares the workspace now with the snapshot; with `diff`, also the unified diff.
    /// `exclude`: paths (relative to the workspace) that are not the agent's doing, such
    /// as the sandbox's placeholders for absent protected names.
    pub fn changes(
        &self,
        diff: bool,
        exclude: &[String],
    ) -> Result<(Changes, Option<DiffText>), LedgerError> {
        self.compare(diff, exclude, true)
    }

    /// [`Ledger::changes`] without the walk of the ignored paths (`ignored` stays `None`):
    /// for a look at the project's content alone, such as the weak-model fallback's
    /// trigger, which need not pay for that walk (see BENCHMARKS.md, round twenty).
    pub fn content_changes(&self, exclude: &[String]) -> Result<Changes, LedgerError> {
        self.compare(false, exclude, false)
            .map(|(changes, _)| changes)
    }

    fn compare(
        &self,
        diff: bool,
        exclude: &[String],
        with_ignored: bool,
    ) -> Result<(Changes, Option<DiffText>), LedgerError> {
        let with_own;
        let exclude = if self.own.is_empty() {
            exclude
        } else {
            with_own = [exclude, &self.own].concat();
            &with_own[..]
        };
        match &self.before {
            Before::Git {
                repo,
                tree,
                unknown,
            } => git_changes(
                repo,
                tree,
                unknown,
                diff,
                exclude,
                with_ignored.then_some((&self.workspace, self.started_ns)),
            ),
            Before::Plain {
                scan,
                key,
                caps,
                reuse,
                unknown,
                ..
            } => {
                let mut prior = Prior::Borrowed(scan);
                let prior = reuse.then_some(&mut prior);
                let after = scan::scan(&self.workspace, caps, key, prior);
                let sides = Sides {
                    before: scan,
                    after: &after,
                    unknown,
                    exclude,
                };
                let (mut changes, diff) = plain_changes(&sides, key, diff);
                changes.warnings.extend(self.stopped.clone());
                Ok((changes, diff))
            }
            Before::Failed(reason) => Err(LedgerError(reason.clone())),
        }
    }
}

/// What changed under the ignored paths of the workspace and of each nested part of
/// `after` since `started_ns` (see [`super::ignored`]): `None` when nothing did; a
/// warning when they could not be listed, or the walk was cut.
fn ignored_changes(
    repo: &GitRepo,
    after: &Snapshot,
    (workspace, started_ns): (&Path, i128),
    exclude: &[String],
) -> (Option<IgnoredChanges>, Option<String>) {
    let mut roots = Vec::new();
    let parts = std::iter::once(&b""[..]).chain(after.nested.iter().map(|p| p.path.as_slice()));
    for part in parts {
        match repo.ignored(part) {
            Ok(found) => roots.extend(found),
            Err(e) => {
                return (
                    None,
                    Some(format!(
                        "cannot list the workspace's ignored paths ({e}): what changed under \
                         them is not reported"
                    )),
                );
            }
        }
    }
    crate::phases::mark("ledger.ignored_listed");
    let found = super::ignored::changed_since(workspace, &roots, started_ns, exclude);
    crate::phases::mark("ledger.ignored_walked");
    let warning = found.truncated.then(|| {
        format!(
            "the walk of the workspace's ignored paths stopped at its cap ({} entries or {} \
             s): `changes.ignored` may miss some",
            super::ignored::MAX_ENTRIES,
            super::ignored::DEADLINE.as_secs()
        )
    });
    let none = found.count == 0 && !found.truncated;
    ((!none).then_some(found), warning)
}

/// Whether `path` is one of `exclude` (paths relative to the workspace) or below one.
fn excluded(path: &[u8], exclude: &[String]) -> bool {
    exclude.iter().any(|x| {
        let x = x.as_bytes();
        path == x || (path.starts_with(x) && path.get(x.len()) == Some(&b'/'))
    })
}

/// `dir` relative to `workspace` when it lies inside it (both resolved), else `None`.
fn inside(workspace: &Path, dir: &Path) -> Option<String> {
    let workspace = std::fs::canonicalize(workspace).ok()?;
    // Not made yet (the scratch directory is made while the snapshot is taken): its parent.
    let dir = std::fs::canonicalize(dir).ok().or_else(|| {
        let parent = std::fs::canonicalize(dir.parent()?).ok()?;
        Some(parent.join(dir.file_name()?))
    })?;
    let relative = dir.strip_prefix(&workspace).ok()?;
    (!relative.as_os_str().is_empty()).then(|| relative.to_string_lossy().into_owned())
}

/// For messages: a path of the workspace as text.
pub fn display(path: &Path) -> String {
    String::from_utf8_lossy(path.as_os_str().as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The user's `git ARGS` in `at`, with a fixed identity and no global config; its
    /// trimmed stdout (the test fails if git does).
    fn user_git(at: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(at)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    #[test]
    fn index_changes_walks_both_indexes_stages_included() {
        use crate::workspace::git_index::Entry;
        let entry = |path: &str, stage: u8, oid: u8| Entry {
            path: path.as_bytes().to_vec(),
            stage,
            mode: 0o100644,
            oid: [oid; 32],
        };
        let snapshot = |entries: Vec<Entry>| entries;
        let before = snapshot(vec![
            entry("a", 0, 1),
            entry("c", 1, 1),
            entry("c", 2, 2),
            entry("c", 3, 3),
            entry("d", 0, 4),
            entry("e", 0, 5),
            entry("x/y", 0, 6),
        ]);
        let after = snapshot(vec![
            entry("a", 0, 9),
            entry("b", 0, 1),
            entry("c", 0, 7),
            entry("e", 0, 5),
            entry("x/y", 0, 8),
        ]);
        let changed = index_changes(&before, &after, &["x".to_owned()]);
        let changed: Vec<(char, &str)> = changed
            .iter()
            .map(|(l, p)| (char::from(*l), std::str::from_utf8(p).unwrap()))
            .collect();
        assert_eq!(changed, [('M', "a"), ('A', "b"), ('M', "c"), ('D', "d")]);
    }

    use super::git_compare::index_changes;
    use super::plain_compare::below_any;
    use super::*;

    /// A directory the plain walk does not go into (here: nested deeper than it walks;
    /// one made unreadable is attacked through the binary, as uid 65534, in
    /// `sandbox_round20b_review`): a warning names it, the changes are unseen, and what it
    /// held is neither deleted nor added; one only the "before" missed has its files
    /// listed as modified.
    #[test]
    fn a_directory_the_walk_does_not_go_into_is_named_and_its_files_not_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut deep = root.join("d");
        for _ in 0..scan::MAX_DEPTH {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(root.join("keep.txt"), "same\n").unwrap();
        // Below the walk's depth: unseen on both sides.
        std::fs::write(deep.join("old.txt"), "old\n").unwrap();
        let ledger = Ledger::before(root);
        std::fs::write(deep.join("new.sh"), "evil\n").unwrap();
        std::fs::remove_file(deep.join("old.txt")).unwrap();
        let (changes, _) = ledger.changes(false, &[]).unwrap();
        assert_eq!(changes.paths().count(), 0, "{changes:?}");
        assert!(changes.unseen);
        let said = changes.warnings.join("\n");
        assert!(said.contains("nested deeper than 256"), "{said}");
        assert!(said.contains("d/d/d/"), "{said}");
        // The control: the same tree walked whole shows no warning.
        std::fs::remove_dir_all(root.join("d")).unwrap();
        let ledger = Ledger::before(root);
        let (changes, _) = ledger.changes(false, &[]).unwrap();
        assert!(
            !changes.unseen && changes.warnings.is_empty(),
            "{changes:?}"
        );
    }

    #[test]
    fn below_any_reads_ancestors_only() {
        let dirs: std::collections::BTreeSet<&[u8]> = [&b"src"[..], b"a/b"].into();
        assert!(below_any(&dirs, b"src/x"));
        assert!(below_any(&dirs, b"src/y/z"));
        assert!(below_any(&dirs, b"a/b/c"));
        assert!(!below_any(&dirs, b"src"));
        assert!(!below_any(&dirs, b"srcx/y"));
        assert!(!below_any(&dirs, b"a/bc"));
        assert!(!below_any(&dirs, b"a/x"));
        let root: std::collections::BTreeSet<&[u8]> = [&b""[..]].into();
        assert!(below_any(&root, b"anything"));
        assert!(!below_any(&Default::default(), b"x/y"));
    }

    /// The sandbox's placeholders may be made while the "before" is taken (it runs beside
    /// the sandbox's setup): left out of both sides, they never show as changes.
    #[test]
    fn excluded_paths_are_left_out_of_both_sides() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep.txt"), "same\n").unwrap();
        std::os::unix::fs::symlink("/dev/null/coder-absent", root.join(".envrc")).unwrap();
        let ledger = Ledger::before(root);
        assert_eq!(ledger.method(), "scan");
        std::fs::remove_file(root.join(".envrc")).unwrap();
        std::fs::write(root.join("keep.txt"), "other\n").unwrap();
        let (changes, _) = ledger.changes(false, &[".envrc".to_owned()]).unwrap();
        let paths: Vec<_> = changes.paths().collect();
        assert_eq!(paths, ["keep.txt"]);
    }

    /// A git snapshot's net: what its index holds (tracked files and the untracked ones
    /// `git add` picked up, within the workspace, not the ignored ones) and changed after
    /// the run's first process started is reported as changed, with the directories above
    /// (the user's index's too: `gone.txt`, deleted, still names its directory).
    #[test]
    fn a_git_snapshots_files_changed_after_the_start_are_reported_whatever_their_content() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::create_dir_all(ws.join("old")).unwrap();
        std::fs::write(root.join("outside.txt"), "x\n").unwrap();
        std::fs::write(ws.join("sub/keep.txt"), "old\n").unwrap();
        std::fs::write(ws.join("old/gone.txt"), "old\n").unwrap();
        std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
        let git = |args: &[&str]| user_git(root, args);
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-qm", "start"]);
        std::fs::remove_file(ws.join("old/gone.txt")).unwrap();
        std::fs::write(ws.join("made.txt"), "made\n").unwrap();
        std::fs::write(ws.join("skip.log"), "ignored\n").unwrap();
        let mut ledger = Ledger::before(&ws);
        assert_eq!(ledger.method(), "git");
        let since = scan::now_ns() + 1_000_000_000;
        assert_eq!(
            ledger.changed_since(since),
            None,
            "nothing changed since then"
        );
        let since = scan::now_ns() - 1_000_000_000;
        let changed = ledger.changed_since(since).unwrap();
        assert_eq!(
            changed.files,
            [
                b".gitignore".to_vec(),
                b"made.txt".to_vec(),
                b"sub/keep.txt".to_vec()
            ]
        );
        assert_eq!(
            changed.dirs,
            [b"".to_vec(), b"old".to_vec(), b"sub".to_vec()]
        );
        // Unchanged since the snapshot, all the same: modified, no lines counted.
        let (changes, _) = ledger.changes(false, &[".gitignore".to_owned()]).unwrap();
        let summary: Vec<_> = changes
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.status, f.lines_added, f.binary))
            .collect();
        assert_eq!(
            summary,
            [
                ("made.txt", ChangeStatus::Modified, 0, false),
                ("sub/keep.txt", ChangeStatus::Modified, 0, false),
            ]
        );
    }

    /// The "before" blob of an edited file, rewritten in `.git/objects` to hold the edit's
    /// content: the file is listed, its diff and line counts are left out, and a warning
    /// names it; another file's diff is still shown.
    #[test]
    fn a_rewritten_before_blob_leaves_that_files_diff_out_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let git = |args: &[&str]| user_git(ws, args);
        git(&["init", "-q"]);
        std::fs::write(ws.join("a.txt"), "hello\n").unwrap();
        std::fs::write(ws.join("b.txt"), "one\n").unwrap();
        git(&["add", "-A"]);
        git(&["commit", "-qm", "init"]);
        let ledger = Ledger::before(ws);
        assert_eq!(ledger.method(), "git");
        std::fs::write(ws.join("a.txt"), "evil\n").unwrap();
        std::fs::write(ws.join("b.txt"), "two\n").unwrap();
        let old = git(&["rev-parse", "HEAD:a.txt"]);
        let new = git(&["hash-object", "-w", "a.txt"]);
        let object = |id: &str| ws.join(format!(".git/objects/{}/{}", &id[..2], &id[2..]));
        let forged = object(&old);
        let mut perms = std::fs::metadata(&forged).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
        std::fs::set_permissions(&forged, perms).unwrap();
        std::fs::copy(object(&new), &forged).unwrap();
        let (changes, diff) = ledger.changes(true, &[]).unwrap();
        assert_eq!(
            summary(&changes),
            [
                ("a.txt", ChangeStatus::Modified, 0, 0),
                ("b.txt", ChangeStatus::Modified, 1, 1),
            ]
        );
        let diff = diff.unwrap().unified;
        assert!(!diff.contains("a.txt"), "{diff}");
        assert!(diff.contains("+two\n"), "{diff}");
        assert_eq!(changes.warnings.len(), 1, "{:?}", changes.warnings);
        assert!(
            changes.warnings[0].ends_with(": a.txt"),
            "{:?}",
            changes.warnings
        );
    }

    /// Repositories nested in the workspace: one committed before the run (a gitlink to
    /// the workspace's `git add -A`), one inside it, one made during the run with a
    /// commit and one without (which `git add` refuses): an edit in each is listed with
    /// its path from the workspace, counted and in the diff; what a nested repository's
    /// config says runs nothing (coder's git never reads it).
    #[test]
    fn edits_inside_nested_repositories_are_in_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let git = user_git;
        let repo_with = |at: &Path, file: &str, commit: bool| {
            std::fs::create_dir_all(at).unwrap();
            std::fs::write(at.join(file), "one\n").unwrap();
            git(at, &["init", "-q"]);
            if commit {
                git(at, &["add", "-A"]);
                git(at, &["commit", "-qm", "c"]);
            }
        };
        git(ws, &["init", "-q"]);
        std::fs::write(ws.join("top.txt"), "top\n").unwrap();
        repo_with(&ws.join("sub/deep"), "inner.c", true);
        repo_with(&ws.join("sub"), "lib.c", true);
        repo_with(&ws.join("bare"), "x.c", false);
        // A submodule: its `.git` a file naming `.git/modules/module`.
        let upstream = tempfile::tempdir().unwrap();
        repo_with(upstream.path(), "m.c", true);
        let url = upstream.path().to_str().unwrap();
        git(
            ws,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                url,
                "module",
            ],
        );
        assert!(std::fs::metadata(ws.join("module/.git")).unwrap().is_file());
        git(ws, &["add", "-A", "top.txt", "sub"]);
        git(ws, &["commit", "-qm", "top"]);
        // The nested repository's own index seeds its part's (a stat cache): an entry it
        // marks "assume unchanged" is looked at all the same.
        git(
            &ws.join("sub"),
            &["update-index", "--assume-unchanged", "lib.c"],
        );
        let ledger = Ledger::before(ws);
        assert_eq!(ledger.method(), "git");
        // The agent's run.
        let marker = ws.join("ran");
        std::fs::write(
            ws.join("sub/.git/config"),
            format!(
                "[core]\n\tfsmonitor = \"touch '{}'\"\n[filter \"f\"]\n\tclean = \"touch '{}'\"\n",
                marker.display(),
                marker.display()
            ),
        )
        .unwrap();
        std::fs::write(ws.join("sub/.gitattributes"), "*.c filter=f\n").unwrap();
        std::fs::write(ws.join("sub/lib.c"), "one\ntwo\n").unwrap();
        std::fs::write(ws.join("sub/deep/inner.c"), "uno\n").unwrap();
        std::fs::write(ws.join("bare/x.c"), "one\nmore\n").unwrap();
        std::fs::write(ws.join("module/m.c"), "").unwrap();
        repo_with(&ws.join("made"), "new.c", true);
        repo_with(&ws.join("made-bare"), "new.c", false);
        let (changes, diff) = ledger.changes(true, &[]).unwrap();
        assert!(!marker.exists(), "a nested repository's config ran");
        assert_eq!(
            summary(&changes),
            [
                ("bare/x.c", ChangeStatus::Modified, 1, 0),
                // The gitlink: git counts its `Subproject commit` line.
                ("made", ChangeStatus::Added, 1, 0),
                ("made-bare/new.c", ChangeStatus::Added, 1, 0),
                ("made/new.c", ChangeStatus::Added, 1, 0),
                ("module/m.c", ChangeStatus::Modified, 0, 1),
                ("sub/.gitattributes", ChangeStatus::Added, 1, 0),
                ("sub/deep/inner.c", ChangeStatus::Modified, 1, 1),
                ("sub/lib.c", ChangeStatus::Modified, 1, 0),
            ],
            "{:?}",
            changes.warnings
        );
        assert!(changes.warnings.is_empty(), "{:?}", changes.warnings);
        let diff = diff.unwrap().unified;
        assert!(diff.contains("+++ b/sub/lib.c\n"), "{diff}");
        assert!(diff.contains("+two\n"), "{diff}");
        assert!(diff.contains("+++ b/sub/deep/inner.c\n"), "{diff}");
        assert!(diff.contains("+++ b/made-bare/new.c\n"), "{diff}");
    }

    /// A nested repository's own index seeds its part only at the "before" snapshot: one
    /// the agent made during the run, whose index names other content for its file than
    /// the file holds (stat data matching), is read for what the file holds.
    #[test]
    fn a_repository_made_during_the_run_is_read_not_taken_from_its_index() {
        use sha1::Digest;
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let git = user_git;
        git(ws, &["init", "-q"]);
        std::fs::write(ws.join("top.txt"), "top\n").unwrap();
        let ledger = Ledger::before(ws);
        // The agent's run: a repository whose only file holds `evil`, its index saying it
        // is empty (the empty blob, written: the diff's check finds it).
        let made = ws.join("made");
        std::fs::create_dir(&made).unwrap();
        git(&made, &["init", "-q"]);
        let benign = git(&made, &["hash-object", "-w", "--stdin"]);
        std::fs::write(made.join("x.c"), "evil\n").unwrap();
        // Well in the past: not "racily clean", git trusts the entry's stat data.
        std::fs::File::options()
            .write(true)
            .open(made.join("x.c"))
            .unwrap()
            .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000))
            .unwrap();
        git(&made, &["add", "x.c"]);
        git(&made, &["commit", "-qm", "c"]);
        let index = made.join(".git/index");
        let mut bytes = std::fs::read(&index).unwrap();
        // One entry: the 12-byte header, 40 bytes of stat data, then its object id.
        let empty_blob = git(&made, &["hash-object", "--stdin"]);
        assert_eq!(benign, empty_blob);
        let id: Vec<u8> = (0..20)
            .map(|i| u8::from_str_radix(&benign[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        bytes[52..72].copy_from_slice(&id);
        let body = bytes.len() - 20;
        let sum = sha1::Sha1::digest(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum);
        std::fs::write(&index, &bytes).unwrap();
        assert_eq!(
            git(&made, &["diff", "--stat"]),
            "",
            "git takes the index's word"
        );
        let (changes, diff) = ledger.changes(true, &[]).unwrap();
        let diff = diff.unwrap().unified;
        assert!(
            changes.paths().any(|p| p == "made/x.c"),
            "{:?}",
            summary(&changes)
        );
        assert!(diff.contains("+evil\n"), "{diff}");
    }

    /// Gitlinks without a repository behind them (a submodule never initialised: an empty
    /// directory; one whose directory is gone) are parts with nothing in them: no change,
    /// no warning.
    #[test]
    fn a_gitlink_without_its_repository_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let git = |args: &[&str]| user_git(ws, args);
        git(&["init", "-q"]);
        let commit = "1".repeat(40);
        for name in ["empty", "gone"] {
            git(&[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{commit},{name}"),
            ]);
        }
        std::fs::create_dir(ws.join("empty")).unwrap();
        std::fs::write(ws.join("a.txt"), "a\n").unwrap();
        let ledger = Ledger::before(ws);
        assert_eq!(ledger.method(), "git");
        std::fs::write(ws.join("a.txt"), "b\n").unwrap();
        let (changes, _) = ledger.changes(false, &[]).unwrap();
        assert_eq!(
            summary(&changes),
            [("a.txt", ChangeStatus::Modified, 1, 1)],
            "{:?}",
            changes.warnings
        );
        assert!(changes.warnings.is_empty(), "{:?}", changes.warnings);
    }

    /// What the walk saw changing after the run's first process started is reported as
    /// changed (its "before" is not known), and named.
    #[test]
    fn a_file_changed_after_the_start_is_reported_whatever_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("old.txt"), "old\n").unwrap();
        let since = scan::now_ns() + 1_000_000_000;
        let mut ledger = Ledger::before(root);
        assert_eq!(
            ledger.changed_since(since),
            None,
            "nothing changed since then"
        );
        let since = scan::now_ns() - 1_000_000_000;
        let changed = ledger.changed_since(since).unwrap();
        assert_eq!(changed.files, [b"old.txt".to_vec()]);
        assert_eq!(changed.dirs, [b"".to_vec()]);
        let (changes, _) = ledger.changes(false, &[]).unwrap();
        let listed: Vec<_> = changes
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.status))
            .collect();
        assert_eq!(listed, [("old.txt", ChangeStatus::Modified)]);
    }

    #[test]
    fn a_plain_ledger_sees_added_modified_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep.txt"), "same\n").unwrap();
        std::fs::write(root.join("edit.txt"), "a\nb\nc\n").unwrap();
        std::fs::write(root.join("gone.txt"), "1\n2\n").unwrap();
        let ledger = Ledger::before(root);
        assert_eq!(ledger.method(), "scan");
        std::fs::write(root.join("edit.txt"), "a\nB\nc\nd\n").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/new.bin"), b"\0\x01").unwrap();
        let (changes, diff) = ledger.changes(true, &[]).unwrap();
        let summary: Vec<_> = changes
            .files
            .iter()
            .map(|f| {
                (
                    f.path.as_str(),
                    f.status,
                    f.lines_added,
                    f.lines_removed,
                    f.binary,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("edit.txt", ChangeStatus::Modified, 2, 1, false),
                ("gone.txt", ChangeStatus::Deleted, 0, 2, false),
                ("sub/new.bin", ChangeStatus::Added, 0, 0, true),
            ]
        );
        assert_eq!(
            (
                changes.files_changed,
                changes.lines_added,
                changes.lines_removed
            ),
            (3, 2, 3)
        );
        let diff = diff.unwrap();
        assert!(diff.unified.contains("+B\n"), "{}", diff.unified);
        assert!(
            diff.unified
                .contains("Binary files /dev/null and b/sub/new.bin differ")
        );
        assert!(!diff.truncated);
    }

    /// Waits (bounded) until every file under `root` is older than a scan starting now by
    /// more than the racy margin, so the cache may trust them.
    fn wait_until_settled(root: &Path) {
        use std::os::unix::fs::MetadataExt;
        let newest = std::fs::read_dir(root)
            .unwrap()
            .map(|e| {
                let m = e.unwrap().metadata().unwrap();
                i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec())
            })
            .max()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while scan::now_ns() <= newest + scan::RACY_MARGIN_NS + 50_000_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the clock did not move"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn summary(changes: &Changes) -> Vec<(&str, ChangeStatus, u64, u64)> {
        changes
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.status, f.lines_added, f.lines_removed))
            .collect()
    }

    #[test]
    fn the_cache_reuses_unchanged_files_and_sees_a_change_behind_restored_times() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let state = dir.path().join("state");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::write(ws.join("b.txt"), "keep\nme\n").unwrap();
        std::fs::write(ws.join("c.bin"), b"\0\x01").unwrap();
        wait_until_settled(&ws);
        let mut first = Ledger::before_cached(&ws, &state);
        assert_eq!(first.scan_counts(), Some((0, 3)));
        first.keep_cache(false);
        drop(first);

        // Edited at once, same size, the modification time put back (`touch -d`).
        let b = ws.join("b.txt");
        let mtime = std::fs::metadata(&b).unwrap().modified().unwrap();
        std::fs::write(&b, "kept\nme\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&b)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(std::fs::metadata(&b).unwrap().modified().unwrap(), mtime);

        let second = Ledger::before_cached(&ws, &state);
        assert_eq!(second.scan_counts(), Some((2, 1)));
        std::fs::write(&b, "kept\nme\nnow\n").unwrap();
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        let (changes, diff) = second.changes(true, &[]).unwrap();
        assert_eq!(
            summary(&changes),
            vec![
                ("a.txt", ChangeStatus::Modified, 0, 1),
                ("b.txt", ChangeStatus::Modified, 1, 0),
            ]
        );
        let diff = diff.unwrap().unified;
        assert!(diff.contains("-kept\n-me\n+kept\n+me\n+now\n"), "{diff}");
        assert!(diff.contains("-two\n"), "{diff}");
    }

    #[test]
    fn a_cache_the_agent_could_reach_is_removed_and_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let state = dir.path().join("state");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        let mut first = Ledger::before_cached(&ws, &state);
        first.keep_cache(false);
        let path = first.cache_path().unwrap().to_path_buf();
        drop(first);
        assert!(path.exists());
        let mut second = Ledger::before_cached(&ws, &state);
        second.keep_cache(true);
        assert!(!path.exists());
        // What the agent writes there meanwhile is gone when the run ends.
        std::fs::copy(dir.path().join("ws/a.txt"), &path).unwrap();
        drop(second);
        assert!(!path.exists());
    }

    #[test]
    fn a_cut_diff_says_so() {
        let diff = DiffText::new(b"line 1\nline 2\nli".to_vec(), 1000);
        assert!(diff.truncated);
        assert_eq!(diff.bytes, 1000);
        assert!(
            diff.unified
                .ends_with("line 2\n[diff truncated: 14 of 1000 bytes shown]\n")
        );
    }
}
