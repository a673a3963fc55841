//! Round seventeen's review: what round sixteen added (the refusal of a kernel file system
//! mounted inside a tree the agent is granted, `refuse_kernel_mounts` in
//! `src/sandbox/policy.rs`; the ledger's watcher of its own git; the kept ledger index),
//! attacked by someone who has read it. Every attack runs as root and as uid 65534 where
//! it applies, each with a control showing that its setup lands without the defence.
//!
//! Found open when this review started, closed with it:
//! * **The host's `/dev` bound into the workspace.** A workspace that is a chroot or a
//!   root file system being built (`mount --rbind /dev rootfs/dev`, as for `/proc` and
//!   `/sys`) was refused for its `proc` and `sysfs` but not for `devtmpfs`, which was not
//!   on the list of the kernel's file systems: the agent was granted the host's `/dev`
//!   and, as root, created files there (it could as well have replaced `/dev/urandom`
//!   with a regular file of its own, read by every process of the host after it). The
//!   mounts are `nodev`, so no device opened, but the directory is the host's. Now
//!   `devtmpfs` (and the kernel's other file systems the ledger's watcher already knew:
//!   `selinuxfs`, `smackfs`, `resctrl`, and `rpc_pipefs`, `nfsd`, `binder`) are refused
//!   like `proc`. A tree that lies on one itself (the host's `/dev` bound at a directory
//!   given as `--cd` or `--write`) was not looked at either (only mounts *below* a tree
//!   were); it is refused now too.
//! * **A renamed parent of a protected entry.** `--protect 'tools/ci/**'` made `tools/ci`
//!   a read-only mount, which moved with `tools` when the agent renamed it; the agent
//!   made a `tools/ci` of its own and wrote the protected file's name there. The
//!   directories above a protected entry (or its placeholder) are pinned now.
//! * **`core.hooksPath` naming a directory of the work tree.** A project's `git config
//!   core.hooksPath scripts/hooks` (or the user's global config naming one relative to
//!   every work tree): only `.githooks` and `.husky` were protected, by name, and the
//!   agent's `pre-commit` ran at the user's next `git commit`. The directory git names
//!   (`git rev-parse --git-path hooks`, with the user's own configs) is protected now, as
//!   named and as resolved, held at its first missing level when absent. (The first
//!   version of this fix asked git alone, and an earlier run's agent that broke
//!   `.git/HEAD` had git say nothing in the next run, whose agent put `HEAD` back and
//!   wrote the hook: the nearest repository's config files are read by name then.)
//! * **Protected globs in `--write` trees.** They applied to the workspace alone: a
//!   `--write` repository's `.githooks/pre-commit` was the agent's.
//! * **A nested repository's sparse index.** The "before" snapshot seeds a nested part's
//!   private index from the nested repository's own: a 2 GiB sparse `.git/index` the agent
//!   left was copied whole into the state directory and read into coder's memory at every
//!   later run's start (a terabyte fills the disk, and coder dies). Copies stop at 512 MiB.
//!
//! Known open (ratchets asserting today's behaviour):
//! * **A work-tree script that a command of the user's git config runs** (a filter
//!   driver's `clean = sh tools/strip.sh`): the agent rewrites the script, the user's next
//!   `git add` runs it.
//!
//! Fixed after the review, by the lead's pass over files held read-only: **a second name
//! of a protected file** (a hard link made before the file was protected: an earlier
//! run's agent made `scripts/hooks/pre-commit` and `scripts/keep`, the user then adopted
//! the hooks) was the agent's to write.
//!
//! Looked at and held (no test of their own here): bind mounts of parts of `/proc` (their
//! type is `proc`); kernel mounts in `--read`/`--write` trees (every tree is looked at);
//! a FIFO, socket or device as the user's or a nested index (refused by
//! `copy_plain_file`); the kept index's two files (the list is tied to its index by the
//! index's checksum, so two runs storing at once make it unusable, never mixed; the state
//! directory is refused to every grant that could write it); the ledger's git racing the
//! agent (the proxy holds the agent until the "before" is taken, and the "after" runs
//! once the run's PID namespace is gone).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::Bounded;
use common::sandbox_fixture::{self, NOBODY};
use serde_json::Value;

