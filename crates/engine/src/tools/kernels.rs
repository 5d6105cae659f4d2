//! The ANE programs of a model: `check` (layer 0's kernels on the simulator
//! against f32 CPU matmuls), `kernels` (the programs with a predicted time
//! per token), `kernels --emit` (the programs' files, as the runtime writes
//! them for the ANE compiler) and `selftest` (tiny random transformers, ane-sim
//! against the CPU).

use crate::{Error, Result};
use anedvd_ane::lower::{self, KernelKind, LowerOptions, Variant};
use anedvd_ane::runtime::modeldir::write_program_files;
use anedvd_ane::runtime::ProgramSource;
use anedvd_model::ConfigOverrides;
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

pub use anedvd_ane::backend::check::KernelCheck;
pub use anedvd_ane::backend::selftest::{Flavor, SelftestResult};
pub use anedvd_ane::lower::sensitivity::CALIBRATION_TOKENS;
pub use anedvd_ane::lower::CostModel;

/// Checks every kernel of layer 0 (both variants) and the first lm_head
/// slice of the model at `path` against f32 CPU matmuls over the
/// dequantized weights, each within `tolerance` (max|Δ| / max|reference|).
pub fn check(
    path: &Path,
    overrides: &ConfigOverrides,
    lowering: &LowerOptions,
    tolerance: f32,
) -> Result<Vec<KernelCheck>> {
    let program = super::open_program(path, overrides, false)?.program;
    Ok(anedvd_ane::backend::check::check_layer0(
        &program, lowering, tolerance,
    )?)
}

/// Builds tiny random transformers of every flavor and compares ane-sim with
/// the CPU on each variant.
pub fn selftest(seed: u64) -> Result<Vec<SelftestResult>> {
    Ok(anedvd_ane::backend::selftest::run(seed)?)
}

/// One program of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedKernel {
    /// Name (`entry`, `blk.3.layer`, `lm_head.1`).
    pub name: String,
    /// What it computes, in words.
    pub computes: &'static str,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Weight bytes streamed per dispatch (in the lowering's weight format).
    pub weight_bytes: u64,
    /// Predicted time per dispatch, ms.
    pub predicted_ms: f64,
}

/// The lowering of one variant with its predicted cost.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantPlan {
    /// The variant.
    pub variant: Variant,
    /// The runtime path it is lowered for.
    pub path: lower::RuntimePath,
    /// Dispatches per decode token (= programs: each runs once per token).
    pub dispatches_per_token: usize,
    /// Weight bytes of all programs (in the lowering's weight format).
    pub weight_bytes: u64,
    /// Predicted ms per decode token.
    pub per_token_ms: f64,
    /// Ops whose sources disagree on the lowering's runtime path, with the
    /// first program using each (`ANE-OP-CONTESTED`; never assumed to work).
    pub contested: Vec<(String, String)>,
    /// The programs in dispatch order.
    pub kernels: Vec<PlannedKernel>,
}

/// What `kernels` reports.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelsReport {
    /// The model's family.
    pub family: String,
    /// Layers.
    pub layers: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// The lowering options of the chosen variant.
    pub options: LowerOptions,
    /// The cost model used.
    pub cost: CostModel,
    /// Every variant, the chosen one (`options.variant`) first.
    pub variants: Vec<VariantPlan>,
    /// The other variants and paths the model cannot take, with the reason.
    pub unavailable: Vec<(Variant, lower::RuntimePath, String)>,
}

