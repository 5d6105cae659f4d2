//! Compact per-token storage: byte strings packed end to end in one buffer
//! ([`PackedStrs`], [`PackedBytes`]) and an open-addressing text → id index
//! ([`IdIndex`]) that keeps only ids and compares against the packed texts.
//! A 262k-token vocabulary then costs a handful of allocations instead of
//! several per token.

use crate::unicode::FxHasher;
use crate::{Error, Result};
use std::hash::Hasher;
use std::ops::Range;

/// Offsets into a packed buffer: entry `i` spans `offs[i]..offs[i + 1]`.
#[derive(Debug, Clone)]
struct Offsets(Vec<u32>);

impl Offsets {
    fn with_capacity(n: usize) -> Self {
        let mut v = Vec::with_capacity(n.saturating_add(1));
        v.push(0);
        Offsets(v)
    }

    fn len(&self) -> usize {
        self.0.len() - 1
    }

    fn range(&self, i: usize) -> Option<Range<usize>> {
        let start = *self.0.get(i)? as usize;
        let end = *self.0.get(i.checked_add(1)?)? as usize;
        Some(start..end)
    }

    /// Closes the entry that ends at `buf_len` bytes.
    fn seal(&mut self, buf_len: usize) -> Result<()> {
        let end = u32::try_from(buf_len).map_err(|_| Error::VocabTooLarge(buf_len))?;
        self.0.push(end);
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<u32>()
    }
}

impl Default for Offsets {
    fn default() -> Self {
        Offsets::with_capacity(0)
    }
}

/// UTF-8 strings packed into one `String` (the token texts).
#[derive(Debug, Clone, Default)]
pub(crate) struct PackedStrs {
    buf: String,
    offs: Offsets,
}

impl PackedStrs {
    /// Room for `n` strings of `bytes` bytes in all.
    pub fn with_capacity(n: usize, bytes: usize) -> Self {
        PackedStrs {
            buf: String::with_capacity(bytes),
            offs: Offsets::with_capacity(n),
        }
    }

    /// Appends one string.
    pub fn push(&mut self, s: &str) -> Result<()> {
        self.buf.push_str(s);
        self.offs.seal(self.buf.len())
    }

    /// Appends one string built in place by `f` (which only appends).
    pub fn push_with(&mut self, f: impl FnOnce(&mut String)) -> Result<()> {
        f(&mut self.buf);
        self.offs.seal(self.buf.len())
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.offs.len()
    }

    /// Total bytes of all strings.
    pub fn total_len(&self) -> usize {
        self.buf.len()
    }

    /// String `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        self.buf.get(self.offs.range(i)?)
    }

    /// Iterates over all strings in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.offs.0.windows(2).map(|w| {
            // Offsets are pushed after whole `&str`s, so they sit on boundaries.
            self.buf
                .get(w[0] as usize..w[1] as usize)
                .unwrap_or_default()
        })
    }

    /// Drops spare capacity if it is more than an eighth of the text (a
    /// reallocation copies the buffer).
    pub fn shrink_to_fit(&mut self) {
        if self.buf.capacity() - self.buf.len() > self.buf.len() / 8 {
            self.buf.shrink_to_fit();
        }
        self.offs.0.shrink_to_fit();
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.buf.capacity() + self.offs.heap_bytes()
    }
}

/// Byte strings packed into one buffer (the decoded token pieces).
#[derive(Debug, Clone, Default)]
pub(crate) struct PackedBytes {
    buf: Vec<u8>,
    offs: Offsets,
}

impl PackedBytes {
    /// Room for `n` strings of `bytes` bytes in all.
    pub fn with_capacity(n: usize, bytes: usize) -> Self {
        PackedBytes {
            buf: Vec::with_capacity(bytes),
            offs: Offsets::with_capacity(n),
        }
    }

    /// Appends one byte string.
    pub fn push(&mut self, b: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(b);
        self.offs.seal(self.buf.len())
    }

    /// Appends one byte string built in place by `f` (which only appends).
    pub fn push_with(&mut self, f: impl FnOnce(&mut Vec<u8>)) -> Result<()> {
        f(&mut self.buf);
        self.offs.seal(self.buf.len())
    }

    /// Byte string `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        self.buf.get(self.offs.range(i)?)
    }

    /// Drops spare capacity.
    pub fn shrink_to_fit(&mut self) {
        self.buf.shrink_to_fit();
        self.offs.0.shrink_to_fit();
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.buf.capacity() + self.offs.heap_bytes()
    }
}

/// An empty slot of [`IdIndex`].
const EMPTY: u64 = u64::MAX;

/// Open-addressing (linear probing) map from text to id over a
/// [`PackedStrs`]. Each slot holds `hash tag << 32 | id`; the text itself is
/// compared in the packed buffer only when the tag matches. At most half the
/// slots are used.
#[derive(Debug, Clone, Default)]
pub(crate) struct IdIndex {
    slots: Vec<u64>,
    /// `64 - log2(slots.len())`: the slot comes from the hash's top bits.
    shift: u32,
}

