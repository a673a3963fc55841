//! Reading transcripts back: the run summaries of `coder runs list` and the readable
//! account of `coder runs show` (the subcommand's entry point is in `commands`).
//!
//! Both work from the transcript files alone (see [`crate::journal::transcript`]), so they also
//! describe runs whose coder was killed: such a run simply has no `outcome` entry and is
//! listed as `unfinished`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use crate::text::one_line;
use crate::text::tool_result::Join;

/// One line of `coder runs list`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunSummary {
    pub run_id: String,
    pub started: String,
    pub workspace: String,
    pub backend: String,
    /// `success`, an error kind, or `unfinished`.
    pub outcome: String,
    pub duration_ms: Option<u64>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub session_id: Option<String>,
    pub path: String,
}

/// Reads a transcript's entries; a last line cut off by a kill is skipped.
pub fn read_entries(path: &Path) -> std::io::Result<Vec<Value>> {
    let file = std::fs::File::open(path)?;
    let mut entries = Vec::new();
    for line in BufReader::new(file).split(b'\n') {
        if let Ok(value) = serde_json::from_slice::<Value>(&line?) {
            entries.push(value);
        }
    }
    Ok(entries)
}

/// The transcripts in `dir`, newest first; none when `dir` does not exist yet (no run has
/// been recorded), an error when it cannot be read (not a directory, no permission).
fn transcripts(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    // Run ids start with their UTC start time, so names sort by age.
    paths.sort();
    paths.reverse();
    Ok(paths)
}

/// The newest `limit` runs, newest first; an error when `dir` exists but cannot be read.
pub fn list_runs(dir: &Path, limit: usize) -> std::io::Result<Vec<RunSummary>> {
    Ok(transcripts(dir)?
        .into_iter()
        .take(limit)
        .filter_map(|path| summarize(&path))
        .collect())
}

