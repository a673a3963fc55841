//! The run-mode command line and the `--request` JSON form, both turned into one validated
//! [`RunRequest`].
//!
//! Validation happens here, before anything is spawned, so every mistake a caller can make
//! with arguments becomes a `config_error` envelope with a message that says what to change.
//! Values clap cannot type-check without producing its own usage error (durations, counts,
//! session ids) are taken as text and checked here, which keeps those mistakes on the
//! `config_error` exit code (78) rather than clap's usage code (2).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgAction, Parser};
use serde::Deserialize;
use uuid::Uuid;

use crate::config::BackendArgs;
use crate::pipeline::prompt::{PromptArgs, assemble_prompt};
use crate::pipeline::questions::Question;
use crate::stream::DEFAULT_MAX_LINE_BYTES;

/// `--backend` of a run (and of `coder plan`): the shared help (also `coder doctor`'s) plus
/// the routing choice only a run takes.
pub const RUN_BACKEND_HELP: &str = "Backend profile: a preset (glm, glm-cn, deepseek, minimax, \
     minimax-cn, anthropic, inherit), a [backends.NAME] table of the config file, \
     replay:CASSETTE, or auto[:NAME,NAME,…] to let coder pick by what has worked before \
     [default: the config file's default_backend, else inherit]";

/// Confinement mode of the child (DESIGN §5): the sandbox's own mode type.
pub use crate::sandbox::Mode as SandboxMode;

/// `coder --cd DIR [OPTIONS] [PROMPT | -]`
#[derive(Debug, Parser)]
#[command(
    name = "coder",
    version,
    allow_negative_numbers = true,
    about = "Run one coding task through the claude CLI: supervised, confined, one JSON envelope on stdout.",
    after_help = "Other commands: coder plan | coder doctor | coder prompt | coder runs list|show | coder route stats|explain|forget | coder replay serve | coder sandbox -- CMD | coder mcp | coder fs VERB\n\
                  Exit codes: 0 success, 1 task failed, 2 usage, 3 verify failed, 4 scope violation, 5 needs input (questions), 6 schema mismatch, 70 internal, 71 sandbox, 74 stdout not writable (the envelope goes to stderr), 78 config, \
                  124 timeout, 127 claude not found, 129/130/143 cancelled (SIGHUP/SIGINT/SIGTERM).",
    mut_arg("backend", |a| a.help(RUN_BACKEND_HELP))
)]
pub struct RunArgs {
    /// The task text; read from stdin when absent or `-`.
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,

    /// The task text (alternative to the positional argument).
    #[arg(long = "prompt", visible_alias = "PROMPT", value_name = "TEXT")]
    pub prompt_flag: Option<String>,

    /// Workspace directory the agent works in (required).
    #[arg(long = "cd", value_name = "DIR")]
    pub cd: Option<PathBuf>,

    /// Confinement: read-only, workspace-write (default) or danger-full-access.
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,

    /// Resume this session instead of starting a new one.
    #[arg(long = "session-id", visible_alias = "SESSION_ID", value_name = "UUID")]
    pub session_id: Option<String>,

    /// Add every stream event to the envelope as `all_messages`.
    #[arg(long = "return-all-messages", visible_alias = "return_all_messages", action = ArgAction::SetTrue)]
    pub return_all_messages: bool,

    /// Add `metrics` to the envelope.
    #[arg(long = "return-metrics", visible_alias = "return_metrics", action = ArgAction::SetTrue)]
    pub return_metrics: bool,

    /// Idle timeout in seconds: no output for this long stops the run [default: 300].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<String>,

    /// Hard cap on the whole run in seconds, 0 for none [default: 1800].
    #[arg(
        long = "max-duration",
        visible_alias = "max_duration",
        value_name = "SECS"
    )]
    pub max_duration: Option<String>,

    /// Retries of failed, side-effect-free attempts [default: 0].
    #[arg(long = "max-retries", visible_alias = "max_retries", value_name = "N")]
    pub max_retries: Option<String>,

    /// Print metrics as one JSON line on stderr.
    #[arg(long = "log-metrics", visible_alias = "log_metrics", action = ArgAction::SetTrue)]
    pub log_metrics: bool,

    /// The claude executable [default: `claude` on PATH].
    #[arg(long = "claude-bin", env = "CODER_CLAUDE_BIN", value_name = "PATH")]
    pub claude_bin: Option<PathBuf>,

    /// Read the parameters from a JSON object (file or `-` for stdin); flags override it.
    #[arg(long, value_name = "FILE|-")]
    pub request: Option<PathBuf>,

    /// Longest stdout/stderr line kept, in bytes; longer lines are cut and counted.
    #[arg(long = "max-line-bytes", value_name = "BYTES", hide = true)]
    pub max_line_bytes: Option<String>,

    /// Stop the agent after this many model turns (`max_turns` error) [default: no limit].
    #[arg(long = "max-turns", visible_alias = "max_turns", value_name = "N")]
    pub max_turns: Option<String>,

    /// Write the run transcript (JSONL) here instead of coder's state directory.
    #[arg(long, value_name = "PATH")]
    pub transcript: Option<PathBuf>,

    /// No progress display on stderr, even on a terminal.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Seconds between SIGTERM and SIGKILL when the child tree is stopped [default: 3]; a
    /// second SIGINT (Ctrl-C again) during it sends SIGKILL at once.
    #[arg(long = "kill-grace", value_name = "SECS")]
    pub kill_grace: Option<String>,

    /// The run's id, chosen by the caller (`coder mcp` gives its runs the id it answers
    /// with, so `coder runs show` takes the same one). Letters, digits, `.`, `-`, `_`.
    #[arg(long = "run-id", value_name = "ID", hide = true)]
    pub run_id: Option<String>,

    /// Who wrote the `--request` JSON: messages name its fields as that caller spelt them
    /// (`coder mcp` passes `mcp-tool`: its caller wrote the `coder` tool's arguments).
    #[arg(
        long = "request-from",
        value_name = "WHO",
        hide = true,
        value_enum,
        default_value_t
    )]
    pub request_from: RequestFrom,

    /// Extra sandbox roots and options.
    #[command(flatten, next_help_heading = "Sandbox")]
    pub sandbox_args: crate::sandbox::AgentSandboxArgs,

    /// Checked outcomes: changes, verify, repair, scope.
    #[command(flatten, next_help_heading = "Verified outcomes")]
    pub outcome_args: OutcomeArgs,

    /// Backend profile, config file and model overrides.
    #[command(flatten, next_help_heading = "Backend")]
    pub backend: BackendArgs,

    /// The store shared by many runs: slots, cooldowns, routing.
    #[command(flatten, next_help_heading = "Store")]
    pub store: crate::store::StoreArgs,

    /// Structure added around the task (contract, guardrails, codex, lists).
    #[command(flatten, next_help_heading = "Prompt")]
    pub prompt_framing: PromptArgs,

    /// Many runs at once: worktrees (DESIGN §10).
    #[command(flatten, next_help_heading = "Many runs at once")]
    pub many: ManyRunsArgs,

    /// Questions: the ask_user tool and answers (DESIGN §9).
    #[command(flatten, next_help_heading = "Questions")]
    pub questions: crate::pipeline::questions::QuestionArgs,
}

/// `--worktree` and `--worktree-base` (DESIGN §10).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ManyRunsArgs {
    /// Run (and --verify) in a new checkout of HEAD on branch coder/<run-id>, committed at
    /// the end; the checkout is removed, the branch kept. Uncommitted changes are not in it.
    #[arg(long, action = ArgAction::SetTrue)]
    pub worktree: bool,

    /// The commit the --worktree branch starts from [default: HEAD].
    #[arg(
        long = "worktree-base",
        value_name = "REF",
        requires = "worktree",
        value_parser = crate::text::non_blank
    )]
    pub worktree_base: Option<String>,
}

/// The flags of DESIGN §8 (verified outcomes), as given.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct OutcomeArgs {
    /// Add the unified diff of the run's changes to the envelope (`diff`, capped).
    #[arg(long = "return-diff", visible_alias = "return_diff", action = ArgAction::SetTrue)]
    pub return_diff: bool,

    /// Check the work with `sh -c CMD` in the workspace, under the run's sandbox, before
    /// the agent (baseline) and after it; a final failure is `verify_failed`.
    #[arg(long, value_name = "CMD")]
    pub verify: Option<String>,

    /// Skip the baseline check before the agent.
    #[arg(long = "no-verify-baseline", action = ArgAction::SetTrue)]
    pub no_verify_baseline: bool,

    /// Limit of each check in seconds; the check's process tree is stopped then [default: 600].
    #[arg(long = "verify-timeout", value_name = "SECS")]
    pub verify_timeout: Option<String>,

    /// Turns the agent gets to fix a failing check, 0 for none [default: 1].
    #[arg(
        long = "repair-turns",
        visible_alias = "repair_turns",
        value_name = "N"
    )]
    pub repair_turns: Option<String>,

    /// Paths the run may change (repeatable glob, relative to the workspace); a change
    /// outside them is `scope_violation` (nothing is reverted).
    #[arg(long, value_name = "GLOB")]
    pub scope: Vec<String>,

    /// The final answer must be JSON valid against this JSON Schema (a file, or the
    /// schema itself when it starts with `{`); it is returned as `structured`. An invalid
    /// answer gets one repair turn, then the run fails with `schema_mismatch`.
    #[arg(
        long = "json-schema",
        visible_alias = "json_schema",
        value_name = "FILE|JSON",
        value_parser = crate::text::non_blank
    )]
    pub json_schema: Option<String>,
}

