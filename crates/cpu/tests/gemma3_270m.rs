//! The real Gemma 3 270M (Q4_K_M mix) against llama.cpp: for each prompt of
//! tests/fixtures/gemma3-270m/llamacpp_ref.json (made by
//! scripts/fixtures/llamacpp_logits.c through llama.h), the top-1 token at the
//! last prompt position equals llama.cpp's and the top-10 sets share at least
//! 8 ids. Skips with a message when the model file is absent (path from
//! $ANEDVD_GEMMA3_GGUF, else /root/.cache/models/gemma3-270m-q4_k_m.gguf).
#![allow(clippy::unwrap_used)]

use anedvd_base::WeightSource;
use anedvd_graph::{Backend, LogitsMode};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

fn top_k(x: &[f32], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..x.len() as u32).collect();
    idx.sort_by(|a, b| x[*b as usize].total_cmp(&x[*a as usize]));
    idx.truncate(k);
    idx
}

#[test]
fn matches_llamacpp_top_tokens() {
    let model = std::env::var("ANEDVD_GEMMA3_GGUF")
        .unwrap_or_else(|_| "/root/.cache/models/gemma3-270m-q4_k_m.gguf".into());
    if !Path::new(&model).exists() {
        eprintln!("skipping: {model} absent (set ANEDVD_GEMMA3_GGUF)");
        return;
    }
    let refs = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gemma3-270m/llamacpp_ref.json");
    let Ok(text) = std::fs::read_to_string(&refs) else {
        eprintln!("skipping: {} absent", refs.display());
        return;
    };
    let reference: Value = serde_json::from_str(&text).unwrap();
    let opened = anedvd_weights::open(&model).unwrap();
    let source: Arc<dyn WeightSource> = Arc::from(opened.source);
    let (cfg, program) = anedvd_model::load(source, &Default::default()).unwrap();
    assert_eq!((cfg.family, cfg.n_layer, cfg.n_embd), ("gemma3", 18, 640));
    let exe = anedvd_cpu::CpuBackend::new(2)
        .unwrap()
        .compile(&program)
        .unwrap();
    for case in reference["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let ids: Vec<u32> = case["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let want: Vec<u32> = case["top10_kv_f16"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["id"].as_u64().unwrap() as u32)
            .collect();
        let mut s = exe.new_session(ids.len()).unwrap();
        let logits = s.forward(&ids, LogitsMode::Last).unwrap();
        let got = top_k(logits, 10);
        let overlap = got.iter().filter(|t| want.contains(t)).count();
        eprintln!(
            "{name:12} top-1 {} (llama.cpp {}), top-10 overlap {overlap}/10, logit {:.3} (llama.cpp {:.3})",
            got[0],
            want[0],
            logits[got[0] as usize],
            case["top10_kv_f16"][0]["logit"].as_f64().unwrap()
        );
        assert_eq!(got[0], want[0], "{name}: top-1");
        assert!(overlap >= 8, "{name}: top-10 overlap {overlap}");
    }
}
