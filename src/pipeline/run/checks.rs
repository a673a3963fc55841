//! What is checked after the agent's turn: the git guard, `--verify` with its repair
//! turns, the structured answer against `--schema`, and the weak-model fallback.

use std::time::Instant;

use serde_json::json;
use uuid::Uuid;

use crate::exit::ErrorKind;
use crate::journal::{Journal, Note};
use crate::pipeline::child;
use crate::pipeline::envelope::{Envelope, SchemaRepair};
use crate::pipeline::fallback::{self, Fallback};
use crate::pipeline::request::{RequestFrom, RunRequest, SessionChoice};
use crate::pipeline::structured::{self, Answer, Judgement};
use crate::supervise::CancelSignals;
use crate::workspace::Ledger;
use crate::workspace::verify::{self, Check, CheckEnd, RepairFailed, VerdictKind, Verification};

use super::attempt::PreparedRun;
use super::changes::{attach_changes, content_changes, keep_the_agents_turn, note_ignored_changes};
use super::journal::RunJournal;
use super::scope_hint;
use super::state::Run;

/// A `--verify` check that a signal to coder stopped: the signal, and which check it was
/// (the envelope's message says what was cancelled).
struct CheckCancelled {
    pub(super) signo: i32,
    pub(super) during: &'static str,
    /// The checks that ran, the cancelled one last (as `final`, with what it printed until
    /// then): the cancelled envelope still says what ran.
    pub(super) verification: Option<Verification>,
}

/// The `--verify` checks of one run so far, folded into its [`Verification`] at the end.
struct ChecksSoFar {
    command: String,
    baseline: Option<Check>,
    after_agent: Option<Check>,
    final_check: Option<Check>,
    repairs: u32,
    repair_failed: Option<RepairFailed>,
}

impl ChecksSoFar {
    fn new(command: &str, baseline: Option<Check>) -> Self {
        ChecksSoFar {
            command: command.to_owned(),
            baseline,
            after_agent: None,
            final_check: None,
            repairs: 0,
            repair_failed: None,
        }
    }

    /// The last check when a repair turn may follow it: it failed, it was started (a
    /// check that could not be started is no failure the model can repair), and turns are
    /// left.
    fn repairable(&self, repair_turns: u32) -> Option<&Check> {
        self.final_check
            .as_ref()
            .filter(|c| !c.passed && !c.not_started && self.repairs < repair_turns)
    }

    /// A cancelled check ends the run: what ran is reported, the cancelled check last.
    fn cancelled(
        &self,
        (signo, partial): (i32, Option<Check>),
        during: &'static str,
    ) -> CheckCancelled {
        CheckCancelled {
            signo,
            during,
            verification: Some(Verification {
                command: self.command.clone(),
                baseline: self.baseline.clone(),
                after_agent: self.after_agent.clone(),
                final_check: partial,
                verdict: VerdictKind::NotRun,
                repair_turns: self.repairs,
                ignored_changes: None,
                repair_skipped: None,
                repair_failed: None,
            }),
        }
    }

    fn into_verification(self, repair_turns: u32) -> Verification {
        let not_started = self.final_check.as_ref().is_some_and(|c| c.not_started);
        let repair_skipped = (not_started && self.repairs < repair_turns)
            .then(|| crate::workspace::verify::NOT_STARTED_NO_REPAIR.to_owned());
        Verification {
            command: self.command,
            verdict: VerdictKind::of(self.baseline.as_ref(), self.final_check.as_ref()),
            baseline: self.baseline,
            after_agent: self.after_agent,
            final_check: self.final_check,
            repair_turns: self.repairs,
            ignored_changes: None,
            repair_skipped,
            repair_failed: self.repair_failed,
        }
    }
}

