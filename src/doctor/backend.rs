//! The backend checks: the config file, the chosen backend and its key, the model slots
//! the CLI must have mapped, what a vendor's compatibility layer is known to refuse, and
//! the credentials a run would pass on.

use std::ffi::OsString;

use serde_json::{Map, Value};

use crate::config::{
    self, BackendArgs, BackendKind, ConfigError, ConfigFile, Provider, Resolution, ResolvedBackend,
};
use crate::store::RequestShape;

use super::{Check, Status};

pub(super) fn check_config(args: &BackendArgs, env: &[(OsString, OsString)]) -> Check {
    match config::config_file_location(args, env) {
        None => Check::new(
            "config",
            Status::Ok,
            "no config file (no HOME); built-in presets only",
        ),
        Some(location) if !location.explicit && !location.path.exists() => Check::new(
            "config",
            Status::Ok,
            format!(
                "no config file at {}; built-in presets only",
                location.path.display()
            ),
        )
        .detail("path", location.path.display().to_string()),
        Some(location) => match ConfigFile::load(&location.path) {
            Ok(file) => {
                let names: Vec<&str> = file.backends.keys().map(String::as_str).collect();
                let profiles = if names.is_empty() {
                    String::new()
                } else {
                    format!("; profiles: {}", names.join(", "))
                };
                Check::new(
                    "config",
                    Status::Ok,
                    format!("{}{profiles}", location.path.display()),
                )
                .detail("path", location.path.display().to_string())
                .detail("profiles", names)
            }
            Err(e) => Check::new("config", Status::Fail, e.to_string())
                .detail("path", location.path.display().to_string()),
        },
    }
}

/// The model slots the child gets, for the report.
const MODEL_VARIABLES: [(&str, &str); 6] = [
    ("ANTHROPIC_MODEL", "main"),
    ("ANTHROPIC_DEFAULT_OPUS_MODEL", "opus"),
    ("ANTHROPIC_DEFAULT_SONNET_MODEL", "sonnet"),
    ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "haiku"),
    ("ANTHROPIC_SMALL_FAST_MODEL", "small/fast"),
    ("CLAUDE_CODE_SUBAGENT_MODEL", "subagent"),
];

/// The backend a run would use: resolved, its replay cassette loadable, its key found,
/// its warnings, and (for `inherit`) the caller's own credentials.
pub(super) fn check_backend(
    resolution: &Result<Resolution, ConfigError>,
    env: &[(OsString, OsString)],
) -> Check {
    let resolution = match resolution {
        Ok(r) => r,
        Err(ConfigError::ReadFile { .. } | ConfigError::Malformed { .. }) => {
            return Check::new("backend", Status::Skip, "the config file is unusable");
        }
        Err(e) => return Check::new("backend", Status::Fail, e.to_string()),
    };
    let backend = &resolution.backend;
    // A replay backend's cassette is read when a run starts its server: one that does not
    // load fails every run (`config_error`), so it fails here too.
    if let Some(path) = backend.replay_cassette()
        && let Err(e) = crate::replay::Cassette::load(path)
    {
        return Check::new(
            "backend",
            Status::Fail,
            format!("backend '{}': {e}", backend.name()),
        );
    }
    let child_env = config::child_environment(env, backend);
    let mut check = with_models(backend_check(backend), &child_env);
    let names: Vec<String> = child_env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    check = check.detail("child_env_names", names);

    if let Some(problem) = &resolution.key_problem {
        check.status = Status::Fail;
        check.summary = problem.to_string();
        return check;
    }
    for warning in backend.warnings() {
        check.status = Status::Warn;
        check = check.hint(warning.clone());
    }
    if backend.kind() == BackendKind::Inherit {
        check = inherit_credentials(check, backend, &child_env);
    }
    check
}

