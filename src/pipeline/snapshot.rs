//! The change ledger's "before" snapshot (DESIGN §8), taken while the run sets up its
//! sandbox and the CLI starts, instead of before both.
//!
//! Why: a plain workspace of 100k files takes ~0.4 s to snapshot even warm (it must stat
//! every file), and the CLI's own start takes about a second. Why it is safe: the agent
//! changes the workspace only through tool calls; a tool call needs a model response; in a
//! confined run every request off the machine goes through coder's egress proxy, which
//! holds each one (before anything is sent upstream) until the snapshot is done (the
//! [`Hold`] of `sandbox::proxy`). What the run itself starts in the workspace before the
//! agent (the `--verify` baseline check) waits for the snapshot too; the sandbox's
//! placeholders are left out of both sides of the comparison by the ledger.
//!
//! Where that argument does not hold, the snapshot is taken first, as before: unconfined
//! runs (`danger-full-access`: no proxy), and workspaces whose CLI may run commands as it
//! starts, before any request (hooks or MCP servers in the project's or the machine's
//! Claude settings, see [`cli_may_run_commands_at_start`]). As a safety net, the snapshot
//! reports what changed after the run's first process started ([`Ledger::changed_since`]:
//! the plain walk from its stat data, a git snapshot by a look at what its index holds):
//! those files count as changed, with a warning.
//!
//! The run waits on the snapshot only where it must; `ledger_wait_ms` says how long: the
//! longest time the proxy held a request, plus the time the run itself awaited it (the
//! baseline check, the comparison at the end, or the whole snapshot when it is serial).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::sandbox::Policy;
use crate::sandbox::proxy::{Hold, Release};
use crate::workspace::Ledger;
use crate::workspace::scan::{self, Changed};

/// Test hook: milliseconds the snapshot sleeps before it starts (the same code path
/// otherwise), so tests can make a run's agent start before its snapshot is taken.
pub const DELAY_VAR: &str = "CODER_TEST_LEDGER_DELAY_MS";

/// "Not yet": no process of the run has started in the workspace.
const NOT_STARTED: i64 = i64::MAX;

/// The run's "before" snapshot, under way or done.
pub struct Snapshot {
    state: State,
    /// The proxy's hold while the snapshot is under way beside the run.
    hold: Option<Hold>,
    /// What the snapshot needs from the run's setup before it releases the hold.
    setup: Option<tokio::sync::oneshot::Sender<Setup>>,
    /// When the run's first process in the workspace started (ns, system clock).
    started_ns: Arc<AtomicI64>,
    /// Time the run itself spent awaiting the snapshot.
    awaited: Duration,
}

enum State {
    Pending(tokio::task::JoinHandle<Finished>),
    Ready(Box<Finished>),
}

/// What a finished snapshot gives the run.
#[derive(Default)]
struct Finished {
    ledger: Option<Ledger>,
    /// Its own duration.
    took: Duration,
    warnings: Vec<String>,
}

/// The run's sandbox, once resolved: decides whether the agent could reach the ledger's
/// scan cache (see [`Ledger::keep_cache`]).
pub struct Setup {
    pub policy: Option<Arc<Policy>>,
}

impl Snapshot {
    /// Starts the snapshot of `workspace`: beside the run when `alongside` (the caller
    /// then gives [`Snapshot::hold`] to the proxy), else serially: the caller awaits it
    /// ([`Snapshot::finish_or_cancel`]) before anything else of the run starts.
    pub fn start(workspace: &Path, state_dir: &Path, alongside: bool) -> Snapshot {
        let started_ns = Arc::new(AtomicI64::new(NOT_STARTED));
        let (hold, release) = Hold::new();
        let (setup_tx, setup_rx) = tokio::sync::oneshot::channel();
        let job = Job {
            workspace: workspace.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            started_ns: started_ns.clone(),
            setup: alongside.then_some(setup_rx),
            release,
        };
        Snapshot {
            state: State::Pending(tokio::task::spawn_blocking(move || job.run())),
            hold: alongside.then_some(hold),
            setup: alongside.then_some(setup_tx),
            started_ns,
            awaited: Duration::ZERO,
        }
    }

