//! A fleet sharing one PostgreSQL store (DESIGN §10): two coder "machines" (two state dirs,
//! two workspaces) pointed at the same `--store postgres://…` share slots (with
//! max_concurrent 1 the second waits in phase `queued`, then runs), cooldowns (after machine
//! A's quota failure through the real CLI, machine B fails fast without starting its CLI) and
//! the routing ledger (rows written through one connection are read through another).
//!
//! Each test starts its own throwaway cluster: `initdb` in a temp dir, `postgres` on a free
//! loopback port (as uid 65534 when the tests run as root: PostgreSQL refuses root), bounded
//! in time and stopped when the test ends ([`Cluster`]'s Drop). `scripts/test` installs the
//! Debian package and exports `CODER_TEST_PG_BIN`; without PostgreSQL these tests stay
//! ignored, which `CI=true` turns into a failure.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::sandbox_fixture::{NOBODY, as_owner, chown_tree};
use common::{Fake, ReplayScene, wait_for_note};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// A throwaway PostgreSQL cluster on 127.0.0.1.
struct Cluster {
    _dir: tempfile::TempDir,
    server: Child,
    port: u16,
}

const PG_START_DEADLINE: Duration = Duration::from_secs(90);

fn pg_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("CODER_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    found.retain(|p| p.join("initdb").exists());
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().unwrap_or_else(|| {
        panic!("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): scripts/test installs it")
    })
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `program`, as uid/gid 65534 when we are root.
fn as_postgres_user(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    as_owner(&mut cmd, is_root().then_some(NOBODY));
    cmd
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Cluster {
    fn start() -> Cluster {
        let bin = pg_bin();
        let dir = tempfile::Builder::new()
            .prefix("coder-pg-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.path().join("data");
        let sockets = dir.path().join("sockets");
        for d in [&data, &sockets] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
            if is_root() {
                chown_tree(d, NOBODY);
            }
        }
        let out = common::Bounded::output_within(
            as_postgres_user(&bin.join("initdb"))
                .current_dir(dir.path())
                .args([
                    "--auth=trust",
                    "--username=coder",
                    "--no-locale",
                    "--encoding=UTF8",
                    "--no-sync",
                    "-D",
                ])
                .arg(&data)
                .stdin(Stdio::null()),
            PG_START_DEADLINE,
        );
        assert!(out.status.success(), "initdb failed: {out:?}");
        let port = free_port();
        let server = as_postgres_user(&bin.join("postgres"))
            .current_dir(dir.path())
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&sockets)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=60",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let cluster = Cluster {
            _dir: dir,
            server,
            port,
        };
        let deadline = Instant::now() + PG_START_DEADLINE;
        loop {
            if postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept connections in time"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://coder@127.0.0.1:{}/{db}", self.port)
    }

    /// A fresh database of this cluster.
    fn database(&self, name: &str) -> String {
        let mut admin = postgres::Client::connect(&self.url("postgres"), postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        self.url(name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown (clients are disconnected).
        let pid = Pid::from_raw(self.server.id() as i32);
        let _ = kill(pid, Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.server.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn solo_config(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!("[backends.{name}]\npreset = \"inherit\"\nmax_concurrent = 1\n"),
    )
    .unwrap();
    path
}

#[test]
#[ignore = "needs PostgreSQL: scripts/test installs and runs it"]
fn two_machines_share_slots_on_postgres() {
    let cluster = Cluster::start();
    let url = cluster.database("slots");
    let dir = tempfile::tempdir().unwrap();
    let config = solo_config(dir.path(), "solo");
    let first = Fake::new(json!([
        {"step": "init"},
        {"step": "touch", "path": "running"},
        {"step": "wait_file", "path": "release", "timeout": 60},
        {"step": "result", "text": "machine A"},
    ]));
    let second = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "machine B"}]));
    let coder = |fake: &Fake| {
        fake.coder()
            .args(["--store", &url, "--config"])
            .arg(&config)
            .args(["--backend", "solo", "--return-metrics"])
            .deadline(Duration::from_secs(90))
    };
    let a = coder(&first).arg("a").spawn();
    first.wait_for_file("running", Duration::from_secs(30));
    let b = coder(&second).arg("b").spawn();
    let queued = wait_for_note(&second.state_dir(), "queued", Duration::from_secs(30));
    assert_eq!(queued["data"]["state"], "waiting");
    assert!(
        !second.has_record(),
        "machine B started while A held the slot"
    );
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(first.file("release"), "go").unwrap();
    a.wait().assert_success("machine A");
    let b = b.wait();
    b.assert_success("machine B");
    assert!(
        b.envelope["metrics"]["queue_ms"].as_u64().unwrap_or(0) >= 300,
        "{}",
        b.explain()
    );
    // Both leases were given back.
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let left: i64 = client
        .query_one("SELECT COUNT(*) FROM slots", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

#[test]
#[ignore = "needs PostgreSQL and the claude CLI: scripts/test installs and runs them"]
fn a_quota_failure_on_one_machine_cools_the_backend_for_the_other() {
    let cluster = Cluster::start();
    let url = cluster.database("cooldowns");
    // Machine A: the real CLI against a replay of Z.ai's used-up quota (backend `e2e`).
    let scene = ReplayScene::new("zai_1308_quota_future.json", 0);
    let out = scene
        .coder_within(Duration::from_secs(90))
        .args(["--store", &url, "hi"])
        .run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(
        detail["provider_error"]["class"],
        "quota_exhausted",
        "{}",
        out.explain()
    );
    // Machine B: its own state dir and workspace, a backend of the same name.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("b.toml");
    std::fs::write(&config, "[backends.e2e]\npreset = \"inherit\"\n").unwrap();
    let b = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "never"}]));
    let started = Instant::now();
    let out = b
        .coder()
        .args(["--store", &url, "--config"])
        .arg(&config)
        .args(["--backend", "e2e", "hi"])
        .run();
    let detail = out.assert_failure("upstream_error", 1);
    assert!(
        !b.has_record(),
        "machine B started its CLI on a cooling backend"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(
        detail["provider_error"]["retry_at"], "2099-01-01T00:00:00Z",
        "{detail}"
    );
    assert_eq!(detail["provider_error"]["action"], "wait_for_reset");
    assert!(
        detail["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cooling down")
    );
}

