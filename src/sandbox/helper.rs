//! The helper process: to start a confined child, coder re-executes itself as
//! `coder __exec-helper SPEC FD [NET_FD]`, which becomes the child. Between fork and `execve` of the
//! real program it runs as an ordinary, single-threaded process, which is the only safe
//! place to change process-wide state:
//! a new session (so the whole tree shares one process group the supervisor can signal),
//! the parent-death signal (so the child dies with coder even if coder is SIGKILLed),
//! closing every inherited descriptor, and the sandbox ([`super::confine`], last, so that
//! the steps before it still have the whole filesystem).
//!
//! `SPEC` is the JSON [`HelperSpec`] itself, `@PATH` of a file holding it (a spec too large
//! for an argument), or `&N`: read it from the inherited pipe `N` until it closes. The
//! last is how the first attempt's helper is started before its spec is known, for a
//! confined child, so that its own start overlaps with the parent resolving the policy;
//! such a spec carries the program's environment and working directory too. Such a
//! helper also does, while it waits, what confinement needs nothing of the policy for:
//! its process setup and the sandbox's namespaces with their init
//! ([`super::confine::prepare`]); the spec is then read in init, and its policy applied
//! whole before anything is exec'd.
//!
//! Failures before `execve` are reported to the parent as one JSON object on the status
//! descriptor `FD` (made close-on-exec here): an empty status means the program is running,
//! so the parent can tell "claude is missing" from "claude ran and failed" without guessing
//! from exit codes. Without `FD` (the helper started by hand) failures go to stderr.
//!
//! `NET_FD` is one end of a UNIX socket pair whose other end coder keeps: confinement sends
//! the egress proxy's listening socket over it (see `netns`), and coder serves the
//! proxy on it from outside the agent's network namespace. It is close-on-exec here too.
//!
//! The descriptors are inherited under their own numbers rather than moved to fixed ones,
//! because moving it would take code between fork and exec, and that alone makes the
//! standard library fork the whole supervisor instead of spawning with `posix_spawn`
//! (which is about half a millisecond faster per run).

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

/// The first argument that selects the helper entry point.
pub const HELPER_ARG: &str = "__exec-helper";

/// What the helper must exec, serialised by the parent into the helper's argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelperSpec {
    #[serde(with = "super::bytes")]
    pub program: PathBuf,
    /// Arguments after the program name.
    #[serde(with = "super::bytes::os_vec")]
    pub args: Vec<OsString>,
    /// The supervisor's pid: if the helper has already been orphaned, it must not run.
    pub parent_pid: u32,
    /// The confinement to apply right before exec, resolved by the parent. `None` runs the
    /// program unconfined (`danger-full-access`).
    #[serde(default)]
    pub policy: Option<super::Policy>,
    /// The program's environment and working directory, for a helper started before they
    /// were known (see `supervise::spawn::StartedHelper`); otherwise the helper's own.
    #[serde(default, with = "super::bytes::os_pairs")]
    pub env: Option<Vec<(OsString, OsString)>>,
    #[serde(default, with = "super::bytes::option")]
    pub cwd: Option<PathBuf>,
}

/// Which step of the helper failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HelperStage {
    /// The spec could not be read.
    Spec,
    /// Process setup (session, parent-death signal).
    Setup,
    /// Confinement could not be applied.
    Sandbox,
    /// `execve` of the program failed.
    Exec,
}

/// A pre-exec failure, as reported on the status descriptor.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct HelperFailure {
    pub stage: HelperStage,
    /// The OS error number, when the failure was a system call.
    pub errno: Option<i32>,
    pub message: String,
}

