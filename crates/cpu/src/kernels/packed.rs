//! Weights repacked once, at load, into the 16-row panel layout of the
//! AVX-512 prefill kernels, so that batched products (several sequences
//! decoding together, prefill) stop repacking on every call. A batched
//! decode pass of Gemma 3 270M spent ~60% of its time repacking its 262k-row
//! Q8_0 output matrix (see docs/BENCHMARKS.md); llama.cpp repacks some types
//! at load for the same reason.
//!
//! The legacy 32-weight block types are packed (Q8_0, Q4_0, Q5_0,
//! IQ4_NL): each panel block holds exactly what the 16 rows' blocks held,
//! rearranged (`16 × block bytes`), so the packed copy replaces the file's
//! bytes in memory (the loader drops the mapped pages,
//! `WeightSource::release`) and single-token decoding reads as many bytes
//! as before.
//!
//! Layout of one panel (16 rows, `nb` blocks of 32 weights): `nb` × 16 f16
//! block scales (row `r` at byte `2 r`), then `nb` weight parts (scales
//! first, so that reading panels front to back is one stream that the
//! kernels prefetch ahead of). The kernels read a block's 32 weights of the 16 rows as eight 64-byte
//! registers: register `k` holds weights `4k..4k+4` of each row (row `r` at
//! byte `4 r`) as unsigned bytes `u = w + off` (Q8_0 and IQ4_NL: 128, Q5_0:
//! 16, Q4_0: 8), so one `vpdpbusd` with four broadcast activation bytes
//! advances all 16 rows; the offset is taken back as `-off * sum(y)` per
//! block. The weight part of a block is:
//! - Q8_0 (512 bytes): the eight registers.
//! - Q4_0, IQ4_NL (256 bytes): four 64-byte groups; byte `4 r + j` of group
//!   `q` is row `r`'s quant byte `4 q + j`, whose low nibble is weight
//!   `4 q + j` (register `q`) and high nibble weight `16 + 4 q + j`
//!   (register `q + 4`), as in the file. IQ4_NL maps nibbles through its
//!   table.
//! - Q5_0 (320 bytes): Q4_0's 256, then eight 64-bit masks: bit `4 r + j`
//!   of mask `k` is the fifth bit of weight `4 k + j` of row `r`.
//!
//! Rows past the matrix's end in the last panel are zero (weights and
//! scales, so they add nothing).
//!
//! [`pack`] and [`packed_products`] are the scalar twins of the AVX-512
//! VNNI code (`x86_64/avx512_packed.rs`) and of the AVX2 code, which reads
//! each 64-byte register as two 8-row halves (`x86_64/avx2_packed.rs`): the
//! packed bytes are identical and, because all accumulate each block with
//! one fused multiply-add in block order, so are the results.
//!
//! Q4_K and Q6_K have their own panel layouts of the file's size
//! (`packed_k.rs`); this module's [`PackedWeights`] and [`Kernels`] entry
//! points serve all.

use super::{arena, packed_k};
use super::{check_fits, out_shape, ActFormat, KernelError};
use super::{Kernels, PanelOut, Q8Block, QuantizedActivation, QK8};
use anedvd_base::GgmlType;
use anedvd_quant::QK_K;
use std::ops::Range;

/// Rows per panel.
pub(crate) const PANEL_ROWS: usize = 16;

/// Bytes of one block of one row in the file (and of 1/16 of a panel
/// block), for the packed types; `None` for the others.
fn block_bytes(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q8_0 => Some(34),
        GgmlType::Q5_0 => Some(22),
        GgmlType::Q4_0 | GgmlType::IQ4NL => Some(18),
        _ => None,
    }
}

/// Bytes of the weight part of one panel block.
pub(crate) fn weight_part(ty: GgmlType) -> usize {
    block_bytes(ty).map_or(0, |b| PANEL_ROWS * (b - 2))
}

/// The byte offset that makes a type's weights unsigned.
pub(crate) fn offset(ty: GgmlType) -> i32 {
    match ty {
        GgmlType::Q4_0 => 8,
        GgmlType::Q5_0 => 16,
        _ => 128,
    }
}

