//! The comparison of two plain scans (a workspace outside git): added, deleted and modified
//! files with their line counts from the scans' kept text, the unified diff when asked for,
//! and warnings for what either walk could not read.

use crate::text::diff_path;
use crate::workspace::scan::{self, Entry, Key, Scan};

use super::{ChangeStatus, Changes, DIFF_CAP, DiffText, FileChange, excluded};

/// The two scans of a plain ledger, and the paths to judge apart.
pub(super) struct Sides<'a> {
    pub(super) before: &'a Scan,
    pub(super) after: &'a Scan,
    /// Changed whatever their content says ([`Ledger::changed_since`](crate::workspace::ledger::Ledger::changed_since)).
    pub(super) unknown: &'a std::collections::BTreeSet<Vec<u8>>,
    /// Not the agent's: left out on both sides.
    pub(super) exclude: &'a [String],
}

pub(super) fn plain_changes<'a>(
    sides: &Sides<'a>,
    key: &Key,
    want_diff: bool,
) -> (Changes, Option<DiffText>) {
    let (before, after) = (sides.before, sides.after);
    let mut list = Vec::new();
    let mut patch = Patch::default();
    // A cut scan covers the paths up to its last one: beyond the earlier cut, presence
    // says nothing.
    let limit = [before, after]
        .into_iter()
        .filter(|s| s.truncated)
        .filter_map(|s| s.last.as_deref())
        .min_by(|a, b| scan::walk_order(a, b));
    let paths: std::collections::BTreeSet<&[u8]> = before
        .entries
        .keys()
        .chain(after.entries.keys())
        .chain(sides.unknown.iter().map(Vec::as_slice))
        .collect();
    let unwalked = |scan: &'a Scan| -> std::collections::BTreeSet<&'a [u8]> {
        scan.unwalked
            .iter()
            .map(|(dir, _)| dir.as_slice())
            .collect()
    };
    let (unseen_before, unseen_after) = (unwalked(before), unwalked(after));
    for path in paths {
        if limit.is_some_and(|l| scan::walk_order(path, l).is_gt()) || excluded(path, sides.exclude)
        {
            continue;
        }
        // Below a directory the "after" walk could not go into: neither deleted nor
        // added, unknown (the warning names the directory). Below one the "before" could
        // not: its "before" is not known.
        if below_any(&unseen_after, path) {
            continue;
        }
        let unknown = sides.unknown.contains(path) || below_any(&unseen_before, path);
        let (old, new) = (before.entries.get(path), after.entries.get(path));
        let Some(change) = file_change(path, old, new, unknown, key) else {
            continue;
        };
        if want_diff {
            let modes = (old.map(|e| e.mode), new.map(|e| e.mode));
            let old = old.and_then(|e| e.content_bytes(key));
            let new = new.and_then(|e| e.content_bytes(key));
            patch.add(&change, old.as_deref(), new.as_deref(), modes);
        }
        list.push(change);
    }
    let truncated = before.truncated || after.truncated;
    let diff = want_diff.then(|| DiffText::new(patch.kept, patch.total));
    let mut changes = Changes::from_list(list, truncated);
    changes.warnings.extend(unwalked_warnings(before, after));
    changes.unseen |= !unseen_before.is_empty() || !unseen_after.is_empty();
    (changes, diff)
}

/// What became of `path` between the two sides (`old`, `new`: its entries, when present),
/// or `None` when nothing did. `unknown`: its "before" is not known (it changed while the
/// walk looked, or lies below a directory the walk could not go into), so it counts as
/// modified when it is there after.
fn file_change(
    path: &[u8],
    old: Option<&Entry>,
    new: Option<&Entry>,
    unknown: bool,
    key: &Key,
) -> Option<FileChange> {
    let name = String::from_utf8_lossy(path).into_owned();
    let change = match (old, new) {
        (None, Some(new)) if !unknown => FileChange {
            path: name,
            status: ChangeStatus::Added,
            lines_added: new.lines.unwrap_or(0),
            lines_removed: 0,
            binary: new.binary,
            quarantined_to: None,
        },
        (old, None) => FileChange {
            path: name,
            status: ChangeStatus::Deleted,
            lines_added: 0,
            lines_removed: old.and_then(|o| o.lines).unwrap_or(0),
            binary: old.is_some_and(|o| o.binary),
            quarantined_to: None,
        },
        (None, Some(new)) => FileChange {
            // Gone while the "before" walk looked: its content then is not known.
            path: name,
            status: ChangeStatus::Modified,
            lines_added: new.lines.unwrap_or(0),
            lines_removed: 0,
            binary: new.binary,
            quarantined_to: None,
        },
        (Some(old), Some(new)) if unknown || old.differs(new) => {
            let (added, removed) = match (old.content_bytes(key), new.content_bytes(key)) {
                (Some(a), Some(b)) => scan::line_delta(&a, &b),
                // Too large to keep: the whole files' line counts.
                _ => (new.lines.unwrap_or(0), old.lines.unwrap_or(0)),
            };
            FileChange {
                path: name,
                status: ChangeStatus::Modified,
                lines_added: added,
                lines_removed: removed,
                binary: old.binary || new.binary,
                quarantined_to: None,
            }
        }
        _ => return None,
    };
    Some(change)
}

