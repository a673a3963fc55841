//! `coder mcp [--base DIR]`: an MCP server over stdio (the official Rust SDK, `rmcp`;
//! DESIGN §11).
//!
//! Tools: the seven jailed workspace operations of [`crate::workspace::fs`] (same names,
//! payloads and `{"code", "message"}` errors as `coder fs`), and `coder`, which runs one
//! task. A run is this same binary started as a child (`coder --request -`), so it goes
//! through exactly the run mode's pipeline, is recorded in `coder runs`, and cannot take
//! the server down with it. A call blocks at most `wait_s` (default 50 s, under the 60 s
//! request timeout of most hosts); a longer run answers `{"status": "running", "run_id"}`
//! and is followed with `coder_wait`, `coder_status` and `coder_cancel`. While a call
//! waits it sends a progress notification every [`PROGRESS_EVERY`] when the caller gave a
//! progress token, which keeps hosts that reset their timeout on progress alive.
//!
//! Stopping: a cancelled request (`notifications/cancelled`) cancels its run; when the
//! client goes away (stdin EOF) every run is stopped before the server exits. A run is
//! stopped with SIGTERM to its `coder` process, which kills its own child tree (it is a
//! subreaper) and still prints its `cancelled` envelope; SIGKILL to the run's process group
//! follows if it does not end within [`STOP_GRACE`]. Each run also gets
//! `PR_SET_PDEATHSIG`, so even a server killed by SIGKILL leaves no run behind.
//!
//! Input that is not a JSON-RPC message is answered with a JSON-RPC error (a parse error
//! for a line that is not JSON), not dropped in silence (`mcp_stdio`).
//!
//! The server runs on a current-thread runtime: the death signal is tied to the thread
//! that spawned the child, and this makes that thread the main one.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, Peer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::workspace::fs::{Jail, Verb};

/// Longest gap between two progress notifications while a call waits (tests shorten it
/// with `CODER_MCP_PROGRESS_MS`).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

fn progress_every() -> Duration {
    std::env::var("CODER_MCP_PROGRESS_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(PROGRESS_EVERY, |ms| {
            Duration::from_millis(ms).min(PROGRESS_EVERY)
        })
}
/// How long a stopped run may take to print its envelope before its group is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// Default and largest `wait_s`.
const DEFAULT_WAIT_S: f64 = 50.0;
const MAX_WAIT_S: f64 = 3600.0;

