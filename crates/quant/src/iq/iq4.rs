//! IQ4_NL and IQ4_XS: 4-bit indices into a non-linear code book, 4.5 / 4.25 bpw.

use super::grids::KVALUES_IQ4NL;
use super::{f16_at, u16_at, QK_K};

/// Elements per IQ4_NL block (ggml's `QK4_NL`).
pub(super) const QK4_NL: usize = 32;
/// Bytes of one IQ4_NL block: `d: f16, qs: [u8; 16]`.
pub(super) const IQ4_NL_BYTES: usize = 2 + QK4_NL / 2;
/// Bytes of one IQ4_XS block: `d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128]`.
pub(super) const IQ4_XS_BYTES: usize = 4 + QK_K / 64 + QK_K / 2;

/// Code book value of the nibble `q & 0xf`.
fn kv(q: u8) -> f32 {
    f32::from(KVALUES_IQ4NL[usize::from(q & 0xf)])
}

/// Writes 32 outputs from 16 packed bytes: low nibbles first, then high.
fn put32(y: &mut [f32], d: f32, qs: &[u8]) {
    let (lo, hi) = y.split_at_mut(16);
    for ((lo, hi), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
        *lo = d * kv(q);
        *hi = d * kv(q >> 4);
    }
}

/// ggml `dequantize_row_iq4_nl` for one block.
pub(super) fn iq4_nl(x: &[u8; IQ4_NL_BYTES], y: &mut [f32; QK4_NL]) {
    put32(y, f16_at(x, 0), &x[2..]);
}

/// ggml `dequantize_row_iq4_xs` for one block.
pub(super) fn iq4_xs(x: &[u8; IQ4_XS_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    let scales_h = u16_at(x, 2);
    let scales_l = &x[4..4 + QK_K / 64];
    let qs = &x[4 + QK_K / 64..];
    for (ib, (y, qs)) in y.chunks_exact_mut(32).zip(qs.chunks_exact(16)).enumerate() {
        let lo = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
        let hi = ((scales_h >> (2 * ib)) & 3) << 4;
        let ls = i16::from(lo) | hi as i16;
        put32(y, d * f32::from(ls - 32), qs);
    }
}
