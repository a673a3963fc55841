//! Round fifteen's review: the watcher of coder's own git (`workspace::git::watched_run`,
//! round fifteen's answer to an included config made a symlink to `/proc/self/fd/1`),
//! attacked by someone who has read it. The ledger's git (and `--worktree`'s) runs as
//! coder, outside the sandbox, over files the agent wrote; every attack runs as root and
//! as uid 65534 where it applies, each with a control showing that its setup does land
//! without the defence.
//!
//! Found open when this review started, closed with it:
//! * the watcher looked at the process coder started and nothing below it: a `git` on
//!   `PATH` that is a wrapper script which does not `exec` the real one (a logging shim, a
//!   version switcher) runs git as its child, and that child read its own stdout pipe
//!   through the agent's symlink forever, unseen; killing the wrapper alone would not have
//!   ended the run either, as the child holds coder's output pipes. Now every process
//!   below is looked at, and all of them are killed.
//! * `--worktree`'s finish asked the repository's config for `user.name` and `user.email`
//!   with a git that no watcher looked at: the repository's config is read with its
//!   includes, and a work-tree file it includes, made a symlink to `/proc/self/fd/1` while
//!   the run was under way (by the agent of another run in that checkout), held the finish
//!   forever. It now runs watched, and coder's own identity is used when it is stopped.
//! * include fan-out: a config that includes a work-tree file (`include.path`) let the
//!   agent make that file include another one fifty times, which included another fifty
//!   times, and so on over eight of git's ten levels: 50^8 opens of small regular files of
//!   the work tree. Every git of coder's that read the repository's config spun on them
//!   for ever (nothing it held was suspect), and the run never ended, nor any later one.
//!   Now a git of coder's that reads the config alone (the ledger's probe and copied
//!   settings, `--worktree`'s probe and identity lookup) is stopped after
//!   `CONFIG_DEADLINE` (5 s), and the run falls back to the plain walk with a warning
//!   (the snapshots' own git, since the merge, reads no config of the repository's).
//!   Still open: a fan-out sized to take just under that slows each run's start by as
//!   much (not forever).
//! * the watcher took a file as the kernel's (`/proc/kmsg`, `trace_pipe`) by its path
//!   under `/proc` or `/sys`: the same file systems mounted elsewhere (a container's
//!   `/host/proc`, `/host/sys`) were not suspect, and git waited in a read of
//!   `trace_pipe` through the agent's symlink. The file system's type is asked now
//!   (`statfs`). Root only (another user cannot read `trace_pipe`).
//!
//! * **code execution as coder.** `--worktree` brought the run's branch into the
//!   repository with `git fetch` from coder's own bare repository; a fetch rewrites its URL
//!   by the repository's `url.<base>.insteadOf`, read with the config's includes. An
//!   earlier run's agent wrote the included work-tree file with `url."ext::sh -c
//!   CMD".insteadOf = /` and `protocol.ext.allow = always` (a protocol's own setting wins
//!   over the command line's `protocol.allow=never`), and the next `--worktree` run's
//!   finish ran CMD as coder, outside the sandbox. The branch now comes in with no
//!   transport (`pack-objects`, `index-pack`, `update-ref`).
//! * **code execution as coder, again.** `--worktree` counts the uncommitted paths of the
//!   user's checkout with `git status`, which runs the clean filter of a file whose stat
//!   data changed; an earlier run's agent defined a filter driver in the included
//!   work-tree file and named it in `.gitattributes`, and the next `--worktree` run's
//!   `status` ran it as coder (its own run's ledger had switched it off). `status` now
//!   gets the ledger's overrides, and does not look into submodules.
//! * **code execution as coder through `PATH`.** coder took the first `git` on its
//!   `PATH`; a user's `PATH` may hold a directory of the project (an activated
//!   virtualenv's `.venv/bin`, direnv's `PATH_add bin`, `node_modules/.bin` under `npm
//!   run`). The agent wrote a `git` there, and the next run's ledger ran it as coder,
//!   outside the sandbox. Directories inside the workspace, and a `git` that leads into it,
//!   are left out now.
//! * **code execution as coder, a third way.** `coder plan --plan-file FILE`, FILE in the
//!   workspace, asked `git ls-files` whether git tracks it, with the user's environment
//!   and nothing overridden: reading the index runs `core.fsmonitor`, which an earlier
//!   run's agent set in the included work-tree file. It now runs as the ledger's git does.
//!
//! * **a sparse file of terabytes** (found open in this review, closed at its merge):
//!   `truncate -s 8T big.bin` in the workspace costs the agent nothing; the "after"
//!   snapshot's `git add -A` hashed (and compressed into coder's state directory) every
//!   byte of it, hours per terabyte, and so did every later run's "before" while the file
//!   was there. Now the snapshots' `git add` streams every blob through `read`
//!   (`core.bigFileThreshold=1`) and the watcher stops a git of coder's that has read
//!   more than 1 GiB, as the plain walk hashes at most 1 GiB.
//!
//! Open (`KNOWN_OPEN`, SECURITY.md's Known limits): none.
//!
//! Looked at and held (no test of their own here):
//! * the two-look rule: a suspect descriptor is one of its own at the same number on the
//!   same target at two looks 50 ms apart. A read that ends between two looks ends; to
//!   hold git for good the agent needs an endless series of different pipes or FIFOs, fed
//!   by a process that lives on (only the agent of a run under way, during its "before"
//!   snapshot), and an endless series of includes to name them, which the include
//!   fan-out above already is on its own.
//! * "made here": a pipe another of git's descriptors (above 2) or a process below it
//!   holds is left alone. Nothing the agent writes makes git open the same pipe twice
//!   while it reads it (a config include is a file read to its end, and the pipe reopened
//!   from `/proc/self/fd/1` is the only copy above 2), and no git of coder's starts a
//!   process while it reads its config (hooks, fsmonitor, filters, external diff, pagers
//!   are off; `--worktree`'s finish no longer fetches).
//! * `/dev/zero`, `/dev/urandom` (left alone as memory devices) as an include: the parser
//!   stops at the first byte that starts no line (`bad config line 1`); an included
//!   comment line of 2 GiB is cut by git itself (`total_len > INT_MAX`).
//! * `.gitignore` and `.gitattributes` made symlinks: git opens in-tree ones with
//!   `O_NOFOLLOW`; a sparse `.gitattributes` over 100 MB is ignored by git.
//! * `core.excludesFile`, `core.attributesFile` and other paths set through the included
//!   file: `core.attributesFile` is overridden on the command line; an excludes file is
//!   opened like a `.gitignore` and meets the same watcher (a pipe, FIFO, device, `/proc`).
//! * the `discover` probe failing (a broken include): the ledger falls back to a plain
//!   walk of the workspace, which lists every change (ignored files included) or says it
//!   was cut; a probe that fails in the "after" of a run whose "before" was git's fails
//!   the ledger with a warning.
//! * settings of the included file that run a program in the gits coder still runs on
//!   the user's repository (`rev-parse`, `config`, `ls-files`, `update-index`, `add`,
//!   `write-tree`, `diff-tree`, `status`, `index-pack`, `update-ref`): `core.fsmonitor`,
//!   `core.hooksPath` (the `reference-transaction` hook of `update-ref`),
//!   `core.attributesFile` and `diff.external` are overridden, filter drivers switched
//!   off, textconv and external diffs refused on the command line; `core.sshCommand`,
//!   `credential.helper`, `url.*.insteadOf`, `core.alternateRefsCommand` and
//!   `protocol.*.allow` matter to transports only, and none is left; no command here
//!   starts `gc --auto`; the pager needs a terminal. Not tried to the end: a
//!   `diff.<driver>.xfuncname` regular expression slow enough to hold `diff-tree -p`
//!   (`--return-diff`), which no deadline bounds.
//! * a `make -j` jobserver's pipe coder inherits: left alone at the same number in every
//!   process below coder's git too (`ledger_snapshot`'s test).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::Bounded;
use common::review_tree::{self, changes, result, warned, who};
use common::sandbox_fixture::{self, NOBODY};
use serde_json::Value;