#[derive(Debug, Parser)]
#[command(
    name = "coder mcp",
    about = "Serve coder's tools over MCP (stdio): coder, coder_wait, coder_status, \
             coder_cancel and the jailed workspace tools"
)]
struct McpArgs {
    /// The folder the workspace tools are jailed to and every run's `cd` must lie in
    /// [default: the current directory]; never `/`, a system tree, the home directory or
    /// one holding coder's state directory.
    #[arg(long, value_name = "DIR")]
    base: Option<PathBuf>,
    /// Config file whose `deny` globs the workspace tools add [default: XDG config].
    #[arg(long, env = "CODER_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Entry point of `coder mcp ...` (`args`: those after `mcp`).
pub fn mcp_command(args: &[OsString]) -> ExitCode {
    let parsed: McpArgs = match super::parse_subcommand("coder mcp", args) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let base = parsed.base.clone().unwrap_or_else(|| PathBuf::from("."));
    let jail = match super::fs::open_jail(&base, parsed.config.as_deref()) {
        Ok(jail) => jail,
        Err(e) if parsed.base.is_none() => {
            eprintln!(
                "coder mcp: {} (--base defaults to the current directory: pass --base with \
                 the folder of your projects)",
                e.message
            );
            return ExitCode::from(crate::exit::ErrorKind::ConfigError.exit_code());
        }
        Err(e) => {
            eprintln!("coder mcp: {}", e.message);
            return ExitCode::from(crate::exit::ErrorKind::ConfigError.exit_code());
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("coder mcp: cannot start the runtime: {e}");
            return ExitCode::from(70);
        }
    };
    runtime.block_on(serve(jail, parsed.config))
}

async fn serve(jail: Jail, config: Option<PathBuf>) -> ExitCode {
    let server = Server {
        jail: Arc::new(jail),
        config,
        runs: Arc::new(Mutex::new(HashMap::new())),
    };
    let runs = server.runs.clone();
    let failure = super::mcp_stdio::WriteFailure::default();
    let transport = super::mcp_stdio::LineTransport::new(
        tokio::io::stdin(),
        tokio::io::stdout(),
        failure.clone(),
    );
    let served = match server.serve(transport).await {
        Ok(running) => running.waiting().await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(initialize_failure(&e)),
    };
    stop_all(&runs).await;
    match (failure.take(), served) {
        // The client went away (closed its end of stdout): nothing to say to anyone.
        (Some(e), _) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        (Some(e), _) => {
            eprintln!(
                "coder mcp: cannot write to stdout ({e}): the MCP client reads every answer \
                 there; start the server with its stdout a pipe the client reads"
            );
            ExitCode::from(super::EXIT_IO_ERROR)
        }
        (None, Ok(())) => ExitCode::SUCCESS,
        (None, Err(message)) => {
            eprintln!("coder mcp: {message}");
            ExitCode::from(1)
        }
    }
}

/// What went wrong before the session started, in the server's words.
fn initialize_failure(e: &rmcp::service::ServerInitializeError) -> String {
    use rmcp::service::ServerInitializeError as E;
    match e {
        E::ConnectionClosed(_) => "stdin ended before a client initialized the MCP session: \
             coder mcp is started by an MCP host, which speaks JSON-RPC on its stdin and stdout \
             (see README, \"MCP server and workspace tools\")"
            .to_owned(),
        E::ExpectedInitializeRequest(_) => "the client's first message was not `initialize`: \
             an MCP session starts with an initialize request"
            .to_owned(),
        other => format!("the MCP session could not start: {other}"),
    }
}

/// One run started by the `coder` tool.
struct Run {
    pid: i32,
    started: Instant,
    /// Who had the server stop the run, for its `cancelled` envelope: the run itself only
    /// saw a SIGTERM ("cancelled by SIGTERM"), which told the caller nothing.
    stopped_by: Arc<Mutex<Option<StoppedBy>>>,
    /// `None` while running; the envelope (with `run_id`) once it ended.
    done: watch::Receiver<Option<Value>>,
    /// How far progress has read the run's journal, and what it found there.
    journal: Mutex<JournalFollower>,
}

/// Follows a run's growing transcript: each look reads only what was appended since.
#[derive(Default)]
struct JournalFollower {
    offset: u64,
    activity: crate::journal::runs::Activity,
}

impl JournalFollower {
    /// Reads the complete lines appended to `path` since the last look; `None` when the
    /// transcript is not there (yet).
    fn look(&mut self, path: &Path) -> Option<Value> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = std::fs::File::open(path).ok()?;
        file.seek(SeekFrom::Start(self.offset)).ok()?;
        let mut fresh = Vec::new();
        file.read_to_end(&mut fresh).ok()?;
        // A line still being written waits for the next look.
        let complete = fresh.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        for line in fresh[..complete].split(|b| *b == b'\n') {
            if let Ok(entry) = serde_json::from_slice::<Value>(line) {
                self.activity.absorb(&entry);
            }
        }
        self.offset += complete as u64;
        Some(self.activity.to_json())
    }
}

type Runs = Arc<Mutex<HashMap<String, Arc<Run>>>>;

#[derive(Clone)]
struct Server {
    jail: Arc<Jail>,
    config: Option<PathBuf>,
    runs: Runs,
}

