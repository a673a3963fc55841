//! Enforcement: turn this process into one the policy describes, right before `execve`.
//!
//! Order matters, and each step assumes the previous one:
//! 1. check that Landlock is there and complete enough, before touching anything;
//! 2. enter new mount, network, PID, IPC and UTS namespaces (a user namespace too, unless
//!    this is root with `CAP_SYS_ADMIN`), so nothing done here is seen outside; without
//!    them the sandbox refuses to run (fail closed);
//! 3. fork the namespace's init ([`super::pidns`]): the caller stays outside and waits,
//!    the rest runs as PID 1 of the new namespace; check the network namespace is new and
//!    bring up its loopback, later hand the egress proxy's listener to coder (`netns`);
//! 4. mask: re-open the workspace and check it is the directory the policy was resolved
//!    from (device, inode), then, beneath that descriptor, bind empty read-only files over
//!    secrets, read-only self-binds over secret directories, git dirs' guarded files and
//!    protected tool configs, and writable self-binds over `.git` directories (pinned);
//! 5. build a private root holding only the granted paths (masks included), a fresh
//!    `/proc` for the new PID namespace and the host masks ([`super::hostmask`]), pivot
//!    into it and make it read-only. Paths outside the policy then do not exist at all,
//!    which also closes what Landlock ABI 7 leaves open: `connect()` to pathname UNIX
//!    sockets and `stat()` of files the agent may not read;
//! 6. fork the agent (PID 2) from init, which stays behind to reap;
//! 7. drop every capability (root stays uid 0 but powerless: it cannot unmount a mask);
//! 8. Landlock: filesystem rights on the granted roots, TCP connect to the proxy's port
//!    only (defence in depth: the namespace has nothing else), no TCP bind, and scoping of
//!    signals and abstract UNIX sockets;
//! 9. the seccomp filter ([`super::seccomp`]), last.
//!
//! It must run in a single-threaded process (a fresh helper, or `coder sandbox` before it
//! starts any thread): namespaces and Landlock apply to the calling thread only, and the
//! forks copy only the calling thread. [`confine`] returns only in the agent's process;
//! the caller's own process becomes the outer waiter of [`super::pidns`] and exits with
//! the agent's status. Steps 1 to 3 but the proxy's listener need nothing of the policy:
//! [`prepare`] does them alone (the helper started before its spec is known does them
//! while coder still resolves the policy), [`confine_prepared`] the rest.

use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access as _, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use serde::Serialize;

use super::policy::{Access, Mode, PRIVATE_SHM, PlanFile, Policy, Root, WorkspaceDir};
use super::scan::MaskKind;
use super::{SandboxError, hostmask, pidns, scan, seccomp, sys};

/// The namespaces every confined child gets besides the user namespace.
const NAMESPACES: CloneFlags = CloneFlags::CLONE_NEWNS
    .union(CloneFlags::CLONE_NEWNET)
    .union(CloneFlags::CLONE_NEWPID)
    .union(CloneFlags::CLONE_NEWIPC)
    .union(CloneFlags::CLONE_NEWUTS);

/// The Landlock ABI whose rights coder handles (tested). ABI 6 brought the scopes; 7 adds
/// only audit flags, which coder leaves at their defaults, so a 6 kernel enforces fully.
const TARGET_ABI: ABI = ABI::V7;
const MIN_ABI: i32 = 6;

/// What [`confine`] put in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Confinement {
    pub mode: Mode,
    /// The kernel's Landlock ABI, when Landlock was applied.
    pub landlock_abi: Option<u32>,
    /// The agent sees only the granted paths (private root in a mount namespace).
    pub private_root: bool,
    /// A user namespace was created for the mount work (not needed as root).
    pub user_namespace: bool,
    /// How many masks were mounted.
    pub masks: usize,
    pub capabilities_dropped: bool,
    /// The egress proxy's port on the private loopback (network namespace in place).
    pub proxy_port: Option<u16>,
    /// The agent runs in its own PID, IPC and UTS namespaces (fresh `/proc`).
    pub pid_namespace: bool,
    /// How many host secrets (`/etc/shadow`, ...) were masked.
    pub host_masks: usize,
    /// The seccomp filter is installed.
    pub seccomp: bool,
    /// Weaker-than-usual confinement that was still acceptable, in words.
    pub warnings: Vec<String>,
}

impl Confinement {
    /// Nothing put in place yet.
    fn none(mode: Mode) -> Confinement {
        Confinement {
            mode,
            landlock_abi: None,
            private_root: false,
            user_namespace: false,
            masks: 0,
            capabilities_dropped: false,
            proxy_port: None,
            pid_namespace: false,
            host_masks: 0,
            seccomp: false,
            warnings: Vec::new(),
        }
    }
}

