//! Independent review of where the helper mounts its masks (`src/sandbox/confine.rs`,
//! `apply_masks`): on the granted trees after they were cloned into the private root, the
//! workspace's masks opened beneath its mounted clone, the others by a path without
//! symlinks inside the new root, and empty masks cloned from the read-only mask source with
//! no `mount_setattr` of their own (`src/sandbox/scan.rs`, `open_beneath`: one `openat2`).
//!
//! Written as an attacker who has read that code. Each attack runs as root and as uid
//! 65534, and asserts what the user would see: a secret reads empty or is refused, never
//! its contents; a protected path cannot be written, removed or renamed; every mask is a
//! read-only (or, for a `.git` pin, nosuid) mount in the agent's `/proc/self/mountinfo`.
//! Each has its control: the same paths, unconfined, hold the secret and are writable.
//!
//! The trees: the workspace `outer/ws` (a git repository with a dotenv file, a directory of
//! secrets, protected tool configs, a nested `sub` with its own secret), its parent `outer`
//! (a secret of its own), and an extra tree `extra` (a secret, a directory of secrets, a
//! git repository), granted in every nesting the CLI allows: `--read`/`--write` of the
//! workspace's parent, `--write` of a directory inside the workspace, `--read`/`--write` of
//! the extra tree.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::sandbox_fixture::{
    Fixture, arms, as_arm, printed, run_text, view_one_script, view_script,
};
use common::{Bounded, CODER};

/// What a run refused because the tree kept changing says (the scan's check, or the
/// helper's identity check of a mask's target).
const REFUSALS: [&str; 2] = [
    "while coder scanned the workspace for secrets",
    "changed between the secret scan and the mount",
];

/// What every secret holds; no output of a confined run may contain it.
const SECRET: &str = "TOPSECRET";

/// What every protected file holds.
const ORIGINAL: &str = "ORIGINAL";

/// The secrets of the layout, relative to the fixture's root.
const SECRETS: [&str; 7] = [
    "outer/ws/.env",
    "outer/ws/secrets/db.txt",
    "outer/ws/sub/.env",
    "outer/ws/.claude/.env",
    "outer/.env",
    "extra/.env",
    "extra/secrets/key.txt",
];

/// The protected files of the layout (tool configs, git config and hooks), relative to
/// the fixture's root.
const PROTECTED: [&str; 6] = [
    "outer/ws/.envrc",
    "outer/ws/.claude/settings.json",
    "outer/ws/.git/config",
    "outer/ws/.git/hooks/pre-commit",
    "extra/.git/config",
    "extra/.git/hooks/pre-commit",
];

/// The grants each attack is run with (`{root}` is the fixture's root): the workspace
/// alone, inside a read and a write grant, holding a write grant, beside read and write
/// grants of a tree with secrets of its own.
const GRANTS: [&[&str]; 5] = [
    &[],
    &["--read", "{root}/outer", "--write", "{root}/extra"],
    &["--write", "{root}/outer", "--read", "{root}/extra"],
    &["--write", "{root}/outer/ws/sub", "--write", "{root}/extra"],
    &[
        "--read",
        "{root}/outer",
        "--write",
        "{root}/outer/ws/sub",
        "--read",
        "{root}/extra",
    ],
];

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The layout for one arm, given to its user.
fn layout(nobody: bool) -> Fixture {
    let fx = Fixture::new(
        "coder-mask-order-",
        nobody,
        &["outer/ws", "extra", "home", "state"],
    );
    let root = fx.root();
    for repo in ["outer/ws", "extra"] {
        let o = Command::new("git")
            .args(["init", "-q"])
            .arg(root.join(repo))
            .output_bounded();
        assert!(o.status.success(), "git init: {}", printed(&o));
    }
    for s in SECRETS {
        write(&root.join(s), &format!("{SECRET} {s}\n"));
    }
    for p in PROTECTED {
        write(&root.join(p), &format!("{ORIGINAL}\n"));
    }
    fx.own(root);
    fx
}

/// `args` with `{root}` replaced by the fixture's root.
fn grant(fx: &Fixture, args: &[&str]) -> Vec<String> {
    let root = fx.root().to_str().unwrap();
    args.iter().map(|a| a.replace("{root}", root)).collect()
}

