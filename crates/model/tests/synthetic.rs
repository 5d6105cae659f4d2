//! Config resolution and program building over in-memory sources.
#![allow(clippy::unwrap_used)]

use anedvd_base::MetadataValue as V;
use anedvd_graph::{MemorySource, RopePairing};
use anedvd_model::{load, ConfigOverrides, Error, RopeScaling, SourceFormat};
use std::sync::Arc;

const D: u64 = 64;
const HD: u64 = 16;
const NH: u64 = 4;
const NKV: u64 = 2;
const FF: u64 = 96;
const VOCAB: u64 = 50;

fn zeros(shape: &[u64]) -> Vec<f32> {
    vec![0.0; shape.iter().product::<u64>() as usize]
}

fn put(s: &mut MemorySource, name: &str, shape: &[u64]) {
    s.insert_f32(name, shape, &zeros(shape));
}

/// A llama-named GGUF source with `n_layer` layers.
fn gguf_llama(n_layer: u64) -> MemorySource {
    let mut s = MemorySource::new("gguf");
    let m = s.metadata_mut();
    m.insert("general.architecture", V::String("llama".into()));
    m.insert("llama.embedding_length", V::U32(D as u32));
    m.insert("llama.block_count", V::U32(n_layer as u32));
    m.insert("llama.attention.head_count", V::U32(NH as u32));
    m.insert("llama.attention.head_count_kv", V::U32(NKV as u32));
    m.insert("llama.feed_forward_length", V::U32(FF as u32));
    m.insert("llama.context_length", V::U32(128));
    m.insert("llama.rope.freq_base", V::F32(10000.0));
    m.insert("llama.attention.layer_norm_rms_epsilon", V::F32(1e-5));
    put(&mut s, "token_embd.weight", &[D, VOCAB]);
    put(&mut s, "output_norm.weight", &[D]);
    for i in 0..n_layer {
        put(&mut s, &format!("blk.{i}.attn_norm.weight"), &[D]);
        put(&mut s, &format!("blk.{i}.attn_q.weight"), &[D, NH * HD]);
        put(&mut s, &format!("blk.{i}.attn_k.weight"), &[D, NKV * HD]);
        put(&mut s, &format!("blk.{i}.attn_v.weight"), &[D, NKV * HD]);
        put(
            &mut s,
            &format!("blk.{i}.attn_output.weight"),
            &[NH * HD, D],
        );
        put(&mut s, &format!("blk.{i}.ffn_norm.weight"), &[D]);
        put(&mut s, &format!("blk.{i}.ffn_gate.weight"), &[D, FF]);
        put(&mut s, &format!("blk.{i}.ffn_up.weight"), &[D, FF]);
        put(&mut s, &format!("blk.{i}.ffn_down.weight"), &[FF, D]);
    }
    s
}

/// A gemma3-named HF source with 6 layers (5 sliding + 1 global).
fn hf_gemma3() -> MemorySource {
    let mut s = MemorySource::new("safetensors");
    let m = s.metadata_mut();
    m.insert("general.source_format", V::String("safetensors".into()));
    m.insert("model_type", V::String("gemma3_text".into()));
    m.insert("hidden_size", V::I64(D as i64));
    m.insert("num_hidden_layers", V::I64(6));
    m.insert("num_attention_heads", V::I64(NH as i64));
    m.insert("num_key_value_heads", V::I64(1));
    m.insert("head_dim", V::I64(HD as i64));
    m.insert("intermediate_size", V::I64(FF as i64));
    m.insert("max_position_embeddings", V::I64(256));
    m.insert("rms_norm_eps", V::F64(1e-6));
    m.insert("query_pre_attn_scalar", V::I64(64));
    m.insert("sliding_window", V::I64(8));
    m.insert("rope_parameters.full_attention.rope_theta", V::F64(1e6));
    m.insert(
        "rope_parameters.full_attention.rope_type",
        V::String("default".into()),
    );
    m.insert("rope_parameters.sliding_attention.rope_theta", V::F64(1e4));
    let types = ["sliding_attention"; 5]
        .into_iter()
        .chain(["full_attention"]);
    let types = anedvd_base::PackedStrings::from_strs(types).unwrap();
    m.insert("layer_types", V::Array(types.into()));
    put(&mut s, "model.embed_tokens.weight", &[D, VOCAB]);
    put(&mut s, "model.norm.weight", &[D]);
    for i in 0..6 {
        let p = format!("model.layers.{i}");
        for n in [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            put(&mut s, &format!("{p}.{n}.weight"), &[D]);
        }
        put(
            &mut s,
            &format!("{p}.self_attn.q_proj.weight"),
            &[D, NH * HD],
        );
        put(&mut s, &format!("{p}.self_attn.k_proj.weight"), &[D, HD]);
        put(&mut s, &format!("{p}.self_attn.v_proj.weight"), &[D, HD]);
        put(
            &mut s,
            &format!("{p}.self_attn.o_proj.weight"),
            &[NH * HD, D],
        );
        put(&mut s, &format!("{p}.self_attn.q_norm.weight"), &[HD]);
        put(&mut s, &format!("{p}.self_attn.k_norm.weight"), &[HD]);
        put(&mut s, &format!("{p}.mlp.gate_proj.weight"), &[D, FF]);
        put(&mut s, &format!("{p}.mlp.up_proj.weight"), &[D, FF]);
        put(&mut s, &format!("{p}.mlp.down_proj.weight"), &[FF, D]);
    }
    s
}

