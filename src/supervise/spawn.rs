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
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::Stdio;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use crate::pipeline::child::ChildSpec;
use crate::sandbox::helper::{HELPER_ARG, HelperFailure, HelperSpec, HelperStage};

/// A started child with its pipes.
pub struct Spawned {
    pub child: ChildProcess,
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
    let (launched, net) = match (&spec.policy, started) {
        (Some(_), Some(started)) => started.finish(spec).await?,
        (Some(_), None) => {
            let (child, net) = spawn_through_helper(spec).await?;
            (child, net)
        }
        (None, _) => (Launched::Spawned(spawn_unconfined(spec)?), None),
    };
    // The helper has sent the egress proxy's listener by now (see `sandbox::netns`).
    if let (Some(egress), Some(net)) = (&spec.egress, net) {
        egress.attach(net);
    }
    let missing = || SpawnError::Io(std::io::Error::other("child pipes missing"));
    let (child, stdin, stdout, stderr) = match launched {
        Launched::Spawned(mut child) => {
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(missing());
            };
            (ChildProcess::Spawned(child), stdin, stdout, stderr)
        }
        Launched::Forked(forked, pipes) => {
            let [stdin, stdout, stderr] = pipes;
            (
                ChildProcess::Forked(forked),
                ChildStdin::from_std(std::process::ChildStdin::from(stdin))?,
                ChildStdout::from_std(std::process::ChildStdout::from(stdout))?,
                ChildStderr::from_std(std::process::ChildStderr::from(stderr))?,
            )
        }
    };
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other("the child exited before it could be tracked"))?;
    Ok(Spawned {
        child,
        pid,
        stdin,
        stdout,
        stderr,
    })
}

/// A child process of coder's: one the runtime spawned, or the first attempt's helper
/// forked at coder's start (see [`fork_early`]), waited for through a pidfd.
pub enum ChildProcess {
    Spawned(Child),
    Forked(ForkedChild),
}

impl ChildProcess {
    /// Its pid, until it has been reaped.
    pub fn id(&self) -> Option<u32> {
        match self {
            ChildProcess::Spawned(child) => child.id(),
            ChildProcess::Forked(child) => match child.status {
                Some(_) => None,
                None => u32::try_from(child.pid.as_raw()).ok(),
            },
        }
    }

    /// Waits for it to exit and reaps it (cancel-safe: a status once taken is kept).
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            ChildProcess::Spawned(child) => child.wait().await,
            ChildProcess::Forked(child) => child.wait().await,
        }
    }
}

/// A child coder forked itself, with the pidfd that says when it has exited.
pub struct ForkedChild {
    pid: nix::unistd::Pid,
    pidfd: tokio::io::unix::AsyncFd<OwnedFd>,
    status: Option<std::process::ExitStatus>,
}

impl ForkedChild {
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let mut raw = 0;
            // SAFETY: waitpid writes one int into the owned `raw`; WNOHANG never blocks.
            match unsafe { libc::waitpid(self.pid.as_raw(), &mut raw, libc::WNOHANG) } {
                -1 => return Err(std::io::Error::last_os_error()),
                0 => {
                    // A pidfd reads as ready once its process has exited.
                    let mut ready = self.pidfd.readable().await?;
                    ready.clear_ready();
                }
                _ => self.status = Some(std::process::ExitStatus::from_raw(raw)),
            }
        }
    }
}

/// How a child was started: by the runtime, or forked (with its stdin, stdout and stderr).
enum Launched {
    Spawned(Child),
    Forked(ForkedChild, [OwnedFd; 3]),
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
                crate::text::path::exec_failure(
                    &spec.program,
                    &errno.map_or_else(|| e.to_string(), |n| Errno::from_raw(n).desc().to_owned()),
                    errno == Some(libc::ENOENT),
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
async fn spawn_through_helper(spec: &ChildSpec) -> Result<(Launched, Option<OwnedFd>), SpawnError> {
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
    let (status_read, status_write) = cloexec_pipe()?;
    let (net, net_child) = net_channel()?;
    let mut command = helper_command(spec_arg, &status_write, &net_child, &[])?;
    command
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd);
    let child = command.spawn()?;
    drop((status_write, net_child));
    let child = wait_for_exec(Launched::Spawned(child), status_read).await?;
    Ok((child, Some(net)))
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
        if let Some(forked) = take_forked() {
            let _ = done.send(Some(forked));
            return PendingHelper(pending);
        }
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
    child: HelperProcess,
    spec: std::fs::File,
    status: OwnedFd,
    /// coder's end of the network channel (see `sandbox::netns`).
    net: OwnedFd,
}

impl StartedHelper {
    /// Starts the helper in `cwd` (any existing directory: the spec says where the program
    /// runs).
    pub fn start(cwd: &std::path::Path) -> Result<StartedHelper, SpawnError> {
        let (spec_read, spec_write) = cloexec_pipe()?;
        let (status_read, status_write) = cloexec_pipe()?;
        let (net, net_child) = net_channel()?;
        let mut spec_arg = OsString::from("&");
        spec_arg.push(spec_read.as_raw_fd().to_string());
        // The phase trace reaches this helper alone (it execs the program with the spec's
        // environment, never its own), as coder's open file: the helper, unconfined, must
        // not resolve the path again (relative, in the workspace; absolute, after an agent
        // could have swapped what it names).
        let trace = crate::phases::file()
            .map(|file| std::os::fd::AsFd::as_fd(file).try_clone_to_owned())
            .transpose()?;
        let mut passed = vec![spec_read.as_raw_fd()];
        passed.extend(trace.as_ref().map(AsRawFd::as_raw_fd));
        let mut command = helper_command(spec_arg, &status_write, &net_child, &passed)?;
        command.current_dir(cwd);
        if let Some(trace) = &trace {
            command.env(crate::phases::TRACE_FD_VAR, trace.as_raw_fd().to_string());
        }
        let child = command.spawn()?;
        drop((spec_read, status_write, net_child, trace));
        Ok(StartedHelper {
            child: HelperProcess::Spawned(child),
            spec: std::fs::File::from(spec_write),
            status: status_read,
            net,
        })
    }

