//! The error type of the shared vocabulary (metadata look-ups, shape arithmetic).

/// Errors raised while reading typed values out of [`crate::Metadata`] or
/// computing sizes of tensors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required metadata key is absent.
    #[error("metadata key `{key}` is missing")]
    MissingKey {
        /// The key that was looked up.
        key: String,
    },
    /// A metadata key holds a value of another type than the caller needs.
    #[error("metadata key `{key}` has type {found}, expected {expected}")]
    WrongType {
        /// The key that was looked up.
        key: String,
        /// What the caller asked for.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// A metadata value is out of the range the caller accepts.
    #[error("metadata key `{key}`: {reason}")]
    BadValue {
        /// The key that was looked up.
        key: String,
        /// Why the value was refused.
        reason: String,
    },
    /// A ggml type id that this build does not know.
    #[error("unknown ggml type id {0}")]
    UnknownType(u32),
    /// A row length that is not a whole number of blocks.
    #[error("row of {elements} elements is not a multiple of the {ty} block size {block}")]
    RaggedRow {
        /// The tensor type.
        ty: crate::GgmlType,
        /// The row length in elements.
        elements: u64,
        /// The block size of the type.
        block: u64,
    },
    /// A size computation overflowed 64 bits.
    #[error("tensor size overflows: {0}")]
    Overflow(String),
    /// Packed strings would pass the bytes a `u32` offset can address.
    #[error("packed strings exceed {max} bytes")]
    PackedTooLarge {
        /// The most bytes one packed buffer holds.
        max: u64,
    },
    /// A tensor the caller needs is absent.
    #[error("tensor `{0}` not found")]
    MissingTensor(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
