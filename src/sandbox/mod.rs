//! Confinement of the coding agent: what it may read, write and connect to, enforced by
//! the kernel.
//!
//! The agent runs shell commands without asking, so the only thing standing between it and
//! the user's SSH keys, dotfiles and `.env` files is this module. It works in two halves:
//!
//! * In the parent, [`Policy::resolve`] turns a mode ([`Mode`]), a workspace and a few
//!   options into a serializable [`Policy`]: the roots to read and write, the hosts the
//!   agent may reach through coder's egress proxy ([`allow`]), the files to mask and the
//!   names to protect (`scan`, working from one descriptor of the workspace), and the
//!   environment the agent must get. All the thinking (canonicalising, scanning for
//!   secrets, refusing a home directory as workspace) happens here, where errors are cheap
//!   to report, and nothing read from the workspace widens a grant.
//! * In a fresh single-threaded process right before `execve` (the [`helper`], coder
//!   re-executed, so no confinement code runs inside the multi-task supervisor),
//!   [`confine`] applies it: new PID, IPC and UTS namespaces under a tiny coder init
//!   (`pidns.rs`), private mount and network namespaces (the root holds only the granted
//!   paths and a fresh `/proc`; the network has loopback only, and the listener of
//!   coder's [`proxy`] goes back to coder, which serves it from outside), empty read-only
//!   files bind-mounted over every secret and the host's own (`hostmask.rs`), read-only
//!   binds over git metadata and protected tool configs, capabilities dropped, then
//!   Landlock (filesystem rights, TCP connect to the proxy only, signal and
//!   abstract-socket scoping), then the seccomp filter (`seccomp.rs`). The agent's tool
//!   commands enter one more Landlock domain ([`nest`]). Anything short of that is an
//!   error ([`SandboxError`]): the sandbox fails closed, and `danger-full-access` is the
//!   explicit way out.
//!
//! After the run's last sandboxed process is gone, [`guard_git_after_run`] ([`gitguard`])
//! cleans the git dirs the run made, which the start-of-run guards could not hold: their
//! command-running config and hooks move aside, so the user's own git runs nothing the
//! agent chose.
//!
//! Around those two sit the pieces the rest of coder needs: [`probe`] for `coder doctor`,
//! [`system_prompt_note`] to tell the model what is masked and what the mode allows, and
//! [`classify_denial`] and [`detect_denials`] to recognise sandbox denials in tool results.
//! `coder sandbox -- CMD` (its entry point is in `commands`) runs any command under the
//! same policy. Redaction of secrets in what coder prints is not here but in
//! [`crate::text`], which every channel uses.
//!
//! What the agent may see of the home directory is an allow-list (`home`); the secrets it
//! may not read are one list of globs ([`deny_globs`], [`DenyMatcher`]), shared with any
//! reader of files on a caller's behalf (`coder fs`, `coder mcp`).
//!
//! Landlock cannot express "the workspace, except `.env`" (its rules are allow-only and
//! inherited), which is why secrets are hidden with mounts rather than with rules; see
//! SECURITY.md for the threat model and the known limits (secrets already in git history,
//! no upstream-proxy chaining).

pub mod allow;
mod bytes;
mod cancel;
mod config_text;
mod confine;
pub(crate) mod denial;
mod deny;
mod gitconfig;
pub mod gitguard;
pub mod helper;
mod home;
mod hostmask;
mod lease;
mod listing;
pub mod listing_cache;
pub mod nest;
mod netns;
mod note;
mod pidns;
mod policy;
mod probe;
pub mod proxy;
mod scan;
mod scan_watch;
pub(crate) mod seccomp;
mod sys;
mod trash;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

