//! The ANE rule table: what the in-memory compiler/runtime is reported to reject, checked before simulation.
//!
//! Every rule has an id, a description and a source (a section of
//! `shared/docs/ane-spec.md`, which cites the upstream projects). The rules
//! are lint-level emulations of hardware behaviour (ane-spec.md §8); a
//! violation is an [`Error::Rule`] naming the rule.

use std::fmt;

use crate::blob::{BlobDType, BlobFile};
use crate::error::{Error, Result};
use crate::ir::{Arg, Function, Program, Value, ValueType};
use crate::sim::Weights;

/// Identifies a rule of [`RULES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleId {
    /// `ANE-OP`: op outside the proven set.
    UnprovenOp,
    /// `ANE-CONV-BIAS`: `conv` with a `bias` argument.
    ConvBias,
    /// `ANE-INLINE-ARG`: an argument written inline instead of a named const.
    InlineArg,
    /// `ANE-DANGLING-OUTPUT`: a returned name that is not a live value.
    DanglingOutput,
    /// `ANE-RANK`: tensor rank above the limit.
    Rank,
    /// `ANE-DIM`: a dimension above the limit.
    Dim,
    /// `ANE-SOFTMAX-POW2`: softmax over a non-power-of-two axis.
    SoftmaxPow2,
    /// `ANE-IO-UNIFORM`: inputs (or outputs) of different byte sizes.
    IoUniform,
    /// `ANE-SURFACE-ALIGN`: flat surface row not a multiple of 64 bytes.
    SurfaceAlign,
    /// `ANE-BLOB-OFFSET`: BLOBFILE reference not at a matching metadata block.
    BlobOffset,
    /// `ANE-COMPILE-BUDGET`: more compiles than the per-process budget.
    CompileBudget,
}

/// One row of the rule table.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Typed id.
    pub id: RuleId,
    /// Stable textual id, e.g. `ANE-OP`.
    pub code: &'static str,
    /// What the rule requires.
    pub description: &'static str,
    /// Where the requirement comes from.
    pub source: &'static str,
}

/// The rule table.
pub const RULES: [Rule; 11] = [
    Rule { id: RuleId::UnprovenOp, code: "ANE-OP", description: "every op is in the proven set (PROVEN_OPS) or explicitly allowed", source: "ane-spec.md §3 (ops that compile on the in-memory path), §2.7" },
    Rule { id: RuleId::ConvBias, code: "ANE-CONV-BIAS", description: "conv has no `bias` argument; add the bias with a separate `add`", source: "ane-spec.md §2.7 and §3 (Orion README)" },
    Rule { id: RuleId::InlineArg, code: "ANE-INLINE-ARG", description: "every argument refers to a named value; non-tensor arguments are named consts, never inline literals", source: "ane-spec.md §2.5 (Orion README: inline transpose_x/transpose_y rejected)" },
    Rule { id: RuleId::DanglingOutput, code: "ANE-DANGLING-OUTPUT", description: "every returned name is a function input or a statement result (else InvalidMILProgram)", source: "ane-spec.md §2.3 (Orion README)" },
    Rule { id: RuleId::Rank, code: "ANE-RANK", description: "every tensor has rank <= max_rank (5)", source: "ane-spec.md §2.4 (ANEForge op-quirks)" },
    Rule { id: RuleId::Dim, code: "ANE-DIM", description: "every dimension is <= max_dim (65536)", source: "ane-spec.md §2.4 (ANEForge op-quirks, capabilities)" },
    Rule { id: RuleId::SoftmaxPow2, code: "ANE-SOFTMAX-POW2", description: "softmax runs over an axis whose length is a power of two", source: "ane-spec.md §3, §7.4 (Espresso blog: 257 fails, 256 ok)" },
    Rule { id: RuleId::IoUniform, code: "ANE-IO-UNIFORM", description: "all input tensors have the same byte size, and all output tensors too (else eval status 0x1d); pad to the largest", source: "ane-spec.md §6.4 (Orion constraints #2/#12)" },
    Rule { id: RuleId::SurfaceAlign, code: "ANE-SURFACE-ALIGN", description: "with flat IOSurfaces, innermost dim x element size of every input/output is a multiple of 64 bytes (S multiple of 32 for fp16)", source: "ane-spec.md §6.2 (TinyGrad strides, tmc validateLayout, Orion #4, Espresso 0x9)" },
    Rule { id: RuleId::BlobOffset, code: "ANE-BLOB-OFFSET", description: "BLOBFILE path starts with @model_path/ and its offset is a metadata block (sentinel 0xDEADBEEF) whose dtype and size match the declared tensor", source: "ane-spec.md §2.6, §4.3, §7.4 (Orion #8: offset at payload = silent wrong output)" },
    Rule { id: RuleId::CompileBudget, code: "ANE-COMPILE-BUDGET", description: "at most ~119 compiles per process (CompileBudget); exec() a fresh process beyond", source: "ane-spec.md §7.1 (maderix README, Orion #5)" },
];

