//! The comparison of two git snapshots: which files changed, read from coder's two private
//! indexes (never from the trees the repository's objects name), each part (a repository
//! nested in the workspace) on its own, and for each changed file the check that the blobs
//! both sides name hash to their ids before their lines are counted or diffed.

use crate::workspace::git::{GitRepo, Snapshot};
use crate::workspace::git_index::Entry;
use crate::workspace::ignored::IgnoredChanges;

use std::path::Path;

use super::{
    ChangeStatus, Changes, DIFF_CAP, DiffText, FileChange, LedgerError, excluded, ignored_changes,
};

/// What changed in the repository's work tree since `before_snapshot` (git's view: the
/// index's `add -A` semantics, `exclude` left out), with the unified diff when `want_diff`,
/// and what changed under ignored paths since `ignored_since` when given. Keeps the after
/// snapshot's index as the next run's start.
pub(super) fn git_changes(
    repo: &GitRepo,
    before_snapshot: &Snapshot,
    unknown: &std::collections::BTreeSet<Vec<u8>>,
    want_diff: bool,
    exclude: &[String],
    ignored_since: Option<(&Path, i128)>,
) -> Result<(Changes, Option<DiffText>), LedgerError> {
    // The after snapshot and every diff of it share one CPU budget.
    let _cpu = crate::workspace::git::SharedCpuBudget::start();
    let after_snapshot = repo
        .snapshot_excluding(exclude)
        .map_err(|e| LedgerError(e.to_string()))?;
    crate::phases::mark("ledger.after_snapshot");
    // Taken once the agent's tree is gone: the next run starts from it, not from the
    // user's index, which the agent may have written.
    repo.keep_index();
    crate::phases::mark("ledger.index_kept");
    let snapshots = Snapshots {
        repo,
        before: before_snapshot,
        after: &after_snapshot,
        exclude,
    };
    let (all, (ignored, ignored_warning)) = snapshots.compare(unknown, want_diff, ignored_since);
    let all = all?;
    let mut warnings = all.warnings;
    if !all.untrusted.is_empty() {
        warnings.push(untrusted_warning(&all.untrusted));
    }
    warnings.extend(ignored_warning);
    let unseen = unseen_warnings(before_snapshot, &after_snapshot);
    let mut changes = Changes::from_list(merge_sides(all.list), false);
    changes.unseen = !unseen.is_empty();
    warnings.extend(unseen);
    changes.warnings.splice(0..0, warnings);
    changes.ignored = ignored;
    let diff = want_diff.then(|| DiffText::new(all.kept, all.total));
    Ok((changes, diff))
}

/// The two snapshots a run's changes are read from, and what both leave out.
struct Snapshots<'a> {
    repo: &'a GitRepo,
    before: &'a Snapshot,
    after: &'a Snapshot,
    exclude: &'a [String],
}

/// What [`ignored_changes`] gives: the changes under ignored paths and a warning.
type IgnoredSide = (Option<IgnoredChanges>, Option<String>);

impl Snapshots<'_> {
    /// The parts compared ([`compare_parts`]) while what changed under ignored paths is
    /// walked on a thread of its own (see [`super::ignored`]); on this thread when none can
    /// be started.
    fn compare(
        &self,
        unknown: &std::collections::BTreeSet<Vec<u8>>,
        want_diff: bool,
        ignored_since: Option<(&Path, i128)>,
    ) -> (Result<PartChanges, LedgerError>, IgnoredSide) {
        let walk_ignored = || {
            ignored_since.map_or((None, None), |since| {
                ignored_changes(self.repo, self.after, since, self.exclude)
            })
        };
        std::thread::scope(|s| {
            let walk = std::thread::Builder::new()
                .name("ledger-ignored".into())
                .spawn_scoped(s, walk_ignored);
            let all = compare_parts(
                self.repo,
                self.before,
                self.after,
                unknown,
                want_diff,
                self.exclude,
            );
            let ignored = match walk {
                Ok(walk) => walk.join().unwrap_or_else(|_| {
                    (
                        None,
                        Some("the walk of the ignored paths failed".to_owned()),
                    )
                }),
                Err(_) => walk_ignored(),
            };
            (all, ignored)
        })
    }
}