/// The contested ops of a lowering on `path`, each with the first program using it.
fn contested_ops(l: &lower::Lowered, path: lower::RuntimePath) -> Vec<(String, String)> {
    let rules = anedvd_mil::rules::RuleConfig {
        path,
        ..anedvd_mil::rules::RuleConfig::default()
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for k in &l.kernels {
        for v in anedvd_mil::rules::check(&k.program, None, &rules) {
            if v.rule != anedvd_mil::rules::RuleId::ContestedOp {
                continue;
            }
            let op = v
                .location
                .rsplit('/')
                .next()
                .and_then(|stmt| {
                    k.program
                        .functions
                        .iter()
                        .flat_map(|f| &f.body)
                        .find(|s| s.name == stmt)
                })
                .map(|s| s.op.clone())
                .unwrap_or_default();
            if !out.iter().any(|(o, _)| *o == op) {
                out.push((op, k.name.clone()));
            }
        }
    }
    out
}

/// Lowers the model at `path` with `lowering` and with every other variant
/// on both runtime paths, and predicts each program's time with `cost`.
pub fn plan(
    path: &Path,
    overrides: &ConfigOverrides,
    lowering: &LowerOptions,
    cost: &CostModel,
) -> Result<KernelsReport> {
    let program = super::open_program(path, overrides, false)?.program;
    // measured once for every pair
    let lowering = &lower::resolve_precision(&program, lowering)?;
    // the chosen variant and path first, then every other pair
    let mut pairs = vec![(lowering.variant, lowering.path)];
    for path in std::iter::once(lowering.path).chain(
        lower::RuntimePath::ALL
            .into_iter()
            .filter(|p| *p != lowering.path),
    ) {
        for variant in [Variant::Resident, Variant::Fused, Variant::Split] {
            if !pairs.contains(&(variant, path)) {
                pairs.push((variant, path));
            }
        }
    }
    let mut plans = Vec::new();
    let mut unavailable = Vec::new();
    for (variant, path) in pairs {
        let o = LowerOptions {
            variant,
            path,
            ..*lowering
        };
        let chosen = (variant, path) == (lowering.variant, lowering.path);
        let l = match lower::lower(&program, &o) {
            Ok(l) => l,
            // another variant or path this model cannot take: say why
            Err(e @ (lower::Error::Options(_) | lower::Error::Unsupported(_))) if !chosen => {
                unavailable.push((variant, path, e.to_string()));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let kernels = l
            .kernels
            .iter()
            .map(|k| PlannedKernel {
                name: k.name.clone(),
                computes: match k.kind {
                    // the resident variant's lm_head: every slice an output
                    KernelKind::LmHead { .. } if !k.outputs.is_empty() => {
                        "final norm + every lm_head slice"
                    }
                    // a resident group ending with a mixture of experts
                    KernelKind::Resident { .. }
                        if k.outputs
                            .iter()
                            .any(|p| matches!(p.role, lower::PortRole::MoeInput { .. })) =>
                    {
                        "whole layers, KV cache resident; last layer's experts on the host"
                    }
                    kind => kind_label(kind),
                },
                in_channels: k.in_channels,
                out_channels: k.out_channels
                    + k.outputs
                        .iter()
                        .map(|p| match p.role {
                            lower::PortRole::Logits { rows, .. } => rows,
                            _ => 0,
                        })
                        .sum::<usize>(),
                weight_bytes: k.weight_bytes,
                predicted_ms: cost.kernel(k, o.width).total_ms,
            })
            .collect();
        plans.push(VariantPlan {
            variant,
            path,
            dispatches_per_token: l.dispatches_per_token(),
            weight_bytes: l.weight_bytes(),
            per_token_ms: cost.per_token_ms(&l),
            contested: contested_ops(&l, path),
            kernels,
        });
    }
    Ok(KernelsReport {
        family: program.family.to_string(),
        layers: program.layers.len(),
        n_embd: program.n_embd,
        n_vocab: program.n_vocab,
        options: *lowering,
        cost: *cost,
        variants: plans,
        unavailable,
    })
}

fn kind_label(k: KernelKind) -> &'static str {
    match k {
        KernelKind::Qkv { .. } => "q/k/v projection",
        KernelKind::AttnOut { .. } => "output projection",
        KernelKind::Ffn { .. } => "gated FFN",
        KernelKind::PleProj => "per-layer input projection",
        KernelKind::PerLayer { .. } => "per-layer input gate + projection",
        KernelKind::Entry { layer: 0 } => "norm + q/k/v (layer 0)",
        KernelKind::Entry { .. } => "norm + q/k/v (after experts)",
        KernelKind::Layer {
            ffn_on_host: true, ..
        } => "o-proj..FFN norm, shared expert (experts on the host)",
        KernelKind::Layer { next_qkv: true, .. } => "o-proj..FFN..next norm+q/k/v",
        KernelKind::Layer { .. } => "o-proj..FFN (last layer)",
        KernelKind::Resident { .. } => "whole layers, KV cache resident",
        KernelKind::LmHead {
            norm_inside: true, ..
        } => "final norm + lm_head slice",
        KernelKind::LmHead { .. } => "lm_head slice",
    }
}

/// Every projection block of the model at `path` ranked by how far
/// compressing it alone to `format` moves the logits (most sensitive first;
/// `lower::sensitivity`).
pub fn sensitivity(
    path: &Path,
    overrides: &ConfigOverrides,
    format: lower::WeightFormat,
) -> Result<Vec<lower::sensitivity::Sensitivity>> {
    let program = super::open_program(path, overrides, false)?.program;
    Ok(lower::sensitivity::measure(&program, format)?)
}

/// The name of `index.json`, the listing `emit` writes next to the programs.
pub const EMIT_INDEX: &str = "index.json";

/// The lowering options as recorded in `index.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmittedOptions {
    /// `fused` or `split`.
    pub variant: &'static str,
    /// Activation width W.
    pub width: usize,
    /// Largest lm_head vocabulary slice.
    pub vocab_slice: usize,
    /// The fused variant's residual scale.
    pub residual_scale: f32,
    /// Projection weight format (`fp16`, `int8`, `lut8`, ...).
    pub weights: &'static str,
    /// The runtime path the programs were checked for (`inmem`, `e5rt`).
    pub path: &'static str,
}

/// One emitted program, as listed in `index.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmittedKernel {
    /// Kernel name; also its directory under the emit directory.
    pub name: String,
    /// Input channels C of `x: [1, C, 1, W]`.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// fp16 payload bytes in its weight files (blob headers not counted).
    pub weight_bytes: u64,
    /// Multiply-accumulates per activation column.
    pub macs: u64,
    /// Its weight files, relative to its directory (`weights/weight.bin`).
    pub weight_files: Vec<String>,
}

