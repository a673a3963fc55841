//! Recognising sandbox denials in what the agent's tools report. (Keeping secret values out
//! of what coder prints is [`crate::text::redact`]'s job.)
//!
//! The agent sees a denial as an ordinary error string (`cat: .env: Permission denied`,
//! `EROFS: read-only file system, open '…'`, `kill: (42) - Operation not permitted`), and
//! Bash results carry `is_error: false` even then, so the text is all there is. The
//! heuristics here look at error-shaped lines only, so a source file that merely mentions
//! `EACCES` is not a denial.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::policy::Policy;

/// What kind of boundary an operation hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialClass {
    /// A masked secret (known only with the policy at hand).
    NonAccessible,
    /// A path the mode does not grant (`EACCES`).
    OutsideSandbox,
    /// A write to something read-only: a mask, `.git/hooks`, the workspace in read-only
    /// mode (`EROFS`, `EBUSY`).
    ReadOnly,
    /// A link or rename across a sandbox boundary (`EXDEV`).
    CrossDevice,
    /// A connection the network sandbox refused (a host not on the allow-list).
    Network,
    /// A signal, mount or abstract socket outside the sandbox (`EPERM`).
    NotPermitted,
}

impl DenialClass {
    pub fn as_str(self) -> &'static str {
        match self {
            DenialClass::NonAccessible => "non_accessible",
            DenialClass::OutsideSandbox => "outside_sandbox",
            DenialClass::ReadOnly => "read_only",
            DenialClass::CrossDevice => "cross_device",
            DenialClass::Network => "network",
            DenialClass::NotPermitted => "not_permitted",
        }
    }
}

/// One denial found in a tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    pub tool: String,
    pub path: Option<String>,
    /// The refused `host:port`, for a request the egress proxy refused (`tool` is then
    /// `proxy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub class: DenialClass,
}

/// Tools whose output is other files' content or search hits, where error words are
/// data, not errors.
const CONTENT_TOOLS: [&str; 7] = [
    "Grep",
    "Glob",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "Task",
    "Agent",
];

/// Tools whose errors are Node-style (`EACCES: permission denied, open '…'`), and whose
/// successful output is file content that must not be scanned line by line.
const FILE_TOOLS: [&str; 5] = ["Read", "Write", "Edit", "MultiEdit", "NotebookEdit"];

/// File tools whose every refusal is of a write.
const WRITE_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// What creating a file at a name held absent (a symlink to `/dev/null/coder-absent`)
/// answers: a denial only where the line names such a name ([`Policy::is_held_file`]),
/// an ordinary error elsewhere.
const HELD_ABSENT_MESSAGES: [&str; 3] = ["not a directory", "directory nonexistent", "enotdir"];

/// Error messages and errno names, with the class each one means.
const MESSAGES: [(&str, DenialClass); 10] = [
    ("permission denied", DenialClass::OutsideSandbox),
    ("operation not permitted", DenialClass::NotPermitted),
    ("read-only file system", DenialClass::ReadOnly),
    ("device or resource busy", DenialClass::ReadOnly),
    ("invalid cross-device link", DenialClass::CrossDevice),
    ("eacces", DenialClass::OutsideSandbox),
    ("eperm", DenialClass::NotPermitted),
    ("erofs", DenialClass::ReadOnly),
    ("ebusy", DenialClass::ReadOnly),
    ("exdev", DenialClass::CrossDevice),
];

/// The class of the first sandbox denial in a tool result, if any.
pub fn classify_denial(tool: &str, text: &str) -> Option<DenialClass> {
    denial_lines(tool, text).next().map(|(_, class)| class)
}

/// The paths named by denial lines in `text` (any tool), in order, without duplicates.
pub fn denial_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (line, _) in denial_lines("Bash", text) {
        if let Some(path) = path_in_line(line)
            && !paths.contains(&path)
        {
            paths.push(path);
        }
    }
    paths
}

/// Every denial in a tool result, as `{tool, path, class}`. With the policy, denials on
/// masked secrets are told apart (`non_accessible`).
pub fn detect_denials(tool: &str, text: &str, policy: Option<&Policy>) -> Vec<Denial> {
    let mut found: Vec<Denial> = Vec::new();
    for (line, mut class) in denial_lines(tool, text) {
        let path = path_in_line(line);
        if let (Some(policy), Some(p)) = (policy, &path) {
            let absolute = absolute_in(&policy.workspace, p);
            if policy.is_masked(&absolute) {
                class = DenialClass::NonAccessible;
            } else if class == DenialClass::OutsideSandbox
                && WRITE_TOOLS.contains(&tool)
                && policy.is_granted(&absolute)
                && !policy.is_writable(&absolute)
            {
                // Landlock answers a write to a readable path with EACCES, the same as a
                // path outside every grant: a write tool refused inside a read grant (the
                // workspace in read-only mode, a --read path) hit something read-only.
                class = DenialClass::ReadOnly;
            }
        }
        let denial = Denial {
            tool: tool.to_string(),
            path,
            host: None,
            class,
        };
        if !found.contains(&denial) {
            found.push(denial);
        }
    }
    if let Some(policy) = policy {
        for path in held_absent_paths(tool, text) {
            let denial = Denial {
                tool: tool.to_string(),
                path: Some(path),
                host: None,
                class: DenialClass::ReadOnly,
            };
            let held = denial
                .path
                .as_deref()
                .is_some_and(|p| policy.is_held_file(&absolute_in(&policy.workspace, p)));
            if held && !found.contains(&denial) {
                found.push(denial);
            }
        }
    }
    found
}

