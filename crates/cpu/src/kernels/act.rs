//! Activation rows quantized once per matrix product (Q8_0/Q8_1 or Q8_K, as
//! ggml's `vec_dot_type`), reused against every weight row.

use anedvd_base::GgmlType;
use anedvd_quant::{f16_to_f32, f32_to_f16, BlockQ8K, BlockQ8_0, QK_K};
use rayon::prelude::*;

/// Elements per Q8_0 / Q8_1 block.
pub const QK8: usize = 32;

/// One Q8_0/Q8_1 activation block, unpacked for the kernels.
///
/// `d` and `s` hold exactly the f16 values ggml stores (`block_q8_1`), widened
/// to f32 once here instead of once per weight row.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct Q8Block {
    /// Scale: element `j` is `d * qs[j]` (an f16 value).
    pub d: f32,
    /// `f16(d_unrounded * sum(qs))`, ggml's `block_q8_1::s` (used by Q4_1/Q5_1).
    pub s: f32,
    /// `sum(qs)`, for kernels that offset the weights to unsigned bytes.
    pub isum: i32,
    /// The quants, in `[-127, 127]`.
    pub qs: [i8; QK8],
}

impl Q8Block {
    /// An all-zero block.
    pub const ZERO: Self = Self {
        d: 0.0,
        s: 0.0,
        isum: 0,
        qs: [0; QK8],
    };

    /// `quantize_row_q8_1_ref` for one block (its `qs` and `d` are also
    /// exactly `quantize_row_q8_0_ref`'s).
    pub fn quantize(x: &[f32; QK8]) -> Self {
        let b = BlockQ8_0::quantize(x);
        // Same fold as the reference (C's MAX, so NaN handling matches).
        let amax = x
            .iter()
            .fold(0.0f32, |a, &v| if a > v.abs() { a } else { v.abs() });
        let d = amax / 127.0;
        let sum: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
        Self {
            d: f16_to_f32(b.d),
            s: f16_to_f32(f32_to_f16(sum as f32 * d)),
            isum: sum,
            qs: b.qs,
        }
    }
}

/// Values above which [`quantize_blocks`] splits the work across threads
/// (prefill batches; a decode row stays on the calling thread).
const PAR_MIN_VALUES: usize = 16 * 1024;

/// Quantizes each `N`-value chunk of `x` into the matching block of `dst`
/// with `q` (a row quantizer: `dst.len()` blocks from as many chunks), in
/// parallel chunks of blocks when `x` is large. Every block is computed the
/// same way either way, so the result does not depend on the split.
fn quantize_blocks<B: Send, const N: usize>(x: &[f32], dst: &mut [B], q: fn(&[f32], &mut [B])) {
    if x.len() < PAR_MIN_VALUES {
        return q(x, dst);
    }
    let per = (PAR_MIN_VALUES / 4 / N).max(1);
    dst.par_chunks_mut(per)
        .zip(x.par_chunks(per * N))
        .for_each(|(d, c)| q(c, d));
}

/// Applies a block quantizer to every `N`-value chunk of `x`.
fn each_block<B, const N: usize>(x: &[f32], dst: &mut [B], q: impl Fn(&[f32; N]) -> B) {
    for (b, c) in dst.iter_mut().zip(x.chunks_exact(N)) {
        let mut a = [0.0f32; N];
        a.copy_from_slice(c);
        *b = q(&a);
    }
}

/// [`Q8Block::quantize`] over a row.
fn q8_row_scalar(x: &[f32], dst: &mut [Q8Block]) {
    each_block(x, dst, Q8Block::quantize);
}

/// [`BlockQ8K::quantize`] over a row.
fn q8k_row_scalar(x: &[f32], dst: &mut [BlockQ8K]) {
    each_block(x, dst, BlockQ8K::quantize);
}

/// A row quantizer of each activation format.
type Quantizers = (fn(&[f32], &mut [Q8Block]), fn(&[f32], &mut [BlockQ8K]));

/// The fastest row quantizers this CPU runs, detected once; every one is
/// bit for bit the scalar [`Q8Block::quantize`] / [`BlockQ8K::quantize`].
fn quantizers() -> Quantizers {
    static Q: std::sync::OnceLock<Quantizers> = std::sync::OnceLock::new();
    *Q.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if let Some(q) = super::x86_64::quantizers() {
            return q;
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(q) = super::aarch64::neon_quant::quantizers() {
            return q;
        }
        (q8_row_scalar, q8k_row_scalar)
    })
}

/// Which activation encoding a weight type's kernel consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActFormat {
    /// Plain f32 (F32, F16, BF16 weights).
    F32,
    /// [`Q8Block`]s of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL weights).
    Q8,
    /// [`BlockQ8K`]s of 256 (Q2_K..Q6_K, IQ4_XS weights).
    Q8K,
}