/// Every path of the layout an agent may try, as absolute paths: each secret and
/// protected file as the fixture names it.
fn targets(fx: &Fixture) -> Vec<String> {
    SECRETS
        .iter()
        .chain(PROTECTED.iter())
        .map(|p| fx.root().join(p).to_str().unwrap().to_owned())
        .collect()
}

/// `coder sandbox GRANTS --cd outer/ws -- sh -c SCRIPT`: exit code and what it printed.
fn confined(fx: &Fixture, grants: &[String], script: &str) -> (i32, String) {
    let args: Vec<&str> = grants.iter().map(String::as_str).collect();
    run_text(&mut fx.sandbox_in(&fx.root().join("outer/ws"), &args, script))
}

/// The control: `sh -c SCRIPT` as the arm's user, unconfined.
fn unconfined(fx: &Fixture, script: &str) -> String {
    let (rc, out) = run_text(as_arm(fx.nobody, 60, "sh").arg("-c").arg(script));
    assert_eq!(rc, 0, "nobody={}: {out}", fx.nobody);
    out
}

/// The line [`view_script`] printed for `path`.
fn line_of<'a>(out: &'a str, path: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{path}: ")))
        .unwrap_or_else(|| panic!("no line for {path} in {out}"))
}

/// A secret or protected file is seen neither with its secret nor writable, through any
/// path of any grant: each secret reads empty (or is refused), each protected file keeps
/// its contents and refuses an append. The control, unconfined, reads every secret and
/// appends to every file.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn no_grant_nesting_shows_a_secret_or_lets_a_protected_file_be_written() {
    for nobody in arms() {
        let fx = layout(nobody);
        let paths = targets(&fx);
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        for grants in GRANTS {
            let grants = grant(&fx, grants);
            let (rc, out) = confined(&fx, &grants, &view_script(&refs));
            assert_eq!(rc, 0, "nobody={nobody} {grants:?}: {out}");
            assert!(
                !out.contains(SECRET),
                "nobody={nobody} {grants:?}: a secret leaked: {out}"
            );
            for p in &refs {
                let line = line_of(&out, p);
                assert!(
                    line.ends_with(" fixed"),
                    "nobody={nobody} {grants:?}: {line}"
                );
            }
            for p in PROTECTED {
                let line = line_of(&out, fx.root().join(p).to_str().unwrap());
                // Not granted (the extra tree without a grant): not there at all.
                assert!(
                    line.contains(ORIGINAL) || line.contains(": DENIED fixed"),
                    "nobody={nobody} {grants:?}: {line}"
                );
            }
        }
        // The host still holds every secret and protected file as written.
        for s in SECRETS {
            let text = std::fs::read_to_string(fx.root().join(s)).unwrap();
            assert_eq!(text, format!("{SECRET} {s}\n"), "nobody={nobody}");
        }
        for p in PROTECTED {
            let text = std::fs::read_to_string(fx.root().join(p)).unwrap();
            assert_eq!(text, format!("{ORIGINAL}\n"), "nobody={nobody}");
        }
        let control = unconfined(&fx, &view_script(&refs));
        for p in &refs {
            let line = line_of(&control, p);
            assert!(line.ends_with(" writable"), "control {nobody}: {line}");
        }
        for s in SECRETS {
            let line = line_of(&control, fx.root().join(s).to_str().unwrap());
            assert!(line.contains(SECRET), "control {nobody}: {line}");
        }
    }
}

/// The mount of `point` in a `/proc/self/mountinfo` text: its options (per-mount, then
/// per-superblock), the last mount stacked there (the one a lookup reaches).
fn mount_options(mountinfo: &str, point: &str) -> Option<String> {
    mountinfo.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4) == Some(&point)).then(|| f.get(5).copied().unwrap_or("").to_owned())
    })
}

