//! What this machine offers the sandbox, for `coder doctor` and for clear errors up front.
//!
//! The namespace check runs in a throwaway forked child, because entering a namespace is
//! irreversible and the caller (a multi-threaded supervisor) must stay as it is. The child
//! only makes raw system calls on buffers prepared before the fork.

use std::ffi::CString;

use serde::Serialize;

use super::confine::has_cap_sys_admin;
use super::sys;

/// The kernel features the sandbox relies on, as found on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxSupport {
    /// Landlock ABI version, when Landlock is enabled.
    pub landlock_abi: Option<u32>,
    /// Why Landlock is not usable, when it is not.
    pub landlock_error: Option<String>,
    /// Unprivileged user namespaces can be created (and mapped, and mounted in).
    pub user_namespaces: bool,
    /// Why not, when they cannot.
    pub user_namespaces_error: Option<String>,
    /// This process runs as root with `CAP_SYS_ADMIN` (a mount namespace needs no user
    /// namespace then; capabilities are dropped before the agent starts).
    pub root_with_sys_admin: bool,
    /// The seccomp filter can be built and the kernel offers filter mode with `ERRNO`.
    pub seccomp: bool,
    /// Why not, when it cannot.
    pub seccomp_error: Option<String>,
    /// How many system calls the filter lists.
    pub seccomp_rules: usize,
}

impl SandboxSupport {
    /// Landlock is complete enough for `read-only` and `workspace-write`.
    pub fn can_confine(&self) -> bool {
        self.landlock_abi.is_some_and(|abi| abi >= 6)
    }

    /// Secrets can be masked and a private root built (a mount namespace is available).
    pub fn can_mask(&self) -> bool {
        self.user_namespaces || self.root_with_sys_admin
    }

    /// Every layer a confined run needs is there: Landlock, the namespaces (user or root,
    /// mount, PID, IPC, UTS) and seccomp. Without one, confined runs fail closed.
    pub fn can_run_confined(&self) -> bool {
        self.can_confine() && self.can_mask() && self.seccomp
    }

    /// One line per feature, for humans.
    pub fn summary(&self) -> String {
        let landlock = match (self.landlock_abi, &self.landlock_error) {
            (Some(abi), _) if abi >= 6 => format!("landlock: ABI {abi} (ok)"),
            (Some(abi), _) => format!("landlock: ABI {abi} (too old: coder needs 6, Linux 6.12)"),
            (None, Some(e)) => format!("landlock: unavailable ({e})"),
            (None, None) => "landlock: unavailable".to_string(),
        };
        let userns = match (&self.user_namespaces, &self.user_namespaces_error) {
            (true, _) => "user namespaces: available".to_string(),
            (false, Some(e)) => format!("user namespaces: unavailable ({e})"),
            (false, None) => "user namespaces: unavailable".to_string(),
        };
        let masks = if self.can_mask() {
            "namespaces (mount, PID, IPC, UTS), secret masks: available"
        } else {
            "namespaces: unavailable (confined runs are refused; only --sandbox \
             danger-full-access can run)"
        };
        let seccomp = match (&self.seccomp, &self.seccomp_error) {
            (true, _) => format!("seccomp: available ({} rules)", self.seccomp_rules),
            (false, Some(e)) => format!("seccomp: unavailable ({e})"),
            (false, None) => "seccomp: unavailable".to_string(),
        };
        format!("{landlock}\n{userns}\n{masks}\n{seccomp}")
    }
}

/// Probe Landlock and user namespaces.
pub fn probe() -> SandboxSupport {
    let (landlock_abi, landlock_error) = match sys::landlock_abi() {
        Ok(abi) => (u32::try_from(abi).ok(), None),
        Err(nix::errno::Errno::ENOSYS) => (None, Some("not built into this kernel".to_string())),
        Err(nix::errno::Errno::EOPNOTSUPP) => {
            (None, Some("disabled at boot (lsm= parameter)".to_string()))
        }
        Err(e) => (None, Some(e.to_string())),
    };
    let (user_namespaces, user_namespaces_error) = match probe_user_namespace() {
        Ok(()) => (true, None),
        Err(e) => (false, Some(e)),
    };
    let (seccomp, seccomp_error) = match probe_seccomp() {
        Ok(()) => (true, None),
        Err(e) => (false, Some(e)),
    };
    SandboxSupport {
        landlock_abi,
        landlock_error,
        user_namespaces,
        user_namespaces_error,
        root_with_sys_admin: nix::unistd::geteuid().is_root() && has_cap_sys_admin(),
        seccomp,
        seccomp_error,
        seccomp_rules: super::seccomp::RULES.len(),
    }
}

