//! The sandbox policy for coder's own files, the CLI's config dir and secrets, attacked
//! through the built binary. Each rule has a control: the same attack under
//! `danger-full-access` (or without the rule) reaches what it aimed at, so the check can
//! fail. The `coder sandbox` cases run as root and as `nobody` (uid 65534, through a user
//! namespace), like `sandbox_escape.rs`.

mod common;

use common::Bounded;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::sandbox_fixture::{PATH, bash_sandbox, chown_tree, describe, owners, temp_root, write};
use common::{Fake, steps};
use serde_json::json;

/// A home full of secrets and a workspace with one file per default non-accessible glob,
/// each holding a unique marker.
struct Secrets {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    markers: Vec<(String, String)>,
    owner: Option<u32>,
}

/// One example per default glob of DESIGN §5.
const WORKSPACE_SECRETS: [&str; 19] = [
    ".env",
    "app/.env.production",
    "tls/server.pem",
    "tls/server.key",
    "secrets/db.txt",
    "keys/id_rsa",
    "keys/id_ed25519",
    "keys/id_ecdsa",
    "certs/client.p12",
    "certs/client.pfx",
    "android/release.keystore",
    "web/.npmrc",
    "py/.pypirc",
    "ops/.netrc",
    "ops/.pgpass",
    "ops/.git-credentials",
    "gcp/credentials.json",
    "gcp/service-account-prod.json",
    "k8s/kubeconfig",
];

const HOME_SECRETS: [&str; 13] = [
    ".ssh/id_rsa",
    ".gnupg/private-keys-v1.d/k.key",
    ".aws/credentials",
    ".config/gh/hosts.yml",
    ".config/git/credentials",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".docker/config.json",
    ".kube/config",
    ".bashrc",
    ".gitconfig",
];

impl Secrets {
    fn new(owner: Option<u32>) -> Secrets {
        let (dir, root) = temp_root(".tmp");
        let home = root.join("home");
        let ws = root.join("ws");
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut markers = Vec::new();
        for (base, rels) in [(&ws, &WORKSPACE_SECRETS[..]), (&home, &HOME_SECRETS[..])] {
            for rel in rels {
                let marker = format!("SECRET-{}-{id}", rel.replace('/', "_"));
                let text = if *rel == ".gitconfig" {
                    format!(
                        "[user]\n\tname = Tess\n\temail = tess@example.invalid\n[http]\n\textraHeader = {marker}\n"
                    )
                } else {
                    format!("{marker}\n")
                };
                write(&base.join(rel), &text);
                markers.push((base.join(rel).display().to_string(), marker));
            }
        }
        write(&home.join(".cargo/env"), "export CARGO_ENV_SOURCED=1\n");
        write(
            &home.join(".cargo/registry/index/crate.txt"),
            "registry ok\n",
        );
        write(&ws.join("README.md"), "# demo\n");
        if let Some(uid) = owner {
            chown_tree(&root, uid);
        }
        Secrets {
            _dir: dir,
            home,
            ws,
            markers,
            owner,
        }
    }

    fn sandbox(&self, args: &[&str], script: &str) -> Output {
        bash_sandbox(self.owner, &self.ws, &self.home, args, script).output_bounded()
    }

    fn read_all_script(&self) -> String {
        self.markers
            .iter()
            .map(|(path, _)| format!("cat '{path}' 2>/dev/null;"))
            .chain(std::iter::once("true".to_string()))
            .collect()
    }

