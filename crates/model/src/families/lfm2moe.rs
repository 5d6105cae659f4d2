//! LFM2-MoE (Liquid AI, e.g. LFM2-8B-A1B): LFM2's conv/attention hybrid
//! whose layers after the first `num_dense_layers` (GGUF
//! `leading_dense_block_count`) route through experts: sigmoid router
//! scores, the top-k chosen by score plus a per-expert bias (`expert_bias`,
//! GGUF `exp_probs_b`), weighted by the unbiased scores renormalised to one
//! (llama.cpp always renormalises) and times `routed_scaling_factor`.

use super::lfm2;
use crate::family::{Family, Quirks, LFM2_MOE_TENSORS, LFM2_TENSORS, LLAMA_TENSORS};
use anedvd_graph::Gating;

/// The lfm2_moe table.
pub const FAMILY: Family = Family {
    name: "lfm2_moe",
    gguf_archs: &["lfm2moe"],
    hf_model_types: &["lfm2_moe"],
    extra_keys: lfm2::KEYS,
    tensors: &[LFM2_MOE_TENSORS, LFM2_TENSORS, LLAMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        default_expert_weights_norm: true,
        expert_gating: Gating::Sigmoid,
        ..lfm2::QUIRKS
    },
};
