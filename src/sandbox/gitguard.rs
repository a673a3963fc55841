//! The end-of-run git guard: after the last sandboxed process of a run is gone, every git
//! dir in the writable trees that was not held read-only for the whole run is made inert,
//! so the user's own `git` (a shell prompt, an IDE that opens nested repositories, a plain
//! `git status` that recurses into a new gitlink) runs nothing the agent chose.
//!
//! Why at the end, not during the run: the start-of-run scan ([`super::scan`]) can only
//! guard the repositories that exist; a repository the agent makes (`git init sub`, a new
//! submodule in `.git/modules/`, a `git worktree add`, a bare repo anywhere) has the
//! agent's config and hooks, and git reaches them from outside in many ways (gitlinks,
//! nested-repo discovery, `.git` files, `commondir`, bare-repo discovery). The run's PID
//! namespace is dead when this runs (the agent's tree, and the `--verify` and repair runs
//! after it), so nothing races it.
//!
//! What counts as a git dir is git's own test, over-approximated: a directory holding
//! `HEAD` and either `commondir` or both `objects` and `refs` (any file type). Every
//! directory of the tree is looked at, inside `.git` dirs too, without following a
//! symlink. A git dir whose device and inode the start-of-run scan guarded is the user's
//! and left alone; any other one is *neutralised*:
//!
//! * `config` and `config.worktree` keep only an allow-list of inert keys
//!   ([`super::gitconfig`]): when anything was dropped (or the file is not a plain file)
//!   the original moves to `coder-quarantine-N/` inside the git dir, a name git never
//!   reads, and coder writes the filtered file in its place;
//! * `hooks/` entries that are not `*.sample` move there too (a `hooks` that is not a
//!   plain directory moves whole);
//! * `commondir` is followed inside the same tree (no symlink, nothing outside), one level
//!   as git reads it, and the common dir it names is neutralised too; one that leads
//!   anywhere else is moved aside (git then finds no repository there);
//! * in every git dir, the user's too, an operation left in progress is defused: `exec`
//!   lines of its to-do list commented out, a merge strategy that is not git's own (a
//!   `git merge-<name>` git would look up, or run by path) moved aside.
//!
//! A `.git` file or symlink the start scan did not know is resolved the same way: a target
//! inside the tree is a directory this walk visits anyway; any other target (outside the
//! tree, through a symlink) gets the `.git` entry renamed to `.git.coder-quarantine-N`.
//! Nothing is ever read or written outside the tree, and no grant is widened.
//!
//! The walk is bounded (depth, entries). When it cannot finish (a cap, an unreadable
//! directory coder cannot fix, a failed move) the report says where, and the run fails
//! closed: the caller must treat the workspace as unchecked. What it did not reach stays,
//! so its record is kept in the runs directory ([`keep_stopped`]) and every later run
//! checks those trees again before its own scan would take what is there for the user's,
//! refusing to start while that stops short too ([`finish_stopped_guards`]).
//!
//! The same walk guards the protected tool configs ([`ToolGuard`]): a name matching a
//! protected glob of its tree (`**/.claude/**`, `**/.envrc`, `**/lefthook.yml`, ...) that the
//! start scan did not hold read-only appeared (or changed) during the run, since the scan
//! held every one that existed; it is renamed to `NAME.coder-quarantine-N` beside itself,
//! a name no such program reads, and reported. Only the directories whose entries changed
//! since the scan are looked at ([`ScanListings`]): in an unchanged one every such name is
//! one the scan held. The start scan cannot hold names that do not exist yet everywhere
//! (it makes placeholders at a tree's root only), so a `pkg/.claude/settings.json` the
//! agent makes is caught here, once nothing of the run can write any more.
//!
//! A coder that is killed cannot run its guard; the policy leaves a record of what the guard
//! needs (the trees, the known git dirs) in the run's private directory, and the next
//! policy resolution runs the guard of every dead run it finds before pruning its directory
//! ([`finish_dead_runs`]).

use std::borrow::Cow;
use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use crate::config::run_dirs;
use globset::GlobSet;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat2};
use nix::sys::stat::{FileStat, Mode as FileMode, fstat, fstatat};
use serde::{Deserialize, Serialize};

use super::gitconfig;
use super::listing::{DirSummary, ScanListings, is_git_entry_name};
use super::scan::{
    ABSENT_TARGET, Kind, PROBE_CHILD, beneath, file_kind as kind_of, is_protected,
    list_dir_kinds as list, open_beneath,
};

/// Caps on the walk. Past one, the guard reports itself incomplete.
#[derive(Debug, Clone, Copy)]
pub struct GuardLimits {
    pub max_depth: usize,
    pub max_entries: usize,
}

impl Default for GuardLimits {
    fn default() -> Self {
        GuardLimits {
            max_depth: 256,
            max_entries: 4_000_000,
        }
    }
}

impl GuardLimits {
    /// The caps of a run's own guard: the defaults, or in a debug build the entry cap
    /// `CODER_TEST_GUARD_MAX_ENTRIES` names (TEST HOOK: a test cannot make four million
    /// entries). The next run's check of a guard that stopped uses the defaults.
    pub fn for_run() -> GuardLimits {
        #[cfg(debug_assertions)]
        if let Some(max_entries) = std::env::var("CODER_TEST_GUARD_MAX_ENTRIES")
            .ok()
            .and_then(|n| n.parse().ok())
        {
            return GuardLimits {
                max_entries,
                ..GuardLimits::default()
            };
        }
        GuardLimits::default()
    }
}

/// The largest config, `commondir` or `.git` file read; a bigger one is untrusted whole.
const MAX_FILE: u64 = 1 << 20;

/// One git dir (or `.git` entry, or protected tool config) the guard changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quarantined {
    /// The git dir, or the `.git` file or symlink, or the tool config.
    pub path: String,
    /// What was moved, relative to `path` (`config`, `hooks/pre-commit`, `.git`); for a
    /// tool config, its name.
    pub moved: Vec<String>,
    /// Where it went.
    pub to: String,
    /// Git metadata, or a protected tool config.
    pub kind: QuarantineKind,
    /// A `--worktree` run's checkout is removed after the guard: where this went is now
    /// `COMMIT:PATH` on the run's branch (`in_commit`), or gone with the checkout (`removed`).
    #[serde(flatten)]
    pub after_checkout: crate::workspace::worktree::AfterCheckout,
}

/// What the guard moved aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineKind {
    /// Config, hooks or operation state of a git dir, or a `.git` file or symlink.
    Git,
    /// A name matching a protected glob (`.claude/`, `.envrc`, `lefthook.yml`, ...) that
    /// appeared or changed during the run.
    ToolConfig,
    /// A script (or a directory of them) that a held script or the user's git config
    /// runs, absent at the start and made during the run. Reported as `tool_config` too
    /// (what callers have filtered on since the rule came); the warning says which.
    #[serde(rename = "tool_config")]
    MadeScript,
    /// A file held read-only that was replaced outside the sandbox during the run (by a
    /// rename), which freed it for the agent. Reported as `tool_config` too; the warning
    /// says which.
    #[serde(rename = "tool_config")]
    ReplacedHeld,
}

/// The protected tool configs of a run, as the end-of-run guard needs them: the globs of
/// every tree whose protected names the start scan held, and what it held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolGuard {
    pub trees: Vec<ToolTree>,
    /// Device and inode of every file and directory the scan held read-only (protected
    /// names and their placeholders, directories of secrets, git metadata): nothing below
    /// a held directory can have changed.
    pub held: Vec<(u64, u64)>,
    /// When the hold began (ns since the epoch; 0: not recorded, in an older coder's
    /// record): an entry made after it is not one the scan held, whatever its inode
    /// number. ext4 gives an entry made right after a removal the number just freed, so a
    /// held `.claude/` the user's branch switch removed and made again (which freed it of
    /// its read-only mount) passed for the held one (round thirty-two's second review).
    #[serde(default)]
    pub held_since_ns: i128,
}

/// One tree and its protected globs, relative to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolTree {
    #[serde(with = "super::bytes")]
    pub root: PathBuf,
    pub globs: Vec<String>,
    /// The globs name what held scripts would run if the agent made it (the absent
    /// scripts, the names Python imports at start), not protected tool configs: what the
    /// guard moves aside here is a [`QuarantineKind::MadeScript`].
    #[serde(default)]
    pub made_scripts: bool,
    /// `globs` as the start scan compiled them, reused by the end-of-run guard.
    #[serde(skip)]
    pub compiled: CompiledGlobs,
}

/// A [`ToolTree`]'s globs, compiled once a run: building a glob set compiles a regular
/// expression per glob (the defaults are case-insensitive, which rules out globset's
/// literal strategies), a millisecond or two of the run's serial path each time. Not
/// recorded: the guard of a dead run's record compiles them from the text. Equal to any
/// other: it is derived from `globs`.
#[derive(Debug, Clone, Default)]
pub struct CompiledGlobs(pub Option<std::sync::Arc<GlobSet>>);

impl PartialEq for CompiledGlobs {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for CompiledGlobs {}

/// [`ToolGuard`], compiled.
struct ToolMatch {
    trees: Vec<(PathBuf, std::sync::Arc<GlobSet>, QuarantineKind)>,
    held: HashSet<(u64, u64)>,
    held_since_ns: i128,
}

impl ToolMatch {
    fn new(tools: &ToolGuard) -> Result<ToolMatch, Stop> {
        let mut trees = Vec::new();
        for tree in &tools.trees {
            let set = match &tree.compiled.0 {
                Some(set) => set.clone(),
                None => std::sync::Arc::new(
                    super::scan::compile_globs(super::GlobList::Protect, &tree.globs)
                        .map_err(|e| e.to_string())?,
                ),
            };
            let kind = match tree.made_scripts {
                true => QuarantineKind::MadeScript,
                false => QuarantineKind::ToolConfig,
            };
            trees.push((tree.root.clone(), set, kind));
        }
        Ok(ToolMatch {
            trees,
            held: tools.held.iter().copied().collect(),
            held_since_ns: tools.held_since_ns,
        })
    }

    /// Whether the entry `name` of `dir` (`dir` itself when `name` is empty; `st`: its
    /// stat data) is one the start scan held: its device and inode, made before the hold
    /// began ([`ToolGuard::held_since_ns`]).
    fn holds(&self, dir: BorrowedFd<'_>, name: &OsStr, st: &FileStat) -> bool {
        self.held.contains(&(st.st_dev, st.st_ino)) && made_before(dir, name, self.held_since_ns)
    }

    fn active(&self) -> bool {
        !self.trees.is_empty()
    }

    /// Whether `path` matches a protected glob of a tree holding it (the name itself, or
    /// for a directory any name below it, as the start scan decides what it holds), and
    /// as what: a protected tool config before a made script.
    fn protected(&self, path: &Path, is_dir: bool) -> Option<QuarantineKind> {
        let kinds: Vec<QuarantineKind> = self
            .trees
            .iter()
            .filter(|(root, set, _)| {
                path.strip_prefix(root).is_ok_and(|rel| {
                    is_protected(set, rel) || (is_dir && is_protected(set, &rel.join(PROBE_CHILD)))
                })
            })
            .map(|(_, _, kind)| *kind)
            .collect();
        kinds
            .iter()
            .copied()
            .find(|kind| *kind == QuarantineKind::ToolConfig)
            .or(kinds.first().copied())
    }
}

/// What the guard did: `sandbox` in the envelope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GuardReport {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<Quarantined>,
    /// Set when the guard could not check every git dir: where and why. The workspace
    /// may then hold agent-made git config that runs commands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// Secrets masked for the run that were replaced outside the sandbox while it went
    /// on ([`note_replaced_secrets`]): the agent could read the new file. Said in the
    /// warnings only.
    #[serde(skip)]
    pub secrets_replaced: Vec<String>,
}

