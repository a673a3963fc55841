//! The workspace side of the sandbox, attacked through the binary: git metadata and tool
//! configs that later run outside the sandbox, grants derived from workspace content, a
//! workspace swapped during setup, planted names and depths. Every attack runs as root and
//! as `nobody` (through a user namespace), and each has a control: the same script under
//! `--mode danger-full-access` does what it aimed at, so the checks can fail.

mod common;

use common::Bounded;

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::sandbox_fixture::{
    PATH, as_owner, bash_sandbox, chown_tree, describe, owners, temp_root, write,
};

struct Fx {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    owner: Option<u32>,
}

fn git_in(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output_bounded()
}

fn git_ok(dir: &Path, args: &[&str]) {
    let out = git_in(dir, args);
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

impl Fx {
    /// A root with `ws` (a git repository with one commit unless `git` is false) and `home`.
    fn new(owner: Option<u32>, git: bool) -> Fx {
        let (dir, root) = temp_root(".tmp");
        let ws = root.join("ws");
        let home = root.join("home");
        write(&ws.join("README.md"), "# demo\n");
        write(&home.join(".bashrc"), "# rc\n");
        if git {
            git_ok(&ws, &["init", "-q"]);
            git_ok(&ws, &["add", "README.md"]);
            git_ok(&ws, &["commit", "-q", "-m", "init"]);
        }
        Fx {
            _dir: dir,
            root,
            ws,
            home,
            owner,
        }
    }

    /// Hand the fixture to its owner (after the test has planted its files).
    fn own(&self) {
        if let Some(uid) = self.owner {
            chown_tree(&self.root, uid);
        }
    }

    fn sandbox(&self, mode: &str, extra: &[&str], script: &str) -> Output {
        let args = [&["--mode", mode][..], extra].concat();
        bash_sandbox(self.owner, &self.ws, &self.home, &args, script).output_bounded()
    }

    fn confined(&self, script: &str) -> Output {
        self.sandbox("workspace-write", &[], script)
    }

    fn unconfined(&self, script: &str) -> Output {
        self.sandbox("danger-full-access", &[], script)
    }

    /// `git status` on the host, as the owner would run it after the agent is gone.
    fn host_git_status(&self) -> Output {
        self.host_git(&["status", "--short"])
    }

    /// `git ARGS` on the host, as the owner.
    fn host_git(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null());
        as_owner(&mut cmd, self.owner).output_bounded()
    }
}

fn label(owner: Option<u32>) -> &'static str {
    if owner.is_some() || !nix::unistd::geteuid().is_root() {
        "unprivileged"
    } else {
        "root"
    }
}

