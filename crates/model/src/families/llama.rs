//! Llama (1, 2, 3.x): SiLU-gated FFN, RMS norm, llama3 RoPE scaling; GGUF q/k
//! rows are permuted by llama.cpp's converter into adjacent-pair (NORM) order.
//! Mistral GGUFs have this architecture too; when one carries
//! `llama.attention.sliding_window`, every layer uses that window (llama
//! tables set no default window, so plain Llama files never slide).

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS};
use anedvd_graph::{Activation, Gating, RopePairing};

/// The llama table.
pub const FAMILY: Family = Family {
    name: "llama",
    gguf_archs: &["llama"],
    hf_model_types: &["llama"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS],
    gguf_rope_freqs: Some("rope_freqs.weight"),
    quirks: Quirks {
        activation: Activation::Silu,
        gguf_rope_pairing: RopePairing::Norm,
        hf_rope_pairing: RopePairing::Neox,
        gguf_norm_offset: 0.0,
        hf_norm_offset: 0.0,
        embd_scale_sqrt: false,
        sliding: SlidingDefault::AllLayersInGguf,
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
