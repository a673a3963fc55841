//! Plans (DESIGN §9): where `coder plan` puts the plan file, how it is made ready before
//! the run, and what of it goes into the envelope afterwards.
//!
//! The confinement itself (the plan file as the one writable file) is the sandbox's
//! (`Policy::grant_plan_file`); the prompt sections are `prompt`'s; the editor and the
//! command line are `commands::plan`'s. This module only places, creates and reads the
//! file, never following a symlink to do so.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::pipeline::envelope::Envelope;
use crate::pipeline::request::PlanRole;

/// How much of the plan the envelope carries (64 KiB); a longer plan is cut with a
/// marker giving its full size.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;

/// How many lines of the plan the run's record keeps for `coder runs show`.
pub const RECORD_LINES: usize = 20;

/// Why a plan file cannot be used for a plan run (a `config_error`).
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    #[error("cannot create the plans directory {}: {source}", dir.display())]
    PlansDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--plan-file {}: lies in git metadata; put the plan elsewhere", file.display())]
    InGitMetadata { file: PathBuf },
    #[error(
        "--plan-file {}: is a file git tracks in the workspace; a plan run changes nothing \
         of the project, so name a new or untracked file",
        file.display()
    )]
    Tracked { file: PathBuf },
    #[error("--plan-file {}: cannot create it: {source}", file.display())]
    Create {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The default plan file of run `run_id`: `<state>/plans/<run-id>.md`, its directory
/// created (owner-only) and canonical.
pub fn default_path(state_dir: &Path, run_id: &str) -> Result<PathBuf, PlanFileError> {
    let dir = state_dir.join("plans");
    let failed = |source| PlanFileError::PlansDir {
        dir: dir.clone(),
        source,
    };
    crate::pipeline::session::private_dir(&dir).map_err(failed)?;
    let canonical = std::fs::canonicalize(&dir).map_err(failed)?;
    Ok(canonical.join(format!("{run_id}.md")))
}

/// Makes the (canonical) plan file ready for a plan run in `workspace`: created empty, or
/// emptied when it exists and `fresh` (a new session writes a new plan; a resumed one
/// continues the plan it was writing). Inside the workspace only a file
/// git does not track may be the plan (nor anything in git metadata): the run would
/// otherwise change a project file the read-only workspace is meant to keep.
pub fn prepare(file: &Path, workspace: &Path, fresh: bool) -> Result<(), PlanFileError> {
    if let Ok(rel) = file.strip_prefix(workspace) {
        if rel.components().any(|c| c.as_os_str() == ".git") {
            return Err(PlanFileError::InGitMetadata {
                file: file.to_owned(),
            });
        }
        if file.exists() && tracked_by_git(workspace, rel) {
            return Err(PlanFileError::Tracked {
                file: file.to_owned(),
            });
        }
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(fresh)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .map(drop)
        .map_err(|source| PlanFileError::Create {
            file: file.to_owned(),
            source,
        })
}

/// Whether git tracks `rel` in the repository of `workspace` (false outside a repository
/// or without git). git runs as the ledger's does ([`crate::workspace::git::base_command`]:
/// a cleared environment, `core.fsmonitor` and the other settings that run a program
/// overridden, watched): the repository's config may include a work-tree file an earlier
/// run's agent wrote, and a `core.fsmonitor` it set there ran as coder, outside the
/// sandbox, when `git ls-files` read the index. When git cannot say (it was stopped), the
/// file counts as tracked: it is not emptied.
fn tracked_by_git(workspace: &Path, rel: &Path) -> bool {
    use crate::workspace::git::{self, GitError};
    let Some(program) = git::find_git(workspace) else {
        return false;
    };
    let mut cmd = git::base_command(&program, workspace);
    cmd.args(["ls-files", "--error-unmatch", "--"]).arg(rel);
    match git::output("ls-files", cmd) {
        Ok(_) => true,
        Err(GitError::Failed { stderr, .. }) => {
            !(stderr.contains("did not match") || stderr.contains("not a git repository"))
        }
        Err(GitError::Spawn(_)) => false,
        Err(_) => true,
    }
}

/// The plan's text as a capped string (lossy UTF-8), read without following a symlink and
/// only from a regular file with one link.
pub fn read(file: &Path) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)?;
    let meta = opened.metadata()?;
    // The plan coder made has one name; another link means the path was swapped for a
    // link to some other file, which is not read into the envelope.
    if !meta.is_file() || std::os::unix::fs::MetadataExt::nlink(&meta) != 1 {
        return Err(std::io::Error::other(
            "not the plan file coder made (not a regular file with one link)",
        ));
    }
    let size = meta.len();
    opened
        .take(MAX_PLAN_BYTES as u64 + 4)
        .read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    if size as usize > MAX_PLAN_BYTES {
        let head = crate::text::head_with_marker(&text, MAX_PLAN_BYTES).into_owned();
        // The marker counts what was read; give the file's real size.
        let cut = head.rfind("… [truncated:").unwrap_or(head.len());
        return Ok(format!(
            "{}… [truncated: {size} bytes in all]",
            &head[..cut]
        ));
    }
    Ok(text.into_owned())
}

