//! coder's egress proxy: the agent's only way off its private loopback.
//!
//! The agent runs in a network namespace with loopback only (`netns`). Its helper
//! binds a listener on that loopback and sends the descriptor to coder over an inherited
//! UNIX socket; [`Egress::attach`] receives it and serves it here, in coder's own (host)
//! network namespace, on tokio. A socket stays in the namespace it was created in, so the
//! agent connects to `127.0.0.1:PORT` inside while every outgoing connection the proxy
//! makes starts from the host.
//!
//! What it serves is deliberately small:
//! * `CONNECT host:port` (HTTPS and anything else tunnelled), and
//! * plain HTTP with an absolute URI (`GET http://host:port/path`), rewritten to origin
//!   form for the first request; later requests on the same connection go to the same
//!   upstream unchanged (HTTP/1.1 servers accept the absolute form), so a connection never
//!   reaches anything but the destination that was checked.
//!
//! Both only to a `host:port` on the allow-list ([`super::allow`]), matched exactly. DNS is
//! resolved here, outside. A refused request gets `403` with a body that says how to allow
//! it, and is recorded as a denial (`{tool: "proxy", host, class: "network"}`) that the
//! run reports in `metrics.sandbox_denials`; the counts of allowed and refused requests
//! are kept too ([`EgressLog`]), so a run can show that its backend traffic went through
//! the proxy.
//!
//! Everything is bounded: the request head (16 KiB), the time to send it (30 s), the
//! upstream connect (30 s), the number of recorded denials (100), and the connections
//! served at once ([`MAX_CONNECTIONS`]): past it the proxy stops accepting until one
//! ends, so further connections wait in the listener's backlog, inside the agent's
//! namespace. Unbounded, every connection the agent opened (it needs no allowed
//! destination: an idle one is held for the head's 30 s, a tunnel for as long as it
//! lasts) held a descriptor of coder's, outside the sandbox, and some memory: a few
//! thousand took all of coder's descriptors (round nineteen's review,
//! `sandbox_round19_review::the_agent_cannot_take_coders_descriptors_through_the_proxy`).
//!
//! A proxy may be made with a [`Hold`]: every allowed request then waits, before anything
//! is sent upstream, until the hold is released. The run uses it to take the change
//! ledger's "before" snapshot while the CLI starts (`pipeline::snapshot`): the agent can
//! change the workspace only through a tool call, a tool call needs a model response, and
//! every model request passes here, so nothing the agent does can land in the snapshot.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::allow::{self, HostPort};
use super::denial::{Denial, DenialClass};

const MAX_HEAD: usize = 16 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_DENIALS: usize = 100;
/// Connections served at once (each holds one descriptor of coder's, two once it goes
/// upstream). Far more than the CLI and a package manager open together.
pub const MAX_CONNECTIONS: usize = 256;
/// The `tool` of a denial the proxy records (it cannot know which tool made the request).
pub const PROXY_TOOL: &str = "proxy";

/// What the proxy saw, shared by all its connections.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EgressLog {
    /// Connections let through: CONNECT tunnels, and plain-HTTP connections (with every
    /// request they carry: the CLI keeps one open across turns).
    pub allowed: u64,
    /// Requests refused (not on the allow-list).
    pub denied: u64,
    /// Distinct refused destinations, at most `MAX_DENIALS`.
    pub denials: Vec<Denial>,
}

/// The proxy of one run: its allow-list, its log, and the tasks serving each attempt's
/// listener (stopped when dropped).
pub struct Egress {
    allow: Arc<Vec<HostPort>>,
    log: Arc<Mutex<EgressLog>>,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    hold: Option<Hold>,
}

/// What holds a proxy's upstream requests until its [`Release`] is used or dropped (so a
/// holder that panics or returns early never leaves the requests held).
#[derive(Debug, Clone)]
pub struct Hold {
    released: tokio::sync::watch::Receiver<bool>,
    /// The longest time one request was held.
    longest: Arc<Mutex<std::time::Duration>>,
}

/// The releasing end of a [`Hold`].
#[derive(Debug)]
pub struct Release(tokio::sync::watch::Sender<bool>);

impl Release {
    pub fn release(self) {
        let _ = self.0.send(true);
    }
}

