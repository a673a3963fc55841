//! Many runs at once (DESIGN §10), around one run: the `--backend auto` choice made before
//! the backend is resolved, the `--worktree` checkout made before anything looks at the
//! workspace, and both finished after the envelope is built (the branch committed and the
//! checkout removed; the outcome fed back to the routing ledger).
//!
//! It only rewrites the request (`backend`, `workspace`, an extra read grant) and adds two
//! envelope fields, so the run itself knows nothing of either.

use std::path::Path;

use crate::exit::ErrorKind;
use crate::pipeline::envelope::Envelope;
use crate::pipeline::request::{RequestFrom, RunRequest, SandboxMode, SessionChoice, WorktreeAsk};
use crate::routing::bucket::BucketInput;
use crate::routing::ledger::Verdict;
use crate::routing::{self, RouteContext, Routed};
use crate::text::Secrets;
use crate::workspace::verify::VerdictKind;
use crate::workspace::worktree::{Worktree, WorktreeError, WorktreeReport};

/// What was set up for a run, to be finished with its envelope.
#[derive(Default)]
pub struct Many {
    routed: Option<Routed>,
    worktree: Option<Worktree>,
}

/// The routing bucket's inputs for `request`.
pub fn bucket_input(request: &RunRequest) -> BucketInput {
    BucketInput {
        prompt_bytes: request.prompt.len(),
        targets: request.targets,
        resumed: matches!(request.session, SessionChoice::Resume(_)),
        writes: request.sandbox != SandboxMode::ReadOnly,
    }
}

/// Routes and checks out as `request` asks, rewriting it; a `config_error` envelope when
/// either cannot be done.
pub fn begin(
    request: &mut RunRequest,
    run_id: &str,
    state_dir: &Path,
) -> Result<Many, Box<Envelope>> {
    let mut many = Many::default();
    let fail = |message: String| Box::new(Envelope::early_failure(ErrorKind::ConfigError, message));
    let spec = request.backend.backend.clone().unwrap_or_default();
    if let Some(list) = routing::parse_auto(&spec) {
        let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
        let ctx = RouteContext {
            spec: &spec,
            list,
            args: &request.backend,
            env: &env,
            state_dir,
            store: &request.store,
            input: bucket_input(request),
            run_id,
            session_backend: match request.session {
                SessionChoice::Resume(id) => crate::pipeline::session::SessionStore::new(state_dir)
                    .load(id)
                    .ok()
                    .flatten()
                    .map(|r| r.backend),
                SessionChoice::New(_) => None,
            },
        };
        let mut routed = routing::decide(&ctx).map_err(|e| fail(e.to_string()))?;
        routed.record_choice();
        request.backend.backend = Some(routed.report.chosen.clone());
        many.routed = Some(routed);
    }
    if let Some(ask) = &request.worktree {
        let tree = Worktree::create(&request.workspace, state_dir, run_id, ask.base.as_deref())
            .map_err(|e| fail(worktree_error_named(&e, ask)))?;
        request.workspace = tree.workspace();
        // Only a confined agent needs them; unconfined they were taken for the user's own
        // `--read` and named in a warning that it "had no effect".
        if request.sandbox.is_confined() {
            request.sandbox_args.read.extend(tree.read_grants());
        }
        many.worktree = Some(tree);
    }
    Ok(many)
}

impl Many {
    /// Commits and removes the checkout, records the routing outcome, and adds both to
    /// `envelope`. The commit's message, the task's first line, is redacted with
    /// `secrets`: a key the caller pasted into the task must not enter the repository's
    /// history.
    pub fn finish(mut self, envelope: &mut Envelope, request: &RunRequest, secrets: &Secrets) {
        if let Some(mut tree) = self.worktree.take() {
            let message = if request.task_title.is_empty() {
                format!("coder: {}", tree.branch())
            } else {
                secrets.redact(&request.task_title).into_owned()
            };
            let origin = tree.origin();
            let report = tree.commit(&message);
            // A run that ended before its agent started (a missing key, a bad cassette,
            // the sandbox's setup) made nothing: its branch goes too, or every such try
            // left one more `coder/…` branch at the base in the user's repository.
            if envelope.attempts.is_empty()
                && !envelope.success
                && report.commit.is_none()
                && report.kept.is_none()
                && tree.discard_branch()
            {
                return self.finish_routing(envelope);
            }
            locate_quarantined(envelope, &tree, &report);
            // Removes the checkout (unless `commit` kept it).
            drop(tree);
            if let Some(ask) = &request.worktree {
                worktree_resume_hint(envelope, &origin, &report, ask);
            }
            if let Some(kept) = &report.kept {
                envelope.warnings.push(format!(
                    "the run's changes are not on branch {}: they could not be committed \
                     (worktree.note says why); the checkout {} is kept with them",
                    report.branch,
                    kept.display()
                ));
            }
            envelope.worktree = Some(report);
        }
        self.finish_routing(envelope);
    }

