//! Backend selection: which Anthropic-compatible API the child talks to, with which key and
//! model slots, and the environment the child gets for it.
//!
//! Settings come in layers, each overriding the one before: the built-in preset, the config
//! file (`--config`, `CODER_CONFIG`, else `$XDG_CONFIG_HOME/coder/config.toml`), the
//! environment (`CODER_BACKEND`, `CODER_MODEL`, `CODER_BASE_URL`,
//! `CODER_CLAUDE_CONFIG_DIR`), and the flags. Keys are read from a named variable at run
//! time and never stored in the file unless the user insists; they never appear in
//! messages, `Debug` output or the doctor report.
//!
//! Everything here is a pure function of the arguments and the environment handed in, so
//! the run path, `coder doctor` and the tests resolve a backend the same way.

mod env;
mod error;
mod file;
mod preset;
mod resolve;
pub mod run_dirs;
pub mod scratch;
pub mod state_file;
mod url;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

pub use env::child_environment;
pub use error::ConfigError;
pub use file::ConfigFile;
pub use preset::{
    AuthScheme, BUILTIN_NAMES, BackendKind, DEFAULT_CLI_MAX_RETRIES, Provider, Workaround,
};
pub use resolve::{resolve_backend_allowing_missing_key, routing_names, store_setting};
pub use url::{Endpoint, Scheme};

use env::EnvView;

/// The backend flags, shared by run mode and `coder doctor`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BackendArgs {
    /// Backend profile: a preset (glm, glm-cn, deepseek, minimax, minimax-cn, anthropic,
    /// inherit), a [backends.NAME] table of the config file, or replay:CASSETTE
    /// [default: the config file's default_backend, else inherit].
    #[arg(long, env = "CODER_BACKEND", value_name = "NAME")]
    pub backend: Option<String>,

    /// Config file [default: $XDG_CONFIG_HOME/coder/config.toml].
    #[arg(long, env = "CODER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Main model, replacing the backend's (ANTHROPIC_MODEL).
    #[arg(long, env = "CODER_MODEL", value_name = "MODEL")]
    pub model: Option<String>,

    /// Base URL of the API, replacing the backend's.
    #[arg(long = "base-url", env = "CODER_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,
}

impl BackendArgs {
    /// The first of these flags given explicitly as an empty value (`--backend ""`), which
    /// would otherwise silently mean the default. Empty variables (`CODER_BACKEND=`) are
    /// unset instead, as every `CODER_*` variable is ([`parse_args`]), so an empty value
    /// here came from the command line (or an MCP call's argument).
    pub fn empty_flag(&self) -> Option<&'static str> {
        let empty = |v: Option<&str>| v.is_some_and(|v| v.trim().is_empty());
        [
            ("--backend", empty(self.backend.as_deref())),
            (
                "--config",
                self.config
                    .as_ref()
                    .is_some_and(|p| p.as_os_str().is_empty()),
            ),
            ("--model", empty(self.model.as_deref())),
            ("--base-url", empty(self.base_url.as_deref())),
        ]
        .into_iter()
        .find_map(|(flag, empty)| empty.then_some(flag))
    }
}

