//! Arbitrary bytes as an HF `tokenizer.json` (optionally with a
//! `tokenizer_config.json`), then an arbitrary text encoded and decoded.
//!
//! Input: `tokenizer.json` NUL `text` [NUL `tokenizer_config.json`] (JSON
//! cannot hold a raw NUL, so the split is unambiguous; invalid UTF-8 is
//! replaced).
//!
//! Asserts: no panic; every id is below the vocabulary size and decodes;
//! the stream decoder agrees with `decode`; and for a lossless byte-level
//! pipeline (no normalizer, only `ByteLevel(add_prefix_space = false)` /
//! `Digits` pre-tokenizers, a `ByteLevel` decoder, all 256 byte-level
//! characters in the vocabulary) whose encoding used only ordinary tokens,
//! `decode(encode(text)) == text`.
#![no_main]

#[path = "common/tok.rs"]
mod tok;

use anedvd_tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Pre-tokenizers that keep every byte and add nothing.
fn lossless_pre(v: &Value) -> bool {
    match v.get("type").and_then(Value::as_str) {
        Some("ByteLevel") => v.get("add_prefix_space") == Some(&Value::Bool(false)),
        Some("Digits") => true,
        Some("Sequence") => v
            .get("pretokenizers")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().all(lossless_pre)),
        _ => false,
    }
}

fn byte_level_decoder(v: &Value) -> bool {
    match v.get("type").and_then(Value::as_str) {
        Some("ByteLevel") => true,
        Some("Sequence") => v
            .get("decoders")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty() && a.iter().all(|d| d.get("type").and_then(Value::as_str) == Some("ByteLevel"))),
        _ => false,
    }
}

/// The JSON describes a pipeline that loses nothing between text and tokens.
fn lossless_pipeline(json: &str) -> bool {
    let Ok(root) = serde_json::from_str::<Value>(json) else {
        return false;
    };
    root.get("normalizer").is_none_or(Value::is_null)
        && root.get("pre_tokenizer").is_some_and(lossless_pre)
        && root.get("decoder").is_some_and(byte_level_decoder)
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == 0);
    let json = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let text = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let config = parts.next().map(String::from_utf8_lossy);
    let Ok(t) = Tokenizer::from_tokenizer_json(&json, config.as_deref()) else {
        return;
    };
    for (add, parse) in [(true, true), (false, true)] {
        tok::check(&t, &text, add, parse);
    }
    let Some(ids) = tok::check(&t, &text, false, false) else {
        return;
    };
    if ids.iter().all(|&id| tok::plain(&t, id))
        && lossless_pipeline(&json)
        && tok::has_all_byte_level_chars(&t)
    {
        tok::assert_roundtrip(&t, &text, &ids);
    }
});