/// Attacks of this file measured open today.
const KNOWN_OPEN: &[&str] = &[];

/// The verdict on one arm of an attack whose payload `ran` (or not) at the user's git:
/// the unconfined control must run it; a confined arm must not (`what` says what running
/// it means), unless `name` is in [`KNOWN_OPEN`], where it must still run, so that a fix
/// shows as this ratchet failing.
fn judge_ran(case: &str, name: &str, unconfined: bool, ran: bool, what: &str, detail: &str) {
    if unconfined {
        assert!(ran, "{case}: control: the payload did not run: {detail}");
    } else if KNOWN_OPEN.contains(&name) {
        assert!(ran, "{case}: {name} is closed: {detail}");
    } else {
        assert!(!ran, "{case}: {what}: {detail}");
    }
}

fn who(owner: Option<u32>) -> &'static str {
    if owner.is_some() { "nobody" } else { "root" }
}

/// A tree for runs of a fake CLI as one arm's user: workspace `ws` (a git repository
/// with one commit, or a plain directory), `home`, coder's `state`, in `/var/tmp`.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    owner: Option<u32>,
}

impl Tree {
    fn new(owner: Option<u32>, files: &[(&str, &str)], git: bool) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("coder-r17-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        for d in ["ws", "home", "state", "xdg"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let tree = Tree {
            _dir: dir,
            root,
            owner,
        };
        for (name, text) in files {
            let path = tree.ws().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        if git {
            tree.git(&["init", "-q"]);
            tree.git(&["add", "-A"]);
            tree.git(&["commit", "-qm", "init"]);
        }
        if owner.is_some() {
            sandbox_fixture::give_to_nobody(&tree.root);
        }
        tree
    }

    fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    /// The user's own git in the workspace, as root (on a tree given away too).
    fn git(&self, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
            .args(["-c", "safe.directory=*"])
            .args(args)
            .current_dir(self.ws())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.root.join("home"))
            .stdin(std::process::Stdio::null())
            .output_bounded();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// The user's own git in the workspace after a run, as the arm's user, outside any
    /// sandbox: its output.
    fn user_git(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = std::process::Command::new("git");
        cmd.args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
            .args(args)
            .current_dir(self.ws())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.root.join("home"));
        sandbox_fixture::as_owner(&mut cmd, self.owner);
        common::run_bounded(&mut cmd, Duration::from_secs(60)).expect("the user's git hung")
    }

    /// coder as the arm's user on a fake CLI whose payload is `payload`, started by `wrap`
    /// (a program and its arguments that end by running the rest of the command line, as
    /// root; the arm's user is taken by `setpriv` at its end) when given: its envelope.
    fn run_as(&self, wrap: &[&str], extra: &[&str], payload: &str, deadline: Duration) -> Value {
        let bin = self.root.join("fake-claude");
        std::fs::write(&bin, sandbox_fixture::payload_claude(payload)).unwrap();
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        if self.owner.is_some() {
            std::os::unix::fs::lchown(&bin, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let mut cmd = match wrap.split_first() {
            Some((program, args)) => {
                let mut cmd = std::process::Command::new(program);
                cmd.args(args);
                if self.owner.is_some() {
                    cmd.args([
                        "setpriv",
                        "--reuid=65534",
                        "--regid=65534",
                        "--clear-groups",
                    ]);
                }
                cmd.arg(common::CODER);
                cmd
            }
            None => {
                let mut cmd = std::process::Command::new(common::CODER);
                sandbox_fixture::as_owner(&mut cmd, self.owner);
                cmd
            }
        };
        cmd.arg("--cd")
            .arg(self.ws())
            .arg("--claude-bin")
            .arg(&bin)
            .args(extra)
            .arg("go")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.root.join("home"))
            .env("CODER_STATE_DIR", self.root.join("state"))
            .env("XDG_CONFIG_HOME", self.root.join("xdg"))
            .env("ANTHROPIC_AUTH_TOKEN", "test-token")
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .current_dir(&self.root)
            .stdin(std::process::Stdio::null());
        let out = common::run_bounded(&mut cmd, deadline)
            .unwrap_or_else(|_| panic!("coder did not end within {deadline:?}"));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"))
    }
}

