//! `--worktree` (DESIGN §10): the run happens in a fresh checkout of the repository's HEAD
//! (or `--worktree-base REF`) under `<state>/worktrees/<run-id>`, on a branch
//! `coder/<run-id>`; at the end coder commits everything on that branch, brings the branch
//! into the repository, and removes the directory. Parallel runs on one repository never
//! see each other's edits, and the user's checkout is never touched.
//!
//! **Why not `git worktree add`.** A linked worktree's git dir lives in the repository
//! (`.git/worktrees/<id>`) and shares its object store, refs and config. For the agent to
//! commit there it would need write access to `.git/objects` (where it could replace any
//! existing loose object of the user's history: Landlock cannot allow "create" without
//! "remove" in a directory git renames into), to `.git/refs/heads/coder/` (every other
//! coder branch lives in the same directory) and to `packed-refs`. So the checkout is
//! instead a *private repository*: `git init` in the run's directory, its object store
//! borrowing the repository's through `objects/info/alternates` (read-only), its only
//! branch `coder/<run-id>`. The agent's sandbox grants that directory (the workspace, whose
//! `.git/config`, `hooks/`, `info/` the sandbox keeps read-only as in any workspace) and
//! *reads* the repository's object directory; nothing of the repository is writable. The
//! paths come from coder's own `git rev-parse` before the run, never from a `.git` file.
//!
//! **Finishing** runs as coder, outside the sandbox, over a directory the agent wrote, so
//! it trusts nothing in it: git runs through [`super::git::base_command`] (no hooks, no
//! fsmonitor, no global or system config, `protocol.allow=never` but for `file`), and the
//! checkout's git dir is not used at all: the commit is made from the checkout's *files*,
//! on top of the base, in a fresh bare repository of coder's own beside it (its one
//! alternate the repository's object directory). So a `.git/objects` or `.git/refs` the
//! agent replaced by a symlink is never written through, and a ref or alternates file it
//! pointed into another repository cannot pull that repository's history into the user's.
//! The price: commits the agent made itself are squashed into coder's one commit. The
//! branch reaches the repository with no transport: a pack that bare repository writes,
//! read by the repository's `index-pack` (every object hashed again), and `update-ref` of
//! exactly `refs/heads/coder/<run-id>` (a `git fetch` took the repository's URL rewrites,
//! and an included work-tree config turned it into `ext::` and ran a command as coder). The directory is removed on every path that returns;
//! leftovers of a SIGKILLed coder (its `<run-id>.pid` names a dead process) are removed
//! by the next `--worktree` run ([`prune_stale`]).
//!
//! **Uncommitted changes** in the user's checkout are *not* in the worktree (it starts
//! from a commit); the report's `note` says so and names how many paths differ.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::config::run_dirs::{self, RunLock};
use std::process::{Command, Stdio};

use serde::Serialize;

use super::git::{GitError, base_command, output};

/// Commits coder makes carry this identity unless the repository's config has one.
pub const CODER_NAME: &str = "coder";
pub const CODER_EMAIL: &str = "coder@localhost";

/// Repositories the agent may make inside its checkout (each staged as plain files at the
/// finish, [`Worktree::stage`]); more make the commit fail, and the checkout is kept.
const MAX_NESTED_REPOS: usize = 256;

/// Where the worktrees live, under coder's state directory.
pub const WORKTREES_DIR: &str = "worktrees";

/// The envelope's `worktree` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorktreeReport {
    pub branch: String,
    /// The commit the branch started from, and the name it was given by.
    pub base: String,
    pub base_ref: String,
    /// The branch's final commit; `null` when the run changed nothing.
    pub commit: Option<String>,
    /// What the user should know (uncommitted changes left out, a failed finish).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The checkout, kept with the run's work when it could not be committed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<PathBuf>,
}

