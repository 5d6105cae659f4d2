//! aarch64 kernels: baseline NEON (every aarch64 CPU has it, so no run-time
//! detection is needed); integer dots with `smull` + `sadalp`. Where
//! `is_aarch64_feature_detected!("i8mm")` holds, a second table adds
//! prefill panel kernels built on `smmla` (`neon_panel`, `neon_panel_k`).
#![allow(unsafe_code)]

mod neon;
mod neon_attn;
mod neon_panel;
mod neon_panel_k;

use super::Table;

/// The NEON table.
pub(super) fn neon_table() -> Option<Table> {
    Some(Table {
        gemm_f32: Some(neon_attn::gemm_f32),
        ..neon::TABLE
    })
}

/// The NEON table with the i8mm panel kernels, if this CPU has i8mm.
pub(super) fn neon_i8mm_table() -> Option<Table> {
    neon_panel::with_i8mm_panels(neon_table()?)
}
