//! Weight compression for the ANE programs: per-channel int8 and palettized
//! (LUT) weights, the two forms the e5rt evidence shows streaming compressed
//! (`constexpr_affine_dequantize`, `constexpr_lut_to_dense`;
//! ane-evidence.md §a).
//!
//! The compression math (int8 rows, k-means palettes) is in
//! [`anedvd_mil::quantize`], shared with the graph API (`anedvd-forge`);
//! so is [`WeightFormat`]; this module holds the accuracy each format is
//! stated to keep on a whole model.

pub use anedvd_mil::quantize::{
    int8_per_row, lut_group, palettize, roundtrip, Palettized, WeightFormat, LUT_GROUP,
};

/// The accuracy this format is stated to keep on a whole model's final
/// logits against the exact CPU reference: `(lowest cosine, highest
/// max|Δ| / max|reference|)`. fp16's is the simulator's own error; the
/// compressed formats' sit above the worst of the tiny families and the
/// real Gemma 3 270M (docs/ane-quantization.md), except Gemma 4's tiny
/// fixtures, which [`accuracy_gemma4`] covers.
pub fn accuracy(format: WeightFormat) -> (f64, f64) {
    match format {
        WeightFormat::Fp16 => (0.999, 0.02),
        WeightFormat::Int8 => (0.998, 0.08),
        WeightFormat::Lut { bits: 8 } => (0.99, 0.15),
        WeightFormat::Lut { bits: 6 } => (0.95, 0.4),
        WeightFormat::Lut { .. } => (0.6, 1.0),
    }
}

/// [`accuracy`] for the tiny Gemma 4 fixtures, whose
/// random layers amplify weight error several times more than the other
/// families' (measured: int8 cosine 0.965 on gemma4's reference prompt,
/// lut8 0.9876 on gemma4_keqv with another prompt; docs/ane-quantization.md).
pub fn accuracy_gemma4(format: WeightFormat) -> (f64, f64) {
    match format {
        WeightFormat::Int8 => (0.95, 0.4),
        WeightFormat::Lut { bits: 8 } => (0.97, 0.3),
        other => accuracy(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_bits_are_never_held_to_tighter_limits() {
        for pair in WeightFormat::ALL.windows(2) {
            let (a, b) = (accuracy(pair[0]), accuracy(pair[1]));
            assert!(a.0 >= b.0 && a.1 <= b.1, "{pair:?}");
        }
    }
}