/// Attacks of this file measured open today.
const KNOWN_OPEN: &[&str] = &[];

/// Extra arguments of a run that plants what a confined agent can no longer write: a file
/// the repository's git config includes is held by the sandbox (read-only when it exists,
/// absent when it does not), so the attacks on what coder's own git does with such a
/// config are planted by an unconfined run (an earlier `--sandbox danger-full-access` run,
/// or the user's own tools), and coder must still run none of it.
const UNCONFINED: [&str; 2] = ["--sandbox", "danger-full-access"];

/// A [`review_tree::Tree`] for runs of a fake CLI as one arm's user: workspace `ws` (the
/// user's git repository, one commit), `home`, coder's `state`, `bin` (first on coder's
/// `PATH`), `outside`, in `/var/tmp` (out of the host's `/tmp` that `--allow-tmp` grants).
/// Its runs ([`Tree::run_within`] and the rest) start coder directly, not under `timeout`,
/// and kill what a run that overran its deadline left behind.
struct Tree {
    tree: review_tree::Tree,
    /// A directory put first on coder's `PATH` (an activated virtualenv's `bin`).
    path_first: std::sync::Mutex<Option<PathBuf>>,
}

impl std::ops::Deref for Tree {
    type Target = review_tree::Tree;

    fn deref(&self) -> &review_tree::Tree {
        &self.tree
    }
}

