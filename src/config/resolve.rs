//! Resolving a backend, in the order its layers apply: the backend's name -> the preset
//! overlaid by the config file's section -> environment and flag overrides -> the
//! credential and endpoint its kind needs -> warnings -> the CLI settings it implies.
//!
//! Each phase is a function of its own so the precedence can be read top to bottom in
//! [`resolve_backend_allowing_missing_key`]; the result is a
//! [`ResolvedBackend`](super::ResolvedBackend) and nothing here touches the filesystem
//! beyond reading the config file and checking that a cassette exists.

use std::ffi::OsString;
use std::path::PathBuf;

use super::env::{self, EnvView};
use super::preset::Profile;
use super::preset::{self, AuthScheme, BUILTIN_NAMES, BackendKind, DEFAULT_CLI_MAX_RETRIES};
use super::{
    BackendArgs, ClaudeConfigDir, ConfigError, ConfigFile, ConfigLocation, Credential, Endpoint,
    INHERITED_CREDENTIALS, KeySource, REPLAY_TOKEN, Resolution, ResolvedBackend, Scheme, Secret,
    claude_config_dir, config_file_location,
};

/// A profile with its layers applied, and where its base URL came from (for messages).
struct Layered {
    profile: Profile,
    base_url_origin: String,
    /// `CODER_BASE_URL` or `--base-url` set the URL.
    explicit_base_url: bool,
}

/// How the child reaches its backend: the URL, whether coder sets it, and the key.
struct Connection {
    base_url: Option<String>,
    sets_base_url: bool,
    credential: Option<Credential>,
    /// `KeyUnset` or `KeyEmpty` when the key variable is not usable.
    key_problem: Option<ConfigError>,
    /// The caller's `ANTHROPIC_API_KEY` must not reach the child.
    drops_caller_api_key: bool,
    warnings: Vec<String>,
}

/// Like [`super::resolve_backend`], but a missing or empty key variable is returned beside
/// the backend instead of as the error.
pub fn resolve_backend_allowing_missing_key(
    args: &BackendArgs,
    process_env: &[(OsString, OsString)],
) -> Result<Resolution, ConfigError> {
    if let Some(flag) = args.empty_flag() {
        return Err(ConfigError::EmptyFlag { flag });
    }
    let env = EnvView(process_env);
    let file = load_config_file(args, process_env)?;
    let name = backend_name(args, env, file.as_ref());
    let mut layered = layered_profile(&name, file.as_ref())
        .map_err(|e| named_where(e, args, env, file.as_ref()))?;
    apply_overrides(&mut layered, args, env);

    let kind = layered.profile.kind.unwrap_or(BackendKind::Api);
    let claude_config = claude_config_dir(env, file.as_ref())?;
    let mut connection = match kind {
        BackendKind::Api => api_connection(&name, &layered.profile, env)?,
        BackendKind::Replay => replay_connection(&name, &layered.profile)?,
        BackendKind::Inherit => inherit_connection(&mut layered, env, &claude_config),
    };
    // Only a key the caller actually has is dropped (and reported in `applied_workarounds`).
    if env.get("ANTHROPIC_API_KEY").is_some()
        && connection
            .credential
            .as_ref()
            .is_some_and(|c| c.scheme == AuthScheme::Bearer)
    {
        connection.drops_caller_api_key = true;
    }
    let endpoint = match &connection.base_url {
        Some(url) => Some(Endpoint::parse(url).ok_or_else(|| ConfigError::BadBaseUrl {
            backend: name.clone(),
            url: shown_url(url),
            origin: layered.base_url_origin.clone(),
        })?),
        None => None,
    };
    let mut warnings = std::mem::take(&mut connection.warnings);
    warnings.extend(transport_warnings(
        &name,
        endpoint.as_ref(),
        connection.credential.as_ref(),
        file.as_ref(),
    ));

    let key_problem = connection.key_problem.take();
    let backend = Resolved {
        name,
        kind,
        profile: layered.profile,
        connection,
        endpoint,
        claude_config,
        warnings,
    }
    .into_backend(file, env);
    Ok(Resolution {
        backend,
        key_problem,
    })
}

