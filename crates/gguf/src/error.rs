//! The error type of the GGUF reader and writer; every variant names the byte
//! offset, metadata key or tensor name it is about.

use anedvd_base::GgmlType;
use std::path::PathBuf;

/// Everything that can go wrong reading or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, mapped or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved (empty for writes to an arbitrary `Write`).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The bytes found at offset 0.
        found: [u8; 4],
    },
    /// The version field reads as a byte-swapped small number: a big-endian file.
    #[error("big-endian GGUF files are not supported (version field reads {raw:#010x}); convert the file to little-endian")]
    BigEndian {
        /// The version field as read little-endian.
        raw: u32,
    },
    /// A version this reader does not accept.
    #[error("unsupported GGUF version {version}: {reason}")]
    UnsupportedVersion {
        /// The version in the header.
        version: u32,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The file ends before a field that should be there.
    #[error("file truncated at offset {offset}: reading {what} needs {needed} bytes, {available} remain")]
    Truncated {
        /// Where the read started.
        offset: u64,
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// A count that cannot fit in the remaining bytes of the file.
    #[error(
        "{what} count {count} at offset {offset} is impossible: only {available} bytes remain"
    )]
    CountTooLarge {
        /// What is being counted (tensors, key/value pairs, array elements).
        what: &'static str,
        /// The count in the file.
        count: u64,
        /// Where the count was read.
        offset: u64,
        /// Bytes left in the file after the count.
        available: u64,
    },
    /// A string that is not valid UTF-8.
    #[error("string at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Offset of the string's length prefix.
        offset: u64,
    },
    /// A metadata key of length zero.
    #[error("metadata key at offset {offset} is empty")]
    EmptyKey {
        /// Offset of the key's length prefix.
        offset: u64,
    },
    /// The same metadata key appears twice.
    #[error("duplicate metadata key `{key}` at offset {offset}")]
    DuplicateKey {
        /// The repeated key.
        key: String,
        /// Offset of the second occurrence (0 when raised by the writer).
        offset: u64,
    },
    /// A value type tag outside the GGUF specification.
    #[error("metadata key `{key}`: unknown value type {id} at offset {offset}")]
    UnknownValueType {
        /// The key whose value is being read.
        key: String,
        /// The type tag found.
        id: u32,
        /// Offset of the tag.
        offset: u64,
    },
    /// Arrays nested deeper than the reader accepts.
    #[error("metadata key `{key}`: arrays nested deeper than {max} at offset {offset}")]
    NestingTooDeep {
        /// The key whose value is being read.
        key: String,
        /// The limit.
        max: usize,
        /// Offset of the innermost array's type tag.
        offset: u64,
    },
    /// A bool byte other than 0 or 1.
    #[error("metadata key `{key}`: bool byte {value} at offset {offset} is neither 0 nor 1")]
    BadBool {
        /// The key whose value is being read.
        key: String,
        /// The byte found.
        value: u8,
        /// Its offset.
        offset: u64,
    },
    /// `general.alignment` has the wrong type or is not a nonzero power of two.
    #[error("`general.alignment` is invalid: {reason}")]
    BadAlignment {
        /// Why it was refused.
        reason: String,
    },
    /// A tensor with more than four dimensions.
    #[error(
        "tensor `{tensor}` at offset {offset} has {n_dims} dimensions, at most {max} are allowed"
    )]
    TooManyDims {
        /// The tensor name.
        tensor: String,
        /// The rank in the file.
        n_dims: u32,
        /// The limit (`GGML_MAX_DIMS`).
        max: u32,
        /// Offset of the rank field.
        offset: u64,
    },
    /// A shape whose element count or byte size does not fit in 63 bits.
    #[error("tensor `{tensor}`: shape {shape:?} overflows")]
    ShapeOverflow {
        /// The tensor name.
        tensor: String,
        /// Its dimensions as stored (ggml `ne` order).
        shape: Vec<u64>,
    },
    /// A ggml type id this build does not know.
    #[error("tensor `{tensor}`: unknown ggml type id {id} at offset {offset}")]
    UnknownGgmlType {
        /// The tensor name.
        tensor: String,
        /// The type id found.
        id: u32,
        /// Offset of the type field.
        offset: u64,
    },
    /// A row that is not a whole number of quantization blocks.
    #[error(
        "tensor `{tensor}`: row of {elements} elements is not a multiple of the {ty} block size"
    )]
    RaggedRow {
        /// The tensor name.
        tensor: String,
        /// The element type.
        ty: GgmlType,
        /// Elements in one row (`ne[0]`).
        elements: u64,
    },
    /// Two tensors with the same name.
    #[error("duplicate tensor name `{tensor}` at offset {offset}")]
    DuplicateTensor {
        /// The repeated name.
        tensor: String,
        /// Offset of the second occurrence (0 when raised by the writer).
        offset: u64,
    },
    /// A tensor whose data offset is not a multiple of the alignment.
    #[error(
        "tensor `{tensor}`: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        /// The tensor name.
        tensor: String,
        /// Its offset relative to the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor whose data lies (partly) outside the file.
    #[error(
        "tensor `{tensor}`: data bytes {start}..{end} lie outside the file of {file_size} bytes"
    )]
    TensorOutOfBounds {
        /// The tensor name.
        tensor: String,
        /// Absolute start offset (saturated on overflow).
        start: u64,
        /// Absolute end offset (saturated on overflow).
        end: u64,
        /// File size.
        file_size: u64,
    },
    /// Two tensors whose data ranges overlap.
    #[error("tensors `{first}` and `{second}` have overlapping data (second starts at {offset}, inside the first)")]
    OverlappingTensors {
        /// The tensor that starts first.
        first: String,
        /// The tensor that starts inside it.
        second: String,
        /// Start of `second`, relative to the data section.
        offset: u64,
    },
    /// A writer call with inconsistent arguments.
    #[error("GGUF writer: {0}")]
    Writer(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
