//! An allow-list filter for git config files the agent may have written: it keeps the
//! handful of keys that only describe a repository (format, bareness, remotes, branch
//! tracking, identity) and drops everything else — every key that names a command
//! (`core.fsmonitor`, `core.hooksPath`, `core.sshCommand`, `core.pager`, `diff.external`,
//! `filter.*`, `credential.helper`, `alias.*`, …), every include (`include.path`,
//! `includeIf.*`), every extension but the two git needs to read the objects and refs.
//!
//! The parser is strict: anything it does not fully understand makes the whole file
//! untrusted and nothing is kept. Its output is never the input edited in place but a
//! fresh file written by [`render`] from the kept entries, every value quoted and
//! escaped, so a difference between this parser and git's can only lose keys, never
//! smuggle one in: git reads exactly what coder wrote.

/// One `section[.subsection].key = value` entry. `section` and `key` are lower-cased (git
/// compares them without case); `value` is `None` for a bare key (boolean true).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub section: String,
    pub subsection: Option<String>,
    pub key: String,
    pub value: Option<String>,
}

/// What filtering a config file gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filtered {
    /// The entries kept, in file order.
    pub kept: Vec<Entry>,
    /// Whether anything was dropped (or the file could not be parsed): the file must be
    /// replaced by [`render`] of `kept`.
    pub dropped: bool,
}

/// Filter `text` through the allow-list.
pub(crate) fn filter(text: &[u8]) -> Filtered {
    let Ok(entries) = parse(text) else {
        return Filtered {
            kept: Vec::new(),
            dropped: true,
        };
    };
    let total = entries.len();
    let kept: Vec<Entry> = entries.into_iter().filter(allowed).collect();
    Filtered {
        dropped: kept.len() != total,
        kept,
    }
}

/// Whether a key only describes the repository. Values of URLs are checked too: the
/// `<helper>::<address>` form starts a remote helper program.
fn allowed(e: &Entry) -> bool {
    let key = e.key.as_str();
    let sub = e.subsection.is_some();
    let ok = match e.section.as_str() {
        "core" if !sub => matches!(
            key,
            "repositoryformatversion"
                | "bare"
                | "filemode"
                | "logallrefupdates"
                | "ignorecase"
                | "precomposeunicode"
                | "symlinks"
        ),
        "extensions" if !sub => matches!(key, "objectformat" | "refstorage"),
        "remote" if sub => matches!(
            key,
            "url" | "pushurl" | "fetch" | "push" | "tagopt" | "prune"
        ),
        "branch" if sub => matches!(key, "remote" | "merge" | "rebase" | "pushremote"),
        "user" if !sub => matches!(key, "name" | "email"),
        "submodule" if sub => matches!(key, "url" | "active"),
        _ => false,
    };
    ok && !(matches!(key, "url" | "pushurl") && e.value.as_deref().is_some_and(is_helper_url))
}

/// `<transport>::<address>`: git runs `git-remote-<transport>` for it (`ext::` runs any
/// command when allowed). The transport is read as git's `is_urlschemechar` reads it: a
/// letter *or digit*, then letters, digits, `+`, `.`, `-` (`1x::y` runs `git-remote-1x`).
fn is_helper_url(url: &str) -> bool {
    let Some((scheme, _)) = url.split_once("::") else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
}

/// The file git will read: the kept entries, grouped under their sections, every value
/// quoted. Entries whose names or values cannot be written safely are left out.
pub(crate) fn render(entries: &[Entry]) -> String {
    let mut out =
        String::from("# Rewritten by coder: keys that could run commands were moved aside.\n");
    let mut current: Option<(&str, Option<&str>)> = None;
    for e in entries {
        if !is_name(&e.section) || !is_name(&e.key) {
            continue;
        }
        let value = match e.value.as_deref() {
            None => None,
            Some(v) => match quote(v) {
                Some(q) => Some(q),
                None => continue,
            },
        };
        let here = (e.section.as_str(), e.subsection.as_deref());
        if current != Some(here) {
            match e.subsection.as_deref() {
                None => out.push_str(&format!("[{}]\n", e.section)),
                Some(sub) => {
                    let Some(sub) = quote(sub) else { continue };
                    out.push_str(&format!("[{} {sub}]\n", e.section));
                }
            }
            current = Some(here);
        }
        match value {
            Some(v) => out.push_str(&format!("\t{} = {v}\n", e.key)),
            None => out.push_str(&format!("\t{}\n", e.key)),
        }
    }
    out
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// `"text"` with git's escapes; `None` for text with a NUL or a control character git
/// cannot spell.
fn quote(s: &str) -> Option<String> {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => return None,
            c => out.push(c),
        }
    }
    out.push('"');
    Some(out)
}

