//! NEON kernels for Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K and Q6_K, and the
//! helpers the other row dots share (`neon_dot.rs`, `neon_k.rs`): 16
//! weights per register, `smull`/`smull2` products summed pairwise into i32
//! lanes, one f32 multiply-add per block. The block decoders here are shared
//! with the multi-token and dotprod kernels (`neon_tokens.rs`).

use super::super::generic::{f16_at, unpack_k4_scales, KVALUES_IQ4NL};
use super::super::{Q8Block, Table};
use anedvd_quant::BlockQ8K;
use std::arch::aarch64::*;

/// Loads 16 bytes from the start of `s` (which must hold at least 16).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn ld_u8(s: &[u8]) -> uint8x16_t {
    let s = &s[..16];
    // SAFETY: `s` is 16 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// Loads 16 signed bytes from the start of `s`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn ld_i8(s: &[i8]) -> int8x16_t {
    let s = &s[..16];
    // SAFETY: `s` is 16 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1q_s8(s.as_ptr()) }
}

/// Loads 8 i16 from the start of `s` (which must hold at least 8).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn ld_i16(s: &[i16]) -> int16x8_t {
    let s = &s[..8];
    // SAFETY: `s` is 8 readable i16; `ld1` has no alignment requirement.
    unsafe { vld1q_s16(s.as_ptr()) }
}

/// Loads 4 f32 from the start of `s`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn ld_f32(s: &[f32]) -> float32x4_t {
    let s = &s[..4];
    // SAFETY: `s` is 4 readable f32; `ld1` needs only the element alignment.
    unsafe { vld1q_f32(s.as_ptr()) }
}

/// Stores 4 f32 at the start of `d`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn st_f32(d: &mut [f32], v: float32x4_t) {
    let d = &mut d[..4];
    // SAFETY: `d` is 4 writable f32; `st1` needs only the element alignment.
    unsafe { vst1q_f32(d.as_mut_ptr(), v) }
}

/// Loads 4 i32 from the start of `s`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn ld_i32(s: &[i32]) -> int32x4_t {
    let s = &s[..4];
    // SAFETY: `s` is 4 readable i32; `ld1` needs only the element alignment.
    unsafe { vld1q_s32(s.as_ptr()) }
}

/// `acc + (sums of 4 products of a and b)` (ggml's `ggml_vdotq_s32` fallback).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn dot16(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let p0 = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let p1 = vmull_high_s8(a, b);
    vaddq_s32(acc, vaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)))
}

/// Dot of a row of 32-weight blocks given the two signed 16-byte halves.
macro_rules! legacy_dot {
    ($dot:ident, $bb:expr, $halves:ident) => {
        #[target_feature(enable = "neon")]
        fn $dot(x: &[u8], y: &[Q8Block]) -> f32 {
            let mut acc = vdupq_n_f32(0.0);
            for (xb, yb) in x.chunks_exact($bb).zip(y) {
                let (lo, hi) = $halves(xb);
                let s = dot16(vdupq_n_s32(0), lo, ld_i8(&yb.qs[..16]));
                let s = dot16(s, hi, ld_i8(&yb.qs[16..]));
                acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), f16_at(xb, 0) * yb.d);
            }
            vaddvq_f32(acc)
        }
    };
}

/// A Q8_0 block's weights 0..16 and 16..32 as signed bytes (the scalar
/// twin's values; the other `halves_*` likewise for their types).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn halves_q8_0(x: &[u8]) -> (int8x16_t, int8x16_t) {
    (
        vreinterpretq_s8_u8(ld_u8(&x[2..])),
        vreinterpretq_s8_u8(ld_u8(&x[18..])),
    )
}

#[target_feature(enable = "neon")]
#[inline]
pub(super) fn halves_q4_0(x: &[u8]) -> (int8x16_t, int8x16_t) {
    let v = ld_u8(&x[2..]);
    let eight = vdupq_n_s8(8);
    (
        vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))), eight),
        vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)), eight),
    )
}

