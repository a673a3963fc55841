//! Review of three ways out of a run's setup: the sandbox helper started early on the
//! spawner thread (`supervise::spawn::PendingHelper`), the run directory a failed policy
//! removes (`sandbox::policy`, `MadeRunDir`), and `coder sandbox` removing its run
//! directory and placeholders however it ends (`commands::sandbox`). Each attack runs
//! through the built binary, as root and as uid 65534, and asserts what the user sees
//! afterwards: no process of the run left, nothing of the run left in the workspace or
//! the state directory, no repository outside the grant touched.
//!
//! A run is held in the middle of its setup by holding the placeholder registry's lock:
//! a run waits for it (up to 10 s) right after its scan made the placeholders, while the
//! run mode's helper is already up. That is the window an impatient user's `^C`, or a
//! `kill` from a job runner, lands in on a large tree.
//!
//! Holes this review found, both closed with it (each test failed before): `coder
//! sandbox` died of a `SIGTERM`/`SIGINT` that arrived during its setup without removing
//! its run directory or its placeholders, which were not registered yet and so stayed for
//! good; and a run directory under an `XDG_RUNTIME_DIR` in `/tmp` was an `--allow-tmp`
//! agent's to fill with a dead run's git-guard record, which the next run acted on.
//! Found after, and closed in part: where the runs directory is still the agent's (the
//! state directory under `/tmp` with `--allow-tmp`), a run directory swapped for a symlink
//! as it was made became the symlink's target, removed whole at the run's end (now
//! refused); a swap after that check had coder write its git-guard record through a
//! symlink the agent left in its stand-in directory, over any file of the user's (now
//! made with `O_EXCL|O_NOFOLLOW`). Coder still creates `tmp/`, `claude/` and `gitconfig`
//! in such a stand-in before the run fails: what is left open is working on the run
//! directory by path rather than by descriptor. The same reach let the agent replace
//! the spec file a later helper (a retry's, `--verify`'s) read when the spec was over
//! 64 KiB, and so run its own program unconfined: such a spec now goes through a pipe.
//! Since then no agent gets that reach: a run whose grants (`--allow-tmp` among them)
//! reach coder's state or runs directory is refused. The tests of that reach stay, played
//! from the host, as a second line.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::sandbox_fixture::{PATH, as_owner, chown_tree, owners, temp_root, write};
use common::{Bounded, CODER};
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The placeholders a workspace without any protected name gets.
const PLACEHOLDERS: [&str; 5] = [".git", ".envrc", ".mcp.json", ".vscode", ".claude"];

fn label(owner: Option<u32>) -> &'static str {
    if owner.is_some() {
        "unprivileged"
    } else {
        "root"
    }
}

/// A tree given to `owner`: `ws` (no repository), `home`, coder's state directory
/// `state` with its placeholder registry made, and `xdg` for config.
struct Fx {
    _dir: tempfile::TempDir,
    root: PathBuf,
    owner: Option<u32>,
}

impl Fx {
    fn new(owner: Option<u32>) -> Fx {
        let (dir, root) = temp_root(".tmp-spawn-cleanup");
        let fx = Fx {
            _dir: dir,
            root,
            owner,
        };
        write(&fx.ws().join("README.md"), "# demo\n");
        write(&fx.home().join(".bashrc"), "# rc\n");
        std::fs::create_dir_all(fx.root.join("xdg")).unwrap();
        let lease = fx.state().join("placeholders");
        std::fs::create_dir_all(&lease).unwrap();
        for dir in [fx.state(), lease.clone()] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        write(&lease.join("registry.json"), "");
        if let Some(uid) = owner {
            chown_tree(&fx.root, uid);
        }
        fx
    }

    fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    /// Holds the placeholder registry: every run's setup stops after its scan until the
    /// lock goes (or its 10 s are up).
    fn hold_registry(&self) -> Flock<std::fs::File> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.state().join("placeholders/registry.json"))
            .unwrap();
        Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap()
    }

    /// The environment every run here gets: `PATH`, `HOME`, the state dir, no runtime dir.
    /// coder's scratch is the state directory too (`CODER_SCRATCH_DIR`): the run
    /// directories these attacks replay (an agent that can write the runs directory) are
    /// then all in the state directory's `sandbox/` and `sandbox-tmp/`, where they watch.
    fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env_clear()
            .env("PATH", PATH)
            .env("HOME", self.home())
            .env("CODER_STATE_DIR", self.state())
            .env("CODER_SCRATCH_DIR", self.state())
            .env("XDG_CONFIG_HOME", self.root.join("xdg"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        as_owner(cmd, self.owner)
    }

    /// `coder sandbox --cd ws -- echo ran`, started directly (signals reach coder itself),
    /// or through `nohup` (which execs it in place with `SIGHUP` ignored).
    fn sandbox(&self, nohup: bool) -> Child {
        let mut cmd = Command::new(if nohup { "nohup" } else { CODER });
        if nohup {
            cmd.arg(CODER);
        }
        cmd.args(["sandbox", "--cd"])
            .arg(self.ws())
            .args(["--", "/bin/echo", "ran"]);
        self.env(&mut cmd).spawn().unwrap()
    }

    /// The run mode on a program that is never reached (`/bin/true`), with `extra`.
    fn run(&self, extra: &[&str]) -> Child {
        let mut cmd = Command::new(CODER);
        cmd.arg("--cd")
            .arg(self.ws())
            .args(["--claude-bin", "/bin/true"])
            .args(extra)
            .arg("say hi");
        self.env(&mut cmd)
            .env("ANTHROPIC_AUTH_TOKEN", "test-token")
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .spawn()
            .unwrap()
    }

    /// What a run left in the workspace and in the state directory's run dirs.
    fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = PLACEHOLDERS
            .iter()
            .filter(|name| std::fs::symlink_metadata(self.ws().join(name)).is_ok())
            .map(|name| format!("ws/{name}"))
            .collect();
        for runs in ["sandbox", "sandbox-tmp"] {
            if let Ok(entries) = std::fs::read_dir(self.state().join(runs)) {
                left.extend(
                    entries
                        .flatten()
                        .map(|e| format!("run dir {}", e.file_name().to_string_lossy())),
                );
            }
        }
        left
    }

    /// `git init` in the workspace as the owner: what a placeholder `.git` left behind
    /// breaks for good.
    fn git_init_works(&self) -> Result<(), String> {
        let mut cmd = Command::new("git");
        cmd.args(["init", "-q"])
            .current_dir(self.ws())
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", self.home())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null());
        let out = as_owner(&mut cmd, self.owner).output_bounded();
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

/// Waits until `cond` holds; panics with `what` after `limit`.
fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for `child` to end (within 30 s) and returns its status and stdout+stderr.
fn finish(mut child: Child) -> (std::process::ExitStatus, String) {
    let status = common::wait_within(&mut child, Duration::from_secs(30));
    let mut text = String::new();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut pipe = pipe;
        let _ = pipe.read_to_string(&mut text);
    }
    (status, text)
}

