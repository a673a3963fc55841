//! Keeping credentials out of everything coder prints or stores: the envelope, the
//! transcript, `--log-metrics`, `coder runs show`.
//!
//! Two kinds of secrets are replaced by [`REDACTED`]:
//!
//! - **Known values** ([`Secrets`]): the backend key and the credentials in the child's and
//!   coder's environment. They are matched in every spelling a JSON text can give them —
//!   literal, or any of their characters written as a JSON escape (`\u0073k-…`, `\/`, `\"`)
//!   — because the child's output is JSON and a decoded string is what a reader sees. The
//!   match runs on the raw text, so it also works on a line cut in the middle (which no
//!   longer parses) and a JSON line keeps its exact bytes where no secret is.
//! - **Token shapes**: credentials coder does not know (one the agent read from a file) in
//!   well-known formats (`sk-…`, `ghp_…`, `github_pat_…`, `xoxb-…`, `glpat-…`, `AIza…`,
//!   `AKIA…`, a JSON Web Token's `eyJ…`, a Z.ai key's `<32 hex>.<16 letters and digits>`,
//!   `Bearer …` in any case and an `Authorization` or `x-api-key` header's value (its name
//!   in any case), the token also on the next line), only when the token is long and, after a prefix prose uses too, looks
//!   random (a digit, or base64's case changes), so ordinary words such as
//!   `sk-learn-compatible` or `Bearer authentication` stay. They too are matched in every
//!   JSON spelling (`\u0073k-…`, `Bearer\u0020…`, `Bearer\t…`, `\/` in a token, a token
//!   right after `\n`), read as JSON decodes it with the known values' escape reader.
//!   Lines kept one by one carry a `Bearer` at a line's end over to the next
//!   ([`awaits_token`], [`redact_continued`]).
//!
//! **Cuts.** Redaction runs before a text is cut. Where the source itself was cut at a byte
//! cap before coder could see all of it ([`Ending::Cut`]), and wherever a text carries the
//! `…` that [`crate::text::one_line`] leaves at a cut, a *partial* match is dropped too: a
//! piece of text ending at the cut that is the first [`MIN_PARTIAL`] or more bytes of a
//! known secret (in any spelling), or a token shape's prefix followed by [`MIN_PARTIAL`] or
//! more of its characters up to the cut ([`Secrets::redact_ending`],
//! [`redact_cut_tokens_bytes`]). So a cut never leaves more than three bytes of a key.
//!
//! **Cost.** The transcript redacts every line of the child's output on its hot path. One
//! packed search for everything a redaction starts at (`Bearer` and the header names, in
//! any case, by three rare bytes of each in every case, [`CASELESS_WORDS`]) clears most
//! entries ([`Secrets::surely_clean`]). Otherwise a text
//! without a backslash-escape that could spell a secret costs one `memmem` search per
//! secret; only a text holding one (`\u…`, or an escape of a character a secret holds) is
//! scanned escape by escape. Token shapes cost one packed search, one `memmem` for
//! `\u00` and a sampled pass for Z.ai keys (one 8-byte block every 24 bytes, `glm_keys`);
//! a text is read as JSON decodes it only around each prefix found, or position by
//! position where it holds a `\u` escape of printable ASCII (which could spell a prefix;
//! JSON writers do not make them).

use std::borrow::Cow;
use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
use memchr::memmem;
use serde_json::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Shorter known values are not redacted: they would match ordinary text.
pub const MIN_SECRET_LEN: usize = 6;

/// A piece of a known secret this long (in bytes of the secret) at a cut is dropped.
pub const MIN_PARTIAL: usize = 4;

/// Whether a text is all there was, or the head of something longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The whole text.
    Whole,
    /// Cut at its end (a byte cap): a secret may straddle the cut.
    Cut,
}

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
    /// [`Secrets::redact_known`] or [`redact_tokens_bytes`] would change: no secret
    /// literally, no escape that could spell one of its characters (`\u` or a short
    /// escape a secret needs), no `…`, no token prefix written literally, no `\u` escape
    /// of printable ASCII (which could spell a prefix), no Z.ai key written literally, no
    /// head of a word read in any case ([`CASELESS_WORDS`]) in any case. One
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
    /// [`MIN_PARTIAL`]th character on: fewer than [`MIN_TOKEN_LEN`] characters are left of
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
/// in any case by a rare head of theirs ([`CASELESS_WORDS`], every case), and Slack's four
/// prefixes by their common `xox`: any text holding a pattern holds every part of it, so
/// searching a part still never calls a text clean that is not.
///
/// The order sets Teddy's buckets (see [`TOKEN_PREFIXES`]). With more than 32 patterns
/// (always, with the heads' 20) Teddy has 16 buckets, and the first pattern of each of
/// the 16 groups of [`ANYTHING_FIRST`] gets one of its own: only the escapes and the
/// secrets after them share a bucket (with `glpat-`, `AKIA`, `AIza`, the rarest
/// neighbours, chosen by counting candidates with Teddy's masks simulated over 4 MB each
/// of the 8 KB stream, the `mixed` stream and this project's sources and docs, BENCHMARKS
/// round nineteen); the other cases of the heads come last and join their head's bucket.
fn anything_patterns(secrets: &[String]) -> Vec<Vec<u8>> {
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

/// The first patterns of [`anything_patterns`], before the heads of [`CASELESS_WORDS`]:
/// the token prefixes that are no such word (Slack's four as `xox`) and `…`, in the order
/// that gave the fewest candidates (see there).
const ANYTHING_FIRST: [&str; 13] = [
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

fn into_string(bytes: Vec<u8>) -> String {
    // Matches start and end at character boundaries (a secret is UTF-8, an escape is
    // ASCII), so the bytes stay UTF-8; the lossy path is never taken in practice.
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The two-byte JSON escape of a byte other than `\u`, if it has one.
fn short_escape_of(b: u8) -> Option<[u8; 2]> {
    let c = match b {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        _ => return None,
    };
    Some([b'\\', c])
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

/// The leftmost spelling of `secret` in `bytes` at or after `from`.
fn find_spelled(bytes: &[u8], secret: &[u8], from: usize) -> Option<(usize, usize)> {
    let first = *secret.first()?;
    memchr::memchr2_iter(first, b'\\', &bytes[from..])
        .map(|i| from + i)
        .find_map(|start| match match_at(bytes, start, secret) {
            Step::Full(end) => Some((start, end)),
            _ => None,
        })
}

/// The start of the earliest spelling of at least [`MIN_PARTIAL`] bytes of `secret` that
/// runs to the end of `bytes` (begins at or after `from`).
fn partial_start(bytes: &[u8], secret: &[u8], from: usize) -> Option<usize> {
    let first = *secret.first()?;
    // A spelled byte takes at most 6 bytes of text (`\u00XX`), 12 for a surrogate pair's 4.
    let window = secret.len() * 6;
    let lo = from.max(bytes.len().saturating_sub(window));
    memchr::memchr2_iter(first, b'\\', &bytes[lo..])
        .map(|i| lo + i)
        .find(|&start| matches!(match_at(bytes, start, secret), Step::Partial(n) if n >= MIN_PARTIAL.min(secret.len())))
}

/// How far a spelling of a secret gets from one position.
enum Step {
    /// All of it, ending at this position.
    Full(usize),
    /// The text ended after this many bytes of the secret (or inside an escape).
    Partial(usize),
    /// The text differs.
    None,
}

fn match_at(bytes: &[u8], mut pos: usize, secret: &[u8]) -> Step {
    let mut i = 0;
    while i < secret.len() {
        let Some(&b) = bytes.get(pos) else {
            return Step::Partial(i);
        };
        if b == b'\\' {
            match unescape(&bytes[pos..]) {
                Unescaped::Char(buf, len, used) if secret[i..].starts_with(&buf[..len]) => {
                    i += len;
                    pos += used;
                    continue;
                }
                Unescaped::Incomplete => return Step::Partial(i),
                // Not a spelling of the next character: maybe a literal backslash.
                Unescaped::Char(..) | Unescaped::Invalid => {}
            }
        }
        if b != secret[i] {
            return Step::None;
        }
        i += 1;
        pos += 1;
    }
    Step::Full(pos)
}

enum Unescaped {
    /// The character's UTF-8 bytes, their count, and the escape's length in the text.
    Char([u8; 4], usize, usize),
    /// The text ends inside the escape.
    Incomplete,
    /// Not a JSON escape.
    Invalid,
}

/// Decodes the JSON escape at the start of `text` (which starts with a backslash).
fn unescape(text: &[u8]) -> Unescaped {
    let Some(&kind) = text.get(1) else {
        return Unescaped::Incomplete;
    };
    let one = |b: u8| Unescaped::Char([b, 0, 0, 0], 1, 2);
    match kind {
        b'"' | b'\\' | b'/' => one(kind),
        b'b' => one(0x08),
        b'f' => one(0x0c),
        b'n' => one(b'\n'),
        b'r' => one(b'\r'),
        b't' => one(b'\t'),
        b'u' => unescape_unicode(text),
        _ => Unescaped::Invalid,
    }
}

fn unescape_unicode(text: &[u8]) -> Unescaped {
    let Some(high) = hex4(text, 2) else {
        return if text.len() < 6 && text[2..].iter().all(u8::is_ascii_hexdigit) {
            Unescaped::Incomplete
        } else {
            Unescaped::Invalid
        };
    };
    let (code, used) = if (0xD800..0xDC00).contains(&high) {
        if text.len() < 12 {
            return Unescaped::Incomplete;
        }
        match (text.get(6..8), hex4(text, 8)) {
            (Some(b"\\u"), Some(low)) if (0xDC00..0xE000).contains(&low) => {
                (0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00), 12)
            }
            _ => return Unescaped::Invalid,
        }
    } else {
        (high, 6)
    };
    match char::from_u32(code) {
        Some(c) => {
            let mut buf = [0u8; 4];
            let len = c.encode_utf8(&mut buf).len();
            Unescaped::Char(buf, len, used)
        }
        None => Unescaped::Invalid,
    }
}

fn hex4(text: &[u8], at: usize) -> Option<u32> {
    let digits = std::str::from_utf8(text.get(at..at + 4)?).ok()?;
    u32::from_str_radix(digits, 16).ok()
}

/// What a token prefix says of the token after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A vendor's own prefix, which no word starts with (`ghp_`, `glpat-`, `AKIA`, `eyJ`):
    /// the prefix and a long token after it are redacted whole, digit or not.
    Vendor,
    /// A prefix prose uses too (`sk-learn-compatible`): redacted whole when the token
    /// looks random ([`Run::looks_random`]).
    Weak,
    /// `Bearer`: the token after one or more blanks (spaces, tabs, line breaks), when it
    /// looks random.
    Bearer,
    /// The `Authorization` header's name: past a `:` or `=` (with quotes and blanks), an
    /// optional scheme word (`Basic`, `token`, `Digest`, `Bearer`) and blanks, the token,
    /// when it looks random.
    Header,
}

impl Kind {
    /// Whether the prefix is a word HTTP reads in any case (the `Bearer` scheme, a
    /// header's name), so any mix of cases counts (`BeArEr`, `AUTHorization`).
    fn is_caseless(self) -> bool {
        matches!(self, Kind::Bearer | Kind::Header)
    }
}

/// A word HTTP reads in any case ([`Kind::is_caseless`]), and the three bytes of it the
/// packed searchers look for in every case.
struct CaselessWord {
    word: &'static str,
    /// Where the three bytes start in the word.
    head: usize,
    kind: Kind,
}

/// The words read in any case: `Bearer` (HTTP's scheme; HTTP/2 tools print it in lower
/// case), the `Authorization` header's name and `x-api-key` (Anthropic's API key header,
/// as the CLI, the SDKs and curl examples spell it, and `X-Api-Key` as Go canonicalises
/// it), whose values are redacted as an `Authorization` header's are.
///
/// The packed searchers find them by a rare head in every case ([`caseless_heads`]), and
/// compare the word around a head found in any case ([`caseless_word_at`]). The heads, by
/// their count in any case in 90 MB of Rust, Python and Markdown (crates' sources, this
/// project's docs; the words themselves: 308, 1,797 and 9): `rer` 2,695 (`ear` 16,718;
/// `bea` 1,532, but all hex digits, which hashes and ids are made of), `riz` 3,217 (`zat`
/// 4,475, in every "-ization"), `i-k` 16 (`-ap` 537).
const CASELESS_WORDS: [CaselessWord; 3] = [
    CaselessWord {
        word: "bearer",
        head: 3,
        kind: Kind::Bearer,
    },
    CaselessWord {
        word: "authorization",
        head: 5,
        kind: Kind::Header,
    },
    CaselessWord {
        word: "x-api-key",
        head: 4,
        kind: Kind::Header,
    },
];

/// The head of each word of [`CASELESS_WORDS`] in lower case, and its other cases (20
/// spellings in all). Every case of a head has the same low nybbles, so Teddy puts them in
/// one bucket, the one the first of them gets by its place: the lower-case heads go
/// where their buckets should be, the other cases anywhere after.
fn caseless_heads() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut lower = Vec::new();
    let mut other = Vec::new();
    for w in &CASELESS_WORDS {
        let head = &w.word.as_bytes()[w.head..w.head + 3];
        for mask in 0..8u8 {
            let spelled: Vec<u8> = head
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if mask >> i & 1 == 1 {
                        c.to_ascii_uppercase()
                    } else {
                        *c
                    }
                })
                .collect();
            if spelled != head && !other.contains(&spelled) {
                other.push(spelled);
            }
        }
        lower.push(head.to_vec());
    }
    (lower, other)
}