/// Entry point of `coder __exec-helper SPEC [FD]`. Only returns by exiting.
pub fn helper_main(args: &[OsString]) -> ! {
    let status_fd = args.get(3).and_then(|fd| inherited_fd(fd.as_bytes()));
    let net_fd = args.get(4).and_then(|fd| inherited_fd(fd.as_bytes()));
    // The phase trace: coder's own file, inherited by the helper started early (`&FD`);
    // no helper opens a trace path itself (see `phases`).
    let early = args.get(2).is_some_and(|a| a.as_bytes().starts_with(b"&"));
    let trace_fd = std::env::var_os(crate::phases::TRACE_FD_VAR)
        .and_then(|fd| inherited_fd(fd.as_bytes()))
        .filter(|fd| early && Some(*fd) != status_fd && Some(*fd) != net_fd);
    crate::phases::inherit(trace_fd.and_then(|fd| adopt_inherited(fd).ok()));
    std::process::exit(main_with(args, status_fd, net_fd, trace_fd))
}

/// The descriptors a helper forked by coder (see `supervise::spawn::fork_early`) gets,
/// under their own numbers: the spec pipe's read end, the status pipe's write end, its end
/// of the network channel. Its stdio are the program's pipes already.
pub struct ForkedFds {
    pub spec: RawFd,
    pub status: RawFd,
    pub net: RawFd,
}

/// The helper in a process coder forked while it was single-threaded, instead of an
/// `execve` of coder's binary: from here on the same steps as the helper started early
/// (`&FD`). Returns the exit code when it could not exec the program; the caller must
/// leave by `_exit`, never return into coder's code.
///
/// Such a process is a copy of coder's memory until the program's `execve`, coder's
/// arguments and environment among it, which the exec'd helper never had (it started with
/// an empty environment and its own five arguments). Its memory is closed to the agent as
/// the exec'd helper's was (Landlock denies a confined process `ptrace` access, and with
/// it `/proc/PID/{mem,environ}`, to any process outside its domain), but
/// `/proc/PID/cmdline` is readable without that check, and init, PID 1 of the agent's
/// namespace, is one of these processes: so before anything else the memory that
/// `cmdline` and `environ` show is overwritten with the exec'd helper's argument list
/// (zeros after it) and zeros, and the environment is emptied.
pub fn forked_main(fds: ForkedFds) -> i32 {
    let args = [
        OsString::from("coder-helper"),
        OsString::from(HELPER_ARG),
        OsString::from(format!("&{}", fds.spec)),
        OsString::from(fds.status.to_string()),
        OsString::from(fds.net.to_string()),
    ];
    scrub_arguments_and_environment(&args);
    let _ = nix::sys::prctl::set_name(c"coder-helper");
    // coder holds SIGINT, SIGTERM and SIGHUP blocked until its run listens for them; an
    // exec'd helper starts with none blocked, and so must the program.
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
    // The trace file is coder's own, open already in this copy of its memory.
    let trace_fd = crate::phases::file().map(|f| f.as_raw_fd());
    main_with(&args, Some(fds.status), Some(fds.net), trace_fd)
}

/// Overwrites what `/proc/self/cmdline` reads (the argument strings the kernel placed at
/// coder's `execve`) with `shown`, NUL-separated, cut to fit, zeros after it; zeros what
/// `/proc/self/environ` reads; empties the environment. Best effort without `/proc`.
fn scrub_arguments_and_environment(shown: &[OsString]) {
    // SAFETY: single-threaded (a fork of a single-threaded coder), nothing holds a
    // pointer into the environment across this call.
    unsafe {
        libc::clearenv();
    }
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // The fields after the command name, which is in parentheses and may hold spaces.
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return;
    };
    let fields: Vec<usize> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // Fields 48 and 49 (arg_start, arg_end), 50 and 51 (env_start, env_end) of proc(5);
    // `fields` starts at field 3.
    let range = |field: usize| {
        let (start, end) = (*fields.get(field - 3)?, *fields.get(field - 2)?);
        (start != 0 && end > start).then_some((start, end - start))
    };
    let mut text: Vec<u8> = Vec::new();
    for arg in shown {
        text.extend_from_slice(arg.as_bytes());
        text.push(0);
    }
    for (range, with) in [(range(48), &text[..]), (range(50), &[][..])] {
        let Some((start, len)) = range else {
            continue;
        };
        let copied = with.len().min(len);
        // SAFETY: [start, start + len) is where the kernel put this process's argument
        // (or environment) strings at its execve: mapped, writable memory of its own stack
        // that nothing reads any more (the environment was just emptied, and neither the
        // helper nor the program it execs reads coder's arguments). `with` is a separate
        // allocation, and at most `len` bytes are written.
        unsafe {
            std::ptr::copy_nonoverlapping(with.as_ptr(), start as *mut u8, copied);
            std::ptr::write_bytes((start + copied) as *mut u8, 0, len - copied);
        }
    }
}