/// Live (not zombie) processes whose working directory is `dir` or below it: a run's
/// helper, and the sandbox's init it forks, start in the workspace.
fn live_processes_in(dir: &Path) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for (pid, proc_dir) in common::processes() {
        let in_dir = std::fs::read_link(proc_dir.join("cwd")).is_ok_and(|c| c.starts_with(dir));
        let zombie = std::fs::read_to_string(proc_dir.join("stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
            .unwrap_or(true);
        if in_dir && !zombie {
            let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// `coder sandbox` stopped by `SIGTERM` (what a job runner sends, or a terminal's `^C` as
/// `SIGINT`) while its setup waits: it has made its run directory and placeholders. It
/// must still end as the signal says, and leave neither: placeholders it never got to
/// register are removed by no later run, and a `.git` one fails `git init` there for good.
/// A signal its caller ignores (`nohup`'s `SIGHUP`) stays ignored: the command runs.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn coder_sandbox_stopped_by_a_signal_during_setup_leaves_nothing_behind() {
    for owner in owners() {
        let who = label(owner);
        for (signal, nohup) in [
            (Signal::SIGTERM, false),
            (Signal::SIGINT, false),
            (Signal::SIGHUP, true),
        ] {
            let fx = Fx::new(owner);
            let lock = fx.hold_registry();
            let child = fx.sandbox(nohup);
            let pid = Pid::from_raw(child.id() as i32);
            wait_until(
                Duration::from_secs(20),
                &format!("[{who}] coder sandbox made its placeholders"),
                || {
                    PLACEHOLDERS
                        .iter()
                        .all(|n| std::fs::symlink_metadata(fx.ws().join(n)).is_ok())
                },
            );
            kill(pid, signal).unwrap();
            // Not dead yet (the test holds what it waits for): then it may go on.
            drop(lock);
            let (status, out) = finish(child);
            if nohup {
                assert!(
                    status.success() && out.contains("ran"),
                    "[{who}] {signal} ignored by the caller stopped the command: {status:?} {out}"
                );
            } else {
                assert_eq!(
                    status.signal(),
                    Some(signal as i32),
                    "[{who}] {signal}: coder sandbox should die of the signal: {status:?} {out}"
                );
                assert!(
                    !out.contains("ran"),
                    "[{who}] {signal}: the command ran: {out}"
                );
            }
            assert_eq!(
                fx.leftovers(),
                Vec::<String>::new(),
                "[{who}] {signal}: left behind by coder sandbox stopped during setup"
            );
            if let Err(e) = fx.git_init_works() {
                panic!("[{who}] {signal}: git init in the workspace fails afterwards: {e}");
            }
        }
    }
}

/// The run mode stopped by `SIGTERM` at the same point, its helper already started on the
/// spawner thread: a `cancelled` envelope, the helper gone, nothing left.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_stopped_while_its_helper_waits_for_the_policy_leaves_nothing_behind() {
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let lock = fx.hold_registry();
        let child = fx.run(&[]);
        let pid = Pid::from_raw(child.id() as i32);
        wait_until(
            Duration::from_secs(20),
            &format!("[{who}] the run's helper started and its placeholders were made"),
            || {
                std::fs::symlink_metadata(fx.ws().join(".claude")).is_ok()
                    && !live_processes_in(&fx.ws()).is_empty()
            },
        );
        kill(pid, Signal::SIGTERM).unwrap();
        drop(lock);
        let (status, out) = finish(child);
        assert!(
            out.contains("\"error_kind\":\"cancelled\""),
            "[{who}] expected a cancelled envelope: {status:?} {out}"
        );
        wait_until(
            Duration::from_secs(5),
            &format!("[{who}] no process of the run left"),
            || live_processes_in(&fx.ws()).is_empty(),
        );
        assert_eq!(fx.leftovers(), Vec::<String>::new(), "[{who}] {out}");
    }
}

/// coder killed outright while its early helper (started on the spawner thread, whose
/// parent-death signal follows that thread) waits for the spec: the helper and the
/// sandbox's init it forked die with coder. (The placeholders made so far are not
/// registered yet and stay: a known limit, in SECURITY.md's list.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_helper_waiting_for_its_spec_dies_with_a_killed_coder() {
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let lock = fx.hold_registry();
        let child = fx.run(&[]);
        let pid = Pid::from_raw(child.id() as i32);
        let mut helpers = Vec::new();
        wait_until(
            Duration::from_secs(20),
            &format!("[{who}] the run's helper started"),
            || {
                helpers = live_processes_in(&fx.ws());
                helpers.iter().any(|(_, cmd)| cmd.contains("__exec-helper"))
            },
        );
        kill(pid, Signal::SIGKILL).unwrap();
        let (status, _) = finish(child);
        assert_eq!(status.signal(), Some(libc::SIGKILL), "[{who}]");
        wait_until(
            Duration::from_secs(5),
            &format!("[{who}] the helpers {helpers:?} died with coder"),
            || live_processes_in(&fx.ws()).is_empty(),
        );
        drop(lock);
    }
}