#[test]
fn gguf_llama_resolves() {
    let (cfg, prog) = load(Arc::new(gguf_llama(2)), &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.family, "llama");
    assert_eq!(cfg.format, SourceFormat::Gguf);
    assert_eq!(
        (cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_head_kv),
        (64, 2, 4, 2)
    );
    assert_eq!(
        (cfg.head_dim, cfg.n_ff, cfg.n_vocab, cfg.n_ctx_train),
        (16, 96, 50, 128)
    );
    assert_eq!(cfg.rope.pairing, RopePairing::Norm);
    assert_eq!(cfg.rope.scaling, RopeScaling::None);
    assert!(cfg.tied_output && !cfg.qk_norm && !cfg.qkv_bias && !cfg.sandwich_norm);
    assert_eq!(cfg.norm_weight_offset, 0.0);
    assert!((cfg.attn_scale - 0.25).abs() < 1e-7);
    assert_eq!(prog.output, None);
    assert_eq!(
        prog.layers[1].attention().unwrap().wq,
        "blk.1.attn_q.weight"
    );
    assert_eq!(inv_freq(&prog, 0).len(), 8);
    assert!((inv_freq(&prog, 0)[1] - 10000f64.powf(-2.0 / 16.0)).abs() < 1e-12);
    assert!(prog
        .layers
        .iter()
        .all(|l| l.attention().unwrap().window.is_none()));
}

#[test]
fn shape_mismatch_names_tensor_and_both_shapes() {
    let mut s = gguf_llama(2);
    put(&mut s, "blk.1.attn_q.weight", &[D, 32]);
    let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor blk.1.attn_q.weight: expected [64, 64], found [64, 32]"
    );
}

#[test]
fn missing_tensor_and_missing_key_are_reported() {
    let mut s = gguf_llama(2);
    s.remove("blk.0.ffn_up.weight");
    let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
    assert!(err.to_string().contains("blk.0.ffn_up.weight"), "{err}");

    let mut s = gguf_llama(2);
    s.metadata_mut()
        .insert("llama.block_count", V::String("two".into()));
    let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
    assert!(err.to_string().contains("llama.block_count"), "{err}");
}

#[test]
fn unknown_family_lists_known_ones() {
    let mut s = gguf_llama(1);
    s.metadata_mut()
        .insert("general.architecture", V::String("rwkv7".into()));
    let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
    assert!(matches!(err, Error::UnknownFamily { .. }));
    assert!(err.to_string().contains("gemma3"), "{err}");
}

#[test]
fn overrides_apply() {
    let o = ConfigOverrides {
        family: Some("mistral".into()),
        rope_pairing: Some(RopePairing::Neox),
        n_ctx_train: Some(4096),
        sliding_window: Some(5),
    };
    let (cfg, prog) = load(Arc::new(gguf_llama(2)), &o).unwrap();
    assert_eq!(cfg.family, "mistral");
    assert_eq!(cfg.rope.pairing, RopePairing::Neox);
    assert_eq!(cfg.n_ctx_train, 4096);
    assert!(prog
        .layers
        .iter()
        .all(|l| l.attention().unwrap().window == Some(5)));
}

#[test]
fn hf_gemma3_resolves_quirks() {
    let (cfg, prog) = load(Arc::new(hf_gemma3()), &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.family, "gemma3");
    assert_eq!(cfg.format, SourceFormat::HuggingFace);
    assert_eq!(cfg.norm_weight_offset, 1.0);
    assert_eq!(cfg.rope.pairing, RopePairing::Neox);
    assert_eq!(cfg.rope.theta, 1e6);
    assert_eq!(cfg.rope.theta_local, Some(1e4));
    assert!(cfg.qk_norm && cfg.sandwich_norm && cfg.tied_output);
    assert!((cfg.embd_scale - 8.0).abs() < 1e-6);
    assert!((cfg.attn_scale - 0.125).abs() < 1e-7);
    assert_eq!(
        cfg.sliding_layers,
        vec![true, true, true, true, true, false]
    );
    assert_eq!(prog.layers[0].attention().unwrap().window, Some(8));
    assert_eq!(prog.layers[5].attention().unwrap().window, None);
    assert!((inv_freq(&prog, 0)[1] - 1e4f64.powf(-2.0 / 16.0)).abs() < 1e-12);
    assert!((inv_freq(&prog, 5)[1] - 1e6f64.powf(-2.0 / 16.0)).abs() < 1e-12);
    assert_eq!(
        prog.layers[2].norms.split().0 .1,
        Some("model.layers.2.post_attention_layernorm.weight")
    );
    assert_eq!(
        Some(prog.layers[2].norms.split().1 .0),
        Some("model.layers.2.pre_feedforward_layernorm.weight")
    );
    assert_eq!(prog.norm.weight_offset, 1.0);
}

