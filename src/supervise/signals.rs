//! Signals sent to coder itself. Once listening, SIGINT, SIGTERM and SIGHUP no longer kill
//! coder outright: they become a request to cancel the run, which stops the child tree and
//! still prints the `cancelled` envelope. Before the run, while coder reads its prompt
//! from stdin, [`CancellableStdin`] holds them, so a Ctrl-C at a pipe that never ends also
//! gets its envelope.
//!
//! The run mode holds them (blocked in the main thread, before any other thread exists:
//! [`hold_cancelling`]) from its first instruction until [`CancelSignals::install`] lets
//! them in, so one that arrives in between (while the arguments are checked, after the
//! prompt was read, while the runtime starts) stays pending and cancels the run at its
//! first wait instead of killing coder without an envelope. Threads started meanwhile
//! inherit the block and keep it, so the signal goes to the main thread; children get an
//! empty mask from the standard library's spawn.

use std::io::Read;
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals that cancel a run.
const CANCELLING: [nix::sys::signal::Signal; 3] = [
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGHUP,
];

/// Listens for SIGINT, SIGTERM and SIGHUP, but those the caller set to be ignored.
pub struct CancelSignals {
    int: Option<Signal>,
    term: Option<Signal>,
    hup: Option<Signal>,
    received: Option<i32>,
    /// A signal [`CancelSignals::arrived`] saw and the next [`CancelSignals::recv`] returns.
    pending: Option<i32>,
}

impl CancelSignals {
    /// Installs the handlers; from here on these signals only cancel. A signal ignored
    /// when coder started (`trap '' INT`, `nohup`) gets no handler and stays ignored, as
    /// for any POSIX tool: one held meanwhile is dropped when it is let in. Then lets in,
    /// in this thread, those [`hold_cancelling`] held: one already pending is delivered
    /// now and seen by [`CancelSignals::recv`].
    pub fn install() -> std::io::Result<Self> {
        let signals = CancelSignals::listen()?;
        release_cancelling()?;
        Ok(signals)
    }

    /// Listeners for the signals not ignored at start; each listener sees the signals
    /// that arrive after it is made.
    fn listen() -> std::io::Result<Self> {
        let listen = |kind: SignalKind, which: nix::sys::signal::Signal| {
            (!ignored_at_start(which)).then(|| signal(kind)).transpose()
        };
        use nix::sys::signal::Signal as S;
        Ok(CancelSignals {
            int: listen(SignalKind::interrupt(), S::SIGINT)?,
            term: listen(SignalKind::terminate(), S::SIGTERM)?,
            hup: listen(SignalKind::hangup(), S::SIGHUP)?,
            received: None,
            pending: None,
        })
    }

    /// Cancels `setup` when a cancelling signal arrives, until the returned task is
    /// aborted (dropping its handle would leave it listening). The sandbox's setup runs on
    /// the run's own thread without a wait in it, so a task of the runtime's worker
    /// listens beside it, with a second set of listeners: the run's own still sees the
    /// signal at its next wait. A listener sees only the signals that come after it is
    /// made, so one that these (the run's) listeners already got (while the worktree was
    /// made, the store reached, the ledger's snapshot begun) cancels `setup` at once: it
    /// used to wait for the whole setup, seconds on a tree an earlier agent filled with
    /// scripts its held scripts name. Call it before the setup starts.
    pub fn cancel_setup(
        &mut self,
        setup: crate::sandbox::SetupCancel,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let mut signals = CancelSignals::listen()?;
        if let Some(signo) = self.arrived() {
            setup.cancel(signo);
        }
        Ok(tokio::spawn(async move {
            let signo = signals.recv().await;
            setup.cancel(signo);
        }))
    }

    /// A cancelling signal that has already arrived, without waiting for one; the next
    /// [`CancelSignals::recv`] still returns it.
    pub fn arrived(&mut self) -> Option<i32> {
        if self.pending.is_none() {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let polled = std::pin::pin!(self.recv()).as_mut().poll(&mut cx);
            if let std::task::Poll::Ready(signo) = polled {
                self.pending = Some(signo);
            }
        }
        self.pending
    }

    /// Waits for the next cancelling signal and returns its number.
    pub async fn recv(&mut self) -> i32 {
        if let Some(signo) = self.pending.take() {
            return signo;
        }
        async fn next(signal: &mut Option<Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        let signo = tokio::select! {
            _ = next(&mut self.int) => libc::SIGINT,
            _ = next(&mut self.term) => libc::SIGTERM,
            _ = next(&mut self.hup) => libc::SIGHUP,
        };
        self.received.get_or_insert(signo);
        signo
    }

    /// The first signal received so far, if any.
    pub fn received(&self) -> Option<i32> {
        self.received
    }
}

/// Whether `signal` was ignored when coder started: asked once, at the first call (before
/// any handler of ours replaced the inherited disposition), and remembered.
fn ignored_at_start(signal: nix::sys::signal::Signal) -> bool {
    static AT_START: std::sync::OnceLock<[bool; 3]> = std::sync::OnceLock::new();
    let ignored = AT_START.get_or_init(|| CANCELLING.map(is_ignored));
    CANCELLING
        .iter()
        .position(|s| *s == signal)
        .is_some_and(|i| ignored[i])
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread until [`CancelSignals::install`]
/// (or [`release_cancelling`]): call it first thing, before any other thread exists, so
/// that every thread started later holds them too.
pub fn hold_cancelling() -> std::io::Result<()> {
    ignored_at_start(nix::sys::signal::Signal::SIGINT);
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&cancelling()), None).map_err(Into::into)
}

