//! `--worktree` end to end (DESIGN §10): a run works in a private checkout on branch
//! `coder/<run-id>`, its changes are committed there and the branch kept, the checkout is
//! removed on every exit path, parallel runs never see each other, and the agent — a fake
//! child running shell payloads — can write nothing of the user's repository (checked as
//! root and as uid 65534, with `danger-full-access` as the control that the same payload
//! does succeed without confinement).

mod common;

use common::Bounded;
use common::sandbox_fixture::{NOBODY, coder_as, payload_claude};

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

struct Fx {
    _dir: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
    state: PathBuf,
    owner: Option<u32>,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output_bounded();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

impl Fx {
    fn new(owner: Option<u32>) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let repo = root.join("repo");
        fs::create_dir_all(&repo).unwrap();
        fs::write(repo.join("a.txt"), "a\n").unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "a.txt"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        git(&repo, &["branch", "other"]);
        fs::create_dir_all(root.join("home")).unwrap();
        Fx {
            _dir: dir,
            state: root.join("state"),
            root,
            repo,
            owner,
        }
    }

    fn own(&self) {
        if let Some(uid) = self.owner {
            chown_tree(&self.root, uid);
        }
    }

    fn bin(&self, name: &str, payload: &str) -> PathBuf {
        let bin = self.root.join(name);
        fs::write(&bin, payload_claude(payload)).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        if let Some(uid) = self.owner {
            chown_tree(&bin, uid);
        }
        bin
    }

    fn coder(&self, bin: &Path, extra: &[&str], task: &str) -> Command {
        self.coder_at(&self.repo, bin, extra, task)
    }

    fn coder_at(&self, cd: &Path, bin: &Path, extra: &[&str], task: &str) -> Command {
        coder_as(&self.root, self.owner, cd, bin, extra, task)
    }

    fn run(&self, payload: &str, extra: &[&str], task: &str) -> (Value, Output) {
        let bin = self.bin("fake-claude", payload);
        let out = self.coder(&bin, extra, task).output_bounded();
        let envelope: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"));
        (envelope, out)
    }

    /// No checkout is left, and the repository has no registered worktree to prune.
    fn assert_clean(&self) {
        let dir = self.state.join("worktrees");
        let left: Vec<_> = fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "left in {}: {left:?}", dir.display());
        let list = git(&self.repo, &["worktree", "list", "--porcelain"]);
        assert_eq!(list.matches("worktree ").count(), 1, "{list}");
        assert_eq!(
            git(&self.repo, &["worktree", "prune", "--dry-run", "-v"]),
            ""
        );
    }
}

fn branch_of(envelope: &Value) -> String {
    envelope["worktree"]["branch"]
        .as_str()
        .unwrap_or_else(|| panic!("no worktree in {envelope}"))
        .to_owned()
}

#[test]
fn a_run_commits_on_its_branch_and_leaves_the_checkout_alone() {
    let fx = Fx::new(None);
    fs::write(fx.repo.join("a.txt"), "uncommitted\n").unwrap();
    let (env, out) = fx.run(
        "echo hello > new.txt; cat a.txt",
        &["--worktree"],
        "Add new.txt\nand more detail",
    );
    check_schema(&env);
    assert_eq!(env["success"], true, "{out:?}");
    // The checkout started from HEAD: the uncommitted edit is not in it, and the note says so.
    assert!(
        env["result"].as_str().unwrap().contains("done: a "),
        "{env}"
    );
    assert!(
        env["worktree"]["note"]
            .as_str()
            .unwrap()
            .contains("1 uncommitted path"),
        "{env}"
    );
    let branch = branch_of(&env);
    assert!(branch.starts_with("coder/"));
    let commit = env["worktree"]["commit"].as_str().unwrap();
    assert_eq!(git(&fx.repo, &["rev-parse", &branch]).trim(), commit);
    assert_eq!(
        git(&fx.repo, &["log", "-1", "--format=%s", &branch]).trim(),
        "Add new.txt"
    );
    assert_eq!(
        git(&fx.repo, &["show", &format!("{branch}:new.txt")]),
        "hello\n"
    );
    let base = env["worktree"]["base"].as_str().unwrap();
    assert_eq!(git(&fx.repo, &["rev-parse", "main"]).trim(), base);
    // The user's checkout is untouched.
    assert_eq!(
        fs::read_to_string(fx.repo.join("a.txt")).unwrap(),
        "uncommitted\n"
    );
    assert!(!fx.repo.join("new.txt").exists());
    // coder's own identity: the repository has none (no global config either).
    assert_eq!(
        git(&fx.repo, &["log", "-1", "--format=%an <%ae>", &branch]).trim(),
        "coder <coder@localhost>"
    );
    fx.assert_clean();

    // Nothing changed: the branch is kept at the base, commit null.
    let (env, _) = fx.run("true", &["--worktree"], "look only");
    assert_eq!(env["worktree"]["commit"], Value::Null, "{env}");
    assert_eq!(git(&fx.repo, &["rev-parse", &branch_of(&env)]).trim(), base);
    fx.assert_clean();
}

