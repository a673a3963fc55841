//! Copies of a JSON text with its long strings left out, cheap for serde to parse, and the
//! map from positions in a copy back to the original.
//!
//! Strings are found by their quotes: outside a string every quote opens one, and inside
//! one a quote closes it unless it is escaped. Two readings:
//!
//! - `Elided::unchecked`, for lines too long to be recorded whole: what a left-out string
//!   holds is not looked at, only where it ends (exact for valid JSON; for invalid JSON,
//!   what is left must still parse).
//! - [`Elided::checked`], for lines recorded whole, whose syntax must hold: every string
//!   left out is checked as strictly as serde checks a string it decodes into a `String`
//!   (valid escapes, `\u` surrogates in pairs), and the caller has checked the whole line
//!   for UTF-8 and raw control bytes. Keys, and the values of the keys whose text the
//!   decoder reads from a `user` line (`type`, `tool_use_id`), are never left out. So the
//!   copy parses exactly when the original does, to the same `user` event.
//!
//! Neither decides what a line is; `decode` does, and falls back to a full parse of the
//! original whenever a copy cannot be made or does not read as a `user` event.

use std::ops::Range;

/// A copy of a JSON text with its long strings emptied (`""`), and the map from its
/// positions back to the original's.
#[derive(Debug)]
pub(super) struct Elided {
    pub(super) text: Vec<u8>,
    /// For each emptied string, in order: the position in `text` just past its `""`, and
    /// how many bytes the copy has lost up to there.
    cuts: Vec<(usize, usize)>,
}

/// The room a copy starts with, in bytes (see [`Elided::for_text`]).
const ELIDED_ROOM: usize = 1024;

/// Keys whose string values a `user` line is read by: never left out of a checked copy.
const READ_KEYS: [&[u8]; 2] = [b"type", b"tool_use_id"];

impl Elided {
    /// Copies `json` with every string of at least `min_len` bytes emptied, without
    /// checking what they hold; `None` when a string is not closed.
    #[cfg(test)]
    pub(super) fn unchecked(json: &[u8], min_len: usize) -> Option<Elided> {
        Elided::unchecked_head(json, min_len, None).map(|(elided, _)| elided)
    }

    /// `Elided::unchecked` of the head of `json` before the first key `stop` (its
    /// quotes and colon included) preceded by a comma, and whether there was one: found by
    /// the same scan of quotes, not by a search of its own through the strings. (In valid
    /// JSON the bytes `,"key":` cannot lie inside a string, whose quotes are escaped, so
    /// this is the first place a search for them would find.)
    pub(super) fn unchecked_head(
        json: &[u8],
        min_len: usize,
        stop: Option<&[u8]>,
    ) -> Option<(Elided, bool)> {
        let mut elided = Elided::for_text(json);
        let mut copied = 0;
        let mut at = 0;
        while let Some(offset) = memchr::memchr(b'"', &json[at..]) {
            let open = at + offset;
            if let Some(stop) = stop
                && open > 0
                && json[open - 1] == b','
                && json[open..].starts_with(stop)
            {
                elided.text.extend_from_slice(&json[copied..open - 1]);
                return Some((elided, true));
            }
            let close = string_end_unchecked(json, open)?;
            if close - open > min_len {
                elided.cut(json, &mut copied, open, close);
            }
            at = close + 1;
        }
        elided.text.extend_from_slice(&json[copied..]);
        Some((elided, false))
    }

    /// Copies `json` with every string value of at least `min_len` bytes emptied, except
    /// the values of [`READ_KEYS`]; `None` when a string is not closed, or holds what
    /// serde would refuse in a `String`: an invalid escape or an unpaired surrogate.
    ///
    /// The caller has checked that `json` is UTF-8 and holds no byte below 0x20 (which no
    /// string may hold raw): those are not checked again here.
    pub(super) fn checked(json: &[u8], min_len: usize) -> Option<Elided> {
        let mut elided = Elided::for_text(json);
        let mut copied = 0;
        let mut at = 0;
        // The last key, and whether the text since it is only `:` (its value is next).
        let mut key: Range<usize> = 0..0;
        while let Some(offset) = memchr::memchr(b'"', &json[at..]) {
            let open = at + offset;
            let close = string_end_checked(json, open)?;
            let after = json[close + 1..].iter().find(|&&b| b != b' ');
            if after == Some(&b':') {
                key = open + 1..close;
            } else if close - open > min_len && !Self::read_value(json, &key, open) {
                elided.cut(json, &mut copied, open, close);
            }
            at = close + 1;
        }
        elided.text.extend_from_slice(&json[copied..]);
        Some(elided)
    }

