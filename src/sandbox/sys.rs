//! Thin wrappers over the Linux system calls the sandbox needs and that neither `nix` nor
//! `landlock` covers: the new mount API (`open_tree`, `mount_setattr`, `move_mount`),
//! capability dropping, and a few process-state tweaks.
//!
//! Each wrapper does one call and returns an `Errno`; deciding what a failure means is
//! left to the caller. Apart from the probe's fork and the helper's status descriptor, this
//! is the only place in the sandbox with `unsafe`.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};

/// Open `path` as an `O_PATH` handle, refusing any symlink on the way (every path the
/// sandbox mounts over or grants is canonical, so a symlink means it changed).
pub(crate) fn open_nofollow(path: &Path) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(nix::fcntl::AT_FDCWD, path, how)
}

/// Open the directory `path` as an `O_PATH` handle, refusing any symlink on the way.
pub(crate) fn open_nofollow_dir(path: &Path) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(nix::fcntl::AT_FDCWD, path, how)
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | AT_RECURSIVE)`: a detached copy of the mount tree
/// at `fd`, submounts included (a non-recursive copy is refused where submounts are locked).
pub(crate) fn clone_tree(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    let empty = c"";
    let flags = libc::OPEN_TREE_CLONE
        | libc::OPEN_TREE_CLOEXEC
        | libc::AT_EMPTY_PATH as libc::c_uint
        | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: `fd` is a valid descriptor for the duration of the call, `empty` is a valid
    // NUL-terminated string, and the kernel returns either a new descriptor or -1.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), empty.as_ptr(), flags) };
    let raw = Errno::result(ret)?;
    let raw = i32::try_from(raw).map_err(|_| Errno::EOVERFLOW)?;
    // SAFETY: the kernel handed us a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Make a detached mount tree read-only, nosuid and nodev (recursively).
pub(crate) fn set_read_only(tree: BorrowedFd<'_>) -> Result<(), Errno> {
    set_mount_attr(
        tree,
        libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
    )
}

/// Make a detached mount tree read-only and nosuid (recursively), leaving device files
/// usable (a granted `/dev/null`: a device is written through its driver, which a
/// read-only mount does not stop; its metadata is what the mount keeps unchanged).
pub(crate) fn set_read_only_keep_devices(tree: BorrowedFd<'_>) -> Result<(), Errno> {
    set_mount_attr(tree, libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID)
}

/// Make a detached mount tree nosuid and nodev (recursively), leaving it writable.
pub(crate) fn set_nosuid(tree: BorrowedFd<'_>) -> Result<(), Errno> {
    set_mount_attr(tree, libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV)
}

/// `mount_setattr(2)` on a whole detached tree: sets `attr_set`, clears nothing.
fn set_mount_attr(tree: BorrowedFd<'_>, attr_set: u64) -> Result<(), Errno> {
    let attr = libc::mount_attr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let empty = c"";
    let flags = libc::AT_EMPTY_PATH as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: `tree` is valid, `attr` lives across the call and its size is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Attach the detached tree `tree` on top of the file or directory open as `target`.
pub(crate) fn move_mount(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<(), Errno> {
    let empty = c"";
    let flags = libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH;
    // SAFETY: both descriptors are valid for the call; the paths are empty C strings.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            target.as_raw_fd(),
            empty.as_ptr(),
            flags,
        )
    };
    Errno::result(ret).map(drop)
}

/// Whether the file open as `fd` is encrypted (ext4/f2fs fscrypt): `statx`'s
/// `STATX_ATTR_ENCRYPTED`. An encrypted directory lists different names once any process
/// adds its key to the file system's keyring, and its ctime does not move.
pub(crate) fn is_encrypted(fd: BorrowedFd<'_>) -> Result<bool, Errno> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `statx` writes at most one `struct statx` into `stx`, which is that size; the
    // path is an empty NUL-terminated string, read under AT_EMPTY_PATH.
    let ret = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            0,
            stx.as_mut_ptr(),
        )
    };
    Errno::result(ret)?;
    // SAFETY: the buffer started zeroed (a valid `statx`) and the call succeeded.
    let stx = unsafe { stx.assume_init() };
    Ok(stx.stx_attributes & libc::STATX_ATTR_ENCRYPTED as u64 != 0)
}

/// When the entry `name` of `dir` (`dir` itself when `name` is empty) was made: `statx`'s
/// birth time, ns since the epoch; `None` where the file system keeps none or it cannot be
/// read. A symlink is not followed.
pub(crate) fn birth_ns(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> Option<i128> {
    use std::os::unix::ffi::OsStrExt;
    let c_name = std::ffi::CString::new(name.as_bytes()).ok()?;
    let mut flags = libc::AT_SYMLINK_NOFOLLOW;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `statx` writes at most one `struct statx` into `stx`, which is that size; the
    // name is a NUL-terminated string that outlives the call, `dir` a valid descriptor.
    let ret = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            c_name.as_ptr(),
            flags,
            libc::STATX_BTIME,
            stx.as_mut_ptr(),
        )
    };
    if ret != 0 {
        return None;
    }
    // SAFETY: the buffer started zeroed (a valid `statx`) and the call succeeded.
    let stx = unsafe { stx.assume_init() };
    (stx.stx_mask & libc::STATX_BTIME != 0).then(|| {
        i128::from(stx.stx_btime.tv_sec) * 1_000_000_000 + i128::from(stx.stx_btime.tv_nsec)
    })
}

/// The id of the mount `path` lies on (`statx`'s `STATX_MNT_ID`, the first field of its
/// line in `/proc/self/mountinfo`); a symlink at `path` itself is not followed.
pub(crate) fn mount_id(path: &Path) -> Result<u64, Errno> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `statx` writes at most one `struct statx` into `stx`, which is that size; the
    // path is a NUL-terminated string that outlives the call.
    let ret = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            stx.as_mut_ptr(),
        )
    };
    Errno::result(ret)?;
    // SAFETY: the buffer started zeroed (a valid `statx`) and the call succeeded.
    let stx = unsafe { stx.assume_init() };
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(Errno::ENOSYS);
    }
    Ok(stx.stx_mnt_id)
}

/// The Landlock ABI version of the running kernel (an error when Landlock is absent or
/// disabled).
pub(crate) fn landlock_abi() -> Result<i32, Errno> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute, size 0 and the VERSION flag the call only returns a
    // number; it reads and writes no memory.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    Errno::result(ret).and_then(|v| i32::try_from(v).map_err(|_| Errno::EOVERFLOW))
}

/// Drop every capability for good: lock the securebits so uid 0 regains nothing at
/// `execve`, empty the bounding and ambient sets, then clear effective, permitted and
/// inheritable. Root keeps its uid but not its power (no unmounting the masks, no reading
/// other processes' `/proc/<pid>/environ`).
pub(crate) fn drop_capabilities() -> Result<(), Errno> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) };
    // Without CAP_SETPCAP (a non-root user outside a user namespace) this fails, and there
    // is nothing to drop from the bounding set either; the capset below still applies.
    let can_setpcap = Errno::result(ret).is_ok();
    if can_setpcap {
        for cap in 0..=63 {
            // SAFETY: prctl with integer arguments only.
            let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
            match Errno::result(ret) {
                Ok(_) => {}
                Err(Errno::EINVAL) => break, // past the last capability this kernel knows
                Err(e) => return Err(e),
            }
        }
    }
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    Errno::result(ret)?;

    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and data are properly laid out version-3 capability structs (two
    // data elements) that live across the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Give up the controlling terminal, if this process has one, so that the agent cannot
/// push keystrokes into the user's shell with `TIOCSTI`. The process group is untouched
/// (the supervisor kills by group).
///
/// A session leader giving up its terminal makes the kernel send SIGHUP to the terminal's
/// foreground group, which is this process's own: SIGHUP is ignored for that moment.
pub(crate) fn detach_controlling_tty() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    let leader = nix::unistd::getsid(None).ok() == Some(nix::unistd::getpid());
    for fd in 0..=2 {
        // SAFETY: isatty takes an integer descriptor and no pointers.
        if unsafe { libc::isatty(fd) } != 1 {
            continue;
        }
        // SAFETY: installing SIG_IGN (no handler code runs) in a single-threaded process.
        let previous = leader.then(|| unsafe { signal(Signal::SIGHUP, SigHandler::SigIgn) });
        // SAFETY: ioctl(TIOCNOTTY) takes no argument pointer; a terminal that is not this
        // process's controlling one just yields ENOTTY, which is ignored.
        unsafe {
            libc::ioctl(fd, libc::TIOCNOTTY);
        }
        if let Some(Ok(handler)) = previous {
            // SAFETY: restores the disposition that was in place a moment ago.
            let _ = unsafe { signal(Signal::SIGHUP, handler) };
        }
    }
}

/// Mark every descriptor from 3 up close-on-exec: the agent must not inherit handles to
/// paths or sockets outside its sandbox.
pub(crate) fn cloexec_from_3() -> Result<(), Errno> {
    // SAFETY: close_range with integer arguments only; CLOEXEC only sets a flag.
    let ret = unsafe {
        libc::close_range(
            3,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_int,
        )
    };
    Errno::result(ret).map(drop)
}

/// Make `path` (a directory created by the caller) the root of this mount namespace and
/// detach the old root.
pub(crate) fn pivot_into(new_root: &OwnedFd) -> Result<(), Errno> {
    nix::unistd::fchdir(new_root.as_fd())?;
    nix::unistd::pivot_root(".", ".")?;
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH)?;
    nix::unistd::chdir("/")
}

/// Set the mount at `/` read-only (the private root's tmpfs).
pub(crate) fn remount_root_read_only() -> Result<(), Errno> {
    let root = open_nofollow(Path::new("/"))?;
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let empty = c"";
    // SAFETY: `root` is valid, `attr` lives across the call and its size is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            root.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Ends a process made by `fork` from one that may have had other threads (`coder
