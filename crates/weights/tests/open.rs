//! Opening Hugging Face directories and safetensors files: fixtures written by
//! the Python `safetensors` package (tests/fixtures/gen_fixtures.py) checked
//! against what that package reported, plus error cases built in temp dirs
//! with the Rust `safetensors` crate.
#![allow(clippy::unwrap_used)]

use anedvd_base::{GgmlType, MetadataValue};
use anedvd_weights::{open, Error, ModelFormat};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
        .unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_against_python(dir: &str) {
    let model = open(fixtures().join(dir)).unwrap();
    assert_eq!(model.kind, ModelFormat::HuggingFace);
    assert_eq!(model.dir.as_deref(), Some(fixtures().join(dir).as_path()));
    assert_eq!(model.source.format_name(), "safetensors");
    let want = expected()[dir].as_object().unwrap().clone();
    assert_eq!(model.source.tensors().len(), want.len());
    for (name, w) in &want {
        let t = model
            .source
            .tensor(name)
            .unwrap_or_else(|| panic!("{name}"));
        let dtype = match w["dtype"].as_str().unwrap() {
            "F32" => GgmlType::F32,
            "F16" => GgmlType::F16,
            "BF16" => GgmlType::BF16,
            "F64" => GgmlType::F64,
            "I8" => GgmlType::I8,
            "I16" => GgmlType::I16,
            "I32" => GgmlType::I32,
            "I64" => GgmlType::I64,
            other => panic!("{other}"),
        };
        assert_eq!(t.info.dtype, dtype, "{name}");
        let mut shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        shape.reverse();
        assert_eq!(t.info.shape, shape, "{name}");
        assert_eq!(hex(t.data), w["hex"].as_str().unwrap(), "{name}");
        assert_eq!(t.info.size_bytes, t.data.len() as u64);
    }
}

#[test]
fn sharded_dir_matches_python() {
    check_against_python("tiny_hf");
}

#[test]
fn single_file_dir_matches_python() {
    check_against_python("tiny_single");
}

#[test]
fn config_is_flattened() {
    let model = open(fixtures().join("tiny_hf")).unwrap();
    let m = model.source.metadata();
    assert_eq!(m.str("general.source_format").unwrap(), "safetensors");
    assert_eq!(m.get("hidden_size"), Some(&MetadataValue::I64(4)));
    assert_eq!(m.get("rms_norm_eps"), Some(&MetadataValue::F64(1e-6)));
    assert_eq!(
        m.get("tie_word_embeddings"),
        Some(&MetadataValue::Bool(true))
    );
    assert_eq!(m.str("rope_scaling.rope_type").unwrap(), "linear");
    assert_eq!(m.f64("rope_scaling.factor").unwrap(), 8.0);
    assert!(!m.contains("pad_token_id"));
    assert_eq!(
        m.get("eos_token_id"),
        Some(&MetadataValue::Array(vec![1i64, 106].into()))
    );
    assert_eq!(
        m.strings("architectures")
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        ["TinyForCausalLM"]
    );
}

#[test]
fn bare_safetensors_file_and_unsupported_dtype() {
    let model = open(fixtures().join("tiny_single/model.safetensors")).unwrap();
    assert_eq!(model.kind, ModelFormat::Safetensors);
    assert!(model.dir.is_none());
    assert_eq!(model.source.tensors().len(), 2);
    match open(fixtures().join("unsupported_u8.safetensors")) {
        Err(Error::UnsupportedDtype { tensor, dtype, .. }) => {
            assert_eq!(tensor, "bytes");
            assert!(dtype.contains("U8"), "{dtype}");
        }
        other => panic!("{other:?}"),
    }
}

/// Copies a fixture directory into a temp dir for mutation.
fn copy_fixture(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixtures().join(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
    }
    tmp
}

