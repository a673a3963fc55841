//! The run mode's sandbox options: an extra `--write` root is writable by the agent, and
//! without it the same write outside the workspace is refused by the kernel.

mod common;

use common::{Bounded, Fake, steps};
use serde_json::json;

fn writes_outside(target: &std::path::Path) -> Fake {
    Fake::new(json!([
        steps::init(),
        {"step": "touch", "path": target.join("out.txt").to_str().unwrap(), "text": "written"},
        steps::text("wrote it"),
        steps::result_ok("wrote it"),
    ]))
}

#[test]
fn an_extra_write_root_is_writable_and_nothing_else_outside_the_workspace() {
    let outside = tempfile::tempdir().unwrap();
    let fake = writes_outside(outside.path());
    let out = fake
        .coder()
        .arg("--write")
        .arg(outside.path())
        .arg("write it")
        .run();
    out.assert_success("wrote it");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("out.txt")).unwrap(),
        "written"
    );

    let elsewhere = tempfile::tempdir().unwrap();
    let fake = writes_outside(elsewhere.path());
    let out = fake.coder().arg("write it").run();
    assert_eq!(out.envelope["success"], false, "{}", out.explain());
    assert!(!elsewhere.path().join("out.txt").exists());
}

/// `allow_hosts` in the config file and `--allow-host` both reach the agent's allow-list
/// (the sandbox note the model gets names it), and the agent's environment points every
/// proxy variable at coder's proxy with no `NO_PROXY` exemption.
#[test]
fn allowed_hosts_come_from_the_flag_and_the_config_file() {
    let fake = Fake::new(json!([steps::init(), steps::result_ok("ok")]));
    let config = fake.root().join("coder.toml");
    std::fs::write(&config, "allow_hosts = [\"@pypi\"]\n").unwrap();
    let out = fake
        .coder()
        .env("CODER_CONFIG", &config)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .args(["--allow-host", "internal.example:8443", "task"])
        .run();
    out.assert_success("ok");
    let record = fake.record();
    let note = record.flag_value("--append-system-prompt").unwrap();
    for host in ["pypi.org:443", "internal.example:8443", "127.0.0.1:9"] {
        assert!(note.contains(host), "{host} missing from {note}");
    }
    let env = record.env();
    assert!(
        !env.contains_key("NO_PROXY") && !env.contains_key("no_proxy"),
        "{env:?}"
    );
    let proxy = env.get("HTTPS_PROXY").cloned().unwrap_or_default();
    assert!(proxy.starts_with("http://127.0.0.1:"), "{env:?}");
    for name in [
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        assert_eq!(env.get(name), Some(&proxy), "{name}");
    }
}

/// Sandbox arguments the caller got wrong (an `--allow-host` value, a `--deny` or
/// `--protect` glob, a `--read` or `--write` path that does not exist) are bad arguments:
/// `config_error` (78) naming the flag and the value, before the CLI starts; `coder
/// sandbox` exits 78 for the same, saying so on stderr.
#[test]
fn bad_sandbox_arguments_are_config_errors_naming_flag_and_value() {
    let fake = Fake::new(json!([steps::init(), steps::result_ok("ran")]));
    let missing = fake.root().join("no-such-dir");
    let missing = missing.to_str().unwrap();
    let cases: [(&str, &str); 7] = [
        ("--allow-host", "@nope"),
        ("--allow-host", "https://x.org"),
        ("--allow-host", "x.org:0"),
        ("--deny", "secrets/[x"),
        ("--protect", "conf/[x"),
        ("--read", missing),
        ("--write", missing),
    ];
    for (flag, value) in cases {
        let out = fake.coder().args([flag, value, "go"]).run();
        out.assert_failure("config_error", 78);
        let error = out.envelope["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(flag) && error.contains(value),
            "{flag} {value}: {}",
            out.explain()
        );
        assert!(!fake.has_record(), "the CLI ran: {}", out.explain());
        let sandbox = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(["sandbox", "--cd"])
            .arg(fake.workspace())
            .args([flag, value, "--", "true"])
            .env("CODER_STATE_DIR", fake.state_dir())
            .output_bounded();
        let stderr = String::from_utf8_lossy(&sandbox.stderr);
        assert_eq!(sandbox.status.code(), Some(78), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(value),
            "{flag} {value}: {stderr}"
        );
    }
}

