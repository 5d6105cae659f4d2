//! Quantized matrix-vector kernels: integer-domain dot products of ggml
//! weight rows with activations quantized once per row (Q8_0/Q8_1 or Q8_K,
//! as ggml's `vec_dot_type`), a scalar twin for every kernel
//! ([`generic`], ports of ggml's `ggml_vec_dot_*_generic`) and SIMD variants
//! (x86-64: AVX2, AVX-512 with and without VNNI; aarch64: NEON, NEON with
//! dotprod) chosen once at start-up by run-time CPU detection into a table
//! of function pointers.
//!
//! This module knows ggml block layouts and SIMD; it knows nothing of
//! tensors, graphs or threads: the caller splits output rows across threads
//! and passes each thread its [`Range`] of rows. `std::arch` and
//! `#[target_feature]` appear only under `kernels/x86_64` and
//! `kernels/aarch64`, the only modules allowed `unsafe`.
//!
//! | weights | activation | x86-64 | aarch64 |
//! |---|---|---|---|
//! | Q8_0, Q4_0, Q5_0, IQ4_NL | Q8 | AVX2, AVX-512 (2 blocks/register); packed at load (AVX2, AVX-512 VNNI): 16-row panels; unpacked prefill: AVX2 4-token (8-row panels for Q4_0, Q5_0), AVX-512 16-row panels | NEON (dotprod `sdot` where detected); prefill: NEON and dotprod 4-token, i8mm 4-row panels |
//! | Q4_1, Q5_1 | Q8 (with `s`) | AVX2 | NEON |
//! | Q4_K, Q5_K, Q6_K | Q8_K | AVX2, AVX-512; prefill (Q4_K, Q6_K): AVX2 and AVX-512 4-token, AVX2 8-row and AVX-512 16-row panels | NEON (Q4_K, Q6_K also dotprod `sdot` where detected); prefill (Q4_K, Q6_K): NEON and dotprod 4-token, i8mm 4-row panels |
//! | Q2_K, Q3_K, IQ4_XS | Q8_K | AVX2 | NEON |
//! | F32, F16, BF16 | f32 | AVX2 | NEON |
//! | f16 KV rows (attention: `axpy_f16`, weighted sums, multi-query dots) | f32 | AVX2, AVX-512 | NEON |
//!
//! Activation quantization (Q8, Q8_K) has AVX-512, AVX2 and NEON versions; the
//! gated activation and the attention score exponentiation AVX-512, AVX2
//! (`x86_64/act.rs`, one algorithm over both widths) and NEON ones; all bit
//! for bit the scalar ones.
//!
//! Prefill batches of at least `PANEL_MIN_TOKENS` tokens go through panel
//! kernels where the table has them: each call's weight rows are unpacked
//! to unsigned bytes and interleaved 16 rows (AVX-512) or 8 rows (AVX2) per
//! 4-weight chunk, so one `vpdpbusd` (or `vpmaddubsw` + `vpmaddwd`) with
//! four broadcast activation bytes advances every row of the panel (lane =
//! row). On aarch64 with i8mm the rows stay signed and are interleaved in
//! pairs per 8 weights, the activations likewise in token pairs, so one
//! `smmla` advances a 2-row × 2-token tile (`aarch64/neon_panel.rs`). On
//! AVX-512 VNNI and on AVX2 the legacy types (Q8_0, Q4_0, Q5_0, IQ4_NL),
//! Q4_K and Q6_K are instead packed once at load into that layout
//! ([`PackedWeights`], `packed.rs`, `packed_k.rs`; the packed copy is the
//! file's size) and every product of theirs, single-token too, reads the
//! packed panels (AVX2: each 64-byte register as two 8-row halves,
//! `x86_64/avx2_packed.rs`, `x86_64/avx2_packed_k.rs`).
//!
//! # How to call it from a matvec loop
//!
//! ```
//! use anedvd_base::GgmlType;
//! use anedvd_cpu::qkernels::{Kernels, QuantizedActivation};
//! # fn main() -> Result<(), anedvd_cpu::qkernels::KernelError> {
//! let k = Kernels::detect(); // once, at start-up; `Kernels` is `Copy`
//! let (n_rows, n_cols) = (4, 64);
//! // Some Q8_0 weight bytes (`n_rows` rows of `GgmlType::Q8_0.row_bytes(n_cols)`).
//! let x: Vec<f32> = (0..n_cols).map(|i| (i as f32 * 0.3).sin()).collect();
//! let mut weight = vec![0u8; n_rows * 68];
//! for r in weight.chunks_exact_mut(68) {
//!     anedvd_quant::quantize(GgmlType::Q8_0, &x, r).unwrap();
//! }
//! // Once per activation (per token), shared by every thread / weight row:
//! let mut act = QuantizedActivation::new();
//! act.quantize_for(GgmlType::Q8_0, &x, n_cols)?;
//! // Each thread: its own row range and output slice.
//! let mut out = vec![0.0f32; 2];
//! k.matvec(GgmlType::Q8_0, &weight, 2..4, n_cols, &act, &mut out)?;
//! assert!((out[0] - x.iter().map(|v| v * v).sum::<f32>()).abs() < 0.1);
//! # Ok(()) }
//! ```
//!
//! For prefill, quantize all `n_tok` activation rows into one
//! [`QuantizedActivation`] and call [`Kernels::matmul`]; its output is
//! weight-row-major (`out[(r - rows.start) * n_tok + t]`), the layout of the
//! existing `tmp` buffer in `matmul.rs`. Quantize with the same weight type
//! (or the same [`ActFormat`]) as the matrix: Q/K projections of different
//! types need separate activations (at most three: [`ActFormat::F32`],
//! [`ActFormat::Q8`], [`ActFormat::Q8K`]).
//!
//! # Wiring it into `Matrix::matmul` (crates/cpu/src/matmul.rs)
//!
//! Keep one `Kernels::detect()` in the compiled model (or a `OnceLock`), and
//! in `Matrix::matmul`, when [`Kernels::supports`]`(self.dtype)`, replace the
//! decode-row-then-f32-dot loops with:
//!
//! ```ignore
//! let mut act = QuantizedActivation::new(); // better: reuse one per session
//! act.quantize_for(self.dtype, x, n_in).map_err(|e| backend_err(&self.name, e))?;
//! if n_tok == 1 {
//!     out[..self.n_out].par_chunks_mut(rows_per_task).enumerate().try_for_each(|(c, o)| {
//!         let r0 = c * rows_per_task;
//!         kernels.matvec(self.dtype, data, r0..r0 + o.len(), n_in, &act, o)
//!             .map_err(|e| backend_err(&self.name, e))
//!     })
//! } else {
//!     tmp.resize(self.n_out * n_tok, 0.0);
//!     tmp.par_chunks_mut(rows_per_task * n_tok).enumerate().try_for_each(|(c, o)| {
//!         let r0 = c * rows_per_task;
//!         kernels.matmul(self.dtype, data, r0..r0 + o.len() / n_tok, n_in, &act, o)
//!             .map_err(|e| backend_err(&self.name, e))
//!     })?;
//!     // ...then the existing transpose of `tmp` into `out`.
//! }
//! ```
//!
//! Types without a kernel (IQ1/IQ2/IQ3, TQ, MXFP4) keep the `decode_row`
//! path. `ANEDVD_KERNELS=generic|avx2|avx512|neon|neon-dotprod` caps the detected ISA for A/B
//! runs.

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod act;
mod arena;
pub mod generic;
mod packed;
mod packed_k;
mod panel_out;
#[cfg(target_arch = "x86_64")]
mod x86_64;

