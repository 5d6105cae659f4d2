//! Character classes used by the hand-written pre-tokenizers, the GPT-2
//! byte-to-unicode table, and a small fast hasher for the merge tables.

use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

/// Bitmap over all code points: bit set when the code point is `\p{L}`.
fn letter_bits() -> &'static [u64] {
    static BITS: OnceLock<Vec<u64>> = OnceLock::new();
    BITS.get_or_init(|| {
        let mut bits = vec![0u64; 0x110000 / 64];
        let mut all = String::with_capacity(0x110000 * 4);
        for cp in 0..0x110000u32 {
            if let Some(c) = char::from_u32(cp) {
                all.push(c);
            }
        }
        // The pattern is a constant; compiling it cannot fail.
        if let Ok(re) = regex::Regex::new(r"\p{L}+") {
            for m in re.find_iter(&all) {
                for c in m.as_str().chars() {
                    let cp = c as usize;
                    bits[cp / 64] |= 1 << (cp % 64);
                }
            }
        }
        bits
    })
}

/// `\p{L}`.
pub fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    let cp = c as usize;
    letter_bits()[cp / 64] & (1 << (cp % 64)) != 0
}

/// `\p{N}` (general categories Nd, Nl, No).
pub fn is_number(c: char) -> bool {
    c.is_numeric()
}

/// `\s` (the Unicode `White_Space` property).
pub fn is_whitespace(c: char) -> bool {
    c.is_whitespace()
}

/// GPT-2's reversible map from bytes to printable characters.
pub fn byte_to_char_table() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut n = 0u32;
        for b in 0..256u32 {
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            let cp = if printable {
                b
            } else {
                n += 1;
                255 + n
            };
            table[b as usize] = char::from_u32(cp).unwrap_or('\u{FFFD}');
        }
        table
    })
}

/// The inverse of [`byte_to_char_table`]: the byte a byte-level character stands for.
pub fn char_to_byte(c: char) -> Option<u8> {
    static INV: OnceLock<[Option<u8>; 0x144]> = OnceLock::new();
    let inv = INV.get_or_init(|| {
        let mut inv = [None; 0x144];
        for (b, &ch) in byte_to_char_table().iter().enumerate() {
            if let (Some(slot), Ok(b)) = (inv.get_mut(ch as usize), u8::try_from(b)) {
                *slot = Some(b);
            }
        }
        inv
    });
    inv.get(c as usize).copied().flatten()
}

/// Encodes raw bytes as GPT-2 byte-level characters.
pub fn byte_encode(bytes: &[u8], out: &mut String) {
    let table = byte_to_char_table();
    for &b in bytes {
        out.push(table[b as usize]);
    }
}

/// FxHash (rustc's hasher): fast for short keys; not DoS-resistant, which is
/// fine for tables built from the model's own vocabulary.
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i.into());
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i.into());
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` using [`FxHasher`].
pub type FxHashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert!(is_letter('a') && is_letter('é') && is_letter('中') && is_letter('ب'));
        assert!(!is_letter('1') && !is_letter(' ') && !is_letter('\u{301}') && !is_letter('😀'));
        assert!(is_number('٣') && is_number('½') && !is_number('a'));
        assert!(is_whitespace('\u{3000}') && is_whitespace('\t') && !is_whitespace('x'));
    }

    #[test]
    fn byte_level_roundtrip() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
    }
}