/// `--write` of a system tree, of anything under one, or of the home directory (or an
/// ancestor) is refused before anything runs, with a `config_error` naming the path;
/// `coder sandbox` refuses the same (exit 78). An ordinary directory is accepted (above).
#[test]
fn write_roots_in_system_trees_or_the_home_are_refused() {
    let fake = Fake::new(json!([steps::init(), steps::result_ok("ran")]));
    let home = fake.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut refused: Vec<std::path::PathBuf> = [
        "/usr", "/etc", "/usr/bin", "/boot", "/proc", "/sys", "/dev", "/",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .filter(|p| p.exists())
    .collect();
    for lib in ["/bin", "/lib", "/lib64"] {
        if std::path::Path::new(lib).exists() {
            refused.push(lib.into());
        }
    }
    refused.push(home.clone());
    refused.push(fake.root().to_path_buf());
    for path in &refused {
        let out = fake
            .coder()
            .env("HOME", &home)
            .arg("--write")
            .arg(path)
            .arg("go")
            .run();
        let detail = out.assert_failure("config_error", 78);
        let error = out.envelope["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&path.display().to_string()),
            "{}: {}",
            path.display(),
            out.explain()
        );
        let _ = detail;
        assert!(
            !fake.has_record(),
            "the CLI ran with --write {}",
            path.display()
        );
        let sandbox = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
            .args(["sandbox", "--cd"])
            .arg(fake.workspace())
            .arg("--write")
            .arg(path)
            .args(["--", "true"])
            .env("HOME", &home)
            .env("CODER_STATE_DIR", fake.state_dir())
            .output()
            .unwrap();
        assert_eq!(
            sandbox.status.code(),
            Some(78),
            "{}: {sandbox:?}",
            path.display()
        );
    }
}

/// The agent gets a private tmpfs on `/dev/shm`, so nothing granted may lie there: a state
/// directory in `/dev/shm` (coder's run directories go in it) and a `--read` path there are
/// refused before the CLI starts, with a `sandbox_error` naming the path and what to set,
/// and the refused run leaves no run directory behind. `coder sandbox` refuses the same.
#[test]
fn granted_paths_in_dev_shm_are_refused_up_front() {
    let fake = Fake::new(json!([steps::init(), steps::result_ok("ran")]));
    let shm = tempfile::Builder::new()
        .prefix("coder-test-")
        .tempdir_in("/dev/shm")
        .expect("a tmpfs on /dev/shm (every Linux this project supports has one)");
    let state = shm.path().join("state");
    let out = fake.coder().env("CODER_STATE_DIR", &state).arg("go").run();
    out.assert_failure("sandbox_error", 71);
    let error = out.envelope["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("/dev/shm") && error.contains("CODER_STATE_DIR"),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the CLI ran: {}", out.explain());
    for dir in ["cli-runs", "sandbox"] {
        let left: Vec<_> = std::fs::read_dir(state.join(dir))
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{dir}/ keeps {left:?}");
    }

    let data = shm.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let out = fake.coder().arg("--read").arg(&data).arg("go").run();
    out.assert_failure("sandbox_error", 71);
    let error = out.envelope["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&data.display().to_string()),
        "{}",
        out.explain()
    );
    assert!(!fake.has_record(), "the CLI ran: {}", out.explain());

    let sandbox = std::process::Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["sandbox", "--cd"])
        .arg(fake.workspace())
        .args(["--", "true"])
        .env("CODER_STATE_DIR", &state)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    assert_eq!(sandbox.status.code(), Some(71), "{sandbox:?}");
    let stderr = String::from_utf8_lossy(&sandbox.stderr);
    assert!(stderr.contains("/dev/shm"), "{stderr}");
}

/// The sandbox's PID 1 (the helper's init, forked from coder itself when the run starts)
/// shows the agent nothing of coder's own arguments or environment: its
/// `/proc/1/cmdline`, readable without any ptrace right, reads as the helper's argument
/// list, not as coder's (which here hold the task and a flag's value), and its
/// `/proc/1/environ` holds none of coder's variables (one the agent's environment never
/// gets, among them).
#[test]
fn the_sandboxs_init_shows_none_of_coders_arguments_or_environment() {
    // Relative paths are the fake's own directory's, in the workspace.
    let scenario = json!([
        steps::init(),
        {"step": "copy", "from": "/proc/1/cmdline", "to": "cmdline.txt"},
        {"step": "copy", "from": "/proc/1/environ", "to": "environ.txt"},
        steps::result_ok("looked"),
    ]);
    let fake = Fake::new(scenario);
    let seen = fake.workspace().join(".fake-claude");
    let out = fake
        .coder()
        .env("CODER_ROUND14_MARKER_VAR", "env-marker-8d1e")
        .args(["--deny", "glob-marker-3f7a", "task-marker-5c2b"])
        .run();
    out.assert_success("looked");
    let cmdline = std::fs::read_to_string(seen.join("cmdline.txt")).unwrap();
    let environ = std::fs::read_to_string(seen.join("environ.txt")).unwrap();
    for marker in ["task-marker-5c2b", "glob-marker-3f7a", "--deny", "--cd"] {
        assert!(
            !cmdline.contains(marker),
            "{marker} in PID 1's cmdline: {cmdline:?}"
        );
    }
    assert!(
        cmdline.starts_with("coder-helper\0__exec-helper\0"),
        "PID 1's cmdline: {cmdline:?}"
    );
    assert!(
        !environ.contains("env-marker-8d1e") && !environ.contains("CODER_ROUND14"),
        "coder's variable in PID 1's environ: {environ:?}"
    );
}
