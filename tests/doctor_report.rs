//! `coder doctor` end to end: reachability of a loopback backend, shims of the claude CLI
//! it refuses, config problems, and the exit code.

mod common;

use common::Bounded;

use common::real_claude;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

struct Doctor {
    home: tempfile::TempDir,
}

impl Doctor {
    fn new() -> Doctor {
        Doctor {
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// A config with a `local` backend at `127.0.0.1:port`, keyed by `$LOCAL_KEY`.
    fn config_for_port(&self, port: u16) -> PathBuf {
        let path = self.home.path().join("coder.toml");
        std::fs::write(
            &path,
            format!("[backends.local]\nbase_url = \"http://127.0.0.1:{port}\"\nkey_env = \"LOCAL_KEY\"\nhaiku_model = \"small\"\n"),
        )
        .unwrap();
        path
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_coder"))
            .arg("doctor")
            .args(args)
            .env_clear()
            .env("PATH", self.home.path().join("empty-bin"))
            .env("HOME", self.home.path())
            .env("LOCAL_KEY", "sk-very-secret-value")
            .output_bounded()
    }

    fn json(&self, args: &[&str]) -> (Value, Option<i32>, String) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let stdout = String::from_utf8(out.stdout).unwrap();
        let report: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
        (report, out.status.code(), stdout)
    }
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {report}"))
}

fn status(report: &Value, name: &str) -> String {
    check(report, name)["status"].as_str().unwrap().to_owned()
}

#[test]
fn a_listening_loopback_backend_is_reachable_and_its_key_never_printed() {
    let doctor = Doctor::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = doctor.config_for_port(port);
    let (report, _, stdout) =
        doctor.json(&["--config", config.to_str().unwrap(), "--backend", "local"]);
    assert_eq!(status(&report, "network"), "ok", "{report}");
    let summary = check(&report, "network")["summary"].as_str().unwrap();
    assert!(summary.contains(&format!("127.0.0.1:{port}")), "{summary}");
    assert_eq!(status(&report, "backend"), "ok", "{report}");
    assert_eq!(status(&report, "config"), "ok", "{report}");
    assert_eq!(report["backend"], "local");
    assert!(
        !stdout.contains("sk-very-secret-value"),
        "the key leaked: {stdout}"
    );
    drop(listener);
}

#[test]
fn an_unreachable_loopback_backend_fails_the_doctor() {
    let doctor = Doctor::new();
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = doctor.config_for_port(port);
    let (report, code, _) =
        doctor.json(&["--config", config.to_str().unwrap(), "--backend", "local"]);
    assert_eq!(status(&report, "network"), "fail", "{report}");
    let net = check(&report, "network");
    assert!(
        net["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("cannot connect to 127.0.0.1:{port}")),
        "{net}"
    );
    assert!(
        net["hints"][0]
            .as_str()
            .unwrap()
            .contains("nothing listens"),
        "{net}"
    );
    assert_eq!(report["ok"], false);
    assert_eq!(code, Some(1));
}

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_npm_placeholder_is_refused_and_the_real_binary_suggested() {
    let doctor = Doctor::new();
    let scope = doctor.home.path().join("node_modules/@anthropic-ai");
    let placeholder = scope.join("claude-code/bin/claude.exe");
    write_executable(
        &placeholder,
        "#!/bin/sh\necho 'Error: claude native binary not installed. Reinstall without --ignore-scripts.' >&2\nexit 1\n",
    );
    let platform = scope.join("claude-code-linux-x64/claude");
    std::fs::create_dir_all(platform.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(std::env::current_exe().unwrap(), &platform).unwrap();

    let (report, code, _) = doctor.json(&["--claude-bin", placeholder.to_str().unwrap()]);
    let claude = check(&report, "claude");
    assert_eq!(claude["status"], "fail", "{claude}");
    assert!(
        claude["summary"]
            .as_str()
            .unwrap()
            .contains("npm package's placeholder"),
        "{claude}"
    );
    let hint = claude["hints"][0].as_str().unwrap();
    assert!(hint.contains(&platform.display().to_string()), "{hint}");
    assert_eq!(code, Some(1));
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_script_wrapper_is_judged_by_what_it_runs_as_a_run_would() {
    let doctor = Doctor::new();
    // A wrapper that cannot run: the version check fails it.
    let broken = doctor.home.path().join("bin/claude");
    write_executable(&broken, "#!/usr/bin/env node\nrequire('./cli.js')\n");
    let (report, _, _) = doctor.json(&["--claude-bin", broken.to_str().unwrap()]);
    assert_eq!(check(&report, "claude")["status"], "fail", "{report}");

    // A `#!/bin/sh` wrapper around the real CLI runs fine, in a run as here.
    let claude = real_claude();
    let wrapper = doctor.home.path().join("wrapped/claude");
    write_executable(
        &wrapper,
        &format!("#!/bin/sh\nexec '{}' \"$@\"\n", claude.display()),
    );
    let (report, _, stdout) = doctor.json(&["--claude-bin", wrapper.to_str().unwrap()]);
    let checked = check(&report, "claude");
    assert_eq!(checked["status"], "ok", "{stdout}");
    assert!(
        checked["hints"].to_string().contains("is a script"),
        "{checked}"
    );
}

#[test]
fn an_unwritable_state_dir_fails_the_doctor_as_it_fails_a_run() {
    let doctor = Doctor::new();
    let file = doctor.home.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let state = file.join("state");
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["doctor", "--json"])
        .env_clear()
        .env("PATH", doctor.home.path().join("empty-bin"))
        .env("HOME", doctor.home.path())
        .env("CODER_STATE_DIR", &state)
        .output_bounded();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checked = check(&report, "state");
    assert_eq!(checked["status"], "fail", "{checked}");
    assert!(
        checked["summary"]
            .as_str()
            .unwrap()
            .contains("not writable"),
        "{checked}"
    );
    assert_eq!(report["ok"], false);

    // A run in the same place fails too.
    let ws = doctor.home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args([
            "--cd",
            ws.to_str().unwrap(),
            "--claude-bin",
            "/bin/true",
            "task",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", doctor.home.path())
        .env("ANTHROPIC_AUTH_TOKEN", "t")
        .env("CODER_STATE_DIR", &state)
        .output_bounded();
    let envelope: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(envelope["success"], false, "{envelope}");
}

#[test]
fn an_executable_that_is_not_claude_code_is_refused() {
    let doctor = Doctor::new();
    let (report, _, _) = doctor.json(&["--claude-bin", env!("CARGO_BIN_EXE_coder")]);
    let claude = check(&report, "claude");
    assert_eq!(claude["status"], "fail", "{claude}");
    assert!(
        claude["summary"]
            .as_str()
            .unwrap()
            .contains("does not identify itself as Claude Code"),
        "{claude}"
    );

    let (report, _, _) = doctor.json(&[]);
    assert_eq!(
        check(&report, "claude")["summary"],
        "no `claude` on PATH",
        "PATH is an empty directory here"
    );
}

#[test]
fn config_problems_are_reported_in_one_line_each() {
    let doctor = Doctor::new();
    let out = doctor.run(&["--backend", "gml"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("coder doctor\n"), "{text}");
    assert!(
        text.contains("  FAIL  backend     unknown backend 'gml' (did you mean 'glm'?); known backends: anthropic,"),
        "{text}"
    );
    assert!(
        text.contains("  skip  network     no usable backend"),
        "{text}"
    );
    assert!(text.ends_with("problems)\n"), "{text}");

    // A missing key fails the backend check; the rest is still checked.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = doctor.config_for_port(listener.local_addr().unwrap().port());
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["doctor", "--json", "--backend", "local", "--config"])
        .arg(&config)
        .env_clear()
        .env("HOME", doctor.home.path())
        .output_bounded();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let backend = check(&report, "backend");
    assert_eq!(backend["status"], "fail");
    assert!(
        backend["summary"]
            .as_str()
            .unwrap()
            .contains("$LOCAL_KEY, which is not set"),
        "{backend}"
    );
    assert_eq!(status(&report, "network"), "ok");

    // A malformed file fails the config check and names the line.
    let bad = doctor.home.path().join("bad.toml");
    std::fs::write(&bad, "default_backend = 3\n").unwrap();
    let (report, _, _) = doctor.json(&["--config", bad.to_str().unwrap()]);
    let config = check(&report, "config");
    assert_eq!(config["status"], "fail");
    assert!(
        config["summary"].as_str().unwrap().contains("line 1"),
        "{config}"
    );
    drop(listener);
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn with_the_real_cli_and_a_reachable_backend_the_doctor_exits_0() {
    let claude = real_claude();
    let doctor = Doctor::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = doctor.config_for_port(listener.local_addr().unwrap().port());
    let (report, code, stdout) = doctor.json(&[
        "--config",
        config.to_str().unwrap(),
        "--backend",
        "local",
        "--claude-bin",
        claude.to_str().unwrap(),
        "--sandbox",
        "danger-full-access",
    ]);
    let claude = check(&report, "claude");
    assert_eq!(claude["status"], "ok", "{stdout}");
    assert_eq!(
        claude["detail"]["version"],
        coder::doctor::TESTED_CLAUDE_VERSION
    );
    assert_eq!(report["ok"], true, "{stdout}");
    assert_eq!(code, Some(0), "{stdout}");
    drop(listener);
}

#[test]
fn the_network_sandbox_is_checked_for_real_and_skipped_when_unconfined() {
    let doctor = Doctor::new();
    let (report, _, _) = doctor.json(&[]);
    let egress = check(&report, "egress");
    // This machine runs the sandbox suites, so the layer must work here.
    assert_eq!(egress["status"], "ok", "{egress}");
    assert!(
        egress["summary"]
            .as_str()
            .unwrap()
            .contains("loopback only"),
        "{egress}"
    );
    let (report, _, _) = doctor.json(&["--sandbox", "danger-full-access"]);
    assert_eq!(check(&report, "egress")["status"], "skip");
}

/// `coder doctor` on a vendor backend (DESIGN §12): every model slot the CLI picks from
/// must be mapped (an unmapped Haiku slot is Z.ai's classic 1211), and the compat check says
/// what coder changes for the vendor, including a request shape the store remembers.
#[test]
fn model_slots_and_the_remembered_request_shape_are_checked() {
    let doctor = Doctor::new();
    let home = doctor.home.path();
    let config = home.join("coder.toml");
    std::fs::write(
        &config,
        "[backends.ds]\nbase_url = \"https://api.deepseek.com/anthropic\"\nkey_env = \"LOCAL_KEY\"\nmodel = \"deepseek-v4-pro\"\nopus_model = \"deepseek-v4-pro\"\nsonnet_model = \"deepseek-v4-pro\"\n\n[backends.mapped]\npreset = \"deepseek\"\nkey_env = \"LOCAL_KEY\"\n",
    )
    .unwrap();
    let state = home.join("state");
    let report = |backend: &str| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(["doctor", "--json", "--connect-timeout", "0.05", "--config"])
            .arg(&config)
            .args(["--backend", backend])
            .env_clear()
            .env("PATH", home.join("empty-bin"))
            .env("HOME", home)
            .env("CODER_STATE_DIR", &state)
            .env("LOCAL_KEY", "sk-very-secret-value")
            .output_bounded();
        serde_json::from_slice(&out.stdout).unwrap()
    };

    let unmapped = report("ds");
    let models = check(&unmapped, "models");
    assert_eq!(models["status"], "fail", "{models}");
    assert!(
        models["summary"]
            .as_str()
            .unwrap()
            .contains("haiku is unset"),
        "{models}"
    );
    assert_eq!(
        models["detail"]["unmapped"],
        serde_json::json!(["haiku_model"])
    );
    let compat = check(&unmapped, "compat");
    assert_eq!(compat["detail"]["provider"], "deepseek");
    assert_eq!(compat["detail"]["request_shape"], "full");
    assert!(
        compat["summary"]
            .as_str()
            .unwrap()
            .contains("may stay silent 600 s"),
        "{compat}"
    );

    // The preset maps every slot; a run that met a system-role rejection left "compat".
    std::fs::create_dir_all(&state).unwrap();
    let store =
        coder::store::Store::open(&coder::store::Location::Sqlite(state.join("coder.db"))).unwrap();
    store
        .set_compat_shape(
            "mapped",
            coder::store::RequestShape::Compat,
            Some("system_role"),
        )
        .unwrap();
    drop(store);
    let mapped = report("mapped");
    assert_eq!(status(&mapped, "models"), "ok", "{mapped}");
    let compat = check(&mapped, "compat");
    assert_eq!(compat["detail"]["request_shape"], "compat", "{compat}");
    assert!(
        compat["summary"]
            .as_str()
            .unwrap()
            .contains("request shape compat (remembered"),
        "{compat}"
    );
}

/// `--connect-timeout` that is not a positive, finite number of seconds (NaN, negative,
/// infinite, 0) is a usage error naming the flag and the value; it fell back to 3 s
/// without a word (and `-1` was taken for a flag). With `--json` it is a `config_error`
/// envelope on stdout.
#[test]
fn a_bad_connect_timeout_is_a_usage_error() {
    for value in ["nan", "-1", "inf", "0", "soon"] {
        let out = Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(["doctor", "--json", "--connect-timeout", value])
            .output_bounded();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{value}: {stdout}");
        let envelope: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{value}: no envelope ({e}): {stdout}"));
        let error = envelope["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("--connect-timeout") && error.contains(&format!("{value:?}")),
            "{value}: {stdout}"
        );
        let out = Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(["doctor", "--connect-timeout", value])
            .output_bounded();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains("--connect-timeout") && stderr.contains(&format!("{value:?}")),
            "{value}: {stderr}"
        );
    }
}
