//! What changed during a run under the paths `.gitignore` ignores (DESIGN §8): the
//! envelope's `changes.ignored`.
//!
//! Why: the git ledger has `git add -A` semantics, so what the agent writes under an
//! ignored path (a virtualenv's `site-packages`, `node_modules/.bin`, `target/`) is not in
//! `changes.files`; round nineteen's review planted a `.pth` file in a project's ignored
//! `.venv` (the user's next `python` runs it) and made a `--verify` check pass through an
//! ignored script, with nothing listed. Those trees are the project's build outputs too,
//! far bigger than its content, so they are reported apart, without line counts, and never
//! snapshotted before the run.
//!
//! How, without a "before": after the run, every entry (file, symlink or directory) of the
//! ignored trees whose change time is at or after the run's start is reported. The agent
//! cannot set a change time back: `utimensat` sets it to now, a rename or a link updates
//! the moved inode's, and a directory moved in is itself reported (what it holds keeps its
//! times). A deletion shows as its directory's change. The start is read from the kernel's
//! coarse clock ([`coarse_now_ns`]), the clock file times come from, so nothing changed in
//! the run's first tick is missed. An entry is `added` when its birth time (where the file
//! system keeps one) is at or after the start too, else `modified`.
//!
//! Every entry is looked at: a directory's change time is not enough to skip what it holds
//! (an in-place write to an existing file changes the file's times, not its directory's),
//! so the walk is a `statx` per entry, on two threads, bounded by [`MAX_ENTRIES`] and
//! [`DEADLINE`] (past either it says `truncated`). It follows no symlink (each directory is
//! opened `O_NOFOLLOW` relative to its parent), and never enters the paths it is told to
//! leave out (coder's own state directory, the sandbox's placeholders).

use std::collections::BinaryHeap;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::scan::{open_dir, open_dir_at};

/// Paths listed in `changes.ignored.paths` at most (`count` counts them all).
pub const MAX_LISTED: usize = 50;
/// Entries looked at at most.
pub const MAX_ENTRIES: usize = 1_000_000;
/// How long the walk may take.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// `"added" | "modified"`: the changes the walk can tell (a deletion shows as its
/// directory's change). Its own type, not the ledger's `ChangeStatus`, which the ledger
/// builds on this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IgnoredStatus {
    Added,
    Modified,
}

/// One changed entry under an ignored path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IgnoredChange {
    /// Relative to the workspace, `/`-separated; a directory ends with `/`.
    pub path: String,
    pub status: IgnoredStatus,
}

/// The envelope's `changes.ignored` (absent when nothing changed there).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IgnoredChanges {
    /// The first [`MAX_LISTED`] changed paths, sorted.
    pub paths: Vec<IgnoredChange>,
    /// Changed entries found, listed or not.
    pub count: u64,
    /// The walk stopped at [`MAX_ENTRIES`] or [`DEADLINE`], or could not read a directory:
    /// more may have changed.
    pub truncated: bool,
}

impl IgnoredChanges {
    /// The paths listed, at most `n`, `, `-joined, with how many more there are.
    pub fn named(&self, n: usize) -> String {
        let mut shown: Vec<&str> = self.paths.iter().take(n).map(|c| c.path.as_str()).collect();
        let more = self.count.saturating_sub(shown.len() as u64);
        let tail = (more > 0).then(|| format!("and {more} more"));
        shown.extend(tail.as_deref());
        shown.join(", ")
    }
}

/// Now by the kernel's coarse realtime clock (ns since the epoch), which file times come
/// from: a file changed after this call has a change time at or after it.
pub fn coarse_now_ns() -> i128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a writable timespec that lives for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    if rc == 0 {
        i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
    } else {
        // No coarse clock: the fine one, less a tick (a coarse tick is at most 10 ms).
        super::scan::now_ns() - 10_000_000
    }
}

