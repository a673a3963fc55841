//! The change ledger's cost (DESIGN §8): the "before" snapshot and the "after" comparison
//! of a workspace with 10 000 and 100 000 small files, as a plain directory and as a git
//! repository (committed, so the copied index spares hashing), with 10 files changed.
//!
//! `cargo bench --bench ledger` (optimised), or `cargo test --bench ledger` (debug build,
//! what BENCHMARKS.md reports when a release build is not wanted).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use coder::workspace::Ledger;

fn fill(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("d{}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}.txt")), format!("line {i}\nsecond\n")).unwrap();
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

fn measure(label: &str, root: &Path) {
    let t = Instant::now();
    let ledger = Ledger::before(root);
    let before = t.elapsed();
    for i in 0..10 {
        std::fs::write(root.join(format!("d0/f{i}.txt")), "changed\n").unwrap();
    }
    let t = Instant::now();
    let (changes, _) = ledger.changes(false, &[]).unwrap();
    let after = t.elapsed();
    println!(
        "{label:<24} method={:<4} before={:>8.1} ms  after={:>8.1} ms  files_changed={} truncated={}",
        ledger.method(),
        before.as_secs_f64() * 1e3,
        after.as_secs_f64() * 1e3,
        changes.files_changed,
        changes.truncated
    );
}

fn main() {
    for files in [10_000, 100_000] {
        let plain = tempfile::tempdir().unwrap();
        fill(plain.path(), files);
        measure(&format!("plain {files} files"), plain.path());

        let repo = tempfile::tempdir().unwrap();
        fill(repo.path(), files);
        git(repo.path(), &["init", "-q"]);
        git(repo.path(), &["add", "-A"]);
        git(repo.path(), &["commit", "-qm", "base"]);
        measure(&format!("git {files} files"), repo.path());
    }
}
