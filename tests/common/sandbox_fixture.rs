//! Fixtures of the sandbox attack suites, which run the same attack twice: as root, whom
//! nothing but the sandbox stops, and as uid 65534 (`nobody`, started through `setpriv`),
//! whose runs take the unprivileged user-namespace path. An attack counts only when it is
//! blocked for both, and its control (the same commands unconfined) works for both.
//!
//! What is here: the two arms ([`arms`]); the runner that starts a program as an arm's
//! user under `timeout` ([`as_arm`]); a temporary tree (workspace, home, coder's state
//! directory) that is given to that user ([`Fixture`]), with `coder sandbox -- sh -c SCRIPT`
//! run in it; the user's own repository in the workspace, and the git the user runs in it,
//! unconfined, after coder exited ([`GitFx`], [`attack`]); a fake `claude` that runs a
//! shell payload ([`payload_claude`]) and coder started on it as a user would
//! ([`coder_as`], in the environment [`user_env`] sets).
//!
//! Each suite used to carry its own copy of all this. Where suites differ (the environment
//! of their runs, their repository's branch, who owns its README), the difference is an
//! argument here ([`Fixture::with_env`], [`RepoStyle`]), so a suite's fixture says how it
//! differs instead of copying the rest.
//!
//! The suites that watch their processes (pids, signals, a victim of the same user) start
//! them as the arm's user directly instead, with nothing between: [`owners`] names the arms
//! by uid, [`as_owner`] sets it on a `Command`, [`chown_tree`] gives a tree to it,
//! [`temp_root`] makes their tree, and [`bash_sandbox`] is their `coder sandbox` run, with
//! an environment of `PATH` and `HOME` alone; [`Victim`] is a host process they aim at.

use std::ffi::{OsStr, OsString};
use std::ops::Deref;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use super::{Bounded, CODER, require_root_and_user_namespaces};

/// The unprivileged arm's uid and gid.
pub const NOBODY: u32 = 65534;

/// The arms of an attack: root (`false`), then uid 65534 (`true`). Panics on a machine
/// without root or user namespaces (`scripts/test` runs these suites only where it can,
/// and CI must).
pub fn arms() -> Vec<bool> {
    require_root_and_user_namespaces();
    vec![false, true]
}

/// Waits (60 s at most) for `child`, a `coder sandbox` under `timeout` whose command prints
/// `READY` once its payload is planted, to print it, then SIGKILLs coder itself (timeout's
/// child; as `nobody`, setpriv execs coder in place) and reaps `child`: a killed coder
/// runs no end-of-run guard.
pub fn kill_coder_when_ready(child: &mut Child) {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("the child's stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    let line = rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
    assert_eq!(line, "READY");
    let coder = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse::<i32>()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(coder),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
}

/// `timeout SECONDS PROGRAM`, as uid/gid 65534 without supplementary groups when `nobody`,
/// stdin `/dev/null`. (`setpriv` execs the program in place: `timeout`'s child is the
/// program either way.)
pub fn as_arm(nobody: bool, seconds: u32, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.arg(seconds.to_string());
    if nobody {
        cmd.args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]);
    }
    cmd.arg(program).stdin(Stdio::null());
    cmd
}

/// The `PATH` of the runs [`bash_sandbox`] makes (their environment is cleared).
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The arms of an attack by the uid their programs run as: root (`None`), then 65534.
/// Panics where [`arms`] does.
pub fn owners() -> Vec<Option<u32>> {
    arms()
        .into_iter()
        .map(|nobody| nobody.then_some(NOBODY))
        .collect()
}

/// Starts `cmd` as `owner` (uid and gid) when set. The standard library drops the
/// supplementary groups when it changes the uid, so this is `setpriv --reuid --regid
/// --clear-groups` without a program of its own between the test and the process.
pub fn as_owner(cmd: &mut Command, owner: Option<u32>) -> &mut Command {
    if let Some(uid) = owner {
        cmd.uid(uid).gid(uid);
    }
    cmd
}

/// Gives the tree at `path` to `uid` (uid and gid), not following symlinks. Entries it
/// already owns are left alone (chown clears setuid bits) and so are entries gone by the
/// time they are reached (what a killed attack left behind).
pub fn chown_tree(path: &Path, uid: u32) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.uid() != uid || meta.gid() != uid {
        match std::os::unix::fs::lchown(path, Some(uid), Some(uid)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                panic!("chown {}: {e}", path.display())
            }
            _ => {}
        }
    }
    if meta.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for entry in entries.flatten() {
            chown_tree(&entry.path(), uid);
        }
    }
}

/// Writes `text` to `path`, creating its parent directories.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A fresh temporary directory named `prefix…`, mode 0755 (uid 65534 must reach it), and
/// its canonical path.
pub fn temp_root(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, root)
}

/// `coder sandbox --cd WS ARGS -- /bin/bash -c SCRIPT` under `timeout 60`, as `owner`
/// ([`as_owner`]), from `ws`, stdin `/dev/null`, and an environment of [`PATH`] and `HOME`
/// (`home`) alone.
pub fn bash_sandbox(
    owner: Option<u32>,
    ws: &Path,
    home: &Path,
    args: &[&str],
    script: &str,
) -> Command {
    let mut cmd = Command::new("/usr/bin/timeout");
    cmd.args(["60", CODER, "sandbox", "--cd"])
        .arg(ws)
        .args(args)
        .args(["--", "/bin/bash", "-c", script])
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", home)
        .current_dir(ws)
        .stdin(Stdio::null());
    as_owner(&mut cmd, owner);
    cmd
}

/// A host process an attack aims at (signals, `/proc`), killed and reaped on drop.
pub struct Victim(Child);