/// The paths of error lines that say what creating a file at a name held absent says
/// ([`HELD_ABSENT_MESSAGES`]: `sh: cannot create tools/fmt.sh: Directory nonexistent`,
/// `NotADirectoryError: [Errno 20] Not a directory: 'tools/fmt.sh'`, the Write tool's
/// `ENOTDIR: not a directory, open '…'`).
fn held_absent_paths(tool: &str, text: &str) -> Vec<String> {
    error_lines(tool, text)
        .filter_map(|line| {
            let lower = line.to_ascii_lowercase();
            let needle = HELD_ABSENT_MESSAGES.iter().find(|needle| {
                lower.contains(*needle) && (needle.contains(' ') || contains_word(&lower, needle))
            })?;
            let shaped = lower.contains(": ") || lower.contains("[errno") || is_node_error(line);
            shaped.then(|| last_quoted(line).or_else(|| path_before(line, &lower, needle)))?
        })
        .collect()
}

pub(crate) fn absolute_in(workspace: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        workspace.join(p)
    };
    // Lexical normalisation: the path may not exist (any more).
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Lines of `text` that report a denial, with their class.
fn denial_lines<'a>(tool: &str, text: &'a str) -> impl Iterator<Item = (&'a str, DenialClass)> {
    error_lines(tool, text).filter_map(|line| classify_line(line).map(|class| (line, class)))
}

/// The lines of `tool`'s result `text` that may be errors: none of a tool whose output is
/// content or search hits, only the error-shaped ones of a file tool.
fn error_lines<'a>(tool: &str, text: &'a str) -> impl Iterator<Item = &'a str> {
    let skip = CONTENT_TOOLS.contains(&tool);
    let file_tool = FILE_TOOLS.contains(&tool);
    text.lines()
        .take(if skip { 0 } else { usize::MAX })
        .filter(move |line| !file_tool || is_node_error(line) || line.contains("<tool_use_error>"))
}

/// `EACCES: permission denied, open '/x'` (the shape of Node's fs errors).
fn is_node_error(line: &str) -> bool {
    let line = line.trim_start().trim_start_matches("Error: ");
    let code: String = line
        .chars()
        .take_while(|c| c.is_ascii_uppercase())
        .collect();
    code.len() >= 4 && code.starts_with('E') && line[code.len()..].starts_with(':')
}

fn classify_line(line: &str) -> Option<DenialClass> {
    let lower = line.to_ascii_lowercase();
    let (_, class) = MESSAGES.iter().find(|(needle, _)| {
        if needle.starts_with('e') && !needle.contains(' ') {
            contains_word(&lower, needle)
        } else {
            lower.contains(needle)
        }
    })?;
    let shaped = lower.contains(": ")
        || lower.contains("[errno")
        || lower.contains(" - ")
        || is_node_error(line);
    if !shaped {
        return None;
    }
    let network = lower.contains("connect") || lower.contains("/dev/tcp/");
    Some(match class {
        DenialClass::OutsideSandbox if network => DenialClass::Network,
        other => *other,
    })
}

