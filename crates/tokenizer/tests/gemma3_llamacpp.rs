//! Gemma 3 vocabulary (262144 tokens, SentencePiece-style) against
//! llama.cpp's `llama-tokenize` on a multilingual corpus
//! (golden/gemma3_llamacpp.json, from golden/gen_gemma3_llamacpp.py). Needs
//! the real GGUF: `$ANEDVD_GEMMA3_GGUF` or
//! `/root/.cache/models/gemma3-270m-q4_k_m.gguf`; skips when absent.

use anedvd_tokenizer::Tokenizer;
use serde_json::Value;

fn gguf_path() -> Option<std::path::PathBuf> {
    let p = std::env::var("ANEDVD_GEMMA3_GGUF")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| "/root/.cache/models/gemma3-270m-q4_k_m.gguf".into());
    p.is_file().then_some(p)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn gemma3_matches_llama_tokenize() {
    let Some(path) = gguf_path() else {
        eprintln!(
            "SKIP gemma3_matches_llama_tokenize: Gemma 3 GGUF not found (set ANEDVD_GEMMA3_GGUF)"
        );
        return;
    };
    let file = anedvd_gguf::GgufFile::open(&path).expect("open gguf");
    let tok = Tokenizer::from_gguf_metadata(file.metadata()).expect("tokenizer");
    assert_eq!(tok.vocab_size(), 262144);
    assert_eq!(tok.bos_id(), Some(2));
    assert_eq!(tok.eos_id(), Some(1));
    let eot = tok.token_id("<end_of_turn>").expect("<end_of_turn>");
    assert!(tok.is_eog(eot) && tok.is_eog(1));
    let golden: Value =
        serde_json::from_str(include_str!("golden/gemma3_llamacpp.json")).expect("json");
    let mut failures = Vec::new();
    let cases = golden["cases"].as_array().expect("cases");
    for case in cases {
        let text = case["text"].as_str().expect("text");
        for (key, add, special) in [("bos_special", true, true), ("plain", false, false)] {
            let want = ids(&case[key]);
            let got = tok.encode(text, add, special).expect("encode");
            if got != want {
                failures.push(format!("{key} {text:?}\n  want {want:?}\n  got  {got:?}"));
            }
        }
        // Round trip through decode (plain ids carry no specials).
        let plain = ids(&case["plain"]);
        assert_eq!(
            tok.decode(&plain, false).expect("decode"),
            text,
            "decode {text:?}"
        );
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "gemma3: {} cases x 2 modes equal to llama-tokenize",
        cases.len()
    );
}

/// The compact vocabulary: every token's text maps back to its id (Gemma 3
/// has no duplicate texts), decoded pieces agree with the texts, and the
/// tables stay small (they were ~56 MB as per-token `String`s and a
/// `HashMap<String, u32>`).
#[test]
fn gemma3_vocab_index_and_size() {
    let Some(path) = gguf_path() else {
        eprintln!("SKIP gemma3_vocab_index_and_size: Gemma 3 GGUF not found");
        return;
    };
    let file = anedvd_gguf::GgufFile::open(&path).expect("open gguf");
    let tok = Tokenizer::from_gguf_metadata(file.metadata()).expect("tokenizer");
    let texts = file
        .metadata()
        .array("tokenizer.ggml.tokens")
        .expect("tokens");
    assert_eq!(texts.len(), tok.vocab_size());
    for (id, v) in texts.iter().enumerate() {
        let want = v.as_str().expect("string");
        let id = id as u32;
        assert_eq!(tok.token_text(id), Some(want), "text of {id}");
        assert_eq!(tok.token_id(want), Some(id), "id of {want:?}");
    }
    assert_eq!(
        tok.token_id("<0x0A>").and_then(|id| tok.piece(id)),
        Some("\n".into())
    );
    assert_eq!(
        tok.token_id("▁Hello").and_then(|id| tok.piece(id)),
        Some(" Hello".into())
    );
    assert_eq!(tok.token_id("not a token ▁▁▁ xyz"), None);
    assert_eq!(tok.token_text(tok.vocab_size() as u32), None);
    let heap = tok.heap_bytes();
    assert!(heap < 16_000_000, "tokenizer heap {heap} bytes");
}
