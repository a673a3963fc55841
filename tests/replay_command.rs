//! `coder replay serve` as a user runs it: the base URL on stdout, serving until a signal,
//! the report on stderr; clear failures for bad cassettes and arguments.

mod common;

use common::Bounded;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

fn coder() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coder"))
}

fn fixture(name: &str) -> String {
    format!("{}/fixtures/cassettes/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Sends one plain Messages request and returns the raw response.
fn post(addr: &str) -> String {
    let body = r#"{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST /v1/messages?beta=true HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn serve_prints_the_url_serves_and_reports_on_sigterm() {
    let workspace = tempfile::tempdir().unwrap();
    // Killed when the test ends, passed or failed: a server must not outlive its test.
    let mut child = common::KillOnDrop::spawn(
        coder()
            .args(["replay", "serve", &fixture("plain.json"), "--workspace"])
            .arg(workspace.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let _deadline = common::Deadline::kill_after(&child, common::DEFAULT_DEADLINE);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let url = url.trim_end().to_string();
    let addr = url
        .strip_prefix("http://127.0.0.1:")
        .map(|port| format!("127.0.0.1:{port}"))
        .unwrap_or_else(|| panic!("not a loopback URL: {url:?}"));

    let response = post(&addr);
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(
        response.contains("Hello from the replay cassette."),
        "{response}"
    );

    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = common::wait_within(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "stdout holds only the URL line");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let report: Value = serde_json::from_str(&stderr).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(report["name"], "plain");
    assert_eq!(report["turns_left"], 0);
    assert_eq!(report["requests"][0]["outcome"], "answered");
    assert_eq!(report["requests"][0]["target"], "/v1/messages?beta=true");
}

#[test]
fn a_bad_cassette_is_a_configuration_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.json");
    std::fs::write(
        &path,
        r#"{"version": 1, "turns": [{"respnse": {"content": []}}]}"#,
    )
    .unwrap();
    let output = coder()
        .args(["replay", "serve"])
        .arg(&path)
        .output_bounded();
    assert_eq!(output.status.code(), Some(78));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("typo.json"), "{stderr}");
    assert!(stderr.contains("unknown field `respnse`"), "{stderr}");
}

#[test]
fn a_cassette_needing_a_workspace_says_so() {
    let output = coder()
        .args(["replay", "serve", &fixture("demo.json")])
        .output_bounded();
    assert_eq!(output.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no workspace was given"), "{stderr}");
    assert!(stderr.contains("pass --workspace DIR"), "{stderr}");
}

#[test]
fn usage_errors_exit_2() {
    let output = coder().args(["replay", "serve"]).output_bounded();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("CASSETTE"));
    let output = coder().args(["replay", "--help"]).output_bounded();
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("serve"));
}

#[test]
fn serve_listens_on_the_given_port() {
    // A port that was free a moment ago (bind 0, read it, release it).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = common::KillOnDrop::spawn(
        coder()
            .args(["replay", "serve", &fixture("plain.json"), "--port"])
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let _deadline = common::Deadline::kill_after(&child, common::DEFAULT_DEADLINE);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    assert_eq!(url.trim_end(), format!("http://127.0.0.1:{port}"));
    let response = post(&format!("127.0.0.1:{port}"));
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = common::wait_within(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}
