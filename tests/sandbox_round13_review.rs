//! Round thirteen's review: the mechanisms added in round twelve, attacked by someone who
//! has read the code. Every attack runs as root and as uid 65534 where it applies, each
//! with a control showing that the payload does land without the defence.
//!
//! Found open when this review started, closed with it:
//! * `--transcript` and a SQLite `--store` were refused in a `--write` grant (or `/tmp`
//!   with `--allow-tmp`) by comparing paths only: the same directory under another path (a
//!   bind mount of the grant, or of a directory in it) was let through, and the agent
//!   rewrote the file through the grant's own path.
//! * and it left out the tool caches `--tool-caches` makes writable (`~/.cache/pip`, …).
//! * the same refusal took `..` lexically: `W/sub/../../logs/t.jsonl`, where an earlier
//!   run's agent had made `W/sub` a symlink to `a/b`, read as outside `W`, and the kernel
//!   opened `W/logs/t.jsonl`.
//! * a grant holding a mount of coder's state directory beneath it (`--write m` or
//!   `--read m` with `m/x` a bind mount of the state directory) was let through: the
//!   sandbox mounts a grant with its submounts, and the agent wrote into `placeholders/`
//!   (or could read and hold the locks). The same for `--transcript`/`--store` in a
//!   directory mounted beneath a `--write` grant.
//! * the ask server ends at its CLI's SIGTERM when no call is held, and outlives anyone
//!   else's; "its CLI's" was told by the sender pid in the signal's info, which a signal
//!   queued with `rt_sigqueueinfo` sets as it likes: any process of the user (an agent's
//!   tool) ended it with one naming the CLI. (The agent could already kill it outright:
//!   a tool command may signal the server; ending it loses no question coder sees, since
//!   questions are taken from the CLI's stream.)
//! * a placeholder directory written into before the run's end went back "where it was"
//!   by its path, after the trash had taken it: an agent of a run with another state
//!   directory (which no lock excludes), whose tree holds the first run's, turned a
//!   directory on that path into a symlink in between, and coder moved the agent's
//!   directory (a `.claude` with a file of its choosing) to wherever the symlink pointed,
//!   outside every grant of that agent.
//!
//! * the change ledger's "before" scan takes every file's stat data first and reads the
//!   files afterwards; a file written in between (by what the CLI runs as it starts, before
//!   any request: the proxy's hold does not hold it) kept its old ctime with its new
//!   content, so the safety net (files changed after the run's first process started)
//!   missed it and the ledger reported it unchanged.
//!
//! Looked at and held (no test of their own here): the proxy holds CONNECT and plain
//! requests alike before anything goes upstream, and the sandbox's network namespace has no
//! other way out; a workspace that is the home directory (whose `.claude` the serial
//! fallback skips) is refused as a workspace; the trash is pruned by `rmdir` of names in a
//! directory opened without following symlinks, so a prune removes nothing outside it.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::Path;

use common::Bounded;
use common::review_tree::{Tree, VAR_TMP, who};
use common::sandbox_fixture::{self, NOBODY};
use serde_json::Value;

/// Attacks of this file measured open today.
const KNOWN_OPEN: &[&str] = &[];

/// The prefix of this suite's trees (in [`VAR_TMP`], out of the host's `/tmp` that
/// `--allow-tmp` grants; workspace `ws`, `home`, coder's `state`, `xdg`).
const PREFIX: &str = "coder-r13-";

/// The verdict on a run whose `--transcript` or `--store` the agent could have reached
/// (`path`, where its payload writes): refused as a configuration error, naming `named`
/// when given, before the payload ran; for an attack on [`KNOWN_OPEN`], the payload landed.
fn assert_refused(name: &str, case: &str, env: &Value, path: &Path, named: Option<&str>) {
    if KNOWN_OPEN.contains(&name) {
        assert!(forged(path), "{case}: now blocked: {env}");
    } else {
        assert_eq!(env["error_kind"], "config_error", "{case}: {env}");
        if let Some(named) = named {
            let error = env["error"].as_str().unwrap_or_default();
            assert!(error.contains(named), "{case}: {env}");
        }
        assert!(!forged(path), "{case}: the payload landed: {env}");
    }
}