impl Victim {
    /// Starts `cmd` with its stdout and stderr to `/dev/null`.
    pub fn spawn(cmd: &mut Command) -> Victim {
        Victim(
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Whether it has not exited (nor died of a signal) yet.
    pub fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A finished command for a failure message: its exit code, stdout and stderr.
pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}, stdout {:?}, stderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd` (under the default deadline) and fails the test unless it succeeds.
pub fn must_run(cmd: &mut Command) {
    let o = cmd.output_bounded();
    assert!(o.status.success(), "{cmd:?}: {}", printed(&o));
}

/// `chown -R 65534:65534 path` (not following symlinks).
pub fn give_to_nobody(path: &Path) {
    must_run(Command::new("chown").args(["-R", "65534:65534"]).arg(path));
}

/// The uid of each arm's user ([`owners`]): 0 for root, [`NOBODY`] for the other.
pub fn victims() -> Vec<u32> {
    owners().into_iter().map(|o| o.unwrap_or(0)).collect()
}

/// What a finished command printed: its stdout, then its stderr.
pub fn printed(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `cmd` to its end (under the default deadline): its exit code (-1 when a signal
/// ended it) and what it printed.
pub fn run_text(cmd: &mut Command) -> (i32, String) {
    let o = cmd.output_bounded();
    (o.status.code().unwrap_or(-1), printed(&o))
}

/// A shell script that prints, a line each, what a sandbox shows of each of `paths`:
/// `path: CONTENT STATE`, the content (its lines joined) or `DENIED`, then `writable` or
/// `fixed`.
pub fn view_script(paths: &[&str]) -> String {
    paths
        .iter()
        .map(|p| format!("printf '%s: ' '{p}'; {}", view_one_script(p)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// [`view_script`] of one path, without its `path: ` prefix.
pub fn view_one_script(path: &str) -> String {
    format!(
        "(cat '{path}' 2>/dev/null || echo DENIED) | tr '\\n' ' '; \
         if (printf x >> '{path}') 2>/dev/null; then echo writable; else echo fixed; fi"
    )
}

/// Unmounts a path when dropped.
pub struct Umount(pub PathBuf);

impl Drop for Umount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A temporary tree for one arm: its root is mode 0755 (uid 65534 must reach it) and
/// holds the directories the suite named; `home` and `state` are the `HOME` and
/// `CODER_STATE_DIR` of every program it runs. Nothing is given to uid 65534 until the
/// suite calls [`Fixture::own`], once it has written what it needs as root.
pub struct Fixture {
    /// Mounts made for the fixture ([`Fixture::mount`]), undone before the tree is removed.
    mounts: Vec<Umount>,
    dir: tempfile::TempDir,
    /// Whether this is the uid 65534 arm.
    pub nobody: bool,
    /// Set (`Some`) or removed (`None`) in the environment of every program it runs.
    env: Vec<(&'static str, Option<OsString>)>,
}

impl Fixture {
    /// A fresh directory named `prefix…` holding `dirs` (paths relative to it).
    pub fn new(prefix: &str, nobody: bool, dirs: &[&str]) -> Fixture {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        for d in dirs {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Fixture {
            mounts: Vec::new(),
            dir,
            nobody,
            env: Vec::new(),
        }
    }

    /// The same, with `vars` set in the environment of every program it runs.
    pub fn with_env(mut self, vars: &[(&'static str, &'static str)]) -> Fixture {
        self.env
            .extend(vars.iter().map(|&(k, v)| (k, Some(OsString::from(v)))));
        self
    }

    /// The same, with `var` set to `value` in the environment of every program it runs.
    pub fn with_var(mut self, var: &'static str, value: impl AsRef<OsStr>) -> Fixture {
        self.env.push((var, Some(value.as_ref().to_owned())));
        self
    }

    /// The same, with `var` removed from the environment of every program it runs.
    pub fn without_env(mut self, var: &'static str) -> Fixture {
        self.env.push((var, None));
        self
    }

    /// For `coder run`/`coder plan`: a dummy backend on a closed loopback port (the fake
    /// agent never calls it), and none of the caller's coder or CLI configuration.
    pub fn with_dummy_backend(self) -> Fixture {
        self.with_env(&[
            ("ANTHROPIC_AUTH_TOKEN", "dummy"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
        ])
        .without_env("CODER_CONFIG")
        .without_env("CODER_BACKEND")
        .without_env("CLAUDE_CONFIG_DIR")
        .without_env("XDG_RUNTIME_DIR")
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Gives the tree at `path` to the arm's user (a no-op for root).
    pub fn own(&self, path: &Path) {
        if self.nobody {
            give_to_nobody(path);
        }
    }

    /// Writes `text` at `ws/rel`, and the directories to it that were missing, all given
    /// to the arm's user: the path written.
    pub fn own_file(&self, ws: &Path, rel: &str, text: &str) -> PathBuf {
        let path = ws.join(rel);
        let made: Vec<PathBuf> = path
            .ancestors()
            .skip(1)
            .take_while(|d| *d != ws)
            .filter(|d| !d.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        for dir in made {
            self.own_entry(&dir);
        }
        self.own_entry(&path);
        path
    }

    /// Gives `path` itself (not what is below it, not a symlink's target) to the arm's user.
    pub fn own_entry(&self, path: &Path) {
        if self.nobody {
            std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY)).unwrap();
        }
    }

    /// `mount OPTIONS SOURCE TARGET`, unmounted when the fixture goes.
    pub fn mount(&mut self, options: &[&str], source: &Path, target: &Path) {
        must_run(Command::new("mount").args(options).arg(source).arg(target));
        self.mounts.push(Umount(target.to_path_buf()));
    }

    /// `program` as the arm's user under `timeout 60`, with the fixture's environment.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = as_arm(self.nobody, 60, program);
        // `SHELL` and `TERM` as a login at a terminal sets them, never the runner's: where
        // the runner has no `SHELL`, bash takes the account's (`nobody`'s is nologin) and a
        // held script's `$SHELL FILE` ran nothing, even unconfined (a CI run without
        // `SHELL` failed the control); without `TERM`, `watch` runs nothing.
        cmd.env("HOME", self.root().join("home"))
            .env("SHELL", "/bin/sh")
            .env("TERM", "xterm")
            .env("CODER_STATE_DIR", self.root().join("state"));
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }

    /// `root/ws`, the workspace of most suites.
    pub fn ws(&self) -> PathBuf {
        self.root().join("ws")
    }

    /// `coder sandbox ARGS --cd WS -- sh -c SCRIPT`, as [`Fixture::command`] runs it.
    pub fn sandbox_in(&self, ws: &Path, args: &[&str], script: &str) -> Command {
        let mut cmd = self.command(CODER);
        cmd.arg("sandbox")
            .args(args)
            .arg("--cd")
            .arg(ws)
            .args(["--", "sh", "-c", script]);
        cmd
    }

    /// `sh -c script` through `coder sandbox` with `args`, in [`Fixture::ws`]: its exit
    /// code and what it printed.
    pub fn sandbox(&self, args: &[&str], script: &str) -> (i32, String) {
        run_text(&mut self.sandbox_in(&self.ws(), args, script))
    }

    /// What a sandbox with `args` in `ws` shows of each of `paths` ([`view_script`]); the
    /// run must succeed.
    pub fn view_in(&self, ws: &Path, args: &[&str], paths: &[&str]) -> String {
        let (rc, out) = run_text(&mut self.sandbox_in(ws, args, &view_script(paths)));
        assert_eq!(rc, 0, "nobody={}: {out}", self.nobody);
        out
    }

    /// [`Fixture::view_in`] the workspace.
    pub fn view(&self, args: &[&str], paths: &[&str]) -> String {
        self.view_in(&self.ws(), args, paths)
    }

    /// The start scan's kept listings in the state directory, sorted.
    pub fn caches(&self) -> Vec<PathBuf> {
        let dir = self.root().join("state/listings");
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        found.sort();
        found
    }
}

/// The environment of the user's git (and of coder, so that the agent's git sees the
/// same): no system config, a fixed identity, no `XDG_CONFIG_HOME`.
const USER_GIT_ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_AUTHOR_NAME", "u"),
    ("GIT_AUTHOR_EMAIL", "u@example.invalid"),
    ("GIT_COMMITTER_NAME", "u"),
    ("GIT_COMMITTER_EMAIL", "u@example.invalid"),
];

/// How a suite's [`GitFx`] is made.
pub struct RepoStyle {
    /// The prefix of its temporary directory's name.
    pub prefix: &'static str,
    /// `git init` arguments (a branch, say).
    pub init: &'static [&'static str],
    /// Whether the committed `README` is given to the arm's user, so that an agent running
    /// as uid 65534 can rewrite it.
    pub readme_owned: bool,
    /// More environment for every program the fixture runs.
    pub env: &'static [(&'static str, &'static str)],
}

/// A [`Fixture`] of `ws`, `home` and `state` whose workspace is the user's repository, one
/// commit of a `README`; payloads leave their mark at [`GitFx::marker`].
pub struct GitFx {
    fx: Fixture,
}

impl Deref for GitFx {
    type Target = Fixture;

    fn deref(&self) -> &Fixture {
        &self.fx
    }
}

impl GitFx {
    pub fn new(style: &RepoStyle, nobody: bool) -> GitFx {
        GitFx::on(
            Fixture::new(style.prefix, nobody, &["ws", "home", "state"]),
            style,
        )
    }

    /// Gives `fx` (made with `ws`, `home` and `state`) to the arm's user and makes its
    /// repository.
    pub fn on(fx: Fixture, style: &RepoStyle) -> GitFx {
        let fx = fx
            .with_env(USER_GIT_ENV)
            .with_env(style.env)
            .without_env("XDG_CONFIG_HOME");
        fx.own(fx.root());
        let fx = GitFx { fx };
        fx.git(&fx.ws(), style.init);
        std::fs::write(fx.ws().join("README"), "hello\n").unwrap();
        if style.readme_owned {
            fx.own_entry(&fx.ws().join("README"));
        }
        fx.git(&fx.ws(), &["add", "README"]);
        fx.git(&fx.ws(), &["commit", "-qm", "init"]);
        fx
    }

    /// Where a payload leaves its mark: outside the workspace, invisible to the sandbox.
    pub fn marker(&self) -> PathBuf {
        self.root().join("home/PWNED")
    }

    /// The user's own git, unconfined (as the arm's user), in `dir`: what it printed.
    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        printed(
            &self
                .command("git")
                .args(args)
                .current_dir(dir)
                .output_bounded(),
        )
    }

    /// `sh -c script` through `coder sandbox --mode MODE`, in the workspace, with `M` naming
    /// the marker (this, not [`Fixture::sandbox`], is what `fx.sandbox` calls on a `GitFx`).
    pub fn sandbox(&self, mode: &str, script: &str) -> (i32, String) {
        run_text(
            self.sandbox_in(&self.ws(), &["--mode", mode], script)
                .env("M", self.marker()),
        )
    }

    /// Starts `coder sandbox` whose command makes the nested repository `n` with a
    /// `core.fsmonitor` that touches the marker, and kills coder with SIGKILL once it is
    /// made: no guard of its own ran. Control: the user's `git status` in `n` runs the
    /// payload then (the hole a killed run leaves, until the next coder runs); the marker
    /// is removed after.
    pub fn kill_a_run_that_armed_a_repo(&self) {
        let mut child = self
            .command(env!("CARGO_BIN_EXE_coder"))
            .args(["sandbox", "--cd"])
            .arg(self.ws())
            .args([
                "--",
                "sh",
                "-c",
                "git init -q n && git -C n config core.fsmonitor \"touch '$M'; false\" && \
                 echo READY && exec sleep 60",
            ])
            .env("M", self.marker())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        kill_coder_when_ready(&mut child);
        let _ = self.git(&self.ws().join("n"), &["status", "--short"]);
        assert!(
            self.marker().exists(),
            "control: the killed run's repo must still be armed"
        );
        std::fs::remove_file(self.marker()).unwrap();
    }

    /// The agent of a confined run arms a repository of its own beyond the end-of-run
    /// guard's cap (lowered to 2 entries): `plant` makes `n`, whose `core.fsmonitor`
    /// touches the marker (and whatever else), then prints `PLANTED`. The guard stops
    /// (exit 71) and records where it stopped. The control is asserted (the user's `git
    /// status` in `n` runs the payload) and the marker removed. What coder printed.
    pub fn stop_a_guard_armed(&self, plant: &str) -> String {
        let nobody = self.nobody;
        let (rc, out) = run_text(
            self.sandbox_in(&self.ws(), &["--mode", "workspace-write"], plant)
                .env("M", self.marker())
                .env("CODER_TEST_GUARD_MAX_ENTRIES", "2"),
        );
        assert!(out.contains("PLANTED"), "nobody={nobody}: {out}");
        assert_eq!(rc, 71, "nobody={nobody}: {out}");
        let _ = self.git(&self.ws().join("n"), &["status", "--short"]);
        assert!(
            self.marker().exists(),
            "nobody={nobody}: control: not armed"
        );
        std::fs::remove_file(self.marker()).unwrap();
        out
    }

    /// A run in another directory (same state directory) while the workspace is renamed
    /// away, as the agent of another run with a grant over its parent could; the workspace
    /// is back at its path after. What that run printed.
    pub fn run_elsewhere_while_away(&self) -> String {
        self.run_elsewhere_while_replaced(false)
    }

    /// [`GitFx::run_elsewhere_while_away`], with an empty directory of the arm's user at
    /// the workspace's path meanwhile when `decoy`.
    pub fn run_elsewhere_while_replaced(&self, decoy: bool) -> String {
        let (ws, away) = (self.ws(), self.root().join("ws-away"));
        std::fs::rename(&ws, &away).unwrap();
        if decoy {
            std::fs::create_dir(&ws).unwrap();
            self.own_entry(&ws);
        }
        let other = self.root().join("other");
        std::fs::create_dir(&other).unwrap();
        self.own_entry(&other);
        let (rc, elsewhere) = run_text(&mut self.sandbox_in(
            &other,
            &["--mode", "workspace-write"],
            "echo ELSEWHERE",
        ));
        assert_eq!(rc, 0, "{elsewhere}");
        if decoy {
            std::fs::remove_dir(&ws).unwrap();
        }
        std::fs::rename(&away, &ws).unwrap();
        elsewhere
    }
}

/// One attack on the end-of-run git guard, for each arm: `setup` prepares the fixture,
/// `script` plants the attack (the payload is `touch "$M"`) and prints `PLANTED`, then the
/// user runs git with `user.1` in `user.0` (relative to the workspace). Confined: the
/// payload never runs and the guard reports what it moved, unless `name` is in
/// `known_open`, where it must still run (a ratchet that can only shrink). The control,
/// unconfined (`danger-full-access`): the user's git runs it.
pub fn attack(
    style: &RepoStyle,
    known_open: &[&str],
    name: &str,
    setup: fn(&GitFx),
    script: &str,
    user: (&str, &[&str]),
) {
    let open = known_open.contains(&name);
    for nobody in arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = GitFx::new(style, nobody);
            setup(&fx);
            let (rc, out) = fx.sandbox(mode, script);
            assert_eq!(rc, 0, "{name} nobody={nobody} {mode}: {out}");
            assert!(
                out.contains("PLANTED"),
                "{name}: the attack did not run: {out}"
            );
            // The sandboxed command's own git may have fired the payload unconfined;
            // only what the user's git does afterwards counts.
            let _ = std::fs::remove_file(fx.marker());
            let git_out = fx.git(&fx.ws().join(user.0), user.1);
            let ran = fx.marker().exists();
            if mode == "danger-full-access" {
                assert!(
                    ran,
                    "{name} nobody={nobody}: control: the user's git must run the payload \
                     without the guard: {out}\n{git_out}"
                );
            } else if open {
                assert!(
                    ran,
                    "{name} nobody={nobody}: blocked now, remove it from KNOWN_OPEN: \
                     {out}\n{git_out}"
                );
            } else {
                assert!(
                    !ran,
                    "{name} nobody={nobody}: the user's git ran the agent's payload: \
                     {out}\n{git_out}"
                );
                assert!(
                    out.contains("git guard:"),
                    "{name}: no quarantine reported: {out}"
                );
            }
        }
    }
}