impl Hold {
    pub fn new() -> (Hold, Release) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let hold = Hold {
            released: rx,
            longest: Arc::new(Mutex::new(Duration::ZERO)),
        };
        (hold, Release(tx))
    }

    /// Waits until released (at once when it is); notes how long.
    pub async fn wait(&self) {
        let started = std::time::Instant::now();
        let mut released = self.released.clone();
        // An error means the `Release` was dropped: released too.
        let _ = released.wait_for(|done| *done).await;
        let held = started.elapsed();
        if let Ok(mut longest) = self.longest.lock() {
            *longest = (*longest).max(held);
        }
    }

    /// The longest time a request waited so far.
    pub fn longest(&self) -> Duration {
        self.longest.lock().map(|l| *l).unwrap_or_default()
    }
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.lock() {
            for task in tasks.iter() {
                task.abort();
            }
        }
    }
}

impl Egress {
    pub fn new(allow: Vec<HostPort>) -> Egress {
        Egress::held(allow, None)
    }

    /// A proxy whose allowed requests wait for `hold` (see the module doc).
    pub fn held(allow: Vec<HostPort>, hold: Option<Hold>) -> Egress {
        Egress {
            allow: Arc::new(allow),
            log: Arc::new(Mutex::new(EgressLog::default())),
            tasks: Mutex::new(Vec::new()),
            hold,
        }
    }

    /// What the proxy saw since the last call, which starts a new log.
    pub fn take_log(&self) -> EgressLog {
        self.log
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }

    /// Serves the listener that arrives on `channel` (the parent end of the helper's
    /// network socket pair). Must be called inside a tokio runtime. Returns at once; a
    /// helper that fails before sending a listener just closes the channel.
    pub fn attach(&self, channel: OwnedFd) {
        let task = tokio::spawn(self.serve_channel_owned(channel));
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.retain(|t| !t.is_finished());
            tasks.push(task.abort_handle());
        }
    }
}

impl Egress {
    /// Receives the listener on `channel` and serves it; returns only when no listener
    /// arrives (the helper failed before sending one).
    pub async fn serve_channel(&self, channel: OwnedFd) {
        self.serve_channel_owned(channel).await;
    }

    fn serve_channel_owned(&self, channel: OwnedFd) -> impl Future<Output = ()> + use<> {
        let allow = self.allow.clone();
        let log = self.log.clone();
        let hold = self.hold.clone();
        async move {
            let Ok(listener) = receive_listener(channel).await else {
                return;
            };
            serve_held(listener, allow, log, hold).await;
        }
    }
}

/// Receives the listening socket the helper sends (one marker byte with `SCM_RIGHTS`).
pub async fn receive_listener(channel: OwnedFd) -> std::io::Result<TcpListener> {
    let fd = tokio::task::spawn_blocking(move || receive_fd(&channel))
        .await
        .map_err(std::io::Error::other)??;
    let listener = std::net::TcpListener::from(fd);
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// Blocking receive of one descriptor from `channel`.
pub fn receive_fd(channel: &OwnedFd) -> std::io::Result<OwnedFd> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg = loop {
        match recvmsg::<()>(
            channel.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.map_err(std::io::Error::from)?,
        }
    };
    for cmsg in msg.cmsgs().map_err(std::io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            let mut owned: Vec<OwnedFd> = fds
                .into_iter()
                // SAFETY: SCM_RIGHTS installed these descriptors in this process just now;
                // nothing else owns them.
                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
                .collect();
            if owned.len() == 1 {
                return owned
                    .pop()
                    .ok_or_else(|| std::io::Error::other("no descriptor"));
            }
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "the sandbox helper sent no proxy listener",
    ))
}

/// Accepts and serves connections until the task is aborted.
pub async fn serve(listener: TcpListener, allow: Arc<Vec<HostPort>>, log: Arc<Mutex<EgressLog>>) {
    serve_held(listener, allow, log, None).await;
}

/// The same, each allowed request waiting for `hold` before it goes upstream.
async fn serve_held(
    listener: TcpListener,
    allow: Arc<Vec<HostPort>>,
    log: Arc<Mutex<EgressLog>>,
    hold: Option<Hold>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A slot first: at the cap, connections wait in the backlog, not in coder.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((client, _)) = listener.accept().await else {
            // EMFILE and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let allow = allow.clone();
        let log = log.clone();
        let hold = hold.clone();
        tokio::spawn(async move {
            let _ = handle(client, &allow, &log, hold.as_ref()).await;
            drop(slot);
        });
    }
}

/// A parsed request head: where it wants to go and how.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `CONNECT host:port`.
    Tunnel(HostPort),
    /// A plain HTTP request; `head` is the head rewritten to origin form.
    Http { dest: HostPort, head: Vec<u8> },
}

/// Why a request head was refused, with the status to answer.
#[derive(Debug, PartialEq, Eq)]
struct Refusal {
    status: u16,
    message: String,
}