/// The `--verify` settings, validated.
#[derive(Debug, Clone)]
pub struct VerifyConfig {
    pub command: String,
    pub baseline: bool,
    pub timeout: Duration,
    pub repair_turns: u32,
}

/// What a run checks about its outcome (DESIGN §8), validated.
#[derive(Debug, Clone, Default)]
pub struct OutcomeChecks {
    pub return_diff: bool,
    pub verify: Option<VerifyConfig>,
    pub scope: Option<crate::workspace::scope::Scope>,
    /// `--json-schema` (DESIGN §9): the schema the final answer must match.
    pub json_schema: Option<crate::pipeline::structured::JsonSchema>,
}

pub const DEFAULT_VERIFY_TIMEOUT: Duration = Duration::from_secs(600);

/// Linux's `MAX_ARG_STRLEN` (32 pages): the longest single argument, its NUL included.
const MAX_ARGUMENT_BYTES: usize = 32 * 4096;

/// Who wrote a `--request` JSON, so a message names a field as its writer spelt it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RequestFrom {
    /// A file or stdin the caller wrote: `"verify_timeout" in the --request JSON`.
    #[default]
    File,
    /// The arguments of `coder mcp`'s `coder` tool, which the server hands over as JSON on
    /// stdin: named as the tool's argument, `verify_timeout`.
    McpTool,
}

/// A run parameter that messages name: as its flag when the command line gave it, else as
/// its writer spelt it ([`RequestFrom`]).
#[derive(Debug, Clone, Copy)]
enum Key {
    Verify,
    VerifyTimeout,
    RepairTurns,
    NoVerifyBaseline,
    Answers,
    SessionId,
    Worktree,
    WorktreeBase,
    Scope,
    JsonSchema,
    Cd,
}

impl Key {
    fn spelt(self) -> (&'static str, &'static str) {
        match self {
            Key::Verify => ("--verify", "verify"),
            Key::VerifyTimeout => ("--verify-timeout", "verify_timeout"),
            Key::RepairTurns => ("--repair-turns", "repair_turns"),
            Key::NoVerifyBaseline => ("--no-verify-baseline", "no_verify_baseline"),
            Key::Answers => ("--answers", "answers"),
            Key::SessionId => ("--session-id", "SESSION_ID"),
            Key::Worktree => ("--worktree", "worktree"),
            Key::WorktreeBase => ("--worktree-base", "worktree_base"),
            Key::Scope => ("--scope", "scope"),
            Key::JsonSchema => ("--json-schema", "json_schema"),
            Key::Cd => ("--cd", "cd"),
        }
    }

    /// The name of this key as given: by a flag (`by_flag`), else by `from`.
    fn name(self, by_flag: bool, from: RequestFrom) -> String {
        let (flag, field) = self.spelt();
        match (by_flag, from) {
            (true, _) => flag.to_owned(),
            (false, RequestFrom::File) => format!("\"{field}\" in the --request JSON"),
            (false, RequestFrom::McpTool) => field.to_owned(),
        }
    }
}

/// The names of the outcome keys, each as it was given (flag or request field).
struct OutcomeNames {
    from: RequestFrom,
    verify: String,
    verify_timeout: String,
    repair_turns: String,
    no_verify_baseline: String,
    json_schema: String,
    scope: String,
}

impl OutcomeNames {
    /// `flags` are the outcome flags of the command line alone, before the request's fill.
    fn new(flags: &OutcomeArgs, from: RequestFrom) -> OutcomeNames {
        OutcomeNames {
            from,
            verify: Key::Verify.name(flags.verify.is_some(), from),
            verify_timeout: Key::VerifyTimeout.name(flags.verify_timeout.is_some(), from),
            repair_turns: Key::RepairTurns.name(flags.repair_turns.is_some(), from),
            no_verify_baseline: Key::NoVerifyBaseline.name(flags.no_verify_baseline, from),
            json_schema: Key::JsonSchema.name(flags.json_schema.is_some(), from),
            scope: Key::Scope.name(!flags.scope.is_empty(), from),
        }
    }
}

impl OutcomeArgs {
    fn validate(&self, names: &OutcomeNames) -> Result<OutcomeChecks, ArgError> {
        let verify = match &self.verify {
            Some(command) if command.trim().is_empty() => {
                return Err(ArgError::Invalid(format!(
                    "{} is empty: give the check command, e.g. 'cargo test'",
                    names.verify
                )));
            }
            // `sh -c CMD` hands CMD to the kernel as one argument, which it caps: a longer
            // one could never start, yet the agent ran and a repair turn was asked to fix
            // "Argument list too long", its prompt carrying the whole command.
            Some(command) if command.len() >= MAX_ARGUMENT_BYTES => {
                return Err(ArgError::Invalid(format!(
                    "{} is {} bytes; the kernel passes at most {} bytes in one argument \
                     to `sh -c`: put the check in a script and give 'sh check.sh'",
                    names.verify,
                    command.len(),
                    MAX_ARGUMENT_BYTES - 1
                )));
            }
            Some(command) => {
                let timeout = match &self.verify_timeout {
                    Some(text) => parse_seconds(&names.verify_timeout, text, false)?,
                    None => DEFAULT_VERIFY_TIMEOUT,
                };
                let repair_turns = match &self.repair_turns {
                    Some(text) => parse_repair_turns(&names.repair_turns, text)?,
                    None => 1,
                };
                Some(VerifyConfig {
                    command: command.clone(),
                    baseline: !self.no_verify_baseline,
                    timeout,
                    repair_turns,
                })
            }
            None => {
                // Still validated: a typo must not pass silently.
                if let Some(text) = &self.verify_timeout {
                    parse_seconds(&names.verify_timeout, text, false)?;
                }
                if let Some(text) = &self.repair_turns {
                    parse_repair_turns(&names.repair_turns, text)?;
                }
                self.refuse_verify_options_without_verify(names)?;
                None
            }
        };
        let scope = if self.scope.is_empty() {
            None
        } else {
            Some(
                crate::workspace::scope::Scope::new(&self.scope, &names.scope)
                    .map_err(|e| ArgError::Invalid(e.to_string()))?,
            )
        };
        let json_schema = self
            .json_schema
            .as_deref()
            .map(|arg| crate::pipeline::structured::JsonSchema::from_arg(arg, &names.json_schema))
            .transpose()
            .map_err(|e| ArgError::Invalid(e.to_string()))?;
        Ok(OutcomeChecks {
            return_diff: self.return_diff,
            verify,
            scope,
            json_schema,
        })
    }
}

impl OutcomeArgs {
    /// The options of a check given without the check (`--verify`, or `verify` in the
    /// `--request` JSON): they would be silently ignored, so they are refused.
    fn refuse_verify_options_without_verify(&self, names: &OutcomeNames) -> Result<(), ArgError> {
        let given = [
            (&names.verify_timeout, self.verify_timeout.is_some()),
            (&names.repair_turns, self.repair_turns.is_some()),
            (&names.no_verify_baseline, self.no_verify_baseline),
        ];
        let verify = match names.from {
            RequestFrom::File => "--verify CMD (or \"verify\" in the --request JSON)",
            RequestFrom::McpTool => "verify (the check command)",
        };
        match given.into_iter().find(|(_, set)| *set) {
            Some((name, _)) => Err(ArgError::Invalid(format!(
                "{name} needs {verify}: it only applies to a check, and without one it would \
                 be ignored"
            ))),
            None => Ok(()),
        }
    }
}

/// The base of a worktree run: `--worktree-base`, else the request's `worktree_base`. A
/// base without a worktree, or a blank one, is refused (the flag's own parser does so for
/// the command line): it would be silently ignored.
fn worktree_base(
    many: &ManyRunsArgs,
    from_file: Option<String>,
    worktree: bool,
    from: RequestFrom,
) -> Result<Option<String>, ArgError> {
    let Some(base) = many.worktree_base.clone().or(from_file) else {
        return Ok(None);
    };
    let name = Key::WorktreeBase.name(many.worktree_base.is_some(), from);
    if base.trim().is_empty() {
        return Err(ArgError::Invalid(format!(
            "{name} is empty: give a branch, tag or commit (or leave it out for HEAD)"
        )));
    }
    if !worktree {
        let needs = Key::Worktree.name(false, from);
        return Err(ArgError::Invalid(format!(
            "{name} needs {needs} (true): it is the commit a worktree run's branch starts \
             from, and without a worktree it would be ignored"
        )));
    }
    Ok(Some(base))
}

