//! NEON attention kernels over f16 key/value rows (the f16 KV cache):
//! `y += a * x`, weighted sums of rows and multi-query dots, 4 lanes per
//! register. f16 widens to f32 with `fcvtl`/`fcvtl2` (exact, as
//! `generic::f16_at`); the weighted sums accumulate each output with fused
//! multiply-adds in row order from zero, the same per-lane sums as
//! repeated [`axpy_f16`]. Ragged ends (fewer than 4 values) use the scalar
//! twins.

use super::super::generic;
use super::super::{KV_PREFETCH_ROWS, WSUM_BLOCK_ROWS};
use super::neon::ld_u8;
use super::neon::{ld_f32, st_f32};
use std::arch::aarch64::*;
use std::arch::asm;

/// Prefetches the first `bytes` of `n` rows from row `r` of `w` (rows
/// `stride` bytes apart), as the x86 f16 attention kernels do: at depth the
/// hardware prefetcher alone left those waiting on their loads (measured on
/// x86; not timed on ARM). One `prfm` per 64 bytes, the line size of most
/// aarch64 cores (on 128-byte lines every other one is redundant). Inline
/// assembly because `core::arch::aarch64::_prefetch` is unstable.
#[inline]
fn prefetch_rows(w: &[u8], stride: usize, r: usize, n: usize, bytes: usize) {
    for k in 0..n {
        let row = w.as_ptr().wrapping_add((r + k) * stride);
        for l in (0..bytes).step_by(64) {
            // SAFETY: `prfm` is a hint (base A64, no feature needed) that
            // never faults, so addresses past the end of `w` are harmless;
            // it writes no register, flag or memory and touches no stack.
            unsafe {
                asm!(
                    "prfm pldl1keep, [{addr}]",
                    addr = in(reg) row.wrapping_add(l),
                    options(nostack, preserves_flags, readonly),
                );
            }
        }
    }
}

/// 4 f16 (8 bytes at the start of `w`) as f32. Inline assembly because the
/// intrinsic (`vcvt_f32_f16`) needs Rust 1.94, above the workspace's
/// `rust-version`.
#[target_feature(enable = "neon")]
#[inline]
fn ld_f16x4(w: &[u8]) -> float32x4_t {
    let w = &w[..8];
    // SAFETY: `w` is 8 readable bytes; `ld1` of bytes has no alignment
    // requirement.
    let h = unsafe { vld1_u8(w.as_ptr()) };
    let f: float32x4_t;
    // SAFETY: one conversion between vector registers (NEON is baseline);
    // no memory or stack is touched.
    unsafe {
        asm!(
            "fcvtl {f:v}.4s, {h:v}.4h",
            h = in(vreg) h,
            f = out(vreg) f,
            options(pure, nomem, nostack),
        );
    }
    f
}

/// 8 f16 (16 bytes at the start of `w`) as two vectors of f32.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn ld_f16x8(w: &[u8]) -> [float32x4_t; 2] {
    let h = ld_u8(w);
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: two conversions between vector registers (NEON is baseline);
    // no memory or stack is touched. `out` (not `lateout`) keeps `lo` off
    // `h`'s register, which the second instruction still reads.
    unsafe {
        asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = out(vreg) hi,
            options(pure, nomem, nostack),
        );
    }
    [lo, hi]
}

#[target_feature(enable = "neon")]
fn axpy_f16_inner(y: &mut [f32], a: f32, x: &[u8]) {
    let n = y.len().min(x.len() / 2);
    let mut i = 0;
    while i + 8 <= n {
        let [x0, x1] = ld_f16x8(&x[2 * i..]);
        let y0 = vfmaq_n_f32(ld_f32(&y[i..]), x0, a);
        let y1 = vfmaq_n_f32(ld_f32(&y[i + 4..]), x1, a);
        st_f32(&mut y[i..], y0);
        st_f32(&mut y[i + 4..], y1);
        i += 8;
    }
    if i + 4 <= n {
        let yv = vfmaq_n_f32(ld_f32(&y[i..]), ld_f16x4(&x[2 * i..]), a);
        st_f32(&mut y[i..], yv);
        i += 4;
    }
    generic::axpy_f16(&mut y[i..n], a, &x[2 * i..2 * n]);
}