/// Warnings for what neither snapshot looked into: nested repositories past the cap (or
/// not the workspace's own directories) and directories without read permission. Empty
/// when both snapshots saw everything.
fn unseen_warnings(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut warnings = Vec::new();
    let skipped = before.nested_skipped.max(after.nested_skipped);
    if skipped > 0 {
        warnings.push(format!(
            "{skipped} repositories nested in the workspace were not looked into (more \
             than {}, or not a directory of the workspace itself): edits inside them are \
             not in `changes`",
            crate::workspace::git::MAX_NESTED
        ));
    }
    let unreadable = &after.unreadable;
    if !unreadable.is_empty() {
        let names: Vec<String> = unreadable
            .iter()
            .take(10)
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        warnings.push(format!(
            "{} directories of the workspace could not be read (no read permission): what \
             they hold is not in `changes` nor in `changes.ignored`: {}",
            unreadable.len(),
            names.join(", ")
        ));
    }
    warnings
}

/// The workspace, then each nested repository (see [`crate::workspace::git::Part`]), compared part
/// by part; a part on one side only is compared with the empty tree.
fn compare_parts(
    repo: &GitRepo,
    before_snapshot: &Snapshot,
    after_snapshot: &Snapshot,
    unknown: &std::collections::BTreeSet<Vec<u8>>,
    want_diff: bool,
    exclude: &[String],
) -> Result<PartChanges, LedgerError> {
    /// One side of part `part` (`""`: the workspace), if the snapshot has it.
    fn view<'a>(snapshot: &'a Snapshot, part: &[u8]) -> Option<(&'a str, &'a [Entry])> {
        if part.is_empty() {
            return Some((&snapshot.tree, &snapshot.entries));
        }
        snapshot
            .nested
            .iter()
            .find(|p| p.path == part)
            .map(|p| (p.tree.as_str(), p.entries.as_slice()))
    }
    let empty = repo.empty_tree();
    let mut parts: std::collections::BTreeSet<&[u8]> = std::collections::BTreeSet::new();
    parts.insert(b"");
    parts.extend(before_snapshot.nested.iter().map(|p| p.path.as_slice()));
    parts.extend(after_snapshot.nested.iter().map(|p| p.path.as_slice()));
    let none = std::collections::BTreeSet::new();
    let mut all = PartChanges::default();
    for part in parts {
        let absent: (&str, &[Entry]) = (&empty, &[]);
        let before = view(before_snapshot, part).unwrap_or(absent);
        let after = view(after_snapshot, part).unwrap_or(absent);
        let exclude_here: Vec<String> = exclude
            .iter()
            .filter_map(|x| crate::workspace::git::below(part, x.as_bytes()))
            .filter(|x| !x.is_empty())
            .map(|x| String::from_utf8_lossy(x).into_owned())
            .collect();
        let found = part_changes(
            repo,
            Part {
                path: part,
                before,
                after,
            },
            if part.is_empty() { unknown } else { &none },
            want_diff,
            &exclude_here,
            DIFF_CAP.saturating_sub(all.kept.len()),
        )?;
        all.list.extend(found.list);
        all.untrusted.extend(found.untrusted);
        all.warnings.extend(found.warnings);
        all.kept.extend(found.kept);
        all.total += found.total;
    }
    Ok(all)
}

/// One part of a git ledger's comparison: its path (`""`: the workspace) and each side's
/// tree and index entries (relative to the part).
pub(super) struct Part<'a> {
    path: &'a [u8],
    before: (&'a str, &'a [Entry]),
    after: (&'a str, &'a [Entry]),
}

/// What one part's comparison found (paths relative to the workspace).
#[derive(Default)]
struct PartChanges {
    list: Vec<FileChange>,
    /// Files whose diff and line counts are left out.
    untrusted: std::collections::BTreeSet<Vec<u8>>,
    warnings: Vec<String>,
    kept: Vec<u8>,
    total: u64,
}

