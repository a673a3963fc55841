//! Pieces shared by the two readings of an event line ([`super::decode`]'s general one and
//! [`super::assistant`]'s borrowing one) where both must take a value the same lenient
//! way: a message's content is read block by block when it is an array and is no blocks
//! otherwise, never an error. Kept apart so that both readings agree by construction.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The `Visitor` methods for a JSON boolean, number or null, each answering `$value`:
/// the lenient readings keep strings, objects and arrays (or check them), and take every
/// other value as nothing.
macro_rules! other_scalars_are {
    ($value:expr) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}
pub(super) use other_scalars_are;

/// An array read element by element as `T` (an element that does not fit fails the
/// whole value); any other JSON value is an empty list.
pub(super) struct ArrayOrNothing<T>(pub(super) Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ArrayOrNothing<T> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ArrayOrNothingVisitor(PhantomData))
    }
}

struct ArrayOrNothingVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ArrayOrNothingVisitor<T> {
    type Value = ArrayOrNothing<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("message content")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<T>()? {
            items.push(item);
        }
        Ok(ArrayOrNothing(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ArrayOrNothing(Vec::new()))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ArrayOrNothing(Vec::new()))
    }

    other_scalars_are!(ArrayOrNothing(Vec::new()));
}
