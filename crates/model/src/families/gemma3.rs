//! Gemma 3 (text): Gemma 2 plus per-head q/k norms, no attention soft-cap,
//! 5 sliding layers per global one, and a separate RoPE base (10000, no
//! scaling) for sliding layers.

use crate::family::{Family, Quirks, SlidingDefault, GEMMA_TENSORS};
use anedvd_graph::{Activation, RopePairing};

/// The gemma3 table.
pub const FAMILY: Family = Family {
    name: "gemma3",
    gguf_archs: &["gemma3"],
    hf_model_types: &["gemma3_text"],
    extra_keys: &[],
    tensors: &[GEMMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        activation: Activation::GeluTanh,
        gguf_rope_pairing: RopePairing::Neox,
        hf_norm_offset: 1.0,
        embd_scale_sqrt: true,
        sliding: SlidingDefault::Pattern(6),
        default_rope_theta_local: Some(10_000.0),
        default_rope_theta: 1_000_000.0,
        qk_norm: true,
        sandwich_norm: true,
        gguf_attn_scale_embd_per_head_layers: &[62],
        ..Quirks::BASE
    },
};
