//! The fast reading of an `assistant` line, and the summary of a tool call both readings
//! share.
//!
//! An `assistant` line is two thirds of a busy run's lines. The general reading
//! ([`super::decode`]) builds it through the one wire type of every event (25 fields), a
//! `String` for each id and text, and the tool input as a `serde_json::Value` (an ordered
//! map) that is only searched for a few keys. This reading borrows instead: the ids and
//! texts are read as slices of the line (copied once, into the event), the tool input is
//! walked once for the keys a summary or a path needs and otherwise only checked, and only
//! the fields an `assistant` event has are matched.
//!
//! It never decides a line on its own terms: it checks exactly what the general reading
//! checks (the input is checked as a `Value` would be, every field the general wire type
//! types is typed the same way), and wherever the two could differ (a field only other
//! events have, a duplicate field, a call whose whole input coder keeps, any error) it
//! gives up and the general reading decides. So a line it reads is the same event, with
//! the same spans, as the general reading makes of it.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::text::one_line;

use super::event::{AssistantEvent, Decoded, Event, EventSpans, ToolUse, UpstreamErrorType, Usage};
use super::lenient::{ArrayOrNothing, other_scalars_are};

/// The tool the CLI offers the model for `--json-schema` (2.1.330): its input is the answer.
pub const STRUCTURED_TOOL: &str = "StructuredOutput";

/// The CLI's prefix of the tools of coder's own MCP server (`--mcp-config` server `coder`).
pub(super) const CODER_TOOL_PREFIX: &str = "mcp__coder__";

/// How every `assistant` line the CLI prints begins.
pub(super) const ASSISTANT_LINE_START: &[u8] = br#"{"type":"assistant","#;

/// The input keys a summary shows, in order of preference.
const SUMMARY_KEYS: [&str; 5] = ["command", "file_path", "path", "pattern", "url"];

/// The input keys that name the file a call targets, in order of preference.
const PATH_KEYS: [&str; 3] = ["file_path", "notebook_path", "path"];

/// `Bash(npm test)`, `Write(src/lib.rs)`, or just the tool name: `detail` is the first
/// string among the input's [`SUMMARY_KEYS`].
pub(super) fn tool_summary(name: &str, detail: Option<&str>) -> String {
    let Some(detail) = detail else {
        return name.to_owned();
    };
    let detail = one_line(detail, 80);
    let mut summary = String::with_capacity(name.len() + detail.len() + 2);
    summary.push_str(name);
    summary.push('(');
    summary.push_str(&detail);
    summary.push(')');
    summary
}

/// The detail of a summary and the path of a call with this input (see [`tool_summary`]).
pub(super) fn summary_detail_and_path(
    input: Option<&serde_json::Value>,
) -> (Option<&str>, Option<&str>) {
    let string = |key: &str| {
        input
            .and_then(|input| input.get(key))
            .and_then(|v| v.as_str())
    };
    (
        SUMMARY_KEYS.into_iter().find_map(string),
        PATH_KEYS.into_iter().find_map(string),
    )
}

/// Where `raw`, borrowed from `line`, lies in it.
pub(super) fn span_in(line: &[u8], raw: &RawValue) -> Option<Range<usize>> {
    let start = (raw.get().as_ptr() as usize).checked_sub(line.as_ptr() as usize)?;
    let end = start + raw.get().len();
    (end <= line.len()).then_some(start..end)
}

/// Where the string `raw`, borrowed from `line`, lies in it (`None` for other values).
pub(super) fn string_span_in(line: &[u8], raw: Option<&RawValue>) -> Option<Range<usize>> {
    raw.filter(|raw| raw.get().starts_with('"'))
        .and_then(|raw| span_in(line, raw))
}

