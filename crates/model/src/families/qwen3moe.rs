//! Qwen3-MoE: the qwen3 layout (per-head q/k norms, no biases) with a
//! routed mixture of experts, top-k renormalised, no shared expert
//! (llama.cpp hard-codes the renormalisation for this architecture).

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS, QWEN_MOE_TENSORS};
use anedvd_graph::RopePairing;

/// The qwen3_moe table.
pub const FAMILY: Family = Family {
    name: "qwen3_moe",
    gguf_archs: &["qwen3moe"],
    hf_model_types: &["qwen3_moe"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS, QWEN_MOE_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        gguf_rope_pairing: RopePairing::Neox,
        sliding: SlidingDefault::None,
        default_rope_theta: 1_000_000.0,
        qk_norm: true,
        default_expert_weights_norm: true,
        ..Quirks::BASE
    },
};
