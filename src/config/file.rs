//! The TOML config file: reading it, and turning it into profile layers with the line
//! numbers needed for error messages.
//!
//! ```toml
//! default_backend = "glm"
//! claude_config_dir = "private"      # or "user", or an absolute path
//! pass_env = ["CARGO_HOME"]          # extra caller variables the child may see
//! deny = ["**/*.tfstate"]            # more non-accessible globs (added to the defaults)
//! allow_hosts = ["@crates", "internal.example:8443"]  # more hosts the sandbox proxy allows
//! store = "postgres://coder@db.internal/coder"  # slots, cooldowns, routing (default: SQLite)
//!
//! [backends.glm]                     # same name as a preset: changes that preset
//! model = "glm-4.7"
//! max_concurrent = 2                 # runs at once on this backend (presets: GLM 1)
//! provider_wait_s = 600              # silence allowed while a request is in flight (DeepSeek: 600)
//! provider = "zai"                   # who is behind a proxy's URL: anthropic, zai, deepseek, minimax
//!
//! [backends.work]
//! preset = "deepseek"                # start from a preset
//! key_env = "WORK_DEEPSEEK_KEY"
//! env = { CLAUDE_CODE_EFFORT_LEVEL = "high" }
//!
//! [backends.ci]
//! kind = "replay"
//! cassette = "cassettes/hello.json"  # relative to this file
//! ```
//!
//! Unknown keys are errors, not silently ignored: a misspelt `bse_url` must not quietly
//! send the key to the preset's vendor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::error::ConfigError;
use super::preset::{AuthScheme, BackendKind, Profile};

/// A parsed config file.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    pub path: PathBuf,
    /// `default_backend`, with its line.
    pub default_backend: Option<(String, usize)>,
    /// `claude_config_dir`, with its line.
    pub claude_config_dir: Option<(String, usize)>,
    /// Top-level `pass_env`.
    pub pass_env: Vec<String>,
    /// Top-level `deny`: non-accessible globs added to the sandbox's defaults.
    pub deny: Vec<String>,
    /// Top-level `allow_hosts`: more destinations for the sandbox's egress proxy
    /// (`--allow-host` values, presets included).
    pub allow_hosts: Vec<String>,
    /// Top-level `store`: where slots, cooldowns and the routing ledger live (a path or
    /// `postgres://…` URL; see `crate::store`).
    pub store: Option<String>,
    pub backends: BTreeMap<String, FileBackend>,
    /// Whether the file is readable by users other than its owner.
    pub readable_by_others: bool,
}

