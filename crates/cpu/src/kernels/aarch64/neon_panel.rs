//! i8mm prefill kernels for Q8_0, Q4_0, Q5_0 and IQ4_NL on weight panels
//! repacked per call (`neon_panel_k` has Q4_K and Q6_K), in the table that
//! [`with_i8mm_panels`] returns only where `i8mm` is detected.
//!
//! `smmla` multiplies a 2×8 matrix of signed bytes by the transpose of
//! another into a 2×2 tile of i32 sums: given 8 weights of each of two rows
//! and the matching 8 activation bytes of each of two tokens, one
//! instruction advances four row·token dots (ggml's `ggml_vec_dot_q8_0_q8_0`
//! for `nrc == 2`). So each call's weight rows are unpacked to signed bytes
//! (the scalar twins' values) and interleaved per row pair, 8 weights of
//! each row per register; each token chunk's activation quants are paired
//! likewise; and a panel of 4 rows (two row pairs) meets 4 tokens (two token
//! pairs) per step, in 2×2 accumulators whose lanes are (row, token) results
//! (no horizontal sums; every register loaded feeds two `smmla`s).
//!
//! The integer block sums are exactly the scalar twins' `sum(w * y)`; the
//! block scales are applied in f32 per block (lanes `d_row * d_token`), so
//! only the f32 rounding differs.

use super::super::generic::f16_at;
use super::super::{PanelOut, PanelScratch, Q8Block, Table, QK8};
use super::neon::{halves_iq4_nl, halves_q4_0, halves_q5_0, halves_q8_0, ld_f32, ld_i8, ld_u8};
use super::neon_panel_k;
use anedvd_quant::BlockQ8K;
use std::arch::aarch64::*;
use std::arch::asm;
use std::ops::Range;

/// Rows per panel: two row pairs.
pub(super) const PANEL: usize = 4;
/// Tokens per chunk (a chunk's paired activations stay in L2 while every
/// panel passes over them); even, so no pair straddles two chunks.
const TOKEN_CHUNK: usize = 64;
/// Repacked bytes per 32-weight block of a panel.
const PB: usize = PANEL * QK8;
/// f32 per panel block: `[d_r0, d_r0, d_r1, d_r1]` for each row pair.
const WS: usize = 2 * PANEL;

/// `t` with the i8mm panel kernels, if this CPU has i8mm (the only way to
/// reach them).
pub(super) fn with_i8mm_panels(t: Table) -> Option<Table> {
    std::arch::is_aarch64_feature_detected!("i8mm").then_some(Table {
        panel_q4_0: Some(panel_q4_0),
        panel_q5_0: Some(panel_q5_0),
        panel_q8_0: Some(panel_q8_0),
        panel_iq4_nl: Some(panel_iq4_nl),
        panel_q4_k: Some(neon_panel_k::panel_q4_k),
        panel_q6_k: Some(neon_panel_k::panel_q6_k),
        ..t
    })
}

/// `acc + [w0·a0, w0·a1, w1·a0, w1·a1]` (`smmla`), where `w` holds 8 signed
/// bytes of each of two rows (`w0` first) and `a` 8 of each of two tokens.
#[target_feature(enable = "neon,i8mm")]
#[inline]
pub(super) fn mmla(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: `smmla` reads two vector registers and updates a third,
    // touching no memory, stack or flags; the i8mm feature it needs is
    // enabled on this function, which only i8mm code (reached after
    // detection) calls.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {w:v}.16b, {a:v}.16b",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Two rows' 32 values (each as two 16-byte halves) as four `smmla`
/// operands: register `c` holds values `8c..8c + 8` of `x`, then of `y`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn interleave(x: (int8x16_t, int8x16_t), y: (int8x16_t, int8x16_t)) -> [int8x16_t; 4] {
    let (x0, x1) = (vreinterpretq_s64_s8(x.0), vreinterpretq_s64_s8(x.1));
    let (y0, y1) = (vreinterpretq_s64_s8(y.0), vreinterpretq_s64_s8(y.1));
    [
        vreinterpretq_s8_s64(vzip1q_s64(x0, y0)),
        vreinterpretq_s8_s64(vzip2q_s64(x0, y0)),
        vreinterpretq_s8_s64(vzip1q_s64(x1, y1)),
        vreinterpretq_s8_s64(vzip2q_s64(x1, y1)),
    ]
}