fn contains_word(haystack: &str, word: &str) -> bool {
    haystack.match_indices(word).any(|(i, _)| {
        let before = haystack[..i].chars().next_back();
        let after = haystack[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// The path a denial line names: a quoted path (`open '/x'`, `cannot remove '.env'`,
/// `[Errno 13] Permission denied: '/x'`) or the field before the message
/// (`cat: .env: Permission denied`).
fn path_in_line(line: &str) -> Option<String> {
    if let Some(quoted) = last_quoted(line) {
        return Some(quoted);
    }
    let lower = line.to_ascii_lowercase();
    let needle = MESSAGES
        .iter()
        .map(|(needle, _)| *needle)
        .filter(|needle| needle.contains(' '))
        .find(|needle| lower.contains(needle))?;
    path_before(line, &lower, needle)
}

/// The field before `needle` in `line` (`cat: .env: Permission denied` → `.env`), when it
/// looks like a path; `lower` is `line` in lower case.
fn path_before(line: &str, lower: &str, needle: &str) -> Option<String> {
    let message_at = lower.find(needle)?;
    let before = line[..message_at].trim_end().strip_suffix(':')?;
    let field = before.rsplit(": ").next()?.trim();
    // dash's redirection: `sh: 1: cannot create .env: Permission denied`.
    let field = ["cannot create ", "can't create "]
        .iter()
        .find_map(|prefix| field.strip_prefix(prefix))
        .unwrap_or(field);
    let looks_like_path =
        !field.is_empty() && !field.contains(' ') && (field.contains('/') || field.contains('.'));
    looks_like_path.then(|| field.trim_matches(['\'', '"', '`']).to_string())
}

fn last_quoted(line: &str) -> Option<String> {
    for quote in ['\'', '"', '`', '‘'] {
        let close = if quote == '‘' { '’' } else { quote };
        if let Some(end) = line.rfind(close) {
            let start = line[..end].rfind(quote)?;
            let inner = &line[start + quote.len_utf8()..end];
            if !inner.is_empty() && !inner.contains(' ') || inner.contains('/') {
                return Some(inner.to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_what_denied_tools_print() {
        let cases = [
            (
                "Bash",
                "cat: /home/u/.ssh/id_rsa: Permission denied",
                DenialClass::OutsideSandbox,
            ),
            (
                "Bash",
                "bash: line 1: .env: Read-only file system",
                DenialClass::ReadOnly,
            ),
            (
                "Bash",
                "rm: cannot remove '.env': Device or resource busy",
                DenialClass::ReadOnly,
            ),
            (
                "Bash",
                "ln: failed to create hard link 'x' => '.env': Invalid cross-device link",
                DenialClass::CrossDevice,
            ),
            (
                "Bash",
                "bash: line 1: kill: (4242) - Operation not permitted",
                DenialClass::NotPermitted,
            ),
            (
                "Bash",
                "bash: connect: Permission denied\nbash: line 1: /dev/tcp/127.0.0.1/9: Permission denied",
                DenialClass::Network,
            ),
            (
                "Bash",
                "PermissionError: [Errno 13] Permission denied: '/etc/shadow'",
                DenialClass::OutsideSandbox,
            ),
            (
                "Write",
                "EACCES: permission denied, open '/outside/x.txt.tmp.1.ab'",
                DenialClass::OutsideSandbox,
            ),
            (
                "Edit",
                "EROFS: read-only file system, open '/ws/.git/hooks/pre-commit'",
                DenialClass::ReadOnly,
            ),
        ];
        for (tool, text, class) in cases {
            assert_eq!(classify_denial(tool, text), Some(class), "{text}");
        }
    }

    #[test]
    fn ignores_content_that_mentions_errors() {
        assert_eq!(
            classify_denial("Grep", "src/fs.rs:12: Permission denied"),
            None
        );
        assert_eq!(
            classify_denial(
                "Read",
                "     1\tif err == EACCES: return \"permission denied\""
            ),
            None
        );
        assert_eq!(classify_denial("Bash", "all 12 tests passed"), None);
        assert_eq!(classify_denial("Bash", "the EPERMISSIVE flag"), None);
    }

    #[test]
    fn extracts_paths() {
        let text = "cat: .env: Permission denied\n\
                    rm: cannot remove 'secrets/db.txt': Device or resource busy\n\
                    EACCES: permission denied, open '/outside/x'\n\
                    /bin/bash: line 1: /home/u/.bashrc: Permission denied\n\
                    cat: .env: Permission denied";
        assert_eq!(
            denial_paths(text),
            vec![".env", "secrets/db.txt", "/outside/x", "/home/u/.bashrc"]
        );
    }

    #[test]
    fn finds_what_making_a_name_held_absent_answers() {
        let bash = "Exit code 1\nbash: line 1: tools/fmt.sh: Not a directory";
        assert_eq!(held_absent_paths("Bash", bash), ["tools/fmt.sh"]);
        let dash = "sh: 1: cannot create tools/fmt.sh: Directory nonexistent";
        assert_eq!(held_absent_paths("Bash", dash), ["tools/fmt.sh"]);
        let write = "<tool_use_error>Error calling tool (Write): ENOTDIR: not a directory, \
                     stat '/ws/tools/lint.sh'</tool_use_error>";
        assert_eq!(held_absent_paths("Write", write), ["/ws/tools/lint.sh"]);
        // What a file tool reads, and a search's hits, are content, not errors.
        assert!(held_absent_paths("Read", "x: Not a directory").is_empty());
        assert!(held_absent_paths("Grep", "a.rs: Not a directory").is_empty());
        // dash names the file it could not create the same way for any denial.
        assert_eq!(
            denial_paths("sh: 1: cannot create .env: Permission denied"),
            [".env"]
        );
    }
}