/// One `[backends.NAME]` table.
#[derive(Debug, Clone)]
pub struct FileBackend {
    /// The line of the table header (or first key), for messages about the whole profile.
    pub line: usize,
    /// `preset = "NAME"`, with its line.
    pub preset: Option<(String, usize)>,
    /// The line of `base_url`, when the file sets it.
    pub base_url_line: Option<usize>,
    pub profile: Profile,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    default_backend: Option<Spanned<String>>,
    claude_config_dir: Option<Spanned<String>>,
    #[serde(default)]
    pass_env: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    allow_hosts: Vec<String>,
    store: Option<String>,
    #[serde(default)]
    backends: BTreeMap<String, Spanned<RawProfile>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawKind {
    Api,
    Inherit,
    Replay,
}

#[derive(Deserialize)]
enum RawAuth {
    #[serde(rename = "bearer")]
    Bearer,
    #[serde(rename = "x-api-key")]
    ApiKey,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    description: Option<String>,
    preset: Option<Spanned<String>>,
    kind: Option<RawKind>,
    base_url: Option<Spanned<String>>,
    key_env: Option<Spanned<String>>,
    api_key: Option<String>,
    auth: Option<RawAuth>,
    model: Option<String>,
    small_fast_model: Option<String>,
    opus_model: Option<String>,
    sonnet_model: Option<String>,
    haiku_model: Option<String>,
    subagent_model: Option<String>,
    api_timeout_ms: Option<u64>,
    max_retries: Option<u32>,
    disallowed_tools: Option<Vec<String>>,
    append_system_prompt: Option<String>,
    cassette: Option<String>,
    env: Option<Spanned<BTreeMap<String, String>>>,
    #[serde(default)]
    pass_env: Vec<String>,
    max_concurrent: Option<u32>,
    provider_wait_s: Option<u64>,
    provider: Option<crate::config::Provider>,
}

/// The file being parsed: its path and text, for lines and messages.
#[derive(Clone, Copy)]
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        line_of(self.text, span.start)
    }

    /// A value with the line it stands on.
    fn with_line<T>(&self, value: Spanned<T>) -> (T, usize) {
        let line = self.line(value.span());
        (value.into_inner(), line)
    }

    fn malformed(&self, line: usize, message: String) -> ConfigError {
        ConfigError::Malformed {
            path: self.path.to_owned(),
            line,
            message,
        }
    }

    /// The backend `name` of the file, checked.
    fn backend(
        &self,
        name: &str,
        spanned: Spanned<RawProfile>,
    ) -> Result<FileBackend, ConfigError> {
        let line = self.line(spanned.span());
        let raw = spanned.into_inner();
        if name.is_empty() || name.starts_with("replay:") {
            return Err(self.malformed(line, format!("'{name}' cannot be a backend name")));
        }
        let env_line = raw.env.as_ref().map_or(line, |e| self.line(e.span()));
        let env = raw.env.map(Spanned::into_inner).unwrap_or_default();
        if let Some(bad) = env.keys().find(|k| !valid_env_name(k)) {
            return Err(self.malformed(
                env_line,
                format!("backend '{name}': '{bad}' is not a valid environment variable name"),
            ));
        }
        let key_env = match raw.key_env {
            Some(k) if !valid_env_name(k.get_ref()) => {
                return Err(self.malformed(
                    self.line(k.span()),
                    format!(
                        "backend '{name}': key_env must be the name of a variable, like \"ZAI_API_KEY\""
                    ),
                ));
            }
            Some(k) => Some(k.into_inner()),
            None => None,
        };
        let base_dir = self.path.parent().unwrap_or(Path::new("."));
        let base_url_line = raw.base_url.as_ref().map(|u| self.line(u.span()));
        let preset = raw.preset.map(|p| self.with_line(p));
        let profile = Profile {
            description: raw.description,
            kind: raw.kind.map(|k| match k {
                RawKind::Api => BackendKind::Api,
                RawKind::Inherit => BackendKind::Inherit,
                RawKind::Replay => BackendKind::Replay,
            }),
            base_url: raw.base_url.map(Spanned::into_inner),
            key_env,
            api_key: raw.api_key,
            auth: raw.auth.map(|a| match a {
                RawAuth::Bearer => AuthScheme::Bearer,
                RawAuth::ApiKey => AuthScheme::ApiKey,
            }),
            model: raw.model,
            small_fast_model: raw.small_fast_model,
            opus_model: raw.opus_model,
            sonnet_model: raw.sonnet_model,
            haiku_model: raw.haiku_model,
            subagent_model: raw.subagent_model,
            api_timeout_ms: raw.api_timeout_ms,
            max_retries: raw.max_retries,
            disallowed_tools: raw.disallowed_tools,
            append_system_prompt: raw.append_system_prompt,
            cassette: raw.cassette.map(|c| base_dir.join(c)),
            env,
            pass_env: raw.pass_env,
            max_concurrent: raw.max_concurrent,
            provider_wait_s: raw.provider_wait_s,
            provider: raw.provider,
        };
        Ok(FileBackend {
            line,
            preset,
            base_url_line,
            profile,
        })
    }
}