/// `--verify` runs in the worktree, and a `--cd` below the repository's top level works
/// in the same place inside the checkout.
#[test]
fn verify_and_a_subdirectory_work_in_the_checkout() {
    let fx = Fx::new(None);
    fs::create_dir_all(fx.repo.join("sub")).unwrap();
    fs::write(fx.repo.join("sub/keep.txt"), "k\n").unwrap();
    git(&fx.repo, &["add", "sub"]);
    git(&fx.repo, &["commit", "-q", "-m", "sub"]);
    let bin = fx.bin("fake-claude", "echo made > made.txt; pwd");
    let out = fx
        .coder_at(
            &fx.repo.join("sub"),
            &bin,
            &[
                "--worktree",
                "--verify",
                "test -f made.txt && test -f keep.txt",
            ],
            "make it",
        )
        .output_bounded();
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["success"], true, "{env}");
    assert_eq!(env["verification"]["verdict"], "fixed", "{env}");
    assert!(
        env["result"].as_str().unwrap().contains("/worktrees/"),
        "{env}"
    );
    let branch = branch_of(&env);
    assert_eq!(
        git(&fx.repo, &["show", &format!("{branch}:sub/made.txt")]),
        "made\n"
    );
    assert!(!fx.repo.join("sub/made.txt").exists());
    fx.assert_clean();
}

#[test]
fn worktree_base_and_bad_input() {
    let fx = Fx::new(None);
    git(&fx.repo, &["checkout", "-q", "other"]);
    fs::write(fx.repo.join("b.txt"), "b\n").unwrap();
    git(&fx.repo, &["add", "b.txt"]);
    git(&fx.repo, &["commit", "-q", "-m", "b"]);
    git(&fx.repo, &["checkout", "-q", "main"]);
    let (env, _) = fx.run("ls", &["--worktree", "--worktree-base", "other"], "t");
    assert!(env["result"].as_str().unwrap().contains("b.txt"), "{env}");
    assert_eq!(env["worktree"]["base_ref"], "other");
    // git's search of commit messages (`:/TEXT`) names the same commit; it was refused
    // as naming none (its `^{commit}` was read as part of the text).
    let (env, _) = fx.run("ls", &["--worktree", "--worktree-base", ":/b"], "t");
    assert!(env["result"].as_str().unwrap().contains("b.txt"), "{env}");
    assert_eq!(
        env["worktree"]["base"],
        git(&fx.repo, &["rev-parse", "other"]).trim()
    );

    let (env, out) = fx.run("true", &["--worktree", "--worktree-base", "nope"], "t");
    assert_eq!(env["error_kind"], "config_error", "{out:?}");
    assert!(env["error"].as_str().unwrap().contains("nope"));
    assert_eq!(out.status.code(), Some(78));

    let plain = fx.root.join("plain");
    fs::create_dir_all(&plain).unwrap();
    let bin = fx.bin("fake-claude", "true");
    let out = fx
        .coder_at(&plain, &bin, &["--worktree"], "t")
        .env("GIT_CEILING_DIRECTORIES", &fx.root)
        .output_bounded();
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["error_kind"], "config_error", "{env}");
    assert!(
        env["error"]
            .as_str()
            .unwrap()
            .contains("not inside a git work tree")
    );

    let unborn = Fx::new(None);
    fs::remove_dir_all(unborn.repo.join(".git")).unwrap();
    git(&unborn.repo, &["init", "-q"]);
    let (env, _) = unborn.run("true", &["--worktree"], "t");
    assert_eq!(env["error_kind"], "config_error", "{env}");
    assert!(
        env["error"].as_str().unwrap().contains("no commit yet"),
        "{env}"
    );
    fx.assert_clean();
}

