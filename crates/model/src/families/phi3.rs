//! Phi-3 / Phi-4-mini: the llama layout with q/k/v fused into one matrix
//! and gate/up into another (split into views by the loader), half-split
//! RoPE (no q/k permutation in GGUF), optional partial rotary, LongRoPE
//! (short factors), untied output.

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS, PHI3_FUSED_TENSORS};
use anedvd_graph::{Activation, Gating, RopePairing};

/// The phi3 table.
pub const FAMILY: Family = Family {
    name: "phi3",
    gguf_archs: &["phi3"],
    hf_model_types: &["phi3"],
    extra_keys: &[],
    tensors: &[PHI3_FUSED_TENSORS, LLAMA_TENSORS],
    // LongRoPE files (Phi-3-mini-128k, Phi-3.5, Phi-4-mini) carry the
    // per-pair divisors as tensors; the short ones serve the contexts the
    // model was pretrained on (see `RopeScaling::LongRope`).
    gguf_rope_freqs: Some("rope_factors_short.weight"),
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
