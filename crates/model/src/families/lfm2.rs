//! LFM2 / LFM2.5 (Liquid AI): gated short-convolution blocks interleaved
//! with GQA attention blocks (per-head q/k norms, half-split RoPE), a SiLU
//! gated FFN in every layer, the final norm named `embedding_norm` (HF) or
//! `token_embd_norm` (GGUF). Which layers convolve: HF `layer_types`
//! (`"conv"`) or `full_attn_idxs`; GGUF `lfm2.attention.head_count_kv[i] == 0`.
//! HF configs give the FFN width before LFM2's 2/3 adjustment. See
//! ../shared/docs/lfm2-spec.md.

use crate::family::{
    key, Family, KeySpec, Param, Quirks, SlidingDefault, LFM2_TENSORS, LLAMA_TENSORS,
};
use anedvd_graph::{Activation, Gating, RopePairing};

/// LFM2's HF names for the norm epsilon and the FFN width.
pub(crate) const KEYS: &[KeySpec] = &[
    key(
        Param::NormEps,
        &["{arch}.attention.layer_norm_rms_epsilon"],
        &["norm_eps", "block_norm_eps"],
    ),
    key(
        Param::NFf,
        &["{arch}.feed_forward_length"],
        &["intermediate_size", "block_ff_dim"],
    ),
];

/// The lfm2 table.
pub const FAMILY: Family = Family {
    name: "lfm2",
    gguf_archs: &["lfm2"],
    hf_model_types: &["lfm2"],
    extra_keys: KEYS,
    tensors: &[LFM2_TENSORS, LLAMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: QUIRKS,
};

/// LFM2's quirks (shared with LFM2-MoE, which changes the MoE ones).
pub(crate) const QUIRKS: Quirks = Quirks {
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
    default_expert_weights_norm: false,
    fixed_attn_scale: None,
    v_norm: false,
    expert_gating: Gating::Softmax,
    hf_last_layer_full: false,
};