/// Unblocks SIGINT, SIGTERM and SIGHUP in the calling thread: a pending one is delivered.
pub fn release_cancelling() -> std::io::Result<()> {
    pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&cancelling()), None).map_err(Into::into)
}

fn cancelling() -> SigSet {
    let mut mask = SigSet::empty();
    for signal in CANCELLING {
        mask.add(signal);
    }
    mask
}

/// coder's stdin, read with SIGINT, SIGTERM and SIGHUP held (blocked in this thread and
/// taken from a signalfd): a read waits for stdin or one of them, and one that arrives
/// makes the read fail, so that the caller can answer with a `cancelled` envelope instead
/// of dying silently. Made before any other thread exists (the signals are blocked only in
/// the calling thread); dropping it lets them in again.
pub struct CancellableStdin {
    fd: SignalFd,
    old: SigSet,
    received: Option<i32>,
    /// Whether anything asked to read stdin (a prompt given as an argument never does).
    read_from: bool,
}

impl CancellableStdin {
    pub fn hold() -> std::io::Result<Self> {
        let mask = cancelling();
        let mut old = SigSet::empty();
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), Some(&mut old))?;
        match SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
            Ok(fd) => Ok(CancellableStdin {
                fd,
                old,
                received: None,
                read_from: false,
            }),
            Err(e) => {
                let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
                Err(e.into())
            }
        }
    }

    /// The first cancelling signal that arrived so far (taken from the signalfd), if any.
    pub fn received(&mut self) -> Option<i32> {
        while self.received.is_none() {
            match self.fd.read_signal() {
                Ok(Some(info)) => {
                    let signo = info.ssi_signo as i32;
                    // Held, a signal the caller ignores (`nohup`'s SIGHUP) is pending too.
                    if nix::sys::signal::Signal::try_from(signo).is_ok_and(|s| !is_ignored(s)) {
                        self.received = Some(signo);
                    }
                }
                _ => break,
            }
        }
        self.received
    }

    /// Whether stdin was read (or waited for) at all.
    pub fn was_read(&self) -> bool {
        self.read_from
    }
}

impl Read for CancellableStdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.read_from = true;
        let stdin = std::io::stdin();
        loop {
            if let Some(signo) = self.received() {
                return Err(std::io::Error::other(format!(
                    "cancelled by {}",
                    signal_name(signo)
                )));
            }
            let mut fds = [
                PollFd::new(stdin.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.fd.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            // Readable, at its end, or in error: the read itself says which.
            if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                match nix::unistd::read(stdin.as_fd(), buf) {
                    Err(Errno::EINTR) => continue,
                    result => return result.map_err(Into::into),
                }
            }
        }
    }
}

impl Drop for CancellableStdin {
    fn drop(&mut self) {
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.old), None);
    }
}

/// Whether `signal`'s disposition is to be ignored (inherited so from the caller).
pub fn is_ignored(signal: nix::sys::signal::Signal) -> bool {
    // SAFETY: `sigaction` with a null new action only writes the current one into
    // `current`, a plain C struct for which all zeroes is a valid value.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal as libc::c_int, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

/// `SIGTERM` for 15, and so on.
pub fn signal_name(signo: i32) -> String {
    nix::sys::signal::Signal::try_from(signo)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {signo}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A signal the run's listeners got before the setup's listener was made (while the
    /// worktree was made, say) stops the setup at once, and the run's next wait still
    /// sees it. Before, the setup's fresh listener never saw it: the setup ran to its end.
    #[tokio::test]
    async fn a_signal_that_came_before_the_setups_listener_cancels_the_setup() {
        let mut signals = CancelSignals::listen().expect("listen");
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).expect("raise");
        let deadline = Instant::now() + Duration::from_secs(10);
        while signals.arrived().is_none() {
            assert!(
                Instant::now() < deadline,
                "SIGTERM never reached the listener"
            );
            tokio::task::yield_now().await;
        }
        let setup = crate::sandbox::SetupCancel::default();
        let listening = signals.cancel_setup(setup.clone()).expect("listen");
        listening.abort();
        assert_eq!(setup.cancelled_by(), Some(libc::SIGTERM));
        let next = tokio::time::timeout(Duration::from_secs(10), signals.recv()).await;
        assert_eq!(next.ok(), Some(libc::SIGTERM));
        assert_eq!(signals.received(), Some(libc::SIGTERM));
    }
}
