//! The run mode, `coder [OPTIONS] [PROMPT | -]`: arguments in, exactly one envelope out.
//!
//! This is the outer shell of [`crate::pipeline::run`]: it parses the arguments into a
//! request, starts the async runtime, and holds the guarantees that must survive anything
//! in between — exactly one envelope on stdout, an exit code that agrees with it, usage
//! errors as `config_error` envelopes, and panics turned into `unexpected_exception`
//! envelopes instead of a backtrace and silence.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use crate::exit::{ErrorKind, USAGE_EXIT};
use crate::pipeline::envelope::Envelope;
use crate::pipeline::request::{
    ArgError, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_DURATION, KnownLimits, RunArgs, RunRequest,
};
use crate::text::{Secrets, names::secret_values};
use crate::{pipeline, supervise};

/// What the run mode prints.
pub(crate) enum Output {
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
    crate::phases::mark("coder.main");
    // From here until the run listens for them, a cancelling signal waits (pending)
    // instead of killing coder without an envelope. Without it, the signals act as before.
    let _ = supervise::signals::hold_cancelling();
    finish(guarded(|| run_mode(args)))
}

/// Makes every panic's message on stderr redacted like the envelope: Rust's own hook prints
/// the message as it is (a panic over a vendor's text or a path would print what it held)
/// before [`guarded`] turns the panic into an envelope, which is redacted.
pub fn redact_panics() {
    std::panic::set_hook(Box::new(|info| {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let _ = write_panic(&mut std::io::stderr(), &info.to_string(), &env);
    }));
}

/// Writes a panic's message (`panicked at file:line:col:` and the payload) redacted with
/// the secrets of `env` and token shapes.
fn write_panic(
    out: &mut dyn Write,
    message: &str,
    env: &[(OsString, OsString)],
) -> std::io::Result<()> {
    let secrets = Secrets::new(secret_values(env));
    writeln!(out, "coder {}", secrets.redact(message))
}

/// `make`'s output, or an `unexpected_exception` envelope when it panics.
pub(crate) fn guarded(make: impl FnOnce() -> Output + std::panic::UnwindSafe) -> Output {
    std::panic::catch_unwind(make).unwrap_or_else(|payload| {
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
    })
}

/// Prints `output` (an envelope redacted with every secret of this process's environment)
/// and returns the exit code that goes with it.
pub(crate) fn finish(output: Output) -> ExitCode {
    match output {
        Output::Text(text) => super::print_then(&text, ExitCode::SUCCESS),
        Output::Envelope {
            mut envelope,
            metrics_line,
        } => {
            // Runs are redacted with the backend's key too (in the pipeline); this covers
            // every envelope, also those of bad arguments and panics.
            let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            let secrets = Secrets::new(secret_values(&env));
            envelope.redact(&secrets);
            let metrics_line = metrics_line.map(|line| secrets.redact(&line).into_owned());
            // The metrics quote the agent's text (the paths of its denials, the names of
            // its tool calls): C1 controls escaped like the envelope's.
            if let Some(line) = metrics_line {
                let _ = writeln!(
                    std::io::stderr(),
                    "{}",
                    crate::text::json_terminal_safe(&line)
                );
            }
            let line = format!(
                "{}\n",
                crate::text::json_terminal_safe(&envelope.to_json_line())
            );
            let code = match super::write_stdout(&line) {
                Ok(()) => ExitCode::from(envelope.exit_code),
                // Not lost: stdout failed (a full disk, an I/O error; not a reader that
                // went away), so the envelope goes to stderr after the line saying so.
                Err(failed) => {
                    let _ = write!(
                        std::io::stderr(),
                        "coder: the envelope follows on stderr instead:\n{line}"
                    );
                    failed
                }
            };
            crate::phases::mark("coder.exit");
            code
        }
    }
}

pub(crate) fn config_error(message: String, exit_code: u8, limits: KnownLimits) -> Output {
    early_error(ErrorKind::ConfigError, message, exit_code, limits)
}

