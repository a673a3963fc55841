//! What coder remembers about sessions, so resuming one is safe.
//!
//! The CLI keys its transcripts by working directory and config dir, so a `--resume` from
//! another workspace or with another backend fails with a misleading "No conversation
//! found" (or, worse, continues a conversation in the wrong place). coder records where each
//! session was created and refuses such a resume with a message that says what to change.
//! Two coder processes driving one session would interleave turns in one transcript, so a
//! run holds an exclusive lock on its session for its whole life; a second run fails at
//! once instead of waiting.
//!
//! Records are small JSON files written atomically (temporary file, then rename), so a
//! coder killed at any point leaves either the old record or the new one, never half of
//! one. Locks are `flock`s, released by the kernel however the holder dies.
//!
//! The store also keeps each session's CLI history (`<id>.jsonl`, the CLI's own transcript
//! of the conversation): every run gets a fresh CLI config dir ([`super::cli_home`]), so
//! the history a resume needs is copied out after each attempt and into the next run's
//! dir, and nothing else of a run's config dir survives it. The directory is 0700 and
//! every file in it 0600, created so.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::journal::dirstats::DirStats;
use crate::text::redact::Secrets;

/// Where a session was created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub session_id: Uuid,
    pub workspace: PathBuf,
    pub backend: String,
    #[serde(default)]
    pub cli_version: Option<String>,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    pub updated_at: u64,
    /// Why the provider rejects this session's history for good (an image block on a vendor
    /// without vision, DESIGN §12); such a session is never resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poisoned: Option<String>,
    /// The questions the session's last run asked (`needs_input`, DESIGN §9), open until a
    /// run of the session succeeds or asks again; `--answers` answers them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<super::questions::Question>>,
    /// The plan file of a `coder plan` session (DESIGN §9): such a session is resumed by
    /// `coder plan` only, never as a run that may write the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "session {id} is being driven by another coder process right now; wait for it to finish (two runs of one session would interleave its turns)"
    )]
    Busy { id: Uuid },
    #[error(
        "session {id} was created in workspace {recorded}, not {requested}; resume it with --cd {recorded} (the CLI stores sessions per workspace), or omit --session-id to start a new session here"
    )]
    WrongWorkspace {
        id: Uuid,
        recorded: String,
        requested: String,
    },
    #[error(
        "session {id} was created with backend {recorded:?}, not {requested:?}; resume it with --backend {recorded}, or omit --session-id to start a new session"
    )]
    WrongBackend {
        id: Uuid,
        recorded: String,
        requested: String,
    },
    #[error(
        "session {id} cannot be resumed: the provider rejects its history ({reason}); omit --session-id to start a new session"
    )]
    Poisoned { id: Uuid, reason: String },
    #[error(
        "session {id} is a plan session (coder plan, its plan in {plan}); go on planning with `coder plan --plan-file {plan} --session-id {id}`, carry the plan out in a fresh session with `coder --plan {plan}`, or omit --session-id to start a new session"
    , plan = plan_file.display())]
    PlanSession { id: Uuid, plan_file: PathBuf },
    #[error("session state in {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl SessionError {
    /// The message, naming what to change as the caller wrote it: flags on the command
    /// line, or (`tool_arguments`) the arguments of `coder mcp`'s `coder` tool (`cd`,
    /// `backend`, `SESSION_ID`), whose caller never wrote `--cd`.
    pub fn message_for(&self, tool_arguments: bool) -> String {
        if !tool_arguments {
            return self.to_string();
        }
        match self {
            SessionError::WrongWorkspace {
                id,
                recorded,
                requested,
            } => format!(
                "session {id} was created in workspace {recorded}, not {requested}; resume it \
                 with cd {recorded} (the CLI stores sessions per workspace), or leave \
                 SESSION_ID out to start a new session here"
            ),
            SessionError::WrongBackend {
                id,
                recorded,
                requested,
            } => format!(
                "session {id} was created with backend {recorded:?}, not {requested:?}; resume \
                 it with backend {recorded:?}, or leave SESSION_ID out to start a new session"
            ),
            SessionError::Poisoned { id, reason } => format!(
                "session {id} cannot be resumed: the provider rejects its history ({reason}); \
                 leave SESSION_ID out to start a new session"
            ),
            SessionError::PlanSession { id, plan_file } => format!(
                "session {id} is a plan session (coder plan, its plan in {plan}), which this \
                 tool does not resume as a run that may write the workspace; go on planning \
                 with `coder plan --plan-file {plan} --session-id {id}` on the command line, \
                 carry the plan out with `coder --plan {plan}`, or leave SESSION_ID out to \
                 start a new session",
                plan = plan_file.display()
            ),
            other => other.to_string(),
        }
    }
}

