//! [`SafetensorsSource`]: one or more safetensors shards, mapped and parsed by
//! the `safetensors` crate, exposed with ggml dtypes and `ne`-order shapes.

use crate::{Error, Result};
use anedvd_base::{GgmlType, Metadata, MetadataValue, TensorInfo, TensorRef, WeightSource};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The bytes of one shard.
enum Bytes {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Mmap(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

struct Shard {
    path: PathBuf,
    bytes: Bytes,
}

/// Where a tensor's bytes are: shard index and absolute byte range.
#[derive(Clone, Copy)]
struct Location {
    shard: usize,
    start: usize,
    end: usize,
}

/// Tensors from one or more safetensors files plus metadata supplied by the
/// caller (for Hugging Face directories, the flattened `config.json`).
pub struct SafetensorsSource {
    shards: Vec<Shard>,
    tensors: Vec<TensorInfo>,
    locations: Vec<Location>,
    by_name: HashMap<String, usize>,
    metadata: Metadata,
}

impl std::fmt::Debug for SafetensorsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsSource")
            .field(
                "shards",
                &self.shards.iter().map(|s| &s.path).collect::<Vec<_>>(),
            )
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl SafetensorsSource {
    /// Parses one safetensors file held in memory (used by tests and fuzzing).
    /// The metadata holds only `general.source_format`.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let mut source = Self::empty(base_metadata());
        source.add_shard(PathBuf::from("<memory>"), Bytes::Owned(bytes))?;
        Ok(source)
    }

    /// Maps and parses `paths` in order; `metadata` is exposed as is (callers
    /// normally start from [`base_metadata`]). A tensor name present in two
    /// shards is an error.
    pub fn open_files(paths: &[PathBuf], metadata: Metadata) -> Result<Self> {
        let mut source = Self::empty(metadata);
        for path in paths {
            let io = |source| Error::Io {
                path: path.clone(),
                source,
            };
            let file = std::fs::File::open(path).map_err(io)?;
            let mmap = anedvd_gguf::mmap::map_readonly(&file).map_err(io)?;
            source.add_shard(path.clone(), Bytes::Mmap(mmap))?;
        }
        Ok(source)
    }

    fn empty(metadata: Metadata) -> Self {
        Self {
            shards: Vec::new(),
            tensors: Vec::new(),
            locations: Vec::new(),
            by_name: HashMap::new(),
            metadata,
        }
    }

    fn add_shard(&mut self, path: PathBuf, bytes: Bytes) -> Result<()> {
        let shard = self.shards.len();
        let buf = bytes.get();
        let bad = |e: safetensors::SafeTensorError| Error::Safetensors {
            path: path.clone(),
            reason: e.to_string(),
        };
        // `read_metadata` validates the header: JSON, dtype/shape/offset
        // consistency, contiguous offsets and that the data section is
        // exactly the rest of the buffer.
        let (header_len, meta) = SafeTensors::read_metadata(buf).map_err(bad)?;
        let data_start = header_len
            .checked_add(8)
            .ok_or_else(|| bad(safetensors::SafeTensorError::InvalidOffset("header".into())))?;
        for name in meta.offset_keys() {
            let Some(info) = meta.info(&name) else {
                continue;
            };
            let dtype = ggml_dtype(info.dtype).ok_or_else(|| Error::UnsupportedDtype {
                path: path.clone(),
                tensor: name.clone(),
                dtype: format!("{:?}", info.dtype),
            })?;
            let (begin, end) = info.data_offsets;
            let (start, end) = match (data_start.checked_add(begin), data_start.checked_add(end)) {
                (Some(s), Some(e)) if s <= e && e <= buf.len() => (s, e),
                _ => {
                    return Err(Error::Safetensors {
                        path: path.clone(),
                        reason: format!("tensor `{name}`: data offsets out of range"),
                    })
                }
            };
            if let Some(&prev) = self.by_name.get(&name) {
                return Err(Error::DuplicateTensor {
                    tensor: name,
                    first: self.shards[self.locations[prev].shard].path.clone(),
                    second: path.clone(),
                });
            }
            self.by_name.insert(name.clone(), self.tensors.len());
            self.tensors.push(TensorInfo {
                name,
                dtype,
                // safetensors is row-major outermost-first; ggml `ne` is
                // innermost-first.
                shape: info.shape.iter().rev().map(|&d| d as u64).collect(),
                size_bytes: (end - start) as u64,
            });
            self.locations.push(Location { shard, start, end });
        }
        self.shards.push(Shard { path, bytes });
        Ok(())
    }

    /// The shard file holding tensor `name`.
    pub fn shard_of(&self, name: &str) -> Option<&Path> {
        let &i = self.by_name.get(name)?;
        Some(&self.shards[self.locations[i].shard].path)
    }

    /// The shard files, in load order.
    pub fn shard_paths(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }
}

/// Metadata every safetensors source starts with:
/// `general.source_format = "safetensors"`.
pub fn base_metadata() -> Metadata {
    let mut m = Metadata::new();
    m.insert(
        "general.source_format",
        MetadataValue::String("safetensors".into()),
    );
    m
}

/// The ggml type of a safetensors dtype, for the dtypes this engine reads.
pub fn ggml_dtype(dtype: Dtype) -> Option<GgmlType> {
    Some(match dtype {
        Dtype::F32 => GgmlType::F32,
        Dtype::F16 => GgmlType::F16,
        Dtype::BF16 => GgmlType::BF16,
        Dtype::F64 => GgmlType::F64,
        Dtype::I8 => GgmlType::I8,
        Dtype::I16 => GgmlType::I16,
        Dtype::I32 => GgmlType::I32,
        Dtype::I64 => GgmlType::I64,
        _ => return None,
    })
}

impl WeightSource for SafetensorsSource {
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        let &i = self.by_name.get(name)?;
        let loc = self.locations[i];
        let data = self.shards[loc.shard].bytes.get().get(loc.start..loc.end)?;
        Some(TensorRef {
            info: &self.tensors[i],
            data,
        })
    }

    fn format_name(&self) -> &'static str {
        "safetensors"
    }
}
