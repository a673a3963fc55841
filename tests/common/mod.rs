//! Shared harness for the run-mode integration tests: a scripted fake `claude` child, the
//! built `coder` binary run under a hard deadline, and checks that nothing of a run survives.
//!
//! A test describes what the child does as a list of steps (see `fixtures/fake-claude.py`),
//! runs `coder` against it, and asserts on what a user sees: the one envelope on stdout, the
//! exit code, and the command line, environment and stdin the child was given (the fake child
//! records them). Every finished run is checked for leftover processes: each process the fake
//! child starts carries a unique marker on its command line, and `/proc` is scanned for it.
//!
//! Every envelope is also checked against the published schema.
//!
//! Nothing here may hang a test run: `coder` is killed and the test fails when it overruns its
//! deadline, and a [`Running`] dropped before it was waited for kills what is left of it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

pub mod review_tree;
pub mod sandbox_fixture;

/// The built binary under test.
pub const CODER: &str = env!("CARGO_BIN_EXE_coder");

/// The scripted child.
pub const FAKE_CLAUDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/fake-claude.py");

/// How long a run may take before the harness kills it and fails the test.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// How long processes of a finished run may take to disappear from /proc.
const REAP_DEADLINE: Duration = Duration::from_secs(3);

/// A token standing in for a credential in coder's environment; it must never be echoed back.
pub const SECRET_TOKEN: &str = "sk-fake-3c1d9b7e5a2f4d6c8b0a";

/// The real interpreter behind `python3` (not a shim: the child gets a filtered environment).
/// The system one comes first: the sandboxed child sees `/usr` but not a home directory's
/// interpreters when a test gives it another HOME.
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let system = Path::new("/usr/bin/python3");
        if system.exists() {
            return system.to_path_buf();
        }
        let probe = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output();
        match probe {
            Ok(out) if out.status.success() => {
                let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if path.is_empty() {
                    PathBuf::from("/usr/bin/python3")
                } else {
                    PathBuf::from(path)
                }
            }
            _ => PathBuf::from("/usr/bin/python3"),
        }
    })
}

fn unique_marker() -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("fakeclaude{}n{}t{}", std::process::id(), n, nanos)
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// One fake child: a temp dir with a workspace, a scenario, and a wrapper script to pass as
/// `--claude-bin`.
pub struct Fake {
    dir: tempfile::TempDir,
    workspace: PathBuf,
    state: PathBuf,
    bin: PathBuf,
    record: PathBuf,
    marker: String,
    /// Set when the fake's files live outside the workspace: coder gets `--write` for them.
    outside_state: bool,
}

impl Fake {
    /// A fake child that runs `scenario`: a JSON list of steps, or an object
    /// `{"stdin": "eof"|"none", "steps": [...]}`.
    pub fn new(scenario: Value) -> Fake {
        Fake::build(scenario, false)
    }

    /// A fake whose own files (record, scenario, readiness files) live beside the workspace
    /// in `<root>/state`, writable through `--write` (added by [`Fake::coder`]): for runs
    /// that must not write the workspace (`--sandbox read-only`). Relative paths in its
    /// scenario resolve against `<root>/state`, so `../ws/NAME` is a workspace file.
    pub fn with_state_outside_workspace(scenario: Value) -> Fake {
        Fake::build(scenario, true)
    }