impl GuardReport {
    pub fn is_empty(&self) -> bool {
        self.quarantined.is_empty() && self.incomplete.is_none() && self.secrets_replaced.is_empty()
    }

    /// One line per finding, for `coder sandbox`'s stderr and warnings.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .quarantined
            .iter()
            .map(|q| match q.kind {
                QuarantineKind::Git => format!(
                    "git guard: in {}, moved {} (left by the sandboxed command) to {} so \
                     that git run outside the sandbox cannot execute it",
                    q.path,
                    q.moved.join(", "),
                    q.to
                ),
                QuarantineKind::ToolConfig => format!(
                    "tool-config guard: moved {} (a protected tool config that the \
                     sandboxed command made or changed) to {} so that the programs that read \
                     it outside the sandbox (Claude Code, editors, direnv, git and its hooks) \
                     cannot run what it says; check it before putting it back",
                    q.path, q.to
                ),
                QuarantineKind::ReplacedHeld => format!(
                    "held-file guard: moved {} to {}: it was replaced outside the sandbox \
                     during the run (an editor's save, sed -i), which lifted the sandbox's \
                     read-only hold on it, so the agent could have written the new file; \
                     your own change is in it: check it before putting it back",
                    q.path, q.to
                ),
                QuarantineKind::MadeScript => format!(
                    "tool-config guard: moved {} (a script your git commands or tool \
                     configs run, absent when the run started, that the sandboxed command \
                     made) to {} so that your next git command does not run it; check it \
                     before putting it back",
                    q.path, q.to
                ),
            })
            .collect();
        if let Some(why) = &self.incomplete {
            lines.push(format!(
                "git guard incomplete ({why}): repositories and tool configs in the \
                 workspace may hold commands the sandboxed agent planted; do not run git \
                 or open it in an editor or a Claude Code session before checking"
            ));
        }
        lines.extend(self.secrets_replaced.iter().map(|path| {
            format!(
                "secret guard: {path} was replaced outside the sandbox during the run (an \
                 editor's save, a tool that writes it by a rename), which lifted the mask \
                 that hid it from the sandboxed command: it could read the new one; treat \
                 what it holds as disclosed"
            )
        }));
        lines
    }
}

/// Notes every file masked as a secret (`masks`) that is no longer the file the start
/// scan masked: replaced by a rename outside the sandbox while the run went on (an
/// editor's save of `.env`), it took the mask on its place along (the kernel detaches a
/// mount whose place is deleted in another mount namespace), and the agent could read the
/// new one. Nothing can take that back; the warning tells the user which secret to treat
/// as disclosed. A file removed or renamed away is not noted: its mask went with it, or
/// nothing is there to read.
pub fn note_replaced_secrets(masks: &[super::scan::Mask], report: &mut GuardReport) {
    use std::os::unix::fs::MetadataExt;
    for mask in masks {
        if mask.kind != super::scan::MaskKind::Empty || mask.is_dir {
            continue;
        }
        let Ok(now) = std::fs::symlink_metadata(&mask.path) else {
            continue;
        };
        if (now.dev(), now.ino()) != (mask.dev, mask.ino) {
            report
                .secrets_replaced
                .push(mask.path.display().to_string());
        }
    }
}

/// Moves aside every file held read-only (`masks`, in the guarded `roots`) that is no
/// longer the file the start scan held: replaced by a rename while the run went on (`sed
/// -i`, an editor's save, `git config --file`, outside the sandbox), it took the read-only
/// mount on its place along (the kernel detaches a mount whose place is deleted in another
/// mount namespace), and the agent could write the new one: a held script the user's git
/// alias runs ran what the agent appended, and so did an include file in the git dir
/// (`include.path = extra.config`). The user's own edit goes aside with it; the warning
/// says where. A known git dir's (`known`) config is filtered instead
/// ([`Guard::replaced_while_held`]), a `.git` entry is the git guard's; tool configs were
/// moved already ([`Guard::tool_configs`]).
pub fn move_replaced_held_files(
    masks: &[super::scan::Mask],
    roots: &[PathBuf],
    known: &HashSet<(u64, u64)>,
    held_since_ns: i128,
    report: &mut GuardReport,
) {
    for mask in masks {
        if mask.kind != super::scan::MaskKind::ReadOnly || mask.is_dir {
            continue;
        }
        let Some(root) = roots.iter().find(|r| mask.path.starts_with(r)) else {
            continue;
        };
        let Ok(rel) = mask.path.strip_prefix(root) else {
            continue;
        };
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            continue;
        };
        let held = ((mask.dev, mask.ino), held_since_ns);
        match move_if_replaced(root, parent, name, held, known) {
            Ok(Some(to)) => report.quarantined.push(Quarantined {
                path: mask.path.display().to_string(),
                moved: vec![name.to_string_lossy().into_owned()],
                to: mask.path.with_file_name(&to).display().to_string(),
                kind: QuarantineKind::ReplacedHeld,
                after_checkout: Default::default(),
            }),
            Ok(None) | Err(Errno::ENOENT | Errno::ENOTDIR) => {}
            Err(e) => {
                report.incomplete.get_or_insert(format!(
                    "a held file replaced during the run, {}: {e}",
                    mask.path.display()
                ));
            }
        }
    }
}

/// `root/parent/name` moved aside when it is not the file `held` (device and inode) and
/// not the git guard's ([`the_git_guards`]): the name it went to.
fn move_if_replaced(
    root: &Path,
    parent: &Path,
    name: &OsStr,
    (held, held_since_ns): ((u64, u64), i128),
    known: &HashSet<(u64, u64)>,
) -> Result<Option<String>, Errno> {
    let top = nix::fcntl::open(root, dir_flags() | OFlag::O_NOFOLLOW, FileMode::empty())?;
    let dir = if parent.as_os_str().is_empty() {
        top
    } else {
        openat2(top.as_fd(), parent, beneath(dir_flags()))?
    };
    if the_git_guards(dir.as_fd(), name, known)? {
        return Ok(None);
    }
    let Some(st) = entry_stat(dir.as_fd(), &name.to_string_lossy())? else {
        return Ok(None);
    };
    let still_held =
        (st.st_dev, st.st_ino) == held && made_before(dir.as_fd(), name, held_since_ns);
    if still_held || kind_of(&st) == Kind::Dir {
        return Ok(None);
    }
    rename_aside(dir.as_fd(), name).map(Some)
}

/// Whether `name` in `dir` is the git guard's to check: a `.git` entry, or the `config`
/// or `config.worktree` of a git dir it knows (`known`), which it filters rather than
/// moves. Every other held file in a git dir (an include file, a `commondir`) is not.
fn the_git_guards(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    known: &HashSet<(u64, u64)>,
) -> Result<bool, Errno> {
    if name.as_bytes().eq_ignore_ascii_case(b".git") {
        return Ok(true);
    }
    if name != "config" && name != "config.worktree" {
        return Ok(false);
    }
    let st = fstat(dir)?;
    Ok(known.contains(&(st.st_dev, st.st_ino)))
}

/// Neutralise every git dir under `roots` whose (device, inode) is not in `known`, and
/// move aside every protected tool config of `tools` the start scan did not hold.
pub fn guard_trees(
    roots: &[PathBuf],
    known: &HashSet<(u64, u64)>,
    tools: &ToolGuard,
    listings: &ScanListings,
    limits: GuardLimits,
) -> GuardReport {
    let mut report = GuardReport::default();
    let tools = match ToolMatch::new(tools) {
        Ok(tools) => tools,
        Err(why) => {
            report.incomplete = Some(why);
            return report;
        }
    };
    for root in roots {
        if roots.iter().any(|r| r != root && root.starts_with(r)) {
            continue;
        }
        let mut guard = Guard {
            root,
            known,
            tools: &tools,
            listings,
            limits,
            entries: 0,
            seen: HashSet::new(),
            followed: HashSet::new(),
            report: &mut report,
        };
        if let Err(why) = guard.run() {
            report.incomplete.get_or_insert(why);
        }
    }
    report
}

/// The name, in a run's private directory, of what the git guard of that run needs: the
/// next run finds it there when coder was killed before its own guard ran.
const PENDING: &str = "git-guard.json";

/// How the lines of a dead run's guard start (in the next run's warnings).
pub const LATE_PREFIX: &str = "after an earlier run whose coder was killed: ";

/// How the lines of a stopped guard checked again start (in the next run's warnings).
pub const STOPPED_PREFIX: &str = "after an earlier run whose end-of-run guard stopped short: ";

/// The directory, in the runs directory, where the records of guards that stopped short
/// wait for a later run to check the trees again ([`keep_stopped`]).
const STOPPED_DIR: &str = "guards-stopped";

#[derive(Serialize, serde::Deserialize)]
struct PendingGuard {
    #[serde(with = "super::bytes::vec")]
    roots: Vec<PathBuf>,
    known: Vec<(u64, u64)>,
    #[serde(default)]
    tools: ToolGuard,
    /// Why the run's own guard stopped short ([`keep_stopped`]); `None` for the record of
    /// a run still under way.
    #[serde(default)]
    stopped: Option<String>,
    /// The trees looked at for new ways into the user's repositories, and since when
    /// ([`move_new_tops_aside`]).
    #[serde(default, with = "super::bytes::vec")]
    outside: Vec<PathBuf>,
    #[serde(default)]
    since_ns: i128,
    /// The device and inode of each of `roots` when the record was made, in their order
    /// (`None` where it could not be read; none at all in an older coder's record, then
    /// checked by path alone). A tree renamed away and an empty directory put at its path
    /// while a later run looked had the record checked against that decoy, found clean
    /// and dropped; the tree put back held what the dead run's agent left, which the next
    /// run's scan took for the user's (round twenty-one's review).
    #[serde(default)]
    root_ids: Vec<Option<(u64, u64)>>,
}

impl PendingGuard {
    fn of(policy: &super::Policy) -> PendingGuard {
        PendingGuard {
            roots: policy.guard_roots.clone(),
            known: policy.git_known.clone(),
            tools: policy.tool_guard.clone(),
            stopped: None,
            outside: policy.outside_roots.clone(),
            since_ns: policy.started_ns,
            root_ids: policy.guard_roots.iter().map(|r| id_of(r)).collect(),
        }
    }

    /// The first of the record's trees that is not at its path: gone, or another
    /// directory there than the one recorded ([`PendingGuard::root_ids`]).
    fn tree_not_there(&self) -> Option<&PathBuf> {
        (0..self.roots.len())
            .find(|i| !self.is_there(*i))
            .map(|i| &self.roots[i])
    }

    /// Whether the record's `i`th tree is at its path.
    fn is_there(&self, i: usize) -> bool {
        let root = &self.roots[i];
        let recorded = self.root_ids.get(i).copied().flatten();
        !is_gone(root) && recorded.is_none_or(|id| id_of(root) == Some(id))
    }

