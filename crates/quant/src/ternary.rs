//! The ternary formats TQ1_0 (base-3 packed, 1.69 bits) and TQ2_0 (2 bits):
//! dequantizers and reference quantizers bit-exact with ggml.

use crate::float::f32_to_f16;
use crate::kquants::QK_K;
use crate::util::{c_round_i32, le_f16, put_u16};

const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];

/// One base-3 digit: the top trit of `q * 3^n` seen as a fixed-point fraction.
#[inline]
fn trit(q: u8, n: usize) -> f32 {
    let q = q.wrapping_mul(POW3[n]);
    let xi = ((q as u16 * 3) >> 8) as i16;
    (xi - 1) as f32
}

/// TQ1_0 (54 bytes): qs[48] @0 (5 trits/byte), qh[4] @48 (4 trits/byte), d @52.
pub(crate) fn dequantize_tq1_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(54).zip(dst.chunks_exact_mut(QK_K)) {
        let d = le_f16(b, 52);
        let mut out = 0;
        for (start, width) in [(0usize, 32usize), (32, 16)] {
            for n in 0..5 {
                for &q in &b[start..start + width] {
                    y[out] = trit(q, n) * d;
                    out += 1;
                }
            }
        }
        for n in 0..4 {
            for &q in &b[48..52] {
                y[out] = trit(q, n) * d;
                out += 1;
            }
        }
    }
}

/// TQ2_0 (66 bytes): qs[64] @0 (4 values/byte), d @64.
pub(crate) fn dequantize_tq2_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(66).zip(dst.chunks_exact_mut(QK_K)) {
        let d = le_f16(b, 64);
        let mut out = 0;
        for j in (0..64).step_by(32) {
            for l in 0..4 {
                for &q in &b[j..j + 32] {
                    let q = ((q >> (2 * l)) & 3) as i32;
                    y[out] = (q - 1) as f32 * d;
                    out += 1;
                }
            }
        }
    }
}

/// `amax` and the inverse scale shared by both ternary quantizers.
fn scale(x: &[f32]) -> (f32, f32) {
    let amax = x
        .iter()
        .fold(0.0f32, |a, &v| crate::legacy::c_fmax(a, v.abs()));
    let id = if amax != 0.0 { 1.0 / amax } else { 0.0 };
    (amax, id)
}

/// `lroundf(x * id) + 1`: -1, 0, 1 -> 0, 1, 2 (as C's int, truncated by the caller).
#[inline]
fn tern(x: f32, id: f32) -> i32 {
    c_round_i32(x * id).wrapping_add(1)
}

/// Packs `count` ternary digits (stride `stride`) into one byte as TQ1_0 does.
fn pack5(x: &[f32], id: f32, m: usize, stride: usize, count: usize) -> u8 {
    let mut q: u8 = 0;
    for n in 0..count {
        q = q
            .wrapping_mul(3)
            .wrapping_add(tern(x[m + n * stride], id) as u8);
    }
    q
}

/// C's `((uint16_t)q * 256 + (243 - 1)) / 243` stored back into a byte.
#[inline]
fn ceil_div_243(q: u8) -> u8 {
    (q as u32 * 256).div_ceil(243) as u8
}

/// `quantize_row_tq1_0_ref`.
pub(crate) fn quantize_tq1_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(54)) {
        let (d, id) = scale(x);
        put_u16(b, 52, f32_to_f16(d));
        for (m, o) in b[..32].iter_mut().enumerate() {
            *o = ceil_div_243(pack5(&x[..160], id, m, 32, 5));
        }
        for (m, o) in b[32..48].iter_mut().enumerate() {
            *o = ceil_div_243(pack5(&x[160..240], id, m, 16, 5));
        }
        for (j, o) in b[48..52].iter_mut().enumerate() {
            *o = ceil_div_243(pack5(&x[240..256], id, j, 4, 4).wrapping_mul(3));
        }
    }
}

/// `quantize_row_tq2_0_ref`.
pub(crate) fn quantize_tq2_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(66)) {
        let (d, id) = scale(x);
        put_u16(b, 64, f32_to_f16(d));
        for j in (0..64).step_by(32) {
            let xs = &x[4 * j..4 * j + 128];
            for m in 0..32 {
                let mut q: u8 = 0;
                for n in 0..4 {
                    q = q.wrapping_add(((tern(xs[m + n * 32], id) & 3) as u8) << (2 * n));
                }
                b[j + m] = q;
            }
        }
    }
}
