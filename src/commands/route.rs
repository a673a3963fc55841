//! `coder route stats|explain|forget`: what `--backend auto` has learnt (DESIGN §10), why
//! it would route a task where it would, and forgetting it.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::json;

use super::run;
use crate::exit::ErrorKind;
use crate::pipeline::request::RunArgs;
use crate::routing::ledger::Ledger as _;
use crate::routing::{self, RouteContext, policy};
use crate::store::StoreArgs;

#[derive(Debug, Parser)]
#[command(
    name = "coder route",
    about = "What --backend auto has learnt, and why it routes where it does"
)]
struct RouteArgs {
    #[command(subcommand)]
    command: RouteCommand,
    #[command(flatten)]
    store: StoreArgs,
    /// Config file: its [backends.NAME] tables and its `store` [default:
    /// $XDG_CONFIG_HOME/coder/config.toml]. As a run's: the store and the backends a run
    /// with `--config FILE` used.
    #[arg(long, env = "CODER_CONFIG", value_name = "FILE", global = true)]
    config: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
enum RouteCommand {
    /// Successes and failures per (backend, bucket), with the posterior means.
    Stats {
        /// Print the tallies as JSON (errors too, as a config_error envelope).
        #[arg(long)]
        json: bool,
    },
    /// The bucket a task falls in, every candidate's posterior, and the probability each
    /// would be chosen: `coder route explain [--json] [run flags] TASK`.
    #[command(disable_help_flag = true)]
    Explain {
        /// Print the explanation as JSON. Read from anywhere among the run flags (see
        /// [`Output::of`]); declared so that clap's tips name it as explain's too.
        #[arg(long)]
        json: bool,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        run_args: Vec<OsString>,
    },
    /// Forget what was learnt about BACKEND (or about every backend): its routed runs, the
    /// request shape remembered after a vendor rejected the full one, and its cooldown.
    Forget {
        /// A backend name (a preset, a config table, or one the store holds); none: every
        /// backend.
        backend: Option<String>,
    },
}

/// Entry point of `coder route ...`.
pub fn route_command(args: &[OsString]) -> ExitCode {
    let after = args.get(2..).unwrap_or_default();
    // `stats --json` and `explain --json …` are read by programs: their errors are a
    // `config_error` envelope on stdout (as a run's are), not a line on stderr.
    let json = Output::of(after);
    let parsed: RouteArgs = if json == Output::Json {
        let argv: Vec<OsString> = std::iter::once(OsString::from("coder route"))
            .chain(after.iter().cloned())
            .collect();
        match crate::config::parse_args::<RouteArgs>(&argv) {
            Ok(parsed) => parsed,
            Err(e) => {
                return run::finish(run::usage_error::<RouteArgs>(
                    &e,
                    &argv,
                    "coder route --help",
                ));
            }
        }
    } else {
        match super::parse_subcommand("coder route", after) {
            Ok(parsed) => parsed,
            Err(code) => return code,
        }
    };
    let fail = |message: &str| json.fail(message);
    let state_dir = match crate::config::state_dir() {
        Ok(dir) => dir,
        Err(e) => return fail(&e.to_string()),
    };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let config = crate::config::BackendArgs {
        config: parsed.config.clone(),
        ..Default::default()
    };
    let ledger = match routing::open_store(&state_dir, &parsed.store, &config, &env) {
        Ok(l) => l,
        Err(e) => return fail(&e.to_string()),
    };
    match parsed.command {
        RouteCommand::Stats { json } => match ledger.tallies(&[]) {
            Ok(tallies) => super::print_then(&stats_text(&tallies, json), ExitCode::SUCCESS),
            Err(e) => fail(&e.to_string()),
        },
        RouteCommand::Forget { backend } => {
            if let Some(name) = &backend
                && let Err(message) = check_known(name, &ledger, &config, &env)
            {
                return fail(&message);
            }
            let forgotten = ledger.forget(backend.as_deref()).and_then(|runs| {
                let shapes = ledger.forget_compat_shape(backend.as_deref())?;
                // A cooldown is learnt from the vendor too: the way to end it early when
                // the quota is back sooner than the vendor said (a plan changed).
                let cooldowns = ledger.clear_cooldown(backend.as_deref())?;
                Ok((runs, shapes, cooldowns))
            });
            match forgotten {
                Ok((runs, shapes, cooldowns)) => super::print_then(
                    &format!(
                        "forgot {runs} routed run(s), {shapes} remembered request shape(s) and \
                         {cooldowns} cooldown(s) of {}\n",
                        backend.as_deref().unwrap_or("every backend")
                    ),
                    ExitCode::SUCCESS,
                ),
                Err(e) => fail(&e.to_string()),
            }
        }
        RouteCommand::Explain { run_args, json: _ } => {
            explain(run_args, (&parsed.store, &config), &state_dir, json)
        }
    }
}

/// `forget NAME` of a name that is no preset, no `[backends.NAME]` table of the config file
/// and nothing the ledger holds is a typo: forgetting nothing must not look like success.
fn check_known(
    name: &str,
    ledger: &crate::store::Store,
    config: &crate::config::BackendArgs,
    env: &[(OsString, OsString)],
) -> Result<(), String> {
    let (_, tables) = crate::config::routing_names(config, env).map_err(|e| e.to_string())?;
    let learnt = ledger.tallies(&[]).map_err(|e| e.to_string())?;
    let mut known: Vec<String> = crate::config::BUILTIN_NAMES
        .iter()
        .map(|n| (*n).to_owned())
        .chain(tables)
        .chain(learnt.into_iter().map(|t| t.backend))
        .collect();
    // A cooldown or a remembered request shape is something learnt about the name too,
    // also of a backend defined only in a config file named by `--config` at its run.
    if known.iter().any(|k| k == name)
        || ledger.cooldown(name).is_ok_and(|c| c.is_some())
        || ledger.compat_shape(name).is_ok_and(|s| s.is_some())
    {
        return Ok(());
    }
    known.sort_unstable();
    known.dedup();
    Err(format!(
        "forget {name:?}: no such backend (not a preset, not a [backends.NAME] table of the \
         config file, nothing learnt about it); known backends: {}",
        known.join(", ")
    ))
}

/// How `coder route` reports: text for people, or JSON (`--json`) for programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

impl Output {
    /// JSON when the arguments after `route` ask for it.
    fn of(args: &[OsString]) -> Output {
        if args.iter().any(|a| a == "--json") {
            Output::Json
        } else {
            Output::Text
        }
    }