/// The helper once its descriptors are known: runs it, reports a failure on the status
/// descriptor, and returns the exit code that goes with it.
fn main_with(
    args: &[OsString],
    status_fd: Option<RawFd>,
    net_fd: Option<RawFd>,
    trace_fd: Option<RawFd>,
) -> i32 {
    // Its closing at exec is how the parent learns the program started.
    let mut status = status_fd.and_then(|fd| adopt_inherited(fd).ok());
    let net = net_fd.and_then(|fd| adopt_inherited(fd).ok());
    crate::phases::mark("helper.main");
    let failure = match run(args, status_fd, net.as_ref(), trace_fd) {
        Ok(never) => match never {},
        Err(failure) => failure,
    };
    if let Some(file) = status.as_mut()
        && let Ok(json) = serde_json::to_vec(&failure)
    {
        let _ = file.write_all(&json);
    } else {
        eprintln!("coder helper: {}", failure.message);
    }
    match failure.stage {
        HelperStage::Exec => 127,
        HelperStage::Sandbox => 71,
        HelperStage::Spec | HelperStage::Setup => 70,
    }
}

/// The descriptor number written in an argument, if it names one the helper may own
/// (not stdio).
fn inherited_fd(text: &[u8]) -> Option<RawFd> {
    std::str::from_utf8(text)
        .ok()?
        .parse::<RawFd>()
        .ok()
        .filter(|fd| *fd > 2)
}

