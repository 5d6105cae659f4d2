//! AVX-512 prefill kernels for the legacy 32-weight block types on weight
//! panels repacked per call: the shared panel helpers (transpose, stores),
//! and the AVX512-BW kernels for Q4_0 and Q5_0. (The VNNI build packs these
//! types at load and runs `avx512_packed`, which packs per call too where
//! weights were not packed at load.)
//!
//! The weight rows of one call are first unpacked to unsigned bytes
//! (`u = w + OFF`) and interleaved 16 rows at a time: for block `b` of a
//! panel, register `k` (64 bytes) holds weights `4k..4k+4` of each of the 16
//! rows, and the 16 block scales follow as f32. One `vpdpbusd` with four
//! activation bytes broadcast then advances 16 rows at once, so one token's
//! block costs eight integer multiply-adds, one conversion and one FMA for
//! all 16 rows, with no horizontal sums: lane `r` of the accumulator is row
//! `r`'s result. The offset enters as `-OFF * sum(y)` in the accumulator's
//! start value, so each block's integer sum is exactly the single-row
//! kernels' `sum(w * y)`.
//!
//! Tokens are taken in chunks that keep their activations in L2 while every
//! panel of the call passes over them.

use super::super::{PanelOut, PanelScratch, Q8Block};
use super::avx2::{f16v, ld128, rd16, rd32};
use super::avx2_panel::Kind;
use super::avx512::dp_bw;
use std::arch::x86_64::*;

/// Rows per panel (one i32 lane each).
pub(super) const PANEL: usize = 16;
/// Repacked bytes per panel block: 16 rows × 32 weights.
pub(super) const PB: usize = PANEL * 32;
/// Tokens per chunk (activations of one chunk stay in L2).
pub(super) const TOKEN_CHUNK: usize = 64;

/// One block's 32 weights as unsigned bytes `w + OFF`, in weight order.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
fn unpack(kind: Kind, xb: &[u8]) -> __m256i {
    let m4 = _mm_set1_epi8(0x0f);
    let nib = |s: &[u8]| {
        let t = ld128(s);
        _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16::<4>(t), m4),
            _mm_and_si128(t, m4),
        )
    };
    match kind {
        Kind::Q4_0 => nib(&xb[2..]),
        Kind::Q5_0 => {
            // Bit j of `qh` is the fifth bit of weight j.
            let hi = _mm256_maskz_set1_epi8(rd32(xb, 2), 0x10);
            _mm256_or_si256(nib(&xb[6..]), hi)
        }
    }
}

/// The permutation indices of [`transpose16`].
pub(super) struct TransposeIdx([__m512i; 6]);

impl TransposeIdx {
    /// Builds the six index vectors (three rounds, two each).
    #[target_feature(enable = "avx512f")]
    pub(super) fn new() -> Self {
        let v = |f: &dyn Fn(i32) -> i32| {
            let a: [i32; 16] = std::array::from_fn(|l| f(l as i32));
            // SAFETY: `a` is 16 readable i32; `loadu` is unaligned.
            unsafe { _mm512_loadu_si512(a.as_ptr().cast()) }
        };
        // Round 1, lane `4 k + rl`: row `rl` of 4, chunk `4 h + k`.
        let s1 = |h: i32| v(&|l| (l % 4 / 2) * 16 + (l % 2) * 8 + 4 * h + l / 4);
        // Round 2, lane `8 kk + rl`: row `rl` of 8, chunk `2 c + kk` of the 4.
        let s2 = |c: i32| v(&|l| (l % 8 / 4) * 16 + (2 * c + l / 8) * 4 + l % 4);
        // Round 3, lane `r`: chunk `kk` of the pair.
        let s3 = |kk: i32| v(&|l| (l / 8) * 16 + kk * 8 + l % 8);
        Self([s1(0), s1(1), s2(0), s2(1), s3(0), s3(1)])
    }
}

