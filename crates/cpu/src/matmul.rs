//! Weight matrices used in place from the source bytes: products through the
//! quantized kernels (activations quantized once per input, [`Acts`]) or, for
//! types without a kernel, per-row decoding into thread-local scratch; all
//! parallelized over output rows.

use crate::kernels::{dot, dot_f32_bytes};
use crate::qkernels::{ActFormat, Kernels, PackedWeights, PanelOut, QuantizedActivation};
use anedvd_base::{GgmlType, WeightSource};
use anedvd_graph::{Error, Result};
use rayon::prelude::*;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

thread_local! {
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Decodes one row of `dtype` elements from `src` into `dst` (`dst.len()` elements).
pub fn decode_row(dtype: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), String> {
    match dtype {
        GgmlType::F32 => {
            if src.len() != dst.len() * 4 {
                return Err(format!("{} bytes for {} f32", src.len(), dst.len()));
            }
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            Ok(())
        }
        GgmlType::F16 => {
            if src.len() != dst.len() * 2 {
                return Err(format!("{} bytes for {} f16", src.len(), dst.len()));
            }
            crate::kernels::f16_to_f32(src, dst);
            Ok(())
        }
        GgmlType::BF16 => {
            if src.len() != dst.len() * 2 {
                return Err(format!("{} bytes for {} bf16", src.len(), dst.len()));
            }
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
            }
            Ok(())
        }
        _ => anedvd_quant::dequantize(dtype, src, dst).map_err(|e| e.to_string()),
    }
}

/// A 2-D weight: `n_out` rows of `n_in` elements, read from the source by name.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// Tensor name in the source.
    pub name: String,
    /// Element type.
    pub dtype: GgmlType,
    /// Row length (input width).
    pub n_in: usize,
    /// Number of rows (output width).
    pub n_out: usize,
    /// Bytes per row.
    pub row_bytes: usize,
    /// The quantized kernels, when they implement `dtype` for this width;
    /// `None` keeps the decode-row-then-f32-dot path.
    kernels: Option<Kernels>,
    /// The weights repacked for the kernels at load ([`Matrix::packed`]);
    /// products then read these instead of the source's bytes.
    packed: Option<Arc<PackedWeights>>,
    /// Where this matrix starts in the tensor's bytes (one expert of a
    /// stacked 3-D tensor; 0 for a whole 2-D tensor).
    offset: usize,
}

fn backend_err(tensor: &str, message: impl std::fmt::Display) -> Error {
    Error::Backend {
        backend: "cpu".into(),
        message: format!("tensor {tensor}: {message}"),
    }
}

/// One matrix input quantized once per activation format, shared by every
/// matrix that reads it (q/k/v, gate/up). Buffers persist across calls.
#[derive(Debug, Default)]
pub struct Acts {
    f32: QuantizedActivation,
    q8: QuantizedActivation,
    q8k: QuantizedActivation,
}

impl Acts {
    fn slot(&self, f: ActFormat) -> &QuantizedActivation {
        match f {
            ActFormat::F32 => &self.f32,
            ActFormat::Q8 => &self.q8,
            ActFormat::Q8K => &self.q8k,
        }
    }

    /// Quantizes `x` (`n_tok` rows of `n_in`) once for each format that
    /// `mats` need (matrices without kernels need none).
    pub fn prepare(&mut self, x: &[f32], n_tok: usize, mats: &[&Matrix]) -> Result<()> {
        let mut done = [false; 3];
        for m in mats {
            let Some(f) = m.act_format() else { continue };
            let i = f as usize;
            if done[i] {
                continue;
            }
            done[i] = true;
            let slot = match f {
                ActFormat::F32 => &mut self.f32,
                ActFormat::Q8 => &mut self.q8,
                ActFormat::Q8K => &mut self.q8k,
            };
            slot.quantize(f, &x[..n_tok * m.n_in], m.n_in)
                .map_err(|e| backend_err(&m.name, e))?;
        }
        Ok(())
    }
}

