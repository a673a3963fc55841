//! Supervision of one attempt: spawn the child, feed it the prompt, read stdout and stderr
//! concurrently, enforce the idle and total watchdogs, react to coder's own signals, and
//! make sure that when the attempt ends no process of it is left.
//!
//! The loop is event-driven: it wakes for output (the complete lines of one read of a pipe,
//! handed over together), the child's exit, a deadline or a signal.
//! Completion is driven by the `result` event, not by the child's exit: the CLI can stay
//! alive after answering (MCP servers, background shells), so after a result the child gets
//! a short grace to exit on its own and is then stopped, and the run still succeeds. The
//! reverse also happens: the child exits while a grandchild still holds the pipes open, so
//! after an exit the pipes get a short drain before the tree is stopped.

pub mod signals;
pub mod spawn;
pub mod tree;

use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::journal::{Journal, Note, WatchdogReason};
use crate::pipeline::child::ChildSpec;
use crate::pipeline::observation::Observation;
use crate::stream::{Decoded, Event, Line, LineSplitter, Pipe, SpareBuffer, UpstreamErrorType};

pub use signals::CancelSignals;
pub use spawn::SpawnError;
pub use tree::KillReport;

/// How long a child may stay alive after printing its `result`.
const AFTER_RESULT_GRACE: Duration = Duration::from_secs(2);
/// How long the pipes may stay open after the child exited (a grandchild holding them).
const AFTER_EXIT_DRAIN: Duration = Duration::from_secs(1);
/// How long to wait for the last bytes once the tree is stopped.
const FINAL_DRAIN: Duration = Duration::from_secs(2);
/// Read buffer per pipe.
const READ_CHUNK: usize = 256 * 1024;
/// Lines handled per wake-up before the deadlines are looked at again.
const BATCH: usize = 256;
/// Bytes of complete lines that may wait between the pipe readers and the supervisor. A
/// reader further ahead waits, so coder's memory stays flat however fast the child writes
/// (a longer line still passes, alone).
const QUEUED_BYTES: usize = 4 * 1024 * 1024;
/// Capacity asked for the stdout and stderr pipes (Linux's default limit for unprivileged
/// processes). With the default 64 KiB the child blocks whenever coder is busy decoding a
/// large line, so writing and decoding take turns instead of overlapping.
const PIPE_CAPACITY: i32 = 1024 * 1024;

/// The limits of one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// No byte on stdout or stderr for this long stops the attempt.
    pub idle: Duration,
    /// The whole run's hard deadline (shared by all attempts), if any.
    pub deadline: Option<Instant>,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    pub max_line_bytes: usize,
    /// The idle limit while the CLI waits for the provider (its last line started a
    /// request: `system/init`, tool results, an `api_retry`), when longer than `idle`: a
    /// provider that queues requests holds them open without the CLI printing anything.
    pub provider_wait: Option<Duration>,
    /// Stop the CLI at this many `api_retry` announcements of a 429: coder then applies the
    /// vendor's backoff itself instead of the CLI's fast schedule (`None`: let it retry).
    pub rate_limit_retries_allowed: Option<u32>,
}

impl Limits {
    /// The idle limit in force: `provider_wait` while a request is in flight.
    fn idle_limit(&self, awaiting_provider: bool) -> Duration {
        match self.provider_wait {
            Some(wait) if awaiting_provider => wait.max(self.idle),
            _ => self.idle,
        }
    }
}

/// Why an attempt ended.
#[derive(Debug)]
pub enum StopCause {
    /// The child exited and its output was read to the end.
    Finished,
    /// The child printed its result but did not exit in time; it was stopped.
    LingeredAfterResult,
    /// No output for the idle limit; `provider_wait` when the longer limit for a request in
    /// flight was the one in force.
    IdleTimeout { provider_wait: Option<Duration> },
    /// The run's total deadline passed.
    TotalTimeout,
    /// coder received this signal.
    Cancelled(i32),
    /// The child never started.
    SpawnFailed(SpawnError),
    /// The CLI announced a retry of a request the backend refused for good (HTTP 401): coder
    /// stopped it at that first retry instead of letting it retry the same key again
    /// (`provider-quirks.md` §5b row 11).
    AuthRejected,
    /// The CLI announced this many retries of a rate-limited request (429), the backend's
    /// `Limits::rate_limit_retries_allowed`: coder stopped it (§5b row 19).
    RateLimited { cli_retries: u32 },
    /// The model called `ask_user` (DESIGN §9): coder stopped the CLI so that the caller
    /// can answer; the call itself is never answered.
    QuestionsAsked,
}

