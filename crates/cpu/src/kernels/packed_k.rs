//! The packed layouts of Q4_K and Q6_K (see `packed.rs` for the legacy
//! types): 16 rows interleaved per 256-weight super-block, so that a
//! single-token product advances all 16 rows with each `vpdpbusd` and
//! streams one contiguous run of memory. With the file's layout every row
//! is its own stream and a Q4_K row dot runs at ~20 GB/s per core in cache
//! (Q6_K ~25), too slow to keep up with DRAM on two cores (decode of a
//! 2.7B-active model reached 66% of the bandwidth limit; llama.cpp, which
//! repacks Q4_K 8 rows at a time at load, reached 85%).
//!
//! Both keep the file's bits (nibbles, 6-bit scales, f16 super-block
//! scales), rearranged so that one load holds the same byte of 16 rows:
//! "register `c`" below is 64 bytes whose byte `4 r + j` is row `r`'s byte
//! `4 c + j` of a quant array, and "group `g`" 16 bytes whose byte `r` is
//! row `r`'s byte `g` of a scale array. Rows past the matrix's end in the
//! last panel are zero.
//!
//! **Q4_K**: a panel is `nb` blocks of `16 × 144 = 2304` bytes (the file's
//! size): `d` of the 16 rows (f16, row `r` at `2 r`), their `dmin`, the 12
//! groups of the packed 6-bit scale/min bytes (at [`Q4K_SCALES`]), then the
//! 32 registers of `qs` (at [`Q4K_QS`]). As in the file, quant byte
//! `32 k + l` holds weight `64 k + l` in its low nibble and weight
//! `64 k + 32 + l` in its high nibble.
//!
//! **Q6_K**: a panel is the `nb` blocks' quants (`3072` bytes each: the 32
//! registers of `ql`, then the 16 of `qh`), then the `nb` blocks' headers
//! (`288` bytes each: `d` of the 16 rows, then the 16 groups of the signed
//! sub-block scales), padded to 64 bytes; quants first so that every
//! register stays 64-byte aligned (a block is `16 × 210 = 3360` bytes, not
//! a multiple of 64). Weight `128 n + 32 i + l` (`i` in 0..4, `l` in 0..32)
//! is nibble `i / 2` of `ql[64 n + 32 (i % 2) + l]` with bits `2 i ..2 i + 2`
//! of `qh[32 n + l]` above it, minus 32.
//!
//! [`products`] is the scalar twin of the AVX-512 VNNI kernels: per row,
//! token and block both form the same integer sums and accumulate them
//! with the same fused multiply-adds, so the results are equal.

use super::generic::unpack_k4_scales;
use super::PanelOut;
use anedvd_base::GgmlType;
use anedvd_quant::{f16_to_f32, BlockQ8K, QK_K};

const ROWS: usize = super::packed::PANEL_ROWS;

/// Bytes of a Q4_K block in the file.
const Q4K_BYTES: usize = 144;
/// Bytes of one Q4_K panel block: 16 rows of one super-block.
pub(crate) const Q4K_BLOCK: usize = ROWS * Q4K_BYTES;
/// Where the scale groups start in a Q4_K panel block.
pub(crate) const Q4K_SCALES: usize = 64;
/// Where the quant registers start in a Q4_K panel block.
pub(crate) const Q4K_QS: usize = 256;

/// Bytes of a Q6_K block in the file.
const Q6K_BYTES: usize = 210;
/// Bytes of one Q6_K block's quants in a panel (`ql` then `qh`).
pub(crate) const Q6K_QUANTS: usize = ROWS * 192;
/// Where `qh`'s registers start in a Q6_K block's quants.
pub(crate) const Q6K_QH: usize = ROWS * 128;
/// Bytes of one Q6_K block's header in a panel (`d`, then the scales).
pub(crate) const Q6K_HEADER: usize = 32 + ROWS * 16;

/// Bytes per block in the file of a type packed here.
pub(crate) fn file_block_bytes(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q4K => Some(Q4K_BYTES),
        GgmlType::Q6K => Some(Q6K_BYTES),
        _ => None,
    }
}

/// Bytes of one panel of `nb` super-blocks of `ty` (a multiple of 64).
pub(crate) fn panel_bytes(ty: GgmlType, nb: usize) -> usize {
    match ty {
        GgmlType::Q6K => (nb * (Q6K_QUANTS + Q6K_HEADER)).next_multiple_of(64),
        _ => nb * Q4K_BLOCK,
    }
}

