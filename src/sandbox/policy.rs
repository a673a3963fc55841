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
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::SandboxError;
use super::allow::HostPort;
use super::netns::{NO_PROXY_VARS, NetworkPolicy, PROXY_VARS};
use super::scan::{self, Mask, MaskKind, ScanLimits};

/// Files no mode may read or write, unless the user configures otherwise.
pub const DEFAULT_DENY_GLOBS: [&str; 5] = [
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/secrets/**",
];

/// How much the agent may do (the run mode's `--sandbox MODE` and `coder sandbox --mode`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Read the workspace and the system; write only coder's private state and temp.
    ReadOnly,
    /// `ReadOnly` plus writing the workspace (and extra roots the user names).
    #[default]
    WorkspaceWrite,
    /// No confinement at all; only the private temp and config directories.
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
    pub path: PathBuf,
    pub access: Access,
    pub is_dir: bool,
}

/// A name that leads to a granted path through a symlink, recreated in the private root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SymlinkAlias {
    /// Absolute path of the symlink (its parent is canonical).
    pub path: PathBuf,
    /// The link's target, verbatim.
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
    pub scan_limits: ScanLimits,
    /// `CLAUDE_CONFIG_DIR` for the agent; default `claude` in coder's state
    /// directory (`$CODER_STATE_DIR`, `$XDG_STATE_HOME/coder`, `~/.local/state/coder`).
    pub config_dir: Option<PathBuf>,
    /// Where per-run directories are created; default `$XDG_RUNTIME_DIR/coder/runs`, else
    /// `sandbox` in coder's state directory.
    pub runs_dir: Option<PathBuf>,
}

impl PolicyOptions {
    /// Options for `mode` in `workspace`, with defaults taken from this process's
    /// environment.
    pub fn new(mode: Mode, workspace: impl Into<PathBuf>) -> Self {
        PolicyOptions {
            mode,
            workspace: workspace.into(),
            home: env_path("HOME"),
            extra_read: Vec::new(),
            extra_write: Vec::new(),
            allow_tmp: false,
            tool_caches: false,
            allow_hosts: Vec::new(),
            proxy_port: super::netns::DEFAULT_PROXY_PORT,
            deny_globs: DEFAULT_DENY_GLOBS.iter().map(|g| g.to_string()).collect(),
            scan_limits: ScanLimits::default(),
            config_dir: None,
            runs_dir: None,
        }
    }
}

/// The resolved policy, ready to be serialized and enforced by [`super::confine`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub mode: Mode,
    /// Canonical workspace; the agent's working directory.
    pub workspace: PathBuf,
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
    /// This run's private directory (`tmp/`, `run/`, the empty mask file, the private
    /// root's mount point). The parent removes it after the run ([`Policy::cleanup`]).
    pub run_dir: PathBuf,
    /// Variables the agent's environment must have.
    pub env_set: BTreeMap<String, String>,
    /// Variables the agent's environment must not have (agent sockets, session buses).
    pub env_remove: Vec<String>,
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

/// Home-relative toolchains and shell startup files (read only).
const HOME_READ: [&str; 20] = [
    ".cargo/bin",
    ".rustup",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".pyenv",
    ".local/bin",
    ".local/lib",
    "go/bin",
    ".sdkman",
    ".bashrc",
    ".bash_profile",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".inputrc",
    ".gitconfig",
    ".config/git",
];

/// Home-relative tool caches, writable with `tool_caches`.
const HOME_CACHES: [&str; 7] = [
    ".cache",
    ".npm",
    ".cargo/registry",
    ".cargo/git",
    "go/pkg/mod",
    ".gradle",
    ".m2",
];

/// Files in the private Claude config dir that change what later runs do (hooks, agents,
/// instructions): read-only for the agent.
const CONFIG_GUARDED: [&str; 6] = [
    "settings.json",
    "settings.local.json",
    "CLAUDE.md",
    "agents",
    "commands",
    "skills",
];

impl Policy {
    /// Resolve `opts` into a policy. Creates this run's private directory and the Claude
    /// config directory; reads the workspace to find what must be masked.
    pub fn resolve(opts: &PolicyOptions) -> Result<Policy, SandboxError> {
        let home = opts.home.as_deref().and_then(|h| fs::canonicalize(h).ok());
        let workspace = canonical_workspace(&opts.workspace, home.as_deref())?;

        let config_dir = opts.config_dir.clone().unwrap_or_else(default_config_dir);
        create_private_dir(&config_dir)?;
        let config_dir = canonicalize("config directory", &config_dir)?;

        let runs_dir = opts.runs_dir.clone().unwrap_or_else(default_runs_dir);
        create_private_dir(&runs_dir)?;
        prune_stale_runs(&runs_dir);
        let run_dir = runs_dir.join(format!(
            "{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        create_private_dir(&run_dir)?;
        let run_dir = canonicalize("run directory", &run_dir)?;
        create_private_dir(&run_dir.join("tmp"))?;

        let mut env_set = BTreeMap::new();
        let text = |p: &Path| p.to_string_lossy().into_owned();
        env_set.insert("CLAUDE_CONFIG_DIR".to_string(), text(&config_dir));
        env_set.insert("TMPDIR".to_string(), text(&run_dir.join("tmp")));
        env_set.insert("CLAUDE_CODE_TMPDIR".to_string(), text(&run_dir.join("tmp")));
        // One private directory serves as both: it is created and deleted on every run,
        // and each directory more is work for the filesystem and one more tree to mount.
        env_set.insert("XDG_RUNTIME_DIR".to_string(), text(&run_dir.join("tmp")));
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

        let mut policy = Policy {
            mode: opts.mode,
            workspace: workspace.clone(),
            home: home.clone(),
            roots: Vec::new(),
            aliases: Vec::new(),
            masks: Vec::new(),
            connect_ports,
            network,
            deny_globs: opts.deny_globs.clone(),
            run_dir: run_dir.clone(),
            env_set,
            env_remove,
        };
        if !opts.mode.is_confined() {
            return Ok(policy);
        }

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
        if let Some(home) = &home {
            for rel in HOME_READ {
                grants.add_optional(&home.join(rel), Access::Read)?;
            }
            if opts.tool_caches && opts.mode == Mode::WorkspaceWrite {
                for rel in HOME_CACHES {
                    grants.add_optional(&home.join(rel), Access::Write)?;
                }
            }
        }
        let ws_access = match opts.mode {
            Mode::WorkspaceWrite => Access::Write,
            _ => Access::Read,
        };
        grants.add(&workspace, ws_access)?;
        let git = scan::git_dirs(&workspace);
        if let Some(common) = &git.common_outside {
            grants.add(common, ws_access)?;
        }
        // Claude takes `<dir>.lock` beside its config dir when it refreshes an OAuth login,
        // so the parent is writable too, but only when it holds nothing else (coder's own
        // state, or the home directory, must stay out of reach).
        grants.add(&config_dir, Access::Write)?;
        if let Some(parent) = config_dir.parent()
            && !is_broad(parent, home.as_deref())
            && holds_only(parent, &config_dir)
        {
            grants.add(parent, Access::Write)?;
        }
        grants.add(&run_dir.join("tmp"), Access::Write)?;
        if opts.allow_tmp {
            grants.add(Path::new("/tmp"), Access::Write)?;
        }

        let mut scanned = vec![workspace.clone()];
        for path in &opts.extra_read {
            let canonical = canonicalize("--read path", path)?;
            grants.add(path, Access::Read)?;
            scanned.push(canonical);
        }
        for path in &opts.extra_write {
            let canonical = canonicalize("--write path", path)?;
            refuse_broad_write(&canonical, home.as_deref())?;
            if opts.mode == Mode::ReadOnly && workspace.starts_with(&canonical) {
                return Err(SandboxError::Path {
                    what: "--write path",
                    path: canonical,
                    reason: "contains the workspace, which read-only mode keeps read-only"
                        .to_string(),
                });
            }
            grants.add(path, Access::Write)?;
            scanned.push(canonical);
        }

        let mut masks = scan::secret_masks(&scanned, &opts.deny_globs, opts.scan_limits)?;
        if opts.mode == Mode::WorkspaceWrite {
            masks.extend(scan::git_guards(&git)?);
        }
        for name in CONFIG_GUARDED {
            if let Some(mask) = scan::read_only_mask(&config_dir.join(name))? {
                masks.push(mask);
            }
        }
        if masks.len() > opts.scan_limits.max_matches {
            return Err(SandboxError::ScanLimit {
                what: "the number of masked paths",
                limit: opts.scan_limits.max_matches,
                path: workspace,
            });
        }
        masks.sort_by(|a, b| a.path.cmp(&b.path));
        masks.dedup_by(|a, b| a.path == b.path);

        policy.roots = grants.roots();
        policy.aliases = grants.aliases.into_iter().collect();
        policy.masks = masks;
        if policy.needs_mask_source() {
            write_mask_source(&policy.run_dir)?;
        }
        Ok(policy)
    }

    /// Grant reading `path` (a file or a directory) in addition to what the mode grants:
    /// the agent's own executable or install directory, for instance.
    pub fn grant_read(&mut self, path: &Path) -> Result<(), SandboxError> {
        let mut grants = Grants::default();
        for root in &self.roots {
            grants
                .roots
                .insert(root.path.clone(), (root.access, root.is_dir));
        }
        grants.aliases.extend(self.aliases.iter().cloned());
        grants.add(path, Access::Read)?;
        self.roots = grants.roots();
        self.aliases = grants.aliases.into_iter().collect();
        Ok(())
    }

    /// Grant reading the agent's program: its install directory (the directory of the
    /// resolved executable, where a package keeps its other files), or the file alone when
    /// that directory is too broad to hand out. Symlinks on the way are kept as aliases.
    pub fn grant_program(&mut self, program: &Path) -> Result<(), SandboxError> {
        let canonical = canonicalize("program", program)?;
        match canonical.parent() {
            Some(dir) if !is_broad(dir, self.home.as_deref()) => self.grant_read(dir)?,
            _ => self.grant_read(&canonical)?,
        }
        self.grant_read(program)
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

    /// The empty read-only file bind-mounted over secrets.
    pub fn mask_source(&self) -> PathBuf {
        self.run_dir.join("empty")
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

    /// Remove this run's private directory. Errors are ignored: leftovers are pruned by a
    /// later run.
    pub fn cleanup(&self) {
        let _ = fs::remove_dir_all(&self.run_dir);
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
        let canonical = resolve_with_aliases(path, &mut self.aliases)?;
        let meta = fs::metadata(&canonical)
            .map_err(|e| SandboxError::io(format!("grant {}", canonical.display()), e))?;
        let entry = self
            .roots
            .entry(canonical)
            .or_insert((access, meta.is_dir()));
        entry.0 = entry.0.max(access);
        Ok(())
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
                    what: "path",
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

fn canonicalize(what: &'static str, path: &Path) -> Result<PathBuf, SandboxError> {
    fs::canonicalize(path).map_err(|e| SandboxError::Path {
        what,
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The canonical workspace, refusing `/`, the home directory and its ancestors: granting
/// any of them would hand the agent every dotfile and key the user has.
fn canonical_workspace(path: &Path, home: Option<&Path>) -> Result<PathBuf, SandboxError> {
    let refuse = |reason: &str| SandboxError::Workspace {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let canonical = fs::canonicalize(path).map_err(|e| refuse(&e.to_string()))?;
    if !canonical.is_dir() {
        return Err(refuse("not a directory"));
    }
    if canonical == Path::new("/") {
        return Err(refuse(
            "the filesystem root cannot be a workspace; use a project directory",
        ));
    }
    if let Some(home) = home
        && home.starts_with(&canonical)
    {
        return Err(refuse(
            "is the home directory or one of its ancestors, which hold keys and dotfiles; \
             use a project directory",
        ));
    }
    Ok(canonical)
}

fn refuse_broad_write(path: &Path, home: Option<&Path>) -> Result<(), SandboxError> {
    if is_broad(path, home) {
        return Err(SandboxError::Path {
            what: "--write path",
            path: path.to_path_buf(),
            reason: "is the filesystem root, the home directory or an ancestor of it; \
                     use --sandbox danger-full-access instead"
                .to_string(),
        });
    }
    Ok(())
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// The same private directory a run gives the CLI (`claude` in coder's state directory).
fn default_config_dir() -> PathBuf {
    crate::pipeline::session::state_dir().join("claude")
}

fn default_runs_dir() -> PathBuf {
    match env_path("XDG_RUNTIME_DIR").filter(|p| p.is_dir()) {
        Some(runtime) => runtime.join("coder/runs"),
        None => crate::pipeline::session::state_dir().join("sandbox"),
    }
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

fn create_private_dir(path: &Path) -> Result<(), SandboxError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| SandboxError::io(format!("create {}", path.display()), e))
}

fn write_mask_source(run_dir: &Path) -> Result<(), SandboxError> {
    let path = run_dir.join("empty");
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&path)
        .map(drop)
        .map_err(|e| SandboxError::io(format!("create {}", path.display()), e))
}

/// Remove run directories whose owning process is gone (`<pid>-<id>`).
fn prune_stale_runs(runs_dir: &Path) {
    let Ok(entries) = fs::read_dir(runs_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        let ours = entry
            .metadata()
            .is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw());
        if !alive && ours {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
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
                matches!(err, SandboxError::Workspace { .. }),
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
        assert!(!policy.is_writable(&home.join(".bashrc")));
        assert!(policy.is_granted(&fs::canonicalize(home.join(".bashrc")).unwrap()));
        assert_eq!(policy.connect_ports, vec![policy.network.proxy_port]);
        assert_eq!(policy.network.allow.len(), 1);
        let secrets: Vec<_> = policy.masked_secrets().collect();
        assert!(secrets.contains(&ws.join(".env").as_path()));
        assert!(secrets.contains(&ws.join("src/.env.local").as_path()));
        assert!(secrets.contains(&ws.join("secrets/nested/db.txt").as_path()));
        assert!(!secrets.contains(&ws.join("README.md").as_path()));
        assert!(policy.is_masked(&ws.join("secrets/new.txt")));
        assert_eq!(
            policy.env_set["TMPDIR"],
            policy.env_set["CLAUDE_CODE_TMPDIR"]
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
        assert_eq!(back, policy);
    }

    #[test]
    fn symlinked_grants_are_canonical_with_aliases() {
        let (dir, ws, home) = fixture();
        let dotfiles = dir.path().join("dotfiles");
        fs::create_dir_all(&dotfiles).unwrap();
        fs::write(dotfiles.join("profile"), "# p").unwrap();
        std::os::unix::fs::symlink(dotfiles.join("profile"), home.join(".profile")).unwrap();
        let policy = Policy::resolve(&options(Mode::WorkspaceWrite, &ws, &home)).unwrap();
        let target = fs::canonicalize(dotfiles.join("profile")).unwrap();
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
                .any(|a| a.path.ends_with(".profile") && a.target == dotfiles.join("profile"))
        );
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