fn result(env: &Value) -> &str {
    env["result"].as_str().unwrap_or_default()
}

fn error_kind(env: &Value) -> &str {
    env["error_kind"].as_str().unwrap_or_default()
}

/// The envelope of a run whose payload is `payload` (`$PLANT` names a new file of the
/// host's `/dev`), with the host's `/dev` bound at `point` in a private mount namespace
/// around coder, and whether the file landed in the host's `/dev` (removed again).
fn with_dev_bound_at(
    tree: &Tree,
    point: &std::path::Path,
    extra: &[&str],
    payload: &str,
) -> (Value, bool) {
    let planted = format!("coder-r17-{}", uuid::Uuid::new_v4().simple());
    let point_arg = point.display().to_string();
    let wrap = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        r#"mount --bind /dev "$0" && exec "$@""#,
        &point_arg,
    ];
    let payload = format!("PLANT={planted}; {payload}");
    let env = tree.run_as(&wrap, extra, &payload, Duration::from_secs(120));
    let host = std::path::Path::new("/dev").join(&planted);
    let landed = host.exists();
    let _ = std::fs::remove_file(&host);
    (env, landed)
}

/// The host's `/dev` bound into the workspace (a root file system being built, a chroot:
/// `mount --bind /dev rootfs/dev`, done here in a private mount namespace around coder):
/// the agent was granted the host's `devtmpfs` and, as root, made a file in the host's
/// `/dev` (a regular file in place of `/dev/urandom` would be read by every process of
/// the host). Now the workspace is refused before anything runs, as one with `proc`
/// mounted in it is (`config_error`, naming the mount). Control: unconfined, the agent's
/// file lands in the host's `/dev` (root; uid 65534 may not write `/dev` at all, so its
/// arm shows the refusal alone).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_hosts_dev_bound_into_the_workspace_is_refused() {
    common::require_root_and_user_namespaces();
    let name = "devtmpfs in the workspace";
    for owner in [None, Some(NOBODY)] {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::new(owner, &[("rootfs/dev/.keep", "")], true);
            let point = tree.ws().join("rootfs/dev");
            let (env, landed) = with_dev_bound_at(
                &tree,
                &point,
                &["--sandbox", mode],
                "touch \"rootfs/dev/$PLANT\" && echo PLANTED",
            );
            if mode == "danger-full-access" {
                assert_eq!(landed, owner.is_none(), "{case}: control: {env}");
                assert_eq!(
                    result(&env).contains("PLANTED"),
                    owner.is_none(),
                    "{case}: control: {env}"
                );
                continue;
            }
            if KNOWN_OPEN.contains(&name) {
                assert_eq!(landed, owner.is_none(), "{case}: {name} is closed: {env}");
            } else {
                assert!(!landed, "{case}: the agent wrote the host's /dev: {env}");
                assert_eq!(error_kind(&env), "config_error", "{case}: {env}");
                let error = env["error"].as_str().unwrap_or_default();
                assert!(
                    error.contains("`devtmpfs` file system mounted inside")
                        && error.contains(&point.display().to_string()),
                    "{case}: {env}"
                );
            }
        }
    }
}

