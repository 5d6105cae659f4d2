//! Parses the GGUF header (magic, version, counts, metadata, tensor infos) and
//! validates the tensor data layout against the file size.

use crate::cursor::Cursor;
use crate::{Error, Result, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_LEN, MAX_DIMS, MAX_NESTING};
use anedvd_base::{
    GgmlType, Metadata, MetadataArray, MetadataValue, PackedStrings, TensorInfo, ValueType,
};
use std::collections::HashSet;

/// Smallest possible encoded key/value pair: a 1-byte key (8 + 1), a type tag
/// (4) and a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// Smallest possible encoded tensor info: empty name (8), rank (4), type (4),
/// offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// Everything the header says, validated.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) version: u32,
    pub(crate) metadata: Metadata,
    pub(crate) tensors: Vec<TensorInfo>,
    /// Per tensor, the data offset relative to `data_offset`.
    pub(crate) offsets: Vec<u64>,
    pub(crate) alignment: u64,
    pub(crate) data_offset: u64,
}

/// Parses and validates a whole GGUF file held in `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Layout> {
    let mut c = Cursor::new(buf);
    let magic = c.take(4, "magic")?;
    if magic != MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(Error::BadMagic { found });
    }
    let version = c.u32("version")?;
    check_version(version)?;

    let tensor_count_offset = c.pos();
    let tensor_count = c.u64("tensor count")?;
    let kv_count_offset = c.pos();
    let kv_count = c.u64("metadata count")?;
    // Both counts are checked against what is left before anything is
    // allocated. The tensor bound is loose here and exact once the metadata
    // has been read.
    c.check_count(
        tensor_count,
        MIN_TENSOR_INFO_BYTES,
        "tensor",
        tensor_count_offset,
    )?;
    let kv_count = c.check_count(
        kv_count,
        MIN_KV_BYTES,
        "metadata key/value",
        kv_count_offset,
    )?;

    let mut metadata = Metadata::new();
    for _ in 0..kv_count {
        let key_offset = c.pos();
        let key = c.string("metadata key")?;
        if key.is_empty() {
            return Err(Error::EmptyKey { offset: key_offset });
        }
        if metadata.contains(&key) {
            return Err(Error::DuplicateKey {
                key,
                offset: key_offset,
            });
        }
        let tag_offset = c.pos();
        let tag = c.u32("value type")?;
        let ty = value_type(tag, &key, tag_offset)?;
        let value = read_value(&mut c, ty, &key, 0)?;
        metadata.insert(key, value);
    }
    let alignment = alignment_of(&metadata)?;

    let tensor_count = c.check_count(
        tensor_count,
        MIN_TENSOR_INFO_BYTES,
        "tensor",
        tensor_count_offset,
    )?;
    let mut tensors = Vec::with_capacity(tensor_count);
    let mut offsets = Vec::with_capacity(tensor_count);
    let mut names = HashSet::with_capacity(tensor_count);
    for _ in 0..tensor_count {
        let (info, offset) = read_tensor_info(&mut c, &mut names)?;
        tensors.push(info);
        offsets.push(offset);
    }

    let header_end = c.pos();
    let data_offset = align_up(header_end, alignment).ok_or(Error::Truncated {
        offset: header_end,
        what: "alignment padding",
        needed: alignment,
        available: 0,
    })?;
    let file_size = buf.len() as u64;
    if !tensors.is_empty() && data_offset > file_size {
        return Err(Error::Truncated {
            offset: header_end,
            what: "alignment padding before tensor data",
            needed: data_offset - header_end,
            available: file_size - header_end,
        });
    }
    check_data_layout(&tensors, &offsets, alignment, data_offset, file_size)?;

    Ok(Layout {
        version,
        metadata,
        tensors,
        offsets,
        alignment,
        data_offset,
    })
}