/// Rows per parallel task for a matrix-vector product: eight tasks per
/// thread (so a preempted or late-starting thread does not hold the others
/// up), each a contiguous run of weight rows no longer than ~0.5 MB. Against
/// four tasks of up to 1.5 MB: Llama-3.2-1B-shaped Q4_K_M decode 63.7 ->
/// 65.3 and 65.9 -> 67.2 tok/s (2 threads, Zen 5, medians of 39 alternating
/// 4-token runs in one process).
/// Packed matrices take whole 16-row panels.
fn decode_rows_per_task(m: &Matrix) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let cap = ((1 << 19) / m.row_bytes.max(1)).max(16);
    let per = m.n_out.div_ceil(threads * 8).clamp(16, cap);
    if m.packed.is_some() {
        per.div_ceil(16) * 16
    } else {
        per
    }
}

/// Rows per parallel task for a batched product: multiples of the kernels'
/// 16-row tile, about eight tasks per thread.
fn prefill_rows_per_task(m: &Matrix) -> usize {
    let threads = rayon::current_num_threads().max(1);
    m.n_out.div_ceil(threads * 8).div_ceil(16).clamp(1, 64) * 16
}

impl Matrix {
    /// Describes tensor `name`, checks its size and that row 0 decodes.
    pub fn new(source: &dyn WeightSource, name: &str, kernels: Kernels) -> Result<Self> {
        Self::slice(source, name, None, kernels)
    }

    /// Matrix `index` of the stacked 3-D tensor `name` (`[n_in, n_out,
    /// count]`, GGUF's `ffn_*_exps`), read in place.
    pub fn expert(
        source: &dyn WeightSource,
        name: &str,
        index: usize,
        kernels: Kernels,
    ) -> Result<Self> {
        Self::slice(source, name, Some(index), kernels)
    }

    fn slice(
        source: &dyn WeightSource,
        name: &str,
        index: Option<usize>,
        kernels: Kernels,
    ) -> Result<Self> {
        let t = source
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        let (n_in, n_out, count) = match (t.info.shape.as_slice(), index) {
            ([a, b], None) => (*a as usize, *b as usize, 1),
            ([a, b, c], Some(i)) if (i as u64) < *c => (*a as usize, *b as usize, *c as usize),
            (s, _) => {
                let want = match index {
                    None => "a 2-D tensor".to_string(),
                    Some(i) => format!("a 3-D tensor with matrix {i}"),
                };
                return Err(backend_err(name, format!("expected {want}, found {s:?}")));
            }
        };
        let dtype = t.info.dtype;
        let row_bytes = dtype
            .row_bytes(n_in as u64)
            .map_err(|e| backend_err(name, e))? as usize;
        let total = row_bytes
            .checked_mul(n_out)
            .and_then(|b| b.checked_mul(count));
        if total != Some(t.data.len()) {
            return Err(backend_err(
                name,
                format!(
                    "{} bytes, expected {count} × {n_out} rows of {row_bytes}",
                    t.data.len()
                ),
            ));
        }
        let offset = index.unwrap_or(0) * n_out * row_bytes;
        let fits = ActFormat::for_weight(dtype).is_some_and(|f| n_in.is_multiple_of(f.block()));
        let m = Matrix {
            name: name.to_string(),
            dtype,
            n_in,
            n_out,
            row_bytes,
            kernels: fits.then_some(kernels),
            packed: None,
            offset,
        };
        let mut row = vec![0.0; n_in];
        if n_out > 0 {
            decode_row(m.dtype, &t.data[offset..offset + row_bytes], &mut row).map_err(|_| {
                Error::UnsupportedType {
                    tensor: name.to_string(),
                    dtype: m.dtype,
                    backend: "cpu".into(),
                }
            })?;
        }
        Ok(m)
    }

