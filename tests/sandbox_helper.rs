//! The helper applying a policy resolved earlier, as in a run: a secret swapped between the
//! scan and the mount (another file, or a symlink put in place of a directory) must stop
//! the child from starting, with a sandbox error, instead of leaving the secret unmasked.

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

fn helper(policy: Policy, program: &str, args: &[&str]) -> Output {
    let spec = HelperSpec {
        program: program.into(),
        args: args.iter().map(Into::into).collect(),
        parent_pid: std::process::id(),
        policy: Some(policy),
        env: None,
        cwd: None,
    };
    Command::new(env!("CARGO_BIN_EXE_coder"))
        .arg(HELPER_ARG)
        .arg(serde_json::to_string(&spec).unwrap())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .unwrap()
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
