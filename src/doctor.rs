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

use crate::sandbox::SandboxSupport;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::Read;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::config::{
    self, BackendArgs, BackendKind, ConfigError, ConfigFile, Endpoint, KeySource, Provider,
    Resolution, ResolvedBackend,
};
use crate::store::RequestShape;

pub use crate::pipeline::child::TESTED_CLAUDE_VERSION;

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
        checks.push(check_compat(&r.backend, &args.backend, env));
    }
    checks.push(check_claude(args.claude_bin.as_deref(), env));
    checks.push(check_state_dir(env));
    let confined = args.sandbox.is_confined();
    let support = crate::sandbox::probe();
    checks.push(check_landlock(confined, &support));
    checks.push(check_namespaces(confined, &support));
    let config_usable = checks.first().is_some_and(|c| c.status != Status::Fail);
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

fn check_config(args: &BackendArgs, env: &[(OsString, OsString)]) -> Check {
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

fn check_backend(
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
    let var = |name: &str| {
        child_env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    let url = backend.base_url().map_or(
        "served on 127.0.0.1 by coder once a run starts".into(),
        crate::text::redact::url_without_password,
    );
    let key = match backend.credential() {
        Some(c) => format!("key from {} as {}", c.source, c.scheme.variable()),
        None => "the caller's own credentials".to_owned(),
    };
    let mut check = Check::new(
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
    );
    let mut models = Map::new();
    let mut shown = Vec::new();
    for (name, slot) in MODEL_VARIABLES {
        if let Some(value) = var(name) {
            shown.push(format!("{slot}={value}"));
            models.insert(slot.to_owned(), value.into());
        }
    }
    if !models.is_empty() {
        check = check.hint(format!("models: {}", shown.join(", ")));
        check = check.detail("models", Value::Object(models));
    }
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
fn check_model_slots(backend: &ResolvedBackend, env: &[(OsString, OsString)]) -> Check {
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
fn check_compat(
    backend: &ResolvedBackend,
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
    let shape = remembered_shape(backend, args, env);
    parts.push(match &shape {
        Ok(RequestShape::Compat) => {
            "request shape compat (remembered: the vendor rejected the full shape)".to_owned()
        }
        Ok(RequestShape::Full) => "request shape full".to_owned(),
        Err(why) => format!("request shape full ({why})"),
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
fn remembered_shape(
    backend: &ResolvedBackend,
    args: &BackendArgs,
    env: &[(OsString, OsString)],
) -> Result<RequestShape, String> {
    let state_dir = config::state_dir_of(env).ok_or("no state directory")?;
    let store_args = crate::store::StoreArgs {
        store: env
            .iter()
            .find(|(k, _)| k == "CODER_STORE")
            .map(|(_, v)| v.to_string_lossy().into_owned()),
        optional: false,
    };
    let (url, file) = config::store_setting(args, env).map_err(|e| e.to_string())?;
    let location =
        crate::store::Location::resolve(&store_args, url.as_deref(), file.as_deref(), &state_dir)
            .map_err(|e| e.to_string())?;
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

/// Why an executable cannot serve as the claude CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinaryProblem {
    NotFound,
    NotAFile,
    NotExecutable,
    /// The npm package's placeholder, left when its install script did not run.
    NpmPlaceholder {
        platform_binary: Option<PathBuf>,
    },
    /// A `#!` script: coder runs, confines and kills the native binary, not an interpreter.
    Script {
        interpreter: String,
    },
    /// Not an ELF executable.
    UnknownFormat,
}

impl fmt::Display for BinaryProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BinaryProblem::NotFound => f.write_str("does not exist"),
            BinaryProblem::NotAFile => f.write_str("is not a regular file"),
            BinaryProblem::NotExecutable => f.write_str("is not executable"),
            BinaryProblem::NpmPlaceholder { .. } => f.write_str(
                "is the npm package's placeholder script (its install step did not run), not the claude binary",
            ),
            BinaryProblem::Script { interpreter } => write!(
                f,
                "is a script run by {interpreter}, not the native claude binary coder can confine and stop reliably"
            ),
            BinaryProblem::UnknownFormat => f.write_str("is not a Linux (ELF) executable"),
        }
    }
}

/// Checks that `path` is a native executable, not a shim coder cannot run safely.
/// Returns the symlink-resolved path.
pub fn inspect_claude_binary(path: &Path) -> Result<PathBuf, BinaryProblem> {
    let meta = std::fs::metadata(path).map_err(|_| BinaryProblem::NotFound)?;
    if !meta.is_file() {
        return Err(BinaryProblem::NotAFile);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(BinaryProblem::NotExecutable);
        }
    }
    let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(&resolved)
        .and_then(|f| f.take(4096).read_to_end(&mut head))
        .map_err(|_| BinaryProblem::NotExecutable)?;
    if head.starts_with(b"\x7fELF") {
        return Ok(resolved);
    }
    let text = String::from_utf8_lossy(&head);
    if meta.len() <= 4096 && text.contains("native binary not installed") {
        return Err(BinaryProblem::NpmPlaceholder {
            platform_binary: platform_binary_near(&resolved),
        });
    }
    if let Some(line) = text.strip_prefix("#!") {
        let interpreter = line.lines().next().unwrap_or_default().trim().to_owned();
        return Err(BinaryProblem::Script { interpreter });
    }
    Err(BinaryProblem::UnknownFormat)
}

/// The platform package's binary next to an npm install of `@anthropic-ai/claude-code`
/// (`node_modules/@anthropic-ai/claude-code-linux-x64/claude` and the like).
fn platform_binary_near(placeholder: &Path) -> Option<PathBuf> {
    let scope = placeholder
        .ancestors()
        .find(|p| p.file_name() == Some(OsStr::new("@anthropic-ai")))?;
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(scope)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("claude-code-"))
        })
        .map(|e| e.path().join("claude"))
        .filter(|p| inspect_claude_binary(p).is_ok())
        .collect();
    candidates.sort();
    candidates.into_iter().next()
}

