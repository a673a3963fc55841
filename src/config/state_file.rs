//! Files of coder's state directory that runs share and lock: the placeholder lease's
//! lock files and registry ([`crate::sandbox`]'s lease), the runs' lock files
//! ([`super::run_dirs`]). One way to open them (private, never through a symlink) and one
//! way to lock them with a deadline.

use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// A shared file of the state directory, opened for reading and writing (created private
/// and empty when absent; never through a symlink).
pub fn open(path: &Path) -> std::io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Take `how` (a non-blocking `flock`) on `file`, trying again until `deadline` while
/// another process holds a conflicting lock. Polled rather than blocking: a blocking
/// `flock` cannot be given a deadline, and a holder that is stopped must not hang coder.
pub fn lock_until(
    mut file: fs::File,
    how: FlockArg,
    deadline: Instant,
) -> Result<Flock<fs::File>, Errno> {
    let mut pause = Duration::from_millis(1);
    loop {
        match Flock::lock(file, how) {
            Ok(lock) => return Ok(lock),
            Err((back, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                file = back;
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err((_, errno)) => return Err(errno),
        }
    }
}
