//! The process model of a confined child: a PID namespace whose init is a tiny coder
//! process, so that the agent's whole tree dies with it and `/proc` shows only the
//! sandbox's own processes.
//!
//! `unshare(CLONE_NEWPID)` moves only the *children* of the caller into the new namespace,
//! so [`super::confine`] forks twice:
//!
//! ```text
//! supervisor (coder, subreaper)
//! └─ outer   the helper (or `coder sandbox`): the pid the supervisor spawned; waits
//!    │       and exits with the agent's status (or dies by its signal)
//!    └─ init PID 1 of the new namespace: builds the private root, forks the agent,
//!       │    drops its capabilities, reaps every orphan, exits when the agent does
//!       └─ agent PID 2: drops capabilities, Landlock, seccomp, execve
//! ```
//!
//! Why an init and not the agent as PID 1: PID 1 ignores every signal it has no handler
//! for, so a child without a SIGTERM handler could no longer be stopped gracefully, and
//! orphans re-parented to it would stay zombies. The agent instead keeps ordinary signal
//! semantics; the supervisor's SIGTERM reaches it directly (same process group, and by
//! pid through its `/proc` walk, where host pids are visible).
//!
//! Lifetimes: the outer process ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT so that a
//! graceful stop ends with the agent's own status; SIGKILL of it (or of coder, through the
//! parent-death signal the helper arms) kills init through *its* parent-death signal, and
//! the kernel kills every process of a namespace whose init has died. When the agent
//! exits, init exits too, and with it every tool process still running: nothing the agent
//! started can outlive it (issue 15).
//!
//! The outer process and init hold no descriptor the agent uses: their stdio goes to
//! `/dev/null` and everything else is closed, so end-of-file on the agent's pipes and on
//! the helper's status pipe means what it meant before.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::signal::{SigHandler, Signal, signal};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use super::{SandboxError, sys};

/// The parent-death signal state before confinement, to restore after the user namespace
/// (a credential change clears it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParentDeath {
    signal: Option<Signal>,
    parent: Pid,
}

impl ParentDeath {
    pub(crate) fn record() -> ParentDeath {
        ParentDeath {
            signal: nix::sys::prctl::get_pdeathsig().ok().flatten(),
            parent: nix::unistd::getppid(),
        }
    }

    /// Arms the recorded signal again and checks that the parent is still the same
    /// process (it may have died while the signal was not armed).
    pub(crate) fn restore(&self) -> Result<(), SandboxError> {
        let Some(sig) = self.signal else {
            return Ok(());
        };
        nix::sys::prctl::set_pdeathsig(sig)
            .map_err(|e| SandboxError::sys("PR_SET_PDEATHSIG", "self", e))?;
        if nix::unistd::getppid() != self.parent {
            return Err(SandboxError::ParentGone);
        }
        Ok(())
    }
}

/// What init keeps to report the agent's status to the outer process.
pub(crate) struct InitLink {
    status: OwnedFd,
}

/// Fork the namespace's init. Returns in init (PID 1); the calling process becomes the
/// outer waiter and never returns.
pub(crate) fn fork_init() -> Result<InitLink, SandboxError> {
    let pipe = |what| {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| SandboxError::sys("pipe", what, e))
    };
    let (status_read, status_write) = pipe("status")?;
    let (alive_read, alive_write) = pipe("alive")?;
    // SAFETY: confine() checked that this process is single-threaded, so the child may
    // run any code.
    match unsafe { nix::unistd::fork() }.map_err(|e| SandboxError::sys("fork", "init", e))? {
        ForkResult::Parent { child } => {
            drop((status_write, alive_read));
            outer_wait(child, status_read, alive_write)
        }
        ForkResult::Child => {
            drop((status_read, alive_write));
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|e| SandboxError::sys("PR_SET_PDEATHSIG", "init", e))?;
            // Init's memory is a copy of its forebear's until the agent's execve: coder's
            // own (its environment, its heap) when coder forked the helper, `coder
            // sandbox`'s (the caller's credentials, which its command never gets). The
            // agent may raise init's core limit (`prlimit` needs no ptrace right), so init
            // must dump no core. Not earlier: a process not dumpable cannot write its own
            // `uid_map`. The agent, forked from here, is dumpable again after its execve.
            nix::sys::prctl::set_dumpable(false)
                .map_err(|e| SandboxError::sys("PR_SET_DUMPABLE", "init", e))?;
            // The outer process may have died before the signal was armed: its end of the
            // pipe is then closed.
            let mut fds = [nix::poll::PollFd::new(
                alive_read.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO)
                .map_err(|e| SandboxError::sys("poll", "alive", e))?;
            if ready > 0 {
                return Err(SandboxError::ParentGone);
            }
            Ok(InitLink {
                status: status_write,
            })
        }
    }
}

