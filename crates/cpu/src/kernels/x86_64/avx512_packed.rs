//! AVX-512 VNNI kernels for the legacy types packed once at load (layout
//! in `kernels/packed.rs`): the packing itself (the per-call panel repack's
//! transpose, with the file's nibbles and f16 scales kept as they are) and
//! the products, `avx512_panel`'s panel loop reading the packed bytes in
//! place and unpacking each block once for up to four tokens. Scalar twins:
//! `packed::pack`, `packed::packed_products` (bit for bit).

use super::super::packed::{offset, weight_part};
use super::super::{PanelOut, PanelScratch, Q8Block};
use super::avx2::{iq4nl_values, ld256};
use super::avx2_packed::{kind, pack_row, ty_of, IQ4NL, Q4_0, Q5_0, Q8_0};
use super::avx512_panel::{ld512, quad, st512, store, transpose16, TransposeIdx, PANEL};
use anedvd_base::GgmlType;
use std::arch::x86_64::*;

/// Tokens per chunk (activations of one chunk stay in L2).
const TOKEN_CHUNK: usize = 64;
/// Bytes of packed data prefetched ahead of the block being read (4 KB was
/// best of 1-16 KB on the 262k-row Q8_0 output matrix, 1 and 2 threads).
const PREFETCH_AHEAD: usize = 4096;

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_as<const K: u8>(src: &[u8], rb: usize, nb: usize, dst: &mut [u8]) {
    let ty = ty_of(K);
    let (bb, wp) = (ty.block_bytes() as usize, weight_part(ty));
    let n = src.len() / rb;
    let ix = TransposeIdx::new();
    for (p, d) in dst.chunks_exact_mut(nb * bb * PANEL).enumerate() {
        let rows = PANEL.min(n.saturating_sub(p * PANEL));
        let (ds, dw) = d.split_at_mut(nb * 32);
        ds.fill(0);
        for b in 0..nb {
            let w = &mut dw[b * wp..(b + 1) * wp];
            let mut u = [_mm256_setzero_si256(); PANEL];
            let mut masks = [0u64; 8];
            for (r, ur) in u.iter_mut().enumerate().take(rows) {
                let at = (p * PANEL + r) * rb + b * bb;
                *ur = pack_row::<K>(&src[at..at + bb], r, &mut ds[32 * b..], &mut masks);
            }
            let t = transpose16(&u, &ix);
            let regs = if K == Q8_0 { 8 } else { 4 };
            for (k, v) in t.into_iter().enumerate().take(regs) {
                st512(&mut w[64 * k..], v);
            }
            if K == Q5_0 {
                for (k, m) in masks.iter().enumerate() {
                    w[256 + 8 * k..256 + 8 * k + 8].copy_from_slice(&m.to_le_bytes());
                }
            }
        }
    }
}

/// One block's weight part `w` as eight registers of unsigned bytes
/// (register `k`: weights `4k..4k+4` of the 16 rows).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn unpack<const K: u8>(w: &[u8]) -> [__m512i; 8] {
    if K == Q8_0 {
        return [0, 1, 2, 3, 4, 5, 6, 7].map(|k| ld512(&w[64 * k..]));
    }
    let m4 = _mm512_set1_epi8(0x0f);
    let g = [0, 1, 2, 3].map(|q| ld512(&w[64 * q..]));
    let mut v = [_mm512_setzero_si512(); 8];
    for q in 0..4 {
        v[q] = _mm512_and_si512(g[q], m4);
        v[q + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(g[q]), m4);
    }
    if K == Q5_0 {
        let c16 = _mm512_set1_epi8(0x10);
        for (k, vk) in v.iter_mut().enumerate() {
            let m =
                u64::from_le_bytes(w[256 + 8 * k..256 + 8 * k + 8].try_into().unwrap_or([0; 8]));
            *vk = _mm512_mask_add_epi8(*vk, m, *vk, c16);
        }
    }
    if K == IQ4NL {
        let kv = _mm512_broadcast_i32x4(_mm256_castsi256_si128(iq4nl_values()));
        for vk in v.iter_mut() {
            *vk = _mm512_xor_si512(_mm512_shuffle_epi8(kv, *vk), _mm512_set1_epi8(-128));
        }
    }
    v
}