/// Where something the end-of-run guard moved aside inside a `--worktree` checkout is
/// once the checkout is removed (the guard's report names the checkout's paths).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AfterCheckout {
    /// `COMMIT:PATH`, as `git show` takes it: committed on the run's branch under its
    /// quarantine name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_commit: Option<String>,
    /// Not committed (it was in a git dir, or ignored) and removed with the checkout.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("--worktree: {0} is not inside a git work tree")]
    NotARepo(PathBuf),
    #[error("--worktree: the repository at {0} has no commit yet (unborn HEAD); commit once first")]
    Unborn(PathBuf),
    #[error("--worktree-base {0:?} names no commit in the repository")]
    MissingRef(String),
    #[error("--worktree: git is not installed (not found on PATH)")]
    NoGit,
    #[error(
        "--worktree: {0} is not a directory in the checkout of {1} (the commit has a symlink, \
         a file or nothing there); run from a directory the commit has, or the repository's \
         top level"
    )]
    NotADirectory(PathBuf, String),
    #[error("--worktree: {0}")]
    Git(#[from] GitError),
    #[error("--worktree: {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WorktreeError + use<> {
    let path = path.to_path_buf();
    move |source| WorktreeError::Io { what, path, source }
}

/// A run's private checkout. Dropping it removes the directory.
#[derive(Debug)]
pub struct Worktree {
    program: PathBuf,
    /// The repository's top level and common git dir (absolute, from `rev-parse`).
    repo_top: PathBuf,
    repo_git_dir: PathBuf,
    /// `<state>/worktrees/<run-id>` and its `.git`.
    path: PathBuf,
    git_dir: PathBuf,
    /// The workspace relative to the repository's top level.
    prefix: PathBuf,
    branch: String,
    base: String,
    base_ref: String,
    note: Option<String>,
    removed: bool,
    /// The lock on `<path>.pid`, held while the run lives ([`prune_stale`]).
    _lock: RunLock,
}

impl Worktree {
    /// Makes the checkout for the run `run_id` of `workspace` (a directory in a git work
    /// tree) from `base_ref` (default `HEAD`).
    pub fn create(
        workspace: &Path,
        state_dir: &Path,
        run_id: &str,
        base_ref: Option<&str>,
    ) -> Result<Worktree, WorktreeError> {
        let program = find_git(workspace).ok_or(WorktreeError::NoGit)?;
        let mut probe = base_command(&program, workspace);
        probe.args([
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--git-common-dir",
            "--show-prefix",
        ]);
        let text = super::git::output_of_config("rev-parse", probe)
            .map_err(|_| WorktreeError::NotARepo(workspace.to_path_buf()))?;
        let text = String::from_utf8_lossy(&text).into_owned();
        let mut lines = text.lines();
        let (Some(top), Some(common)) = (lines.next(), lines.next()) else {
            return Err(WorktreeError::NotARepo(workspace.to_path_buf()));
        };
        let prefix = PathBuf::from(lines.next().unwrap_or(""));
        let repo_top = PathBuf::from(top);
        let repo_git_dir = PathBuf::from(common);

        let base_ref = base_ref.unwrap_or("HEAD").to_owned();
        let base = resolve_commit(&program, &repo_top, &repo_git_dir, &base_ref)?;
        let dirty = dirty_paths(&program, &repo_top, &repo_git_dir);

        let root = state_dir.join(WORKTREES_DIR);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .map_err(io("cannot create", &root))?;
        prune_stale(&root);
        let path = root.join(run_id);
        // Locked before the checkout exists: a coder in another PID namespace, for which
        // the PID in the file names nothing, finds the lock held ([`prune_stale`]).
        let lock = RunLock::take_at(pid_file(&path)).map_err(io("cannot lock", &path))?;
        let _ = fs::write(pid_file(&path), std::process::id().to_string());
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(io("cannot create", &path))?;
        let branch = format!("coder/{run_id}");
        let mut tree = Worktree {
            program,
            repo_top,
            repo_git_dir,
            git_dir: path.join(".git"),
            path,
            prefix,
            branch,
            base,
            base_ref,
            note: None,
            removed: false,
            _lock: lock,
        };
        tree.note = match dirty {
            Some(0) => None,
            Some(n) => Some(format!(
                "the worktree starts from {} ({}); {n} uncommitted path(s) in {} are not in it",
                tree.base_ref,
                &tree.base[..tree.base.len().min(12)],
                tree.repo_top.display()
            )),
            None => Some("could not tell whether the checkout has uncommitted changes".into()),
        };
        tree.populate()?;
        Ok(tree)
    }