    /// Writes the record at `path`: made new and private, never through a symlink.
    fn write(&self, path: &Path) -> Result<(), super::SandboxError> {
        let text = serde_json::to_vec(self)
            .map_err(|e| super::SandboxError::io(format!("write {}", path.display()), e.into()))?;
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .and_then(|mut file| file.write_all(&text))
            .map_err(|e| super::SandboxError::io(format!("write {}", path.display()), e))
    }

    /// Guards the record's trees again, as a dead run's guard does (every directory
    /// listed: the run's scan listings are gone).
    /// A tree no longer there, or replaced by another directory at its path, is not
    /// walked (a temporary workspace removed since; the caller keeps the record of one
    /// that may come back), unless `strict`, when it stops the check
    /// ([`finish_stopped_guards`]).
    fn guard_again(&self, strict: bool) -> GuardReport {
        let known = self.known.iter().copied().collect();
        let roots: Vec<PathBuf> = (0..self.roots.len())
            .filter(|i| strict || self.is_there(*i))
            .map(|i| self.roots[i].clone())
            .collect();
        let mut report = guard_trees(
            &roots,
            &known,
            &self.tools,
            &ScanListings::default(),
            GuardLimits::default(),
        );
        move_new_tops_aside(
            &self.outside,
            &known,
            &roots,
            GuardLimits::default(),
            &mut report,
        );
        report
    }
}

/// Writes `policy`'s guard record into its run directory (coder's own, 0700, never granted
/// to the agent; removed with it after a normal end).
pub(crate) fn record_pending(policy: &super::Policy) -> Result<(), super::SandboxError> {
    if !policy.mode.is_confined()
        || (policy.guard_roots.is_empty() && policy.outside_roots.is_empty())
    {
        return Ok(());
    }
    // Made new and private, never through a symlink: where the agent can write the runs
    // directory (`--allow-tmp` with the state directory under `/tmp`) it can swap the run
    // directory for one of its own holding a symlink of this name, and coder would
    // overwrite whatever file that names.
    PendingGuard::of(policy).write(&policy.run_dir.join(PENDING))
}

/// Keeps `policy`'s guard record after its guard stopped short (`why`: a cap, a directory
/// it could not read), in the runs directory's [`STOPPED_DIR`], where it outlives the run
/// directory: what the guard did not reach (a `.git/config` with `core.fsmonitor`, a
/// `.claude/settings.json` hook the agent made) would otherwise be taken for the user's
/// by the next run's scan. The next run checks the trees again before its own scan
/// ([`finish_stopped_guards`]). Returns where the record is.
pub(crate) fn keep_stopped(
    policy: &super::Policy,
    why: &str,
) -> Result<PathBuf, super::SandboxError> {
    let Some(name) = policy.run_dir.file_name() else {
        return Err(super::SandboxError::io(
            format!("keep the guard record of {}", policy.run_dir.display()),
            std::io::ErrorKind::InvalidInput.into(),
        ));
    };
    let mut record = PendingGuard::of(policy);
    record.stopped = Some(why.to_owned());
    keep_record(&policy.records_dir, name, &record)
}

/// Writes `record`, of the run directory `name`, into `records`' [`STOPPED_DIR`]: on disk
/// (the state directory's `sandbox/`), where it outlives a reboot that empties a tmpfs
/// scratch place.
fn keep_record(
    records: &Path,
    name: &OsStr,
    record: &PendingGuard,
) -> Result<PathBuf, super::SandboxError> {
    let dir = records.join(STOPPED_DIR);
    use std::os::unix::fs::DirBuilderExt;
    let made = std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir);
    match made {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(super::SandboxError::io(
                format!("create {}", dir.display()),
                e,
            ));
        }
        _ => {}
    }
    let mut file = name.to_os_string();
    file.push(".json");
    let path = dir.join(file);
    match record.write(&path) {
        // Another run kept the same dead run's record first.
        Err(super::SandboxError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            Ok(path)
        }
        written => written.map(|()| path),
    }
}