/// Records the plan in `envelope` after the run: `plan_file` always, and for a plan run
/// the plan's text. A plan run whose agent answered but left the file empty gets its final
/// answer saved as the plan (weak models often answer with the plan instead of writing
/// it), with a warning saying so.
pub fn attach(envelope: &mut Envelope, role: &PlanRole, secrets: &crate::text::Secrets) {
    envelope.plan_file = Some(role.file().display().to_string());
    let PlanRole::Write { file } = role else {
        return;
    };
    let mut text = match read(file) {
        Ok(text) => text,
        Err(e) => {
            envelope
                .warnings
                .push(format!("cannot read the plan file {}: {e}", file.display()));
            return;
        }
    };
    if text.trim().is_empty() {
        match envelope.result.as_deref().filter(|r| !r.trim().is_empty()) {
            Some(answer) if envelope.success => {
                // Redacted like the envelope: the file is the user's, often committed.
                let answer = secrets.redact(answer).into_owned();
                let saved = std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(file)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, answer.as_bytes()));
                match saved {
                    Ok(()) => {
                        envelope.warnings.push(
                            "the agent did not write the plan file; its final answer was saved \
                             there as the plan"
                                .to_owned(),
                        );
                        text = crate::text::head_with_marker(&answer, MAX_PLAN_BYTES).into_owned();
                    }
                    Err(e) => envelope.warnings.push(format!(
                        "the plan file is empty and the answer could not be saved there: {e}"
                    )),
                }
            }
            _ => envelope
                .warnings
                .push("the plan file is empty: the agent wrote no plan".to_owned()),
        }
    }
    envelope.plan = Some(text);
}

/// The first [`RECORD_LINES`] lines of a plan, for the run's record.
pub fn head_lines(plan: &str) -> Vec<String> {
    plan.lines()
        .take(RECORD_LINES)
        .map(|l| crate::text::one_line(l, 300))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_plan_is_cut_with_its_full_size() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.md");
        std::fs::write(&file, "x".repeat(MAX_PLAN_BYTES + 100)).unwrap();
        let text = read(&file).unwrap();
        assert!(text.starts_with(&"x".repeat(MAX_PLAN_BYTES)));
        assert!(text.ends_with(&format!(
            "[truncated: {} bytes in all]",
            MAX_PLAN_BYTES + 100
        )));
    }

    #[test]
    fn a_symlinked_plan_is_not_read_or_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        std::fs::write(&target, "secret").unwrap();
        let link = dir.path().join("p.md");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(read(&link).is_err());
        assert!(prepare(&link, Path::new("/nonexistent-ws"), true).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "secret");
    }
}