/// A `--worktree` run that ends before its agent starts (here a cassette that does not
/// exist; a missing key is the same) leaves no branch: each such try left one more
/// `coder/…` branch at the base, named in an envelope whose run never began (newuser32).
#[test]
fn a_run_that_never_starts_leaves_no_branch() {
    let fx = Fx::new(None);
    let branches_before = git(&fx.repo, &["branch", "--list"]);
    let missing = format!("replay:{}", fx.root.join("missing.json").display());
    let (env, out) = fx.run("true", &["--worktree", "--backend", &missing], "t");
    assert_eq!(env["error_kind"], "config_error", "{out:?}");
    assert!(env.get("worktree").is_none(), "{env}");
    assert_eq!(git(&fx.repo, &["branch", "--list"]), branches_before);
    fx.assert_clean();
    // A run that started and changed nothing keeps its branch at the base, as before
    // (`a_run_commits_on_its_branch_and_leaves_the_checkout_alone`).
}

/// A session resumes only where it was made, and --worktree always makes a new checkout:
/// the pair is refused before any branch or checkout is made.
#[test]
fn worktree_with_a_session_to_resume_is_refused_up_front() {
    let fx = Fx::new(None);
    let (first, out) = fx.run("true", &[], "t");
    assert_eq!(first["success"], true, "{out:?}");
    let session = first["SESSION_ID"].as_str().expect("SESSION_ID").to_owned();
    let branches_before = git(&fx.repo, &["branch", "--list"]);

    let (env, out) = fx.run("true", &["--worktree", "--session-id", &session], "t");
    assert_eq!(env["error_kind"], "config_error", "{out:?}");
    assert_eq!(out.status.code(), Some(78));
    let error = env["error"].as_str().unwrap();
    assert!(
        error.contains("--worktree cannot resume a session") && error.contains("drop --worktree"),
        "{error}"
    );
    assert_eq!(git(&fx.repo, &["branch", "--list"]), branches_before);
    fx.assert_clean();
}

/// A failing run, and one stopped by --max-duration: the checkout is removed, the branch
/// kept with what the agent did.
#[test]
fn failure_and_timeout_still_commit_and_clean_up() {
    let fx = Fx::new(None);
    let bin = fx.root.join("dying");
    fs::write(
        &bin,
        "#!/bin/bash\ncat >/dev/null\necho partial > p.txt\nexit 7\n",
    )
    .unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let out = fx.coder(&bin, &["--worktree"], "dies").output_bounded();
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["success"], false, "{env}");
    let branch = branch_of(&env);
    assert_eq!(
        git(&fx.repo, &["show", &format!("{branch}:p.txt")]),
        "partial\n"
    );
    fx.assert_clean();

    let slow = fx.root.join("slow");
    fs::write(
        &slow,
        "#!/bin/bash\ncat >/dev/null\necho started > s.txt\nexec sleep 60\n",
    )
    .unwrap();
    fs::set_permissions(&slow, fs::Permissions::from_mode(0o755)).unwrap();
    let out = fx
        .coder(&slow, &["--worktree", "--max-duration", "2"], "slow")
        .output_bounded();
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["error_kind"], "timeout", "{env}");
    assert_eq!(
        git(&fx.repo, &["show", &format!("{}:s.txt", branch_of(&env))]),
        "started\n"
    );
    fx.assert_clean();
}