    /// Records the routing outcome and adds it to `envelope`.
    fn finish_routing(mut self, envelope: &mut Envelope) {
        if let Some(mut routed) = self.routed.take() {
            routed.record_outcome(verdict(envelope));
            envelope.warnings.append(&mut routed.warnings);
            envelope.routing = Some(routed.report);
        }
    }
}

/// What the end-of-run guard moved aside inside the checkout was reported at the
/// checkout's paths, which are removed with it: each entry says where it is now, in the
/// branch's commit (`in_commit`, `COMMIT:PATH`) or gone (`removed`), and one warning says
/// how to look at them. A user following the report found nothing there.
fn locate_quarantined(envelope: &mut Envelope, tree: &Worktree, report: &WorktreeReport) {
    let Some(guard) = envelope.sandbox.as_mut() else {
        return;
    };
    let (mut committed, mut removed) = (Vec::new(), 0);
    for moved in &mut guard.quarantined {
        let Some(after) = tree.after_checkout(report, Path::new(&moved.to)) else {
            continue;
        };
        match &after.in_commit {
            Some(at) => committed.push(at.clone()),
            None => removed += 1,
        }
        moved.after_checkout = after;
    }
    let mut said = Vec::new();
    if let Some(first) = committed.first() {
        said.push(format!(
            "{} of them {} committed on branch {} under the quarantine name (sandbox.quarantined[].in_commit; `git -C {} show {first}` shows the first)",
            committed.len(),
            if committed.len() == 1 { "is" } else { "are" },
            report.branch,
            crate::text::shell_quote(&tree.origin().display().to_string()),
        ));
    }
    if removed > 0 {
        said.push(format!(
            "{removed} (in a git dir of the checkout, or ignored) {} removed with it",
            if removed == 1 { "was" } else { "were" }
        ));
    }
    if !said.is_empty() {
        envelope.warnings.push(format!(
            "the guard's paths above are in the --worktree checkout, which is removed: {}",
            said.join("; ")
        ));
    }
}

/// A worktree error names the key it is about as the caller gave it: the flag
/// (`--worktree-base "x" names no commit`), the `--request` field, or the MCP tool's
/// argument (`worktree_base "x" …`), never a flag the caller did not write.
fn worktree_error_named(e: &WorktreeError, ask: &WorktreeAsk) -> String {
    if let WorktreeError::MissingRef(base) = e {
        let named = match (ask.base_by_flag, ask.from) {
            (true, _) => format!("--worktree-base {base:?}"),
            (false, RequestFrom::File) => {
                format!("\"worktree_base\": {base:?} in the --request JSON")
            }
            (false, RequestFrom::McpTool) => format!("worktree_base {base:?}"),
        };
        return format!("{named} names no commit in the repository");
    }
    let text = e.to_string();
    let worktree = match (ask.by_flag, ask.from) {
        (true, _) => return text,
        (false, RequestFrom::File) => "\"worktree\" in the --request JSON",
        (false, RequestFrom::McpTool) => "worktree",
    };
    match text.strip_prefix("--worktree:") {
        Some(rest) => format!("{worktree}:{rest}"),
        None => text,
    }
}