/// The same `/dev` reached as the tree itself: bound at a directory given as the
/// workspace (`--cd /mnt/hostdev`), or as a `--write` path, or bound inside a `--write`
/// path. `/dev` is refused as a workspace by its path; the mount below a tree was looked
/// for, the one a tree lies on was not, and the agent, as root, made files in the
/// host's `/dev`. Control: unconfined, the agent's file lands there (root).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_hosts_dev_as_the_workspace_or_a_write_path_is_refused() {
    common::require_root_and_user_namespaces();
    let name = "tree on a devtmpfs";
    for owner in [None, Some(NOBODY)] {
        // The scratch place an earlier run makes, there whichever run came first.
        let uid = owner.unwrap_or(0);
        let scratch = std::path::PathBuf::from(format!("/dev/shm/coder-{uid}"));
        if !scratch.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&scratch)
                .unwrap();
            std::os::unix::fs::chown(&scratch, Some(uid), Some(uid)).unwrap();
        }
        for shape in ["workspace", "--write", "inside --write"] {
            for mode in ["danger-full-access", "workspace-write"] {
                let case = format!("{} {shape} {mode}", who(owner));
                let tree = Tree::new(owner, &[("a.txt", "a\n")], true);
                let extra_dir = tree.root.join("extra");
                std::fs::create_dir_all(extra_dir.join("dev")).unwrap();
                if owner.is_some() {
                    sandbox_fixture::give_to_nobody(&extra_dir);
                }
                let extra_arg = extra_dir.display().to_string();
                let (point, target, write): (PathBuf, String, &[&str]) = match shape {
                    "workspace" => (tree.ws(), "$PLANT".into(), &[]),
                    "--write" => (
                        extra_dir.clone(),
                        format!("{extra_arg}/$PLANT"),
                        &["--write", &extra_arg],
                    ),
                    _ => (
                        extra_dir.join("dev"),
                        format!("{extra_arg}/dev/$PLANT"),
                        &["--write", &extra_arg],
                    ),
                };
                let mut extra = vec!["--sandbox", mode];
                extra.extend_from_slice(write);
                let payload = format!("touch \"{target}\" && echo PLANTED");
                let (env, landed) = with_dev_bound_at(&tree, &point, &extra, &payload);
                if mode == "danger-full-access" {
                    assert_eq!(landed, owner.is_none(), "{case}: control: {env}");
                    continue;
                }
                if KNOWN_OPEN.contains(&name) {
                    assert_eq!(landed, owner.is_none(), "{case}: {name} is closed: {env}");
                } else {
                    assert!(!landed, "{case}: the agent wrote the host's /dev: {env}");
                    assert_eq!(error_kind(&env), "config_error", "{case}: {env}");
                    // As uid 65534, a workspace on the host's `/dev` (root's) is refused
                    // before that, as one it may not write. Where an earlier run made the
                    // scratch place `/dev/shm/coder-UID`, the grant of the host's `/dev`
                    // was refused first as reaching it, and the user told to move the
                    // scratch directory, which changed nothing (until round twenty-one):
                    // the test makes one, so that it is always there.
                    let error = env["error"].as_str().unwrap_or_default();
                    assert!(
                        error.contains("`devtmpfs` file system")
                            || (owner.is_some()
                                && shape == "workspace"
                                && error.contains("permission denied")),
                        "{case}: {env}"
                    );
                }
            }
        }
    }
}