impl Tree {
    /// The tree, with `files` (name, content) committed in `ws` with an mtime well in the
    /// past and `config` (key, value) set in the repository's config.
    fn new(owner: Option<u32>, files: &[(&str, &str)], config: &[(&str, &str)]) -> Tree {
        Tree {
            tree: review_tree::Tree::repo("coder-r15-", owner, &["bin", "outside"], files, config),
            path_first: std::sync::Mutex::new(None),
        }
    }

    /// [`Tree::new`] with `a.txt` committed and the repository's config including
    /// `../shared.gitconfig`, a file of the work tree (the agent's to write).
    fn including(owner: Option<u32>) -> Tree {
        Tree::new(
            owner,
            &[("a.txt", "a\n")],
            &[("include.path", "../shared.gitconfig")],
        )
    }

    /// The run that plants an attack in the included config, unconfined ([`UNCONFINED`]):
    /// `plant` prints `PLANTED`. Its envelope.
    fn plant(&self, case: &str, plant: &str, deadline: Duration) -> Value {
        let env = self
            .run_within(&UNCONFINED, plant, deadline)
            .unwrap_or_else(|| panic!("{case}: run 1 did not end"));
        assert!(result(&env).contains("PLANTED"), "{case}: {env}");
        env
    }

    /// The next run, the attack still in place: it appends to `a.txt` and must end within
    /// `deadline`, warn of `warning` and list the edit.
    fn next_run_warns(&self, case: &str, deadline: Duration, warning: &str) {
        let env = self
            .run_within(&[], "echo y >> a.txt; echo AGAIN", deadline)
            .unwrap_or_else(|| panic!("{case}: next run did not end within {deadline:?}"));
        assert!(result(&env).contains("AGAIN"), "{case}: next run: {env}");
        assert!(warned(&env, warning), "{case}: next run: no warning: {env}");
        assert!(
            changes(&env).contains(&("a.txt".into(), "modified".into())),
            "{case}: next run: {env}"
        );
    }

