//! Gated activations and attention score exponentiation on AVX-512 (16
//! lanes) and AVX2 (8 lanes), bit for bit `crate::kernels`' scalar ones:
//! the same IEEE operations in the same order per lane (separate
//! multiplies and adds where the scalar code has them, no FMA
//! contraction), so the result does not depend on the ISA. The algorithm
//! is written once ([`act_kernels`]) over each ISA module's primitives
//! (`V`, `LANES`, `set1`, `mul`, ...).

use anedvd_graph::Activation;
use std::arch::x86_64::*;

/// The kernels, expanded inside an ISA module that defines `V`, `LANES`,
/// `FEATURES` and the primitives they use.
macro_rules! act_kernels {
    ($feat:literal) => {
        /// `crate::kernels::exp_fast` on `LANES` lanes. The clamps keep
        /// NaN (the constant is the first operand of `maxps`/`minps`,
        /// which return the second when either is NaN), as `f32::clamp`
        /// does.
        #[target_feature(enable = $feat)]
        #[inline]
        fn exp_v(x: V) -> V {
            let under = below(x, -87.0);
            let x = min(set1(88.0), max(set1(-87.0), x));
            const MAGIC: f32 = 12_582_912.0;
            let t = add(mul(x, set1(std::f32::consts::LOG2_E)), set1(MAGIC));
            let n = sub(t, set1(MAGIC));
            let r = sub(
                sub(x, mul(n, set1(0.693_359_4))),
                mul(n, set1(-2.121_944_4e-4)),
            );
            let mut p = set1(1.987_569_1e-4);
            for c in [
                1.398_199_9e-3,
                8.333_452e-3,
                4.166_579_6e-2,
                1.666_666_5e-1,
                0.5,
            ] {
                p = add(mul(p, r), set1(c));
            }
            let e = add(add(mul(mul(p, r), r), r), set1(1.0));
            let y = mul(e, pow2(t, MAGIC.to_bits() as i32));
            zero_where(y, under)
        }

        /// `crate::kernels::tanh_fast` on `LANES` lanes.
        #[target_feature(enable = $feat)]
        #[inline]
        fn tanh_v(x: V) -> V {
            let c = min(set1(10.0), max(set1(-10.0), x));
            let t = exp_v(mul(set1(2.0), c));
            div(sub(t, set1(1.0)), add(t, set1(1.0)))
        }

        /// `gelu_tanh(g) * u`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn gelu_v(g: V, u: V) -> V {
            let cube = mul(mul(mul(set1(0.044_715), g), g), g);
            let arg = mul(set1(0.797_884_6), add(g, cube));
            let gelu = mul(mul(set1(0.5), g), add(set1(1.0), tanh_v(arg)));
            mul(gelu, u)
        }

        /// `silu(g) * u`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn silu_v(g: V, u: V) -> V {
            let silu = div(g, add(set1(1.0), exp_v(neg(g))));
            mul(silu, u)
        }

        #[target_feature(enable = $feat)]
        fn gated_inner(act: Activation, gate: &mut [f32], up: &[f32]) {
            let n = gate.len().min(up.len());
            let body = n / LANES * LANES;
            for (g, u) in gate[..body]
                .chunks_exact_mut(LANES)
                .zip(up[..body].chunks_exact(LANES))
            {
                let (gv, uv) = (load(g), load(u));
                let r = match act {
                    Activation::GeluTanh => gelu_v(gv, uv),
                    Activation::Silu => silu_v(gv, uv),
                };
                store(g, r);
            }
            crate::kernels::gated_scalar(act, &mut gate[body..n], &up[body..n]);
        }

        /// `gate = act(gate) * up` (bit for bit the scalar kernel).
        pub(in super::super) fn gated(act: Activation, gate: &mut [f32], up: &[f32]) {
            // SAFETY: only handed out by `super::super::gated_fn`, after
            // detecting every feature this module is compiled for.
            unsafe { gated_inner(act, gate, up) }
        }

        #[target_feature(enable = $feat)]
        fn exp_scores_inner(sc: &mut [f32], scale: f32, cap: Option<f32>) -> (f32, f32) {
            let body = sc.len() / LANES * LANES;
            let (head, tail) = sc.split_at_mut(body);
            let sv = set1(scale);
            let inv = cap.map(|c| 1.0 / c);
            let mut mv = set1(f32::NEG_INFINITY);
            for c in head.chunks_exact_mut(LANES) {
                let mut v = mul(load(c), sv);
                if let (Some(cap), Some(inv)) = (cap, inv) {
                    v = mul(set1(cap), tanh_v(mul(v, set1(inv))));
                }
                store(c, v);
                // `f32::max` ignores NaN: `maxps` returns its second
                // operand when either is NaN.
                mv = max(v, mv);
            }
            let mut max = reduce_max(mv);
            for v in tail.iter_mut() {
                *v *= scale;
                if let (Some(cap), Some(inv)) = (cap, inv) {
                    *v = cap * crate::kernels::tanh_fast(*v * inv);
                }
                max = max.max(*v);
            }
            let m = set1(max);
            let mut sum_v = set1(0.0);
            for c in head.chunks_exact_mut(LANES) {
                let e = exp_v(sub(load(c), m));
                store(c, e);
                sum_v = add(sum_v, e);
            }
            let mut sum = reduce_add(sum_v);
            for v in tail.iter_mut() {
                *v = crate::kernels::exp_fast(*v - max);
                sum += *v;
            }
            (max, sum)
        }

        /// `crate::kernels::exp_scores` (every element bit for bit the
        /// scalar one; the sum in lanes, so rounded differently).
        pub(in super::super) fn exp_scores(
            sc: &mut [f32],
            scale: f32,
            cap: Option<f32>,
        ) -> (f32, f32) {
            // SAFETY: only handed out by `super::super::exp_scores_fn`,
            // after detecting every feature this module is compiled for.
            unsafe { exp_scores_inner(sc, scale, cap) }
        }

        #[target_feature(enable = $feat)]
        fn exp_shifted_add_inner(x: &mut [f32], shift: &[f32], sum: &mut [f32]) {
            let n = x.len().min(shift.len()).min(sum.len());
            let body = n / LANES * LANES;
            let (x, shift, sum) = (&mut x[..n], &shift[..n], &mut sum[..n]);
            for ((c, m), z) in x[..body]
                .chunks_exact_mut(LANES)
                .zip(shift.chunks_exact(LANES))
                .zip(sum[..body].chunks_exact_mut(LANES))
            {
                let e = exp_v(sub(load(c), load(m)));
                store(c, e);
                store(z, add(load(z), e));
            }
            crate::kernels::exp_shifted_add_scalar(
                &mut x[body..],
                &shift[body..],
                &mut sum[body..],
            );
        }

        /// `crate::kernels::exp_shifted_add` (bit for bit the scalar one).
        pub(in super::super) fn exp_shifted_add(x: &mut [f32], shift: &[f32], sum: &mut [f32]) {
            // SAFETY: only handed out by `super::super::exp_shifted_add_fn`,
            // after detecting every feature this module is compiled for.
            unsafe { exp_shifted_add_inner(x, shift, sum) }
        }
    };
}