/// A repository whose config names a hooks directory of its work tree (`git config
/// core.hooksPath scripts/hooks`, a project's way to share its hooks; only `.githooks`
/// and `.husky` were protected, by name), or the user's global config naming one relative
/// to every work tree: the agent rewrote the `pre-commit` there, or made the directories
/// and the hook when they were absent, and the user's next `git commit` ran it outside
/// the sandbox. Control: unconfined, the user's commit runs the payload.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hooks_directory_the_repository_config_names_is_not_the_agents_to_write() {
    common::require_root_and_user_namespaces();
    let name = "core.hooksPath in the work tree";
    for owner in [None, Some(NOBODY)] {
        for (present, global, linked) in [
            (true, false, false),
            (false, false, false),
            (true, true, false),
            (true, false, true),
        ] {
            for mode in ["danger-full-access", "workspace-write"] {
                let case = format!(
                    "{} present={present} global={global} linked={linked} {mode}",
                    who(owner)
                );
                let hook = "#!/bin/sh\nexit 0\n";
                let files: &[(&str, &str)] = if present {
                    &[("a.txt", "a\n"), ("scripts/hooks/pre-commit", hook)]
                } else {
                    &[("a.txt", "a\n")]
                };
                let tree = Tree::new(owner, files, true);
                if present {
                    let hook = tree.ws().join("scripts/hooks/pre-commit");
                    std::fs::set_permissions(
                        &hook,
                        std::os::unix::fs::PermissionsExt::from_mode(0o755),
                    )
                    .unwrap();
                }
                // `hooks -> scripts/hooks`, named by the config: the agent re-points the link.
                let named = if linked { "hooks" } else { "scripts/hooks" };
                if linked {
                    std::os::unix::fs::symlink("scripts/hooks", tree.ws().join("hooks")).unwrap();
                }
                if global {
                    // The user's global config: every repository's hooks in its work tree.
                    let config = tree.root.join("home/.gitconfig");
                    std::fs::write(&config, format!("[core]\n\thooksPath = {named}\n")).unwrap();
                    if owner.is_some() {
                        sandbox_fixture::give_to_nobody(&config);
                    }
                } else {
                    tree.git(&["config", "core.hooksPath", named]);
                }
                let marker = tree.root.join("home/ran");
                let dir = if linked { "evil" } else { "scripts/hooks" };
                let relink = if linked {
                    "rm -f hooks && ln -s evil hooks && "
                } else {
                    ""
                };
                let payload = format!(
                    "mkdir -p {dir} && printf '#!/bin/sh\\ntouch {}\\n' > \
                     {dir}/pre-commit && chmod +x {dir}/pre-commit && {relink}echo PLANTED",
                    marker.display()
                );
                let env = tree.run_as(
                    &[],
                    &["--sandbox", mode],
                    &payload,
                    Duration::from_secs(120),
                );
                let out = tree.user_git(&["commit", "--allow-empty", "-qm", "next"]);
                let ran = marker.exists();
                judge_ran(
                    &case,
                    name,
                    mode == "danger-full-access",
                    ran,
                    "the user's commit ran the agent's hook",
                    &format!("{env}\n{out:?}"),
                );
            }
        }
    }
}

/// A protected glob below a directory (`--protect 'tools/ci/**'`, or the `protect` key of
/// the config; the defaults are all at the workspace's top): the protected directory was
/// a read-only mount, but the directory above it was the agent's to rename. It renamed
/// `tools`, made a `tools/ci` of its own and wrote `deploy.sh` there, and the file the
/// user protected held the agent's text after the run. The directories above a protected
/// entry are pinned now, as those above a file a git config includes are. Control:
/// unconfined, the same moves land.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_directory_above_a_protected_one_is_not_the_agents_to_rename() {
    common::require_root_and_user_namespaces();
    let name = "rename above a protected glob";
    for owner in [None, Some(NOBODY)] {
        for glob in ["tools/ci/**", "tools/ci/deploy.sh"] {
            for mode in ["danger-full-access", "workspace-write"] {
                let case = format!("{} {glob} {mode}", who(owner));
                let tree = Tree::new(owner, &[("tools/ci/deploy.sh", "echo ok\n")], true);
                let payload = "mv tools t2 && mkdir -p tools/ci && echo evil > tools/ci/deploy.sh \
                               && echo PLANTED";
                let env = tree.run_as(
                    &[],
                    &["--sandbox", mode, "--protect", glob],
                    payload,
                    Duration::from_secs(120),
                );
                let text = std::fs::read_to_string(tree.ws().join("tools/ci/deploy.sh"))
                    .unwrap_or_default();
                let landed = text == "evil\n";
                if mode == "danger-full-access" {
                    assert!(landed, "{case}: control: {text:?} {env}");
                    continue;
                }
                if KNOWN_OPEN.contains(&name) {
                    assert!(landed, "{case}: {name} is closed: {text:?} {env}");
                } else {
                    assert!(
                        !landed,
                        "{case}: the agent replaced the protected file: {env}"
                    );
                    assert_eq!(text, "echo ok\n", "{case}: {env}");
                    assert!(!result(&env).contains("PLANTED"), "{case}: {env}");
                }
            }
        }
    }
}

