//! Two coders sharing one state directory from different PID namespaces (two containers
//! mounting one home): the PID in a run directory's name means nothing to the other
//! coder, which must still not take the directory of a run that is alive
//! (`src/config/run_dirs.rs`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::sandbox_fixture::{PATH, temp_root, write};
use common::{Bounded, CODER};

/// A PID below `pid_max` that no process here has: the PID that coder gets in a new PID
/// namespace whose last PID is set to one less.
fn pid_free_here() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (max / 2..max - 1)
        .rev()
        .find(|pid| !Path::new("/proc").join(pid.to_string()).exists())
        .expect("a free PID")
}

fn sandbox(home: &Path, ws: &Path) -> Command {
    let mut cmd = Command::new("/usr/bin/timeout");
    cmd.args(["60", CODER, "sandbox", "--mode", "workspace-write", "--cd"])
        .arg(ws)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", home)
        .current_dir(ws)
        .stdin(Stdio::null());
    cmd
}

/// Where the runs' `TMPDIR`s are, each a run directory of its own (round twenty-one).
fn runs_dir(home: &Path) -> PathBuf {
    home.join(".local/state/coder/sandbox-tmp")
}

#[test]
#[ignore = "needs root (a PID namespace whose next PID the test sets): scripts/test runs it"]
fn a_run_in_another_pid_namespace_keeps_its_run_directory_while_a_host_run_starts() {
    let (_dir, root) = temp_root(".tmp-pidns");
    let home = root.join("home");
    let (inner_ws, host_ws) = (root.join("inner"), root.join("host"));
    write(&home.join(".bashrc"), "# rc\n");
    write(&inner_ws.join("README.md"), "x\n");
    write(&host_ws.join("README.md"), "x\n");
    let pid = pid_free_here();

    // Run A: in a new PID namespace, as PID `pid`, a command that waits for `go`, then
    // writes into its private TMPDIR (a run directory of its own).
    let agent = "touch up; until [ -e go ]; do sleep 0.02; done; echo x > \"$TMPDIR/after\"";
    let mut a = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "/bin/bash", "-c"])
        // bash forks the command: it gets the PID after the namespace's last one.
        .arg("echo $(($1 - 1)) > /proc/sys/kernel/ns_last_pid || exit 97; shift; \"$@\"; exit $?")
        .args(["pidns", &pid.to_string(), CODER, "sandbox"])
        .args(["--mode", "workspace-write", "--cd"])
        .arg(&inner_ws)
        .args(["--", "/bin/bash", "-c", agent])
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", &home)
        .current_dir(&inner_ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_path(&inner_ws.join("up"), Duration::from_secs(30));
    let names: Vec<String> = std::fs::read_dir(runs_dir(&home))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with(&format!("{pid}-"))),
        "run A's directory is not named by PID {pid}, which names nothing here: {names:?}"
    );

    // Run B, on the host, in the same state directory.
    let b = sandbox(&home, &host_ws)
        .args(["--", "/bin/true"])
        .output_bounded();
    assert!(
        b.status.success(),
        "run B: {}",
        String::from_utf8_lossy(&b.stderr)
    );

    write(&inner_ws.join("go"), "");
    let status = common::wait_within(&mut a, Duration::from_secs(60));
    let mut err = String::new();
    if let Some(mut e) = a.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(
        status.success(),
        "run A lost its private TMPDIR to run B's pruning: {status:?} {err}"
    );
    let left: Vec<_> = std::fs::read_dir(runs_dir(&home))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "run directories left after both runs: {left:?}"
    );
}
