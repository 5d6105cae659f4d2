//! The reference dot product: dequantize a chunk of the weight row, multiply
//! with the activations in f32. The numeric oracle for SIMD kernels.

use crate::{check_len, dequantize, Error};
use anedvd_base::GgmlType;

/// Elements dequantized at a time (a multiple of every block size).
const CHUNK: usize = 256;

/// Dot product of one quantized weight row of type `ty` with `activation`
/// (`activation.len()` elements; `weight_row.len()` must be
/// `ty.row_bytes(activation.len())`).
///
/// Works for every type [`dequantize`] supports. Each chunk of up to 256
/// weights is dequantized into a stack buffer, then products are summed in
/// f32 in element order (`sum += w[i] * a[i]`, no fused multiply-add). No
/// heap allocation.
pub fn vec_dot(ty: GgmlType, weight_row: &[u8], activation: &[f32]) -> Result<f32, Error> {
    check_len(ty, weight_row.len(), activation.len())?;
    let block = ty.block_size() as usize;
    let block_bytes = ty.block_bytes() as usize;
    let mut buf = [0.0f32; CHUNK];
    let mut sum = 0.0f32;
    let mut offset = 0;
    for a in activation.chunks(CHUNK) {
        let bytes = a.len() / block * block_bytes;
        let w = &mut buf[..a.len()];
        dequantize(ty, &weight_row[offset..offset + bytes], w)?;
        offset += bytes;
        for (&wi, &ai) in w.iter().zip(a) {
            sum += wi * ai;
        }
    }
    Ok(sum)
}