/// The filter builds, and the kernel has seccomp filters that can return an errno.
fn probe_seccomp() -> Result<(), String> {
    super::seccomp::programs().map_err(|e| e.to_string())?;
    // SAFETY: prctl with integer arguments only; it reports this process's seccomp mode.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode < 0 {
        return Err("the kernel is built without seccomp".to_string());
    }
    match std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") {
        Ok(actions) if !actions.split_whitespace().any(|a| a == "errno") => Err(format!(
            "the kernel's seccomp lacks the errno action ({})",
            actions.trim()
        )),
        _ => Ok(()),
    }
}

/// Fork a child that creates user, mount, PID, IPC and UTS namespaces, maps its ids and
/// changes mount propagation: the same steps the sandbox takes.
fn probe_user_namespace() -> Result<(), String> {
    let uid = nix::unistd::geteuid();
    let gid = nix::unistd::getegid();
    let prepared = (
        CString::new("/proc/self/setgroups"),
        CString::new("/proc/self/uid_map"),
        CString::new("/proc/self/gid_map"),
        CString::new("/"),
    );
    let (Ok(setgroups), Ok(uid_map), Ok(gid_map), Ok(root)) = prepared else {
        return Err("internal: bad path".to_string());
    };
    let uid_line = format!("{uid} {uid} 1");
    let gid_line = format!("{gid} {gid} 1");

    // SAFETY: after fork the child only calls async-signal-safe functions (unshare, open,
    // write, close, mount, _exit) on memory prepared before the fork, and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", nix::errno::Errno::last()));
    }
    if pid == 0 {
        // SAFETY: see above; every pointer refers to a live, NUL-terminated buffer or a
        // byte slice with its length.
        unsafe {
            let namespaces = libc::CLONE_NEWUSER
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS;
            if libc::unshare(namespaces) != 0 {
                libc::_exit(10);
            }
            let write = |path: &CString, text: &[u8]| -> bool {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return false;
                }
                let n = libc::write(fd, text.as_ptr().cast(), text.len());
                libc::close(fd);
                n == text.len() as isize
            };
            if !write(&setgroups, b"deny")
                || !write(&uid_map, uid_line.as_bytes())
                || !write(&gid_map, gid_line.as_bytes())
            {
                libc::_exit(11);
            }
            if libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                libc::_exit(12);
            }
            libc::_exit(0);
        }
    }
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None)
        .map_err(|e| format!("waitpid: {e}"))?;
    match status {
        nix::sys::wait::WaitStatus::Exited(_, 0) => Ok(()),
        nix::sys::wait::WaitStatus::Exited(_, 10) => Err(
            "unshare of user, mount, PID, IPC and UTS namespaces refused \
             (user.max_user_namespaces, kernel.unprivileged_userns_clone, \
             kernel.apparmor_restrict_unprivileged_userns or a seccomp profile)"
                .to_string(),
        ),
        nix::sys::wait::WaitStatus::Exited(_, 11) => {
            Err("writing the uid/gid maps was refused".to_string())
        }
        nix::sys::wait::WaitStatus::Exited(_, 12) => {
            Err("mount() inside the new namespace was refused".to_string())
        }
        other => Err(format!("probe child ended unexpectedly: {other:?}")),
    }
}

