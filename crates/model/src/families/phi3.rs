//! Phi-3 / Phi-4-mini: the llama layout with q/k/v fused into one matrix
//! and gate/up into another (split into views by the loader), half-split
//! RoPE (no q/k permutation in GGUF), optional partial rotary, LongRoPE
//! (short factors), untied output.

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS, PHI3_FUSED_TENSORS};
use anedvd_graph::RopePairing;

/// The phi3 table.
pub const FAMILY: Family = Family {
    name: "phi3",
    gguf_archs: &["phi3"],
    hf_model_types: &["phi3"],
    extra_keys: &[],
    tensors: &[PHI3_FUSED_TENSORS, LLAMA_TENSORS],
    // LongRoPE files (Phi-3-mini-128k, Phi-3.5, Phi-4-mini) carry the
    // per-pair divisors as tensors; the short ones serve the contexts the
    // model was pretrained on (see `RopeScaling::LongRope`).
    gguf_rope_freqs: Some("rope_factors_short.weight"),
    quirks: Quirks {
        gguf_rope_pairing: RopePairing::Neox,
        sliding: SlidingDefault::None,
        ..Quirks::BASE
    },
};