    fn build(scenario: Value, outside_state: bool) -> Fake {
        let dir = tempfile::Builder::new()
            .prefix("coder-test-")
            .tempdir()
            .expect("temp dir");
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).expect("workspace");
        // The fake child's own files live inside the workspace: the only place a run is sure
        // to be allowed to write (or beside it, granted with --write).
        let state = if outside_state {
            dir.path().join("state")
        } else {
            workspace.join(".fake-claude")
        };
        std::fs::create_dir_all(&state).expect("state dir");
        // An npm-style package: the sandbox grants a program's own package directory, and
        // only the file for a lone executable.
        let bin_dir = dir.path().join("bin/node_modules/@coder-test/claude-code");
        std::fs::create_dir_all(&bin_dir).expect("bin dir");
        let scenario_path = state.join("scenario.json");
        std::fs::write(
            &scenario_path,
            serde_json::to_vec_pretty(&scenario).unwrap(),
        )
        .expect("write scenario");
        let record = state.join("record.json");
        let marker = unique_marker();
        let bin = bin_dir.join("claude");
        // The script sits beside the wrapper, in the child's package directory: the only
        // directory outside the workspace that the sandbox lets the child read.
        let fake_claude = bin_dir.join("fake-claude.py");
        std::fs::copy(FAKE_CLAUDE, &fake_claude).expect("copy fake-claude.py");
        let streams = bin_dir.join("streams");
        std::fs::create_dir_all(&streams).expect("streams dir");
        let shipped = Path::new(FAKE_CLAUDE).with_file_name("streams");
        for entry in std::fs::read_dir(&shipped).expect("fixtures/streams") {
            let entry = entry.expect("fixtures/streams entry");
            std::fs::copy(entry.path(), streams.join(entry.file_name())).expect("copy stream");
        }
        let script = format!(
            "#!/bin/sh\nexec {} {} --scenario {} --record {} --marker {} -- \"$@\"\n",
            shell_quote(&python().to_string_lossy()),
            shell_quote(&fake_claude.to_string_lossy()),
            shell_quote(&scenario_path.to_string_lossy()),
            shell_quote(&record.to_string_lossy()),
            shell_quote(&marker),
        );
        std::fs::write(&bin, script).expect("write wrapper");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Fake {
            dir,
            workspace,
            state,
            bin,
            record,
            marker,
            outside_state,
        }
    }

    /// The temp dir holding everything of this fake (workspace, wrapper, ...).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The wrapper script to pass as `--claude-bin`.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// A path for a file the child and the test share (readiness files, pid files). Inside a
    /// scenario the bare `name` means the same file: the fake child resolves relative paths
    /// against the directory of its scenario.
    pub fn file(&self, name: &str) -> PathBuf {
        self.state.join(name)
    }

    /// A `coder` invocation with `--cd <workspace> --claude-bin <wrapper>` already set.
    pub fn coder(&self) -> Coder {
        let args = if self.outside_state {
            vec!["--write".into(), self.state.clone().into_os_string()]
        } else {
            Vec::new()
        };
        Coder {
            args,
            cd: Some(self.workspace.clone().into_os_string()),
            claude_bin: Some(self.bin.clone().into_os_string()),
            stdin: None,
            env: Vec::new(),
            env_remove: Vec::new(),
            deadline: DEFAULT_DEADLINE,
            marker: self.marker.clone(),
            config_home: self.dir.path().join("xdg-config"),
            state_dir: self.state_dir(),
            inherited: None,
            through: Vec::new(),
        }
    }

    /// coder's own state (session records, locks) for runs of this fake: shared by every run
    /// of one fake, separate from other tests and from the developer's.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("coder-state")
    }

    /// Whether the child got far enough to write its record.
    pub fn has_record(&self) -> bool {
        self.record.exists()
    }

    /// What the child recorded about how it was started. Panics if it never ran.
    pub fn record(&self) -> Record {
        let text = std::fs::read_to_string(&self.record).unwrap_or_else(|e| {
            panic!(
                "the fake child wrote no record at {} ({e})",
                self.record.display()
            )
        });
        Record(serde_json::from_str(&text).expect("record is JSON"))
    }

    /// Waits until the file `name` (see [`Fake::file`]) exists; panics after `timeout`.
    pub fn wait_for_file(&self, name: &str, timeout: Duration) -> PathBuf {
        let path = self.file(name);
        wait_for_path(&path, timeout);
        path
    }

    /// Reads a pid the child wrote to the file `name`, waiting for it first.
    pub fn read_pid(&self, name: &str, timeout: Duration) -> i32 {
        let path = self.wait_for_file(name, timeout);
        let text = std::fs::read_to_string(&path).expect("pid file");
        text.trim().parse().expect("pid file holds a pid")
    }
}

