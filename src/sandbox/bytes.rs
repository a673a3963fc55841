//! Paths as bytes: the serde form of the policy's paths, and short renderings for messages.
//!
//! A Linux file name is any sequence of bytes but `/` and NUL, and a workspace may hold
//! names that are not UTF-8 (planted on purpose, or from another system). The policy crosses
//! a process boundary as JSON, and serde's own `PathBuf` form refuses such names; this
//! module writes a UTF-8 path as a plain string (readable in logs) and any other as
//! `{"bytes": [...]}`, so a strange name is masked like any other instead of failing the
//! run.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Repr {
    Text(String),
    Bytes { bytes: Vec<u8> },
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
        match self {
            Repr::Text(text) => PathBuf::from(text),
            Repr::Bytes { bytes } => PathBuf::from(OsString::from_vec(bytes)),
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

    #[test]
    fn long_paths_are_cut_in_the_middle() {
        let long = PathBuf::from("/a".repeat(400));
        let s = short(&long);
        assert!(s.len() < 300 && s.contains("characters"), "{s}");
        assert_eq!(short(Path::new("/x/y")), "/x/y");
    }
}
