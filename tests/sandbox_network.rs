//! Network attacks through `coder sandbox`, on the real kernel, as root and as `nobody`:
//! every way off the agent's private loopback but the proxy must fail, the proxy must
//! refuse what is not on the allow-list and serve what is. Under `danger-full-access`
//! the same attacks succeed (the controls), so the checks can fail.
//!
//! Everything is on 127.0.0.1 and bounded: each command runs under `timeout`, each socket
//! in the scripts has a timeout, and the host-side servers accept at most a few
//! connections.

mod common;

use common::Bounded;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const NOBODY: u32 = 65534;
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
const PY: &str = "/usr/bin/python3";

struct Fixture {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    owner: Option<u32>,
}

impl Fixture {
    fn new(owner: Option<u32>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let ws = root.join("ws");
        let home = root.join("home");
        fs::create_dir_all(&ws).unwrap();
        fs::create_dir_all(&home).unwrap();
        if let Some(uid) = owner {
            for dir in [&ws, &home] {
                std::os::unix::fs::chown(dir, Some(uid), Some(uid)).unwrap();
            }
        }
        Fixture {
            _dir: dir,
            ws,
            home,
            owner,
        }
    }

    fn command(&self, args: &[String], script: &str) -> Command {
        let mut cmd = Command::new("/usr/bin/timeout");
        cmd.args(["30", env!("CARGO_BIN_EXE_coder"), "sandbox"])
            .args(["--cd".to_string(), self.ws.display().to_string()])
            .args(args)
            .args(["--", "/bin/bash", "-c", script])
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &self.home)
            .current_dir(&self.ws)
            .stdin(Stdio::null());
        if let Some(uid) = self.owner {
            cmd.uid(uid).gid(uid);
        }
        cmd
    }

    fn run(&self, args: &[String], script: &str) -> Output {
        self.command(args, script).output_bounded()
    }
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}, stdout {:?}, stderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A host-side TCP server on 127.0.0.1 that answers every connection with `reply` and
/// counts them. The thread ends with the test process.
struct Server {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Server {
    fn start(reply: &'static [u8]) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(64) {
                let Ok(mut stream) = stream else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(Duration::from_millis(300)));
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(reply);
            }
        });
        Server { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A bash snippet that opens fd 3 to the proxy named by `$HTTPS_PROXY`.
const OPEN_PROXY: &str =
    r#"p=${HTTPS_PROXY##*:}; p=${p%%/*}; exec 3<>/dev/tcp/127.0.0.1/$p || exit 9"#;

fn connect_script(target: &str) -> String {
    format!(
        "{OPEN_PROXY}; printf 'CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n' >&3; \
         IFS= read -r -t 10 status <&3; echo \"status:$status\"; \
         while IFS= read -r -t 2 line <&3; do [ \"$line\" = $'\\r' ] && break; done; \
         IFS= read -r -t 5 body <&3; echo \"body:$body\""
    )
}

fn http_get_script(url: &str) -> String {
    format!("{OPEN_PROXY}; printf 'GET {url} HTTP/1.0\\r\\n\\r\\n' >&3; timeout 10 cat <&3")
}

struct Network {
    allowed: Server,
    denied: Server,
    http: Server,
}

impl Network {
    fn start() -> Network {
        Network {
            allowed: Server::start(b"hello-from-host\n"),
            denied: Server::start(b"denied-server\n"),
            http: Server::start(
                b"HTTP/1.0 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello-http\n",
            ),
        }
    }

    fn allow_args(&self) -> Vec<String> {
        vec![
            "--allow-host".to_string(),
            format!("127.0.0.1:{}", self.allowed.port),
            "--allow-host".to_string(),
            format!("127.0.0.1:{}", self.http.port),
        ]
    }
}

/// Attacks judged by the script's own success: `attack(name) -> script`.
fn socket_attacks(net: &Network) -> Vec<(&'static str, String)> {
    let denied = net.denied.port;
    vec![
        (
            "MPTCP connect to a host listener",
            format!(
                "{PY} -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262); \
                 s.settimeout(3); s.connect(('127.0.0.1', {denied})); s.sendall(b'x'); \
                 assert s.recv(100) == b'denied-server\\n'\""
            ),
        ),
        (
            "TCP Fast Open sendto",
            format!(
                "{PY} -c \"import socket; s=socket.socket(); \
                 s.sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', {denied})); s.settimeout(3); \
                 assert s.recv(100) == b'denied-server\\n'\""
            ),
        ),
        (
            "direct TCP connect to a loopback port",
            format!(
                "exec 3<>/dev/tcp/127.0.0.1/{denied} && IFS= read -r -t 5 l <&3 <&3; \
                 [ \"$l\" = denied-server ]"
            ),
        ),
    ]
}

/// Sends a UDP datagram carrying `token` to a host socket; true when it arrived.
fn udp_reaches_host(fx: &Fixture, args: &[String]) -> (bool, Output) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let port = socket.local_addr().unwrap().port();
    let token = uuid::Uuid::new_v4().simple().to_string();
    let script = format!(
        "{PY} -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
         s.sendto(b'{token}', ('127.0.0.1', {port}))\""
    );
    let out = fx.run(args, &script);
    let mut buf = [0u8; 256];
    // The datagram, if it was sent at all, was queued before the command exited.
    let got = socket
        .recv(&mut buf)
        .is_ok_and(|n| buf[..n] == *token.as_bytes());
    (got, out)
}