/// The word of [`CASELESS_WORDS`] whose head is at `at` in `text`, written literally in
/// any case (`BeArEr`, `AUTHorization`, `X-API-KEY`): where it starts and ends, and its
/// kind.
fn caseless_word_at(text: &[u8], at: usize) -> Option<(usize, usize, Kind)> {
    let found = text.get(at..at + 3)?;
    CASELESS_WORDS.iter().find_map(|w| {
        let start = at.checked_sub(w.head)?;
        let end = start + w.word.len();
        let head = &w.word.as_bytes()[w.head..w.head + 3];
        (found.eq_ignore_ascii_case(head)
            && text
                .get(start..end)?
                .eq_ignore_ascii_case(w.word.as_bytes()))
        .then_some((start, end, w.kind))
    })
}

/// Prefixes of well-known credential formats, written in one case; a long token after
/// them is redacted. `eyJ` starts every JSON Web Token (`{"` in base64): the keys of some
/// vendors (MiniMax) and most bearer tokens are one. (`Bearer` and the header names are
/// [`CASELESS_WORDS`].)
///
/// The order is [`TOKEN_STARTS`]' (see there), and it matters: Teddy puts the first
/// pattern of each group of patterns with the same low nybbles in their first three bytes
/// in bucket `B - 1 - id % B` (of `B` buckets), where its masks mix with the other
/// patterns of that bucket. The first [`TOKEN_PREFIX_GROUPS`] are one of each group; Slack's
/// other three share `xoxb-`'s.
const TOKEN_PREFIXES: [(&str, Kind); 15] = [
    ("sk-", Kind::Weak),
    ("ghp_", Kind::Vendor),
    ("gho_", Kind::Vendor),
    ("ghs_", Kind::Vendor),
    ("ghu_", Kind::Vendor),
    ("ghr_", Kind::Vendor),
    ("github_pat_", Kind::Vendor),
    ("xoxb-", Kind::Vendor),
    ("AKIA", Kind::Vendor),
    ("eyJ", Kind::Vendor),
    ("glpat-", Kind::Vendor),
    ("AIza", Kind::Vendor),
    ("xoxp-", Kind::Vendor),
    ("xoxa-", Kind::Vendor),
    ("xoxr-", Kind::Vendor),
];

/// How many of [`TOKEN_PREFIXES`] start a group of their own (see there).
const TOKEN_PREFIX_GROUPS: usize = 12;

/// Every token prefix (the caseless words in lower case) and its kind.
fn all_prefixes() -> impl Iterator<Item = (&'static str, Kind)> {
    TOKEN_PREFIXES
        .iter()
        .copied()
        .chain(CASELESS_WORDS.iter().map(|w| (w.word, w.kind)))
}

/// Whether a byte is the first of a token prefix, in any case for [`CASELESS_WORDS`] (a
/// table: the spelled readings ask it of every byte).
const PREFIX_STARTS: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < TOKEN_PREFIXES.len() {
        table[TOKEN_PREFIXES[i].0.as_bytes()[0] as usize] = true;
        i += 1;
    }
    let mut i = 0;
    while i < CASELESS_WORDS.len() {
        let first = CASELESS_WORDS[i].word.as_bytes()[0];
        table[first.to_ascii_lowercase() as usize] = true;
        table[first.to_ascii_uppercase() as usize] = true;
        i += 1;
    }
    table
};

/// The starts of the `\u` escapes of printable ASCII (U+0020 to U+007F), the only
/// characters a token shape is made of (its prefix, the space after `Bearer`, the token):
/// a text holding none of these spells every token shape it holds with its prefix written
/// literally (only `\/`, `\"` and `\t` spell a token's character otherwise, never a
/// prefix's).
const TOKEN_CHAR_ESCAPES: [&str; 6] = ["\\u002", "\\u003", "\\u004", "\\u005", "\\u006", "\\u007"];

/// How long a token must be to be taken for a credential.
const MIN_TOKEN_LEN: usize = 16;