pub use act::{ActFormat, Q8Block, QuantizedActivation, QK8};
pub use packed::PackedWeights;
pub(crate) use panel_out::PanelOut;

use anedvd_base::GgmlType;
use anedvd_quant::{BlockQ8K, QK_K};
use std::ops::Range;

/// Rows of the KV cache the f16 attention kernels (AVX2, AVX-512 and NEON)
/// prefetch ahead of the one being read. Gemma 3 270M decode at depth 32000
/// (2 threads, Zen 5; `anedvd bench -p 0 -n 128 -d 32000`, alternating
/// runs, AVX-512) went from 72-84 tok/s without to 76-80 with 8 rows, 81-94
/// with 24 and 80-84 with 48; with `--isa avx2`, 64.4-67.0 without and
/// 70.0-76.6 with 24 (four alternating pairs). NEON takes the same
/// distance, not timed on ARM.
const KV_PREFETCH_ROWS: usize = 24;

/// Rows of V the f16 weighted sums (AVX2, AVX-512 and NEON) take per block, every
/// column strip of a block before the next (a strip at a time over all rows
/// read each row's cache lines in as many strided passes as there are
/// strips). Gemma 3 270M decode at depth 32000 (2 threads, Zen 5, AVX-512,
/// medians of 29 alternating 4-token runs in one process): 98-101 tok/s
/// unblocked; blocks of 4 / 8 / 16 / 32 / 128 / 256 rows: 131 / 138 / 123 /
/// 117 / 124 / 125. NEON takes the same block, not timed on ARM.
const WSUM_BLOCK_ROWS: usize = 8;

/// Errors of the kernels (shapes are checked before any SIMD code runs).
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// No kernel for this weight type.
    #[error("no CPU kernel for {0}")]
    Unsupported(GgmlType),
    /// Mismatched sizes (weight bytes, row range, activation, output).
    #[error("shape: {0}")]
    Shape(String),
}

