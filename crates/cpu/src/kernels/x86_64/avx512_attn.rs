//! AVX-512 attention kernels over f16 key/value rows: the multi-query dots
//! and weighted sums of `avx2.rs`, 16 lanes wide.

use super::super::{KV_PREFETCH_ROWS, WSUM_BLOCK_ROWS};
use super::avx2::ld256;
use super::prefetch_rows;
use std::arch::x86_64::*;

/// 16 f16 (32 bytes at the start of `w`) as f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
fn load_f16x16(w: &[u8]) -> __m512 {
    _mm512_cvtph_ps(ld256(w))
}

/// Loads 16 f32 from the start of `s`.
#[target_feature(enable = "avx512f")]
#[inline]
fn ld_ps(s: &[f32]) -> __m512 {
    let s = &s[..16];
    // SAFETY: `s` is 16 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// Rows per pass of [`dot_f16_g`]: each query load serves this many rows,
/// and the `G × DOT_ROWS` (at most 16) sums of a pass are reduced together
/// by [`hsum16`].
const DOT_ROWS: usize = 4;

/// Lane `v` of the result is the sum of the 16 lanes of `x[v]`: a
/// transposing tree of 45 shuffles and adds instead of 16 separate
/// reductions of 8 each.
#[target_feature(enable = "avx512f")]
#[inline]
fn hsum16(x: &[__m512; 16]) -> __m512 {
    // Per 128-bit chunk: [x[2m] lanes 0+2, x[2m+1] 0+2, x[2m] 1+3, x[2m+1] 1+3].
    let mut l1 = [_mm512_setzero_ps(); 8];
    for (m, l) in l1.iter_mut().enumerate() {
        let (a, b) = (x[2 * m], x[2 * m + 1]);
        *l = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
    // Per chunk: the chunk's sums of x[4m], x[4m + 1], x[4m + 2], x[4m + 3].
    let mut l2 = [_mm512_setzero_ps(); 4];
    for (m, l) in l2.iter_mut().enumerate() {
        let (a, b) = (l1[2 * m], l1[2 * m + 1]);
        *l = _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(a, b),
            _mm512_shuffle_ps::<0xEE>(a, b),
        );
    }
    // Chunks [l2[2m] c0+c2, l2[2m] c1+c3, l2[2m+1] c0+c2, l2[2m+1] c1+c3].
    let mut l3 = [_mm512_setzero_ps(); 2];
    for (m, l) in l3.iter_mut().enumerate() {
        let (a, b) = (l2[2 * m], l2[2 * m + 1]);
        *l = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        );
    }
    // Chunk m: the whole sums of x[4m..4m + 4].
    _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x88>(l3[0], l3[1]),
        _mm512_shuffle_f32x4::<0xDD>(l3[0], l3[1]),
    )
}

