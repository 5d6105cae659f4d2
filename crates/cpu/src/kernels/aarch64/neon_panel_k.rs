//! i8mm prefill kernels for Q4_K and Q6_K: `neon_panel`'s scheme (4-row
//! panels repacked per call, two row pairs × two token pairs per `smmla`
//! step) on 256-weight blocks.
//!
//! Rows are unpacked to the scalar twins' signed bytes (Q4_K's nibbles,
//! Q6_K's `q - 32`) and interleaved per row pair; each sub-block scale sits
//! beside them as i32 lanes `[s_r0, s_r0, s_r1, s_r1]`, so a sub-block's
//! 2×2 tile of `sum(q * y)` is scaled by one multiply-accumulate. Q4_K's
//! mins enter as `dmin * sum(min * bsum)`: the 8-term dots of two rows'
//! mins with two tokens' 32-weight `bsums`, lane by lane. Per token and
//! block the integer sums are exactly the scalar twins'; only the f32
//! rounding differs.

use super::super::generic::{f16_at, unpack_k4_scales};
use super::super::{PanelOut, PanelScratch};
use super::neon::{ld_f32, ld_i32, ld_i8, ld_u8};
use super::neon_panel::{
    for_each_tile, interleave, ld_w, mmla, results, st_i8, store, token, token_lanes, PANEL,
};
use anedvd_quant::{BlockQ8K, QK_K};
use std::arch::aarch64::*;

/// Repacked bytes per 256-weight block of a panel (two row pairs).
const KB: usize = PANEL * QK_K;

/// The K-quant types these kernels take.
#[derive(Clone, Copy)]
enum Kind {
    Q4K,
    Q6K,
}

impl Kind {
    /// Bytes per block.
    const fn bytes(self) -> usize {
        match self {
            Kind::Q4K => 144,
            Kind::Q6K => 210,
        }
    }

    /// i32 of per-row-pair integer data per block: Q4_K's 8 sub-block
    /// scales (4 lanes each) and both rows' 8 mins; Q6_K's 16 scales
    /// (4 lanes each).
    const fn ints(self) -> usize {
        match self {
            Kind::Q4K => 8 * 4 + 2 * 8,
            Kind::Q6K => 16 * 4,
        }
    }

    /// f32 of per-row-pair scales per block (4 lanes each): Q4_K's `d` and
    /// `dmin`; Q6_K's `d`.
    const fn floats(self) -> usize {
        match self {
            Kind::Q4K => 8,
            Kind::Q6K => 4,
        }
    }
}

/// One block's 256 weights as 16 registers of 16 signed bytes, in the
/// scalar twin's order.
#[target_feature(enable = "neon")]
#[inline]
fn unpack(kind: Kind, xb: &[u8]) -> [int8x16_t; 16] {
    let m4 = vdupq_n_u8(0x0f);
    let mut g = [vdupq_n_s8(0); 16];
    match kind {
        Kind::Q4K => {
            for j in 0..4 {
                let b0 = ld_u8(&xb[16 + 32 * j..]);
                let b1 = ld_u8(&xb[32 + 32 * j..]);
                g[4 * j] = vreinterpretq_s8_u8(vandq_u8(b0, m4));
                g[4 * j + 1] = vreinterpretq_s8_u8(vandq_u8(b1, m4));
                g[4 * j + 2] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(b0));
                g[4 * j + 3] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(b1));
            }
        }
        Kind::Q6K => {
            let (m3, m32) = (vdupq_n_u8(3), vdupq_n_s8(32));
            let high = |s: uint8x16_t| vshlq_n_u8::<4>(vandq_u8(s, m3));
            for c in 0..2 {
                for h in 0..2 {
                    let ql0 = ld_u8(&xb[64 * c + 16 * h..]);
                    let ql1 = ld_u8(&xb[64 * c + 32 + 16 * h..]);
                    let qh = ld_u8(&xb[128 + 32 * c + 16 * h..]);
                    let q = [
                        vorrq_u8(vandq_u8(ql0, m4), high(qh)),
                        vorrq_u8(vandq_u8(ql1, m4), high(vshrq_n_u8::<2>(qh))),
                        vorrq_u8(vshrq_n_u8::<4>(ql0), high(vshrq_n_u8::<4>(qh))),
                        vorrq_u8(vshrq_n_u8::<4>(ql1), high(vshrq_n_u8::<6>(qh))),
                    ];
                    for (k, qk) in q.into_iter().enumerate() {
                        g[8 * c + 2 * k + h] = vsubq_s8(vreinterpretq_s8_u8(qk), m32);
                    }
                }
            }
        }
    }
    g
}

