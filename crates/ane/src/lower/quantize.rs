//! Weight compression for the ANE programs: per-channel int8 and palettized
//! (LUT) weights, the two forms the e5rt evidence shows streaming compressed
//! (`constexpr_affine_dequantize`, `constexpr_lut_to_dense`;
//! ane-evidence.md §a).
//!
//! The compression math (int8 rows, k-means palettes) is in
//! [`anedvd_mil::quantize`], shared with the graph API (`anedvd-forge`);
//! this module holds the formats the model lowering offers and the accuracy
//! each is stated to keep.

pub use anedvd_mil::quantize::{int8_per_row, lut_group, palettize, Palettized, LUT_GROUP};

/// How projection weights are stored in the ANE programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// fp16, as the simulator and the in-memory path have always run.
    #[default]
    Fp16,
    /// int8 with one fp16 scale per output channel (symmetric, zero point 0).
    Int8,
    /// Palettized: `bits`-bit indices into a 2^bits-entry fp16 palette per
    /// group of [`LUT_GROUP`] output channels (4, 6 or 8 bits).
    Lut {
        /// Index width.
        bits: u32,
    },
}

impl WeightFormat {
    /// Every format, in the order `--ane-weights` lists them.
    pub const ALL: [WeightFormat; 5] = [
        WeightFormat::Fp16,
        WeightFormat::Int8,
        WeightFormat::Lut { bits: 8 },
        WeightFormat::Lut { bits: 6 },
        WeightFormat::Lut { bits: 4 },
    ];

    /// `fp16`, `int8`, `lut8`, `lut6`, `lut4`.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Fp16 => "fp16",
            WeightFormat::Int8 => "int8",
            WeightFormat::Lut { bits: 8 } => "lut8",
            WeightFormat::Lut { bits: 6 } => "lut6",
            WeightFormat::Lut { .. } => "lut4",
        }
    }

    /// Parses [`WeightFormat::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == s)
    }

    /// The accuracy this format is stated to keep on a whole model's final
    /// logits against the exact CPU reference: `(lowest cosine, highest
    /// max|Δ| / max|reference|)`. fp16's is the simulator's own error; the
    /// compressed formats' sit above the worst of the tiny families and the
    /// real Gemma 3 270M (docs/ane-quantization.md), except Gemma 4's tiny
    /// fixtures, which [`WeightFormat::accuracy_gemma4`] covers.
    pub fn accuracy(self) -> (f64, f64) {
        match self {
            WeightFormat::Fp16 => (0.999, 0.02),
            WeightFormat::Int8 => (0.998, 0.08),
            WeightFormat::Lut { bits: 8 } => (0.99, 0.15),
            WeightFormat::Lut { bits: 6 } => (0.95, 0.4),
            WeightFormat::Lut { .. } => (0.6, 1.0),
        }
    }

    /// [`WeightFormat::accuracy`] for the tiny Gemma 4 fixtures, whose
    /// random layers amplify weight error several times more than the other
    /// families' (measured: int8 cosine 0.965 on gemma4's reference prompt,
    /// lut8 0.9876 on gemma4_keqv with another prompt; docs/ane-quantization.md).
    pub fn accuracy_gemma4(self) -> (f64, f64) {
        match self {
            WeightFormat::Int8 => (0.95, 0.4),
            WeightFormat::Lut { bits: 8 } => (0.97, 0.3),
            other => other.accuracy(),
        }
    }

    /// Weight bits per element stored (palettes and scales not counted).
    pub fn bits(self) -> u32 {
        match self {
            WeightFormat::Fp16 => 16,
            WeightFormat::Int8 => 8,
            WeightFormat::Lut { bits } => bits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for f in WeightFormat::ALL {
            assert_eq!(WeightFormat::from_name(f.name()), Some(f));
        }
    }
}
