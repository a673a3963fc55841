//! `coder sandbox [OPTIONS] -- CMD ARGS`: run any command under the same confinement the
//! agent gets, to try a policy by hand or to confine a build.
//!
//! There is no supervisor here, but there is a proxy: the process parses its arguments,
//! resolves the policy and forks (before anything starts a thread: no tokio runtime, no
//! logger thread, which is why it is dispatched first).
//!
//! * The child confines itself, which puts it in a network namespace with loopback only
//!   and sends the egress proxy's listener up a socket pair (see `sandbox::netns`), then
//!   replaces itself with the command.
//! * The parent stays outside the namespace and serves that listener
//!   (`sandbox::proxy::Egress`) on a small tokio runtime in a second thread, while its main
//!   thread waits for the child and forwards signals.
//!
//! Forking here, rather than re-executing through the run mode's helper, keeps the
//! command in the caller's process group and on its terminal's signals, and costs one
//! `fork` instead of a second start of coder. Exit status: the command's; when it dies of
//! a signal, the parent dies of the same signal (or exits 128+N if that signal cannot
//! kill it). `SIGTERM`, `SIGHUP`, `SIGINT`, `SIGQUIT`, `SIGUSR1` and `SIGUSR2` sent to the
//! parent by another process are forwarded to the command; the same signals from the
//! terminal already reach the command's process group and are not sent twice.
//! Those signals are held from before the policy makes anything: one that arrives before
//! the command starts ends `coder sandbox` (as that signal would) once its run directory
//! and placeholders are removed.
//!
//! `danger-full-access` needs no proxy and gets none, but forks and waits all the same, so
//! the per-call directory (private temp and config dir) goes when the command ends.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use crate::sandbox::SandboxError;
use crate::sandbox::{Mode, Policy, PolicyOptions};
use crate::text::is_secret_name;
use crate::text::path::{self, RelativeDirs};

use super::sandbox_fork::{
    EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_SANDBOX_ERROR, HeldSignals, one_line,
};

#[derive(Debug, Parser)]
#[command(
    name = "coder sandbox",
    about = "Run a command confined like the agent: Landlock, masked secrets, private root",
    after_help = "Exit status: the command's; 78 when --cd is not an existing directory you \
                  can enter (and write, in workspace-write) or the grants would reach coder's \
                  state directory, 71 when the sandbox cannot \
                  be set up, 127 when the command is not found."
)]
struct SandboxArgs {
    /// read-only, workspace-write or danger-full-access.
    #[arg(long, default_value = "workspace-write", value_parser = parse_mode)]
    mode: Mode,
    /// Workspace (and working directory); default the current directory.
    #[arg(long, value_name = "DIR")]
    cd: Option<PathBuf>,
    /// Extra readable path (repeatable).
    #[arg(long, value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Extra writable path (repeatable).
    #[arg(long, value_name = "PATH")]
    write: Vec<PathBuf>,
    /// Make the shared /tmp writable.
    #[arg(long)]
    allow_tmp: bool,
    /// Make tool caches (~/.cache, ~/.cargo/registry, ~/.npm, ...) writable.
    #[arg(long)]
    tool_caches: bool,
    /// Let the command reach HOST[:PORT] (default port 443) through coder's egress proxy
    /// (repeatable; presets @npm, @crates, @pypi, @github).
    #[arg(long = "allow-host", value_name = "HOST[:PORT]", value_parser = crate::text::non_blank)]
    allow_host: Vec<String>,
    /// Same as --allow-host 127.0.0.1:N (kept for old scripts; the command's network is
    /// its own loopback plus the proxy).
    #[arg(long, value_name = "N", hide = true)]
    connect_port: Vec<u16>,
    /// Add a non-accessible glob (repeatable; the defaults .env, .env.*, *.pem, *.key,
    /// secrets/**, private keys, .npmrc, .netrc, kubeconfig... always apply).
    #[arg(long, value_name = "GLOB", value_parser = crate::text::non_blank)]
    deny: Vec<String>,
    /// Also protect these workspace paths (repeatable): readable, not writable, creatable,
    /// deletable or renamable; one made during the run is moved aside at its end. Default,
    /// in every directory: .claude/, CLAUDE.local.md, .mcp.json, .vscode/, .idea/,
    /// .envrc, .githooks/, .husky/ and the git hook managers' configs
    /// (.pre-commit-config.yaml, lefthook.yml, .lintstagedrc*, lint-staged.config.*,
    /// simple-git-hooks.*). Nothing below node_modules/, vendor/ or site-packages/.
    #[arg(long, value_name = "GLOB", value_parser = crate::text::non_blank)]
    protect: Vec<String>,
    /// Drop the default protected globs (keeping those given with --protect).
    #[arg(long)]
    no_protect: bool,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

/// Entry point of `coder sandbox`; `args` are the arguments after `sandbox`. Never
/// returns on success: the process becomes the command.
pub fn sandbox_command(args: &[OsString]) -> ExitCode {
    let parsed: SandboxArgs = match super::parse_subcommand("coder sandbox", args) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    // A missing or wrong --cd is the caller's mistake (config, 78), not a sandbox that
    // could not be had (71).
    if let Some(dir) = &parsed.cd
        && let Err(message) = check_cd(dir, parsed.mode)
    {
        super::sandbox_fork::say(&message);
        return ExitCode::from(crate::exit::ErrorKind::ConfigError.exit_code());
    }
    // Held until the command is forked (see `HeldSignals`): from here on, what the policy
    // makes is removed however the process ends, a signal included.
    let held = match HeldSignals::hold() {
        Ok(held) => held,
        Err(e) => {
            super::sandbox_fork::say(&one_line(&e.to_string()));
            return ExitCode::from(EXIT_SANDBOX_ERROR);
        }
    };
    match run(parsed, held) {
        Ok(code) => code,
        Err(e) => {
            super::sandbox_fork::say(&one_line(&e.to_string()));
            // A bad argument (a path, glob or host the caller gave, grants that would
            // hand the agent coder's own state): the caller's to change.
            if e.is_bad_argument() {
                return ExitCode::from(crate::exit::ErrorKind::ConfigError.exit_code());
            }
            ExitCode::from(EXIT_SANDBOX_ERROR)
        }
    }
}

/// Why `dir` cannot be the workspace in `mode`, if it cannot: the message to print.
fn check_cd(dir: &Path, mode: Mode) -> Result<(), String> {
    let reason = match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {
            use crate::pipeline::request::{check_workspace_access, check_workspace_writable};
            check_workspace_access(dir, "--cd")?;
            if mode == Mode::WorkspaceWrite {
                check_workspace_writable(dir, "--cd", "--mode read-only")?;
            }
            return Ok(());
        }
        Ok(_) => "not a directory; pass the workspace directory".to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "no such directory; pass an existing workspace directory".to_owned()
        }
        Err(e) => e.to_string(),
    };
    Err(format!("--cd {}: {reason}", dir.display()))
}

