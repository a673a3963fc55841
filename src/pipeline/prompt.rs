//! Prompt assembly: the task text, optionally framed with a task type, target files,
//! requirements, constraints, acceptance criteria and the project documents the caller
//! hands over (Implementation Contract, Implementer Guardrails, Engineering Codex).
//!
//! The templates live in `prompts/` and are compiled into the binary, so a run never
//! depends on files next to the executable. coder never looks for contract or guardrail
//! files on its own: a document is in the prompt only when its flag names it. With none of
//! the framing flags, the task text is sent exactly as given.
//!
//! Substitution is a single pass over the template, so `{{...}}` inside a task or a
//! document is kept literally and never expanded.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::config::ConfigError;

const TASK: &str = include_str!("../../prompts/task.md");
const TASK_TYPE: &str = include_str!("../../prompts/task-type.md");
const TARGETS: &str = include_str!("../../prompts/targets.md");
const REQUIREMENTS: &str = include_str!("../../prompts/requirements.md");
const CONSTRAINTS: &str = include_str!("../../prompts/constraints.md");
const ACCEPTANCE: &str = include_str!("../../prompts/acceptance.md");
const CONTRACT: &str = include_str!("../../prompts/contract.md");
const GUARDRAILS: &str = include_str!("../../prompts/guardrails.md");
const CODEX: &str = include_str!("../../prompts/codex.md");
const SCOPE: &str = include_str!("../../prompts/scope.md");
const PLAN: &str = include_str!("../../prompts/plan.md");
const PLAN_WRITE: &str = include_str!("../../prompts/plan-write.md");

/// The task of a `--plan FILE` run (and `coder prompt --plan FILE`) given none: the
/// plan, its own section of the prompt, says what to do.
pub const PLAN_TASK: &str = "Carry out the plan.";

/// The longest prompt the claude CLI takes on its stdin: 10 MiB, counted as it counts, in
/// UTF-16 code units (measured on 2.1.330: longer, it exits with "piped stdin input exceeds
/// 10MB" before any request).
pub const MAX_PROMPT_UNITS: usize = 10 * 1024 * 1024;

/// The most stdin bytes read for a task: a UTF-8 text takes at most 3 bytes per UTF-16 code
/// unit, so more than this is certainly over [`MAX_PROMPT_UNITS`].
pub const MAX_TASK_STDIN_BYTES: usize = 3 * MAX_PROMPT_UNITS;

/// Refuses a prompt the claude CLI would refuse.
pub fn check_prompt_size(prompt: &str) -> Result<(), ConfigError> {
    if prompt.len() <= MAX_PROMPT_UNITS {
        return Ok(());
    }
    let units = prompt.encode_utf16().count();
    if units <= MAX_PROMPT_UNITS {
        return Ok(());
    }
    Err(ConfigError::PromptTooLarge {
        what: format!("{units} characters"),
        limit: MAX_PROMPT_UNITS,
    })
}

/// The error for a task on stdin over [`MAX_TASK_STDIN_BYTES`].
pub fn stdin_too_large() -> ConfigError {
    ConfigError::PromptTooLarge {
        what: format!("stdin holds more than {MAX_TASK_STDIN_BYTES} bytes"),
        limit: MAX_PROMPT_UNITS,
    }
}

/// The task types with guidance of their own; any other type is named without guidance.
pub const TASK_TYPES: [(&str, &str); 7] = [
    (
        "feature",
        include_str!("../../prompts/task-types/feature.md"),
    ),
    ("bugfix", include_str!("../../prompts/task-types/bugfix.md")),
    (
        "refactor",
        include_str!("../../prompts/task-types/refactor.md"),
    ),
    ("test", include_str!("../../prompts/task-types/test.md")),
    ("docs", include_str!("../../prompts/task-types/docs.md")),
    ("review", include_str!("../../prompts/task-types/review.md")),
    (
        "investigate",
        include_str!("../../prompts/task-types/investigate.md"),
    ),
];

/// Largest document coder puts into a prompt.
pub const MAX_DOCUMENT_BYTES: u64 = 256 * 1024;

