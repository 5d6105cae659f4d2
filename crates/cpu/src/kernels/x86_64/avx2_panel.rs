//! AVX2 prefill kernels for Q4_0 and Q5_0 on weight panels repacked per
//! call: `avx512_panel`'s scheme at half the width, for CPUs without
//! AVX-512 (AMD Zen 2/3, Intel before Ice Lake).
//!
//! The weight rows of one call are unpacked to unsigned bytes (`u = w +
//! OFF`) and interleaved 8 rows at a time: for block `b` of a panel,
//! register `k` (32 bytes) holds weights `4k..4k+4` of each of the 8 rows,
//! and the 8 block scales follow as f32. `vpmaddubsw` + `vpmaddwd` with four
//! activation bytes broadcast then advance 8 rows at once, so one token's
//! block costs eight such pairs, one conversion and one FMA for all 8 rows,
//! with no horizontal sums: lane `r` of the accumulator is row `r`'s result.
//! The unsigned bytes stay below 32, so no pair sum can saturate its i16
//! (31 · 128 · 2 < 2¹⁵). The offset enters as `-OFF * sum(y)` in the
//! accumulator's start value, so each block's integer sum is exactly the
//! single-row kernels' `sum(w * y)`; only the f32 accumulation order differs.

use super::super::{PanelOut, PanelScratch, Q8Block};
use super::avx2::{f16v, ld256, rd16, unsigned_q4_0, unsigned_q5_0};
use super::avx512_panel::quad;
use std::arch::x86_64::*;

/// Rows per panel (one i32 lane each).
pub(super) const PANEL: usize = 8;
/// Repacked bytes per panel block: 8 rows × 32 weights.
pub(super) const PB: usize = PANEL * 32;
/// Tokens per chunk (activations of one chunk stay in L2).
pub(super) const TOKEN_CHUNK: usize = 64;
/// Tokens per kernel call (the accumulators of four tokens, the weight
/// register and the broadcast fit the 16 ymm registers).
const T: usize = 4;

/// The weight types these kernels (and `avx512_panel`'s) take.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Q4_0,
    Q5_0,
}

impl Kind {
    /// The kind numbered `k` (0: Q4_0, else Q5_0), for const-generic
    /// dispatch.
    pub(super) const fn from_u8(k: u8) -> Self {
        match k {
            0 => Kind::Q4_0,
            _ => Kind::Q5_0,
        }
    }

    /// Bytes per block.
    pub(super) const fn bytes(self) -> usize {
        match self {
            Kind::Q4_0 => 18,
            Kind::Q5_0 => 22,
        }
    }

    /// The weight offset that makes the unpacked bytes unsigned.
    pub(super) const fn off(self) -> i32 {
        match self {
            Kind::Q4_0 => 8,
            Kind::Q5_0 => 16,
        }
    }
}

