//! Baseline NEON four-token prefill kernels (Q8_0, Q4_0, Q5_0, IQ4_NL,
//! Q4_K, Q6_K): [`token_kernels!`] with `neon.rs`'s `dot16`, so per token
//! the result is `neon.rs`'s row dot bit for bit.

use super::super::{Q8Block, Rows4Q8, Rows4Q8K, Table};
use super::neon::{
    dot16, halves_iq4_nl, halves_q4_0, halves_q5_0, halves_q8_0, ld_i16, ld_i8, q4_k_weights,
    q6_k_weights,
};
use super::neon_tokens::token_kernels;
use anedvd_quant::BlockQ8K;
use std::arch::aarch64::*;

token_kernels!("neon", dot16);

/// Safe four-token entries around the `rows_n_*` loops.
macro_rules! x4 {
    ($($name:ident => $rows:ident: $act:ty;)*) => {$(
        fn $name(w: &[u8], rb: usize, a: [&[$act]; 4], out: &mut [f32]) {
            // SAFETY: NEON is part of every aarch64 target's baseline.
            unsafe { $rows::<4>(w, rb, a, out) }
        }
    )*};
}

x4! {
    x4_q8_0 => rows_n_q8_0: Q8Block;
    x4_q4_0 => rows_n_q4_0: Q8Block;
    x4_q5_0 => rows_n_q5_0: Q8Block;
    x4_iq4_nl => rows_n_iq4_nl: Q8Block;
    x4_q4_k => rows_n_q4_k: BlockQ8K;
    x4_q6_k => rows_n_q6_k: BlockQ8K;
}

/// `base` with the four-token kernels.
pub(super) const fn with_x4(base: Table) -> Table {
    Table {
        x4_q8_0: Some(x4_q8_0 as Rows4Q8),
        x4_q4_0: Some(x4_q4_0 as Rows4Q8),
        x4_q5_0: Some(x4_q5_0 as Rows4Q8),
        x4_iq4_nl: Some(x4_iq4_nl as Rows4Q8),
        x4_q4_k: Some(x4_q4_k as Rows4Q8K),
        x4_q6_k: Some(x4_q6_k as Rows4Q8K),
        ..base
    }
}