/// A caller's run id names a transcript file: plain characters only, bounded.
pub fn parse_run_id(text: &str) -> Result<String, ArgError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if !text.is_empty() && text.len() <= 64 && text.chars().all(plain) && !text.starts_with('.') {
        Ok(text.to_owned())
    } else {
        Err(ArgError::Invalid(format!(
            "--run-id must be 1 to 64 letters, digits, '.', '-' or '_', not starting with '.' (got {text:?})"
        )))
    }
}

fn parse_repair_turns(name: &str, text: &str) -> Result<u32, ArgError> {
    parse_whole(name, text, MAX_REPAIR_TURNS)
}

/// The most repair turns a check may have.
const MAX_REPAIR_TURNS: u32 = 10;
/// The most retries a run may have.
const MAX_RETRIES: u32 = 100;

/// A whole number from 0 to `max`, given as text.
fn parse_whole(name: &str, text: &str, max: u32) -> Result<u32, ArgError> {
    match text.trim().parse::<u32>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(ArgError::Invalid(format!(
            "{name} must be a whole number from 0 to {max} (got {text:?})"
        ))),
    }
}

/// The `--request` JSON object, with the spec's parameter names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestFile {
    #[serde(rename = "PROMPT", alias = "prompt")]
    pub prompt: Option<String>,
    pub cd: Option<PathBuf>,
    pub sandbox: Option<SandboxMode>,
    #[serde(rename = "SESSION_ID", alias = "session_id")]
    pub session_id: Option<String>,
    pub return_all_messages: Option<bool>,
    pub return_metrics: Option<bool>,
    pub timeout: Option<serde_json::Number>,
    pub max_duration: Option<serde_json::Number>,
    pub max_retries: Option<serde_json::Number>,
    pub log_metrics: Option<bool>,
    // Verified outcomes (DESIGN §8): a flag given on the command line wins.
    pub return_diff: Option<bool>,
    pub verify: Option<String>,
    pub no_verify_baseline: Option<bool>,
    pub verify_timeout: Option<serde_json::Number>,
    pub repair_turns: Option<serde_json::Number>,
    pub scope: Option<Vec<String>>,
    /// `--worktree` (DESIGN §10).
    pub worktree: Option<bool>,
    /// `--worktree-base`: the commit the worktree's branch starts from.
    pub worktree_base: Option<String>,
    /// `--json-schema` (DESIGN §9): the schema as an object, or a string read like the
    /// flag's argument (a file, or the schema's JSON text).
    pub json_schema: Option<serde_json::Value>,
    /// `--allow-questions` (true) or `--no-questions` (false) (DESIGN §9).
    pub allow_questions: Option<bool>,
    /// `--answers`: the list itself, or a string holding JSON or naming a file.
    pub answers: Option<serde_json::Value>,
}

impl RequestFile {
    /// The outcome flags, with the file's values where the command line gave none.
    fn fill_outcome_args(&self, mut args: OutcomeArgs) -> OutcomeArgs {
        args.return_diff |= self.return_diff.unwrap_or(false);
        args.no_verify_baseline |= self.no_verify_baseline.unwrap_or(false);
        if args.verify.is_none() {
            args.verify.clone_from(&self.verify);
        }
        if args.verify_timeout.is_none() {
            args.verify_timeout = self.verify_timeout.as_ref().map(ToString::to_string);
        }
        if args.repair_turns.is_none() {
            args.repair_turns = self.repair_turns.as_ref().map(ToString::to_string);
        }
        if args.scope.is_empty() {
            args.scope = self.scope.clone().unwrap_or_default();
        }
        args
    }
}

/// Whether the run starts a session or continues one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionChoice {
    /// A new session with this id (passed to the CLI as `--session-id`).
    New(Uuid),
    /// An existing session (passed as `--resume`).
    Resume(Uuid),
}

impl SessionChoice {
    pub fn id(self) -> Uuid {
        match self {
            SessionChoice::New(id) | SessionChoice::Resume(id) => id,
        }
    }
}

/// A `--worktree` run's ask: the ref its branch starts from, and how the caller gave
/// `worktree` and `worktree_base` (flags, `--request` fields or the MCP tool's arguments),
/// so its errors and resume hint name them as given.
#[derive(Debug, Clone)]
pub struct WorktreeAsk {
    /// The base ref; `None` for HEAD.
    pub base: Option<String>,
    pub from: RequestFrom,
    /// `--worktree` was on the command line (not only in the request).
    pub by_flag: bool,
    /// `--worktree-base` was on the command line.
    pub base_by_flag: bool,
}

/// A validated run: everything needed to build and supervise the child.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The assembled prompt, shared (not copied) by every attempt: it can be megabytes.
    pub prompt: std::sync::Arc<str>,
    /// Who wrote the request, for messages that say what to change.
    pub request_from: RequestFrom,
    /// The workspace, canonicalised.
    pub workspace: PathBuf,
    pub sandbox: SandboxMode,
    pub session: SessionChoice,
    pub return_all_messages: bool,
    pub return_metrics: bool,
    pub log_metrics: bool,
    pub idle_timeout: Duration,
    /// `None` means no cap.
    pub max_duration: Option<Duration>,
    pub max_retries: u32,
    pub claude_bin: Option<PathBuf>,
    /// Which backend to resolve (see [`crate::config::resolve_backend`]).
    pub backend: BackendArgs,
    /// Extra sandbox roots and options.
    pub sandbox_args: crate::sandbox::AgentSandboxArgs,
    pub max_line_bytes: usize,
    pub kill_grace: Duration,
    pub transcript: Option<PathBuf>,
    pub quiet: bool,
    /// `--run-id`: the caller's id for this run, else coder makes one.
    pub run_id: Option<String>,
    /// The CLI's turn limit, if any.
    pub max_turns: Option<u32>,
    /// Changes, verify, repair and scope (DESIGN §8).
    pub checks: OutcomeChecks,
    /// `--worktree`: the base ref and how the caller gave it.
    pub worktree: Option<WorktreeAsk>,
    /// The task's first line (a worktree commit's message).
    pub task_title: String,
    /// How many targets the task names (`--target` items and `--scope` globs): routing.
    pub targets: usize,
    /// Where slots, cooldowns and the routing ledger live (DESIGN §10).
    pub store: crate::store::StoreArgs,
    /// `coder plan` (the plan file to write) or `--plan` (the plan carried out).
    pub plan: Option<PlanRole>,
    /// Offer the model the `ask_user` tool (DESIGN §9): a call ends the run `needs_input`.
    /// Set by `--allow-questions` and its defaults; other run modes (plans) may set it.
    pub allow_questions: bool,
    /// The home keys' places [`RunRequest::refuse_unsuitable_workspace`] resolved, for the
    /// run's sandbox policy (taken once).
    pub key_places: crate::sandbox::KeyHandoff,
}

impl RunRequest {
    /// A workspace no confined run may have (`/`, a system tree, the home directory or an
    /// ancestor) is the caller's `--cd` to change: refused before the run starts and the
    /// change ledger walks all of it. Not part of [`RunArgs::into_request`]: `coder route
    /// explain` resolves a request only to describe its routing, from any directory.
    pub fn refuse_unsuitable_workspace(&self) -> Result<(), ArgError> {
        // A confined run's policy takes the home keys' places resolved here.
        let refusal = match self.sandbox.is_confined() {
            true => crate::sandbox::workspace_refusal_keeping(&self.workspace, &self.key_places),
            false => crate::sandbox::workspace_refusal_here(&self.workspace),
        };
        match refusal {
            Some(reason) if self.sandbox.is_confined() => Err(ArgError::Invalid(format!(
                "--cd {}: {reason}",
                self.workspace.display()
            ))),
            _ => Ok(()),
        }
    }
}

/// The task's first non-empty line, on one line (a worktree commit's message).
fn task_title(prompt: &str) -> String {
    prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map_or_else(String::new, |l| crate::text::one_line(l, 200))
}

/// The `json_schema` field of a request file or the MCP tool's call.
fn schema_of_request(
    value: &serde_json::Value,
    from: RequestFrom,
) -> Result<crate::pipeline::structured::JsonSchema, ArgError> {
    crate::pipeline::structured::JsonSchema::from_request_value(
        value,
        &Key::JsonSchema.name(false, from),
    )
    .map_err(|e| ArgError::Invalid(e.to_string()))
}

