//! Reading a text as JSON decodes it, without parsing it: where a secret or a token's
//! prefix is spelled with escapes (`\u0073k-`, `\/`, `\"`), a match that starts at a
//! given byte, and where a piece of one ends at a cut.

use std::sync::LazyLock;

use memchr::memmem;

use super::MIN_PARTIAL;

/// The two-byte JSON escape of a byte other than `\u`, if it has one.
pub(super) fn short_escape_of(b: u8) -> Option<[u8; 2]> {
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

/// The leftmost spelling of `secret` in `bytes` at or after `from`.
pub(super) fn find_spelled(bytes: &[u8], secret: &[u8], from: usize) -> Option<(usize, usize)> {
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
pub(super) fn partial_start(bytes: &[u8], secret: &[u8], from: usize) -> Option<usize> {
    let first = *secret.first()?;
    // A spelled byte takes at most 6 bytes of text (`\u00XX`), 12 for a surrogate pair's 4.
    let window = secret.len() * 6;
    let lo = from.max(bytes.len().saturating_sub(window));
    memchr::memchr2_iter(first, b'\\', &bytes[lo..])
        .map(|i| lo + i)
        .find(|&start| matches!(match_at(bytes, start, secret), Step::Partial(n) if n >= MIN_PARTIAL.min(secret.len())))
}

/// How far a spelling of a secret gets from one position.
pub(super) enum Step {
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

pub(super) enum Unescaped {
    /// The character's UTF-8 bytes, their count, and the escape's length in the text.
    Char([u8; 4], usize, usize),
    /// The text ends inside the escape.
    Incomplete,
    /// Not a JSON escape.
    Invalid,
}

/// Decodes the JSON escape at the start of `text` (which starts with a backslash).
pub(super) fn unescape(text: &[u8]) -> Unescaped {
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

/// Whether `text` holds a `\u` escape of printable ASCII ([`TOKEN_CHAR_ESCAPES`](crate::text::redact::tokens::TOKEN_CHAR_ESCAPES)).
pub(super) fn spells_printable_ascii(text: &[u8]) -> bool {
    static ASCII_ESCAPE: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(b"\\u00"));
    ASCII_ESCAPE
        .find_iter(text)
        .any(|at| matches!(text.get(at + 4), Some(b'2'..=b'7')) && escape_starts_at(text, at))
}

/// Whether the backslash at `at` starts an escape: it follows an even run of backslashes
/// (`\\` is an escaped backslash, so the one after it starts nothing of its own).
pub(super) fn escape_starts_at(text: &[u8], at: usize) -> bool {
    let before = text[..at].iter().rev().take_while(|b| **b == b'\\').count();
    before % 2 == 0
}

/// The character at `at` as JSON decodes it (a literal byte, or the escape starting
/// there) and the bytes it takes; a character outside ASCII is [`NOT_ASCII`]. A
/// backslash that starts no escape stands for itself.
pub(super) fn char_at(text: &[u8], at: usize) -> Option<(u8, usize)> {
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
pub(super) fn char_before(text: &[u8], at: usize) -> Option<u8> {
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

/// What a character spelled outside ASCII reads as: not a letter, a digit or a token
/// character, as a literal one's bytes are not.
const NOT_ASCII: u8 = 0x80;
