//! Which projection blocks lose the most when compressed, measured, so the
//! most sensitive can stay fp16 (`--ane-keep-fp16 N|auto`).
//!
//! A block is one layer's mixer projections (attention's q, k, v, o; a
//! short convolution's in and out projections), one layer's
//! FFN (gate, up, down) or the lm_head. For each block, the CPU backend
//! runs the model's exact f32 function (every weight dequantized) with
//! only that block's weights replaced by what the compressed program
//! computes with ([`anedvd_mil::quantize::roundtrip`]), over a calibration
//! sequence, and the block's sensitivity is the mean logits cosine
//! distance from the exact run. Blocks are ranked by it; the
//! [`LowerOptions::keep_fp16`](super::LowerOptions::keep_fp16) most
//! sensitive stay fp16 ([`BlockMask`]), or, with [`KeepFp16::Auto`], the
//! fewest weights whose keeping brings the predicted distance of what stays
//! compressed within [`AUTO_DISTANCE`] ([`auto_choice`]).
//!
//! The calibration sequence is [`CALIBRATION_TOKENS`] pseudo-random token
//! ids (the lowering has no tokenizer): it measures how much each block's
//! rounding moves the output, not a task's accuracy. A tied lm_head is
//! also the embedding table, so its measurement includes the embedding's
//! rounding, which the ANE path does not have (the host embeds).

use super::emit::LUT_ITERATIONS;
use super::tensors::rows;
use super::{Error, Result, WeightFormat};
use crate::backend::reference::dequantized;
use anedvd_base::{Metadata, TensorInfo, TensorRef, WeightSource};
use anedvd_graph::{Backend, DecoderProgram, FeedForward, LogitsMode, MemorySource, Mixer};
use std::sync::Arc;

/// Calibration tokens per measurement.
pub const CALIBRATION_TOKENS: usize = 32;

/// [`KeepFp16::Auto`]'s goal: the summed distance of the blocks left
/// compressed (a prediction of the whole model's `1 − cosine`; small
/// independent roundings add their squared errors, and `1 − cos` is
/// quadratic in them). 2e-4 is where the tiny families' int8 greedy tokens
/// stopped leaving transformers' except at near-ties (docs/ane-quantization.md).
pub const AUTO_DISTANCE: f64 = 2e-4;

/// Which compressed projection blocks stay fp16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepFp16 {
    /// The `n` most sensitive (none for 0).
    Count(u16),
    /// The fewest weights that bring the rest within [`AUTO_DISTANCE`].
    Auto,
}

impl Default for KeepFp16 {
    fn default() -> Self {
        KeepFp16::Count(0)
    }
}

impl KeepFp16 {
    /// Parses `N` or `auto` (`--ane-keep-fp16`).
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        if s == "auto" {
            return Ok(KeepFp16::Auto);
        }
        s.parse()
            .map(KeepFp16::Count)
            .map_err(|_| format!("`{s}`: expected a number of blocks (0-65535) or `auto`"))
    }

    /// True when nothing is kept.
    pub fn is_none(self) -> bool {
        self == KeepFp16::Count(0)
    }
}

/// A group of projections that keeps one precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProjBlock {
    /// Layer `i`'s mixer projections: attention's q, k, v and output, or a
    /// short convolution's in and out (`blk.i.attn` either way).
    Attention(usize),
    /// Layer `i`'s FFN on the ANE (gate, up, down; a mixture's shared expert).
    Ffn(usize),
    /// The output projection.
    LmHead,
}

impl std::fmt::Display for ProjBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProjBlock::Attention(i) => write!(f, "blk.{i}.attn"),
            ProjBlock::Ffn(i) => write!(f, "blk.{i}.ffn"),
            ProjBlock::LmHead => write!(f, "lm_head"),
        }
    }
}

/// The blocks stored fp16 whatever the weight format (layers below 128).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockMask {
    attn: u128,
    ffn: u128,
    lm_head: bool,
}