/// Apply `policy` to the calling process, which must be single-threaded and about to
/// `execve` the agent (with `policy.child_env(..)` as its environment). On error the
/// process may be half-confined and must not run the agent.
///
/// `net` is the UNIX socket on which the proxy's listener goes to coder (see
/// `netns`); a confined policy without it fails.
pub fn confine(policy: &Policy, net: Option<BorrowedFd<'_>>) -> Result<Confinement, SandboxError> {
    if !policy.mode.is_confined() {
        return Ok(Confinement::none(policy.mode));
    }
    let prepared = prepare()?;
    confine_prepared(prepared, policy, net)
}

/// What [`prepare`] did: the steps of confinement that need nothing of the policy.
pub struct Prepared {
    abi: i32,
    user_namespace: bool,
    init: pidns::InitLink,
}

/// Steps 1 to 3 of the module's list, which need nothing of the policy: Landlock is
/// there, the namespaces are entered, the namespace's init is forked (this returns in
/// init; the calling process becomes the outer waiter), its mounts are made private and
/// the new network namespace's loopback is up.
///
/// The helper started before its spec is known does them while coder is still resolving
/// the policy (see `sandbox::helper`); nothing runs of the agent before
/// [`confine_prepared`] has applied the whole policy. Same conditions and same failure
/// rule as [`confine`].
pub fn prepare() -> Result<Prepared, SandboxError> {
    let threads = thread_count();
    if threads != 1 {
        return Err(SandboxError::NotSingleThreaded { threads });
    }
    let abi = match sys::landlock_abi() {
        Ok(abi) if abi >= MIN_ABI => abi,
        Ok(abi) => {
            return Err(SandboxError::LandlockUnavailable {
                reason: format!("kernel ABI {abi} lacks signal and abstract-socket scoping"),
            });
        }
        Err(Errno::ENOSYS) => {
            return Err(SandboxError::LandlockUnavailable {
                reason: "the kernel is built without Landlock".to_string(),
            });
        }
        Err(Errno::EOPNOTSUPP) => {
            return Err(SandboxError::LandlockUnavailable {
                reason: "Landlock is disabled (add landlock to the lsm= boot parameter)"
                    .to_string(),
            });
        }
        Err(e) => {
            return Err(SandboxError::LandlockUnavailable {
                reason: e.to_string(),
            });
        }
    };
    sys::detach_controlling_tty();
    let host_net = super::netns::current_namespace()?;

    let parent_death = pidns::ParentDeath::record();
    let user_namespace = enter_namespaces()?;
    // Entering a user namespace changes the credentials, which clears the parent-death
    // signal: arm it again, and check that the parent is still there.
    parent_death.restore()?;
    let init = pidns::fork_init()?;
    let _ = nix::unistd::sethostname("coder-sandbox");
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| SandboxError::sys("make private", "/", e))?;
    super::netns::enter_checked(host_net)?;
    Ok(Prepared {
        abi,
        user_namespace,
        init,
    })
}

/// The rest of [`confine`] in init after [`prepare`]: the network, the private root built
/// from `policy`, the agent forked, capabilities, Landlock and seccomp. Returns in the
/// agent only.
pub fn confine_prepared(
    prepared: Prepared,
    policy: &Policy,
    net: Option<BorrowedFd<'_>>,
) -> Result<Confinement, SandboxError> {
    let Prepared {
        abi,
        user_namespace,
        init,
    } = prepared;
    if !policy.mode.is_confined() {
        // A process already in namespaces must not run an unconfined program.
        return Err(SandboxError::PreparedUnconfined);
    }
    let mut done = Confinement::none(policy.mode);
    done.user_namespace = user_namespace;
    done.pid_namespace = true;
    let cwd = std::env::current_dir().ok();
    // The network namespace was entered, checked and its loopback brought up by
    // `prepare` (init is in it, as its children will be): the proxy's listener is set up
    // here, with the capabilities the new namespaces give.
    done.proxy_port = Some(super::netns::setup(&policy.network, net)?.proxy_port);
    let workspace = WorkspaceDir::reopen(&policy.workspace, policy.workspace_id)?;
    (done.masks, done.host_masks) = build_private_root(policy, &workspace)?;
    done.private_root = true;
    pidns::fork_agent(init)?;

    let target = cwd
        .filter(|c| c.starts_with(&policy.workspace) || policy.is_granted(c))
        .unwrap_or_else(|| policy.workspace.clone());
    if nix::unistd::chdir(&target).is_err() {
        nix::unistd::chdir(&policy.workspace)
            .map_err(|e| SandboxError::sys("chdir", policy.workspace.display(), e))?;
    }
    sys::cloexec_from_3().map_err(|e| SandboxError::sys("close_range", "fds >= 3", e))?;
    sys::drop_capabilities().map_err(|e| SandboxError::sys("drop capabilities", "self", e))?;
    done.capabilities_dropped = true;

    restrict(policy, done.private_root)?;
    done.landlock_abi = u32::try_from(abi).ok();
    seccomp::install()?;
    done.seccomp = true;
    Ok(done)
}

