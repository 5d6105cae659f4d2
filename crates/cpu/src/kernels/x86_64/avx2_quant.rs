//! AVX2 activation quantizers, bit for bit the scalar ones
//! ([`Q8Block::quantize`], [`BlockQ8K::quantize`]); `avx512_quant`'s
//! algorithm at half the width, for CPUs without AVX-512: the same IEEE
//! operations per element (multiply, round, convert) in vector lanes, the
//! per-block scalars (`d`, `1/d`) computed as the scalar code does, the f16
//! roundings with F16C. A block with a NaN or infinity goes to the scalar
//! function, whose order-dependent NaN handling a vector max cannot
//! reproduce. On Zen 2 the scalar quantizers (with `roundf` calls) were
//! 5% of a Gemma 3 270M prefill.

use super::super::Q8Block;
use anedvd_quant::{BlockQ8K, QK_K};
use std::arch::x86_64::*;

/// Loads 8 f32 from the start of `s`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn ld(s: &[f32]) -> __m256 {
    let s = &s[..8];
    // SAFETY: `s` is 8 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// `|v|` lane by lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn abs(v: __m256) -> __m256 {
    _mm256_andnot_ps(_mm256_set1_ps(-0.0), v)
}

/// True if every lane of `v` is finite.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn finite(v: __m256) -> bool {
    _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(
        abs(v),
        _mm256_set1_ps(f32::MAX),
    )) == 0xff
}

/// The largest of the 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
}

/// C's `(int)roundf(x)` for finite `x` in i32 range: truncate, then step
/// away from zero where the dropped fraction is at least one half (the
/// subtraction is exact for the magnitudes where a fraction exists).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn round_away(x: __m256) -> __m256i {
    let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
    let half = _mm256_cmp_ps::<_CMP_GE_OQ>(abs(_mm256_sub_ps(x, t)), _mm256_set1_ps(0.5));
    // `copysign(1, x)` where the fraction is a half or more, else 0.
    let one = _mm256_or_ps(_mm256_set1_ps(1.0), _mm256_and_ps(x, _mm256_set1_ps(-0.0)));
    _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(half, one)))
}

/// Each i32 lane's low byte, sign-extended (Rust's `as i8`; C's cast of
/// `roundf`'s out-of-range `i32::MIN` to the byte 0, as the scalar code
/// gives for a block of denormals, whose `1/d` is infinite).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn low_byte(v: __m256i) -> __m256i {
    _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(v))
}

/// The 32 i32 lanes of `q` (each in [-128, 127]) as bytes, in order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn to_bytes(q: [__m256i; 4], dst: &mut [i8]) {
    let dst = &mut dst[..32];
    // The packs interleave 128-bit lanes; the permutation puts the dwords
    // of four bytes back in order.
    let w = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: `dst` is 32 writable bytes; `storeu` is unaligned.
    unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), w) };
}

