//! The replay server proper: accepts connections on 127.0.0.1, picks the cassette turn for
//! each Messages request, and plays it onto the wire, faults included.
//!
//! Deciding and playing are separate steps. [`Shared::plan`] takes the state lock, chooses
//! the turn, records the request in the report and returns a [`Reply`], a complete
//! description of the bytes and pauses to send; [`send`] then plays it without holding any
//! lock, so a stalled or slow answer on one connection never blocks another. Every wait
//! (delay, stall) also ends when the client goes away or the server shuts down.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::cassette::{Cassette, ErrorSpec, Turn, error_type_for_status, status_for_error_type};
use super::http::{self, LAST_CHUNK, ReadError, Request};
use super::render::{self, RenderContext, error_body, sse_event};
use super::{RemainingTurn, ReplayReport, RequestOutcome, ServedRequest, UnmetExpectation};

/// The state shared by every connection of one server.
pub(crate) struct Shared {
    cassette: Cassette,
    state: Mutex<State>,
}

struct State {
    /// How many more requests each turn may answer.
    uses_left: Vec<u32>,
    requests: Vec<ServedRequest>,
    unmet: Vec<UnmetExpectation>,
}

/// Everything needed to answer one request.
struct Reply {
    delay: Duration,
    status: u16,
    headers: Vec<(String, String)>,
    body: Body,
    ending: Ending,
}

enum Body {
    Full(Vec<u8>),
    /// SSE events, each sent as one chunk, `interval` apart.
    Events {
        events: Vec<Vec<u8>>,
        interval: Duration,
        /// SSE comments before the first event: this many, this far apart.
        keepalive: Option<(u64, Duration)>,
    },
}

/// What happens after the head and the (possibly cut) body were sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The body ends normally; the connection may serve another request.
    Complete,
    /// Nothing more is sent until the client gives up.
    Stall,
    /// The connection is reset.
    Reset,
}

/// Whether the connection may carry another request.
enum Flow {
    Continue,
    Close,
}