/// Transposes 16 rows of eight dwords (`u[r]`) into eight registers of 16
/// dwords: result `k`, lane `r` is dword `k` of `u[r]`. Three rounds of
/// two-source permutes (4 rows × 4 chunks, 8 rows × 2, 16 rows × 1).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
// Index loops mirror the permutation rounds' arithmetic.
#[allow(clippy::needless_range_loop)]
pub(super) fn transpose16(u: &[__m256i; 16], ix: &TransposeIdx) -> [__m512i; 8] {
    // Plain loops, no closures: closures here were compiled as separate
    // functions passing vectors through memory (perf showed them apart).
    let zero = _mm512_setzero_si512();
    let mut z = [zero; 8];
    for (i, zi) in z.iter_mut().enumerate() {
        *zi = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(u[2 * i]), u[2 * i + 1]);
    }
    // p[j][h]: rows 4j..4j+4, chunks 4h..4h+4.
    let mut p = [[zero; 2]; 4];
    for j in 0..4 {
        for h in 0..2 {
            p[j][h] = _mm512_permutex2var_epi32(z[2 * j], ix.0[h], z[2 * j + 1]);
        }
    }
    // q[m][h][c]: rows 8m..8m+8, chunks 4h+2c and 4h+2c+1.
    let mut q = [[[zero; 2]; 2]; 2];
    for m in 0..2 {
        for h in 0..2 {
            for c in 0..2 {
                q[m][h][c] = _mm512_permutex2var_epi32(p[2 * m][h], ix.0[2 + c], p[2 * m + 1][h]);
            }
        }
    }
    let mut out = [zero; 8];
    for (k, o) in out.iter_mut().enumerate() {
        let (h, c, kk) = (k / 4, k % 4 / 2, k % 2);
        *o = _mm512_permutex2var_epi32(q[0][h][c], ix.0[4 + kk], q[1][h][c]);
    }
    out
}

/// Stores 64 bytes at the start of `d`.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn st512(d: &mut [u8], v: __m512i) {
    let d = &mut d[..64];
    // SAFETY: `d` is 64 writable bytes; `storeu` is unaligned.
    unsafe { _mm512_storeu_si512(d.as_mut_ptr().cast(), v) }
}

/// Repacks `n` rows (`rb` bytes each, `nb` blocks) into panels: `wq` gets
/// `ceil(n / 16) * nb * PB` bytes, `ws` the matching `* 16` scales (both in
/// `sc`); rows past `n` in the last panel are zero (weights and scales).
/// Monomorphized per type so the unpacking is inlined.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn repack_as<const K: u8>(w: &[u8], rb: usize, n: usize, nb: usize, sc: &mut PanelScratch) {
    let kind = Kind::from_u8(K);
    let (wq, ws) = (&mut sc.wq, &mut sc.ws);
    let panels = n.div_ceil(PANEL);
    wq.clear();
    wq.resize(panels * nb * PB, 0);
    ws.clear();
    ws.resize(panels * nb * PANEL, 0.0);
    let ix = TransposeIdx::new();
    let bb = kind.bytes();
    for p in 0..panels {
        let rows = PANEL.min(n - p * PANEL);
        for b in 0..nb {
            let blk = p * nb + b;
            let mut u = [_mm256_setzero_si256(); PANEL];
            for (r, ur) in u.iter_mut().enumerate().take(rows) {
                let at = (p * PANEL + r) * rb + b * bb;
                let xb = &w[at..at + bb];
                *ur = unpack(kind, xb);
                ws[blk * PANEL + r] = f16v(rd16(xb, 0));
            }
            let dst = &mut wq[blk * PB..(blk + 1) * PB];
            for (k, v) in transpose16(&u, &ix).into_iter().enumerate() {
                st512(&mut dst[64 * k..], v);
            }
        }
    }
}

/// [`repack_as`] for `kind`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn repack(kind: Kind, w: &[u8], rb: usize, n: usize, nb: usize, sc: &mut PanelScratch) {
    match kind {
        Kind::Q4_0 => repack_as::<0>(w, rb, n, nb, sc),
        Kind::Q5_0 => repack_as::<1>(w, rb, n, nb, sc),
    }
}

/// Loads 64 bytes from the start of `s`.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn ld512(s: &[u8]) -> __m512i {
    let s = &s[..64];
    // SAFETY: `s` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// Loads 16 f32 from the start of `s`.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn ld512ps(s: &[f32]) -> __m512 {
    let s = &s[..16];
    // SAFETY: `s` is 16 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// Four activation bytes `4k..4k+4` of `y` as one i32.