impl BlockMask {
    /// Whether `b` is in the mask.
    pub fn contains(&self, b: ProjBlock) -> bool {
        match b {
            ProjBlock::Attention(i) => i < 128 && self.attn >> i & 1 == 1,
            ProjBlock::Ffn(i) => i < 128 && self.ffn >> i & 1 == 1,
            ProjBlock::LmHead => self.lm_head,
        }
    }

    /// Adds `b`; false for a layer index the mask cannot hold (≥ 128).
    pub fn insert(&mut self, b: ProjBlock) -> bool {
        match b {
            ProjBlock::Attention(i) if i < 128 => self.attn |= 1 << i,
            ProjBlock::Ffn(i) if i < 128 => self.ffn |= 1 << i,
            ProjBlock::LmHead => self.lm_head = true,
            _ => return false,
        }
        true
    }

    /// Blocks in the mask.
    pub fn len(&self) -> usize {
        (self.attn.count_ones() + self.ffn.count_ones() + u32::from(self.lm_head)) as usize
    }

    /// True for no block.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The blocks in the mask: attention and FFN by layer, then the lm_head.
    pub fn iter(&self) -> impl Iterator<Item = ProjBlock> + '_ {
        (0..128)
            .flat_map(|i| [ProjBlock::Attention(i), ProjBlock::Ffn(i)])
            .chain(std::iter::once(ProjBlock::LmHead))
            .filter(|b| self.contains(*b))
    }

    /// The format block `b` is stored in.
    pub fn format(&self, b: ProjBlock, format: WeightFormat) -> WeightFormat {
        if self.contains(b) {
            WeightFormat::Fp16
        } else {
            format
        }
    }
}

/// One block's measured sensitivity.
#[derive(Debug, Clone, PartialEq)]
pub struct Sensitivity {
    /// The block.
    pub block: ProjBlock,
    /// Mean over the calibration rows of `1 − cosine` between the logits
    /// with only this block compressed and the exact ones.
    pub distance: f64,
    /// Its weight elements.
    pub weights: u64,
}

/// Every block of `p` with its tensors `(name, rows)`.
fn blocks(p: &DecoderProgram) -> Vec<(ProjBlock, Vec<(String, usize)>)> {
    let mut out = Vec::new();
    for (i, b) in p.layers.iter().enumerate() {
        let mixer = match &b.mixer {
            Mixer::Attention(a) => {
                let mut t = vec![(a.wq.clone(), a.q_dim()), (a.wo.clone(), p.n_embd)];
                if a.kv_source.is_none() {
                    t.push((a.wk.clone(), a.kv_dim()));
                    // V from K (Gemma 4's attention_k_eq_v) names K's tensor
                    if a.wv != a.wk {
                        t.push((a.wv.clone(), a.kv_dim()));
                    }
                }
                t
            }
            // the emitter tags a short convolution's projections as the
            // layer's mixer block too (its taps stay fp16)
            Mixer::ShortConv(c) => vec![
                (c.in_proj.clone(), 3 * p.n_embd),
                (c.out_proj.clone(), p.n_embd),
            ],
        };
        out.push((ProjBlock::Attention(i), mixer));
        let ffn = match &b.ffn {
            FeedForward::Dense(f) => Some(f),
            FeedForward::Moe(m) => m.shared.as_ref().map(|s| &s.ffn),
        };
        if let Some(f) = ffn {
            let t = vec![
                (f.gate.clone(), f.n_ff),
                (f.up.clone(), f.n_ff),
                (f.down.clone(), p.n_embd),
            ];
            out.push((ProjBlock::Ffn(i), t));
        }
    }
    let head = p.output.clone().unwrap_or_else(|| p.token_embd.clone());
    out.push((ProjBlock::LmHead, vec![(head, p.n_vocab)]));
    out
}

/// The tensors of a base source, some replaced by f32 values of the same shape.
struct Overlay {
    base: Arc<MemorySource>,
    replaced: Vec<(String, Vec<u8>)>,
    infos: Vec<TensorInfo>,
}

