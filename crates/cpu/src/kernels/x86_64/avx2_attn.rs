//! AVX2 f32 tile product for tiled attention: `generic::gemm_f32` bit for
//! bit (`vfmadd` is a fused multiply-add, in the same order per element).
//! Without it an AVX2 table has no tiled attention, and prefill at depth
//! computes each query's scores on its own.

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
