//! Known secret values ([`Secrets`]): the backend key and the credentials of the child's
//! and coder's environment, found in every spelling a JSON text can give them, and the
//! one packed search that clears most texts before any of that runs.

use std::borrow::Cow;
use std::sync::LazyLock;

use memchr::memmem;
use serde_json::Value;

use super::spelling::{find_spelled, partial_start, short_escape_of};
use super::tokens::{
    GLM_SPAN, TOKEN_CHAR_ESCAPES, awaits_token, caseless_heads, glm_keys, redact_continued,
    redact_cut_tokens_bytes, redact_tokens,
};
use super::{Ending, MIN_SECRET_LEN, REDACTED};

/// The known secret values of a run.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    /// Longest first, so a secret that contains another is replaced whole.
    values: Vec<String>,
    /// A searcher for each of `values`, in the same order, built once: building one
    /// costs more than searching a few kilobytes with it, and every transcript entry is
    /// searched.
    finders: Vec<memmem::Finder<'static>>,
    /// Escapes that can spell a character of some secret besides `\u`: `\/` for `/`, `\"`
    /// for `"`, and so on. A text holding none of these (nor `\u`) can only hold a secret
    /// literally.
    escapes: Vec<[u8; 2]>,
    /// One packed searcher for everything that can make a whole text need redacting (see
    /// [`Secrets::surely_clean`]); `None` where the CPU has no packed searcher, where
    /// there are too many secrets for one, and in `Secrets::default()`.
    anything: Option<aho_corasick::packed::Searcher>,
    /// The short escapes of `escapes` that end a secret, searched beside `anything`
    /// rather than in it (see [`short_escapes_of`]).
    escape_finders: Vec<memmem::Finder<'static>>,
    /// The longest of what `anything` and `escape_finders` search for, in bytes.
    anything_longest: usize,
}