    /// The user's own `git ARGS` in the workspace, unconfined, as the arm's user, to its
    /// end (what it printed and its exit status do not matter: the controls look at what
    /// it ran).
    fn user_git(&self, args: &[&str]) {
        let mut cmd = std::process::Command::new("git");
        cmd.args(args)
            .current_dir(self.ws())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.root.join("home"))
            .stdin(std::process::Stdio::null());
        sandbox_fixture::as_owner(&mut cmd, self.owner);
        let _ = cmd.output_bounded();
    }

    /// `bin/git`: a wrapper script of the user's that runs the real git as its child.
    fn wrap_git(&self) {
        let wrapper = self.root.join("bin/git");
        std::fs::write(
            &wrapper,
            "#!/bin/sh\n# a shim that logs, then runs git as its child\n/usr/local/bin/git \"$@\"\nexit $?\n",
        )
        .unwrap();
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
    }

    /// coder, started directly (no `timeout` between, so a deadline's SIGKILL reaches
    /// it) as the arm's user on a fake CLI whose payload is `payload`, `bin` first on its
    /// `PATH`: what it printed, or `None` when it had not ended after `deadline` (it is
    /// killed then, with whatever it left running in the tree).
    fn run_within(&self, extra: &[&str], payload: &str, deadline: Duration) -> Option<Value> {
        self.run_wrapped(&[], extra, payload, deadline)
    }

    /// [`Tree::run_within`], coder started by `wrap` (a program and its arguments, which
    /// end by running the rest of the command line) when given.
    fn run_wrapped(
        &self,
        wrap: &[&str],
        extra: &[&str],
        payload: &str,
        deadline: Duration,
    ) -> Option<Value> {
        self.run_full(wrap, &[], extra, payload, deadline)
    }

    /// [`Tree::run_wrapped`], `sub` (a subcommand and its flags) right after coder.
    fn run_full(
        &self,
        wrap: &[&str],
        sub: &[&str],
        extra: &[&str],
        payload: &str,
        deadline: Duration,
    ) -> Option<Value> {
        let bin = self.fake_claude(payload);
        let mut path = std::ffi::OsString::new();
        if let Some(first) = self.path_first.lock().unwrap().as_ref() {
            path.push(first);
            path.push(":");
        }
        path.push(self.root.join("bin"));
        path.push(":/usr/local/bin:/usr/bin:/bin");
        let mut cmd = match wrap.split_first() {
            Some((program, args)) => {
                let mut cmd = std::process::Command::new(program);
                cmd.args(args).arg(common::CODER);
                cmd
            }
            None => std::process::Command::new(common::CODER),
        };
        cmd.args(sub)
            .arg("--cd")
            .arg(self.ws())
            .arg("--claude-bin")
            .arg(&bin)
            .args(extra)
            .arg("go");
        sandbox_fixture::user_env(&mut cmd, &self.root, path);
        sandbox_fixture::as_owner(&mut cmd, self.owner);
        match common::run_bounded(&mut cmd, deadline) {
            Ok(out) => Some(
                serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}")),
            ),
            Err(_) => {
                self.kill_leftovers();
                None
            }
        }
    }

    /// SIGKILL to every process whose working directory is in this tree (coder's git,
    /// left behind when the test killed coder); by pid, each one this test started.
    fn kill_leftovers(&self) {
        for _ in 0..50 {
            let mut found = false;
            for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|p| p.parse::<i32>().ok())
                else {
                    continue;
                };
                let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
                    continue;
                };
                if cwd.starts_with(&self.root) && pid != std::process::id() as i32 {
                    found = true;
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            if !found {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The user's own git, run as `script` (`sh -c`, `bin` first on `PATH`) in the
    /// workspace as the arm's user: whether `timeout 5` had to stop it (its process group:
    /// `timeout` makes one).
    fn user_git_blocks(&self, script: &str) -> bool {
        let mut path = self.root.join("bin").into_os_string();
        path.push(":/usr/local/bin:/usr/bin:/bin");
        let mut cmd = std::process::Command::new("timeout");
        cmd.args(["-k", "2", "5", "sh", "-c", script])
            .current_dir(self.ws())
            .env("PATH", path)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.root.join("home"));
        sandbox_fixture::as_owner(&mut cmd, self.owner);
        let status = cmd.output_bounded().status;
        self.kill_leftovers();
        status.code() == Some(124)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.kill_leftovers();
    }
}

/// The user's `git` is a wrapper script that runs the real git as its child (no `exec`),
/// and the repository's config includes a work-tree file that the agent makes a symlink
/// to `/proc/self/fd/1`. The watcher of round fifteen looked at the wrapper only: the real
/// git, below it, read its own stdout pipe forever, and coder with it. Now every process
/// below coder's git is looked at and killed, the ledger says why, and the next run (the
/// symlink still there) ends and sees its edit. Control: the user's own git, through the
/// same wrapper, blocks.

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_that_is_a_wrapper_script_is_watched_down_to_its_child() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(60);
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::including(owner);
        tree.wrap_git();
        let case = who(owner);
        let payload = "echo x >> a.txt && ln -sf /proc/self/fd/1 shared.gitconfig && echo LINKED";
        let env = tree
            .run_within(&UNCONFINED, payload, deadline)
            .unwrap_or_else(|| panic!("{case}: coder did not end within {deadline:?}"));
        assert!(result(&env).contains("LINKED"), "{case}: {env}");
        // The snapshots' git reads no config of the repository's (a private git dir):
        // the next run's discovery, which does, meets the symlink.
        assert!(
            changes(&env).contains(&("a.txt".into(), "modified".into())),
            "{case}: {env}"
        );
        tree.next_run_warns(case, deadline, "held pipe:");
        assert!(
            tree.user_git_blocks("git status 2>&1 | cat"),
            "{case}: control: the user's git did not block"
        );
    }
}

/// Include fan-out: the config includes a work-tree file; the agent makes it include
/// `L1` fifty times, `L1` include `L2` fifty times, and so on to `L9`, empty: 50^8
/// opens of small regular files, within git's ten levels. coder's git spun on them for
/// ever (the watcher sees nothing suspect in regular files): the run never ended, nor did
/// any later one. Now a git of coder's that reads the config alone (the probe, the
/// copied settings) is stopped after `CONFIG_DEADLINE`; the snapshots' own git reads no
/// config of the repository's. The run ends, and the next one (the files still there)
/// measures its edit with the plain walk and a warning. Control: the user's own git spins.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_include_fan_out_does_not_hold_the_ledgers_git() {
    common::require_root_and_user_namespaces();
    let name = "include fan-out";
    let deadline = Duration::from_secs(90);
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::including(owner);
        let case = who(owner);
        let payload = "echo x >> a.txt