impl RuleId {
    /// The table row of this rule.
    pub fn rule(self) -> &'static Rule {
        let i = RULES.iter().position(|r| r.id == self).unwrap_or(0);
        &RULES[i]
    }

    /// The textual id (`ANE-OP`, ...).
    pub fn code(self) -> &'static str {
        self.rule().code
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// Ops with a source showing them compile and run on the in-memory path,
/// with that source (ane-spec.md §3 and §2.7).
pub const PROVEN_OPS: [(&str, &str); 21] = [
    ("const", "all MDX/ORI/ESP programs"),
    ("conv", "§3: MDX, ORI, ESP, AFG"),
    ("matmul", "§3: MDX attention, ORI, ESP fixtures"),
    ("add", "§3: MDX/ORI/ESP fixtures"),
    ("sub", "§3: MDX/ORI/ESP fixtures"),
    ("mul", "§3: MDX/ORI/ESP fixtures"),
    ("pow", "§3: MDX/ORI/ESP RMSNorm"),
    ("sigmoid", "§3: MDX/ORI/ESP fixtures"),
    ("tanh", "§2.7: ORI compiler/codegen.m"),
    ("exp", "§2.7: ORI compiler/codegen.m"),
    ("relu", "§2.7: ORI compiler/codegen.m"),
    ("sqrt", "§2.7: ORI compiler/codegen.m"),
    ("softmax", "§3: ESP fixtures (power-of-two axis)"),
    ("reduce_sum", "§3: MDX/ORI/ESP fixtures"),
    ("reduce_max", "§3: ESP fixtures"),
    ("reshape", "§3: MDX/ORI/ESP fixtures"),
    ("transpose", "§3: MDX/ORI/ESP fixtures"),
    ("cast", "§3: MDX/ESP fp32 I/O"),
    ("slice_by_size", "§3: MDX/ESP fixtures"),
    (
        "concat",
        "§3: MDX training kernels, ESP (contested: ORI rejects)",
    ),
    ("identity", "§2.7: ORI"),
];

/// How input/output IOSurfaces are laid out by the runtime (ane-spec.md §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurfaceStyle {
    /// Tightly packed `[C, S]` data (MDX/ORI/ESP): needs 64-byte rows.
    Flat,
    /// Rows written at the compiled model's row stride (tmc): any width.
    Strided,
}

/// Knobs of the check.
#[derive(Debug, Clone)]
pub struct RuleConfig {
    /// Surface layout used by the runtime (default [`SurfaceStyle::Flat`]).
    pub surface: SurfaceStyle,
    /// Largest rank (default 5).
    pub max_rank: usize,
    /// Largest dimension (default 65536).
    pub max_dim: usize,
    /// Ops allowed in addition to [`PROVEN_OPS`] (e.g. `reduce_mean`, `real_div` after a probe).
    pub extra_ops: Vec<String>,
    /// Rules not checked (e.g. [`RuleId::IoUniform`] when the runtime pads surfaces).
    pub waived: Vec<RuleId>,
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            surface: SurfaceStyle::Flat,
            max_rank: 5,
            max_dim: 65536,
            extra_ops: Vec::new(),
            waived: Vec::new(),
        }
    }
}

/// One violation found by [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: RuleId,
    /// `function/statement` or `function:inputs`/`function:outputs`.
    pub location: String,
    /// Detail.
    pub detail: String,
}