/// What `emit` wrote (also the content of `index.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmitReport {
    /// The model's family.
    pub family: String,
    /// The lowering options.
    pub options: EmittedOptions,
    /// Every program, in dispatch order.
    pub kernels: Vec<EmittedKernel>,
}

/// Writes every MIL program the ANE backend would compile for the model at
/// `path` into `dir/<kernel name>/` (`model.mil` + `weights/…`), with the
/// same function the runtime uses to hand a program to the ANE compiler
/// (so the files are byte-identical), plus `dir/index.json` listing the
/// kernels in dispatch order. `dir` must not exist or be empty.
pub fn emit(
    path: &Path,
    overrides: &ConfigOverrides,
    lowering: &LowerOptions,
    dir: &Path,
) -> Result<EmitReport> {
    // refuse a used directory before the (slow) lowering, create it only
    // once there is something to write
    check_empty_or_absent(dir)?;
    let program = super::open_program(path, overrides, false)?.program;
    let lowered = lower::lower(&program, lowering)?;
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut kernels = Vec::with_capacity(lowered.kernels.len());
    for k in &lowered.kernels {
        let sub = plain_component(&k.name)?;
        let source = ProgramSource::from_program(&k.program, &k.weights);
        write_program_files(&dir.join(sub), &source)?;
        let weight_files = source
            .weights
            .keys()
            .map(|key| {
                anedvd_ane::runtime::modeldir::sanitize_weight_key(key)
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
            })
            .collect::<std::result::Result<_, _>>()?;
        kernels.push(EmittedKernel {
            name: k.name.clone(),
            in_channels: k.in_channels,
            out_channels: k.out_channels,
            weight_bytes: k.weight_bytes,
            macs: k.macs,
            weight_files,
        });
    }
    let report = EmitReport {
        family: program.family.to_string(),
        options: EmittedOptions {
            variant: lowering.variant.name(),
            width: lowering.width,
            vocab_slice: lowering.vocab_slice,
            residual_scale: lowering.residual_scale,
            weights: lowering.weights.name(),
            path: lowering.path.name(),
        },
        kernels,
    };
    let index = dir.join(EMIT_INDEX);
    let mut json = serde_json::to_string_pretty(&report)
        .map_err(|e| Error::Invalid(format!("cannot encode {}: {e}", index.display())))?;
    json.push('\n');
    std::fs::write(&index, json).map_err(|source| Error::Io {
        path: index,
        source,
    })?;
    Ok(report)
}

/// Accepts `dir` when it does not exist or is an empty directory.
fn check_empty_or_absent(dir: &Path) -> Result<()> {
    let io = |source| Error::Io {
        path: dir.to_path_buf(),
        source,
    };
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::Invalid(format!(
                    "{} exists and is not empty; give a new or empty directory",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if dir.exists() && !dir.is_dir() => Err(Error::Invalid(format!(
            "{} exists and is not a directory ({e})",
            dir.display()
        ))),
        Err(e) => Err(io(e)),
    }
}

/// A kernel name as one directory name; refuses names that would leave the
/// emit directory.
fn plain_component(name: &str) -> Result<PathBuf> {
    let p = PathBuf::from(name);
    let mut parts = p.components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(_)), None) if !name.contains(['/', '\\']) => Ok(p),
        _ => Err(Error::Invalid(format!(
            "kernel name `{name}` is not a plain directory name"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_stay_inside_the_emit_dir() {
        assert!(plain_component("blk.0.layer").is_ok());
        for bad in ["..", ".", "a/b", "/abs", "", "a\\b"] {
            assert!(plain_component(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn emit_refuses_a_non_empty_dir() {
        let dir = std::env::temp_dir().join(format!("anedvd-emit-full-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join("x"), b"x");
        let e = check_empty_or_absent(&dir).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("is not empty")),
            "{e:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
