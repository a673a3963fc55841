//! A way to stop the sandbox's setup midway. The setup scan reads every directory of the
//! granted trees and every script the user's git commands run; on a big workspace, or one
//! an earlier run's agent filled with big scripts its held scripts name, that takes
//! seconds, and a `SIGTERM` that arrived meanwhile was acted on only when the scan ended
//! (round twenty-eight's review: 150 s). The caller hands the scan a [`SetupCancel`] and
//! cancels it from whatever listens for its signals (a task of the run's runtime, a
//! thread polling `coder sandbox`'s held signals); the walk looks at it once per
//! directory and per script, and returns [`SandboxError::Cancelled`], after which the
//! policy removes what it made, as for any other failure.
//!
//! The token only asks; it never interrupts a system call, so a cancelled scan ends
//! within one directory listing or one script's reading.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use super::SandboxError;

/// Shared between the setup and whoever may stop it; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SetupCancel(Arc<AtomicI32>);

impl SetupCancel {
    /// Asks the setup to stop, for `signal` (its number, kept for the caller's message).
    pub fn cancel(&self, signal: i32) {
        // The first signal is the one reported.
        let _ = self
            .0
            .compare_exchange(0, signal.max(1), Ordering::AcqRel, Ordering::Acquire);
    }

    /// The signal the setup was stopped for, if it was.
    pub fn cancelled_by(&self) -> Option<i32> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            signal => Some(signal),
        }
    }

    /// `Err(Cancelled)` once [`SetupCancel::cancel`] was called.
    pub(crate) fn check(&self) -> Result<(), SandboxError> {
        match self.cancelled_by() {
            None => Ok(()),
            Some(signal) => Err(SandboxError::Cancelled { signal }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_is_the_one_kept() {
        let cancel = SetupCancel::default();
        assert!(cancel.check().is_ok());
        let other = cancel.clone();
        other.cancel(libc::SIGTERM);
        other.cancel(libc::SIGINT);
        assert_eq!(cancel.cancelled_by(), Some(libc::SIGTERM));
        assert!(matches!(
            cancel.check(),
            Err(SandboxError::Cancelled { signal }) if signal == libc::SIGTERM
        ));
    }
}
