//! Starting the child and learning, before any output is read, whether the program really
//! started.
//!
//! A confined child starts through the helper process (see [`crate::sandbox::helper`]),
//! which confines itself and then execs the program; the first attempt's helper is started
//! early ([`StartedHelper`], on a thread of its own: [`PendingHelper`]) and given its spec
//! when the attempt starts. An unconfined one (`danger-full-access`) needs only the
//! helper's first steps (a new session, the parent-death signal, no inherited
//! descriptors), which are single system calls: they run between fork and exec of the
//! program itself, which spares a second start of coder's own binary (about a millisecond
//! per run).

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use crate::pipeline::child::ChildSpec;
use crate::sandbox::helper::{HELPER_ARG, HelperFailure, HelperSpec, HelperStage};

/// A started child with its pipes.
pub struct Spawned {
    pub child: Child,
    pub pid: i32,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The helper reported a failure before `execve` of the program.
    #[error("{0}")]
    Helper(HelperFailure),
    /// coder could not start its own helper.
    #[error("cannot start the child process: {0}")]
    Io(#[from] std::io::Error),
}

/// Spawns `spec`, through `started` if it is confined and a helper was started for it.
/// Returns once the program has been exec'd (or failed to be).
pub async fn spawn(
    spec: &ChildSpec,
    started: Option<StartedHelper>,
) -> Result<Spawned, SpawnError> {
    let (mut child, net) = match (&spec.policy, started) {
        (Some(_), Some(started)) => started.finish(spec).await?,
        (Some(_), None) => spawn_through_helper(spec).await?,
        (None, _) => (spawn_unconfined(spec)?, None),
    };
    // The helper has sent the egress proxy's listener by now (see `sandbox::netns`).
    if let (Some(egress), Some(net)) = (&spec.egress, net) {
        egress.attach(net);
    }
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other("the child exited before it could be tracked"))?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(SpawnError::Io(std::io::Error::other("child pipes missing")));
    };
    Ok(Spawned {
        child,
        pid,
        stdin,
        stdout,
        stderr,
    })
}

/// Spawns `spec` unconfined: the program itself, made a session leader that dies with coder.
fn spawn_unconfined(spec: &ChildSpec) -> Result<Child, SpawnError> {
    // What the closure reports when coder is already gone; `execve` never fails with it.
    const ORPHANED: i32 = libc::ESRCH;
    let parent_pid = std::process::id() as libc::pid_t;
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    // SAFETY: the closure runs in the forked child before exec. It only makes system calls
    // through libc (setsid, prctl, getppid, close_range), which are async-signal-safe, and
    // builds its errors from plain numbers: it neither allocates nor touches memory shared
    // with other threads.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() == -1
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            // coder may have died before the death signal was armed.
            if libc::getppid() != parent_pid {
                return Err(std::io::Error::from_raw_os_error(ORPHANED));
            }
            // Nothing coder inherited leaks into the program (the standard library's own
            // exec-error pipe is close-on-exec already). Best effort, as in the helper: a
            // kernel before 5.9 has no close_range, and what coder opens itself is
            // close-on-exec anyway.
            let cloexec = libc::CLOSE_RANGE_CLOEXEC as libc::c_int;
            libc::close_range(3, libc::c_uint::MAX, cloexec);
            Ok(())
        });
    }
    command.spawn().map_err(|e| {
        let (stage, message) = match e.raw_os_error() {
            Some(ORPHANED) => (
                HelperStage::Setup,
                "the supervisor exited before the child started".to_owned(),
            ),
            errno => (
                HelperStage::Exec,
                format!(
                    "cannot execute {}: {}",
                    spec.program.display(),
                    errno.map_or_else(|| e.to_string(), |n| Errno::from_raw(n).desc().to_owned())
                ),
            ),
        };
        SpawnError::Helper(HelperFailure {
            stage,
            errno: e.raw_os_error(),
            message,
        })
    })
}

/// Spawns `spec` via `current_exe __exec-helper`, which confines itself first. Returns the
/// child and coder's end of its network channel.
async fn spawn_through_helper(spec: &ChildSpec) -> Result<(Child, Option<OwnedFd>), SpawnError> {
    let spec_json = helper_spec_json(spec, false)?;
    // One argument may hold at most 128 KiB. A policy with many masks goes to a helper
    // started as the first attempt's is, through a pipe: never through a file in the run
    // directory, which an agent that can write the runs directory (`--allow-tmp` with
    // coder's state directory under `/tmp`) could replace between coder's writing it and
    // the helper's reading it, and the helper (unconfined until it applies the spec) would
    // run the agent's program under the agent's policy.
    if spec.policy.is_some() && spec_json.len() > 64 * 1024 {
        return StartedHelper::start(&spec.cwd)?.finish(spec).await;
    }
    let spec_arg: OsString = spec_json.into();
    let (status_read, status_write) = inheritable_pipe(Inherited::WriteEnd)?;
    let (net, net_child) = net_channel()?;
    let mut command = helper_command(spec_arg, &status_write, &net_child)?;
    command
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd);
    let child = command.spawn()?;
    drop((status_write, net_child));
    Ok((wait_for_exec(child, status_read).await?, Some(net)))
}

