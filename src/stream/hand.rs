//! A hand reading of the CLI's own `assistant` and `user` lines, the shapes of nearly every
//! line of a busy run, without serde.
//!
//! serde's reading of an `assistant` line cost about 14 instructions a byte: a visitor call
//! per key and per value, and a string scan that stops at every byte it must check. This
//! one walks the line once with a cursor, finds each string's end a block of 64 bytes at a
//! time with its escapes checked (the `elide` module's scanner, as strict as serde is with
//! a `String`), compares keys as bytes, and decodes only the strings the event keeps. A
//! `user` line is read in place, where the `user` reading made a copy without its long
//! strings and had serde parse that.
//!
//! It reads a strict subset of JSON and never decides a line on its own terms. Whatever it
//! does not recognise exactly makes it give up, and the serde readings decide as before: a
//! key spelled with an escape, a number with an exponent or more than 18 digits, nesting
//! deeper than [`MAX_DEPTH`], a duplicate of a key the wire types type, a field only other
//! events have, a value of a type the wire types would refuse or read apart (an object
//! where a message's content is expected, a tool input that is not an object, a synthetic
//! message's error fields), a call whose whole input coder keeps, a raw control byte
//! anywhere, a lone surrogate even where serde would skip it. Everything it accepts is
//! valid JSON that the serde readings accept, and it makes the same event with the same
//! spans of it (the tests compare the readings on random, damaged and cut lines).

use std::borrow::Cow;
use std::ops::Range;

use super::assistant::{
    CODER_TOOL_PREFIX, INPUT_KEYS, InputKeys, OTHER_EVENTS_KEYS, RAW_VALUE_TOKEN, STRUCTURED_TOOL,
    flat_usage_head, tool_summary, usage_of_text,
};
use super::elide::{free_of_control_bytes, hex_unit, quote_or_backslash, string_end_checked};
use super::event::{AssistantEvent, Decoded, Event, EventSpans, ToolResult, ToolUse, Usage};

/// The deepest nesting read (the top-level object is 1); serde's own limit is 128.
const MAX_DEPTH: usize = 64;

/// Reads an `assistant` line (`text`, the whole line): the event and spans the serde
/// readings make of it, or `None` where they must decide (see the module docs).
pub(super) fn read_assistant_line(text: &str) -> Option<Decoded> {
    if !free_of_control_bytes(text.as_bytes()) {
        return None;
    }
    let mut event = AssistantEvent::default();
    let mut message_usage = None;
    let mut spans = read_line(text, br#""assistant""#, |r, key| {
        match key {
            OwnKey::SessionId => event.session_id = r.owned_string_or_null()?,
            // A synthetic error message's: their values are read apart (serde's reading).
            OwnKey::Error | OwnKey::ApiErrorStatus => r.null()?,
            OwnKey::Message => message_usage = read_message(r, &mut event)?,
        }
        Some(())
    })?;
    spans.usage = spans.usage.or(message_usage);
    Some(Decoded {
        event: Event::Assistant(event),
        spans,
    })
}

/// Reads a `user` line (`text`, the whole line), whose bytes the caller has checked for
/// raw control bytes: the event and spans the serde readings make of it, or `None` where
/// they must decide.
pub(super) fn read_user_line(text: &str) -> Option<Decoded> {
    let mut tool_results = Vec::new();
    let spans = read_line(text, br#""user""#, |r, key| {
        match key {
            OwnKey::SessionId => {
                r.string_or_null()?;
            }
            // Typed as any value, which a checked value is.
            OwnKey::Error | OwnKey::ApiErrorStatus => {
                r.skip(2)?;
            }
            OwnKey::Message => read_user_message(r, &mut tool_results)?,
        }
        Some(())
    })?;
    Some(Decoded {
        event: Event::User { tool_results },
        spans,
    })
}

/// The top-level keys an `assistant` line and a `user` line read apart ([`read_line`]
/// reads the others the same way for both).
#[derive(Clone, Copy)]
enum OwnKey {
    SessionId,
    Error,
    ApiErrorStatus,
    /// A `message` that is not `null`.
    Message,
}

