//! The weak-model fallback (DESIGN §8): one more turn, never more, when the model plainly
//! failed to apply its own work. Weaker models often answer with a diff instead of editing,
//! or call Edit with an `old_string` that is not in the file; both leave the workspace as
//! it was while the answer reads like success.
//!
//! Triggers, judged from coder's own ledger, not from the model's words:
//! * `edit_failed`: an Edit/MultiEdit call returned an error and its file ended unchanged;
//! * `diff_in_answer`: no file changed, and the final answer holds a unified diff or a
//!   whole fenced file (never in a read-only sandbox, where no change is expected).
//!
//! The action is one turn in the same session asking for the complete files through the
//! Write tool. It counts against `--max-turns`; with no turn left, the outcome stands.

use serde::Serialize;

use crate::workspace::Changes;

/// `edit_failed | diff_in_answer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    EditFailed,
    DiffInAnswer,
}

/// The envelope's `fallback`.
#[derive(Debug, Clone, Serialize)]
pub struct Fallback {
    pub trigger: Trigger,
    /// The files concerned (the failed edits' files, or those named in the answer).
    pub files: Vec<String>,
    /// Whether the extra turn changed files.
    pub applied: bool,
    /// What happened and why, in a sentence ([`why`]).
    pub why: String,
}

impl Fallback {
    /// The report of a fallback turn for `trigger` on `files`, which changed files
    /// (`applied`) or not.
    pub fn new(trigger: Trigger, files: Vec<String>, applied: bool) -> Fallback {
        let why = why(trigger, &files, applied);
        Fallback {
            trigger,
            files,
            applied,
            why,
        }
    }
}

/// `fallback.why`: what the model did wrong, what coder did about it, and what came of
/// it. The trigger's name alone left a user to guess what `edit_failed` or
/// `diff_in_answer` meant for the work.
pub fn why(trigger: Trigger, files: &[String], applied: bool) -> String {
    let named = if files.is_empty() {
        String::new()
    } else {
        format!(" ({})", crate::text::one_line(&files.join(", "), 200))
    };
    let what = match trigger {
        Trigger::EditFailed => format!(
            "an Edit call failed to apply (the text to replace was not in the file) and its \
             file{named} ended unchanged"
        ),
        Trigger::DiffInAnswer => format!(
            "the answer showed changes{named} as a diff or whole files instead of making them, \
             and no file changed"
        ),
    };
    let outcome = if applied {
        "that turn changed files: check them (changes, --return-diff)"
    } else {
        "that turn changed no file either: the work the answer describes is not in the \
         workspace"
    };
    format!(
        "{what}; coder resumed the session for one more turn asking for the complete files \
         with the Write tool, and {outcome}"
    )
}

/// Whether the outcome calls for the fallback turn, and on which files.
/// `failed_edits` are absolute or workspace-relative paths of failed Edit calls.
pub fn trigger(
    workspace: &std::path::Path,
    changes: &Changes,
    failed_edits: &[String],
    answer: Option<&str>,
    read_only: bool,
) -> Option<(Trigger, Vec<String>)> {
    if read_only {
        return None;
    }
    let changed: Vec<&str> = changes.paths().collect();
    let unchanged: Vec<String> = failed_edits
        .iter()
        .map(|p| relative(workspace, p))
        .filter(|p| !changed.contains(&p.as_str()))
        .collect();
    if !unchanged.is_empty() {
        return Some((Trigger::EditFailed, unchanged));
    }
    if changes.files_changed == 0
        && let Some(answer) = answer
        && let Some(files) = answer_holds_files(answer)
    {
        return Some((Trigger::DiffInAnswer, files));
    }
    None
}

fn relative(workspace: &std::path::Path, path: &str) -> String {
    std::path::Path::new(path)
        .strip_prefix(workspace)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| path.to_owned())
}

/// `Some(files named)` when `answer` holds a unified diff (`--- a/x` / `+++ b/x` with a
/// hunk header) or a fenced block of at least five lines (a whole file, not a snippet).
pub fn answer_holds_files(answer: &str) -> Option<Vec<String>> {
    let mut files = Vec::new();
    let mut diff = false;
    let lines: Vec<&str> = answer.lines().collect();
    for pair in lines.windows(2) {
        if pair[0].starts_with("--- ") && pair[1].starts_with("+++ ") {
            diff = true;
            let name = pair[1][4..].trim();
            let name = name.strip_prefix("b/").unwrap_or(name);
            let name = name.split('\t').next().unwrap_or(name).to_owned();
            if name != "/dev/null" && !files.contains(&name) {
                files.push(name);
            }
        }
    }
    let diff = diff && lines.iter().any(|l| l.starts_with("@@ "));
    let mut fenced = false;
    let mut open: Option<usize> = None;
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("```") {
            match open {
                None => open = Some(i),
                Some(start) => {
                    if i - start > 5 {
                        fenced = true;
                    }
                    open = None;
                }
            }
        }
    }
    (diff || fenced).then_some(files)
}

/// The prompt of the fallback turn.
pub fn prompt(trigger: Trigger, files: &[String]) -> String {
    let what = match trigger {
        Trigger::EditFailed => {
            "Your edits did not apply: the Edit tool reported an error and the file is unchanged"
        }
        Trigger::DiffInAnswer => {
            "No file in the workspace changed: your answer shows the changes instead of making them"
        }
    };
    let list = if files.is_empty() {
        String::new()
    } else {
        format!(" ({})", files.join(", "))
    };
    format!(
        "{what}{list}. Apply the changes now: write the complete new content of each file \
         with the Write tool (whole files, not diffs or fragments). Do not explain, just \
         write the files, then answer in one line."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_and_whole_files_are_recognised() {
        let diff = "Here:\n--- a/src/x.rs\n+++ b/src/x.rs\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(answer_holds_files(diff), Some(vec!["src/x.rs".to_owned()]));
        let fenced = "```rust\n1\n2\n3\n4\n5\n```\n";
        assert_eq!(answer_holds_files(fenced), Some(vec![]));
        assert_eq!(answer_holds_files("Done. ```x``` is fine"), None);
        assert_eq!(answer_holds_files("All done."), None);
    }

    #[test]
    fn triggers_need_an_unchanged_workspace() {
        let ws = std::path::Path::new("/w");
        let none = Changes::default();
        let failed = vec!["/w/a.txt".to_owned()];
        assert_eq!(
            trigger(ws, &none, &failed, Some("ok"), false),
            Some((Trigger::EditFailed, vec!["a.txt".to_owned()]))
        );
        assert_eq!(trigger(ws, &none, &failed, Some("ok"), true), None);
        let diff = "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-x\n+y\n";
        assert_eq!(
            trigger(ws, &none, &[], Some(diff), false),
            Some((Trigger::DiffInAnswer, vec!["b.txt".to_owned()]))
        );
        assert_eq!(trigger(ws, &none, &[], Some("fine"), false), None);
    }
}