/// Token usage, when the raw value is a usage object.
///
/// The CLI writes usage as one flat object of integers (`{"input_tokens":16981,…}`), which
/// is read by hand ([`flat_usage`]): serde's reading of the raw value, a second pass over
/// it, took about 3,400 instructions a line for four numbers. Anything else (whitespace,
/// another key, a duplicate, a value that is not an unsigned integer of at most 19 digits)
/// is read by serde, as before.
pub(super) fn usage_of(raw: Option<&RawValue>) -> Option<Usage> {
    usage_of_text(raw?.get())
}

/// [`usage_of`] the text of a raw value.
pub(super) fn usage_of_text(raw: &str) -> Option<Usage> {
    flat_usage(raw.as_bytes()).or_else(|| serde_json::from_str(raw).ok())
}

/// [`Usage`] from a flat object of its own keys (each at most once) and unsigned integers,
/// written without whitespace; `None` for any other text, which serde must then read.
fn flat_usage(raw: &[u8]) -> Option<Usage> {
    flat_usage_head(raw)
        .filter(|&(_, len)| len == raw.len())
        .map(|(usage, _)| usage)
}

/// [`flat_usage`] of the object at the start of `json`, and its length: the object is
/// valid JSON, whatever follows it.
pub(super) fn flat_usage_head(json: &[u8]) -> Option<(Usage, usize)> {
    // Each key with its quotes and colon: matched in place, without a search for its end.
    const KEYS: [&[u8]; 4] = [
        b"\"input_tokens\":",
        b"\"output_tokens\":",
        b"\"cache_creation_input_tokens\":",
        b"\"cache_read_input_tokens\":",
    ];
    let mut usage = Usage::default();
    let mut seen = [false; 4];
    let mut rest = json.strip_prefix(b"{")?;
    if rest.first() == Some(&b'}') {
        return Some((usage, 2));
    }
    loop {
        let (slot, value) = KEYS
            .iter()
            .enumerate()
            .find_map(|(slot, key)| Some((slot, rest.strip_prefix(*key)?)))?;
        if std::mem::replace(&mut seen[slot], true) {
            return None;
        }
        // At most 19 digits, which always fit a u64; JSON has no leading zeros.
        let mut number = 0;
        let mut digits = 0;
        for &digit in value.iter().take_while(|b| b.is_ascii_digit()) {
            if digits == 19 {
                return None;
            }
            number = number * 10 + u64::from(digit - b'0');
            digits += 1;
        }
        if digits == 0 || (digits > 1 && value[0] == b'0') {
            return None;
        }
        *match slot {
            0 => &mut usage.input_tokens,
            1 => &mut usage.output_tokens,
            2 => &mut usage.cache_creation_input_tokens,
            _ => &mut usage.cache_read_input_tokens,
        } = number;
        match value[digits..].split_first()? {
            (b',', after) => rest = after,
            (b'}', after) => return Some((usage, json.len() - after.len())),
            _ => return None,
        }
    }
}

