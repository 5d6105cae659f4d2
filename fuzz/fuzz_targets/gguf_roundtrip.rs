//! Writer → reader: a GGUF built by `GgufWriter` from fuzz-chosen metadata
//! (every value type, nested arrays of mixed element types, strings with any
//! characters) and tensors (any ggml type, shapes sized to the type's block,
//! data bounded to 64 KiB each), written and parsed back with
//! `GgufFile::from_bytes`.
//!
//! Asserts: the writer's output always parses; version, alignment, metadata
//! (bit-exact floats, in order), tensor infos, offsets (aligned, in bounds)
//! and data come back unchanged; and re-writing the parsed file reproduces
//! the same bytes.
#![no_main]

use anedvd_base::{GgmlType, Metadata, MetadataArray, MetadataValue, PackedStrings};
use anedvd_gguf::{GgufFile, GgufWriter};
use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum FArr {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    Arr(Vec<FArr>),
    /// An empty array of any element type (the type is kept on disk).
    Empty(u8),
}

#[derive(Debug, Arbitrary)]
enum FVal {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Arr(FArr),
}

#[derive(Debug, Arbitrary)]
struct FTensor {
    name: String,
    dtype: u8,
    dims: Vec<u8>,
    fill: u8,
}

#[derive(Debug, Arbitrary)]
struct Spec {
    v2: bool,
    alignment_log2: Option<u8>,
    kvs: Vec<(String, FVal)>,
    tensors: Vec<FTensor>,
}

fn arr(a: &FArr, depth: usize) -> MetadataArray {
    use MetadataArray as A;
    match a {
        FArr::U8(v) => A::U8(v.clone()),
        FArr::I8(v) => A::I8(v.clone()),
        FArr::U16(v) => A::U16(v.clone()),
        FArr::I16(v) => A::I16(v.clone()),
        FArr::U32(v) => A::U32(v.clone()),
        FArr::I32(v) => A::I32(v.clone()),
        FArr::F32(v) => A::F32(v.clone()),
        FArr::Bool(v) => A::Bool(v.clone()),
        FArr::Str(v) => A::String(PackedStrings::from_strs(v).unwrap()),
        FArr::U64(v) => A::U64(v.clone()),
        FArr::I64(v) => A::I64(v.clone()),
        FArr::F64(v) => A::F64(v.clone()),
        FArr::Arr(v) if depth < 8 => A::Array(v.iter().map(|x| arr(x, depth + 1)).collect()),
        FArr::Arr(_) => A::Array(Vec::new()),
        FArr::Empty(t) => {
            let ty = anedvd_base::ValueType::from_id(u32::from(*t) % 13)
                .unwrap_or(anedvd_base::ValueType::U8);
            A::empty(ty)
        }
    }
}

fn val(v: &FVal) -> MetadataValue {
    use MetadataValue as V;
    match v {
        FVal::U8(x) => V::U8(*x),
        FVal::I8(x) => V::I8(*x),
        FVal::U16(x) => V::U16(*x),
        FVal::I16(x) => V::I16(*x),
        FVal::U32(x) => V::U32(*x),
        FVal::I32(x) => V::I32(*x),
        FVal::F32(x) => V::F32(*x),
        FVal::Bool(x) => V::Bool(*x),
        FVal::Str(x) => V::String(x.clone()),
        FVal::U64(x) => V::U64(*x),
        FVal::I64(x) => V::I64(*x),
        FVal::F64(x) => V::F64(*x),
        FVal::Arr(a) => V::Array(arr(a, 0)),
    }
}