/// Runs `coder sandbox -- true` in a throwaway workspace: the whole confinement a run
/// gets, including the private network namespace, its loopback, the proxy listener and
/// its hand-over to the parent. `Ok` when that works; otherwise the one-line reason a
/// confined run would fail closed with (`sandbox_error`).
pub fn probe_network() -> Result<(), String> {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().map_err(|e| format!("cannot find coder itself: {e}"))?;
    let dir = std::env::temp_dir().join(format!("coder-doctor-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let program = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("true");
    let child = Command::new(exe)
        .args(["sandbox", "--cd"])
        .arg(&dir)
        .args(["--", program])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let result = match child {
        Ok(child) => wait_briefly(child),
        Err(e) => Err(format!("cannot start coder sandbox: {e}")),
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Waits up to 20 s for the probe, killing it after that.
fn wait_briefly(child: std::process::Child) -> Result<(), String> {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(20)) {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let line = stderr.lines().last().unwrap_or("").trim();
            Err(format!(
                "coder sandbox -- true failed ({}): {}",
                out.status,
                line.strip_prefix("coder sandbox: ").unwrap_or(line)
            ))
        }
        Ok(Err(e)) => Err(format!("coder sandbox -- true: {e}")),
        Err(_) => {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Err("coder sandbox -- true did not finish within 20 s".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_every_feature() {
        let support = SandboxSupport {
            landlock_abi: Some(5),
            landlock_error: None,
            user_namespaces: false,
            user_namespaces_error: Some("refused".to_string()),
            root_with_sys_admin: false,
            seccomp: false,
            seccomp_error: Some("no seccomp".to_string()),
            seccomp_rules: 0,
        };
        assert!(!support.can_confine());
        assert!(!support.can_mask());
        assert!(!support.can_run_confined());
        let text = support.summary();
        assert!(text.contains("no seccomp"), "{text}");
        assert!(text.contains("ABI 5 (too old"), "{text}");
        assert!(text.contains("refused"), "{text}");
    }

    /// The highest Landlock ABI this kernel supports, measured independently of
    /// `sys::landlock_abi` (the VERSION query): which filesystem access bits a ruleset may
    /// handle (ABI 1: up to MAKE_SYM, 2: REFER, 3: TRUNCATE, 5: IOCTL_DEV). `None` without
    /// Landlock.
    fn landlock_abi_from_access_bits() -> Option<u32> {
        let accepts = |bit: u32| {
            let attr: u64 = 1 << bit;
            // SAFETY: the kernel reads 8 bytes of `attr` (the size given) and returns a new
            // descriptor or an error; the descriptor is closed at once.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_landlock_create_ruleset,
                    std::ptr::from_ref(&attr),
                    std::mem::size_of::<u64>(),
                    0u32,
                )
            };
            if fd >= 0 {
                // SAFETY: closing the descriptor the call above returned.
                unsafe { libc::close(fd as i32) };
            }
            fd >= 0
        };
        if !accepts(0) {
            return None;
        }
        Some(match (accepts(13), accepts(14), accepts(15)) {
            (_, _, true) => 5,
            (_, true, false) => 3,
            (true, false, false) => 2,
            _ => 1,
        })
    }

    /// The Landlock ABI each kernel release introduced (Documentation/userspace-api/landlock).
    fn minimum_abi_for_kernel(release: &str) -> u32 {
        let mut parts = release
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        [
            ((6, 12), 6),
            ((6, 10), 5),
            ((6, 7), 4),
            ((6, 2), 3),
            ((5, 19), 2),
            ((5, 13), 1),
        ]
        .into_iter()
        .find(|(since, _)| version >= *since)
        .map_or(0, |(_, abi)| abi)
    }

    #[test]
    fn probe_agrees_with_independent_measurements_of_this_kernel() {
        let support = probe();
        assert_eq!(
            support.landlock_abi.is_none(),
            support.landlock_error.is_some()
        );
        assert_eq!(
            support.user_namespaces,
            support.user_namespaces_error.is_none()
        );

        // Landlock: the access bits the kernel accepts bound the ABI from below and above.
        match (support.landlock_abi, landlock_abi_from_access_bits()) {
            (None, None) => {}
            (Some(abi), Some(measured)) => {
                assert!(
                    abi >= measured,
                    "probe says ABI {abi}, bits say ≥ {measured}"
                );
                let too_high = match measured {
                    1 => abi > 1,
                    2 => abi > 2,
                    3 => abi > 4,
                    _ => false,
                };
                assert!(!too_high, "probe says ABI {abi}, bits say {measured}");
                let release = nix::sys::utsname::uname()
                    .map(|u| u.release().to_string_lossy().into_owned())
                    .unwrap_or_default();
                let minimum = minimum_abi_for_kernel(&release);
                assert!(
                    abi >= minimum,
                    "kernel {release} ships Landlock ABI {minimum}, probe says {abi}"
                );
            }
            (probed, measured) => {
                panic!("probe says Landlock {probed:?}, the ruleset call says {measured:?}")
            }
        }

        // User namespaces: disabled by sysctl means unavailable; otherwise util-linux's
        // unshare(1), as this same user, must agree with the probe.
        let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .map(|t| t.trim().to_string())
            .unwrap_or_default();
        if max == "0" {
            assert!(!support.user_namespaces);
        }
        let unshare = std::process::Command::new("/usr/bin/unshare")
            .args([
                "--user",
                "--map-root-user",
                "--mount",
                "--propagation",
                "private",
            ])
            .arg("/bin/true")
            .stderr(std::process::Stdio::null())
            .status();
        if let Ok(status) = unshare {
            assert_eq!(
                support.user_namespaces,
                status.success(),
                "probe: {:?}",
                support.user_namespaces_error
            );
        }

        // Root with CAP_SYS_ADMIN: the effective capability set in /proc/self/status.
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let cap_eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or(0);
        let sys_admin = cap_eff & (1 << 21) != 0; // CAP_SYS_ADMIN
        assert_eq!(
            support.root_with_sys_admin,
            nix::unistd::geteuid().is_root() && sys_admin
        );
    }

    #[test]
    fn kernel_releases_map_to_their_landlock_abi() {
        assert_eq!(minimum_abi_for_kernel("6.18.44-fc-v769"), 6);
        assert_eq!(minimum_abi_for_kernel("6.8.0-45-generic"), 4);
        assert_eq!(minimum_abi_for_kernel("5.15.0"), 1);
        assert_eq!(minimum_abi_for_kernel("5.10.0"), 0);
    }
}
