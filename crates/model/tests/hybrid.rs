//! LFM2 (short conv + attention), Qwen-MoE and Phi-3 (fused tensors) over
//! in-memory sources: what resolves, and the bad metadata that must be
//! refused with an error naming the key.
#![allow(clippy::unwrap_used)]

use anedvd_base::MetadataValue as V;
use anedvd_graph::{ExpertTensors, FeedForward, MemorySource, Mixer};
use anedvd_model::{load, ConfigOverrides, Error};
use std::sync::Arc;

const D: u64 = 64;
const HD: u64 = 16;
const NH: u64 = 4;
const FF: u64 = 96;
const VOCAB: u64 = 50;

fn put(s: &mut MemorySource, name: &str, shape: &[u64]) {
    s.insert_f32(
        name,
        shape,
        &vec![0.0; shape.iter().product::<u64>() as usize],
    );
}

/// An lfm2 GGUF with 3 layers: conv, attention (2 KV heads), conv.
fn gguf_lfm2() -> MemorySource {
    let mut s = MemorySource::new("gguf");
    let m = s.metadata_mut();
    m.insert("general.architecture", V::String("lfm2".into()));
    m.insert("lfm2.embedding_length", V::U32(D as u32));
    m.insert("lfm2.block_count", V::U32(3));
    m.insert("lfm2.attention.head_count", V::U32(NH as u32));
    m.insert(
        "lfm2.attention.head_count_kv",
        V::Array(vec![0i64, 2, 0].into()),
    );
    m.insert("lfm2.feed_forward_length", V::U32(FF as u32));
    m.insert("lfm2.attention.layer_norm_rms_epsilon", V::F32(1e-5));
    m.insert("lfm2.shortconv.l_cache", V::U32(3));
    put(&mut s, "token_embd.weight", &[D, VOCAB]);
    put(&mut s, "token_embd_norm.weight", &[D]);
    for i in 0..3 {
        put(&mut s, &format!("blk.{i}.attn_norm.weight"), &[D]);
        put(&mut s, &format!("blk.{i}.ffn_norm.weight"), &[D]);
        put(&mut s, &format!("blk.{i}.ffn_gate.weight"), &[D, FF]);
        put(&mut s, &format!("blk.{i}.ffn_up.weight"), &[D, FF]);
        put(&mut s, &format!("blk.{i}.ffn_down.weight"), &[FF, D]);
        if i == 1 {
            put(&mut s, "blk.1.attn_q.weight", &[D, NH * HD]);
            put(&mut s, "blk.1.attn_k.weight", &[D, 2 * HD]);
            put(&mut s, "blk.1.attn_v.weight", &[D, 2 * HD]);
            put(&mut s, "blk.1.attn_output.weight", &[NH * HD, D]);
            put(&mut s, "blk.1.attn_q_norm.weight", &[HD]);
            put(&mut s, "blk.1.attn_k_norm.weight", &[HD]);
        } else {
            put(
                &mut s,
                &format!("blk.{i}.shortconv.in_proj.weight"),
                &[D, 3 * D],
            );
            put(&mut s, &format!("blk.{i}.shortconv.conv.weight"), &[3, D]);
            put(
                &mut s,
                &format!("blk.{i}.shortconv.out_proj.weight"),
                &[D, D],
            );
        }
    }
    s
}

