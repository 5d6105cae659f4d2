//! Gemma 2: GELU-tanh gated FFN, `(1 + w)` RMS norms (GGUF stores `1 + w`),
//! sandwich norms, `sqrt(n_embd)` embedding scale, attention and final logit
//! soft-caps, sliding window on even layers, `query_pre_attn_scalar`.

use crate::family::{Family, Quirks, SlidingDefault, GEMMA_TENSORS};
use anedvd_graph::{Activation, RopePairing};

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
        hf_norm_offset: 1.0,
        embd_scale_sqrt: true,
        sliding: SlidingDefault::Pattern(2),
        default_sliding_window: Some(4096),
        sandwich_norm: true,
        gguf_attn_scale_embd_per_head_layers: &[46],
        ..Quirks::BASE
    },
};