/// Whether `path` starts with the line the payloads forge (`FORGED`).
fn forged(path: &Path) -> bool {
    std::fs::read(path)
        .unwrap_or_default()
        .starts_with(b"FORGED\n")
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
                let mut tree = Tree::new(PREFIX, VAR_TMP, owner, &["w/sub", "other"]);
                tree.bind(&format!("w/{under_w}"), alias);
                tree.bind("other", "other-alias");
                let (root, w) = (tree.root.clone(), tree.root.join("w"));
                let real = w.join(under_w).join(file);
                let through = root.join(alias).join(file);
                let payload = format!("echo FORGED > '{}' && echo WROTE", real.display());
                let write = format!("--write={}", w.display());
                let target = through.to_str().unwrap();
                let env = tree.run(&[&write, flag, target], &payload);
                let case = format!("{}: {name}: {flag} {alias}", who(owner));
                assert_refused(name, &case, &env, &real, Some(target));

                // Control: a bind mount of a directory not granted runs, and the agent
                // cannot reach the file there.
                let other = root.join("other").join(file);
                let through_other = root.join("other-alias").join(file);
                let payload = format!("echo FORGED > '{}' && echo WROTE", other.display());
                let env = tree.run(&[&write, flag, through_other.to_str().unwrap()], &payload);
                assert_eq!(env["success"], true, "{case}: control: {env}");
                assert!(!forged(&other), "{case}: control: landed confined: {env}");

                // Control: unconfined, the payload lands through the bind mount.
                let _ = std::fs::remove_file(&real);
                let payload = format!("echo FORGED > '{}' && echo WROTE", real.display());
                let env = tree.run(
                    &["--sandbox", "danger-full-access", &write, flag, target],
                    &payload,
                );
                assert!(forged(&through), "{case}: control: unconfined: {env}");
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
                let mut tree = Tree::new(PREFIX, VAR_TMP, owner, &["ws/sub"]);
                tree.bind(&format!("ws/{under_ws}"), alias);
                let root = tree.root.clone();
                let real = root.join("ws").join(under_ws).join(file);
                let through = root.join(alias).join(file);
                let payload = format!("echo FORGED > '{}' && echo WROTE", real.display());
                let target = through.to_str().unwrap();
                let env = tree.run(&[flag, target], &payload);
                let case = format!("{}: {name}: {flag} {alias}", who(owner));
                assert_refused(name, &case, &env, &real, Some(target));
                // Control: outside the workspace, the same file runs and stays coder's.
                let outside = root.join("home").join(file);
                let payload = format!("echo FORGED > '{}' && echo WROTE", outside.display());
                let env = tree.run(&[flag, outside.to_str().unwrap()], &payload);
                assert_eq!(env["success"], true, "{case}: control: {env}");
                assert!(!forged(&outside), "{case}: control: landed confined: {env}");
            }
        }
    }
}

/// The racer of [`a_refused_trash_entry_goes_back_to_its_own_directory`], run by another
/// state directory's confined agent whose workspace is `ws`. Once `ws/sub/started` exists
/// (the first run is under way) it fills the first run's placeholder directories (plain
/// directories in its own tree) with files (`planted` among them), so that the trash
/// refuses them, says `armed`, and waits (inotify) for the first to be moved out of
/// `ws/sub`; then it turns `ws/sub` into a symlink to `outside` at once. `ws/stop-flip`
/// makes it put `ws/sub` back and answer `ws/idle`; `ws/done` ends it. First it tries to
/// make a directory in `outside` itself, which its sandbox refuses (`DIRECT-REFUSED`),
/// then says `ws/racer-ready`: its sandbox's scan is done, so the first run's
/// placeholders are made after it (the protected globs hold in every directory: a
/// placeholder its scan met in `sub` would be held read-only, and `sub` pinned).
const RACER: &str = r#"
import ctypes, os, select, sys, time
ws, out = sys.argv[1], sys.argv[2]
sub, real = ws + '/sub', ws + '/sub.real'
names = ['.claude', '.vscode', '.idea', '.githooks', '.husky', '.envrc']
libc = ctypes.CDLL(None, use_errno=True)
try:
    os.mkdir(out + '/direct')
    print('DIRECT-LANDED')