/// Transposes 8 rows of eight dwords (`u[r]`) into eight registers: result
/// `k`, lane `r` is dword `k` of `u[r]` (unpacks within 128-bit halves,
/// then the halves swapped across).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn transpose8(u: &[__m256i; 8]) -> [__m256i; 8] {
    // t: pairs of rows interleaved by dword; s: quads of rows by qword.
    let t = [
        _mm256_unpacklo_epi32(u[0], u[1]),
        _mm256_unpackhi_epi32(u[0], u[1]),
        _mm256_unpacklo_epi32(u[2], u[3]),
        _mm256_unpackhi_epi32(u[2], u[3]),
        _mm256_unpacklo_epi32(u[4], u[5]),
        _mm256_unpackhi_epi32(u[4], u[5]),
        _mm256_unpacklo_epi32(u[6], u[7]),
        _mm256_unpackhi_epi32(u[6], u[7]),
    ];
    // s[j] (rows 0-3) and s[4 + j] (rows 4-7) hold dword j in their low
    // half and dword j + 4 in their high half.
    let s = [
        _mm256_unpacklo_epi64(t[0], t[2]),
        _mm256_unpackhi_epi64(t[0], t[2]),
        _mm256_unpacklo_epi64(t[1], t[3]),
        _mm256_unpackhi_epi64(t[1], t[3]),
        _mm256_unpacklo_epi64(t[4], t[6]),
        _mm256_unpackhi_epi64(t[4], t[6]),
        _mm256_unpacklo_epi64(t[5], t[7]),
        _mm256_unpackhi_epi64(t[5], t[7]),
    ];
    [
        _mm256_permute2x128_si256::<0x20>(s[0], s[4]),
        _mm256_permute2x128_si256::<0x20>(s[1], s[5]),
        _mm256_permute2x128_si256::<0x20>(s[2], s[6]),
        _mm256_permute2x128_si256::<0x20>(s[3], s[7]),
        _mm256_permute2x128_si256::<0x31>(s[0], s[4]),
        _mm256_permute2x128_si256::<0x31>(s[1], s[5]),
        _mm256_permute2x128_si256::<0x31>(s[2], s[6]),
        _mm256_permute2x128_si256::<0x31>(s[3], s[7]),
    ]
}

/// Stores 32 bytes at the start of `d`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn st256(d: &mut [u8], v: __m256i) {
    let d = &mut d[..32];
    // SAFETY: `d` is 32 writable bytes; `storeu` is unaligned.
    unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), v) }
}

/// Loads 8 f32 from the start of `s`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn ld256ps(s: &[f32]) -> __m256 {
    let s = &s[..8];
    // SAFETY: `s` is 8 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// Repacks `n` rows (`rb` bytes each, `nb` blocks) into panels: `wq` gets
/// `ceil(n / 8) * nb * PB` bytes, `ws` the matching `* 8` scales (both in
/// `sc`); rows past `n` in the last panel are zero (weights and scales).
#[target_feature(enable = "avx2,fma,f16c")]
fn repack(kind: Kind, w: &[u8], rb: usize, n: usize, nb: usize, sc: &mut PanelScratch) {
    let (wq, ws) = (&mut sc.wq, &mut sc.ws);
    let panels = n.div_ceil(PANEL);
    wq.clear();
    wq.resize(panels * nb * PB, 0);
    ws.clear();
    ws.resize(panels * nb * PANEL, 0.0);
    let bb = kind.bytes();
    for p in 0..panels {
        let rows = PANEL.min(n - p * PANEL);
        for b in 0..nb {
            let blk = p * nb + b;
            let mut u = [_mm256_setzero_si256(); PANEL];
            for (r, ur) in u.iter_mut().enumerate().take(rows) {
                let at = (p * PANEL + r) * rb + b * bb;
                let xb = &w[at..at + bb];
                *ur = match kind {
                    Kind::Q4_0 => unsigned_q4_0(xb),
                    Kind::Q5_0 => unsigned_q5_0(xb),
                };
                ws[blk * PANEL + r] = f16v(rd16(xb, 0));
            }
            let dst = &mut wq[blk * PB..(blk + 1) * PB];
            for (k, v) in transpose8(&u).into_iter().enumerate() {
                st256(&mut dst[32 * k..], v);
            }
        }
    }
}

/// Writes lanes `..n` of each of `N` results (tokens `t0..`, panel `p`)
/// into `o` (rows `p * 8 + r`).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn store<const N: usize>(
    res: [__m256; N],
    o: &mut PanelOut<'_>,
    n_rows: usize,
    p: usize,
    t0: usize,
) {
    let n = PANEL.min(n_rows - p * PANEL);
    let mut tmp = [[0.0f32; PANEL]; N];
    for (d, v) in tmp.iter_mut().zip(res) {
        // SAFETY: `d` is 8 writable f32; `storeu` is unaligned.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) };
    }
    for (t, v) in tmp.iter().enumerate() {
        o.put(t0 + t, p * PANEL, &v[..n]);
    }
}