pub(super) fn status_code(value: Option<serde_json::Value>) -> Option<u16> {
    match value? {
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(super) fn string_of(value: Option<serde_json::Value>) -> Option<String> {
    match value? {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Reads an `assistant` line, `text` being the line (checked UTF-8): the event the general
/// reading would make of it, or `None` where the general reading must decide (see the
/// module docs). The spans' UTF-8 verdict is left to the caller.
pub(super) fn decode_assistant_line(line: &[u8], text: &str) -> Option<Decoded> {
    let wire = serde_json::from_str::<WireAssistant<'_>>(text).ok()?;
    let message_usage = wire.message.as_ref().and_then(|m| m.usage);
    let spans = EventSpans {
        uuid: string_span_in(line, wire.uuid),
        parent_tool_use_id: string_span_in(line, wire.parent_tool_use_id),
        usage: wire
            .usage
            .or(message_usage)
            .and_then(|raw| span_in(line, raw)),
        utf8: false,
    };
    let mut event = AssistantEvent {
        session_id: wire.session_id.map(Str::into_owned),
        error: string_of(wire.error)
            .as_deref()
            .map(UpstreamErrorType::parse),
        api_error_status: status_code(wire.api_error_status),
        ..AssistantEvent::default()
    };
    if let Some(message) = wire.message {
        event.message_id = message.id.map(Str::into_owned);
        event.model = message.model.map(Str::into_owned);
        event.usage = usage_of(message.usage);
        for block in message.content.map(|c| c.0).unwrap_or_default() {
            match block.kind.as_ref().map(Str::as_str) {
                Some("text") => event.texts.extend(block.text.map(Str::into_owned)),
                Some("tool_use") => {
                    let name = block.name.as_ref().map_or("?", Str::as_str);
                    if name == STRUCTURED_TOOL || name.starts_with(CODER_TOOL_PREFIX) {
                        // Coder keeps these calls' whole input: the general reading.
                        return None;
                    }
                    let keys = block.input.unwrap_or_default();
                    event.tool_uses.push(ToolUse {
                        summary: tool_summary(name, keys.detail()),
                        path: keys.path().map(str::to_owned),
                        structured_input: None,
                        input: None,
                        id: block.id.map(Str::into_owned).unwrap_or_default(),
                        name: name.to_owned(),
                    });
                }
                _ => {}
            }
        }
    }
    Some(Decoded {
        event: Event::Assistant(event),
        spans,
    })
}

// ---------------------------------------------------------------------------------------
// Wire types, read by hand: each typed as the general wire types type it, and a refusal
// (an error, which hands the line to the general reading) wherever they could differ.

/// Why this reading gives up on a line; never shown (the general reading decides).
fn give_up<E: de::Error>() -> E {
    E::custom("left to the general reading")
}

/// Keys the general wire type of an event types although an `assistant` event has no use
/// for them: a line with one is left to it, which checks their type.
pub(super) const OTHER_EVENTS_KEYS: [&str; 16] = [
    "subtype",
    "model",
    "claude_code_version",
    "mcp_servers",
    "attempt",
    "error_status",
    "api_error_type",
    "is_error",
    "result",
    "num_turns",
    "terminal_reason",
    "errors",
    "structured_output",
    "duration_ms",
    "duration_api_ms",
    "total_cost_usd",
];

/// A JSON string, borrowed from the line unless it has escapes; refuses other values as a
/// `String` would.
struct Str<'a>(Cow<'a, str>);

impl Str<'_> {
    fn as_str(&self) -> &str {
        &self.0
    }

    fn into_owned(self) -> String {
        self.0.into_owned()
    }
}

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// Reads the value of a field into `slot`, `None` for `null`, refusing a duplicate.
macro_rules! field {
    ($map:ident, $slot:expr, $seen:expr, $ty:ty) => {{
        let value: Option<$ty> = $map.next_value()?;
        if std::mem::replace(&mut $seen, true) {
            return Err(give_up());
        }
        $slot = value;
    }};
}

/// The top level of an `assistant` line.
#[derive(Default)]
struct WireAssistant<'a> {
    uuid: Option<&'a RawValue>,
    parent_tool_use_id: Option<&'a RawValue>,
    usage: Option<&'a RawValue>,
    session_id: Option<Str<'a>>,
    error: Option<serde_json::Value>,
    api_error_status: Option<serde_json::Value>,
    message: Option<WireMessage<'a>>,
}

impl<'de> Deserialize<'de> for WireAssistant<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(WireAssistantVisitor)
    }
}

struct WireAssistantVisitor;

