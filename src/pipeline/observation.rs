//! What one attempt's output showed: the facts the supervisor accumulates line by line and
//! that classification, metrics and the envelope are later built from.
//!
//! The observer sees every line of stdout and stderr in arrival order. It keeps only bounded
//! state (counters, the last lines, the pending tool calls), except for the parsed events
//! themselves when the caller asked for `--return-all-messages`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use std::sync::Arc;

use serde_json::value::RawValue;

use crate::sandbox::{Denial, DenialClass, Policy, detect_denials};

use crate::stream::{
    AssistantEvent, DecodeError, Decoded, Event, LONG_LINE_BYTES, Line, Pipe, ResultEvent,
    ToolResult, ToolUse, UpstreamErrorType, Usage, decode_line, decode_long_line,
};
use crate::text::one_line;
use crate::text::redact::{Ending, Secrets};
use crate::text::tool_result::{Join, content_text};

/// How many lines `last_lines` keeps.
/// The most `--return-all-messages` keeps (32 MiB of events): a long run's stream can be
/// hundreds of MB, and the envelope must stay printable and parseable.
pub const ALL_MESSAGES_MAX_BYTES: usize = 32 * 1024 * 1024;

pub const LAST_LINES: usize = 20;
/// How many characters of one line `last_lines` keeps.
const LAST_LINE_CHARS: usize = 1000;

/// The CLI's own error message (a synthetic `assistant` line) about a failed API call.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticError {
    pub error: Option<UpstreamErrorType>,
    pub http_status: Option<u16>,
    pub text: String,
}

/// The head of one line kept for `last_lines`, not yet decoded or redacted.
#[derive(Debug, Default)]
struct KeptLine {
    head: Vec<u8>,
    /// The head is not the whole line (a secret may go on past it).
    head_cut: bool,
    /// The line itself was cut at the splitter's cap.
    truncated: bool,
}

#[derive(Debug)]
struct PendingTool {
    id: String,
    name: String,
    summary: String,
    /// The file the call targets, if any.
    path: Option<String>,
    since: Instant,
}

/// Accumulated facts of one attempt.
#[derive(Debug)]
pub struct Observation {
    started: Instant,
    keep_events: bool,
    secrets: Secrets,
    /// The session id the stream reported (init, or any later event).
    pub session_id: Option<String>,
    pub model: Option<String>,
    pub cli_version: Option<String>,
    pub first_event_after: Option<Duration>,
    /// When the first model output (text or tool call) arrived.
    pub first_token_after: Option<Duration>,
    /// Time spent in tool calls, by tool name (from the call to its result).
    pub tool_time: BTreeMap<String, Duration>,
    /// The `result` event, when one arrived.
    pub result: Option<ResultEvent>,
    /// The `error` and status of the last synthetic (CLI-made) error message.
    pub synthetic_error: Option<SyntheticError>,
    /// The HTTP status of the last `api_retry` event.
    pub last_retry_status: Option<u16>,
    pub api_retries: u64,
    /// Usage summed over assistant messages (the result's own total wins when present).
    pub streamed_usage: Usage,
    /// Distinct assistant message ids (one message spans several lines, one per block).
    assistant_messages: HashSet<String>,
    pub tool_calls: BTreeMap<String, u64>,
    /// Tool calls issued and not yet answered, oldest first.
    pending_tools: Vec<PendingTool>,
    pub events: u64,
    pub json_decode_errors: u64,
    pub truncated_lines: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub stdout_lines: u64,
    pub stderr_lines: u64,
    last_lines: VecDeque<KeptLine>,
    all_messages: Vec<Box<RawValue>>,
    /// Bytes of the events kept in `all_messages`.
    all_messages_bytes: usize,
    /// Events (and their bytes) not kept because `all_messages` was full.
    dropped_messages: u64,
    dropped_message_bytes: u64,
    /// The sandbox the child runs under, to recognise denials.
    policy: Option<Arc<Policy>>,
    /// Sandbox denials the agent ran into.
    pub denials: Vec<Denial>,
    /// Files of Edit/MultiEdit calls whose result was an error (the weak-model fallback's
    /// first trigger, DESIGN §8).
    pub failed_edits: Vec<String>,
    /// The input of the last `StructuredOutput` call (`--json-schema`, DESIGN §9), valid
    /// or not: what the model last offered as its structured answer.
    pub last_structured_call: Option<serde_json::Value>,
    /// Whether the run offered the `ask_user` tool (DESIGN §9).
    questions_enabled: bool,
    /// The run offered `ask_user`, but the CLI reported coder's MCP server as not
    /// connected: the model could not ask.
    pub questions_unavailable: bool,
    /// The questions of the first valid `ask_user` call: the attempt ends here.
    pub questions: Option<Vec<crate::pipeline::questions::Question>>,
}