/// The bytes per block in the file and the weights per block of `ty`, if
/// it has a packed layout (the legacy types here, Q4_K and Q6_K in
/// `packed_k`).
fn packed_block(ty: GgmlType) -> Option<(usize, usize)> {
    match packed_k::file_block_bytes(ty) {
        Some(bb) => Some((bb, QK_K)),
        None => block_bytes(ty).map(|bb| (bb, QK8)),
    }
}

/// True for the types whose layout is in `packed_k`.
fn is_k(ty: GgmlType) -> bool {
    packed_k::file_block_bytes(ty).is_some()
}

/// Bytes of one panel of `nb` blocks of `ty` (`bb` bytes each in the file).
fn panel_len(ty: GgmlType, bb: usize, nb: usize) -> usize {
    if is_k(ty) {
        packed_k::panel_bytes(ty, nb)
    } else {
        nb * bb * PANEL_ROWS
    }
}

/// The bytes per block and block count of `ty` rows of `n_cols`, if `ty`
/// has a packed layout and `n_cols` is whole blocks.
fn geometry(ty: GgmlType, n_cols: usize) -> Result<(usize, usize), KernelError> {
    match packed_block(ty) {
        Some((bb, bw)) if n_cols > 0 && n_cols.is_multiple_of(bw) => Ok((bb, n_cols / bw)),
        _ => Err(KernelError::Shape(format!(
            "no packed layout for {ty} rows of {n_cols}"
        ))),
    }
}

/// A matrix's weights in the panel layout of its type (see the module
/// documentation), 64-byte aligned.
pub struct PackedWeights {
    ty: GgmlType,
    n_rows: usize,
    n_cols: usize,
    buf: Buffer,
    len: usize,
}

/// Zeroed, 64-byte-aligned memory: a region of the packed weights' arena,
/// which lays matrices back to back in maps asking for transparent huge
/// pages (one fault and fewer TLB misses per 2 MB instead of per 4 KB:
/// packing the 178 MB output matrix of Gemma 3 270M spent more time
/// faulting pages in than packing; see `arena.rs` for decode), else a
/// `Vec`.
enum Buffer {
    Arena(arena::Region),
    Vec { bytes: Vec<u8>, start: usize },
}

impl Buffer {
    fn zeroed(len: usize) -> Self {
        if let Some(r) = arena::PACKED_WEIGHTS.region(len) {
            return Buffer::Arena(r);
        }
        // `vec![0; n]` takes fresh zero pages from the allocator (no writes).
        let bytes = vec![0u8; len + 63];
        let start = bytes.as_ptr().align_offset(64).min(63);
        Buffer::Vec { bytes, start }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Buffer::Arena(r) => r.bytes(),
            Buffer::Vec { bytes, start } => &bytes[*start..],
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Buffer::Arena(r) => r.bytes_mut(),
            Buffer::Vec { bytes, start } => &mut bytes[*start..],
        }
    }
}

impl std::fmt::Debug for PackedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PackedWeights({} {}x{}, {} bytes)",
            self.ty,
            self.n_rows,
            self.n_cols,
            self.len()
        )
    }
}

impl PackedWeights {
    /// A zeroed buffer for `n_rows` rows of `n_cols` weights of type `ty`.
    fn zeroed(ty: GgmlType, n_rows: usize, n_cols: usize) -> Result<Self, KernelError> {
        let (bb, nb) = geometry(ty, n_cols)?;
        let len = n_rows
            .div_ceil(PANEL_ROWS)
            .checked_mul(panel_len(ty, bb, nb))
            .ok_or_else(|| KernelError::Shape(format!("{n_rows} x {n_cols} is too large")))?;
        Ok(Self {
            ty,
            n_rows,
            n_cols,
            buf: Buffer::zeroed(len),
            len,
        })
    }

