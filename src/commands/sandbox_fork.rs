//! `coder sandbox` for a confined mode: fork, confine and exec the command in the child,
//! serve the egress proxy and wait in the parent; and the exec both modes end with (see the module docs of
//! [`super::sandbox`] for why, and for the exit-status and signal rules).

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use crate::sandbox::proxy::Egress;
use crate::sandbox::{Policy, PolicyOptions, SandboxError, confine};
use crate::supervise::signals::is_ignored;

/// Exit code when the sandbox cannot be set up (the run mode's `sandbox_error`).
pub(super) const EXIT_SANDBOX_ERROR: u8 = 71;
pub(super) const EXIT_NOT_FOUND: u8 = 127;
pub(super) const EXIT_NOT_EXECUTABLE: u8 = 126;

/// Signals another process may send the parent, passed on to the command.
const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// `si_code` of a signal the kernel generated (the terminal's `^C`, `^\`, hang-up): it
/// went to the whole foreground process group, the command included.
const SI_KERNEL: i32 = 0x80;

/// The signals `coder sandbox` holds from before its policy makes anything until the
/// command is forked: those it forwards, and `SIGCHLD`. Arriving while the policy is
/// resolved (its run directory and placeholders made, the placeholder registry awaited),
/// such a signal would end the process before it removed them, and placeholders not yet
/// registered would stay in the workspace for good (a `.git` symlink that fails `git
/// init`); held, it ends the process once they are gone.
pub(super) struct HeldSignals {
    mask: SigSet,
    old: SigSet,
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.old), None);
    }
}

impl HeldSignals {
    pub(super) fn hold() -> Result<HeldSignals, SandboxError> {
        let mut mask = SigSet::empty();
        for signal in FORWARDED {
            mask.add(signal);
        }
        mask.add(Signal::SIGCHLD);
        let mut old = SigSet::empty();
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), Some(&mut old))
            .map_err(|e| SandboxError::sys("sigprocmask", "block", e))?;
        Ok(HeldSignals { mask, old })
    }

    /// Lets the held signals in again: one that arrived meanwhile ends the process now,
    /// as it would have then (the caller has cleaned up). Dropping them does the same
    /// (a policy that fails has removed what it made before it returns).
    pub(super) fn release(self) {
        drop(self);
    }

    /// Keeps them held for the rest of the process (the parent, once the command ran:
    /// its exit status is the command's, whatever arrives after).
    fn keep(self) {
        std::mem::forget(self);
    }

    /// Resolves the policy for `opts`, stopping its setup scan when a forwarded signal
    /// arrives meanwhile ([`crate::sandbox::SetupCancel`]): a thread of its own waits for
    /// one without taking it, so that it stays pending and ends the process, as held
    /// ones do, once the policy has removed what it made (`Err(Cancelled)` drops `self`).
    /// The scan of a workspace an earlier agent filled with big scripts took minutes, and
    /// a `SIGTERM` waited for its end.
    pub(super) fn resolve(&self, opts: &PolicyOptions) -> Result<Policy, SandboxError> {
        let mut forwarded = SigSet::empty();
        for signal in FORWARDED.into_iter().filter(|s| !is_ignored(*s)) {
            forwarded.add(signal);
        }
        let (Ok(signals), Ok((stop_read, stop_write))) = (
            SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK),
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC),
        ) else {
            return Policy::resolve(opts);
        };
        let cancel = opts.cancel.clone();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
                let mut fds = [
                    PollFd::new(signals.as_fd(), PollFlags::POLLIN),
                    PollFd::new(stop_read.as_fd(), PollFlags::POLLIN),
                ];
                loop {
                    match poll(&mut fds, PollTimeout::NONE) {
                        Err(Errno::EINTR) => continue,
                        Err(_) => return,
                        Ok(_) => break,
                    }
                }
                // Which signal is not read here: it stays pending and ends the process.
                if fds[0]
                    .revents()
                    .is_some_and(|r| r.contains(PollFlags::POLLIN))
                {
                    cancel.cancel(libc::SIGTERM);
                }
            });
            let resolved = Policy::resolve(opts);
            // Ends the waiting thread (a closed pipe reads as ready).
            drop(stop_write);
            resolved
        })
    }

    /// A forwarded signal that arrived while held (taken), if any.
    fn arrived(&self) -> Option<Signal> {
        let mut forwarded = SigSet::empty();
        for signal in FORWARDED {
            forwarded.add(signal);
        }
        let fd = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .ok()?;
        // Held, a signal the caller ignores (`nohup`'s SIGHUP) is kept pending too.
        while let Ok(Some(info)) = fd.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(signal) if !is_ignored(signal) => return Some(signal),
                _ => {}
            }
        }
        None
    }
}

