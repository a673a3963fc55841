//! Backend resolution and the child's environment, through the library's pure functions:
//! every preset's environment (snapshots in fixtures/config/), the layering order
//! (preset < file < environment < flags), replay backends, and every config error.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use coder::config::{
    BackendArgs, BackendKind, ConfigError, KeySource, ResolvedBackend, child_environment,
    resolve_backend,
};

fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

/// A caller's environment with everything the child must not see, plus every vendor key.
fn caller_env() -> Vec<(OsString, OsString)> {
    env(&[
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/home/u"),
        ("USER", "u"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("TERM", "xterm-256color"),
        ("TZ", "UTC"),
        ("CLAUDECODE", "1"),
        ("CLAUDE_CODE_ENTRYPOINT", "cli"),
        ("GITHUB_TOKEN", "ghp_not_for_the_child"),
        ("OPENAI_API_KEY", "sk-not-for-the-child"),
        ("ANTHROPIC_API_KEY", "sk-ant-callers-key"),
        ("ANTHROPIC_BASE_URL", "https://callers-proxy.example"),
        ("ANTHROPIC_MODEL", "callers-model"),
        ("ZAI_API_KEY", "zai-key"),
        ("ZHIPUAI_API_KEY", "zhipu-key"),
        ("DEEPSEEK_API_KEY", "deepseek-key"),
        ("MINIMAX_API_KEY", "minimax-key"),
    ])
}

fn backend_args(name: &str) -> BackendArgs {
    BackendArgs {
        backend: Some(name.to_owned()),
        ..BackendArgs::default()
    }
}

fn render_env(vars: &[(OsString, OsString)]) -> String {
    vars.iter()
        .map(|(k, v)| format!("{}={}\n", k.to_string_lossy(), v.to_string_lossy()))
        .collect()
}

fn get<'a>(vars: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
    vars.iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.to_str())
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Compares with a fixture; `CODER_UPDATE_FIXTURES=1` rewrites it instead
/// (refused under `CI=true`).
fn assert_snapshot(path: &Path, actual: &str) {
    if common::update_fixtures() {
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (CODER_UPDATE_FIXTURES=1 creates it)",
            path.display()
        )
    });
    assert_eq!(actual, expected, "snapshot {}", path.display());
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn resolve_with_config(
    config: &Path,
    args: BackendArgs,
    process_env: &[(OsString, OsString)],
) -> ResolvedBackend {
    let args = BackendArgs {
        config: Some(config.to_owned()),
        ..args
    };
    resolve_backend(&args, process_env).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_preset_produces_its_documented_child_environment() {
    let process_env = caller_env();
    for name in coder::config::BUILTIN_NAMES {
        let backend = resolve_backend(&backend_args(name), &process_env)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let child = child_environment(&process_env, &backend);
        assert_snapshot(&fixture(&format!("config/{name}.env")), &render_env(&child));
    }
}

#[test]
fn the_child_never_sees_unrelated_secrets_or_a_parent_session() {
    let process_env = caller_env();
    for name in coder::config::BUILTIN_NAMES {
        let backend = resolve_backend(&backend_args(name), &process_env).unwrap();
        let child = child_environment(&process_env, &backend);
        for hidden in [
            "CLAUDECODE",
            "CLAUDE_CODE_ENTRYPOINT",
            "GITHUB_TOKEN",
            "OPENAI_API_KEY",
        ] {
            assert_eq!(get(&child, hidden), None, "{name} leaks {hidden}");
        }
        assert_eq!(
            get(&child, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"),
            Some("1"),
            "{name}"
        );
        assert_eq!(get(&child, "DISABLE_TELEMETRY"), Some("1"), "{name}");
        assert_eq!(get(&child, "CLAUDE_CODE_MAX_RETRIES"), Some("3"), "{name}");
        assert_eq!(
            get(&child, "CLAUDE_CONFIG_DIR"),
            Some("/home/u/.local/state/coder/claude"),
            "{name}"
        );
    }
}

#[test]
fn a_token_backend_drops_the_callers_api_key_and_says_so() {
    let process_env = caller_env();
    let glm = resolve_backend(&backend_args("glm"), &process_env).unwrap();
    let child = child_environment(&process_env, &glm);
    assert_eq!(get(&child, "ANTHROPIC_API_KEY"), None);
    assert_eq!(get(&child, "ANTHROPIC_AUTH_TOKEN"), Some("zai-key"));
    assert_eq!(
        get(&child, "ANTHROPIC_BASE_URL"),
        Some("https://api.z.ai/api/anthropic")
    );
    assert!(
        glm.warnings()
            .iter()
            .any(|w| w.contains("ANTHROPIC_API_KEY") && w.contains("$ZAI_API_KEY")),
        "{:?}",
        glm.warnings()
    );
    assert_eq!(glm.secret_values(), ["zai-key"]);
    assert!(
        !format!("{glm:?}").contains("zai-key"),
        "Debug shows the key"
    );

    // The anthropic preset authenticates with that very variable: no warning.
    let anthropic = resolve_backend(&backend_args("anthropic"), &process_env).unwrap();
    assert!(
        anthropic.warnings().is_empty(),
        "{:?}",
        anthropic.warnings()
    );
    let child = child_environment(&process_env, &anthropic);
    assert_eq!(get(&child, "ANTHROPIC_API_KEY"), Some("sk-ant-callers-key"));
    assert_eq!(get(&child, "ANTHROPIC_AUTH_TOKEN"), None);
}

#[test]
fn inherit_keeps_the_callers_claude_settings_but_not_a_key_that_overrides_the_token() {
    let mut process_env = caller_env();
    process_env.extend(env(&[
        ("ANTHROPIC_AUTH_TOKEN", "callers-token"),
        ("CLAUDE_CODE_MAX_RETRIES", "7"),
    ]));
    let backend = resolve_backend(&BackendArgs::default(), &process_env).unwrap();
    assert_eq!(backend.name(), "inherit");
    let child = child_environment(&process_env, &backend);
    assert_eq!(get(&child, "ANTHROPIC_AUTH_TOKEN"), Some("callers-token"));
    assert_eq!(
        get(&child, "ANTHROPIC_BASE_URL"),
        Some("https://callers-proxy.example")
    );
    assert_eq!(get(&child, "ANTHROPIC_MODEL"), Some("callers-model"));
    assert_eq!(get(&child, "CLAUDE_CODE_MAX_RETRIES"), Some("7"));
    assert_eq!(get(&child, "ANTHROPIC_API_KEY"), None);
    assert!(
        backend
            .warnings()
            .iter()
            .any(|w| w.contains("removed ANTHROPIC_API_KEY"))
    );
    assert_eq!(backend.connect_ports(), [443]);
}

#[test]
fn layering_is_preset_then_file_then_environment_then_flags() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "default_backend = \"deepseek\"\n\n[backends.glm]\nmodel = \"file-model\"\nbase_url = \"https://file.example/api\"\n",
    );
    let base = caller_env();
    let model_of = |b: &ResolvedBackend, e: &[(OsString, OsString)]| {
        get(&child_environment(e, b), "ANTHROPIC_MODEL").map(str::to_owned)
    };

    // The file's default_backend picks the backend; CODER_BACKEND beats it; --backend beats both.
    let b = resolve_with_config(&config, BackendArgs::default(), &base);
    assert_eq!(b.name(), "deepseek");
    let mut e = base.clone();
    e.extend(env(&[("CODER_BACKEND", "glm")]));
    assert_eq!(
        resolve_with_config(&config, BackendArgs::default(), &e).name(),
        "glm"
    );
    assert_eq!(
        resolve_with_config(&config, backend_args("minimax"), &e).name(),
        "minimax"
    );

    // Model: preset < file < CODER_MODEL < --model.
    let preset_only = resolve_backend(&backend_args("glm"), &base).unwrap();
    assert_eq!(model_of(&preset_only, &base).as_deref(), Some("glm-4.7"));
    let from_file = resolve_with_config(&config, backend_args("glm"), &base);
    assert_eq!(model_of(&from_file, &base).as_deref(), Some("file-model"));
    let mut e = base.clone();
    e.extend(env(&[
        ("CODER_MODEL", "env-model"),
        ("CODER_BASE_URL", "https://env.example"),
    ]));
    let from_env = resolve_with_config(&config, backend_args("glm"), &e);
    assert_eq!(model_of(&from_env, &e).as_deref(), Some("env-model"));
    let from_flag = resolve_with_config(
        &config,
        BackendArgs {
            model: Some("flag-model".into()),
            base_url: Some("https://flag.example:8443".into()),
            ..backend_args("glm")
        },
        &e,
    );
    assert_eq!(model_of(&from_flag, &e).as_deref(), Some("flag-model"));

    // Base URL follows the same order; the file keeps the preset's other slots.
    assert_eq!(
        preset_only.base_url(),
        Some("https://api.z.ai/api/anthropic")
    );
    assert_eq!(from_file.base_url(), Some("https://file.example/api"));
    assert_eq!(from_env.base_url(), Some("https://env.example"));
    assert_eq!(from_flag.base_url(), Some("https://flag.example:8443"));
    assert_eq!(from_flag.connect_ports(), [8443]);
    let child = child_environment(&e, &from_flag);
    assert_eq!(
        get(&child, "ANTHROPIC_DEFAULT_HAIKU_MODEL"),
        Some("glm-4.5-air")
    );
}