impl<'de> Visitor<'de> for WireAssistantVisitor {
    type Value = WireAssistant<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an assistant event")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut wire = WireAssistant::default();
        let mut seen = [false; 8];
        let mut assistant = false;
        while let Some(Str(key)) = map.next_key()? {
            match &*key {
                "type" => {
                    let Str(kind) = map.next_value()?;
                    if std::mem::replace(&mut seen[0], true) {
                        return Err(give_up());
                    }
                    assistant = kind == "assistant";
                }
                "uuid" => field!(map, wire.uuid, seen[1], &'de RawValue),
                "parent_tool_use_id" => {
                    field!(map, wire.parent_tool_use_id, seen[2], &'de RawValue)
                }
                "usage" => field!(map, wire.usage, seen[3], &'de RawValue),
                "session_id" => field!(map, wire.session_id, seen[4], Str<'de>),
                "error" => field!(map, wire.error, seen[5], serde_json::Value),
                "api_error_status" => {
                    field!(map, wire.api_error_status, seen[6], serde_json::Value)
                }
                "message" => field!(map, wire.message, seen[7], WireMessage<'de>),
                key if OTHER_EVENTS_KEYS.contains(&key) => return Err(give_up()),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !assistant {
            return Err(give_up());
        }
        Ok(wire)
    }
}

/// An `assistant` line's `message`.
#[derive(Default)]
struct WireMessage<'a> {
    id: Option<Str<'a>>,
    model: Option<Str<'a>>,
    content: Option<Blocks<'a>>,
    usage: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for WireMessage<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(WireMessageVisitor)
    }
}

struct WireMessageVisitor;

impl<'de> Visitor<'de> for WireMessageVisitor {
    type Value = WireMessage<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut message = WireMessage::default();
        let mut seen = [false; 4];
        while let Some(Str(key)) = map.next_key()? {
            match &*key {
                "id" => field!(map, message.id, seen[0], Str<'de>),
                "model" => field!(map, message.model, seen[1], Str<'de>),
                "content" => field!(map, message.content, seen[2], Blocks<'de>),
                "usage" => field!(map, message.usage, seen[3], &'de RawValue),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(message)
    }
}

/// A message's content: an array is read block by block; any other value means no blocks
/// (as the general reading's `StreamedBlocks`).
type Blocks<'a> = ArrayOrNothing<WireBlock<'a>>;

/// One content block.
#[derive(Default)]
struct WireBlock<'a> {
    kind: Option<Str<'a>>,
    text: Option<Str<'a>>,
    id: Option<Str<'a>>,
    name: Option<Str<'a>>,
    input: Option<InputKeys<'a>>,
}

impl<'de> Deserialize<'de> for WireBlock<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(WireBlockVisitor)
    }
}

struct WireBlockVisitor;

impl<'de> Visitor<'de> for WireBlockVisitor {
    type Value = WireBlock<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a content block")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut block = WireBlock::default();
        let mut seen = [false; 8];
        // Typed as the general reading types them, and not kept.
        let mut tool_use_id: Option<Str<'de>> = None;
        let mut is_error: Option<bool> = None;
        let mut content: Option<&'de RawValue> = None;
        while let Some(Str(key)) = map.next_key()? {
            match &*key {
                "type" => field!(map, block.kind, seen[0], Str<'de>),
                "text" => field!(map, block.text, seen[1], Str<'de>),
                "id" => field!(map, block.id, seen[2], Str<'de>),
                "name" => field!(map, block.name, seen[3], Str<'de>),
                "input" => field!(map, block.input, seen[4], InputKeys<'de>),
                "tool_use_id" => field!(map, tool_use_id, seen[5], Str<'de>),
                "is_error" => field!(map, is_error, seen[6], bool),
                "content" => field!(map, content, seen[7], &'de RawValue),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let _ = (tool_use_id, is_error, content);
        Ok(block)
    }
}

/// A tool input, checked as a `serde_json::Value` would be and reduced to the strings at
/// the keys a summary or a path reads. A key's last value counts, as in a `Value`'s map.
#[derive(Default)]
pub(super) struct InputKeys<'a> {
    /// Per key of [`INPUT_KEYS`], the key's last value if it was a string.
    pub(super) strings: [Option<Cow<'a, str>>; INPUT_KEYS.len()],
}

/// Every key [`InputKeys`] keeps: [`SUMMARY_KEYS`] and [`PATH_KEYS`].
pub(super) const INPUT_KEYS: [&str; 6] = [
    "command",
    "file_path",
    "path",
    "pattern",
    "url",
    "notebook_path",
];

impl InputKeys<'_> {
    fn string(&self, key: &str) -> Option<&str> {
        let at = INPUT_KEYS.iter().position(|k| *k == key)?;
        self.strings[at].as_deref()
    }

    pub(super) fn detail(&self) -> Option<&str> {
        SUMMARY_KEYS.into_iter().find_map(|key| self.string(key))
    }

    pub(super) fn path(&self) -> Option<&str> {
        PATH_KEYS.into_iter().find_map(|key| self.string(key))
    }
}

impl<'de> Deserialize<'de> for InputKeys<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(InputVisitor)
    }
}

struct InputVisitor;

impl<'de> Visitor<'de> for InputVisitor {
    type Value = InputKeys<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut keys = InputKeys::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match INPUT_KEYS.iter().position(|k| *k == key.0) {
                Some(at) => keys.strings[at] = map.next_value::<StringOrNot<'de>>()?.0,
                None => {
                    map.next_value::<Checked>()?;
                }
            }
        }
        Ok(keys)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        CheckedVisitor.visit_seq(seq).map(|()| InputKeys::default())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(InputKeys::default())
    }

    other_scalars_are!(InputKeys::default());
}

/// A key of an object in a tool input, decoded as a `Value` decodes it. The one key a
/// `Value` treats apart (serde_json's marker of a raw value) is refused.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Str(key) = Str::deserialize(deserializer)?;
        if key == RAW_VALUE_TOKEN {
            return Err(give_up());
        }
        Ok(Key(key))
    }
}

/// serde_json's private marker key of a raw value, which a `Value` reads apart when it is
/// an object's first key.
pub(super) const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// A value checked as a `Value` would be: a string kept, anything else dropped.
struct StringOrNot<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for StringOrNot<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StringOrNotVisitor;
        impl<'de> Visitor<'de> for StringOrNotVisitor {
            type Value = StringOrNot<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(StringOrNot(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StringOrNot(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                CheckedVisitor.visit_map(map).map(|()| StringOrNot(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                CheckedVisitor.visit_seq(seq).map(|()| StringOrNot(None))
            }
            other_scalars_are!(StringOrNot(None));
        }
        deserializer.deserialize_any(StringOrNotVisitor)
    }
}

/// Any value, checked as a `Value` would be (strings decoded, numbers in range, nesting
/// within serde_json's limit) and dropped.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(CheckedVisitor)
            .map(|()| Checked)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<Key<'de>, Checked>()?.is_some() {}
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    other_scalars_are!(());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Xorshift;
    use crate::stream::decode::{decode_line, general_reading};

    /// The hand reading of usage objects gives what serde gives, on random objects of
    /// its keys and others, duplicates, whitespace and numbers of every shape.
    #[test]
    fn usage_read_by_hand_as_serde_reads_it() {
        let keys = [
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "service_tier",
            "input_tokenz",
            "input\\u005ftokens",
        ];
        let values = [
            "0",
            "7",
            "16981",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "1.5",
            "1e3",
            "null",
            "\"x\"",
            "{\"a\":1}",
            "[]",
        ];
        let mut rng = Xorshift(0x5eed_cafe);
        let mut by_hand = 0;
        for _ in 0..20_000 {
            let fields: Vec<String> = (0..rng.below(6))
                .map(|_| {
                    let gap = if rng.below(20) == 0 { " " } else { "" };
                    let key = keys[rng.below(keys.len())];
                    let value = values[rng.below(values.len())];
                    format!("\"{key}\":{gap}{value}")
                })
                .collect();
            let text = format!("{{{}}}", fields.join(","));
            let Ok(raw) = serde_json::from_str::<&RawValue>(&text) else {
                continue;
            };
            by_hand += usize::from(flat_usage(text.as_bytes()).is_some());
            let serde = serde_json::from_str::<Usage>(&text).ok();
            assert_eq!(usage_of(Some(raw)), serde, "{text}");
        }
        assert!(by_hand > 1_000, "{by_hand}");
        let raw = serde_json::from_str::<&RawValue>(r#"{"input_tokens":12,"output_tokens":7}"#);
        assert_eq!(
            flat_usage(raw.unwrap().get().as_bytes()).map(|u| u.output_tokens),
            Some(7)
        );
    }

    fn general(line: &str) -> Option<Decoded> {
        general_reading(line.as_bytes()).ok()
    }

    fn fast(line: &str) -> Option<Decoded> {
        decode_assistant_line(line.as_bytes(), line).map(|mut decoded| {
            decoded.spans.utf8 = true;
            decoded
        })
    }

    #[test]
    fn a_cli_assistant_line_is_read_the_fast_way_as_the_general_reading_reads_it() {
        let text = r#"{"type":"assistant","message":{"id":"msg_fake_4d7bd27316ca49ea","type":"message","role":"assistant","model":"glm-4.7","content":[{"type":"text","text":"I will run \"two\" tools.\n"},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"echo hello > made_by_tool.txt\nand more","description":"Create a file"}},{"type":"tool_use","id":"toolu_2","name":"Write","input":{"file_path":"/home/u/ws/w.txt","content":"written\n"}}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"context_management":null},"parent_tool_use_id":null,"session_id":"e493d660","uuid":"7e27a05a","timestamp":"2026-11-21T12:28:45.898Z"}"#;
        let decoded = fast(text).unwrap();
        assert_eq!(Some(&decoded), general(text).as_ref());
        assert_eq!(Ok(&decoded), decode_line(text.as_bytes()).as_ref());
        let Event::Assistant(a) = &decoded.event else {
            panic!("not an assistant event")
        };
        assert_eq!(a.texts, ["I will run \"two\" tools.\n"]);
        assert_eq!(
            a.tool_uses[0].summary,
            "Bash(echo hello > made_by_tool.txt…)"
        );
        assert_eq!(a.tool_uses[1].summary, "Write(/home/u/ws/w.txt)");
        assert_eq!(a.tool_uses[1].path.as_deref(), Some("/home/u/ws/w.txt"));
        assert_eq!(a.usage.unwrap().input_tokens, 12);
        assert_eq!(
            &text.as_bytes()[decoded.spans.uuid.unwrap()],
            br#""7e27a05a""#
        );
    }

    #[test]
    fn lines_the_fast_reading_cannot_vouch_for_are_left_to_the_general_one() {
        let head = r#"{"type":"assistant","message":{"id":"m1","content":["#;
        for (blocks, tail) in [
            // A field other events have, typed by the general reading.
            ("", r#","num_turns":"x""#),
            ("", r#","subtype":"init""#),
            // Duplicates.
            ("", r#","session_id":"a","session_id":"b""#),
            (r#"{"type":"text","type":"text","text":"t"}"#, ""),
            // Coder keeps the whole input of these calls.
            (
                r#"{"type":"tool_use","id":"t","name":"StructuredOutput","input":{"a":1}}"#,
                "",
            ),
            (
                r#"{"type":"tool_use","id":"t","name":"mcp__coder__ask","input":{"q":[]}}"#,
                "",
            ),
            // What a `Value` refuses in an input, or reads apart.
            (
                r#"{"type":"tool_use","name":"Bash","input":{"command":"\uD800"}}"#,
                "",
            ),
            (
                r#"{"type":"tool_use","name":"Bash","input":{"x":1e400}}"#,
                "",
            ),
            (
                r#"{"type":"tool_use","name":"Bash","input":{"x":{"$serde_json::private::RawValue":"1"}}}"#,
                "",
            ),
            // A block that is not an object, or a mistyped field.
            (r#""text""#, ""),
            (r#"{"type":"text","text":5}"#, ""),
            (r#"{"type":"tool_result","is_error":"yes"}"#, ""),
        ] {
            let line = format!(r#"{head}{blocks}]}}{tail}}}"#);
            assert!(fast(&line).is_none(), "{line}");
            assert_eq!(
                decode_line(line.as_bytes()),
                general_reading(line.as_bytes()),
                "{line}"
            );
        }
        // A deep input: refused as deep by both readings, or by neither.
        for depth in [100, 121, 122, 123, 124, 200] {
            let line = format!(
                r#"{head}{{"type":"tool_use","name":"Bash","input":{{"command":"c","x":{}1{}}}}}]}}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            if let Some(decoded) = fast(&line) {
                assert_eq!(Some(decoded), general(&line), "{depth}");
            }
            assert_eq!(
                decode_line(line.as_bytes()),
                general_reading(line.as_bytes())
            );
        }
    }

    impl Xorshift {
        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }

        /// JSON string contents: plain, escaped, non-ASCII.
        fn string(&mut self) -> String {
            const PIECES: [&str; 9] = [
                "npm test", r"\n", r#"\""#, r"\\", "é", r"\u00e9", "𝄞", r"\/", " ",
            ];
            // Now and then what serde refuses in a string: a lone surrogate (either half),
            // a truncated or unknown escape.
            const REFUSED: [&str; 4] = [r"\uD800", r"\uDC00x", r"\u12", r"\x"];
            let len = [0, 1, 5, 40][self.below(4)];
            let mut text: String = (0..len).map(|_| self.pick(&PIECES)).collect();
            if self.below(40) == 0 {
                text.push_str(self.pick(&REFUSED));
            }
            text
        }

        /// A JSON value of any kind, small.
        fn value(&mut self, depth: usize) -> String {
            match self.below(if depth > 2 { 6 } else { 8 }) {
                0 => format!(r#""{}""#, self.string()),
                1 => "null".to_owned(),
                2 => self
                    .pick(&["0", "-7", "1.5e3", "18446744073709551616", "true"])
                    .to_owned(),
                3 => format!(r#""{}""#, self.string()),
                4 => "false".to_owned(),
                5 => "[]".to_owned(),
                6 => format!("[{},{}]", self.value(depth + 1), self.value(depth + 1)),
                _ => format!(
                    r#"{{"{}":{},"k":{}}}"#,
                    self.key(),
                    self.value(depth + 1),
                    self.value(depth + 1)
                ),
            }
        }

        fn key(&mut self) -> String {
            self.pick(&[
                "command",
                "file_path",
                "path",
                "pattern",
                "url",
                "notebook_path",
                "description",
                r"file\u005fpath",
                r"\u0063ommand",
                r"p\u0061th",
                "content",
                "x",
            ])
            .to_owned()
        }

        fn input(&mut self) -> String {
            match self.below(6) {
                0 => self.value(0),
                _ => {
                    let entries: Vec<String> = (0..self.below(5))
                        .map(|_| {
                            let value = match self.below(3) {
                                0 => self.value(1),
                                _ => format!(r#""{}""#, self.string()),
                            };
                            format!(r#""{}":{value}"#, self.key())
                        })
                        .collect();
                    format!("{{{}}}", entries.join(","))
                }
            }
        }

        fn block(&mut self) -> String {
            let mut fields = Vec::new();
            match self.below(7) {
                0 | 1 => {
                    // Keys spelled with escapes read as the keys.
                    let kind = self.pick(&[r#""type""#, r#""t\u0079pe""#]);
                    fields.push(format!(r#"{kind}:"text""#));
                    let key = self.pick(&[r#""text""#, r#""te\u0078t""#]);
                    fields.push(format!(r#"{key}:"{}""#, self.string()));
                }
                2 | 3 => {
                    let kind = self.pick(&[r#""type""#, r#""\u0074ype""#]);
                    fields.push(format!(r#"{kind}:"tool_use""#));
                    fields.push(format!(r#""id":"toolu_{}""#, self.below(100)));
                    let name = self.pick(&["Bash", "Read", "Grep", "WebFetch", "Write"]);
                    fields.push(format!(r#""name":"{name}""#));
                    fields.push(format!(r#""input":{}"#, self.input()));
                }
                4 => {
                    fields.push(r#""type":"thinking""#.to_owned());
                    fields.push(format!(r#""thinking":"{}","signature":"s""#, self.string()));
                }
                5 => fields.push(format!(r#""type":{}"#, self.value(2))),
                _ => {
                    let key = self.pick(&[
                        "text",
                        "id",
                        "name",
                        "input",
                        "tool_use_id",
                        "is_error",
                        "content",
                        "type",
                    ]);
                    fields.push(format!(r#""{key}":{}"#, self.value(1)));
                }
            }
            if self.below(6) == 0 {
                let key = self.pick(&["tool_use_id", "is_error", "content", "caller", "id"]);
                fields.push(format!(r#""{key}":{}"#, self.value(1)));
            }
            self.shuffle(&mut fields);
            format!("{{{}}}", fields.join(","))
        }

        fn shuffle(&mut self, items: &mut [String]) {
            for i in (1..items.len()).rev() {
                items.swap(i, self.below(i + 1));
            }
        }

        fn assistant_line(&mut self) -> String {
            let content = match self.below(8) {
                0 => self.value(1),
                _ => {
                    let blocks: Vec<String> = (0..self.below(4)).map(|_| self.block()).collect();
                    format!("[{}]", blocks.join(","))
                }
            };
            let usage = self.pick(&[
                r#"{"input_tokens":12,"output_tokens":1,"cache_read_input_tokens":3}"#,
                r#"{"input_tokens":"x"}"#,
                "null",
                "7",
            ]);
            let mut message = vec![
                format!(r#""content":{content}"#),
                r#""type":"message","role":"assistant""#.to_owned(),
            ];
            for (key, value) in [
                ("id", format!(r#""msg_{}""#, self.below(9))),
                (
                    "model",
                    self.pick(&[r#""glm-4.7""#, r#""<synthetic>""#, "null", "4"])
                        .to_owned(),
                ),
                ("usage", usage.to_owned()),
            ] {
                if self.below(8) != 0 {
                    message.push(format!(r#""{key}":{value}"#));
                }
            }
            self.shuffle(&mut message);
            let mut top = vec![
                format!(r#""message":{{{}}}"#, message.join(",")),
                r#""timestamp":"2026-11-21T12:28:45.898Z""#.to_owned(),
            ];
            for (key, value) in [
                ("session_id", r#""8f0c7a52""#.to_owned()),
                ("uuid", self.pick(&[r#""u\"1""#, "7", "null"]).to_owned()),
                (
                    "parent_tool_use_id",
                    self.pick(&[r#""toolu_1""#, "null"]).to_owned(),
                ),
                (
                    "error",
                    self.pick(&[r#""rate_limit""#, "null", "{}", "5"])
                        .to_owned(),
                ),
                (
                    "api_error_status",
                    self.pick(&["429", r#"" 500 ""#, "null"]).to_owned(),
                ),
                ("usage", usage.to_owned()),
                ("num_turns", "3".to_owned()),
            ] {
                if self.below(if key == "session_id" { 2 } else { 6 }) == 0 {
                    top.push(format!(r#""{key}":{value}"#));
                }
            }
            self.shuffle(&mut top);
            format!(r#"{{"type":"assistant",{}}}"#, top.join(","))
        }
    }

    #[test]
    fn assistant_lines_read_the_fast_way_agree_with_the_general_reading() {
        let mut rng = Xorshift(0x2545_f491_4f6c_dd1d);
        let mut read_fast = 0;
        for case in 0..3000 {
            let line = rng.assistant_line();
            let general_decoded = general(&line);
            if let Some(decoded) = fast(&line) {
                read_fast += 1;
                assert_eq!(Some(decoded), general_decoded, "case {case}: {line}");
            }
            assert_eq!(
                decode_line(line.as_bytes()),
                general_reading(line.as_bytes()),
                "case {case}: {line}"
            );
        }
        // Most lines are read the fast way (the rest: fields, types or values it leaves
        // to the general reading).
        assert!(read_fast > 1000, "{read_fast} of 3000 read the fast way");
    }
}