/// Runs `program` confined by `policy` in a forked child; returns its exit status.
/// `held` are the signals held since before the policy was resolved.
pub(super) fn run_forked(
    policy: Policy,
    program: &OsString,
    args: &[OsString],
    env: Vec<(OsString, OsString)>,
    held: HeldSignals,
) -> Result<ExitCode, SandboxError> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let channel = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| SandboxError::sys("socketpair", "proxy channel", e));
    let (ours, theirs) = match channel {
        Ok(pair) => pair,
        Err(e) => {
            policy.cleanup();
            held.release();
            return Err(e);
        }
    };
    // Stopped before the command starts: it ends as the command would have.
    if let Some(signal) = held.arrived() {
        policy.cleanup();
        die_of(signal);
        held.release();
        return Ok(ExitCode::from(
            u8::try_from(128 + signal as i32).unwrap_or(255),
        ));
    }
    let parent = nix::unistd::getpid();
    // SAFETY: `coder sandbox` is dispatched before anything starts a thread of its own; the
    // only threads resolving the policy may leave running are the scan's watch closers,
    // which close one descriptor and end. The child takes none of the locks they take
    // (it starts no thread and leaves by `exit_forked`, not the runtime's exit path), so
    // it may run ordinary code after the fork.
    match unsafe { nix::unistd::fork() } {
        Err(e) => {
            policy.cleanup();
            held.release();
            Err(SandboxError::sys("fork", "coder sandbox", e))
        }
        Ok(ForkResult::Child) => {
            drop(ours);
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&held.old), None);
            crate::sandbox::exit_forked(child_main(&policy, theirs, parent, program, args, env))
        }
        Ok(ForkResult::Parent { child }) => {
            drop(theirs);
            // Unconfined, the command has the host's network and needs no proxy.
            if policy.mode.is_confined() {
                start_proxy(Egress::new(policy.network.allow.clone()), ours);
            }
            // Earlier runs' placeholder trash goes while the command runs.
            let pruner = crate::config::state_dir()
                .ok()
                .map(|dir| crate::sandbox::TrashPruner::start(&dir));
            let status = wait_forwarding(child, &held.mask);
            drop(pruner);
            held.keep();
            crate::phases::mark("sandbox.exited");
            // The command's PID namespace is gone: no process of it can still write.
            let guard = crate::sandbox::guard_git_after_run(&policy);
            for line in guard.lines() {
                say(&line);
            }
            crate::phases::mark("sandbox.guarded");
            policy.cleanup();
            crate::phases::mark("sandbox.cleaned");
            if guard.incomplete.is_some() {
                return Ok(ExitCode::from(EXIT_SANDBOX_ERROR));
            }
            Ok(status.into_exit_code())
        }
    }
}

/// The child: confine (which hands the proxy's listener up `channel`), then exec.
fn child_main(
    policy: &Policy,
    channel: OwnedFd,
    parent: Pid,
    program: &OsString,
    args: &[OsString],
    env: Vec<(OsString, OsString)>,
) -> i32 {
    // The message may name a path the sandboxed command chose (a mask that moved): made
    // safe for the terminal as every line `say` prints.
    let sandbox_error = |message: String| {
        eprintln!(
            "coder sandbox: {}",
            crate::text::terminal_safe(&one_line(&message))
        );
        i32::from(EXIT_SANDBOX_ERROR)
    };
    if let Err(e) = arm_death_signal(parent) {
        return sandbox_error(e);
    }
    if let Err(e) = confine(policy, Some(channel.as_fd())) {
        return sandbox_error(e.to_string());
    }
    drop(channel);
    crate::phases::mark("sandbox.confined");
    // Confined, this is now the agent (PID 2 of its own PID namespace), whose parent is the
    // namespace's init: `confine` re-armed the death signals along that chain.
    i32::from(exec_command(program, args, env))
}