#[test]
fn a_file_profile_can_start_from_a_preset_and_change_its_env() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        r#"
pass_env = ["CARGO_HOME"]

[backends.work]
preset = "deepseek"
key_env = "WORK_KEY"
max_retries = 1
disallowed_tools = []
env = { CLAUDE_CODE_EFFORT_LEVEL = "", EXTRA_SETTING = "on" }
"#,
    );
    let mut e = caller_env();
    e.extend(env(&[
        ("WORK_KEY", "work-key"),
        ("CARGO_HOME", "/opt/cargo"),
        ("RUSTUP_HOME", "/opt/rustup"),
    ]));
    let b = resolve_with_config(&config, backend_args("work"), &e);
    let child = child_environment(&e, &b);
    assert_eq!(get(&child, "ANTHROPIC_AUTH_TOKEN"), Some("work-key"));
    assert_eq!(
        get(&child, "ANTHROPIC_BASE_URL"),
        Some("https://api.deepseek.com/anthropic")
    );
    assert_eq!(get(&child, "ANTHROPIC_MODEL"), Some("deepseek-v4-pro[1m]"));
    assert_eq!(get(&child, "CLAUDE_CODE_MAX_RETRIES"), Some("1"));
    assert_eq!(
        get(&child, "CLAUDE_CODE_EFFORT_LEVEL"),
        None,
        "an empty value removes it"
    );
    assert_eq!(get(&child, "EXTRA_SETTING"), Some("on"));
    assert_eq!(get(&child, "CARGO_HOME"), Some("/opt/cargo"));
    assert_eq!(get(&child, "RUSTUP_HOME"), None);
    assert!(b.disallowed_tools().is_empty());
    assert_eq!(
        b.credential().map(|c| c.source.clone()),
        Some(KeySource::Variable("WORK_KEY".into()))
    );
}

