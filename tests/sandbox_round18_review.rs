//! Round eighteen's review: everything but git (the last five rounds' subject), attacked by
//! someone who did not write the sandbox and has read it: the mounts of the private root,
//! what coder does with the run's directories after the agent is gone, `/proc` and `/sys`.
//! Every attack runs through the built binary as root and as uid 65534 where it applies,
//! each with a control showing that its setup lands without the defence.
//!
//! Found open when this review started, closed with it:
//! * **Metadata of read grants.** Landlock mediates opens, creations, renames and removals,
//!   not `chmod`, `chown`, `utimensat`, ACLs or extended attributes, and every read grant
//!   was a writable bind mount: an agent running as root (uid 0 owns the system's files)
//!   made `/usr`, `/etc` and `/opt` files world-writable, changed the modes of the host's
//!   `/dev/full`, of sysfs and tracefs files, and of `/proc` entries (the kernel keeps
//!   those in one place for every `/proc` of the host: a `chmod 0400 /proc/version` inside
//!   showed in the next `/proc` mounted outside); any agent changed the modes and times of
//!   its own files in `--read` paths and of the workspace in `read-only` mode. Every read
//!   grant is a read-only mount now, and so is the sandbox's `/proc`.
//! * **A deep chain of directories left in `$TMPDIR`.** coder removed the run's directory
//!   with the standard library's `remove_dir_all`, which recurses once per level and holds
//!   a descriptor per level: 20 000 nested directories overflowed the stack of the thread
//!   removing them and coder aborted at the run's end, leaving them in its state
//!   directory; the MCP server's recursive `delete-file` of a chain deeper than its
//!   descriptor limit failed (`C216`) and, on one of its threads, would abort the server.
//!   Both remove trees iteratively now (`config::run_dirs::try_remove_tree`).
//!
//! Looked at and held (no test of their own here): the egress proxy (a `CONNECT` is
//! checked by its own target, the plain-HTTP head by its absolute URI, both against exact
//! `host:port` entries, normalised before the comparison and resolved from the normalised
//! name; the head is bounded in size and time); seccomp's x32 and i386 entry points (the
//! filter's architecture check kills a call of another ABI: `int 0x80` with `unshare`
//! ended the process with `SIGSYS`); `socket(AF_INET, SOCK_PACKET, 0)`, which the kernel
//! turns into an `AF_PACKET` socket after seccomp let the family through, is refused for
//! want of `CAP_NET_RAW` (dropped), and the namespace has only its loopback anyway; an
//! unreadable directory (`chmod 000`) hiding a secret from the next run's scan (the next
//! run masks it all the same).
//!
//! Known open when the review ended, closed in round nineteen:
//! * **The workspace tools read a secret under another name.** A hard link `notes.txt` of
//!   `.env` (made by the user: a confined agent cannot link a masked file) is masked by
//!   the sandbox, which looks for other names of what it masks, but the MCP server's
//!   `read-file` jail matched the deny globs on the names it is given (and the one its
//!   descriptor shows) only, and returned the secret. A file with more than one link is
//!   now compared with the secrets the sandbox's own scan finds in the base.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use common::Bounded;
use common::sandbox_fixture::{self, Fixture};

/// Attacks of this file measured open today.
const KNOWN_OPEN: &[&str] = &[];

fn who(nobody: bool) -> &'static str {
    if nobody { "nobody" } else { "root" }
}

/// The mode (octal, as `stat -c %a` prints it) and modification time of `path` on the host.
fn mode_and_time(path: &std::path::Path) -> (u32, i64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    (meta.mode() & 0o7777, meta.mtime())
}

/// A file of a `--read` path, and one of the workspace in `read-only` mode, both the arm's
/// user's own: the agent makes them world-writable and sets their times back. Confined,
/// neither changes; unconfined (the control), both do.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_metadata_of_files_granted_for_reading_is_not_the_agents_to_change() {
    let name = "metadata of read grants";
    for nobody in sandbox_fixture::arms() {
        for mode in ["danger-full-access", "read-only"] {
            let case = format!("{} {mode}", who(nobody));
            let fx = Fixture::new("coder-r18-meta-", nobody, &["ws", "home", "state", "ref"]);
            let read_file = fx.root().join("ref/notes.txt");
            let ws_file = fx.ws().join("main.c");
            sandbox_fixture::write(&read_file, "notes\n");
            sandbox_fixture::write(&ws_file, "int main;\n");
            for file in [&read_file, &ws_file] {
                std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
                    .unwrap();
            }
            fx.own(fx.root());
            let before = [mode_and_time(&read_file), mode_and_time(&ws_file)];
            let refs = fx.root().join("ref").display().to_string();
            let script = format!(
                "for f in '{}' '{}'; do chmod 0777 \"$f\"; touch -d '2001-01-01 00:00:00' \"$f\"; done; true",
                read_file.display(),
                ws_file.display()
            );
            let (rc, out) = fx.sandbox(&["--mode", mode, "--read", &refs], &script);
            assert_eq!(rc, 0, "{case}: {out}");
            let after = [mode_and_time(&read_file), mode_and_time(&ws_file)];
            if mode == "danger-full-access" {
                assert!(
                    after
                        .iter()
                        .all(|(m, t)| *m == 0o777 && *t < 1_000_000_000 + 10_000_000),
                    "{case}: control: {after:?}: {out}"
                );
                continue;
            }
            if KNOWN_OPEN.contains(&name) {
                assert_ne!(before, after, "{case}: {name} is closed: {out}");
            } else {
                assert_eq!(
                    before, after,
                    "{case}: the agent changed a read grant's metadata: {out}"
                );
            }
        }
    }
}

