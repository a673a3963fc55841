//! This process's mount table (`/proc/self/mountinfo`), read again only when it changed.
//!
//! A run looks at the mount table several times: the sandbox's checks that a tree holds
//! no kernel file system and that no grant reaches coder's own directories, and the
//! change ledger's scans before and after the CLI. The kernel builds the text anew for
//! every read (each mount's path and options formatted: about 0.5 ms of CPU for 70
//! mounts on the bench machine, BENCHMARKS.md round eighteen), and it changes only
//! when something mounts or unmounts in coder's mount namespace, which a run itself
//! never does (its sandbox mounts in a namespace of its own).
//!
//! So the text is kept with the descriptor it was read from, and handed out again as
//! long as the kernel says the table has not changed since that descriptor was opened:
//! `poll` on an open `mountinfo` reports `POLLPRI` (with `POLLERR`) once a mount or an
//! unmount happened in its namespace after the open (or after the last such report).
//! The text is read after the open, so it is at least as new as the event the
//! descriptor compares with: a change in between only costs one read too many. A forked
//! child (another process, perhaps in another namespace) never takes the parent's copy.

use std::io::Read;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

const PATH: &str = "/proc/self/mountinfo";

/// The text last read, the descriptor it came from, and the process that read it.
struct Cached {
    pid: u32,
    file: std::fs::File,
    text: Arc<[u8]>,
}

static CACHE: Mutex<Option<Cached>> = Mutex::new(None);

/// The text of `/proc/self/mountinfo` as it stands now: the copy read before when the
/// kernel reports no mount or unmount since, else read again.
pub(crate) fn table() -> std::io::Result<Arc<[u8]>> {
    let pid = std::process::id();
    {
        // Poisoned: a thread panicked holding it; what it guards is replaced whole.
        let mut cache = CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cached) = cache.as_ref() {
            if cached.pid == pid && !changed_since_open(&cached.file) {
                return Ok(Arc::clone(&cached.text));
            }
            // Dropped while the lock is held: `poll` reported the change to this caller
            // alone, and another caller must not take the old text meanwhile.
            *cache = None;
        }
    }
    // Read without the lock held: a second thread reads too rather than wait.
    let mut file = std::fs::File::open(PATH)?;
    let mut text = Vec::with_capacity(16 * 1024);
    file.read_to_end(&mut text)?;
    let text: Arc<[u8]> = text.into();
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *cache = Some(Cached {
        pid,
        file,
        text: Arc::clone(&text),
    });
    Ok(text)
}

/// Whether the mount table of `file`'s namespace changed since it was opened (or since
/// this last said so). An error counts as a change: the caller reads again.
fn changed_since_open(file: &std::fs::File) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLPRI)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_none_or(|r| r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR)),
        Err(_) => true,
    }
}

/// A path field of `/proc/self/mountinfo`: space, tab, newline and backslash are written
/// as `\ooo` octal escapes.
pub(crate) fn unescape(field: &[u8]) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let value = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    std::path::PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_escapes_are_decoded_and_other_backslashes_kept() {
        assert_eq!(
            unescape(b"a\\011b\\040c\\\\d\\9"),
            std::path::Path::new("a\tb c\\\\d\\9")
        );
    }

    #[test]
    fn the_table_is_read_once_while_nothing_mounts() {
        let first = table().unwrap();
        let again = table().unwrap();
        assert!(!first.is_empty());
        assert_eq!(
            &first[..],
            &std::fs::read(PATH).unwrap()[..],
            "the copy is not the table"
        );
        assert!(
            Arc::ptr_eq(&first, &again),
            "read again with nothing mounted"
        );
    }

    /// Mounts a tmpfs in the test's own mount namespace (root only): the next look sees it,
    /// and the one after its unmount no longer does.
    #[test]
    #[ignore = "needs root (mounts a tmpfs): scripts/test runs it"]
    fn a_mount_or_an_unmount_since_the_last_read_is_seen() {
        use nix::mount::{MntFlags, MsFlags, mount, umount2};
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().canonicalize().unwrap();
        let name = point.as_os_str().as_bytes().to_vec();
        let holds = |text: &[u8]| text.windows(name.len()).any(|w| w == name.as_slice());
        let before = table().unwrap();
        assert!(!holds(&before));
        mount(
            Some("tmpfs"),
            &point,
            Some("tmpfs"),
            MsFlags::empty(),
            Some("size=64k"),
        )
        .unwrap();
        let mounted = table();
        let _ = umount2(&point, MntFlags::MNT_DETACH);
        let mounted = mounted.unwrap();
        assert!(holds(&mounted), "a new mount was not seen");
        let after = table().unwrap();
        assert!(!holds(&after), "an unmount was not seen");
    }
}