/// The `coder` tool's arguments: the spec's parameters plus coder's own.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoderArgs {
    #[serde(rename = "PROMPT", alias = "prompt")]
    prompt: String,
    cd: Option<String>,
    sandbox: Option<String>,
    #[serde(rename = "SESSION_ID", alias = "session_id")]
    session_id: Option<String>,
    return_all_messages: Option<bool>,
    return_metrics: Option<bool>,
    // Numbers pass through as written: the run checks them and names the argument, and a
    // message quotes `1e300` as the caller wrote it.
    timeout: Option<serde_json::Number>,
    max_duration: Option<serde_json::Number>,
    max_retries: Option<serde_json::Number>,
    // Verified outcomes (DESIGN §8) and worktrees (§10), passed through as in `--request`.
    verify: Option<String>,
    verify_timeout: Option<serde_json::Number>,
    repair_turns: Option<serde_json::Number>,
    no_verify_baseline: Option<bool>,
    scope: Option<Vec<String>>,
    return_diff: Option<bool>,
    worktree: Option<bool>,
    worktree_base: Option<String>,
    /// Structured results (DESIGN §9): the schema itself (never a file name: the server
    /// reads no files for its callers outside the jail).
    json_schema: Option<serde_json::Map<String, Value>>,
    // Questions (DESIGN §9), as in `--request`.
    allow_questions: Option<bool>,
    answers: Option<Value>,
    backend: Option<String>,
    wait_s: Option<serde_json::Number>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitArgs {
    run_id: String,
    wait_s: Option<serde_json::Number>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunIdArgs {
    run_id: String,
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    let schema: JsonObject = match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(name, description, Arc::new(schema))
}

/// The published envelope schema (schema/envelope.schema.json), built in.
const ENVELOPE_SCHEMA: &str = include_str!("../../schema/envelope.schema.json");

/// What `coder` and `coder_wait` return: the run's envelope (with its `run_id`), or
/// `{status: running, run_id}` when it is still going. Hosts that validate structured
/// content check it against this; it has no `$ref`, so it embeds as it is.
fn run_output_schema() -> Option<Arc<JsonObject>> {
    let mut envelope: Value = serde_json::from_str(ENVELOPE_SCHEMA).ok()?;
    let map = envelope.as_object_mut()?;
    map.remove("$schema");
    map.remove("$id");
    let schema = json!({
        "type": "object",
        "anyOf": [
            envelope,
            {"type": "object", "required": ["status", "run_id"],
             "properties": {"status": {"const": "running"}, "run_id": {"type": "string"},
                            "elapsed_s": {"type": "number", "minimum": 0}}},
        ],
    });
    match schema {
        Value::Object(map) => Some(Arc::new(map)),
        _ => None,
    }
}

fn tools() -> Vec<Tool> {
    let seconds = |what: &str| json!({"type": "number", "minimum": 0, "description": what});
    let wait_seconds = json!({"type": "number", "minimum": 0, "maximum": MAX_WAIT_S,
        "description": "seconds this call waits for the run (default 50; keep it below your \
                        own request timeout)"});
    let run_id = json!({"type": "string", "description": "the run_id a coder call returned"});
    let mut tools = vec![
        tool(
            "coder",
            "Run one coding task through the claude CLI, supervised and sandboxed; returns \
             coder's JSON envelope. Waits at most wait_s (default 50); a longer run returns \
             {status: running, run_id}: follow it with coder_wait.",
            json!({"type": "object", "additionalProperties": false, "required": ["PROMPT"],
                "properties": {
                    "PROMPT": {"type": "string", "description": "the task"},
                    "cd": {"type": "string", "description": "workspace: a directory inside the server's base, relative to it or absolute (default: the base); resume hints give it absolute"},
                    "sandbox": {"type": "string", "enum": ["read-only", "workspace-write", "danger-full-access"], "description": "default workspace-write"},
                    "SESSION_ID": {"type": "string", "description": "resume this session"},
                    "return_all_messages": {"type": "boolean"},
                    "return_metrics": {"type": "boolean"},
                    "timeout": seconds("idle timeout in seconds: no output for this long stops the run (default 300)"),
                    "max_duration": seconds("cap on the whole run in seconds (default 1800; 0 = none)"),
                    "max_retries": {"type": "integer", "minimum": 0, "description": "retries of failed attempts that changed nothing (default 0)"},
                    "verify": {"type": "string", "description": "a check (sh -c) run before and after the agent, under its sandbox"},
                    "verify_timeout": seconds("limit of each verify check in seconds (default 600)"),
                    "repair_turns": {"type": "integer", "minimum": 0, "maximum": 10, "description": "turns to fix a failing verify check (default 1)"},
                    "no_verify_baseline": {"type": "boolean"},
                    "scope": {"type": "array", "items": {"type": "string"}, "description": "globs the run may change"},
                    "return_diff": {"type": "boolean"},
                    "worktree": {"type": "boolean", "description": "run on a new branch coder/<run-id> in a private checkout"},
                    "worktree_base": {"type": "string", "description": "with worktree: the branch, tag or commit the new branch starts from (default HEAD)"},
                    "json_schema": {"type": "object", "description": "a JSON Schema (type object) the final answer must match; the envelope returns it as structured, or fails with schema_mismatch"},
                    "allow_questions": {"type": "boolean", "description": "offer the model ask_user: it may stop the run (needs_input) with questions; default on with a contract"},
                    "answers": {"type": "array", "items": {"type": "string"}, "description": "answers to the questions of the needs_input run of SESSION_ID, in order (PROMPT may then be empty)"},
                    "backend": {"type": "string", "description": "a backend profile name, or auto[:a,b]"},
                    "wait_s": wait_seconds}}),
        ),
        tool(
            "coder_wait",
            "Wait up to wait_s (default 50) for a run; returns its envelope, or {status: running}.",
            json!({"type": "object", "additionalProperties": false, "required": ["run_id"],
                   "properties": {"run_id": run_id, "wait_s": wait_seconds}}),
        ),
        tool(
            "coder_status",
            "A run's state without waiting: running (with elapsed_s) or done (with the envelope).",
            json!({"type": "object", "additionalProperties": false, "required": ["run_id"],
                   "properties": {"run_id": run_id}}),
        ),
        tool(
            "coder_cancel",
            "Stop a run (its whole process tree) and return its cancelled envelope.",
            json!({"type": "object", "additionalProperties": false, "required": ["run_id"],
                   "properties": {"run_id": run_id}}),
        ),
    ];
    for run_tool in tools
        .iter_mut()
        .filter(|t| t.name == "coder" || t.name == "coder_wait")
    {
        run_tool.output_schema = run_output_schema();
    }
    for verb in Verb::ALL {
        tools.push(tool(verb.name(), verb.description(), verb.input_schema()));
    }
    tools
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("coder", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "coder runs coding tasks through the claude CLI (tool `coder`) and offers \
                 file tools jailed to one base folder.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult {
            tools: tools(),
            ..Default::default()
        })
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let progress = request
            .meta
            .as_ref()
            .and_then(|m| m.get_progress_token())
            .or_else(|| context.meta.get_progress_token())
            .map(|token| Progress {
                peer: context.peer.clone(),
                token,
            });
        let name = request.name.as_ref();
        if !tools().iter().any(|t| t.name == name) {
            return Err(McpError::invalid_params(
                format!("unknown tool {name:?}; see tools/list"),
                None,
            ));
        }
        let result = self
            .dispatch(name, args, progress, &context)
            .await
            .unwrap_or_else(text_error);
        Ok(result.into())
    }
}

