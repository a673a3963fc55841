//! Tool commands are nested: every shell the agent's CLI starts for its Bash tool (and
//! its shell snapshot) enters one more Landlock domain before any shell code runs.
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
//! How: the CLI takes its shell from `CLAUDE_CODE_SHELL` (it must be named `bash` or
//! `zsh`). [`prepare`] points it at `<run dir>/nest/bash`, a symlink to coder's own binary
//! in a directory the agent can read but not write; `main` recognises that name in
//! `argv[0]` and calls [`nest_main`], which adds a ruleset granting every filesystem right
//! beneath `/` (the effective rights stay the parent domain's: domains intersect) and
//! execs the real bash with the same arguments. The shell itself is the wrapper, so no
//! shell code (not even a login shell's startup files) runs in the CLI's domain.
//!
//! The nested domain grants writes beneath the agent's writable roots only, the tool
//! commands' own `TMPDIR` in place of the CLI's scratch directory that holds it
//! ([`WRITE_VAR`]): the CLI (2.1.330) keeps in `$CLAUDE_CODE_TMPDIR/claude-<uid>/` what it
//! reads back or runs (task outputs, its snapshot git dirs, bundled skills, hook
//! templates) and binds its messaging socket in `$XDG_RUNTIME_DIR/cc-socks/`; its own
//! sandbox denies tool commands writes to exactly those names, and so does this domain.
//!
//! `CLAUDE_CODE_SHELL_PREFIX` was the first choice and was measured worse: with it the CLI
//! starts a *login* `bash -c -l` in its own domain before the prefix (startup files run
//! un-nested, and their output lands in every tool result), and MCP servers are spawned
//! with the prefix string as their executable.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access as _, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus,
};

use super::{Policy, SandboxError};

/// The directory (in the run's directory) holding the wrapper, and the wrapper's name.
pub const NEST_DIR: &str = "nest";
pub const NEST_NAME: &str = "bash";
/// The CLI's variable naming its shell.
pub const SHELL_VAR: &str = "CLAUDE_CODE_SHELL";
/// The variable (in the CLI's environment, which tool commands cannot change) listing,
/// as a JSON array of absolute paths, where the nested domain may write.
pub const WRITE_VAR: &str = "CODER_NEST_WRITE";

/// Whether `argv0` selects the nesting wrapper (`.../nest/bash`).
pub fn is_nest_invocation(argv0: &OsStr) -> bool {
    let path = Path::new(argv0);
    path.file_name() == Some(OsStr::new(NEST_NAME))
        && path.parent().and_then(Path::file_name) == Some(OsStr::new(NEST_DIR))
}

/// Make the agent's tool commands nested: a `nest/bash` link to coder's binary in the
/// run's directory, readable (not writable) by the agent, and the CLI's shell variable
/// pointing at it.
pub fn prepare(policy: &mut Policy) -> Result<(), SandboxError> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| SandboxError::io("locate coder's executable", e))?;
    let dir = policy.run_dir.join(NEST_DIR);
    std::fs::create_dir_all(&dir)
        .map_err(|e| SandboxError::io(format!("create {}", dir.display()), e))?;
    let link = dir.join(NEST_NAME);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&exe, &link)
        .map_err(|e| SandboxError::io(format!("create {}", link.display()), e))?;
    let Some(text) = link.to_str().map(str::to_owned) else {
        return Err(SandboxError::Path {
            what: super::PathRole::RunDirectory,
            path: dir,
            reason: "is not UTF-8, which the CLI's shell variable cannot carry; set \
                     CODER_STATE_DIR to a plain path"
                .to_string(),
        });
    };
    policy.grant_own_read(&dir)?;
    policy.grant_read(&exe)?;
    policy.env_set.insert(SHELL_VAR.to_string(), text);
    let roots = serde_json::to_string(&write_roots(policy))
        .map_err(|e| SandboxError::io("list the tool commands' writable roots", e.into()))?;
    policy.env_set.insert(WRITE_VAR.to_string(), roots);
    Ok(())
}

