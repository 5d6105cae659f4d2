//! Llama (1, 2, 3.x): SiLU-gated FFN, RMS norm, llama3 RoPE scaling; GGUF q/k
//! rows are permuted by llama.cpp's converter into adjacent-pair (NORM) order.
//! Mistral GGUFs have this architecture too; when one carries
//! `llama.attention.sliding_window`, every layer uses that window (llama
//! tables set no default window, so plain Llama files never slide).

use crate::family::{Family, Quirks, LLAMA_TENSORS};

/// The llama table.
pub const FAMILY: Family = Family {
    name: "llama",
    gguf_archs: &["llama"],
    hf_model_types: &["llama"],
    extra_keys: &[],
    tensors: &[LLAMA_TENSORS],
    gguf_rope_freqs: Some("rope_freqs.weight"),
    quirks: Quirks::BASE,
};
