//! aarch64 kernels: baseline NEON (every aarch64 CPU has it, so no run-time
//! detection is needed); integer dots with `smull` + `sadalp`.
#![allow(unsafe_code)]

mod neon;
pub(super) mod neon_act;
mod neon_attn;
mod neon_attn_f16;
pub(super) mod neon_quant;

use super::Table;

/// The NEON table.
pub(super) fn neon_table() -> Option<Table> {
    Some(Table {
        gemm_f32: Some(neon_attn::gemm_f32),
        axpy_f16: neon_attn_f16::axpy_f16,
        wsum_f16: neon_attn_f16::wsum_f16,
        dot_f16_multi: neon_attn_f16::dot_f16_multi,
        wsum_f16_multi: neon_attn_f16::wsum_f16_multi,
        ..neon::TABLE
    })
}
