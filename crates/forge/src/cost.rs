//! Cost model and tuner.
//!
//! The model prices a lowered program from the published measurements in
//! `shared/docs/ane-evidence.md` (none are measured by anedvd, which has no
//! ANE): a fixed cost per dispatch, compute at the fitted matmul rate, and
//! bytes (weights read, activations written) at a streaming bandwidth, per
//! statement the larger of the two. [`tune`] enumerates equivalent
//! lowerings, prunes them by this estimate, runs the survivors on the
//! available driver (the simulator), checks each against the literal
//! lowering, and caches the winner by graph structure and shapes.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use anedvd_mil::ir::{Arg, Program, Statement, Value};

use crate::error::Result;
use crate::exec::compile;
use crate::graph::Tensor;
use crate::lower::{self, Choice, CompileOptions, MatmulStyle};
use anedvd_mil::quantize::WeightFormat;

/// The calibration table, each figure with its source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostTable {
    /// Fixed cost per dispatch, µs: the matmul fit's floor, 74 µs on M5 Pro
    /// (ANEForge cost sweep [F-COST]; the minimum over fused single-op
    /// programs was 63.3 µs, ANEDVD measured ~103 µs on A18 Pro [D-RES]).
    pub dispatch_us: f64,
    /// Marginal µs per MFLOP above the floor: 6.36 (the same fit, M5 Pro).
    pub us_per_mflop: f64,
    /// Streaming bandwidth, GB/s: 24 (M5 Pro roofline sweep [F-RF]).
    pub bandwidth_gbs: f64,
}

impl Default for CostTable {
    fn default() -> Self {
        CostTable {
            dispatch_us: 74.0,
            us_per_mflop: 6.36,
            bandwidth_gbs: 24.0,
        }
    }
}

/// An estimate for one program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Total µs per run.
    pub micros: f64,
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes moved (weights and activations, fp16).
    pub bytes: f64,
}

fn numel(s: &Statement) -> f64 {
    s.ty.as_tensor()
        .map_or(1.0, |t| t.shape.iter().product::<usize>() as f64)
}

fn shape_of<'p>(p: &'p Program, name: &str) -> Option<&'p [usize]> {
    let f = p.functions.first()?;
    f.body
        .iter()
        .find(|s| s.name == name)
        .and_then(|s| s.ty.as_tensor().map(|t| t.shape.as_slice()))
        .or_else(|| {
            f.inputs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.shape.as_slice())
        })
}

/// Prices `program` with `table`.
pub fn estimate(program: &Program, table: &CostTable) -> Estimate {
    let (mut flops, mut bytes, mut micros) = (0.0, 0.0, table.dispatch_us);
    for f in &program.functions {
        for s in &f.body {
            let out = numel(s);
            let arg_shape = |k: &str| match s.args.get(k) {
                Some(Arg::Var(n)) => shape_of(program, n),
                _ => None,
            };
            let (fl, by) = match s.op.as_str() {
                "const" => match s.attrs.get("val") {
                    Some(Value::Blob(_)) => (0.0, 2.0 * out),
                    _ => (0.0, 0.0),
                },
                op if op.starts_with("constexpr_") => (0.0, out), // compressed: about a byte per weight or less
                "matmul" => {
                    let k = arg_shape("x").and_then(|x| x.last().copied()).unwrap_or(1) as f64;
                    (2.0 * out * k, 2.0 * out)
                }
                "conv" => {
                    let k = arg_shape("weight")
                        .map_or(1.0, |w| w[1..].iter().product::<usize>() as f64);
                    (2.0 * out * k, 2.0 * out)
                }
                // layout ops move data; element-wise ops a few flops each
                "reshape" => (0.0, 0.0),
                _ => (out, 2.0 * out),
            };
            flops += fl;
            bytes += by;
            micros += (fl / 1e6 * table.us_per_mflop).max(by / (table.bandwidth_gbs * 1e3));
        }
    }
    Estimate {
        micros,
        flops,
        bytes,
    }
}

/// One candidate the tuner considered.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The options.
    pub options: CompileOptions,
    /// The model's estimate.
    pub estimate: Estimate,
    /// Measured µs per run on the available driver (survivors only).
    pub measured_us: Option<f64>,
    /// Relative L2 difference from the literal lowering (survivors only).
    pub error: Option<f64>,
    /// Why it was dropped, if it was.
    pub dropped: Option<String>,
}

/// What [`tune`] chose and why.
#[derive(Debug, Clone)]
pub struct Tuned {
    /// The winner.
    pub options: CompileOptions,
    /// Every candidate, in enumeration order.
    pub candidates: Vec<Candidate>,
    /// Whether the choice came from the cache.
    pub cached: bool,
}

/// Tuner settings.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    /// Candidates measured after pruning by estimate.
    pub survivors: usize,
    /// Largest relative L2 difference from the literal lowering accepted.
    pub tolerance: f64,
    /// Whether weight compression (int8) may be chosen.
    pub allow_compression: bool,
    /// The cost table.
    pub table: CostTable,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            survivors: 3,
            tolerance: 1e-2,
            allow_compression: false,
            table: CostTable::default(),
        }
    }
}

