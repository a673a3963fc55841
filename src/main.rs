//! The `coder` binary: pick the subcommand from the first argument, run it, exit with its
//! code. Everything else lives in the library.

use std::ffi::OsString;
use std::process::ExitCode;

use coder::commands;
use coder::commands::SUBCOMMANDS;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    // The nesting wrapper of the agent's tool shells, chosen by its name (`.../nest/bash`,
    // the CLI's `CLAUDE_CODE_SHELL`).
    if args
        .first()
        .is_some_and(|a| coder::sandbox::nest::is_nest_invocation(a))
    {
        coder::sandbox::nest::nest_main(&args);
    }
    // A panic's message on stderr is redacted like everything else coder prints.
    commands::run::redact_panics();
    match help_as_flag(args) {
        Ok(args) => dispatch(&args),
        Err(code) => code,
    }
}

/// `coder help` and `coder help SUBCOMMAND` as `coder --help` and `coder SUBCOMMAND --help`
/// (as git and cargo take them). Never a prompt: a run needs `--cd` before its prompt.
/// A name that is no subcommand is refused here: passed on, it would reach the run's parser
/// as a prompt and print the top usage as if it were the subcommand's.
fn help_as_flag(args: Vec<OsString>) -> Result<Vec<OsString>, ExitCode> {
    if args.get(1).is_none_or(|a| a != "help") || args.len() > 3 {
        return Ok(args);
    }
    if let Some(name) = args.get(2)
        && !SUBCOMMANDS.iter().any(|known| name == known)
    {
        eprintln!(
            "coder: no subcommand {:?} (subcommands: {}); `coder --help` shows the run's flags",
            name.to_string_lossy(),
            SUBCOMMANDS.join(", ")
        );
        return Err(ExitCode::from(2));
    }
    let mut rewritten = vec![args[0].clone()];
    rewritten.extend(args.get(2).cloned());
    rewritten.push("--help".into());
    Ok(rewritten)
}

fn dispatch(args: &[OsString]) -> ExitCode {
    match args.get(1).and_then(|a| a.to_str()) {
        // Must come first: the helper runs single-threaded and execs the child.
        Some(coder::sandbox::helper::HELPER_ARG) => coder::sandbox::helper::helper_main(args),
        // Also before any thread: it confines this process and execs the command.
        Some("sandbox") => commands::sandbox::sandbox_command(&args[2..]),
        // The ask_user tool's MCP server, started by the CLI inside the sandbox (DESIGN §9).
        Some(coder::pipeline::questions::SERVER_ARG) => commands::ask_server::ask_server_command(),
        Some("doctor") => commands::doctor::doctor_command(&args[2..]),
        Some("prompt") => commands::prompt::prompt_command(&args[2..]),
        Some("replay") => commands::replay::serve_command(&args[1..]),
        Some("plan") => commands::plan::plan_command(&args[2..]),
        Some("runs") => commands::runs::runs_command(args),
        Some("route") => commands::route::route_command(args),
        Some("fs") => commands::fs::fs_command(&args[2..]),
        Some("mcp") => commands::mcp::mcp_command(&args[2..]),
        _ => commands::run::run_command(args),
    }
}