/// Stores 16 bytes at the start of `d`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn st_i8(d: &mut [u8], v: int8x16_t) {
    let d = &mut d[..16];
    // SAFETY: `d` is 16 writable bytes; `st1` has no alignment requirement.
    unsafe { vst1q_u8(d.as_mut_ptr(), vreinterpretq_u8_s8(v)) }
}

/// Loads 16 repacked (signed) weight bytes from the start of `s`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn ld_w(s: &[u8]) -> int8x16_t {
    vreinterpretq_s8_u8(ld_u8(s))
}

/// `[a, b, a, b]`: one value per token in the lanes of an `smmla` tile.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn token_lanes(a: f32, b: f32) -> float32x4_t {
    let v = vset_lane_f32::<1>(b, vdup_n_f32(a));
    vcombine_f32(v, v)
}

/// Activation blocks whose quants the panels pair up.
pub(super) trait Quants {
    fn quants(&self) -> &[i8];
}

impl Quants for Q8Block {
    fn quants(&self) -> &[i8] {
        &self.qs
    }
}

impl Quants for BlockQ8K {
    fn quants(&self) -> &[i8] {
        &self.qs
    }
}

/// Token `toks.start + i` of `a` (`nb` blocks each), or the last of `toks`
/// past its end: the partner of an odd last token, as [`pair_tokens`]
/// pairs it.
pub(super) fn token<'a, B>(a: &'a [B], nb: usize, toks: &Range<usize>, i: usize) -> &'a [B] {
    let t = (toks.start + i).min(toks.end - 1);
    &a[t * nb..(t + 1) * nb]
}

/// The quants of tokens `toks` of `a` (`nb` blocks each) paired into `aq`:
/// pair `i` (tokens `toks.start + 2i` and the next, or the last token twice
/// when the count is odd) takes two rows' bytes, 8 of each token in turn.
fn pair_tokens<B: Quants>(aq: &mut Vec<i8>, a: &[B], nb: usize, toks: Range<usize>) {
    let row_len = nb * a.first().map_or(0, |b| b.quants().len());
    aq.resize(toks.len().div_ceil(2) * 2 * row_len, 0);
    let mut dst = aq.chunks_exact_mut(16);
    for t in toks.clone().step_by(2) {
        let (x, y) = (
            token(a, nb, &toks, t - toks.start),
            token(a, nb, &toks, t + 1 - toks.start),
        );
        for (bx, by) in x.iter().zip(y) {
            for (cx, cy) in bx.quants().chunks_exact(8).zip(by.quants().chunks_exact(8)) {
                if let Some(d) = dst.next() {
                    d[..8].copy_from_slice(cx);
                    d[8..].copy_from_slice(cy);
                }
            }
        }
    }
}

/// Calls `tile(sc, p, toks, at)` for every panel `p` of `n_rows` rows and
/// every run `toks` of up to 4 tokens of `a` (`nb` blocks each), token
/// chunk by token chunk, after pairing the chunk's quants into `sc.aq`
/// (`toks` starts at byte `at * nb * block` of it).
#[target_feature(enable = "neon,i8mm")]
#[inline]
pub(super) fn for_each_tile<B: Quants>(
    a: &[B],
    nb: usize,
    n_rows: usize,
    sc: &mut PanelScratch,
    mut tile: impl FnMut(&PanelScratch, usize, Range<usize>, usize),
) {
    let n_tok = a.len() / nb;
    for c0 in (0..n_tok).step_by(TOKEN_CHUNK) {
        let c1 = (c0 + TOKEN_CHUNK).min(n_tok);
        pair_tokens(&mut sc.aq, a, nb, c0..c1);
        for p in 0..n_rows.div_ceil(PANEL) {
            for t in (c0..c1).step_by(4) {
                tile(sc, p, t..(t + 4).min(c1), t - c0);
            }
        }
    }
}

