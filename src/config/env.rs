//! The child's environment: which of the caller's variables it may see, what coder adds,
//! and what it removes.
//!
//! The child is an agent that runs shell commands, so everything it inherits is visible to
//! the model: the caller's environment is filtered through an allow-list (locale, terminal,
//! proxies, CA bundles) instead of being passed whole, and secrets unrelated to the backend
//! (cloud tokens, other vendors' keys) never reach it. The `inherit` backend additionally
//! passes the caller's Claude-related variables, which is what it is for.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use super::ResolvedBackend;
use super::preset::{BackendKind, DEFAULT_CLI_MAX_RETRIES};
use super::url::{Endpoint, Scheme};

/// A read-only view of an environment given as name/value pairs; the last pair of a name
/// wins, as in a real environment built by successive assignments.
#[derive(Clone, Copy)]
pub(crate) struct EnvView<'a>(pub &'a [(OsString, OsString)]);

impl<'a> EnvView<'a> {
    pub fn get(&self, name: &str) -> Option<&'a OsStr> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// The value as text when it is set, UTF-8 and not empty.
    pub fn text(&self, name: &str) -> Option<&'a str> {
        self.get(name)
            .and_then(OsStr::to_str)
            .filter(|v| !v.is_empty())
    }

    /// An absolute path from a variable (XDG rules: relative values are ignored).
    pub fn abs_path(&self, name: &str) -> Option<PathBuf> {
        self.get(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    }
}

/// The default config file: `$XDG_CONFIG_HOME/coder/config.toml`, else
/// `$HOME/.config/coder/config.toml`.
pub(crate) fn default_config_path(env: EnvView<'_>) -> Option<PathBuf> {
    let base = env
        .abs_path("XDG_CONFIG_HOME")
        .or_else(|| env.abs_path("HOME").map(|h| h.join(".config")))?;
    Some(base.join("coder").join("config.toml"))
}

/// coder's state directory: `$CODER_STATE_DIR`, else `$XDG_STATE_HOME/coder`, else
/// `$HOME/.local/state/coder` (where the session records live too).
/// A relative `CODER_STATE_DIR` places none: it is no XDG variable, and ignoring it, as
/// the XDG ones are, put the state in the home directory while the user looked in the
/// directory named ([`crate::config::state_dir`] says why).
pub(crate) fn state_dir(env: EnvView<'_>) -> Option<PathBuf> {
    if let Some(dir) = env.get("CODER_STATE_DIR").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return dir.is_absolute().then_some(dir);
    }
    let base = env
        .abs_path("XDG_STATE_HOME")
        .or_else(|| env.abs_path("HOME").map(|h| h.join(".local").join("state")))?;
    Some(base.join("coder"))
}

/// Caller variables every child may see.
const ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// Prefixes of caller variables every child may see.
const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// Further caller variables the `inherit` backend passes: the CLI's own settings and the
/// cloud credentials a Bedrock or Vertex setup needs.
const INHERIT_NAMES: &[&str] = &[
    "API_TIMEOUT_MS",
    "BASH_DEFAULT_TIMEOUT_MS",
    "BASH_MAX_TIMEOUT_MS",
    "BASH_MAX_OUTPUT_LENGTH",
    "MAX_THINKING_TOKENS",
    "MAX_MCP_OUTPUT_TOKENS",
    "ENABLE_TOOL_SEARCH",
    "CLOUD_ML_REGION",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
];
const INHERIT_PREFIXES: &[&str] = &[
    "ANTHROPIC_",
    "CLAUDE_",
    "DISABLE_",
    "MCP_",
    "AWS_",
    "VERTEX_REGION_",
];

/// Variables a parent Claude Code session sets that would make the child think it is nested.
const PARENT_SESSION_MARKERS: &[&str] = &[
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SSE_PORT",
];

/// The proxy variables, in the order that decides which one applies.
const PROXY_VARS_HTTPS: &[&str] = &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"];
const PROXY_VARS_HTTP: &[&str] = &["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"];
const NO_PROXY_VARS: &[&str] = &["no_proxy", "NO_PROXY"];