    /// Reports a `config_error`: a line on stderr, or the envelope on stdout.
    fn fail(self, message: &str) -> ExitCode {
        super::fail_as_config_error(
            matches!(self, Output::Json),
            "coder route: ",
            message,
            ErrorKind::ConfigError.exit_code(),
        )
    }
}

/// The width of the backend column: 16, or the longest of `names`.
fn backend_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(|n| n.chars().count()).max().unwrap_or(0).max(16)
}

fn stats_text(tallies: &[routing::ledger::Tally], json: bool) -> String {
    let rows: Vec<_> = tallies
        .iter()
        .map(|t| {
            let p = policy::posterior(&t.backend, &t.bucket, tallies);
            (t, p)
        })
        .collect();
    if json {
        let list: Vec<_> = rows
            .iter()
            .map(|(t, p)| {
                json!({"backend": t.backend, "bucket": t.bucket, "successes": t.successes,
                       "failures": t.failures, "alpha": p.alpha, "beta": p.beta, "mean": p.mean()})
            })
            .collect();
        return format!("{}\n", json!({ "tallies": list }));
    }
    if rows.is_empty() {
        return "no routed run has an outcome yet\n".to_owned();
    }
    // As wide as the longest name (a replay:PATH backend is long), so the columns line up.
    let width = backend_width(rows.iter().map(|(t, _)| t.backend.as_str()));
    let mut out = format!(
        "{:<width$} {:<18} {:>9} {:>9} {:>6}\n",
        "backend", "bucket", "successes", "failures", "mean"
    );
    for (t, p) in rows {
        out.push_str(&format!(
            "{:<width$} {:<18} {:>9} {:>9} {:>6.3}\n",
            t.backend,
            t.bucket,
            t.successes,
            t.failures,
            p.mean()
        ));
    }
    out
}

/// `coder route explain --help`: the run's flags (explain takes them all), under explain's
/// own description and with its `--json`. It printed the run mode's help, as if
/// `coder route explain` ran a task.
fn print_explain_help(long: bool) -> ExitCode {
    let mut command = explain_command();
    let help = if long {
        command.render_long_help()
    } else {
        command.render_help()
    };
    super::print_then(&help.to_string(), ExitCode::SUCCESS)
}

