//! The seccomp filter: the system calls the agent may not make, for what Landlock and the
//! namespaces do not cover.
//!
//! Installed last in [`super::confine`], after `no_new_privs` and Landlock, so nothing of
//! the setup itself is filtered. Everything not listed is allowed: this is a deny-list of
//! kernel surfaces a coding agent has no use for and an attacker does (keyrings, ptrace,
//! new namespaces and mounts, BPF, io_uring), plus argument checks for the two rules
//! Landlock cannot express: no setuid/setgid bits on files (`chmod`-family and create
//! modes), and only plain TCP/UDP and AF_UNIX sockets.
//!
//! The table [`RULES`] is the whole policy, one entry per system call with the reason.
//! A refused call fails with `EPERM`; a few fail with `ENOSYS` instead, so that the
//! programs that probe them (`clone3`, `openat2`, `io_uring`) fall back to an older,
//! checkable call as they do on old kernels. On x86_64 the x32 ABI (system call numbers
//! with bit 30 set) is refused as a whole: it reaches the same kernel code under other
//! numbers, which would slip past the table.
//!
//! Pointer arguments cannot be checked by seccomp (it sees the pointer, not what it points
//! to): that is why `clone3` and `openat2`, whose flags and modes sit in a structure, are
//! refused outright.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::SandboxError;

/// How a listed call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `EPERM`: not allowed here.
    Perm,
    /// `ENOSYS`: looks absent, so callers fall back to a call the filter can check.
    NoSys,
}

/// When a listed call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    /// Always.
    Always,
    /// When the mode argument (index) has `S_ISUID` or `S_ISGID`.
    SetIdMode(u8),
    /// When the flags argument (first index) has `O_CREAT` or `O_TMPFILE` and the mode
    /// argument (second index) has `S_ISUID` or `S_ISGID`.
    CreateSetId { flags: u8, mode: u8 },
    /// `socket(domain, type, protocol)` other than AF_UNIX, or AF_INET/AF_INET6 with a
    /// protocol other than 0, TCP or UDP.
    SocketFamily,
    /// The flags argument (index) has `MSG_FASTOPEN`.
    FastOpen(u8),
    /// The flags argument (index) asks for a new namespace (`clone`).
    NewNamespace(u8),
}

/// One row of the filter: a system call, when it is refused, how, and why.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rule {
    pub name: &'static str,
    pub nr: libc::c_long,
    pub when: When,
    pub refusal: Refusal,
    pub why: &'static str,
}

const fn rule(
    name: &'static str,
    nr: libc::c_long,
    when: When,
    refusal: Refusal,
    why: &'static str,
) -> Rule {
    Rule {
        name,
        nr,
        when,
        refusal,
        why,
    }
}

use Refusal::{NoSys, Perm};
use When::{Always, CreateSetId, FastOpen, NewNamespace, SetIdMode, SocketFamily};

const KEYRING: &str = "kernel keyrings are shared beyond the sandbox (session and user keys)";
const PTRACE: &str = "reads or writes another process's memory or descriptors";
const MOUNT: &str = "changes the mount tree (could uncover what the private root hides)";
const NS: &str = "enters or creates namespaces (more kernel surface, ways around the setup)";
const SETID: &str = "setuid/setgid files would run with the agent's uid outside the sandbox";
const KERNEL: &str = "kernel surface a coding agent has no use for";

