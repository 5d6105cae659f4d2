//! Qwen3-MoE: the qwen3 layout (per-head q/k norms, no biases) with a
//! routed mixture of experts, top-k renormalised, no shared expert
//! (llama.cpp hard-codes the renormalisation for this architecture).

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS, QWEN_MOE_TENSORS};
use anedvd_graph::{Activation, Gating, RopePairing};

/// The qwen3_moe table.
pub const FAMILY: Family = Family {
    name: "qwen3_moe",
    gguf_archs: &["qwen3moe"],
    hf_model_types: &["qwen3_moe"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS, QWEN_MOE_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        activation: Activation::Silu,
        gguf_rope_pairing: RopePairing::Neox,
        hf_rope_pairing: RopePairing::Neox,
        gguf_norm_offset: 0.0,
        hf_norm_offset: 0.0,
        embd_scale_sqrt: false,
        sliding: SlidingDefault::None,
        default_sliding_window: None,
        default_rope_theta_local: None,
        default_rope_theta: 1_000_000.0,
        nope_interval: None,
        qk_norm: true,
        sandwich_norm: false,
        gguf_attn_scale_embd_per_head_layers: &[],
        default_expert_weights_norm: true,
        fixed_attn_scale: None,
        v_norm: false,
        expert_gating: Gating::Softmax,
        hf_last_layer_full: false,
    },
};