/// f32 → f16 → f32 with F16C (round to nearest even, as
/// `anedvd_quant::f32_to_f16` for every finite value; overflow to infinity).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) fn f16_round(v: f32) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(
        _mm_set_ss(v),
    )))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q8_block(x: &[f32; 32]) -> Q8Block {
    let v = [0, 1, 2, 3].map(|i| ld(&x[8 * i..]));
    if !v.iter().all(|&vi| finite(vi)) {
        return Q8Block::quantize(x);
    }
    let m = v
        .iter()
        .fold(_mm256_setzero_ps(), |m, &vi| _mm256_max_ps(m, abs(vi)));
    let amax = hmax(m);
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
    let q = v.map(|vi| low_byte(round_away(_mm256_mul_ps(vi, id))));
    let mut qs = [0i8; 32];
    to_bytes(q, &mut qs);
    let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b0100_1110>(s));
    let sum = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b1011_0001>(s)));
    Q8Block {
        d: f16_round(d),
        s: f16_round(sum as f32 * d),
        isum: sum,
        qs,
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q8k_block(x: &[f32; QK_K]) -> BlockQ8K {
    let mut m = _mm256_setzero_ps();
    for c in x.chunks_exact(8) {
        let v = ld(c);
        if !finite(v) {
            return BlockQ8K::quantize(x);
        }
        m = _mm256_max_ps(m, abs(v));
    }
    let amax = hmax(m);
    let mut out = BlockQ8K::ZERO;
    if amax == 0.0 {
        return out;
    }
    // The first element of largest magnitude, with its sign.
    let Some(&max) = x.iter().find(|v| v.abs() == amax) else {
        return BlockQ8K::quantize(x);
    };
    let iscale = -127.0 / max;
    let is = _mm256_set1_ps(iscale);
    // `nearest_int`: the magic-number add rounds to nearest even.
    let magic = _mm256_set1_ps(12_582_912.0);
    for (c, q) in x.chunks_exact(32).zip(out.qs.chunks_exact_mut(32)) {
        let i = [0, 1, 2, 3].map(|j| {
            let val = _mm256_add_ps(_mm256_mul_ps(is, ld(&c[8 * j..])), magic);
            let i = _mm256_sub_epi32(
                _mm256_and_si256(_mm256_castps_si256(val), _mm256_set1_epi32(0x007f_ffff)),
                _mm256_set1_epi32(0x0040_0000),
            );
            low_byte(_mm256_min_epi32(i, _mm256_set1_epi32(127)))
        });
        to_bytes(i, q);
    }
    out.finish(iscale);
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q8_row(x: &[f32], dst: &mut [Q8Block]) {
    for (b, c) in dst.iter_mut().zip(x.chunks_exact(32)) {
        if let Ok(c) = <&[f32; 32]>::try_from(c) {
            *b = q8_block(c);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q8k_row(x: &[f32], dst: &mut [BlockQ8K]) {
    for (b, c) in dst.iter_mut().zip(x.chunks_exact(QK_K)) {
        if let Ok(c) = <&[f32; QK_K]>::try_from(c) {
            *b = q8k_block(c);
        }
    }
}

/// [`Q8Block::quantize`] with AVX2 over each 32-value chunk of `x`.
pub(in super::super) fn quantize_q8(x: &[f32], dst: &mut [Q8Block]) {
    // SAFETY: only handed out by `super::quantizers`, after detecting
    // AVX2, FMA and F16C.
    unsafe { q8_row(x, dst) }
}

/// [`BlockQ8K::quantize`] with AVX2 over each 256-value chunk of `x`.
pub(in super::super) fn quantize_q8k(x: &[f32], dst: &mut [BlockQ8K]) {
    // SAFETY: only handed out by `super::quantizers`, after detecting
    // AVX2, FMA and F16C.
    unsafe { q8k_row(x, dst) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anedvd_quant::{f16_to_f32, f32_to_f16};

    /// The AVX2 quantizers against the scalar ones, called directly (an
    /// AVX-512 host hands out its own through `quantizers()`, so the
    /// integration tests never reach these there): exact ties, zeros of
    /// both signs, denormals (an infinite `1/d`), NaN and infinities (the
    /// scalar path), a largest magnitude repeated with both signs, and
    /// random blocks over twelve decades.
    #[test]
    fn avx2_quantizers_match_scalar_bit_for_bit() {
        if !super::super::has_avx2() {
            return;
        }
        let mut state = 0x9e37_79b9_u64;
        let mut rand = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut blocks: Vec<Vec<f32>> = vec![
            (0..QK_K)
                .map(|i| [127.0, -127.0, 0.5, -0.5, 1.5, -2.5, 20.5, -3.5][i % 8])
                .collect(),
            (0..QK_K)
                .map(|i| [-127.0, 127.0, 0.5, -0.5, 1.5, -2.5, 20.5, -3.5][i % 8])
                .collect(),
            vec![0.0; QK_K],
            (0..QK_K)
                .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
                .collect(),
            (0..QK_K).map(|i| f32::from_bits(1 + i as u32)).collect(),
        ];
        for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut b: Vec<f32> = (0..QK_K).map(|_| rand() * 5.0).collect();
            b[37] = special;
            b[200] = special;
            blocks.push(b);
        }
        for e in -6..6 {
            let s = 10f32.powi(e);
            blocks.push((0..QK_K).map(|_| rand() * s).collect());
        }
        let x: Vec<f32> = blocks.concat();
        let mut got = vec![Q8Block::quantize(&[0.0; 32]); x.len() / 32];
        quantize_q8(&x, &mut got);
        for (i, (g, c)) in got.iter().zip(x.chunks_exact(32)).enumerate() {
            let want = Q8Block::quantize(c.try_into().expect("32 values"));
            assert_eq!(g.qs, want.qs, "q8 block {i}");
            assert_eq!(g.d.to_bits(), want.d.to_bits(), "q8 d block {i}");
            assert_eq!(g.s.to_bits(), want.s.to_bits(), "q8 s block {i}");
            assert_eq!(g.isum, want.isum, "q8 isum block {i}");
        }
        let mut got = vec![BlockQ8K::ZERO; x.len() / QK_K];
        quantize_q8k(&x, &mut got);
        for (i, (g, c)) in got.iter().zip(x.chunks_exact(QK_K)).enumerate() {
            let want = BlockQ8K::quantize(c.try_into().expect("256 values"));
            assert_eq!(g.qs, want.qs, "q8k block {i}");
            assert_eq!(g.d.to_bits(), want.d.to_bits(), "q8k d block {i}");
            assert_eq!(g.bsums, want.bsums, "q8k bsums block {i}");
        }
    }

    /// F16C's rounding equals ggml's software f32 → f16 on finite values:
    /// every exponent, strided mantissas, both signs (subnormal results,
    /// ties, overflow to infinity included).
    #[test]
    fn f16c_rounding_matches_software_on_finite_values() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
            return;
        }
        let mut bits = 0u32;
        let mut n = 0;
        while bits < 0x7f80_0000 {
            for sign in [0, 0x8000_0000] {
                let v = f32::from_bits(bits | sign);
                // SAFETY: AVX2 and F16C were detected above.
                let hw = unsafe { f16_round(v) };
                let sw = f16_to_f32(f32_to_f16(v));
                assert_eq!(hw.to_bits(), sw.to_bits(), "{v:e} ({:#x})", v.to_bits());
                n += 1;
            }
            bits += 0x1f3;
        }
        assert!(n > 100_000);
    }
}