impl Server {
    /// Runs tool `name`; `Err` is a message for a tool error the caller reads.
    async fn dispatch(
        &self,
        name: &str,
        args: Value,
        progress: Option<Progress>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, String> {
        Ok(match name {
            "coder" => self.coder(parse(name, args)?, progress, context).await?,
            "coder_wait" => {
                let a: WaitArgs = parse(name, args)?;
                let limit = wait_s(a.wait_s.as_ref())?;
                let run = self.find(&a.run_id)?;
                let wait = Wait {
                    limit,
                    cancel_on_abort: false,
                };
                wait_for(&a.run_id, &run, wait, progress, context).await
            }
            "coder_status" => {
                let a: RunIdArgs = parse(name, args)?;
                status(&a.run_id, &*self.find(&a.run_id)?)
            }
            "coder_cancel" => {
                let a: RunIdArgs = parse(name, args)?;
                cancel(&a.run_id, &*self.find(&a.run_id)?, StoppedBy::Tool).await
            }
            name => match Verb::parse(name) {
                Some(verb) => self.fs(verb, args).await,
                None => return Err(format!("unknown tool {name:?}")),
            },
        })
    }
}

/// Where and how to report progress for one request.
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

/// The arguments of run tool `tool`, or a message naming every unknown argument and every
/// value of the wrong type at once.
fn parse<T: for<'de> Deserialize<'de>>(tool: &str, args: Value) -> Result<T, String> {
    // Checked first: an argument kept as any JSON (`answers`) passes serde whatever it is,
    // and serde named only the first unknown argument, in its own words.
    let problems: Vec<String> = [unknown_arguments(tool, &args), field_type_error(&args)]
        .into_iter()
        .flatten()
        .collect();
    if !problems.is_empty() {
        return Err(format!("bad arguments: {}", problems.join("; ")));
    }
    serde_json::from_value(args).map_err(|e| format!("bad arguments: {e}"))
}

/// The other spellings the `coder` tool takes (as `--request` does), not in its schema.
const CODER_ALIASES: [&str; 2] = ["prompt", "session_id"];

/// Names every argument `tool` does not take, with the one it likely means (`promt`,
/// `wait`), else the arguments it takes.
fn unknown_arguments(tool: &str, args: &Value) -> Option<String> {
    let tools = tools();
    let schema = tools.iter().find(|t| t.name == tool)?;
    let properties = schema.input_schema.get("properties")?.as_object()?;
    let known: Vec<&str> = properties.keys().map(String::as_str).collect();
    let aliases: &[&str] = if tool == "coder" { &CODER_ALIASES } else { &[] };
    let unknown: Vec<String> = args
        .as_object()?
        .keys()
        .filter(|key| !known.contains(&key.as_str()) && !aliases.contains(&key.as_str()))
        .map(|key| match crate::text::near_miss(key, &known) {
            Some(meant) => format!("unknown argument {key:?}: did you mean {meant:?}?"),
            None => format!(
                "unknown argument {key:?} (the {tool} tool takes: {})",
                known.join(", ")
            ),
        })
        .collect();
    (!unknown.is_empty()).then(|| unknown.join("; "))
}

/// Names every argument of a known name whose JSON type is wrong (serde's own message
/// does not say which field it was, and stopped at the first). `null` is taken as left
/// out, as serde takes it.
fn field_type_error(args: &Value) -> Option<String> {
    let map = args.as_object()?;
    let wrong: Vec<String> = map
        .iter()
        .filter_map(|(key, value)| {
            let expected = expected_type(key)?;
            (!expected.fits(value) && !value.is_null()).then(|| {
                let range = match key.as_str() {
                    "max_retries" => " from 0 to 100",
                    "repair_turns" => " from 0 to 10",
                    _ => "",
                };
                format!("{key} must be {}{range} (got {value})", expected.describe())
            })
        })
        .collect();
    (!wrong.is_empty()).then(|| wrong.join("; "))
}

/// The JSON types of the run tools' arguments.
#[derive(Clone, Copy)]
enum ArgType {
    String,
    Seconds,
    Count,
    Bool,
    Globs,
    Object,
    Answers,
}

impl ArgType {
    fn fits(self, value: &Value) -> bool {
        match self {
            ArgType::String => value.is_string(),
            ArgType::Seconds | ArgType::Count => value.is_number(),
            ArgType::Bool => value.is_boolean(),
            ArgType::Globs => value
                .as_array()
                .is_some_and(|list| list.iter().all(Value::is_string)),
            ArgType::Object => value.is_object(),
            // Never a string: the run would read a string as a file name, on the server's
            // machine and outside its base.
            ArgType::Answers => value.is_array(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            ArgType::String => "a string",
            ArgType::Seconds => "a number of seconds",
            ArgType::Count => "a whole number",
            ArgType::Bool => "true or false",
            ArgType::Globs => "a list of glob strings, like [\"src/**\"]",
            ArgType::Object => "a JSON Schema object (the schema itself, not its text)",
            ArgType::Answers => {
                "a list of answers in the questions' order, like [\"blue\", \"keep the old API\"]"
            }
        }
    }
}

fn expected_type(key: &str) -> Option<ArgType> {
    Some(match key {
        "PROMPT" | "prompt" | "cd" | "sandbox" | "SESSION_ID" | "session_id" | "backend"
        | "run_id" | "verify" | "worktree_base" => ArgType::String,
        "timeout" | "max_duration" | "wait_s" | "verify_timeout" => ArgType::Seconds,
        "max_retries" | "repair_turns" => ArgType::Count,
        "return_all_messages"
        | "return_metrics"
        | "no_verify_baseline"
        | "return_diff"
        | "worktree"
        | "allow_questions" => ArgType::Bool,
        "scope" => ArgType::Globs,
        "json_schema" => ArgType::Object,
        "answers" => ArgType::Answers,
        _ => return None,
    })
}

fn text_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The time a call may wait for its run: `wait_s` (default 50 s), from 0 to 3600. A value
/// outside that range is refused, not clamped: a caller asking for `-1` or a day gets
/// told, instead of a wait it did not ask for.
fn wait_s(requested: Option<&serde_json::Number>) -> Result<Duration, String> {
    let Some(number) = requested else {
        return Ok(Duration::from_secs_f64(DEFAULT_WAIT_S));
    };
    match number.as_f64() {
        Some(s) if (0.0..=MAX_WAIT_S).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "bad arguments: wait_s must be a number of seconds from 0 to {MAX_WAIT_S} (got \
             {number})"
        )),
    }
}