/// 16 bits of `qh` (starting at bit `16 * half`) as bytes of 0x10 or 0.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn fifth_bits(qh: u32, half: u32) -> uint8x16_t {
    let b = (qh >> (16 * half)) as u16;
    let rep = vcombine_u8(vdup_n_u8(b as u8), vdup_n_u8((b >> 8) as u8));
    let mask = vcombine_u8(
        vcreate_u8(0x8040_2010_0804_0201),
        vcreate_u8(0x8040_2010_0804_0201),
    );
    vandq_u8(vtstq_u8(rep, mask), vdupq_n_u8(0x10))
}

#[target_feature(enable = "neon")]
#[inline]
pub(super) fn halves_q5_0(x: &[u8]) -> (int8x16_t, int8x16_t) {
    let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
    let v = ld_u8(&x[6..]);
    let sixteen = vdupq_n_s8(16);
    let lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0f)), fifth_bits(qh, 0));
    let hi = vorrq_u8(vshrq_n_u8::<4>(v), fifth_bits(qh, 1));
    (
        vsubq_s8(vreinterpretq_s8_u8(lo), sixteen),
        vsubq_s8(vreinterpretq_s8_u8(hi), sixteen),
    )
}

/// 16 bytes of IQ4 nibbles as code-book values (`tbl`): low nibbles, high
/// nibbles (IQ4_NL here, IQ4_XS in `neon_k.rs`).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn iq4_values(v: uint8x16_t) -> (int8x16_t, int8x16_t) {
    let book = ld_i8(&KVALUES_IQ4NL);
    (
        vqtbl1q_s8(book, vandq_u8(v, vdupq_n_u8(0x0f))),
        vqtbl1q_s8(book, vshrq_n_u8::<4>(v)),
    )
}

/// IQ4_NL's two halves through the code book.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn halves_iq4_nl(x: &[u8]) -> (int8x16_t, int8x16_t) {
    iq4_values(ld_u8(&x[2..]))
}

legacy_dot!(dot_q8_0, 34, halves_q8_0);
legacy_dot!(dot_q4_0, 18, halves_q4_0);
legacy_dot!(dot_q5_0, 22, halves_q5_0);
legacy_dot!(dot_iq4_nl, 18, halves_iq4_nl);

/// Q4_K weights `64 * j .. 64 * j + 64` of block `xb` as four signed
/// vectors in activation order: the low nibbles of 32 bytes, then their
/// high nibbles (each 32 under one sub-block scale).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn q4_k_weights(xb: &[u8], j: usize) -> [int8x16_t; 4] {
    let m4 = vdupq_n_u8(0x0f);
    let b0 = ld_u8(&xb[16 + 32 * j..]);
    let b1 = ld_u8(&xb[32 + 32 * j..]);
    [
        vandq_u8(b0, m4),
        vandq_u8(b1, m4),
        vshrq_n_u8::<4>(b0),
        vshrq_n_u8::<4>(b1),
    ]
    .map(|v| vreinterpretq_s8_u8(v))
}

/// Q6_K weights at activation offsets `128 * c + 32 * k + 16 * h`
/// (`k` = 0..4) of block `xb`, signed (minus 32).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn q6_k_weights(xb: &[u8], c: usize, h: usize) -> [int8x16_t; 4] {
    let (m4, m3, m32) = (vdupq_n_u8(0x0f), vdupq_n_u8(3), vdupq_n_s8(32));
    let ql0 = ld_u8(&xb[64 * c + 16 * h..]);
    let ql1 = ld_u8(&xb[64 * c + 32 + 16 * h..]);
    let qh = ld_u8(&xb[128 + 32 * c + 16 * h..]);
    let high = |s: uint8x16_t| vshlq_n_u8::<4>(vandq_u8(s, m3));
    [
        vorrq_u8(vandq_u8(ql0, m4), high(qh)),
        vorrq_u8(vandq_u8(ql1, m4), high(vshrq_n_u8::<2>(qh))),
        vorrq_u8(vshrq_n_u8::<4>(ql0), high(vshrq_n_u8::<4>(qh))),
        vorrq_u8(vshrq_n_u8::<4>(ql1), high(vshrq_n_u8::<6>(qh))),
    ]
    .map(|q| vsubq_s8(vreinterpretq_s8_u8(q), m32))
}

