//! Deciding whether a failed attempt may run again, and when.
//!
//! A retry is only safe when it cannot repeat a side effect. coder does not take the
//! caller's word for that: each attempt keeps a [`SideEffects`] ledger built from the
//! stream (which tools were called), and an attempt is retried only when its failure kind
//! is transient *and* the ledger shows no mutating tool call, or the sandbox made the
//! workspace read-only. Everything else fails at once, with a hint to resume the session
//! instead, which continues from where the agent stopped rather than redoing its work.
//!
//! The backoff is a small iterator (0.5 s, 1 s, 2 s, … capped, with jitter); there is no
//! dependency for it.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use crate::exit::ErrorKind;
use crate::pipeline::outcome::Failure;
use crate::pipeline::request::SandboxMode;

/// Tools that only read: calling them cannot change anything a retry would repeat.
const READ_ONLY_TOOLS: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "LS",
    "NotebookRead",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "ToolSearch",
    "ListAgents",
    "BashOutput",
    "TaskOutput",
    // The CLI's `--json-schema` tool: its input is the answer, it touches nothing.
    "StructuredOutput",
    // coder's own question tool (DESIGN §9) changes nothing.
    crate::pipeline::questions::CLI_TOOL_NAME,
];

/// Whether a tool call can change the world. Unknown tools count as mutating: the safe
/// mistake is a retry refused, not an edit applied twice.
pub fn is_mutating_tool(name: &str) -> bool {
    !READ_ONLY_TOOLS.contains(&name)
}

/// What one attempt did that a retry could repeat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SideEffects {
    /// The child was started (an attempt that never started is always safe to retry).
    pub started: bool,
    /// Read-only tool calls made.
    pub read_tools: BTreeSet<String>,
    /// Mutating tool calls made (Write, Edit, Bash, MCP tools, …).
    pub mutating_tools: BTreeSet<String>,
}

impl SideEffects {
    pub fn from_tool_calls<'a>(started: bool, tools: impl IntoIterator<Item = &'a str>) -> Self {
        let mut ledger = SideEffects {
            started,
            ..SideEffects::default()
        };
        for tool in tools {
            if is_mutating_tool(tool) {
                ledger.mutating_tools.insert(tool.to_owned());
            } else {
                ledger.read_tools.insert(tool.to_owned());
            }
        }
        ledger
    }

    /// The strongest kind of effect the attempt had.
    pub fn class(&self) -> SideEffectClass {
        if !self.mutating_tools.is_empty() {
            SideEffectClass::Mutating
        } else if !self.read_tools.is_empty() {
            SideEffectClass::ReadOnly
        } else {
            SideEffectClass::None
        }
    }
}

/// What an attempt's tool calls could have changed, as the envelope names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffectClass {
    /// No tool call at all.
    None,
    /// Only tools that read.
    ReadOnly,
    /// At least one tool that can change things (Write, Edit, Bash, MCP tools, …).
    Mutating,
}

/// How a provider's failure behaves on retry (from `provider::classify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UpstreamClass {
    pub retryable: bool,
    /// The session's history itself is rejected: resuming it will fail the same way.
    pub session_poisoned: bool,
}

/// Whether a failure of this kind may be retried at all (DESIGN §6).
pub fn kind_is_retryable(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::IdleTimeout
            | ErrorKind::Timeout
            | ErrorKind::UpstreamError
            | ErrorKind::EmptyResult
            | ErrorKind::JsonDecode
            | ErrorKind::SubprocessError
    )
}

/// The decision for one failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryDecision {
    Retry,
    /// Not retried, and why (for the envelope).
    Refuse(String),
}

/// Decides whether `failure` may be retried given the attempt's ledger.
pub fn decide(
    failure: &Failure,
    upstream: Option<UpstreamClass>,
    effects: &SideEffects,
    sandbox: SandboxMode,
    retries_left: u32,
) -> RetryDecision {
    if !kind_is_retryable(failure.kind) {
        return RetryDecision::Refuse(format!("{} is not a transient failure", failure.kind));
    }
    if let Some(class) = upstream
        && !class.retryable
    {
        return RetryDecision::Refuse(match failure.http_status {
            Some(status) => format!("HTTP {status} from the backend is not transient"),
            None => "this backend error is not transient".to_owned(),
        });
    }
    if !effects.mutating_tools.is_empty() && sandbox != SandboxMode::ReadOnly {
        let tools: Vec<&str> = effects.mutating_tools.iter().map(String::as_str).collect();
        return RetryDecision::Refuse(format!(
            "the attempt already called {}; a retry could apply those changes twice",
            tools.join(", ")
        ));
    }
    if retries_left == 0 {
        return RetryDecision::Refuse("no retries left (--max-retries)".to_owned());
    }
    RetryDecision::Retry
}

/// Exponential backoff: `base`, `2·base`, `4·base`, … capped at `cap`, each scaled by a
/// jitter factor in [0.8, 1.2).
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    cap: Duration,
    jitter_state: u64,
}

