//! The run mode end to end: arguments -> request -> child spec -> supervised attempt ->
//! verdict -> envelope, with the guarantees that hold whatever happens in between: exactly
//! one envelope on stdout, an exit code that agrees with it, and panics turned into
//! `unexpected_exception` envelopes instead of a backtrace and silence.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use crate::child;
use crate::cli::{ArgError, KnownLimits, RunArgs, RunRequest};
use crate::envelope::{Envelope, ErrorDetail, Metrics};
use crate::observation::Observation;
use crate::outcome::{self, ErrorKind, LimitsForMessages, Verdict};
use crate::supervise::{self, AttemptEnd, CancelSignals, Limits, signals::signal_name};

/// Exit code of clap usage errors (unknown flags, missing values).
const USAGE_EXIT: u8 = 2;

/// What the run mode prints.
enum Output {
    /// Help or version text for stdout.
    Text(String),
    Envelope {
        envelope: Box<Envelope>,
        /// `--log-metrics`: one JSON line for stderr.
        metrics_line: Option<String>,
    },
}

/// `coder [run-mode args]`: prints one envelope and returns its exit code.
pub fn run_command(args: &[OsString]) -> ExitCode {
    let output = std::panic::catch_unwind(|| run_mode(args)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        Output::Envelope {
            envelope: Box::new(Envelope::early_failure(
                ErrorKind::UnexpectedException,
                format!("internal error in coder: {what} (please report this)"),
            )),
            metrics_line: None,
        }
    });
    match output {
        Output::Text(text) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Output::Envelope {
            envelope,
            metrics_line,
        } => {
            if let Some(line) = metrics_line {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{}", envelope.to_json_line());
            let _ = stdout.flush();
            ExitCode::from(envelope.exit_code)
        }
    }
}

fn config_error(message: String, exit_code: u8, limits: KnownLimits) -> Output {
    let mut envelope = Envelope::early_failure(ErrorKind::ConfigError, message);
    envelope.exit_code = exit_code;
    if let Some(detail) = envelope.error_detail.as_mut() {
        detail.idle_timeout_s = limits
            .idle_timeout
            .unwrap_or(crate::cli::DEFAULT_IDLE_TIMEOUT)
            .as_secs_f64();
        detail.max_duration_s = limits
            .max_duration
            .unwrap_or(crate::cli::DEFAULT_MAX_DURATION)
            .as_secs_f64();
    }
    Output::Envelope {
        envelope: Box::new(envelope),
        metrics_line: None,
    }
}

fn run_mode(args: &[OsString]) -> Output {
    let parsed = match RunArgs::parse_from_args(args) {
        Ok(parsed) => parsed,
        Err(e) => {
            use clap::error::ErrorKind as Clap;
            return match e.kind() {
                Clap::DisplayHelp | Clap::DisplayVersion => Output::Text(e.render().to_string()),
                _ => {
                    let text = e.render().to_string();
                    let first = text
                        .lines()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("invalid arguments")
                        .trim_start_matches("error: ")
                        .to_owned();
                    config_error(
                        format!("{first} (see coder --help)"),
                        USAGE_EXIT,
                        KnownLimits::default(),
                    )
                }
            };
        }
    };
    if std::env::var_os("CODER_DEBUG_PANIC").is_some_and(|v| v == "1") {
        // A deliberate crash, so the unexpected_exception path can be exercised end to end.
        panic!("CODER_DEBUG_PANIC=1 was set");
    }
    let limits = parsed.known_limits();
    let request = match parsed.into_request(&mut std::io::stdin().lock()) {
        Ok(request) => request,
        Err(ArgError::Usage(m)) => return config_error(m, USAGE_EXIT, limits),
        Err(ArgError::Invalid(m)) => {
            return config_error(m, ErrorKind::ConfigError.exit_code(), limits);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return Output::Envelope {
                envelope: Box::new(Envelope::early_failure(
                    ErrorKind::UnexpectedException,
                    format!("cannot start the async runtime: {e}"),
                )),
                metrics_line: None,
            };
        }
    };
    let log_metrics = request.log_metrics;
    let return_metrics = request.return_metrics;
    let mut envelope = runtime.block_on(run(request));
    let metrics_line = if log_metrics {
        envelope
            .metrics
            .as_ref()
            .and_then(|m| serde_json::to_string(m).ok())
    } else {
        None
    };
    if !return_metrics {
        envelope.metrics = None;
    }
    Output::Envelope {
        envelope: Box::new(envelope),
        metrics_line,
    }
}

