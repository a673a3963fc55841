//! Signals sent to coder itself. Once listening, SIGINT, SIGTERM and SIGHUP no longer kill
//! coder outright: they become a request to cancel the run, which stops the child tree and
//! still prints the `cancelled` envelope.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Listens for SIGINT, SIGTERM and SIGHUP.
pub struct CancelSignals {
    int: Signal,
    term: Signal,
    hup: Signal,
    received: Option<i32>,
}

impl CancelSignals {
    /// Installs the handlers; from here on these signals only cancel.
    pub fn install() -> std::io::Result<Self> {
        Ok(CancelSignals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            received: None,
        })
    }

    /// Waits for the next cancelling signal and returns its number.
    pub async fn recv(&mut self) -> i32 {
        let signo = tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        };
        self.received.get_or_insert(signo);
        signo
    }

    /// The first signal received so far, if any.
    pub fn received(&self) -> Option<i32> {
        self.received
    }
}

/// `SIGTERM` for 15, and so on.
pub fn signal_name(signo: i32) -> String {
    nix::sys::signal::Signal::try_from(signo)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {signo}"))
}
