//! [`GgufWriter`]: builds a little-endian GGUF v3 (or v2) file from metadata
//! and tensor bytes.

use crate::parse::align_up;
use crate::{
    Error, Result, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_LEN, MAX_DIMS, MAX_NESTING,
};
use anedvd_base::{GgmlType, Metadata, MetadataArray, MetadataValue};
use std::io::Write;

struct PendingTensor {
    name: String,
    dtype: GgmlType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// Collects key/value pairs and tensors, then writes them as one GGUF file.
///
/// ```
/// use anedvd_base::{GgmlType, MetadataValue};
/// use anedvd_gguf::{GgufFile, GgufWriter};
/// let mut w = GgufWriter::new();
/// w.add_kv("general.architecture", MetadataValue::String("llama".into())).unwrap();
/// w.add_tensor("t", GgmlType::F32, &[2], 1.5f32.to_le_bytes().repeat(2)).unwrap();
/// let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
/// assert_eq!(f.tensor("t").unwrap().data.len(), 8);
/// ```
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty version-3 file with the default alignment (32).
    pub fn new() -> Self {
        Self {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Metadata::new(),
            tensors: Vec::new(),
        }
    }

    /// Writes a version-2 or version-3 header (the little-endian encodings
    /// are identical apart from the version field).
    pub fn set_version(&mut self, version: u32) -> Result<()> {
        if !(2..=3).contains(&version) {
            return Err(Error::Writer(format!(
                "cannot write GGUF version {version}"
            )));
        }
        self.version = version;
        Ok(())
    }

    /// Sets the data alignment and records it as `general.alignment` (u32).
    pub fn set_alignment(&mut self, alignment: u32) -> Result<()> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(Error::BadAlignment {
                reason: format!("{alignment} is not a nonzero power of two"),
            });
        }
        if alignment > crate::MAX_ALIGNMENT {
            return Err(Error::BadAlignment {
                reason: format!(
                    "{alignment} exceeds the cap of {} bytes",
                    crate::MAX_ALIGNMENT
                ),
            });
        }
        self.alignment = alignment.into();
        self.metadata
            .insert(ALIGNMENT_KEY, MetadataValue::U32(alignment));
        Ok(())
    }

    /// Adds a key/value pair; keys must be unique and non-empty. Adding
    /// `general.alignment` (as u32) also sets the alignment.
    pub fn add_kv(&mut self, key: impl Into<String>, value: MetadataValue) -> Result<()> {
        let key = key.into();
        if key.is_empty() {
            return Err(Error::EmptyKey { offset: 0 });
        }
        if self.metadata.contains(&key) {
            return Err(Error::DuplicateKey { key, offset: 0 });
        }
        if key == ALIGNMENT_KEY {
            match value {
                MetadataValue::U32(a) => return self.set_alignment(a),
                _ => {
                    return Err(Error::BadAlignment {
                        reason: format!("type is {}, must be u32", value.type_name()),
                    })
                }
            }
        }
        // Refuse what `GgufFile` would refuse to read back (found by the
        // gguf_roundtrip fuzz target: a 9-deep nested array was written, then
        // rejected by the reader).
        if let MetadataValue::Array(a) = &value {
            check_readable(&key, a, 0)?;
        }
        self.metadata.insert(key, value);
        Ok(())
    }

    /// Adds a tensor; `data` must be exactly the size its type and shape need.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: GgmlType,
        shape: &[u64],
        data: impl Into<Vec<u8>>,
    ) -> Result<()> {
        let name = name.into();
        let data = data.into();
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(Error::DuplicateTensor {
                tensor: name,
                offset: 0,
            });
        }
        if shape.len() > MAX_DIMS as usize {
            return Err(Error::TooManyDims {
                tensor: name,
                n_dims: u32::try_from(shape.len()).unwrap_or(u32::MAX),
                max: MAX_DIMS,
                offset: 0,
            });
        }
        let need = dtype
            .tensor_bytes(shape)
            .map_err(|e| Error::Writer(format!("tensor `{name}`: {e}")))?;
        if need != data.len() as u64 {
            return Err(Error::Writer(format!(
                "tensor `{name}`: {} bytes given, {dtype} {shape:?} needs {need}",
                data.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name,
            dtype,
            shape: shape.to_vec(),
            data,
        });
        Ok(())
    }

    /// Writes the file to `out`; returns the number of bytes written.
    pub fn write<W: Write>(&self, mut out: W) -> Result<u64> {
        let mut header = Vec::new();
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&self.version.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in self.metadata.iter() {
            put_str(&mut header, key);
            header.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            put_value(&mut header, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut header, &t.name);
            header.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in &t.shape {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&t.dtype.id().to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            offset = self.padded(offset + t.data.len() as u64)?;
        }
        let io = |source| Error::Io {
            path: Default::default(),
            source,
        };
        let data_offset = self.padded(header.len() as u64)?;
        header.resize(data_offset as usize, 0);
        out.write_all(&header).map_err(io)?;
        let mut written = data_offset;
        for t in &self.tensors {
            out.write_all(&t.data).map_err(io)?;
            written += t.data.len() as u64;
            let padded = self.padded(written)?;
            out.write_all(&vec![0u8; (padded - written) as usize])
                .map_err(io)?;
            written = padded;
        }
        out.flush().map_err(io)?;
        Ok(written)
    }

    /// The whole file as a byte vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write(&mut out)?;
        Ok(out)
    }

    fn padded(&self, x: u64) -> Result<u64> {
        align_up(x, self.alignment).ok_or_else(|| Error::Writer("file size overflows".into()))
    }
}