/// `claude` on the `PATH` of `env`.
pub fn find_on_path(program: &str, env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v)?;
    crate::text::path::find_on_path(
        program.as_ref(),
        path,
        Path::new("/"),
        crate::text::path::RelativeDirs::Skip,
    )
}

/// Runs `claude --version` and returns its first line.
fn claude_version(path: &Path, env: &[(OsString, OsString)]) -> Result<String, String> {
    let keep = ["PATH", "HOME", "LANG"];
    let mut child = Command::new(path)
        .arg("--version")
        .env_clear()
        .envs(
            env.iter()
                .filter(|(k, _)| keep.iter().any(|n| k == n))
                .cloned(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot be started: {e}"))?;
    let deadline = Instant::now() + VERSION_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "--version did not answer within {} s",
                    VERSION_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("--version could not be waited for: {e}")),
        }
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    let first = out.lines().next().unwrap_or_default().trim().to_owned();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            let _ = stderr.read_to_string(&mut err);
        }
        let said = err.lines().next().unwrap_or(&first).trim().to_owned();
        return Err(format!("--version failed ({status}): {said}"));
    }
    Ok(first)
}

/// The leading `major.minor.patch` of a version line such as `2.1.330 (Claude Code)`.
pub fn parse_claude_version(line: &str) -> Option<(u32, u32, u32)> {
    if !line.contains("Claude Code") {
        return None;
    }
    let word = line.split_whitespace().next()?;
    let mut parts = word.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

fn check_claude(explicit: Option<&Path>, env: &[(OsString, OsString)]) -> Check {
    let path = match explicit {
        Some(p) => p.to_owned(),
        None => match find_on_path("claude", env) {
            Some(p) => p,
            None => {
                return Check::new("claude", Status::Fail, "no `claude` on PATH")
                    .hint(crate::pipeline::child::INSTALL_HINT);
            }
        },
    };
    let shown = path.display().to_string();
    let mut script_hint = None;
    let resolved = match inspect_claude_binary(&path) {
        Ok(resolved) => resolved,
        // A wrapper script runs (a run accepts it too); whether it works is what the
        // version check below finds out.
        Err(BinaryProblem::Script { interpreter }) => {
            script_hint = Some(format!(
                "{shown} is a script (#!{interpreter}); under the sandbox it can only start \
                 what its own directory or the system holds"
            ));
            std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone())
        }
        Err(problem) => {
            let mut check = Check::new("claude", Status::Fail, format!("{shown} {problem}"))
                .detail("path", shown.clone());
            check = match &problem {
                BinaryProblem::NpmPlaceholder {
                    platform_binary: Some(real),
                } => check.hint(format!(
                    "use the platform binary: --claude-bin {}",
                    real.display()
                )),
                BinaryProblem::NpmPlaceholder {
                    platform_binary: None,
                } => check.hint(
                    "reinstall without --ignore-scripts, or point --claude-bin at \
                     node_modules/@anthropic-ai/claude-code-<platform>/claude",
                ),
                BinaryProblem::Script { .. } => check.hint(
                    "point --claude-bin at the native binary (in an npm install: \
                     node_modules/@anthropic-ai/claude-code-<platform>/claude)",
                ),
                _ => check,
            };
            return check;
        }
    };
    let mut check = match claude_version(&resolved, env) {
        Err(e) => Check::new("claude", Status::Fail, format!("{shown} {e}")),
        Ok(line) => match parse_claude_version(&line) {
            None => Check::new(
                "claude",
                Status::Fail,
                format!("{shown} does not identify itself as Claude Code: {line:?}"),
            ),
            Some(version) => {
                let tested =
                    parse_claude_version(&format!("{TESTED_CLAUDE_VERSION} (Claude Code)"));
                let text = format!("{}.{}.{}", version.0, version.1, version.2);
                let same_line = tested.is_some_and(|t| (t.0, t.1) == (version.0, version.1));
                let status = if same_line { Status::Ok } else { Status::Warn };
                let mut c = Check::new("claude", status, format!("{shown}: Claude Code {text}"))
                    .detail("version", text);
                if !same_line {
                    c = c.hint(format!(
                        "coder was tested with {TESTED_CLAUDE_VERSION}; other release lines may differ"
                    ));
                }
                c
            }
        },
    };
    check = check.detail("path", shown);
    if let Some(hint) = script_hint
        && check.status == Status::Ok
    {
        check = check.hint(hint);
    }
    if resolved != path {
        check = check.detail("resolved", resolved.display().to_string());
    }
    check
}

