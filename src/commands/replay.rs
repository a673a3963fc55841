//! `coder replay serve CASSETTE`: a replay server as a foreground process, for trying coder
//! or the CLI by hand without a key (`ANTHROPIC_BASE_URL=$(…)`), and for scripts.
//!
//! Its stdout carries exactly one line, the base URL, as soon as the server listens, so a
//! script can read it and go on; it then serves until SIGINT or SIGTERM and writes the
//! report as JSON on stderr.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};

use crate::replay::{Cassette, ReplayServer, ServeOptions};

/// Exit status for a cassette or option that cannot be used (EX_CONFIG).
const EXIT_CONFIG: u8 = 78;
/// Exit status when the server cannot run (port taken, no runtime).
const EXIT_FAILURE: u8 = 1;

#[derive(Debug, Parser)]
#[command(
    name = "coder replay",
    about = "Serve a scripted conversation as an Anthropic Messages API on 127.0.0.1"
)]
struct ReplayArgs {
    #[command(subcommand)]
    command: ReplayCommand,
}

#[derive(Debug, Subcommand)]
enum ReplayCommand {
    /// Serve CASSETTE until SIGINT/SIGTERM; print the base URL on stdout and, at the end,
    /// the report as JSON on stderr.
    Serve {
        /// The cassette file (JSON, see docs/cassettes.md).
        cassette: PathBuf,
        /// Port on 127.0.0.1; 0 picks a free one.
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// The directory `{{workspace}}` stands for in tool inputs.
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
}

/// Runs `coder replay …`. `args` is the command line from `replay` on (`["replay",
/// "serve", "c.json", …]`).
pub fn serve_command(args: &[OsString]) -> ExitCode {
    let after = args.get(1..).unwrap_or_default();
    let parsed: ReplayArgs = match super::parse_subcommand("coder replay", after) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let ReplayCommand::Serve {
        cassette,
        port,
        workspace,
    } = parsed.command;
    let cassette = match Cassette::load(&cassette) {
        Ok(cassette) => cassette,
        Err(error) => {
            eprintln!("coder replay: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("coder replay: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    runtime.block_on(serve(cassette, ServeOptions { port, workspace }))
}

async fn serve(cassette: Cassette, options: ServeOptions) -> ExitCode {
    // Install the handlers before announcing the URL, so a signal sent right after
    // reading it is never lost.
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("coder replay: cannot install signal handlers: {error}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let server = match ReplayServer::start(cassette, options).await {
        Ok(server) => server,
        Err(error @ crate::replay::ReplayError::Bind { .. }) => {
            eprintln!("coder replay: {error}");
            return ExitCode::from(EXIT_FAILURE);
        }
        Err(error) => {
            eprintln!("coder replay: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", server.base_url());
        let _ = stdout.flush();
    }
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    let report = server.shutdown().await;
    match serde_json::to_string_pretty(&report) {
        Ok(json) => eprintln!("{json}"),
        Err(error) => eprintln!("coder replay: cannot encode the report: {error}"),
    }
    ExitCode::SUCCESS
}
