//! AVX2 attention kernels: the f32 tile product of tiled attention
//! (`generic::gemm_f32` bit for bit: `vfmadd` is a fused multiply-add, in
//! the same order per element; without it an AVX2 table has no tiled
//! attention, and prefill at depth computes each query's scores on its
//! own), and the multi-query dots and weighted sums over f16 key/value rows
//! of decode (`avx512_attn`'s at half the width).

use super::super::{KV_PREFETCH_ROWS, WSUM_BLOCK_ROWS};
use super::prefetch_rows;
use std::arch::x86_64::*;

/// `MR` rows of [`gemm_f32`], 16 columns (two registers) at a time, then
/// 8, then single columns with `f32::mul_add` (the same fused operation).
/// At most six rows: six rows × two registers of sums, the two `b`
/// vectors and the broadcast fit the 16 ymm registers, and twelve
/// independent sums cover the fused multiply-add's latency on both pipes
/// (five cycles × two per cycle).
///
/// # Safety
/// AVX2 and FMA must be present. For `i < MR`, `p < k`, `j < n` the
/// elements `a[i * rs + p * cs]`, `b[p * ldb + j]` and `c[i * ldc + j]`
/// must be in bounds.
#[target_feature(enable = "avx2,fma")]
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
    while j + 16 <= n {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: columns j..j + 16 of row r are in bounds (caller).
            unsafe {
                acc[0] = _mm256_loadu_ps(c.add(r * ldc + j));
                acc[1] = _mm256_loadu_ps(c.add(r * ldc + j + 8));
            }
        }
        for p in 0..k {
            // SAFETY: as above, for row p of `b`.
            let (b0, b1) = unsafe {
                (
                    _mm256_loadu_ps(b.add(p * ldb + j)),
                    _mm256_loadu_ps(b.add(p * ldb + j + 8)),
                )
            };
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `a[r * rs + p * cs]` is in bounds (caller).
                let x = _mm256_set1_ps(unsafe { *a.add(r * rs + p * cs) });
                acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
                acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe {
                _mm256_storeu_ps(c.add(r * ldc + j), acc[0]);
                _mm256_storeu_ps(c.add(r * ldc + j + 8), acc[1]);
            }
        }
        j += 16;
    }
    if j + 8 <= n {
        let mut acc = [_mm256_setzero_ps(); MR];
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: columns j..j + 8 of row r are in bounds (caller).
            *acc = unsafe { _mm256_loadu_ps(c.add(r * ldc + j)) };
        }
        for p in 0..k {
            // SAFETY: as above, for row p of `b`.
            let b0 = unsafe { _mm256_loadu_ps(b.add(p * ldb + j)) };
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `a[r * rs + p * cs]` is in bounds (caller).
                let x = _mm256_set1_ps(unsafe { *a.add(r * rs + p * cs) });
                *acc = _mm256_fmadd_ps(x, b0, *acc);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { _mm256_storeu_ps(c.add(r * ldc + j), *acc) };
        }
        j += 8;
    }
    for j in j..n {
        for r in 0..MR {
            // SAFETY: element (r, j) of `c` and the `a`/`b` elements it
            // reads are in bounds (caller).
            unsafe {
                let mut v = *c.add(r * ldc + j);
                for p in 0..k {
                    v = (*a.add(r * rs + p * cs)).mul_add(*b.add(p * ldb + j), v);
                }
                *c.add(r * ldc + j) = v;
            }
        }
    }
}

/// See `generic::gemm_f32`; 6 rows at a time, then 4, 2, 1 (each element
/// is the same chain of fused multiply-adds whatever the blocking).
pub(super) fn gemm_f32(
    a: &[f32],
    strides: (usize, usize),
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    (m, k, n): (usize, usize, usize),
) {
    let mut i = 0;
    while i < m {
        let mr = match m - i {
            6.. => 6,
            4..=5 => 4,
            2..=3 => 2,
            _ => 1,
        };
        let ai = a[i * strides.0..].as_ptr();
        let ci = c[i * ldc..].as_mut_ptr();
        // SAFETY: only reachable through the AVX2 table (AVX2 and FMA
        // detected), and `Kernels::gemm_f32` checked that every element the
        // `m × k × n` product reads or writes is inside `a`, `b` and `c`;
        // rows `i..i + mr` are a subset of those.
        unsafe {
            match mr {
                6 => gemm_rows::<6>(ai, strides, b.as_ptr(), ldb, ci, ldc, k, n),
                4 => gemm_rows::<4>(ai, strides, b.as_ptr(), ldb, ci, ldc, k, n),
                2 => gemm_rows::<2>(ai, strides, b.as_ptr(), ldb, ci, ldc, k, n),
                _ => gemm_rows::<1>(ai, strides, b.as_ptr(), ldb, ci, ldc, k, n),
            }
        }
        i += mr;
    }
}