/// Parses `args` (the program name first) as a `P`, treating every environment variable
/// an argument reads (`env = "CODER_…"`) that is set but empty as unset, the rule the rest
/// of coder's variables follow; clap alone would take the empty value as given.
pub fn parse_args<P: clap::Parser>(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> Result<P, clap::Error> {
    parse_args_of::<P>(P::command(), args)
}

/// As [`parse_args`], with `command` (`P`'s own, extended) as the parser.
pub fn parse_args_of<P: clap::FromArgMatches>(
    command: clap::Command,
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> Result<P, clap::Error> {
    let command = command.mut_args(|arg| {
        let empty = arg
            .get_env()
            .and_then(std::env::var_os)
            .is_some_and(|v| v.is_empty());
        if empty {
            arg.env(None::<&'static str>)
        } else {
            arg
        }
    });
    let matches = command.try_get_matches_from(args)?;
    P::from_arg_matches(&matches)
}

/// A key kept out of `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(OsString);

impl Secret {
    pub fn expose(&self) -> &OsStr {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where the backend's key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A variable of coder's environment (`key_env`).
    Variable(String),
    /// The config file itself (`api_key`).
    ConfigFile,
    /// A fixed token for a replay server, which checks none.
    Replay,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Variable(name) => write!(f, "${name}"),
            KeySource::ConfigFile => f.write_str("the config file"),
            KeySource::Replay => f.write_str("a dummy replay token"),
        }
    }
}

/// The key and how the child receives it.
#[derive(Debug, Clone)]
pub struct Credential {
    pub scheme: AuthScheme,
    pub source: KeySource,
    secret: Secret,
}

/// Where the child's Claude state (transcripts, `.claude.json`, settings) lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeConfigDir {
    pub path: PathBuf,
    /// Whether coder sets `CLAUDE_CONFIG_DIR` (false: the CLI's default `~/.claude` and
    /// `~/.claude.json`, for users who asked for their own).
    pub set_variable: bool,
    /// `private`, `user` or `custom`.
    pub mode: &'static str,
}

/// Caller variables any of which lets the CLI authenticate without a stored login.
pub const INHERITED_CREDENTIALS: [&str; 5] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
];

/// The token given to the CLI for a replay server.
pub const REPLAY_TOKEN: &str = "coder-replay-token";

/// A backend after layering, ready to build the child's environment.
#[derive(Debug, Clone)]
pub struct ResolvedBackend {
    name: String,
    kind: BackendKind,
    description: String,
    base_url: Option<String>,
    endpoint: Option<Endpoint>,
    /// Whether coder sets `ANTHROPIC_BASE_URL` (not for `inherit` left as it is).
    sets_base_url: bool,
    credential: Option<Credential>,
    /// Model slots, timeouts and the profile's `env` table, in the order they apply.
    settings: Vec<(String, String)>,
    pass_env: Vec<String>,
    drops_caller_api_key: bool,
    claude_config: ClaudeConfigDir,
    cassette: Option<PathBuf>,
    disallowed_tools: Vec<String>,
    append_system_prompt: Option<String>,
    proxy_vars: BTreeMap<String, String>,
    config_file: Option<PathBuf>,
    /// The config file's `deny` globs.
    deny_globs: Vec<String>,
    /// The config file's `allow_hosts`, for the sandbox's egress proxy.
    allow_hosts: Vec<String>,
    /// The config file's `store`.
    store: Option<String>,
    /// The profile's `max_concurrent`.
    max_concurrent: Option<u32>,
    /// The profile's `provider_wait_s`.
    provider_wait_s: Option<u64>,
    /// The profile's `provider`: who serves the API when the base URL does not say.
    provider: Option<Provider>,
    warnings: Vec<String>,
}

impl ResolvedBackend {
    /// The name the backend was chosen by (`glm`, `work`, `replay:PATH`).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// One line for humans: the preset's or profile's description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The API's base URL; `None` for a replay backend until [`Self::with_base_url`].
    pub fn base_url(&self) -> Option<&str> {
        self.base_url.as_deref()
    }

    /// Scheme, host and port of the base URL.
    pub fn endpoint(&self) -> Option<&Endpoint> {
        self.endpoint.as_ref()
    }

    /// The cassette a replay backend serves.
    pub fn replay_cassette(&self) -> Option<&Path> {
        self.cassette.as_deref()
    }

    /// The backend with its base URL set, for a replay backend once its local server
    /// listens (`http://127.0.0.1:PORT`).
    pub fn with_base_url(mut self, url: &str) -> Self {
        self.endpoint = Endpoint::parse(url);
        self.base_url = Some(url.to_owned());
        self.sets_base_url = true;
        self
    }

    /// The config file's `allow_hosts` (`--allow-host` values the sandbox adds).
    pub fn allow_hosts(&self) -> &[String] {
        &self.allow_hosts
    }