    fn leaked(&self, out: &Output) -> Vec<String> {
        let text = String::from_utf8_lossy(&out.stdout);
        self.markers
            .iter()
            .filter(|(_, m)| text.contains(m.as_str()))
            .map(|(p, _)| p.clone())
            .collect()
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn every_default_deny_glob_and_home_secret_is_unreadable() {
    for owner in owners() {
        let fx = Secrets::new(owner);
        // Control: without the sandbox every one of them is read.
        let open = fx.sandbox(&["--mode", "danger-full-access"], &fx.read_all_script());
        assert_eq!(
            fx.leaked(&open).len(),
            fx.markers.len(),
            "{}",
            describe(&open)
        );

        let out = fx.sandbox(&[], &fx.read_all_script());
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert!(
            fx.leaked(&out).is_empty(),
            "{owner:?} leaked {:?}",
            fx.leaked(&out)
        );
        // Workspace secrets stay listable and read as empty.
        let listed = fx.sandbox(
            &[],
            "for f in .env tls/server.key k8s/kubeconfig gcp/credentials.json; do \
             test -e \"$f\" && test ! -s \"$f\" || echo \"bad $f\"; done",
        );
        assert_eq!(
            String::from_utf8_lossy(&listed.stdout),
            "",
            "{}",
            describe(&listed)
        );
        // Globs from --deny and the config file's `deny` add to the defaults.
        write(&fx.ws.join("notes.private"), "PRIVATE-NOTE\n");
        write(&fx.ws.join("infra.tfstate"), "TFSTATE\n");
        write(
            &fx.home.join(".config/coder/config.toml"),
            "deny = [\"**/*.tfstate\"]\n",
        );
        if let Some(uid) = owner {
            chown_tree(fx.ws.parent().unwrap(), uid);
        }
        let script = "cat notes.private infra.tfstate .env README.md";
        let open = fx.sandbox(&["--mode", "danger-full-access"], script);
        assert!(String::from_utf8_lossy(&open.stdout).contains("TFSTATE"));
        let out = fx.sandbox(&["--deny", "**/*.private"], script);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "# demo\n",
            "{}",
            describe(&out)
        );
    }
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn toolchains_and_caches_work_and_git_gets_only_the_identity() {
    for owner in owners() {
        let fx = Secrets::new(owner);
        // The repository exists before the run: the sandbox does not let the agent create
        // `.git` at the workspace root (its config would run in the user's own git later).
        let init = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(&fx.ws)
            .status_bounded();
        assert!(init.success());
        if let Some(uid) = owner {
            chown_tree(&fx.ws.join(".git"), uid);
        }
        let out = fx.sandbox(
            &[],
            ". ~/.cargo/env && echo \"env=$CARGO_ENV_SOURCED\"; cat ~/.cargo/registry/index/crate.txt; \
             touch ~/.cargo/registry/new 2>/dev/null && echo cache-writable; \
             git add README.md && git commit -qm init && \
             git log --format='%an <%ae>'; git config --global --list",
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("env=1\nregistry ok\n"), "{}", describe(&out));
        assert!(!text.contains("cache-writable"), "{}", describe(&out));
        assert!(
            text.contains("Tess <tess@example.invalid>"),
            "{}",
            describe(&out)
        );
        assert!(fx.leaked(&out).is_empty(), "{}", describe(&out));
        // --tool-caches makes the caches writable.
        let out = fx.sandbox(&["--tool-caches"], "touch ~/.cargo/registry/new && echo ok");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ok\n",
            "{}",
            describe(&out)
        );
    }
}

#[test]
fn cargo_builds_a_tiny_crate_offline_in_the_default_sandbox() {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
        panic!("HOME is not set");
    };
    // The toolchain running this test (cargo test sets CARGO), wherever it is installed.
    let cargo = PathBuf::from(std::env::var_os("CARGO").expect("cargo test sets CARGO"));
    let toolchain = cargo.parent().expect("cargo's directory").to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let ws = fs::canonicalize(dir.path()).unwrap();
    write(
        &ws.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        &ws.join("src/main.rs"),
        "fn main() { println!(\"tiny ok\"); }\n",
    );
    let out = Command::new("/usr/bin/timeout")
        .args(["300", env!("CARGO_BIN_EXE_coder"), "sandbox", "--cd"])
        .arg(&ws)
        .args([
            "--",
            "/bin/bash",
            "-c",
            "cargo build --offline -q && ./target/debug/tiny",
        ])
        .env_clear()
        .env("PATH", format!("{}:{PATH}", toolchain.display()))
        .env("HOME", &home)
        .output_bounded();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "tiny ok\n",
        "{}",
        describe(&out)
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_sandbox_config_dir_is_fresh_for_every_run() {
    for owner in owners() {
        let fx = Secrets::new(owner);
        // Confined, the names the CLI loads code from are held read-only (empty), so only
        // `.claude.json` and `EVIL.md` land there; unconfined, everything does.
        let plant = "cd \"$CLAUDE_CONFIG_DIR\" && { echo '{\"hooks\":{\"Stop\":[]}}' > settings.json; \
                     echo EVIL > CLAUDE.md; mkdir -p agents commands skills; \
                     echo x > agents/a.md; echo x > EVIL.md; \
                     echo '{\"mcpServers\":{\"x\":{}}}' > .claude.json; } 2>/dev/null; ls -A";
        let fresh = |mode: &str| match mode {
            "workspace-write" => {
                // `agents`, `commands`, `skills` are empty files (the CLI reads them as no
                // directory).
                "CLAUDE.md\nagents\ncommands\nsettings.json\nsettings.local.json\nskills\n{}\n"
            }
            _ => "",
        };
        for mode in ["workspace-write", "danger-full-access"] {
            let first = fx.sandbox(&["--mode", mode], plant);
            // Control: the writes are real.
            let listed = String::from_utf8_lossy(&first.stdout);
            assert!(
                listed.contains(".claude.json") && listed.contains("EVIL.md"),
                "{}",
                describe(&first)
            );
            for later in ["workspace-write", "danger-full-access"] {
                let second = fx.sandbox(
                    &["--mode", later],
                    "ls -A \"$CLAUDE_CONFIG_DIR\"; cat \"$CLAUDE_CONFIG_DIR/settings.json\" 2>/dev/null",
                );
                assert_eq!(
                    String::from_utf8_lossy(&second.stdout),
                    fresh(later),
                    "{mode} -> {later}: {}",
                    describe(&second)
                );
            }
        }
    }
}

/// A fake child whose scenario touches `paths` (with `$VARS`) and then waits for `go`.
fn waiting_fake(paths: &[&str]) -> Fake {
    let mut steps_list = vec![steps::init()];
    steps_list.extend(paths.iter().map(|p| steps::touch(p)));
    steps_list.push(steps::touch("ready"));
    steps_list.push(json!({"step": "wait_file", "path": "go", "timeout": 60}));
    steps_list.push(steps::result_ok("done"));
    Fake::new(json!(steps_list))
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            names.push(path.strip_prefix(dir).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    names.sort();
    names
}

/// Runs `fake` through coder with `state` as coder's state dir, and lists the child's
/// CLAUDE_CONFIG_DIR while it runs.
fn run_and_list(fake: &Fake, state: &Path, sandbox: &str) -> (Vec<String>, PathBuf) {
    let running = fake
        .coder()
        .env("CODER_STATE_DIR", state)
        .args(["--sandbox", sandbox, "go"])
        .deadline(Duration::from_secs(60))
        .spawn();
    fake.wait_for_file("ready", Duration::from_secs(30));
    let dir = PathBuf::from(&fake.record().env()["CLAUDE_CONFIG_DIR"]);
    let names = listing(&dir);
    fs::write(fake.file("go"), "").unwrap();
    running.wait().assert_success("done");
    (names, dir)
}

#[test]
fn nothing_a_run_writes_in_its_cli_config_dir_reaches_a_later_run() {
    let state = tempfile::tempdir().unwrap();
    // Confined, the names the CLI loads code from are held read-only (see
    // `tests/sandbox_adversary_review.rs`): only the unconfined run can plant those.
    let planted = |mode: &str| match mode {
        "workspace-write" => vec![
            "$CLAUDE_CONFIG_DIR/EVIL.md",
            "$CLAUDE_CONFIG_DIR/projects/-other-ws/11111111-2222-4333-8444-555555555555.jsonl",
        ],
        _ => vec![
            "$CLAUDE_CONFIG_DIR/settings.json",
            "$CLAUDE_CONFIG_DIR/CLAUDE.md",
            "$CLAUDE_CONFIG_DIR/agents/evil.md",
            "$CLAUDE_CONFIG_DIR/commands/evil.md",
            "$CLAUDE_CONFIG_DIR/skills/evil/SKILL.md",
            "$CLAUDE_CONFIG_DIR/projects/-other-ws/11111111-2222-4333-8444-555555555555.jsonl",
        ],
    };
    let fresh = |mode: &str| match mode {
        "workspace-write" => vec![
            ".claude.json",
            "CLAUDE.md",
            "agents",
            "commands",
            "settings.json",
            "settings.local.json",
            "skills",
        ],
        _ => vec![".claude.json"],
    };
    for first_mode in ["workspace-write", "danger-full-access"] {
        let first = waiting_fake(&planted(first_mode));
        let (names, first_dir) = run_and_list(&first, state.path(), first_mode);
        // Control: the agent really wrote them where the CLI would load them.
        for want in planted(first_mode) {
            let want = want.trim_start_matches("$CLAUDE_CONFIG_DIR/");
            assert!(names.iter().any(|n| n == want), "{first_mode}: {names:?}");
        }
        assert!(!first_dir.exists(), "the per-run dir outlived its run");
        for later_mode in ["workspace-write", "danger-full-access"] {
            let second = waiting_fake(&[]);
            let (names, second_dir) = run_and_list(&second, state.path(), later_mode);
            assert_ne!(first_dir, second_dir);
            assert_eq!(names, fresh(later_mode), "{first_mode} -> {later_mode}");
        }
    }
    // The per-run dirs of earlier runs wait in coder's trash until a later run removes
    // them while its agent runs: one more run, held until its pruner has emptied the
    // trash (under load, the runs above can end before theirs got to it). Unconfined: the
    // dir it leaves in the trash holds `.claude.json` alone.
    let drain = waiting_fake(&[]);
    let running = drain
        .coder()
        .env("CODER_STATE_DIR", state.path())
        .args(["--sandbox", "danger-full-access", "go"])
        .deadline(Duration::from_secs(60))
        .spawn();
    drain.wait_for_file("ready", Duration::from_secs(30));
    let trash = state.path().join("trash");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs::read_dir(&trash).is_ok_and(|mut d| d.next().is_some()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the trash was not emptied: {:?}",
            listing(&trash)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    fs::write(drain.file("go"), "").unwrap();
    running.wait().assert_success("done");
    // Nothing of it was kept anywhere in coder's state either.
    let kept = listing(state.path());
    assert!(
        !kept
            .iter()
            .any(|n| n.contains("evil") || n.contains("EVIL") || n.ends_with("settings.json")),
        "{kept:?}"
    );
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn another_workspaces_session_logs_are_out_of_reach() {
    for owner in owners() {
        let fx = Secrets::new(owner);
        // Logs of an older coder's shared config dir, and of the user's own CLI.
        let logs = [
            fx.home
                .join(".local/state/coder/claude/projects/-other/s.jsonl"),
            fx.home.join(".claude/projects/-other/s.jsonl"),
        ];
        for log in &logs {
            write(log, "OTHER-WORKSPACE-LOG\n");
            if let Some(uid) = owner {
                chown_tree(&fx.home, uid);
            }
        }
        let script: String = logs
            .iter()
            .map(|l| {
                format!(
                    "cat '{}' 2>/dev/null; echo x >> '{}';",
                    l.display(),
                    l.display()
                )
            })
            .collect();
        let open = fx.sandbox(&["--mode", "danger-full-access"], &script);
        assert!(String::from_utf8_lossy(&open.stdout).contains("OTHER-WORKSPACE-LOG"));
        for log in &logs {
            write(log, "OTHER-WORKSPACE-LOG\n");
        }
        let out = fx.sandbox(&[], &script);
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("OTHER"),
            "{}",
            describe(&out)
        );
        for log in &logs {
            assert_eq!(fs::read_to_string(log).unwrap(), "OTHER-WORKSPACE-LOG\n");
        }
    }
}

#[test]
fn a_claude_bin_in_tmp_grants_neither_tmp_nor_its_sockets() {
    let fake = Fake::new(json!([steps::init(), steps::result_ok("done")]));
    let id = uuid::Uuid::new_v4().simple().to_string();
    let bin_dir = PathBuf::from(format!("/tmp/coder-policy-{id}"));
    fs::create_dir_all(&bin_dir).unwrap();
    let host_file = PathBuf::from(format!("/tmp/coder-policy-host-{id}.txt"));
    fs::write(&host_file, format!("HOST-{id}\n")).unwrap();
    let socket = PathBuf::from(format!("/tmp/coder-policy-{id}.sock"));
    let _listener = UnixListener::bind(&socket).unwrap();
    // The wrapper attacks, then becomes the fake (whose files are in the workspace).
    let real = fake.bin().to_path_buf();
    let ws = fake.workspace().to_path_buf();
    let fake_dir = ws.join(".fake-claude");
    fs::copy(
        real.with_file_name("fake-claude.py"),
        fake_dir.join("fake-claude.py"),
    )
    .unwrap();
    let wrapper = fs::read_to_string(&real).unwrap().replace(
        &real.with_file_name("fake-claude.py").display().to_string(),
        &fake_dir.join("fake-claude.py").display().to_string(),
    );
    let attack = format!(
        "#!/bin/sh\ncat {host} > {ws}/host.out 2>&1\n\
         /usr/bin/python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{sock}\"); print(\"connected\")' > {ws}/sock.out 2>&1\n",
        host = host_file.display(),
        sock = socket.display(),
        ws = ws.display()
    );
    let claude = bin_dir.join("claude");
    fs::write(&claude, wrapper.replacen("#!/bin/sh\n", &attack, 1)).unwrap();
    fs::set_permissions(&claude, fs::Permissions::from_mode(0o755)).unwrap();

    let read = |name: &str| fs::read_to_string(ws.join(name)).unwrap_or_default();
    for (mode, reachable) in [("danger-full-access", true), ("workspace-write", false)] {
        let out = fake
            .coder()
            .claude_bin(claude.clone())
            .args(["--sandbox", mode, "go"])
            .run();
        out.assert_success("done");
        assert_eq!(
            read("host.out").contains(&format!("HOST-{id}")),
            reachable,
            "{mode}: {}",
            read("host.out")
        );
        assert_eq!(
            read("sock.out").contains("connected"),
            reachable,
            "{mode}: {}",
            read("sock.out")
        );
    }
    let _ = fs::remove_dir_all(&bin_dir);
    let _ = fs::remove_file(&host_file);
    let _ = fs::remove_file(&socket);
}

#[test]
fn a_transcript_path_in_the_workspace_or_through_a_symlink_is_refused() {
    let fake = Fake::new(json!([steps::init(), steps::result_ok("done")]));
    let victim = fake.root().join("victim.txt");
    fs::write(&victim, "precious\n").unwrap();
    let inside_link = fake.workspace().join("t.jsonl");
    std::os::unix::fs::symlink(&victim, &inside_link).unwrap();
    let outside_link = fake.root().join("t.jsonl");
    std::os::unix::fs::symlink(&victim, &outside_link).unwrap();
    // Control: an open that follows the link writes the victim.
    fs::OpenOptions::new()
        .append(true)
        .open(&outside_link)
        .unwrap();
    for path in [
        inside_link.clone(),
        fake.workspace().join("sub/new.jsonl"),
        outside_link.clone(),
    ] {
        let out = fake.coder().arg("--transcript").arg(&path).arg("go").run();
        let detail = out.assert_failure("config_error", 78);
        let message = detail["message"].as_str().unwrap();
        assert!(message.contains("--transcript"), "{}", out.explain());
        // One sentence, not the source's indentation.
        assert!(!message.contains("  "), "{message}");
    }
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
}

#[test]
fn everything_coder_keeps_is_owner_only() {
    let state = tempfile::tempdir().unwrap();
    // An older coder left its state readable to others.
    fs::set_permissions(state.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(state.path().join("runs")).unwrap();
    fs::set_permissions(state.path().join("runs"), fs::Permissions::from_mode(0o755)).unwrap();
    let fake = Fake::new(json!([
        steps::init(),
        steps::touch("$CLAUDE_CONFIG_DIR/projects/x/SESSION.jsonl"),
        steps::touch("$TMPDIR/t/made.txt"),
        steps::result_ok("done")
    ]));
    let custom = fake.root().join("custom/transcript.jsonl");
    let out = fake
        .coder()
        .env("CODER_STATE_DIR", state.path())
        .arg("--transcript")
        .arg(&custom)
        .arg("go")
        .run();
    out.assert_success("done");
    let out = fake
        .coder()
        .env("CODER_STATE_DIR", state.path())
        .arg("go")
        .run();
    out.assert_success("done");
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&custom), 0o600);
    assert_eq!(mode(custom.parent().unwrap()), 0o700);
    let mut files = 0;
    for rel in std::iter::once(String::new()).chain(listing(state.path())) {
        let path = state.path().join(&rel);
        let want = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(&path), want, "{}", path.display());
        files += usize::from(path.is_file());
    }
    assert!(files >= 2, "{:?}", listing(state.path()));
    // The last run's sandbox directory left by coder's trash (one rename), for a later run
    // to remove: the agent's $TMPDIR with what it made there, owner-only too (checked
    // above). The CLI's config dir is on a tmpfs of the user's (`config::scratch`), removed
    // in place; where there is none it goes the same way as the run directory.
    let trashed = listing(state.path());
    assert!(
        trashed
            .iter()
            .any(|p| p.starts_with("trash/") && p.ends_with("tmp/t/made.txt")),
        "{trashed:?}"
    );
    let session = "claude/projects/x/SESSION.jsonl";
    assert!(
        trashed
            .iter()
            .all(|p| !p.ends_with(session) || p.starts_with("trash/")),
        "the CLI's config dir outlived its run: {trashed:?}"
    );
}
