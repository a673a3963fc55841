//! The tree of the adversarial review suites (rounds thirteen to sixteen), which run a fake
//! `claude` whose payload is a shell script ([`sandbox_fixture::payload_claude`]) under coder, as one arm's
//! user, confined and (for the controls) unconfined, and read what coder printed.
//!
//! A [`Tree`] is a temporary directory holding the workspace `ws`, `home`, coder's `state`
//! and `xdg` (and whatever else a suite names), given to uid 65534 for that arm; its
//! workspace may be the user's git repository ([`Tree::repo`], [`Tree::git`]). Coder is
//! started on the fake CLI as a user would ([`Tree::coder`], [`Tree::run`]); a suite that
//! starts it its own way (another program between, another `PATH`) builds on
//! [`Tree::fake_claude`] and [`sandbox_fixture::user_env`]. The envelope's parts the suites look at are read
//! by [`changes`], [`result`], [`error_kind`] and [`warned`].
//!
//! Each suite used to carry its own copy of all this; where they differ (where the tree is
//! made, the order a repository's files are written and committed in), the difference is
//! an argument or a call of the suite's own.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::sandbox_fixture::{self, NOBODY, Umount};
use super::{Bounded, COMMAND_DEADLINE};

/// Where most suites make their tree: out of the host's `/tmp`, which `--allow-tmp` grants.
pub const VAR_TMP: &str = "/var/tmp";

/// An arm's name in a failure message.
pub fn who(owner: Option<u32>) -> &'static str {
    if owner.is_some() { "nobody" } else { "root" }
}

/// A tree for runs of a fake CLI as one arm's user (`owner`: root when `None`).
pub struct Tree {
    /// Bind mounts made in the tree ([`Tree::bind`]), undone before it is removed.
    mounts: Vec<Umount>,
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub owner: Option<u32>,
}

impl Tree {
    /// A fresh directory named `prefix…` in `parent`, mode 0755 (uid 65534 must reach it),
    /// holding `ws`, `home`, `state`, `xdg` and `dirs` (paths relative to it). Nothing is
    /// given to the arm's user until [`Tree::give_away`].
    pub fn bare(prefix: &str, parent: impl AsRef<Path>, owner: Option<u32>, dirs: &[&str]) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(parent)
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        for d in ["ws", "home", "state", "xdg"].iter().chain(dirs) {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Tree {
            mounts: Vec::new(),
            _dir: dir,
            root,
            owner,
        }
    }

    /// [`Tree::bare`], given to the arm's user at once.
    pub fn new(prefix: &str, parent: impl AsRef<Path>, owner: Option<u32>, dirs: &[&str]) -> Tree {
        let tree = Tree::bare(prefix, parent, owner, dirs);
        tree.give_away();
        tree
    }

    /// [`Tree::bare`] in [`VAR_TMP`], its workspace the user's git repository: `config`
    /// (key, value) set, then `files` (name, content) written with an mtime well in the
    /// past (so that the index's stat data of them is not "racily clean") and committed.
    /// Then it is given to the arm's user, whose git refreshes the index.
    pub fn repo(
        prefix: &str,
        owner: Option<u32>,
        dirs: &[&str],
        files: &[(&str, &str)],
        config: &[(&str, &str)],
    ) -> Tree {
        let tree = Tree::bare(prefix, VAR_TMP, owner, dirs);
        tree.git(&["init", "-q"]);
        for (key, value) in config {
            tree.git(&["config", key, value]);
        }
        tree.write_old(files);
        tree.git(&["add", "-A"]);
        tree.git(&["commit", "-qm", "init"]);
        if owner.is_some() {
            tree.give_away();
            // The index's stat data as the user's own git keeps it (the owner's too).
            tree.git(&["update-index", "-q", "--refresh"]);
        }
        tree
    }

    /// Gives the whole tree to the arm's user (a no-op for root).
    pub fn give_away(&self) {
        if self.owner.is_some() {
            sandbox_fixture::give_to_nobody(&self.root);
        }
    }

    pub fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    /// Writes `files` (name, content) in the workspace, each with an mtime well in the past.
    pub fn write_old(&self, files: &[(&str, &str)]) {
        let ws = self.ws();
        for (name, text) in files {
            std::fs::write(ws.join(name), text).unwrap();
            sandbox_fixture::must_run(
                Command::new("touch")
                    .args(["-d", "2020-01-01 00:00:00"])
                    .arg(ws.join(name)),
            );
        }
    }

