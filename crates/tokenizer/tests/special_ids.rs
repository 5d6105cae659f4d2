//! BOS/EOS/EOT/PAD and the end-of-generation set against what llama.cpp
//! reports (golden/eog_llamacpp.json from golden/gen_eog_llamacpp.py). Uses
//! llama.cpp's vocab GGUFs and the Gemma 3 GGUF when present; skips otherwise.

use anedvd_tokenizer::Tokenizer;
use serde_json::Value;
use std::path::PathBuf;

fn find(name: &str) -> Option<PathBuf> {
    let src = std::env::var("ANEDVD_LLAMACPP_SRC")
        .unwrap_or_else(|_| "/root/.cache/llamacpp-ref/src".into());
    let gemma = std::env::var("ANEDVD_GEMMA3_GGUF")
        .unwrap_or_else(|_| "/root/.cache/models/gemma3-270m-q4_k_m.gguf".into());
    [
        PathBuf::from(&src).join("models").join(name),
        PathBuf::from(gemma),
    ]
    .into_iter()
    .find(|p| p.file_name().is_some_and(|f| f == name) && p.is_file())
}

#[test]
fn special_ids_match_llamacpp() {
    let golden: Value =
        serde_json::from_str(include_str!("golden/eog_llamacpp.json")).expect("json");
    let mut checked = 0;
    for (name, want) in golden.as_object().expect("object") {
        let Some(path) = find(name) else {
            eprintln!("SKIP {name}: not found");
            continue;
        };
        let file = anedvd_gguf::GgufFile::open(&path).expect("open");
        let tok = Tokenizer::from_gguf_metadata(file.metadata()).expect(name);
        let id = |k: &str| want.get(k).and_then(Value::as_u64).map(|x| x as u32);
        assert_eq!(tok.bos_id(), id("bos"), "{name} bos");
        assert_eq!(tok.eos_id(), id("eos"), "{name} eos");
        assert_eq!(tok.eot_id(), id("eot"), "{name} eot");
        assert_eq!(tok.pad_id(), id("pad"), "{name} pad");
        let eog: Vec<u32> = want["eog"]
            .as_array()
            .expect("eog")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect();
        assert_eq!(tok.eog_ids(), eog.as_slice(), "{name} eog");
        checked += 1;
    }
    eprintln!("checked {checked} vocabularies");
}