for i in 1 2 3 4 5 6 7 8; do
  { echo '[include]'; for k in $(seq 50); do echo \"path = L$((i + 1))\"; done; } > L$i
done
: > L9
{ echo '[include]'; for k in $(seq 50); do echo 'path = L1'; done; } > shared.gitconfig
echo PLANTED";
        let env = tree.run_within(&UNCONFINED, payload, deadline);
        if KNOWN_OPEN.contains(&name) {
            assert!(
                env.is_none(),
                "{case}: {name} no longer holds coder: {env:?}"
            );
        } else {
            let env = env.unwrap_or_else(|| panic!("{case}: coder did not end"));
            assert!(result(&env).contains("PLANTED"), "{case}: {env}");
            tree.next_run_warns(case, deadline, "configuration alone");
        }
        assert!(
            tree.user_git_blocks("git status"),
            "{case}: control: the user's git did not spin"
        );
    }
}

/// A sparse file of 8 TiB in the workspace (`truncate`, no disk used): the "after"
/// snapshot's `git add -A` read and compressed all of it, hours per terabyte, and the run
/// did not end (measured within 25 s in round fifteen's review). Now the snapshots' `git
/// add` streams every blob through `read` (`core.bigFileThreshold=1`) and the watcher stops
/// a git that has read more than 1 GiB: the run ends, the ledger says why. Control: the
/// user's own `git add` spins on it, and the plain walk of the same workspace without git
/// (which hashes at most 1 GiB) ends and lists the file.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_sparse_file_of_terabytes_holds_the_ledgers_git() {
    common::require_root_and_user_namespaces();
    let name = "sparse terabytes";
    let deadline = Duration::from_secs(90);
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::new(owner, &[("a.txt", "a\n")], &[]);
        let case = who(owner);
        let payload = "truncate -s 8T big.bin && echo PLANTED";
        let env = tree.run_within(&[], payload, deadline);
        if KNOWN_OPEN.contains(&name) {
            assert!(
                env.is_none(),
                "{case}: {name} no longer holds coder: {env:?}"
            );
        } else {
            let env = env.unwrap_or_else(|| panic!("{case}: coder did not end"));
            assert!(result(&env).contains("PLANTED"), "{case}: {env}");
            assert!(
                warned(&env, "GiB of the workspace's files"),
                "{case}: {env}"
            );
        }
        assert!(
            tree.user_git_blocks("git add -A"),
            "{case}: control: the user's git add did not spin"
        );
        // Control: the same file in a workspace without git, measured by the plain walk.
        std::fs::remove_file(tree.ws().join("big.bin")).unwrap();
        std::fs::remove_dir_all(tree.ws().join(".git")).unwrap();
        let env = tree
            .run_within(&[], payload, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{case}: control: the plain walk did not end"));
        assert!(result(&env).contains("PLANTED"), "{case}: control: {env}");
        assert!(
            changes(&env).contains(&("big.bin".into(), "added".into())),
            "{case}: control: {env}"
        );
    }
}

/// `--worktree`: the run's checkout is a private repository, but the finish asks the
/// user's repository for `user.name` and `user.email`, and that git reads the
/// repository's config with its includes. A work-tree file it includes, made a symlink to
/// `/proc/self/fd/1` while the run is under way (here by the test, standing for the agent
/// of another run in the user's checkout), held that git, which no watcher looked at, and
/// the finish with it, forever. Now it is watched: coder's identity is used, the `index-pack`
/// that follows is stopped the same way, and the run ends with a note saying why.
/// Control: the user's own git, its output a pipe, blocks.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_include_made_a_symlink_during_a_worktree_run_does_not_hold_its_finish() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(60);
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::new(
            owner,
            &[("a.txt", "a\n"), ("shared.gitconfig", "")],
            &[("include.path", "../shared.gitconfig")],
        );
        let case = who(owner);
        let payload = "echo x > new.txt; touch started