impl WeightSource for Overlay {
    fn metadata(&self) -> &Metadata {
        self.base.metadata()
    }
    fn tensors(&self) -> &[TensorInfo] {
        &self.infos
    }
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        match self.replaced.iter().find(|(n, _)| n == name) {
            Some((_, data)) => {
                let info = self.infos.iter().find(|i| i.name == name)?;
                Some(TensorRef { info, data })
            }
            None => self.base.tensor(name),
        }
    }
    fn format_name(&self) -> &'static str {
        self.base.format_name()
    }
}

/// Deterministic calibration ids in `1..n_vocab`.
fn calibration(n_vocab: usize) -> Vec<u32> {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    (0..CALIBRATION_TOKENS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (1 + x % (n_vocab.max(2) as u64 - 1)) as u32
        })
        .collect()
}

/// The tensor a tied model's compressed lm_head is measured through, so
/// the embedding lookup keeps the exact table (the ANE path embeds on the
/// host, uncompressed).
const TIED_HEAD: &str = "anedvd.sensitivity.output";

fn run(
    p: &DecoderProgram,
    weights: Arc<dyn WeightSource>,
    output: Option<&str>,
    tokens: &[u32],
) -> Result<Vec<f32>> {
    let mut q = p.clone();
    q.weights = weights;
    if let Some(o) = output {
        q.output = Some(o.to_string());
    }
    let cpu = anedvd_cpu::CpuBackend::new(1).map_err(Error::Unsupported)?;
    let exe = cpu.compile(&q).map_err(Error::Unsupported)?;
    let mut s = exe.new_session(tokens.len()).map_err(Error::Unsupported)?;
    Ok(s.forward(tokens, LogitsMode::All)
        .map_err(Error::Unsupported)?
        .to_vec())
}

/// Mean `1 − cosine` over the rows of two `[rows, v]` logits.
fn distance(a: &[f32], b: &[f32], v: usize) -> f64 {
    let rows: Vec<f64> = a
        .chunks_exact(v.max(1))
        .zip(b.chunks_exact(v.max(1)))
        .map(|(x, y)| 1.0 - crate::backend::selftest::cosine(x, y))
        .collect();
    rows.iter().sum::<f64>() / rows.len().max(1) as f64
}

/// Every block's sensitivity to `format`, most sensitive first.
pub fn measure(p: &DecoderProgram, format: WeightFormat) -> Result<Vec<Sensitivity>> {
    let exact = Arc::new(dequantized(p.weights.as_ref()).map_err(Error::Unsupported)?);
    let tokens = calibration(p.n_vocab);
    let want = run(p, exact.clone(), None, &tokens)?;
    let mut out = Vec::new();
    for (block, tensors) in blocks(p) {
        let mut replaced = Vec::with_capacity(tensors.len());
        let mut weights = 0u64;
        // every tensor of `exact` is F32 already: the infos stand
        let mut infos = exact.tensors().to_vec();
        let tied = block == ProjBlock::LmHead && p.output.is_none();
        for (name, n) in &tensors {
            let (w, cols) = rows(exact.as_ref(), name, 0, *n)?;
            let r = anedvd_mil::quantize::roundtrip(format, &w, *n, cols, LUT_ITERATIONS)
                .ok_or_else(|| Error::Tensor {
                    tensor: name.clone(),
                    msg: format!("no {} form of a {n}×{cols} weight", format.name()),
                })?;
            weights += r.len() as u64;
            let bytes = r.iter().flat_map(|v| v.to_le_bytes()).collect();
            if tied {
                let info = infos.iter().find(|i| i.name == *name).cloned();
                let info = info.ok_or_else(|| Error::MissingTensor(name.clone()))?;
                infos.push(TensorInfo {
                    name: TIED_HEAD.into(),
                    ..info
                });
                replaced.push((TIED_HEAD.to_string(), bytes));
            } else {
                replaced.push((name.clone(), bytes));
            }
        }
        let overlay = Overlay {
            base: exact.clone(),
            replaced,
            infos,
        };
        let got = run(p, Arc::new(overlay), tied.then_some(TIED_HEAD), &tokens)?;
        out.push(Sensitivity {
            block,
            distance: distance(&got, &want, p.n_vocab),
            weights,
        });
    }
    out.sort_by(|a, b| b.distance.total_cmp(&a.distance));
    Ok(out)
}

