//! The replay server over real HTTP on 127.0.0.1, seen by a plain client: the Messages API
//! shapes (SSE and JSON), paths, errors, turn selection, expectations, and every fault kind.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use coder::replay::{Cassette, ReplayError, ReplayServer, RequestOutcome, ServeOptions};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Upper bound for anything a test waits on that should come at once.
const PROMPT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client, so the tests see exactly the bytes the server sends.

struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

#[derive(Debug)]
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How reading a body ended.
#[derive(Debug, PartialEq, Eq)]
enum BodyEnd {
    Complete,
    /// The connection closed or was reset before the body ended.
    Cut,
    /// Nothing arrived for the given wait, and the connection stayed open.
    Silent,
}

struct Response {
    head: Head,
    body: Vec<u8>,
    end: BodyEnd,
}

impl Response {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The SSE events of the body: (event name, data).
    fn events(&self) -> Vec<(String, Value)> {
        let text = String::from_utf8(self.body.clone()).unwrap();
        text.split("\n\n")
            .filter(|block| !block.trim().is_empty())
            .map(|block| {
                let mut name = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        name = v.to_string();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = v.to_string();
                    }
                }
                (name, serde_json::from_str(&data).unwrap())
            })
            .collect()
    }

    fn event_names(&self) -> Vec<String> {
        self.events().into_iter().map(|(name, _)| name).collect()
    }

    fn error_message(&self) -> String {
        let body = self.json();
        assert_eq!(body["type"], "error", "{body}");
        body["error"]["message"].as_str().unwrap().to_string()
    }
}

impl Connection {
    async fn open(addr: SocketAddr) -> Connection {
        Connection {
            stream: TcpStream::connect(addr).await.unwrap(),
            buffer: Vec::new(),
        }
    }