/// Reads a whole line, an event's object whose `type` is `kind` (its JSON spelling): the
/// spans of its `uuid`, `parent_tool_use_id` and top-level `usage`; each key of [`OwnKey`]
/// is read by `own`, at most once. `None` where the serde readings must decide: another
/// event's key, a key twice, no `type`, anything `own` gives up on.
fn read_line<'a>(
    text: &'a str,
    kind: &[u8],
    mut own: impl FnMut(&mut Reader<'a>, OwnKey) -> Option<()>,
) -> Option<EventSpans> {
    let mut r = Reader::new(text);
    let mut spans = EventSpans {
        utf8: true,
        ..EventSpans::default()
    };
    let mut seen = Seen::default();
    r.object(|r, key| {
        match key {
            b"type" => {
                seen.once(0)?;
                r.exactly(kind)?;
            }
            b"uuid" => {
                seen.once(1)?;
                spans.uuid = r.string_or_other(2)?;
            }
            b"parent_tool_use_id" => {
                seen.once(2)?;
                spans.parent_tool_use_id = r.string_or_other(2)?;
            }
            b"usage" => {
                seen.once(3)?;
                spans.usage = r.unless_null(2)?;
            }
            b"session_id" => {
                seen.once(4)?;
                own(r, OwnKey::SessionId)?;
            }
            b"error" => {
                seen.once(5)?;
                own(r, OwnKey::Error)?;
            }
            b"api_error_status" => {
                seen.once(6)?;
                own(r, OwnKey::ApiErrorStatus)?;
            }
            b"message" => {
                seen.once(7)?;
                if r.peek()? == b'n' {
                    r.null()?;
                } else {
                    own(r, OwnKey::Message)?;
                }
            }
            key if is_other_events_key(key) => return None,
            _ => {
                r.skip(2)?;
            }
        }
        Some(())
    })?;
    r.end()?;
    seen.has(0).then_some(spans)
}

/// Whether `key` is one the wire type of every event types for another event.
fn is_other_events_key(key: &[u8]) -> bool {
    OTHER_EVENTS_KEYS.iter().any(|k| k.as_bytes() == key)
}

/// An `assistant` line's `message` (an object), into `event`; the range of its `usage`.
fn read_message(r: &mut Reader<'_>, event: &mut AssistantEvent) -> Option<Option<Range<usize>>> {
    let mut usage_range = None;
    let mut seen = Seen::default();
    r.object(|r, key| {
        match key {
            b"id" => {
                seen.once(0)?;
                event.message_id = r.owned_string_or_null()?;
            }
            b"model" => {
                seen.once(1)?;
                event.model = r.owned_string_or_null()?;
            }
            b"content" => {
                seen.once(2)?;
                if r.peek()? == b'[' {
                    r.array(|r| read_block(r, event))?;
                } else {
                    r.null()?;
                }
            }
            b"usage" => {
                seen.once(3)?;
                (usage_range, event.usage) = r.usage(3)?;
            }
            _ => {
                r.skip(3)?;
            }
        }
        Some(())
    })?;
    Some(usage_range)
}

/// One content block of an `assistant` message, into `event`.
fn read_block(r: &mut Reader<'_>, event: &mut AssistantEvent) -> Option<()> {
    let mut seen = Seen::default();
    let (mut kind, mut text, mut id, mut name) = (None, None, None, None);
    let mut input = None;
    r.object(|r, key| {
        match key {
            b"type" => {
                seen.once(0)?;
                kind = r.string_or_null()?;
            }
            b"text" => {
                seen.once(1)?;
                text = r.string_or_null()?;
            }
            b"id" => {
                seen.once(2)?;
                id = r.string_or_null()?;
            }
            b"name" => {
                seen.once(3)?;
                name = r.string_or_null()?;
            }
            b"input" => {
                seen.once(4)?;
                if r.peek()? == b'{' {
                    input = Some(read_input(r)?);
                } else {
                    r.null()?;
                }
            }
            b"tool_use_id" => {
                seen.once(5)?;
                r.string_or_null()?;
            }
            b"is_error" => {
                seen.once(6)?;
                r.bool_or_null()?;
            }
            b"content" => {
                seen.once(7)?;
                r.skip(5)?;
            }
            _ => {
                r.skip(5)?;
            }
        }
        Some(())
    })?;
    let kind = r.decoded_or_none(kind)?;
    match kind.as_deref() {
        Some("text") => event
            .texts
            .extend(r.decoded_or_none(text)?.map(Cow::into_owned)),
        Some("tool_use") => {
            let name = r.decoded_or_none(name)?;
            let name = name.as_deref().unwrap_or("?");
            if name == STRUCTURED_TOOL || name.starts_with(CODER_TOOL_PREFIX) {
                // Coder keeps these calls' whole input: serde's reading.
                return None;
            }
            let keys = input.unwrap_or_default();
            event.tool_uses.push(ToolUse {
                summary: tool_summary(name, keys.detail()),
                path: keys.path().map(str::to_owned),
                structured_input: None,
                input: None,
                id: r
                    .decoded_or_none(id)?
                    .map(Cow::into_owned)
                    .unwrap_or_default(),
                name: name.to_owned(),
            });
        }
        _ => {}
    }
    Some(())
}

/// A tool input (an object), reduced to the strings at [`INPUT_KEYS`]: a key's last value
/// counts, as in a `serde_json::Value`'s map.
fn read_input<'a>(r: &mut Reader<'a>) -> Option<InputKeys<'a>> {
    let mut keys = InputKeys::default();
    r.object(|r, key| {
        match INPUT_KEYS.iter().position(|k| k.as_bytes() == key) {
            Some(at) => {
                keys.strings[at] = if r.peek()? == b'"' {
                    let string = r.string()?;
                    Some(r.decoded(string)?)
                } else {
                    r.skip(6)?;
                    None
                };
            }
            None => {
                r.skip(6)?;
            }
        }
        Some(())
    })?;
    Some(keys)
}