/// Runs a validated request and returns its envelope (metrics always filled in).
pub async fn run(request: RunRequest) -> Envelope {
    let run_started = Instant::now();
    let mut signals = match CancelSignals::install() {
        Ok(signals) => signals,
        Err(e) => {
            return Envelope::early_failure(
                ErrorKind::UnexpectedException,
                format!("cannot install signal handlers: {e}"),
            );
        }
    };
    let mut warnings = Vec::new();
    if let Err(e) = supervise::tree::become_subreaper() {
        warnings.push(format!(
            "cannot become a child subreaper ({e}); detached descendants may escape cleanup"
        ));
    }
    let limits = Limits {
        idle: request.idle_timeout,
        deadline: request.max_duration.map(|d| run_started + d),
        kill_grace: request.kill_grace,
        max_line_bytes: request.max_line_bytes,
    };
    let message_limits = LimitsForMessages {
        idle_timeout_s: request.idle_timeout.as_secs_f64(),
        max_duration_s: request.max_duration.map_or(0.0, |d| d.as_secs_f64()),
    };
    let session_id = request.session.id().to_string();

    let path_var = std::env::var_os("PATH");
    let program = match child::resolve_program(request.claude_bin.as_deref(), path_var.as_deref()) {
        Ok(program) => program,
        Err(e) => {
            let mut envelope = Envelope::failure(
                ErrorKind::CommandNotFound,
                Some(session_id),
                format!("claude CLI not found: {e}"),
                ErrorDetail {
                    message: format!("cannot run the claude CLI: {e}"),
                    idle_timeout_s: message_limits.idle_timeout_s,
                    max_duration_s: message_limits.max_duration_s,
                    hint: Some(child::INSTALL_HINT.to_owned()),
                    ..ErrorDetail::default()
                },
            );
            envelope.metrics = Some(Metrics {
                wall_ms: run_started.elapsed().as_millis() as u64,
                ..Metrics::default()
            });
            envelope.warnings = warnings;
            return envelope;
        }
    };
    let spec = child::build(&request, program, std::env::vars_os());
    let mut observation =
        Observation::new(Instant::now(), request.return_all_messages, spec.secrets());
    let end = supervise::run_attempt(&spec, &limits, &mut observation, &mut signals).await;
    let verdict = outcome::classify(&end, &observation, message_limits);

    let metrics = metrics_of(&observation, &end, run_started, 1);
    let session = observation.session_id.clone().unwrap_or(session_id);
    let mut envelope = match verdict {
        Verdict::Success { result } => Envelope::success(Some(session), result),
        Verdict::Failure(failure) => {
            let exit_code = failure.exit_code();
            let detail = ErrorDetail {
                message: failure.message,
                exit_code: end.exit_code,
                last_lines: observation.last_lines(),
                json_decode_errors: observation.json_decode_errors,
                idle_timeout_s: message_limits.idle_timeout_s,
                max_duration_s: message_limits.max_duration_s,
                retries: 0,
                signal: end.exit_signal.map(signal_name),
                http_status: failure.http_status,
                upstream_error: failure.upstream_error,
                pending_tool: observation.pending_tool().map(str::to_owned),
                hint: failure.hint,
            };
            let mut envelope =
                Envelope::failure(failure.kind, Some(session), failure.summary, detail);
            envelope.exit_code = exit_code;
            envelope
        }
    };
    if request.return_all_messages {
        envelope.all_messages = Some(observation.take_all_messages());
    }
    envelope.metrics = Some(metrics);
    envelope.warnings = warnings;
    envelope
}

fn metrics_of(obs: &Observation, end: &AttemptEnd, run_started: Instant, attempts: u32) -> Metrics {
    let result = obs.result.as_ref();
    Metrics {
        wall_ms: run_started.elapsed().as_millis() as u64,
        time_to_first_event_ms: obs.first_event_after.map(|d| d.as_millis() as u64),
        turns: obs.turns(),
        usage: obs.usage().into(),
        tool_calls: obs.tool_calls.clone(),
        stdout_bytes: obs.stdout_bytes,
        stderr_bytes: obs.stderr_bytes,
        stdout_lines: obs.stdout_lines,
        stderr_lines: obs.stderr_lines,
        events: obs.events,
        json_decode_errors: obs.json_decode_errors,
        truncated_lines: obs.truncated_lines,
        api_retries: obs.api_retries,
        exit_code: end.exit_code,
        signal: end.exit_signal.map(signal_name),
        attempts,
        api_ms: result.and_then(|r| r.duration_api_ms),
        cost_usd: result.and_then(|r| r.total_cost_usd),
        model: obs.model.clone(),
        cli_version: obs.cli_version.clone(),
    }
}