/// One entry per path: a file that left one part for another (a directory that became,
/// or stopped being, a nested repository) is deleted from one and added to the other,
/// so modified, with both sides' lines.
fn merge_sides(mut list: Vec<FileChange>) -> Vec<FileChange> {
    list.sort_by(|a, b| a.path.cmp(&b.path));
    let mut merged: Vec<FileChange> = Vec::with_capacity(list.len());
    for change in list {
        match merged.last_mut() {
            Some(last) if last.path == change.path => {
                if last.status != change.status {
                    last.status = ChangeStatus::Modified;
                }
                last.lines_added += change.lines_added;
                last.lines_removed += change.lines_removed;
                last.binary |= change.binary;
            }
            _ => merged.push(change),
        }
    }
    merged
}

/// The files of `sides` (a part's changed files with their two index entries) whose
/// blobs fail their check against their names (`GitRepo::unverified_blobs`); all of
/// them, with a warning, when the check cannot run.
fn failing_blobs(
    repo: &GitRepo,
    part: &[u8],
    sides: &[(&Vec<u8>, Side, Side)],
    warnings: &mut Vec<String>,
) -> Result<std::collections::BTreeSet<Vec<u8>>, LedgerError> {
    let blobs: Vec<[u8; 32]> = sides
        .iter()
        .flat_map(|(_, old, new)| [old.blob(), new.blob()])
        .flatten()
        .collect();
    match repo.unverified_blobs(part, &blobs) {
        Ok(bad) => {
            let bad: std::collections::HashSet<[u8; 32]> = bad.into_iter().collect();
            Ok(sides
                .iter()
                .filter(|(_, old, new)| {
                    [old.blob(), new.blob()]
                        .into_iter()
                        .flatten()
                        .any(|oid| bad.contains(&oid))
                })
                .map(|(path, _, _)| (*path).clone())
                .collect())
        }
        Err(e) if e.was_killed() => Err(LedgerError(e.to_string())),
        Err(e) => {
            warnings.push(format!("cannot check the objects the diff would read: {e}"));
            Ok(sides.iter().map(|(path, _, _)| (*path).clone()).collect())
        }
    }
}

/// The files git's trees disagree on with coder's indexes (`sides`): another mode or
/// object than an index names, or a change the trees do not show at all (their objects
/// rewritten), leaving out `checked` (failed before git was asked).
fn disagreeing_with_trees(
    raw: &[crate::workspace::git::RawChange],
    sides: &[(&Vec<u8>, Side, Side)],
    checked: &[Vec<u8>],
) -> Vec<Vec<u8>> {
    let expected: std::collections::HashMap<&[u8], (&Side, &Side)> = sides
        .iter()
        .map(|(path, old, new)| (path.as_slice(), (old, new)))
        .collect();
    let mut found: Vec<Vec<u8>> = raw
        .iter()
        .filter(|r| {
            !expected.get(r.path.as_slice()).is_some_and(|(old, new)| {
                old.matches(r.old_mode, &r.old_oid) && new.matches(r.new_mode, &r.new_oid)
            })
        })
        .map(|r| r.path.clone())
        .collect();
    let shown: std::collections::HashSet<&[u8]> = raw.iter().map(|r| r.path.as_slice()).collect();
    found.extend(
        sides
            .iter()
            .map(|(path, _, _)| *path)
            .filter(|path| !shown.contains(path.as_slice()) && !checked.contains(*path))
            .cloned(),
    );
    found
}

