//! The `claude` command line and environment for one attempt.
//!
//! This is where the CLI's measured quirks are answered (see DESIGN §3): stream-json needs
//! `--verbose`; the session id is chosen here (`--session-id <new uuid>`) so it is known
//! before the first byte; the prompt goes on stdin, which is then closed, because an open,
//! silent stdin stalls the CLI; `CLAUDECODE` is removed so a run started from inside Claude
//! Code is not mistaken for a nested session. The CLI's own timeouts are capped below
//! coder's idle limit so a slow but healthy tool or API call produces output (a tool result,
//! an `api_retry` line) before coder would call it idle.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::pipeline::request::{RunRequest, SandboxMode, SessionChoice};
use crate::text::{self, path::RelativeDirs};

/// Everything needed to start the child: program, arguments, full environment, cwd, stdin.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The complete environment (the child inherits nothing else).
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    /// Written to the child's stdin, which is then closed.
    pub stdin: std::sync::Arc<str>,
    /// The confinement the helper applies before exec'ing the program (none for
    /// `danger-full-access`); set by [`confine`].
    pub policy: Option<crate::sandbox::Policy>,
    /// The run's egress proxy, which serves the confined child's network (see
    /// `sandbox::proxy`); set with the policy.
    pub egress: Option<std::sync::Arc<crate::sandbox::proxy::Egress>>,
}

impl ChildSpec {
    /// Values of variables that hold credentials, for redaction of the child's output.
    pub fn secrets(&self) -> Vec<String> {
        secret_values(&self.env)
    }
}

/// Values of the variables in `env` whose names say they hold credentials (the one rule in
/// [`crate::text::names`]).
pub use crate::text::names::secret_values;

/// The CLI's `--permission-mode` in every mode: the CLI never stops to ask (in `-p` mode
/// nobody could answer), and the boundary of the sandbox mode is enforced by the kernel,
/// not by the CLI's own checks (read-only included: a write fails with `EACCES`/`EROFS`,
/// which the agent sees and `metrics.sandbox_denials` reports).
pub const PERMISSION_MODE: &str = "bypassPermissions";

/// The arguments after the program name.
pub fn claude_args(request: &RunRequest) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["-p", "--output-format", "stream-json", "--verbose"]
        .into_iter()
        .map(OsString::from)
        .collect();
    match request.session {
        SessionChoice::New(id) => {
            args.push("--session-id".into());
            args.push(id.to_string().into());
        }
        SessionChoice::Resume(id) => {
            args.push("--resume".into());
            args.push(id.to_string().into());
        }
    }
    args.push("--permission-mode".into());
    args.push(PERMISSION_MODE.into());
    if let Some(turns) = request.max_turns {
        args.push("--max-turns".into());
        args.push(turns.to_string().into());
    }
    // Structured results (DESIGN §9): the CLI offers the model its StructuredOutput tool
    // with this schema, on every turn of the run (repair turns included).
    if let Some(schema) = &request.checks.json_schema {
        args.push("--json-schema".into());
        args.push(schema.cli_arg().into());
    }
    if request.allow_questions {
        args.extend(questions_args());
    }
    args
}

/// The `ask_user` tool (DESIGN §9): coder's own binary as the CLI's MCP server `coder`, and
/// the tool allowed without a prompt in every permission mode. The sandbox already lets
/// the CLI run coder's binary (the nesting wrapper is the same file).
fn questions_args() -> Vec<OsString> {
    use crate::pipeline::questions;
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .unwrap_or_else(|_| PathBuf::from("coder"));
    vec![
        "--mcp-config".into(),
        questions::mcp_config(&exe).into(),
        format!("--allowedTools={}", questions::CLI_TOOL_NAME).into(),
    ]
}

