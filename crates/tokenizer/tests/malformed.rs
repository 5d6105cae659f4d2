//! Malformed vocabularies and inputs give typed errors, never panics.
#![allow(clippy::unwrap_used)]

use anedvd_base::{Metadata, MetadataValue, PackedStrings};
use anedvd_tokenizer::{Error, Tokenizer};

fn strs(v: &[&str]) -> MetadataValue {
    MetadataValue::Array(PackedStrings::from_strs(v).unwrap().into())
}

fn f32s(v: &[f32]) -> MetadataValue {
    MetadataValue::Array(v.to_vec().into())
}

fn i32s(v: &[i32]) -> MetadataValue {
    MetadataValue::Array(v.to_vec().into())
}

/// A tiny valid SentencePiece-style vocabulary.
fn spm() -> Metadata {
    let mut md = Metadata::new();
    md.insert(
        "tokenizer.ggml.model",
        MetadataValue::String("llama".into()),
    );
    md.insert(
        "tokenizer.ggml.tokens",
        strs(&["<unk>", "<s>", "</s>", "<0x41>", "▁", "a", "▁a"]),
    );
    md.insert(
        "tokenizer.ggml.scores",
        f32s(&[0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -0.5]),
    );
    md.insert("tokenizer.ggml.token_type", i32s(&[2, 3, 3, 6, 1, 1, 1]));
    md
}

/// A tiny valid byte-level BPE vocabulary.
fn bpe() -> Metadata {
    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", MetadataValue::String("gpt2".into()));
    md.insert("tokenizer.ggml.pre", MetadataValue::String("gpt-2".into()));
    md.insert("tokenizer.ggml.tokens", strs(&["a", "b", "ab", "Ġ", "Ġab"]));
    md.insert("tokenizer.ggml.merges", strs(&["a b", "Ġ ab"]));
    md
}

#[test]
fn valid_baselines() {
    let t = Tokenizer::from_gguf_metadata(&spm()).unwrap();
    assert_eq!(t.encode("a", true, false).unwrap(), vec![1, 6]);
    // 'A' has no token: byte fallback <0x41>; 'b' has none and no byte token: <unk>.
    assert_eq!(t.encode("A", false, false).unwrap(), vec![4, 3]);
    let t = Tokenizer::from_gguf_metadata(&bpe()).unwrap();
    assert_eq!(t.encode(" ab", false, false).unwrap(), vec![4]);
    assert_eq!(t.decode(&[4, 2], false).unwrap(), " abab");
}

#[test]
fn unknown_model_kind() {
    let mut md = spm();
    md.insert("tokenizer.ggml.model", MetadataValue::String("bert".into()));
    assert!(
        matches!(Tokenizer::from_gguf_metadata(&md), Err(Error::UnknownModel { name, .. }) if name == "bert")
    );
}

#[test]
fn unknown_pre_is_refused() {
    let mut md = bpe();
    md.insert(
        "tokenizer.ggml.pre",
        MetadataValue::String("no-such-pre".into()),
    );
    assert!(
        matches!(Tokenizer::from_gguf_metadata(&md), Err(Error::UnknownPre(p)) if p == "no-such-pre")
    );
}

#[test]
fn missing_merges() {
    let mut md = Metadata::new();
    for (k, v) in bpe().iter() {
        if k != "tokenizer.ggml.merges" {
            md.insert(k, v.clone());
        }
    }
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::MissingMerges(_))
    ));
}

#[test]
fn malformed_merge() {
    let mut md = bpe();
    md.insert("tokenizer.ggml.merges", strs(&["a b", "nospace"]));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::BadMerge { index: 1, .. })
    ));
}

#[test]
fn bad_byte_token() {
    let mut md = spm();
    md.insert(
        "tokenizer.ggml.tokens",
        strs(&["<unk>", "<s>", "</s>", "<0xZZ>", "▁", "a", "▁a"]),
    );
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::BadByteToken { id: 3, .. })
    ));
}

#[test]
fn scores_length_mismatch() {
    let mut md = spm();
    md.insert("tokenizer.ggml.scores", f32s(&[0.0, 1.0]));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::LengthMismatch {
            expected: 7,
            found: 2,
            ..
        })
    ));
    let mut md = spm();
    md.insert("tokenizer.ggml.token_type", i32s(&[1; 9]));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn bad_token_type_and_special_id() {
    let mut md = spm();
    md.insert("tokenizer.ggml.token_type", i32s(&[2, 3, 3, 6, 1, 1, 42]));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::BadTokenType { id: 6, value: 42 })
    ));
    let mut md = spm();
    md.insert("tokenizer.ggml.bos_token_id", MetadataValue::U32(99));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::BadSpecialId { id: 99, .. })
    ));
}