/// Dots of each of `n_out` f16 rows with `G` queries of `hd`, [`DOT_ROWS`]
/// rows per pass (each query load serves them all): `out[g * n_out + j]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
fn dot_f16_g<const G: usize>(
    w: &[u8],
    stride: usize,
    q: &[f32],
    hd: usize,
    out: &mut [f32],
    n_out: usize,
) {
    let body = hd / 16 * 16;
    let q = &q[..G * hd];
    let tail = |row: &[u8], g: usize| {
        if body == hd {
            return 0.0;
        }
        super::super::generic::dot_f16(&row[2 * body..2 * hd], &q[g * hd + body..(g + 1) * hd])
    };
    let mut j = 0;
    while j + DOT_ROWS <= n_out {
        let mut rows = [&w[..0]; DOT_ROWS];
        for (r, row) in rows.iter_mut().enumerate() {
            *row = &w[(j + r) * stride..][..2 * hd];
        }
        prefetch_rows(w, stride, j + KV_PREFETCH_ROWS, DOT_ROWS, 2 * hd);
        let mut acc = [_mm512_setzero_ps(); 16];
        let mut i = 0;
        while i < body {
            let mut k = [_mm512_setzero_ps(); DOT_ROWS];
            for (k, row) in k.iter_mut().zip(&rows) {
                // SAFETY: `i + 16 <= body <= hd` and `row` is `2 * hd`
                // bytes, so its 32 bytes at `2 * i` are in bounds; `loadu`
                // has no alignment requirement.
                *k = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(row.as_ptr().add(2 * i).cast()) });
            }
            for g in 0..G {
                // SAFETY: `q` is `G * hd` f32 and `i + 16 <= hd`.
                let qv = unsafe { _mm512_loadu_ps(q.as_ptr().add(g * hd + i)) };
                for (r, k) in k.iter().enumerate() {
                    acc[g * DOT_ROWS + r] = _mm512_fmadd_ps(*k, qv, acc[g * DOT_ROWS + r]);
                }
            }
            i += 16;
        }
        let mut sums = [0.0f32; 16];
        // SAFETY: `sums` is 16 writable f32.
        unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), hsum16(&acc)) };
        for g in 0..G {
            for (r, row) in rows.iter().enumerate() {
                out[g * n_out + j + r] = sums[g * DOT_ROWS + r] + tail(row, g);
            }
        }
        j += DOT_ROWS;
    }
    while j < n_out {
        let row = &w[j * stride..][..2 * hd];
        let mut acc = [_mm512_setzero_ps(); G];
        let mut i = 0;
        while i < body {
            let k0 = load_f16x16(&row[2 * i..]);
            for (g, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(k0, ld_ps(&q[g * hd + i..]), *a);
            }
            i += 16;
        }
        for (g, a) in acc.iter().enumerate() {
            out[g * n_out + j] = _mm512_reduce_add_ps(*a) + tail(row, g);
        }
        j += 1;
    }
}

/// Dots of f16 rows with several queries (up to four per pass over the
/// rows); see `DotF16Multi`.
pub(super) fn dot_f16_multi(w: &[u8], stride: usize, q: &[f32], n_q: usize, out: &mut [f32]) {
    if n_q == 0 {
        return;
    }
    let (hd, n) = (q.len() / n_q, out.len() / n_q);
    let mut g0 = 0;
    while g0 < n_q {
        let gq = (n_q - g0).min(4);
        let (qs, os) = (&q[g0 * hd..(g0 + gq) * hd], &mut out[g0 * n..(g0 + gq) * n]);
        // SAFETY: only reachable through the AVX-512 tables, which
        // `avx512_table` returns after detecting AVX2, FMA, F16C and
        // AVX-512 F.
        unsafe {
            match gq {
                4 => dot_f16_g::<4>(w, stride, qs, hd, os, n),
                3 => dot_f16_g::<3>(w, stride, qs, hd, os, n),
                2 => dot_f16_g::<2>(w, stride, qs, hd, os, n),
                _ => dot_f16_g::<1>(w, stride, qs, hd, os, n),
            }
        }
        g0 += gq;
    }
}

/// Adds `sum_r weights[r][g] * rows[r][i..i + 16 * V]` to
/// `out[g * hd + i..][..16 * V]` for every `g < G`.
///
/// # Safety
/// AVX-512 F and F16C must be present, every row must hold `2 * (i + 16 * V)`
/// bytes and `out` must hold `(G - 1) * hd + i + 16 * V` f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
unsafe fn wsum_strip<const G: usize, const V: usize>(
    rows: &[&[u8]],
    weights: &[[f32; G]],
    out: *mut f32,
    hd: usize,
    i: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); V]; G];
    for (g, a) in acc.iter_mut().enumerate() {
        for (c, a) in a.iter_mut().enumerate() {
            // SAFETY: in bounds of `out` (caller).
            *a = unsafe { _mm512_loadu_ps(out.add(g * hd + i + 16 * c)) };
        }
    }
    for (row, w) in rows.iter().zip(weights) {
        let mut k = [_mm512_setzero_ps(); V];
        for (c, k) in k.iter_mut().enumerate() {
            // SAFETY: in bounds of the row (caller).
            *k = _mm512_cvtph_ps(unsafe {
                _mm256_loadu_si256(row.as_ptr().add(2 * (i + 16 * c)).cast())
            });
        }
        for (a, &w) in acc.iter_mut().zip(w) {
            let pv = _mm512_set1_ps(w);
            for (a, k) in a.iter_mut().zip(&k) {
                *a = _mm512_fmadd_ps(pv, *k, *a);
            }
        }
    }
    for (g, a) in acc.iter().enumerate() {
        for (c, a) in a.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { _mm512_storeu_ps(out.add(g * hd + i + 16 * c), *a) };
        }
    }
}