/// The command dies with the proxy's process: without it, it has no network anyway, and
/// it must not outlive the `coder sandbox` that the caller waits for.
fn arm_death_signal(parent: Pid) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if nix::unistd::getppid() != parent {
        return Err("coder sandbox exited before the command started".to_string());
    }
    Ok(())
}

/// Serves the proxy on a runtime of its own in a second thread (it inherits the blocked
/// signals, so they all reach the main thread's signalfd).
fn start_proxy(egress: Egress, channel: OwnedFd) {
    let started = std::thread::Builder::new()
        .name("coder-proxy".to_string())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime {
                Ok(runtime) => runtime.block_on(egress.serve_channel(channel)),
                Err(e) => eprintln!("coder sandbox: cannot start the egress proxy: {e}"),
            }
        });
    if let Err(e) = started {
        // The command then has no network at all: closed, not open.
        eprintln!("coder sandbox: cannot start the egress proxy: {e}");
    }
}

/// Passes `signal` to every process below this one. The direct child is the sandbox's
/// outer waiter, which ignores termination signals (it ends as the command does), and the
/// namespace's init takes none from outside: the command, and whatever it started, must
/// get the signal themselves.
fn forward(signal: Signal) {
    for pid in crate::supervise::tree::live_descendants() {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
    }
}

/// How the command ended.
enum Ended {
    Exited(i32),
    Signaled(Signal),
    /// coder lost track of it (cannot happen unless something else reaped it).
    Lost,
}

impl Ended {
    fn into_exit_code(self) -> ExitCode {
        match self {
            Ended::Exited(code) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
            Ended::Signaled(signal) => {
                die_of(signal);
                ExitCode::from(u8::try_from(128 + signal as i32).unwrap_or(255))
            }
            Ended::Lost => ExitCode::from(70),
        }
    }
}

/// Waits for `child`, forwarding the signals other processes send to this one.
fn wait_forwarding(child: Pid, mask: &SigSet) -> Ended {
    let mut signals = SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC).ok();
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return Ended::Exited(code),
            Ok(WaitStatus::Signaled(_, signal, _)) => return Ended::Signaled(signal),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return Ended::Lost,
        }
        let Some(fd) = signals.as_mut() else {
            // No signalfd: a plain blocking wait, without forwarding.
            return match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, code)) => Ended::Exited(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => Ended::Signaled(signal),
                _ => Ended::Lost,
            };
        };
        let Ok(Some(info)) = fd.read_signal() else {
            continue;
        };
        let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
            continue;
        };
        if signal != Signal::SIGCHLD && info.ssi_code != SI_KERNEL {
            forward(signal);
        }
    }
}

/// Ends this process with `signal`, as the command ended, when that signal terminates
/// without a core dump; returns otherwise (the caller then exits 128+N).
fn die_of(signal: Signal) {
    use nix::sys::signal::{SigHandler, signal as set_handler};
    let terminates = matches!(
        signal,
        Signal::SIGTERM
            | Signal::SIGHUP
            | Signal::SIGINT
            | Signal::SIGKILL
            | Signal::SIGPIPE
            | Signal::SIGUSR1
            | Signal::SIGUSR2
            | Signal::SIGALRM
    );
    if !terminates {
        return;
    }
    // SAFETY: installs the default disposition (no handler code) right before raising.
    let _ = unsafe { set_handler(signal, SigHandler::SigDfl) };
    let mut only = SigSet::empty();
    only.add(signal);
    let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
    let _ = nix::sys::signal::raise(signal);
}

/// Replaces this process with the command; returns the exit code to use when that fails.
fn exec_command(program: &OsString, args: &[OsString], env: Vec<(OsString, OsString)>) -> u8 {
    let err = std::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .exec();
    eprintln!("coder sandbox: {}: {err}", program.to_string_lossy());
    match err.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        _ => EXIT_NOT_EXECUTABLE,
    }
}

pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Prints `line` on stderr as `coder sandbox: LINE`, redacted like everything coder prints
/// (the credentials of this process's environment, token shapes): a git guard's line names
/// paths the sandboxed command chose, an error may quote what the caller gave.
pub(super) fn say(line: &str) {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let secrets = crate::text::Secrets::new(crate::text::names::secret_values(&env));
    // The guard's lines name paths the sandboxed command chose.
    let line = secrets.redact(line);
    eprintln!("coder sandbox: {}", crate::text::terminal_safe(&line));
}