// ---------------------------------------------------------------------------------------
// Class 1: nothing read from the workspace widens a grant.

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_file_pointing_outside_grants_nothing() {
    for owner in owners() {
        for (name, plant) in [
            ("gitdir file", "gitdir: ../home\n"),
            ("gitdir file, absolute", "ABS"),
        ] {
            let fx = Fx::new(owner, false);
            let target = fx.home.display().to_string();
            let text = if plant == "ABS" {
                format!("gitdir: {target}\n")
            } else {
                plant.to_string()
            };
            write(&fx.ws.join(".git"), &text);
            fx.own();
            let attack = format!("echo pwned > {target}/pwned; echo x >> {target}/.bashrc");
            let out = fx.confined(&attack);
            let who = label(owner);
            assert!(!out.status.success(), "[{who}] {name}: {}", describe(&out));
            assert!(!fx.home.join("pwned").exists(), "[{who}] {name}");
            assert!(
                !fx.home.join("hooks").exists(),
                "[{who}] {name}: hooks/ made outside"
            );
            assert_eq!(
                fs::read_to_string(fx.home.join(".bashrc")).unwrap(),
                "# rc\n"
            );
            // A second run still cannot (nothing was remembered from the first).
            let out = fx.confined(&attack);
            assert!(
                !out.status.success(),
                "[{who}] {name} 2nd: {}",
                describe(&out)
            );
            assert!(!fx.home.join("pwned").exists());
            let control = fx.unconfined(&attack);
            assert!(control.status.success(), "{}", describe(&control));
            assert!(fx.home.join("pwned").exists(), "control");
        }
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_symlinked_git_or_commondir_outside_grants_nothing() {
    for owner in owners() {
        let who = label(owner);
        // .git is a symlink to a repository outside.
        let fx = Fx::new(owner, false);
        let outside = fx.root.join("outside-repo");
        fs::create_dir_all(&outside).unwrap();
        git_ok(&outside, &["init", "-q"]);
        std::os::unix::fs::symlink(outside.join(".git"), fx.ws.join(".git")).unwrap();
        fx.own();
        let attack = format!("echo x > {}/.git/pwned", outside.display());
        let out = fx.confined(&attack);
        assert!(!out.status.success(), "[{who}] symlink: {}", describe(&out));
        assert!(!outside.join(".git/pwned").exists());
        assert!(fx.unconfined(&attack).status.success());
        assert!(outside.join(".git/pwned").exists(), "control");

        // A real .git whose commondir points at a git dir outside.
        let fx = Fx::new(owner, true);
        let common = fx.root.join("common");
        fs::create_dir_all(common.join("hooks")).unwrap();
        write(&common.join("config"), "[core]\n");
        write(&fx.ws.join(".git/commondir"), "../../common\n");
        fx.own();
        let attack = format!(
            "echo '#!/bin/sh' > {0}/hooks/pre-commit; echo x >> {0}/config",
            common.display()
        );
        let out = fx.confined(&attack);
        assert!(
            !out.status.success(),
            "[{who}] commondir: {}",
            describe(&out)
        );
        assert!(!common.join("hooks/pre-commit").exists());
        assert_eq!(
            fs::read_to_string(common.join("config")).unwrap(),
            "[core]\n"
        );
        assert!(fx.unconfined(&attack).status.success());
        assert!(common.join("hooks/pre-commit").exists(), "control");
    }
}

#[test]
fn git_metadata_outside_is_writable_with_an_explicit_write() {
    let fx = Fx::new(None, false);
    let other = fx.root.join("other-git");
    fs::create_dir_all(&other).unwrap();
    write(&fx.ws.join(".git"), "gitdir: ../other-git\n");
    let other = other.display().to_string();
    let out = fx.sandbox(
        "workspace-write",
        &["--write", &other],
        &format!("echo ok > {other}/granted"),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(fx.root.join("other-git/granted").exists());
}

// ---------------------------------------------------------------------------------------
// Class 2: nothing the agent writes runs later outside the sandbox.

/// A script that plants `core.fsmonitor` (which `git status` runs) writing `marker`.
fn fsmonitor(marker: &Path) -> String {
    format!("git config core.fsmonitor 'touch {} #'", marker.display())
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn replacing_or_creating_the_repository_plants_nothing_for_the_hosts_git() {
    for owner in owners() {
        let who = label(owner);
        for (name, git, script) in [
            (
                "rename .git and re-init",
                true,
                "mv .git .git-old && git init -q && ",
            ),
            (
                "delete .git and re-init",
                true,
                "rm -rf .git; git init -q && ",
            ),
            (
                "move .git into a subdir",
                true,
                "mkdir -p d && mv .git d/ && git init -q && ",
            ),
            (
                "init where there was no repository",
                false,
                "git init -q && ",
            ),
            (
                "commondir to an agent-made git dir",
                true,
                "mkdir -p evil && git init -q --bare evil && git -C evil config core.fsmonitor 'touch MARKER #' && echo ../evil > .git/commondir && true || ",
            ),
        ] {
            let fx = Fx::new(owner, git);
            let marker = fx.root.join("fsmonitor-ran");
            let plant = format!("{script}{}", fsmonitor(&marker))
                .replace("MARKER", &marker.display().to_string());
            fx.own();
            let out = fx.confined(&plant);
            assert!(!out.status.success(), "[{who}] {name}: {}", describe(&out));
            let _ = fx.host_git_status();
            assert!(
                !marker.exists(),
                "[{who}] {name}: the host's git ran planted code"
            );
            assert!(
                !fx.ws.join(".git").is_symlink(),
                "[{who}] {name}: placeholder left behind"
            );

            let control = fx.unconfined(&plant);
            assert!(
                control.status.success(),
                "[{who}] {name} control: {}",
                describe(&control)
            );
            let _ = fx.host_git_status();
            assert!(marker.exists(), "[{who}] {name}: control did not plant");
        }
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn hooks_config_and_pointers_are_read_only_in_every_git_dir() {
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner, true);
        // A nested repository and a submodule-style git dir under .git/modules.
        let nested = fx.ws.join("vendor/lib");
        fs::create_dir_all(&nested).unwrap();
        git_ok(&nested, &["init", "-q"]);
        let module = fx.ws.join(".git/modules/sub");
        fs::create_dir_all(&module).unwrap();
        git_ok(&module, &["init", "-q", "--bare"]);
        fs::remove_dir_all(module.join("hooks")).unwrap();
        fx.own();
        let hook = "printf '#!/bin/sh\\ntouch /tmp/pwned\\n'";
        let cases = [
            (
                "top-level hook",
                format!("{hook} > .git/hooks/pre-commit"),
                ".git/hooks/pre-commit",
            ),
            (
                "nested hook",
                format!("{hook} > vendor/lib/.git/hooks/pre-commit"),
                "vendor/lib/.git/hooks/pre-commit",
            ),
            (
                "module hook (hooks/ absent)",
                format!(
                    "mkdir -p .git/modules/sub/hooks; {hook} > .git/modules/sub/hooks/post-checkout"
                ),
                ".git/modules/sub/hooks/post-checkout",
            ),
            (
                "replace hooks/",
                "mv .git/hooks .git/h2 && mkdir .git/hooks && echo x > .git/hooks/pre-commit"
                    .to_string(),
                ".git/h2",
            ),
            (
                "nested config",
                "echo '[core] fsmonitor = x' >> vendor/lib/.git/config".to_string(),
                "vendor/lib/.git/config",
            ),
            (
                "module config",
                "echo '[core] fsmonitor = x' >> .git/modules/sub/config".to_string(),
                ".git/modules/sub/config",
            ),
            (
                "config.worktree",
                "echo '[core] fsmonitor = x' > .git/config.worktree".to_string(),
                ".git/config.worktree",
            ),
            (
                "commondir",
                "echo ../evil > .git/commondir".to_string(),
                ".git/commondir",
            ),
            (
                "info/attributes",
                "echo '* filter=x' > .git/info/attributes".to_string(),
                ".git/info/attributes",
            ),
            (
                "legacy remotes file (where `git push NAME` sends)",
                "mkdir -p .git/remotes; echo 'URL: /tmp/evil.git' > .git/remotes/up".to_string(),
                ".git/remotes/up",
            ),
            (
                "legacy branches file",
                "mkdir -p .git/branches; echo /tmp/evil.git > .git/branches/up".to_string(),
                ".git/branches/up",
            ),
            (
                "nested .git renamed",
                "mv vendor/lib/.git vendor/lib/.git-old".to_string(),
                "vendor/lib/.git-old",
            ),
        ];
        let before_config = fs::read(fx.ws.join("vendor/lib/.git/config")).unwrap();
        for (name, script, _) in &cases {
            let out = fx.confined(script);
            assert!(!out.status.success(), "[{who}] {name}: {}", describe(&out));
        }
        assert!(!fx.ws.join(".git/hooks/pre-commit").exists());
        assert!(!fx.ws.join("vendor/lib/.git/hooks/pre-commit").exists());
        assert!(
            !fx.ws.join(".git/modules/sub/hooks").exists(),
            "placeholder removed"
        );
        assert!(!fx.ws.join(".git/config.worktree").exists());
        assert!(!fx.ws.join(".git/commondir").exists());
        assert!(!fx.ws.join(".git/h2").exists());
        assert!(!fx.ws.join("vendor/lib/.git-old").exists());
        assert_eq!(
            fs::read(fx.ws.join("vendor/lib/.git/config")).unwrap(),
            before_config
        );
        // Control: unconfined, each one lands.
        for (name, script, landed) in &cases {
            let fx = Fx::new(owner, true);
            let nested = fx.ws.join("vendor/lib");
            fs::create_dir_all(&nested).unwrap();
            git_ok(&nested, &["init", "-q"]);
            let module = fx.ws.join(".git/modules/sub");
            fs::create_dir_all(&module).unwrap();
            git_ok(&module, &["init", "-q", "--bare"]);
            fs::remove_dir_all(module.join("hooks")).unwrap();
            fx.own();
            let out = fx.unconfined(script);
            assert!(
                out.status.success(),
                "[{who}] control {name}: {}",
                describe(&out)
            );
            assert!(
                fs::symlink_metadata(fx.ws.join(landed)).is_ok(),
                "[{who}] control {name}"
            );
        }
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn protected_tool_configs_cannot_be_created_changed_or_removed() {
    let absent = [
        ("create .envrc", "echo 'curl x | sh' > .envrc", ".envrc"),
        ("create .mcp.json", "echo '{}' > .mcp.json", ".mcp.json"),
        (
            "create .vscode/tasks.json",
            "mkdir -p .vscode && echo '{}' > .vscode/tasks.json",
            ".vscode/tasks.json",
        ),
        (
            "create .claude/settings.json",
            "mkdir -p .claude && echo '{}' > .claude/settings.json",
            ".claude/settings.json",
        ),
        (
            "create .husky/pre-commit",
            "mkdir -p .husky && echo x > .husky/pre-commit",
            ".husky/pre-commit",
        ),
        (
            "rename a file to .envrc",
            "echo x > e && mv e .envrc; r=$?; rm -f e; exit $r",
            ".envrc",
        ),
        (
            "symlink .mcp.json",
            "ln -s README.md .mcp.json",
            ".mcp.json",
        ),
    ];
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner, true);
        fx.own();
        for (name, script, path) in absent {
            let out = fx.confined(script);
            assert!(!out.status.success(), "[{who}] {name}: {}", describe(&out));
            assert!(
                fs::symlink_metadata(fx.ws.join(path)).is_err(),
                "[{who}] {name} left {path}"
            );
        }
        // No placeholder stays behind and nothing shows in git status.
        for name in [
            ".envrc",
            ".mcp.json",
            ".vscode",
            ".claude",
            ".idea",
            ".githooks",
            ".husky",
        ] {
            assert!(
                fs::symlink_metadata(fx.ws.join(name)).is_err(),
                "[{who}] {name} left behind"
            );
        }
        assert_eq!(String::from_utf8_lossy(&fx.host_git_status().stdout), "");
        for (name, script, path) in absent {
            let fx = Fx::new(owner, true);
            fx.own();
            let out = fx.unconfined(script);
            assert!(
                out.status.success(),
                "[{who}] control {name}: {}",
                describe(&out)
            );
            assert!(
                fs::symlink_metadata(fx.ws.join(path)).is_ok(),
                "[{who}] control {name}"
            );
        }

        // Present: readable, but not writable, removable or renamable.
        let fx = Fx::new(owner, true);
        for (path, text) in [
            (".envrc", "export A=1\n"),
            (".mcp.json", "{}\n"),
            (".vscode/tasks.json", "{}\n"),
            (".claude/settings.json", "{}\n"),
        ] {
            write(&fx.ws.join(path), text);
        }
        fx.own();
        let read = fx.confined("cat .envrc .mcp.json .vscode/tasks.json .claude/settings.json");
        assert!(read.status.success(), "[{who}] read: {}", describe(&read));
        for (name, script) in [
            ("append .envrc", "echo 'curl x | sh' >> .envrc"),
            (
                "replace .mcp.json",
                "echo '{\"mcpServers\":{}}' > m && mv m .mcp.json",
            ),
            ("remove .vscode/tasks.json", "rm .vscode/tasks.json"),
            ("rename .claude", "mv .claude .claude-old"),
            (
                "add .claude/settings.local.json",
                "echo '{}' > .claude/settings.local.json",
            ),
            ("add .vscode/launch.json", "echo '{}' > .vscode/launch.json"),
        ] {
            let out = fx.confined(script);
            assert!(!out.status.success(), "[{who}] {name}: {}", describe(&out));
        }
        assert_eq!(
            fs::read_to_string(fx.ws.join(".envrc")).unwrap(),
            "export A=1\n"
        );
        assert_eq!(fs::read_to_string(fx.ws.join(".mcp.json")).unwrap(), "{}\n");
        assert!(fx.ws.join(".vscode/tasks.json").exists());
        assert!(!fx.ws.join(".claude-old").exists());
        assert!(!fx.ws.join(".claude/settings.local.json").exists());
        let control = fx.unconfined("echo 'curl x | sh' >> .envrc && mv .claude .claude-old");
        assert!(control.status.success(), "{}", describe(&control));
    }
}

/// Protected names a workspace without them gets placeholders for (`.git` among them in a
/// workspace that is no repository).
const PLACEHOLDER_NAMES: [&str; 6] = [
    ".git",
    ".envrc",
    ".mcp.json",
    ".vscode",
    ".claude",
    ".husky",
];

impl Fx {
    /// Starts a confined `coder sandbox` running `script` in the background, once
    /// `started` (a file the script touches first) shows up in the workspace.
    fn confined_in_background(&self, script: &str, started: &str) -> std::process::Child {
        let child = bash_sandbox(
            self.owner,
            &self.ws,
            &self.home,
            &["--mode", "workspace-write"],
            &format!("touch {started}; {script}"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        common::wait_for_path(&self.ws.join(started), Duration::from_secs(30));
        child
    }
}

/// Waits for `child` (a `coder sandbox` started in the background) to exit.
fn wait_sandbox(child: &mut std::process::Child, who: &str, name: &str) {
    let status = common::wait_within(child, Duration::from_secs(60));
    assert!(status.success(), "[{who}] {name} exited with {status:?}");
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_ending_beside_another_leaves_the_other_its_protections() {
    // Run A makes the placeholders; run B, started while A runs, finds them and masks
    // them as ordinary names. When A ended first and removed them, the kernel took B's
    // masks with them and B's agent could create what the user's own tools obey.
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner, false);
        fx.own();
        let mut a = fx.confined_in_background("until [ -e a-go ]; do sleep 0.02; done", "a-up");
        let b_script = "until [ -e b-go ]; do sleep 0.02; done; \
            mkdir -p .claude; echo '{\"hooks\":{}}' > .claude/settings.json; \
            echo 'curl x | sh' > .envrc; mkdir -p .husky; echo x > .husky/pre-commit; \
            rmdir .git 2>/dev/null; rm -f .git; git init -q 2>/dev/null; true";
        let mut b = fx.confined_in_background(b_script, "b-up");
        write(&fx.ws.join("a-go"), "");
        wait_sandbox(&mut a, who, "run A");
        // A is gone; B still runs, and its protections must still hold.
        assert!(
            fx.ws.join(".claude").is_dir(),
            "[{who}] run A removed a placeholder run B relies on"
        );
        write(&fx.ws.join("b-go"), "");
        wait_sandbox(&mut b, who, "run B");
        for planted in [
            ".claude/settings.json",
            ".envrc",
            ".husky/pre-commit",
            ".git/config",
        ] {
            assert!(
                fs::symlink_metadata(fx.ws.join(planted)).is_err(),
                "[{who}] run B's agent planted {planted} once run A had ended"
            );
        }
        // The last run to end removed every placeholder.
        for name in PLACEHOLDER_NAMES {
            assert!(
                fs::symlink_metadata(fx.ws.join(name)).is_err(),
                "[{who}] {name} left behind after both runs"
            );
        }
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_placeholders_of_a_killed_coder_go_with_the_next_run() {
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner, false);
        fx.own();
        let mut killed = fx.confined_in_background("sleep 60", "up");
        // `timeout` runs coder as its one child.
        let timeout_pid = killed.id();
        let children =
            fs::read_to_string(format!("/proc/{timeout_pid}/task/{timeout_pid}/children")).unwrap();
        let coder: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(coder),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let _ = common::wait_within(&mut killed, Duration::from_secs(30));
        assert!(
            fx.ws.join(".claude").is_dir(),
            "[{who}] the killed run's placeholders should still be there"
        );
        let next = fx.confined("true");
        assert!(
            next.status.success(),
            "[{who}] next run: {}",
            describe(&next)
        );
        for name in PLACEHOLDER_NAMES {
            assert!(
                fs::symlink_metadata(fx.ws.join(name)).is_err(),
                "[{who}] {name} of the killed run left behind"
            );
        }
    }
}

#[test]
fn protect_flags_add_and_drop_globs() {
    let fx = Fx::new(None, true);
    write(&fx.ws.join("tools/run.sh"), "echo hi\n");
    let out = fx.sandbox(
        "workspace-write",
        &["--protect", "tools/**"],
        "echo x >> tools/run.sh",
    );
    assert!(!out.status.success(), "{}", describe(&out));
    let out = fx.sandbox(
        "workspace-write",
        &["--no-protect"],
        "echo '{}' > .mcp.json",
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(fx.ws.join(".mcp.json").is_file());
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn commits_branches_and_the_index_still_work() {
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner, true);
        fx.own();
        let script = "set -e; c='git -c user.name=a -c user.email=a@example.invalid'; \
            echo work > work.txt; git add -A; $c commit -qm work; git branch side; \
            git checkout -q -b feature; echo more >> work.txt; $c commit -qam more; \
            git checkout -q side; git merge -q --no-edit feature; git tag v1; \
            git stash list; git log --oneline | wc -l";
        let out = fx.confined(script);
        assert!(out.status.success(), "[{who}] {}", describe(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3");
        // Placeholders were neither committed nor left behind.
        let files = fx.host_git(&["ls-files"]);
        assert_eq!(
            String::from_utf8_lossy(&files.stdout),
            "README.md\nwork.txt\n"
        );
        assert!(!fx.ws.join(".git/commondir").exists());
        assert!(!fx.ws.join(".git/config.worktree").exists());
        assert_eq!(String::from_utf8_lossy(&fx.host_git_status().stdout), "");
    }
}

// ---------------------------------------------------------------------------------------
// Class 9: the workspace is resolved once; names and depths cannot break later runs.

#[test]
fn swapping_the_workspace_during_setup_never_exposes_a_secret() {
    let fx = Fx::new(None, false);
    let marker = format!("SECRET-{}", uuid::Uuid::new_v4().simple());
    write(&fx.ws.join(".env"), &format!("{marker}\n"));
    let decoy = fx.root.join("decoy");
    write(&decoy.join("README.md"), "decoy\n");
    let ws_c = std::ffi::CString::new(fx.ws.as_os_str().to_owned().into_vec()).unwrap();
    let decoy_c = std::ffi::CString::new(decoy.as_os_str().to_owned().into_vec()).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            let deadline = Instant::now() + Duration::from_secs(30);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                // SAFETY (test): both strings are valid C paths.
                let ret = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        ws_c.as_ptr(),
                        libc::AT_FDCWD,
                        decoy_c.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(ret, 0, "renameat2");
                swaps += 1;
                std::thread::yield_now();
            }
            swaps
        })
    };
    let mut ran = 0;
    let mut refused = 0;
    for _ in 0..40 {
        let out = Command::new("/usr/bin/timeout")
            .args(["30", env!("CARGO_BIN_EXE_coder"), "sandbox", "--cd"])
            .arg(&fx.ws)
            .args([
                "--",
                "/bin/sh",
                "-c",
                "cat .env README.md 2>/dev/null; true",
            ])
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.home)
            .current_dir(&fx.root)
            .stdin(Stdio::null())
            .output_bounded();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains(&marker),
            "secret exposed: {}",
            describe(&out)
        );
        match out.status.code() {
            Some(0) => ran += 1,
            Some(71) => refused += 1,
            other => panic!("unexpected exit {other:?}: {}", describe(&out)),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    println!("swap race: {swaps} swaps, {ran} runs, {refused} refused");
    // Control: the same swap is real (the two names did trade places), and without the
    // sandbox the secret is simply readable.
    let real = if fx.ws.join(".env").exists() {
        &fx.ws
    } else {
        &decoy
    };
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["sandbox", "--mode", "danger-full-access", "--cd"])
        .arg(real)
        .args(["--", "/bin/cat", ".env"])
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", &fx.home)
        .output_bounded();
    assert!(String::from_utf8_lossy(&out.stdout).contains(&marker));
    assert!(swaps > 0);
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn non_utf8_secret_names_are_masked_not_fatal() {
    for owner in owners() {
        let who = label(owner);
        let fx = Fx::new(owner, true);
        let marker = format!("SECRET-{}", uuid::Uuid::new_v4().simple());
        let name = OsString::from_vec(b"k\xff\xfe.pem".to_vec());
        fs::write(fx.ws.join(&name), format!("{marker}\n")).unwrap();
        fs::create_dir_all(fx.ws.join(OsString::from_vec(b"d\xff/secrets".to_vec()))).unwrap();
        fs::write(
            fx.ws.join(OsString::from_vec(b"d\xff/secrets/x".to_vec())),
            format!("{marker}\n"),
        )
        .unwrap();
        fx.own();
        let out = fx.confined("cat k*.pem d*/secrets/x; ls | wc -l");
        assert!(out.status.code() != Some(71), "[{who}] {}", describe(&out));
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains(&marker),
            "[{who}]"
        );
        let control = fx.unconfined("cat k*.pem");
        assert!(String::from_utf8_lossy(&control.stdout).contains(&marker));
    }
}

#[test]
fn non_utf8_names_and_paths_work_in_the_run_mode() {
    use common::{Fake, steps};
    let fake = Fake::new(serde_json::json!([
        steps::init(),
        steps::text("done"),
        steps::result_ok("done"),
    ]));
    // A git dir outside the workspace: the run goes on, and the envelope says why git
    // cannot write there.
    fs::create_dir_all(fake.root().join("elsewhere")).unwrap();
    fs::write(fake.workspace().join(".git"), "gitdir: ../elsewhere\n").unwrap();
    fs::write(
        fake.workspace()
            .join(OsString::from_vec(b"x\xff.key".to_vec())),
        "k",
    )
    .unwrap();
    let out = fake.coder().arg("go").run();
    out.assert_success("done");
    let warnings = out.envelope["warnings"].to_string();
    assert!(warnings.contains("outside"), "{}", out.explain());
    assert!(!fake.root().join("elsewhere/hooks").exists());

    // A workspace whose own path is not UTF-8: it works or is refused clearly, never a
    // panic (exit 101).
    let odd = fake.root().join(OsString::from_vec(b"ws\xff".to_vec()));
    fs::create_dir_all(&odd).unwrap();
    let out = fake.coder().cd(odd.as_os_str()).arg("go").run();
    assert!(!out.stderr.contains("panicked"), "{}", out.explain());
    out.assert_failure("config_error", out.code.unwrap_or(0));
    assert!(out.envelope["error"].as_str().unwrap().contains("UTF-8"));
}

#[test]
fn a_too_deep_tree_is_a_clear_non_retryable_error() {
    use common::{Fake, steps};
    let fake = Fake::new(serde_json::json!([steps::init(), steps::result_ok("done")]));
    let deep_parent = fake.workspace().join("deep");
    make_deep(&deep_parent, 70);
    let out = fake.coder().args(["--max-retries", "2"]).arg("go").run();
    out.assert_failure("sandbox_error", 71);
    let error = out.envelope["error"].as_str().unwrap();
    assert!(error.contains("depth"), "{error}");
    assert!(error.contains("deep/ddd"), "names the path: {error}");
    assert_eq!(
        out.envelope["attempts"].as_array().map_or(1, Vec::len),
        1,
        "{}",
        out.explain()
    );

    let fx = Fx::new(None, false);
    make_deep(&fx.ws.join("deep"), 70);
    let out = fx.confined("true");
    assert_eq!(out.status.code(), Some(71), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("depth"),
        "{}",
        describe(&out)
    );
}

/// `levels` nested directories with long names below `top`, past `PATH_MAX`, made with
/// `mkdirat` relative to each parent.
fn make_deep(top: &Path, levels: usize) {
    use std::os::fd::AsRawFd;
    fs::create_dir_all(top).unwrap();
    let mut dir = fs::File::open(top).unwrap();
    let name = std::ffi::CString::new("d".repeat(200)).unwrap();
    for _ in 0..levels {
        // SAFETY (test): valid descriptor and C string.
        unsafe {
            libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755);
            let fd = libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            );
            assert!(fd >= 0);
            dir = std::os::fd::FromRawFd::from_raw_fd(fd);
        }
    }
}