/// As root, the agent owns the host's files: a no-op `chmod` (the mode each already has,
/// so that nothing changes if it lands) of a system file, the host's `/dev/full`, a sysfs
/// file and a `/proc` entry whose mode the kernel keeps for every `/proc` of the host.
/// Confined, each is refused; unconfined (the control), each succeeds. (uid 65534 owns
/// none of them: the kernel refuses it either way.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_root_agent_changes_the_mode_of_no_host_file() {
    let name = "metadata of read grants";
    common::require_root_and_user_namespaces();
    let targets = [
        "/usr/bin/env",
        "/etc/passwd",
        "/dev/full",
        "/sys/kernel/uevent_seqnum",
        "/proc/version",
    ];
    let script: String = targets
        .iter()
        .map(|f| format!("chmod \"$(stat -c %a {f})\" {f} && echo 'CHANGED {f}'; "))
        .collect::<String>()
        + "true";
    for mode in ["danger-full-access", "workspace-write", "read-only"] {
        let fx = Fixture::new("coder-r18-host-", false, &["ws", "home", "state"]);
        let (rc, out) = fx.sandbox(&["--mode", mode], &script);
        assert_eq!(rc, 0, "{mode}: {out}");
        let changed: Vec<&str> = targets
            .iter()
            .copied()
            .filter(|f| out.contains(&format!("CHANGED {f}")))
            .collect();
        if mode == "danger-full-access" {
            assert_eq!(changed, targets, "{mode}: control: {out}");
        } else if KNOWN_OPEN.contains(&name) {
            assert_eq!(changed, targets, "{mode}: {name} is closed: {out}");
        } else {
            assert!(
                changed.is_empty(),
                "{mode}: the agent changed the mode of {changed:?}: {out}"
            );
        }
    }
}

