//! AVX2 prefill kernels: each weight block (Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K,
//! Q6_K) is unpacked once and dotted with four activation rows. Per token the arithmetic (and so the f32
//! result) is exactly that of the single-row AVX2 kernels.

use super::super::generic::unpack_k4_scales;
use super::super::{Q8Block, Rows4Q8, Rows4Q8K};
use super::avx2::{
    bytes_from_bits, f16v, hsum, hsum128, k4_mins, ld256, ld256i, nibbles, rd16, rd32, scale_pair,
    signed_iq4_nl, signed_q8_0,
};
use anedvd_quant::BlockQ8K;
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

/// Weights offset to unsigned (`u = w + off`), as `offset_dot!`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn offset_lanes(u: __m256i, y: &Q8Block, off8: i32) -> __m256 {
    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, ld256i(&y.qs)), _mm256_set1_epi16(1));
    _mm256_cvtepi32_ps(_mm256_sub_epi32(p, _mm256_set1_epi32(off8 * y.isum)))
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
x4!(
    dot4_q4_0,
    rows4_q4_0,
    inner4_q4_0,
    18,
    |xb| nibbles(&xb[2..]),
    |w, yb| offset_lanes(w, yb, 1)
);
x4!(
    dot4_q5_0,
    rows4_q5_0,
    inner4_q5_0,
    22,
    |xb| {
        let hi = _mm256_and_si256(bytes_from_bits(rd32(xb, 2)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(&xb[6..]), hi)
    },
    |w, yb| offset_lanes(w, yb, 2)
);

/// The four-row kernels, by weight type.
pub(super) const Q8_0: Rows4Q8 = rows4_q8_0;
/// See [`Q8_0`].
pub(super) const IQ4_NL: Rows4Q8 = rows4_iq4_nl;
/// See [`Q8_0`].
pub(super) const Q4_0: Rows4Q8 = rows4_q4_0;
/// See [`Q8_0`].
pub(super) const Q5_0: Rows4Q8 = rows4_q5_0;

// ------------------------------------------------------------ K-quants × Q8_K

/// Q4_K, four tokens: nibbles and scales unpacked once per block.
#[target_feature(enable = "avx2,fma,f16c")]
fn dot4_q4_k(x: &[u8], y: [&[BlockQ8K]; 4]) -> [f32; 4] {
    let m4 = _mm256_set1_epi8(0x0f);
    let nb = y.iter().fold(x.len() / 144, |n, r| n.min(r.len()));
    let y = y.map(|r| &r[..nb]);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut acc_m = [_mm_setzero_ps(); 4];
    for (b, xb) in x.chunks_exact(144).take(nb).enumerate() {
        let (dx, dminx) = (f16v(rd16(xb, 0)), f16v(rd16(xb, 2)));
        let sm = unpack_k4_scales(&xb[4..16]);
        for t in 0..4 {
            let prod = k4_mins(&sm, &y[t][b]);
            let dmin = -y[t][b].d * dminx;
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[t]);
        }
        let mut sumi = [_mm256_setzero_si256(); 4];
        for j in 0..4 {
            let q4bits = ld256(&xb[16 + 32 * j..]);
            let q4l = _mm256_and_si256(q4bits, m4);
            let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(q4bits), m4);
            let (sl, sh) = (
                _mm256_set1_epi16(i16::from(sm[2 * j])),
                _mm256_set1_epi16(i16::from(sm[2 * j + 1])),
            );
            for t in 0..4 {
                let q8 = &y[t][b].qs;
                let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(q4l, ld256i(&q8[64 * j..])), sl);
                let ph =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(q4h, ld256i(&q8[64 * j + 32..])), sh);
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(pl, ph));
            }
        }
        for t in 0..4 {
            let d = y[t][b].d * dx;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    [0, 1, 2, 3].map(|t| hsum(acc[t]) + hsum128(acc_m[t]))
}

/// Q6_K, four tokens: 6-bit weights and scales unpacked once per block.
#[target_feature(enable = "avx2,fma,f16c")]
fn dot4_q6_k(x: &[u8], y: [&[BlockQ8K]; 4]) -> [f32; 4] {
    let (m4, m2, m32) = (
        _mm256_set1_epi8(0x0f),
        _mm256_set1_epi8(3),
        _mm256_set1_epi8(32),
    );
    let nb = y.iter().fold(x.len() / 210, |n, r| n.min(r.len()));
    let y = y.map(|r| &r[..nb]);
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, xb) in x.chunks_exact(210).take(nb).enumerate() {
        let dx = f16v(rd16(xb, 208));
        let sc = &xb[192..208];
        let mut sumi = [_mm256_setzero_si256(); 4];
        for c in 0..2 {
            let b1 = ld256(&xb[64 * c..]);
            let b2 = ld256(&xb[64 * c + 32..]);
            let hb = ld256(&xb[128 + 32 * c..]);
            let h = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
            let q = [
                _mm256_or_si256(_mm256_and_si256(b1, m4), h(hb)),
                _mm256_or_si256(_mm256_and_si256(b2, m4), h(_mm256_srli_epi16::<2>(hb))),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(b1), m4),
                    h(_mm256_srli_epi16::<4>(hb)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(b2), m4),
                    h(_mm256_srli_epi16::<6>(hb)),
                ),
            ];
            for (k, qk) in q.into_iter().enumerate() {
                let i = 8 * c + 2 * k;
                let sp = scale_pair(i16::from(sc[i] as i8), i16::from(sc[i + 1] as i8));
                for t in 0..4 {
                    let q8 = ld256i(&y[t][b].qs[128 * c + 32 * k..]);
                    let p = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(qk, q8),
                        _mm256_maddubs_epi16(m32, q8),
                    );
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, sp));
                }
            }
        }
        for t in 0..4 {
            let d = y[t][b].d * dx;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    [0, 1, 2, 3].map(|t| hsum(acc[t]))
}

macro_rules! rows4k {
    ($($rows:ident, $inner:ident => $dot:ident;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $inner(w: &[u8], rb: usize, a: [&[BlockQ8K]; 4], out: &mut [f32]) {
            if rb == 0 {
                return;
            }
            for (o, row) in out.chunks_exact_mut(4).zip(w.chunks_exact(rb)) {
                o.copy_from_slice(&$dot(row, a));
            }
        }

        /// Four activation rows at once: `out[4 * r + t] = W[r] · a[t]`.
        fn $rows(w: &[u8], rb: usize, a: [&[BlockQ8K]; 4], out: &mut [f32]) {
            // SAFETY: only reachable through the x86 tables, which
            // `avx2_table` / `avx512_table` return after detecting AVX2, FMA
            // and F16C.
            unsafe { $inner(w, rb, a, out) }
        }
    )*};
}

rows4k! {
    rows4_q4_k, inner4_q4_k => dot4_q4_k;
    rows4_q6_k, inner4_q6_k => dot4_q6_k;
}

/// See [`Q8_0`].
pub(super) const Q4_K: Rows4Q8K = rows4_q4_k;
/// See [`Q8_0`].
pub(super) const Q6_K: Rows4Q8K = rows4_q6_k;