#[inline(always)]
pub(super) fn quad(y: &Q8Block, k: usize) -> i32 {
    i32::from_le_bytes([
        y.qs[4 * k] as u8,
        y.qs[4 * k + 1] as u8,
        y.qs[4 * k + 2] as u8,
        y.qs[4 * k + 3] as u8,
    ])
}

/// Writes lanes `..n` of each of `T` results (tokens `t0..`, panel `p`)
/// into `o` (rows `p * 16 + r`).
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn store<const T: usize>(
    res: [__m512; T],
    o: &mut PanelOut<'_>,
    n_rows: usize,
    p: usize,
    t0: usize,
) {
    let n = PANEL.min(n_rows - p * PANEL);
    let mut tmp = [[0.0f32; PANEL]; T];
    for (d, v) in tmp.iter_mut().zip(res) {
        // SAFETY: `d` is 16 writable f32; `storeu` is unaligned.
        unsafe { _mm512_storeu_ps(d.as_mut_ptr(), v) };
    }
    for (t, v) in tmp.iter().enumerate() {
        o.put(t0 + t, p * PANEL, &v[..n]);
    }
}

macro_rules! panel_kernels {
    ($m:ident, $feat:literal, $dp:ident, $doc:literal, $($name:ident => $kind:expr),*) => {
        #[doc = $doc]
        pub(super) mod $m {
            use super::*;

            /// One panel (`nb` blocks at `wq`/`ws`) against `T` tokens:
            /// lane `r` of result `t` is row `r` · token `t`.
            #[target_feature(enable = $feat)]
            #[inline]
            fn panel<const T: usize>(
                wq: &[u8],
                ws: &[f32],
                nb: usize,
                off: i32,
                y: [&[Q8Block]; T],
            ) -> [__m512; T] {
                let mut acc = [_mm512_setzero_ps(); T];
                for b in 0..nb {
                    let wb = &wq[b * PB..(b + 1) * PB];
                    let w = [0, 1, 2, 3, 4, 5, 6, 7].map(|k| ld512(&wb[64 * k..]));
                    let dw = ld512ps(&ws[PANEL * b..]);
                    for t in 0..T {
                        let yb = &y[t][b];
                        let mut i0 = _mm512_set1_epi32(-off * yb.isum);
                        let mut i1 = _mm512_setzero_si512();
                        for k in 0..4 {
                            i0 = $dp(i0, w[2 * k], _mm512_set1_epi32(quad(yb, 2 * k)));
                            i1 = $dp(i1, w[2 * k + 1], _mm512_set1_epi32(quad(yb, 2 * k + 1)));
                        }
                        let s = _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1));
                        acc[t] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(yb.d)), acc[t]);
                    }
                }
                acc
            }

            #[target_feature(enable = $feat)]
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
                        while t + 4 <= c1 {
                            let y = [row(t), row(t + 1), row(t + 2), row(t + 3)];
                            store(panel::<4>(pq, ps, nb, off, y), o, n_rows, p, t);
                            t += 4;
                        }
                        while t < c1 {
                            store(panel::<1>(pq, ps, nb, off, [row(t)]), o, n_rows, p, t);
                            t += 1;
                        }
                    }
                }
            }

            $(
                /// Panel row loop: `out[r * n_tok + t] = W[r] · a[t]` for
                /// every row of `w` (`rb` bytes) and token of `a` (`nb`
                /// blocks each), or token-major (see `PanelOut`); `sc` is
                /// scratch.
                pub(in super::super) fn $name(
                    w: &[u8],
                    rb: usize,
                    a: &[Q8Block],
                    nb: usize,
                    o: &mut PanelOut<'_>,
                    sc: &mut PanelScratch,
                ) {
                    // SAFETY: only reachable through the x86 AVX-512
                    // tables, which `avx512_table` returns after detecting
                    // every feature in `$feat`.
                    unsafe { inner($kind, w, rb, a, nb, o, sc) }
                }
            )*
        }
    };
}

panel_kernels!(
    bw,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    dp_bw,
    "Panel kernels using `vpmaddubsw` + `vpmaddwd` (AVX512-BW; Q4_0 and Q5_0 \
     only, whose unsigned bytes stay below 128 so the pair sums cannot saturate).",
    panel_q4_0 => Kind::Q4_0,
    panel_q5_0 => Kind::Q5_0
);
