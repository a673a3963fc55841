//! The stdio transport of `coder mcp`: one JSON-RPC message a line on stdin and stdout,
//! like rmcp's own, except for input that is not a message. rmcp drops a line that is not
//! JSON without a word, so a host (or a person trying the server by hand) that sends one
//! waits for an answer that never comes. Here it gets what JSON-RPC 2.0 §5.1 prescribes:
//! a parse error (-32700) for a line that is not JSON (or longer than [`MAX_LINE`]), an
//! invalid request (-32600) for JSON that is no message (with its `id` when it has one,
//! else `null`), and invalid params (-32602) for a `tools/call` whose params are not a
//! tool name and an arguments object (rmcp answered "Method not found"). Notifications
//! are never answered (§4.1): an unknown one (an editor's LSP chatter) is skipped, as
//! rmcp skips it. Blank lines are skipped.
//!
//! The first failed write to stdout is kept ([`WriteFailure`]), so the server can say what
//! went wrong in its own words instead of rmcp's ("Send message error Transport [...]").
//!
//! An echoing peer cannot start an error storm: the answers are well-formed responses,
//! which the server reads as responses to nothing and ignores.

use std::io;
use std::sync::Arc;

use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The longest line read (rmcp's own cap): a longer one is dropped and answered with a
/// parse error, so a peer that never sends a newline cannot exhaust memory.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// JSON-RPC 2.0's code for input that is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0's code for JSON that is not a valid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0's code for a request whose params do not fit its method.
pub const INVALID_PARAMS: i64 = -32602;

/// The first error writing to the client, shared by the transport and the server.
#[derive(Clone, Default)]
pub struct WriteFailure(Arc<std::sync::Mutex<Option<io::Error>>>);

impl WriteFailure {
    fn record(&self, e: &io::Error) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(io::Error::new(e.kind(), e.to_string()));
        }
    }

    /// The first failed write, if one failed.
    pub fn take(&self) -> Option<io::Error> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Newline-delimited JSON-RPC over a reader and a writer (stdin and stdout).
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Dropping the rest of a line longer than [`MAX_LINE`], until its newline.
    discarding: bool,
    write: Arc<Mutex<Option<W>>>,
    failure: WriteFailure,
    /// Error answers being written; awaited at end of input, so none is lost.
    answers: tokio::task::JoinSet<()>,
}

/// The outcome of reading one line.
enum LineRead {
    Line,
    Oversized,
    Eof,
}

/// What one input line is to the server.
enum Input {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Skip,
    /// Not a message: the error response to send back.
    Refuse(Value),
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// A transport whose first failed write is kept in `failure`.
    pub fn new(read: R, write: W, failure: WriteFailure) -> Self {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            write: Arc::new(Mutex::new(Some(write))),
            failure,
            answers: tokio::task::JoinSet::new(),
        }
    }

    /// Reads one `\n`-terminated line into `self.line`, never holding more than about
    /// [`MAX_LINE`]. Cancel-safe: `fill_buf` consumes nothing when dropped, and what it
    /// returned is copied and consumed with no await between, so a cancelled read resumes.
    async fn read_line(&mut self) -> io::Result<LineRead> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(LineRead::Eof);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let end = newline.unwrap_or(available.len());
            if !self.discarding {
                self.line.extend_from_slice(&available[..end]);
            }
            let used = newline.map_or(end, |i| i + 1);
            self.read.consume(used);
            if self.line.len() > MAX_LINE {
                self.line = Vec::new();
                self.discarding = true;
            }
            if newline.is_some() {
                let oversized = std::mem::take(&mut self.discarding);
                return Ok(if oversized {
                    LineRead::Oversized
                } else {
                    LineRead::Line
                });
            }
        }
    }

    /// Sends `reply` without making the caller wait: `receive` may be cancelled, a
    /// spawned write is not, and the writer's lock keeps lines whole.
    fn answer(&mut self, reply: Value) {
        while self.answers.try_join_next().is_some() {}
        let write = self.write.clone();
        let failure = self.failure.clone();
        self.answers.spawn(async move {
            if let Err(e) = write_line(&write, &reply).await {
                failure.record(&e);
            }
        });
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        let write = self.write.clone();
        let failure = self.failure.clone();
        async move {
            let written = write_line(&write, &item).await;
            if let Err(e) = &written {
                failure.record(e);
            }
            written
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let input = match self.read_line().await {
                Ok(LineRead::Line) => {
                    let input = classify(&self.line);
                    self.line.clear();
                    input
                }
                Ok(LineRead::Oversized) => Input::Refuse(error_reply(
                    Value::Null,
                    PARSE_ERROR,
                    format!("Parse error: a message longer than {MAX_LINE} bytes was dropped"),
                )),
                Ok(LineRead::Eof) | Err(_) => {
                    while self.answers.join_next().await.is_some() {}
                    return None;
                }
            };
            match input {
                Input::Message(message) => return Some(*message),
                Input::Skip => {}
                Input::Refuse(reply) => self.answer(reply),
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

/// One line of input (without its newline) as the server takes it.
fn classify(line: &[u8]) -> Input {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Input::Skip;
    }
    let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(message) => {
            return match bad_tool_call(line) {
                Some(reply) => Input::Refuse(reply),
                None => Input::Message(Box::new(message)),
            };
        }
        Err(e) => e,
    };
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return Input::Refuse(error_reply(
            Value::Null,
            PARSE_ERROR,
            format!("Parse error: not JSON ({error})"),
        ));
    };
    let is_notification = value.get("method").is_some() && value.get("id").is_none();
    if is_notification {
        return Input::Skip;
    }
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .cloned()
        .unwrap_or(Value::Null);
    Input::Refuse(error_reply(
        id,
        INVALID_REQUEST,
        format!("Invalid Request: not a JSON-RPC 2.0 message ({error})"),
    ))
}

/// The invalid-params answer (-32602) to a `tools/call` request whose params are not
/// `{name: string, arguments?: object}`: rmcp takes such a request for an unknown method
/// and answers "Method not found" with the message "tools/call".
fn bad_tool_call(line: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(line).ok()?;
    if value.get("method")?.as_str()? != "tools/call" {
        return None;
    }
    let id = value.get("id")?.clone();
    let params = value.get("params");
    let fits = params.and_then(Value::as_object).is_some_and(|p| {
        p.get("name").is_some_and(Value::is_string)
            && p.get("arguments")
                .is_none_or(|a| a.is_object() || a.is_null())
    });
    (!fits).then(|| {
        error_reply(
            id,
            INVALID_PARAMS,
            "Invalid params: tools/call takes {\"name\": the tool's name (a string), \
             \"arguments\": an object of its arguments}"
                .to_owned(),
        )
    })
}

/// A JSON-RPC 2.0 error response.
fn error_reply(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

async fn write_line<W: AsyncWrite + Unpin>(
    write: &Mutex<Option<W>>,
    item: &impl Serialize,
) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(item)?;
    bytes.push(b'\n');
    let mut guard = write.lock().await;
    let writer = guard
        .as_mut()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "the transport is closed"))?;
    writer.write_all(&bytes).await?;
    writer.flush().await
}
