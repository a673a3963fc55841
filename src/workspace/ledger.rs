//! The change ledger: a snapshot of the workspace taken before the agent runs, compared
//! with one taken after, as the envelope's `changes` (and, asked for, `diff`).
//!
//! In a git work tree the snapshots are tree objects written through a private index
//! (see [`super::git`]): `git add -A` semantics, so `.gitignore` applies and the counts are
//! git's own (`diff-tree --numstat`). Elsewhere they are bounded stat+hash scans (see
//! [`super::scan`]), whose line counts are exact for added and deleted files and count
//! changed lines as a multiset for modified ones (lines that only moved are not counted).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::git::GitRepo;
use super::scan::{self, Caps, Key, Scan};

/// Files listed in `changes.files` at most (the totals count them all).
pub const MAX_LISTED: usize = 1000;
/// Bytes of `diff.unified` at most.
pub const DIFF_CAP: usize = 256 * 1024;

/// `"added" | "modified" | "deleted"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeStatus {
    Added,
    Modified,
    Deleted,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    pub status: ChangeStatus,
    pub lines_added: u64,
    pub lines_removed: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
}

/// The envelope's `changes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    pub files: Vec<FileChange>,
    pub files_changed: u64,
    pub lines_added: u64,
    pub lines_removed: u64,
    /// The file list, or the scan itself, was cut at its cap.
    pub truncated: bool,
}

impl Changes {
    fn from_list(mut list: Vec<FileChange>, scan_truncated: bool) -> Changes {
        list.sort_by(|a, b| a.path.cmp(&b.path));
        let mut changes = Changes {
            files_changed: list.len() as u64,
            lines_added: list.iter().map(|f| f.lines_added).sum(),
            lines_removed: list.iter().map(|f| f.lines_removed).sum(),
            truncated: scan_truncated || list.len() > MAX_LISTED,
            files: list,
        };
        changes.files.truncate(MAX_LISTED);
        changes
    }

    /// Every changed path, for scope checks (the listed ones; see `truncated`).
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(|f| f.path.as_str())
    }
}

/// The envelope's `diff` (`--return-diff`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffText {
    /// A unified diff, cut at [`DIFF_CAP`] bytes (at a line end) with a marker line.
    pub unified: String,
    /// The whole diff's size in bytes.
    pub bytes: u64,
    pub truncated: bool,
}

impl DiffText {
    fn new(mut kept: Vec<u8>, total: u64) -> DiffText {
        let truncated = total > kept.len() as u64;
        if truncated {
            if let Some(end) = kept.iter().rposition(|b| *b == b'\n') {
                kept.truncate(end + 1);
            }
            kept.extend_from_slice(
                format!("[diff truncated: {} of {total} bytes shown]\n", kept.len()).as_bytes(),
            );
        }
        DiffText {
            unified: String::from_utf8_lossy(&kept).into_owned(),
            bytes: total,
            truncated,
        }
    }
}

/// The "before" half of a ledger.
pub struct Ledger {
    workspace: PathBuf,
    before: Before,
}

enum Before {
    Git {
        repo: GitRepo,
        tree: String,
    },
    Plain {
        scan: Scan,
        key: Key,
        caps: Caps,
    },
    /// The snapshot failed; the reason goes into a warning.
    Failed(String),
}

/// Why no ledger could be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot measure the workspace's changes: {0}")]
pub struct LedgerError(String);

impl Ledger {
    /// Snapshots `workspace` now (blocking: a big tree takes a while; see BENCHMARKS.md).
    pub fn before(workspace: &Path) -> Ledger {
        Ledger::before_with(workspace, Caps::default())
    }

    pub fn before_with(workspace: &Path, caps: Caps) -> Ledger {
        let before = match GitRepo::discover(workspace) {
            Some(repo) => match repo.snapshot() {
                Ok(tree) => Before::Git { repo, tree },
                Err(e) => Before::Failed(e.to_string()),
            },
            None => {
                let key = Key::random();
                Before::Plain {
                    scan: scan::scan(workspace, &caps, &key),
                    key,
                    caps,
                }
            }
        };
        Ledger {
            workspace: workspace.to_path_buf(),
            before,
        }
    }