/// The filter, one system call per row. See the module documentation.
pub(crate) const RULES: &[Rule] = &[
    rule("add_key", libc::SYS_add_key, Always, Perm, KEYRING),
    rule("request_key", libc::SYS_request_key, Always, Perm, KEYRING),
    rule("keyctl", libc::SYS_keyctl, Always, Perm, KEYRING),
    rule("ptrace", libc::SYS_ptrace, Always, Perm, PTRACE),
    rule(
        "process_vm_readv",
        libc::SYS_process_vm_readv,
        Always,
        Perm,
        PTRACE,
    ),
    rule(
        "process_vm_writev",
        libc::SYS_process_vm_writev,
        Always,
        Perm,
        PTRACE,
    ),
    rule("kcmp", libc::SYS_kcmp, Always, Perm, PTRACE),
    rule("pidfd_getfd", libc::SYS_pidfd_getfd, Always, Perm, PTRACE),
    rule("mount", libc::SYS_mount, Always, Perm, MOUNT),
    rule("umount2", libc::SYS_umount2, Always, Perm, MOUNT),
    rule("pivot_root", libc::SYS_pivot_root, Always, Perm, MOUNT),
    rule("chroot", libc::SYS_chroot, Always, Perm, MOUNT),
    rule("move_mount", libc::SYS_move_mount, Always, Perm, MOUNT),
    rule("open_tree", libc::SYS_open_tree, Always, Perm, MOUNT),
    rule("fsopen", libc::SYS_fsopen, Always, Perm, MOUNT),
    rule("fsmount", libc::SYS_fsmount, Always, Perm, MOUNT),
    rule("fsconfig", libc::SYS_fsconfig, Always, Perm, MOUNT),
    rule("fspick", libc::SYS_fspick, Always, Perm, MOUNT),
    rule(
        "mount_setattr",
        libc::SYS_mount_setattr,
        Always,
        Perm,
        MOUNT,
    ),
    rule("unshare", libc::SYS_unshare, Always, Perm, NS),
    rule("setns", libc::SYS_setns, Always, Perm, NS),
    rule("clone", libc::SYS_clone, NewNamespace(0), Perm, NS),
    rule(
        "clone3",
        libc::SYS_clone3,
        Always,
        NoSys,
        "its flags sit in a structure seccomp cannot read; libc falls back to clone",
    ),
    rule("chmod", SYS_CHMOD, SetIdMode(1), Perm, SETID),
    rule("fchmod", libc::SYS_fchmod, SetIdMode(1), Perm, SETID),
    rule("fchmodat", libc::SYS_fchmodat, SetIdMode(2), Perm, SETID),
    rule("fchmodat2", SYS_FCHMODAT2, SetIdMode(2), Perm, SETID),
    rule("mknod", SYS_MKNOD, SetIdMode(1), Perm, SETID),
    rule("mknodat", libc::SYS_mknodat, SetIdMode(2), Perm, SETID),
    rule("creat", SYS_CREAT, SetIdMode(1), Perm, SETID),
    rule(
        "open",
        SYS_OPEN,
        CreateSetId { flags: 1, mode: 2 },
        Perm,
        SETID,
    ),
    rule(
        "openat",
        libc::SYS_openat,
        CreateSetId { flags: 2, mode: 3 },
        Perm,
        SETID,
    ),
    rule(
        "openat2",
        libc::SYS_openat2,
        Always,
        NoSys,
        "its mode sits in a structure seccomp cannot read; callers fall back to openat",
    ),
    rule(
        "socket",
        libc::SYS_socket,
        SocketFamily,
        Perm,
        "only AF_UNIX and plain TCP/UDP: other families and protocols (netlink, packet, \
         MPTCP, SCTP, vsock, ...) are surface Landlock's TCP rules do not cover",
    ),
    rule(
        "sendto",
        libc::SYS_sendto,
        FastOpen(3),
        Perm,
        "TCP Fast Open connects without connect()",
    ),
    rule(
        "sendmsg",
        libc::SYS_sendmsg,
        FastOpen(2),
        Perm,
        "TCP Fast Open connects without connect()",
    ),
    rule(
        "sendmmsg",
        libc::SYS_sendmmsg,
        FastOpen(3),
        Perm,
        "TCP Fast Open connects without connect()",
    ),
    rule(
        "io_uring_setup",
        libc::SYS_io_uring_setup,
        Always,
        NoSys,
        "io_uring performs opens and socket calls the filter never sees",
    ),
    rule(
        "io_uring_enter",
        libc::SYS_io_uring_enter,
        Always,
        NoSys,
        KERNEL,
    ),
    rule(
        "io_uring_register",
        libc::SYS_io_uring_register,
        Always,
        NoSys,
        KERNEL,
    ),
    rule("bpf", libc::SYS_bpf, Always, Perm, KERNEL),
    rule(
        "perf_event_open",
        libc::SYS_perf_event_open,
        Always,
        Perm,
        KERNEL,
    ),
    rule("userfaultfd", libc::SYS_userfaultfd, Always, Perm, KERNEL),
    rule("kexec_load", libc::SYS_kexec_load, Always, Perm, KERNEL),
    rule("kexec_file_load", SYS_KEXEC_FILE_LOAD, Always, Perm, KERNEL),
    rule("init_module", libc::SYS_init_module, Always, Perm, KERNEL),
    rule("finit_module", libc::SYS_finit_module, Always, Perm, KERNEL),
    rule(
        "delete_module",
        libc::SYS_delete_module,
        Always,
        Perm,
        KERNEL,
    ),
    rule(
        "open_by_handle_at",
        libc::SYS_open_by_handle_at,
        Always,
        Perm,
        "opens files by handle, around every path check",
    ),
    rule(
        "syslog",
        libc::SYS_syslog,
        Always,
        Perm,
        "the host's kernel log",
    ),
    rule("acct", libc::SYS_acct, Always, Perm, KERNEL),
    rule("quotactl", libc::SYS_quotactl, Always, Perm, KERNEL),
    rule("swapon", libc::SYS_swapon, Always, Perm, KERNEL),
    rule("swapoff", libc::SYS_swapoff, Always, Perm, KERNEL),
];