fn write_shard(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn directory_errors() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(matches!(open(tmp.path()), Err(Error::MissingConfig { .. })));
    std::fs::write(tmp.path().join("config.json"), "{}").unwrap();
    assert!(matches!(open(tmp.path()), Err(Error::NoWeights { .. })));
    std::fs::write(tmp.path().join("config.json"), "[1]").unwrap();
    assert!(matches!(open(tmp.path()), Err(Error::BadConfig { .. })));
    std::fs::write(tmp.path().join("config.json"), "{").unwrap();
    assert!(matches!(open(tmp.path()), Err(Error::BadConfig { .. })));

    let tmp = copy_fixture("tiny_hf");
    std::fs::remove_file(tmp.path().join("model-00002-of-00002.safetensors")).unwrap();
    let e = open(tmp.path()).unwrap_err();
    assert!(matches!(e, Error::MissingShard { .. }), "{e}");
    assert!(e.to_string().contains("model-00002-of-00002"), "{e}");

    let tmp = copy_fixture("tiny_hf");
    let index = tmp.path().join("model.safetensors.index.json");
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
    json["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors".into();
    std::fs::write(&index, json.to_string()).unwrap();
    match open(tmp.path()) {
        Err(Error::TensorNotInShard { tensor, .. }) => assert_eq!(tensor, "lm_head.weight"),
        other => panic!("{other:?}"),
    }
    // Listed under the wrong shard.
    json["weight_map"]
        .as_object_mut()
        .unwrap()
        .remove("lm_head.weight");
    json["weight_map"]["scalar"] = "model-00001-of-00002.safetensors".into();
    std::fs::write(&index, json.to_string()).unwrap();
    assert!(matches!(
        open(tmp.path()),
        Err(Error::TensorNotInShard { .. })
    ));
    json["weight_map"]["scalar"] = "../escape.safetensors".into();
    std::fs::write(&index, json.to_string()).unwrap();
    assert!(matches!(open(tmp.path()), Err(Error::BadIndex { .. })));
    std::fs::write(&index, r#"{"weight_map": 3}"#).unwrap();
    assert!(matches!(open(tmp.path()), Err(Error::BadIndex { .. })));
}

#[test]
fn duplicate_tensor_across_shards() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("config.json"), "{}").unwrap();
    let one = vec![0u8; 4];
    write_shard(
        &tmp.path().join("a.safetensors"),
        &[("w", Dtype::F32, vec![1], one.clone())],
    );
    write_shard(
        &tmp.path().join("b.safetensors"),
        &[
            ("w", Dtype::F32, vec![1], one.clone()),
            ("v", Dtype::F32, vec![1], one),
        ],
    );
    std::fs::write(
        tmp.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"w": "a.safetensors", "v": "b.safetensors"}}"#,
    )
    .unwrap();
    match open(tmp.path()) {
        Err(Error::DuplicateTensor { tensor, .. }) => assert_eq!(tensor, "w"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn other_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let txt = tmp.path().join("model.bin");
    std::fs::write(&txt, b"hello").unwrap();
    assert!(matches!(open(&txt), Err(Error::UnknownFormat { .. })));
    assert!(matches!(
        open(tmp.path().join("absent.bin")),
        Err(Error::Io { .. })
    ));
    let bad = tmp.path().join("x.gguf");
    std::fs::write(&bad, b"GGUF\x03\0\0\0").unwrap();
    assert!(matches!(open(&bad), Err(Error::Gguf { .. })));
    let bad = tmp.path().join("x.safetensors");
    std::fs::write(&bad, b"\xff\xff\xff\xff\xff\xff\xff\xff{}").unwrap();
    assert!(matches!(open(&bad), Err(Error::Safetensors { .. })));
}

#[test]
fn gguf_written_by_our_writer_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.gguf");
    let mut w = anedvd_gguf::GgufWriter::new();
    w.add_kv(
        "general.architecture",
        MetadataValue::String("llama".into()),
    )
    .unwrap();
    w.add_tensor("t", GgmlType::F16, &[2, 2], vec![0u8; 8])
        .unwrap();
    w.write(std::fs::File::create(&path).unwrap()).unwrap();
    let model = open(&path).unwrap();
    assert_eq!(model.kind, ModelFormat::Gguf);
    assert_eq!(model.source.format_name(), "gguf");
    assert_eq!(model.source.tensor("t").unwrap().info.shape, vec![2, 2]);
}
