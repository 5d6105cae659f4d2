//! IQ3_XXS and IQ3_S: pairs of 4-element grid points with sign bits, ~3-3.4 bpw.

use super::grids::{IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS};
use super::{f16_at, sign, u32_at, QK_K};

/// Bytes of one IQ3_XXS block: `d: f16, qs: [u8; 64], scales_and_signs: [u32; 8]`.
pub(super) const IQ3_XXS_BYTES: usize = 2 + 3 * QK_K / 8;
/// Bytes of one IQ3_S block: `d: f16, qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4]`.
pub(super) const IQ3_S_BYTES: usize = 2 + 13 * QK_K / 32 + QK_K / 64;

/// Writes `db * grid{1,2}[j] * sign` for one 8-element group made of two grid points.
fn put8(y: &mut [f32], db: f32, grid1: u32, grid2: u32, signs: u8) {
    let (y1, y2) = y.split_at_mut(4);
    for (j, (y, g)) in y1.iter_mut().zip(grid1.to_le_bytes()).enumerate() {
        *y = db * f32::from(g) * sign(signs, j);
    }
    for (j, (y, g)) in y2.iter_mut().zip(grid2.to_le_bytes()).enumerate() {
        *y = db * f32::from(g) * sign(signs, j + 4);
    }
}

/// ggml `dequantize_row_iq3_xxs` for one block.
pub(super) fn iq3_xxs(x: &[u8; IQ3_XXS_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    let qs = &x[2..2 + QK_K / 4];
    for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
        let aux = u32_at(x, 2 + QK_K / 4 + 4 * ib32);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let grid1 = IQ3XXS_GRID[usize::from(qs[8 * ib32 + 2 * l])];
            let grid2 = IQ3XXS_GRID[usize::from(qs[8 * ib32 + 2 * l + 1])];
            put8(y, db, grid1, grid2, signs);
        }
    }
}

/// ggml `dequantize_row_iq3_s` for one block.
pub(super) fn iq3_s(x: &[u8; IQ3_S_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    let qs = &x[2..2 + QK_K / 4];
    let qh = &x[2 + QK_K / 4..2 + QK_K / 4 + QK_K / 32];
    let signs = &x[2 + QK_K / 4 + QK_K / 32..2 + QK_K / 4 + QK_K / 32 + QK_K / 8];
    let scales = &x[IQ3_S_BYTES - QK_K / 64..];
    // One 32-element sub-block per iteration; ggml unrolls these in pairs
    // sharing one scale byte (low nibble, then high nibble).
    for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
        let nibble = (scales[ib32 / 2] >> (4 * (ib32 % 2))) & 0xf;
        let db = d * f32::from(1 + 2 * u16::from(nibble));
        let h = usize::from(qh[ib32]);
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let q = 8 * ib32 + 2 * l;
            let grid1 = IQ3S_GRID[usize::from(qs[q]) | ((h << (8 - 2 * l)) & 256)];
            let grid2 = IQ3S_GRID[usize::from(qs[q + 1]) | ((h << (7 - 2 * l)) & 256)];
            put8(y, db, grid1, grid2, signs[4 * ib32 + l]);
        }
    }
}
