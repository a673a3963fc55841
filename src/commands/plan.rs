//! `coder plan --cd DIR [--plan-file PATH] [--edit] [run flags] TASK`: one run whose agent
//! writes a plan instead of changing the workspace (DESIGN §9).
//!
//! The run is the run mode's, with three things fixed here: the sandbox is `read-only`
//! with exactly one writable file, the plan (default `<state>/plans/<run-id>.md`); the
//! prompt gets the planning section naming that file; and the envelope gets `plan_file`
//! and `plan`. `--edit` then opens `$VISUAL`/`$EDITOR` on the plan, only when stdin and
//! stdout are terminals. Flags that would widen what the agent may write (`--sandbox`
//! other than read-only, `--write`, `--allow-tmp`, `--worktree`) and `--plan` are refused
//! as `config_error`s before anything runs.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::commands::run::{
    Output, config_error, execute, finish, guarded, request_from, usage_error,
};
use crate::exit::ErrorKind;
use crate::pipeline::request::{
    ArgError, PlanRole, RunArgs, SandboxMode, SessionChoice, parse_run_id,
};

/// `coder plan --cd DIR [--plan-file PATH] [--edit] [OPTIONS] [PROMPT | -]`
#[derive(Debug, Parser)]
#[command(
    name = "coder plan",
    about = "Make a plan for a task: the agent studies the read-only workspace and writes its plan to one file, the only one it may write. Prints one JSON envelope with plan_file and plan; carry the plan out with coder --plan FILE.",
    after_help = "Run flags (backend, limits, prompt framing, sandbox reads) work as in the run mode; --sandbox other than read-only, --write, --allow-tmp, --worktree and --plan are refused.",
    // The run mode's help for --sandbox says workspace-write is the default; a plan is
    // always read-only, and the flags that would widen it are refused: not offered here.
    mut_arg("sandbox", |a| a.help("Only read-only (the default here: a plan changes nothing)").long_help(None::<&str>).hide_possible_values(true)),
    mut_arg("write", |a| a.hide(true)),
    mut_arg("allow_tmp", |a| a.hide(true)),
    mut_arg("worktree", |a| a.hide(true)),
    mut_arg("worktree_base", |a| a.hide(true)),
    mut_arg("plan", |a| a.hide(true)),
    mut_arg("backend", |a| a.help(crate::pipeline::request::RUN_BACKEND_HELP))
)]
struct PlanArgs {
    /// Where the plan is written [default: <state>/plans/<run-id>.md]. An existing file is
    /// emptied first (kept when --session-id resumes). Inside the workspace only a new or
    /// untracked file (never in .git).
    #[arg(long = "plan-file", value_name = "PATH")]
    plan_file: Option<PathBuf>,

    /// Open $VISUAL, else $EDITOR, else vi on the plan after the run (only when stdin and
    /// stdout are terminals; otherwise ignored with a warning).
    #[arg(long)]
    edit: bool,

    #[command(flatten)]
    run: RunArgs,
}

/// `coder plan …` (`args`: those after `plan`): prints one envelope, returns its exit code.
pub fn plan_command(args: &[OsString]) -> ExitCode {
    // As the run mode: a cancelling signal before the run listens waits for it.
    let _ = crate::supervise::signals::hold_cancelling();
    finish(guarded(|| plan_mode(args)))
}

