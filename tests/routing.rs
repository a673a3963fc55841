//! `--backend auto` end to end (DESIGN §10): the envelope's `routing`, the ledger it
//! writes, `coder route stats|explain|forget`, `CODER_ROUTING=off`, an unknown backend in
//! `auto:`, and convergence: when only one backend's runs succeed, routing learns to pick
//! it. The fake child tells the backends apart by the base URL coder gives it; choices are
//! reproducible through `CODER_ROUTING_SEED`.

mod common;

use common::Bounded;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

struct Fx {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    bin: PathBuf,
}

/// Succeeds only on the backend whose base URL contains `good`.
fn fake(good: &str) -> String {
    format!(
        r#"#!/bin/bash
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac; shift
done
cat >/dev/null
echo '{{"type":"system","subtype":"init","session_id":"'"$sid"'","tools":[],"model":"m"}}'
case "$ANTHROPIC_BASE_URL" in
  *{good}*) echo '{{"type":"result","subtype":"success","is_error":false,"result":"fine","session_id":"'"$sid"'","num_turns":1}}';;
  *) echo '{{"type":"result","subtype":"success","is_error":false,"result":"","session_id":"'"$sid"'","num_turns":1}}';;
esac
"#
    )
}

impl Fx {
    fn new(good: &str) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let ws = root.join("ws");
        fs::create_dir_all(&ws).unwrap();
        let bin = root.join("claude");
        fs::write(&bin, fake(good)).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        Fx {
            _dir: dir,
            root,
            ws,
            bin,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_coder"));
        cmd.args(args)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &self.root)
            .env("CODER_STATE_DIR", self.root.join("state"))
            .env("XDG_CONFIG_HOME", self.root.join("xdg"))
            .env("ZAI_API_KEY", "k1")
            .env("DEEPSEEK_API_KEY", "k2")
            .env("MINIMAX_API_KEY", "k3")
            .current_dir(&self.root)
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, backend: &str, seed: u64, extra_env: &[(&str, &str)]) -> (Value, Output) {
        let mut cmd = self.command(&["--cd"]);
        cmd.arg(&self.ws)
            .arg("--claude-bin")
            .arg(&self.bin)
            .args(["--backend", backend, "a task"])
            .env("CODER_ROUTING_SEED", seed.to_string());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let out = cmd.output_bounded();
        let env = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"));
        (env, out)
    }

    fn route(&self, args: &[&str]) -> Output {
        let mut all = vec!["route"];
        all.extend_from_slice(args);
        self.command(&all).output_bounded()
    }

    /// The routing rows of the run's store (the default SQLite file), oldest first:
    /// `{chosen, propensity, outcome}`.
    fn choices(&self) -> Vec<Value> {
        let db = self.root.join("state/coder.db");
        if !db.exists() {
            return Vec::new();
        }
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut stmt = conn
            .prepare("SELECT chosen, propensity, outcome FROM routing_choices ORDER BY at_ms")
            .unwrap();
        stmt.query_map([], |row| {
            Ok(serde_json::json!({
                "chosen": row.get::<_, String>(0)?,
                "propensity": row.get::<_, f64>(1)?,
                "outcome": row.get::<_, Option<String>>(2)?,
            }))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }
}

#[test]
fn a_routed_run_reports_its_choice_and_records_it_with_its_outcome() {
    let fx = Fx::new("deepseek");
    let (env, out) = fx.run("auto:glm,deepseek", 1, &[]);
    check_schema(&env);
    let routing = &env["routing"];
    assert_eq!(routing["policy"], "thompson", "{out:?}");
    assert_eq!(
        routing["candidates"],
        serde_json::json!(["glm", "deepseek"])
    );
    assert_eq!(routing["bucket"]["key"], "d0/new/write");
    let p = routing["propensity"].as_f64().unwrap();
    assert!(p > 0.0 && p <= 1.0);
    let chosen = routing["chosen"].as_str().unwrap();
    assert_eq!(env["success"], chosen == "deepseek", "{env}");
    let recorded = fx.choices();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["chosen"], chosen);
    assert_eq!(recorded[0]["propensity"].as_f64().unwrap(), p);
    let verdict = if chosen == "deepseek" {
        "success"
    } else {
        "failure"
    };
    assert_eq!(recorded[0]["outcome"], verdict);

    let stats = fx.route(&["stats", "--json"]);
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["tallies"][0]["backend"], chosen);

    let out = fx.route(&["forget"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("forgot 1"));
    assert!(fx.choices().is_empty());
}