/// sandbox`'s command, and the waiters it forks): stdout and stderr flushed, then
/// `_exit`, without the runtime's exit path. That path locks the runtime's thread
/// registry, which a thread starting or ending at the fork (the scan's watch closer) may
/// have held: the copy in the child stays locked for good, and a forked waiter hung at
/// exit on it.
pub fn exit_forked(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` ends the process at once; nothing in this process needs its
    // destructors or atexit handlers (the parent owns every file and directory).
    unsafe { libc::_exit(code) }
}

/// Threads that walk one tree. Listing directories is nearly all of a big tree's scan,
/// and it is the kernel's work (`getdents`, ext4's hashed directories), which runs in
/// parallel on separate directories; each thread takes the next directory from a shared
/// queue and keeps what it finds to itself until the end.
///
/// Asked once per process: `available_parallelism` reads the cgroup's CPU quota (a dozen
/// system calls), and every tree's walk and the scan's check asked again.
pub(crate) fn walk_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
}

/// Put SIGPIPE back to its default action before an `execve` of a program that is not
/// coder. Rust's runtime ignores SIGPIPE in every process of coder's binary (so a closed
/// pipe is an `EPIPE` error, not death), and an ignored signal stays ignored across
/// `execve`: the agent, its tool shell and every command in it would ignore it too (`yes |
/// head` then fails with "Broken pipe"), and a shell cannot take back a signal ignored on
/// entry. `std::process::Command` does the same reset in its children.
pub(crate) fn restore_default_sigpipe() -> Result<(), Errno> {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: setting SIGPIPE to its default action installs no handler of ours (no code
    // runs in signal context); it only changes what the kernel does on the signal.
    unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) }.map(drop)
}
