//! The checks behind `coder doctor`: whether a run could succeed here, and if not, why.
//!
//! It checks, in order: the config file, the chosen backend and its key, the claude
//! executable (a real native binary, not an npm placeholder or a script wrapper, and its
//! version), the kernel features the sandbox needs (Landlock, user and mount namespaces),
//! and a TCP connection to the backend (or its proxy) with a short timeout. Each check
//! ends `ok`, `warn`, `fail` or `skip`; the exit code is 0 only when none failed.
//!
//! The kernel is judged by the sandbox's own probe ([`crate::sandbox::probe`]), so the
//! doctor and a run cannot disagree about which Landlock ABI and namespaces are needed;
//! the probe only reports, it never fails, so the doctor still explains when the sandbox
//! cannot be had. The subcommand's entry point is in `commands`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::config::{self, BackendArgs};

pub use crate::pipeline::child::TESTED_CLAUDE_VERSION;

mod backend;
mod claude;
mod kernel;
mod network;
mod store;

use backend::{check_backend, check_compat, check_config, check_model_slots};
use claude::check_claude;
use kernel::{
    check_landlock, check_namespaces, check_sandbox_network, check_seccomp, check_state_dir,
};
use network::check_network;

pub use claude::{BinaryProblem, find_on_path, inspect_claude_binary, parse_claude_version};
pub use network::probe_tcp;

/// How long `claude --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub summary: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub detail: Map<String, Value>,
}

impl Check {
    fn new(name: &'static str, status: Status, summary: impl Into<String>) -> Check {
        Check {
            name,
            status,
            summary: summary.into(),
            hints: Vec::new(),
            detail: Map::new(),
        }
    }

    fn hint(mut self, hint: impl Into<String>) -> Check {
        self.hints.push(hint.into());
        self
    }

    fn detail(mut self, key: &str, value: impl Into<Value>) -> Check {
        self.detail.insert(key.to_owned(), value.into());
        self
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub command: &'static str,
    /// Whether a run could succeed: no check failed.
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    pub checks: Vec<Check>,
    /// The credentials of the environment and the backend, for [`Report::redact`].
    #[serde(skip)]
    secrets: Vec<String>,
}

impl Report {
    fn new(backend: Option<String>, checks: Vec<Check>) -> Report {
        Report {
            tool: "coder",
            command: "doctor",
            ok: checks.iter().all(|c| c.status != Status::Fail),
            backend,
            checks,
            secrets: Vec::new(),
        }
    }

    /// `text` (the report rendered or as JSON) with the known credentials and token shapes
    /// redacted, as everything else coder prints: a check's message may quote a value the
    /// user gave (a URL, a file's line) or an error that holds one.
    pub fn redact(&self, text: &str) -> String {
        crate::text::Secrets::new(&self.secrets)
            .redact(text)
            .into_owned()
    }

    /// The report for humans.
    pub fn render(&self) -> String {
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let mut out = String::from("coder doctor\n");
        for check in &self.checks {
            out.push_str(&format!(
                "  {:<4}  {:<width$}  {}\n",
                check.status.label(),
                check.name,
                check.summary
            ));
            for hint in &check.hints {
                out.push_str(&format!("  {:<4}  {:<width$}    -> {hint}\n", "", ""));
            }
        }
        let failed = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .count();
        if failed == 0 {
            out.push_str("result: a run can start\n");
        } else {
            let s = if failed == 1 { "" } else { "s" };
            out.push_str(&format!("result: a run would fail ({failed} problem{s})\n"));
        }
        out
    }
}

/// `coder doctor [OPTIONS]`
#[derive(Debug, Clone, Parser)]
#[command(
    name = "coder doctor",
    about = "Check whether a run could succeed here: config, backend and key, claude CLI, \
             sandbox support, network. Exit 0 only when it could."
)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub backend: BackendArgs,

    /// The store a run would use (`--store`, `--store-optional`), checked as a run opens it.
    #[command(flatten)]
    pub store: crate::store::StoreArgs,

    /// The claude executable [default: `claude` on PATH].
    #[arg(long = "claude-bin", env = "CODER_CLAUDE_BIN", value_name = "PATH")]
    pub claude_bin: Option<PathBuf>,

    /// The sandbox mode to check support for.
    #[arg(long, value_name = "MODE", value_enum, default_value_t)]
    pub sandbox: crate::sandbox::Mode,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,

    /// Seconds to wait for the TCP connection to the backend.
    #[arg(
        long = "connect-timeout",
        value_name = "SECS",
        default_value = "3",
        allow_negative_numbers = true,
        value_parser = parse_connect_timeout
    )]
    pub connect_timeout: f64,
}