/// Index of byte `i` of row `r` in a run of registers.
fn reg(i: usize, r: usize) -> usize {
    64 * (i / 4) + 4 * r + i % 4
}

/// Index of byte `g` of row `r` in a run of groups.
fn group(g: usize, r: usize) -> usize {
    16 * g + r
}

/// Packs rows `src` of `ty` (`rb` bytes, `nb` super-blocks each) into the
/// panels `dst` (`ceil(rows / 16)` panels).
pub(crate) fn pack(ty: GgmlType, src: &[u8], rb: usize, nb: usize, dst: &mut [u8]) {
    let Some(bb) = file_block_bytes(ty) else {
        return;
    };
    let n = src.len() / rb.max(1);
    for (p, panel) in dst.chunks_exact_mut(panel_bytes(ty, nb)).enumerate() {
        let rows = ROWS.min(n.saturating_sub(p * ROWS));
        if rows < ROWS {
            panel.fill(0);
        }
        for r in 0..rows {
            for b in 0..nb {
                let at = (p * ROWS + r) * rb + b * bb;
                let x = &src[at..at + bb];
                if ty == GgmlType::Q4K {
                    let blk = &mut panel[b * Q4K_BLOCK..(b + 1) * Q4K_BLOCK];
                    blk[2 * r..2 * r + 2].copy_from_slice(&x[0..2]);
                    blk[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&x[2..4]);
                    for g in 0..12 {
                        blk[Q4K_SCALES + group(g, r)] = x[4 + g];
                    }
                    for (c, q) in x[16..].chunks_exact(4).enumerate() {
                        let o = Q4K_QS + reg(4 * c, r);
                        blk[o..o + 4].copy_from_slice(q);
                    }
                } else {
                    let (quants, headers) = panel.split_at_mut(nb * Q6K_QUANTS);
                    let q = &mut quants[b * Q6K_QUANTS..(b + 1) * Q6K_QUANTS];
                    for (c, v) in x[..192].chunks_exact(4).enumerate() {
                        let o = reg(4 * c, r);
                        q[o..o + 4].copy_from_slice(v);
                    }
                    let h = &mut headers[b * Q6K_HEADER..(b + 1) * Q6K_HEADER];
                    h[2 * r..2 * r + 2].copy_from_slice(&x[208..210]);
                    for g in 0..16 {
                        h[32 + group(g, r)] = x[192 + g];
                    }
                }
            }
        }
    }
}

fn f16(b: &[u8], o: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[o], b[o + 1]]))
}

/// One super-block of one row of a packed panel, as the kernels see it.
struct RowBlock<'a> {
    ty: GgmlType,
    /// Q4_K: the panel block; Q6_K: the block's quants.
    quants: &'a [u8],
    /// Q4_K: the panel block; Q6_K: the block's header.
    header: &'a [u8],
    r: usize,
}

impl<'a> RowBlock<'a> {
    fn new(ty: GgmlType, panel: &'a [u8], nb: usize, b: usize, r: usize) -> Self {
        let (quants, header) = if ty == GgmlType::Q4K {
            let blk = &panel[b * Q4K_BLOCK..(b + 1) * Q4K_BLOCK];
            (blk, blk)
        } else {
            let (q, h) = panel.split_at(nb * Q6K_QUANTS);
            (
                &q[b * Q6K_QUANTS..(b + 1) * Q6K_QUANTS],
                &h[b * Q6K_HEADER..(b + 1) * Q6K_HEADER],
            )
        };
        Self {
            ty,
            quants,
            header,
            r,
        }
    }

    /// The super-block scale `d` (and Q4_K's `dmin`).
    fn d(&self) -> (f32, f32) {
        match self.ty {
            GgmlType::Q4K => (
                f16(self.header, 2 * self.r),
                f16(self.header, 32 + 2 * self.r),
            ),
            _ => (f16(self.header, 2 * self.r), 0.0),
        }
    }

    /// Q4_K: `[scales, mins]` of the eight 32-weight sub-blocks; Q6_K: the
    /// sixteen signed scales of the 16-weight sub-blocks (as `u8` bits).
    fn scales(&self) -> [u8; 16] {
        match self.ty {
            GgmlType::Q4K => unpack_k4_scales(&std::array::from_fn::<u8, 12, _>(|g| {
                self.header[Q4K_SCALES + group(g, self.r)]
            })),
            _ => std::array::from_fn(|g| self.header[32 + group(g, self.r)]),
        }
    }