/// Waits until a transcript in `state_dir` (its `runs/`) has an entry of `kind`, and
/// returns it; panics after `timeout`.
pub fn wait_for_note(state_dir: &Path, kind: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let runs = state_dir.join("runs");
        if let Ok(entries) = std::fs::read_dir(&runs) {
            for entry in entries.flatten() {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                for line in text.lines() {
                    if let Ok(v) = serde_json::from_str::<Value>(line)
                        && v["kind"] == kind
                    {
                        return v;
                    }
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no '{kind}' entry in a transcript under {} within {timeout:?}",
            runs.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls for `path` until it exists; panics after `timeout`.
pub fn wait_for_path(path: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {}",
            path.display()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until coder's phase trace at `trace` (`CODER_TRACE_PHASES`) names `phase`;
/// panics after `timeout`.
pub fn wait_for_phase(trace: &Path, phase: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(trace).unwrap_or_default();
        if text.lines().any(|l| l.ends_with(phase)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {phase} in the trace within {timeout:?}: {text}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Sends SIGTERM to a run waiting in a step of its setup and asserts it answers
/// `cancelled` at once (within `within`), saying it was cancelled `during` that step,
/// with the CLI (the fake's) never started.
pub fn cancel_during_setup(fake: &Fake, running: Running, during: &str, within: Duration) {
    let signalled = Instant::now();
    running.signal(Signal::SIGTERM);
    let out = running.wait();
    let detail = out.assert_failure("cancelled", 143);
    assert!(
        detail["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("during {during}"))),
        "cancelled during {during}, not at the run's first wait after it: {}",
        out.explain()
    );
    assert!(
        signalled.elapsed() < within,
        "answered {:?} after the signal",
        signalled.elapsed()
    );
    assert!(!fake.has_record(), "the CLI never started");
}

/// What the fake child recorded about its start.
#[derive(Debug, Clone)]
pub struct Record(pub Value);

impl Record {
    /// The child's argv, without the program name.
    pub fn argv(&self) -> Vec<String> {
        self.0["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .map(|a| a.as_str().expect("argv entry").to_string())
            .collect()
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.argv().iter().any(|a| a == flag)
    }

    /// The value after `flag` (`--flag value`) or in `--flag=value`.
    pub fn flag_value(&self, flag: &str) -> Option<String> {
        let argv = self.argv();
        let prefix = format!("{flag}=");
        for (i, a) in argv.iter().enumerate() {
            if a == flag {
                return argv.get(i + 1).cloned();
            }
            if let Some(v) = a.strip_prefix(&prefix) {
                return Some(v.to_string());
            }
        }
        None
    }

    pub fn env(&self) -> BTreeMap<String, String> {
        self.0["env"]
            .as_object()
            .expect("env")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect()
    }

    pub fn cwd(&self) -> PathBuf {
        PathBuf::from(self.0["cwd"].as_str().expect("cwd"))
    }

    pub fn pid(&self) -> i32 {
        self.0["pid"].as_i64().expect("pid") as i32
    }

    /// Everything the child read from stdin, decoded as UTF-8 (lossy).
    pub fn stdin(&self) -> String {
        self.0["stdin"]
            .as_str()
            .expect("stdin was read")
            .to_string()
    }

    /// Whether reading stdin reached end of file (coder closed it).
    pub fn stdin_eof(&self) -> bool {
        self.0["stdin_eof"].as_bool().expect("stdin_eof")
    }

    /// `pipe`, `devnull`, `tty`, `file`, ...
    pub fn stdin_kind(&self) -> String {
        self.0["stdin_kind"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn pgid(&self) -> i32 {
        self.0["pgid"].as_i64().expect("pgid") as i32
    }
}

/// A `coder` invocation being put together.
pub struct Coder {
    args: Vec<OsString>,
    cd: Option<OsString>,
    claude_bin: Option<OsString>,
    stdin: Option<Vec<u8>>,
    env: Vec<(OsString, OsString)>,
    env_remove: Vec<OsString>,
    deadline: Duration,
    marker: String,
    config_home: PathBuf,
    state_dir: PathBuf,
    /// A descriptor coder gets from its parent without close-on-exec (see [`Coder::inherit`]).
    inherited: Option<std::os::fd::OwnedFd>,
    /// A program (and its arguments) that starts coder (see [`Coder::through`]).
    through: Vec<OsString>,
}

impl Coder {
    /// Starts coder with `fd` open at the same number and not close-on-exec, as a parent
    /// that passes descriptors on does (a `make` jobserver's pipe).
    pub fn inherit(mut self, fd: std::os::fd::OwnedFd) -> Self {
        self.inherited = Some(fd);
        self
    }

    /// Starts coder through `program args…`, which gets coder's path and arguments after
    /// its own and must exec them (`unshare … sh -c '… exec "$@"'`).
    pub fn through<I, S>(mut self, program_and_args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.through = program_and_args.into_iter().map(Into::into).collect();
        self
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Leaves `--cd` out (or [`Coder::cd`] to give another value).
    pub fn no_cd(mut self) -> Self {
        self.cd = None;
        self
    }

    pub fn cd(mut self, dir: impl Into<OsString>) -> Self {
        self.cd = Some(dir.into());
        self
    }

    /// Leaves `--claude-bin` out (or [`Coder::claude_bin`] to give another value).
    pub fn no_claude_bin(mut self) -> Self {
        self.claude_bin = None;
        self
    }

    pub fn claude_bin(mut self, path: impl Into<OsString>) -> Self {
        self.claude_bin = Some(path.into());
        self
    }

    /// Bytes for coder's stdin; without this coder's stdin is `/dev/null`.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.env_remove.push(key.into());
        self
    }

    /// The hard deadline after which the harness kills coder and fails the test.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The full argument list coder is started with.
    pub fn argv(&self) -> Vec<OsString> {
        let mut argv = Vec::new();
        if let Some(cd) = &self.cd {
            argv.push("--cd".into());
            argv.push(cd.clone());
        }
        if let Some(bin) = &self.claude_bin {
            argv.push("--claude-bin".into());
            argv.push(bin.clone());
        }
        argv.extend(self.args.iter().cloned());
        argv
    }

    pub fn spawn(self) -> Running {
        let mut cmd = match self.through.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(CODER);
                cmd
            }
            None => Command::new(CODER),
        };
        cmd.args(self.argv());
        // A predictable environment: nothing from the developer's config, a credential to
        // check redaction against, and the variable coder must not pass on.
        for key in [
            "CODER_CLAUDE_BIN",
            "CODER_BACKEND",
            "CODER_CONFIG",
            "CLAUDE_CONFIG_DIR",
        ] {
            cmd.env_remove(key);
        }
        cmd.env("XDG_CONFIG_HOME", &self.config_home)
            .env("CODER_STATE_DIR", &self.state_dir)
            .env("CLAUDECODE", "1")
            .env("ANTHROPIC_AUTH_TOKEN", SECRET_TOKEN)
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .env("RUST_BACKTRACE", "1");
        for key in &self.env_remove {
            cmd.env_remove(key);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(if self.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        if let Some(fd) = &self.inherited {
            use std::os::fd::AsRawFd;
            use std::os::unix::process::CommandExt;
            let raw = fd.as_raw_fd();
            // SAFETY: fcntl on a descriptor number only, async-signal-safe between fork
            // and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::fcntl(raw, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        default_cancelling_signals(&mut cmd);
        let started = Instant::now();
        let mut child = cmd.spawn().expect("spawn coder");
        let pid = child.id() as i32;

        let stdin_writer = self.stdin.map(|bytes| {
            let mut pipe = child.stdin.take().expect("stdin pipe");
            thread::spawn(move || {
                // coder may legitimately stop reading (e.g. a bad argument): ignore EPIPE.
                let _ = pipe.write_all(&bytes);
            })
        });
        let (out_tx, out_rx) = mpsc::channel();
        let (err_tx, err_rx) = mpsc::channel();
        let mut stdout = child.stdout.take().expect("stdout pipe");
        let mut stderr = child.stderr.take().expect("stderr pipe");
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stdout.read_to_end(&mut buf);
            let _ = out_tx.send(buf);
        });
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stderr.read_to_end(&mut buf);
            let _ = err_tx.send(buf);
        });
        let (status_tx, status_rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = status_tx.send(child.wait());
        });
        Running {
            pid,
            started,
            deadline: started + self.deadline,
            marker: self.marker,
            status_rx,
            out_rx,
            err_rx,
            stdin_writer,
            finished: false,
        }
    }

    /// Runs coder to completion (see [`Running::wait`]).
    pub fn run(self) -> Outcome {
        self.spawn().wait()
    }
}

/// A `coder` process started by [`Coder::spawn`].
pub struct Running {
    pid: i32,
    started: Instant,
    deadline: Instant,
    marker: String,
    status_rx: mpsc::Receiver<std::io::Result<ExitStatus>>,
    out_rx: mpsc::Receiver<Vec<u8>>,
    err_rx: mpsc::Receiver<Vec<u8>>,
    stdin_writer: Option<thread::JoinHandle<()>>,
    finished: bool,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` to coder (only to coder, not to its group).
    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid), signal).expect("signal coder");
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn abort(&mut self, why: &str) -> ! {
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        kill_marked(&self.marker);
        self.finished = true;
        let stderr = self
            .err_rx
            .recv_timeout(Duration::from_secs(1))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        panic!("{why}; coder's stderr so far:\n{stderr}");
    }

    /// Waits for coder to exit (within the deadline), collects its output, checks that stdout
    /// is exactly one JSON object line, and that no process of the run is left.
    pub fn wait(mut self) -> Outcome {
        let status = match self.status_rx.recv_timeout(self.remaining()) {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => self.abort(&format!("waiting for coder failed: {e}")),
            Err(_) => self.abort(&format!(
                "coder did not exit within {:?}",
                self.deadline - self.started
            )),
        };
        let elapsed = self.started.elapsed();
        // coder has exited; its pipes close unless it leaked them to a survivor.
        let grace = self.remaining().max(Duration::from_secs(2));
        let stdout = match self.out_rx.recv_timeout(grace) {
            Ok(b) => b,
            Err(_) => self.abort("coder exited but its stdout stayed open (leaked to a survivor?)"),
        };
        let stderr = match self.err_rx.recv_timeout(grace) {
            Ok(b) => b,
            Err(_) => self.abort("coder exited but its stderr stayed open (leaked to a survivor?)"),
        };
        if let Some(writer) = self.stdin_writer.take() {
            let _ = writer.join();
        }
        self.finished = true;
        let stdout = String::from_utf8(stdout).expect("coder's stdout is UTF-8");
        let stderr = String::from_utf8_lossy(&stderr).into_owned();
        let envelope = parse_envelope(&stdout, &stderr);
        assert_no_process_left(&self.marker);
        Outcome {
            code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            envelope,
            elapsed,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
            kill_marked(&self.marker);
        }
    }
}

/// The published envelope schema, compiled once.
fn envelope_schema() -> &'static jsonschema::Validator {
    static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/envelope.schema.json");
        let text = std::fs::read_to_string(path).expect("read the envelope schema");
        let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
        jsonschema::validator_for(&schema).expect("the schema compiles")
    })
}

/// Stdout must be exactly one line holding one JSON object that matches the published schema.
fn parse_envelope(stdout: &str, stderr: &str) -> Value {
    let body = stdout.strip_suffix('\n').unwrap_or(stdout);
    assert!(
        !body.is_empty(),
        "coder printed nothing on stdout; stderr:\n{stderr}"
    );
    assert!(
        !body.contains('\n'),
        "coder's stdout is not exactly one line:\n{stdout}\nstderr:\n{stderr}"
    );
    let value: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"));
    assert!(value.is_object(), "the envelope is not an object: {value}");
    let violations: Vec<String> = envelope_schema()
        .iter_errors(&value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        violations.is_empty(),
        "the envelope does not match schema/envelope.schema.json: {violations:#?}\n{value}"
    );
    value
}

/// What a finished `coder` run showed.
#[derive(Debug)]
pub struct Outcome {
    /// The exit code, `None` when coder died by a signal.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub envelope: Value,
    pub elapsed: Duration,
}

impl Outcome {
    /// Asserts a success envelope with `result` text and exit code 0.
    pub fn assert_success(&self, result: &str) {
        let env = &self.envelope;
        assert_eq!(env["success"], json!(true), "{}", self.explain());
        assert_eq!(env["tool"], json!("coder"), "{}", self.explain());
        assert_eq!(env["result"], json!(result), "{}", self.explain());
        assert!(
            env.get("error_kind").is_none_or(Value::is_null),
            "a success carries no error_kind: {}",
            self.explain()
        );
        assert_eq!(self.code, Some(0), "{}", self.explain());
    }

    /// Asserts a failure envelope of `kind` with exit code `exit`, and the shape every
    /// failure shares (one-line `error`, `error_detail` with its fixed fields). Returns
    /// `error_detail`.
    pub fn assert_failure(&self, kind: &str, exit: i32) -> &Value {
        let env = &self.envelope;
        assert_eq!(env["success"], json!(false), "{}", self.explain());
        assert_eq!(env["tool"], json!("coder"), "{}", self.explain());
        assert_eq!(env["error_kind"], json!(kind), "{}", self.explain());
        assert_eq!(self.code, Some(exit), "exit code; {}", self.explain());
        let error = env["error"].as_str().unwrap_or_else(|| {
            panic!("`error` is a string: {}", self.explain());
        });
        assert!(
            !error.trim().is_empty() && !error.contains('\n'),
            "`error` is a one-line summary: {error:?}"
        );
        let detail = &env["error_detail"];
        assert!(detail.is_object(), "error_detail: {}", self.explain());
        assert!(
            detail["message"].as_str().is_some_and(|m| !m.is_empty()),
            "error_detail.message: {}",
            self.explain()
        );
        assert!(
            detail.get("exit_code").is_some(),
            "error_detail.exit_code is present (null allowed): {}",
            self.explain()
        );
        assert!(
            detail["exit_code"].is_null() || detail["exit_code"].is_i64(),
            "error_detail.exit_code: {}",
            self.explain()
        );
        let last_lines = detail["last_lines"].as_array().unwrap_or_else(|| {
            panic!("error_detail.last_lines is an array: {}", self.explain());
        });
        assert!(last_lines.len() <= 20, "at most 20 last_lines");
        assert!(
            last_lines.iter().all(Value::is_string),
            "last_lines are strings"
        );
        assert!(
            detail["json_decode_errors"].is_u64(),
            "error_detail.json_decode_errors: {}",
            self.explain()
        );
        assert!(
            detail["idle_timeout_s"].is_number(),
            "error_detail.idle_timeout_s: {}",
            self.explain()
        );
        assert!(
            detail["max_duration_s"].is_number(),
            "error_detail.max_duration_s: {}",
            self.explain()
        );
        assert!(
            detail["retries"].is_u64(),
            "error_detail.retries: {}",
            self.explain()
        );
        detail
    }

    pub fn detail(&self) -> &Value {
        &self.envelope["error_detail"]
    }

    pub fn session_id(&self) -> Option<&str> {
        self.envelope["SESSION_ID"].as_str()
    }

    /// `error_detail.last_lines` as strings.
    pub fn last_lines(&self) -> Vec<String> {
        self.detail()["last_lines"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The one-line metrics JSON coder wrote on stderr for `--log-metrics`.
    pub fn logged_metrics(&self) -> Value {
        self.stderr
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .find(|v| v.is_object())
            .unwrap_or_else(|| panic!("no JSON metrics line on stderr:\n{}", self.stderr))
    }

    /// Context for assertion messages.
    pub fn explain(&self) -> String {
        format!(
            "exit code {:?} (signal {:?}) after {:?}\nenvelope: {}\nstderr:\n{}",
            self.code,
            self.signal,
            self.elapsed,
            serde_json::to_string_pretty(&self.envelope).unwrap_or_default(),
            self.stderr
        )
    }
}

/// Every process's id and `/proc` directory, as `/proc` lists them now.
pub fn processes() -> Vec<(i32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            Some((pid, entry.path()))
        })
        .collect()
}

/// Processes whose command line contains `marker`, with their command lines.
pub fn marked_processes(marker: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for (pid, dir) in processes() {
        let Ok(raw) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        // A zombie's cmdline is empty: it is gone for our purposes (only its parent can reap).
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push((pid, cmdline.trim().to_string()));
        }
    }
    found
}

/// An event line of exactly `len` bytes (when `len` allows): `text` in a notice, `tail`
/// bytes of `x` between it and the string's closing quote. For the redaction suites, whose
/// secrets must be found wherever a long line's pieces are joined.
pub fn notice(mark: &str, text: &str, tail: usize, len: usize) -> String {
    let skeleton = format!(
        r#"{{"type":"system","subtype":"notice","text":"{mark}  {text}{}"}}"#,
        "x".repeat(tail)
    );
    let fill = r"lorem café — ipsum\n ".repeat(200);
    let need = len.saturating_sub(skeleton.len());
    // The fill is cut at a character boundary; a byte short is filled with `y`.
    let mut cut = need.min(fill.len());
    while !fill.is_char_boundary(cut) {
        cut -= 1;
    }
    let pad = format!("{}{}", &fill[..cut], "y".repeat(need - cut));
    format!(
        r#"{{"type":"system","subtype":"notice","text":"{mark} {pad} {text}{}"}}"#,
        "x".repeat(tail)
    )
}

/// A run of the fake child printing `lines` on stdout, with `env` in coder's environment;
/// returns the transcript's raw bytes.
pub fn transcript_of(lines: &[String], env: &[(&str, &str)]) -> Vec<u8> {
    let mut scenario = vec![steps::init()];
    scenario.extend(lines.iter().map(|l| json!({"step": "emit", "text": l})));
    scenario.push(steps::result_ok("done"));
    let fake = Fake::new(Value::Array(scenario));
    let mut coder = fake.coder();
    for (k, v) in env {
        coder = coder.env(*k, *v);
    }
    let out = coder.arg("task").run();
    assert_eq!(out.envelope["success"], json!(true), "{}", out.explain());
    let path = out.envelope["transcript"]
        .as_str()
        .unwrap_or_else(|| panic!("no transcript: {}", out.explain()));
    std::fs::read(Path::new(path)).unwrap()
}

/// Every decoded string (and key) of a JSON value, joined: what a reader of it sees.
pub fn json_strings(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(json_strings)
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}\n{}", json_strings(v)))
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// A transcript's entries, one JSON object per line.
pub fn read_transcript(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("transcript {}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

/// SIGKILLs every process carrying `marker` (cleanup after a failed test).
pub fn kill_marked(marker: &str) {
    for (pid, _) in marked_processes(marker) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Asserts that no process carrying `marker` is alive. Processes get a short while to be
/// reaped; survivors are killed before the assertion fails.
pub fn assert_no_process_left(marker: &str) {
    let deadline = Instant::now() + REAP_DEADLINE;
    loop {
        let left = marked_processes(marker);
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            kill_marked(marker);
            panic!("processes of the run are still alive after coder exited: {left:#?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

/// Steps for the common scenarios.
/// Makes `dir` a git work tree with one (empty) commit on `main`: a workspace `--worktree`
/// can check out.
pub fn git_init_with_a_commit(dir: &Path) {
    for args in [
        &["init", "-q", "-b", "main"][..],
        &[
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ][..],
    ] {
        let status = Command::new("git")
            .args(args)
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .output_bounded()
            .status;
        assert!(status.success(), "git {args:?}");
    }
}

pub mod steps {
    use serde_json::{Value, json};

    pub fn init() -> Value {
        json!({"step": "init"})
    }

    pub fn text(text: &str) -> Value {
        json!({"step": "assistant_text", "text": text})
    }

    pub fn result_ok(text: &str) -> Value {
        json!({"step": "result", "text": text})
    }

    pub fn exit(code: i32) -> Value {
        json!({"step": "exit", "code": code})
    }

    pub fn sleep(seconds: f64) -> Value {
        json!({"step": "sleep", "seconds": seconds})
    }

    pub fn touch(path: &str) -> Value {
        json!({"step": "touch", "path": path})
    }

    pub fn stderr(text: &str) -> Value {
        json!({"step": "stderr", "text": text})
    }

    /// init, one assistant message, a successful result.
    pub fn answer(text: &str) -> Vec<Value> {
        vec![init(), self::text(text), result_ok(text)]
    }
}

/// Tests that need something of the machine (the real claude CLI, root, user namespaces)
/// are `#[ignore = "needs …: scripts/test runs it"]`: a plain `cargo test` lists them as
/// ignored in its summary line instead of passing them having done nothing. `scripts/test`
/// probes the machine and adds `--include-ignored` when everything is there (under `CI=true`
/// it refuses to run without it). A test that runs without what it needs FAILS through the
/// guards below: it never returns early.
///
/// The real claude CLI: `CODER_TEST_CLAUDE_BIN`, else the project-local install made by
/// `scripts/setup-claude`. Panics when it is missing.
pub fn real_claude() -> PathBuf {
    if let Some(path) = std::env::var_os("CODER_TEST_CLAUDE_BIN").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "CODER_TEST_CLAUDE_BIN={} does not exist",
            path.display()
        );
        return path;
    }
    let local =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/claude/node_modules/.bin/claude");
    assert!(
        local.exists(),
        "this test needs the claude CLI, missing at {} (run scripts/setup-claude or set \
         CODER_TEST_CLAUDE_BIN; scripts/test does both)",
        local.display()
    );
    local
}

/// Whether unprivileged user namespaces work for uid 65534 (what the adversarial suites
/// attack as) — or, when not root, for this user.
pub fn user_namespaces_for_nobody() -> bool {
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("/usr/bin/setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg("/usr/bin/unshare");
        c
    } else {
        Command::new("/usr/bin/unshare")
    };
    cmd.args(["-U", "-m", "/bin/true"]).stdin(Stdio::null());
    run_bounded(&mut cmd, Duration::from_secs(10)).is_ok_and(|out| out.status.success())
}

/// The guard of the adversarial suites (`#[ignore = "needs root and user namespaces: …"]`):
/// they attack as root and as uid 65534 through a user namespace. Panics when either is
/// missing: a suite that cannot attack must not pass.
pub fn require_root_and_user_namespaces() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this adversarial test needs root (it attacks as root and as uid 65534); \
         scripts/test runs it only where it can"
    );
    assert!(
        user_namespaces_for_nobody(),
        "this adversarial test needs unprivileged user namespaces (unshare -U as uid 65534 \
         failed; see user.max_user_namespaces)"
    );
}

/// How long a helper command may take by default ([`Bounded::output_bounded`]).
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(120);

/// `Command::output()` with a deadline: collects stdout and stderr (stdin is `/dev/null`
/// unless the caller set it), and on expiry SIGKILLs the process and returns an error naming
/// the command. Pipes a survivor keeps open after the process exited count against the
/// deadline too. The command is not moved to another process group: some under test call
/// `setsid` themselves.
pub fn run_bounded(cmd: &mut Command, deadline: Duration) -> Result<std::process::Output, String> {
    let started = Instant::now();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let described = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot spawn {described}: {e}"))?;
    let pid = Pid::from_raw(child.id() as i32);
    let mut out = child.stdout.take().expect("stdout pipe");
    let mut err = child.stderr.take().expect("stderr pipe");
    let (out_tx, out_rx) = mpsc::channel();
    let (err_tx, err_rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        let _ = out_tx.send(buf);
    });
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err.read_to_end(&mut buf);
        let _ = err_tx.send(buf);
    });
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let left = || deadline.saturating_sub(started.elapsed());
    let status = match rx.recv_timeout(left()) {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => return Err(format!("waiting for {described}: {e}")),
        Err(_) => {
            let _ = kill(pid, Signal::SIGKILL);
            return Err(format!("{described} did not finish within {deadline:?}"));
        }
    };
    let grace = left().max(Duration::from_secs(2));
    let (Ok(stdout), Ok(stderr)) = (out_rx.recv_timeout(grace), err_rx.recv_timeout(grace)) else {
        return Err(format!(
            "{described} exited but a survivor kept its stdout or stderr open"
        ));
    };
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// Deadlines for `Command`s a test runs directly (the usual replacement for `.output()` and
/// `.status()`, which wait forever).
pub trait Bounded {
    /// `.output()` that fails the test after `deadline`.
    fn output_within(&mut self, deadline: Duration) -> std::process::Output;
    /// `.output()` that fails the test after [`COMMAND_DEADLINE`].
    fn output_bounded(&mut self) -> std::process::Output {
        self.output_within(COMMAND_DEADLINE)
    }
    /// `.status()` (output captured and dropped) that fails the test after
    /// [`COMMAND_DEADLINE`].
    fn status_bounded(&mut self) -> ExitStatus {
        self.output_bounded().status
    }
}

impl Bounded for Command {
    fn output_within(&mut self, deadline: Duration) -> std::process::Output {
        run_bounded(self, deadline).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Waits for a spawned child with a deadline; SIGKILLs it and fails the test on expiry.
pub fn wait_within(child: &mut std::process::Child, deadline: Duration) -> ExitStatus {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if started.elapsed() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("process {} did not exit within {deadline:?}", child.id());
            }
            Err(e) => panic!("waiting for process {}: {e}", child.id()),
        }
    }
}

/// A deadline for a process a test drives by hand (reads its pipes, signals it): after
/// `deadline` a watchdog thread SIGKILLs it, which ends any read of its pipes and any wait, so
/// the test fails instead of hanging. Dropping the guard disarms it.
pub struct Deadline {
    disarm: Option<mpsc::Sender<()>>,
}

impl Deadline {
    pub fn kill_after(child: &std::process::Child, deadline: Duration) -> Deadline {
        let pid = Pid::from_raw(child.id() as i32);
        let (tx, rx) = mpsc::channel::<()>();
        thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(deadline) {
                eprintln!(
                    "test deadline: process {pid} still running after {deadline:?}; killing it"
                );
                let _ = kill(pid, Signal::SIGKILL);
            }
        });
        Deadline { disarm: Some(tx) }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(tx) = self.disarm.take() {
            let _ = tx.send(());
        }
    }
}