    /// TCP ports the child must be allowed to connect to: the API's, and the proxy's when
    /// the CLI goes through one. Empty while a replay backend has no base URL yet.
    pub fn connect_ports(&self) -> Vec<u16> {
        let mut ports = Vec::new();
        if let Some(endpoint) = &self.endpoint {
            ports.push(endpoint.port);
            if let Some(proxy) = self.proxy()
                && !ports.contains(&proxy.port)
            {
                ports.push(proxy.port);
            }
        }
        ports
    }

    /// The proxy the CLI will go through to reach the API, if any.
    pub fn proxy(&self) -> Option<Endpoint> {
        self.endpoint
            .as_ref()
            .and_then(|e| env::proxy_for(e, &self.proxy_vars))
    }

    /// Things the user should know that do not stop the run (a stray `ANTHROPIC_API_KEY`
    /// that was removed, a key sent over plain http, a world-readable file holding a key).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The key and how it is passed; `None` for `inherit`.
    pub fn credential(&self) -> Option<&Credential> {
        self.credential.as_ref()
    }

    /// Values that must be redacted from anything coder prints: the key, and the values
    /// of credential-named variables the profile's `env` table gives the child (which
    /// coder's own environment need not hold).
    pub fn secret_values(&self) -> Vec<&OsStr> {
        let settings = self
            .settings
            .iter()
            .filter(|(name, _)| crate::text::is_secret_name(OsStr::new(name)))
            .map(|(_, value)| OsStr::new(value));
        self.credential
            .iter()
            .filter(|c| c.source != KeySource::Replay)
            .map(|c| c.secret.expose())
            .chain(settings)
            .collect()
    }

    /// The child's Claude state directory.
    pub fn claude_config_dir(&self) -> &ClaudeConfigDir {
        &self.claude_config
    }

    /// Creates the private Claude config directory (mode 0700) if coder manages it.
    pub fn ensure_claude_config_dir(&self) -> Result<(), ConfigError> {
        if !self.claude_config.set_variable || self.claude_config.path.is_dir() {
            return Ok(());
        }
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(&self.claude_config.path)
            .map_err(|source| ConfigError::StateDir {
                path: self.claude_config.path.clone(),
                source,
                hint: claude_dir_hint(self.claude_config.mode),
            })
    }

    /// Tools the CLI should not offer on this backend (for `--disallowedTools`).
    pub fn disallowed_tools(&self) -> &[String] {
        &self.disallowed_tools
    }

    /// Text for the CLI's `--append-system-prompt`, when the backend needs one.
    /// What coder changed in the CLI's defaults for this backend (DESIGN §12).
    pub fn applied_workarounds(&self) -> Vec<Workaround> {
        preset::workarounds_in(
            &self.settings,
            &self.disallowed_tools,
            self.append_system_prompt.is_some(),
            self.drops_caller_api_key,
        )
    }

    pub fn append_system_prompt(&self) -> Option<&str> {
        self.append_system_prompt.as_deref()
    }