/// A policy that fails after the run's helper was started (a `--write` path that does not
/// exist is found only while the policy resolves, after its run directory was made): a
/// `config_error` envelope (a bad argument) that names the path, the helper gone, the run
/// directory too.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_policy_failing_after_the_helper_started_leaves_no_process_and_no_run_dir() {
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let missing = fx.root.join("missing");
        let child = fx.run(&["--write", missing.to_str().unwrap()]);
        let (status, out) = finish(child);
        assert!(
            out.contains("\"error_kind\":\"config_error\"") && out.contains("missing"),
            "[{who}] expected a config_error naming the path: {status:?} {out}"
        );
        assert_eq!(status.code(), Some(78), "[{who}] {out}");
        wait_until(
            Duration::from_secs(5),
            &format!("[{who}] no process of the run left"),
            || live_processes_in(&fx.ws()).is_empty(),
        );
        assert_eq!(fx.leftovers(), Vec::<String>::new(), "[{who}] {out}");
    }
}

/// An `XDG_RUNTIME_DIR` under `/tmp` (`/tmp/runtime-USER`, as many containers set it)
/// held every run's directory, and `--allow-tmp` gives the agent all of `/tmp`. The agent
/// plants a dead run's git-guard record there naming a repository it was never granted;
/// the user's next run, in another workspace and without `--allow-tmp`, must not act on
/// it (it moved that repository's hooks into quarantine). coder's state directory here is
/// outside `/tmp` (under `/var/tmp`), where `--allow-tmp` does not reach.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_guard_record_planted_through_allow_tmp_touches_no_ungranted_repository() {
    for owner in owners() {
        let who = label(owner);
        let dir = tempfile::Builder::new()
            .prefix(".tmp-spawn-cleanup")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (_tmp, tmp_root) = temp_root(".tmp-spawn-cleanup-xdg");
        let runtime = tmp_root.join("runtime");
        std::fs::create_dir(&runtime).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let (ws, ws2, home, state, victim) = (
            root.join("ws"),
            root.join("ws2"),
            root.join("home"),
            root.join("state"),
            root.join("victim"),
        );
        for d in [&ws, &ws2, &home, &state] {
            std::fs::create_dir_all(d).unwrap();
        }
        let init = Command::new("git")
            .args(["init", "-q"])
            .arg(&victim)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", "/nonexistent")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output_bounded();
        assert!(init.status.success(), "{init:?}");
        let hook = victim.join(".git/hooks/pre-commit");
        write(&hook, "#!/bin/sh\necho the user's own hook\n");
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        if let Some(uid) = owner {
            chown_tree(&root, uid);
            chown_tree(&tmp_root, uid);
        }
        let sandbox = |cd: &Path, args: &[&str], script: &str| {
            let mut cmd = Command::new(CODER);
            cmd.args(["sandbox", "--cd"])
                .arg(cd)
                .args(args)
                .args(["--", "/bin/sh", "-c", script])
                .env_clear()
                .env("PATH", PATH)
                .env("HOME", &home)
                .env("CODER_STATE_DIR", &state)
                .env("XDG_RUNTIME_DIR", &runtime)
                .current_dir(&root)
                .stdin(Stdio::null());
            as_owner(&mut cmd, owner).output_bounded()
        };
        let record = format!("{{\"roots\":[\"{}\"],\"known\":[]}}", victim.display());
        let fake = runtime.join("coder/runs/3999999-planted");
        let plant = format!(
            "mkdir -p {fake} && printf '%s' '{record}' > {fake}/git-guard.json && echo PLANTED",
            fake = fake.display()
        );
        let out = sandbox(&ws, &["--allow-tmp"], &plant);
        let text = common::sandbox_fixture::printed(&out);
        assert!(
            out.status.success() && text.contains("PLANTED"),
            "[{who}] {text}"
        );
        let out = sandbox(&ws2, &[], "true");
        let text = common::sandbox_fixture::printed(&out);
        assert!(out.status.success(), "[{who}] the next run: {text}");
        assert!(
            hook.exists(),
            "[{who}] the user's hook in {} (never granted) was moved: {text}",
            victim.display()
        );
        let quarantined: Vec<_> = std::fs::read_dir(victim.join(".git"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("coder-quarantine"))
            .collect();
        assert!(quarantined.is_empty(), "[{who}] {quarantined:?}: {text}");
    }
}