/// Enter [`NAMESPACES`]. Root with `CAP_SYS_ADMIN` needs nothing more; anyone else needs a
/// user namespace too (mapping its own uid and gid to themselves). Returns whether a user
/// namespace was created. Without namespaces there is no sandbox: the PID namespace, the
/// private root and the masks all need one, and Landlock alone would leave the host's
/// processes, `/proc` and every path's existence open.
fn enter_namespaces() -> Result<bool, SandboxError> {
    if nix::unistd::geteuid().is_root()
        && has_cap_sys_admin()
        && nix::sched::unshare(NAMESPACES).is_ok()
    {
        return Ok(false);
    }
    let uid = nix::unistd::geteuid();
    let gid = nix::unistd::getegid();
    if let Err(e) = nix::sched::unshare(CloneFlags::CLONE_NEWUSER | NAMESPACES) {
        return Err(SandboxError::NamespaceUnavailable {
            reason: format!("unshare(CLONE_NEWUSER): {e}"),
        });
    }
    let write = |file: &str, text: String| {
        fs::write(file, text).map_err(|e| SandboxError::io(format!("write {file}"), e))
    };
    write("/proc/self/setgroups", "deny".to_string())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    Ok(true)
}

/// Mount every mask over the granted trees already mounted in the private root (at
/// `new_root`), refusing a target that is no longer what the scan saw. Masks in the
/// workspace are found beneath its mounted clone, whose identity is checked first, never
/// by walking a path through it; a mask outside every granted tree (`bound`) would not be
/// visible and is not mounted.
///
/// Mounted here rather than on the host's paths before the trees are cloned, each mask is
/// one mount: cloned along with its tree, it was two, plus a third detached with the
/// old root (at 1,000 masks, most of the helper's time).
fn apply_masks(
    policy: &Policy,
    source: Option<&OwnedFd>,
    new_root: &Path,
    bound: &[&Path],
) -> Result<usize, SandboxError> {
    if policy.masks.is_empty() {
        return Ok(0);
    }
    let inside = |path: &Path| new_root.join(path.strip_prefix("/").unwrap_or(path));
    let reopen = || {
        WorkspaceDir::reopen(&inside(&policy.workspace), policy.workspace_id).map_err(|_| {
            SandboxError::MaskTargetChanged {
                path: policy.workspace.clone(),
            }
        })
    };
    let mut workspace = reopen()?;
    let mut mounted = 0;
    for mask in &policy.masks {
        let changed = || SandboxError::MaskTargetChanged {
            path: mask.path.clone(),
        };
        let opened = match mask.path.strip_prefix(&policy.workspace) {
            Ok(rel) => scan::open_beneath(workspace.fd.as_fd(), rel, OFlag::O_PATH),
            Err(_) if bound.iter().any(|b| mask.path.starts_with(b)) => {
                sys::open_nofollow(&inside(&mask.path))
            }
            Err(_) => continue,
        };
        let target = match opened {
            Ok(fd) => fd,
            Err(Errno::ELOOP | Errno::ENOENT | Errno::ENOTDIR | Errno::EXDEV) => {
                return Err(changed());
            }
            Err(e) => return Err(SandboxError::sys("open", mask.path.display(), e)),
        };
        let stat = nix::sys::stat::fstat(target.as_fd())
            .map_err(|e| SandboxError::sys("stat", mask.path.display(), e))?;
        if stat.st_dev != mask.dev || stat.st_ino != mask.ino {
            return Err(changed());
        }
        let tree = match (&mask.kind, source) {
            (MaskKind::Empty, Some(source)) => sys::clone_tree(source.as_fd()),
            (MaskKind::Empty, None) => return Err(changed()),
            (MaskKind::ReadOnly | MaskKind::Pin, _) => sys::clone_tree(target.as_fd()),
        }
        .map_err(|e| SandboxError::sys("open_tree", mask.path.display(), e))?;
        let attrs = match mask.kind {
            MaskKind::Pin => sys::set_nosuid(tree.as_fd()),
            MaskKind::ReadOnly => sys::set_read_only(tree.as_fd()),
            // A clone keeps its source's mount flags, and the mask source was made
            // read-only, nosuid and nodev once (`mask_source_mount`).
            MaskKind::Empty => Ok(()),
        };
        attrs.map_err(|e| SandboxError::sys("mount_setattr", mask.path.display(), e))?;
        sys::move_mount(tree.as_fd(), target.as_fd())
            .map_err(|e| SandboxError::sys("move_mount", mask.path.display(), e))?;
        mounted += 1;
        // A mask on the workspace itself (a tree granted around it pins it, or protects
        // it whole) now covers the mount the descriptor names: the masks after it are
        // found beneath the new one, or they would be mounted where nothing sees them
        // (a `--write` of the workspace's parent showed every secret of the workspace).
        if mask.path == policy.workspace {
            workspace = reopen()?;
        }
    }
    Ok(mounted)
}