/// The first attempt's sandbox helper, being started on the spawner thread.
///
/// Starting a process with `posix_spawn` holds the calling thread until the new process
/// has called `execve` (the child shares its memory until then): for the helper, coder's
/// own binary, 1.4 to 4.7 ms of the run's serial path under load (`cli_home.done ->
/// helper.spawned`), most of it waiting to be scheduled again. Started on another thread,
/// that wait overlaps with resolving the policy, which comes next.
///
/// That thread is one for the whole process and never ends: the parent-death signal the
/// helper arms (so that it dies with coder) fires when the *thread* that started it ends,
/// not the process, so a thread started for this spawn and then ended would kill the
/// helper at once.
pub struct PendingHelper(std::sync::mpsc::Receiver<Option<StartedHelper>>);

type SpawnJob = Box<dyn FnOnce() + Send>;

impl PendingHelper {
    /// Starts the helper in `workspace` on the spawner thread (here, when that thread
    /// cannot be had).
    pub fn start(workspace: &std::path::Path) -> PendingHelper {
        let (done, pending) = std::sync::mpsc::sync_channel(1);
        let workspace = workspace.to_path_buf();
        // The helper's pipes belong to this thread's runtime (tokio's process and I/O
        // drivers), wherever it is spawned.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let job: SpawnJob = Box::new(move || {
            let _entered = runtime.as_ref().map(|r| r.enter());
            let helper = StartedHelper::start(&workspace).ok();
            // Nobody waits any more (the run stopped before its attempt): dropped unused,
            // the helper exits.
            let _ = done.send(helper);
        });
        // Without the spawner thread, started here, as before there was one.
        match Self::spawner() {
            Some(spawner) => {
                if let Err(std::sync::mpsc::SendError(job)) = spawner.send(job) {
                    job();
                }
            }
            None => job(),
        }
        PendingHelper(pending)
    }

    /// Waits for the helper to be started; `None` when it could not be.
    pub fn join(self) -> Option<StartedHelper> {
        self.0.recv().ok().flatten()
    }

    /// The spawner thread's queue, the thread started on first use; `None` when no thread
    /// can be started.
    fn spawner() -> Option<&'static std::sync::mpsc::Sender<SpawnJob>> {
        static SPAWNER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<SpawnJob>>> =
            std::sync::OnceLock::new();
        SPAWNER
            .get_or_init(|| {
                let (queue, jobs) = std::sync::mpsc::channel::<SpawnJob>();
                std::thread::Builder::new()
                    .name("coder-spawner".into())
                    // The sender lives in this static, so the loop never ends.
                    .spawn(move || jobs.into_iter().for_each(|job| job()))
                    .ok()?;
                Some(queue)
            })
            .as_ref()
    }
}

/// A helper started before its spec is known, for a confined child, which waits for it on
/// a pipe.
///
/// Starting the helper (a second process of coder's binary: `execve`, the dynamic loader,
/// the CPU feature probes) takes most of a millisecond, and entering the sandbox's
/// namespaces and forking their init, which it does while it waits
/// (`sandbox::helper`), a millisecond or more; started this way, both overlap with what
/// coder does meanwhile, chiefly resolving the sandbox policy. Dropped unused, the helper
/// reads the end of the pipe and exits without starting anything.
pub struct StartedHelper {
    child: Child,
    spec: std::fs::File,
    status: OwnedFd,
    /// coder's end of the network channel (see `sandbox::netns`).
    net: OwnedFd,
}

impl StartedHelper {
    /// Starts the helper in `cwd` (any existing directory: the spec says where the program
    /// runs).
    pub fn start(cwd: &std::path::Path) -> Result<StartedHelper, SpawnError> {
        let (spec_read, spec_write) = inheritable_pipe(Inherited::ReadEnd)?;
        let (status_read, status_write) = inheritable_pipe(Inherited::WriteEnd)?;
        let (net, net_child) = net_channel()?;
        let mut spec_arg = OsString::from("&");
        spec_arg.push(spec_read.as_raw_fd().to_string());
        let mut command = helper_command(spec_arg, &status_write, &net_child)?;
        command.current_dir(cwd);
        // The phase trace reaches this helper alone (it execs the program with the spec's
        // environment, never its own), as coder's open file: the helper, unconfined, must
        // not resolve the path again (relative, in the workspace; absolute, after an agent
        // could have swapped what it names).
        let trace = crate::phases::file().map(inheritable_copy).transpose()?;
        if let Some(trace) = &trace {
            command.env(crate::phases::TRACE_FD_VAR, trace.as_raw_fd().to_string());
        }
        let child = command.spawn()?;
        drop((spec_read, status_write, net_child, trace));
        Ok(StartedHelper {
            child,
            spec: std::fs::File::from(spec_write),
            status: status_read,
            net,
        })
    }