/// Walks the ignored `roots` of `workspace` (relative to it; a directory ends with `/`)
/// and reports every entry changed at or after `since_ns`, leaving out `exclude` (paths
/// relative to the workspace, with what is below them, and the directories above them,
/// whose change times their making moved).
pub fn changed_since(
    workspace: &Path,
    roots: &[Vec<u8>],
    since_ns: i128,
    exclude: &[String],
) -> IgnoredChanges {
    let walk = Walk {
        since_ns,
        exclude: exclude
            .iter()
            .map(|x| x.trim_end_matches('/').as_bytes().to_vec())
            .filter(|x| !x.is_empty())
            .collect(),
        deadline: Instant::now() + DEADLINE,
        queue: Mutex::new(Queue::default()),
        more: Condvar::new(),
    };
    let Some(top) = open_dir(workspace) else {
        return IgnoredChanges {
            truncated: true,
            ..IgnoredChanges::default()
        };
    };
    let mut found = Found::default();
    for root in outermost(roots) {
        walk.root(top.as_fd(), root, &mut found);
    }
    let helper = std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("ledger-ignored".into())
            .spawn_scoped(s, || walk.work())
            .ok();
        let mine = walk.work();
        let theirs = helper.and_then(|h| h.join().ok()).unwrap_or_default();
        (mine, theirs)
    });
    found.merge(helper.0);
    found.merge(helper.1);
    let truncated = found.truncated
        || walk
            .queue
            .lock()
            .map_or(true, |q| q.truncated || !q.dirs.is_empty());
    found.into_changes(truncated)
}

/// `roots` but those below a directory among them: git lists an untracked directory
/// holding only ignored files (`new/`) and each of those files (`new/x.pth`), which the
/// walk of `new/` reaches again (they were counted, and listed, twice).
fn outermost(roots: &[Vec<u8>]) -> Vec<&[u8]> {
    let mut sorted: Vec<&[u8]> = roots.iter().map(Vec::as_slice).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut kept: Vec<&[u8]> = Vec::with_capacity(sorted.len());
    // Sorted, the paths starting with a directory's come right after it.
    let mut dir: Option<&[u8]> = None;
    for root in sorted {
        if dir.is_some_and(|d| root.starts_with(d)) {
            continue;
        }
        if root.ends_with(b"/") {
            dir = Some(root);
        }
        kept.push(root);
    }
    kept
}

/// A directory to walk: its path relative to the workspace (ending with `/`) and an open
/// descriptor.
struct Dir {
    path: Vec<u8>,
    fd: OwnedFd,
}

#[derive(Default)]
struct Queue {
    dirs: Vec<Dir>,
    /// Workers walking a directory now.
    busy: usize,
    /// Entries looked at so far.
    entries: usize,
    truncated: bool,
}

struct Walk {
    since_ns: i128,
    exclude: Vec<Vec<u8>>,
    deadline: Instant,
    queue: Mutex<Queue>,
    more: Condvar,
}

/// What one worker found: the first [`MAX_LISTED`] paths (a max-heap: its top is the
/// last in order), and how many in all.
#[derive(Default)]
struct Found {
    first: BinaryHeap<(Vec<u8>, bool)>,
    count: u64,
    truncated: bool,
}

impl Found {
    fn add(&mut self, path: Vec<u8>, added: bool) {
        self.count += 1;
        if self.first.len() < MAX_LISTED {
            self.first.push((path, added));
        } else if self.first.peek().is_some_and(|top| path < top.0) {
            self.first.pop();
            self.first.push((path, added));
        }
    }

    fn merge(&mut self, other: Found) {
        let count = self.count + other.count;
        for (path, added) in other.first {
            self.add(path, added);
        }
        self.count = count;
        self.truncated |= other.truncated;
    }

    fn into_changes(self, truncated: bool) -> IgnoredChanges {
        let paths = self
            .first
            .into_sorted_vec()
            .into_iter()
            .map(|(path, added)| IgnoredChange {
                path: String::from_utf8_lossy(&path).into_owned(),
                status: if added {
                    IgnoredStatus::Added
                } else {
                    IgnoredStatus::Modified
                },
            })
            .collect();
        IgnoredChanges {
            paths,
            count: self.count,
            truncated,
        }
    }
}

impl Walk {
    /// Looks at ignored root `root` (opened component by component from the workspace,
    /// never through a symlink), and queues it when it is a directory.
    fn root(&self, top: BorrowedFd<'_>, root: &[u8], found: &mut Found) {
        let trimmed = root.strip_suffix(b"/").unwrap_or(root);
        let (parent_path, name) = match trimmed.iter().rposition(|b| *b == b'/') {
            Some(at) => (&trimmed[..at], &trimmed[at + 1..]),
            None => (&b""[..], trimmed),
        };
        if name.is_empty() || name == b".git" {
            return;
        }
        let mut owned: Option<OwnedFd> = None;
        for part in parent_path.split(|b| *b == b'/').filter(|p| !p.is_empty()) {
            let at = owned.as_ref().map_or(top, |fd| fd.as_fd());
            match open_dir_at(at, part) {
                Some(fd) => owned = Some(fd),
                None => return,
            }
        }
        let parent = owned.as_ref().map_or(top, |fd| fd.as_fd());
        let mut path = parent_path.to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        if let Ok(name) = std::ffi::CString::new(name) {
            self.entry(parent, &name, &path, found);
        }
    }

