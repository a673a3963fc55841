//! The helper applying a policy resolved earlier, as in a run: a secret swapped between the
//! scan and the mount (another file, or a symlink put in place of a directory) must stop
//! the child from starting, with a sandbox error, instead of leaving the secret unmasked.

mod common;

use common::Bounded;

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use coder::sandbox::helper::{HELPER_ARG, HelperSpec};
use coder::sandbox::{Mode, Policy, PolicyOptions};

fn policy_for(root: &Path) -> Policy {
    let mut opts = PolicyOptions::new(Mode::WorkspaceWrite, root.join("ws"));
    opts.home = Some(root.join("home"));
    opts.config_dir = Some(root.join("state/claude"));
    opts.runs_dir = Some(root.join("state/runs"));
    Policy::resolve(&opts).unwrap()
}

/// The network channel a confined helper needs (see `sandbox::netns`): the test keeps
/// one end open while the helper runs, and passes the other as `NET_FD`, after a status
/// argument that names no descriptor (failures then go to stderr).
fn net_channel() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    nix::fcntl::fcntl(
        &theirs,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    (ours, theirs)
}

fn helper(policy: Policy, program: &str, args: &[&str]) -> Output {
    use std::os::fd::AsRawFd;
    let spec = HelperSpec {
        program: program.into(),
        args: args.iter().map(Into::into).collect(),
        parent_pid: std::process::id(),
        policy: Some(policy),
        env: None,
        cwd: None,
    };
    let (_ours, theirs) = net_channel();
    Command::new(env!("CARGO_BIN_EXE_coder"))
        .arg(HELPER_ARG)
        .arg(serde_json::to_string(&spec).unwrap())
        .arg("-")
        .arg(theirs.as_raw_fd().to_string())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .output_bounded()
}

fn fixture() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    fs::create_dir_all(root.join("ws/secrets")).unwrap();
    fs::create_dir_all(root.join("home")).unwrap();
    fs::create_dir_all(root.join("elsewhere")).unwrap();
    fs::write(root.join("ws/.env"), "TOKEN=first\n").unwrap();
    fs::write(root.join("ws/secrets/db.txt"), "pw\n").unwrap();
    fs::write(root.join("elsewhere/db.txt"), "elsewhere\n").unwrap();
    (dir, root)
}