    /// The workspace's place in the checkout must be a directory reached through no
    /// symlink. The base commit's tree decides what is there, and whoever wrote that commit
    /// (an earlier agent committing in the user's repository, the author of a branch under
    /// review) could put a symlink at the prefix (`sub -> /elsewhere`): the run's workspace,
    /// and with it the sandbox's write grant, would be wherever it points.
    fn check_prefix(&self) -> Result<(), WorktreeError> {
        let refuse = || WorktreeError::NotADirectory(self.prefix.clone(), self.base_ref.clone());
        let mut at = self.path.clone();
        for part in self.prefix.components() {
            match part {
                std::path::Component::Normal(name) => at.push(name),
                std::path::Component::CurDir => continue,
                _ => return Err(refuse()),
            }
            if !fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_dir()) {
                return Err(refuse());
            }
        }
        Ok(())
    }

    /// The private repository, checked out at the base, and the branch created in the
    /// user's repository (so a failed run still leaves it).
    fn populate(&self) -> Result<(), WorktreeError> {
        let mut init = base_command(&self.program, &self.path);
        init.args(["init", "-q", "--template=", "--initial-branch"])
            .arg(&self.branch)
            .arg(&self.path);
        output("init", init)?;
        self.write_config()?;
        let alternates = self.git_dir.join("objects/info/alternates");
        fs::create_dir_all(self.git_dir.join("objects/info"))
            .map_err(io("cannot create", &alternates))?;
        let mut line = self.repo_git_dir.join("objects").into_os_string();
        line.push("\n");
        fs::write(&alternates, line.as_encoded_bytes()).map_err(io("cannot write", &alternates))?;
        let full = format!("refs/heads/{}", self.branch);
        self.private(&["update-ref", &full, &self.base])?;
        self.private(&["reset", "-q", "--hard", &full])?;
        self.check_prefix()?;
        // In the user's repository: must not exist yet (`""` as the old value).
        self.in_repo(&["update-ref", &full, &self.base, ""])?;
        Ok(())
    }

    /// The private repository's config, always coder's own text.
    fn write_config(&self) -> Result<(), WorktreeError> {
        let path = self.git_dir.join("config");
        let _ = fs::remove_file(&path);
        fs::write(
            &path,
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n",
        )
        .map_err(io("cannot write", &path))
    }

    /// The directory the agent works in (the workspace's place in the checkout).
    pub fn workspace(&self) -> PathBuf {
        self.path.join(&self.prefix)
    }

    /// The workspace the run was asked for (its place in the user's own work tree). At the
    /// repository's top the prefix is empty, and `join("")` would end the path in a `/`
    /// (shown in the resume hint as `--cd /repo/`): the components are joined instead.
    pub fn origin(&self) -> PathBuf {
        self.repo_top.join(&self.prefix).components().collect()
    }

    /// The checkout's root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the agent must be able to read besides the checkout: the repository's object
    /// directory (the checkout's alternate).
    pub fn read_grants(&self) -> Vec<PathBuf> {
        vec![self.repo_git_dir.join("objects")]
    }

    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Commits every change on the branch (`message`, the repository's identity or
    /// coder's), brings the branch into the repository, removes the directory (kept, and
    /// named in the note, when the commit fails).
    pub fn finish(mut self, message: &str) -> WorktreeReport {
        let report = self.commit(message);
        self.remove();
        report
    }

    /// Where `moved_to`, a path the guard moved something to, is once the checkout is
    /// removed; `None` when it is not in the checkout or the checkout is kept.
    pub fn after_checkout(
        &self,
        report: &WorktreeReport,
        moved_to: &Path,
    ) -> Option<AfterCheckout> {
        if report.kept.is_some() {
            return None;
        }
        let canonical = fs::canonicalize(&self.path).ok();
        let rel = moved_to
            .strip_prefix(&self.path)
            .ok()
            .or_else(|| moved_to.strip_prefix(canonical.as_ref()?).ok())?;
        let committed = report.commit.as_deref().filter(|commit| {
            let mut cmd = base_command(&self.program, &self.repo_top);
            cmd.arg(dir_arg("--git-dir=", &self.repo_git_dir))
                .args([
                    "--literal-pathspecs",
                    "ls-tree",
                    "-z",
                    "--name-only",
                    commit,
                    "--",
                ])
                .arg(rel);
            output("ls-tree", cmd).is_ok_and(|listed| !listed.is_empty())
        });
        Some(match committed {
            Some(commit) => AfterCheckout {
                in_commit: Some(format!("{commit}:{}", rel.display())),
                removed: false,
            },
            None => AfterCheckout {
                in_commit: None,
                removed: true,
            },
        })
    }

    /// Deletes the run's branch from the repository while it still points at the base
    /// (nothing was committed on it); whether it is gone.
    pub fn discard_branch(&self) -> bool {
        let full = format!("refs/heads/{}", self.branch);
        self.in_repo(&["update-ref", "-d", &full, &self.base])
            .is_ok()
    }

    /// [`Self::finish`] but the removal, which dropping the checkout does.
    pub fn commit(&mut self, message: &str) -> WorktreeReport {
        let mut report = WorktreeReport {
            branch: self.branch.clone(),
            base: self.base.clone(),
            base_ref: self.base_ref.clone(),
            commit: None,
            note: self.note.clone(),
            kept: None,
        };
        match self.commit_all(message) {
            Ok(commit) => report.commit = commit,
            Err(e) => {
                // The run's work is nowhere else: the checkout stays (without its
                // `.pid`, so no later run prunes it) and the note says where.
                let text = format!(
                    "the run's changes could not be committed: {e}; the checkout is kept at \
                     {} with the run's work: copy what you need, then remove it",
                    self.path.display()
                );
                report.note = Some(match report.note.take() {
                    Some(n) => format!("{n}; {text}"),
                    None => text,
                });
                let _ = fs::remove_file(pid_file(&self.path));
                self.removed = true;
                report.kept = Some(self.path.clone());
            }
        }
        report
    }

    fn commit_all(&self, message: &str) -> Result<Option<String>, WorktreeError> {
        let full = format!("refs/heads/{}", self.branch);
        // Nothing of the checkout's git dir is read: its refs and object directories are
        // the agent's, and a ref or `objects/info/alternates` there may lead into another
        // repository coder can read and the agent cannot (a symlinked ref naming that
        // repository's commit would pull its history into the user's). The commit is made
        // from the checkout's *files* only, on top of the base, in a fresh bare repository
        // of coder's own whose one alternate is the repository's object directory. The
        // agent's own commits are thereby squashed into this one.
        let scratch = pid_file(&self.path).with_extension("finish");
        force_remove(&scratch);
        let mut init = base_command(&self.program, &self.repo_top);
        init.args(["init", "-q", "--bare", "--template="])
            .arg(&scratch);
        output("init", init)?;
        let alternates = scratch.join("objects/info/alternates");
        let mut text = self.repo_git_dir.join("objects").into_os_string();
        text.push("\n");
        let _ = fs::create_dir_all(scratch.join("objects/info"));
        fs::write(&alternates, text.as_encoded_bytes()).map_err(io("cannot write", &alternates))?;
        let result = self.commit_in(&scratch, &full, &self.base, message);
        force_remove(&scratch);
        result
    }

    fn commit_in(
        &self,
        scratch: &Path,
        full: &str,
        parent: &str,
        message: &str,
    ) -> Result<Option<String>, WorktreeError> {
        let git = |args: &[&str], env: &[(&str, &str)]| -> Result<String, WorktreeError> {
            let mut cmd = base_command(&self.program, &self.path);
            cmd.arg(dir_arg("--git-dir=", scratch))
                .arg(dir_arg("--work-tree=", &self.path))
                .env("GIT_INDEX_FILE", scratch.join("index"))
                .args(args);
            for (k, v) in env {
                cmd.env(k, v);
            }
            Ok(String::from_utf8_lossy(&output("git", cmd)?)
                .trim()
                .to_owned())
        };
        // The index starts as the base's tree, so what the checkout does not show as a
        // file stays as the base has it: a submodule (an empty directory in the checkout)
        // and a tracked file that `.gitignore` matches. From an empty index, `add -A` left
        // both out and the branch's commit deleted them.
        git(&["read-tree", parent], &[])?;
        let mut budget = MAX_NESTED_REPOS;
        self.stage(scratch, &self.path, &scratch.join("index"), &mut budget)?;
        let tree = git(&["write-tree"], &[])?;
        let parent_tree = git(&["rev-parse", &format!("{parent}^{{tree}}")], &[])?;
        let commit = if parent_tree == tree {
            parent.to_owned()
        } else {
            let (name, email) = self.identity();
            git(
                &["commit-tree", &tree, "-p", parent, "-m", message],
                &[
                    ("GIT_AUTHOR_NAME", &name),
                    ("GIT_AUTHOR_EMAIL", &email),
                    ("GIT_COMMITTER_NAME", &name),
                    ("GIT_COMMITTER_EMAIL", &email),
                ],
            )?
        };
        if commit == self.base {
            return Ok(None);
        }
        self.import(scratch, full, &commit, parent)?;
        Ok(Some(commit))
    }

    /// Stages every change under `top` (the checkout, or a repository the agent made in
    /// it) into `index`, as `git add -A` does, but for the repositories the agent made in
    /// it (`git init sub`, a clone, a scaffolding tool's `git init`): their files are
    /// staged as the checkout's own files. `add -A` refused one without a commit (the run's
    /// whole work was then not committed and was removed with the checkout) and took one
    /// with a commit as a gitlink to a commit the repository does not have (its files were
    /// lost with the checkout).
    fn stage(
        &self,
        scratch: &Path,
        top: &Path,
        index: &Path,
        budget: &mut usize,
    ) -> Result<(), WorktreeError> {
        let git = |args: &[&std::ffi::OsStr]| -> Result<Vec<u8>, WorktreeError> {
            let mut cmd = base_command(&self.program, top);
            cmd.arg(dir_arg("--git-dir=", scratch))
                .arg(dir_arg("--work-tree=", top))
                .env("GIT_INDEX_FILE", index)
                .args(args);
            Ok(output("git", cmd)?)
        };
        let os = |s: &'static str| std::ffi::OsStr::new(s);
        let untracked = git(&[
            os("ls-files"),
            os("-z"),
            os("--others"),
            os("--exclude-standard"),
        ])?;
        // An untracked repository is listed as its directory, `sub/`, never entered.
        let nested: Vec<&[u8]> = untracked
            .split(|b| *b == 0)
            .filter(|p| p.ends_with(b"/"))
            .collect();
        let specs = scratch.join("pathspecs");
        let mut text = b".\0".to_vec();
        for dir in &nested {
            text.extend_from_slice(b":(exclude,literal)");
            text.extend_from_slice(dir);
            text.push(0);
        }
        fs::write(&specs, &text).map_err(io("cannot write", &specs))?;
        let from = dir_arg("--pathspec-from-file=", &specs);
        git(&[os("add"), os("-A"), &from, os("--pathspec-file-nul")])?;
        for dir in nested {
            *budget = budget.checked_sub(1).ok_or_else(|| {
                WorktreeError::Git(GitError::Failed {
                    what: "add",
                    stderr: format!(
                        "the run made more than {MAX_NESTED_REPOS} git repositories in the checkout"
                    ),
                })
            })?;
            let name = std::ffi::OsStr::from_bytes(&dir[..dir.len() - 1]);
            let inner = scratch.join(format!("index-{budget}"));
            self.stage(scratch, &top.join(name), &inner, budget)?;
            let mut write = base_command(&self.program, top);
            write
                .arg(dir_arg("--git-dir=", scratch))
                .env("GIT_INDEX_FILE", &inner)
                .arg("write-tree");
            let tree = String::from_utf8_lossy(&output("write-tree", write)?)
                .trim()
                .to_owned();
            let _ = fs::remove_file(&inner);
            let mut read = base_command(&self.program, top);
            let mut prefix = OsString::from("--prefix=");
            prefix.push(std::ffi::OsStr::from_bytes(dir));
            read.arg(dir_arg("--git-dir=", scratch))
                .arg(dir_arg("--work-tree=", top))
                .env("GIT_INDEX_FILE", index)
                .arg("read-tree")
                .arg(prefix)
                .arg(&tree);
            output("read-tree", read)?;
        }
        Ok(())
    }

    /// Brings `commit` (made in `scratch` on top of `parent`) into the repository as
    /// `full`, with no transport: a pack of what it has that `parent` has not, written by
    /// `scratch`'s git, read by the repository's `index-pack` (which hashes every object
    /// again), then `update-ref`. This was a `git fetch` from `scratch`, and a fetch
    /// rewrites its URL by the repository's `url.<base>.insteadOf`, read with the
    /// config's includes: a work-tree file the config includes, written by an earlier
    /// run's agent, turned the fetch into `ext::sh -c …` (allowed by its own
    /// `protocol.ext.allow`, which wins over the command line's `protocol.allow=never`)
    /// and ran the agent's command as coder, outside the sandbox.
    fn import(
        &self,
        scratch: &Path,
        full: &str,
        commit: &str,
        parent: &str,
    ) -> Result<(), WorktreeError> {
        use std::io::Write;
        let pack_path = scratch.join("import.pack");
        let pack = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&pack_path)
            .map_err(io("cannot create", &pack_path))?;
        let mut cmd = base_command(&self.program, &self.path);
        cmd.arg(dir_arg("--git-dir=", scratch))
            .args(["pack-objects", "--revs", "--stdout", "-q"])
            .stdin(Stdio::piped())
            .stdout(pack)
            .stderr(Stdio::piped());
        let revs = format!("{commit}\n^{parent}\n");
        let out = super::git::watched_run(&mut cmd, |mut child| {
            if let Some(mut stdin) = child.stdin.take() {
                // A git that stopped reading says why on stderr and in its status.
                let _ = stdin.write_all(revs.as_bytes());
            }
            child.wait_with_output()
        })?;
        if !out.status.success() {
            return Err(GitError::Failed {
                what: "pack-objects",
                stderr: crate::text::one_line(&String::from_utf8_lossy(&out.stderr), 300),
            }
            .into());
        }
        let pack = fs::File::open(&pack_path).map_err(io("cannot open", &pack_path))?;
        let mut index = base_command(&self.program, &self.repo_top);
        index
            .arg(dir_arg("--git-dir=", &self.repo_git_dir))
            .args(["index-pack", "--stdin"])
            .stdin(pack);
        output("index-pack", index)?;
        let _ = fs::remove_file(&pack_path);
        self.in_repo(&["update-ref", full, commit])?;
        Ok(())
    }

    /// `user.name`/`user.email` as the repository (with the user's global config) has
    /// them, else coder's. Reading config runs nothing; it is watched all the same
    /// ([`super::git::config_output`], stopped after a while): the repository's config is read with its
    /// includes, and a work-tree file it includes, made a symlink to `/proc/self/fd/1`
    /// during the run (by another run's agent in that checkout), held the finish forever.
    fn identity(&self) -> (String, String) {
        let get = |key: &str| {
            let mut cmd = Command::new(&self.program);
            cmd.arg(dir_arg("--git-dir=", &self.repo_git_dir))
                .args(["config", "--get", key])
                .env_remove("GIT_DIR")
                .env_remove("GIT_CONFIG")
                .env_remove("GIT_CONFIG_PARAMETERS")
                .env_remove("GIT_CONFIG_COUNT")
                .stdin(Stdio::null());
            let out = super::git::config_output(&mut cmd).ok()?;
            let v = String::from_utf8(out.stdout).ok()?.trim().to_owned();
            (out.status.success() && !v.is_empty()).then_some(v)
        };
        match (get("user.name"), get("user.email")) {
            (Some(n), Some(e)) => (n, e),
            _ => (CODER_NAME.to_owned(), CODER_EMAIL.to_owned()),
        }
    }

    fn private_command(&self) -> Command {
        let mut cmd = base_command(&self.program, &self.path);
        cmd.arg(dir_arg("--git-dir=", &self.git_dir))
            .arg(dir_arg("--work-tree=", &self.path));
        cmd
    }

    fn private(&self, args: &[&str]) -> Result<String, WorktreeError> {
        let mut cmd = self.private_command();
        cmd.args(args);
        Ok(String::from_utf8_lossy(&output("git", cmd)?).into_owned())
    }

    fn in_repo(&self, args: &[&str]) -> Result<String, WorktreeError> {
        let mut cmd = base_command(&self.program, &self.repo_top);
        cmd.arg(dir_arg("--git-dir=", &self.repo_git_dir))
            .args(args);
        Ok(String::from_utf8_lossy(&output("git", cmd)?).into_owned())
    }

    fn remove(&mut self) {
        if !self.removed {
            force_remove(&self.path);
            let _ = fs::remove_file(pid_file(&self.path));
            self.removed = true;
        }
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        self.remove();
    }
}