    /// `"git"` or `"scan"`: how the snapshots are taken.
    pub fn method(&self) -> &'static str {
        match self.before {
            Before::Git { .. } => "git",
            _ => "scan",
        }
    }

    /// Compares the workspace now with the snapshot; with `diff`, also the unified diff.
    /// `exclude`: paths (relative to the workspace) that are not the agent's doing, such
    /// as the sandbox's placeholders for absent protected names.
    pub fn changes(
        &self,
        diff: bool,
        exclude: &[String],
    ) -> Result<(Changes, Option<DiffText>), LedgerError> {
        match &self.before {
            Before::Git { repo, tree } => git_changes(repo, tree, diff, exclude),
            Before::Plain { scan, key, caps } => {
                let mut after = scan::scan(&self.workspace, caps, key);
                after
                    .entries
                    .retain(|path, _| !exclude.iter().any(|x| x.as_bytes() == path.as_slice()));
                Ok(plain_changes(scan, &after, diff))
            }
            Before::Failed(reason) => Err(LedgerError(reason.clone())),
        }
    }
}

fn git_changes(
    repo: &GitRepo,
    before: &str,
    want_diff: bool,
    exclude: &[String],
) -> Result<(Changes, Option<DiffText>), LedgerError> {
    let err = |e: super::git::GitError| LedgerError(e.to_string());
    let after = repo.snapshot_excluding(exclude).map_err(err)?;
    if after == before {
        let diff = want_diff.then(|| DiffText::new(Vec::new(), 0));
        return Ok((Changes::default(), diff));
    }
    let statuses = repo.name_status(before, &after).map_err(err)?;
    let counts: std::collections::HashMap<Vec<u8>, Option<(u64, u64)>> = repo
        .numstat(before, &after)
        .map_err(err)?
        .into_iter()
        .collect();
    let list = statuses
        .into_iter()
        .map(|(letter, path)| {
            let status = match letter {
                b'A' => ChangeStatus::Added,
                b'D' => ChangeStatus::Deleted,
                _ => ChangeStatus::Modified,
            };
            let count = counts.get(&path).copied().flatten();
            FileChange {
                path: String::from_utf8_lossy(&path).into_owned(),
                status,
                lines_added: count.map_or(0, |c| c.0),
                lines_removed: count.map_or(0, |c| c.1),
                binary: count.is_none(),
            }
        })
        .collect();
    let diff = if want_diff {
        let (kept, total) = repo.patch(before, &after, DIFF_CAP).map_err(err)?;
        Some(DiffText::new(kept, total))
    } else {
        None
    };
    Ok((Changes::from_list(list, false), diff))
}

fn plain_changes(before: &Scan, after: &Scan, want_diff: bool) -> (Changes, Option<DiffText>) {
    let mut list = Vec::new();
    let mut patch = Patch::default();
    // A cut scan covers the paths up to its last one: beyond the earlier cut, presence
    // says nothing.
    let limit = [before, after]
        .into_iter()
        .filter(|s| s.truncated)
        .filter_map(|s| s.last.as_deref())
        .min_by(|a, b| scan::walk_order(a, b));
    let paths: std::collections::BTreeSet<&Vec<u8>> =
        before.entries.keys().chain(after.entries.keys()).collect();
    for path in paths {
        if limit.is_some_and(|l| scan::walk_order(path, l).is_gt()) {
            continue;
        }
        let name = String::from_utf8_lossy(path).into_owned();
        let change = match (before.entries.get(path), after.entries.get(path)) {
            (None, Some(new)) => FileChange {
                path: name,
                status: ChangeStatus::Added,
                lines_added: new.lines.unwrap_or(0),
                lines_removed: 0,
                binary: new.binary,
            },
            (Some(old), None) => FileChange {
                path: name,
                status: ChangeStatus::Deleted,
                lines_added: 0,
                lines_removed: old.lines.unwrap_or(0),
                binary: old.binary,
            },
            (Some(old), Some(new)) if old.differs(new) => {
                let (added, removed) = match (&old.content, &new.content) {
                    (Some(a), Some(b)) => scan::line_delta(a, b),
                    // Too large to keep: the whole files' line counts.
                    _ => (new.lines.unwrap_or(0), old.lines.unwrap_or(0)),
                };
                FileChange {
                    path: name,
                    status: ChangeStatus::Modified,
                    lines_added: added,
                    lines_removed: removed,
                    binary: old.binary || new.binary,
                }
            }
            _ => continue,
        };
        if want_diff {
            patch.add(
                &change,
                before.entries.get(path).and_then(|e| e.content.as_deref()),
                after.entries.get(path).and_then(|e| e.content.as_deref()),
            );
        }
        list.push(change);
    }
    let truncated = before.truncated || after.truncated;
    let diff = want_diff.then(|| DiffText::new(patch.kept, patch.total));
    (Changes::from_list(list, truncated), diff)
}