/// What [`resolve_backend_allowing_missing_key`] found, before it becomes a
/// [`ResolvedBackend`] with the config file's run-wide settings.
struct Resolved {
    name: String,
    kind: BackendKind,
    profile: Profile,
    connection: Connection,
    endpoint: Option<Endpoint>,
    claude_config: ClaudeConfigDir,
    warnings: Vec<String>,
}

impl Resolved {
    fn into_backend(self, file: Option<ConfigFile>, env: EnvView<'_>) -> ResolvedBackend {
        let Resolved {
            name,
            kind,
            profile,
            connection,
            endpoint,
            claude_config,
            warnings,
        } = self;
        let description = profile.description.clone().unwrap_or_else(|| match &file {
            Some(f) => format!("[backends.{name}] of {}", f.path.display()),
            None => name.clone(),
        });
        ResolvedBackend {
            description,
            kind,
            base_url: connection.base_url,
            endpoint,
            sets_base_url: connection.sets_base_url,
            credential: connection.credential,
            settings: cli_settings(&profile, kind),
            pass_env: profile.pass_env.clone(),
            drops_caller_api_key: connection.drops_caller_api_key,
            claude_config,
            cassette: profile.cassette.clone(),
            disallowed_tools: profile.disallowed_tools.clone().unwrap_or_default(),
            append_system_prompt: profile
                .append_system_prompt
                .clone()
                .filter(|s| !s.is_empty()),
            proxy_vars: env::proxy_vars(env),
            deny_globs: file.as_ref().map(|f| f.deny.clone()).unwrap_or_default(),
            allow_hosts: file
                .as_ref()
                .map(|f| f.allow_hosts.clone())
                .unwrap_or_default(),
            store: file.as_ref().and_then(|f| f.store.clone()),
            max_concurrent: profile.max_concurrent,
            provider_wait_s: profile.provider_wait_s,
            provider: profile.provider,
            config_file: file.map(|f| f.path),
            warnings,
            name,
        }
    }
}

/// For routing (`--backend auto`, DESIGN §10): the config file's default backend (else
/// `inherit`), which `CODER_ROUTING=off` pins, and the names of its `[backends.NAME]` tables.
pub fn routing_names(
    args: &BackendArgs,
    process_env: &[(OsString, OsString)],
) -> Result<(String, Vec<String>), ConfigError> {
    let file = load_config_file(args, process_env)?;
    let default = file
        .as_ref()
        .and_then(|f| f.default_backend.clone())
        .map_or_else(|| "inherit".to_owned(), |(n, _)| n);
    let tables = file
        .map(|f| f.backends.into_keys().collect())
        .unwrap_or_default();
    Ok((default, tables))
}

/// The config file's top-level `store` and the file's path (relative store paths are taken
/// from its folder), for the callers that need the store before a backend is resolved.
pub fn store_setting(
    args: &BackendArgs,
    process_env: &[(OsString, OsString)],
) -> Result<(Option<String>, Option<PathBuf>), ConfigError> {
    let location = config_file_location(args, process_env);
    let file = load_config_file(args, process_env)?;
    Ok(match file {
        Some(f) => (f.store, location.map(|l| l.path)),
        None => (None, None),
    })
}

/// The config file, when one is named (it must exist) or the default one exists.
fn load_config_file(
    args: &BackendArgs,
    process_env: &[(OsString, OsString)],
) -> Result<Option<ConfigFile>, ConfigError> {
    match config_file_location(args, process_env) {
        Some(ConfigLocation { path, explicit }) if explicit || path.exists() => {
            ConfigFile::load(&path).map(Some)
        }
        _ => Ok(None),
    }
}

fn nonempty(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.is_empty())
}

