//! Round twenty-nine's second review: the lead's made-scripts guard (a script a held
//! script runs by path, absent at the start, moved aside at the run's end if the run made
//! it) and the setup's cancel and byte budget, attacked by one who has read the code,
//! through the built binary, root and uid 65534, each with an unconfined control
//! (`--mode danger-full-access`).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round29b-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
/// A name with a glob character or a backslash in it: the reader takes no such word for a
/// file's name (`may_name_a_file`: it cannot tell a quoted word from one the shell
/// expands), so nothing is held or moved aside for it.
const KNOWN_OPEN: &[&str] = &["a backslash in the name", "glob characters in the name"];

/// The user's `git fmt` runs `tools/ci.sh`, whose bytes are `ci`.
fn user_ci(fx: &Fx, ws: &Path, ci: &[u8]) {
    let path = fx.own_file(ws, "tools/ci.sh", "");
    std::fs::write(path, ci).unwrap();
    fx.git(ws, &["config", "alias.fmt", "!sh tools/ci.sh"]);
}

/// The agent's plant: the payload written at the shell word `path` (quoted as needed),
/// its directory made first.
fn made(path: &str) -> String {
    format!(
        "p={path} && mkdir -p \"$(dirname \"$p\")\" && {{ {SCRIPT_PAYLOAD}; }} > \"$p\" && echo PLANTED"
    )
}

/// One attack: the user's `tools/ci.sh` is `ci`, the agent runs `plant`, the user runs
/// `git fmt`. Both arms; control unconfined.
fn attack(name: &str, ci: &[u8], plant: &str) {
    if std::env::var("A29B_ONLY").is_ok_and(|o| o != name) {
        return;
    }
    let setup = |fx: &Fx, ws: &Path| user_ci(fx, ws, ci);
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, plant, &["fmt"]);
}

/// Names the guard's glob must spell literally: a backslash, glob characters, bytes that
/// are not UTF-8.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn made_scripts_with_unusual_names_are_moved_aside() {
    attack(
        "a backslash in the name",
        b"sh 'tools/a\\b.sh'\n",
        &made(r"'tools/a\b.sh'"),
    );
    attack(
        "glob characters in the name",
        b"sh 'tools/[x]*?.sh'\n",
        &made("'tools/[x]*?.sh'"),
    );
    attack(
        "a name that is not UTF-8",
        b"sh tools/\xff.sh\n",
        &made(r"$(printf 'tools/\377.sh')"),
    );
}

/// Ways to the file: `..` in it, the script's directory entered first, a hard link and a
/// symlink made at the name.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn made_scripts_by_other_ways_are_moved_aside() {
    attack(
        "dotdot from the script's directory",
        b"sh \"$(dirname \"$0\")/../scripts/lint.sh\"\n",
        &made("scripts/lint.sh"),
    );
    attack(
        "dotdot from the script's directory entered",
        b"cd \"$(dirname \"$0\")/..\" && sh scripts/lint.sh\n",
        &made("scripts/lint.sh"),
    );
    attack(
        "dotdot from the top",
        b"sh tools/../scripts/lint.sh\n",
        &made("scripts/lint.sh"),
    );
    attack(
        "the script's directory entered",
        b"cd \"$(dirname \"$0\")\" && sh ./local.sh\n",
        &made("tools/local.sh"),
    );
    attack(
        "a hard link made at the name",
        b"sh tools/local.sh\n",
        &format!(
            "{{ {SCRIPT_PAYLOAD}; }} > tools/other.sh && ln tools/other.sh tools/local.sh && echo PLANTED"
        ),
    );
    attack(
        "a symlink made at the name",
        b"sh tools/local.sh\n",
        &format!(
            "{{ {SCRIPT_PAYLOAD}; }} > other.sh && ln -s ../other.sh tools/local.sh && echo PLANTED"
        ),
    );
}

/// A git work tree at `dir` (given to uid 65534 when `nobody`) whose `git fmt` runs
/// `tools/ci.sh`, which runs `count` scripts of busy shell lines (250 KiB each, about two
/// seconds each to read in a debug build; 31 stay under the scan's byte budget), so a
/// signal finds the setup scanning (as `tests/setup_scan_bounds.rs` plants).
fn slow_plant(dir: &Path, nobody: bool, count: usize) {
    const LINE: &str = "echo built $n && test -f data/file.txt || cp src/a.c build/b.o\n";
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["config", "alias.fmt", "!sh tools/ci.sh"]);
    std::fs::create_dir_all(dir.join("tools/gen")).unwrap();
    let runs: String = (0..count)
        .map(|i| format!("sh tools/gen/s{i}.sh\n"))
        .collect();
    std::fs::write(dir.join("tools/ci.sh"), runs).unwrap();
    let big = LINE.repeat(250 * 1024 / LINE.len());
    for i in 0..count {
        std::fs::write(dir.join(format!("tools/gen/s{i}.sh")), &big).unwrap();
    }
    if nobody {
        sandbox_fixture::chown_tree(dir, sandbox_fixture::NOBODY);
    }
}

