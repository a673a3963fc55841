//! Round thirteen's review: the mechanisms added in round twelve, attacked by someone who
//! has read the code. Every attack runs as root and as uid 65534 where it applies, each
//! with a control showing that the payload does land without the defence.
//!
//! Found open when this review started, closed with it:
//! * `--transcript` and a SQLite `--store` were refused in a `--write` grant (or `/tmp`
//!   with `--allow-tmp`) by comparing paths only: the same directory under another path (a
//!   bind mount of the grant, or of a directory in it) was let through, and the agent
//!   rewrote the file through the grant's own path.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::{Path, PathBuf};

use common::Bounded;
use common::sandbox_fixture::{self, NOBODY, Umount};
use serde_json::Value;

/// Attacks of this file measured open today.
const KNOWN_OPEN: &[&str] = &[];

fn who(owner: Option<u32>) -> &'static str {
    if owner.is_some() { "nobody" } else { "root" }
}

/// A tree for runs of a fake CLI as one arm's user: workspace `ws`, `home`, coder's
/// `state`, in `/var/tmp` (out of the host's `/tmp` that `--allow-tmp` grants).
struct Tree {
    /// Bind mounts made in the tree, undone before it is removed.
    mounts: Vec<Umount>,
    _dir: tempfile::TempDir,
    root: PathBuf,
    owner: Option<u32>,
}

impl Tree {
    fn new(owner: Option<u32>, dirs: &[&str]) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("coder-r13-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        for d in ["ws", "home", "state", "xdg"].iter().chain(dirs) {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        if owner.is_some() {
            sandbox_fixture::give_to_nobody(&root);
        }
        Tree {
            mounts: Vec::new(),
            _dir: dir,
            root,
            owner,
        }
    }

    /// `mount --bind SOURCE TARGET` (both relative to the tree), undone when it goes.
    fn bind(&mut self, source: &str, target: &str) {
        let (source, target) = (self.root.join(source), self.root.join(target));
        std::fs::create_dir_all(&target).unwrap();
        sandbox_fixture::must_run(
            std::process::Command::new("mount")
                .arg("--bind")
                .arg(&source)
                .arg(&target),
        );
        self.mounts.push(Umount(target));
    }

    /// Runs a fake CLI whose payload is `payload` with `extra` flags; returns the envelope.
    fn run(&self, extra: &[&str], payload: &str) -> Value {
        let bin = self.root.join("fake-claude");
        std::fs::write(&bin, sandbox_fixture::payload_claude(payload)).unwrap();
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        if self.owner.is_some() {
            std::os::unix::fs::lchown(&bin, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let ws = self.root.join("ws");
        let out = sandbox_fixture::coder_as(&self.root, self.owner, &ws, &bin, extra, "go")
            .output_bounded();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"))
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        // Unmounted before the temporary directory removes what is below them.
        self.mounts.drain(..).rev().for_each(drop);
    }
}

/// `--transcript` and a SQLite `--store` are refused in a grant the agent may write
/// (round twelve: `--write`, `/tmp` with `--allow-tmp`). The same directory has other
/// names: a bind mount of the `--write` directory, or of a directory inside it. Named
/// through one, the file was let through, and the agent rewrote it through the grant's own
/// path. Both are refused now, before anything runs. Controls: the bind mount of a
/// directory the agent is not given runs and the payload does not land; unconfined, the
/// payload lands through the bind mount.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_transcript_or_store_reached_through_a_bind_mount_of_a_write_grant_is_refused() {
    common::require_root_and_user_namespaces();
    let name = "transcript or store through a bind mount";
    for owner in [None, Some(NOBODY)] {
        // `alias` shows `w` itself, `alias-sub` shows `w/sub`; `other` is not granted.
        for (alias, under_w) in [("alias", "."), ("alias-sub", "sub")] {
            for (flag, file) in [("--transcript", "t.jsonl"), ("--store", "coder.db")] {
                let mut tree = Tree::new(owner, &["w/sub", "other"]);
                tree.bind(&format!("w/{under_w}"), alias);
                tree.bind("other", "other-alias");
                let (root, w) = (tree.root.clone(), tree.root.join("w"));
                let real = w.join(under_w).join(file);
                let through = root.join(alias).join(file);
                let payload = format!("echo FORGED > '{}' && echo WROTE", real.display());
                let landed = |path: &Path| {
                    std::fs::read(path)
                        .unwrap_or_default()
                        .starts_with(b"FORGED\n")
                };
                let write = format!("--write={}", w.display());
                let target = through.to_str().unwrap();
                let env = tree.run(&[&write, flag, target], &payload);
                let case = format!("{}: {name}: {flag} {alias}", who(owner));
                if KNOWN_OPEN.contains(&name) {
                    assert!(landed(&real), "{case}: now blocked: {env}");
                } else {
                    assert_eq!(env["error_kind"], "config_error", "{case}: {env}");
                    let error = env["error"].as_str().unwrap_or_default();
                    assert!(error.contains(target), "{case}: {env}");
                    assert!(!landed(&real), "{case}: the payload landed: {env}");
                }

                // Control: a bind mount of a directory not granted runs, and the agent
                // cannot reach the file there.
                let other = root.join("other").join(file);
                let through_other = root.join("other-alias").join(file);
                let payload = format!("echo FORGED > '{}' && echo WROTE", other.display());
                let env = tree.run(&[&write, flag, through_other.to_str().unwrap()], &payload);
                assert_eq!(env["success"], true, "{case}: control: {env}");
                assert!(!landed(&other), "{case}: control: landed confined: {env}");

                // Control: unconfined, the payload lands through the bind mount.
                let _ = std::fs::remove_file(&real);
                let payload = format!("echo FORGED > '{}' && echo WROTE", real.display());
                let env = tree.run(
                    &["--sandbox", "danger-full-access", &write, flag, target],
                    &payload,
                );
                assert!(landed(&through), "{case}: control: unconfined: {env}");
            }
        }
    }
}