/// The session records and locks under one state directory.
#[derive(Debug, Clone)]
pub struct SessionStore {
    dir: PathBuf,
    /// Redacted from every record written ([`SessionStore::save`]): token shapes always,
    /// known values once [`SessionStore::redacting`] gives them.
    secrets: Secrets,
}

/// An exclusive hold on one session, released on drop (or by the kernel if coder dies).
///
/// The lock file is removed on drop, so that locks do not pile up one per run. Removing it
/// while another coder may be opening it is safe because [`SessionStore::lock`] checks,
/// once it holds the lock, that the file it locked is still the one at the path.
#[derive(Debug)]
pub struct SessionLock {
    /// Released after `drop` below has run: fields are dropped after their owner.
    _lock: Flock<File>,
    path: PathBuf,
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // Still holding the lock: whoever opened this file meanwhile will find it unlinked
        // and try again. A coder killed before this leaves the file, which is harmless.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The largest session history coder copies (the CLI's transcript of a long session with
/// big tool results reaches tens of MB; anything near this is a planted file).
pub const MAX_HISTORY_BYTES: u64 = 1 << 30;

impl SessionStore {
    pub fn new(state_dir: &Path) -> Self {
        SessionStore {
            dir: state_dir.join("sessions"),
            secrets: Secrets::default(),
        }
    }

    /// The store that redacts `secrets`' known values (a run's keys) from the records it
    /// writes, besides token shapes.
    pub fn redacting(self, secrets: Secrets) -> Self {
        SessionStore { secrets, ..self }
    }

    /// The directory of the records and kept histories.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn create_dir(&self) -> Result<(), SessionError> {
        private_dir(&self.dir).map_err(|e| self.io(e))
    }

    fn history_path(&self, id: Uuid) -> PathBuf {
        self.dir.join(format!("{id}.jsonl"))
    }

    /// Keeps `from` (a run's copy of the CLI's history of session `id`) as the session's
    /// history, replacing the one kept before. `from` is read without following a symlink,
    /// must be a regular file and at most [`MAX_HISTORY_BYTES`]: the agent could have put
    /// anything at that name.
    pub fn save_history(&self, id: Uuid, from: &Path) -> Result<(), SessionError> {
        self.create_dir()?;
        let tmp = self
            .dir
            .join(format!(".{id}.{}.history.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let copied =
            copy_regular(from, &tmp).and_then(|()| std::fs::rename(&tmp, self.history_path(id)));
        copied.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            SessionError::Io {
                path: from.to_path_buf(),
                source: e,
            }
        })
    }

    /// Writes the kept history of session `id` to `to` (a new file), if there is one;
    /// else the one in `legacy` (a CLI config dir shared by runs of older coders, searched
    /// in `projects/*/`). Returns whether a history was found.
    pub fn restore_history(
        &self,
        id: Uuid,
        to: &Path,
        legacy: Option<&Path>,
    ) -> Result<bool, SessionError> {
        let kept = self.history_path(id);
        let source = if std::fs::symlink_metadata(&kept).is_ok() {
            Some(kept)
        } else {
            legacy.and_then(|dir| find_history(dir, id, None))
        };
        let Some(source) = source else {
            return Ok(false);
        };
        copy_regular(&source, to).map_err(|e| SessionError::Io {
            path: source,
            source: e,
        })?;
        Ok(true)
    }