/// One packed panel (`nb` blocks: weight parts `pw`, f16 scales `ps`)
/// against `T` tokens: lane `r` of result `t` is row `r` · token `t`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn panel<const K: u8, const T: usize>(
    pw: &[u8],
    ps: &[u8],
    nb: usize,
    y: [&[Q8Block]; T],
) -> [__m512; T] {
    let (wp, off) = (weight_part(ty_of(K)), offset(ty_of(K)));
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        // Products of few tokens stream the panels from memory faster than
        // the hardware prefetcher fetches them (packed decode was 5-25%
        // slower than the file layout without this). Block `b`'s share of
        // the panel (its scales and weights) is prefetched 4 KB ahead, from
        // the panel's start (its scales). Prefetching never faults, so
        // running past the end of the panels is harmless.
        let ahead = ps.as_ptr().wrapping_add(b * (wp + 32) + PREFETCH_AHEAD);
        for l in (0..wp + 32).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(l).cast());
        }
        let w = unpack::<K>(&pw[b * wp..(b + 1) * wp]);
        let dw = _mm512_cvtph_ps(ld256(&ps[32 * b..]));
        for t in 0..T {
            let yb = &y[t][b];
            let mut i0 = _mm512_set1_epi32(-off * yb.isum);
            let mut i1 = _mm512_setzero_si512();
            for k in 0..4 {
                i0 = _mm512_dpbusd_epi32(i0, w[2 * k], _mm512_set1_epi32(quad(yb, 2 * k)));
                i1 = _mm512_dpbusd_epi32(i1, w[2 * k + 1], _mm512_set1_epi32(quad(yb, 2 * k + 1)));
            }
            let s = _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1));
            acc[t] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(yb.d)), acc[t]);
        }
    }
    acc
}

/// Products of fewer tokens than this run the AVX2 kernels in the Zen 4
/// table (`avx512::ZEN4_VNNI`; same layout, bit for bit the same sums):
/// there they stream the panels from DRAM faster than these. The Q8_0
/// 262144x640 product (178 MB, Gemma 3 270M's output matrix) read
/// 20.0-20.9 GB/s on one thread against 14.2-17.0 here, and 29.6-32.1
/// against 19.8-26.9 on two (four alternating runs); Gemma 3 270M decode
/// was faster in 11 of 13 alternating pairs (medians 91.1 -> 104.5 tok/s).
/// Neither a prefetch distance of 1024 or 2048 bytes nor this loop's
/// prefetches spread over the block closed the gap, and the cause is not
/// found (the VM has no hardware counters). In L2 these kernels are twice
/// as fast, so prefill stays here.
const FEW_TOKENS: usize = 4;

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn products_as<const K: u8>(
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[Q8Block],
    o: &mut PanelOut<'_>,
) {
    let n_tok = a.len() / nb;
    let ty = ty_of(K);
    let pb = nb * ty.block_bytes() as usize * PANEL;
    if !o.fits(n_rows, n_tok) {
        return;
    }
    let row = |t: usize| &a[t * nb..(t + 1) * nb];
    let n_panels = n_rows.div_ceil(PANEL).min(panels.len() / pb);
    for c0 in (0..n_tok).step_by(TOKEN_CHUNK) {
        let c1 = (c0 + TOKEN_CHUNK).min(n_tok);
        for p in 0..n_panels {
            let (ps, pw) = panels[p * pb..(p + 1) * pb].split_at(nb * 32);
            let mut t = c0;
            while t + 4 <= c1 {
                let y = [row(t), row(t + 1), row(t + 2), row(t + 3)];
                store(panel::<K, 4>(pw, ps, nb, y), o, n_rows, p, t);
                t += 4;
            }
            match c1 - t {
                3 => {
                    let y = [row(t), row(t + 1), row(t + 2)];
                    store(panel::<K, 3>(pw, ps, nb, y), o, n_rows, p, t);
                }
                2 => {
                    let y = [row(t), row(t + 1)];
                    store(panel::<K, 2>(pw, ps, nb, y), o, n_rows, p, t);
                }
                1 => store(panel::<K, 1>(pw, ps, nb, [row(t)]), o, n_rows, p, t),
                _ => {}
            }
        }
    }
}