/// Row loop over Q8-activation weights: `out[i] = dot(w[i*rb..], a)`.
pub(crate) type RowsQ8 = fn(&[u8], usize, &[Q8Block], &mut [f32]);
/// Row loop over Q8_K-activation weights.
pub(crate) type RowsQ8K = fn(&[u8], usize, &[BlockQ8K], &mut [f32]);
/// Row loop over f32-activation weights.
pub(crate) type RowsF32 = fn(&[u8], usize, &[f32], &mut [f32]);
/// Row loop over Q8-activation weights against four activation rows:
/// `out[4 * i + t] = dot(w[i*rb..], a[t])`.
pub(crate) type Rows4Q8 = fn(&[u8], usize, [&[Q8Block]; 4], &mut [f32]);
/// [`Rows4Q8`] for Q8_K activations.
pub(crate) type Rows4Q8K = fn(&[u8], usize, [&[BlockQ8K]; 4], &mut [f32]);
/// Legacy-type (32-weight block) product of every row of `w` (`rb` bytes
/// each) with every token of `a` (`nb` blocks each, tokens back to back) on
/// repacked weight panels: `out[r * n_tok + t] = W[r] · a[t]`.
pub(crate) type PanelQ8 = fn(&[u8], usize, &[Q8Block], usize, &mut PanelOut<'_>, &mut PanelScratch);

/// Packs whole weight rows of a type (`rb` bytes, `nb` blocks each) into
/// panels of a [`PackedWeights`] (see `packed`).
pub(crate) type PackFn = fn(GgmlType, &[u8], usize, usize, &mut [u8]);
/// Products of `n_rows` packed rows of a type (whole panels, `nb` blocks
/// per row) with every token of the activations, into a [`PanelOut`].
pub(crate) type PackedQ8 = fn(GgmlType, &[u8], usize, usize, &[Q8Block], &mut PanelOut<'_>);
/// [`PackedQ8`] for the packed K-quant types (Q8_K activations).
pub(crate) type PackedQ8K = fn(GgmlType, &[u8], usize, usize, &[BlockQ8K], &mut PanelOut<'_>);

/// [`PanelQ8`] for the Q8_K-activation types.
pub(crate) type PanelQ8K =
    fn(&[u8], usize, &[BlockQ8K], usize, &mut PanelOut<'_>, &mut PanelScratch);

impl PanelOut<'_> {
    /// `(n_rows, n_tok)` of a panel product: `w_len` bytes of weight rows
    /// `rb` bytes apart, each holding at least `row_min` bytes of blocks,
    /// against `n_act` activation blocks, `nb` per token. `None` (nothing
    /// to compute) when a shape is empty or ragged, or when the result
    /// does not fit this output.
    pub(crate) fn dims(
        &self,
        w_len: usize,
        rb: usize,
        row_min: usize,
        n_act: usize,
        nb: usize,
    ) -> Option<(usize, usize)> {
        if rb == 0 || nb == 0 || rb < row_min {
            return None;
        }
        let (n_rows, n_tok) = (w_len / rb, n_act / nb);
        (n_rows > 0 && n_tok > 0 && self.fits(n_rows, n_tok)).then_some((n_rows, n_tok))
    }
}

/// An error unless `rows` x `act`'s rows fit the output `o`.
pub(crate) fn check_fits(
    o: &PanelOut<'_>,
    rows: &Range<usize>,
    act: &QuantizedActivation,
) -> Result<(), KernelError> {
    if o.fits(rows.len(), act.n_rows()) {
        return Ok(());
    }
    Err(KernelError::Shape(format!(
        "{} rows x {} activations do not fit the output",
        rows.len(),
        act.n_rows()
    )))
}

/// The error for an output of `len` values that is not `rows` x `act`'s rows.
pub(crate) fn out_shape(len: usize, rows: &Range<usize>, act: &QuantizedActivation) -> KernelError {
    KernelError::Shape(format!(
        "output of {len} for {} rows x {} activations",
        rows.len(),
        act.n_rows()
    ))
}

/// Scratch for [`PanelQ8`] kernels: the repacked weights and their scales
/// (only x86-64 and aarch64 have panel kernels, hence the allowance
/// elsewhere).
#[derive(Default)]
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) struct PanelScratch {
    /// Weight bytes: x86-64 unsigned, 16 (or 8) rows interleaved per
    /// 4-weight chunk; aarch64 signed, row pairs interleaved per 8 weights.
    pub wq: Vec<u8>,
    /// Block scales, one per row of a panel (aarch64: per lane of a tile).
    pub ws: Vec<f32>,
    /// Per-row integer block data (K-quant sub-block scales), one per row
    /// of a panel (aarch64: per lane of a tile).
    pub wi: Vec<i32>,
    /// aarch64: one token chunk's activation quants, token pairs
    /// interleaved per 8 bytes (the `smmla` operand layout).
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    pub aq: Vec<i8>,
}

thread_local! {
    static PANEL_SCRATCH: std::cell::RefCell<PanelScratch> =
        std::cell::RefCell::new(PanelScratch::default());
}

/// Fewest tokens for which [`PanelQ8`] kernels (which repack the weights
/// once per call, a [`PANEL_ROW_CHUNK`] of rows at a time) beat the
/// four-token kernels. Measured on Gemma 3 270M batched decode (its Q4_K
/// and Q6_K matrices; the legacy types are packed at load): from 4 tokens
/// the panels win (x4 ~415 -> ~470 t/s, x6 ~500 -> ~595), at 2 and 3 they
/// lose (x2 ~340 -> ~280).
const PANEL_MIN_TOKENS: usize = 4;

/// Weight rows repacked at a time by the panel kernels (a multiple of 16):
/// a few hundred KiB of repacked weights, which stay in L2 while every
/// token of the call passes over them.
const PANEL_ROW_CHUNK: usize = 128;

/// `gate = act(gate) * up`, element-wise (see [`crate::kernels::gated`]).
pub(crate) type GatedFn = fn(anedvd_graph::Activation, &mut [f32], &[f32]);

/// The SIMD gated activation this CPU runs, if any (detected once; bit for
/// bit the scalar one): AVX-512 where detected, NEON on every aarch64.
pub(crate) fn simd_gated() -> Option<GatedFn> {
    static F: std::sync::OnceLock<Option<GatedFn>> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            x86_64::gated_fn()
        }
        #[cfg(target_arch = "aarch64")]
        {
            Some(aarch64::neon_act::gated as GatedFn)
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        None
    })
}

/// See [`crate::kernels::exp_scores`].
pub(crate) type ExpScoresFn = fn(&mut [f32], f32, Option<f32>) -> (f32, f32);

/// The SIMD attention score exponentiation this CPU runs, if any.
pub(crate) fn simd_exp_scores() -> Option<ExpScoresFn> {
    static F: std::sync::OnceLock<Option<ExpScoresFn>> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            x86_64::exp_scores_fn()
        }
        #[cfg(target_arch = "aarch64")]
        {
            Some(aarch64::neon_act::exp_scores as ExpScoresFn)
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        None
    })
}

/// See [`crate::kernels::exp_shifted_add`].
pub(crate) type ExpShiftedAddFn = fn(&mut [f32], &[f32], &mut [f32]);

/// The SIMD online-softmax row step this CPU runs, if any (x86-64 with
/// AVX-512 or AVX2: elsewhere the scalar loop vectorizes at full width).
pub(crate) fn simd_exp_shifted_add() -> Option<ExpShiftedAddFn> {
    static F: std::sync::OnceLock<Option<ExpShiftedAddFn>> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            x86_64::exp_shifted_add_fn()
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    })
}

/// See [`crate::kernels::f16_to_f32`].
pub(crate) type F16ToF32Fn = fn(&[u8], &mut [f32]);

/// The SIMD f16 conversion this CPU runs, if any (x86-64 with F16C).
pub(crate) fn simd_f16_to_f32() -> Option<F16ToF32Fn> {
    static F: std::sync::OnceLock<Option<F16ToF32Fn>> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            x86_64::f16_to_f32_fn()
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    })
}

/// `y += a * x` with `x` little-endian f16 bytes.
pub(crate) type AxpyF16 = fn(&mut [f32], f32, &[u8]);
/// `out[i] = sum_j p[j] * v[j * stride + 2i]` (f16 rows), lengths checked.
pub(crate) type WsumF16 = fn(&[u8], usize, &[f32], &mut [f32]);
/// Dot products of f16 rows with several queries, each row decoded once:
/// `out[g * n + j] = dot_f16(w[j * stride..], q[g * hd..(g + 1) * hd])`
/// with `n_q` queries (`hd = q.len() / n_q`, `n = out.len() / n_q`). The
/// caller guarantees `w` holds `n` rows of at least `2 * hd` bytes.
pub(crate) type DotF16Multi = fn(&[u8], usize, &[f32], usize, &mut [f32]);
/// Weighted sums of the same f16 rows with several weight vectors, each row
/// decoded once: `out[g * hd + i] = sum_j p[g * len + j] * f16(row_j[i])`
/// with `row_j` at byte `j * stride` of `w`, `n_q` weight vectors,
/// `len = p.len() / n_q` and `hd = out.len() / n_q`. The caller guarantees
/// `w` holds `len` rows of at least `2 * hd` bytes.
pub(crate) type WsumF16Multi = fn(&[u8], usize, &[f32], usize, &mut [f32]);
/// A small f32 matrix product accumulated into `c`; see
/// [`generic::gemm_f32`] (the caller has checked the extents).
pub(crate) type GemmF32 =
    fn(&[f32], (usize, usize), &[f32], usize, &mut [f32], usize, (usize, usize, usize));

