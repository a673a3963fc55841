//! JSON a user hands coder (`--request`, `--answers`, `--json-schema`) parsed strictly: a
//! key given twice in one object is refused instead of the last one silently winning, so a
//! request that says two things never runs with the one the user did not mean.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Parses `text` as one JSON value, refusing an object that holds a key twice (at any
/// depth). The error reads like serde_json's (`… at line L column C`); a duplicate names
/// the key and where it sits (`$.a.b`).
pub fn parse_strict(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Strict { path: "$" }.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// One value, at `path` (for the message).
struct Strict<'p> {
    path: &'p str,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = format!("{}[{}]", self.path, items.len());
            match seq.next_element_seed(Strict { path: &path })? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = format!("{}.{key}", self.path);
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "the key {key:?} is given twice (at {path}); give each key once"
                )));
            }
            let value = map.next_value_seed(Strict { path: &path })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_what_serde_json_parses() {
        let text = r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "u": 18446744073709551615}"#;
        assert_eq!(
            parse_strict(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }

    #[test]
    fn refuses_a_key_given_twice_at_any_depth() {
        let err = parse_strict(r#"{"PROMPT": "a", "PROMPT": "b"}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("\"PROMPT\" is given twice (at $.PROMPT)"),
            "{err}"
        );
        let err = parse_strict(r#"{"s": [{"x": 1, "x": 1}]}"#).unwrap_err();
        assert!(err.to_string().contains("at $.s[0].x"), "{err}");
        // The same key in two objects is fine.
        assert_eq!(
            parse_strict(r#"[{"x": 1}, {"x": 2}]"#).unwrap(),
            json!([{"x": 1}, {"x": 2}])
        );
    }

    #[test]
    fn refuses_trailing_text() {
        assert!(parse_strict(r#"{"a": 1} {"a": 2}"#).is_err());
    }
}
