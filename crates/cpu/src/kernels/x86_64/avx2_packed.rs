//! AVX2 products of the legacy types packed once at load (Q8_0, Q4_0,
//! Q5_0, IQ4_NL; layout in `kernels/packed.rs`, the same bytes the AVX-512
//! VNNI kernels read): each 64-byte register of a panel block is two ymm
//! halves, rows 0-7 and rows 8-15, each lane four weights of one row, so one
//! `vpmaddubsw` with four broadcast activation bytes advances 8 rows and the
//! result needs no horizontal sum (lane `r` is row `r`).
//!
//! Without `vpdpbusd` the products go through `vpmaddubsw`'s i16 pair sums,
//! which must not saturate (bounds with activations up to 128 in
//! magnitude):
//! - Q4_0 and Q5_0 are unpacked to unsigned `u = w + off` below 32 (pair
//!   sums at most `2 · 31 · 128 = 7936`); those are summed in i16 over a
//!   whole block for Q4_0 (at most `8 · 2 · 15 · 128 = 30720`) and over
//!   four registers for Q5_0 (31744), then one `vpmaddwd` against ones
//!   widens them, and the offset comes back as `-off · sum(y)`.
//! - Q8_0 and IQ4_NL have signed weights (the packed `w + 128` would
//!   saturate), so they take `vpmaddubsw(|w|, sign(y, w))` (llama.cpp's AVX2
//!   trick; a Q8_0 weight of -128 gives `|w|` = 0x80, which `vpmaddubsw`
//!   reads as 128), one `vpmaddwd` per register. That is exact for
//!   activations in [-127, 127], which the activation quantizers give for
//!   finite inputs (`vpsignb` would wrap a -128; the file-layout
//!   `avx2::dot_q8_0` shares that precondition).
//!
//! That is what the file-layout row kernels (`avx2::dot_q8_0`) compute per
//! row, but here one block scale conversion, one FMA and no horizontal sum
//! serve 8 rows, and the panels stream front to back with a prefetch ahead.
//! On Zen 2 the file-layout Q8_0 rows read 17 GB/s from DRAM on two threads
//! against 21 for a plain read; the products of Gemma 3 270M's 178 MB Q8_0
//! output matrix were 61% of its decode.
//!
//! The integer sums of a block are exactly the scalar twin's
//! (`packed::packed_products`) and combine with the same fused multiply-add
//! per block, so the results are equal bit for bit.

use super::super::packed::{offset, weight_part};
use super::super::{PanelOut, Q8Block};
use super::avx2::{bytes_from_bits, iq4nl_values, ld128, ld256};
use super::avx2_packed_k::{prefetch, store};
use super::avx2_panel::{st256, transpose8};
use super::avx512_panel::quad;
use anedvd_base::GgmlType;
use std::arch::x86_64::*;

/// Rows per panel (two ymm halves of eight).
const PANEL: usize = 16;
/// Tokens per chunk (activations of one chunk stay in L2).
const TOKEN_CHUNK: usize = 64;
/// Bytes of packed data prefetched ahead of the block being read (shorter
/// than the AVX-512 kernels' for the reason `avx2_packed_k::PREFETCH_AHEAD`
/// gives): the Q8_0 262144x640 matvec (Gemma 3 270M's output matrix) on two
/// threads from DRAM ran ~25 GB/s at 2048 and ~31 at 1024 (the sweep:
/// docs/BENCHMARKS.md).
const PREFETCH_AHEAD: usize = 1024;
/// Tokens of a chunk from which Q5_0 panels are unpacked once for the
/// chunk ([`unpack_panel`]) rather than once per four tokens
/// (`kernels_matvec`, Q5_0 2048x640 in L2, GB/s per token, once per chunk
/// against per four tokens: 8 tokens 29.3 / 31.7, 16 34.9 / 28.7, 64
/// 39.9 / 32.6).
const UNPACK_MIN_TOKENS: usize = 16;

/// The packed types, as const generic parameters.
pub(super) const Q8_0: u8 = 0;
pub(super) const Q4_0: u8 = 1;
pub(super) const Q5_0: u8 = 2;
pub(super) const IQ4NL: u8 = 3;

/// `ty`'s number for the const generic functions (here and in
/// `avx512_packed`).
pub(super) fn kind(ty: GgmlType) -> Option<u8> {
    match ty {
        GgmlType::Q8_0 => Some(Q8_0),
        GgmlType::Q4_0 => Some(Q4_0),
        GgmlType::Q5_0 => Some(Q5_0),
        GgmlType::IQ4NL => Some(IQ4NL),
        _ => None,
    }
}