fn dir_arg(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(flag);
    arg.push(path);
    arg
}

fn find_git(cwd: &Path) -> Option<PathBuf> {
    super::git::find_git(cwd)
}

fn resolve_commit(
    program: &Path,
    top: &Path,
    git_dir: &Path,
    name: &str,
) -> Result<String, WorktreeError> {
    if name.starts_with('-') || name.is_empty() {
        return Err(WorktreeError::MissingRef(name.to_owned()));
    }
    let rev_parse = |spec: &str| {
        let mut cmd = base_command(program, top);
        cmd.arg(dir_arg("--git-dir=", git_dir)).args([
            "rev-parse",
            "--verify",
            "-q",
            "--end-of-options",
            spec,
        ]);
        output("rev-parse", cmd).map(|text| String::from_utf8_lossy(&text).trim().to_owned())
    };
    // The name alone first, then its commit: `NAME^{commit}` would be read as part of a
    // name that takes the rest of the line (`:/fix the parser` searches commit messages).
    let commit = rev_parse(name).and_then(|object| rev_parse(&format!("{object}^{{commit}}")));
    match commit {
        Ok(commit) => Ok(commit),
        Err(_) if name == "HEAD" => Err(WorktreeError::Unborn(top.to_path_buf())),
        Err(_) => Err(WorktreeError::MissingRef(name.to_owned())),
    }
}