/// Every name under `dir` (`.git`'s own files left out), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() && entry.file_name() != ".git" {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `coder sandbox --cd WS -- true` as the arm's user (`nohup` before coder when
/// `nohup`), its phases traced to `trace`, its state in `state`.
fn coder_sandbox(
    nobody: bool,
    nohup: bool,
    ws: &Path,
    trace: &Path,
    state: &Path,
) -> std::process::Child {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if nobody {
        for a in [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ] {
            argv.push(a.into());
        }
    }
    if nohup {
        argv.push("nohup".into());
    }
    argv.push(common::CODER.into());
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .args(["sandbox", "--cd"])
        .arg(ws)
        .args(["--", "true"])
        .env("CODER_TRACE_PHASES", trace)
        .env("CODER_STATE_DIR", state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    cmd.spawn().unwrap()
}

/// Waits until the phase trace at `trace` names `phase` (30 s at most).
fn wait_for_phase(trace: &Path, phase: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(trace).unwrap_or_default();
        if text.lines().any(|l| l.ends_with(phase)) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no {phase}: {text}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Waits for `child` (`secs` at most, else kills it and panics).
fn wait_within(child: &mut std::process::Child, secs: u64, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// SIGINT, SIGQUIT, SIGUSR1 and SIGHUP sent to `coder sandbox` while its setup scans end
/// it at once, of that signal, and leave nothing: no placeholder or quarantine in the
/// workspace, no run directory in coder's state directory. Both arms.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn other_signals_during_the_setup_scan_end_it_and_leave_nothing() {
    use std::os::unix::process::ExitStatusExt;
    for nobody in sandbox_fixture::arms() {
        for signal in [libc::SIGINT, libc::SIGQUIT, libc::SIGUSR1, libc::SIGHUP] {
            let root = tempfile::tempdir().unwrap();
            let (ws, state) = (root.path().join("ws"), root.path().join("state"));
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::create_dir_all(&state).unwrap();
            slow_plant(&ws, nobody, 31);
            if nobody {
                sandbox_fixture::chown_tree(&state, sandbox_fixture::NOBODY);
                sandbox_fixture::chown_tree(root.path(), sandbox_fixture::NOBODY);
            }
            let (before, state_before) = (names(&ws), names(&state));
            let trace = root.path().join("trace");
            let mut child = coder_sandbox(nobody, false, &ws, &trace, &state);
            wait_for_phase(&trace, "scan.start");
            unsafe { libc::kill(child.id() as i32, signal) };
            let status = wait_within(&mut child, 30, "after the signal");
            let what = format!("nobody={nobody} signal={signal}");
            assert_eq!(status.signal(), Some(signal), "{what}: {status:?}");
            assert_eq!(names(&ws), before, "{what}: the workspace");
            let left: Vec<String> = names(&state)
                .into_iter()
                .filter(|n| !state_before.contains(n))
                .collect();
            eprintln!("{what}: state after: {left:?}");
            // A normal run leaves its private tmp in coder's trash too; a run directory
            // (under `sandbox/`) or a placeholder's lock in use would be the cancel's.
            assert!(
                !left.iter().any(|n| n.starts_with("sandbox/")),
                "{what}: a run directory left: {left:?}"
            );
        }
    }
}

/// `nohup coder sandbox`: a SIGHUP while the setup scans is ignored, as the caller asked
/// (it must not stop the setup), and the command runs. Control: without `nohup` the same
/// SIGHUP ends it. Both arms.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_ignored_sighup_during_the_setup_scan_stays_ignored() {
    use std::os::unix::process::ExitStatusExt;
    for nobody in sandbox_fixture::arms() {
        for nohup in [true, false] {
            let root = tempfile::tempdir().unwrap();
            let (ws, state) = (root.path().join("ws"), root.path().join("state"));
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::create_dir_all(&state).unwrap();
            slow_plant(&ws, nobody, 4);
            if nobody {
                sandbox_fixture::chown_tree(root.path(), sandbox_fixture::NOBODY);
            }
            let trace = root.path().join("trace");
            let mut child = coder_sandbox(nobody, nohup, &ws, &trace, &state);
            wait_for_phase(&trace, "scan.start");
            unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
            let status = wait_within(&mut child, 600, "the setup");
            let what = format!("nobody={nobody} nohup={nohup}");
            if nohup {
                let mut err = String::new();
                use std::io::Read;
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                assert!(status.success(), "{what}: {status:?}: {err}");
                let trace = std::fs::read_to_string(&trace).unwrap();
                assert!(trace.contains("sandbox.exited"), "{what}: {trace}");
            } else {
                assert_eq!(status.signal(), Some(libc::SIGHUP), "{what}: {status:?}");
            }
        }
    }
}

/// A run (`coder task`) sent SIGINT or SIGHUP while its setup scans answers `cancelled`
/// at once and leaves the workspace as it was; under `nohup` a SIGHUP then is ignored and
/// the run goes on to its CLI (root: the fake CLI's harness runs as root).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_signalled_during_the_setup_scan_is_cancelled_and_leaves_nothing() {
    use common::Fake;
    use nix::sys::signal::Signal;
    for (signal, code, nohup) in [
        (Signal::SIGINT, 130, false),
        (Signal::SIGHUP, 129, false),
        (Signal::SIGHUP, 0, true),
    ] {
        let fake = Fake::new(serde_json::json!([common::steps::init()]));
        slow_plant(fake.workspace(), false, 31);
        let before = names(fake.workspace());
        let trace = fake.root().join("phases.trace");
        let mut coder = fake
            .coder()
            .arg("task")
            .env("CODER_TRACE_PHASES", &trace)
            .deadline(std::time::Duration::from_secs(600));
        if nohup {
            coder = coder.through(["nohup"]);
        }
        let running = coder.spawn();
        wait_for_phase(&trace, "scan.start");
        running.signal(signal);
        let out = running.wait();
        let what = format!("{signal:?} nohup={nohup}");
        if nohup {
            assert!(fake.has_record(), "{what}: the CLI ran: {}", out.explain());
            continue;
        }
        let detail = out.assert_failure("cancelled", code);
        assert!(
            detail["message"]
                .as_str()
                .is_some_and(|m| m.contains("during the sandbox's setup")),
            "{what}: {}",
            out.explain()
        );
        assert!(!fake.has_record(), "{what}: the CLI never started");
        assert_eq!(names(fake.workspace()), before, "{what}: the workspace");
    }
}

