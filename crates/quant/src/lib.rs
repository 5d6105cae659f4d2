//! ggml block formats: scalar reference dequantizers and quantizers.
//!
//! Placeholder API (owned by the quant work): `dequantize(ty, src, dst)`.

mod iq;

use anedvd_base::GgmlType;

/// Errors of the quant layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The type has no implementation here.
    #[error("{0} is not supported by this operation")]
    Unsupported(GgmlType),
    /// Buffer sizes do not match the element count.
    #[error("{ty}: {what}")]
    BadLength {
        /// The type.
        ty: GgmlType,
        /// What was wrong.
        what: String,
    },
}

/// Dequantizes `dst.len()` elements of type `ty` from `src` into `dst`.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), Error> {
    iq::dequantize(ty, src, dst).unwrap_or(Err(Error::Unsupported(ty)))
}