#[test]
fn system_trees_and_the_home_are_refused_as_workspaces() {
    let fx = Fx::new(None, false);
    for dir in [
        "/",
        "/etc",
        "/usr/share",
        "/proc/self",
        "/sys",
        "/dev",
        "/run",
        "/boot",
    ] {
        if !Path::new(dir).is_dir() {
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(["sandbox", "--cd", dir, "--", "/bin/true"])
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.home)
            .output_bounded();
        assert_eq!(out.status.code(), Some(78), "{dir}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("workspace"),
            "{dir}"
        );
    }
    for dir in [&fx.home, &fx.root] {
        let out = Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(["sandbox", "--cd"])
            .arg(dir)
            .args(["--", "/bin/true"])
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.home)
            .output_bounded();
        assert_eq!(out.status.code(), Some(78), "{dir:?}: {}", describe(&out));
    }
}

// ---------------------------------------------------------------------------------------
// The scan skips `stat` for plain files whose name matches nothing (a big tree's cost):
// other names of a secret must still be masked, wherever they sit.

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn other_names_of_a_secret_are_masked_among_many_plain_files() {
    for owner in owners() {
        let fx = Fx::new(owner, false);
        for i in 0..300 {
            write(&fx.ws.join(format!("src/m{i:03}.rs")), "fn main() {}\n");
        }
        write(&fx.ws.join("mid/.env"), "TOKEN=topsecret-env\n");
        // Before the secret in walk order, beside it, and deeper after it.
        fs::hard_link(fx.ws.join("mid/.env"), fx.ws.join("a-notes.txt")).unwrap();
        fs::hard_link(fx.ws.join("mid/.env"), fx.ws.join("mid/copy.txt")).unwrap();
        write(&fx.ws.join("z/deep/er/keep.md"), "# keep\n");
        fs::hard_link(fx.ws.join("mid/.env"), fx.ws.join("z/deep/er/x.rs")).unwrap();
        // A secret name that is a symlink: its target and the target's other name.
        write(&fx.ws.join("plain/target.txt"), "topsecret-key\n");
        fs::hard_link(
            fx.ws.join("plain/target.txt"),
            fx.ws.join("src/zz-other.txt"),
        )
        .unwrap();
        std::os::unix::fs::symlink("plain/target.txt", fx.ws.join("id_rsa")).unwrap();
        fx.own();
        let names = [
            "a-notes.txt",
            "mid/copy.txt",
            "z/deep/er/x.rs",
            "plain/target.txt",
            "src/zz-other.txt",
        ];
        let script: String = names
            .iter()
            .map(|n| format!("cat {n} 2>/dev/null; "))
            .collect();
        let who = label(owner);
        let out = fx.confined(&script);
        let seen = String::from_utf8_lossy(&out.stdout);
        assert!(!seen.contains("topsecret"), "[{who}] {}", describe(&out));
        assert!(
            fs::read_to_string(fx.ws.join("src/m000.rs")).unwrap() == "fn main() {}\n",
            "[{who}] plain files untouched"
        );
        let control = fx.unconfined(&script);
        let seen = String::from_utf8_lossy(&control.stdout);
        assert!(
            seen.matches("topsecret-env").count() == 3
                && seen.matches("topsecret-key").count() == 2,
            "[{who}] control: {}",
            describe(&control)
        );
    }
}