    /// This matrix with its weights repacked for the kernels, where they
    /// multiply its type faster packed ([`Kernels::packs`]); otherwise
    /// unchanged. The source is told to release its bytes as each part is
    /// packed (a mapped file drops the pages, so the two copies are never
    /// both resident); row lookups ([`Self::row`]) then decode the packed
    /// copy. Reading released bytes stays correct (the pages fault back in),
    /// only slower and larger.
    pub fn packed(mut self, source: &dyn WeightSource) -> Result<Self> {
        let Some(k) = self.kernels.filter(|k| k.packs(self.dtype)) else {
            return Ok(self);
        };
        let data = self.data(source)?;
        let mut p = k
            .new_packed(self.dtype, self.n_out, self.n_in)
            .map_err(|e| backend_err(&self.name, e))?;
        // About 2 MB of rows per job: each is mapped in with one call
        // before packing and released right after (so the file's copy and
        // the packed one are never both resident), and few calls keep the
        // TLB shootdowns of the releases cheap.
        let panels_per_job = ((2 << 20) / p.panel_bytes().max(1)).max(1);
        let (pb, rb, rows_per_job) = (p.panel_bytes(), self.row_bytes, panels_per_job * 16);
        p.panels_mut()
            .par_chunks_mut(panels_per_job * pb)
            .enumerate()
            .try_for_each(|(i, dst)| {
                let r0 = i * rows_per_job;
                let bytes = r0 * rb..((r0 + rows_per_job).min(self.n_out)) * rb;
                let in_tensor = bytes.start + self.offset..bytes.end + self.offset;
                source.will_read(&self.name, in_tensor.clone());
                k.pack_rows(self.dtype, &data[bytes], self.n_in, dst)
                    .map_err(|e| backend_err(&self.name, e))?;
                source.release(&self.name, in_tensor);
                Ok(())
            })?;
        self.packed = Some(Arc::new(p));
        Ok(self)
    }

    /// The activation format this matrix's kernel reads (`None`: plain f32
    /// through the decode-row path).
    pub fn act_format(&self) -> Option<ActFormat> {
        self.kernels.and_then(|_| ActFormat::for_weight(self.dtype))
    }