/// Where tool commands may write: every root the agent may write (or write a device of)
/// and the plan file, the tool commands' own `TMPDIR` in place of the run's scratch
/// directory (the CLI's `CLAUDE_CODE_TMPDIR` and `XDG_RUNTIME_DIR`), and a private
/// `/dev/shm` when the helper makes one. A root holding the scratch directory is left out:
/// a grant beneath it would hold the CLI's names too.
fn write_roots(policy: &Policy) -> Vec<String> {
    let scratch = &policy.tmp_dir;
    let mut roots: Vec<PathBuf> = policy
        .roots
        .iter()
        .filter(|r| r.access != super::Access::Read && r.path != *scratch)
        .map(|r| r.path.clone())
        .chain(policy.plan_file.as_ref().map(|p| p.path.clone()))
        .chain([policy.tools_tmp_dir(), policy.private_shm().to_path_buf()])
        .filter(|p| !scratch.starts_with(p) || p == &policy.tools_tmp_dir())
        .collect();
    roots.sort();
    roots.dedup();
    roots
        .iter()
        .filter_map(|p| p.to_str().map(str::to_owned))
        .collect()
}

/// Entry point of `.../nest/bash ARGS...`: enter a nested Landlock domain, then exec the
/// real bash with the same arguments. Only returns by exiting; refuses to run anything
/// when the domain cannot be had.
pub fn nest_main(args: &[OsString]) -> ! {
    let cwd_file = cli_cwd_file(args).and_then(|p| open_cwd_file(&p));
    if let Err(e) = enter_nested_domain(cwd_file) {
        eprintln!("coder: refusing to start the tool's shell: {e}");
        std::process::exit(126);
    }
    let shell = real_bash();
    let argv: Result<Vec<CString>, _> = std::iter::once(CString::new("bash"))
        .chain(args[1..].iter().map(|a| CString::new(a.as_bytes())))
        .collect();
    let Ok(argv) = argv else {
        eprintln!("coder: an argument of the tool's shell contains a NUL byte");
        std::process::exit(126);
    };
    let Ok(program) = CString::new(shell.as_os_str().as_bytes()) else {
        std::process::exit(127);
    };
    if let Err(e) = super::sys::restore_default_sigpipe() {
        eprintln!(
            "coder: cannot restore SIGPIPE for the tool's shell: {}",
            e.desc()
        );
        std::process::exit(126);
    }
    let err = match nix::unistd::execv(&program, &argv) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    eprintln!("coder: cannot execute {}: {}", shell.display(), err.desc());
    std::process::exit(127)
}

/// A Landlock domain nested in the current one: reading, listing, executing and device
/// `ioctl`s beneath `/`, every right beneath the roots [`WRITE_VAR`] lists (the effective
/// rights are the parent domain's less writes elsewhere: domains intersect). A root that
/// is absent, or reached through a symlink (the agent may have replaced one nested in
/// another root), is left out.
fn enter_nested_domain(cwd_file: Option<std::os::fd::OwnedFd>) -> Result<(), String> {
    let abi = ABI::V7;
    let all = AccessFs::from_all(abi);
    let listed = std::env::var(WRITE_VAR)
        .map_err(|_| format!("{WRITE_VAR} is not set: where tool commands may write is unknown"))?;
    let writable: Vec<PathBuf> = serde_json::from_str(&listed)
        .map_err(|e| format!("{WRITE_VAR} is not a list of paths: {e}"))?;
    let root = PathFd::new("/").map_err(|e| e.to_string())?;
    let read = AccessFs::from_read(abi) | AccessFs::IoctlDev;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| e.to_string())?
        .create()
        .map_err(|e| e.to_string())?
        .add_rule(PathBeneath::new(root, read))
        .map_err(|e| e.to_string())?;
    for path in &writable {
        let Some((fd, is_dir)) = open_no_symlinks(path) else {
            continue;
        };
        let access = if is_dir {
            all
        } else {
            all & AccessFs::from_file(abi)
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| e.to_string())?;
    }
    if let Some(fd) = cwd_file {
        ruleset = ruleset
            .add_rule(PathBeneath::new(
                fd,
                AccessFs::WriteFile | AccessFs::Truncate,
            ))
            .map_err(|e| e.to_string())?;
    }
    let status = ruleset.restrict_self().map_err(|e| e.to_string())?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enforced on this kernel".to_string());
    }
    Ok(())
}