/// `y += a * x`, `x` f16 bytes; see `AxpyF16`.
pub(super) fn axpy_f16(y: &mut [f32], a: f32, x: &[u8]) {
    // SAFETY: NEON is part of every aarch64 target's baseline.
    unsafe { axpy_f16_inner(y, a, x) }
}

/// Dots of the `R` rows (each at least `2 * hd` bytes) with `G` queries of
/// `hd` (back to back in `q`), every row decoded once: `[g][r]`. Two
/// accumulators per row and query (the low and high halves of 8 values).
#[target_feature(enable = "neon")]
#[inline]
fn dots<const G: usize, const R: usize>(rows: [&[u8]; R], q: &[f32], hd: usize) -> [[f32; R]; G] {
    let body = hd / 4 * 4;
    let mut acc = [[[vdupq_n_f32(0.0); 2]; R]; G];
    let mut i = 0;
    while i + 8 <= body {
        let mut k = [[vdupq_n_f32(0.0); 2]; R];
        for (k, row) in k.iter_mut().zip(rows) {
            *k = ld_f16x8(&row[2 * i..]);
        }
        for (g, acc) in acc.iter_mut().enumerate() {
            let (q0, q1) = (ld_f32(&q[g * hd + i..]), ld_f32(&q[g * hd + i + 4..]));
            for (a, k) in acc.iter_mut().zip(&k) {
                a[0] = vfmaq_f32(a[0], k[0], q0);
                a[1] = vfmaq_f32(a[1], k[1], q1);
            }
        }
        i += 8;
    }
    if i < body {
        let mut k = [vdupq_n_f32(0.0); R];
        for (k, row) in k.iter_mut().zip(rows) {
            *k = ld_f16x4(&row[2 * i..]);
        }
        for (g, acc) in acc.iter_mut().enumerate() {
            let qv = ld_f32(&q[g * hd + i..]);
            for (a, k) in acc.iter_mut().zip(&k) {
                a[0] = vfmaq_f32(a[0], *k, qv);
            }
        }
    }
    let mut out = [[0.0; R]; G];
    for (g, (o, acc)) in out.iter_mut().zip(&acc).enumerate() {
        let qt = &q[g * hd + body..(g + 1) * hd];
        for ((o, a), row) in o.iter_mut().zip(acc).zip(rows) {
            *o = vaddvq_f32(vaddq_f32(a[0], a[1])) + generic::dot_f16(&row[2 * body..2 * hd], qt);
        }
    }
    out
}