/// The agent makes a repository nested in the workspace, with a commit, and makes its
/// `.git/index` a sparse file of 2 GiB (`truncate`: no disk). The next run's "before"
/// snapshot seeds that part's private index from the nested repository's own (no kept
/// index is there for a part made during the last run): coder copied the whole file into
/// its state directory (2 GiB written, zeros) and read it into its own memory, unwatched
/// (no git, no read budget). At a terabyte the user's disk fills and coder is killed for
/// want of memory, at every later run's start. Control: the planted index is that large;
/// the next run's coder grew past 1 GiB.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_sparse_index_of_a_nested_repository_is_not_copied_whole() {
    common::require_root_and_user_namespaces();
    let name = "nested index copied whole";
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let tree = Tree::new(owner, &[("a.txt", "a\n")], true);
        let plant = "mkdir sub && cd sub && git init -q && echo s > s.txt && git add s.txt && \
                     git -c user.name=a -c user.email=a@b commit -qm s && \
                     truncate -s 2G .git/index && echo PLANTED";
        let env = tree.run_as(&[], &[], plant, Duration::from_secs(120));
        assert!(result(&env).contains("PLANTED"), "{case}: {env}");
        let planted = std::fs::metadata(tree.ws().join("sub/.git/index")).unwrap();
        assert_eq!(planted.len(), 2 << 30, "{case}: control: {env}");
        let peak = tree.root.join("peak");
        let peak_arg = peak.display().to_string();
        let wrap = ["/usr/bin/time", "-f", "%M", "-o", &peak_arg];
        let env = tree.run_as(
            &wrap,
            &[],
            "echo y >> sub/s.txt; echo AGAIN",
            Duration::from_secs(300),
        );
        assert!(result(&env).contains("AGAIN"), "{case}: {env}");
        let kib: u64 = std::fs::read_to_string(&peak)
            .unwrap_or_default()
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("{case}: no peak size"));
        if KNOWN_OPEN.contains(&name) {
            assert!(kib > 1 << 20, "{case}: {name} is closed: {kib} KiB {env}");
        } else {
            assert!(kib < 1 << 20, "{case}: the next run took {kib} KiB: {env}");
            assert!(env["changes"].is_object(), "{case}: {env}");
        }
    }
}

/// A second repository given with `--write` (a library the task also changes) whose
/// hooks live in `.githooks` (`core.hooksPath = .githooks`, a default protected glob):
/// the protected globs were applied to the workspace alone, and the agent rewrote
/// `lib/.githooks/pre-commit` (or made it, the directory absent), and the user's next
/// `git commit` in `lib` ran it outside the sandbox; the same with `lib`'s own
/// `core.hooksPath = scripts/hooks`. The same held for every protected
/// tool config there (`.claude/settings.json`, `.vscode/tasks.json`, `.envrc`). Now the
/// protected globs apply to every tree the agent may write. Control: unconfined, the
/// user's commit runs the payload.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn protected_tool_configs_of_a_write_path_are_not_the_agents_to_write() {
    common::require_root_and_user_namespaces();
    let name = "protected globs in --write trees";
    for owner in [None, Some(NOBODY)] {
        for (present, hooks) in [
            (true, ".githooks"),
            (false, ".githooks"),
            (true, "scripts/hooks"),
        ] {
            for mode in ["danger-full-access", "workspace-write"] {
                let case = format!("{} present={present} {hooks} {mode}", who(owner));
                let tree = Tree::new(owner, &[("a.txt", "a\n")], true);
                let lib = tree.root.join("lib");
                std::fs::create_dir_all(&lib).unwrap();
                std::fs::write(lib.join("l.txt"), "l\n").unwrap();
                if present {
                    std::fs::create_dir_all(lib.join(hooks)).unwrap();
                    std::fs::write(lib.join(hooks).join("pre-commit"), "#!/bin/sh\nexit 0\n")
                        .unwrap();
                }
                let git = |args: &[&str]| {
                    let out = std::process::Command::new("git")
                        .args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
                        .args(["-c", "safe.directory=*"])
                        .args(args)
                        .current_dir(&lib)
                        .env("GIT_CONFIG_NOSYSTEM", "1")
                        .env("HOME", tree.root.join("home"))
                        .output_bounded();
                    assert!(out.status.success(), "git {args:?}: {out:?}");
                };
                git(&["init", "-q"]);
                git(&["config", "core.hooksPath", hooks]);
                git(&["add", "-A"]);
                git(&["commit", "-qm", "lib"]);
                if owner.is_some() {
                    sandbox_fixture::give_to_nobody(&lib);
                }
                let marker = tree.root.join("home/ran");
                let lib_arg = lib.display().to_string();
                let dir = format!("{lib_arg}/{hooks}");
                let payload = format!(
                    "mkdir -p {dir} && printf '#!/bin/sh\\ntouch {}\\n' > {dir}/pre-commit \
                     && chmod +x {dir}/pre-commit && echo PLANTED",
                    marker.display()
                );
                let env = tree.run_as(
                    &[],
                    &["--sandbox", mode, "--write", &lib_arg],
                    &payload,
                    Duration::from_secs(120),
                );
                let mut cmd = std::process::Command::new("git");
                cmd.args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
                    .args(["commit", "--allow-empty", "-qm", "next"])
                    .current_dir(&lib)
                    .env_clear()
                    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("HOME", tree.root.join("home"));
                sandbox_fixture::as_owner(&mut cmd, owner);
                let out = common::run_bounded(&mut cmd, Duration::from_secs(60)).unwrap();
                let ran = marker.exists();
                judge_ran(
                    &case,
                    name,
                    mode == "danger-full-access",
                    ran,
                    "the user's commit ran the agent's hook",
                    &format!("{env}\n{out:?}"),
                );
            }
        }
    }
}