/// The backend as a passing check: its name, kind, URL (without a password), where the
/// key comes from, and the CLI config directory.
fn backend_check(backend: &ResolvedBackend) -> Check {
    let url = backend.base_url().map_or(
        "served on 127.0.0.1 by coder once a run starts".into(),
        crate::text::redact::url_without_password,
    );
    let key = match backend.credential() {
        Some(c) => format!("key from {} as {}", c.source, c.scheme.variable()),
        None => "the caller's own credentials".to_owned(),
    };
    Check::new(
        "backend",
        Status::Ok,
        format!(
            "{} ({}): {url}, {key}",
            backend.name(),
            backend.description()
        ),
    )
    .detail("name", backend.name())
    .detail("kind", backend.kind().as_str())
    .detail(
        "base_url",
        backend
            .base_url()
            .map(|u| crate::text::redact::url_without_password(u).into_owned()),
    )
    .detail(
        "claude_config_dir",
        backend.claude_config_dir().path.display().to_string(),
    )
}

/// `check` with the model slots the child gets (a hint and a `models` detail), if any.
fn with_models(mut check: Check, child_env: &[(OsString, OsString)]) -> Check {
    let mut models = Map::new();
    let mut shown = Vec::new();
    for (name, slot) in MODEL_VARIABLES {
        let value = child_env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned());
        if let Some(value) = value {
            shown.push(format!("{slot}={value}"));
            models.insert(slot.to_owned(), value.into());
        }
    }
    if !models.is_empty() {
        check = check.hint(format!("models: {}", shown.join(", ")));
        check = check.detail("models", Value::Object(models));
    }
    check
}

/// The slots the CLI picks a model from on its own; each one a vendor cannot serve is a
/// `400 [1211] Unknown Model` (or the vendor's equivalent) the first time the CLI uses it.
const SLOTS_THAT_MUST_BE_MAPPED: [(&str, &str, &str); 4] = [
    ("ANTHROPIC_MODEL", "main", "model"),
    ("ANTHROPIC_DEFAULT_OPUS_MODEL", "opus", "opus_model"),
    ("ANTHROPIC_DEFAULT_SONNET_MODEL", "sonnet", "sonnet_model"),
    ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "haiku", "haiku_model"),
];

/// Every model slot of a third-party API backend must name one of its models: an unset
/// slot makes the CLI ask for a `claude-*` id (the Haiku slot, used for side requests, is
/// the classic `1211 Unknown Model` on Z.ai). A known vendor fails the check; a proxy of
/// unknown make gets a warning (it may map the ids itself).
pub(super) fn check_model_slots(backend: &ResolvedBackend, env: &[(OsString, OsString)]) -> Check {
    let provider = backend.provider();
    let third_party = backend.kind() == BackendKind::Api
        && provider != Provider::Anthropic
        && !backend.endpoint().is_some_and(|e| e.is_loopback());
    if !third_party {
        return Check::new(
            "models",
            Status::Ok,
            "the backend serves Claude model ids (or maps them itself)",
        );
    }
    let child_env = config::child_environment(env, backend);
    let var = |name: &str| {
        child_env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .filter(|v| !v.is_empty())
    };
    let mut problems = Vec::new();
    let mut keys = Vec::new();
    for (variable, slot, key) in SLOTS_THAT_MUST_BE_MAPPED {
        match var(variable) {
            None => {
                problems.push(format!(
                    "{slot} is unset (the CLI would send a claude-* id)"
                ));
                keys.push(key);
            }
            Some(model) if model.starts_with("claude-") => {
                problems.push(format!("{slot} is {model}"));
                keys.push(key);
            }
            Some(_) => {}
        }
    }
    if problems.is_empty() {
        return Check::new(
            "models",
            Status::Ok,
            "every model slot (main, opus, sonnet, haiku) names one of the vendor's models",
        );
    }
    let status = if provider == Provider::Other {
        Status::Warn
    } else {
        Status::Fail
    };
    Check::new(
        "models",
        status,
        format!(
            "model slots this vendor cannot serve: {}; its first use fails with an unknown \
             model error (Z.ai: 1211)",
            problems.join(", ")
        ),
    )
    .hint(format!("set {} in the backend's profile", keys.join(", ")))
    .detail("unmapped", keys)
}