/// The branch's commit starts from the base's tree: what the checkout does not show as a
/// file stays as the base has it, a submodule (an empty directory in the checkout) and a
/// tracked file that `.gitignore` matches. The commit was made from an empty index, and
/// the branch deleted both while `changes` listed neither (newuser32).
#[test]
fn a_submodule_and_a_tracked_ignored_file_stay_on_the_branch() {
    let fx = Fx::new(None);
    let head = git(&fx.repo, &["rev-parse", "HEAD"]);
    let gitlink = format!("160000,{},lib", head.trim());
    git(
        &fx.repo,
        &["update-index", "--add", "--cacheinfo", &gitlink],
    );
    fs::write(fx.repo.join(".gitignore"), "dist/\n").unwrap();
    fs::create_dir_all(fx.repo.join("dist")).unwrap();
    fs::write(fx.repo.join("dist/app.js"), "built\n").unwrap();
    git(&fx.repo, &["add", "-f", ".gitignore", "dist/app.js"]);
    git(&fx.repo, &["commit", "-q", "-m", "submodule and build"]);
    let (env, out) = fx.run("echo b > b.txt", &["--worktree"], "add b");
    assert_eq!(env["success"], true, "{out:?}");
    let branch = branch_of(&env);
    assert_eq!(
        git(&fx.repo, &["diff", "--name-status", "main", &branch]),
        "A\tb.txt\n",
        "{env}"
    );
    fx.assert_clean();
}

/// A repository the agent makes in its checkout (`git init sub`, a clone, a scaffolding
/// tool's `git init`) is committed as files of the branch. One with no commit made the
/// whole commit fail (`commit: null`, the run's work removed with the checkout, and
/// `success: true`); one with a commit became a gitlink to a commit the repository does
/// not have, its files lost (newuser32).
#[test]
fn repositories_the_agent_makes_are_committed_as_files() {
    let fx = Fx::new(None);
    let (env, out) = fx.run(
        "echo w > work.txt; git init -q sub && echo c > sub/c.txt && git init -q sub/inner \
         && echo e > sub/inner/e.txt && git init -q cl && echo d > cl/d.txt \
         && git -C cl add d.txt && git -C cl -c user.name=a -c user.email=a@b commit -qm x",
        &["--worktree"],
        "scaffold",
    );
    assert_eq!(env["success"], true, "{out:?}");
    assert!(env["worktree"]["commit"].is_string(), "{env}");
    let branch = branch_of(&env);
    for (path, text) in [
        ("work.txt", "w\n"),
        ("sub/c.txt", "c\n"),
        ("sub/inner/e.txt", "e\n"),
        ("cl/d.txt", "d\n"),
    ] {
        assert_eq!(
            git(&fx.repo, &["show", &format!("{branch}:{path}")]),
            text,
            "{path}: {env}"
        );
    }
    let tree = git(&fx.repo, &["ls-tree", "-r", &branch]);
    assert!(!tree.contains("160000"), "a gitlink on the branch: {tree}");
    assert!(!tree.contains(".git/"), "{tree}");
    fx.assert_clean();
}

/// When the run's changes cannot be committed (here: more repositories made in the
/// checkout than the finish stages), the checkout is kept with them and the envelope
/// says where; it was removed, and the run's work with it, behind `success: true`.
#[test]
fn a_checkout_whose_commit_fails_is_kept() {
    let fx = Fx::new(None);
    let (env, out) = fx.run(
        "echo w > work.txt; for i in $(seq 257); do git init -q r$i; done",
        &["--worktree"],
        "too many",
    );
    assert_eq!(env["worktree"]["commit"], Value::Null, "{out:?}");
    let kept = PathBuf::from(
        env["worktree"]["kept"]
            .as_str()
            .unwrap_or_else(|| panic!("{env}")),
    );
    assert_eq!(fs::read_to_string(kept.join("work.txt")).unwrap(), "w\n");
    assert!(
        env["worktree"]["note"]
            .as_str()
            .unwrap()
            .contains("is kept at"),
        "{env}"
    );
    let warned = env["warnings"].as_array().unwrap().iter().any(|w| {
        w.as_str()
            .is_some_and(|w| w.contains("not on branch") && w.contains(kept.to_str().unwrap()))
    });
    assert!(warned, "{env}");
    // A later --worktree run does not prune it (it is no dead run's leftover).
    let (later, _) = fx.run("true", &["--worktree"], "later");
    assert_eq!(later["success"], true, "{later}");
    assert!(kept.join("work.txt").exists());
    check_schema(&env);
}