/// Lane `v` of the result is the sum of the 8 lanes of `x[v]` (a
/// transposing tree of horizontal adds instead of 8 separate reductions).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum8(x: &[__m256; 8]) -> __m256 {
    // Per 128-bit half: [x[a] 0+1, x[a] 2+3, x[b] 0+1, x[b] 2+3].
    let p = [0, 1, 2, 3].map(|m| _mm256_hadd_ps(x[2 * m], x[2 * m + 1]));
    // Per half: the half's sums of x[4m..4m + 4].
    let (lo, hi) = (_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
    _mm256_add_ps(
        _mm256_permute2f128_ps::<0x20>(lo, hi),
        _mm256_permute2f128_ps::<0x31>(lo, hi),
    )
}

/// The dots of `R` f16 rows (each `2 * hd` bytes) with `G` queries (`q`,
/// `G * hd` f32) over the first `body` values (a multiple of 8): sum
/// `g * R + r` of the result is row `r` · query `g`. Each query load
/// serves all `R` rows; `G * R` is at most 8, so the sums stay in registers
/// next to the rows' values and one query vector.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_pass<const G: usize, const R: usize>(rows: [&[u8]; R], q: &[f32], body: usize) -> [f32; 8] {
    let hd = q.len() / G;
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut i = 0;
    while i < body {
        let mut k = [_mm256_setzero_ps(); R];
        for (k, row) in k.iter_mut().zip(&rows) {
            // SAFETY: `i + 8 <= body <= hd` and `row` is `2 * hd` bytes, so
            // its 16 bytes at `2 * i` are in bounds; `loadu` has no
            // alignment requirement.
            *k = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(row.as_ptr().add(2 * i).cast()) });
        }
        for g in 0..G {
            // SAFETY: `q` is `G * hd` f32 and `i + 8 <= hd`.
            let qv = unsafe { _mm256_loadu_ps(q.as_ptr().add(g * hd + i)) };
            for (r, k) in k.iter().enumerate() {
                acc[g * R + r] = _mm256_fmadd_ps(*k, qv, acc[g * R + r]);
            }
        }
        i += 8;
    }
    let mut sums = [0.0f32; 8];
    // SAFETY: `sums` is 8 writable f32.
    unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), hsum8(&acc)) };
    sums
}