/// The envelope of a run that ends before it starts.
fn early_error(kind: ErrorKind, message: String, exit_code: u8, limits: KnownLimits) -> Output {
    let mut envelope = Envelope::early_failure(kind, message);
    envelope.exit_code = exit_code;
    if let Some(detail) = envelope.error_detail.as_mut() {
        detail.idle_timeout_s = limits
            .idle_timeout
            .unwrap_or(DEFAULT_IDLE_TIMEOUT)
            .as_secs_f64();
        detail.max_duration_s = limits
            .max_duration
            .unwrap_or(DEFAULT_MAX_DURATION)
            .as_secs_f64();
    }
    Output::Envelope {
        envelope: Box::new(envelope),
        metrics_line: None,
    }
}

/// The output for a clap error of parsing `args` as a `P`: help or version text, else a
/// usage `config_error` (exit 2) with clap's first line and the valid values.
pub(crate) fn usage_error<P: clap::Parser + 'static>(
    e: &clap::Error,
    args: &[OsString],
    help_hint: &str,
) -> Output {
    use clap::error::ErrorKind as Clap;
    let fixed = corrected::<P>(e, args, help_hint.trim_end_matches(" --help"));
    let e = fixed.as_ref().unwrap_or(e);
    match e.kind() {
        Clap::DisplayHelp | Clap::DisplayVersion => Output::Text(e.render().to_string()),
        Clap::InvalidUtf8 if let Some(which) = non_utf8_argument::<P>(args) => config_error(
            format!("{which} is not valid UTF-8; give it as UTF-8 text (see {help_hint})"),
            USAGE_EXIT,
            KnownLimits::default(),
        ),
        _ => {
            let text = e.render().to_string();
            let mut lines = text.lines().skip_while(|l| l.trim().is_empty());
            let mut first = lines
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ")
                .to_owned();
            // clap lists what the line is about on indented lines below it ("the following
            // required arguments were not provided:\n  --worktree"): keep them.
            if first.ends_with(':') {
                let listed: Vec<&str> = lines
                    .take_while(|l| l.starts_with("  "))
                    .map(str::trim)
                    .collect();
                first = format!("{first} {}", listed.join(", "));
            }
            // clap lists the valid values on a line of its own; keep it.
            let values = text
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("[possible values:"))
                .map(|l| format!(" {l}"))
                .unwrap_or_default();
            // clap's tips ("to pass '-f' as a value, use '-- -f'"), and one of coder's own
            // for the commonest slip: a task of several words without quotes.
            let mut tips: Vec<String> = text
                .lines()
                .filter_map(|l| l.trim().strip_prefix("tip: "))
                .map(str::to_owned)
                .collect();
            let stray_word = matches!(
                e.get(clap::error::ContextKind::InvalidArg),
                Some(clap::error::ContextValue::String(arg)) if !arg.starts_with('-')
            );
            let misplaced = (std::any::TypeId::of::<P>() == std::any::TypeId::of::<RunArgs>())
                .then(|| misplaced_subcommand(args))
                .flatten();
            if let Some(sub) = misplaced.filter(|_| e.kind() == Clap::UnknownArgument) {
                tips.push(format!(
                    "'{sub}' is a subcommand: name it first, before any option: coder {sub} …"
                ));
            } else if e.kind() == Clap::UnknownArgument && stray_word {
                tips.push(
                    "the task is one argument: put it in quotes, as in --cd DIR \"fix the \
                     failing test\""
                        .to_owned(),
                );
            }
            let tips: String = tips.iter().map(|t| format!("; {t}")).collect();
            let help_hint = misplaced.map_or(help_hint.to_owned(), |s| format!("coder {s} --help"));
            config_error(
                format!("{first}{values}{tips} (see {help_hint})"),
                USAGE_EXIT,
                KnownLimits::default(),
            )
        }
    }
}

