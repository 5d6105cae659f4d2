//! aarch64 kernels: baseline NEON (every aarch64 CPU has it, so no run-time
//! detection is needed; integer dots with `smull` + `sadalp`, four-token
//! prefill kernels in `neon_x4.rs`) and a NEON + dotprod table (`sdot`),
//! handed out only after `is_aarch64_feature_detected!("dotprod")`.
#![allow(unsafe_code)]

mod neon;
mod neon_attn;
mod neon_dotprod;
mod neon_tokens;
mod neon_x4;

use super::Table;

/// The NEON table.
pub(super) fn neon_table() -> Option<Table> {
    Some(neon_x4::with_x4(Table {
        gemm_f32: Some(neon_attn::gemm_f32),
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