except OSError:
    print('DIRECT-REFUSED')
sys.stdout.flush()
open(ws + '/racer-ready', 'w').close()
stop = lambda: os.path.exists(ws + '/stop-flip') or os.path.exists(ws + '/done')
deadline = time.time() + 100
while time.time() < deadline and not os.path.exists(ws + '/done'):
    if not os.path.exists(sub + '/started') or stop():
        time.sleep(0.001)
        continue
    for n in names:
        for i in range(400):
            try:
                open('%s/%s/%s-%d' % (sub, n, 'p' * 200, i), 'w').close()
            except OSError:
                break
        try:
            open(sub + '/' + n + '/planted', 'w').close()
        except OSError:
            pass
    fd = libc.inotify_init()
    libc.inotify_add_watch(fd, sub.encode(), 0x40)  # IN_MOVED_FROM
    open(sub + '/armed', 'w').close()
    while not stop():
        if select.select([fd], [], [], 0.05)[0]:
            os.rename(sub, real)
            os.symlink(out, sub)
            break
    os.close(fd)
    while not stop():
        time.sleep(0.002)
    if os.path.islink(sub):
        os.unlink(sub)
        os.rename(real, sub)
    open(ws + '/idle', 'w').close()
    while os.path.exists(ws + '/stop-flip'):
        time.sleep(0.002)
print('RACER-DONE')
"#;

/// The first run's command: it starts the racer and ends once the racer is ready.
const ARMED: &str = "touch started; i=0; while [ ! -e armed ] && [ $i -lt 2000 ]; do \
                     sleep 0.01; i=$((i+1)); done";

/// The placeholder names the default `--protect` globs give directories.
const DIR_PLACEHOLDERS: [&str; 6] = [
    ".claude",
    ".vscode",
    ".idea",
    ".githooks",
    ".husky",
    ".envrc",
];