/// Takes the inherited descriptor `fd` (the status or the spec pipe), made close-on-exec
/// first so that the program does not inherit it; an error when it is not open.
fn adopt_inherited(fd: RawFd) -> std::io::Result<std::fs::File> {
    // SAFETY: fcntl on a plain descriptor number touches no memory; -1 means the
    // descriptor is not open, which is handled.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (fcntl succeeded) and, by the spawn contract, owned by
    // nobody else in this freshly exec'd process.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// A failure at `stage`, with the OS error number when there is one.
fn fail(stage: HelperStage, errno: Option<i32>, message: impl Into<String>) -> HelperFailure {
    HelperFailure {
        stage,
        errno,
        message: message.into(),
    }
}

/// The helper's life: read the spec, tie to the supervisor, enter the sandbox, exec the
/// program. Returns only on failure (in the agent's process, or before it exists).
fn run(
    args: &[OsString],
    status_fd: Option<RawFd>,
    net: Option<&std::fs::File>,
    trace_fd: Option<RawFd>,
) -> Result<std::convert::Infallible, HelperFailure> {
    let spec_text = args
        .get(2)
        .ok_or_else(|| fail(HelperStage::Spec, None, "missing helper spec argument"))?;
    let fds = InheritedFds {
        status: status_fd,
        net: net.map(|f| f.as_raw_fd()),
        trace: trace_fd,
    };
    let Received {
        spec,
        prepared,
        early_parent,
    } = receive_spec(spec_text.as_bytes(), &fds)?;
    detach_from_supervisor(&spec, early_parent, &fds)?;
    // First mark after the descriptors are closed: its file stays open (close-on-exec).
    crate::phases::mark("helper.spec");
    if let Some(cwd) = &spec.cwd {
        nix::unistd::chdir(cwd).map_err(|e| setup_failure("chdir", e))?;
    }
    enter_sandbox(&spec, prepared, net.map(|f| f.as_fd()))?;
    exec_program(&spec)
}

/// The descriptors the helper inherited and keeps (every other one is closed).
struct InheritedFds {
    status: Option<RawFd>,
    net: Option<RawFd>,
    trace: Option<RawFd>,
}

/// The spec as read, with what the early helper did while it waited for it.
struct Received {
    spec: HelperSpec,
    /// The sandbox's namespaces, made before the spec came (`&FD` only).
    prepared: Option<super::confine::Prepared>,
    /// The supervisor's pid as this process saw it when it armed its death signal (`&FD`
    /// only; checked against the spec's).
    early_parent: Option<i32>,
}

/// Read the spec its argument names.
///
/// `&FD`: the helper was started before its spec was known, for a confined child. While
/// coder resolves the policy it does what needs none: its process setup, and the
/// sandbox's namespaces with their init (`confine::prepare`; this then goes on in init).
/// The spec pipe is read to its end after that, and the policy it brings is applied whole
/// before anything is exec'd. `@PATH`: the spec was too large for an argument and waits in
/// a file. Anything else is the spec itself.
fn receive_spec(text: &[u8], fds: &InheritedFds) -> Result<Received, HelperFailure> {
    let unreadable = |e: std::io::Error| {
        fail(
            HelperStage::Spec,
            e.raw_os_error(),
            format!("cannot read the helper spec: {e}"),
        )
    };
    let (bytes, prepared, early_parent) = match text {
        [b'&', fd @ ..] => {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|e| setup_failure("PR_SET_PDEATHSIG", e))?;
            // Checked against the spec's pid once it is read: a parent that died before
            // the signal was armed never sends one.
            let parent = nix::unistd::getppid().as_raw();
            nix::unistd::setsid().map_err(|e| setup_failure("setsid", e))?;
            let spec_fd = inherited_fd(fd);
            close_inherited_fds(&[fds.status, fds.net, spec_fd, fds.trace]);
            let prepared = super::confine::prepare().map_err(sandbox_failure)?;
            crate::phases::mark("helper.prepared");
            let bytes = read_spec_pipe(fd).map_err(unreadable)?;
            (bytes, Some(prepared), Some(parent))
        }
        [b'@', path @ ..] => (
            std::fs::read(std::ffi::OsStr::from_bytes(path)).map_err(unreadable)?,
            None,
            None,
        ),
        text => (text.to_vec(), None, None),
    };
    let spec: HelperSpec = serde_json::from_slice(&bytes)
        .map_err(|e| fail(HelperStage::Spec, None, format!("bad helper spec: {e}")))?;
    Ok(Received {
        spec,
        prepared,
        early_parent,
    })
}

/// Tie this process to the supervisor the spec names: killed when it dies, in a session
/// of its own, holding no descriptor but its own. The early helper did this before it read
/// the spec and only checks that its parent then was the spec's.
fn detach_from_supervisor(
    spec: &HelperSpec,
    early_parent: Option<i32>,
    fds: &InheritedFds,
) -> Result<(), HelperFailure> {
    let gone = || {
        fail(
            HelperStage::Setup,
            None,
            "the supervisor exited before the child started",
        )
    };
    match early_parent {
        Some(parent) if u32::try_from(parent).ok() != Some(spec.parent_pid) => Err(gone()),
        Some(_) => Ok(()),
        None => {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|e| setup_failure("PR_SET_PDEATHSIG", e))?;
            // The parent may have died before the death signal was armed.
            if nix::unistd::getppid().as_raw() as u32 != spec.parent_pid {
                return Err(gone());
            }
            nix::unistd::setsid().map_err(|e| setup_failure("setsid", e))?;
            close_inherited_fds(&[fds.status, fds.net]);
            Ok(())
        }
    }
}