/// clap's error `e` of parsing `argv` as a `P`, with tips that mislead made right, or
/// `None` when they need nothing. An unknown flag that another part of coder takes
/// (`coder prompt --cd`, `coder route forget --json`) is named as theirs: clap offered a
/// look-alike (`--codex`) or "use '-- --json'" to pass it as a value, which the command
/// only takes as a task text.
pub(crate) fn corrected<P: clap::CommandFactory + 'static>(
    e: &clap::Error,
    argv: &[OsString],
    name: &str,
) -> Option<clap::Error> {
    let Some(clap::error::ContextValue::String(arg)) = e.get(clap::error::ContextKind::InvalidArg)
    else {
        return None;
    };
    if e.kind() != clap::error::ErrorKind::UnknownArgument || !arg.starts_with("--") {
        return None;
    }
    let flag = arg.split('=').next().unwrap_or(arg);
    let top = P::command();
    let (chain, path) = innermost(&top, argv.get(1..).unwrap_or_default());
    let here = format!("{name}{path}");
    let inner = chain.last().copied().unwrap_or(&top);
    let mut owners: Vec<String> = match chain.len() {
        0 | 1 => Vec::new(),
        n => chain[n - 2]
            .get_subcommands()
            .filter(|sub| has_flag(sub, &flag[2..]))
            .map(|sub| {
                format!(
                    "{} {}",
                    here.rsplit_once(' ').map_or("", |(p, _)| p),
                    sub.get_name()
                )
            })
            .collect(),
    };
    let run_mode = std::any::TypeId::of::<P>() == std::any::TypeId::of::<RunArgs>();
    if owners.is_empty()
        && !run_mode
        && has_flag(&<RunArgs as clap::CommandFactory>::command(), &flag[2..])
    {
        owners.push("a run (coder --cd DIR \"task\")".to_owned());
    }
    let takes_text = inner.get_positionals().any(|p| {
        let id = p.get_id().as_str().to_ascii_uppercase();
        id == "PROMPT" || id == "TASK"
    });
    if owners.is_empty() && takes_text {
        return None;
    }
    let mut fixed = clap::Error::new(e.kind()).with_cmd(inner);
    for (kind, value) in e.context() {
        use clap::error::ContextKind as K;
        if !matches!(kind, K::Suggested | K::SuggestedArg)
            || (owners.is_empty() && kind == K::SuggestedArg)
        {
            fixed.insert(kind, value.clone());
        }
    }
    if !owners.is_empty() {
        // clap's usage line showed the look-alike as if it had been given.
        let usage = inner.clone().render_usage();
        fixed.insert(
            clap::error::ContextKind::Usage,
            clap::error::ContextValue::StyledStr(usage),
        );
        let tip = format!(
            "{flag} is an option of {}, not of {here}",
            owners.join(" and ")
        );
        fixed.insert(
            clap::error::ContextKind::Suggested,
            clap::error::ContextValue::StyledStrs(vec![tip.into()]),
        );
    }
    Some(fixed)
}

/// The subcommands of `command` that `args` descend into, and their names as a path
/// (` forget`).
fn innermost<'a>(
    command: &'a clap::Command,
    args: &[OsString],
) -> (Vec<&'a clap::Command>, String) {
    let mut chain = vec![command];
    let mut path = String::new();
    let mut words = args.iter().map(|a| a.to_string_lossy());
    while let Some(word) = words.next() {
        let current = chain.last().copied().unwrap_or(command);
        match word.strip_prefix("--") {
            Some("") => break,
            Some(flag) if !flag.contains('=') && takes_value(current, flag) => {
                words.next();
            }
            Some(_) => {}
            None => match current.find_subcommand(word.as_ref()) {
                Some(sub) => {
                    chain.push(sub);
                    path.push(' ');
                    path.push_str(sub.get_name());
                }
                None => break,
            },
        }
    }
    (chain, path)
}

/// Whether `command` itself has the flag `--name` (or an alias of that name).
fn has_flag(command: &clap::Command, name: &str) -> bool {
    command.get_arguments().any(|arg| {
        arg.get_long() == Some(name)
            || arg
                .get_all_aliases()
                .is_some_and(|aliases| aliases.contains(&name))
    })
}

/// The subcommand a run's arguments name after its flags (`coder --cd ws runs list`): a
/// subcommand goes first, and this one was read as the task.
fn misplaced_subcommand(args: &[OsString]) -> Option<&'static str> {
    let word = first_positional(args)?;
    super::SUBCOMMANDS.into_iter().find(|s| *s == word)
}

/// The first word of a run's arguments that is no flag nor a flag's value, unless it
/// comes after `--` (then it is the task, whatever it reads as).
fn first_positional(args: &[OsString]) -> Option<String> {
    let command = <RunArgs as clap::CommandFactory>::command();
    let mut words = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(word) = words.next() {
        match word.strip_prefix("--") {
            Some(flag) if !flag.contains('=') && takes_value(&command, flag) => {
                words.next();
            }
            Some("") => return None,
            Some(_) => {}
            None if word.starts_with('-') && word.len() > 1 => {}
            None => return Some(word.into_owned()),
        }
    }
    None
}