/// The same for the workspace itself, where both were refused by path since before round
/// twelve: a bind mount of the workspace (or of a directory in it) let them through, and
/// the agent rewrote them in its own tree. Controls as above.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_transcript_or_store_reached_through_a_bind_mount_of_the_workspace_is_refused() {
    common::require_root_and_user_namespaces();
    let name = "transcript or store through a bind mount of the workspace";
    for owner in [None, Some(NOBODY)] {
        for (alias, under_ws) in [("alias", "."), ("alias-sub", "sub")] {
            for (flag, file) in [("--transcript", "t.jsonl"), ("--store", "coder.db")] {
                let mut tree = Tree::new(owner, &["ws/sub"]);
                tree.bind(&format!("ws/{under_ws}"), alias);
                let root = tree.root.clone();
                let real = root.join("ws").join(under_ws).join(file);
                let through = root.join(alias).join(file);
                let landed = |path: &Path| {
                    std::fs::read(path)
                        .unwrap_or_default()
                        .starts_with(b"FORGED\n")
                };
                let payload = format!("echo FORGED > '{}' && echo WROTE", real.display());
                let target = through.to_str().unwrap();
                let env = tree.run(&[flag, target], &payload);
                let case = format!("{}: {name}: {flag} {alias}", who(owner));
                if KNOWN_OPEN.contains(&name) {
                    assert!(landed(&real), "{case}: now blocked: {env}");
                } else {
                    assert_eq!(env["error_kind"], "config_error", "{case}: {env}");
                    let error = env["error"].as_str().unwrap_or_default();
                    assert!(error.contains(target), "{case}: {env}");
                    assert!(!landed(&real), "{case}: the payload landed: {env}");
                }
                // Control: outside the workspace, the same file runs and stays coder's.
                let outside = root.join("home").join(file);
                let payload = format!("echo FORGED > '{}' && echo WROTE", outside.display());
                let env = tree.run(&[flag, outside.to_str().unwrap()], &payload);
                assert_eq!(env["success"], true, "{case}: control: {env}");
                assert!(!landed(&outside), "{case}: control: landed confined: {env}");
            }
        }
    }
}
