//! Token shapes: credentials coder does not know, in well-known formats (`sk-…`, `ghp_…`,
//! a JSON Web Token, a Z.ai key, `Bearer …` and an `Authorization` header's value), redacted
//! when they are long and look random, in every JSON spelling.

use std::borrow::Cow;
use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
use memchr::memmem;

use super::spelling::{
    Unescaped, char_at, char_before, escape_starts_at, spells_printable_ascii, unescape,
};
use super::{Ending, MIN_PARTIAL, REDACTED};

/// What a token prefix says of the token after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
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
pub(super) struct CaselessWord {
    pub(super) word: &'static str,
    /// Where the three bytes start in the word.
    pub(super) head: usize,
    pub(super) kind: Kind,
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
pub(super) const CASELESS_WORDS: [CaselessWord; 3] = [
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
pub(super) fn caseless_heads() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
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
pub(super) fn caseless_word_at(text: &[u8], at: usize) -> Option<(usize, usize, Kind)> {
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
pub(super) const TOKEN_PREFIXES: [(&str, Kind); 15] = [
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
pub(super) const TOKEN_CHAR_ESCAPES: [&str; 6] =
    ["\\u002", "\\u003", "\\u004", "\\u005", "\\u006", "\\u007"];

/// How long a token must be to be taken for a credential.
pub(super) const MIN_TOKEN_LEN: usize = 16;

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
pub(super) fn token_start_patterns() -> Vec<Vec<u8>> {
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

/// Whether a word starts at `at`: no letter or digit (as JSON decodes it) before it.
fn at_word_start(text: &[u8], at: usize) -> bool {
    char_before(text, at).is_none_or(|c| !c.is_ascii_alphanumeric())
}

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
pub(super) fn spelled_token_matches(text: &[u8]) -> Vec<(usize, usize)> {
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
pub(super) fn skip_while(text: &[u8], mut at: usize, keep: impl Fn(u8) -> bool) -> (usize, usize) {
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
pub(super) struct Run {
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
pub(super) const GLM_SPAN: usize = GLM_ID_LEN + 1 + GLM_SECRET_LEN + 1;

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
pub(super) fn glm_keys(text: &[u8]) -> Vec<(usize, usize)> {
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
pub(super) fn replace_tokens<'a>(text: &'a [u8], found: &[(usize, usize)]) -> Cow<'a, [u8]> {
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