impl From<Violation> for Error {
    fn from(v: Violation) -> Self {
        Error::Rule {
            rule: v.rule,
            location: v.location,
            detail: v.detail,
        }
    }
}

/// Checks every function of `program`; returns all violations (empty = passes).
/// BLOBFILE contents are checked only when `weights` is given.
pub fn check(program: &Program, weights: Option<&Weights>, cfg: &RuleConfig) -> Vec<Violation> {
    let mut out = Vec::new();
    for f in &program.functions {
        check_function(f, weights, cfg, &mut out);
    }
    out.retain(|v| !cfg.waived.contains(&v.rule));
    out
}

/// [`check`], returning the first violation as an error.
pub fn enforce(program: &Program, weights: Option<&Weights>, cfg: &RuleConfig) -> Result<()> {
    match check(program, weights, cfg).into_iter().next() {
        Some(v) => Err(v.into()),
        None => Ok(()),
    }
}

fn check_function(
    f: &Function,
    weights: Option<&Weights>,
    cfg: &RuleConfig,
    out: &mut Vec<Violation>,
) {
    let mut push = |rule, location: String, detail: String| {
        out.push(Violation {
            rule,
            location,
            detail,
        })
    };
    let fname = &f.name;
    let mut types: Vec<(String, ValueType)> = f
        .inputs
        .iter()
        .map(|(n, t)| (format!("{fname}:{n}"), ValueType::Tensor(t.clone())))
        .collect();
    for s in &f.body {
        let loc = format!("{fname}/{}", s.name);
        types.push((loc.clone(), s.ty.clone()));
        if let Some(Value::Blob(b)) = s.const_val() {
            types.push((loc.clone(), ValueType::Tensor(b.ty.clone())));
            if let Err(detail) = check_blob(b, weights) {
                push(RuleId::BlobOffset, loc.clone(), detail);
            }
        }
        if !PROVEN_OPS.iter().any(|(n, _)| *n == s.op) && !cfg.extra_ops.contains(&s.op) {
            push(
                RuleId::UnprovenOp,
                loc.clone(),
                format!("op `{}` is not in the proven set", s.op),
            );
        }
        if s.op == "conv" && s.args.contains_key("bias") {
            push(
                RuleId::ConvBias,
                loc.clone(),
                "conv has a `bias` argument".into(),
            );
        }
        for (k, a) in &s.args {
            if let Arg::Inline(v) = a {
                let what = crate::print::value_str(v, crate::ir::ScalarStyle::Short);
                push(
                    RuleId::InlineArg,
                    loc.clone(),
                    format!("argument `{k}` is the inline literal {what}"),
                );
            }
        }
        if s.op == "softmax" {
            let len = softmax_len(f, s);
            if let Some(n) = len.filter(|n| !n.is_power_of_two()) {
                push(
                    RuleId::SoftmaxPow2,
                    loc.clone(),
                    format!("softmax axis has length {n}"),
                );
            }
        }
    }
    for (loc, t) in &types {
        if let ValueType::Tensor(t) = t {
            if t.shape.len() > cfg.max_rank {
                push(
                    RuleId::Rank,
                    loc.clone(),
                    format!("rank {} > {}", t.shape.len(), cfg.max_rank),
                );
            }
            if let Some(d) = t.shape.iter().find(|&&d| d > cfg.max_dim) {
                push(
                    RuleId::Dim,
                    loc.clone(),
                    format!("dimension {d} > {} in {:?}", cfg.max_dim, t.shape),
                );
            }
        }
    }
    for o in &f.outputs {
        if f.value_type(o).is_none() {
            push(
                RuleId::DanglingOutput,
                format!("{fname}:outputs"),
                format!("`{o}` is not a live value"),
            );
        }
    }
    let outs: Vec<(String, crate::ir::TensorType)> = f
        .outputs
        .iter()
        .filter_map(|o| {
            f.value_type(o)
                .and_then(|t| t.as_tensor().cloned())
                .map(|t| (o.clone(), t))
        })
        .collect();
    for (kind, list) in [("inputs", &f.inputs), ("outputs", &outs)] {
        let sizes: Vec<usize> = list.iter().map(|(_, t)| t.size_bytes()).collect();
        if sizes.windows(2).any(|w| w[0] != w[1]) {
            push(
                RuleId::IoUniform,
                format!("{fname}:{kind}"),
                format!("{kind} byte sizes differ: {sizes:?}"),
            );
        }
        if cfg.surface == SurfaceStyle::Flat {
            for (n, t) in list.iter() {
                let row = t.shape.last().copied().unwrap_or(1) * t.dtype.size_bytes();
                if row % 64 != 0 {
                    push(
                        RuleId::SurfaceAlign,
                        format!("{fname}:{n}"),
                        format!(
                            "innermost row is {row} bytes ({} {:?}), not a multiple of 64",
                            t.dtype, t.shape
                        ),
                    );
                }
            }
        }
    }
}

