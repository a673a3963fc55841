//! The CLI's config dir (`CLAUDE_CONFIG_DIR`) of one run: fresh, private, thrown away.
//!
//! The CLI loads from its config dir what shapes everything it does: `settings.json`
//! (hooks: shell commands it runs), `CLAUDE.md`, `agents/`, `commands/`, `skills/`, MCP
//! servers in `.claude.json`, and it keeps every workspace's session logs there. A dir
//! shared by runs would let one run's agent plant code or instructions that every later
//! run loads, `danger-full-access` runs included, and read other workspaces' sessions. So
//! every run, in every sandbox mode, gets a new dir built from coder's own template:
//!
//! * `.claude.json` with what coder needs (onboarding done), nothing of the user's, and
//!   what the CLI itself writes there when it starts in an empty dir (see
//!   [`template_claude_json`]), so that it does not rewrite the file on every run;
//! * the login (`.credentials.json`), copied from the configured claude dir when it holds
//!   one (`claude_config_dir`: coder's private dir, the user's own, or a path). It is
//!   never copied back: a token the CLI refreshes during a run is not kept;
//! * for a resume, that session's history alone (from the session store, see
//!   [`super::session`]), where the CLI looks for it (`projects/<munged cwd>/<id>.jsonl`).
//!
//! After each attempt the session's history is copied back into the store (only it), and
//! the whole dir is removed when the run ends. Dirs of runs whose coder died are removed
//! by the next run, in every scratch place this user has (`config::scratch`).
//!
//! The dir lives in the run's scratch place (`config::scratch`): a tmpfs of this user's
//! when there is one (`$XDG_RUNTIME_DIR/coder`, `/dev/shm/coder-<uid>`), else coder's state
//! directory. Its files are made new every run, and on a journal-less ext4 each new inode
//! costs 0.2 to 0.4 ms under churn (BENCHMARKS.md, round twenty).

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::session::{self, SessionError, SessionStore};
use crate::config::run_dirs::{self, RunLock};
use crate::config::scratch::{self, Scratch};

/// The built-in plugins whose usage counters the CLI (2.1.330) adds to a new `.claude.json`.
const BUILTIN_PLUGINS: [&str; 3] = [
    "cc-plugin-agents-md@builtin",
    "cc-plugin-privacy@builtin",
    "cc-plugin-plugin-authoring@builtin",
];

/// The migrations the CLI (2.1.330) has run once `migrationVersion` reads this.
const MIGRATION_VERSION: u32 = 15;

/// What coder's template puts in `.claude.json` for a run starting at `now`: onboarding
/// done, plus exactly what the CLI writes on its first start in an empty config dir. A
/// dir without them costs the CLI five rewrites of the file, each behind a lock, with a
/// backup and an `fsync` (measured: 8 `fsync`s and 26 more `mkdir`s per run); with
/// them it writes the file no more. The machine and user IDs are random per run, as
/// the CLI's own would be in a fresh dir, so no run can be linked to another by them.
/// A newer CLI with more migrations or plugins just writes the rest itself.
fn template_claude_json(now: std::time::SystemTime) -> String {
    let random_id = || format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
    let millis = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let usage =
        serde_json::json!({"usageCount": 0, "lastUsedAt": millis, "lastUsedNumStartups": 0});
    let plugins: serde_json::Map<String, serde_json::Value> = BUILTIN_PLUGINS
        .iter()
        .map(|name| (name.to_string(), usage.clone()))
        .collect();
    let template = serde_json::json!({
        "hasCompletedOnboarding": true,
        "firstStartTime": crate::journal::transcript::timestamp(now),
        "machineID": random_id(),
        "opusProMigrationComplete": true,
        "seenNotifications": {},
        "hasResetAutoModeOptInForDefaultOffer": true,
        "migrationVersion": MIGRATION_VERSION,
        "userID": random_id(),
        "pluginUsage": plugins,
    });
    let Ok(mut text) = serde_json::to_string_pretty(&template) else {
        return "{\n  \"hasCompletedOnboarding\": true\n}\n".to_string();
    };
    text.push('\n');
    text
}