/// `coder route … --store URL` reads that store wherever `--store` stands: after the
/// subcommand (as the README writes it) as well as before it, and among explain's flags.
#[test]
fn route_takes_store_after_the_subcommand_too() {
    let fx = Fx::new("deepseek");
    let other = fx.root.join("other.db");
    let other = other.to_str().unwrap();
    let mut cmd = fx.command(&["--cd"]);
    cmd.arg(&fx.ws).arg("--claude-bin").arg(&fx.bin).args([
        "--store",
        other,
        "--backend",
        "auto:deepseek",
        "a task",
    ]);
    let out = cmd.output_bounded();
    assert!(out.status.success(), "{out:?}");
    assert!(
        fx.choices().is_empty(),
        "the run used --store, not the default"
    );

    for args in [
        ["stats", "--json", "--store", other],
        ["--store", other, "stats", "--json"],
    ] {
        let out = fx.route(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            stats["tallies"][0]["backend"], "deepseek",
            "{args:?}: {stats}"
        );
    }
    for args in [
        [
            "explain",
            "--store",
            other,
            "--json",
            "--backend",
            "auto:deepseek,glm",
            "t",
        ],
        [
            "explain",
            "--json",
            "--backend",
            "auto:deepseek,glm",
            "--store",
            other,
            "t",
        ],
    ] {
        let out = fx.route(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let explain: Value = serde_json::from_slice(&out.stdout).unwrap();
        let arms = explain["arms"].as_array().unwrap();
        let deepseek = arms.iter().find(|a| a["backend"] == "deepseek").unwrap();
        assert_eq!(
            deepseek["posterior"]["successes"], 1,
            "{args:?}: the explanation did not read {other}: {explain}"
        );
    }
}

/// A resumed session goes back to the backend it was made on, whatever the policy would
/// draw (another backend could not continue it).
#[test]
fn a_resume_goes_back_to_its_sessions_backend() {
    let fx = Fx::new("i");
    for seed in 0..6 {
        let (first, out) = fx.run("auto:glm,deepseek,minimax", seed, &[]);
        let sid = first["SESSION_ID"]
            .as_str()
            .unwrap_or_else(|| panic!("{out:?}"));
        let chosen = first["routing"]["chosen"].clone();
        let mut cmd = fx.command(&["--cd"]);
        cmd.arg(&fx.ws)
            .arg("--claude-bin")
            .arg(&fx.bin)
            .args([
                "--backend",
                "auto:glm,deepseek,minimax",
                "--session-id",
                sid,
                "more",
            ])
            .env("CODER_ROUTING_SEED", (seed + 100).to_string());
        let out = cmd.output_bounded();
        let env: Value = serde_json::from_slice(&out.stdout).unwrap();
        check_schema(&env);
        assert_eq!(env["routing"]["policy"], "session", "{env}");
        assert_eq!(env["routing"]["chosen"], chosen, "{env}");
        assert_eq!(env["success"], true, "{env}");
    }
}

#[test]
fn routing_converges_on_the_backend_that_works() {
    let fx = Fx::new("deepseek");
    let mut chosen = Vec::new();
    for seed in 0..16 {
        let (env, _) = fx.run("auto:glm,deepseek,minimax", seed, &[]);
        chosen.push(env["routing"]["chosen"].as_str().unwrap().to_owned());
    }
    let late = chosen[10..].iter().filter(|c| *c == "deepseek").count();
    assert!(late >= 5, "{chosen:?}");
    let explain = fx.route(&[
        "explain",
        "--json",
        "--backend",
        "auto:glm,deepseek,minimax",
        "a task",
    ]);
    let explain: Value =
        serde_json::from_slice(&explain.stdout).unwrap_or_else(|e| panic!("{e}: {explain:?}"));
    let arms = explain["arms"].as_array().unwrap();
    let deepseek = arms.iter().find(|a| a["backend"] == "deepseek").unwrap();
    assert!(deepseek["probability"].as_f64().unwrap() > 0.8, "{explain}");
    let text = fx.route(&[
        "explain",
        "--backend",
        "auto:glm,deepseek,minimax",
        "a task",
    ]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("bucket d0/new/write"));

    let out = fx.route(&["forget", "deepseek"]);
    assert!(out.status.success(), "{out:?}");
    let stats = fx.route(&["stats", "--json"]);
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert!(
        stats["tallies"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["backend"] != "deepseek")
    );
}

#[test]
fn routing_off_pins_the_default_and_unknown_backends_are_config_errors() {
    let fx = Fx::new("deepseek");
    let config = fx.root.join("xdg/coder/config.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(&config, "default_backend = \"deepseek\"\n").unwrap();
    for seed in 0..4 {
        let (env, out) = fx.run("auto:glm,deepseek", seed, &[("CODER_ROUTING", "off")]);
        assert_eq!(env["routing"]["policy"], "pinned", "{out:?}");
        assert_eq!(env["routing"]["chosen"], "deepseek");
        assert_eq!(env["routing"]["propensity"], 1.0);
        assert_eq!(env["success"], true);
    }

    // The outcome learnt is the verify verdict: a run whose check fails is a failure of
    // the backend that did it, although the model's own result was fine.
    let mut cmd = fx.command(&["--cd"]);
    cmd.arg(&fx.ws)
        .arg("--claude-bin")
        .arg(&fx.bin)
        .args(["--backend", "auto:glm,deepseek", "--verify", "exit 1"])
        .args(["--no-verify-baseline", "--repair-turns", "0", "a task"])
        .env("CODER_ROUTING", "off");
    let out = cmd.output_bounded();
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["error_kind"], "verify_failed", "{env}");
    let recorded = fx.choices();
    assert_eq!(recorded.last().unwrap()["outcome"], "failure");

    let (env, out) = fx.run("auto:glm,nosuch", 1, &[]);
    assert_eq!(env["error_kind"], "config_error", "{env}");
    assert!(env["error"].as_str().unwrap().contains("nosuch"));
    assert_eq!(out.status.code(), Some(78));
    let (env, _) = fx.run("auto:glm,,deepseek", 1, &[]);
    assert_eq!(env["error_kind"], "config_error", "{env}");
    let (env, _) = fx.run("auto:glm", 1, &[("ZAI_API_KEY", "")]);
    assert_eq!(env["error_kind"], "config_error", "{env}");
}