/// `--backend`, else `CODER_BACKEND`, else the file's `default_backend`, else `inherit`.
fn backend_name(args: &BackendArgs, env: EnvView<'_>, file: Option<&ConfigFile>) -> String {
    nonempty(&args.backend)
        .or_else(|| env.text("CODER_BACKEND").map(str::to_owned))
        .or_else(|| file.and_then(|f| f.default_backend.clone()).map(|(n, _)| n))
        .unwrap_or_else(|| "inherit".to_owned())
}

/// An unknown backend named where it was chosen when that was not `--backend`: a name
/// from `CODER_BACKEND` or the file's `default_backend` read as if the user had typed it.
fn named_where(
    e: ConfigError,
    args: &BackendArgs,
    env: EnvView<'_>,
    file: Option<&ConfigFile>,
) -> ConfigError {
    let ConfigError::UnknownBackend {
        name, near, known, ..
    } = e
    else {
        return e;
    };
    // clap fills `--backend` from CODER_BACKEND too: say what is true either way.
    let origin = if env.text("CODER_BACKEND") == Some(name.as_str()) {
        " (CODER_BACKEND is set to it)".to_owned()
    } else if nonempty(&args.backend).is_some() {
        String::new()
    } else {
        match file.and_then(|f| f.default_backend.as_ref().map(|(_, line)| (f, line))) {
            Some((f, line)) => format!(
                " (the default_backend of config file {}, line {line})",
                f.path.display()
            ),
            None => String::new(),
        }
    };
    ConfigError::UnknownBackend {
        name,
        origin,
        near,
        known,
    }
}

/// The preset (or a `replay:PATH` profile) overlaid by the file's `[backends.NAME]`.
fn layered_profile(name: &str, file: Option<&ConfigFile>) -> Result<Layered, ConfigError> {
    let mut layered = Layered {
        profile: Profile::default(),
        base_url_origin: String::from("the preset"),
        explicit_base_url: false,
    };
    if let Some(cassette) = name.strip_prefix("replay:") {
        if cassette.is_empty() {
            return Err(ConfigError::InvalidValue {
                origin: format!("backend '{name}'"),
                message: "replay: needs the cassette's path, as in replay:cassettes/run.json"
                    .into(),
            });
        }
        layered.profile = Profile {
            description: Some(format!("replay of {cassette}")),
            kind: Some(BackendKind::Replay),
            cassette: Some(PathBuf::from(cassette)),
            ..Profile::default()
        };
    } else {
        let section = file.and_then(|f| f.backends.get(name).map(|b| (f, b)));
        layered.profile = match section.and_then(|(_, b)| b.preset.as_ref()) {
            Some((preset, line)) => {
                preset::builtin(preset).ok_or_else(|| ConfigError::Malformed {
                    path: file.map(|f| f.path.clone()).unwrap_or_default(),
                    line: *line,
                    message: format!(
                        "backend '{name}': unknown preset '{preset}'{}; presets: {}",
                        did_you_mean(preset, &BUILTIN_NAMES),
                        BUILTIN_NAMES.join(", ")
                    ),
                })?
            }
            None => match (preset::builtin(name), section) {
                (Some(p), _) => p,
                (None, Some(_)) => Profile::default(),
                (None, None) => return Err(unknown_backend(name, file)),
            },
        };
        if let Some((f, b)) = section {
            if let Some(line) = b.base_url_line {
                layered.base_url_origin = format!("{}, line {line}", f.path.display());
            }
            layered.profile.overlay(b.profile.clone());
        }
    }
    if let Some(f) = file {
        layered.profile.pass_env.extend(f.pass_env.iter().cloned());
    }
    Ok(layered)
}

fn unknown_backend(name: &str, file: Option<&ConfigFile>) -> ConfigError {
    let mut known: Vec<&str> = BUILTIN_NAMES.to_vec();
    if let Some(f) = file {
        known.extend(f.backends.keys().map(String::as_str));
    }
    known.sort_unstable();
    known.dedup();
    ConfigError::UnknownBackend {
        name: name.to_owned(),
        origin: String::new(),
        near: did_you_mean(name, &known),
        known: known.join(", "),
    }
}