/// A run whose scan ends while the placeholder registry stays locked past its wait (a
/// coder stopped with `^Z` in its own release holds it) fails with a clear error; the
/// placeholders it made were never registered, so unless its own cleanup removes them no
/// run ever does (`.git`, `.claude`, `.envrc` ... stayed, and `git init` there failed).
/// The arms run side by side: each run waits out 10 s twice (its registration, then its
/// cleanup's).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_that_cannot_register_its_placeholders_still_removes_them() {
    let arms: Vec<_> = owners()
        .into_iter()
        .map(|owner| {
            std::thread::spawn(move || {
                let who = label(owner);
                let fx = Fx::new(owner);
                let lock = fx.hold_registry();
                let (status, out) = finish(fx.sandbox(false));
                drop(lock);
                assert_eq!(status.code(), Some(71), "[{who}] {out}");
                assert!(
                    out.contains("coder sandbox:") && !out.contains("ran"),
                    "[{who}] expected a one-line sandbox error: {out}"
                );
                assert_eq!(
                    fx.leftovers(),
                    Vec::<String>::new(),
                    "[{who}] left behind by a run that could not register: {out}"
                );
                if let Err(e) = fx.git_init_works() {
                    panic!("[{who}] git init in the workspace fails afterwards: {e}");
                }
            })
        })
        .collect();
    for arm in arms {
        arm.join().unwrap();
    }
}

/// What an agent that could write coder's runs directory would do (one with `--allow-tmp`
/// while coder's state directory was under `/tmp`; such a run is now refused, and this is
/// played from the host as a second line): the moment another run
/// makes its directory there, it renames it away and puts a symlink to a directory of the
/// user's in its place. When that won the race with the run's resolving the path, the
/// run's end removed the whole tree the symlink named (here with coder's own privileges).
/// Played from the host by the test, with inotify, against a dozen runs: the user's
/// directory must survive every one, and a run that notices fails with a clear error.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_dir_swapped_for_a_symlink_never_removes_what_the_symlink_names() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let victim = fx.root.join("victim");
        write(&victim.join("precious"), "the user's\n");
        if let Some(uid) = owner {
            chown_tree(&fx.root, uid);
        }
        // The run's own directory and its `TMPDIR` (round twenty-one), each swapped.
        let runs = fx.state().join("sandbox");
        let tmps = fx.state().join("sandbox-tmp");
        for dir in [&runs, &tmps] {
            std::fs::create_dir_all(dir).unwrap();
            if let Some(uid) = owner {
                chown_tree(dir, uid);
            }
        }
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).unwrap();
        let watches = [
            (
                inotify.add_watch(&runs, AddWatchFlags::IN_CREATE).unwrap(),
                runs.clone(),
            ),
            (
                inotify.add_watch(&tmps, AddWatchFlags::IN_CREATE).unwrap(),
                tmps.clone(),
            ),
        ];
        let target = victim.clone();
        let swapper = std::thread::spawn(move || {
            let mut swapped = [0, 0];
            loop {
                for event in inotify.read_events().unwrap() {
                    let Some(name) = event.name else { continue };
                    let name = name.to_string_lossy().into_owned();
                    if name == "stop" {
                        return swapped;
                    }
                    // Not the run's directory: its lock file beside it, or a swapped one.
                    if name.ends_with(".away") || name.ends_with(".lock") {
                        continue;
                    }
                    let Some(at) = watches.iter().position(|(wd, _)| *wd == event.wd) else {
                        continue;
                    };
                    let watched = &watches[at].1;
                    let made = watched.join(&name);
                    if std::fs::rename(&made, watched.join(format!("{name}.away"))).is_ok()
                        && std::os::unix::fs::symlink(&target, &made).is_ok()
                    {
                        swapped[at] += 1;
                    }
                }
            }
        });
        for round in 0..12 {
            let (status, out) = finish(fx.sandbox(false));
            assert!(
                victim.join("precious").exists(),
                "[{who}] round {round}: the run removed the directory its run dir was \
                 swapped for: {status:?} {out}"
            );
            assert!(
                status.success() || (status.code() == Some(71) && out.contains("coder sandbox:")),
                "[{who}] round {round}: {status:?} {out}"
            );
        }
        std::fs::create_dir(runs.join("stop")).unwrap();
        let swapped = swapper.join().unwrap();
        assert!(
            swapped.iter().all(|&n| n > 0),
            "[{who}] the attack never swapped a run dir (own, TMPDIR): {swapped:?}"
        );
    }
}