/// A run's empty placeholders leave its tree by a rename into the trash; what arrives
/// there is checked and, if it is not the empty placeholder, renamed back. The run's own
/// agent is gone by then, and any run with the same state directory whose tree holds the
/// placeholder keeps it in place (its lock). A run with another state directory is
/// excluded by nothing (SECURITY.md's known limit): here its agent, confined to `ws`,
/// works while the first run (workspace `ws/sub`) ends. It writes into the first run's
/// placeholders (plain directories in its tree), so the trash refuses them and sends them
/// back, and flips `ws/sub` to a symlink to `outside` in between: by its path, "back" was
/// `outside/<name>`, with the agent's files in it, a directory that agent may not write
/// (control: its own `mkdir` there is refused). Now the way back is the directory the
/// placeholder was taken from, by descriptor. The race is run up to 25 times (or 75 s);
/// before the fix it landed within a few runs in both arms (the agent's inotify watch
/// sees the first placeholder leave, and its many files make the trash's emptiness check
/// read a long first block).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_refused_trash_entry_goes_back_to_its_own_directory() {
    common::require_root_and_user_namespaces();
    let name = "trash entry sent back through a symlink";
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::new(PREFIX, VAR_TMP, owner, &["ws/sub", "outside", "state-b"]);
        let root = tree.root.clone();
        let (ws, sub, outside) = (root.join("ws"), root.join("ws/sub"), root.join("outside"));
        let mut racer = std::process::Command::new("/usr/bin/timeout");
        racer
            .args(["110", common::CODER, "sandbox", "--cd"])
            .arg(&ws)
            .args(["--", "python3", "-c", RACER])
            .arg(&ws)
            .arg(&outside)
            .env_clear()
            .env("PATH", sandbox_fixture::PATH)
            .env("HOME", root.join("home"))
            .env("CODER_STATE_DIR", root.join("state-b"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        sandbox_fixture::as_owner(&mut racer, owner);
        let racer = racer.spawn().unwrap();
        let landed = || {
            DIR_PLACEHOLDERS
                .iter()
                .any(|n| outside.join(n).join("planted").exists())
        };
        let wait_for = |path: &Path| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !path.exists() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no {}",
                    path.display()
                );
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        };
        wait_for(&ws.join("racer-ready"));
        // The racer stops flipping after 100 s: no round starts after 75 s (on a loaded
        // machine 25 rounds take longer than that; fewer rounds still guard the fix).
        let racing_until = std::time::Instant::now() + std::time::Duration::from_secs(75);
        let mut rounds = 0;
        while rounds < 25 && !landed() && std::time::Instant::now() < racing_until {
            rounds += 1;
            let mut first = std::process::Command::new("/usr/bin/timeout");
            first
                .args(["60", common::CODER, "sandbox", "--cd"])
                .arg(&sub)
                .args(["--", "sh", "-c", ARMED])
                .env_clear()
                .env("PATH", sandbox_fixture::PATH)
                .env("HOME", root.join("home"))
                .env("CODER_STATE_DIR", root.join("state"))
                .current_dir(&root)
                .stdin(std::process::Stdio::null());
            sandbox_fixture::as_owner(&mut first, owner);
            // Its end may fail (its git guard finds `ws/sub` gone mid-flip): no matter.
            first.output_bounded();
            // Stop the racer and wait for `ws/sub` to be a directory again; then a fresh
            // `ws/sub` for the next round.
            std::fs::write(ws.join("stop-flip"), "").unwrap();
            wait_for(&ws.join("idle"));
            for n in DIR_PLACEHOLDERS {
                let _ = std::fs::remove_dir_all(sub.join(n));
            }
            for f in ["started", "armed"] {
                let _ = std::fs::remove_file(sub.join(f));
            }
            let _ = std::fs::remove_file(ws.join("idle"));
            std::fs::remove_file(ws.join("stop-flip")).unwrap();
        }
        std::fs::write(ws.join("done"), "").unwrap();
        let out = racer.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains("DIRECT-REFUSED"),
            "{}: control: {out:?}",
            who(owner)
        );
        let case = format!("{}: {name} ({rounds} runs)", who(owner));
        if KNOWN_OPEN.contains(&name) {
            assert!(landed(), "{case}: now blocked");
        } else {
            assert!(
                !landed(),
                "{case}: the agent's directory landed in {}",
                outside.display()
            );
        }
    }
}

/// The fake CLI's start (a command the real CLI runs before its first request, such as a
/// `SessionStart` hook from a settings file the serial fallback does not look at): it
/// waits (inotify) for the ledger's scan to open the first file of `ws/a/`, which it
/// reads in walk order after it has taken every file's stat data, then rewrites
/// `ws/z-target` at once, thousands of reads before the scan reaches it.
const START_WRITER: &str = r#"python3 - <<'P'
import ctypes, os, select, struct, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
libc.inotify_add_watch(fd, b'a', 0x20)  # IN_OPEN
seen, deadline = False, time.time() + 20
while not seen and time.time() < deadline:
    if not select.select([fd], [], [], 1)[0]:
        continue
    buf = os.read(fd, 65536)
    while buf:
        wd, mask, cookie, n = struct.unpack('iIII', buf[:16])
        # A file's open, not the directory's own (the listing's).
        seen = seen or (n > 0 and not mask & 0x40000000)
        buf = buf[16 + n:]
open('z-target', 'w').write('rewritten at the start\n')
print('REWROTE' if seen else 'NO-OPEN')
P"#;