    /// The unsigned quant of weight `i` (Q4_K: `q`; Q6_K: `q + 32`).
    fn quant(&self, i: usize) -> u8 {
        let r = self.r;
        if self.ty == GgmlType::Q4K {
            let (k, l) = (i / 64, i % 64);
            let v = self.quants[Q4K_QS + reg(32 * k + l % 32, r)];
            return if l < 32 { v & 0xf } else { v >> 4 };
        }
        let (n, i4, l) = (i / 128, i % 128 / 32, i % 32);
        let ql = self.quants[reg(64 * n + 32 * (i4 % 2) + l, r)];
        let qh = self.quants[Q6K_QH + reg(32 * n + l, r)];
        let lo = if i4 < 2 { ql & 0xf } else { ql >> 4 };
        lo | ((qh >> (2 * i4)) & 3) << 4
    }
}

/// Decodes row `lane` of `panel` (`nb` blocks of `ty`) into `dst` (`nb *
/// 256` values), as `anedvd_quant::dequantize` decodes the file's row.
pub(crate) fn decode_row(ty: GgmlType, panel: &[u8], nb: usize, lane: usize, dst: &mut [f32]) {
    for (b, out) in dst.chunks_exact_mut(QK_K).enumerate().take(nb) {
        let x = RowBlock::new(ty, panel, nb, b, lane);
        let ((d, dmin), sm) = (x.d(), x.scales());
        for (i, y) in out.iter_mut().enumerate() {
            let q = f32::from(x.quant(i));
            *y = if ty == GgmlType::Q4K {
                let s = i / 32;
                d * f32::from(sm[s]) * q - dmin * f32::from(sm[8 + s])
            } else {
                d * f32::from(sm[i / 16] as i8) * (q - 32.0)
            };
        }
    }
}

/// Row block `x` · token block `y`: the integer sums the kernels form,
/// with `dot_s` the dot of sub-block `s`'s unsigned quants: Q4_K
/// `sum_s sc_s dot_s` and `sum_s m_s bsum_s`; Q6_K
/// `sum_s sc_s (dot_s - 32 bsum_s)` and 0.
fn int_sums(x: &RowBlock<'_>, y: &BlockQ8K) -> (i32, i32) {
    let sm = x.scales();
    let dot = |s: usize, len: usize| -> i32 {
        (len * s..len * (s + 1))
            .map(|i| i32::from(x.quant(i)) * i32::from(y.qs[i]))
            .sum()
    };
    let bs = |j: usize| i32::from(y.bsums[j]);
    if x.ty == GgmlType::Q4K {
        (0..8).fold((0, 0), |(is, ms), s| {
            let m = i32::from(sm[8 + s]) * (bs(2 * s) + bs(2 * s + 1));
            (is + dot(s, 32) * i32::from(sm[s]), ms + m)
        })
    } else {
        let is = (0..16).map(|s| i32::from(sm[s] as i8) * (dot(s, 16) - 32 * bs(s)));
        (is.sum(), 0)
    }
}

/// Products of `n_rows` packed rows of `ty` (`panels`, `nb` blocks per
/// row) with every token of `a` (`nb` blocks each), into `o` (token-major:
/// `out[t * row_stride + row_offset + r]`; else `out[r * n_tok + t]`).
pub(crate) fn products(
    ty: GgmlType,
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[BlockQ8K],
    o: &mut PanelOut<'_>,
) {
    if file_block_bytes(ty).is_none() || nb == 0 {
        return;
    }
    let n_tok = a.len() / nb;
    for (p, panel) in panels.chunks_exact(panel_bytes(ty, nb)).enumerate() {
        for r in 0..ROWS.min(n_rows.saturating_sub(p * ROWS)) {
            for t in 0..n_tok {
                let mut sum = 0.0f32;
                for (b, y) in a[t * nb..(t + 1) * nb].iter().enumerate() {
                    let x = RowBlock::new(ty, panel, nb, b, r);
                    let (isum, msum) = int_sums(&x, y);
                    let (d, dmin) = x.d();
                    sum = (isum as f32).mul_add(d * y.d, sum);
                    if ty == GgmlType::Q4K {
                        sum = (-(msum as f32)).mul_add(dmin * y.d, sum);
                    }
                }
                o.put(t, p * ROWS + r, &[sum]);
            }
        }
    }
}