/// `listen()` without `bind()` inside; then the host tries the autobound port. True when
/// the host reached it.
fn autobind_reachable(fx: &Fixture, args: &[String]) -> bool {
    let script = format!(
        "{PY} -c \"import socket,sys; s=socket.socket(); s.listen(); \
         print(s.getsockname()[1], flush=True); s.settimeout(5); c,_=s.accept(); c.sendall(b'hi')\""
    );
    let mut child = fx
        .command(args, &script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let reached = match line.trim().parse::<u16>() {
        Ok(port) => TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(3),
        )
        .and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut buf = [0u8; 2];
            s.read_exact(&mut buf)?;
            Ok(buf == *b"hi")
        })
        .unwrap_or(false),
        Err(_) => false,
    };
    let _ = child.kill();
    let _ = child.wait();
    reached
}

fn confined_suite(owner: Option<u32>) -> Vec<String> {
    let fx = Fixture::new(owner);
    let net = Network::start();
    let args = net.allow_args();
    let mut failures = Vec::new();

    for (name, script) in socket_attacks(&net) {
        let out = fx.run(&args, &script);
        if out.status.success() || out.status.code() == Some(71) {
            failures.push(format!("{name}: {}", describe(&out)));
        }
    }
    let (udp, out) = udp_reaches_host(&fx, &args);
    if udp || out.status.code() == Some(71) {
        failures.push(format!("UDP reached the host: {}", describe(&out)));
    }
    if autobind_reachable(&fx, &args) {
        failures.push("listen() without bind() was reachable from the host".to_string());
    }
    if net.denied.hits() != 0 {
        failures.push(format!(
            "the denied server saw {} connection(s)",
            net.denied.hits()
        ));
    }

    // The proxy: refuses what is not listed, serves what is.
    let out = fx.run(
        &args,
        &connect_script(&format!("127.0.0.1:{}", net.denied.port)),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.contains("status:HTTP/1.1 403") || !text.contains("allow-list") {
        failures.push(format!("CONNECT to a denied port: {}", describe(&out)));
    }
    let out = fx.run(&args, &connect_script("example.invalid:443"));
    if !String::from_utf8_lossy(&out.stdout).contains("status:HTTP/1.1 403") {
        failures.push(format!("CONNECT to a denied host: {}", describe(&out)));
    }
    let out = fx.run(
        &args,
        &connect_script(&format!("127.0.0.1:{}", net.allowed.port)),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.contains("status:HTTP/1.1 200") || !text.contains("body:hello-from-host") {
        failures.push(format!("CONNECT to the allowed port: {}", describe(&out)));
    }
    let out = fx.run(
        &args,
        &http_get_script(&format!("http://127.0.0.1:{}/x", net.http.port)),
    );
    if !String::from_utf8_lossy(&out.stdout).contains("hello-http") {
        failures.push(format!("HTTP GET to the allowed port: {}", describe(&out)));
    }
    let out = fx.run(
        &args,
        &http_get_script(&format!("http://127.0.0.1:{}/x", net.denied.port)),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.contains("403 Forbidden") || text.contains("denied-server") {
        failures.push(format!("HTTP GET to a denied port: {}", describe(&out)));
    }
    // A second request on an allowed connection cannot switch to another destination.
    let pinned = format!(
        "{OPEN_PROXY}; printf 'GET http://127.0.0.1:{a}/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n\
         GET http://127.0.0.1:{d}/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' >&3; timeout 5 cat <&3",
        a = net.http.port,
        d = net.denied.port
    );
    let out = fx.run(&args, &pinned);
    if String::from_utf8_lossy(&out.stdout).contains("denied-server") {
        failures.push(format!(
            "a kept-alive connection switched host: {}",
            describe(&out)
        ));
    }
    if net.denied.hits() != 0 {
        failures.push(format!(
            "the denied server saw {} connection(s) through the proxy",
            net.denied.hits()
        ));
    }
    failures
}

fn report(label: &str, failures: &[String]) {
    for failure in failures {
        println!("  FAIL [{label}] {failure}");
    }
    assert!(failures.is_empty(), "{} failures", failures.len());
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn network_attacks_fail_as_root() {
    common::require_root_and_user_namespaces();
    report("root", &confined_suite(None));
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn network_attacks_fail_as_nobody() {
    common::require_root_and_user_namespaces();
    report("nobody", &confined_suite(Some(NOBODY)));
}

#[test]
fn without_the_sandbox_the_same_attacks_succeed() {
    let fx = Fixture::new(None);
    let net = Network::start();
    let args = vec!["--mode".to_string(), "danger-full-access".to_string()];
    let mut missed = Vec::new();
    for (name, script) in socket_attacks(&net) {
        let out = fx.run(&args, &script);
        if !out.status.success() {
            missed.push(format!("{name}: {}", describe(&out)));
        }
    }
    let (udp, out) = udp_reaches_host(&fx, &args);
    if !udp {
        missed.push(format!("UDP: {}", describe(&out)));
    }
    if !autobind_reachable(&fx, &args) {
        missed.push("listen() without bind()".to_string());
    }
    assert!(
        missed.is_empty(),
        "controls that did not succeed: {missed:#?}"
    );
}

#[test]
fn unknown_presets_and_bad_hosts_are_config_errors() {
    let fx = Fixture::new(None);
    for bad in ["@nope", "https://x.org", "x.org:0"] {
        let out = fx.run(&["--allow-host".to_string(), bad.to_string()], "true");
        assert_eq!(out.status.code(), Some(78), "{bad}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--allow-host"),
            "{bad}: {}",
            describe(&out)
        );
    }
}

#[test]
fn exit_codes_and_signals_pass_through_the_proxying_parent() {
    let fx = Fixture::new(None);
    let out = fx.run(&[], "exit 7");
    assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
    let out = fx.run(&[], "kill -TERM $$");
    use std::os::unix::process::ExitStatusExt;
    // `timeout` reports a child killed by a signal as 128+N.
    assert!(
        out.status.signal() == Some(15) || out.status.code() == Some(143),
        "{}",
        describe(&out)
    );
    // SIGTERM sent to coder (not the terminal's) reaches the command.
    let mut child = fx
        .command(
            &[],
            "trap 'echo got-term; exit 3' TERM; echo ready; sleep 20 & wait",
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    // The child of `timeout` is coder; signal coder itself.
    let coder_pid =
        fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
            .unwrap()
            .trim()
            .parse::<i32>()
            .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(coder_pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(rest.contains("got-term"), "{rest:?}");
    assert_eq!(status.code(), Some(3));
}