    /// The weight type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Rows of the packed matrix.
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Bytes of packed data.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a matrix of no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes row `r` to f32 (`dst.len()` must be the row width): the
    /// values `anedvd_quant::dequantize` gives for the file's row, so
    /// embedding lookups of a tied table can read the packed copy and
    /// leave the file's pages released.
    pub fn decode_row(&self, r: usize, dst: &mut [f32]) -> Result<(), KernelError> {
        if r >= self.n_rows || dst.len() != self.n_cols {
            return Err(KernelError::Shape(format!(
                "row {r} of {} into {} values (rows of {})",
                self.n_rows,
                dst.len(),
                self.n_cols
            )));
        }
        let pb = self.panel_bytes();
        let panel = &self.bytes()[r / PANEL_ROWS * pb..(r / PANEL_ROWS + 1) * pb];
        let lane = r % PANEL_ROWS;
        if is_k(self.ty) {
            packed_k::decode_row(self.ty, panel, self.n_cols / QK_K, lane, dst);
            return Ok(());
        }
        let (ty, nb, wp) = (self.ty, self.n_cols / QK8, weight_part(self.ty));
        let (ds, dw) = panel.split_at(nb * 32);
        for (b, out) in dst.chunks_exact_mut(QK8).enumerate() {
            let at = b * 32 + 2 * lane;
            let d = anedvd_quant::f16_to_f32(u16::from_le_bytes([ds[at], ds[at + 1]]));
            let w = &dw[b * wp..(b + 1) * wp];
            for (j, y) in out.iter_mut().enumerate() {
                *y = (packed_weight(ty, w, lane, j) - offset(ty)) as f32 * d;
            }
        }
        Ok(())
    }

    /// Bytes per panel of 16 rows.
    pub fn panel_bytes(&self) -> usize {
        geometry(self.ty, self.n_cols).map_or(0, |(bb, nb)| panel_len(self.ty, bb, nb))
    }

    fn bytes(&self) -> &[u8] {
        &self.buf.bytes()[..self.len]
    }

    /// The packed bytes, whole panels back to back, for
    /// [`Kernels::pack_rows`] (split at multiples of [`Self::panel_bytes`]).
    pub fn panels_mut(&mut self) -> &mut [u8] {
        &mut self.buf.bytes_mut()[..self.len]
    }
}

impl Kernels {
    /// True if this table multiplies `ty` faster from weights packed once
    /// ([`Self::new_packed`], [`Self::pack_rows`]) than from the file's
    /// layout; a loader should then pack. (Every table can run packed
    /// weights; AVX-512 VNNI and AVX2 gain for every packed type; AVX-512
    /// without VNNI packs nothing.)
    pub fn packs(&self, ty: GgmlType) -> bool {
        match ty {
            GgmlType::Q4K | GgmlType::Q6K => self.table.packed_k.is_some(),
            _ => block_bytes(ty).is_some() && self.table.packed.is_some(),
        }
    }

    /// True if this table's packed `ty` also streams from memory (a matrix
    /// beyond the caches) at least as fast as the file layout. Where not
    /// (Q6_K on AVX-512 VNNI), a loader packs it only when the whole model
    /// fits the last-level cache ([`crate::packing::Packing::for_model`]).
    pub fn packed_streams(&self, ty: GgmlType) -> bool {
        ty != GgmlType::Q6K || self.table.packed_q6_k_streams
    }

    /// A zeroed packed matrix of `n_rows` rows of `n_cols` weights of type
    /// `ty`, to fill with [`Self::pack_rows`] panel by panel.
    pub fn new_packed(
        &self,
        ty: GgmlType,
        n_rows: usize,
        n_cols: usize,
    ) -> Result<PackedWeights, KernelError> {
        PackedWeights::zeroed(ty, n_rows, n_cols)
    }

