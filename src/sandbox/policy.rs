//! The policy: which paths the agent may read and write, which hosts it may reach through
//! the egress proxy, which files are masked, and which environment it gets, resolved once in the parent.
//!
//! Resolution is where the judgement happens, so enforcement ([`super::confine`]) can be a
//! mechanical replay in a process that has nothing else to do. Every path in a policy is
//! canonical (no symlink anywhere in it); names reached through symlinks (`/lib64`,
//! a dotfile that points into a dotfiles repository) are recorded as [`SymlinkAlias`]es so
//! the private root can recreate them. The policy is plain data (serde), because the parent
//! hands it to a re-executed helper process.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::allow::HostPort;
use super::home::{account_home, env_path, homes_here, never_visible_places};
use super::lease::{PlaceholderLease, remove_placeholders};
use super::listing::ScanListings;
use super::listing_cache;
use super::netns::{NO_PROXY_VARS, NetworkPolicy, PROXY_VARS};
use super::scan::{self, Mask, MaskKind, Placeholder, ScanLimits};
use super::{CoderDir, PathRole, SandboxError};
use super::{deny, home};
use crate::config::run_dirs::{self, CLI_RUNS_DIR, RunLock};
use crate::config::scratch::{self, SANDBOX_RUNS_DIR, Scratch};
use crate::workspace::worktree::WORKTREES_DIR;

/// Workspace paths the agent may read but not write, create, delete or rename, because
/// programs the user runs later, outside the sandbox, execute what they say (editor tasks,
/// MCP servers, Claude hooks, direnv, git hook managers). Relative to each writable tree's
/// root, in every directory of it: Claude Code run in a subdirectory reads that
/// directory's `.claude/settings.json` and `.mcp.json`, VS Code opened on a subfolder its
/// `.vscode/tasks.json`, direnv loads a nested `.envrc` on `cd`. A plain name (`**/NAME`,
/// `**/NAME/**`) is also held at the root when absent ([`super::scan::literal_protected`]);
/// one that appears anywhere else during the run is moved aside at its end
/// ([`super::gitguard`]).
pub const DEFAULT_PROTECT_GLOBS: [&str; 13] = [
    "**/.claude/**",
    // Personal instructions every later run of the CLI loads (also unconfined ones).
    "**/CLAUDE.local.md",
    "**/.mcp.json",
    "**/.vscode/**",
    "**/.idea/**",
    "**/.envrc",
    "**/.githooks/**",
    "**/.husky/**",
    // Git hook managers: what they name runs at the user's next commit (pre-commit's
    // `repo: local` hooks, lefthook's `run:`, lint-staged's and simple-git-hooks'
    // commands). Inside `package.json` they cannot be held by path (SECURITY.md).
    "**/.pre-commit-config.{yaml,yml}",
    "**/{lefthook,.lefthook,lefthook-local,.lefthook-local}.{yml,yaml,json,jsonc,toml}",
    "**/.lintstagedrc*",
    "**/lint-staged.config.*",
    "**/{simple-git-hooks,.simple-git-hooks}.*",
];

/// System trees that are never a workspace (nor anything under them): granting one
/// read-write would hand the agent the machine, and none is a project.
const REFUSED_WORKSPACE_TREES: [&str; 7] =
    ["/proc", "/sys", "/dev", "/run", "/boot", "/etc", "/usr"];

/// How much the agent may do (the run mode's `--sandbox MODE` and `coder sandbox --mode`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    // The doc comments are the help text of `--sandbox` and `--mode`.
    /// The agent reads the workspace and the system, and writes only its private temp and
    /// config directories.
    ReadOnly,
    /// As read-only, plus writing the workspace (and the --write paths).
    #[default]
    WorkspaceWrite,
    /// No confinement at all: the agent reads and writes whatever you can (it still gets a
    /// private temp and config directory).
    DangerFullAccess,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::DangerFullAccess => "danger-full-access",
        }
    }

    /// Whether this mode confines at all.
    pub fn is_confined(self) -> bool {
        self != Mode::DangerFullAccess
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-only" => Ok(Mode::ReadOnly),
            "workspace-write" => Ok(Mode::WorkspaceWrite),
            "danger-full-access" => Ok(Mode::DangerFullAccess),
            other => Err(format!(
                "unknown sandbox mode {other:?} (expected read-only, workspace-write or \
                 danger-full-access)"
            )),
        }
    }
}

/// What the agent may do beneath a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Read files, list directories, execute.
    Read,
    /// Read a device and write to it (`/dev/null`), nothing else.
    Device,
    /// Everything: create, write, remove, rename, link.
    Write,
}

/// A path the agent may reach, with what it may do there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// Canonical absolute path.
    #[serde(with = "super::bytes")]
    pub path: PathBuf,
    pub access: Access,
    pub is_dir: bool,
}

/// A name that leads to a granted path through a symlink, recreated in the private root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SymlinkAlias {
    /// Absolute path of the symlink (its parent is canonical).
    #[serde(with = "super::bytes")]
    pub path: PathBuf,
    /// The link's target, verbatim.
    #[serde(with = "super::bytes")]
    pub target: PathBuf,
}

/// What the caller asks for. [`PolicyOptions::new`] fills the defaults from the
/// environment (`HOME`, `XDG_*`); the fields can then be adjusted.
#[derive(Debug, Clone)]
pub struct PolicyOptions {
    pub mode: Mode,
    pub workspace: PathBuf,
    /// The user's home directory (refused as a workspace; source of toolchains).
    pub home: Option<PathBuf>,
    /// Extra roots readable by the agent (`--read`). Not scanned for secrets beyond the
    /// globs; they are granted as a whole.
    pub extra_read: Vec<PathBuf>,
    /// Extra roots writable by the agent (`--write`).
    pub extra_write: Vec<PathBuf>,
    /// Make the shared `/tmp` writable (`--allow-tmp`); by default only a private temp is.
    pub allow_tmp: bool,
    /// Make the usual tool caches writable (`~/.cache`, `~/.cargo/registry`, `~/.npm`...).
    pub tool_caches: bool,
    /// Destinations the agent may reach through the egress proxy (the backend's endpoint,
    /// `--allow-host`).
    pub allow_hosts: Vec<HostPort>,
    /// The proxy's port on the agent's private loopback.
    pub proxy_port: u16,
    /// Non-accessible globs, relative to each scanned root.
    pub deny_globs: Vec<String>,
    /// Protected globs, relative to the workspace (`--protect`, `--no-protect`).
    pub protect_globs: Vec<String>,
    pub scan_limits: ScanLimits,
    /// Stops the setup scan midway when the caller is stopped ([`super::SetupCancel`]).
    pub cancel: super::SetupCancel,
    /// `CLAUDE_CONFIG_DIR` for the agent; default `claude` in coder's state
    /// directory (`$CODER_STATE_DIR`, `$XDG_STATE_HOME/coder`, `~/.local/state/coder`).
    pub config_dir: Option<PathBuf>,
    /// Where per-run directories are created (the agent's `TMPDIR`s beside it, in the
    /// same name with `-tmp`); default: coder's own in the scratch place
    /// (`config::scratch`), the `TMPDIR`s in the state directory ([`RunPlaces::choose`]).
    pub runs_dir: Option<PathBuf>,
    /// The home keys' places the run mode's check resolved ([`workspace_refusal_keeping`]),
    /// taken by the first policy resolved with these options.
    pub keys: home::KeyHandoff,
}

impl PolicyOptions {
    /// Options for `mode` in `workspace`, with defaults taken from this process's
    /// environment.
    pub fn new(mode: Mode, workspace: impl Into<PathBuf>) -> Self {
        PolicyOptions {
            mode,
            workspace: workspace.into(),
            home: home_or_account(),
            extra_read: Vec::new(),
            extra_write: Vec::new(),
            allow_tmp: false,
            tool_caches: false,
            allow_hosts: Vec::new(),
            proxy_port: super::netns::DEFAULT_PROXY_PORT,
            deny_globs: deny::deny_globs(Vec::<String>::new()),
            protect_globs: DEFAULT_PROTECT_GLOBS
                .iter()
                .map(|g| g.to_string())
                .collect(),
            scan_limits: ScanLimits::default(),
            cancel: super::SetupCancel::default(),
            config_dir: None,
            runs_dir: None,
            keys: home::KeyHandoff::default(),
        }
    }
}

/// The resolved policy, ready to be serialized and enforced by [`super::confine`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub mode: Mode,
    /// Canonical workspace; the agent's working directory.
    #[serde(with = "super::bytes")]
    pub workspace: PathBuf,
    /// Device and inode of the workspace as resolved (by descriptor): the helper refuses
    /// to confine when the path now leads elsewhere.
    pub workspace_id: (u64, u64),
    #[serde(with = "super::bytes::option")]
    pub home: Option<PathBuf>,
    /// Granted paths, sorted, canonical.
    pub roots: Vec<Root>,
    /// Symlinked names leading to granted paths.
    pub aliases: Vec<SymlinkAlias>,
    /// Masks, sorted so that a directory comes before what it contains.
    pub masks: Vec<Mask>,
    /// TCP ports Landlock lets the agent connect to: the proxy's, on its private loopback.
    pub connect_ports: Vec<u16>,
    /// The private network and the egress proxy's allow-list.
    pub network: NetworkPolicy,
    pub deny_globs: Vec<String>,
    pub protect_globs: Vec<String>,
    /// Names created so that absent protected names can be masked; removed after the run.
    pub placeholders: Vec<Placeholder>,
    /// What the user should know about this policy (git metadata left read-only, ...).
    pub warnings: Vec<String>,
    /// This run's private directory of coder's own files (the git identity, the guard
    /// record, `nest/`, the empty mask file; the private root's mount point), in the
    /// scratch place (`config::scratch`, a tmpfs where there is one). The parent removes it
    /// after the run ([`Policy::cleanup`]).
    #[serde(with = "super::bytes")]
    pub run_dir: PathBuf,
    /// The agent's `TMPDIR`: a directory of its own, locked as a run directory is, on disk
    /// (the state directory's `sandbox-tmp/`), never in a tmpfs scratch place that the
    /// agent's files could fill. Removed after the run with the run directory.
    #[serde(with = "super::bytes")]
    pub tmp_dir: PathBuf,
    /// Where a guard that stopped short keeps its record for the next run (on disk: the
    /// state directory's `sandbox/`, or the caller's runs directory).
    #[serde(skip)]
    pub(crate) records_dir: PathBuf,
    /// Variables the agent's environment must have.
    pub env_set: BTreeMap<String, String>,
    /// Variables the agent's environment must not have (agent sockets, session buses).
    pub env_remove: Vec<String>,
    /// The writable trees the end-of-run git guard walks (the workspace in
    /// `workspace-write`, `--write` directories).
    #[serde(default, with = "super::bytes::vec")]
    pub guard_roots: Vec<PathBuf>,
    /// Device and inode of every git dir (and `.git` file or symlink) the scan guarded:
    /// the git guard leaves these alone.
    #[serde(default)]
    pub git_known: Vec<(u64, u64)>,
    /// The trees the agent may write besides the guarded ones where a new way into the
    /// user's repositories is looked for after the run (the host's `/tmp` with
    /// `--allow-tmp`; [`super::gitguard::move_new_tops_aside`]), coder's own.
    #[serde(skip)]
    pub outside_roots: Vec<PathBuf>,
    /// When the policy was made (ns since the epoch, less a margin that covers the
    /// coarse clock file times come from): what changed since is the run's to answer for.
    #[serde(skip)]
    pub started_ns: i128,
    /// The protected globs of the trees the scan held them in, and what it held: the
    /// end-of-run guard moves aside a protected name that appeared or changed during the
    /// run (coder's own; the helper does not need it).
    #[serde(skip)]
    pub tool_guard: super::gitguard::ToolGuard,
    /// The scan's listings of the writable trees, so the git guard can skip directories
    /// that did not change (coder's own; the helper does not need them).
    #[serde(skip)]
    pub dir_listings: ScanListings,
    /// The directory of the scan's listings caches ([`super::listing_cache`]), every
    /// workspace's, when this run's agent can write into it: removed before the agent
    /// starts and again at the end, so that no later run trusts what it wrote.
    #[serde(skip)]
    pub reachable_listings: Option<PathBuf>,
    /// `coder plan`: the one file the agent may write besides its private directories
    /// ([`Policy::grant_plan_file`]).
    #[serde(default)]
    pub plan_file: Option<PlanFile>,
    /// This run's hold on the placeholders of its writable trees, shared with other runs
    /// in them ([`super::lease`]); none without a writable tree.
    #[serde(skip)]
    pub(crate) lease: Held<PlaceholderLease>,
    /// The user's keys the private root may show through a system path, masked there by
    /// the helper ([`super::hostmask::HostSecrets`]).
    #[serde(default)]
    pub host_secrets: super::hostmask::HostSecrets,
    /// This run's lock on its run directory ([`crate::config::run_dirs`]): no other
    /// coder prunes the directory while it is held.
    #[serde(skip)]
    pub(crate) run_lock: Held<RunLock>,
    /// The same on its `TMPDIR`.
    #[serde(skip)]
    pub(crate) tmp_lock: Held<RunLock>,
}

/// Now, less two seconds (ns since the epoch): file times come from the coarse clock,
/// a tick behind this one at most, and some file systems keep them to the second.
fn started_ns() -> i128 {
    crate::workspace::scan::now_ns() - 2_000_000_000
}

/// A hold a policy keeps for its run (its [`PlaceholderLease`], its [`RunLock`]), if it
/// has one; shared by the policy's clones. Two policies are equal by what they enforce;
/// which hold objects a run keeps is not part of that.
#[derive(Debug)]
pub(crate) struct Held<T>(pub(crate) Option<Arc<T>>);

impl<T> Default for Held<T> {
    fn default() -> Self {
        Held(None)
    }
}

impl<T> Clone for Held<T> {
    fn clone(&self) -> Self {
        Held(self.0.clone())
    }
}

impl<T> PartialEq for Held<T> {
    fn eq(&self, _: &Held<T>) -> bool {
        true
    }
}

impl<T> Eq for Held<T> {}

/// What removes a run's own traces once its processes are gone: its private directory,
/// its placeholders (through the lease shared with the other runs in its trees or, for a
/// policy that has none, directly) and its run lock file. Kept apart from the policy so
/// that the run mode can hold it in a guard ([`super::RunDirCleanup`]).
#[derive(Debug, Clone)]
pub struct RunCleanup {
    run_dir: PathBuf,
    tmp_dir: PathBuf,
    lease: Option<Arc<PlaceholderLease>>,
    own: Vec<Placeholder>,
    run_lock: Held<RunLock>,
}

impl RunCleanup {
    /// The run directory and the placeholders are removed side by side (on ext4 under load
    /// each removal can wait milliseconds for the journal); the lock file goes last, so
    /// that no other coder prunes the directory meanwhile. Errors are ignored: leftovers
    /// are pruned by a later run.
    pub fn run(&self) {
        let dirs = || {
            discard_run_dir(&self.run_dir);
            discard_run_dir(&self.tmp_dir);
        };
        std::thread::scope(|s| {
            // No thread to spare: the run dirs go after the placeholders.
            let spawned = std::thread::Builder::new().spawn_scoped(s, dirs);
            match &self.lease {
                Some(lease) => lease.release(),
                None => remove_placeholders(&self.own, None),
            }
            if spawned.is_err() {
                dirs();
            }
        });
        // `coder sandbox` may end by a signal right after, without dropping the policy.
        if let Some(lock) = &self.run_lock.0 {
            lock.unlink();
        }
    }
}

/// Removes a run's directory (its own, or its `TMPDIR`), whose processes are gone:
/// coder's own entries that are not owner-only (the nesting wrapper's link, the masks'
/// read-only empty file) go first, then the rest (the agent's `$TMPDIR` with the CLI's
/// temporary directories, the git guard's files) is moved into coder's trash by one rename
/// when all of it is owner-only (the directory's default ACL makes what the agent creates
/// so) and it lies in the state directory, or else removed in place (in a tmpfs scratch
/// place: microseconds, and a rename would cross file systems). Its processes are gone, so
/// nothing changes the tree between the check and the rename.
fn discard_run_dir(run_dir: &Path) {
    let _ = fs::remove_file(run_dir.join(super::nest::NEST_DIR).join("bash"));
    let _ = fs::remove_file(run_dir.join(MASK_SOURCE));
    // Only a run dir of the state's own `sandbox/` or `sandbox-tmp/` (not one in a scratch
    // place or a caller's runs dir): the trash is the state's, and only its own runs prune
    // it.
    let moved = coder_state_dir()
        .ok()
        .and_then(|state| fs::canonicalize(state).ok())
        .filter(|state| run_dir.parent().and_then(Path::parent) == Some(state.as_path()))
        .is_some_and(|state| super::trash::discard_own(&state, run_dir));
    if !moved {
        run_dirs::remove_tree(run_dir);
    }
}