fn hash(text: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(text);
    // FxHash's low bits are weak; fold the high half in for the tag.
    let x = h.finish();
    x ^ (x >> 29)
}

/// The slot-tag half of a hash: its low 32 bits (the slot comes from the top
/// bits), moved to the high half of a slot.
fn tag(h: u64) -> u64 {
    h << 32
}

impl IdIndex {
    /// Indexes every non-empty string of `texts`; for duplicate texts the
    /// later id wins (as in llama.cpp and HF `tokenizers`). Empty strings are
    /// never found.
    pub fn build(texts: &PackedStrs) -> Result<Self> {
        let n = texts.len();
        if u32::try_from(n).map_or(true, |n| n == u32::MAX) {
            return Err(Error::VocabTooLarge(n));
        }
        let cap = n
            .saturating_mul(2)
            .max(16)
            .checked_next_power_of_two()
            .ok_or(Error::VocabTooLarge(n))?;
        let mut index = IdIndex {
            slots: vec![EMPTY; cap],
            shift: 64 - cap.trailing_zeros(),
        };
        // Insert in batches: first read every home slot of the batch (the
        // loads are independent, so their cache misses overlap), then insert.
        const BATCH: usize = 64;
        let mut batch = [(0u64, 0u32); BATCH];
        let mut ids = texts.iter().enumerate().filter(|(_, t)| !t.is_empty());
        loop {
            let mut len = 0;
            for (id, text) in ids.by_ref().take(BATCH) {
                batch[len] = (hash(text.as_bytes()), id as u32);
                len += 1;
            }
            let mut touch = 0u64;
            for &(h, _) in &batch[..len] {
                touch ^= index.slots[(h >> index.shift) as usize];
            }
            std::hint::black_box(touch);
            for &(h, id) in &batch[..len] {
                index.insert(texts, h, id);
            }
            if len < BATCH {
                break;
            }
        }
        Ok(index)
    }

    /// Inserts `id`, whose text hashes to `h`.
    fn insert(&mut self, texts: &PackedStrs, h: u64, id: u32) {
        let Some(text) = texts.get(id as usize).map(str::as_bytes) else {
            return;
        };
        let tag = tag(h);
        let mask = self.slots.len() - 1;
        let mut i = (h >> self.shift) as usize;
        loop {
            let slot = self.slots[i];
            if slot == EMPTY {
                self.slots[i] = tag | u64::from(id);
                return;
            }
            if slot & 0xffff_ffff_0000_0000 == tag
                && texts.get(slot as u32 as usize).map(str::as_bytes) == Some(text)
            {
                self.slots[i] = tag | u64::from(id);
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// The id of `text`, if indexed.
    #[inline]
    pub fn get(&self, texts: &PackedStrs, text: &str) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let text = text.as_bytes();
        let h = hash(text);
        let tag = tag(h);
        let mask = self.slots.len() - 1;
        let mut i = (h >> self.shift) as usize;
        loop {
            let slot = self.slots[i];
            if slot == EMPTY {
                return None;
            }
            if slot & 0xffff_ffff_0000_0000 == tag {
                let id = slot as u32;
                if texts.get(id as usize).map(str::as_bytes) == Some(text) {
                    return Some(id);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_round_trip() {
        let mut p = PackedStrs::default();
        for s in ["a", "", "▁héllo", "a"] {
            p.push(s).unwrap();
        }
        assert_eq!(p.len(), 4);
        assert_eq!(p.get(2), Some("▁héllo"));
        assert_eq!(p.get(1), Some(""));
        assert_eq!(p.get(4), None);
        assert_eq!(p.iter().collect::<Vec<_>>(), ["a", "", "▁héllo", "a"]);
        let mut b = PackedBytes::default();
        b.push(b"\xff").unwrap();
        b.push_with(|v| v.extend_from_slice(b"xy")).unwrap();
        assert_eq!(b.get(1), Some(&b"xy"[..]));
        assert_eq!(b.get(2), None);
    }

    #[test]
    fn index_finds_every_text_and_later_duplicate_wins() {
        let mut p = PackedStrs::default();
        let texts: Vec<String> = (0..5000).map(|i| format!("t{i}")).collect();
        for t in &texts {
            p.push(t).unwrap();
        }
        p.push("t7").unwrap();
        p.push("").unwrap();
        let idx = IdIndex::build(&p).unwrap();
        for (i, t) in texts.iter().enumerate() {
            let want = if i == 7 { 5000 } else { i as u32 };
            assert_eq!(idx.get(&p, t), Some(want), "{t}");
        }
        assert_eq!(idx.get(&p, ""), None);
        assert_eq!(idx.get(&p, "t5000"), None);
        assert_eq!(idx.get(&p, "x"), None);
        assert_eq!(IdIndex::default().get(&p, "t1"), None);
    }
}
