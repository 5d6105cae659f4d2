//! The ANE rule table: what the compiler/runtime of a path is reported to
//! reject, checked before simulation.
//!
//! Every rule has an id, a description and a source (a section of
//! `shared/docs/ane-spec.md` / `ane-evidence.md`, which cite the upstream
//! projects). Which ops a path accepts, and which argument spellings, comes
//! from the capability registry ([`crate::registry`]), so a program is
//! checked against the path it will run on; the IOSurface rules apply to the
//! in-memory path only. A violation is an [`Error::Rule`] naming the rule.
//! An op whose sources disagree on that path is reported as
//! [`RuleId::ContestedOp`], never silently taken to work.

use std::fmt;

use crate::blob::{BlobDType, BlobFile};
use crate::error::{Error, Result};
use crate::ir::{Arg, Function, Program, Value, ValueType};
use crate::registry::{self, RuntimePath, Status};
use crate::sim::Weights;

/// Identifies a rule of [`RULES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleId {
    /// `ANE-OP`: op rejected on the path, untested there, or not a MIL op.
    UnprovenOp,
    /// `ANE-OP-CONTESTED`: the path's sources disagree about the op.
    ContestedOp,
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
pub const RULES: [Rule; 12] = [
    Rule { id: RuleId::UnprovenOp, code: "ANE-OP", description: "every op is a MIL op whose registry status on the path is correct or reachable (`anedvd ops`); RuleConfig::extra_ops adds ops by hand", source: "crate::registry (ane-evidence.md §a, ane-spec.md §3, the sweep and census files)" },
    Rule { id: RuleId::ContestedOp, code: "ANE-OP-CONTESTED", description: "the path's sources disagree about the op (reported; refused only with ContestedPolicy::Refuse)", source: "crate::registry" },
    Rule { id: RuleId::ConvBias, code: "ANE-CONV-BIAS", description: "conv has no `bias` argument unless the registry shows conv[bias] working on the path; add the bias with a separate `add`", source: "registry conv[bias]: ane-spec.md §2.7 and §3 (Orion README)" },
    Rule { id: RuleId::InlineArg, code: "ANE-INLINE-ARG", description: "non-tensor arguments are named consts, never inline literals, unless the registry shows op[inline-literal-args] working on the path", source: "registry matmul[inline-literal-args]: ane-spec.md §2.5 (Orion README) vs ane-evidence.md §a (ANEForge, e5rt)" },
    Rule { id: RuleId::DanglingOutput, code: "ANE-DANGLING-OUTPUT", description: "every returned name is a function input or a statement result (else InvalidMILProgram)", source: "ane-spec.md §2.3 (Orion README)" },
    Rule { id: RuleId::Rank, code: "ANE-RANK", description: "every tensor has rank <= max_rank (5)", source: "ane-spec.md §2.4 (ANEForge op-quirks)" },
    Rule { id: RuleId::Dim, code: "ANE-DIM", description: "every dimension is <= max_dim (65536)", source: "ane-spec.md §2.4 (ANEForge op-quirks, capabilities)" },
    Rule { id: RuleId::SoftmaxPow2, code: "ANE-SOFTMAX-POW2", description: "softmax runs over an axis whose length is a power of two, unless the registry shows softmax[non-power-of-two-axis] working on the path", source: "registry softmax[non-power-of-two-axis]: ane-spec.md §3, §7.4 (Espresso blog: 257 fails, 256 ok)" },
    Rule { id: RuleId::IoUniform, code: "ANE-IO-UNIFORM", description: "in-memory path: all input tensors have the same byte size, and all output tensors too (else eval status 0x1d); pad to the largest", source: "ane-spec.md §6.4 (Orion constraints #2/#12)" },
    Rule { id: RuleId::SurfaceAlign, code: "ANE-SURFACE-ALIGN", description: "in-memory path with flat IOSurfaces: innermost dim x element size of every input/output is a multiple of 64 bytes (S multiple of 32 for fp16)", source: "ane-spec.md §6.2 (TinyGrad strides, tmc validateLayout, Orion #4, Espresso 0x9)" },
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

/// What [`enforce`] does with an op whose sources disagree on the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContestedPolicy {
    /// [`check`] lists it as [`RuleId::ContestedOp`]; [`enforce`] lets it pass.
    Report,
    /// [`enforce`] refuses it like any other violation.
    Refuse,
}

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
    /// The runtime path the program will run on (default in-memory).
    pub path: RuntimePath,
    /// What [`enforce`] does with contested ops (default report).
    pub contested: ContestedPolicy,
    /// Surface layout used by the runtime (default [`SurfaceStyle::Flat`]).
    pub surface: SurfaceStyle,
    /// Largest rank (default 5).
    pub max_rank: usize,
    /// Largest dimension (default 65536).
    pub max_dim: usize,
    /// Ops allowed whatever the registry says (e.g. `real_div` after a probe).
    pub extra_ops: Vec<String>,
    /// Rules not checked (e.g. [`RuleId::IoUniform`] when the runtime pads surfaces).
    pub waived: Vec<RuleId>,
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            path: RuntimePath::InMemory,
            contested: ContestedPolicy::Report,
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