#[test]
fn the_helper_masks_what_the_parent_scanned() {
    let (_dir, root) = fixture();
    let policy = policy_for(&root);
    let out = helper(policy, "/bin/cat", &[".env", "secrets/db.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
}

#[test]
fn a_secret_replaced_after_the_scan_stops_the_child() {
    let (_dir, root) = fixture();
    let policy = policy_for(&root);
    // An editor's atomic save: a new file renamed over the old one (a new inode).
    fs::write(root.join("ws/env.tmp"), "TOKEN=second\n").unwrap();
    fs::rename(root.join("ws/env.tmp"), root.join("ws/.env")).unwrap();
    let out = helper(policy, "/bin/cat", &[".env"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(71), "{stderr}");
    assert!(
        stderr.contains("changed between the secret scan"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("second"));
}

#[test]
fn a_symlink_swapped_in_for_a_secret_directory_stops_the_child() {
    let (_dir, root) = fixture();
    let policy = policy_for(&root);
    fs::rename(root.join("ws/secrets"), root.join("ws/moved")).unwrap();
    std::os::unix::fs::symlink(root.join("elsewhere"), root.join("ws/secrets")).unwrap();
    let out = helper(policy, "/bin/cat", &["secrets/db.txt"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(71), "{stderr}");
    assert!(
        stderr.contains("changed between the secret scan"),
        "{stderr}"
    );
}

/// A helper started before its spec was known (the first attempt's, in a run) reads the
/// spec from a pipe, and runs the program with the spec's environment and directory rather
/// than its own.
#[test]
fn a_helper_started_early_takes_its_spec_environment_and_directory_from_a_pipe() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let (_dir, root) = fixture();
    fs::create_dir_all(root.join("ws/sub")).unwrap();
    let policy = policy_for(&root);
    let (spec_read, spec_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    nix::fcntl::fcntl(
        &spec_read,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let (_ours, theirs) = net_channel();
    let child = Command::new(env!("CARGO_BIN_EXE_coder"))
        .arg(HELPER_ARG)
        .arg(format!("&{}", spec_read.as_raw_fd()))
        .arg("-")
        .arg(theirs.as_raw_fd().to_string())
        .env_clear()
        .env("GREETING", "from the helper's own environment")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop((spec_read, theirs));
    let spec = HelperSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "echo \"$GREETING\"; pwd".into()],
        parent_pid: std::process::id(),
        policy: Some(policy),
        env: Some(vec![
            ("GREETING".into(), "hello".into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ]),
        cwd: Some(root.join("ws/sub")),
    };
    let _deadline = common::Deadline::kill_after(&child, common::COMMAND_DEADLINE);
    let mut pipe = fs::File::from(spec_write);
    pipe.write_all(serde_json::to_string(&spec).unwrap().as_bytes())
        .unwrap();
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("hello\n{}\n", root.join("ws/sub").display())
    );
}

/// Without the network channel nobody could serve the agent's proxy: the helper refuses to
/// start the program rather than run it with no (or an open) network.
#[test]
fn a_confined_helper_without_a_network_channel_fails_closed() {
    let (_dir, root) = fixture();
    let policy = policy_for(&root);
    let spec = HelperSpec {
        program: "/bin/true".into(),
        args: Vec::new(),
        parent_pid: std::process::id(),
        policy: Some(policy),
        env: None,
        cwd: None,
    };
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .arg(HELPER_ARG)
        .arg(serde_json::to_string(&spec).unwrap())
        .env_clear()
        .stdin(Stdio::null())
        .output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(71), "{stderr}");
    assert!(stderr.contains("egress proxy"), "{stderr}");
}

/// Starts the helper as coder does for a run's first attempt (`&FD`: the spec comes later
/// on a pipe); returns it and the pipe's write end.
fn early_helper(cwd: &Path) -> (std::process::Child, fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::AsRawFd;
    let (spec_read, spec_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    nix::fcntl::fcntl(
        &spec_read,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let (ours, theirs) = net_channel();
    let child = Command::new(env!("CARGO_BIN_EXE_coder"))
        .arg(HELPER_ARG)
        .arg(format!("&{}", spec_read.as_raw_fd()))
        .arg("-")
        .arg(theirs.as_raw_fd().to_string())
        .env_clear()
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop((spec_read, theirs));
    (child, fs::File::from(spec_write), ours)
}

/// The pid namespace of `pid`, as `/proc` names it.
fn pid_namespace(pid: u32) -> Option<std::path::PathBuf> {
    fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// The helper started before its spec enters the sandbox's namespaces while it waits
/// (coder resolves the policy meanwhile): before any spec is written, its child is the
/// init of a new PID namespace. Given the spec, it confines and runs the program as ever.
#[test]
fn a_helper_started_early_enters_the_namespaces_before_its_spec_comes() {
    use std::io::Write;
    let (_dir, root) = fixture();
    let (child, spec_write, _net) = early_helper(&root.join("ws"));
    let _deadline = common::Deadline::kill_after(&child, common::COMMAND_DEADLINE);
    let ours = pid_namespace(std::process::id()).unwrap();
    let children = format!("/proc/{}/task/{}/children", child.id(), child.id());
    let started = std::time::Instant::now();
    let init = loop {
        let found = fs::read_to_string(&children)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .find(|p| pid_namespace(*p).is_some_and(|ns| ns != ours));
        if let Some(init) = found {
            break init;
        }
        assert!(
            started.elapsed() < common::COMMAND_DEADLINE,
            "no child in a new PID namespace before the spec was written"
        );
        std::thread::yield_now();
    };
    assert_ne!(pid_namespace(init), Some(ours));
    let spec = HelperSpec {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "echo confined; ls /proc | grep -c '^[0-9]'".into(),
        ],
        parent_pid: std::process::id(),
        policy: Some(policy_for(&root)),
        env: Some(vec![("PATH".into(), "/usr/bin:/bin".into())]),
        cwd: Some(root.join("ws")),
    };
    let mut pipe = spec_write;
    pipe.write_all(serde_json::to_string(&spec).unwrap().as_bytes())
        .unwrap();
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The program ran in the namespace: its /proc shows init, the agent and its own
    // `ls` and `grep` at most, not the host's processes.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("confined"), "{stdout}");
    let seen: usize = lines.next().unwrap().trim().parse().unwrap();
    assert!(seen <= 5, "{stdout}");
}

/// A helper that entered the namespaces for a confined child refuses a spec that confines
/// nothing, instead of running the program with half a sandbox.
#[test]
fn a_helper_started_early_refuses_a_spec_without_a_policy() {
    use std::io::Write;
    let (_dir, root) = fixture();
    let marker = root.join("ws/ran");
    let (child, spec_write, _net) = early_helper(&root.join("ws"));
    let _deadline = common::Deadline::kill_after(&child, common::COMMAND_DEADLINE);
    let spec = HelperSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), format!("touch {}", marker.display()).into()],
        parent_pid: std::process::id(),
        policy: None,
        env: Some(vec![("PATH".into(), "/usr/bin:/bin".into())]),
        cwd: Some(root.join("ws")),
    };
    let mut pipe = spec_write;
    pipe.write_all(serde_json::to_string(&spec).unwrap().as_bytes())
        .unwrap();
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(71), "{stderr}");
    assert!(stderr.contains("confines nothing"), "{stderr}");
    assert!(!marker.exists());
}
