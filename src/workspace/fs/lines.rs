//! `update-file`'s edits: line operations (insert, delete, replace a range) checked for
//! overlaps and applied bottom-up, and pattern replacements with a count.

use serde::Deserialize;

use super::{FsCode, FsError, MAX_WRITE_BYTES, too_large};

/// One line operation of `update-file`; lines are 1-based and inclusive.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum LineOp {
    /// Inserts `content`'s lines before line `line` (`line` = last + 1 appends).
    Insert { line: usize, content: String },
    /// Removes lines `start..=end`.
    Remove { start: usize, end: usize },
    /// Replaces lines `start..=end` with `content`'s lines.
    UpdateLines {
        start: usize,
        end: usize,
        content: String,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Replace {
    pattern: String,
    replacement: String,
    #[serde(default)]
    literal: bool,
    /// At most this many replacements; 0 or absent: all.
    count: Option<usize>,
}

pub(super) fn replace(text: &str, rep: &Replace) -> Result<(String, usize), FsError> {
    let pattern = if rep.literal {
        regex::escape(&rep.pattern)
    } else {
        rep.pattern.clone()
    };
    let re = regex::RegexBuilder::new(&pattern)
        .multi_line(true)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| super::bad_regex("bad replace pattern", &e))?;
    let limit = rep.count.unwrap_or(0);
    let found = re.find_iter(text).count();
    let n = if limit == 0 { found } else { found.min(limit) };
    let out = if rep.literal {
        re.replacen(text, limit, regex::NoExpand(&rep.replacement))
    } else {
        re.replacen(text, limit, rep.replacement.as_str())
    };
    if out.len() > MAX_WRITE_BYTES {
        return Err(too_large(
            "result",
            out.len() as u64,
            MAX_WRITE_BYTES as u64,
        ));
    }
    Ok((out.into_owned(), n))
}

/// A text file as lines, remembering whether it ended with a newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    pub lines: Vec<String>,
    pub trailing_newline: bool,
}

impl Lines {
    pub fn parse(text: &str) -> Lines {
        let trailing_newline = text.ends_with('\n');
        let body = text.strip_suffix('\n').unwrap_or(text);
        let lines = if text.is_empty() {
            Vec::new()
        } else {
            body.split('\n').map(str::to_string).collect()
        };
        Lines {
            lines,
            trailing_newline,
        }
    }

    pub fn render(&self) -> String {
        let mut out = self.lines.join("\n");
        if self.trailing_newline && !self.lines.is_empty() {
            out.push('\n');
        }
        out
    }

    /// Applies `ops` bottom-up after checking each against the current line count and
    /// the others for overlap, so every op's numbers refer to the file as read.
    pub fn apply(&mut self, ops: &[LineOp]) -> Result<(), FsError> {
        let n = self.lines.len();
        let mut spans: Vec<(usize, usize, usize)> = Vec::new(); // (start, end, index); insert: end = start - 1
        for (i, op) in ops.iter().enumerate() {
            let (s, e) = match op {
                LineOp::Insert { line, .. } => {
                    if *line == 0 || *line > n + 1 {
                        return Err(bad_line(
                            i,
                            format!("insert line {line} outside 1..={}", n + 1),
                        ));
                    }
                    (*line, *line - 1)
                }
                LineOp::Remove { start, end } | LineOp::UpdateLines { start, end, .. } => {
                    if *start == 0 || start > end || *end > n {
                        return Err(bad_line(
                            i,
                            format!("lines {start}..={end} outside 1..={n}"),
                        ));
                    }
                    (*start, *end)
                }
            };
            spans.push((s, e, i));
        }
        for (a, x) in spans.iter().enumerate() {
            for y in &spans[a + 1..] {
                if overlaps(*x, *y) {
                    return Err(FsError::new(
                        FsCode::C210,
                        format!("ops {} and {} overlap", x.2 + 1, y.2 + 1),
                    ));
                }
            }
        }
        // Bottom-up: by start descending; at one start a range goes before an insert.
        let is_range = |x: &(usize, usize, usize)| x.1 >= x.0;
        spans.sort_by(|x, y| y.0.cmp(&x.0).then(is_range(y).cmp(&is_range(x))));
        for (s, _, i) in spans {
            match &ops[i] {
                LineOp::Insert { content, .. } => {
                    let new = content_lines(content);
                    self.lines.splice(s - 1..s - 1, new);
                }
                LineOp::Remove { end, .. } => {
                    self.lines.drain(s - 1..*end);
                }
                LineOp::UpdateLines { end, content, .. } => {
                    self.lines.splice(s - 1..*end, content_lines(content));
                }
            }
        }
        if n == 0 && !self.lines.is_empty() {
            self.trailing_newline = true;
        }
        Ok(())
    }
}

fn bad_line(i: usize, msg: String) -> FsError {
    FsError::new(FsCode::C210, format!("op {}: {msg}", i + 1))
}

/// Whether two spans (start, end, _) collide. An insert is (L, L-1): a point before L.
pub(super) fn overlaps(x: (usize, usize, usize), y: (usize, usize, usize)) -> bool {
    let x_ins = x.1 < x.0;
    let y_ins = y.1 < y.0;
    match (x_ins, y_ins) {
        (true, true) => x.0 == y.0,
        (true, false) => y.0 < x.0 && x.0 <= y.1,
        (false, true) => x.0 < y.0 && y.0 <= x.1,
        (false, false) => x.0 <= y.1 && y.0 <= x.1,
    }
}

/// `content`'s lines: one trailing newline is not an extra empty line.
fn content_lines(content: &str) -> Vec<String> {
    content
        .strip_suffix('\n')
        .unwrap_or(content)
        .split('\n')
        .map(str::to_string)
        .collect()
}