/// One panel (`nb` blocks at `wq`/`ws`) against `N` tokens: lane `r` of
/// result `t` is row `r` · token `t`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn panel<const N: usize>(
    wq: &[u8],
    ws: &[f32],
    nb: usize,
    off: i32,
    y: [&[Q8Block]; N],
) -> [__m256; N] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        let wb = &wq[b * PB..(b + 1) * PB];
        let mut sums: [__m256i; N] =
            std::array::from_fn(|t| _mm256_set1_epi32(-off * y[t][b].isum));
        for k in 0..8 {
            let wk = ld256(&wb[32 * k..]);
            for (t, s) in sums.iter_mut().enumerate() {
                let yk = _mm256_set1_epi32(quad(&y[t][b], k));
                let pairs = _mm256_maddubs_epi16(wk, yk);
                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(pairs, ones));
            }
        }
        let dw = ld256ps(&ws[PANEL * b..]);
        for (t, a) in acc.iter_mut().enumerate() {
            let s = _mm256_cvtepi32_ps(sums[t]);
            *a = _mm256_fmadd_ps(s, _mm256_mul_ps(dw, _mm256_set1_ps(y[t][b].d)), *a);
        }
    }
    acc
}

#[target_feature(enable = "avx2,fma,f16c")]
fn inner(
    kind: Kind,
    w: &[u8],
    rb: usize,
    a: &[Q8Block],
    nb: usize,
    o: &mut PanelOut<'_>,
    sc: &mut PanelScratch,
) {
    let Some((n_rows, n_tok)) = o.dims(w.len(), rb, nb * kind.bytes(), a.len(), nb) else {
        return;
    };
    repack(kind, w, rb, n_rows, nb, sc);
    let (wq, ws) = (&sc.wq, &sc.ws);
    let off = kind.off();
    let row = |t: usize| &a[t * nb..(t + 1) * nb];
    for c0 in (0..n_tok).step_by(TOKEN_CHUNK) {
        let c1 = (c0 + TOKEN_CHUNK).min(n_tok);
        for p in 0..n_rows.div_ceil(PANEL) {
            let pq = &wq[p * nb * PB..(p + 1) * nb * PB];
            let ps = &ws[p * nb * PANEL..(p + 1) * nb * PANEL];
            let mut t = c0;
            while t + T <= c1 {
                let y: [&[Q8Block]; T] = std::array::from_fn(|i| row(t + i));
                store(panel::<T>(pq, ps, nb, off, y), o, n_rows, p, t);
                t += T;
            }
            while t < c1 {
                store(panel::<1>(pq, ps, nb, off, [row(t)]), o, n_rows, p, t);
                t += 1;
            }
        }
    }
}

/// Panel row loop of Q4_0: `out[r * n_tok + t] = W[r] · a[t]` for every row
/// of `w` (`rb` bytes) and token of `a` (`nb` blocks each), or token-major
/// (see `PanelOut`); `sc` is scratch.
pub(super) fn panel_q4_0(
    w: &[u8],
    rb: usize,
    a: &[Q8Block],
    nb: usize,
    o: &mut PanelOut<'_>,
    sc: &mut PanelScratch,
) {
    // SAFETY: only reachable through `avx2::TABLE`, which `avx2_table`
    // returns after detecting AVX2, FMA and F16C.
    unsafe { inner(Kind::Q4_0, w, rb, a, nb, o, sc) }
}

/// [`panel_q4_0`] for Q5_0.
pub(super) fn panel_q5_0(
    w: &[u8],
    rb: usize,
    a: &[Q8Block],
    nb: usize,
    o: &mut PanelOut<'_>,
    sc: &mut PanelScratch,
) {
    // SAFETY: only reachable through `avx2::TABLE`, which `avx2_table`
    // returns after detecting AVX2, FMA and F16C.
    unsafe { inner(Kind::Q5_0, w, rb, a, nb, o, sc) }
}