    fn data<'a>(&self, source: &'a dyn WeightSource) -> Result<&'a [u8]> {
        let len = self.n_out * self.row_bytes;
        source
            .tensor(&self.name)
            .and_then(|t| t.data.get(self.offset..self.offset + len))
            .ok_or_else(|| Error::MissingTensor(self.name.clone()))
    }

    /// Decodes row `r` into `dst` (from the packed copy when there is one,
    /// so the file's released pages stay released).
    pub fn row(&self, source: &dyn WeightSource, r: usize, dst: &mut [f32]) -> Result<()> {
        if let Some(p) = &self.packed {
            return p.decode_row(r, dst).map_err(|e| backend_err(&self.name, e));
        }
        let data = self.data(source)?;
        let start = r * self.row_bytes;
        let bytes = data
            .get(start..start + self.row_bytes)
            .ok_or_else(|| backend_err(&self.name, format!("row {r} out of range")))?;
        decode_row(self.dtype, bytes, dst).map_err(|e| backend_err(&self.name, e))
    }

    /// `out[i] = W[r0 + i] · x` for `out.len()` rows (one token).
    fn rows_vec(
        &self,
        data: &[u8],
        r0: usize,
        x: &[f32],
        acts: &Acts,
        out: &mut [f32],
    ) -> Result<()> {
        let rows = r0..r0 + out.len();
        if let (Some(k), Some(p), Some(f)) = (self.kernels, &self.packed, self.act_format()) {
            return k
                .packed_matmul(p, rows, acts.slot(f), out)
                .map_err(|e| backend_err(&self.name, e));
        }
        if let (Some(k), Some(f)) = (self.kernels, self.act_format()) {
            return k
                .matvec(self.dtype, data, rows, self.n_in, acts.slot(f), out)
                .map_err(|e| backend_err(&self.name, e));
        }
        let rb = self.row_bytes;
        if self.dtype == GgmlType::F32 {
            for (y, r) in out.iter_mut().zip(rows) {
                *y = dot_f32_bytes(&data[r * rb..(r + 1) * rb], x);
            }
            return Ok(());
        }
        ROW.with(|s| {
            let mut s = s.borrow_mut();
            s.resize(self.n_in, 0.0);
            for (y, r) in out.iter_mut().zip(rows) {
                decode_row(self.dtype, &data[r * rb..(r + 1) * rb], &mut s)
                    .map_err(|e| backend_err(&self.name, e))?;
                *y = dot(&s, x);
            }
            Ok(())
        })
    }

    /// True if this matrix's batched products come token-major from the
    /// kernels ([`Kernels::has_token_major`]).
    fn token_major(&self, n_tok: usize) -> bool {
        self.packed.is_some()
            || self
                .kernels
                .is_some_and(|k| k.has_token_major(self.dtype, n_tok))
    }

    /// Products of rows `r0..` with every token, weight-row-major:
    /// `o[(r - r0) * n_tok + t] = W[r] · x[t]` (where
    /// [`Self::token_major`] does not hold).
    fn rows_mat(
        &self,
        data: &[u8],
        r0: usize,
        x: &[f32],
        n_tok: usize,
        acts: &Acts,
        o: &mut [f32],
    ) -> Result<()> {
        let rows = r0..r0 + o.len() / n_tok;
        if let (Some(k), Some(f)) = (self.kernels, self.act_format()) {
            return k
                .matmul(self.dtype, data, rows, self.n_in, acts.slot(f), o)
                .map_err(|e| backend_err(&self.name, e));
        }
        let (n_in, rb) = (self.n_in, self.row_bytes);
        ROW.with(|s| {
            let mut s = s.borrow_mut();
            s.resize(n_in, 0.0);
            for (yr, r) in o.chunks_exact_mut(n_tok).zip(rows) {
                decode_row(self.dtype, &data[r * rb..(r + 1) * rb], &mut s)
                    .map_err(|e| backend_err(&self.name, e))?;
                for (t, y) in yr.iter_mut().enumerate() {
                    *y = dot(&s, &x[t * n_in..(t + 1) * n_in]);
                }
            }
            Ok(())
        })
    }

    /// Products of `rows` with every token, token-major, into `o` (its
    /// row `i` is weight row `rows.start + i`); only where
    /// [`Self::token_major`] holds.
    fn rows_band(
        &self,
        data: &[u8],
        rows: Range<usize>,
        acts: &Acts,
        o: &mut PanelOut<'_>,
    ) -> Result<()> {
        let r = match (self.kernels, &self.packed, self.act_format()) {
            (Some(k), Some(p), Some(f)) => k.packed_matmul_into(p, rows, acts.slot(f), o),
            (Some(k), None, Some(f)) => {
                k.matmul_token_major_into(self.dtype, data, rows, self.n_in, acts.slot(f), o)
            }
            _ => return Err(backend_err(&self.name, "no token-major kernel")),
        };
        r.map_err(|e| backend_err(&self.name, e))
    }

    /// `out[t][o] = sum_i W[o][i] * x[t][i]` for `t < n_tok`. `x` is
    /// `n_tok × n_in`, `out` is `n_tok × n_out`; `acts` must hold `x`
    /// prepared for this matrix ([`Acts::prepare`]); `tmp` is scratch.
    pub fn matmul(
        &self,
        source: &dyn WeightSource,
        x: &[f32],
        n_tok: usize,
        acts: &Acts,
        out: &mut [f32],
        tmp: &mut Vec<f32>,
    ) -> Result<()> {
        matmul_group(source, &mut [(self, out, tmp)], x, n_tok, acts)
    }
}