/// The prefixes' searcher: a packed (Teddy) one, which checks several bytes of every
/// prefix at once; the general automaton stopped at every `s`, `g`, `x` of ordinary text
/// (a fifth of a fast stream's transcript time). One pass for both kinds: the prefixes of
/// [`TOKEN_PREFIXES`] and the heads of [`CASELESS_WORDS`] in every case. 35 patterns, so
/// Teddy's 16 buckets: the first of each of the 15 groups (the first
/// [`TOKEN_PREFIX_GROUPS`] prefixes, the lower-case heads) comes first, so each group has
/// a bucket of its own (its masks then accept its own patterns and nothing else), and the
/// rest join them. No pattern is a prefix of another, nor does one end with what another
/// starts with (`tests::no_pattern_hides_another`), so every prefix and head in a text is
/// found, and its leftmost-first matches are the standard ones.
static TOKEN_STARTS: LazyLock<Option<PrefixSearcher>> = LazyLock::new(|| {
    let patterns = token_start_patterns();
    match aho_corasick::packed::Searcher::new(patterns.iter()) {
        Some(packed) => Some(PrefixSearcher::Packed(packed)),
        None => AhoCorasick::new(patterns.iter())
            .ok()
            .map(PrefixSearcher::General),
    }
});

/// What [`TOKEN_STARTS`] searches for, in its order.
fn token_start_patterns() -> Vec<Vec<u8>> {
    let (heads, other_cases) = caseless_heads();
    let (groups, later) = TOKEN_PREFIXES.split_at(TOKEN_PREFIX_GROUPS);
    let prefix = |p: &(&str, Kind)| p.0.as_bytes().to_vec();
    groups
        .iter()
        .map(prefix)
        .chain(heads)
        .chain(later.iter().map(prefix))
        .chain(other_cases)
        .collect()
}

/// A packed searcher where the CPU has one, the general automaton elsewhere.
enum PrefixSearcher {
    Packed(aho_corasick::packed::Searcher),
    General(AhoCorasick),
}

impl PrefixSearcher {
    /// (start, end) of each prefix found in `text`, left to right, not overlapping.
    fn find_all(&self, text: &[u8]) -> Vec<(usize, usize)> {
        match self {
            PrefixSearcher::Packed(s) => s.find_iter(text).map(|m| (m.start(), m.end())).collect(),
            PrefixSearcher::General(s) => s.find_iter(text).map(|m| (m.start(), m.end())).collect(),
        }
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'+' | b'/' | b'=')
}

/// `text` with tokens in well-known credential formats redacted (`sk-…` whole, `Bearer …`
/// keeping the word and the blanks after it, a Z.ai key whole). A token is redacted when
/// it starts at a word boundary, is at least `MIN_TOKEN_LEN` characters long and, after a
/// prefix prose uses too, looks random ([`Run::looks_random`]). The text is read as JSON
/// would decode it (see [`redact_tokens_bytes`]).
pub fn redact_tokens(text: &str) -> Cow<'_, str> {
    match redact_tokens_bytes(text.as_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        // Only ASCII runs are replaced by ASCII, so the text stays UTF-8.
        Cow::Owned(out) => Cow::Owned(
            String::from_utf8(out)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        ),
    }
}

/// [`redact_tokens`] on bytes, for a text not known to be UTF-8 (the transcript's entries,
/// which need no validation for it). Prefixes and token characters are all ASCII, and a
/// byte of a multi-byte character is never ASCII, so this finds exactly what the `str`
/// version finds, and a UTF-8 text stays UTF-8.
///
/// A token is found in every spelling JSON gives it, as a known value is: any of its
/// characters (the prefix's, the blanks after `Bearer`, the token's) written as an escape
/// (`\u0073k-…`, `\u0042earer\u0020…`, `\/`, `\t`), and an escape before it counts as the
/// character it spells (`\n` ends a word). The text is read as JSON decodes it only around
/// each candidate, with the escape reader of the known values ([`unescape`]); what is
/// replaced is the token's spelling. Candidates are the prefixes written literally (one
/// packed search) and the Z.ai keys ([`glm_keys`]) unless the text holds a `\u` escape of
/// printable ASCII (one `memmem`), which could spell one: then every position that could
/// start a prefix or a key is tried.
pub fn redact_tokens_bytes(text: &[u8]) -> Cow<'_, [u8]> {
    let Some(starts) = &*TOKEN_STARTS else {
        return Cow::Borrowed(text);
    };
    let found = if spells_printable_ascii(text) {
        spelled_token_matches(text)
    } else {
        // A prefix found is one of `TOKEN_PREFIXES`, or the head of a caseless word.
        let mut literal: Vec<(usize, usize, Kind)> = starts
            .find_all(text)
            .into_iter()
            .filter_map(|(start, end)| {
                match TOKEN_PREFIXES
                    .iter()
                    .find(|(word, _)| &text[start..end] == word.as_bytes())
                {
                    Some(&(_, kind)) => Some((start, end, kind)),
                    None => caseless_word_at(text, start),
                }
            })
            .collect();
        let keys = glm_keys(text);
        if literal.is_empty() && keys.is_empty() {
            return Cow::Borrowed(text);
        }
        // A caseless word starts before its head, maybe before a prefix found earlier.
        literal.sort_unstable_by_key(|&(start, _, _)| start);
        let prefixed = token_matches(text, literal.into_iter());
        merge_matches(prefixed, keys)
    };
    replace_tokens(text, &found)
}

/// `url` with the password of its user info replaced by [`REDACTED`]
/// (`https://user:secret@host/` → `https://user:[REDACTED]@host/`), for messages and
/// reports that show a URL the user gave (a base URL, a proxy): such a password is no
/// known value, and has no token shape. A URL without one comes back as it is.
pub fn url_without_password(url: &str) -> Cow<'_, str> {
    let Some(scheme_end) = url.find("://") else {
        return Cow::Borrowed(url);
    };
    let rest_at = scheme_end + 3;
    let rest = &url[rest_at..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let Some(at) = authority.rfind('@') else {
        return Cow::Borrowed(url);
    };
    let Some(colon) = authority[..at].find(':') else {
        return Cow::Borrowed(url);
    };
    let password = rest_at + colon + 1..rest_at + at;
    if password.is_empty() {
        return Cow::Borrowed(url);
    }
    Cow::Owned(format!(
        "{}{REDACTED}{}",
        &url[..password.start],
        &url[password.end..]
    ))
}

/// A token [`awaits_token`] puts after a line to see whether it would be redacted there.
const PROBE: &str = "Pr0be7Tk9Lm3Np5Qr";

/// Whether a line ends where a token would follow on the next line a reader sees: after
/// `Bearer`, or an `Authorization` header (and its scheme), with only blanks after it.
/// Lines kept one by one (stderr's, `last_lines`) then redact the next line's leading
/// token ([`redact_continued`]), as a text holding both lines would.
pub fn awaits_token(line: &str) -> bool {
    let from = (line.len().saturating_sub(CUT_TOKEN_WINDOW)..=line.len())
        .find(|&at| line.is_char_boundary(at))
        .unwrap_or(0);
    let probed = format!("{}\n{PROBE}", &line[from..]);
    redact_tokens(&probed).ends_with(REDACTED)
}

/// `line`, the line after one that [`awaits_token`], with a token at its start (after
/// blanks) redacted as it would be after `Bearer` and a line break; other tokens too.
pub fn redact_continued(line: &str) -> Cow<'_, str> {
    const BEFORE: &str = "Bearer\n";
    match redact_tokens(&format!("{BEFORE}{line}")) {
        Cow::Owned(out) if out.starts_with(BEFORE) => Cow::Owned(out[BEFORE.len()..].to_owned()),
        _ => redact_tokens(line),
    }
}

/// `a` and `b` (each sorted, not overlapping) in one sorted list; of two that overlap,
/// the earlier stays.
fn merge_matches(mut a: Vec<(usize, usize)>, b: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    if b.is_empty() {
        return a;
    }
    a.extend(b);
    a.sort_unstable();
    let mut end = 0;
    a.retain(|&(start, stop)| {
        let keep = start >= end;
        if keep {
            end = stop;
        }
        keep
    });
    a
}

/// Whether `text` holds a `\u` escape of printable ASCII ([`TOKEN_CHAR_ESCAPES`]).
fn spells_printable_ascii(text: &[u8]) -> bool {
    static ASCII_ESCAPE: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(b"\\u00"));
    ASCII_ESCAPE
        .find_iter(text)
        .any(|at| matches!(text.get(at + 4), Some(b'2'..=b'7')) && escape_starts_at(text, at))
}

/// Whether the backslash at `at` starts an escape: it follows an even run of backslashes
/// (`\\` is an escaped backslash, so the one after it starts nothing of its own).
fn escape_starts_at(text: &[u8], at: usize) -> bool {
    let before = text[..at].iter().rev().take_while(|b| **b == b'\\').count();
    before % 2 == 0
}

/// The character at `at` as JSON decodes it (a literal byte, or the escape starting
/// there) and the bytes it takes; a character outside ASCII is [`NOT_ASCII`]. A
/// backslash that starts no escape stands for itself.
fn char_at(text: &[u8], at: usize) -> Option<(u8, usize)> {
    let b = *text.get(at)?;
    if b != b'\\' {
        return Some((b, 1));
    }
    Some(match unescape(&text[at..]) {
        Unescaped::Char(buf, 1, used) => (buf[0], used),
        Unescaped::Char(_, _, used) => (NOT_ASCII, used),
        Unescaped::Incomplete | Unescaped::Invalid => (b'\\', 1),
    })
}

