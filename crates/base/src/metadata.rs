//! Typed key/value metadata, as stored in GGUF headers (and synthesised from
//! `config.json` for Hugging Face directories).

use crate::{Error, MetadataArray, PackedStrings, Result};
use std::collections::HashMap;

/// The value type tags of GGUF metadata (`gguf_type`), in file id order.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// The type with file id `id`, if known.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Lower-case name, as gguf-dump prints it.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    /// A homogeneous array, stored packed by element type (the element type
    /// is kept for empty arrays too, so a writer reproduces the file exactly).
    Array(MetadataArray),
}

impl MetadataValue {
    /// The type tag of this value.
    pub fn value_type(&self) -> ValueType {
        use MetadataValue as V;
        match self {
            V::U8(_) => ValueType::U8,
            V::I8(_) => ValueType::I8,
            V::U16(_) => ValueType::U16,
            V::I16(_) => ValueType::I16,
            V::U32(_) => ValueType::U32,
            V::I32(_) => ValueType::I32,
            V::F32(_) => ValueType::F32,
            V::Bool(_) => ValueType::Bool,
            V::String(_) => ValueType::String,
            V::U64(_) => ValueType::U64,
            V::I64(_) => ValueType::I64,
            V::F64(_) => ValueType::F64,
            V::Array(..) => ValueType::Array,
        }
    }

    /// A short human description of the type (`u32`, `array[string]`).
    pub fn type_name(&self) -> String {
        match self {
            MetadataValue::Array(a) => format!("array[{}]", a.elem_type().name()),
            v => v.value_type().name().to_string(),
        }
    }

    /// The value as a signed integer if it is any integer type that fits.
    pub fn as_i64(&self) -> Option<i64> {
        use MetadataValue as V;
        match *self {
            V::U8(v) => Some(v.into()),
            V::I8(v) => Some(v.into()),
            V::U16(v) => Some(v.into()),
            V::I16(v) => Some(v.into()),
            V::U32(v) => Some(v.into()),
            V::I32(v) => Some(v.into()),
            V::U64(v) => i64::try_from(v).ok(),
            V::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as `f64` if it is any number (integers are converted).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetadataValue::F32(v) => Some(v.into()),
            MetadataValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The value as a string slice if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetadataValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool if it is a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetadataValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The array if this is an array.
    pub fn as_array(&self) -> Option<&MetadataArray> {
        match self {
            MetadataValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// An ordered key/value map with typed accessors. Keys keep file order.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    entries: Vec<(String, MetadataValue)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts or replaces `key`. Replacing keeps the original position.
    pub fn insert(&mut self, key: impl Into<String>, value: MetadataValue) {
        let key = key.into();
        if let Some(&i) = self.index.get(&key) {
            self.entries[i].1 = value;
        } else {
            self.index.insert(key.clone(), self.entries.len());
            self.entries.push((key, value));
        }
    }

    /// True if `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &MetadataValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn require(&self, key: &str) -> Result<&MetadataValue> {
        self.get(key).ok_or_else(|| Error::MissingKey {
            key: key.to_string(),
        })
    }

    fn wrong(key: &str, expected: &'static str, v: &MetadataValue) -> Error {
        Error::WrongType {
            key: key.to_string(),
            expected,
            found: v.type_name(),
        }
    }

    /// A required string.
    pub fn str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "string", v))
    }

    /// An optional string (present but of another type is an error).
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        self.get(key)
            .map(|v| v.as_str().ok_or_else(|| Self::wrong(key, "string", v)))
            .transpose()
    }

    /// A required non-negative integer that fits `u64`.
    pub fn u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        match v {
            MetadataValue::U64(x) => Ok(*x),
            _ => {
                let i = v.as_i64().ok_or_else(|| Self::wrong(key, "integer", v))?;
                u64::try_from(i).map_err(|_| Error::BadValue {
                    key: key.to_string(),
                    reason: format!("{i} is negative"),
                })
            }
        }
    }

    /// An optional non-negative integer.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        if self.contains(key) {
            self.u64(key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A required number (integers are converted).
    pub fn f64(&self, key: &str) -> Result<f64> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| Self::wrong(key, "number", v))
    }

    /// An optional number.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        self.get(key)
            .map(|v| v.as_f64().ok_or_else(|| Self::wrong(key, "number", v)))
            .transpose()
    }

    /// An optional bool.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.get(key)
            .map(|v| v.as_bool().ok_or_else(|| Self::wrong(key, "bool", v)))
            .transpose()
    }

    /// A required array.
    pub fn array(&self, key: &str) -> Result<&MetadataArray> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| Self::wrong(key, "array", v))
    }

    /// An optional array.
    pub fn opt_array(&self, key: &str) -> Result<Option<&MetadataArray>> {
        self.get(key)
            .map(|v| v.as_array().ok_or_else(|| Self::wrong(key, "array", v)))
            .transpose()
    }

    /// A required array of strings.
    pub fn strings(&self, key: &str) -> Result<&PackedStrings> {
        let v = self.require(key)?;
        v.as_array()
            .and_then(MetadataArray::as_strings)
            .ok_or_else(|| Self::wrong(key, "array[string]", v))
    }

    /// An optional array of strings (present but of another type is an error).
    pub fn opt_strings(&self, key: &str) -> Result<Option<&PackedStrings>> {
        if self.contains(key) {
            self.strings(key).map(Some)
        } else {
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_access() {
        let mut m = Metadata::new();
        m.insert("a", MetadataValue::U32(7));
        m.insert("b", MetadataValue::String("x".into()));
        m.insert("c", MetadataValue::I32(-1));
        m.insert("a", MetadataValue::U32(8));
        assert_eq!(m.u64("a").unwrap(), 8);
        assert_eq!(m.iter().next().unwrap().0, "a");
        assert_eq!(m.str("b").unwrap(), "x");
        assert!(matches!(m.u64("b"), Err(Error::WrongType { .. })));
        assert!(matches!(m.u64("c"), Err(Error::BadValue { .. })));
        assert!(matches!(m.str("zz"), Err(Error::MissingKey { .. })));
        assert_eq!(m.opt_u64("zz").unwrap(), None);
        assert_eq!(m.f64("c").unwrap(), -1.0);
        let toks = PackedStrings::from_strs(["<s>", "a"]).unwrap();
        m.insert("t", MetadataValue::Array(toks.clone().into()));
        m.insert("f", MetadataValue::Array(vec![1.5f32].into()));
        assert_eq!(m.strings("t").unwrap(), &toks);
        assert_eq!(m.opt_strings("zz").unwrap(), None);
        assert_eq!(m.array("f").unwrap().as_f32_slice(), Some(&[1.5][..]));
        assert_eq!(m.get("f").unwrap().type_name(), "array[f32]");
        assert!(matches!(
            m.strings("f"),
            Err(Error::WrongType {
                expected: "array[string]",
                ..
            })
        ));
        assert!(matches!(m.opt_strings("b"), Err(Error::WrongType { .. })));
        assert!(matches!(m.array("b"), Err(Error::WrongType { .. })));
    }
}