/// The same agent, patient: it lets the run check its directory, then (once the run made
/// `gitconfig` in it) swaps it for a directory of its own whose `git-guard.json` is a symlink
/// to a file of the user's. The run writes its git-guard record after its scan: it must
/// not write it through that symlink (it overwrote the file, with coder's privileges).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_dir_swapped_after_its_check_overwrites_no_file_through_a_symlink() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        let victim = fx.root.join("victim.txt");
        write(&victim, "the user's\n");
        // The agent's stand-in for the run directory: what the run goes on to use in it
        // (`tmp/`, `claude/`, `gitconfig`) is there.
        let decoy = fx.root.join("decoy");
        std::fs::create_dir_all(decoy.join("tmp")).unwrap();
        std::fs::create_dir_all(decoy.join("claude")).unwrap();
        write(&decoy.join("gitconfig"), "");
        std::os::unix::fs::symlink(&victim, decoy.join("git-guard.json")).unwrap();
        let runs = fx.state().join("sandbox");
        std::fs::create_dir_all(&runs).unwrap();
        if let Some(uid) = owner {
            chown_tree(&fx.root, uid);
        }
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).unwrap();
        inotify.add_watch(&runs, AddWatchFlags::IN_CREATE).unwrap();
        let child = fx.sandbox(false);
        // The run's directory, then its `gitconfig` (made after the check): then swap.
        let (mut run_dir, mut swapped) = (None::<PathBuf>, false);
        let start = Instant::now();
        while !swapped {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "[{who}] no run dir"
            );
            for event in inotify.read_events().unwrap() {
                let Some(name) = event.name else { continue };
                // The run directory's lock file, made just before it.
                if run_dir.is_none() && name.to_string_lossy().ends_with(".lock") {
                    continue;
                }
                match &run_dir {
                    None => {
                        let dir = runs.join(&name);
                        inotify.add_watch(&dir, AddWatchFlags::IN_CREATE).unwrap();
                        // It may be made before the watch is in place.
                        if dir.join("gitconfig").exists() {
                            swapped = swap(&dir, &decoy);
                        }
                        run_dir = Some(dir);
                    }
                    Some(dir) if name == "gitconfig" => swapped = swap(dir, &decoy),
                    Some(_) => {}
                }
            }
        }
        let (status, out) = finish(child);
        eprintln!("[{who}] the swapped run: {status:?} {out}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "the user's\n",
            "[{who}] the run wrote through the symlink: {status:?} {out}"
        );
        assert!(
            status.success() || (status.code() == Some(71) && out.contains("coder sandbox:")),
            "[{who}] {status:?} {out}"
        );
    }
}

