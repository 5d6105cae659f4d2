//! [`SafetensorsSource`]: one or more safetensors shards, mapped and parsed by
//! the `safetensors` crate, exposed with ggml dtypes and `ne`-order shapes.

use crate::{Error, Result};
use anedvd_base::{GgmlType, Metadata, MetadataValue, TensorInfo, TensorRef, WeightSource};
use safetensors::Dtype;
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
        let (data_start, entries) = parse_header(&path, buf)?;
        for entry in entries {
            let Entry {
                name,
                dtype,
                shape,
                offsets: (begin, end),
            } = entry;
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
                shape: shape.iter().rev().map(|&d| d as u64).collect(),
                size_bytes: (end - begin) as u64,
            });
            // In range: `parse_header` checked `end <= buf.len() - data_start`.
            self.locations.push(Location {
                shard,
                start: data_start + begin,
                end: data_start + end,
            });
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

/// Largest header accepted (the `safetensors` crate's limit too).
const MAX_HEADER: u64 = 100_000_000;

/// One tensor of a validated header: data offsets relative to the data
/// section.
struct Entry {
    name: String,
    dtype: GgmlType,
    shape: Vec<usize>,
    offsets: (usize, usize),
}

/// Parses and validates the header of the safetensors file `buf` (read from
/// `path`): the 8-byte little-endian header length, the JSON header, and for
/// every tensor its `dtype`, `shape` and `data_offsets` (the size the dtype
/// and shape imply, offsets that tile the data section exactly: no overlap,
/// no gap, nothing past its end, nothing after the last tensor). Returns
/// where the data section starts and the tensors in offset order. Every
/// error names the file and, for one tensor, the tensor and the field.
///
/// This is the `safetensors` crate's `SafeTensors::read_metadata` rule set,
/// written out so each refusal says which tensor and field is at fault.
fn parse_header(path: &Path, buf: &[u8]) -> Result<(usize, Vec<Entry>)> {
    let file_err = |reason: String| Error::Safetensors {
        path: path.to_path_buf(),
        reason,
    };
    let Some(len_bytes) = buf.first_chunk::<8>() else {
        return Err(file_err(format!(
            "the file is {} bytes, too short for the 8-byte header length",
            buf.len()
        )));
    };
    let header_len = u64::from_le_bytes(*len_bytes);
    if header_len > MAX_HEADER {
        return Err(file_err(format!(
            "header length {header_len} (the first 8 bytes) exceeds the limit of {MAX_HEADER} bytes"
        )));
    }
    // Below MAX_HEADER, so it fits usize.
    let header_len = header_len as usize;
    let Some(header) = buf.get(8..8 + header_len) else {
        return Err(file_err(format!(
            "header length {header_len} (the first 8 bytes) runs past the end of the file ({} bytes)",
            buf.len()
        )));
    };
    let data_start = 8 + header_len;
    let data_len = buf.len() - data_start;
    let header = std::str::from_utf8(header)
        .map_err(|e| file_err(format!("the header is not UTF-8: {e}")))?;
    let header: serde_json::Value = serde_json::from_str(header)
        .map_err(|e| file_err(format!("the header is not valid JSON: {e}")))?;
    let serde_json::Value::Object(header) = header else {
        return Err(file_err("the header is not a JSON object".into()));
    };
    let mut entries = Vec::with_capacity(header.len());
    for (name, value) in &header {
        if name == "__metadata__" {
            let strings = value
                .as_object()
                .is_some_and(|m| m.values().all(serde_json::Value::is_string));
            if !strings {
                return Err(file_err(
                    "`__metadata__` must be an object of strings".into(),
                ));
            }
            continue;
        }
        entries.push(parse_entry(path, name, value)?);
    }
    // Offsets need not follow the header's order (older writers sorted by
    // name), but they must tile the data section.
    entries.sort_by_key(|e| e.offsets);
    let mut expected = 0usize;
    let mut prev: Option<&Entry> = None;
    for e in &entries {
        let (begin, end) = e.offsets;
        let bad = |reason: String| Error::BadTensor {
            path: path.to_path_buf(),
            tensor: e.name.clone(),
            field: "data_offsets",
            reason,
        };
        if begin < expected {
            let p = prev.map_or(String::new(), |p| {
                format!(
                    " with tensor `{}` [{}, {}]",
                    p.name, p.offsets.0, p.offsets.1
                )
            });
            return Err(bad(format!("[{begin}, {end}] overlaps{p}")));
        }
        if begin > expected {
            return Err(bad(format!(
                "[{begin}, {end}] leaves bytes {expected}..{begin} of the data section to no tensor"
            )));
        }
        if end > data_len {
            return Err(bad(format!(
                "[{begin}, {end}] runs past the end of the data section ({data_len} bytes): \
                 the file is truncated or the offsets are wrong"
            )));
        }
        expected = end;
        prev = Some(e);
    }
    if expected != data_len {
        return Err(file_err(format!(
            "the data section has {data_len} bytes but its tensors end at byte {expected} \
             (trailing bytes belong to no tensor)"
        )));
    }
    Ok((data_start, entries))
}

