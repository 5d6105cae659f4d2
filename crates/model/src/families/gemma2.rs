//! Gemma 2: GELU-tanh gated FFN, `(1 + w)` RMS norms (GGUF stores `1 + w`),
//! sandwich norms, `sqrt(n_embd)` embedding scale, attention and final logit
//! soft-caps, sliding window on even layers, `query_pre_attn_scalar`.

use crate::family::{Family, Quirks, SlidingDefault, GEMMA_TENSORS};
use anedvd_graph::{Activation, Gating, RopePairing};

/// The gemma2 table.
pub const FAMILY: Family = Family {
    name: "gemma2",
    gguf_archs: &["gemma2"],
    hf_model_types: &["gemma2"],
    extra_keys: &[],
    tensors: &[GEMMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        activation: Activation::GeluTanh,
        gguf_rope_pairing: RopePairing::Neox,
        hf_rope_pairing: RopePairing::Neox,
        gguf_norm_offset: 0.0,
        hf_norm_offset: 1.0,
        embd_scale_sqrt: true,
        sliding: SlidingDefault::Pattern(2),
        default_sliding_window: Some(4096),
        default_rope_theta_local: None,
        default_rope_theta: 10_000.0,
        nope_interval: None,
        qk_norm: false,
        sandwich_norm: true,
        gguf_attn_scale_embd_per_head_layers: &[46],
        default_expert_weights_norm: false,
        fixed_attn_scale: None,
        v_norm: false,
        expert_gating: Gating::Softmax,
        hf_last_layer_full: false,
    },
};