pub use cancel::SetupCancel;
pub use confine::{Confinement, confine};
pub use denial::{Denial, DenialClass, classify_denial, denial_paths, detect_denials};
pub use deny::{DEFAULT_DENY_GLOBS, DenyMatcher, deny_globs};
pub use home::{
    CACHES as HOME_CACHES, KeyHandoff, NEVER_VISIBLE as HOME_NEVER_VISIBLE,
    TOOLCHAINS as HOME_TOOLCHAINS,
};
pub use netns::{DEFAULT_PROXY_PORT, NetworkPolicy};
pub use note::system_prompt_note;
pub use policy::{
    Access, DEFAULT_PROTECT_GLOBS, Mode, PlanFile, Policy, PolicyOptions, Root, SymlinkAlias,
    agent_write_roots, check_agent_arguments, check_plan_file, check_write_root, root_holding,
    workspace_refusal, workspace_refusal_here, workspace_refusal_keeping,
};
pub use probe::{SandboxSupport, probe, probe_network};
pub use scan::{ABSENT_TARGET, Mask, MaskKind, Placeholder, PlaceholderKind, ScanLimits};
pub use sys::exit_forked;
/// Whether an open file is encrypted (fscrypt): the ledger's scan cache does not take the
/// entries of such a directory from an earlier listing.
pub(crate) use sys::is_encrypted;
pub use trash::{Pruner as TrashPruner, discard_own, make_owner_only_inherited};

/// The policy for the agent of one run: `None` for `danger-full-access`. `env` is the
/// child's environment (for the backend's port and the run's own `CLAUDE_CONFIG_DIR`) and
/// `program` the agent's executable, whose npm package directory (or the file alone)
/// becomes readable. `plan_file` (`coder plan`, read-only mode) is the one file the agent
/// may write ([`Policy::grant_plan_file`]).
pub fn policy_for_agent(
    mode: Mode,
    workspace: &Path,
    program: &Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    extras: &AgentSandboxArgs,
    (plan_file, keys): (Option<&Path>, &KeyHandoff),
    cancel: &SetupCancel,
) -> Result<Option<Policy>, SandboxError> {
    if !mode.is_confined() {
        return Ok(None);
    }
    let mut opts = PolicyOptions::new(mode, workspace);
    opts.cancel = cancel.clone();
    opts.keys = keys.clone();
    opts.allow_hosts = agent_allow_hosts(env, &extras.allow_hosts)?;
    opts.extra_read.clone_from(&extras.read);
    opts.extra_write.clone_from(&extras.write);
    opts.allow_tmp = extras.allow_tmp;
    opts.tool_caches = extras.tool_caches;
    opts.deny_globs = deny_globs(extras.deny.iter().cloned());
    opts.protect_globs = protect_globs(extras.no_protect, &extras.protect);
    // The CLI's state goes where the child's environment says; without the variable the
    // CLI would use `~/.claude` and `~/.claude.json` in the home directory, which stays
    // read-only, so the variable is then set to `~/.claude` (keeping the user's login).
    let var = |name: &str| {
        env.iter()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| PathBuf::from(v))
    };
    opts.config_dir = var("CLAUDE_CONFIG_DIR").or_else(|| var("HOME").map(|h| h.join(".claude")));
    if plan_file.is_some() && (!extras.write.is_empty() || extras.allow_tmp) {
        return Err(SandboxError::Path {
            what: PathRole::PlanFile,
            path: plan_file.map(Path::to_path_buf).unwrap_or_default(),
            reason: "is the only path a plan run may write: drop --write and --allow-tmp"
                .to_string(),
        });
    }
    let mut policy = Policy::resolve(&opts)?;
    if let Err(e) = policy
        .grant_program(program)
        .and_then(|()| match plan_file {
            Some(path) => policy.grant_plan_file(path),
            None => Ok(()),
        })
        .and_then(|()| nest::prepare(&mut policy))
    {
        policy.cleanup();
        return Err(e);
    }
    Ok(Some(policy))
}