/// The character before `at` as JSON decodes it: the escape that ends there (`\n`,
/// `\u00e9`) where one does, else the byte.
fn char_before(text: &[u8], at: usize) -> Option<u8> {
    let before = *text.get(at.checked_sub(1)?)?;
    if let Some(start) = at.checked_sub(6)
        && text[start..start + 2] == *b"\\u"
        && escape_starts_at(text, start)
        && let Some(code) = hex4(text, start + 2)
    {
        // A surrogate pair's second half reads as what the pair spells: not ASCII.
        return Some(
            u8::try_from(code)
                .ok()
                .filter(u8::is_ascii)
                .unwrap_or(NOT_ASCII),
        );
    }
    if let Some(start) = at.checked_sub(2)
        && text[start] == b'\\'
        && escape_starts_at(text, start)
        && let Some((c, 2)) = char_at(text, start)
    {
        return Some(c);
    }
    Some(before)
}

/// Whether a word starts at `at`: no letter or digit (as JSON decodes it) before it.
fn at_word_start(text: &[u8], at: usize) -> bool {
    char_before(text, at).is_none_or(|c| !c.is_ascii_alphanumeric())
}

/// What a character spelled outside ASCII reads as: not a letter, a digit or a token
/// character, as a literal one's bytes are not.
const NOT_ASCII: u8 = 0x80;

/// The token prefix spelled at `at`, if any: where it ends, the prefix, and its kind.
fn prefix_at(text: &[u8], at: usize) -> Option<(usize, &'static str, Kind)> {
    all_prefixes().find_map(|(prefix, kind)| {
        let caseless = kind.is_caseless();
        let mut pos = at;
        for &want in prefix.as_bytes() {
            let (c, used) = char_at(text, pos)?;
            if c != want && !(caseless && c.eq_ignore_ascii_case(&want)) {
                return None;
            }
            pos += used;
        }
        Some((pos, prefix, kind))
    })
}

/// The tokens of a text that may spell a prefix with escapes: every position that could
/// start one (a prefix's first letter, or a backslash that starts an escape) is tried,
/// and every word start that could start a Z.ai key.
fn spelled_token_matches(text: &[u8]) -> Vec<(usize, usize)> {
    let candidates = text.iter().enumerate().filter_map(|(at, &b)| {
        let could = PREFIX_STARTS[usize::from(b)] || (b == b'\\' && escape_starts_at(text, at));
        could.then(|| prefix_at(text, at).map(|(end, _, kind)| (at, end, kind)))?
    });
    let prefixed = token_matches(text, candidates);
    let keys = (0..text.len())
        .filter(|&at| (is_lower_hex(text[at]) || text[at] == b'\\') && at_word_start(text, at))
        .filter_map(|at| glm_key_at(text, at).map(|end| (at, end)));
    merge_matches(
        prefixed,
        keys.fold(Vec::new(), |mut found: Vec<(usize, usize)>, m| {
            if found.last().is_none_or(|last| m.0 >= last.1) {
                found.push(m);
            }
            found
        }),
    )
}

/// The tokens among `prefixes` (spelled at these ranges of `text`, of this kind): for
/// each, the range redacted ([`token_after`]). The text is read as JSON decodes it
/// ([`char_at`], [`char_before`]).
fn token_matches(
    text: &[u8],
    prefixes: impl Iterator<Item = (usize, usize, Kind)>,
) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut pos = 0;
    for (start, end, kind) in prefixes {
        if start < pos || !at_word_start(text, start) {
            continue;
        }
        if let Some(range) = token_after(text, start, end, kind) {
            pos = range.1;
            found.push(range);
        }
    }
    found
}

/// The range redacted for the prefix spelled at `start..end`: the prefix and its token
/// (a vendor's prefix), or the token alone (after `Bearer` or a header), when the token
/// is at least [`MIN_TOKEN_LEN`] characters long and, unless the prefix is a vendor's,
/// looks random.
fn token_after(text: &[u8], start: usize, end: usize, kind: Kind) -> Option<(usize, usize)> {
    let token_at = token_start(text, end, kind)?;
    let (stop, run) = read_run(text, token_at);
    let random = kind == Kind::Vendor || run.looks_random();
    (run.len >= MIN_TOKEN_LEN && random).then_some(match kind {
        Kind::Vendor | Kind::Weak => (start, stop),
        Kind::Bearer | Kind::Header => (token_at, stop),
    })
}

/// Where the token after a prefix of `kind` ending at `end` starts: right there for a
/// vendor's prefix, past one or more blanks after `Bearer`, past the separator (and a
/// scheme word and its blanks) after `Authorization`.
fn token_start(text: &[u8], end: usize, kind: Kind) -> Option<usize> {
    match kind {
        Kind::Vendor | Kind::Weak => Some(end),
        Kind::Bearer => {
            let at = skip_blanks(text, end);
            (at > end).then_some(at)
        }
        Kind::Header => {
            let at = skip_header_separator(text, end)?;
            let (word_end, letters) = skip_while(text, at, |c| c.is_ascii_alphabetic());
            let after = skip_blanks(text, word_end);
            let scheme = (1..=20).contains(&letters) && after > word_end;
            Some(if scheme { after } else { at })
        }
    }
}

/// Past the spaces, tabs and line breaks at `at`.
fn skip_blanks(text: &[u8], at: usize) -> usize {
    skip_while(text, at, |c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')).0
}

/// Past the characters at `at` that `keep` accepts (read as JSON decodes them), and how
/// many there were.
fn skip_while(text: &[u8], mut at: usize, keep: impl Fn(u8) -> bool) -> (usize, usize) {
    let mut count = 0;
    while let Some((c, used)) = char_at(text, at)
        && keep(c)
    {
        at += used;
        count += 1;
    }
    (at, count)
}

/// Past what separates a header's name from its value (`: `, `": "`, `=`, `' : '`): at
/// most eight quotes, blanks, `:` and `=`, of which one `:` or `=`.
fn skip_header_separator(text: &[u8], mut at: usize) -> Option<usize> {
    let mut assigned = false;
    for _ in 0..8 {
        match char_at(text, at) {
            Some((b':' | b'=', used)) => {
                assigned = true;
                at += used;
            }
            Some((b'"' | b'\'' | b' ' | b'\t', used)) => at += used,
            _ => break,
        }
    }
    assigned.then_some(at)
}

/// A run of token characters, as far as redaction cares.
#[derive(Debug, Default)]
struct Run {
    len: usize,
    digit: bool,
    letter: bool,
    /// Pairs of letters side by side, and how many of them change case (`aB`, `Ab`).
    pairs: usize,
    changes: usize,
}

impl Run {
    /// Whether the run looks like a credential rather than a word after a prefix prose
    /// uses too (`Bearer authentication`, `sk-learn-compatible-models`): it holds a
    /// letter and a digit, or its letters change case between at least a third of eight
    /// or more neighbouring pairs, as random base64 does about every second pair
    /// (`YWxhZGRpbjpvcGVuc2VzYW1l`, a `Basic` header's `user:password`) and identifiers
    /// do only at word starts (`accessTokenFromEnvironment`: 6 of 25,
    /// `XMLHttpRequestFactory`: 5 of 20).
    fn looks_random(&self) -> bool {
        (self.digit && self.letter) || (self.pairs >= 8 && self.changes * 3 >= self.pairs)
    }
}

/// The run of token characters at `at` (read as JSON decodes it): where it ends, and
/// what it holds.
fn read_run(text: &[u8], mut at: usize) -> (usize, Run) {
    let mut run = Run::default();
    let mut last_upper: Option<bool> = None;
    while let Some((c, used)) = char_at(text, at)
        && is_token_byte(c)
    {
        run.len += 1;
        run.digit |= c.is_ascii_digit();
        if c.is_ascii_alphabetic() {
            run.letter = true;
            let upper = c.is_ascii_uppercase();
            if let Some(last) = last_upper {
                run.pairs += 1;
                run.changes += usize::from(last != upper);
            }
            last_upper = Some(upper);
        } else {
            last_upper = None;
        }
        at += used;
    }
    (at, run)
}

/// A Z.ai (Zhipu GLM) key's two parts: `<32 lower-case hex digits>.<16 letters and
/// digits>` (the id and the secret a client signs its tokens with); it has no prefix.
const GLM_ID_LEN: usize = 32;
const GLM_SECRET_LEN: usize = 16;

/// The bytes a text known clean in pieces must have on each side of a join for a Z.ai key
/// across it to be seen whole: the key and the character before it.
const GLM_SPAN: usize = GLM_ID_LEN + 1 + GLM_SECRET_LEN + 1;

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// Whether all eight bytes of `word` may be lower-case hex digits: a quick test that most
/// text fails (every byte 0x30-0x3F or 0x60-0x6F: 0x20 set, 0x80 clear, 0x10 unlike 0x40),
/// in a few operations on the whole word.
fn may_be_hex(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const SIXTEENS: u64 = ONES * 0x10;
    const SPACES: u64 = ONES * 0x20;
    const TOPS: u64 = ONES * 0x80;
    ((word & (TOPS | SPACES)) ^ SPACES) | (!(word ^ (word >> 2)) & SIXTEENS) == 0
}

/// How far apart the 8-byte blocks [`glm_keys`] tests are: a key's 32 hex digits hold
/// the block starting at every position from its first to its 25th, one of which is a
/// multiple of 24.
const GLM_STRIDE: usize = 24;

/// The first block at or after `at` (a multiple of [`GLM_STRIDE`]) that may be made of
/// hex digits ([`may_be_hex`]), testing blocks [`GLM_STRIDE`] bytes apart, four to a step
/// of fixed size (bounds checks and the branch per block were most of the cost).
fn next_hex_block(text: &[u8], at: usize) -> Option<usize> {
    const STEP: usize = 4 * GLM_STRIDE;
    let mut skipped = 0;
    for chunk in text.get(at..)?.chunks_exact(STEP) {
        let Ok(chunk) = <&[u8; STEP]>::try_from(chunk) else {
            break;
        };
        let word = |i: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&chunk[i * GLM_STRIDE..i * GLM_STRIDE + 8]);
            may_be_hex(u64::from_le_bytes(word))
        };
        if word(0) | word(1) | word(2) | word(3) {
            break;
        }
        skipped += STEP;
    }
    let mut at = at + skipped;
    while let Some(bytes) = text.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(bytes);
        if may_be_hex(u64::from_le_bytes(word)) {
            return Some(at);
        }
        at += GLM_STRIDE;
    }
    None
}

