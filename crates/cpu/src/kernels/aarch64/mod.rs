//! aarch64 kernels: baseline NEON (every aarch64 CPU has it, so no run-time
//! detection is needed); integer dots with `smull` + `sadalp`.
#![allow(unsafe_code)]

mod neon;

use super::Table;

/// The NEON table.
pub(super) fn neon_table() -> Option<Table> {
    Some(neon::TABLE)
}