/// Fork the agent from init. Returns in the agent; init reaps until the agent is gone,
/// then exits, and never returns.
pub(crate) fn fork_agent(link: InitLink) -> Result<(), SandboxError> {
    // SAFETY: single-threaded (see fork_init).
    match unsafe { nix::unistd::fork() }.map_err(|e| SandboxError::sys("fork", "agent", e))? {
        ForkResult::Parent { child } => init_wait(child, link),
        ForkResult::Child => {
            drop(link);
            Ok(())
        }
    }
}

/// Init's life after the fork: no capabilities, no descriptors, reap everything, and
/// report the agent's raw wait status when it ends.
fn init_wait(agent: Pid, link: InitLink) -> ! {
    let _ = sys::drop_capabilities();
    quiet_descriptors(&[link.status.as_raw_fd()]);
    let mut status: Option<i32> = None;
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(ws) if ws.pid() == Some(agent) => {
                status = raw_status(ws);
                break;
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => break,
        }
    }
    if let Some(raw) = status {
        let _ = nix::unistd::write(link.status.as_fd(), &raw.to_ne_bytes());
    }
    // The rest of the namespace is killed by the kernel as init exits.
    // SAFETY: _exit ends the process without running destructors (none matter here).
    unsafe { libc::_exit(0) }
}

/// The outer process: wait for init and end the same way the agent did.
fn outer_wait(init: Pid, status_read: OwnedFd, alive: OwnedFd) -> ! {
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        // SAFETY: SIG_IGN runs no handler code.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
    quiet_descriptors(&[status_read.as_raw_fd(), alive.as_raw_fd()]);
    let init_status = loop {
        match waitpid(init, None) {
            Err(Errno::EINTR) => {}
            Ok(ws) => break raw_status(ws),
            Err(_) => break None,
        }
    };
    let mut bytes = [0u8; 4];
    let agent_status = match nix::unistd::read(status_read.as_fd(), &mut bytes) {
        Ok(4) => Some(i32::from_ne_bytes(bytes)),
        _ => None,
    };
    mirror(agent_status.or(init_status).unwrap_or(libc::SIGKILL))
}

/// A wait status as the raw number `waitpid(2)` fills in.
fn raw_status(ws: WaitStatus) -> Option<i32> {
    match ws {
        WaitStatus::Exited(_, code) => Some((code & 0xff) << 8),
        WaitStatus::Signaled(_, sig, _) => Some(sig as i32),
        _ => None,
    }
}

/// End this process the way the raw status `raw` says: exit with its code, or die by its
/// signal (without a core dump).
fn mirror(raw: i32) -> ! {
    if libc::WIFEXITED(raw) {
        super::sys::exit_forked(libc::WEXITSTATUS(raw));
    }
    let sig = libc::WTERMSIG(raw);
    if let Ok(sig) = Signal::try_from(sig) {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: setrlimit reads the struct; default disposition, then the signal itself.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            let _ = signal(sig, SigHandler::SigDfl);
        }
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(sig);
        let _ = set.thread_unblock();
        let _ = nix::sys::signal::raise(sig);
    }
    super::sys::exit_forked(128 + sig)
}

/// Point stdio at `/dev/null` and close every other descriptor but `keep`.
fn quiet_descriptors(keep: &[RawFd]) {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..=2 {
            // SAFETY: dup2 onto the standard descriptors; `null` stays valid across it.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
        // Closed here, before the sweep below could close it under its owner.
        drop(null);
    }
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|fd| *fd > 2).collect();
    keep.sort_unstable();
    let mut from: RawFd = 3;
    for fd in keep.into_iter().chain(std::iter::once(RawFd::MAX)) {
        if fd > from {
            // SAFETY: close_range with integer arguments only; it closes the gap between
            // the descriptors to keep.
            unsafe { libc::close_range(from as libc::c_uint, (fd - 1) as libc::c_uint, 0) };
        }
        from = fd.saturating_add(1);
    }
}
