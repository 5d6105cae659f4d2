//! StreamDecoder: pieces that split a UTF-8 character (byte-fallback
//! `<0xXX>` tokens, byte-level BPE fragments) are held back until complete,
//! and the streamed text equals `decode` of the whole sequence.

use anedvd_base::{Metadata, MetadataValue, PackedStrings};
use anedvd_tokenizer::Tokenizer;
use std::path::Path;

const TEXT: &str = "Emoji 😀👍🏽 and 中文测试 and ∑√∞ end";

fn fixture(name: &str) -> Tokenizer {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    Tokenizer::from_tokenizer_json(&std::fs::read_to_string(p).expect("fixture"), None).expect(name)
}

/// Streams `ids`; returns the chunks.
fn stream(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    let mut d = tok.stream_decoder(false);
    let mut chunks: Vec<String> = ids.iter().map(|&id| d.push(id).expect("push")).collect();
    chunks.push(d.finish());
    chunks
}

fn check(tok: &Tokenizer, text: &str) {
    let ids = tok.encode(TEXT, false, false).expect("encode");
    let chunks = stream(tok, &ids);
    assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')), "{chunks:?}");
    // Some token ended inside a character, so its chunk was held back.
    assert!(
        chunks[..ids.len()].iter().any(String::is_empty),
        "no partial piece exercised: {chunks:?}"
    );
    assert_eq!(chunks.concat(), tok.decode(&ids, false).expect("decode"));
    assert_eq!(chunks.concat(), text);
}

#[test]
fn byte_fallback_pieces_join() {
    let tok = fixture("trained_spm.json");
    let ids = tok.encode("😀", false, false).unwrap();
    // ▁ + four <0xXX> byte tokens: nothing printable until the last one.
    assert!(ids.len() >= 4, "{ids:?}");
    check(&tok, TEXT);
}

#[test]
fn byte_level_pieces_join() {
    check(&fixture("trained_bytelevel.json"), TEXT);
    // ByteLevel(add_prefix_space) adds a space that its decoder keeps.
    check(&fixture("trained_gpt2.json"), &format!(" {TEXT}"));
}

#[test]
fn invalid_bytes_become_replacement() {
    let tok = fixture("trained_spm.json");
    let ff = tok.token_id("<0xFF>").unwrap();
    let a = tok.token_id("<0x41>").unwrap();
    let mut d = tok.stream_decoder(false);
    assert_eq!(d.push(ff).unwrap(), "\u{FFFD}");
    assert_eq!(d.push(a).unwrap(), "A");
    let e2 = tok.token_id("<0xE2>").unwrap();
    assert_eq!(d.push(e2).unwrap(), "");
    assert_eq!(d.finish(), "\u{FFFD}");
}

#[test]
fn spm_leading_space_and_specials() {
    let mut md = Metadata::new();
    let strs = |v: &[&str]| MetadataValue::Array(PackedStrings::from_strs(v).unwrap().into());
    md.insert(
        "tokenizer.ggml.model",
        MetadataValue::String("llama".into()),
    );
    md.insert(
        "tokenizer.ggml.tokens",
        strs(&["<unk>", "<s>", "</s>", "▁", "h", "i", "▁h", "▁hi"]),
    );
    md.insert(
        "tokenizer.ggml.token_type",
        MetadataValue::Array(vec![2i32, 3, 3, 1, 1, 1, 1, 1].into()),
    );
    md.insert(
        "tokenizer.ggml.scores",
        MetadataValue::Array(vec![0.0f32, 0.0, 0.0, -3.0, -3.0, -3.0, -1.0, -0.5].into()),
    );
    let tok = Tokenizer::from_gguf_metadata(&md).unwrap();
    let ids = tok.encode("hi hi", true, false).unwrap();
    assert_eq!(ids, vec![1, 7, 7]);
    // llama.cpp's detokenize: the prefix space is removed from token 0 only,
    // and not when token 0 is a BOS that is skipped.
    assert_eq!(tok.decode(&ids, true).unwrap(), " hi hi");
    assert_eq!(tok.decode(&ids, false).unwrap(), "<s> hi hi");
    assert_eq!(tok.decode(&ids[1..], true).unwrap(), "hi hi");
    let mut d = tok.stream_decoder(true);
    let s: String = ids[1..].iter().map(|&i| d.push(i).unwrap()).collect();
    assert_eq!(s, "hi hi");
    let mut d = tok.stream_decoder(true).continuing();
    let s: String = ids[1..].iter().map(|&i| d.push(i).unwrap()).collect();
    assert_eq!(s, " hi hi");
    assert!(tok.is_eog(2) && !tok.is_eog(3));
}

#[test]
fn gemma3_stream_matches_decode() {
    let p = std::env::var("ANEDVD_GEMMA3_GGUF")
        .unwrap_or_else(|_| "/root/.cache/models/gemma3-270m-q4_k_m.gguf".into());
    if !Path::new(&p).is_file() {
        eprintln!("SKIP gemma3_stream_matches_decode: no Gemma 3 GGUF");
        return;
    }
    let file = anedvd_gguf::GgufFile::open(&p).unwrap();
    let tok = Tokenizer::from_gguf_metadata(file.metadata()).unwrap();
    let ids = tok.encode(TEXT, true, true).unwrap();
    let chunks = stream(&tok, &ids);
    assert_eq!(chunks.concat(), tok.decode(&ids, false).unwrap());
    assert_eq!(tok.decode(&ids, true).unwrap(), TEXT);
}