/// The plan file of `coder plan` (DESIGN §9): the only file of the user's the agent may
/// write. The helper mounts exactly this inode (by device and inode, so a path swapped
/// after resolution is refused) and Landlock grants it read, write and truncate, nothing
/// else: no rename, unlink, link or sibling, and the workspace stays read-only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanFile {
    /// Canonical absolute path (no symlink anywhere in it).
    #[serde(with = "super::bytes")]
    pub path: PathBuf,
    /// Device and inode as resolved.
    pub id: (u64, u64),
    /// Whether it lies inside the workspace (whose mount then stays writable for the
    /// CLI's in-place write fallback; Landlock alone holds the rest of the workspace).
    pub in_workspace: bool,
}

/// Variables that hand the agent a door out of the sandbox (an agent or bus socket).
const ENV_REMOVE: [&str; 8] = [
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DOCKER_HOST",
    "KRB5CCNAME",
    "CLAUDECODE",
    "WAYLAND_DISPLAY",
];

/// System locations every confined mode may read (skipped when missing).
const SYSTEM_READ: [&str; 16] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
    "/run/current-system",
    "/snap",
    "/var/lib/ca-certificates",
    "/run/systemd/resolve",
    "/proc",
    "/sys",
];

/// The system's TLS trust stores (skipped when missing), which a key variable may not
/// cover, hold, nor name a file of: `DOCKER_CONFIG=/etc/ssl/certs` hid the CA roots as
/// Docker's keys, and every HTTPS call the agent made failed with a certificate error
/// naming nothing of coder's (round twenty-eight's review).
const TRUST_STORES: [&str; 6] = [
    "/etc/ssl/certs",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
    "/etc/ca-certificates",
    "/usr/share/ca-certificates",
    "/usr/local/share/ca-certificates",
];

/// Names in the private Claude config dir the CLI loads code or instructions from
/// (hooks, agents, commands, skills): read-only for the agent, and made first when absent
/// (see [`hold_config_names`]).
const CONFIG_GUARDED: [(&str, ConfigName); 6] = [
    ("settings.json", ConfigName::Settings),
    ("settings.local.json", ConfigName::Settings),
    ("CLAUDE.md", ConfigName::Text),
    ("agents", ConfigName::Listed),
    ("commands", ConfigName::Listed),
    ("skills", ConfigName::Listed),
];

/// What an absent guarded name of the config dir is made as: what the CLI reads as
/// nothing configured.
#[derive(Clone, Copy)]
enum ConfigName {
    /// A settings file: `{}`. (An empty file reads as no settings too, and saves the bare
    /// CLI 1.2 ms of its start, but nothing measurable inside coder, whose `--settings`
    /// already costs what a settings object does: round twenty-nine.)
    Settings,
    /// An empty file.
    Text,
    /// A directory the CLI lists (`agents/`, `commands/`, `skills/`): an empty file in its
    /// place, which the CLI (2.1.330) reads as no directory, with the same agents,
    /// commands and skills in its `init` event. Held as empty directories until round
    /// twenty-nine, they cost the CLI 2.4 ms of its start (their listings, in its
    /// `setup_uds` phase, `scripts/bench-layers --profile`, arms `fresh_hd` and
    /// `fresh_hdf`); held read-only either way, so nothing can be made in their place.
    Listed,
}

/// What earlier runs left to do, done before this run's directories are made: the
/// end-of-run git guard of a run whose coder was killed (its record goes with its
/// directory), and a guard that stopped short checked again before this run's scan takes
/// what it did not reach for the user's (a confined run over those trees is refused
/// while that stops too); then dead runs' directories are pruned. Every place a run
/// directory may be in is read: the environment that chose a killed run's place may
/// differ from this run's. The warnings to pass on.
fn finish_earlier_runs(
    opts: &PolicyOptions,
    places: &RunPlaces,
    workspace: &Path,
) -> Result<Vec<String>, SandboxError> {
    let mut late_guard = Vec::new();
    for dir in &places.every {
        late_guard.extend(super::gitguard::finish_dead_runs(dir, &places.records));
    }
    let trees: Vec<PathBuf> = match opts.mode.is_confined() {
        true => std::iter::once(workspace.to_path_buf())
            .chain(
                opts.extra_write
                    .iter()
                    .map(|p| fs::canonicalize(p).unwrap_or_else(|_| p.clone())),
            )
            .collect(),
        false => Vec::new(),
    };
    for dir in &places.every {
        late_guard.extend(super::gitguard::finish_stopped_guards(dir, &trees)?);
    }
    for dir in places.every.iter().chain([&places.tmp]) {
        run_dirs::prune_dead_run_dirs(dir);
    }
    Ok(late_guard)
}

/// A run's directories and their locks, as the policy keeps them ([`RunDirs`] without the
/// guards that remove the directories when the policy is not made).
struct RunDirsHeld {
    run_dir: PathBuf,
    run_lock: RunLock,
    tmp_dir: PathBuf,
    tmp_lock: RunLock,
    tools_tmp: PathBuf,
}

/// What [`Policy::resolve`] found before a confined run's grants: the deny globs being
/// compiled, the home keys' places, the workspace's descriptor and what earlier runs left.
struct EarlierFound<'a> {
    deny: DenyGlobs,
    keys: &'a home::KeyPlaces,
    ws_dir: &'a WorkspaceDir,
    late_guard: Vec<String>,
}

/// The home keys' places for a run: those the caller resolved (`opts.keys`, taken once)
/// with every home's never-visible places added, resolved once for the run's checks (by
/// the run mode's check of the workspace, when it made one).
fn run_key_places(opts: &PolicyOptions, home: Option<&Path>) -> home::KeyPlaces {
    let homes = with_account_home(home).into_iter().chain(homes_here());
    match opts.keys.take() {
        Some(mut keys) => {
            keys.add(homes);
            keys
        }
        None => home::KeyPlaces::of(homes),
    }
}

/// This run's own directory and its `TMPDIR` directory (each locked, and removed on drop
/// unless kept), and the tool commands' `TMPDIR` inside the latter.
struct RunDirs {
    run_dir: PathBuf,
    run_lock: RunLock,
    made: MadeRunDir,
    tmp_dir: PathBuf,
    tmp_lock: RunLock,
    made_tmp: MadeRunDir,
    tools_tmp: PathBuf,
}

impl RunDirs {
    fn make(places: &RunPlaces) -> Result<RunDirs, SandboxError> {
        let name = format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
        let (run_dir, run_lock, made) = make_run_dir(&places.own.join(&name))?;
        // What the agent and the CLI create in it is owner-only, as everything else in
        // coder's state: then it can leave by coder's trash.
        let (tmp_dir, tmp_lock, made_tmp) =
            make_run_dir(&places.tmp.join(format!("{name}{TMP_SUFFIX}")))?;
        super::trash::make_owner_only_inherited(&tmp_dir);
        let tools_tmp = tmp_dir.join(TOOLS_TMP);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&tools_tmp)
            .map_err(|e| SandboxError::io(format!("create {}", tools_tmp.display()), e))?;
        Ok(RunDirs {
            run_dir,
            run_lock,
            made,
            tmp_dir,
            tmp_lock,
            made_tmp,
            tools_tmp,
        })
    }
}

/// The child's environment changes and its network: the CLI's config and scratch
/// directories, the tools' `TMPDIR`, and in a confined run the proxy.
struct RunEnv {
    env_set: BTreeMap<String, String>,
    env_remove: Vec<String>,
    network: NetworkPolicy,
    connect_ports: Vec<u16>,
}

impl RunEnv {
    fn for_run(
        opts: &PolicyOptions,
        config_dir: &Path,
        tools_tmp: &Path,
        tmp_dir: &Path,
    ) -> RunEnv {
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let mut env_set = BTreeMap::new();
        env_set.insert("CLAUDE_CONFIG_DIR".to_string(), text(config_dir));
        // The tool commands' `TMPDIR` is a directory of the CLI's scratch: the nested
        // domain of tool commands writes there and not beside it (`nest`).
        env_set.insert("TMPDIR".to_string(), text(tools_tmp));
        env_set.insert("CLAUDE_CODE_TMPDIR".to_string(), text(tmp_dir));
        // One private directory serves as both: it is created and deleted on every run,
        // and each directory more is work for the filesystem and one more tree to mount.
        env_set.insert("XDG_RUNTIME_DIR".to_string(), text(tmp_dir));
        let mut env_remove: Vec<String> = ENV_REMOVE.iter().map(|s| s.to_string()).collect();
        let mut allow = opts.allow_hosts.clone();
        allow.sort();
        allow.dedup();
        let network = NetworkPolicy {
            proxy_port: opts.proxy_port,
            allow,
        };
        let mut connect_ports = Vec::new();
        if opts.mode.is_confined() {
            for name in PROXY_VARS {
                env_set.insert(name.to_string(), network.proxy_url());
            }
            env_remove.extend(NO_PROXY_VARS.iter().map(|s| s.to_string()));
            connect_ports.push(network.proxy_port);
        }
        RunEnv {
            env_set,
            env_remove,
            network,
            connect_ports,
        }
    }
}

/// The user's `--read` and `--write` grants, each refused where it would hand the agent
/// the home directory's keys, a system tree, or (read-only mode) the workspace; a
/// writable directory is a tree of the end-of-run guard. The trees the scan must read
/// (canonical, and whether writable).
fn add_user_grants(
    grants: &mut Grants,
    policy: &mut Policy,
    opts: &PolicyOptions,
    (home, keys): (Option<&Path>, &home::KeyPlaces),
) -> Result<Vec<(PathBuf, bool)>, SandboxError> {
    let mut scanned = Vec::new();
    for path in &opts.extra_read {
        let canonical = canonicalize(PathRole::ReadFlag, path)?;
        refuse_home_secrets(PathRole::ReadFlag, &canonical, home, keys)?;
        grants.add(path, Access::Read)?;
        scanned.push((canonical, false));
    }
    for path in &opts.extra_write {
        let canonical = canonicalize(PathRole::WriteFlag, path)?;
        refuse_broad_write(&canonical, home, keys)?;
        refuse_home_secrets(PathRole::WriteFlag, &canonical, home, keys)?;
        if opts.mode == Mode::ReadOnly && policy.workspace.starts_with(&canonical) {
            return Err(SandboxError::Path {
                what: PathRole::WriteFlag,
                path: canonical,
                reason: "contains the workspace, which read-only mode keeps read-only".to_string(),
            });
        }
        grants.add(path, Access::Write)?;
        if canonical.is_dir() {
            policy.guard_roots.push(canonical.clone());
        }
        scanned.push((canonical, true));
    }
    Ok(scanned)
}

/// What [`Policy::take_scan`] takes of the scan and the run's setup.
struct ScanResult<'a> {
    found: Result<(scan::ScanOutput, Vec<super::gitguard::ToolTree>), SandboxError>,
    /// The `--read`/`--write` trees the scan read (canonical, and whether writable).
    scanned: &'a [(PathBuf, bool)],
    keys: &'a home::KeyPlaces,
    /// What finishing earlier runs' guards reported.
    late_guard: Vec<String>,
    config: ConfigDir<'a>,
}

/// What every confined run may read of the system, and the harmless devices.
fn system_grants() -> Result<Grants, SandboxError> {
    let mut grants = Grants::default();
    for path in SYSTEM_READ {
        grants.add_optional(Path::new(path), Access::Read)?;
    }
    for dev in ["/dev/null", "/dev/zero", "/dev/full"] {
        grants.add_optional(Path::new(dev), Access::Device)?;
    }
    for dev in ["/dev/random", "/dev/urandom"] {
        grants.add_optional(Path::new(dev), Access::Read)?;
    }
    Ok(grants)
}

/// The home directory's grants ([`home::home_grants`]; the tool caches writable when
/// asked, in workspace-write mode) and the run's git identity as `GIT_CONFIG_GLOBAL`.
fn add_home_grants(
    grants: &mut Grants,
    policy: &mut Policy,
    opts: &PolicyOptions,
    (home, keys): (&Path, &home::KeyPlaces),
) -> Result<(), SandboxError> {
    let writable_caches = opts.tool_caches && opts.mode == Mode::WorkspaceWrite;
    let never = keys.grant_entries(home);
    for (path, access) in home::home_grants_with(home, writable_caches, &never) {
        let access = match access {
            home::HomeAccess::Read => Access::Read,
            home::HomeAccess::Write => Access::Write,
        };
        grants.add(&path, access)?;
    }
    let identity = write_git_identity(&policy.run_dir, home)?;
    grants.add_own(&identity, Access::Read)?;
    policy.env_set.insert(
        "GIT_CONFIG_GLOBAL".to_string(),
        identity.to_string_lossy().into_owned(),
    );
    Ok(())
}

/// The run's own grants: the workspace (writable in workspace-write mode), the CLI's
/// config directory (and its parent, when it holds nothing else), the run's TMPDIR, and
/// `/tmp` with `--allow-tmp`. Whether the config directory's parent is writable.
fn add_run_grants(
    grants: &mut Grants,
    policy: &mut Policy,
    opts: &PolicyOptions,
    config_dir: &Path,
) -> Result<bool, SandboxError> {
    let ws_access = match opts.mode {
        Mode::WorkspaceWrite => Access::Write,
        _ => Access::Read,
    };
    // Only the workspace itself: nothing read from it (a `.git` file, `commondir`)
    // widens a grant; git metadata elsewhere needs the user's own `--write`.
    grants.add(&policy.workspace, ws_access)?;
    // Claude takes `<dir>.lock` beside its config dir when it refreshes an OAuth login,
    // so the parent is writable too, but only when it holds nothing else (coder's own
    // state, or the home directory, must stay out of reach).
    grants.add_own(config_dir, Access::Write)?;
    let mut config_in_writable_parent = false;
    if let Some(parent) = config_dir.parent()
        && !is_broad(parent, policy.home.as_deref())
        && parent != Path::new(PRIVATE_SHM)
        && holds_only(parent, config_dir)
    {
        grants.add_own(parent, Access::Write)?;
        config_in_writable_parent = true;
    }
    grants.add(&policy.tmp_dir, Access::Write)?;
    if opts.allow_tmp {
        grants.add(Path::new("/tmp"), Access::Write)?;
        policy.outside_roots.push(PathBuf::from("/tmp"));
    }
    Ok(config_in_writable_parent)
}

impl Policy {
    /// Resolve `opts` into a policy. Creates this run's private directory and the Claude
    /// config directory; reads the workspace to find what must be masked.
    pub fn resolve(opts: &PolicyOptions) -> Result<Policy, SandboxError> {
        let deny = DenyGlobs::begin(opts);
        let home = opts.home.as_deref().and_then(|h| fs::canonicalize(h).ok());
        let keys = run_key_places(opts, home.as_deref());
        if let Some((var, place, system)) = home::relocated_over_system(&SYSTEM_READ, &TRUST_STORES)
        {
            return Err(SandboxError::KeyVariableOverSystem { var, place, system });
        }
        let workspace = canonical_workspace(&opts.workspace, home.as_deref(), &keys)?;
        let ws_dir = WorkspaceDir::open(&workspace)?;

        let places = RunPlaces::choose(opts.runs_dir.as_deref())?;
        create_private_dir(&places.own)?;
        create_private_dir(&places.tmp)?;
        let late_guard = finish_earlier_runs(opts, &places, &workspace)?;
        let RunDirs {
            run_dir,
            run_lock,
            made,
            tmp_dir,
            tmp_lock,
            made_tmp,
            tools_tmp,
        } = RunDirs::make(&places)?;
        let config_dir = config_dir_for_run(opts.config_dir.as_deref(), &run_dir)?;
        let mut policy = Policy::begin(
            opts,
            (workspace, ws_dir.id, home),
            &places,
            RunDirsHeld {
                run_dir,
                run_lock,
                tmp_dir,
                tmp_lock,
                tools_tmp,
            },
            &config_dir,
        );
        if !opts.mode.is_confined() {
            // The agent can write anything this user can, the listings caches included.
            policy.reachable_listings = listings_dir();
            policy.forget_reachable_listings();
            policy.warnings = late_guard;
        } else {
            let earlier = EarlierFound {
                deny,
                keys: &keys,
                ws_dir: &ws_dir,
                late_guard,
            };
            policy.confine(opts, earlier, &places, &config_dir)?;
        }
        made.keep();
        made_tmp.keep();
        Ok(policy)
    }