impl Secrets {
    /// The values worth redacting among `values`: at least [`MIN_SECRET_LEN`] bytes, and
    /// not a plain word or number (`default`, `production`, `8080`), which a broad
    /// secret-name rule would otherwise turn into `[REDACTED]` wherever it appears. The
    /// whitespace around a value (the newline of one read from a file) is no part of it:
    /// a value with it was dropped as a whole, and printed without it, unredacted.
    pub fn new<I, S>(values: I) -> Secrets
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut kept: Vec<String> = values
            .into_iter()
            .map(|v| v.as_ref().trim().to_owned())
            .filter(|v| worth_redacting(v))
            .collect();
        kept.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        kept.dedup();
        let mut escapes = Vec::new();
        for value in &kept {
            for b in value.bytes() {
                if let Some(escape) = short_escape_of(b)
                    && !escapes.contains(&escape)
                {
                    escapes.push(escape);
                }
            }
        }
        let (_, alone) = short_escapes_of(&kept);
        Secrets {
            anything: anything_searcher(&kept),
            anything_longest: anything_patterns(&kept)
                .iter()
                .map(Vec::len)
                .chain(alone.iter().map(|e| e.len()))
                .max()
                .unwrap_or(0),
            escape_finders: alone
                .iter()
                .map(|e| memmem::Finder::new(e).into_owned())
                .collect(),
            finders: kept
                .iter()
                .map(|v| memmem::Finder::new(v.as_bytes()).into_owned())
                .collect(),
            values: kept,
            escapes,
        }
    }

    /// True when a whole text ([`Ending::Whole`]) certainly holds nothing that
    /// [`Secrets::redact_known`] or [`redact_tokens_bytes`](crate::text::redact::tokens::redact_tokens_bytes) would change: no secret
    /// literally, no escape that could spell one of its characters (`\u` or a short
    /// escape a secret needs), no `…`, no token prefix written literally, no `\u` escape
    /// of printable ASCII (which could spell a prefix), no Z.ai key written literally, no
    /// head of a word read in any case ([`CASELESS_WORDS`](crate::text::redact::tokens::CASELESS_WORDS)) in any case. One
    /// pass of one packed searcher, where those are four passes (and one more for each
    /// short escape that ends a secret, usually none), and the key's sampled pass
    /// (`glm_keys`); false (not known) where there is no such searcher.
    ///
    /// Every change those make starts at one of these: a secret spelled with an escape
    /// holds the escape, a partial secret is dropped only before a `…` (or a cut, which a
    /// whole text has not), a token shape is redacted only after its prefix, which is
    /// written literally or with a `\u00` escape of one of its characters, and a Z.ai key
    /// (which has no prefix) is written literally or with such an escape.
    pub fn surely_clean(&self, bytes: &[u8]) -> bool {
        self.anything
            .as_ref()
            .is_some_and(|searcher| searcher.find(bytes).is_none())
            && self.escape_finders.iter().all(|f| f.find(bytes).is_none())
            && glm_keys(bytes).is_empty()
    }

    /// The longest of what [`Secrets::surely_clean`] searches for, in bytes (a Z.ai key
    /// and the character before it, at least): a text known
    /// clean in pieces is clean whole when every join of two pieces was searched with
    /// this many bytes less one on each side.
    pub fn surely_clean_span(&self) -> usize {
        self.anything_longest.max(GLM_SPAN)
    }

    /// Whether no known value is redacted (token shapes still are).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The known values.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `text` with known secrets (every spelling) and token shapes redacted, and a partial
    /// secret dropped before every `…` (a cut made by [`crate::text::one_line`]).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.redact_ending(text, Ending::Whole)
    }

    /// [`Secrets::redact`], and with [`Ending::Cut`] a partial secret at the end dropped.
    /// A token shape cut short at the end (or before a `…`) is dropped too, from its
    /// [`MIN_PARTIAL`](crate::text::redact::MIN_PARTIAL)th character on: fewer than [`MIN_TOKEN_LEN`](crate::text::redact::tokens::MIN_TOKEN_LEN) characters are left of
    /// it, too few to be taken for a token whole.
    pub fn redact_ending<'a>(&self, text: &'a str, ending: Ending) -> Cow<'a, str> {
        let known = self.redact_known(text.as_bytes(), ending);
        let text = match known {
            Some(bytes) => Cow::Owned(into_string(bytes)),
            None => Cow::Borrowed(text),
        };
        let text = match redact_tokens(&text) {
            Cow::Borrowed(_) => text,
            Cow::Owned(out) => Cow::Owned(out),
        };
        match redact_cut_tokens_bytes(text.as_bytes(), ending) {
            Some(out) => Cow::Owned(into_string(out)),
            None => text,
        }
    }

    /// Redacts `text` in place.
    pub fn redact_string(&self, text: &mut String) {
        if let Cow::Owned(out) = self.redact(text) {
            *text = out;
        }
    }

    /// Redacts lines kept one by one (an output's tail): each line, and a token starting a
    /// line after one that ends in `Bearer` or an `Authorization` header ([`awaits_token`]).
    pub fn redact_lines(&self, lines: &mut [String]) {
        let mut awaiting = false;
        for line in lines {
            self.redact_string(line);
            if awaiting && let Cow::Owned(out) = redact_continued(line) {
                *line = out;
            }
            awaiting = awaits_token(line);
        }
    }

    /// Redacts every string (and object key) of a JSON value, decoded.
    pub fn redact_value(&self, value: &mut Value) {
        match value {
            Value::String(s) => self.redact_string(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let needs_keys = map.keys().any(|k| matches!(self.redact(k), Cow::Owned(_)));
                if needs_keys {
                    let old = std::mem::take(map);
                    for (k, v) in old {
                        map.insert(self.redact(&k).into_owned(), v);
                    }
                }
                map.values_mut().for_each(|v| self.redact_value(v));
            }
            _ => {}
        }
    }

    /// A JSON text with its decoded strings redacted: `None` when nothing needs to change
    /// (checked on the raw text first, so a clean message is not parsed), else the
    /// re-serialised value. A text that does not parse is redacted as text.
    pub fn redact_json_text(&self, raw: &str) -> Option<String> {
        if matches!(self.redact(raw), Cow::Borrowed(_)) {
            return None;
        }
        match serde_json::from_str::<Value>(raw) {
            Ok(mut value) => {
                self.redact_value(&mut value);
                serde_json::to_string(&value).ok()
            }
            Err(_) => Some(self.redact(raw).into_owned()),
        }
    }

    /// Known secrets in raw bytes (a JSON entry, a line of output): `None` when there are
    /// none. Token shapes are not looked for (see [`redact_tokens`]).
    pub fn redact_known(&self, bytes: &[u8], ending: Ending) -> Option<Vec<u8>> {
        if self.values.is_empty() {
            return None;
        }
        let escaped = self.may_hold_escapes(bytes);
        let mut out: Option<Vec<u8>> = None;
        for (secret, finder) in self.values.iter().zip(&self.finders) {
            let current = out.as_deref().unwrap_or(bytes);
            let replaced = if escaped {
                replace_spelled(current, secret.as_bytes())
            } else {
                replace_literal(current, finder)
            };
            if replaced.is_some() {
                out = replaced;
            }
        }
        let current = out.as_deref().unwrap_or(bytes);
        static ELLIPSIS: LazyLock<memmem::Finder<'static>> =
            LazyLock::new(|| memmem::Finder::new("…".as_bytes()));
        let mut cuts: Vec<usize> = ELLIPSIS.find_iter(current).collect();
        if ending == Ending::Cut {
            cuts.push(current.len());
        }
        if cuts.is_empty() {
            return out;
        }
        let stripped = self.strip_partials(current, &cuts);
        stripped.or(out)
    }

    /// Whether `bytes` hold an escape that could spell a character of a secret.
    fn may_hold_escapes(&self, bytes: &[u8]) -> bool {
        static UNICODE_ESCAPE: LazyLock<memmem::Finder<'static>> =
            LazyLock::new(|| memmem::Finder::new(b"\\u"));
        UNICODE_ESCAPE.find(bytes).is_some()
            || self
                .escapes
                .iter()
                .any(|e| memchr::memmem::find(bytes, e).is_some())
    }

    /// `bytes` with a partial secret dropped right before each cut (sorted positions).
    fn strip_partials(&self, bytes: &[u8], cuts: &[usize]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut pos = 0;
        let mut changed = false;
        for &cut in cuts {
            if cut < pos {
                continue;
            }
            let start = self
                .values
                .iter()
                .filter_map(|s| partial_start(&bytes[..cut], s.as_bytes(), pos))
                .min();
            if let Some(start) = start {
                out.extend_from_slice(&bytes[pos..start]);
                out.extend_from_slice(REDACTED.as_bytes());
                pos = cut;
                changed = true;
            }
        }
        changed.then(|| {
            out.extend_from_slice(&bytes[pos..]);
            out
        })
    }
}