/// The prompt-framing flags, shared by run mode and `coder prompt`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PromptArgs {
    /// Implementation Contract to include, binding on the agent (a file; never looked up
    /// on its own).
    #[arg(long, value_name = "FILE")]
    pub contract: Option<PathBuf>,

    /// Implementer Guardrails to include (a file).
    #[arg(long, value_name = "FILE")]
    pub guardrails: Option<PathBuf>,

    /// Engineering Codex to include (a file).
    #[arg(long, value_name = "FILE")]
    pub codex: Option<PathBuf>,

    /// Kind of task: feature, bugfix, refactor, test, docs, review, investigate, or any
    /// other word.
    #[arg(long = "task-type", value_name = "TYPE", value_parser = crate::text::non_blank)]
    pub task_type: Option<String>,

    /// A file the task should change (repeatable).
    #[arg(
        long = "target",
        visible_alias = "target-file",
        value_name = "PATH",
        value_parser = crate::text::non_blank
    )]
    pub targets: Vec<String>,

    /// A requirement (repeatable).
    #[arg(long = "requirement", value_name = "TEXT", value_parser = crate::text::non_blank)]
    pub requirements: Vec<String>,

    /// A constraint (repeatable).
    #[arg(long = "constraint", value_name = "TEXT", value_parser = crate::text::non_blank)]
    pub constraints: Vec<String>,

    /// An acceptance criterion (repeatable).
    #[arg(
        long = "acceptance",
        visible_alias = "acceptance-criterion",
        value_name = "TEXT",
        value_parser = crate::text::non_blank
    )]
    pub acceptance: Vec<String>,

    /// Carry out this plan (a file written by `coder plan`), included as its own section;
    /// the run starts a fresh session. The task may be left out: it is then "Carry out the
    /// plan."
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,

    /// `coder plan`: the file the agent is told to write its plan to (set by that
    /// command, not a flag).
    #[arg(skip)]
    pub plan_output: Option<PathBuf>,
}

impl PromptArgs {
    /// Whether no framing flag was given (the task is then sent as is).
    pub fn is_empty(&self) -> bool {
        self.contract.is_none()
            && self.guardrails.is_none()
            && self.codex.is_none()
            && self
                .task_type
                .as_deref()
                .is_none_or(|t| t.trim().is_empty())
            && items(&self.targets).next().is_none()
            && items(&self.requirements).next().is_none()
            && items(&self.constraints).next().is_none()
            && items(&self.acceptance).next().is_none()
            && self.plan.is_none()
            && self.plan_output.is_none()
    }
}