/// The user's repository config defines a filter driver that runs a script of the work
/// tree (`filter.strip.clean = sh tools/strip.sh`, selected by the project's
/// `.gitattributes`; the same for `diff.*.textconv`, `merge.*.driver`, an `alias.*` with
/// `!`, a relative `core.fsmonitor`): the config is out of the agent's reach, the script
/// is not. The agent rewrote `tools/strip.sh`, and the user's next `git add` ran it
/// outside the sandbox. Known open: coder does not know which files a command of the
/// user's config runs (a script may run others); protect them with `--protect`. Control:
/// unconfined, the user's `git add` runs the payload.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_work_tree_script_a_filter_driver_runs_is_the_agents_to_write() {
    common::require_root_and_user_namespaces();
    let name = "work-tree script of a filter driver";
    for owner in [None, Some(NOBODY)] {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::new(
                owner,
                &[
                    ("a.txt", "a\n"),
                    ("n.ipynb", "{}\n"),
                    (".gitattributes", "*.ipynb filter=strip\n"),
                    ("tools/strip.sh", "cat\n"),
                ],
                true,
            );
            tree.git(&["config", "filter.strip.clean", "sh tools/strip.sh"]);
            let marker = tree.root.join("home/ran");
            let payload = format!(
                "printf 'touch {}; cat\\n' > tools/strip.sh; echo '{{ }}' > n.ipynb; \
                 echo PLANTED",
                marker.display()
            );
            let env = tree.run_as(
                &[],
                &["--sandbox", mode],
                &payload,
                Duration::from_secs(120),
            );
            assert!(result(&env).contains("PLANTED"), "{case}: {env}");
            let out = tree.user_git(&["add", "-A"]);
            let ran = marker.exists();
            judge_ran(
                &case,
                name,
                mode == "danger-full-access",
                ran,
                "the user's git add ran the agent's script",
                &format!("{env}\n{out:?}"),
            );
        }
    }
}