i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done; echo DONE";
        let worktrees = tree.root.join("state/worktrees");
        let env = std::thread::scope(|s| {
            let run = s.spawn(|| tree.run_within(&["--worktree"], payload, deadline));
            // The agent has started: the checkout holds its marker.
            let started = std::time::Instant::now();
            let checkout = loop {
                let found = std::fs::read_dir(&worktrees).ok().and_then(|dir| {
                    dir.flatten()
                        .map(|e| e.path())
                        .find(|p| p.join("started").exists())
                });
                if let Some(found) = found {
                    break found;
                }
                assert!(
                    started.elapsed() < deadline && !run.is_finished(),
                    "{case}: the agent never started"
                );
                std::thread::sleep(Duration::from_millis(50));
            };
            let shared = tree.ws().join("shared.gitconfig");
            std::fs::remove_file(&shared).unwrap();
            std::os::unix::fs::symlink("/proc/self/fd/1", &shared).unwrap();
            std::fs::write(checkout.join("go"), "").unwrap();
            run.join().unwrap()
        });
        let env = env.unwrap_or_else(|| panic!("{case}: coder did not end within {deadline:?}"));
        assert!(result(&env).contains("DONE"), "{case}: {env}");
        let note = env["worktree"]["note"].as_str().unwrap_or_default();
        assert!(note.contains("held pipe:"), "{case}: {env}");
        assert!(
            tree.user_git_blocks("git config --get user.name | cat"),
            "{case}: control: the user's git did not block"
        );
    }
}

/// A tracefs instance of this test's own (its `trace_pipe` holds nothing anyone else
/// traces), made through a tracefs mount of the test's own (instances are the kernel's,
/// seen in every tracefs mount: `/sys/kernel/tracing` is not always mounted, and was
/// found empty on a CI machine), removed and unmounted on drop.
struct TraceInstance {
    mount: tempfile::TempDir,
    name: String,
}

impl TraceInstance {
    fn new() -> TraceInstance {
        let mount = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev"])
            .arg(mount.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tracefs: {status}");
        let instance = TraceInstance {
            mount,
            name: format!("coder-r15-{}", uuid::Uuid::new_v4().simple()),
        };
        let dir = instance.dir();
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        instance
    }

    fn dir(&self) -> PathBuf {
        self.mount.path().join("instances").join(&self.name)
    }

    fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TraceInstance {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(self.dir());
        let _ = std::process::Command::new("umount")
            .arg(self.mount.path())
            .status();
    }
}

/// A kernel file system mounted outside `/proc` and `/sys` (a container's `/host/sys`;
/// here `tracefs`, mounted in a mount namespace of coder's own at `alt/`): the watcher
/// took a file as the kernel's by its path, so the agent's symlink of the included config
/// to `alt/instances/NAME/trace_pipe` had coder's git wait in its read until the config
/// deadline (5 s for each git that reads the config alone; for ever for a `git add` whose
/// listing passed, or `--worktree`'s `index-pack`), and the warning said nothing of why. Now
/// the file system's type is asked (`statfs`), wherever it is mounted: the git is stopped
/// at once, and the warning names the file. Root only: `trace_pipe` is root's to read (as another user git
/// fails at once). Control: the user's git, in the same kind of namespace, blocks.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_kernel_file_system_mounted_elsewhere_is_still_the_kernels() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(60);
    let instance = TraceInstance::new();
    let tree = Tree::including(None);
    let alt = tree.root.join("alt");
    std::fs::create_dir(&alt).unwrap();
    let alt = alt.to_str().unwrap().to_owned();
    let mount = "mount -t tracefs nodev \"$0\" && exec \"$@\"";
    let wrap = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        mount,
        alt.as_str(),
    ];
    let pipe = format!("{alt}/instances/{}/trace_pipe", instance.name());
    let payload = format!("echo x >> a.txt && ln -sf {pipe} shared.gitconfig && echo LINKED");
    let env = tree
        .run_wrapped(&wrap, &UNCONFINED, &payload, deadline)
        .unwrap_or_else(|| panic!("coder did not end within {deadline:?}"));
    assert!(result(&env).contains("LINKED"), "{env}");
    // The next run's discovery reads the config (the snapshots' git does not).
    let env = tree
        .run_wrapped(&wrap, &[], "echo y >> a.txt; echo AGAIN", deadline)
        .unwrap_or_else(|| panic!("next run: coder did not end within {deadline:?}"));
    assert!(result(&env).contains("AGAIN"), "next run: {env}");
    assert!(warned(&env, "trace_pipe"), "next run: no warning: {env}");
    // Control: the user's own git, with the same mount, blocks.
    let script = format!(
        "mount -t tracefs nodev \"$0\" && cd {} && timeout 5 git status; echo rc=$?",
        tree.ws().display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script, &alt])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", tree.root.join("home"))
        .stdin(std::process::Stdio::null())
        .output_bounded();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("rc=124"),
        "control: the user's git did not block: {out:?}"
    );
}