/// 1-based line of a byte offset.
/// serde's message of a value of the wrong type ("invalid type: string \"two\", expected
/// u32", "expected struct RawProfile") in a user's words, naming the key and its table as
/// the file spells them: `max_concurrent in [backends.glm] must be a whole number, 0 or more
/// (got string "two")`; an unknown name of a fixed set too (`kind`, `provider`). Other
/// messages are kept.
fn readable_type_error(text: &str, offset: usize, message: &str) -> String {
    if let Some(unknown) = readable_unknown_key(text, offset, message) {
        return unknown;
    }
    let Some((got, expected)) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .or_else(|| message.strip_prefix("unknown variant "))
        .and_then(|rest| rest.rsplit_once(", expected "))
    else {
        return message.to_owned();
    };
    let names = expected
        .starts_with("one of ")
        .then(|| expected.replace('`', "\""));
    let got = match names {
        Some(_) => got.replace('`', "\""),
        None => got.to_owned(),
    };
    let takes = match expected {
        _ if let Some(names) = &names => names.as_str(),
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more",
        "a sequence" => "a list",
        "a boolean" => "true or false",
        "a map" => "a table",
        e if e.starts_with("struct ") => "a table",
        e => e,
    };
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let before = text.get(line_start..offset).unwrap_or("");
    let Some((left, between)) = before.rsplit_once('=') else {
        return format!("{message} (expected {takes})");
    };
    let key = left
        .rsplit(['{', ','])
        .next()
        .unwrap_or(left)
        .trim()
        .trim_matches('"');
    let table = table_header_before(text, offset)
        .map(|header| format!(" in {header}"))
        .unwrap_or_default();
    let what = match between.contains('[') {
        true => format!("each item of {key}{table}"),
        false => format!("{key}{table}"),
    };
    format!("{what} must be {takes} (got {got})")
}

/// serde's "unknown field `max_concurent`, expected one of `description`, …" (every key
/// of the table, in its own words) as the key and its table, with the key it likely means:
/// `unknown key "max_concurent" in [backends.glm]: did you mean "max_concurrent"?`, else
/// the table's keys.
fn readable_unknown_key(text: &str, offset: usize, message: &str) -> Option<String> {
    let (field, expected) = message
        .strip_prefix("unknown field ")?
        .split_once(", expected ")?;
    let key = field.trim_matches('`');
    let known: Vec<&str> = expected
        .trim_start_matches("one of ")
        .split(['`', ',', ' '])
        .filter(|word| !word.is_empty() && *word != "or")
        .collect();
    let table = table_header_before(text, offset)
        .map(|header| format!(" in {header}"))
        .unwrap_or_default();
    Some(match crate::text::near_miss(key, &known) {
        Some(meant) => format!("unknown key {key:?}{table}: did you mean {meant:?}?"),
        None => format!(
            "unknown key {key:?}{table} (its keys: {})",
            known.join(", ")
        ),
    })
}

/// The `[table]` header above byte `offset` of `text`, if any.
fn table_header_before(text: &str, offset: usize) -> Option<&str> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
}

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Whether `name` can be an environment variable name for the child.
pub(crate) fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

impl ConfigFile {
    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
            path: path.to_owned(),
            source,
        })?;
        let mut file = ConfigFile::parse(path, &text)?;
        file.readable_by_others = readable_by_others(path);
        Ok(file)
    }

    /// Parses `text` as the content of the file at `path` (used for messages and for
    /// resolving relative cassette paths).
    pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, ConfigError> {
        let source = Source { path, text };
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(1, |span| line_of(text, span.start));
            let message = e.message().trim().replace('\n', " ");
            let message = match e.span() {
                Some(span) => readable_type_error(text, span.start, &message),
                None => message,
            };
            source.malformed(line, message)
        })?;
        let mut backends = BTreeMap::new();
        for (name, spanned) in raw.backends {
            let backend = source.backend(&name, spanned)?;
            backends.insert(name, backend);
        }
        Ok(ConfigFile {
            path: path.to_owned(),
            default_backend: raw.default_backend.map(|d| source.with_line(d)),
            claude_config_dir: raw.claude_config_dir.map(|d| source.with_line(d)),
            pass_env: raw.pass_env,
            deny: raw.deny,
            allow_hosts: raw.allow_hosts,
            store: raw.store,
            backends,
            readable_by_others: false,
        })
    }

    /// Whether any profile stores a key in the file itself.
    pub fn holds_keys(&self) -> bool {
        self.backends.values().any(|b| b.profile.api_key.is_some())
    }
}