/// The run mode's sandbox options beyond `--sandbox MODE`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentSandboxArgs {
    /// Extra path the agent may read (repeatable).
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Extra path the agent may write (repeatable).
    #[arg(long = "write", value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// Let the agent write the shared /tmp (by default it gets a private temp dir).
    #[arg(long = "allow-tmp")]
    pub allow_tmp: bool,
    /// Let the agent write the usual tool caches (~/.cache, ~/.cargo/registry, ~/.npm, ...).
    #[arg(long = "tool-caches")]
    pub tool_caches: bool,
    /// Add a non-accessible glob (repeatable): matching files read as empty. Always on:
    /// .env, .env.*, *.pem, *.key, secrets/**, private keys, .npmrc, .netrc, kubeconfig...
    #[arg(long = "deny", value_name = "GLOB", value_parser = crate::text::non_blank)]
    pub deny: Vec<String>,
    /// Also protect these workspace paths (repeatable): readable, but not writable,
    /// creatable, deletable or renamable by the agent; one made during the run is moved
    /// aside at its end. Default, in every directory: .claude/, CLAUDE.local.md, .mcp.json,
    /// .vscode/, .idea/, .envrc, .githooks/, .husky/ and the git hook managers' configs
    /// (.pre-commit-config.yaml, lefthook.yml, .lintstagedrc*, lint-staged.config.*,
    /// simple-git-hooks.*). Nothing below node_modules/, vendor/ or site-packages/.
    #[arg(long = "protect", value_name = "GLOB", value_parser = crate::text::non_blank)]
    pub protect: Vec<String>,
    /// Drop the default protected globs (keeping those given with --protect).
    #[arg(long = "no-protect")]
    pub no_protect: bool,
    /// Let the agent reach `HOST[:PORT]` (default port 443) through coder's egress proxy,
    /// besides the backend (repeatable; presets @npm, @crates, @pypi, @github).
    #[arg(long = "allow-host", value_name = "HOST[:PORT]", value_parser = crate::text::non_blank)]
    pub allow_hosts: Vec<String>,
}

