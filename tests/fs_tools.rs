//! `coder fs VERB --base DIR JSON` through the built binary: every verb, and every error
//! code (C210, C211, C213, C215, C216, C217), including the escapes an adversary who has
//! read the jail's code would try: `..`, absolute paths, a symlink out, a dangling
//! symlink in the tail, a symlink to a secret, a secret inside a folder to delete.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

/// Runs `coder fs verb --base base payload`; returns (exit code, JSON answer).
fn fs(base: &Path, verb: &str, payload: Value) -> (i32, Value) {
    let start = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["fs", verb, "--base"])
        .arg(base)
        .arg(payload.to_string())
        .env(
            "CODER_CONFIG",
            base.join("no-such-config.toml").with_extension("absent"),
        )
        .env_remove("CODER_CONFIG")
        .env("XDG_CONFIG_HOME", base.join(".no-xdg"))
        .output()
        .unwrap();
    assert!(start.elapsed() < DEADLINE, "coder fs took too long");
    let text = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?} {:?}", out.stderr));
    (out.status.code().unwrap_or(-1), value)
}

fn err_code(base: &Path, verb: &str, payload: Value) -> String {
    let (code, v) = fs(base, verb, payload.clone());
    assert_eq!(code, 1, "{verb} {payload} should fail: {v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    v["code"].as_str().unwrap().to_string()
}

fn ok(base: &Path, verb: &str, payload: Value) -> Value {
    let (code, v) = fs(base, verb, payload.clone());
    assert_eq!(code, 0, "{verb} {payload} failed: {v}");
    v
}

/// base/ holds src/a.txt, a .env, secrets/k, and (outside it) outside.txt.
fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(base.join("src")).unwrap();
    std::fs::create_dir_all(base.join("secrets")).unwrap();
    std::fs::write(base.join("src/a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(base.join(".env"), "TOKEN=hunter2\n").unwrap();
    std::fs::write(base.join("secrets/k"), "hunter2\n").unwrap();
    std::fs::write(tmp.path().join("outside.txt"), "outside hunter2\n").unwrap();
    (tmp, base)
}

#[test]
fn read_file_whole_and_by_lines() {
    let (_t, base) = workspace();
    let v = ok(&base, "read-file", json!({"path": "src/a.txt"}));
    assert_eq!(v["content"], "one\ntwo\nthree\n");
    assert_eq!(v["total_lines"], 3);
    let v = ok(
        &base,
        "read-file",
        json!({"path": "./src/../src/a.txt", "start_line": 2, "end_line": 2}),
    );
    assert_eq!(v["content"], "two\n");
    assert_eq!(
        err_code(
            &base,
            "read-file",
            json!({"path": "src/a.txt", "start_line": 9})
        ),
        "C210"
    );
}

#[test]
fn bad_input_is_c210() {
    let (_t, base) = workspace();
    assert_eq!(
        err_code(&base, "read-file", json!({"path": "/etc/passwd"})),
        "C210"
    );
    let abs = base.join("src/a.txt");
    assert_eq!(err_code(&base, "read-file", json!({"path": abs})), "C210");
    assert_eq!(
        err_code(&base, "read-file", json!({"pth": "src/a.txt"})),
        "C210"
    );
    assert_eq!(err_code(&base, "read-file", json!({"path": 5})), "C210");
    assert_eq!(err_code(&base, "read-file", json!({"path": "src"})), "C210");
    assert_eq!(err_code(&base, "search", json!({"pattern": "("})), "C210");
    assert_eq!(err_code(&base, "no-such-verb", json!({})), "C210");
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["fs", "read-file", "--base"])
        .arg(&base)
        .arg("{not json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("C210"));
}

/// A value of the wrong type names its key, in words rather than Rust's types: it was
/// "bad input: invalid type: integer `5`, expected a string" (which key?) and "expected
/// usize".
#[test]
fn a_value_of_the_wrong_type_names_its_key() {
    let (_t, base) = workspace();
    for (verb, payload, says) in [
        (
            "read-file",
            json!({"path": 5}),
            "bad input: path: invalid type: integer `5`, expected a string",
        ),
        (
            "read-file",
            json!({"path": "src/a.txt", "start_line": 1.5}),
            "bad input: start_line: invalid type: floating point `1.5`, expected a whole \
             number, 0 or more",
        ),
        (
            "list-folder",
            json!({"limit": -1}),
            "bad input: limit: invalid value: integer `-1`, expected a whole number, 0 or more",
        ),
        (
            "tree",
            json!({"depth": "3"}),
            "bad input: depth: invalid type: string \"3\"",
        ),
    ] {
        let (code, v) = fs(&base, verb, payload.clone());
        assert_eq!(code, 1, "{payload}: {v}");
        assert_eq!(v["code"], "C210", "{payload}: {v}");
        assert!(
            v["message"].as_str().is_some_and(|m| m.starts_with(says)),
            "{payload}: {v}"
        );
    }
}

#[test]
fn not_found_and_secrets_are_c211() {
    let (_t, base) = workspace();
    assert_eq!(
        err_code(&base, "read-file", json!({"path": "src/missing.txt"})),
        "C211"
    );
    // Said in words: it was the OS's "No such file or directory (os error 2)".
    assert_eq!(
        fs(&base, "read-file", json!({"path": "src/missing.txt"})).1["message"],
        "cannot open src/missing.txt: it does not exist"
    );
    for secret in [".env", "secrets/k", "SECRETS/../.env"] {
        assert_eq!(
            err_code(&base, "read-file", json!({"path": secret})),
            "C211",
            "{secret}"
        );
    }
    // A symlink inside the base that points at a secret is refused by its target.
    symlink(".env", base.join("notes.txt")).unwrap();
    assert_eq!(
        err_code(&base, "read-file", json!({"path": "notes.txt"})),
        "C211"
    );
    assert_eq!(
        err_code(
            &base,
            "update-file",
            json!({"path": ".env", "replace": [{"pattern": "h", "replacement": "x"}]})
        ),
        "C211"
    );
    assert_eq!(
        err_code(
            &base,
            "create-file",
            json!({"path": "a/.env", "content": "x"})
        ),
        "C211"
    );
    assert_eq!(
        err_code(&base, "delete-file", json!({"path": ".env"})),
        "C211"
    );
    assert!(base.join(".env").exists());
    // Not found, and the OS refusing, are both C211.
    std::fs::write(base.join("src/locked.txt"), "x").unwrap();
    std::fs::set_permissions(
        base.join("src/locked.txt"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    if !nix_is_root() {
        assert_eq!(
            err_code(&base, "read-file", json!({"path": "src/locked.txt"})),
            "C211"
        );
    }
}

fn nix_is_root() -> bool {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() == 0 }
}

#[test]
fn too_large_is_c213() {
    let (_t, base) = workspace();
    let f = std::fs::File::create(base.join("big.txt")).unwrap();
    f.set_len(10 * 1024 * 1024 + 1).unwrap();
    assert_eq!(
        err_code(&base, "read-file", json!({"path": "big.txt"})),
        "C213"
    );
    let big = "x".repeat(10 * 1024 * 1024 + 1);
    let out = Command::new(env!("CARGO_BIN_EXE_coder"))
        .args(["fs", "create-file", "--base"])
        .arg(&base)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            let payload = json!({"path": "huge.txt", "content": big}).to_string();
            c.stdin.take().unwrap().write_all(payload.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("C213"));
    assert!(!base.join("huge.txt").exists());
}

#[test]
fn escapes_are_c215_and_the_same_reads_work_without_the_jail() {
    let (tmp, base) = workspace();
    // Lexically.
    assert_eq!(
        err_code(&base, "read-file", json!({"path": "../outside.txt"})),
        "C215"
    );
    assert_eq!(
        err_code(&base, "read-file", json!({"path": "src/../../outside.txt"})),
        "C215"
    );
    // Through a symlink (file and folder), for reads, writes, listing and search.
    symlink(tmp.path().join("outside.txt"), base.join("out.txt")).unwrap();
    symlink(tmp.path(), base.join("up")).unwrap();
    assert_eq!(
        err_code(&base, "read-file", json!({"path": "out.txt"})),
        "C215"
    );
    assert_eq!(
        err_code(&base, "read-file", json!({"path": "up/outside.txt"})),
        "C215"
    );
    assert_eq!(
        err_code(
            &base,
            "create-file",
            json!({"path": "up/planted.txt", "content": "x"})
        ),
        "C215"
    );
    assert_eq!(
        err_code(
            &base,
            "create-file",
            json!({"path": "out.txt", "content": "x", "overwrite": true})
        ),
        "C215"
    );
    assert_eq!(
        err_code(&base, "list-folder", json!({"path": "up"})),
        "C215"
    );
    assert_eq!(
        err_code(&base, "search", json!({"pattern": "hunter2", "path": "up"})),
        "C215"
    );
    assert!(!tmp.path().join("planted.txt").exists());
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("outside.txt")).unwrap(),
        "outside hunter2\n"
    );
    // A dangling symlink in the tail: writing through it would create a file outside.
    symlink(tmp.path().join("made-by-agent.txt"), base.join("dangling")).unwrap();
    assert_eq!(
        err_code(
            &base,
            "create-file",
            json!({"path": "dangling", "content": "x"})
        ),
        "C215"
    );
    assert_eq!(
        err_code(
            &base,
            "create-file",
            json!({"path": "dangling/x", "content": "x"})
        ),
        "C215"
    );
    assert!(!tmp.path().join("made-by-agent.txt").exists());
    // The attack works when the base is the parent: the jail is what stops it.
    let v = ok(tmp.path(), "read-file", json!({"path": "base/out.txt"}));
    assert_eq!(v["content"], "outside hunter2\n");
    // Search never reports secrets, nor what lies behind a symlink.
    let v = ok(&base, "search", json!({"pattern": "hunter2"}));
    assert_eq!(v["matches"], json!([]), "{v}");
    assert!(v["skipped_non_accessible"].as_u64().unwrap() >= 2, "{v}");
}

#[test]
fn io_failure_is_c216() {
    let (_t, base) = workspace();
    // A file used as a folder: ENOTDIR is an I/O failure, neither "not found" nor an escape.
    assert_eq!(
        err_code(
            &base,
            "create-file",
            json!({"path": "src/a.txt/child", "content": "x"})
        ),
        "C216"
    );
    assert_eq!(
        std::fs::read_to_string(base.join("src/a.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
}

#[test]
fn create_respects_overwrite_c217() {
    let (_t, base) = workspace();
    assert_eq!(
        err_code(
            &base,
            "create-file",
            json!({"path": "src/a.txt", "content": "new"})
        ),
        "C217"
    );
    assert_eq!(
        std::fs::read_to_string(base.join("src/a.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
    let v = ok(
        &base,
        "create-file",
        json!({"path": "src/a.txt", "content": "new", "overwrite": true}),
    );
    assert_eq!(v["created"], false);
    assert_eq!(
        std::fs::read_to_string(base.join("src/a.txt")).unwrap(),
        "new"
    );
    let v = ok(
        &base,
        "create-file",
        json!({"path": "deep/er/b.txt", "content": "b\n"}),
    );
    assert_eq!(v["created"], true);
    assert_eq!(
        std::fs::read_to_string(base.join("deep/er/b.txt")).unwrap(),
        "b\n"
    );
    // No temporary files are left behind.
    let names: Vec<String> = std::fs::read_dir(base.join("src"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["a.txt".to_string()]);
}

#[test]
fn update_file_line_ops_then_replace_atomic() {
    let (_t, base) = workspace();
    std::fs::set_permissions(
        base.join("src/a.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let v = ok(
        &base,
        "update-file",
        json!({"path": "src/a.txt",
               "ops": [{"op": "insert", "line": 1, "content": "zero"},
                       {"op": "update_lines", "start": 2, "end": 2, "content": "TWO\n"},
                       {"op": "remove", "start": 3, "end": 3}],
               "replace": [{"pattern": "^(z)ero$", "replacement": "${1}ERO"},
                           {"pattern": "o", "replacement": "0", "literal": true, "count": 1}]}),
    );
    assert_eq!(v["replacements"], json!([1, 1]));
    assert_eq!(
        std::fs::read_to_string(base.join("src/a.txt")).unwrap(),
        "zERO\n0ne\nTWO\n"
    );
    let mode = std::fs::metadata(base.join("src/a.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
    // Overlapping ops are rejected and nothing changes.
    let before = std::fs::read_to_string(base.join("src/a.txt")).unwrap();
    assert_eq!(
        err_code(
            &base,
            "update-file",
            json!({"path": "src/a.txt", "ops": [
            {"op": "remove", "start": 1, "end": 2}, {"op": "update_lines", "start": 2, "end": 3, "content": "x"}]})
        ),
        "C210"
    );
    assert_eq!(
        std::fs::read_to_string(base.join("src/a.txt")).unwrap(),
        before
    );
    assert_eq!(
        err_code(&base, "update-file", json!({"path": "src/a.txt"})),
        "C210"
    );
}

#[test]
fn delete_file_and_folders() {
    let (_t, base) = workspace();
    assert_eq!(
        err_code(&base, "delete-file", json!({"path": "src"})),
        "C210"
    );
    assert_eq!(err_code(&base, "delete-file", json!({"path": "."})), "C210");
    assert_eq!(
        err_code(&base, "delete-file", json!({"path": "nope"})),
        "C211"
    );
    // A folder holding a secret is refused whole.
    std::fs::write(base.join("src/id_rsa"), "key").unwrap();
    assert_eq!(
        err_code(
            &base,
            "delete-file",
            json!({"path": "src", "recursive": true})
        ),
        "C211"
    );
    assert!(base.join("src/a.txt").exists());
    std::fs::remove_file(base.join("src/id_rsa")).unwrap();
    // A symlink is removed, not its target.
    symlink("src/a.txt", base.join("link")).unwrap();
    let v = ok(&base, "delete-file", json!({"path": "link"}));
    assert_eq!(v["kind"], "symlink");
    assert!(base.join("src/a.txt").exists());
    let v = ok(
        &base,
        "delete-file",
        json!({"path": "src", "recursive": true}),
    );
    assert_eq!(v["kind"], "folder");
    assert!(!base.join("src").exists());
}

#[test]
fn list_folder_paginates_and_flags_secrets() {
    let (_t, base) = workspace();
    for i in 0..5 {
        std::fs::write(base.join(format!("f{i}.txt")), "x").unwrap();
    }
    let v = ok(&base, "list-folder", json!({"limit": 3}));
    assert_eq!(v["total"], 8);
    assert_eq!(v["next_offset"], 3);
    let first = &v["entries"][0];
    assert_eq!(first["name"], ".env");
    assert_eq!(first["non_accessible"], true);
    assert!(first.get("size").is_none());
    let v = ok(&base, "list-folder", json!({"offset": 6, "limit": 3}));
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);
    assert_eq!(v["next_offset"], Value::Null);
    let v = ok(&base, "list-folder", json!({"path": "secrets"}));
    assert_eq!(v["entries"][0]["non_accessible"], true);
    assert_eq!(
        err_code(&base, "list-folder", json!({"path": "src/a.txt"})),
        "C210"
    );
}

/// A count of 0 asked for nothing and got one (`limit: 0` listed an entry, `max_results:
/// 0` returned matches): refused, naming the argument. Line numbers the wrong way round
/// are named as given ("lines 3..=1" was printed for start 3, end 2).
#[test]
fn a_count_of_zero_and_backward_lines_are_named() {
    let (_t, base) = workspace();
    for (verb, payload, name) in [
        ("list-folder", json!({"limit": 0}), "limit"),
        (
            "search",
            json!({"pattern": "one", "max_results": 0}),
            "max_results",
        ),
        ("tree", json!({"depth": 0}), "depth"),
        ("tree", json!({"per_folder_limit": 0}), "per_folder_limit"),
    ] {
        let (code, v) = fs(&base, verb, payload.clone());
        assert_eq!(code, 1, "{verb} {payload}: {v}");
        assert_eq!(v["code"], "C210", "{v}");
        let message = v["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{name} must be 1 or more")),
            "{v}"
        );
    }
    let (code, v) = fs(
        &base,
        "read-file",
        json!({"path": "src/a.txt", "start_line": 3, "end_line": 2}),
    );
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["message"], "start_line 3 is after end_line 2", "{v}");
    let (_, v) = fs(
        &base,
        "read-file",
        json!({"path": "src/a.txt", "start_line": 9}),
    );
    assert_eq!(
        v["message"], "start_line 9 is past the end of src/a.txt: it has 3 lines",
        "{v}"
    );
}

#[test]
fn tree_is_bounded() {
    let (_t, base) = workspace();
    std::fs::create_dir_all(base.join("a/b/c/d")).unwrap();
    for i in 0..4 {
        std::fs::write(base.join(format!("a/x{i}")), "x").unwrap();
    }
    let v = ok(&base, "tree", json!({"depth": 2, "per_folder_limit": 2}));
    assert_eq!(v["omitted"], 2, "{v}");
    let v = ok(
        &base,
        "tree",
        json!({"path": "a", "depth": 2, "per_folder_limit": 10}),
    );
    let b = v["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "b")
        .unwrap();
    let c = &b["children"][0];
    assert_eq!(c["name"], "c");
    assert!(c.get("children").is_none(), "depth 2 stops below b: {v}");
}

/// Runs `coder fs` as `nobody` (uid/gid 65534) when the tests run as root.
fn fs_as_nobody(base: &Path, verb: &str, payload: Value) -> (i32, Value) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_coder"));
    cmd.args(["fs", verb, "--base"])
        .arg(base)
        .arg(payload.to_string())
        .env_remove("CODER_CONFIG")
        .env("XDG_CONFIG_HOME", base.join(".no-xdg"));
    // SAFETY: setgid/setuid are async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setgroups(&[]).map_err(std::io::Error::from)?;
            nix::unistd::setgid(nix::unistd::Gid::from_raw(65534)).map_err(std::io::Error::from)?;
            nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?} {:?}", out.stderr));
    (out.status.code().unwrap_or(-1), value)
}

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

#[test]
fn the_jail_holds_for_an_unprivileged_user() {
    if !nix_is_root() {
        eprintln!("*** this test already runs unprivileged: see the other tests ***");
        return;
    }
    let (tmp, base) = workspace();
    symlink(tmp.path().join("outside.txt"), base.join("out.txt")).unwrap();
    std::fs::write(base.join("src/locked.txt"), "x").unwrap();
    std::fs::set_permissions(
        base.join("src/locked.txt"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    chown_tree(tmp.path(), 65534);
    let code = |verb: &str, payload: Value| {
        let (exit, v) = fs_as_nobody(&base, verb, payload);
        assert_eq!(exit, 1, "{v}");
        v["code"].as_str().unwrap().to_string()
    };
    // The work itself succeeds as nobody.
    let (exit, v) = fs_as_nobody(&base, "read-file", json!({"path": "src/a.txt"}));
    assert_eq!(
        (exit, v["content"].as_str()),
        (0, Some("one\ntwo\nthree\n")),
        "{v}"
    );
    let (exit, v) = fs_as_nobody(
        &base,
        "create-file",
        json!({"path": "src/n.txt", "content": "n"}),
    );
    assert_eq!(exit, 0, "{v}");
    // The attacks fail.
    assert_eq!(code("read-file", json!({"path": ".env"})), "C211");
    assert_eq!(code("read-file", json!({"path": "secrets/k"})), "C211");
    assert_eq!(code("read-file", json!({"path": "../outside.txt"})), "C215");
    assert_eq!(code("read-file", json!({"path": "out.txt"})), "C215");
    assert_eq!(
        code(
            "create-file",
            json!({"path": "out.txt", "content": "x", "overwrite": true})
        ),
        "C215"
    );
    // The OS refusing is C211 too (as root the mode would not stop the read).
    assert_eq!(code("read-file", json!({"path": "src/locked.txt"})), "C211");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("outside.txt")).unwrap(),
        "outside hunter2\n"
    );
}

/// An agent running in the same tree swaps a folder for a symlink to the outside, again
/// and again, while the tools read and write through it: the descriptor checks must keep
/// every read and write inside the base.
#[test]
fn swapping_a_folder_for_a_symlink_during_the_operation_reaches_nothing_outside() {
    let (tmp, base) = workspace();
    let outside = tmp.path().join("outdir");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("f.txt"), "outside hunter2\n").unwrap();
    const ROUNDS: usize = 150;
    for i in 0..ROUNDS {
        std::fs::write(outside.join(format!("w{i}.txt")), "victim\n").unwrap();
    }
    std::fs::create_dir(base.join("d")).unwrap();
    std::fs::write(base.join("d/f.txt"), "inside\n").unwrap();
    symlink(&outside, base.join("e")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (d, e) = (
            std::ffi::CString::new(base.join("d").into_os_string().into_encoded_bytes()).unwrap(),
            std::ffi::CString::new(base.join("e").into_os_string().into_encoded_bytes()).unwrap(),
        );
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: renameat2 with two valid NUL-terminated paths.
                let rc = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        d.as_ptr(),
                        libc::AT_FDCWD,
                        e.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(rc, 0);
                swaps += 1;
            }
            swaps
        })
    };
    let start = std::time::Instant::now();
    let mut inside_reads = 0;
    for i in 0..ROUNDS {
        let (code, v) = fs(&base, "read-file", json!({"path": "d/f.txt"}));
        if code == 0 {
            assert_eq!(v["content"], "inside\n", "read outside the base: {v}");
            inside_reads += 1;
        } else {
            assert!(
                ["C211", "C215", "C216"].contains(&v["code"].as_str().unwrap()),
                "{v}"
            );
        }
        let name = format!("d/w{i}.txt");
        let _ = fs(
            &base,
            "create-file",
            json!({"path": name, "content": "x", "overwrite": true}),
        );
        let _ = fs(&base, "delete-file", json!({"path": name}));
        let _ = fs(&base, "list-folder", json!({"path": "d"}));
        let deep = format!("d/n{i}/m/x.txt");
        let _ = fs(&base, "create-file", json!({"path": deep, "content": "x"}));
        if start.elapsed() > DEADLINE {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 100, "the race did not run: {swaps} swaps");
    // Nothing was written, overwritten or deleted outside.
    let names = std::fs::read_dir(&outside).unwrap().count();
    assert_eq!(names, ROUNDS + 1, "files planted or deleted outside");
    for i in 0..ROUNDS {
        let victim = std::fs::read_to_string(outside.join(format!("w{i}.txt")));
        assert_eq!(
            victim.ok().as_deref(),
            Some("victim\n"),
            "w{i}.txt outside was changed"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("f.txt")).unwrap(),
        "outside hunter2\n"
    );
    eprintln!("race: {inside_reads} reads inside, {swaps} swaps");
}

/// A payload that is JSON but not an object is refused in the tool's words: serde took a
/// list as a struct's fields and answered with the Rust type ("invalid length 0, expected
/// struct ReadArgs with 3 elements").
#[test]
fn a_payload_that_is_not_an_object_is_named_as_such() {
    let (_tmp, base) = workspace();
    for (verb, payload) in [
        ("read-file", json!([])),
        ("read-file", json!(["src/a.txt"])),
        ("tree", json!(null)),
        ("search", json!("one")),
    ] {
        let (code, v) = fs(&base, verb, payload.clone());
        assert_eq!(code, 1, "{verb} {payload}: {v}");
        assert_eq!(v["code"], "C210", "{v}");
        let message = v["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("bad input: the payload must be a JSON object")
                && !message.contains("struct"),
            "{verb} {payload}: {message}"
        );
    }
}

/// A regex that does not compile is named in one line, the fault included: the message
/// carried the regex crate's lines (the pattern, a caret under the fault) as they were.
#[test]
fn a_bad_regex_is_one_line_naming_the_fault() {
    let (_t, base) = workspace();
    let (code, v) = fs(&base, "search", json!({"pattern": "("}));
    assert_eq!(code, 1, "{v}");
    assert_eq!(
        v["message"], "bad pattern: regex parse error: ( ^ error: unclosed group",
        "{v}"
    );
    let (code, v) = fs(
        &base,
        "update-file",
        json!({"path": "src/a.txt", "replace": [{"pattern": "a{2,1}", "replacement": "x"}]}),
    );
    assert_eq!(code, 1, "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.starts_with("bad replace pattern: regex parse error: a{2,1} ")
            && !message.contains('\n'),
        "{v}"
    );
}
