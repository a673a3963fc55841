//! The replay backend: an Anthropic Messages API server on 127.0.0.1 that answers from a
//! scripted conversation (a cassette) instead of a model.
//!
//! It exists so that coder can be run, demonstrated and tested with the real `claude` CLI
//! and no key or network: the CLI talks to this server exactly as it talks to a provider,
//! its tools really run in the workspace, and faults a provider shows only rarely (5xx,
//! 429 with `retry-after`, 401, slow headers, stalled or reset streams, error events) can
//! be played on demand. A cassette can also state what each request must contain (the
//! previous tool result, the history of a resumed session); a request that falls short is
//! answered with a 400 naming the turn and the unmet condition, and the server's
//! [`ReplayReport`] lists it.
//!
//! The server never connects anywhere and binds only the loopback address. It runs on the
//! caller's tokio runtime ([`ReplayServer::start`]) or standalone (`coder replay serve`,
//! `commands::replay`). The cassette format is documented in `docs/cassettes.md`.

mod cassette;
mod http;
mod matcher;
mod render;
mod server;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use cassette::{CASSETTE_VERSION, Cassette, WORKSPACE_PLACEHOLDER};

/// Why a cassette could not be loaded or a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read cassette {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("malformed cassette {origin}: {source}")]
    Json {
        origin: String,
        source: serde_json::Error,
    },
    #[error("invalid cassette {origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error(
        "cassette {origin} uses {{{{workspace}}}} in tool inputs, but no workspace was given to the replay server: pass --workspace DIR (the directory the agent works in)"
    )]
    WorkspaceRequired { origin: String },
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
}

/// How to run a replay server.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The directory `{{workspace}}` stands for in tool inputs (made absolute).
    pub workspace: Option<PathBuf>,
}

/// A running replay server. Dropping it stops the server too; [`ReplayServer::shutdown`]
/// also waits for the connections to close and returns the final report.
pub struct ReplayServer {
    addr: SocketAddr,
    shared: Arc<server::Shared>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ReplayServer {
    /// Binds 127.0.0.1 and starts serving `cassette` on the current tokio runtime.
    pub async fn start(
        cassette: Cassette,
        options: ServeOptions,
    ) -> Result<ReplayServer, ReplayError> {
        let cassette = match &options.workspace {
            Some(workspace) => cassette.with_workspace(&cassette::absolute_workspace(workspace)),
            None if cassette.uses_workspace() => {
                return Err(ReplayError::WorkspaceRequired {
                    origin: cassette.origin.clone(),
                });
            }
            None => cassette,
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, options.port))
            .await
            .map_err(|source| ReplayError::Bind {
                port: options.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ReplayError::Bind {
            port: options.port,
            source,
        })?;
        let shared = Arc::new(server::Shared::new(cassette));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(server::accept_loop(listener, shared.clone(), shutdown_rx));
        Ok(ReplayServer {
            addr,
            shared,
            shutdown,
            task,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the value for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the server has done so far.
    pub fn report(&self) -> ReplayReport {
        self.shared.report()
    }

    /// Stops accepting, closes every connection (stalled ones included) and returns the
    /// final report.
    pub async fn shutdown(self) -> ReplayReport {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        self.shared.report()
    }
}

/// What a replay server did: every request and how it was answered, the expectations that
/// failed, and the turns never (fully) used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The cassette's path, or `(inline JSON)`.
    pub cassette: String,
    pub name: Option<String>,
    pub turns_total: usize,
    /// How many turns can still answer a request.
    pub turns_left: usize,
    pub remaining: Vec<RemainingTurn>,
    pub requests: Vec<ServedRequest>,
    pub unmet_expectations: Vec<UnmetExpectation>,
}

impl ReplayReport {
    /// The requests answered from a turn of the cassette (including its faults).
    pub fn turn_requests(&self) -> impl Iterator<Item = &ServedRequest> {
        self.requests.iter().filter(|r| r.outcome.from_turn())
    }

    /// One line per way the run strayed from the cassette: unmet expectations, requests
    /// no turn could answer, and unreadable requests. Probes of other paths (the CLI's
    /// `HEAD /api/hello`) are not problems.
    /// One line per distinct problem: the CLI retries a rejected request several times,
    /// and each retry meets the same problem, so repeats are folded into the first line
    /// (`requests 3-8 (6 times)`).
    pub fn problems(&self) -> Vec<String> {
        let mut folded: Vec<(Vec<u64>, String, String)> = Vec::new();
        for r in self.requests.iter().filter(|r| {
            matches!(
                r.outcome,
                RequestOutcome::ExpectationUnmet
                    | RequestOutcome::NoMatchingTurn
                    | RequestOutcome::Exhausted
                    | RequestOutcome::BadRequest
            )
        }) {
            let what = format!("{} {}", r.method, r.target);
            // An exhausted cassette's message names the request; folded, it names none.
            let detail = r.detail.clone().unwrap_or_default().replace(
                &format!("request {} has no turn left", r.request),
                "no turn left",
            );
            match folded
                .iter_mut()
                .find(|(_, w, d)| *w == what && *d == detail)
            {
                Some((numbers, _, _)) => numbers.push(r.request as u64),
                None => folded.push((vec![r.request as u64], what, detail)),
            }
        }
        folded
            .into_iter()
            .map(|(numbers, what, detail)| match numbers.as_slice() {
                [one] => format!("request {one} ({what}): {detail}"),
                [first, .., last] => format!(
                    "requests {first}-{last} ({what}, {} times): {detail}",
                    numbers.len()
                ),
                [] => format!("request ({what}): {detail}"),
            })
            .collect()
    }
}

/// A turn that can still answer requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemainingTurn {
    /// 1-based position in the cassette.
    pub turn: usize,
    pub name: Option<String>,
    pub uses_left: u32,
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedRequest {
    /// 1-based order of arrival.
    pub request: usize,
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// The 1-based turn that answered (or whose expectation failed).
    pub turn: Option<usize>,
    pub status: u16,
    /// Whether the request asked for a stream (absent when the body was not read).
    pub stream: Option<bool>,
    pub outcome: RequestOutcome,
    pub detail: Option<String>,
}

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestOutcome {
    /// The turn's message, complete.
    Answered,
    /// The turn's HTTP error.
    ErrorFault,
    /// The turn's stream, stopped and left silent.
    Stalled,
    /// The turn's stream, cut by a connection reset.
    Dropped,
    /// The turn's stream, ended by an `error` event.
    StreamError,
    /// 400: the turn's `expect` did not hold.
    ExpectationUnmet,
    /// 400: turns are left, but none whose `when` matches.
    NoMatchingTurn,
    /// 400: every turn is used up.
    Exhausted,
    /// 400: the body is not a JSON object.
    BadRequest,
    /// 404: not a Messages API path.
    NotFound,
    /// 405: not POST.
    MethodNotAllowed,
}

impl RequestOutcome {
    /// Whether a cassette turn produced this answer, as scripted.
    pub fn from_turn(self) -> bool {
        matches!(
            self,
            RequestOutcome::Answered
                | RequestOutcome::ErrorFault
                | RequestOutcome::Stalled
                | RequestOutcome::Dropped
                | RequestOutcome::StreamError
        )
    }
}

/// A request that took a turn but did not satisfy the turn's `expect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmetExpectation {
    pub request: usize,
    pub turn: usize,
    pub name: Option<String>,
    /// One sentence per condition that failed.
    pub unmet: Vec<String>,
}