/// Dots of each of `n_out` f16 rows with `G` queries of `hd`, every row
/// decoded once: `out[g * n_out + j]`. Rows go four at a time for up to two
/// queries, two at a time for more ([`dot_pass`]); each pass's rows are
/// bounds-checked once and read through pointers (the scalar tail of a head
/// width that is not a multiple of 8 slices them again).
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_f16_g<const G: usize>(
    w: &[u8],
    stride: usize,
    q: &[f32],
    hd: usize,
    out: &mut [f32],
    n_out: usize,
) {
    let body = hd / 8 * 8;
    let q = &q[..G * hd];
    let tail = |row: &[u8], g: usize| {
        if body == hd {
            return 0.0;
        }
        super::super::generic::dot_f16(&row[2 * body..2 * hd], &q[g * hd + body..(g + 1) * hd])
    };
    let row = |j: usize| &w[j * stride..][..2 * hd];
    let nr = if G > 2 { 2 } else { 4 };
    let mut j = 0;
    while j < n_out {
        let n = if j + nr <= n_out { nr } else { 1 };
        prefetch_rows(w, stride, j + KV_PREFETCH_ROWS, n, 2 * hd);
        let sums = match n {
            4 => dot_pass::<G, 4>([row(j), row(j + 1), row(j + 2), row(j + 3)], q, body),
            2 => dot_pass::<G, 2>([row(j), row(j + 1)], q, body),
            _ => dot_pass::<G, 1>([row(j)], q, body),
        };
        for g in 0..G {
            for r in 0..n {
                out[g * n_out + j + r] = sums[g * n + r] + tail(row(j + r), g);
            }
        }
        j += n;
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
        // SAFETY: only reachable through the AVX2 table, which `avx2_table`
        // returns after detecting AVX2, FMA and F16C, and the Zen 4 AVX-512
        // table (`avx512::ZEN4_VNNI`), which `avx512_table` returns only
        // when `has_avx2` holds as well.
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

/// Adds `sum_r weights[r][g] * rows[r][i..i + 8 * V]` to
/// `out[g * hd + i..][..8 * V]` for every `g < G`.
///
/// # Safety
/// AVX2, FMA and F16C must be present, every row must hold
/// `2 * (i + 8 * V)` bytes and `out` must hold `(G - 1) * hd + i + 8 * V`
/// f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wsum_strip<const G: usize, const V: usize>(
    rows: &[&[u8]],
    weights: &[[f32; G]],
    out: *mut f32,
    hd: usize,
    i: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); V]; G];
    for (g, a) in acc.iter_mut().enumerate() {
        for (c, a) in a.iter_mut().enumerate() {
            // SAFETY: in bounds of `out` (caller).
            *a = unsafe { _mm256_loadu_ps(out.add(g * hd + i + 8 * c)) };
        }
    }
    for (row, w) in rows.iter().zip(weights) {
        let mut k = [_mm256_setzero_ps(); V];
        for (c, k) in k.iter_mut().enumerate() {
            // SAFETY: in bounds of the row (caller).
            *k = _mm256_cvtph_ps(unsafe {
                _mm_loadu_si128(row.as_ptr().add(2 * (i + 8 * c)).cast())
            });
        }
        for (a, &w) in acc.iter_mut().zip(w) {
            let pv = _mm256_set1_ps(w);
            for (a, k) in a.iter_mut().zip(&k) {
                *a = _mm256_fmadd_ps(pv, *k, *a);
            }
        }
    }
    for (g, a) in acc.iter().enumerate() {
        for (c, a) in a.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { _mm256_storeu_ps(out.add(g * hd + i + 8 * c), *a) };
        }
    }
}

/// Weighted sums of `len` f16 rows with `G` weight vectors, every row
/// decoded once, each output accumulated in row order from zero (the same
/// per-lane sums as `avx2::wsum_f16`). Rows go in blocks of
/// [`WSUM_BLOCK_ROWS`]: every column strip (16 outputs, then 8) of a block
/// before the next block, the accumulators parked in `out`. A block's rows
/// are bounds-checked once and its weights gathered once, so the strips run
/// on pointers; the next block's rows are prefetched a share per strip.
#[target_feature(enable = "avx2,fma,f16c")]
fn wsum_f16_g<const G: usize>(
    v: &[u8],
    stride: usize,
    p: &[f32],
    len: usize,
    out: &mut [f32],
    hd: usize,
) {
    let body = hd / 8 * 8;
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
        let strips = body.div_ceil(16);
        let mut i = 0;
        for strip in 0..strips {
            let (lo, hi) = (
                strip * WSUM_BLOCK_ROWS / strips,
                (strip + 1) * WSUM_BLOCK_ROWS / strips,
            );
            prefetch_rows(v, stride, j0 + WSUM_BLOCK_ROWS + lo, hi - lo, 2 * hd);
            // SAFETY: the strip (16 values, or the last 8 of `body`) ends at
            // or before `body <= hd`: every row is `2 * hd` bytes and `out`
            // is `G * hd` f32, so the strip's bytes of each row and its sums
            // at `g * hd + i` are in bounds.
            unsafe {
                if i + 16 <= body {
                    wsum_strip::<G, 2>(rows, weights, o, hd, i);
                } else {
                    wsum_strip::<G, 1>(rows, weights, o, hd, i);
                }
            }
            i += 16;
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
        // SAFETY: as in `dot_f16_multi`.
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
