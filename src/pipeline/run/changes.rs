//! The run's changes: the ledger's "before" joined, the comparison made after the agent,
//! the changes (and ignored paths) put in the envelope, and the times each took.

use std::time::Instant;

use serde_json::json;

use crate::journal::{Journal, Note};
use crate::pipeline::envelope::Envelope;
use crate::pipeline::request::RunRequest;
use crate::pipeline::snapshot::Snapshot;
use crate::supervise::CancelSignals;
use crate::text::diff_path;
use crate::workspace::Ledger;
use crate::workspace::verify::{Check, VerdictKind};

use super::journal::RunJournal;
use super::state::Run;

/// The snapshot's times into the run's `outcome_ms` (once it is finished or given up).
fn note_snapshot_times(run: &mut Run, snapshot: &Snapshot) {
    let (before, wait) = snapshot.times_ms();
    run.outcome_times.ledger_before_ms = before;
    run.outcome_times.ledger_wait_ms = Some(wait);
}

/// After the attempts: the finished ledger (awaited unless a signal comes first), its
/// warnings in `envelope`.
pub(super) async fn finished_ledger(
    mut envelope: Envelope,
    snapshot: &mut Snapshot,
    run: &mut Run,
    signals: &mut CancelSignals,
) -> (Option<Ledger>, Envelope) {
    let _ = snapshot.finish_or_cancel(signals).await;
    note_snapshot_times(run, snapshot);
    let (ledger, warnings) = snapshot.take();
    envelope.warnings.extend(warnings);
    (ledger, envelope)
}

/// `envelope` with [`attach_changes`] of the run's snapshot, on the ways out before the
/// attempts: the snapshot is awaited first, unless a signal comes.
pub(super) async fn with_snapshot(
    mut envelope: Envelope,
    snapshot: &mut Snapshot,
    run: &mut Run,
    request: &RunRequest,
    exclude: &[String],
    journal: &mut RunJournal,
    signals: &mut CancelSignals,
) -> Envelope {
    let _ = snapshot.finish_or_cancel(signals).await;
    note_snapshot_times(run, snapshot);
    envelope.warnings.extend(snapshot.take_warnings());
    attach_changes(&mut envelope, snapshot.ledger(), request, exclude, journal).await;
    // These envelopes get no other outcome times: the snapshot's are still worth showing.
    if let Some(times) = envelope
        .metrics
        .as_mut()
        .and_then(|m| m.outcome_ms.as_mut())
    {
        times.ledger_before_ms = run.outcome_times.ledger_before_ms;
        times.ledger_wait_ms = run.outcome_times.ledger_wait_ms;
    }
    envelope
}

/// `metrics.outcome_ms`: the times the run kept, the ledger's comparison measured when the
/// changes were attached, and each check's own duration from `verification`.
pub(super) fn with_outcome_times(
    mut envelope: Envelope,
    mut times: crate::pipeline::envelope::OutcomeTimes,
) -> Envelope {
    let check_ms = |c: &Option<Check>| c.as_ref().map(|c| c.duration_ms);
    if let Some(v) = &envelope.verification {
        times.verify_baseline_ms = check_ms(&v.baseline);
        times.verify_after_agent_ms = check_ms(&v.after_agent);
        times.verify_final_ms = check_ms(&v.final_check);
    }
    if let Some(metrics) = envelope.metrics.as_mut() {
        times.ledger_after_ms = metrics.outcome_ms.as_ref().and_then(|t| t.ledger_after_ms);
        metrics.outcome_ms = Some(times);
    }
    envelope
}

/// The workspace's changes since `ledger` (with the diff when asked), or a warning.
pub(super) async fn measure(
    ledger: Option<&Ledger>,
    diff: bool,
    exclude: &[String],
) -> Result<
    (
        crate::workspace::Changes,
        Option<crate::workspace::DiffText>,
    ),
    String,
> {
    let Some(ledger) = ledger else {
        return Err("cannot measure the workspace's changes: the snapshot failed".to_owned());
    };
    // The ledger is borrowed: a blocking section on this thread (the runtime has others).
    tokio::task::block_in_place(|| ledger.changes(diff, exclude)).map_err(|e| e.to_string())
}

/// The workspace's content changes since `ledger` ([`Ledger::content_changes`]: no walk
/// of the ignored paths), `None` when they cannot be measured.
pub(super) fn content_changes(
    ledger: Option<&Ledger>,
    exclude: &[String],
) -> Option<crate::workspace::Changes> {
    let ledger = ledger?;
    tokio::task::block_in_place(|| ledger.content_changes(exclude)).ok()
}

/// Puts the run's `changes` (and `diff`) into `envelope`, and notes them.
pub(super) async fn attach_changes(
    envelope: &mut Envelope,
    ledger: Option<&Ledger>,
    request: &RunRequest,
    exclude: &[String],
    journal: &mut RunJournal,
) {
    let started = Instant::now();
    let measured = measure(ledger, request.checks.return_diff, exclude).await;
    if let Some(metrics) = envelope.metrics.as_mut() {
        metrics.outcome_ms.get_or_insert_default().ledger_after_ms =
            Some(started.elapsed().as_millis() as u64);
    }
    match measured {
        Ok((mut changes, diff)) => {
            envelope.warnings.append(&mut changes.warnings);
            journal.note(Note::Changes(json!({
                "method": ledger.map(Ledger::method),
                "changes": changes,
            })));
            envelope.changes = Some(changes);
            envelope.diff = diff;
        }
        Err(warning) => envelope.warnings.push(warning),
    }
}

