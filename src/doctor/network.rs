//! Whether the backend (or its proxy) answers a TCP connection within a short timeout.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::config::{BackendKind, Endpoint, KeySource, ResolvedBackend};

use super::{Check, Status};

/// Resolves `host:port` and opens a TCP connection, all within `timeout`.
pub fn probe_tcp(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<(SocketAddr, Duration), String> {
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let target = (host.to_owned(), port);
    // Name resolution cannot be given a timeout, so it runs on a thread that is abandoned
    // if it takes too long.
    std::thread::spawn(move || {
        let _ = tx.send(target.to_socket_addrs().map(Iterator::collect::<Vec<_>>));
    });
    let addrs = match rx.recv_timeout(timeout) {
        Ok(Ok(addrs)) => addrs,
        Ok(Err(e)) => return Err(format!("cannot resolve {host}: {e}")),
        Err(_) => return Err(format!("resolving {host} took longer than {timeout:?}")),
    };
    let mut last = format!("{host} has no address");
    for addr in addrs {
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(format!("no connection to {host}:{port} within {timeout:?}"));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(_) => return Ok((addr, started.elapsed())),
            Err(e) => last = format!("cannot connect to {host}:{port} ({addr}): {e}"),
        }
    }
    Err(last)
}

pub(super) fn check_network(backend: &ResolvedBackend, timeout: Duration) -> Check {
    if backend.kind() == BackendKind::Replay && backend.endpoint().is_none() {
        return Check::new(
            "network",
            Status::Skip,
            "replay backend: coder serves the cassette itself on 127.0.0.1",
        );
    }
    let Some(endpoint) = backend.endpoint() else {
        return Check::new("network", Status::Skip, "no base URL to connect to");
    };
    let proxy = backend.proxy();
    let (target, via): (&Endpoint, String) = match &proxy {
        Some(p) => (p, format!(" (proxy for {endpoint})")),
        None => (endpoint, String::new()),
    };
    match probe_tcp(&target.host, target.port, timeout) {
        Ok((addr, took)) => Check::new(
            "network",
            Status::Ok,
            format!(
                "connected to {target}{via} ({addr}) in {} ms",
                took.as_millis()
            ),
        )
        .detail("host", target.host.clone())
        .detail("port", target.port),
        Err(e) => {
            let mut check = Check::new("network", Status::Fail, format!("{e}{via}"))
                .detail("host", target.host.clone())
                .detail("port", target.port);
            if endpoint.is_loopback() {
                check = check.hint(format!(
                    "nothing listens on {endpoint}: start the local server (proxy) first"
                ));
            } else if let Some(KeySource::Variable(_)) = backend.credential().map(|c| &c.source) {
                check = check.hint("check the network, a firewall, or HTTPS_PROXY");
            }
            check
        }
    }
}