#[test]
#[ignore = "needs PostgreSQL: scripts/test installs and runs it"]
fn the_routing_ledger_and_schema_are_shared_on_postgres() {
    use coder::routing::ledger::{Choice, Ledger, Tally, Verdict};
    use coder::store::{Location, RequestShape, Store};
    let cluster = Cluster::start();
    let url = cluster.database("ledger");
    // Two machines, two connections (each migrates; the second finds the schema current).
    let a = Store::open(&Location::Postgres(url.clone())).unwrap();
    let b = Store::open(&Location::Postgres(url.clone())).unwrap();
    for (i, chosen) in ["glm", "glm", "deepseek"].iter().enumerate() {
        a.record_choice(&Choice {
            run_id: format!("run-{i}"),
            bucket: "d1/new/write".into(),
            chosen: (*chosen).into(),
            candidates: vec!["glm".into(), "deepseek".into()],
            propensity: 0.41,
            policy: "thompson".into(),
            at_unix_ms: 1,
        })
        .unwrap();
    }
    a.record_outcome("run-0", Verdict::Success).unwrap();
    b.record_outcome("run-1", Verdict::Failure).unwrap();
    b.record_outcome("run-2", Verdict::Success).unwrap();
    let seen_by_b = b.tallies(&[]).unwrap();
    assert_eq!(
        seen_by_b,
        vec![
            Tally {
                backend: "deepseek".into(),
                bucket: "d1/new/write".into(),
                successes: 1,
                failures: 0
            },
            Tally {
                backend: "glm".into(),
                bucket: "d1/new/write".into(),
                successes: 1,
                failures: 1
            },
        ]
    );
    assert_eq!(a.tallies(&["glm".into()]).unwrap().len(), 1);
    assert_eq!(b.forget(Some("glm")).unwrap(), 2);
    assert_eq!(a.tallies(&[]).unwrap().len(), 1);
    // Compat shapes and cooldowns are shared the same way.
    a.set_compat_shape("deepseek", RequestShape::Compat, Some("400 system role"))
        .unwrap();
    assert_eq!(
        b.compat_shape("deepseek").unwrap(),
        Some(RequestShape::Compat)
    );
    drop((a, b));

    // A schema a newer coder wrote is refused, through the binary.
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .execute(
            "UPDATE meta SET value = '999' WHERE key = 'schema_version'",
            &[],
        )
        .unwrap();
    let fake = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "ran"}]));
    let out = fake.coder().args(["--store", &url, "x"]).run();
    let detail = out.assert_failure("config_error", 78);
    assert!(
        detail["message"]
            .as_str()
            .unwrap_or_default()
            .contains("version 999"),
        "{detail}"
    );
    assert!(!fake.has_record());
}

