//! AVX-512 prefill kernels for Q4_K and Q6_K on repacked weight panels, as
//! `avx512_panel` does for the legacy types: 16 rows interleaved per
//! 4-weight chunk (unsigned bytes: Q4_K's nibbles, Q6_K's `q + 32`), so one
//! `vpdpbusd` with four broadcast activation bytes advances 16 rows.
//!
//! Per token and block the integer sums are exactly the single-row
//! kernels': each sub-block's `sum(q * y)` times its scale (`vpmulld`), the
//! Q4_K mins and the Q6_K `-32` through `bsums` (`vpdpwssd` on scale pairs);
//! then one conversion and FMA per block for all 16 rows.

use super::super::{PanelOut, PanelScratch};
use super::avx2_panel_k::{bsum_pairs, quad, row_data, unpack, Kind};
use super::avx512::{dp_bw, dp_vnni};
use super::avx512::{dpw_bw, dpw_vnni};
use super::avx512_panel::{
    ld512, ld512ps, st512, store, transpose16, TransposeIdx, PANEL, PB, TOKEN_CHUNK,
};
use anedvd_quant::BlockQ8K;
use std::arch::x86_64::*;

/// Repacked bytes per 256-weight block of a panel.
const KB: usize = 8 * PB;

/// Repacks `n` rows into panels in `sc`: `wq` gets `KB` bytes per panel
/// block, `wi` `16 * kind.ints()` i32 and `ws` `16 * kind.floats()` f32;
/// rows past `n` in the last panel are zero.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn repack(kind: Kind, w: &[u8], rb: usize, n: usize, nb: usize, sc: &mut PanelScratch) {
    let panels = n.div_ceil(PANEL);
    let (ni, nf) = (kind.ints() * PANEL, kind.floats() * PANEL);
    // Every byte of `wq` is written below (missing rows as zeros); `wi` and
    // `ws` only for present rows, so the last panel's are cleared first.
    // Clearing the whole scratch on every call cost ~3% of a batched pass.
    sc.wq.resize(panels * nb * KB, 0);
    sc.wi.resize(panels * nb * ni, 0);
    sc.ws.resize(panels * nb * nf, 0.0);
    let last = panels.saturating_sub(1) * nb;
    sc.wi[last * ni..].fill(0);
    sc.ws[last * nf..].fill(0.0);
    let ix = TransposeIdx::new();
    let bb = kind.bytes();
    for p in 0..panels {
        let rows = PANEL.min(n - p * PANEL);
        for b in 0..nb {
            let blk = p * nb + b;
            let mut u = [[_mm256_setzero_si256(); 8]; PANEL];
            let wi = &mut sc.wi[blk * ni..(blk + 1) * ni];
            let ws = &mut sc.ws[blk * nf..(blk + 1) * nf];
            for (lane, ur) in u.iter_mut().enumerate().take(rows) {
                let at = (p * PANEL + lane) * rb + b * bb;
                let xb = &w[at..at + bb];
                *ur = unpack(kind, xb);
                row_data(kind, xb, lane, PANEL, wi, ws);
            }
            let groups = sc.wq[blk * KB..(blk + 1) * KB].chunks_exact_mut(PB);
            for (g, dst) in groups.enumerate() {
                let col: [__m256i; PANEL] = std::array::from_fn(|r| u[r][g]);
                for (k, v) in transpose16(&col, &ix).into_iter().enumerate() {
                    st512(&mut dst[64 * k..], v);
                }
            }
        }
    }
}

