//! Qwen2 / Qwen2.5: llama layout with q/k/v biases; half-split RoPE in both
//! formats; HF `layer_types` decides sliding layers (none by default).

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS};
use anedvd_graph::RopePairing;

/// The qwen2 table.
pub const FAMILY: Family = Family {
    name: "qwen2",
    gguf_archs: &["qwen2"],
    hf_model_types: &["qwen2"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        gguf_rope_pairing: RopePairing::Neox,
        sliding: SlidingDefault::None,
        default_rope_theta: 1_000_000.0,
        ..Quirks::BASE
    },
};