/// In a confined run of a plain workspace the ledger's "before" scan runs beside the
/// sandbox's setup and the CLI's start; the proxy holds the model's requests until it is
/// done, and what changes after the run's first process started is reported as changed
/// (the safety net, by ctime). The scan takes every file's stat data first and reads them
/// afterwards: a file rewritten in between kept the ctime from before the run with the
/// content from after the rewrite, and the ledger said "unchanged" with no warning. Now
/// the scan looks at the file again after reading it, and the rewrite is reported (a
/// warning names the file, which counts as changed). Control: the same rewrite after the
/// snapshot (no delay, the scan long done) is reported as an ordinary change.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_file_rewritten_between_the_scans_stat_and_read_is_not_reported_unchanged() {
    common::require_root_and_user_namespaces();
    let name = "rewrite between the scan's stat and read";
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::new(PREFIX, VAR_TMP, owner, &["ws/a"]);
        let ws = tree.root.join("ws");
        for i in 0..3000 {
            std::fs::write(ws.join(format!("a/{i:05}")), "x\n").unwrap();
        }
        std::fs::write(ws.join("z-target"), "as the user left it\n").unwrap();
        if owner.is_some() {
            sandbox_fixture::give_to_nobody(&ws);
        }
        let reported = |env: &Value| {
            let files = env["changes"]["files"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            files.iter().any(|f| f["path"] == "z-target")
        };
        let env = tree.run_with(&[], START_WRITER, &[("CODER_TEST_LEDGER_DELAY_MS", "1500")]);
        let case = format!("{}: {name}", who(owner));
        assert!(
            env["result"]
                .as_str()
                .unwrap_or_default()
                .contains("REWROTE"),
            "{case}: the start did not see the scan: {env}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("z-target")).unwrap(),
            "rewritten at the start\n"
        );
        if KNOWN_OPEN.contains(&name) {
            assert!(!reported(&env), "{case}: now reported: {env}");
        } else {
            assert!(reported(&env), "{case}: reported unchanged: {env}");
            let warned = env["warnings"].as_array().cloned().unwrap_or_default();
            assert!(
                warned
                    .iter()
                    .any(|w| w.as_str().unwrap_or_default().contains("z-target")),
                "{case}: no warning: {env}"
            );
        }

        // Control: the same rewrite once the scan is done is an ordinary change.
        std::fs::write(ws.join("z-target"), "as the user left it\n").unwrap();
        let payload = "sleep 1; echo changed > z-target; echo REWROTE";
        let env = tree.run(&[], payload);
        assert!(reported(&env), "{case}: control: {env}");
    }
}

/// `--transcript` and `--store` named with a `..` after a symlink: `..` climbs from the
/// symlink's target, not from where the path's text says. An earlier run's agent, confined
/// to `w`, turns `w/sub` into a symlink to `a/b` (its own tree); the user then names the
/// file `w/sub/../../logs/F`, which reads as `logs/F` beside `w` but opens `w/logs/F`,
/// where the next run's agent rewrites it. Refused now like the plain spelling. Control:
/// unconfined (no grant to be refused from), the payload lands in `w/logs`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_transcript_or_store_named_with_dotdot_after_a_planted_symlink_is_refused() {
    common::require_root_and_user_namespaces();
    let name = "transcript or store through .. after a symlink";
    for owner in [None, Some(NOBODY)] {
        for (flag, file) in [("--transcript", "t.jsonl"), ("--store", "coder.db")] {
            let tree = Tree::new(PREFIX, VAR_TMP, owner, &["w/a/b", "w/logs"]);
            let w = tree.root.join("w");
            let write = format!("--write={}", w.display());
            let env = tree.run(
                &[&write],
                &format!("ln -s a/b '{}/sub' && echo LINKED", w.display()),
            );
            let case = format!("{}: {name}: {flag}", who(owner));
            assert!(
                env["result"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("LINKED"),
                "{case}: {env}"
            );
            let real = w.join("logs").join(file);
            let spelled = format!("{}/sub/../../logs/{file}", w.display());
            let payload = format!("echo FORGED > '{}' && echo WROTE", real.display());
            let landed = || forged(&real);
            let env = tree.run(&[&write, flag, &spelled], &payload);
            assert_refused(name, &case, &env, &real, None);
            let _ = std::fs::remove_file(&real);
            let env = tree.run(
                &["--sandbox", "danger-full-access", &write, flag, &spelled],
                &payload,
            );
            assert!(landed(), "{case}: control: unconfined: {env}");
        }
    }
}