/// Checks again the trees of every guard that stopped short ([`keep_stopped`]), before
/// this run's scan: a record whose check completes goes, with lines saying what it
/// moved. One whose check stops short too stays, and when one of its trees is or holds
/// or lies in one of `trees` (this run's workspace and `--write` trees, a confined run's)
/// the run is refused: its scan would take what the agent left for the user's.
pub(crate) fn finish_stopped_guards(
    runs_dir: &Path,
    trees: &[PathBuf],
) -> Result<Vec<String>, super::SandboxError> {
    let dir = runs_dir.join(STOPPED_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let Ok(dir_fd) = super::sys::open_nofollow_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut lines = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Ok(Some(text)) = read_small(dir_fd.as_fd(), &name) else {
            continue;
        };
        let Ok(record) = serde_json::from_slice::<PendingGuard>(&text) else {
            continue;
        };
        let earlier = record.stopped.clone().unwrap_or_default();
        // A tree gone from its path is not checked, and its record stays: the agent of
        // another run with a grant over its parent renamed it away while a later run
        // looked, which dropped the record unchecked, and back, and the next run in it
        // took what the stopped guard left for the user's (round twenty's review).
        if let Some(gone) = record.tree_not_there() {
            lines.push(format!(
                "{STOPPED_PREFIX}its tree {} is gone (or another directory is at its \
                 path); its record {} stays until the tree is back and checked (remove the \
                 record if the tree was deleted)",
                gone.display(),
                dir.join(&name).display()
            ));
            continue;
        }
        let report = record.guard_again(true);
        if let Some(now) = report.incomplete {
            let overlaps = record
                .roots
                .iter()
                .any(|r| trees.iter().any(|t| t.starts_with(r) || r.starts_with(t)));
            if overlaps {
                return Err(super::SandboxError::GuardStopped {
                    roots: record.roots,
                    earlier,
                    now,
                    record: dir.join(&name),
                });
            }
            continue;
        }
        lines.push(format!(
            "{STOPPED_PREFIX}it stopped ({earlier}) and left the workspace unchecked; \
             checked again before this run"
        ));
        lines.extend(prefixed(STOPPED_PREFIX, &report));
        let _ = nix::unistd::unlinkat(
            dir_fd.as_fd(),
            name.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    Ok(lines)
}

/// The device and inode of `path` (no symlink followed at its end).
fn id_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Whether nothing is at `path` (a missing directory on the way included).
fn is_gone(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// `report`'s lines, each after `prefix`.
fn prefixed(prefix: &str, report: &GuardReport) -> Vec<String> {
    report
        .lines()
        .into_iter()
        .map(|l| format!("{prefix}{l}"))
        .collect()
}

/// Runs the git guard of every run under `runs_dir` whose coder is gone without having
/// run it (its directory is still there, with a record); the lines to report. A guard
/// that stops short keeps its record in `records` ([`keep_record`]). `runs_dir` must be
/// one of coder's directories of run directories, never one the agent writes in (the
/// `TMPDIR`s): the record says which trees to act on.
pub(crate) fn finish_dead_runs(runs_dir: &Path, records: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(runs_dir) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = run_dirs::pid_of_run_dir(&entry.file_name()) else {
            continue;
        };
        if run_dirs::run_is_live(&entry.path(), pid) {
            continue;
        }
        let Ok(dir) = super::sys::open_nofollow_dir(&entry.path()) else {
            continue;
        };
        let Ok(Some(text)) = read_small(dir.as_fd(), OsStr::new(PENDING)) else {
            continue;
        };
        let Ok(record) = serde_json::from_slice::<PendingGuard>(&text) else {
            continue;
        };
        // The dead run's scan listings died with it: every directory is listed.
        let report = record.guard_again(false);
        // A tree gone from its path is kept for later as a stopped guard's is: renamed away
        // by another run's agent while this run looked, and back, it would otherwise hold
        // what the dead run's agent left for the next run's scan to take as the user's.
        let gone = record.tree_not_there().cloned();
        let stopped = match (&report.incomplete, gone) {
            (Some(why), _) => Some(format!(
                "its coder was killed, and a later run's check of it stopped: {why}"
            )),
            (None, Some(gone)) => Some(format!(
                "its coder was killed, and its tree {} was gone (or another directory \
                 was at its path) when a later run looked",
                gone.display()
            )),
            (None, None) => None,
        };
        lines.extend(prefixed(LATE_PREFIX, &report));
        if let Some(stopped) = stopped {
            // Kept as a run's own stopped guard is, for [`finish_stopped_guards`] to check
            // again (and refuse the run meanwhile); where it cannot be, the dead run's own
            // record stays for the next run.
            let mut record = record;
            record.stopped = Some(stopped);
            if keep_record(records, &entry.file_name(), &record).is_err() {
                continue;
            }
        }
        // Done: the directory itself goes with the dead run's other leftovers.
        let _ = nix::unistd::unlinkat(
            dir.as_fd(),
            PENDING,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    lines
}

type Stop = String;

struct Guard<'a> {
    root: &'a Path,
    known: &'a HashSet<(u64, u64)>,
    tools: &'a ToolMatch,
    /// The start scan's listings (empty for a dead run's guard).
    listings: &'a ScanListings,
    limits: GuardLimits,
    entries: usize,
    /// Git dirs already neutralised (or checked) in this pass.
    seen: HashSet<(u64, u64)>,
    /// Git dirs whose `commondir` was followed (a subset: a common dir reached through
    /// another's `commondir` is neutralised without following its own).
    followed: HashSet<(u64, u64)>,
    report: &'a mut GuardReport,
}

/// A directory waiting to be walked: its parent's descriptor and its name there.
struct Pending {
    parent: Rc<OwnedFd>,
    name: OsString,
    rel: PathBuf,
    depth: usize,
    /// Below a directory the start scan held read-only.
    held: bool,
}

impl<'a> Guard<'a> {
    fn run(&mut self) -> Result<(), Stop> {
        let root_fd = super::sys::open_nofollow_dir(self.root)
            .map_err(|e| self.stop(Path::new(""), "open", e))?;
        let top = open_beneath(root_fd.as_fd(), Path::new(""), dir_flags())
            .map_err(|e| self.stop(Path::new(""), "open", e))?;
        let root_fd = Rc::new(root_fd);
        let mut stack = Vec::new();
        self.dir(&root_fd, top, PathBuf::new(), (0, false), &mut stack)?;
        while let Some(p) = stack.pop() {
            if self.unchanged_leaf(&p)? {
                continue;
            }
            let Some(fd) = self.open_child(p.parent.as_fd(), &p.name, &p.rel)? else {
                continue;
            };
            self.dir(&root_fd, fd, p.rel, (p.depth, p.held), &mut stack)?;
        }
        Ok(())
    }

    /// A subdirectory the start scan listed, unchanged since, that holds nothing the guard
    /// acts on (no git-dir shape, no subdirectory, no `.git` file or symlink): its entries
    /// are counted and it is not opened. Its `stat` through the parent names the same
    /// directory an open would (the run's processes are gone, nothing races the guard).
    fn unchanged_leaf(&mut self, p: &Pending) -> Result<bool, Stop> {
        if self.listings.is_empty() {
            return Ok(false);
        }
        let Ok(st) = fstatat(
            p.parent.as_fd(),
            p.name.as_os_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) else {
            return Ok(false);
        };
        let listings: &'a ScanListings = self.listings;
        match listings.unchanged(&st, &self.root.join(&p.rel)) {
            Some(summary) if !summary.git_dir && summary.children.is_empty() => {
                self.count(summary.entries)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Count `entries` more against the guard's cap.
    fn count(&mut self, entries: usize) -> Result<(), Stop> {
        self.entries += entries;
        if self.entries > self.limits.max_entries {
            return Err(format!(
                "more than {} entries under {}",
                self.limits.max_entries,
                self.root.display()
            ));
        }
        Ok(())
    }

    fn stop(&self, rel: &Path, op: &str, e: Errno) -> Stop {
        format!("{} {}: {e}", op, self.root.join(rel).display())
    }

    /// Open a subdirectory to list it; one the agent made unreadable (mode 000) is made
    /// readable again when coder owns it. `None` for another user's directory that
    /// neither coder nor the agent may enter ([`super::scan::out_of_reach`]): nothing in
    /// it can be the agent's (what the agent makes is coder's user's).
    fn open_child(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
    ) -> Result<Option<OwnedFd>, Stop> {
        let how = beneath(dir_flags());
        let reopened = match openat2(parent, name, how) {
            Err(Errno::EACCES) => {
                if let Ok(st) = fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                    && super::scan::out_of_reach(parent, name, &st)
                {
                    return Ok(None);
                }
                restore_owner_access(parent, name, 0o700).map_err(|e| self.stop(rel, "open", e))?;
                openat2(parent, name, beneath(dir_flags()))
            }
            other => other,
        };
        reopened.map(Some).map_err(|e| self.stop(rel, "open", e))
    }

    /// Look at one directory: is it a git dir, is there a `.git` file or symlink, which
    /// subdirectories to walk, which protected tool configs appeared. `held`: it lies
    /// below a directory the start scan held read-only.
    fn dir(
        &mut self,
        root_fd: &Rc<OwnedFd>,
        fd: OwnedFd,
        rel: PathBuf,
        (depth, held): (usize, bool),
        stack: &mut Vec<Pending>,
    ) -> Result<(), Stop> {
        let st = if self.tools.active() || !self.listings.is_empty() {
            Some(fstat(fd.as_fd()).map_err(|e| self.stop(&rel, "inspect", e))?)
        } else {
            None
        };
        let held = held
            || st
                .as_ref()
                .is_some_and(|st| self.tools.holds(fd.as_fd(), OsStr::new(""), st));
        let (summary, listed) = self.summary(&fd, st.as_ref(), &rel)?;
        self.count(summary.entries)?;
        let fd = Rc::new(fd);
        // Only a directory whose entries changed since the scan can hold a protected name
        // the scan did not hold: its listing is at hand.
        let made = match listed {
            Some(entries) if !held && self.tools.active() => {
                self.tool_configs(fd.as_fd(), &rel, &entries)?
            }
            _ => Vec::new(),
        };
        if summary.git_dir {
            self.git_dir(root_fd.as_fd(), fd.as_fd(), &rel, true)?;
        }
        let made = made.into_iter().map(|name| (name, Kind::Dir));
        for (name, kind) in summary.children.iter().cloned().chain(made) {
            let (name, kind) = (&name, &kind);
            if is_git_entry_name(name) && matches!(kind, Kind::File | Kind::Symlink) {
                self.git_entry(root_fd.as_fd(), fd.as_fd(), &rel, name)?;
            }
            if *kind == Kind::Dir {
                if depth + 1 > self.limits.max_depth {
                    return Err(format!(
                        "{} is deeper than {} levels",
                        self.root.join(&rel).join(name).display(),
                        self.limits.max_depth
                    ));
                }
                stack.push(Pending {
                    parent: fd.clone(),
                    rel: rel.join(name),
                    name: name.clone(),
                    depth: depth + 1,
                    held,
                });
            }
        }
        Ok(())
    }

    /// Moves aside every entry of the directory `dir` (at `rel`, listed as `entries`)
    /// that matches a protected glob and that the start scan did not hold: it appeared
    /// during the run, or was put in place of a held one. A file or symlink is renamed
    /// beside itself; a directory keeps its place and what it holds moves into a new
    /// `NAME.coder-quarantine-N/` beside it (an empty one holds nothing to run and is left
    /// alone). A directory stays because it may be another run's placeholder, made in this
    /// tree after this run's scan and mounted read-only in that run's namespace: renamed,
    /// its mount would go with it and free the name there while that run goes on. The
    /// quarantine directories made, for the walk to look inside for git dirs.
    fn tool_configs(
        &mut self,
        dir: BorrowedFd<'_>,
        rel: &Path,
        entries: &[(OsString, Kind)],
    ) -> Result<Vec<OsString>, Stop> {
        let mut made = Vec::new();
        let here = self.root.join(rel);
        for (name, kind) in entries {
            let path = here.join(name);
            if is_git_entry_name(name) {
                continue;
            }
            let Some(quarantine) = self.tools.protected(&path, *kind == Kind::Dir) else {
                continue;
            };
            let child = rel.join(name);
            let st = match fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(self.stop(&child, "inspect", e)),
            };
            if self.tools.holds(dir, name, &st) {
                continue;
            }
            if kind_of(&st) != Kind::Dir {
                let to = rename_aside(dir, name).map_err(|e| self.stop(&child, "move", e))?;
                self.report.quarantined.push(Quarantined {
                    path: path.display().to_string(),
                    moved: vec![name.to_string_lossy().into_owned()],
                    to: here.join(&to).display().to_string(),
                    kind: quarantine,
                    after_checkout: Default::default(),
                });
                continue;
            }
            let Some(inner) = self.open_child(dir, name, &child)? else {
                continue;
            };
            let names = list(&inner).map_err(|e| self.stop(&child, "list", e))?;
            if names.is_empty() {
                continue;
            }
            // One the agent made unwritable for its owner would refuse the moves.
            give_owner_access(inner.as_fd(), &st).map_err(|e| self.stop(&child, "chmod", e))?;
            let to = mkdir_aside(dir, name).map_err(|e| self.stop(&child, "move", e))?;
            let target = openat2(dir, to.as_str(), beneath(dir_flags()))
                .map_err(|e| self.stop(&rel.join(&to), "open", e))?;
            let mut moved = Vec::with_capacity(names.len());
            for (entry, _) in &names {
                nix::fcntl::renameat(
                    inner.as_fd(),
                    entry.as_os_str(),
                    target.as_fd(),
                    entry.as_os_str(),
                )
                .map_err(|e| self.stop(&child.join(entry), "move", e))?;
                moved.push(entry.to_string_lossy().into_owned());
            }
            self.report.quarantined.push(Quarantined {
                path: path.display().to_string(),
                moved,
                to: here.join(&to).display().to_string(),
                kind: quarantine,
                after_checkout: Default::default(),
            });
            made.push(OsString::from(to));
        }
        Ok(made)
    }

    /// What the directory open as `fd` (whose `fstat` is `st`, when taken) holds, as far
    /// as the guard cares: the start scan's record when the directory is unchanged since
    /// ([`ScanListings`]), else a listing, which is returned too.
    #[allow(clippy::type_complexity)]
    fn summary(
        &self,
        fd: &OwnedFd,
        st: Option<&FileStat>,
        rel: &Path,
    ) -> Result<(Cow<'a, DirSummary>, Option<Vec<(OsString, Kind)>>), Stop> {
        let listings: &'a ScanListings = self.listings;
        if let Some(st) = st
            && let Some(summary) = listings.unchanged(st, &self.root.join(rel))
        {
            return Ok((Cow::Borrowed(summary), None));
        }
        let entries = list(fd).map_err(|e| self.stop(rel, "list", e))?;
        let mut typed = Vec::with_capacity(entries.len());
        for (name, kind) in &entries {
            let kind = match kind {
                Some(k) => *k,
                None => match fstatat(fd.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Ok(st) => kind_of(&st),
                    Err(Errno::ENOENT) => continue,
                    Err(e) => return Err(self.stop(&rel.join(name), "inspect", e)),
                },
            };
            typed.push((name.clone(), kind));
        }
        let mut summary = DirSummary::of(typed.iter().map(|(name, kind)| (name, *kind)));
        summary.entries = entries.len();
        Ok((Cow::Owned(summary), Some(typed)))
    }

    /// A git dir: left alone when the start scan guarded it, neutralised otherwise. Its
    /// `commondir` is followed when `follow_common`: git reads one level of it (a common
    /// dir's own `commondir` means nothing to git), and so does the guard, so that a chain
    /// of `commondir`s the agent made costs one frame, never a recursion as deep as the
    /// chain (a stack overflow would kill coder before its report, and every later coder
    /// that runs this guard for it).
    fn git_dir(
        &mut self,
        root: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        rel: &Path,
        follow_common: bool,
    ) -> Result<(), Stop> {
        let st = fstat(dir).map_err(|e| self.stop(rel, "inspect", e))?;
        let id = (st.st_dev, st.st_ino);
        let first = self.seen.insert(id);
        let follow = follow_common && self.followed.insert(id);
        if !first && !follow {
            return Ok(());
        }
        if self.known.contains(&id) {
            if !first {
                return Ok(());
            }
            // The user's own repository: its config and hooks were read-only all run, but
            // an operation left in progress is not, nor one of them replaced meanwhile.
            let mut q = Quarantine::new(dir, self.root.join(rel));
            let result = self
                .replaced_while_held(dir, &mut q)
                .and_then(|()| pending_commands(dir, &mut q))
                .map_err(|e| format!("git metadata in {}: {e}", self.root.join(rel).display()));
            q.finish(self.report);
            return result;
        }
        // A git dir the agent made read-only for its owner would refuse the moves.
        give_owner_access(dir, &st).map_err(|e| self.stop(rel, "chmod", e))?;
        let mut q = Quarantine::new(dir, self.root.join(rel));
        let result = self.neutralise(root, dir, rel, (first, follow), &mut q);
        q.finish(self.report);
        result
    }

    /// What of a known git dir's held metadata is not what the start scan held: a file
    /// replaced by a rename while the run went on (`git config`, `git remote add`, `git
    /// push -u` write the config so, outside the sandbox) took the read-only mount held
    /// over it along (the kernel detaches a mount whose place is deleted in another mount
    /// namespace), and the agent could write the new one. Filtered as an agent-made git
    /// dir's config is: its allow-listed keys stay (the user's own remotes and names), the
    /// original goes to the quarantine. A `hooks/` removed and made again (a hook
    /// installer's `rm -rf .git/hooks`, a setup step's fresh copy) lost its mount the same
    /// way, and the agent wrote the new hooks: every hook there goes to the quarantine, as
    /// an agent-made git dir's does.
    fn replaced_while_held(&self, dir: BorrowedFd<'_>, q: &mut Quarantine) -> Result<(), Errno> {
        let replaced = |name: &str| -> Result<bool, Errno> {
            Ok(entry_stat(dir, name)?
                .is_some_and(|st| !self.tools.holds(dir, OsStr::new(name), &st)))
        };
        for name in ["config", "config.worktree"] {
            if replaced(name)? {
                filter_config(dir, name, q)?;
            }
        }
        if replaced("hooks")? {
            hooks(dir, q)?;
        }
        Ok(())
    }

    /// `contents`: the config, hooks and operation state; `follow`: the `commondir`.
    fn neutralise(
        &mut self,
        root: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        rel: &Path,
        (contents, follow): (bool, bool),
        q: &mut Quarantine,
    ) -> Result<(), Stop> {
        let fail =
            |what: &str, e: Errno| format!("{what} in {}: {e}", self.root.join(rel).display());
        if contents {
            for name in ["config", "config.worktree"] {
                filter_config(dir, name, q).map_err(|e| fail(name, e))?;
            }
            hooks(dir, q).map_err(|e| fail("hooks", e))?;
            pending_commands(dir, q).map_err(|e| fail("operation state", e))?;
        }
        if !follow {
            return Ok(());
        }
        if let Some(common) = commondir(dir).map_err(|e| fail("commondir", e))? {
            let resolved = common.and_then(|t| self.resolve(root, rel, &t));
            // A new git dir sharing the user's common dir (a `sub/.git` directory, or a
            // bare-looking `sub` itself, where git runs the commands of a config at `sub`)
            // makes a top of the user's config, as a new `.git` file to it does
            // ([`Guard::git_entry`]): without its `commondir` it is no git dir. One inside
            // a `.git` (`.git/worktrees/x`, git's own layout) is reached through a `.git`
            // file, which that check moves.
            let in_git_layout = rel.parent().is_some_and(|p| {
                p.components()
                    .any(|c| c.as_os_str().as_bytes().eq_ignore_ascii_case(b".git"))
            });
            let top_of_users = !in_git_layout && self.makes_a_top_of_the_users(root, dir, rel);
            match resolved {
                Some(_) if top_of_users => {
                    q.move_out("commondir").map_err(|e| fail("commondir", e))?;
                }
                Some((fd, common)) => self.git_dir(root, fd.as_fd(), &common, false)?,
                None => q.move_out("commondir").map_err(|e| fail("commondir", e))?,
            }
        }
        Ok(())
    }

    /// A `.git` file or symlink in the directory at `rel`: its target must be a directory
    /// of this tree (which the walk checks); otherwise the entry is renamed.
    fn git_entry(
        &mut self,
        root: BorrowedFd<'_>,
        parent: BorrowedFd<'_>,
        rel: &Path,
        name: &OsStr,
    ) -> Result<(), Stop> {
        let path = rel.join(name);
        let fail = |e: Errno| self.stop(&path, "check", e);
        let st = fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(fail)?;
        if self.known.contains(&(st.st_dev, st.st_ino)) {
            return Ok(());
        }
        let target = match kind_of(&st) {
            Kind::Symlink => {
                let t = nix::fcntl::readlinkat(parent, name).map_err(fail)?;
                if t == OsStr::new(ABSENT_TARGET) {
                    return Ok(());
                }
                Some(PathBuf::from(t))
            }
            _ => read_small(parent, name)
                .map_err(fail)?
                .and_then(|text| gitfile_target(&text)),
        };
        let resolved = target.and_then(|t| self.resolve(root, rel, &t));
        if resolved.is_some_and(|(fd, dir)| !self.makes_a_top_of_the_users(root, fd.as_fd(), &dir))
        {
            return Ok(());
        }
        let to = rename_aside(parent, name).map_err(fail)?;
        let dir = self.root.join(rel);
        let label = name.to_string_lossy().into_owned();
        self.report.quarantined.push(Quarantined {
            path: dir.join(name).display().to_string(),
            moved: vec![label],
            to: dir.join(to).display().to_string(),
            kind: QuarantineKind::Git,
            after_checkout: Default::default(),
        });
        Ok(())
    }

    /// Whether the git dir `dir` (at `rel`), reached by a new `.git` file or symlink, has
    /// git take that entry's directory for the top of a work tree whose config is the
    /// user's: a git dir the start scan guarded (the user's own `.git`, a linked
    /// worktree's) without a `core.worktree` naming its work tree elsewhere, or one whose
    /// `commondir` leads to one (a `git worktree add` of the agent's). The user's config
    /// runs its commands at that top (`alias.fmt = !sh tools/fmt.sh`, a relative
    /// `core.fsmonitor`), and the start scan held those scripts at the tops that were
    /// there: a `sub/.git` reading `gitdir: ../.git` made `sub` one, and the user's `git
    /// fmt` there ran the agent's `sub/tools/fmt.sh` (round twenty's review).
    fn makes_a_top_of_the_users(
        &self,
        root: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        rel: &Path,
    ) -> bool {
        let known = |fd: BorrowedFd<'_>| {
            fstat(fd).is_ok_and(|st| self.known.contains(&(st.st_dev, st.st_ino)))
        };
        if known(dir) {
            let config = read_small(dir, OsStr::new("config")).ok().flatten();
            let elsewhere = config
                .and_then(|text| super::config_text::core_worktree(&text))
                .is_some_and(|worktree| !worktree.is_empty());
            return !elsewhere;
        }
        match commondir(dir) {
            Ok(Some(Some(common))) => self
                .resolve(root, rel, &common)
                .is_some_and(|(fd, _)| known(fd.as_fd())),
            _ => false,
        }
    }

    /// The directory git reaches by `target` (read from a file in the directory `base`),
    /// opened the way the kernel resolves it (`..` after the names before it) but refusing
    /// every symlink and anything outside the root; with its path relative to the root.
    /// `None` when git would go elsewhere (or nowhere).
    fn resolve(
        &self,
        root: BorrowedFd<'_>,
        base: &Path,
        target: &Path,
    ) -> Option<(OwnedFd, PathBuf)> {
        let path = if target.is_absolute() {
            target.strip_prefix(self.root).ok()?.to_path_buf()
        } else {
            base.join(target)
        };
        let open = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &path
        };
        let fd = openat2(root, open, beneath(dir_flags())).ok()?;
        // No symlink was crossed, so the lexical form names the same directory.
        let label = lexical(self.root, base, target).unwrap_or(path);
        Some((fd, label))
    }
}

/// Moves aside every way into the user's repositories in `roots`, the trees the run
/// could write outside the guarded ones (the host's `/tmp` with `--allow-tmp`): a `.git`
/// entry (file, symlink or directory) or a git dir's `commondir` that leads to a git dir
/// of `known` (the start scan's), or to one whose `commondir` does, old or new. Until
/// round twenty-two only those changed since the run's start were: a pointer one run
/// left leading nowhere (`gitdir: /tmp/y`) was made to lead to the user's by a later
/// run (`/tmp/y -> <workspace>/.git`), its own change time older (round twenty-one's
/// second review). The `guarded` trees (the workspace, `--write` directories: their own
/// guard's) and the git dirs of `known` are passed over, not entered. Each makes its directory a new top of the user's config: git runs
/// the config's commands there (`alias.fmt = !sh tools/fmt.sh`), and the agent wrote
/// what they run beside it (round twenty's review: `/tmp/x/.git` reading `gitdir:
/// <workspace>/.git`). Nothing else there is touched: the tree is shared with the user's
/// other processes, whose own repositories are theirs. Unlike [`guard_trees`]' walk, a
/// directory that goes away or changes kind while it is looked at is passed over (other
/// processes use these trees meanwhile), and so is another user's that coder cannot list
/// (its owner's; the agent, coder's user, cannot list it either).
pub fn move_new_tops_aside(
    roots: &[PathBuf],
    known: &HashSet<(u64, u64)>,
    guarded: &[PathBuf],
    limits: GuardLimits,
    report: &mut GuardReport,
) {
    let guarded = guarded.iter().filter_map(|r| id_of(r)).collect();
    let mut walk = TopWalk {
        known,
        guarded,
        limits,
        entries: 0,
        report,
    };
    for root in roots {
        if let Err(why) = walk.run(root) {
            walk.report.incomplete.get_or_insert(why);
            return;
        }
    }
}

/// The walk of [`move_new_tops_aside`].
struct TopWalk<'a> {
    known: &'a HashSet<(u64, u64)>,
    /// The device and inode of each guarded tree, passed over.
    guarded: HashSet<(u64, u64)>,
    limits: GuardLimits,
    entries: usize,
    report: &'a mut GuardReport,
}

/// Whether renaming `dir/name` failed (`e`) because it is another user's in a directory
/// coder may not move it from (the sticky `/tmp`, or a directory of theirs): the agent,
/// coder's user, cannot have made it, and that user could have left it without any
/// run. Stopping the walk there let any local user refuse every later run of this
/// user's workspace (round twenty-one's second review).
fn not_agents(dir: BorrowedFd<'_>, name: &OsStr, e: Errno) -> bool {
    matches!(e, Errno::EPERM | Errno::EACCES)
        && fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| st.st_uid != nix::unistd::geteuid().as_raw())
}

/// Whether coder's user may make entries in another user's directory `st` by its mode:
/// world-writable, or group-writable by a group of coder's (its own or a supplementary
/// one). ACLs are not read.
fn agent_may_write(st: &FileStat) -> bool {
    let in_group = || {
        let gid = nix::unistd::Gid::from_raw(st.st_gid);
        nix::unistd::getegid() == gid || nix::unistd::getgroups().is_ok_and(|g| g.contains(&gid))
    };
    st.st_mode & 0o002 != 0 || st.st_mode & 0o020 != 0 && in_group()
}

/// A race with another process of the shared tree: the entry went away or changed kind.
fn raced(e: Errno) -> bool {
    matches!(
        e,
        Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV
    )
}

impl TopWalk<'_> {
    fn run(&mut self, root: &Path) -> Result<(), Stop> {
        let stop =
            |rel: &Path, op: &str, e: Errno| format!("{op} {}: {e}", root.join(rel).display());
        let top = match super::sys::open_nofollow_dir(root)
            .and_then(|fd| open_beneath(fd.as_fd(), Path::new(""), dir_flags()))
        {
            Ok(fd) => fd,
            Err(e) if raced(e) => return Ok(()),
            Err(e) => return Err(stop(Path::new(""), "open", e)),
        };
        let mut stack = vec![(top, PathBuf::new(), 0usize)];
        while let Some((dir, rel, depth)) = stack.pop() {
            let entries = match list(&dir) {
                Ok(entries) => entries,
                Err(e) if raced(e) => continue,
                Err(e) => return Err(stop(&rel, "list", e)),
            };
            self.entries += entries.len();
            if self.entries > self.limits.max_entries {
                return Err(format!(
                    "more than {} entries under {}",
                    self.limits.max_entries,
                    root.display()
                ));
            }
            let has = |name: &str| entries.iter().any(|(n, _)| n == name);
            if has("HEAD") && has("commondir") {
                self.shared_common(dir.as_fd(), &root.join(&rel))
                    .map_err(|e| stop(&rel, "move the commondir of", e))?;
            }
            for (name, kind) in &entries {
                let kind = match kind {
                    Some(kind) => *kind,
                    None => {
                        match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                            Ok(st) => kind_of(&st),
                            Err(e) if raced(e) => continue,
                            Err(e) => return Err(stop(&rel.join(name), "inspect", e)),
                        }
                    }
                };
                if is_git_entry_name(name)
                    && self
                        .pointer(dir.as_fd(), &root.join(&rel), name)
                        .map_err(|e| stop(&rel.join(name), "move", e))?
                {
                    continue;
                }
                if kind != Kind::Dir {
                    continue;
                }
                if depth + 1 > self.limits.max_depth {
                    // Another user's (entered when the agent may write in it) is passed
                    // over there: a chain of that user's world-writable directories
                    // would stop the walk, as a deep tree of theirs did until round
                    // twenty-two.
                    if fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| st.st_uid != nix::unistd::geteuid().as_raw())
                    {
                        continue;
                    }
                    return Err(format!(
                        "{} is deeper than {} levels",
                        root.join(&rel).join(name).display(),
                        self.limits.max_depth
                    ));
                }
                if let Some(child) = self
                    .open_child(dir.as_fd(), name)
                    .map_err(|e| stop(&rel.join(name), "open", e))?
                    && !self.passed_over(child.as_fd())
                {
                    stack.push((child, rel.join(name), depth + 1));
                }
            }
        }
        Ok(())
    }

    /// A subdirectory to list; `None` when it went away, or is another user's that
    /// coder cannot list. One of coder's user's the agent made unreadable is given its
    /// owner's access back, as [`Guard::open_child`] does.
    fn open_child(&self, parent: BorrowedFd<'_>, name: &OsStr) -> Result<Option<OwnedFd>, Errno> {
        match openat2(parent, name, beneath(dir_flags())) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if raced(e) => Ok(None),
            Err(Errno::EACCES) => match restore_owner_access(parent, name, 0o700) {
                Ok(()) => openat2(parent, name, beneath(dir_flags())).map(Some),
                Err(Errno::EACCES) => Ok(None),
                Err(e) if raced(e) => Ok(None),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Whether the directory `dir` is passed over, not entered: a guarded tree or a git
    /// dir of the user's (its own guard's, or the user's repository itself), or another
    /// user's directory. What is below another user's is that user's to make and replace
    /// (the owner of a directory, sticky or not, renames what is in it), the agent's only
    /// where that user let it write, and no way in that user could not make alone; the
    /// agent can give nothing away (its user namespace maps its own uid only, with no
    /// capability). Entering it let another local user stop the walk at its caps with a
    /// tree 300 levels deep, and so refuse every later confined run of the workspace
    /// (round twenty-one's second review).
    ///
    /// Another user's directory the agent may write in (world-writable, as the sticky
    /// `/tmp/.X11-unix` and `/tmp/.ICE-unix` of root are on most desktops, or writable
    /// by a group of coder's user) is entered, though: the agent's own directory there
    /// (`/tmp/.X11-unix/x/.git` reading `gitdir: <workspace>/.git`) was never looked at,
    /// and the user's `git fmt` in it ran the agent's script (round twenty-three's
    /// review). What is in it that is not the agent's is passed over as before.
    fn passed_over(&self, dir: BorrowedFd<'_>) -> bool {
        fstat(dir).is_ok_and(|st| {
            let id = (st.st_dev, st.st_ino);
            self.guarded.contains(&id)
                || self.known.contains(&id)
                || st.st_uid != nix::unistd::geteuid().as_raw() && !agent_may_write(&st)
        })
    }

    /// The `.git` entry `name` of `dir` (at `path`): renamed aside when it leads to the
    /// user's config (a `.git` directory that is the user's git dir is the repository
    /// itself, left); whether it was.
    fn pointer(&mut self, dir: BorrowedFd<'_>, path: &Path, name: &OsStr) -> Result<bool, Errno> {
        let is_dir = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| kind_of(&st) == Kind::Dir);
        if is_dir && open_followed(dir, Path::new(name)).is_some_and(|fd| self.is_known(fd.as_fd()))
        {
            return Ok(false);
        }
        // Where git goes from it: the directory itself, a symlink's target, a file's
        // `gitdir:` (relative to the directory holding it), each followed as git does.
        // A symlink to a file is read through (git's `stat` follows it): read without
        // following, `.git -> pointer` holding `gitdir: <workspace>/.git` was taken for
        // no pointer (round twenty-three's review).
        let text = match read_small(dir, name) {
            Ok(Some(text)) => Some(text),
            _ => read_linked_file(dir, name),
        };
        let target = match text {
            Some(text) => match gitfile_target(&text) {
                Some(target) => target,
                None => return Ok(false),
            },
            None => PathBuf::from(name),
        };
        let users = open_followed(dir, &target).is_some_and(|fd| self.leads_to_users(fd.as_fd()));
        if !users {
            return Ok(false);
        }
        let to = match rename_aside(dir, name) {
            Ok(to) => to,
            Err(e) if raced(e) || not_agents(dir, name, e) => return Ok(false),
            Err(e) => return Err(e),
        };
        self.report.quarantined.push(Quarantined {
            path: path.join(name).display().to_string(),
            moved: vec![name.to_string_lossy().into_owned()],
            to: path.join(to).display().to_string(),
            kind: QuarantineKind::Git,
            after_checkout: Default::default(),
        });
        Ok(true)
    }

    /// A git dir `dir` (at `path`) of a `HEAD` and a `commondir`: the `commondir` renamed
    /// aside when it leads to the user's git dir (git then takes no repository there).
    fn shared_common(&mut self, dir: BorrowedFd<'_>, path: &Path) -> Result<(), Errno> {
        let name = OsStr::new("commondir");
        if !self.common_is_users(dir) {
            return Ok(());
        }
        let to = match rename_aside(dir, name) {
            Ok(to) => to,
            Err(e) if raced(e) || not_agents(dir, name, e) => return Ok(()),
            Err(e) => return Err(e),
        };
        self.report.quarantined.push(Quarantined {
            path: path.display().to_string(),
            moved: vec!["commondir".to_owned()],
            to: path.join(to).display().to_string(),
            kind: QuarantineKind::Git,
            after_checkout: Default::default(),
        });
        Ok(())
    }

    fn is_known(&self, fd: BorrowedFd<'_>) -> bool {
        fstat(fd).is_ok_and(|st| self.known.contains(&(st.st_dev, st.st_ino)))
    }

    /// Whether the git dir git reaches is the user's, or shares the user's common dir.
    fn leads_to_users(&self, dir: BorrowedFd<'_>) -> bool {
        self.is_known(dir) || self.common_is_users(dir)
    }

    fn common_is_users(&self, dir: BorrowedFd<'_>) -> bool {
        match commondir(dir) {
            Ok(Some(Some(common))) => {
                open_followed(dir, &common).is_some_and(|fd| self.is_known(fd.as_fd()))
            }
            _ => false,
        }
    }
}