/// Whether a `pass_env` entry (`NAME` or `PREFIX*`) covers `name`.
fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Whether the caller's variable `name` reaches the child.
pub(crate) fn passes(name: &str, kind: BackendKind, pass_env: &[String]) -> bool {
    if PARENT_SESSION_MARKERS.contains(&name) {
        return false;
    }
    ALLOWED.contains(&name)
        || ALLOWED_PREFIXES.iter().any(|p| name.starts_with(p))
        || pass_env.iter().any(|p| pattern_matches(p, name))
        || (kind == BackendKind::Inherit
            && (INHERIT_NAMES.contains(&name)
                || INHERIT_PREFIXES.iter().any(|p| name.starts_with(p))))
}

/// The proxy the CLI will use to reach `endpoint`, given the proxy variables it sees.
pub(crate) fn proxy_for(endpoint: &Endpoint, vars: &BTreeMap<String, String>) -> Option<Endpoint> {
    if endpoint.is_loopback() {
        return None;
    }
    let bypassed = NO_PROXY_VARS
        .iter()
        .find_map(|n| vars.get(*n))
        .is_some_and(|list| {
            list.split(',').map(str::trim).any(|entry| {
                let entry = entry.trim_start_matches("*.").trim_start_matches('.');
                let entry = entry
                    .split(':')
                    .next()
                    .unwrap_or(entry)
                    .to_ascii_lowercase();
                entry == "*"
                    || (!entry.is_empty()
                        && (endpoint.host == entry
                            || endpoint.host.ends_with(&format!(".{entry}"))))
            })
        });
    if bypassed {
        return None;
    }
    let names = match endpoint.scheme {
        Scheme::Https => PROXY_VARS_HTTPS,
        Scheme::Http => PROXY_VARS_HTTP,
    };
    names
        .iter()
        .find_map(|n| vars.get(*n).filter(|v| !v.is_empty()))
        .and_then(|url| Endpoint::parse(url))
}

/// The proxy variables of an environment, for [`proxy_for`].
pub(crate) fn proxy_vars(env: EnvView<'_>) -> BTreeMap<String, String> {
    PROXY_VARS_HTTP
        .iter()
        .chain(PROXY_VARS_HTTPS)
        .chain(NO_PROXY_VARS)
        .filter_map(|n| env.text(n).map(|v| ((*n).to_owned(), v.to_owned())))
        .collect()
}