    /// Whether the string opening at `open` is the value of `key` and `key` may be one of
    /// [`READ_KEYS`] (a key with an escape may spell one).
    fn read_value(json: &[u8], key: &Range<usize>, open: usize) -> bool {
        let before = json[..open].iter().rev().find(|&&b| b != b' ');
        if before != Some(&b':') {
            return false;
        }
        let key = &json[key.clone()];
        READ_KEYS.contains(&key) || key.contains(&b'\\')
    }

    /// An empty copy with room for what a copy of `json` usually holds: grown from
    /// nothing, a `user` line's copy (a few hundred bytes, in a dozen pieces) was moved by
    /// four or five reallocations.
    fn for_text(json: &[u8]) -> Elided {
        Elided {
            text: Vec::with_capacity(json.len().min(ELIDED_ROOM)),
            cuts: Vec::with_capacity(8),
        }
    }

    /// Copies what lies before the string `open..=close` and the string emptied.
    fn cut(&mut self, json: &[u8], copied: &mut usize, open: usize, close: usize) {
        self.text.extend_from_slice(&json[*copied..=open]);
        self.text.push(b'"');
        let removed = self.cuts.last().map_or(0, |&(_, r)| r) + (close - open - 1);
        self.cuts.push((self.text.len(), removed));
        *copied = close + 1;
    }

    /// The position in the original of position `at` of the copy. A position inside an
    /// emptied `""` is never asked for: a located value starts at its opening quote or ends
    /// past its closing one.
    pub(super) fn original(&self, at: usize) -> usize {
        let before = self.cuts.partition_point(|&(end, _)| end <= at);
        at + before.checked_sub(1).map_or(0, |i| self.cuts[i].1)
    }

    pub(super) fn original_range(&self, range: &mut Range<usize>) {
        *range = self.original(range.start)..self.original(range.end);
    }
}

/// How many bytes of a string the scanner looks at together.
const BLOCK: usize = 64;

/// The quotes and the backslashes of `block`, as bit masks (bit `i` for byte `i`).
#[inline(always)]
fn quotes_and_backslashes(block: &[u8; BLOCK]) -> (u64, u64) {
    (mask_of(block, b'"'), mask_of(block, b'\\'))
}

/// The bytes of `block` equal to `byte`, as a bit mask (bit `i` for byte `i`).
///
/// On x86-64, SSE2 (part of the base instruction set, so no run-time detection) compares
/// 16 bytes at once and gathers their 16 results into 16 bits (`pmovmskb`), through
/// `safe_arch`'s safe wrappers of the intrinsics: four loads, compares and gathers per
/// block.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn mask_of(block: &[u8; BLOCK], byte: u8) -> u64 {
    use safe_arch::{
        cmp_eq_mask_i8_m128i, load_unaligned_m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };
    let wanted = set_splat_i8_m128i(byte as i8);
    let (sixteens, _) = block.as_chunks::<16>();
    sixteens.iter().enumerate().fold(0, |mask, (k, sixteen)| {
        let equal = cmp_eq_mask_i8_m128i(load_unaligned_m128i(sixteen), wanted);
        mask | u64::from(move_mask_i8_m128i(equal) as u16) << (16 * k)
    })
}

/// The bytes of `block` equal to `byte`, as a bit mask (bit `i` for byte `i`).
///
/// Written so that the compiler turns it into vector compares (one 0-or-1 byte per byte),
/// and gathers each eight of those into eight bits with one multiplication: safe Rust
/// for targets without SSE2.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn mask_of(block: &[u8; BLOCK], byte: u8) -> u64 {
    let mut ones = [0u8; BLOCK];
    for (one, &b) in ones.iter_mut().zip(block) {
        *one = u8::from(b == byte);
    }
    let mut mask = 0;
    for (k, eight) in ones.chunks_exact(8).enumerate() {
        let mut word = [0u8; 8];
        word.copy_from_slice(eight);
        // Byte j of the word (0 or 1) lands on bit 56 + j: no two products overlap, so
        // nothing carries.
        let bits = u64::from_le_bytes(word).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        mask |= bits << (8 * k);
    }
    mask
}