/// A qwen2moe GGUF with 1 layer: 4 experts, top-2, a gated shared expert.
fn gguf_qwen2moe() -> MemorySource {
    let mut s = MemorySource::new("gguf");
    let m = s.metadata_mut();
    m.insert("general.architecture", V::String("qwen2moe".into()));
    m.insert("qwen2moe.embedding_length", V::U32(D as u32));
    m.insert("qwen2moe.block_count", V::U32(1));
    m.insert("qwen2moe.attention.head_count", V::U32(NH as u32));
    m.insert("qwen2moe.attention.head_count_kv", V::U32(2));
    m.insert("qwen2moe.attention.layer_norm_rms_epsilon", V::F32(1e-6));
    m.insert("qwen2moe.expert_count", V::U32(4));
    m.insert("qwen2moe.expert_used_count", V::U32(2));
    m.insert("qwen2moe.expert_feed_forward_length", V::U32(32));
    m.insert(
        "qwen2moe.expert_shared_feed_forward_length",
        V::U32(FF as u32),
    );
    put(&mut s, "token_embd.weight", &[D, VOCAB]);
    put(&mut s, "output_norm.weight", &[D]);
    put(&mut s, "blk.0.attn_norm.weight", &[D]);
    put(&mut s, "blk.0.attn_q.weight", &[D, NH * HD]);
    put(&mut s, "blk.0.attn_k.weight", &[D, 2 * HD]);
    put(&mut s, "blk.0.attn_v.weight", &[D, 2 * HD]);
    put(&mut s, "blk.0.attn_output.weight", &[NH * HD, D]);
    put(&mut s, "blk.0.ffn_norm.weight", &[D]);
    put(&mut s, "blk.0.ffn_gate_inp.weight", &[D, 4]);
    put(&mut s, "blk.0.ffn_gate_exps.weight", &[D, 32, 4]);
    put(&mut s, "blk.0.ffn_up_exps.weight", &[D, 32, 4]);
    put(&mut s, "blk.0.ffn_down_exps.weight", &[32, D, 4]);
    put(&mut s, "blk.0.ffn_gate_shexp.weight", &[D, FF]);
    put(&mut s, "blk.0.ffn_up_shexp.weight", &[D, FF]);
    put(&mut s, "blk.0.ffn_down_shexp.weight", &[FF, D]);
    put(&mut s, "blk.0.ffn_gate_inp_shexp.weight", &[D]);
    s
}

fn bad_value(r: anedvd_model::Result<impl std::fmt::Debug>, key: &str, text: &str) {
    let err = r.unwrap_err();
    assert!(
        matches!(&err, Error::BadValue { key: k, reason } if k.contains(key) && reason.contains(text)),
        "{err}"
    );
}

#[test]
fn lfm2_layers_follow_the_per_layer_head_counts() {
    let (cfg, p) = load(Arc::new(gguf_lfm2()), &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.conv_layers, [true, false, true]);
    assert_eq!(cfg.n_head_kv_layers, [0, 2, 0]);
    assert_eq!(cfg.conv_kernel, Some(3));
    let kinds: Vec<&str> = p.layers.iter().map(|b| b.mixer.kind()).collect();
    assert_eq!(kinds, ["short_conv", "attention", "short_conv"]);
    let a = p.layers[1].attention().unwrap();
    assert_eq!((a.n_head_kv, a.q_norm.is_some()), (2, true));
    assert_eq!(p.output_norm, "token_embd_norm.weight");
    // Older conversions name the final norm output_norm.
    let mut s = gguf_lfm2();
    s.remove("token_embd_norm.weight");
    put(&mut s, "output_norm.weight", &[D]);
    let (_, p) = load(Arc::new(s), &ConfigOverrides::default()).unwrap();
    assert_eq!(p.output_norm, "output_norm.weight");
}

#[test]
fn lfm2_bad_metadata_is_refused_by_key() {
    let with = |key: &str, v: V| {
        let mut s = gguf_lfm2();
        s.metadata_mut().insert(key, v);
        load(Arc::new(s), &ConfigOverrides::default())
    };
    bad_value(
        with(
            "lfm2.attention.head_count_kv",
            V::Array(vec![0i64, 2].into()),
        ),
        "lfm2.attention.head_count_kv",
        "2 entries for 3 layers",
    );
    bad_value(
        with("lfm2.shortconv.l_cache", V::U32(65)),
        "lfm2.shortconv.l_cache",
        "65 taps",
    );
    bad_value(
        with("lfm2.shortconv.l_cache", V::U32(0)),
        "lfm2.shortconv.l_cache",
        "0 taps",
    );
    let err = {
        let mut s = gguf_lfm2();
        s.remove("blk.0.shortconv.conv.weight");
        load(Arc::new(s), &ConfigOverrides::default()).unwrap_err()
    };
    assert!(
        err.to_string().contains("blk.0.shortconv.conv.weight"),
        "{err}"
    );
}

