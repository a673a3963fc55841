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
mod url;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

pub use env::child_environment;
pub use error::ConfigError;
pub use file::ConfigFile;
pub use preset::{AuthScheme, BUILTIN_NAMES, BackendKind, DEFAULT_CLI_MAX_RETRIES};
pub use url::{Endpoint, Scheme};

use env::EnvView;
use preset::Profile;

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
    /// The config file's `allow_hosts`, for the sandbox's egress proxy.
    allow_hosts: Vec<String>,
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

    /// Values that must be redacted from anything coder prints.
    pub fn secret_values(&self) -> Vec<&OsStr> {
        self.credential
            .iter()
            .filter(|c| c.source != KeySource::Replay)
            .map(|c| c.secret.expose())
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
            })
    }

    /// Tools the CLI should not offer on this backend (for `--disallowedTools`).
    pub fn disallowed_tools(&self) -> &[String] {
        &self.disallowed_tools
    }

    /// Text for the CLI's `--append-system-prompt`, when the backend needs one.
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

/// Like [`resolve_backend`], but a missing or empty key variable is returned beside the
/// backend instead of as the error.
pub fn resolve_backend_allowing_missing_key(
    args: &BackendArgs,
    process_env: &[(OsString, OsString)],
) -> Result<Resolution, ConfigError> {
    let env = EnvView(process_env);
    let nonempty = |s: &Option<String>| s.clone().filter(|v| !v.is_empty());

    let file = match config_file_location(args, process_env) {
        Some(ConfigLocation { path, explicit }) if explicit || path.exists() => {
            Some(ConfigFile::load(&path)?)
        }
        _ => None,
    };

    // The backend's name.
    let name = nonempty(&args.backend)
        .or_else(|| env.text("CODER_BACKEND").map(str::to_owned))
        .or_else(|| {
            file.as_ref()
                .and_then(|f| f.default_backend.clone())
                .map(|(n, _)| n)
        })
        .unwrap_or_else(|| "inherit".to_owned());

    // Preset < file.
    let mut base_url_origin = String::from("the preset");
    let mut profile = if let Some(cassette) = name.strip_prefix("replay:") {
        if cassette.is_empty() {
            return Err(ConfigError::InvalidValue {
                origin: format!("backend '{name}'"),
                message: "replay: needs the cassette's path, as in replay:cassettes/run.json"
                    .into(),
            });
        }
        Profile {
            description: Some(format!("replay of {cassette}")),
            kind: Some(BackendKind::Replay),
            cassette: Some(PathBuf::from(cassette)),
            ..Profile::default()
        }
    } else {
        let from_file = file
            .as_ref()
            .and_then(|f| f.backends.get(&name).map(|b| (f, b)));
        let mut profile = match from_file.and_then(|(_, b)| b.preset.as_ref()) {
            Some((preset, line)) => {
                preset::builtin(preset).ok_or_else(|| ConfigError::Malformed {
                    path: file.as_ref().map(|f| f.path.clone()).unwrap_or_default(),
                    line: *line,
                    message: format!(
                        "backend '{name}': unknown preset '{preset}'; presets: {}",
                        BUILTIN_NAMES.join(", ")
                    ),
                })?
            }
            None => match (preset::builtin(&name), from_file) {
                (Some(p), _) => p,
                (None, Some(_)) => Profile::default(),
                (None, None) => {
                    let mut known: Vec<&str> = BUILTIN_NAMES.to_vec();
                    if let Some(f) = &file {
                        known.extend(f.backends.keys().map(String::as_str));
                    }
                    known.sort_unstable();
                    known.dedup();
                    return Err(ConfigError::UnknownBackend {
                        name,
                        known: known.join(", "),
                    });
                }
            },
        };
        if let Some((f, b)) = from_file {
            if let Some(line) = b.base_url_line {
                base_url_origin = format!("{}, line {line}", f.path.display());
            }
            profile.overlay(b.profile.clone());
        }
        profile
    };
    if let Some(f) = &file {
        profile.pass_env.extend(f.pass_env.iter().cloned());
    }

    // Environment < flags.
    let mut explicit_base_url = false;
    for (value, origin) in [
        (env.text("CODER_MODEL").map(str::to_owned), None),
        (nonempty(&args.model), None),
        (
            env.text("CODER_BASE_URL").map(str::to_owned),
            Some("CODER_BASE_URL"),
        ),
        (nonempty(&args.base_url), Some("--base-url")),
    ] {
        let Some(value) = value else { continue };
        match origin {
            None => profile.model = Some(value),
            Some(origin) => {
                profile.base_url = Some(value);
                base_url_origin = origin.to_owned();
                explicit_base_url = true;
            }
        }
    }
    // The run path reads flags through clap, which already folds the variables in; when
    // both a flag and its variable are set the flag is in `args` and wins above.
    if args.base_url.as_deref().is_some_and(|v| !v.is_empty())
        && env.text("CODER_BASE_URL") == args.base_url.as_deref()
    {
        base_url_origin = "CODER_BASE_URL".into();
    }

    let kind = profile.kind.unwrap_or(BackendKind::Api);
    let claude_config = claude_config_dir(env, file.as_ref())?;
    let mut warnings = Vec::new();
    let caller_api_key = env.text("ANTHROPIC_API_KEY").is_some();
    let mut key_problem = None;
    let mut drops_caller_api_key = false;

    let (base_url, sets_base_url, credential) = match kind {
        BackendKind::Api => {
            let url = profile
                .base_url
                .clone()
                .filter(|u| !u.is_empty())
                .ok_or_else(|| ConfigError::MissingBaseUrl {
                    backend: name.clone(),
                })?;
            let scheme = profile.auth.unwrap_or(AuthScheme::Bearer);
            let credential = if let Some(key) = profile.api_key.clone().filter(|k| !k.is_empty()) {
                Some(Credential {
                    scheme,
                    source: KeySource::ConfigFile,
                    secret: Secret(key.into()),
                })
            } else {
                let var = profile.key_env.clone().ok_or_else(|| ConfigError::InvalidValue {
                    origin: format!("backend '{name}'"),
                    message: format!(
                        "no key: set key_env to the name of the variable that holds the API key, \
                         in [backends.{name}]"
                    ),
                })?;
                match env.get(&var) {
                    None => {
                        key_problem = Some(ConfigError::KeyUnset {
                            backend: name.clone(),
                            var: var.clone(),
                        });
                        None
                    }
                    Some(v) if v.is_empty() => {
                        key_problem = Some(ConfigError::KeyEmpty {
                            backend: name.clone(),
                            var: var.clone(),
                        });
                        None
                    }
                    Some(v) => Some(Credential {
                        scheme,
                        source: KeySource::Variable(var),
                        secret: Secret(v.to_owned()),
                    }),
                }
            };
            let key_is_callers_api_key = profile.api_key.is_none()
                && scheme == AuthScheme::ApiKey
                && profile.key_env.as_deref() == Some("ANTHROPIC_API_KEY");
            if caller_api_key && !key_is_callers_api_key {
                let source = profile
                    .key_env
                    .as_deref()
                    .filter(|_| profile.api_key.is_none())
                    .map_or_else(|| "the config file's key".to_owned(), |v| format!("${v}"));
                warnings.push(format!(
                    "ANTHROPIC_API_KEY from the environment is not passed to the child: \
                     backend '{name}' authenticates with {source}"
                ));
            }
            (Some(url), true, credential)
        }
        BackendKind::Replay => {
            let cassette = profile
                .cassette
                .clone()
                .ok_or_else(|| ConfigError::InvalidValue {
                    origin: format!("backend '{name}'"),
                    message: format!(
                        "kind = \"replay\" needs cassette = \"PATH\" in [backends.{name}]"
                    ),
                })?;
            if !cassette.exists() {
                return Err(ConfigError::CassetteMissing {
                    backend: name,
                    path: cassette,
                });
            }
            let credential = Credential {
                scheme: AuthScheme::Bearer,
                source: KeySource::Replay,
                secret: Secret(REPLAY_TOKEN.into()),
            };
            (None, false, Some(credential))
        }
        BackendKind::Inherit => {
            if caller_api_key && env.text("ANTHROPIC_AUTH_TOKEN").is_some() {
                drops_caller_api_key = true;
                warnings.push(
                    "removed ANTHROPIC_API_KEY from the child's environment: in -p mode it would \
                     override ANTHROPIC_AUTH_TOKEN"
                        .to_owned(),
                );
            }
            if INHERITED_CREDENTIALS.iter().all(|n| env.text(n).is_none())
                && !claude_config.path.join(".credentials.json").is_file()
            {
                warnings.push(format!(
                    "backend 'inherit': no ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN in the \
                     environment and no login in {}, so the CLI will answer \"Not logged in\": \
                     export a key, choose a backend with --backend, or set claude_config_dir = \
                     \"user\" to use your own claude login",
                    claude_config.path.display()
                ));
            }
            if explicit_base_url || profile.base_url.is_some() {
                (profile.base_url.clone(), true, None)
            } else {
                base_url_origin = "ANTHROPIC_BASE_URL".into();
                let url = env
                    .text("ANTHROPIC_BASE_URL")
                    .unwrap_or("https://api.anthropic.com");
                (Some(url.to_owned()), false, None)
            }
        }
    };
    if credential
        .as_ref()
        .is_some_and(|c| c.scheme == AuthScheme::Bearer)
    {
        drops_caller_api_key = true;
    }

    let endpoint = match &base_url {
        Some(url) => Some(Endpoint::parse(url).ok_or_else(|| ConfigError::BadBaseUrl {
            backend: name.clone(),
            url: url.clone(),
            origin: base_url_origin.clone(),
        })?),
        None => None,
    };
    if let (Some(e), Some(c)) = (&endpoint, &credential)
        && e.scheme == Scheme::Http
        && !e.is_loopback()
        && c.source != KeySource::Replay
    {
        warnings.push(format!(
            "backend '{name}' sends its key over plain http to {e}; use https"
        ));
    }
    if let Some(f) = &file
        && f.holds_keys()
        && f.readable_by_others
    {
        warnings.push(format!(
            "config file {} holds an API key and is readable by other users: chmod 600 {}",
            f.path.display(),
            f.path.display()
        ));
    }

    let mut settings: Vec<(String, String)> = [
        ("ANTHROPIC_MODEL", &profile.model),
        ("ANTHROPIC_SMALL_FAST_MODEL", &profile.small_fast_model),
        ("ANTHROPIC_DEFAULT_OPUS_MODEL", &profile.opus_model),
        ("ANTHROPIC_DEFAULT_SONNET_MODEL", &profile.sonnet_model),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", &profile.haiku_model),
        ("CLAUDE_CODE_SUBAGENT_MODEL", &profile.subagent_model),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.clone().map(|v| (k.to_owned(), v)))
    .collect();
    if let Some(ms) = profile.api_timeout_ms {
        settings.push(("API_TIMEOUT_MS".into(), ms.to_string()));
    }
    let max_retries = match (kind, profile.max_retries) {
        (_, Some(n)) => Some(n),
        (BackendKind::Inherit, None) => None,
        (_, None) => Some(DEFAULT_CLI_MAX_RETRIES),
    };
    if let Some(n) = max_retries {
        settings.push(("CLAUDE_CODE_MAX_RETRIES".into(), n.to_string()));
    }
    settings.extend(profile.env.clone());

    let description = profile.description.clone().unwrap_or_else(|| match &file {
        Some(f) => format!("[backends.{name}] of {}", f.path.display()),
        None => name.clone(),
    });

    Ok(Resolution {
        backend: ResolvedBackend {
            description,
            kind,
            base_url,
            endpoint,
            sets_base_url,
            credential,
            settings,
            pass_env: profile.pass_env.clone(),
            drops_caller_api_key,
            claude_config,
            cassette: profile.cassette.clone(),
            disallowed_tools: profile.disallowed_tools.clone().unwrap_or_default(),
            append_system_prompt: profile
                .append_system_prompt
                .clone()
                .filter(|s| !s.is_empty()),
            proxy_vars: env::proxy_vars(env),
            allow_hosts: file
                .as_ref()
                .map(|f| f.allow_hosts.clone())
                .unwrap_or_default(),
            config_file: file.map(|f| f.path),
            warnings,
            name,
        },
        key_problem,
    })
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
            let state = env::state_dir(env).ok_or(ConfigError::NoHome)?;
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

/// coder's state directory for the environment `env` (see [`crate::pipeline::session::state_dir`]).
pub fn state_dir_of(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    env::state_dir(env::EnvView(env))
}