/// The empty file masks are cloned from, on a mount of its own.
///
/// Every mask is a recursive clone of its source (a plain one is refused where submounts
/// are locked), and a recursive clone visits every mount below the source's mount. Cloned
/// straight from the run directory, each mask would visit all the masks mounted before it
/// on the same file system, so a workspace with many secrets would cost the square of
/// their number; bound once over itself, the file is the root of a mount with no children.
fn mask_source_mount(path: &Path) -> Result<OwnedFd, SandboxError> {
    let open = || {
        let fd =
            sys::open_nofollow(path).map_err(|e| SandboxError::sys("open", path.display(), e))?;
        let meta = nix::sys::stat::fstat(fd.as_fd())
            .map_err(|e| SandboxError::sys("stat", path.display(), e))?;
        if meta.st_size != 0 || (meta.st_mode & libc::S_IFMT) != libc::S_IFREG {
            return Err(SandboxError::MaskTargetChanged {
                path: path.to_path_buf(),
            });
        }
        Ok((fd, (meta.st_dev, meta.st_ino)))
    };
    let (file, identity) = open()?;
    let tree = sys::clone_tree(file.as_fd())
        .map_err(|e| SandboxError::sys("open_tree", path.display(), e))?;
    sys::set_read_only(tree.as_fd())
        .map_err(|e| SandboxError::sys("mount_setattr", path.display(), e))?;
    sys::move_mount(tree.as_fd(), file.as_fd())
        .map_err(|e| SandboxError::sys("move_mount", path.display(), e))?;
    let (own, own_identity) = open()?;
    if own_identity != identity {
        return Err(SandboxError::MaskTargetChanged {
            path: path.to_path_buf(),
        });
    }
    Ok(own)
}

/// Build a root that holds only the granted paths, mount the masks in it, then pivot into
/// it. Returns the number of masks and of host masks mounted.
///
/// Every granted root is cloned before the new root's tmpfs exists, so no clone can
/// contain the new root itself.
fn build_private_root(
    policy: &Policy,
    workspace: &WorkspaceDir,
) -> Result<(usize, usize), SandboxError> {
    let ClonedRoots { clones, bound } = clone_roots(policy, workspace)?;
    let plan_tree = match &policy.plan_file {
        Some(plan) => Some(clone_plan_file(plan)?),
        None => None,
    };
    // The empty file secrets are masked with lives in the run dir, which the new root's
    // tmpfs is about to cover.
    let mask_source = if policy.needs_mask_source() && !policy.masks.is_empty() {
        Some(mask_source_mount(&policy.mask_source())?)
    } else {
        None
    };

    let root = NewRoot::mount(policy.root_mount_point())?;
    // Roots in `/dev/shm` (the run's CLI home in coder's scratch there) go onto the
    // agent's private tmpfs once it is mounted, below.
    let (in_shm, clones): (Vec<_>, Vec<_>) = clones
        .into_iter()
        .partition(|clone| clone.path.starts_with(PRIVATE_SHM));
    for clone in &clones {
        root.mount_clone(clone)?;
    }
    if let (Some(plan), Some(tree)) = (&policy.plan_file, plan_tree) {
        root.mount_plan_file(plan, &tree)?;
    }
    let shm = root.mount_private_shm()?;
    mount_in_private_shm(&shm, in_shm)?;
    root.link_standard_streams()?;
    root.make_home_and_aliases(policy, &bound)?;

    mount_fresh_proc(&root.inside(Path::new("/proc")))?;
    let masks = apply_masks(policy, mask_source.as_ref(), &root.path, &bound)?;
    let mut host_masks = hostmask::hide_host_secrets(&root.path, policy)?;
    if policy.roots.iter().any(|r| r.path == Path::new("/tmp")) {
        host_masks += hostmask::hide_tmp_sockets(&root.path)?;
    }
    // A plan run keeps the private root writable at the mount level: it is a tmpfs of
    // this run alone, Landlock lets nothing be created in it, and the CLI's Write tool
    // writes the plan in place only after its temporary sibling is refused with `EACCES`
    // (Landlock) rather than `EROFS` (a read-only mount).
    root.pivot_into(policy.plan_file.is_none())?;
    Ok((masks, host_masks))
}

