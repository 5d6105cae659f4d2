//! GGUF v2/v3 reader and writer.
//!
//! [`GgufFile`] maps a file (or takes a byte buffer), parses the header —
//! metadata of every value type including nested arrays, tensor descriptors,
//! `general.alignment` — and hands out zero-copy tensor slices. The reader
//! treats its input as hostile: counts and lengths are checked against the
//! remaining bytes before anything is allocated, arithmetic is checked, and
//! every tensor's data must lie inside the file, be aligned and not overlap
//! another tensor. Big-endian files and GGUF v1 are refused with a clear
//! error. [`GgufWriter`] writes little-endian v3 (or v2) files.
//!
//! This crate knows the container format only: it does not interpret keys
//! (`llama.block_count` is just a `u32` here), dequantize tensors or know any
//! model family.
//!
//! ```
//! use anedvd_base::{GgmlType, MetadataValue};
//! use anedvd_gguf::{GgufFile, GgufWriter};
//! let mut w = GgufWriter::new();
//! w.add_kv("general.name", MetadataValue::String("tiny".into())).unwrap();
//! w.add_tensor("w", GgmlType::F32, &[4, 2], vec![0u8; 32]).unwrap();
//! let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
//! assert_eq!(file.metadata().str("general.name").unwrap(), "tiny");
//! assert_eq!(file.tensor("w").unwrap().info.shape, vec![4, 2]);
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod cursor;
mod error;
mod file;
pub mod mmap;
mod parse;
mod writer;

pub use error::{Error, Result};
pub use file::GgufFile;
pub use writer::GgufWriter;

/// The four magic bytes at the start of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The metadata key holding the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// Alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Largest accepted `general.alignment` (1 MiB). Real files use 32; a huge
/// alignment only pads, and a writer reproducing it would allocate that much
/// (found by fuzzing: a 1 GiB alignment on a 200-byte file).
pub const MAX_ALIGNMENT: u32 = 1 << 20;
/// Most dimensions a tensor may have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Longest metadata array the reader accepts; real vocabularies have well
/// under a million entries. Arrays are stored packed (a scalar costs its file
/// size, a string its bytes plus a 4-byte offset, a nested array about 48
/// bytes for its 12 in the file), so together with the check of every length
/// against the bytes left this bounds what a hostile file can make the reader
/// allocate.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Deepest array nesting the reader accepts (arrays of arrays of ...).
pub const MAX_NESTING: usize = 8;
