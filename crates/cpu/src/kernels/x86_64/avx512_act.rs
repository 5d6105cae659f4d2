//! AVX-512 gated activations, bit for bit `crate::kernels::gated`: the
//! same IEEE operations in the same order per lane (separate multiplies and
//! adds where the scalar code has them, no FMA contraction), so the result
//! does not depend on the ISA.

use anedvd_graph::Activation;
use std::arch::x86_64::*;

/// `crate::kernels::exp_fast` on 16 lanes. The clamps keep NaN (the
/// constant is the first operand of `vmaxps`/`vminps`, which return the
/// second when either is NaN), as `f32::clamp` does.
#[target_feature(enable = "avx512f")]
#[inline]
fn exp16(x: __m512) -> __m512 {
    let s = _mm512_set1_ps;
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, s(-87.0));
    let x = _mm512_min_ps(s(88.0), _mm512_max_ps(s(-87.0), x));
    const MAGIC: f32 = 12_582_912.0;
    let t = _mm512_add_ps(_mm512_mul_ps(x, s(std::f32::consts::LOG2_E)), s(MAGIC));
    let n = _mm512_sub_ps(t, s(MAGIC));
    let r = _mm512_sub_ps(
        _mm512_sub_ps(x, _mm512_mul_ps(n, s(0.693_359_4))),
        _mm512_mul_ps(n, s(-2.121_944_4e-4)),
    );
    let mut p = s(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = _mm512_add_ps(_mm512_mul_ps(p, r), s(c));
    }
    let e = _mm512_add_ps(
        _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r),
        s(1.0),
    );
    let k = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(MAGIC.to_bits() as i32),
    );
    let pow = _mm512_slli_epi32::<23>(_mm512_add_epi32(k, _mm512_set1_epi32(127)));
    let y = _mm512_mul_ps(e, _mm512_castsi512_ps(pow));
    _mm512_mask_mov_ps(y, under, _mm512_setzero_ps())
}

/// `gelu_tanh(g) * u` on 16 lanes.
#[target_feature(enable = "avx512f")]
#[inline]
fn gelu16(g: __m512, u: __m512) -> __m512 {
    let s = _mm512_set1_ps;
    let cube = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(s(0.044_715), g), g), g);
    let arg = _mm512_mul_ps(s(0.797_884_6), _mm512_add_ps(g, cube));
    let th = tanh16(arg);
    let gelu = _mm512_mul_ps(_mm512_mul_ps(s(0.5), g), _mm512_add_ps(s(1.0), th));
    _mm512_mul_ps(gelu, u)
}

/// `crate::kernels::tanh_fast` on 16 lanes.
#[target_feature(enable = "avx512f")]
#[inline]
fn tanh16(x: __m512) -> __m512 {
    let s = _mm512_set1_ps;
    let c = _mm512_min_ps(s(10.0), _mm512_max_ps(s(-10.0), x));
    let t = exp16(_mm512_mul_ps(s(2.0), c));
    _mm512_div_ps(_mm512_sub_ps(t, s(1.0)), _mm512_add_ps(t, s(1.0)))
}

/// `silu(g) * u` on 16 lanes.
#[target_feature(enable = "avx512f")]
#[inline]
fn silu16(g: __m512, u: __m512) -> __m512 {
    // `-x`: a sign flip.
    let sign = _mm512_set1_epi32(i32::MIN);
    let neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign));
    let e = exp16(neg);
    let silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0), e));
    _mm512_mul_ps(silu, u)
}

#[target_feature(enable = "avx512f")]
fn gated_inner(act: Activation, gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let body = n / 16 * 16;
    for (g, u) in gate[..body]
        .chunks_exact_mut(16)
        .zip(up[..body].chunks_exact(16))
    {
        // SAFETY: `g` and `u` are 16 f32 each; unaligned loads and store.
        unsafe {
            let (gv, uv) = (_mm512_loadu_ps(g.as_ptr()), _mm512_loadu_ps(u.as_ptr()));
            let r = match act {
                Activation::GeluTanh => gelu16(gv, uv),
                Activation::Silu => silu16(gv, uv),
            };
            _mm512_storeu_ps(g.as_mut_ptr(), r);
        }
    }
    crate::kernels::gated_scalar(act, &mut gate[body..n], &up[body..n]);
}

