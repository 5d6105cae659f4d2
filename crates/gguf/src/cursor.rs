//! A bounds-checked little-endian cursor over the header bytes.

use crate::{Error, Result};

/// Reads little-endian scalars and GGUF strings, tracking the absolute offset;
/// every read checks the remaining length first.
#[derive(Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Current absolute offset.
    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the current offset.
    pub(crate) fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// Takes the next `n` bytes.
    pub(crate) fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let available = self.remaining();
        if n > available {
            return Err(Error::Truncated {
                offset: self.pos(),
                what,
                needed: n,
                available,
            });
        }
        // `n <= remaining <= usize::MAX`, so the cast and the addition are exact.
        let n = n as usize;
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: `u64` length then that many UTF-8 bytes. The length is
    /// checked against the remaining bytes before anything is allocated.
    pub(crate) fn string(&mut self, what: &'static str) -> Result<String> {
        self.str(what).map(str::to_owned)
    }

    /// A GGUF string borrowed from the buffer (see [`Cursor::string`]).
    pub(crate) fn str(&mut self, what: &'static str) -> Result<&'a str> {
        let offset = self.pos();
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|_| Error::InvalidUtf8 { offset })
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit in
    /// the remaining bytes; called before any allocation sized by `count`.
    pub(crate) fn check_count(
        &self,
        count: u64,
        min_size: u64,
        what: &'static str,
        count_offset: u64,
    ) -> Result<usize> {
        let available = self.remaining();
        let fits = count
            .checked_mul(min_size)
            .is_some_and(|bytes| bytes <= available);
        if !fits {
            return Err(Error::CountTooLarge {
                what,
                count,
                offset: count_offset,
                available,
            });
        }
        // `count * min_size <= remaining <= usize::MAX` and `min_size >= 1`.
        Ok(count as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_bounds() {
        let buf = [1u8, 0, 2, 0, 0, 0, 3];
        let mut c = Cursor::new(&buf);
        assert_eq!(c.u16("a").unwrap(), 1);
        assert_eq!(c.u32("b").unwrap(), 2);
        assert_eq!(c.pos(), 6);
        assert!(matches!(
            c.u16("c"),
            Err(Error::Truncated {
                offset: 6,
                needed: 2,
                available: 1,
                ..
            })
        ));
        assert_eq!(c.u8("d").unwrap(), 3);
        assert!(c.check_count(1, 1, "x", 0).is_err());
        assert!(Cursor::new(&buf).check_count(u64::MAX, 2, "x", 0).is_err());
        assert_eq!(Cursor::new(&buf).check_count(7, 1, "x", 0).unwrap(), 7);
    }

    #[test]
    fn string_checks() {
        let mut buf = 3u64.to_le_bytes().to_vec();
        buf.extend_from_slice(b"abc");
        assert_eq!(Cursor::new(&buf).string("s").unwrap(), "abc");
        let mut bad = u64::MAX.to_le_bytes().to_vec();
        bad.extend_from_slice(b"abc");
        assert!(matches!(
            Cursor::new(&bad).string("s"),
            Err(Error::Truncated { offset: 8, .. })
        ));
        let mut utf = 1u64.to_le_bytes().to_vec();
        utf.push(0xff);
        assert!(matches!(
            Cursor::new(&utf).string("s"),
            Err(Error::InvalidUtf8 { offset: 0 })
        ));
    }
}
