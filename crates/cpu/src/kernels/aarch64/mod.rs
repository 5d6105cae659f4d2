//! aarch64 kernels: baseline NEON (every aarch64 CPU has it, so no run-time
//! detection is needed); integer dots with `smull` + `sadalp`.
#![allow(unsafe_code)]

mod neon;
pub(super) mod neon_act;
mod neon_attn;

use super::Table;

/// The NEON table.
pub(super) fn neon_table() -> Option<Table> {
    Some(Table {
        gemm_f32: Some(neon_attn::gemm_f32),
        ..neon::TABLE
    })
}