/// A `user` line's `message` (an object): its tool results, into `results`.
fn read_user_message(r: &mut Reader<'_>, results: &mut Vec<ToolResult>) -> Option<()> {
    let mut seen = Seen::default();
    r.object(|r, key| {
        match key {
            b"id" => {
                seen.once(0)?;
                r.string_or_null()?;
            }
            b"model" => {
                seen.once(1)?;
                r.string_or_null()?;
            }
            b"content" => {
                seen.once(2)?;
                match r.peek()? {
                    b'[' => r.array(|r| read_result_block(r, results))?,
                    // A prompt: no blocks.
                    b'"' => {
                        r.string()?;
                    }
                    _ => r.null()?,
                }
            }
            b"usage" => {
                seen.once(3)?;
                r.skip(3)?;
            }
            _ => {
                r.skip(3)?;
            }
        }
        Some(())
    })
}

/// One content block of a `user` message; a tool result into `results`.
fn read_result_block(r: &mut Reader<'_>, results: &mut Vec<ToolResult>) -> Option<()> {
    let mut seen = Seen::default();
    let (mut kind, mut tool_use_id, mut is_error, mut content) = (None, None, None, None);
    r.object(|r, key| {
        match key {
            b"type" => {
                seen.once(0)?;
                kind = r.string_or_null()?;
            }
            b"text" | b"id" | b"name" => {
                seen.once(match key {
                    b"text" => 1,
                    b"id" => 2,
                    _ => 3,
                })?;
                r.string_or_null()?;
            }
            b"input" => {
                seen.once(4)?;
                r.skip(5)?;
            }
            b"tool_use_id" => {
                seen.once(5)?;
                tool_use_id = r.string_or_null()?;
            }
            b"is_error" => {
                seen.once(6)?;
                is_error = r.bool_or_null()?;
            }
            b"content" => {
                seen.once(7)?;
                content = r.unless_null(5)?;
            }
            _ => {
                r.skip(5)?;
            }
        }
        Some(())
    })?;
    if r.decoded_or_none(kind)?.as_deref() == Some("tool_result") {
        results.push(ToolResult {
            tool_use_id: r
                .decoded_or_none(tool_use_id)?
                .map(Cow::into_owned)
                .unwrap_or_default(),
            is_error: is_error.unwrap_or(false),
            content,
        });
    }
    Some(())
}

/// The keys of one object already read, by slot: a duplicate is left to serde's reading.
#[derive(Default)]
struct Seen(u16);

impl Seen {
    fn once(&mut self, slot: u8) -> Option<()> {
        let bit = 1 << slot;
        if self.0 & bit != 0 {
            return None;
        }
        self.0 |= bit;
        Some(())
    }

    fn has(&self, slot: u8) -> bool {
        self.0 & (1 << slot) != 0
    }
}

/// A cursor in a line. Every method returns `None` where the line is not what it reads
/// (or not JSON at all): the reading gives up.
struct Reader<'a> {
    text: &'a str,
    at: usize,
    /// The last string of at least [`REPEATED_STRING_BYTES`] checked (quotes included).
    long: Range<usize>,
}

/// Strings at least this long are remembered, so that a second copy is not scanned again.
const REPEATED_STRING_BYTES: usize = 256;

