//! A reader of the little-endian binary formats of coder's own cache files (the change
//! ledger's scan cache, the sandbox scan's kept listings). Every read fails (`None`) on
//! input that is short or out of range, so a damaged or foreign file is simply not used.

/// Reads `bytes` from the front.
pub struct LeReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> LeReader<'a> {
    pub fn new(bytes: &'a [u8]) -> LeReader<'a> {
        LeReader { bytes, at: 0 }
    }

    /// How many bytes were read so far.
    pub fn position(&self) -> usize {
        self.at
    }

    /// How many bytes are left.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_order_and_refuses_what_is_short() {
        let bytes = [7u8, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut r = LeReader::new(&bytes);
        assert_eq!(r.u8(), Some(7));
        assert_eq!(r.u32(), Some(1));
        assert_eq!(r.u64(), Some(2));
        assert_eq!(r.position(), 13);
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.u32(), None);
        assert_eq!(r.take(usize::MAX), None);
        assert_eq!(r.u8(), Some(9));
        assert_eq!(r.remaining(), 0);
    }
}
