//! The cost of `changes.ignored` (DESIGN §8, round twenty): the walk of a git workspace's
//! ignored trees after every run. A repository of 1 000 tracked files, with and without an
//! ignored `target/` of 100 000 files in 1 000 directories, warm: the walk alone
//! ([`coder::workspace::ignored::changed_since`]), git's listing of the ignored roots
//! alone, and the ledger's whole "after" ([`Ledger::changes`]) on each.
//!
//! `cargo test --bench ledger_ignored` (debug build) or `cargo bench --bench
//! ledger_ignored` (optimised); `IGNORED_ROUNDS` sets the rounds (default 21).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use coder::workspace::Ledger;
use coder::workspace::git::GitRepo;
use coder::workspace::ignored;

fn fill(root: &Path, under: &str, dirs: usize, per_dir: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("{under}/d{}/e{d}", d / 100));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir {
            std::fs::write(dir.join(format!("f{f}.o")), "x").unwrap();
        }
    }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.name=b", "-c", "user.email=b@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

/// Median and interquartile range of `f`'s time over `rounds` rounds (one warm-up).
fn time(rounds: usize, mut f: impl FnMut()) -> (f64, f64, f64) {
    f();
    let mut ms: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[rounds / 2], ms[rounds / 4], ms[rounds * 3 / 4])
}

fn report(label: &str, (median, q1, q3): (f64, f64, f64)) {
    println!("{label:<44} {median:>8.2} ms  (IQR {q1:.2} to {q3:.2})");
}

fn main() {
    let rounds = std::env::var("IGNORED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(21);
    for with_target in [false, true] {
        let repo = tempfile::tempdir().unwrap();
        let ws = repo.path();
        fill(ws, "src", 10, 100);
        std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
        git(ws, &["init", "-q"]);
        git(ws, &["add", "-A"]);
        git(ws, &["commit", "-qm", "base"]);
        if with_target {
            fill(ws, "target", 1000, 100);
        }
        let label = if with_target {
            "1k tracked + 100k ignored"
        } else {
            "1k tracked, nothing ignored"
        };
        let since = ignored::coarse_now_ns() + Duration::from_secs(1).as_nanos() as i128;
        let roots: Vec<Vec<u8>> = if with_target {
            vec![b"target/".to_vec()]
        } else {
            Vec::new()
        };
        let found = ignored::changed_since(ws, &roots, since, &[]);
        assert!(!found.truncated && found.count == 0);
        report(
            &format!("{label}: walk alone"),
            time(rounds, || {
                ignored::changed_since(ws, &roots, since, &[]);
            }),
        );
        let repo = GitRepo::discover(ws).unwrap();
        repo.snapshot().unwrap();
        report(
            &format!("{label}: git ls-files of the roots"),
            time(rounds, || {
                repo.ignored(b"").unwrap();
            }),
        );
        let ledger = Ledger::before(ws);
        std::fs::write(ws.join("src/d0/e0/f0.o"), "changed").unwrap();
        report(
            &format!("{label}: the ledger's whole after"),
            time(rounds, || {
                ledger.changes(false, &[]).unwrap();
            }),
        );
    }
}