/// The run's flags under explain's name and description, with its `--json`: its help, and
/// the parser of its arguments (so that a look-alike of `--json` is offered as `--json`,
/// not as the run's `--json_schema`).
fn explain_command() -> clap::Command {
    use clap::CommandFactory as _;
    RunArgs::command()
        .name("coder route explain")
        .bin_name("coder route explain")
        .about(
            "The bucket a task falls in, every candidate backend's posterior, and the \
             probability each would be chosen. Runs nothing: the run flags only shape the \
             request (--cd defaults to the current directory)",
        )
        .after_help(None::<&'static str>)
        .arg(
            clap::Arg::new("json")
                .long("json")
                .action(clap::ArgAction::SetTrue)
                .help("Print the explanation as JSON (errors too, as a config_error envelope)"),
        )
}

/// `store`, `config`: the route-level `--store` and `--config` (global, so clap takes them
/// also when they come first among explain's run flags).
fn explain(
    mut run_args: Vec<OsString>,
    (store, config): (&StoreArgs, &crate::config::BackendArgs),
    state_dir: &std::path::Path,
    output: Output,
) -> ExitCode {
    let fail = |message: &str| output.fail(message);
    let json = output == Output::Json;
    let flags = run_args.iter().take_while(|a| *a != "--");
    if flags.clone().any(|a| a == "--help" || a == "-h") {
        return print_explain_help(run_args.iter().any(|a| a == "--help"));
    }
    run_args.retain(|a| a != "--json");
    let parsed = match explain_run_args(run_args, (store, config), json) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let request = match parsed.into_request(&mut std::io::stdin()) {
        Ok(r) => r,
        Err(e) => return fail(&e.to_string()),
    };
    // A name that is not `auto…` (from `--backend` or `CODER_BACKEND`) is not routed: what
    // is explained then is the default candidates', and said so.
    let given = request.backend.backend.clone();
    let routed_spec = given
        .as_deref()
        .and_then(|spec| routing::parse_auto(spec).map(|list| (spec.to_owned(), list)));
    let default_candidates = routed_spec.is_none();
    let (spec, list) = routed_spec.unwrap_or(("auto".to_owned(), None));
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let ctx = RouteContext {
        spec: &spec,
        list,
        args: &request.backend,
        env: &env,
        state_dir,
        store: &request.store,
        input: crate::pipeline::many::bucket_input(&request),
        run_id: "explain",
        session_backend: None,
    };
    let mut routed = match routing::decide(&ctx) {
        Ok(r) => r,
        // Named as what the caller gave: no `--backend auto` is theirs to blame.
        Err(e) if default_candidates => {
            return fail(&format!(
                "routing among the default candidates (as --backend auto): {}",
                e.detail()
            ));
        }
        Err(e) => return fail(&e.to_string()),
    };
    if let Some(name) = given.filter(|_| default_candidates) {
        routed.warnings.push(format!(
            "backend {name:?} (--backend or CODER_BACKEND) names one backend, and a run with \
             it is not routed: this is what --backend auto would do"
        ));
    }
    if json {
        let d = &routed.decision;
        let value = json!({
            "bucket": routed.report.bucket,
            "policy": d.policy,
            "arms": d.arms,
            "warnings": routed.warnings,
        });
        return super::print_then(&format!("{value}\n"), ExitCode::SUCCESS);
    }
    super::print_then(&explain_table(&routed), ExitCode::SUCCESS)
}

/// Explain's run flags parsed as `coder run` would (the workspace `.` when none is given,
/// the route-level `--store` when the flags name none), or the exit of a usage error.
fn explain_run_args(
    run_args: Vec<OsString>,
    (store, config): (&StoreArgs, &crate::config::BackendArgs),
    json: bool,
) -> Result<RunArgs, ExitCode> {
    let argv: Vec<OsString> = std::iter::once(OsString::from("coder route explain"))
        .chain(run_args)
        .collect();
    let mut parsed = match crate::config::parse_args_of::<RunArgs>(explain_command(), &argv) {
        Ok(p) => p,
        Err(mut e) if e.kind() == clap::error::ErrorKind::UnknownArgument && !json => {
            // clap's usage line shows the look-alike it offers as if it had been given.
            let usage = explain_command().render_usage();
            e.insert(
                clap::error::ContextKind::Usage,
                clap::error::ContextValue::StyledStr(usage),
            );
            return Err(super::usage_exit::<RunArgs>(
                "coder route explain",
                &e,
                &argv,
            ));
        }
        Err(e) if json => {
            return Err(run::finish(run::usage_error::<RunArgs>(
                &e,
                &argv,
                "coder route explain --help",
            )));
        }
        Err(e) => {
            return Err(super::usage_exit::<RunArgs>(
                "coder route explain",
                &e,
                &argv,
            ));
        }
    };
    if parsed.cd.is_none() {
        parsed.cd = Some(std::path::PathBuf::from("."));
    }
    if parsed.store.store.is_none() {
        parsed.store.store.clone_from(&store.store);
    }
    if parsed.backend.config.is_none() {
        parsed.backend.config.clone_from(&config.config);
    }
    parsed.store.optional |= store.optional;
    Ok(parsed)
}

/// The decision as a table: one row per backend (its posterior, the probability of being
/// chosen, whether it is cooling down), then the warnings.
fn explain_table(routed: &routing::Routed) -> String {
    let d = &routed.decision;
    let width = backend_width(d.arms.iter().map(|a| a.backend.as_str()));
    let mut out = format!(
        "bucket {} (policy {}, would choose {} now)\n{:<width$} {:>8} {:>8} {:>6} {:>6} {:>6}  {}\n",
        routed.bucket.key(),
        d.policy.as_str(),
        d.chosen,
        "backend",
        "alpha",
        "beta",
        "wins",
        "losses",
        "mean",
        "P(chosen)"
    );
    for arm in &d.arms {
        let p = &arm.posterior;
        out.push_str(&format!(
            "{:<width$} {:>8.3} {:>8.3} {:>6} {:>6} {:>6.3}  {:.3}{}\n",
            arm.backend,
            p.alpha,
            p.beta,
            p.successes,
            p.failures,
            p.mean(),
            arm.probability,
            if arm.cooling { " (cooling)" } else { "" }
        ));
    }
    for w in &routed.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}