#[test]
fn claude_config_dir_is_private_unless_the_user_asks_for_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = caller_env();
    e.extend(env(&[("XDG_STATE_HOME", "/state")]));
    let private = resolve_backend(&backend_args("glm"), &e).unwrap();
    assert_eq!(
        private.claude_config_dir().path,
        Path::new("/state/coder/claude")
    );

    let user = write_config(dir.path(), "claude_config_dir = \"user\"\n");
    let b = resolve_with_config(&user, backend_args("glm"), &e);
    assert_eq!(get(&child_environment(&e, &b), "CLAUDE_CONFIG_DIR"), None);
    assert_eq!(b.claude_config_dir().path, Path::new("/home/u/.claude"));

    let custom = write_config(dir.path(), "claude_config_dir = \"~/claude-for-coder\"\n");
    let b = resolve_with_config(&custom, backend_args("glm"), &e);
    assert_eq!(
        get(&child_environment(&e, &b), "CLAUDE_CONFIG_DIR"),
        Some("/home/u/claude-for-coder")
    );

    // The environment beats the file.
    e.extend(env(&[("CODER_CLAUDE_CONFIG_DIR", "/elsewhere")]));
    let b = resolve_with_config(&custom, backend_args("glm"), &e);
    assert_eq!(b.claude_config_dir().path, Path::new("/elsewhere"));

    // The private directory is created owner-only.
    let state = tempfile::tempdir().unwrap();
    let e = env(&[
        ("HOME", "/home/u"),
        ("XDG_STATE_HOME", state.path().to_str().unwrap()),
    ]);
    let b = resolve_backend(&backend_args("replay:Cargo.toml"), &e).unwrap();
    b.ensure_claude_config_dir().unwrap();
    let meta = std::fs::metadata(state.path().join("coder/claude")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
}