/// A granted root cloned for the private root, waiting to be mounted in it.
struct ClonedRoot<'a> {
    path: &'a Path,
    is_dir: bool,
    /// The (device, inode) its place must have when it is nested in another root (it is
    /// then mounted over that place, reached by path through the outer clone).
    identity: Option<(u64, u64)>,
    tree: OwnedFd,
}

/// The granted roots cloned for the private root, in the policy's order, and the path of
/// every root cloned (a root beneath one of them comes with it and is not listed).
struct ClonedRoots<'a> {
    clones: Vec<ClonedRoot<'a>>,
    bound: Vec<&'a Path>,
}

/// Clone every granted root the private root is to show, read-only where the grant is.
fn clone_roots<'a>(
    policy: &'a Policy,
    workspace: &WorkspaceDir,
) -> Result<ClonedRoots<'a>, SandboxError> {
    let mut clones = Vec::new();
    // Each cloned root, and whether its mount is read-only.
    let mut bound: Vec<(&Path, bool)> = Vec::new();
    // The plan run whose plan file lies in the workspace keeps the workspace writable at
    // the mount level (see `clone_root`).
    let plan_in_workspace = policy.plan_file.as_ref().is_some_and(|p| p.in_workspace);
    for root in &policy.roots {
        // Every read grant is read-only at the mount level too, not by Landlock alone:
        // Landlock does not mediate metadata (`chmod`, `chown`, `utimensat`, ACLs,
        // extended attributes), and an agent running as root owns the system's files.
        // Until round eighteen's review the grants were writable mounts, and a root agent
        // made `/etc/passwd`, the host's `/dev/full` or a sysfs file world-writable, and
        // changed the modes of `--read` files and of the workspace in `read-only` mode (an
        // unprivileged agent: its own). A device keeps working on a read-only mount (its
        // writes go to the driver, not the file system), so device files keep `dev`.
        let read_only = match root.access {
            Access::Read => !(root.path == workspace.path && plan_in_workspace),
            Access::Device => true,
            Access::Write => false,
        };
        // A root beneath one already cloned comes with it, unless that one is read-only
        // and this one is not (a workspace in `/opt`): it is then cloned on its own and
        // mounted over its place in the read-only one.
        let nested_in = bound
            .iter()
            .filter(|(b, _)| root.path.starts_with(b))
            .map(|(_, outer_read_only)| *outer_read_only)
            .next_back();
        if nested_in.is_some_and(|outer_read_only| !outer_read_only || read_only) {
            continue;
        }
        // The host's /proc shows the host's processes: a fresh one is mounted instead.
        if root.path == Path::new("/proc") {
            continue;
        }
        clones.push(clone_root(root, workspace, read_only, nested_in.is_some())?);
        bound.push((&root.path, read_only));
    }
    let bound = bound.into_iter().map(|(path, _)| path).collect();
    Ok(ClonedRoots { clones, bound })
}

/// Clone one granted root (the workspace from the descriptor the policy was resolved
/// with), read-only if `read_only`, with its identity when it is `nested` in another.
fn clone_root<'a>(
    root: &'a Root,
    workspace: &WorkspaceDir,
    read_only: bool,
    nested: bool,
) -> Result<ClonedRoot<'a>, SandboxError> {
    let source = if root.path == workspace.path {
        workspace
            .fd
            .try_clone()
            .map_err(|e| SandboxError::io("duplicate the workspace descriptor", e))?
    } else {
        sys::open_nofollow(&root.path)
            .map_err(|e| SandboxError::sys("open", root.path.display(), e))?
    };
    let tree = sys::clone_tree(source.as_fd())
        .map_err(|e| SandboxError::sys("open_tree", root.path.display(), e))?;
    // A plan run (`coder plan`) whose plan file lies inside the workspace keeps the
    // workspace writable here: the CLI's Write tool falls back to writing in place
    // only after `EACCES`, which Landlock gives and a read-only mount does not.
    if read_only {
        let attrs = if root.is_dir {
            sys::set_read_only(tree.as_fd())
        } else {
            sys::set_read_only_keep_devices(tree.as_fd())
        };
        attrs.map_err(|e| SandboxError::sys("mount_setattr", root.path.display(), e))?;
    }
    // A nested root is mounted over its place in the clone around it, reached by
    // path: that place must be the very file it was cloned from.
    let identity = if nested {
        let stat = nix::sys::stat::fstat(source.as_fd())
            .map_err(|e| SandboxError::sys("stat", root.path.display(), e))?;
        Some((stat.st_dev, stat.st_ino))
    } else {
        None
    };
    Ok(ClonedRoot {
        path: &root.path,
        is_dir: root.is_dir,
        identity,
        tree,
    })
}

