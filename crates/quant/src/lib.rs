//! ggml block formats: scalar reference dequantizers, quantizers and dot
//! products, bit-exact with ggml's `ggml-quants.c`.
//!
//! This crate knows the byte layout of every ggml tensor type in
//! [`GgmlType`] and how to turn rows of them into `f32` (and back, for the
//! types with a reference quantizer). It does not know about tensors, files,
//! shapes beyond one row, threads or SIMD: it is the slow, obviously-correct
//! oracle that optimised kernels are tested against.
//!
//! ```
//! use anedvd_base::GgmlType;
//! let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
//! let mut q = vec![0u8; 34];
//! anedvd_quant::quantize(GgmlType::Q8_0, &x, &mut q).unwrap();
//! let mut y = vec![0.0f32; 32];
//! anedvd_quant::dequantize(GgmlType::Q8_0, &q, &mut y).unwrap();
//! assert!((y[0] + 16.0).abs() < 0.1);
//! let dot = anedvd_quant::vec_dot(GgmlType::Q8_0, &q, &x).unwrap();
//! assert!(dot > 0.0);
//! ```

mod check;
mod dot;
mod float;
mod iq;
mod kquants;
mod kquants_ref;
mod kquants_sym;
mod legacy;
mod mxfp4;
mod q8k;
mod ternary;
mod util;

use anedvd_base::GgmlType;

pub use check::{find_non_finite, NonFinite};
pub use dot::vec_dot;
pub use float::{bf16_to_f32, e8m0_to_f32_half, f16_to_f32, f32_to_bf16, f32_to_f16};
pub use kquants::QK_K;
pub use legacy::BlockQ8_0;
pub use mxfp4::KVALUES_MXFP4;
pub use q8k::BlockQ8K;

/// Errors of the quant layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The type has no implementation for this operation.
    #[error("{0} is not supported by this operation")]
    Unsupported(GgmlType),
    /// Buffer sizes do not match the element count.
    #[error("{ty}: {what}")]
    BadLength {
        /// The type.
        ty: GgmlType,
        /// What was wrong (sizes found and expected).
        what: String,
    },
}

/// A row converter working on already length-checked buffers.
type RowFn<S, D> = fn(&[S], &mut [D]);

/// The non-IQ dequantizer of `ty`, if any.
fn dequant_fn(ty: GgmlType) -> Option<RowFn<u8, f32>> {
    use GgmlType::*;
    Some(match ty {
        F32 => float::dequantize_f32,
        F16 => float::dequantize_f16,
        BF16 => float::dequantize_bf16,
        I8 => float::dequantize_i8,
        I16 => float::dequantize_i16,
        I32 => float::dequantize_i32,
        I64 => float::dequantize_i64,
        F64 => float::dequantize_f64,
        Q4_0 => legacy::dequantize_q4_0,
        Q4_1 => legacy::dequantize_q4_1,
        Q5_0 => legacy::dequantize_q5_0,
        Q5_1 => legacy::dequantize_q5_1,
        Q8_0 => legacy::dequantize_q8_0,
        Q8_1 => legacy::dequantize_q8_1,
        Q2K => kquants::dequantize_q2_k,
        Q3K => kquants::dequantize_q3_k,
        Q4K => kquants::dequantize_q4_k,
        Q5K => kquants::dequantize_q5_k,
        Q6K => kquants::dequantize_q6_k,
        Q8K => kquants::dequantize_q8_k,
        TQ1_0 => ternary::dequantize_tq1_0,
        TQ2_0 => ternary::dequantize_tq2_0,
        MXFP4 => mxfp4::dequantize_mxfp4,
        IQ1S | IQ1M | IQ2XXS | IQ2XS | IQ2S | IQ3XXS | IQ3S | IQ4NL | IQ4XS => return None,
    })
}