    /// The policy of an unconfined run: its directories, locks and environment, no grant.
    fn begin(
        opts: &PolicyOptions,
        (workspace, workspace_id, home): (PathBuf, (u64, u64), Option<PathBuf>),
        places: &RunPlaces,
        dirs: RunDirsHeld,
        config_dir: &Path,
    ) -> Policy {
        let RunEnv {
            env_set,
            env_remove,
            network,
            connect_ports,
        } = RunEnv::for_run(opts, config_dir, &dirs.tools_tmp, &dirs.tmp_dir);
        Policy {
            mode: opts.mode,
            workspace,
            workspace_id,
            home,
            roots: Vec::new(),
            aliases: Vec::new(),
            masks: Vec::new(),
            connect_ports,
            network,
            deny_globs: opts.deny_globs.clone(),
            protect_globs: opts.protect_globs.clone(),
            placeholders: Vec::new(),
            warnings: Vec::new(),
            run_dir: dirs.run_dir,
            tmp_dir: dirs.tmp_dir,
            records_dir: places.records.clone(),
            env_set,
            env_remove,
            guard_roots: Vec::new(),
            git_known: Vec::new(),
            outside_roots: Vec::new(),
            started_ns: started_ns(),
            tool_guard: Default::default(),
            dir_listings: ScanListings::default(),
            reachable_listings: None,
            plan_file: None,
            host_secrets: Default::default(),
            lease: Held::default(),
            run_lock: Held(Some(Arc::new(dirs.run_lock))),
            tmp_lock: Held(Some(Arc::new(dirs.tmp_lock))),
        }
    }

    /// A confined run's grants, refusals, lease and scan, on the policy [`Policy::begin`]
    /// made. On an error after the scan made placeholders, they are removed again.
    fn confine(
        &mut self,
        opts: &PolicyOptions,
        earlier: EarlierFound<'_>,
        places: &RunPlaces,
        config_dir: &Path,
    ) -> Result<(), SandboxError> {
        let EarlierFound {
            deny,
            keys,
            ws_dir,
            late_guard,
        } = earlier;
        let home = self.home.clone();
        let mut grants = system_grants()?;
        if let Some(home) = &home {
            add_home_grants(&mut grants, self, opts, (home, keys))?;
        }
        let config_in_writable_parent = add_run_grants(&mut grants, self, opts, config_dir)?;

        let scanned = add_user_grants(&mut grants, self, opts, (home.as_deref(), keys))?;

        if opts.mode == Mode::WorkspaceWrite {
            self.guard_roots.insert(0, self.workspace.clone());
        }
        // Refused before any lock is taken or cache touched: an agent that can reach the
        // lock files must not get a run that relies on them.
        let state = coder_state_dir()?;
        let own = OwnDirs {
            state: &state,
            run_dir: &self.run_dir,
            tmp_dir: &self.tmp_dir,
            config_dir,
            workspace: &self.workspace,
        };
        let named: Vec<&Path> = std::iter::once(self.workspace.as_path())
            .chain(opts.extra_write.iter().map(PathBuf::as_path))
            .chain(opts.extra_read.iter().map(PathBuf::as_path))
            .collect();
        refuse_kernel_trees(&named)?;
        refuse_reachable_coder_state(&grants, &opts.extra_read, own, places)?;
        let listings = self.listings_cache(&grants);
        // Held from before the scan looks at any placeholder until the run is over.
        // The writable trees are the ones the scan makes placeholders in.
        if !self.guard_roots.is_empty() {
            let lease = PlaceholderLease::take(&state, &self.guard_roots)?;
            self.lease = Held(Some(Arc::new(lease)));
        }
        crate::phases::mark("scan.start");
        let mut created = Vec::new();
        let found = scan_workspace(
            (opts, deny),
            (ws_dir, keys),
            &scanned,
            listings.as_deref(),
            &mut created,
        );
        crate::phases::mark("scan.done");
        self.placeholders = created;
        let scan = ScanResult {
            found,
            scanned: &scanned,
            keys,
            late_guard,
            config: ConfigDir {
                path: config_dir,
                pin: config_in_writable_parent,
            },
        };
        self.take_scan(scan, grants, opts)
            .inspect_err(|_| self.cleanup())
    }

    /// Where this workspace's listings cache is, or `None` when there is none or the
    /// grants let the agent write the caches' directory (then it is forgotten). Any
    /// workspace's cache counts, not only this one's: the agent could write the file a
    /// later run of another workspace reads.
    fn listings_cache(&mut self, grants: &Grants) -> Option<PathBuf> {
        match listings_dir() {
            Some(dir) if grants.writes_into(&dir) => {
                self.reachable_listings = Some(dir);
                self.forget_reachable_listings();
                None
            }
            Some(dir) => Some(listing_cache::cache_path_in(&dir, &self.workspace)),
            None => None,
        }
    }

    /// What the scan found, taken into the policy with the grants: the masks finished,
    /// the roots, what the end-of-run guard holds, the pending guard record and the mask
    /// source written. On `Err` the caller cleans up.
    fn take_scan(
        &mut self,
        scan: ScanResult<'_>,
        grants: Grants,
        opts: &PolicyOptions,
    ) -> Result<(), SandboxError> {
        let registered = match &self.lease.0 {
            Some(lease) => lease.register(&self.placeholders),
            None => Ok(()),
        };
        let (found, tool_trees) = registered.and(scan.found)?;
        self.git_known = found.git_known;
        let mut places = super::home::places_outside_home(scan.keys);
        places.extend(other_views_of_the_homes());
        self.host_secrets = super::hostmask::HostSecrets {
            places,
            linked: found.home_key_links,
            scanned: std::iter::once(self.workspace.clone())
                .chain(scan.scanned.iter().map(|(path, _)| path.clone()))
                .collect(),
        };
        self.dir_listings = found.listings;
        self.warnings = found.warnings;
        self.warnings.extend(scan.late_guard);
        let mut masks = found.masks;
        finish_masks(self, &mut masks, scan.config, opts)?;
        self.roots = grants.roots();
        self.aliases = grants.aliases.into_iter().collect();
        // Everything held read-only, whole (a pin's contents change): what the scan held
        // is not the agent's, and nothing below a held directory can have changed.
        let held = masks
            .iter()
            .filter(|m| matches!(m.kind, MaskKind::ReadOnly | MaskKind::Empty))
            .map(|m| (m.dev, m.ino));
        self.tool_guard = super::gitguard::ToolGuard {
            held: held.collect(),
            trees: tool_trees,
            // After the scan made its placeholders: what is made from here on is not held.
            held_since_ns: crate::workspace::scan::now_ns(),
        };
        self.masks = masks;
        super::gitguard::record_pending(self)?;
        if self.needs_mask_source() {
            write_mask_source(&self.run_dir)?;
        }
        Ok(())
    }

    /// Grant reading `path` (a file or a directory) in addition to what the mode grants:
    /// the agent's own executable or install directory, for instance.
    pub fn grant_read(&mut self, path: &Path) -> Result<(), SandboxError> {
        self.grant_read_checked(path, true)
    }

    /// [`Policy::grant_read`] of a path in this run's own directory ([`Policy::run_dir`],
    /// `nest/`), which may lie in coder's scratch under `/dev/shm`: `confine` mounts it
    /// read-only on the skeleton in the agent's private `/dev/shm` ([`Grants::add_own`]).
    pub(crate) fn grant_own_read(&mut self, path: &Path) -> Result<(), SandboxError> {
        if !path.starts_with(&self.run_dir) {
            return self.grant_read(path);
        }
        self.grant_read_checked(path, false)
    }

    fn grant_read_checked(&mut self, path: &Path, shm: bool) -> Result<(), SandboxError> {
        let mut grants = Grants::default();
        for root in &self.roots {
            grants
                .roots
                .insert(root.path.clone(), (root.access, root.is_dir));
        }
        grants.aliases.extend(self.aliases.iter().cloned());
        grants.add_checked(path, Access::Read, shm)?;
        self.roots = grants.roots();
        self.aliases = grants.aliases.into_iter().collect();
        Ok(())
    }

    /// Grant reading the agent's program: for an npm install, its package directory
    /// (`…/node_modules/@anthropic-ai/claude-code/`, where the package keeps its other
    /// files) and the scope's platform packages beside it (`claude-code-linux-x64`); for
    /// anything else the executable file alone. Never the directory a lone executable sits
    /// in: that may be `/tmp` or a home directory, full of other users' files and sockets.
    /// Symlinks on the way are kept as aliases.
    pub fn grant_program(&mut self, program: &Path) -> Result<(), SandboxError> {
        let canonical = canonicalize(PathRole::Program, program)?;
        match npm_package_dir(&canonical) {
            Some(package) if !is_broad(&package, self.home.as_deref()) => {
                for dir in sibling_platform_packages(&package) {
                    self.grant_read(&dir)?;
                }
                self.grant_read(&package)?;
            }
            _ => self.grant_read(&canonical)?,
        }
        self.grant_read(program)
    }

    /// Make `path` (an existing regular file, canonical) the run's plan file, the one file
    /// of the user's the agent may write (`coder plan`). Only a read-only policy takes one
    /// (the caller refuses `--write` and `--allow-tmp`); the file must have one link, lie
    /// outside every granted root except the workspace, and inside the workspace be
    /// neither masked, protected, nor git metadata.
    pub fn grant_plan_file(&mut self, path: &Path) -> Result<(), SandboxError> {
        let refuse = |reason: String| SandboxError::Path {
            what: PathRole::PlanFile,
            path: path.to_path_buf(),
            reason,
        };
        if self.mode != Mode::ReadOnly {
            return Err(refuse("a plan run keeps the workspace read-only".into()));
        }
        let fd = super::sys::open_nofollow(path).map_err(|e| {
            refuse(format!(
                "cannot be opened without following symlinks ({e}); pass its real path"
            ))
        })?;
        let meta = nix::sys::stat::fstat(fd.as_fd())
            .map_err(|e| SandboxError::sys("stat", path.display(), e))?;
        if (meta.st_mode & libc::S_IFMT) != libc::S_IFREG {
            return Err(refuse("is not a regular file".into()));
        }
        if meta.st_nlink != 1 {
            return Err(refuse(format!(
                "has {} hard links; writing it would change another file too",
                meta.st_nlink
            )));
        }
        let in_workspace = path.starts_with(&self.workspace);
        for root in &self.roots {
            // A root holding the whole workspace (a project under `/opt`) is no wider grant
            // for a plan inside the workspace.
            let holds_workspace = in_workspace && self.workspace.starts_with(&root.path);
            if !holds_workspace && path.starts_with(&root.path) {
                return Err(refuse(format!(
                    "lies inside {}, which the sandbox grants as a whole; put the plan in \
                     the workspace or outside every granted directory",
                    root.path.display()
                )));
            }
        }
        if in_workspace {
            let rel = path.strip_prefix(&self.workspace).unwrap_or(path);
            if rel.components().any(|c| c.as_os_str() == ".git") {
                return Err(refuse("lies in git metadata".into()));
            }
            if self
                .masks
                .iter()
                .any(|m| path == m.path || (m.is_dir && path.starts_with(&m.path)))
            {
                return Err(refuse(
                    "is masked or protected by the sandbox (a secret or tool-config glob)".into(),
                ));
            }
        }
        self.plan_file = Some(PlanFile {
            path: path.to_path_buf(),
            id: (meta.st_dev, meta.st_ino),
            in_workspace,
        });
        Ok(())
    }

    /// Adjust a child environment in place: drop the removed variables, set the policy's.
    pub fn apply_env(&self, env: &mut Vec<(std::ffi::OsString, std::ffi::OsString)>) {
        env.retain(|(k, _)| {
            let name = k.to_string_lossy();
            !self.env_remove.iter().any(|r| *r == name) && !self.env_set.contains_key(name.as_ref())
        });
        env.extend(
            self.env_set
                .iter()
                .map(|(k, v)| (std::ffi::OsString::from(k), std::ffi::OsString::from(v))),
        );
    }

    /// The tool commands' `TMPDIR`: a directory in the run's scratch directory, which is
    /// the CLI's `CLAUDE_CODE_TMPDIR` and `XDG_RUNTIME_DIR` (its `claude-<uid>/` and
    /// `cc-socks/`, which tool commands do not write).
    pub fn tools_tmp_dir(&self) -> PathBuf {
        self.tmp_dir.join(TOOLS_TMP)
    }

    /// The private `/dev/shm` the helper makes in a private root, every right the agent's.
    pub fn private_shm(&self) -> &'static Path {
        Path::new(PRIVATE_SHM)
    }

    /// The empty read-only file bind-mounted over secrets.
    pub fn mask_source(&self) -> PathBuf {
        self.run_dir.join(MASK_SOURCE)
    }

    /// Whether a mask hides a file behind [`Policy::mask_source`], which exists only then:
    /// every file made for a run is one more for the filesystem to create and delete.
    pub fn needs_mask_source(&self) -> bool {
        self.masks.iter().any(|m| m.kind == MaskKind::Empty)
    }

    /// The mount point of the private root: the run directory itself, hidden in the
    /// agent's mount namespace once the granted tree in it (`tmp`) is cloned.
    pub fn root_mount_point(&self) -> PathBuf {
        self.run_dir.clone()
    }

    /// Secret files hidden by masks, for the system prompt and denial reports.
    pub fn masked_secrets(&self) -> impl Iterator<Item = &Path> {
        self.masks
            .iter()
            .filter(|m| m.secret && m.kind == MaskKind::Empty)
            .map(|m| m.path.as_path())
    }

    /// Whether `path` is a masked secret (or inside a masked directory of secrets).
    pub fn is_masked(&self, path: &Path) -> bool {
        self.masks
            .iter()
            .any(|m| m.secret && (m.path == path || (m.is_dir && path.starts_with(&m.path))))
    }

    /// Whether `path` is a file name held read-only (a protected config, a script the
    /// user's git commands run, or such a name held absent: a symlink to
    /// [`super::ABSENT_TARGET`], where creating the file fails with "Not a directory").
    pub fn is_held_file(&self, path: &Path) -> bool {
        self.masks
            .iter()
            .any(|m| !m.secret && m.kind == MaskKind::ReadOnly && !m.is_dir && m.path == path)
    }

    /// Whether `path` lies beneath a granted root.
    pub fn is_granted(&self, path: &Path) -> bool {
        !self.mode.is_confined() || self.roots.iter().any(|r| path.starts_with(&r.path))
    }

    /// Whether `path` may be written under this policy (ignoring masks).
    pub fn is_writable(&self, path: &Path) -> bool {
        !self.mode.is_confined()
            || self
                .roots
                .iter()
                .any(|r| r.access == Access::Write && path.starts_with(&r.path))
    }

    /// The environment the agent gets: `base` without the removed variables, plus the
    /// policy's own (private temp, runtime and config directories).
    pub fn child_env<I, K, V>(&self, base: I) -> Vec<(String, String)>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut env: BTreeMap<String, String> = base
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(k, _)| !self.env_remove.iter().any(|r| r == k))
            .collect();
        for (k, v) in &self.env_set {
            env.insert(k.clone(), v.clone());
        }
        env.into_iter().collect()
    }

    /// Remove the listings caches this run's agent can write (see `reachable_listings`).
    fn forget_reachable_listings(&self) {
        if let Some(dir) = &self.reachable_listings {
            listing_cache::remove_all(dir);
        }
    }

    /// What removes this run's directory, placeholders and lock once its processes are
    /// gone.
    pub fn run_cleanup(&self) -> RunCleanup {
        RunCleanup {
            run_dir: self.run_dir.clone(),
            tmp_dir: self.tmp_dir.clone(),
            lease: self.lease.0.clone(),
            own: self.placeholders.clone(),
            run_lock: self.run_lock.clone(),
        }
    }

    /// Forget the listings the agent could write, then [`RunCleanup::run`].
    pub fn cleanup(&self) {
        self.forget_reachable_listings();
        self.run_cleanup().run();
    }
}

/// The canonical path of the run directory just made at `path`; refused when `path` no
/// longer names that directory itself. An agent that can write the runs directory
/// (`--allow-tmp` with coder's state directory under `/tmp`) can swap a symlink in for it
/// between the two steps: the run's directory would then be whatever the symlink names,
/// and the run's end would remove that whole tree.
fn canonical_run_dir(path: &Path) -> Result<PathBuf, SandboxError> {
    let canonical = canonicalize(PathRole::RunDirectory, path)?;
    let inspect = |p: &Path, meta: std::io::Result<fs::Metadata>| {
        meta.map_err(|e| SandboxError::io(format!("inspect {}", p.display()), e))
    };
    let made = inspect(path, fs::symlink_metadata(path))?;
    let named = inspect(&canonical, fs::metadata(&canonical))?;
    if !made.is_dir() || (made.dev(), made.ino()) != (named.dev(), named.ino()) {
        return Err(SandboxError::Path {
            what: PathRole::RunDirectory,
            path: path.to_path_buf(),
            reason: "was replaced while coder made it: another process can write the \
                     directory it is in"
                .to_string(),
        });
    }
    Ok(canonical)
}