/// Words that show up in the tool results of denied operations: a part of each message
/// [`detect_denials`] recognises. Only tool results holding one are decoded for denial
/// detection.
///
/// The errno names the detector also knows (`EACCES`, `EPERM`, `EROFS`, `EBUSY`, `EXDEV`)
/// are not searched for: the tools print them with their message (Node's `EACCES:
/// permission denied, open '…'`, `EBUSY: resource busy or locked`, Python's `[Errno 13]
/// Permission denied`), so the messages find them, and each marker costs a search of every
/// tool result. The last two are what making a file at a name held absent answers (a
/// denial only when the line names such a name: `sandbox::Policy::is_held_file`).
const DENIAL_MARKERS: [&[u8]; 7] = [
    b"ermission denied",
    b"peration not permitted",
    b"ead-only file system",
    b"esource busy",
    b"ross-device link",
    b"ot a directory",
    b"irectory nonexistent",
];

/// Whether `bytes` hold one of the [`DENIAL_MARKERS`].
///
/// A tool result can be megabytes, and every one is searched: the markers are found in a
/// single pass (a packed multi-pattern search), not one pass per marker.
fn has_denial_marker(bytes: &[u8]) -> bool {
    use std::sync::LazyLock;
    static MARKERS: LazyLock<Option<aho_corasick::packed::Searcher>> =
        LazyLock::new(|| aho_corasick::packed::Searcher::new(DENIAL_MARKERS));
    match &*MARKERS {
        Some(markers) => markers.find(bytes).is_some(),
        // Building the automaton of seven short words cannot fail; were it to, a search
        // per marker gives the same answer.
        None => DENIAL_MARKERS
            .iter()
            .any(|marker| memchr::memmem::find(bytes, marker).is_some()),
    }
}

impl Observation {
    /// `keep_events`: keep every parsed event for `all_messages`. `secrets`: strings that
    /// must never be echoed back (credentials from the child's environment).
    pub fn new(started: Instant, keep_events: bool, secrets: Vec<String>) -> Self {
        Observation {
            started,
            keep_events,
            secrets: Secrets::new(secrets),
            session_id: None,
            model: None,
            cli_version: None,
            first_event_after: None,
            first_token_after: None,
            tool_time: BTreeMap::new(),
            result: None,
            synthetic_error: None,
            last_retry_status: None,
            api_retries: 0,
            streamed_usage: Usage::default(),
            assistant_messages: HashSet::new(),
            tool_calls: BTreeMap::new(),
            pending_tools: Vec::new(),
            events: 0,
            json_decode_errors: 0,
            truncated_lines: 0,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout_lines: 0,
            stderr_lines: 0,
            last_lines: VecDeque::with_capacity(LAST_LINES),
            all_messages: Vec::new(),
            all_messages_bytes: 0,
            dropped_messages: 0,
            dropped_message_bytes: 0,
            policy: None,
            denials: Vec::new(),
            failed_edits: Vec::new(),
            last_structured_call: None,
            questions_enabled: false,
            questions_unavailable: false,
            questions: None,
        }
    }

    /// Recognise calls of the `ask_user` tool (offered when questions are on).
    pub fn with_questions(mut self, enabled: bool) -> Self {
        self.questions_enabled = enabled;
        self
    }

    /// Recognise sandbox denials (in tool results, and reads of masked files) under `policy`.
    pub fn with_sandbox(mut self, policy: Option<Arc<Policy>>) -> Self {
        self.policy = policy;
        self
    }

    /// Counts raw bytes as they are read (lines are counted when complete).
    pub fn count_bytes(&mut self, pipe: Pipe, n: usize) {
        match pipe {
            Pipe::Stdout => self.stdout_bytes += n as u64,
            Pipe::Stderr => self.stderr_bytes += n as u64,
        }
    }