    async fn send(&mut self, method: &str, target: &str, body: Option<&Value>) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {target} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             anthropic-version: 2023-06-01\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.write_all(request.as_bytes()).await.unwrap();
    }

    /// Reads more bytes; false when the connection closed or failed.
    async fn more(&mut self) -> bool {
        matches!(self.stream.read_buf(&mut self.buffer).await, Ok(n) if n > 0)
    }

    async fn head(&mut self) -> Head {
        let end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end;
            }
            assert!(
                self.more().await,
                "connection closed before the response head"
            );
        };
        let text = String::from_utf8(self.buffer[..end].to_vec()).unwrap();
        self.buffer.drain(..end + 4);
        let mut lines = text.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .map(|line| {
                let (n, v) = line.split_once(':').unwrap();
                (n.trim().to_string(), v.trim().to_string())
            })
            .collect();
        Head { status, headers }
    }

    /// Reads the body; waits at most `patience` for each piece of it.
    async fn body(&mut self, head: &Head, patience: Duration) -> (Vec<u8>, BodyEnd) {
        let mut body = Vec::new();
        if head.header("transfer-encoding") == Some("chunked") {
            loop {
                let line_end = match self.wait_for(patience, |b| find(b, b"\r\n")).await {
                    Ok(end) => end,
                    Err(end) => return (body, end),
                };
                let size = usize::from_str_radix(
                    std::str::from_utf8(&self.buffer[..line_end]).unwrap(),
                    16,
                )
                .unwrap();
                let needed = line_end + 2 + size + 2;
                if let Err(end) = self
                    .wait_for(patience, |b| (b.len() >= needed).then_some(()))
                    .await
                {
                    return (body, end);
                }
                body.extend_from_slice(&self.buffer[line_end + 2..line_end + 2 + size]);
                self.buffer.drain(..needed);
                if size == 0 {
                    return (body, BodyEnd::Complete);
                }
            }
        }
        let length: usize = head.header("content-length").unwrap().parse().unwrap();
        match self
            .wait_for(patience, |b| (b.len() >= length).then_some(()))
            .await
        {
            Ok(()) => {
                body.extend(self.buffer.drain(..length));
                (body, BodyEnd::Complete)
            }
            Err(end) => (self.buffer.clone(), end),
        }
    }

    async fn wait_for<T>(
        &mut self,
        patience: Duration,
        ready: impl Fn(&[u8]) -> Option<T>,
    ) -> Result<T, BodyEnd> {
        loop {
            if let Some(value) = ready(&self.buffer) {
                return Ok(value);
            }
            match timeout(patience, self.more()).await {
                Ok(true) => {}
                Ok(false) => return Err(BodyEnd::Cut),
                Err(_) => return Err(BodyEnd::Silent),
            }
        }
    }

    async fn response(&mut self, patience: Duration) -> Response {
        let head = timeout(PROMPT, self.head())
            .await
            .expect("no response head");
        let (body, end) = self.body(&head, patience).await;
        Response { head, body, end }
    }

    /// Whether the server closed the connection (reading gives EOF or an error).
    async fn closed_by_server(&mut self) -> bool {
        match timeout(PROMPT, self.stream.read_buf(&mut self.buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) | Err(_) => false,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One request on a fresh connection, read to its end.
async fn call(server: &ReplayServer, method: &str, target: &str, body: Option<&Value>) -> Response {
    let mut connection = Connection::open(server.addr()).await;
    connection.send(method, target, body).await;
    connection.response(PROMPT).await
}

fn request_body(stream: bool, user_text: &str) -> Value {
    json!({
        "model": "glm-4.7",
        "max_tokens": 32000,
        "stream": stream,
        "system": [{"type": "text", "text": "You are a Claude agent"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": user_text}]},
            {"role": "system", "content": "environment details"}
        ]
    })
}

fn tool_result_body(result: &str) -> Value {
    json!({
        "model": "glm-4.7",
        "stream": true,
        "messages": [
            {"role": "user", "content": "do it"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": result}
            ]}
        ]
    })
}

async fn serve(cassette: Value) -> ReplayServer {
    let cassette = Cassette::from_json(&cassette.to_string()).unwrap();
    ReplayServer::start(cassette, ServeOptions::default())
        .await
        .unwrap()
}

fn text_turn(text: &str) -> Value {
    json!({"response": {"content": [{"type": "text", "text": text}]}})
}

/// `{"version":1,"turns":[...]}`
fn cassette(turns: Vec<Value>) -> Value {
    json!({"version": 1, "name": "test", "turns": turns})
}

// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn streams_the_api_event_sequence_and_its_content() {
    let server = serve(cassette(vec![json!({"response": {
        "content": [
            {"type": "thinking", "thinking": "Let me think."},
            {"type": "text", "text": "Running a command now, with a text long enough to need two deltas."},
            {"type": "tool_use", "name": "Bash", "input": {"command": "echo hi", "description": "say hi"}}
        ],
        "usage": {"input_tokens": 30, "output_tokens": 9}
    }})]))
    .await;
    let response = call(
        &server,
        "POST",
        "/v1/messages?beta=true",
        Some(&request_body(true, "hi")),
    )
    .await;

    assert_eq!(response.head.status, 200);
    assert_eq!(response.end, BodyEnd::Complete);
    assert_eq!(
        response.head.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    assert!(
        response
            .head
            .header("request-id")
            .unwrap()
            .starts_with("req_")
    );
    let names = response.event_names();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let events = response.events();
    let start = &events[0].1["message"];
    assert_eq!(start["model"], "glm-4.7", "echoes the requested model");
    assert_eq!(start["role"], "assistant");
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["usage"]["input_tokens"], 30);
    assert_eq!(
        events[3].1["delta"],
        json!({"type": "thinking_delta", "thinking": "Let me think."})
    );
    assert_eq!(events[4].1["delta"]["type"], "signature_delta");
    let text: String = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        text,
        "Running a command now, with a text long enough to need two deltas."
    );
    let tool_start = &events[10].1["content_block"];
    assert_eq!(tool_start["type"], "tool_use");
    assert_eq!(tool_start["name"], "Bash");
    assert!(tool_start["id"].as_str().unwrap().starts_with("toolu_"));
    let partial = events[11].1["delta"]["partial_json"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(partial).unwrap(),
        json!({"command": "echo hi", "description": "say hi"})
    );
    assert_eq!(events[13].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(events[13].1["usage"]["output_tokens"], 9);

    let report = server.shutdown().await;
    assert_eq!(report.requests.len(), 1);
    assert_eq!(report.requests[0].outcome, RequestOutcome::Answered);
    assert_eq!(report.requests[0].turn, Some(1));
    assert_eq!(report.requests[0].stream, Some(true));
    assert_eq!(report.turns_left, 0);
}

#[tokio::test]
async fn answers_a_plain_request_with_one_json_message() {
    let server = serve(cassette(vec![text_turn("plain answer")])).await;
    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(false, "hi")),
    )
    .await;
    assert_eq!(response.head.status, 200);
    assert_eq!(
        response.head.header("content-type"),
        Some("application/json")
    );
    let message = response.json();
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "plain answer"}])
    );
    assert_eq!(message["stop_reason"], "end_turn");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert!(message["usage"]["output_tokens"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn serves_under_a_path_prefix_and_with_the_beta_query() {
    let server = serve(cassette(vec![
        text_turn("one"),
        text_turn("two"),
        text_turn("three"),
    ]))
    .await;
    let body = request_body(false, "hi");
    for (target, text) in [
        ("/api/anthropic/v1/messages?beta=true", "one"),
        ("/api/anthropic/v1/messages", "two"),
        ("/v1/messages?beta=true", "three"),
    ] {
        let response = call(&server, "POST", target, Some(&body)).await;
        assert_eq!(response.head.status, 200, "{target}");
        assert_eq!(response.json()["content"][0]["text"], text, "{target}");
    }
    let report = server.report();
    let targets: Vec<&str> = report.requests.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(
        targets,
        [
            "/api/anthropic/v1/messages?beta=true",
            "/api/anthropic/v1/messages",
            "/v1/messages?beta=true"
        ]
    );
}

#[tokio::test]
async fn keeps_the_connection_alive_between_requests() {
    let server = serve(cassette(vec![text_turn("first"), text_turn("second")])).await;
    let mut connection = Connection::open(server.addr()).await;
    for (stream, text) in [(true, "first"), (false, "second")] {
        connection
            .send("POST", "/v1/messages", Some(&request_body(stream, "hi")))
            .await;
        let response = connection.response(PROMPT).await;
        assert_eq!(response.end, BodyEnd::Complete);
        let body = String::from_utf8_lossy(&response.body).into_owned();
        assert!(body.contains(text), "{body}");
    }
}

#[tokio::test]
async fn unknown_paths_and_methods_get_api_shaped_errors() {
    let server = serve(cassette(vec![text_turn("unused")])).await;

    let response = call(&server, "GET", "/v1/models", None).await;
    assert_eq!(response.head.status, 404);
    assert_eq!(response.json()["error"]["type"], "not_found_error");
    assert!(response.error_message().contains("GET /v1/models"));

    let response = call(
        &server,
        "POST",
        "/v1/messages/count_tokens",
        Some(&json!({})),
    )
    .await;
    assert_eq!(response.head.status, 404);

    let response = call(&server, "GET", "/v1/messages", None).await;
    assert_eq!(response.head.status, 405);
    assert_eq!(response.head.header("allow"), Some("POST"));
    assert_eq!(response.json()["error"]["type"], "invalid_request_error");

    let mut connection = Connection::open(server.addr()).await;
    connection.send("HEAD", "/api/hello", None).await;
    let head = timeout(PROMPT, connection.head()).await.unwrap();
    assert_eq!(head.status, 404);

    let mut connection = Connection::open(server.addr()).await;
    connection
        .stream
        .write_all(b"POST /v1/messages HTTP/1.1\r\ncontent-length: 9\r\n\r\nnot json!")
        .await
        .unwrap();
    let response = connection.response(PROMPT).await;
    assert_eq!(response.head.status, 400);
    assert!(response.error_message().contains("not valid JSON"));

    let report = server.shutdown().await;
    assert_eq!(
        report.turns_left, 1,
        "no turn was used by the stray requests"
    );
    let outcomes: Vec<RequestOutcome> = report.requests.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            RequestOutcome::NotFound,
            RequestOutcome::NotFound,
            RequestOutcome::MethodNotAllowed,
            RequestOutcome::NotFound,
            RequestOutcome::BadRequest,
        ]
    );
    assert_eq!(
        report.problems().len(),
        1,
        "only the unreadable body is a problem"
    );
}

