//! AVX2 prefill kernels for Q4_K and Q6_K on repacked weight panels:
//! `avx512_panel_k`'s scheme at 8 rows per register (see `avx2_panel` for
//! the legacy types). Each call's rows are unpacked to unsigned bytes
//! (Q4_K's nibbles, Q6_K's `q + 32`, below 64: `vpmaddubsw` pair sums
//! cannot saturate) and interleaved 8 rows per 4-weight chunk, so four
//! broadcast activation bytes advance 8 rows per `vpmaddubsw` +
//! `vpmaddwd`.
//!
//! Per token and block the integer sums are exactly the single-row
//! kernels': each sub-block's `sum(q * y)` times its scale (`vpmulld`), the
//! Q4_K mins and the Q6_K `-32` through `bsums` (`vpmaddwd` on scale
//! pairs); then the f32 combination per block for all 8 rows.

use super::super::generic::unpack_k4_scales;
use super::super::{PanelOut, PanelScratch};
use super::avx2::{f16v, ld256, rd16};
use super::avx2_panel::{ld256ps, st256, store, transpose8, PANEL, PB, TOKEN_CHUNK};
use anedvd_quant::BlockQ8K;
use std::arch::x86_64::*;

/// Repacked bytes per 256-weight block of a panel.
const KB: usize = 8 * PB;

/// The K-quant types these kernels (and `avx512_panel_k`'s) take.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Q4K,
    Q6K,
}

impl Kind {
    /// Bytes per block.
    pub(super) const fn bytes(self) -> usize {
        match self {
            Kind::Q4K => 144,
            Kind::Q6K => 210,
        }
    }

    /// i32 vectors (one lane per panel row) of per-row integer data per
    /// block: Q4_K's 8 sub-block scales and 4 min pairs; Q6_K's 16 scales
    /// and 8 scale pairs.
    pub(super) const fn ints(self) -> usize {
        match self {
            Kind::Q4K => 12,
            Kind::Q6K => 24,
        }
    }

    /// f32 vectors per block: Q4_K's `d` and `dmin`; Q6_K's `d`.
    pub(super) const fn floats(self) -> usize {
        match self {
            Kind::Q4K => 2,
            Kind::Q6K => 1,
        }
    }
}

/// Two i16 in one i32 lane (`lo` in the low half).
pub(super) fn pair(lo: i16, hi: i16) -> i32 {
    i32::from(lo as u16) | (i32::from(hi) << 16)
}

/// Token `y`'s sub-block sums of one super-block in pairs: sub-blocks 2j
/// and 2j + 1 as the low and high i16 of entry j, the operand of a
/// `vpmaddwd` / `vpdpwssd` against Q4_K mins in pairs (a sub-block's sum of
/// 32 values in -127..=127 fits 16 bits).
pub(super) fn bsum_pairs(y: &BlockQ8K) -> [i32; 4] {
    let s32 = |s: usize| y.bsums[2 * s] + y.bsums[2 * s + 1];
    std::array::from_fn(|j| pair(s32(2 * j), s32(2 * j + 1)))
}

/// The 256 weights of one block as eight 32-weight groups of unsigned bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn unpack(kind: Kind, xb: &[u8]) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0f);
    let mut g = [_mm256_setzero_si256(); 8];
    match kind {
        Kind::Q4K => {
            for j in 0..4 {
                let bits = ld256(&xb[16 + 32 * j..]);
                g[2 * j] = _mm256_and_si256(bits, m4);
                g[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
            }
        }
        Kind::Q6K => {
            let m2 = _mm256_set1_epi8(3);
            let h = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
            for c in 0..2 {
                let b1 = ld256(&xb[64 * c..]);
                let b2 = ld256(&xb[64 * c + 32..]);
                let hb = ld256(&xb[128 + 32 * c..]);
                g[4 * c] = _mm256_or_si256(_mm256_and_si256(b1, m4), h(hb));
                g[4 * c + 1] =
                    _mm256_or_si256(_mm256_and_si256(b2, m4), h(_mm256_srli_epi16::<2>(hb)));
                g[4 * c + 2] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(b1), m4),
                    h(_mm256_srli_epi16::<4>(hb)),
                );
                g[4 * c + 3] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(b2), m4),
                    h(_mm256_srli_epi16::<6>(hb)),
                );
            }
        }
    }
    g
}