#[test]
fn replay_backends_need_no_key_and_get_their_url_later() {
    let cassette = fixture("config/cassette.json");
    let mut e = caller_env();
    e.extend(env(&[
        ("HTTPS_PROXY", "http://proxy.example:3128"),
        ("NO_PROXY", "internal.example"),
    ]));
    let name = format!("replay:{}", cassette.display());
    let pending = resolve_backend(&backend_args(&name), &e).unwrap();
    assert_eq!(pending.kind(), BackendKind::Replay);
    assert_eq!(pending.replay_cassette(), Some(cassette.as_path()));
    assert_eq!(pending.base_url(), None);
    assert!(pending.connect_ports().is_empty());
    assert!(
        pending.secret_values().is_empty(),
        "the replay token is no secret"
    );

    let ready = pending.with_base_url("http://127.0.0.1:45678");
    assert_eq!(ready.connect_ports(), [45678]);
    let child = child_environment(&e, &ready);
    assert_eq!(
        get(&child, "ANTHROPIC_BASE_URL"),
        Some("http://127.0.0.1:45678")
    );
    assert_eq!(
        get(&child, "ANTHROPIC_AUTH_TOKEN"),
        Some(coder::config::REPLAY_TOKEN)
    );
    assert_eq!(get(&child, "ANTHROPIC_API_KEY"), None);
    assert_eq!(
        get(&child, "NO_PROXY"),
        Some("internal.example,127.0.0.1,localhost,::1")
    );
    assert_eq!(get(&child, "no_proxy"), Some("127.0.0.1,localhost,::1"));

    // A profile of kind replay can borrow a preset's model slots; its key is not needed.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&cassette, dir.path().join("c.json")).unwrap();
    let config = write_config(
        dir.path(),
        "[backends.glm-replay]\npreset = \"glm\"\nkind = \"replay\"\ncassette = \"c.json\"\n",
    );
    let no_keys = env(&[("HOME", "/home/u"), ("PATH", "/bin")]);
    let b = resolve_with_config(&config, backend_args("glm-replay"), &no_keys)
        .with_base_url("http://127.0.0.1:1234");
    assert_eq!(
        b.replay_cassette(),
        Some(dir.path().join("c.json").as_path())
    );
    let child = child_environment(&no_keys, &b);
    assert_eq!(get(&child, "ANTHROPIC_MODEL"), Some("glm-4.7"));
    assert_eq!(
        get(&child, "ANTHROPIC_BASE_URL"),
        Some("http://127.0.0.1:1234")
    );
}