#[tokio::test]
async fn an_unmet_expectation_is_a_400_naming_the_turn_and_stays_unconsumed() {
    let server = serve(cassette(vec![
        text_turn("first"),
        json!({
            "name": "after the tool",
            "expect": {"last_tool_result_contains": "hello"},
            "response": {"content": [{"type": "text", "text": "saw hello"}]}
        }),
    ]))
    .await;
    call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(false, "go")),
    )
    .await;

    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&tool_result_body("goodbye")),
    )
    .await;
    assert_eq!(response.head.status, 400);
    assert_eq!(response.json()["error"]["type"], "invalid_request_error");
    let message = response.error_message();
    assert!(message.contains("turn 2 (\"after the tool\")"), "{message}");
    assert!(
        message.contains("last_tool_result_contains \"hello\""),
        "{message}"
    );
    assert!(
        message.contains("\"goodbye\""),
        "quotes what was sent: {message}"
    );

    let report = server.report();
    assert_eq!(report.unmet_expectations.len(), 1);
    assert_eq!(report.unmet_expectations[0].turn, 2);
    assert_eq!(report.unmet_expectations[0].request, 2);
    assert_eq!(report.requests[1].outcome, RequestOutcome::ExpectationUnmet);
    assert_eq!(report.problems().len(), 1);
    assert_eq!(report.turns_left, 1);

    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&tool_result_body("hello there")),
    )
    .await;
    assert_eq!(
        response.head.status, 200,
        "the turn still answers a good request"
    );
    assert!(String::from_utf8_lossy(&response.body).contains("saw hello"));
}