/// A spawned process killed (with its process group) when dropped: servers a test starts
/// must not outlive a failed assertion. It gets a process group of its own for that.
pub struct KillOnDrop(pub std::process::Child);

impl KillOnDrop {
    /// Spawns `cmd` in its own process group.
    pub fn spawn(cmd: &mut Command) -> KillOnDrop {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        KillOnDrop(cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")))
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        let _ = nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Refuses to rewrite fixtures under `CI=true`: `CODER_UPDATE_FIXTURES` there would turn every
/// snapshot comparison into a pass. Returns whether the caller should rewrite.
pub fn update_fixtures() -> bool {
    let asked = std::env::var_os("CODER_UPDATE_FIXTURES").is_some();
    assert!(
        !(asked && std::env::var("CI").as_deref() == Ok("true")),
        "CODER_UPDATE_FIXTURES is set under CI=true: snapshots are compared in CI, never \
         rewritten"
    );
    asked
}

/// The real claude CLI against a replay cassette from `fixtures/cassettes`, through coder:
/// a fake's private directories (workspace, state, config) and a config file naming the
/// cassette as backend `e2e`, with the CLI's own retries set to `cli_retries`.
pub struct ReplayScene {
    pub fake: Fake,
    pub claude: PathBuf,
    pub config: PathBuf,
}

impl ReplayScene {
    pub fn new(cassette: &str, cli_retries: u32) -> ReplayScene {
        let claude = real_claude();
        // The fake child is not used: only its workspace and private directories are.
        let fake = Fake::new(serde_json::json!([]));
        let config = fake.root().join("coder.toml");
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/cassettes")
            .join(cassette);
        std::fs::write(
            &config,
            format!(
                "[backends.e2e]\nkind = \"replay\"\ncassette = {:?}\nmax_retries = {cli_retries}\n",
                path.display().to_string()
            ),
        )
        .unwrap();
        ReplayScene {
            fake,
            claude,
            config,
        }
    }

    /// `coder` with the real CLI and the `e2e` backend, stopped after `deadline`.
    pub fn coder_within(&self, deadline: Duration) -> Coder {
        self.fake
            .coder()
            .claude_bin(self.claude.clone())
            .arg("--config")
            .arg(self.config.clone())
            .args(["--backend", "e2e"])
            .deadline(deadline)
    }

    pub fn workspace(&self) -> &Path {
        self.fake.workspace()
    }
}

/// Wait until every directory under `dir` changed more than the sandbox's listing cache's
/// racy margin ago (2 s; `src/sandbox/listing.rs`): only then does the git guard trust the
/// start scan's listings, so only then is that shortcut under attack. The margin is
/// measured against the clock, so the test waits for the clock: there is no event.
pub fn age_past_the_racy_margin(dir: &Path) {
    let newest = dirs_below(dir)
        .iter()
        .map(|d| {
            let st = std::fs::symlink_metadata(d).unwrap();
            std::os::unix::fs::MetadataExt::ctime(&st) as f64
                + std::os::unix::fs::MetadataExt::ctime_nsec(&st) as f64 / 1e9
        })
        .fold(0.0, f64::max);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let wait = newest + 2.5 - now;
    if wait > 0.0 {
        thread::sleep(Duration::from_secs_f64(wait));
    }
}

/// `dir` and every directory below it (not a file system's `lost+found`).
fn dirs_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() && e.file_name() != "lost+found" {
            out.extend(dirs_below(&e.path()));
        }
    }
    out
}

/// Starts `cmd` with SIGINT, SIGTERM and SIGHUP at their defaults, as a shell starts a
/// foreground command: coder keeps a cancelling signal ignored when it starts ignored, and
/// a test runner may itself run with SIGINT ignored (nohup, a background job of a CI
/// shell), which its children would inherit.
pub fn default_cancelling_signals(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal() is async-signal-safe between fork and exec and touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            for signo in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                if libc::signal(signo, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