/// How many paths `git status` lists in the user's checkout; `None` when it fails.
/// How many paths `git status` says differ in the user's checkout; `None` when it cannot
/// tell. `status` may run the clean filter of a file whose stat data changed, and the
/// repository's config may include a work-tree file an earlier run's agent wrote: every
/// filter driver the config defines is switched off as the ledger does
/// ([`super::git::filter_overrides`]), or a driver the agent defined there ran as coder,
/// outside the sandbox, when the next `--worktree` run began. Submodules are not looked
/// into (`status` would run git in each, with that one's config).
fn dirty_paths(program: &Path, top: &Path, git_dir: &Path) -> Option<usize> {
    let mut list = base_command(program, top);
    list.arg(dir_arg("--git-dir=", git_dir));
    let overrides = super::git::filter_overrides(list).ok()?;
    let mut cmd = base_command(program, top);
    for setting in &overrides {
        cmd.arg("-c").arg(setting);
    }
    cmd.arg(dir_arg("--git-dir=", git_dir))
        .arg(dir_arg("--work-tree=", top))
        .args([
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=normal",
            "--ignore-submodules=all",
        ]);
    let out = output("status", cmd).ok()?;
    Some(out.split(|b| *b == 0).filter(|p| !p.is_empty()).count())
}

/// Removes a tree the agent may have made hard to remove (see [`run_dirs::remove_tree`]).
pub fn force_remove(path: &Path) {
    run_dirs::remove_tree(path);
}