/// The tiles of both row pairs against `TP` token pairs as
/// `res[row][token]`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn results<const TP: usize>(acc: [[float32x4_t; TP]; 2]) -> [[f32; 4]; PANEL] {
    let mut res = [[0.0; 4]; PANEL];
    for (rp, tiles) in acc.iter().enumerate() {
        for (tp, &v) in tiles.iter().enumerate() {
            let mut l = [0.0f32; 4];
            // SAFETY: `l` is 4 writable f32; `st1` is unaligned.
            unsafe { vst1q_f32(l.as_mut_ptr(), v) };
            res[2 * rp][2 * tp..2 * tp + 2].copy_from_slice(&l[..2]);
            res[2 * rp + 1][2 * tp..2 * tp + 2].copy_from_slice(&l[2..]);
        }
    }
    res
}

/// Writes `res[i][j]` (row `PANEL * p + i`, token `toks.start + j`) for the
/// rows below `n_rows` and the tokens of `toks` into `o`.
pub(super) fn store(
    res: &[[f32; 4]; PANEL],
    o: &mut PanelOut<'_>,
    n_rows: usize,
    p: usize,
    toks: Range<usize>,
) {
    let rows = PANEL.min(n_rows - p * PANEL);
    for (i, v) in res.iter().enumerate().take(rows) {
        for (t, &x) in toks.clone().zip(v) {
            o.put(t, p * PANEL + i, &[x]);
        }
    }
}

/// The legacy types these kernels take.
#[derive(Clone, Copy)]
enum Kind {
    Q8_0,
    Q4_0,
    Q5_0,
    IQ4NL,
}

impl Kind {
    /// Bytes per block.
    const fn bytes(self) -> usize {
        match self {
            Kind::Q8_0 => 34,
            Kind::Q4_0 | Kind::IQ4NL => 18,
            Kind::Q5_0 => 22,
        }
    }
}

/// Repacks `n` rows (`rb` bytes each, `nb` blocks) into panels in `sc`:
/// `wq` gets `PB` bytes and `ws` `WS` scales per panel block; rows past
/// `n` in the last panel are zero (weights and scales).
#[target_feature(enable = "neon")]
fn repack(kind: Kind, w: &[u8], rb: usize, n: usize, nb: usize, sc: &mut PanelScratch) {
    let panels = n.div_ceil(PANEL);
    // Every element is written below, so no clearing.
    sc.wq.resize(panels * nb * PB, 0);
    sc.ws.resize(panels * nb * WS, 0.0);
    let bb = kind.bytes();
    let zero = (vdupq_n_s8(0), vdupq_n_s8(0));
    for p in 0..panels {
        let rows = PANEL.min(n - p * PANEL);
        for b in 0..nb {
            let blk = p * nb + b;
            let mut h = [zero; PANEL];
            let mut d = [0.0f32; PANEL];
            for r in 0..rows {
                let at = (p * PANEL + r) * rb + b * bb;
                let xb = &w[at..at + bb];
                h[r] = match kind {
                    Kind::Q8_0 => halves_q8_0(xb),
                    Kind::Q4_0 => halves_q4_0(xb),
                    Kind::Q5_0 => halves_q5_0(xb),
                    Kind::IQ4NL => halves_iq4_nl(xb),
                };
                d[r] = f16_at(xb, 0);
            }
            for rp in 0..2 {
                let dst = &mut sc.wq[PB * blk + 2 * QK8 * rp..];
                for (c, v) in interleave(h[2 * rp], h[2 * rp + 1]).into_iter().enumerate() {
                    st_i8(&mut dst[16 * c..], v);
                }
                let (d0, d1) = (d[2 * rp], d[2 * rp + 1]);
                sc.ws[WS * blk + 4 * rp..WS * blk + 4 * rp + 4].copy_from_slice(&[d0, d0, d1, d1]);
            }
        }
    }
}