/// `gate = act(gate) * up` with AVX-512 (bit for bit the scalar kernel).
pub(super) fn gated(act: Activation, gate: &mut [f32], up: &[f32]) {
    // SAFETY: only handed out by `super::gated_fn`, after detecting
    // AVX-512 F.
    unsafe { gated_inner(act, gate, up) }
}

#[target_feature(enable = "avx512f")]
fn exp_scores_inner(sc: &mut [f32], scale: f32, cap: Option<f32>) -> (f32, f32) {
    let body = sc.len() / 16 * 16;
    let (head, tail) = sc.split_at_mut(body);
    let sv = _mm512_set1_ps(scale);
    let inv = cap.map(|c| 1.0 / c);
    let mut mv = _mm512_set1_ps(f32::NEG_INFINITY);
    for c in head.chunks_exact_mut(16) {
        // SAFETY: `c` is 16 f32; unaligned load and store.
        unsafe {
            let mut v = _mm512_mul_ps(_mm512_loadu_ps(c.as_ptr()), sv);
            if let (Some(cap), Some(inv)) = (cap, inv) {
                let th = tanh16(_mm512_mul_ps(v, _mm512_set1_ps(inv)));
                v = _mm512_mul_ps(_mm512_set1_ps(cap), th);
            }
            _mm512_storeu_ps(c.as_mut_ptr(), v);
            // `f32::max` ignores NaN: `vmaxps` returns its second operand
            // when either is NaN.
            mv = _mm512_max_ps(v, mv);
        }
    }
    let mut max = _mm512_reduce_max_ps(mv);
    for v in tail.iter_mut() {
        *v *= scale;
        if let (Some(cap), Some(inv)) = (cap, inv) {
            *v = cap * crate::kernels::tanh_fast(*v * inv);
        }
        max = max.max(*v);
    }
    let m = _mm512_set1_ps(max);
    let mut sum_v = _mm512_setzero_ps();
    for c in head.chunks_exact_mut(16) {
        // SAFETY: `c` is 16 f32; unaligned load and store.
        unsafe {
            let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), m));
            _mm512_storeu_ps(c.as_mut_ptr(), e);
            sum_v = _mm512_add_ps(sum_v, e);
        }
    }
    let mut sum = _mm512_reduce_add_ps(sum_v);
    for v in tail.iter_mut() {
        *v = crate::kernels::exp_fast(*v - max);
        sum += *v;
    }
    (max, sum)
}

/// `crate::kernels::exp_scores` with AVX-512 (every element bit for bit
/// the scalar one; the sum in 16 lanes, so rounded differently).
pub(super) fn exp_scores(sc: &mut [f32], scale: f32, cap: Option<f32>) -> (f32, f32) {
    // SAFETY: only handed out by `super::exp_scores_fn`, after detecting
    // AVX-512 F.
    unsafe { exp_scores_inner(sc, scale, cap) }
}

#[target_feature(enable = "avx512f")]
fn exp_shifted_add_inner(x: &mut [f32], shift: &[f32], sum: &mut [f32]) {
    let n = x.len().min(shift.len()).min(sum.len());
    let body = n / 16 * 16;
    let (x, shift, sum) = (&mut x[..n], &shift[..n], &mut sum[..n]);
    for ((c, m), z) in x[..body]
        .chunks_exact_mut(16)
        .zip(shift.chunks_exact(16))
        .zip(sum[..body].chunks_exact_mut(16))
    {
        // SAFETY: `c`, `m` and `z` are 16 f32 each; unaligned loads and
        // stores.
        unsafe {
            let e = exp16(_mm512_sub_ps(
                _mm512_loadu_ps(c.as_ptr()),
                _mm512_loadu_ps(m.as_ptr()),
            ));
            _mm512_storeu_ps(c.as_mut_ptr(), e);
            _mm512_storeu_ps(
                z.as_mut_ptr(),
                _mm512_add_ps(_mm512_loadu_ps(z.as_ptr()), e),
            );
        }
    }
    crate::kernels::exp_shifted_add_scalar(&mut x[body..], &shift[body..], &mut sum[body..]);
}

/// `crate::kernels::exp_shifted_add` with AVX-512 (bit for bit the scalar
/// one).
pub(super) fn exp_shifted_add(x: &mut [f32], shift: &[f32], sum: &mut [f32]) {
    // SAFETY: only handed out by `super::exp_shifted_add_fn`, after
    // detecting AVX-512 F.
    unsafe { exp_shifted_add_inner(x, shift, sum) }
}