/// A `--worktree` run's session lived in its checkout, which is gone: the resume hint
/// (`--cd <checkout> --session-id …`, to answer its questions or continue its work)
/// pointed at a removed directory. It says now where the work is and how to go on, in
/// the caller's own terms: a command line, the `--request` JSON's fields, or the MCP
/// tool's arguments.
fn worktree_resume_hint(
    envelope: &mut Envelope,
    origin: &Path,
    report: &WorktreeReport,
    ask: &WorktreeAsk,
) {
    let Some(detail) = envelope.error_detail.as_mut() else {
        return;
    };
    if detail.resume_hint.is_none() {
        return;
    }
    let what = if envelope.error_kind == Some(ErrorKind::NeedsInput) {
        "answer the questions in the task of a new run"
    } else {
        "continue in a new run"
    };
    let (flag, how) = match (ask.by_flag, ask.from) {
        (_, RequestFrom::McpTool) => ("worktree", Spelling::Tool),
        (true, RequestFrom::File) => ("--worktree", Spelling::Flags),
        (false, RequestFrom::File) => ("worktree", Spelling::RequestJson),
    };
    let gone = format!(
        "the session ran in the {flag} checkout, which is removed, so it cannot be resumed"
    );
    let cd = serde_json::json!(origin);
    let branch = serde_json::json!(report.branch);
    detail.resume_hint = Some(match how {
        Spelling::Tool => format!(
            "{gone}; its work is on branch {} of {}: {what} from it, the coder tool \
             with cd {cd}, worktree true and worktree_base {branch}",
            report.branch,
            origin.display(),
        ),
        Spelling::Flags => format!(
            "{gone}; {what} from the branch's work: coder --cd {} --worktree --worktree-base \
             {} \"…\"",
            crate::text::shell_quote(&origin.display().to_string()),
            crate::text::shell_quote(&report.branch),
        ),
        Spelling::RequestJson => format!(
            "{gone}; {what} from the branch's work: coder --request with the JSON \
             {{\"PROMPT\": \"…\", \"cd\": {cd}, \"worktree\": true, \"worktree_base\": {branch}}}"
        ),
    });
}

/// How a hint spells a new run: a command line, a `--request` JSON, or the MCP tool's
/// arguments.
enum Spelling {
    Flags,
    RequestJson,
    Tool,
}

/// What a run says about its backend: the verify verdict when there was a final check,
/// else the run's success. Runs that end for reasons that are not the backend's (a
/// cancellation, bad input, the sandbox, a bug in coder, a missing program) say nothing.
pub fn verdict(envelope: &Envelope) -> Option<Verdict> {
    if let Some(v) = &envelope.verification {
        match v.verdict {
            // A check made to pass by what changed under ignored paths alone (the agent
            // wrote the script the check runs there) says nothing of the backend's work:
            // not learnt (round nineteen's review).
            VerdictKind::Fixed if only_ignored_changes(envelope) => return None,
            VerdictKind::Passed | VerdictKind::Fixed => return Some(Verdict::Success),
            VerdictKind::StillFailing | VerdictKind::Regressed => return Some(Verdict::Failure),
            VerdictKind::NotRun => {}
        }
    }
    match envelope.error_kind {
        None if envelope.success => Some(Verdict::Success),
        Some(
            ErrorKind::Cancelled
            | ErrorKind::ConfigError
            | ErrorKind::SandboxError
            | ErrorKind::UnexpectedException
            | ErrorKind::CommandNotFound,
        ) => None,
        _ => Some(Verdict::Failure),
    }
}

/// The run changed nothing of the project's content (`changes.files`) but something
/// under its ignored paths (`changes.ignored`).
fn only_ignored_changes(envelope: &Envelope) -> bool {
    envelope
        .changes
        .as_ref()
        .is_some_and(|c| c.files_changed == 0 && c.ignored.as_ref().is_some_and(|i| i.count > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_learnt_is_verify_first_then_success_and_not_the_backends_fault_is_none() {
        let ok = Envelope::success(None, "r".into());
        assert_eq!(verdict(&ok), Some(Verdict::Success));
        let failed = |kind| Envelope::early_failure(kind, "x");
        assert_eq!(
            verdict(&failed(ErrorKind::EmptyResult)),
            Some(Verdict::Failure)
        );
        assert_eq!(
            verdict(&failed(ErrorKind::VerifyFailed)),
            Some(Verdict::Failure)
        );
        for kind in [
            ErrorKind::Cancelled,
            ErrorKind::ConfigError,
            ErrorKind::SandboxError,
        ] {
            assert_eq!(verdict(&failed(kind)), None);
        }
    }
}