/// The type numbered `K`.
pub(super) const fn ty_of(k: u8) -> GgmlType {
    match k {
        Q8_0 => GgmlType::Q8_0,
        Q4_0 => GgmlType::Q4_0,
        Q5_0 => GgmlType::Q5_0,
        _ => GgmlType::IQ4NL,
    }
}

/// Row `r`'s block `x` (file layout) for packing: the f16 scale copied to
/// `ds` (at `2 r`), the fifth bits of Q5_0 ORed into `masks` (bit `4 r + j`
/// of mask `k` for weight `4 k + j`), and the quant bytes as they go into
/// the weight registers before the transpose (Q8_0: 32 unsigned `w + 128`;
/// the others: the 16 nibble bytes, zero-extended).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn pack_row<const K: u8>(
    x: &[u8],
    r: usize,
    ds: &mut [u8],
    masks: &mut [u64; 8],
) -> __m256i {
    ds[2 * r..2 * r + 2].copy_from_slice(&x[..2]);
    match K {
        Q8_0 => _mm256_xor_si256(ld256(&x[2..]), _mm256_set1_epi8(-128)),
        Q5_0 => {
            let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
            for (k, m) in masks.iter_mut().enumerate() {
                *m |= u64::from((qh >> (4 * k)) & 0xf) << (4 * r);
            }
            _mm256_zextsi128_si256(ld128(&x[6..]))
        }
        _ => _mm256_zextsi128_si256(ld128(&x[2..])),
    }
}

/// Packs rows `src` (`rb` bytes, `nb` blocks each) into the panels `dst`:
/// per block, each 8-row half's quant bytes transposed by dwords.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_as<const K: u8>(src: &[u8], rb: usize, nb: usize, dst: &mut [u8]) {
    let ty = ty_of(K);
    let (bb, wp) = (ty.block_bytes() as usize, weight_part(ty));
    let n = src.len() / rb;
    for (p, d) in dst.chunks_exact_mut(nb * bb * PANEL).enumerate() {
        let rows = PANEL.min(n.saturating_sub(p * PANEL));
        let (ds, dw) = d.split_at_mut(nb * 32);
        ds.fill(0);
        for b in 0..nb {
            let w = &mut dw[b * wp..(b + 1) * wp];
            let mut masks = [0u64; 8];
            for h in 0..2 {
                let mut u = [_mm256_setzero_si256(); 8];
                for (i, ur) in u.iter_mut().enumerate().take(rows.saturating_sub(8 * h)) {
                    let r = 8 * h + i;
                    let at = (p * PANEL + r) * rb + b * bb;
                    *ur = pack_row::<K>(&src[at..at + bb], r, &mut ds[32 * b..], &mut masks);
                }
                let regs = if K == Q8_0 { 8 } else { 4 };
                for (k, v) in transpose8(&u).into_iter().enumerate().take(regs) {
                    st256(&mut w[64 * k + 32 * h..], v);
                }
            }
            if K == Q5_0 {
                for (k, m) in masks.iter().enumerate() {
                    w[256 + 8 * k..256 + 8 * k + 8].copy_from_slice(&m.to_le_bytes());
                }
            }
        }
    }
}

/// Weights `4k..4k + 4` of rows `8h..8h + 8` of one block (weight part
/// `w`) as 32 bytes: unsigned `w + off` for Q4_0 and Q5_0, signed for Q8_0
/// and IQ4_NL.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn weights<const K: u8>(w: &[u8], k: usize, h: usize) -> __m256i {
    if K == Q8_0 {
        return _mm256_xor_si256(ld256(&w[64 * k + 32 * h..]), _mm256_set1_epi8(-128));
    }
    let g = ld256(&w[64 * (k % 4) + 32 * h..]);
    let g = if k < 4 { g } else { _mm256_srli_epi16::<4>(g) };
    let nib = _mm256_and_si256(g, _mm256_set1_epi8(0x0f));
    match K {
        Q5_0 => {
            let at = 256 + 8 * k + 4 * h;
            let bits = u32::from_le_bytes([w[at], w[at + 1], w[at + 2], w[at + 3]]);
            let fifth = _mm256_and_si256(bytes_from_bits(bits), _mm256_set1_epi8(0x10));
            _mm256_or_si256(nib, fifth)
        }
        IQ4NL => _mm256_shuffle_epi8(iq4nl_values(), nib),
        _ => nib,
    }
}

/// Registers of a block whose i16 pair sums are added before widening
/// (see the module documentation): all eight for Q4_0, four for Q5_0. The
/// signed types widen every product at once.
const fn i16_run(k: u8) -> usize {
    if k == Q4_0 {
        8
    } else {
        4
    }
}

