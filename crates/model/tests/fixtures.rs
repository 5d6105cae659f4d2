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
        assert_eq!(hf.family, fixtures::family_of(family), "{family}");
        let family = fixtures::family_of(family);
        // Gemma 2/3 HF files store `w` of a `(1 + w)` norm; Gemma 4's are plain.
        let gemma = ["gemma2", "gemma3"].contains(&family);
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
        if family == "llama" || family == "gemma4" {
            // HF keeps llama3 (proportional) parameters; GGUF carries them
            // as rope_freqs.weight (compared by the frequency tests below).
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

/// Gemma 4's full layers: HF's proportional RoPE (frequency 0 past the
/// rotated pairs) against llama.cpp's 1e30 divisors in `rope_freqs.weight`.
#[test]
fn proportional_frequencies_match_converter_factors() {
    let hf = fixtures::program("gemma4", Format::Hf);
    let gg = fixtures::program("gemma4", Format::GgufF32);
    // layer 3 is the first full-attention layer (head dim 32, 4 of 16 pairs rotate)
    let (a, b) = (inv_freq(&hf, 3), inv_freq(&gg, 3));
    assert_eq!(a.len(), 16);
    assert_eq!(b.len(), 16);
    let base = anedvd_model::base_inv_freq(1e6, 32);
    for j in 0..16 {
        if j < 4 {
            assert!((a[j] - base[j]).abs() <= 1e-12 * base[j], "pair {j}");
            assert!(
                (a[j] - b[j]).abs() <= 1e-6 * a[j],
                "pair {j}: {} vs {}",
                a[j],
                b[j]
            );
        } else {
            assert_eq!(a[j], 0.0, "pair {j}");
            assert!(b[j] < 1e-29, "pair {j}: {}", b[j]);
        }
    }
    // sliding layers: plain RoPE over their own 16 dims at base 1e4
    assert_eq!(inv_freq(&hf, 0), &anedvd_model::base_inv_freq(1e4, 16)[..]);
    assert_eq!(inv_freq(&gg, 0), inv_freq(&hf, 0));
}

/// The RoPE frequencies of `layer` (which must be a RoPE attention layer).
fn inv_freq(p: &anedvd_graph::DecoderProgram, layer: usize) -> &[f64] {
    let rope = p.layers[layer].attention().and_then(|a| a.rope.as_ref());
    &rope.expect("a RoPE attention layer").inv_freq
}

/// Gemma 4's per-layer geometry, in both namings, against what transformers
/// resolved for the fixture (reference.json `gemma4_layers`): head dims,
/// K/V heads, FFN widths (double-wide on the shared layers), windows and
/// the layer whose K/V each layer attends over.
#[test]
fn gemma4_layers_match_transformers() {
    for fixture in ["gemma4", "gemma4_keqv"] {
        gemma4_layers_match(fixture);
    }
}

fn gemma4_layers_match(fixture: &str) {
    let r = fixtures::reference(fixture).json;
    let want = r["gemma4_layers"].as_array().unwrap();
    for format in [Format::Hf, Format::GgufF32, Format::GgufQ8] {
        let p = fixtures::program(fixture, format);
        assert_eq!(p.layers.len(), want.len());
        for (i, (b, w)) in p.layers.iter().zip(want).enumerate() {
            let a = b.attention().unwrap();
            let tag = format!("{fixture} {} layer {i}", format.name());
            assert_eq!(a.head_dim as u64, w["head_dim"].as_u64().unwrap(), "{tag}");
            assert_eq!(
                a.n_head_kv as u64,
                w["num_kv_heads"].as_u64().unwrap(),
                "{tag}"
            );
            assert_eq!(
                a.window.map(|x| x as u64),
                w["sliding_window"].as_u64(),
                "{tag}"
            );
            let source = a.kv_source.unwrap_or(i) as u64;
            assert_eq!(source, w["kv_source_layer"].as_u64().unwrap(), "{tag}");
            let anedvd_graph::FeedForward::Dense(f) = &b.ffn else {
                panic!("{tag}: not dense")
            };
            assert_eq!(f.n_ff as u64, w["ffn"].as_u64().unwrap(), "{tag}");
            assert!(a.v_norm && a.scale == 1.0, "{tag}");
            // transformers builds no v_proj for the full layers of an
            // `attention_k_eq_v` model (V is the raw K projection)
            let v_is_k = fixture == "gemma4_keqv" && w["type"] == "full_attention";
            assert_eq!(a.wv == a.wk, v_is_k, "{tag}: {} vs {}", a.wv, a.wk);
            assert_eq!(a.bias.v, a.bias.k, "{tag}");
            assert!(
                b.per_layer_input.is_some() && b.layer_scale.is_some(),
                "{tag}"
            );
        }
        let e = p.per_layer_embd.as_ref().unwrap();
        assert_eq!(e.width, 16);
    }
}