#[test]
fn lfm2_hf_layer_types_and_ffn_sizing() {
    // LFM2's rule (1.2B: 12288 -> 8192): int(2/3 * n) * multiplier, rounded
    // up to block_multiple_of; here int(2 * 150 / 3) = 100 -> 128.
    const ADJ: u64 = 128;
    let mut s = MemorySource::new("safetensors");
    let m = s.metadata_mut();
    m.insert("model_type", V::String("lfm2".into()));
    m.insert("hidden_size", V::U32(D as u32));
    m.insert("num_hidden_layers", V::U32(2));
    m.insert("num_attention_heads", V::U32(NH as u32));
    m.insert("num_key_value_heads", V::U32(2));
    m.insert("intermediate_size", V::U32(150));
    m.insert("block_auto_adjust_ff_dim", V::Bool(true));
    m.insert("block_ffn_dim_multiplier", V::F32(1.0));
    m.insert("block_multiple_of", V::U32(32));
    m.insert("norm_eps", V::F32(1e-5));
    m.insert("conv_L_cache", V::U32(3));
    let types = anedvd_base::PackedStrings::from_strs(["conv", "full_attention"]).unwrap();
    m.insert("layer_types", V::Array(types.into()));
    put(&mut s, "model.embed_tokens.weight", &[D, VOCAB]);
    put(&mut s, "model.embedding_norm.weight", &[D]);
    for i in 0..2 {
        let l = format!("model.layers.{i}");
        put(&mut s, &format!("{l}.operator_norm.weight"), &[D]);
        put(&mut s, &format!("{l}.ffn_norm.weight"), &[D]);
        put(&mut s, &format!("{l}.feed_forward.w1.weight"), &[D, ADJ]);
        put(&mut s, &format!("{l}.feed_forward.w3.weight"), &[D, ADJ]);
        put(&mut s, &format!("{l}.feed_forward.w2.weight"), &[ADJ, D]);
    }
    put(&mut s, "model.layers.0.conv.in_proj.weight", &[D, 3 * D]);
    // HF keeps Conv1d's middle axis: [hidden, 1, L] is ggml [L, 1, hidden].
    put(&mut s, "model.layers.0.conv.conv.weight", &[3, 1, D]);
    put(&mut s, "model.layers.0.conv.out_proj.weight", &[D, D]);
    for (n, rows) in [("q_proj", NH * HD), ("k_proj", 2 * HD), ("v_proj", 2 * HD)] {
        put(
            &mut s,
            &format!("model.layers.1.self_attn.{n}.weight"),
            &[D, rows],
        );
    }
    put(
        &mut s,
        "model.layers.1.self_attn.out_proj.weight",
        &[NH * HD, D],
    );
    put(&mut s, "model.layers.1.self_attn.q_layernorm.weight", &[HD]);
    put(&mut s, "model.layers.1.self_attn.k_layernorm.weight", &[HD]);
    let (cfg, p) = load(Arc::new(s), &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.n_ff, ADJ as usize);
    assert_eq!(cfg.conv_layers, [true, false]);
    assert_eq!(p.layers[0].mixer.kind(), "short_conv");
    assert_eq!(p.output_norm, "model.embedding_norm.weight");
}

#[test]
fn moe_resolves_experts_and_shared_expert() {
    let (cfg, p) = load(Arc::new(gguf_qwen2moe()), &ConfigOverrides::default()).unwrap();
    let moe = cfg.moe.as_ref().unwrap();
    assert_eq!(
        (moe.n_expert, moe.n_expert_used, moe.normalize_top_k),
        (4, 2, false)
    );
    let FeedForward::Moe(m) = &p.layers[0].ffn else {
        panic!("dense")
    };
    assert!(matches!(m.experts, ExpertTensors::Stacked { .. }));
    let shared = m.shared.as_ref().unwrap();
    assert_eq!(shared.ffn.n_ff, FF as usize);
    assert_eq!(
        shared.gate_inp.as_deref(),
        Some("blk.0.ffn_gate_inp_shexp.weight")
    );
    assert!(matches!(p.layers[0].mixer, Mixer::Attention(_)));
}

#[test]
fn moe_bad_expert_counts_are_refused_by_key() {
    let with = |key: &str, v: V| {
        let mut s = gguf_qwen2moe();
        s.metadata_mut().insert(key, v);
        load(Arc::new(s), &ConfigOverrides::default())
    };
    bad_value(
        with("qwen2moe.expert_count", V::U32(0)),
        "qwen2moe.expert_count",
        "0 experts",
    );
    bad_value(
        with("qwen2moe.expert_used_count", V::U32(5)),
        "qwen2moe.expert_used_count",
        "5 experts per token of 4",
    );
    bad_value(
        with("qwen2moe.expert_used_count", V::U32(0)),
        "qwen2moe.expert_used_count",
        "0 experts per token",
    );
    // Router options (LFM2-MoE's keys): an unknown gating function, a bad
    // weights scale.
    let e = with("qwen2moe.expert_gating_func", V::U32(7)).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("gating function 7") && m.contains("expert_gating_func")),
        "{e}"
    );
    bad_value(
        with("qwen2moe.expert_weights_scale", V::F32(-1.0)),
        "qwen2moe.expert_weights_scale",
        "-1",
    );
    // A router whose width disagrees with the expert count.
    let mut s = gguf_qwen2moe();
    s.metadata_mut().insert("qwen2moe.expert_count", V::U32(3));
    let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
    assert!(
        err.to_string().contains("blk.0.ffn_gate_inp.weight"),
        "{err}"
    );
}

