//! The packed layout of Q4_K (see `packed.rs` for the legacy types): 16
//! rows interleaved per 256-weight super-block, so that a single-token
//! product advances all 16 rows with each `vpdpbusd` and streams one
//! contiguous run of memory. With the file's layout every row is its own
//! stream and a Q4_K row dot runs at ~20 GB/s per core in cache, too slow
//! to keep up with DRAM on two cores (decode of a 2.7B-active model reached
//! 66% of the bandwidth limit; llama.cpp, which repacks Q4_K 8 rows at a
//! time at load, reached 85%).
//!
//! One panel block (16 rows × one super-block) holds exactly the 16 file
//! blocks' bytes (`16 × 144 = 2304`), rearranged:
//! - bytes `0..32`: the rows' `d` (f16, row `r` at `2 r`);
//! - bytes `32..64`: their `dmin`;
//! - bytes `64..256`: the 12 packed 6-bit scale/min bytes, byte `g` of row
//!   `r` at `64 + 16 g + r` (so one 128-bit load holds byte `g` of all 16
//!   rows and the scales unpack for 16 rows at once);
//! - bytes `256..2304`: 32 registers of 64 bytes; byte `4 r + j` of
//!   register `c` is row `r`'s quant byte `4 c + j`. As in the file, quant
//!   byte `32 k + l` holds weight `64 k + l` in its low nibble and weight
//!   `64 k + 32 + l` in its high nibble, so register `c = 8 k + q` gives
//!   weights `64 k + 4 q ..+4` (sub-block `2 k`) and `64 k + 32 + 4 q ..+4`
//!   (sub-block `2 k + 1`) of every row.
//!
//! A panel is its blocks back to back (scales beside their weights: one
//! stream front to back). Rows past the matrix's end in the last panel are
//! zero. [`products`] is the scalar twin of the AVX-512 VNNI kernel: per
//! row, token and block both form the same integer sums and accumulate
//! them with the same two fused multiply-adds, so the results are equal.

use super::generic::unpack_k4_scales;
use super::PanelOut;
use anedvd_quant::{f16_to_f32, BlockQ8K, QK_K};

/// Bytes of a Q4_K block in the file.
pub(crate) const Q4K_BYTES: usize = 144;
/// Bytes of one panel block: 16 rows of one super-block.
pub(crate) const BLOCK: usize = 16 * Q4K_BYTES;
/// Where the quant registers start in a panel block.
pub(crate) const QS: usize = 256;
/// Where the scale groups start in a panel block.
pub(crate) const SCALES: usize = 64;

const ROWS: usize = super::packed::PANEL_ROWS;

/// Packs rows `src` (`rb` bytes, `nb` super-blocks each) into the panels
/// `dst` (`ceil(rows / 16)` panels of `nb` blocks).
pub(crate) fn pack(src: &[u8], rb: usize, nb: usize, dst: &mut [u8]) {
    let n = src.len() / rb.max(1);
    for (p, panel) in dst.chunks_exact_mut(nb * BLOCK).enumerate() {
        let rows = ROWS.min(n.saturating_sub(p * ROWS));
        for (b, blk) in panel.chunks_exact_mut(BLOCK).enumerate() {
            if rows < ROWS {
                blk.fill(0);
            }
            for r in 0..rows {
                let at = (p * ROWS + r) * rb + b * Q4K_BYTES;
                let x = &src[at..at + Q4K_BYTES];
                blk[2 * r..2 * r + 2].copy_from_slice(&x[0..2]);
                blk[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&x[2..4]);
                for g in 0..12 {
                    blk[SCALES + 16 * g + r] = x[4 + g];
                }
                for (c, q) in x[16..].chunks_exact(4).enumerate() {
                    let o = QS + 64 * c + 4 * r;
                    blk[o..o + 4].copy_from_slice(q);
                }
            }
        }
    }
}

/// Row `r`'s 12 scale bytes in panel block `blk`.
fn scale_bytes(blk: &[u8], r: usize) -> [u8; 12] {
    std::array::from_fn(|g| blk[SCALES + 16 * g + r])
}

/// Row `r`'s quant nibble for weight `i` in panel block `blk`.
fn weight(blk: &[u8], r: usize, i: usize) -> u8 {
    let (k, l) = (i / 64, i % 64);
    let byte = 32 * k + l % 32;
    let v = blk[QS + 64 * (byte / 4) + 4 * r + byte % 4];
    if l < 32 {
        v & 0xf
    } else {
        v >> 4
    }
}

fn f16(b: &[u8], o: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[o], b[o + 1]]))
}

/// Decodes row `lane` of `panel` (`nb` blocks) into `dst` (`nb * 256`
/// values): `d * sc * q - dmin * m`, as `anedvd_quant::dequantize`.
pub(crate) fn decode_row(panel: &[u8], lane: usize, dst: &mut [f32]) {
    for (blk, out) in panel.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16(blk, 2 * lane), f16(blk, 32 + 2 * lane));
        let sm = unpack_k4_scales(&scale_bytes(blk, lane));
        for (i, y) in out.iter_mut().enumerate() {
            let s = i / 32;
            let (sc, m) = (d * f32::from(sm[s]), dmin * f32::from(sm[8 + s]));
            *y = sc * f32::from(weight(blk, lane, i)) - m;
        }
    }
}

/// Products of `n_rows` packed rows (`panels`, `nb` blocks per row) with
/// every token of `a` (`nb` blocks each), into `o` (token-major:
/// `out[t * row_stride + row_offset + r]`; else `out[r * n_tok + t]`).
pub(crate) fn products(
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[BlockQ8K],
    o: &mut PanelOut<'_>,
) {
    let n_tok = a.len() / nb.max(1);
    for (p, panel) in panels.chunks_exact(nb * BLOCK).enumerate() {
        for r in 0..ROWS.min(n_rows.saturating_sub(p * ROWS)) {
            for t in 0..n_tok {
                let mut sum = 0.0f32;
                for (blk, y) in panel.chunks_exact(BLOCK).zip(&a[t * nb..(t + 1) * nb]) {
                    let sm = unpack_k4_scales(&scale_bytes(blk, r));
                    let (mut isum, mut msum) = (0i32, 0i32);
                    for s in 0..8 {
                        let dot: i32 = (32 * s..32 * s + 32)
                            .map(|i| i32::from(weight(blk, r, i)) * i32::from(y.qs[i]))
                            .sum();
                        isum += dot * i32::from(sm[s]);
                        let bsum = i32::from(y.bsums[2 * s]) + i32::from(y.bsums[2 * s + 1]);
                        msum += bsum * i32::from(sm[8 + s]);
                    }
                    let dd = f16(blk, 2 * r) * y.d;
                    let dm = f16(blk, 32 + 2 * r) * y.d;
                    sum = (isum as f32).mul_add(dd, sum);
                    sum = (-(msum as f32)).mul_add(dm, sum);
                }
                let row = p * ROWS + r;
                let at = if o.token_major {
                    t * o.row_stride + o.row_offset + row
                } else {
                    row * n_tok + t
                };
                o.out[at] = sum;
            }
        }
    }
}
