//! Tool commands are nested: every command the agent's CLI runs for its Bash tool (and its
//! hooks and MCP servers) enters one more Landlock domain before it starts.
//!
//! Why: the CLI's stdout is the stream coder parses. Without nesting, a tool command runs
//! in the CLI's own Landlock domain with the CLI's uid, so it can open
//! `/proc/<CLI pid>/fd/1` and write a forged `{"type":"result",...}` line into that pipe.
//! Landlock refuses ptrace-class access (which `/proc/PID/fd`, `/proc/PID/mem`,
//! `pidfd_getfd` need) from a domain to any process outside it or its own descendants, so
//! a tool in a child domain can no longer reach the CLI's descriptors. Sibling tool
//! commands (two Bash calls) are in sibling domains and cannot trace each other either;
//! signals between them still work (the nested domain does not scope them).
//!
//! How: the CLI wraps each command as `'<prefix>' '<command string>'` when
//! `CLAUDE_CODE_SHELL_PREFIX` is set (it splits the prefix at its last `" -"`, so the
//! prefix is a single path with no such sequence; MCP servers get the prefix as their
//! executable). [`prepare`] points the variable at a symlink named `coder-nest` to coder's
//! own binary, in a read-only directory of the run; `main` recognises that name in
//! `argv[0]` and calls [`nest_main`], which adds a ruleset granting every filesystem right
//! beneath `/` (the effective rights stay the parent domain's: domains intersect) and
//! execs the user's shell with `-c` and the command string, as a wrapper script would.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access as _, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus,
};

use super::{Policy, SandboxError};

/// The name under which coder's binary acts as the nesting wrapper.
pub const NEST_NAME: &str = "coder-nest";
/// The CLI's variable for a command prefix.
pub const SHELL_PREFIX_VAR: &str = "CLAUDE_CODE_SHELL_PREFIX";

/// Whether `argv0` selects the nesting wrapper.
pub fn is_nest_invocation(argv0: &OsStr) -> bool {
    Path::new(argv0).file_name() == Some(OsStr::new(NEST_NAME))
}

/// Make the agent's tool commands nested: a `coder-nest` link to coder's binary in the
/// run's directory, readable (not writable) by the agent, and the CLI's prefix variable
/// pointing at it.
pub fn prepare(policy: &mut Policy) -> Result<(), SandboxError> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| SandboxError::io("locate coder's executable", e))?;
    let dir = policy.run_dir.join("nest");
    std::fs::create_dir_all(&dir)
        .map_err(|e| SandboxError::io(format!("create {}", dir.display()), e))?;
    let link = dir.join(NEST_NAME);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&exe, &link)
        .map_err(|e| SandboxError::io(format!("create {}", link.display()), e))?;
    let text = link.to_string_lossy().into_owned();
    if text.contains(" -") || link.to_str().is_none() {
        return Err(SandboxError::Path {
            what: "run directory",
            path: dir,
            reason: "contains \" -\" or is not UTF-8, which the CLI's command prefix cannot \
                     carry; set CODER_STATE_DIR to a plain path"
                .to_string(),
        });
    }
    policy.grant_read(&dir)?;
    policy.grant_read(&exe)?;
    policy.env_set.insert(SHELL_PREFIX_VAR.to_string(), text);
    Ok(())
}

/// Entry point of `coder-nest COMMAND...`: enter a nested Landlock domain, then run the
/// command string with the shell. Only returns by exiting; refuses to run the command
/// when the domain cannot be had.
pub fn nest_main(args: &[OsString]) -> ! {
    let command = args[1..]
        .iter()
        .map(|a| a.as_bytes())
        .collect::<Vec<_>>()
        .join(&b' ');
    if let Err(e) = enter_nested_domain() {
        eprintln!("coder-nest: refusing to run the command: {e}");
        std::process::exit(126);
    }
    let shell = shell();
    let argv = [
        CString::new(shell.as_os_str().as_bytes()),
        CString::new("-c"),
        CString::new(command),
    ];
    let argv: Vec<CString> = match argv.into_iter().collect() {
        Ok(argv) => argv,
        Err(_) => {
            eprintln!("coder-nest: the command contains a NUL byte");
            std::process::exit(126);
        }
    };
    let err = match nix::unistd::execv(&argv[0], &argv) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    eprintln!(
        "coder-nest: cannot execute {}: {}",
        shell.display(),
        err.desc()
    );
    std::process::exit(127)
}

/// A Landlock domain nested in the current one, with every filesystem right beneath `/`.
fn enter_nested_domain() -> Result<(), String> {
    let abi = ABI::V7;
    let all = AccessFs::from_all(abi);
    let root = PathFd::new("/").map_err(|e| e.to_string())?;
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| e.to_string())?
        .create()
        .map_err(|e| e.to_string())?
        .add_rule(PathBeneath::new(root, all))
        .map_err(|e| e.to_string())?
        .restrict_self()
        .map_err(|e| e.to_string())?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enforced on this kernel".to_string());
    }
    Ok(())
}

/// The shell the CLI would use: `CLAUDE_CODE_SHELL`, else `SHELL` when it is bash or zsh,
/// else bash, else sh.
fn shell() -> PathBuf {
    let usable = |p: &Path| p.is_absolute() && p.is_file();
    if let Some(shell) = std::env::var_os("CLAUDE_CODE_SHELL").map(PathBuf::from)
        && usable(&shell)
    {
        return shell;
    }
    if let Some(shell) = std::env::var_os("SHELL").map(PathBuf::from)
        && usable(&shell)
        && matches!(
            shell.file_name().and_then(|n| n.to_str()),
            Some("bash" | "zsh")
        )
    {
        return shell;
    }
    ["/bin/bash", "/usr/bin/bash"]
        .iter()
        .map(PathBuf::from)
        .find(|p| usable(p))
        .unwrap_or_else(|| PathBuf::from(OsString::from_vec(b"/bin/sh".to_vec())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_its_name_only() {
        assert!(is_nest_invocation(OsStr::new("/run/x/nest/coder-nest")));
        assert!(is_nest_invocation(OsStr::new("coder-nest")));
        assert!(!is_nest_invocation(OsStr::new("/usr/bin/coder")));
        assert!(!is_nest_invocation(OsStr::new("coder-nest-x")));
    }
}
