//! Scalar element-wise kernels (written so the compiler can vectorize them):
//! dot products, RMS norm, RoPE, activations, soft-caps, softmax.

use anedvd_graph::{Activation, Rope, RopePairing};

/// `sum(a[i] * b[i])` with 8 independent accumulators.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = 0.0;
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Dot product of little-endian f32 bytes with `x`.
#[inline]
pub fn dot_f32_bytes(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let cr = row.chunks_exact(32);
    let cx = x.chunks_exact(8);
    let (rr, rx) = (cr.remainder(), cx.remainder());
    for (b, y) in cr.zip(cx) {
        for i in 0..8 {
            let w = f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
            acc[i] += w * y[i];
        }
    }
    let mut s = 0.0;
    for (b, y) in rr.chunks_exact(4).zip(rx) {
        s += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * y;
    }
    s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// `x += y` elementwise (residual adds).
pub fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// `y += a * x`.
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// RMS norm of each `w.len()`-wide row of `x` into `out`, times `w`
/// (offset already folded into `w`).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    for (xr, or) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let ss: f32 = dot(xr, xr);
        let scale = 1.0 / (ss / n as f32 + eps).sqrt();
        for ((o, v), g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * scale * g;
        }
    }
}

/// In-place RMS norm of each `w.len()`-wide chunk of `x` (per-head q/k norm).
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let n = w.len();
    for r in x.chunks_exact_mut(n) {
        let ss: f32 = dot(r, r);
        let scale = 1.0 / (ss / n as f32 + eps).sqrt();
        for (v, g) in r.iter_mut().zip(w) {
            *v = *v * scale * g;
        }
    }
}

/// Rotates every head of a row (`n_heads` heads of `head_dim`) at position `pos`.
/// `cs` holds `(cos, sin)` per pair for this position.
pub fn rope_row(row: &mut [f32], head_dim: usize, rope: &Rope, cs: &[(f32, f32)]) {
    let half = rope.n_rot / 2;
    for head in row.chunks_exact_mut(head_dim) {
        for (i, &(c, s)) in cs.iter().enumerate().take(half) {
            let (a, b) = match rope.pairing {
                RopePairing::Norm => (2 * i, 2 * i + 1),
                RopePairing::Neox => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * c - x1 * s;
            head[b] = x0 * s + x1 * c;
        }
    }
}

/// `(cos, sin)` of `pos * inv_freq[i]`, times the attention factor.
pub fn rope_cos_sin(rope: &Rope, pos: usize, out: &mut Vec<(f32, f32)>) {
    out.clear();
    out.extend(rope.inv_freq.iter().map(|f| {
        let (s, c) = (pos as f64 * f).sin_cos();
        (c as f32 * rope.attn_factor, s as f32 * rope.attn_factor)
    }));
}

/// `e^x` without a libm call, branch-free so loops over it vectorize:
/// Cephes' `expf` (range reduction by ln 2 split in two, degree-6
/// polynomial, 2^n assembled in the exponent bits). Relative error about
/// 2 ulp on [-87, 88]; below -87 it returns 0 (as if flushing denormals),
/// above 88 it returns e^88.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    let under = x < -87.0;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = x - n * C1 - n * C2;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5; // Cephes 5.0000001201e-1, which rounds to 0.5 in f32
    let e = p * r * r + r + 1.0;
    let k = t.to_bits().wrapping_sub(MAGIC.to_bits());
    let y = e * f32::from_bits(k.wrapping_add(127) << 23);
    if under {
        0.0
    } else {
        y
    }
}

/// `tanh(x)` through [`exp_fast`]: absolute error below 1e-6.
#[inline(always)]
pub fn tanh_fast(x: f32) -> f32 {
    let t = exp_fast(2.0 * x.clamp(-10.0, 10.0));
    (t - 1.0) / (t + 1.0)
}

/// GELU with the tanh approximation.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const K: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + tanh_fast(K * (x + 0.044_715 * x * x * x)))
}

/// SiLU.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp_fast(-x))
}

/// Values above which [`gated`] splits the work across threads.
const GATED_PAR_MIN: usize = 64 * 1024;