/// A run whose whole task is a subcommand's name or `help`, written after the run's flags
/// (`coder --cd ws runs`): the message that refuses it, with the ways to run that task.
fn subcommand_as_task(args: &[OsString]) -> Option<String> {
    let word = first_positional(args)?;
    let (what, help) = if word == "help" {
        (
            "a subcommand".to_owned(),
            "coder help [SUBCOMMAND] or coder --help".to_owned(),
        )
    } else {
        let sub = super::SUBCOMMANDS.into_iter().find(|s| *s == word)?;
        (
            format!("a subcommand: name it first, before any option: coder {sub} …"),
            format!("coder {sub} --help"),
        )
    };
    Some(format!(
        "'{word}' is {what} (see {help}); to run the task {word:?}, put -- before it \
         (coder --cd DIR -- {word}) or pass it as --prompt {word}"
    ))
}

/// clap says only that "one or more arguments" are not UTF-8: the first of `args` that
/// clap refuses for it (paths may be any bytes), with the flag before it.
pub(crate) fn non_utf8_argument<P: clap::Parser>(args: &[OsString]) -> Option<String> {
    let bad: Vec<usize> = (0..args.len())
        .filter(|&i| args[i].to_str().is_none())
        .collect();
    let culprit = bad.iter().copied().find(|&i| {
        // Every other non-UTF-8 argument made text: does clap still refuse?
        let probe: Vec<OsString> = args
            .iter()
            .enumerate()
            .map(|(j, a)| match j != i && bad.contains(&j) {
                true => OsString::from(a.to_string_lossy().into_owned()),
                false => a.clone(),
            })
            .collect();
        P::try_parse_from(&probe).is_err_and(|e| e.kind() == clap::error::ErrorKind::InvalidUtf8)
    })?;
    let shown = format!("{:?}", args[culprit].to_string_lossy());
    let command = P::command();
    // `--flag=VALUE`: the flag is in the same argument.
    let lossy = args[culprit].to_string_lossy();
    if let Some((name, value)) = lossy.strip_prefix("--").and_then(|a| a.split_once('='))
        && takes_value(&command, name)
    {
        return Some(format!("the value {value:?} of --{name}"));
    }
    // `--flag VALUE`: name the flag when it takes a value.
    let flag = culprit
        .checked_sub(1)
        .filter(|&p| p > 0)
        .and_then(|p| args[p].to_str())
        .and_then(|a| a.strip_prefix("--"))
        .filter(|name| takes_value(&command, name));
    Some(match (flag, positional_name(&command, &args[1..culprit])) {
        (Some(name), _) => format!("the value {shown} of --{name}"),
        (None, Some(name)) => format!("the {name} argument {shown}"),
        (None, None) => format!("the argument {shown}"),
    })
}

/// Whether `--name` is a flag of `command` (or of one of its subcommands) that takes a
/// value.
fn takes_value(command: &clap::Command, name: &str) -> bool {
    let own = command.get_arguments().any(|arg| {
        arg.get_action().takes_values()
            && (arg.get_long() == Some(name)
                || arg
                    .get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&name)))
    });
    own || command.get_subcommands().any(|sub| takes_value(sub, name))
}

/// The value name (`PROMPT`, `JSON`) of the positional argument that follows `before`
/// (the arguments after the program name), if `command` has one there.
fn positional_name(command: &clap::Command, before: &[OsString]) -> Option<String> {
    let mut index = 0;
    let mut words = before.iter().map(|a| a.to_string_lossy());
    while let Some(word) = words.next() {
        match word.strip_prefix("--") {
            Some("") => {}
            Some(flag) if !flag.contains('=') && takes_value(command, flag) => {
                words.next();
            }
            Some(_) => {}
            None if word.starts_with('-') && word.len() > 1 => {}
            None => match command.find_subcommand(word.as_ref()) {
                Some(sub) if index == 0 => {
                    let rest: Vec<OsString> = words.map(|w| OsString::from(&*w)).collect();
                    return positional_name(sub, &rest);
                }
                _ => index += 1,
            },
        }
    }
    let positional = command.get_positionals().nth(index)?;
    positional
        .get_value_names()
        .and_then(|names| names.first())
        .map(ToString::to_string)
        .or_else(|| Some(positional.get_id().to_string().to_uppercase()))
}