/// " (did you mean 'NAME'?)" for the one name of `known` that `given` is likely a
/// misspelling of, else empty.
fn did_you_mean(given: &str, known: &[&str]) -> String {
    crate::text::near_miss(given, known)
        .map(|near| format!(" (did you mean '{near}'?)"))
        .unwrap_or_default()
}

/// Environment < flags: `CODER_MODEL`, `--model`, `CODER_BASE_URL`, `--base-url`.
fn apply_overrides(layered: &mut Layered, args: &BackendArgs, env: EnvView<'_>) {
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
            None => layered.profile.model = Some(value),
            Some(origin) => {
                layered.profile.base_url = Some(value);
                layered.base_url_origin = origin.to_owned();
                layered.explicit_base_url = true;
            }
        }
    }
    // The run path reads flags through clap, which already folds the variables in; when
    // both a flag and its variable are set the flag is in `args` and wins above.
    if args.base_url.as_deref().is_some_and(|v| !v.is_empty())
        && env.text("CODER_BASE_URL") == args.base_url.as_deref()
    {
        layered.base_url_origin = "CODER_BASE_URL".into();
    }
}

/// An API backend: its URL is required, its key comes from the file or `key_env`.
fn api_connection(
    name: &str,
    profile: &Profile,
    env: EnvView<'_>,
) -> Result<Connection, ConfigError> {
    let url = profile
        .base_url
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ConfigError::MissingBaseUrl {
            backend: name.to_owned(),
        })?;
    let scheme = profile.auth.unwrap_or(AuthScheme::Bearer);
    let (credential, key_problem) = match profile.api_key.clone().filter(|k| !k.is_empty()) {
        Some(key) => (
            Some(Credential {
                scheme,
                source: KeySource::ConfigFile,
                secret: Secret(key.into()),
            }),
            None,
        ),
        None => key_from_variable(name, profile, scheme, env)?,
    };
    let mut warnings = Vec::new();
    let key_is_callers_api_key = profile.api_key.is_none()
        && scheme == AuthScheme::ApiKey
        && profile.key_env.as_deref() == Some("ANTHROPIC_API_KEY");
    if env.text("ANTHROPIC_API_KEY").is_some() && !key_is_callers_api_key {
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
    Ok(Connection {
        base_url: Some(url),
        sets_base_url: true,
        credential,
        key_problem,
        drops_caller_api_key: false,
        warnings,
    })
}

/// An API backend's key from the variable its `key_env` names: the credential, or why
/// the variable is not usable (returned beside the backend: `coder doctor` reports it).
/// A `key_env` that looks like a key itself is refused.
fn key_from_variable(
    name: &str,
    profile: &Profile,
    scheme: AuthScheme,
    env: EnvView<'_>,
) -> Result<(Option<Credential>, Option<ConfigError>), ConfigError> {
    let var = profile
        .key_env
        .clone()
        .ok_or_else(|| ConfigError::InvalidValue {
            origin: format!("backend '{name}'"),
            message: format!(
                "no key: set key_env to the name of the variable that holds the API key, \
                 in [backends.{name}]"
            ),
        })?;
    let backend = name.to_owned();
    Ok(match env.get(&var) {
        None if looks_like_a_key(&var) => {
            return Err(ConfigError::KeyEnvLooksLikeKey {
                backend,
                shown: shown_url(&var),
            });
        }
        None => (None, Some(ConfigError::KeyUnset { backend, var })),
        Some(v) if v.is_empty() => (None, Some(ConfigError::KeyEmpty { backend, var })),
        Some(v) => (
            Some(Credential {
                scheme,
                source: KeySource::Variable(var),
                secret: Secret(v.to_owned()),
            }),
            None,
        ),
    })
}

