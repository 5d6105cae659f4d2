//! The legacy 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1:
//! dequantizers and reference quantizers, bit-exact with ggml's
//! `dequantize_row_*` / `quantize_row_*_ref`.

use crate::float::f32_to_f16;
use crate::util::{c_f32_to_i8, c_f32_to_u8, c_round_i32, le_f16, le_u32, put_u16};

/// Elements per legacy block.
pub const QK: usize = 32;

/// One Q8_0 block: f16 scale bits and 32 signed 8-bit quants (34 bytes on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale `d` as f16 bits; element `j` is `qs[j] * d`.
    pub d: u16,
    /// The quants.
    pub qs: [i8; QK],
}

impl BlockQ8_0 {
    /// Bytes of one block in ggml layout.
    pub const BYTES: usize = 34;

    /// An all-zero block.
    pub const ZERO: Self = Self { d: 0, qs: [0; QK] };

    /// Parses a block from its ggml byte layout.
    pub fn from_bytes(b: &[u8; Self::BYTES]) -> Self {
        let mut qs = [0i8; QK];
        for (q, &v) in qs.iter_mut().zip(&b[2..]) {
            *q = v as i8;
        }
        Self {
            d: u16::from_le_bytes([b[0], b[1]]),
            qs,
        }
    }

    /// Serializes the block in ggml byte layout.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        for (o, &q) in b[2..].iter_mut().zip(&self.qs) {
            *o = q as u8;
        }
        b
    }

    /// `quantize_row_q8_0_ref` for one block of 32 values.
    pub fn quantize(x: &[f32; QK]) -> Self {
        let amax = x.iter().fold(0.0f32, |a, &v| c_fmax(a, v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0i8; QK];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = c_round_i32(v * id) as i8;
        }
        Self {
            d: f32_to_f16(d),
            qs,
        }
    }
}

/// C's `MAX(a, b)` macro: `a > b ? a : b` (NaN handling differs from `f32::max`).
#[inline]
pub(crate) fn c_fmax(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// Q4_0: `d` f16, 16 bytes of nibbles; `y = (q - 8) * d`.
pub(crate) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK)) {
        let d = le_f16(b, 0);
        for j in 0..QK / 2 {
            let q = b[2 + j];
            y[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// Q4_1: `d`, `m` f16, 16 bytes of nibbles; `y = q * d + m`.
pub(crate) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(20).zip(dst.chunks_exact_mut(QK)) {
        let d = le_f16(b, 0);
        let m = le_f16(b, 2);
        for j in 0..QK / 2 {
            let q = b[4 + j];
            y[j] = (q & 0x0F) as f32 * d + m;
            y[j + QK / 2] = (q >> 4) as f32 * d + m;
        }
    }
}

/// Q5_0: `d` f16, 32 high bits, 16 bytes of nibbles; `y = (q - 16) * d`.
pub(crate) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(22).zip(dst.chunks_exact_mut(QK)) {
        let d = le_f16(b, 0);
        let qh = le_u32(b, 2);
        for j in 0..QK / 2 {
            let xh0 = ((qh >> j) << 4) & 0x10;
            let xh1 = (qh >> (j + 12)) & 0x10;
            let q = b[6 + j] as u32;
            y[j] = (((q & 0x0F) | xh0) as i32 - 16) as f32 * d;
            y[j + QK / 2] = (((q >> 4) | xh1) as i32 - 16) as f32 * d;
        }
    }
}

/// Q5_1: `d`, `m` f16, 32 high bits, 16 bytes of nibbles; `y = q * d + m`.
pub(crate) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(24).zip(dst.chunks_exact_mut(QK)) {
        let d = le_f16(b, 0);
        let m = le_f16(b, 2);
        let qh = le_u32(b, 4);
        for j in 0..QK / 2 {
            let xh0 = ((qh >> j) << 4) & 0x10;
            let xh1 = (qh >> (j + 12)) & 0x10;
            let q = b[8 + j] as u32;
            y[j] = ((q & 0x0F) | xh0) as f32 * d + m;
            y[j + QK / 2] = ((q >> 4) | xh1) as f32 * d + m;
        }
    }
}