/// The text of the plain file `name` in `dir` leads to through symlinks, as git reads a
/// `.git` link to a file; `None` when it leads to anything else (looked at through an
/// `O_PATH` open first: a link to a device or a FIFO is never opened for reading) or
/// to a file larger than [`MAX_FILE`] (git refuses those too).
fn read_linked_file(dir: BorrowedFd<'_>, name: &OsStr) -> Option<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let fd = nix::fcntl::openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_CLOEXEC,
        FileMode::empty(),
    )
    .ok()?;
    let st = fstat(fd.as_fd()).ok()?;
    if kind_of(&st) != Kind::File || st.st_size as u64 > MAX_FILE {
        return None;
    }
    let file = std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    let mut text = Vec::new();
    file.take(MAX_FILE).read_to_end(&mut text).ok()?;
    Some(text)
}

/// The directory `target` names from `dir`, symlinks followed as git follows them (an
/// `O_PATH` open: nothing is read, no FIFO waited on); `None` when it is none.
fn open_followed(dir: BorrowedFd<'_>, target: &Path) -> Option<OwnedFd> {
    nix::fcntl::openat(
        dir,
        target,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        FileMode::empty(),
    )
    .ok()
}

/// The git dir's moves, made lazily into `coder-quarantine-N/`.
struct Quarantine<'f> {
    dir: BorrowedFd<'f>,
    path: PathBuf,
    made: Option<(OwnedFd, OsString)>,
    moved: Vec<String>,
}