    fn io(&self, source: std::io::Error) -> SessionError {
        SessionError::Io {
            path: self.dir.clone(),
            source,
        }
    }

    fn record_path(&self, id: Uuid) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Prunes the oldest sessions (record and kept history together) beyond `max_sessions`
    /// or once their bytes add up to more than `max_bytes`, newest first by the record's
    /// modification time, the same retention as transcripts. `keep` (this run's session)
    /// and sessions locked by a running coder are never removed. Returns how many went.
    /// The sessions are those in the directory now; `earlier` holds the times and sizes
    /// of the files an earlier pass saw (all but `keep`'s are taken from it).
    pub fn enforce_retention(
        &self,
        max_sessions: usize,
        max_bytes: u64,
        keep: Uuid,
        earlier: &DirStats,
    ) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let names: HashSet<OsString> = entries.flatten().map(|e| e.file_name()).collect();
        let stat = |id: Uuid, name: &OsStr| {
            let seen = (id != keep).then(|| earlier.get(name)).flatten();
            seen.or_else(|| {
                let meta = std::fs::symlink_metadata(self.dir.join(name)).ok()?;
                Some((meta.modified().ok()?, meta.len()))
            })
        };
        let mut sessions: Vec<(std::time::SystemTime, u64, Uuid)> = names
            .iter()
            .filter_map(|name| {
                let id = Uuid::parse_str(name.to_str()?.strip_suffix(".json")?).ok()?;
                let (modified, len) = stat(id, name)?;
                let history = OsString::from(format!("{id}.jsonl"));
                let history = if names.contains(&history) {
                    stat(id, &history).map_or(0, |(_, len)| len)
                } else {
                    0
                };
                Some((modified, len + history, id))
            })
            .collect();
        sessions.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.2.cmp(&a.2)));
        let mut total = 0u64;
        let mut removed = 0;
        for (index, (_, size, id)) in sessions.into_iter().enumerate() {
            total += size;
            let over = index >= max_sessions || total > max_bytes;
            if !over || id == keep {
                continue;
            }
            // A session a coder is driving right now keeps its files.
            let Ok(_lock) = self.lock(id) else { continue };
            let _ = std::fs::remove_file(self.history_path(id));
            if std::fs::remove_file(self.record_path(id)).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// Takes the session's lock without waiting.
    pub fn lock(&self, id: Uuid) -> Result<SessionLock, SessionError> {
        use std::os::unix::fs::MetadataExt;
        self.create_dir()?;
        let path = self.dir.join(format!("{id}.lock"));
        // A holder that lets go removes the file; a lock taken on a removed file is worth
        // nothing, so it is taken again on the file now at the path. Each retry means a
        // holder finished in between, so this ends.
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| self.io(e))?;
            let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => lock,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    return Err(SessionError::Busy { id });
                }
                Err((_, errno)) => return Err(self.io(errno.into())),
            };
            let locked = lock.metadata().map_err(|e| self.io(e))?;
            match std::fs::metadata(&path) {
                Ok(now) if now.dev() == locked.dev() && now.ino() == locked.ino() => {
                    return Ok(SessionLock { _lock: lock, path });
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    pub fn load(&self, id: Uuid) -> Result<Option<SessionRecord>, SessionError> {
        match std::fs::read(self.record_path(id)) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(e)),
        }
    }

    /// Refuses a resume from another workspace or backend than the session was made in.
    /// Sessions coder has no record of are left to the CLI to judge.
    pub fn check_resume(
        &self,
        id: Uuid,
        workspace: &Path,
        backend: &str,
        plan_run: bool,
    ) -> Result<Option<SessionRecord>, SessionError> {
        let Some(record) = self.load(id)? else {
            return Ok(None);
        };
        if record.workspace != workspace {
            return Err(SessionError::WrongWorkspace {
                id,
                recorded: record.workspace.display().to_string(),
                requested: workspace.display().to_string(),
            });
        }
        if record.backend != backend {
            return Err(SessionError::WrongBackend {
                id,
                recorded: record.backend,
                requested: backend.to_owned(),
            });
        }
        if let Some(reason) = record.poisoned {
            return Err(SessionError::Poisoned { id, reason });
        }
        if let Some(plan_file) = record.plan_file.clone().filter(|_| !plan_run) {
            return Err(SessionError::PlanSession { id, plan_file });
        }
        Ok(Some(record))
    }

    /// Marks a recorded session as poisoned, so that no later run resumes it.
    pub fn mark_poisoned(&self, id: Uuid, reason: &str) -> Result<(), SessionError> {
        let Some(mut record) = self.load(id)? else {
            return Ok(());
        };
        record.poisoned = Some(reason.to_owned());
        self.save(&record)
    }

    /// Writes (or refreshes) the record of a session atomically.
    pub fn save(&self, record: &SessionRecord) -> Result<(), SessionError> {
        self.create_dir()?;
        let path = self.record_path(record.session_id);
        let tmp = self
            .dir
            .join(format!(".{}.{}.tmp", record.session_id, std::process::id()));
        // The one place records are written: every text in them (the questions the model
        // asked, the vendor's reason a session is poisoned, the CLI's version) is redacted
        // here, whichever field it is in.
        let mut value = serde_json::to_value(record).map_err(|e| self.io(e.into()))?;
        self.secrets.redact_value(&mut value);
        let bytes = serde_json::to_vec_pretty(&value).map_err(|e| self.io(e.into()))?;
        let write = || -> std::io::Result<()> {
            // Write then rename: a coder killed at any point leaves the old record or the new
            // one. No fsync: the record guards against a second coder and a wrong
            // workspace, not against power loss, and an fsync costs milliseconds per run.
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?
                .write_all(&bytes)?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.io(e)
        })
    }
}

