//! Sandbox setup time against workspace size (1k, 10k and 100k files, one in a hundred of
//! them a secret to mask): the parent's policy resolution (the secret scan), the end-of-run
//! git guard's walk, and the whole `coder sandbox -- /bin/true` (scan, namespaces, masks,
//! private root, Landlock, exec, guard).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use coder::sandbox::{Mode, Policy, PolicyOptions};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// `files` files in directories of 100, every hundredth one a `.env` secret.
fn workspace(root: &Path, files: usize) {
    for dir in 0..files.div_ceil(100) {
        let d = root.join(format!("pkg{dir:04}/src"));
        std::fs::create_dir_all(&d).unwrap();
        for file in 0..100.min(files - dir * 100) {
            let name = if file == 0 {
                ".env".to_owned()
            } else {
                format!("mod{file:03}.rs")
            };
            std::fs::write(d.join(name), b"x").unwrap();
        }
    }
}

fn sandbox_setup(c: &mut Criterion) {
    let mut group = c.benchmark_group("sandbox_setup");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    let state = tempfile::tempdir().unwrap();
    for files in [1_000usize, 10_000, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        workspace(&ws, files);
        group.bench_with_input(BenchmarkId::new("policy_resolve", files), &ws, |b, ws| {
            b.iter(|| {
                let mut opts = PolicyOptions::new(Mode::WorkspaceWrite, ws);
                opts.config_dir = Some(state.path().join("claude"));
                opts.runs_dir = Some(state.path().join("runs"));
                let policy = Policy::resolve(&opts).unwrap();
                policy.cleanup();
            })
        });
        group.bench_with_input(BenchmarkId::new("git_guard", files), &ws, |b, ws| {
            let mut opts = PolicyOptions::new(Mode::WorkspaceWrite, ws);
            opts.config_dir = Some(state.path().join("claude"));
            opts.runs_dir = Some(state.path().join("runs"));
            let policy = Policy::resolve(&opts).unwrap();
            b.iter(|| {
                let report = coder::sandbox::guard_git_after_run(&policy);
                assert!(report.is_empty());
            });
            policy.cleanup();
        });
        group.bench_with_input(
            BenchmarkId::new("coder_sandbox_true", files),
            &ws,
            |b, ws| {
                b.iter(|| {
                    let status = Command::new(env!("CARGO_BIN_EXE_coder"))
                        .args(["sandbox", "--cd"])
                        .arg(ws)
                        .args(["--", "/bin/true"])
                        .env("CODER_STATE_DIR", state.path())
                        .status()
                        .unwrap();
                    assert!(status.success());
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, sandbox_setup);
criterion_main!(benches);