    /// Hands `spec` to the helper; returns once the program has been exec'd, with coder's
    /// end of the network channel.
    async fn finish(self, spec: &ChildSpec) -> Result<(Launched, Option<OwnedFd>), SpawnError> {
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
        crate::phases::mark("spec.sent");
        let child = match child {
            HelperProcess::Spawned(child) => Launched::Spawned(child),
            HelperProcess::Forked(forked) => {
                let ForkedHelper { pid, pidfd, stdio } = forked;
                // SAFETY: the pidfd is an open descriptor the AsyncFd owns from here on; it
                // is closed only when the AsyncFd is dropped.
                let pidfd = unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        pidfd,
                        tokio::io::Interest::READABLE,
                    )
                }
                .map_err(|e| SpawnError::Io(std::io::Error::other(e.to_string())))?;
                let child = ForkedChild {
                    pid,
                    pidfd,
                    status: None,
                };
                Launched::Forked(child, stdio)
            }
        };
        Ok((wait_for_exec(child, status).await?, Some(net)))
    }
}

/// The helper process of a [`StartedHelper`].
enum HelperProcess {
    Spawned(Child),
    Forked(ForkedHelper),
}

/// A helper forked by [`fork_early`]: its pid and pidfd, and coder's ends of its stdin,
/// stdout and stderr.
struct ForkedHelper {
    pid: nix::unistd::Pid,
    pidfd: OwnedFd,
    stdio: [OwnedFd; 3],
}

/// The helper [`fork_early`] forked, until the first attempt takes it.
static FORKED: std::sync::Mutex<Option<StartedHelper>> = std::sync::Mutex::new(None);

fn take_forked() -> Option<StartedHelper> {
    FORKED.lock().ok()?.take()
}

/// Drops the helper [`fork_early`] forked if no attempt took it: it exits once its spec
/// pipe is closed (a zombie until coder exits: nothing waits for it).
pub fn drop_forked() {
    drop(take_forked());
}

/// Forks the first attempt's sandbox helper now, if coder is single-threaded (the run's
/// runtime not built yet), for [`PendingHelper::start`] to take.
///
/// A fork instead of an `execve` of coder's own binary (108 MB; its loader, relocations,
/// page faults and CPU probes cost about a millisecond of CPU, and at load several of
/// wall, see BENCHMARKS.md), and at the top of the run instead of after the ledger and the
/// CLI's home: the helper's own start (its namespaces, their init) then overlaps with all
/// of coder's preparation. The process is the exec'd helper's in every other respect: the
/// same steps on the same descriptors ([`crate::sandbox::helper::forked_main`], which also
/// wipes what it holds of coder's arguments and environment; the init it forks makes
/// itself not dumpable, as every sandbox's does), and unused it exits when coder closes
/// its spec pipe. Nothing is forked when another thread exists (a fork copies only the
/// calling thread, and a lock another thread held would stay locked in the copy); the
/// first attempt then starts its helper as before.
///
/// It starts in `workspace`, as the exec'd helper does (any existing directory: the spec
/// says where the program runs), not in coder's own working directory.
pub fn fork_early(workspace: &std::path::Path) {
    if FORKED.lock().map(|f| f.is_some()).unwrap_or(true) || !single_threaded() {
        return;
    }
    if let Ok(started) = fork_helper(workspace)
        && let Ok(mut slot) = FORKED.lock()
    {
        *slot = Some(started);
    }
}

fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .is_some_and(|n| n.trim() == "1")
    })
}