/// A phi3 GGUF with one layer: fused q/k/v rows 1/2/3, fused gate/up rows
/// 1/2, 8 rotated dims.
fn gguf_phi3() -> MemorySource {
    let mut s = MemorySource::new("gguf");
    let m = s.metadata_mut();
    m.insert("general.architecture", V::String("phi3".into()));
    m.insert("phi3.embedding_length", V::U32(D as u32));
    m.insert("phi3.block_count", V::U32(1));
    m.insert("phi3.attention.head_count", V::U32(NH as u32));
    m.insert("phi3.attention.head_count_kv", V::U32(2));
    m.insert("phi3.feed_forward_length", V::U32(FF as u32));
    m.insert("phi3.rope.dimension_count", V::U32(8));
    m.insert("phi3.attention.layer_norm_rms_epsilon", V::F32(1e-5));
    put(&mut s, "token_embd.weight", &[D, VOCAB]);
    put(&mut s, "output_norm.weight", &[D]);
    put(&mut s, "output.weight", &[D, VOCAB]);
    put(&mut s, "blk.0.attn_norm.weight", &[D]);
    put(&mut s, "blk.0.ffn_norm.weight", &[D]);
    // q rows 0..64 = 1, k rows = 2, v rows = 3; gate rows 1, up rows 2.
    let rows = |parts: &[(u64, f32)]| -> Vec<f32> {
        parts
            .iter()
            .flat_map(|&(n, v)| std::iter::repeat_n(v, (n * D) as usize))
            .collect()
    };
    let qkv = rows(&[(NH * HD, 1.0), (2 * HD, 2.0), (2 * HD, 3.0)]);
    s.insert_f32("blk.0.attn_qkv.weight", &[D, NH * HD + 4 * HD], &qkv);
    put(&mut s, "blk.0.attn_output.weight", &[NH * HD, D]);
    let gate_up = rows(&[(FF, 1.0), (FF, 2.0)]);
    s.insert_f32("blk.0.ffn_up.weight", &[D, 2 * FF], &gate_up);
    put(&mut s, "blk.0.ffn_down.weight", &[FF, D]);
    s
}

#[test]
fn phi3_fused_tensors_of_the_wrong_height_are_refused() {
    for rows in [NH * HD + 4 * HD - 32, NH * HD + 4 * HD + 32] {
        let mut s = gguf_phi3();
        put(&mut s, "blk.0.attn_qkv.weight", &[D, rows]);
        let err = load(Arc::new(s), &ConfigOverrides::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "tensor blk.0.attn_qkv.weight: expected [{D}, {}], found [{D}, {rows}]",
                NH * HD + 4 * HD
            )
        );
    }
}

#[test]
fn phi3_fused_tensors_become_row_views() {
    let s = gguf_phi3();
    let (cfg, p) = load(Arc::new(s), &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.rope.n_rot, 8);
    let a = p.layers[0].attention().unwrap();
    let first = |name: &str, len: u64| {
        let t = p.weights.tensor(name).unwrap();
        assert_eq!(t.info.shape, [D, len], "{name}");
        f32::from_le_bytes(t.data[..4].try_into().unwrap())
    };
    assert_eq!(first(&a.wq, NH * HD), 1.0);
    assert_eq!(first(&a.wk, 2 * HD), 2.0);
    assert_eq!(first(&a.wv, 2 * HD), 3.0);
    let FeedForward::Dense(f) = &p.layers[0].ffn else {
        panic!("moe")
    };
    assert_eq!(first(&f.gate, FF), 1.0);
    assert_eq!(first(&f.up, FF), 2.0);
}

