//! The store on SQLite through the built binary (DESIGN §10): slots across processes and
//! state dirs (a queued run waits, then runs; a SIGKILLed coder's slot comes back when its
//! lease expires), cooldowns (a quota failure with a reset time makes the next run on that
//! backend fail fast without starting the CLI), 20 concurrent writers, and the bad inputs
//! (unreachable store, `--store-optional`, a corrupt file, a newer schema, a bad scheme).
//!
//! The child is the scripted fake wherever the real CLI adds nothing; the quota path with
//! the real CLI and a replay cassette is in `store_fleet.rs` (shared over PostgreSQL) and
//! below (SQLite).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Bounded, Coder, Fake, ReplayScene, read_transcript, wait_for_note};
use nix::sys::signal::Signal;
use serde_json::json;

/// A config with one backend `solo` (the caller's own settings) allowing `max` runs at once.
fn config_with_limit(dir: &Path, max: u32) -> PathBuf {
    let path = dir.join("coder.toml");
    std::fs::write(
        &path,
        format!("[backends.solo]\npreset = \"inherit\"\nmax_concurrent = {max}\n"),
    )
    .unwrap();
    path
}

fn on_store(fake: &Fake, store: &Path, config: &Path) -> Coder {
    fake.coder()
        .arg("--store")
        .arg(store)
        .arg("--config")
        .arg(config)
        .args(["--backend", "solo", "--return-metrics"])
}

fn quota_text() -> &'static str {
    "API Error: 429 {\"error\":{\"code\":\"1308\",\"message\":\"Usage limit reached for 5 hour. Your limit will reset at 2099-01-01 08:00:00\"}}"
}

#[test]
fn a_second_run_waits_queued_for_the_only_slot_then_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.db");
    let config = config_with_limit(dir.path(), 1);
    let first = Fake::new(json!([
        {"step": "init"},
        {"step": "touch", "path": "running"},
        {"step": "wait_file", "path": "release", "timeout": 60},
        {"step": "result", "text": "first done"},
    ]));
    let second = Fake::new(json!([
        {"step": "init"},
        {"step": "result", "text": "second done"},
    ]));
    let a = on_store(&first, &store, &config)
        .deadline(Duration::from_secs(90))
        .arg("one")
        .spawn();
    first.wait_for_file("running", Duration::from_secs(30));
    // A second "machine": its own state dir, the same store.
    let b = on_store(&second, &store, &config)
        .deadline(Duration::from_secs(90))
        .arg("two")
        .spawn();
    let queued = wait_for_note(&second.state_dir(), "queued", Duration::from_secs(30));
    assert_eq!(queued["data"]["state"], "waiting", "{queued}");
    assert_eq!(queued["data"]["max_concurrent"], 1);
    assert!(
        !second.has_record(),
        "the queued run must not start its CLI while the slot is taken"
    );
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(first.file("release"), "go").unwrap();
    let a = a.wait();
    a.assert_success("first done");
    let b = b.wait();
    b.assert_success("second done");
    let queue_ms = b.envelope["metrics"]["queue_ms"].as_u64().unwrap_or(0);
    assert!(queue_ms >= 300, "queue_ms {queue_ms}: {}", b.explain());
    assert!(
        a.envelope["metrics"]["queue_ms"]
            .as_u64()
            .unwrap_or(u64::MAX)
            < 5_000,
        "{}",
        a.explain()
    );
}

#[test]
fn the_queue_counts_against_max_duration() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.db");
    let config = config_with_limit(dir.path(), 1);
    let holder = Fake::new(json!([
        {"step": "init"},
        {"step": "touch", "path": "running"},
        {"step": "wait_file", "path": "release", "timeout": 60},
        {"step": "result", "text": "held"},
    ]));
    let waiter = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "never"}]));
    let a = on_store(&holder, &store, &config)
        .deadline(Duration::from_secs(90))
        .arg("hold")
        .spawn();
    holder.wait_for_file("running", Duration::from_secs(30));
    // The idle timeout (1 s) is shorter than the wait: only --max-duration may end it.
    let started = Instant::now();
    let b = on_store(&waiter, &store, &config)
        .args(["--timeout", "1", "--max-duration", "3"])
        .arg("wait")
        .run();
    let detail = b.assert_failure("timeout", 124);
    assert!(
        detail["message"]
            .as_str()
            .is_some_and(|m| m.contains("queued for a slot")),
        "{detail}"
    );
    assert!(started.elapsed() >= Duration::from_millis(2900));
    // The whole run was the wait, and `metrics.queue_ms` says so (it was missing).
    let queue_ms = b.envelope["metrics"]["queue_ms"].as_u64().unwrap_or(0);
    assert!(queue_ms >= 2900, "queue_ms {queue_ms}: {}", b.explain());
    assert!(!waiter.has_record(), "the CLI never started");
    std::fs::write(holder.file("release"), "go").unwrap();
    a.wait().assert_success("held");
}