/// The searcher behind [`Secrets::surely_clean`]: the secrets, the escapes that can spell
/// one, `…`, and the token prefixes. Which pattern matches first does not matter, only
/// whether any does.
fn anything_searcher(secrets: &[String]) -> Option<aho_corasick::packed::Searcher> {
    let mut builder = aho_corasick::packed::Config::new().builder();
    builder.extend(anything_patterns(secrets));
    builder.build()
}

/// What [`anything_searcher`] searches for: every pattern at least three bytes long, and
/// none whose first three bytes are common in text.
///
/// The packed searcher tells candidates by the first bytes of its patterns, as many as
/// its shortest pattern has (at most four), and checks each candidate in full. A two-byte
/// pattern (the short escape `\/` of a secret holding a `/`) made it stop at every `be`
/// (of `bearer`) and at the first two bytes of `…` (which `—` and `“` share): about
/// 130,000 candidates in 30 MB of tool results, two thirds of its instructions. So a
/// short escape is searched with what follows it ([`short_escapes_of`]), the words read
/// in any case by a rare head of theirs ([`CASELESS_WORDS`](crate::text::redact::tokens::CASELESS_WORDS), every case), and Slack's four
/// prefixes by their common `xox`: any text holding a pattern holds every part of it, so
/// searching a part still never calls a text clean that is not.
///
/// The order sets Teddy's buckets (see [`TOKEN_PREFIXES`](crate::text::redact::tokens::TOKEN_PREFIXES)). With more than 32 patterns
/// (always, with the heads' 20) Teddy has 16 buckets, and the first pattern of each of
/// the 16 groups of [`ANYTHING_FIRST`] gets one of its own: only the escapes and the
/// secrets after them share a bucket (with `glpat-`, `AKIA`, `AIza`, the rarest
/// neighbours, chosen by counting candidates with Teddy's masks simulated over 4 MB each
/// of the 8 KB stream, the `mixed` stream and this project's sources and docs, BENCHMARKS
/// round nineteen); the other cases of the heads come last and join their head's bucket.
pub(super) fn anything_patterns(secrets: &[String]) -> Vec<Vec<u8>> {
    let unicode = unicode_escapes_of(secrets);
    // `\u00` (the start of an escape of any ASCII character, which a secret's ASCII
    // character adds) covers the escapes a token shape can be spelled with.
    let token_escapes = if unicode.contains(b"\\u00") {
        &[][..]
    } else {
        &TOKEN_CHAR_ESCAPES[..]
    };
    let (heads, other_cases) = caseless_heads();
    let fixed = ANYTHING_FIRST
        .iter()
        .map(|p| p.as_bytes().to_vec())
        .chain(heads)
        .chain(token_escapes.iter().map(|e| e.as_bytes().to_vec()));
    fixed
        .chain(unicode.iter().map(|u| u.to_vec()))
        .chain(secrets.iter().map(|s| s.as_bytes().to_vec()))
        .chain(short_escapes_of(secrets).0)
        .chain(other_cases)
        .collect()
}