/// The Z.ai keys written literally in `text` (a text without `\u` escapes of printable
/// ASCII, which could spell one otherwise), as ranges. Cheap on ordinary text: only the
/// 8-byte block at every [`GLM_STRIDE`]th byte is tested ([`next_hex_block`]), and only
/// around one that may be made of hex digits is a key looked for.
fn glm_keys(text: &[u8]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(block) = next_hex_block(text, at) {
        let dot = block
            + text[block..]
                .iter()
                .take_while(|b| is_lower_hex(**b))
                .count();
        at = (block + GLM_STRIDE).max(dot.next_multiple_of(GLM_STRIDE));
        // The key's id ends at the dot; hex digits before it may be an escape's (`\u000a`).
        if let Some(start) = dot.checked_sub(GLM_ID_LEN)
            && at_word_start(text, start)
            && let Some(end) = glm_key_at(text, start)
        {
            found.push((start, end));
            at = at.max(end.next_multiple_of(GLM_STRIDE));
        }
    }
    found
}

/// The end of a Z.ai key spelled at `at` (read as JSON decodes it), if one is: 32
/// lower-case hex digits, a dot, then 16 or more letters and digits.
fn glm_key_at(text: &[u8], at: usize) -> Option<usize> {
    let (dot, id) = skip_while(text, at, is_lower_hex);
    if id != GLM_ID_LEN || char_at(text, dot)?.0 != b'.' {
        return None;
    }
    let (end, secret) = skip_while(text, dot + 1, |c| c.is_ascii_alphanumeric());
    (secret >= GLM_SECRET_LEN).then_some(end)
}

/// How far before a cut a token cut short may start: fewer than [`MIN_TOKEN_LEN`]
/// characters of at most 6 bytes each (`\u00XX`), its prefix (as long, escaped), and the
/// blanks after `Bearer` (or a header's separator and scheme).
const CUT_TOKEN_WINDOW: usize = 256;

/// `text` with every token shape cut short at a cut (its end, with [`Ending::Cut`], and
/// each `…`) replaced by [`REDACTED`]; `None` when there is none. A token whole is
/// redacted before ([`redact_tokens_bytes`]); what is left at a cut is the head of a token
/// too short to be taken for one, which this drops when it holds [`MIN_PARTIAL`] or more
/// characters (of the token proper: after `Bearer` and its blanks, after a prefix). The
/// text may be JSON (a transcript entry): a token's run never leaves its string, so what
/// is replaced lies inside one.
pub fn redact_cut_tokens_bytes(text: &[u8], ending: Ending) -> Option<Vec<u8>> {
    static ELLIPSIS: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new("…".as_bytes()));
    let mut cuts: Vec<usize> = ELLIPSIS.find_iter(text).collect();
    if ending == Ending::Cut {
        cuts.push(text.len());
    }
    let mut out: Option<Vec<u8>> = None;
    let mut pos = 0;
    for cut in cuts {
        let Some(start) = cut_token_start(text, pos, cut) else {
            continue;
        };
        let buf = out.get_or_insert_with(|| Vec::with_capacity(text.len()));
        buf.extend_from_slice(&text[pos..start]);
        buf.extend_from_slice(REDACTED.as_bytes());
        pos = cut;
    }
    out.map(|mut buf| {
        buf.extend_from_slice(&text[pos..]);
        buf
    })
}

/// Where the redaction of a token cut short at `cut` starts (not before `from`): the
/// earliest token prefix in the [`CUT_TOKEN_WINDOW`] before the cut whose token runs up to
/// the cut (or into an escape the cut breaks off) with at least [`MIN_PARTIAL`]
/// characters, and a digit among them unless the prefix is a vendor's. The text before
/// the cut is read as JSON decodes it.
fn cut_token_start(text: &[u8], from: usize, cut: usize) -> Option<usize> {
    let head = &text[..cut];
    let lo = from.max(cut.saturating_sub(CUT_TOKEN_WINDOW));
    (lo..cut).find_map(|at| {
        let b = head[at];
        let could = PREFIX_STARTS[usize::from(b)] || (b == b'\\' && escape_starts_at(head, at));
        if !could || !at_word_start(head, at) {
            return None;
        }
        let (end, _, kind) = prefix_at(head, at)?;
        let token_at = token_start(head, end, kind)?;
        let (pos, run) = read_run(head, token_at);
        let broken_escape = head.get(pos) == Some(&b'\\')
            && matches!(unescape(&head[pos..]), Unescaped::Incomplete);
        let reaches = pos == cut || broken_escape;
        // After the prefixes prose also uses (`Bearer header…`, `sk-learn…`), only what
        // holds a digit, as a token's head mostly does.
        let enough = run.len >= MIN_PARTIAL && (run.digit || kind == Kind::Vendor);
        (reaches && enough).then_some(match kind {
            Kind::Vendor | Kind::Weak => at,
            Kind::Bearer | Kind::Header => token_at,
        })
    })
}