/// The agent's plant for [`GitFx::stop_a_guard_armed`]: a repository `n` of its own whose
/// `core.fsmonitor` touches the marker at the user's `git status` there.
pub const ARMED_REPO: &str =
    "git init -q n && git -C n config core.fsmonitor \"touch '$M'; false\" && echo PLANTED";

/// How [`held_attack`] launches the agent: where its script starts, relative to the
/// workspace (empty: the workspace), and extra `coder sandbox` arguments.
#[derive(Default)]
pub struct Launch {
    pub cd: String,
    pub args: Vec<String>,
}

/// A file the sandbox holds read-only, reached some other way. For each arm and mode:
/// `fixture` makes the arm's repository, `setup` prepares it (as root, giving what it makes
/// to the arm's user) and says how to launch the agent, whose `script` plants a payload
/// (`touch "$M"`) and prints `PLANTED`; then the user runs `git USER` in the workspace,
/// outside any sandbox. Unconfined (the control) the payload must run; confined it must
/// not, unless `open` (a known-open ratchet, where it still must until fixed).
pub fn held_attack(
    name: &str,
    open: bool,
    fixture: &dyn Fn(bool) -> GitFx,
    setup: &dyn Fn(&GitFx, &Path) -> Launch,
    script: &str,
    user: &[&str],
) {
    for nobody in arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = fixture(nobody);
            let ws = fx.ws();
            let launch = setup(&fx, &ws);
            let mut args = vec!["--mode", mode];
            args.extend(launch.args.iter().map(String::as_str));
            let (rc, out) = run_text(
                fx.sandbox_in(&ws.join(&launch.cd), &args, script)
                    .env("M", fx.marker()),
            );
            assert_eq!(rc, 0, "{name} nobody={nobody} {mode}: {out}");
            assert!(
                out.contains("PLANTED"),
                "{name}: the attack did not run: {out}"
            );
            // The sandboxed command's own git may have fired the payload; only what the
            // user's git does afterwards counts.
            let _ = std::fs::remove_file(fx.marker());
            let git_out = fx.git(&ws, user);
            let ran = fx.marker().exists();
            let want = mode == "danger-full-access" || open;
            assert_eq!(
                ran, want,
                "{name} nobody={nobody} {mode} (known open: {open}): the user's git ran \
                 the payload: {ran}\n{out}\n{git_out}"
            );
        }
    }
}

