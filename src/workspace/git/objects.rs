//! git objects as bytes: ids in hex and padded to 32 bytes, a pack index's ids, and the
//! check that the blobs a diff reads hash to their ids ([`check_batch`]): the objects
//! are the repository's, and the agent may rewrite them in place.

/// The repository's object format: which hash names its objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ObjectFormat {
    Sha1,
    Sha256,
}

impl ObjectFormat {
    /// The format `git rev-parse --show-object-format` names.
    pub(super) fn named(name: &str) -> Option<ObjectFormat> {
        match name {
            "sha1" => Some(ObjectFormat::Sha1),
            "sha256" => Some(ObjectFormat::Sha256),
            _ => None,
        }
    }

    /// Bytes of an object id.
    pub(super) fn hash_len(self) -> usize {
        match self {
            ObjectFormat::Sha1 => 20,
            ObjectFormat::Sha256 => 32,
        }
    }
}

/// An object id zero-padded to 32 bytes.
pub(super) fn padded(oid: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let len = oid.len().min(32);
    out[..len].copy_from_slice(&oid[..len]);
    out
}

/// The object ids a pack index (version 2) lists, zero-padded to 32 bytes; none when it
/// is not one.
pub(super) fn pack_index_ids(idx: &[u8], hash_len: usize) -> Vec<[u8; 32]> {
    const MAGIC: &[u8] = b"\xfftOc";
    if idx.get(..4) != Some(MAGIC) || idx.get(4..8) != Some(&[0, 0, 0, 2][..]) {
        return Vec::new();
    }
    // The last of the 256 fan-out counts is the number of objects.
    let Some(count) = idx
        .get(8 + 255 * 4..8 + 256 * 4)
        .and_then(|c| c.try_into().ok())
        .map(u32::from_be_bytes)
    else {
        return Vec::new();
    };
    let ids_at = 8 + 256 * 4;
    let Some(ids) = usize::try_from(count)
        .ok()
        .and_then(|n| n.checked_mul(hash_len))
        .and_then(|len| idx.get(ids_at..ids_at + len))
    else {
        return Vec::new();
    };
    ids.chunks(hash_len).map(padded).collect()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// An object id of `hash_len` bytes from its hex, zero-padded to 32 bytes.
pub(super) fn unhex(text: &[u8], hash_len: usize) -> Option<[u8; 32]> {
    if text.len() != 2 * hash_len || hash_len > 32 {
        return None;
    }
    let mut oid = [0u8; 32];
    for (i, pair) in text.chunks(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        oid[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(oid)
}

/// git's hash of an object: SHA-1 (`hash_len` 20) or SHA-256 (32) over `KIND SIZE`, NUL,
/// the content, fed in pieces.
pub(super) enum ObjectHasher {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl ObjectHasher {
    pub(super) fn new(hash_len: usize, kind: &str, size: u64) -> Option<ObjectHasher> {
        use sha1::Digest;
        let mut hasher = match hash_len {
            20 => ObjectHasher::Sha1(sha1::Sha1::new()),
            32 => ObjectHasher::Sha256(sha2::Sha256::new()),
            _ => return None,
        };
        hasher.update(format!("{kind} {size}\0").as_bytes());
        Some(hasher)
    }

    fn update(&mut self, bytes: &[u8]) {
        use sha1::Digest;
        match self {
            ObjectHasher::Sha1(h) => h.update(bytes),
            ObjectHasher::Sha256(h) => h.update(bytes),
        }
    }

    /// The id, zero-padded to 32 bytes.
    pub(super) fn finish(self) -> [u8; 32] {
        use sha1::Digest;
        let mut oid = [0u8; 32];
        match self {
            ObjectHasher::Sha1(h) => oid[..20].copy_from_slice(&h.finalize()),
            ObjectHasher::Sha256(h) => oid.copy_from_slice(&h.finalize()),
        }
        oid
    }
}

/// Reads `git cat-file --batch` output: for each object asked for, its id as asked and
/// whether git gave a blob whose `blob SIZE\0CONTENT` hashes to that id (a missing,
/// ambiguous or other-typed object is not). The content streams through the hash, never
/// held whole.
pub(super) fn check_batch(
    mut out: impl std::io::BufRead,
    hash_len: usize,
) -> std::io::Result<Vec<([u8; 32], bool)>> {
    let bad = || std::io::Error::from(std::io::ErrorKind::InvalidData);
    let mut verdicts = Vec::new();
    let mut line = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        line.clear();
        if out.read_until(b'\n', &mut line)? == 0 {
            return Ok(verdicts);
        }
        let header = line.strip_suffix(b"\n").ok_or_else(bad)?;
        let mut parts = header.split(|b| *b == b' ');
        let asked = parts
            .next()
            .and_then(|o| unhex(o, hash_len))
            .ok_or_else(bad)?;
        let kind = parts
            .next()
            .and_then(|k| std::str::from_utf8(k).ok())
            .ok_or_else(bad)?;
        let Some(size) = parts.next() else {
            // `OID missing`, `OID ambiguous`: no content follows.
            verdicts.push((asked, false));
            continue;
        };
        let size: u64 = std::str::from_utf8(size)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let mut hasher = ObjectHasher::new(hash_len, kind, size).ok_or_else(bad)?;
        let mut left = size;
        while left > 0 {
            let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
            let n = out.read(&mut buf[..want])?;
            if n == 0 {
                return Err(bad());
            }
            hasher.update(&buf[..n]);
            left -= n as u64;
        }
        let mut newline = [0u8; 1];
        out.read_exact(&mut newline)?;
        verdicts.push((asked, kind == "blob" && hasher.finish() == asked));
    }
}