/// `gate = act(gate) * up`, element-wise: SIMD where the CPU has it (the
/// same result bit for bit), in parallel chunks for prefill batches.
pub fn gated(act: Activation, gate: &mut [f32], up: &[f32]) {
    use rayon::prelude::*;
    let f = crate::qkernels::simd_gated().unwrap_or(gated_scalar);
    let n = gate.len().min(up.len());
    if n < GATED_PAR_MIN {
        return f(act, &mut gate[..n], &up[..n]);
    }
    gate[..n]
        .par_chunks_mut(GATED_PAR_MIN / 4)
        .zip(up[..n].par_chunks(GATED_PAR_MIN / 4))
        .for_each(|(g, u)| f(act, g, u));
}

/// [`gated`] in plain scalar code (the reference the SIMD versions match).
pub fn gated_scalar(act: Activation, gate: &mut [f32], up: &[f32]) {
    match act {
        Activation::Silu => gate.iter_mut().zip(up).for_each(|(g, u)| *g = silu(*g) * u),
        Activation::GeluTanh => gate
            .iter_mut()
            .zip(up)
            .for_each(|(g, u)| *g = gelu_tanh(*g) * u),
    }
}

/// `cap * tanh(x / cap)` in place.
pub fn softcap(x: &mut [f32], cap: f32) {
    let inv = 1.0 / cap;
    for v in x {
        *v = cap * tanh_fast(*v * inv);
    }
}

/// Attention scores to unnormalized probabilities, in place: `x *= scale`,
/// then `cap * tanh(x / cap)` when `cap` is set, then `exp(x - max)`;
/// returns `(max, sum)` of the exponentials (`max` over the capped scores).
/// SIMD where the CPU has it: every element is bit for bit
/// [`exp_scores_scalar`]'s, the sum is accumulated in lanes (rounded
/// differently, within a few ulp).
pub fn exp_scores(x: &mut [f32], scale: f32, cap: Option<f32>) -> (f32, f32) {
    match crate::qkernels::simd_exp_scores() {
        Some(f) => f(x, scale, cap),
        None => exp_scores_scalar(x, scale, cap),
    }
}

/// [`exp_scores`] in plain scalar code (sum in element order).
pub fn exp_scores_scalar(x: &mut [f32], scale: f32, cap: Option<f32>) -> (f32, f32) {
    x.iter_mut().for_each(|v| *v *= scale);
    if let Some(cap) = cap {
        softcap(x, cap);
    }
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = exp_fast(*v - max);
        sum += *v;
    }
    (max, sum)
}

/// One key's row of an online-softmax tile, in place along query rows:
/// `x[r] = exp(x[r] - shift[r])` and `sum[r] += x[r]` (over the shortest
/// of the three). SIMD where the CPU has AVX-512 or AVX2 (bit for bit
/// [`exp_shifted_add_scalar`]: the same operations per lane); elsewhere the
/// scalar loop, which the compiler vectorizes at the baseline width (NEON
/// on aarch64, SSE2 on older x86-64).
pub fn exp_shifted_add(x: &mut [f32], shift: &[f32], sum: &mut [f32]) {
    match crate::qkernels::simd_exp_shifted_add() {
        Some(f) => f(x, shift, sum),
        None => exp_shifted_add_scalar(x, shift, sum),
    }
}

/// [`exp_shifted_add`] in plain scalar code.
pub fn exp_shifted_add_scalar(x: &mut [f32], shift: &[f32], sum: &mut [f32]) {
    for ((v, &m), z) in x.iter_mut().zip(shift).zip(sum.iter_mut()) {
        *v = exp_fast(*v - m);
        *z += *v;
    }
}

/// Little-endian f16 bytes to f32 (`dst.len()` values, or fewer when
/// `src` is shorter; the conversion is exact). 8 lanes with F16C where
/// the CPU has it (x86-64 AVX2 hosts); elsewhere [`f16_to_f32_scalar`].
pub fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    match crate::qkernels::simd_f16_to_f32() {
        Some(f) => f(src, dst),
        None => f16_to_f32_scalar(src, dst),
    }
}