impl StopCause {
    /// The watchdog (or signal) that stopped the attempt, if one did.
    pub fn watchdog_reason(&self) -> Option<WatchdogReason> {
        match self {
            StopCause::IdleTimeout { .. } => Some(WatchdogReason::IdleTimeout),
            StopCause::TotalTimeout => Some(WatchdogReason::Timeout),
            StopCause::Cancelled(_) => Some(WatchdogReason::Cancelled),
            StopCause::LingeredAfterResult => Some(WatchdogReason::LingeredAfterResult),
            StopCause::Finished
            | StopCause::SpawnFailed(_)
            | StopCause::AuthRejected
            | StopCause::RateLimited { .. } => None,
            StopCause::QuestionsAsked => None,
        }
    }
}

/// How an attempt ended.
#[derive(Debug)]
pub struct AttemptEnd {
    pub cause: StopCause,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub duration: Duration,
    pub kill: KillReport,
}

enum PipeMsg {
    /// Complete lines of one read, and their share of the queue budget, handed back when
    /// the last of them has been handled.
    Lines(Pipe, Vec<Line>, OwnedSemaphorePermit),
    Eof,
}

/// The lines of one message being handled.
struct Batch {
    pipe: Pipe,
    lines: std::vec::IntoIter<Line>,
    /// Released when the batch is done.
    _queued: OwnedSemaphorePermit,
}

/// Activity shared between the pipe readers and the supervisor loop.
struct Activity {
    started: Instant,
    last_ms: AtomicU64,
    stdout_bytes: AtomicU64,
    stderr_bytes: AtomicU64,
}

impl Activity {
    fn touch(&self, pipe: Pipe, n: usize) {
        let now = self.started.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::Relaxed);
        let counter = match pipe {
            Pipe::Stdout => &self.stdout_bytes,
            Pipe::Stderr => &self.stderr_bytes,
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.started + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// Kills whatever is left of the tree if the supervisor is unwound (a panic) before it
/// could stop the attempt in order.
struct TreeGuard {
    pid: Option<i32>,
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if self.pid.is_some() {
            tree::kill_all_now(self.pid);
        }
    }
}

/// Runs one attempt of `spec` to its end, feeding every line to `observation` and
/// `journal`.
pub async fn run_attempt(
    spec: &ChildSpec,
    helper: Option<spawn::StartedHelper>,
    limits: &Limits,
    observation: &mut Observation,
    signals: &mut CancelSignals,
    journal: &mut dyn Journal,
) -> AttemptEnd {
    let mut running = match start(spec, helper, limits, signals, journal).await {
        Ok(running) => running,
        Err(end) => return end,
    };
    let watched = watch(&mut running, limits, observation, signals, journal).await;
    crate::phases::mark("child.drained");
    finish(running, watched, limits, observation, signals, journal).await
}

/// A started attempt: the child, its pipes' readers and what they share.
struct Running {
    started: Instant,
    child: spawn::ChildProcess,
    pid: i32,
    /// Kills the tree if the supervisor unwinds before [`finish`] ran.
    guard: TreeGuard,
    lines: LineQueue,
    activity: Arc<Activity>,
}

/// The lines the pipe readers send, the budget bounding them, and the buffers coming back.
///
/// A reader sends the complete lines of one read as one message (all that the budget
/// admits without waiting, see `send_lines`), so that a fast stream of short lines costs
/// one hand-off and one wake-up per read, not per line.
struct LineQueue {
    rx: mpsc::Receiver<PipeMsg>,
    /// The message whose lines are being handled.
    current: Option<Batch>,
    budget: Arc<Semaphore>,
    /// Large line buffers go back to the readers once handled (see `SpareBuffer`).
    spare: Arc<SpareBuffer>,
    open_pipes: u8,
    /// An `api_retry` after a 401 was seen: retrying cannot help.
    auth_rejected: bool,
    /// The last stdout event started a request to the provider (see `Limits::provider_wait`).
    awaiting_provider: bool,
    /// `api_retry` announcements of a 429 so far.
    rate_limit_retries: u32,
}

impl LineQueue {
    /// Waits for the next message (cancel-safe); its lines are then taken by
    /// [`LineQueue::handle_next`].
    async fn ready(&mut self) {
        if self.current.is_none() {
            let msg = self.rx.recv().await;
            self.accept(msg);
        }
    }

