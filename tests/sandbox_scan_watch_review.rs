//! Independent review of the start scan's proof that it read a tree that held still
//! (`src/sandbox/scan_watch.rs`, wired into `src/sandbox/scan.rs`), written as an attacker
//! who has read that code: another process of the user's (another confined agent sharing
//! the workspace, which cannot read the secrets but may rename the directories above them
//! and make directories of its own) works against the next run's scan. Every run must show
//! no secret or refuse to start.
//!
//! Each attack runs as root and as uid 65534 and is tallied: runs that started and showed
//! no secret (held), runs refused, runs that showed a secret (leaked). An attack in
//! [`KNOWN_OPEN`] is a hole found by this review and not yet closed: it must still leak
//! (a ratchet: once closed, it must leave the list); any other attack must never leak.
//!
//! `CODER_REVIEW_BIN` runs the same attacks against another build of coder (the binary
//! before the change, say) to show that they discriminate.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::sandbox_fixture::{Fixture, arms, as_arm, run_text};
use common::{Bounded, CODER};

/// What every secret holds; no output of a confined run may contain it.
const SECRET: &str = "TOPSECRET";

/// Attacks that still leak (holes found by this review, not yet closed).
const KNOWN_OPEN: &[&str] = &[];

/// What a run refused because the tree kept changing says.
const REFUSALS: [&str; 5] = [
    "while coder scanned the workspace for secrets",
    "changed between the secret scan and the mount",
    "git guard incomplete",
    // An earlier run's guard stopped short in the moving tree, and so did its check.
    "stopped before it had checked",
    // The walk's `openat2(RESOLVE_BENEATH)` met a rename mid-lookup: a refusal, though
    // not retried like ENOENT (`scan::raced`) and not worded for the user.
    "sandbox setup: open",
];

/// The coder under review: this build, or `CODER_REVIEW_BIN`.
fn coder() -> String {
    std::env::var("CODER_REVIEW_BIN").unwrap_or_else(|_| CODER.to_owned())
}