/// Weighted sums of `len` f16 rows with `G` weight vectors, every row
/// decoded once, each output accumulated in row order from zero. Rows go in
/// blocks of [`WSUM_BLOCK_ROWS`]: every column strip (32 outputs, then 16)
/// of a block before the next block, the accumulators parked in `out`.
/// A block's rows are bounds-checked once and its weights gathered once, so
/// the strips run on pointers.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
fn wsum_f16_g<const G: usize>(
    v: &[u8],
    stride: usize,
    p: &[f32],
    len: usize,
    out: &mut [f32],
    hd: usize,
) {
    let body = hd / 16 * 16;
    let p = &p[..G * len];
    let out = &mut out[..G * hd];
    for g in 0..G {
        out[g * hd..g * hd + body].fill(0.0);
    }
    let mut j0 = 0;
    while j0 < len {
        let nb = (len - j0).min(WSUM_BLOCK_ROWS);
        let mut rows = [&v[..0]; WSUM_BLOCK_ROWS];
        let mut weights = [[0.0f32; G]; WSUM_BLOCK_ROWS];
        for (r, (row, w)) in rows.iter_mut().zip(&mut weights).take(nb).enumerate() {
            *row = &v[(j0 + r) * stride..][..2 * hd];
            for (g, w) in w.iter_mut().enumerate() {
                *w = p[g * len + j0 + r];
            }
        }
        let (rows, weights) = (&rows[..nb], &weights[..nb]);
        let o = out.as_mut_ptr();
        // The next block's rows are prefetched a share per strip, as the
        // per-row loop before did in its first strip: the whole block at
        // once (64 lines) outran the outstanding misses a core can hold,
        // and the attention read its cache at 24-27 GB/s instead of 45-54
        // (`attention_decode` bench, depth 32000, 2 threads, Zen 5).
        let strips = body.div_ceil(32);
        let mut i = 0;
        for strip in 0..strips {
            let (lo, hi) = (
                strip * WSUM_BLOCK_ROWS / strips,
                (strip + 1) * WSUM_BLOCK_ROWS / strips,
            );
            prefetch_rows(v, stride, j0 + WSUM_BLOCK_ROWS + lo, hi - lo, 2 * hd);
            // SAFETY: the strip (32 values, or the last 16 of `body`) ends
            // at or before `body <= hd`: every row is `2 * hd` bytes and
            // `out` is `G * hd` f32, so the strip's bytes of each row and its
            // sums at `g * hd + i` are in bounds.
            unsafe {
                if i + 32 <= body {
                    wsum_strip::<G, 2>(rows, weights, o, hd, i);
                } else {
                    wsum_strip::<G, 1>(rows, weights, o, hd, i);
                }
            }
            i += 32;
        }
        j0 += nb;
    }
    if body < hd {
        for g in 0..G {
            let o = &mut out[g * hd + body..(g + 1) * hd];
            super::super::generic::wsum_f16(&v[2 * body..], stride, &p[g * len..(g + 1) * len], o);
        }
    }
}

/// Weighted sums of f16 rows with several weight vectors (up to four per
/// pass over the rows); see `WsumF16Multi`.
pub(super) fn wsum_f16_multi(v: &[u8], stride: usize, p: &[f32], n_q: usize, out: &mut [f32]) {
    if n_q == 0 {
        return;
    }
    let (len, hd) = (p.len() / n_q, out.len() / n_q);
    let mut g0 = 0;
    while g0 < n_q {
        let gq = (n_q - g0).min(4);
        let (ps, os) = (
            &p[g0 * len..(g0 + gq) * len],
            &mut out[g0 * hd..(g0 + gq) * hd],
        );
        // SAFETY: only reachable through the AVX-512 tables, which
        // `avx512_table` returns after detecting AVX2, FMA, F16C and
        // AVX-512 F.
        unsafe {
            match gq {
                4 => wsum_f16_g::<4>(v, stride, ps, len, os, hd),
                3 => wsum_f16_g::<3>(v, stride, ps, len, os, hd),
                2 => wsum_f16_g::<2>(v, stride, ps, len, os, hd),
                _ => wsum_f16_g::<1>(v, stride, ps, len, os, hd),
            }
        }
        g0 += gq;
    }
}

