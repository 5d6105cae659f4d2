//! Typed, packed metadata arrays: one vector per element type, and strings
//! packed end to end in one buffer, so a 262k-entry vocabulary costs a few
//! allocations instead of one enum (and one `String`) per element.

use crate::{Error, MetadataValue, Result, ValueType};
use std::fmt;

/// UTF-8 strings packed into one buffer, with one `u32` end offset per string
/// (string `i` spans `ends[i - 1]..ends[i]`). The buffer holds at most
/// `u32::MAX` bytes.
///
/// ```
/// use anedvd_base::PackedStrings;
/// let s = PackedStrings::from_strs(["a", "", "héllo"]).unwrap();
/// assert_eq!(s.len(), 3);
/// assert_eq!(s.get(2), Some("héllo"));
/// assert_eq!(s.iter().collect::<Vec<_>>(), ["a", "", "héllo"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PackedStrings {
    data: String,
    ends: Vec<u32>,
}

impl PackedStrings {
    /// No strings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `strings` strings of `bytes` bytes in all.
    pub fn with_capacity(strings: usize, bytes: usize) -> Self {
        Self {
            data: String::with_capacity(bytes),
            ends: Vec::with_capacity(strings),
        }
    }

    /// The strings of `items`, packed.
    pub fn from_strs<I, S>(items: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Self::new();
        for s in items {
            out.push(s.as_ref())?;
        }
        Ok(out)
    }

    /// Appends one string; fails once the buffer would pass `u32::MAX` bytes.
    pub fn push(&mut self, s: &str) -> Result<()> {
        let end = self
            .data
            .len()
            .checked_add(s.len())
            .and_then(|e| u32::try_from(e).ok())
            .ok_or(Error::PackedTooLarge {
                max: u32::MAX.into(),
            })?;
        self.data.push_str(s);
        self.ends.push(end);
        Ok(())
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there are no strings.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `i`, if in range.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = match i.checked_sub(1) {
            Some(prev) => *self.ends.get(prev)? as usize,
            None => 0,
        };
        self.data.get(start..end)
    }

    /// The strings in order.
    pub fn iter(&self) -> Strs<'_> {
        Strs {
            data: &self.data,
            ends: self.ends.iter(),
            start: 0,
        }
    }

    /// Total bytes of text.
    pub fn text_bytes(&self) -> usize {
        self.data.len()
    }

    /// Heap bytes held (buffer and offsets, by capacity).
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() + self.ends.capacity() * std::mem::size_of::<u32>()
    }
}

impl fmt::Debug for PackedStrings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a PackedStrings {
    type Item = &'a str;
    type IntoIter = Strs<'a>;
    fn into_iter(self) -> Strs<'a> {
        self.iter()
    }
}

/// Iterator over the strings of a [`PackedStrings`].
#[derive(Clone, Debug)]
pub struct Strs<'a> {
    data: &'a str,
    ends: std::slice::Iter<'a, u32>,
    start: usize,
}

impl<'a> Iterator for Strs<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let end = *self.ends.next()? as usize;
        // Every end was recorded after a whole `&str` was appended, so the
        // range is in bounds and on char boundaries.
        let s = self.data.get(self.start..end).unwrap_or_default();
        self.start = end;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for Strs<'_> {}

/// A homogeneous metadata array, stored packed by element type. The variant
/// is the element type, so an empty array keeps its type and a writer
/// reproduces the file exactly. Nested arrays may differ in element type, as
/// in GGUF.
///
/// ```
/// use anedvd_base::{MetadataArray, MetadataValue, ValueType};
/// let a = MetadataArray::from(vec![0.5f32, -1.0]);
/// assert_eq!(a.elem_type(), ValueType::F32);
/// assert_eq!(a.as_f32_slice(), Some(&[0.5, -1.0][..]));
/// assert_eq!(a.f64_at(1), Some(-1.0));
/// assert_eq!(a.get(0), Some(MetadataValue::F32(0.5)));
/// ```
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(PackedStrings),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// Arrays of arrays; each inner array has its own element type.
    Array(Vec<MetadataArray>),
}

/// Applies `$f` to the vector of any variant except `String` and `Array`
/// (handled by `$s` and `$a`).
macro_rules! each {
    ($a:expr, $v:ident => $f:expr, String($p:ident) => $s:expr, Array($n:ident) => $arr:expr) => {
        match $a {
            MetadataArray::U8($v) => $f,
            MetadataArray::I8($v) => $f,
            MetadataArray::U16($v) => $f,
            MetadataArray::I16($v) => $f,
            MetadataArray::U32($v) => $f,
            MetadataArray::I32($v) => $f,
            MetadataArray::F32($v) => $f,
            MetadataArray::Bool($v) => $f,
            MetadataArray::U64($v) => $f,
            MetadataArray::I64($v) => $f,
            MetadataArray::F64($v) => $f,
            MetadataArray::String($p) => $s,
            MetadataArray::Array($n) => $arr,
        }
    };
}