    /// Takes directories off the queue until none is left and no worker may add one.
    fn work(&self) -> Found {
        let mut found = Found::default();
        loop {
            let next = {
                let Ok(mut q) = self.queue.lock() else {
                    found.truncated = true;
                    return found;
                };
                loop {
                    if q.truncated {
                        break None;
                    }
                    if let Some(dir) = q.dirs.pop() {
                        q.busy += 1;
                        break Some(dir);
                    }
                    if q.busy == 0 {
                        break None;
                    }
                    q = match self.more.wait(q) {
                        Ok(q) => q,
                        Err(_) => {
                            found.truncated = true;
                            return found;
                        }
                    };
                }
            };
            let Some(dir) = next else {
                self.more.notify_all();
                return found;
            };
            self.dir(dir, &mut found);
            if let Ok(mut q) = self.queue.lock() {
                q.busy -= 1;
            }
            self.more.notify_all();
        }
    }

    /// Looks at every entry of `dir`.
    fn dir(&self, dir: Dir, found: &mut Found) {
        if Instant::now() > self.deadline {
            self.stop();
            return;
        }
        let Some((names, count)) = list(&dir.fd) else {
            found.truncated = true;
            return;
        };
        if let Ok(mut q) = self.queue.lock() {
            q.entries += count;
            if q.entries > MAX_ENTRIES {
                q.truncated = true;
                return;
            }
        }
        let mut rest = names.as_slice();
        while let Ok(name) = std::ffi::CStr::from_bytes_until_nul(rest) {
            rest = &rest[name.to_bytes_with_nul().len()..];
            self.entry(dir.fd.as_fd(), name, &dir.path, found);
        }
    }

    /// Looks at entry `name` of the directory open as `parent` (at `path`, ending with `/`
    /// or empty): reported when changed, queued when a directory.
    fn entry(&self, parent: BorrowedFd<'_>, name: &CStr, path: &[u8], found: &mut Found) {
        let full = || [path, name.to_bytes()].concat();
        // A path is made only where needed: most entries are neither changed nor directories.
        if !self.exclude.is_empty() && self.left_out(&full()) {
            return;
        }
        let Some(st) = statx(parent, name) else {
            return;
        };
        let is_dir = st.is_dir;
        if !is_dir && st.ctime_ns < self.since_ns {
            return;
        }
        let mut full = full();
        if is_dir {
            full.push(b'/');
        }
        if st.ctime_ns >= self.since_ns && !self.holds_excluded(&full) {
            found.add(
                full.clone(),
                st.btime_ns.is_some_and(|b| b >= self.since_ns),
            );
        }
        if is_dir && let Some(fd) = open_dir_at(parent, name.to_bytes()) {
            if let Ok(mut q) = self.queue.lock() {
                q.dirs.push(Dir { path: full, fd });
            }
            self.more.notify_one();
        }
    }

    /// `path` is, or is below, a path left out.
    fn left_out(&self, path: &[u8]) -> bool {
        self.exclude
            .iter()
            .any(|x| super::git::below(x, path).is_some())
    }

    /// Directory `dir` (ending with `/`) holds a path left out: its times are not the
    /// agent's alone.
    fn holds_excluded(&self, dir: &[u8]) -> bool {
        dir.ends_with(b"/") && self.exclude.iter().any(|x| x.starts_with(dir))
    }

    fn stop(&self) {
        if let Ok(mut q) = self.queue.lock() {
            q.truncated = true;
        }
        self.more.notify_all();
    }
}

/// What [`statx`] tells of an entry.
struct Stat {
    is_dir: bool,
    ctime_ns: i128,
    /// `None` where the file system keeps no birth time.
    btime_ns: Option<i128>,
}