/// Renames `dir` aside and puts a symlink to `to` in its place.
fn swap(dir: &Path, to: &Path) -> bool {
    let aside = dir.with_extension("away");
    std::fs::rename(dir, &aside).unwrap();
    std::os::unix::fs::symlink(to, dir).unwrap();
    true
}

/// A spec too large for an argument (a workspace with many masked files) went to a later
/// helper (a retry's, the `--verify` command's) as a file in the run directory. An agent
/// that can write the runs directory replaces it between coder's writing and the
/// helper's reading: the helper, unconfined until it applies the spec, then ran the
/// agent's program without a sandbox. Played from the host with inotify against a run
/// with `--verify`: nothing may run outside the sandbox.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_large_helper_spec_cannot_be_replaced_on_its_way_to_the_helper() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner);
        // About 700 masks of long names: a spec of well over 64 KiB.
        let long = "k".repeat(120);
        for i in 0..700 {
            write(&fx.ws().join(format!("keys/{long}-{i:03}.pem")), "x\n");
        }
        let claude = fx.root.join("claude");
        write(&claude, &common::sandbox_fixture::payload_claude("true"));
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
        let escaped = fx.root.join("escaped");
        let runs = fx.state().join("sandbox");
        std::fs::create_dir_all(&runs).unwrap();
        if let Some(uid) = owner {
            chown_tree(&fx.root, uid);
        }
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).unwrap();
        let runs_watch = inotify.add_watch(&runs, AddWatchFlags::IN_CREATE).unwrap();
        let mut cmd = Command::new(CODER);
        cmd.arg("--cd")
            .arg(fx.ws())
            .arg("--claude-bin")
            .arg(&claude)
            .args(["--verify", "true", "say hi"]);
        let child = fx
            .env(&mut cmd)
            .env("ANTHROPIC_AUTH_TOKEN", "test-token")
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .spawn()
            .unwrap();
        // The agent's spec, ready before coder writes its own: its program, unconfined.
        let forged = serde_json::json!({
            "program": "/bin/sh",
            "args": ["-c", format!("echo outside > {}", escaped.display())],
            "parent_pid": child.id(),
            "policy": null,
        })
        .to_string();
        let (watched, stand_in) = (runs.clone(), fx.root.join("forged"));
        // Every spec file written in the run's directory is replaced the moment it is
        // made (coder's write then goes to the file it opened, no longer in the directory).
        let replacer = std::thread::spawn(move || {
            let mut replaced = 0;
            loop {
                for event in inotify.read_events().unwrap() {
                    let Some(name) = event.name else { continue };
                    if event.wd == runs_watch {
                        if name == "stop" {
                            return replaced;
                        }
                        let _ = inotify.add_watch(&watched.join(&name), AddWatchFlags::IN_CREATE);
                    } else if name == "helper-spec.json" {
                        let dir = watched.read_dir().unwrap().flatten().map(|e| e.path());
                        for dir in dir.filter(|d| d.join("helper-spec.json").exists()) {
                            std::fs::write(&stand_in, &forged).unwrap();
                            if std::fs::rename(&stand_in, dir.join("helper-spec.json")).is_ok() {
                                replaced += 1;
                            }
                        }
                    }
                }
            }
        });
        let (status, out) = finish(child);
        std::fs::create_dir(runs.join("stop")).unwrap();
        let replaced = replacer.join().unwrap();
        eprintln!("[{who}] replaced {replaced} spec files: {status:?}");
        assert!(
            !escaped.exists(),
            "[{who}] a replaced helper spec ran a program outside the sandbox: {out}"
        );
        assert!(
            out.contains("\"verification\""),
            "[{who}] the run did not get to its --verify: {out}"
        );
    }
}