    /// Hands `spec` to the helper; returns once the program has been exec'd, with coder's
    /// end of the network channel.
    async fn finish(self, spec: &ChildSpec) -> Result<(Child, Option<OwnedFd>), SpawnError> {
        use std::io::Write;
        let StartedHelper {
            child,
            spec: mut pipe,
            status,
            net,
        } = self;
        let json = helper_spec_json(spec, true)?;
        // A helper that died before reading it reports why on the status pipe.
        let _ = pipe.write_all(json.as_bytes());
        drop(pipe);
        Ok((wait_for_exec(child, status).await?, Some(net)))
    }
}

/// The helper's spec, as JSON; `with_env` carries the program's environment and working
/// directory for a helper started without them.
fn helper_spec_json(spec: &ChildSpec, with_env: bool) -> Result<String, SpawnError> {
    let helper_spec = HelperSpec {
        program: spec.program.clone(),
        args: spec.args.clone(),
        parent_pid: std::process::id(),
        policy: spec.policy.clone(),
        env: with_env.then(|| spec.env.clone()),
        cwd: with_env.then(|| spec.cwd.clone()),
    };
    serde_json::to_string(&helper_spec).map_err(|e| {
        SpawnError::Io(std::io::Error::other(format!(
            "cannot encode the helper spec: {e}"
        )))
    })
}

/// Which end of a pipe the helper inherits (under its own number, see the helper's docs).
enum Inherited {
    ReadEnd,
    WriteEnd,
}

/// A pipe whose `inherited` end stays open across exec. It is so only until the spawn that
/// follows returns (the caller then closes its copy), and coder starts no other process
/// meanwhile.
fn inheritable_pipe(inherited: Inherited) -> Result<(OwnedFd, OwnedFd), SpawnError> {
    let (read, write): (OwnedFd, OwnedFd) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let end = match inherited {
        Inherited::ReadEnd => &read,
        Inherited::WriteEnd => &write,
    };
    nix::fcntl::fcntl(
        end,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .map_err(std::io::Error::from)?;
    Ok((read, write))
}

/// A copy of `file`'s descriptor that stays open across exec, like the pipes above.
fn inheritable_copy(file: &std::fs::File) -> Result<OwnedFd, SpawnError> {
    use std::os::fd::AsFd;
    let copy = file.as_fd().try_clone_to_owned()?;
    nix::fcntl::fcntl(
        &copy,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .map_err(std::io::Error::from)?;
    Ok(copy)
}

/// The network channel: a UNIX socket pair whose second end the helper inherits (like the
/// pipes above) to send the egress proxy's listener back; coder keeps the first.
fn net_channel() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    nix::fcntl::fcntl(
        &theirs,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .map_err(std::io::Error::from)?;
    Ok((ours, theirs))
}

/// `coder __exec-helper SPEC STATUS_FD NET_FD`, with piped stdio and an empty environment.
fn helper_command(
    spec_arg: OsString,
    status_write: &OwnedFd,
    net: &OwnedFd,
) -> Result<Command, SpawnError> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg0("coder-helper")
        .arg(HELPER_ARG)
        .arg(spec_arg)
        .arg(status_write.as_raw_fd().to_string())
        .arg(net.as_raw_fd().to_string())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    Ok(command)
}

/// Waits until the helper has exec'd the program (its status pipe closes empty) or
/// reported why it could not.
///
/// The pipe is read by the runtime, as the child's own pipes are: read on a blocking
/// thread, its end took one more wake-up (another thread's) on the path to the child's
/// start.
async fn wait_for_exec(mut child: Child, status_read: OwnedFd) -> Result<Child, SpawnError> {
    use tokio::io::AsyncReadExt;
    let mut status = tokio::net::unix::pipe::Receiver::from_owned_fd(status_read)?;
    let mut report = Vec::new();
    status.read_to_end(&mut report).await?;

    if !report.is_empty() {
        let failure =
            serde_json::from_slice::<HelperFailure>(&report).unwrap_or_else(|_| HelperFailure {
                stage: HelperStage::Setup,
                errno: None,
                message: String::from_utf8_lossy(&report).into_owned(),
            });
        // The helper exits right after reporting; reap it.
        let _ = child.wait().await;
        return Err(SpawnError::Helper(failure));
    }
    Ok(child)
}