// ---------------------------------------------------------------------------------------
// The walk starts its helper threads only once enough directories wait (a small tree is
// walked on one thread): a tree wide enough for them is still walked whole.

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn secrets_are_masked_in_a_tree_wide_enough_for_the_walks_threads() {
    const DIRS: usize = 64;
    for owner in owners() {
        let fx = Fx::new(owner, false);
        // The top dir alone queues enough directories for the helpers to start; the
        // secrets sit in the first, a middle and the last of them, and one level deeper.
        for i in 0..DIRS {
            write(&fx.ws.join(format!("d{i:02}/lib.rs")), "fn main() {}\n");
        }
        let secrets = ["d00/.env", "d31/.env", "d63/.env", "d17/deep/id_rsa"];
        for (i, name) in secrets.iter().enumerate() {
            write(&fx.ws.join(name), &format!("TOKEN=topsecret-wide-{i}\n"));
        }
        fx.own();
        let script: String = secrets
            .iter()
            .map(|n| format!("cat {n} 2>/dev/null; "))
            .collect();
        let who = label(owner);
        let out = fx.confined(&script);
        let seen = String::from_utf8_lossy(&out.stdout);
        assert!(!seen.contains("topsecret"), "[{who}] {}", describe(&out));
        let control = fx.unconfined(&script);
        let seen = String::from_utf8_lossy(&control.stdout);
        assert_eq!(
            seen.matches("topsecret-wide-").count(),
            secrets.len(),
            "[{who}] control: {}",
            describe(&control)
        );
    }
}