/// A run's CLI config dir, removed on drop.
#[derive(Debug)]
pub struct CliHome {
    /// `<scratch>/cli-runs/<pid>-<uuid>`: holds only `claude` (and the CLI's `claude.lock`).
    root: PathBuf,
    dir: PathBuf,
    /// coder's state directory, whose trash `root` goes to, when `root` lies in it (see
    /// [`Drop`]); on a tmpfs it is removed in place (a rename cannot cross file systems,
    /// and a removal there costs microseconds).
    trash_in: Option<PathBuf>,
    /// Why a scratch place was passed over (another user's, a symlink), for the run's
    /// warnings.
    notes: Vec<String>,
    /// The CLI's project directory name for the workspace.
    project: String,
    /// Held while the run lives, so that no coder prunes `root` meanwhile; dropped after
    /// `root` is removed (fields drop after `Drop::drop`).
    _lock: RunLock,
}

#[derive(Debug, thiserror::Error)]
pub enum CliHomeError {
    #[error("cannot create the claude config directory for this run in {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot restore the session's history: {0}")]
    History(#[from] SessionError),
}

impl CliHome {
    /// A fresh dir in `scratch` for a run in `workspace`, with coder's state directory
    /// `state_dir`. `login_from` is the configured claude dir (its `.credentials.json` is
    /// copied; for a resume, the legacy place of the session's history). `resume` names
    /// the session whose history is copied in.
    pub fn create(
        state_dir: &Path,
        scratch: &Scratch,
        login_from: &Path,
        workspace: &Path,
        resume: Option<(Uuid, &SessionStore)>,
    ) -> Result<CliHome, CliHomeError> {
        let base = scratch.cli_runs();
        let create = |path: &Path, e: std::io::Error| CliHomeError::Create {
            path: path.to_path_buf(),
            source: e,
        };
        // The state directory is made (or made owner-only again) here too, wherever the
        // home goes: the session's records follow in it.
        session::private_dir(state_dir).map_err(|e| create(state_dir, e))?;
        session::private_dir(scratch.root()).map_err(|e| create(scratch.root(), e))?;
        session::private_dir(&base).map_err(|e| create(&base, e))?;
        for place in scratch::places(state_dir) {
            run_dirs::prune_dead_run_dirs(&place.join(run_dirs::CLI_RUNS_DIR));
        }
        let root = base.join(format!(
            "{}-{}",
            std::process::id(),
            Uuid::new_v4().simple()
        ));
        let lock = RunLock::make_dir(&root).map_err(|e| create(&root, e))?;
        // What the CLI creates here is owner-only too, as everything else coder keeps:
        // then the dir can go into coder's trash at the end (see `Drop`).
        crate::sandbox::make_owner_only_inherited(&root);
        let dir = root.join("claude");
        session::private_dir(&dir).map_err(|e| create(&dir, e))?;
        let home = CliHome {
            root,
            dir,
            trash_in: (scratch.root() == state_dir).then(|| state_dir.to_path_buf()),
            notes: scratch.notes().to_vec(),
            project: project_dir_name(workspace),
            _lock: lock,
        };
        let template = template_claude_json(std::time::SystemTime::now());
        home.write_new(".claude.json", template.as_bytes())
            .map_err(|e| create(&home.dir, e))?;
        home.copy_login(login_from);
        if let Some((id, store)) = resume {
            let project = home.dir.join("projects").join(&home.project);
            session::private_dir(&project).map_err(|e| create(&project, e))?;
            store.restore_history(id, &project.join(format!("{id}.jsonl")), Some(login_from))?;
        }
        Ok(home)
    }

