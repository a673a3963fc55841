//! `coder doctor`: run every check of [`crate::doctor`] against this process's environment
//! and print the report (text or JSON); exit 0 only when a run could succeed.

use std::ffi::OsString;
use std::process::ExitCode;

use crate::doctor::{DoctorArgs, run_checks};

/// Entry point of `coder doctor`; `args` are the arguments after `doctor`.
pub fn doctor_command(args: &[OsString]) -> ExitCode {
    let args: DoctorArgs = match super::parse_subcommand("coder doctor", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let report = run_checks(&args, &env);
    let text = if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => text + "\n",
            Err(_) => return ExitCode::from(70),
        }
    } else {
        report.render()
    };
    let code = if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    super::print_then(&report.redact(&text), code)
}