impl ActFormat {
    /// The activation format for weights of type `ty`, or `None` when the
    /// kernels do not implement `ty`.
    pub fn for_weight(ty: GgmlType) -> Option<Self> {
        use GgmlType::*;
        Some(match ty {
            F32 | F16 | BF16 => Self::F32,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4NL => Self::Q8,
            Q2K | Q3K | Q4K | Q5K | Q6K | IQ4XS => Self::Q8K,
            _ => return None,
        })
    }

    /// Elements per activation block.
    pub fn block(self) -> usize {
        match self {
            Self::F32 => 1,
            Self::Q8 => QK8,
            Self::Q8K => QK_K,
        }
    }
}

/// `n_rows` activation rows of `n_cols` values, quantized for one
/// [`ActFormat`]. Buffers are kept between calls to
/// [`quantize`](Self::quantize), so one value per thread/session never
/// reallocates in steady state.
#[derive(Debug, Clone)]
pub struct QuantizedActivation {
    format: ActFormat,
    n_rows: usize,
    n_cols: usize,
    f32s: Vec<f32>,
    q8: Vec<Q8Block>,
    q8k: Vec<BlockQ8K>,
}

impl Default for QuantizedActivation {
    fn default() -> Self {
        Self::new()
    }
}

impl QuantizedActivation {
    /// An empty activation (0 rows).
    pub fn new() -> Self {
        Self {
            format: ActFormat::F32,
            n_rows: 0,
            n_cols: 0,
            f32s: Vec::new(),
            q8: Vec::new(),
            q8k: Vec::new(),
        }
    }

    /// Quantizes `x` (`x.len() / n_cols` rows of `n_cols` values) to `format`,
    /// reusing this value's buffers. Errors when `n_cols` is zero, not a whole
    /// number of `format` blocks, or does not divide `x.len()`.
    pub fn quantize(
        &mut self,
        format: ActFormat,
        x: &[f32],
        n_cols: usize,
    ) -> Result<(), super::KernelError> {
        let block = format.block();
        if n_cols == 0 || !n_cols.is_multiple_of(block) || !x.len().is_multiple_of(n_cols) {
            return Err(super::KernelError::Shape(format!(
                "{} activation values in rows of {n_cols} ({format:?} blocks of {block})",
                x.len()
            )));
        }
        self.format = format;
        self.n_cols = n_cols;
        self.n_rows = x.len() / n_cols;
        match format {
            ActFormat::F32 => {
                self.f32s.clear();
                self.f32s.extend_from_slice(x);
            }
            ActFormat::Q8 => {
                self.q8.clear();
                self.q8.resize(x.len() / QK8, Q8Block::ZERO);
                quantize_blocks::<_, QK8>(x, &mut self.q8, quantizers().0);
            }
            ActFormat::Q8K => {
                self.q8k.clear();
                self.q8k.resize(x.len() / QK_K, BlockQ8K::ZERO);
                quantize_blocks::<_, QK_K>(x, &mut self.q8k, quantizers().1);
            }
        }
        Ok(())
    }

    /// Quantizes for weights of type `ty` (see [`ActFormat::for_weight`]).
    pub fn quantize_for(
        &mut self,
        ty: GgmlType,
        x: &[f32],
        n_cols: usize,
    ) -> Result<(), super::KernelError> {
        let format = ActFormat::for_weight(ty).ok_or(super::KernelError::Unsupported(ty))?;
        self.quantize(format, x, n_cols)
    }

    /// The format of the current contents.
    pub fn format(&self) -> ActFormat {
        self.format
    }

    /// Number of rows.
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Values per row.
    pub fn n_cols(&self) -> usize {
        self.n_cols
    }

    /// Row `t` as f32 (format [`ActFormat::F32`]; empty otherwise).
    pub fn f32_row(&self, t: usize) -> &[f32] {
        self.f32s
            .get(t * self.n_cols..(t + 1) * self.n_cols)
            .unwrap_or(&[])
    }

    /// Row `t` as Q8 blocks (format [`ActFormat::Q8`]; empty otherwise).
    pub fn q8_row(&self, t: usize) -> &[Q8Block] {
        let nb = self.n_cols / QK8;
        self.q8.get(t * nb..(t + 1) * nb).unwrap_or(&[])
    }

    /// Every row's Q8 blocks, back to back (format [`ActFormat::Q8`];
    /// empty otherwise).
    pub(crate) fn q8_all(&self) -> &[Q8Block] {
        self.q8
            .get(..self.n_rows * (self.n_cols / QK8))
            .unwrap_or(&[])
    }

    /// Every row's Q8_K blocks, back to back (format [`ActFormat::Q8K`];
    /// empty otherwise).
    pub(crate) fn q8k_all(&self) -> &[BlockQ8K] {
        self.q8k
            .get(..self.n_rows * (self.n_cols / QK_K))
            .unwrap_or(&[])
    }

    /// Row `t` as Q8_K blocks (format [`ActFormat::Q8K`]; empty otherwise).
    pub fn q8k_row(&self, t: usize) -> &[BlockQ8K] {
        let nb = self.n_cols / QK_K;
        self.q8k.get(t * nb..(t + 1) * nb).unwrap_or(&[])
    }
}