#[test]
fn gemma3_requires_qk_norms() {
    let mut s = hf_gemma3();
    s.remove("model.layers.3.self_attn.k_norm.weight");
    let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("model.layers.3.self_attn.k_norm.weight"),
        "{err}"
    );
}

#[test]
fn llama3_scaling_from_hf_keys() {
    let mut s = MemorySource::new("safetensors");
    let m = s.metadata_mut();
    m.insert("model_type", V::String("llama".into()));
    m.insert("hidden_size", V::I64(D as i64));
    m.insert("num_hidden_layers", V::I64(1));
    m.insert("num_attention_heads", V::I64(NH as i64));
    m.insert("num_key_value_heads", V::I64(NKV as i64));
    m.insert("intermediate_size", V::I64(FF as i64));
    m.insert("rms_norm_eps", V::F64(1e-5));
    m.insert("rope_parameters.rope_type", V::String("llama3".into()));
    m.insert("rope_parameters.rope_theta", V::F64(500000.0));
    m.insert("rope_parameters.factor", V::F64(32.0));
    m.insert("rope_parameters.low_freq_factor", V::F64(1.0));
    m.insert("rope_parameters.high_freq_factor", V::F64(4.0));
    m.insert(
        "rope_parameters.original_max_position_embeddings",
        V::I64(8192),
    );
    let g = gguf_llama(1);
    for (gguf, hf) in [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        (
            "blk.0.attn_norm.weight",
            "model.layers.0.input_layernorm.weight",
        ),
        (
            "blk.0.attn_q.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        (
            "blk.0.attn_k.weight",
            "model.layers.0.self_attn.k_proj.weight",
        ),
        (
            "blk.0.attn_v.weight",
            "model.layers.0.self_attn.v_proj.weight",
        ),
        (
            "blk.0.attn_output.weight",
            "model.layers.0.self_attn.o_proj.weight",
        ),
        (
            "blk.0.ffn_norm.weight",
            "model.layers.0.post_attention_layernorm.weight",
        ),
        (
            "blk.0.ffn_gate.weight",
            "model.layers.0.mlp.gate_proj.weight",
        ),
        ("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"),
        (
            "blk.0.ffn_down.weight",
            "model.layers.0.mlp.down_proj.weight",
        ),
    ] {
        let t = anedvd_base::WeightSource::tensor(&g, gguf).unwrap();
        s.insert_raw(hf, t.info.dtype, &t.info.shape, t.data.to_vec());
    }
    let (cfg, prog) = load(Arc::new(s), &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.head_dim, 16);
    assert!(matches!(cfg.rope.scaling, RopeScaling::Llama3 { factor, .. } if factor == 32.0));
    let f = inv_freq(&prog, 0);
    let base = anedvd_model::base_inv_freq(500000.0, 16);
    // Highest frequency is untouched; the lowest is divided by the factor.
    assert_eq!(f[0], base[0]);
    assert!((f[7] - base[7] / 32.0).abs() < 1e-15);
}

#[test]
fn hostile_sizes_are_refused_before_allocation() {
    let mut s = gguf_llama(1);
    s.metadata_mut()
        .insert("llama.block_count", V::U64(1 << 40));
    let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("`llama.block_count`: 1099511627776 layers exceeds the limit"),
        "{err}"
    );
    let mut s = gguf_llama(1);
    s.metadata_mut()
        .insert("llama.rope.dimension_count", V::U32(1 << 30));
    let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
    assert!(err.to_string().contains("rotary"), "{err}");
}

#[test]
fn no_rope_layers_selects_nope_layers_and_bad_lists_are_errors() {
    let with = |v: V| {
        let mut s = hf_gemma3();
        s.metadata_mut().insert("no_rope_layers", v);
        load(Arc::new(s), &ConfigOverrides::default())
    };
    // 1 = RoPE used (HF's naming), 0 = NoPE
    let (cfg, prog) = with(V::Array(vec![1i64, 0, 1, 1, 0, 1].into())).unwrap();
    assert_eq!(cfg.rope_layers, vec![true, false, true, true, false, true]);
    let nope: Vec<bool> = prog
        .layers
        .iter()
        .map(|b| b.attention().unwrap().rope.is_none())
        .collect();
    assert_eq!(nope, vec![false, true, false, false, true, false]);

    let err = with(V::Array(vec![1i64, 0, 1].into())).unwrap_err();
    assert!(
        matches!(&err, Error::BadValue { key, reason } if key == "no_rope_layers"
            && reason.contains("3 entries for 6 layers")),
        "{err}"
    );
    let strings = anedvd_base::PackedStrings::from_strs(["yes"; 6]).unwrap();
    let err = with(V::Array(strings.into())).unwrap_err();
    assert!(
        err.to_string().contains("expected integers or bools"),
        "{err}"
    );
}

/// The RoPE frequencies of `layer` (which must be a RoPE attention layer).
fn inv_freq(p: &anedvd_graph::DecoderProgram, layer: usize) -> &[f64] {
    let rope = p.layers[layer].attention().and_then(|a| a.rope.as_ref());
    &rope.expect("a RoPE attention layer").inv_freq
}