/// A workspace holding another user's directory that coder's user may not enter (a
/// container's database files, `data/` of uid 0, mode 0700): every confined run failed
/// its scan (`open data: EACCES`), and the end-of-run git guard after it. What neither
/// coder nor the agent may enter holds nothing the agent could read or write, so it is
/// left out with a warning that names it, and the run goes on; the agent still cannot
/// read it (the kernel's own check). A directory of another user that may be searched but
/// not listed (0711: the agent may reach names in it that no scan saw) still fails the
/// run closed. As uid 65534 only: root enters everything.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn another_users_directory_nobody_may_enter_is_left_out() {
    use common::sandbox_fixture::{NOBODY, coder_as, payload_claude};
    use std::os::unix::fs::PermissionsExt;
    common::require_root_and_user_namespaces();
    for git in [false, true] {
        let fx = common::sandbox_fixture::Fixture::new(
            "coder-unreachable-",
            true,
            &["ws", "home", "state", "xdg"],
        );
        let ws = fx.ws();
        write(&ws.join("a.txt"), "a\n");
        if git {
            git_ok(&ws, &["init", "-q"]);
        }
        let bin = fx.root().join("fake-claude");
        let payload = "cat data/secret.env 2>/dev/null || echo DENIED; echo b >> a.txt; echo DONE";
        write(&bin, &payload_claude(payload));
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        fx.own(fx.root());
        let data = ws.join("data");
        write(&data.join("secret.env"), "TOKEN=hunter2\n");
        fs::set_permissions(&data, fs::Permissions::from_mode(0o700)).unwrap();
        let run = || {
            let out = coder_as(fx.root(), Some(NOBODY), &ws, &bin, &[], "go").output_bounded();
            serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .unwrap_or_else(|e| panic!("git={git}: no envelope ({e}): {}", describe(&out)))
        };
        let env = run();
        let result = env["result"].as_str().unwrap_or_default();
        assert!(
            result.contains("DENIED") && result.contains("DONE"),
            "git={git}: {env}"
        );
        assert!(!env.to_string().contains("hunter2"), "git={git}: {env}");
        let warned = env["warnings"].as_array().into_iter().flatten().any(|w| {
            w.as_str().is_some_and(|w| {
                w.contains("not scanned") && w.contains(&data.display().to_string())
            })
        });
        assert!(warned, "git={git}: no warning names it: {env}");
        assert_eq!(
            env["changes"]["files"][0]["path"], "a.txt",
            "git={git}: {env}"
        );
        // Searchable but not listable: still refused.
        fs::set_permissions(&data, fs::Permissions::from_mode(0o711)).unwrap();
        let env = run();
        assert!(
            env["error_kind"] == "sandbox_error" && env.to_string().contains("EACCES"),
            "git={git}: a directory the agent may search was left out: {env}"
        );
    }
}

