//! Independent review attacks on `coder sandbox`, its proxy and the `coder fs` jail.
//! Each test is a blocked attack (asserted blocked) with a control proving the probe works.
//! The one hole this review found open (a gitlink to an agent-made repository) was kept as
//! a ratchet until the end-of-run git guard closed it; it is now a blocked attack too.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::Bounded;
use common::sandbox_fixture::{arms, as_arm, give_to_nobody, run_text};

const BIN: &str = env!("CARGO_BIN_EXE_coder");

struct Fx {
    root: PathBuf,
}

impl Fx {
    fn new(tag: &str) -> Fx {
        let root = std::env::temp_dir().join(format!("coder-review-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["ws/sub", "home", "state"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let ws = root.join("ws");
        assert!(
            Command::new("git")
                .args(["init", "-q"])
                .current_dir(&ws)
                .status()
                .unwrap()
                .success()
        );
        std::fs::write(ws.join(".env"), "SECRET_ENV\n").unwrap();
        std::fs::write(ws.join("sub/.ENV"), "SECRET_UPPER\n").unwrap();
        std::fs::write(ws.join("a.key"), "SECRET_KEY\n").unwrap();
        std::fs::write(ws.join("plain.txt"), "PLAIN_OK\n").unwrap();
        let _ = Command::new("chmod")
            .args(["755", root.to_str().unwrap()])
            .status();
        Fx { root }
    }
    fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }
    fn chown_nobody(&self) {
        give_to_nobody(&self.root);
    }
    /// Runs `sh -c script` confined, bounded by `timeout`; as uid 65534 when `nobody`.
    fn sandbox(&self, nobody: bool, extra: &[&str], script: &str) -> (i32, String) {
        run_text(
            as_arm(nobody, 60, BIN)
                .args(["sandbox", "--cd"])
                .arg(self.ws())
                .args(extra)
                .args(["--", "sh", "-c", script])
                .env("HOME", self.root.join("home"))
                .env("CODER_STATE_DIR", self.root.join("state"))
                .env_remove("XDG_CONFIG_HOME"),
        )
    }
}

impl Drop for Fx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Host files through /proc/1/root, /proc/self/fd and /proc/*/cwd of the namespace's
/// processes; masked secrets through a hardlink, a symlink and case variants.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn review_proc_paths_and_links_do_not_reach_secrets() {
    for nobody in arms() {
        let fx = Fx::new(if nobody { "proc-n" } else { "proc-r" });
        if nobody {
            fx.chown_nobody();
        }
        let script = "cat plain.txt; \
            cat /proc/1/root/etc/shadow /proc/1/root$PWD/.env /proc/1/cwd/.env 2>/dev/null; \
            for f in /proc/self/fd/[3-9]* /proc/1/fd/[3-9]*; do timeout 2 cat $f 2>/dev/null </dev/null; done; \
            ln .env hl 2>/dev/null && cat hl; ln -s .env sl && cat sl; \
            cat sub/.ENV a.key ./sub/../.env 2>/dev/null; \
            cat /proc/1/root/../../$PWD/.env 2>/dev/null; echo END";
        let (rc, out) = fx.sandbox(nobody, &[], script);
        assert_eq!(rc, 0, "nobody={nobody}: {out}");
        assert!(
            out.contains("PLAIN_OK") && out.contains("END"),
            "control: {out}"
        );
        assert!(
            !out.contains("SECRET"),
            "nobody={nobody} secret leaked: {out}"
        );
        let (_, host_shadow) = fx.sandbox(nobody, &[], "head -c 64 /etc/shadow | grep -c :");
        assert!(!host_shadow.trim().starts_with('1'), "{host_shadow}");
    }
}

/// The top-level git config and hooks through other spellings and other git front doors.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn review_git_config_other_names_are_read_only() {
    for nobody in arms() {
        let fx = Fx::new(if nobody { "git-n" } else { "git-r" });
        if nobody {
            fx.chown_nobody();
        }
        let before = std::fs::read(fx.ws().join(".git/config")).unwrap();
        let script = "echo '[core]' >> .git/../.git/config; \
            echo x > ./.git//hooks/pre-commit; \
            mkdir -p sub/n && (cd sub/n && GIT_DIR=../../.git git config core.hooksPath /x); \
            git -C sub config core.fsmonitor evil; \
            git --git-dir=$PWD/.git config alias.x '!evil'; \
            git worktree add sub/wt 2>/dev/null; \
            mv .git/config .git/c2; mv .git/hooks .git/h2; \
            echo plain > sub/ok.txt && echo WROTE_OK";
        let (_, out) = fx.sandbox(nobody, &[], script);
        assert!(out.contains("WROTE_OK"), "control: {out}");
        assert_eq!(
            std::fs::read(fx.ws().join(".git/config")).unwrap(),
            before,
            "nobody={nobody}: .git/config changed: {out}"
        );
        assert!(!fx.ws().join(".git/hooks/pre-commit").exists(), "{out}");
        assert!(fx.ws().join(".git/hooks").is_dir(), "{out}");
    }
}

fn serve(tag: &'static str, hits: Arc<AtomicUsize>) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < end {
            match l.accept() {
                Ok((mut s, _)) => {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut b = [0u8; 1024];
                    let _ = s.read(&mut b);
                    let body = format!("HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n{tag}");
                    let _ = s.write_all(body.as_bytes());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (port, h)
}

/// Proxy request smuggling towards an unlisted loopback port while another port is allowed.
#[test]
fn review_proxy_smuggling_to_other_port_is_refused() {
    let _ = TcpStream::connect_timeout;
    let fx = Fx::new("proxy");
    let good = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(AtomicUsize::new(0));
    let (gp, _g) = serve("GOO", good.clone());
    let (bp, _b) = serve("BAD", bad.clone());
    let reqs = [
        format!("CONNECT 127.0.0.1:{bp} HTTP/1.1\r\nHost: 127.0.0.1:{gp}\r\n\r\n"),
        format!("GET http://127.0.0.1:{bp}/ HTTP/1.1\r\nHost: 127.0.0.1:{gp}\r\n\r\n"),
        format!("GET http://127.0.0.1:{gp}@127.0.0.1:{bp}/ HTTP/1.1\r\n\r\n"),
        format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{bp}\r\n\r\n"),
        format!("CONNECT [::ffff:127.0.0.1]:{bp} HTTP/1.1\r\n\r\n"),
        format!("CONNECT localhost:{bp} HTTP/1.1\r\n\r\n"),
        format!("CONNECT 2130706433:{bp} HTTP/1.1\r\n\r\n"),
        format!("CONNECT 127.0.0.1.:{bp} HTTP/1.1\r\n\r\n"),
        format!("CONNECT 127.0.0.1:0{bp} HTTP/1.1\r\n\r\n"),
        format!("CONNECT 127.0.0.1:{gp}:{bp} HTTP/1.1\r\n\r\n"),
        format!(
            "GET http://127.0.0.1:{gp}/ HTTP/1.1\r\nHost: x\r\n\r\nGET http://127.0.0.1:{bp}/ HTTP/1.1\r\nHost: x\r\n\r\n"
        ),
    ];
    let mut script = String::new();
    for r in &reqs {
        let r = r.replace("\r\n", "\\r\\n");
        script.push_str(&format!(
            "printf '{r}' | timeout 4 python3 -c \"import socket,sys\ns=socket.create_connection(('127.0.0.1',3128));s.sendall(sys.stdin.buffer.read());s.settimeout(2)\ntry:\n  while 1:\n    d=s.recv(4096)\n    if not d: break\n    sys.stdout.write(d.decode('latin1'))\nexcept Exception: pass\n\"; echo; "
        ));
    }
    script.push_str(&format!(
        "printf 'GET http://127.0.0.1:{gp}/ HTTP/1.1\\r\\n\\r\\n' | timeout 4 python3 -c \"import socket,sys\ns=socket.create_connection(('127.0.0.1',3128));s.sendall(sys.stdin.buffer.read());s.settimeout(2)\nprint(s.recv(4096).decode('latin1'))\"; echo CONTROL_DONE"
    ));
    let allow = format!("127.0.0.1:{gp}");
    let (_, out) = fx.sandbox(false, &["--allow-host", &allow], &script);
    if !out.contains("CONTROL_DONE") || !out.contains("GOO") {
        assert!(
            Command::new("python3").arg("-V").output().is_err(),
            "control failed: {out}"
        );
        return;
    }
    assert_eq!(
        bad.load(Ordering::SeqCst),
        0,
        "unlisted port reached: {out}"
    );
    assert!(!out.contains("BAD"), "{out}");
    assert!(good.load(Ordering::SeqCst) >= 1);
}

/// `coder fs`: `..`, absolute paths, case variants, a symlink to a secret, `search`.
#[test]
fn review_fs_jail_refuses_secret_spellings() {
    let fx = Fx::new("fs");
    std::os::unix::fs::symlink(fx.ws().join(".env"), fx.ws().join("lnk")).unwrap();
    std::os::unix::fs::symlink("/etc", fx.ws().join("etc")).unwrap();
    let fs = |verb: &str, json: String| {
        let o = Command::new("timeout")
            .args(["20", BIN, "fs", "--base"])
            .arg(fx.ws())
            .args([verb, &json])
            .env("HOME", fx.root.join("home"))
            .env("CODER_STATE_DIR", fx.root.join("state"))
            .env("XDG_CONFIG_HOME", fx.root.join("home"))
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let ctl = fs("read-file", r#"{"path":"plain.txt"}"#.into());
    assert!(ctl.contains("PLAIN_OK"), "control: {ctl}");
    let abs = fx.ws().join(".env");
    for p in [
        "sub/.ENV".to_string(),
        "sub/../.env".into(),
        "A.KEY".into(),
        "lnk".into(),
        "./.Env".into(),
        "etc/passwd".into(),
        "../ws/.env".into(),
        abs.display().to_string(),
    ] {
        let out = fs("read-file", format!(r#"{{"path":"{p}"}}"#));
        assert!(
            !out.contains("SECRET") && !out.contains("root:"),
            "{p}: {out}"
        );
        assert!(out.contains("\"code\""), "{p} not refused: {out}");
    }
    let out = fs("search", r#"{"pattern":"SECRET"}"#.into());
    assert!(!out.contains("SECRET_"), "search leaked: {out}");
}

/// A repository the agent creates in a subdirectory, staged as a gitlink in the top-level
/// index: the user's later plain `git status` *at the workspace root* spawns git in it,
/// which would run the agent's `core.fsmonitor` unconfined. Found open by this review;
/// closed by the end-of-run git guard (`src/sandbox/gitguard.rs`, more variants in
/// `tests/sandbox_gitguard.rs`). Control: under `danger-full-access` (no guard) the user's
/// `git status` does run it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn gitlink_to_an_agent_made_repo_does_not_run_its_fsmonitor_on_status() {
    for nobody in arms() {
        for danger in [false, true] {
            let tag = format!("gitlink-{}-{}", u8::from(nobody), u8::from(danger));
            let fx = Fx::new(&tag);
            let marker = fx.root.join("home/PWNED");
            if nobody {
                fx.chown_nobody();
            }
            let script = format!(
                "git init -q n && cd n && git config core.fsmonitor 'touch {m}; false' && \
                 echo a > f && git add f && git -c user.name=a -c user.email=a@b commit -qm x && \
                 cd .. && git add n 2>/dev/null; touch {m} 2>/dev/null || echo CONFINED; \
                 echo PLANTED",
                m = marker.display()
            );
            let extra: &[&str] = if danger {
                &["--mode", "danger-full-access"]
            } else {
                &[]
            };
            let (_, out) = fx.sandbox(nobody, extra, &script);
            assert!(out.contains("PLANTED"), "{out}");
            if !danger {
                assert!(
                    out.contains("CONFINED"),
                    "control: the marker must be unreachable: {out}"
                );
            }
            // Only what the user's own git does after coder exited counts.
            let _ = std::fs::remove_file(&marker);
            let _ = as_arm(nobody, 30, "git")
                .args(["status", "--short"])
                .current_dir(fx.ws())
                .env("HOME", fx.root.join("home"))
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output_bounded();
            assert_eq!(
                marker.exists(),
                danger,
                "nobody={nobody} danger={danger}: {out}"
            );
        }
    }
}