    fn accept(&mut self, msg: Option<PipeMsg>) {
        match msg {
            Some(PipeMsg::Lines(pipe, lines, queued)) => {
                self.current = Some(Batch {
                    pipe,
                    lines: lines.into_iter(),
                    _queued: queued,
                });
            }
            Some(PipeMsg::Eof) => {
                self.open_pipes = self.open_pipes.saturating_sub(1);
            }
            None => {
                self.open_pipes = 0;
            }
        }
    }

    /// Handles the next line at hand, without waiting: `None` when there is none, else
    /// whether it was the `result` event.
    fn handle_next(
        &mut self,
        observation: &mut Observation,
        journal: &mut dyn Journal,
    ) -> Option<bool> {
        loop {
            match self
                .current
                .as_mut()
                .map(|b| (b.pipe, b.lines.next(), b.lines.len()))
            {
                Some((pipe, Some(line), after)) => {
                    return Some(self.handle(pipe, line, after, observation, journal));
                }
                Some((_, None, _)) => self.current = None,
                None => {}
            }
            match self.rx.try_recv() {
                Ok(msg) => self.accept(Some(msg)),
                Err(mpsc::error::TryRecvError::Empty) => return None,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.accept(None);
                    return None;
                }
            }
        }
    }

    /// Hands one line to the observation and the journal, exactly the same way in the
    /// main loop and in the final drain; true when the line was the `result` event.
    /// `lines_after`: the lines of its batch still to come, which are handled whatever
    /// happens (the final drain takes what the main loop left).
    fn handle(
        &mut self,
        pipe: Pipe,
        line: Line,
        lines_after: usize,
        observation: &mut Observation,
        journal: &mut dyn Journal,
    ) -> bool {
        crate::phases::mark_first_line();
        let decoded = observation.observe_line_before(pipe, &line, lines_after);
        if let Some(bytes) = journal.line(pipe, line, decoded.as_ref()) {
            self.spare.offer(bytes);
        }
        if let Some(Decoded {
            event:
                Event::ApiRetry {
                    error_status,
                    error,
                    ..
                },
            ..
        }) = &decoded
        {
            self.auth_rejected |= *error_status == Some(401)
                || *error == Some(UpstreamErrorType::AuthenticationFailed);
            if *error_status == Some(429) || *error == Some(UpstreamErrorType::RateLimit) {
                self.rate_limit_retries += 1;
            }
        }
        if let Some(decoded) = &decoded {
            self.awaiting_provider = match &decoded.event {
                Event::Init { .. } | Event::User { .. } | Event::ApiRetry { .. } => true,
                Event::Assistant(_) | Event::Result(_) => false,
                Event::Other { .. } => self.awaiting_provider,
            };
        }
        matches!(
            decoded,
            Some(Decoded {
                event: Event::Result(_),
                ..
            })
        )
    }
}

/// How the watch loop left the attempt.
struct Watched {
    cause: StopCause,
    child_gone: bool,
    exit_status: Option<std::process::ExitStatus>,
}

/// Spawns the child (through the helper when confined), hands it the prompt and starts the
/// pipe readers. A signal while spawning, or a spawn failure, ends the attempt here.
async fn start(
    spec: &ChildSpec,
    helper: Option<spawn::StartedHelper>,
    limits: &Limits,
    signals: &mut CancelSignals,
    journal: &mut dyn Journal,
) -> Result<Running, AttemptEnd> {
    let started = Instant::now();
    let ended = |cause, kill| AttemptEnd {
        cause,
        exit_code: None,
        exit_signal: None,
        duration: started.elapsed(),
        kill,
    };
    let spawned = tokio::select! {
        biased;
        signo = signals.recv() => {
            // The helper may be mid-start; whatever it became is stopped below.
            let kill = tree::stop_tree(None, limits.kill_grace).await;
            return Err(ended(StopCause::Cancelled(signo), kill));
        }
        spawned = spawn::spawn(spec, helper) => spawned,
    };
    let spawn::Spawned {
        child,
        pid,
        stdin,
        stdout,
        stderr,
    } = spawned.map_err(|e| ended(StopCause::SpawnFailed(e), KillReport::default()))?;
    crate::phases::mark("child.spawned");
    let guard = TreeGuard { pid: Some(pid) };
    for pipe in [stdout.as_fd(), stderr.as_fd()] {
        // Best effort: a smaller pipe only costs throughput.
        let _ = nix::fcntl::fcntl(pipe, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_CAPACITY));
    }
    journal.note(Note::Spawn {
        pid,
        program: &spec.program,
    });

    feed_prompt(stdin, spec.stdin.clone());
    let (lines, activity) = read_pipes(stdout, stderr, started, limits);
    Ok(Running {
        started,
        child,
        pid,
        guard,
        lines,
        activity,
    })
}