/// Lane mask of the first `w` of 16 lanes (`w` may exceed 16).
#[inline]
fn lanes(w: usize) -> __mmask16 {
    if w >= 16 {
        0xffff
    } else {
        ((1u32 << w) - 1) as __mmask16
    }
}

/// `MR` rows of [`gemm_f32`]: register tiles of `MR` rows × 32 columns
/// (two vectors, masked at the right edge), `k` fused multiply-adds deep.
///
/// # Safety
/// AVX-512 F must be present, and for `i < MR`, `p < k`, `j < n` the
/// elements `a[i * rs + p * cs]`, `b[p * ldb + j]` and `c[i * ldc + j]` must
/// be in bounds (masked-off lanes are never accessed).
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_rows<const MR: usize>(
    a: *const f32,
    (rs, cs): (usize, usize),
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    k: usize,
    n: usize,
) {
    let mut j = 0;
    while j < n {
        let w = n - j;
        let (m0, m1) = (lanes(w), lanes(w.saturating_sub(16)));
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for (r, acc) in acc.iter_mut().enumerate() {
            let cr = c.wrapping_add(r * ldc + j);
            // SAFETY: lanes under the masks are in bounds (caller); the
            // pointer of an empty second vector is never dereferenced.
            unsafe {
                acc[0] = _mm512_maskz_loadu_ps(m0, cr);
                acc[1] = _mm512_maskz_loadu_ps(m1, cr.wrapping_add(16));
            }
        }
        for p in 0..k {
            let bp = b.wrapping_add(p * ldb + j);
            // SAFETY: as above.
            let (b0, b1) = unsafe {
                (
                    _mm512_maskz_loadu_ps(m0, bp),
                    _mm512_maskz_loadu_ps(m1, bp.wrapping_add(16)),
                )
            };
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `a[r * rs + p * cs]` is in bounds (caller).
                let x = _mm512_set1_ps(unsafe { *a.add(r * rs + p * cs) });
                acc[0] = _mm512_fmadd_ps(x, b0, acc[0]);
                acc[1] = _mm512_fmadd_ps(x, b1, acc[1]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let cr = c.wrapping_add(r * ldc + j);
            // SAFETY: as for the loads.
            unsafe {
                _mm512_mask_storeu_ps(cr, m0, acc[0]);
                _mm512_mask_storeu_ps(cr.wrapping_add(16), m1, acc[1]);
            }
        }
        j += 32;
    }
}

/// `generic::gemm_f32` bit for bit (the same fused multiply-adds in the same
/// order per element), 8 rows at a time then 4, 2, 1.
pub(super) fn gemm_f32(
    a: &[f32],
    strides: (usize, usize),
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    (m, k, n): (usize, usize, usize),
) {
    for (i, mr) in super::super::generic::gemm_row_blocks(m) {
        let ai = a[i * strides.0..].as_ptr();
        let ci = c[i * ldc..].as_mut_ptr();
        // SAFETY: only reachable through the AVX-512 tables (AVX-512 F
        // detected), and `Kernels::gemm_f32` checked that every element the
        // `m × k × n` product reads or writes is inside `a`, `b` and `c`;
        // rows `i..i + mr` are a subset of those.
        unsafe {
            match mr {
                8 => gemm_rows::<8>(ai, strides, b.as_ptr(), ldb, ci, ldc, k, n),
                4 => gemm_rows::<4>(ai, strides, b.as_ptr(), ldb, ci, ldc, k, n),
                2 => gemm_rows::<2>(ai, strides, b.as_ptr(), ldb, ci, ldc, k, n),
                _ => gemm_rows::<1>(ai, strides, b.as_ptr(), ldb, ci, ldc, k, n),
            }
        }
    }
}