/// Environment variables coder sets from the run's limits unless the caller set them.
fn limit_env(idle: Duration) -> Vec<(&'static str, String)> {
    // A tool or an API wait must end (and so print something) before coder calls the run
    // idle: 90 % of the idle limit, at least one second.
    let below_idle_ms = ((idle.as_millis() as u64) * 9 / 10).max(1000);
    vec![
        ("BASH_DEFAULT_TIMEOUT_MS", below_idle_ms.to_string()),
        ("BASH_MAX_TIMEOUT_MS", below_idle_ms.to_string()),
        ("MCP_TOOL_TIMEOUT", below_idle_ms.to_string()),
        ("API_TIMEOUT_MS", below_idle_ms.to_string()),
        // The CLI clamps this one to at least 10 s.
        (
            "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS",
            below_idle_ms.max(10_000).to_string(),
        ),
    ]
}

/// Builds the child's environment from a base environment (the caller's, or one already
/// filtered by the backend configuration).
pub fn child_env(
    base: impl IntoIterator<Item = (OsString, OsString)>,
    request: &RunRequest,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = base
        .into_iter()
        .filter(|(k, _)| k != "CLAUDECODE")
        .collect();
    for (name, cap) in limit_env(request.idle_timeout) {
        // A value already set (by the caller or a backend preset, such as a vendor's
        // 50-minute API_TIMEOUT_MS) is kept only when it is below the cap.
        match env.iter_mut().find(|(k, _)| k == name) {
            Some((_, value)) => {
                let below_cap = value
                    .to_str()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .zip(cap.parse::<u64>().ok())
                    .is_some_and(|(v, c)| v <= c);
                if !below_cap {
                    *value = cap.into();
                }
            }
            None => env.push((name.into(), cap.into())),
        }
    }
    if request.sandbox == SandboxMode::DangerFullAccess
        && !env.iter().any(|(k, _)| k == "IS_SANDBOX")
    {
        // bypassPermissions is refused as root unless the caller vouches for the machine;
        // danger-full-access is exactly that statement.
        env.push(("IS_SANDBOX".into(), "1".into()));
    }
    env
}

/// The whole child spec for a request, given the resolved program and base environment.
pub fn build(
    request: &RunRequest,
    program: PathBuf,
    base_env: impl IntoIterator<Item = (OsString, OsString)>,
) -> ChildSpec {
    ChildSpec {
        program,
        args: claude_args(request),
        env: child_env(base_env, request),
        cwd: request.workspace.clone(),
        stdin: request.prompt.clone(),
        policy: None,
        egress: None,
    }
}

/// Run the child under `policy`. The kernel then keeps the agent in its sandbox, so the
/// CLI's own permission prompts are switched off (`bypassPermissions`, with `IS_SANDBOX=1`
/// so the CLI accepts it as root) and so is its own bubblewrap sandbox, which cannot work
/// inside ours. The model is told what the sandbox allows (masked files read as empty), and
/// the CLI's permission rules deny its file-editing tools the masked globs, which saves it
/// pointless attempts: an `Edit(glob)` rule covers its Edit, Write and NotebookEdit tools
/// (a `Write(glob)` rule never matches: the CLI 2.1.330 checks writes against `Edit` rules
/// only). There are no `Read(glob)` rules: the CLI's Read tool reads a masked file as the
/// mask's empty content, as every process in the sandbox does. With any `Read` deny rule
/// the CLI loads every `CLAUDE.md`/`AGENTS.md` candidate through a guarded reader that
/// resolves each path's spellings and checks them against the rules, about 20 ms of its
/// CPU and 350 thread-pool round trips before its first request (BENCHMARKS.md, issue 21,
/// round fourteen), and the kernel's mask already keeps the secret.
///
/// Only call this with a policy the helper will enforce: the helper refuses to start the
/// program when confinement fails, so `bypassPermissions` never runs unconfined.
pub fn confine(spec: &mut ChildSpec, policy: crate::sandbox::Policy) {
    let deny: Vec<String> = policy
        .deny_globs
        .iter()
        .map(|glob| format!("Edit({glob})"))
        .chain(scratch_edit_denials(&policy.tmp_dir))
        .collect();
    let mut settings = serde_json::json!({"permissions": {"deny": deny}});
    if cli_sandbox_may_be_asked_for(&spec.cwd, &spec.env) {
        settings["sandbox"] = serde_json::json!({"enabled": false});
    }
    spec.args.push("--settings".into());
    spec.args.push(settings.to_string().into());
    // One `--append-system-prompt` only (the CLI keeps the last): add to the backend's.
    let note = crate::sandbox::system_prompt_note(&policy);
    match spec.args.iter().position(|a| a == "--append-system-prompt") {
        Some(i) if i + 1 < spec.args.len() => {
            let mut text = spec.args[i + 1].clone();
            text.push("\n\n");
            text.push(&note);
            spec.args[i + 1] = text;
        }
        _ => {
            spec.args.push("--append-system-prompt".into());
            spec.args.push(note.into());
        }
    }
    policy.apply_env(&mut spec.env);
    spec.env.retain(|(k, _)| k != "IS_SANDBOX");
    spec.env.push(("IS_SANDBOX".into(), "1".into()));
    spec.policy = Some(policy);
}