fn run(args: SandboxArgs, held: HeldSignals) -> Result<ExitCode, SandboxError> {
    crate::phases::mark("sandbox.main");
    let workspace = match &args.cd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| SandboxError::io("current directory", e))?,
    };
    let mut opts = PolicyOptions::new(args.mode, &workspace);
    opts.extra_read = args.read;
    opts.extra_write = args.write;
    opts.allow_tmp = args.allow_tmp;
    opts.tool_caches = args.tool_caches;
    let mut hosts = args.allow_host.clone();
    hosts.extend(args.connect_port.iter().map(|p| format!("127.0.0.1:{p}")));
    opts.allow_hosts = crate::sandbox::allow::expand_all(&hosts)?;
    let mut deny = config_file_deny()?;
    deny.extend(args.deny);
    opts.deny_globs = crate::sandbox::deny_globs(deny);
    opts.protect_globs = crate::sandbox::protect_globs(args.no_protect, &args.protect);
    let mut policy = held.resolve(&opts)?;
    for line in &policy.warnings {
        if line.starts_with(crate::sandbox::gitguard::LATE_PREFIX)
            || line.starts_with(crate::sandbox::gitguard::STOPPED_PREFIX)
        {
            super::sandbox_fork::say(line);
        }
    }
    // From here on the policy's run directory and placeholders exist: every way out
    // removes them (run_forked does once the command ends).
    let env = match command_setup(&mut policy, &args.command[0]) {
        Ok(Ok(env)) => env,
        Ok(Err(code)) => {
            policy.cleanup();
            held.release();
            return Ok(ExitCode::from(code));
        }
        Err(e) => {
            policy.cleanup();
            held.release();
            return Err(e);
        }
    };
    // Every mode forks and waits, so the per-call directory (private temp and config dir,
    // placeholders) is removed when the command ends, danger-full-access included.
    crate::phases::mark("policy.done");
    super::sandbox_fork::run_forked(policy, &args.command[0], &args.command[1..], env, held)
}