/// Transposes weight-row-major `tmp` (`n_out × n_tok`) into the block `blk`
/// of token-major output rows starting at token `t0`, in 16 × 16 tiles.
fn transpose_block(tmp: &[f32], n_tok: usize, n_out: usize, t0: usize, blk: &mut [f32]) {
    const TB: usize = TRANSPOSE_TOKENS;
    let nt = blk.len() / n_out;
    for r0 in (0..n_out).step_by(TB) {
        let nr = TB.min(n_out - r0);
        let mut tile = [[0.0f32; TB]; TB];
        for (rr, row) in tile.iter_mut().enumerate().take(nr) {
            let src = &tmp[(r0 + rr) * n_tok + t0..(r0 + rr) * n_tok + t0 + nt];
            // A fixed-size copy when the block is full (inlined, no memmove call).
            match <&[f32; TB]>::try_from(src) {
                Ok(a) => *row = *a,
                Err(_) => row[..nt].copy_from_slice(src),
            }
        }
        for (i, dst) in blk.chunks_exact_mut(n_out).enumerate() {
            for (rr, d) in dst[r0..r0 + nr].iter_mut().enumerate() {
                *d = tile[rr][i];
            }
        }
    }
}

/// Tokens per transposition task.
const TRANSPOSE_TOKENS: usize = 16;

/// `n_tok` tokens through several matrices that read the same input (`x`,
/// prepared in `acts` for all of them): one parallel region for all the
/// products (weight-row-major into each job's scratch, each weight tile read
/// once for all tokens) and one for all the transpositions into `out`.
pub fn matmul_group(
    source: &dyn WeightSource,
    jobs: &mut [(&Matrix, &mut [f32], &mut Vec<f32>)],
    x: &[f32],
    n_tok: usize,
    acts: &Acts,
) -> Result<()> {
    if n_tok == 1 {
        return match jobs {
            [(a, oa, _)] => matvec_group(source, &mut [(*a, &mut **oa)], x, acts),
            [(a, oa, _), (b, ob, _)] => {
                matvec_group(source, &mut [(*a, &mut **oa), (*b, &mut **ob)], x, acts)
            }
            [(a, oa, _), (b, ob, _), (c, oc, _)] => matvec_group(
                source,
                &mut [(*a, &mut **oa), (*b, &mut **ob), (*c, &mut **oc)],
                x,
                acts,
            ),
            _ => Err(Error::InvalidArgument(format!(
                "{} matrices in one group (at most 3)",
                jobs.len()
            ))),
        };
    }
    let mut datas = [&[][..]; 4];
    if jobs.len() > datas.len() {
        return Err(Error::InvalidArgument(format!(
            "{} matrices in one group (at most {})",
            jobs.len(),
            datas.len()
        )));
    }
    // Token-major products go straight into their outputs, one row band
    // per task; the others into `tmp`, transposed afterwards. (Gathering
    // token-major chunks from scratch was 3.6% of a 1B-shaped pp512.)
    let mut tasks = Vec::new();
    for (j, (m, out, tmp)) in jobs.iter_mut().enumerate() {
        let m: &Matrix = m;
        datas[j] = m.data(source)?;
        let (per, len) = (prefill_rows_per_task(m), m.n_out * n_tok);
        let (Some(out), true) = (out.get_mut(..len), x.len() >= n_tok * m.n_in) else {
            return Err(backend_err(
                &m.name,
                format!("{n_tok} tokens do not fit the buffers"),
            ));
        };
        if m.token_major(n_tok) {
            let bands = PanelOut::token_major_bands(out, m.n_out, n_tok, per);
            tasks.extend(bands.map(|(r, o)| (j, m, Task::Band(r, o))));
        } else {
            tmp.resize(len, 0.0);
            let chunks = tmp[..len].chunks_mut(per * n_tok).enumerate();
            tasks.extend(chunks.map(|(c, o)| (j, m, Task::Scratch(c * per, o))));
        }
    }
    tasks
        .into_par_iter()
        .try_for_each(|(j, m, task)| match task {
            Task::Band(rows, mut o) => m.rows_band(datas[j], rows, acts, &mut o),
            Task::Scratch(r0, o) => m.rows_mat(datas[j], r0, &x[..n_tok * m.n_in], n_tok, acts, o),
        })?;
    jobs.par_iter_mut()
        .filter(|(m, ..)| !m.token_major(n_tok))
        .flat_map(|(m, out, tmp)| {
            let n_out = m.n_out;
            let tmp: &[f32] = tmp;
            out[..n_tok * n_out]
                .par_chunks_mut(TRANSPOSE_TOKENS * n_out)
                .enumerate()
                .map(move |(c, blk)| (tmp, n_out, c * TRANSPOSE_TOKENS, blk))
        })
        .for_each(|(tmp, n_out, t0, blk)| transpose_block(tmp, n_tok, n_out, t0, blk));
    Ok(())
}

