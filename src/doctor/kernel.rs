//! What the sandbox needs of this machine, judged by the sandbox's own probe: Landlock,
//! user and mount namespaces, seccomp, the private network, and a usable state directory.

use std::ffi::OsString;

use crate::config::{self};
use crate::sandbox::SandboxSupport;

use super::{Check, Status};

/// The state directory must exist or be creatable, and be writable: a run keeps its
/// transcript, session records and the CLI's config dir there and stops without them.
pub(super) fn check_state_dir(env: &[(OsString, OsString)]) -> Check {
    let Some(dir) = config::state_dir_of(env) else {
        return Check::new("state", Status::Fail, config::no_state_dir(env).to_string());
    };
    let shown = dir.display().to_string();
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    let writable = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe));
    match writable {
        Ok(()) => Check::new("state", Status::Ok, format!("{shown} is writable")),
        Err(e) => Check::new(
            "state",
            Status::Fail,
            format!("coder's state directory {shown} is not writable: {e}"),
        )
        .hint("set CODER_STATE_DIR to a private, writable directory"),
    }
    .detail("path", shown)
}

pub(super) fn check_landlock(confined: bool, support: &SandboxSupport) -> Check {
    let lsm = read_sysctl("/sys/kernel/security/lsm");
    let missing = if confined { Status::Fail } else { Status::Skip };
    let check = match (support.landlock_abi, &support.landlock_error) {
        (Some(abi), _) if support.can_confine() => {
            Check::new("landlock", Status::Ok, format!("ABI {abi}"))
        }
        (Some(abi), _) => Check::new(
            "landlock",
            missing,
            format!(
                "ABI {abi}: coder's sandbox needs ABI 6 (Linux 6.12) for its network and \
                 scoping rules"
            ),
        ),
        (None, error) => Check::new(
            "landlock",
            missing,
            match error {
                Some(e) => format!("Landlock is unavailable: {e}"),
                None => "Landlock is unavailable".to_owned(),
            },
        ),
    };
    let check = if confined && check.status == Status::Fail {
        check.hint(
            "read-only and workspace-write runs need Landlock ABI 6; only --sandbox \
             danger-full-access can run here",
        )
    } else {
        check
    };
    match lsm {
        Some(list) => check.detail("lsm", list),
        None => check,
    }
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

pub(super) fn check_namespaces(confined: bool, support: &SandboxSupport) -> Check {
    if !confined {
        return Check::new(
            "namespaces",
            Status::Skip,
            "not needed for danger-full-access",
        );
    }
    if support.user_namespaces {
        return Check::new(
            "namespaces",
            Status::Ok,
            "user, mount, PID, IPC and UTS namespaces work",
        );
    }
    let why = support
        .user_namespaces_error
        .clone()
        .unwrap_or_else(|| "unknown reason".to_owned());
    let mut check = if support.root_with_sys_admin {
        Check::new(
            "namespaces",
            Status::Ok,
            format!(
                "user namespaces unavailable ({why}); as root, mount, PID, IPC and UTS \
                 namespaces work"
            ),
        )
    } else {
        Check::new(
            "namespaces",
            Status::Fail,
            format!(
                "user namespaces unavailable ({why}): no private root, PID namespace or \
                 secret masks can be set up, so confined runs are refused (fail closed)"
            ),
        )
        .hint("only --sandbox danger-full-access can run here")
    };
    if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
    {
        check = check.hint("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)");
    }
    if read_sysctl("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        check = check.hint("user namespaces are disabled (user.max_user_namespaces=0)");
    }
    if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        check = check
            .hint("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)");
    }
    check
}

/// The agent's network layer (private network namespace, loopback, egress proxy), tried
/// for real with `coder sandbox -- true`: what fails here makes every confined run fail
/// closed. Not tried when the config file is unusable: `coder sandbox` reads its `deny`
/// globs and would fail for that, which the `config` check already says (this check used
/// to fail then too, blaming the network namespace).
pub(super) fn check_sandbox_network(confined: bool, config_usable: bool) -> Check {
    const NAME: &str = "egress";
    if !confined {
        return Check::new(NAME, Status::Skip, "not needed for danger-full-access");
    }
    if !config_usable {
        return Check::new(NAME, Status::Skip, "the config file is unusable");
    }
    match crate::sandbox::probe_network() {
        Ok(()) => Check::new(
            NAME,
            Status::Ok,
            format!(
                "private network namespace with loopback only; egress proxy on \
                 127.0.0.1:{} inside, served by coder",
                crate::sandbox::DEFAULT_PROXY_PORT
            ),
        ),
        Err(why) => Check::new(NAME, Status::Fail, why).hint(
            "confined runs need a network namespace for the egress proxy and fail with \
             sandbox_error without one; --sandbox danger-full-access runs unconfined",
        ),
    }
}

/// The seccomp layer: whether the filter can be installed here (it must, or confined
/// runs are refused), with its rules.
pub(super) fn check_seccomp(confined: bool, support: &SandboxSupport) -> Check {
    if !confined {
        return Check::new("seccomp", Status::Skip, "not needed for danger-full-access");
    }
    if support.seccomp {
        return Check::new(
            "seccomp",
            Status::Ok,
            format!(
                "filter of {} system calls can be installed",
                support.seccomp_rules
            ),
        )
        .detail(
            "rules",
            crate::sandbox::seccomp::RULES
                .iter()
                .map(|r| serde_json::json!({"call": r.name, "why": r.why}))
                .collect::<Vec<_>>(),
        );
    }
    Check::new(
        "seccomp",
        Status::Fail,
        format!(
            "seccomp is unavailable ({}): confined runs are refused (fail closed)",
            support.seccomp_error.as_deref().unwrap_or("unknown reason")
        ),
    )
    .hint("only --sandbox danger-full-access can run here")
}