    /// Packs the whole rows `rows` (type `ty`, `n_cols` wide; at most 16
    /// times as many as `dst` has panels) into `dst`, a run of whole panels
    /// of a [`PackedWeights`] ([`PackedWeights::panels_mut`]).
    pub fn pack_rows(
        &self,
        ty: GgmlType,
        rows: &[u8],
        n_cols: usize,
        dst: &mut [u8],
    ) -> Result<(), KernelError> {
        let (bb, nb) = geometry(ty, n_cols)?;
        let (rb, pb) = (nb * bb, panel_len(ty, bb, nb));
        let n = rows.len() / rb;
        if !rows.len().is_multiple_of(rb)
            || !dst.len().is_multiple_of(pb)
            || n.div_ceil(PANEL_ROWS) > dst.len() / pb
        {
            return Err(KernelError::Shape(format!(
                "{} bytes of {rb}-byte rows into {} bytes of {pb}-byte panels",
                rows.len(),
                dst.len()
            )));
        }
        if is_k(ty) {
            // A byte shuffle: scalar code packs several GB/s, far faster
            // than the pages it reads are mapped in.
            packed_k::pack(ty, rows, rb, nb, dst);
        } else {
            (self.table.pack)(ty, rows, rb, nb, dst);
        }
        Ok(())
    }

    /// Products of the packed rows `rows` (starting on a panel: a multiple
    /// of 16) with every activation row of `act`, token-major:
    /// `out[t * rows.len() + i] = W[rows.start + i] · act[t]`.
    pub fn packed_matmul(
        &self,
        w: &PackedWeights,
        rows: Range<usize>,
        act: &QuantizedActivation,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        if out.len() != rows.len() * act.n_rows() {
            return Err(out_shape(out.len(), &rows, act));
        }
        let n = rows.len();
        let mut o = PanelOut::token_major(out, n, act.n_rows());
        self.packed_matmul_into(w, rows, act, &mut o)
    }

    /// [`Self::packed_matmul`] into `o` (row `i` of `o` is weight row
    /// `rows.start + i`).
    pub(crate) fn packed_matmul_into(
        &self,
        w: &PackedWeights,
        rows: Range<usize>,
        act: &QuantizedActivation,
        o: &mut PanelOut<'_>,
    ) -> Result<(), KernelError> {
        let want = ActFormat::for_weight(w.ty).ok_or(KernelError::Unsupported(w.ty))?;
        if act.format() != want || act.n_cols() != w.n_cols {
            return Err(KernelError::Shape(format!(
                "packed {} weights of {} columns need {want:?} activations of that width, got {:?} of {}",
                w.ty,
                w.n_cols,
                act.format(),
                act.n_cols()
            )));
        }
        if !rows.start.is_multiple_of(PANEL_ROWS) || rows.start > rows.end || rows.end > w.n_rows {
            return Err(KernelError::Shape(format!(
                "rows {rows:?} of a packed {}-row matrix (must start on a multiple of 16)",
                w.n_rows
            )));
        }
        check_fits(o, &rows, act)?;
        if rows.is_empty() || act.n_rows() == 0 {
            return Ok(());
        }
        let pb = w.panel_bytes();
        let panels = &w.bytes()[rows.start / PANEL_ROWS * pb..rows.end.div_ceil(PANEL_ROWS) * pb];
        if is_k(w.ty) {
            let nb = w.n_cols / QK_K;
            match self.table.packed_k {
                Some(f) => f(w.ty, panels, nb, rows.len(), act.q8k_all(), o),
                None => packed_k::products(w.ty, panels, nb, rows.len(), act.q8k_all(), o),
            }
            return Ok(());
        }
        let f = self.table.packed.unwrap_or(packed_products);
        f(w.ty, panels, w.n_cols / QK8, rows.len(), act.q8_all(), o);
        Ok(())
    }
}

