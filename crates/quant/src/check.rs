//! [`find_non_finite`]: the NaN/infinity scan of a tensor's data (the
//! engine's `--check-tensors`).

use crate::{dequantize, f16_to_f32, Error};
use anedvd_base::GgmlType;

/// A NaN or infinity found by [`find_non_finite`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NonFinite {
    /// Index of the element in the data, in storage order (0-based).
    pub index: u64,
    /// Its value: NaN, `inf` or `-inf` (as f32).
    pub value: f32,
}

/// Elements dequantized at a time (a multiple of every block size).
const CHUNK: usize = 4096;

/// The first NaN or infinite element of `src`, a whole number of blocks of
/// type `ty` (a tensor's data, or a block-aligned piece of it), or `None`
/// when every element is finite.
///
/// F32, F16, BF16 and F64 are tested from their bits; integer types hold
/// no NaN. Block-quantized types are decoded with [`dequantize`], a few
/// thousand elements at a time (nothing is allocated by the data's size),
/// and the decoded values tested: a NaN or infinite block scale makes its
/// block's values NaN or infinite (`d · q` is NaN or ±inf for every `q`, 0
/// included), so it is found at its block's first element.
///
/// [`Error::BadLength`] when `src` is not a whole number of blocks.
///
/// ```
/// use anedvd_base::GgmlType;
/// let mut data: Vec<u8> = [1.0f32, f32::NAN].iter().flat_map(|x| x.to_le_bytes()).collect();
/// let bad = anedvd_quant::find_non_finite(GgmlType::F32, &data).unwrap().unwrap();
/// assert_eq!(bad.index, 1);
/// data.truncate(4);
/// assert_eq!(anedvd_quant::find_non_finite(GgmlType::F32, &data).unwrap(), None);
/// ```
pub fn find_non_finite(ty: GgmlType, src: &[u8]) -> Result<Option<NonFinite>, Error> {
    let block_bytes = ty.block_bytes() as usize;
    if !src.len().is_multiple_of(block_bytes) {
        return Err(Error::BadLength {
            ty,
            what: format!(
                "{} bytes are not a whole number of {block_bytes}-byte blocks",
                src.len()
            ),
        });
    }
    let found = |i: usize, value: f32| {
        Some(NonFinite {
            index: i as u64,
            value,
        })
    };
    use GgmlType::*;
    Ok(match ty {
        F32 => src
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .enumerate()
            .find_map(|(i, x)| if x.is_finite() { None } else { found(i, x) }),
        // exponent bits all ones: infinity or NaN
        F16 => scan_bits16(src, 0x7c00, f16_to_f32),
        BF16 => scan_bits16(src, 0x7f80, |h| f32::from_bits(u32::from(h) << 16)),
        F64 => src
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .enumerate()
            .find_map(|(i, x)| {
                if x.is_finite() {
                    None
                } else {
                    found(i, x as f32)
                }
            }),
        I8 | I16 | I32 | I64 => None,
        _ => {
            let block = ty.block_size() as usize;
            let mut buf = [0.0f32; CHUNK];
            let chunk_bytes = CHUNK / block * block_bytes;
            let mut base = 0usize;
            for piece in src.chunks(chunk_bytes) {
                let n = piece.len() / block_bytes * block;
                let out = &mut buf[..n];
                dequantize(ty, piece, out)?;
                if let Some(i) = out.iter().position(|x| !x.is_finite()) {
                    return Ok(found(base + i, out[i]));
                }
                base += n;
            }
            None
        }
    })
}

