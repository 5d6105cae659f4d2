//! The format-neutral view of a weight file that everything above the format
//! readers sees.

use crate::{GgmlType, Metadata};

/// Describes one tensor: name, element type and shape in ggml `ne` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name as stored in the file.
    pub name: String,
    /// Element type.
    pub dtype: GgmlType,
    /// Dimensions, innermost (contiguous) first.
    pub shape: Vec<u64>,
    /// Byte length of the tensor's data.
    pub size_bytes: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// A tensor's descriptor with its bytes borrowed from the source (usually an mmap).
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    /// Descriptor.
    pub info: &'a TensorInfo,
    /// The raw bytes, exactly `info.size_bytes` long, laid out as ggml does.
    pub data: &'a [u8],
}

/// A set of named tensors plus metadata, independent of the file format.
pub trait WeightSource: Send + Sync {
    /// Key/value metadata (GGUF header, or keys synthesised from config.json).
    fn metadata(&self) -> &Metadata;
    /// All tensors, in file order.
    fn tensors(&self) -> &[TensorInfo];
    /// The tensor called `name`, with its bytes.
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>>;
    /// A short name of the format (`"gguf"`, `"safetensors"`).
    fn format_name(&self) -> &'static str;
    /// A hint that the caller is about to read `bytes` (a range of tensor
    /// `name`'s data) once, front to back: a memory-mapped source may map
    /// them in one call instead of one page fault at a time.
    fn will_read(&self, name: &str, bytes: std::ops::Range<usize>) {
        let _ = (name, bytes);
    }
    /// A hint that the caller has copied `bytes` (a range of tensor
    /// `name`'s data) and will rarely read them again: a memory-mapped
    /// source may drop those pages from the process (later reads fault them
    /// back in from the file). Sources that own their bytes ignore it.
    fn release(&self, name: &str, bytes: std::ops::Range<usize>) {
        let _ = (name, bytes);
    }
}