/// The envelope conforms to the published schema (schema/envelope.schema.json).
fn check_schema(envelope: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/envelope.schema.json");
    let schema: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(envelope)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?} in {envelope}");
}

/// A backend in a cooldown in the shared store is skipped by `auto` and reported as
/// cooling; the run goes to the other candidate whatever the seed.
#[test]
fn auto_skips_a_backend_cooling_in_the_store() {
    let fx = Fx::new("deepseek");
    let store = coder::store::Store::open(&coder::store::Location::Sqlite(
        fx.root.join("state/coder.db"),
    ))
    .unwrap();
    let until = coder::store::now_ms() + 3_600_000;
    store
        .set_cooldown(&coder::store::Cooldown {
            backend: "glm".into(),
            until_ms: until,
            retry_at: coder::store::format_utc(until),
            class: "quota_exhausted".into(),
            provider: "zai".into(),
            code: Some("1308".into()),
            http_status: Some(429),
            message: "quota used up".into(),
            set_by: "test".into(),
        })
        .unwrap();
    drop(store);
    for seed in 1..=4 {
        let (env, out) = fx.run("auto:glm,deepseek", seed, &[]);
        assert_eq!(env["routing"]["chosen"], "deepseek", "seed {seed}: {out:?}");
        assert_eq!(
            env["routing"]["cooling"],
            serde_json::json!(["glm"]),
            "{env}"
        );
        assert_eq!(env["success"], true, "{env}");
    }
}

