//! IQ1_S and IQ1_M: ternary grid points shifted by ±delta, 1.56 / 1.75 bpw.

use super::grids::{IQ1M_DELTA, IQ1S_DELTA, IQ1S_GRID};
use super::{f16_at, u16_at, QK_K};

/// Bytes of one IQ1_S block: `d: f16, qs: [u8; 32], qh: [u16; 8]`.
pub(super) const IQ1_S_BYTES: usize = 2 + QK_K / 8 + QK_K / 16;
/// Bytes of one IQ1_M block: `qs: [u8; 32], qh: [u8; 16], scales: [u16; 4]`.
pub(super) const IQ1_M_BYTES: usize = QK_K / 8 + QK_K / 16 + QK_K / 32;

/// Signed grid bytes of IQ1_S grid point `idx` (< 2048).
fn grid(idx: usize) -> [i8; 8] {
    IQ1S_GRID[idx].to_le_bytes().map(|b| b as i8)
}

/// ggml `dequantize_row_iq1_s` for one block.
pub(super) fn iq1_s(x: &[u8; IQ1_S_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    let qs = &x[2..2 + QK_K / 8];
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let qh = u16_at(x, 2 + QK_K / 8 + 2 * ib);
        let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
        let delta = if qh & 0x8000 != 0 {
            -IQ1S_DELTA
        } else {
            IQ1S_DELTA
        };
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let idx = usize::from(qs[4 * ib + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
            for (y, g) in y.iter_mut().zip(grid(idx)) {
                *y = dl * (f32::from(g) + delta);
            }
        }
    }
}

/// ggml `dequantize_row_iq1_m` for one block.
pub(super) fn iq1_m(x: &[u8; IQ1_M_BYTES], y: &mut [f32; QK_K]) {
    let qs = &x[..QK_K / 8];
    let qh = &x[QK_K / 8..QK_K / 8 + QK_K / 16];
    let sc_at = QK_K / 8 + QK_K / 16;
    let sc = [0, 1, 2, 3].map(|k| u16_at(x, sc_at + 2 * k));
    // The f16 super-block scale is spread over the top nibbles of `sc`.
    let scale =
        (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    let d = half::f16::from_bits(scale).to_f32();
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let s = sc[ib / 2] >> (6 * (ib % 2));
        let dl1 = d * f32::from(2 * (s & 0x7) + 1);
        let dl2 = d * f32::from(2 * ((s >> 3) & 0x7) + 1);
        let (h0, h1) = (u16::from(qh[2 * ib]), u16::from(qh[2 * ib + 1]));
        let q = |l: usize| u16::from(qs[4 * ib + l]);
        let idx = [
            q(0) | ((h0 << 8) & 0x700),
            q(1) | ((h0 << 4) & 0x700),
            q(2) | ((h1 << 8) & 0x700),
            q(3) | ((h1 << 4) & 0x700),
        ];
        let delta = [h0 & 0x08, h0 & 0x80, h1 & 0x08, h1 & 0x80].map(|bit| {
            if bit != 0 {
                -IQ1M_DELTA
            } else {
                IQ1M_DELTA
            }
        });
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let dl = if l < 2 { dl1 } else { dl2 };
            for (y, g) in y.iter_mut().zip(grid(usize::from(idx[l]))) {
                *y = dl * (f32::from(g) + delta[l]);
            }
        }
    }
}