impl AgentSandboxArgs {
    /// The flags given that shape a confined run's sandbox (`--read`, `--write`, …): with
    /// `danger-full-access` they do nothing, which a run says in a warning.
    pub fn given_flags(&self) -> Vec<&'static str> {
        [
            (!self.read.is_empty(), "--read"),
            (!self.write.is_empty(), "--write"),
            (self.allow_tmp, "--allow-tmp"),
            (self.tool_caches, "--tool-caches"),
            (!self.deny.is_empty(), "--deny"),
            (!self.protect.is_empty(), "--protect"),
            (self.no_protect, "--no-protect"),
            (!self.allow_hosts.is_empty(), "--allow-host"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect()
    }
}

/// What the agent may reach through the proxy: the backend's endpoint (from the child's
/// `ANTHROPIC_BASE_URL`) and the `--allow-host` values, presets expanded.
pub fn agent_allow_hosts(
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    extra: &[String],
) -> Result<Vec<allow::HostPort>, SandboxError> {
    let mut hosts = allow::expand_all(extra)?;
    hosts.extend(allow::backend_endpoint(env));
    hosts.sort();
    hosts.dedup();
    Ok(hosts)
}

/// The protected globs: the defaults unless `no_defaults`, plus `extra`.
pub fn protect_globs(no_defaults: bool, extra: &[String]) -> Vec<String> {
    let mut globs: Vec<String> = if no_defaults {
        Vec::new()
    } else {
        DEFAULT_PROTECT_GLOBS
            .iter()
            .map(|g| g.to_string())
            .collect()
    };
    for glob in extra {
        if !globs.contains(glob) {
            globs.push(glob.clone());
        }
    }
    globs
}

/// The end-of-run git guard for `policy` ([`gitguard`]): call it once the run's last
/// sandboxed process is gone. Nothing to do for `danger-full-access` or a policy with no
/// writable tree.
pub fn guard_git_after_run(policy: &Policy) -> gitguard::GuardReport {
    if !policy.mode.is_confined()
        || (policy.guard_roots.is_empty() && policy.outside_roots.is_empty())
    {
        return gitguard::GuardReport::default();
    }
    let known: HashSet<(u64, u64)> = policy.git_known.iter().copied().collect();
    let mut report = gitguard::guard_trees(
        &policy.guard_roots,
        &known,
        &policy.tool_guard,
        &policy.dir_listings,
        gitguard::GuardLimits::for_run(),
    );
    gitguard::move_new_tops_aside(
        &policy.outside_roots,
        &known,
        &policy.guard_roots,
        gitguard::GuardLimits::for_run(),
        &mut report,
    );
    gitguard::move_replaced_held_files(
        &policy.masks,
        &policy.guard_roots,
        &known,
        policy.tool_guard.held_since_ns,
        &mut report,
    );
    gitguard::note_replaced_secrets(&policy.masks, &mut report);
    // Stopped short: what it did not reach stays, and the next run's scan would take it
    // for the user's. Its record stays for the next run to check again first.
    if let Some(why) = report.incomplete.take() {
        report.incomplete = Some(match gitguard::keep_stopped(policy, &why) {
            Ok(record) => format!(
                "{why}; its record is kept in {}: the next run checks these trees again \
                 before it starts, and refuses to start while that stops short too",
                bytes::short(&record)
            ),
            Err(e) => format!("{why}; and its record could not be kept for the next run: {e}"),
        });
    }
    report
}

/// Removes a run's private directory, the placeholders made for absent protected names and
/// its lock file when dropped (after the run's process tree is gone).
#[derive(Debug)]
pub struct RunDirCleanup(Option<policy::RunCleanup>);

impl RunDirCleanup {
    pub fn new(policy: Option<&Policy>) -> Self {
        RunDirCleanup(policy.map(Policy::run_cleanup))
    }
}

impl Drop for RunDirCleanup {
    fn drop(&mut self) {
        if let Some(cleanup) = &self.0 {
            cleanup.run();
        }
    }
}

/// Which of coder's own directories a grant reaches ([`SandboxError::StateDirReachable`]):
/// each is moved by its own variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoderDir {
    /// The state directory (`CODER_STATE_DIR`): transcripts, sessions, locks.
    State,
    /// A scratch place of the CLI's per-run homes (`CODER_SCRATCH_DIR`), with their logins.
    Scratch,
}

impl CoderDir {
    pub fn name(self) -> &'static str {
        match self {
            CoderDir::State => "coder's state directory",
            CoderDir::Scratch => "coder's scratch directory (the CLI's per-run homes)",
        }
    }

    /// The variable that puts it elsewhere.
    pub fn variable(self) -> &'static str {
        match self {
            CoderDir::State => "CODER_STATE_DIR",
            CoderDir::Scratch => "CODER_SCRATCH_DIR",
        }
    }
}