/// The changes of one part, its diff within `cap` bytes (see [`git_changes`]).
fn part_changes(
    repo: &GitRepo,
    part: Part<'_>,
    unknown: &std::collections::BTreeSet<Vec<u8>>,
    want_diff: bool,
    exclude: &[String],
    cap: usize,
) -> Result<PartChanges, LedgerError> {
    let err = |e: crate::workspace::git::GitError| LedgerError(e.to_string());
    let (before, after) = (part.before.0, part.after.0);
    let (before_entries, after_entries) = (part.before.1, part.after.1);
    let full = |path: &[u8]| crate::workspace::git::join(part.path, path);
    // Files whose "before" is not known, left out of git's comparison when unchanged
    // since: reported as modified all the same (or deleted, gone now), no lines counted.
    let unknown: Vec<&Vec<u8>> = unknown.iter().filter(|p| !excluded(p, exclude)).collect();
    // What changed is read from the two indexes (coder's own), never from tree objects:
    // those may be the repository's, which the agent can rewrite. The "before" may hold
    // what the sandbox made while it was taken: out of both sides.
    let statuses = index_changes(before_entries, after_entries, exclude);
    if statuses.is_empty() && unknown.is_empty() {
        return Ok(PartChanges::default());
    }
    let Counted {
        mut counts,
        untrusted,
        warnings,
    } = counted(repo, &part, &statuses, exclude)?;
    let listed: std::collections::HashSet<&[u8]> =
        statuses.iter().map(|(_, path)| path.as_slice()).collect();
    // In both trees alike (a file gone now is in git's list, deleted).
    let unlisted: Vec<(u8, Vec<u8>)> = unknown
        .into_iter()
        .filter(|p| !listed.contains(p.as_slice()))
        .map(|p| (b'M', p.clone()))
        .collect();
    counts.extend(unlisted.iter().map(|(_, p)| (p.clone(), Some((0, 0)))));
    let list = statuses
        .into_iter()
        .chain(unlisted)
        .map(|(letter, path)| {
            file_change(letter, full(&path), counts.get(&path).copied().flatten())
        })
        .collect();
    let (kept, total) = if want_diff {
        let out: Vec<Vec<u8>> = untrusted.iter().cloned().collect();
        repo.patch(part.path, before, after, exclude, &out, cap)
            .map_err(err)?
    } else {
        (Vec::new(), 0)
    };
    Ok(PartChanges {
        list,
        untrusted: untrusted.iter().map(|p| full(p)).collect(),
        warnings,
        kept,
        total,
    })
}

/// The line counts of a part's changed files, as far as their objects can be trusted.
struct Counted {
    /// Lines added and removed per path (`None`: binary).
    counts: std::collections::HashMap<Vec<u8>, Option<(u64, u64)>>,
    /// Files whose objects failed the checks: no diff, no line counts (`(0, 0)`).
    untrusted: std::collections::BTreeSet<Vec<u8>>,
    /// What names them.
    warnings: Vec<String>,
}

/// Counts the lines of the changed files (`statuses`) of `part` with git's diff.
///
/// The objects the diff reads are the repository's, which the agent may rewrite: the
/// "before" blob of an edited file made to hold the edit's content hid it from the diff
/// and the line counts. Each blob coder's indexes name for a changed file is checked
/// against its name first; a file whose objects fail, or whose trees name other blobs
/// than the indexes (a rewritten tree), has no diff and no line counts, and a warning
/// names it.
fn counted(
    repo: &GitRepo,
    part: &Part<'_>,
    statuses: &[(u8, Vec<u8>)],
    exclude: &[String],
) -> Result<Counted, LedgerError> {
    let (before_entries, after_entries) = (part.before.1, part.after.1);
    let sides: Vec<(&Vec<u8>, Side, Side)> = statuses
        .iter()
        .map(|(_, path)| (path, side(before_entries, path), side(after_entries, path)))
        .collect();
    let mut warnings = Vec::new();
    let mut untrusted = failing_blobs(repo, part.path, &sides, &mut warnings)?;
    // git is not asked to read what failed (an object it cannot read fails the diff).
    let checked: Vec<Vec<u8>> = untrusted.iter().cloned().collect();
    let stat = match repo.diff_stat(part.path, part.before.0, part.after.0, exclude, &checked) {
        Ok(stat) => stat,
        Err(e) if e.was_killed() => return Err(LedgerError(e.to_string())),
        Err(e) => {
            // An object git cannot read (the agent wrote one that is not even an object).
            warnings.push(format!("cannot compare the snapshots' trees: {e}"));
            untrusted.extend(statuses.iter().map(|(_, path)| path.clone()));
            Default::default()
        }
    };
    untrusted.extend(disagreeing_with_trees(&stat.raw, &sides, &checked));
    let mut counts: std::collections::HashMap<Vec<u8>, Option<(u64, u64)>> =
        stat.counts.into_iter().collect();
    for path in &untrusted {
        counts.insert(path.clone(), Some((0, 0)));
    }
    Ok(Counted {
        counts,
        untrusted,
        warnings,
    })
}

