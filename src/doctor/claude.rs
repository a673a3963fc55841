//! The `claude` executable: a real native binary (not npm's placeholder or a script
//! wrapper, which coder cannot supervise as one process), found the way a run finds it,
//! and its version against the one coder was tested with.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Check, Status, TESTED_CLAUDE_VERSION, VERSION_TIMEOUT};

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

/// The `claude` a run would start (`--claude-bin` or the first on `PATH`): a native
/// binary, not an npm placeholder or a wrapper script, that says it is Claude Code of the
/// release line coder was tested with.
pub(super) fn check_claude(explicit: Option<&Path>, env: &[(OsString, OsString)]) -> Check {
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
        Err(problem) => return unusable_binary(&shown, &problem),
    };
    let mut check = match claude_version(&resolved, env) {
        Err(e) => Check::new("claude", Status::Fail, format!("{shown} {e}")),
        Ok(line) => version_check(&shown, &line),
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

/// The check of a `claude` that cannot be run as it is, with the way out.
fn unusable_binary(shown: &str, problem: &BinaryProblem) -> Check {
    let check = Check::new("claude", Status::Fail, format!("{shown} {problem}"))
        .detail("path", shown.to_owned());
    match problem {
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
    }
}

/// The check of what `claude --version` printed: Claude Code of the tested release line
/// passes, another line warns, anything else fails.
fn version_check(shown: &str, line: &str) -> Check {
    let Some(version) = parse_claude_version(line) else {
        return Check::new(
            "claude",
            Status::Fail,
            format!("{shown} does not identify itself as Claude Code: {line:?}"),
        );
    };
    let tested = parse_claude_version(&format!("{TESTED_CLAUDE_VERSION} (Claude Code)"));
    let text = format!("{}.{}.{}", version.0, version.1, version.2);
    let same_line = tested.is_some_and(|t| (t.0, t.1) == (version.0, version.1));
    let status = if same_line { Status::Ok } else { Status::Warn };
    let check = Check::new("claude", status, format!("{shown}: Claude Code {text}"))
        .detail("version", text);
    if same_line {
        check
    } else {
        check.hint(format!(
            "coder was tested with {TESTED_CLAUDE_VERSION}; other release lines may differ"
        ))
    }
}