/// `coder route forget NAME` of a name that is no preset, no config table and nothing
/// learnt (a typo) says so, listing the known backends, and exits 78: forgetting nothing
/// must not look like success. A known backend with nothing learnt forgets nothing, fine.
#[test]
fn forgetting_an_unknown_backend_is_refused() {
    let fx = Fx::new("deepseek");
    let out = fx.route(&["forget", "deepseak"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    assert!(
        stderr.contains("\"deepseak\"") && stderr.contains("deepseek"),
        "{stderr}"
    );
    let config = fx.root.join("xdg/coder/config.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(
        &config,
        "[backends.mine]\nbase_url = \"https://example.invalid\"\nkey_env = \"ZAI_API_KEY\"\n",
    )
    .unwrap();
    for known in ["glm", "mine"] {
        let out = fx.route(&["forget", known]);
        assert!(out.status.success(), "{known}: {out:?}");
    }
}

/// A fake CLI that writes `.venv/bin/check` (ignored) as `exit 0`, and edits the tracked
/// `a.txt` too when the file `fix-tracked` is beside the workspace.
const IGNORED_FIX: &str = r#"#!/bin/bash
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac; shift
done
cat >/dev/null
mkdir -p .venv/bin && printf '#!/bin/sh\nexit 0\n' > .venv/bin/check && chmod +x .venv/bin/check
[ -e ../fix-tracked ] && echo fixed >> a.txt
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","tools":[],"model":"m"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"fine","session_id":"'"$sid"'","num_turns":1}'
"#;

/// Round nineteen's review: a `--verify` check made to pass by a script the agent wrote
/// under an ignored path is `fixed` with nothing in `changes.files`. Routing learns no
/// success from it (the choice keeps no outcome, `route stats` counts nothing); the same
/// verdict with a tracked file changed too is a success. Unconfined: the ledger and the
/// routing record do not depend on the sandbox.
#[test]
fn a_verdict_fixed_through_ignored_paths_alone_is_not_learnt() {
    let fx = Fx::new("deepseek");
    fs::write(&fx.bin, IGNORED_FIX).unwrap();
    fs::write(fx.ws.join(".gitignore"), ".venv/\n").unwrap();
    fs::write(fx.ws.join("check.sh"), "exec .venv/bin/check\n").unwrap();
    fs::write(fx.ws.join("a.txt"), "a\n").unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@e.invalid",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        let out = Command::new("git")
            .args(args)
            .current_dir(&fx.ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &fx.root)
            .output_bounded();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
    let run = || {
        let mut cmd = fx.command(&["--cd"]);
        cmd.arg(&fx.ws)
            .arg("--claude-bin")
            .arg(&fx.bin)
            .args(["--sandbox", "danger-full-access", "--verify", "sh check.sh"])
            .args(["--backend", "auto:glm,deepseek", "a task"])
            .env("CODER_ROUTING_SEED", "1");
        let out = cmd.output_bounded();
        let env: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no envelope ({e}): {out:?}"));
        assert_eq!(env["verification"]["verdict"], "fixed", "{env}");
        fs::remove_dir_all(fx.ws.join(".venv")).unwrap();
        env
    };
    let env = run();
    assert_eq!(env["changes"]["files_changed"], 0, "{env}");
    assert!(
        env["verification"]["ignored_changes"].as_u64() >= Some(1),
        "{env}"
    );
    let recorded = fx.choices();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["outcome"], Value::Null, "{recorded:?}");
    let learnt = || -> (u64, u64) {
        let stats = fx.route(&["stats", "--json"]);
        let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
        let sum = |field: &str| -> u64 {
            stats["tallies"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t[field].as_u64().unwrap_or(0))
                .sum()
        };
        (sum("successes"), sum("failures"))
    };
    assert_eq!(learnt(), (0, 0));

    fs::write(fx.root.join("fix-tracked"), "").unwrap();
    let env = run();
    assert_eq!(env["changes"]["files_changed"], 1, "{env}");
    let recorded = fx.choices();
    assert_eq!(recorded[1]["outcome"], "success", "{recorded:?}");
    assert_eq!(learnt(), (1, 0));
}

/// `coder route explain` names only what the caller gave: with no `--backend` and no key
/// set, the refusal said "--backend auto: no backend is usable", a flag they never wrote;
/// with `--backend glm` (or `CODER_BACKEND=glm`) it explained `auto`'s routing without a
/// word that a run on one named backend is not routed.
#[test]
fn route_explain_names_only_the_backend_the_caller_gave() {
    let fx = Fx::new("deepseek");
    let mut cmd = fx.command(&["route", "explain", "a task"]);
    for key in ["ZAI_API_KEY", "DEEPSEEK_API_KEY", "MINIMAX_API_KEY"] {
        cmd.env_remove(key);
    }
    let out = cmd.output_bounded();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    assert!(
        stderr.contains("the default candidates") && stderr.contains("no backend is usable"),
        "{stderr}"
    );
    assert!(!stderr.contains("--backend auto:"), "{stderr}");

    for (args, env) in [
        (
            &["explain", "--json", "--backend", "glm", "a task"][..],
            None,
        ),
        (&["explain", "--json", "a task"][..], Some("glm")),
    ] {
        let mut cmd = fx.command(&[&["route"][..], args].concat());
        if let Some(name) = env {
            cmd.env("CODER_BACKEND", name);
        }
        let out = cmd.output_bounded();
        assert!(out.status.success(), "{args:?} {env:?}: {out:?}");
        let explain: Value = serde_json::from_slice(&out.stdout).unwrap();
        let warnings = explain["warnings"].to_string();
        assert!(
            warnings.contains("\\\"glm\\\"") && warnings.contains("is not routed"),
            "{args:?} {env:?}: {explain}"
        );
    }
}

/// `coder route --config FILE` reads what a run with `--config FILE` used: that file's
/// `store` (stats of the runs made with it) and its `[backends.NAME]` tables (`forget
/// NAME`). `coder route` had no `--config`: only `CODER_CONFIG` reached it, and a bare
/// `forget mine` was refused as no such backend (newuser30's note, round thirty).
#[test]
fn route_takes_the_config_file_a_run_was_given() {
    let fx = Fx::new("deepseek");
    let config = fx.root.join("team.toml");
    let store = fx.root.join("team.db");
    fs::write(
        &config,
        format!(
            "store = {:?}\n[backends.mine]\nbase_url = \"https://example.invalid\"\nkey_env = \"ZAI_API_KEY\"\n",
            store.display().to_string()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let mut cmd = fx.command(&["--config", config, "--cd"]);
    cmd.arg(&fx.ws)
        .arg("--claude-bin")
        .arg(&fx.bin)
        .args(["--backend", "auto:deepseek", "a task"]);
    let out = cmd.output_bounded();
    assert!(out.status.success(), "{out:?}");
    assert!(store.exists(), "the run used the config file's store");

    let tallies = |args: &[&str]| -> Value {
        let out = fx.route(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["tallies"].clone()
    };
    for args in [
        &["--config", config, "stats", "--json"][..],
        &["stats", "--json", "--config", config][..],
    ] {
        let got = tallies(args);
        assert_eq!(got[0]["backend"], "deepseek", "{args:?}: {got}");
    }
    assert_eq!(
        tallies(&["stats", "--json"]),
        serde_json::json!([]),
        "the default store"
    );

    let out = fx.route(&["forget", "mine"]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let out = fx.route(&["forget", "mine", "--config", config]);
    assert!(out.status.success(), "{out:?}");
}