/// The private root being built: a tmpfs of this run alone at the policy's mount point,
/// where the host's paths are made (`inside`) and the granted trees mounted.
struct NewRoot {
    path: PathBuf,
}

impl NewRoot {
    /// Mount the private root's tmpfs at `path`.
    fn mount(path: PathBuf) -> Result<NewRoot, SandboxError> {
        nix::mount::mount(
            Some("tmpfs"),
            &path,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755,size=16m"),
        )
        .map_err(|e| SandboxError::sys("mount tmpfs", path.display(), e))?;
        Ok(NewRoot { path })
    }

    /// Where the host's absolute `path` is in the private root.
    fn inside(&self, path: &Path) -> PathBuf {
        self.path.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Mount a cloned root at its place. A nested root's place exists in the (read-only)
    /// clone it lies in and must be the file it was cloned from; anything else gets its
    /// place made on the private root's tmpfs.
    fn mount_clone(&self, clone: &ClonedRoot<'_>) -> Result<(), SandboxError> {
        let point = self.inside(clone.path);
        if clone.identity.is_none() {
            if let Some(parent) = point.parent() {
                make_dirs(parent)?;
            }
            if clone.is_dir {
                make_dirs(&point)?;
            } else {
                make_file(&point)?;
            }
        }
        let target = sys::open_nofollow(&point)
            .map_err(|e| SandboxError::sys("open", point.display(), e))?;
        if let Some(identity) = clone.identity {
            let stat = nix::sys::stat::fstat(target.as_fd())
                .map_err(|e| SandboxError::sys("stat", point.display(), e))?;
            if (stat.st_dev, stat.st_ino) != identity {
                return Err(SandboxError::GrantMoved {
                    path: clone.path.to_path_buf(),
                });
            }
        }
        sys::move_mount(clone.tree.as_fd(), target.as_fd())
            .map_err(|e| SandboxError::sys("move_mount", clone.path.display(), e))
    }

    /// Mount the plan file's clone over the file itself where a granted tree (the
    /// workspace) holds it, else on a name of its own in the private root.
    fn mount_plan_file(&self, plan: &PlanFile, tree: &OwnedFd) -> Result<(), SandboxError> {
        let point = self.inside(&plan.path);
        match fs::symlink_metadata(&point) {
            Ok(meta) if meta.is_file() => {}
            Ok(_) => {
                return Err(SandboxError::PlanFileChanged {
                    path: plan.path.clone(),
                });
            }
            Err(_) => {
                if let Some(parent) = point.parent() {
                    make_dirs(parent)?;
                }
                make_file(&point)?;
            }
        }
        let target = sys::open_nofollow(&point)
            .map_err(|e| SandboxError::sys("open", point.display(), e))?;
        sys::move_mount(tree.as_fd(), target.as_fd())
            .map_err(|e| SandboxError::sys("move_mount", plan.path.display(), e))
    }

    /// Mount the agent's private `/dev/shm` (a tmpfs of its own) and return its place.
    fn mount_private_shm(&self) -> Result<PathBuf, SandboxError> {
        let shm = self.inside(Path::new(PRIVATE_SHM));
        make_dirs(&shm)?;
        nix::mount::mount(
            Some("tmpfs"),
            &shm,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        )
        .map_err(|e| SandboxError::sys("mount tmpfs", shm.display(), e))?;
        Ok(shm)
    }

    /// `/dev/fd`, `/dev/stdin`, `/dev/stdout` and `/dev/stderr`, as a system's `/dev` has
    /// them, where the granted `/dev` does not.
    fn link_standard_streams(&self) -> Result<(), SandboxError> {
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            let link = self.inside(Path::new("/dev")).join(name);
            if fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(target, &link)
                    .map_err(|e| SandboxError::io(format!("create {}", link.display()), e))?;
            }
        }
        Ok(())
    }

    /// The home directory's place when no granted tree holds it, and the policy's
    /// aliases (symlinks such as `/bin` -> `usr/bin`) where nothing granted covers them.
    fn make_home_and_aliases(&self, policy: &Policy, bound: &[&Path]) -> Result<(), SandboxError> {
        if let Some(home) = &policy.home
            && !bound.iter().any(|b| home.starts_with(b))
        {
            make_dirs(&self.inside(home))?;
        }
        for alias in &policy.aliases {
            let covered = bound.iter().any(|b| alias.path.starts_with(b));
            let link = self.inside(&alias.path);
            if covered || fs::symlink_metadata(&link).is_ok() {
                continue;
            }
            if let Some(parent) = link.parent() {
                make_dirs(parent)?;
            }
            std::os::unix::fs::symlink(&alias.target, &link)
                .map_err(|e| SandboxError::io(format!("create {}", link.display()), e))?;
        }
        Ok(())
    }

    /// Pivot into the private root, then make it read-only at the mount level when
    /// `read_only`.
    fn pivot_into(self, read_only: bool) -> Result<(), SandboxError> {
        let root_fd = sys::open_nofollow(&self.path)
            .map_err(|e| SandboxError::sys("open", self.path.display(), e))?;
        crate::phases::mark("sandbox.mounted");
        sys::pivot_into(&root_fd)
            .map_err(|e| SandboxError::sys("pivot_root", self.path.display(), e))?;
        crate::phases::mark("sandbox.pivoted");
        if read_only {
            sys::remount_root_read_only()
                .map_err(|e| SandboxError::sys("remount read-only", "/", e))?;
        }
        Ok(())
    }
}

