//! NEON gated activations and attention score exponentiation, bit for bit
//! `crate::kernels::gated_scalar` and `exp_scores_scalar` element by
//! element: the same IEEE operations in the same order per lane (separate
//! multiplies and adds where the scalar code has them, never `fmla`), so
//! the result does not depend on the ISA. Also the f32 load and store the
//! other aarch64 kernels share.

use super::neon::{ld_f32, st_f32};
use anedvd_graph::Activation;
use std::arch::aarch64::*;

/// `crate::kernels::exp_fast` on 4 lanes. The clamps keep NaN (`fmax` and
/// `fmin` return a NaN operand), as `f32::clamp` does.
#[target_feature(enable = "neon")]
#[inline]
fn exp4(x: float32x4_t) -> float32x4_t {
    let s = vdupq_n_f32;
    let under = vcltq_f32(x, s(-87.0));
    let x = vminq_f32(vmaxq_f32(x, s(-87.0)), s(88.0));
    const MAGIC: f32 = 12_582_912.0;
    let t = vaddq_f32(vmulq_f32(x, s(std::f32::consts::LOG2_E)), s(MAGIC));
    let n = vsubq_f32(t, s(MAGIC));
    let r = vsubq_f32(
        vsubq_f32(x, vmulq_f32(n, s(0.693_359_4))),
        vmulq_f32(n, s(-2.121_944_4e-4)),
    );
    let mut p = s(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = vaddq_f32(vmulq_f32(p, r), s(c));
    }
    let e = vaddq_f32(vaddq_f32(vmulq_f32(vmulq_f32(p, r), r), r), s(1.0));
    // 2^n in the exponent bits, with the scalar code's wrapping integer ops.
    let k = vsubq_u32(vreinterpretq_u32_f32(t), vdupq_n_u32(MAGIC.to_bits()));
    let pow = vshlq_n_u32::<23>(vaddq_u32(k, vdupq_n_u32(127)));
    let y = vmulq_f32(e, vreinterpretq_f32_u32(pow));
    vbslq_f32(under, s(0.0), y)
}

/// `crate::kernels::tanh_fast` on 4 lanes.
#[target_feature(enable = "neon")]
#[inline]
fn tanh4(x: float32x4_t) -> float32x4_t {
    let s = vdupq_n_f32;
    let c = vminq_f32(vmaxq_f32(x, s(-10.0)), s(10.0));
    let t = exp4(vmulq_f32(s(2.0), c));
    vdivq_f32(vsubq_f32(t, s(1.0)), vaddq_f32(t, s(1.0)))
}

/// `gelu_tanh(g) * u` on 4 lanes.
#[target_feature(enable = "neon")]
#[inline]
fn gelu4(g: float32x4_t, u: float32x4_t) -> float32x4_t {
    let s = vdupq_n_f32;
    let cube = vmulq_f32(vmulq_f32(vmulq_f32(s(0.044_715), g), g), g);
    let th = tanh4(vmulq_f32(s(0.797_884_6), vaddq_f32(g, cube)));
    let gelu = vmulq_f32(vmulq_f32(s(0.5), g), vaddq_f32(s(1.0), th));
    vmulq_f32(gelu, u)
}

/// `silu(g) * u` on 4 lanes.
#[target_feature(enable = "neon")]
#[inline]
fn silu4(g: float32x4_t, u: float32x4_t) -> float32x4_t {
    let e = exp4(vnegq_f32(g));
    vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0), e)), u)
}

#[target_feature(enable = "neon")]
fn gated_inner(act: Activation, gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let body = n / 4 * 4;
    for (g, u) in gate[..body]
        .chunks_exact_mut(4)
        .zip(up[..body].chunks_exact(4))
    {
        let (gv, uv) = (ld_f32(g), ld_f32(u));
        let r = match act {
            Activation::GeluTanh => gelu4(gv, uv),
            Activation::Silu => silu4(gv, uv),
        };
        st_f32(g, r);
    }
    crate::kernels::gated_scalar(act, &mut gate[body..n], &up[body..n]);
}

/// `gate = act(gate) * up` with NEON (bit for bit the scalar kernel).
pub(in super::super) fn gated(act: Activation, gate: &mut [f32], up: &[f32]) {
    // SAFETY: NEON is part of every aarch64 target's baseline.
    unsafe { gated_inner(act, gate, up) }
}

/// `cap * tanh(v / cap)` (given `inv = 1 / cap`) on 4 lanes.
#[target_feature(enable = "neon")]
#[inline]
fn softcap4(v: float32x4_t, cap: f32, inv: f32) -> float32x4_t {
    vmulq_n_f32(tanh4(vmulq_n_f32(v, inv)), cap)
}

#[target_feature(enable = "neon")]
fn exp_scores_inner(sc: &mut [f32], scale: f32, cap: Option<f32>) -> (f32, f32) {
    let body = sc.len() / 4 * 4;
    let (head, tail) = sc.split_at_mut(body);
    let cap = cap.map(|c| (c, 1.0 / c));
    let mut mv = vdupq_n_f32(f32::NEG_INFINITY);
    for c in head.chunks_exact_mut(4) {
        let mut v = vmulq_n_f32(ld_f32(c), scale);
        if let Some((cap, inv)) = cap {
            v = softcap4(v, cap, inv);
        }
        st_f32(c, v);
        // `fmaxnm` is `f32::max` (NaN ignored, +0 above -0), so the order
        // of the maximum does not matter.
        mv = vmaxnmq_f32(mv, v);
    }
    let mut max = vmaxnmvq_f32(mv);
    for v in tail.iter_mut() {
        *v *= scale;
        if let Some((cap, inv)) = cap {
            *v = cap * crate::kernels::tanh_fast(*v * inv);
        }
        max = max.max(*v);
    }
    let m = vdupq_n_f32(max);
    // Four accumulators (16 partial sums), as many as the AVX-512 lanes.
    let mut sums = [vdupq_n_f32(0.0); 4];
    let mut chunks = head.chunks_exact_mut(16);
    for c in &mut chunks {
        for (k, s) in sums.iter_mut().enumerate() {
            let e = exp4(vsubq_f32(ld_f32(&c[4 * k..]), m));
            st_f32(&mut c[4 * k..], e);
            *s = vaddq_f32(*s, e);
        }
    }
    for c in chunks.into_remainder().chunks_exact_mut(4) {
        let e = exp4(vsubq_f32(ld_f32(c), m));
        st_f32(c, e);
        sums[0] = vaddq_f32(sums[0], e);
    }
    let mut sum = vaddvq_f32(vaddq_f32(
        vaddq_f32(sums[0], sums[1]),
        vaddq_f32(sums[2], sums[3]),
    ));
    for v in tail.iter_mut() {
        *v = crate::kernels::exp_fast(*v - max);
        sum += *v;
    }
    (max, sum)
}

/// `crate::kernels::exp_scores` with NEON (every element and the maximum
/// bit for bit the scalar ones; the sum in lanes, so rounded differently).
pub(in super::super) fn exp_scores(sc: &mut [f32], scale: f32, cap: Option<f32>) -> (f32, f32) {
    // SAFETY: NEON is part of every aarch64 target's baseline.
    unsafe { exp_scores_inner(sc, scale, cap) }
}
