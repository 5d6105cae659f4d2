//! MIL (Core ML Model Intermediate Language) for the Apple Neural Engine:
//! program IR, a typed builder, a parser for both text dialects, a canonical
//! printer, MIL blob storage v2 (weights), the ANE rule table and an fp16
//! CPU simulator.
//!
//! This crate knows the MIL text that direct-ANE projects (maderix/ANE,
//! Orion, Espresso) feed to `_ANEInMemoryModel`, the weight file format, and
//! the rules those projects report the compiler/runtime enforce
//! (`shared/docs/ane-spec.md`). It does not know about models, GGUF,
//! tokenizers, IOSurfaces or the private framework: it never talks to
//! hardware, and the simulator is a numerical model, not a bit-exact ANE.
//!
//! ```
//! use anedvd_mil::{builder::FunctionBuilder, blob::{BlobLayout, BlobWriter}, ir::DType};
//! use anedvd_mil::{rules::{RuleConfig, SurfaceStyle}, sim::{Simulator, Tensor, Weights}};
//!
//! // y = W·x as a 1x1 conv, W in a weight blob.
//! let mut blob = BlobWriter::new(BlobLayout::Aligned);
//! let off = blob.add_f32_as_f16(&[1.0, 2.0, 3.0, 4.0]); // W[2][2]
//! let mut b = FunctionBuilder::new("main");
//! let x = b.input("x", DType::Fp16, &[1, 2, 1, 32])?;
//! let w = b.const_blob("w", DType::Fp16, &[2, 2, 1, 1], "@model_path/weights/w.bin", off)?;
//! let y = b.conv("y", &x, &w)?;
//! b.output(&y);
//! let program = anedvd_mil::builder::program(vec![b.finish()]);
//! let text = anedvd_mil::print(&program);
//! assert_eq!(anedvd_mil::parse(&text)?, program);
//!
//! let mut weights = Weights::new();
//! weights.insert("@model_path/weights/w.bin", blob.finish());
//! let sim = Simulator::new(&program, &weights, &RuleConfig::default())?;
//! let input = Tensor::f16(&[1, 2, 1, 32], &[1.0; 64])?;
//! let out = sim.run("main", &[("x", input)])?;
//! assert_eq!(out[0].1.to_f32()[0], 3.0); // 1·1 + 2·1
//! # Ok::<(), anedvd_mil::Error>(())
//! ```
//!
//! # Pieces
//!
//! * [`ir`]: [`ir::Program`] → [`ir::Function`] → [`ir::Statement`] (typed
//!   result, op name, keyword [`ir::Arg`]s, `name` label, attributes) and
//!   literal [`ir::Value`]s including `BLOBFILE` references.
//! * [`parse()`]: both dialects (`program(1.3)`/`ios18` with `string("x")`,
//!   `program(1.0)`/`ios16` with `tensor<string, []>("x")`), any whitespace,
//!   decimal / hex floats. [`print()`]: one canonical form (spaced, arguments
//!   and attributes alphabetical, shortest round-trip floats without
//!   exponents); `print ∘ parse` is a fixed point. The builder emits a named
//!   const for every non-tensor argument;
//!   [`ir::Program::hoist_inline_args`] rewrites parsed inline literals that way.
//! * [`builder`]: typed, shape-inferring construction (`conv`, `matmul`,
//!   `add`, `softmax`, `reduce_sum`, ...), sharing parameter consts.
//! * [`blob`]: MIL blob storage v2, coremltools-aligned or the
//!   maderix/Espresso-compatible layout (reproduces Espresso's
//!   `ffn_blob_ref.bin`/`qkv_blob_ref.bin` byte for byte); a checked reader.
//! * [`quantize`]: per-row int8 and k-means palettes for compressed weights.
//! * [`registry`]: the ANE capability registry (per op and argument
//!   spelling, per runtime path), derived from the evidence files.
//! * [`precision`]: the published precision rules as data, the
//!   simulator's [`precision::PrecisionModel`] and a lint.
//! * [`rules`] and [`sim`]: below.
//!
//! # Numerics model of the simulator
//!
//! * Every tensor is stored in its MIL dtype between ops: fp16 values are
//!   `half::f16`, so each op's result is rounded once to fp16
//!   (round-to-nearest-even) — fp16 storage at every op boundary.
//! * Inside an op, inputs are widened exactly to f32 and all arithmetic is
//!   f32: conv and matmul accumulate their dot products in f32 (in
//!   index order); `reduce_max` and softmax's sum accumulate in f32; the one
//!   rounding happens when the result is stored.
//! * The measured precision rules ([`precision::PRECISION_RULES`]) are
//!   modelled by default ([`precision::PrecisionModel::ane`]; `ideal` turns
//!   them off): `reduce_sum`/`reduce_mean` over fp16 round the running sum
//!   to fp16 after every addition (the ANE accumulates them narrow, while
//!   matmul accumulates wide), matmul outputs at or beyond 32752 in
//!   magnitude become ±inf, and an op that makes a NaN from NaN-free
//!   operands is an error (the ANE does not propagate NaN, so its value
//!   there is unknown). Products are not rounded to fp16 before
//!   accumulation (the ANE's are); that difference is below the output
//!   rounding. Compare with hardware by tolerance, never bit-exactly.
//! * `softmax` subtracts the axis maximum before `exp`; `pow(x, -0.5)` is
//!   `1/sqrt(x)`; `sigmoid` is `1/(1+exp(-x))`; element-wise binaries
//!   broadcast numpy-style; `cast` to fp16 rounds, to int32 truncates.
//! * fp32 tensors (the fp32 I/O boundary around `cast`) stay f32.
//!
//! # Rule table
//!
//! Before simulating, [`sim::Simulator::new`] runs [`rules::check`] (with the
//! weight files, so BLOBFILE references are verified); a violation is
//! [`Error::Rule`] naming the rule id. [`rules::RuleConfig`] selects the
//! surface style (flat by default; strided lifts `ANE-SURFACE-ALIGN`), the
//! limits, extra allowed ops and waived rules. Sources are sections of
//! `shared/docs/ane-spec.md` (which cites the upstream projects).
//!
//! | id | rule | source |
//! |---|---|---|
//! | `ANE-OP` | every op is an iOS18 MIL op whose [`registry`] status on `RuleConfig::path` is correct or reachable, or is in `RuleConfig::extra_ops` | [`registry`] |
//! | `ANE-OP-CONTESTED` | the path's sources disagree about the op: listed by [`rules::check`], refused by [`rules::enforce`] only under `ContestedPolicy::Refuse` | [`registry`] |
//! | `ANE-CONV-BIAS` | no `bias=` on conv | §2.7, §3 |
//! | `ANE-INLINE-ARG` | no inline literal arguments: non-tensor args are named consts | §2.5 |
//! | `ANE-DANGLING-OUTPUT` | returned names are live values | §2.3 |
//! | `ANE-RANK` | rank ≤ 5 | §2.4 |
//! | `ANE-DIM` | every dim ≤ 65536 | §2.4 |
//! | `ANE-SOFTMAX-POW2` | softmax axis length is a power of two | §3, §7.4 |
//! | `ANE-IO-UNIFORM` | inputs all the same byte size; outputs too | §6.4 |
//! | `ANE-SURFACE-ALIGN` | flat surfaces: innermost dim × elem size % 64 == 0 | §6.2 |
//! | `ANE-BLOB-OFFSET` | BLOBFILE path under `@model_path/`, offset at a `0xDEADBEEF` block of matching dtype/size | §2.6, §4.3, §7.4 |
//! | `ANE-COMPILE-BUDGET` | ≤ ~119 compiles per process ([`rules::CompileBudget`]) | §7.1 |

pub mod blob;
pub mod builder;
mod error;
pub mod ir;
mod lex;
pub mod parse;
pub mod precision;
pub mod print;
pub mod quantize;
pub mod registry;
pub mod rules;
pub mod sim;

pub use error::{Error, Result};
pub use parse::parse;
pub use print::print;