/// The run directory `Policy::resolve` made, removed again when it fails before the
/// policy that would clean it up exists (a refused `--write`, a lease it cannot take), so
/// a refused run leaves nothing behind for a later run to prune.
struct MadeRunDir(Option<PathBuf>);

impl MadeRunDir {
    /// The policy owns the directory now.
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for MadeRunDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// The deny globs ([`PolicyOptions::deny_globs`]) compiled on a thread of their own, begun
/// with the policy: building their regular expressions took some 0.3 ms of the run's path
/// (`globset`'s `regex_set`, round twenty-eight's profile), and the policy's checks before
/// the scan (the run's directories, the grants, the coder-directory checks) take longer
/// than that beside it. The same globs, compiled the same way; an error is reported where
/// it was (the scan), and a thread that cannot be had, or that panicked, leaves the
/// compiling to the scan as before.
struct DenyGlobs(Option<std::thread::JoinHandle<Result<globset::GlobSet, SandboxError>>>);

impl DenyGlobs {
    /// Starts compiling `opts`' deny globs, for a confined run (no other run scans).
    fn begin(opts: &PolicyOptions) -> DenyGlobs {
        if !opts.mode.is_confined() {
            return DenyGlobs(None);
        }
        let globs = opts.deny_globs.clone();
        let compile = move || scan::compile_globs(super::GlobList::Deny, &globs);
        DenyGlobs(
            std::thread::Builder::new()
                .name("coder-globs".into())
                .spawn(compile)
                .ok(),
        )
    }