/// `path` with its `.` and `..` taken lexically (as for a path that does not exist, which
/// cannot be resolved).
fn lexical(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                normal.pop();
            }
            std::path::Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal
}

impl Server {
    fn find(&self, run_id: &str) -> Result<Arc<Run>, String> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.get(run_id)
            .cloned()
            .ok_or_else(|| format!("unknown run_id {run_id:?}: no run of this server has that id"))
    }

    async fn fs(&self, verb: Verb, args: Value) -> CallToolResult {
        let jail = self.jail.clone();
        let outcome = tokio::task::spawn_blocking(move || jail.run(verb, args)).await;
        match outcome {
            Ok(Ok(value)) => CallToolResult::structured(value),
            Ok(Err(e)) => CallToolResult::structured_error(e.to_json()),
            Err(e) => text_error(format!("the operation failed: {e}")),
        }
    }

    /// The workspace of a run: `cd` relative to the base (or absolute inside it).
    fn workspace(&self, cd: Option<&str>) -> Result<PathBuf, String> {
        let base = self.jail.base();
        let joined = match cd {
            None | Some("") => base.to_path_buf(),
            Some(cd) => base.join(cd),
        };
        let given = cd.unwrap_or_default();
        let outside = |real: &Path| {
            format!(
                "bad arguments: cd {given:?} leads to {}, outside the server's base {}; give \
                 a directory inside the base (relative to it, or absolute)",
                real.display(),
                base.display()
            )
        };
        let real = match std::fs::canonicalize(&joined) {
            Ok(real) => real,
            // `..` past the base is outside it, whether or not the place exists.
            Err(_) if !lexical(&joined).starts_with(base) => {
                return Err(outside(&lexical(&joined)));
            }
            Err(e) => {
                let what = match e.kind() {
                    std::io::ErrorKind::NotFound => "no such directory".to_owned(),
                    std::io::ErrorKind::PermissionDenied => {
                        "permission denied on the way to it".to_owned()
                    }
                    std::io::ErrorKind::NotADirectory => {
                        "a part of the path is not a directory".to_owned()
                    }
                    _ => e.to_string(),
                };
                return Err(format!(
                    "bad arguments: cd {given:?} ({}): {what}; a relative cd is taken from the \
                     server's base {}",
                    joined.display(),
                    base.display()
                ));
            }
        };
        if !real.starts_with(base) {
            return Err(outside(&real));
        }
        if !real.is_dir() {
            return Err(format!(
                "bad arguments: cd {given:?} ({}) is not a directory; give the workspace \
                 directory",
                real.display()
            ));
        }
        Ok(real)
    }

    async fn coder(
        &self,
        a: CoderArgs,
        progress: Option<Progress>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, String> {
        // Answers are a turn's prompt of their own (DESIGN §9).
        if a.prompt.trim().is_empty() && a.answers.is_none() {
            return Err("bad arguments: PROMPT is empty".to_string());
        }
        let limit = wait_s(a.wait_s.as_ref())?;
        if a.backend.as_deref().is_some_and(|b| b.trim().is_empty()) {
            return Err(
                "bad arguments: backend is empty: name a backend profile (like \
                 \"glm\" or \"auto\"), or leave backend out for the default"
                    .to_owned(),
            );
        }
        // Checked here, in the tool's own words: the run would name them as fields of its
        // `--request` JSON on stdin, which the caller never wrote.
        if let Some(mode) = &a.sandbox {
            mode.parse::<crate::sandbox::Mode>()
                .map_err(|e| format!("bad arguments: sandbox: {e}"))?;
        }
        if let Some(id) = &a.session_id
            && uuid::Uuid::parse_str(id.trim()).is_err()
        {
            return Err(format!(
                "bad arguments: SESSION_ID must be a session UUID as printed in an envelope's \
                 SESSION_ID, like 11111111-2222-4333-8444-555555555555 (got {id:?})"
            ));
        }
        let cd = self.workspace(a.cd.as_deref())?;
        // The id the run's journal takes too: `coder runs show RUN_ID` finds it.
        let run_id = crate::pipeline::run::new_run_id();
        let run = self
            .spawn_run(&run_id, &a, &cd)
            .map_err(|e| format!("cannot start the run: {e}"))?;
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.clone(), run.clone());
        let wait = Wait {
            limit,
            cancel_on_abort: true,
        };
        Ok(wait_for(&run_id, &run, wait, progress, context).await)
    }

    /// The command line of a run's child: coder itself, reading the request on stdin.
    fn run_command(
        &self,
        run_id: &str,
        backend: Option<&str>,
        cd: &Path,
    ) -> std::io::Result<tokio::process::Command> {
        let exe = std::env::current_exe()?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("--request").arg("-").arg("--run-id").arg(run_id);
        // Messages about the arguments name them as the caller wrote them.
        cmd.arg("--request-from").arg("mcp-tool");
        if let Some(backend) = backend {
            cmd.arg("--backend").arg(backend);
        }
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        cmd.current_dir(cd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(false);
        // SAFETY: prctl(PR_SET_PDEATHSIG) and signal() are async-signal-safe and touch no
        // memory of the parent; they ask the kernel to signal the child when we die, and
        // make SIGTERM (how the server stops a run) default again when the server was
        // started with it ignored: a run keeps an inherited ignored signal ignored.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0
                    || libc::signal(libc::SIGTERM, libc::SIG_DFL) == libc::SIG_ERR
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(cmd)
    }

    /// Starts the run as a `coder --request -` child of its own process group, which
    /// the server signals to stop it; its envelope is sent on the run's `done` channel.
    fn spawn_run(&self, run_id: &str, a: &CoderArgs, cd: &Path) -> std::io::Result<Arc<Run>> {
        let request = request_json(a, cd);
        let mut cmd = self.run_command(run_id, a.backend.as_deref(), cd)?;
        let mut child = cmd.spawn()?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| std::io::Error::other("the run has no pid"))?;
        let (tx, rx) = watch::channel(None);
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let id = run_id.to_string();
        let text = request.to_string();
        let stopped_by: Arc<Mutex<Option<StoppedBy>>> = Arc::new(Mutex::new(None));
        let by = Arc::clone(&stopped_by);
        tokio::spawn(async move {
            if let Some(mut stdin) = stdin.take() {
                let _ = stdin.write_all(text.as_bytes()).await;
                drop(stdin);
            }
            let mut out = Vec::new();
            if let Some(stdout) = stdout.as_mut() {
                let _ = stdout.read_to_end(&mut out).await;
            }
            let status = child.wait().await;
            let mut envelope = envelope_of(&id, &out, status.ok().and_then(|s| s.code()));
            if let Some(by) = *by.lock().unwrap_or_else(|p| p.into_inner()) {
                by.name_in(&mut envelope);
            }
            let _ = tx.send(Some(envelope));
        });
        Ok(Arc::new(Run {
            pid,
            started: Instant::now(),
            stopped_by,
            done: rx,
            journal: Mutex::new(JournalFollower::default()),
        }))
    }
}

