//! The i-quant family (IQ1_S ... IQ4_XS): grid tables and dequantizers.

use crate::Error;
use anedvd_base::GgmlType;

/// Dequantizes an i-quant type; `None` if `ty` is not an i-quant.
pub(crate) fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Option<Result<(), Error>> {
    let _ = (src, dst);
    match ty {
        GgmlType::IQ1S
        | GgmlType::IQ1M
        | GgmlType::IQ2XXS
        | GgmlType::IQ2XS
        | GgmlType::IQ2S
        | GgmlType::IQ3XXS
        | GgmlType::IQ3S
        | GgmlType::IQ4NL
        | GgmlType::IQ4XS => Some(Err(Error::Unsupported(ty))),
        _ => None,
    }
}