/// How a run relates to a plan (DESIGN §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanRole {
    /// `coder plan`: the agent writes its plan to this file (canonical, existing), the only
    /// file it may write; the workspace is read-only.
    Write { file: PathBuf },
    /// `coder --plan FILE`: the plan in this file (canonical) is a section of the prompt.
    Execute { file: PathBuf },
}

impl PlanRole {
    pub fn file(&self) -> &Path {
        match self {
            PlanRole::Write { file } | PlanRole::Execute { file } => file,
        }
    }

    /// The file the sandbox lets the agent write, for a plan-writing run.
    pub fn writable_file(&self) -> Option<&Path> {
        match self {
            PlanRole::Write { file } => Some(file),
            PlanRole::Execute { .. } => None,
        }
    }
}

pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(1800);
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);

/// A bad argument, request or input; becomes a `config_error` envelope (exit 78). Usage
/// errors clap finds itself (exit 2) never get this far.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    #[error("{0}")]
    Invalid(String),
}

/// The run's limits as [`RunArgs::into_request`] reads them.
struct Limits {
    idle_timeout: Duration,
    max_duration: Duration,
    max_retries: u32,
    kill_grace: Duration,
    max_line_bytes: usize,
    max_turns: Option<u32>,
}

/// The answers a resumed session's questions were given, with those questions.
struct Answered {
    questions: Vec<Question>,
    answers: Vec<String>,
}

/// Partial values known before validation fails, so an error envelope can still carry them.
#[derive(Debug, Clone, Copy, Default)]
pub struct KnownLimits {
    pub idle_timeout: Option<Duration>,
    pub max_duration: Option<Duration>,
}

impl RunArgs {
    /// Parses the run-mode arguments (without the program name handling: `args` includes it).
    pub fn parse_from_args(args: &[OsString]) -> Result<RunArgs, clap::Error> {
        crate::config::parse_args(args)
    }

    /// Validates the arguments into a request, reading the prompt from `stdin` when needed.
    pub fn into_request(self, stdin: &mut dyn Read) -> Result<RunRequest, ArgError> {
        if let Some(flag) = self.backend.empty_flag() {
            let e = crate::config::ConfigError::EmptyFlag { flag };
            return Err(ArgError::Invalid(e.to_string()));
        }
        let (file, stdin_used) = self.request_file(stdin)?;
        let from = self.request_from;
        let outcome_names = OutcomeNames::new(&self.outcome_args, from);
        let outcome_args = file.fill_outcome_args(self.outcome_args.clone());

        let limits = self.limits(&file)?;
        let (session, answered) = self.session_and_answers(&file)?;
        self.refuse_worktree_resume(&file, session)?;
        let (cd, workspace) = self.workspace(&file)?;

        let prompt = self.task_prompt(&file, stdin_used, answered.as_ref(), stdin)?;
        let task_title = task_title(&prompt);
        let prompt = assemble_prompt(&prompt, &self.prompt_framing)
            .map_err(|e| ArgError::Invalid(e.to_string()))?;
        let plan = self.plan_role(&file, session)?;
        let mut checks = outcome_args.validate(&outcome_names)?;
        if checks.json_schema.is_none()
            && let Some(value) = &file.json_schema
        {
            checks.json_schema = Some(schema_of_request(value, from)?);
        }
        for path in &self.sandbox_args.write {
            crate::sandbox::check_write_root(path).map_err(ArgError::Invalid)?;
        }
        self.refuse_bad_store_url()?;
        let targets = self.prompt_framing.targets.len() + outcome_args.scope.len();
        let allow_questions = self.allow_questions(&file, plan.as_ref(), answered.is_some());
        let (sandbox, worktree) = self.confinement(&file, &cd)?;

        Ok(RunRequest {
            prompt: prompt.into(),
            request_from: from,
            workspace,
            sandbox,
            session,
            return_all_messages: self.return_all_messages
                || file.return_all_messages.unwrap_or(false),
            return_metrics: self.return_metrics || file.return_metrics.unwrap_or(false),
            log_metrics: self.log_metrics || file.log_metrics.unwrap_or(false),
            idle_timeout: limits.idle_timeout,
            max_duration: (!limits.max_duration.is_zero()).then_some(limits.max_duration),
            max_retries: limits.max_retries,
            claude_bin: self.claude_bin,
            backend: self.backend,
            sandbox_args: self.sandbox_args,
            max_line_bytes: limits.max_line_bytes,
            kill_grace: limits.kill_grace,
            transcript: self.transcript,
            quiet: self.quiet,
            run_id: self.run_id.map(|id| parse_run_id(&id)).transpose()?,
            max_turns: limits.max_turns,
            checks,
            worktree,
            task_title,
            targets,
            store: self.store,
            plan,
            allow_questions,
            key_places: Default::default(),
        })
    }

    /// The workspace as given (`--cd`, else the request's `cd`) and as checked (it exists,
    /// is a directory, is no place coder refuses); a `--transcript` inside it is refused.
    fn workspace(&self, file: &RequestFile) -> Result<(PathBuf, PathBuf), ArgError> {
        let (flag, _) = self.workspace_names();
        let cd = self.cd.clone().or_else(|| file.cd.clone()).ok_or_else(|| {
            ArgError::Invalid(
                "--cd is required: pass the workspace directory the agent should work in, e.g. --cd ./my-repo"
                    .into(),
            )
        })?;
        let workspace = check_workspace(&cd, &flag)?;
        if let Some(path) = &self.transcript {
            crate::journal::transcript::check_location(path, &workspace)
                .map_err(ArgError::Invalid)?;
        }
        Ok((cd, workspace))
    }

    /// The sandbox mode and the worktree asked for, by flag or by the request: a
    /// `workspace-write` run in place needs a writable workspace (`cd`), and a
    /// `--transcript` the agent could write is refused.
    fn confinement(
        &self,
        file: &RequestFile,
        cd: &Path,
    ) -> Result<(SandboxMode, Option<WorktreeAsk>), ArgError> {
        let from = self.request_from;
        let sandbox = self
            .sandbox
            .or(file.sandbox)
            .unwrap_or(SandboxMode::WorkspaceWrite);
        let worktree = self.many.worktree || file.worktree == Some(true);
        let base = worktree_base(&self.many, file.worktree_base.clone(), worktree, from)?;
        if sandbox == SandboxMode::WorkspaceWrite && !worktree {
            // Named as given, as the other checks of `--cd` do (`/proc/self`, not the
            // `/proc/PID` of a coder that has ended by the time the user reads it).
            let (flag, read_only) = self.workspace_names();
            check_workspace_writable(cd, &flag, read_only).map_err(ArgError::Invalid)?;
        }
        if let Some(path) = &self.transcript {
            refuse_in_agent_grant(path, sandbox, &self.sandbox_args)?;
        }
        let worktree = worktree.then(|| WorktreeAsk {
            base,
            from,
            by_flag: self.many.worktree,
            base_by_flag: self.many.worktree_base.is_some(),
        });
        Ok((sandbox, worktree))
    }

    /// The `--request` file (`-` reads it from stdin: then `true`), or none; an empty
    /// `scope` list in it is refused.
    fn request_file(&self, stdin: &mut dyn Read) -> Result<(RequestFile, bool), ArgError> {
        let Some(path) = &self.request else {
            return Ok((RequestFile::default(), false));
        };
        let file = read_request_file(path, self.request_from, stdin)?;
        // An empty list is no scope at all: a caller that built it from "the files the
        // task may touch" and found none would have had the run change anything, unbounded.
        if file.scope.as_ref().is_some_and(Vec::is_empty) && self.outcome_args.scope.is_empty() {
            return Err(ArgError::Invalid(format!(
                "{} is an empty list, which would bound nothing: give at least one glob (like \
                 \"src/**\"), leave \"scope\" out for no bound, or use \"sandbox\": \
                 \"read-only\" for a run that may change nothing",
                Key::Scope.name(false, self.request_from)
            )));
        }
        Ok((file, path.as_os_str() == "-"))
    }

    /// A `--store` (or `CODER_STORE`) URL that cannot name a store (`ftp://…`) is a
    /// mistake in the arguments, reported with them: it came after a missing key, so the
    /// user who set the key met it only then. (As before, `--store-optional` skips a store
    /// that cannot be reached, not one that cannot be named.)
    fn refuse_bad_store_url(&self) -> Result<(), ArgError> {
        match &self.store.store {
            Some(url) => crate::store::Location::parse(url, Path::new("."))
                .map(drop)
                .map_err(|e| ArgError::Invalid(e.to_string())),
            None => Ok(()),
        }
    }