/// Writes the prompt to the child's stdin and closes it, on a task of its own.
fn feed_prompt(mut stdin: tokio::process::ChildStdin, prompt: Arc<str>) {
    tokio::spawn(async move {
        // A child that exits without reading its stdin is not an error here; its exit
        // status tells the story.
        let _ = stdin.write_all(prompt.as_bytes()).await;
        let _ = stdin.shutdown().await;
    });
}

/// Starts a reader task on each of the child's pipes: their lines reach the returned
/// queue within its byte budget; the activity records when each last spoke.
fn read_pipes(
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    started: Instant,
    limits: &Limits,
) -> (LineQueue, Arc<Activity>) {
    let activity = Arc::new(Activity {
        started,
        last_ms: AtomicU64::new(0),
        stdout_bytes: AtomicU64::new(0),
        stderr_bytes: AtomicU64::new(0),
    });
    let (tx, rx) = mpsc::channel(1024);
    let budget = Arc::new(Semaphore::new(QUEUED_BYTES));
    let spare = Arc::new(SpareBuffer::default());
    for (reader, pipe) in [
        (
            Box::new(stdout) as Box<dyn AsyncRead + Send + Unpin>,
            Pipe::Stdout,
        ),
        (Box::new(stderr), Pipe::Stderr),
    ] {
        tokio::spawn(read_pipe(
            reader,
            pipe,
            tx.clone(),
            budget.clone(),
            activity.clone(),
            LineSplitter::with_spare(limits.max_line_bytes, spare.clone()),
        ));
    }
    let lines = LineQueue {
        rx,
        current: None,
        budget,
        spare,
        open_pipes: 2,
        auth_rejected: false,
        awaiting_provider: false,
        rate_limit_retries: 0,
    };
    (lines, activity)
}

/// The supervision loop: wakes for a line, the child's exit, a deadline or a signal, until
/// the child is gone and its pipes are closed, or a watchdog or signal stops it.
async fn watch(
    running: &mut Running,
    limits: &Limits,
    observation: &mut Observation,
    signals: &mut CancelSignals,
    journal: &mut dyn Journal,
) -> Watched {
    let Running {
        child,
        lines,
        activity,
        ..
    } = running;
    let mut exit_status: Option<std::process::ExitStatus> = None;
    let mut child_gone = false;
    let mut result_seen = false;
    // Once set, the attempt is winding down: the child exited or answered, and this is
    // when whatever is left gets stopped.
    let mut wind_down: Option<Instant> = None;
    let mut cause: Option<StopCause> = None;

    while !(child_gone && lines.open_pipes == 0) {
        let idle_limit = limits.idle_limit(lines.awaiting_provider);
        let idle_at = activity.last() + idle_limit;
        tokio::select! {
            biased;
            signo = signals.recv() => {
                cause = Some(StopCause::Cancelled(signo));
                break;
            }
            () = lines.ready(), if lines.open_pipes > 0 => {
                for _ in 0..BATCH {
                    let Some(is_result) = lines.handle_next(observation, journal) else {
                        break;
                    };
                    if result_seen {
                        continue;
                    }
                    cause = stop_for_line(lines, limits, observation);
                    if cause.is_some() {
                        break;
                    }
                    if is_result {
                        result_seen = true;
                        wind_down = Some(earliest(wind_down, Instant::now() + AFTER_RESULT_GRACE));
                    }
                }
                journal.flush();
                if cause.is_some() {
                    break;
                }
            }
            status = child.wait(), if !child_gone => {
                crate::phases::mark("child.exited");
                child_gone = true;
                exit_status = status.ok();
                wind_down = Some(earliest(wind_down, Instant::now() + AFTER_EXIT_DRAIN));
            }
            _ = tokio::time::sleep_until(idle_at.into()), if wind_down.is_none() => {
                if activity.last() + idle_limit <= Instant::now() {
                    cause = Some(StopCause::IdleTimeout {
                        provider_wait: (idle_limit > limits.idle).then_some(idle_limit),
                    });
                    break;
                }
            }
            _ = sleep_until_opt(limits.deadline) => {
                cause = Some(StopCause::TotalTimeout);
                break;
            }
            _ = sleep_until_opt(wind_down) => {
                cause = Some(if result_seen && !child_gone {
                    StopCause::LingeredAfterResult
                } else {
                    StopCause::Finished
                });
                break;
            }
        }
    }
    Watched {
        cause: cause.unwrap_or(StopCause::Finished),
        child_gone,
        exit_status,
    }
}