impl<'a> Reader<'a> {
    fn new(text: &'a str) -> Reader<'a> {
        Reader {
            text,
            at: 0,
            long: 0..0,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not a space (a line without control bytes has no other
    /// whitespace), the cursor on it; `None` at the end.
    fn peek(&mut self) -> Option<u8> {
        loop {
            let byte = *self.bytes().get(self.at)?;
            if byte != b' ' {
                return Some(byte);
            }
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// The end of the line: nothing but spaces left.
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// `word`, spelled exactly so, at the cursor (spaces before it skipped).
    fn exactly(&mut self, word: &[u8]) -> Option<()> {
        self.peek()?;
        self.bytes()
            .get(self.at..)?
            .starts_with(word)
            .then(|| self.at += word.len())
    }

    fn null(&mut self) -> Option<()> {
        self.exactly(b"null")
    }

    /// A string at the cursor, checked (valid escapes, surrogates in pairs): its range,
    /// quotes included.
    fn string(&mut self) -> Option<Range<usize>> {
        if self.peek()? != b'"' {
            return None;
        }
        let open = self.at;
        let bytes = self.bytes();
        // The CLI prints a tool's output twice in a `user` line, in the message and in
        // `tool_use_result`: the same bytes as a string checked before are the same string
        // (a string's end and escapes depend on its own bytes alone), and are compared
        // rather than scanned again, at a fraction of the cost.
        let long = bytes.get(self.long.clone()).unwrap_or_default();
        if !long.is_empty() && bytes.get(open..)?.starts_with(long) {
            self.at = open + long.len();
            return Some(open..self.at);
        }
        // Most strings are short and have no escape: the first quote or backslash decides,
        // and only a string with an escape is scanned with its escapes checked, from its
        // first backslash (the byte before it, a quote or not, escapes nothing).
        let first = quote_or_backslash(bytes, open + 1)?;
        let close = if bytes.get(first) == Some(&b'"') {
            first
        } else {
            string_end_checked(bytes, first - 1)?
        };
        self.at = close + 1;
        if self.at - open >= REPEATED_STRING_BYTES {
            self.long = open..self.at;
        }
        Some(open..self.at)
    }

    fn string_or_null(&mut self) -> Option<Option<Range<usize>>> {
        if self.peek()? == b'"' {
            self.string().map(Some)
        } else {
            self.null().map(|()| None)
        }
    }

    fn owned_string_or_null(&mut self) -> Option<Option<String>> {
        let string = self.string_or_null()?;
        self.decoded_or_none(string)
            .map(|string| string.map(Cow::into_owned))
    }

    fn bool_or_null(&mut self) -> Option<Option<bool>> {
        match self.peek()? {
            b't' => self.exactly(b"true").map(|()| Some(true)),
            b'f' => self.exactly(b"false").map(|()| Some(false)),
            _ => self.null().map(|()| None),
        }
    }

    /// Any value at nesting `depth`: its range when it is a string.
    fn string_or_other(&mut self, depth: usize) -> Option<Option<Range<usize>>> {
        let range = self.skip(depth)?;
        Some((self.bytes().get(range.start) == Some(&b'"')).then_some(range))
    }

    /// Any value at nesting `depth`: its range unless it is `null`.
    fn unless_null(&mut self, depth: usize) -> Option<Option<Range<usize>>> {
        let range = self.skip(depth)?;
        Some((self.bytes().get(range.clone()) != Some(b"null")).then_some(range))
    }

    /// A usage value at nesting `depth`: its range unless it is `null`, and the usage
    /// read from it (as [`usage_of_text`] reads it). The CLI's flat object of integers is
    /// read in the same pass.
    fn usage(&mut self, depth: usize) -> Option<(Option<Range<usize>>, Option<Usage>)> {
        self.peek()?;
        if let Some((usage, len)) = flat_usage_head(self.bytes().get(self.at..)?) {
            let range = self.at..self.at + len;
            self.at = range.end;
            return Some((Some(range), Some(usage)));
        }
        let range = self.unless_null(depth)?;
        let usage = range
            .clone()
            .and_then(|range| usage_of_text(self.text.get(range)?));
        Some((range, usage))
    }

    /// A key with its colon: the key's bytes. A key spelled with an escape is refused, as
    /// is the key serde_json reads apart.
    fn key(&mut self) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let bytes = self.bytes();
        let end = quote_or_backslash(bytes, start)?;
        if bytes.get(end) != Some(&b'"') {
            return None;
        }
        let key = bytes.get(start..end)?;
        if key == RAW_VALUE_TOKEN.as_bytes() {
            return None;
        }
        self.at = end + 1;
        self.eat(b':')?;
        Some(key)
    }

    /// An object at the cursor: `entry` is called with each key, the cursor on its value,
    /// and reads the value.
    fn object(&mut self, mut entry: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            entry(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array at the cursor: `element` is called with the cursor on each element, and
    /// reads it.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            element(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Any value at nesting `depth` (a container's own level), checked and passed over:
    /// its range.
    fn skip(&mut self, depth: usize) -> Option<Range<usize>> {
        let start = {
            self.peek()?;
            self.at
        };
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'{' if depth <= MAX_DEPTH => self.object(|r, _| r.skip(depth + 1).map(drop))?,
            b'[' if depth <= MAX_DEPTH => self.array(|r| r.skip(depth + 1).map(drop))?,
            b't' => self.exactly(b"true")?,
            b'f' => self.exactly(b"false")?,
            b'n' => self.null()?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        }
        Some(start..self.at)
    }

    /// A number at the cursor, of the few shapes any reader takes alike: an integer of at
    /// most 18 digits, with at most 18 more after a decimal point, and no exponent.
    fn number(&mut self) -> Option<()> {
        let rest = self.bytes().get(self.at..)?;
        let sign = usize::from(rest.first() == Some(&b'-'));
        let digits = |from: usize| {
            rest.get(from..)
                .map_or(0, |r| r.iter().take_while(|b| b.is_ascii_digit()).count())
        };
        let whole = digits(sign);
        if !(1..=18).contains(&whole) || (whole > 1 && rest.get(sign) == Some(&b'0')) {
            return None;
        }
        let mut end = sign + whole;
        if rest.get(end) == Some(&b'.') {
            let fraction = digits(end + 1);
            if !(1..=18).contains(&fraction) {
                return None;
            }
            end += 1 + fraction;
        }
        if matches!(rest.get(end), Some(b'e' | b'E')) {
            return None;
        }
        self.at += end;
        Some(())
    }

    /// The text of the string at `range` (quotes included; checked by [`Self::string`]).
    fn decoded(&self, range: Range<usize>) -> Option<Cow<'a, str>> {
        let inner = self.text.get(range.start + 1..range.end.checked_sub(1)?)?;
        if memchr::memchr(b'\\', inner.as_bytes()).is_none() {
            return Some(Cow::Borrowed(inner));
        }
        unescape(inner).map(Cow::Owned)
    }

    fn decoded_or_none(&self, range: Option<Range<usize>>) -> Option<Option<Cow<'a, str>>> {
        match range {
            Some(range) => self.decoded(range).map(Some),
            None => Some(None),
        }
    }
}

/// The text of a string's contents with escapes, decoded as serde decodes it into a
/// `String`; `None` for an escape it refuses.
fn unescape(inner: &str) -> Option<String> {
    let mut out = String::with_capacity(inner.len());
    let mut rest = inner;
    while let Some(at) = memchr::memchr(b'\\', rest.as_bytes()) {
        out.push_str(rest.get(..at)?);
        let bytes = rest.as_bytes();
        let (decoded, len) = match *bytes.get(at + 1)? {
            b'"' => ('"', 2),
            b'\\' => ('\\', 2),
            b'/' => ('/', 2),
            b'b' => ('\u{8}', 2),
            b'f' => ('\u{c}', 2),
            b'n' => ('\n', 2),
            b'r' => ('\r', 2),
            b't' => ('\t', 2),
            b'u' => match hex_unit(bytes, at + 2)? {
                leading @ 0xD800..=0xDBFF => {
                    if bytes.get(at + 6..at + 8)? != b"\\u" {
                        return None;
                    }
                    let trailing = hex_unit(bytes, at + 8)?;
                    if !(0xDC00..=0xDFFF).contains(&trailing) {
                        return None;
                    }
                    let code = 0x1_0000
                        + ((u32::from(leading) - 0xD800) << 10)
                        + (u32::from(trailing) - 0xDC00);
                    (char::from_u32(code)?, 12)
                }
                0xDC00..=0xDFFF => return None,
                unit => (char::from_u32(u32::from(unit))?, 6),
            },
            _ => return None,
        };
        out.push(decoded);
        rest = rest.get(at + len..)?;
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Xorshift;
    use crate::stream::decode::{decode_line, general_reading};

    /// The hand reading of a line, of either kind (`None` where it gives up).
    fn by_hand(line: &[u8]) -> Option<Decoded> {
        let text = std::str::from_utf8(line).ok()?;
        if line.starts_with(br#"{"type":"assistant","#) {
            read_assistant_line(text)
        } else if free_of_control_bytes(line) {
            read_user_line(text)
        } else {
            None
        }
    }

    /// Asserts that the hand reading of `line`, where it does not give up, is serde's, and
    /// that the decoder as a whole reads the line as the general reading does; whether the
    /// hand reading read it.
    fn agrees(line: &[u8]) -> bool {
        let general = general_reading(line);
        let hand = by_hand(line);
        let shown = String::from_utf8_lossy(line);
        if let Some(hand) = &hand {
            assert_eq!(Ok(hand), general.as_ref(), "{shown}");
        }
        assert_eq!(decode_line(line), general, "{shown}");
        hand.is_some()
    }

    /// Every `assistant` and `user` line of the recorded CLI streams.
    fn recorded_lines() -> Vec<&'static str> {
        [
            include_str!("../../fixtures/streams/tool-use-bash-write.jsonl"),
            include_str!("../../fixtures/streams/success-text.jsonl"),
            include_str!("../../fixtures/streams/max-turns.jsonl"),
            include_str!("../../fixtures/streams/max-budget.jsonl"),
            include_str!("../../fixtures/streams/api-error-429.jsonl"),
            include_str!("../../fixtures/streams/api-error-500.jsonl"),
            include_str!("../../fixtures/streams/auth-not-logged-in.jsonl"),
        ]
        .into_iter()
        .flat_map(str::lines)
        .filter(|line| {
            line.starts_with(r#"{"type":"assistant","#) || line.starts_with(r#"{"type":"user","#)
        })
        .collect()
    }

    #[test]
    fn the_clis_own_lines_are_read_by_hand_as_serde_reads_them() {
        let lines = recorded_lines();
        assert!(lines.len() > 15, "{}", lines.len());
        for line in lines {
            let synthetic = line.contains(r#""model":"<synthetic>""#);
            // A synthetic error message's fields are left to serde.
            assert_eq!(
                agrees(line.as_bytes()),
                !synthetic || !line.contains(r#""error":""#),
                "{line}"
            );
        }
        // The bench's shapes (fixtures/bench/gen_stream.py): prose with escapes and
        // UTF-8, a Bash and a Read call, a tool result echoed and its metadata.
        for line in bench_shaped_lines(&mut Xorshift(0x00dd_ba11)) {
            assert!(agrees(line.as_bytes()), "not read by hand: {line}");
        }
    }

    /// Lines of a turn as the CLI prints them (the shapes of fixtures/bench/gen_stream.py).
    fn bench_shaped_lines(rng: &mut Xorshift) -> Vec<String> {
        let words = [
            "the",
            "function",
            "naïve",
            "café",
            "—",
            "“quoted”",
            "✓",
            r"\n",
            r#"\""#,
            r"\\",
            r"\t",
            r"\u00e9",
            r"\ud83d\ude00",
            r"\/",
            "𝄞",
        ];
        let mut prose = |n: usize| -> String {
            (0..n)
                .map(|_| words[rng.below(words.len())])
                .collect::<Vec<_>>()
                .join(" ")
        };
        let text = prose(300);
        let blob = prose(1500);
        let command = prose(6);
        let usage = r#"{"input_tokens":16981,"output_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":8000}"#;
        let head = r#"{"type":"assistant","message":{"id":"msg_bench_00000001","type":"message","role":"assistant","model":"glm-4.7","content":["#;
        let tail = r#""parent_tool_use_id":null,"session_id":"8f0c7a52-3c1e-4d5b-9a41-6f2e1b0d9c37","uuid":"00000001-0000-4000-8000-00009e3779b1","timestamp":"2026-11-21T12:28:02.574Z""#;
        let foot = format!(
            r#"],"stop_reason":null,"stop_sequence":null,"usage":{usage},"context_management":null}},{tail},"request_id":"req_00000001"}}"#
        );
        vec![
            format!(r#"{head}{{"type":"text","text":"{text}"}}{foot}"#),
            format!(
                r#"{head}{{"type":"tool_use","id":"toolu_bench_1","name":"Bash","input":{{"command":"{command}","description":"Run the tests","timeout":120000}}}}{foot}"#
            ),
            format!(
                r#"{head}{{"type":"tool_use","id":"toolu_bench_2","name":"Read","input":{{"file_path":"/home/u/ws/src/caf\u00e9_1.rs","offset":-0,"limit":1.5}}}}{foot}"#
            ),
            format!(
                r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"toolu_bench_1","type":"tool_result","content":"{blob}","is_error":false}}]}},{tail},"tool_use_result":{{"stdout":"{blob}","stderr":"","interrupted":false,"isImage":false,"noOutputExpected":false}},"tool_result_meta":[{{"id":"toolu_bench_1","permission_decision":{{"decision":"accept","source":"config","reason_type":"rule"}}}}]}}"#
            ),
            format!(
                r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"toolu_bench_2","type":"tool_result","content":[{{"type":"text","text":"{command}"}},{{"type":"image","source":{{"data":"iVBOR","nested":[[[],{{}}],null,true]}}}}]}},{{"type":"text","text":"a note"}}]}},{tail}}}"#
            ),
            // A prompt, and no message at all.
            format!(r#"{{"type":"user","message":{{"role":"user","content":"{text}"}},{tail}}}"#),
            format!(r#"{{"type":"user","message":null,"usage":{usage},{tail}}}"#),
        ]
    }

    #[test]
    fn what_the_hand_reading_does_not_recognise_is_left_to_serde() {
        let head = r#"{"type":"assistant","message":{"id":"m1","content":["#;
        let block = r#"{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}"#;
        let read = format!(r#"{head}{block}]}},"uuid":"u1"}}"#);
        assert!(agrees(read.as_bytes()));
        for (blocks, tail) in [
            // Whitespace but spaces, a key spelled with an escape.
            (block, "\t"),
            (block, ",\n\"x\":1"),
            (block, r#","\u0075uid":"u2""#),
            (r#"{"type":"text","te\u0078t":"t"}"#, ""),
            (
                r#"{"type":"tool_use","name":"Bash","input":{"comm\u0061nd":"ls"}}"#,
                "",
            ),
            // Numbers of other shapes, though valid.
            (block, r#","n":1e3"#),
            (block, r#","n":1E-3"#),
            (block, r#","n":1234567890123456789"#),
            (block, r#","n":0.1234567890123456789"#),
            (
                r#"{"type":"tool_use","name":"Bash","input":{"x":1e400}}"#,
                "",
            ),
            // A lone surrogate where serde would skip it, and where it would not.
            (block, r#","x":"\uD800""#),
            (r#"{"type":"text","text":"\uDC00"}"#, ""),
            // Duplicates of a typed key, at every level.
            (block, r#","uuid":"u2""#),
            (r#"{"type":"text","text":"a","text":"b"}"#, ""),
            (r#"{"type":"text","type":"text","text":"a"}"#, ""),
            (block, r#","message":null"#),
            // Fields of other events, a synthetic message's error, values read apart.
            (block, r#","subtype":"init""#),
            (block, r#","num_turns":3"#),
            (block, r#","error":"rate_limit""#),
            (block, r#","api_error_status":429"#),
            (r#"{"type":"tool_use","name":"Bash","input":"ls"}"#, ""),
            (r#"{"type":"tool_use","name":"Bash","input":[1]}"#, ""),
            (
                r#"{"type":"tool_use","name":"StructuredOutput","input":{"a":1}}"#,
                "",
            ),
            (
                r#"{"type":"tool_use","name":"mcp__coder__ask_user","input":{"q":[]}}"#,
                "",
            ),
            (
                r#"{"type":"tool_use","name":"Bash","input":{"$serde_json::private::RawValue":"1"}}"#,
                "",
            ),
            // Mistyped fields, which the general reading reads as "no blocks".
            (r#"{"type":"text","text":5}"#, ""),
            (r#"{"type":"tool_result","is_error":"yes"}"#, ""),
            (r#""text""#, ""),
        ] {
            let line = format!(r#"{head}{blocks}]}},"uuid":"u1"{tail}}}"#);
            assert!(!agrees(line.as_bytes()), "read by hand: {line}");
        }
        // A message's content that is not an array, a message that is not an object.
        for message in [r#"{"id":"m1","content":{"a":1}}"#, r#""m""#, "[]"] {
            let line = format!(r#"{{"type":"assistant","message":{message}}}"#);
            assert!(!agrees(line.as_bytes()), "read by hand: {line}");
        }
        // Nesting: up to the hand reading's limit read, beyond it left to serde (whose
        // limit is 128).
        for depth in [50, 58, 59, 60, 61, 100, 126, 127, 128, 200] {
            let line = format!(
                r#"{head}{{"type":"tool_use","name":"Bash","input":{{"command":"c","x":{}1{}}}}}]}}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            assert_eq!(agrees(line.as_bytes()), depth + 5 <= MAX_DEPTH, "{depth}");
        }
    }

    #[test]
    fn odd_but_valid_lines_are_read_by_hand_as_serde_reads_them() {
        for line in [
            // Spaces between tokens, an empty message, empty and nested unknown values.
            r#"{"type":"assistant", "message" : { "id" : "m1" , "content" : [ { "type" : "text" , "text" : "a" } ] } , "x" : [ ] , "y" : { } }  "#,
            r#"{"type":"assistant","message":{}}"#,
            r#"{"type":"assistant","message":{"content":null,"usage":null},"usage":null,"uuid":7,"parent_tool_use_id":[1,{"a":[]}]}"#,
            // Escapes of every kind, a surrogate pair, in every decoded string.
            r#"{"type":"assistant","session_id":"s\"\\\/\b\f\n\r\t\u0000\u00e9\uD834\uDD1E","message":{"id":"\ud83d\ude00","model":"m\u002f","content":[{"type":"t\u0065xt","text":"a\"b\\c\nd\u00e9\uD83D\uDE00 𝄞"},{"type":"tool_use","id":"t\"1","name":"Gr\u0065p","input":{"pattern":"a\\.b\"","path":"\/tmp\/caf\u00e9","path":"p2","command":null,"url":{"a":["\ud83d\ude00"]},"file_path":5}}]}}"#,
            // A tool input's string keys: the last value of a key counts, strings only.
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Read","input":{"file_path":"a","file_path":7}},{"type":"tool_use","input":{"notebook_path":"n.ipynb","command":"x"}},{"type":"tool_use","name":null,"id":null,"input":null}]}}"#,
            // Blocks of other kinds, with fields typed all the same.
            r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"…","signature":"s"},{"type":null,"text":"t"},{"text":"no type"},{"type":"tool_result","tool_use_id":"t","is_error":true,"content":[{"a":-0.5}]}]}}"#,
            // Usage of odd shapes: read by serde from the span.
            r#"{"type":"assistant","message":{"usage":{ "input_tokens" : 1 }},"usage":{"output_tokens":2}}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":1,"input_tokens":2}}}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":1.5}}}"#,
            // User lines: results of every shape, a string content, no message.
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"a\nb"},{"type":"tool_result","content":null,"is_error":null,"tool_use_id":null},{"type":"tool_result","content":[1,"\ud83d\ude00",{"k":null}],"is_error":true},{"type":"text","text":"x"},{"type":"tool_r\u0065sult","tool_use_id":"t\u0032"}]},"uuid":"u","parent_tool_use_id":"p","usage":{"input_tokens":3},"session_id":null}"#,
            r#"{"type":"user","message":{"content":"a prompt","id":null,"model":"m","usage":[]},"error":{"a":1},"api_error_status":"500"}"#,
            r#"{"type":"user"}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","input":{"a":[]},"name":"n","id":"i","text":null}]}}"#,
        ] {
            assert!(agrees(line.as_bytes()), "not read by hand: {line}");
        }
    }

    #[test]
    fn invalid_and_cut_lines_are_never_read_by_hand() {
        for line in [
            r#"{"type":"assistant","message":{"id":"m1"}"#,
            r#"{"type":"assistant","message":{"id":"m1"}}}"#,
            r#"{"type":"assistant","message":{"id":"m1"}} x"#,
            r#"{"type":"assistant","message":{"id":"m1",}}"#,
            r#"{"type":"assistant","message":{"id":"m1"},}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text"},]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text"} {"type":"text"}]}}"#,
            r#"{"type":"assistant","message":{"id" "m1"}}"#,
            r#"{"type":"assistant","message":{"id":m1}}"#,
            r#"{"type":"assistant","message":{"id":"m1\q"}}"#,
            r#"{"type":"assistant","message":{"id":"m1\u12"}}"#,
            r#"{"type":"assistant","x":01}"#,
            r#"{"type":"assistant","x":-}"#,
            r#"{"type":"assistant","x":1.}"#,
            r#"{"type":"assistant","x":.5}"#,
            r#"{"type":"assistant","x":+1}"#,
            r#"{"type":"assistant","x":nul}"#,
            r#"{"type":"assistant","x":truee}"#,
            r#"{"type":"assistant","x":"a"b"}"#,
            "{\"type\":\"assistant\",\"x\":\"a\u{1}b\"}",
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"a\qb"}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"ab}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":[}]}}"#,
        ] {
            let general = general_reading(line.as_bytes());
            assert!(
                matches!(general, Err(crate::stream::DecodeError::NotJson)),
                "{line}: {general:?}"
            );
            assert!(!agrees(line.as_bytes()), "read by hand: {line}");
        }
        // A tool's output repeated, but for what makes the copy invalid: the copy is
        // scanned, not taken for the string read before.
        let long = r#"fn main() {\n    println!(\"caf\u00e9\");\n}\n"#.repeat(20);
        for copy in [
            format!(r"{long}\q"),
            format!(r"{long}\u12"),
            format!(r"{long}\uD800"),
            format!("{long}\u{1}"),
            format!(r#"{long}""#),
            long[..long.len() - 1].to_owned(),
        ] {
            let line = format!(
                r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"{long}"}}]}},"tool_use_result":{{"stdout":"{copy}"}}}}"#
            );
            // (A lone surrogate is refused by the hand reading alone: serde skips it.)
            assert_eq!(
                general_reading(line.as_bytes()).is_err(),
                !copy.ends_with(r"\uD800"),
                "{copy}"
            );
            assert!(!agrees(line.as_bytes()), "read by hand: {copy}");
        }
        let line = format!(
            r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"{long}"}}]}},"tool_use_result":{{"stdout":"{long}","stderr":"{long}x"}}}}"#
        );
        assert!(agrees(line.as_bytes()));
        // Cuts of a line: everywhere in its head and its end, and at random between.
        let mut rng = Xorshift(0x5eed);
        let lines = bench_shaped_lines(&mut rng);
        for line in &lines {
            let ends = (0..200)
                .chain(line.len() - 200..line.len())
                .chain((0..200).map(|_| rng.below(line.len())));
            for end in ends.filter(|&end| line.is_char_boundary(end)) {
                let cut = &line.as_bytes()[..end];
                assert!(by_hand(cut).is_none(), "{}", &line[..end]);
                assert_eq!(decode_line(cut), general_reading(cut));
            }
        }
    }

    /// Random damage to the CLI's lines: bytes and tokens inserted, removed, repeated;
    /// wherever the hand reading still reads a line, serde reads it the same.
    #[test]
    fn damaged_lines_are_read_by_hand_as_serde_reads_them_or_left_to_it() {
        const TOKENS: [&str; 34] = [
            " ",
            "\t",
            "\n",
            "\r",
            "\u{1}",
            "\"",
            "\\",
            ",",
            ":",
            "{",
            "}",
            "[",
            "]",
            "null",
            "true",
            "0",
            "-0",
            "01",
            "1.5",
            "1e5",
            "x",
            "é",
            "\u{1d11e}",
            r"\n",
            r"\u00e9",
            r"\uD800",
            r"\uDC00",
            r"\ud83d\ude00",
            r"\u12",
            r#""type":"text","#,
            r#""subtype":"x","#,
            r#""uuid":"u9","#,
            r#""input":{},"#,
            "\u{ff}",
        ];
        let mut rng = Xorshift(0x2545_f491_4f6c_dd1d);
        let mut seeds: Vec<String> = recorded_lines().into_iter().map(str::to_owned).collect();
        for _ in 0..3 {
            seeds.extend(bench_shaped_lines(&mut rng));
        }
        let mut read = 0;
        let cases = 30_000;
        for _ in 0..cases {
            let mut line = seeds[rng.below(seeds.len())].as_bytes().to_vec();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(line.len() + 1);
                match rng.below(4) {
                    0 | 1 => {
                        let token = TOKENS[rng.below(TOKENS.len())].as_bytes();
                        let token = if token == "\u{ff}".as_bytes() {
                            &[0xff][..]
                        } else {
                            token
                        };
                        line.splice(at..at, token.iter().copied());
                    }
                    2 => {
                        let end = (at + 1 + rng.below(8)).min(line.len());
                        line.drain(at.min(end)..end);
                    }
                    _ => {
                        let end = (at + rng.below(40)).min(line.len());
                        let piece = line[at.min(end)..end].to_vec();
                        line.splice(at..at, piece);
                    }
                }
            }
            read += usize::from(agrees(&line));
        }
        // Enough damaged lines are still read by hand for the comparison to mean something
        // (a space or a repeated unknown field changes nothing).
        assert!(read > cases / 20, "{read} of {cases} read by hand");
    }
}