/// The per-type row loops of one instruction set.
#[derive(Clone, Copy)]
pub(crate) struct Table {
    pub q4_0: RowsQ8,
    pub q4_1: RowsQ8,
    pub q5_0: RowsQ8,
    pub q5_1: RowsQ8,
    pub q8_0: RowsQ8,
    pub iq4_nl: RowsQ8,
    pub q2_k: RowsQ8K,
    pub q3_k: RowsQ8K,
    pub q4_k: RowsQ8K,
    pub q5_k: RowsQ8K,
    pub q6_k: RowsQ8K,
    pub iq4_xs: RowsQ8K,
    pub f32: RowsF32,
    pub f16: RowsF32,
    pub bf16: RowsF32,
    /// Four-token row loops ([`Kernels::matmul`]), for the types that have
    /// no panel kernel in the table: both serve batches of four or more
    /// tokens and the panel is tried first, so a type with one never
    /// reaches these.
    pub x4_q4_0: Option<Rows4Q8>,
    pub x4_q5_0: Option<Rows4Q8>,
    pub x4_q8_0: Option<Rows4Q8>,
    pub x4_iq4_nl: Option<Rows4Q8>,
    pub x4_q4_k: Option<Rows4Q8K>,
    pub x4_q6_k: Option<Rows4Q8K>,
    pub panel_q4_0: Option<PanelQ8>,
    pub panel_q5_0: Option<PanelQ8>,
    pub panel_q8_0: Option<PanelQ8>,
    pub panel_iq4_nl: Option<PanelQ8>,
    pub panel_q4_k: Option<PanelQ8K>,
    pub panel_q6_k: Option<PanelQ8K>,
    /// The legacy types into the packed layout (every table; SIMD where it
    /// has one).
    pub pack: PackFn,
    /// Packed products; `Some` only where they beat the file layout (the
    /// table then asks for packing at load, [`Kernels::packs`]).
    pub packed: Option<PackedQ8>,
    /// Packed Q4_K and Q6_K products; `Some` where they beat the file
    /// layout.
    pub packed_k: Option<PackedQ8K>,
    /// False where packed Q6_K streams from memory slower than the file
    /// layout (AVX-512 VNNI on Zen 5, see `packing.rs`), so only a model
    /// that fits the last-level cache packs it.
    pub packed_q6_k_streams: bool,
    pub axpy_f16: AxpyF16,
    pub wsum_f16: WsumF16,
    pub dot_f16_multi: DotF16Multi,
    pub wsum_f16_multi: WsumF16Multi,
    /// f32 tile products for tiled attention; `Some` where a SIMD version
    /// exists (the scalar twin is the reference, not a fallback: without it
    /// attention keeps its per-query path).
    pub gemm_f32: Option<GemmF32>,
}

impl Table {
    const GENERIC: Table = Table {
        q4_0: generic::rows_q4_0,
        q4_1: generic::rows_q4_1,
        q5_0: generic::rows_q5_0,
        q5_1: generic::rows_q5_1,
        q8_0: generic::rows_q8_0,
        iq4_nl: generic::rows_iq4_nl,
        q2_k: generic::rows_q2_k,
        q3_k: generic::rows_q3_k,
        q4_k: generic::rows_q4_k,
        q5_k: generic::rows_q5_k,
        q6_k: generic::rows_q6_k,
        iq4_xs: generic::rows_iq4_xs,
        f32: generic::rows_f32,
        f16: generic::rows_f16,
        bf16: generic::rows_bf16,
        x4_q4_0: None,
        x4_q5_0: None,
        x4_q8_0: None,
        x4_iq4_nl: None,
        x4_q4_k: None,
        x4_q6_k: None,
        panel_q4_0: None,
        panel_q5_0: None,
        panel_q8_0: None,
        panel_iq4_nl: None,
        panel_q4_k: None,
        panel_q6_k: None,
        pack: packed::pack,
        packed: None,
        packed_k: None,
        packed_q6_k_streams: true,
        axpy_f16: generic::axpy_f16,
        wsum_f16: generic::wsum_f16,
        dot_f16_multi: generic::dot_f16_multi,
        wsum_f16_multi: generic::wsum_f16_multi,
        gemm_f32: None,
    };
}

/// One row loop, by activation format.
enum Entry {
    Q8(RowsQ8),
    Q8K(RowsQ8K),
    F32(RowsF32),
}

/// One four-row loop, by activation format.
#[derive(Clone, Copy)]
enum Entry4 {
    Q8(Rows4Q8),
    Q8K(Rows4Q8K),
}

/// Weight rows processed per tile in [`Kernels::matmul`] (a tile stays in
/// L1/L2 while every activation row passes over it).
const MATMUL_TILE: usize = 16;

/// The most capable instruction set the CPU backend may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsaCap {
    /// Whatever the CPU has (AVX-512 VNNI, AVX-512, AVX2; NEON with i8mm,
    /// with dotprod, plain).
    #[default]
    Best,
    /// AVX-512 without VNNI at most.
    Avx512,
    /// AVX2 at most.
    Avx2,
    /// NEON with dotprod (no i8mm panels) at most.
    NeonDotprod,
    /// Plain NEON at most.
    Neon,
    /// The scalar twins only.
    Generic,
}

impl IsaCap {
    /// Every cap, most capable first per architecture.
    pub const ALL: [IsaCap; 6] = [
        IsaCap::Best,
        IsaCap::Avx512,
        IsaCap::Avx2,
        IsaCap::NeonDotprod,
        IsaCap::Neon,
        IsaCap::Generic,
    ];