/// Every mask is a mount the agent sees, where it sees the path, and none is writable: an
/// empty mask (a clone of the read-only source, with no `mount_setattr` of its own) and a
/// read-only self-bind are `ro,nosuid,nodev`; a `.git` pin is `nosuid,nodev`. With the
/// workspace inside a write grant (masks of both trees) and beside a write grant.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn every_mask_is_a_read_only_mount_in_the_agents_mountinfo() {
    for nobody in arms() {
        let fx = layout(nobody);
        for grants in [GRANTS[2], GRANTS[3]] {
            let grants = grant(&fx, grants);
            let (rc, info) = confined(&fx, &grants, "cat /proc/self/mountinfo");
            assert_eq!(rc, 0, "nobody={nobody} {grants:?}: {info}");
            let outer = grants.iter().any(|g| g.ends_with("/outer"));
            let extra_written = grants
                .windows(2)
                .any(|w| w[0] == "--write" && w[1].ends_with("/extra"));
            let ro = SECRETS
                .iter()
                .copied()
                .chain(["outer/ws/secrets", "outer/ws/.claude", "extra/secrets"])
                .chain([
                    "outer/ws/.envrc",
                    "outer/ws/.git/config",
                    "outer/ws/.git/hooks",
                ])
                .chain(["extra/.git/config", "extra/.git/hooks"])
                .filter(|p| outer || *p != "outer/.env")
                .filter(|p| extra_written || !p.starts_with("extra/.git"));
            for p in ro {
                let path = fx.root().join(p);
                let opts = mount_options(&info, path.to_str().unwrap())
                    .unwrap_or_else(|| panic!("nobody={nobody} {grants:?}: no mask on {p}"));
                let opts: Vec<&str> = opts.split(',').collect();
                for flag in ["ro", "nosuid", "nodev"] {
                    assert!(
                        opts.contains(&flag),
                        "nobody={nobody} {grants:?}: {p} mounted {opts:?}"
                    );
                }
            }
            let pins = ["outer/ws/.git", "extra/.git"];
            for git in pins
                .iter()
                .filter(|g| extra_written || !g.starts_with("extra"))
            {
                let path = fx.root().join(git);
                let opts = mount_options(&info, path.to_str().unwrap())
                    .unwrap_or_else(|| panic!("nobody={nobody} {grants:?}: no pin on {git}"));
                assert!(
                    opts.split(',').any(|o| o == "nosuid"),
                    "nobody={nobody} {grants:?}: {git} mounted {opts}"
                );
            }
        }
    }
}

/// Removing, renaming, linking, unmounting and renaming-over a mask, or renaming the
/// directory that holds it, never reveals the secret nor loses it: the mask is a busy
/// mount point, a link across it is refused, and a moved parent carries its masks along.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_mask_cannot_be_removed_renamed_linked_or_unmounted() {
    for nobody in arms() {
        let fx = layout(nobody);
        let grants = grant(&fx, GRANTS[3]);
        let extra = fx.root().join("extra");
        let extra = extra.to_str().unwrap();
        let script = format!(
            "rm -f .env; mv .env moved.env; ln .env linked.env; umount .env; umount -l .env; \
             echo x > other; mv -f other .env; mv secrets gone; mv .claude claude2; \
             rm -rf .git/hooks; mv .git/config .git/config2; mv .envrc envrc2; \
             mv sub sub2 && cat sub2/.env; rm -f '{extra}/.env'; mv '{extra}/secrets' \
             '{extra}/gone'; cat .env secrets/db.txt moved.env linked.env gone/db.txt \
             '{extra}/.env' '{extra}/secrets/key.txt'; echo END"
        );
        let (rc, out) = confined(&fx, &grants, &format!("{script} 2>&1"));
        assert_eq!(rc, 0, "nobody={nobody}: {out}");
        assert!(out.contains("END"), "nobody={nobody}: {out}");
        assert!(!out.contains(SECRET), "nobody={nobody}: leaked: {out}");
        let root = fx.root();
        for s in SECRETS {
            let now = if s == "outer/ws/sub/.env" {
                // The one rename allowed: `sub` holds a mask but is not one.
                root.join("outer/ws/sub2/.env")
            } else {
                root.join(s)
            };
            let text = std::fs::read_to_string(&now)
                .unwrap_or_else(|e| panic!("nobody={nobody}: {}: {e}", now.display()));
            assert_eq!(text, format!("{SECRET} {s}\n"), "nobody={nobody}");
        }
        for p in PROTECTED {
            let text = std::fs::read_to_string(root.join(p)).unwrap();
            assert_eq!(text, format!("{ORIGINAL}\n"), "nobody={nobody}: {p}");
        }
        for gone in ["moved.env", "linked.env", "gone", "claude2", "envrc2"] {
            assert!(
                !root.join("outer/ws").join(gone).exists(),
                "nobody={nobody}: {gone} exists: {out}"
            );
        }
        // The control: unconfined, the same removal takes the secret away.
        unconfined(
            &fx,
            &format!("rm '{}'", root.join("outer/ws/.env").display()),
        );
        assert!(!root.join("outer/ws/.env").exists());
    }
}