#[target_feature(enable = "neon")]
fn dot_q4_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(144).zip(y) {
        let d = yb.d * f16_at(xb, 0);
        let dmin = yb.d * f16_at(xb, 2);
        let sm = unpack_k4_scales(&xb[4..16]);
        let mut summs = 0i32;
        for j in 0..16 {
            summs += i32::from(yb.bsums[j]) * i32::from(sm[8 + j / 2]);
        }
        let mut sumi = 0i32;
        for j in 0..4 {
            let q8 = &yb.qs[64 * j..64 * j + 64];
            let q = q4_k_weights(xb, j);
            let lo = dot16(vdupq_n_s32(0), q[0], ld_i8(&q8[..16]));
            let lo = dot16(lo, q[1], ld_i8(&q8[16..]));
            let hi = dot16(vdupq_n_s32(0), q[2], ld_i8(&q8[32..]));
            let hi = dot16(hi, q[3], ld_i8(&q8[48..]));
            sumi +=
                vaddvq_s32(lo) * i32::from(sm[2 * j]) + vaddvq_s32(hi) * i32::from(sm[2 * j + 1]);
        }
        sumf += d * sumi as f32 - dmin * summs as f32;
    }
    sumf
}

#[target_feature(enable = "neon")]
fn dot_q6_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(210).zip(y) {
        let d = yb.d * f16_at(xb, 208);
        let sc = &xb[192..208];
        let mut sumi = 0i32;
        for c in 0..2 {
            for h in 0..2 {
                for (k, w) in q6_k_weights(xb, c, h).into_iter().enumerate() {
                    let o = 128 * c + 32 * k + 16 * h;
                    let s = vaddvq_s32(dot16(vdupq_n_s32(0), w, ld_i8(&yb.qs[o..])));
                    sumi += s * i32::from(sc[o / 16] as i8);
                }
            }
        }
        sumf += d * sumi as f32;
    }
    sumf
}

/// A safe row loop around a NEON dot.
macro_rules! rows {
    ($($rows:ident, $inner:ident => $dot:ident : $a:ty;)*) => {$(
        #[target_feature(enable = "neon")]
        fn $inner(w: &[u8], rb: usize, a: &[$a], out: &mut [f32]) {
            if rb == 0 {
                return;
            }
            for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
                *o = $dot(row, a);
            }
        }

        pub(super) fn $rows(w: &[u8], rb: usize, a: &[$a], out: &mut [f32]) {
            // SAFETY: NEON is part of every aarch64 target's baseline.
            unsafe { $inner(w, rb, a, out) }
        }
    )*};
}

pub(super) use rows;

rows! {
    rows_q8_0, inner_q8_0 => dot_q8_0: Q8Block;
    rows_q4_0, inner_q4_0 => dot_q4_0: Q8Block;
    rows_q5_0, inner_q5_0 => dot_q5_0: Q8Block;
    rows_iq4_nl, inner_iq4_nl => dot_iq4_nl: Q8Block;
    rows_q4_k, inner_q4_k => dot_q4_k: BlockQ8K;
    rows_q6_k, inner_q6_k => dot_q6_k: BlockQ8K;
}

/// The NEON kernels (scalar twins for the other types).
pub(super) const TABLE: Table = Table {
    q4_0: rows_q4_0,
    q5_0: rows_q5_0,
    q8_0: rows_q8_0,
    iq4_nl: rows_iq4_nl,
    q4_k: rows_q4_k,
    q6_k: rows_q6_k,
    ..Table::GENERIC
};