/// What the end-of-run guard moved aside in the checkout is reported at the checkout's
/// paths, and the checkout is removed: each entry says where it is now, `in_commit`
/// (`COMMIT:PATH` on the run's branch, under its quarantine name) or `removed` (it was in
/// a nested repository's git dir), and a warning says how to look. Before, the report
/// named only paths in the removed checkout (newuser32).
#[test]
fn quarantined_paths_of_a_worktree_run_say_where_they_are_now() {
    let fx = Fx::new(None);
    let (env, out) = fx.run(
        "mkdir -p pkg && echo 'echo planted' > pkg/.envrc; git init -q sub \
         && printf '#!/bin/sh\\necho hi\\n' > sub/.git/hooks/pre-commit \
         && chmod +x sub/.git/hooks/pre-commit && echo c > sub/c.txt",
        &["--worktree"],
        "plant",
    );
    check_schema(&env);
    assert_eq!(env["success"], true, "{out:?}");
    let commit = env["worktree"]["commit"]
        .as_str()
        .unwrap_or_else(|| panic!("{env}"));
    let entries = env["sandbox"]["quarantined"]
        .as_array()
        .unwrap_or_else(|| panic!("{env}"));
    let envrc = entries
        .iter()
        .find(|q| q["kind"] == "tool_config")
        .unwrap_or_else(|| panic!("{env}"));
    let at = format!("{commit}:pkg/.envrc.coder-quarantine-1");
    assert_eq!(envrc["in_commit"], at.as_str(), "{env}");
    assert_eq!(git(&fx.repo, &["show", &at]), "echo planted\n");
    let hook = entries
        .iter()
        .find(|q| q["kind"] == "git")
        .unwrap_or_else(|| panic!("{env}"));
    assert_eq!(hook["removed"], true, "{env}");
    assert!(hook.get("in_commit").is_none(), "{env}");
    let warned = env["warnings"].as_array().unwrap().iter().any(|w| {
        w.as_str()
            .is_some_and(|w| w.contains("which is removed") && w.contains(&format!("show {at}")))
    });
    assert!(warned, "{env}");
    // `coder runs show` says it too.
    let run_id = branch_of(&env).trim_start_matches("coder/").to_owned();
    let mut show = Command::new(common::CODER);
    common::sandbox_fixture::user_env(&mut show, &fx.root, PATH).args(["runs", "show", &run_id]);
    let shown = show.output_bounded();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains(&format!("  now in the branch's commit: {at}"))
            && text.contains("  removed with the --worktree checkout"),
        "{shown:?}"
    );
    fx.assert_clean();
}

/// SIGTERM to coder mid-run: the envelope says `cancelled`, and the checkout is still
/// committed and removed.
#[test]
fn a_cancelled_run_commits_and_cleans_up() {
    let fx = Fx::new(None);
    let slow = fx.root.join("slow");
    fs::write(
        &slow,
        "#!/bin/bash\ncat >/dev/null\necho started > s.txt\nexec sleep 60\n",
    )
    .unwrap();
    fs::set_permissions(&slow, fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = fx.coder(&slow, &["--worktree"], "slow");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    // `timeout` forwards the signal to coder.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let started = loop {
        let found = fs::read_dir(fx.state.join("worktrees")).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path().join("s.txt"))
                .find(|p| p.exists())
        });
        if let Some(path) = found {
            break path;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(started.exists());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["error_kind"], "cancelled", "{env}");
    assert_eq!(
        git(&fx.repo, &["show", &format!("{}:s.txt", branch_of(&env))]),
        "started\n"
    );
    fx.assert_clean();
}

