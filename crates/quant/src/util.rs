//! Small helpers shared by the block formats: little-endian field access and
//! the exact integer conversions ggml's reference C code performs.

use crate::float::f16_to_f32;

/// Reads a little-endian `u16` at `off`. The caller guarantees the block is
/// long enough (blocks are cut with `chunks_exact` of the type's block size).
#[inline]
pub(crate) fn le_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Reads a little-endian `u32` at `off`.
#[inline]
pub(crate) fn le_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Reads a little-endian f16 at `off` and widens it to f32.
#[inline]
pub(crate) fn le_f16(b: &[u8], off: usize) -> f32 {
    f16_to_f32(le_u16(b, off))
}

/// Writes a little-endian `u16` at `off`.
#[inline]
pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// ggml's `nearest_int`: round-to-nearest-even through the 1.5 * 2^23 magic
/// constant. Exact for |x| <= 4194303; beyond that it reproduces the C bit
/// arithmetic (garbage in, the same garbage out).
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let val = x + 12_582_912.0_f32;
    let i = val.to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// C's float -> int conversion as an x86-64 build performs it (`cvttss2si`):
/// truncation toward zero, and `i32::MIN` for NaN or out-of-range values.
#[inline]
pub(crate) fn c_trunc_i32(x: f32) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// C's `(int8_t)(float)` as compiled on x86-64: convert to i32, keep the low byte.
#[inline]
pub(crate) fn c_f32_to_i8(x: f32) -> i8 {
    c_trunc_i32(x) as i8
}

/// C's `(uint8_t)(float)` as compiled on x86-64: convert to i32, keep the low byte.
#[inline]
pub(crate) fn c_f32_to_u8(x: f32) -> u8 {
    c_trunc_i32(x) as u8
}

/// C's `roundf`, then conversion to an integer (`lroundf` / `(int8_t)roundf`).
#[inline]
pub(crate) fn c_round_i32(x: f32) -> i32 {
    c_trunc_i32(x.round())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-3.7), -4);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
    }

    #[test]
    fn c_conversions() {
        assert_eq!(c_f32_to_i8(8.9), 8);
        assert_eq!(c_f32_to_i8(-0.9), 0);
        assert_eq!(c_f32_to_i8(f32::NAN), 0);
        assert_eq!(c_trunc_i32(f32::INFINITY), i32::MIN);
        assert_eq!(c_round_i32(2.5), 3);
        assert_eq!(c_round_i32(-2.5), -3);
    }
}