/// The `--request` JSON of an MCP tool call: the prompt, the workspace, and each field
/// the caller gave.
fn request_json(a: &CoderArgs, cd: &Path) -> Value {
    let mut request = json!({"PROMPT": a.prompt, "cd": cd});
    let fields = [
        ("sandbox", a.sandbox.as_ref().map(|v| json!(v))),
        ("SESSION_ID", a.session_id.as_ref().map(|v| json!(v))),
        (
            "return_all_messages",
            a.return_all_messages.map(|v| json!(v)),
        ),
        ("return_metrics", a.return_metrics.map(|v| json!(v))),
        ("timeout", a.timeout.as_ref().map(|v| json!(v))),
        ("max_duration", a.max_duration.as_ref().map(|v| json!(v))),
        ("max_retries", a.max_retries.as_ref().map(|v| json!(v))),
        ("verify", a.verify.as_ref().map(|v| json!(v))),
        (
            "verify_timeout",
            a.verify_timeout.as_ref().map(|v| json!(v)),
        ),
        ("repair_turns", a.repair_turns.as_ref().map(|v| json!(v))),
        ("no_verify_baseline", a.no_verify_baseline.map(|v| json!(v))),
        ("scope", a.scope.as_ref().map(|v| json!(v))),
        ("return_diff", a.return_diff.map(|v| json!(v))),
        ("worktree", a.worktree.map(|v| json!(v))),
        ("worktree_base", a.worktree_base.as_ref().map(|v| json!(v))),
        ("json_schema", a.json_schema.as_ref().map(|v| json!(v))),
        ("allow_questions", a.allow_questions.map(|v| json!(v))),
        ("answers", a.answers.clone()),
    ];
    for (key, value) in fields {
        if let Some(value) = value {
            request[key] = value;
        }
    }
    request
}