/// Dots of each of `n_out` f16 rows with `G` queries of `hd`, rows in
/// pairs (each query load serves two rows), [`KV_PREFETCH_ROWS`] rows
/// prefetched ahead: `out[g * n_out + j]`.
#[target_feature(enable = "neon")]
fn dot_f16_g<const G: usize>(
    w: &[u8],
    stride: usize,
    q: &[f32],
    hd: usize,
    out: &mut [f32],
    n_out: usize,
) {
    let row = |j: usize| &w[j * stride..j * stride + 2 * hd];
    let mut j = 0;
    while j + 2 <= n_out {
        prefetch_rows(w, stride, j + KV_PREFETCH_ROWS, 2, 2 * hd);
        let d = dots::<G, 2>([row(j), row(j + 1)], q, hd);
        for (g, d) in d.iter().enumerate() {
            out[g * n_out + j..g * n_out + j + 2].copy_from_slice(d);
        }
        j += 2;
    }
    if j < n_out {
        let d = dots::<G, 1>([row(j)], q, hd);
        for (g, d) in d.iter().enumerate() {
            out[g * n_out + j] = d[0];
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
        // SAFETY: NEON is part of every aarch64 target's baseline.
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
/// decoded once, each output accumulated in row order from zero with fused
/// multiply-adds. Rows go in blocks of [`WSUM_BLOCK_ROWS`]: every column
/// strip (16 outputs, then 4) of a block before the next block, the
/// accumulators parked in `out`.
#[target_feature(enable = "neon")]
fn wsum_f16_g<const G: usize>(
    v: &[u8],
    stride: usize,
    p: &[f32],
    len: usize,
    out: &mut [f32],
    hd: usize,
) {
    let body = hd / 4 * 4;
    for g in 0..G {
        out[g * hd..g * hd + body].fill(0.0);
    }
    let mut j0 = 0;
    while j0 < len {
        let j1 = (j0 + WSUM_BLOCK_ROWS).min(len);
        let mut i = 0;
        while i + 16 <= hd {
            let mut acc: [[float32x4_t; 4]; G] = std::array::from_fn(|g| {
                std::array::from_fn(|c| ld_f32(&out[g * hd + i + 4 * c..]))
            });
            for j in j0..j1 {
                if i == 0 {
                    // The next block's rows, whole, during the first strip.
                    prefetch_rows(v, stride, j + WSUM_BLOCK_ROWS, 1, 2 * hd);
                }
                let row = &v[j * stride + 2 * i..j * stride + 2 * i + 32];
                let ([k0, k1], [k2, k3]) = (ld_f16x8(row), ld_f16x8(&row[16..]));
                for (g, a) in acc.iter_mut().enumerate() {
                    let pj = p[g * len + j];
                    for (a, k) in a.iter_mut().zip([k0, k1, k2, k3]) {
                        *a = vfmaq_n_f32(*a, k, pj);
                    }
                }
            }
            for (g, a) in acc.iter().enumerate() {
                for (c, a) in a.iter().enumerate() {
                    st_f32(&mut out[g * hd + i + 4 * c..], *a);
                }
            }
            i += 16;
        }
        while i + 4 <= hd {
            let mut acc: [float32x4_t; G] = std::array::from_fn(|g| ld_f32(&out[g * hd + i..]));
            for j in j0..j1 {
                let k = ld_f16x4(&v[j * stride + 2 * i..j * stride + 2 * i + 8]);
                for (g, a) in acc.iter_mut().enumerate() {
                    *a = vfmaq_n_f32(*a, k, p[g * len + j]);
                }
            }
            for (g, a) in acc.iter().enumerate() {
                st_f32(&mut out[g * hd + i..], *a);
            }
            i += 4;
        }
        j0 = j1;
    }
    if body < hd {
        for g in 0..G {
            let o = &mut out[g * hd + body..(g + 1) * hd];
            generic::wsum_f16(&v[2 * body..], stride, &p[g * len..(g + 1) * len], o);
        }
    }
}

/// Weighted sum of f16 rows with one weight vector; see `WsumF16`.
pub(super) fn wsum_f16(v: &[u8], stride: usize, p: &[f32], out: &mut [f32]) {
    // SAFETY: NEON is part of every aarch64 target's baseline.
    unsafe { wsum_f16_g::<1>(v, stride, p, p.len(), out, out.len()) }
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
        // SAFETY: NEON is part of every aarch64 target's baseline.
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

#[cfg(test)]
mod tests {
    use super::*;
    use anedvd_quant::f16_to_f32;

    /// `fcvtl`/`fcvtl2` widen every f16 bit pattern (subnormals, infinities,
    /// NaN payloads) exactly as the scalar `f16_to_f32`.
    #[test]
    fn f16_widening_matches_scalar_on_every_bit_pattern() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        for (c, h) in bytes.chunks_exact(16).zip((0..=u16::MAX).step_by(8)) {
            let mut got = [0.0f32; 12];
            // SAFETY: NEON is part of every aarch64 target's baseline.
            unsafe {
                let [lo, hi] = ld_f16x8(c);
                st_f32(&mut got[..4], lo);
                st_f32(&mut got[4..8], hi);
                st_f32(&mut got[8..], ld_f16x4(&c[8..]));
            }
            // The last four are values 4..8 again, through `ld_f16x4`.
            for (k, g) in got.iter().enumerate() {
                let h = h + [0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7][k];
                let want = f16_to_f32(h);
                assert_eq!(g.to_bits(), want.to_bits(), "f16 {h:#06x}");
            }
        }
    }
}