fn check_version(version: u32) -> Result<()> {
    if version != 0 && version & 0xFFFF == 0 {
        return Err(Error::BigEndian { raw: version });
    }
    match version {
        2 | 3 => Ok(()),
        1 => Err(Error::UnsupportedVersion {
            version,
            reason:
                "GGUF v1 (32-bit counts) is obsolete; re-convert the model with a current llama.cpp",
        }),
        0 => Err(Error::UnsupportedVersion {
            version,
            reason: "version 0 does not exist",
        }),
        _ => Err(Error::UnsupportedVersion {
            version,
            reason: "newer than version 3, the latest this reader knows",
        }),
    }
}

fn value_type(tag: u32, key: &str, offset: u64) -> Result<ValueType> {
    ValueType::from_id(tag).ok_or_else(|| Error::UnknownValueType {
        key: key.to_string(),
        id: tag,
        offset,
    })
}

/// Minimal encoded size of one value of type `ty` (used to cap array lengths).
fn min_value_bytes(ty: ValueType) -> u64 {
    use ValueType::*;
    match ty {
        U8 | I8 | Bool => 1,
        U16 | I16 => 2,
        U32 | I32 | F32 => 4,
        U64 | I64 | F64 | String => 8,
        Array => 4 + 8,
    }
}

fn read_value(c: &mut Cursor<'_>, ty: ValueType, key: &str, depth: usize) -> Result<MetadataValue> {
    use MetadataValue as V;
    const W: &str = "metadata value";
    Ok(match ty {
        ValueType::U8 => V::U8(c.u8(W)?),
        ValueType::I8 => V::I8(c.u8(W)? as i8),
        ValueType::U16 => V::U16(c.u16(W)?),
        ValueType::I16 => V::I16(c.u16(W)? as i16),
        ValueType::U32 => V::U32(c.u32(W)?),
        ValueType::I32 => V::I32(c.u32(W)? as i32),
        ValueType::F32 => V::F32(f32::from_bits(c.u32(W)?)),
        ValueType::U64 => V::U64(c.u64(W)?),
        ValueType::I64 => V::I64(c.u64(W)? as i64),
        ValueType::F64 => V::F64(f64::from_bits(c.u64(W)?)),
        ValueType::Bool => {
            let offset = c.pos();
            match c.u8(W)? {
                0 => V::Bool(false),
                1 => V::Bool(true),
                value => {
                    return Err(Error::BadBool {
                        key: key.to_string(),
                        value,
                        offset,
                    })
                }
            }
        }
        ValueType::String => V::String(c.string("metadata string")?),
        ValueType::Array => V::Array(read_array(c, key, depth)?),
    })
}

/// Reads an array (element type, length, elements) into typed storage. The
/// length is capped and checked against the remaining bytes before anything
/// is allocated; scalar elements are decoded in one pass over their bytes.
fn read_array(c: &mut Cursor<'_>, key: &str, depth: usize) -> Result<MetadataArray> {
    use MetadataArray as A;
    const W: &str = "metadata array";
    let tag_offset = c.pos();
    if depth >= MAX_NESTING {
        return Err(Error::NestingTooDeep {
            key: key.to_string(),
            max: MAX_NESTING,
            offset: tag_offset,
        });
    }
    let elem = value_type(c.u32("array element type")?, key, tag_offset)?;
    let len_offset = c.pos();
    let len = c.u64("array length")?;
    if len > MAX_ARRAY_LEN {
        return Err(Error::CountTooLarge {
            what: "array element (above MAX_ARRAY_LEN)",
            count: len,
            offset: len_offset,
            available: c.remaining(),
        });
    }
    let n = c.check_count(len, min_value_bytes(elem), "array element", len_offset)?;
    Ok(match elem {
        ValueType::U8 => A::U8(c.take(len, W)?.to_vec()),
        ValueType::I8 => A::I8(c.take(len, W)?.iter().map(|&b| b as i8).collect()),
        ValueType::U16 => A::U16(scalars(c, n, u16::from_le_bytes)?),
        ValueType::I16 => A::I16(scalars(c, n, i16::from_le_bytes)?),
        ValueType::U32 => A::U32(scalars(c, n, u32::from_le_bytes)?),
        ValueType::I32 => A::I32(scalars(c, n, i32::from_le_bytes)?),
        ValueType::F32 => A::F32(scalars(c, n, f32::from_le_bytes)?),
        ValueType::U64 => A::U64(scalars(c, n, u64::from_le_bytes)?),
        ValueType::I64 => A::I64(scalars(c, n, i64::from_le_bytes)?),
        ValueType::F64 => A::F64(scalars(c, n, f64::from_le_bytes)?),
        ValueType::Bool => {
            let start = c.pos();
            let bytes = c.take(len, W)?;
            if let Some((i, &value)) = bytes.iter().enumerate().find(|&(_, &b)| b > 1) {
                return Err(Error::BadBool {
                    key: key.to_string(),
                    value,
                    offset: start + i as u64,
                });
            }
            A::Bool(bytes.iter().map(|&b| b == 1).collect())
        }
        ValueType::String => A::String(read_strings(c, n, len_offset)?),
        ValueType::Array => {
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_array(c, key, depth + 1)?);
            }
            A::Array(items)
        }
    })
}