    /// The dir for `request`'s run with `backend` (coder's state dir; the configured claude
    /// dir as login source; the resumed session's history from `store`).
    pub fn for_run(
        request: &super::request::RunRequest,
        backend: &crate::config::ResolvedBackend,
        state_dir: &Path,
        store: &SessionStore,
    ) -> Result<CliHome, CliHomeError> {
        let resume = match request.session {
            super::request::SessionChoice::Resume(id) => Some((id, store)),
            super::request::SessionChoice::New(_) => None,
        };
        CliHome::create(
            state_dir,
            &Scratch::choose(state_dir),
            &backend.claude_config_dir().path,
            &request.workspace,
            resume,
        )
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Why a scratch place was passed over for this dir (another user's directory, a
    /// symlink), one sentence each: the run's warnings.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Points the child's environment at this dir.
    pub fn apply_env(&self, env: &mut Vec<(OsString, OsString)>) {
        env.retain(|(k, _)| k != "CLAUDE_CONFIG_DIR");
        env.push((
            "CLAUDE_CONFIG_DIR".into(),
            self.dir.clone().into_os_string(),
        ));
        env.sort();
    }

    /// Copies the CLI's history of session `id` into the store, if the run wrote one. The
    /// agent may write this dir: a `projects` that is not a directory of its own (a
    /// symlink to a place the agent names) holds no history, else coder would copy a file
    /// of that name from wherever it points into the store, and the next resume would hand
    /// it to the agent.
    pub fn keep_history(&self, id: Uuid, store: &SessionStore) -> Result<(), SessionError> {
        let projects = std::fs::symlink_metadata(self.dir.join("projects"));
        if !projects.is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        match session::find_history(&self.dir, id, Some(&self.project)) {
            Some(file) => store.save_history(id, &file),
            None => Ok(()),
        }
    }

    fn write_new(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(self.dir.join(name))?
            .write_all(bytes)
    }

    /// Copies the configured dir's login, when it is a plain file of a sane size.
    fn copy_login(&self, from: &Path) {
        use std::io::Read;
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(from.join(".credentials.json"))
        else {
            return;
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return;
        }
        let mut bytes = Vec::new();
        if file.take(1 << 20).read_to_end(&mut bytes).is_ok() {
            let _ = self.write_new(".credentials.json", &bytes);
        }
    }
}

impl Drop for CliHome {
    /// The login's copy goes at once; the rest (what the CLI wrote: a dozen directories,
    /// each `rmdir` milliseconds on a loaded ext4) is moved into coder's trash by one
    /// rename when all of it is owner-only and it lies in the state directory, for a later
    /// run to remove (`sandbox::trash`), or else removed here (on a tmpfs: microseconds).
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(".credentials.json"));
        let moved = self
            .trash_in
            .as_deref()
            .is_some_and(|state| crate::sandbox::discard_own(state, &self.root));
        if !moved {
            run_dirs::remove_tree(&self.root);
        }
    }
}

/// The CLI's name for a workspace's project directory: the absolute path with every
/// character but ASCII letters and digits replaced by `-`. (For very long paths the CLI
/// adds a hash; a resume still finds a history in any project directory.)
pub fn project_dir_name(workspace: &Path) -> String {
    workspace
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A new home in the state directory `state` itself, without a login to copy.
    fn fresh(state: &Path, ws: &Path) -> CliHome {
        CliHome::create(state, &Scratch::at(state), &state.join("none"), ws, None).unwrap()
    }

    #[test]
    fn a_fresh_dir_holds_the_template_and_the_login_only() {
        let state = tempfile::tempdir().unwrap();
        let legacy = state.path().join("claude");
        std::fs::create_dir_all(legacy.join("agents")).unwrap();
        std::fs::write(legacy.join("settings.json"), "{\"hooks\":{}}").unwrap();
        std::fs::write(legacy.join(".credentials.json"), "{\"login\":1}").unwrap();
        let home = CliHome::create(
            state.path(),
            &Scratch::at(state.path()),
            &legacy,
            Path::new("/w/ws_1"),
            None,
        )
        .unwrap();
        let mut names: Vec<String> = std::fs::read_dir(home.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [".claude.json", ".credentials.json"]);
        let mode = std::fs::metadata(home.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let root = home.root.clone();
        drop(home);
        assert!(!root.exists());
        // Moved into coder's trash, without the login's copy.
        let trashed = state.path().join("trash").join(root.file_name().unwrap());
        assert!(trashed.join("claude/.claude.json").is_file());
        assert!(!trashed.join("claude/.credentials.json").exists());
    }

    #[test]
    fn what_the_cli_writes_is_owner_only_and_the_dir_leaves_by_the_trash() {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let state = tempfile::tempdir().unwrap();
        let ws = Path::new("/w/ws");
        let home = fresh(state.path(), ws);
        // As the CLI makes them: directories and files with the modes it asks for, under
        // the usual umask.
        let memory = home.path().join("projects/-w-ws/memory");
        std::fs::create_dir_all(&memory).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(home.path().join("projects/-w-ws/s.jsonl"))
            .unwrap();
        let root = home.root.clone();
        drop(home);
        assert!(!root.exists());
        let trashed = state.path().join("trash").join(root.file_name().unwrap());
        assert!(trashed.join("claude/projects/-w-ws/memory").is_dir());
        let mut stack = vec![state.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let want = if meta.is_dir() { 0o700 } else { 0o600 };
                assert_eq!(meta.mode() & 0o7777, want, "{}", path.display());
                if meta.is_dir() {
                    stack.push(path);
                }
            }
        }
    }

    #[test]
    fn a_home_on_another_file_system_is_removed_in_place_not_renamed_into_the_trash() {
        // The state directory on disk, the scratch on a tmpfs: a rename between them
        // fails with EXDEV, so the home is removed where it is.
        let state = tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/target")).unwrap();
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let scratch = Scratch::at(shm.path());
        let ws = Path::new("/w/ws");
        let home =
            CliHome::create(state.path(), &scratch, &state.path().join("none"), ws, None).unwrap();
        assert!(home.path().starts_with(shm.path().join("cli-runs")));
        std::fs::create_dir_all(home.path().join("projects/-w-ws")).unwrap();
        let root = home.root.clone();
        drop(home);
        assert!(!root.exists(), "the home stayed on the tmpfs");
        assert!(!state.path().join("trash").exists(), "a trash was made");
        assert!(
            !crate::sandbox::discard_own(state.path(), shm.path()),
            "a rename across file systems was taken for done"
        );
        assert!(shm.path().is_dir());
    }

    #[test]
    fn history_goes_to_the_store_and_back_into_the_next_run_only_for_its_session() {
        let state = tempfile::tempdir().unwrap();
        let store = SessionStore::new(state.path());
        let ws = Path::new("/w/ws");
        let (id, other) = (Uuid::new_v4(), Uuid::new_v4());
        let first = fresh(state.path(), ws);
        let project = first.path().join("projects").join(project_dir_name(ws));
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join(format!("{id}.jsonl")), "turn 1\n").unwrap();
        std::fs::write(project.join(format!("{other}.jsonl")), "planted\n").unwrap();
        first.keep_history(id, &store).unwrap();
        drop(first);

        let second = CliHome::create(
            state.path(),
            &Scratch::at(state.path()),
            &state.path().join("none"),
            ws,
            Some((id, &store)),
        )
        .unwrap();
        let project = second.path().join("projects").join(project_dir_name(ws));
        let names: Vec<String> = std::fs::read_dir(&project)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [format!("{id}.jsonl")]);
        assert_eq!(
            std::fs::read_to_string(project.join(format!("{id}.jsonl"))).unwrap(),
            "turn 1\n"
        );
    }

    #[test]
    fn a_planted_symlink_or_fifo_is_not_kept() {
        let state = tempfile::tempdir().unwrap();
        let store = SessionStore::new(state.path());
        let ws = Path::new("/w/ws");
        let id = Uuid::new_v4();
        let home = fresh(state.path(), ws);
        let project = home.path().join("projects").join(project_dir_name(ws));
        std::fs::create_dir_all(&project).unwrap();
        let secret = state.path().join("secret");
        std::fs::write(&secret, "host secret").unwrap();
        std::os::unix::fs::symlink(&secret, project.join(format!("{id}.jsonl"))).unwrap();
        assert!(home.keep_history(id, &store).is_err());
        std::fs::remove_file(project.join(format!("{id}.jsonl"))).unwrap();
        nix::unistd::mkfifo(
            &project.join(format!("{id}.jsonl")),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .unwrap();
        assert!(home.keep_history(id, &store).is_err());
        assert!(!state.path().join(format!("sessions/{id}.jsonl")).exists());
    }

    #[test]
    fn the_template_holds_what_the_cli_writes_on_first_start_with_ids_of_its_own() {
        let state = tempfile::tempdir().unwrap();
        let read = |home: &CliHome| -> serde_json::Value {
            serde_json::from_str(
                &std::fs::read_to_string(home.path().join(".claude.json")).unwrap(),
            )
            .unwrap()
        };
        let first = fresh(state.path(), Path::new("/w"));
        let second = fresh(state.path(), Path::new("/w"));
        let (a, b) = (read(&first), read(&second));
        assert_eq!(a["hasCompletedOnboarding"], true);
        assert_eq!(a["migrationVersion"], MIGRATION_VERSION);
        assert!(a["firstStartTime"].as_str().unwrap().ends_with('Z'));
        for plugin in BUILTIN_PLUGINS {
            assert_eq!(a["pluginUsage"][plugin]["usageCount"], 0);
        }
        for id in ["machineID", "userID"] {
            let text = a[id].as_str().unwrap();
            assert_eq!(text.len(), 64);
            assert!(text.bytes().all(|c| c.is_ascii_hexdigit()));
            assert_ne!(a[id], b[id], "{id} is the same in two runs");
        }
    }

    #[test]
    fn project_names_follow_the_clis_rule() {
        assert_eq!(
            project_dir_name(Path::new("/home/u/ws_sess")),
            "-home-u-ws-sess"
        );
    }
}