/// The position of the first quote or backslash in `bytes` from `from` on; `None` when
/// there is none. The first sixteen bytes are looked at together (the end of a key or of
/// a short string, most often): a call to `memchr2` cost several times that. Beyond
/// them, `memchr2`.
pub(super) fn quote_or_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let Some((sixteen, after)) = rest.split_first_chunk::<16>() else {
        return memchr::memchr2(b'"', b'\\', rest).map(|at| from + at);
    };
    let found = mask16_of(sixteen, b'"') | mask16_of(sixteen, b'\\');
    if found != 0 {
        return Some(from + found.trailing_zeros() as usize);
    }
    memchr::memchr2(b'"', b'\\', after).map(|at| from + 16 + at)
}

/// The bytes of `sixteen` equal to `byte`, as a bit mask (see [`mask_of`]).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn mask16_of(sixteen: &[u8; 16], byte: u8) -> u32 {
    use safe_arch::{
        cmp_eq_mask_i8_m128i, load_unaligned_m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };
    let equal = cmp_eq_mask_i8_m128i(
        load_unaligned_m128i(sixteen),
        set_splat_i8_m128i(byte as i8),
    );
    move_mask_i8_m128i(equal) as u32 & 0xFFFF
}

/// The bytes of `sixteen` equal to `byte`, as a bit mask, for targets without SSE2.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn mask16_of(sixteen: &[u8; 16], byte: u8) -> u32 {
    sixteen
        .iter()
        .enumerate()
        .fold(0, |mask, (i, &b)| mask | u32::from(b == byte) << i)
}

/// Which bytes of a string are escaped, block after block, by the odd-run arithmetic of
/// simdjson: a byte is escaped when an odd run of backslashes precedes it.
#[derive(Default)]
struct Escapes {
    /// 1 when the previous block ended with a backslash that escapes this block's first byte.
    next_is_escaped: u64,
}

const ODD_BITS: u64 = 0xAAAA_AAAA_AAAA_AAAA;

impl Escapes {
    /// For the mask of a block's backslashes: the bytes escaped, and the backslashes that
    /// escape them.
    #[inline(always)]
    fn next(&mut self, backslash: u64) -> (u64, u64) {
        if backslash == 0 {
            return (std::mem::take(&mut self.next_is_escaped), 0);
        }
        // Backslashes that may start an escape: not one escaped by the previous block.
        let potential = backslash & !self.next_is_escaped;
        // Adding a run's start bit to the odd bits carries through the run, and leaves the
        // carry on the byte after it exactly when the run starts on an even position and
        // has odd length, or the reverse: escapes and the bytes they escape alternate.
        let codes = ((potential << 1) | ODD_BITS).wrapping_sub(potential) ^ ODD_BITS;
        let escaped = codes ^ (backslash | self.next_is_escaped);
        let escaping = codes & backslash;
        self.next_is_escaped = escaping >> 63;
        (escaped, escaping)
    }
}

/// The position of the quote that closes the string opened at `open`, read a block at a
/// time: `escape` is called with the position of each escaping backslash before it, in
/// order, and refuses the string by returning `None`. `None` too for an unclosed string.
///
/// The commonest escapes, `\n`, `\"` and `\\`, which are always valid, are not handed to
/// `escape`: they are told apart by the mask of the bytes escaped, a block at a time (the
/// text of a tool result has one every few dozen bytes, and a call for each cost more than
/// the search).
#[inline(always)]
fn string_end(
    json: &[u8],
    open: usize,
    mut escape: impl FnMut(usize) -> Option<()>,
) -> Option<usize> {
    let mut at = open + 1;
    let mut escapes = Escapes::default();
    let mut padded = [0u8; BLOCK];
    loop {
        let rest = json.get(at..).filter(|rest| !rest.is_empty())?;
        let (block, valid) = match rest.first_chunk::<BLOCK>() {
            Some(block) => (block, u64::MAX),
            None => {
                // The last bytes, padded with bytes that are neither quote nor backslash
                // (this is the last block: `padded` is filled once).
                padded[..rest.len()].copy_from_slice(rest);
                (&padded, (1 << rest.len()) - 1)
            }
        };
        let (quotes, backslashes) = quotes_and_backslashes(block);
        let (escaped, _) = escapes.next(backslashes & valid);
        let closing = quotes & valid & !escaped;
        // The bytes escaped by something else than `\n`, `\"` or `\\`: a backslash escapes
        // the byte after it, which can lie in the next block (and is looked at there).
        let mut other = escaped & valid & !(quotes | backslashes | mask_of(block, b'n'));
        if closing != 0 {
            // Only the escapes before the closing quote belong to the string.
            other &= (closing & closing.wrapping_neg()) - 1;
        }
        while other != 0 {
            // Its backslash is the byte before (the last of the block before, for the
            // first byte of a block; never the opening quote, which escapes nothing).
            escape(at + other.trailing_zeros() as usize - 1)?;
            other &= other - 1;
        }
        if closing != 0 {
            return Some(at + closing.trailing_zeros() as usize);
        }
        at += BLOCK;
    }
}