/// The blocks of `p` that `keep` keeps fp16 under `format` (none for fp16).
pub fn kept_blocks(p: &DecoderProgram, format: WeightFormat, keep: KeepFp16) -> Result<BlockMask> {
    let mut mask = BlockMask::default();
    if keep.is_none() || format == WeightFormat::Fp16 {
        return Ok(mask);
    }
    let ranked = measure(p, format)?;
    let blocks = match keep {
        KeepFp16::Count(n) => ranked
            .iter()
            .take(usize::from(n))
            .map(|s| s.block)
            .collect(),
        KeepFp16::Auto => auto_choice(&ranked, AUTO_DISTANCE),
    };
    for block in blocks {
        if !mask.insert(block) {
            return Err(Error::Options(format!(
                "{}: --ane-keep-fp16 covers layers below 128",
                block
            )));
        }
    }
    Ok(mask)
}

/// The blocks to keep so that the distances of the rest sum to at most
/// `target`, with few weights kept: while the rest is over, keep the
/// smallest block that alone brings it within `target` if there is one,
/// else the block with the most distance per weight. A greedy answer to a
/// knapsack problem, not the optimum, which the measurement's own noise
/// would not reward.
pub fn auto_choice(ranked: &[Sensitivity], target: f64) -> Vec<ProjBlock> {
    let mut rest: f64 = ranked.iter().map(|s| s.distance).sum();
    let mut left: Vec<&Sensitivity> = ranked.iter().collect();
    let mut kept = Vec::new();
    while rest > target && !left.is_empty() {
        let enough = (0..left.len())
            .filter(|&i| rest - left[i].distance <= target)
            .min_by_key(|&i| left[i].weights);
        let per_weight = |s: &Sensitivity| s.distance / s.weights.max(1) as f64;
        let pick = enough.unwrap_or_else(|| {
            (0..left.len())
                .max_by(|&a, &b| per_weight(left[a]).total_cmp(&per_weight(left[b])))
                .unwrap_or(0)
        });
        let s = left.swap_remove(pick);
        rest -= s.distance;
        kept.push(s.block);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(block: ProjBlock, distance: f64, weights: u64) -> Sensitivity {
        Sensitivity {
            block,
            distance,
            weights,
        }
    }

    #[test]
    fn auto_keeps_few_weights_within_the_target() {
        let (a0, f0, head) = (
            ProjBlock::Attention(0),
            ProjBlock::Ffn(0),
            ProjBlock::LmHead,
        );
        // within the target already: nothing kept
        assert!(auto_choice(&[s(a0, 1e-4, 10), s(f0, 5e-5, 10)], 2e-4).is_empty());
        // one small block alone suffices: kept, the big one not
        let r = [s(head, 3e-4, 1000), s(a0, 2.5e-4, 10), s(f0, 1e-5, 10)];
        assert_eq!(auto_choice(&r, 3.5e-4), vec![a0]);
        // only the big block suffices: kept alone, not the small ones first
        let r = [s(head, 4e-4, 1000), s(a0, 1e-4, 10), s(f0, 1e-4, 10)];
        assert_eq!(auto_choice(&r, 2.5e-4), vec![head]);
        // no single block suffices: the most distance per weight first,
        // until one does
        let r = [s(head, 4e-4, 1000), s(a0, 3e-4, 10), s(f0, 1e-4, 10)];
        assert_eq!(auto_choice(&r, 1.5e-4), vec![a0, head]);
    }

    #[test]
    fn keep_parses_counts_and_auto() {
        assert_eq!(KeepFp16::parse("auto"), Ok(KeepFp16::Auto));
        assert_eq!(KeepFp16::parse("3"), Ok(KeepFp16::Count(3)));
        assert!(KeepFp16::parse("-1").unwrap_err().contains("`auto`"));
        assert!(KeepFp16::Count(0).is_none() && !KeepFp16::Auto.is_none());
    }
}