/// Why the line just handled stops an attempt that has not answered yet, if it does: the
/// backend refused the key, the CLI's rate-limit retries reached what this vendor
/// tolerates, or the model asked questions.
fn stop_for_line(
    lines: &LineQueue,
    limits: &Limits,
    observation: &Observation,
) -> Option<StopCause> {
    if lines.auth_rejected {
        return Some(StopCause::AuthRejected);
    }
    if limits
        .rate_limit_retries_allowed
        .is_some_and(|allowed| lines.rate_limit_retries >= allowed)
    {
        return Some(StopCause::RateLimited {
            cli_retries: lines.rate_limit_retries,
        });
    }
    observation
        .questions
        .is_some()
        .then_some(StopCause::QuestionsAsked)
}

/// The earlier of a wind-down already set and `at`.
fn earliest(wind_down: Option<Instant>, at: Instant) -> Instant {
    wind_down.map_or(at, |w| w.min(at))
}

/// Ends the attempt in order: notes why it was stopped, stops whatever is left of the
/// tree, reaps the child, drains the last lines and counts the bytes.
async fn finish(
    running: Running,
    watched: Watched,
    limits: &Limits,
    observation: &mut Observation,
    signals: &mut CancelSignals,
    journal: &mut dyn Journal,
) -> AttemptEnd {
    let Running {
        started,
        mut child,
        pid,
        mut guard,
        mut lines,
        activity,
    } = running;
    let Watched {
        cause,
        child_gone,
        mut exit_status,
    } = watched;
    if let Some(reason) = cause.watchdog_reason() {
        journal.note(Note::Watchdog {
            reason,
            pending_tool: observation.pending_tool(),
        });
    }

    // Whatever the cause, nothing of the run may outlive it. Stopped for a signal, a
    // second one (Ctrl-C again) cuts the grace short: the tree gets SIGKILL at once.
    let hurry = matches!(cause, StopCause::Cancelled(_)).then_some(signals);
    let kill = if child_gone && no_child_processes() {
        KillReport::default()
    } else {
        tree::stop_tree_or_sooner(Some(pid), limits.kill_grace, hurry).await
    };
    if kill.found > 0 {
        journal.note(Note::Kill {
            processes: kill.found,
            escalated: kill.escalated,
        });
    }
    if !child_gone {
        // The tree was just stopped with SIGKILL as a last resort, so this returns promptly.
        if let Ok(Ok(status)) =
            tokio::time::timeout(limits.kill_grace + FINAL_DRAIN, child.wait()).await
        {
            exit_status = Some(status);
        }
    }
    let drain_deadline = tokio::time::Instant::now() + FINAL_DRAIN;
    loop {
        while lines.handle_next(observation, journal).is_some() {}
        if lines.open_pipes == 0
            || tokio::time::timeout_at(drain_deadline, lines.ready())
                .await
                .is_err()
        {
            break;
        }
    }
    journal.flush();
    // A reader still waiting for queue room gives up instead of waiting forever.
    lines.budget.close();
    guard.pid = None;

    observation.count_bytes(
        Pipe::Stdout,
        activity.stdout_bytes.load(Ordering::Relaxed) as usize,
    );
    observation.count_bytes(
        Pipe::Stderr,
        activity.stderr_bytes.load(Ordering::Relaxed) as usize,
    );
    let (exit_code, exit_signal) = exit_of(exit_status, !child_gone);
    AttemptEnd {
        cause,
        exit_code,
        exit_signal,
        duration: started.elapsed(),
        kill,
    }
}

/// The child's exit code and the signal that ended it, as the envelope reports them
/// (`exit_code`: the child's own, `null` when a signal ended it). A child coder stopped
/// (`stopped`: it was still running when coder stopped the tree) that exits with `128 + N`
/// for coder's SIGTERM or SIGKILL was ended by that signal: the claude CLI's handler exits
/// 143 on SIGTERM, which read as the CLI's own failure (`needs_input` with `exit_code`
/// 143, after coder had stopped it on purpose).
fn exit_of(status: Option<std::process::ExitStatus>, stopped: bool) -> (Option<i32>, Option<i32>) {
    let Some(status) = status else {
        return (None, None);
    };
    match (status.code(), status.signal()) {
        (Some(code), None)
            if stopped && (code == 128 + libc::SIGTERM || code == 128 + libc::SIGKILL) =>
        {
            (None, Some(code - 128))
        }
        (code, signal) => (code, signal),
    }
}