fn cache() -> &'static Mutex<HashMap<u64, CompileOptions>> {
    static CACHE: OnceLock<Mutex<HashMap<u64, CompileOptions>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A key from the structure and shapes of the graph behind `outputs` and
/// the settings (values are not part of it: the same architecture tunes once).
fn structure_key(outputs: &[&Tensor], base: &CompileOptions, t: &TuneOptions) -> u64 {
    let g = outputs[0].graph();
    let ids: Vec<usize> = outputs.iter().map(|o| o.id()).collect();
    let mut h = DefaultHasher::new();
    for i in lower::live_nodes(g, &ids) {
        if let Some(n) = g.node(i) {
            format!("{:?}", n.op).hash(&mut h);
            n.args.hash(&mut h);
            n.shape.hash(&mut h);
        }
    }
    ids.hash(&mut h);
    // everything that changes the choice: a pick made under a looser
    // tolerance must never answer a stricter one
    format!("{base:?}").hash(&mut h);
    t.allow_compression.hash(&mut h);
    t.survivors.hash(&mut h);
    t.tolerance.to_bits().hash(&mut h);
    format!("{:?}", t.table).hash(&mut h);
    h.finish()
}

/// Deterministic inputs in [-1, 1) for measuring.
fn sample(shape: &[usize], seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    (0..shape.iter().product::<usize>())
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x - y).powi(2))
        .sum();
    let den: f64 = b.iter().map(|&y| f64::from(y).powi(2)).sum();
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Picks the lowering of `outputs` with the lowest estimate among those that
/// pass the path's rules and stay within `t.tolerance` of the literal
/// lowering (decomposed softmax, sums by matmul, plain matmul, fp16).
pub fn tune(outputs: &[&Tensor], base: &CompileOptions, t: &TuneOptions) -> Result<Tuned> {
    let key = structure_key(outputs, base, t);
    if let Some(o) = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(Tuned {
            options: o.clone(),
            candidates: vec![],
            cached: true,
        });
    }
    let reference = CompileOptions {
        softmax: Choice::Decomposed,
        reduce: Choice::Decomposed,
        matmul: MatmulStyle::Matmul,
        compress: WeightFormat::Fp16,
        ..base.clone()
    };
    let mut ref_exe = compile(outputs, &reference)?;
    let feeds: Vec<(String, Vec<f32>)> = ref_exe
        .inputs()
        .into_iter()
        .enumerate()
        .map(|(i, (n, s))| (n, sample(&s, i as u64)))
        .collect();
    let feed_refs: Vec<(&str, &[f32])> = feeds
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    let want = ref_exe.run(&feed_refs)?;

    let compressions: &[WeightFormat] = if t.allow_compression {
        &[WeightFormat::Fp16, WeightFormat::Int8]
    } else {
        &[WeightFormat::Fp16]
    };
    let mut candidates = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let choices = [Choice::Native, Choice::Decomposed];
    let styles = [MatmulStyle::Matmul, MatmulStyle::Conv];
    for (softmax, attention, reduce, matmul, &compress) in choices
        .iter()
        .flat_map(|&s| choices.iter().map(move |&a| (s, a)))
        .flat_map(|(s, a)| choices.iter().map(move |&r| (s, a, r)))
        .flat_map(|(s, a, r)| styles.iter().map(move |&m| (s, a, r, m)))
        .flat_map(|(s, a, r, m)| compressions.iter().map(move |c| (s, a, r, m, c)))
    {
        let options = CompileOptions {
            softmax,
            attention,
            reduce,
            matmul,
            compress,
            ..base.clone()
        };
        let l = lower::lower(outputs, &options)?;
        // a choice the graph has no node for lowers to the same program
        let text = anedvd_mil::print(&l.program);
        if !seen.insert(text) {
            continue;
        }
        let estimate = estimate(&l.program, &t.table);
        let dropped = crate::exec::first_refusal(outputs[0].graph(), &l, options.path)
            .err()
            .map(|e| e.to_string());
        candidates.push(Candidate {
            options,
            estimate,
            measured_us: None,
            error: None,
            dropped,
        });
    }
    let mut order: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].dropped.is_none())
        .collect();
    order.sort_by(|&a, &b| {
        candidates[a]
            .estimate
            .micros
            .total_cmp(&candidates[b].estimate.micros)
    });
    for &i in order.iter().skip(t.survivors) {
        candidates[i].dropped = Some("pruned by estimate".into());
    }
    let mut best: Option<usize> = None;
    for &i in order.iter().take(t.survivors) {
        let mut exe = compile(outputs, &candidates[i].options)?;
        let start = Instant::now();
        let got = exe.run(&feed_refs)?;
        candidates[i].measured_us = Some(start.elapsed().as_secs_f64() * 1e6);
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| rel_l2(&g.values, &w.values))
            .fold(0.0, f64::max);
        candidates[i].error = Some(err);
        if err > t.tolerance || !err.is_finite() {
            candidates[i].dropped = Some(format!("differs from the literal lowering by {err:.2e}"));
            continue;
        }
        if best.is_none() {
            best = Some(i);
        }
    }
    let options = match best {
        Some(i) => candidates[i].options.clone(),
        None => reference,
    };
    cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, options.clone());
    Ok(Tuned {
        options,
        candidates,
        cached: false,
    })
}