/// Why the sandbox could not be set up. Every message says what went wrong and what the
/// user can do about it; none carries file contents.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// coder's state directory cannot be placed (no `CODER_STATE_DIR`, `XDG_STATE_HOME` or
    /// `HOME`).
    #[error("{0}")]
    StateDir(String),

    /// coder's state or runs directory lies where the agent may write (the caller's
    /// grants or `--allow-tmp` reach it): refused, a configuration to change.
    #[error("{} {path}: {reason}", what.name())]
    StateDirReachable {
        what: CoderDir,
        path: PathBuf,
        reason: String,
    },

    #[error("workspace {path}: {reason}")]
    Workspace { path: PathBuf, reason: String },

    /// The workspace is one no confined run may have (`/`, a system tree, the home
    /// directory or an ancestor): the caller's `--cd` to change, not a sandbox failure.
    #[error("--cd {path}: {reason}")]
    RefusedWorkspace { path: PathBuf, reason: String },

    /// A kernel file system (`proc`, `sysfs`, ...) is mounted inside a tree the agent
    /// would be granted: the caller's mount to remove, not a sandbox failure.
    #[error(
        "{} is a `{fstype}` file system mounted inside {}, which the agent would be \
         granted: the kernel's own files (other processes' descriptors and memory, devices) \
         are never granted to a confined agent; unmount it, or run with --sandbox \
         danger-full-access",
        bytes::short(.mount),
        bytes::short(.tree)
    )]
    KernelMount {
        tree: PathBuf,
        mount: PathBuf,
        fstype: String,
    },

    /// A tree the agent would be granted lies on a kernel file system itself (the host's
    /// `/dev` bound elsewhere): as [`SandboxError::KernelMount`].
    #[error(
        "{} lies on a `{fstype}` file system, which the agent would be granted: the \
         kernel's own files (other processes' descriptors and memory, devices) are never \
         granted to a confined agent; use a project directory, or run with --sandbox \
         danger-full-access",
        bytes::short(.tree)
    )]
    OnKernelMount { tree: PathBuf, fstype: String },

    #[error("{what} {path}: {reason}")]
    Path {
        what: PathRole,
        path: PathBuf,
        reason: String,
    },

    #[error(
        "invalid {list} glob {glob:?} (from {list} or the config key `{key}`): {reason}",
        key = .list.config_key()
    )]
    Glob {
        list: GlobList,
        glob: String,
        reason: String,
    },

    #[error(
        "secret scan of {} stopped: {what} exceeds the limit of {limit}; \
         narrow the workspace (or remove what was planted there), or use --sandbox \
         danger-full-access",
        bytes::short(.path)
    )]
    ScanLimit {
        what: &'static str,
        limit: usize,
        path: PathBuf,
    },

    /// The scripts the commands of the user's git configs run, followed script by script
    /// (`sh tools/s1.sh` running `sh tools/s2.sh`, …), name more files than the scan
    /// holds: a script left out would be the agent's to rewrite for the user's next git
    /// command, so the run is refused (a `config_error`: the work tree's scripts are the
    /// user's to change).
    #[error(
        "the scripts your git config's commands run name more than {limit} files (the \
         last one reached: {}): coder cannot hold them all read-only, and one left \
         writable would run at your next git command. Shorten the chain of scripts (or \
         remove what was planted there), or use --sandbox danger-full-access",
        bytes::short(.path)
    )]
    HeldScripts { limit: usize, path: PathBuf },

    /// The scripts the commands of the user's git configs run hold more text than the
    /// scan reads in one run: reading on would make every run's setup take minutes (an
    /// agent's plant of big scripts a held script names), and a script left unread could
    /// name one that is then the agent's to rewrite, so the run is refused
    /// (a `config_error`, as [`SandboxError::HeldScripts`]).
    #[error(
        "the scripts your git config's commands run hold more than {limit_mib} MiB of text \
         (the last one read: {}): coder reads them all to hold what they run, and stops \
         here rather than make every run's setup slow. Remove what was planted there, or \
         shorten the scripts, or use --sandbox danger-full-access",
        bytes::short(.path)
    )]
    HeldScriptBytes { limit_mib: u64, path: PathBuf },

    /// The setup was stopped by a signal the caller sent ([`SetupCancel`]); what it had
    /// made is removed.
    #[error("the sandbox's setup was stopped by signal {signal}")]
    Cancelled { signal: i32 },

    /// A variable that moves a key (`DOCKER_CONFIG`, `AWS_CONFIG_FILE`, …) names a system
    /// directory the sandbox shows, or one holding one (`DOCKER_CONFIG=/etc`), or a file of
    /// a TLS trust store: all of it would be hidden as a key.
    #[error(
        "{var} names {}, which is, holds or lies in {}, a system directory the sandbox shows: \
         everything there would be hidden from the agent as {var}'s keys. Point {var} at \
         the tool's own directory or file, or unset it for coder",
        bytes::short(.place),
        bytes::short(.system)
    )]
    KeyVariableOverSystem {
        var: &'static str,
        place: PathBuf,
        system: PathBuf,
    },

    /// The end-of-run guard of an earlier run over this run's trees stopped short, and
    /// checking its trees again before this run stopped short too.
    #[error(
        "the end-of-run guard of an earlier run stopped before it had checked {} ({earlier}), \
         and checking again before this run stopped too ({now}): git metadata and tool \
         configs that run's agent made may still be there (a `.git/config` running a \
         command, a `.claude/settings.json` hook), and this run's scan would take them for \
         yours. Remove what that agent left where the check stops, then run again; or, \
         once you have checked those trees yourself (do not run git or open them in an \
         editor or a Claude Code session before), remove {}",
        .roots.iter().map(|r| bytes::short(r)).collect::<Vec<_>>().join(", "),
        bytes::short(.record)
    )]
    GuardStopped {
        roots: Vec<PathBuf>,
        earlier: String,
        now: String,
        record: PathBuf,
    },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "Landlock is not usable on this kernel ({reason}); coder needs Landlock ABI 6 \
         (Linux 6.12) or newer. Use --sandbox danger-full-access to run without confinement"
    )]
    LandlockUnavailable { reason: String },

    #[error(
        "Landlock was only partly enforced (kernel ABI {abi}, coder needs 6); refusing to run \
         half-confined. Use --sandbox danger-full-access to run without confinement"
    )]
    LandlockPartial { abi: u32 },

    #[error("Landlock ruleset: {0}")]
    Landlock(String),

    #[error(
        "{reason}; the sandbox needs namespaces (user, mount, PID, IPC, UTS) and refuses \
         to run with Landlock alone (unprivileged user namespaces are disabled here: check \
         user.max_user_namespaces, kernel.apparmor_restrict_unprivileged_userns or the \
         container's seccomp profile). Use --sandbox danger-full-access to run without \
         confinement"
    )]
    NamespaceUnavailable { reason: String },

    #[error("seccomp filter: {0}")]
    Seccomp(String),

    #[error("the supervisor exited before the child started")]
    ParentGone,

    /// A helper that entered the namespaces before its spec came got no confined policy:
    /// it refuses to run the program at all.
    #[error("the sandbox was prepared for a confined run, but the policy confines nothing")]
    PreparedUnconfined,

    #[error("sandbox setup: {op} {path}: {errno}")]
    Syscall {
        op: &'static str,
        path: String,
        errno: nix::errno::Errno,
    },

    #[error(
        "{path} changed between the secret scan and the mount (gone, or now a different \
         file or a symlink); refusing to run with a mask that may be missing"
    )]
    MaskTargetChanged { path: PathBuf },

    /// A writable grant inside a read-only one is mounted over its own place in that one:
    /// the place must still be the directory (or file) the grant was opened as.
    #[error(
        "{path} is no longer where it was granted (a directory on its way was replaced          during setup); refusing to mount the grant elsewhere"
    )]
    GrantMoved { path: PathBuf },

    #[error(
        "no private network namespace ({reason}); the agent's network is confined to coder's \
         egress proxy, which needs one (unprivileged user namespaces may be disabled here: \
         check kernel.apparmor_restrict_unprivileged_userns or the container's seccomp \
         profile). Use --sandbox danger-full-access to run without confinement"
    )]
    NetworkUnavailable { reason: String },

    #[error(
        "{} {what} while coder scanned the workspace for secrets, in each of {attempts} \
         scans: another process is moving files there, and a directory moved during a scan \
         could escape its masks. Run again when nothing else is changing the workspace",
        bytes::short(.path)
    )]
    TreeMoving {
        path: PathBuf,
        what: &'static str,
        attempts: usize,
    },

    #[error(
        "cannot watch {} while scanning it for secrets ({reason}); raise the limit or run \
         again when fewer directories are being written",
        bytes::short(.path)
    )]
    ScanUnwatchable { path: PathBuf, reason: String },

    #[error(
        "another coder run is removing its placeholders in {} and did not finish within \
         10 s; run again once it has ended",
        bytes::short(.path)
    )]
    PlaceholdersBusy { path: PathBuf },

    #[error(
        "the plan file {path} changed after it was checked (now a different file, a \
         symlink or a hard link); refusing to run"
    )]
    PlanFileChanged { path: PathBuf },

    #[error("sandbox network: {0}")]
    Network(String),

    #[error("{0}")]
    AllowHost(#[from] allow::AllowHostError),

    #[error("confine() must run in a single-threaded process (found {threads} threads)")]
    NotSingleThreaded { threads: usize },
}