#[test]
fn a_proxy_port_is_allowed_beside_the_api_port() {
    let mut e = caller_env();
    e.extend(env(&[("https_proxy", "http://proxy.example:3128")]));
    let b = resolve_backend(&backend_args("minimax"), &e).unwrap();
    assert_eq!(b.connect_ports(), [443, 3128]);
    let child = child_environment(&e, &b);
    assert_eq!(
        get(&child, "https_proxy"),
        Some("http://proxy.example:3128")
    );
}

// ---- config errors: each is one actionable line ----

fn error_of(args: BackendArgs, process_env: &[(OsString, OsString)]) -> ConfigError {
    match resolve_backend(&args, process_env) {
        Ok(b) => panic!("resolved {} instead of failing", b.name()),
        Err(e) => {
            assert!(!e.to_string().contains('\n'), "multi-line message: {e}");
            e
        }
    }
}

#[test]
fn unreadable_config_file() {
    let e = error_of(
        BackendArgs {
            config: Some("/nonexistent/coder.toml".into()),
            ..BackendArgs::default()
        },
        &caller_env(),
    );
    assert!(matches!(e, ConfigError::ReadFile { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("cannot read config file /nonexistent/coder.toml: "),
        "{e}"
    );

    // CODER_CONFIG is as explicit as --config.
    let mut env_config = caller_env();
    env_config.extend(env(&[("CODER_CONFIG", "/nonexistent/env.toml")]));
    let e = error_of(BackendArgs::default(), &env_config);
    assert!(e.to_string().contains("/nonexistent/env.toml"), "{e}");
}

#[test]
fn malformed_config_file_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[backends.glm]\nmodel = \"x\"\nbase_ulr = \"https://x\"\n",
    );
    let e = error_of(
        BackendArgs {
            config: Some(config.clone()),
            ..BackendArgs::default()
        },
        &caller_env(),
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("config file {}, line 3: ", config.display())),
        "{msg}"
    );
    assert!(msg.contains("base_ulr"), "{msg}");

    let config = write_config(dir.path(), "[backends.x]\npreset = \"glmm\"\n");
    let e = error_of(
        BackendArgs {
            config: Some(config),
            ..backend_args("x")
        },
        &caller_env(),
    );
    assert!(matches!(e, ConfigError::Malformed { line: 2, .. }), "{e}");
    assert!(
        e.to_string()
            .contains("unknown preset 'glmm' (did you mean 'glm'?); presets: "),
        "{e}"
    );
}

#[test]
fn unknown_backend_lists_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[backends.work]\npreset = \"glm\"\n");
    let e = error_of(
        BackendArgs {
            config: Some(config),
            ..backend_args("gml")
        },
        &caller_env(),
    );
    assert_eq!(
        e.to_string(),
        "unknown backend 'gml' (did you mean 'glm'?); known backends: anthropic, deepseek, glm, \
         glm-cn, inherit, minimax, minimax-cn, work (or replay:CASSETTE)"
    );
}

#[test]
fn key_variable_unset_or_empty() {
    let e = error_of(backend_args("glm"), &env(&[("HOME", "/home/u")]));
    assert!(matches!(e, ConfigError::KeyUnset { .. }), "{e:?}");
    assert!(
        e.to_string().contains("export ZAI_API_KEY=<your key>"),
        "{e}"
    );

    let e = error_of(
        backend_args("minimax-cn"),
        &env(&[("HOME", "/home/u"), ("MINIMAX_API_KEY", "")]),
    );
    assert!(matches!(e, ConfigError::KeyEmpty { .. }), "{e:?}");
    assert!(
        e.to_string().contains("$MINIMAX_API_KEY, which is empty"),
        "{e}"
    );
}