/// The position of the quote that closes the string opened at `open`, its escapes not
/// looked at; `None` when it is not closed.
///
/// Only quotes are looked for, a block at a time: a quote closes the string when the run
/// of backslashes just before it is even (escapes pair the backslashes of a run from its
/// start, which follows a byte that is not one, at the latest the opening quote). Inside a
/// string every other quote is escaped, so each quote costs a look at the byte or two
/// before it, and the backslashes, which the text of a tool result holds every few
/// bytes, are not gathered at all. The runs looked back over lie between two quotes, so
/// no byte is looked at twice.
fn string_end_unchecked(json: &[u8], open: usize) -> Option<usize> {
    let mut at = open + 1;
    let mut padded = [0u8; BLOCK];
    loop {
        let rest = json.get(at..).filter(|rest| !rest.is_empty())?;
        let mut quotes = match rest.first_chunk::<BLOCK>() {
            Some(block) => mask_of(block, b'"'),
            None => {
                // The last bytes, padded with bytes that are not quotes.
                padded[..rest.len()].copy_from_slice(rest);
                mask_of(&padded, b'"') & ((1 << rest.len()) - 1)
            }
        };
        while quotes != 0 {
            let quote = at + quotes.trailing_zeros() as usize;
            let backslashes = json[open + 1..quote]
                .iter()
                .rev()
                .take_while(|&&b| b == b'\\')
                .count();
            if backslashes % 2 == 0 {
                return Some(quote);
            }
            quotes &= quotes - 1;
        }
        at += BLOCK;
    }
}

/// The position of the quote that closes the string opened at `open`, every escape on the
/// way checked; `None` for an unclosed string, an invalid escape or an unpaired surrogate.
///
/// A block at a time: one `memchr2` call per escape (the text of a tool result has one
/// every few dozen bytes) cost more than the search. (Reading the string eight bytes at a
/// time with a search of each word was slower still.)
pub(super) fn string_end_checked(json: &[u8], open: usize) -> Option<usize> {
    // Where the escapes checked so far end: a surrogate pair's second half is checked
    // with its first.
    let mut checked_to = 0;
    string_end(json, open, |at| {
        if at >= checked_to {
            checked_to = escape_end(json, at)?;
        }
        Some(())
    })
}

/// The position just past the escape whose backslash is at `at`; `None` when it is not one
/// serde accepts in a `String` (a `\u` surrogate must come in a pair).
fn escape_end(json: &[u8], at: usize) -> Option<usize> {
    match *json.get(at + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 2),
        b'u' => match hex_unit(json, at + 2)? {
            // A leading surrogate, which a trailing one must follow.
            0xD800..=0xDBFF => {
                let trailing = json.get(at + 6..at + 8)? == b"\\u"
                    && (0xDC00..=0xDFFF).contains(&hex_unit(json, at + 8)?);
                trailing.then_some(at + 12)
            }
            0xDC00..=0xDFFF => None,
            _ => Some(at + 6),
        },
        _ => None,
    }
}

/// The four hex digits at `at`, as a UTF-16 code unit.
pub(super) fn hex_unit(json: &[u8], at: usize) -> Option<u16> {
    let digits = json.get(at..at + 4)?;
    digits.iter().try_fold(0u16, |unit, &d| {
        let value = (d as char).to_digit(16)?;
        Some(unit << 4 | value as u16)
    })
}

