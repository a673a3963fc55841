//! `coder sandbox` as a user drives it: options, exit codes and the one-line errors of a
//! sandbox that cannot be set up.

mod common;

use common::Bounded;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

struct Dirs {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
}

fn dirs() -> Dirs {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let ws = root.join("ws");
    let home = root.join("home");
    fs::create_dir_all(&ws).unwrap();
    fs::create_dir_all(&home).unwrap();
    fs::write(ws.join("README.md"), "readme\n").unwrap();
    Dirs {
        _dir: dir,
        root,
        ws,
        home,
    }
}

fn sandbox(d: &Dirs, args: &[&str], cmd: &[&str]) -> Output {
    sandbox_command(d, args, cmd).output_bounded()
}

fn sandbox_command(d: &Dirs, args: &[&str], cmd: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_coder"));
    command
        .arg("sandbox")
        .args(args)
        .arg("--")
        .args(cmd)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", &d.home)
        .current_dir(&d.ws)
        .stdin(Stdio::null());
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn bash(script: &str) -> [&str; 3] {
    ["/bin/bash", "-c", script]
}

#[test]
fn exit_status_is_the_commands() {
    let d = dirs();
    let out = sandbox(&d, &[], &bash("exit 7"));
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn missing_command_exits_127() {
    let d = dirs();
    let out = sandbox(&d, &[], &["no-such-command-xyz"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("no-such-command-xyz: command not found"),
        "{}",
        stderr(&out)
    );
}

/// A path to something that is no program says what it is, with the shell's statuses: it
/// said "command not found" of `/etc`, which exists.
#[test]
fn a_directory_or_a_plain_file_as_the_command_says_what_it_is() {
    let d = dirs();
    fs::write(d.ws.join("notes.txt"), "x\n").unwrap();
    for (cmd, says, code) in [
        ("/etc", "/etc: is a directory, not a program", 126),
        ("./notes.txt", "./notes.txt: not executable", 126),
        ("./missing", "./missing: no such file", 127),
    ] {
        let out = sandbox(&d, &[], &[cmd]);
        assert_eq!(out.status.code(), Some(code), "{cmd}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{cmd}: {}", stderr(&out));
    }
}

#[test]
fn home_as_workspace_is_refused_with_one_line() {
    // The caller's --cd to change, not a sandbox that cannot be had: config_error's 78.
    let d = dirs();
    let home = d.home.display().to_string();
    let out = sandbox(&d, &["--cd", &home], &["true"]);
    assert_eq!(out.status.code(), Some(78));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("coder sandbox: --cd "), "{err}");
    assert!(err.contains("home directory"), "{err}");
}

#[test]
fn secret_scan_over_its_depth_cap_fails_closed() {
    let d = dirs();
    let mut deep = d.ws.clone();
    for _ in 0..70 {
        deep.push("d");
    }
    fs::create_dir_all(&deep).unwrap();
    let out = sandbox(&d, &[], &["true"]);
    assert_eq!(out.status.code(), Some(71), "{}", stderr(&out));
    assert!(stderr(&out).contains("depth"), "{}", stderr(&out));
}

#[test]
fn bad_mode_is_a_usage_error() {
    let d = dirs();
    let out = sandbox(&d, &["--mode", "yolo"], &["true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("yolo"), "{}", stderr(&out));
}

#[test]
fn a_missing_or_wrong_workspace_is_a_config_error() {
    let d = dirs();
    let missing = d.root.join("no-such-dir").display().to_string();
    let out = sandbox(&d, &["--cd", &missing], &["true"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("--cd {missing}")) && err.contains("no such directory"),
        "{err}"
    );
    let file = d.ws.join("README.md").display().to_string();
    let out = sandbox(&d, &["--cd", &file], &["true"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a directory"), "{}", stderr(&out));
}

#[test]
fn read_only_mode_reads_but_does_not_write() {
    let d = dirs();
    let out = sandbox(
        &d,
        &["--mode", "read-only"],
        &bash("cat README.md && echo x > new.txt"),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "readme\n");
    assert!(!out.status.success());
    assert!(!d.ws.join("new.txt").exists());
    // Its private temp directory stays writable.
    let out = sandbox(
        &d,
        &["--mode", "read-only"],
        &bash("echo t > \"$TMPDIR/t\""),
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn extra_roots_are_granted_and_nothing_else() {
    let d = dirs();
    let readable = d.root.join("docs");
    let writable = d.root.join("out");
    let hidden = d.root.join("hidden");
    for dir in [&readable, &writable, &hidden] {
        fs::create_dir_all(dir).unwrap();
    }
    fs::write(readable.join("guide.txt"), "guide\n").unwrap();
    fs::write(hidden.join("h.txt"), "hidden\n").unwrap();
    let script = format!(
        "cat {r}/guide.txt && echo o > {w}/o.txt && ! echo x > {r}/x.txt && ! cat {h}/h.txt",
        r = readable.display(),
        w = writable.display(),
        h = hidden.display()
    );
    let out = sandbox(
        &d,
        &[
            "--read",
            &readable.display().to_string(),
            "--write",
            &writable.display().to_string(),
        ],
        &bash(&script),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(writable.join("o.txt")).unwrap(), "o\n");
    assert!(!readable.join("x.txt").exists());
}

#[test]
fn allow_tmp_opens_the_shared_tmp() {
    let d = dirs();
    let name = format!("/tmp/coder-allow-tmp-{}", uuid::Uuid::new_v4().simple());
    let script = format!("echo x > {name}");
    let out = sandbox(&d, &[], &bash(&script));
    assert!(!out.status.success());
    assert!(!Path::new(&name).exists());
    // The fixture's home, and with it coder's state directory, is under /tmp: the agent
    // would get the placeholder locks and other runs' transcripts, so the run is refused.
    let out = sandbox(&d, &["--allow-tmp"], &bash(&script));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("lies under /tmp, which --allow-tmp gives the agent")
            && stderr(&out).contains("CODER_STATE_DIR"),
        "{}",
        stderr(&out)
    );
    assert!(!Path::new(&name).exists(), "the refused command ran");
    // With the state directory elsewhere, /tmp is the agent's.
    let state = tempfile::Builder::new()
        .prefix("coder-state-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let out = sandbox_command(&d, &["--allow-tmp"], &bash(&script))
        .env("CODER_STATE_DIR", state.path())
        .output_bounded();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(Path::new(&name).exists());
    fs::remove_file(&name).unwrap();
}

/// coder's state directory holds the placeholder locks, every run's directory and
/// git-guard record, transcripts and sessions: a grant reaching any part of it is refused,
/// whichever part it names (the runs directory was not covered before), and the command
/// never runs.
#[test]
fn a_write_grant_inside_coders_state_directory_is_refused() {
    let d = dirs();
    let state = d.home.join(".local/state/coder");
    let out = sandbox(&d, &[], &["true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for part in ["sandbox", "placeholders", "listings", "."] {
        let grant = state.join(part);
        fs::create_dir_all(&grant).unwrap();
        assert_state_grant_refused(&d, "--write", &grant, "coder's state directory");
    }
}

/// `coder sandbox FLAG GRANT -- touch ran` exits 78 naming `why`, and the command never ran.
fn assert_state_grant_refused(d: &Dirs, flag: &str, grant: &Path, why: &str) {
    let marker = d.ws.join("ran");
    let script = format!("touch {}", marker.display());
    let out = sandbox(d, &[flag, grant.to_str().unwrap()], &bash(&script));
    let what = format!("{flag} {}", grant.display());
    assert_eq!(out.status.code(), Some(78), "{what}: not refused as config");
    assert!(stderr(&out).contains(why), "{what}: {}", stderr(&out));
    assert!(!marker.exists(), "{what}: the command ran");
}

/// `flock` locks through a descriptor opened for reading: a `--read` grant reaching the
/// placeholder locks (or the runs' locks) would let the agent hold them and make every
/// other run sharing the state directory fail. Refused; a `--read` of another part of the
/// state directory (a transcript to study) still runs.
#[test]
fn a_read_grant_reaching_coders_lock_files_is_refused() {
    let d = dirs();
    let state = d.home.join(".local/state/coder");
    let out = sandbox(&d, &[], &["true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for part in [".", "placeholders", "sandbox"] {
        assert_state_grant_refused(&d, "--read", &state.join(part), "reaches its lock files");
    }
    let marker = d.ws.join("ran");
    let script = format!("touch {}", marker.display());
    let transcripts = state.join("runs");
    fs::create_dir_all(&transcripts).unwrap();
    let out = sandbox(
        &d,
        &["--read", transcripts.to_str().unwrap()],
        &bash(&script),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(marker.exists());
}

#[test]
fn custom_globs_add_to_the_defaults() {
    let d = dirs();
    fs::write(d.ws.join(".env"), "A=1\n").unwrap();
    fs::write(d.ws.join("notes.private"), "private\n").unwrap();
    fs::write(d.ws.join("notes.txt"), "public\n").unwrap();
    let out = sandbox(
        &d,
        &["--deny", "**/*.private"],
        &bash("cat .env notes.private notes.txt"),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "public\n");
}

#[test]
fn danger_full_access_still_gets_private_dirs() {
    let d = dirs();
    let out = sandbox(
        &d,
        &["--mode", "danger-full-access"],
        &bash("echo \"$TMPDIR|$CLAUDE_CONFIG_DIR|$XDG_RUNTIME_DIR\""),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let parts: Vec<&str> = text.trim().split('|').collect();
    assert_eq!(parts.len(), 3, "{text}");
    // The temp and runtime dirs on disk in the state directory; the config dir in the
    // run's own directory, in coder's scratch place (a tmpfs of the user's, or the state
    // directory).
    let home = d.home.display().to_string();
    for (i, part) in parts.into_iter().enumerate() {
        let scratch = i == 1 && part.starts_with("/dev/shm/coder-");
        assert!(part.starts_with(&home) || scratch, "{text}");
    }
}

/// Commands started at once in one workspace (an orchestrator's parallel calls, two MCP
/// calls on one project): each scan may find a protected name absent (`.claude`,
/// `.envrc`, `.git`) just before another run made its placeholder there. That run's
/// setup failed with `sandbox setup: create placeholder …/.claude: EEXIST: File exists`
/// (here within the first 25 rounds of six); it scans again and masks the name it finds.
#[test]
fn commands_started_at_once_in_one_workspace_all_run() {
    let d = dirs();
    let started = std::time::Instant::now();
    for round in 0..100 {
        let outs: Vec<Output> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..6)
                .map(|_| s.spawn(|| sandbox(&d, &[], &["true"])))
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for out in outs {
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: {}",
                stderr(&out)
            );
        }
        // Placeholders are the runs' own: none is left once they are all gone.
        let left: Vec<String> = fs::read_dir(&d.ws)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["README.md"], "round {round}");
        if started.elapsed() > std::time::Duration::from_secs(60) {
            break;
        }
    }
}
