//! The `coder` binary: parse, run, print one envelope, exit with its code.

fn main() -> std::process::ExitCode {
    // `coder sandbox` confines this very process and execs the command: it must run
    // before anything starts a thread.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "sandbox") {
        return coder::sandbox::sandbox_command(&args[2..]);
    }
    std::process::ExitCode::SUCCESS
}