/// Writes the per-row data of row `lane`'s block `xb` into a panel block's
/// `wi` (integer vectors of `panel` lanes: Q4_K's sub-block scales and min
/// pairs, Q6_K's scales and scale pairs) and `ws` (its f32 scales).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn row_data(
    kind: Kind,
    xb: &[u8],
    lane: usize,
    panel: usize,
    wi: &mut [i32],
    ws: &mut [f32],
) {
    match kind {
        Kind::Q4K => {
            let sm = unpack_k4_scales(&xb[4..16]);
            for s in 0..8 {
                wi[s * panel + lane] = i32::from(sm[s]);
            }
            for q in 0..4 {
                let (m0, m1) = (i16::from(sm[8 + 2 * q]), i16::from(sm[9 + 2 * q]));
                wi[(8 + q) * panel + lane] = pair(m0, m1);
            }
            ws[lane] = f16v(rd16(xb, 0));
            ws[panel + lane] = f16v(rd16(xb, 2));
        }
        Kind::Q6K => {
            let s = |i: usize| i16::from(xb[192 + i] as i8);
            for i in 0..16 {
                wi[i * panel + lane] = i32::from(s(i));
            }
            for q in 0..8 {
                wi[(16 + q) * panel + lane] = pair(s(2 * q), s(2 * q + 1));
            }
            ws[lane] = f16v(rd16(xb, 208));
        }
    }
}

/// Repacks `n` rows into panels in `sc`: `wq` gets `KB` bytes per panel
/// block, `wi` `8 * kind.ints()` i32 and `ws` `8 * kind.floats()` f32;
/// rows past `n` in the last panel are zero.
#[target_feature(enable = "avx2,fma,f16c")]
fn repack(kind: Kind, w: &[u8], rb: usize, n: usize, nb: usize, sc: &mut PanelScratch) {
    let panels = n.div_ceil(PANEL);
    let (ni, nf) = (kind.ints() * PANEL, kind.floats() * PANEL);
    // Every byte of `wq` is written below (missing rows as zeros); `wi` and
    // `ws` only for present rows, so the last panel's are cleared first.
    sc.wq.resize(panels * nb * KB, 0);
    sc.wi.resize(panels * nb * ni, 0);
    sc.ws.resize(panels * nb * nf, 0.0);
    let last = panels.saturating_sub(1) * nb;
    sc.wi[last * ni..].fill(0);
    sc.ws[last * nf..].fill(0.0);
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
                for (k, v) in transpose8(&col).into_iter().enumerate() {
                    st256(&mut dst[32 * k..], v);
                }
            }
        }
    }
}

/// Four activation bytes `o..o + 4` of `y` as one i32.
#[inline(always)]
pub(super) fn quad(y: &BlockQ8K, o: usize) -> i32 {
    // One bounds check and one load: with a check per byte the compiler
    // cannot merge the four byte loads when `o` is not a constant.
    let b = &y.qs[o..o + 4];
    i32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
}

/// Eight i32 from the start of `s`.
#[target_feature(enable = "avx2")]
#[inline]
fn ld_i32(s: &[i32]) -> __m256i {
    let s = &s[..8];
    // SAFETY: `s` is 8 readable i32; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// `acc + sum of adjacent u8 × i8 products` in i32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn dp(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
    _mm256_add_epi32(acc, p)
}

/// `sum over sub-blocks of scale * sum(q * y)` for `T` tokens, sub-blocks
/// of `SUB` weights (32 for Q4_K, 16 for Q6_K).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scaled_dots<const T: usize, const SUB: usize>(
    wq: &[u8],
    wi: &[i32],
    y: [&BlockQ8K; T],
) -> [__m256i; T] {
    let mut isum = [_mm256_setzero_si256(); T];
    for s in 0..256 / SUB {
        let mut i0 = [_mm256_setzero_si256(); T];
        let mut i1 = [_mm256_setzero_si256(); T];
        for k in (0..SUB / 4).step_by(2) {
            let c = s * SUB / 4 + k;
            let w0 = ld256(&wq[32 * c..]);
            let w1 = ld256(&wq[32 * c + 32..]);
            for t in 0..T {
                i0[t] = dp(i0[t], w0, _mm256_set1_epi32(quad(y[t], 4 * c)));
                i1[t] = dp(i1[t], w1, _mm256_set1_epi32(quad(y[t], 4 * c + 4)));
            }
        }
        let scale = ld_i32(&wi[PANEL * s..]);
        for t in 0..T {
            let d = _mm256_add_epi32(i0[t], i1[t]);
            isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(d, scale));
        }
    }
    isum
}