/// What a path named in a [`SandboxError::Path`] is to the run: one of the caller's own
/// arguments, or something coder made or looked up itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRole {
    /// A `--read` path.
    ReadFlag,
    /// A `--write` path.
    WriteFlag,
    /// The plan file of `coder plan` (`--plan-file`).
    PlanFile,
    /// The config file (`--config`, `CODER_CONFIG` or the XDG default).
    ConfigFile,
    /// The agent's executable (`--claude-bin` or `claude` on PATH).
    Program,
    /// A run's private directory under coder's state directory.
    RunDirectory,
    /// The CLI's per-run config directory.
    ConfigDirectory,
    /// A name in the CLI's config directory that the CLI loads code or settings from.
    ConfigDirectoryEntry,
    /// A path the policy grants (the state directory, a `--read` path) that the sandbox
    /// cannot show.
    Granted,
    /// A path whose symlinks did not resolve.
    Symlinks,
}

impl PathRole {
    /// Whether the path is one the caller named, so a refusal is a bad argument
    /// (`config_error`) rather than a sandbox that cannot be had.
    pub fn is_argument(self) -> bool {
        matches!(
            self,
            PathRole::ReadFlag | PathRole::WriteFlag | PathRole::PlanFile | PathRole::ConfigFile
        )
    }
}