fn fork_helper(workspace: &std::path::Path) -> Result<StartedHelper, SpawnError> {
    let (spec_read, spec_write) = cloexec_pipe()?;
    let (status_read, status_write) = cloexec_pipe()?;
    let (stdin_read, stdin_write) = cloexec_pipe()?;
    let (stdout_read, stdout_write) = cloexec_pipe()?;
    let (stderr_read, stderr_write) = cloexec_pipe()?;
    let (net, net_child) = net_channel()?;
    // SAFETY: coder is single-threaded here (checked by the caller), so the child is a
    // consistent copy of it (no lock held by another thread). The child never returns into
    // coder's code: `forked_child` ends in `_exit` or in the program's `execve`.
    match unsafe { nix::unistd::fork() }.map_err(std::io::Error::from)? {
        nix::unistd::ForkResult::Child => forked_child(
            workspace,
            [stdin_read, stdout_write, stderr_write],
            crate::sandbox::helper::ForkedFds {
                spec: spec_read.as_raw_fd(),
                status: status_write.as_raw_fd(),
                net: net_child.as_raw_fd(),
            },
        ),
        nix::unistd::ForkResult::Parent { child } => {
            drop((spec_read, status_write, net_child));
            drop((stdin_read, stdout_write, stderr_write));
            let pidfd = match super::tree::pidfd_open(child) {
                Ok(pidfd) => pidfd,
                Err(e) => {
                    // Without a pidfd it cannot be waited for in the runtime: stopped now.
                    let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
                    let _ = nix::sys::wait::waitpid(child, None);
                    return Err(SpawnError::Io(e));
                }
            };
            Ok(StartedHelper {
                child: HelperProcess::Forked(ForkedHelper {
                    pid: child,
                    pidfd,
                    stdio: [stdin_write, stdout_read, stderr_read],
                }),
                spec: std::fs::File::from(spec_write),
                status: status_read,
                net,
            })
        }
    }
}

/// The forked helper: its stdio made the program's pipes, then the helper's steps.
fn forked_child(
    workspace: &std::path::Path,
    stdio: [OwnedFd; 3],
    fds: crate::sandbox::helper::ForkedFds,
) -> ! {
    let code = std::panic::catch_unwind(move || {
        // Where the exec'd helper starts; the spec's directory is entered later either way.
        let _ = nix::unistd::chdir(workspace);
        for (fd, target) in stdio.iter().zip(0..) {
            // SAFETY: dup2 onto stdio of this single-threaded process; the new descriptor
            // is not close-on-exec, as the program's stdio must be.
            if unsafe { libc::dup2(fd.as_raw_fd(), target) } == -1 {
                return 70;
            }
        }
        drop(stdio);
        crate::sandbox::helper::forked_main(fds)
    })
    .unwrap_or(70);
    // SAFETY: _exit ends the process at once, running none of coder's exit handlers or
    // destructors (they belong to coder, not to this copy of it).
    unsafe { libc::_exit(code) }
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

/// A pipe, both ends close-on-exec: what a helper inherits is chosen in its own process,
/// between fork and exec ([`helper_command`]), never by clearing the flag in coder, where
/// every process another thread started meanwhile (the change ledger's git, another run's
/// helper) inherited it too, and a status pipe's write end held open by one of them kept
/// coder waiting for its end until that process exited.
fn cloexec_pipe() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    Ok(nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)?)
}

/// The network channel: a UNIX socket pair whose second end the helper inherits (like the
/// pipes above, through [`helper_command`]) to send the egress proxy's listener back;
/// coder keeps the first.
fn net_channel() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    Ok((ours, theirs))
}

/// `coder __exec-helper SPEC STATUS_FD NET_FD`, with piped stdio and an empty environment.
fn helper_command(
    spec_arg: OsString,
    status_write: &OwnedFd,
    net: &OwnedFd,
    more: &[RawFd],
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
    // The descriptors the helper inherits, in an array the child can read without
    // allocating: at most the spec pipe and the phase trace besides these two.
    let mut passed: [RawFd; 4] = [-1; 4];
    if more.len() > passed.len() - 2 {
        return Err(SpawnError::Io(std::io::Error::other(
            "too many descriptors for the helper",
        )));
    }
    for (slot, fd) in passed.iter_mut().zip(
        [status_write.as_raw_fd(), net.as_raw_fd()]
            .iter()
            .chain(more),
    ) {
        *slot = *fd;
    }
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl on
    // descriptor numbers (async-signal-safe); it neither allocates nor touches memory
    // shared with other threads (`passed` is a copied array). Those descriptors are
    // coder's, open until the spawn returns (the caller holds them).
    unsafe {
        command.pre_exec(move || {
            for fd in passed.iter().copied().filter(|fd| *fd >= 0) {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(command)
}

/// Waits until the helper has exec'd the program (its status pipe closes empty) or
/// reported why it could not.
///
/// The pipe is read by the runtime, as the child's own pipes are: read on a blocking
/// thread, its end took one more wake-up (another thread's) on the path to the child's
/// start.
async fn wait_for_exec(mut child: Launched, status_read: OwnedFd) -> Result<Launched, SpawnError> {
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
        let _ = match &mut child {
            Launched::Spawned(child) => child.wait().await,
            Launched::Forked(child, _) => child.wait().await,
        };
        return Err(SpawnError::Helper(failure));
    }
    Ok(child)
}