/// The entry `name` of the directory open as `dir`, not following a symlink.
fn statx(dir: BorrowedFd<'_>, name: &CStr) -> Option<Stat> {
    let mut out = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `name` is a NUL-terminated string and `out` a writable statx buffer, both
    // live for the call; `dir` is an open descriptor.
    let rc = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT,
            libc::STATX_TYPE | libc::STATX_CTIME | libc::STATX_BTIME,
            out.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: statx succeeded, so it filled the buffer (zeroed before in any case).
    let st = unsafe { out.assume_init() };
    let ns =
        |t: libc::statx_timestamp| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    Some(Stat {
        is_dir: u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR,
        ctime_ns: ns(st.stx_ctime),
        btime_ns: (st.stx_mask & libc::STATX_BTIME != 0).then(|| ns(st.stx_btime)),
    })
}

/// The names in the directory open as `dir` (but `.` and `..`), each ending with a NUL,
/// one after the other, and how many; `None` when it cannot be read.
fn list(dir: &OwnedFd) -> Option<(Vec<u8>, usize)> {
    let fd = dir.try_clone().ok()?;
    let mut stream = nix::dir::Dir::from_fd(fd).ok()?;
    let mut names = Vec::new();
    let mut count = 0;
    for entry in stream.iter() {
        let entry = entry.ok()?;
        let name = entry.file_name();
        if !matches!(name.to_bytes(), b"." | b"..") {
            names.extend_from_slice(name.to_bytes_with_nul());
            count += 1;
        }
    }
    Some((names, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The coarse clock's now, once it is past `path`'s change time (bounded: a tick is
    /// a few ms).
    fn after(path: &Path) -> i128 {
        let meta = std::fs::symlink_metadata(path).unwrap();
        let ctime = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let now = coarse_now_ns();
            if now > ctime {
                return now;
            }
            assert!(Instant::now() < end, "the coarse clock stood still");
            std::thread::yield_now();
        }
    }

    fn paths(found: &IgnoredChanges) -> Vec<(&str, IgnoredStatus)> {
        found
            .paths
            .iter()
            .map(|c| (c.path.as_str(), c.status))
            .collect()
    }

    #[test]
    fn only_what_changed_since_is_reported_sorted_and_left_out_paths_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join("target/a")).unwrap();
        std::fs::create_dir_all(ws.join("state")).unwrap();
        std::fs::write(ws.join("target/a/old"), "x").unwrap();
        std::fs::write(ws.join("target/a/kept"), "x").unwrap();
        let since = after(&ws.join("target/a/kept"));
        std::fs::write(ws.join("target/a/old"), "y").unwrap();
        std::fs::write(ws.join("target/new"), "y").unwrap();
        std::fs::write(ws.join("state/cache"), "y").unwrap();
        let roots = [b"target/".to_vec(), b"state/".to_vec()];
        let found = changed_since(ws, &roots, since, &["state/".to_owned()]);
        let mut want = vec![
            ("target/", IgnoredStatus::Modified),
            ("target/a/old", IgnoredStatus::Modified),
            ("target/new", IgnoredStatus::Added),
        ];
        // Where the file system keeps no birth time, everything is `modified`.
        let btime = std::fs::metadata(ws.join("target/new"))
            .unwrap()
            .created()
            .is_ok();
        if !btime {
            want[2].1 = IgnoredStatus::Modified;
        }
        assert_eq!(paths(&found), want);
        assert_eq!((found.count, found.truncated), (3, false));
    }

    #[test]
    fn the_list_is_capped_and_the_count_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let since = coarse_now_ns();
        std::fs::create_dir(ws.join("out")).unwrap();
        for i in 0..(MAX_LISTED + 20) {
            std::fs::write(ws.join(format!("out/f{i:03}")), "").unwrap();
        }
        let found = changed_since(ws, &[b"out/".to_vec()], since, &[]);
        assert_eq!(found.count, MAX_LISTED as u64 + 21);
        assert_eq!(found.paths.len(), MAX_LISTED);
        assert_eq!(found.paths[0].path, "out/");
        assert_eq!(found.paths[1].path, "out/f000");
        assert!(
            found
                .named(2)
                .ends_with(&format!("and {} more", MAX_LISTED + 19))
        );
    }

    #[test]
    fn a_symlinked_root_or_parent_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let since = coarse_now_ns();
        std::fs::write(outside.join("secret"), "").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        let found = changed_since(
            &ws,
            &[b"link".to_vec(), b"link/secret".to_vec()],
            since,
            &[],
        );
        assert_eq!(
            paths(&found).iter().map(|p| p.0).collect::<Vec<_>>(),
            ["link"]
        );
    }
}
