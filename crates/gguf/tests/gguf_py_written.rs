//! Reads files written by gguf-py's `GGUFWriter` (fuzz/seeds/gen_seeds.py)
//! and checks the values that script put in.
#![allow(clippy::unwrap_used)]

use anedvd_base::{GgmlType, MetadataValue as V, PackedStrings, ValueType};
use anedvd_gguf::GgufFile;
use std::path::Path;

fn seed(name: &str) -> GgufFile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds/gguf_parse")
        .join(name);
    GgufFile::open(path).unwrap()
}

#[test]
fn reads_gguf_py_output() {
    for (name, alignment) in [("tiny_v3.bin", 32), ("tiny_align64.bin", 64)] {
        let f = seed(name);
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), alignment);
        assert_eq!(f.data_offset() % alignment, 0);
        let m = f.metadata();
        assert_eq!(m.str("general.architecture").unwrap(), "llama");
        assert_eq!(m.get("t.u8"), Some(&V::U8(7)));
        assert_eq!(m.get("t.i8"), Some(&V::I8(-7)));
        assert_eq!(m.get("t.u16"), Some(&V::U16(700)));
        assert_eq!(m.get("t.i16"), Some(&V::I16(-700)));
        assert_eq!(m.get("t.u32"), Some(&V::U32(70000)));
        assert_eq!(m.get("t.i32"), Some(&V::I32(-70000)));
        assert_eq!(m.get("t.f32"), Some(&V::F32(0.5)));
        assert_eq!(m.get("t.u64"), Some(&V::U64(1 << 40)));
        assert_eq!(m.get("t.i64"), Some(&V::I64(-(1 << 40))));
        assert_eq!(m.get("t.f64"), Some(&V::F64(0.25)));
        assert_eq!(m.get("t.bool"), Some(&V::Bool(true)));
        assert_eq!(m.get("t.str"), Some(&V::String("héllo".into())));
        assert_eq!(
            m.get("t.arr"),
            Some(&V::Array(
                PackedStrings::from_strs(["a", "bc"]).unwrap().into()
            ))
        );
        assert_eq!(m.array("t.arr_i").unwrap().len(), 3);
        assert_eq!(m.array("t.arr").unwrap().elem_type(), ValueType::String);

        let names: Vec<_> = f.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["f32", "f16", "q8_0"]);
        let t = f.tensor("f32").unwrap();
        assert_eq!(
            (t.info.dtype, t.info.shape.as_slice()),
            (GgmlType::F32, &[4, 2][..])
        );
        let values: Vec<f32> = t
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        let t = f.tensor("f16").unwrap();
        assert_eq!(
            (t.info.dtype, t.info.shape.as_slice()),
            (GgmlType::F16, &[3][..])
        );
        assert_eq!(t.data, [0x00, 0x3c].repeat(3));
        let t = f.tensor("q8_0").unwrap();
        assert_eq!(
            (t.info.dtype, t.info.shape.as_slice()),
            (GgmlType::Q8_0, &[32, 1][..])
        );
        assert_eq!(t.data, [0u8; 34]);
        for t in f.tensors() {
            assert_eq!(f.tensor_offset(&t.name).unwrap() % alignment, 0);
        }
    }
}