fn summarize(path: &Path) -> Option<RunSummary> {
    let entries = read_entries(path).ok()?;
    let start = entries.iter().find(|e| e["kind"] == "start")?;
    let outcome = entries.iter().rev().find(|e| e["kind"] == "outcome");
    let usage = outcome.map(|o| &o["data"]["metrics"]["usage"]);
    Some(RunSummary {
        run_id: start["data"]["run_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        started: start["ts"].as_str().unwrap_or_default().to_owned(),
        workspace: start["data"]["workspace"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        backend: start["data"]["backend"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        outcome: match outcome {
            Some(o) if o["data"]["success"] == true => "success".to_owned(),
            Some(o) => o["data"]["error_kind"]
                .as_str()
                .unwrap_or("failed")
                .to_owned(),
            None => "unfinished".to_owned(),
        },
        duration_ms: outcome.and_then(|o| o["data"]["duration_ms"].as_u64()),
        tokens_in: usage.and_then(|u| u["input"].as_u64()).unwrap_or(0),
        tokens_out: usage.and_then(|u| u["output"].as_u64()).unwrap_or(0),
        session_id: outcome
            .and_then(|o| o["data"]["SESSION_ID"].as_str())
            .map(str::to_owned),
        path: path.display().to_string(),
    })
}

pub fn find_run(dir: &Path, wanted: &str) -> Option<PathBuf> {
    let as_path = Path::new(wanted);
    if wanted.ends_with(".jsonl") && as_path.is_file() {
        return Some(as_path.to_owned());
    }
    let all = transcripts(dir).unwrap_or_default();
    if wanted == "last" {
        return all.into_iter().next();
    }
    let matches: Vec<PathBuf> = all
        .into_iter()
        .filter(|p| {
            p.file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(|s| s.starts_with(wanted))
        })
        .collect();
    match matches.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// How many recorded runs' ids start with `wanted`: what `runs show` says when
/// [`find_run`] finds none, as more than one is not "no run matches".
pub fn count_prefixed(dir: &Path, wanted: &str) -> usize {
    transcripts(dir)
        .unwrap_or_default()
        .iter()
        .filter(|p| {
            p.file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(|s| s.starts_with(wanted))
        })
        .count()
}

/// What `runs show` reports, built from the transcript entries.
pub fn account(entries: &[Value]) -> Value {
    let start = entries.iter().find(|e| e["kind"] == "start");
    let outcome = entries.iter().rev().find(|e| e["kind"] == "outcome");
    let mut tools: Vec<Value> = Vec::new();
    let mut denials: Vec<Value> = Vec::new();
    let mut coder_notes: Vec<Value> = Vec::new();
    for entry in entries {
        match (entry["source"].as_str(), entry["kind"].as_str()) {
            (Some("coder"), Some(kind @ ("watchdog" | "kill" | "retry" | "attempt"))) => {
                coder_notes.push(json!({"ts": entry["ts"], "kind": kind, "data": entry["data"]}));
            }
            (Some("child"), Some("event")) => {
                let event = &entry["event"];
                if event["type"] == "system" && event["subtype"] == "permission_denied" {
                    denials.push(json!({
                        "tool": event["tool_name"],
                        "message": one_line(event["message"].as_str().unwrap_or(""), 200),
                    }));
                }
                for block in event["message"]["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("tool_use") if event["type"] == "assistant" => tools.push(json!({
                            "id": block["id"],
                            "tool": block["name"],
                            "input": one_line(&compact(&block["input"]), 300),
                            "ts": entry["ts"],
                        })),
                        Some("tool_result") => {
                            let id = &block["tool_use_id"];
                            if let Some(call) = tools.iter_mut().rev().find(|t| t["id"] == *id) {
                                call["result"] =
                                    json!(text_head(&content_text(&block["content"]), 300));
                                call["is_error"] =
                                    json!(block["is_error"].as_bool().unwrap_or(false));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    json!({
        "run_id": start.map(|s| s["data"]["run_id"].clone()),
        "started": start.map(|s| s["ts"].clone()),
        "workspace": start.map(|s| s["data"]["workspace"].clone()),
        "backend": start.map(|s| s["data"]["backend"].clone()),
        "prompt_head": start.map(|s| one_line(s["data"]["prompt"].as_str().unwrap_or(""), 200)),
        "tool_calls": tools,
        "denials": denials,
        "supervision": coder_notes,
        "outcome": outcome.map_or(json!({"unfinished": true}), |o| o["data"].clone()),
    })
}

/// What a run is doing, from its journal so far: `{phase, tool, turns, tokens_in,
/// tokens_out}` (`coder mcp` sends it with its progress notifications). A running fold
/// over the journal's entries, so a reader that follows a growing
/// transcript feeds it only the entries appended since its last look. The phase is
/// `queued`, `starting`, `running`, `verifying` or `repairing`; `tool` the last tool the
/// model called; `turns` the model's messages; tokens are summed per message (the stream
/// repeats a message's usage on each of its events, so the last one of each counts).
#[derive(Debug, Clone)]
pub struct Activity {
    phase: &'static str,
    tool: Value,
    per_message: Vec<(String, u64, u64)>,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            phase: "starting",
            tool: Value::Null,
            per_message: Vec::new(),
        }
    }
}

impl Activity {
    pub fn absorb(&mut self, entry: &Value) {
        match (entry["source"].as_str(), entry["kind"].as_str()) {
            (Some("coder"), Some("queued")) if entry["data"]["state"] == "waiting" => {
                self.phase = "queued";
            }
            (Some("coder"), Some("queued")) => self.phase = "starting",
            (Some("coder"), Some("spawn" | "attempt" | "fallback")) => self.phase = "running",
            (Some("coder"), Some("verify")) => self.phase = "verifying",
            (Some("coder"), Some("repair")) => self.phase = "repairing",
            (Some("child"), Some("event")) if entry["event"]["type"] == "assistant" => {
                let message = &entry["event"]["message"];
                for block in message["content"].as_array().into_iter().flatten() {
                    if block["type"] == "tool_use" {
                        self.tool = block["name"].clone();
                    }
                }
                let id = message["id"].as_str().unwrap_or_default().to_owned();
                let usage = &entry["usage"];
                let tokens = (
                    usage["input_tokens"].as_u64().unwrap_or(0),
                    usage["output_tokens"].as_u64().unwrap_or(0),
                );
                match self
                    .per_message
                    .iter_mut()
                    .find(|(m, ..)| *m == id && !id.is_empty())
                {
                    Some(seen) => (seen.1, seen.2) = tokens,
                    None => self.per_message.push((id, tokens.0, tokens.1)),
                }
            }
            _ => {}
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "phase": self.phase,
            "tool": self.tool,
            "turns": self.per_message.len(),
            "tokens_in": self.per_message.iter().map(|m| m.1).sum::<u64>(),
            "tokens_out": self.per_message.iter().map(|m| m.2).sum::<u64>(),
        })
    }
}

/// The first `max_chars` characters of a multi-line text on one line (`⏎` between lines).
fn text_head(text: &str, max_chars: usize) -> String {
    let joined = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ⏎ ");
    one_line(&joined, max_chars)
}

fn compact(value: &Value) -> String {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// A tool result's content on one line; a content that is not text is shown as JSON.
fn content_text(content: &Value) -> String {
    crate::text::tool_result::content_text(content, Join::Spaces).unwrap_or_else(|| match content {
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// The readable form of [`account`].
pub fn render(account: &Value) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "run       {}", text(&account["run_id"]));
    let _ = writeln!(out, "started   {}", text(&account["started"]));
    let _ = writeln!(out, "workspace {}", text(&account["workspace"]));
    let _ = writeln!(out, "backend   {}", text(&account["backend"]));
    let _ = writeln!(out, "prompt    {}", text(&account["prompt_head"]));
    let tools = account["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let _ = writeln!(out, "\ntool calls ({}):", tools.len());
    for call in &tools {
        let mark = if call["is_error"] == true {
            "✗"
        } else {
            "✓"
        };
        let _ = writeln!(
            out,
            "  {mark} {}({})",
            text(&call["tool"]),
            text(&call["input"])
        );
        if let Some(result) = call["result"].as_str() {
            let _ = writeln!(out, "      → {result}");
        }
    }
    let denials = account["denials"].as_array().cloned().unwrap_or_default();
    if !denials.is_empty() {
        let _ = writeln!(out, "\ndenials ({}):", denials.len());
        for d in &denials {
            let _ = writeln!(out, "  {}: {}", text(&d["tool"]), text(&d["message"]));
        }
    }
    for note in account["supervision"].as_array().into_iter().flatten() {
        if note["kind"] == "watchdog" || note["kind"] == "kill" || note["kind"] == "retry" {
            let _ = writeln!(out, "\n{} {}", text(&note["kind"]), note["data"]);
        }
    }
    let outcome = &account["outcome"];
    let _ = writeln!(out);
    if outcome["unfinished"] == true {
        let _ = writeln!(
            out,
            "outcome   unfinished (coder was stopped before it ended)"
        );
    } else if outcome["success"] == true {
        let _ = writeln!(out, "outcome   success in {} ms", outcome["duration_ms"]);
        let _ = writeln!(out, "result    {}", text(&outcome["result"]));
    } else {
        let _ = writeln!(
            out,
            "outcome   {} (exit {}): {}",
            text(&outcome["error_kind"]),
            outcome["exit_code"],
            text(&outcome["error"])
        );
    }
    if let Some(session) = outcome["SESSION_ID"].as_str() {
        let _ = writeln!(out, "session   {session}");
    }
    render_questions(&mut out, outcome);
    render_outcome_checks(&mut out, outcome);
    out
}

/// What the model asked before the run stopped `needs_input` (DESIGN §9).
fn render_questions(out: &mut String, outcome: &Value) {
    use std::fmt::Write;
    let Some(questions) = outcome["questions"].as_array() else {
        return;
    };
    let _ = writeln!(out, "\nquestions ({}):", questions.len());
    for (i, q) in questions.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {}. {}",
            i + 1,
            q["question"].as_str().unwrap_or("?")
        );
        let options: Vec<&str> = q["options"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !options.is_empty() {
            let _ = writeln!(out, "     options: {}", options.join(" | "));
        }
        if let Some(why) = q["why"].as_str() {
            let _ = writeln!(out, "     why: {why}");
        }
    }
}

/// The verified outcome of a run (DESIGN §8): what changed, the checks and their verdict,
/// the fallback turn; then where its work went (worktree, routing, the plan of a plan
/// run or the plan carried out, git guard), and the run's warnings.
fn render_outcome_checks(out: &mut String, outcome: &Value) {
    render_changes(out, &outcome["changes"]);
    render_verification(out, &outcome["verification"]);
    render_fallback(out, &outcome["fallback"]);
    render_structured(out, outcome);
    render_where_work_went(out, outcome);
    render_warnings(out, outcome);
}

/// A JSON value as text: a string as it is, anything else as JSON.
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// `changes`: the files the run changed, then what it changed under ignored paths.
fn render_changes(out: &mut String, changes: &Value) {
    use std::fmt::Write;
    let Some(files) = changes["files"].as_array() else {
        return;
    };
    let cut = if changes["truncated"] == true {
        ", list truncated"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "\nchanges ({} files, +{} -{}{cut}):",
        changes["files_changed"], changes["lines_added"], changes["lines_removed"],
    );
    for f in files {
        let _ = writeln!(
            out,
            "  {:<8} {} (+{} -{})",
            text(&f["status"]),
            text(&f["path"]),
            f["lines_added"],
            f["lines_removed"]
        );
    }
    let ignored = &changes["ignored"];
    let Some(paths) = ignored["paths"].as_array() else {
        return;
    };
    let cut = if ignored["truncated"] == true {
        ", list truncated"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "changed under ignored paths ({}{cut}):",
        ignored["count"]
    );
    for p in paths {
        let _ = writeln!(out, "  {:<8} {}", text(&p["status"]), text(&p["path"]));
    }
}

/// `verification`: the check's command and verdict, then each phase with its tail.
fn render_verification(out: &mut String, v: &Value) {
    use std::fmt::Write;
    if !v.is_object() {
        return;
    }
    let _ = writeln!(
        out,
        "\nverification `{}`: {} ({} repair turn(s))",
        text(&v["command"]),
        text(&v["verdict"]),
        v["repair_turns"]
    );
    for phase in ["baseline", "after_agent", "final"] {
        let check = &v[phase];
        if !check.is_object() {
            continue;
        }
        let verdict = if check["passed"] == true {
            "passed"
        } else {
            "failed"
        };
        let _ = writeln!(
            out,
            "  {phase:<11} {verdict}, exit {} in {} ms",
            check["exit_code"], check["duration_ms"]
        );
        let tail = check["tail"].as_array().cloned().unwrap_or_default();
        for line in tail.iter().skip(tail.len().saturating_sub(5)) {
            let _ = writeln!(out, "      | {}", text(line));
        }
    }
}

/// `fallback`: what triggered the fallback turn, on which files, and whether it applied.
fn render_fallback(out: &mut String, fallback: &Value) {
    use std::fmt::Write;
    if !fallback.is_object() {
        return;
    }
    let files: Vec<String> = fallback["files"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    let applied = if fallback["applied"] == true {
        "applied"
    } else {
        "not applied"
    };
    let _ = writeln!(
        out,
        "\nfallback  {} on {} ({applied})",
        text(&fallback["trigger"]),
        files.join(", "),
    );
}

/// Where the run's work went: its worktree, the routing choice, the plan, and what the
/// end-of-run guards moved aside.
fn render_where_work_went(out: &mut String, outcome: &Value) {
    use std::fmt::Write;
    let w = &outcome["worktree"];
    if w.is_object() {
        let _ = writeln!(
            out,
            "worktree  branch {} commit {}",
            text(&w["branch"]),
            text(&w["commit"])
        );
    }
    let r = &outcome["routing"];
    if r.is_object() {
        let _ = writeln!(
            out,
            "routing   {} chose {} (propensity {})",
            text(&r["policy"]),
            text(&r["chosen"]),
            r["propensity"]
        );
    }
    if let Some(plan_file) = outcome["plan_file"].as_str() {
        let _ = writeln!(out, "\nplan      {plan_file}");
        for line in outcome["plan_head"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  | {}", text(line));
        }
    }
    let quarantined = outcome["sandbox"]["quarantined"].as_array();
    for q in quarantined.into_iter().flatten() {
        let (path, to) = (text(&q["path"]), text(&q["to"]));
        if q["kind"] == "tool_config" {
            let _ = writeln!(out, "tool-config guard moved {path} to {to}");
        } else {
            let _ = writeln!(out, "git guard moved {} of {path} to {to}", q["moved"]);
        }
        // A --worktree run's checkout is gone: where the moved thing is now.
        if let Some(at) = q["in_commit"].as_str() {
            let _ = writeln!(out, "  now in the branch's commit: {at}");
        } else if q["removed"] == true {
            let _ = writeln!(out, "  removed with the --worktree checkout");
        }
    }
}

/// The run's `warnings`, as the envelope gave them: what a reader of a past run must not
/// miss (directories that could not be read, changes under ignored paths outside the
/// scope, what a guard moved aside).
fn render_warnings(out: &mut String, outcome: &Value) {
    use std::fmt::Write;
    let Some(warnings) = outcome["warnings"].as_array().filter(|w| !w.is_empty()) else {
        return;
    };
    let _ = writeln!(out, "\nwarnings ({}):", warnings.len());
    for w in warnings {
        let _ = writeln!(out, "  - {}", text(w));
    }
}

/// `--json-schema` (DESIGN §9): the structured answer, or why it did not match, and the
/// repair turn when there was one.
fn render_structured(out: &mut String, outcome: &Value) {
    use std::fmt::Write;
    /// The answer is shown up to this many characters.
    const SHOWN: usize = 2000;
    let repair = &outcome["schema_repair"];
    if repair.is_object() {
        let verdict = if repair["fixed"] == true {
            "fixed the answer"
        } else {
            "did not fix the answer"
        };
        let _ = writeln!(out, "\nschema repair turn {verdict}; before it:");
        for error in repair["errors"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  - {}", error.as_str().unwrap_or_default());
        }
    }
    if !outcome["structured"].is_null() {
        let pretty = serde_json::to_string_pretty(&outcome["structured"]).unwrap_or_default();
        let shown = crate::text::head_with_marker(&pretty, SHOWN);
        let _ = writeln!(out, "\nstructured (matches --json-schema):");
        for line in shown.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let Some(errors) = outcome["schema_errors"].as_array() {
        let _ = writeln!(
            out,
            "\nstructured: the answer does not match --json-schema:"
        );
        for error in errors {
            let _ = writeln!(out, "  - {}", error.as_str().unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activity(entries: &[Value]) -> Value {
        let mut activity = Activity::default();
        entries.iter().for_each(|e| activity.absorb(e));
        activity.to_json()
    }

    #[test]
    fn activity_follows_the_phases_tools_and_tokens() {
        let assistant = |id: &str, tool: Option<&str>, out: u64| {
            let content = match tool {
                Some(name) => json!([{"type": "tool_use", "id": "t", "name": name, "input": {}}]),
                None => json!([{"type": "text", "text": "hi"}]),
            };
            json!({"source": "child", "kind": "event",
                   "usage": {"input_tokens": 10, "output_tokens": out},
                   "event": {"type": "assistant", "message": {"id": id, "content": content}}})
        };
        let mut entries =
            vec![json!({"source": "coder", "kind": "queued", "data": {"state": "waiting"}})];
        assert_eq!(activity(&entries)["phase"], "queued");
        entries.push(json!({"source": "coder", "kind": "spawn", "data": {}}));
        entries.push(assistant("m1", None, 1));
        entries.push(assistant("m1", Some("Bash"), 5));
        entries.push(assistant("m2", Some("Edit"), 7));
        let now = activity(&entries);
        assert_eq!(now["phase"], "running");
        assert_eq!(now["tool"], "Edit");
        assert_eq!(now["turns"], 2);
        assert_eq!(
            (now["tokens_in"].clone(), now["tokens_out"].clone()),
            (json!(20), json!(12))
        );
        entries.push(json!({"source": "coder", "kind": "verify", "data": {"phase": "final"}}));
        assert_eq!(activity(&entries)["phase"], "verifying");
        entries.push(json!({"source": "coder", "kind": "repair", "data": {"turn": 1}}));
        assert_eq!(activity(&entries)["phase"], "repairing");
    }

    #[test]
    fn account_pairs_tool_calls_with_results() {
        let entries: Vec<Value> = vec![
            json!({"ts": "t0", "source": "coder", "kind": "start", "data": {"run_id": "r1", "prompt": "make it\nwork", "workspace": "/ws", "backend": "glm"}}),
            json!({"ts": "t1", "source": "child", "kind": "event", "event": {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}}]}}}),
            json!({"ts": "t2", "source": "child", "kind": "event", "event": {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "built"}]}]}}}),
        ];
        let account = account(&entries);
        assert_eq!(account["tool_calls"][0]["tool"], "Bash");
        assert_eq!(account["tool_calls"][0]["result"], "built");
        assert_eq!(account["outcome"]["unfinished"], true);
        let text = render(&account);
        assert!(text.contains("✓ Bash(command=make)"), "{text}");
        assert!(text.contains("unfinished"));
        assert!(text.contains("make it…"));
    }
}
