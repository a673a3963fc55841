//! `coder ask-server` (hidden): the MCP server of the `ask_user` tool (DESIGN §9), started by
//! the claude CLI over stdio, inside the run's sandbox, when questions are on.
//!
//! It is a minimal, synchronous JSON-RPC loop (newline-delimited messages on stdin and
//! stdout, no async runtime), so that a run whose model never asks pays only for an exec
//! and three small messages (`initialize`, `tools/list`, the initialized notification).
//!
//! What it may do is deliberately little, because it runs in the CLI's own Landlock domain
//! (not in the nested one of the agent's commands) and its input is the model's: before it
//! reads anything it drops every filesystem and network right
//! ([`crate::sandbox::nest::drop_all_rights`]), so it can use only the pipes it inherited.
//! It checks an `ask_user` call with [`questions::parse_questions`]: an invalid one gets an
//! error result the model can act on; a valid one is never answered — coder sees the call in
//! the CLI's stream (the source of truth, which the agent's commands cannot forge), takes the
//! questions from there with the same check, and stops the CLI tree, so the model cannot go
//! on working after asking (the server outlives the CLI's SIGTERM for this, see
//! [`hold_through_termination`]). The server records nothing. Should coder not stop the run (it
//! always does), the call is answered after [`SAFETY_NET`] with a text telling the model to
//! end its turn.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::pipeline::questions;

/// The longest message read (a model's call is a few KiB).
const MAX_MESSAGE_BYTES: u64 = 4 * 1024 * 1024;
/// How long a valid call stays unanswered before the fallback text is sent.
const SAFETY_NET: Duration = Duration::from_secs(60);
/// The MCP protocol version offered when the client names none.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// The fallback answer to a valid call.
pub const STOP_TEXT: &str = "The run stops here; the caller will answer your questions when \
it resumes this session. End your turn now.";

/// `coder ask-server`: serves until stdin closes.
pub fn ask_server_command() -> ExitCode {
    // Best effort: without Landlock (danger-full-access on an old kernel) the server is
    // still only this loop.
    let _ = crate::sandbox::nest::drop_all_rights();
    static HELD: AtomicBool = AtomicBool::new(false);
    hold_through_termination(&HELD);
    let stdin = std::io::stdin();
    let mut reader = BufReader::new(stdin.lock());
    let mut stdout = std::io::stdout().lock();
    let mut pending: Option<(Value, Instant)> = None;
    let mut line = Vec::new();
    loop {
        if let Some((id, since)) = &pending
            && reader.buffer().is_empty()
        {
            let left = SAFETY_NET.saturating_sub(since.elapsed());
            if left.is_zero() || !readable_within(&std::io::stdin(), left) {
                let reply = result(id.clone(), call_result(STOP_TEXT, false));
                if send(&mut stdout, &reply).is_err() {
                    return ExitCode::FAILURE;
                }
                pending = None;
                continue;
            }
        }
        line.clear();
        match (&mut reader)
            .take(MAX_MESSAGE_BYTES)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => return ExitCode::SUCCESS,
            Ok(_) if !line.ends_with(b"\n") && line.len() as u64 == MAX_MESSAGE_BYTES => {
                return ExitCode::FAILURE;
            }
            Ok(_) => {}
            Err(_) => return ExitCode::FAILURE,
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let reply = match serde_json::from_slice::<Value>(&line) {
            Ok(message) => {
                let reply = handle(&message, &mut pending);
                HELD.store(pending.is_some(), Ordering::SeqCst);
                reply
            }
            Err(e) => Some(error(Value::Null, -32700, &format!("parse error: {e}"))),
        };
        if let Some(reply) = reply
            && send(&mut stdout, &reply).is_err()
        {
            return ExitCode::FAILURE;
        }
    }
}