    /// How messages about the workspace name it and the read-only way out, as the caller
    /// gave them: `--cd` or the request file's or the MCP tool's `cd`.
    fn workspace_names(&self) -> (String, &'static str) {
        let from = self.request_from;
        let flag = match (self.cd.is_some(), from) {
            (true, _) => "--cd".to_owned(),
            (false, RequestFrom::File) => "\"cd\" of the --request JSON,".to_owned(),
            (false, RequestFrom::McpTool) => Key::Cd.name(false, from),
        };
        let read_only = match (self.sandbox.is_some(), from) {
            (false, RequestFrom::McpTool) => "sandbox: \"read-only\"",
            _ => "--sandbox read-only",
        };
        (flag, read_only)
    }

    /// Whether the model is offered `ask_user`. Questions are on by default where the
    /// model is asked to respect something it may find unclear (a contract, guardrails)
    /// and when it plans (DESIGN §9).
    fn allow_questions(&self, file: &RequestFile, plan: Option<&PlanRole>, answered: bool) -> bool {
        self.questions.enabled(
            file.allow_questions,
            self.prompt_framing.contract.is_some()
                || self.prompt_framing.guardrails.is_some()
                || matches!(plan, Some(PlanRole::Write { .. })),
            answered,
        )
    }

    /// The run's limits: flags first, then the request file's fields, then the defaults.
    fn limits(&self, file: &RequestFile) -> Result<Limits, ArgError> {
        let idle_timeout = match (&self.timeout, &file.timeout) {
            (Some(text), _) => parse_seconds("--timeout", text, false)?,
            (None, Some(n)) => parse_seconds("timeout", &n.to_string(), false)?,
            (None, None) => DEFAULT_IDLE_TIMEOUT,
        };
        let max_duration = match (&self.max_duration, &file.max_duration) {
            (Some(text), _) => parse_seconds("--max-duration", text, true)?,
            (None, Some(n)) => parse_seconds("max_duration", &n.to_string(), true)?,
            (None, None) => DEFAULT_MAX_DURATION,
        };
        let max_retries = match (&self.max_retries, &file.max_retries) {
            (Some(text), _) => parse_count("--max-retries", text)?,
            (None, Some(n)) => parse_count("max_retries", &n.to_string())?,
            (None, None) => 0,
        };
        let kill_grace = match &self.kill_grace {
            Some(text) => parse_seconds("--kill-grace", text, true)?,
            None => DEFAULT_KILL_GRACE,
        };
        let max_line_bytes = match &self.max_line_bytes {
            Some(text) => match text.trim().parse::<usize>() {
                Ok(n) if n >= 1024 => n,
                _ => {
                    return Err(ArgError::Invalid(format!(
                        "--max-line-bytes must be a whole number of bytes, at least 1024 (got {text:?})"
                    )));
                }
            },
            None => DEFAULT_MAX_LINE_BYTES,
        };

        let max_turns = match &self.max_turns {
            Some(text) => match text.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    return Err(ArgError::Invalid(format!(
                        "--max-turns must be a whole number of turns, at least 1 (got {text:?})"
                    )));
                }
            },
            None => None,
        };
        Ok(Limits {
            idle_timeout,
            max_duration,
            max_retries,
            kill_grace,
            max_line_bytes,
            max_turns,
        })
    }

    /// The session (resumed or new) and, when answers are given, the questions it asked
    /// with them (answers need a resumed session that asked as many).
    fn session_and_answers(
        &self,
        file: &RequestFile,
    ) -> Result<(SessionChoice, Option<Answered>), ArgError> {
        let from = self.request_from;
        let session = match (self.session_id.as_deref(), file.session_id.as_deref()) {
            (Some(text), _) => SessionChoice::Resume(parse_session_id("--session-id", text)?),
            (None, Some(text)) => {
                SessionChoice::Resume(parse_session_id(&Key::SessionId.name(false, from), text)?)
            }
            (None, None) => SessionChoice::New(Uuid::new_v4()),
        };
        let answers = given_answers(
            self.questions.answers.as_deref(),
            file.answers.as_ref(),
            from,
        )?;
        let answered = match (answers, session) {
            (Some(_), SessionChoice::New(_)) => {
                return Err(ArgError::Invalid(format!(
                    "{} is for the questions a session asked: give that session's {} (the \
                     SESSION_ID of its needs_input envelope)",
                    Key::Answers.name(self.questions.answers.is_some(), from),
                    Key::SessionId.name(from == RequestFrom::File, from),
                )));
            }
            (Some(answers), SessionChoice::Resume(id)) => {
                let name = Key::Answers.name(self.questions.answers.is_some(), from);
                let questions = asked_questions(id, answers.len(), &name)?;
                Some(Answered { questions, answers })
            }
            (None, _) => None,
        };
        Ok((session, answered))
    }

    /// A session resumes only in the directory it was made in (the CLI keeps sessions per
    /// directory), and `--worktree` always runs in a new checkout: refused before a branch
    /// and checkout are made for nothing.
    fn refuse_worktree_resume(
        &self,
        file: &RequestFile,
        session: SessionChoice,
    ) -> Result<(), ArgError> {
        let from = self.request_from;
        if (self.many.worktree || file.worktree == Some(true))
            && let SessionChoice::Resume(id) = session
        {
            let worktree = Key::Worktree.name(self.many.worktree, from);
            let session_id = Key::SessionId.name(self.session_id.is_some(), from);
            return Err(ArgError::Invalid(format!(
                "{worktree} cannot resume a session: it runs in a new checkout, and session \
                 {id} can only be resumed in the directory it was created in; drop {worktree} \
                 to resume in place, or drop {session_id} to start a new session in a worktree"
            )));
        }
        Ok(())
    }

    /// The task's text as given (the positional PROMPT, `--prompt`, the request file's, or
    /// stdin), with the answers to a session's questions before it; refused when empty,
    /// but with `--plan` ([`crate::pipeline::prompt::PLAN_TASK`]).
    fn task_prompt(
        &self,
        file: &RequestFile,
        stdin_used: bool,
        answered: Option<&Answered>,
        stdin: &mut dyn Read,
    ) -> Result<String, ArgError> {
        if self.prompt.is_some() && self.prompt_flag.is_some() {
            return Err(ArgError::Invalid(
                "the prompt was given twice: use either the positional PROMPT or --prompt, not both"
                    .into(),
            ));
        }
        let given = (self.prompt.as_ref())
            .or(self.prompt_flag.as_ref())
            .or(file.prompt.as_ref());
        // With `--plan FILE` the plan is the task: a further prompt is optional, as with
        // answers (it was refused, and `coder --cd ws --plan plan.md` did nothing).
        let carries_plan = self.prompt_framing.plan.is_some();
        let prompt = match given.cloned() {
            Some(text) if text != "-" => text,
            // Answers are the turn's prompt; a further prompt is optional.
            None if answered.is_some() || carries_plan => String::new(),
            _ => {
                if stdin_used {
                    return Err(ArgError::Invalid(
                        "no prompt: stdin already carried the --request JSON, so put the task in its \"PROMPT\" field"
                            .into(),
                    ));
                }
                read_prompt_from_stdin(stdin)?
            }
        };
        let prompt = match answered {
            Some(Answered { questions, answers }) => {
                crate::pipeline::questions::answers_prompt(questions, answers, Some(&prompt))
            }
            None => prompt,
        };
        if prompt.trim().is_empty() && carries_plan {
            return Ok(crate::pipeline::prompt::PLAN_TASK.to_owned());
        }
        if prompt.trim().is_empty() {
            return Err(ArgError::Invalid(
                "the prompt is empty: give the task as an argument, with --prompt, or on stdin"
                    .into(),
            ));
        }
        Ok(prompt)
    }

    /// How the run relates to a plan: `coder plan` writes one, `--plan FILE` carries one out.
    fn plan_role(
        &self,
        file: &RequestFile,
        session: SessionChoice,
    ) -> Result<Option<PlanRole>, ArgError> {
        let plan = match (&self.prompt_framing.plan_output, &self.prompt_framing.plan) {
            (Some(_), Some(_)) => {
                return Err(ArgError::Invalid(
                    "--plan executes a plan, coder plan writes one: drop --plan".into(),
                ));
            }
            (Some(_), None) if file.sandbox.is_some_and(|m| m != SandboxMode::ReadOnly) => {
                return Err(ArgError::Invalid(format!(
                    "coder plan runs with the workspace read-only; drop \"sandbox\": \"{}\" \
                     from the --request JSON",
                    file.sandbox.unwrap_or(SandboxMode::ReadOnly)
                )));
            }
            (Some(plan_file), None) => Some(PlanRole::Write {
                file: plan_file.clone(),
            }),
            (None, Some(file)) => {
                if matches!(session, SessionChoice::Resume(_)) {
                    return Err(ArgError::Invalid(
                        "--plan starts a fresh session with the plan in its prompt: drop --session-id"
                            .into(),
                    ));
                }
                let file = std::fs::canonicalize(file).map_err(|e| {
                    ArgError::Invalid(format!(
                        "--plan {}: {}",
                        file.display(),
                        crate::pipeline::prompt::file_problem(&e)
                    ))
                })?;
                Some(PlanRole::Execute { file })
            }
            (None, None) => None,
        };
        Ok(plan)
    }

    /// The limits as far as they parse, for error envelopes of invalid requests.
    pub fn known_limits(&self) -> KnownLimits {
        KnownLimits {
            idle_timeout: self
                .timeout
                .as_deref()
                .and_then(|t| parse_seconds("", t, false).ok()),
            max_duration: self
                .max_duration
                .as_deref()
                .and_then(|t| parse_seconds("", t, true).ok()),
        }
    }
}

