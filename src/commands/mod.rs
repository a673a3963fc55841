//! Subcommand entry points, one file each: each turns its argv into a call of the library
//! and the result into output and an exit code. Nothing in the library imports from here;
//! `main.rs` only picks the file from the first argument.

pub mod ask_server;
pub mod doctor;
pub mod fs;
pub mod mcp;
mod mcp_stdio;
pub mod plan;
pub mod prompt;
pub mod replay;
pub mod route;
pub mod run;
pub mod runs;
pub mod sandbox;
mod sandbox_fork;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// The subcommands a user can name (the hidden helper ones are not): `coder help NAME`
/// takes them, and a run whose first word is a near miss of one says so.
pub const SUBCOMMANDS: [&str; 9] = [
    "doctor", "prompt", "replay", "plan", "runs", "route", "fs", "mcp", "sandbox",
];

/// The subcommand `word` is a near miss of (`doctr`, `rnus`), if one: a run has no `--cd`
/// and this word as its task, which reads as a misspelt subcommand.
pub fn near_subcommand(word: &str) -> Option<&'static str> {
    if word.is_empty() || word.starts_with('-') || word.contains(char::is_whitespace) {
        return None;
    }
    let word = word.to_ascii_lowercase();
    SUBCOMMANDS.into_iter().find(|name| {
        let allowed = if name.len() < 4 { 1 } else { 2 };
        *name != word && crate::text::edit_distance(&word, name) <= allowed
    })
}

/// Exit status when stdout cannot be written for a reason other than a closed pipe
/// (EX_IOERR).
pub(crate) const EXIT_IO_ERROR: u8 = 74;

/// Writes `text` to stdout and flushes it. A reader that went away first
/// (`coder runs list | head -1`: EPIPE) is a normal end, as it is for any Unix filter, so
/// only other write errors (a full disk, an I/O error) are reported: a line on stderr
/// naming the error, and exit status 74. Every subcommand prints through here: `println!`
/// would panic on the closed pipe.
pub fn write_stdout(text: &str) -> Result<(), ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "coder: cannot write to stdout: {e}");
            Err(ExitCode::from(EXIT_IO_ERROR))
        }
    }
}

/// [`write_stdout`], then `code` unless the write failed.
pub fn print_then(text: &str, code: ExitCode) -> ExitCode {
    match write_stdout(text) {
        Ok(()) => code,
        Err(failed) => failed,
    }
}

/// Reports what kept a subcommand from answering, as a `config_error`: `prefix` and
/// `message` on stderr, or with `--json` (`json`) the envelope with `message` on stdout,
/// which the program that asked for JSON parses (an empty stdout read as a broken tool).
/// Exits `code` either way.
pub(crate) fn fail_as_config_error(json: bool, prefix: &str, message: &str, code: u8) -> ExitCode {
    if !json {
        eprintln!("{prefix}{message}");
        return ExitCode::from(code);
    }
    run::finish(run::config_error(
        message.to_owned(),
        code,
        crate::pipeline::request::KnownLimits::default(),
    ))
}

/// Parses a subcommand's arguments (`args`: those after its name). On `--help` or a usage
/// error clap's text is printed and the exit status returned: 0 for help, 2 for misuse;
/// with `--json` a usage error is a `config_error` envelope on stdout instead.
pub fn parse_subcommand<T: Parser + 'static>(
    name: &str,
    args: &[OsString],
) -> Result<T, std::process::ExitCode> {
    let argv: Vec<OsString> = std::iter::once(OsString::from(name))
        .chain(args.iter().cloned())
        .collect();
    crate::config::parse_args::<T>(&argv).map_err(|e| {
        // `--json` output is read by a program: a mistake in the arguments is a
        // `config_error` envelope on stdout, as `coder route … --json` and a run give; it
        // was clap's text on stderr (`coder doctor --json --connect-timeout 0`).
        let json = args
            .iter()
            .take_while(|a| *a != "--")
            .any(|a| a == "--json");
        if json {
            return run::finish(run::usage_error::<T>(&e, &argv, &format!("{name} --help")));
        }
        usage_exit::<T>(name, &e, &argv)
    })
}

/// Prints clap's error `e` of parsing `argv` as a `T` (the subcommand `name`) on stderr and
/// returns its exit status; a non-UTF-8 argument is named (clap says only that "one or more
/// arguments" are not UTF-8).
pub fn usage_exit<T: Parser + 'static>(
    name: &str,
    e: &clap::Error,
    argv: &[OsString],
) -> std::process::ExitCode {
    if e.kind() == clap::error::ErrorKind::InvalidUtf8
        && let Some(which) = run::non_utf8_argument::<T>(argv)
    {
        eprintln!("{name}: {which} is not valid UTF-8; give it as UTF-8 text (see {name} --help)");
        return std::process::ExitCode::from(2);
    }
    let fixed = run::corrected::<T>(e, argv, name);
    let e = fixed.as_ref().unwrap_or(e);
    let _ = e.print();
    std::process::ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}