    /// Arguments for the claude command line that this backend needs:
    /// `--disallowedTools=...` and `--append-system-prompt TEXT`.
    pub fn cli_args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        if !self.disallowed_tools.is_empty() {
            args.push(format!("--disallowedTools={}", self.disallowed_tools.join(",")).into());
        }
        if let Some(text) = &self.append_system_prompt {
            args.push("--append-system-prompt".into());
            args.push(text.into());
        }
        args
    }

    /// The config file's `store` (see `crate::store`).
    pub fn store(&self) -> Option<&str> {
        self.store.as_deref()
    }

    /// How many runs may use this backend at once (slots, DESIGN §10); `None`: no limit.
    pub fn max_concurrent(&self) -> Option<u32> {
        self.max_concurrent
    }

    /// Who serves the API: the profile's `provider`, else what the base URL says (a proxy
    /// or a replay server is `Other`). A replay backend is `Other` before its server has
    /// started too: its base URL is unset until then, which would read as Anthropic's.
    pub fn provider(&self) -> Provider {
        self.provider.unwrap_or_else(|| match self.kind {
            BackendKind::Replay => Provider::Other,
            _ => Provider::from_base_url(self.base_url()),
        })
    }

    /// How long a request in flight may stay silent (the profile's `provider_wait_s`; for
    /// DeepSeek without one, DeepSeek's queueing time).
    pub fn provider_wait(&self) -> Option<std::time::Duration> {
        let deepseek = self.provider() == Provider::Deepseek;
        self.provider_wait_s
            .or(deepseek.then_some(preset::DEEPSEEK_PROVIDER_WAIT_S))
            .map(std::time::Duration::from_secs)
    }

    /// After how many CLI retries of a rate-limited request coder stops the CLI and applies
    /// its own vendor backoff (`provider-quirks.md` §5b row 19): Z.ai counts fast retries
    /// toward its risk control, and the CLI's schedule is fast.
    pub fn rate_limit_retries_allowed(&self) -> Option<u32> {
        (self.provider() == Provider::Zai).then_some(2)
    }

    /// Non-accessible globs the config file adds to the sandbox's defaults (`deny`).
    pub fn deny_globs(&self) -> &[String] {
        &self.deny_globs
    }

    /// The config file that was read, if any.
    pub fn config_file(&self) -> Option<&Path> {
        self.config_file.as_deref()
    }

    /// The variables the backend itself sets in the child, in order; an empty value
    /// removes the variable.
    pub(crate) fn backend_variables(&self) -> Vec<(String, OsString)> {
        let mut vars: Vec<(String, OsString)> = Vec::new();
        if self.sets_base_url
            && let Some(url) = &self.base_url
        {
            vars.push(("ANTHROPIC_BASE_URL".into(), url.into()));
        }
        if let Some(c) = &self.credential {
            vars.push((c.scheme.variable().into(), c.secret.expose().to_owned()));
        }
        vars.extend(
            self.settings
                .iter()
                .map(|(k, v)| (k.clone(), OsString::from(v))),
        );
        vars
    }
}

/// Where the config file is looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigLocation {
    pub path: PathBuf,
    /// Named by `--config` or `CODER_CONFIG`, so it must exist; the XDG default may not.
    pub explicit: bool,
}

/// The config file `args` and the environment point at: `--config`, `CODER_CONFIG`, else
/// `$XDG_CONFIG_HOME/coder/config.toml` (`~/.config/coder/config.toml`). `None` when there
/// is no explicit file and no home directory.
pub fn config_file_location(
    args: &BackendArgs,
    process_env: &[(OsString, OsString)],
) -> Option<ConfigLocation> {
    let env = EnvView(process_env);
    let explicit = args
        .config
        .clone()
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(|| env.text("CODER_CONFIG").map(PathBuf::from));
    match explicit {
        Some(path) => Some(ConfigLocation {
            path,
            explicit: true,
        }),
        None => env::default_config_path(env).map(|path| ConfigLocation {
            path,
            explicit: false,
        }),
    }
}

/// A resolved backend whose key may be missing, for `coder doctor`, which reports that
/// problem and still checks everything else.
#[derive(Debug)]
pub struct Resolution {
    pub backend: ResolvedBackend,
    /// `KeyUnset` or `KeyEmpty` when the key variable is not usable.
    pub key_problem: Option<ConfigError>,
}

/// Resolves the backend named by `args` (or `CODER_BACKEND`, or the config file's
/// `default_backend`, or `inherit`), layering preset, file, environment and flags.
pub fn resolve_backend(
    args: &BackendArgs,
    process_env: &[(OsString, OsString)],
) -> Result<ResolvedBackend, ConfigError> {
    let resolution = resolve_backend_allowing_missing_key(args, process_env)?;
    match resolution.key_problem {
        Some(problem) => Err(problem),
        None => Ok(resolution.backend),
    }
}