/// Writes row `i` (0 or 1) of a row pair's block `xb` into the pair's
/// `wi` (`kind.ints()`) and `ws` (`kind.floats()`).
fn row_data(kind: Kind, xb: &[u8], i: usize, wi: &mut [i32], ws: &mut [f32]) {
    let lanes = |v: &mut [i32], x: i32| v[2 * i..2 * i + 2].fill(x);
    match kind {
        Kind::Q4K => {
            let sm = unpack_k4_scales(&xb[4..16]);
            for (j, &s) in sm[..8].iter().enumerate() {
                lanes(&mut wi[4 * j..], i32::from(s));
            }
            for (j, &m) in sm[8..].iter().enumerate() {
                wi[32 + 8 * i + j] = i32::from(m);
            }
            ws[2 * i..2 * i + 2].fill(f16_at(xb, 0));
            ws[4 + 2 * i..4 + 2 * i + 2].fill(f16_at(xb, 2));
        }
        Kind::Q6K => {
            for (j, &s) in xb[192..208].iter().enumerate() {
                lanes(&mut wi[4 * j..], i32::from(s as i8));
            }
            ws[2 * i..2 * i + 2].fill(f16_at(xb, 208));
        }
    }
}

/// Repacks `n` rows into panels in `sc`: per panel block `KB` bytes of
/// `wq`, `2 * kind.ints()` of `wi`, `2 * kind.floats()` of `ws`; rows past
/// `n` in the last panel are zero.
#[target_feature(enable = "neon")]
fn repack(kind: Kind, w: &[u8], rb: usize, n: usize, nb: usize, sc: &mut PanelScratch) {
    let panels = n.div_ceil(PANEL);
    let (pi, pf) = (kind.ints(), kind.floats());
    // Every element of a full panel is written below; a short one is
    // cleared first.
    sc.wq.resize(panels * nb * KB, 0);
    sc.wi.resize(panels * nb * 2 * pi, 0);
    sc.ws.resize(panels * nb * 2 * pf, 0.0);
    let bb = kind.bytes();
    for p in 0..panels {
        let rows = PANEL.min(n - p * PANEL);
        for b in 0..nb {
            let blk = p * nb + b;
            let wi = &mut sc.wi[2 * pi * blk..2 * pi * (blk + 1)];
            let ws = &mut sc.ws[2 * pf * blk..2 * pf * (blk + 1)];
            if rows < PANEL {
                wi.fill(0);
                ws.fill(0.0);
            }
            let mut g = [[vdupq_n_s8(0); 16]; PANEL];
            for (r, gr) in g.iter_mut().enumerate().take(rows) {
                let at = (p * PANEL + r) * rb + b * bb;
                let xb = &w[at..at + bb];
                *gr = unpack(kind, xb);
                let rp = r / 2;
                let (wi, ws) = (
                    &mut wi[pi * rp..pi * (rp + 1)],
                    &mut ws[pf * rp..pf * (rp + 1)],
                );
                row_data(kind, xb, r % 2, wi, ws);
            }
            let dst = &mut sc.wq[KB * blk..KB * (blk + 1)];
            for rp in 0..2 {
                let (x, y) = (&g[2 * rp], &g[2 * rp + 1]);
                for q in 0..8 {
                    let v = interleave((x[2 * q], x[2 * q + 1]), (y[2 * q], y[2 * q + 1]));
                    for (c, v) in v.into_iter().enumerate() {
                        st_i8(&mut dst[2 * QK_K * rp + 64 * q + 16 * c..], v);
                    }
                }
            }
        }
    }
}

/// A token's 32-weight `bsums` (8 of them) as two i32 vectors.
#[target_feature(enable = "neon")]
#[inline]
fn bsums32(y: &BlockQ8K) -> [int32x4_t; 2] {
    let s = &y.bsums[..16];
    // SAFETY: `s` is 16 readable i16; `ld1` has no alignment requirement.
    let (lo, hi) = unsafe { (vld1q_s16(s.as_ptr()), vld1q_s16(s.as_ptr().add(8))) };
    let p = vpaddq_s16(lo, hi);
    [vmovl_s16(vget_low_s16(p)), vmovl_high_s16(p)]
}

