//! Mistral: llama layout with a sliding window on every layer (HF files).
//! llama.cpp converts Mistral checkpoints to GGUF architecture `llama`, so
//! GGUF files of this family load through the llama table.

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS};
use anedvd_graph::{Activation, Gating, RopePairing};

/// The mistral table.
pub const FAMILY: Family = Family {
    name: "mistral",
    gguf_archs: &[],
    hf_model_types: &["mistral"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        activation: Activation::Silu,
        gguf_rope_pairing: RopePairing::Norm,
        hf_rope_pairing: RopePairing::Neox,
        gguf_norm_offset: 0.0,
        hf_norm_offset: 0.0,
        embd_scale_sqrt: false,
        sliding: SlidingDefault::AllLayers,
        default_sliding_window: None,
        default_rope_theta_local: None,
        default_rope_theta: 10_000.0,
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