/// One panel (`nb` blocks at `wq`/`ws`) against `TP` token pairs (their
/// quants paired at `aq`, their blocks in `y`): lane `2i + j` of result
/// `[rp][tp]` is row `2rp + i` · token `j` of pair `tp`.
#[target_feature(enable = "neon,i8mm")]
#[inline]
fn tile<const TP: usize>(
    wq: &[u8],
    ws: &[f32],
    aq: &[i8],
    nb: usize,
    y: [[&[Q8Block]; 2]; TP],
) -> [[float32x4_t; TP]; 2] {
    let pair_bytes = 2 * QK8 * nb;
    let mut acc = [[vdupq_n_f32(0.0); TP]; 2];
    for b in 0..nb {
        let mut a = [[vdupq_n_s8(0); 4]; TP];
        let mut dy = [vdupq_n_f32(0.0); TP];
        for tp in 0..TP {
            let at = pair_bytes * tp + 2 * QK8 * b;
            for (c, v) in a[tp].iter_mut().enumerate() {
                *v = ld_i8(&aq[at + 16 * c..]);
            }
            dy[tp] = token_lanes(y[tp][0][b].d, y[tp][1][b].d);
        }
        for (rp, acc) in acc.iter_mut().enumerate() {
            let at = PB * b + 2 * QK8 * rp;
            let wr = [0, 1, 2, 3].map(|c| ld_w(&wq[at + 16 * c..]));
            let dw = ld_f32(&ws[WS * b + 4 * rp..]);
            for (acc, (a, dy)) in acc.iter_mut().zip(a.iter().zip(dy)) {
                let mut s = vdupq_n_s32(0);
                for (&w, &a) in wr.iter().zip(a) {
                    s = mmla(s, w, a);
                }
                *acc = vfmaq_f32(*acc, vcvtq_f32_s32(s), vmulq_f32(dw, dy));
            }
        }
    }
    acc
}

#[target_feature(enable = "neon,i8mm")]
fn inner(
    kind: Kind,
    w: &[u8],
    rb: usize,
    a: &[Q8Block],
    nb: usize,
    o: &mut PanelOut<'_>,
    sc: &mut PanelScratch,
) {
    let Some((n_rows, _)) = o.dims(w.len(), rb, nb * kind.bytes(), a.len(), nb) else {
        return;
    };
    repack(kind, w, rb, n_rows, nb, sc);
    for_each_tile(a, nb, n_rows, sc, |sc, p, toks, at| {
        let wq = &sc.wq[p * nb * PB..(p + 1) * nb * PB];
        let ws = &sc.ws[p * nb * WS..(p + 1) * nb * WS];
        let aq = &sc.aq[at * nb * QK8..];
        let y = |i| token(a, nb, &toks, i);
        let res = if toks.len() > 2 {
            results(tile::<2>(wq, ws, aq, nb, [[y(0), y(1)], [y(2), y(3)]]))
        } else {
            results(tile::<1>(wq, ws, aq, nb, [[y(0), y(1)]]))
        };
        store(&res, o, n_rows, p, toks);
    });
}

macro_rules! entries {
    ($($name:ident: $kind:expr;)*) => {$(
        /// Panel row loop: `out[r * n_tok + t] = W[r] · a[t]` for every
        /// row of `w` (`rb` bytes) and token of `a` (`nb` blocks each), or
        /// token-major (see `PanelOut`); `sc` is scratch.
        fn $name(
            w: &[u8],
            rb: usize,
            a: &[Q8Block],
            nb: usize,
            o: &mut PanelOut<'_>,
            sc: &mut PanelScratch,
        ) {
            // SAFETY: only reachable through the table of
            // `with_i8mm_panels`, which detects i8mm first (NEON is
            // baseline).
            unsafe { inner($kind, w, rb, a, nb, o, sc) }
        }
    )*};
}

entries! {
    panel_q8_0: Kind::Q8_0;
    panel_q4_0: Kind::Q4_0;
    panel_q5_0: Kind::Q5_0;
    panel_iq4_nl: Kind::IQ4NL;
}