fn run_mode(args: &[OsString]) -> Output {
    // `coder run --cd ws "task"`: as other tools spell it. "run" was taken as the task and
    // the real task refused as a stray word ("put it in quotes"), or, alone, run as the
    // task "run" with stdin's task ignored.
    if args.get(1).is_some_and(|a| a == "run") {
        return config_error(
            "coder has no run subcommand: a run is coder --cd DIR \"task\" (its options, \
             then the task; drop the word run); to run the task \"run\", give it after the \
             options (coder --cd DIR -- run) or as --prompt run (see coder --help)"
                .to_owned(),
            USAGE_EXIT,
            KnownLimits::default(),
        );
    }
    let parsed = match RunArgs::parse_from_args(args) {
        Ok(parsed) => parsed,
        Err(e) => return usage_error::<RunArgs>(&e, args, "coder --help"),
    };
    if std::env::var_os("CODER_DEBUG_PANIC").is_some_and(|v| v == "1") {
        // A deliberate crash, so the unexpected_exception path can be exercised end to end.
        panic!("CODER_DEBUG_PANIC=1 was set");
    }
    let limits = parsed.known_limits();
    // `coder --cd ws runs`: the task is exactly a subcommand's name, after the run's flags.
    if parsed.prompt.is_some()
        && let Some(message) = subcommand_as_task(args)
    {
        return config_error(message, USAGE_EXIT, limits);
    }
    // `coder doctr`: a misspelt subcommand reads as a task without `--cd`.
    let near = args
        .get(1)
        .and_then(|a| a.to_str())
        .filter(|_| args.len() == 2)
        .and_then(|word| super::near_subcommand(word).map(|name| (word.to_owned(), name)));
    match request_from(parsed, |m| {
        let m = match &near {
            Some((word, name)) if m.starts_with("--cd is required") => format!(
                "{word:?} is no subcommand: did you mean `coder {name}`? (as a task it needs \
                 --cd: {m})"
            ),
            _ => m,
        };
        config_error(m, ErrorKind::ConfigError.exit_code(), limits)
    }) {
        Ok(request) => execute(request),
        Err(output) => output,
    }
}

/// Validates `parsed` into a request, reading the prompt from stdin when it is there: an
/// invalid request becomes `invalid`'s output, and SIGINT, SIGTERM or SIGHUP meanwhile (a
/// prompt piped from something that never ends) a `cancelled` envelope.
/// The stack of the thread that drives a run.
const RUN_STACK_BYTES: usize = 64 << 20;