/// A signal while coder is still making the checkout (a big repository takes seconds):
/// the run ends `cancelled` with its envelope and the checkout is removed, instead of coder
/// dying with no envelope and the checkout left behind. Sent to coder alone (the checkout
/// goes on, the run stops at its start) and to the whole group, as a terminal's Ctrl-C is
/// (git dies with it).
#[test]
fn a_signal_while_the_checkout_is_made_is_cancelled_and_cleans_up() {
    for whole_group in [false, true] {
        let fx = Fx::new(None);
        let ready = fx.root.join("checkout-started");
        let go = fx.root.join("checkout-go");
        let wrapper_dir = fx.root.join("slow-git");
        fs::create_dir_all(&wrapper_dir).unwrap();
        let wrapper = wrapper_dir.join("git");
        fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\ncase \" $* \" in *\" reset \"*\"--hard\"*)\n  touch '{}'\n  \
                 while [ ! -e '{}' ]; do sleep 0.05; done;;\nesac\nexec /usr/bin/git \"$@\"\n",
                ready.display(),
                go.display()
            ),
        )
        .unwrap();
        fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
        let slow = fx.root.join("slow");
        fs::write(&slow, "#!/bin/bash\ncat >/dev/null\nexec sleep 60\n").unwrap();
        fs::set_permissions(&slow, fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = fx.coder(&slow, &["--worktree"], "slow");
        cmd.env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", wrapper_dir.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !ready.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the checkout never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if whole_group {
            // `timeout` (coder's parent here) sends the signal to its whole group.
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
        } else {
            let children = format!("/proc/{0}/task/{0}/children", child.id());
            let coder: i32 = fs::read_to_string(&children)
                .unwrap()
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .expect("coder under timeout");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(coder),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
            // Pending at once: without its handler, coder would die of it now, while
            // the checkout still waits (the wrapper holds it).
        }
        fs::write(&go, "").unwrap();
        let out = child.wait_with_output().unwrap();
        let env: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no envelope ({e}, whole group: {whole_group}): {out:?}"));
        assert_eq!(
            env["error_kind"], "cancelled",
            "whole group: {whole_group}: {env}"
        );
        fx.assert_clean();
    }
}

/// Three runs at once on one repository, each writing the same file name: none sees
/// another's file, each branch holds only its own.
#[test]
fn parallel_runs_never_see_each_other() {
    let fx = Fx::new(None);
    let mut children = Vec::new();
    for i in 0..3 {
        let bin = fx.bin(
            &format!("fake-{i}"),
            &format!(
                "echo run{i} > shared.txt; echo run{i} > only{i}.txt; sleep 1; ls; cat shared.txt"
            ),
        );
        let mut cmd = fx.coder(&bin, &["--worktree"], &format!("run {i}"));
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        children.push(cmd.spawn().unwrap());
    }
    let mut branches = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let env: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(env["success"], true, "{env}");
        let result = env["result"].as_str().unwrap();
        for j in 0..3 {
            assert_eq!(
                result.contains(&format!("only{j}.txt")),
                i == j,
                "{i}: {result}"
            );
        }
        assert!(result.ends_with(&format!("run{i} ")), "{result}");
        branches.push(branch_of(&env));
    }
    for (i, branch) in branches.iter().enumerate() {
        assert_eq!(
            git(&fx.repo, &["show", &format!("{branch}:shared.txt")]),
            format!("run{i}\n")
        );
        let files = git(&fx.repo, &["ls-tree", "--name-only", branch]);
        assert_eq!(files, format!("a.txt\nonly{i}.txt\nshared.txt\n"));
    }
    fx.assert_clean();
}