impl<'f> Quarantine<'f> {
    fn new(dir: BorrowedFd<'f>, path: PathBuf) -> Self {
        Quarantine {
            dir,
            path,
            made: None,
            moved: Vec::new(),
        }
    }

    /// Creates `coder-quarantine-N/` (a fresh name, never an existing one) once.
    fn make(&mut self) -> Result<(), Errno> {
        if self.made.is_some() {
            return Ok(());
        }
        for name in aside_names(String::new()) {
            let name = OsString::from(name);
            match nix::sys::stat::mkdirat(
                self.dir,
                name.as_os_str(),
                FileMode::from_bits_truncate(0o700),
            ) {
                Ok(()) => {
                    let fd = openat2(self.dir, name.as_os_str(), beneath(dir_flags()))?;
                    self.made = Some((fd, name));
                    return Ok(());
                }
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Errno::EEXIST)
    }

    /// Move `from/name` into the quarantine (under `sub/` when given).
    fn move_from(
        &mut self,
        from: BorrowedFd<'_>,
        name: &OsStr,
        sub: Option<&str>,
    ) -> Result<(), Errno> {
        self.make()?;
        let (target, _) = self.made.as_ref().ok_or(Errno::EEXIST)?;
        let label = match sub {
            Some(sub) => {
                match nix::sys::stat::mkdirat(
                    target.as_fd(),
                    sub,
                    FileMode::from_bits_truncate(0o700),
                ) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                let to = openat2(target.as_fd(), sub, beneath(dir_flags()))?;
                nix::fcntl::renameat(from, name, to.as_fd(), name)?;
                format!("{sub}/{}", name.to_string_lossy())
            }
            None => {
                nix::fcntl::renameat(from, name, target.as_fd(), name)?;
                name.to_string_lossy().into_owned()
            }
        };
        self.moved.push(label);
        Ok(())
    }

    fn move_out(&mut self, name: &str) -> Result<(), Errno> {
        let dir = self.dir;
        self.move_from(dir, OsStr::new(name), None)
    }

    fn finish(self, report: &mut GuardReport) {
        if let Some((_, name)) = &self.made
            && !self.moved.is_empty()
        {
            report.quarantined.push(Quarantined {
                path: self.path.display().to_string(),
                moved: self.moved.clone(),
                to: self.path.join(name).display().to_string(),
                kind: QuarantineKind::Git,
                after_checkout: Default::default(),
            });
        }
    }
}

/// Keep only the allow-listed keys of `dir/name`; the original goes to quarantine when
/// anything was dropped or it is not a plain file.
fn filter_config(dir: BorrowedFd<'_>, name: &str, q: &mut Quarantine) -> Result<(), Errno> {
    let Some(st) = entry_stat(dir, name)? else {
        return Ok(());
    };
    let kept = match read_small(dir, OsStr::new(name))? {
        Some(text) if kind_of(&st) == Kind::File => {
            let filtered = gitconfig::filter(&text);
            if !filtered.dropped {
                return Ok(());
            }
            filtered.kept
        }
        _ => Vec::new(),
    };
    q.move_out(name)?;
    write_new(dir, name, gitconfig::render(&kept).as_bytes(), &st)
}

/// Move every hook that is not a `*.sample` (or a `hooks` that is not a directory).
fn hooks(dir: BorrowedFd<'_>, q: &mut Quarantine) -> Result<(), Errno> {
    let Some(st) = entry_stat(dir, "hooks")? else {
        return Ok(());
    };
    if kind_of(&st) != Kind::Dir {
        return q.move_out("hooks");
    }
    let hooks = match openat2(dir, "hooks", beneath(dir_flags())) {
        Err(Errno::EACCES) => {
            restore_owner_access(dir, OsStr::new("hooks"), 0o700)?;
            openat2(dir, "hooks", beneath(dir_flags()))?
        }
        other => other?,
    };
    for (name, _) in list(&hooks)? {
        if name.as_bytes().ends_with(b".sample") {
            continue;
        }
        match q.move_from(hooks.as_fd(), &name, Some("hooks")) {
            Err(Errno::EACCES) => {
                restore_owner_access(dir, OsStr::new("hooks"), 0o700)?;
                q.move_from(hooks.as_fd(), &name, Some("hooks"))?;
            }
            other => other?,
        }
    }
    Ok(())
}

/// The to-do lists of an operation in progress, which git carries on with when the user
/// types `git rebase --continue`: an `exec` line there runs a shell command outside the
/// sandbox. (`cherry-pick`/`revert --continue` refuse an `exec` in `sequencer/todo` today,
/// "cannot cherry-pick during a revert"; it is defused all the same, so a later git that
/// accepted it would find none.)
const TODO_LISTS: [(&str, &str); 2] = [("rebase-merge", "git-rebase-todo"), ("sequencer", "todo")];

/// Comment out every `exec`/`x` line of the to-do lists of an operation in progress (the
/// original goes to quarantine); a state directory or list that is not plain (a symlink,
/// a FIFO, too big to read) moves to quarantine whole, which leaves nothing to continue.
fn pending_commands(dir: BorrowedFd<'_>, q: &mut Quarantine) -> Result<(), Errno> {
    for (state, list) in TODO_LISTS {
        let Some(file) = StateFile::open(dir, state, list, q)? else {
            continue;
        };
        let Some(text) = file.read()? else {
            q.move_out(state)?;
            continue;
        };
        if let Some(defused) = without_exec_lines(&text) {
            file.replace(q, Some(&defused))?;
        }
    }
    pending_strategies(dir, q)
}

/// A file of an operation in progress, `state/name` in a git dir.
struct StateFile {
    state_dir: OwnedFd,
    state: &'static str,
    name: &'static str,
    st: FileStat,
}

impl StateFile {
    /// `None` when there is no such file; a `state` that is not a directory of the tree (a
    /// symlink, a file) moves to quarantine whole, and is `None` too.
    fn open(
        dir: BorrowedFd<'_>,
        state: &'static str,
        name: &'static str,
        q: &mut Quarantine,
    ) -> Result<Option<StateFile>, Errno> {
        let state_dir = match openat2(dir, state, beneath(dir_flags())) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP | Errno::ENOTDIR | Errno::EXDEV) => {
                q.move_out(state)?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let Some(st) = entry_stat(state_dir.as_fd(), name)? else {
            return Ok(None);
        };
        Ok(Some(StateFile {
            state_dir,
            state,
            name,
            st,
        }))
    }