/// Confine this process by the spec's policy, if it has one.
///
/// Returns in the agent's process only (PID 2 of a new PID namespace); this process (or,
/// prepared, the helper's first one) stays outside as its waiter. Entering the namespaces
/// re-arms the parent-death signal the user namespace clears and checks the supervisor is
/// still there.
fn enter_sandbox(
    spec: &HelperSpec,
    prepared: Option<super::confine::Prepared>,
    net: Option<std::os::fd::BorrowedFd<'_>>,
) -> Result<(), HelperFailure> {
    match (&spec.policy, prepared) {
        (Some(policy), Some(prepared)) => {
            super::confine::confine_prepared(prepared, policy, net).map_err(sandbox_failure)?;
            crate::phases::mark("sandbox.confined");
        }
        (Some(policy), None) => {
            super::confine(policy, net).map_err(sandbox_failure)?;
            crate::phases::mark("sandbox.confined");
        }
        (None, Some(_)) => return Err(sandbox_failure(super::SandboxError::PreparedUnconfined)),
        (None, None) => {}
    }
    Ok(())
}

/// Exec the spec's program with its arguments and environment (this process's own when
/// the spec has none); returns only on failure.
fn exec_program(spec: &HelperSpec) -> Result<std::convert::Infallible, HelperFailure> {
    let program = CString::new(spec.program.as_os_str().as_bytes())
        .map_err(|_| fail(HelperStage::Exec, None, "program path contains a NUL byte"))?;
    let mut argv = vec![program.clone()];
    for arg in &spec.args {
        argv.push(
            CString::new(arg.as_bytes())
                .map_err(|_| fail(HelperStage::Exec, None, "an argument contains a NUL byte"))?,
        );
    }
    super::sys::restore_default_sigpipe()
        .map_err(|e| fail(HelperStage::Exec, Some(e as i32), "cannot restore SIGPIPE"))?;
    let env = match &spec.env {
        Some(env) => Some(
            env.iter()
                .map(|(key, value)| {
                    let mut entry = key.clone();
                    entry.push("=");
                    entry.push(value);
                    CString::new(entry.into_vec())
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| fail(HelperStage::Exec, None, "the environment has a NUL byte"))?,
        ),
        None => None,
    };
    // Last mark before the program: what follows until coder's `child.spawned` is the
    // exec itself and coder noticing it.
    crate::phases::mark("helper.exec");
    let exec = match &env {
        Some(env) => nix::unistd::execve(&program, &argv, env),
        None => nix::unistd::execv(&program, &argv),
    };
    let err = match exec {
        Ok(never) => match never {},
        Err(e) => e,
    };
    Err(fail(
        HelperStage::Exec,
        Some(err as i32),
        crate::text::path::exec_failure(
            &spec.program,
            err.desc(),
            err == nix::errno::Errno::ENOENT,
        ),
    ))
}

/// A system call of the helper's own setup failed.
fn setup_failure(what: &str, e: nix::Error) -> HelperFailure {
    fail(HelperStage::Setup, Some(e as i32), format!("{what}: {e}"))
}

/// The sandbox could not be set up (or, the supervisor gone meanwhile, need not be).
fn sandbox_failure(e: super::SandboxError) -> HelperFailure {
    match e {
        super::SandboxError::ParentGone => fail(HelperStage::Setup, None, e.to_string()),
        e => fail(HelperStage::Sandbox, None, e.to_string()),
    }
}

/// Reads the spec from the inherited pipe `fd` (its number, as text) to its end.
fn read_spec_pipe(fd: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let fd = inherited_fd(fd).ok_or_else(|| std::io::Error::other("not a descriptor number"))?;
    let mut pipe = adopt_inherited(fd)?;
    let mut spec = Vec::new();
    pipe.read_to_end(&mut spec)?;
    Ok(spec)
}

/// Closes every descriptor but stdio and `keep` (the status, network, spec and trace
/// descriptors), so
/// nothing coder had open (sockets of an in-process server, other pipes) leaks into the
/// agent.
fn close_inherited_fds(keep: &[Option<RawFd>]) {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2 && !keep.contains(&Some(*fd)))
        .collect();
    for fd in fds {
        // The read_dir handle's own descriptor is closed already or fails with EBADF.
        let _ = nix::unistd::close(fd);
    }
}
