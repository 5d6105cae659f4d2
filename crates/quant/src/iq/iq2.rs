//! IQ2_XXS, IQ2_XS and IQ2_S: 8-element grid points with sign bits, ~2-2.6 bpw.

use super::grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, KSIGNS_IQ2XS};
use super::{f16_at, sign, u16_at, u32_at, QK_K};

/// Bytes of one IQ2_XXS block: `d: f16, qs: [u16; 32]`.
pub(super) const IQ2_XXS_BYTES: usize = 2 + QK_K / 4;
/// Bytes of one IQ2_XS block: `d: f16, qs: [u16; 32], scales: [u8; 8]`.
pub(super) const IQ2_XS_BYTES: usize = 2 + QK_K / 4 + QK_K / 32;
/// Bytes of one IQ2_S block: `d: f16, qs: [u8; 64], qh: [u8; 8], scales: [u8; 8]`.
pub(super) const IQ2_S_BYTES: usize = 2 + QK_K / 4 + QK_K / 16;

/// Writes `db * grid[j] * sign_j` for one 8-element group.
fn put8(y: &mut [f32], db: f32, grid: u64, signs: u8) {
    for (j, (y, g)) in y.iter_mut().zip(grid.to_le_bytes()).enumerate() {
        *y = db * f32::from(g) * sign(signs, j);
    }
}

/// ggml `dequantize_row_iq2_xxs` for one block.
pub(super) fn iq2_xxs(x: &[u8; IQ2_XXS_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
        let at = 2 + 8 * ib32;
        let aux1 = u32_at(x, at + 4);
        let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let grid = IQ2XXS_GRID[usize::from(x[at + l])];
            let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
            put8(y, db, grid, signs);
        }
    }
}

/// ggml `dequantize_row_iq2_xs` for one block.
pub(super) fn iq2_xs(x: &[u8; IQ2_XS_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    let scales = &x[2 + QK_K / 4..];
    for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
        let db = [
            d * (0.5 + f32::from(scales[ib32] & 0xf)) * 0.25,
            d * (0.5 + f32::from(scales[ib32] >> 4)) * 0.25,
        ];
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let q = u16_at(x, 2 + 2 * (4 * ib32 + l));
            let grid = IQ2XS_GRID[usize::from(q & 511)];
            let signs = KSIGNS_IQ2XS[usize::from(q >> 9)];
            put8(y, db[l / 2], grid, signs);
        }
    }
}

/// ggml `dequantize_row_iq2_s` for one block.
pub(super) fn iq2_s(x: &[u8; IQ2_S_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    let qs = &x[2..2 + QK_K / 8];
    let signs = &x[2 + QK_K / 8..2 + QK_K / 4];
    let qh = &x[2 + QK_K / 4..2 + QK_K / 4 + QK_K / 32];
    let scales = &x[2 + QK_K / 4 + QK_K / 32..];
    for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
        let db = [
            d * (0.5 + f32::from(scales[ib32] & 0xf)) * 0.25,
            d * (0.5 + f32::from(scales[ib32] >> 4)) * 0.25,
        ];
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let hi = (usize::from(qh[ib32]) << (8 - 2 * l)) & 0x300;
            let grid = IQ2S_GRID[usize::from(qs[4 * ib32 + l]) | hi];
            put8(y, db[l / 2], grid, signs[4 * ib32 + l]);
        }
    }
}
