//! The same tiny checkpoint read through HF naming (config.json +
//! safetensors) and GGUF naming (llama.cpp's converter) resolves to the same
//! hyperparameters; only the documented per-format quirks differ.
#![allow(clippy::unwrap_used)]

use anedvd_base::WeightSource;
use anedvd_graph::RopePairing;
use anedvd_model::{load, ConfigOverrides, DecoderConfig, SourceFormat};
use anedvd_testkit::fixtures::{self, Format};
use std::path::Path;
use std::sync::Arc;

fn config(path: &Path, o: &ConfigOverrides) -> DecoderConfig {
    let source: Arc<dyn WeightSource> = Arc::from(anedvd_weights::open(path).unwrap().source);
    load(source, o).unwrap().0
}

#[test]
fn hf_and_gguf_configs_agree() {
    for family in fixtures::families() {
        let hf = config(
            &fixtures::path(family, Format::Hf),
            &ConfigOverrides::default(),
        );
        let o = fixtures::overrides(family, Format::GgufF32);
        let gg = config(&fixtures::path(family, Format::GgufF32), &o);
        assert_eq!(hf.format, SourceFormat::HuggingFace);
        assert_eq!(gg.format, SourceFormat::Gguf);
        assert_eq!(hf.family, gg.family, "{family}");
        let gemma = family.starts_with("gemma");
        assert_eq!(
            hf.norm_weight_offset,
            if gemma { 1.0 } else { 0.0 },
            "{family}"
        );
        assert_eq!(gg.norm_weight_offset, 0.0, "{family}");
        assert_eq!(hf.rope.pairing, RopePairing::Neox);
        // llama.cpp's converter permutes q/k rows of these into adjacent pairs
        let llama_like = ["llama", "mistral", "smollm3"].contains(&family);
        let want = if llama_like {
            RopePairing::Norm
        } else {
            RopePairing::Neox
        };
        assert_eq!(gg.rope.pairing, want, "{family}");
        // Everything else is equal once the per-format fields are aligned.
        let mut aligned = gg.clone();
        aligned.format = hf.format;
        aligned.norm_weight_offset = hf.norm_weight_offset;
        aligned.rope.pairing = hf.rope.pairing;
        if family == "llama" {
            // HF keeps llama3 parameters; GGUF carries them as rope_freqs.weight.
            assert!(matches!(
                gg.rope.scaling,
                anedvd_model::RopeScaling::FreqFactors { .. }
            ));
            aligned.rope.scaling = hf.rope.scaling.clone();
        }
        if hf.attn_scale != gg.attn_scale {
            eprintln!(
                "{family}: attn_scale hf {} gguf {}",
                hf.attn_scale, gg.attn_scale
            );
        }
        assert_eq!(aligned, hf, "{family}");
    }
}

/// Our llama3 frequency rule (HF `rope_parameters`) against the factors
/// llama.cpp's converter wrote to `rope_freqs.weight`.
#[test]
fn llama3_frequencies_match_converter_factors() {
    let hf = fixtures::program("llama", Format::Hf);
    let gg = fixtures::program("llama", Format::GgufF32);
    let (a, b) = (inv_freq(&hf, 0), inv_freq(&gg, 0));
    assert_eq!(a.len(), b.len());
    let base = anedvd_model::base_inv_freq(10000.0, a.len() * 2);
    assert!(
        a.iter().zip(&base).any(|(x, y)| (x - y).abs() > 1e-3 * y),
        "scaling must change something"
    );
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-6 * y.abs(), "{x} vs {y}");
    }
}

/// The RoPE frequencies of `layer` (which must be a RoPE attention layer).
fn inv_freq(p: &anedvd_graph::DecoderProgram, layer: usize) -> &[f64] {
    let rope = p.layers[layer].attention().and_then(|a| a.rope.as_ref());
    &rope.expect("a RoPE attention layer").inv_freq
}