/// `text` with each of `found` replaced by [`REDACTED`].
fn replace_tokens<'a>(text: &'a [u8], found: &[(usize, usize)]) -> Cow<'a, [u8]> {
    if found.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(text.len());
    let mut pos = 0;
    for &(start, end) in found {
        out.extend_from_slice(&text[pos..start]);
        out.extend_from_slice(REDACTED.as_bytes());
        pos = end;
    }
    out.extend_from_slice(&text[pos..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "zk-Tq81Lm9Xv2Pw7Rb4Hc6N";

    fn secrets() -> Secrets {
        Secrets::new([KEY, "hunter2hunter2", "ab", "default", "production"])
    }

    #[test]
    fn token_redaction_on_bytes_matches_the_str_version() {
        let texts = [
            "key é sk-ant0123456789abcdefXYZ end",
            "Bearer abcdef0123456789abcdef, ésk-ant0123456789abcdefXYZ",
            "xsk-ant0123456789abcdefXYZ and sk-learn-compatible-models",
        ];
        for text in texts {
            assert_eq!(
                redact_tokens_bytes(text.as_bytes()).as_ref(),
                redact_tokens(text).as_bytes()
            );
        }
        // Not UTF-8: still redacted (the transcript's entries are not validated first).
        let raw = b"\xff\xfe ghp_0123456789abcdefABCDEF \xff".to_vec();
        let mut raw = raw;
        raw[0] = 0xff;
        let out = redact_tokens_bytes(&raw);
        assert!(
            out.windows(REDACTED.len())
                .any(|w| w == REDACTED.as_bytes())
        );
    }

    #[test]
    fn a_text_is_called_clean_only_when_redaction_leaves_it_alone() {
        let slashed = Secrets::new([KEY, "pa/ss\"wo9rd"]);
        let needing = [
            format!("key={KEY} ok"),
            format!("key=\\u007a{} ok", &KEY[1..]),
            KEY.replace('-', "\\u002d"),
            r#"{"a":"pa\/ss\"wo9rd"}"#.to_owned(),
            format!("failed: {}… (exit 1)", &KEY[..12]),
            "auth: Bearer abc123def456ghi789".to_owned(),
            "sk-ant-api03-AAAA1111BBBB2222".to_owned(),
            "x ghp_0123456789abcdefABCDEF".to_owned(),
            "AKIA0123456789ABCDEF".to_owned(),
        ];
        let tokens = [
            r"\u0073k-ant-api03-AAAA1111BBBB2222",
            r"auth: Bearer\tabc123def456ghi789",
            r"auth: \u0042earer abc123def456ghi789",
            r"x\nghp_0123456789abcdefABCDEF",
            "x-api-key: Zk4Wq8Xr2Ty6Up0Io",
            r#"{"X-Api-Key":"Zk4Wq8Xr2Ty6Up0Io"}"#,
            r"\u0078-api-key: Zk4Wq8Xr2Ty6Up0Io",
        ];
        for text in &needing {
            let changed = slashed
                .redact_known(text.as_bytes(), Ending::Whole)
                .is_some()
                || matches!(redact_tokens_bytes(text.as_bytes()), Cow::Owned(_));
            assert!(changed, "{text}");
            assert!(!slashed.surely_clean(text.as_bytes()), "{text}");
        }
        for text in tokens {
            assert!(matches!(
                redact_tokens_bytes(text.as_bytes()),
                Cow::Owned(_)
            ));
            for secrets in [&slashed, &Secrets::new(Vec::<String>::new())] {
                assert!(!secrets.surely_clean(text.as_bytes()), "{text}");
            }
        }
        // Plain text, and lines of JSON with ordinary escapes, take the one pass only.
        // (Where the CPU has a packed searcher; elsewhere nothing is called clean.)
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let clean = r#"{"type":"assistant","text":"line\none \"quoted\" café — ✓"}"#;
        assert!(secrets().surely_clean(clean.as_bytes()));
        assert!(Secrets::new(Vec::<String>::new()).surely_clean(b"no secrets known"));
        assert!(secrets().surely_clean(b""));
        // `\"` can spell a character of the second set's secret, but only followed by the
        // spelling of its next character (`w`, or an escape): `\"q` spells none of it.
        assert!(slashed.surely_clean(clean.as_bytes()));
        assert_eq!(slashed.redact_known(clean.as_bytes(), Ending::Whole), None);
        for spelled in [r#"x \"wo"#, r#"x \"\u0077o"#, r#"x \"\n"#] {
            assert!(!slashed.surely_clean(spelled.as_bytes()), "{spelled}");
        }
        // A `\u` escape of a character no secret holds spells none: clean. One of a
        // character a secret holds, in any case of its hex digits, is not.
        let checked = Secrets::new([KEY, "pass✓wörd𝄞42"]);
        let escaped = r#"{"text":"done \u2714 \u4e2d\n"}"#;
        assert!(secrets().surely_clean(escaped.as_bytes()));
        // Without known values, only `\u` escapes of printable ASCII (which can spell a
        // token shape) are not.
        let none = Secrets::new(Vec::<String>::new());
        assert!(none.surely_clean(br#"\u001b[0m \u4e2d\u00e9 \/ \t Bear"#.as_slice()));
        for spelled in [r"\u0073k-", r"B\u0065arer", r"\u007E", r"\u002D"] {
            assert!(!none.surely_clean(spelled.as_bytes()), "{spelled}");
        }
        for spelled in [
            "pass\\u2713wörd𝄞42",
            "pass✓w\\u00F6rd𝄞42",
            "pass✓wörd\\uD834\\uDD1E42",
            "pass✓wörd\\ud834\\udd1e42",
            "pass✓wörd\\uD834\\udD1e42",
        ] {
            assert!(
                checked
                    .redact_known(spelled.as_bytes(), Ending::Whole)
                    .is_some(),
                "{spelled}"
            );
            assert!(!checked.surely_clean(spelled.as_bytes()), "{spelled}");
        }
    }

    /// On random texts made of the pieces redaction acts on and of text that shares
    /// their first bytes, a text the pre-filter calls clean is one redaction leaves alone
    /// (helper `stream`'s test, with the shapes added since).
    #[test]
    fn what_surely_clean_clears_redaction_leaves_alone() {
        let pieces = [
            "Bearer ",
            "bearer\t",
            "be",
            "earer",
            "— ",
            "“x”",
            "…",
            "\\/",
            "\\\"",
            "\\n",
            "\\u0042",
            "\\u00e9",
            "\\u2014",
            "sk-",
            "ghp_",
            "eyJ",
            "AKIA",
            "BEARER ",
            "Authorization: Basic ",
            "authorization=",
            "glpat-",
            "AIza",
            "xoxa-",
            "5371d5ed2fa84618852eee0459455c57",
            ".dgquQksHDfyLekKX",
            "\\u002e",
            "pa/ss",
            "wo9rd",
            KEY,
            "zk-Tq81",
            "abcdef0123456789abcdef ",
            "/etc/x",
            " ",
            "word ",
            r#"pa\/ss\"wo9rd"#,
            r#"pa\/\u0073s\"wo9rd"#,
            r#"pa/ss\"\u0077o9rd"#,
            r"\/etc\/ssl\/certs\/x.crt",
            "tok3n-abc/",
            r"tok3n-abc\/",
            r"\/\",
            r"\/s",
            "x-api-key: ",
            "X-Api-Key=",
            "x-api-",
            "X-API-KEY: ",
            "BeArEr ",
            r"\u0078-api-key:",
            "api-key=",
            "X-Api-",
            "Key: ",
        ];
        let sets = [
            Secrets::new([KEY, "pa/ss\"wo9rd"]),
            Secrets::new(["tok3n-abc/", "/etc/ssl/certs/x.crt"]),
            Secrets::new(["/etc/ssl/certs/x.crt"]),
            secrets(),
            Secrets::new(Vec::<String>::new()),
        ];
        let mut rng = crate::stream::Xorshift(0x9e37_79b9_7f4a_7c15);
        let mut cleared = 0;
        for _ in 0..20_000 {
            let text: String = (0..1 + rng.below(8))
                .map(|_| pieces[rng.below(pieces.len())])
                .collect();
            for set in &sets {
                if set.surely_clean(text.as_bytes()) {
                    cleared += 1;
                    assert_eq!(
                        set.redact_known(text.as_bytes(), Ending::Whole),
                        None,
                        "{text}"
                    );
                    assert!(
                        matches!(redact_tokens_bytes(text.as_bytes()), Cow::Borrowed(_)),
                        "{text}"
                    );
                    assert_eq!(set.redact(&text), text, "{text}");
                }
            }
        }
        if cfg!(target_arch = "x86_64") {
            assert!(cleared > 1_000, "{cleared}");
        }
        // Text that shares only the first bytes of a pattern is cleared, with a secret
        // that needs `\/` (the packed searcher tells candidates by three bytes); the
        // escape before the spelling of the secret's next character is not, nor one that
        // ends a secret, nor any case of `Bearer`.
        let slashed = Secrets::new(["/etc/ssl/certs/x.crt"]);
        if cfg!(target_arch = "x86_64") {
            assert!(slashed.surely_clean("to be — “seen” /etc, bears".as_bytes()));
            assert!(slashed.surely_clean(br"to be \/q"));
        }
        assert!(!slashed.surely_clean(br"to be \/etc"));
        assert!(!slashed.surely_clean(br"to be \/etc"));
        assert!(!Secrets::new(["tok3n-abc/"]).surely_clean(br"tok3n-abc\/"));
        for text in ["a Bearer b", "a bearer b", "a BEARER b", r"a Bearer b"] {
            assert!(!slashed.surely_clean(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn only_credential_like_values_are_kept() {
        assert_eq!(secrets().values(), [KEY, "hunter2hunter2"]);
        assert!(Secrets::new(["0123456789abcdef0123"]).values().len() == 1);
        assert_eq!(
            Secrets::new(["hunter2hunter2\n"]).values(),
            ["hunter2hunter2"]
        );
    }

    #[test]
    fn known_values_in_every_json_spelling() {
        let s = secrets();
        let spellings = [
            KEY.to_owned(),
            format!("\\u007a{}", &KEY[1..]),
            format!("\\u007A\\u006B{}", &KEY[2..]),
            KEY.replace('-', "\\u002d"),
            KEY.chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect(),
        ];
        for spelled in spellings {
            let line = format!(r#"{{"text":"key={spelled} ok"}}"#);
            let out = s.redact(&line);
            assert_eq!(out, r#"{"text":"key=[REDACTED] ok"}"#, "{spelled}");
        }
        // Escapes of characters the secret holds besides `\u`.
        let s = Secrets::new(["pa/ss\"wo9rd"]);
        assert_eq!(
            s.redact(r#"{"a":"pa\/ss\"wo9rd"}"#),
            r#"{"a":"[REDACTED]"}"#
        );
    }

    #[test]
    fn other_text_is_left_alone() {
        let s = secrets();
        let text = r#"{"text":"zk-Tq81Lm9Xv2Pw7Rb4Hc6M \u001b[0m default production"}"#;
        assert!(matches!(s.redact(text), Cow::Borrowed(_)));
        assert!(matches!(
            s.redact("Bearer authentication, sk-learn-compatible-models, task-1234567890abcdefgh"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_cut_leaves_no_long_prefix() {
        let s = secrets();
        let text = format!("head {}", &KEY[..10]);
        assert_eq!(s.redact_ending(&text, Ending::Cut), "head [REDACTED]");
        assert_eq!(s.redact_ending(&text, Ending::Whole), text);
        let escaped = format!("head \\u007a{}\\u00", &KEY[1..8]);
        assert_eq!(s.redact_ending(&escaped, Ending::Cut), "head [REDACTED]");
        // Three bytes are left: a key's public prefix, and too little to mean anything.
        let short = format!("head {}", &KEY[..3]);
        assert_eq!(s.redact_ending(&short, Ending::Cut), short);
        // one_line's ellipsis marks a cut inside a text.
        let line = format!("failed: {}… (exit 1)", &KEY[..12]);
        assert_eq!(s.redact(&line), "failed: [REDACTED]… (exit 1)");
        assert_eq!(s.redact("plain… text"), "plain… text");
    }

    #[test]
    fn a_token_cut_short_leaves_at_most_three_characters() {
        let none = Secrets::new(Vec::<String>::new());
        for (text, ending, expected) in [
            ("head sk-ant-api03-Q7", Ending::Cut, "head [REDACTED]"),
            ("x ghp_H5jD8s", Ending::Cut, "x [REDACTED]"),
            ("x ghp_H5j", Ending::Cut, "x ghp_H5j"),
            ("x ghp_H5jD8s", Ending::Whole, "x ghp_H5jD8s"),
            ("a Bearer\tTk9Lm3Np", Ending::Cut, "a Bearer\t[REDACTED]"),
            (
                r"a \u0042earer Tk9L\u006d3Np",
                Ending::Cut,
                r"a \u0042earer [REDACTED]",
            ),
            // A cut inside the escape of the token's next character.
            (r"a eyJhbGci\u004", Ending::Cut, "a [REDACTED]"),
            // one_line's ellipsis is a cut, wherever it is.
            (
                "failed: Bearer abc123def4… (401)",
                Ending::Whole,
                "failed: Bearer [REDACTED]… (401)",
            ),
            (
                "run Bash(curl -H 'authorization: bearer eyJhbGciOiJ…",
                Ending::Whole,
                "run Bash(curl -H 'authorization: bearer [REDACTED]…",
            ),
            // Not a token cut: prose, a prefix alone, too short, not at the cut.
            ("plain… text", Ending::Whole, "plain… text"),
            ("Bearer… and sk-…", Ending::Whole, "Bearer… and sk-…"),
            ("a risk-0123456789…", Ending::Whole, "a risk-0123456789…"),
            // After `Bearer` and `sk-`, prose without a digit.
            (
                "set the Bearer header…",
                Ending::Whole,
                "set the Bearer header…",
            ),
            (
                "uses sk-learn-compatible…",
                Ending::Whole,
                "uses sk-learn-compatible…",
            ),
            ("x eyJhbGci", Ending::Cut, "x [REDACTED]"),
            ("ghp_H5jD8s more…", Ending::Whole, "ghp_H5jD8s more…"),
        ] {
            assert_eq!(none.redact_ending(text, ending), expected, "{text}");
        }
    }

    #[test]
    fn token_shapes() {
        let text = "auth: Bearer abc123def456ghi789 sk-ant-api03-AAAA1111BBBB2222 ok sk-1 ghp_0123456789abcdefABCDEF";
        let out = redact_tokens(text);
        assert_eq!(out, "auth: Bearer [REDACTED] [REDACTED] ok sk-1 [REDACTED]");
        assert_eq!(
            redact_tokens("risk-0123456789abcdefgh"),
            "risk-0123456789abcdefgh"
        );
    }

    #[test]
    fn token_shapes_in_every_json_spelling() {
        let cases = [
            (r"a \u0073k-ant-api03-AAAA1111BBBB2222 b", "a [REDACTED] b"),
            (
                r"a s\u006B\u002Dant-api03-AAAA1111BBBB2222 b",
                "a [REDACTED] b",
            ),
            (r"a sk-ant-api03-AAAA1111\/BBBB2222\/ b", "a [REDACTED] b"),
            (r"x\nsk-ant-api03-AAAA1111BBBB2222", r"x\n[REDACTED]"),
            (r"Bearer\u0020abc123def456ghi789", r"Bearer\u0020[REDACTED]"),
            ("Bearer  abc123def456ghi789", "Bearer  [REDACTED]"),
            ("Bearer\tabc123def456ghi789.", "Bearer\t[REDACTED]"),
            (r"Bearer\tabc123def456ghi789\n", r"Bearer\t[REDACTED]\n"),
            (
                r"\u0042earer abc123\/def456ghi789=,",
                r"\u0042earer [REDACTED],",
            ),
            (
                r#"{"k":"\"ghp_0123456789abcdefABCDEF\""}"#,
                r#"{"k":"\"[REDACTED]\""}"#,
            ),
            (
                r"\u0041\u004b\u0049\u0041\u0030123456789ABCDEF",
                "[REDACTED]",
            ),
            (
                r"sk-ant-api03-AAAA1111BBBB2222\u00e9x",
                r"[REDACTED]\u00e9x",
            ),
            (
                r"\u00e9 \u0073k-ant-api03-AAAA1111BBBB2222",
                r"\u00e9 [REDACTED]",
            ),
            (r"\\\u0073k-ant-api03-AAAA1111BBBB2222", r"\\[REDACTED]"),
            // HTTP's scheme is case-insensitive; a token can follow on the next line.
            ("bearer abc123def456ghi789", "bearer [REDACTED]"),
            (r"\u0062earer abc123def456ghi789", r"\u0062earer [REDACTED]"),
            (r"Bearer\nabc123def456ghi789", r"Bearer\n[REDACTED]"),
            (r"bearer\r\n  abc123def456ghi789", r"bearer\r\n  [REDACTED]"),
            ("Bearer\nabc123def456ghi789", "Bearer\n[REDACTED]"),
            // GitHub's user and refresh tokens; a JSON Web Token (a MiniMax key) whole.
            ("x ghu_0123456789abcdefABCDEF", "x [REDACTED]"),
            ("x ghr_0123456789abcdefABCDEF", "x [REDACTED]"),
            (
                "key=eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl ok",
                "key=[REDACTED] ok",
            ),
            (r"\u0065yJhbGciOiJIUzI1NiJ9.e30.abc", "[REDACTED]"),
        ];
        for (text, expected) in cases {
            assert_eq!(redact_tokens(text), expected, "{text}");
        }
        // Prose in any spelling, and what only looks like an escape (an escaped backslash
        // before `u0073k-`: a reader sees `\u0073k-…`), stay.
        for text in [
            r"Bearer\u0020authentication \u0073k-learn-compatible-models",
            r"ta\u0073k-0123456789abcdefgh \\u0073k-ant-api03-AAAA1111BBBB2222",
            r"Bearer\u0009\u0009authentication, Bearer:abc123def456ghi789",
            "a\\ \\u00 sk-ant-api03-\\u00",
            "bearer authentication, BEARER TOKENS, eyJust-a-word-here",
        ] {
            assert!(matches!(redact_tokens(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn round_twelve_shapes_and_the_prose_beside_them() {
        let glm = "5371d5ed2fa84618852eee0459455c57.dgquQksHDfyLekKX";
        for (text, expected) in [
            (format!("key={glm} ok"), "key=[REDACTED] ok"),
            (format!(r"\n{glm}"), r"\n[REDACTED]"),
            (format!(r"\u0035{}", &glm[1..]), "[REDACTED]"),
            (
                "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l".to_owned(),
                "Authorization: Basic [REDACTED]",
            ),
            (
                "authorization: token 4f9a2c7e1b8d3f6a0c5e".to_owned(),
                "authorization: token [REDACTED]",
            ),
            ("BEARER Hk4Jm8Ln2Pq6Rs0Tu".to_owned(), "BEARER [REDACTED]"),
            ("x glpat-Xy7Zk2Qm9Wv4Rt8Np3Ls".to_owned(), "x [REDACTED]"),
            (
                "AIzaSyB4kQ9xM2vN7pL3rT8wZ5cY1hJ6fD0gK".to_owned(),
                "[REDACTED]",
            ),
            ("xoxa-1357924680-Qw8Er6Ty4Ui2".to_owned(), "[REDACTED]"),
            ("ghp_QwErTyUiOpAsDfGhJkLzXcVb".to_owned(), "[REDACTED]"),
        ] {
            assert_eq!(redact_tokens(&text), expected, "{text}");
            assert!(
                !Secrets::new(Vec::<String>::new()).surely_clean(text.as_bytes())
                    || cfg!(not(target_arch = "x86_64"))
            );
        }
        for text in [
            "Bearer accessTokenFromEnvironment, sk-XMLHttpRequestFactory",
            "authorization: token-based-authentication-scheme",
            "the Authorization header: Basic authentication-is-deprecated",
            "commit 0f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d4",
            "x0f1e2d3c4b5a69788796a5b4c3d2e1f0.abcdefghijklmnop",
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0.json",
        ] {
            assert!(matches!(redact_tokens(text), Cow::Borrowed(_)), "{text}");
        }
        // A key across a join of pieces known clean is found: the span covers it.
        assert!(Secrets::default().surely_clean_span() > glm.len());
    }

    #[test]
    fn a_token_on_the_line_after_bearer_is_redacted() {
        for line in [
            "curl: Authorization: Bearer",
            "> authorization: Basic  ",
            "Bearer\t",
            "AUTHORIZATION: BEARER",
        ] {
            assert!(awaits_token(line), "{line}");
        }
        for line in ["Bearer authentication", "sk-", "the Bearer scheme.", "ok"] {
            assert!(!awaits_token(line), "{line}");
        }
        assert_eq!(
            redact_continued("  Tk9Lm3Np7Qr1St5Uv/Wx+Yz2 (expired)"),
            "  [REDACTED] (expired)"
        );
        assert_eq!(
            redact_continued("authentication failed"),
            "authentication failed"
        );
    }

    #[test]
    fn a_zai_key_is_found_at_every_offset() {
        let glm = "5371d5ed2fa84618852eee0459455c57.dgquQksHDfyLekKX";
        for offset in 0..200 {
            let text = format!("{} {glm} {}", "q".repeat(offset), "z".repeat(offset % 7));
            let start = offset + 1;
            assert_eq!(
                glm_keys(text.as_bytes()),
                [(start, start + glm.len())],
                "{offset}"
            );
            assert!(
                !Secrets::new(Vec::<String>::new()).surely_clean(text.as_bytes())
                    || cfg!(not(target_arch = "x86_64"))
            );
        }
    }

    #[test]
    fn json_values_are_redacted_decoded() {
        let s = secrets();
        let raw = format!(r#"{{"a":["\u007a{}"],"{KEY}":1,"n":2}}"#, &KEY[1..]);
        let out = s.redact_json_text(&raw).unwrap();
        assert_eq!(out, r#"{"a":["[REDACTED]"],"[REDACTED]":1,"n":2}"#);
        assert_eq!(s.redact_json_text(r#"{"a":"clean"}"#), None);
    }

    #[test]
    fn bearer_and_header_names_in_any_case_lead_to_a_token() {
        let none = Secrets::new(Vec::<String>::new());
        for (text, want) in [
            ("x BeArEr Tk9Lm3Np7Qr1St5Uv y", "x BeArEr [REDACTED] y"),
            (r"bEARER\tTk9Lm3Np7Qr1St5Uv", r"bEARER\t[REDACTED]"),
            (r"\u0062eArEr Tk9Lm3Np7Qr1St5Uv", r"\u0062eArEr [REDACTED]"),
            (
                "AuThOrIzAtIoN: Basic YWxhZGRpbjpvcGVuc2VzYW1l",
                "AuThOrIzAtIoN: Basic [REDACTED]",
            ),
            ("X-API-KEY: Zk4Wq8Xr2Ty6Up0Io", "X-API-KEY: [REDACTED]"),
        ] {
            assert_eq!(redact_tokens(text), want, "{text}");
            assert!(!none.surely_clean(text.as_bytes()), "{text}");
        }
        // Cut short, a token after a mixed-case scheme is dropped too.
        assert_eq!(
            redact_cut_tokens_bytes(b"a BeArEr Tk9Lm3", Ending::Cut).as_deref(),
            Some(&b"a BeArEr [REDACTED]"[..])
        );
        assert!(awaits_token("curl -H 'AUTHORIZATION: BeArEr"));
        // Words and prose stay.
        for text in [
            "the BeArEr scheme",
            "xBeArEr Tk9Lm3Np7Qr1St5Uv",
            "a cleaRER view",
            // The heads the searchers look for, with no word around them.
            "a refeRRER",
            "the hoRIZon",
            "multi-KEY",
            "search heRE: r e r",
        ] {
            assert_eq!(redact_tokens(text), text, "{text}");
        }
        // The old heads (`ear`, `zat`, `-ap`) are no longer searched; the new ones are.
        assert!(none.surely_clean(b"a cleAR yEAR, an organiZATion, the AUTHor, an X-API"));
        assert!(!none.surely_clean(b"the hoRIZon"));
    }

    /// Every spelling of `word` in which each letter is in either case.
    fn every_case(word: &str) -> Vec<String> {
        let letters: Vec<usize> = (0..word.len())
            .filter(|&i| word.as_bytes()[i].is_ascii_alphabetic())
            .collect();
        (0..1u32 << letters.len())
            .map(|mask| {
                let mut bytes = word.as_bytes().to_vec();
                for (bit, &i) in letters.iter().enumerate() {
                    if mask >> bit & 1 == 1 {
                        bytes[i] = bytes[i].to_ascii_uppercase();
                    }
                }
                String::from_utf8(bytes).unwrap()
            })
            .collect()
    }

    #[test]
    fn every_case_of_the_caseless_words_leads_to_a_token() {
        let none = Secrets::new(Vec::<String>::new());
        let known = Secrets::new([KEY]);
        for (word, sep) in [("bearer", " "), ("authorization", ": "), ("x-api-key", "=")] {
            let spellings = every_case(word);
            assert!(spellings.len() >= 64, "{word}");
            for spelled in spellings {
                let text = format!("a {spelled}{sep}Tk9Lm3Np7Qr1St5Uv b");
                let want = format!("a {spelled}{sep}{REDACTED} b");
                assert_eq!(redact_tokens(&text), want, "{text}");
                for set in [&none, &known] {
                    assert!(!set.surely_clean(text.as_bytes()), "{text}");
                    assert_eq!(set.redact(&text), want, "{text}");
                }
            }
        }
    }

    #[test]
    fn each_group_of_the_packed_searchers_has_a_bucket_of_its_own() {
        // Teddy's groups: the same low nybbles in the first three bytes. The first pattern
        // of a group places its bucket, `15 - id % 16` with more than 32 patterns.
        let group = |p: &[u8]| -> Vec<u8> { p[..3].iter().map(|b| b & 15).collect() };
        let check = |patterns: &[Vec<u8>], fixed: usize| {
            assert!(
                patterns.len() > 32 && patterns.len() <= 64,
                "{}",
                patterns.len()
            );
            let mut firsts: Vec<Vec<u8>> = Vec::new();
            for (id, p) in patterns.iter().enumerate() {
                let g = group(p);
                if !firsts.contains(&g) {
                    assert!(id < 16 || id >= fixed, "{}", String::from_utf8_lossy(p));
                    firsts.push(g);
                }
            }
        };
        check(&token_start_patterns(), token_start_patterns().len());
        for secrets in [
            vec![],
            vec![KEY.to_owned()],
            vec![KEY.to_owned(), "hunter2hunter2".to_owned()],
        ] {
            let patterns = anything_patterns(&secrets);
            // The fixed part: every group of it among the first 16.
            check(&patterns, ANYTHING_FIRST.len() + CASELESS_WORDS.len());
            let (_, other_cases) = caseless_heads();
            for p in &patterns[patterns.len() - other_cases.len()..] {
                let head = patterns.iter().position(|q| group(q) == group(p)).unwrap();
                assert!(head < 16, "{}", String::from_utf8_lossy(p));
            }
        }
        // The words' heads are where the words say.
        for w in &CASELESS_WORDS {
            assert_eq!(
                caseless_word_at(w.word.as_bytes(), w.head),
                Some((0, w.word.len(), w.kind))
            );
        }
    }

    #[test]
    fn the_packed_reading_finds_what_the_position_by_position_one_does() {
        // Without `\u` escapes of printable ASCII the tokens are found from the packed
        // search's matches; the spelled reading tries every position. Every arrangement of
        // prefixes, the caseless words in any case, their heads and tokens, next to and
        // overlapping each other, must come out the same (a match the packed search
        // reports must never hide one that starts a token).
        let pieces = [
            "bearer",
            "BeArEr",
            "BEARER",
            "rer",
            "RER",
            "bea",
            "authorization",
            "AuThOrIzAtIoN",
            "autho",
            "riz",
            "RIZ",
            "x-api-key",
            "X-API-KEY",
            "x-api",
            "i-k",
            "I-K",
            "sk-",
            "ghp_",
            "github_pat_",
            "xoxb-",
            "xoxr-",
            "AKIA",
            "AIza",
            "eyJ",
            "glpat-",
            " ",
            "  ",
            ": ",
            "=",
            "\"",
            "\\n",
            "\\t",
            "Tk9Lm3Np7Qr1St5Uv",
            "Basic ",
            "token ",
            "x",
            "e",
            "a",
            "r",
            "-",
            "k",
            "0123456789abcdef",
        ];
        let mut rng = crate::stream::Xorshift(0x2545_f491_4f6c_dd1d);
        let mut redacted = 0;
        for _ in 0..30_000 {
            let text: String = (0..1 + rng.below(10))
                .map(|_| pieces[rng.below(pieces.len())])
                .collect();
            let bytes = text.as_bytes();
            let spelled = replace_tokens(bytes, &spelled_token_matches(bytes));
            let packed = redact_tokens_bytes(bytes);
            assert_eq!(packed, spelled, "{text}");
            redacted += usize::from(matches!(packed, Cow::Owned(_)));
        }
        assert!(redacted > 1_000, "{redacted}");
    }
}
