//! An exact f32 reference for quantized models: the same weights, dequantized.
//!
//! The CPU backend multiplies quantized weights with activations quantized
//! to Q8_0/Q8_K (llama.cpp's semantics), which alone moves logits by 1–3%
//! on the tiny Q8_0 fixtures. The ANE path dequantizes weights to fp16 and
//! keeps fp16 activations, so its error is measured against the CPU backend
//! run over [`dequantized`] weights: the model's exact f32 function.

use anedvd_base::{GgmlType, WeightSource};
use anedvd_graph::{Error, MemorySource, Result};

/// Every tensor of `src` as F32 (F32 tensors copied as they are); no metadata
/// (backends read only tensors).
pub fn dequantized(src: &dyn WeightSource) -> Result<MemorySource> {
    let mut out = MemorySource::new(src.format_name());
    for info in src.tensors() {
        let t = src
            .tensor(&info.name)
            .ok_or_else(|| Error::MissingTensor(info.name.clone()))?;
        if info.dtype == GgmlType::F32 {
            out.insert_raw(&info.name, GgmlType::F32, &info.shape, t.data.to_vec());
            continue;
        }
        let n = usize::try_from(info.shape.iter().product::<u64>())
            .map_err(|_| Error::InvalidProgram(format!("tensor {} is too large", info.name)))?;
        let mut v = vec![0f32; n];
        anedvd_quant::dequantize(info.dtype, t.data, &mut v).map_err(|e| {
            Error::UnsupportedType {
                tensor: format!("{}: {e}", info.name),
                dtype: info.dtype,
                backend: "ane-sim reference".into(),
            }
        })?;
        out.insert_f32(&info.name, &info.shape, &v);
    }
    Ok(out)
}
