//! Compares our reader with gguf-py's on the real Gemma 3 270M GGUF (skipped
//! with a message when the file is absent). The golden JSON comes from
//! `tests/golden/gen_gemma3_tensor_table.py`.
#![allow(clippy::unwrap_used)]

use anedvd_base::{GgmlType, MetadataValue};
use anedvd_gguf::GgufFile;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn model_path() -> Option<PathBuf> {
    let path = std::env::var_os("ANEDVD_GEMMA3_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root/.cache/models/gemma3-270m-q4_k_m.gguf"));
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIP: {} not found (set ANEDVD_GEMMA3_GGUF to run this test)",
            path.display()
        );
        None
    }
}

fn golden() -> Value {
    let text = include_str!("golden/gemma3_tensor_table.json");
    serde_json::from_str(text).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn gguf_py_type(name: &str) -> GgmlType {
    // gguf-py spells K-quants `Q4_K`, like GgmlType::name.
    GgmlType::from_name(name).unwrap_or_else(|| panic!("unknown type {name}"))
}

#[test]
fn gemma3_matches_gguf_py() {
    let Some(path) = model_path() else { return };
    let g = golden();
    let f = GgufFile::open(&path).unwrap();
    if f.file_size() != g["file_size"].as_u64().unwrap() {
        eprintln!(
            "SKIP: {} is not the file the golden was made from",
            path.display()
        );
        return;
    }
    assert_eq!(u64::from(f.version()), g["version"].as_u64().unwrap());
    assert_eq!(f.alignment(), g["alignment"].as_u64().unwrap());
    assert_eq!(f.data_offset(), g["data_offset"].as_u64().unwrap());
    assert_eq!(f.metadata().len() as u64, g["kv_count"].as_u64().unwrap());

    let tensors = g["tensors"].as_array().unwrap();
    assert_eq!(f.tensors().len(), 236);
    assert_eq!(tensors.len(), 236);
    let types: BTreeSet<GgmlType> = f.tensors().iter().map(|t| t.dtype).collect();
    let want: BTreeSet<GgmlType> = [
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
        GgmlType::F32,
    ]
    .into();
    assert_eq!(types, want);

    for (ours, theirs) in f.tensors().iter().zip(tensors) {
        let name = theirs["name"].as_str().unwrap();
        assert_eq!(ours.name, name);
        assert_eq!(
            ours.dtype,
            gguf_py_type(theirs["type"].as_str().unwrap()),
            "{name}"
        );
        let shape: Vec<u64> = theirs["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(ours.shape, shape, "{name}");
        assert_eq!(
            ours.size_bytes,
            theirs["n_bytes"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(f.tensor_offset(name), theirs["offset"].as_u64(), "{name}");
        let data = f.tensor(name).unwrap().data;
        assert_eq!(
            hex(&data[..8]),
            theirs["head_hex"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(
            hex(&data[data.len() - 8..]),
            theirs["tail_hex"].as_str().unwrap(),
            "{name}"
        );
    }

    for (key, entry) in g["metadata"].as_object().unwrap() {
        let ours = f
            .metadata()
            .get(key)
            .unwrap_or_else(|| panic!("missing {key}"));
        let value = &entry["value"];
        match ours {
            MetadataValue::String(s) => assert_eq!(Some(s.as_str()), value.as_str(), "{key}"),
            MetadataValue::F32(x) => assert_eq!(f64::from(*x), value.as_f64().unwrap(), "{key}"),
            other => assert_eq!(other.as_i64(), value.as_i64(), "{key}"),
        }
        assert_eq!(
            ours.value_type().name(),
            match entry["type"].as_str().unwrap() {
                "STRING" => "string",
                "UINT32" => "u32",
                "FLOAT32" => "f32",
                "INT32" => "i32",
                "UINT64" => "u64",
                other => panic!("extend the type map for {other}"),
            },
            "{key}"
        );
    }

    for (key, entry) in g["arrays"].as_object().unwrap() {
        let items = f.metadata().array(key).unwrap();
        assert_eq!(items.len() as u64, entry["len"].as_u64().unwrap(), "{key}");
        for (ours, theirs) in items.iter().zip(entry["first"].as_array().unwrap()) {
            match ours {
                MetadataValue::String(s) => assert_eq!(Some(s.as_str()), theirs.as_str()),
                MetadataValue::F32(x) => assert_eq!(Some(f64::from(x)), theirs.as_f64()),
                other => assert_eq!(other.as_i64(), theirs.as_i64()),
            }
        }
    }
}