/// [`check`], returning the first violation as an error (contested ops
/// only under [`ContestedPolicy::Refuse`]).
pub fn enforce(program: &Program, weights: Option<&Weights>, cfg: &RuleConfig) -> Result<()> {
    let refused =
        |v: &Violation| v.rule != RuleId::ContestedOp || cfg.contested == ContestedPolicy::Refuse;
    match check(program, weights, cfg).into_iter().find(refused) {
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
        // a const's value, or a constexpr op's operands (attributes or inline
        // inputs). Only a const's value
        // is a tensor the engine holds: a constexpr's operands (an iOS18
        // palette of a conv weight has rank 6, as coremltools writes it for
        // Core ML on the ANE) are decompressed by the compiler, so the rank
        // and dimension limits apply to the op's result, not to them.
        let inline = s.args.values().filter_map(|a| match a {
            Arg::Inline(v) => Some(v),
            _ => None,
        });
        for v in s.attrs.values().chain(inline) {
            if let Value::Blob(b) = v {
                if s.op == "const" {
                    types.push((loc.clone(), ValueType::Tensor(b.ty.clone())));
                }
                if let Err(detail) = check_blob(b, weights) {
                    push(RuleId::BlobOffset, loc.clone(), detail);
                }
            }
        }
        if !cfg.extra_ops.contains(&s.op) {
            if let Some((rule, detail)) = op_finding(&s.op, cfg.path) {
                push(rule, loc.clone(), detail);
            }
        }
        if s.op == "conv" && s.args.contains_key("bias") && !spelling_works("conv", "bias", cfg) {
            push(
                RuleId::ConvBias,
                loc.clone(),
                "conv has a `bias` argument".into(),
            );
        }
        let inline_ok = spelling_works(&s.op, "inline-literal-args", cfg);
        for (k, a) in &s.args {
            // weight-file tensors are tensor operands, not the flag-like
            // literals the rule is about (coremltools writes iOS18 constexpr
            // operands this way)
            if let (Arg::Inline(Value::Blob(_)), true) = (a, s.op.starts_with("constexpr_")) {
                continue;
            }
            if let (Arg::Inline(v), false) = (a, inline_ok) {
                let what = crate::print::value_str(v, crate::ir::ScalarStyle::Short);
                push(
                    RuleId::InlineArg,
                    loc.clone(),
                    format!("argument `{k}` is the inline literal {what}"),
                );
            }
        }
        if s.op == "concat" && !spelling_works("concat", "more-than-two-values", cfg) {
            if let Some(Arg::Tuple(values)) = s.args.get("values") {
                if values.len() > 2 {
                    push(
                        RuleId::UnprovenOp,
                        loc.clone(),
                        format!(
                            "concat of {} values: concat[more-than-two-values] is not shown working on the {} path",
                            values.len(),
                            cfg.path
                        ),
                    );
                }
            }
        }
        if s.op == "softmax" && !spelling_works("softmax", "non-power-of-two-axis", cfg) {
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
    // Surfaces and their binding rules belong to the in-memory path; e5rt
    // binds plain CPU buffers (ane-evidence.md §c step 6).
    if cfg.path != RuntimePath::InMemory {
        return;
    }
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

/// The `ANE-OP` / `ANE-OP-CONTESTED` finding for `op` on `path`, if any.
fn op_finding(op: &str, path: RuntimePath) -> Option<(RuleId, String)> {
    let reg = match registry::registry() {
        Ok(r) => r,
        Err(e) => {
            return Some((
                RuleId::UnprovenOp,
                format!("capability registry unreadable: {e}"),
            ))
        }
    };
    if !reg.is_mil_op(op) {
        return Some((
            RuleId::UnprovenOp,
            format!("`{op}` is not an op of the iOS18 MIL opset"),
        ));
    }
    match reg.status(op, None, path) {
        Status::Correct { .. } | Status::Reachable => None,
        Status::Contested => {
            let sources: Vec<String> = reg
                .entry(op, None)
                .map(|e| {
                    e.evidence
                        .iter()
                        .filter(|ev| ev.path == path)
                        .map(|ev| format!("{} {}", ev.source, ev.outcome.name()))
                        .collect()
                })
                .unwrap_or_default();
            Some((
                RuleId::ContestedOp,
                format!(
                    "op `{op}` is contested on the {path} path ({})",
                    sources.join("; ")
                ),
            ))
        }
        Status::Rejected => Some((
            RuleId::UnprovenOp,
            format!("op `{op}` is rejected on the {path} path (`anedvd ops` lists the evidence)"),
        )),
        Status::Untested => Some((
            RuleId::UnprovenOp,
            format!("op `{op}` has no evidence on the {path} path"),
        )),
    }
}

/// Whether the registry shows the spelling `variant` of `op` working on the
/// configured path (only then is the rule guarding it lifted).
fn spelling_works(op: &str, variant: &str, cfg: &RuleConfig) -> bool {
    registry::registry()
        .map(|r| r.status(op, Some(variant), cfg.path).usable())
        .unwrap_or(false)
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
    if view.elements() != Some(b.ty.numel() as u64) {
        return Err(format!(
            "blob holds {} bytes ({:?} elements), tensor needs {} elements",
            view.data.len(),
            view.elements(),
            b.ty.numel()
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