/// What changed under ignored paths (`changes.ignored`, DESIGN §8), said where it
/// matters: with `--scope`, a warning naming those outside it (not a violation: ignored
/// paths are the project's build outputs, which a scoped build writes; see SECURITY.md);
/// with a verdict `passed` or `fixed`, `verification.ignored_changes` and a warning naming
/// them (the check may have run what the agent wrote there).
pub(super) fn note_ignored_changes(
    envelope: &mut Envelope,
    scope: Option<&crate::workspace::scope::Scope>,
) {
    let Some(ignored) = envelope.changes.as_ref().and_then(|c| c.ignored.clone()) else {
        return;
    };
    if let Some(scope) = scope {
        let outside = scope.outside(ignored.paths.iter().map(|c| c.path.trim_end_matches('/')));
        let unlisted = ignored.count.saturating_sub(ignored.paths.len() as u64);
        if !outside.is_empty() || unlisted > 0 {
            let mut names = outside.iter().take(10).cloned().collect::<Vec<_>>();
            if unlisted > 0 || outside.len() > names.len() {
                names.push(format!(
                    "and up to {} more",
                    unlisted + (outside.len() - names.len()) as u64
                ));
            }
            envelope.warnings.push(format!(
                "the run changed {} path(s) under ignored paths (`changes.ignored`) outside \
                 --scope, not checked as a scope violation: {}",
                outside.len() as u64 + unlisted,
                names.join(", ")
            ));
        }
    }
    if let Some(verification) = envelope.verification.as_mut()
        && matches!(
            verification.verdict,
            VerdictKind::Passed | VerdictKind::Fixed
        )
    {
        verification.ignored_changes = Some(ignored.count);
        let verdict = match verification.verdict {
            VerdictKind::Fixed => "fixed",
            _ => "passed",
        };
        envelope.warnings.push(format!(
            "the --verify verdict `{verdict}` comes after the run changed {} path(s) under \
             ignored paths, which the check may have run (not in `changes.files`): {}",
            ignored.count,
            ignored.named(10)
        ));
    }
}

/// A run cancelled during a `--verify` check after the agent's turn keeps what that turn
/// ended with: its confirmed session (to resume it) and its answer, and the stream events
/// when asked for. They were lost before: the envelope said nothing of the work done.
pub(super) fn keep_the_agents_turn(cancelled: &mut Envelope, agent: Envelope) {
    cancelled.session_id = agent.session_id;
    cancelled.result = agent.result;
    if cancelled.all_messages.is_some() {
        cancelled.all_messages = agent.all_messages;
    }
}

/// Marks each changed file the end-of-run guard moved aside (`report`) with where it is
/// now (`quarantined_to`): `changes` was measured before the guard ran, and listed an
/// agent-made `pkg/.envrc` at a name that no longer existed (round thirty's note).
pub(super) fn mark_quarantined(
    envelope: &mut Envelope,
    report: &crate::sandbox::gitguard::GuardReport,
    workspace: &std::path::Path,
) {
    let Some(changes) = envelope.changes.as_mut() else {
        return;
    };
    for file in &mut changes.files {
        file.quarantined_to = report
            .quarantined
            .iter()
            .find_map(|q| moved_to(q, workspace, &file.path));
    }
    let moves: Vec<(&str, &str)> = changes
        .files
        .iter()
        .filter_map(|f| Some((f.path.as_str(), f.quarantined_to.as_deref()?)))
        .collect();
    if let Some(diff) = envelope.diff.as_mut()
        && !moves.is_empty()
    {
        let unified = diff_at_quarantine_names(&diff.unified, &moves);
        diff.bytes = (diff.bytes + unified.len() as u64).saturating_sub(diff.unified.len() as u64);
        diff.unified = unified;
    }
}