/// `sum over pairs q of (s[2q] * b[2q] + s[2q+1] * b[2q+1])` with the scale
/// pairs at `wi` and `b` the i16 pairs `bp`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn pair_dots<const T: usize, const N: usize>(wi: &[i32], bp: [[i32; N]; T]) -> [__m256i; T] {
    let mut acc = [_mm256_setzero_si256(); T];
    for q in 0..N {
        let s = ld_i32(&wi[PANEL * q..]);
        for t in 0..T {
            let p = _mm256_madd_epi16(s, _mm256_set1_epi32(bp[t][q]));
            acc[t] = _mm256_add_epi32(acc[t], p);
        }
    }
    acc
}

/// One Q4_K panel against `T` tokens.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn panel_q4k<const T: usize>(
    sc: &PanelScratch,
    p: usize,
    nb: usize,
    y: [&[BlockQ8K]; T],
) -> [__m256; T] {
    let (ni, nf) = (Kind::Q4K.ints() * PANEL, Kind::Q4K.floats() * PANEL);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let blk = p * nb + b;
        let wq = &sc.wq[blk * KB..(blk + 1) * KB];
        let wi = &sc.wi[blk * ni..(blk + 1) * ni];
        let ws = &sc.ws[blk * nf..(blk + 1) * nf];
        let yb = y.map(|r| &r[b]);
        let isum = scaled_dots::<T, 32>(wq, wi, yb);
        let bp = yb.map(bsum_pairs);
        let imin = pair_dots::<T, 4>(&wi[8 * PANEL..], bp);
        let (d, dmin) = (ld256ps(ws), ld256ps(&ws[PANEL..]));
        for t in 0..T {
            let dy = _mm256_set1_ps(yb[t].d);
            let main = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, dy));
            let mins = _mm256_mul_ps(_mm256_cvtepi32_ps(imin[t]), _mm256_mul_ps(dmin, dy));
            acc[t] = _mm256_add_ps(acc[t], _mm256_sub_ps(main, mins));
        }
    }
    acc
}

/// One Q6_K panel against `T` tokens.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn panel_q6k<const T: usize>(
    sc: &PanelScratch,
    p: usize,
    nb: usize,
    y: [&[BlockQ8K]; T],
) -> [__m256; T] {
    let (ni, nf) = (Kind::Q6K.ints() * PANEL, Kind::Q6K.floats() * PANEL);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let blk = p * nb + b;
        let wq = &sc.wq[blk * KB..(blk + 1) * KB];
        let wi = &sc.wi[blk * ni..(blk + 1) * ni];
        let yb = y.map(|r| &r[b]);
        let isum = scaled_dots::<T, 16>(wq, wi, yb);
        let bp =
            yb.map(|v| [0, 1, 2, 3, 4, 5, 6, 7].map(|q| pair(v.bsums[2 * q], v.bsums[2 * q + 1])));
        let ioff = pair_dots::<T, 8>(&wi[16 * PANEL..], bp);
        let d = ld256ps(&sc.ws[blk * nf..(blk + 1) * nf]);
        for t in 0..T {
            let i = _mm256_sub_epi32(isum[t], _mm256_slli_epi32::<5>(ioff[t]));
            let dd = _mm256_mul_ps(d, _mm256_set1_ps(yb[t].d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), dd, acc[t]);
        }
    }
    acc
}

macro_rules! entry {
    ($name:ident, $inner:ident, $kind:expr, $panel:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $inner(
            w: &[u8],
            rb: usize,
            a: &[BlockQ8K],
            nb: usize,
            o: &mut PanelOut<'_>,
            sc: &mut PanelScratch,
        ) {
            let Some((n_rows, n_tok)) = o.dims(w.len(), rb, nb * $kind.bytes(), a.len(), nb) else {
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

        /// Panel row loop: `out[r * n_tok + t] = W[r] · a[t]` for every row
        /// of `w` (`rb` bytes) and token of `a` (`nb` blocks each), or
        /// token-major (see `PanelOut`); `sc` is scratch.
        pub(super) fn $name(
            w: &[u8],
            rb: usize,
            a: &[BlockQ8K],
            nb: usize,
            o: &mut PanelOut<'_>,
            sc: &mut PanelScratch,
        ) {
            // SAFETY: only reachable through `avx2::TABLE`, which
            // `avx2_table` returns after detecting AVX2, FMA and F16C.
            unsafe { $inner(w, rb, a, nb, o, sc) }
        }
    };
}

entry!(panel_q4_k, inner_q4_k, Kind::Q4K, panel_q4k);
entry!(panel_q6_k, inner_q6_k, Kind::Q6K, panel_q6k);