/// `n` little-endian scalars of `N` bytes each, decoded by `decode`. The
/// caller has checked that `n * N` bytes remain.
fn scalars<const N: usize, T>(
    c: &mut Cursor<'_>,
    n: usize,
    decode: fn([u8; N]) -> T,
) -> Result<Vec<T>> {
    let bytes = c.take(n as u64 * N as u64, "metadata array")?;
    Ok(bytes
        .chunks_exact(N)
        .map(|b| {
            let mut a = [0u8; N];
            a.copy_from_slice(b);
            decode(a)
        })
        .collect())
}

/// `n` strings packed into one buffer. A first pass over a copy of the
/// cursor checks every length against the bytes left and sums them, so the
/// buffer is allocated once, at its exact size, and only for bytes that
/// exist.
fn read_strings(c: &mut Cursor<'_>, n: usize, len_offset: u64) -> Result<PackedStrings> {
    const W: &str = "metadata string";
    let mut probe = c.clone();
    let mut total = 0u64;
    for _ in 0..n {
        let len = probe.u64(W)?;
        probe.take(len, W)?;
        // Each length is at most the bytes left, so the sum fits the buffer.
        total += len;
    }
    let available = c.remaining();
    let too_large = || Error::CountTooLarge {
        what: "string array byte (above 4 GiB)",
        count: total,
        offset: len_offset,
        available,
    };
    let bytes = usize::try_from(total)
        .ok()
        .filter(|&b| b <= u32::MAX as usize)
        .ok_or_else(too_large)?;
    let mut out = PackedStrings::with_capacity(n, bytes);
    for _ in 0..n {
        out.push(c.str(W)?).map_err(|_| too_large())?;
    }
    Ok(out)
}