#[cfg(unix)]
fn readable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o044 != 0)
}

#[cfg(not(unix))]
fn readable_by_others(_path: &Path) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse(Path::new("/etc/coder/config.toml"), text)
    }

    #[test]
    fn reads_profiles_with_lines() {
        let f = parse(
            "default_backend = \"work\"\n\n[backends.work]\npreset = \"deepseek\"\nbase_url = \"http://127.0.0.1:1\"\ncassette = \"c.json\"\nenv = { A = \"1\" }\n",
        )
        .unwrap();
        assert_eq!(f.default_backend, Some(("work".into(), 1)));
        let b = &f.backends["work"];
        assert_eq!(b.preset, Some(("deepseek".into(), 4)));
        assert_eq!(b.base_url_line, Some(5));
        assert_eq!(b.profile.cassette, Some(PathBuf::from("/etc/coder/c.json")));
        assert_eq!(b.profile.env["A"], "1");
    }

    #[test]
    fn reads_the_store_and_slot_limits() {
        let f =
            parse("store = \"postgres://coder@db/coder\"\n[backends.glm]\nmax_concurrent = 3\n")
                .unwrap();
        assert_eq!(f.store.as_deref(), Some("postgres://coder@db/coder"));
        assert_eq!(f.backends["glm"].profile.max_concurrent, Some(3));
        assert_eq!(
            crate::config::preset::builtin("glm").and_then(|p| p.max_concurrent),
            Some(1),
            "GLM presets allow one run at a time"
        );
        assert!(parse("[backends.x]\nmax_concurrent = -1\n").is_err());
    }

    #[test]
    fn unknown_key_is_reported_with_its_line() {
        let err = parse("[backends.x]\nmodel = \"m\"\nbse_url = \"https://h\"\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("config file /etc/coder/config.toml, line 3: "),
            "{msg}"
        );
        assert!(
            msg.ends_with(
                "line 3: unknown key \"bse_url\" in [backends.x]: did you mean \"base_url\"?"
            ),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
        let msg = parse("colour = 1\n").unwrap_err().to_string();
        assert!(
            msg.ends_with(
                "line 1: unknown key \"colour\" (its keys: default_backend, claude_config_dir, \
                 pass_env, deny, allow_hosts, store, backends)"
            ),
            "{msg}"
        );
    }

    #[test]
    fn syntax_error_is_reported_with_its_line() {
        let err = parse("default_backend = \"glm\"\n[backends.x\n").unwrap_err();
        assert!(
            matches!(err, ConfigError::Malformed { line: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn wrong_types_and_bad_names_are_errors() {
        let err = parse("[backends.x]\n\napi_timeout_ms = \"soon\"\n").unwrap_err();
        assert!(
            matches!(err, ConfigError::Malformed { line: 3, .. }),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "config file /etc/coder/config.toml, line 3: api_timeout_ms in [backends.x] must be \
             a whole number, 0 or more (got string \"soon\")"
        );
        let err = parse("[backends.x]\nkey_env = \"A=B\"\n").unwrap_err();
        assert!(
            matches!(err, ConfigError::Malformed { line: 2, .. }),
            "{err}"
        );
        let err = parse("[backends.x]\nkind = \"ftp\"\n").unwrap_err();
        assert!(
            matches!(err, ConfigError::Malformed { line: 2, .. }),
            "{err}"
        );
    }
}
