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
use anedvd_graph::RopePairing;

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
    gguf_rope_pairing: RopePairing::Neox,
    sliding: SlidingDefault::None,
    default_rope_theta: 1_000_000.0,
    qk_norm: true,
    ..Quirks::BASE
};