#[test]
fn a_killed_coders_slot_comes_back_when_its_lease_expires() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.db");
    let config = config_with_limit(dir.path(), 1);
    let victim = Fake::new(json!([
        {"step": "init"},
        {"step": "touch", "path": "running"},
        {"step": "linger", "seconds": 60},
    ]));
    let next = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "got it"}]));
    let a = on_store(&victim, &store, &config)
        .env("CODER_SLOT_LEASE_S", "2")
        .deadline(Duration::from_secs(60))
        .arg("hold")
        .spawn();
    victim.wait_for_file("running", Duration::from_secs(30));
    a.signal(Signal::SIGKILL);
    drop(a);
    let started = Instant::now();
    let b = on_store(&next, &store, &config)
        .env("CODER_SLOT_LEASE_S", "2")
        .deadline(Duration::from_secs(60))
        .arg("next")
        .run();
    b.assert_success("got it");
    let queue_ms = b.envelope["metrics"]["queue_ms"].as_u64().unwrap_or(0);
    assert!(
        queue_ms > 0 && started.elapsed() < Duration::from_secs(30),
        "queue_ms {queue_ms}: the dead holder's lease (2 s) expired and was taken over"
    );
}

/// The heartbeat renews a live run's lease: with a 1 s lease, a run holding its slot for
/// several leases keeps it, and the queued run waits the whole time.
#[test]
fn a_live_run_keeps_its_slot_past_the_lease_and_a_queued_run_can_be_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.db");
    let config = config_with_limit(dir.path(), 1);
    let holder = Fake::new(json!([
        {"step": "init"},
        {"step": "touch", "path": "running"},
        {"step": "wait_file", "path": "release", "timeout": 60},
        {"step": "result", "text": "held"},
    ]));
    let waiter = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "waited"}]));
    let a = on_store(&holder, &store, &config)
        .env("CODER_SLOT_LEASE_S", "1")
        .deadline(Duration::from_secs(90))
        .arg("hold")
        .spawn();
    holder.wait_for_file("running", Duration::from_secs(30));
    let b = on_store(&waiter, &store, &config)
        .env("CODER_SLOT_LEASE_S", "1")
        .deadline(Duration::from_secs(90))
        .arg("wait")
        .spawn();
    wait_for_note(&waiter.state_dir(), "queued", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(3500));
    assert!(
        !waiter.has_record(),
        "the queued run started while the holder was alive: its lease was not renewed"
    );
    // SIGTERM while queued: cancelled, and the CLI never started. The message says so
    // (it said "its process tree was stopped", of a tree that never existed).
    b.signal(Signal::SIGTERM);
    let out = b.wait();
    out.assert_failure("cancelled", 143);
    assert!(
        out.envelope["error_detail"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("slot")
                && m.contains("cancelled before it started")
                && !m.contains("process tree")),
        "{}",
        out.explain()
    );
    // The run was all wait: `metrics.queue_ms` says how long (it was missing).
    assert!(
        out.envelope["metrics"]["queue_ms"].as_u64().unwrap_or(0) > 0,
        "{}",
        out.explain()
    );
    assert!(!waiter.has_record());
    std::fs::write(holder.file("release"), "go").unwrap();
    a.wait().assert_success("held");
    // The holder released its slot at the end: the next run does not wait.
    let out = on_store(&waiter, &store, &config).arg("again").run();
    out.assert_success("waited");
    assert!(
        out.envelope["metrics"]["queue_ms"]
            .as_u64()
            .unwrap_or(u64::MAX)
            < 2_000
    );
}