/// What coder changes for this backend's vendor: the workarounds every run gets, the
/// request shape the store remembers (after a vendor rejected the full one), and the
/// vendor-specific clocks.
pub(super) fn check_compat(
    backend: &ResolvedBackend,
    store: &crate::store::StoreArgs,
    args: &BackendArgs,
    env: &[(OsString, OsString)],
) -> Check {
    let provider = backend.provider();
    let mut parts = vec![format!("provider {}", provider.as_str())];
    let workarounds: Vec<String> = backend
        .applied_workarounds()
        .iter()
        .map(|w| w.as_str().to_owned())
        .collect();
    if !workarounds.is_empty() {
        parts.push(format!("workarounds {}", workarounds.join(", ")));
    }
    let shape = remembered_shape(backend, store, args, env);
    parts.push(match &shape {
        Ok(RequestShape::Compat) => {
            "request shape compat (remembered: the vendor rejected the full shape)".to_owned()
        }
        Ok(RequestShape::Full) => "request shape full".to_owned(),
        // The store check says why it cannot be read.
        Err(_) => "request shape full (the store cannot be read: see the store check)".to_owned(),
    });
    if let Some(wait) = backend.provider_wait() {
        parts.push(format!(
            "a request in flight may stay silent {} s",
            wait.as_secs()
        ));
    }
    if let Some(n) = backend.rate_limit_retries_allowed() {
        parts.push(format!("the CLI's 429 retries are cut at {n}"));
    }
    Check::new("compat", Status::Ok, parts.join("; "))
        .detail("provider", provider.as_str())
        .detail("applied_workarounds", workarounds)
        .detail(
            "request_shape",
            match shape {
                Ok(RequestShape::Compat) => "compat",
                _ => "full",
            },
        )
}

/// The request shape the run's store remembers for `backend`; a store that does not exist
/// yet remembers nothing.
pub(super) fn remembered_shape(
    backend: &ResolvedBackend,
    store: &crate::store::StoreArgs,
    args: &BackendArgs,
    env: &[(OsString, OsString)],
) -> Result<RequestShape, String> {
    let location = super::store::store_location(store, args, env)?;
    if !location.may_hold_state() {
        return Ok(RequestShape::Full);
    }
    let store = crate::store::Store::open(&location).map_err(|e| e.to_string())?;
    Ok(store
        .compat_shape(backend.name())
        .map_err(|e| e.to_string())?
        .unwrap_or(RequestShape::Full))
}

/// For `inherit`: whether the child will have any way to authenticate.
fn inherit_credentials(
    mut check: Check,
    backend: &ResolvedBackend,
    child_env: &[(OsString, OsString)],
) -> Check {
    let has = |name: &str| child_env.iter().any(|(k, v)| k == name && !v.is_empty());
    if config::INHERITED_CREDENTIALS.iter().any(|n| has(n)) {
        return check;
    }
    let dir = &backend.claude_config_dir().path;
    if dir.join(".credentials.json").is_file() {
        check
            .hints
            .push(format!("using the login stored in {}", dir.display()));
        return check;
    }
    // The resolver's warning says exactly this; here it is the failure itself.
    check.status = Status::Fail;
    check
        .hints
        .retain(|h| !h.starts_with("backend 'inherit': no "));
    check.summary = format!(
        "backend 'inherit': no ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN in the environment and \
         no login in {}: the CLI would answer \"Not logged in\"",
        dir.display()
    );
    check.hint(
        "export ANTHROPIC_API_KEY, choose a backend (--backend glm|deepseek|minimax|anthropic), \
         or set claude_config_dir = \"user\" in the config file to use your own claude login",
    )
}