    /// Its content, `None` when it is not a plain file small enough to read.
    fn read(&self) -> Result<Option<Vec<u8>>, Errno> {
        read_small(self.state_dir.as_fd(), OsStr::new(self.name))
    }

    /// Moves the file to quarantine (under `state/`) and writes `text`, when given, in its
    /// place.
    fn replace(&self, q: &mut Quarantine, text: Option<&[u8]>) -> Result<(), Errno> {
        let name = OsStr::new(self.name);
        q.move_from(self.state_dir.as_fd(), name, Some(self.state))?;
        match text {
            Some(text) => write_new(self.state_dir.as_fd(), self.name, text, &self.st),
            None => Ok(()),
        }
    }
}

/// The merge strategies git carries out itself (or from its own exec path). Any other name
/// makes a continued operation run `git merge-<name>`: a program looked up on `PATH`, and,
/// when the name holds a `/`, a path git runs as it stands, relative to the work tree
/// (`/x` runs `./git-merge-/x`, a file the agent can write).
const BUILTIN_STRATEGIES: [&[u8]; 6] = [
    b"ort",
    b"recursive",
    b"resolve",
    b"octopus",
    b"ours",
    b"subtree",
];

/// The merge strategy an operation in progress goes on with: `rebase-merge/strategy` (and
/// `rebase-apply/strategy`, which `git rebase` reads for both back ends) as one line, read
/// like git's `read_oneliner` (one trailing LF or CRLF cut), and `options.strategy` in
/// `sequencer/opts` (config syntax; `cherry-pick`/`revert --continue`). A strategy that is
/// not one of git's own moves to quarantine (a `strategy` file whole, the `opts` file
/// rewritten without it), so the operation goes on with git's default; a state file coder
/// cannot read or parse moves whole.
fn pending_strategies(dir: BorrowedFd<'_>, q: &mut Quarantine) -> Result<(), Errno> {
    for (state, file) in [
        ("rebase-merge", "strategy"),
        ("rebase-apply", "strategy"),
        ("sequencer", "opts"),
    ] {
        let Some(state_file) = StateFile::open(dir, state, file, q)? else {
            continue;
        };
        let text = state_file.read()?;
        let keep = match (&text, file) {
            (None, _) => None,
            (Some(text), "opts") => match gitconfig::parse(text) {
                Err(_) => None,
                Ok(entries) => {
                    let foreign = |e: &gitconfig::Entry| {
                        e.section == "options"
                            && e.subsection.is_none()
                            && e.key == "strategy"
                            && !e
                                .value
                                .as_deref()
                                .is_some_and(|v| BUILTIN_STRATEGIES.contains(&v.as_bytes()))
                    };
                    if !entries.iter().any(foreign) {
                        continue;
                    }
                    let kept: Vec<_> = entries.into_iter().filter(|e| !foreign(e)).collect();
                    Some(gitconfig::render(&kept).into_bytes())
                }
            },
            (Some(text), _) => {
                let line = text.strip_suffix(b"\n").unwrap_or(text);
                let line = if line.len() < text.len() {
                    line.strip_suffix(b"\r").unwrap_or(line)
                } else {
                    line
                };
                if BUILTIN_STRATEGIES.contains(&line) {
                    continue;
                }
                None
            }
        };
        state_file.replace(q, keep.as_deref())?;
    }
    Ok(())
}

/// A to-do list with its `exec`/`x` commands commented out, or `None` when it has none.
/// Git reads a command as the first word of a line after blanks, so does this.
fn without_exec_lines(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut changed = false;
    for line in text.split_inclusive(|b| *b == b'\n') {
        let start = line
            .iter()
            .position(|b| !b" \t".contains(b))
            .unwrap_or(line.len());
        let word_end = line[start..]
            .iter()
            .position(|b| b" \t\r\n".contains(b))
            .map_or(line.len(), |n| start + n);
        if matches!(&line[start..word_end], b"exec" | b"x") {
            out.extend_from_slice(b"# coder removed: ");
            changed = true;
        }
        out.extend_from_slice(line);
    }
    changed.then_some(out)
}

/// A git dir's `commondir`: `None` when absent, `Some(None)` when git could not use it as
/// coder reads it (not a plain file), else the path git uses: the content with trailing
/// blanks cut exactly as git's `strbuf_rtrim` does (space, tab, CR, LF; not VT or FF),
/// up to the first NUL (git then uses it as a C string).
fn commondir(dir: BorrowedFd<'_>) -> Result<Option<Option<PathBuf>>, Errno> {
    let Some(st) = entry_stat(dir, "commondir")? else {
        return Ok(None);
    };
    if kind_of(&st) != Kind::File {
        return Ok(Some(None));
    }
    let Some(text) = read_small(dir, OsStr::new("commondir"))? else {
        return Ok(Some(None));
    };
    let text = trim_end(&text, b" \t\r\n");
    let text = text.split(|&b| b == 0).next().unwrap_or_default();
    Ok(Some(
        (!text.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(text))),
    ))
}

/// `gitdir: PATH` of a `.git` file, read as git's `read_gitfile_gently` does: the prefix,
/// then everything to the end with trailing CR and LF cut (embedded newlines stay part of
/// the path), up to the first NUL.
fn gitfile_target(text: &[u8]) -> Option<PathBuf> {
    let text = trim_end(text, b"\r\n");
    let rest = text.strip_prefix(b"gitdir: ")?;
    let path = rest.split(|&b| b == 0).next().unwrap_or_default();
    (!path.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(path)))
}

fn trim_end<'t>(mut text: &'t [u8], blanks: &[u8]) -> &'t [u8] {
    while let Some((last, rest)) = text.split_last()
        && blanks.contains(last)
    {
        text = rest;
    }
    text
}

/// `target` seen from the directory `base` (relative to `root`; an absolute `target`
/// must start with `root`), resolved without touching the disk: the path relative to the
/// root, or `None` when it leaves the root.
fn lexical(root: &Path, base: &Path, target: &Path) -> Option<PathBuf> {
    let (base, target) = match target.strip_prefix(root) {
        Ok(rest) if target.is_absolute() => (Path::new(""), rest),
        _ if target.is_absolute() => return None,
        _ => (base, target),
    };
    let mut out: Vec<&OsStr> = Vec::new();
    for c in base.components().chain(target.components()) {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out.iter().collect())
}

/// The names tried, in order, for what is moved aside: `{prefix}coder-quarantine-N` for N
/// from 1 to 999, then names with a random 64-bit suffix. The agent can make every
/// numbered name beforehand (a guard that then gave up failed the run closed and left its
/// `.claude/settings.json`, or its repository, in place, taken for the user's by the next
/// run's scan); it cannot guess the random ones.
fn aside_names(prefix: String) -> impl Iterator<Item = String> {
    let numbered = {
        let prefix = prefix.clone();
        (1..1000).map(move |n| format!("{prefix}coder-quarantine-{n}"))
    };
    let random = (0..64u64).map(move |n| {
        let r = getrandom::u64().unwrap_or_else(|_| {
            std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), n)
        });
        format!("{prefix}coder-quarantine-{r:016x}")
    });
    numbered.chain(random)
}

/// `name.`, the prefix of the names beside `name` it is moved aside to.
fn beside(name: &OsStr) -> String {
    format!("{}.", name.to_string_lossy())
}