/// [`f16_to_f32`] without SIMD of our own: the bytes gathered into f16
/// scratch, then one bulk conversion (which `half` runs with the CPU's
/// conversion instructions where it detects them, as on aarch64).
pub fn f16_to_f32_scalar(src: &[u8], dst: &mut [f32]) {
    thread_local! {
        static HALF: std::cell::RefCell<Vec<half::f16>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let n = dst.len().min(src.len() / 2);
    HALF.with(|h| {
        let mut h = h.borrow_mut();
        h.clear();
        h.extend(
            src[..2 * n]
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]])),
        );
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(&h[..], &mut dst[..n]);
    });
}

/// In-place softmax.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = exp_fast(*v - max);
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive_on_ragged_lengths() {
        for n in [0usize, 1, 7, 8, 9, 31, 64, 100] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - naive).abs() < 1e-4);
            let bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
            assert!((dot_f32_bytes(&bytes, &b) - naive).abs() < 1e-4);
        }
    }

    fn rope(pairing: RopePairing, n_rot: usize) -> Rope {
        Rope {
            pairing,
            n_rot,
            inv_freq: (0..n_rot / 2).map(|i| 0.7f64.powi(i as i32)).collect(),
            attn_factor: 1.0,
        }
    }

    /// Partial rotary: NORM on an interleaved head equals NEOX on the
    /// half-split head; dims beyond `n_rot` pass through; norms are kept.
    #[test]
    fn rope_pairings_agree_under_permutation_with_partial_rotary() {
        let (hd, n_rot) = (12, 8);
        let x: Vec<f32> = (0..2 * hd).map(|i| (i as f32 * 0.9).sin()).collect();
        // Interleave the first n_rot dims of each head: (i, i + n_rot/2) -> (2i, 2i + 1).
        let mut inter = x.clone();
        for h in 0..2 {
            for i in 0..n_rot / 2 {
                inter[h * hd + 2 * i] = x[h * hd + i];
                inter[h * hd + 2 * i + 1] = x[h * hd + i + n_rot / 2];
            }
        }
        let (neox, norm) = (
            rope(RopePairing::Neox, n_rot),
            rope(RopePairing::Norm, n_rot),
        );
        let mut cs = Vec::new();
        rope_cos_sin(&neox, 5, &mut cs);
        let (mut a, mut b) = (x.clone(), inter.clone());
        rope_row(&mut a, hd, &neox, &cs);
        rope_row(&mut b, hd, &norm, &cs);
        for h in 0..2 {
            for i in 0..n_rot / 2 {
                assert!((a[h * hd + i] - b[h * hd + 2 * i]).abs() < 1e-6);
                assert!((a[h * hd + i + n_rot / 2] - b[h * hd + 2 * i + 1]).abs() < 1e-6);
            }
            assert_eq!(
                a[h * hd + n_rot..(h + 1) * hd],
                x[h * hd + n_rot..(h + 1) * hd]
            );
        }
        assert!((dot(&a, &a) - dot(&x, &x)).abs() < 1e-4);
        assert!(a != x);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = vec![1.0, 2.0, 3.0, -1e9];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(x[3], 0.0);
    }

    #[test]
    fn fast_exp_and_tanh_match_libm() {
        let mut worst_exp = 0.0f64;
        let mut worst_tanh = 0.0f64;
        for i in -200_000..=200_000 {
            let x = i as f32 * 4.35e-4; // [-87, 87]
            let want = f64::from(x).exp();
            let rel = (f64::from(exp_fast(x)) - want).abs() / want;
            worst_exp = worst_exp.max(rel);
            let y = i as f32 * 1e-4; // [-20, 20]
            let err = (f64::from(tanh_fast(y)) - f64::from(y).tanh()).abs();
            worst_tanh = worst_tanh.max(err);
        }
        assert!(worst_exp < 5e-7, "exp relative error {worst_exp}");
        assert!(worst_tanh < 1e-6, "tanh absolute error {worst_tanh}");
        assert_eq!(exp_fast(-1000.0), 0.0);
        assert_eq!(exp_fast(f32::NEG_INFINITY), 0.0);
        assert!(exp_fast(1000.0).is_finite());
        let mut x = vec![0.0, f32::NEG_INFINITY];
        softmax(&mut x);
        assert_eq!(x, [1.0, 0.0]);
    }

    #[test]
    fn gelu_known_values() {
        // torch.nn.functional.gelu(torch.tensor([1.0, -0.5]), approximate="tanh")
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu_tanh(-0.5) - -0.154_286).abs() < 1e-5);
    }
}