/// `--connect-timeout`: a finite number of seconds above 0, at most an hour (NaN, a
/// negative or an infinite value fell back to 3 s without a word).
fn parse_connect_timeout(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs <= 3600.0 => Ok(secs),
        _ => Err(format!(
            "must be a number of seconds above 0 and at most 3600, like 3 or 0.5 (got {text:?})"
        )),
    }
}

/// Runs every check against the environment `env`.
pub fn run_checks(args: &DoctorArgs, env: &[(OsString, OsString)]) -> Report {
    let mut checks = vec![check_config(&args.backend, env)];
    let resolution = config::resolve_backend_allowing_missing_key(&args.backend, env);
    let backend_name = resolution
        .as_ref()
        .ok()
        .map(|r| r.backend.name().to_owned());
    checks.push(check_backend(&resolution, env));
    if let Ok(r) = &resolution {
        checks.push(check_model_slots(&r.backend, env));
        checks.push(check_compat(&r.backend, &args.store, &args.backend, env));
    }
    let config_usable = checks.first().is_some_and(|c| c.status != Status::Fail);
    checks.push(store::check_store(
        &args.store,
        &args.backend,
        env,
        config_usable,
    ));
    checks.push(check_claude(args.claude_bin.as_deref(), env));
    checks.push(check_state_dir(env));
    let confined = args.sandbox.is_confined();
    let support = crate::sandbox::probe();
    checks.push(check_landlock(confined, &support));
    checks.push(check_namespaces(confined, &support));
    checks.push(check_sandbox_network(confined, config_usable));
    checks.push(check_seccomp(confined, &support));
    let timeout = Duration::try_from_secs_f64(args.connect_timeout)
        .unwrap_or(Duration::from_secs(3))
        .max(Duration::from_millis(10));
    checks.push(match &resolution {
        Ok(r) => check_network(&r.backend, timeout),
        Err(_) => Check::new("network", Status::Skip, "no usable backend to connect to"),
    });
    let mut report = Report::new(backend_name, checks);
    report.secrets = crate::text::names::secret_values(env);
    if let Ok(r) = &resolution {
        report.secrets.extend(
            r.backend
                .secret_values()
                .into_iter()
                .filter_map(|v| v.to_str().map(str::to_owned)),
        );
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_lines() {
        assert_eq!(
            parse_claude_version("2.1.330 (Claude Code)"),
            Some((2, 1, 330))
        );
        assert_eq!(parse_claude_version("coder 0.1.0"), None);
        assert_eq!(parse_claude_version("x.y (Claude Code)"), None);
    }

    #[test]
    fn render_marks_failures_and_counts_them() {
        let report = Report::new(
            None,
            vec![
                Check::new("config", Status::Ok, "fine"),
                Check::new("claude", Status::Fail, "missing").hint("install it"),
            ],
        );
        assert!(!report.ok);
        let text = report.render();
        assert!(text.contains("FAIL  claude  missing"), "{text}");
        assert!(text.contains("-> install it"), "{text}");
        assert!(
            text.ends_with("result: a run would fail (1 problem)\n"),
            "{text}"
        );
    }
}