/// The CLI's own names in its scratch directory (`CLAUDE_CODE_TMPDIR` and
/// `XDG_RUNTIME_DIR`: `claude-<uid>/`, with the task outputs it reads back, and
/// `cc-socks/`), denied to its file-editing tools. Those tools run in the CLI's own
/// Landlock domain, which writes there, not in the nested one of tool commands that keeps
/// them out: a Bash call linked `scratchlink` in the workspace to `claude-<uid>/` and the
/// Write tool wrote through it (round twenty-three's second review). The CLI checks a
/// path's symlink-resolved spelling against its rules too; `//` makes a rule absolute.
fn scratch_edit_denials(scratch: &Path) -> impl Iterator<Item = String> + use<'_> {
    ["claude-*", "cc-socks"].into_iter().flat_map(move |name| {
        let base = format!("/{}/{name}", glob_literal(&scratch.to_string_lossy()));
        [format!("Edit({base})"), format!("Edit({base}/**)")]
    })
}

/// `path` as a rule's glob that matches it: each ASCII character other than a letter, a
/// digit or `/._-` made `?` (one character but `/`), which matches it whatever it is. The
/// CLI's matcher (gitignore syntax) took a state directory spelled `st[a]te` for a
/// character class, and the scratch rules never matched the scratch: the Write tool wrote
/// `claude-<uid>/` through a link again (round twenty-four's review). Its escapes do not
/// all work (`\?`, `\\` matched nothing), and a rule a little wider denies nothing the
/// agent needs.
fn glob_literal(path: &str) -> String {
    path.chars()
        .map(|c| {
            let plain = !c.is_ascii() || c.is_ascii_alphanumeric() || "/._-".contains(c);
            if plain { c } else { '?' }
        })
        .collect()
}

/// Whether anything the CLI reads could switch its own sandbox on, so that coder's
/// settings must switch it off: the project or local settings of the workspace or of a
/// directory above it up to its repository's top (the only
/// settings files the CLI reads besides its config dir, which coder makes empty of them,
/// and the managed ones, which outrank coder's flag anyway), or a variable of the CLI's
/// own naming a sandbox or bubblewrap. Otherwise the CLI's sandbox is off by default and
/// the key is left out: a `sandbox` key costs the CLI 2.6 to 3.5 ms of its start
/// (BENCHMARKS.md, round twenty-two). The CLI's sandbox is never part of coder's
/// confinement; the key only keeps it from failing inside coder's.
fn cli_sandbox_may_be_asked_for(workspace: &Path, env: &[(OsString, OsString)]) -> bool {
    let named = env.iter().any(|(k, _)| {
        let k = k.to_string_lossy().to_ascii_uppercase();
        k != "IS_SANDBOX" && (k.contains("SANDBOX") || k.contains("BUBBLEWRAP"))
    });
    let present = |path: PathBuf| {
        // Unreadable counts as present: only a known absence leaves the key out.
        !matches!(
            std::fs::symlink_metadata(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound
        )
    };
    if named {
        return true;
    }
    // The directories above the workspace too, up to its repository's top: a workspace
    // below the top may have the CLI read the top's project settings.
    for dir in workspace.ancestors() {
        let settings = ["settings.json", "settings.local.json"];
        if settings
            .iter()
            .any(|name| present(dir.join(".claude").join(name)))
        {
            return true;
        }
        if present(dir.join(".git")) {
            return false;
        }
    }
    false
}

/// Why the claude executable cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("cannot find `{name}` on PATH")]
    NotOnPath { name: String },
    #[error("{path}: no such file")]
    Missing { path: PathBuf },
    #[error("{path} is not an executable file")]
    NotExecutable { path: PathBuf },
}