/// One task of [`matmul_group`]: a band of rows written token-major
/// straight into the output, or the chunk of rows from a first row into
/// scratch.
enum Task<'a> {
    Band(Range<usize>, PanelOut<'a>),
    Scratch(usize, &'a mut [f32]),
}

/// One token through several matrices that read the same input (`x`,
/// prepared in `acts` for all of them) in a single parallel region.
pub fn matvec_group(
    source: &dyn WeightSource,
    jobs: &mut [(&Matrix, &mut [f32])],
    x: &[f32],
    acts: &Acts,
) -> Result<()> {
    let mut datas = [&[][..]; 4];
    if jobs.len() > datas.len() {
        return Err(Error::InvalidArgument(format!(
            "{} matrices in one group (at most {})",
            jobs.len(),
            datas.len()
        )));
    }
    for ((m, _), d) in jobs.iter().zip(datas.iter_mut()) {
        *d = m.data(source)?;
    }
    jobs.par_iter_mut()
        .enumerate()
        .flat_map(|(j, (m, out))| {
            let m: &Matrix = m;
            let per = decode_rows_per_task(m);
            let x = &x[..m.n_in];
            out[..m.n_out]
                .par_chunks_mut(per)
                .enumerate()
                .map(move |(c, o)| (j, m, c * per, x, o))
        })
        .try_for_each(|(j, m, r0, x, o)| m.rows_vec(datas[j], r0, x, acts, o))
}

/// One product of [`matvec_each`]: a matrix, its one-token input (prepared
/// in the `Acts`), and where the result goes.
pub type VecJob<'a> = (&'a Matrix, &'a [f32], &'a Acts, &'a mut [f32]);

/// One token through any number of matrices, each with its own input (the
/// experts of a mixture: every down projection reads its own expert's
/// hidden state), in a single parallel region.
pub fn matvec_each(source: &dyn WeightSource, jobs: &mut [VecJob<'_>]) -> Result<()> {
    let datas = jobs
        .iter()
        .map(|(m, ..)| m.data(source))
        .collect::<Result<Vec<_>>>()?;
    jobs.par_iter_mut()
        .enumerate()
        .flat_map(|(j, (m, x, acts, out))| {
            let m: &Matrix = m;
            let per = decode_rows_per_task(m);
            let (x, acts): (&[f32], &Acts) = (&x[..m.n_in], acts);
            out[..m.n_out]
                .par_chunks_mut(per)
                .enumerate()
                .map(move |(c, o)| (j, m, c * per, x, acts, o))
        })
        .try_for_each(|(j, m, r0, x, acts, o)| m.rows_vec(datas[j], r0, x, acts, o))
}

/// Decodes a whole 1-D tensor to f32 (norm weights, biases).
pub fn vector(source: &dyn WeightSource, name: &str, len: usize) -> Result<Vec<f32>> {
    let t = source
        .tensor(name)
        .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
    if t.info.elements() != len as u64 {
        return Err(Error::Shape {
            tensor: name.to_string(),
            expected: vec![len as u64],
            found: t.info.shape.clone(),
        });
    }
    let mut v = vec![0.0; len];
    decode_row(t.info.dtype, t.data, &mut v).map_err(|e| backend_err(name, e))?;
    Ok(v)
}