/// Enter the workspace, find `program` and grant reading it: the command's environment,
/// or the exit status (the shell's: 127 not found, 126 not executable) when the program
/// cannot be run, said on stderr.
fn command_setup(
    policy: &mut Policy,
    program: &OsString,
) -> Result<Result<Vec<(OsString, OsString)>, u8>, SandboxError> {
    std::env::set_current_dir(&policy.workspace)
        .map_err(|e| SandboxError::io(format!("enter {}", policy.workspace.display()), e))?;
    let env = command_env(policy);
    let search_path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let Some(executable) = find_executable(program, &search_path, &policy.workspace) else {
        let (why, code) = not_runnable(program, &policy.workspace);
        eprintln!("coder sandbox: {}: {why}", program.to_string_lossy());
        return Ok(Err(code));
    };
    // The command itself must be readable in the sandbox; grant the file alone when it
    // lives outside the granted roots, not its whole directory.
    if policy.mode.is_confined() && !policy.is_granted(&executable) {
        policy.grant_read(&executable)?;
    }
    Ok(Ok(env))
}

/// Why `program`, which [`find_executable`] did not find, cannot be run, and the shell's
/// exit status for it: a path to a directory or to a file without execute permission
/// exists (126), anything else is not found (127).
fn not_runnable(program: &OsString, cwd: &Path) -> (&'static str, u8) {
    if !path::has_dir_part(program) {
        return ("command not found (not on the PATH)", EXIT_NOT_FOUND);
    }
    match std::fs::metadata(cwd.join(program)) {
        Ok(meta) if meta.is_dir() => ("is a directory, not a program", EXIT_NOT_EXECUTABLE),
        Ok(_) => (
            "not executable (no execute permission, or not a regular file)",
            EXIT_NOT_EXECUTABLE,
        ),
        Err(_) => ("no such file", EXIT_NOT_FOUND),
    }
}

/// The `deny` globs of the config file (`CODER_CONFIG`, else the XDG default), the same
/// ones a run adds to the defaults. A config file that exists but cannot be read is an
/// error: running with fewer masks than the user configured would fail open.
fn config_file_deny() -> Result<Vec<String>, SandboxError> {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let Some(location) =
        crate::config::config_file_location(&crate::config::BackendArgs::default(), &env)
    else {
        return Ok(Vec::new());
    };
    if !location.explicit && !location.path.exists() {
        return Ok(Vec::new());
    }
    crate::config::ConfigFile::load(&location.path)
        .map(|f| f.deny)
        .map_err(|e| {
            use crate::config::ConfigError;
            // The path is said once, by the `Path` error ("config file PATH: …").
            let reason = match &e {
                ConfigError::ReadFile { source, .. } => format!("cannot read it: {source}"),
                ConfigError::Malformed { line, message, .. } => format!("line {line}: {message}"),
                other => other.to_string(),
            };
            SandboxError::Path {
                what: crate::sandbox::PathRole::ConfigFile,
                path: location.path,
                reason,
            }
        })
}

/// This process's environment without credentials, adjusted by the policy.
fn command_env(policy: &Policy) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let name = k.to_string_lossy();
            !is_secret_name(k) && !policy.env_remove.iter().any(|r| *r == name)
        })
        .filter(|(k, _)| !policy.env_set.contains_key(k.to_string_lossy().as_ref()))
        .collect();
    env.extend(
        policy
            .env_set
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    env
}

/// Resolve `program` like `execvp` would in `cwd`: a name with a `/` relative to it,
/// anything else through `PATH` (relative entries from `cwd` too); the canonical path.
fn find_executable(program: &OsString, path: &OsString, cwd: &Path) -> Option<PathBuf> {
    let found = if path::has_dir_part(program) {
        let full = cwd.join(program);
        path::is_executable_file(&full).then_some(full)
    } else {
        path::find_on_path(program, path, cwd, RelativeDirs::FromBase)
    };
    found.and_then(|p| std::fs::canonicalize(p).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options_and_command() {
        let args = SandboxArgs::try_parse_from([
            "coder sandbox",
            "--mode",
            "read-only",
            "--allow-host",
            "@npm",
            "--",
            "ls",
            "-la",
        ])
        .unwrap();
        assert_eq!(args.mode, Mode::ReadOnly);
        assert_eq!(args.allow_host, vec!["@npm".to_string()]);
        assert_eq!(
            args.command,
            vec![OsString::from("ls"), OsString::from("-la")]
        );
        assert!(
            SandboxArgs::try_parse_from(["coder sandbox", "--mode", "yolo", "--", "ls"]).is_err()
        );
    }
}