/// Errors if the reader would reject `array` (nested deeper than
/// [`MAX_NESTING`] or longer than [`MAX_ARRAY_LEN`]); `depth` counts the
/// arrays around it.
fn check_readable(key: &str, array: &MetadataArray, depth: usize) -> Result<()> {
    if depth >= MAX_NESTING {
        return Err(Error::Writer(format!(
            "metadata key `{key}`: arrays nested deeper than {MAX_NESTING}"
        )));
    }
    if array.len() as u64 > MAX_ARRAY_LEN {
        return Err(Error::Writer(format!(
            "metadata key `{key}`: array of {} elements (the reader accepts {MAX_ARRAY_LEN})",
            array.len()
        )));
    }
    if let MetadataArray::Array(items) = array {
        for item in items {
            check_readable(key, item, depth + 1)?;
        }
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &MetadataValue) {
    use MetadataValue as V;
    match value {
        V::U8(v) => out.push(*v),
        V::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::Bool(v) => out.push(u8::from(*v)),
        V::String(s) => put_str(out, s),
        V::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, array: &MetadataArray) {
    use MetadataArray as A;
    out.extend_from_slice(&(array.elem_type() as u32).to_le_bytes());
    out.extend_from_slice(&(array.len() as u64).to_le_bytes());
    macro_rules! le {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match array {
        A::U8(v) => out.extend_from_slice(v),
        A::I8(v) => le!(v),
        A::U16(v) => le!(v),
        A::I16(v) => le!(v),
        A::U32(v) => le!(v),
        A::I32(v) => le!(v),
        A::F32(v) => le!(v),
        A::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        A::String(s) => {
            for x in s {
                put_str(out, x);
            }
        }
        A::U64(v) => le!(v),
        A::I64(v) => le!(v),
        A::F64(v) => le!(v),
        A::Array(items) => {
            for item in items {
                put_array(out, item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufFile;
    use anedvd_base::{PackedStrings, ValueType};

    fn all_values() -> Vec<(&'static str, MetadataValue)> {
        use MetadataValue as V;
        vec![
            ("u8", V::U8(200)),
            ("i8", V::I8(-100)),
            ("u16", V::U16(65000)),
            ("i16", V::I16(-32000)),
            ("u32", V::U32(4_000_000_000)),
            ("i32", V::I32(-2_000_000_000)),
            ("f32", V::F32(-1.25e-3)),
            ("bool.t", V::Bool(true)),
            ("bool.f", V::Bool(false)),
            ("str", V::String("héllo ✓".into())),
            ("str.empty", V::String(String::new())),
            ("u64", V::U64(u64::MAX)),
            ("i64", V::I64(i64::MIN)),
            ("f64", V::F64(std::f64::consts::PI)),
            (
                "arr.empty",
                V::Array(MetadataArray::empty(ValueType::String)),
            ),
            (
                "arr.str",
                V::Array(PackedStrings::from_strs(["a", "", "✓"]).unwrap().into()),
            ),
            ("arr.u8", V::Array(vec![0u8, 255].into())),
            ("arr.i8", V::Array(vec![-128i8, 127].into())),
            ("arr.u16", V::Array(vec![1u16, 65535].into())),
            ("arr.i16", V::Array(vec![-32768i16, 2].into())),
            ("arr.u32", V::Array(vec![u32::MAX].into())),
            ("arr.i32", V::Array(vec![1i32, -2].into())),
            ("arr.f32", V::Array(vec![-0.0f32, 1e-40, f32::MAX].into())),
            ("arr.bool", V::Array(vec![true, false, true].into())),
            ("arr.u64", V::Array(vec![u64::MAX, 0].into())),
            ("arr.i64", V::Array(vec![i64::MIN].into())),
            ("arr.f64", V::Array(vec![std::f64::consts::E].into())),
            (
                "arr.f32.empty",
                V::Array(MetadataArray::empty(ValueType::F32)),
            ),
            (
                "arr.nested",
                V::Array(
                    vec![
                        MetadataArray::from(vec![1u8, 2]),
                        MetadataArray::empty(ValueType::Bool),
                        MetadataArray::from(vec![MetadataArray::from(vec![0.5f64])]),
                        MetadataArray::empty(ValueType::Array),
                    ]
                    .into(),
                ),
            ),
        ]
    }

    #[test]
    fn round_trip_all_value_types_v2_v3() {
        for version in [2, 3] {
            let mut w = GgufWriter::new();
            w.set_version(version).unwrap();
            for (k, v) in all_values() {
                w.add_kv(k, v).unwrap();
            }
            let f32s: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
            w.add_tensor("a", GgmlType::F32, &[3, 2], f32s.clone())
                .unwrap();
            w.add_tensor("b", GgmlType::Q8_0, &[32], vec![7u8; 34])
                .unwrap();
            w.add_tensor("empty", GgmlType::F16, &[0, 4], vec![])
                .unwrap();
            let bytes = w.to_bytes().unwrap();
            let f = GgufFile::from_bytes(bytes.clone()).unwrap();
            // Writing what was read reproduces the file byte for byte.
            let mut again = GgufWriter::new();
            again.set_version(version).unwrap();
            for (k, v) in f.metadata().iter() {
                again.add_kv(k, v.clone()).unwrap();
            }
            for name in ["a", "b", "empty"] {
                let t = f.tensor(name).unwrap();
                again
                    .add_tensor(name, t.info.dtype, &t.info.shape, t.data.to_vec())
                    .unwrap();
            }
            assert_eq!(again.to_bytes().unwrap(), bytes);
            assert_eq!(f.version(), version);
            let got: Vec<_> = f
                .metadata()
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            let want: Vec<_> = all_values()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            assert_eq!(got, want);
            assert_eq!(f.tensors().len(), 3);
            assert_eq!(f.tensor("a").unwrap().data, &f32s[..]);
            assert_eq!(f.tensor("a").unwrap().info.shape, vec![3, 2]);
            assert_eq!(f.tensor("b").unwrap().data, &[7u8; 34][..]);
            assert_eq!(f.tensor("empty").unwrap().data.len(), 0);
            assert_eq!(f.alignment(), 32);
            assert_eq!(f.data_offset() % 32, 0);
            assert_eq!(f.tensor_offset("a"), Some(f.data_offset()));
            assert_eq!(f.tensor_offset("b"), Some(f.data_offset() + 32));
        }
    }

    #[test]
    fn typed_arrays_encode_as_gguf() {
        let mut w = GgufWriter::new();
        w.add_kv("k", MetadataValue::Array(vec![-2i16, 3].into()))
            .unwrap();
        w.add_kv(
            "s",
            MetadataValue::Array(PackedStrings::from_strs(["ab", ""]).unwrap().into()),
        )
        .unwrap();
        let bytes = w.to_bytes().unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(&1u64.to_le_bytes());
        want.push(b'k');
        want.extend_from_slice(&9u32.to_le_bytes());
        want.extend_from_slice(&3u32.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(&[0xfe, 0xff, 3, 0]);
        want.extend_from_slice(&1u64.to_le_bytes());
        want.push(b's');
        want.extend_from_slice(&9u32.to_le_bytes());
        want.extend_from_slice(&8u32.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(b"ab");
        want.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(&bytes[24..24 + want.len()], &want[..]);
    }

    #[test]
    fn custom_alignment_round_trips() {
        let mut w = GgufWriter::new();
        w.set_alignment(64).unwrap();
        w.add_tensor("x", GgmlType::I8, &[3], vec![1, 2, 3])
            .unwrap();
        w.add_tensor("y", GgmlType::I8, &[1], vec![4]).unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(f.alignment(), 64);
        assert_eq!(f.relative_offsets(), &[0, 64]);
        assert_eq!(f.data_offset() % 64, 0);
        assert_eq!(f.file_size(), f.data_offset() + 128);
    }

    #[test]
    fn writer_refuses_bad_input() {
        let mut w = GgufWriter::new();
        w.add_kv("k", MetadataValue::U8(1)).unwrap();
        assert!(matches!(
            w.add_kv("k", MetadataValue::U8(1)),
            Err(Error::DuplicateKey { .. })
        ));
        assert!(w.add_kv("", MetadataValue::U8(1)).is_err());
        assert!(w.set_alignment(24).is_err());
        assert!(w.add_kv(ALIGNMENT_KEY, MetadataValue::U64(32)).is_err());
        assert!(w
            .add_tensor("t", GgmlType::F32, &[2], vec![0u8; 7])
            .is_err());
        assert!(w.add_tensor("t", GgmlType::Q4K, &[100], vec![]).is_err());
        assert!(w
            .add_tensor("t", GgmlType::F32, &[1, 1, 1, 1, 1], vec![0u8; 4])
            .is_err());
        w.add_tensor("t", GgmlType::F32, &[1], vec![0u8; 4])
            .unwrap();
        assert!(w
            .add_tensor("t", GgmlType::F32, &[1], vec![0u8; 4])
            .is_err());
        assert!(w.set_version(1).is_err());
    }

    /// Regression (gguf_roundtrip fuzz target): the writer accepted arrays
    /// nested deeper than the reader reads, so its output did not parse.
    #[test]
    fn writer_refuses_arrays_the_reader_rejects() {
        let nest = |levels: usize| {
            let mut a = MetadataArray::U8(vec![1]);
            for _ in 1..levels {
                a = MetadataArray::Array(vec![a]);
            }
            MetadataValue::Array(a)
        };
        let mut w = GgufWriter::new();
        w.add_kv("ok", nest(crate::MAX_NESTING)).unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(f.metadata().get("ok"), Some(&nest(crate::MAX_NESTING)));
        assert!(matches!(
            w.add_kv("deep", nest(crate::MAX_NESTING + 1)),
            Err(Error::Writer(_))
        ));
        assert!(!w.metadata.contains("deep"));
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    }
}
