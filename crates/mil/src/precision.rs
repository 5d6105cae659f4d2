//! ANE precision rules as data: each with its source, how the simulator
//! models it ([`PrecisionModel`]) and how the lowering respects it; plus
//! [`lint`], which names the statements of a program that break one.
//!
//! The rules are published measurements (`shared/docs/ane-evidence.md` §e,
//! §b); `crates/mil/tests/precision.rs` checks each quote against the doc
//! and each modelled rule against the simulator.

use crate::ir::{DType, Program};

/// One published precision rule.
#[derive(Debug, Clone, Copy)]
pub struct PrecisionRule {
    /// Stable id, e.g. `PREC-NARROW-REDUCE-SUM`.
    pub code: &'static str,
    /// What the hardware does and what to do about it.
    pub statement: &'static str,
    /// Source tags (ane-evidence.md §0) or the issue that asked for it.
    pub source: &'static str,
    /// A verbatim quote of `shared/docs/ane-evidence.md` backing it.
    pub quote: &'static str,
    /// How [`crate::sim::Simulator`] models it (or why it does not).
    pub simulator: &'static str,
    /// How the ANE lowering (`anedvd_ane::lower`) respects it.
    pub lowering: &'static str,
}

/// The precision rules.
pub const PRECISION_RULES: [PrecisionRule; 6] = [
    PrecisionRule {
        code: "PREC-NARROW-REDUCE-SUM",
        statement: "matmul (and, by the same MAC array, conv) accumulate wide; reduce_sum accumulates in fp16: write sums as a product with ones",
        source: "F-NU",
        quote: "fp32-class accumulator (16384 ones sum bit-exactly) while `reduce_sum` accumulates narrow fp16 — write dots and sums as `x @ ones`",
        simulator: "reduce_sum and reduce_mean over fp16 accumulate in fp16, rounding the running sum after every addition (index order); conv and matmul accumulate in f32 (that conv is wide like matmul is an inference: no source measured conv alone)",
        lowering: "RMS norm sums its squares with a 1x1 conv against a constant weight, never reduce_sum",
    },
    PrecisionRule {
        code: "PREC-WIDE-SUM-SPLIT",
        statement: "long sums lose accuracy with their length and approach the output cliff: sums over more than 4096 terms are split into parts of at most 4096, and for more than 1024 terms every term is scaled by 2^-4 (undone after)",
        source: "issue 16 (no primary source in shared/docs); F-B for the growth of error with K",
        quote: "GEMV relerr grows with contraction length K: 512 → 0.0024, 4096 → 0.027, 8192 → 0.063",
        simulator: "not a hardware behaviour to model: the simulator's wide accumulation is exact enough that splitting changes only rounding",
        lowering: "RMS norm over C > 4096 channels sums slices of at most 4096 channels and adds the parts; for C > 1024 its ones weight is 2^-4 (exact in fp16) and 1/C becomes 16/C",
    },
    PrecisionRule {
        code: "PREC-MATMUL-SATURATION",
        statement: "a matmul output turns to ±inf near 32752 (fp16_max/2) whatever K is: bound every dot below it",
        source: "F-NC F-RF",
        quote: "matmul output turns to ±inf at ≈32752 (fp16_max/2) independent of K",
        simulator: "matmul outputs with |v| ≥ 32752 become ±inf (PrecisionModel::matmul_saturation); conv has no measurement and is not clipped",
        lowering: "projections take RMS-normed activations; with the norm's pre-scale (every square ≤ 4) and the 2^-4 weight above 1024 channels its sums stay ≤ max(4096, C/4), below 32752 for C < 131008",
    },
    PrecisionRule {
        code: "PREC-NO-NAN",
        statement: "the ANE does not propagate NaN (log(+inf)→0, mul(+inf,x)→−52416, ...): a NaN in a simulation marks a value the hardware computes differently",
        source: "F-FAQ",
        quote: "NaN is not propagated: log(+inf)→0, softplus(+inf)→0, mul(+inf,x)→−52416, cos(+inf)→0",
        simulator: "an op that turns NaN-free inputs into a NaN is an error naming the statement (PrecisionModel::refuse_new_nan)",
        lowering: "RMS norm adds a tiny constant before pow(m, -1), so an all-zero column gives 0, not 0·inf",
    },
    PrecisionRule {
        code: "PREC-SILU-NATIVE",
        statement: "native silu is ~1% off (sigmoid 3.8e-3): build SiLU from sigmoid",
        source: "F-SW D-RES",
        quote: "SiLU: native `silu` relerr ~1e-2, `sigmoid` 3.8e-3 [F-SW]",
        simulator: "no silu op is simulated (a program with one is refused)",
        lowering: "SiLU is g·sigmoid(g) (the in-memory path has no evidence for real_div, so not g/(1+exp(−g)))",
    },
    PrecisionRule {
        code: "PREC-INTEGER-SUM-2048",
        statement: "integer totals are exact only up to 2048 (fp16's integer range)",
        source: "F-NC",
        quote: "integer sums exact only ≤ 2048 (2049 reads as 2050)",
        simulator: "fp16 storage reproduces the limit; the simulator rounds ties to even (2049 → 2048) where F-NC read 2050",
        lowering: "no integer sums are lowered",
    },
];