/// Attack on the rule above: a secret in another user's directory that coder's user may
/// not enter (`data/.env`, uid 0, `data/` mode 0700) whose file has a second name the
/// agent can read (`notes.txt`, a hard link in the workspace, mode 0644). The scan masks
/// every other name of a masked secret; with `data/` left out it never sees the secret
/// name, so its other name is not masked and the agent reads the token through it. The
/// control (`data/` 0755: scanned) masks `notes.txt`. As uid 65534 only.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_secret_in_a_directory_left_out_is_masked_under_its_other_names() {
    use common::sandbox_fixture::{NOBODY, coder_as, payload_claude};
    use std::os::unix::fs::PermissionsExt;
    common::require_root_and_user_namespaces();
    let fx = common::sandbox_fixture::Fixture::new(
        "coder-unreachable-link-",
        true,
        &["ws", "home", "state", "xdg"],
    );
    let ws = fx.ws();
    write(&ws.join("a.txt"), "a\n");
    let bin = fx.root().join("fake-claude");
    let payload = "cat notes.txt 2>/dev/null; echo DONE";
    write(&bin, &payload_claude(payload));
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    fx.own(fx.root());
    // Root's, after `own`: another user's directory and its secret.
    let data = ws.join("data");
    write(&data.join(".env"), "TOKEN=hunter2\n");
    fs::set_permissions(data.join(".env"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::hard_link(data.join(".env"), ws.join("notes.txt")).unwrap();
    let run = |mode: u32| {
        fs::set_permissions(&data, fs::Permissions::from_mode(mode)).unwrap();
        let out = coder_as(fx.root(), Some(NOBODY), &ws, &bin, &[], "go").output_bounded();
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("mode {mode:o}: no envelope ({e}): {}", describe(&out)))
    };
    // Control: scanned, so the other name is masked.
    let env = run(0o755);
    let result = env["result"].as_str().unwrap_or_default();
    assert!(
        result.contains("DONE") && !result.contains("hunter2"),
        "control: {env}"
    );
    // Left out: the other name must not give the secret away either (a masked
    // `notes.txt`, or a run refused).
    let env = run(0o700);
    assert!(
        !env.to_string().contains("hunter2"),
        "the secret was read through its other name: {env}"
    );
}