/// A workspace inside a read grant (`/opt/project`, `/opt` being a system grant) stays
/// writable once the grant around it is a read-only mount, and its masks still hold;
/// the grant's own files keep their modes.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_workspace_inside_a_read_grant_stays_writable() {
    common::require_root_and_user_namespaces();
    let base = tempfile::Builder::new()
        .prefix("coder-r18-opt-")
        .tempdir_in("/opt")
        .unwrap();
    let root = std::fs::canonicalize(base.path()).unwrap();
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let ws = root.join("project");
    sandbox_fixture::write(&ws.join(".env"), "SECRET=r18\n");
    sandbox_fixture::write(&root.join("shared.txt"), "shared\n");
    let fx = Fixture::new("coder-r18-optfx-", false, &["home", "state"]);
    let shared = root.join("shared.txt");
    let before = mode_and_time(&shared);
    let script = format!(
        "echo made > new.txt && cat new.txt; cat .env; echo; chmod 0777 '{}'; true",
        shared.display()
    );
    let (rc, out) = sandbox_fixture::run_text(&mut fx.sandbox_in(&ws, &[], &script));
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("made"), "the workspace is not writable: {out}");
    assert!(!out.contains("SECRET=r18"), "the mask did not hold: {out}");
    assert_eq!(
        std::fs::read_to_string(ws.join("new.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(mode_and_time(&shared), before, "{out}");
}

/// The agent leaves a chain of 20 000 nested directories in its `$TMPDIR` (the run's
/// directory in coder's state directory). coder removed it at the run's end with the
/// standard library's `remove_dir_all`, which recurses once per level, on a thread of its
/// own: the stack overflowed and coder aborted (`SIGABRT`, exit 134), its run directory
/// left for good. Now the run ends as its command did and nothing of the run is left in
/// the state directory once the next run has pruned the trash. The chain's depth is
/// checked too (the payload's own control: it made every level).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_deep_chain_of_directories_in_tmpdir_does_not_crash_coder() {
    let name = "deep chain in TMPDIR";
    for nobody in sandbox_fixture::arms() {
        let case = who(nobody);
        let fx = Fixture::new("coder-r18-deep-", nobody, &["ws", "home", "state"]);
        fx.own(fx.root());
        // What a failing run leaves is removed by `rm` (the test's own temporary
        // directory would recurse as deep as coder did).
        let _cleanup = RemoveWithRm(fx.root().join("state"));
        // Chains of 1000 levels made near the top, then each renamed into the bottom of
        // the one before (Landlock walks every level of a path it checks: one level at
        // a time, 20 000 levels cost minutes).
        let script = r#"
import os
os.chdir(os.environ['TMPDIR'])
bottoms = []
for c in range(20):
    fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
    os.mkdir('c%d' % c, 0o700)
    for name in ['c%d' % c] + ['d'] * 999:
        if name == 'd':
            os.mkdir(name, 0o700, dir_fd=fd)
        below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    bottoms.append(fd)
for c in range(1, 20):
    os.rename('c%d' % c, 'd', dst_dir_fd=bottoms[c - 1])
fd = os.open('c0', os.O_RDONLY | os.O_DIRECTORY)
levels = 1
while True:
    try:
        below = os.open('d', os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    except FileNotFoundError:
        break
    os.close(fd)
    fd = below
    levels += 1
print('LEVELS', levels)
"#;
        let mut cmd = sandbox_fixture::as_arm(nobody, 600, common::CODER);
        cmd.env("HOME", fx.root().join("home"))
            .env("CODER_STATE_DIR", fx.root().join("state"))
            .arg("sandbox")
            .arg("--cd")
            .arg(fx.ws())
            .env("PATH", sandbox_fixture::PATH)
            .args(["--", "/usr/bin/python3", "-c", script]);
        let out = common::run_bounded(&mut cmd, std::time::Duration::from_secs(600))
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let printed = sandbox_fixture::printed(&out);
        assert!(
            printed.contains("LEVELS 20000"),
            "{case}: the chain was not made: {printed}"
        );
        let aborted = out.status.code() != Some(0);
        if KNOWN_OPEN.contains(&name) {
            assert!(aborted, "{case}: {name} is closed: {printed}");
            continue;
        }
        assert!(
            !aborted,
            "{case}: coder did not end as its command did: {out:?}"
        );
        // A later run (long enough for the trash to be pruned while it runs) leaves the
        // state directory without the chain.
        let (rc, later) = fx.sandbox(&[], "sleep 3");
        assert_eq!(rc, 0, "{case}: {later}");
        let depth = deepest(&fx.root().join("state"));
        assert!(
            depth < 50,
            "{case}: {depth} levels left in the state directory"
        );
    }
}

/// The depth of the deepest directory below `dir` (walked by descriptor, level by level).
fn deepest(dir: &std::path::Path) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        if depth > 100 {
            continue;
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    deepest
}

/// Removes a tree with `rm -rf` when dropped (GNU `rm` walks any depth).
struct RemoveWithRm(std::path::PathBuf);

impl Drop for RemoveWithRm {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rm")
            .arg("-rf")
            .arg(&self.0)
            .status();
    }
}

/// The MCP server's `delete-file` (here through `coder fs`, the same code) of a folder an
/// agent filled with a chain of nested folders deeper than the server's descriptor limit
/// (here 600 levels under a limit of 128; the default soft limit is 1024): the standard
/// library's `remove_dir_all` holds a descriptor a level, answered `C216` ("Too many open
/// files") and left the folder; deeper still, on a thread of the server (a smaller stack),
/// it would overflow the stack and abort the server with every run it watched. Now the
/// folder goes.
#[test]
fn a_deep_chain_of_folders_is_deleted_by_the_workspace_tools() {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, mkdirat};
    let base = tempfile::tempdir().unwrap();
    std::fs::create_dir(base.path().join("build")).unwrap();
    let mut current = openat(
        nix::fcntl::AT_FDCWD,
        &base.path().join("build"),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    for _ in 0..600 {
        mkdirat(&current, "d", Mode::from_bits_truncate(0o755)).unwrap();
        current = openat(
            &current,
            "d",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
    }
    drop(current);
    let _cleanup = RemoveWithRm(base.path().join("build"));
    let out = std::process::Command::new("prlimit")
        .args([
            "--nofile=128",
            "--",
            common::CODER,
            "fs",
            "delete-file",
            "--base",
        ])
        .arg(base.path())
        .arg(r#"{"path":"build","recursive":true}"#)
        .stdin(std::process::Stdio::null())
        .output_within(std::time::Duration::from_secs(300));
    let printed = sandbox_fixture::printed(&out);
    assert!(out.status.success(), "{printed}");
    assert!(!base.path().join("build").exists(), "{printed}");
}

/// `coder fs VERB PAYLOAD --base WS` as the arm's user: whether it succeeded, what it
/// printed.
fn tool(fx: &Fixture, verb: &str, payload: &str) -> (bool, String) {
    let out = fx
        .command(common::CODER)
        .args(["fs", verb, payload, "--base"])
        .arg(fx.ws())
        .env_remove("CODER_CONFIG")
        .output_within(std::time::Duration::from_secs(90));
    (out.status.success(), sandbox_fixture::printed(&out))
}

/// A secret with second names in the workspace (`notes.txt` and `old/copy.txt`, hard links
/// of `.env`, and a symlink `alias` to `notes.txt`), made by the user (a confined agent
/// cannot link a masked file): the sandbox masks it under every name (the unconfined
/// control, `danger-full-access`, reads it), and the workspace tools refuse it by every
/// name: `read-file`, `search`, `update-file`, `create-file` over it, `delete-file` of it
/// and of a folder holding it, and flag it in `list-folder` and `tree`. An ordinary file
/// beside it is read, searched and listed (the tools work). As root and as uid 65534.
/// Round eighteen's binary read it by the other name (a ratchet until round nineteen).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_workspace_tools_read_no_secret_by_its_other_name() {
    for nobody in sandbox_fixture::arms() {
        let case = who(nobody);
        let fx = Fixture::new("coder-r18-link-", nobody, &["ws/old", "home", "state"]);
        let ws = fx.ws();
        sandbox_fixture::write(&ws.join(".env"), "SECRET=r18link\n");
        sandbox_fixture::write(&ws.join("plain.txt"), "VISIBLE=r18plain\n");
        std::fs::hard_link(ws.join(".env"), ws.join("notes.txt")).unwrap();
        std::fs::hard_link(ws.join(".env"), ws.join("old/copy.txt")).unwrap();
        std::os::unix::fs::symlink("notes.txt", ws.join("alias")).unwrap();
        fx.own(fx.root());
        let script = "cat notes.txt old/copy.txt alias; echo END";
        let (rc, open) = fx.sandbox(&["--mode", "danger-full-access"], script);
        assert!(
            rc == 0 && open.matches("SECRET=r18link").count() == 3,
            "{case}: control: unconfined, every name shows the secret: {open}"
        );
        let (rc, inside) = fx.sandbox(&[], script);
        assert!(
            rc == 0 && inside.contains("END") && !inside.contains("SECRET=r18link"),
            "{case}: the sandbox shows another name: {inside}"
        );
        let (ok, plain) = tool(&fx, "read-file", r#"{"path":"plain.txt"}"#);
        assert!(ok && plain.contains("VISIBLE=r18plain"), "{case}: {plain}");
        for path in ["notes.txt", "old/copy.txt", "alias"] {
            let (ok, out) = tool(&fx, "read-file", &format!(r#"{{"path":"{path}"}}"#));
            assert!(
                !ok && !out.contains("SECRET=r18link") && out.contains("non-accessible"),
                "{case}: read-file {path}: {out}"
            );
        }
        let (ok, found) = tool(&fx, "search", r#"{"pattern":"r18"}"#);
        assert!(
            ok && found.contains("VISIBLE=r18plain") && !found.contains("SECRET=r18link"),
            "{case}: search: {found}"
        );
        for (verb, payload) in [
            (
                "update-file",
                r#"{"path":"notes.txt","replace":[{"pattern":"r18link","replacement":"gone"}]}"#,
            ),
            (
                "create-file",
                r#"{"path":"notes.txt","content":"x","overwrite":true}"#,
            ),
            ("delete-file", r#"{"path":"notes.txt"}"#),
            ("delete-file", r#"{"path":"old","recursive":true}"#),
        ] {
            let (ok, out) = tool(&fx, verb, payload);
            assert!(
                !ok && out.contains("non-accessible"),
                "{case}: {verb}: {out}"
            );
        }
        for name in ["notes.txt", "old/copy.txt"] {
            assert!(ws.join(name).exists(), "{case}: {name} is gone");
        }
        assert_eq!(
            std::fs::read_to_string(ws.join(".env")).unwrap(),
            "SECRET=r18link\n",
            "{case}: the secret was written"
        );
        let (ok, tree) = tool(&fx, "tree", r#"{"path":"."}"#);
        assert!(ok, "{case}: tree: {tree}");
        let tree: serde_json::Value = serde_json::from_str(tree.trim()).unwrap();
        let flagged = |nodes: &serde_json::Value, name: &str| {
            nodes
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["name"] == name)
                .map(|n| n["non_accessible"].clone())
        };
        let children = &tree["children"];
        let old = children
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == "old")
            .unwrap();
        for (nodes, name, want) in [
            (children, "notes.txt", true),
            (children, "alias", true),
            (&old["children"], "copy.txt", true),
            (children, "plain.txt", false),
        ] {
            assert_eq!(
                flagged(nodes, name),
                Some(serde_json::json!(want)),
                "{case}: tree: {name}: {tree}"
            );
        }
    }
}