/// A unified diff of whole-file hunks (a plain directory keeps no history to diff
/// against line by line), built within [`DIFF_CAP`].
#[derive(Default)]
struct Patch {
    kept: Vec<u8>,
    total: u64,
}

impl Patch {
    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = DIFF_CAP.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn add(&mut self, change: &FileChange, old: Option<&[u8]>, new: Option<&[u8]>) {
        let path = &change.path;
        let (from, to) = match change.status {
            ChangeStatus::Added => ("/dev/null".to_owned(), format!("b/{path}")),
            ChangeStatus::Deleted => (format!("a/{path}"), "/dev/null".to_owned()),
            ChangeStatus::Modified => (format!("a/{path}"), format!("b/{path}")),
        };
        self.push(format!("diff a/{path} b/{path}\n").as_bytes());
        let old_known = old.is_some() || change.status == ChangeStatus::Added;
        let new_known = new.is_some() || change.status == ChangeStatus::Deleted;
        if change.binary || !old_known || !new_known {
            let what = if change.binary { "Binary" } else { "Large" };
            self.push(format!("{what} files {from} and {to} differ\n").as_bytes());
            return;
        }
        let old = old.unwrap_or_default();
        let new = new.unwrap_or_default();
        self.push(format!("--- {from}\n+++ {to}\n").as_bytes());
        let (old_n, new_n) = (scan::count_lines(old), scan::count_lines(new));
        let start = |n: u64| u64::from(n > 0);
        self.push(
            format!(
                "@@ -{},{old_n} +{},{new_n} @@\n",
                start(old_n),
                start(new_n)
            )
            .as_bytes(),
        );
        for (sign, text) in [(b'-', old), (b'+', new)] {
            if text.is_empty() {
                continue;
            }
            let body = text.strip_suffix(b"\n").unwrap_or(text);
            for line in body.split(|b| *b == b'\n') {
                self.push(&[sign]);
                self.push(line);
                self.push(b"\n");
            }
            if !text.ends_with(b"\n") {
                self.push(b"\\ No newline at end of file\n");
            }
        }
    }
}

/// For messages: a path of the workspace as text.
pub fn display(path: &Path) -> String {
    String::from_utf8_lossy(path.as_os_str().as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_ledger_sees_added_modified_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep.txt"), "same\n").unwrap();
        std::fs::write(root.join("edit.txt"), "a\nb\nc\n").unwrap();
        std::fs::write(root.join("gone.txt"), "1\n2\n").unwrap();
        let ledger = Ledger::before(root);
        assert_eq!(ledger.method(), "scan");
        std::fs::write(root.join("edit.txt"), "a\nB\nc\nd\n").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/new.bin"), b"\0\x01").unwrap();
        let (changes, diff) = ledger.changes(true, &[]).unwrap();
        let summary: Vec<_> = changes
            .files
            .iter()
            .map(|f| {
                (
                    f.path.as_str(),
                    f.status,
                    f.lines_added,
                    f.lines_removed,
                    f.binary,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("edit.txt", ChangeStatus::Modified, 2, 1, false),
                ("gone.txt", ChangeStatus::Deleted, 0, 2, false),
                ("sub/new.bin", ChangeStatus::Added, 0, 0, true),
            ]
        );
        assert_eq!(
            (
                changes.files_changed,
                changes.lines_added,
                changes.lines_removed
            ),
            (3, 2, 3)
        );
        let diff = diff.unwrap();
        assert!(diff.unified.contains("+B\n"), "{}", diff.unified);
        assert!(
            diff.unified
                .contains("Binary files /dev/null and b/sub/new.bin differ")
        );
        assert!(!diff.truncated);
    }

    #[test]
    fn a_cut_diff_says_so() {
        let diff = DiffText::new(b"line 1\nline 2\nli".to_vec(), 1000);
        assert!(diff.truncated);
        assert_eq!(diff.bytes, 1000);
        assert!(
            diff.unified
                .ends_with("line 2\n[diff truncated: 14 of 1000 bytes shown]\n")
        );
    }
}