    /// `best`, `avx512`, `avx2`, `neon-dotprod`, `neon` or `generic`.
    pub fn name(self) -> &'static str {
        match self {
            IsaCap::Best => "best",
            IsaCap::Avx512 => "avx512",
            IsaCap::Avx2 => "avx2",
            IsaCap::NeonDotprod => "neon-dotprod",
            IsaCap::Neon => "neon",
            IsaCap::Generic => "generic",
        }
    }

    /// Parses [`IsaCap::name`].
    pub fn from_name(s: &str) -> Option<IsaCap> {
        IsaCap::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The `ANEDVD_KERNELS` override, if set to a known name.
    pub fn from_env() -> Option<IsaCap> {
        std::env::var("ANEDVD_KERNELS")
            .ok()
            .and_then(|v| IsaCap::from_name(&v))
    }
}

/// A dispatch table of kernels for one instruction set, chosen once.
#[derive(Clone, Copy)]
pub struct Kernels {
    name: &'static str,
    table: Table,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernels({})", self.name)
    }
}

impl Kernels {
    /// The scalar twins only (any CPU).
    pub fn generic() -> Self {
        Self {
            name: "generic",
            table: Table::GENERIC,
        }
    }

    /// AVX2 + FMA + F16C kernels, if this CPU has them.
    pub fn avx2() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            x86_64::avx2_table().map(|table| Self {
                name: "avx2",
                table,
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// AVX-512 F/BW/VL kernels with VNNI, if this CPU has them (tuned for
    /// Zen 4 on Zen 4).
    pub fn avx512() -> Option<Self> {
        Self::x86_avx512(true)
    }

    /// AVX-512 F/BW/VL kernels without VNNI (`vpmaddubsw` + `vpmaddwd`), if
    /// this CPU has AVX-512 F/BW/VL.
    pub fn avx512_without_vnni() -> Option<Self> {
        Self::x86_avx512(false)
    }

    #[allow(unused_variables)]
    fn x86_avx512(vnni: bool) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            x86_64::avx512_table(vnni).map(|(name, table)| Self { name, table })
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// The AVX-512 VNNI tuning [`Self::avx512`] does not pick on this CPU
    /// (the Zen 4 one elsewhere, the plain one on Zen 4).
    fn avx512_other_tuning() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            x86_64::avx512_vnni_other_tuning().map(|(name, table)| Self { name, table })
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// NEON kernels (aarch64 only; every aarch64 CPU has NEON).
    pub fn neon() -> Option<Self> {
        #[cfg(target_arch = "aarch64")]
        {
            aarch64::neon_table().map(|table| Self {
                name: "neon",
                table,
            })
        }
        #[cfg(not(target_arch = "aarch64"))]
        None
    }

    /// NEON kernels with `sdot` integer dots, if this CPU has the dotprod
    /// extension (aarch64 only).
    pub fn neon_dotprod() -> Option<Self> {
        #[cfg(target_arch = "aarch64")]
        {
            aarch64::neon_dotprod_table().map(|table| Self {
                name: "neon-dotprod",
                table,
            })
        }
        #[cfg(not(target_arch = "aarch64"))]
        None
    }

    /// The dotprod kernels plus the i8mm (`smmla`) prefill panels (aarch64
    /// CPUs with dotprod and i8mm, detected at run time).
    pub fn neon_i8mm() -> Option<Self> {
        #[cfg(target_arch = "aarch64")]
        {
            aarch64::neon_i8mm_table().map(|table| Self {
                name: "neon-i8mm",
                table,
            })
        }
        #[cfg(not(target_arch = "aarch64"))]
        None
    }

    /// The best kernels this CPU runs: AVX-512 with VNNI, else AVX-512,
    /// else AVX2 (x86-64); NEON with dotprod and i8mm, else with dotprod,
    /// else NEON (aarch64); else generic.
    /// `ANEDVD_KERNELS=generic|avx2|avx512|neon|neon-dotprod`
    /// caps the choice (an override for A/B runs; [`IsaCap`] is the option).
    pub fn detect() -> Self {
        Self::capped(IsaCap::from_env().unwrap_or(IsaCap::Best))
    }

    /// The best kernels this CPU runs at or below `cap`.
    pub fn capped(cap: IsaCap) -> Self {
        let order: &[fn() -> Option<Self>] = match cap {
            IsaCap::Generic => &[],
            IsaCap::Avx2 => &[Self::avx2],
            IsaCap::Avx512 => &[Self::avx512_without_vnni, Self::avx2],
            IsaCap::NeonDotprod => &[Self::neon_dotprod, Self::neon],
            IsaCap::Neon => &[Self::neon],
            IsaCap::Best => &[
                Self::avx512,
                Self::avx512_without_vnni,
                Self::avx2,
                Self::neon_i8mm,
                Self::neon_dotprod,
                Self::neon,
            ],
        };
        order.iter().find_map(|f| f()).unwrap_or_else(Self::generic)
    }

    /// Every table this CPU runs, generic first (for tests and benchmarks;
    /// on AVX-512 VNNI both tunings, the one [`Self::detect`] picks first).
    pub fn available() -> Vec<Self> {
        let mut v = vec![Self::generic()];
        v.extend(Self::neon());
        v.extend(Self::neon_dotprod());
        v.extend(Self::neon_i8mm());
        v.extend(Self::avx2());
        v.extend(Self::avx512_without_vnni());
        v.extend(Self::avx512());
        v.extend(Self::avx512_other_tuning());
        v
    }

    /// The instruction set's name (`generic`, `avx2`, `avx512`, `avx512vnni`,
    /// `avx512vnni-zen4`, `neon`, `neon-dotprod`, `neon-i8mm`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// True if weights of type `ty` have a kernel.
    pub fn supports(ty: GgmlType) -> bool {
        ActFormat::for_weight(ty).is_some()
    }

    fn entry(&self, ty: GgmlType) -> Result<Entry, KernelError> {
        use GgmlType::*;
        let t = &self.table;
        Ok(match ty {
            Q4_0 => Entry::Q8(t.q4_0),
            Q4_1 => Entry::Q8(t.q4_1),
            Q5_0 => Entry::Q8(t.q5_0),
            Q5_1 => Entry::Q8(t.q5_1),
            Q8_0 => Entry::Q8(t.q8_0),
            IQ4NL => Entry::Q8(t.iq4_nl),
            Q2K => Entry::Q8K(t.q2_k),
            Q3K => Entry::Q8K(t.q3_k),
            Q4K => Entry::Q8K(t.q4_k),
            Q5K => Entry::Q8K(t.q5_k),
            Q6K => Entry::Q8K(t.q6_k),
            IQ4XS => Entry::Q8K(t.iq4_xs),
            F32 => Entry::F32(t.f32),
            F16 => Entry::F32(t.f16),
            BF16 => Entry::F32(t.bf16),
            _ => return Err(KernelError::Unsupported(ty)),
        })
    }

    /// The four-activation-row loop of `ty`, if this table has one.
    fn entry4(&self, ty: GgmlType) -> Option<Entry4> {
        let t = &self.table;
        match ty {
            GgmlType::Q4_0 => t.x4_q4_0.map(Entry4::Q8),
            GgmlType::Q5_0 => t.x4_q5_0.map(Entry4::Q8),
            GgmlType::Q8_0 => t.x4_q8_0.map(Entry4::Q8),
            GgmlType::IQ4NL => t.x4_iq4_nl.map(Entry4::Q8),
            GgmlType::Q4K => t.x4_q4_k.map(Entry4::Q8K),
            GgmlType::Q6K => t.x4_q6_k.map(Entry4::Q8K),
            _ => None,
        }
    }

    /// The panel kernel of `ty`, if this table has one.
    fn panel(&self, ty: GgmlType) -> Option<PanelQ8> {
        let t = &self.table;
        match ty {
            GgmlType::Q4_0 => t.panel_q4_0,
            GgmlType::Q5_0 => t.panel_q5_0,
            GgmlType::Q8_0 => t.panel_q8_0,
            GgmlType::IQ4NL => t.panel_iq4_nl,
            _ => None,
        }
    }

    /// The Q8_K panel kernel of `ty`, if this table has one.
    fn panel_k(&self, ty: GgmlType) -> Option<PanelQ8K> {
        let t = &self.table;
        match ty {
            GgmlType::Q4K => t.panel_q4_k,
            GgmlType::Q6K => t.panel_q6_k,
            _ => None,
        }
    }

    /// Checks shapes; returns the row length in bytes.
    fn check(
        ty: GgmlType,
        weight: &[u8],
        rows: &Range<usize>,
        n_cols: usize,
        act: &QuantizedActivation,
        out_len: usize,
    ) -> Result<usize, KernelError> {
        let rb = Self::check_inputs(ty, weight, rows, n_cols, act)?;
        if out_len != rows.len() * act.n_rows() {
            return Err(out_shape(out_len, rows, act));
        }
        Ok(rb)
    }

    /// [`Self::check`] without the output: the row bytes of `ty`.
    fn check_inputs(
        ty: GgmlType,
        weight: &[u8],
        rows: &Range<usize>,
        n_cols: usize,
        act: &QuantizedActivation,
    ) -> Result<usize, KernelError> {
        let want = ActFormat::for_weight(ty).ok_or(KernelError::Unsupported(ty))?;
        if act.format() != want || act.n_cols() != n_cols {
            return Err(KernelError::Shape(format!(
                "{ty} weights of {n_cols} columns need {want:?} activations of {n_cols}, got {:?} of {}",
                act.format(),
                act.n_cols()
            )));
        }
        let rb = ty
            .row_bytes(n_cols as u64)
            .map_err(|e| KernelError::Shape(e.to_string()))? as usize;
        let end = rows.end.checked_mul(rb);
        if rows.start > rows.end || end.is_none_or(|e| e > weight.len()) {
            return Err(KernelError::Shape(format!(
                "rows {rows:?} of {rb} bytes in a {}-byte weight",
                weight.len()
            )));
        }
        Ok(rb)
    }

    /// `out[i] = W[rows.start + i] · act[0]` for the weight rows `rows` of
    /// an `n_cols`-wide matrix of type `ty` (`weight` holds the whole matrix
    /// or at least its first `rows.end` rows). `act` must hold one row
    /// quantized for `ty`; `out.len()` must be `rows.len()`.
    pub fn matvec(
        &self,
        ty: GgmlType,
        weight: &[u8],
        rows: Range<usize>,
        n_cols: usize,
        act: &QuantizedActivation,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        if act.n_rows() != 1 {
            return Err(KernelError::Shape(format!(
                "matvec takes 1 activation row, got {}",
                act.n_rows()
            )));
        }
        let rb = Self::check(ty, weight, &rows, n_cols, act, out.len())?;
        let w = &weight[rows.start * rb..rows.end * rb];
        match self.entry(ty)? {
            Entry::Q8(f) => f(w, rb, act.q8_row(0), out),
            Entry::Q8K(f) => f(w, rb, act.q8k_row(0), out),
            Entry::F32(f) => f(w, rb, act.f32_row(0), out),
        }
        Ok(())
    }

    /// Dot products of f16 rows with `a` for the attention kernels:
    /// `out[i] = sum_k f16(w[i * stride + 2k..]) * a[k]` over the first
    /// `min(stride / 2, a.len())` elements of each row. `w` holds
    /// `out.len()` rows of `stride` bytes (the last may be short but must
    /// hold `2 * a.len()` bytes); extra rows in `w` are ignored.
    pub fn dot_f16_rows(&self, w: &[u8], stride: usize, a: &[f32], out: &mut [f32]) {
        if stride == 0 || out.is_empty() {
            return;
        }
        let n = out.len();
        let full = (w.len() / stride).min(n);
        (self.table.f16)(&w[..full * stride], stride, a, &mut out[..full]);
        // A short last row (strided head layouts end before a full stride).
        if full < n {
            let tail = &w[full * stride..];
            (self.table.f16)(tail, tail.len(), a, &mut out[full..full + 1]);
            out[full + 1..].fill(0.0);
        }
    }

    /// [`Self::dot_f16_rows`] for `n_q` queries at once (row-major in `q`,
    /// `q.len() / n_q` wide) over the same rows, each row decoded from f16
    /// once for all queries: `out[g * n + j]` (with `n = out.len() / n_q`)
    /// is the dot of row `j` with query `g`. When `w` does not hold `n` full
    /// rows this falls back to [`Self::dot_f16_rows`] per query.
    pub fn dot_f16_rows_multi(
        &self,
        w: &[u8],
        stride: usize,
        q: &[f32],
        n_q: usize,
        out: &mut [f32],
    ) {
        if n_q == 0 || stride == 0 || out.is_empty() {
            return;
        }
        let (hd, n) = (q.len() / n_q, out.len() / n_q);
        let full = stride >= 2 * hd
            && n > 0
            && (n - 1)
                .checked_mul(stride)
                .and_then(|x| x.checked_add(2 * hd))
                .is_some_and(|end| end <= w.len());
        if full {
            (self.table.dot_f16_multi)(w, stride, &q[..n_q * hd], n_q, &mut out[..n_q * n]);
        } else {
            for (qg, o) in q
                .chunks_exact(hd.max(1))
                .zip(out.chunks_exact_mut(n.max(1)))
            {
                self.dot_f16_rows(w, stride, qg, o);
            }
        }
    }

    /// Weighted sum of f16 rows (attention's probabilities times values):
    /// `out[i] = sum_j p[j] * f16(v[j * stride + 2i..])`, accumulated in
    /// `j` order from zero (the same sums as repeated [`Self::axpy_f16`]).
    /// Rows that `v` does not hold in full (`out.len()` values) are left
    /// out, as are weights beyond them.
    pub fn weighted_sum_f16(&self, v: &[u8], stride: usize, p: &[f32], out: &mut [f32]) {
        let need = 2 * out.len();
        let have = match v.len().checked_sub(need) {
            Some(r) if stride > 0 => r / stride + 1,
            Some(_) => 1,
            None => 0,
        };
        (self.table.wsum_f16)(v, stride, &p[..p.len().min(have)], out);
    }

    /// [`Self::weighted_sum_f16`] for `n_q` weight vectors at once
    /// (row-major in `p`, `p.len() / n_q` long) over the same rows, each row
    /// decoded from f16 once for all of them: `out[g * hd..(g + 1) * hd]`
    /// (with `hd = out.len() / n_q`) is the sum for weight vector `g`
    /// (rounding may differ from [`Self::weighted_sum_f16`]). When `v` does not hold every
    /// row in full this falls back to [`Self::weighted_sum_f16`] per vector.
    pub fn weighted_sum_f16_multi(
        &self,
        v: &[u8],
        stride: usize,
        p: &[f32],
        n_q: usize,
        out: &mut [f32],
    ) {
        if n_q == 0 || out.is_empty() {
            return;
        }
        let (len, hd) = (p.len() / n_q, out.len() / n_q);
        let full = stride >= 2 * hd
            && len
                .checked_sub(1)
                .and_then(|l| l.checked_mul(stride))
                .and_then(|x| x.checked_add(2 * hd))
                .is_some_and(|end| end <= v.len());
        if full && len > 0 {
            (self.table.wsum_f16_multi)(v, stride, &p[..n_q * len], n_q, &mut out[..n_q * hd]);
        } else {
            for (pg, o) in p
                .chunks_exact(len.max(1))
                .zip(out.chunks_exact_mut(hd.max(1)))
            {
                self.weighted_sum_f16(v, stride, &pg[..len], o);
            }
        }
    }

    /// True if this table has a SIMD [`Self::gemm_f32`] (tiled attention
    /// is used only then).
    pub fn has_gemm_f32(&self) -> bool {
        self.table.gemm_f32.is_some()
    }

    /// `c[i * ldc + j] += sum_p a[i * rs + p * cs] * b[p * ldb + j]` for
    /// `i < m`, `p < k`, `j < n` (fused multiply-adds in `p` order, the same
    /// bits on every table; the scalar twin where there is no SIMD one).
    /// Errors, touching nothing, when a slice is too short for the extents.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_f32(
        &self,
        a: &[f32],
        a_strides: (usize, usize),
        b: &[f32],
        ldb: usize,
        c: &mut [f32],
        ldc: usize,
        (m, k, n): (usize, usize, usize),
    ) -> Result<(), KernelError> {
        if m == 0 || n == 0 || k == 0 {
            return Ok(());
        }
        let (rs, cs) = a_strides;
        // Index one past the last element each operand reads, if it fits.
        let end = |terms: &[(usize, usize)], last: usize| {
            terms.iter().try_fold(last, |acc, &(count, stride)| {
                count.checked_sub(1)?.checked_mul(stride)?.checked_add(acc)
            })
        };
        let a_end = end(&[(m, rs), (k, cs)], 1);
        let b_end = end(&[(k, ldb)], n);
        let c_end = end(&[(m, ldc)], n);
        let fits = |e: Option<usize>, len: usize| e.is_some_and(|e| e <= len);
        if !(fits(a_end, a.len()) && fits(b_end, b.len()) && fits(c_end, c.len()))
            || (k > 1 && n > ldb)
            || (m > 1 && n > ldc)
        {
            return Err(KernelError::Shape(format!(
                "gemm {m}x{k}x{n}: a {} (strides {rs}, {cs}), b {} (ld {ldb}), c {} (ld {ldc})",
                a.len(),
                b.len(),
                c.len()
            )));
        }
        let f = self.table.gemm_f32.unwrap_or(generic::gemm_f32);
        f(a, a_strides, b, ldb, c, ldc, (m, k, n));
        Ok(())
    }

    /// `y += a * x`, `x` little-endian f16 bytes (`2 * y.len()` of them,
    /// or fewer: the shorter length wins).
    pub fn axpy_f16(&self, y: &mut [f32], a: f32, x: &[u8]) {
        (self.table.axpy_f16)(y, a, x);
    }

    /// True if [`Self::matmul_token_major`] takes `ty` with `n_tok`
    /// activation rows (this table has a panel kernel for `ty` and the batch
    /// is large enough for it).
    pub fn has_token_major(&self, ty: GgmlType, n_tok: usize) -> bool {
        n_tok >= PANEL_MIN_TOKENS && (self.panel(ty).is_some() || self.panel_k(ty).is_some())
    }

    /// [`Self::matmul`] with a token-major result: `out[t * rows.len() + i]
    /// = W[rows.start + i] · act[t]`. Only where [`Self::has_token_major`]
    /// holds; otherwise an error (and `out` untouched).
    pub fn matmul_token_major(
        &self,
        ty: GgmlType,
        weight: &[u8],
        rows: Range<usize>,
        n_cols: usize,
        act: &QuantizedActivation,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        if out.len() != rows.len() * act.n_rows() {
            return Err(out_shape(out.len(), &rows, act));
        }
        let n = rows.len();
        let mut o = PanelOut::token_major(out, n, act.n_rows());
        self.matmul_token_major_into(ty, weight, rows, n_cols, act, &mut o)
    }

    /// [`Self::matmul_token_major`] into `o` (row `i` of `o` is weight row
    /// `rows.start + i`).
    pub(crate) fn matmul_token_major_into(
        &self,
        ty: GgmlType,
        weight: &[u8],
        rows: Range<usize>,
        n_cols: usize,
        act: &QuantizedActivation,
        o: &mut PanelOut<'_>,
    ) -> Result<(), KernelError> {
        let rb = Self::check_inputs(ty, weight, &rows, n_cols, act)?;
        check_fits(o, &rows, act)?;
        if rows.is_empty() {
            return Ok(());
        }
        let w = &weight[rows.start * rb..rows.end * rb];
        if self.has_token_major(ty, act.n_rows()) && self.run_panel(ty, w, rb, n_cols, act, o) {
            return Ok(());
        }
        Err(KernelError::Unsupported(ty))
    }

    /// Runs the panel kernel of `ty` on the rows `w` if there is one and the
    /// batch is large enough; false (nothing written) otherwise.
    fn run_panel(
        &self,
        ty: GgmlType,
        w: &[u8],
        rb: usize,
        n_cols: usize,
        act: &QuantizedActivation,
        o: &mut PanelOut<'_>,
    ) -> bool {
        let n_tok = act.n_rows();
        if n_tok < PANEL_MIN_TOKENS || rb == 0 {
            return false;
        }
        let (f8, fk) = (self.panel(ty), self.panel_k(ty));
        if f8.is_none() && fk.is_none() {
            return false;
        }
        // Rows are repacked and used a chunk at a time, so the repacked
        // copy stays in L2 while every token passes over it (one big copy
        // of a large matrix went to DRAM and back, and was zeroed first).
        for (ci, chunk) in w.chunks(PANEL_ROW_CHUNK * rb).enumerate() {
            let r0 = ci * PANEL_ROW_CHUNK;
            let n = chunk.len() / rb;
            let mut part = o.band(r0, n);
            PANEL_SCRATCH.with(|s| {
                let sc = &mut s.borrow_mut();
                match (f8, fk) {
                    (Some(f), _) => f(chunk, rb, act.q8_all(), n_cols / QK8, &mut part, sc),
                    (None, Some(f)) => f(chunk, rb, act.q8k_all(), n_cols / QK_K, &mut part, sc),
                    (None, None) => {}
                }
            });
        }
        true
    }

    /// Every activation row of `act` against the weight rows `rows`:
    /// `out[(r - rows.start) * n_tok + t] = W[r] · act[t]` with
    /// `n_tok = act.n_rows()` (weight-row-major). Weight rows are taken in
    /// tiles of 16 so each tile is read from memory once for all tokens;
    /// batches of four or more tokens go to the type's panel kernel where
    /// the table has one, else to its four-row kernel where it has that
    /// (AVX2: Q8_0, IQ4_NL; NEON with dotprod and without i8mm: Q4_0,
    /// Q5_0, Q8_0, IQ4_NL, Q4_K, Q6_K), which unpacks each weight block once
    /// per four tokens.
    pub fn matmul(
        &self,
        ty: GgmlType,
        weight: &[u8],
        rows: Range<usize>,
        n_cols: usize,
        act: &QuantizedActivation,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        let rb = Self::check(ty, weight, &rows, n_cols, act, out.len())?;
        let n_tok = act.n_rows();
        if n_tok == 0 || rows.is_empty() {
            return Ok(());
        }
        let entry = self.entry(ty)?;
        let entry4 = self.entry4(ty);
        let w = &weight[rows.start * rb..rows.end * rb];
        if self.run_panel(
            ty,
            w,
            rb,
            n_cols,
            act,
            &mut PanelOut::row_major(out, rows.len(), n_tok),
        ) {
            return Ok(());
        }
        let mut tmp = [0.0f32; 4 * MATMUL_TILE];
        for (tile, o) in w
            .chunks(MATMUL_TILE * rb)
            .zip(out.chunks_mut(MATMUL_TILE * n_tok))
        {
            let n = tile.len() / rb;
            let mut t = 0;
            if let Some(f4) = entry4 {
                // Four tokens per pass: each weight block is unpacked once.
                while t + 4 <= n_tok {
                    let toks = [t, t + 1, t + 2, t + 3];
                    let y = &mut tmp[..4 * n];
                    match f4 {
                        Entry4::Q8(f) => f(tile, rb, toks.map(|i| act.q8_row(i)), y),
                        Entry4::Q8K(f) => f(tile, rb, toks.map(|i| act.q8k_row(i)), y),
                    }
                    for (i, v) in y.chunks_exact(4).enumerate() {
                        o[i * n_tok + t..i * n_tok + t + 4].copy_from_slice(v);
                    }
                    t += 4;
                }
            }
            for t in t..n_tok {
                let y = &mut tmp[..n];
                match entry {
                    Entry::Q8(f) => f(tile, rb, act.q8_row(t), y),
                    Entry::Q8K(f) => f(tile, rb, act.q8k_row(t), y),
                    Entry::F32(f) => f(tile, rb, act.f32_row(t), y),
                }
                for (i, v) in y.iter().enumerate() {
                    o[i * n_tok + t] = *v;
                }
            }
        }
        Ok(())
    }
}