/// Creates `dir` (and missing parents) owner-only, and makes an existing `dir` owner-only
/// if it is ours and was not: coder's state holds transcripts and session histories.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.is_dir() && meta.mode() & 0o077 != 0 && meta.uid() == nix::unistd::geteuid().as_raw() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The CLI's history file of session `id` under a config dir (`projects/*/<id>.jsonl`),
/// preferring the project directory named `preferred`. Symlinked project directories are
/// skipped.
pub fn find_history(config_dir: &Path, id: Uuid, preferred: Option<&str>) -> Option<PathBuf> {
    let projects = config_dir.join("projects");
    let name = format!("{id}.jsonl");
    if let Some(preferred) = preferred {
        let dir = projects.join(preferred);
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir())
            && std::fs::symlink_metadata(dir.join(&name)).is_ok()
        {
            return Some(dir.join(&name));
        }
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&projects)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .map(|d| d.join(&name))
        .find(|p| std::fs::symlink_metadata(p).is_ok())
}

/// Copies the regular file `from` (opened without following a symlink, or blocking on a
/// FIFO) into the new owner-only file `to`, refusing anything over [`MAX_HISTORY_BYTES`].
fn copy_regular(from: &Path, to: &Path) -> std::io::Result<()> {
    let source = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(from)?;
    let meta = source.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > MAX_HISTORY_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_HISTORY_BYTES} bytes"
        )));
    }
    let mut target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    let copied = std::io::copy(&mut source.take(MAX_HISTORY_BYTES), &mut target)?;
    if copied >= MAX_HISTORY_BYTES {
        return Err(std::io::Error::other(
            "grew past the size limit while copied",
        ));
    }
    Ok(())
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: Uuid, ws: &str) -> SessionRecord {
        SessionRecord {
            session_id: id,
            workspace: ws.into(),
            backend: "glm".into(),
            cli_version: None,
            created_at: 1,
            updated_at: 1,
            poisoned: None,
            questions: None,
            plan_file: None,
        }
    }

    /// A record with a known key and an unknown token planted in every text it holds
    /// (every string of its JSON form but the id) is written without either.
    #[test]
    fn every_text_of_a_record_is_redacted() {
        const KEY: &str = "zk-Tq81Lm9Xv2Pw7Rb4Hc6N";
        const TOKEN: &str = "ghp_H5jD8sF2kL0qW9eR4tY7uI1o";
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path()).redacting(Secrets::new([KEY]));
        let id = Uuid::new_v4();
        let mut full = record(id, "/ws");
        full.cli_version = Some("2.1.330".into());
        full.poisoned = Some("image block".into());
        full.questions = Some(vec![crate::pipeline::questions::Question {
            question: "Which?".into(),
            options: vec!["a".into(), "b".into()],
            why: Some("blocked".into()),
        }]);
        let mut value = serde_json::to_value(&full).unwrap();
        let planted = plant(&mut value, &format!(" {KEY} {TOKEN}"));
        let full: SessionRecord = serde_json::from_value(value).unwrap();
        store.save(&full).unwrap();
        let written = std::fs::read_to_string(store.record_path(id)).unwrap();
        assert!(!written.contains(&KEY[3..]), "{written}");
        assert!(!written.contains(&TOKEN[4..]), "{written}");
        assert_eq!(
            written.matches("[REDACTED]").count(),
            2 * planted,
            "{written}"
        );
    }

    /// Appends `secret` to every string of `value` but the session's id; how many.
    fn plant(value: &mut serde_json::Value, secret: &str) -> usize {
        match value {
            serde_json::Value::String(s) if Uuid::parse_str(s).is_err() => {
                s.push_str(secret);
                1
            }
            serde_json::Value::Array(items) => items.iter_mut().map(|v| plant(v, secret)).sum(),
            serde_json::Value::Object(map) => map.values_mut().map(|v| plant(v, secret)).sum(),
            _ => 0,
        }
    }

    #[test]
    fn second_lock_fails_immediately_and_frees_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let id = Uuid::new_v4();
        let held = store.lock(id).unwrap();
        assert!(matches!(store.lock(id), Err(SessionError::Busy { .. })));
        drop(held);
        let lock_file = dir.path().join("sessions").join(format!("{id}.lock"));
        assert!(!lock_file.exists(), "the lock file goes with the lock");
        let again = store.lock(id).unwrap();
        assert!(lock_file.exists());
        // A lock taken on a file its holder has since removed does not count.
        let stale = std::fs::File::open(&lock_file).unwrap();
        drop(again);
        let stale = Flock::lock(stale, FlockArg::LockExclusiveNonblock).unwrap();
        assert!(
            store.lock(id).is_ok(),
            "the removed file's lock does not block"
        );
        drop(stale);
    }

    #[test]
    fn resume_checks_workspace_and_backend() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let id = Uuid::new_v4();
        assert_eq!(
            store
                .check_resume(id, Path::new("/ws"), "glm", false)
                .unwrap(),
            None
        );
        store.save(&record(id, "/ws")).unwrap();
        assert!(
            store
                .check_resume(id, Path::new("/ws"), "glm", false)
                .is_ok()
        );
        let err = store
            .check_resume(id, Path::new("/other"), "glm", false)
            .unwrap_err();
        assert!(err.to_string().contains("--cd /ws"), "{err}");
        assert!(matches!(
            store.check_resume(id, Path::new("/ws"), "deepseek", false),
            Err(SessionError::WrongBackend { .. })
        ));
        // No temporary files are left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path().join("sessions"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![format!("{id}.json")]);
    }
}
