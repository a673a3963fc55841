//! Live progress on stderr for a person watching a run: elapsed time, what the agent is doing
//! (starting, waiting for the model, running `Bash(npm test)`, retrying in N s), turns,
//! tokens, and the idle clock once more than half of it is spent.
//!
//! It is drawn only when stderr is a terminal and the user did not ask for quiet
//! (`--quiet`, `TERM=dumb`), so pipes, CI logs and orchestrators never see it, and it is
//! cleared before the envelope is printed. stdout is never touched.

use std::collections::HashSet;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use crate::stream::Event;
use crate::text::Secrets;

/// The spinner line.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    last_activity_ms: Arc<AtomicU64>,
    phase: String,
    turns: u64,
    tokens_in: u64,
    tokens_out: u64,
    /// The tokens of the CLI's earlier ends in this run (a retry, the fallback turn, a
    /// repair turn): each `result` reports its own invocation's usage only.
    earlier: (u64, u64),
    /// Message ids already counted (the CLI writes one line per content block).
    messages: HashSet<String>,
    secrets: Secrets,
}

/// Whether progress should be drawn: stderr is a terminal, not `--quiet`, not `TERM=dumb`.
pub fn wanted(quiet: bool) -> bool {
    !quiet
        && std::io::stderr().is_terminal()
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

impl Progress {
    /// Starts drawing on stderr. `idle` is the idle limit the clock is measured against.
    pub fn start(idle: Duration) -> Progress {
        let started = Instant::now();
        let last_activity_ms = Arc::new(AtomicU64::new(0));
        let clock = last_activity_ms.clone();
        let idle_ms = idle.as_millis() as u64;
        let style = ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}{idle}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .with_key(
                "idle",
                move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let now = started.elapsed().as_millis() as u64;
                    let quiet_for = now.saturating_sub(clock.load(Ordering::Relaxed));
                    if idle_ms > 0 && quiet_for * 2 > idle_ms {
                        let _ = write!(w, " · idle {}s of {}s", quiet_for / 1000, idle_ms / 1000);
                    }
                },
            );
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(200));
        let progress = Progress {
            bar,
            started,
            last_activity_ms,
            phase: "starting claude".to_owned(),
            turns: 0,
            tokens_in: 0,
            tokens_out: 0,
            earlier: (0, 0),
            messages: HashSet::new(),
            secrets: Secrets::default(),
        };
        progress.redraw();
        progress
    }

    /// Any output from the child resets the idle clock.
    pub fn activity(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.last_activity_ms.fetch_max(now, Ordering::Relaxed);
    }

    pub fn set_phase(&mut self, phase: impl Into<String>) {
        self.phase = phase.into();
        self.redraw();
    }

    /// Updates phase, turns and tokens from a stream event.
    pub fn event(&mut self, event: &Event) {
        match event {
            Event::Init { model, .. } => {
                self.phase = match model {
                    Some(model) => format!("waiting for {model}"),
                    None => "waiting for the model".to_owned(),
                };
            }
            Event::Assistant(message) if !message.is_synthetic() => {
                if let Some(id) = &message.message_id
                    && !self.messages.contains(id)
                {
                    self.messages.insert(id.clone());
                    self.turns += 1;
                    if let Some(usage) = message.usage {
                        self.tokens_in += usage.input_tokens
                            + usage.cache_read_input_tokens
                            + usage.cache_creation_input_tokens;
                        self.tokens_out += usage.output_tokens;
                    }
                }
                if let Some(tool) = message.tool_uses.last() {
                    self.phase = format!("running {}", tool.summary);
                }
            }
            Event::User { .. } => self.phase = "waiting for the model".to_owned(),
            Event::ApiRetry {
                error_status,
                attempt,
                ..
            } => {
                self.phase = format!(
                    "the API failed ({}), claude retries (attempt {})",
                    error_status.map_or("no status".to_owned(), |s| s.to_string()),
                    attempt.unwrap_or(0)
                );
            }
            Event::Result(result) => {
                // The run's total: this invocation's exact usage on top of the earlier
                // ones'. Set alone, the count fell back at every repair or fallback turn.
                if let Some(usage) = result.usage {
                    self.tokens_in = self.earlier.0
                        + usage.input_tokens
                        + usage.cache_read_input_tokens
                        + usage.cache_creation_input_tokens;
                    self.tokens_out = self.earlier.1 + usage.output_tokens;
                }
                self.earlier = (self.tokens_in, self.tokens_out);
                self.phase = "finishing".to_owned();
            }
            _ => {}
        }
        self.redraw();
    }

    /// Credentials to keep off the terminal (a tool call's summary can quote one).
    pub fn with_secrets(mut self, secrets: Secrets) -> Progress {
        self.secrets = secrets;
        self
    }

    fn redraw(&self) {
        // The phase quotes the model's tool call: its escapes must not reach the terminal.
        let phase = self.secrets.redact(&self.phase);
        self.bar.set_message(format!(
            "{} · turn {} · tokens {} in / {} out",
            crate::text::terminal_safe(&phase),
            self.turns,
            self.tokens_in,
            self.tokens_out
        ));
    }

    /// Removes the line from the terminal.
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