/// A fake `claude`: takes its session id from argv, runs `payload` with bash in its
/// working directory, and reports the payload's output (quotes and backslashes dropped,
/// lines joined) as the result.
pub fn payload_claude(payload: &str) -> String {
    format!(
        r#"#!/bin/bash
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac; shift
done
cat >/dev/null
echo '{{"type":"system","subtype":"init","session_id":"'"$sid"'","tools":[],"model":"m"}}'
out=$( ( {payload}
) 2>&1 | tr -d '"\\' | tr '\n' ' ')
echo '{{"type":"result","subtype":"success","is_error":false,"result":"done: '"$out"'","session_id":"'"$sid"'","num_turns":1}}'
"#
    )
}

/// `coder --cd CD --claude-bin BIN EXTRA… TASK` as a user would start it, under `timeout
/// 120`, from `root` and as `owner` (uid and gid) when set: the environment cleared but
/// for `PATH`, `HOME` (`root/home`), coder's state (`root/state`), `XDG_CONFIG_HOME`
/// (`root/xdg`), a test token and an API nothing listens on, and git without its system
/// config.
pub fn coder_as(
    root: &Path,
    owner: Option<u32>,
    cd: &Path,
    bin: &Path,
    extra: &[&str],
    task: &str,
) -> Command {
    let mut cmd = Command::new("/usr/bin/timeout");
    cmd.args(["120", CODER, "--cd"])
        .arg(cd)
        .arg("--claude-bin")
        .arg(bin)
        .args(extra)
        .arg(task);
    user_env(&mut cmd, root, PATH);
    as_owner(&mut cmd, owner);
    cmd
}