/// Why a file is not understood.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ParseError;

/// Parse a whole config file the way git does (sections, `[a "b"]` and `[a.b]`
/// subsections, bare keys, quotes, escapes, continuation lines, comments); any oddity is
/// an error.
pub(crate) fn parse(text: &[u8]) -> Result<Vec<Entry>, ParseError> {
    let text = std::str::from_utf8(text).map_err(|_| ParseError)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.contains('\0') || text.contains('\r') {
        return Err(ParseError);
    }
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let mut entries = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    loop {
        p.skip_blank();
        match p.peek() {
            None => return Ok(entries),
            Some(b'\n') => p.i += 1,
            Some(b'#' | b';') => p.skip_line(),
            Some(b'[') => section = Some(p.header()?),
            Some(c) if c.is_ascii_alphabetic() => {
                let (name, sub) = section.clone().ok_or(ParseError)?;
                let key = p.name()?.to_ascii_lowercase();
                p.skip_blank();
                let value = match p.peek() {
                    None | Some(b'\n' | b'#' | b';') => {
                        p.skip_line();
                        None
                    }
                    Some(b'=') => {
                        p.i += 1;
                        Some(p.value()?)
                    }
                    Some(_) => return Err(ParseError),
                };
                entries.push(Entry {
                    section: name,
                    subsection: sub,
                    key,
                    value,
                });
            }
            Some(_) => return Err(ParseError),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn skip_line(&mut self) {
        while let Some(c) = self.peek() {
            self.i += 1;
            if c == b'\n' {
                break;
            }
        }
    }

    /// A section or key name: a letter, then letters, digits and `-`.
    fn name(&mut self) -> Result<String, ParseError> {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'-')
        {
            self.i += 1;
        }
        let name = &self.s[start..self.i];
        if name.first().is_some_and(u8::is_ascii_alphabetic) {
            Ok(String::from_utf8_lossy(name).into_owned())
        } else {
            Err(ParseError)
        }
    }

    /// `[section]`, `[section "subsection"]` or `[section.subsection]`.
    fn header(&mut self) -> Result<(String, Option<String>), ParseError> {
        self.i += 1;
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.')
        {
            self.i += 1;
        }
        let raw = std::str::from_utf8(&self.s[start..self.i]).map_err(|_| ParseError)?;
        let (name, mut sub) = match raw.split_once('.') {
            Some((name, sub)) if !sub.is_empty() => {
                (name.to_string(), Some(sub.to_ascii_lowercase()))
            }
            Some(_) => return Err(ParseError),
            None => (raw.to_string(), None),
        };
        if !is_name(&name) {
            return Err(ParseError);
        }
        if self.peek() == Some(b' ') || self.peek() == Some(b'\t') {
            if sub.is_some() {
                return Err(ParseError);
            }
            self.skip_blank();
            if self.peek() != Some(b'"') {
                return Err(ParseError);
            }
            self.i += 1;
            let mut text = Vec::new();
            loop {
                match self.peek() {
                    None | Some(b'\n') => return Err(ParseError),
                    Some(b'"') => {
                        self.i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        self.i += 1;
                        match self.peek() {
                            None | Some(b'\n') => return Err(ParseError),
                            Some(c) => text.push(c),
                        }
                        self.i += 1;
                    }
                    Some(c) => {
                        text.push(c);
                        self.i += 1;
                    }
                }
            }
            sub = Some(String::from_utf8(text).map_err(|_| ParseError)?);
        }
        if self.peek() != Some(b']') {
            return Err(ParseError);
        }
        self.i += 1;
        Ok((name.to_ascii_lowercase(), sub))
    }

    /// A value after `=`: up to the end of the line or a comment outside quotes, with
    /// escapes and continuation lines; unquoted trailing blanks dropped.
    fn value(&mut self) -> Result<String, ParseError> {
        self.skip_blank();
        let mut out: Vec<u8> = Vec::new();
        let mut quoted = false;
        // Length of `out` up to its last character that is not an unquoted blank.
        let mut keep = 0;
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                b'\n' if !quoted => break,
                b'\n' => return Err(ParseError),
                b'#' | b';' if !quoted => {
                    self.skip_line();
                    break;
                }
                b'"' => {
                    quoted = !quoted;
                    keep = out.len();
                }
                b'\\' => {
                    let Some(next) = self.peek() else {
                        return Err(ParseError);
                    };
                    self.i += 1;
                    match next {
                        b'\n' => continue,
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'b' => out.push(8),
                        b'\\' | b'"' => out.push(next),
                        _ => return Err(ParseError),
                    }
                    keep = out.len();
                }
                b' ' | b'\t' if !quoted => out.push(c),
                _ => {
                    out.push(c);
                    keep = out.len();
                }
            }
        }
        if quoted {
            return Err(ParseError);
        }
        out.truncate(keep);
        String::from_utf8(out).map_err(|_| ParseError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<String> {
        filter(text.as_bytes())
            .kept
            .iter()
            .map(|e| match &e.subsection {
                Some(s) => format!("{}.{s}.{}={:?}", e.section, e.key, e.value),
                None => format!("{}.{}={:?}", e.section, e.key, e.value),
            })
            .collect()
    }

    #[test]
    fn a_fresh_init_and_clone_config_is_kept_whole() {
        let text = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
                    \tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://x/y.git\n\
                    \tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\
                    \tremote = origin\n\tmerge = refs/heads/main\n";
        let f = filter(text.as_bytes());
        assert!(!f.dropped, "{f:?}");
        assert_eq!(f.kept.len(), 8);
        // What coder writes parses back to the same entries.
        assert_eq!(parse(render(&f.kept).as_bytes()).unwrap(), f.kept);
    }

    #[test]
    fn command_keys_includes_and_helpers_are_dropped() {
        for text in [
            "[core]\n\tfsmonitor = touch /tmp/x\n",
            "[core]\nhooksPath=/tmp\n",
            "[CORE]\n\tsshCommand = evil\n",
            "[core] pager = evil\n",
            "[diff]\n\texternal = evil\n",
            "[filter \"x\"]\n\tclean = evil\n\tprocess = evil\n",
            "[include]\n\tpath = ../evil\n",
            "[includeIf \"gitdir:/\"]\n\tpath = evil\n",
            "[credential]\n\thelper = !evil\n",
            "[alias]\n\tst = !evil\n",
            "[extensions]\n\tworktreeConfig = true\n",
            "[core]\n\tworktree = /home\n",
            "[remote \"o\"]\n\turl = ext::sh -c evil\n\tuploadpack = evil\n",
            "[remote \"o\"]\n\turl = 1x::evil\n",
            "[submodule \"s\"]\n\turl = 0::evil\n",
            "[submodule \"s\"]\n\tupdate = !evil\n",
            "[core.x]\n\tfsmonitor = evil\n",
        ] {
            let f = filter(text.as_bytes());
            assert!(f.dropped, "{text}");
            assert!(f.kept.is_empty(), "{text}: {:?}", f.kept);
        }
    }

    #[test]
    fn anything_odd_keeps_nothing() {
        for text in [
            "bare = true\n",
            "[core\n\tbare = true\n",
            "[core]\n\tbare = \"true\n",
            "[core]\n\tbare = \\q\n",
            "[core]\r\n\tbare = true\r\n",
            "[core]\n\t1bare = true\n",
            "[core \"x]\n",
            "[core]\n\tbare = true\n\u{0}",
        ] {
            let f = filter(text.as_bytes());
            assert!(f.dropped && f.kept.is_empty(), "{text:?}: {f:?}");
        }
    }

    #[test]
    fn values_are_read_like_git_and_written_quoted() {
        assert_eq!(
            keys("[user]\n\tname = \"A \\\"B\\\"\" C ; comment\n\temail=a@b # x\n[core]\n\tbare\n"),
            vec![
                "user.name=Some(\"A \\\"B\\\" C\")".to_string(),
                "user.email=Some(\"a@b\")".to_string(),
                "core.bare=None".to_string(),
            ]
        );
        assert_eq!(
            keys("[remote \"o\"]\n\turl = https://\\\n  x\n"),
            vec!["remote.o.url=Some(\"https://  x\")".to_string()]
        );
        let kept =
            filter(b"[user]\n\tname = \"a\\nb\\\\\" \n[remote \"q\\\"x\"]\n\turl = u\n").kept;
        let text = render(&kept);
        assert_eq!(parse(text.as_bytes()).unwrap(), kept, "{text}");
        assert!(text.contains("[remote \"q\\\"x\"]"), "{text}");
    }
}