/// The answers of `--answers` (else of the request file's `answers`), checked.
fn given_answers(
    flag: Option<&str>,
    file: Option<&serde_json::Value>,
    from: RequestFrom,
) -> Result<Option<Vec<String>>, ArgError> {
    use crate::pipeline::questions::{answers_of, read_answers};
    let field = Key::Answers.name(false, from);
    let answers = match (flag, file) {
        (Some(arg), _) => read_answers("--answers", arg),
        (None, Some(serde_json::Value::String(arg))) => read_answers(&field, arg),
        (None, Some(value)) => answers_of(&field, value),
        (None, None) => return Ok(None),
    };
    answers.map(Some).map_err(ArgError::Invalid)
}

/// The questions session `id` asked (kept in its record), when `count` answers fit them.
fn asked_questions(
    id: Uuid,
    count: usize,
    name: &str,
) -> Result<Vec<crate::pipeline::questions::Question>, ArgError> {
    let state = crate::config::state_dir().map_err(|e| ArgError::Invalid(e.to_string()))?;
    let record = crate::pipeline::session::SessionStore::new(&state)
        .load(id)
        .map_err(|e| ArgError::Invalid(e.to_string()))?;
    let questions = record.and_then(|r| r.questions).unwrap_or_default();
    if questions.is_empty() {
        return Err(ArgError::Invalid(format!(
            "{name}: session {id} has no open questions (no run of it ended with \
             needs_input, or they were answered already); resume it without {name}"
        )));
    }
    if questions.len() != count {
        return Err(ArgError::Invalid(format!(
            "{name} has {count} answer(s), but session {id} asked {} question(s): give one \
             answer per question, in order",
            questions.len()
        )));
    }
    Ok(questions)
}

fn read_request_file(
    path: &Path,
    from: RequestFrom,
    stdin: &mut dyn Read,
) -> Result<RequestFile, ArgError> {
    let (text, name) = request_text(path, stdin)?;
    const FIELDS: &str = "PROMPT, cd, sandbox, SESSION_ID, return_all_messages, \
                          return_metrics, timeout, max_duration, max_retries, log_metrics";
    let value: serde_json::Value = crate::text::json::parse_strict(&text).map_err(|e| {
        ArgError::Invalid(format!(
            "malformed --request JSON in {name}: {e} (expected an object with {FIELDS})"
        ))
    })?;
    if !value.is_object() {
        return Err(ArgError::Invalid(format!(
            "the --request JSON in {name} is not a JSON object (it is {}); expected an object \
             with {FIELDS}",
            json_type_name(&value)
        )));
    }
    let problems = value
        .as_object()
        .map(|fields| field_problems(fields, from))
        .unwrap_or_default();
    match problems.as_slice() {
        [] => {}
        [one] => return Err(ArgError::Invalid(one.clone())),
        many => {
            let whose = match from {
                RequestFrom::File => format!("the --request JSON in {name} has"),
                RequestFrom::McpTool => "the coder tool's arguments have".to_owned(),
            };
            return Err(ArgError::Invalid(format!(
                "{whose} {} problems: {}",
                many.len(),
                many.join("; ")
            )));
        }
    }
    // Every field's type was checked above; serde's own words are the last resort.
    let file: RequestFile = serde_json::from_value(value).map_err(|e| {
        ArgError::Invalid(format!(
            "bad --request JSON in {name}: {e} (expected an object with {FIELDS})"
        ))
    })?;
    Ok(match path.as_os_str() == "-" {
        true => file,
        false => file.relative_to(path.parent().unwrap_or(Path::new(""))),
    })
}

/// The `--request` JSON's text (from stdin for `-`) and its name for messages, refused past
/// 64 MiB.
fn request_text(path: &Path, stdin: &mut dyn Read) -> Result<(String, String), ArgError> {
    // Room for the longest prompt the CLI takes, escaped, and the other fields; an endless
    // source (`--request /dev/zero`, a pipe that never ends) is refused at this size.
    const MAX_REQUEST_BYTES: u64 = 64 * 1024 * 1024;
    let read = |input: &mut dyn Read| -> std::io::Result<String> {
        let mut text = String::new();
        input
            .take(MAX_REQUEST_BYTES + 1)
            .read_to_string(&mut text)?;
        if text.len() as u64 > MAX_REQUEST_BYTES {
            return Err(std::io::Error::other(
                "larger than 64 MiB (a --request JSON holds a prompt of at most 10 MiB)",
            ));
        }
        Ok(text)
    };
    if path.as_os_str() == "-" {
        let text = read(stdin).map_err(|e| {
            ArgError::Invalid(format!("cannot read the --request JSON from stdin: {e}"))
        })?;
        return Ok((text, "stdin".to_owned()));
    }
    let text = std::fs::File::open(path)
        .and_then(|mut file| read(&mut file))
        .map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".to_owned(),
                std::io::ErrorKind::IsADirectory => {
                    "it is a directory; name the JSON file (or - for stdin)".to_owned()
                }
                std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
                _ => e.to_string(),
            };
            ArgError::Invalid(format!(
                "cannot read --request file {}: {why}",
                path.display()
            ))
        })?;
    Ok((text, path.display().to_string()))
}

/// What a `--request` field must hold, for messages that name the field and what it takes.
#[derive(Debug, Clone, Copy)]
enum FieldKind {
    Text,
    Flag,
    Sandbox,
    SessionId,
    /// Seconds; 0 allowed where it means "no limit".
    Seconds {
        zero_ok: bool,
    },
    Whole {
        max: u32,
    },
    Globs,
    /// A value of several shapes, checked where it is read (`json_schema`, `answers`).
    Checked,
}

/// Every key of the `--request` JSON and what it takes.
const REQUEST_FIELDS: &[(&str, FieldKind)] = &[
    ("PROMPT", FieldKind::Text),
    ("prompt", FieldKind::Text),
    ("cd", FieldKind::Text),
    ("sandbox", FieldKind::Sandbox),
    ("SESSION_ID", FieldKind::SessionId),
    ("session_id", FieldKind::SessionId),
    ("return_all_messages", FieldKind::Flag),
    ("return_metrics", FieldKind::Flag),
    ("timeout", FieldKind::Seconds { zero_ok: false }),
    ("max_duration", FieldKind::Seconds { zero_ok: true }),
    ("max_retries", FieldKind::Whole { max: MAX_RETRIES }),
    ("log_metrics", FieldKind::Flag),
    ("return_diff", FieldKind::Flag),
    ("verify", FieldKind::Text),
    ("no_verify_baseline", FieldKind::Flag),
    ("verify_timeout", FieldKind::Seconds { zero_ok: false }),
    (
        "repair_turns",
        FieldKind::Whole {
            max: MAX_REPAIR_TURNS,
        },
    ),
    ("scope", FieldKind::Globs),
    ("worktree", FieldKind::Flag),
    ("worktree_base", FieldKind::Text),
    ("json_schema", FieldKind::Checked),
    ("allow_questions", FieldKind::Flag),
    ("answers", FieldKind::Checked),
];

/// Every problem of the `--request` JSON's fields, each naming its field and what it
/// takes: an unknown key, a value of the wrong type, a number out of its range. (serde
/// stopped at the first, in its own words: "invalid type: string \"x\", expected a JSON
/// number".) A `null` is an absent field.
fn field_problems(
    fields: &serde_json::Map<String, serde_json::Value>,
    from: RequestFrom,
) -> Vec<String> {
    let mut problems = Vec::new();
    // The keys it takes are listed once, after the first key that is just unknown.
    let mut listed = false;
    for (key, value) in fields {
        let kind = REQUEST_FIELDS
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, kind)| *kind);
        let problem = match kind {
            None => Some(unknown_key(key, from).unwrap_or_else(|| {
                let plain = format!("{key:?} is no key of {}", request_what(from));
                match std::mem::replace(&mut listed, true) {
                    true => plain,
                    false => format!("{plain} (its keys: {})", known_keys().join(", ")),
                }
            })),
            Some(_) if value.is_null() => None,
            Some(kind) => field_problem(&field_name(key, from), kind, value),
        };
        problems.extend(problem);
    }
    for (key, alias) in [("PROMPT", "prompt"), ("SESSION_ID", "session_id")] {
        if fields.contains_key(key) && fields.contains_key(alias) {
            problems.push(format!(
                "{} and {alias:?} are one key given twice: keep one",
                field_name(key, from)
            ));
        }
    }
    problems
}

