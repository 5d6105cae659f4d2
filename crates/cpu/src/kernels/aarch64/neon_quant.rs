//! NEON activation quantizers, bit for bit the scalar ones
//! ([`Q8Block::quantize`], [`BlockQ8K::quantize`]): the same IEEE
//! operations per element (multiply, round, convert) in vector lanes, the
//! per-block scalars (`d`, `1/d`, the f16 roundings of `d` and `s`)
//! computed by the scalar code's own functions. A block with a NaN or an
//! infinity goes to the scalar function, whose order-dependent NaN handling
//! a vector maximum cannot reproduce.

use super::super::Q8Block;
use super::neon::ld_f32;
use anedvd_quant::{f16_to_f32, f32_to_f16, BlockQ8K, QK_K};
use std::arch::aarch64::*;

/// True if every lane of `v` is finite (false for NaN).
#[target_feature(enable = "neon")]
#[inline]
fn finite(v: float32x4_t) -> bool {
    vminvq_u32(vcleq_f32(vabsq_f32(v), vdupq_n_f32(f32::MAX))) != 0
}

/// C's `(int)roundf(x)` as `c_round_i32` computes it: `fcvtas` rounds half
/// away from zero, as `roundf`, but saturates where the scalar conversion
/// (x86's `cvttss2si`) gives `i32::MIN` for NaN and out-of-range values
/// (`x * (1/d)` overflows when `d` is a tiny denormal), so those lanes are
/// replaced.
#[target_feature(enable = "neon")]
#[inline]
fn round_away(x: float32x4_t) -> int32x4_t {
    let in_range = vcaltq_f32(x, vdupq_n_f32(2_147_483_648.0));
    vbslq_s32(in_range, vcvtaq_s32_f32(x), vdupq_n_s32(i32::MIN))
}

/// The low byte of each i32 lane of `q` (as `as i8`), 16 bytes, stored at
/// the start of `dst`; returns their sum.
#[target_feature(enable = "neon")]
#[inline]
fn store_low_bytes(q: [int32x4_t; 4], dst: &mut [i8]) -> i32 {
    let lo = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
    let hi = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
    let b = vcombine_s8(vmovn_s16(lo), vmovn_s16(hi));
    let dst = &mut dst[..16];
    // SAFETY: `dst` is 16 writable bytes; `st1` of bytes has no alignment
    // requirement.
    unsafe { vst1q_s8(dst.as_mut_ptr(), b) };
    i32::from(vaddlvq_s8(b))
}

#[target_feature(enable = "neon")]
#[inline]
fn q8_block(x: &[f32; 32]) -> Q8Block {
    let mut v = [vdupq_n_f32(0.0); 8];
    let mut m = vdupq_n_f32(0.0);
    for (v, c) in v.iter_mut().zip(x.chunks_exact(4)) {
        *v = ld_f32(c);
        if !finite(*v) {
            return Q8Block::quantize(x);
        }
        m = vmaxq_f32(m, vabsq_f32(*v));
    }
    let amax = vmaxvq_f32(m);
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; 32];
    let mut sum = 0;
    for (v, q) in v.chunks_exact(4).zip(qs.chunks_exact_mut(16)) {
        let r = [0, 1, 2, 3].map(|k| round_away(vmulq_n_f32(v[k], id)));
        sum += store_low_bytes(r, q);
    }
    Q8Block {
        d: f16_to_f32(f32_to_f16(d)),
        s: f16_to_f32(f32_to_f16(sum as f32 * d)),
        isum: sum,
        qs,
    }
}

#[target_feature(enable = "neon")]
#[inline]
fn q8k_block(x: &[f32; QK_K]) -> BlockQ8K {
    let mut m = vdupq_n_f32(0.0);
    for c in x.chunks_exact(4) {
        let v = ld_f32(c);
        if !finite(v) {
            return BlockQ8K::quantize(x);
        }
        m = vmaxq_f32(m, vabsq_f32(v));
    }
    let amax = vmaxvq_f32(m);
    let mut out = BlockQ8K::ZERO;
    if amax == 0.0 {
        return out;
    }
    // The first element of largest magnitude, with its sign.
    let Some(&max) = x.iter().find(|v| v.abs() == amax) else {
        return BlockQ8K::quantize(x);
    };
    let iscale = -127.0 / max;
    // `nearest_int`: the magic-number add rounds to nearest even.
    let magic = vdupq_n_f32(12_582_912.0);
    let nearest = |c: &[f32]| {
        let val = vreinterpretq_s32_f32(vaddq_f32(vmulq_n_f32(ld_f32(c), iscale), magic));
        let i = vsubq_s32(
            vandq_s32(val, vdupq_n_s32(0x007f_ffff)),
            vdupq_n_s32(0x0040_0000),
        );
        vminq_s32(i, vdupq_n_s32(127))
    };
    for ((c, q), s) in x
        .chunks_exact(16)
        .zip(out.qs.chunks_exact_mut(16))
        .zip(&mut out.bsums)
    {
        let r = [0, 1, 2, 3].map(|k| nearest(&c[4 * k..]));
        // Sixteen values in [-128, 127]: the sum fits in i16.
        *s = store_low_bytes(r, q) as i16;
    }
    out.d = 1.0 / iscale;
    out
}

#[target_feature(enable = "neon")]
fn q8_row(x: &[f32], dst: &mut [Q8Block]) {
    for (b, c) in dst.iter_mut().zip(x.chunks_exact(32)) {
        if let Ok(c) = <&[f32; 32]>::try_from(c) {
            *b = q8_block(c);
        }
    }
}

#[target_feature(enable = "neon")]
fn q8k_row(x: &[f32], dst: &mut [BlockQ8K]) {
    for (b, c) in dst.iter_mut().zip(x.chunks_exact(QK_K)) {
        if let Ok(c) = <&[f32; QK_K]>::try_from(c) {
            *b = q8k_block(c);
        }
    }
}

/// The NEON activation quantizers: always (NEON is part of every aarch64
/// target's baseline), an `Option` as `x86_64::quantizers`.
#[allow(clippy::type_complexity)]
pub(in super::super) fn quantizers(
) -> Option<(fn(&[f32], &mut [Q8Block]), fn(&[f32], &mut [BlockQ8K]))> {
    Some((quantize_q8, quantize_q8k))
}

/// [`Q8Block::quantize`] with NEON over each 32-value chunk of `x`.
fn quantize_q8(x: &[f32], dst: &mut [Q8Block]) {
    // SAFETY: NEON is part of every aarch64 target's baseline.
    unsafe { q8_row(x, dst) }
}

/// [`BlockQ8K::quantize`] with NEON over each 256-value chunk of `x`.
fn quantize_q8k(x: &[f32], dst: &mut [BlockQ8K]) {
    // SAFETY: NEON is part of every aarch64 target's baseline.
    unsafe { q8k_row(x, dst) }
}