/// The first patterns of [`anything_patterns`], before the heads of [`CASELESS_WORDS`](crate::text::redact::tokens::CASELESS_WORDS):
/// the token prefixes that are no such word (Slack's four as `xox`) and `…`, in the order
/// that gave the fewest candidates (see there).
pub(super) const ANYTHING_FIRST: [&str; 13] = [
    "glpat-",
    "AKIA",
    "AIza",
    "gho_",
    "sk-",
    "ghp_",
    "xox",
    "ghs_",
    "ghu_",
    "ghr_",
    "github_pat_",
    "…",
    "eyJ",
];

/// The short escapes (`\/`, `\"`, …) that can spell a character of one of `secrets`, as
/// [`Secrets::surely_clean`] searches for them: with the byte that follows them, where a
/// character follows the escaped one in the secret, and apart (two bytes, one `memmem`
/// each) where the secret ends with it.
///
/// A secret spelled with `\/` for its `/` holds, right after the escape, the spelling of
/// its next character: that character's first byte written literally, or a backslash (a
/// `\u` escape or a short one). So `\/x` and `\/\` (for a `/` followed by `x`) are in
/// every such spelling, and three bytes tell the packed searcher's candidates apart where
/// two (`\/`) dropped it to two-byte fingerprints. A `/` that ends a secret has no next
/// character, and its escape is searched alone.
fn short_escapes_of(secrets: &[String]) -> (Vec<Vec<u8>>, Vec<[u8; 2]>) {
    let mut followed = Vec::new();
    let mut alone = Vec::new();
    for secret in secrets {
        let bytes = secret.as_bytes();
        for (at, &b) in bytes.iter().enumerate() {
            let Some(escape) = short_escape_of(b) else {
                continue;
            };
            let Some(&next) = bytes.get(at + 1) else {
                if !alone.contains(&escape) {
                    alone.push(escape);
                }
                continue;
            };
            for third in [next, b'\\'] {
                let pattern = vec![escape[0], escape[1], third];
                if !followed.contains(&pattern) {
                    followed.push(pattern);
                }
            }
        }
    }
    (followed, alone)
}