/// In plan mode (`coder plan`, the workspace read-only but for the plan file), with the plan
/// beside the workspace (read-only mount) and inside it (a writable mount that Landlock
/// alone guards): the fake agent's view of the secrets and protected files shows neither a
/// secret nor a write.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn plan_mode_masks_hold_with_the_plan_beside_or_inside_the_workspace() {
    for nobody in arms() {
        for inside in [false, true] {
            let fx = layout(nobody)
                .with_var("XDG_CONFIG_HOME", "/nonexistent-xdg")
                .with_dummy_backend();
            let root = fx.root().to_path_buf();
            let ws = root.join("outer/ws");
            let paths = targets(&fx);
            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
            let agent = root.join("home/claude");
            write(&agent, &plan_agent(&view_script(&refs)));
            std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            fx.own(&root);
            let mut cmd = fx.command(CODER);
            cmd.arg("plan");
            if inside {
                cmd.arg("--plan-file").arg(ws.join("PLAN.md"));
            }
            let out = cmd
                .arg("look at the secrets")
                .arg("--cd")
                .arg(&ws)
                .arg("--claude-bin")
                .arg(&agent)
                .args(grant(&fx, &["--read", "{root}/extra"]))
                .output_bounded();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let env: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
                panic!("nobody={nobody}: no envelope ({e}): {}", printed(&out))
            });
            assert_eq!(
                env["success"], true,
                "nobody={nobody} inside={inside}: {env}"
            );
            let plan = PathBuf::from(env["plan_file"].as_str().unwrap());
            let view = std::fs::read_to_string(&plan).unwrap();
            assert!(
                !view.contains(SECRET),
                "nobody={nobody} inside={inside}: {view}"
            );
            for p in &refs {
                let line = line_of(&view, p);
                assert!(
                    line.ends_with(" fixed"),
                    "nobody={nobody} inside={inside}: {line}"
                );
            }
        }
    }
}

/// A fake `claude` for `coder plan`: finds the plan file in its prompt and writes into it
/// what `script` prints.
fn plan_agent(script: &str) -> String {
    format!(
        r#"#!/bin/sh
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac
  shift
done
prompt=$(cat)
plan=$(printf '%s\n' "$prompt" | grep -m1 '^/.*\.md$')
printf '{{"type":"system","subtype":"init","session_id":"%s","cwd":"%s","tools":[],"model":"fake"}}\n' "$sid" "$(pwd)"
( {script} ) > "$plan" 2>&1
printf '{{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"%s","num_turns":1,"usage":{{"input_tokens":1,"output_tokens":1}}}}\n' "$sid"
"#
    )
}

/// A process of the user's (here unconfined, as another confined agent sharing the
/// workspace could) keeps moving the pieces of the paths to masked files while `coder
/// sandbox` starts: it swaps two directories that each hold a secret, and replaces one
/// with a symlink to the other, in the workspace and in an extra write grant. Each run
/// either refuses to start (the target changed) or shows no secret, while it reads the
/// secrets again and again as the swaps go on. (The end-of-run git guard, walking the
/// same moving tree, may say it could not finish: a refusal too.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn moving_the_pieces_of_masked_paths_during_setup_never_unmasks_a_secret() {
    for nobody in arms() {
        let fx = layout(nobody);
        let root = fx.root().to_path_buf();
        for tree in ["outer/ws", "extra"] {
            for d in ["a", "b", "c/deep"] {
                write(
                    &root.join(tree).join(d).join(".env"),
                    &format!("{SECRET}\n"),
                );
            }
        }
        fx.own(&root);
        let stop = root.join("stop");
        let mover = format!(
            "cd '{root}'; while [ ! -e '{stop}' ]; do for t in outer/ws extra; do \
             mv $t/a $t/t; mv $t/b $t/a; mv $t/t $t/b; \
             mv $t/c $t/u; ln -s u $t/c; rm $t/c; mv $t/u $t/c; \
             mv $t/a $t/c/a; mv $t/c/a $t/a; done; done 2>/dev/null",
            root = root.display(),
            stop = stop.display()
        );
        let mut child = as_arm(nobody, 300, "sh")
            .arg("-c")
            .arg(mover)
            .spawn()
            .unwrap();
        let grants = grant(&fx, &["--write", "{root}/extra"]);
        let args: Vec<&str> = grants.iter().map(String::as_str).collect();
        let reader = format!(
            "i=0; while [ $i -lt 40 ]; do cat */.env */*/.env */*/*/.env; \
             (cd '{extra}' && cat */.env */*/.env */*/*/.env); {view}; i=$((i+1)); \
             done 2>/dev/null; echo END",
            extra = root.join("extra").display(),
            view = view_one_script(".env")
        );
        let (mut started, mut refused) = (0, 0);
        for _ in 0..12 {
            let mut cmd = fx.sandbox_in(&root.join("outer/ws"), &args, &reader);
            let (rc, out) = run_text(&mut cmd);
            assert!(!out.contains("panicked"), "nobody={nobody}: {out}");
            // This run's scan was known to miss a moved directory until the scan was
            // checked to have read a tree that held still (`src/sandbox/scan_watch.rs`).
            assert!(!out.contains(SECRET), "nobody={nobody}: leaked: {out}");
            if rc == 0 && out.contains("END") {
                started += 1;
            } else {
                refused += 1;
                assert!(
                    REFUSALS.iter().any(|r| out.contains(r))
                        || out.contains("sandbox setup")
                        || (rc == 71 && out.contains("git guard incomplete"))
                        || (rc == 71 && out.contains("stopped before it had checked")),
                    "nobody={nobody}: rc {rc}: {out}"
                );
            }
        }
        std::fs::write(&stop, "").unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "nobody={nobody}: the mover: {status}");
        eprintln!("nobody={nobody}: {started} runs started clean, {refused} refused");
    }
}

