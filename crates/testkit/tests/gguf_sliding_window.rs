//! A Mistral GGUF that carries `llama.attention.sliding_window` uses the
//! window on every layer with no override (llama.cpp's converter drops the
//! key, so the committed fixture lacks it; this test writes a copy that has
//! it). Without the key, full attention is used, as llama.cpp does.
#![allow(clippy::unwrap_used)]

use anedvd_base::{MetadataValue, WeightSource};
use anedvd_gguf::{GgufFile, GgufWriter};
use anedvd_graph::{Backend, LogitsMode};
use anedvd_model::ConfigOverrides;
use anedvd_testkit::fixtures::{self, Format};
use anedvd_testkit::{argmax, cosine};
use std::sync::Arc;

/// The Mistral F32 fixture, rewritten with `extra` metadata added.
fn mistral_gguf_with(extra: &[(&str, MetadataValue)]) -> Arc<dyn WeightSource> {
    let file = GgufFile::open(fixtures::path("mistral", Format::GgufF32)).unwrap();
    let mut w = GgufWriter::new();
    w.set_alignment(u32::try_from(file.alignment()).unwrap())
        .unwrap();
    for (k, v) in file.metadata().iter() {
        if k != "general.alignment" {
            w.add_kv(k, v.clone()).unwrap();
        }
    }
    for (k, v) in extra {
        w.add_kv(*k, v.clone()).unwrap();
    }
    for info in file.tensors() {
        let t = file.tensor(&info.name).unwrap();
        w.add_tensor(&info.name, info.dtype, &info.shape, t.data.to_vec())
            .unwrap();
    }
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn last_logits(source: Arc<dyn WeightSource>, prompt: &[u32]) -> (Vec<Option<usize>>, Vec<f32>) {
    let (_, p) = anedvd_model::load(source, &ConfigOverrides::default()).unwrap();
    let windows = p
        .layers
        .iter()
        .map(|b| b.attention().unwrap().window)
        .collect();
    let exe = anedvd_cpu::CpuBackend::new(2).unwrap().compile(&p).unwrap();
    let mut s = exe.new_session(prompt.len()).unwrap();
    (
        windows,
        s.forward(prompt, LogitsMode::Last).unwrap().to_vec(),
    )
}

#[test]
fn a_mistral_gguf_with_the_window_key_uses_it() {
    let window = fixtures::hf_config("mistral")["sliding_window"]
        .as_u64()
        .unwrap();
    let r = fixtures::reference("mistral");
    let keyed = mistral_gguf_with(&[(
        "llama.attention.sliding_window",
        MetadataValue::U32(u32::try_from(window).unwrap()),
    )]);
    let (windows, got) = last_logits(keyed, &r.prompt);
    assert!(
        windows.iter().all(|w| *w == Some(window as usize)),
        "{windows:?}"
    );
    let c = cosine(&got, &r.last);
    assert!(
        c >= 0.99999,
        "with the window key: cosine {c} vs transformers"
    );
    assert_eq!(argmax(&got), argmax(&r.last));

    // the fixture as converted: no key, full attention, far from transformers
    let plain: Arc<dyn WeightSource> =
        Arc::new(GgufFile::open(fixtures::path("mistral", Format::GgufF32)).unwrap());
    let (windows, got) = last_logits(plain, &r.prompt);
    assert!(windows.iter().all(Option::is_none), "{windows:?}");
    let c = cosine(&got, &r.last);
    assert!(
        c < 0.999,
        "without the key the window must not apply: cosine {c}"
    );
}

#[test]
fn notes_say_when_a_mistral_gguf_lacks_the_window() {
    let note =
        |source: Arc<dyn WeightSource>| anedvd_model::notes(source.as_ref(), &Default::default());
    let plain: Arc<dyn WeightSource> =
        Arc::new(GgufFile::open(fixtures::path("mistral", Format::GgufF32)).unwrap());
    let n = note(plain);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(
        n[0].contains("no `llama.attention.sliding_window`: full attention"),
        "{n:?}"
    );
    let keyed = mistral_gguf_with(&[("llama.attention.sliding_window", MetadataValue::U32(8))]);
    assert!(note(keyed).is_empty());
    // a Llama GGUF is not a Mistral one
    let llama: Arc<dyn WeightSource> =
        Arc::new(GgufFile::open(fixtures::path("llama", Format::GgufF32)).unwrap());
    assert!(note(llama).is_empty());
}

/// transformers' `LlamaAttention` has no window: an HF llama config that
/// carries a `sliding_window` key (some derived checkpoints do) must not
/// slide, while the same key in a llama-architecture GGUF means Mistral.
#[test]
fn an_hf_llama_config_with_a_window_key_does_not_slide() {
    let src = fixtures::dir("llama");
    let dir = std::env::temp_dir().join(format!("anedvd-llama-window-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = fixtures::hf_config("llama");
    config["sliding_window"] = serde_json::json!(4);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let opened = anedvd_weights::open(&dir).unwrap();
    let source: Arc<dyn WeightSource> = Arc::from(opened.source);
    let (cfg, p) = anedvd_model::load(source, &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.sliding_window, Some(4));
    assert!(p
        .layers
        .iter()
        .all(|b| b.attention().unwrap().window.is_none()));
    std::fs::remove_dir_all(&dir).unwrap();
}
