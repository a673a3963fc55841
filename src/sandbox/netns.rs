//! The agent's private network: a network namespace with loopback only, and the listening
//! socket of coder's egress proxy inside it.
//!
//! This runs in the single-threaded helper right after the namespaces are entered
//! ([`super::confine`] adds `CLONE_NEWNET` to its `unshare`), while the process still has
//! `CAP_NET_ADMIN` over the new namespace (inside its user namespace, or as root):
//!
//! 1. check that the process really is in a new namespace (its `/proc/self/ns/net` is not
//!    the one [`current_namespace`] saw before `unshare`), so a kernel or container that
//!    refused the namespace fails closed instead of leaving the host's network open;
//! 2. bring `lo` up (a new namespace starts with it down);
//! 3. bind a TCP listener on `127.0.0.1:PROXY_PORT` (fresh namespace: the port is free);
//! 4. send its descriptor to coder over the inherited UNIX socket (`SCM_RIGHTS`), then
//!    close it here. coder accepts on it from outside: a socket stays in the namespace it
//!    was created in, so the agent connects to it on its own loopback while coder reaches
//!    the host's network. The agent never holds the listener.
//!
//! Nothing in the namespace is reachable from the host: its loopback is its own, so a
//! `listen()` without `bind()` (autobind), MPTCP, TCP Fast Open or UDP all stay inside.

use std::io::IoSlice;
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use serde::{Deserialize, Serialize};

use super::SandboxError;
use super::allow::HostPort;

/// The proxy's port on the agent's private loopback. Any port works in a fresh namespace;
/// a fixed one lets the policy name it before the helper runs.
pub const DEFAULT_PROXY_PORT: u16 = 3128;

/// Variables that point the agent's tools at the proxy (both spellings: curl reads the
/// lower-case ones, Node and Python either).
pub const PROXY_VARS: [&str; 6] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Variables removed from the agent's environment: a `NO_PROXY` entry for the backend's
/// loopback address would make the CLI connect directly, which the namespace refuses.
pub const NO_PROXY_VARS: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// The network half of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    /// Where the proxy listens on the agent's private loopback (127.0.0.1).
    pub proxy_port: u16,
    /// Destinations the proxy lets through (sorted, unique).
    pub allow: Vec<HostPort>,
}

impl Default for NetworkPolicy {
    fn default() -> Self {
        NetworkPolicy {
            proxy_port: DEFAULT_PROXY_PORT,
            allow: Vec::new(),
        }
    }
}

impl NetworkPolicy {
    /// The proxy URL the agent's environment carries.
    pub fn proxy_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.proxy_port)
    }
}

/// What [`setup`] did, for [`super::Confinement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetworkSetup {
    pub proxy_port: u16,
}

/// The identity (inode) of this process's network namespace, read before `unshare` so
/// that [`setup`] can prove the namespace changed.
pub(crate) fn current_namespace() -> Result<u64, SandboxError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net")
        .map(|m| m.ino())
        .map_err(|e| SandboxError::io("stat /proc/self/ns/net", e))
}

/// Steps 1 and 2 of the module docs, which need nothing of the policy: `host` is
/// [`current_namespace`] before `unshare`. Done in [`super::confine::prepare`], so the
/// helper started before its spec does them while coder still resolves the policy:
/// `SIOCSIFFLAGS` takes the kernel's `rtnl_lock`, which a namespace of an earlier run
/// being torn down holds for milliseconds (BENCHMARKS.md, issue 21, round twenty-three).
/// A loopback that is up grants nothing: nothing of the agent runs before the whole
/// policy is applied, and the namespace has no other interface.
pub(crate) fn enter_checked(host: u64) -> Result<(), SandboxError> {
    if current_namespace()? == host {
        return Err(SandboxError::NetworkUnavailable {
            reason: "the process is still in the host's network namespace".to_string(),
        });
    }
    bring_up_loopback()
}

/// Steps 3 and 4 of the module docs, after [`enter_checked`]. `channel` is the UNIX
/// socket coder inherited to the helper: without it there would be nobody to serve the
/// proxy, so that is an error too.
pub(crate) fn setup(
    policy: &NetworkPolicy,
    channel: Option<BorrowedFd<'_>>,
) -> Result<NetworkSetup, SandboxError> {
    let channel = channel.ok_or_else(|| {
        SandboxError::Network("no channel to coder's egress proxy was inherited".to_string())
    })?;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, policy.proxy_port)).map_err(|e| {
        SandboxError::io(
            format!("listen on 127.0.0.1:{} for the proxy", policy.proxy_port),
            e,
        )
    })?;
    send_fd(channel, listener.as_fd())?;
    // coder holds its own reference now; the agent must not inherit this one.
    drop(listener);
    Ok(NetworkSetup {
        proxy_port: policy.proxy_port,
    })
}

/// `ip link set lo up`, by ioctl.
fn bring_up_loopback() -> Result<(), SandboxError> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| SandboxError::sys("socket", "lo", e))?;
    // SAFETY: `ifreq` is a plain C struct for which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    let fail = |op| SandboxError::sys(op, "lo", nix::errno::Errno::last());
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into `req`, which is a
    // valid, exclusively borrowed `ifreq` for the duration of the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(fail("SIOCGIFFLAGS"));
    }
    // SAFETY: after SIOCGIFFLAGS the union holds the flags member.
    unsafe {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads the name and flags from `req`, valid as above.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(fail("SIOCSIFFLAGS (bring lo up)"));
    }
    Ok(())
}

/// Sends `fd` over the UNIX socket `channel` with one marker byte.
fn send_fd(channel: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<(), SandboxError> {
    let fds = [fd.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let sent = sendmsg::<()>(
        channel.as_raw_fd(),
        &[IoSlice::new(b"L")],
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| SandboxError::sys("sendmsg", "proxy listener to coder", e))?;
    if sent != 1 {
        return Err(SandboxError::Network(
            "the proxy listener was not handed to coder".to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staying_in_the_hosts_namespace_fails_closed() {
        let host = current_namespace().unwrap();
        let err = enter_checked(host).unwrap_err();
        assert!(
            matches!(err, SandboxError::NetworkUnavailable { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("danger-full-access"), "{err}");
    }
}
