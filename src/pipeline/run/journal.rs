//! The run's journal: the transcript and the progress line fed from one place, the
//! history's retention applied beside the child (not at the end), and the trash of
//! earlier runs pruned on a thread of its own while the run goes on.

use std::ffi::OsString;

use serde_json::json;

use crate::config;
use crate::journal::dirstats::DirStats;
use crate::journal::progress::{self, Progress};
use crate::journal::transcript::{self, Transcript};
use crate::journal::{Journal, Note};
use crate::pipeline::child;
use crate::pipeline::request::{RunRequest, SessionChoice};
use crate::pipeline::session::SessionStore;
use crate::stream::Pipe;
use crate::stream::{Decoded, Line};

use super::state::requested_backend;

impl RunJournal {
    /// Opens the run's transcript (its `start` record written), its progress on a
    /// terminal, and what the history's retention will need; the secrets it redacts are
    /// the environment's and `backend`'s.
    pub(super) fn start(
        request: &RunRequest,
        run_id: &str,
        backend: Option<&config::ResolvedBackend>,
        process_env: &[(OsString, OsString)],
        state_dir: &std::path::Path,
        transcript_path: &std::path::Path,
    ) -> RunJournal {
        let runs_dir = transcript::runs_dir(state_dir);
        let mut secrets = child::secret_values(process_env);
        if let Some(backend) = backend {
            // A key written into the config file is a secret whatever its variable is called.
            secrets.extend(
                backend
                    .secret_values()
                    .into_iter()
                    .filter_map(|s| s.to_str().map(str::to_owned)),
            );
        }
        let redaction = crate::text::Secrets::new(&secrets);
        let mut journal = RunJournal {
            transcript: Transcript::create(transcript_path.to_path_buf(), secrets),
            progress: progress::wanted(request.quiet)
                .then(|| Progress::start(request.idle_timeout).with_secrets(redaction.clone())),
            history: HistoryStats::Pending {
                runs: request
                    .transcript
                    .is_none()
                    .then(|| (runs_dir, transcript_path.to_path_buf())),
                sessions: SessionStore::new(state_dir).dir().to_path_buf(),
            },
            redaction: redaction.clone(),
            trash: TrashPruning::Pending(state_dir.to_path_buf()),
        };
        journal.transcript.note(Note::Start(json!({
                "run_id": run_id,
                "coder_version": env!("CARGO_PKG_VERSION"),
                "workspace": request.workspace,
                "backend": backend.map_or_else(|| requested_backend(request), |b| b.name().to_owned()),
                "sandbox": request.sandbox.as_str(),
                "session": match request.session {
                    SessionChoice::New(id) => json!({"new": id}),
                    SessionChoice::Resume(id) => json!({"resume": id}),
                },
                "prompt": crate::text::head_with_marker(&request.prompt, TRANSCRIPT_PROMPT_BYTES),
                "prompt_bytes": request.prompt.len(),
                "idle_timeout_s": request.idle_timeout.as_secs_f64(),
                "max_duration_s": request.max_duration.map_or(0.0, |d| d.as_secs_f64()),
                "max_retries": request.max_retries,
        })));
        journal
    }
}

/// The run's journal: the transcript, and the progress line when one is drawn.
pub(super) struct RunJournal {
    pub(super) transcript: Transcript,
    pub(super) progress: Option<Progress>,
    pub(super) history: HistoryStats,
    /// Empties the placeholder trash of earlier runs while the child runs (see
    /// `sandbox::trash`): started at its first line, stopped when the attempts end.
    pub(super) trash: TrashPruning,
    /// The run's credentials, for what it records outside the journal too (the store's
    /// cooldown message).
    pub(super) redaction: crate::text::Secrets,
}