#[tokio::test]
async fn an_exhausted_cassette_says_so() {
    let server = serve(cassette(vec![text_turn("only")])).await;
    call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(true, "hi")),
    )
    .await;
    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(true, "again")),
    )
    .await;
    assert_eq!(response.head.status, 400);
    let message = response.error_message();
    assert!(message.contains("exhausted after 1 turns"), "{message}");
    let report = server.shutdown().await;
    assert_eq!(report.requests[1].outcome, RequestOutcome::Exhausted);
    assert_eq!(report.turns_left, 0);
}

#[tokio::test]
async fn when_matchers_let_one_cassette_serve_separate_runs() {
    let turns = vec![
        json!({
            "name": "first run",
            "when": {"last_user_text_contains": "first task"},
            "response": {"content": [{"type": "text", "text": "The word is PAPAYA."}]}
        }),
        json!({
            "name": "resumed run",
            "when": {"last_user_text_contains": "second task"},
            "expect": {"messages_contain": "PAPAYA"},
            "response": {"content": [{"type": "text", "text": "You said PAPAYA."}]}
        }),
    ];
    // The later run, on a fresh server: the first turn is skipped because its `when` fails.
    let server = serve(cassette(turns.clone())).await;
    let mut resumed = request_body(false, "second task");
    resumed["messages"] = json!([
        {"role": "user", "content": "first task"},
        {"role": "assistant", "content": [{"type": "text", "text": "The word is PAPAYA."}]},
        {"role": "user", "content": [{"type": "text", "text": "second task"}]}
    ]);
    let response = call(&server, "POST", "/v1/messages", Some(&resumed)).await;
    assert_eq!(response.json()["content"][0]["text"], "You said PAPAYA.");
    let report = server.shutdown().await;
    assert_eq!(report.requests[0].turn, Some(2));
    assert_eq!(report.remaining.len(), 1);
    assert_eq!(report.remaining[0].name.as_deref(), Some("first run"));

    // A request no remaining turn wants is told which turns are waiting for what.
    let server = serve(cassette(turns)).await;
    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(false, "third")),
    )
    .await;
    assert_eq!(response.head.status, 400);
    let message = response.error_message();
    assert!(
        message.contains("no remaining turn matches request 1"),
        "{message}"
    );
    assert!(
        message.contains("turn 2 (\"resumed run\") wants last_user_text_contains \"second task\""),
        "{message}"
    );
    assert_eq!(
        server.report().requests[0].outcome,
        RequestOutcome::NoMatchingTurn
    );
}

