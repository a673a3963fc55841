//! Subcommand entry points, one file each: each turns its argv into a call of the library
//! and the result into output and an exit code. Nothing in the library imports from here;
//! `main.rs` only picks the file from the first argument.

pub mod doctor;
pub mod prompt;
pub mod replay;
pub mod run;
pub mod runs;
pub mod sandbox;
mod sandbox_fork;

use std::ffi::OsString;

use clap::Parser;

/// Parses a subcommand's arguments (`args`: those after its name). On `--help` or a usage
/// error clap's text is printed and the exit status returned: 0 for help, 2 for misuse.
pub fn parse_subcommand<T: Parser>(
    name: &str,
    args: &[OsString],
) -> Result<T, std::process::ExitCode> {
    let argv = std::iter::once(OsString::from(name)).chain(args.iter().cloned());
    T::try_parse_from(argv).map_err(|e| {
        let _ = e.print();
        std::process::ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
    })
}