/// coder's state directory (its lock files, registry, transcripts) may not be reached by a
/// grant: round eleven compared grants with it by path, device and inode, and by where
/// they lie in their file system, but not the mounts *beneath* a grant, which the sandbox
/// carries into the private root with the grant. `m/x`, a bind mount of the state
/// directory, made `--write m` let the agent write `placeholders/` (here a file planted
/// there) and `--read m` let it read (and `flock`) the lock files. Both are refused now,
/// naming the state directory. Controls: the same grants without the mount run; and
/// unconfined (no grant to refuse) the agent writes there through the mount.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_a_mount_of_the_state_directory_is_refused() {
    common::require_root_and_user_namespaces();
    let name = "state directory mounted beneath a grant";
    for owner in [None, Some(NOBODY)] {
        for flag in ["--write", "--read"] {
            let mut tree = Tree::new(PREFIX, VAR_TMP, owner, &["m", "state/placeholders"]);
            let case = format!("{}: {name}: {flag}", who(owner));
            let m = tree.root.join("m");
            let grant = format!("{flag}={}", m.display());
            let planted = tree.root.join("state/placeholders/PLANTED");
            let payload = format!(
                "ls '{m}/x/placeholders' >/dev/null && echo LISTED; \
                 touch '{m}/x/placeholders/PLANTED' && echo WROTE",
                m = m.display()
            );
            // Control: without the mount the grant runs (and holds nothing of coder's).
            let env = tree.run(&[&grant], &payload);
            assert_eq!(env["success"], true, "{case}: control: {env}");
            tree.bind("state", "m/x");
            let env = tree.run(&[&grant], &payload);
            if KNOWN_OPEN.contains(&name) {
                let said = env["result"].as_str().unwrap_or_default();
                assert!(said.contains("LISTED"), "{case}: now blocked: {env}");
            } else {
                assert_eq!(env["error_kind"], "config_error", "{case}: {env}");
                let error = env["error"].as_str().unwrap_or_default();
                assert!(error.contains("state"), "{case}: {env}");
                assert!(!planted.exists(), "{case}: the payload landed: {env}");
            }
            let env = tree.run(&["--sandbox", "danger-full-access", &grant], &payload);
            assert!(planted.exists(), "{case}: control: unconfined: {env}");
            let _ = std::fs::remove_file(&planted);
        }
    }
}

/// The same submount for `--transcript` and `--store`: `w/m` a bind mount of `safe`,
/// `--write w` with the file in `safe` gave it to the agent as `w/m/F`. Refused now.
/// Control: without the mount the same run goes and the agent cannot reach the file.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_transcript_or_store_in_a_directory_mounted_beneath_a_write_grant_is_refused() {
    common::require_root_and_user_namespaces();
    let name = "transcript or store mounted beneath a write grant";
    for owner in [None, Some(NOBODY)] {
        for (flag, file) in [("--transcript", "t.jsonl"), ("--store", "coder.db")] {
            let mut tree = Tree::new(PREFIX, VAR_TMP, owner, &["w/m", "safe"]);
            let case = format!("{}: {name}: {flag}", who(owner));
            let (w, safe) = (tree.root.join("w"), tree.root.join("safe"));
            let write = format!("--write={}", w.display());
            let target = safe.join(file);
            let through = w.join("m").join(file);
            let payload = format!("echo FORGED > '{}' && echo WROTE", through.display());
            let landed = || forged(&target);
            let env = tree.run(&[&write, flag, target.to_str().unwrap()], &payload);
            assert_eq!(env["success"], true, "{case}: control: {env}");
            assert!(
                !landed(),
                "{case}: control: landed without the mount: {env}"
            );
            let _ = std::fs::remove_file(&target);
            tree.bind("safe", "w/m");
            let env = tree.run(&[&write, flag, target.to_str().unwrap()], &payload);
            assert_refused(name, &case, &env, &target, None);
        }
    }
}

