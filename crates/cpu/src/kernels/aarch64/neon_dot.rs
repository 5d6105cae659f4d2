//! NEON row dots for Q4_1 and Q5_1 (Q8 activations) and for the
//! float weights F32, F16 and BF16 (f32 activations), after ggml's NEON
//! paths. The integer dots are exact, so only the f32 reduction order
//! differs from the scalar twins; the float dots accumulate with fused
//! multiply-adds in 32 lanes (the scalar twins sum in f64).

use super::super::generic::{self, f16_at};
use super::super::Q8Block;
use super::neon::ld_f32;
use super::neon::{dot16, fifth_bits, ld_i8, ld_u8, rows};
use super::neon_attn_f16::ld_f16x8;
use std::arch::aarch64::*;

/// The i32 lanes of the dot of 32 weights (given as two signed 16-byte
/// halves) with the 32 activation bytes at the start of `q8`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn dot32(lo: int8x16_t, hi: int8x16_t, q8: &[i8]) -> int32x4_t {
    dot16(
        dot16(vdupq_n_s32(0), lo, ld_i8(&q8[..16])),
        hi,
        ld_i8(&q8[16..]),
    )
}

/// Dot of a row of 32-weight blocks with a min (Q4_1, Q5_1): `d * sum(q *
/// y) + m * s` per block, the `m * s` terms summed apart as in ggml.
macro_rules! min_dot {
    ($dot:ident, $bb:expr, $halves:ident) => {
        #[target_feature(enable = "neon")]
        fn $dot(x: &[u8], y: &[Q8Block]) -> f32 {
            let mut acc = vdupq_n_f32(0.0);
            let mut summs = 0.0f32;
            for (xb, yb) in x.chunks_exact($bb).zip(y) {
                let (lo, hi) = $halves(xb);
                let s = dot32(lo, hi, &yb.qs);
                acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), f16_at(xb, 0) * yb.d);
                summs += f16_at(xb, 2) * yb.s;
            }
            vaddvq_f32(acc) + summs
        }
    };
}

/// Q4_1's unsigned nibbles (`[0, 15]`, so also valid as signed bytes).
#[target_feature(enable = "neon")]
#[inline]
fn halves_q4_1(x: &[u8]) -> (int8x16_t, int8x16_t) {
    let v = ld_u8(&x[4..]);
    (
        vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))),
        vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)),
    )
}

/// Q5_1's unsigned 5-bit weights (`[0, 31]`).
#[target_feature(enable = "neon")]
#[inline]
fn halves_q5_1(x: &[u8]) -> (int8x16_t, int8x16_t) {
    let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
    let v = ld_u8(&x[8..]);
    let lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0f)), fifth_bits(qh, 0));
    let hi = vorrq_u8(vshrq_n_u8::<4>(v), fifth_bits(qh, 1));
    (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
}

min_dot!(dot_q4_1, 20, halves_q4_1);
min_dot!(dot_q5_1, 24, halves_q5_1);

/// Dot of `n` weights decoded 8 at a time by `$load` (two f32x4) with f32
/// activations: 8 accumulators over 32 weights, then 8 at a time, then the
/// scalar twin for the last few.
macro_rules! float_dot {
    ($dot:ident, $es:expr, $load:ident, $scalar:path) => {
        #[target_feature(enable = "neon")]
        fn $dot(w: &[u8], a: &[f32]) -> f32 {
            let n = (w.len() / $es).min(a.len());
            let mut acc = [vdupq_n_f32(0.0); 8];
            let mut i = 0;
            while i + 32 <= n {
                for (k, acc) in acc.chunks_exact_mut(2).enumerate() {
                    let o = i + 8 * k;
                    let (lo, hi) = $load(&w[o * $es..]);
                    acc[0] = vfmaq_f32(acc[0], lo, ld_f32(&a[o..]));
                    acc[1] = vfmaq_f32(acc[1], hi, ld_f32(&a[o + 4..]));
                }
                i += 32;
            }
            while i + 8 <= n {
                let (lo, hi) = $load(&w[i * $es..]);
                acc[0] = vfmaq_f32(acc[0], lo, ld_f32(&a[i..]));
                acc[1] = vfmaq_f32(acc[1], hi, ld_f32(&a[i + 4..]));
                i += 8;
            }
            let s = vaddq_f32(
                vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])),
                vaddq_f32(vaddq_f32(acc[4], acc[5]), vaddq_f32(acc[6], acc[7])),
            );
            vaddvq_f32(s) + $scalar(&w[i * $es..n * $es], &a[i..n])
        }
    };
}

/// 8 little-endian f32 (32 bytes).
#[target_feature(enable = "neon")]
#[inline]
fn load_f32(w: &[u8]) -> (float32x4_t, float32x4_t) {
    (
        vreinterpretq_f32_u8(ld_u8(w)),
        vreinterpretq_f32_u8(ld_u8(&w[16..])),
    )
}

/// 8 little-endian f16 (16 bytes), widened exactly.
#[target_feature(enable = "neon")]
#[inline]
fn load_f16(w: &[u8]) -> (float32x4_t, float32x4_t) {
    let [lo, hi] = ld_f16x8(w);
    (lo, hi)
}

/// 8 little-endian bf16 (16 bytes): each the top half of an f32.
#[target_feature(enable = "neon")]
#[inline]
fn load_bf16(w: &[u8]) -> (float32x4_t, float32x4_t) {
    let h = vreinterpretq_u16_u8(ld_u8(w));
    (
        vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
        vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
    )
}

float_dot!(dot_f32, 4, load_f32, generic::dot_f32);
float_dot!(dot_f16, 2, load_f16, generic::dot_f16);
float_dot!(dot_bf16, 2, load_bf16, generic::dot_bf16);

rows! {
    rows_q4_1, inner_q4_1 => dot_q4_1: Q8Block;
    rows_q5_1, inner_q5_1 => dot_q5_1: Q8Block;
    rows_f32, inner_f32 => dot_f32: f32;
    rows_f16, inner_f16 => dot_f16: f32;
    rows_bf16, inner_bf16 => dot_bf16: f32;
}