    /// The compiled set (waiting for the thread), or compiled now.
    fn finish(self, opts: &PolicyOptions) -> Result<globset::GlobSet, SandboxError> {
        match self.0.map(std::thread::JoinHandle::join) {
            Some(Ok(compiled)) => compiled,
            _ => scan::compile_globs(super::GlobList::Deny, &opts.deny_globs),
        }
    }
}

/// Scan the workspace (from its descriptor) and the extra roots: secrets, protected names,
/// git dirs. Also the writable trees whose protected names the scan held, with their globs
/// (for the end-of-run guard, [`super::gitguard::ToolGuard`]).
fn scan_workspace(
    (opts, deny): (&PolicyOptions, DenyGlobs),
    (ws_dir, keys): (&WorkspaceDir, &home::KeyPlaces),
    extra: &[(PathBuf, bool)],
    listings: Option<&Path>,
    created: &mut Vec<Placeholder>,
) -> Result<(scan::ScanOutput, Vec<super::gitguard::ToolTree>), SandboxError> {
    let writable = opts.mode == Mode::WorkspaceWrite;
    let deny = deny.finish(opts)?;
    let mut protect_globs = opts.protect_globs.clone();
    if writable {
        protect_globs.extend(users_hooks_globs(&ws_dir.path));
    }
    let mut tool_trees = Vec::new();
    // Each tree's globs are compiled once, for the scan and the end-of-run guard alike.
    let mut tool_tree = |root: &Path, globs: &[String], set: &Arc<globset::GlobSet>| {
        if !globs.is_empty() {
            tool_trees.push(super::gitguard::ToolTree {
                root: root.to_path_buf(),
                globs: globs.to_vec(),
                made_scripts: false,
                compiled: super::gitguard::CompiledGlobs(Some(set.clone())),
            });
        }
    };
    let protect = Arc::new(scan::compile_globs(
        super::GlobList::Protect,
        &protect_globs,
    )?);
    if writable {
        tool_tree(&ws_dir.path, &protect_globs, &protect);
    }
    let literal = scan::literal_protected(&protect_globs);
    let extra_fds = extra
        .iter()
        .filter(|(path, _)| path.is_dir())
        .map(|(path, w)| {
            super::sys::open_nofollow(path)
                .map(|fd| (path, *w && writable, fd))
                .map_err(|e| SandboxError::sys("open", path.display(), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The user's protected globs hold in every tree the agent may write, each relative
    // to its own root, with that tree's own hooks directory: applied to the workspace
    // alone, they left a `--write` repository's `.githooks/pre-commit` (and its
    // `.claude/settings.json`, `.vscode/tasks.json`, `.envrc`) the agent's, and the
    // user's next commit there ran the agent's hook (round seventeen's review).
    let mut extra_protect = Vec::new();
    for (path, w, _) in &extra_fds {
        let mut globs = opts.protect_globs.clone();
        if *w {
            globs.extend(users_hooks_globs(path));
        }
        let set = Arc::new(scan::compile_globs(super::GlobList::Protect, &globs)?);
        if *w {
            tool_tree(path, &globs, &set);
        }
        extra_protect.push((set, scan::literal_protected(&globs)));
        // The listings kept between runs were taken under these globs too.
        protect_globs.extend(
            globs
                .into_iter()
                .map(|g| format!("{}\0{g}", path.display())),
        );
    }
    let mut shapes = vec![listing_cache::TreeShape {
        root: &ws_dir.path,
        writable,
        protected: true,
    }];
    for (path, w, _) in &extra_fds {
        shapes.push(listing_cache::TreeShape {
            root: path,
            writable: *w,
            protected: *w,
        });
    }
    let cache = listings.and_then(|path| {
        let fingerprint = listing_cache::fingerprint(&shapes, &opts.deny_globs, &protect_globs)?;
        let kept = listing_cache::load(path, fingerprint, shapes.len());
        Some((path, fingerprint, kept))
    });
    let kept_of = |i: usize| cache.as_ref().and_then(|(_, _, kept)| kept.trees.get(i));
    let mut trees = vec![scan::TreeScan {
        root: &ws_dir.path,
        fd: ws_dir.fd.as_fd(),
        writable,
        protect: Some(&*protect),
        protect_literal: &literal,
        kept: kept_of(0),
        cancel: &opts.cancel,
    }];
    for (i, ((path, w, fd), (set, literal))) in extra_fds.iter().zip(&extra_protect).enumerate() {
        trees.push(scan::TreeScan {
            root: path,
            fd: fd.as_fd(),
            writable: *w,
            protect: w.then_some(&**set),
            protect_literal: if *w { literal } else { &[] },
            kept: kept_of(i + 1),
            cancel: &opts.cancel,
        });
    }
    refuse_kernel_mounts(&trees)?;
    let found = scan::scan_trees_with(&trees, &deny, (opts.scan_limits, keys), created)?;
    add_made_aside_trees(&found.made_aside_globs, &mut tool_trees)?;
    if let Some((path, fingerprint, _)) = &cache {
        // A cache that cannot be written only costs the next run its listings.
        let _ = listing_cache::store(path, *fingerprint, &found.kept);
    }
    Ok((found, tool_trees))
}

/// The end-of-run guard's share of what the scan found held scripts would run if the
/// agent made it ([`scan::ScanOutput::made_aside_globs`]: the names Python imports at
/// start in a directory a held line puts on `PYTHONPATH`, the absent files held scripts
/// run by path): one more tree entry per writable tree, its globs compiled once.
fn add_made_aside_trees(
    globs: &[(PathBuf, String)],
    tool_trees: &mut Vec<super::gitguard::ToolTree>,
) -> Result<(), SandboxError> {
    let mut roots: Vec<&PathBuf> = globs.iter().map(|(root, _)| root).collect();
    roots.sort();
    roots.dedup();
    for root in roots {
        let mine: Vec<String> = globs
            .iter()
            .filter(|(r, _)| r == root)
            .map(|(_, g)| g.clone())
            .collect();
        let set = scan::compile_globs(super::GlobList::Protect, &mine)?;
        tool_trees.push(super::gitguard::ToolTree {
            root: root.clone(),
            globs: mine,
            made_scripts: true,
            compiled: super::gitguard::CompiledGlobs(Some(Arc::new(set))),
        });
    }
    Ok(())
}

/// Protected globs for the directory the user's own git runs hooks from, when it lies in
/// the workspace (`core.hooksPath = scripts/hooks`, from any config the user's git reads;
/// see [`crate::workspace::git::users_hooks_dir`]): the whole directory, held by a
/// placeholder at its first missing level when absent, its parents pinned; the hook names
/// alone when it is the workspace itself. The agent rewrote `scripts/hooks/pre-commit`
/// and the user's next `git commit` ran it (round seventeen's review); only `.githooks`
/// and `.husky` were protected, by name. Both the path as git names it (a symlink on it,
/// `hooks -> scripts/hooks`, is then guarded as a link, not the agent's to re-point) and
/// where it leads now. A hooks directory inside `.git` is guarded with its git dir.
fn users_hooks_globs(workspace: &Path) -> Vec<String> {
    let Some(named) = crate::workspace::git::users_hooks_dir(workspace) else {
        return Vec::new();
    };
    // As named: `..` taken lexically (git hands the path to the kernel as it stands).
    let mut lexical = PathBuf::new();
    for part in named.components() {
        match part {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    // Where it leads: canonical as far as it exists.
    let mut tail = Vec::new();
    let mut head = named.as_path();
    let resolved = loop {
        if let Ok(found) = fs::canonicalize(head) {
            break Some(tail.iter().rev().fold(found, |path, name| path.join(name)));
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_os_string());
                head = parent;
            }
            _ => break None,
        }
    };
    let mut globs = Vec::new();
    for hooks in std::iter::once(lexical).chain(resolved) {
        globs.extend(hooks_dir_globs(workspace, &hooks));
    }
    globs.sort();
    globs.dedup();
    globs
}

/// [`users_hooks_globs`] of one absolute path of the hooks directory.
fn hooks_dir_globs(workspace: &Path, hooks: &Path) -> Vec<String> {
    let Ok(rel) = hooks.strip_prefix(workspace) else {
        return Vec::new();
    };
    if rel
        .components()
        .next()
        .is_some_and(|c| c.as_os_str() == ".git")
    {
        return Vec::new();
    }
    let Some(rel) = rel.to_str() else {
        return Vec::new();
    };
    if rel.is_empty() {
        return super::config_text::GIT_HOOK_NAMES
            .iter()
            .map(|name| name.to_string())
            .collect();
    }
    // The entry itself (a symlink there is guarded as one) and all below it.
    let mut globs = vec![globset::escape(rel), format!("{}/**", globset::escape(rel))];
    // A protected name is held when absent only if its parent exists: with `scripts`
    // absent too, the agent made `scripts/hooks/pre-commit`. The first missing level is
    // held then (an empty, read-only placeholder).
    let mut prefix = PathBuf::new();
    for part in Path::new(rel).components() {
        prefix.push(part);
        if fs::symlink_metadata(workspace.join(&prefix)).is_err() {
            if prefix.as_path() != Path::new(rel)
                && let Some(prefix) = prefix.to_str()
            {
                globs.push(globset::escape(prefix));
            }
            break;
        }
    }
    globs
}

/// Refuses a tree with a kernel file system mounted below it: the scan would walk the
/// kernel's files (it stopped on `EACCES` at `proc/1/task/N/fdinfo`, a message that said
/// nothing of why), and the agent would be granted them.
///
/// A tree that lies on one itself (the host's `/dev` bound at `/mnt/hostdev`, given as
/// the workspace or a `--write` path) is refused the same way: `/dev` is refused as a
/// workspace by its path alone.
fn refuse_kernel_mounts(trees: &[scan::TreeScan<'_>]) -> Result<(), SandboxError> {
    for tree in trees {
        refuse_kernel_tree(tree.root, tree.fd)?;
    }
    Ok(())
}

/// [`refuse_kernel_mounts`] of one tree, open as `fd`.
fn refuse_kernel_tree(root: &Path, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), SandboxError> {
    if let Some(fstype) = crate::workspace::scan::kernel_mount_holding(fd) {
        return Err(SandboxError::OnKernelMount {
            tree: root.to_path_buf(),
            fstype,
        });
    }
    if let Some(mount) = crate::workspace::scan::kernel_mounts_below(root).first() {
        return Err(SandboxError::KernelMount {
            tree: root.to_path_buf(),
            mount: root.join(OsStr::from_bytes(&mount.rel)),
            fstype: mount.fstype.clone(),
        });
    }
    Ok(())
}

/// [`refuse_kernel_mounts`] of the trees the caller named (the workspace, `--write` and
/// `--read` directories), before the grants are checked against coder's own
/// directories: the host's `/dev` bound into the workspace was refused as reaching the
/// scratch place `/dev/shm/coder-UID` once an earlier run had made it (by identity: the
/// bind is of `/dev`, though a bind that is not recursive does not carry `/dev/shm`),
/// and the user was told to set `CODER_SCRATCH_DIR`, which changed nothing: the tree is
/// refused for what it is (round twenty-one). One that cannot be opened is left to the
/// steps after, which say why.
fn refuse_kernel_trees(trees: &[&Path]) -> Result<(), SandboxError> {
    for root in trees {
        let Ok(fd) = super::sys::open_nofollow_dir(root) else {
            continue;
        };
        refuse_kernel_tree(root, fd.as_fd())?;
    }
    Ok(())
}

/// Where the scan's listings are kept between runs: `listings` in coder's state directory,
/// canonical (so that it can be compared with the grants). `None` when there is no state
/// directory.
fn listings_dir() -> Option<PathBuf> {
    let dir = coder_state_dir().ok()?.join("listings");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .ok()?;
    fs::canonicalize(&dir).ok()
}

/// The CLI's config dir of a run, and whether it must be pinned: it lies in a parent the
/// agent may write, where it is no mount point of its own and could be renamed away and
/// replaced by a dir of the agent's making.
#[derive(Clone, Copy)]
struct ConfigDir<'a> {
    path: &'a Path,
    pin: bool,
}

/// Add the config dir's guards, cap, and order the masks: parents before what they hold,
/// and for one path the strongest (a secret's empty file over a read-only self-mount).
fn finish_masks(
    policy: &Policy,
    masks: &mut Vec<Mask>,
    config: ConfigDir<'_>,
    opts: &PolicyOptions,
) -> Result<(), SandboxError> {
    hold_config_names(config.path)?;
    hold_cli_git_dir(&policy.tmp_dir, masks)?;
    for (name, _) in CONFIG_GUARDED {
        let path = config.path.join(name);
        let mask = scan::self_mask(&path, MaskKind::ReadOnly)?.ok_or(SandboxError::Path {
            what: PathRole::ConfigDirectoryEntry,
            path,
            reason: "is neither a file nor a directory, so it cannot be held read-only".to_string(),
        })?;
        masks.push(mask);
    }
    if config.pin
        && let Some(mask) = scan::self_mask(config.path, MaskKind::Pin)?
    {
        masks.push(mask);
    }
    if masks.len() > opts.scan_limits.max_matches {
        return Err(SandboxError::ScanLimit {
            what: "the number of masked paths",
            limit: opts.scan_limits.max_matches,
            path: policy.workspace.clone(),
        });
    }
    masks.sort_by(|a, b| a.path.cmp(&b.path).then(a.kind.cmp(&b.kind)));
    masks.dedup_by(|a, b| a.path == b.path);
    Ok(())
}

/// Make each absent guarded name of the config dir (see [`CONFIG_GUARDED`]), so that it
/// can be held read-only. The dir is fresh for every run, so none exists, and an absent
/// name is not held: the CLI (2.1.330) reloads a `settings.json` a tool command writes
/// during the run and runs its hooks with `/bin/sh` in its own Landlock domain, outside
/// the nested one of tool commands, where they can write forged events into its stdout.
fn hold_config_names(config_dir: &Path) -> Result<(), SandboxError> {
    use std::io::Write;
    for (name, kind) in CONFIG_GUARDED {
        let path = config_dir.join(name);
        let file = |text: &[u8]| {
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| f.write_all(text))
        };
        let made = match kind {
            ConfigName::Settings => file(b"{}\n"),
            ConfigName::Text => file(b""),
            ConfigName::Listed => file(b""),
        };
        match made {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(SandboxError::io(format!("create {}", path.display()), e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Where the CLI keeps the git dir of its own snapshots around each Bash call, relative to
/// `CLAUDE_CODE_TMPDIR` (2.1.330: `claude-<uid>/bash-edit-diff/<id>/`).
const CLI_GIT_DIRS: &str = "bash-edit-diff";

/// Makes the CLI's snapshot git dirs impossible: `claude-<uid>/bash-edit-diff` in the run's
/// `TMPDIR` is an empty file held read-only, in a directory pinned over itself. The CLI
/// (2.1.330) runs its own `git` around every Bash call (`update-index --add`, `status`)
/// with a `GIT_DIR` there, in its own Landlock domain; that `TMPDIR` is the tool
/// commands' too, and a clean filter a tool command added to that git dir's `config` and
/// `info/attributes` ran in the CLI's domain, where it wrote forged events into the CLI's
/// stdout through `/proc/<CLI>/fd/1` (round twenty-two's review). Without the directory
/// the CLI skips that snapshot (a tool result loses its `bashEditDiff`) and the Bash tool
/// works as before.
fn hold_cli_git_dir(tmp_dir: &Path, masks: &mut Vec<Mask>) -> Result<(), SandboxError> {
    let dir = tmp_dir.join(format!("claude-{}", nix::unistd::geteuid()));
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(SandboxError::io(format!("create {}", dir.display()), e));
        }
        _ => {}
    }
    let held = dir.join(CLI_GIT_DIRS);
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&held)
    {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(SandboxError::io(format!("create {}", held.display()), e));
        }
        _ => {}
    }
    for (path, kind) in [(&dir, MaskKind::Pin), (&held, MaskKind::ReadOnly)] {
        let mask = scan::self_mask(path, kind)?.ok_or_else(|| SandboxError::Path {
            what: PathRole::RunDirectory,
            path: path.clone(),
            reason: "is neither a file nor a directory, so it cannot be held".to_string(),
        })?;
        masks.push(mask);
    }
    Ok(())
}

/// The workspace, opened once by descriptor (`O_PATH|O_DIRECTORY|O_NOFOLLOW` of its
/// canonical path, no symlink anywhere): the scan works from it, and the helper checks
/// that the path still leads to the same directory before mounting anything.
pub(crate) struct WorkspaceDir {
    pub path: PathBuf,
    pub fd: OwnedFd,
    /// (device, inode).
    pub id: (u64, u64),
}

impl WorkspaceDir {
    pub(crate) fn open(canonical: &Path) -> Result<WorkspaceDir, SandboxError> {
        let refuse = |reason: String| SandboxError::Workspace {
            path: canonical.to_path_buf(),
            reason,
        };
        let fd = super::sys::open_nofollow_dir(canonical)
            .map_err(|e| refuse(format!("cannot open it without following symlinks: {e}")))?;
        let st = nix::sys::stat::fstat(fd.as_fd())
            .map_err(|e| refuse(format!("cannot inspect it: {e}")))?;
        Ok(WorkspaceDir {
            path: canonical.to_path_buf(),
            fd,
            id: (st.st_dev, st.st_ino),
        })
    }

    /// Open `path` again and check that it is still the directory `id` names.
    pub(crate) fn reopen(path: &Path, id: (u64, u64)) -> Result<WorkspaceDir, SandboxError> {
        let changed = || SandboxError::MaskTargetChanged {
            path: path.to_path_buf(),
        };
        let dir = WorkspaceDir::open(path).map_err(|_| changed())?;
        if dir.id != id {
            return Err(changed());
        }
        Ok(dir)
    }
}

/// Collects grants, canonicalising each path and remembering the symlinks on the way.
#[derive(Default)]
struct Grants {
    roots: BTreeMap<PathBuf, (Access, bool)>,
    aliases: BTreeSet<SymlinkAlias>,
}

impl Grants {
    fn add_optional(&mut self, path: &Path, access: Access) -> Result<(), SandboxError> {
        if fs::symlink_metadata(path).is_err() || fs::metadata(path).is_err() {
            return Ok(());
        }
        self.add(path, access)
    }

    fn add(&mut self, path: &Path, access: Access) -> Result<(), SandboxError> {
        self.add_checked(path, access, true)
    }

    /// [`Grants::add`] for the run's own CLI config dir (and its parent) and its own run
    /// directory's files, which may lie in coder's scratch under `/dev/shm`
    /// (`config::scratch`): `confine` mounts each on a read-only skeleton in the agent's
    /// private `/dev/shm`. As a write grant it gives nothing more beneath Landlock's rule
    /// for that tmpfs; a read grant is a read-only mount there (every read grant is), so
    /// that rule does not make it writable.
    fn add_own(&mut self, path: &Path, access: Access) -> Result<(), SandboxError> {
        self.add_checked(path, access, false)
    }

    fn add_checked(&mut self, path: &Path, access: Access, shm: bool) -> Result<(), SandboxError> {
        let canonical = resolve_with_aliases(path, &mut self.aliases)?;
        if shm || canonical == Path::new(PRIVATE_SHM) {
            refuse_private_shm(&canonical)?;
        }
        let meta = fs::metadata(&canonical)
            .map_err(|e| SandboxError::io(format!("grant {}", canonical.display()), e))?;
        let entry = self
            .roots
            .entry(canonical)
            .or_insert((access, meta.is_dir()));
        entry.0 = entry.0.max(access);
        Ok(())
    }

    /// Whether a write grant reaches into the directory `dir` (canonical): a grant of it,
    /// of an ancestor, or of something inside it. Both directions are also compared by
    /// (dev, ino): a bind mount is another path to the same directory, and a grant holds
    /// whichever path named it.
    fn writes_into(&self, dir: &Path) -> bool {
        let mounts = MountTable::read();
        let facts = PathFacts::new(&mounts);
        self.root_into(dir, Access::Write, &facts, |_| false)
            .is_some()
    }

    /// The first grant of at least `at_least` that reaches into `dir` (as
    /// [`Grants::writes_into`]), leaving out those for which `except` holds; `facts` places
    /// paths in their file systems.
    fn root_into(
        &self,
        dir: &Path,
        at_least: Access,
        facts: &PathFacts<'_>,
        except: impl Fn(&Path) -> bool,
    ) -> Option<&Path> {
        let id = |p: &Path| facts.id(p);
        let mounts = facts.mounts;
        let ancestors: BTreeSet<(u64, u64)> = dir.ancestors().filter_map(id).collect();
        let dir_id = id(dir);
        let dir_place = mounts.place(dir);
        self.roots
            .iter()
            .filter(|(root, (access, _))| *access >= at_least && !except(root))
            .map(|(root, _)| root.as_path())
            .find(|root| {
                dir.starts_with(root)
                    || root.starts_with(dir)
                    || id(root).is_some_and(|root| ancestors.contains(&root))
                    // Inside `dir` by another path (a bind mount of it or of a parent).
                    || dir_id.is_some() && root.ancestors().any(|a| id(a) == dir_id)
                    // A bind mount of a directory inside `dir`, or of one holding it: the
                    // same place in the same file system under another path.
                    || dir_place
                        .as_ref()
                        .zip(facts.place(root))
                        .is_some_and(|(dir, root)| root.overlaps(dir))
                    // A mount beneath the grant that shows `dir` (or a directory holding
                    // it): the sandbox mounts a grant with its submounts.
                    || dir_place
                        .as_ref()
                        .is_some_and(|dir| mounts.beneath(root).any(|m| m.overlaps(dir)))
            })
    }

    fn roots(&self) -> Vec<Root> {
        self.roots
            .iter()
            .map(|(path, (access, is_dir))| Root {
                path: path.clone(),
                access: *access,
                is_dir: *is_dir,
            })
            .collect()
    }
}

/// What [`Grants::root_into`] looks up of a path ((dev, ino) and its [`FsPlace`]), kept
/// for one check of every coder directory against every grant: the same grants and their
/// ancestors were looked up again for each directory and each reach, some 1,000 `statx`
/// a run on the run's path (round twenty-eight). The answers are those of one moment, as
/// before (the checks ran within a millisecond); nothing the agent runs exists yet.
struct PathFacts<'a> {
    mounts: &'a MountTable,
    ids: std::cell::RefCell<BTreeMap<PathBuf, Option<(u64, u64)>>>,
    places: std::cell::RefCell<BTreeMap<PathBuf, Option<FsPlace>>>,
}

impl<'a> PathFacts<'a> {
    fn new(mounts: &'a MountTable) -> PathFacts<'a> {
        PathFacts {
            mounts,
            ids: std::cell::RefCell::default(),
            places: std::cell::RefCell::default(),
        }
    }

    /// `path`'s (dev, ino), following symlinks; `None` where it cannot be had.
    fn id(&self, path: &Path) -> Option<(u64, u64)> {
        *self
            .ids
            .borrow_mut()
            .entry(path.to_path_buf())
            .or_insert_with(|| fs::metadata(path).ok().map(|m| (m.dev(), m.ino())))
    }

    /// `path`'s place in its file system ([`MountTable::place`]).
    fn place(&self, path: &Path) -> Option<FsPlace> {
        self.places
            .borrow_mut()
            .entry(path.to_path_buf())
            .or_insert_with(|| self.mounts.place(path))
            .clone()
    }
}

/// Where a path lies in its file system whatever mount shows it: the file system's device
/// (`major:minor` in `/proc/self/mountinfo`) and the path from that file system's root. A
/// bind mount shows the directory it was made of, so a path through it has the same place
/// as the directory's own path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FsPlace {
    device: String,
    path: PathBuf,
}

impl FsPlace {
    /// Whether one of the two holds the other (or both are the same).
    fn overlaps(&self, other: &FsPlace) -> bool {
        self.device == other.device
            && (self.path.starts_with(&other.path) || other.path.starts_with(&self.path))
    }
}

/// This process's mounts by id (`/proc/self/mountinfo`): each one's device, the path in
/// its file system it shows (its root) and where it is mounted; and the layers of each
/// overlay mount (its `lowerdir`s and `upperdir`, by path), which it shows as a bind
/// mount shows its directory. Empty when unreadable.
struct MountTable(
    std::collections::HashMap<u64, (String, PathBuf, PathBuf)>,
    std::collections::HashMap<u64, Vec<PathBuf>>,
);

impl MountTable {
    fn read() -> MountTable {
        let text = crate::workspace::mountinfo::table().unwrap_or_default();
        let mut layers = std::collections::HashMap::new();
        let mounts = text
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                let mut fields = line.split(|&b| b == b' ');
                let id = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
                let _parent = fields.next()?;
                let device = String::from_utf8_lossy(fields.next()?).into_owned();
                let root = crate::workspace::mountinfo::unescape(fields.next()?);
                let point = crate::workspace::mountinfo::unescape(fields.next()?);
                let overlay = overlay_layers(line);
                if !overlay.is_empty() {
                    layers.insert(id, overlay);
                }
                Some((id, (device, root, point)))
            })
            .collect();
        MountTable(mounts, layers)
    }

    /// The directories the overlay mounts at or beneath `path` show (each layer whole),
    /// and those of the overlay mount holding `path` (each layer joined with the rest of
    /// `path` below its mount point). Round thirty's review: an overlay whose lower layer
    /// is the home directory showed `~/.ssh` to `--read` of its mount point, a file
    /// system of its own that no place compared with the home's.
    fn overlay_paths(&self, path: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for (id, layers) in &self.1 {
            let Some((_, _, point)) = self.0.get(id) else {
                continue;
            };
            if point.starts_with(path) {
                out.extend(layers.iter().cloned());
            } else if let Ok(rest) = path.strip_prefix(point) {
                out.extend(layers.iter().map(|layer| layer.join(rest)));
            }
        }
        out
    }

    /// The places shown by the mounts whose mount points lie strictly beneath `path`
    /// (canonical).
    fn beneath<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = FsPlace> + 'a {
        self.0
            .values()
            .filter(move |(_, _, point)| point.starts_with(path) && point != path)
            .map(|(device, root, _)| FsPlace {
                device: device.clone(),
                path: root.clone(),
            })
    }

    /// Whether the mount showing `path` shows its file system whole (its root `/`) and no
    /// other mount of that file system shows a directory holding `path`'s place or one
    /// inside it: then `path` is the only path to its files (but hard links), and to
    /// anything that holds them, and comparing paths tells what comparing places would.
    fn only_path(&self, path: &Path) -> bool {
        let Ok(id) = super::sys::mount_id(path) else {
            return false;
        };
        let Some((device, root, point)) = self.0.get(&id) else {
            return false;
        };
        let Ok(rest) = path.strip_prefix(point) else {
            return false;
        };
        let place = Path::new("/").join(rest);
        !self.1.contains_key(&id)
            && root == Path::new("/")
            && self.0.iter().all(|(other, (d, r, _))| {
                *other == id || d != device || !(r.starts_with(&place) || place.starts_with(r))
            })
    }

    /// The place of `path` (canonical): its mount's root joined with the rest of the path
    /// below that mount's mount point.
    fn place(&self, path: &Path) -> Option<FsPlace> {
        let id = super::sys::mount_id(path).ok()?;
        let (device, root, point) = self.0.get(&id)?;
        let rest = path.strip_prefix(point).ok()?;
        Some(FsPlace {
            device: device.clone(),
            path: root.join(rest),
        })
    }
}

/// Where a mount of this process shows a home directory of its ([`home::homes_here`]) or
/// one of its keys at another path than its own: a bind mount of the home at `/opt/h` or
/// of `~/.ssh` at `/opt/ssh`, an overlay with the home as a layer. The private root shows
/// the system trees read-only, with their submounts: round thirty's review read
/// `~/.ssh/id_x` at `/opt/h/.ssh/id_x`, `/opt/ssh/id_x` and through such an overlay in
/// `workspace-write` mode, no grant asked. Masked there as the relocated keys are
/// ([`super::hostmask::HostSecrets::places`]): the home's view whole, a key's alone.
/// Nothing is looked up when no mount but the home's own shows its file system.
fn other_views_of_the_homes() -> Vec<PathBuf> {
    let mounts = MountTable::read();
    let mut views = Vec::new();
    for home in home::homes_here() {
        views.extend(other_views_of(&mounts, &home));
    }
    views
}

/// [`other_views_of_the_homes`] for one `home` (canonical).
fn other_views_of(mounts: &MountTable, home: &Path) -> Vec<PathBuf> {
    let Some(home_place) = mounts.place(home) else {
        return Vec::new();
    };
    // The home at its own path, and what lies there, are the home's masks' to hide.
    let own = |view: &Path| view.starts_with(home) || home.starts_with(view);
    let candidates: Vec<(Option<PathBuf>, PathBuf, Vec<PathBuf>)> = mounts
        .0
        .iter()
        .filter_map(|(id, (device, root, point))| {
            let layers = mounts.1.get(id).cloned().unwrap_or_default();
            let same = (*device == home_place.device).then(|| root.clone());
            let shown = same.is_some() || !layers.is_empty();
            (shown && !own(point)).then(|| (same, point.clone(), layers))
        })
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let keys: Vec<(PathBuf, Option<FsPlace>)> = home::never_visible_places(home)
        .into_iter()
        .map(|key| {
            let place = mounts.place(&key);
            (key, place)
        })
        .collect();
    let mut views = Vec::new();
    for (root, point, layers) in candidates {
        // What of the home and its keys the mount shows, by place (same device) and by
        // each overlay layer's path.
        // (what, the directory the mount shows, whether a mount inside `what` counts: a
        // key's part is a key, the home's other parts are no secret).
        let mut shows: Vec<(PathBuf, PathBuf, bool)> = Vec::new();
        if let Some(root) = &root {
            shows.push((home_place.path.clone(), root.clone(), false));
            let same = keys.iter().filter_map(|(_, p)| p.clone());
            let same = same.filter(|p| p.device == home_place.device);
            shows.extend(same.map(|p| (p.path, root.clone(), true)));
        }
        for layer in &layers {
            shows.push((home.to_path_buf(), layer.clone(), false));
            shows.extend(
                keys.iter()
                    .map(|(key, _)| (key.clone(), layer.clone(), true)),
            );
        }
        for (target, shown, inside_counts) in shows {
            if let Ok(rest) = target.strip_prefix(&shown) {
                views.push(point.join(rest));
            } else if inside_counts && shown.starts_with(&target) {
                views.push(point.clone());
            }
        }
    }
    views.retain(|view| !own(view));
    views.sort();
    views.dedup();
    views
}

/// The layers an overlay mount's line of `/proc/self/mountinfo` names in its super
/// options (`lowerdir=A:B`, `lowerdir+=A`, `upperdir=C`, `datadir+=D`); none for another
/// file system.
fn overlay_layers(line: &[u8]) -> Vec<PathBuf> {
    let Some(at) = line.windows(3).position(|w| w == b" - ") else {
        return Vec::new();
    };
    let mut fields = line[at + 3..].split(|&b| b == b' ');
    if fields.next() != Some(b"overlay".as_slice()) {
        return Vec::new();
    }
    let options = fields.nth(1).unwrap_or_default();
    let mut layers = Vec::new();
    for option in options.split(|&b| b == b',') {
        const KEYS: &[&[u8]] = &[b"lowerdir=", b"lowerdir+=", b"upperdir=", b"datadir+="];
        let Some(value) = KEYS.iter().find_map(|k| option.strip_prefix(*k)) else {
            continue;
        };
        for layer in value.split(|&b| b == b':').filter(|l| l.starts_with(b"/")) {
            layers.push(crate::workspace::mountinfo::unescape(layer));
        }
    }
    layers
}

/// Canonicalise `path` one component at a time, recording every symlink met as an alias
/// (its absolute path with a canonical parent, and its target).
fn resolve_with_aliases(
    path: &Path,
    aliases: &mut BTreeSet<SymlinkAlias>,
) -> Result<PathBuf, SandboxError> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| SandboxError::io("current directory", e))?
            .join(path)
    };
    let mut pending: Vec<std::ffi::OsString> = absolute
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut resolved = PathBuf::from("/");
    let mut hops = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let next = resolved.join(&part);
        let meta = fs::symlink_metadata(&next)
            .map_err(|e| SandboxError::io(format!("resolve {}", next.display()), e))?;
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return Err(SandboxError::Path {
                    what: PathRole::Symlinks,
                    path: absolute,
                    reason: "too many levels of symbolic links".to_string(),
                });
            }
            let target = fs::read_link(&next)
                .map_err(|e| SandboxError::io(format!("read link {}", next.display()), e))?;
            aliases.insert(SymlinkAlias {
                path: next,
                target: target.clone(),
            });
            if target.is_absolute() {
                resolved = PathBuf::from("/");
            }
            for c in target.components().rev() {
                match c {
                    Component::Normal(s) => pending.push(s.to_os_string()),
                    Component::ParentDir => pending.push("..".into()),
                    _ => {}
                }
            }
        } else {
            resolved = next;
        }
    }
    Ok(resolved)
}