/// Packs rows of `ty` (see `packed::pack`).
pub(super) fn pack(ty: GgmlType, src: &[u8], rb: usize, nb: usize, dst: &mut [u8]) {
    let Some(k) = kind(ty) else { return };
    if nb == 0 || rb < nb * ty.block_bytes() as usize {
        return;
    }
    // SAFETY: only reachable through the AVX-512 VNNI tables (both
    // tunings), which `avx512_table(true)` returns after detecting every
    // feature that `pack_as` and `products_as` are compiled for.
    unsafe {
        match k {
            Q8_0 => pack_as::<Q8_0>(src, rb, nb, dst),
            Q4_0 => pack_as::<Q4_0>(src, rb, nb, dst),
            Q5_0 => pack_as::<Q5_0>(src, rb, nb, dst),
            _ => pack_as::<IQ4NL>(src, rb, nb, dst),
        }
    }
}

/// Packed products (see `packed::packed_products`); with `FEW_IN_AVX2`
/// (the Zen 4 table) those of fewer than [`FEW_TOKENS`] tokens run the AVX2
/// kernels.
pub(super) fn packed_products<const FEW_IN_AVX2: bool>(
    ty: GgmlType,
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[Q8Block],
    o: &mut PanelOut<'_>,
) {
    let Some(k) = kind(ty) else { return };
    if nb == 0 {
        return;
    }
    if FEW_IN_AVX2 && a.len() / nb < FEW_TOKENS {
        return super::avx2_packed::packed_products(ty, panels, nb, n_rows, a, o);
    }
    // SAFETY: as in `pack`.
    unsafe {
        match k {
            Q8_0 => products_as::<Q8_0>(panels, nb, n_rows, a, o),
            Q4_0 => products_as::<Q4_0>(panels, nb, n_rows, a, o),
            Q5_0 => products_as::<Q5_0>(panels, nb, n_rows, a, o),
            _ => products_as::<IQ4NL>(panels, nb, n_rows, a, o),
        }
    }
}

/// The per-call panel kernel (`qkernels::PanelQ8`) of `ty` for weights
/// that were not packed at load (`ANEDVD_PACK=0`, tables used directly):
/// packs the call's rows into `sc` in the same layout, then runs the packed
/// products, so there is one layout and one product loop.
fn per_call(
    ty: GgmlType,
    w: &[u8],
    rb: usize,
    a: &[Q8Block],
    nb: usize,
    o: &mut PanelOut<'_>,
    sc: &mut PanelScratch,
) {
    let bb = ty.block_bytes() as usize;
    if rb == 0 || nb == 0 || rb < nb * bb {
        return;
    }
    let n_rows = w.len() / rb;
    // `pack` writes every byte of the panels it is given.
    sc.wq.resize(n_rows.div_ceil(PANEL) * nb * bb * PANEL, 0);
    pack(ty, &w[..n_rows * rb], rb, nb, &mut sc.wq);
    packed_products::<false>(ty, &sc.wq, nb, n_rows, a, o);
}

macro_rules! per_call_kernels {
    ($($name:ident => $ty:expr),*) => {$(
        /// Per-call panel kernel (see `per_call`).
        pub(super) fn $name(
            w: &[u8],
            rb: usize,
            a: &[Q8Block],
            nb: usize,
            o: &mut PanelOut<'_>,
            sc: &mut PanelScratch,
        ) {
            per_call($ty, w, rb, a, nb, o, sc)
        }
    )*};
}

per_call_kernels!(
    panel_q8_0 => GgmlType::Q8_0,
    panel_q4_0 => GgmlType::Q4_0,
    panel_q5_0 => GgmlType::Q5_0,
    panel_iq4_nl => GgmlType::IQ4NL
);