    /// Takes one complete line. Returns the decoded event for stdout lines that are events.
    pub fn observe_line(&mut self, pipe: Pipe, line: &Line) -> Option<Decoded> {
        self.observe_line_before(pipe, line, 0)
    }

    /// [`Observation::observe_line`] of a line that at least `lines_after` more lines will
    /// surely follow (the rest of the lines read with it, which are all handled, whatever
    /// happens, before `last_lines` is read). A line followed by [`LAST_LINES`] or more
    /// cannot be among the last ones, so its head is not copied: on a fast stream that
    /// copy cost as much as the splitter's copy of the whole stream.
    pub fn observe_line_before(
        &mut self,
        pipe: Pipe,
        line: &Line,
        lines_after: usize,
    ) -> Option<Decoded> {
        if lines_after < LAST_LINES {
            self.remember_line(line);
        }
        match pipe {
            Pipe::Stderr => {
                self.stderr_lines += 1;
                None
            }
            Pipe::Stdout => {
                self.stdout_lines += 1;
                self.observe_stdout(line)
            }
        }
    }

    fn observe_stdout(&mut self, line: &Line) -> Option<Decoded> {
        if line.bytes.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let decoded = if line.truncated() {
            self.truncated_lines += 1;
            Err(DecodeError::Truncated)
        } else if line.bytes.len() > LONG_LINE_BYTES {
            decode_long_line(&line.bytes)
        } else {
            decode_line(&line.bytes)
        };
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(_) => {
                self.json_decode_errors += 1;
                return None;
            }
        };
        self.events += 1;
        if self.first_event_after.is_none() {
            self.first_event_after = Some(self.started.elapsed());
        }
        if self.keep_events {
            self.keep_message(&line.bytes);
        }
        if self.policy.is_some()
            && let Event::User { tool_results } = &decoded.event
        {
            self.detect_denials_in(&line.bytes, tool_results);
        }
        self.apply(&decoded.event);
        Some(decoded)
    }

    fn apply(&mut self, event: &Event) {
        if let Some(id) = event.session_id()
            && self.session_id.is_none()
        {
            self.session_id = Some(id.to_owned());
        }
        match event {
            Event::Init {
                model,
                cli_version,
                mcp_failed,
                ..
            } => {
                self.model.clone_from(model);
                self.cli_version.clone_from(cli_version);
                self.questions_unavailable |= self.questions_enabled
                    && mcp_failed
                        .iter()
                        .any(|name| name == crate::pipeline::questions::SERVER_NAME);
            }
            Event::ApiRetry { error_status, .. } => {
                self.api_retries += 1;
                self.last_retry_status = *error_status;
            }
            Event::Assistant(message) => self.apply_assistant(message),
            Event::User { tool_results } => self.finish_tools(tool_results),
            Event::Result(result) => {
                self.result = Some(result.clone());
            }
            Event::Other { .. } => {}
        }
    }

    /// An assistant message: a synthetic error noted; a real one's usage counted once per
    /// message id (the CLI prints a message once per content block), its tool calls
    /// counted and pending until their results.
    fn apply_assistant(&mut self, message: &AssistantEvent) {
        if message.is_synthetic() {
            self.synthetic_error = Some(SyntheticError {
                error: message.error.clone(),
                http_status: message.api_error_status,
                text: message.texts.join(" "),
            });
            return;
        }
        if let Some(id) = &message.message_id
            && self.assistant_messages.insert(id.clone())
            && let Some(usage) = message.usage
        {
            add_usage(&mut self.streamed_usage, usage);
        }
        if self.first_token_after.is_none()
            && (!message.texts.is_empty() || !message.tool_uses.is_empty())
        {
            self.first_token_after = Some(self.started.elapsed());
        }
        for tool in &message.tool_uses {
            self.apply_tool_call(tool);
        }
    }

    fn apply_tool_call(&mut self, tool: &ToolUse) {
        if let Some(input) = &tool.structured_input {
            self.last_structured_call = Some(input.clone());
        }
        if self.questions_enabled
            && self.questions.is_none()
            && tool.name == crate::pipeline::questions::CLI_TOOL_NAME
            && let Some(input) = &tool.input
        {
            // An invalid call is answered with an error by the server (the same check),
            // and the model may call again.
            self.questions = crate::pipeline::questions::parse_questions(input).ok();
        }
        self.note_masked_access(&tool.name, tool.path.as_deref());
        *self.tool_calls.entry(tool.name.clone()).or_default() += 1;
        self.pending_tools.push(PendingTool {
            id: tool.id.clone(),
            name: tool.name.clone(),
            summary: tool.summary.clone(),
            path: tool.path.clone(),
            since: Instant::now(),
        });
    }

    /// Tool results: each ends its pending call (its time counted); a failed edit's path
    /// noted once.
    fn finish_tools(&mut self, tool_results: &[ToolResult]) {
        for result in tool_results {
            let Some(index) = self
                .pending_tools
                .iter()
                .position(|p| p.id == result.tool_use_id)
            else {
                continue;
            };
            let done = self.pending_tools.remove(index);
            if result.is_error
                && matches!(done.name.as_str(), "Edit" | "MultiEdit")
                && let Some(path) = &done.path
                && !self.failed_edits.contains(path)
            {
                self.failed_edits.push(path.clone());
            }
            *self.tool_time.entry(done.name).or_default() += done.since.elapsed();
        }
    }

    /// Keeps the head of `line` for `last_lines`, as raw bytes: decoding, redaction and the
    /// cut happen when the lines are read ([`Observation::last_lines`]), for the 20 that are
    /// kept, not for every line of the stream.
    fn remember_line(&mut self, line: &Line) {
        // A character takes at most 4 bytes, so the first LAST_LINE_CHARS characters lie in
        // this head, and the spare bytes keep a character cut at its end (decoded
        // differently in the head than in the whole line) out of the kept ones.
        let head = &line.bytes[..line.bytes.len().min(LAST_LINE_CHARS * 4 + 4)];
        let mut kept = if self.last_lines.len() == LAST_LINES {
            self.last_lines.pop_front().unwrap_or_default()
        } else {
            KeptLine::default()
        };
        kept.head.clear();
        kept.head.extend_from_slice(head);
        kept.head_cut = head.len() < line.bytes.len() || line.truncated();
        kept.truncated = line.truncated();
        self.last_lines.push_back(kept);
    }

    /// One kept line as `last_lines` shows it: decoded (lossily where it is not UTF-8),
    /// redacted before it is cut (so a secret across the cut is still found whole, and one
    /// across the end of the head leaves no piece of itself), cut at LAST_LINE_CHARS. A
    /// line `after_bearer` (the one before ended in `Bearer` or an `Authorization` header)
    /// has a token at its start redacted too.
    fn render(&self, line: &KeptLine, after_bearer: bool) -> String {
        // from_utf8 checks ASCII a word at a time; the lossy decoder, needed only for lines
        // that are not UTF-8, goes byte by byte.
        let text = match std::str::from_utf8(&line.head) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(&line.head),
        };
        let ending = if line.head_cut {
            Ending::Cut
        } else {
            Ending::Whole
        };
        let mut text = self.secrets.redact_ending(&text, ending);
        if after_bearer
            && let std::borrow::Cow::Owned(out) = crate::text::redact::redact_continued(&text)
        {
            text = std::borrow::Cow::Owned(out);
        }
        let (head_kept, more) = match text.char_indices().nth(LAST_LINE_CHARS) {
            Some((end, _)) => (&text[..end], true),
            None => (&text[..], false),
        };
        let mut kept = head_kept.to_owned();
        if more || line.truncated {
            kept.push_str(" …[line truncated]");
        }
        kept
    }

    /// A file tool aimed at a masked secret: the agent sees an empty file, coder records
    /// the denial.
    fn note_masked_access(&mut self, tool: &str, path: Option<&str>) {
        let (Some(policy), Some(path)) = (&self.policy, path) else {
            return;
        };
        let absolute = crate::sandbox::denial::absolute_in(&policy.workspace, path);
        if policy.is_masked(&absolute) {
            self.push_denial(Denial {
                tool: tool.to_owned(),
                path: Some(path.to_owned()),
                host: None,
                class: DenialClass::NonAccessible,
            });
        }
    }

    /// Looks for denials in the content of `results`, decoded from `line`. Only the
    /// results' own content is searched: the CLI repeats each result outside the message
    /// (`tool_use_result`), and that copy says nothing more.
    fn detect_denials_in(&mut self, line: &[u8], results: &[ToolResult]) {
        for result in results {
            // Without a located content, the result has none: on the general reading of a
            // line (see `decode_line`) a user message yields no results at all.
            let Some(span) = &result.content else {
                continue;
            };
            let raw = &line[span.clone()];
            if !has_denial_marker(raw) {
                continue;
            }
            let text = serde_json::from_slice::<serde_json::Value>(raw)
                .ok()
                .and_then(|content| content_text(&content, Join::Lines));
            let Some(text) = text else {
                continue;
            };
            let tool = self
                .pending_tools
                .iter()
                .find(|p| p.id == result.tool_use_id)
                .map_or("?".to_owned(), |p| p.name.clone());
            for denial in detect_denials(&tool, &text, self.policy.as_deref()) {
                self.push_denial(denial);
            }
        }
    }

    fn push_denial(&mut self, denial: Denial) {
        // Bounded: a looping agent must not grow the envelope without limit.
        if self.denials.len() < 100 && !self.denials.contains(&denial) {
            self.denials.push(denial);
        }
    }

    /// The last lines of output, stdout and stderr in arrival order.
    pub fn last_lines(&self) -> Vec<String> {
        let mut awaiting = false;
        self.last_lines
            .iter()
            .map(|l| {
                let text = self.render(l, awaiting);
                awaiting = !l.head_cut && crate::text::redact::awaits_token(&text);
                text
            })
            .collect()
    }

    /// Keeps one event for `all_messages`, up to [`ALL_MESSAGES_MAX_BYTES`] in all; past
    /// that, events are only counted.
    fn keep_message(&mut self, bytes: &[u8]) {
        if self.all_messages_bytes + bytes.len() > ALL_MESSAGES_MAX_BYTES {
            self.dropped_messages += 1;
            self.dropped_message_bytes += bytes.len() as u64;
            return;
        }
        // The line decoded as JSON, so it is a valid raw value.
        if let Ok(text) = std::str::from_utf8(bytes)
            && let Ok(raw) = RawValue::from_string(text.trim().to_owned())
        {
            self.all_messages_bytes += bytes.len();
            self.all_messages.push(raw);
        }
    }

    /// Every parsed event, in order (empty unless asked for). Past the cap, the list ends
    /// with one marker object instead of the events that did not fit:
    /// `{"type": "coder_truncated", "dropped_messages": N, "dropped_bytes": B,
    /// "kept_bytes": K, "max_bytes": M}`.
    pub fn take_all_messages(&mut self) -> Vec<Box<RawValue>> {
        let mut messages = std::mem::take(&mut self.all_messages);
        if self.dropped_messages > 0 {
            let marker = serde_json::json!({
                "type": "coder_truncated",
                "dropped_messages": self.dropped_messages,
                "dropped_bytes": self.dropped_message_bytes,
                "kept_bytes": self.all_messages_bytes,
                "max_bytes": ALL_MESSAGES_MAX_BYTES,
            });
            if let Ok(raw) = RawValue::from_string(marker.to_string()) {
                messages.push(raw);
            }
        }
        messages
    }

    /// The tool call issued last and not yet answered, as `Bash(npm test)`.
    pub fn pending_tool(&self) -> Option<&str> {
        self.pending_tools.last().map(|p| p.summary.as_str())
    }

    /// Model turns: the result's count when known, else distinct assistant messages.
    pub fn turns(&self) -> u64 {
        self.result
            .as_ref()
            .and_then(|r| r.num_turns)
            .unwrap_or(self.assistant_messages.len() as u64)
    }

    /// Token usage: the result's total when known, else the sum over streamed messages.
    pub fn usage(&self) -> Usage {
        self.result
            .as_ref()
            .and_then(|r| r.usage)
            .unwrap_or(self.streamed_usage)
    }

    /// A one-line, human-readable head of the last stderr-ish output, for messages.
    pub fn last_line_head(&self) -> Option<String> {
        self.last_lines()
            .into_iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| one_line(&l, 200))
    }
}

