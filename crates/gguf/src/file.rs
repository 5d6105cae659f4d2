//! [`GgufFile`]: a parsed GGUF file over an mmap or an owned buffer, with
//! zero-copy tensor slices.

use crate::parse::{parse, Layout};
use crate::{Error, Result};
use anedvd_base::{Metadata, TensorInfo, TensorRef, WeightSource};
use std::collections::HashMap;
use std::path::Path;

/// The bytes a [`GgufFile`] reads from.
enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::Mmap(m) => write!(f, "Mmap({} bytes)", m.len()),
            Storage::Owned(v) => write!(f, "Owned({} bytes)", v.len()),
        }
    }
}

/// A validated GGUF v2/v3 file. Every tensor's data range has been checked to
/// lie inside the file, be aligned and not overlap another, so slicing never
/// fails after [`GgufFile::open`] / [`GgufFile::from_bytes`] succeed.
#[derive(Debug)]
pub struct GgufFile {
    storage: Storage,
    layout: Layout,
    by_name: HashMap<String, usize>,
}

impl GgufFile {
    /// Maps the file at `path` and parses its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mmap = crate::mmap::map_readonly(&file).map_err(io)?;
        Self::new(Storage::Mmap(mmap))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::new(Storage::Owned(bytes))
    }

    fn new(storage: Storage) -> Result<Self> {
        let layout = parse(storage.bytes())?;
        let by_name = layout
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Self {
            storage,
            layout,
            by_name,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.layout.version
    }

    /// The key/value metadata, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.layout.metadata
    }

    /// Tensor descriptors, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.layout.tensors
    }

    /// The tensor called `name` with its bytes (borrowed from the file).
    pub fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        self.by_name.get(name).and_then(|&i| self.tensor_at(i))
    }

    /// The `index`-th tensor in file order with its bytes.
    pub fn tensor_at(&self, index: usize) -> Option<TensorRef<'_>> {
        let info = self.layout.tensors.get(index)?;
        let start = self.layout.data_offset + self.layout.offsets[index];
        // Validated at parse time: `start + size_bytes <= file_size`, so both
        // fit in usize and the range is in bounds.
        let (start, end) = (start as usize, (start + info.size_bytes) as usize);
        Some(TensorRef {
            info,
            data: self.storage.bytes().get(start..end)?,
        })
    }

    /// Absolute file offset of the tensor called `name`'s first byte.
    pub fn tensor_offset(&self, name: &str) -> Option<u64> {
        self.by_name
            .get(name)
            .map(|&i| self.layout.data_offset + self.layout.offsets[i])
    }

    /// Offsets of every tensor relative to the data section, in file order
    /// (the value stored in each tensor info).
    pub fn relative_offsets(&self) -> &[u64] {
        &self.layout.offsets
    }

    /// The data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.layout.alignment
    }

    /// Absolute offset of the data section (end of the header, padded to the
    /// alignment).
    pub fn data_offset(&self) -> u64 {
        self.layout.data_offset
    }

    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }
}

impl WeightSource for GgufFile {
    fn metadata(&self) -> &Metadata {
        GgufFile::metadata(self)
    }

    fn tensors(&self) -> &[TensorInfo] {
        GgufFile::tensors(self)
    }

    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        GgufFile::tensor(self, name)
    }

    fn format_name(&self) -> &'static str {
        "gguf"
    }

    fn will_read(&self, name: &str, bytes: std::ops::Range<usize>) {
        if let Some((map, range)) = self.mapped_range(name, bytes) {
            crate::mmap::populate(map, range);
        }
    }

    fn release(&self, name: &str, bytes: std::ops::Range<usize>) {
        if let Some((map, range)) = self.mapped_range(name, bytes) {
            crate::mmap::release(map, range);
        }
    }
}

impl GgufFile {
    /// The map and the offsets in it of `bytes` of tensor `name`'s data,
    /// if this file is mapped and the range lies inside the tensor.
    fn mapped_range(
        &self,
        name: &str,
        bytes: std::ops::Range<usize>,
    ) -> Option<(&memmap2::Mmap, std::ops::Range<usize>)> {
        let (Storage::Mmap(map), Some(t)) = (&self.storage, self.tensor(name)) else {
            return None;
        };
        if bytes.start > bytes.end || bytes.end > t.data.len() {
            return None;
        }
        // The tensor's offset inside the map.
        let at = t.data.as_ptr() as usize - map.as_ptr() as usize;
        Some((map, at + bytes.start..at + bytes.end))
    }
}