/// The payload every attack runs: from inside its checkout, write the user's checkout,
/// another branch's ref, the repository's hooks and config and objects, and plant a hook
/// and a config in the checkout's own git dir that coder's commit would run.
fn attack_payload(fx: &Fx, victim: &str) -> String {
    let main = fx.repo.display();
    let (secret, secret_commit) = fx.secret();
    let secret = secret.display();
    format!(
        "ln {main}/.git/objects/{victim} hardlink && chmod u+w hardlink; echo corrupt >> hardlink; \
         b=$(git symbolic-ref HEAD); \
         echo {secret}/.git/objects >> .git/objects/info/alternates; \
         printf '{secret_commit} %s\\n' $b > .git/packed-refs; \
         echo pwned > {main}/a.txt; \
         echo 0000000000000000000000000000000000000000 > {main}/.git/refs/heads/other; \
         git --git-dir={main}/.git update-ref refs/heads/other HEAD; \
         mkdir -p {main}/.git/hooks; printf '#!/bin/sh\\ntouch {root}/hook-ran\\n' > {main}/.git/hooks/post-checkout; \
         chmod +x {main}/.git/hooks/post-checkout; \
         printf '[core]\\n\\thooksPath = /tmp\\n' >> {main}/.git/config; \
         touch {main}/.git/objects/planted; \
         printf '#!/bin/sh\\ntouch {root}/private-hook-ran\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         printf '[core]\\n\\tfsmonitor = \"touch {root}/fsmonitor-ran\"\\n' >> .git/config; \
         rm -rf .git/refs/heads/coder; ln -s {main}/.git/refs/heads .git/refs/heads/coder; \
         echo work > work.txt",
        root = fx.root.display()
    )
}

impl Fx {
    /// Another repository on the machine that coder can read: its history must never be
    /// pulled into the user's repository, whatever the checkout's refs and alternates say.
    fn secret(&self) -> (PathBuf, String) {
        let dir = self.root.join("secret");
        if !dir.exists() {
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("s.txt"), "secret\n").unwrap();
            git(&dir, &["init", "-q"]);
            git(&dir, &["add", "s.txt"]);
            git(&dir, &["commit", "-q", "-m", "secret"]);
        }
        (
            dir.clone(),
            git(&dir, &["rev-parse", "HEAD"]).trim().to_owned(),
        )
    }

    /// A loose object of the repository no commit needs (so the control may corrupt it):
    /// its path under `objects/` and its content.
    fn victim(&self) -> (String, Vec<u8>) {
        let path = self.repo.join("victim.txt");
        if !path.exists() {
            fs::write(&path, "victim\n").unwrap();
        }
        let id = git(&self.repo, &["hash-object", "-w", "victim.txt"]);
        let rel = format!("{}/{}", &id[..2], id[2..].trim());
        let bytes = fs::read(self.repo.join(".git/objects").join(&rel)).unwrap();
        (rel, bytes)
    }

    fn has_object(&self, id: &str) -> bool {
        Command::new("git")
            .args(["-c", "safe.directory=*", "cat-file", "-e", id])
            .current_dir(&self.repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stderr(Stdio::null())
            .status_bounded()
            .success()
    }
}

struct Seen {
    /// Whether the victim object's bytes changed (through a hard link).
    victim_changed: bool,
    /// Branches of the repository other than main, other and coder/*.
    stray_refs: Vec<String>,
    a_txt: String,
    other: String,
    hook: bool,
    config_changed: bool,
    planted_object: bool,
    ran: Vec<&'static str>,
}

