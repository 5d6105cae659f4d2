//! AVX-512 prefill kernels: a tile of weight rows (four at a time) against
//! four activation rows, accumulators kept in registers. Each weight block is
//! unpacked once per four tokens and each activation block loaded once per
//! four rows. Built twice, like `avx512.rs`: with VNNI and with BW only.
//!
//! Per (row, token) the integer block sums are exactly the single-row
//! kernels'; only where the weight offset is folded in (legacy types) and
//! the f32 accumulation order differ, so results agree with the single-row
//! AVX-512 kernels to the f32 reduction tolerance.

use super::super::generic::unpack_k4_scales;
use super::super::{Q8Block, Rows4Q8};
use super::avx2::{f16v, ld256, ld256i, rd16};
use super::avx512::{dp_bw, dp_vnni, join, ld512i, unpack_q45_0};
use anedvd_quant::BlockQ8K;
use std::arch::x86_64::*;

macro_rules! kernels_x4 {
    ($m:ident, $feat:literal, $dp:ident, $dpw:ident, $q8_0_x4:literal, $doc:literal) => {
        #[doc = $doc]
        pub(super) mod $m {
            use super::*;

            /// Q4_0 (`FIVE = false`) / Q5_0 / Q8_0 (`BB = 34`) rows `w` (`R`
            /// rows of `rb` bytes) against four activation rows of `nb`
            /// blocks, two blocks per step. The weight offset (8, 16, or 128
            /// for Q8_0's `w ^ 0x80`) enters as
            /// `-OFF * sum(y)` in the first lane of each block's eight, so
            /// each block's lane sum is exactly `sum((w + OFF - OFF) * y)`.
            #[target_feature(enable = $feat)]
            #[inline]
            fn tile_q45<const R: usize, const BB: usize, const FIVE: bool>(
                w: &[u8],
                rb: usize,
                y: [&[Q8Block]; 4],
                nb: usize,
            ) -> [[f32; 4]; R] {
                let off = if BB == Q8_0_BYTES {
                    -128
                } else if FIVE {
                    -16
                } else {
                    -8
                };
                let mut acc = [[_mm512_setzero_ps(); 4]; R];
                let mut b = 0;
                while b < nb {
                    let pair = b + 1 < nb;
                    let mut u = [_mm512_setzero_si512(); R];
                    let mut dw = [_mm512_setzero_ps(); R];
                    for r in 0..R {
                        let row = &w[r * rb..(r + 1) * rb];
                        let x0 = &row[b * BB..(b + 1) * BB];
                        let x1 = if pair {
                            &row[(b + 1) * BB..(b + 2) * BB]
                        } else {
                            x0
                        };
                        u[r] = if BB == Q8_0_BYTES {
                            unpack_q8_0(x0, x1)
                        } else {
                            unpack_q45_0::<FIVE>(x0, x1)
                        };
                        dw[r] = _mm512_mask_blend_ps(
                            0xff00,
                            _mm512_set1_ps(f16v(rd16(x0, 0))),
                            _mm512_set1_ps(f16v(rd16(x1, 0))),
                        );
                    }
                    // Unrolled over the four tokens so the accumulators
                    // stay in registers.
                    macro_rules! token {
                        ($t:literal) => {{
                            let y0 = &y[$t][b];
                            let y1 = if pair { &y[$t][b + 1] } else { &Q8Block::ZERO };
                            let yv = join(ld256i(&y0.qs), ld256i(&y1.qs));
                            let dy = _mm512_mask_blend_ps(
                                0xff00,
                                _mm512_set1_ps(y0.d),
                                _mm512_set1_ps(y1.d),
                            );
                            let init = _mm512_maskz_mov_epi32(
                                0x0101,
                                _mm512_mask_blend_epi32(
                                    0xff00,
                                    _mm512_set1_epi32(off * y0.isum),
                                    _mm512_set1_epi32(off * y1.isum),
                                ),
                            );
                            for r in 0..R {
                                let p = $dp(init, u[r], yv);
                                let d = _mm512_mul_ps(dw[r], dy);
                                acc[r][$t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r][$t]);
                            }
                        }};
                    }
                    token!(0);
                    token!(1);
                    token!(2);
                    token!(3);
                    b += 2;
                }
                acc.map(|a| a.map(|v| _mm512_reduce_add_ps(v)))
            }

            /// Q4_K rows against four activation rows: per 64 weights,
            /// `vpmaddubsw` pairs then `vpdpwssd`/`vpmaddwd` with the
            /// sub-block scales (the integer sums of the single-row kernel);
            /// the mins through `bsums` per block.
            #[target_feature(enable = $feat)]
            #[inline]
            fn tile_q4_k<const R: usize>(
                w: &[u8],
                rb: usize,
                y: [&[BlockQ8K]; 4],
                nb: usize,
            ) -> [[f32; 4]; R] {
                let m4 = _mm256_set1_epi8(0x0f);
                let mut acc = [[_mm512_setzero_ps(); 4]; R];
                for b in 0..nb {
                    let mut sm = [[0u8; 16]; R];
                    let mut mins = [_mm_setzero_si128(); R];
                    let mut dx = [0.0f32; R];
                    let mut dminx = [0.0f32; R];
                    for r in 0..R {
                        let xb = &w[r * rb + b * 144..r * rb + (b + 1) * 144];
                        dx[r] = f16v(rd16(xb, 0));
                        dminx[r] = f16v(rd16(xb, 2));
                        sm[r] = unpack_k4_scales(&xb[4..16]);
                        let mut hi = [0u8; 8];
                        hi.copy_from_slice(&sm[r][8..16]);
                        mins[r] = _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(hi)));
                    }
                    // Mins: `-dmin * dy * sum(m * bsum)` in lanes 0..4.
                    for (t, yt) in y.iter().enumerate() {
                        let yb = &yt[b];
                        // SAFETY: `bsums` is 16 i16 = 32 readable bytes; unaligned load.
                        let bs = unsafe { _mm256_loadu_si256(yb.bsums.as_ptr().cast()) };
                        let q8s = _mm_hadd_epi16(
                            _mm256_castsi256_si128(bs),
                            _mm256_extracti128_si256::<1>(bs),
                        );
                        for r in 0..R {
                            let prod = _mm_cvtepi32_ps(_mm_madd_epi16(mins[r], q8s));
                            acc[r][t] = _mm512_fmadd_ps(
                                _mm512_set1_ps(-yb.d * dminx[r]),
                                _mm512_zextps128_ps512(prod),
                                acc[r][t],
                            );
                        }
                    }
                    let mut sumi = [[_mm512_setzero_si512(); 4]; R];
                    for j in 0..4 {
                        let mut u = [_mm512_setzero_si512(); R];
                        let mut sc = [_mm512_setzero_si512(); R];
                        for r in 0..R {
                            let bits = ld256(&w[r * rb + b * 144 + 16 + 32 * j..]);
                            let lo = _mm256_and_si256(bits, m4);
                            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
                            u[r] = join(lo, hi);
                            sc[r] = _mm512_mask_blend_epi16(
                                0xffff_0000,
                                _mm512_set1_epi16(i16::from(sm[r][2 * j])),
                                _mm512_set1_epi16(i16::from(sm[r][2 * j + 1])),
                            );
                        }
                        for (t, yt) in y.iter().enumerate() {
                            let yv = ld512i(&yt[b].qs[64 * j..]);
                            for r in 0..R {
                                let p = _mm512_maddubs_epi16(u[r], yv);
                                sumi[r][t] = $dpw(sumi[r][t], p, sc[r]);
                            }
                        }
                    }
                    for (t, yt) in y.iter().enumerate() {
                        for r in 0..R {
                            let d = _mm512_set1_ps(yt[b].d * dx[r]);
                            acc[r][t] =
                                _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi[r][t]), acc[r][t]);
                        }
                    }
                }
                acc.map(|a| a.map(|v| _mm512_reduce_add_ps(v)))
            }

            /// Q6_K rows against four activation rows: 6-bit weights as
            /// unsigned bytes, the `-32` folded in through `bsums` (as the
            /// single-row AVX-512 kernel), scales through `vpdpwssd` /
            /// `vpmaddwd` on `vpmaddubsw` pairs.
            #[target_feature(enable = $feat)]
            #[inline]
            fn tile_q6_k<const R: usize>(
                w: &[u8],
                rb: usize,
                y: [&[BlockQ8K]; 4],
                nb: usize,
            ) -> [[f32; 4]; R] {
                let (m4, m2) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(3));
                let mut acc = [[_mm512_setzero_ps(); 4]; R];
                for b in 0..nb {
                    let mut sc16 = [_mm256_setzero_si256(); R];
                    let mut dx = [0.0f32; R];
                    for r in 0..R {
                        let xb = &w[r * rb + b * 210..r * rb + (b + 1) * 210];
                        dx[r] = f16v(rd16(xb, 208));
                        sc16[r] = _mm256_cvtepi8_epi16(super::super::avx2::ld128(&xb[192..]));
                    }
                    let mut sumi = [[_mm512_setzero_si512(); 4]; R];
                    // `-32 * sum(sc * bsum)` in lanes 0..8.
                    for (t, yt) in y.iter().enumerate() {
                        // SAFETY: `bsums` is 16 i16 = 32 readable bytes; unaligned load.
                        let bs = unsafe { _mm256_loadu_si256(yt[b].bsums.as_ptr().cast()) };
                        for r in 0..R {
                            let corr = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc16[r], bs));
                            sumi[r][t] = _mm512_sub_epi32(
                                _mm512_setzero_si512(),
                                _mm512_zextsi256_si512(corr),
                            );
                        }
                    }
                    for c in 0..2 {
                        let mut q = [[_mm512_setzero_si512(); 2]; R];
                        let mut s = [[_mm512_setzero_si512(); 2]; R];
                        for r in 0..R {
                            let xb = &w[r * rb + b * 210..r * rb + (b + 1) * 210];
                            let b1 = ld256(&xb[64 * c..]);
                            let b2 = ld256(&xb[64 * c + 32..]);
                            let hb = ld256(&xb[128 + 32 * c..]);
                            let h = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
                            let q0 = _mm256_or_si256(_mm256_and_si256(b1, m4), h(hb));
                            let q1 = _mm256_or_si256(
                                _mm256_and_si256(b2, m4),
                                h(_mm256_srli_epi16::<2>(hb)),
                            );
                            let q2 = _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(b1), m4),
                                h(_mm256_srli_epi16::<4>(hb)),
                            );
                            let q3 = _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(b2), m4),
                                h(_mm256_srli_epi16::<6>(hb)),
                            );
                            q[r] = [join(q0, q1), join(q2, q3)];
                            let sc = &xb[192 + 8 * c..];
                            // Scale of each 16-weight group, per 16-bit lane.
                            for (m, sv) in s[r].iter_mut().enumerate() {
                                let k = 4 * m;
                                let rep = |i: usize| {
                                    (u64::from(sc[k + i] as i8 as i16 as u16)
                                        * 0x0001_0001_0001_0001) as i64
                                };
                                let (s0, s1, s2, s3) = (rep(0), rep(1), rep(2), rep(3));
                                *sv = _mm512_set_epi64(s3, s3, s2, s2, s1, s1, s0, s0);
                            }
                        }
                        for (t, yt) in y.iter().enumerate() {
                            for m in 0..2 {
                                let yv = ld512i(&yt[b].qs[128 * c + 64 * m..]);
                                for r in 0..R {
                                    let p = _mm512_maddubs_epi16(q[r][m], yv);
                                    sumi[r][t] = $dpw(sumi[r][t], p, s[r][m]);
                                }
                            }
                        }
                    }
                    for (t, yt) in y.iter().enumerate() {
                        for r in 0..R {
                            let d = _mm512_set1_ps(yt[b].d * dx[r]);
                            acc[r][t] =
                                _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi[r][t]), acc[r][t]);
                        }
                    }
                }
                acc.map(|a| a.map(|v| _mm512_reduce_add_ps(v)))
            }

            /// Row loops: four rows per tile step, then single rows.
            macro_rules! rows4 {
                ($rows:ident, $inner:ident, $a:ty, $bb:expr, $r4:expr, $r1:expr) => {
                    #[target_feature(enable = $feat)]
                    fn $inner(w: &[u8], rb: usize, a: [&[$a]; 4], out: &mut [f32]) {
                        if rb == 0 {
                            return;
                        }
                        let nb = a.iter().fold(rb / $bb, |n, r| n.min(r.len()));
                        let a = a.map(|r| &r[..nb]);
                        let n = (w.len() / rb).min(out.len() / 4);
                        let mut r = 0;
                        while r + 4 <= n {
                            let res = $r4(&w[r * rb..(r + 4) * rb], rb, a, nb);
                            for (o, v) in out[4 * r..4 * r + 16].chunks_exact_mut(4).zip(res) {
                                o.copy_from_slice(&v);
                            }
                            r += 4;
                        }
                        while r < n {
                            let [v] = $r1(&w[r * rb..(r + 1) * rb], rb, a, nb);
                            out[4 * r..4 * r + 4].copy_from_slice(&v);
                            r += 1;
                        }
                    }

                    /// Four activation rows at once: `out[4 * r + t] = W[r] · a[t]`.
                    pub(in super::super) fn $rows(
                        w: &[u8],
                        rb: usize,
                        a: [&[$a]; 4],
                        out: &mut [f32],
                    ) {
                        // SAFETY: only reachable through the x86 AVX-512
                        // tables, which `avx512_table` returns after
                        // detecting every feature in `$feat`.
                        unsafe { $inner(w, rb, a, out) }
                    }
                };
            }
            rows4!(
                rows4_q4_0,
                inner4_q4_0,
                Q8Block,
                18,
                tile_q45::<4, 18, false>,
                tile_q45::<1, 18, false>
            );
            rows4!(
                rows4_q5_0,
                inner4_q5_0,
                Q8Block,
                22,
                tile_q45::<4, 22, true>,
                tile_q45::<1, 22, true>
            );
            rows4!(
                rows4_q8_0,
                inner4_q8_0,
                Q8Block,
                Q8_0_BYTES,
                tile_q45::<4, Q8_0_BYTES, false>,
                tile_q45::<1, Q8_0_BYTES, false>
            );

            /// Q8_0's four-token kernel where this build can run it: Q8_0's
            /// `w + 128` reaches 255, and `vpmaddubsw` (the BW build's dot)
            /// saturates `255 * 127 * 2` at i16, so BW keeps AVX2's kernel.
            pub(in super::super) const X4_Q8_0: Rows4Q8 = if $q8_0_x4 {
                rows4_q8_0
            } else {
                super::super::avx2_x4::Q8_0
            };
            rows4!(
                rows4_q4_k,
                inner4_q4_k,
                BlockQ8K,
                144,
                tile_q4_k::<4>,
                tile_q4_k::<1>
            );
            rows4!(
                rows4_q6_k,
                inner4_q6_k,
                BlockQ8K,
                210,
                tile_q6_k::<4>,
                tile_q6_k::<1>
            );
        }
    };
}

/// Bytes per Q8_0 block (f16 scale + 32 signed weights).
const Q8_0_BYTES: usize = 34;

/// A pair of Q8_0 blocks' weights as unsigned bytes `w + 128` (`w ^ 0x80`),
/// `[block0 | block1]`, for `vpdpbusd`.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn unpack_q8_0(x0: &[u8], x1: &[u8]) -> __m512i {
    let w = join(ld256(&x0[2..]), ld256(&x1[2..]));
    _mm512_xor_si512(w, _mm512_set1_epi8(-128))
}

/// `acc + sum of 2 (i16 × i16)` per i32 lane, with VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn dpw_vnni(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    _mm512_dpwssd_epi32(acc, a, b)
}

/// `acc + sum of 2 (i16 × i16)` per i32 lane, without VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) fn dpw_bw(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
}

kernels_x4!(
    vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dp_vnni,
    dpw_vnni,
    true,
    "Four-token kernels using `vpdpbusd` / `vpdpwssd` (AVX512-VNNI)."
);
kernels_x4!(
    bw,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    dp_bw,
    dpw_bw,
    false,
    "Four-token kernels using `vpmaddubsw` + `vpmaddwd` (AVX512-BW)."
);