#[test]
fn base_url_that_is_not_http() {
    let e = error_of(
        BackendArgs {
            base_url: Some("ftp://api.example/anthropic".into()),
            ..backend_args("deepseek")
        },
        &caller_env(),
    );
    assert_eq!(
        e.to_string(),
        "backend 'deepseek': base URL 'ftp://api.example/anthropic' (from --base-url) is not an \
         http:// or https:// URL with a host"
    );

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[backends.local]\nkey_env = \"ZAI_API_KEY\"\n\nbase_url = \"localhost:8080\"\n",
    );
    let e = error_of(
        BackendArgs {
            config: Some(config.clone()),
            ..backend_args("local")
        },
        &caller_env(),
    );
    assert!(
        e.to_string()
            .contains(&format!("(from {}, line 4)", config.display())),
        "{e}"
    );

    let config = write_config(dir.path(), "[backends.local]\nkey_env = \"ZAI_API_KEY\"\n");
    let e = error_of(
        BackendArgs {
            config: Some(config),
            ..backend_args("local")
        },
        &caller_env(),
    );
    assert!(matches!(e, ConfigError::MissingBaseUrl { .. }), "{e:?}");
}

#[test]
fn other_errors_are_one_actionable_line() {
    let e = error_of(
        backend_args("replay:/nonexistent/cassette.json"),
        &caller_env(),
    );
    assert!(matches!(e, ConfigError::CassetteMissing { .. }), "{e:?}");

    let e = error_of(backend_args("glm"), &env(&[("ZAI_API_KEY", "k")]));
    assert!(matches!(e, ConfigError::NoHome), "{e:?}");

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "claude_config_dir = \"relative/dir\"\n");
    let e = error_of(
        BackendArgs {
            config: Some(config),
            ..backend_args("glm")
        },
        &caller_env(),
    );
    assert!(
        e.to_string()
            .contains("must be \"private\", \"user\", or an absolute path"),
        "{e}"
    );
}

#[test]
fn vendor_presets_carry_their_cli_workarounds() {
    let process_env = caller_env();
    for name in ["glm", "glm-cn", "deepseek", "minimax", "minimax-cn"] {
        let b = resolve_backend(&backend_args(name), &process_env).unwrap();
        assert_eq!(b.disallowed_tools(), ["WebSearch"], "{name}");
        assert_eq!(
            b.append_system_prompt().is_some(),
            name.starts_with("glm"),
            "{name}: only GLM needs the identity fix"
        );
    }
    let anthropic = resolve_backend(&backend_args("anthropic"), &process_env).unwrap();
    assert!(anthropic.disallowed_tools().is_empty());
    assert!(anthropic.append_system_prompt().is_none());
}

#[test]
fn the_example_config_resolves_every_profile() {
    let config = fixture("config/example.toml");
    let mut e = caller_env();
    e.extend(env(&[("WORK_DEEPSEEK_KEY", "w"), ("ROUTER_KEY", "r")]));
    let default = resolve_with_config(&config, BackendArgs::default(), &e);
    assert_eq!(default.name(), "glm");
    for name in ["glm", "deepseek-work", "router", "offline"] {
        let b = resolve_with_config(&config, backend_args(name), &e);
        assert_eq!(b.config_file(), Some(config.as_path()), "{name}");
    }
    let router = resolve_with_config(&config, backend_args("router"), &e);
    assert_eq!(router.connect_ports(), [3456]);
    assert_eq!(router.description(), "claude-code-router on this machine");
    let offline = resolve_with_config(&config, backend_args("offline"), &e);
    assert_eq!(
        offline.replay_cassette(),
        Some(fixture("config/cassette.json").as_path())
    );
}

#[test]
fn inherit_without_any_credentials_is_a_config_error_before_the_cli_starts() {
    let bare = env(&[("HOME", "/home/u"), ("PATH", "/bin")]);
    let message = resolve_backend(&BackendArgs::default(), &bare)
        .unwrap_err()
        .to_string();
    for needle in [
        "ANTHROPIC_API_KEY",
        "--backend",
        "replay:",
        "claude_config_dir",
    ] {
        assert!(message.contains(needle), "{needle} missing: {message}");
    }
    let mut with_token = bare.clone();
    with_token.extend(env(&[("CLAUDE_CODE_OAUTH_TOKEN", "t")]));
    let b = resolve_backend(&BackendArgs::default(), &with_token).unwrap();
    assert!(b.warnings().is_empty(), "{:?}", b.warnings());
}