fn add_usage(total: &mut Usage, usage: Usage) {
    total.input_tokens += usage.input_tokens;
    total.output_tokens += usage.output_tokens;
    total.cache_creation_input_tokens += usage.cache_creation_input_tokens;
    total.cache_read_input_tokens += usage.cache_read_input_tokens;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Line {
        Line {
            bytes: text.as_bytes().to_vec(),
            dropped: 0,
        }
    }

    #[test]
    fn ask_user_calls_are_questions_only_when_offered_and_valid() {
        let call = |input: &str| {
            line(&format!(
                r#"{{"type":"assistant","message":{{"id":"m1","content":[{{"type":"tool_use","id":"t1","name":"mcp__coder__ask_user","input":{input}}}]}}}}"#
            ))
        };
        let valid = r#"{"questions":[{"question":"Which?"}]}"#;
        let mut off = Observation::new(Instant::now(), false, vec![]);
        off.observe_line(Pipe::Stdout, &call(valid));
        assert_eq!(off.questions, None);
        let mut on = Observation::new(Instant::now(), false, vec![]).with_questions(true);
        on.observe_line(Pipe::Stdout, &call(r#"{"questions":[]}"#));
        assert_eq!(
            on.questions, None,
            "an invalid call is the server's to refuse"
        );
        on.observe_line(Pipe::Stdout, &call(valid));
        assert_eq!(
            on.questions.as_ref().map(|q| q[0].question.as_str()),
            Some("Which?")
        );
        let mut failed = Observation::new(Instant::now(), false, vec![]).with_questions(true);
        failed.observe_line(
            Pipe::Stdout,
            &line(r#"{"type":"system","subtype":"init","mcp_servers":[{"name":"coder","status":"failed"}]}"#),
        );
        assert!(failed.questions_unavailable);
    }

    #[test]
    fn tracks_pending_tools_and_counts() {
        let mut obs = Observation::new(Instant::now(), true, vec![]);
        obs.observe_line(
            Pipe::Stdout,
            &line(r#"{"type":"system","subtype":"init","session_id":"abc"}"#),
        );
        obs.observe_line(
            Pipe::Stdout,
            &line(
                r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"make"}}],"usage":{"input_tokens":5,"output_tokens":2}}}"#,
            ),
        );
        assert_eq!(obs.pending_tool(), Some("Bash(make)"));
        obs.observe_line(
            Pipe::Stdout,
            &line(
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}"#,
            ),
        );
        assert_eq!(obs.pending_tool(), None);
        obs.observe_line(Pipe::Stdout, &line("not json"));
        obs.observe_line(Pipe::Stderr, &line("warning"));
        assert_eq!(obs.session_id.as_deref(), Some("abc"));
        assert_eq!(obs.json_decode_errors, 1);
        assert_eq!(obs.tool_calls.get("Bash"), Some(&1));
        assert_eq!(obs.turns(), 1);
        assert_eq!(obs.usage().input_tokens, 5);
        assert_eq!(obs.take_all_messages().len(), 3);
        assert_eq!(obs.last_lines().last().map(String::as_str), Some("warning"));
    }

    #[test]
    fn denials_are_read_from_the_results_own_content() {
        let workspace = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        // The policy's per-run directories go to a scratch state, not the user's.
        let mut options = crate::sandbox::PolicyOptions::new(
            crate::sandbox::Mode::WorkspaceWrite,
            workspace.path(),
        );
        options.config_dir = Some(state.path().join("claude"));
        options.runs_dir = Some(state.path().join("runs"));
        let policy = crate::sandbox::Policy::resolve(&options).unwrap();
        let mut obs =
            Observation::new(Instant::now(), false, vec![]).with_sandbox(Some(Arc::new(policy)));
        let call = |id: &str| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"m{id}","content":[{{"type":"tool_use","id":"{id}","name":"Bash","input":{{"command":"x"}}}}]}}}}"#
            )
        };
        // The CLI repeats the output outside the message; only the message's copy counts.
        obs.observe_line(Pipe::Stdout, &line(&call("t1")));
        obs.observe_line(
            Pipe::Stdout,
            &line(
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"fine"}]},"tool_use_result":{"stdout":"cat: /etc/shadow: Permission denied"}}"#,
            ),
        );
        assert!(obs.denials.is_empty());
        obs.observe_line(Pipe::Stdout, &line(&call("t2")));
        obs.observe_line(
            Pipe::Stdout,
            &line(
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"touch: cannot touch '/usr/x': Read-only file system"}]}]}}"#,
            ),
        );
        obs.observe_line(Pipe::Stdout, &line(&call("t3")));
        obs.observe_line(
            Pipe::Stdout,
            &line(
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t3","content":"rm: cannot remove '/srv/y': Device or resource busy"}]}}"#,
            ),
        );
        let found: Vec<(&str, Option<&str>, DenialClass)> = obs
            .denials
            .iter()
            .map(|d| (d.tool.as_str(), d.path.as_deref(), d.class))
            .collect();
        assert_eq!(
            found,
            vec![
                ("Bash", Some("/usr/x"), DenialClass::ReadOnly),
                ("Bash", Some("/srv/y"), DenialClass::ReadOnly),
            ]
        );
    }

    #[test]
    fn denial_markers_are_found_anywhere() {
        for marker in DENIAL_MARKERS {
            for at in [0, 16 * 1024 - 3, 16 * 1024, 3 * 16 * 1024 - 7, 100_000] {
                let mut text = vec![b'x'; 100_000 + marker.len()];
                text[at..at + marker.len()].copy_from_slice(marker);
                assert!(has_denial_marker(&text), "{marker:?} at {at}");
                text[at] = b'y';
                assert!(!has_denial_marker(&text), "{marker:?} at {at}");
            }
        }
        assert!(!has_denial_marker(b""));
    }

    #[test]
    fn last_lines_cut_long_lines_at_a_character() {
        let mut obs = Observation::new(Instant::now(), false, vec![]);
        obs.observe_line(Pipe::Stderr, &line(&"é".repeat(5000)));
        obs.observe_line(Pipe::Stderr, &line(&"𝄞".repeat(LAST_LINE_CHARS)));
        obs.observe_line(Pipe::Stderr, &line(&"x".repeat(LAST_LINE_CHARS)));
        let last = obs.last_lines();
        assert_eq!(
            last[0],
            format!("{} …[line truncated]", "é".repeat(LAST_LINE_CHARS))
        );
        assert_eq!(last[1], "𝄞".repeat(LAST_LINE_CHARS));
        assert_eq!(last[2], "x".repeat(LAST_LINE_CHARS));
    }

    #[test]
    fn last_lines_are_the_same_when_lines_known_to_be_followed_are_not_kept() {
        let lines: Vec<Line> = (0..57).map(|i| line(&format!("line {i}"))).collect();
        let mut every = Observation::new(Instant::now(), false, vec![]);
        let mut batched = Observation::new(Instant::now(), false, vec![]);
        for (i, l) in lines.iter().enumerate() {
            every.observe_line(Pipe::Stderr, l);
            // Batches of 25, as the pipe reader hands them over.
            let after = 24 - i % 25;
            batched.observe_line_before(Pipe::Stderr, l, after.min(lines.len() - 1 - i));
        }
        assert_eq!(batched.last_lines(), every.last_lines());
        assert_eq!(batched.last_lines()[0], "line 37");
        assert_eq!(batched.stderr_lines, 57);
    }

    #[test]
    fn a_bearer_token_on_the_next_stderr_line_is_redacted() {
        let mut obs = Observation::new(Instant::now(), false, vec![]);
        for text in [
            "> GET /v1/models HTTP/1.1",
            "> Authorization: Bearer",
            "  Tk9Lm3Np7Qr1St5UvWxYz2Gh8 rejected",
            "< HTTP/1.1 401",
        ] {
            obs.observe_line(Pipe::Stderr, &line(text));
        }
        let last = obs.last_lines();
        assert_eq!(last[2], "  [REDACTED] rejected");
        assert_eq!(last[3], "< HTTP/1.1 401");
        assert!(!obs.last_line_head().unwrap_or_default().contains("Tk9Lm3"));
    }

    #[test]
    fn last_lines_are_bounded_and_redacted() {
        let mut obs = Observation::new(Instant::now(), false, vec!["sk-secret-123".into()]);
        for i in 0..30 {
            obs.observe_line(Pipe::Stderr, &line(&format!("line {i} sk-secret-123")));
        }
        let last = obs.last_lines();
        assert_eq!(last.len(), LAST_LINES);
        assert_eq!(last[0], "line 10 [REDACTED]");
    }
}