/// Where the child's Claude state goes: `private` (default, under coder's state dir),
/// `user` (the CLI's own default, or the caller's `CLAUDE_CONFIG_DIR`), or a path.
fn claude_config_dir(
    env: EnvView<'_>,
    file: Option<&ConfigFile>,
) -> Result<ClaudeConfigDir, ConfigError> {
    let (value, origin) = match env.text("CODER_CLAUDE_CONFIG_DIR") {
        Some(v) => (v.to_owned(), "CODER_CLAUDE_CONFIG_DIR".to_owned()),
        None => match file.and_then(|f| f.claude_config_dir.as_ref().map(|d| (f, d))) {
            Some((f, (v, line))) => (v.clone(), format!("{}, line {line}", f.path.display())),
            None => ("private".to_owned(), String::new()),
        },
    };
    let home = env.abs_path("HOME");
    match value.as_str() {
        "private" => {
            let state = env::state_dir(env).ok_or_else(|| no_state_dir(env.0))?;
            Ok(ClaudeConfigDir {
                path: state.join("claude"),
                set_variable: true,
                mode: "private",
            })
        }
        "user" => match env.abs_path("CLAUDE_CONFIG_DIR") {
            Some(path) => Ok(ClaudeConfigDir {
                path,
                set_variable: true,
                mode: "user",
            }),
            None => Ok(ClaudeConfigDir {
                path: home.ok_or(ConfigError::NoHome)?.join(".claude"),
                set_variable: false,
                mode: "user",
            }),
        },
        other => {
            let path = match other.strip_prefix("~/") {
                Some(rest) => home.ok_or(ConfigError::NoHome)?.join(rest),
                None => PathBuf::from(other),
            };
            if !path.is_absolute() {
                return Err(ConfigError::InvalidValue {
                    origin,
                    message: format!(
                        "claude_config_dir '{other}' must be \"private\", \"user\", or an absolute path"
                    ),
                });
            }
            Ok(ClaudeConfigDir {
                path,
                set_variable: true,
                mode: "custom",
            })
        }
    }
}

/// coder's state directory for the environment `env`: `$CODER_STATE_DIR`, else
/// `$XDG_STATE_HOME/coder`, else `~/.local/state/coder`; `None` when none is set.
pub fn state_dir_of(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    env::state_dir(env::EnvView(env))
}

/// coder's state directory for this process's environment; an error (never a shared
/// fallback such as `/tmp`) when it cannot be placed.
pub fn state_dir() -> Result<PathBuf, ConfigError> {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    state_dir_of(&env).ok_or_else(|| no_state_dir(&env))
}

/// What to change when the CLI's config directory cannot be made: in `private` mode it
/// lies in coder's state directory, placed by a variable (a CI job's read-only or shared
/// `HOME` is the usual cause); else it is the config file's `claude_config_dir`.
fn claude_dir_hint(mode: &str) -> String {
    if mode != "private" {
        return "; it is the config file's claude_config_dir: make it writable, or name \
                another"
            .to_owned();
    }
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if set("CODER_STATE_DIR") {
        return "; it lies in coder's state directory, $CODER_STATE_DIR: make that \
                writable, or set CODER_STATE_DIR to a private directory you can write"
            .to_owned();
    }
    let placed_by = match set("XDG_STATE_HOME") {
        true => "XDG_STATE_HOME ($XDG_STATE_HOME/coder)",
        false => "HOME ($HOME/.local/state/coder)",
    };
    format!(
        "; it lies in coder's state directory, placed by {placed_by}: set CODER_STATE_DIR \
         to a private directory you can write (in CI, one in the job's own temporary space)"
    )
}

/// Why `env` places no state directory: a relative `CODER_STATE_DIR`, or nothing set.
pub fn no_state_dir(env: &[(OsString, OsString)]) -> ConfigError {
    match env::EnvView(env).get("CODER_STATE_DIR") {
        Some(value) if !value.is_empty() => ConfigError::RelativeStateDir {
            value: value.to_string_lossy().into_owned(),
        },
        _ => ConfigError::NoHome,
    }
}