/// Whether `bytes` hold no byte below 0x20: no raw control character, which JSON allows
/// in no string, and no whitespace but spaces between tokens. Branch-free, so it runs at
/// memory speed: the least byte of each of 64 lanes is kept across the blocks (vector
/// minimums) and the lanes are compared once at the end. (Folding each block down to one
/// byte, as before, cost a horizontal reduction per block: 0.38 instructions a byte.)
pub(super) fn free_of_control_bytes(bytes: &[u8]) -> bool {
    let (blocks, tail) = bytes.as_chunks::<64>();
    let lanes = blocks.iter().fold([u8::MAX; 64], |mut lanes, block| {
        for (lane, &b) in lanes.iter_mut().zip(block) {
            *lane = (*lane).min(b);
        }
        lanes
    });
    lanes.iter().chain(tail).all(|&b| b >= 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Xorshift;

    /// What serde makes of a JSON text: `None` when it does not parse.
    fn parses(json: &[u8]) -> bool {
        serde_json::from_slice::<serde_json::Value>(json).is_ok()
    }

    fn checked(json: &str) -> Option<String> {
        Elided::checked(json.as_bytes(), 4).map(|e| String::from_utf8(e.text).unwrap())
    }

    #[test]
    fn long_values_are_emptied_keys_and_read_values_kept() {
        let json = r#"{"type":"user-long-value","tool_use_id":"toolu_01","content":"long text","a":["in an array"],"keylong":1}"#;
        assert_eq!(
            checked(json).unwrap(),
            r#"{"type":"user-long-value","tool_use_id":"toolu_01","content":"","a":[""],"keylong":1}"#
        );
        // A key spelled with an escape may be one of the read keys: its value is kept.
        let json = r#"{"typ\u0065":"some value","x":"other value"}"#;
        assert_eq!(
            checked(json).unwrap(),
            r#"{"typ\u0065":"some value","x":""}"#
        );
        // Spaces between tokens are allowed.
        let json = r#"{ "type" : "a value" , "x" : "other value" }"#;
        assert_eq!(
            checked(json).unwrap(),
            r#"{ "type" : "a value" , "x" : "" }"#
        );
    }

    #[test]
    fn positions_map_back_to_the_original() {
        let json = br#"{"a":"0123456789","b":[1,2],"c":"abcdefgh","d":"x"}"#;
        let elided = Elided::checked(json, 4).unwrap();
        let copy = &elided.text;
        assert_eq!(copy, br#"{"a":"","b":[1,2],"c":"","d":"x"}"#);
        let b = memchr::memmem::find(copy, b"[1,2]").unwrap();
        let mut range = b..b + 5;
        elided.original_range(&mut range);
        assert_eq!(&json[range], b"[1,2]");
        let d = memchr::memmem::find(copy, br#""x""#).unwrap();
        let mut range = d..d + 3;
        elided.original_range(&mut range);
        assert_eq!(&json[range], br#""x""#);
    }

    #[test]
    fn escapes_are_followed_to_the_real_end_of_a_string() {
        for (json, expected) in [
            // Runs of escaped quotes and backslashes, one run right before the end.
            (r#"{"a":"x\"\"\"y","b":1}"#, r#"{"a":"","b":1}"#),
            (r#"{"a":"x\\\\","b":"\\\""}"#, r#"{"a":"","b":""}"#),
            (r#"{"a":"\\","b":"yyyy"}"#, r#"{"a":"\\","b":""}"#),
            (r#"{"a":"\\\"\\","b":"\"\"\"\""}"#, r#"{"a":"","b":""}"#),
            // A quote after a backslash pair closes the string.
            (r#"{"a":"ab\\\\"}"#, r#"{"a":""}"#),
            // Every short escape, and \u escapes (a surrogate pair among them).
            (
                r#"{"a":"\b\f\n\r\t\/\u00e9\uD834\uDD1E\u0000"}"#,
                r#"{"a":""}"#,
            ),
        ] {
            assert_eq!(checked(json).as_deref(), Some(expected), "{json}");
            assert!(parses(json.as_bytes()) && parses(expected.as_bytes()));
        }
    }

    #[test]
    fn escapes_at_every_offset_are_followed() {
        // Every escape at every offset from the string's start and from its end, valid
        // ones and refused ones.
        let checked = |json: &str| {
            Elided::checked(json.as_bytes(), 1).map(|e| String::from_utf8(e.text).unwrap())
        };
        for escape in [r#"\""#, r"\\", r"\n", r"\u00e9", r"\uD834\uDD1E", r#"\\\""#] {
            for offset in 0..20 {
                for after in 0..12 {
                    let text = format!("{}{escape}{}", "a".repeat(offset), "b".repeat(after));
                    let json = format!(r#"{{"k":"{text}","x":1}}"#);
                    assert_eq!(
                        checked(&json).as_deref(),
                        Some(r#"{"k":"","x":1}"#),
                        "{json}"
                    );
                }
            }
        }
        for escape in [r"\q", r"\uD834", r"\uDD1E", r"\u12x4", r"\uD834\n"] {
            for offset in 0..20 {
                for after in 0..12 {
                    let text = format!("{}{escape}{}", "a".repeat(offset), "b".repeat(after));
                    let json = format!(r#"{{"k":"{text}","x":1}}"#);
                    assert_eq!(checked(&json), None, "{json}");
                }
            }
        }
    }

    #[test]
    fn what_serde_would_refuse_in_a_string_is_refused() {
        for json in [
            r#"{"a":"bad \q escape"}"#,
            r#"{"a":"bad \x41 escape"}"#,
            r#"{"a":"short \u12 hex"}"#,
            r#"{"a":"non-hex \u12g4 digit"}"#,
            r#"{"a":"lone \uD800 leading"}"#,
            r#"{"a":"leading \uD800\n then no trailing"}"#,
            r#"{"a":"two leading \uD800\uD800"}"#,
            r#"{"a":"lone \uDC00 trailing"}"#,
            r#"{"a":"unclosed"#,
            r#"{"a":"ends in an escape\"#,
            r#"{"a":"ends in a \u00"#,
        ] {
            assert_eq!(checked(json), None, "{json}");
            // serde refuses every one of them as a `String`.
            assert!(
                serde_json::from_str::<std::collections::HashMap<String, String>>(json).is_err(),
                "{json}"
            );
        }
    }

    #[test]
    fn control_bytes_are_found_anywhere() {
        assert!(free_of_control_bytes(b""));
        assert!(free_of_control_bytes(
            "plain text é ✓".repeat(40).as_bytes()
        ));
        for at in [0, 1, 63, 64, 65, 127, 128, 200] {
            for byte in [0u8, b'\t', b'\n', 0x1f] {
                let mut text = vec![b'x'; 201];
                text[at] = byte;
                assert!(!free_of_control_bytes(&text), "{byte} at {at}");
            }
        }
        assert!(free_of_control_bytes(&[0x20, 0x7f, 0x80, 0xff]));
        // Random lengths and bytes (few of them control bytes), against a byte-by-byte look.
        let mut rng = Xorshift(0xc0ff_ee11);
        for _ in 0..3_000 {
            let text: Vec<u8> = (0..rng.below(400))
                .map(|_| match rng.below(500) {
                    0 => rng.below(0x20) as u8,
                    _ => 0x20 + rng.below(0xe0) as u8,
                })
                .collect();
            let expected = text.iter().all(|&b| b >= 0x20);
            assert_eq!(free_of_control_bytes(&text), expected, "{text:?}");
        }
    }

    #[test]
    fn a_checked_copy_parses_exactly_when_the_original_does() {
        const PIECES: [&str; 16] = [
            "text ",
            r"\n",
            r#"\""#,
            r"\\",
            r"\\\",
            r"\u00e9",
            r"\uD834\uDD1E",
            r"\uD834",
            r"\uDD1E",
            r"\q",
            r"\u12",
            "é",
            r#"""#,
            "\\",
            r"\/",
            "𝄞",
        ];
        let mut rng = Xorshift(0x2545_f491_4f6c_dd1d);
        for case in 0..3000 {
            let mut value = String::new();
            for _ in 0..rng.below(12) {
                value.push_str(PIECES[rng.below(PIECES.len())]);
            }
            let json = format!(r#"{{"type":"user","k":"{value}","n":[1,"{value}"]}}"#);
            let strict = serde_json::from_str::<serde_json::Value>(&json).is_ok();
            // Emptying strings leaves the structure as it was, and a string the copy leaves
            // out is one serde accepts: the copy parses exactly when the original does. A
            // refused copy is for the general parse to judge, and only a string serde
            // refuses too is refused.
            match Elided::checked(json.as_bytes(), 2) {
                Some(copy) => assert_eq!(parses(&copy.text), strict, "case {case}: {json}"),
                None => assert!(!strict, "case {case}: {json} parses but was refused"),
            }
        }
    }

    /// The string scan as it was before blocks, one search per stop: the reference.
    fn string_end_by_stops(json: &[u8], open: usize, check: bool) -> Option<usize> {
        let mut at = open + 1;
        loop {
            let stop = at + memchr::memchr2(b'"', b'\\', &json[at..])?;
            if json[stop] == b'"' {
                return Some(stop);
            }
            at = if check {
                escape_end(json, stop)?
            } else {
                json.get(stop + 1)?;
                stop + 2
            };
        }
    }

    #[test]
    fn blocks_find_the_same_ends_as_a_search_stop_by_stop() {
        // Runs of backslashes and quotes across block boundaries, escapes cut at a
        // boundary, strings ending in the padded last block and not at all.
        const PIECES: [&str; 14] = [
            "x",
            "ab c",
            r"\",
            r#"\""#,
            r"\\",
            r#"""#,
            r"\n",
            r"\t",
            r"\/",
            r"\u00e9",
            r"\uD834\uDD1E",
            r"\uD834",
            r"\q",
            "é",
        ];
        let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
        for case in 0..20_000 {
            let mut json = String::from(r#"""#);
            let pieces = rng.below(80);
            for _ in 0..pieces {
                let piece = PIECES[rng.below(PIECES.len())];
                // Long plain runs move the pieces across block boundaries.
                json.push_str(&"y".repeat(rng.below(3) * rng.below(70)));
                json.push_str(piece);
            }
            let json = json.as_bytes();
            assert_eq!(
                string_end_checked(json, 0),
                string_end_by_stops(json, 0, true),
                "case {case}: {}",
                String::from_utf8_lossy(json)
            );
            assert_eq!(
                string_end_unchecked(json, 0),
                string_end_by_stops(json, 0, false),
                "case {case}: {}",
                String::from_utf8_lossy(json)
            );
        }
    }

    #[test]
    fn masks_mark_every_byte_equal_to_the_one_asked() {
        let mut rng = Xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..2000 {
            let mut block = [0u8; BLOCK];
            for b in &mut block {
                *b = match rng.below(4) {
                    0 => b'"',
                    1 => b'\\',
                    _ => rng.below(256) as u8,
                };
            }
            for byte in [b'"', b'\\', 0, 0xff] {
                let mask = mask_of(&block, byte);
                for (i, &b) in block.iter().enumerate() {
                    assert_eq!(mask >> i & 1 == 1, b == byte, "byte {i}");
                }
            }
        }
    }

    #[test]
    fn the_first_quote_or_backslash_is_found_wherever_it_lies() {
        let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..5000 {
            let len = rng.below(60);
            let bytes: Vec<u8> = (0..len)
                .map(|_| match rng.below(24) {
                    0 => b'"',
                    1 => b'\\',
                    _ => rng.below(256) as u8,
                })
                .collect();
            let from = rng.below(len + 2);
            let naive = bytes
                .get(from..)
                .and_then(|rest| rest.iter().position(|&b| b == b'"' || b == b'\\'))
                .map(|at| from + at);
            assert_eq!(
                quote_or_backslash(&bytes, from),
                naive,
                "{bytes:?} from {from}"
            );
        }
    }

    #[test]
    fn huge_strings_cost_one_pass() {
        let text = "fn main() {\\n    println!(\\\"é\\\");\\n}\\n".repeat(200_000);
        let json = format!(r#"{{"type":"user","content":"{text}","uuid":"u1"}}"#);
        let elided = Elided::checked(json.as_bytes(), 64).unwrap();
        assert_eq!(elided.text, br#"{"type":"user","content":"","uuid":"u1"}"#);
        let uuid = memchr::memmem::find(&elided.text, br#""u1""#).unwrap();
        assert_eq!(
            &json.as_bytes()[elided.original(uuid)..elided.original(uuid + 4)],
            br#""u1""#
        );
    }
}
