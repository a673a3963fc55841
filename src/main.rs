//! The `coder` binary: parse, run, print one envelope, exit with its code.

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match args.first().and_then(|a| a.to_str()) {
        Some("doctor") => coder::doctor::doctor_command(&args[1..]),
        Some("prompt") => coder::prompt::prompt_command(&args[1..]),
        _ => ExitCode::SUCCESS,
    }
}