fn alignment_of(metadata: &Metadata) -> Result<u64> {
    let Some(value) = metadata.get(crate::ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let MetadataValue::U32(a) = *value else {
        return Err(Error::BadAlignment {
            reason: format!("type is {}, must be u32", value.type_name()),
        });
    };
    if a == 0 || !a.is_power_of_two() {
        return Err(Error::BadAlignment {
            reason: format!("{a} is not a nonzero power of two"),
        });
    }
    if a > crate::MAX_ALIGNMENT {
        return Err(Error::BadAlignment {
            reason: format!("{a} exceeds the cap of {} bytes", crate::MAX_ALIGNMENT),
        });
    }
    Ok(a.into())
}

fn read_tensor_info(c: &mut Cursor<'_>, names: &mut HashSet<String>) -> Result<(TensorInfo, u64)> {
    let name_offset = c.pos();
    let name = c.string("tensor name")?;
    if !names.insert(name.clone()) {
        return Err(Error::DuplicateTensor {
            tensor: name,
            offset: name_offset,
        });
    }
    let dims_offset = c.pos();
    let n_dims = c.u32("tensor rank")?;
    if n_dims > MAX_DIMS {
        return Err(Error::TooManyDims {
            tensor: name,
            n_dims,
            max: MAX_DIMS,
            offset: dims_offset,
        });
    }
    let mut shape = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        shape.push(c.u64("tensor dimension")?);
    }
    // ggml stores `ne` as int64: every dimension and the element count must be
    // representable there.
    let fits = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .is_some_and(|n| n <= i64::MAX as u64)
        && shape.iter().all(|&d| d <= i64::MAX as u64);
    if !fits {
        return Err(Error::ShapeOverflow {
            tensor: name,
            shape,
        });
    }
    let type_offset = c.pos();
    let type_id = c.u32("tensor type")?;
    let dtype = GgmlType::from_id(type_id).map_err(|_| Error::UnknownGgmlType {
        tensor: name.clone(),
        id: type_id,
        offset: type_offset,
    })?;
    let size_bytes = dtype.tensor_bytes(&shape).map_err(|e| match e {
        anedvd_base::Error::RaggedRow { elements, .. } => Error::RaggedRow {
            tensor: name.clone(),
            ty: dtype,
            elements,
        },
        _ => Error::ShapeOverflow {
            tensor: name.clone(),
            shape: shape.clone(),
        },
    })?;
    let offset = c.u64("tensor data offset")?;
    Ok((
        TensorInfo {
            name,
            dtype,
            shape,
            size_bytes,
        },
        offset,
    ))
}

/// Rounds `x` up to a multiple of the power of two `align`; `None` on overflow.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    x.checked_add(mask).map(|v| v & !mask)
}

fn check_data_layout(
    tensors: &[TensorInfo],
    offsets: &[u64],
    alignment: u64,
    data_offset: u64,
    file_size: u64,
) -> Result<()> {
    let mut ranges = Vec::with_capacity(tensors.len());
    for (info, &offset) in tensors.iter().zip(offsets) {
        if !offset.is_multiple_of(alignment) {
            return Err(Error::MisalignedTensor {
                tensor: info.name.clone(),
                offset,
                alignment,
            });
        }
        let start = data_offset.checked_add(offset);
        let end = start.and_then(|s| s.checked_add(info.size_bytes));
        match (start, end) {
            (Some(start), Some(end)) if end <= file_size => ranges.push((start, end, info)),
            _ => {
                let start = data_offset.saturating_add(offset);
                return Err(Error::TensorOutOfBounds {
                    tensor: info.name.clone(),
                    start,
                    end: start.saturating_add(info.size_bytes),
                    file_size,
                });
            }
        }
    }
    ranges.sort_by_key(|&(start, end, _)| (start, end));
    // The non-empty tensor reaching furthest so far; every later start must
    // be at or past its end. Empty tensors occupy no bytes and overlap nothing.
    let mut furthest: Option<(u64, &TensorInfo)> = None;
    for &(start, end, info) in &ranges {
        if end == start {
            continue;
        }
        if let Some((reach, first)) = furthest {
            if start < reach {
                return Err(Error::OverlappingTensors {
                    first: first.name.clone(),
                    second: info.name.clone(),
                    offset: start - data_offset,
                });
            }
        }
        if furthest.is_none_or(|(reach, _)| end > reach) {
            furthest = Some((end, info));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_works() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(u64::MAX - 3, 32), None);
    }

    #[test]
    fn versions() {
        assert!(check_version(2).is_ok());
        assert!(check_version(3).is_ok());
        assert!(matches!(
            check_version(1),
            Err(Error::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            check_version(4),
            Err(Error::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            check_version(3u32.swap_bytes()),
            Err(Error::BigEndian { .. })
        ));
    }
}
