//! The `coder` binary: parse, run, print one envelope, exit with its code.

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|arg| arg == "replay") {
        return coder::replay::serve_command(&args[1..]);
    }
    std::process::ExitCode::SUCCESS
}
