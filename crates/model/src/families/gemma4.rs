//! Gemma 4 (text stack, docs/gemma4-spec.md): Gemma 3's sandwich norms and
//! q/k norms with plain-`w` norms, attention scale 1.0 and a weightless
//! value norm; sliding layers with their own head dim (`head_dim` in HF,
//! `key_length_swa` in GGUF) and full layers with theirs (`global_head_dim`
//! or `per_layer_config`, `key_length`) under "proportional" RoPE; per-layer
//! input embeddings; K/V of the last `num_kv_shared_layers` layers read from
//! the last earlier layer of the same type; a residual scale per layer.
//! The 31B's `attention_k_eq_v`: full layers take V from the raw K
//! projection (before k_norm and RoPE), with their own K/V head count
//! (`num_global_key_value_heads` or `per_layer_config`; GGUF: the per-layer
//! `head_count_kv` array and no `attn_v` tensor).
//! Not supported (refused at load): the 26B-A4B expert block.

use crate::family::{key, Family, KeySpec, Param, Quirks, SlidingDefault, TensorName};
use crate::family::{GEMMA4_TENSORS, GEMMA_TENSORS};
use anedvd_graph::{Activation, RopePairing};

/// Where HF and GGUF put the two head dims (they disagree on which one
/// `head_dim`/`key_length` means).
const KEYS: &[KeySpec] = &[
    key(
        Param::HeadDim,
        &["{arch}.attention.key_length"],
        &["global_head_dim", "head_dim"],
    ),
    key(
        Param::HeadDimSwa,
        &["{arch}.attention.key_length_swa"],
        &["head_dim"],
    ),
];

/// The tables, Gemma 4's own names first.
const TENSORS: &[&[TensorName]] = &[GEMMA4_TENSORS, GEMMA_TENSORS];

/// The gemma4 table.
pub const FAMILY: Family = Family {
    name: "gemma4",
    gguf_archs: &["gemma4"],
    hf_model_types: &["gemma4_text", "gemma4"],
    extra_keys: KEYS,
    tensors: TENSORS,
    // llama.cpp's converter writes proportional RoPE as per-pair divisors:
    // 1 for the rotated pairs, 1e30 for the pass-through ones.
    gguf_rope_freqs: Some("rope_freqs.weight"),
    quirks: Quirks {
        activation: Activation::GeluTanh,
        gguf_rope_pairing: RopePairing::Neox,
        embd_scale_sqrt: true,
        sliding: SlidingDefault::Pattern(6),
        default_rope_theta_local: Some(10_000.0),
        default_rope_theta: 1_000_000.0,
        qk_norm: true,
        sandwich_norm: true,
        fixed_attn_scale: Some(1.0),
        v_norm: true,
        hf_last_layer_full: true,
        hf_global_head_dim: Some(512),
        gguf_v_from_k_when_absent: true,
        ..Quirks::BASE
    },
};