/// Halves `h0..h0 + NH` of one panel block (register `k` of half `h` from
/// `weights(k, h)`, f16 scales `ds`, 32 bytes) against `T` tokens' blocks:
/// adds row `8 h + r` · token `t` to lane `r` of `acc[t][h]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block<const K: u8, const T: usize, const NH: usize>(
    weights: impl Fn(usize, usize) -> __m256i,
    ds: &[u8],
    h0: usize,
    y: [&Q8Block; T],
    acc: &mut [[__m256; 2]; T],
) {
    let off = offset(ty_of(K));
    let ones = _mm256_set1_epi16(1);
    let run = i16_run(K);
    let signed = K == Q8_0 || K == IQ4NL;
    for h in h0..h0 + NH {
        let mut isum: [__m256i; T] =
            std::array::from_fn(|t| _mm256_set1_epi32(if signed { 0 } else { -off * y[t].isum }));
        let mut s16 = [_mm256_setzero_si256(); T];
        for k in 0..8 {
            let wk = weights(k, h);
            if signed {
                let mag = _mm256_abs_epi8(wk);
                for t in 0..T {
                    let yk = _mm256_sign_epi8(_mm256_set1_epi32(quad(y[t], k)), wk);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, yk), ones);
                    isum[t] = _mm256_add_epi32(isum[t], p);
                }
            } else {
                for t in 0..T {
                    let yk = _mm256_set1_epi32(quad(y[t], k));
                    s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(wk, yk));
                }
                if (k + 1) % run == 0 {
                    for t in 0..T {
                        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16[t], ones));
                        s16[t] = _mm256_setzero_si256();
                    }
                }
            }
        }
        let dw = _mm256_cvtph_ps(ld128(&ds[16 * h..]));
        for t in 0..T {
            let d = _mm256_mul_ps(dw, _mm256_set1_ps(y[t].d));
            acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), d, acc[t][h]);
        }
    }
}

/// One packed panel (`nb` blocks: weight parts `pw`, f16 scales `ps`)
/// against `T` tokens: lane `r` of `result[t][h]` is row `8 h + r` · token
/// `t`. With `UNPACKED` the weights come from `unpacked` instead, the
/// panel's registers as [`unpack_panel`] left them. Three and four tokens
/// take the halves one after the other (their sums and the weights would
/// not fit the 16 ymm registers with both).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn panel<const K: u8, const T: usize, const UNPACKED: bool>(
    pw: &[u8],
    unpacked: &[__m256i],
    ps: &[u8],
    nb: usize,
    y: [&[Q8Block]; T],
) -> [[__m256; 2]; T] {
    let wp = weight_part(ty_of(K));
    let mut acc = [[_mm256_setzero_ps(); 2]; T];
    for b in 0..nb {
        let ds = &ps[32 * b..32 * b + 32];
        let yb = y.map(|yt| &yt[b]);
        if UNPACKED {
            let regs = &unpacked[16 * b..16 * b + 16];
            block::<K, T, 1>(|k, h| regs[8 * h + k], ds, 0, yb, &mut acc);
            block::<K, T, 1>(|k, h| regs[8 * h + k], ds, 1, yb, &mut acc);
            continue;
        }
        // Few tokens stream the panels faster than the hardware prefetcher
        // fetches them: block `b`'s share of the panel, [`PREFETCH_AHEAD`]
        // bytes on from the panel's start (its scales come first).
        // Prefetching never faults, so running past the end is harmless.
        prefetch(
            ps.as_ptr().wrapping_add(b * (wp + 32) + PREFETCH_AHEAD),
            wp + 32,
        );
        let w = &pw[b * wp..(b + 1) * wp];
        let weights = |k, h| weights::<K>(w, k, h);
        if T >= 3 {
            block::<K, T, 1>(weights, ds, 0, yb, &mut acc);
            block::<K, T, 1>(weights, ds, 1, yb, &mut acc);
        } else {
            block::<K, T, 2>(weights, ds, 0, yb, &mut acc);
        }
    }
    acc
}

/// Every register of a panel's `nb` blocks (weight parts `pw`) unpacked
/// into `out` (register `k` of half `h` of block `b` at `16 b + 8 h + k`).
/// Q5_0's fifth bits take about seven instructions per register to merge,
/// as many as four tokens' products of it, so a prefill chunk reads them
/// unpacked (the other types unpack in one to three).
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_panel<const K: u8>(pw: &[u8], nb: usize, out: &mut Vec<__m256i>) {
    let wp = weight_part(ty_of(K));
    out.clear();
    for b in 0..nb {
        let w = &pw[b * wp..(b + 1) * wp];
        for h in 0..2 {
            for k in 0..8 {
                out.push(weights::<K>(w, k, h));
            }
        }
    }
}