/// A replay backend: the cassette must exist; the URL comes later, from the server.
fn replay_connection(name: &str, profile: &Profile) -> Result<Connection, ConfigError> {
    let cassette = profile
        .cassette
        .clone()
        .ok_or_else(|| ConfigError::InvalidValue {
            origin: format!("backend '{name}'"),
            message: format!("kind = \"replay\" needs cassette = \"PATH\" in [backends.{name}]"),
        })?;
    if !cassette.exists() {
        return Err(ConfigError::CassetteMissing {
            backend: name.to_owned(),
            path: cassette,
        });
    }
    Ok(Connection {
        base_url: None,
        sets_base_url: false,
        credential: Some(Credential {
            scheme: AuthScheme::Bearer,
            source: KeySource::Replay,
            secret: Secret(REPLAY_TOKEN.into()),
        }),
        key_problem: None,
        drops_caller_api_key: false,
        warnings: Vec::new(),
    })
}

/// The `inherit` backend: whatever credentials the caller's environment holds.
fn inherit_connection(
    layered: &mut Layered,
    env: EnvView<'_>,
    claude_config: &ClaudeConfigDir,
) -> Connection {
    let mut warnings = Vec::new();
    let mut drops_caller_api_key = false;
    let mut key_problem = None;
    if env.text("ANTHROPIC_API_KEY").is_some() && env.text("ANTHROPIC_AUTH_TOKEN").is_some() {
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
        key_problem = Some(ConfigError::InheritWithoutCredentials {
            config_dir: claude_config.path.clone(),
        });
    }
    let (base_url, sets_base_url) =
        if layered.explicit_base_url || layered.profile.base_url.is_some() {
            (layered.profile.base_url.clone(), true)
        } else {
            layered.base_url_origin = "ANTHROPIC_BASE_URL".into();
            let url = env
                .text("ANTHROPIC_BASE_URL")
                .unwrap_or("https://api.anthropic.com");
            (Some(url.to_owned()), false)
        };
    Connection {
        base_url,
        sets_base_url,
        credential: None,
        key_problem,
        drops_caller_api_key,
        warnings,
    }
}

/// A key over plain http to a remote host; a key in a config file others can read.
fn transport_warnings(
    name: &str,
    endpoint: Option<&Endpoint>,
    credential: Option<&Credential>,
    file: Option<&ConfigFile>,
) -> Vec<String> {
    let mut warnings = Vec::new();
    if let (Some(e), Some(c)) = (endpoint, credential)
        && e.scheme == Scheme::Http
        && !e.is_loopback()
        && c.source != KeySource::Replay
    {
        warnings.push(format!(
            "backend '{name}' sends its key over plain http to {e}; use https"
        ));
    }
    if let Some(f) = file
        && f.holds_keys()
        && f.readable_by_others
    {
        warnings.push(format!(
            "config file {} holds an API key and is readable by other users: chmod 600 {}",
            f.path.display(),
            f.path.display()
        ));
    }
    warnings
}

/// The CLI's environment settings the profile implies: model slots, API timeout, the
/// CLI's own retry count, then the profile's extra variables.
fn cli_settings(profile: &Profile, kind: BackendKind) -> Vec<(String, String)> {
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
    settings
}

/// A base URL that is not one, as a message shows it: without the password of its user
/// info, and only its first characters when it looks like no URL or host at all (no `.`,
/// `:` or `/`): a key passed where the URL goes, which the message would otherwise print.
fn shown_url(url: &str) -> String {
    if url.contains(['.', ':', '/']) {
        return crate::text::redact::url_without_password(url).into_owned();
    }
    let start: String = url.chars().take(3).collect();
    format!("{start}… ({} characters)", url.chars().count())
}

/// Whether a `key_env` value looks like a key rather than a variable's name: 16 or more
/// characters mixing lower- and upper-case letters and digits (variable names are upper
/// case by convention; keys are random).
fn looks_like_a_key(var: &str) -> bool {
    var.len() >= 16
        && var.bytes().any(|b| b.is_ascii_lowercase())
        && var.bytes().any(|b| b.is_ascii_uppercase())
        && var.bytes().any(|b| b.is_ascii_digit())
}