#[test]
fn a_quota_failure_cools_the_backend_and_the_next_run_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.db");
    let config = config_with_limit(dir.path(), 4);
    let hit = Fake::new(json!([
        {"step": "init"},
        {"step": "result", "is_error": true, "api_error_status": 429, "text": quota_text()},
    ]));
    let out = on_store(&hit, &store, &config).arg("one").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["provider_error"]["class"], "quota_exhausted");
    assert_eq!(detail["provider_error"]["retry_at"], "2099-01-01T00:00:00Z");

    let next = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "never"}]));
    let started = Instant::now();
    let out = on_store(&next, &store, &config).arg("two").run();
    let detail = out.assert_failure("upstream_error", 1);
    assert!(
        !next.has_record(),
        "a cooling backend must not start the CLI"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let error = &detail["provider_error"];
    assert_eq!(error["retry_at"], "2099-01-01T00:00:00Z", "{detail}");
    assert_eq!(error["class"], "quota_exhausted");
    assert_eq!(error["action"], "wait_for_reset");
    assert_eq!(error["retryable"], false);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cooling down until 2099-01-01T00:00:00Z")
            && message.contains("did not start"),
        "{message}"
    );

    // Another backend on the same store is not affected.
    let other = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "fine"}]));
    std::fs::write(
        dir.path().join("other.toml"),
        "[backends.other]\npreset = \"inherit\"\nmax_concurrent = 1\n",
    )
    .unwrap();
    other
        .coder()
        .arg("--store")
        .arg(&store)
        .arg("--config")
        .arg(dir.path().join("other.toml"))
        .args(["--backend", "other", "x"])
        .run()
        .assert_success("fine");
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_real_cli_on_a_used_up_quota_cools_the_backend() {
    let scene = ReplayScene::new("zai_1308_quota_future.json", 0);
    let store = scene.fake.root().join("shared.db");
    let out = scene
        .coder_within(Duration::from_secs(90))
        .arg("--store")
        .arg(&store)
        .arg("hi")
        .run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(
        detail["provider_error"]["class"],
        "quota_exhausted",
        "{}",
        out.explain()
    );
    assert_eq!(detail["provider_error"]["retry_at"], "2099-01-01T00:00:00Z");
    let started = Instant::now();
    let out = scene
        .coder_within(Duration::from_secs(90))
        .arg("--store")
        .arg(&store)
        .args(["--return-all-messages", "hi"])
        .run();
    let detail = out.assert_failure("upstream_error", 1);
    assert_eq!(detail["provider_error"]["retry_at"], "2099-01-01T00:00:00Z");
    assert!(
        detail["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cooling down")
    );
    assert_eq!(
        out.envelope["all_messages"].as_array().map(Vec::len),
        Some(0),
        "the CLI did not run"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// 20 coder processes at once on one SQLite store with 3 slots: every run succeeds, never
/// more than 3 children run at once, no store error; and 20 processes writing the routing
/// ledger at once lose no row.
#[test]
fn twenty_concurrent_coders_share_one_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.db");
    let config = config_with_limit(dir.path(), 3);
    let fakes: Vec<Fake> = (0..20)
        .map(|i| {
            Fake::new(json!([
                {"step": "init"},
                {"step": "touch", "path": "began"},
                {"step": "sleep", "seconds": 0.2},
                {"step": "touch", "path": "ended"},
                {"step": "result", "text": format!("run {i}")},
            ]))
        })
        .collect();
    let running: Vec<_> = fakes
        .iter()
        .map(|f| {
            on_store(f, &store, &config)
                .deadline(Duration::from_secs(240))
                .arg("go")
                .spawn()
        })
        .collect();
    for (i, r) in running.into_iter().enumerate() {
        let out = r.wait();
        out.assert_success(&format!("run {i}"));
        assert!(
            out.envelope["warnings"]
                .as_array()
                .is_none_or(Vec::is_empty),
            "{}",
            out.explain()
        );
    }
    // Never more than 3 children between their "began" and "ended".
    let mut events: Vec<(std::time::SystemTime, i32)> = Vec::new();
    for f in &fakes {
        let began = std::fs::metadata(f.file("began"))
            .unwrap()
            .modified()
            .unwrap();
        let ended = std::fs::metadata(f.file("ended"))
            .unwrap()
            .modified()
            .unwrap();
        events.push((began, 1));
        events.push((ended, -1));
    }
    events.sort();
    let (mut live, mut peak) = (0, 0);
    for (_, delta) in events {
        live += delta;
        peak = peak.max(live);
    }
    assert!(
        peak <= 3,
        "{peak} children ran at once with max_concurrent 3"
    );

    ledger_writers(&store, 20, 25);
}

/// `n` processes (this test binary, re-run as a writer) each record `rows` routing choices
/// and outcomes at once; every row must arrive.
fn ledger_writers(store: &Path, n: usize, rows: usize) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|i| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "ledger_writer_process",
                    "--include-ignored",
                    "--nocapture",
                ])
                .env(
                    "CODER_TEST_LEDGER_WRITER",
                    format!("{}|{i}|{rows}", store.display()),
                )
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "a ledger writer failed: {status}");
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("a ledger writer did not finish in time");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    use coder::routing::ledger::Ledger;
    let store = coder::store::Store::open(&coder::store::Location::Sqlite(store.into())).unwrap();
    let tallies = store.tallies(&[]).unwrap();
    let total: u64 = tallies.iter().map(|t| t.successes + t.failures).sum();
    assert_eq!(total, (n * rows) as u64, "{tallies:?}");
}

