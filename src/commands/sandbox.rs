//! `coder sandbox [OPTIONS] -- CMD ARGS`: run any command under the same confinement the
//! agent gets, to try a policy by hand or to confine a build.
//!
//! There is no supervisor here: the process parses its arguments, resolves the policy,
//! confines itself and replaces itself with the command (`execvp`). That is why it must be
//! dispatched before anything starts a thread (no tokio runtime, no logger thread).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use crate::sandbox::{Mode, Policy, PolicyOptions};
use crate::sandbox::{SandboxError, confine};
use crate::text::is_secret_name;
use crate::text::path::{self, RelativeDirs};

/// Exit code when the sandbox cannot be set up (the run mode's `sandbox_error`).
const EXIT_SANDBOX_ERROR: u8 = 71;
const EXIT_NOT_FOUND: u8 = 127;
const EXIT_NOT_EXECUTABLE: u8 = 126;

#[derive(Debug, Parser)]
#[command(
    name = "coder sandbox",
    about = "Run a command confined like the agent: Landlock, masked secrets, private root",
    after_help = "Exit status: the command's; 71 when the sandbox cannot be set up, \
                  127 when the command is not found."
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
    /// TCP port the command may connect to (repeatable).
    #[arg(long, value_name = "N")]
    connect_port: Vec<u16>,
    /// Add a non-accessible glob (repeatable; the defaults .env, .env.*, *.pem, *.key,
    /// secrets/**, private keys, .npmrc, .netrc, kubeconfig... always apply).
    #[arg(long, value_name = "GLOB")]
    deny: Vec<String>,
    /// Also protect these workspace paths (repeatable): readable, not writable, creatable,
    /// deletable or renamable. Default .claude/**, .mcp.json, .vscode/**, .idea/**,
    /// .envrc, .githooks/**, .husky/**.
    #[arg(long, value_name = "GLOB")]
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
    match run(parsed) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("coder sandbox: {}", one_line(&e.to_string()));
            ExitCode::from(EXIT_SANDBOX_ERROR)
        }
    }
}

fn run(args: SandboxArgs) -> Result<ExitCode, SandboxError> {
    let workspace = match &args.cd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| SandboxError::io("current directory", e))?,
    };
    let mut opts = PolicyOptions::new(args.mode, &workspace);
    opts.extra_read = args.read;
    opts.extra_write = args.write;
    opts.allow_tmp = args.allow_tmp;
    opts.tool_caches = args.tool_caches;
    opts.connect_ports = args.connect_port;
    let mut deny = config_file_deny()?;
    deny.extend(args.deny);
    opts.deny_globs = crate::sandbox::deny_globs(deny);
    opts.protect_globs = crate::sandbox::protect_globs(args.no_protect, &args.protect);
    let mut policy = Policy::resolve(&opts)?;
    std::env::set_current_dir(&policy.workspace)
        .map_err(|e| SandboxError::io(format!("enter {}", policy.workspace.display()), e))?;

    let env = command_env(&policy);
    let program = &args.command[0];
    let search_path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let Some(executable) = find_executable(program, &search_path, &policy.workspace) else {
        eprintln!(
            "coder sandbox: {}: command not found",
            program.to_string_lossy()
        );
        policy.cleanup();
        return Ok(ExitCode::from(EXIT_NOT_FOUND));
    };
    // The command itself must be readable in the sandbox; grant the file alone when it
    // lives outside the granted roots, not its whole directory.
    if policy.mode.is_confined() && !policy.is_granted(&executable) {
        policy.grant_read(&executable)?;
    }

    if !policy.placeholders.is_empty() {
        return Ok(run_then_clean_up(&policy, program, &args.command[1..], env));
    }
    if let Err(e) = confine(&policy) {
        policy.cleanup();
        return Err(e);
    }
    Ok(exec(program, &args.command[1..], env))
}

/// Replace this process with the command; returns only the exit code of a failed exec.
fn exec(program: &OsString, args: &[OsString], env: Vec<(OsString, OsString)>) -> ExitCode {
    let err = std::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .exec();
    eprintln!("coder sandbox: {}: {err}", program.to_string_lossy());
    ExitCode::from(match err.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        _ => EXIT_NOT_EXECUTABLE,
    })
}

/// The child being waited for, for the signal forwarder.
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int) {
    let pid = CHILD.load(std::sync::atomic::Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe and takes integers only.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The policy made placeholders for absent protected names (DESIGN §5), which must go
/// once the command is done: confine and run the command in a child, wait for it, remove
/// them, and exit as the child did. Termination signals are passed on to the child, which
/// also dies with this process (parent-death signal).
fn run_then_clean_up(
    policy: &Policy,
    program: &OsString,
    args: &[OsString],
    env: Vec<(OsString, OsString)>,
) -> ExitCode {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::{ForkResult, fork};
    let parent = nix::unistd::getpid();
    // SAFETY: `coder sandbox` is single-threaded here (dispatched before any thread
    // starts), so the child may run arbitrary code after fork.
    match unsafe { fork() } {
        Err(e) => {
            eprintln!("coder sandbox: fork: {e}");
            policy.cleanup();
            ExitCode::from(EXIT_SANDBOX_ERROR)
        }
        Ok(ForkResult::Child) => {
            // SAFETY: prctl with integer arguments only.
            unsafe {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
            }
            if nix::unistd::getppid() != parent {
                std::process::exit(i32::from(EXIT_SANDBOX_ERROR));
            }
            if let Err(e) = confine(policy) {
                eprintln!("coder sandbox: {}", one_line(&e.to_string()));
                std::process::exit(i32::from(EXIT_SANDBOX_ERROR));
            }
            exec(program, args, env)
        }
        Ok(ForkResult::Parent { child }) => {
            CHILD.store(child.as_raw(), std::sync::atomic::Ordering::SeqCst);
            let action = SigAction::new(
                SigHandler::Handler(forward_signal),
                SaFlags::SA_RESTART,
                SigSet::empty(),
            );
            for sig in [
                Signal::SIGTERM,
                Signal::SIGINT,
                Signal::SIGHUP,
                Signal::SIGQUIT,
            ] {
                // SAFETY: the handler only reads an atomic and calls kill.
                let _ = unsafe { sigaction(sig, &action) };
            }
            let code = loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, code)) => break u8::try_from(code).unwrap_or(1),
                    Ok(WaitStatus::Signaled(_, sig, _)) => {
                        break 128u8.saturating_add(sig as u8);
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break EXIT_SANDBOX_ERROR,
                }
            };
            policy.cleanup();
            ExitCode::from(code)
        }
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
        .map_err(|e| SandboxError::Path {
            what: "config file",
            path: location.path,
            reason: e.to_string(),
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

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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
            "--connect-port",
            "8080",
            "--",
            "ls",
            "-la",
        ])
        .unwrap();
        assert_eq!(args.mode, Mode::ReadOnly);
        assert_eq!(args.connect_port, vec![8080]);
        assert_eq!(
            args.command,
            vec![OsString::from("ls"), OsString::from("-la")]
        );
        assert!(
            SandboxArgs::try_parse_from(["coder sandbox", "--mode", "yolo", "--", "ls"]).is_err()
        );
    }
}