/// The complete environment of the child for `backend`, built from the caller's
/// environment `process_env`:
///
/// 1. the caller's variables that pass the allow-list (plus the backend's `pass_env`, and
///    the caller's Claude variables for `inherit`), minus a parent session's markers
///    (`CLAUDECODE`) and minus an `ANTHROPIC_API_KEY` that would override the backend's
///    token;
/// 2. coder's defaults where nothing above set them: no telemetry, error reporting or other
///    non-essential traffic, and a small `CLAUDE_CODE_MAX_RETRIES`;
/// 3. `CLAUDE_CONFIG_DIR`;
/// 4. the backend's variables (base URL, key, model slots, timeouts, its `env` table); an
///    empty value there removes the variable;
/// 5. for a loopback base URL, the loopback hosts added to `NO_PROXY`/`no_proxy` when a
///    proxy is configured, so a local replay server is never sent through a proxy.
///
/// The result is sorted by name.
pub fn child_environment(
    process_env: &[(OsString, OsString)],
    backend: &ResolvedBackend,
) -> Vec<(OsString, OsString)> {
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    for (name, value) in process_env {
        if name
            .to_str()
            .is_some_and(|n| passes(n, backend.kind, &backend.pass_env))
        {
            env.insert(name.clone(), value.clone());
        }
    }
    if backend.drops_caller_api_key {
        env.remove(OsStr::new("ANTHROPIC_API_KEY"));
    }

    let max_retries = DEFAULT_CLI_MAX_RETRIES.to_string();
    for (name, value) in [
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("CLAUDE_CODE_MAX_RETRIES", max_retries.as_str()),
    ] {
        env.entry(name.into()).or_insert_with(|| value.into());
    }

    if backend.claude_config.set_variable {
        env.insert(
            "CLAUDE_CONFIG_DIR".into(),
            backend.claude_config.path.clone().into_os_string(),
        );
    }

    for (name, value) in backend.backend_variables() {
        if value.is_empty() {
            env.remove(OsStr::new(&name));
        } else {
            env.insert(name.into(), value);
        }
    }

    if backend.endpoint().is_some_and(Endpoint::is_loopback) {
        let has_proxy = PROXY_VARS_HTTP
            .iter()
            .chain(PROXY_VARS_HTTPS)
            .any(|n| env.get(OsStr::new(n)).is_some_and(|v| !v.is_empty()));
        if has_proxy {
            for var in NO_PROXY_VARS {
                let mut list = env
                    .get(OsStr::new(var))
                    .map(|v| v.to_string_lossy().into_owned())
                    .unwrap_or_default();
                for host in ["127.0.0.1", "localhost", "::1"] {
                    if !list.split(',').any(|e| e.trim() == host) {
                        if !list.is_empty() {
                            list.push(',');
                        }
                        list.push_str(host);
                    }
                }
                env.insert((*var).into(), list.into());
            }
        }
    }

    for marker in PARENT_SESSION_MARKERS {
        env.remove(OsStr::new(marker));
    }
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn allow_list_keeps_locale_and_drops_secrets() {
        let none: &[String] = &[];
        assert!(passes("PATH", BackendKind::Api, none));
        assert!(passes("LC_ALL", BackendKind::Api, none));
        assert!(passes("https_proxy", BackendKind::Api, none));
        assert!(!passes("GITHUB_TOKEN", BackendKind::Api, none));
        assert!(!passes("ANTHROPIC_API_KEY", BackendKind::Api, none));
        assert!(!passes("ANTHROPIC_BASE_URL", BackendKind::Replay, none));
        assert!(passes("ANTHROPIC_BASE_URL", BackendKind::Inherit, none));
        assert!(!passes("CLAUDECODE", BackendKind::Inherit, none));
        assert!(!passes(
            "CLAUDE_CODE_ENTRYPOINT",
            BackendKind::Inherit,
            none
        ));
        let extra = ["CARGO_HOME".to_owned(), "RUSTUP_*".to_owned()];
        assert!(passes("CARGO_HOME", BackendKind::Api, &extra));
        assert!(passes("RUSTUP_TOOLCHAIN", BackendKind::Api, &extra));
        assert!(!passes("CARGO_HOME_X", BackendKind::Api, &extra));
    }

    #[test]
    fn proxy_choice_follows_scheme_and_no_proxy() {
        let api = Endpoint::parse("https://api.z.ai/api/anthropic").unwrap();
        let v = vars(&[
            ("HTTPS_PROXY", "http://proxy.corp:3128"),
            ("HTTP_PROXY", "http://other:1"),
        ]);
        assert_eq!(proxy_for(&api, &v).map(|p| p.port), Some(3128));
        let v2 = vars(&[
            ("HTTPS_PROXY", "http://proxy.corp:3128"),
            ("NO_PROXY", "localhost, .z.ai"),
        ]);
        assert_eq!(proxy_for(&api, &v2), None);
        let v3 = vars(&[("HTTPS_PROXY", "http://proxy.corp:3128"), ("no_proxy", "*")]);
        assert_eq!(proxy_for(&api, &v3), None);
        let local = Endpoint::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(proxy_for(&local, &v), None);
        let plain = Endpoint::parse("http://models.lan:8080").unwrap();
        assert_eq!(proxy_for(&plain, &v).map(|p| p.host), Some("other".into()));
    }

    #[test]
    fn xdg_paths_ignore_relative_values() {
        let pairs: Vec<(OsString, OsString)> = vec![
            ("HOME".into(), "/home/u".into()),
            ("XDG_CONFIG_HOME".into(), "relative".into()),
            ("XDG_STATE_HOME".into(), "/state".into()),
        ];
        let env = EnvView(&pairs);
        assert_eq!(
            default_config_path(env),
            Some(PathBuf::from("/home/u/.config/coder/config.toml"))
        );
        assert_eq!(state_dir(env), Some(PathBuf::from("/state/coder")));
        let mut pairs = pairs.clone();
        pairs.push(("CODER_STATE_DIR".into(), "/coder-state".into()));
        assert_eq!(
            state_dir(EnvView(&pairs)),
            Some(PathBuf::from("/coder-state"))
        );
        assert_eq!(default_config_path(EnvView(&[])), None);
    }
}
