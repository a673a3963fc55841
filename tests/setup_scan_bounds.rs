//! The sandbox's setup scan is bounded and can be stopped. An agent may leave big scripts
//! where a held script (one the user's git alias runs) names them: the next run reads
//! every one to hold what they run in turn. Round twenty-eight's review planted sixty
//! scripts of 250 KiB that way: every later run's setup took 155 s (debug build), and a
//! `SIGTERM` sent meanwhile was acted on only when the scan ended. Now the scan reads at
//! most 8 MiB of such scripts a git dir (past that the run is refused, naming the last
//! script read, as past the count of files), and a signal stops the scan: `coder sandbox`
//! dies of it, a run answers `cancelled`, and what the setup made is gone.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{CODER, Fake, wait_for_phase};
use nix::sys::signal::Signal;
use serde_json::json;

/// A git work tree at `dir` whose `git fmt` runs `tools/ci.sh`, which runs `count`
/// scripts of about 250 KiB each under `tools/gen/`, of `line`s repeated.
fn plant(dir: &Path, count: usize, line: &str) {
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["config", "alias.fmt", "!sh tools/ci.sh"]);
    std::fs::create_dir_all(dir.join("tools/gen")).expect("tools/gen");
    let runs: String = (0..count)
        .map(|i| format!("sh tools/gen/s{i}.sh\n"))
        .collect();
    std::fs::write(dir.join("tools/ci.sh"), runs).expect("ci.sh");
    let big = line.repeat(250 * 1024 / line.len());
    for i in 0..count {
        std::fs::write(dir.join(format!("tools/gen/s{i}.sh")), &big).expect("script");
    }
}

/// A shell line of the kind that costs the reader most (words, paths, operators).
const BUSY_LINE: &str = "echo built $n && test -f data/file.txt || cp src/a.c build/b.o\n";

/// The names in `dir` (recursively, `.git` left out), to show the setup left nothing.
fn names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn scripts_past_the_budget_refuse_the_sandbox_naming_one() {
    let ws = tempfile::tempdir().expect("tempdir");
    // Comment lines: cheap to read, so the test measures the budget, not the reader.
    plant(ws.path(), 40, &format!("# {}\n", "x".repeat(78)));
    let before = names(ws.path());
    let out = Command::new(CODER)
        .args(["sandbox", "--cd"])
        .arg(ws.path())
        .args(["--", "true"])
        .output()
        .expect("coder sandbox runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "a config_error: {stderr}");
    assert!(
        stderr.contains("more than 8 MiB") && stderr.contains("tools/gen/s"),
        "names the budget and a planted script: {stderr}"
    );
    assert_eq!(names(ws.path()), before, "the setup left nothing behind");

    // Under the budget the same tree is set up and the command runs.
    let small = tempfile::tempdir().expect("tempdir");
    plant(small.path(), 8, &format!("# {}\n", "x".repeat(78)));
    let out = Command::new(CODER)
        .args(["sandbox", "--cd"])
        .arg(small.path())
        .args(["--", "true"])
        .output()
        .expect("coder sandbox runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn scripts_past_the_budget_refuse_the_run_as_a_config_error() {
    let fake = Fake::new(json!([common::steps::init()]));
    plant(fake.workspace(), 40, &format!("# {}\n", "x".repeat(78)));
    let out = fake.coder().arg("task").run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("more than 8 MiB") && message.contains("tools/gen/s"),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the CLI never started");
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn sigterm_during_the_setup_scan_ends_coder_sandbox_at_once() {
    let ws = tempfile::tempdir().expect("tempdir");
    // Under the budget, and slow to read in a debug build (over a minute): the signal
    // finds the scan reading.
    plant(ws.path(), 31, BUSY_LINE);
    let before = names(ws.path());
    let trace = tempfile::NamedTempFile::new().expect("trace file");
    let mut child = Command::new(CODER)
        .args(["sandbox", "--cd"])
        .arg(ws.path())
        .args(["--", "true"])
        .env("CODER_TRACE_PHASES", trace.path())
        .spawn()
        .expect("coder sandbox starts");
    wait_for_phase(trace.path(), "scan.start", Duration::from_secs(30));
    let signalled = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        Signal::SIGTERM,
    )
    .expect("signal");
    // Without the cancel the process lived until the scan's end, a minute or more on.
    let deadline = signalled + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("coder sandbox still ran 30 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    let trace_text = std::fs::read_to_string(trace.path()).unwrap_or_default();
    assert!(
        !trace_text.contains("policy.done"),
        "the setup was stopped, not finished: {trace_text}"
    );
    assert_eq!(names(ws.path()), before, "the setup left nothing behind");
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn sigterm_during_the_setup_scan_cancels_the_run_at_once() {
    let fake = Fake::new(json!([common::steps::init()]));
    plant(fake.workspace(), 31, BUSY_LINE);
    let before = names(fake.workspace());
    let trace = fake.root().join("phases.trace");
    let running = fake
        .coder()
        .arg("task")
        .env("CODER_TRACE_PHASES", &trace)
        .deadline(Duration::from_secs(60))
        .spawn();
    wait_for_phase(&trace, "scan.start", Duration::from_secs(30));
    let within = Duration::from_secs(30);
    common::cancel_during_setup(&fake, running, "the sandbox's setup", within);
    assert_eq!(
        names(fake.workspace()),
        before,
        "the setup left nothing behind"
    );
}
