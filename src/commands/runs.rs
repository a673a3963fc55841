//! `coder runs list` and `coder runs show RUN`: the recorded runs, read back from their
//! transcripts (see [`crate::journal::runs`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::journal::runs::{
    RunSummary, account, count_prefixed, find_run, list_runs, read_entries, render,
};
use crate::text::{Secrets, json_terminal_safe, names::secret_values, terminal_safe};

#[derive(Debug, Parser)]
#[command(
    name = "coder runs",
    about = "List and show recorded runs (their transcripts)"
)]
struct RunsArgs {
    #[command(subcommand)]
    command: RunsCommand,
    /// The state directory to read [default: coder's state dir].
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// Recorded runs, newest first.
    List {
        /// Print the runs as a JSON list.
        #[arg(long)]
        json: bool,
        /// At most this many runs (at least 1).
        #[arg(long, short = 'n', default_value_t = 20, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// A readable account of one run: prompt, tool calls and results, outcome.
    Show {
        /// A run id, a unique prefix of one, `last`, or a transcript path.
        run: String,
        /// Print the account as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Entry point of `coder runs ...`.
pub fn runs_command(args: &[OsString]) -> ExitCode {
    // `args` is coder's whole command line: `coder runs ...`.
    let after = args.get(2..).unwrap_or_default();
    let parsed: RunsArgs = match super::parse_subcommand("coder runs", after) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let json = match &parsed.command {
        RunsCommand::List { json, .. } | RunsCommand::Show { json, .. } => *json,
    };
    let state_dir = match state_dir(parsed.state_dir.clone()) {
        Ok(dir) => dir,
        Err(message) => {
            let code = crate::exit::ErrorKind::ConfigError.exit_code();
            return super::fail_as_config_error(json, "", &format!("coder runs: {message}"), code);
        }
    };
    let dir = crate::journal::transcript::runs_dir(&state_dir);
    match parsed.command {
        RunsCommand::List { json, limit } => list_command(&dir, json, limit),
        RunsCommand::Show { run, json } => show_command(&dir, &run, json),
    }
}

/// `coder runs list`: the newest `limit` runs of `dir`, as a table or JSON.
fn list_command(dir: &Path, json: bool, limit: u32) -> ExitCode {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let runs = match list_runs(dir, limit) {
        Ok(runs) => runs,
        Err(e) => {
            let message = format!("coder runs list: cannot read {}: {e}", dir.display());
            return super::fail_as_config_error(json, "", &message, 1);
        }
    };
    if json {
        let json = serde_json::to_string_pretty(&runs).unwrap_or_default() + "\n";
        return super::print_then(&json_terminal_safe(&json), ExitCode::SUCCESS);
    }
    let out = if runs.is_empty() {
        format!("no recorded runs in {}\n", dir.display())
    } else {
        runs_table(&runs)
    };
    // The table is for a terminal (JSON went out above, its own escapes used).
    super::print_then(&terminal_safe(&out), ExitCode::SUCCESS)
}

/// One row per run, the backend column as wide as the longest backend (replay:PATH is
/// long), so the workspace column lines up.
fn runs_table(runs: &[RunSummary]) -> String {
    let width = runs
        .iter()
        .map(|r| r.backend.chars().count())
        .max()
        .unwrap_or(0)
        .max(10);
    let mut out = format!(
        "{:<36} {:<20} {:<24} {:>9} {:>12}  {:<width$} workspace\n",
        "run", "started", "outcome", "duration", "tokens", "backend"
    );
    for run in runs {
        out += &format!(
            "{:<36} {:<20} {:<24} {:>9} {:>12}  {:<width$} {}\n",
            run.run_id,
            run.started.get(..19).unwrap_or(&run.started),
            run.outcome,
            run.duration_ms
                .map_or("-".to_owned(), |ms| format!("{:.1}s", ms as f64 / 1000.0)),
            format!("{}/{}", run.tokens_in, run.tokens_out),
            run.backend,
            one_line_path(&run.workspace)
        );
    }
    out
}

/// `coder runs show RUN`: the account of one run (an id, a unique prefix, `last` or a
/// transcript path), redacted, as text or JSON.
fn show_command(dir: &Path, run: &str, json: bool) -> ExitCode {
    let Some(path) = find_run(dir, run) else {
        // A prefix of several ids was reported as matching none.
        let message = match count_prefixed(dir, run) {
            _ if run.trim().is_empty() => "coder runs show: RUN is empty: give a run id \
                 (or a prefix of one) from coder runs list, or last"
                .to_owned(),
            n if n > 1 => format!(
                "coder runs show: {n} runs in {} start with {run:?}; give more of the \
                 run id (see coder runs list)",
                dir.display()
            ),
            _ => format!(
                "coder runs show: no run matches {run:?} in {} (see coder runs list)",
                dir.display()
            ),
        };
        return super::fail_as_config_error(json, "", &message, 1);
    };
    let entries = match read_entries(&path) {
        Ok(entries) => entries,
        Err(e) => {
            let message = format!("coder runs show: cannot read {}: {e}", path.display());
            return super::fail_as_config_error(json, "", &message, 1);
        }
    };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let account = redacted_account(&entries, &env);
    let text = if json {
        let json = serde_json::to_string_pretty(&account).unwrap_or_default();
        json_terminal_safe(&json).into_owned() + "\n"
    } else {
        // The account holds the agent's text: its escapes must not reach the user's
        // terminal.
        terminal_safe(&render(&account)).into_owned()
    };
    super::print_then(&text, ExitCode::SUCCESS)
}

/// The state directory to read: `--state-dir`, which must be an existing directory (a
/// typo must not read as "no recorded runs"), else coder's own.
fn state_dir(given: Option<PathBuf>) -> Result<PathBuf, String> {
    let Some(dir) = given else {
        return crate::config::state_dir().map_err(|e| e.to_string());
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => Ok(dir),
        Ok(_) => Err(format!(
            "--state-dir {}: not a directory; pass coder's state directory",
            dir.display()
        )),
        Err(e) => {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "no such directory".to_owned(),
                std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
                _ => e.to_string(),
            };
            Err(format!(
                "--state-dir {}: {why}; pass coder's state directory (where its runs/ are)",
                dir.display()
            ))
        }
    }
}

/// A run's account as `coder runs show` prints it, redacted once more with this process's
/// secrets and today's token shapes: a transcript an older coder wrote (which knew fewer
/// shapes, and kept a Z.ai key or a `Basic` header whole) is shown without them too.
fn redacted_account(
    entries: &[serde_json::Value],
    env: &[(OsString, OsString)],
) -> serde_json::Value {
    let mut account = account(entries);
    Secrets::new(secret_values(env)).redact_value(&mut account);
    account
}

/// A path for one line of a listing: quoted and escaped when it holds a control character
/// (a newline in a directory name would split the run's row in two).
fn one_line_path(path: &str) -> std::borrow::Cow<'_, str> {
    if path.chars().any(char::is_control) {
        format!("{path:?}").into()
    } else {
        path.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_transcripts_tokens_are_not_shown() {
        let glm = "5371d5ed2fa84618852eee0459455c57.dgquQksHDfyLekKX";
        let entries: Vec<serde_json::Value> = [
            format!(r#"{{"ts":"t","source":"coder","kind":"start","data":{{"prompt":"use {glm}"}}}}"#),
            format!(r#"{{"ts":"t","source":"coder","kind":"outcome","data":{{"success":false,"error":"401 for {glm}","result":"Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l"}}}}"#),
        ]
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
        let shown = render(&redacted_account(&entries, &[]));
        assert!(!shown.contains("dgquQksHDfyLekKX"), "{shown}");
        assert!(!shown.contains("YWxhZGRp"), "{shown}");
        assert!(shown.contains("[REDACTED]"), "{shown}");
    }
}