/// `fs::create_dir_all`, its error naming the path.
fn make_dirs(path: &Path) -> Result<(), SandboxError> {
    fs::create_dir_all(path).map_err(|e| SandboxError::io(format!("create {}", path.display()), e))
}

/// An empty file at `path` (made or truncated), its error naming the path.
fn make_file(path: &Path) -> Result<(), SandboxError> {
    fs::File::create(path)
        .map(drop)
        .map_err(|e| SandboxError::io(format!("create {}", path.display()), e))
}

/// Mounts the granted roots that lie in `/dev/shm` (coder's own scratch: the run's CLI
/// home, `/dev/shm/coder-<uid>/cli-runs/<pid>-<id>`) in the agent's private tmpfs mounted
/// at `shm`, each on a skeleton of its own: a small tmpfs at the root's first directory
/// below `/dev/shm`, holding only the directories down to the root, made read-only once
/// the root is mounted. The agent may create and rename anything in its private tmpfs,
/// but not the skeleton: its top is a mount point (`EBUSY`) and the rest a read-only file
/// system, so the path to the CLI's home, which the CLI reads its settings and hooks by,
/// stays the one coder made; nothing else of coder's scratch (other runs' homes) exists
/// there.
fn mount_in_private_shm(shm: &Path, roots: Vec<ClonedRoot<'_>>) -> Result<(), SandboxError> {
    let mut skeletons: Vec<PathBuf> = Vec::new();
    for ClonedRoot {
        path, is_dir, tree, ..
    } in roots
    {
        let below = path.strip_prefix(PRIVATE_SHM).unwrap_or(path);
        let Some(top) = below.components().next() else {
            continue;
        };
        let top = shm.join(top);
        // A root right below `/dev/shm` is a mount point itself once mounted: no skeleton.
        let alone = below.components().count() == 1;
        if !alone && !skeletons.contains(&top) {
            fs::create_dir(&top)
                .map_err(|e| SandboxError::io(format!("create {}", top.display()), e))?;
            nix::mount::mount(
                Some("tmpfs"),
                &top,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("mode=0755,size=64k,nr_inodes=64"),
            )
            .map_err(|e| SandboxError::sys("mount tmpfs", top.display(), e))?;
            skeletons.push(top);
        }
        let point = shm.join(below);
        if let Some(parent) = point.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| SandboxError::io(format!("create {}", parent.display()), e))?;
        }
        let made = if is_dir {
            fs::create_dir(&point)
        } else {
            fs::File::create(&point).map(drop)
        };
        made.map_err(|e| SandboxError::io(format!("create {}", point.display()), e))?;
        let target = sys::open_nofollow(&point)
            .map_err(|e| SandboxError::sys("open", point.display(), e))?;
        sys::move_mount(tree.as_fd(), target.as_fd())
            .map_err(|e| SandboxError::sys("move_mount", path.display(), e))?;
    }
    for top in skeletons {
        nix::mount::mount(
            None::<&str>,
            &top,
            None::<&str>,
            MsFlags::MS_REMOUNT
                | MsFlags::MS_BIND
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV
                | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(|e| SandboxError::sys("remount read-only", top.display(), e))?;
    }
    Ok(())
}