/// The state directory must exist or be creatable, and be writable: a run keeps its
/// transcript, session records and the CLI's config dir there and stops without them.
fn check_state_dir(env: &[(OsString, OsString)]) -> Check {
    let Some(dir) = config::state_dir_of(env) else {
        return Check::new(
            "state",
            Status::Fail,
            config::ConfigError::NoHome.to_string(),
        );
    };
    let shown = dir.display().to_string();
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    let writable = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe));
    match writable {
        Ok(()) => Check::new("state", Status::Ok, format!("{shown} is writable")),
        Err(e) => Check::new(
            "state",
            Status::Fail,
            format!("coder's state directory {shown} is not writable: {e}"),
        )
        .hint("set CODER_STATE_DIR to a private, writable directory"),
    }
    .detail("path", shown)
}

fn check_landlock(confined: bool, support: &SandboxSupport) -> Check {
    let lsm = read_sysctl("/sys/kernel/security/lsm");
    let missing = if confined { Status::Fail } else { Status::Skip };
    let check = match (support.landlock_abi, &support.landlock_error) {
        (Some(abi), _) if support.can_confine() => {
            Check::new("landlock", Status::Ok, format!("ABI {abi}"))
        }
        (Some(abi), _) => Check::new(
            "landlock",
            missing,
            format!(
                "ABI {abi}: coder's sandbox needs ABI 6 (Linux 6.12) for its network and \
                 scoping rules"
            ),
        ),
        (None, error) => Check::new(
            "landlock",
            missing,
            match error {
                Some(e) => format!("Landlock is unavailable: {e}"),
                None => "Landlock is unavailable".to_owned(),
            },
        ),
    };
    let check = if confined && check.status == Status::Fail {
        check.hint(
            "read-only and workspace-write runs need Landlock ABI 6; only --sandbox \
             danger-full-access can run here",
        )
    } else {
        check
    };
    match lsm {
        Some(list) => check.detail("lsm", list),
        None => check,
    }
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn check_namespaces(confined: bool, support: &SandboxSupport) -> Check {
    if !confined {
        return Check::new(
            "namespaces",
            Status::Skip,
            "not needed for danger-full-access",
        );
    }
    if support.user_namespaces {
        return Check::new(
            "namespaces",
            Status::Ok,
            "user, mount, PID, IPC and UTS namespaces work",
        );
    }
    let why = support
        .user_namespaces_error
        .clone()
        .unwrap_or_else(|| "unknown reason".to_owned());
    let mut check = if support.root_with_sys_admin {
        Check::new(
            "namespaces",
            Status::Ok,
            format!(
                "user namespaces unavailable ({why}); as root, mount, PID, IPC and UTS \
                 namespaces work"
            ),
        )
    } else {
        Check::new(
            "namespaces",
            Status::Fail,
            format!(
                "user namespaces unavailable ({why}): no private root, PID namespace or \
                 secret masks can be set up, so confined runs are refused (fail closed)"
            ),
        )
        .hint("only --sandbox danger-full-access can run here")
    };
    if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
    {
        check = check.hint("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)");
    }
    if read_sysctl("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        check = check.hint("user namespaces are disabled (user.max_user_namespaces=0)");
    }
    if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        check = check
            .hint("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)");
    }
    check
}

