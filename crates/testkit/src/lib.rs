//! Test support shared by every crate's integration tests, and the home of
//! the conformance suite (`tests/conformance.rs`).
//!
//! - [`fixtures`]: the tiny reference checkpoints in `tests/fixtures/models`
//!   (one per family, plus config variants such as `gemma4_keqv`, made by
//!   `scripts/fixtures/gen_tiny_models.py` with HF
//!   transformers and llama.cpp's converter), their `reference.json`, and the
//!   one place that knows which overrides a fixture format needs.
//! - [`backends`]: every backend under test, built the same way everywhere.
//! - [`tolerance`]: how close each backend must come to transformers, per
//!   fixture format — one table.
//! - [`oracle`]: an f64 textbook forward pass over a program, written from
//!   the equations (it shares no code with any backend), for op-level cases
//!   on synthetic programs.
//!
//! Fixtures that are missing make the calling test fail, never skip: they
//! are committed.

pub mod backends;
pub mod fixtures;
pub mod oracle;
pub mod tolerance;

pub use anedvd_ane::backend::selftest::{argmax, cosine, max_rel};

/// `n` token ids below `n_vocab`, the same for the same `seed` (a 64-bit
/// LCG): long inputs for tests whose fixtures' prompts are short.
pub fn random_tokens(seed: u64, n: usize, n_vocab: usize) -> Vec<u32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % n_vocab.max(1) as u64) as u32
        })
        .collect()
}