/// Phi-3 LongRoPE from an HF config resolves to transformers' short-factor
/// frequencies and attention factor (tests/data/rope_goldens.json,
/// `longrope_phi3`), and a GGUF's `rope_factors_short.weight` with its
/// `attn_factor` key to the same.
#[test]
fn phi3_longrope_follows_transformers() {
    let golden: serde_json::Value =
        serde_json::from_str(include_str!("data/rope_goldens.json")).unwrap();
    let case = golden["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "longrope_phi3")
        .unwrap();
    let want: Vec<f64> = case["inv_freq"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let want_attn = case["attention_factor"].as_f64().unwrap();
    let short: Vec<f64> = case["rope"]["short_factor"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();

    let mut s = MemorySource::new("safetensors");
    let m = s.metadata_mut();
    m.insert("model_type", V::String("phi3".into()));
    m.insert("hidden_size", V::U32(D as u32));
    m.insert("num_hidden_layers", V::U32(1));
    m.insert("num_attention_heads", V::U32(NH as u32));
    m.insert("num_key_value_heads", V::U32(NH as u32));
    m.insert("intermediate_size", V::U32(FF as u32));
    m.insert("rms_norm_eps", V::F32(1e-5));
    m.insert("max_position_embeddings", V::U32(131072));
    m.insert("original_max_position_embeddings", V::U32(4096));
    m.insert("partial_rotary_factor", V::F32(0.5));
    m.insert("rope_parameters.rope_type", V::String("longrope".into()));
    m.insert("rope_parameters.rope_theta", V::F32(10000.0));
    m.insert(
        "rope_parameters.short_factor",
        V::Array(short.clone().into()),
    );
    m.insert(
        "rope_parameters.long_factor",
        V::Array(vec![1.5f64, 3.0, 6.0, 12.0].into()),
    );
    put(&mut s, "model.embed_tokens.weight", &[D, VOCAB]);
    put(&mut s, "model.norm.weight", &[D]);
    put(&mut s, "lm_head.weight", &[D, VOCAB]);
    let l = "model.layers.0";
    put(&mut s, &format!("{l}.input_layernorm.weight"), &[D]);
    put(
        &mut s,
        &format!("{l}.post_attention_layernorm.weight"),
        &[D],
    );
    put(
        &mut s,
        &format!("{l}.self_attn.qkv_proj.weight"),
        &[D, 3 * NH * HD],
    );
    put(
        &mut s,
        &format!("{l}.self_attn.o_proj.weight"),
        &[NH * HD, D],
    );
    put(
        &mut s,
        &format!("{l}.mlp.gate_up_proj.weight"),
        &[D, 2 * FF],
    );
    put(&mut s, &format!("{l}.mlp.down_proj.weight"), &[FF, D]);
    let notes = anedvd_model::notes(&s, &ConfigOverrides::default());
    assert!(notes.iter().any(|n| n.starts_with("LongRoPE")), "{notes:?}");
    // Bad factor lists: a count that does not match the rotated pairs, a
    // non-positive factor.
    for (bad, text) in [
        (
            vec![1.0f64, 2.0, 3.0],
            "3 LongRoPE factors for 4 rotated pairs",
        ),
        (vec![1.0f64, 0.0, 3.0, 4.0], "expected positive numbers"),
    ] {
        let mut b = s.clone();
        b.metadata_mut()
            .insert("rope_parameters.short_factor", V::Array(bad.into()));
        let err = load(Arc::new(b), &ConfigOverrides::default()).unwrap_err();
        assert!(err.to_string().contains(text), "{err}");
    }
    let (_, p) = load(Arc::new(s), &ConfigOverrides::default()).unwrap();
    let rope = p.layers[0].attention().unwrap().rope.clone().unwrap();
    assert_eq!(rope.n_rot, 8);
    for (g, w) in rope.inv_freq.iter().zip(&want) {
        assert!((g - w).abs() <= 2e-6 * w.abs(), "{g} vs {w}");
    }
    assert!((f64::from(rope.attn_factor) - want_attn).abs() < 1e-6);

    let mut s = gguf_phi3();
    let f32s: Vec<f32> = short.iter().map(|&f| f as f32).collect();
    s.insert_f32("rope_factors_short.weight", &[4], &f32s);
    s.metadata_mut()
        .insert("phi3.rope.scaling.attn_factor", V::F32(want_attn as f32));
    let (_, p) = load(Arc::new(s), &ConfigOverrides::default()).unwrap();
    let rope = p.layers[0].attention().unwrap().rope.clone().unwrap();
    for (g, w) in rope.inv_freq.iter().zip(&want) {
        assert!((g - w).abs() <= 2e-6 * w.abs(), "gguf: {g} vs {w}");
    }
    assert!((f64::from(rope.attn_factor) - want_attn).abs() < 1e-6);
}