/// The file the CLI's command line ends by writing its working directory to
/// (2.1.330: `… && pwd -P >| $CLAUDE_CODE_TMPDIR/claude-<hex>-cwd`), which lies beside
/// the CLI's own `claude-<uid>/` where tool commands may not write: the one name of that
/// directory this shell may write. `None` unless the line ends so and the name is one.
fn cli_cwd_file(args: &[OsString]) -> Option<PathBuf> {
    let line = args.iter().skip(1).skip_while(|a| *a != "-c").nth(1)?;
    let line = line.to_str()?;
    let (_, quoted) = line.rsplit_once(" && pwd -P >| ")?;
    let path = match quoted.strip_prefix('\'').and_then(|q| q.strip_suffix('\'')) {
        Some(inner) if !inner.contains('\'') => inner,
        Some(_) => return None,
        None if quoted
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b)) =>
        {
            quoted
        }
        None => return None,
    };
    let path = PathBuf::from(path);
    let name = path.file_name()?.to_str()?;
    let id = name.strip_prefix("claude-")?.strip_suffix("-cwd")?;
    let scratch = std::env::var_os("CLAUDE_CODE_TMPDIR")?;
    (!id.is_empty()
        && id.len() <= 16
        && id.bytes().all(|b| b.is_ascii_hexdigit())
        && path.parent() == Some(Path::new(&scratch)))
    .then_some(path)
}

/// The CLI's working-directory file, made (empty, never a symlink followed) and opened
/// for the nested domain's one rule on it.
fn open_cwd_file(path: &Path) -> Option<std::os::fd::OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()
        .map(std::os::fd::OwnedFd::from)
}

/// `path` opened `O_PATH`, one component at a time from `/` without following a symlink
/// (`openat2` is refused in the sandbox), and whether it is a directory. `None` when it
/// is absent, relative, holds `..`, or a symlink is on its way.
fn open_no_symlinks(path: &Path) -> Option<(std::os::fd::OwnedFd, bool)> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    use std::path::Component;
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut comps = path.components();
    if comps.next() != Some(Component::RootDir) {
        return None;
    }
    let mut fd = openat(
        nix::fcntl::AT_FDCWD,
        "/",
        flags | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .ok()?;
    for comp in comps {
        let Component::Normal(name) = comp else {
            return None;
        };
        fd = openat(&fd, name, flags, Mode::empty()).ok()?;
    }
    let st = nix::sys::stat::fstat(&fd).ok()?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFLNK => None,
        libc::S_IFDIR => Some((fd, true)),
        _ => Some((fd, false)),
    }
}

/// The system's bash (the wrapper stands in for it, so it must be bash).
fn real_bash() -> PathBuf {
    ["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

/// Drops every filesystem and network right and scopes signals and abstract sockets to
/// the calling process's own domain: what is already open (stdin, stdout) keeps working,
/// nothing new can be opened, connected or signalled. For coder's own helpers that run in
/// the CLI's domain and need nothing but their pipes (the `ask_user` server, DESIGN §9).
/// Best effort on kernels without Landlock: `Err` says why it could not be had.
pub fn drop_all_rights() -> Result<(), String> {
    use landlock::{AccessNet, Scope};
    let abi = ABI::V7;
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| e.to_string())?
        .handle_access(AccessNet::from_all(abi))
        .map_err(|e| e.to_string())?
        .scope(Scope::from_all(abi))
        .map_err(|e| e.to_string())?
        .create()
        .map_err(|e| e.to_string())?
        .restrict_self()
        .map_err(|e| e.to_string())?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enforced on this kernel".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_its_name_only() {
        assert!(is_nest_invocation(OsStr::new("/run/x/nest/bash")));
        assert!(!is_nest_invocation(OsStr::new("/bin/bash")));
        assert!(!is_nest_invocation(OsStr::new("bash")));
        assert!(!is_nest_invocation(OsStr::new("/usr/bin/coder")));
    }
}