/// The second walk that looks for the other names of a masked secret (a `.env` with a
/// hard link `b.txt`) did not leave out what the first walk leaves out: another user's
/// directory coder's user may not enter failed the run (`open data: EACCES`) as soon as
/// any secret had a second name. It is left out there too; the other name is masked.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn other_names_of_a_secret_are_found_beside_a_directory_left_out() {
    use common::sandbox_fixture::{NOBODY, coder_as, payload_claude};
    use std::os::unix::fs::PermissionsExt;
    common::require_root_and_user_namespaces();
    let fx = common::sandbox_fixture::Fixture::new(
        "coder-unreachable-names-",
        true,
        &["ws", "home", "state", "xdg"],
    );
    let ws = fx.ws();
    write(&ws.join(".env"), "TOKEN=hunter2\n");
    fs::hard_link(ws.join(".env"), ws.join("b.txt")).unwrap();
    let bin = fx.root().join("fake-claude");
    write(&bin, &payload_claude("cat b.txt 2>/dev/null; echo DONE"));
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    fx.own(fx.root());
    let data = ws.join("data");
    write(&data.join("x"), "x\n");
    fs::set_permissions(&data, fs::Permissions::from_mode(0o700)).unwrap();
    let out = coder_as(fx.root(), Some(NOBODY), &ws, &bin, &[], "go").output_bounded();
    let env: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no envelope ({e}): {}", describe(&out)));
    let result = env["result"].as_str().unwrap_or_default();
    assert!(
        result.contains("DONE") && !env.to_string().contains("hunter2"),
        "{env}"
    );
}

