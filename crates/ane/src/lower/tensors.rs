//! Reading decoder weights (any ggml type) as f32 rows and packing them into fp16 weight blobs.

use super::{Error, Result};
use anedvd_base::WeightSource;
use anedvd_mil::blob::{BlobLayout, BlobWriter};

/// The one weight file every lowered program reads.
pub const WEIGHT_PATH: &str = "@model_path/weights/weight.bin";

/// Rows `r0..r1` of the 2-D tensor `name` (ggml shape `[cols, rows]`),
/// dequantized to f32, row-major. Returns `(values, cols)`.
pub fn rows(src: &dyn WeightSource, name: &str, r0: usize, r1: usize) -> Result<(Vec<f32>, usize)> {
    let t = src
        .tensor(name)
        .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
    let bad = |msg: String| Error::Tensor {
        tensor: name.to_string(),
        msg,
    };
    let (cols, n_rows) = match t.info.shape.as_slice() {
        [c, r] => (*c as usize, *r as usize),
        [c] => (*c as usize, 1),
        s => return Err(bad(format!("expected a matrix, shape is {s:?}"))),
    };
    if r0 > r1 || r1 > n_rows {
        return Err(bad(format!("rows {r0}..{r1} of {n_rows}")));
    }
    let rb = t
        .info
        .dtype
        .row_bytes(cols as u64)
        .map_err(|e| bad(e.to_string()))? as usize;
    let bytes = t
        .data
        .get(r0 * rb..r1 * rb)
        .ok_or_else(|| bad(format!("data too short for rows {r0}..{r1}")))?;
    let mut out = vec![0f32; (r1 - r0) * cols];
    anedvd_quant::dequantize(t.info.dtype, bytes, &mut out).map_err(|e| bad(e.to_string()))?;
    Ok((out, cols))
}

/// Every element of tensor `name` (any shape, e.g. a short conv's `[K, D]`
/// or HF's `[K, 1, D]`) as f32 in storage order, checked to be `len`.
pub fn elements(src: &dyn WeightSource, name: &str, len: usize) -> Result<Vec<f32>> {
    let t = src
        .tensor(name)
        .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
    let bad = |msg: String| Error::Tensor {
        tensor: name.to_string(),
        msg,
    };
    if t.info.elements() != len as u64 {
        return Err(bad(format!(
            "expected {len} elements, found {}",
            t.info.elements()
        )));
    }
    let mut out = vec![0f32; len];
    anedvd_quant::dequantize(t.info.dtype, t.data, &mut out).map_err(|e| bad(e.to_string()))?;
    Ok(out)
}

/// The whole 1-D tensor `name` as f32, checked to have `len` elements.
pub fn vector(src: &dyn WeightSource, name: &str, len: usize) -> Result<Vec<f32>> {
    let (v, cols) = rows(src, name, 0, 1)?;
    if cols != len {
        return Err(Error::Tensor {
            tensor: name.to_string(),
            msg: format!("expected {len} elements, found {cols}"),
        });
    }
    Ok(v)
}

/// A weight file under construction plus the byte/element counts that the
/// cost model needs.
pub struct Pack {
    blob: BlobWriter,
    /// Payload bytes written (what the engine streams per dispatch).
    pub bytes: u64,
    /// Elements of conv weights (multiply-accumulates per activation column).
    pub macs: u64,
}

impl Default for Pack {
    fn default() -> Self {
        Self::new()
    }
}

impl Pack {
    /// An empty, coremltools-aligned weight file.
    pub fn new() -> Self {
        Pack {
            blob: BlobWriter::new(BlobLayout::Aligned),
            bytes: 0,
            macs: 0,
        }
    }

    /// Adds a conv weight (`values.len()` = out × in); returns the MIL offset.
    pub fn matrix(&mut self, values: &[f32]) -> u64 {
        self.macs += values.len() as u64;
        self.vector(values)
    }

    /// Adds an int8 conv weight with its per-row fp16 scales; returns the
    /// MIL offsets of the two.
    pub fn int8_matrix(&mut self, q: &[i8], scales: &[half::f16]) -> (u64, u64) {
        self.macs += q.len() as u64;
        self.bytes += q.len() as u64 + 2 * scales.len() as u64;
        (self.blob.add_i8(q), self.blob.add_f16(scales))
    }

    /// Adds a palettized conv weight (`bits`-bit indices, fp16 palettes);
    /// returns the MIL offsets of the two, or `None` for a width the blob
    /// format lacks or an index that does not fit.
    pub fn lut_matrix(
        &mut self,
        indices: &[u8],
        bits: u32,
        palettes: &[half::f16],
    ) -> Option<(u64, u64)> {
        let i = self.blob.add_unsigned(bits, indices)?;
        self.macs += indices.len() as u64;
        self.bytes +=
            (indices.len() as u64 * u64::from(bits)).div_ceil(8) + 2 * palettes.len() as u64;
        Some((i, self.blob.add_f16(palettes)))
    }

    /// Adds a per-channel vector (norm weight, bias); returns the MIL offset.
    pub fn vector(&mut self, values: &[f32]) -> u64 {
        self.bytes += 2 * values.len() as u64;
        self.blob.add_f32_as_f16(values)
    }

    /// The file bytes.
    pub fn finish(self) -> Vec<u8> {
        self.blob.finish()
    }
}
