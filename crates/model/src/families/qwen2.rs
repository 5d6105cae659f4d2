//! Qwen2 / Qwen2.5: llama layout with q/k/v biases; half-split RoPE in both
//! formats; HF `layer_types` decides sliding layers (none by default).

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS};
use anedvd_graph::{Activation, Gating, RopePairing};

/// The qwen2 table.
pub const FAMILY: Family = Family {
    name: "qwen2",
    gguf_archs: &["qwen2"],
    hf_model_types: &["qwen2"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS],
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
        qk_norm: false,
        sandwich_norm: false,
        gguf_attn_scale_embd_per_head_layers: &[],
        default_expert_weights_norm: false,
        fixed_attn_scale: None,
        v_norm: false,
        expert_gating: Gating::Softmax,
        hf_last_layer_full: false,
    },
};