/// Resolves the executable: an explicit path, else `claude` on the given PATH.
pub fn resolve_program(
    explicit: Option<&Path>,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, ProgramError> {
    let name = explicit.unwrap_or(Path::new("claude"));
    if name.components().count() > 1 || name.is_absolute() {
        return check_executable(name);
    }
    // Relative PATH entries are taken from coder's own directory, as execvp would.
    let found = path_var.and_then(|path| {
        text::path::find_on_path(
            name.as_os_str(),
            path,
            Path::new(""),
            RelativeDirs::FromBase,
        )
    });
    match found {
        Some(candidate) => check_executable(&candidate),
        None => Err(ProgramError::NotOnPath {
            name: name.display().to_string(),
        }),
    }
}

fn check_executable(path: &Path) -> Result<PathBuf, ProgramError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|_| ProgramError::Missing {
        path: path.to_owned(),
    })?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(ProgramError::NotExecutable {
            path: path.to_owned(),
        });
    }
    // The child runs in the workspace, so a relative path must be anchored here.
    Ok(std::path::absolute(path).unwrap_or_else(|_| path.to_owned()))
}

/// What to tell a user whose claude cannot be found.
pub const INSTALL_HINT: &str = "install the claude CLI coder is tested with (npm install -g @anthropic-ai/claude-code@2.1.330, or scripts/setup-claude in the coder repository) or point --claude-bin / CODER_CLAUDE_BIN at it";