/// Tokens `c0..c1` against one panel, four at a time, then the rest.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tokens<const K: u8, const UNPACKED: bool>(
    (pw, unpacked, ps): (&[u8], &[__m256i], &[u8]),
    nb: usize,
    a: &[Q8Block],
    (c0, c1): (usize, usize),
    o: &mut PanelOut<'_>,
    n_rows: usize,
    p: usize,
) {
    let row = |t: usize| &a[t * nb..(t + 1) * nb];
    let mut t = c0;
    while t + 4 <= c1 {
        let y = [row(t), row(t + 1), row(t + 2), row(t + 3)];
        store(
            panel::<K, 4, UNPACKED>(pw, unpacked, ps, nb, y),
            o,
            n_rows,
            p,
            t,
        );
        t += 4;
    }
    match c1 - t {
        3 => {
            let y = [row(t), row(t + 1), row(t + 2)];
            store(
                panel::<K, 3, UNPACKED>(pw, unpacked, ps, nb, y),
                o,
                n_rows,
                p,
                t,
            );
        }
        2 => {
            let y = [row(t), row(t + 1)];
            store(
                panel::<K, 2, UNPACKED>(pw, unpacked, ps, nb, y),
                o,
                n_rows,
                p,
                t,
            );
        }
        1 => store(
            panel::<K, 1, UNPACKED>(pw, unpacked, ps, nb, [row(t)]),
            o,
            n_rows,
            p,
            t,
        ),
        _ => {}
    }
}

/// Products of `n_rows` packed rows (`panels`, `nb` blocks per row) with
/// every token of `a`, into `o`: tokens in chunks that stay in L2, each
/// panel of a chunk read once per four tokens. Q5_0 panels are unpacked
/// once per chunk of at least [`UNPACK_MIN_TOKENS`].
#[target_feature(enable = "avx2,fma,f16c")]
fn products_as<const K: u8>(
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[Q8Block],
    o: &mut PanelOut<'_>,
) {
    let n_tok = a.len() / nb;
    let pb = nb * ty_of(K).block_bytes() as usize * PANEL;
    if !o.fits(n_rows, n_tok) {
        return;
    }
    let n_panels = n_rows.div_ceil(PANEL).min(panels.len() / pb);
    let mut unpacked = Vec::new();
    for c0 in (0..n_tok).step_by(TOKEN_CHUNK) {
        let c1 = (c0 + TOKEN_CHUNK).min(n_tok);
        for p in 0..n_panels {
            let (ps, pw) = panels[p * pb..(p + 1) * pb].split_at(nb * 32);
            if K == Q5_0 && c1 - c0 >= UNPACK_MIN_TOKENS {
                unpack_panel::<K>(pw, nb, &mut unpacked);
                tokens::<K, true>((pw, &unpacked, ps), nb, a, (c0, c1), o, n_rows, p);
            } else {
                tokens::<K, false>((pw, &[], ps), nb, a, (c0, c1), o, n_rows, p);
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
    // SAFETY: only reachable through the AVX2 table and the AVX-512 BW one
    // (which inherits it), built only after `has_avx2()` detected AVX2, FMA
    // and F16C, every feature `pack_as` is compiled for.
    unsafe {
        match k {
            Q8_0 => pack_as::<Q8_0>(src, rb, nb, dst),
            Q4_0 => pack_as::<Q4_0>(src, rb, nb, dst),
            Q5_0 => pack_as::<Q5_0>(src, rb, nb, dst),
            _ => pack_as::<IQ4NL>(src, rb, nb, dst),
        }
    }
}

/// Packed products of the legacy types (see `packed::packed_products`).
pub(super) fn packed_products(
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
    // SAFETY: only reachable through the AVX2 table, which `avx2_table`
    // returns after detecting AVX2, FMA and F16C, every feature
    // `products_as` is compiled for, and from the Zen 4 AVX-512 VNNI
    // table's `avx512_packed::packed_products::<true>`, which
    // `avx512_table` returns only where `has_avx2` holds as well.
    unsafe {
        match k {
            Q8_0 => products_as::<Q8_0>(panels, nb, n_rows, a, o),
            Q4_0 => products_as::<Q4_0>(panels, nb, n_rows, a, o),
            Q5_0 => products_as::<Q5_0>(panels, nb, n_rows, a, o),
            _ => products_as::<IQ4NL>(panels, nb, n_rows, a, o),
        }
    }
}