/// Whether `path` lies below one of `dirs` (`""`: the root, below which is everything).
pub(super) fn below_any(dirs: &std::collections::BTreeSet<&[u8]>, path: &[u8]) -> bool {
    if dirs.is_empty() {
        return false;
    }
    dirs.contains(&b""[..])
        || path
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .any(|(at, _)| dirs.contains(&path[..at]))
}

/// What a plain ledger says of the directories its walks did not go into (see
/// [`scan::Scan::unwalked`]): those of the "after" walk by why, then those only the
/// "before" walk missed.
fn unwalked_warnings<'a>(before: &'a Scan, after: &'a Scan) -> Vec<String> {
    let names = |dirs: &[&[u8]]| -> String {
        let shown: Vec<String> = dirs
            .iter()
            .take(10)
            .map(|dir| match dir {
                [] => "./".to_owned(),
                _ => format!("{}/", String::from_utf8_lossy(dir)),
            })
            .collect();
        let more = dirs.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!("{}{more}", shown.join(", "))
    };
    let of = |scan: &'a Scan, why: scan::Unwalked| -> Vec<&'a [u8]> {
        scan.unwalked
            .iter()
            .filter(|(_, w)| *w == why)
            .map(|(dir, _)| dir.as_slice())
            .collect()
    };
    let mut warnings = Vec::new();
    let unreadable = of(after, scan::Unwalked::Unreadable);
    if !unreadable.is_empty() {
        warnings.push(format!(
            "{} directories of the workspace could not be read (no read permission): what \
             they hold is not in `changes` (nor listed as deleted): {}",
            unreadable.len(),
            names(&unreadable)
        ));
    }
    let deep = of(after, scan::Unwalked::TooDeep);
    if !deep.is_empty() {
        warnings.push(format!(
            "{} directories of the workspace are nested deeper than {} levels and were not \
             walked: what they hold is not in `changes`: {}",
            deep.len(),
            scan::MAX_DEPTH,
            names(&deep)
        ));
    }
    let after_dirs: std::collections::BTreeSet<&[u8]> = after
        .unwalked
        .iter()
        .map(|(dir, _)| dir.as_slice())
        .collect();
    let before_only: Vec<&[u8]> = before
        .unwalked
        .iter()
        .map(|(dir, _)| dir.as_slice())
        .filter(|dir| !after_dirs.contains(dir))
        .collect();
    if !before_only.is_empty() {
        warnings.push(format!(
            "{} directories of the workspace could not be read before the run (no read \
             permission, or nested too deep): their files are listed as modified, and what \
             was deleted from them is not known: {}",
            before_only.len(),
            names(&before_only)
        ));
    }
    warnings
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

    /// One file's part; `modes` are its entries' (file type and execute bits), before
    /// and after. A symbolic link is named as one (it read as a large file), a changed
    /// execute bit is git's `old mode`/`new mode` (it read as every line removed and
    /// added again), and an empty file gets no hunk (it got `@@ -0,0 +0,0 @@`, which
    /// patch tools refuse).
    fn add(
        &mut self,
        change: &FileChange,
        old: Option<&[u8]>,
        new: Option<&[u8]>,
        modes: (Option<u32>, Option<u32>),
    ) {
        // Quoted as git quotes them: a line break in a name made lines of its own.
        let (a, b) = (diff_path("a/", &change.path), diff_path("b/", &change.path));
        let (from, to) = match change.status {
            ChangeStatus::Added => ("/dev/null".to_owned(), b.clone()),
            ChangeStatus::Deleted => (a.clone(), "/dev/null".to_owned()),
            ChangeStatus::Modified => (a.clone(), b.clone()),
        };
        self.push(format!("diff {a} {b}\n").as_bytes());
        let link = |mode: Option<u32>| mode.is_some_and(|m| m & 0o170000 == 0o120000);
        if link(modes.0) || link(modes.1) {
            self.push(format!("Symbolic links {from} and {to} differ\n").as_bytes());
            return;
        }
        let git_mode = |m: u32| if m & 0o111 != 0 { 100755 } else { 100644 };
        if let (Some(a), Some(b)) = modes
            && git_mode(a) != git_mode(b)
        {
            self.push(format!("old mode {}\nnew mode {}\n", git_mode(a), git_mode(b)).as_bytes());
            if old.is_some() && old == new {
                return;
            }
        }
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
        if old_n == 0 && new_n == 0 {
            return;
        }
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
