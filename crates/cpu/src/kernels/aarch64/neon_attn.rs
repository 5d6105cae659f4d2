//! NEON f32 tile product for tiled attention: `generic::gemm_f32` bit for
//! bit (`fmla` is a fused multiply-add, in the same order per element).

use std::arch::aarch64::*;

/// `MR` rows of [`gemm_f32`], 8 columns (two registers) at a time, then
/// 4, then single columns with `f32::mul_add` (the same fused operation).
///
/// # Safety
/// For `i < MR`, `p < k`, `j < n` the elements `a[i * rs + p * cs]`,
/// `b[p * ldb + j]` and `c[i * ldc + j]` must be in bounds.
#[target_feature(enable = "neon")]
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
    while j + 8 <= n {
        let mut acc = [[vdupq_n_f32(0.0); 2]; MR];
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: columns j..j + 8 of row r are in bounds (caller).
            unsafe {
                acc[0] = vld1q_f32(c.add(r * ldc + j));
                acc[1] = vld1q_f32(c.add(r * ldc + j + 4));
            }
        }
        for p in 0..k {
            // SAFETY: as above, for row p of `b`.
            let (b0, b1) = unsafe {
                (
                    vld1q_f32(b.add(p * ldb + j)),
                    vld1q_f32(b.add(p * ldb + j + 4)),
                )
            };
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `a[r * rs + p * cs]` is in bounds (caller).
                let x = unsafe { *a.add(r * rs + p * cs) };
                acc[0] = vfmaq_n_f32(acc[0], b0, x);
                acc[1] = vfmaq_n_f32(acc[1], b1, x);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe {
                vst1q_f32(c.add(r * ldc + j), acc[0]);
                vst1q_f32(c.add(r * ldc + j + 4), acc[1]);
            }
        }
        j += 8;
    }
    if j + 4 <= n {
        let mut acc = [vdupq_n_f32(0.0); MR];
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: columns j..j + 4 of row r are in bounds (caller).
            *acc = unsafe { vld1q_f32(c.add(r * ldc + j)) };
        }
        for p in 0..k {
            // SAFETY: as above, for row p of `b`.
            let b0 = unsafe { vld1q_f32(b.add(p * ldb + j)) };
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `a[r * rs + p * cs]` is in bounds (caller).
                *acc = vfmaq_n_f32(*acc, b0, unsafe { *a.add(r * rs + p * cs) });
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { vst1q_f32(c.add(r * ldc + j), *acc) };
        }
        j += 4;
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

/// See `generic::gemm_f32`; 8 rows at a time, then 4, 2, 1.
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
        // SAFETY: NEON is part of every aarch64 target's baseline, and
        // `Kernels::gemm_f32` checked that every element the `m × k × n`
        // product reads or writes is inside `a`, `b` and `c`; rows
        // `i..i + mr` are a subset of those.
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
