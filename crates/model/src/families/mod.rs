//! The family tables. Adding a family means adding a file here and a line to [`ALL`].

use crate::family::Family;

mod gemma2;
mod gemma3;
mod gemma4;
mod lfm2;
mod lfm2moe;
mod llama;
mod mistral;
mod phi3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;
mod smollm3;

/// Every family, in lookup order.
pub const ALL: &[&Family] = &[
    &llama::FAMILY,
    &mistral::FAMILY,
    &qwen2::FAMILY,
    &qwen3::FAMILY,
    &gemma2::FAMILY,
    &gemma3::FAMILY,
    &smollm3::FAMILY,
    &qwen2moe::FAMILY,
    &qwen3moe::FAMILY,
    &lfm2::FAMILY,
    &lfm2moe::FAMILY,
    &phi3::FAMILY,
    &gemma4::FAMILY,
];