fn canonicalize(what: PathRole, path: &Path) -> Result<PathBuf, SandboxError> {
    fs::canonicalize(path).map_err(|e| SandboxError::Path {
        what,
        path: path.to_path_buf(),
        reason: match e.kind() {
            std::io::ErrorKind::NotFound => "does not exist".to_owned(),
            std::io::ErrorKind::PermissionDenied => {
                "cannot be reached: permission denied on the way to it".to_owned()
            }
            _ => e.to_string(),
        },
    })
}

/// The canonical workspace, refusing `/`, the home directory and its ancestors: granting
/// any of them would hand the agent every dotfile and key the user has.
fn canonical_workspace(
    path: &Path,
    home: Option<&Path>,
    keys: &home::KeyPlaces,
) -> Result<PathBuf, SandboxError> {
    let refuse = |reason: &str| SandboxError::Workspace {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let canonical = fs::canonicalize(path).map_err(|e| refuse(&e.to_string()))?;
    if !canonical.is_dir() {
        return Err(refuse("not a directory"));
    }
    if let Some(reason) = workspace_refusal_with(&canonical, home, keys) {
        return Err(SandboxError::RefusedWorkspace {
            path: path.to_path_buf(),
            reason,
        });
    }
    Ok(canonical)
}

/// Why the canonical directory `canonical` is never a confined run's workspace (`/`, a
/// system tree, the home directory `home` or one of its ancestors, a directory that is, holds
/// or lies in one of its never-visible entries), if it is not.
/// The run mode asks before anything reads the workspace; the policy asks again.
pub fn workspace_refusal(canonical: &Path, home: Option<&Path>) -> Option<String> {
    workspace_refusal_with(canonical, home, &home::KeyPlaces::default())
}

/// [`workspace_refusal`] with the home's never-visible places resolved in `keys`.
fn workspace_refusal_with(
    canonical: &Path,
    home: Option<&Path>,
    keys: &home::KeyPlaces,
) -> Option<String> {
    if canonical == Path::new("/") {
        return Some("the filesystem root cannot be a workspace; use a project directory".into());
    }
    if let Some(tree) = REFUSED_WORKSPACE_TREES
        .iter()
        .find(|t| canonical.starts_with(t))
    {
        return Some(format!(
            "lies in {tree}, a system tree that is never a workspace; use a project directory"
        ));
    }
    if let Some(home) = home
        && home.starts_with(canonical)
    {
        return Some(
            "is the home directory or one of its ancestors, which hold keys and dotfiles; \
             use a project directory"
                .into(),
        );
    }
    let home = home.map(|home| (home, keys.places(home)));
    if let Some((_, places)) = &home
        && touches_never_visible(canonical, places)
    {
        return Some(
            "is, holds or lies in one of the home directory's keys and tokens (~/.ssh, \
             ~/.config/gh, ~/.aws, …), which are never visible to an agent; use a project \
             directory without them"
                .into(),
        );
    }
    if let Some((home, places)) = &home
        && home_mounted_beneath(canonical, home, places)
    {
        return Some(
            "is, holds or lies in a mount of the home directory (or of a directory holding \
             it, or of its keys such as ~/.ssh), which holds keys and dotfiles; use a \
             project directory without it"
                .into(),
        );
    }
    None
}

/// Whether the canonical directory `canonical` is, holds or lies in one of the home
/// directory's never-visible entries ([`home::NEVER_VISIBLE`]: `~/.ssh`, `~/.config/gh`,
/// …). As a workspace, `~/.config` showed `gh/hosts.yml` (the GitHub token) to the agent:
/// the secret scan masks by name, and a token file's name is no secret's (round
/// twenty-three).
///
/// An entry that does not exist (yet) counts where it would be made
/// (`home::resolve_leniently`): `--cd ~/.config` without `gh/`, or `coder plan --plan-file
/// ~/.netrc`, let the agent make the entry (round twenty-three's second review).
/// `places` are [`never_visible_places`] of the home directory.
fn touches_never_visible(canonical: &Path, places: &[PathBuf]) -> bool {
    places
        .iter()
        .any(|secret| secret.starts_with(canonical) || canonical.starts_with(secret))
}

/// Whether a mount strictly beneath `canonical` shows `home` (canonical) or a directory
/// holding it: a bind mount of the home directory inside a project put every dotfile and
/// key in the workspace, and in the file tools' base, by a path no comparison of paths or
/// of the base's ancestors sees (round twenty-one's review).
///
/// A mount of one of the home directory's never-visible entries ([`home::NEVER_VISIBLE`]),
/// or of a directory holding or inside one, is refused too: a bind mount of `~/.config`
/// showed `gh/hosts.yml` (the GitHub token), and one of `~/.ssh` its `authorized_keys`
/// to a `--write` grant (round twenty-three's review).
///
/// `canonical` itself is such a path too when it is, or lies in, a mount showing them: a
/// bind mount of `~/.ssh` at `/mnt/ssh`, or of the home directory at `/mnt/h`, and
/// `--read /mnt/ssh`, `--read /mnt/h` or `--read /mnt/h/.ssh` showed the keys (round
/// twenty-nine's review: only mounts strictly beneath were looked at).
///
/// `places` are [`never_visible_places`] of `home`.
fn home_mounted_beneath(canonical: &Path, home: &Path, places: &[PathBuf]) -> bool {
    let mounts = MountTable::read();
    // Most workspaces have no mount beneath them, and lie in a file system mounted whole
    // and once, where their path is their files' only one: then no place is looked up (a
    // `statx` for each of some 70 entries, twice a run; round twenty-eight).
    let own = !mounts.only_path(canonical);
    if !own && mounts.beneath(canonical).next().is_none() {
        return false;
    }
    let Some(home_place) = mounts.place(home) else {
        return false;
    };
    // An entry not made yet has no place in the mount table.
    let secrets: Vec<FsPlace> = places
        .iter()
        .filter_map(|secret| mounts.place(secret))
        .collect();
    let shows = |m: &FsPlace| {
        m.device == home_place.device && home_place.path.starts_with(&m.path)
            || secrets.iter().any(|secret| secret.overlaps(m))
    };
    let layer_shows = |layer: &PathBuf| {
        home.starts_with(layer)
            || touches_never_visible(layer, places)
            || mounts.place(layer).is_some_and(|m| shows(&m))
    };
    mounts.beneath(canonical).any(|m| shows(&m))
        || own && mounts.place(canonical).is_some_and(|m| shows(&m))
        || mounts.overlay_paths(canonical).iter().any(layer_shows)
}

/// [`workspace_refusal`] with each home directory of this process: `$HOME`'s and the
/// user's entry's (canonical). With `$HOME` alone, a run started without `HOME` (a
/// service, an MCP host's bare environment) took `--cd ~` and `--cd ~/.ssh` as its
/// workspace (round twenty-three's second review; `coder fs` had this since round
/// twenty).
pub fn workspace_refusal_here(canonical: &Path) -> Option<String> {
    workspace_refusal_keeping(canonical, &home::KeyHandoff::default())
}

/// [`workspace_refusal_here`], leaving the home keys' places it resolved in `keep` for
/// the run's policy ([`PolicyOptions::keys`]): the policy resolved the same places again
/// a millisecond later (round twenty-nine).
pub fn workspace_refusal_keeping(canonical: &Path, keep: &home::KeyHandoff) -> Option<String> {
    let homes = homes_here();
    if homes.is_empty() {
        return workspace_refusal(canonical, None);
    }
    let keys = home::KeyPlaces::of(homes.iter().cloned());
    let refusal = homes
        .iter()
        .find_map(|home| workspace_refusal_with(canonical, Some(home), &keys));
    keep.put(keys);
    refusal
}

/// `$HOME`, else the user entry's home directory ([`account_home`]).
fn home_or_account() -> Option<PathBuf> {
    env_path("HOME").or_else(account_home)
}

/// coder's own directories: the state directory (the placeholder locks and registry of
/// [`super::lease`], transcripts, sessions, the store, the listings caches), the runs
/// directory (every run's private directory and its git-guard record) and the scratch
/// places (`config::scratch`: every run's CLI home, with its login). A grant the agent
/// may write that reaches one of them (holding it, inside it, or another path to the same
/// directory), other than this run's own directories, is refused: the agent could remove
/// the locks, so that another run's ending takes this run's masks with it, or hold them
/// and block every later run; read other runs' transcripts; or plant a dead run's
/// git-guard record that the next run acts on. `--allow-tmp` is one such grant when the
/// state directory lies under `/tmp` (a home there): no narrower form of it would keep
/// the agent out.
///
/// A `--read` path reaching the lock files (the lease's, the runs' beside their
/// directories) is refused too: `flock` takes a lock on a descriptor opened only for
/// reading, so such an agent could hold the registry and fail every other run, or keep a
/// dead run's directory from being pruned. A `--read` of other parts of the state
/// directory (a transcript to study) is the user's to give. A default read grant (a
/// system tree such as `/opt`, a toolchain in the home directory) reaching any of it is
/// refused: every agent would read every run's transcripts and sessions, and hold the
/// locks.
fn refuse_reachable_coder_state(
    grants: &Grants,
    extra_read: &[PathBuf],
    own: OwnDirs<'_>,
    places: &RunPlaces,
) -> Result<(), SandboxError> {
    let lease_dir = PlaceholderLease::dir_in(own.state)?;
    let mounts = MountTable::read();
    // The scratch places (`config::scratch`) hold other runs' CLI homes, with their logins,
    // and the runs' own directories with their guard records.
    let scratch = scratch::places(own.state);
    // Every runs directory: the agent could plant a guard record a later run acts on.
    let runs_dirs: Vec<&Path> = places
        .every
        .iter()
        .chain([&places.tmp])
        .map(PathBuf::as_path)
        .filter(|d| d.exists())
        .collect();
    let coder_dirs: Vec<(&Path, CoderDir)> = [(own.state, CoderDir::State)]
        .into_iter()
        .chain(runs_dirs.iter().map(|d| (*d, scratch_role(d, own.state))))
        .chain(
            scratch
                .iter()
                .map(|d| (d.as_path(), scratch_role(d, own.state))),
        )
        .collect();
    let facts = PathFacts::new(&mounts);
    refuse_coder_dirs_reached(grants, Reach::Write, &facts, own, &coder_dirs)?;
    let mut user_reads = Grants::default();
    for path in extra_read {
        user_reads.add(path, Access::Read)?;
    }
    let mut default_reads = Grants::default();
    for (path, grant) in &grants.roots {
        if grant.0 < Access::Write && !user_reads.roots.contains_key(path) {
            default_reads.roots.insert(path.clone(), *grant);
        }
    }
    refuse_coder_dirs_reached(&default_reads, Reach::DefaultRead, &facts, own, &coder_dirs)?;
    let cli_runs: Vec<PathBuf> = scratch.iter().map(|d| d.join(CLI_RUNS_DIR)).collect();
    let worktrees = own.state.join(WORKTREES_DIR);
    let lock_dirs: Vec<(&Path, CoderDir)> = [lease_dir.as_path(), &worktrees]
        .into_iter()
        .map(|d| (d, CoderDir::State))
        .chain(runs_dirs.iter().map(|d| (*d, scratch_role(d, own.state))))
        .chain(
            cli_runs
                .iter()
                .map(|d| (d.as_path(), scratch_role(d, own.state))),
        )
        .filter(|(d, _)| d.exists())
        .collect();
    refuse_coder_dirs_reached(&user_reads, Reach::UserRead, &facts, own, &lock_dirs)
}

/// Which grants [`refuse_coder_dirs_reached`] checks, which says why they may not reach
/// coder's directories.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Every grant the agent may write.
    Write,
    /// The user's `--read` paths.
    UserRead,
    /// The grants every run gets to read (system trees, home toolchains).
    DefaultRead,
}

/// The first of `coder_dirs` that a grant of `reach` reaches, other than this run's own
/// directories, as the refusal naming the grant.
fn refuse_coder_dirs_reached(
    grants: &Grants,
    reach: Reach,
    facts: &PathFacts<'_>,
    own: OwnDirs<'_>,
    coder_dirs: &[(&Path, CoderDir)],
) -> Result<(), SandboxError> {
    let config_dir = fs::canonicalize(own.config_dir).unwrap_or_else(|_| own.config_dir.into());
    let checkouts = fs::canonicalize(own.state.join(WORKTREES_DIR)).ok();
    let is_own = |root: &Path| {
        root.starts_with(own.run_dir)
            || root.starts_with(own.tmp_dir)
            || root.starts_with(&config_dir)
            || config_dir.parent() == Some(root)
            || (root == own.workspace
                && checkouts
                    .as_deref()
                    .is_some_and(|c| root.starts_with(c) && root != c))
    };
    for &(dir, what) in coder_dirs {
        let var = what.variable();
        let canonical = fs::canonicalize(dir)
            .map_err(|e| SandboxError::io(format!("resolve {}", dir.display()), e))?;
        let at_least = match reach {
            Reach::Write => Access::Write,
            Reach::UserRead | Reach::DefaultRead => Access::Read,
        };
        let Some(grant) = grants.root_into(&canonical, at_least, facts, is_own) else {
            continue;
        };
        let reason = if reach == Reach::DefaultRead {
            format!(
                "every agent may read {} (a system directory or a toolchain in the home \
                 directory), which reaches it: it could read other runs' transcripts and \
                 sessions and hold the locks other runs wait for; set {var} (and \
                 XDG_RUNTIME_DIR) to a directory outside it",
                grant.display()
            )
        } else if reach == Reach::UserRead {
            format!(
                "the agent may read {} (a --read path), which reaches its lock files: it \
                 could hold the locks other runs wait for; narrow --read or set \
                 {var} elsewhere",
                grant.display()
            )
        } else if grant == Path::new("/tmp") && !is_workspace(own.workspace, grant) {
            format!(
                "it lies under /tmp, which --allow-tmp gives the agent: it could unlock the \
                 placeholders other runs rely on and read their transcripts; set {var} to a \
                 directory outside /tmp, or drop --allow-tmp"
            )
        } else {
            writable_grant_reaches_state(grant, what)
        };
        return Err(SandboxError::StateDirReachable {
            what,
            path: canonical,
            reason,
        });
    }
    Ok(())
}

/// Whether `grant` is the workspace (`--cd /tmp`: then not `--allow-tmp`'s grant).
fn is_workspace(workspace: &Path, grant: &Path) -> bool {
    fs::canonicalize(workspace).is_ok_and(|w| w == grant)
}

/// Why a writable grant (the workspace, a `--write` path, a cache) holding coder's state
/// directory is refused.
fn writable_grant_reaches_state(grant: &Path, what: CoderDir) -> String {
    format!(
        "the agent may write {} (the workspace, a --write path or a writable cache), which \
         reaches it: it could unlock the placeholders other runs rely on and read their \
         transcripts; set {} elsewhere or narrow the grant",
        grant.display(),
        what.variable()
    )
}

/// A scratch place's role: the state directory itself when the scratch falls back to it.
fn scratch_role(dir: &Path, state: &Path) -> CoderDir {
    if dir.starts_with(state) {
        CoderDir::State
    } else {
        CoderDir::Scratch
    }
}