/// Bit-exact equality (NaN payloads included).
fn same_arr(a: &MetadataArray, b: &MetadataArray) -> bool {
    use MetadataArray as A;
    match (a, b) {
        (A::F32(x), A::F32(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        }
        (A::F64(x), A::F64(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        }
        (A::Array(x), A::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_arr(p, q))
        }
        _ => a == b,
    }
}

fn same(a: &MetadataValue, b: &MetadataValue) -> bool {
    use MetadataValue as V;
    match (a, b) {
        (V::F32(x), V::F32(y)) => x.to_bits() == y.to_bits(),
        (V::F64(x), V::F64(y)) => x.to_bits() == y.to_bits(),
        (V::Array(x), V::Array(y)) => same_arr(x, y),
        _ => a == b,
    }
}

fn assert_same_metadata(got: &Metadata, want: &Metadata) {
    let g: Vec<_> = got.iter().collect();
    let w: Vec<_> = want.iter().collect();
    assert_eq!(g.len(), w.len(), "metadata count");
    for ((gk, gv), (wk, wv)) in g.iter().zip(&w) {
        assert_eq!(gk, wk);
        assert!(same(gv, wv), "key {gk:?}: {gv:?} != {wv:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = Spec::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut w = GgufWriter::new();
    let mut want = Metadata::new();
    let version = if spec.v2 { 2 } else { 3 };
    w.set_version(version).unwrap();
    let mut alignment = 32u64;
    if let Some(k) = spec.alignment_log2 {
        let a = 1u32 << (k % 12);
        w.set_alignment(a).unwrap();
        want.insert("general.alignment", MetadataValue::U32(a));
        alignment = a.into();
    }
    for (k, v) in spec.kvs.iter().take(64) {
        let v = val(v);
        if w.add_kv(k.clone(), v.clone()).is_ok() {
            if k == "general.alignment" {
                let MetadataValue::U32(a) = v else { unreachable!() };
                alignment = a.into();
            }
            want.insert(k.clone(), v);
        }
    }
    let types = GgmlType::all();
    let mut tensors = Vec::new();
    for t in spec.tensors.iter().take(16) {
        let dtype = types[t.dtype as usize % types.len()];
        let mut shape: Vec<u64> = t.dims.iter().take(4).map(|&d| u64::from(d % 9)).collect();
        if let Some(d0) = shape.first_mut() {
            *d0 *= dtype.block_size();
        }
        let Ok(size) = dtype.tensor_bytes(&shape) else {
            continue;
        };
        if size > 1 << 16 {
            continue;
        }
        let bytes: Vec<u8> = (0..size).map(|i| t.fill.wrapping_mul(i as u8 | 1)).collect();
        if w.add_tensor(t.name.clone(), dtype, &shape, bytes.clone()).is_ok() {
            tensors.push((t.name.clone(), dtype, shape, bytes));
        }
    }
    let out = w.to_bytes().expect("writer accepted everything it was given");
    let file = GgufFile::from_bytes(out.clone())
        .unwrap_or_else(|e| panic!("writer output does not parse: {e}"));
    assert_eq!(file.version(), version);
    assert_eq!(file.alignment(), alignment);
    assert_eq!(file.file_size(), out.len() as u64);
    assert_eq!(file.bytes(), &out[..]);
    assert_same_metadata(file.metadata(), &want);
    assert_eq!(file.tensors().len(), tensors.len());
    for (info, (name, dtype, shape, bytes)) in file.tensors().iter().zip(&tensors) {
        assert_eq!(&info.name, name);
        assert_eq!(info.dtype, *dtype);
        assert_eq!(&info.shape, shape);
        assert_eq!(info.size_bytes, bytes.len() as u64);
        let t = file.tensor(name).expect("tensor by name");
        assert_eq!(t.data, &bytes[..]);
        let off = file.tensor_offset(name).unwrap();
        assert_eq!(off % alignment, 0, "tensor {name:?} at unaligned offset {off}");
        assert!(off + info.size_bytes <= file.file_size());
    }
    // reader → writer reproduces the file byte for byte.
    let mut again = GgufWriter::new();
    again.set_version(file.version()).unwrap();
    for (k, v) in file.metadata().iter() {
        again.add_kv(k, v.clone()).unwrap();
    }
    for info in file.tensors() {
        let t = file.tensor(&info.name).unwrap();
        again
            .add_tensor(info.name.clone(), info.dtype, &info.shape, t.data.to_vec())
            .unwrap();
    }
    assert_eq!(again.to_bytes().unwrap(), out, "re-written file differs");
});