impl Backoff {
    /// The schedule of DESIGN §6: 0.5 s, 1 s, 2 s, … capped at 30 s.
    pub fn standard() -> Self {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(30), seed())
    }

    pub fn new(base: Duration, cap: Duration, seed: u64) -> Self {
        Backoff {
            next: base,
            cap,
            jitter_state: seed | 1,
        }
    }

    fn jitter(&mut self) -> f64 {
        // xorshift64: plenty for spreading retries, no dependency.
        let mut x = self.jitter_state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter_state = x;
        0.8 + 0.4 * ((x >> 11) as f64 / (1u64 << 53) as f64)
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let nominal = self.next.min(self.cap);
        self.next = (self.next * 2).min(self.cap);
        Some(nominal.mul_f64(self.jitter()))
    }
}

fn seed() -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u64::from_le_bytes([
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(kind: ErrorKind, status: Option<u16>) -> Failure {
        let mut f = Failure::for_tests(kind);
        f.http_status = status;
        f
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter_and_cap() {
        let delays: Vec<Duration> =
            Backoff::new(Duration::from_millis(500), Duration::from_secs(2), 42)
                .take(5)
                .collect();
        let nominal = [500u64, 1000, 2000, 2000, 2000];
        for (delay, nominal) in delays.iter().zip(nominal) {
            let ms = delay.as_millis() as u64;
            assert!(
                ms >= nominal * 8 / 10 && ms < nominal * 12 / 10 + 1,
                "{ms} vs {nominal}"
            );
        }
    }

    #[test]
    fn mutating_calls_block_retries_unless_read_only() {
        let effects = SideEffects::from_tool_calls(true, ["Read", "Write"]);
        assert_eq!(effects.class(), SideEffectClass::Mutating);
        let f = failure(ErrorKind::IdleTimeout, None);
        assert!(matches!(
            decide(&f, None, &effects, SandboxMode::WorkspaceWrite, 3),
            RetryDecision::Refuse(m) if m.contains("Write")
        ));
        assert_eq!(
            decide(&f, None, &effects, SandboxMode::ReadOnly, 3),
            RetryDecision::Retry
        );
        let reads = SideEffects::from_tool_calls(true, ["Read", "Grep"]);
        assert_eq!(reads.class(), SideEffectClass::ReadOnly);
        assert_eq!(
            decide(&f, None, &reads, SandboxMode::WorkspaceWrite, 1),
            RetryDecision::Retry
        );
        assert!(matches!(
            decide(&f, None, &reads, SandboxMode::WorkspaceWrite, 0),
            RetryDecision::Refuse(_)
        ));
        assert!(is_mutating_tool("mcp__github__create_issue"));
        assert!(is_mutating_tool("SomeNewTool"));
    }

    #[test]
    fn only_transient_kinds_are_retried() {
        // The literal list of DESIGN §6, not `kind_is_retryable` (which is under test).
        const RETRYABLE: [ErrorKind; 6] = [
            ErrorKind::IdleTimeout,
            ErrorKind::Timeout,
            ErrorKind::UpstreamError,
            ErrorKind::EmptyResult,
            ErrorKind::JsonDecode,
            ErrorKind::SubprocessError,
        ];
        let none = SideEffects::default();
        for kind in ErrorKind::ALL {
            let decision = decide(
                &failure(kind, None),
                None,
                &none,
                SandboxMode::WorkspaceWrite,
                1,
            );
            assert_eq!(
                decision == RetryDecision::Retry,
                RETRYABLE.contains(&kind),
                "{kind}"
            );
            assert_eq!(kind_is_retryable(kind), RETRYABLE.contains(&kind), "{kind}");
        }
        // A retryable upstream error (429, 5xx, 529) is retried; the names are the ones the
        // envelope and DESIGN §6 use.
        let names: Vec<&str> = RETRYABLE.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "idle_timeout",
                "timeout",
                "upstream_error",
                "empty_result",
                "json_decode",
                "subprocess_error"
            ]
        );
        for status in [429, 500, 503, 529] {
            let f = failure(ErrorKind::UpstreamError, Some(status));
            let error = crate::pipeline::provider::classify(&crate::pipeline::provider::Signals {
                status: Some(status),
                cli_error: None,
                text: "",
                last_tool: None,
                provider: None,
            });
            let class = UpstreamClass {
                retryable: error.retryable,
                session_poisoned: error.session_poisoned,
            };
            assert_eq!(
                decide(&f, Some(class), &none, SandboxMode::WorkspaceWrite, 1),
                RetryDecision::Retry,
                "{status}"
            );
        }
        let f = failure(ErrorKind::UpstreamError, Some(401));
        let class = UpstreamClass {
            retryable: false,
            session_poisoned: false,
        };
        assert!(matches!(
            decide(&f, Some(class), &none, SandboxMode::WorkspaceWrite, 3),
            RetryDecision::Refuse(m) if m.contains("401")
        ));
    }
}