impl std::fmt::Display for PathRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathRole::ReadFlag => "--read",
            PathRole::WriteFlag => "--write",
            PathRole::PlanFile => "plan file",
            PathRole::ConfigFile => "config file",
            PathRole::Program => "program",
            PathRole::RunDirectory => "run directory",
            PathRole::ConfigDirectory => "config directory",
            PathRole::ConfigDirectoryEntry => "config directory entry",
            PathRole::Granted => "granted path",
            PathRole::Symlinks => "path",
        })
    }
}

/// Which list of globs a [`SandboxError::Glob`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobList {
    /// The non-accessible globs (`--deny`, config `deny`).
    Deny,
    /// The protected globs (`--protect`, config `protect`).
    Protect,
}

impl GlobList {
    fn config_key(self) -> &'static str {
        match self {
            GlobList::Deny => "deny",
            GlobList::Protect => "protect",
        }
    }
}

impl std::fmt::Display for GlobList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GlobList::Deny => "--deny",
            GlobList::Protect => "--protect",
        })
    }
}

impl SandboxError {
    /// Whether this is the caller's bad argument (a `--read`/`--write` path, a glob, an
    /// `--allow-host` value, a plan file, a grant reaching coder's state, a state directory
    /// that cannot be placed, as the run mode's `config_error`): a
    /// `config_error` (exit 78), not a sandbox that cannot be set up (71).
    pub fn is_bad_argument(&self) -> bool {
        match self {
            SandboxError::Path { what, .. } => what.is_argument(),
            SandboxError::Glob { .. }
            | SandboxError::AllowHost(_)
            | SandboxError::StateDir(_)
            | SandboxError::StateDirReachable { .. }
            | SandboxError::RefusedWorkspace { .. }
            | SandboxError::KernelMount { .. }
            | SandboxError::OnKernelMount { .. }
            | SandboxError::HeldScripts { .. }
            | SandboxError::HeldScriptBytes { .. }
            | SandboxError::KeyVariableOverSystem { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SandboxError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn sys(
        op: &'static str,
        path: impl std::fmt::Display,
        errno: nix::errno::Errno,
    ) -> Self {
        SandboxError::Syscall {
            op,
            path: path.to_string(),
            errno,
        }
    }
}