impl MetadataArray {
    /// An empty array of element type `ty`.
    pub fn empty(ty: ValueType) -> Self {
        use MetadataArray as A;
        match ty {
            ValueType::U8 => A::U8(Vec::new()),
            ValueType::I8 => A::I8(Vec::new()),
            ValueType::U16 => A::U16(Vec::new()),
            ValueType::I16 => A::I16(Vec::new()),
            ValueType::U32 => A::U32(Vec::new()),
            ValueType::I32 => A::I32(Vec::new()),
            ValueType::F32 => A::F32(Vec::new()),
            ValueType::Bool => A::Bool(Vec::new()),
            ValueType::String => A::String(PackedStrings::new()),
            ValueType::U64 => A::U64(Vec::new()),
            ValueType::I64 => A::I64(Vec::new()),
            ValueType::F64 => A::F64(Vec::new()),
            ValueType::Array => A::Array(Vec::new()),
        }
    }

    /// The element type.
    pub fn elem_type(&self) -> ValueType {
        use MetadataArray as A;
        match self {
            A::U8(_) => ValueType::U8,
            A::I8(_) => ValueType::I8,
            A::U16(_) => ValueType::U16,
            A::I16(_) => ValueType::I16,
            A::U32(_) => ValueType::U32,
            A::I32(_) => ValueType::I32,
            A::F32(_) => ValueType::F32,
            A::Bool(_) => ValueType::Bool,
            A::String(_) => ValueType::String,
            A::U64(_) => ValueType::U64,
            A::I64(_) => ValueType::I64,
            A::F64(_) => ValueType::F64,
            A::Array(_) => ValueType::Array,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each!(self, v => v.len(), String(s) => s.len(), Array(a) => a.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as an owned value (a string or nested array is copied).
    pub fn get(&self, i: usize) -> Option<MetadataValue> {
        use MetadataArray as A;
        use MetadataValue as V;
        Some(match self {
            A::U8(v) => V::U8(*v.get(i)?),
            A::I8(v) => V::I8(*v.get(i)?),
            A::U16(v) => V::U16(*v.get(i)?),
            A::I16(v) => V::I16(*v.get(i)?),
            A::U32(v) => V::U32(*v.get(i)?),
            A::I32(v) => V::I32(*v.get(i)?),
            A::F32(v) => V::F32(*v.get(i)?),
            A::Bool(v) => V::Bool(*v.get(i)?),
            A::String(s) => V::String(s.get(i)?.to_string()),
            A::U64(v) => V::U64(*v.get(i)?),
            A::I64(v) => V::I64(*v.get(i)?),
            A::F64(v) => V::F64(*v.get(i)?),
            A::Array(a) => V::Array(a.get(i)?.clone()),
        })
    }

    /// The elements as owned values, in order (see [`MetadataArray::get`]).
    pub fn iter(&self) -> impl Iterator<Item = MetadataValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Element `i` as a signed integer if the array holds integers and the
    /// element fits `i64`.
    pub fn i64_at(&self, i: usize) -> Option<i64> {
        use MetadataArray as A;
        match self {
            A::U8(v) => v.get(i).map(|&x| x.into()),
            A::I8(v) => v.get(i).map(|&x| x.into()),
            A::U16(v) => v.get(i).map(|&x| x.into()),
            A::I16(v) => v.get(i).map(|&x| x.into()),
            A::U32(v) => v.get(i).map(|&x| x.into()),
            A::I32(v) => v.get(i).map(|&x| x.into()),
            A::U64(v) => v.get(i).and_then(|&x| i64::try_from(x).ok()),
            A::I64(v) => v.get(i).copied(),
            _ => None,
        }
    }

    /// Element `i` as `f64` if the array holds numbers (integers are
    /// converted).
    pub fn f64_at(&self, i: usize) -> Option<f64> {
        match self {
            MetadataArray::F32(v) => v.get(i).map(|&x| x.into()),
            MetadataArray::F64(v) => v.get(i).copied(),
            _ => self.i64_at(i).map(|x| x as f64),
        }
    }

    /// True for arrays of integers or floats.
    pub fn is_numeric(&self) -> bool {
        !matches!(
            self,
            MetadataArray::Bool(_) | MetadataArray::String(_) | MetadataArray::Array(_)
        )
    }

    /// The strings, if this is a string array.
    pub fn as_strings(&self) -> Option<&PackedStrings> {
        match self {
            MetadataArray::String(s) => Some(s),
            _ => None,
        }
    }

    /// The values, if this is an `f32` array.
    pub fn as_f32_slice(&self) -> Option<&[f32]> {
        match self {
            MetadataArray::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The values, if this is an `i32` array.
    pub fn as_i32_slice(&self) -> Option<&[i32]> {
        match self {
            MetadataArray::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The values, if this is a `u32` array.
    pub fn as_u32_slice(&self) -> Option<&[u32]> {
        match self {
            MetadataArray::U32(v) => Some(v),
            _ => None,
        }
    }

    /// The values, if this is a bool array.
    pub fn as_bool_slice(&self) -> Option<&[bool]> {
        match self {
            MetadataArray::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The inner arrays, if this is an array of arrays.
    pub fn as_arrays(&self) -> Option<&[MetadataArray]> {
        match self {
            MetadataArray::Array(v) => Some(v),
            _ => None,
        }
    }

    /// Heap bytes held, by capacity (nested arrays included).
    pub fn heap_bytes(&self) -> usize {
        each!(
            self,
            v => vec_bytes(v.capacity(), v),
            String(s) => s.heap_bytes(),
            Array(a) => a.capacity() * std::mem::size_of::<MetadataArray>()
                + a.iter().map(MetadataArray::heap_bytes).sum::<usize>()
        )
    }
}

/// Heap bytes of a vector of `capacity` elements like those of `_sample`.
fn vec_bytes<T>(capacity: usize, _sample: &[T]) -> usize {
    capacity * std::mem::size_of::<T>()
}

macro_rules! from_vec {
    ($($t:ty => $v:ident),*) => {$(
        impl From<Vec<$t>> for MetadataArray {
            fn from(v: Vec<$t>) -> Self {
                MetadataArray::$v(v)
            }
        }
    )*};
}

from_vec!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    f32 => F32, bool => Bool, u64 => U64, i64 => I64, f64 => F64, MetadataArray => Array);

impl From<PackedStrings> for MetadataArray {
    fn from(s: PackedStrings) -> Self {
        MetadataArray::String(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_strings() {
        let s = PackedStrings::from_strs(["", "ab", "", "✓"]).unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s.iter().len(), 4);
        assert_eq!(s.iter().collect::<Vec<_>>(), ["", "ab", "", "✓"]);
        assert_eq!(s.get(0), Some(""));
        assert_eq!(s.get(3), Some("✓"));
        assert_eq!(s.get(4), None);
        assert_eq!(s.text_bytes(), 5);
        assert_eq!(format!("{s:?}"), r#"["", "ab", "", "✓"]"#);
        assert!(PackedStrings::new().get(0).is_none());
    }

    #[test]
    fn typed_access() {
        let a = MetadataArray::from(vec![1u64, u64::MAX]);
        assert_eq!(a.len(), 2);
        assert_eq!(a.i64_at(0), Some(1));
        assert_eq!(a.i64_at(1), None);
        assert_eq!(a.f64_at(0), Some(1.0));
        assert_eq!(a.get(1), Some(MetadataValue::U64(u64::MAX)));
        assert_eq!(a.get(2), None);
        assert!(a.is_numeric());
        let i = MetadataArray::from(vec![-3i32, 4]);
        assert_eq!(i.as_i32_slice(), Some(&[-3, 4][..]));
        assert_eq!(i.as_f32_slice(), None);
        assert_eq!(i.heap_bytes(), 8);
        let s = MetadataArray::from(PackedStrings::from_strs(["x"]).unwrap());
        assert_eq!(s.f64_at(0), None);
        assert_eq!(s.get(0), Some(MetadataValue::String("x".into())));
        let n = MetadataArray::from(vec![MetadataArray::empty(ValueType::Bool), s.clone()]);
        assert_eq!(n.elem_type(), ValueType::Array);
        assert_eq!(n.get(1), Some(MetadataValue::Array(s)));
        assert_eq!(
            n.iter().map(|v| v.type_name()).collect::<Vec<_>>(),
            ["array[bool]", "array[string]"]
        );
        // The hostile-input memory bound in anedvd-gguf's MAX_ARRAY_LEN doc
        // assumes a nested array costs at most 48 bytes.
        assert!(std::mem::size_of::<MetadataArray>() <= 48);
        for id in 0..13 {
            let ty = ValueType::from_id(id).unwrap();
            assert_eq!(MetadataArray::empty(ty).elem_type(), ty);
            assert!(MetadataArray::empty(ty).is_empty());
        }
    }
}