/// `--worktree` brought the run's branch into the repository with `git fetch` from coder's
/// own bare repository. A fetch rewrites its URL by the repository's `url.<base>.insteadOf`,
/// and reads the repository's config with its includes: an earlier run's agent wrote the
/// included work-tree file with `url."ext::sh -c …".insteadOf = /` and `protocol.ext.allow
/// = always` (which wins over the command line's `protocol.allow=never`), and the next
/// `--worktree` run's finish ran its command as coder, outside the sandbox. Now the branch
/// comes in with no transport (`pack-objects` in coder's repository, `index-pack` and
/// `update-ref` in the user's): the command does not run and the branch is there.
/// Control: the user's own `git fetch` in that checkout runs it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_included_url_rewrite_does_not_run_a_command_at_the_worktree_finish() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(90);
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::including(owner);
        let case = who(owner);
        let pwned = tree.root.join("outside/PWNED");
        let plant = format!(
            "printf '[protocol \"ext\"]\\n\\tallow = always\\n[url \"ext::sh -c touch%% {}%% #\"]\\n\\tinsteadOf = /\\n' > shared.gitconfig && echo PLANTED",
            pwned.display()
        );
        tree.plant(case, &plant, deadline);
        assert!(
            tree.git(&["config", "--get-regexp", "^url"])
                .contains("ext::"),
            "{case}: not planted"
        );
        let env = tree
            .run_within(&["--worktree"], "echo x >> a.txt; echo DONE", deadline)
            .unwrap_or_else(|| panic!("{case}: the --worktree run did not end"));
        assert!(result(&env).contains("DONE"), "{case}: {env}");
        assert!(
            !pwned.exists(),
            "{case}: the agent's command ran as coder: {env}"
        );
        let commit = env["worktree"]["commit"].as_str().unwrap_or_default();
        assert!(!commit.is_empty(), "{case}: no commit: {env}");
        let branch = env["worktree"]["branch"].as_str().unwrap_or_default();
        assert_eq!(
            tree.git(&["rev-parse", &format!("refs/heads/{branch}")])
                .trim(),
            commit,
            "{case}: {env}"
        );
        assert_eq!(
            tree.git(&["show", &format!("{commit}:a.txt")]),
            "a\nx\n",
            "{case}"
        );
        // Control: the user's own fetch runs the command.
        let state = tree.root.join("state");
        tree.user_git(&["fetch", "-q", state.to_str().unwrap()]);
        assert!(
            pwned.exists(),
            "{case}: control: the user's fetch did not run it"
        );
    }
}

/// `--worktree` counts the uncommitted paths of the user's checkout with `git status`
/// before the run, and `status` runs the clean filter of a file whose stat data changed
/// (or whose index entry is empty). The repository's config includes a work-tree file; an
/// earlier run's agent defined a filter driver there and named it in `.gitattributes`:
/// the ledger of that run switches every driver off, but the next `--worktree` run's
/// `status` ran the agent's command as coder, outside the sandbox. Now `status` gets the
/// same overrides as the ledger. Control: the user's own `git status` runs it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_included_filter_driver_does_not_run_when_a_worktree_run_begins() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(90);
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::including(owner);
        let case = who(owner);
        let ran = tree.root.join("outside/FILTERED");
        // `a.txt` rewritten at the same size, which the user's git must read (and filter)
        // to tell; the included file is the agent's new one (an existing one is held
        // read-only by the sandbox).
        let plant = format!(
            "printf '[filter \"x\"]\\n\\tclean = \"touch {} && cat\"\\n' > shared.gitconfig && echo '* filter=x' > .gitattributes && echo b > a.txt && echo PLANTED",
            ran.display()
        );
        let env = tree.plant(case, &plant, deadline);
        assert!(!ran.exists(), "{case}: the ledger ran the filter: {env}");
        let env = tree
            .run_within(&["--worktree"], "echo DONE", deadline)
            .unwrap_or_else(|| panic!("{case}: the --worktree run did not end"));
        assert!(result(&env).contains("DONE"), "{case}: {env}");
        assert!(
            !ran.exists(),
            "{case}: the agent's filter ran as coder: {env}"
        );
        let note = env["worktree"]["note"].as_str().unwrap_or_default();
        assert!(note.contains("uncommitted path(s)"), "{case}: {env}");
        // Control: the user's own status runs it.
        tree.user_git(&["status", "--porcelain"]);
        assert!(
            ran.exists(),
            "{case}: control: the user's status did not run it"
        );
    }
}