/// One file's change: git's status letter, its full path, its line counts (`None`:
/// binary).
fn file_change(letter: u8, path: Vec<u8>, count: Option<(u64, u64)>) -> FileChange {
    let status = match letter {
        b'A' => ChangeStatus::Added,
        b'D' => ChangeStatus::Deleted,
        _ => ChangeStatus::Modified,
    };
    FileChange {
        path: String::from_utf8_lossy(&path).into_owned(),
        status,
        lines_added: count.map_or(0, |c| c.0),
        lines_removed: count.map_or(0, |c| c.1),
        binary: count.is_none(),
        quarantined_to: None,
    }
}

/// What one snapshot's index says of a file: its mode and object id, if it has the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Side(Option<(u32, [u8; 32])>);

impl Side {
    /// The blob the diff reads for this side, if any.
    fn blob(&self) -> Option<[u8; 32]> {
        self.0
            // A gitlink's id names a commit of another repository, not a blob here.
            .filter(|(mode, _)| *mode != crate::workspace::git::GITLINK_MODE)
            .map(|(_, oid)| oid)
    }

    /// Whether `git diff-tree --raw`'s mode and id for this side (zeros: absent) are the
    /// index's.
    fn matches(&self, mode: u32, oid: &[u8; 32]) -> bool {
        match self.0 {
            Some(side) => side == (mode, *oid),
            None => mode == 0 && oid.iter().all(|b| *b == 0),
        }
    }
}

/// The stage-0 entry of `path` in `entries`.
pub(super) fn side(entries: &[Entry], path: &[u8]) -> Side {
    Side(
        entries
            .binary_search_by(|e| (e.path.as_slice(), e.stage).cmp(&(path, 0)))
            .ok()
            .map(|i| (entries[i].mode, entries[i].oid)),
    )
}

/// The warning for files whose diff and line counts are left out.
fn untrusted_warning(paths: &std::collections::BTreeSet<Vec<u8>>) -> String {
    const NAMED: usize = 20;
    let mut named: Vec<String> = paths
        .iter()
        .take(NAMED)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if paths.len() > NAMED {
        named.push(format!("and {} more", paths.len() - NAMED));
    }
    format!(
        "the diff and line counts of {} changed file(s) are left out: the repository's \
         objects for them do not match what coder's snapshot recorded (an object in \
         .git/objects rewritten, or one git cannot read); they are still listed as \
         changed: {}",
        paths.len(),
        named.join(", ")
    )
}

/// `(status letter, path)` of every file whose index entry differs between two snapshots
/// (`A`dded, `D`eleted, `M`odified: content, mode or type), leaving out `exclude` (paths
/// relative to the workspace, with what is below them).
pub(super) fn index_changes(
    before: &[Entry],
    after: &[Entry],
    exclude: &[String],
) -> Vec<(u8, Vec<u8>)> {
    use std::cmp::Ordering;
    let excluded = |path: &[u8]| excluded(path, exclude);
    // Both sorted by path and stage: one walk side by side.
    let (mut old, mut new) = (before.iter().peekable(), after.iter().peekable());
    let mut list: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut push = |letter: u8, path: &Vec<u8>| {
        if !excluded(path) && list.last().is_none_or(|(_, last)| last != path) {
            list.push((letter, path.clone()));
        }
    };
    loop {
        let order = match (old.peek(), new.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(a), Some(b)) => (&a.path, a.stage).cmp(&(&b.path, b.stage)),
        };
        match order {
            Ordering::Less => {
                if let Some(gone) = old.next() {
                    let still = new.peek().is_some_and(|n| n.path == gone.path);
                    push(if still { b'M' } else { b'D' }, &gone.path);
                }
            }
            Ordering::Greater => {
                if let Some(came) = new.next() {
                    let was = before.binary_search_by(|e| e.path.cmp(&came.path)).is_ok();
                    push(if was { b'M' } else { b'A' }, &came.path);
                }
            }
            Ordering::Equal => {
                if let (Some(a), Some(b)) = (old.next(), new.next())
                    && (a.mode, a.oid) != (b.mode, b.oid)
                {
                    push(b'M', &a.path);
                }
            }
        }
    }
    list
}