/// The environment, working directory and stdin of coder started from `root` as a user
/// would ([`coder_as`]): the environment cleared but for `PATH` (`path`), `HOME`
/// (`root/home`), coder's state (`root/state`), `XDG_CONFIG_HOME` (`root/xdg`), a test
/// token and an API nothing listens on, and git without its system config; stdin
/// `/dev/null`.
pub fn user_env<'a>(cmd: &'a mut Command, root: &Path, path: impl AsRef<OsStr>) -> &'a mut Command {
    cmd.env_clear()
        .env("PATH", path)
        .env("HOME", root.join("home"))
        .env("CODER_STATE_DIR", root.join("state"))
        .env("XDG_CONFIG_HOME", root.join("xdg"))
        .env("ANTHROPIC_AUTH_TOKEN", "test-token")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .current_dir(root)
        .stdin(Stdio::null())
}

/// The payload a shell script of the work tree gets: `touch "$M"` appended, as the arm's
/// shell writes it.
pub const SCRIPT_PAYLOAD: &str = "printf 'touch \"%s\"\\n' \"$M\"";

/// One attack on the work-tree scripts rule, for each arm and mode: `setup` makes the
/// user's repository and config in `ws`; `script` is the agent's, run through `coder
/// sandbox` (it prints `PLANTED` once its writes are done, whether they landed or not);
/// `user` is the user's git afterwards, outside any sandbox. Confined, the payload must
/// not run unless `name` is in `known_open` (a ratchet); unconfined (the control), it
/// must.
pub fn held_file_attack(
    style: &RepoStyle,
    known_open: &[&str],
    name: &str,
    setup: impl Fn(&GitFx, &Path),
    script: &str,
    user: &[&str],
) {
    let launch = |fx: &GitFx, ws: &Path| {
        setup(fx, ws);
        Launch::default()
    };
    let open = known_open.contains(&name);
    held_attack(
        name,
        open,
        &|nobody| GitFx::new(style, nobody),
        &launch,
        script,
        user,
    );
}

/// The agent's hook: `ci/gh/pre-commit`, a `#!` line and executable, that creates the
/// marker `$M` (planted where a held script points git's hooks).
pub const PLANT_CI_GH_HOOK: &str = "mkdir -p ci/gh; printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" \
                                    > ci/gh/pre-commit; chmod +x ci/gh/pre-commit; echo PLANTED";

/// The user's `git ci` = `!SHELL tools/ci.sh`, whose text is `script` (the arm's user's).
pub fn user_ci(fx: &GitFx, ws: &Path, shell: &str, script: &str) {
    fx.own_file(ws, "tools/ci.sh", &format!("{script}\n"));
    fx.git(
        ws,
        &["config", "alias.ci", &format!("!{shell} tools/ci.sh")],
    );
}

/// One attack on a program a held script finds on the `PATH` it sets (round thirty's
/// reviews and after): the user's `tools/bin/.keep` (the directory there at the start) and
/// `git ci` running `script` with `shell` ([`user_ci`]); the agent makes `program` (a
/// work-tree path), a `#!/bin/sh` that creates the marker, and the user's `git ci`
/// follows. `attack` is the suite's [`held_file_attack`] (its fixture, its ratchet).
pub fn path_program_attack(
    attack: impl Fn(&str, &dyn Fn(&GitFx, &Path), &str, &[&str]),
    name: &str,
    (shell, script): (&str, &str),
    program: &str,
) {
    let plant = format!(
        "p={program}; mkdir -p \"$(dirname \"$p\")\"; printf '#!/bin/sh\\ntouch \"%s\"\\n' \
         \"$M\" > \"$p\"; chmod +x \"$p\"; echo PLANTED"
    );
    let setup = |fx: &GitFx, ws: &Path| {
        fx.own_file(ws, "tools/bin/.keep", "");
        user_ci(fx, ws, shell, script);
    };
    attack(name, &setup, &plant, &["ci"]);
}

