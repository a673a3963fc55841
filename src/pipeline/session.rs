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

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

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
    #[error("session state in {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The session records and locks under one state directory.
#[derive(Debug, Clone)]
pub struct SessionStore {
    dir: PathBuf,
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

impl SessionStore {
    pub fn new(state_dir: &Path) -> Self {
        SessionStore {
            dir: state_dir.join("sessions"),
        }
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

    /// Takes the session's lock without waiting.
    pub fn lock(&self, id: Uuid) -> Result<SessionLock, SessionError> {
        use std::os::unix::fs::MetadataExt;
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io(e))?;
        let path = self.dir.join(format!("{id}.lock"));
        // A holder that lets go removes the file; a lock taken on a removed file is worth
        // nothing, so it is taken again on the file now at the path. Each retry means a
        // holder finished in between, so this ends.
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
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
        Ok(Some(record))
    }

    /// Writes (or refreshes) the record of a session atomically.
    pub fn save(&self, record: &SessionRecord) -> Result<(), SessionError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io(e))?;
        let path = self.record_path(record.session_id);
        let tmp = self
            .dir
            .join(format!(".{}.{}.tmp", record.session_id, std::process::id()));
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| self.io(e.into()))?;
        let write = || -> std::io::Result<()> {
            // Write then rename: a coder killed at any point leaves the old record or the new
            // one. No fsync: the record guards against a second coder and a wrong
            // workspace, not against power loss, and an fsync costs milliseconds per run.
            File::create(&tmp)?.write_all(&bytes)?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.io(e)
        })
    }
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
            store.check_resume(id, Path::new("/ws"), "glm").unwrap(),
            None
        );
        store.save(&record(id, "/ws")).unwrap();
        assert!(store.check_resume(id, Path::new("/ws"), "glm").is_ok());
        let err = store
            .check_resume(id, Path::new("/other"), "glm")
            .unwrap_err();
        assert!(err.to_string().contains("--cd /ws"), "{err}");
        assert!(matches!(
            store.check_resume(id, Path::new("/ws"), "deepseek"),
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