#[test]
fn wrong_types_and_missing_keys() {
    let mut md = spm();
    md.insert("tokenizer.ggml.tokens", MetadataValue::U32(3));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::Metadata(_))
    ));
    let mut md = spm();
    md.insert("tokenizer.ggml.tokens", strs(&[]));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::EmptyVocab)
    ));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&Metadata::new()),
        Err(Error::Metadata(_))
    ));
}

#[test]
fn decode_out_of_range() {
    let t = Tokenizer::from_gguf_metadata(&spm()).unwrap();
    assert!(matches!(
        t.decode(&[1, 7], false),
        Err(Error::IdOutOfRange {
            id: 7,
            vocab_size: 7
        })
    ));
    assert!(t.stream_decoder(false).push(1000).is_err());
}

#[test]
fn tokenizer_json_errors() {
    let ok = r#"{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}"#;
    assert!(Tokenizer::from_tokenizer_json(ok, None).is_ok());
    assert!(matches!(
        Tokenizer::from_tokenizer_json("{", None),
        Err(Error::Json { .. })
    ));
    let wp = r#"{"model": {"type": "WordPiece", "vocab": {"a": 0}}}"#;
    assert!(
        matches!(Tokenizer::from_tokenizer_json(wp, None), Err(Error::UnknownModel { name, key: "model.type", .. }) if name == "WordPiece")
    );
    let no_merges = r#"{"model": {"type": "BPE", "vocab": {"a": 0}}}"#;
    assert!(matches!(
        Tokenizer::from_tokenizer_json(no_merges, None),
        Err(Error::MissingMerges(_))
    ));
    let bad_merge = r#"{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [42]}}"#;
    assert!(matches!(
        Tokenizer::from_tokenizer_json(bad_merge, None),
        Err(Error::BadMerge { index: 0, .. })
    ));
    let bad_norm = r#"{"normalizer": {"type": "Precompiled"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}"#;
    assert!(matches!(
        Tokenizer::from_tokenizer_json(bad_norm, None),
        Err(Error::Unsupported {
            component: "normalizer",
            ..
        })
    ));
    let bad_regex = r#"{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"},
                       "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}"#;
    assert!(matches!(
        Tokenizer::from_tokenizer_json(bad_regex, None),
        Err(Error::Regex { .. })
    ));
    let huge = r#"{"model": {"type": "BPE", "vocab": {"a": 4000000000}, "merges": []}}"#;
    assert!(matches!(
        Tokenizer::from_tokenizer_json(huge, None),
        Err(Error::Json { .. })
    ));
    let bad_cfg = Tokenizer::from_tokenizer_json(ok, Some("[1,"));
    assert!(matches!(
        bad_cfg,
        Err(Error::Json {
            file: "tokenizer_config.json",
            ..
        })
    ));
}

#[test]
fn empty_duplicate_and_mixed_token_texts() {
    let mut md = spm();
    md.insert(
        "tokenizer.ggml.tokens",
        strs(&["<unk>", "<s>", "</s>", "", "a", "a", "▁a"]),
    );
    md.insert("tokenizer.ggml.token_type", i32s(&[2, 3, 3, 1, 1, 1, 1]));
    let t = Tokenizer::from_gguf_metadata(&md).unwrap();
    // An empty text becomes `[EMPTY_{id}]` (llama.cpp) and is found by that text.
    assert_eq!(t.token_text(3), Some("[EMPTY_3]"));
    assert_eq!(t.token_id("[EMPTY_3]"), Some(3));
    assert_eq!(t.token_id(""), None);
    // A later duplicate wins the text → id lookup; both keep their texts.
    assert_eq!(t.token_id("a"), Some(5));
    assert_eq!(t.token_text(4), Some("a"));
    assert_eq!(t.piece(4).as_deref(), Some("a"));
    // Token texts that are not strings, or scores that are not numbers, are
    // typed errors (arrays are homogeneous, so the whole array is refused).
    let mut md = spm();
    md.insert(
        "tokenizer.ggml.tokens",
        MetadataValue::Array(vec![7u32].into()),
    );
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::Metadata(anedvd_base::Error::WrongType {
            expected: "array[string]",
            ..
        }))
    ));
    let mut md = spm();
    md.insert("tokenizer.ggml.scores", strs(&["0"; 7]));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&md),
        Err(Error::Metadata(anedvd_base::Error::WrongType {
            expected: "array[number]",
            ..
        }))
    ));
    // Token types stored as another integer type are accepted.
    let mut md = spm();
    md.insert(
        "tokenizer.ggml.token_type",
        MetadataValue::Array(vec![2u8, 3, 3, 6, 1, 1, 1].into()),
    );
    assert!(Tokenizer::from_gguf_metadata(&md).is_ok());
}
