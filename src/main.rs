//! The `coder` binary: parse, run, print one envelope, exit with its code.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::SUCCESS
}
