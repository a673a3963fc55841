//! The one error type for everything a user can get wrong before a run starts: the config
//! file, the backend choice, credentials, and the files handed to prompt assembly.
//!
//! Each variant's `Display` is a single line that names the file, variable or flag at fault
//! and says what to change, because it ends up verbatim as the `error` of a `config_error`
//! envelope or on one line of `coder doctor`.

use std::path::PathBuf;

/// A mistake in coder's configuration or arguments; reported as `config_error` (exit 78).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file exists (or was named explicitly) but cannot be read.
    #[error("cannot read config file {}: {source}", path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The config file is not valid TOML, or has a key or value coder does not accept.
    #[error("config file {}, line {line}: {message}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        message: String,
    },

    /// A backend flag was given an empty value (`--backend ""`), which would otherwise
    /// silently mean the default.
    #[error(
        "{flag} is empty: give it a value, or leave {flag} out for the default (an empty \
         CODER_* variable counts as unset)"
    )]
    EmptyFlag { flag: &'static str },

    /// No built-in preset or config-file profile has this name; `origin` says where the
    /// name came from when that was not `--backend` (" (CODER_BACKEND is set to it)"),
    /// `near` the known name it likely means (" (did you mean 'glm'?)"), else empty.
    #[error("unknown backend '{name}'{origin}{near}; known backends: {known} (or replay:CASSETTE)")]
    UnknownBackend {
        name: String,
        origin: String,
        near: String,
        known: String,
    },

    /// The variable that should hold the backend's API key is not set.
    #[error(
        "backend '{backend}' reads its API key from ${var}, which is not set: export {var}=<your key>, \
         or set key_env for [backends.{backend}] in the config file"
    )]
    KeyUnset { backend: String, var: String },

    /// `key_env` names no set variable and looks like a key itself (the key pasted where
    /// the variable's name goes): the message shows only its first characters.
    #[error(
        "backend '{backend}': key_env '{shown}' names no set variable and looks like an API \
         key, not a variable's name: set key_env to the name of the variable that holds the \
         key (like ZAI_API_KEY) and put the key in that variable, never in the config file"
    )]
    KeyEnvLooksLikeKey { backend: String, shown: String },

    /// The variable that should hold the backend's API key is set but empty.
    #[error(
        "backend '{backend}' reads its API key from ${var}, which is empty: export {var}=<your key>"
    )]
    KeyEmpty { backend: String, var: String },

    /// The `inherit` backend found no credentials at all: the CLI would only answer "Not
    /// logged in", and `/login` cannot work in coder's private config dir.
    #[error("{}", inherit_without_credentials(config_dir, "--backend"))]
    InheritWithoutCredentials { config_dir: std::path::PathBuf },

    /// A profile of kind `api` without a base URL.
    #[error(
        "backend '{backend}' has no base_url: set base_url (or preset = \"NAME\") in [backends.{backend}]"
    )]
    MissingBaseUrl { backend: String },

    /// The base URL is not an `http://` or `https://` URL with a host.
    #[error(
        "backend '{backend}': base URL '{url}' (from {origin}) is not an http:// or https:// URL with a host"
    )]
    BadBaseUrl {
        backend: String,
        url: String,
        origin: String,
    },

    /// A replay backend names a cassette that does not exist.
    #[error("backend '{backend}': replay cassette {} does not exist", path.display())]
    CassetteMissing { backend: String, path: PathBuf },

    /// A setting from the environment or a flag has a value coder cannot use.
    #[error("{origin}: {message}")]
    InvalidValue { origin: String, message: String },

    /// No home directory, so neither the default config file nor the private
    /// `CLAUDE_CONFIG_DIR` can be placed.
    #[error(
        "cannot place coder's state directory: none of CODER_STATE_DIR, XDG_STATE_HOME and \
         HOME is set; set CODER_STATE_DIR to a private directory (coder keeps transcripts, \
         session records and the CLI's config there, and never falls back to a shared place \
         such as /tmp)"
    )]
    NoHome,

    /// `CODER_STATE_DIR` is a relative path: which directory it meant would depend on where
    /// each coder (and `coder runs`) is started.
    #[error(
        "CODER_STATE_DIR={value:?} is a relative path: set it to an absolute one (like \
         \"$PWD/{value}\"), so every coder and coder runs find the same state directory"
    )]
    RelativeStateDir { value: String },

    /// The private `CLAUDE_CONFIG_DIR` cannot be created.
    #[error("cannot create the claude config directory {}: {source}{hint}", path.display())]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
        /// What to change: the variable that placed it, or the config key.
        hint: String,
    },

    /// A file given to `--contract`, `--guardrails`, `--codex` or `--plan` cannot be used.
    #[error("--{flag} {}: {problem}", path.display())]
    PromptFile {
        flag: &'static str,
        path: PathBuf,
        problem: String,
    },

    /// The task text could not be read from stdin.
    #[error("cannot read the task from stdin: {0}")]
    Stdin(#[source] std::io::Error),

    /// There is no task text at all.
    #[error("no task given: pass the task as an argument, or on stdin")]
    EmptyTask,

    /// The prompt is over what the claude CLI accepts on its stdin (it would exit with
    /// "piped stdin input exceeds 10MB").
    #[error(
        "the prompt is too large: {what}, over the claude CLI's limit of 10 MiB ({limit} \
         characters as the CLI counts them, UTF-16 code units); put large content in a file \
         in the workspace and name that file in the prompt"
    )]
    PromptTooLarge { what: String, limit: usize },
}

/// The message of [`ConfigError::InheritWithoutCredentials`], naming how to pick another
/// backend as the caller does (`--backend`, or the MCP tool's `backend` argument).
fn inherit_without_credentials(config_dir: &std::path::Path, pick: &str) -> String {
    format!(
        "backend 'inherit' has no credentials: no ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or \
         CLAUDE_CODE_OAUTH_TOKEN in the environment and no login in {}; export one of them, \
         pick another backend ({pick}: glm, deepseek, minimax, anthropic, or replay:CASSETTE \
         to try coder without a key), or set claude_config_dir = \"user\" in the config file \
         to use your own claude login",
        config_dir.display()
    )
}

impl ConfigError {
    /// The message, worded for the caller: the command line's flags (as `Display`), or
    /// (`tool_arguments`) the arguments of `coder mcp`'s `coder` tool, whose caller never
    /// wrote `--backend`.
    pub fn message_for(&self, tool_arguments: bool) -> String {
        match self {
            ConfigError::InheritWithoutCredentials { config_dir } if tool_arguments => {
                inherit_without_credentials(config_dir, "the backend argument of the coder tool")
            }
            other => other.to_string(),
        }
    }
}