/// The transcripts' retention, and the times and sizes of the sessions kept from earlier
/// runs for the sessions' retention at the run's end, on a thread of their own from the
/// child's first line on, while coder waits for the child.
///
/// Deleting the oldest transcripts once they are over the cap took 5 to 7 ms per 64 MB
/// file on ext4 under load when it came after the run's own transcript was finished, on
/// the way to the envelope; and with hundreds of sessions kept, stat-ing each one took
/// milliseconds more. Here both overlap with the child's run, and the run's end waits only
/// for what is left of them (nothing unless the child's run was shorter). The retention
/// counts the run's own transcript at its size then (see
/// [`transcript::enforce_retention`]), so transcripts can exceed the cap by at most the
/// rest of one run's transcript until the next run. A run whose child never wrote a line
/// does both at its end.
pub(super) enum HistoryStats {
    /// Not started yet: the transcripts' directory and the run's own transcript in it
    /// (`None` for a `--transcript` of the caller's, which has no retention), and the
    /// sessions' directory.
    Pending {
        runs: Option<(std::path::PathBuf, std::path::PathBuf)>,
        sessions: std::path::PathBuf,
    },
    Taking(std::thread::JoinHandle<DirStats>),
    Taken,
}

impl HistoryStats {
    /// Starts the thread, once; with no thread to spare, does the work here.
    pub(super) fn start(&mut self) -> Option<DirStats> {
        if !matches!(self, HistoryStats::Pending { .. }) {
            return None;
        }
        let HistoryStats::Pending { runs, sessions } = std::mem::replace(self, HistoryStats::Taken)
        else {
            return None;
        };
        let (retained, listed) = (runs.clone(), sessions.clone());
        let spawned = std::thread::Builder::new()
            .name("history-stats".into())
            .spawn(move || retention_and_stats(retained, &listed));
        match spawned {
            Ok(handle) => {
                *self = HistoryStats::Taking(handle);
                None
            }
            Err(_) => Some(retention_and_stats(runs, &sessions)),
        }
    }

    /// Waits for the thread (starting it first if the child never wrote a line) and
    /// returns what it found of the sessions.
    pub(super) fn take(&mut self) -> DirStats {
        if let Some(done) = self.start() {
            return done;
        }
        match std::mem::replace(self, HistoryStats::Taken) {
            HistoryStats::Taking(handle) => handle.join().unwrap_or_default(),
            _ => DirStats::default(),
        }
    }
}

/// [`HistoryStats`]' work: the transcripts' retention in `runs` (the directory, and the
/// run's own transcript, which it keeps), then the sessions' times and sizes.
fn retention_and_stats(
    runs: Option<(std::path::PathBuf, std::path::PathBuf)>,
    sessions: &std::path::Path,
) -> DirStats {
    if let Some((dir, own)) = runs {
        let _ = transcript::enforce_retention(&dir, transcript::Retention::default(), &own);
    }
    DirStats::of(sessions)
}

impl Journal for RunJournal {
    fn line(&mut self, pipe: Pipe, line: Line, decoded: Option<&Decoded>) -> Option<Vec<u8>> {
        // Done in place only when no thread could be started; then the sessions' retention
        // stats every file at the end.
        let _ = self.history.start();
        self.trash.start();
        if let Some(progress) = self.progress.as_mut() {
            progress.activity();
            if let Some(decoded) = decoded {
                progress.event(&decoded.event);
            }
        }
        self.transcript.child_line(pipe, line, decoded)
    }

    fn flush(&mut self) {
        self.transcript.flush();
    }

    fn note(&mut self, note: Note<'_>) {
        if let (Note::Queued(data), Some(progress)) = (&note, self.progress.as_mut()) {
            progress.set_phase(match data["state"].as_str() {
                Some("waiting") => "queued: waiting for a slot",
                _ => "starting claude",
            });
        }
        self.transcript.note(note);
    }
}

/// The pruning of the placeholder trash: once per run, while its child runs.
pub(super) enum TrashPruning {
    /// Not started: coder's state directory.
    Pending(std::path::PathBuf),
    /// Held only to be dropped, which stops it.
    Running {
        _pruner: crate::sandbox::TrashPruner,
    },
    Stopped,
}

impl TrashPruning {
    pub(super) fn start(&mut self) {
        if let TrashPruning::Pending(state_dir) = self {
            *self = TrashPruning::Running {
                _pruner: crate::sandbox::TrashPruner::start(state_dir),
            };
        }
    }

    /// Stops it before its next removal, for good (it is not waited for).
    pub(super) fn stop(&mut self) {
        *self = TrashPruning::Stopped;
    }
}

/// How much of the prompt the transcript's `start` entry keeps (64 KiB); `prompt_bytes`
/// gives the full size. The child always gets the whole prompt.
const TRANSCRIPT_PROMPT_BYTES: usize = 64 * 1024;