/// The caller's own sandbox arguments checked without resolving a policy: each `--read`
/// and `--write` path exists, the `--deny` and `--protect` globs compile, the
/// `--allow-host` values parse, and no writable grant (the workspace under
/// `workspace-write`, a `--write` path, `/tmp` with `--allow-tmp`) holds coder's state
/// directory. [`Policy::resolve`] checks all of it again, and more; this is for a run that
/// fails before it gets there (a backend without credentials, a missing CLI), so that the
/// caller's own mistake in the arguments is the one reported.
pub fn check_agent_arguments(
    mode: Mode,
    workspace: &Path,
    args: &super::AgentSandboxArgs,
) -> Result<(), SandboxError> {
    if !mode.is_confined() {
        return Ok(());
    }
    for path in &args.read {
        canonicalize(PathRole::ReadFlag, path)?;
    }
    for path in &args.write {
        canonicalize(PathRole::WriteFlag, path)?;
    }
    super::scan::compile_globs(
        super::GlobList::Deny,
        &super::deny_globs(args.deny.iter().cloned()),
    )?;
    super::scan::compile_globs(
        super::GlobList::Protect,
        &super::protect_globs(args.no_protect, &args.protect),
    )?;
    super::agent_allow_hosts(&[], &args.allow_hosts)?;
    let Ok(state) = coder_state_dir().and_then(|dir| {
        fs::canonicalize(&dir)
            .map_err(|e| SandboxError::io(format!("resolve {}", dir.display()), e))
    }) else {
        return Ok(());
    };
    let mut roots = agent_write_roots(mode, args);
    if mode == Mode::WorkspaceWrite {
        roots.push(fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf()));
    }
    match roots.iter().find(|root| state.starts_with(root)) {
        // The workspace itself may be /tmp (`--cd /tmp`), without --allow-tmp.
        Some(root) if root.as_path() == Path::new("/tmp") && args.allow_tmp => {
            Err(SandboxError::StateDirReachable {
                what: CoderDir::State,
                path: state.clone(),
                reason: "it lies under /tmp, which --allow-tmp gives the agent: it could unlock \
                     the placeholders other runs rely on and read their transcripts; set \
                     CODER_STATE_DIR to a directory outside /tmp, or drop --allow-tmp"
                    .to_string(),
            })
        }
        Some(root) => Err(SandboxError::StateDirReachable {
            what: CoderDir::State,
            path: state.clone(),
            reason: writable_grant_reaches_state(root, CoderDir::State),
        }),
        None => Ok(()),
    }
}

/// What of coder's state a run's grants may reach: its own.
#[derive(Clone, Copy)]
struct OwnDirs<'a> {
    state: &'a Path,
    /// The run's private directory.
    run_dir: &'a Path,
    /// The agent's `TMPDIR`.
    tmp_dir: &'a Path,
    /// The CLI's config dir (and its parent, granted only when it holds nothing else).
    config_dir: &'a Path,
    /// The workspace, which is the run's own checkout (or a directory in it) when it lies
    /// in the state directory's `worktrees/` (`--worktree`).
    workspace: &'a Path,
}

/// Where the agent gets a tmpfs of its own (`confine`).
pub(super) const PRIVATE_SHM: &str = "/dev/shm";

/// The agent gets a tmpfs of its own on `/dev/shm` (`confine`), mounted over whatever the
/// private root holds there: a granted path beneath it (coder's own run directories when
/// `CODER_STATE_DIR` lies there, or a `--read` path) would be hidden, and every confined
/// run would fail inside the helper with `ENOENT`. Refused up front, naming the path.
/// Mounting such grants over the private tmpfs instead would not confine them: Landlock's
/// rule for that tmpfs reaches every mount beneath it.
fn refuse_private_shm(canonical: &Path) -> Result<(), SandboxError> {
    if !canonical.starts_with(PRIVATE_SHM) {
        return Ok(());
    }
    Err(SandboxError::Path {
        what: PathRole::Granted,
        path: canonical.to_path_buf(),
        reason: "lies in /dev/shm, which the agent gets a private tmpfs of, so the sandbox \
                 cannot show it there; set CODER_STATE_DIR (or --read) to a path outside \
                 /dev/shm, or run with --sandbox danger-full-access"
            .to_string(),
    })
}

/// What a confined agent may write besides the workspace, from the run mode's `--write`
/// paths, `--allow-tmp` and `--tool-caches` (canonical where they exist; nothing when unconfined, where the
/// agent may write whatever the user can). coder's own files that the user places (a
/// `--transcript`, a SQLite `--store`) must not lie in them: the agent could rewrite them.
pub fn agent_write_roots(mode: Mode, args: &super::AgentSandboxArgs) -> Vec<PathBuf> {
    if !mode.is_confined() {
        return Vec::new();
    }
    let canonical = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut roots: Vec<PathBuf> = args.write.iter().map(|p| canonical(p)).collect();
    if args.allow_tmp {
        roots.push(canonical(Path::new("/tmp")));
    }
    // The tool caches `--tool-caches` makes writable (as `Policy::resolve` grants them).
    if args.tool_caches
        && mode == Mode::WorkspaceWrite
        && let Some(home) = env_path("HOME").and_then(|h| fs::canonicalize(h).ok())
    {
        roots.extend(
            super::home::home_grants(&home, true)
                .into_iter()
                .filter(|(_, access)| *access == super::home::HomeAccess::Write)
                .map(|(path, _)| canonical(&path)),
        );
    }
    roots
}

/// The first of `roots` (canonical) that holds `path`, lexically or once the symlinks of
/// its nearest existing ancestor are resolved (the file itself may not exist yet), also
/// under another path (a bind mount). Resolved both ways: with `..` taken lexically, and
/// as the kernel opens it, where a `..` after a symlink climbs from the symlink's target
/// (`W/sub/../../t` is `W/t` when `W/sub` leads to `W/a/b`; round thirteen's review).
pub fn root_holding<'a>(path: &Path, roots: &'a [PathBuf]) -> Option<&'a Path> {
    let absolute = std::env::current_dir().ok()?.join(path);
    let lexical: PathBuf = absolute.components().fold(PathBuf::new(), |mut acc, c| {
        match c {
            Component::ParentDir => {
                acc.pop();
            }
            Component::CurDir => {}
            other => acc.push(other),
        }
        acc
    });
    // The nearest existing ancestor of `of`, canonical, and `of` below it.
    let resolve = |of: &Path| {
        of.ancestors().find_map(|dir| {
            let rest = of.strip_prefix(dir).ok()?;
            fs::canonicalize(dir)
                .ok()
                .map(|c| (c.clone(), c.join(rest)))
        })
    };
    let resolved: Vec<(PathBuf, PathBuf)> = [resolve(&lexical), resolve(&absolute)]
        .into_iter()
        .flatten()
        .collect();
    let by_path = roots.iter().map(PathBuf::as_path).find(|root| {
        lexical.starts_with(root) || resolved.iter().any(|(_, r)| r.starts_with(root))
    });
    by_path.or_else(|| {
        let mounts = MountTable::read();
        roots.iter().map(PathBuf::as_path).find(|root| {
            resolved
                .iter()
                .any(|(existing, _)| same_tree_elsewhere(existing, root, &mounts))
        })
    })
}

/// Whether the canonical directory `dir` lies in the canonical grant `root` under another
/// path: a bind mount of `root` (or of a directory above it) on the way to `dir`, found by
/// device and inode, or a bind mount of a directory inside `root`, found by where `dir`
/// lies in its file system ([`MountTable::place`]).
fn same_tree_elsewhere(dir: &Path, root: &Path, mounts: &MountTable) -> bool {
    let id = |p: &Path| fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let through_root = id(root).is_some_and(|root| dir.ancestors().any(|a| id(a) == Some(root)));
    let holds = |root: &FsPlace, dir: &FsPlace| {
        dir.device == root.device && dir.path.starts_with(&root.path)
    };
    through_root
        || mounts.place(dir).is_some_and(|dir| {
            mounts.place(root).is_some_and(|root| holds(&root, &dir))
                // A mount beneath the grant that shows `dir` or a directory holding it.
                || mounts.beneath(root).any(|shown| holds(&shown, &dir))
        })
}

/// A `--read` (or `--write`) directory holding a mount of the home directory, refused as
/// a workspace holding one is ([`home_mounted_beneath`]): every dotfile and key showed
/// through it, past the masks of the home directory's secrets, which are by path (round
/// twenty-two).
///
/// The home directory itself (or an ancestor) as a `--read` path, and a grant that is,
/// holds or lies in one of its never-visible entries (`--read ~/.config` with its
/// `gh/hosts.yml`, `--write ~/.ssh`), are refused the same way: each showed what the
/// mount of it is refused for (round twenty-three's review), and the home allow-list
/// drops such entries too ([`home::NEVER_VISIBLE`]).
///
/// Both home directories count: `home` (`$HOME`'s) and the user entry's
/// ([`with_account_home`]). With `$HOME` alone, root started with another `HOME` (sudo
/// keeping the caller's, a service's) had `--read /root/.config` and `--write /root/.ssh`
/// granted (round twenty-four's review).
fn refuse_home_secrets(
    what: PathRole,
    canonical: &Path,
    home: Option<&Path>,
    keys: &home::KeyPlaces,
) -> Result<(), SandboxError> {
    with_account_home(home)
        .iter()
        .try_for_each(|home| refuse_secrets_of(what, canonical, home, &keys.places(home)))
}

/// `home` (canonical), the user entry's home directory ([`account_home`], canonical) and
/// the invoking user's under `sudo` ([`super::home::invoking_user_home`]) when another.
fn with_account_home(home: Option<&Path>) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = home.map(Path::to_path_buf).into_iter().collect();
    let others = account_home()
        .into_iter()
        .chain(super::home::invoking_user_home());
    for other in others.filter_map(|h| fs::canonicalize(h).ok()) {
        if !homes.contains(&other) {
            homes.push(other);
        }
    }
    homes
}

/// [`refuse_home_secrets`] for one home directory.
fn refuse_secrets_of(
    what: PathRole,
    canonical: &Path,
    home: &Path,
    places: &[PathBuf],
) -> Result<(), SandboxError> {
    let reason = if home.starts_with(canonical) {
        "is the home directory or one of its ancestors, which hold keys and dotfiles; \
         grant a directory inside it"
    } else if touches_never_visible(canonical, places) {
        "is, holds or lies in one of the home directory's keys and tokens (~/.ssh, \
         ~/.config/gh, ~/.aws, …), which are never granted; grant a directory without them"
    } else if home_mounted_beneath(canonical, home, places) {
        HOME_MOUNT_REASON
    } else {
        return Ok(());
    };
    Err(SandboxError::Path {
        what,
        path: canonical.to_path_buf(),
        reason: reason.to_string(),
    })
}

/// Why a grant holding a mount of the home directory is refused.
const HOME_MOUNT_REASON: &str = "is, holds or lies in a mount of the home directory (or of \
     a directory holding it, or of its keys such as ~/.ssh), which holds keys and dotfiles; \
     grant a directory without it";

fn refuse_broad_write(
    path: &Path,
    home: Option<&Path>,
    keys: &home::KeyPlaces,
) -> Result<(), SandboxError> {
    match write_root_refusal(path, home, keys) {
        Some(reason) => Err(SandboxError::Path {
            what: PathRole::WriteFlag,
            path: path.to_path_buf(),
            reason,
        }),
        None => Ok(()),
    }
}

/// System trees never granted writable (nor anything under them): writing one hands the
/// agent the machine (`/etc/cron.d`, `/usr/bin`, a device, a daemon's socket in `/run`).
const REFUSED_WRITE_TREES: [&str; 13] = [
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc",
    "/sys", "/dev", "/run",
];

/// Why the canonical `path` may not be a `--write` root, if it may not: the filesystem
/// root, the home directory or an ancestor of it, or a system tree.
fn write_root_refusal(path: &Path, home: Option<&Path>, keys: &home::KeyPlaces) -> Option<String> {
    if is_broad(path, home) {
        return Some(
            "is the filesystem root, the home directory or an ancestor of it; \
             use --sandbox danger-full-access instead"
                .to_string(),
        );
    }
    let system = REFUSED_WRITE_TREES
        .iter()
        .find(|t| path.starts_with(t))
        .map(|t| {
            format!(
                "lies in {t}, a system tree the agent may never write; \
                 use --sandbox danger-full-access instead"
            )
        });
    system.or_else(|| {
        home.filter(|h| home_mounted_beneath(path, h, &keys.places(h)))
            .map(|_| HOME_MOUNT_REASON.to_string())
    })
}

/// Checks a `--write` path before a run (a `config_error` in the run mode): the message
/// names the path. A path that does not exist is left to the policy, which reports it.
pub fn check_write_root(path: &Path) -> Result<(), String> {
    let Ok(canonical) = fs::canonicalize(path) else {
        return Ok(());
    };
    let home = env_path("HOME").and_then(|h| fs::canonicalize(h).ok());
    match write_root_refusal(&canonical, home.as_deref(), &home::KeyPlaces::default()) {
        Some(reason) => Err(format!("--write {}: {reason}", path.display())),
        None => Ok(()),
    }
}

/// Checks a plan file path before a run (`coder plan --plan-file`, a `config_error`):
/// its directory must exist, be writable by this user and lie outside the system trees;
/// the file itself, when it exists, must be a regular file with one link, not a symlink.
/// Returns the path with its directory canonical.
pub fn check_plan_file(path: &Path) -> Result<PathBuf, String> {
    let shown = path.display();
    let Some(name) = path.file_name() else {
        return Err(format!(
            "--plan-file {shown}: not a file name; pass the path of the plan file"
        ));
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = fs::canonicalize(parent).map_err(|e| {
        format!(
            "--plan-file {shown}: its directory {} does not exist or cannot be reached ({e})",
            parent.display()
        )
    })?;
    if !dir.is_dir() {
        return Err(format!(
            "--plan-file {shown}: {} is not a directory",
            parent.display()
        ));
    }
    if let Some(tree) = REFUSED_WRITE_TREES.iter().find(|t| dir.starts_with(t)) {
        return Err(format!(
            "--plan-file {shown}: lies in {tree}, a system tree; put the plan elsewhere"
        ));
    }
    if nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK).is_err() {
        return Err(format!(
            "--plan-file {shown}: the directory {} is not writable by you",
            dir.display()
        ));
    }
    let canonical = dir.join(name);
    if canonical.to_str().is_none() {
        return Err(format!("--plan-file {shown}: the path is not valid UTF-8"));
    }
    let home = env_path("HOME").and_then(|h| fs::canonicalize(h).ok());
    if with_account_home(home.as_deref())
        .iter()
        .any(|home| touches_never_visible(&canonical, &never_visible_places(home)))
    {
        return Err(format!(
            "--plan-file {shown}: is or lies in one of the home directory's keys and tokens \
             (~/.ssh, ~/.netrc, …), which the agent never writes; put the plan elsewhere"
        ));
    }
    match fs::symlink_metadata(&canonical) {
        Ok(meta) if meta.file_type().is_symlink() => Err(format!(
            "--plan-file {shown}: is a symlink; pass the real path of the plan file"
        )),
        Ok(meta) if meta.is_dir() => Err(format!(
            "--plan-file {shown}: is a directory; pass the path of a file"
        )),
        Ok(meta) if !meta.is_file() => Err(format!("--plan-file {shown}: not a regular file")),
        Ok(meta) if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 => Err(format!(
            "--plan-file {shown}: has more than one hard link; writing it would change \
             another file too"
        )),
        _ => Ok(canonical),
    }
}

/// The CLI config dir of a run: the caller's (the run mode passes a fresh per-run one), or
/// a fresh empty `claude` in this run's private directory, removed with it. Never a
/// directory shared between runs: whatever the agent writes there (settings with hooks,
/// `CLAUDE.md`, agents, MCP servers in `.claude.json`) must not reach another run.
fn config_dir_for_run(given: Option<&Path>, run_dir: &Path) -> Result<PathBuf, SandboxError> {
    let dir = given.map_or_else(|| run_dir.join("claude"), Path::to_path_buf);
    create_private_dir(&dir)?;
    canonicalize(PathRole::ConfigDirectory, &dir)
}

/// Write the run's git global config (the user's identity only, see [`home::git_identity`]).
fn write_git_identity(run_dir: &Path, home: &Path) -> Result<PathBuf, SandboxError> {
    use std::io::Write;
    let path = run_dir.join("gitconfig");
    let text = home::git_identity(home, env_path("XDG_CONFIG_HOME").as_deref());
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| SandboxError::io(format!("create {}", path.display()), e))?;
    Ok(path)
}

/// Never beneath `/dev/shm`: the agent gets a tmpfs of its own there (`confine`), which
/// would hide the run's granted directories (every confined run failed with `ENOENT`),
/// and directories the helper made in it would be the agent's to rename.
///
/// Nor beneath `/tmp` (an `XDG_RUNTIME_DIR` of `/tmp/runtime-USER`, as containers set it):
/// `--allow-tmp` gives an agent all of `/tmp`, and with it every run's directory. There it
/// could read and rewrite a concurrent run's, and plant a dead run's git guard record that
/// the next run of any workspace acts on (moving the hooks of a repository that was never
/// granted into quarantine). Such runs' directories go in coder's state directory instead
/// (out of the agent's reach unless that too is under `/tmp`: SECURITY.md).
/// Where a run's sandbox directories go (round twenty-one; see [`RunPlaces::choose`]).
pub(crate) struct RunPlaces {
    /// coder's own per-run directories: the scratch place's `sandbox/`
    /// (`config::scratch`, a tmpfs where there is one), or the caller's runs directory.
    pub(crate) own: PathBuf,
    /// The agent's `TMPDIR` directories: the state directory's `sandbox-tmp/` (on disk), or
    /// the caller's runs directory's name with `-tmp`. Never read for a guard record: the
    /// agent writes in them.
    pub(crate) tmp: PathBuf,
    /// Where a stopped guard's record is kept (on disk): the state directory's `sandbox/`,
    /// or the caller's runs directory.
    pub(crate) records: PathBuf,
    /// Every directory a run's own directory may be in, `own` and `records` among them: a
    /// killed run's guard record and leftovers are looked for in each.
    pub(crate) every: Vec<PathBuf>,
}