/// The agent's network layer (private network namespace, loopback, egress proxy), tried
/// for real with `coder sandbox -- true`: what fails here makes every confined run fail
/// closed. Not tried when the config file is unusable: `coder sandbox` reads its `deny`
/// globs and would fail for that, which the `config` check already says (this check used
/// to fail then too, blaming the network namespace).
fn check_sandbox_network(confined: bool, config_usable: bool) -> Check {
    const NAME: &str = "egress";
    if !confined {
        return Check::new(NAME, Status::Skip, "not needed for danger-full-access");
    }
    if !config_usable {
        return Check::new(NAME, Status::Skip, "the config file is unusable");
    }
    match crate::sandbox::probe_network() {
        Ok(()) => Check::new(
            NAME,
            Status::Ok,
            format!(
                "private network namespace with loopback only; egress proxy on \
                 127.0.0.1:{} inside, served by coder",
                crate::sandbox::DEFAULT_PROXY_PORT
            ),
        ),
        Err(why) => Check::new(NAME, Status::Fail, why).hint(
            "confined runs need a network namespace for the egress proxy and fail with \
             sandbox_error without one; --sandbox danger-full-access runs unconfined",
        ),
    }
}

/// The seccomp layer: whether the filter can be installed here (it must, or confined
/// runs are refused), with its rules.
fn check_seccomp(confined: bool, support: &SandboxSupport) -> Check {
    if !confined {
        return Check::new("seccomp", Status::Skip, "not needed for danger-full-access");
    }
    if support.seccomp {
        return Check::new(
            "seccomp",
            Status::Ok,
            format!(
                "filter of {} system calls can be installed",
                support.seccomp_rules
            ),
        )
        .detail(
            "rules",
            crate::sandbox::seccomp::RULES
                .iter()
                .map(|r| serde_json::json!({"call": r.name, "why": r.why}))
                .collect::<Vec<_>>(),
        );
    }
    Check::new(
        "seccomp",
        Status::Fail,
        format!(
            "seccomp is unavailable ({}): confined runs are refused (fail closed)",
            support.seccomp_error.as_deref().unwrap_or("unknown reason")
        ),
    )
    .hint("only --sandbox danger-full-access can run here")
}

/// Resolves `host:port` and opens a TCP connection, all within `timeout`.
pub fn probe_tcp(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<(SocketAddr, Duration), String> {
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let target = (host.to_owned(), port);
    // Name resolution cannot be given a timeout, so it runs on a thread that is abandoned
    // if it takes too long.
    std::thread::spawn(move || {
        let _ = tx.send(target.to_socket_addrs().map(Iterator::collect::<Vec<_>>));
    });
    let addrs = match rx.recv_timeout(timeout) {
        Ok(Ok(addrs)) => addrs,
        Ok(Err(e)) => return Err(format!("cannot resolve {host}: {e}")),
        Err(_) => return Err(format!("resolving {host} took longer than {timeout:?}")),
    };
    let mut last = format!("{host} has no address");
    for addr in addrs {
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(format!("no connection to {host}:{port} within {timeout:?}"));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(_) => return Ok((addr, started.elapsed())),
            Err(e) => last = format!("cannot connect to {host}:{port} ({addr}): {e}"),
        }
    }
    Err(last)
}

fn check_network(backend: &ResolvedBackend, timeout: Duration) -> Check {
    if backend.kind() == BackendKind::Replay && backend.endpoint().is_none() {
        return Check::new(
            "network",
            Status::Skip,
            "replay backend: coder serves the cassette itself on 127.0.0.1",
        );
    }
    let Some(endpoint) = backend.endpoint() else {
        return Check::new("network", Status::Skip, "no base URL to connect to");
    };
    let proxy = backend.proxy();
    let (target, via): (&Endpoint, String) = match &proxy {
        Some(p) => (p, format!(" (proxy for {endpoint})")),
        None => (endpoint, String::new()),
    };
    match probe_tcp(&target.host, target.port, timeout) {
        Ok((addr, took)) => Check::new(
            "network",
            Status::Ok,
            format!(
                "connected to {target}{via} ({addr}) in {} ms",
                took.as_millis()
            ),
        )
        .detail("host", target.host.clone())
        .detail("port", target.port),
        Err(e) => {
            let mut check = Check::new("network", Status::Fail, format!("{e}{via}"))
                .detail("host", target.host.clone())
                .detail("port", target.port);
            if endpoint.is_loopback() {
                check = check.hint(format!(
                    "nothing listens on {endpoint}: start the local server (proxy) first"
                ));
            } else if let Some(KeySource::Variable(_)) = backend.credential().map(|c| &c.source) {
                check = check.hint("check the network, a firewall, or HTTPS_PROXY");
            }
            check
        }
    }
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