/// One tensor's header entry: `{"dtype": .., "shape": [..], "data_offsets": [begin, end]}`.
fn parse_entry(path: &Path, name: &str, value: &serde_json::Value) -> Result<Entry> {
    use serde_json::Value;
    let bad = |field: &'static str, reason: String| Error::BadTensor {
        path: path.to_path_buf(),
        tensor: name.to_string(),
        field,
        reason,
    };
    let Value::Object(fields) = value else {
        return Err(bad("entry", "is not a JSON object".into()));
    };
    let get = |field: &'static str| {
        fields
            .get(field)
            .ok_or_else(|| bad(field, "missing".into()))
    };
    let dtype_v = get("dtype")?;
    let dtype_name = dtype_v
        .as_str()
        .ok_or_else(|| bad("dtype", format!("expected a string, found {dtype_v}")))?;
    let st_dtype: Dtype = serde_json::from_value(dtype_v.clone())
        .map_err(|_| bad("dtype", format!("unknown dtype `{dtype_name}`")))?;
    let dtype = ggml_dtype(st_dtype).ok_or_else(|| Error::UnsupportedDtype {
        path: path.to_path_buf(),
        tensor: name.to_string(),
        dtype: st_dtype.to_string(),
    })?;
    let usizes = |field: &'static str, v: &Value| -> Result<Vec<usize>> {
        let items = v
            .as_array()
            .ok_or_else(|| bad(field, format!("expected an array, found {v}")))?;
        items
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| bad(field, format!("{x} is not a non-negative integer")))
            })
            .collect()
    };
    let shape = usizes("shape", get("shape")?)?;
    let offsets = match usizes("data_offsets", get("data_offsets")?)?.as_slice() {
        &[begin, end] if begin <= end => (begin, end),
        &[begin, end] => {
            return Err(bad(
                "data_offsets",
                format!("[{begin}, {end}] ends before it begins"),
            ))
        }
        other => {
            return Err(bad(
                "data_offsets",
                format!("expected [begin, end], found {} numbers", other.len()),
            ))
        }
    };
    let shape_text = || format!("{shape:?}");
    let bytes = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .and_then(|n| n.checked_mul(st_dtype.bitsize()))
        .map(|bits| bits.div_ceil(8))
        .ok_or_else(|| {
            bad(
                "shape",
                format!("{} × {dtype_name} overflows the byte count", shape_text()),
            )
        })?;
    if offsets.1 - offsets.0 != bytes {
        return Err(bad(
            "data_offsets",
            format!(
                "[{}, {}] hold {} bytes but dtype {dtype_name} × shape {} needs {bytes}",
                offsets.0,
                offsets.1,
                offsets.1 - offsets.0,
                shape_text()
            ),
        ));
    }
    Ok(Entry {
        name: name.to_string(),
        dtype,
        shape,
        offsets,
    })
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