/// The reference quantizer of `ty`, if any.
fn quant_fn(ty: GgmlType) -> Option<RowFn<f32, u8>> {
    use GgmlType::*;
    Some(match ty {
        F32 => float::quantize_f32,
        F16 => float::quantize_f16,
        BF16 => float::quantize_bf16,
        Q4_0 => legacy::quantize_q4_0,
        Q4_1 => legacy::quantize_q4_1,
        Q5_0 => legacy::quantize_q5_0,
        Q5_1 => legacy::quantize_q5_1,
        Q8_0 => legacy::quantize_q8_0,
        Q8_1 => legacy::quantize_q8_1,
        Q2K => kquants_ref::quantize_q2_k,
        Q3K => kquants_sym::quantize_q3_k,
        Q4K => kquants_ref::quantize_q4_k,
        Q5K => kquants_ref::quantize_q5_k,
        Q6K => kquants_sym::quantize_q6_k,
        Q8K => q8k::quantize_q8_k,
        TQ1_0 => ternary::quantize_tq1_0,
        TQ2_0 => ternary::quantize_tq2_0,
        MXFP4 => mxfp4::quantize_mxfp4,
        _ => return None,
    })
}

/// True if [`quantize`] implements `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    quant_fn(ty).is_some()
}

/// Checks that `bytes` is exactly the size of `elements` elements of `ty`.
pub(crate) fn check_len(ty: GgmlType, bytes: usize, elements: usize) -> Result<(), Error> {
    let want = ty
        .row_bytes(elements as u64)
        .map_err(|e| Error::BadLength {
            ty,
            what: e.to_string(),
        })?;
    if want != bytes as u64 {
        return Err(Error::BadLength {
            ty,
            what: format!("{bytes} bytes given for {elements} elements, expected {want}"),
        });
    }
    Ok(())
}

/// Dequantizes `dst.len()` elements of type `ty` from `src` into `dst`.
///
/// `src.len()` must be exactly `ty.row_bytes(dst.len())` (so `dst.len()` is a
/// whole number of blocks); otherwise [`Error::BadLength`]. Every type of
/// [`GgmlType`] is supported (integer and f64 types are converted to f32).
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), Error> {
    check_len(ty, src.len(), dst.len())?;
    match dequant_fn(ty) {
        Some(f) => {
            f(src, dst);
            Ok(())
        }
        None => iq::dequantize(ty, src, dst).unwrap_or(Err(Error::Unsupported(ty))),
    }
}

/// Quantizes `src` into `dst` with ggml's reference quantizer for `ty`
/// (`quantize_row_*_ref`, no importance matrix), bit-exactly.
///
/// Implemented for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K,
/// Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, TQ1_0, TQ2_0 and MXFP4 (see [`can_quantize`]); other types give
/// [`Error::Unsupported`]. `dst.len()` must be `ty.row_bytes(src.len())`.
pub fn quantize(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), Error> {
    let f = quant_fn(ty).ok_or(Error::Unsupported(ty))?;
    check_len(ty, dst.len(), src.len())?;
    f(src, dst);
    Ok(())
}

/// `quantize_row_q8_0_ref` into typed blocks; `src.len()` must be `32 * dst.len()`.
pub fn quantize_row_q8_0(src: &[f32], dst: &mut [BlockQ8_0]) -> Result<(), Error> {
    if src.len() != dst.len() * legacy::QK {
        return Err(Error::BadLength {
            ty: GgmlType::Q8_0,
            what: format!("{} values for {} blocks", src.len(), dst.len()),
        });
    }
    for (x, y) in src.chunks_exact(legacy::QK).zip(dst) {
        let mut xa = [0.0f32; legacy::QK];
        xa.copy_from_slice(x);
        *y = BlockQ8_0::quantize(&xa);
    }
    Ok(())
}

/// `quantize_row_q8_K_ref` into typed blocks; `src.len()` must be `256 * dst.len()`.
pub fn quantize_row_q8_k(src: &[f32], dst: &mut [BlockQ8K]) -> Result<(), Error> {
    if src.len() != dst.len() * QK_K {
        return Err(Error::BadLength {
            ty: GgmlType::Q8K,
            what: format!("{} values for {} blocks", src.len(), dst.len()),
        });
    }
    for (x, y) in src.chunks_exact(QK_K).zip(dst) {
        let mut xa = [0.0f32; QK_K];
        xa.copy_from_slice(x);
        *y = BlockQ8K::quantize(&xa);
    }
    Ok(())
}