/// `coder sandbox ARGS --cd WS -- sh -c SCRIPT` as the fixture's user: exit code, output.
fn sandbox(fx: &Fixture, ws: &Path, script: &str) -> (i32, String) {
    let mut cmd = fx.command(coder());
    cmd.arg("sandbox")
        .arg("--cd")
        .arg(ws)
        .args(["--", "sh", "-c", script]);
    run_text(&mut cmd)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Runs of one attack, for one arm.
#[derive(Debug, Default)]
struct Tally {
    held: usize,
    refused: usize,
    leaked: usize,
}

impl Tally {
    /// Count one run of a script that ends with `echo END`.
    fn count(&mut self, name: &str, nobody: bool, rc: i32, out: &str) {
        assert!(!out.contains("panicked"), "{name} nobody={nobody}: {out}");
        if out.contains(SECRET) {
            self.leaked += 1;
        } else if rc == 0 && out.contains("END") {
            self.held += 1;
        } else {
            assert!(
                REFUSALS.iter().any(|r| out.contains(r)),
                "{name} nobody={nobody}: neither ran nor refused as expected: rc {rc}: {out}"
            );
            self.refused += 1;
        }
    }

    /// The attack's verdict: no leak, unless it is known open, where it must still leak.
    fn verdict(&self, name: &str, nobody: bool) {
        eprintln!(
            "{name} nobody={nobody} ({}): held {}, refused {}, leaked {}",
            coder(),
            self.held,
            self.refused,
            self.leaked
        );
        if KNOWN_OPEN.contains(&name) {
            assert!(
                self.leaked > 0,
                "{name} nobody={nobody}: blocked now, remove it from KNOWN_OPEN: {self:?}"
            );
        } else {
            assert_eq!(self.leaked, 0, "{name} nobody={nobody}: leaked: {self:?}");
        }
    }
}

/// One confined run moves directories holding secrets (which it cannot read: each is
/// masked) into a git dir of its own making, or renames one to `.git`; the next confined
/// run reads them. The control: unconfined, the moved files hold the secret (the moves
/// happened, and the reads would show it).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_secret_directory_moved_into_a_git_dir() {
    let name = "a_secret_directory_moved_into_a_git_dir";
    for nobody in arms() {
        let fx = Fixture::new("coder-watch-gitdir-", nobody, &["ws", "home", "state"]);
        let ws = fx.ws();
        for d in ["app", "cfg"] {
            write(&ws.join(d).join(".env"), &format!("{SECRET} {d}\n"));
            write(&ws.join(d).join("key.pem"), &format!("{SECRET} {d} pem\n"));
        }
        fx.own(fx.root());
        let moved = ["lib/.git/.env", "lib/.git/key.pem", "n/.git/x/.env"];
        let (rc, out) = sandbox(
            &fx,
            &ws,
            "cat app/.env cfg/.env 2>&1; mkdir lib && mv app lib/.git && \
             mkdir -p n/.git && mv cfg n/.git/x && echo MOVED; echo END",
        );
        assert_eq!(rc, 0, "nobody={nobody}: {out}");
        assert!(out.contains("MOVED"), "nobody={nobody}: {out}");
        assert!(
            !out.contains(SECRET),
            "nobody={nobody}: the mover read: {out}"
        );
        let mut tally = Tally::default();
        for path in moved {
            let (rc, out) = sandbox(&fx, &ws, &format!("cat '{path}'; echo END"));
            tally.count(name, nobody, rc, &out);
        }
        // The control: the moved files are the secrets, where the reads looked.
        for path in moved {
            let (rc, out) = run_text(as_arm(nobody, 60, "cat").arg(ws.join(path)));
            assert_eq!(rc, 0, "control nobody={nobody}: {out}");
            assert!(out.contains(SECRET), "control nobody={nobody}: {out}");
        }
        tally.verdict(name, nobody);
    }
}

/// `renameat2(RENAME_EXCHANGE)`: both names stay, the directories behind them swap.
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let a = CString::new(a.as_os_str().as_bytes()).unwrap();
    let b = CString::new(b.as_os_str().as_bytes()).unwrap();
    // SAFETY: both paths are NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Another process swaps, as fast as the kernel goes, a directory holding a secret thirty
/// levels down (listed last) with an empty directory of the same name in a directory the
/// walk lists first: no entry is created, only exchanged, under names the scan has
/// already seen. Every run shows no secret or refuses.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_directory_exchanged_across_the_walk() {
    let name = "a_directory_exchanged_across_the_walk";
    const RUNS: usize = 25;
    for nobody in arms() {
        let fx = Fixture::new("coder-watch-exchange-", nobody, &["ws", "home", "state"]);
        let ws = fx.ws();
        let deep: PathBuf = (1..=30).fold(PathBuf::from("zz"), |p, i| p.join(format!("l{i}")));
        write(&ws.join(&deep).join("d/.env"), &format!("{SECRET}\n"));
        std::fs::create_dir_all(ws.join("aa/d")).unwrap();
        fx.own(fx.root());
        let stop = Arc::new(AtomicBool::new(false));
        let mover = {
            let (stop, a, b) = (stop.clone(), ws.join("aa/d"), ws.join(&deep).join("d"));
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    exchange(&a, &b).unwrap();
                    swaps += 1;
                }
                swaps
            })
        };
        let reader = format!(
            "i=0; while [ $i -lt 10 ]; do cat aa/d/.env {deep}/d/.env; i=$((i+1)); done \
             2>/dev/null; echo END",
            deep = deep.display()
        );
        let mut tally = Tally::default();
        for _ in 0..RUNS {
            let (rc, out) = sandbox(&fx, &ws, &reader);
            tally.count(name, nobody, rc, &out);
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = mover.join().unwrap();
        assert!(swaps > 1000, "nobody={nobody}: {swaps} swaps");
        tally.verdict(name, nobody);
    }
}