/// Sends SIGTERM to `argv[1]` with `rt_sigqueueinfo`, its info naming `argv[2]` as sender.
const FORGE_SIGTERM: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
info = ctypes.create_string_buffer(128)
struct.pack_into('iii', info, 0, 15, 0, -1)  # SIGTERM, no errno, SI_QUEUE
struct.pack_into('iI', info, 16, int(sys.argv[2]), os.getuid())
print('SENT' if libc.syscall(129, int(sys.argv[1]), 15, info) == 0 else 'REFUSED')
"#;

/// `coder ask-server` ends at its parent's (the CLI's) SIGTERM when no call is held, and
/// outlives everyone else's. A SIGTERM queued by another process of the user with a
/// forged sender (the CLI's pid) ended it too; it is outlived now. Control: the parent's
/// own `kill` ends it at once. (Here the test is the parent, as the CLI would be.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_forged_sigterm_naming_the_cli_does_not_end_the_ask_server() {
    use std::io::{BufRead, Write};
    common::require_root_and_user_namespaces();
    let name = "forged SIGTERM ends the ask server";
    let me = std::process::id().to_string();
    for owner in [None, Some(NOBODY)] {
        let case = format!("{}: {name}", who(owner));
        let mut server = std::process::Command::new(common::CODER);
        server
            .arg("ask-server")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        sandbox_fixture::as_owner(&mut server, owner);
        let mut server = server.spawn().unwrap();
        let mut stdin = server.stdin.take().unwrap();
        let mut stdout = std::io::BufReader::new(server.stdout.take().unwrap());
        // Its answer to `initialize` says it is serving (its signal thread is running).
        stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\"}\n")
            .unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.contains("serverInfo"), "{case}: {line}");
        let pid = server.id().to_string();
        let mut forge = std::process::Command::new("python3");
        forge.args(["-c", FORGE_SIGTERM, &pid, &me]);
        sandbox_fixture::as_owner(&mut forge, owner);
        let out = forge.output_bounded();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("SENT"),
            "{case}: {out:?}"
        );
        let ended_within = |server: &mut std::process::Child, ms: u64| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
            while std::time::Instant::now() < deadline {
                if server.try_wait().unwrap().is_some() {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            false
        };
        let ended = ended_within(&mut server, 1000);
        if KNOWN_OPEN.contains(&name) {
            assert!(ended, "{case}: now outlived");
        } else {
            assert!(!ended, "{case}: the forged SIGTERM ended it");
            // Control: the parent's own SIGTERM ends it at once.
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(server.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
            assert!(
                ended_within(&mut server, 10_000),
                "{case}: control: outlived its parent's SIGTERM"
            );
        }
        drop(stdin);
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// `--tool-caches` gives the agent `~/.cache/pip` and the other caches to write, like a
/// `--write` path: a transcript or store there was let through and rewritten. Refused now.
/// Control: without `--tool-caches` the same file runs and stays coder's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_transcript_or_store_in_a_writable_tool_cache_is_refused() {
    common::require_root_and_user_namespaces();
    let name = "transcript or store in a writable tool cache";
    for owner in [None, Some(NOBODY)] {
        for (flag, file) in [("--transcript", "t.jsonl"), ("--store", "coder.db")] {
            let tree = Tree::new(PREFIX, VAR_TMP, owner, &["home/.cache/pip"]);
            let case = format!("{}: {name}: {flag}", who(owner));
            let target = tree.root.join("home/.cache/pip").join(file);
            let payload = format!("echo FORGED > '{}' && echo WROTE", target.display());
            let landed = || forged(&target);
            let env = tree.run(&[flag, target.to_str().unwrap()], &payload);
            assert_eq!(env["success"], true, "{case}: control: {env}");
            assert!(
                !landed(),
                "{case}: control: landed without --tool-caches: {env}"
            );
            let _ = std::fs::remove_file(&target);
            let env = tree.run(&["--tool-caches", flag, target.to_str().unwrap()], &payload);
            assert_refused(name, &case, &env, &target, None);
        }
    }
}
