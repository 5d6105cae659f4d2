//! NEON kernels with the dotprod extension (`sdot`: 16 i8 products summed
//! four per i32 lane in one instruction), for CPUs where run-time detection
//! finds it (`aarch64::neon_dotprod_table`): the row dots and four-token
//! kernels of Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K and Q6_K, [`token_kernels!`]
//! with `sdot` in place of `neon.rs`'s `smull` + `sadalp` pairs (ggml's
//! `vdotq_s32` path).
//!
//! The K-quants sum each block in integers, so they equal the baseline NEON
//! kernels bit for bit; the legacy types carry four i32 lanes per block
//! into f32 and `sdot` groups the products into lanes differently from
//! `dot16`, so they match the scalar twins within the f32 reduction-order
//! tolerance (and their four-token kernels equal their row dots exactly).

use super::super::{Q8Block, Rows4Q8, Rows4Q8K, RowsQ8, RowsQ8K, Table};
use super::neon::{
    halves_iq4_nl, halves_q4_0, halves_q5_0, halves_q8_0, ld_i16, ld_i8, q4_k_weights, q6_k_weights,
};
use super::neon_tokens::token_kernels;
use anedvd_quant::BlockQ8K;
use std::arch::aarch64::*;

/// `acc + (sums of 4 adjacent products of a and b)` in one `sdot`
/// (`vdotq_s32` is not a stable intrinsic yet).
#[target_feature(enable = "neon,dotprod")]
#[inline]
fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: `sdot` reads and writes only these three vector registers
    // (no memory, stack or flags), and this function is compiled only for
    // CPUs with dotprod (its callers are reached only through the table
    // built after `is_aarch64_feature_detected!("dotprod")`).
    unsafe {
        std::arch::asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

token_kernels!("neon,dotprod", sdot);

/// Safe row-dot and four-token entries around the `rows_n_*` loops.
macro_rules! entries {
    ($($row:ident, $x4:ident => $rows:ident: $act:ty;)*) => {$(
        fn $row(w: &[u8], rb: usize, a: &[$act], out: &mut [f32]) {
            // SAFETY: only reachable through the table that
            // `neon_dotprod_table` returns after detecting dotprod.
            unsafe { $rows::<1>(w, rb, [a], out) }
        }

        fn $x4(w: &[u8], rb: usize, a: [&[$act]; 4], out: &mut [f32]) {
            // SAFETY: only reachable through the table that
            // `neon_dotprod_table` returns after detecting dotprod.
            unsafe { $rows::<4>(w, rb, a, out) }
        }
    )*};
}

entries! {
    row_q8_0, x4_q8_0 => rows_n_q8_0: Q8Block;
    row_q4_0, x4_q4_0 => rows_n_q4_0: Q8Block;
    row_q5_0, x4_q5_0 => rows_n_q5_0: Q8Block;
    row_iq4_nl, x4_iq4_nl => rows_n_iq4_nl: Q8Block;
    row_q4_k, x4_q4_k => rows_n_q4_k: BlockQ8K;
    row_q6_k, x4_q6_k => rows_n_q6_k: BlockQ8K;
}

/// `base` (the NEON table) with the `sdot` kernels. Only for a CPU that
/// has dotprod.
pub(super) const fn with_dotprod(base: Table) -> Table {
    Table {
        q8_0: row_q8_0 as RowsQ8,
        q4_0: row_q4_0 as RowsQ8,
        q5_0: row_q5_0 as RowsQ8,
        iq4_nl: row_iq4_nl as RowsQ8,
        q4_k: row_q4_k as RowsQ8K,
        q6_k: row_q6_k as RowsQ8K,
        x4_q8_0: Some(x4_q8_0 as Rows4Q8),
        x4_q4_0: Some(x4_q4_0 as Rows4Q8),
        x4_q5_0: Some(x4_q5_0 as Rows4Q8),
        x4_iq4_nl: Some(x4_iq4_nl as Rows4Q8),
        x4_q4_k: Some(x4_q4_k as Rows4Q8K),
        x4_q6_k: Some(x4_q6_k as Rows4Q8K),
        ..base
    }
}
