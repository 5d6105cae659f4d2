//! Weight matrices used in place from the source bytes: per-row decoding into
//! thread-local scratch, and matrix products parallelized over output rows.

use crate::kernels::{dot, dot_f32_bytes};
use anedvd_base::{GgmlType, WeightSource};
use anedvd_graph::{Error, Result};
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static HALF: RefCell<Vec<half::f16>> = const { RefCell::new(Vec::new()) };
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
            // Gather into f16 scratch, then one bulk conversion (uses F16C
            // when the CPU has it; per-element `to_f32` would not).
            HALF.with(|h| {
                let mut h = h.borrow_mut();
                h.clear();
                h.extend(
                    src.chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]])),
                );
                h.convert_to_f32_slice(dst);
            });
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
}

fn backend_err(tensor: &str, message: impl std::fmt::Display) -> Error {
    Error::Backend {
        backend: "cpu".into(),
        message: format!("tensor {tensor}: {message}"),
    }
}

impl Matrix {
    /// Describes tensor `name`, checks its size and that row 0 decodes.
    pub fn new(source: &dyn WeightSource, name: &str) -> Result<Self> {
        let t = source
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        let (n_in, n_out) = match t.info.shape.as_slice() {
            [a, b] => (*a as usize, *b as usize),
            s => {
                return Err(backend_err(
                    name,
                    format!("expected a 2-D tensor, found {s:?}"),
                ));
            }
        };
        let row_bytes = t
            .info
            .dtype
            .row_bytes(n_in as u64)
            .map_err(|e| backend_err(name, e))? as usize;
        if row_bytes.checked_mul(n_out) != Some(t.data.len()) {
            return Err(backend_err(
                name,
                format!(
                    "{} bytes, expected {n_out} rows of {row_bytes}",
                    t.data.len()
                ),
            ));
        }
        let m = Matrix {
            name: name.to_string(),
            dtype: t.info.dtype,
            n_in,
            n_out,
            row_bytes,
        };
        let mut row = vec![0.0; n_in];
        if n_out > 0 {
            decode_row(m.dtype, &t.data[..row_bytes], &mut row).map_err(|_| {
                Error::UnsupportedType {
                    tensor: name.to_string(),
                    dtype: m.dtype,
                    backend: "cpu".into(),
                }
            })?;
        }
        Ok(m)
    }

    fn data<'a>(&self, source: &'a dyn WeightSource) -> Result<&'a [u8]> {
        source
            .tensor(&self.name)
            .map(|t| t.data)
            .ok_or_else(|| Error::MissingTensor(self.name.clone()))
    }

    /// Decodes row `r` into `dst`.
    pub fn row(&self, source: &dyn WeightSource, r: usize, dst: &mut [f32]) -> Result<()> {
        let data = self.data(source)?;
        let start = r * self.row_bytes;
        let bytes = data
            .get(start..start + self.row_bytes)
            .ok_or_else(|| backend_err(&self.name, format!("row {r} out of range")))?;
        decode_row(self.dtype, bytes, dst).map_err(|e| backend_err(&self.name, e))
    }

    /// `out[t][o] = sum_i W[o][i] * x[t][i]` for `t < n_tok`. `x` is
    /// `n_tok × n_in`, `out` is `n_tok × n_out`; `tmp` is scratch.
    pub fn matmul(
        &self,
        source: &dyn WeightSource,
        x: &[f32],
        n_tok: usize,
        out: &mut [f32],
        tmp: &mut Vec<f32>,
    ) -> Result<()> {
        let data = self.data(source)?;
        let (n_in, rb) = (self.n_in, self.row_bytes);
        let x = &x[..n_tok * n_in];
        let rows_per_task = (self.n_out / (rayon::current_num_threads() * 8)).clamp(1, 256);
        let fail = |e: String| backend_err(&self.name, e);
        if n_tok == 1 {
            let out = &mut out[..self.n_out];
            return out
                .par_chunks_mut(rows_per_task)
                .enumerate()
                .try_for_each(|(c, o)| {
                    let r0 = c * rows_per_task;
                    if self.dtype == GgmlType::F32 {
                        for (k, y) in o.iter_mut().enumerate() {
                            let r = r0 + k;
                            *y = dot_f32_bytes(&data[r * rb..(r + 1) * rb], x);
                        }
                        return Ok(());
                    }
                    ROW.with(|s| {
                        let mut s = s.borrow_mut();
                        s.resize(n_in, 0.0);
                        for (k, y) in o.iter_mut().enumerate() {
                            let r = r0 + k;
                            decode_row(self.dtype, &data[r * rb..(r + 1) * rb], &mut s)
                                .map_err(fail)?;
                            *y = dot(&s, x);
                        }
                        Ok(())
                    })
                });
        }
        // Several tokens: decode each weight row once and use it for every token.
        tmp.resize(self.n_out * n_tok, 0.0);
        tmp.par_chunks_mut(rows_per_task * n_tok)
            .enumerate()
            .try_for_each(|(c, o)| {
                let r0 = c * rows_per_task;
                ROW.with(|s| {
                    let mut s = s.borrow_mut();
                    s.resize(n_in, 0.0);
                    for (k, yr) in o.chunks_exact_mut(n_tok).enumerate() {
                        let r = r0 + k;
                        decode_row(self.dtype, &data[r * rb..(r + 1) * rb], &mut s)
                            .map_err(fail)?;
                        for (t, y) in yr.iter_mut().enumerate() {
                            *y = dot(&s, &x[t * n_in..(t + 1) * n_in]);
                        }
                    }
                    Ok(())
                })
            })?;
        let n_out = self.n_out;
        out[..n_tok * n_out]
            .par_chunks_mut(n_out)
            .enumerate()
            .for_each(|(t, row)| {
                for (o, y) in row.iter_mut().enumerate() {
                    *y = tmp[o * n_tok + t];
                }
            });
        Ok(())
    }
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
