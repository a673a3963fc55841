//! Paths as bytes: the serde form of the policy's paths, and short renderings for messages.
//!
//! A Linux file name is any sequence of bytes but `/` and NUL, and a workspace may hold
//! names that are not UTF-8 (planted on purpose, or from another system). The policy crosses
//! a process boundary as JSON, and serde's own `PathBuf` form refuses such names; this
//! module writes a UTF-8 path as a plain string (readable in logs) and any other as
//! `{"bytes": [...]}`, so a strange name is masked like any other instead of failing the
//! run. The helper spec's arguments and environment use the same form ([`os_vec`],
//! [`os_pairs`]): serde's own form for an `OsString` is an array of numbers (four to five
//! bytes of JSON per byte), which made the spec of a plain run 22 KB instead of 6, all of
//! it written, read and parsed on the run's serial path.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Repr {
    Text(String),
    Bytes { bytes: Vec<u8> },
}

/// The serialising side of [`Repr`], borrowing.
#[derive(Serialize)]
#[serde(untagged)]
enum ReprRef<'a> {
    Text(&'a str),
    Bytes { bytes: &'a [u8] },
}

impl<'a> ReprRef<'a> {
    fn of_os(text: &'a OsStr) -> ReprRef<'a> {
        match text.to_str() {
            Some(text) => ReprRef::Text(text),
            None => ReprRef::Bytes {
                bytes: text.as_bytes(),
            },
        }
    }
}

impl Repr {
    fn of(path: &Path) -> Repr {
        match path.to_str() {
            Some(text) => Repr::Text(text.to_owned()),
            None => Repr::Bytes {
                bytes: path.as_os_str().as_bytes().to_vec(),
            },
        }
    }

    fn into_path(self) -> PathBuf {
        PathBuf::from(self.into_os_string())
    }

    fn into_os_string(self) -> OsString {
        match self {
            Repr::Text(text) => OsString::from(text),
            Repr::Bytes { bytes } => OsString::from_vec(bytes),
        }
    }
}

pub(crate) fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    Repr::of(path).serialize(s)
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    Repr::deserialize(d).map(Repr::into_path)
}

/// The same for `Option<PathBuf>`.
pub(crate) mod option {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        path: &Option<PathBuf>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        path.as_deref().map(Repr::of).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<PathBuf>, D::Error> {
        Option::<Repr>::deserialize(d).map(|r| r.map(Repr::into_path))
    }
}

/// The same for `Vec<PathBuf>`.
pub(crate) mod vec {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        paths
            .iter()
            .map(|p| Repr::of(p))
            .collect::<Vec<_>>()
            .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        Vec::<Repr>::deserialize(d).map(|v| v.into_iter().map(Repr::into_path).collect())
    }
}

/// The same for `Vec<OsString>` (the helper spec's arguments).
pub(crate) mod os_vec {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(items: &[OsString], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(items.iter().map(|item| ReprRef::of_os(item)))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<OsString>, D::Error> {
        Vec::<Repr>::deserialize(d).map(|v| v.into_iter().map(Repr::into_os_string).collect())
    }
}

/// The same for `Option<Vec<(OsString, OsString)>>` (the helper spec's environment).
pub(crate) mod os_pairs {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        pairs: &Option<Vec<(OsString, OsString)>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match pairs {
            Some(pairs) => s.serialize_some(&Pairs(pairs)),
            None => s.serialize_none(),
        }
    }

    struct Pairs<'a>(&'a [(OsString, OsString)]);

    impl Serialize for Pairs<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(
                self.0
                    .iter()
                    .map(|(k, v)| (ReprRef::of_os(k), ReprRef::of_os(v))),
            )
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<(OsString, OsString)>>, D::Error> {
        Option::<Vec<(Repr, Repr)>>::deserialize(d).map(|v| {
            v.map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.into_os_string(), v.into_os_string()))
                    .collect()
            })
        })
    }
}

/// `path` for a message: lossy, and cut in the middle when very long (a planted tree can
/// make a path of many kilobytes), so the start and the end both stay visible.
pub(crate) fn short(path: &Path) -> String {
    const KEEP: usize = 120;
    let text = path.to_string_lossy();
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 2 * KEEP {
        return text.into_owned();
    }
    let head: String = chars[..KEEP].iter().collect();
    let tail: String = chars[chars.len() - KEEP..].iter().collect();
    format!("{head}…({} characters)…{tail}", chars.len() - 2 * KEEP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Holder {
        #[serde(with = "super")]
        p: PathBuf,
        #[serde(with = "super::option")]
        q: Option<PathBuf>,
    }

    #[test]
    fn utf8_is_text_and_other_bytes_round_trip() {
        let odd = PathBuf::from(OsString::from_vec(b"/ws/a\xff.env".to_vec()));
        let h = Holder {
            p: PathBuf::from("/ws/x"),
            q: Some(odd),
        };
        let json = serde_json::to_string(&h).unwrap();
        assert!(json.contains("\"/ws/x\""), "{json}");
        assert!(json.contains("\"bytes\""), "{json}");
        assert_eq!(serde_json::from_str::<Holder>(&json).unwrap(), h);
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Spec {
        #[serde(with = "super::os_vec")]
        args: Vec<OsString>,
        #[serde(default, with = "super::os_pairs")]
        env: Option<Vec<(OsString, OsString)>>,
    }

    #[test]
    fn arguments_and_environment_are_text_unless_not_utf8() {
        let odd = OsString::from_vec(b"a\xffb".to_vec());
        let spec = Spec {
            args: vec![OsString::from("-p"), odd.clone()],
            env: Some(vec![
                (OsString::from("HOME"), OsString::from("/home/u")),
                (OsString::from("X"), odd),
            ]),
        };
        let json = serde_json::to_string(&spec).unwrap();
        assert!(
            json.starts_with(r#"{"args":["-p",{"bytes":[97,255,98]}]"#),
            "{json}"
        );
        assert!(json.contains(r#"["HOME","/home/u"]"#), "{json}");
        assert_eq!(serde_json::from_str::<Spec>(&json).unwrap(), spec);
        let none = Spec {
            args: Vec::new(),
            env: None,
        };
        let json = serde_json::to_string(&none).unwrap();
        assert_eq!(serde_json::from_str::<Spec>(&json).unwrap(), none);
        assert_eq!(
            serde_json::from_str::<Spec>(r#"{"args":[]}"#).unwrap(),
            none
        );
    }

    #[test]
    fn long_paths_are_cut_in_the_middle() {
        let long = PathBuf::from("/a".repeat(400));
        let s = short(&long);
        assert!(s.len() < 300 && s.contains("characters"), "{s}");
        assert_eq!(short(Path::new("/x/y")), "/x/y");
    }
}