/// `unified` with each file section of a moved file (`moves`: the agent's name, where the
/// guard put it) naming the file where it is now: the diff was taken before the guard, and
/// a caller applying it elsewhere recreated the agent's `pkg/.envrc` or
/// `.claude/settings.json` there, the tool config the guard had just made inert. Only a
/// section's header lines change (up to its first hunk), and only in a section whose
/// first line names the file exactly (`diff --git a/P b/P`, or coder's own `diff a/P b/P`),
/// its names quoted as git quotes them ([`diff_path`]: round thirty-two's review found
/// `é/.claude/settings.json`, named `"a/\303\251/…"`, left as it was).
fn diff_at_quarantine_names(unified: &str, moves: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(unified.len());
    let mut rename: Option<(String, String, String, String)> = None;
    for line in unified.split_inclusive('\n') {
        if line.starts_with("diff ") {
            let head = line.trim_end_matches('\n');
            rename = moves.iter().find_map(|(from, to)| {
                // Git's spelling, or as they are (a repository's `core.quotePath = false`
                // leaves a name past ASCII unquoted).
                let quoted = |side: &str, p: &str| diff_path(side, p);
                let plain = |side: &str, p: &str| format!("{side}{p}");
                [&quoted as &dyn Fn(&str, &str) -> String, &plain]
                    .into_iter()
                    .find_map(|spell| {
                        let (a_from, b_from) = (spell("a/", from), spell("b/", from));
                        let names = format!("{a_from} {b_from}");
                        (head == format!("diff --git {names}") || head == format!("diff {names}"))
                            .then(|| (a_from, spell("a/", to), b_from, spell("b/", to)))
                    })
            });
        } else if line.starts_with("@@") {
            rename = None;
        }
        match &rename {
            Some((a_from, a_to, b_from, b_to)) => {
                out.push_str(&line.replace(a_from, a_to).replace(b_from, b_to));
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Where `path` (relative to `workspace`) went if `q` moved it: `q.to` when `q` moved the
/// file itself, else `q.to` joined with the rest of the path for what `q` moved out of a
/// directory (a `.claude/` directory's entries, a git dir's hooks); only a place that
/// exists now.
fn moved_to(
    q: &crate::sandbox::gitguard::Quarantined,
    workspace: &std::path::Path,
    path: &str,
) -> Option<String> {
    let from = std::path::Path::new(&q.path).strip_prefix(workspace).ok()?;
    let to = std::path::Path::new(&q.to).strip_prefix(workspace).ok()?;
    let rest = std::path::Path::new(path).strip_prefix(from).ok()?;
    let candidates = if rest.as_os_str().is_empty() {
        vec![to.to_path_buf()]
    } else if q.moved.iter().any(|m| rest.starts_with(m)) {
        // A directory that received the moved entries, or (a git dir's `commondir`) the
        // one moved entry renamed.
        let mut places = vec![to.join(rest)];
        if q.moved.len() == 1 && rest == std::path::Path::new(&q.moved[0]) {
            places.push(to.to_path_buf());
        }
        places
    } else {
        return None;
    };
    candidates
        .into_iter()
        .find(|place| workspace.join(place).symlink_metadata().is_ok())
        .map(|place| place.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::diff_at_quarantine_names;

    #[test]
    fn a_moved_files_section_names_where_it_is_now_and_nothing_else_changes() {
        let diff = "diff --git a/pkg/.envrc b/pkg/.envrc\nnew file mode 100644\nindex 0000000..1\n\
--- /dev/null\n+++ b/pkg/.envrc\n@@ -0,0 +1 @@\n+b/pkg/.envrc in the text stays\n\
diff --git a/b.txt b/b.txt\nnew file mode 100644\n--- /dev/null\n+++ b/b.txt\n@@ -0,0 +1 @@\n+b\n\
diff a/x/.envrc b/x/.envrc\n--- /dev/null\n+++ b/x/.envrc\n@@ -0,0 +1,1 @@\n+y\n";
        let moves = [
            ("pkg/.envrc", "pkg/.envrc.coder-quarantine-1"),
            ("x/.envrc", "x/.envrc.coder-quarantine-2"),
        ];
        let got = diff_at_quarantine_names(diff, &moves);
        let want = diff
            .replacen(
                "diff --git a/pkg/.envrc b/pkg/.envrc",
                "diff --git a/pkg/.envrc.coder-quarantine-1 b/pkg/.envrc.coder-quarantine-1",
                1,
            )
            .replacen(
                "+++ b/pkg/.envrc\n",
                "+++ b/pkg/.envrc.coder-quarantine-1\n",
                1,
            )
            .replacen(
                "diff a/x/.envrc b/x/.envrc",
                "diff a/x/.envrc.coder-quarantine-2 b/x/.envrc.coder-quarantine-2",
                1,
            )
            .replacen("+++ b/x/.envrc\n", "+++ b/x/.envrc.coder-quarantine-2\n", 1);
        assert_eq!(got, want);
        assert!(got.contains("+b/pkg/.envrc in the text stays\n"));
    }

    #[test]
    fn a_quoted_name_is_renamed_in_its_quoted_spelling() {
        let diff = "diff --git \"a/\\303\\251/.envrc\" \"b/\\303\\251/.envrc\"\n--- /dev/null\n\
+++ \"b/\\303\\251/.envrc\"\n@@ -0,0 +1 @@\n+x\n";
        let got = diff_at_quarantine_names(diff, &[("é/.envrc", "é/.envrc.q")]);
        assert_eq!(got, diff.replace(".envrc\"", ".envrc.q\""));
    }

    #[test]
    fn a_section_naming_another_file_that_starts_alike_is_left_alone() {
        let diff = "diff --git a/pkg/.envrc.d b/pkg/.envrc.d\n--- /dev/null\n+++ b/pkg/.envrc.d\n";
        let got = diff_at_quarantine_names(diff, &[("pkg/.envrc", "pkg/.envrc.q")]);
        assert_eq!(got, diff);
    }
}