/// What direnv does on entering a directory, in the user's shell (bash), outside any
/// sandbox: its stdlib's `PATH_add DIR…` and `path_add VAR DIR…` (a relative `DIR` read
/// from the `.envrc`'s directory), `watch_file`, `has`, `source_env[_if_exists]` (a
/// directory's `.envrc`; the file sourced in its own directory), `source_up[_if_exists]`
/// (the nearest parent directory's file), `dotenv[_if_exists]` (read as the shell reads
/// it) and `layout` (python's, which makes its virtualenv `.direnv/python-VERSION` only
/// when it is not there, go's and ruby's, as direnv's stdlib defines them), then the
/// `.envrc` sourced; then the user types `git status`.
pub const DIRENV_THEN_GIT: &str = r#"
PATH_add() { for d; do case $d in /*) ;; *) d=$PWD/$d;; esac; PATH="$d:$PATH"; done; }
path_add() { v=$1; shift; for d; do case $d in /*) ;; *) d=$PWD/$d;; esac; eval "export $v=\$d:\$$v"; done; }
watch_file() { :; }
has() { command -v "$1" >/dev/null 2>&1; }
source_env() { local f=$1; [ -d "$f" ] && f=$f/.envrc; pushd "$(dirname "$f")" >/dev/null || return 1; . "./$(basename "$f")"; popd >/dev/null; }
source_env_if_exists() { [ -f "$1" ] && source_env "$1"; true; }
source_up() { local d; d=$(cd .. && while [ "$PWD" != / ]; do [ -f "${1:-.envrc}" ] && { echo "$PWD"; break; }; cd ..; done); [ -n "$d" ] && source_env "$d/${1:-.envrc}"; true; }
source_up_if_exists() { source_up "$@"; }
dotenv() { local f=${1:-.env}; case $f in /*) ;; *) f=./$f;; esac; set -a; . "$f"; set +a; }
dotenv_if_exists() { [ -f "${1:-.env}" ] && dotenv "$@"; true; }
direnv_layout_dir() { echo "$PWD/.direnv"; }
layout() { local name=$1; shift; eval "layout_$name" "$@"; }
layout_python() {
  local python=${1:-python} v
  v=$("$python" -c 'import platform; print(platform.python_version())')
  VIRTUAL_ENV=$(direnv_layout_dir)/python-$v
  [ -d "$VIRTUAL_ENV" ] || "$python" -m venv "$VIRTUAL_ENV" >/dev/null 2>&1
  export VIRTUAL_ENV; PATH_add "$VIRTUAL_ENV/bin"
}
layout_python3() { layout_python python3 "$@"; }
layout_go() { path_add GOPATH "$PWD"; PATH_add bin; }
layout_ruby() { BUNDLE_BIN=$(direnv_layout_dir)/bin; PATH_add "$BUNDLE_BIN"; }
. ./.envrc; git status >/dev/null 2>&1; true"#;

/// The agent's plant of a `git` in `bin` (a work-tree path) that creates the marker.
pub fn plant_git(bin: &str) -> String {
    format!(
        "mkdir -p {bin}; printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" > {bin}/git; \
         chmod +x {bin}/git; echo PLANTED"
    )
}

/// One attack on what a direnv `.envrc` runs, for each arm and mode: the user's `files`
/// (work-tree path, text), the first its `.envrc` (held, a protected name); the agent's
/// `plant` (a script that prints `PLANTED`: [`plant_git`], say) leaves what the user's
/// next `git` in a direnv shell in the `.envrc`'s directory runs ([`DIRENV_THEN_GIT`]).
/// Unconfined (the control) it must run; confined it must not, unless `open` (a
/// ratchet). What went wrong, one line each.
pub fn envrc_attack(
    style: &RepoStyle,
    open: bool,
    name: &str,
    files: &[(&str, &str)],
    plant: &str,
) -> Vec<String> {
    let user = EnvrcUser {
        files,
        link: None,
        then: "git status",
    };
    envrc_attack_by(style, (open, name), &user, plant)
}

/// The user's side of an [`envrc_attack_by`]: their `files` (work-tree path, text; the
/// first the `.envrc` unless `link` is given), an `.envrc` that is a link (`(where, its
/// target)`) when `link`, and the command they type in the direnv shell (`git status`).
pub struct EnvrcUser<'a> {
    pub files: &'a [(&'a str, &'a str)],
    pub link: Option<(&'a str, &'a str)>,
    pub then: &'a str,
}

/// [`envrc_attack`] of `user`'s files and command; `(open, name)` as there.
pub fn envrc_attack_by(
    style: &RepoStyle,
    (open, name): (bool, &str),
    user: &EnvrcUser,
    plant: &str,
) -> Vec<String> {
    let mut broken = Vec::new();
    let direnv = DIRENV_THEN_GIT.replace("git status", user.then);
    for nobody in arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = GitFx::new(style, nobody);
            let ws = fx.ws();
            let (envrc, text) = user.files[0];
            let mut at = fx.own_file(&ws, envrc, &format!("{text}\n"));
            for (rel, text) in &user.files[1..] {
                fx.own_file(&ws, rel, text);
            }
            if let Some((link, target)) = user.link {
                at = ws.join(link);
                std::os::unix::fs::symlink(target, &at).unwrap();
                fx.own_entry(&at);
            }
            let (rc, out) = run_text(
                fx.sandbox_in(&ws, &["--mode", mode], plant)
                    .env("M", fx.marker()),
            );
            assert!(rc == 0 && out.contains("PLANTED"), "{name}: {out}");
            let _ = std::fs::remove_file(fx.marker());
            let typed = fx
                .command("bash")
                .args(["-c", &direnv])
                .current_dir(at.parent().unwrap())
                .output_bounded();
            let ran = fx.marker().exists();
            let want = mode == "danger-full-access" || open;
            if ran != want {
                broken.push(format!(
                    "{name} nobody={nobody} {mode} (open {open}): ran {ran}: \
                     {out}\n{}",
                    printed(&typed)
                ));
            }
        }
    }
    broken
}

/// [`held_file_attack`] where the user's own `scripts` (work-tree paths, [`own_script`])
/// are run by the alias `git fmt` = `alias`, and the agent's command is `attack`.
pub fn alias_attack(
    style: &RepoStyle,
    known_open: &[&str],
    name: &str,
    (scripts, alias): (&[&str], &str),
    attack: &str,
) {
    let setup = |fx: &GitFx, ws: &Path| {
        for script in scripts {
            own_script(fx, ws, script);
        }
        fx.git(ws, &["config", "alias.fmt", alias]);
    };
    held_file_attack(style, known_open, name, setup, attack, &["fmt"]);
}

/// A script of the user's (mode 0755, the arm's user's).
pub fn own_script(fx: &GitFx, ws: &Path, rel: &str) {
    let script = fx.own_file(ws, rel, "#!/bin/sh\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `--read ~/DIR` of a home directory holding one of `keys` (each `(DIR, file)`, the file
/// holding `KEY-SECRET`), for each arm, confined and (the control) unconfined: what went
/// wrong, one line each. Confined, the key must not show (the grant refused, or the key
/// masked); unconfined, the run must succeed and show it. `prefix` names the fixtures.
pub fn home_key_grants(prefix: &str, keys: &[(&str, &str)]) -> Vec<String> {
    let mut broken = Vec::new();
    for nobody in arms() {
        for (dir, key) in keys {
            for confined in [true, false] {
                let fx = Fixture::new(prefix, nobody, &["ws", "home", "state"]);
                let granted = fx.root().join("home").join(dir);
                write(&granted.join(key), "KEY-SECRET\n");
                fx.own(fx.root());
                let script = format!("cat '{}/{key}'; echo SERVED", granted.display());
                let mut args = vec!["--read", granted.to_str().unwrap()];
                if !confined {
                    args.extend(["--mode", "danger-full-access"]);
                }
                let (rc, out) = fx.sandbox(&args, &script);
                let who = format!("nobody={nobody} ~/{dir}/{key} confined={confined}");
                judge_key(&mut broken, &who, confined, (rc, &out), "KEY-SECRET");
            }
        }
    }
    broken
}

/// The agent's payload appended to `target`, in the language the file is read as (by its
/// suffix; a shell line otherwise): it creates the marker `$M` when run, then prints
/// `PLANTED`.
pub fn append_payload(target: &str) -> String {
    let line = match Path::new(target).extension().and_then(|e| e.to_str()) {
        Some("py") => r#"printf 'open("%s", "w")\n' "$M""#.to_string(),
        Some("js") => r#"printf 'require("fs").writeFileSync("%s", "")\n' "$M""#.to_string(),
        Some("pl" | "pm") => r#"printf 'open(my $f, ">", "%s");\n' "$M""#.to_string(),
        Some("mk") => r#"printf '$(shell touch %s)\n' "$M""#.to_string(),
        Some("awk") => r#"printf 'BEGIN { system("touch %s") }\n' "$M""#.to_string(),
        Some("tcl") => r#"printf 'close [open "%s" w]\n' "$M""#.to_string(),
        _ => SCRIPT_PAYLOAD.to_string(),
    };
    format!("{line} >> {target}; echo PLANTED")
}

/// One run of a key attack judged: `guarded`, the key `secret` must not show; unguarded
/// (the control), the run must succeed and show it. What went wrong goes to `broken`.
pub fn judge_key(
    broken: &mut Vec<String>,
    who: &str,
    guarded: bool,
    (rc, out): (i32, &str),
    secret: &str,
) {
    let served = rc == 0 && out.contains(secret);
    if guarded && out.contains(secret) {
        broken.push(format!("{who}: the key was served (rc {rc}): {out}"));
    } else if !guarded && !served {
        broken.push(format!("{who}: control: {out}"));
    }
}

/// `--read VAULT` (`vault`, relative to the fixture's root) holding a key where a variable
/// moves another tool's key (each `(VAR, value relative to the vault, key file)`): with
/// the variable set the key must not show; without it (the control) the grant is served.
/// Both arms; what went wrong, one line each. `prefix` names the fixtures.
pub fn relocated_key_grants(
    prefix: &str,
    vault: &str,
    keys: &[(&str, &str, &str)],
    secret: &str,
) -> Vec<String> {
    let mut broken = Vec::new();
    for nobody in arms() {
        for (var, value, key) in keys {
            for set in [true, false] {
                let fx = Fixture::new(prefix, nobody, &["ws", "home", "state"]);
                let vault = fx.root().join(vault);
                write(&vault.join(key), &format!("{secret}\n"));
                fx.own(fx.root());
                let script = format!("cat '{}/{key}'; echo SERVED", vault.display());
                let mut cmd =
                    fx.sandbox_in(&fx.ws(), &["--read", vault.to_str().unwrap()], &script);
                if set {
                    cmd.env(var, vault.join(value));
                }
                let (rc, out) = run_text(&mut cmd);
                let who = format!("nobody={nobody} {var}={value} set={set}");
                judge_key(&mut broken, &who, set, (rc, &out), secret);
            }
        }
    }
    broken
}

/// The user's check script every checks-list attack aims at ([`checks_attack`]).
pub const CHECK_SCRIPT: &str = "tools/checks/a.sh";

/// The user's list of checks, naming [`CHECK_SCRIPT`].
pub const CHECKS_LIST: (&str, &str) = ("tools/checks.list", "tools/checks/a.sh\n");

/// The agent appends its payload to `target`.
pub fn append_to(target: &str) -> String {
    format!("{SCRIPT_PAYLOAD} >> {target}; echo PLANTED")
}

/// The agent writes a script of its own and rewrites `tools/checks.list` to name it.
pub fn rewrite_checks_list() -> String {
    format!("{SCRIPT_PAYLOAD} > mine.sh; echo mine.sh > tools/checks.list; echo PLANTED")
}

/// [`held_file_attack`] on the user's checks: [`CHECK_SCRIPT`] (an [`own_script`]), the
/// user's `files` (path, text: the list, the scripts that run it) and `git fmt` = `alias`;
/// the agent's `attack`.
pub fn checks_attack(
    style: &RepoStyle,
    known_open: &[&str],
    name: &str,
    files: &[(&str, &str)],
    alias: &str,
    attack: &str,
) {
    let setup = |fx: &GitFx, ws: &Path| {
        own_script(fx, ws, CHECK_SCRIPT);
        for (rel, text) in files {
            fx.own_file(ws, rel, text);
        }
        fx.git(ws, &["config", "alias.fmt", alias]);
    };
    held_file_attack(style, known_open, name, setup, attack, &["fmt"]);
}

/// What a real-CLI probe run left ([`cli_probe`]): its root (removed on drop), coder's
/// stdout (the agent's tool results are in it, JSON-escaped), its envelope, and who ran
/// it, for messages.
pub struct CliProbe {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub stdout: String,
    pub envelope: serde_json::Value,
    pub who: String,
}

/// coder with the real CLI on the replay fixture `cassette` (a path below
/// `fixtures/sandbox/`), as `owner`, confined (the default sandbox) or not
/// (`danger-full-access`), telling it `task`: in a fresh root holding `ws`, `home` and
/// `tmp` (`TMPDIR`: unconfined, the CLI's scratch is there, not in the host's `/tmp`),
/// after `setup(root)` made whatever else the probe needs (before the tree is given to
/// `owner`) and gave coder's further flags. Panics without an envelope.
pub fn cli_probe(
    owner: Option<u32>,
    confined: bool,
    cassette: &str,
    task: &str,
    setup: impl FnOnce(&Path) -> Vec<String>,
) -> CliProbe {
    cli_probe_in_state(owner, confined, cassette, task, setup, None)
}

/// [`cli_probe`] with coder's state directory (`CODER_STATE_DIR`) at `state` in the root,
/// made with the rest, when given.
pub fn cli_probe_in_state(
    owner: Option<u32>,
    confined: bool,
    cassette: &str,
    task: &str,
    setup: impl FnOnce(&Path) -> Vec<String>,
    state: Option<&OsStr>,
) -> CliProbe {
    let claude = super::real_claude();
    let backend = format!(
        "replay:{}/fixtures/sandbox/{cassette}",
        env!("CARGO_MANIFEST_DIR")
    );
    let (dir, root) = temp_root("coder-cli-probe-");
    for d in ["ws", "home", "tmp"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let state = state.map(|name| root.join(name));
    if let Some(state) = &state {
        std::fs::create_dir_all(state).unwrap();
    }
    let flags = setup(&root);
    if let Some(uid) = owner {
        chown_tree(&root, uid);
    }
    let mut extra = vec!["--backend", &backend, "--return-all-messages"];
    extra.extend(flags.iter().map(String::as_str));
    if !confined {
        extra.extend(["--sandbox", "danger-full-access"]);
    }
    let mut cmd = coder_as(&root, owner, &root.join("ws"), &claude, &extra, task);
    cmd.env("TMPDIR", root.join("tmp"));
    if let Some(state) = &state {
        cmd.env("CODER_STATE_DIR", state);
    }
    let out = cmd.output_bounded();
    let who = format!("{owner:?} confined={confined}");
    let envelope = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{who}: no envelope ({e}): {out:?}"));
    CliProbe {
        _dir: dir,
        root,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        envelope,
        who,
    }
}

/// The CLI's Write tool asked to write its own scratch (`claude-<uid>/`) through a link
/// the agent made in the workspace (`fixtures/sandbox/cli_scratch_write_tool.json`), with
/// coder's state directory at `state` in the root when given: confined, the write never
/// lands (the scratch `Edit` rules hold) and the run is served; unconfined (the control),
/// it lands. Root and uid 65534.
pub fn write_tool_scratch_attack(state: Option<&OsStr>) {
    for owner in owners() {
        for confined in [true, false] {
            let run = cli_probe_in_state(
                owner,
                confined,
                "cli_scratch_write_tool.json",
                "write the CLI's scratch with its Write tool",
                |_| Vec::new(),
                state,
            );
            let (stdout, env) = (&run.stdout, &run.envelope);
            let who = format!("{} state={state:?}", run.who);
            assert!(stdout.contains("LINKED"), "{who}: no link: {stdout}");
            let planted = stdout.contains("PLANTED-IN-SCRATCH");
            assert!(
                planted || stdout.contains("NOT-IN-SCRATCH"),
                "{who}: the check did not run: {stdout}"
            );
            if !confined {
                assert!(planted, "{who}: control: the Write tool wrote: {stdout}");
                continue;
            }
            assert_eq!(env["result"], "The honest answer.", "{who}: {env}");
            assert!(
                !planted,
                "{who}: the CLI's Write tool wrote its scratch through a link: {stdout}"
            );
        }
    }
}

/// A user entry made for one test (`useradd`, named `PREFIX<pid>`, its home `home`, not
/// made), removed when dropped: the invoking user of a `sudo` or `doas` run.
pub struct TestUser(pub String);

impl TestUser {
    pub fn new(prefix: &str, home: &Path) -> TestUser {
        let name = format!("{prefix}{}", std::process::id());
        let ok = Command::new("useradd")
            .args(["-M", "-N", "-s", "/usr/sbin/nologin", "-d"])
            .arg(home)
            .arg(&name)
            .status()
            .unwrap();
        assert!(ok.success(), "useradd {name}");
        TestUser(name)
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.0).status();
    }
}