fn observe(fx: &Fx, config_before: &str, victim: &(String, Vec<u8>)) -> Seen {
    let ran = ["hook-ran", "private-hook-ran", "fsmonitor-ran"]
        .into_iter()
        .filter(|m| fx.root.join(m).exists())
        .collect();
    let refs = git(
        &fx.repo,
        &["for-each-ref", "--format=%(refname)", "refs/heads"],
    );
    let (rel, before) = victim;
    Seen {
        victim_changed: fs::read(fx.repo.join(".git/objects").join(rel)).unwrap() != *before,
        stray_refs: refs
            .lines()
            .filter(|r| !["refs/heads/main", "refs/heads/other"].contains(r))
            .filter(|r| !r.starts_with("refs/heads/coder/"))
            .map(str::to_owned)
            .collect(),
        a_txt: fs::read_to_string(fx.repo.join("a.txt")).unwrap(),
        other: fs::read_to_string(fx.repo.join(".git/refs/heads/other")).unwrap_or_default(),
        hook: fx.repo.join(".git/hooks/post-checkout").exists(),
        config_changed: fs::read_to_string(fx.repo.join(".git/config")).unwrap() != config_before,
        planted_object: fx.repo.join(".git/objects/planted").exists(),
        ran,
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_agent_cannot_touch_the_repository_through_its_worktree() {
    common::require_root_and_user_namespaces();
    for owner in [None, Some(NOBODY)] {
        let who = if owner.is_some() { "nobody" } else { "root" };
        let fx = Fx::new(owner);
        let other_before = fs::read_to_string(fx.repo.join(".git/refs/heads/other")).unwrap();
        let config_before = fs::read_to_string(fx.repo.join(".git/config")).unwrap();
        let victim = fx.victim();
        fx.own();
        let (env, out) = fx.run(&attack_payload(&fx, &victim.0), &["--worktree"], "attack");
        assert_eq!(env["success"], true, "[{who}] {out:?}");
        let seen = observe(&fx, &config_before, &victim);
        assert_eq!(seen.a_txt, "a\n", "[{who}] main checkout written");
        assert_eq!(seen.other, other_before, "[{who}] other branch moved");
        assert!(!seen.hook, "[{who}] hook planted");
        assert!(!seen.config_changed, "[{who}] config changed");
        assert!(!seen.planted_object, "[{who}] object store written");
        assert!(
            !seen.victim_changed,
            "[{who}] an object rewritten through a hard link"
        );
        assert!(seen.ran.is_empty(), "[{who}] ran: {:?}", seen.ran);
        assert!(seen.stray_refs.is_empty(), "[{who}] {:?}", seen.stray_refs);
        assert!(
            !fx.has_object(&fx.secret().1),
            "[{who}] another repository's history pulled in"
        );
        // The agent's legitimate work is committed.
        let branch = branch_of(&env);
        assert_eq!(
            git(&fx.repo, &["show", &format!("{branch}:work.txt")]),
            "work\n"
        );
        fx.assert_clean();

        // Control: the same payload without confinement reaches every target — and still
        // coder's own commit runs none of what was planted in the checkout's git dir.
        let fx = Fx::new(owner);
        let config_before = fs::read_to_string(fx.repo.join(".git/config")).unwrap();
        let victim = fx.victim();
        fx.own();
        let (env, out) = fx.run(
            &attack_payload(&fx, &victim.0),
            &["--worktree", "--sandbox", "danger-full-access"],
            "attack",
        );
        assert_eq!(env["success"], true, "[{who}] control {out:?}");
        let seen = observe(&fx, &config_before, &victim);
        assert_eq!(seen.a_txt, "pwned\n", "[{who}] control");
        assert!(
            seen.other.len() > 10 && seen.hook && seen.config_changed,
            "[{who}] control"
        );
        assert!(seen.planted_object, "[{who}] control");
        assert!(seen.victim_changed, "[{who}] control: hard link");
        assert!(
            !seen.ran.contains(&"private-hook-ran") && !seen.ran.contains(&"fsmonitor-ran"),
            "[{who}] coder's commit ran a planted program: {:?}",
            seen.ran
        );
        // coder wrote nothing through the symlinks the agent put in its git dir.
        assert!(
            seen.stray_refs.is_empty(),
            "[{who}] control {:?}",
            seen.stray_refs
        );
        assert_eq!(
            git(
                &fx.repo,
                &["show", &format!("{}:work.txt", branch_of(&env))]
            ),
            "work\n"
        );
        fx.assert_clean();
    }
}

/// The envelope conforms to the published schema (schema/envelope.schema.json).
fn check_schema(envelope: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/envelope.schema.json");
    let schema: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(envelope)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?} in {envelope}");
}
