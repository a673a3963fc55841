//! How coder ends: the `error_kind` of every failure and the process exit code that goes
//! with it.
//!
//! This is a leaf module on purpose: the envelope, every subcommand and the tests all name
//! these kinds, so the mapping to exit codes lives here, depends on nothing else in the
//! crate, and a caller can rely on `error_kind` and `$?` agreeing (DESIGN §2).

use serde::Serialize;

/// Exit code of clap usage errors (unknown flags, missing values).
pub const USAGE_EXIT: u8 = 2;

/// The `error_kind` of a failure envelope. Names and exit codes are part of the contract
/// (DESIGN §2) and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    IdleTimeout,
    Timeout,
    CommandNotFound,
    UpstreamError,
    JsonDecode,
    ProtocolMissingSession,
    EmptyResult,
    SubprocessError,
    ConfigError,
    UnexpectedException,
    SandboxError,
    Cancelled,
    MaxTurns,
    VerifyFailed,
    ScopeViolation,
    /// The model called `ask_user` (DESIGN §9): the run stopped to ask the caller.
    NeedsInput,
    /// `--json-schema` was given and the answer did not match it, even after a repair turn.
    SchemaMismatch,
}

impl ErrorKind {
    /// Every kind, in the order of the contract's table.
    pub const ALL: [ErrorKind; 17] = [
        ErrorKind::IdleTimeout,
        ErrorKind::Timeout,
        ErrorKind::CommandNotFound,
        ErrorKind::UpstreamError,
        ErrorKind::JsonDecode,
        ErrorKind::ProtocolMissingSession,
        ErrorKind::EmptyResult,
        ErrorKind::SubprocessError,
        ErrorKind::ConfigError,
        ErrorKind::UnexpectedException,
        ErrorKind::SandboxError,
        ErrorKind::Cancelled,
        ErrorKind::MaxTurns,
        ErrorKind::VerifyFailed,
        ErrorKind::ScopeViolation,
        ErrorKind::NeedsInput,
        ErrorKind::SchemaMismatch,
    ];

    /// The name used in the envelope's `error_kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::IdleTimeout => "idle_timeout",
            ErrorKind::Timeout => "timeout",
            ErrorKind::CommandNotFound => "command_not_found",
            ErrorKind::UpstreamError => "upstream_error",
            ErrorKind::JsonDecode => "json_decode",
            ErrorKind::ProtocolMissingSession => "protocol_missing_session",
            ErrorKind::EmptyResult => "empty_result",
            ErrorKind::SubprocessError => "subprocess_error",
            ErrorKind::ConfigError => "config_error",
            ErrorKind::UnexpectedException => "unexpected_exception",
            ErrorKind::SandboxError => "sandbox_error",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::MaxTurns => "max_turns",
            ErrorKind::VerifyFailed => "verify_failed",
            ErrorKind::ScopeViolation => "scope_violation",
            ErrorKind::NeedsInput => "needs_input",
            ErrorKind::SchemaMismatch => "schema_mismatch",
        }
    }

    /// The process exit code for this kind. `cancelled` depends on the signal coder
    /// received (128 + signal number), see [`cancelled_exit_code`].
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::IdleTimeout | ErrorKind::Timeout => 124,
            ErrorKind::CommandNotFound => 127,
            ErrorKind::UpstreamError
            | ErrorKind::JsonDecode
            | ErrorKind::ProtocolMissingSession
            | ErrorKind::EmptyResult
            | ErrorKind::SubprocessError
            | ErrorKind::MaxTurns => 1,
            ErrorKind::ConfigError => 78,
            ErrorKind::UnexpectedException => 70,
            ErrorKind::SandboxError => 71,
            ErrorKind::Cancelled => 130,
            ErrorKind::VerifyFailed => 3,
            ErrorKind::ScopeViolation => 4,
            ErrorKind::NeedsInput => 5,
            ErrorKind::SchemaMismatch => 6,
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Exit code of a run cancelled by `signal`: the shell convention 128 + signal number
/// (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
pub fn cancelled_exit_code(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(130)
}
