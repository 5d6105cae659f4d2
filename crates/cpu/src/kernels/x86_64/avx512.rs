//! AVX-512 kernels (stub).
use super::super::Table;
pub(super) const TABLE: Table = super::avx2::TABLE;
pub(super) const TABLE_VNNI: Table = super::avx2::TABLE;