/// The suffix of the agent's `TMPDIR` directories' parent (beside the runs directory)
/// and of each `TMPDIR`'s name (so that a `TMPDIR` and its run's own directory never take
/// one name in coder's trash).
const TMP_SUFFIX: &str = "-tmp";
/// The tool commands' `TMPDIR` in the run's scratch directory ([`Policy::tools_tmp_dir`]).
const TOOLS_TMP: &str = "tmp";

impl RunPlaces {
    /// With the caller's runs directory `given`, everything there (the `TMPDIR`s beside
    /// it); else coder's own files in the scratch place and the `TMPDIR`s on disk. Before
    /// round twenty-one the runs went to `$XDG_RUNTIME_DIR/coder/runs` where that was a
    /// directory outside `/tmp` and `/dev/shm`: a killed run's record is still read there.
    pub(crate) fn choose(given: Option<&Path>) -> Result<RunPlaces, SandboxError> {
        if let Some(dir) = given {
            return Ok(RunPlaces {
                own: dir.to_path_buf(),
                tmp: with_suffix(dir, TMP_SUFFIX),
                records: dir.to_path_buf(),
                every: vec![dir.to_path_buf()],
            });
        }
        let state = coder_state_dir()?;
        let records = state.join(SANDBOX_RUNS_DIR);
        // Made first, with the state directory: its identity names this state's runs in a
        // scratch place.
        create_private_dir(&records)?;
        let own = Scratch::choose(&state).sandbox_runs(&state);
        let legacy = env_path("XDG_RUNTIME_DIR")
            .filter(|p| {
                fs::canonicalize(p).is_ok_and(|real| {
                    real.is_dir() && !real.starts_with(PRIVATE_SHM) && !real.starts_with("/tmp")
                })
            })
            .map(|runtime| runtime.join("coder/runs"));
        let mut every: Vec<PathBuf> = scratch::places(&state)
            .iter()
            .map(|place| scratch::sandbox_runs_in(place, &state))
            .chain(legacy)
            .collect();
        for dir in [&own, &records] {
            if !every.contains(dir) {
                every.push(dir.clone());
            }
        }
        Ok(RunPlaces {
            tmp: with_suffix(&records, TMP_SUFFIX),
            own,
            records,
            every,
        })
    }
}

/// `path` with `suffix` added to its last component.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Makes the run directory `dir` (locked, [`RunLock::make_dir`]): its canonical path, its
/// lock, and the guard that removes it again if the policy fails before it owns it.
fn make_run_dir(dir: &Path) -> Result<(PathBuf, RunLock, MadeRunDir), SandboxError> {
    let lock = RunLock::make_dir(dir)
        .map_err(|e| SandboxError::io(format!("create {}", dir.display()), e))?;
    let made = MadeRunDir(Some(dir.to_path_buf()));
    let canonical = canonical_run_dir(dir)?;
    Ok((canonical, lock, made))
}

fn coder_state_dir() -> Result<PathBuf, SandboxError> {
    crate::config::state_dir().map_err(|e| SandboxError::StateDir(e.to_string()))
}

/// The npm package holding `file`: the directory right below `node_modules/` (or below
/// `node_modules/@scope/`) on its path, if any.
fn npm_package_dir(file: &Path) -> Option<PathBuf> {
    let mut dir = file.parent()?;
    loop {
        let parent = dir.parent()?;
        let parent_name = parent.file_name()?.to_string_lossy();
        let below_modules = parent_name == "node_modules";
        let below_scope = parent_name.starts_with('@')
            && parent
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "node_modules");
        if below_modules || below_scope {
            return Some(dir.to_path_buf());
        }
        dir = parent;
    }
}

/// Packages next to `package` in its scope whose names extend its own
/// (`claude-code-linux-x64` beside `claude-code`): the native binaries a wrapper package
/// starts.
fn sibling_platform_packages(package: &Path) -> Vec<PathBuf> {
    let (Some(scope), Some(name)) = (package.parent(), package.file_name()) else {
        return Vec::new();
    };
    if !scope
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('@'))
    {
        return Vec::new();
    }
    let prefix = format!("{}-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(scope) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Whether `dir` contains only `child` and files named after it (`child.lock`, ...).
fn holds_only(dir: &Path, child: &Path) -> bool {
    let Some(name) = child.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return false;
    };
    fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().all(|e| {
            let entry = e.file_name().to_string_lossy().into_owned();
            entry == name || entry.starts_with(&format!("{name}."))
        })
    })
}

/// `/`, the home directory or one of its ancestors: never granted as a whole.
fn is_broad(path: &Path, home: Option<&Path>) -> bool {
    path == Path::new("/") || home.is_some_and(|h| h.starts_with(path))
}

/// Creates `path` owner-only (and makes an existing one of ours owner-only).
fn create_private_dir(path: &Path) -> Result<(), SandboxError> {
    crate::pipeline::session::private_dir(path)
        .map_err(|e| SandboxError::io(format!("create {}", path.display()), e))
}

/// The masks' read-only empty file in the run dir.
const MASK_SOURCE: &str = "empty";

fn write_mask_source(run_dir: &Path) -> Result<(), SandboxError> {
    let path = run_dir.join(MASK_SOURCE);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&path)
        .map(drop)
        .map_err(|e| SandboxError::io(format!("create {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(mode: Mode, ws: &Path, home: &Path) -> PolicyOptions {
        let mut opts = PolicyOptions::new(mode, ws);
        opts.home = Some(home.to_path_buf());
        opts.config_dir = Some(home.join("state/config"));
        opts.runs_dir = Some(home.join("runs"));
        opts
    }

    fn fixture() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let home = dir.path().join("home");
        fs::create_dir_all(ws.join("src")).unwrap();
        fs::create_dir_all(ws.join("secrets/nested")).unwrap();
        fs::create_dir_all(&home).unwrap();
        fs::write(ws.join(".env"), "TOKEN=1").unwrap();
        fs::write(ws.join("src/.env.local"), "X=1").unwrap();
        fs::write(ws.join("secrets/nested/db.txt"), "pw").unwrap();
        fs::write(ws.join("README.md"), "hi").unwrap();
        fs::write(home.join(".bashrc"), "# rc").unwrap();
        (dir, ws, home)
    }

    #[test]
    fn mode_names_round_trip() {
        for mode in [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess] {
            assert_eq!(mode.as_str().parse::<Mode>(), Ok(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
        }
        assert!("full".parse::<Mode>().is_err());
    }

    #[test]
    fn refuses_root_home_and_its_ancestors() {
        let (_dir, _ws, home) = fixture();
        for ws in [Path::new("/"), home.as_path(), home.parent().unwrap()] {
            let err = Policy::resolve(&options(Mode::WorkspaceWrite, ws, &home)).unwrap_err();
            assert!(
                matches!(err, SandboxError::RefusedWorkspace { .. }),
                "{ws:?}: {err}"
            );
        }
    }

    #[test]
    fn workspace_write_grants_workspace_and_masks_secrets() {
        let (_dir, ws, home) = fixture();
        let mut opts = options(Mode::WorkspaceWrite, &ws, &home);
        opts.allow_hosts = vec![
            HostPort::parse("example.com").unwrap(),
            HostPort::parse("example.com:443").unwrap(),
        ];
        let policy = Policy::resolve(&opts).unwrap();
        let ws = fs::canonicalize(ws).unwrap();
        assert!(policy.is_writable(&ws.join("src/main.rs")));
        // Shell startup files often export tokens: not granted at all.
        assert!(!policy.is_granted(&fs::canonicalize(home.join(".bashrc")).unwrap()));
        assert_eq!(policy.connect_ports, vec![policy.network.proxy_port]);
        assert_eq!(policy.network.allow.len(), 1);
        let secrets: Vec<_> = policy.masked_secrets().collect();
        assert!(secrets.contains(&ws.join(".env").as_path()));
        assert!(secrets.contains(&ws.join("src/.env.local").as_path()));
        assert!(secrets.contains(&ws.join("secrets/nested/db.txt").as_path()));
        assert!(!secrets.contains(&ws.join("README.md").as_path()));
        assert!(policy.is_masked(&ws.join("secrets/new.txt")));
        assert_eq!(
            Path::new(&policy.env_set["TMPDIR"]).parent(),
            Some(Path::new(&policy.env_set["CLAUDE_CODE_TMPDIR"]))
        );
        assert!(Path::new(&policy.env_set["TMPDIR"]).is_dir());
        policy.cleanup();
        assert!(!policy.run_dir.exists());
    }

    #[test]
    fn read_only_keeps_workspace_read_only_even_through_write_roots() {
        let (dir, ws, home) = fixture();
        let policy = Policy::resolve(&options(Mode::ReadOnly, &ws, &home)).unwrap();
        let ws_c = fs::canonicalize(&ws).unwrap();
        assert!(!policy.is_writable(&ws_c.join("README.md")));
        assert!(policy.is_granted(&ws_c.join("README.md")));
        let mut opts = options(Mode::ReadOnly, &ws, &home);
        opts.extra_write = vec![dir.path().to_path_buf()];
        assert!(Policy::resolve(&opts).is_err());
    }

    #[test]
    fn broad_write_roots_are_refused() {
        let (_dir, ws, home) = fixture();
        let mut opts = options(Mode::WorkspaceWrite, &ws, &home);
        opts.extra_write = vec![home.clone()];
        let err = Policy::resolve(&opts).unwrap_err();
        assert!(err.to_string().contains("danger-full-access"), "{err}");
    }

    #[test]
    fn policy_survives_json() {
        let (_dir, ws, home) = fixture();
        let policy = Policy::resolve(&options(Mode::WorkspaceWrite, &ws, &home)).unwrap();
        let json = serde_json::to_string(&policy).unwrap();
        let back: Policy = serde_json::from_str(&json).unwrap();
        // The scan's listings and the tool configs it held stay with coder (the git
        // guard's); the helper needs neither.
        let mut expected = policy.clone();
        expected.dir_listings = ScanListings::default();
        expected.tool_guard = Default::default();
        // So do the end-of-run guard's other trees and the run's start.
        expected.outside_roots = Vec::new();
        expected.started_ns = 0;
        expected.records_dir = PathBuf::new();
        assert_eq!(back, expected);
    }

    #[test]
    fn the_end_guard_reuses_the_scans_compiled_globs() {
        let (dir, ws, home) = fixture();
        let extra = dir.path().join("extra");
        fs::create_dir_all(&extra).unwrap();
        let mut opts = options(Mode::WorkspaceWrite, &ws, &home);
        opts.extra_write = vec![extra];
        let policy = Policy::resolve(&opts).unwrap();
        let trees = &policy.tool_guard.trees;
        assert_eq!(trees.len(), 2, "{trees:?}");
        for tree in trees {
            let set = tree.compiled.0.as_ref().expect("compiled by the scan");
            assert_eq!(set.len(), tree.globs.len(), "{tree:?}");
            assert!(set.is_match(".claude/settings.json"));
        }
    }

    #[test]
    fn symlinked_grants_are_canonical_with_aliases() {
        let (dir, ws, home) = fixture();
        let dotfiles = dir.path().join("dotfiles");
        fs::create_dir_all(&dotfiles).unwrap();
        fs::write(dotfiles.join("env"), "# p").unwrap();
        fs::create_dir_all(home.join(".cargo")).unwrap();
        std::os::unix::fs::symlink(dotfiles.join("env"), home.join(".cargo/env")).unwrap();
        let policy = Policy::resolve(&options(Mode::WorkspaceWrite, &ws, &home)).unwrap();
        let target = fs::canonicalize(dotfiles.join("env")).unwrap();
        assert!(
            policy
                .roots
                .iter()
                .any(|r| r.path == target && r.access == Access::Read)
        );
        assert!(
            policy
                .aliases
                .iter()
                .any(|a| a.path.ends_with(".cargo/env") && a.target == dotfiles.join("env"))
        );
    }

    #[test]
    fn home_grants_toolchains_and_caches_and_a_sanitized_git_identity() {
        let (_dir, ws, home) = fixture();
        for rel in [".cargo/bin", ".cargo/registry", ".ssh", ".config/git"] {
            fs::create_dir_all(home.join(rel)).unwrap();
        }
        fs::write(home.join(".cargo/env"), "export PATH").unwrap();
        fs::write(home.join(".config/git/credentials"), "https://u:tok@h").unwrap();
        fs::write(
            home.join(".gitconfig"),
            "[user]\nname = A\nemail = a@b\n[credential]\nhelper = store\n",
        )
        .unwrap();
        let policy = Policy::resolve(&options(Mode::WorkspaceWrite, &ws, &home)).unwrap();
        let home = fs::canonicalize(&home).unwrap();
        assert!(policy.is_granted(&home.join(".cargo/env")));
        assert!(policy.is_granted(&home.join(".cargo/registry/x")));
        assert!(!policy.is_writable(&home.join(".cargo/registry/x")));
        for hidden in [".ssh", ".config/git/credentials", ".gitconfig", ".bashrc"] {
            assert!(!policy.is_granted(&home.join(hidden)), "{hidden}");
        }
        let identity = fs::read_to_string(&policy.env_set["GIT_CONFIG_GLOBAL"]).unwrap();
        assert_eq!(identity, "[user]\n\tname = \"A\"\n\temail = \"a@b\"\n");
        let mut opts = options(Mode::WorkspaceWrite, &ws, &home);
        opts.tool_caches = true;
        let policy = Policy::resolve(&opts).unwrap();
        assert!(policy.is_writable(&home.join(".cargo/registry/x")));
    }

    #[test]
    fn the_program_grant_is_its_npm_package_or_the_file_alone() {
        let (dir, ws, home) = fixture();
        let scope = dir.path().join("tools/node_modules/@anthropic-ai");
        fs::create_dir_all(scope.join("claude-code/bin")).unwrap();
        fs::create_dir_all(scope.join("claude-code-linux-x64")).unwrap();
        fs::create_dir_all(scope.join("other")).unwrap();
        fs::write(scope.join("claude-code/bin/claude.exe"), "").unwrap();
        let lone_dir = dir.path().join("shared-tmp");
        fs::create_dir_all(&lone_dir).unwrap();
        fs::write(lone_dir.join("claude"), "").unwrap();
        fs::write(lone_dir.join("host-file"), "").unwrap();
        let scope = fs::canonicalize(scope).unwrap();
        let lone_dir = fs::canonicalize(lone_dir).unwrap();

        let mut policy = Policy::resolve(&options(Mode::WorkspaceWrite, &ws, &home)).unwrap();
        policy
            .grant_program(&scope.join("claude-code/bin/claude.exe"))
            .unwrap();
        assert!(policy.is_granted(&scope.join("claude-code/package.json")));
        assert!(policy.is_granted(&scope.join("claude-code-linux-x64/claude")));
        assert!(!policy.is_granted(&scope.join("other")));

        policy.grant_program(&lone_dir.join("claude")).unwrap();
        assert!(policy.is_granted(&lone_dir.join("claude")));
        assert!(!policy.is_granted(&lone_dir.join("host-file")));
    }

    #[test]
    fn child_env_drops_agent_sockets_and_sets_private_dirs() {
        let (_dir, ws, home) = fixture();
        let policy = Policy::resolve(&options(Mode::WorkspaceWrite, &ws, &home)).unwrap();
        let env = policy.child_env([
            ("PATH", "/usr/bin"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("TMPDIR", "/tmp"),
            ("NO_PROXY", "127.0.0.1"),
            ("https_proxy", "http://corp:3128"),
        ]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("PATH").as_deref(), Some("/usr/bin"));
        assert_eq!(get("SSH_AUTH_SOCK"), None);
        assert_ne!(get("TMPDIR").as_deref(), Some("/tmp"));
        assert!(get("CLAUDE_CONFIG_DIR").is_some());
        // The backend is reached through coder's proxy only, even on loopback.
        assert_eq!(get("NO_PROXY"), None);
        let proxy = policy.network.proxy_url();
        for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "ALL_PROXY"] {
            assert_eq!(get(name).as_deref(), Some(proxy.as_str()), "{name}");
        }
    }
}