/// The writer half of [`ledger_writers`]; does nothing unless that test started it.
#[test]
#[ignore = "a helper process of twenty_concurrent_coders_share_one_sqlite_store"]
fn ledger_writer_process() {
    let Ok(spec) = std::env::var("CODER_TEST_LEDGER_WRITER") else {
        return;
    };
    use coder::routing::ledger::{Choice, Ledger, Verdict};
    let mut parts = spec.split('|');
    let (path, me, rows) = (
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().parse::<usize>().unwrap(),
    );
    let store = coder::store::Store::open(&coder::store::Location::Sqlite(path.into())).unwrap();
    for k in 0..rows {
        let run_id = format!("w{me}-{k}");
        store
            .record_choice(&Choice {
                run_id: run_id.clone(),
                bucket: format!("d{}/new/write", k % 3),
                chosen: ["glm", "deepseek"][k % 2].to_owned(),
                candidates: vec!["glm".into(), "deepseek".into()],
                propensity: 0.5,
                policy: "thompson".into(),
                at_unix_ms: 1,
            })
            .unwrap();
        let verdict = if k % 3 == 0 {
            Verdict::Failure
        } else {
            Verdict::Success
        };
        store.record_outcome(&run_id, verdict).unwrap();
    }
}

// ---- bad input ----

#[test]
fn an_unreachable_store_is_a_config_error_unless_optional() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_limit(dir.path(), 1);
    // Port 1 on loopback: nothing listens there; the refusal is immediate.
    let url = "postgres://coder:hunter2@127.0.0.1:1/coder";
    let fake = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "ran"}]));
    let out = fake
        .coder()
        .args(["--store", url, "--config"])
        .arg(&config)
        .args(["--backend", "solo", "x"])
        .run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot reach the store"), "{message}");
    assert!(message.contains("127.0.0.1:1"), "{message}");
    assert!(
        !out.stdout.contains("hunter2"),
        "the password leaked: {}",
        out.stdout
    );
    assert!(!fake.has_record());

    let out = fake
        .coder()
        .args(["--store", url, "--store-optional", "--config"])
        .arg(&config)
        .args(["--backend", "solo", "x"])
        .run();
    out.assert_success("ran");
    let warnings = out.envelope["warnings"].to_string();
    assert!(
        warnings.contains("running without slots, cooldowns or routing"),
        "{warnings}"
    );
    // The environment variable works the same.
    let out = fake
        .coder()
        .env("CODER_STORE", url)
        .args(["--config"])
        .arg(&config)
        .args(["--backend", "solo", "x"])
        .run();
    out.assert_failure("config_error", 78);
}

