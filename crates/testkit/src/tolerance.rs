//! How close each backend must come to the reference — the one table.

use crate::backends::TestBackend;
use crate::fixtures::Format;

/// Bounds on one comparison of logits with a reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Cosine of the last position's logits, at least.
    pub min_cos_last: f64,
    /// Cosine at the worst prompt position, at least.
    pub min_cos_worst: f64,
    /// `max|Δ| / max|reference|` of the last logits, at most.
    pub max_rel_last: f64,
    /// The top-1 token of the last position must equal the reference's.
    pub top1: bool,
    /// The greedy continuation must equal the reference's, token for token.
    pub greedy: bool,
    /// A greedy step whose reference top-2 margin is below this is a
    /// near-tie the backend's precision cannot resolve: there it may pick
    /// the reference's second token, after which the two continuations are
    /// no longer comparable and the check ends (0: every step must match).
    pub tie_margin: f64,
}

/// The bound of `backend` against transformers on a fixture in `format`.
///
/// - CPU on float weights: f32 everywhere but the f16 KV cache.
/// - CPU on Q8_0: activations are quantized to Q8 as in ggml, so the bound is
///   llama.cpp's own distance from transformers on these files (last-position
///   cosine 0.9979 llama, 0.9984 gemma3, 0.9989 gemma2) with a little slack;
///   the llama.cpp comparison in the suite holds the tighter bound.
/// - The ANE lowering: fp16 weights and activations (see ane-spec.md §3).
/// - `routed` (mixtures of experts) on Q8_0: a router near-tie flips the
///   chosen experts under Q8 activations, which moves that position's logits
///   far (qwen3_moe: router gap 0.0069 at layer 0, position 0, where our
///   cosine is 0.965 and llama.cpp's own Q8 run changes the argmax, 129 vs
///   transformers' 377), so the worst-position bound is loosened; the last
///   position and the llama.cpp comparison keep theirs.
pub fn against_transformers(backend: TestBackend, format: Format, routed: bool) -> Tolerance {
    let t = unrouted(backend, format);
    if routed && format == Format::GgufQ8 {
        return Tolerance {
            min_cos_worst: 0.95,
            ..t
        };
    }
    t
}

fn unrouted(backend: TestBackend, format: Format) -> Tolerance {
    match (backend.is_ane(), format) {
        (false, Format::Hf | Format::GgufF32) => Tolerance {
            min_cos_last: 0.99999,
            min_cos_worst: 0.99999,
            max_rel_last: 0.002,
            top1: true,
            greedy: true,
            tie_margin: 0.0,
        },
        (false, Format::GgufQ8) => Tolerance {
            min_cos_last: 0.997,
            min_cos_worst: 0.99,
            max_rel_last: 0.1,
            top1: false,
            greedy: false,
            tie_margin: 0.0,
        },
        (true, Format::Hf | Format::GgufF32) => Tolerance {
            min_cos_last: 0.9999,
            min_cos_worst: 0.9999,
            max_rel_last: 0.02,
            top1: true,
            greedy: true,
            tie_margin: FP16_TIE_MARGIN,
        },
        (true, Format::GgufQ8) => Tolerance {
            min_cos_last: 0.997,
            min_cos_worst: 0.99,
            max_rel_last: 0.1,
            top1: false,
            greedy: false,
            tie_margin: 0.0,
        },
    }
}

/// Logits of these fixtures are ~4-8 in magnitude, where one fp16 step is
/// 2^-8 = 0.0039; a few steps of accumulated rounding make a reference
/// margin below ~0.02 unresolvable for an fp16 backend.
pub const FP16_TIE_MARGIN: f64 = 0.02;

/// The bound of `backend` against the f64 oracle on a synthetic F32
/// program (op-level cases).
pub fn against_oracle(backend: TestBackend) -> Tolerance {
    Tolerance {
        min_cos_last: if backend.is_ane() { 0.9999 } else { 0.999999 },
        min_cos_worst: if backend.is_ane() { 0.9999 } else { 0.999999 },
        max_rel_last: if backend.is_ane() { 0.02 } else { 0.002 },
        top1: true,
        greedy: false,
        tie_margin: 0.0,
    }
}

/// Our GGUF logits against llama.cpp's on the same file (CPU backend).
pub fn against_llamacpp(format: Format) -> f64 {
    match format {
        Format::GgufQ8 => 0.999,
        Format::Hf | Format::GgufF32 => 0.99999,
    }
}