/// A coder command on one "machine": its exit code and stdout.
type MachineRun = dyn Fn(&[&str]) -> (Option<i32>, String);

/// Routing learns across machines: what machine A's routed runs taught the shared store is
/// what machine B's `coder route stats` reads, and B's own routed run is recorded beside A's.
/// The child succeeds only on the backend whose base URL names `deepseek`.
#[test]
#[ignore = "needs PostgreSQL: scripts/test installs and runs it"]
fn routed_runs_on_one_machine_teach_the_other() {
    let cluster = Cluster::start();
    let url = cluster.database("routing");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let bin = root.join("claude");
    std::fs::write(
        &bin,
        r#"#!/bin/bash
sid=""
while [ $# -gt 0 ]; do case "$1" in --session-id|--resume) sid="$2"; shift;; esac; shift; done
cat >/dev/null
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","tools":[],"model":"m"}'
case "$ANTHROPIC_BASE_URL" in *deepseek*) text=fine;; *) text="";; esac
echo '{"type":"result","subtype":"success","is_error":false,"result":"'"$text"'","session_id":"'"$sid"'","num_turns":1}'
"#,
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let machine = |name: &str| {
        let state = root.join(name);
        let url = url.clone();
        std::fs::create_dir_all(state.join("ws")).unwrap();
        move |args: &[&str]| {
            let out = Command::new("timeout")
                .arg("60")
                .arg(env!("CARGO_BIN_EXE_coder"))
                .args(args)
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("HOME", &state)
                .env("CODER_STATE_DIR", state.join("state"))
                .env("XDG_CONFIG_HOME", state.join("xdg"))
                .env("CODER_STORE", &url)
                .env("ZAI_API_KEY", "k1")
                .env("DEEPSEEK_API_KEY", "k2")
                .current_dir(state.join("ws"))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        }
    };
    let a = machine("a");
    let b = machine("b");
    let claude = bin.to_str().unwrap();
    for seed in 1..=6 {
        let seed = seed.to_string();
        let (_, out) = a(&[
            "--cd",
            ".",
            "--claude-bin",
            claude,
            "--backend",
            "auto:glm,deepseek",
            "task",
        ]);
        let envelope: Value = serde_json::from_str(out.trim()).unwrap();
        assert!(
            envelope["routing"]["chosen"].is_string(),
            "seed {seed}: {envelope}"
        );
    }
    let tallies = |run: &MachineRun| {
        let (code, out) = run(&["route", "stats", "--json"]);
        assert_eq!(code, Some(0), "{out}");
        let stats: Value = serde_json::from_str(&out).unwrap();
        let mut seen = std::collections::BTreeMap::new();
        for t in stats["tallies"].as_array().unwrap() {
            let n = t["successes"].as_u64().unwrap() + t["failures"].as_u64().unwrap();
            *seen
                .entry(t["backend"].as_str().unwrap().to_owned())
                .or_insert(0) += n;
            if t["backend"] == "glm" {
                assert_eq!(t["successes"], 0, "{stats}");
            }
        }
        seen
    };
    let taught = tallies(&b);
    assert_eq!(taught.values().sum::<u64>(), 6, "{taught:?}");
    let (_, out) = b(&[
        "--cd",
        ".",
        "--claude-bin",
        claude,
        "--backend",
        "auto:glm,deepseek",
        "task",
    ]);
    assert!(out.contains("\"routing\""), "{out}");
    assert_eq!(tallies(&a).values().sum::<u64>(), 7);
}