macro_rules! panel_k_kernels {
    ($m:ident, $feat:literal, $dp:ident, $dpw:ident, $doc:literal) => {
        #[doc = $doc]
        pub(super) mod $m {
            use super::*;

            /// `sum over sub-blocks of scale * sum(q * y)` for `T` tokens,
            /// sub-blocks of `SUB` weights (32 for Q4_K, 16 for Q6_K).
            #[target_feature(enable = $feat)]
            #[inline]
            fn scaled_dots<const T: usize, const SUB: usize>(
                wq: &[u8],
                wi: &[i32],
                y: [&BlockQ8K; T],
            ) -> [__m512i; T] {
                let mut isum = [_mm512_setzero_si512(); T];
                for s in 0..256 / SUB {
                    let mut i0 = [_mm512_setzero_si512(); T];
                    let mut i1 = [_mm512_setzero_si512(); T];
                    for k in (0..SUB / 4).step_by(2) {
                        let c = s * SUB / 4 + k;
                        let w0 = ld512(&wq[64 * c..]);
                        let w1 = ld512(&wq[64 * c + 64..]);
                        for t in 0..T {
                            i0[t] = $dp(i0[t], w0, _mm512_set1_epi32(quad(y[t], 4 * c)));
                            i1[t] = $dp(i1[t], w1, _mm512_set1_epi32(quad(y[t], 4 * c + 4)));
                        }
                    }
                    let scale = ld512(bytes_of(&wi[PANEL * s..PANEL * (s + 1)]));
                    for t in 0..T {
                        let mut d = _mm512_add_epi32(i0[t], i1[t]);
                        if SUB == 16 {
                            // Q6_K's `q + 32`: take 32 times the sub-block's
                            // activation sum off before scaling (an add-pipe
                            // op; `vpdpwssd` would share the multiply pipes).
                            let off = 32 * i32::from(y[t].bsums[s]);
                            d = _mm512_sub_epi32(d, _mm512_set1_epi32(off));
                        }
                        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(d, scale));
                    }
                }
                isum
            }

            /// `sum over pairs q of (s[2q] * b[2q] + s[2q+1] * b[2q+1])`
            /// with the scale pairs at `wi` and `b` the i16 pairs `bp`.
            #[target_feature(enable = $feat)]
            #[inline]
            fn pair_dots<const T: usize, const N: usize>(
                wi: &[i32],
                bp: [[i32; N]; T],
            ) -> [__m512i; T] {
                let mut acc = [_mm512_setzero_si512(); T];
                for q in 0..N {
                    let s = ld512(bytes_of(&wi[PANEL * q..PANEL * (q + 1)]));
                    for t in 0..T {
                        acc[t] = $dpw(acc[t], s, _mm512_set1_epi32(bp[t][q]));
                    }
                }
                acc
            }

            /// One Q4_K panel against `T` tokens.
            #[target_feature(enable = $feat)]
            #[inline]
            fn panel_q4k<const T: usize>(
                sc: &PanelScratch,
                p: usize,
                nb: usize,
                y: [&[BlockQ8K]; T],
            ) -> [__m512; T] {
                let (ni, nf) = (Kind::Q4K.ints() * PANEL, Kind::Q4K.floats() * PANEL);
                let mut acc = [_mm512_setzero_ps(); T];
                for b in 0..nb {
                    let blk = p * nb + b;
                    let wq = &sc.wq[blk * KB..(blk + 1) * KB];
                    let wi = &sc.wi[blk * ni..(blk + 1) * ni];
                    let ws = &sc.ws[blk * nf..(blk + 1) * nf];
                    let yb = y.map(|r| &r[b]);
                    let isum = scaled_dots::<T, 32>(wq, wi, yb);
                    let bp = yb.map(bsum_pairs);
                    let imin = pair_dots::<T, 4>(&wi[8 * PANEL..], bp);
                    let (d, dmin) = (ld512ps(ws), ld512ps(&ws[PANEL..]));
                    for t in 0..T {
                        let dy = _mm512_set1_ps(yb[t].d);
                        let main = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dy));
                        let mins =
                            _mm512_mul_ps(_mm512_cvtepi32_ps(imin[t]), _mm512_mul_ps(dmin, dy));
                        acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(main, mins));
                    }
                }
                acc
            }

            /// One Q6_K panel against `T` tokens.
            #[target_feature(enable = $feat)]
            #[inline]
            fn panel_q6k<const T: usize>(
                sc: &PanelScratch,
                p: usize,
                nb: usize,
                y: [&[BlockQ8K]; T],
            ) -> [__m512; T] {
                let (ni, nf) = (Kind::Q6K.ints() * PANEL, Kind::Q6K.floats() * PANEL);
                let mut acc = [_mm512_setzero_ps(); T];
                for b in 0..nb {
                    let blk = p * nb + b;
                    let wq = &sc.wq[blk * KB..(blk + 1) * KB];
                    let wi = &sc.wi[blk * ni..(blk + 1) * ni];
                    let yb = y.map(|r| &r[b]);
                    let isum = scaled_dots::<T, 16>(wq, wi, yb);
                    let d = ld512ps(&sc.ws[blk * nf..(blk + 1) * nf]);
                    for t in 0..T {
                        let dd = _mm512_mul_ps(d, _mm512_set1_ps(yb[t].d));
                        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), dd, acc[t]);
                    }
                }
                acc
            }

            macro_rules! entry {
                ($name:ident, $inner:ident, $kind:expr, $panel:ident) => {
                    #[target_feature(enable = $feat)]
                    fn $inner(
                        w: &[u8],
                        rb: usize,
                        a: &[BlockQ8K],
                        nb: usize,
                        o: &mut PanelOut<'_>,
                        sc: &mut PanelScratch,
                    ) {
                        let Some((n_rows, n_tok)) =
                            o.dims(w.len(), rb, nb * $kind.bytes(), a.len(), nb)
                        else {
                            return;
                        };
                        repack($kind, w, rb, n_rows, nb, sc);
                        let row = |t: usize| &a[t * nb..(t + 1) * nb];
                        for c0 in (0..n_tok).step_by(TOKEN_CHUNK) {
                            let c1 = (c0 + TOKEN_CHUNK).min(n_tok);
                            for p in 0..n_rows.div_ceil(PANEL) {
                                let mut t = c0;
                                while t + 4 <= c1 {
                                    let y = [row(t), row(t + 1), row(t + 2), row(t + 3)];
                                    store($panel::<4>(sc, p, nb, y), o, n_rows, p, t);
                                    t += 4;
                                }
                                while t < c1 {
                                    store($panel::<1>(sc, p, nb, [row(t)]), o, n_rows, p, t);
                                    t += 1;
                                }
                            }
                        }
                    }

                    /// Panel row loop: `out[r * n_tok + t] = W[r] · a[t]`
                    /// for every row of `w` (`rb` bytes) and token of `a`
                    /// (`nb` blocks each); `sc` is scratch.
                    pub(in super::super) fn $name(
                        w: &[u8],
                        rb: usize,
                        a: &[BlockQ8K],
                        nb: usize,
                        o: &mut PanelOut<'_>,
                        sc: &mut PanelScratch,
                    ) {
                        // SAFETY: only reachable through the x86 AVX-512
                        // tables, which `avx512_table` returns after
                        // detecting every feature in `$feat`.
                        unsafe { $inner(w, rb, a, nb, o, sc) }
                    }
                };
            }
            entry!(panel_q4_k, inner_q4_k, Kind::Q4K, panel_q4k);
            entry!(panel_q6_k, inner_q6_k, Kind::Q6K, panel_q6k);
        }
    };
}

/// The bytes of an i32 slice (for the 64-byte loads).
fn bytes_of(s: &[i32]) -> &[u8] {
    // SAFETY: any i32 is four initialized bytes; u8 has alignment 1 and the
    // length covers exactly the same memory.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

panel_k_kernels!(
    vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dp_vnni,
    dpw_vnni,
    "K-quant panel kernels using `vpdpbusd` / `vpdpwssd` (AVX512-VNNI)."
);
panel_k_kernels!(
    bw,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    dp_bw,
    dpw_bw,
    "K-quant panel kernels using `vpmaddubsw` + `vpmaddwd` (AVX512-BW; the \
     unsigned bytes stay below 64)."
);
