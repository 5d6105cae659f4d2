//! aarch64 kernels: baseline NEON (every aarch64 CPU has it, so no run-time
//! detection is needed; integer dots with `smull` + `sadalp`), a NEON +
//! dotprod table (`sdot`), handed out only after
//! `is_aarch64_feature_detected!("dotprod")`, and on top of it an i8mm
//! table whose prefill panels use `smmla` (`neon_panel.rs`,
//! `neon_panel_k.rs`), handed out only where i8mm is detected too. Row dots
//! for every weight type: `neon.rs` (Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K, Q6_K
//! and the shared helpers), `neon_dot.rs` (Q4_1, Q5_1, F32, F16, BF16),
//! `neon_k.rs` (Q2_K, Q3_K, Q5_K, IQ4_XS); four-token prefill kernels in
//! `neon_x4.rs` (`neon_tokens.rs` generates them and the dotprod ones).
#![allow(unsafe_code)]

mod neon;
pub(super) mod neon_act;
mod neon_attn;
mod neon_attn_f16;
mod neon_dot;
mod neon_dotprod;
mod neon_k;
mod neon_panel;
mod neon_panel_k;
pub(super) mod neon_quant;
mod neon_tokens;
mod neon_x4;

use super::Table;

/// The NEON table.
pub(super) fn neon_table() -> Option<Table> {
    Some(neon_x4::with_x4(Table {
        q4_1: neon_dot::rows_q4_1,
        q5_1: neon_dot::rows_q5_1,
        q2_k: neon_k::rows_q2_k,
        q3_k: neon_k::rows_q3_k,
        q5_k: neon_k::rows_q5_k,
        iq4_xs: neon_k::rows_iq4_xs,
        f32: neon_dot::rows_f32,
        f16: neon_dot::rows_f16,
        bf16: neon_dot::rows_bf16,
        gemm_f32: Some(neon_attn::gemm_f32),
        axpy_f16: neon_attn_f16::axpy_f16,
        wsum_f16: neon_attn_f16::wsum_f16,
        dot_f16_multi: neon_attn_f16::dot_f16_multi,
        wsum_f16_multi: neon_attn_f16::wsum_f16_multi,
        ..neon::TABLE
    }))
}

/// The NEON table with `sdot` kernels, if the CPU has dotprod.
pub(super) fn neon_dotprod_table() -> Option<Table> {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        return None;
    }
    neon_table().map(neon_dotprod::with_dotprod)
}

/// The dotprod table with the i8mm panel kernels, if this CPU has both.
pub(super) fn neon_i8mm_table() -> Option<Table> {
    neon_panel::with_i8mm_panels(neon_dotprod_table()?)
}