/// A detached mount of the plan file, refusing a path that no longer leads to the file
/// the policy was resolved with (a symlink anywhere, another inode, not a regular file).
fn clone_plan_file(plan: &PlanFile) -> Result<OwnedFd, SandboxError> {
    let changed = || SandboxError::PlanFileChanged {
        path: plan.path.clone(),
    };
    let fd = sys::open_nofollow(&plan.path).map_err(|_| changed())?;
    let stat = nix::sys::stat::fstat(fd.as_fd())
        .map_err(|e| SandboxError::sys("stat", plan.path.display(), e))?;
    if (stat.st_mode & libc::S_IFMT) != libc::S_IFREG
        || (stat.st_dev, stat.st_ino) != plan.id
        || stat.st_nlink != 1
    {
        return Err(changed());
    }
    let tree = sys::clone_tree(fd.as_fd())
        .map_err(|e| SandboxError::sys("open_tree", plan.path.display(), e))?;
    sys::set_nosuid(tree.as_fd())
        .map_err(|e| SandboxError::sys("mount_setattr", plan.path.display(), e))?;
    Ok(tree)
}

/// Mount a `/proc` of this PID namespace at `point` (this process must be inside it).
fn mount_fresh_proc(point: &Path) -> Result<(), SandboxError> {
    fs::create_dir_all(point)
        .map_err(|e| SandboxError::io(format!("create {}", point.display()), e))?;
    nix::mount::mount(
        Some("proc"),
        point,
        Some("proc"),
        // Read-only: Landlock grants `/proc` read access only, but a `chmod` is no access
        // it mediates, and the mode of a `/proc` entry that is not a process's is the
        // kernel's own, shared by every `/proc` of the host (a root agent's `chmod` of
        // `/proc/version` showed in the next `/proc` mounted outside, round eighteen).
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(|e| SandboxError::sys("mount proc", point.display(), e))
}

/// Create and enforce the Landlock ruleset.
fn restrict(policy: &Policy, private_root: bool) -> Result<(), SandboxError> {
    let ll = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(ll)?
        .handle_access(AccessNet::from_all(TARGET_ABI))
        .map_err(ll)?
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(ll)?
        .create()
        .map_err(ll)?;

    let device: BitFlags<AccessFs> =
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let mut rules: Vec<(PathBuf, BitFlags<AccessFs>, bool)> = policy
        .roots
        .iter()
        .map(|root| {
            let access = match root.access {
                Access::Read => AccessFs::from_read(TARGET_ABI),
                Access::Device => device,
                Access::Write => AccessFs::from_all(TARGET_ABI),
            };
            (root.path.clone(), access, root.is_dir)
        })
        .collect();
    if private_root {
        // Only granted paths exist in the private root: listing its directories reveals
        // nothing, and programs that walk up from their cwd keep working.
        rules.push((PathBuf::from("/"), AccessFs::ReadDir.into(), true));
        rules.push((
            PathBuf::from(PRIVATE_SHM),
            AccessFs::from_all(TARGET_ABI),
            true,
        ));
    }
    if let Some(plan) = &policy.plan_file {
        // Read, write and truncate the plan file: no execute, and (a file has no
        // directory rights) no rename, unlink or link of it.
        rules.push((
            plan.path.clone(),
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
            false,
        ));
    }
    for (path, mut access, is_dir) in rules {
        if !is_dir {
            access &= AccessFs::from_file(TARGET_ABI);
        }
        let fd =
            sys::open_nofollow(&path).map_err(|e| SandboxError::sys("open", path.display(), e))?;
        ruleset = ruleset.add_rule(PathBeneath::new(fd, access)).map_err(ll)?;
    }
    for port in &policy.connect_ports {
        ruleset = ruleset
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(ll)?;
    }
    let status = ruleset.restrict_self().map_err(ll)?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        let abi = sys::landlock_abi().ok().and_then(|a| u32::try_from(a).ok());
        return Err(SandboxError::LandlockPartial {
            abi: abi.unwrap_or(0),
        });
    }
    Ok(())
}

fn thread_count() -> usize {
    status_field("Threads:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX)
}

pub(crate) fn has_cap_sys_admin() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    status_field("CapEff:")
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

fn status_field(name: &str) -> Option<String> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_string())
}