/// A request field as messages name it: `"timeout" in the --request JSON`, or the MCP
/// tool's argument `timeout`.
fn field_name(key: &str, from: RequestFrom) -> String {
    match from {
        RequestFrom::File => format!("\"{key}\" in the --request JSON"),
        RequestFrom::McpTool => key.to_owned(),
    }
}

/// What `--request` JSON (or the coder tool's arguments) is called in messages.
fn request_what(from: RequestFrom) -> &'static str {
    match from {
        RequestFrom::File => "the --request JSON",
        RequestFrom::McpTool => "the coder tool",
    }
}

/// An unknown key, with the known one it is most likely meant for (`Prompt`,
/// `return-metrics`, `repiar_turns`), or in a `--request` file the command-line flag it
/// names (`backend`, `model`, `deny`: flags only, given beside `--request`); `None`: just
/// unknown.
fn unknown_key(key: &str, from: RequestFrom) -> Option<String> {
    let what = request_what(from);
    if let Some(meant) = crate::text::near_miss(key, &known_keys()) {
        return Some(format!(
            "{key:?} is no key of {what}: did you mean {meant:?}?"
        ));
    }
    let flag = flag_named(key).filter(|_| from == RequestFrom::File)?;
    Some(format!(
        "{key:?} is a flag, not a key of {what}: give {flag} beside --request"
    ))
}

/// The keys a request takes.
fn known_keys() -> Vec<&'static str> {
    REQUEST_FIELDS.iter().map(|(k, _)| *k).collect()
}

/// The run's command-line flag that `key` spells (`backend`, `base-url`, `--deny`), as
/// `--backend`.
fn flag_named(key: &str) -> Option<String> {
    let plain = |k: &str| {
        k.trim_start_matches('-')
            .to_ascii_lowercase()
            .replace('-', "_")
    };
    let given = plain(key);
    <RunArgs as clap::CommandFactory>::command()
        .get_arguments()
        .filter_map(clap::Arg::get_long)
        .find(|long| plain(long) == given)
        .map(|long| format!("--{long}"))
}

/// What is wrong with `value` for a field of `kind` named `name`, if anything.
fn field_problem(name: &str, kind: FieldKind, value: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    let number = |check: &dyn Fn(&str) -> Result<(), ArgError>| match value {
        Value::Number(n) => check(&n.to_string()).err().map(|ArgError::Invalid(m)| m),
        _ => Some(wrong_type(name, kind, value)),
    };
    match (kind, value) {
        (FieldKind::Text | FieldKind::Checked, Value::String(_))
        | (FieldKind::Flag, Value::Bool(_))
        | (FieldKind::Checked, _) => None,
        (FieldKind::Sandbox, Value::String(mode))
            if <SandboxMode as clap::ValueEnum>::from_str(mode, false).is_ok() =>
        {
            None
        }
        (FieldKind::SessionId, Value::String(id)) => parse_session_id(name, id)
            .err()
            .map(|ArgError::Invalid(m)| m),
        (FieldKind::Seconds { zero_ok }, _) => {
            number(&|text| parse_seconds(name, text, zero_ok).map(drop))
        }
        (FieldKind::Whole { max }, _) => number(&|text| parse_whole(name, text, max).map(drop)),
        (FieldKind::Globs, Value::Array(items)) if items.iter().all(Value::is_string) => None,
        _ => Some(wrong_type(name, kind, value)),
    }
}

/// "`name` must be WHAT KIND TAKES (got VALUE)".
fn wrong_type(name: &str, kind: FieldKind, value: &serde_json::Value) -> String {
    let takes = match kind {
        FieldKind::Text | FieldKind::Checked => "a string".to_owned(),
        FieldKind::Flag => "true or false".to_owned(),
        FieldKind::Sandbox => {
            "\"read-only\", \"workspace-write\" or \"danger-full-access\"".to_owned()
        }
        FieldKind::SessionId => "a session UUID as printed in SESSION_ID, a string".to_owned(),
        FieldKind::Seconds { zero_ok: false } => {
            "a number of seconds greater than 0, like 300 or 0.5".to_owned()
        }
        FieldKind::Seconds { zero_ok: true } => {
            "a number of seconds, like 1800 or 0.5 (0 for no limit)".to_owned()
        }
        FieldKind::Whole { max } => format!("a whole number from 0 to {max}"),
        FieldKind::Globs => "a list of globs, like [\"src/**\"]".to_owned(),
    };
    let shown = crate::text::one_line(&value.to_string(), 60);
    match (kind, value) {
        // The right type, not one of the names.
        (FieldKind::Sandbox, serde_json::Value::String(_)) => {
            format!("{name} must be {takes} (got {shown})")
        }
        _ => format!(
            "{name} must be {takes} (got {shown}, {})",
            json_type_name(value)
        ),
    }
}

impl RequestFile {
    /// The file's relative paths (`cd`, a `json_schema` or `answers` file) taken from
    /// `dir`, the directory of the request file, as a config file's are: a request file
    /// kept beside its workspace (`"cd": "."`, `"cd": "repo"`) means the same wherever the
    /// caller runs coder from. (One read from stdin keeps them relative to the current
    /// directory.)
    fn relative_to(mut self, dir: &Path) -> RequestFile {
        if dir.as_os_str().is_empty() {
            return self;
        }
        if let Some(cd) = &self.cd
            && cd.is_relative()
            && !cd.as_os_str().is_empty()
        {
            self.cd = Some(dir.join(cd));
        }
        // A string that is not JSON (a schema starts with `{`, answers with `[`, `{` or
        // `"`) names a file.
        let file_at = |value: &mut Option<serde_json::Value>, json_starts: &[char]| {
            if let Some(serde_json::Value::String(text)) = value
                && !text.trim().is_empty()
                && !text.trim_start().starts_with(json_starts)
                && Path::new(text.as_str()).is_relative()
            {
                *text = dir.join(text.as_str()).to_string_lossy().into_owned();
            }
        };
        file_at(&mut self.json_schema, &['{']);
        file_at(&mut self.answers, &['[', '{', '"']);
        self
    }
}