/// The run's envelope with its `run_id`; a synthesized `unexpected_exception` envelope
/// when the child printed none.
fn envelope_of(run_id: &str, stdout: &[u8], code: Option<i32>) -> Value {
    let text = String::from_utf8_lossy(stdout);
    let mut envelope = text
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| {
            json!({"success": false, "tool": "coder",
                   "error": format!("the run printed no envelope (exit {code:?})"),
                   "error_kind": "unexpected_exception"})
        });
    envelope["run_id"] = json!(run_id);
    envelope
}

fn done_result(envelope: Value) -> CallToolResult {
    let success = envelope["success"] == json!(true);
    if success {
        CallToolResult::structured(envelope)
    } else {
        CallToolResult::structured_error(envelope)
    }
}

fn running(run_id: &str, run: &Run) -> Value {
    json!({"status": "running", "run_id": run_id,
           "elapsed_s": run.started.elapsed().as_secs_f64().round()})
}

/// How a call waits for its run.
struct Wait {
    limit: Duration,
    /// Whether the caller cancelling the request stops the run (the `coder` call that
    /// started it), or only the waiting (`coder_wait`: a client that gives up waiting has
    /// `coder_cancel` to stop the run).
    cancel_on_abort: bool,
}

/// One progress line: the run's phase, its last tool, turns and tokens so far (read from
/// the run's journal, which has the same id), and how long it has been going.
fn progress_message(run_id: &str, run: &Run) -> String {
    let elapsed = run.started.elapsed().as_secs_f64();
    let activity = crate::config::state_dir().ok().and_then(|state| {
        let dir = crate::journal::transcript::runs_dir(&state);
        let path = crate::journal::runs::find_run(&dir, run_id)?;
        run.journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .look(&path)
    });
    let Some(a) = activity else {
        return format!("coder run {run_id}: starting, {elapsed:.0} s");
    };
    let tool = a["tool"]
        .as_str()
        .map(|t| format!(", last tool {t}"))
        .unwrap_or_default();
    format!(
        "coder run {run_id}: {}{tool}, {} turn(s), {}/{} tokens in/out, {elapsed:.0} s",
        a["phase"].as_str().unwrap_or("running"),
        a["turns"],
        a["tokens_in"],
        a["tokens_out"],
    )
}

/// Waits for the run, with progress, up to `wait.limit`.
async fn wait_for(
    run_id: &str,
    run: &Run,
    wait: Wait,
    progress: Option<Progress>,
    context: &RequestContext<RoleServer>,
) -> CallToolResult {
    let mut done = run.done.clone();
    let deadline = tokio::time::Instant::now() + wait.limit;
    let mut ticks = 0u32;
    let every = progress_every();
    loop {
        if let Some(envelope) = done.borrow().clone() {
            return done_result(envelope);
        }
        let next_tick = tokio::time::Instant::now() + every;
        tokio::select! {
            changed = done.changed() => {
                if changed.is_err() {
                    return text_error(format!("run {run_id} vanished"));
                }
            }
            () = tokio::time::sleep_until(deadline.min(next_tick)) => {
                if tokio::time::Instant::now() >= deadline {
                    return CallToolResult::structured(running(run_id, run));
                }
                ticks += 1;
                if let Some(p) = &progress {
                    let message = progress_message(run_id, run);
                    let _ = p
                        .peer
                        .notify_progress(
                            ProgressNotificationParam::new(p.token.clone(), f64::from(ticks))
                                .with_message(message),
                        )
                        .await;
                }
            }
            () = context.ct.cancelled() => {
                if wait.cancel_on_abort {
                    return cancel(run_id, run, StoppedBy::Client).await;
                }
                return CallToolResult::structured(running(run_id, run));
            }
        }
    }
}