/// Another process (as another confined agent sharing the workspace could, since it may
/// rename the directories above the secrets it cannot read) moves a directory holding a
/// secret back and forth, as fast as `rename` goes, between a directory the scan lists at
/// once and one thirty levels down that it lists last. A scan that trusted its own walk
/// missed it now and then (2 runs in 20 and 2 in 30, as root and as uid 65534, before the
/// check): the directory left the deep one before that was listed and sat in the shallow
/// one after that was. Every run now either shows no secret or refuses to start, saying
/// the workspace kept changing. (The end-of-run git guard, walking the same moving tree,
/// may also say it could not finish: that is a refusal too.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_directory_moved_across_the_walk_is_seen_or_the_run_refused() {
    const RUNS: usize = 40;
    for nobody in arms() {
        let fx = Fixture::new("coder-scan-race-", nobody, &["ws", "home", "state"]);
        let ws = fx.root().join("ws");
        let deep: PathBuf = (1..=30).fold(PathBuf::from("zz"), |p, i| p.join(format!("l{i}")));
        write(&ws.join(&deep).join("d/.env"), &format!("{SECRET}\n"));
        std::fs::create_dir_all(ws.join("aa")).unwrap();
        fx.own(fx.root());
        let stop = Arc::new(AtomicBool::new(false));
        let mover = {
            let (stop, mut from, mut to) =
                (stop.clone(), ws.join(&deep).join("d"), ws.join("aa/d"));
            std::thread::spawn(move || {
                let mut moves = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    std::fs::rename(&from, &to).unwrap();
                    std::mem::swap(&mut from, &mut to);
                    moves += 1;
                }
                moves
            })
        };
        let reader = format!(
            "i=0; while [ $i -lt 10 ]; do cat aa/d/.env {deep}/d/.env; i=$((i+1)); done \
             2>/dev/null; echo END",
            deep = deep.display()
        );
        let (mut started, mut refused) = (0, 0);
        for _ in 0..RUNS {
            let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], &reader));
            assert!(!out.contains(SECRET), "nobody={nobody}: leaked: {out}");
            if rc == 0 && out.contains("END") {
                started += 1;
            } else {
                refused += 1;
                assert!(
                    REFUSALS.iter().any(|r| out.contains(r))
                        || (rc == 71 && out.contains("git guard incomplete"))
                        || (rc == 71 && out.contains("stopped before it had checked")),
                    "nobody={nobody}: rc {rc}: {out}"
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        let moves = mover.join().unwrap();
        assert!(
            moves > 1000,
            "nobody={nobody}: the mover moved {moves} times"
        );
        eprintln!(
            "nobody={nobody}: {started} runs started clean, {refused} refused, {moves} moves"
        );
        // Once nothing moves, the same workspace starts.
        let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], &reader));
        assert_eq!(
            (rc, out.contains(SECRET)),
            (0, false),
            "nobody={nobody}: {out}"
        );
        assert!(out.contains("END"), "nobody={nobody}: {out}");
    }
}