/// A held script of one 250 KiB line of brace groups, or of `{` alone, is read in about
/// the time its bytes cost on busy lines: the reader's brace readings scanned and copied
/// the line once per group (45 s for the first, debug build) and looked for a `}` from
/// each `{` to the line's end (about two minutes for the second), and a SIGTERM waited
/// for the script's end. Under the byte budget, 32 such scripts held every later run's
/// setup for an hour. Both arms; the bound is 30 s (now about 7 s and 1 s).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_of_brace_groups_costs_the_setup_no_more_than_its_bytes() {
    const GROUPS: &str = "sh tools/{a,b,c,d,e,f,g,h}.sh {a,b,c,d} {e,f,g,h} {i,j,k,l} x{1,2} ";
    for nobody in sandbox_fixture::arms() {
        for (name, text) in [
            ("groups", GROUPS.repeat(250 * 1024 / GROUPS.len())),
            ("open braces", format!("{}}}", "{".repeat(250 * 1024))),
        ] {
            let root = tempfile::tempdir().unwrap();
            let (ws, state) = (root.path().join("ws"), root.path().join("state"));
            std::fs::create_dir_all(&state).unwrap();
            std::fs::create_dir_all(&ws).unwrap();
            slow_plant(&ws, nobody, 0);
            std::fs::write(ws.join("tools/ci.sh"), "sh tools/gen/s0.sh\n").unwrap();
            std::fs::write(ws.join("tools/gen/s0.sh"), text).unwrap();
            if nobody {
                sandbox_fixture::chown_tree(root.path(), sandbox_fixture::NOBODY);
            }
            let started = std::time::Instant::now();
            let trace = root.path().join("trace");
            let mut child = coder_sandbox(nobody, false, &ws, &trace, &state);
            let status = wait_within(&mut child, 60, name);
            let took = started.elapsed();
            assert!(status.success(), "nobody={nobody} {name}: {status:?}");
            assert!(
                took < std::time::Duration::from_secs(30),
                "nobody={nobody} {name}: the setup took {took:?}"
            );
        }
    }
}

/// Spellings of running the absent `tools/local.sh` that round twenty-eight's review
/// found the held scripts' run words did not follow (held since by any word naming a
/// script, but only when there at the start).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn made_scripts_run_by_other_spellings_are_moved_aside() {
    let spellings: [(&str, &[u8]); 10] = [
        ("xargs", b"echo | xargs sh tools/local.sh\n"),
        ("eval", b"eval 'sh tools/local.sh'\n"),
        ("trap", b"trap 'sh tools/local.sh' EXIT\n"),
        ("backquotes", b"x=`sh tools/local.sh`\n"),
        ("timeout", b"timeout 5 sh tools/local.sh\n"),
        ("exec", b"exec sh tools/local.sh\n"),
        ("env", b"env FOO=1 sh tools/local.sh\n"),
        ("bash -lc", b"bash -lc 'sh tools/local.sh'\n"),
        ("a function", b"run() { \"$@\"; }\nrun sh tools/local.sh\n"),
        ("a case arm", b"case x in x) sh tools/local.sh ;; esac\n"),
    ];
    for (name, ci) in spellings {
        attack(name, ci, &made("tools/local.sh"));
    }
}
