//! AVX-512 activation quantizers (`avx2_quant` is the AVX2 twin), bit for bit the scalar ones
//! ([`Q8Block::quantize`], [`BlockQ8K::quantize`]): the same IEEE
//! operations per element (multiply, round, convert) in vector lanes, the
//! per-block scalars (`d`, `1/d`) computed as the scalar code does, the f16
//! roundings with F16C (the same round-to-nearest-even for finite values). A block with a NaN or infinity goes to the scalar function,
//! whose order-dependent NaN handling a vector max cannot reproduce.

use super::super::Q8Block;
use super::avx2_quant::f16_round;
use anedvd_quant::{BlockQ8K, QK_K};
use std::arch::x86_64::*;

/// Loads 16 f32 from the start of `s`.
#[target_feature(enable = "avx512f")]
#[inline]
fn ld(s: &[f32]) -> __m512 {
    let s = &s[..16];
    // SAFETY: `s` is 16 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// True if every lane of `v` is finite.
#[target_feature(enable = "avx512f")]
#[inline]
fn finite(v: __m512) -> bool {
    let a = _mm512_abs_ps(v);
    _mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, _mm512_set1_ps(f32::MAX)) == 0xffff
}

/// C's `(int)roundf(x)` (half away from zero; `i32::MIN` for NaN or out of
/// range, as `cvttss2si`), exactly: truncate, then step away from zero
/// where the dropped fraction is at least one half (the subtraction is
/// exact for the magnitudes where a fraction exists).
#[target_feature(enable = "avx512f")]
#[inline]
fn round_away(x: __m512) -> __m512i {
    let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
    let frac = _mm512_abs_ps(_mm512_sub_ps(x, t));
    let half = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(frac, _mm512_set1_ps(0.5));
    // `copysign(1, x)`.
    let sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(i32::MIN));
    let one = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(_mm512_set1_ps(1.0)),
        sign,
    ));
    _mm512_cvttps_epi32(_mm512_mask_add_ps(t, half, t, one))
}

/// The low byte of each i32 lane, 16 bytes.
#[target_feature(enable = "avx512f")]
#[inline]
fn low_bytes(v: __m512i, dst: &mut [i8]) {
    let dst = &mut dst[..16];
    // SAFETY: `dst` is 16 writable bytes; `storeu` is unaligned.
    unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(v)) };
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
fn q8_block(x: &[f32; 32]) -> Q8Block {
    let (v0, v1) = (ld(&x[..16]), ld(&x[16..]));
    if !(finite(v0) && finite(v1)) {
        return Q8Block::quantize(x);
    }
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let idv = _mm512_set1_ps(id);
    let q0 = round_away(_mm512_mul_ps(v0, idv));
    let q1 = round_away(_mm512_mul_ps(v1, idv));
    let mut qs = [0i8; 32];
    low_bytes(q0, &mut qs[..16]);
    low_bytes(q1, &mut qs[16..]);
    // Finite inputs: every lane is in [-127, 127], its own low byte, unless
    // `1/d` is infinite (a block of denormals): then every lane is
    // `i32::MIN`, whose low byte is 0, and the 32 of them sum to 0 mod 2^32,
    // as the scalar sum of the bytes.
    let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    Q8Block {
        d: f16_round(d),
        s: f16_round(sum as f32 * d),
        isum: sum,
        qs,
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
fn q8k_block(x: &[f32; QK_K]) -> BlockQ8K {
    let mut m = _mm512_setzero_ps();
    for c in x.chunks_exact(16) {
        let v = ld(c);
        if !finite(v) {
            return BlockQ8K::quantize(x);
        }
        m = _mm512_max_ps(m, _mm512_abs_ps(v));
    }
    let amax = _mm512_reduce_max_ps(m);
    let mut out = BlockQ8K::ZERO;
    if amax == 0.0 {
        return out;
    }
    // The first element of largest magnitude, with its sign.
    let Some(&max) = x.iter().find(|v| v.abs() == amax) else {
        return BlockQ8K::quantize(x);
    };
    let iscale = -127.0 / max;
    let is = _mm512_set1_ps(iscale);
    // `nearest_int`: the magic-number add rounds to nearest even.
    let magic = _mm512_set1_ps(12_582_912.0);
    for (c, q) in x.chunks_exact(16).zip(out.qs.chunks_exact_mut(16)) {
        let val = _mm512_add_ps(_mm512_mul_ps(is, ld(c)), magic);
        let i = _mm512_sub_epi32(
            _mm512_and_si512(_mm512_castps_si512(val), _mm512_set1_epi32(0x007f_ffff)),
            _mm512_set1_epi32(0x0040_0000),
        );
        low_bytes(_mm512_min_epi32(i, _mm512_set1_epi32(127)), q);
    }
    out.finish(iscale);
    out
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn q8_row(x: &[f32], dst: &mut [Q8Block]) {
    for (b, c) in dst.iter_mut().zip(x.chunks_exact(32)) {
        if let Ok(c) = <&[f32; 32]>::try_from(c) {
            *b = q8_block(c);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn q8k_row(x: &[f32], dst: &mut [BlockQ8K]) {
    for (b, c) in dst.iter_mut().zip(x.chunks_exact(QK_K)) {
        if let Ok(c) = <&[f32; QK_K]>::try_from(c) {
            *b = q8k_block(c);
        }
    }
}

/// [`Q8Block::quantize`] with AVX-512 over each 32-value chunk of `x`.
pub(in super::super) fn quantize_q8(x: &[f32], dst: &mut [Q8Block]) {
    // SAFETY: only handed out by `super::quantizers`, after detecting
    // AVX2, FMA, F16C and AVX-512 F/BW/VL.
    unsafe { q8_row(x, dst) }
}

/// [`BlockQ8K::quantize`] with AVX-512 over each 256-value chunk of `x`.
pub(in super::super) fn quantize_q8k(x: &[f32], dst: &mut [BlockQ8K]) {
    // SAFETY: only handed out by `super::quantizers`, after detecting
    // AVX2, FMA, F16C and AVX-512 F/BW/VL.
    unsafe { q8k_row(x, dst) }
}