/// Rename `dir/name` to `name.coder-quarantine-N` beside it, never over an existing name.
fn rename_aside(dir: BorrowedFd<'_>, name: &OsStr) -> Result<String, Errno> {
    for to in aside_names(beside(name)) {
        match nix::fcntl::renameat2(
            dir,
            name,
            dir,
            to.as_str(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => return Ok(to),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::EEXIST)
}

/// Make an empty directory `name.coder-quarantine-N` beside `dir/name`, never over an
/// existing name; its name.
fn mkdir_aside(dir: BorrowedFd<'_>, name: &OsStr) -> Result<String, Errno> {
    for to in aside_names(beside(name)) {
        match nix::sys::stat::mkdirat(dir, to.as_str(), FileMode::from_bits_truncate(0o700)) {
            Ok(()) => return Ok(to),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::EEXIST)
}

/// Create `dir/name` fresh with `text`, owned like `like` when coder is root.
fn write_new(dir: BorrowedFd<'_>, name: &str, text: &[u8], like: &FileStat) -> Result<(), Errno> {
    let how = beneath(OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL)
        .mode(FileMode::from_bits_truncate(0o644));
    let fd = openat2(dir, name, how)?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, text)
        .map_err(|e| e.raw_os_error().map_or(Errno::EIO, Errno::from_raw))?;
    if nix::unistd::geteuid().is_root() {
        let _ = nix::unistd::fchown(
            file.as_fd(),
            Some(nix::unistd::Uid::from_raw(like.st_uid)),
            Some(nix::unistd::Gid::from_raw(like.st_gid)),
        );
    }
    Ok(())
}

/// `dir/name`'s status, the entry itself (not a symlink's target); `None` when absent.
/// Whether the entry `name` of `dir` (`dir` itself when `name` is empty) was made before
/// `since_ns` by its birth time; true where there is none to read, or `since_ns` is 0
/// (not recorded). File times come from the coarse clock: an entry made within a tick
/// after `since_ns` may pass, one made before never fails.
fn made_before(dir: BorrowedFd<'_>, name: &OsStr, since_ns: i128) -> bool {
    since_ns == 0 || super::sys::birth_ns(dir, name).is_none_or(|born| born < since_ns)
}

fn entry_stat(dir: BorrowedFd<'_>, name: &str) -> Result<Option<FileStat>, Errno> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The content of a plain file `dir/name` (never following a symlink, never blocking on
/// a FIFO); `None` when it is not a plain file or larger than [`MAX_FILE`].
fn read_small(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<Vec<u8>>, Errno> {
    let fd = match openat2(dir, name, beneath(OFlag::O_RDONLY | OFlag::O_NONBLOCK)) {
        Ok(fd) => fd,
        Err(Errno::ELOOP | Errno::ENXIO) => return Ok(None),
        Err(Errno::EACCES) => {
            restore_owner_access(dir, name, 0o600)?;
            openat2(dir, name, beneath(OFlag::O_RDONLY | OFlag::O_NONBLOCK))?
        }
        Err(e) => return Err(e),
    };
    let st = fstat(fd.as_fd())?;
    if kind_of(&st) != Kind::File || st.st_size as u64 > MAX_FILE {
        return Ok(None);
    }
    let mut text = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_FILE)
        .read_to_end(&mut text)
        .map_err(|e| e.raw_os_error().map_or(Errno::EIO, Errno::from_raw))?;
    Ok(Some(text))
}

/// Give the owner back `bits` on `dir/name` when coder owns it (the agent may have taken
/// them away to hide a repository); anything else keeps the original error.
/// The directory open as `dir` (`st` its status), when coder's user owns it and the agent
/// took any of the owner's bits away: read, write and search given back to the owner.
fn give_owner_access(dir: BorrowedFd<'_>, st: &FileStat) -> Result<(), Errno> {
    if st.st_uid != nix::unistd::geteuid().as_raw() || st.st_mode & 0o700 == 0o700 {
        return Ok(());
    }
    let mode = FileMode::from_bits_truncate((st.st_mode & 0o7777) | 0o700);
    nix::sys::stat::fchmod(dir, mode)
}

fn restore_owner_access(dir: BorrowedFd<'_>, name: &OsStr, bits: u32) -> Result<(), Errno> {
    let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if st.st_uid != nix::unistd::geteuid().as_raw() || kind_of(&st) == Kind::Symlink {
        return Err(Errno::EACCES);
    }
    let mode = FileMode::from_bits_truncate((st.st_mode & 0o7777) | bits);
    nix::sys::stat::fchmodat(
        dir,
        name,
        mode,
        nix::sys::stat::FchmodatFlags::NoFollowSymlink,
    )
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.git` file, symlink or directory sharing the user's common dir, in a tree
    /// outside the guarded ones, is moved aside, old or new; one leading to another
    /// repository, the user's git dir itself and what a guarded tree holds are not.
    #[test]
    fn pointers_to_the_users_git_dir_outside_the_trees_are_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let (ws, tmp) = (dir.path().join("ws"), dir.path().join("tmp"));
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(dir.path().join("other/.git")).unwrap();
        let st = std::fs::metadata(ws.join(".git")).unwrap();
        use std::os::unix::fs::MetadataExt;
        let gitdir = format!("gitdir: {}\n", ws.join(".git").display());
        for sub in ["file", "link", "dir", "other", "bare"] {
            std::fs::create_dir_all(tmp.join(sub)).unwrap();
        }
        std::fs::write(tmp.join("file/.git"), &gitdir).unwrap();
        std::os::unix::fs::symlink(ws.join(".git"), tmp.join("link/.git")).unwrap();
        std::fs::create_dir(tmp.join("dir/.git")).unwrap();
        std::fs::write(tmp.join("dir/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(tmp.join("dir/.git/commondir"), "../../../ws/.git\n").unwrap();
        std::fs::write(tmp.join("bare/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(tmp.join("bare/commondir"), "../../ws/.git\n").unwrap();
        let other = format!("gitdir: {}\n", dir.path().join("other/.git").display());
        std::fs::write(tmp.join("other/.git"), other).unwrap();
        // A guarded tree in the walked one, its own guard's: its pointer is left.
        std::fs::create_dir_all(tmp.join("guarded")).unwrap();
        std::fs::write(tmp.join("guarded/.git"), &gitdir).unwrap();
        // The user's git dir itself, in the walked tree.
        std::fs::create_dir_all(tmp.join("own/.git")).unwrap();
        let own = std::fs::metadata(tmp.join("own/.git")).unwrap();
        let known: HashSet<(u64, u64)> = [(st.dev(), st.ino()), (own.dev(), own.ino())].into();
        let mut report = GuardReport::default();
        move_new_tops_aside(
            std::slice::from_ref(&tmp),
            &known,
            &[tmp.join("guarded")],
            GuardLimits::default(),
            &mut report,
        );
        assert!(report.incomplete.is_none(), "{report:?}");
        let mut moved: Vec<String> = report
            .quarantined
            .iter()
            .map(|q| format!("{}:{}", q.path, q.moved.join(",")))
            .collect();
        moved.sort();
        let at = |rel: &str| tmp.join(rel).display().to_string();
        assert_eq!(
            moved,
            [
                format!("{}:commondir", at("bare")),
                format!("{}:.git", at("dir/.git")),
                format!("{}:.git", at("file/.git")),
                format!("{}:.git", at("link/.git")),
            ]
        );
        assert!(tmp.join("other/.git").exists() && tmp.join("guarded/.git").exists());
        assert!(tmp.join("own/.git").exists());
        assert!(!tmp.join("file/.git").exists() && !tmp.join("bare/commondir").exists());
    }

    #[test]
    fn lexical_resolution_stays_inside() {
        let p = |s: &str| PathBuf::from(s);
        let r = p("/w/s");
        assert_eq!(lexical(&r, &p("a/b/.git"), &p("../../x")), Some(p("a/x")));
        assert_eq!(lexical(&r, &p("a"), &p("./b/../c")), Some(p("a/c")));
        assert_eq!(lexical(&r, &p("a"), &p("../..")), None);
        assert_eq!(lexical(&r, &p("a"), &p("/etc")), None);
        assert_eq!(lexical(&r, &p(""), &p("..")), None);
        assert_eq!(lexical(&r, &p("a"), &p("/w/s/.git/x")), Some(p(".git/x")));
        assert_eq!(lexical(&r, &p("a"), &p("/w/s/../t")), None);
        assert_eq!(lexical(&r, &p("a"), &p("/w/st")), None);
    }

    #[test]
    fn protected_names_the_scan_did_not_hold_are_moved_aside() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for rel in [
            "held/.claude/settings.json",
            "pkg/.envrc",
            "pkg/.vscode/tasks.json",
            "pkg/.vscode/sub/launch.json",
            "lefthook.yml",
            "src/main.rs",
        ] {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        std::fs::create_dir_all(root.join("empty/.claude")).unwrap();
        let meta = std::fs::symlink_metadata(root.join("held/.claude")).unwrap();
        let tools = ToolGuard {
            trees: vec![ToolTree {
                root: root.clone(),
                globs: [
                    "**/.claude/**",
                    "**/.envrc",
                    "**/.vscode/**",
                    "**/lefthook.yml",
                ]
                .iter()
                .map(|g| g.to_string())
                .collect(),
                made_scripts: false,
                compiled: CompiledGlobs::default(),
            }],
            held: vec![(meta.dev(), meta.ino())],
            // As a run's: after everything above was made.
            held_since_ns: crate::workspace::scan::now_ns(),
        };
        let report = guard_trees(
            std::slice::from_ref(&root),
            &HashSet::new(),
            &tools,
            &ScanListings::default(),
            GuardLimits::default(),
        );
        assert!(report.incomplete.is_none(), "{report:?}");
        let mut moved: Vec<(String, Vec<String>)> = report
            .quarantined
            .iter()
            .filter(|q| q.kind == QuarantineKind::ToolConfig)
            .map(|q| {
                let mut names = q.moved.clone();
                names.sort();
                (q.path.clone(), names)
            })
            .collect();
        moved.sort();
        let at = |rel: &str| root.join(rel).display().to_string();
        let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            moved,
            vec![
                (at("lefthook.yml"), names(&["lefthook.yml"])),
                (at("pkg/.envrc"), names(&[".envrc"])),
                (at("pkg/.vscode"), names(&["sub", "tasks.json"])),
            ]
        );
        // Held: untouched; empty: left alone; a directory stays, its contents aside.
        assert!(root.join("held/.claude/settings.json").is_file());
        assert!(root.join("empty/.claude").is_dir());
        assert!(!root.join("empty/.claude.coder-quarantine-1").exists());
        assert!(root.join("pkg/.envrc.coder-quarantine-1").is_file());
        assert!(root.join("lefthook.yml.coder-quarantine-1").is_file());
        assert!(root.join("pkg/.vscode").is_dir());
        assert!(
            root.join("pkg/.vscode.coder-quarantine-1/tasks.json")
                .is_file()
        );
        assert!(
            root.join("pkg/.vscode.coder-quarantine-1/sub/launch.json")
                .is_file()
        );
        assert!(root.join("src/main.rs").is_file());
    }

    #[test]
    fn exec_lines_are_commented_out_and_nothing_else() {
        let todo = b"pick 1 a\nexec touch /x\n  x  touch /y\nexecute 2\n# exec c\nbreak";
        let out = without_exec_lines(todo).unwrap();
        assert_eq!(
            out,
            b"pick 1 a\n# coder removed: exec touch /x\n# coder removed:   x  touch /y\n\
              execute 2\n# exec c\nbreak"
                .to_vec()
        );
        assert_eq!(without_exec_lines(b"pick 1 a\nbreak\n"), None);
    }

    #[test]
    fn gitfile_format() {
        assert_eq!(
            gitfile_target(b"gitdir: ../x\n"),
            Some(PathBuf::from("../x"))
        );
        assert_eq!(gitfile_target(b"gitdir:../x\n"), None);
        // Like git: an embedded newline is part of the path, a NUL ends it.
        assert_eq!(
            gitfile_target(b"gitdir: x\n/../../y\r\n"),
            Some(PathBuf::from("x\n/../../y"))
        );
        assert_eq!(
            gitfile_target(b"gitdir: x\0/../y"),
            Some(PathBuf::from("x"))
        );
        assert_eq!(trim_end(b"x\x0b \t\r\n", b" \t\r\n"), b"x\x0b");
        assert_eq!(trim_end(b"x\x0c\n", b" \t\r\n"), b"x\x0c");
        assert_eq!(gitfile_target(b"gitdir: \n"), None);
    }
}