    /// The user's own git in the workspace, unconfined, as the arm's user once its `.git`
    /// is theirs (as root before the tree is given away), which must succeed: what it
    /// printed.
    pub fn git(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        cmd.args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
            .args(args)
            .current_dir(self.ws())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.root.join("home"))
            .stdin(Stdio::null());
        let given = std::fs::symlink_metadata(self.ws().join(".git"))
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == NOBODY)
            .unwrap_or(false);
        if given {
            sandbox_fixture::as_owner(&mut cmd, self.owner);
        }
        let out = cmd.output_bounded();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `mount --bind SOURCE TARGET` (both relative to the tree), undone when it goes.
    pub fn bind(&mut self, source: &str, target: &str) {
        let (source, target) = (self.root.join(source), self.root.join(target));
        std::fs::create_dir_all(&target).unwrap();
        sandbox_fixture::must_run(
            Command::new("mount")
                .arg("--bind")
                .arg(&source)
                .arg(&target),
        );
        self.mounts.push(Umount(target));
    }

    /// Writes the fake CLI whose payload is `payload` ([`sandbox_fixture::payload_claude`]), the arm's
    /// user's: its path.
    pub fn fake_claude(&self, payload: &str) -> PathBuf {
        let bin = self.root.join("fake-claude");
        std::fs::write(&bin, sandbox_fixture::payload_claude(payload)).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        if self.owner.is_some() {
            std::os::unix::fs::lchown(&bin, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        bin
    }

    /// coder as the arm's user on a fake CLI whose payload is `payload`, with `extra` flags
    /// and `task`, in the workspace ([`sandbox_fixture::coder_as`]); not started.
    pub fn coder(&self, extra: &[&str], payload: &str, task: &str) -> Command {
        let bin = self.fake_claude(payload);
        sandbox_fixture::coder_as(&self.root, self.owner, &self.ws(), &bin, extra, task)
    }

    /// Runs [`Tree::coder`] (task `go`) to its end: its envelope.
    pub fn run(&self, extra: &[&str], payload: &str) -> Value {
        self.run_within(extra, payload, COMMAND_DEADLINE)
    }

    /// [`Tree::run`] with `env` added to coder's environment.
    pub fn run_with(&self, extra: &[&str], payload: &str, env: &[(&str, &str)]) -> Value {
        envelope(
            &self
                .coder(extra, payload, "go")
                .envs(env.iter().copied())
                .output_bounded(),
        )
    }

    /// [`Tree::run`], failing the test when coder has not ended after `deadline`.
    pub fn run_within(&self, extra: &[&str], payload: &str, deadline: Duration) -> Value {
        envelope(&self.coder(extra, payload, "go").output_within(deadline))
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        // Unmounted before the temporary directory removes what is below them.
        self.mounts.drain(..).rev().for_each(drop);
    }
}

/// The envelope coder printed on stdout; the test fails when there is none.
pub fn envelope(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"))
}

/// `(path, status)` of every change the envelope lists.
pub fn changes(env: &Value) -> Vec<(String, String)> {
    env["changes"]["files"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap_or_default().to_owned(),
                f["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `(path, status)` of every entry `changes.ignored` lists (empty when it is absent).
pub fn ignored(env: &Value) -> Vec<(String, String)> {
    env["changes"]["ignored"]["paths"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or_default().to_owned(),
                c["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The envelope's `result` (`""` when it has none).
pub fn result(env: &Value) -> &str {
    env["result"].as_str().unwrap_or_default()
}

/// The envelope's `error_kind` (`""` when it has none).
pub fn error_kind(env: &Value) -> &str {
    env["error_kind"].as_str().unwrap_or_default()
}

/// Whether one of the envelope's warnings contains `text`.
pub fn warned(env: &Value, text: &str) -> bool {
    env["warnings"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .any(|w| w.as_str().unwrap_or_default().contains(text))
}

/// The bytes that drive a terminal: C0 controls but line feed and tab, DEL, and the C1
/// range (UTF-8 `C2 80` to `C2 9F`).
pub fn drives_a_terminal(text: &[u8]) -> bool {
    text.iter()
        .any(|&b| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f)
        || text
            .windows(2)
            .any(|w| w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1]))
}