/// Runs `f` (a run's `block_on`) on a thread with a stack of [`RUN_STACK_BYTES`], and
/// waits for it. The run's futures are deep and, in a debug build, their frames large:
/// on the main thread the stack is whatever `ulimit -s` left (512 KiB overflowed). The
/// thread inherits the held cancelling signals, which the run lets in on it; a panic in
/// it goes on in this thread, to the caller's `catch_unwind`.
fn on_run_stack<T: Send>(f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("coder-run".to_owned())
            .stack_size(RUN_STACK_BYTES)
            .spawn_scoped(scope, f)?;
        Ok(thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

pub(crate) fn request_from(
    parsed: RunArgs,
    invalid: impl FnOnce(String) -> Output,
) -> Result<RunRequest, Output> {
    let limits = parsed.known_limits();
    let awaited = if parsed.request.as_deref() == Some(std::path::Path::new("-")) {
        "the --request JSON"
    } else {
        "the prompt"
    };
    let Ok(mut stdin) = supervise::signals::CancellableStdin::hold() else {
        // No signalfd: read as any program does (a signal then ends coder unannounced,
        // rather than waiting, held, for a stdin that may never end).
        let _ = supervise::signals::release_cancelling();
        return parsed
            .into_request(&mut std::io::stdin().lock())
            .and_then(|r| r.refuse_unsuitable_workspace().map(|()| r))
            .map_err(|ArgError::Invalid(m)| invalid(m));
    };
    let request = parsed.into_request(&mut stdin);
    test_hook_pause_args_checked();
    let received = stdin.received();
    let waited = match stdin.was_read() {
        true => format!("while coder waited for {awaited} on stdin"),
        // The prompt was an argument: the signal came while the arguments were checked.
        false => "before the run started, while coder checked its arguments".to_owned(),
    };
    drop(stdin);
    test_hook_pause_after_prompt();
    if let Some(signo) = received {
        let name = supervise::signals::signal_name(signo);
        return Err(early_error(
            ErrorKind::Cancelled,
            format!("cancelled by {name} {waited}"),
            crate::exit::cancelled_exit_code(signo),
            limits,
        ));
    }
    request
        .and_then(|r| r.refuse_unsuitable_workspace().map(|()| r))
        .map_err(|ArgError::Invalid(m)| invalid(m))
}

/// TEST HOOK, compiled into debug builds only: with `CODER_TEST_HOOK_PAUSE_AFTER_PROMPT`
/// naming a file, coder creates it once the prompt is read and waits (10 s at most) until
/// the test removes it, so that a test can send a signal in the gap between reading the
/// prompt and listening for signals. Inert without the variable, absent from release
/// builds.
fn test_hook_pause_after_prompt() {
    test_hook_pause("CODER_TEST_HOOK_PAUSE_AFTER_PROMPT");
}

/// TEST HOOK, as [`test_hook_pause_after_prompt`]: `CODER_TEST_HOOK_PAUSE_ARGS_CHECKED`
/// pauses once the arguments are checked, while signals are still held for the check.
fn test_hook_pause_args_checked() {
    test_hook_pause("CODER_TEST_HOOK_PAUSE_ARGS_CHECKED");
}

/// Creates the file `variable` names and waits (10 s at most) until it is removed.
#[cfg(debug_assertions)]
fn test_hook_pause(variable: &str) {
    let Some(path) = std::env::var_os(variable) else {
        return;
    };
    if std::fs::write(&path, std::process::id().to_string()).is_err() {
        return;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(&path).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(not(debug_assertions))]
fn test_hook_pause(_variable: &str) {}

/// Runs a validated request: the async runtime, the pipeline, the metrics line.
pub(crate) fn execute(request: crate::pipeline::request::RunRequest) -> Output {
    supervise::release_large_buffers();
    // The first attempt's sandbox helper, forked while coder is still single-threaded.
    if request.sandbox.is_confined() {
        supervise::spawn::fork_early(&request.workspace);
    }
    // The run itself (supervision, decoding) is driven by `block_on` on a thread of its own
    // (see `on_run_stack`); the one worker runs the spawned tasks, chiefly the pipe
    // readers, so that reading and splitting the child's output overlaps with decoding it.
    let failed = |what: String| Output::Envelope {
        envelope: Box::new(Envelope::early_failure(
            ErrorKind::UnexpectedException,
            what,
        )),
        metrics_line: None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return failed(format!("cannot start the async runtime: {e}")),
    };
    let log_metrics = request.log_metrics;
    let return_metrics = request.return_metrics;
    let mut envelope = match on_run_stack(|| runtime.block_on(pipeline::run::run(request))) {
        Ok(envelope) => envelope,
        Err(e) => return failed(format!("cannot start the run's thread: {e}")),
    };
    // A forked helper no attempt took (the run ended before it) exits once its spec pipe
    // closes.
    supervise::spawn::drop_forked();
    // Every task of the run has ended; the worker is told to stop, not waited for.
    runtime.shutdown_background();
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

#[cfg(test)]
mod panic_tests {
    use super::*;

    #[test]
    fn a_panic_message_is_redacted() {
        let env = [(
            OsString::from("ANTHROPIC_AUTH_TOKEN"),
            OsString::from("zk-Tq81Lm9Xv2Pw7Rb4Hc6N"),
        )];
        let mut out = Vec::new();
        let message = "panicked at src/x.rs:1:2:\nbad reply zk-Tq81Lm9Xv2Pw7Rb4Hc6N \
                       Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l";
        write_panic(&mut out, message, &env).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "coder panicked at src/x.rs:1:2:\nbad reply [REDACTED] Authorization: Basic [REDACTED]\n"
        );
    }
}
