//! An in-memory [`WeightSource`] for tests, examples and backend conformance
//! cases.

use anedvd_base::{GgmlType, Metadata, TensorInfo, TensorRef, WeightSource};

/// Tensors and metadata held in memory.
#[derive(Debug, Clone)]
pub struct MemorySource {
    format: &'static str,
    metadata: Metadata,
    infos: Vec<TensorInfo>,
    data: Vec<Vec<u8>>,
}

impl MemorySource {
    /// An empty source that reports `format` (`"gguf"` or `"safetensors"`,
    /// which decides the naming the model crate expects).
    pub fn new(format: &'static str) -> Self {
        Self {
            format,
            metadata: Metadata::new(),
            infos: Vec::new(),
            data: Vec::new(),
        }
    }

    /// Mutable metadata.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// Adds (or replaces) an F32 tensor of `shape` (ggml `ne` order).
    pub fn insert_f32(&mut self, name: &str, shape: &[u64], values: &[f32]) {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.insert_raw(name, GgmlType::F32, shape, bytes);
    }

    /// Adds (or replaces) a tensor with raw bytes in ggml layout.
    pub fn insert_raw(&mut self, name: &str, dtype: GgmlType, shape: &[u64], bytes: Vec<u8>) {
        let info = TensorInfo {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            size_bytes: bytes.len() as u64,
        };
        if let Some(i) = self.infos.iter().position(|t| t.name == name) {
            self.infos[i] = info;
            self.data[i] = bytes;
        } else {
            self.infos.push(info);
            self.data.push(bytes);
        }
    }

    /// Removes a tensor if present.
    pub fn remove(&mut self, name: &str) {
        if let Some(i) = self.infos.iter().position(|t| t.name == name) {
            self.infos.remove(i);
            self.data.remove(i);
        }
    }
}

impl WeightSource for MemorySource {
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.infos
    }

    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        let i = self.infos.iter().position(|t| t.name == name)?;
        Some(TensorRef {
            info: &self.infos[i],
            data: &self.data[i],
        })
    }

    fn format_name(&self) -> &'static str {
        self.format
    }
}