/// `[m0·b0, m0·b1, m1·b0, m1·b1]`: the 8-term dots of two rows' mins `m`
/// with two tokens' `bsums32` `b`.
#[target_feature(enable = "neon")]
#[inline]
fn mins_tile(m: [[int32x4_t; 2]; 2], b: [[int32x4_t; 2]; 2]) -> int32x4_t {
    let dot = |r: usize, t: usize| vmlaq_s32(vmulq_s32(m[r][0], b[t][0]), m[r][1], b[t][1]);
    vpaddq_s32(
        vpaddq_s32(dot(0, 0), dot(0, 1)),
        vpaddq_s32(dot(1, 0), dot(1, 1)),
    )
}

/// Loads the 16 paired activation bytes of each of `TP` pairs for 8-weight
/// chunks `4q..4q + 4` of block `b`.
#[target_feature(enable = "neon")]
#[inline]
fn act_chunks<const TP: usize>(aq: &[i8], nb: usize, b: usize, q: usize) -> [[int8x16_t; 4]; TP] {
    let mut a = [[vdupq_n_s8(0); 4]; TP];
    for (tp, a) in a.iter_mut().enumerate() {
        let at = 2 * QK_K * (nb * tp + b) + 64 * q;
        for (c, v) in a.iter_mut().enumerate() {
            *v = ld_i8(&aq[at + 16 * c..]);
        }
    }
    a
}

/// One Q4_K panel (`nb` blocks at `wq`/`wi`/`ws`) against `TP` token pairs
/// (quants paired at `aq`, blocks in `y`), laid out as `neon_panel`'s tiles.
#[target_feature(enable = "neon,i8mm")]
#[inline]
fn tile_q4k<const TP: usize>(
    (wq, wi, ws): (&[u8], &[i32], &[f32]),
    aq: &[i8],
    nb: usize,
    y: [[&[BlockQ8K]; 2]; TP],
) -> [[float32x4_t; TP]; 2] {
    let (pi, pf) = (Kind::Q4K.ints(), Kind::Q4K.floats());
    let mut acc = [[vdupq_n_f32(0.0); TP]; 2];
    for b in 0..nb {
        let (wi, ws) = (&wi[2 * pi * b..], &ws[2 * pf * b..]);
        let mut isum = [[vdupq_n_s32(0); TP]; 2];
        for q in 0..8 {
            let a = act_chunks::<TP>(aq, nb, b, q);
            for (rp, isum) in isum.iter_mut().enumerate() {
                let at = KB * b + 2 * QK_K * rp + 64 * q;
                let wr = [0, 1, 2, 3].map(|c| ld_w(&wq[at + 16 * c..]));
                let scale = ld_i32(&wi[pi * rp + 4 * q..]);
                for (isum, a) in isum.iter_mut().zip(&a) {
                    let mut s = vdupq_n_s32(0);
                    for (&w, &a) in wr.iter().zip(a) {
                        s = mmla(s, w, a);
                    }
                    *isum = vmlaq_s32(*isum, s, scale);
                }
            }
        }
        for (rp, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
            let m = &wi[pi * rp + 32..];
            let mins = [
                [ld_i32(&m[0..]), ld_i32(&m[4..])],
                [ld_i32(&m[8..]), ld_i32(&m[12..])],
            ];
            let (d, dmin) = (ld_f32(&ws[pf * rp..]), ld_f32(&ws[pf * rp + 4..]));
            for ((acc, isum), y) in acc.iter_mut().zip(isum).zip(&y) {
                let imin = mins_tile(mins, [bsums32(&y[0][b]), bsums32(&y[1][b])]);
                let dy = token_lanes(y[0][b].d, y[1][b].d);
                *acc = vfmaq_f32(*acc, vcvtq_f32_s32(isum), vmulq_f32(d, dy));
                *acc = vfmsq_f32(*acc, vcvtq_f32_s32(imin), vmulq_f32(dmin, dy));
            }
        }
    }
    acc
}