/// 16 lanes (AVX-512 F).
pub(super) mod avx512 {
    use super::*;

    type V = __m512;
    const LANES: usize = 16;

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn set1(v: f32) -> V {
        _mm512_set1_ps(v)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn add(a: V, b: V) -> V {
        _mm512_add_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn sub(a: V, b: V) -> V {
        _mm512_sub_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn mul(a: V, b: V) -> V {
        _mm512_mul_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn div(a: V, b: V) -> V {
        _mm512_div_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn min(a: V, b: V) -> V {
        _mm512_min_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn max(a: V, b: V) -> V {
        _mm512_max_ps(a, b)
    }
    /// `-x`: a sign flip.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn neg(x: V) -> V {
        let sign = _mm512_set1_epi32(i32::MIN);
        _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign))
    }
    /// Lanes of `x` below `c` (false for NaN).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn below(x: V, c: f32) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, set1(c))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn zero_where(y: V, m: __mmask16) -> V {
        _mm512_mask_mov_ps(y, m, _mm512_setzero_ps())
    }
    /// `2^k` for `k` the integer in the low mantissa bits of `t` (which
    /// has `magic`'s bits plus `k`).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn pow2(t: V, magic: i32) -> V {
        let k = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(magic));
        _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
            k,
            _mm512_set1_epi32(127),
        )))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn reduce_max(v: V) -> f32 {
        _mm512_reduce_max_ps(v)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn reduce_add(v: V) -> f32 {
        _mm512_reduce_add_ps(v)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn load(s: &[f32]) -> V {
        let s = &s[..LANES];
        // SAFETY: `s` is 16 readable f32; unaligned load.
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn store(d: &mut [f32], v: V) {
        let d = &mut d[..LANES];
        // SAFETY: `d` is 16 writable f32; unaligned store.
        unsafe { _mm512_storeu_ps(d.as_mut_ptr(), v) }
    }

    act_kernels!("avx512f");
}

/// 8 lanes (AVX2; the callers' tables also require FMA and F16C, and
/// these kernels use neither).
pub(super) mod avx2 {
    use super::*;

    type V = __m256;
    const LANES: usize = 8;

    #[target_feature(enable = "avx2")]
    #[inline]
    fn set1(v: f32) -> V {
        _mm256_set1_ps(v)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn add(a: V, b: V) -> V {
        _mm256_add_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sub(a: V, b: V) -> V {
        _mm256_sub_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn mul(a: V, b: V) -> V {
        _mm256_mul_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn div(a: V, b: V) -> V {
        _mm256_div_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn min(a: V, b: V) -> V {
        _mm256_min_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn max(a: V, b: V) -> V {
        _mm256_max_ps(a, b)
    }
    /// `-x`: a sign flip.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn neg(x: V) -> V {
        _mm256_xor_ps(x, _mm256_set1_ps(-0.0))
    }
    /// Lanes of `x` below `c` (all ones; zero for NaN).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn below(x: V, c: f32) -> V {
        _mm256_cmp_ps::<_CMP_LT_OQ>(x, set1(c))
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn zero_where(y: V, m: V) -> V {
        _mm256_andnot_ps(m, y)
    }
    /// `2^k` for `k` the integer in the low mantissa bits of `t` (which
    /// has `magic`'s bits plus `k`).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn pow2(t: V, magic: i32) -> V {
        let k = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(magic));
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            k,
            _mm256_set1_epi32(127),
        )))
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn reduce_max(v: V) -> f32 {
        let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
        _mm_cvtss_f32(m)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn reduce_add(v: V) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn load(s: &[f32]) -> V {
        let s = &s[..LANES];
        // SAFETY: `s` is 8 readable f32; unaligned load.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn store(d: &mut [f32], v: V) {
        let d = &mut d[..LANES];
        // SAFETY: `d` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) }
    }

    act_kernels!("avx2");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{exp_scores_scalar, exp_shifted_add_scalar, gated_scalar};

    type Kernels = (
        &'static str,
        fn(Activation, &mut [f32], &[f32]),
        fn(&mut [f32], f32, Option<f32>) -> (f32, f32),
        fn(&mut [f32], &[f32], &mut [f32]),
    );

    /// Every width this CPU runs (the public entry points test only the
    /// widest).
    fn widths() -> Vec<Kernels> {
        let mut v: Vec<Kernels> = Vec::new();
        if super::super::has_avx2() {
            v.push(("avx2", avx2::gated, avx2::exp_scores, avx2::exp_shifted_add));
        }
        if is_x86_feature_detected!("avx512f") {
            v.push((
                "avx512",
                avx512::gated,
                avx512::exp_scores,
                avx512::exp_shifted_add,
            ));
        }
        v
    }

    /// Values over the whole range the fast exp clamps, its boundaries,
    /// signed zeros, infinities and NaN.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|i| match i % 23 {
                0 => -87.0,
                1 => 88.0,
                2 => -0.0,
                3 => f32::INFINITY,
                4 => f32::NEG_INFINITY,
                5 => f32::NAN,
                6 => -1e4,
                _ => {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (s >> 8) as f32 / (1 << 24) as f32 * 120.0 - 60.0
                }
            })
            .collect()
    }

    #[test]
    fn every_width_matches_the_scalar_kernels_bit_for_bit() {
        for (name, gated, exp_scores, exp_shifted_add) in widths() {
            for n in [0usize, 1, 7, 8, 9, 16, 17, 100, 333] {
                let (g, u) = (values(n, 1), values(n, 2));
                for act in [Activation::GeluTanh, Activation::Silu] {
                    let (mut a, mut b) = (g.clone(), g.clone());
                    gated(act, &mut a, &u);
                    gated_scalar(act, &mut b, &u);
                    for i in 0..n {
                        assert_eq!(a[i].to_bits(), b[i].to_bits(), "{name} {act:?} n={n} i={i}");
                    }
                }
                // Scores are finite (a row of real attention scores, with
                // masked keys at -1e4).
                let x: Vec<f32> = g
                    .iter()
                    .map(|v| if v.is_finite() { *v } else { -1e4 })
                    .collect();
                for cap in [None, Some(30.0f32)] {
                    let (mut a, mut b) = (x.clone(), x.clone());
                    let (ma, sa) = exp_scores(&mut a, 0.125, cap);
                    let (mb, sb) = exp_scores_scalar(&mut b, 0.125, cap);
                    assert_eq!(ma.to_bits(), mb.to_bits(), "{name} max n={n}");
                    for i in 0..n {
                        assert_eq!(a[i].to_bits(), b[i].to_bits(), "{name} scores n={n} i={i}");
                    }
                    assert!(
                        (sa - sb).abs() <= 1e-6 * sb.abs(),
                        "{name} sum n={n}: {sa} vs {sb}"
                    );
                }
                let shift: Vec<f32> = u
                    .iter()
                    .map(|v| if v.is_finite() { *v } else { 0.0 })
                    .collect();
                let (mut a, mut b) = (x.clone(), x.clone());
                let (mut sa, mut sb) = (vec![1.0; n], vec![1.0; n]);
                exp_shifted_add(&mut a, &shift, &mut sa);
                exp_shifted_add_scalar(&mut b, &shift, &mut sb);
                for i in 0..n {
                    assert_eq!(a[i].to_bits(), b[i].to_bits(), "{name} shifted n={n} i={i}");
                    assert_eq!(sa[i].to_bits(), sb[i].to_bits(), "{name} sum n={n} i={i}");
                }
            }
        }
    }
}