fn refusal(status: u16, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

async fn handle(
    mut client: TcpStream,
    allow: &[HostPort],
    log: &Mutex<EgressLog>,
    hold: Option<&Hold>,
) -> std::io::Result<()> {
    // A relay forwards each piece as it comes (a streamed reply is many small events):
    // with Nagle's algorithm a piece sent while the previous one is unacknowledged waits
    // for that ACK, which the CLI may delay by up to 40 ms.
    client.set_nodelay(true)?;
    let Ok(read) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await else {
        return Ok(());
    };
    let (head_len, mut buffer) = match read? {
        Some(read) => read,
        None => return respond(&mut client, &refusal(400, "request head too large")).await,
    };
    let rest = buffer.split_off(head_len);
    let target = match parse_head(&buffer) {
        Ok(target) => target,
        Err(refused) => return respond(&mut client, &refused).await,
    };
    let dest = match &target {
        Target::Tunnel(dest) | Target::Http { dest, .. } => dest.clone(),
    };
    if !allow.contains(&dest) {
        record_denial(log, &dest);
        let message = format!(
            "coder sandbox: {dest} is not on the network allow-list; the user can allow it \
             with --allow-host {dest}"
        );
        return respond(&mut client, &refusal(403, message)).await;
    }
    // Nothing has left the machine yet: the request waits here while the run holds it.
    if let Some(hold) = hold {
        hold.wait().await;
    }
    let upstream = match connect(&dest).await {
        Ok(upstream) => upstream,
        Err(e) => {
            let message = format!("coder sandbox proxy: cannot reach {dest}: {e}");
            return respond(&mut client, &refusal(502, message)).await;
        }
    };
    if let Ok(mut log) = log.lock() {
        log.allowed += 1;
    }
    let mut upstream = upstream;
    match target {
        Target::Tunnel(_) => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await?;
        }
        Target::Http { head, .. } => upstream.write_all(&head).await?,
    }
    if !rest.is_empty() {
        upstream.write_all(&rest).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

fn record_denial(log: &Mutex<EgressLog>, dest: &HostPort) {
    let Ok(mut log) = log.lock() else {
        return;
    };
    log.denied += 1;
    let denial = Denial {
        tool: PROXY_TOOL.to_string(),
        path: None,
        host: Some(dest.to_string()),
        class: DenialClass::Network,
    };
    if log.denials.len() < MAX_DENIALS && !log.denials.contains(&denial) {
        log.denials.push(denial);
    }
}

/// Reads until the end of the head (`\r\n\r\n`): `(head length, bytes read)`, or `None`
/// when the head exceeds [`MAX_HEAD`].
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<(usize, Vec<u8>)>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let searched_from = buffer.len().saturating_sub(3);
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(at) = find(&buffer[searched_from..], b"\r\n\r\n") {
            return Ok(Some((searched_from + at + 4, buffer)));
        }
        if buffer.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses a request head into where it goes. Pure, for tests.
fn parse_head(head: &[u8]) -> Result<Target, Refusal> {
    let text = std::str::from_utf8(head).map_err(|_| refusal(400, "request head is not UTF-8"))?;
    let (line, headers) = text.split_once("\r\n").unwrap_or((text, ""));
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(refusal(400, format!("malformed request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(refusal(505, format!("unsupported protocol {version:?}")));
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let dest = allow::authority(target, 443)
            .filter(|_| target.contains(':'))
            .ok_or_else(|| refusal(400, format!("CONNECT needs host:port, got {target:?}")))?;
        return Ok(Target::Tunnel(dest));
    }
    let Some(rest) = strip_prefix_ignore_case(target, "http://") else {
        return Err(refusal(
            400,
            "this proxy serves CONNECT and absolute http:// URIs only",
        ));
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        return Err(refusal(400, "credentials in the URI are not supported"));
    }
    let dest = allow::authority(authority, 80)
        .ok_or_else(|| refusal(400, format!("bad host in {target:?}")))?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    let mut out = format!("{method} {path} {version}\r\n");
    for header in headers.split("\r\n").filter(|h| !h.is_empty()) {
        let name = header.split(':').next().unwrap_or("").trim();
        if name.eq_ignore_ascii_case("proxy-connection")
            || name.eq_ignore_ascii_case("proxy-authorization")
        {
            continue;
        }
        out.push_str(header);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    Ok(Target::Http {
        dest,
        head: out.into_bytes(),
    })
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    (text.len() >= prefix.len() && text[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &text[prefix.len()..])
}

/// Resolves `dest` here (outside the sandbox) and connects to the first address that
/// answers.
async fn connect(dest: &HostPort) -> std::io::Result<TcpStream> {
    let attempt = async {
        let addrs = tokio::net::lookup_host((dest.host.as_str(), dest.port)).await?;
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    // The head and the body go up as two writes (see the client's note).
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no address")))
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))?
}

async fn respond(client: &mut TcpStream, refused: &Refusal) -> std::io::Result<()> {
    let reason = match refused.status {
        400 => "Bad Request",
        403 => "Forbidden",
        502 => "Bad Gateway",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    };
    let body = format!("{}\n", refused.message);
    let response = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        refused.status,
        body.len()
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held proxy connects nowhere until released: the upstream sees no connection, and
    /// the client no answer; once released, the tunnel opens.
    #[tokio::test]
    async fn a_held_request_goes_upstream_only_once_released() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = upstream.local_addr().unwrap().port();
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        let (hold, release) = Hold::new();
        let allow = Arc::new(vec![hp("127.0.0.1", port)]);
        let log = Arc::new(Mutex::new(EgressLog::default()));
        let served = tokio::spawn(serve_held(proxy, allow, log, Some(hold.clone())));
        let mut client = TcpStream::connect(proxy_addr).await.unwrap();
        let head = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
        client.write_all(head.as_bytes()).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(300), upstream.accept()).await;
        assert!(early.is_err(), "went upstream while held");
        release.release();
        let accepted = tokio::time::timeout(Duration::from_secs(10), upstream.accept()).await;
        assert!(accepted.is_ok(), "never went upstream once released");
        let mut answer = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200");
        assert!(hold.longest() >= Duration::from_millis(300));
        served.abort();
    }

    /// A dropped release (its holder panicked or returned early) releases too.
    #[tokio::test]
    async fn a_dropped_release_releases() {
        let (hold, release) = Hold::new();
        drop(release);
        tokio::time::timeout(Duration::from_secs(5), hold.wait())
            .await
            .unwrap();
    }

    fn hp(host: &str, port: u16) -> HostPort {
        HostPort {
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn connect_heads_name_their_destination() {
        let head = b"CONNECT Example.com:8443 HTTP/1.1\r\nHost: example.com:8443\r\n\r\n";
        assert_eq!(
            parse_head(head),
            Ok(Target::Tunnel(hp("example.com", 8443)))
        );
        assert_eq!(
            parse_head(b"CONNECT [::1]:9 HTTP/1.1\r\n\r\n"),
            Ok(Target::Tunnel(hp("::1", 9)))
        );
        assert_eq!(
            parse_head(b"CONNECT example.com HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn absolute_uris_are_rewritten_to_origin_form() {
        let head = b"POST http://127.0.0.1:4567/v1/messages?beta=true HTTP/1.1\r\n\
                     Host: 127.0.0.1:4567\r\nProxy-Connection: keep-alive\r\n\
                     Content-Length: 2\r\n\r\n";
        let Ok(Target::Http { dest, head }) = parse_head(head) else {
            panic!("not plain HTTP");
        };
        assert_eq!(dest, hp("127.0.0.1", 4567));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST /v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1:4567\r\n\
             Content-Length: 2\r\n\r\n"
        );
        let Ok(Target::Http { dest, head }) = parse_head(b"GET http://x.org HTTP/1.0\r\n\r\n")
        else {
            panic!("not plain HTTP");
        };
        assert_eq!(dest, hp("x.org", 80));
        assert!(head.starts_with(b"GET / HTTP/1.0\r\n"));
    }

    #[test]
    fn other_requests_are_refused() {
        for head in [
            &b"GET /relative HTTP/1.1\r\n\r\n"[..],
            b"GET https://x.org/ HTTP/1.1\r\n\r\n",
            b"GET http://user:pw@x.org/ HTTP/1.1\r\n\r\n",
            b"GET http://x.org/ HTTP/2\r\n\r\n",
            b"garbage\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
        ] {
            assert!(
                parse_head(head).is_err(),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn denials_are_recorded_once_each() {
        let log = Mutex::new(EgressLog::default());
        record_denial(&log, &hp("evil.example", 443));
        record_denial(&log, &hp("evil.example", 443));
        let log = log.into_inner().unwrap();
        assert_eq!(log.denied, 2);
        assert_eq!(log.denials.len(), 1);
        assert_eq!(log.denials[0].host.as_deref(), Some("evil.example:443"));
        assert_eq!(log.denials[0].class, DenialClass::Network);
    }
}