#[test]
fn a_corrupt_sqlite_file_is_a_config_error_naming_it() {
    let fake = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "ran"}]));
    let db = fake.root().join("coder.db");
    std::fs::write(&db, vec![0x5a; 16384]).unwrap();
    let out = fake.coder().arg("--store").arg(&db).arg("x").run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(message.contains("not a usable coder database"), "{message}");
    assert!(message.contains(&*db.to_string_lossy()), "{message}");
    assert!(!fake.has_record());
}

#[test]
fn a_store_from_a_newer_coder_is_refused() {
    let fake = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "ran"}]));
    let db = fake.root().join("coder.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO meta VALUES ('schema_version', '999');",
    )
    .unwrap();
    drop(conn);
    let out = fake.coder().arg("--store").arg(&db).arg("x").run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("version 999") && message.contains("upgrade coder"),
        "{message}"
    );
}

#[test]
fn a_store_inside_the_workspace_is_refused() {
    let fake = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "ran"}]));
    for store in [
        fake.workspace().join("coder.db"),
        fake.workspace().join("new/dir/coder.db"),
    ] {
        let out = fake.coder().arg("--store").arg(&store).arg("x").run();
        let detail = out.assert_failure("config_error", 78);
        assert!(
            detail["message"]
                .as_str()
                .is_some_and(|m| m.contains("inside the workspace")),
            "{detail}"
        );
    }
    assert!(!fake.has_record());
}

#[test]
fn an_unknown_store_scheme_is_a_config_error() {
    let fake = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "ran"}]));
    let out = fake
        .coder()
        .args(["--store", "mysql://127.0.0.1/coder", "x"])
        .run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("unsupported store scheme 'mysql://'"),
        "{message}"
    );
    // --store-optional does not excuse a malformed URL.
    let out = fake
        .coder()
        .args([
            "--store",
            "mysql://127.0.0.1/coder",
            "--store-optional",
            "x",
        ])
        .run();
    out.assert_failure("config_error", 78);
}

#[test]
fn a_run_that_needs_no_store_feature_creates_no_store() {
    let fake = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "ran"}]));
    fake.coder().arg("x").run().assert_success("ran");
    assert!(!fake.state_dir().join("coder.db").exists());
    // The default store, with a limit, is <state>/coder.db.
    let config = config_with_limit(fake.root(), 2);
    fake.coder()
        .arg("--config")
        .arg(&config)
        .args(["--backend", "solo", "x"])
        .run()
        .assert_success("ran");
    assert!(fake.state_dir().join("coder.db").exists());
    let _ = read_transcript;
}

/// A `--store` file in a directory that does not exist (a typo) is refused, naming the
/// directory: the directory and an empty store in it were made silently, a store no other
/// run shares (`coder route stats --store /typo/x.db` made `/typo`). `--store-optional`
/// runs without it, with a warning; a store inside the workspace is still refused as such.
#[test]
fn a_store_in_a_directory_that_does_not_exist_is_refused_not_made() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    let db = missing.join("coder.db");
    let config = config_with_limit(dir.path(), 1);
    let fake = Fake::new(json!([{"step": "init"}, {"step": "result", "text": "ran"}]));
    let run = |optional: bool| {
        let mut coder = fake.coder().arg("--store").arg(&db);
        if optional {
            coder = coder.arg("--store-optional");
        }
        coder
            .arg("--config")
            .arg(&config)
            .args(["--backend", "solo", "x"])
            .run()
    };
    let out = run(false);
    let detail = out.assert_failure("config_error", 78);
    assert_eq!(
        detail["message"],
        format!(
            "cannot reach the store {}: its directory {} does not exist; create it, or name \
             a file in a directory that does",
            db.display(),
            missing.display()
        ),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record());
    let out = run(true);
    out.assert_success("ran");
    assert!(
        out.envelope["warnings"]
            .to_string()
            .contains("running without slots, cooldowns or routing (--store-optional)"),
        "{}",
        out.explain()
    );
    // `coder route stats` reads the same store.
    let stats = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["route", "stats", "--store"])
        .arg(&db)
        .env("CODER_STATE_DIR", fake.state_dir())
        .output_bounded();
    assert_eq!(stats.status.code(), Some(78), "{stats:?}");
    assert!(!missing.exists(), "the directory was made");
}