/// The claude CLI version coder's behaviour was measured against (the one
/// [`INSTALL_HINT`] pins).
pub const TESTED_CLAUDE_VERSION: &str = "2.1.330";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::request::{DEFAULT_KILL_GRACE, RunRequest};
    use uuid::Uuid;

    fn request(session: SessionChoice) -> RunRequest {
        RunRequest {
            prompt: "task".into(),
            request_from: crate::pipeline::request::RequestFrom::File,
            workspace: "/ws".into(),
            sandbox: SandboxMode::WorkspaceWrite,
            session,
            return_all_messages: false,
            return_metrics: false,
            log_metrics: false,
            idle_timeout: Duration::from_secs(300),
            max_duration: None,
            max_retries: 0,
            claude_bin: None,
            backend: crate::config::BackendArgs::default(),
            sandbox_args: Default::default(),
            max_line_bytes: 1024,
            kill_grace: DEFAULT_KILL_GRACE,
            transcript: None,
            quiet: true,
            run_id: None,
            max_turns: None,
            checks: Default::default(),
            worktree: None,
            plan: None,
            task_title: "task".into(),
            targets: 0,
            store: Default::default(),
            allow_questions: false,
            key_places: Default::default(),
        }
    }

    #[test]
    fn the_clis_sandbox_is_switched_off_only_where_something_could_switch_it_on() {
        let ws = tempfile::tempdir().unwrap();
        let none: Vec<(OsString, OsString)> = vec![("IS_SANDBOX".into(), "1".into())];
        assert!(!cli_sandbox_may_be_asked_for(ws.path(), &none));
        let named = vec![("CLAUDE_CODE_BUBBLEWRAP".into(), "1".into())];
        assert!(cli_sandbox_may_be_asked_for(ws.path(), &named));
        std::fs::create_dir(ws.path().join(".claude")).unwrap();
        assert!(!cli_sandbox_may_be_asked_for(ws.path(), &none));
        for name in ["settings.json", "settings.local.json"] {
            let file = ws.path().join(".claude").join(name);
            std::os::unix::fs::symlink("/nonexistent", &file).unwrap();
            assert!(cli_sandbox_may_be_asked_for(ws.path(), &none), "{name}");
            // A workspace below a directory with settings.
            let below = ws.path().join("sub/dir");
            std::fs::create_dir_all(&below).unwrap();
            assert!(cli_sandbox_may_be_asked_for(&below, &none), "{name} above");
            std::fs::remove_file(&file).unwrap();
            assert!(!cli_sandbox_may_be_asked_for(&below, &none), "{name} gone");
            // Above the repository's top: not the CLI's project settings.
            std::os::unix::fs::symlink("/nonexistent", &file).unwrap();
            std::fs::create_dir(ws.path().join("sub/.git")).unwrap();
            assert!(
                !cli_sandbox_may_be_asked_for(&below, &none),
                "{name} above .git"
            );
            std::fs::remove_dir(ws.path().join("sub/.git")).unwrap();
            std::fs::remove_file(&file).unwrap();
        }
    }

    #[test]
    fn new_and_resumed_sessions() {
        let id = Uuid::new_v4();
        let args = claude_args(&request(SessionChoice::New(id)));
        let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            &args[..4],
            ["-p", "--output-format", "stream-json", "--verbose"]
        );
        assert!(
            args.windows(2)
                .any(|w| w[0] == "--session-id" && w[1] == id.to_string())
        );
        let args = claude_args(&request(SessionChoice::Resume(id)));
        let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert!(
            args.windows(2)
                .any(|w| w[0] == "--resume" && w[1] == id.to_string())
        );
        assert!(!args.iter().any(|a| a.starts_with("--mcp-config")));
    }

    #[test]
    fn questions_add_coders_own_mcp_server_and_allow_its_tool() {
        let mut req = request(SessionChoice::New(Uuid::new_v4()));
        req.allow_questions = true;
        let args: Vec<String> = claude_args(&req)
            .iter()
            .map(|a| a.to_string_lossy().into())
            .collect();
        let at = args.iter().position(|a| a == "--mcp-config").unwrap();
        let config: serde_json::Value = serde_json::from_str(&args[at + 1]).unwrap();
        let server = &config["mcpServers"]["coder"];
        assert_eq!(server["args"], serde_json::json!(["ask-server"]));
        assert_eq!(server["alwaysLoad"], true);
        assert!(Path::new(server["command"].as_str().unwrap()).is_absolute());
        assert!(args.contains(&"--allowedTools=mcp__coder__ask_user".to_owned()));
    }

    #[test]
    fn env_drops_claudecode_and_caps_tool_timeouts() {
        let req = request(SessionChoice::New(Uuid::new_v4()));
        let env = child_env(
            vec![
                ("CLAUDECODE".into(), "1".into()),
                ("BASH_MAX_TIMEOUT_MS".into(), "5".into()),
            ],
            &req,
        );
        assert!(!env.iter().any(|(k, _)| k == "CLAUDECODE"));
        assert!(env.contains(&("BASH_MAX_TIMEOUT_MS".into(), "5".into())));
        assert!(env.contains(&("BASH_DEFAULT_TIMEOUT_MS".into(), "270000".into())));
        let env = child_env(vec![("API_TIMEOUT_MS".into(), "3000000".into())], &req);
        assert!(env.contains(&("API_TIMEOUT_MS".into(), "270000".into())));
    }

    #[test]
    fn resolves_programs_on_path() {
        assert!(matches!(
            resolve_program(None, Some(OsStr::new("/nonexistent"))),
            Err(ProgramError::NotOnPath { .. })
        ));
        assert_eq!(
            resolve_program(Some(Path::new("sh")), Some(OsStr::new("/nonexistent:/bin"))).unwrap(),
            PathBuf::from("/bin/sh")
        );
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("claude");
        std::fs::write(&plain, "not executable").unwrap();
        assert!(matches!(
            resolve_program(Some(&plain), None),
            Err(ProgramError::NotExecutable { .. })
        ));
        assert!(matches!(
            resolve_program(Some(&dir.path().join("missing")), None),
            Err(ProgramError::Missing { .. })
        ));
    }
}