/// Q8_0: `d` f16, 32 int8; `y = q * d`.
pub(crate) fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(34).zip(dst.chunks_exact_mut(QK)) {
        let d = le_f16(b, 0);
        for (y, &q) in y.iter_mut().zip(&b[2..]) {
            *y = (q as i8) as f32 * d;
        }
    }
}

/// Q8_1: `d`, `s` f16, 32 int8; `y = q * d` (`s` is the precomputed sum
/// `d * sum(q)`; ggml has no `dequantize_row_q8_1`, this is the obvious one).
pub(crate) fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(36).zip(dst.chunks_exact_mut(QK)) {
        let d = le_f16(b, 0);
        for (y, &q) in y.iter_mut().zip(&b[4..]) {
            *y = (q as i8) as f32 * d;
        }
    }
}

/// Signed value of largest magnitude (first one wins on ties), as the
/// `amax`/`max` loops of the symmetric ggml quantizers compute it.
#[inline]
pub(crate) fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// `min`/`max` loop of the asymmetric quantizers (Q4_1, Q5_1).
#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `quantize_row_q4_0_ref`.
pub(crate) fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(18)) {
        let (_, max) = signed_absmax(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_u16(b, 0, f32_to_f16(d));
        for j in 0..QK / 2 {
            let xi0 = (c_f32_to_i8(x[j] * id + 8.5) as i32).min(15) as u8;
            let xi1 = (c_f32_to_i8(x[j + QK / 2] * id + 8.5) as i32).min(15) as u8;
            b[2 + j] = xi0 | (xi1 << 4);
        }
    }
}

/// `quantize_row_q4_1_ref`.
pub(crate) fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(20)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_u16(b, 0, f32_to_f16(d));
        put_u16(b, 2, f32_to_f16(min));
        for j in 0..QK / 2 {
            let xi0 = (c_f32_to_i8((x[j] - min) * id + 0.5) as i32).min(15) as u8;
            let xi1 = (c_f32_to_i8((x[j + QK / 2] - min) * id + 0.5) as i32).min(15) as u8;
            b[4 + j] = xi0 | (xi1 << 4);
        }
    }
}

/// `quantize_row_q5_0_ref`.
pub(crate) fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(22)) {
        let (_, max) = signed_absmax(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_u16(b, 0, f32_to_f16(d));
        let mut qh: u32 = 0;
        for j in 0..QK / 2 {
            let xi0 = (c_f32_to_i8(x[j] * id + 16.5) as i32).min(31) as u8;
            let xi1 = (c_f32_to_i8(x[j + QK / 2] * id + 16.5) as i32).min(31) as u8;
            b[6 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
        }
        b[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

/// `quantize_row_q5_1_ref`.
pub(crate) fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(24)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_u16(b, 0, f32_to_f16(d));
        put_u16(b, 2, f32_to_f16(min));
        let mut qh: u32 = 0;
        for j in 0..QK / 2 {
            let xi0 = c_f32_to_u8((x[j] - min) * id + 0.5);
            let xi1 = c_f32_to_u8((x[j + QK / 2] - min) * id + 0.5);
            b[8 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
        }
        b[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

/// `quantize_row_q8_0_ref` into bytes.
pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src
        .chunks_exact(QK)
        .zip(dst.chunks_exact_mut(BlockQ8_0::BYTES))
    {
        let mut xa = [0.0f32; QK];
        xa.copy_from_slice(x);
        b.copy_from_slice(&BlockQ8_0::quantize(&xa).to_bytes());
    }
}

/// `quantize_row_q8_1_ref`.
pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(36)) {
        let amax = x.iter().fold(0.0f32, |a, &v| c_fmax(a, v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_u16(b, 0, f32_to_f16(d));
        let mut sum: i32 = 0;
        for (o, &v) in b[4..].iter_mut().zip(x) {
            let q = c_round_i32(v * id) as i8;
            *o = q as u8;
            sum += q as i32;
        }
        put_u16(b, 2, f32_to_f16(sum as f32 * d));
    }
}