fn plan_mode(args: &[OsString]) -> Output {
    let argv: Vec<OsString> = std::iter::once(OsString::from("coder plan"))
        .chain(args.iter().cloned())
        .collect();
    let parsed = match crate::config::parse_args::<PlanArgs>(&argv) {
        Ok(parsed) => parsed,
        Err(e) => return usage_error::<PlanArgs>(&e, &argv, "coder plan --help"),
    };
    let limits = parsed.run.known_limits();
    let fail = |message: String| {
        config_error(
            message.lines().next().unwrap_or_default().to_owned(),
            ErrorKind::ConfigError.exit_code(),
            limits,
        )
    };
    let PlanArgs {
        plan_file,
        edit,
        mut run,
    } = parsed;
    if let Err(message) = refuse_widening(&run) {
        return fail(message);
    }
    let run_id = match run.run_id.as_deref().map(parse_run_id).transpose() {
        Ok(Some(id)) => id,
        Ok(None) => crate::pipeline::run::new_run_id(),
        Err(ArgError::Invalid(m)) => return fail(m),
    };
    let file = match plan_file_path(plan_file.as_deref(), &run_id) {
        Ok(file) => file,
        Err(message) => return fail(message),
    };
    run.sandbox = Some(SandboxMode::ReadOnly);
    run.run_id = Some(run_id);
    run.prompt_framing.plan_output = Some(file.clone());
    let mut request = match request_from(run, fail) {
        Ok(request) => request,
        Err(output) => return output,
    };
    if request.worktree.is_some() {
        return fail("coder plan changes nothing to commit; drop worktree".to_owned());
    }
    let existed = std::fs::symlink_metadata(&file).is_ok();
    let fresh = matches!(request.session, SessionChoice::New(_));
    if let Err(e) = crate::pipeline::plan::prepare(&file, &request.workspace, fresh) {
        return fail(e.to_string());
    }
    request.sandbox = SandboxMode::ReadOnly;
    request.plan = Some(PlanRole::Write { file: file.clone() });
    let mut output = execute(request);
    if let Output::Envelope { envelope, .. } = &output
        && envelope.error_kind == Some(ErrorKind::ConfigError)
        && !existed
        && std::fs::metadata(&file).is_ok_and(|m| m.len() == 0)
    {
        // Refused before the agent started: the empty file coder made goes again.
        let _ = std::fs::remove_file(&file);
    }
    // Not after a run refused before it started (its plan file is gone again).
    if edit
        && std::fs::symlink_metadata(&file).is_ok()
        && let Output::Envelope { envelope, .. } = &mut output
    {
        edit_plan(&file, envelope);
    }
    output
}

/// The run flags that would let the agent write more than the plan file, or carry out a
/// plan instead of writing one: the message refusing the first found.
fn refuse_widening(run: &RunArgs) -> Result<(), String> {
    if let Some(mode) = run.sandbox.filter(|m| *m != SandboxMode::ReadOnly) {
        return Err(format!(
            "coder plan runs with the workspace read-only; drop --sandbox {mode}"
        ));
    }
    if !run.sandbox_args.write.is_empty() || run.sandbox_args.allow_tmp {
        return Err(
            "coder plan lets the agent write only the plan file; drop --write and --allow-tmp"
                .to_owned(),
        );
    }
    if run.many.worktree {
        return Err("coder plan changes nothing to commit; drop --worktree".to_owned());
    }
    if run.prompt_framing.plan.is_some() {
        return Err("--plan executes a plan, coder plan writes one: drop --plan".to_owned());
    }
    Ok(())
}

/// The plan file: `--plan-file` checked, else `<state>/plans/<run-id>.md`.
fn plan_file_path(given: Option<&std::path::Path>, run_id: &str) -> Result<PathBuf, String> {
    match given {
        Some(path) => crate::sandbox::check_plan_file(path),
        None => {
            let state = crate::config::state_dir().map_err(|e| e.to_string())?;
            crate::pipeline::plan::default_path(&state, run_id).map_err(|e| e.to_string())
        }
    }
}

/// `--edit`: the editor on the plan, then the plan as edited into the envelope.
fn edit_plan(file: &std::path::Path, envelope: &mut crate::pipeline::envelope::Envelope) {
    if let Some(warning) = open_editor(file) {
        envelope.warnings.push(warning);
    }
    match crate::pipeline::plan::read(file) {
        Ok(text) => envelope.plan = Some(text),
        Err(e) => envelope.warnings.push(format!(
            "cannot read the plan file {} after editing: {e}",
            file.display()
        )),
    }
}

/// Opens `$VISUAL` (else `$EDITOR`, else `vi`) on `file` when stdin and stdout are
/// terminals; a warning when it did not or could not.
fn open_editor(file: &std::path::Path) -> Option<String> {
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return Some(
            "--edit ignored: stdin and stdout are not both terminals, so no editor was opened"
                .to_owned(),
        );
    }
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned());
    // Through the shell, as editors are configured (`EDITOR="code --wait"`).
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file)
        .status();
    match status {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("--edit: the editor ({editor}) exited with {s}")),
        Err(e) => Some(format!("--edit: cannot start the editor ({editor}): {e}")),
    }
}