/// What a user does in the workspace while a run starts must not make the run refuse:
/// `git status` again and again (an IDE does: it writes `.git/index.lock` and renames it),
/// and a build writing and renaming plain files. Each run must start. (A build that makes
/// new directories throughout does make runs refuse: a known limit, counted and printed.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn git_status_and_a_build_writing_files_do_not_make_runs_refuse() {
    const RUNS: usize = 15;
    for nobody in arms() {
        let fx = Fixture::new("coder-watch-busy-", nobody, &["ws", "home", "state"])
            .with_env(&[("GIT_CONFIG_NOSYSTEM", "1")])
            .without_env("XDG_CONFIG_HOME");
        let ws = fx.ws();
        for i in 0..20 {
            write(&ws.join(format!("src/m{i}/lib.rs")), "fn main() {}\n");
        }
        write(&ws.join(".env"), &format!("{SECRET}\n"));
        std::fs::create_dir_all(ws.join("build")).unwrap();
        fx.own(fx.root());
        let git = |args: &[&str]| {
            let o = fx
                .command("git")
                .args(args)
                .current_dir(&ws)
                .output_bounded();
            assert!(o.status.success(), "git {args:?}: {o:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "src"]);
        git(&[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@example.invalid",
            "commit",
            "-qm",
            "init",
        ]);
        for dirs in [false, true] {
            let stop = Arc::new(AtomicBool::new(false));
            let status = {
                let (stop, ws, home) = (stop.clone(), ws.clone(), fx.root().join("home"));
                std::thread::spawn(move || {
                    let (mut n, mut failed) = (0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        let o = as_arm(nobody, 30, "git")
                            .args(["status", "--porcelain"])
                            .env("GIT_CONFIG_NOSYSTEM", "1")
                            .env("HOME", &home)
                            .current_dir(&ws)
                            .output_bounded();
                        // The user's git can fail while coder makes or removes its
                        // placeholders in `.git` (`commondir`): counted, not asserted.
                        failed += u64::from(!o.status.success());
                        n += 1;
                    }
                    (n, failed)
                })
            };
            let build = {
                let (stop, build) = (stop.clone(), ws.join("build"));
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let tmp = build.join(format!("out{}.tmp", n % 50));
                        std::fs::write(&tmp, "x").unwrap();
                        std::fs::rename(&tmp, build.join(format!("out{}.log", n % 50))).unwrap();
                        if dirs {
                            let d = build.join(format!("obj{n}"));
                            std::fs::create_dir(&d).unwrap();
                            std::fs::remove_dir(&d).unwrap();
                        }
                        n += 1;
                    }
                    n
                })
            };
            let mut tally = Tally::default();
            for _ in 0..RUNS {
                let (rc, out) = sandbox(
                    &fx,
                    &ws,
                    "cat .env; git status --porcelain >/dev/null; echo END",
                );
                tally.count("busy workspace", nobody, rc, &out);
            }
            stop.store(true, Ordering::Relaxed);
            let (statuses, failed) = status.join().unwrap();
            let writes = build.join().unwrap();
            eprintln!(
                "busy workspace (build makes dirs: {dirs}) nobody={nobody} ({}): {} git \
                 status ({failed} failed), {writes} build steps: started {}, refused {}, leaked {}",
                coder(),
                statuses,
                tally.held,
                tally.refused,
                tally.leaked
            );
            assert!(
                statuses > 5 && writes > 100,
                "nobody={nobody}: too little load"
            );
            assert_eq!(tally.leaked, 0, "nobody={nobody}: {tally:?}");
            if !dirs {
                assert_eq!(
                    tally.refused, 0,
                    "nobody={nobody}: false refusals: {tally:?}"
                );
            }
        }
    }
}