fn json_type_name(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn read_prompt_from_stdin(stdin: &mut dyn Read) -> Result<String, ArgError> {
    use crate::pipeline::prompt::{MAX_TASK_STDIN_BYTES, stdin_too_large};
    use crate::text::stdin::{StdinError, read_task};
    read_task(stdin, MAX_TASK_STDIN_BYTES).map_err(|e| {
        ArgError::Invalid(match e {
            StdinError::Terminal => {
                "no prompt: give the task as an argument, with --prompt, or pipe it on stdin".into()
            }
            StdinError::TooLarge { .. } => stdin_too_large().to_string(),
            StdinError::Io(e) => format!("cannot read the prompt from stdin: {e}"),
            e @ StdinError::NotUtf8 { .. } => format!("the prompt on {e}"),
        })
    })
}

/// Parses seconds with decimals (`0.5`). Zero is allowed only where it means "no cap".
pub fn parse_seconds(name: &str, text: &str, zero_ok: bool) -> Result<Duration, ArgError> {
    let value: f64 = text.trim().parse().map_err(|_| {
        ArgError::Invalid(format!(
            "{name} must be a number of seconds, like 300 or 0.5 (got {text:?})"
        ))
    })?;
    if !value.is_finite() {
        // Only a limit that takes 0 for "none" has a way to say "no limit".
        let none = if zero_ok {
            format!("; for no limit use {name} 0")
        } else {
            String::new()
        };
        return Err(ArgError::Invalid(format!(
            "{name} must be a finite number of seconds, at most a year (got {text:?}){none}"
        )));
    }
    if value < 0.0 {
        return Err(ArgError::Invalid(format!(
            "{name} must be a non-negative number of seconds (got {text:?})"
        )));
    }
    if value == 0.0 && !zero_ok {
        return Err(ArgError::Invalid(format!(
            "{name} must be greater than 0 seconds (got {text:?})"
        )));
    }
    // Over a year is certainly a mistake, and keeps Duration arithmetic far from overflow.
    if value > 366.0 * 86400.0 {
        return Err(ArgError::Invalid(format!(
            "{name} is too large: {text} seconds is more than a year"
        )));
    }
    let duration = Duration::from_secs_f64(value);
    // Below a nanosecond it is 0, which stopped the run at once ("no output for 0 s").
    if duration.is_zero() && !zero_ok {
        return Err(ArgError::Invalid(format!(
            "{name} must be greater than 0 seconds (got {text:?}, less than a nanosecond)"
        )));
    }
    Ok(duration)
}

fn parse_count(name: &str, text: &str) -> Result<u32, ArgError> {
    parse_whole(name, text, MAX_RETRIES)
}

/// `origin` names where the id came from, for the message.
fn parse_session_id(origin: &str, text: &str) -> Result<Uuid, ArgError> {
    Uuid::parse_str(text.trim()).map_err(|_| {
        ArgError::Invalid(format!(
            "{origin} must be a session UUID like 11111111-2222-4333-8444-555555555555, as printed in SESSION_ID (got {text:?})"
        ))
    })
}

/// `flag` names where `cd` came from (`--cd`, or the `--request` JSON's `cd`, taken
/// from the file's directory) in the messages about it.
fn check_workspace(cd: &Path, flag: &str) -> Result<PathBuf, ArgError> {
    if cd.as_os_str().is_empty() {
        return Err(ArgError::Invalid(
            "--cd is empty (\"cd\": \"\" in the --request JSON?): pass the workspace directory"
                .into(),
        ));
    }
    let meta = std::fs::metadata(cd).map_err(|e| {
        ArgError::Invalid(format!(
            "{flag} {}: {}; pass an existing workspace directory",
            cd.display(),
            io_reason(&e)
        ))
    })?;
    if !meta.is_dir() {
        return Err(ArgError::Invalid(format!(
            "{flag} {} is not a directory; pass the workspace directory",
            cd.display()
        )));
    }
    check_workspace_access(cd, flag).map_err(ArgError::Invalid)?;
    let canonical = std::fs::canonicalize(cd)
        .map_err(|e| ArgError::Invalid(format!("{flag} {}: {}", cd.display(), io_reason(&e))))?;
    // The run records its workspace in JSON (transcript, session store, sandbox policy);
    // a path that is not UTF-8 cannot be recorded faithfully, so it is refused up front.
    if canonical.to_str().is_none() {
        return Err(ArgError::Invalid(format!(
            "{flag} {}: the workspace path is not valid UTF-8; rename the directory",
            canonical.display()
        )));
    }
    Ok(canonical)
}

/// Why the caller cannot use the directory `dir` as a workspace, if it cannot: everything
/// of a run enters and lists it (the CLI's working directory, the sandbox's scan, the
/// change ledger), so one the caller may not enter or list failed later, as a
/// `sandbox_error` about the scan or as "cannot execute claude" (the spawn's chdir),
/// instead of naming the workspace.
/// `flag` names where `dir` came from, as [`check_workspace`]'s does.
pub fn check_workspace_access(dir: &Path, flag: &str) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    access(dir, AccessFlags::R_OK | AccessFlags::X_OK).map_err(|errno| {
        format!(
            "{flag} {}: {}: you need read and search (x) permission on the workspace directory",
            dir.display(),
            errno.desc().to_lowercase()
        )
    })
}

/// Why the caller cannot write the workspace `dir`, if it cannot: `workspace-write` lets
/// the agent change the workspace, and the sandbox creates its placeholders in it, so a
/// workspace the caller may not write failed as a `sandbox_error` ("create placeholder
/// …/.git: EACCES") after the scan. (`--worktree` runs in a checkout of its own; `coder
/// plan` is read-only.)
/// `read_only` is the flag that asks for the read-only sandbox. A directory no confined run
/// may have (`/proc/self`, `/`) is named as such: making it writable or passing `read_only`
/// would not help.
/// `flag` names where `dir` came from, as [`check_workspace`]'s does.
pub fn check_workspace_writable(dir: &Path, flag: &str, read_only: &str) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    access(dir, AccessFlags::W_OK).map_err(|errno| {
        let refusal = std::fs::canonicalize(dir)
            .ok()
            .and_then(|canonical| crate::sandbox::workspace_refusal_here(&canonical));
        if let Some(reason) = refusal {
            return format!("{flag} {}: {reason}", dir.display());
        }
        format!(
            "{flag} {}: {}: the workspace-write sandbox (the default) needs a workspace you \
             can write; make it writable, or pass {read_only} for a task that only reads",
            dir.display(),
            errno.desc().to_lowercase()
        )
    })
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// Refuses a `--transcript` in a grant the agent may write besides the workspace (a
/// `--write` path, `/tmp` with `--allow-tmp`): it could rewrite the transcript the user
/// reads afterwards, as it could inside the workspace.
fn refuse_in_agent_grant(
    path: &Path,
    sandbox: SandboxMode,
    args: &crate::sandbox::AgentSandboxArgs,
) -> Result<(), ArgError> {
    let roots = crate::sandbox::agent_write_roots(sandbox, args);
    match crate::sandbox::root_holding(path, &roots) {
        Some(root) => Err(ArgError::Invalid(format!(
            "--transcript {} lies in {}, which the agent may write (--write, --allow-tmp or --tool-caches): \
             it could rewrite the transcript; write it elsewhere or narrow the grant",
            path.display(),
            root.display()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> RunArgs {
        let list: Vec<OsString> = std::iter::once("coder")
            .chain(list.iter().copied())
            .map(OsString::from)
            .collect();
        RunArgs::parse_from_args(&list).unwrap()
    }

    fn request(list: &[&str], stdin: &str) -> Result<RunRequest, ArgError> {
        args(list).into_request(&mut stdin.as_bytes())
    }

    #[test]
    fn seconds_accept_decimals_and_reject_nonsense() {
        assert_eq!(
            parse_seconds("t", "0.5", false).unwrap(),
            Duration::from_millis(500)
        );
        assert!(parse_seconds("t", "-1", true).is_err());
        assert!(parse_seconds("t", "abc", true).is_err());
        assert!(parse_seconds("t", "0", false).is_err());
        assert!(parse_seconds("t", "NaN", true).is_err());
        assert_eq!(parse_seconds("t", "0", true).unwrap(), Duration::ZERO);
    }

    #[test]
    fn defaults_and_aliases() {
        let dir = tempfile::tempdir().unwrap();
        let cd = dir.path().to_str().unwrap();
        let req = request(&["--cd", cd, "task"], "").unwrap();
        assert_eq!(req.idle_timeout, DEFAULT_IDLE_TIMEOUT);
        assert_eq!(req.max_duration, Some(DEFAULT_MAX_DURATION));
        assert_eq!(req.sandbox, SandboxMode::WorkspaceWrite);
        assert!(matches!(req.session, SessionChoice::New(_)));
        let req = request(
            &[
                "--cd",
                cd,
                "--PROMPT",
                "x",
                "--SESSION_ID",
                "11111111-2222-4333-8444-555555555555",
                "--return_all_messages",
                "--max_duration",
                "0",
            ],
            "",
        )
        .unwrap();
        assert_eq!(&*req.prompt, "x");
        assert!(req.return_all_messages);
        assert_eq!(req.max_duration, None);
        assert!(matches!(req.session, SessionChoice::Resume(_)));
    }

    #[test]
    fn request_json_is_the_base_and_flags_override() {
        let dir = tempfile::tempdir().unwrap();
        let json = format!(
            r#"{{"PROMPT":"from json","cd":{:?},"timeout":2.5,"max_retries":1}}"#,
            dir.path()
        );
        let req = request(&["--request", "-", "--timeout", "7"], &json).unwrap();
        assert_eq!(&*req.prompt, "from json");
        assert_eq!(req.idle_timeout, Duration::from_secs(7));
        assert_eq!(req.max_retries, 1);
        assert!(matches!(
            request(&["--request", "-"], "{\"PROMPT\":"),
            Err(ArgError::Invalid(m)) if m.contains("malformed --request JSON")
        ));
        assert!(matches!(
            request(&["--request", "-"], r#"{"PROMT":"typo"}"#),
            Err(ArgError::Invalid(m)) if m.contains("PROMT")
        ));
    }

    #[test]
    fn bad_inputs_are_explained() {
        let dir = tempfile::tempdir().unwrap();
        let cd = dir.path().to_str().unwrap();
        let message = |r: Result<RunRequest, ArgError>| r.unwrap_err().to_string();
        assert!(message(request(&["task"], "")).contains("--cd is required"));
        assert!(message(request(&["--cd", "/nonexistent/x", "t"], "")).contains("no such"));
        assert!(message(request(&["--cd", cd, "  "], "")).contains("prompt is empty"));
        assert!(message(request(&["--cd", cd, "--session-id", "abc", "t"], "")).contains("UUID"));
        assert!(message(request(&["--cd", cd, "--timeout", "-3", "t"], "")).contains("--timeout"));
        assert!(
            message(request(&["--cd", cd, "--max-retries", "x", "t"], ""))
                .contains("--max-retries")
        );
    }

    #[test]
    fn prompt_from_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let cd = dir.path().to_str().unwrap();
        assert_eq!(
            &*request(&["--cd", cd, "-"], "piped").unwrap().prompt,
            "piped"
        );
        assert_eq!(&*request(&["--cd", cd], "piped").unwrap().prompt, "piped");
    }
}
