//! ggml tensor types: ids as stored in GGUF files, block sizes and byte sizes.

use crate::{Error, Result};

/// A ggml tensor element type. Discriminants are the ids stored in GGUF files
/// (`enum ggml_type` in ggml.h).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    IQ2XXS = 16,
    IQ2XS = 17,
    IQ3XXS = 18,
    IQ1S = 19,
    IQ4NL = 20,
    IQ3S = 21,
    IQ2S = 22,
    IQ4XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
}

/// Every known type, in id order.
const ALL: [GgmlType; 32] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Q8K,
    GgmlType::IQ2XXS,
    GgmlType::IQ2XS,
    GgmlType::IQ3XXS,
    GgmlType::IQ1S,
    GgmlType::IQ4NL,
    GgmlType::IQ3S,
    GgmlType::IQ2S,
    GgmlType::IQ4XS,
    GgmlType::I8,
    GgmlType::I16,
    GgmlType::I32,
    GgmlType::I64,
    GgmlType::F64,
    GgmlType::IQ1M,
    GgmlType::BF16,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
];

impl GgmlType {
    /// All types this build knows, in id order.
    pub fn all() -> &'static [GgmlType] {
        &ALL
    }

    /// The type with GGUF id `id`.
    pub fn from_id(id: u32) -> Result<Self> {
        ALL.iter()
            .copied()
            .find(|t| *t as u32 == id)
            .ok_or(Error::UnknownType(id))
    }

    /// The GGUF id of this type.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// ggml's name for the type (`"q4_K"`, `"iq2_xxs"`, ...), as gguf-dump prints it
    /// upper-cased.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            IQ2XXS => "IQ2_XXS",
            IQ2XS => "IQ2_XS",
            IQ3XXS => "IQ3_XXS",
            IQ1S => "IQ1_S",
            IQ4NL => "IQ4_NL",
            IQ3S => "IQ3_S",
            IQ2S => "IQ2_S",
            IQ4XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
        }
    }

    /// Parses a name as printed by [`GgmlType::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        ALL.iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block (1 for plain scalar types).
    pub fn block_size(self) -> u64 {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | I8 | I16 | I32 | I64 | F64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4NL | MXFP4 => 32,
            _ => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        use GgmlType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            I8 => 1,
            I16 => 2,
            I32 => 4,
            I64 | F64 => 8,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2K => 84,
            Q3K => 110,
            Q4K => 144,
            Q5K => 176,
            Q6K => 210,
            Q8K => 292,
            IQ2XXS => 66,
            IQ2XS => 74,
            IQ3XXS => 98,
            IQ1S => 50,
            IQ4NL => 18,
            IQ3S => 110,
            IQ2S => 82,
            IQ4XS => 136,
            IQ1M => 56,
            TQ1_0 => 54,
            TQ2_0 => 66,
            MXFP4 => 17,
        }
    }

    /// True for block-quantized types (block size > 1).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes of one row of `elements` elements; an error if the row is not a
    /// whole number of blocks or the size overflows.
    pub fn row_bytes(self, elements: u64) -> Result<u64> {
        let block = self.block_size();
        if !elements.is_multiple_of(block) {
            return Err(Error::RaggedRow {
                ty: self,
                elements,
                block,
            });
        }
        (elements / block)
            .checked_mul(self.block_bytes())
            .ok_or_else(|| Error::Overflow(format!("{elements} elements of {}", self.name())))
    }

    /// Bytes of a whole tensor of shape `shape` (ggml `ne` order).
    pub fn tensor_bytes(self, shape: &[u64]) -> Result<u64> {
        let Some((&row, rest)) = shape.split_first() else {
            return self.row_bytes(1);
        };
        let mut bytes = self.row_bytes(row)?;
        for &d in rest {
            bytes = bytes
                .checked_mul(d)
                .ok_or_else(|| Error::Overflow(format!("shape {shape:?} of {}", self.name())))?;
        }
        Ok(bytes)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for &t in GgmlType::all() {
            assert_eq!(GgmlType::from_id(t.id()).unwrap(), t);
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        assert!(GgmlType::from_id(4).is_err());
        assert!(GgmlType::from_id(1000).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(GgmlType::Q8_0.row_bytes(64).unwrap(), 68);
        assert!(GgmlType::Q8_0.row_bytes(33).is_err());
        assert_eq!(GgmlType::F32.tensor_bytes(&[3, 4]).unwrap(), 48);
        assert!(GgmlType::F32.tensor_bytes(&[u64::MAX, 4]).is_err());
    }
}
