//! `coder prompt`: print the prompt a run would send, without running anything (the very
//! bytes into a pipe or a file; a newline added on a terminal when it ends without one).

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use crate::exit::ErrorKind;
use crate::pipeline::prompt::{PLAN_TASK, PromptArgs, assemble_prompt, read_task_from_stdin};

#[derive(Debug, Parser)]
#[command(
    name = "coder prompt",
    about = "Print the prompt a run would send, without running anything."
)]
struct PromptCommand {
    #[command(flatten)]
    prompt: PromptArgs,

    /// The task text; read from stdin when absent or `-`.
    #[arg(value_name = "PROMPT")]
    task: Option<String>,
}

/// The prompt as printed: exactly as sent into a pipe or a file, so a script gets the very
/// bytes; on a terminal with a newline after it when it has none, so the shell's prompt
/// does not start on its last line.
fn for_stdout(prompt: String) -> String {
    use std::io::IsTerminal;
    if prompt.ends_with('\n') || !std::io::stdout().is_terminal() {
        return prompt;
    }
    prompt + "\n"
}

/// Entry point of `coder prompt`; `args` are the arguments after `prompt`. Prints the
/// assembled prompt on stdout; exit 0, 2 for usage errors, 78 for a `config_error`.
pub fn prompt_command(args: &[OsString]) -> ExitCode {
    let command: PromptCommand = match super::parse_subcommand("coder prompt", args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let task = match command.task.as_deref() {
        Some(task) if task != "-" => Ok(task.to_owned()),
        None if command.prompt.plan.is_some() => Ok(PLAN_TASK.to_owned()),
        _ => read_task_from_stdin(),
    };
    match task.and_then(|task| assemble_prompt(&task, &command.prompt)) {
        Ok(prompt) => super::print_then(&for_stdout(prompt), ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("coder prompt: {e}");
            ExitCode::from(ErrorKind::ConfigError.exit_code())
        }
    }
}
