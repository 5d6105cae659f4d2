//! Weight compression of baked params: the same formats, MIL constexpr ops
//! and math as the model lowering ([`WeightFormat`], `anedvd_mil::quantize`).

use anedvd_mil::blob::BlobWriter;
use anedvd_mil::builder::{FunctionBuilder, Var};
use anedvd_mil::ir::{BlobRef, DType, TensorType};
use anedvd_mil::quantize::{self, WeightFormat};

use crate::error::{shape_err, Result};
use crate::lower::WEIGHT_FILE;

/// Lloyd iterations per palette.
const LUT_ITERATIONS: usize = 16;

/// Emits param `name` of `shape` as a const or a decompressing constexpr.
/// A param of rank < 2 (a bias, a norm weight) stays fp16: one scale or
/// palette per row would cost more than it saves.
pub(crate) fn emit(
    b: &mut FunctionBuilder,
    blob: &mut BlobWriter,
    name: &str,
    shape: &[usize],
    values: &[f32],
    how: WeightFormat,
) -> Result<Var> {
    let rows = shape.first().copied().unwrap_or(1);
    let cols = values.len() / rows.max(1);
    let blob_ref = |dtype, shape: &[usize], offset| BlobRef {
        ty: TensorType::new(dtype, shape),
        path: WEIGHT_FILE.into(),
        offset,
    };
    match how {
        WeightFormat::Lut { .. } | WeightFormat::Int8 if shape.len() < 2 => {}
        WeightFormat::Fp16 => {}
        WeightFormat::Int8 => {
            let (q, scales) = quantize::int8_per_row(values, rows, cols);
            let (qo, so) = (blob.add_i8(&q), blob.add_f16(&scales));
            return Ok(b.constexpr_affine_dequantize(
                name,
                blob_ref(DType::Int8, shape, qo),
                blob_ref(DType::Fp16, &[rows], so),
                0,
            )?);
        }
        WeightFormat::Lut { bits } => {
            let bad = || {
                shape_err(
                    "compress",
                    format!("no {bits}-bit palette of `{name}` {shape:?}"),
                )
            };
            let p =
                quantize::palettize(values, rows, cols, bits, LUT_ITERATIONS).ok_or_else(bad)?;
            let io = blob.add_unsigned(bits, &p.indices).ok_or_else(bad)?;
            let po = blob.add_f16(&p.palettes);
            let dtype = match bits {
                4 => DType::UInt4,
                6 => DType::UInt6,
                _ => DType::UInt8,
            };
            // one palette per `group` rows; every other dim shares it
            let mut lut_shape = vec![rows / p.group];
            lut_shape.extend(std::iter::repeat_n(1, shape.len() - 1));
            lut_shape.extend([1usize << bits, 1]);
            return Ok(b.constexpr_lut_to_dense(
                name,
                blob_ref(dtype, shape, io),
                blob_ref(DType::Fp16, &lut_shape, po),
            )?);
        }
    }
    let off = blob.add_f32_as_f16(values);
    Ok(b.const_blob(name, DType::Fp16, shape, WEIGHT_FILE, off)?)
}