impl Shared {
    pub fn new(cassette: Cassette) -> Shared {
        let uses_left = cassette.turns.iter().map(|t| t.times).collect();
        Shared {
            cassette,
            state: Mutex::new(State {
                uses_left,
                requests: Vec::new(),
                unmet: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the counters half-updated in a way
        // that matters more than losing the report, so a poisoned lock is still used.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn report(&self) -> ReplayReport {
        let state = self.lock();
        let remaining: Vec<RemainingTurn> = self
            .cassette
            .turns
            .iter()
            .zip(&state.uses_left)
            .enumerate()
            .filter(|(_, (_, left))| **left > 0)
            .map(|(index, (turn, left))| RemainingTurn {
                turn: index + 1,
                name: turn.name.clone(),
                uses_left: *left,
            })
            .collect();
        ReplayReport {
            cassette: self.cassette.origin.clone(),
            name: self.cassette.name.clone(),
            turns_total: self.cassette.turns.len(),
            turns_left: remaining.len(),
            remaining,
            requests: state.requests.clone(),
            unmet_expectations: state.unmet.clone(),
        }
    }

    /// Decides the answer to `request` and records it.
    fn plan(&self, request: &Request) -> Reply {
        let request_id = format!("req_replay_{}", uuid::Uuid::new_v4().simple());
        let path = request.path();
        let is_messages = path == "/v1/messages" || path.ends_with("/v1/messages");
        if !is_messages {
            let message = format!(
                "Not found: {} {path} (this replay server answers POST …/v1/messages)",
                request.method
            );
            self.record(
                request,
                None,
                404,
                None,
                RequestOutcome::NotFound,
                Some(&message),
            );
            return error_reply(404, "not_found_error", &message, &request_id, &[]);
        }
        if request.method != "POST" {
            let message = format!("Method not allowed: {} {path}", request.method);
            self.record(
                request,
                None,
                405,
                None,
                RequestOutcome::MethodNotAllowed,
                Some(&message),
            );
            let allow = [("allow".to_string(), "POST".to_string())];
            return error_reply(405, "invalid_request_error", &message, &request_id, &allow);
        }
        let body: Value = match serde_json::from_slice(&request.body) {
            Ok(body @ Value::Object(_)) => body,
            Ok(_) => {
                return self.bad_request(request, "request body is not a JSON object", &request_id);
            }
            Err(e) => {
                let message = format!("request body is not valid JSON: {e}");
                return self.bad_request(request, &message, &request_id);
            }
        };
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        self.plan_turn(request, &body, stream, &request_id)
    }

    fn bad_request(&self, request: &Request, message: &str, request_id: &str) -> Reply {
        self.record(
            request,
            None,
            400,
            None,
            RequestOutcome::BadRequest,
            Some(message),
        );
        error_reply(400, "invalid_request_error", message, request_id, &[])
    }

    /// Chooses the first turn with uses left whose `when` matches, checks its `expect`, and
    /// turns it into a reply.
    fn plan_turn(&self, request: &Request, body: &Value, stream: bool, request_id: &str) -> Reply {
        let mut state = self.lock();
        let turns = &self.cassette.turns;
        let chosen = (0..turns.len()).find(|&i| {
            state.uses_left[i] > 0
                && turns[i]
                    .when
                    .as_ref()
                    .is_none_or(|when| when.unmet(body).is_empty())
        });
        let Some(index) = chosen else {
            let (outcome, message) = self.no_turn_left(&state);
            state.record(request, None, 400, Some(stream), outcome, Some(&message));
            return error_reply(400, "invalid_request_error", &message, request_id, &[]);
        };
        let turn = &turns[index];
        let unmet = turn
            .expect
            .as_ref()
            .map(|expect| expect.unmet(body))
            .unwrap_or_default();
        if !unmet.is_empty() {
            // The turn is not consumed: the CLI re-sends a rejected request, and each
            // re-send should fail the same way rather than take the next turn.
            let message = format!(
                "replay cassette {}: {} expectation not met: {}",
                self.cassette_label(),
                turn.label(index),
                unmet.join("; ")
            );
            let request_number = state.requests.len() + 1;
            state.unmet.push(UnmetExpectation {
                request: request_number,
                turn: index + 1,
                name: turn.name.clone(),
                unmet,
            });
            state.record(
                request,
                Some(index),
                400,
                Some(stream),
                RequestOutcome::ExpectationUnmet,
                Some(&message),
            );
            return error_reply(400, "invalid_request_error", &message, request_id, &[]);
        }
        let use_number = turn.times - state.uses_left[index] + 1;
        state.uses_left[index] -= 1;

        let request_model = body.get("model").and_then(Value::as_str);
        let (reply, outcome, detail) =
            self.turn_reply(turn, index, use_number, stream, request_model, request_id);
        state.record(
            request,
            Some(index),
            reply.status,
            Some(stream),
            outcome,
            detail.as_deref(),
        );
        reply
    }

    /// Why no turn answers the next request: every turn is used up, or those left want
    /// other requests (each named with what it wants).
    fn no_turn_left(&self, state: &State) -> (RequestOutcome, String) {
        let turns = &self.cassette.turns;
        let request_number = state.requests.len() + 1;
        let waiting: Vec<String> = (0..turns.len())
            .filter(|&i| state.uses_left[i] > 0)
            .map(|i| {
                let when = turns[i].when.as_ref().map(|w| w.describe());
                format!(
                    "{} wants {}",
                    turns[i].label(i),
                    when.unwrap_or_else(|| "any request".into())
                )
            })
            .collect();
        if waiting.is_empty() {
            (
                RequestOutcome::Exhausted,
                format!(
                    "replay cassette {} exhausted after {} turns: request {request_number} has no turn left to answer it",
                    self.cassette_label(),
                    turns.len()
                ),
            )
        } else {
            (
                RequestOutcome::NoMatchingTurn,
                format!(
                    "replay cassette {}: no remaining turn matches request {request_number}; {}",
                    self.cassette_label(),
                    waiting.join("; ")
                ),
            )
        }
    }

    fn turn_reply(
        &self,
        turn: &Turn,
        index: usize,
        use_number: u32,
        stream: bool,
        request_model: Option<&str>,
        request_id: &str,
    ) -> TurnReply {
        let delay = Duration::from_millis(turn.delay_ms);
        let with_delay = |mut reply: Reply| {
            reply.delay = delay;
            reply
        };
        let response = match (&turn.response, &turn.error) {
            (_, Some(error)) => {
                let detail = format!("HTTP {}", error.status);
                return (
                    with_delay(error_fault_reply(error, request_id)),
                    RequestOutcome::ErrorFault,
                    Some(detail),
                );
            }
            (Some(response), None) => response,
            // Load-time validation guarantees one of the two.
            (None, None) => {
                let message = format!("{} has neither response nor error", turn.label(index));
                return (
                    error_reply(500, "api_error", &message, request_id, &[]),
                    RequestOutcome::BadRequest,
                    Some(message),
                );
            }
        };
        let model = response
            .model
            .as_deref()
            .or(self.cassette.model.as_deref())
            .or(request_model)
            .unwrap_or("replay");
        let context = RenderContext {
            model,
            message_id: response
                .id
                .clone()
                .unwrap_or_else(|| format!("msg_replay_{}", uuid::Uuid::new_v4().simple())),
            tool_id_prefix: format!("toolu_replay_{}_{}", index + 1, use_number),
        };
        let rendered = render::render(response, &context);
        let headers = vec![("request-id".to_string(), request_id.to_string())];
        if stream {
            streamed_reply(turn, rendered, headers)
        } else {
            plain_reply(turn, rendered, headers, request_id)
        }
    }

    fn cassette_label(&self) -> String {
        match &self.cassette.name {
            Some(name) => format!("{name:?}"),
            None => self.cassette.origin.clone(),
        }
    }

    fn record(
        &self,
        request: &Request,
        turn: Option<usize>,
        status: u16,
        stream: Option<bool>,
        outcome: RequestOutcome,
        detail: Option<&str>,
    ) {
        self.lock()
            .record(request, turn, status, stream, outcome, detail);
    }
}

impl State {
    fn record(
        &mut self,
        request: &Request,
        turn: Option<usize>,
        status: u16,
        stream: Option<bool>,
        outcome: RequestOutcome,
        detail: Option<&str>,
    ) {
        let number = self.requests.len() + 1;
        self.requests.push(ServedRequest {
            request: number,
            method: request.method.clone(),
            target: request.target.clone(),
            turn: turn.map(|i| i + 1),
            status,
            stream,
            outcome,
            detail: detail.map(str::to_string),
        });
    }
}

/// An Anthropic-shaped JSON error answer.
fn error_reply(
    status: u16,
    error_type: &str,
    message: &str,
    request_id: &str,
    extra_headers: &[(String, String)],
) -> Reply {
    let body = error_body(error_type, message, request_id)
        .to_string()
        .into_bytes();
    let mut headers = vec![
        ("request-id".to_string(), request_id.to_string()),
        ("content-type".to_string(), "application/json".to_string()),
        ("content-length".to_string(), body.len().to_string()),
        (
            "x-should-retry".to_string(),
            (status == 429 || status >= 500).to_string(),
        ),
    ];
    headers.extend_from_slice(extra_headers);
    Reply {
        delay: Duration::ZERO,
        status,
        headers,
        body: Body::Full(body),
        ending: Ending::Complete,
    }
}

/// What a turn answers: the reply, how the request ended, and a detail for the log.
type TurnReply = (Reply, RequestOutcome, Option<String>);

/// The reply to a plain (non-streaming) request of `turn`: the whole message as JSON, or
/// the status of its `stream_error` (a plain answer has no place for an error event).
fn plain_reply(
    turn: &Turn,
    rendered: render::Rendered,
    mut headers: Vec<(String, String)>,
    request_id: &str,
) -> TurnReply {
    let delay = Duration::from_millis(turn.delay_ms);
    if let Some(stream_error) = &turn.stream_error {
        let status = stream_error
            .status
            .unwrap_or_else(|| status_for_error_type(&stream_error.error_type));
        let message = stream_error
            .message
            .clone()
            .unwrap_or_else(|| default_error_message(&stream_error.error_type));
        let mut reply = error_reply(status, &stream_error.error_type, &message, request_id, &[]);
        reply.delay = delay;
        return (
            reply,
            RequestOutcome::ErrorFault,
            Some(format!("HTTP {status} (stream_error on a plain request)")),
        );
    }
    let body = rendered.message.to_string().into_bytes();
    headers.push(("content-type".into(), "application/json".into()));
    headers.push(("content-length".into(), body.len().to_string()));
    let (ending, outcome, detail) = if turn.stall_after_events.is_some() {
        (
            Ending::Stall,
            RequestOutcome::Stalled,
            Some("stalled after the headers"),
        )
    } else if turn.drop_after_events.is_some() {
        (
            Ending::Reset,
            RequestOutcome::Dropped,
            Some("reset after the headers"),
        )
    } else {
        (Ending::Complete, RequestOutcome::Answered, None)
    };
    let reply = Reply {
        delay,
        status: 200,
        headers,
        body: Body::Full(body),
        ending,
    };
    (reply, outcome, detail.map(str::to_owned))
}

/// The reply to a streaming request of `turn`: its events, cut where the turn stalls,
/// drops or sends its `stream_error` event.
fn streamed_reply(
    turn: &Turn,
    rendered: render::Rendered,
    mut headers: Vec<(String, String)>,
) -> TurnReply {
    let mut events: Vec<Vec<u8>> = rendered
        .events
        .iter()
        .map(|(name, data)| sse_event(name, data))
        .collect();
    let total = events.len();
    let (ending, outcome, detail) = if let Some(n) = turn.stall_after_events {
        events.truncate(n);
        (
            Ending::Stall,
            RequestOutcome::Stalled,
            Some(format!("stalled after {} of {total} events", events.len())),
        )
    } else if let Some(n) = turn.drop_after_events {
        events.truncate(n);
        (
            Ending::Reset,
            RequestOutcome::Dropped,
            Some(format!("reset after {} of {total} events", events.len())),
        )
    } else if let Some(stream_error) = &turn.stream_error {
        events.truncate(stream_error.after_events);
        let message = stream_error
            .message
            .clone()
            .unwrap_or_else(|| default_error_message(&stream_error.error_type));
        let data = serde_json::json!({
            "type": "error",
            "error": {"type": stream_error.error_type, "message": message},
        });
        let sent = events.len();
        events.push(sse_event("error", &data));
        (
            Ending::Complete,
            RequestOutcome::StreamError,
            Some(format!(
                "{} event after {sent} of {total} events",
                stream_error.error_type
            )),
        )
    } else {
        (Ending::Complete, RequestOutcome::Answered, None)
    };
    headers.push((
        "content-type".into(),
        "text/event-stream; charset=utf-8".into(),
    ));
    headers.push(("cache-control".into(), "no-cache".into()));
    headers.push(("transfer-encoding".into(), "chunked".into()));
    let reply = Reply {
        delay: Duration::from_millis(turn.delay_ms),
        status: 200,
        headers,
        body: Body::Events {
            events,
            interval: Duration::from_millis(turn.event_delay_ms),
            keepalive: turn.keepalive.map(|k| {
                let every = k.every_ms.max(1);
                (k.for_ms / every, Duration::from_millis(every))
            }),
        },
        ending,
    };
    (reply, outcome, detail)
}

/// The answer of a turn whose `error` fault is set: its status, its headers (which win
/// over ours), and its body or the Anthropic error shape.
fn error_fault_reply(error: &ErrorSpec, request_id: &str) -> Reply {
    let error_type = error
        .error_type
        .clone()
        .unwrap_or_else(|| error_type_for_status(error.status).to_string());
    let message = error
        .message
        .clone()
        .unwrap_or_else(|| default_error_message(&error_type));
    let (body, content_type) = match &error.body {
        None => (
            error_body(&error_type, &message, request_id).to_string(),
            "application/json",
        ),
        Some(Value::String(raw)) => (raw.clone(), "text/plain; charset=utf-8"),
        Some(value) => (value.to_string(), "application/json"),
    };
    let body = body.into_bytes();
    let mut headers: Vec<(String, String)> = vec![
        ("request-id".into(), request_id.into()),
        ("content-type".into(), content_type.into()),
        ("content-length".into(), body.len().to_string()),
    ];
    for (name, value) in &error.headers {
        if name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(name));
        headers.push((name.clone(), value.clone()));
    }
    Reply {
        delay: Duration::ZERO,
        status: error.status,
        headers,
        body: Body::Full(body),
        ending: Ending::Complete,
    }
}

fn default_error_message(error_type: &str) -> String {
    match error_type {
        "api_error" => "Internal server error (replay)",
        "overloaded_error" => "Overloaded (replay)",
        "rate_limit_error" => "Rate limited (replay)",
        "authentication_error" => "invalid x-api-key (replay)",
        "permission_error" => "Permission denied (replay)",
        "not_found_error" => "Not found (replay)",
        "billing_error" => "Your credit balance is too low (replay)",
        "timeout_error" => "Request timed out (replay)",
        "request_too_large" => "Request too large (replay)",
        _ => "Request rejected (replay)",
    }
    .to_string()
}

/// Serves connections until `shutdown` turns true or its sender is dropped.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(serve_connection(shared.clone(), stream, shutdown.clone()));
                }
                // Out of descriptors or a connection aborted before accept: the listener
                // itself is fine, so wait a moment and go on.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = shutdown_signalled(&mut shutdown) => break,
        }
    }
    connections.shutdown().await;
}

