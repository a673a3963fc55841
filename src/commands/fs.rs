//! `coder fs VERB --base DIR JSON`: one jailed workspace operation from a shell (DESIGN
//! §11). The operations themselves live in [`crate::workspace::fs`]; this file reads the
//! arguments, finds the config file's extra `deny` globs, and prints the result JSON or
//! the error object `{"code", "message"}` (exit status 1).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use serde_json::Value;

use crate::config::{BackendArgs, ConfigFile, config_file_location};
use crate::text::json_terminal_safe;
use crate::workspace::fs::{FsCode, FsError, Jail, Verb};

#[derive(Debug, Parser)]
#[command(
    name = "coder fs",
    about = "Run one jailed workspace operation: read-file, search, update-file, create-file, \
             delete-file, list-folder, tree"
)]
struct FsArgs {
    /// The operation.
    verb: String,
    /// The payload: a JSON object, or `-` to read it from stdin.
    json: String,
    /// The folder every path is relative to and confined in (never `/`, a system tree, the
    /// home directory or one holding coder's state directory).
    #[arg(long, value_name = "DIR")]
    base: PathBuf,
    /// Config file whose `deny` globs are added [default: $XDG_CONFIG_HOME/coder/config.toml].
    #[arg(long, env = "CODER_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Entry point of `coder fs ...` (`args`: those after `fs`).
pub fn fs_command(args: &[OsString]) -> ExitCode {
    let parsed: FsArgs = match super::parse_subcommand("coder fs", args) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    match run(&parsed) {
        // A file's content and names the agent chose, for a terminal as often as not.
        Ok(value) => super::print_then(
            &json_terminal_safe(&format!("{value}\n")),
            ExitCode::SUCCESS,
        ),
        Err(e) => super::print_then(
            &json_terminal_safe(&format!("{}\n", e.to_json())),
            ExitCode::from(1),
        ),
    }
}

fn run(args: &FsArgs) -> Result<Value, FsError> {
    let Some(verb) = Verb::parse(&args.verb) else {
        let names: Vec<&str> = Verb::ALL.iter().map(|v| v.name()).collect();
        return Err(bad(format!(
            "unknown operation {:?}; one of {}",
            args.verb,
            names.join(", ")
        )));
    };
    let text = if args.json == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| bad(format!("cannot read stdin: {e}")))?;
        s
    } else {
        args.json.clone()
    };
    if text.trim().is_empty() {
        return Err(bad(
            "the JSON payload is empty: give the operation's object, like \
             '{\"path\": \"src/main.rs\"}' (see coder fs --help)"
                .to_owned(),
        ));
    }
    let payload: Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("payload is not JSON: {e}")))?;
    let jail = open_jail(&args.base, args.config.as_deref())?;
    jail.run(verb, payload)
}

/// The jail at `base` with the config file's `deny` globs (`config`, else `CODER_CONFIG`,
/// else the XDG default when it exists). Shared with `coder mcp`.
pub fn open_jail(base: &Path, config: Option<&Path>) -> Result<Jail, FsError> {
    let args = BackendArgs {
        config: config.map(Path::to_path_buf),
        ..BackendArgs::default()
    };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut deny = Vec::new();
    if let Some(loc) = config_file_location(&args, &env)
        && (loc.explicit || loc.path.exists())
    {
        let file = ConfigFile::load(&loc.path).map_err(|e| bad(format!("config: {e}")))?;
        deny = file.deny;
    }
    refuse_unsafe_base(base)?;
    Jail::new(base, &deny)
}

/// A base the tools may not have: one no confined run may have as its workspace (`/`, a
/// system tree, the home directory or an ancestor: every dotfile and key the user has,
/// `~/.bashrc` to rewrite), or one holding coder's state directory (the CLI's login copy,
/// the session histories a resume replays, other runs' transcripts). `coder mcp` takes
/// the current directory by default, and a host that starts it from the home directory
/// handed all of that to the model's file tools.
fn refuse_unsafe_base(base: &Path) -> Result<(), FsError> {
    // One that cannot be resolved is [`Jail::new`]'s to report.
    let Ok(real) = std::fs::canonicalize(base) else {
        return Ok(());
    };
    if let Some(reason) = crate::sandbox::workspace_refusal_here(&real) {
        return Err(bad(format!("base {}: {reason}", base.display())));
    }
    for home in home_dirs() {
        let reason = crate::sandbox::workspace_refusal(&real, Some(&home));
        if reason.is_some() || holds_by_inode(&real, &home) {
            return Err(bad(format!(
                "base {}: is the home directory {} or one of its ancestors (by another \
                 path, or by the user's entry when HOME names another), which hold keys \
                 and dotfiles; use a project directory",
                base.display(),
                home.display()
            )));
        }
    }
    let state = crate::config::state_dir()
        .ok()
        .and_then(|dir| std::fs::canonicalize(dir).ok());
    if let Some(state) =
        state.filter(|state| state.starts_with(&real) || holds_by_inode(&real, state))
    {
        return Err(bad(format!(
            "base {}: holds coder's state directory {} (the CLI's login, session histories, \
             transcripts), which the file tools could read and rewrite; use a project \
             directory, or set CODER_STATE_DIR elsewhere",
            base.display(),
            state.display()
        )));
    }
    Ok(())
}

/// The home directories a base may not be or hold: `$HOME`'s and the user's entry's
/// (canonical). `$HOME` alone let a host that starts `coder mcp` with no `HOME`, or with
/// one of its own, hand the tools the user's real home (round twenty's review).
fn home_dirs() -> Vec<PathBuf> {
    let entry = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|user| user.dir);
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .into_iter()
        .chain(entry)
        .filter_map(|home| std::fs::canonicalize(home).ok())
        .collect()
}

/// Whether `dir` is `target` or one of its ancestors by device and inode: a bind mount of
/// the home directory (`mount --bind ~ /mnt/h`) is another path to it, which a comparison
/// of paths let through (round twenty's review).
fn holds_by_inode(dir: &Path, target: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::metadata(dir) else {
        return false;
    };
    target
        .ancestors()
        .any(|a| std::fs::metadata(a).is_ok_and(|m| m.dev() == dir.dev() && m.ino() == dir.ino()))
}

fn bad(message: String) -> FsError {
    FsError {
        code: FsCode::C210,
        message,
    }
}