/// Has the allocator hand every buffer of a megabyte or more back to the system as soon as
/// it is freed. Call before any thread starts.
///
/// A long tool result is one line of megabytes, assembled by the pipe reader and handled
/// by the supervisor. Up to two such buffers are reused (see `SpareBuffer`); the others are
/// freed. glibc's default raises its mmap threshold to the largest block freed so far, so
/// after the first such line every later one would be carved out of the heap, whose freed
/// space stays resident: peak RSS would then follow the allocation history instead of the
/// buffers alive at once.
pub fn release_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter, and it is called while the process
    // is still single-threaded.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Whether coder has no child process at all, running or exited. coder is a child
/// subreaper, so once its direct child is reaped every process left of the run has been
/// re-parented to coder: no child means nothing is left to stop, and the `/proc` walk of a
/// full stop (milliseconds on a busy machine) is skipped.
fn no_child_processes() -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let peek =
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT | WaitPidFlag::__WALL;
    matches!(waitid(Id::All, peek), Err(nix::errno::Errno::ECHILD))
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn read_pipe<R: AsyncRead + Unpin>(
    mut reader: R,
    pipe: Pipe,
    tx: mpsc::Sender<PipeMsg>,
    budget: Arc<Semaphore>,
    activity: Arc<Activity>,
    mut splitter: LineSplitter,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut lines = Vec::new();
    loop {
        // A long line is read straight into its own buffer; other reads go to `buf`.
        let read = match splitter.read_into(READ_CHUNK) {
            Some(line) => {
                let from = line.len();
                let limited = &mut (&mut reader).take(READ_CHUNK as u64);
                limited.read_buf(line).await.map(|n| (n, Some(from)))
            }
            None => reader.read(&mut buf).await.map(|n| (n, None)),
        };
        match read {
            Ok((0, _)) => break,
            Ok((n, into_line)) => {
                activity.touch(pipe, n);
                match into_line {
                    Some(from) => splitter.feed_read_into(from, &mut buf, |line| lines.push(line)),
                    None => splitter.feed(&buf[..n], |line| lines.push(line)),
                }
                if !lines.is_empty()
                    && !send_lines(&tx, &budget, pipe, std::mem::take(&mut lines)).await
                {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if let Some(line) = splitter.finish() {
        send_lines(&tx, &budget, pipe, vec![line]).await;
    }
    let _ = tx.send(PipeMsg::Eof).await;
}

/// Queues the lines of one read as the budget admits them, each in turn as if it were
/// sent alone, and sends the lines admitted without waiting together; false when the
/// supervisor is gone.
///
/// Admitting line by line keeps the memory bound of one line per message: a long line
/// that takes the whole budget leaves the lines after it waiting, and the reader with
/// them, until the supervisor has handled it, so no second large buffer fills meanwhile.
async fn send_lines(
    tx: &mpsc::Sender<PipeMsg>,
    budget: &Arc<Semaphore>,
    pipe: Pipe,
    lines: Vec<Line>,
) -> bool {
    let mut batch = Vec::new();
    let mut admitted: Option<OwnedSemaphorePermit> = None;
    for line in lines {
        // What the line holds in memory, which for a line in a reused buffer is more
        // than its length. More than the whole budget still passes, alone.
        let share = line.bytes.capacity().clamp(1, QUEUED_BYTES) as u32;
        let permit = match budget.clone().try_acquire_many_owned(share) {
            Ok(permit) => permit,
            Err(tokio::sync::TryAcquireError::Closed) => return false,
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                if let Some(queued) = admitted.take()
                    && tx
                        .send(PipeMsg::Lines(pipe, std::mem::take(&mut batch), queued))
                        .await
                        .is_err()
                {
                    return false;
                }
                let Ok(permit) = budget.clone().acquire_many_owned(share).await else {
                    return false;
                };
                permit
            }
        };
        match &mut admitted {
            Some(queued) => queued.merge(permit),
            None => admitted = Some(permit),
        }
        batch.push(line);
    }
    match admitted {
        Some(queued) => tx.send(PipeMsg::Lines(pipe, batch, queued)).await.is_ok(),
        None => true,
    }
}
