//! The tiny Gemma 4 fixture (tests/fixtures/models/gemma4) against HF
//! `tokenizers`/transformers: its `reference.json` (made by
//! scripts/fixtures/gen_tiny_models.py) holds the ids of each text with and
//! without specials, the decoded text, and the ids of the rendered chat
//! prompts. The same expectations hold for all three forms of the fixture:
//! tokenizer.json (+ tokenizer_config.json) and the F32 / Q8_0 GGUFs that
//! llama.cpp's converter wrote (`tokenizer.ggml.model = "gemma4"`, BPE with
//! merges, no `tokenizer.ggml.pre`).

use anedvd_tokenizer::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/models/gemma4")
}

fn read(name: &str) -> String {
    let path = fixture_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| u32::try_from(x.as_u64().expect("id")).expect("u32 id"))
        .collect()
}

fn reference() -> Value {
    serde_json::from_str(&read("reference.json")).expect("reference.json")
}

/// The fixture's tokenizer in each of its forms, named for messages.
fn tokenizers() -> Vec<(&'static str, Tokenizer)> {
    let mut out = vec![(
        "tokenizer.json",
        Tokenizer::from_tokenizer_json(
            &read("tokenizer.json"),
            Some(&read("tokenizer_config.json")),
        )
        .expect("tokenizer.json"),
    )];
    for name in ["model-f32.gguf", "model-q8_0.gguf"] {
        let file = anedvd_gguf::GgufFile::open(fixture_dir().join(name)).expect(name);
        let md = file.metadata();
        // The loader must take this path without `tokenizer.ggml.pre`.
        assert_eq!(md.str("tokenizer.ggml.model").expect("model"), "gemma4");
        assert!(!md.contains("tokenizer.ggml.pre"), "{name}");
        out.push((name, Tokenizer::from_gguf_metadata(md).expect(name)));
    }
    out
}

#[test]
fn encodings_and_decoding_equal_hf() {
    let r = reference();
    let cases = r["encodings"].as_array().expect("encodings");
    assert!(!cases.is_empty());
    let mut bad = Vec::new();
    for (form, tok) in tokenizers() {
        assert_eq!(tok.vocab_size() as u64, r["vocab_size"].as_u64().unwrap());
        assert_eq!(tok.bos_id(), Some(2), "{form}");
        assert_eq!(tok.eos_id(), Some(1), "{form}");
        assert!(tok.add_bos(), "{form}");
        for c in cases {
            let text = c["text"].as_str().expect("text");
            for (what, add_special, want) in [
                ("ids", true, ids(&c["ids"])),
                ("ids_no_special", false, ids(&c["ids_no_special"])),
            ] {
                let got = tok.encode(text, add_special, false).expect("encode");
                if got != want {
                    bad.push(format!(
                        "{form} {what} {text:?}\n  want {want:?}\n  got  {got:?}"
                    ));
                }
            }
            let plain = ids(&c["ids_no_special"]);
            let want_tokens: Vec<&str> = c["tokens_no_special"]
                .as_array()
                .expect("tokens")
                .iter()
                .map(|t| t.as_str().expect("token"))
                .collect();
            let got_tokens: Vec<&str> = plain
                .iter()
                .map(|&id| tok.token_text(id).unwrap_or("<none>"))
                .collect();
            if got_tokens != want_tokens {
                bad.push(format!(
                    "{form} tokens {text:?}\n  want {want_tokens:?}\n  got  {got_tokens:?}"
                ));
            }
            let want_dec = c["decoded_no_special"].as_str().expect("decoded");
            let got_dec = tok.decode(&plain, false).expect("decode");
            if got_dec != want_dec {
                bad.push(format!(
                    "{form} decode {text:?}\n  want {want_dec:?}\n  got  {got_dec:?}"
                ));
            }
            // With the BOS in front, skipping specials gives the same text.
            let with_bos = ids(&c["ids"]);
            let got_skip = tok.decode(&with_bos, true).expect("decode");
            if got_skip != want_dec {
                bad.push(format!(
                    "{form} decode skip_special {text:?}\n  want {want_dec:?}\n  got  {got_skip:?}"
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// transformers' rendered chat prompts (they start with the literal `<bos>`
/// and contain the turn markers) tokenize as transformers tokenized them,
/// and the ids decode back to the rendered text.
#[test]
fn rendered_chat_prompts_tokenize_like_hf() {
    let r = reference();
    for (form, tok) in tokenizers() {
        for key in ["chat", "chat_thinking"] {
            let rendered = r[key]["rendered"].as_str().expect("rendered");
            let want = ids(&r[key]["ids"]);
            let got = tok.encode(rendered, false, true).expect("encode");
            assert_eq!(got, want, "{form} {key}");
            assert_eq!(
                tok.decode(&want, false).expect("decode"),
                rendered,
                "{form} {key}"
            );
        }
    }
}