#[tokio::test]
async fn an_error_turn_answers_times_requests_with_its_status_and_headers() {
    let server = serve(cassette(vec![
        json!({"error": {"status": 429, "headers": {"retry-after": "1"}}, "times": 2}),
        json!({"error": {"status": 401}}),
        json!({"error": {"status": 500, "message": "boom"}}),
        json!({"error": {"status": 503, "body": "upstream connect error"}}),
        text_turn("recovered"),
    ]))
    .await;
    let body = request_body(true, "hi");
    for _ in 0..2 {
        let response = call(&server, "POST", "/v1/messages?beta=true", Some(&body)).await;
        assert_eq!(response.head.status, 429);
        assert_eq!(response.head.header("retry-after"), Some("1"));
        assert_eq!(response.json()["error"]["type"], "rate_limit_error");
        assert!(response.head.header("request-id").is_some());
    }
    let response = call(&server, "POST", "/v1/messages", Some(&body)).await;
    assert_eq!(response.head.status, 401);
    assert_eq!(response.json()["error"]["type"], "authentication_error");
    let response = call(&server, "POST", "/v1/messages", Some(&body)).await;
    assert_eq!(response.head.status, 500);
    assert_eq!(
        response.json()["error"],
        json!({"type": "api_error", "message": "boom"})
    );
    let response = call(&server, "POST", "/v1/messages", Some(&body)).await;
    assert_eq!(response.head.status, 503);
    assert_eq!(response.body, b"upstream connect error");
    let response = call(&server, "POST", "/v1/messages", Some(&body)).await;
    assert_eq!(response.head.status, 200);

    let report = server.shutdown().await;
    let turns: Vec<Option<usize>> = report.requests.iter().map(|r| r.turn).collect();
    assert_eq!(
        turns,
        [Some(1), Some(1), Some(2), Some(3), Some(4), Some(5)]
    );
    assert_eq!(report.requests[0].outcome, RequestOutcome::ErrorFault);
    assert!(report.problems().is_empty(), "{:?}", report.problems());
}

#[tokio::test]
async fn a_delayed_turn_holds_back_its_headers() {
    let server = serve(cassette(vec![
        json!({"delay_ms": 400, "response": {"content": [{"type": "text", "text": "late"}]}}),
        json!({"delay_ms": 600_000, "response": {"content": [{"type": "text", "text": "never"}]}}),
    ]))
    .await;
    let started = Instant::now();
    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(true, "hi")),
    )
    .await;
    assert_eq!(response.head.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(400));

    // A ten-minute delay: nothing arrives, and shutting down ends the wait at once.
    let mut connection = Connection::open(server.addr()).await;
    connection
        .send("POST", "/v1/messages", Some(&request_body(true, "hi")))
        .await;
    assert!(
        timeout(Duration::from_millis(300), connection.head())
            .await
            .is_err(),
        "headers came before the delay"
    );
    let started = Instant::now();
    let report = server.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(connection.closed_by_server().await);
    assert_eq!(report.requests.len(), 2);
}

#[tokio::test]
async fn a_stall_sends_n_events_then_keeps_the_connection_silent() {
    let server = serve(cassette(vec![json!({
        "stall_after_events": 4,
        "times": 2,
        "response": {"content": [{"type": "text", "text": "partial answer that never ends"}]}
    })]))
    .await;
    let mut connection = Connection::open(server.addr()).await;
    connection
        .send("POST", "/v1/messages", Some(&request_body(true, "hi")))
        .await;
    let response = connection.response(Duration::from_millis(500)).await;
    assert_eq!(response.head.status, 200);
    assert_eq!(response.end, BodyEnd::Silent);
    assert_eq!(
        response.event_names(),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta"
        ]
    );

    // A plain request to a stalling turn gets its headers, then nothing.
    let mut plain = Connection::open(server.addr()).await;
    plain
        .send("POST", "/v1/messages", Some(&request_body(false, "hi")))
        .await;
    let response = plain.response(Duration::from_millis(300)).await;
    assert_eq!(response.head.status, 200);
    assert_eq!(response.end, BodyEnd::Silent);
    assert!(response.body.is_empty());

    let report = server.shutdown().await;
    assert!(
        connection.closed_by_server().await,
        "shutdown ends the stall"
    );
    assert_eq!(report.requests[0].outcome, RequestOutcome::Stalled);
    assert!(
        report.requests[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("after 4 of 7 events")
    );
}