impl PreparedRun {
    /// The end-of-run git guard (`sandbox::gitguard`): git dirs the run made lose their
    /// command-running config and hooks; when the guard cannot check everything, the run
    /// fails closed (`sandbox_error`).
    pub(super) fn guard_git(
        &self,
        mut envelope: Envelope,
        run: &Run,
        journal: &mut RunJournal,
    ) -> Envelope {
        let Some(policy) = &self.policy else {
            return envelope;
        };
        let report = tokio::task::block_in_place(|| crate::sandbox::guard_git_after_run(policy));
        if report.is_empty() {
            return envelope;
        }
        journal.note(Note::GitGuard(json!(report)));
        envelope.warnings.extend(report.lines());
        super::changes::mark_quarantined(&mut envelope, &report, &policy.workspace);
        let incomplete = report.incomplete.clone();
        envelope.sandbox = Some(report);
        match incomplete {
            Some(why) => run.fail(
                envelope,
                ErrorKind::SandboxError,
                format!("the end-of-run git guard could not check the workspace: {why}"),
                |_| {},
            ),
            None => envelope,
        }
    }

    /// The sandbox's placeholders for absent protected names, relative to the workspace:
    /// coder made them, not the agent, and they go when the run ends.
    pub(super) fn placeholders(&self, request: &RunRequest) -> Vec<String> {
        self.policy
            .iter()
            .flat_map(|p| &p.placeholders)
            .filter_map(|p| p.path.strip_prefix(&request.workspace).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    /// Runs the `--verify` command once under the run's sandbox and notes it; `Err` with
    /// the signal, and the check as far as it got, when coder was cancelled meanwhile.
    pub(super) async fn check(
        &mut self,
        request: &RunRequest,
        phase: &str,
        run: &Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Result<Check, (i32, Option<Check>)> {
        let Some(config) = &request.checks.verify else {
            return Err((0, None));
        };
        let mut base = child::build(request, self.program.clone(), self.child_base_env.clone());
        if let Some(policy) = &self.policy {
            child::confine(&mut base, policy.clone());
            base.egress = self.egress.clone();
        }
        let spec = verify::check_spec(&config.command, &base);
        // The check's end stops every process coder started, an idle pre-started helper
        // too: give it up now (the next attempt starts its own).
        drop(self.helper.take());
        if let Some(progress) = journal.progress.as_mut() {
            progress.set_phase(format!("verify ({phase})"));
        }
        let end = verify::run_check(&spec, config.timeout, run.limits.kill_grace, signals).await;
        let (check, cancelled) = match end {
            CheckEnd::Done(check) => (check, None),
            CheckEnd::Cancelled(check, signo) => (check, Some(signo)),
        };
        journal.note(Note::Verify(json!({
            "phase": phase,
            "command": config.command,
            "exit_code": check.exit_code,
            "passed": check.passed,
            "duration_ms": check.duration_ms,
            "timed_out": check.timed_out,
            "signal": check.signal,
            "output_bytes": check.output_bytes,
            "error": check.error,
            "tail": check.tail_text,
        })));
        match cancelled {
            Some(signo) => Err((signo, Some(check))),
            None => Ok(check),
        }
    }

    /// The `--verify` check after the agent and, while it fails and the session can be
    /// resumed, up to `repair_turns` repair turns each followed by the check again; `envelope`
    /// becomes the last turn's. None without `--verify`.
    async fn checks_and_repairs(
        &mut self,
        envelope: &mut Envelope,
        request: &RunRequest,
        baseline: Option<Check>,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Result<Option<Verification>, CheckCancelled> {
        let Some(config) = &request.checks.verify else {
            return Ok(None);
        };
        let mut checks = ChecksSoFar::new(&config.command, baseline);
        if envelope.success {
            let check = self
                .check(request, "after_agent", run, signals, journal)
                .await;
            checks.final_check =
                Some(check.map_err(|e| checks.cancelled(e, "the check after the agent"))?);
        }
        while let Some(check) = checks.repairable(config.repair_turns)
            && envelope.success
            && let Some(session) = resumable(envelope)
        {
            let prompt = repair_prompt(&config.command, check);
            let exit_code = check.exit_code;
            checks.repairs += 1;
            journal.note(Note::Repair(
                json!({"turn": checks.repairs, "exit_code": exit_code}),
            ));
            *envelope = self
                .repair_turn(prompt, session, request, run, signals, journal)
                .await;
            if checks.after_agent.is_none() {
                checks.after_agent = checks.final_check.take();
            }
            // A repair turn a signal stopped ends the run: no check follows (it went on to
            // run the whole check, minutes of a test suite, after the user's Ctrl-C).
            if envelope.error_kind == Some(ErrorKind::Cancelled) {
                checks.final_check = None;
                break;
            }
            if let (false, Some(kind)) = (envelope.success, envelope.error_kind) {
                checks.repair_failed = Some(RepairFailed {
                    turn: checks.repairs,
                    error_kind: kind,
                    error: envelope.error.clone().unwrap_or_default(),
                });
            }
            let check = self
                .check(request, "after_repair", run, signals, journal)
                .await;
            checks.final_check =
                Some(check.map_err(|e| checks.cancelled(e, "the check after a repair turn"))?);
        }
        Ok(Some(checks.into_verification(config.repair_turns)))
    }

    /// One repair turn: the session resumed with `prompt`, timed into the run's outcome
    /// times; the turn's envelope.
    async fn repair_turn(
        &mut self,
        prompt: String,
        session: SessionChoice,
        request: &RunRequest,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Envelope {
        let repair = RunRequest {
            prompt: prompt.into(),
            session,
            ..request.clone()
        };
        let turn_started = Instant::now();
        let envelope = self.attempt_loop(repair, run, signals, journal).await;
        run.outcome_times
            .repair_turns_ms
            .push(turn_started.elapsed().as_millis() as u64);
        envelope
    }

    /// After the agent: the fallback turn, the checks and repair turns, the ledger and
    /// the scope, each folded into `envelope`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn verified(
        &mut self,
        mut envelope: Envelope,
        request: &RunRequest,
        ledger: Option<Ledger>,
        baseline: Option<Check>,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Envelope {
        let ledger = ledger.as_ref();
        let exclude = self.placeholders(request);
        let fallback = self
            .fallback(&mut envelope, request, ledger, run, signals, journal)
            .await;
        let verification = match self
            .checks_and_repairs(&mut envelope, request, baseline, run, signals, journal)
            .await
        {
            Ok(verification) => verification,
            Err(CheckCancelled {
                signo,
                during,
                verification,
            }) => {
                let mut cancelled = run.cancelled_outside_attempt(signo, during);
                cancelled.verification = verification;
                keep_the_agents_turn(&mut cancelled, envelope);
                // The agent's work stands unchecked: say how to check it and go on.
                if let (Some(id), Some(verify), Some(detail)) = (
                    cancelled.session_id.as_deref(),
                    request.checks.verify.as_ref(),
                    cancelled.error_detail.as_mut(),
                ) {
                    detail.resume_hint = Some(run.check_cancelled_hint(id, verify));
                }
                attach_changes(&mut cancelled, ledger, request, &exclude, journal).await;
                return cancelled;
            }
        };
        // The structured answer is judged last: a fallback or repair turn gives a new one.
        let check_failed = verification
            .as_ref()
            .and_then(|v| v.final_check.as_ref())
            .is_some_and(|c| !c.passed);
        envelope = self
            .structured(envelope, request, run, signals, journal, !check_failed)
            .await;
        attach_changes(&mut envelope, ledger, request, &exclude, journal).await;
        envelope.fallback = fallback;
        // A scope is checked against every change, or the run cannot be vouched for
        // (round sixteen's review: the agent made the ledger fail, with a sparse file of
        // more than the git ledger's read budget, or cut its walk, and what it changed
        // outside the scope went unchecked).
        let (out_of_scope, unchecked) = scope_check(request, &envelope);
        let failed_check = verification
            .as_ref()
            .and_then(|v| v.final_check.as_ref())
            .filter(|c| !c.passed)
            .cloned();
        envelope.verification = verification;
        note_ignored_changes(&mut envelope, request.checks.scope.as_ref());
        if let Some(why) = unchecked {
            envelope = run.fail(
                envelope,
                ErrorKind::ScopeViolation,
                format!("cannot check the run against --scope: {why}"),
                |_| {},
            );
        } else if !out_of_scope.is_empty() {
            envelope = scope_violation(run, envelope, request, out_of_scope);
        } else if let Some(check) = failed_check {
            envelope = verify_failure(run, envelope, request, &check);
        }
        envelope
    }

    /// Structured results (DESIGN §9): the final answer validated against `--json-schema`
    /// and returned as `structured`; an invalid one gets one repair turn, then the run fails
    /// with `schema_mismatch`. A run that failed for another reason keeps its failure, and
    /// one that fails its `--verify` check anyway (`!may_repair`) only gets a warning.
    pub(super) async fn structured(
        &mut self,
        envelope: Envelope,
        request: &RunRequest,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
        may_repair: bool,
    ) -> Envelope {
        let Some(schema) = request.checks.json_schema.clone() else {
            return envelope;
        };
        let answered = |e: &Envelope| e.success || e.error_kind == Some(ErrorKind::SchemaMismatch);
        if !answered(&envelope) {
            return envelope;
        }
        let mut envelope = envelope;
        let mut errors = match judge(run.answer.as_ref(), &schema) {
            Judgement::Valid { value, .. } => {
                envelope.structured = Some(value);
                return envelope;
            }
            Judgement::Invalid { errors } => errors,
        };
        if !may_repair && envelope.success {
            // The run fails its --verify check anyway: that is its verdict; no turn is
            // spent on the answer's form.
            envelope.warnings.push(crate::text::one_line(
                &format!(
                    "the answer does not match --json-schema either ({})",
                    errors.join("; ")
                ),
                300,
            ));
            return envelope;
        }
        if may_repair && let Some(session) = resumable(&envelope) {
            journal.note(Note::Repair(json!({"turn": 1, "schema_errors": errors})));
            let repair = RunRequest {
                prompt: structured::repair_prompt(&schema, &errors).into(),
                session,
                ..request.clone()
            };
            run.answer = None;
            let turn_started = Instant::now();
            envelope = self.attempt_loop(repair, run, signals, journal).await;
            run.outcome_times.schema_repair_ms = Some(turn_started.elapsed().as_millis() as u64);
            let before = std::mem::take(&mut errors);
            let judged = answered(&envelope).then(|| judge(run.answer.as_ref(), &schema));
            envelope.schema_repair = Some(SchemaRepair {
                errors: before,
                fixed: matches!(judged, Some(Judgement::Valid { .. })),
            });
            match judged {
                Some(Judgement::Valid { value, .. }) => {
                    envelope.structured = Some(value);
                    return envelope;
                }
                Some(Judgement::Invalid { errors: after }) => errors = after,
                // The repair turn failed otherwise: that failure stands.
                None => return envelope,
            }
        }
        let summary = format!(
            "the answer does not match --json-schema ({} error{}): {}",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" },
            errors.first().map_or("", String::as_str)
        );
        let summary = crate::text::one_line(&summary, 300);
        if envelope.error_kind == Some(ErrorKind::SchemaMismatch) {
            // The CLI gave up on its own: coder's verdict is the envelope's summary, the
            // CLI's words stay in error_detail.message.
            envelope.error = Some(summary.clone());
        }
        let hint = schema_hint(request.request_from, envelope.result.is_some());
        run.fail(envelope, ErrorKind::SchemaMismatch, summary, |detail| {
            detail.schema_errors = Some(errors);
            detail.hint = Some(hint);
        })
    }

    /// The weak-model fallback (see `pipeline::fallback`): at most one extra turn.
    pub(super) async fn fallback(
        &mut self,
        envelope: &mut Envelope,
        request: &RunRequest,
        ledger: Option<&Ledger>,
        run: &mut Run,
        signals: &mut CancelSignals,
        journal: &mut RunJournal,
    ) -> Option<Fallback> {
        if !envelope.success {
            return None;
        }
        let exclude = self.placeholders(request);
        let changes = content_changes(ledger, &exclude)?;
        let (trigger, files) = fallback::trigger(
            &request.workspace,
            &changes,
            &run.failed_edits,
            envelope.result.as_deref(),
            run.read_only,
        )?;
        let session = resumable(envelope)?;
        let used = envelope.metrics.as_ref().map_or(0, |m| m.turns);
        let turns_left = match request.max_turns {
            Some(max) if u64::from(max) <= used => {
                envelope.warnings.push(format!(
                    "the weak-model fallback ({}) was not tried: --max-turns {max} is used up",
                    serde_json::to_value(trigger).map_or_else(|_| String::new(), |v| v.to_string())
                ));
                return None;
            }
            Some(max) => Some(max - used as u32),
            None => None,
        };
        journal.note(Note::Fallback(json!({"trigger": trigger, "files": files})));
        let turn = RunRequest {
            prompt: fallback::prompt(trigger, &files).into(),
            session,
            max_turns: turns_left,
            ..request.clone()
        };
        let turn_started = Instant::now();
        *envelope = self.attempt_loop(turn, run, signals, journal).await;
        run.outcome_times.fallback_ms = Some(turn_started.elapsed().as_millis() as u64);
        if let (Some(max), Some(left)) = (request.max_turns, turns_left) {
            fallback_out_of_turns(envelope, max, left);
        }
        let applied = content_changes(ledger, &exclude)
            .is_some_and(|c| c.files_changed > changes.files_changed);
        if !applied && envelope.success {
            envelope.warnings.push(format!(
                "weak-model fallback: {}",
                fallback::why(trigger, &files, applied)
            ));
        }
        Some(Fallback::new(trigger, files, applied))
    }
}

/// A fallback turn stopped by `--max-turns` says so with the user's own limit: the CLI's
/// "Reached maximum number of turns (1)" named the turns the fallback had left, not the
/// `--max-turns 3` the user gave, and "raise the limit" did not say the fallback counts.
fn fallback_out_of_turns(envelope: &mut Envelope, max: u32, left: u32) {
    if envelope.error_kind != Some(ErrorKind::MaxTurns) {
        return;
    }
    let summary = format!(
        "the weak-model fallback turn reached --max-turns {max}: the agent's turns left it \
         {left} of them"
    );
    envelope.error = Some(summary.clone());
    if let Some(detail) = envelope.error_detail.as_mut() {
        detail.message = format!("{summary} ({})", detail.message);
        detail.hint = Some(
            "resume the session with SESSION_ID to continue, or raise --max-turns (the \
             fallback turn counts against it)"
                .to_owned(),
        );
    }
}

/// The verdict on what the last attempt answered (no answer at all is invalid too).
pub(super) fn judge(answer: Option<&Answer>, schema: &structured::JsonSchema) -> Judgement {
    match answer {
        Some(answer) => answer.judge(schema),
        None => Judgement::Invalid {
            errors: vec!["(root): the run ended without an answer".to_owned()],
        },
    }
}

/// The session a follow-up turn resumes: the one the envelope confirmed.
pub(super) fn resumable(envelope: &Envelope) -> Option<SessionChoice> {
    envelope
        .session_id
        .as_deref()
        .and_then(|id| Uuid::parse_str(id).ok())
        .map(SessionChoice::Resume)
}

/// `error_detail.last_lines` holds at most this many lines of a failing check.
fn outcome_tail_len() -> usize {
    crate::pipeline::observation::LAST_LINES
}

/// The repair turn's prompt: the command, its exit code and the end of its output.
pub(super) fn repair_prompt(command: &str, check: &Check) -> String {
    let tail = &check.tail_text;
    let mut from = tail.len().saturating_sub(REPAIR_TAIL_BYTES);
    while !tail.is_char_boundary(from) {
        from += 1;
    }
    let status = match (check.exit_code, &check.error) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(error)) => error.clone(),
        (None, None) => "no exit code (killed)".to_owned(),
    };
    format!(
        "The check `{command}` fails after your changes ({status}). The end of its output:\n\
         ```\n{}\n```\nFix the cause so that the check passes; do not change or skip the \
         check itself. Answer in one line when done.",
        tail[from..].trim_end()
    )
}

/// Bytes of a failing check's output the repair prompt quotes at most (its end).
const REPAIR_TAIL_BYTES: usize = 8 * 1024;

/// What to do about an answer that never matched the schema, naming the schema as the
/// caller gave it; whether the model's last answer is in `result` (it is not when the CLI
/// gave up on a structured answer itself).
fn schema_hint(from: RequestFrom, answered: bool) -> String {
    let (schema, session) = match from {
        RequestFrom::File => ("--json-schema", "--session-id SESSION_ID"),
        RequestFrom::McpTool => ("json_schema", "SESSION_ID"),
    };
    let raw = if answered {
        "the model's last answer is in `result`; "
    } else {
        ""
    };
    format!(
        "{raw}error_detail.schema_errors says where it did not match: name the fields and \
         their types in the prompt, or loosen {schema} if it asks for more than the task \
         gives, then run again; or resume with {session} and ask for an answer that fixes \
         those errors"
    )
}

/// The paths the run changed outside `--scope`, or why they cannot be known.
///
/// A scope is checked against every change, or the run cannot be vouched for (round
/// sixteen's review: the agent made the ledger fail, with a sparse file of more than the
/// git ledger's read budget, or cut its walk, and what it changed outside the scope went
/// unchecked).
fn scope_check(request: &RunRequest, envelope: &Envelope) -> (Vec<String>, Option<&'static str>) {
    match (&request.checks.scope, &envelope.changes) {
        (Some(_), None) => (
            Vec::new(),
            Some("the workspace's changes could not be measured"),
        ),
        (Some(_), Some(changes)) if changes.unseen => (
            Vec::new(),
            Some("part of the workspace was not looked at (see the warnings)"),
        ),
        (Some(scope), Some(changes)) => (scope.outside(changes.paths()), None),
        _ => (Vec::new(), None),
    }
}

/// `envelope` failed with `scope_violation`, naming the paths outside `--scope`.
fn scope_violation(
    run: &Run,
    envelope: Envelope,
    request: &RunRequest,
    out_of_scope: Vec<String>,
) -> Envelope {
    let summary = format!(
        "the run changed {} path(s) outside --scope: {}",
        out_of_scope.len(),
        crate::text::one_line(&out_of_scope.join(", "), 200)
    );
    let hint = scope_hint(request.request_from, request.worktree.is_some());
    run.fail(envelope, ErrorKind::ScopeViolation, summary, |detail| {
        detail.out_of_scope = Some(out_of_scope);
        detail.hint = Some(hint);
    })
}

/// `envelope` failed with `verify_failed`: the check's exit, its last lines, and how to
/// resume for a run whose own failure is the check's.
fn verify_failure(run: &Run, envelope: Envelope, request: &RunRequest, check: &Check) -> Envelope {
    let (envelope, turn_failed) = repair_turn_failure_gives_way(envelope);
    let summary = match check.exit_code {
        Some(code) => format!(
            "the --verify check failed with exit code {code}{}",
            shell_could_not(check)
        ),
        None if check.not_started => format!(
            "the --verify check could not run: {}; no repair turn was spent on it",
            check.error.clone().unwrap_or_default()
        ),
        None => format!(
            "the --verify check failed: {}",
            check.error.clone().unwrap_or_else(|| "killed".to_owned())
        ),
    };
    let hint = envelope
        .session_id
        .clone()
        // Only for a run whose own failure is the check's.
        .filter(|_| !check.not_started && envelope.success)
        .zip(request.checks.verify.as_ref())
        .map(|(id, verify)| run.verify_hint(&id, verify));
    let summary = match &turn_failed {
        Some(turn) => format!(
            "{summary}; the repair turn before it failed ({}: {})",
            turn.error_kind.as_str(),
            crate::text::one_line(turn.error.as_deref().unwrap_or_default(), 200)
        ),
        None => summary,
    };
    run.fail(envelope, ErrorKind::VerifyFailed, summary, |detail| {
        if let Some(turn) = turn_failed {
            detail.provider_error = turn.provider_error;
            detail.retry_refused = turn.retry_refused;
        }
        detail.exit_code = check.exit_code;
        let from = check.tail.len().saturating_sub(outcome_tail_len());
        detail.last_lines = check.tail[from..].to_vec();
        detail.signal = check.signal.clone();
        detail.resume_hint = detail.resume_hint.take().or(hint);
        if !shell_could_not(check).is_empty()
            && let Some(verify) = &request.checks.verify
        {
            detail.hint = Some(format!(
                "`coder sandbox --cd {} -- sh -c {}` runs the check as the run did, to see \
                 what it finds",
                crate::text::shell_quote(&request.workspace.display().to_string()),
                crate::text::shell_quote(&verify.command)
            ));
        }
    })
}

/// How a failed repair turn ended, kept when the failing check takes over the run.
struct TurnFailure {
    error_kind: ErrorKind,
    error: Option<String>,
    provider_error: Option<crate::pipeline::provider::ProviderError>,
    retry_refused: Option<String>,
}

/// A run whose last repair turn failed on its own (the backend's error, a limit) while the
/// check after it still fails ends `verify_failed`, as DESIGN §8 has a final failure: the
/// work is not done, whatever stopped the turn. It ended with the turn's kind
/// (`upstream_error`, exit 1) and the verdict `still_failing` only in `verification`.
/// The turn's failure stays in `verification.repair_failed`, its provider error (retry
/// time, cooldown) in `error_detail`. A cancelled turn is never taken over.
fn repair_turn_failure_gives_way(mut envelope: Envelope) -> (Envelope, Option<TurnFailure>) {
    let repair_failed = envelope
        .verification
        .as_ref()
        .is_some_and(|v| v.repair_failed.is_some());
    if envelope.success || !repair_failed || envelope.error_kind == Some(ErrorKind::Cancelled) {
        return (envelope, None);
    }
    let detail = envelope.error_detail.take();
    let turn = TurnFailure {
        error_kind: envelope
            .error_kind
            .take()
            .unwrap_or(ErrorKind::SubprocessError),
        error: envelope.error.take(),
        provider_error: detail.as_ref().and_then(|d| d.provider_error.clone()),
        retry_refused: detail.and_then(|d| d.retry_refused),
    };
    // `Run::fail` replaces the failure of an envelope that succeeded.
    envelope.success = true;
    (envelope, Some(turn))
}

/// What the shell's own exit codes say of a failed check: 127 with "not found" in its
/// output (a command of it was not found: a typo, or a tool that is not installed or not
/// on PATH in the sandbox), 126 (found but not executable); else nothing. The envelope
/// said "exit code 127" alone.
fn shell_could_not(check: &Check) -> &'static str {
    let said = |words: &str| check.tail.iter().any(|line| line.contains(words));
    match check.exit_code {
        Some(127) if said("not found") => {
            ": the shell did not find a command of it (a typo, or a tool that is not \
             installed or not on PATH inside the sandbox)"
        }
        Some(126) if said("ermission denied") || said("s a directory") => {
            ": a command of it could not be executed (no execute permission, or a directory)"
        }
        _ => "",
    }
}
