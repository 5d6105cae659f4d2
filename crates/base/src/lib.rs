//! Shared vocabulary of anedvd: ggml tensor types, metadata values, tensor
//! descriptors and the format-neutral [`WeightSource`] trait.
//!
//! This crate knows nothing about any file format or model family. Format
//! readers (`gguf`, `weights`) produce these types; everything above them
//! (tokenizer, model, engine) consumes them.
//!
//! Shapes follow ggml's `ne` order everywhere: `shape[0]` is the innermost,
//! contiguous dimension. A safetensors tensor `[rows, cols]` is `[cols, rows]`
//! here.
//!
//! ```
//! use anedvd_base::GgmlType;
//! assert_eq!(GgmlType::Q4K.block_size(), 256);
//! assert_eq!(GgmlType::Q4K.row_bytes(512).unwrap(), 288);
//! ```

mod array;
mod dtype;
mod error;
mod metadata;
mod source;

pub use array::{MetadataArray, PackedStrings, Strs};
pub use dtype::GgmlType;
pub use error::{Error, Result};
pub use metadata::{Metadata, MetadataValue, ValueType};
pub use source::{TensorInfo, TensorRef, WeightSource};