/// [`tile_q4k`] for Q6_K (16-weight sub-blocks, no mins).
#[target_feature(enable = "neon,i8mm")]
#[inline]
fn tile_q6k<const TP: usize>(
    (wq, wi, ws): (&[u8], &[i32], &[f32]),
    aq: &[i8],
    nb: usize,
    y: [[&[BlockQ8K]; 2]; TP],
) -> [[float32x4_t; TP]; 2] {
    let (pi, pf) = (Kind::Q6K.ints(), Kind::Q6K.floats());
    let mut acc = [[vdupq_n_f32(0.0); TP]; 2];
    for b in 0..nb {
        let (wi, ws) = (&wi[2 * pi * b..], &ws[2 * pf * b..]);
        let mut isum = [[vdupq_n_s32(0); TP]; 2];
        for q in 0..8 {
            let a = act_chunks::<TP>(aq, nb, b, q);
            for (rp, isum) in isum.iter_mut().enumerate() {
                let at = KB * b + 2 * QK_K * rp + 64 * q;
                let wr = [0, 1, 2, 3].map(|c| ld_w(&wq[at + 16 * c..]));
                // Sub-blocks 2q and 2q + 1: chunks 0-1 and 2-3.
                let s0 = ld_i32(&wi[pi * rp + 8 * q..]);
                let s1 = ld_i32(&wi[pi * rp + 8 * q + 4..]);
                for (isum, a) in isum.iter_mut().zip(&a) {
                    let lo = mmla(mmla(vdupq_n_s32(0), wr[0], a[0]), wr[1], a[1]);
                    let hi = mmla(mmla(vdupq_n_s32(0), wr[2], a[2]), wr[3], a[3]);
                    *isum = vmlaq_s32(vmlaq_s32(*isum, lo, s0), hi, s1);
                }
            }
        }
        for (rp, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
            let d = ld_f32(&ws[pf * rp..]);
            for ((acc, isum), y) in acc.iter_mut().zip(isum).zip(&y) {
                let dy = token_lanes(y[0][b].d, y[1][b].d);
                *acc = vfmaq_f32(*acc, vcvtq_f32_s32(isum), vmulq_f32(d, dy));
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
    a: &[BlockQ8K],
    nb: usize,
    o: &mut PanelOut<'_>,
    sc: &mut PanelScratch,
) {
    let Some((n_rows, _)) = o.dims(w.len(), rb, nb * kind.bytes(), a.len(), nb) else {
        return;
    };
    repack(kind, w, rb, n_rows, nb, sc);
    let (ni, nf) = (2 * kind.ints(), 2 * kind.floats());
    for_each_tile(a, nb, n_rows, sc, |sc, p, toks, at| {
        let panel = (
            &sc.wq[p * nb * KB..(p + 1) * nb * KB],
            &sc.wi[p * nb * ni..(p + 1) * nb * ni],
            &sc.ws[p * nb * nf..(p + 1) * nb * nf],
        );
        let aq = &sc.aq[at * nb * QK_K..];
        let y = |i| token(a, nb, &toks, i);
        let res = match (kind, toks.len() > 2) {
            (Kind::Q4K, true) => {
                results(tile_q4k::<2>(panel, aq, nb, [[y(0), y(1)], [y(2), y(3)]]))
            }
            (Kind::Q4K, false) => results(tile_q4k::<1>(panel, aq, nb, [[y(0), y(1)]])),
            (Kind::Q6K, true) => {
                results(tile_q6k::<2>(panel, aq, nb, [[y(0), y(1)], [y(2), y(3)]]))
            }
            (Kind::Q6K, false) => results(tile_q6k::<1>(panel, aq, nb, [[y(0), y(1)]])),
        };
        store(&res, o, n_rows, p, toks);
    });
}

/// Panel row loop of Q4_K: `out[r * n_tok + t] = W[r] · a[t]` for every row
/// of `w` (`rb` bytes) and token of `a` (`nb` blocks each), or token-major
/// (see `PanelOut`); `sc` is scratch.
pub(super) fn panel_q4_k(
    w: &[u8],
    rb: usize,
    a: &[BlockQ8K],
    nb: usize,
    o: &mut PanelOut<'_>,
    sc: &mut PanelScratch,
) {
    // SAFETY: only reachable through the table of
    // `neon_panel::with_i8mm_panels`, which detects i8mm first (NEON is
    // baseline).
    unsafe { inner(Kind::Q4K, w, rb, a, nb, o, sc) }
}

/// [`panel_q4_k`] for Q6_K.
pub(super) fn panel_q6_k(
    w: &[u8],
    rb: usize,
    a: &[BlockQ8K],
    nb: usize,
    o: &mut PanelOut<'_>,
    sc: &mut PanelScratch,
) {
    // SAFETY: only reachable through the table of
    // `neon_panel::with_i8mm_panels`, which detects i8mm first (NEON is
    // baseline).
    unsafe { inner(Kind::Q6K, w, rb, a, nb, o, sc) }
}