/// The starts of the `\u` escapes that can spell a character of one of `secrets`: `\u`
/// and the first two hex digits of each of its UTF-16 units, in every case (`\u00` for
/// every ASCII character). An escape spells a character only with its four digits, so a
/// text whose `\u` escapes start otherwise spells no secret with them. (Token shapes add
/// their own, [`TOKEN_CHAR_ESCAPES`], where this has no `\u00`.)
///
/// Two digits, not `\u` alone or with one: `\u` stopped the searcher at every `\n`,
/// and `\u` with any first digit took 22 patterns, which pushed the searcher into its
/// slower form for more than 32 (half the bytes per step).
fn unicode_escapes_of(secrets: &[String]) -> Vec<[u8; 4]> {
    let cases = |digit: u8| {
        if digit.is_ascii_alphabetic() {
            vec![digit.to_ascii_lowercase(), digit.to_ascii_uppercase()]
        } else {
            vec![digit]
        }
    };
    let mut starts = Vec::new();
    for c in secrets.iter().flat_map(|secret| secret.chars()) {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let top = unit.to_be_bytes()[0];
            let (high, low) = (HEX[usize::from(top >> 4)], HEX[usize::from(top & 15)]);
            for first in cases(high) {
                for second in cases(low) {
                    let start = [b'\\', b'u', first, second];
                    if !starts.contains(&start) {
                        starts.push(start);
                    }
                }
            }
        }
    }
    starts
}

/// Long enough, and not a plain word or number: a credential mixes character classes.
fn worth_redacting(value: &str) -> bool {
    if value.len() < MIN_SECRET_LEN || value.chars().any(char::is_whitespace) {
        return false;
    }
    let letters = value.chars().any(|c| c.is_alphabetic());
    let digits = value.chars().any(|c| c.is_ascii_digit());
    let other = value.chars().any(|c| !c.is_alphanumeric());
    let plain_word = value.chars().all(|c| c.is_ascii_lowercase())
        || value.chars().all(|c| c.is_ascii_uppercase());
    let classes = [letters, digits, other].iter().filter(|x| **x).count();
    // A 16-character run of one class is still a token (hex, base32 uppercase).
    !plain_word && (classes >= 2 || value.len() >= 16)
}

pub(super) fn into_string(bytes: Vec<u8>) -> String {
    // Matches start and end at character boundaries (a secret is UTF-8, an escape is
    // ASCII), so the bytes stay UTF-8; the lossy path is never taken in practice.
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn replace_literal(bytes: &[u8], finder: &memmem::Finder<'_>) -> Option<Vec<u8>> {
    let secret = finder.needle();
    let first = finder.find(bytes)?;
    let mut out = Vec::with_capacity(bytes.len());
    out.extend_from_slice(&bytes[..first]);
    out.extend_from_slice(REDACTED.as_bytes());
    let mut rest = &bytes[first + secret.len()..];
    while let Some(at) = finder.find(rest) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(REDACTED.as_bytes());
        rest = &rest[at + secret.len()..];
    }
    out.extend_from_slice(rest);
    Some(out)
}

fn replace_spelled(bytes: &[u8], secret: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut pos = 0;
    let mut from = 0;
    while let Some((start, end)) = find_spelled(bytes, secret, from) {
        let buf = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
        buf.extend_from_slice(&bytes[pos..start]);
        buf.extend_from_slice(REDACTED.as_bytes());
        pos = end;
        from = end;
    }
    out.map(|mut buf| {
        buf.extend_from_slice(&bytes[pos..]);
        buf
    })
}
