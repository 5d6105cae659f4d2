//! The composition root of anedvd: loads weights, tokenizer and chat template,
//! picks a backend, runs prefill and decode, samples, and reports timings.
//!
//! The CLI and the server are thin layers over this crate. It is the only crate
//! that knows both models and backends.

pub mod sampler;

pub use sampler::{SamplingParams, Sampler};