/// Which precision rules the simulator applies (all by default: the ANE as
/// measured; [`PrecisionModel::ideal`] turns them off to compare).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrecisionModel {
    /// `PREC-NARROW-REDUCE-SUM`: fp16 running sums in reduce_sum/reduce_mean.
    pub narrow_reduce_sum: bool,
    /// `PREC-MATMUL-SATURATION`: matmul outputs at or beyond this magnitude become ±inf.
    pub matmul_saturation: Option<f32>,
    /// `PREC-NO-NAN`: refuse an op that makes a NaN from NaN-free inputs.
    pub refuse_new_nan: bool,
}

impl PrecisionModel {
    /// The measured saturation point of matmul outputs (F-NC).
    pub const MATMUL_SATURATION: f32 = 32752.0;

    /// The hardware as the evidence describes it.
    pub fn ane() -> Self {
        PrecisionModel {
            narrow_reduce_sum: true,
            matmul_saturation: Some(Self::MATMUL_SATURATION),
            refuse_new_nan: true,
        }
    }

    /// fp16 storage only: wide sums everywhere, no cliffs, NaN passes.
    pub fn ideal() -> Self {
        PrecisionModel {
            narrow_reduce_sum: false,
            matmul_saturation: None,
            refuse_new_nan: false,
        }
    }
}

impl Default for PrecisionModel {
    fn default() -> Self {
        Self::ane()
    }
}

/// A statement that breaks a precision rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrecisionFinding {
    /// The rule's code.
    pub code: &'static str,
    /// `function/statement`.
    pub location: String,
    /// What is wrong.
    pub detail: String,
}

/// The statements of `program` that break a precision rule checkable from
/// the program text: fp16 `reduce_sum`/`reduce_mean` (use a product with
/// ones) and native `silu`.
pub fn lint(program: &Program) -> Vec<PrecisionFinding> {
    let mut out = Vec::new();
    for f in &program.functions {
        for s in &f.body {
            let location = format!("{}/{}", f.name, s.name);
            let fp16 = s.ty.as_tensor().is_some_and(|t| t.dtype == DType::Fp16);
            match s.op.as_str() {
                "reduce_sum" | "reduce_mean" if fp16 => out.push(PrecisionFinding {
                    code: "PREC-NARROW-REDUCE-SUM",
                    location,
                    detail: format!(
                        "`{}` accumulates in fp16; sum with a product against ones",
                        s.op
                    ),
                }),
                "silu" => out.push(PrecisionFinding {
                    code: "PREC-SILU-NATIVE",
                    location,
                    detail: "native silu (relerr ~1e-2); use x·sigmoid(x)".into(),
                }),
                _ => {}
            }
        }
    }
    out
}
