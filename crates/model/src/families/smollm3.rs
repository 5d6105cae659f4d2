//! SmolLM3: the llama layout (SiLU-gated FFN, GQA, tied embeddings) with no
//! positional encoding on every fourth layer (NoPE). HF configs list the
//! layers in `no_rope_layers` (1 = uses RoPE); GGUFs carry no such key and
//! llama.cpp hard-codes an interval of 4 (`n_no_rope_layer_step`), which
//! `nope_interval` reproduces. The converter permutes q/k rows like llama's.

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS};

/// The smollm3 table.
pub const FAMILY: Family = Family {
    name: "smollm3",
    gguf_archs: &["smollm3"],
    hf_model_types: &["smollm3"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        sliding: SlidingDefault::None,
        default_rope_theta: 2_000_000.0,
        nope_interval: Some(4),
        ..Quirks::BASE
    },
};
