//! Mistral: llama layout with a sliding window on every layer (HF files).
//! llama.cpp converts Mistral checkpoints to GGUF architecture `llama`, so
//! GGUF files of this family load through the llama table.

use crate::family::{Family, Quirks, SlidingDefault, LLAMA_TENSORS};

/// The mistral table.
pub const FAMILY: Family = Family {
    name: "mistral",
    gguf_archs: &[],
    hf_model_types: &["mistral"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS],
    gguf_rope_freqs: None,
    quirks: Quirks {
        sliding: SlidingDefault::AllLayers,
        ..Quirks::BASE
    },
};
