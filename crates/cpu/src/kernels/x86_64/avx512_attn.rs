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

/// Stores 16 f32 at the start of `d`.
#[target_feature(enable = "avx512f")]
#[inline]
fn st_ps(d: &mut [f32], v: __m512) {
    let d = &mut d[..16];
    // SAFETY: `d` is 16 writable f32; `storeu` has no alignment requirement.
    unsafe { _mm512_storeu_ps(d.as_mut_ptr(), v) }
}

/// Dots of each of `n_out` f16 rows with `G` queries of `hd`, rows in
/// pairs (each query load serves two rows): `out[g * n_out + j]`.
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
    let tail = |row: &[u8], g: usize| {
        super::super::generic::dot_f16(&row[2 * body..2 * hd], &q[g * hd + body..(g + 1) * hd])
    };
    let mut j = 0;
    while j + 2 <= n_out {
        let r0 = &w[j * stride..j * stride + 2 * hd];
        let r1 = &w[(j + 1) * stride..(j + 1) * stride + 2 * hd];
        prefetch_rows(w, stride, j + KV_PREFETCH_ROWS, 2, 2 * hd);
        let mut acc = [[_mm512_setzero_ps(); 2]; G];
        let mut i = 0;
        while i < body {
            let (k0, k1) = (load_f16x16(&r0[2 * i..]), load_f16x16(&r1[2 * i..]));
            for (g, a) in acc.iter_mut().enumerate() {
                let qv = ld_ps(&q[g * hd + i..]);
                a[0] = _mm512_fmadd_ps(k0, qv, a[0]);
                a[1] = _mm512_fmadd_ps(k1, qv, a[1]);
            }
            i += 16;
        }
        for (g, a) in acc.iter().enumerate() {
            out[g * n_out + j] = _mm512_reduce_add_ps(a[0]) + tail(r0, g);
            out[g * n_out + j + 1] = _mm512_reduce_add_ps(a[1]) + tail(r1, g);
        }
        j += 2;
    }
    if j < n_out {
        let r0 = &w[j * stride..j * stride + 2 * hd];
        let mut acc = [_mm512_setzero_ps(); G];
        let mut i = 0;
        while i < body {
            let k0 = load_f16x16(&r0[2 * i..]);
            for (g, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(k0, ld_ps(&q[g * hd + i..]), *a);
            }
            i += 16;
        }
        for (g, a) in acc.iter().enumerate() {
            out[g * n_out + j] = _mm512_reduce_add_ps(*a) + tail(r0, g);
        }
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

/// Weighted sums of `len` f16 rows with `G` weight vectors, every row
/// decoded once, each output accumulated in row order from zero. Rows go in
/// blocks of [`WSUM_BLOCK_ROWS`]: every column strip (32 outputs, then 16)
/// of a block before the next block, the accumulators parked in `out`.
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
    for g in 0..G {
        out[g * hd..g * hd + body].fill(0.0);
    }
    let mut j0 = 0;
    while j0 < len {
        let j1 = (j0 + WSUM_BLOCK_ROWS).min(len);
        let mut i = 0;
        while i + 32 <= hd {
            let mut acc: [[__m512; 2]; G] = std::array::from_fn(|g| {
                [ld_ps(&out[g * hd + i..]), ld_ps(&out[g * hd + i + 16..])]
            });
            for j in j0..j1 {
                if i == 0 {
                    // The next block's rows, whole, during the first strip.
                    prefetch_rows(v, stride, j + WSUM_BLOCK_ROWS, 1, 2 * hd);
                }
                let row = &v[j * stride + 2 * i..j * stride + 2 * i + 64];
                let (k0, k1) = (load_f16x16(row), load_f16x16(&row[32..]));
                for (g, a) in acc.iter_mut().enumerate() {
                    let pv = _mm512_set1_ps(p[g * len + j]);
                    a[0] = _mm512_fmadd_ps(pv, k0, a[0]);
                    a[1] = _mm512_fmadd_ps(pv, k1, a[1]);
                }
            }
            for (g, a) in acc.iter().enumerate() {
                st_ps(&mut out[g * hd + i..], a[0]);
                st_ps(&mut out[g * hd + i + 16..], a[1]);
            }
            i += 32;
        }
        if i + 16 <= hd {
            let mut acc: [__m512; G] = std::array::from_fn(|g| ld_ps(&out[g * hd + i..]));
            for j in j0..j1 {
                let k0 = load_f16x16(&v[j * stride + 2 * i..j * stride + 2 * i + 32]);
                for (g, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(p[g * len + j]), k0, *a);
                }
            }
            for (g, a) in acc.iter().enumerate() {
                st_ps(&mut out[g * hd + i..], *a);
            }
        }
        j0 = j1;
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