/// Removes worktrees left by coders that died (SIGKILL): a directory whose `<name>.pid`
/// beside it is locked by no process and names no live one ([`run_dirs::is_live`]).
/// Directories without that file are left alone.
pub fn prune_stale(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let mut name = entry.file_name();
        name.push(".pid");
        let pid_file = root.join(name);
        let Ok(text) = fs::read_to_string(&pid_file) else {
            continue;
        };
        let Ok(pid) = text.trim().parse::<u32>() else {
            continue;
        };
        if !run_dirs::is_live(&pid_file, pid) {
            force_remove(&entry.path());
            let _ = fs::remove_file(&pid_file);
        }
    }
}

fn pid_file(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".pid");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn stale_checkouts_of_dead_coders_are_pruned_and_live_ones_kept() {
        let root = std::env::temp_dir().join(format!("coder-wt-{}", uuid::Uuid::new_v4()));
        let dead = root.join("20260101T000000.000001Z-dead");
        let live = root.join("20260101T000000.000002Z-live");
        let unknown = root.join("20260101T000000.000003Z-none");
        for dir in [&dead, &live, &unknown] {
            fs::create_dir_all(dir.join("sub")).unwrap();
        }
        // A directory the agent made unremovable as it stood.
        fs::set_permissions(dead.join("sub"), fs::Permissions::from_mode(0o000)).unwrap();
        // Far above any pid_max: never a live process.
        fs::write(pid_file(&dead), "2147483000").unwrap();
        fs::write(pid_file(&live), std::process::id().to_string()).unwrap();
        prune_stale(&root);
        assert!(!dead.exists() && !pid_file(&dead).exists());
        assert!(live.exists() && unknown.exists());
        force_remove(&root);
        assert!(!root.exists());
    }
}