async fn shutdown_signalled(shutdown: &mut watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

async fn serve_connection(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut buffer = Vec::new();
    loop {
        let read = tokio::select! {
            read = http::read_request(&mut stream, &mut buffer) => read,
            () = shutdown_signalled(&mut shutdown) => return,
        };
        let request = match read {
            Ok(Some(request)) => request,
            Ok(None) | Err(ReadError::Broken) => return,
            Err(ReadError::Reject { status, message }) => {
                let request_id = format!("req_replay_{}", uuid::Uuid::new_v4().simple());
                let error_type = error_type_for_status(status);
                let mut reply = error_reply(status, error_type, &message, &request_id, &[]);
                reply.headers.push(("connection".into(), "close".into()));
                let _ = send(&mut stream, &mut buffer, &mut shutdown, reply, false).await;
                return;
            }
        };
        let mut reply = shared.plan(&request);
        let connection = if request.close { "close" } else { "keep-alive" };
        reply.headers.push(("connection".into(), connection.into()));
        let head_only = request.method == "HEAD";
        match send(&mut stream, &mut buffer, &mut shutdown, reply, head_only).await {
            Flow::Continue if !request.close => {}
            _ => return,
        }
    }
}

/// Plays `reply` onto `stream`.
async fn send(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
    shutdown: &mut watch::Receiver<bool>,
    reply: Reply,
    head_only: bool,
) -> Flow {
    if !reply.delay.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(reply.delay) => {}
            () = client_gone(stream, buffer) => return Flow::Close,
            () = shutdown_signalled(shutdown) => return Flow::Close,
        }
    }
    let head = http::response_head(reply.status, &reply.headers);
    if stream.write_all(&head).await.is_err() {
        return Flow::Close;
    }
    if !head_only {
        match &reply.body {
            Body::Full(bytes) => {
                if reply.ending == Ending::Complete && stream.write_all(bytes).await.is_err() {
                    return Flow::Close;
                }
            }
            Body::Events {
                events,
                interval,
                keepalive,
            } => {
                if let Some((count, every)) = keepalive {
                    for _ in 0..*count {
                        tokio::select! {
                            () = tokio::time::sleep(*every) => {}
                            () = shutdown_signalled(shutdown) => return Flow::Close,
                        }
                        if stream
                            .write_all(&http::chunk(b": keep-alive\n\n"))
                            .await
                            .is_err()
                        {
                            return Flow::Close;
                        }
                    }
                }
                for (position, event) in events.iter().enumerate() {
                    if position > 0 && !interval.is_zero() {
                        tokio::select! {
                            () = tokio::time::sleep(*interval) => {}
                            () = shutdown_signalled(shutdown) => return Flow::Close,
                        }
                    }
                    if stream.write_all(&http::chunk(event)).await.is_err() {
                        return Flow::Close;
                    }
                }
                if reply.ending == Ending::Complete && stream.write_all(LAST_CHUNK).await.is_err() {
                    return Flow::Close;
                }
            }
        }
    }
    match reply.ending {
        Ending::Complete => Flow::Continue,
        Ending::Stall => {
            tokio::select! {
                () = client_gone(stream, buffer) => {}
                () = shutdown_signalled(shutdown) => {}
            }
            Flow::Close
        }
        Ending::Reset => {
            reset(stream);
            Flow::Close
        }
    }
}

/// Makes the coming close of `stream` send a TCP RST instead of a FIN, as a crashed proxy
/// or a dropped network path does.
fn reset(stream: &TcpStream) {
    // A zero linger makes close() discard unsent data and reset at once; it never blocks,
    // which is the concern behind the deprecation of this setter for non-zero values.
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// Resolves when the client closes its side or the connection fails. Bytes it sends in
/// the meantime are kept in `buffer` for the next request.
async fn client_gone(stream: &mut TcpStream, buffer: &mut Vec<u8>) {
    loop {
        match stream.read_buf(buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) if buffer.len() > http::MAX_HEAD_BYTES + http::MAX_BODY_BYTES => return,
            Ok(_) => {}
        }
    }
}