#[tokio::test]
async fn a_drop_resets_the_connection_after_n_events() {
    let server = serve(cassette(vec![
        json!({
            "drop_after_events": 4,
            "response": {"content": [{"type": "text", "text": "cut short"}]}
        }),
        text_turn("the retry works"),
    ]))
    .await;
    let mut connection = Connection::open(server.addr()).await;
    connection
        .send("POST", "/v1/messages", Some(&request_body(true, "hi")))
        .await;
    let response = connection.response(PROMPT).await;
    assert_eq!(response.end, BodyEnd::Cut);
    assert_eq!(response.event_names().len(), 4);

    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(false, "hi")),
    )
    .await;
    assert_eq!(response.json()["content"][0]["text"], "the retry works");
    let report = server.shutdown().await;
    assert_eq!(report.requests[0].outcome, RequestOutcome::Dropped);
}

#[tokio::test]
async fn a_stream_error_sends_an_error_event_and_ends_the_stream() {
    let server = serve(cassette(vec![json!({
        "stream_error": {"after_events": 1, "type": "overloaded_error"},
        "times": 2,
        "response": {"content": [{"type": "text", "text": "unused"}]}
    })]))
    .await;
    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(true, "hi")),
    )
    .await;
    assert_eq!(response.end, BodyEnd::Complete);
    let events = response.events();
    assert_eq!(response.event_names(), ["message_start", "error"]);
    assert_eq!(events[1].1["error"]["type"], "overloaded_error");

    // The plain fallback gets the error as an HTTP status.
    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(false, "hi")),
    )
    .await;
    assert_eq!(response.head.status, 529);
    assert_eq!(response.json()["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn tool_inputs_get_the_workspace_path() {
    let workspace = tempfile::tempdir().unwrap();
    let text = json!({"version": 1, "turns": [{"response": {"content": [
        {"type": "tool_use", "name": "Write", "input": {"file_path": "{{workspace}}/a.txt", "content": "x"}}
    ]}}]})
    .to_string();

    let missing =
        ReplayServer::start(Cassette::from_json(&text).unwrap(), ServeOptions::default()).await;
    assert!(matches!(
        missing,
        Err(ReplayError::WorkspaceRequired { .. })
    ));

    let server = ReplayServer::start(
        Cassette::from_json(&text).unwrap(),
        ServeOptions {
            port: 0,
            workspace: Some(workspace.path().to_path_buf()),
        },
    )
    .await
    .unwrap();
    assert!(server.base_url().starts_with("http://127.0.0.1:"));
    let response = call(
        &server,
        "POST",
        "/v1/messages",
        Some(&request_body(false, "hi")),
    )
    .await;
    let expected = std::fs::canonicalize(workspace.path())
        .unwrap()
        .join("a.txt");
    assert_eq!(
        response.json()["content"][0]["input"]["file_path"],
        expected.display().to_string()
    );
}

#[test]
fn a_malformed_cassette_file_is_named_with_the_place_of_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.json");
    std::fs::write(
        &path,
        "{\n  \"version\": 1,\n  \"turns\": [\n    {\"response\": {\"content\": [}}\n  ]\n}\n",
    )
    .unwrap();
    let message = Cassette::load(&path).unwrap_err().to_string();
    assert!(message.contains("broken.json"), "{message}");
    assert!(message.contains("line 4"), "{message}");

    let message = Cassette::load(Path::new("/nonexistent/cassette.json"))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("cannot read cassette /nonexistent/cassette.json"),
        "{message}"
    );
}

#[test]
fn every_shipped_cassette_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cassettes");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            Cassette::load(&path).unwrap_or_else(|e| panic!("{e}"));
            count += 1;
        }
    }
    assert!(count >= 2, "fixtures/cassettes holds the shipped cassettes");
}