/// Replaces each `{{name}}` of `template` with its value in one pass; unknown names are
/// kept as they are.
fn render(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let replaced = after.find("}}").and_then(|end| {
            let name = &after[..end];
            values
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v, end))
        });
        match replaced {
            Some((value, end)) => {
                out.push_str(value);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.trim_end().to_owned()
}

/// The non-blank entries of a repeatable flag, trimmed.
fn items(list: &[String]) -> impl Iterator<Item = &str> {
    list.iter().map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// A Markdown list; continuation lines of multi-line items are indented under their item.
fn list<'a>(entries: impl Iterator<Item = &'a str>, numbered: bool) -> String {
    let mut out = String::new();
    for (i, entry) in entries.enumerate() {
        let marker = if numbered {
            format!("{}. ", i + 1)
        } else {
            "- ".to_owned()
        };
        let indent = " ".repeat(marker.len());
        for (j, line) in entry.lines().enumerate() {
            if j == 0 {
                out.push_str(&marker);
            } else if !line.is_empty() {
                out.push_str(&indent);
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    out.trim_end().to_owned()
}

/// What is wrong with a file a flag names that cannot be read, in words (not the OS's
/// "Is a directory (os error 21)").
pub fn file_problem(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        std::io::ErrorKind::IsADirectory => "is a directory; name a file".to_owned(),
        std::io::ErrorKind::NotADirectory => "a part of the path is not a directory".to_owned(),
        _ => e.to_string(),
    }
}

/// Reads a document named by `--flag`, as UTF-8 text of bounded size.
fn read_document(flag: &'static str, path: &Path) -> Result<String, ConfigError> {
    let problem = |problem: String| ConfigError::PromptFile {
        flag,
        path: path.to_owned(),
        problem,
    };
    let file = std::fs::File::open(path).map_err(|e| problem(file_problem(&e)))?;
    let mut bytes = Vec::new();
    file.take(MAX_DOCUMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| problem(file_problem(&e)))?;
    if bytes.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(problem(format!(
            "larger than {} KiB; pass a shorter document",
            MAX_DOCUMENT_BYTES / 1024
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| problem("not UTF-8 text".into()))?;
    if text.trim().is_empty() {
        return Err(problem("the file is empty".into()));
    }
    Ok(text.trim_end().to_owned())
}

/// A document section: its template filled with the file's content and where it came from.
fn document(template: &str, flag: &'static str, path: &Path) -> Result<String, ConfigError> {
    let content = read_document(flag, path)?;
    let source = path.display().to_string().replace('"', "'");
    Ok(render(
        template,
        &[("source", source.as_str()), ("content", content.as_str())],
    ))
}

/// The prompt for `task` framed by `args`; `task` itself when `args` frames nothing.
pub fn assemble_prompt(task: &str, args: &PromptArgs) -> Result<String, ConfigError> {
    if task.trim().is_empty() {
        return Err(ConfigError::EmptyTask);
    }
    if args.is_empty() {
        check_prompt_size(task)?;
        return Ok(task.to_owned());
    }
    let mut sections = vec![render(TASK, &[("task", task.trim())])];
    if let Some(kind) = args
        .task_type
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let guidance = TASK_TYPES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(kind))
            .map_or("", |(_, text)| text.trim());
        sections.push(render(TASK_TYPE, &[("name", kind), ("guidance", guidance)]));
    }
    for (template, entries, numbered) in [
        (TARGETS, &args.targets, false),
        (REQUIREMENTS, &args.requirements, true),
        (CONSTRAINTS, &args.constraints, false),
        (ACCEPTANCE, &args.acceptance, false),
    ] {
        if items(entries).next().is_some() {
            let list = list(items(entries), numbered);
            sections.push(render(template, &[("list", list.as_str())]));
        }
    }
    if let Some(path) = &args.contract {
        sections.push(document(CONTRACT, "contract", path)?);
    }
    if let Some(path) = &args.guardrails {
        sections.push(document(GUARDRAILS, "guardrails", path)?);
    }
    if let Some(path) = &args.codex {
        sections.push(document(CODEX, "codex", path)?);
    }
    if let Some(path) = &args.plan {
        sections.push(document(PLAN, "plan", path)?);
    }
    if args.contract.is_some() || args.guardrails.is_some() {
        sections.push(render(SCOPE, &[]));
    }
    if let Some(path) = &args.plan_output {
        let path = path.display().to_string();
        sections.push(render(PLAN_WRITE, &[("path", path.as_str())]));
    }
    let mut prompt = sections.join("\n\n");
    prompt.push('\n');
    check_prompt_size(&prompt)?;
    Ok(prompt)
}

/// `coder prompt [FLAGS] [PROMPT | -]`
/// Reads the task from stdin, refusing to wait on a terminal.
pub fn read_task_from_stdin() -> Result<String, ConfigError> {
    use crate::text::stdin::{StdinError, read_task};
    read_task(&mut std::io::stdin(), MAX_TASK_STDIN_BYTES).map_err(|e| match e {
        StdinError::Terminal => ConfigError::EmptyTask,
        StdinError::TooLarge { .. } => stdin_too_large(),
        StdinError::Io(e) => ConfigError::Stdin(e),
        e @ StdinError::NotUtf8 { .. } => {
            ConfigError::Stdin(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_is_single_pass_and_keeps_unknown_names() {
        assert_eq!(
            render("a {{x}} b {{y}} {{", &[("x", "{{y}}")]),
            "a {{y}} b {{y}} {{"
        );
    }

    #[test]
    fn templates_have_no_unfilled_placeholders() {
        let filled = [
            render(TASK, &[("task", "t")]),
            render(TASK_TYPE, &[("name", "n"), ("guidance", "g")]),
            render(TARGETS, &[("list", "l")]),
            render(REQUIREMENTS, &[("list", "l")]),
            render(CONSTRAINTS, &[("list", "l")]),
            render(ACCEPTANCE, &[("list", "l")]),
            render(CONTRACT, &[("source", "s"), ("content", "c")]),
            render(GUARDRAILS, &[("source", "s"), ("content", "c")]),
            render(CODEX, &[("source", "s"), ("content", "c")]),
            render(SCOPE, &[]),
            render(PLAN, &[("source", "s"), ("content", "c")]),
            render(PLAN_WRITE, &[("path", "p")]),
        ];
        for text in filled {
            assert!(!text.contains("{{"), "{text}");
        }
    }

    #[test]
    fn lists_indent_continuation_lines() {
        let entries = ["one\nmore".to_owned(), "  ".to_owned(), "two".to_owned()];
        assert_eq!(list(items(&entries), true), "1. one\n   more\n2. two");
        assert_eq!(list(items(&entries), false), "- one\n  more\n- two");
    }

    #[test]
    fn blank_flags_frame_nothing() {
        let args = PromptArgs {
            task_type: Some(" ".into()),
            requirements: vec![String::new()],
            ..PromptArgs::default()
        };
        assert!(args.is_empty());
        assert_eq!(
            assemble_prompt("  fix it \n", &args).unwrap(),
            "  fix it \n"
        );
        assert!(matches!(
            assemble_prompt(" \n", &args),
            Err(ConfigError::EmptyTask)
        ));
    }
}
