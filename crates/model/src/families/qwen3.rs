//! Qwen3: llama layout with per-head q/k RMS norms (plain `w`), no biases,
//! explicit `head_dim`; half-split RoPE in both formats.

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS};
use anedvd_graph::RopePairing;

/// The qwen3 table.
pub const FAMILY: Family = Family {
    name: "qwen3",
    gguf_archs: &["qwen3"],
    hf_model_types: &["qwen3"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        gguf_rope_pairing: RopePairing::Neox,
        sliding: SlidingDefault::None,
        default_rope_theta: 1_000_000.0,
        qk_norm: true,
        ..Quirks::BASE
    },
};