    /// What the proxy must hold requests with (beside the run only).
    pub fn hold(&self) -> Option<Hold> {
        self.hold.clone()
    }

    /// The run's sandbox is resolved (call before anything starts in the workspace).
    pub fn set_up(&mut self, policy: Option<Arc<Policy>>) {
        if let Some(tx) = self.setup.take() {
            let _ = tx.send(Setup { policy });
        }
    }

    /// A process of the run is about to start in the workspace (the agent, a check):
    /// from now on, what the walk sees changing is not the workspace as it was before.
    pub fn mark_started(&self) {
        let now = i64::try_from(scan::now_ns()).unwrap_or(NOT_STARTED - 1);
        let _ =
            self.started_ns
                .compare_exchange(NOT_STARTED, now, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Waits for the snapshot (counted as the run's wait when it was not done).
    pub async fn finish(&mut self) {
        // A setup that never came (the run failed before it) no longer holds the job up.
        drop(self.setup.take());
        let State::Pending(task) = &mut self.state else {
            return;
        };
        let waited = Instant::now();
        let finished = task.await.unwrap_or_else(|e| Finished {
            warnings: vec![format!(
                "the change ledger's snapshot failed ({e}); the run's changes are not measured"
            )],
            ..Finished::default()
        });
        self.awaited += waited.elapsed();
        self.state = State::Ready(Box::new(finished));
    }

    /// Waits for the snapshot unless a cancelling signal comes first; `Err(signal)` then
    /// (the snapshot is given up: a cancelled run ends promptly).
    pub async fn finish_or_cancel(
        &mut self,
        signals: &mut crate::supervise::signals::CancelSignals,
    ) -> Result<(), i32> {
        if let Some(signo) = signals.received() {
            // A snapshot that is done (as it is by the time a signal stops the agent) is
            // kept: the cancelled run still says what the agent changed. It was given up,
            // and every run cancelled while its agent worked had no `changes`.
            if matches!(&self.state, State::Pending(task) if task.is_finished()) {
                self.finish().await;
            }
            return self.give_up(signo);
        }
        if matches!(self.state, State::Ready(_)) {
            return Ok(());
        }
        tokio::select! {
            () = self.finish() => Ok(()),
            signo = signals.recv() => self.give_up(signo),
        }
    }

    fn give_up(&mut self, signo: i32) -> Result<(), i32> {
        if matches!(self.state, State::Pending(_)) {
            self.state = State::Ready(Box::new(Finished {
                warnings: vec![format!(
                    "the run was cancelled ({}) before the change ledger's snapshot was \
                     done; the run's changes are not measured",
                    crate::supervise::signals::signal_name(signo)
                )],
                ..Finished::default()
            }));
        }
        Err(signo)
    }

    /// The ledger, once finished (`None`: failed, given up, or not finished yet).
    pub fn ledger(&self) -> Option<&Ledger> {
        match &self.state {
            State::Ready(finished) => finished.ledger.as_ref(),
            State::Pending(_) => None,
        }
    }

    pub fn ledger_mut(&mut self) -> Option<&mut Ledger> {
        match &mut self.state {
            State::Ready(finished) => finished.ledger.as_mut(),
            State::Pending(_) => None,
        }
    }

    /// The finished ledger, taken out (with its warnings, for the envelope).
    pub fn take(&mut self) -> (Option<Ledger>, Vec<String>) {
        match &mut self.state {
            State::Ready(finished) => (
                finished.ledger.take(),
                std::mem::take(&mut finished.warnings),
            ),
            State::Pending(_) => (None, Vec::new()),
        }
    }

    /// The warnings of a finished snapshot, taken out.
    pub fn take_warnings(&mut self) -> Vec<String> {
        match &mut self.state {
            State::Ready(finished) => std::mem::take(&mut finished.warnings),
            State::Pending(_) => Vec::new(),
        }
    }

    /// `(ledger_before_ms, ledger_wait_ms)`, once finished.
    pub fn times_ms(&self) -> (Option<u64>, u64) {
        let took = match &self.state {
            State::Ready(finished) if finished.ledger.is_some() => {
                Some(finished.took.as_millis() as u64)
            }
            _ => None,
        };
        let held = self.hold.as_ref().map(Hold::longest).unwrap_or_default();
        (took, (self.awaited + held).as_millis() as u64)
    }
}

/// The blocking half: what runs on the snapshot's thread.
struct Job {
    workspace: PathBuf,
    state_dir: PathBuf,
    started_ns: Arc<AtomicI64>,
    /// Beside the run: the sandbox, sent once resolved (dropped when the setup failed).
    setup: Option<tokio::sync::oneshot::Receiver<Setup>>,
    /// Dropped on every way out of [`Job::run`], a panic too: the proxy never stays held.
    release: Release,
}

impl Job {
    fn run(self) -> Finished {
        if let Some(ms) = std::env::var(DELAY_VAR).ok().and_then(|v| v.parse().ok()) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        let started = Instant::now();
        let mut ledger = Ledger::before_cached(&self.workspace, &self.state_dir);
        let took = started.elapsed();
        let mut warnings = Vec::new();
        if let Some(setup) = self.setup {
            // Sent before anything starts in the workspace; an error: the setup failed.
            if let Ok(setup) = setup.blocking_recv() {
                let exposed = ledger
                    .cache_path()
                    .is_some_and(|path| agent_reaches(setup.policy.as_deref(), path));
                ledger.keep_cache(exposed);
            }
            let since = self.started_ns.load(Ordering::SeqCst);
            if since != NOT_STARTED {
                // File times come from the kernel's coarse clock, a tick behind this one:
                // what the run made before (placeholders) is always older than `since`,
                // and what a started process changes comes later than a tick (it must be
                // confined and exec first).
                warnings.extend(ledger.changed_since(i128::from(since)).map(|c| warning(&c)));
            }
        }
        self.release.release();
        Finished {
            ledger: Some(ledger),
            took,
            warnings,
        }
    }
}

/// The run's warning for what changed while the snapshot was taken.
fn warning(changed: &Changed) -> String {
    let names = |paths: &[Vec<u8>]| {
        let mut shown: Vec<String> = paths
            .iter()
            .take(5)
            .map(|p| match p.as_slice() {
                b"" => ".".to_owned(),
                p => String::from_utf8_lossy(p).into_owned(),
            })
            .collect();
        if paths.len() > shown.len() {
            shown.push(format!("and {} more", paths.len() - shown.len()));
        }
        shown.join(", ")
    };
    let mut text = String::from(
        "the workspace changed while the change ledger's snapshot was taken, after the run's \
         first process had started",
    );
    if !changed.files.is_empty() {
        text.push_str(&format!(
            "; these files are reported as changed whatever the agent did to them: {}",
            names(&changed.files)
        ));
    }
    if !changed.dirs.is_empty() {
        text.push_str(&format!(
            "; files deleted from these directories may be missing from the changes: {}",
            names(&changed.dirs)
        ));
    }
    text
}

/// Whether the agent could read or write `path` under `policy` (always, unconfined). The
/// path is resolved as far as it exists, as the sandbox's grants are.
pub fn agent_reaches(policy: Option<&Policy>, path: &Path) -> bool {
    let Some(policy) = policy else {
        return true;
    };
    let mut existing = path;
    let mut rest = Vec::new();
    let resolved = loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            break canonical;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            // Nothing of it exists: assume the worst.
            _ => return true,
        }
    };
    let full = rest.iter().rev().fold(resolved.clone(), |p, n| p.join(n));
    policy.is_granted(&resolved) || policy.is_granted(&full)
}

/// Files from which the CLI may take commands it runs as it starts, before any request
/// (hooks, MCP servers, plugins): the machine's managed settings, and the project's
/// settings and `.mcp.json` in the workspace or a directory above it (below `$HOME`, whose
/// `.claude` is the user's own config dir, which the run does not use).
const MANAGED: [&str; 2] = [
    "/etc/claude-code/managed-settings.json",
    "/etc/claude-code/managed-mcp.json",
];
/// The managed settings' drop-in directory: the CLI (2.1.330) merges every file in it
/// into the managed settings, hooks and MCP servers included.
const MANAGED_DROP_INS: &str = "/etc/claude-code/managed-settings.d";
const PROJECT: [&str; 3] = [
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".mcp.json",
];

/// Whether the CLI could run a command in the workspace before its first request (see
/// [`PROJECT`]): then the snapshot is taken before it starts.
pub fn cli_may_run_commands_at_start(workspace: &Path) -> bool {
    managed_settings_exist(&MANAGED, Path::new(MANAGED_DROP_INS))
        || project_settings_exist(workspace)
}

/// Whether any of the managed files exists, or the drop-in directory holds anything (or
/// cannot be read: assume it does). Round thirteen's review found the drop-ins unchecked.
fn managed_settings_exist(files: &[&str], drop_ins: &Path) -> bool {
    files.iter().any(|f| Path::new(f).exists())
        || match std::fs::read_dir(drop_ins) {
            Ok(mut entries) => entries.next().is_some(),
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
}

/// Whether the workspace or a directory above it (below `$HOME`) holds project settings.
fn project_settings_exist(workspace: &Path) -> bool {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    workspace
        .ancestors()
        .take_while(|dir| home.as_deref() != Some(*dir) && dir.parent().is_some())
        .any(|dir| {
            PROJECT
                .iter()
                .any(|f| dir.join(f).symlink_metadata().is_ok())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_settings_in_the_workspace_or_above_make_the_snapshot_serial() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("a/ws");
        std::fs::create_dir_all(&ws).unwrap();
        // The machine's managed settings would make every case true.
        let managed = MANAGED.iter().any(|f| Path::new(f).exists());
        assert_eq!(cli_may_run_commands_at_start(&ws), managed);
        std::fs::create_dir_all(dir.path().join("a/.claude")).unwrap();
        std::fs::write(dir.path().join("a/.claude/settings.json"), "{}").unwrap();
        assert!(cli_may_run_commands_at_start(&ws));
        std::fs::remove_dir_all(dir.path().join("a/.claude")).unwrap();
        std::fs::write(ws.join(".mcp.json"), "{}").unwrap();
        assert!(cli_may_run_commands_at_start(&ws));
    }

    #[test]
    fn a_managed_drop_in_makes_the_snapshot_serial() {
        let dir = tempfile::tempdir().unwrap();
        let drop_ins = dir.path().join("managed-settings.d");
        assert!(!managed_settings_exist(&[], &drop_ins));
        std::fs::create_dir(&drop_ins).unwrap();
        assert!(!managed_settings_exist(&[], &drop_ins));
        std::fs::write(drop_ins.join("10-hooks.json"), "{}").unwrap();
        assert!(managed_settings_exist(&[], &drop_ins));
    }

    #[test]
    fn the_warning_names_files_and_directories() {
        let changed = Changed {
            files: (0..7).map(|i| format!("f{i}").into_bytes()).collect(),
            dirs: vec![b"".to_vec(), b"sub".to_vec()],
        };
        let text = warning(&changed);
        assert!(text.contains("f0, f1, f2, f3, f4, and 2 more"), "{text}");
        assert!(
            text.contains("may be missing from the changes: ., sub"),
            "{text}"
        );
    }
}