/// The reply to one message; `None` for notifications and for a valid `ask_user` call
/// (left pending in `pending`).
fn handle(message: &Value, pending: &mut Option<(Value, Instant)>) -> Option<Value> {
    let id = message.get("id").filter(|id| !id.is_null())?.clone();
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    Some(match message.get("method").and_then(Value::as_str) {
        Some("initialize") => result(
            id,
            json!({
                "protocolVersion": params.get("protocolVersion").and_then(Value::as_str)
                    .unwrap_or(PROTOCOL_VERSION),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": questions::SERVER_NAME, "version": env!("CARGO_PKG_VERSION")},
            }),
        ),
        Some("ping") => result(id, json!({})),
        Some("tools/list") => result(
            id,
            json!({"tools": [{
                "name": questions::TOOL_NAME,
                "description": questions::TOOL_DESCRIPTION,
                "inputSchema": questions::input_schema(),
                "_meta": {"anthropic/alwaysLoad": true},
            }]}),
        ),
        Some("tools/call") => {
            if params.get("name").and_then(Value::as_str) != Some(questions::TOOL_NAME) {
                return Some(error(id, -32602, "unknown tool"));
            }
            let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
            match questions::parse_questions(&arguments) {
                Ok(_) => {
                    *pending = Some((id, Instant::now()));
                    return None;
                }
                Err(why) => result(id, call_result(&why, true)),
            }
        }
        _ => error(id, -32601, "method not found"),
    })
}

fn call_result(text: &str, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn send(out: &mut impl Write, message: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    out.write_all(&bytes)?;
    out.flush()
}

/// Block the signals that ask a process to end (SIGTERM, SIGINT, SIGHUP). coder stops a
/// run that asked by sending SIGTERM to the whole tree at once; had this server died of it
/// first, the CLI, still running, would have turned the held call into a "Connection
/// closed" tool result and sent the model one more request before its own SIGTERM ended it
/// (seen in CI). The server ends when its stdin closes, which is when the CLI is gone, or
/// by the SIGKILL the tree stop sends to whatever outlives its grace.
///
/// One SIGTERM does end it: the CLI's own (our parent's, sent with `kill`), sent when the CLI exits normally
/// and shuts its MCP servers down, while no call is held. The CLI then waits for the server
/// and kills it only after 400 ms (measured with strace: every run with `--allow-questions`
/// took that much longer while the server held through it).
fn hold_through_termination(held: &'static AtomicBool) {
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let mut ending = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        ending.add(signal);
    }
    // Best effort: a server that can still be ended by SIGTERM is the old behaviour.
    if ending.thread_block().is_err() {
        return;
    }
    let Ok(signals) = SignalFd::with_flags(&ending, SfdFlags::SFD_CLOEXEC) else {
        return;
    };
    let parent = nix::unistd::getppid().as_raw();
    let _ = std::thread::Builder::new()
        .name("ask-server-signals".into())
        .spawn(move || {
            while let Ok(info) = signals.read_signal() {
                // Sent by `kill` (SI_USER), whose sender the kernel fills in: a signal
                // queued with `rt_sigqueueinfo` carries a sender pid of the caller's
                // choosing (round thirteen's review: an agent's tool ended the server with
                // one naming the CLI).
                let from_cli = info.is_some_and(|i| {
                    i.ssi_pid as i32 == parent && i.ssi_code == nix::libc::SI_USER
                });
                if from_cli && !held.load(Ordering::SeqCst) {
                    std::process::exit(0);
                }
            }
        });
}

/// Whether `fd` becomes readable (data or end of file) within `timeout`.
fn readable_within(fd: &impl AsFd, timeout: Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)), Ok(n) if n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_the_handshake_and_holds_a_valid_call() {
        let mut pending = None;
        let init = handle(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-03-26"}}),
            &mut pending,
        )
        .unwrap();
        assert_eq!(init["result"]["protocolVersion"], "2025-03-26");
        assert!(
            handle(
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                &mut pending
            )
            .is_none()
        );
        let list = handle(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            &mut pending,
        )
        .unwrap();
        assert_eq!(list["result"]["tools"][0]["name"], "ask_user");
        let bad = handle(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask_user", "arguments": {"questions": []}}}),
            &mut pending,
        )
        .unwrap();
        assert_eq!(bad["result"]["isError"], true);
        assert!(pending.is_none());
        let held = handle(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ask_user", "arguments": {"questions": [{"question": "q?"}]}}}),
            &mut pending,
        );
        assert!(held.is_none());
        assert_eq!(pending.as_ref().map(|p| p.0.clone()), Some(json!(3)));
        let unknown = handle(
            &json!({"jsonrpc": "2.0", "id": 4, "method": "resources/list"}),
            &mut pending,
        )
        .unwrap();
        assert_eq!(unknown["error"]["code"], -32601);
    }
}