fn softmax_len(f: &Function, s: &crate::ir::Statement) -> Option<usize> {
    let x = match s.args.get("x") {
        Some(Arg::Var(n)) => f.value_type(n)?,
        _ => return None,
    };
    let shape = &x.as_tensor()?.shape;
    let axis = match s.args.get("axis") {
        Some(Arg::Var(n)) => f.statement(n)?.const_val()?.as_ints()?,
        Some(Arg::Inline(v)) => v.as_ints()?,
        _ => return None,
    };
    let a = i64::try_from(*axis.first()?).ok()?;
    let r = shape.len() as i64;
    let a = if a < 0 { a + r } else { a };
    shape.get(usize::try_from(a).ok()?).copied()
}

fn check_blob(
    b: &crate::ir::BlobRef,
    weights: Option<&Weights>,
) -> std::result::Result<(), String> {
    if !b.path.starts_with("@model_path/") {
        return Err(format!(
            "path `{}` does not start with @model_path/",
            b.path
        ));
    }
    if b.offset < 64 {
        return Err(format!("offset {} is inside the file header", b.offset));
    }
    let Some(w) = weights else { return Ok(()) };
    let bytes = w
        .get(&b.path)
        .ok_or_else(|| format!("weight file `{}` not supplied", b.path))?;
    let view = BlobFile::parse(bytes)
        .and_then(|f| f.blob_at(b.offset))
        .map_err(|e| format!("`{}` offset {}: {e}", b.path, b.offset))?;
    if BlobDType::from_mil(b.ty.dtype) != Some(view.dtype) {
        return Err(format!(
            "blob dtype {:?} but tensor is {}",
            view.dtype, b.ty.dtype
        ));
    }
    if view.data.len() != b.ty.size_bytes() {
        return Err(format!(
            "blob holds {} bytes, tensor needs {}",
            view.data.len(),
            b.ty.size_bytes()
        ));
    }
    Ok(())
}

/// Counts compiles against the per-process budget (rule `ANE-COMPILE-BUDGET`).
///
/// maderix reports failures after about 119 compiles in one process; it and
/// Espresso budget 100 ([`CompileBudget::SAFE_LIMIT`]).
#[derive(Debug, Clone)]
pub struct CompileBudget {
    used: u32,
    limit: u32,
}

impl CompileBudget {
    /// The observed limit (~119 compiles per process).
    pub const OBSERVED_LIMIT: u32 = 119;
    /// The budget maderix and Espresso use.
    pub const SAFE_LIMIT: u32 = 100;

    /// A budget of `limit` compiles.
    pub fn new(limit: u32) -> Self {
        CompileBudget { used: 0, limit }
    }

    /// Records one compile, or fails with [`RuleId::CompileBudget`] when the budget is spent.
    pub fn charge(&mut self) -> Result<()> {
        if self.used >= self.limit {
            return Err(Error::Rule {
                rule: RuleId::CompileBudget,
                location: "process".into(),
                detail: format!(
                    "compile {} exceeds the budget of {}",
                    self.used + 1,
                    self.limit
                ),
            });
        }
        self.used += 1;
        Ok(())
    }

    /// Compiles recorded so far.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Compiles left.
    pub fn remaining(&self) -> u32 {
        self.limit - self.used
    }
}

impl Default for CompileBudget {
    fn default() -> Self {
        Self::new(Self::OBSERVED_LIMIT)
    }
}