/// Packs rows `src` of a packed type `ty` (`rb` bytes, `nb` blocks each)
/// into the panels `dst` (`ceil(rows / 16)` panels).
pub(crate) fn pack(ty: GgmlType, src: &[u8], rb: usize, nb: usize, dst: &mut [u8]) {
    let Some(bb) = block_bytes(ty) else { return };
    dst.fill(0);
    let n = src.len() / rb.max(1);
    let wp = weight_part(ty);
    for (p, d) in dst.chunks_exact_mut(nb * bb * PANEL_ROWS).enumerate() {
        let (ds, dw) = d.split_at_mut(nb * 32);
        for r in (0..PANEL_ROWS).take_while(|r| p * PANEL_ROWS + r < n) {
            let row = p * PANEL_ROWS + r;
            for b in 0..nb {
                let x = &src[row * rb + b * bb..row * rb + (b + 1) * bb];
                ds[b * 32 + 2 * r..b * 32 + 2 * r + 2].copy_from_slice(&x[..2]);
                let w = &mut dw[b * wp..(b + 1) * wp];
                match ty {
                    GgmlType::Q8_0 => {
                        for j in 0..QK8 {
                            w[64 * (j / 4) + 4 * r + j % 4] = x[2 + j] ^ 0x80;
                        }
                    }
                    _ => {
                        let qs = if ty == GgmlType::Q5_0 {
                            &x[6..]
                        } else {
                            &x[2..]
                        };
                        for j in 0..16 {
                            w[64 * (j / 4) + 4 * r + j % 4] = qs[j];
                        }
                        if ty == GgmlType::Q5_0 {
                            let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
                            for k in 0..8 {
                                let at = 256 + 8 * k;
                                let mut m =
                                    u64::from_le_bytes(w[at..at + 8].try_into().unwrap_or([0; 8]));
                                m |= u64::from((qh >> (4 * k)) & 0xf) << (4 * r);
                                w[at..at + 8].copy_from_slice(&m.to_le_bytes());
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Unsigned weight `j` (`w + offset(ty)`) of row `r` in a packed block's
/// weight part `w`.
fn packed_weight(ty: GgmlType, w: &[u8], r: usize, j: usize) -> i32 {
    if ty == GgmlType::Q8_0 {
        return i32::from(w[64 * (j / 4) + 4 * r + j % 4]);
    }
    let byte = w[64 * (j % 16 / 4) + 4 * r + j % 4];
    let nib = if j < 16 { byte & 0xf } else { byte >> 4 };
    match ty {
        GgmlType::IQ4NL => i32::from(super::generic::KVALUES_IQ4NL[usize::from(nib)]) + 128,
        GgmlType::Q5_0 => {
            let at = 256 + 8 * (j / 4);
            let mask = u64::from_le_bytes(w[at..at + 8].try_into().unwrap_or([0; 8]));
            i32::from(nib) | (((mask >> (4 * r + j % 4)) & 1) as i32) << 4
        }
        _ => i32::from(nib),
    }
}

/// Products of `n_rows` packed rows of `ty` (`panels`, `nb` blocks per row)
/// with every token of `a` (`nb` blocks each), into `o`.
pub(crate) fn packed_products(
    ty: GgmlType,
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[Q8Block],
    o: &mut PanelOut<'_>,
) {
    let (Some(bb), wp, off) = (block_bytes(ty), weight_part(ty), offset(ty)) else {
        return;
    };
    let n_tok = a.len() / nb.max(1);
    for (p, d) in panels.chunks_exact(nb * bb * PANEL_ROWS).enumerate() {
        let (ds, dw) = d.split_at(nb * 32);
        for r in 0..PANEL_ROWS.min(n_rows.saturating_sub(p * PANEL_ROWS)) {
            for t in 0..n_tok {
                let mut sum = 0.0f32;
                for (b, y) in a[t * nb..(t + 1) * nb].iter().enumerate() {
                    let w = &dw[b * wp..(b + 1) * wp];
                    let mut sumi = -off * y.isum;
                    for (j, q) in y.qs.iter().enumerate() {
                        sumi += packed_weight(ty, w, r, j) * i32::from(*q);
                    }
                    let d = anedvd_quant::f16_to_f32(u16::from_le_bytes([
                        ds[b * 32 + 2 * r],
                        ds[b * 32 + 2 * r + 1],
                    ]));
                    sum = (sumi as f32).mul_add(d * y.d, sum);
                }
                o.put(t, p * PANEL_ROWS + r, &[sum]);
            }
        }
    }
}
