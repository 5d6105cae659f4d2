//! The bad-model-files battery at the engine's door: each case copies a
//! tiny Hugging Face fixture (tests/fixtures/models) into a temp dir, makes
//! one visible mutation of its `config.json`, `tokenizer.json`,
//! `tokenizer_config.json` or `model.safetensors`, loads it with
//! [`Engine::load`] (what `run`, `chat`, `serve` and `bench` call) and checks
//! that the error a user sees (the chain the CLI prints) names the file's
//! path exactly once and the key, field or tensor at fault. Malformed
//! safetensors headers case by case are in crates/weights/tests/malformed.rs;
//! this file checks their top-level message once. Also `check_tensors`
//! (`--check-tensors`) on poisoned weights.
#![allow(clippy::unwrap_used)]

use anedvd_base::{GgmlType, MetadataValue};
use anedvd_engine::{check_tensors, Engine, Error, LoadOptions, LoadStage};
use anedvd_testkit::fixtures;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

const FILES: [&str; 5] = [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
];

/// A copy of `family`'s HF fixture.
fn copy_of(family: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in FILES {
        let from = fixtures::dir(family).join(f);
        if from.exists() {
            std::fs::copy(&from, tmp.path().join(f)).unwrap();
        }
    }
    tmp
}

fn options() -> LoadOptions {
    LoadOptions {
        backend_options: anedvd_engine::BackendOptions::with_threads(1),
        ..Default::default()
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Rewrites the JSON file `name` of `dir` through `edit`; returns its path.
fn edit_json(dir: &Path, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let path = dir.join(name);
    let mut v = read_json(&path);
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    path
}

/// The error and its causes as the CLI prints them (`common::error_chain`:
/// a cause already quoted by the message before it is skipped).
fn chain(e: &Error) -> String {
    let mut out = format!("cannot load the model: {e}");
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// Loads `dir`, expects a refusal whose printed chain names `file` exactly
/// once and contains every one of `needles`; returns the error.
fn refused(dir: &Path, file: &Path, needles: &[&str]) -> Error {
    let err = match Engine::load(dir, &options(), |_| {}) {
        Ok(_) => panic!("loaded; expected an error naming {needles:?}"),
        Err(e) => e,
    };
    let msg = chain(&err);
    let path = file.display().to_string();
    assert_eq!(
        msg.matches(&path).count(),
        1,
        "the message should name {path} once: {msg}"
    );
    for needle in needles {
        assert!(msg.contains(needle), "message lacks `{needle}`: {msg}");
    }
    err
}

fn refused_config(family: &str, edit: impl FnOnce(&mut Value), needles: &[&str]) -> Error {
    let dir = copy_of(family);
    let file = edit_json(dir.path(), "config.json", edit);
    refused(dir.path(), &file, needles)
}

fn remove(v: &mut Value, key: &str) {
    v.as_object_mut().unwrap().remove(key).unwrap();
}

#[test]
fn the_unedited_copies_load() {
    for family in ["llama", "qwen2"] {
        let dir = copy_of(family);
        Engine::load(dir.path(), &options(), |_| {}).unwrap();
    }
}

// ---- config.json --------------------------------------------------------

#[test]
fn config_missing_hidden_size_or_layers() {
    refused_config(
        "llama",
        |c| remove(c, "hidden_size"),
        &["hyperparameter NEmbd is missing", "hidden_size"],
    );
    refused_config(
        "llama",
        |c| remove(c, "num_hidden_layers"),
        &["hyperparameter NLayer is missing", "num_hidden_layers"],
    );
}

#[test]
fn config_not_json_or_unknown_family() {
    let dir = copy_of("llama");
    let file = dir.path().join("config.json");
    std::fs::write(&file, "{\"hidden_size\": 64,").unwrap();
    refused(dir.path(), &file, &["invalid JSON"]);
    refused_config(
        "llama",
        |c| c["model_type"] = json!("bert"),
        &["unknown model family", "model_type `bert`"],
    );
}

#[test]
fn config_heads_not_divisible_by_kv_heads() {
    refused_config(
        "llama",
        |c| c["num_key_value_heads"] = json!(3),
        &[
            "`num_key_value_heads`",
            "3 key/value heads (layer 0) do not divide num_attention_heads = 4",
        ],
    );
    refused_config(
        "llama",
        |c| c["num_key_value_heads"] = json!(0),
        &["`num_key_value_heads`", "0 key/value heads"],
    );
}

#[test]
fn config_heads_that_do_not_split_the_width() {
    // Qwen2 has no head_dim: the 6 heads must divide hidden_size 64.
    refused_config(
        "qwen2",
        |c| c["num_attention_heads"] = json!(6),
        &[
            "`num_attention_heads`",
            "6 heads do not divide hidden_size = 64",
            "head_dim",
        ],
    );
}

#[test]
fn config_head_dim_times_heads_disagrees_with_the_tensors() {
    // head_dim 16 × 8 heads = 128 query rows, but q_proj has 64: the
    // directory's tensor is named (which side is wrong is the user's call).
    let dir = copy_of("llama");
    edit_json(dir.path(), "config.json", |c| {
        c["num_attention_heads"] = json!(8)
    });
    refused(
        dir.path(),
        dir.path(),
        &[
            "model.layers.0.self_attn.q_proj.weight",
            "expected [64, 128]",
        ],
    );
}

#[test]
fn config_layer_types_of_another_length() {
    refused_config(
        "qwen2",
        |c| c["layer_types"] = json!(["full_attention"]),
        &[
            "`layer_types`",
            "1 entries for 2 layers (num_hidden_layers)",
        ],
    );
}

#[test]
fn config_zero_and_wrong_vocab() {
    refused_config(
        "llama",
        |c| c["vocab_size"] = json!(0),
        &[
            "`vocab_size`",
            "0, but the token embedding `model.embed_tokens.weight` has 384 rows",
        ],
    );
    refused_config(
        "llama",
        |c| c["num_hidden_layers"] = json!(0),
        &["`num_hidden_layers`", "must be positive"],
    );
}

#[test]
fn config_wrong_json_types() {
    refused_config(
        "llama",
        |c| c["num_attention_heads"] = json!("4"),
        &["`num_attention_heads`", "expected a non-negative integer"],
    );
    refused_config(
        "llama",
        |c| c["rms_norm_eps"] = json!(true),
        &["`rms_norm_eps`", "expected a number"],
    );
    refused_config(
        "llama",
        |c| c["hidden_size"] = json!(-64),
        &["`hidden_size`", "expected a non-negative integer"],
    );
}

/// Absurd sizes in a child process limited to 1 GiB of address space (the
/// shell's `ulimit -v`): a refusal that first allocated by the field (a
/// vector of 10^9 layers, a row of 2^40 floats) would abort the child. The
/// child also loads the unedited copy, so the limit itself is no obstacle.
#[cfg(target_os = "linux")]
#[test]
fn config_absurd_dimensions_are_refused_without_allocating() {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" \"$@\"")
        .arg(&exe)
        .args([
            "--exact",
            "absurd_dimensions_child",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("ANEDVD_ABSURD_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed: {text}");
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
}

/// The body of [`config_absurd_dimensions_are_refused_without_allocating`]
/// (meaningful under its memory limit; harmless alone).
#[test]
#[ignore = "run by config_absurd_dimensions_are_refused_without_allocating under a memory limit"]
fn absurd_dimensions_child() {
    let dir = copy_of("llama");
    Engine::load(dir.path(), &options(), |_| {}).unwrap();
    let cases: [(&str, Value, &str); 5] = [
        (
            "hidden_size",
            json!(1u64 << 40),
            "1099511627776 exceeds the limit",
        ),
        (
            "num_hidden_layers",
            json!(1_000_000_000u64),
            "1000000000 layers exceeds the limit",
        ),
        (
            "num_attention_heads",
            json!(1u64 << 40),
            "1099511627776 exceeds the limit",
        ),
        ("intermediate_size", json!(1u64 << 40), "exceeds the limit"),
        ("head_dim", json!(1u64 << 40), "exceeds the limit"),
    ];
    for (key, value, says) in cases {
        refused_config("llama", |c| c[key] = value, &[&format!("`{key}`"), says]);
    }
}

// ---- tokenizer.json / tokenizer_config.json ------------------------------

fn refused_tokenizer(edit: impl FnOnce(&mut Value), needles: &[&str]) -> Error {
    let dir = copy_of("llama");
    let file = edit_json(dir.path(), "tokenizer.json", edit);
    refused(dir.path(), &file, needles)
}

#[test]
fn tokenizer_unknown_model_type() {
    refused_tokenizer(
        |t| t["model"]["type"] = json!("WordPiece"),
        &["model.type = `WordPiece`", "supported: BPE"],
    );
    refused_tokenizer(
        |t| t["model"]["type"] = json!(7),
        &["model.type = 7 is not a string"],
    );
}

#[test]
fn tokenizer_bpe_without_merges() {
    refused_tokenizer(
        |t| remove(&mut t["model"], "merges"),
        &["BPE tokenizer without merges", "model.merges"],
    );
}

#[test]
fn tokenizer_merges_naming_tokens_not_in_the_vocab() {
    refused_tokenizer(
        |t| t["model"]["merges"][1] = json!(["h", "no-such-token"]),
        &["model.merges[1]", "`no-such-token` is not in model.vocab"],
    );
    // both sides exist, their join does not
    refused_tokenizer(
        |t| t["model"]["merges"][2] = json!("! \""),
        &["model.merges[2]", "`!\"` is not in model.vocab"],
    );
}

#[test]
fn tokenizer_added_token_beyond_the_vocab_or_duplicate() {
    refused_tokenizer(
        |t| t["added_tokens"][3]["id"] = json!(100_000),
        &["added_tokens[3].id = 100000 is beyond the vocabulary"],
    );
    refused_tokenizer(
        |t| t["added_tokens"][3]["id"] = json!(380),
        &["added_tokens[3].id = 380 is also the id of added_tokens[1]"],
    );
    refused_tokenizer(
        |t| t["added_tokens"][3]["id"] = json!("382"),
        &["added_tokens[3].id = \"382\" is not a token id"],
    );
    refused_tokenizer(
        |t| remove(&mut t["added_tokens"][2], "content"),
        &["added_tokens[2].content"],
    );
}

#[test]
fn tokenizer_files_not_json() {
    let dir = copy_of("llama");
    let file = dir.path().join("tokenizer.json");
    std::fs::write(&file, "{\"model\": ").unwrap();
    refused(dir.path(), &file, &["EOF while parsing"]);
    let dir = copy_of("llama");
    let file = dir.path().join("tokenizer_config.json");
    std::fs::write(&file, "[1,").unwrap();
    refused(dir.path(), &file, &["EOF while parsing"]);
}

#[test]
fn tokenizer_config_added_token_beyond_the_vocab() {
    let dir = copy_of("llama");
    let file = edit_json(dir.path(), "tokenizer_config.json", |c| {
        c["added_tokens_decoder"]["99999"] = json!({"content": "<x>", "special": true});
    });
    refused(
        dir.path(),
        &file,
        &["added_tokens_decoder key \"99999\" = 99999 is beyond the vocabulary"],
    );
}

// ---- model.safetensors, the top-level message ----------------------------

/// The fixture's safetensors file split into its JSON header and data.
fn split_safetensors(bytes: &[u8]) -> (Value, Vec<u8>) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    (header, bytes[8 + n..].to_vec())
}

fn join_safetensors(header: &Value, data: &[u8]) -> Vec<u8> {
    let h = header.to_string();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn safetensors_errors_name_the_shard_once() {
    let dir = copy_of("llama");
    let file = dir.path().join("model.safetensors");
    let (mut header, data) = split_safetensors(&std::fs::read(&file).unwrap());
    let name = "model.layers.1.mlp.down_proj.weight";
    let (begin, end) = (
        header[name]["data_offsets"][0].as_u64().unwrap(),
        header[name]["data_offsets"][1].as_u64().unwrap(),
    );
    header[name]["data_offsets"] = json!([begin + 4, end + 4]);
    std::fs::write(&file, join_safetensors(&header, &data)).unwrap();
    refused(
        dir.path(),
        &file,
        &[&format!("tensor `{name}`"), "data_offsets"],
    );

    let (header, data) = split_safetensors(
        &std::fs::read(fixtures::dir("llama").join("model.safetensors")).unwrap(),
    );
    std::fs::write(&file, join_safetensors(&header, &data[..data.len() - 10])).unwrap();
    refused(dir.path(), &file, &["data_offsets", "truncated"]);
}

// ---- check_tensors (--check-tensors) --------------------------------------

/// Writes an f32 NaN over element `index` of F32 tensor `name` in the
/// directory's model.safetensors.
fn poison_safetensors(dir: &Path, name: &str, index: usize, value: f32) {
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    let (header, mut data) = split_safetensors(&bytes);
    assert_eq!(header[name]["dtype"], "F32");
    let at = header[name]["data_offsets"][0].as_u64().unwrap() as usize + 4 * index;
    data[at..at + 4].copy_from_slice(&value.to_le_bytes());
    std::fs::write(&file, join_safetensors(&header, &data)).unwrap();
}

#[test]
fn check_tensors_names_the_poisoned_tensor_and_element() {
    let dir = copy_of("llama");
    let name = "model.layers.0.mlp.up_proj.weight";
    poison_safetensors(dir.path(), name, 1234, f32::NAN);
    // Without the check the file loads: NaN is a valid f32.
    Engine::load(dir.path(), &options(), |_| {}).unwrap();
    let checked = LoadOptions {
        check_tensors: true,
        ..options()
    };
    let mut last = None;
    let err = match Engine::load(dir.path(), &checked, |s| {
        if let LoadStage::CheckTensors { done, total } = s {
            last = Some((done, total));
        }
    }) {
        Ok(_) => panic!("a NaN weight passed --check-tensors"),
        Err(e) => e,
    };
    assert!(
        matches!(&err, Error::NonFiniteWeight { tensor, index: 1234, value, .. }
            if tensor == name && value.is_nan()),
        "{err:?}"
    );
    let msg = chain(&err);
    assert!(
        msg.contains(&format!("tensor `{name}` holds NaN at element 1234")),
        "{msg}"
    );
    assert_eq!(
        msg.matches(&dir.path().display().to_string()).count(),
        1,
        "{msg}"
    );
    assert!(last.is_some_and(|(_, total)| total > 0), "{last:?}");

    // A clean copy passes and reports every byte scanned.
    let clean = copy_of("llama");
    let mut last = None;
    Engine::load(clean.path(), &checked, |s| {
        if let LoadStage::CheckTensors { done, total } = s {
            last = Some((done, total));
        }
    })
    .unwrap();
    let (done, total) = last.unwrap();
    assert_eq!(done, total);
    let original = std::fs::read(fixtures::dir("llama").join("model.safetensors")).unwrap();
    assert_eq!(total, split_safetensors(&original).1.len() as u64);
}

#[test]
fn check_tensors_finds_a_nan_q8_0_scale_and_infinities_in_f16() {
    // A GGUF of loose tensors (no model): the scan needs only a WeightSource.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("w.gguf");
    let x: Vec<f32> = (0..512).map(|i| (i as f32 - 256.0) / 10.0).collect();
    let mut q8 = vec![0u8; 16 * 34];
    anedvd_quant::quantize(GgmlType::Q8_0, &x, &mut q8).unwrap();
    let clean_q8 = q8.clone();
    q8[5 * 34..5 * 34 + 2].copy_from_slice(&0x7e00u16.to_le_bytes()); // block 5's scale: NaN
    let mut f16: Vec<u8> = vec![0; 2 * 64];
    f16[2 * 9..2 * 9 + 2].copy_from_slice(&0xfc00u16.to_le_bytes()); // element 9: -inf
    let write = |tensors: &[(&str, GgmlType, &[u64], Vec<u8>)]| {
        let mut w = anedvd_gguf::GgufWriter::new();
        w.add_kv("general.architecture", MetadataValue::String("none".into()))
            .unwrap();
        for (n, t, s, b) in tensors {
            w.add_tensor(*n, *t, s, b.clone()).unwrap();
        }
        w.write(std::fs::File::create(&path).unwrap()).unwrap();
        anedvd_weights::open(&path).unwrap()
    };
    let scan = |tensors: &[(&str, GgmlType, &[u64], Vec<u8>)]| {
        let opened = write(tensors);
        check_tensors(opened.source.as_ref(), &path, &AtomicU64::new(0))
    };
    let clean = ("clean", GgmlType::Q8_0, &[512u64][..], clean_q8);
    let bad_q8 = ("blk.3.ffn_down.weight", GgmlType::Q8_0, &[512u64][..], q8);
    let bad_f16 = ("blk.0.attn_q.weight", GgmlType::F16, &[64u64][..], f16);
    scan(std::slice::from_ref(&clean)).unwrap();
    match scan(&[clean.clone(), bad_q8.clone()]) {
        Err(Error::NonFiniteWeight { tensor, index, .. }) => {
            assert_eq!((tensor.as_str(), index), ("blk.3.ffn_down.weight", 5 * 32));
        }
        other => panic!("{other:?}"),
    }
    // The first bad tensor in file order is the one reported.
    match scan(&[bad_f16, bad_q8]) {
        Err(e @ Error::NonFiniteWeight { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("tensor `blk.0.attn_q.weight` holds -inf at element 9"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
}
