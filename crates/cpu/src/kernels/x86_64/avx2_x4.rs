//! AVX2 prefill kernels for the types without a panel kernel here (Q8_0,
//! IQ4_NL): each weight block is unpacked once and dotted with four
//! activation rows. Per token the arithmetic (and so the f32 result) is
//! exactly that of the single-row AVX2 kernels. (A type with a panel kernel
//! never reaches its four-row one: both serve batches of four or more
//! tokens, and `Kernels::matmul` tries the panel first.)

use super::super::{Q8Block, Rows4Q8};
use super::avx2::{f16v, hsum, ld256i, rd16, signed_iq4_nl, signed_q8_0};
use std::arch::x86_64::*;

/// Four-row dot: `$prep` unpacks a block once, `$int` gives one token's 8
/// f32 lanes. Blocks alternate between two accumulators, as in `avx2.rs`.
macro_rules! x4 {
    ($name:ident, $rows:ident, $inner:ident, $bb:expr, |$xb:ident| $prep:expr, |$w:ident, $yb:ident| $int:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $name(x: &[u8], y: [&[Q8Block]; 4]) -> [f32; 4] {
            let nb = y.iter().fold(x.len() / $bb, |n, r| n.min(r.len()));
            let y = y.map(|r| &r[..nb]);
            let mut even = [_mm256_setzero_ps(); 4];
            let mut odd = [_mm256_setzero_ps(); 4];
            let block = |b: usize, acc: &mut [__m256; 4]| {
                let $xb = &x[b * $bb..(b + 1) * $bb];
                let $w = $prep;
                let dx = f16v(rd16($xb, 0));
                for t in 0..4 {
                    let $yb = &y[t][b];
                    let p: __m256 = $int;
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * $yb.d), p, acc[t]);
                }
            };
            let mut b = 0;
            while b + 2 <= nb {
                block(b, &mut even);
                block(b + 1, &mut odd);
                b += 2;
            }
            if b < nb {
                block(b, &mut even);
            }
            [0, 1, 2, 3].map(|t| hsum(_mm256_add_ps(even[t], odd[t])))
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        fn $inner(w: &[u8], rb: usize, a: [&[Q8Block]; 4], out: &mut [f32]) {
            if rb == 0 {
                return;
            }
            for (o, row) in out.chunks_exact_mut(4).zip(w.chunks_exact(rb)) {
                o.copy_from_slice(&$name(row, a));
            }
        }

        /// Four activation rows at once: `out[4 * r + t] = W[r] · a[t]`.
        pub(super) fn $rows(w: &[u8], rb: usize, a: [&[Q8Block]; 4], out: &mut [f32]) {
            // SAFETY: only reachable through the x86 tables, which
            // `avx2_table` / `avx512_table` return after detecting AVX2, FMA
            // and F16C.
            unsafe { $inner(w, rb, a, out) }
        }
    };
}

/// Signed weights × signed activations (`sign` trick), as `mul_sum_i8`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn signed_lanes(w: __m256i, ax: __m256i, y: &Q8Block) -> __m256 {
    let sy = _mm256_sign_epi8(ld256i(&y.qs), w);
    let dot = _mm256_maddubs_epi16(ax, sy);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, _mm256_set1_epi16(1)))
}

x4!(
    dot4_q8_0,
    rows4_q8_0,
    inner4_q8_0,
    34,
    |xb| {
        let w = signed_q8_0(xb);
        (w, _mm256_sign_epi8(w, w))
    },
    |w, yb| signed_lanes(w.0, w.1, yb)
);
x4!(
    dot4_iq4_nl,
    rows4_iq4_nl,
    inner4_iq4_nl,
    18,
    |xb| {
        let w = signed_iq4_nl(xb);
        (w, _mm256_sign_epi8(w, w))
    },
    |w, yb| signed_lanes(w.0, w.1, yb)
);
/// The four-row kernels, by weight type.
pub(super) const Q8_0: Rows4Q8 = rows4_q8_0;
/// See [`Q8_0`].
pub(super) const IQ4_NL: Rows4Q8 = rows4_iq4_nl;