/// `coder plan --plan-file FILE` with FILE in the workspace asks git whether it tracks
/// FILE (a tracked file is never the plan). That git ran with the user's environment and
/// nothing overridden, and `git ls-files` reading the index runs `core.fsmonitor`: an
/// earlier run's agent set it in the work-tree file the repository's config includes,
/// and the next `coder plan` ran its command as coder, outside the sandbox. Now it runs as
/// the ledger's git does. Control: the user's own `git ls-files` runs it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_included_fsmonitor_does_not_run_when_a_plan_file_is_checked() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(90);
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::including(owner);
        let case = who(owner);
        let ran = tree.root.join("outside/FSMONITOR");
        let plant = format!(
            "printf '[core]\\n\\tfsmonitor = \"touch {}; true\"\\n' > shared.gitconfig && echo PLANTED",
            ran.display()
        );
        let env = tree.plant(case, &plant, deadline);
        assert!(!ran.exists(), "{case}: the ledger ran the fsmonitor: {env}");
        // The user's earlier plan, not tracked, in the workspace.
        let plan = tree.ws().join("plan.md");
        std::fs::write(&plan, "old plan\n").unwrap();
        if owner.is_some() {
            std::os::unix::fs::lchown(&plan, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let plan_arg = plan.to_str().unwrap().to_owned();
        let env = tree
            .run_full(
                &[],
                &["plan"],
                &["--plan-file", &plan_arg],
                "echo DONE",
                deadline,
            )
            .unwrap_or_else(|| panic!("{case}: coder plan did not end"));
        assert!(
            !ran.exists(),
            "{case}: the agent's fsmonitor ran as coder: {env}"
        );
        assert_eq!(
            env["plan_file"].as_str(),
            Some(plan_arg.as_str()),
            "{case}: {env}"
        );
        // Control: the user's own ls-files runs it.
        tree.user_git(&["ls-files", "--error-unmatch", "--", "a.txt"]);
        assert!(
            ran.exists(),
            "{case}: control: the user's ls-files did not run it"
        );
    }
}

/// The user's `PATH` holds a directory of the project (`ws/.venv/bin`, as an activated
/// virtualenv puts it). coder took the first `git` on `PATH` for its ledger: the agent
/// wrote `.venv/bin/git`, and the next run's ledger ran it as coder, outside the sandbox.
/// Now a directory inside the workspace is not searched: the next run's ledger uses the
/// system's git and sees its edit. Control: the user's own shell, with that `PATH`, runs
/// the agent's `git`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_the_agent_puts_on_path_inside_the_workspace_is_not_run() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(90);
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::new(owner, &[("a.txt", "a\n")], &[]);
        let case = who(owner);
        let venv = tree.ws().join(".venv/bin");
        *tree.path_first.lock().unwrap() = Some(venv.clone());
        let ran = tree.root.join("outside/AGENTS_GIT");
        let plant = format!(
            "mkdir -p .venv/bin && printf '#!/bin/sh\\ntouch {}\\nexec /usr/local/bin/git \"$@\"\\n' > .venv/bin/git && chmod +x .venv/bin/git && echo PLANTED",
            ran.display()
        );
        let env = tree.plant(case, &plant, deadline);
        assert!(venv.join("git").exists(), "{case}: not planted: {env}");
        let env = tree
            .run_within(&[], "echo y >> a.txt; echo AGAIN", deadline)
            .unwrap_or_else(|| panic!("{case}: run 2 did not end"));
        assert!(result(&env).contains("AGAIN"), "{case}: {env}");
        assert!(!ran.exists(), "{case}: the agent's git ran as coder: {env}");
        assert!(
            changes(&env).contains(&("a.txt".into(), "modified".into())),
            "{case}: {env}"
        );
        // Control: the user's shell, with that PATH, runs it.
        let mut path = venv.into_os_string();
        path.push(":/usr/local/bin:/usr/bin:/bin");
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "git status"])
            .current_dir(tree.ws())
            .env("PATH", path)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", tree.root.join("home"))
            .stdin(std::process::Stdio::null());
        sandbox_fixture::as_owner(&mut cmd, owner);
        let _ = cmd.output_bounded();
        assert!(
            ran.exists(),
            "{case}: control: the user's shell did not run it"
        );
    }
}
