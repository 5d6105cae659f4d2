//! Qwen2-MoE (Qwen1.5-MoE): the qwen2 layout (q/k/v biases) with a routed
//! mixture of experts in every sparse layer: softmax router in f32, top-k
//! without renormalisation, plus a shared expert scaled by a sigmoid gate.

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS, QWEN_MOE_TENSORS};
use anedvd_graph::RopePairing;

/// The qwen2_moe table.
pub const FAMILY: Family = Family {
    name: "qwen2_moe",
    gguf_archs: &["qwen2moe"],
    hf_model_types: &["qwen2_moe"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS, QWEN_MOE_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        gguf_rope_pairing: RopePairing::Neox,
        sliding: SlidingDefault::None,
        default_rope_theta: 1_000_000.0,
        ..Quirks::BASE
    },
};