#[cfg(target_arch = "x86_64")]
const SYS_CHMOD: libc::c_long = libc::SYS_chmod;
#[cfg(target_arch = "x86_64")]
const SYS_MKNOD: libc::c_long = libc::SYS_mknod;
#[cfg(target_arch = "x86_64")]
const SYS_CREAT: libc::c_long = libc::SYS_creat;
#[cfg(target_arch = "x86_64")]
const SYS_OPEN: libc::c_long = libc::SYS_open;
#[cfg(target_arch = "x86_64")]
const SYS_KEXEC_FILE_LOAD: libc::c_long = libc::SYS_kexec_file_load;
/// `fchmodat2` (Linux 6.6) has the same number on every architecture.
const SYS_FCHMODAT2: libc::c_long = 452;

// aarch64 has only the `*at` forms: these rows then name a number no call uses (-1 is
// skipped when the filter is built).
#[cfg(not(target_arch = "x86_64"))]
const SYS_CHMOD: libc::c_long = -1;
#[cfg(not(target_arch = "x86_64"))]
const SYS_MKNOD: libc::c_long = -1;
#[cfg(not(target_arch = "x86_64"))]
const SYS_CREAT: libc::c_long = -1;
#[cfg(not(target_arch = "x86_64"))]
const SYS_OPEN: libc::c_long = -1;
#[cfg(not(target_arch = "x86_64"))]
const SYS_KEXEC_FILE_LOAD: libc::c_long = libc::SYS_kexec_file_load;

const MSG_FASTOPEN: u64 = 0x2000_0000;
/// `__O_TMPFILE` (`O_TMPFILE` is it plus `O_DIRECTORY`).
const O_TMPFILE_BIT: u64 = 0o20_000_000;
const NEW_NAMESPACE_FLAGS: [u64; 8] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

