//! NEON row dots for Q2_K, Q3_K, Q5_K and IQ4_XS (Q8_K activations), after
//! ggml's NEON paths: each 16- or 32-weight sub-block's integer dot is
//! reduced across lanes and scaled in i32, one f32 multiply-add per block.

use super::super::generic::{f16_at, unpack_k4_scales, unpack_q3k_scales};
use super::neon::{dot16, iq4_values, ld_i16, ld_i8, ld_u8, rows};
use super::neon_dot::dot32;
use anedvd_quant::BlockQ8K;
use std::arch::aarch64::*;

/// Loads 8 bytes from the start of `s`.
#[target_feature(enable = "neon")]
#[inline]
fn ld_u8x8(s: &[u8]) -> uint8x8_t {
    let s = &s[..8];
    // SAFETY: `s` is 8 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1_u8(s.as_ptr()) }
}

/// `sum(a * b)` over 8 i16 lanes, in i32.
#[target_feature(enable = "neon")]
#[inline]
fn dot_i16(a: int16x8_t, b: int16x8_t) -> i32 {
    let p = vmull_s16(vget_low_s16(a), vget_low_s16(b));
    vaddvq_s32(vmlal_high_s16(p, a, b))
}

/// The integer dot of 16 signed weights with the activation bytes at `q8`.
#[target_feature(enable = "neon")]
#[inline]
fn sum16(w: uint8x16_t, q8: &[i8]) -> i32 {
    vaddvq_s32(dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(w), ld_i8(q8)))
}

#[target_feature(enable = "neon")]
fn dot_q2_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let m3 = vdupq_n_u8(3);
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(84).zip(y) {
        let sc = &xb[..16];
        // The 4-bit mins times the activation's 16-weight sums.
        let mins = vshrq_n_u8::<4>(ld_u8(sc));
        let summs = dot_i16(
            vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins))),
            ld_i16(&yb.bsums[..8]),
        ) + dot_i16(
            vreinterpretq_s16_u16(vmovl_high_u8(mins)),
            ld_i16(&yb.bsums[8..]),
        );
        let mut isum = 0i32;
        for j in 0..2 {
            let mut q2 = [ld_u8(&xb[16 + 32 * j..]), ld_u8(&xb[32 + 32 * j..])];
            for s in 0..4 {
                let o = 128 * j + 32 * s;
                let lo = sum16(vandq_u8(q2[0], m3), &yb.qs[o..]);
                let hi = sum16(vandq_u8(q2[1], m3), &yb.qs[o + 16..]);
                isum += lo * i32::from(sc[o / 16] & 0xf) + hi * i32::from(sc[o / 16 + 1] & 0xf);
                q2 = q2.map(|v| vshrq_n_u8::<2>(v));
            }
        }
        let dall = yb.d * f16_at(xb, 80);
        let dmin = yb.d * f16_at(xb, 82);
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

#[target_feature(enable = "neon")]
fn dot_q3_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let (m3, one) = (vdupq_n_u8(3), vdupq_n_u8(1));
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(110).zip(y) {
        let sc = unpack_q3k_scales(&xb[96..108]);
        // Bit `4 * j + s` of each `hmask` byte is the high bit of the
        // weights of chunk `j`, shift `s`; a clear bit means minus 4.
        let mut hm = [ld_u8(&xb[..16]), ld_u8(&xb[16..32])];
        let mut isum = 0i32;
        for j in 0..2 {
            let mut q3 = [ld_u8(&xb[32 + 32 * j..]), ld_u8(&xb[48 + 32 * j..])];
            for s in 0..4 {
                let o = 128 * j + 32 * s;
                let w = |k: usize| {
                    let minus4 = vshlq_n_u8::<2>(vbicq_u8(one, hm[k]));
                    vsubq_u8(vandq_u8(q3[k], m3), minus4)
                };
                let lo = sum16(w(0), &yb.qs[o..]);
                let hi = sum16(w(1), &yb.qs[o + 16..]);
                isum += lo * i32::from(sc[o / 16]) + hi * i32::from(sc[o / 16 + 1]);
                q3 = q3.map(|v| vshrq_n_u8::<2>(v));
                hm = hm.map(|v| vshrq_n_u8::<1>(v));
            }
        }
        sumf += f16_at(xb, 108) * yb.d * isum as f32;
    }
    sumf
}

#[target_feature(enable = "neon")]
fn dot_q5_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let (m4, one, two) = (vdupq_n_u8(0x0f), vdupq_n_u8(1), vdupq_n_u8(2));
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(176).zip(y) {
        let sm = unpack_k4_scales(&xb[4..16]);
        // The mins times the activation's 32-weight sums.
        let sub_sums = vpaddq_s16(ld_i16(&yb.bsums[..8]), ld_i16(&yb.bsums[8..]));
        let mins = vreinterpretq_s16_u16(vmovl_u8(ld_u8x8(&sm[8..])));
        let summs = dot_i16(sub_sums, mins);
        // Bits `2 * j` and `2 * j + 1` of each `qh` byte are the fifth bits
        // of chunk `j`'s low and high nibbles.
        let mut qh = [ld_u8(&xb[16..]), ld_u8(&xb[32..])];
        let mut sumi = 0i32;
        for j in 0..4 {
            let q8 = &yb.qs[64 * j..64 * j + 64];
            let b = [ld_u8(&xb[48 + 32 * j..]), ld_u8(&xb[64 + 32 * j..])];
            let low =
                |k: usize| vorrq_u8(vandq_u8(b[k], m4), vshlq_n_u8::<4>(vandq_u8(qh[k], one)));
            let high =
                |k: usize| vorrq_u8(vshrq_n_u8::<4>(b[k]), vshlq_n_u8::<3>(vandq_u8(qh[k], two)));
            let s8 = vreinterpretq_s8_u8;
            let lo = vaddvq_s32(dot32(s8(low(0)), s8(low(1)), q8));
            let hi = vaddvq_s32(dot32(s8(high(0)), s8(high(1)), &q8[32..]));
            sumi += lo * i32::from(sm[2 * j]) + hi * i32::from(sm[2 * j + 1]);
            qh = qh.map(|v| vshrq_n_u8::<2>(v));
        }
        let d = yb.d * f16_at(xb, 0);
        let dmin = yb.d * f16_at(xb, 2);
        sumf += d * sumi as f32 - dmin * summs as f32;
    }
    sumf
}

#[target_feature(enable = "neon")]
fn dot_iq4_xs(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(136).zip(y) {
        let h = u16::from_le_bytes([xb[2], xb[3]]);
        let mut sumi = 0i32;
        for ib in 0..8 {
            // 6-bit scale: 4 low bits from `scales_l`, 2 high from `scales_h`.
            let lo = (xb[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
            let ls = i32::from(lo | (((h >> (2 * ib)) & 3) as u8) << 4) - 32;
            let (wl, wh) = iq4_values(ld_u8(&xb[8 + 16 * ib..]));
            sumi += vaddvq_s32(dot32(wl, wh, &yb.qs[32 * ib..])) * ls;
        }
        sumf += f16_at(xb, 0) * yb.d * sumi as f32;
    }
    sumf
}

rows! {
    rows_q2_k, inner_q2_k => dot_q2_k: BlockQ8K;
    rows_q3_k, inner_q3_k => dot_q3_k: BlockQ8K;
    rows_q5_k, inner_q5_k => dot_q5_k: BlockQ8K;
    rows_iq4_xs, inner_iq4_xs => dot_iq4_xs: BlockQ8K;
}