/// A read-only bind mount of a directory, undone when dropped.
struct ReadOnlyBind(PathBuf);

impl ReadOnlyBind {
    fn new(dir: &Path) -> ReadOnlyBind {
        for args in [&["--bind"][..], &["-o", "remount,bind,ro"][..]] {
            let out = Command::new("mount")
                .args(args)
                .arg(dir)
                .arg(dir)
                .output_bounded();
            assert!(out.status.success(), "mount {args:?}: {}", describe(&out));
        }
        ReadOnlyBind(dir.to_path_buf())
    }
}

impl Drop for ReadOnlyBind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output_bounded();
    }
}

/// A `--write` directory the caller may read but not write (another user's, or on a
/// read-only mount) needs no placeholder: nobody in the run may create a name there, so
/// the sandbox makes none, and the run goes on. Every such run failed at setup ("create
/// placeholder …/.git: EACCES"). The agent still writes nothing there (the kernel's own
/// check) and the workspace as usual. As `nobody` with a directory of root's, and as root
/// with a read-only mount.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_write_dir_nobody_may_write_needs_no_placeholder() {
    common::require_root_and_user_namespaces();
    for owner in owners() {
        let fx = Fx::new(owner, true);
        fx.own();
        let extra = fx.root.join("extra");
        write(&extra.join("keep.txt"), "k\n");
        let _read_only = owner.is_none().then(|| ReadOnlyBind::new(&extra));
        let script = format!(
            "echo x > {0}/new.txt || echo REFUSED; mkdir {0}/.git || echo NO-GIT; \
             echo b > a.txt && echo DONE",
            extra.display()
        );
        let out = fx.sandbox(
            "workspace-write",
            &["--write", extra.to_str().unwrap()],
            &script,
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && text.contains("REFUSED")
                && text.contains("NO-GIT")
                && text.contains("DONE"),
            "{}: {}",
            label(owner),
            describe(&out)
        );
        let names: Vec<_> = fs::read_dir(&extra)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["keep.txt"], "{}", label(owner));
        assert_eq!(fs::read_to_string(fx.ws.join("a.txt")).unwrap(), "b\n");
    }
}