/// Build the programs (one per refusal errno, plus the x32 guard on x86_64). Pure: no
/// system call is made, so it can run (and be tested) anywhere.
pub(crate) fn programs() -> Result<Vec<BpfProgram>, SandboxError> {
    let err = |e: seccompiler::BackendError| SandboxError::Seccomp(e.to_string());
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    out.push(x32_guard());
    for (refusal, errno) in [(Perm, libc::EPERM), (NoSys, libc::ENOSYS)] {
        let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for row in RULES.iter().filter(|r| r.refusal == refusal && r.nr >= 0) {
            let conditions = conditions(row.when).map_err(err)?;
            let entry = map.entry(row.nr).or_default();
            for c in conditions {
                entry.push(SeccompRule::new(c).map_err(err)?);
            }
        }
        let filter = SeccompFilter::new(
            map,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .map_err(err)?;
        out.push(BpfProgram::try_from(filter).map_err(err)?);
    }
    Ok(out)
}

/// Install the filter on the calling thread (sets `no_new_privs` too). Last step before
/// `execve`.
pub(crate) fn install() -> Result<(), SandboxError> {
    for program in programs()? {
        seccompiler::apply_filter(&program).map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    }
    Ok(())
}

/// The alternatives (any one refuses) of conjunctions (all must hold) for `when`. An
/// empty list means "always" to seccompiler.
fn conditions(when: When) -> Result<Vec<Vec<SeccompCondition>>, seccompiler::BackendError> {
    use SeccompCmpArgLen::Dword;
    let masked =
        |arg: u8, bit: u64| SeccompCondition::new(arg, Dword, SeccompCmpOp::MaskedEq(bit), bit);
    let eq = |arg: u8, value: u64| SeccompCondition::new(arg, Dword, SeccompCmpOp::Eq, value);
    let ne = |arg: u8, value: u64| SeccompCondition::new(arg, Dword, SeccompCmpOp::Ne, value);
    let setid = [libc::S_ISUID as u64, libc::S_ISGID as u64];
    Ok(match when {
        Always => Vec::new(),
        SetIdMode(arg) => setid
            .iter()
            .map(|bit| masked(arg, *bit).map(|c| vec![c]))
            .collect::<Result<_, _>>()?,
        CreateSetId { flags, mode } => {
            let mut out = Vec::new();
            for create in [libc::O_CREAT as u64, O_TMPFILE_BIT] {
                for bit in setid {
                    out.push(vec![masked(flags, create)?, masked(mode, bit)?]);
                }
            }
            out
        }
        SocketFamily => {
            let unix = libc::AF_UNIX as u64;
            let (inet, inet6) = (libc::AF_INET as u64, libc::AF_INET6 as u64);
            let mut out = vec![vec![ne(0, unix)?, ne(0, inet)?, ne(0, inet6)?]];
            for family in [inet, inet6] {
                out.push(vec![
                    eq(0, family)?,
                    ne(2, 0)?,
                    ne(2, libc::IPPROTO_TCP as u64)?,
                    ne(2, libc::IPPROTO_UDP as u64)?,
                ]);
            }
            out
        }
        FastOpen(arg) => vec![vec![masked(arg, MSG_FASTOPEN)?]],
        NewNamespace(arg) => NEW_NAMESPACE_FLAGS
            .iter()
            .map(|bit| {
                SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(*bit),
                    *bit,
                )
                .map(|c| vec![c])
            })
            .collect::<Result<_, _>>()?,
    })
}

/// A raw program refusing every x32 system call (`nr >= 0x40000000` under the x86_64
/// audit arch) with `ENOSYS`; other architectures' calls pass to the next filter, which
/// kills them (seccompiler checks the arch).
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_BIT: u32 = 0x4000_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        op(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        op(BPF_JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        op(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        op(BPF_JGE_K, 0, 1, X32_BIT),
        op(BPF_RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
        op(BPF_RET_K, 0, 0, RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_builds_and_names_are_unique() {
        let programs = programs().unwrap();
        assert!(programs.len() >= 2);
        let mut names: Vec<_> = RULES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "one row per system call");
        assert!(RULES.iter().all(|r| !r.why.is_empty()));
    }

    #[test]
    fn the_classes_the_design_names_are_covered() {
        for name in [
            "keyctl",
            "add_key",
            "ptrace",
            "process_vm_readv",
            "unshare",
            "setns",
            "mount",
            "chmod",
            "fchmodat",
            "fchmodat2",
            "socket",
            "sendto",
            "io_uring_setup",
            "bpf",
        ] {
            assert!(RULES.iter().any(|r| r.name == name), "{name}");
        }
    }
}
