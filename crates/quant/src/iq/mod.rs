//! The i-quant family (IQ1_S ... IQ4_XS): grid tables and dequantizers.
//!
//! Each dequantizer is a scalar transcription of ggml's `dequantize_row_iq*`
//! (`ggml-quants.c`), with the same float operations in the same order, so
//! results are bit-identical to ggml and gguf-py. Blocks are parsed from
//! little-endian bytes; the tables in [`grids`] are generated from
//! `ggml-common.h` by `gen_grids.py`.

mod dot;
mod grids;
mod iq1;
mod iq2;
mod iq3;
mod iq4;

use crate::Error;
use anedvd_base::GgmlType;

// Not yet called by the crate's public API (lib.rs); tested in `tests`.
#[allow(unused_imports)]
pub(crate) use dot::{vec_dot_q8, vec_dot_type};

/// Elements per super-block of the 256-element i-quants (ggml's `QK_K`).
const QK_K: usize = 256;

/// Dequantizes an i-quant type; `None` if `ty` is not an i-quant.
///
/// `src` must hold exactly the bytes of `dst.len()` elements of `ty`
/// (a whole number of blocks), otherwise [`Error::BadLength`].
pub(crate) fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Option<Result<(), Error>> {
    let run: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::IQ1S => |s, d| blocks(s, d, iq1::iq1_s),
        GgmlType::IQ1M => |s, d| blocks(s, d, iq1::iq1_m),
        GgmlType::IQ2XXS => |s, d| blocks(s, d, iq2::iq2_xxs),
        GgmlType::IQ2XS => |s, d| blocks(s, d, iq2::iq2_xs),
        GgmlType::IQ2S => |s, d| blocks(s, d, iq2::iq2_s),
        GgmlType::IQ3XXS => |s, d| blocks(s, d, iq3::iq3_xxs),
        GgmlType::IQ3S => |s, d| blocks(s, d, iq3::iq3_s),
        GgmlType::IQ4NL => |s, d| blocks(s, d, iq4::iq4_nl),
        GgmlType::IQ4XS => |s, d| blocks(s, d, iq4::iq4_xs),
        _ => return None,
    };
    Some(check_len(ty, src.len(), dst.len()).map(|()| run(src, dst)))
}

/// Checks that `src_len` bytes are exactly `elements` elements of `ty`.
fn check_len(ty: GgmlType, src_len: usize, elements: usize) -> Result<(), Error> {
    let need = ty
        .row_bytes(elements as u64)
        .map_err(|e| Error::BadLength {
            ty,
            what: format!("destination of {elements} elements: {e}"),
        })?;
    if need != src_len as u64 {
        return Err(Error::BadLength {
            ty,
            what: format!("source is {src_len} bytes, {elements} elements need {need}"),
        });
    }
    Ok(())
}

/// Runs `f` on each `B`-byte block of `src` and its `Q` outputs in `dst`.
///
/// Lengths are checked by the caller; a trailing partial block is ignored.
fn blocks<const B: usize, const Q: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: fn(&[u8; B], &mut [f32; Q]),
) {
    for (b, y) in src.chunks_exact(B).zip(dst.chunks_exact_mut(Q)) {
        // Both conversions always succeed: chunks_exact yields exact lengths.
        if let (Ok(b), Ok(y)) = (<&[u8; B]>::try_from(b), <&mut [f32; Q]>::try_from(y)) {
            f(b, y);
        }
    }
}

/// Little-endian `u16` at byte `at` of `b`.
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Little-endian `u32` at byte `at` of `b`.
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// IEEE half stored little-endian at byte `at` of `b`, widened exactly.
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16_at(b, at)).to_f32()
}

/// ggml's `(signs & kmask_iq2xs[j] ? -1.f : 1.f)`.
fn sign(signs: u8, j: usize) -> f32 {
    if signs & (1 << j) != 0 {
        -1.0
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests;