/// The first 16-bit element whose exponent bits (`mask`) are all set.
fn scan_bits16(src: &[u8], mask: u16, to_f32: fn(u16) -> f32) -> Option<NonFinite> {
    src.chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .enumerate()
        .find(|(_, h)| h & mask == mask)
        .map(|(i, h)| NonFinite {
            index: i as u64,
            value: to_f32(h),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{f32_to_bf16, f32_to_f16, quantize};

    fn f32_bytes(x: &[f32]) -> Vec<u8> {
        x.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// 300 finite values with one replaced by `bad` at `at`.
    fn values(at: usize, bad: f32) -> Vec<f32> {
        let mut v: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) * 0.37).collect();
        v[at] = bad;
        v
    }

    #[test]
    fn f32_nan_and_infinities_are_found_at_their_index() {
        let hit = find_non_finite(GgmlType::F32, &f32_bytes(&values(17, f32::NAN)))
            .unwrap()
            .unwrap();
        assert_eq!(hit.index, 17);
        assert!(hit.value.is_nan());
        let hit = find_non_finite(GgmlType::F32, &f32_bytes(&values(299, f32::NEG_INFINITY)))
            .unwrap()
            .unwrap();
        assert_eq!((hit.index, hit.value), (299, f32::NEG_INFINITY));
        // the first of two
        let mut v = values(40, f32::INFINITY);
        v[200] = f32::NAN;
        let hit = find_non_finite(GgmlType::F32, &f32_bytes(&v))
            .unwrap()
            .unwrap();
        assert_eq!(hit.index, 40);
    }

    #[test]
    fn f16_and_bf16_nan_are_found() {
        let f16: Vec<u8> = values(123, f32::NAN)
            .iter()
            .flat_map(|x| f32_to_f16(*x).to_le_bytes())
            .collect();
        let hit = find_non_finite(GgmlType::F16, &f16).unwrap().unwrap();
        assert_eq!(hit.index, 123);
        assert!(hit.value.is_nan());
        let bf16: Vec<u8> = values(7, f32::INFINITY)
            .iter()
            .flat_map(|x| f32_to_bf16(*x).to_le_bytes())
            .collect();
        let hit = find_non_finite(GgmlType::BF16, &bf16).unwrap().unwrap();
        assert_eq!((hit.index, hit.value), (7, f32::INFINITY));
        let bf16_nan: Vec<u8> = values(0, f32::NAN)
            .iter()
            .flat_map(|x| f32_to_bf16(*x).to_le_bytes())
            .collect();
        assert_eq!(
            find_non_finite(GgmlType::BF16, &bf16_nan)
                .unwrap()
                .unwrap()
                .index,
            0
        );
    }

    #[test]
    fn a_nan_q8_0_block_scale_is_found_at_its_block() {
        let x: Vec<f32> = values(0, 1.0)[..256].to_vec();
        let mut q = vec![0u8; GgmlType::Q8_0.row_bytes(256).unwrap() as usize];
        quantize(GgmlType::Q8_0, &x, &mut q).unwrap();
        assert_eq!(find_non_finite(GgmlType::Q8_0, &q).unwrap(), None);
        // block 2's f16 scale (its first two bytes) becomes NaN
        q[2 * 34..2 * 34 + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
        let hit = find_non_finite(GgmlType::Q8_0, &q).unwrap().unwrap();
        assert_eq!(hit.index, 64);
        assert!(hit.value.is_nan());
    }

    #[test]
    fn clean_tensors_pass_in_every_scanned_kind() {
        // more than one dequantization chunk of Q4_K, plus the float types
        let x: Vec<f32> = (0..3 * CHUNK)
            .map(|i| ((i % 97) as f32 - 48.0) / 7.0)
            .collect();
        for ty in [
            GgmlType::Q4K,
            GgmlType::Q8_0,
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::F32,
        ] {
            let mut q = vec![0u8; ty.row_bytes(x.len() as u64).unwrap() as usize];
            quantize(ty, &x, &mut q).unwrap();
            assert_eq!(find_non_finite(ty, &q).unwrap(), None, "{ty:?}");
        }
        let ints = [0xffu8; 64];
        assert_eq!(find_non_finite(GgmlType::I32, &ints).unwrap(), None);
        let f64_inf: Vec<u8> = [1.0f64, f64::INFINITY]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            find_non_finite(GgmlType::F64, &f64_inf)
                .unwrap()
                .unwrap()
                .index,
            1
        );
    }

    #[test]
    fn a_q4_k_nan_in_the_second_chunk_keeps_its_index() {
        let x: Vec<f32> = (0..2 * CHUNK).map(|i| (i % 13) as f32 - 6.0).collect();
        let ty = GgmlType::Q4K;
        let mut q = vec![0u8; ty.row_bytes(x.len() as u64).unwrap() as usize];
        quantize(ty, &x, &mut q).unwrap();
        // super-block 20 (elements 5120..5376): its f16 `d` is the first two bytes
        let at = 20 * ty.block_bytes() as usize;
        q[at..at + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
        // an infinite `d` makes every value of the block ±inf or NaN (inf · 0)
        let hit = find_non_finite(ty, &q).unwrap().unwrap();
        assert_eq!(hit.index, 20 * 256);
    }

    #[test]
    fn partial_blocks_are_an_error() {
        assert!(matches!(
            find_non_finite(GgmlType::Q8_0, &[0u8; 35]),
            Err(Error::BadLength { .. })
        ));
        assert!(find_non_finite(GgmlType::F32, &[0u8; 6]).is_err());
    }
}