/// The hooks directory is found by asking the user's git; the agent may write `.git/HEAD`
/// (commits work), and with garbage there git takes the directory for no repository. An
/// earlier run's agent broke `HEAD`; the next run's git could not say where the hooks
/// are, so nothing was held, and that run's agent put `HEAD` back and wrote
/// `scripts/hooks/pre-commit`, which the user's next `git commit` ran. Control: the same
/// two runs unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_broken_head_does_not_hide_the_hooks_directory_from_the_next_run() {
    common::require_root_and_user_namespaces();
    let name = "hooks directory hidden by a broken HEAD";
    for owner in [None, Some(NOBODY)] {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::new(
                owner,
                &[
                    ("a.txt", "a\n"),
                    ("scripts/hooks/pre-commit", "#!/bin/sh\nexit 0\n"),
                ],
                true,
            );
            std::fs::set_permissions(
                tree.ws().join("scripts/hooks/pre-commit"),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
            tree.git(&["config", "core.hooksPath", "scripts/hooks"]);
            let break_head = "cp .git/HEAD head.saved && echo garbage > .git/HEAD && echo BROKEN";
            let env = tree.run_as(
                &[],
                &["--sandbox", mode],
                break_head,
                Duration::from_secs(120),
            );
            assert!(result(&env).contains("BROKEN"), "{case}: {env}");
            let marker = tree.root.join("home/ran");
            let payload = format!(
                "cp head.saved .git/HEAD && printf '#!/bin/sh\\ntouch {}\\n' > \
                 scripts/hooks/pre-commit; echo PLANTED",
                marker.display()
            );
            let env = tree.run_as(
                &[],
                &["--sandbox", mode],
                &payload,
                Duration::from_secs(120),
            );
            assert!(result(&env).contains("PLANTED"), "{case}: {env}");
            let out = tree.user_git(&["commit", "--allow-empty", "-qm", "next"]);
            let ran = marker.exists();
            judge_ran(
                &case,
                name,
                mode == "danger-full-access",
                ran,
                "the user's commit ran the agent's hook",
                &format!("{env}\n{out:?}"),
            );
        }
    }
}

/// A protected file with a second name (a hard link) elsewhere in the workspace: the
/// protected name is a read-only mount, the other name is the agent's to write, and a
/// write there is a write of the protected file. Here an earlier run's agent set up the
/// project's hooks (`scripts/hooks/pre-commit`, with a second link `scripts/keep`) and
/// the user adopted them (`git config core.hooksPath scripts/hooks`); the next run's
/// agent appended its payload through `scripts/keep`, and the user's next commit ran it.
/// Fixed by the lead's pass over files held read-only (`held_with_other_names`, merged
/// after this review found it): the other names of a held file, or of a file in a held
/// directory, are held too. Control: the same two runs unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_second_name_of_a_protected_file_is_not_the_agents_to_write() {
    common::require_root_and_user_namespaces();
    let name = "second name of a protected file";
    for owner in [None, Some(NOBODY)] {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {mode}", who(owner));
            let tree = Tree::new(owner, &[("a.txt", "a\n")], true);
            let setup = "mkdir -p scripts/hooks && printf '#!/bin/sh\\nexit 0\\n' > \
                         scripts/hooks/pre-commit && chmod +x scripts/hooks/pre-commit && \
                         ln scripts/hooks/pre-commit scripts/keep && echo SET";
            let env = tree.run_as(&[], &["--sandbox", mode], setup, Duration::from_secs(120));
            assert!(result(&env).contains("SET"), "{case}: {env}");
            tree.git(&["config", "core.hooksPath", "scripts/hooks"]);
            let marker = tree.root.join("home/ran");
            let payload = format!(
                "printf '#!/bin/sh\\ntouch {}\\n' > scripts/keep; echo PLANTED",
                marker.display()
            );
            let env = tree.run_as(
                &[],
                &["--sandbox", mode],
                &payload,
                Duration::from_secs(120),
            );
            assert!(result(&env).contains("PLANTED"), "{case}: {env}");
            let out = tree.user_git(&["commit", "--allow-empty", "-qm", "next"]);
            let ran = marker.exists();
            judge_ran(
                &case,
                name,
                mode == "danger-full-access",
                ran,
                "the user's commit ran the agent's hook",
                &format!("{env}\n{out:?}"),
            );
        }
    }
}