fn status(run_id: &str, run: &Run) -> CallToolResult {
    match run.done.borrow().clone() {
        Some(envelope) => CallToolResult::structured(
            json!({"status": "done", "run_id": run_id, "envelope": envelope}),
        ),
        None => CallToolResult::structured(running(run_id, run)),
    }
}

/// Who had the server stop a run.
#[derive(Debug, Clone, Copy)]
enum StoppedBy {
    /// A `coder_cancel` call.
    Tool,
    /// The client cancelled the `coder` request that started the run before it ended
    /// (`notifications/cancelled`, which clients also send when their request times out).
    Client,
}

impl StoppedBy {
    /// Names the stop in a `cancelled` envelope, whose `error` said "cancelled by SIGTERM":
    /// the signal the server stops runs with, not why.
    fn name_in(self, envelope: &mut Value) {
        if envelope["error_kind"] != "cancelled" {
            return;
        }
        let (error, message) = match self {
            StoppedBy::Tool => (
                "cancelled by coder_cancel",
                "coder_cancel stopped the run; the child process tree was stopped",
            ),
            StoppedBy::Client => (
                "cancelled by the MCP client: it cancelled the coder request that started the \
                 run (a client's request timeout does so too; a wait_s below that timeout, \
                 then coder_wait, keeps the run going)",
                "the client cancelled its request (notifications/cancelled), so the server \
                 stopped the run; the child process tree was stopped",
            ),
        };
        envelope["error"] = json!(error);
        if envelope["error_detail"].is_object() {
            envelope["error_detail"]["message"] = json!(message);
        }
    }
}

/// Stops a run: SIGTERM (coder kills its tree and prints `cancelled`), then SIGKILL to its
/// group after [`STOP_GRACE`].
async fn cancel(run_id: &str, run: &Run, by: StoppedBy) -> CallToolResult {
    if run.done.borrow().is_none() {
        *run.stopped_by.lock().unwrap_or_else(|p| p.into_inner()) = Some(by);
    }
    stop(run).await;
    match run.done.borrow().clone() {
        Some(envelope) => done_result(envelope),
        None => text_error(format!("run {run_id} did not stop")),
    }
}

async fn stop(run: &Run) {
    if run.done.borrow().is_some() {
        return;
    }
    terminate(run);
    await_end(run).await;
}

/// Sends SIGTERM to a run still going.
fn terminate(run: &Run) {
    if run.done.borrow().is_none() {
        // SAFETY: kill(2) on the run's own pid; the run is our child and its watcher task
        // reaps it only after it exits, so until `done` is set the pid is still ours.
        unsafe {
            libc::kill(run.pid, libc::SIGTERM);
        }
    }
}

/// Waits [`STOP_GRACE`] for a terminated run, then kills its process group.
async fn await_end(run: &Run) {
    let mut done = run.done.clone();
    let ended = tokio::time::timeout(STOP_GRACE, done.wait_for(Option::is_some))
        .await
        .is_ok_and(|r| r.is_ok());
    if !ended {
        // SAFETY: as in `terminate`; the group was created for the run (process_group(0)).
        unsafe {
            libc::killpg(run.pid, libc::SIGKILL);
        }
        let _ = tokio::time::timeout(STOP_GRACE, done.wait_for(Option::is_some)).await;
    }
}

/// Stops every run still going (the client went away): all are signalled first, then
/// each is awaited, so stopping takes one grace period, not one per run.
async fn stop_all(runs: &Runs) {
    let all: Vec<Arc<Run>> = runs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect();
    for run in &all {
        terminate(run);
    }
    for run in &all {
        await_end(run).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_tools_publish_the_envelope_or_running_schema() {
        let tools = tools();
        for name in ["coder", "coder_wait"] {
            let tool = tools.iter().find(|t| t.name == name).unwrap();
            let schema = tool.output_schema.as_ref().expect("an output schema");
            assert_eq!(schema["type"], "object");
            let arms = schema["anyOf"].as_array().unwrap();
            assert_eq!(
                arms[0]["required"],
                json!(["success", "tool", "SESSION_ID"])
            );
            assert_eq!(arms[1]["properties"]["status"]["const"], "running");
            assert!(!serde_json::to_string(&**schema).unwrap().contains("$ref"));
        }
    }
}
