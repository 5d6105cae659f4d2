//! The resident variant: several whole layers per program, attention and
//! the KV cache (or a short convolution and its cache) inside, the caches
//! resident across steps.
//!
//! ANEForge's decode programs (ane-evidence.md §d) run a chunk of layers
//! with the KV cache as program state: every cache is an input and an
//! output, the output aliased onto the input's buffer before the first
//! execute, so one dispatch per step reads and writes the cache with no
//! host copy. This is that design on our lowering:
//!
//! * `blk.A-B.resident` (layers `A..=B`; `blk.A.resident` for one) takes
//!   the scaled residual `x: [1, D, 1, W]` and returns the next one, and
//!   runs per layer: attention norm, the q/k/v projection, per-head q/k
//!   norms (and Gemma 4's weightless v norm), RoPE, the cache write, scores
//!   (with the soft-cap), the mask, softmax, the weighted sum of values,
//!   the output projection and the rest of the fused layer (post norms,
//!   residual adds, FFN); a short convolution's layer runs norm, `in_proj`,
//!   `u = B ⊙ X`, its cache write, the read of the `K - 1` positions
//!   before the chunk, the depthwise conv, `· C` and `out_proj` (below).
//!   Its further ports ([`PortRole`]):
//!   - per distinct RoPE `rope_lI_cos`, `rope_lI_sin` `[1, n_rot/2, 1, W]`
//!     (the host's own cos/sin tables at each column's position), per
//!     distinct window `mask_lI` `[1, 1, W, T]` (0 where column j sees key
//!     t, [`MASKED`] elsewhere), `write` `[1, W, T]` (one-hot at each
//!     chunk column's position) and `keep` `[1, 1, T]` (0 where the chunk
//!     writes);
//!   - per layer the caches `k_lI`, `v_lI` `[KVH, hd, T]`, and as outputs
//!     `k_lI_next = k_lI · keep + k · write` (the masked one-hot write of
//!     §d; an exact product: one non-zero term per element) and likewise
//!     `v_lI_next`, which the runtime aliases onto the inputs;
//!   - per short convolution the cache `conv_lI` `[1, D, T]` (`u` at each
//!     position) with its output `conv_lI_next`, written like K/V, and per
//!     distinct `K` `conv_prev_lI` `[1, K-1, T]` (one-hot at (k, p₀ −
//!     (K−1) + k) where that position is ≥ 0, p₀ the chunk's first);
//!   - Gemma 4: per layer its per-layer input `ple_lI` `[1, P, 1, W]`.
//! * A mixture of experts ends its group ([`groups`]): the program stops
//!   after that layer's mixer residual, FFN norm and shared expert, as the
//!   fused variant's does. Its first output is then the residual after the
//!   mixer, and two more outputs carry the FFN-normed residual
//!   (`l{i}_ffn_norm`, [`PortRole::MoeInput`]) and the shared expert's
//!   output ([`PortRole::SharedExpert`], only with one), all
//!   `[1, D, 1, W]`: the host runs the router and the routed experts, gates
//!   the shared expert, applies the post-FFN norm, the residual add (`/ s`)
//!   and any layer scale, and hands the residual to the next group.
//! * `lm_head`: the final norm and every vocabulary slice, one output each.
//!
//! So a decode token takes one dispatch per group + 1: ⌈L/K⌉ + 1 for K
//! layers per program, more where mixtures of experts cut the groups short
//! (Gemma 4: + 1, below).
//!
//! Gemma 4. Its per-layer inputs come as in the fused variant: the `ple`
//! program (first, one more dispatch per token) projects the scaled
//! embedding for every layer, the host norms that and adds the token
//! table's rows (`Model::per_layer_inputs`), and hands each layer its `e_l`
//! as the port `ple_lI`; the layer's branch `proj(act(gate · x) ⊙ e_l)`,
//! its norm and the layer scale run inside, as they do in the fused layer
//! (`kernels::emit_layer_end`). A layer reading layer J's K/V (`kv_source`)
//! projects q only, norms and rotates it, and attends over J's caches as
//! J's layer left them in this step (after the chunk's write): the vars
//! themselves when J is in the same program, else the inputs `k_lJ`,
//! `v_lJ` (role [`PortRole::Cache`], no output), which the runtime binds to
//! the buffers of J's program (`E5rtRuntime::bind_from`; binding one
//! buffer to ports of two programs is UNVERIFIED on hardware) and the
//! simulator session fills with J's cache. Per-layer head dims, Gemma 4's
//! proportional RoPE (its unrotated pairs have frequency 0: cos 1, sin 0),
//! the value norm and `attention_k_eq_v` (`wv` names `wk`) need nothing
//! more; the final logit soft-cap is the host's, as for Gemma 2/3.
//!
//! Layouts. Scores are one batched matmul per KV head group: q goes from
//! `[1, H·hd, 1, W]` to `[KVH, G·W, hd]` (G = H/KVH query heads per KV
//! head; two reshapes and a transpose), times the cache `[KVH, hd, T]`
//! gives `[KVH, G·W, T]`; values come back with `transpose_y`. RoPE is the
//! half-split form (`x1·c − x2·s`, `x1·s + x2·c` on two slices); a model
//! with adjacent pairs has its q/k rows (and q/k norm gains) permuted per
//! head into half-split order at lowering time, which leaves every q·k dot
//! product unchanged. Softmax is the native op over T (e5rt: reachable,
//! `anedvd ops --op softmax`), so T is a power of two.
//!
//! Short convolutions. `next · conv_prevᵀ` (`[1, D, T]` by `[1, T, K-1]`)
//! reads the `K - 1` positions before the chunk back out of the updated
//! cache, exactly (one non-zero term per element; zero before position 0,
//! the causal padding); concatenated before the chunk's own `u` columns
//! (which are contiguous positions) they make `[1, D, 1, K-1+W]`, and the
//! depthwise conv with no padding gives column j the taps of positions
//! p_j − (K−1) ..= p_j. Only the `K - 1` previous columns go through the
//! cache: `D·T·(K−1)` multiply-adds per layer rather than `D·T·W` per tap
//! for reading every tap out of it, and one small position input. As with
//! K/V, a chunk reads only rows before its first position (and its own,
//! from `u`), so stale rows need no clearing and truncation no snapshot.
//!
//! Only the e5rt path binds ports of different sizes, so this variant is
//! e5rt only; the in-memory path keeps the fused variant's host attention.
//! It refuses by name what it cannot hold: K/V shared between layers whose
//! RoPE pairs elements differently (no model does), and a mixture of
//! experts with a per-layer input (the host finishes such a layer without
//! one; no model has both).

use super::emit::Emitter;
use super::kernels::{
    conv_weight, emit_conv_proj, emit_ffn, emit_ffn_residual, emit_layer_end, emit_logits,
    emit_mixer_out_residual, emit_mixer_residual, emit_qkv, finish_ports, norm, qkv_weights,
};
use super::sensitivity::ProjBlock;
use super::tensors::vector;
use super::{
    Error, Kernel, KernelKind, LayerView, LowerOptions, MixerView, Port, PortRole, Result,
    RuntimePath,
};
use anedvd_graph::{
    Attention, Block, DecoderProgram, FeedForward, Mixer, Rope, RopePairing, ShortConv,
};
use anedvd_mil::builder::{ConvOpts, Var};
use anedvd_mil::ir::DType;
use std::ops::Range;

/// Most weight bytes one program bakes when `layers_per_program` is 0:
/// ANEForge groups layers so that each program holds ≤ 1.6 GB of fp16
/// ("≤ 1.6 GB", "~1.5 GB OK, ~3.4 GB fails", ane-evidence.md §d); blocks
/// kept fp16 count at 16 bits.
pub const MAX_PROGRAM_WEIGHT_BYTES: u64 = 1_500_000_000;

/// Most elements of one `W × T` position input (the mask, the one-hot
/// write): 2^22, 8 MiB of fp16 (W 64 × T 65536).
pub const MAX_POSITION_INPUT: usize = 1 << 22;

/// The mask's value for a key a column may not see: far below any score,
/// so its exponential is 0 in fp16, yet finite (no inf arithmetic, which
/// the ANE does not carry through: ane-evidence.md §e).
pub const MASKED: f32 = -30000.0;

/// The layer ranges of the programs: `layers_per_program` at a time, or
/// (0) as many as fit [`MAX_PROGRAM_WEIGHT_BYTES`] in `options.weights`;
/// either way a group ends after each mixture of experts, whose routed
/// experts run on the host.
pub fn groups(p: &DecoderProgram, options: &LowerOptions) -> Vec<Range<usize>> {
    let n = p.layers.len();
    let k = options.layers_per_program;
    let bits = |block| u64::from(options.fp16_blocks.format(block, options.weights).bits());
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, b) in p.layers.iter().enumerate() {
        let add = if k > 0 {
            0
        } else {
            let (mixer, ffn) = layer_weights(p, b);
            (mixer.saturating_mul(bits(ProjBlock::Attention(i)))
                + ffn.saturating_mul(bits(ProjBlock::Ffn(i))))
                / 8
        };
        let full = match k {
            0 => bytes.saturating_add(add) > MAX_PROGRAM_WEIGHT_BYTES,
            k => i - start == k,
        };
        if i > start && full {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(add);
        if matches!(b.ffn, FeedForward::Moe(_)) {
            out.push(start..i + 1);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < n {
        out.push(start..n);
    }
    out
}

/// Projection weights of one layer's mixer and FFN (elements).
fn layer_weights(p: &DecoderProgram, b: &Block) -> (u64, u64) {
    let d = p.n_embd as u64;
    let mixer = match &b.mixer {
        // a layer reading another's K/V projects q only
        Mixer::Attention(a) if a.kv_source.is_some() => d * (2 * a.q_dim()) as u64,
        Mixer::Attention(a) => d * (2 * a.q_dim() + 2 * a.kv_dim()) as u64,
        Mixer::ShortConv(_) => 4 * d * d,
    };
    let ffn = match &b.ffn {
        FeedForward::Dense(f) => 3 * d * f.n_ff as u64,
        FeedForward::Moe(m) => m.shared.as_ref().map_or(0, |s| 3 * d * s.ffn.n_ff as u64),
    };
    (mixer, ffn)
}

/// The first part of `p` this variant cannot hold, as `(part, what,
/// layer)` for [`anedvd_graph::Error::unsupported`]: K/V shared with a
/// layer whose RoPE pairs its elements otherwise (their rows are permuted
/// differently; no model does that), or a mixture of experts with a
/// per-layer input (the host finishes such a layer without it; no model
/// has both).
pub fn refusal(views: &[LayerView<'_>]) -> Option<(&'static str, &'static str, usize)> {
    let source_order = |j: usize| match views.get(j).map(|v| v.mixer) {
        Some(MixerView::Attention(s)) => Some(rope_order(s)),
        _ => None,
    };
    views.iter().enumerate().find_map(|(i, l)| {
        let what = match (l.mixer, l.ffn) {
            (MixerView::Attention(a), _)
                if a.kv_source
                    .is_some_and(|j| source_order(j) != Some(rope_order(a))) =>
            {
                (
                    "mixer",
                    "attention sharing K/V across RoPE pairings in the resident variant",
                )
            }
            _ if l.ffn.on_host() && l.per_layer.is_some() => (
                "per-layer input",
                "a mixture of experts with a per-layer input in the resident variant",
            ),
            _ => return None,
        };
        Some((what.0, what.1, i))
    })
}

/// The refusal of [`refusal`], if any.
fn check_views(views: &[LayerView<'_>]) -> Result<()> {
    match refusal(views) {
        Some((part, what, layer)) => {
            let e = anedvd_graph::Error::unsupported("ane", part, what, layer);
            Err(Error::Unsupported(e))
        }
        None => Ok(()),
    }
}

/// The resident variant's own options: the e5rt path, a context that is
/// a power of two in 32..=65536, and `W · T` within [`MAX_POSITION_INPUT`]
/// (the mask and write inputs are `W × T`). Checked before anything costly.
pub fn check_options(o: &LowerOptions) -> Result<()> {
    if o.path != RuntimePath::E5rt {
        return Err(Error::Options(
            "the resident variant runs on the e5rt path only (--ane-path e5rt): the in-memory \
             path binds one input and one output of equal size per program, so its caches cannot \
             be ports (use --variant fused there)"
                .into(),
        ));
    }
    let t = o.context;
    if !(32..=65536).contains(&t) || !t.is_power_of_two() {
        return Err(Error::Options(format!(
            "context {t} must be a power of two in 32..=65536 (softmax runs over it)"
        )));
    }
    if o.width.saturating_mul(t) > MAX_POSITION_INPUT {
        return Err(Error::Options(format!(
            "width {} × context {t} exceeds {MAX_POSITION_INPUT} elements per position input \
             (the mask and write inputs are W × T)",
            o.width
        )));
    }
    Ok(())
}

/// Lowers every layer group and the lm_head (Gemma 4's `ple` program,
/// which comes first, is [`super::lower_views`]' as in every variant).
pub fn lower(p: &DecoderProgram, views: &[LayerView<'_>], o: &LowerOptions) -> Result<Vec<Kernel>> {
    check_options(o)?;
    check_views(views)?;
    let mut kernels = Vec::new();
    for g in groups(p, o) {
        kernels.push(group(p, o, views, g)?);
    }
    kernels.push(lm_head(p, o)?);
    Ok(kernels)
}

/// The ports and values one program's layers share.
struct Shared {
    inputs: Vec<Port>,
    ropes: Vec<(Rope, Var, Var)>,
    masks: Vec<(Option<usize>, Var)>,
    /// The conv-history selections by `K - 1`.
    prevs: Vec<(usize, Var)>,
    /// Each layer's K and V caches after this step's write, as the
    /// program has them (for layers reading them: Gemma 4's `kv_source`).
    caches: Vec<(usize, [Var; 2])>,
    write: Var,
    keep: Var,
}

/// Declares the fp16 input `name` and records its port.
fn declare(
    e: &mut Emitter,
    inputs: &mut Vec<Port>,
    name: &str,
    shape: &[usize],
    role: PortRole,
) -> Result<Var> {
    let v = e.b.input(name, DType::Fp16, shape)?;
    inputs.push(Port {
        name: name.into(),
        shape: shape.to_vec(),
        role,
    });
    Ok(v)
}

impl Shared {
    fn declare(
        &mut self,
        e: &mut Emitter,
        name: &str,
        shape: &[usize],
        role: PortRole,
    ) -> Result<Var> {
        declare(e, &mut self.inputs, name, shape, role)
    }

    /// Layer `i`'s cos and sin inputs (declared by the first layer with its RoPE).
    fn rope(&mut self, e: &mut Emitter, i: usize, r: &Rope) -> Result<(Var, Var)> {
        if let Some((_, c, s)) = self.ropes.iter().find(|(x, _, _)| x == r) {
            return Ok((c.clone(), s.clone()));
        }
        let shape = [1, r.n_rot / 2, 1, e.width];
        let c = self.declare(
            e,
            &format!("rope_l{i}_cos"),
            &shape,
            PortRole::Rope {
                layer: i,
                sin: false,
            },
        )?;
        let s = self.declare(
            e,
            &format!("rope_l{i}_sin"),
            &shape,
            PortRole::Rope {
                layer: i,
                sin: true,
            },
        )?;
        self.ropes.push((r.clone(), c.clone(), s.clone()));
        Ok((c, s))
    }

    /// Layer `i`'s mask input (declared by the first layer with its window).
    fn mask(&mut self, e: &mut Emitter, i: usize, window: Option<usize>, t: usize) -> Result<Var> {
        if let Some((_, m)) = self.masks.iter().find(|(w, _)| *w == window) {
            return Ok(m.clone());
        }
        let shape = [1, 1, e.width, t];
        let m = self.declare(
            e,
            &format!("mask_l{i}"),
            &shape,
            PortRole::Mask { layer: i },
        )?;
        self.masks.push((window, m.clone()));
        Ok(m)
    }

    /// Layer `i`'s selection of the `k1 = K - 1` positions before the
    /// chunk, `[1, K - 1, T]` (declared by the first layer with its `K`).
    fn conv_prev(&mut self, e: &mut Emitter, i: usize, k1: usize, t: usize) -> Result<Var> {
        if let Some((_, v)) = self.prevs.iter().find(|(k, _)| *k == k1) {
            return Ok(v.clone());
        }
        let role = PortRole::ConvPrev { layer: i };
        let v = self.declare(e, &format!("conv_prev_l{i}"), &[1, k1, t], role)?;
        self.prevs.push((k1, v.clone()));
        Ok(v)
    }

    /// The masked one-hot write (§d) of the chunk's columns `cols`
    /// (`[a, b, W]`) into the cache port `name` (`[a, b, T]`, role `role`):
    /// `cache · keep + cols · write`, exact (one non-zero term per element),
    /// op names prefixed `tag`. Declares the cache input, pushes the updated
    /// cache as the output the runtime aliases onto it, and returns it.
    fn write_cache(
        &mut self,
        e: &mut Emitter,
        outputs: &mut Vec<(Port, Var)>,
        (name, role): (String, PortRole),
        tag: &str,
        cols: &Var,
    ) -> Result<Var> {
        let mut shape = cols.shape().to_vec();
        if let (Some(last), Some(&t)) = (shape.last_mut(), self.write.shape().last()) {
            *last = t;
        }
        let cache = self.declare(e, &name, &shape, role)?;
        let placed =
            e.b.matmul(&format!("{tag}_placed"), cols, &self.write, false, false)?;
        let kept = e.b.mul(&format!("{tag}_kept"), &cache, &self.keep)?;
        let next = e.b.add(&format!("{name}_next"), &kept, &placed)?;
        let port = Port {
            name: next.name().to_string(),
            shape,
            role,
        };
        outputs.push((port, next.clone()));
        Ok(next)
    }

    /// Layer `j`'s K and V caches after this step's write, for a layer
    /// reading them: the program's own when `j` is inside, else the inputs
    /// `k_lJ`, `v_lJ` of `shape` (role [`PortRole::Cache`] without an
    /// output), bound to the buffers of the program holding `j`.
    fn source_caches(&mut self, e: &mut Emitter, j: usize, shape: &[usize]) -> Result<[Var; 2]> {
        if let Some((_, c)) = self.caches.iter().find(|(l, _)| *l == j) {
            return Ok(c.clone());
        }
        let mut cache = |value: bool| {
            let kv = if value { "v" } else { "k" };
            let role = PortRole::Cache { layer: j, value };
            self.declare(e, &format!("{kv}_l{j}"), shape, role)
        };
        let c = [cache(false)?, cache(true)?];
        self.caches.push((j, c.clone()));
        Ok(c)
    }
}

/// `blk.A-B.resident`: layers `range` from the scaled residual to the next.
fn group(
    p: &DecoderProgram,
    o: &LowerOptions,
    views: &[LayerView<'_>],
    range: Range<usize>,
) -> Result<Kernel> {
    let (d, w, t) = (p.n_embd, o.width, o.context);
    let mut e = Emitter::for_options(o);
    let mut x = e.input(d)?;
    let mut inputs = Vec::new();
    let write = declare(&mut e, &mut inputs, "write", &[1, w, t], PortRole::Write)?;
    let keep = declare(&mut e, &mut inputs, "keep", &[1, 1, t], PortRole::Keep)?;
    let mut sh = Shared {
        inputs,
        ropes: Vec::new(),
        masks: Vec::new(),
        prevs: Vec::new(),
        caches: Vec::new(),
        write,
        keep,
    };
    let mut outputs = Vec::new();
    for i in range.clone() {
        if views[i].ffn.on_host() && i + 1 != range.end {
            let msg = format!("layer {i}: a mixture of experts must end its layer group");
            return Err(Error::Options(msg));
        }
        x = layer(&mut e, p, o, (i, &views[i]), &x, &mut sh, &mut outputs)?;
    }
    let name = match range.len() {
        1 => format!("blk.{}.resident", range.start),
        _ => format!("blk.{}-{}.resident", range.start, range.end - 1),
    };
    let kind = KernelKind::Resident {
        first: range.start,
        layers: range.len(),
    };
    Ok(finish_ports(name, kind, e, (&x, d), (sh.inputs, outputs)))
}

/// Per-head element order that turns adjacent RoPE pairs `(2i, 2i+1)`
/// into half-split pairs `(i, i + n_rot/2)`: `order[j]` is the old index
/// of new element `j`; dimensions past `n_rot` stay.
fn half_split_order(head_dim: usize, n_rot: usize) -> Vec<usize> {
    let half = n_rot / 2;
    (0..head_dim)
        .map(|j| match j {
            j if j < half => 2 * j,
            j if j < n_rot => 2 * (j - half) + 1,
            j => j,
        })
        .collect()
}

/// The permutation [`half_split_order`] of layer `a`'s q/k rows, if its
/// RoPE pairs adjacent elements.
fn rope_order(a: &Attention) -> Option<Vec<usize>> {
    match &a.rope {
        Some(r) if r.pairing == RopePairing::Norm => Some(half_split_order(a.head_dim, r.n_rot)),
        _ => None,
    }
}

/// Permutes the `cols`-wide rows `rows` (heads of `order.len()` rows) by `order`.
fn permute_rows(m: &mut [f32], rows: Range<usize>, cols: usize, order: &[usize]) {
    let hd = order.len();
    let block = &mut m[rows.start * cols..rows.end * cols];
    for head in block.chunks_exact_mut(hd * cols) {
        let old = head.to_vec();
        for (j, &src) in order.iter().enumerate() {
            head[j * cols..(j + 1) * cols].copy_from_slice(&old[src * cols..(src + 1) * cols]);
        }
    }
}

/// One whole layer on the scaled residual `x`; pushes its cache outputs
/// (none for a layer reading another's K/V). A mixture of experts stops before its routed experts: returns the
/// residual after the mixer and pushes the FFN-normed residual and the
/// shared expert's output for the host.
fn layer(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
    x: &Var,
    sh: &mut Shared,
    outputs: &mut Vec<(Port, Var)>,
) -> Result<Var> {
    let hres = match l.mixer {
        MixerView::Attention(a) => {
            let ctx = attention(e, p, o, (i, l, a), x, sh, outputs)?;
            emit_mixer_residual(e, p, o, (i, l), &ctx, x)?
        }
        MixerView::ShortConv(c) => {
            let y = short_conv(e, p, o, (i, l, c), x, sh, outputs)?;
            emit_mixer_out_residual(e, p, o, (i, l), &y, x)?
        }
    };
    let hn = e.rms_norm(
        &format!("l{i}_ffn_norm"),
        &hres,
        &norm(p, l.ffn_norm)?,
        p.norm.eps,
        o.residual_scale,
    )?;
    let f = emit_ffn(e, p, (i, l), &hn)?;
    if l.ffn.on_host() {
        let (d, w) = (p.n_embd, o.width);
        let port = |v: Var, role| {
            let name = v.name().to_string();
            let shape = vec![1, d, 1, w];
            (Port { name, shape, role }, v)
        };
        outputs.push(port(hn, PortRole::MoeInput { layer: i }));
        outputs.extend(f.map(|f| port(f, PortRole::SharedExpert { layer: i })));
        return Ok(hres);
    }
    let f = f.ok_or_else(|| Error::Options(format!("layer {i}: no FFN")))?;
    let y = emit_ffn_residual(e, p, o, (i, l), &hres, &f)?;
    // Gemma 4: the per-layer input's branch, then the layer scale
    let e_l = match l.per_layer {
        Some(pl) => {
            let role = PortRole::PerLayer { layer: i };
            let shape = [1, pl.width, 1, o.width];
            Some(sh.declare(e, &format!("ple_l{i}"), &shape, role)?)
        }
        None => None,
    };
    emit_layer_end(e, p, o, (i, l), &y, e_l.as_ref())
}

/// Layer `i`'s short convolution on the scaled residual `x`, to its output
/// projection; pushes its cache output. `[B; C; X] = in_proj(norm(x))`,
/// `u = B ⊙ X` into the cache `conv_lI` (`next = cache · keep + u ·
/// write`, as K/V), the `K - 1` positions before the chunk read back out
/// of `next` (`next · prevᵀ`, one non-zero term per element: exact; zero
/// before position 0), then the depthwise conv over `[those; u]` with no
/// padding (column j sees positions p_j − (K−1) ..= p_j), `· C`,
/// `out_proj`. Rows at or past the chunk's first position are never read
/// (only multiplied by the selection's zeros): the chunk's own columns
/// come from `u`.
fn short_conv(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l, c): (usize, &LayerView<'_>, &ShortConv),
    x: &Var,
    sh: &mut Shared,
    outputs: &mut Vec<(Port, Var)>,
) -> Result<Var> {
    let (d, w, t) = (p.n_embd, o.width, o.context);
    let bcx = emit_qkv(e, p, o, (i, l), x, true)?;
    let part = |e: &mut Emitter, name: &str, k: usize| -> Result<Var> {
        Ok(e.b.slice_by_size(
            &format!("l{i}_conv_{name}"),
            &bcx,
            &[0, k * d, 0, 0],
            &[1, d, 1, w],
        )?)
    };
    let b = part(e, "b", 0)?;
    let gate_c = part(e, "c", 1)?;
    let xx = part(e, "x", 2)?;
    let u = e.b.mul(&format!("l{i}_conv_u"), &b, &xx)?;
    let cols = e.b.reshape(&format!("l{i}_conv_u_cols"), &u, &[1, d, w])?;
    let cache = (format!("conv_l{i}"), PortRole::ConvCache { layer: i });
    let next = sh.write_cache(e, outputs, cache, &format!("l{i}_conv"), &cols)?;
    let k1 = c.kernel.saturating_sub(1);
    let window = if k1 == 0 {
        u
    } else {
        let sel = sh.conv_prev(e, i, k1, t)?;
        let prev =
            e.b.matmul(&format!("l{i}_conv_prev_mat"), &next, &sel, false, true)?;
        let prev =
            e.b.reshape(&format!("l{i}_conv_prev"), &prev, &[1, d, 1, k1])?;
        e.b.concat(&format!("l{i}_conv_window"), &[&prev, &u], 3)?
    };
    let wv = conv_weight(e, p, i, c)?;
    let opts = ConvOpts {
        groups: d,
        ..ConvOpts::default()
    };
    let v = e.b.conv_with(&format!("l{i}_conv"), &window, &wv, &opts)?;
    let y = e.b.mul(&format!("l{i}_conv_y"), &gate_c, &v)?;
    emit_conv_proj(e, p, i, c, &y)
}

/// Layer `i`'s attention on the scaled residual `x`, to its context
/// `[1, q_dim, 1, W]`; pushes its cache outputs.
fn attention(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l, a): (usize, &LayerView<'_>, &Attention),
    x: &Var,
    sh: &mut Shared,
    outputs: &mut Vec<(Port, Var)>,
) -> Result<Var> {
    let (d, w, t) = (p.n_embd, o.width, o.context);
    let (hd, nh, nkv) = (a.head_dim, a.n_head, a.n_head_kv);
    let (qd, kvd, g) = (a.q_dim(), a.kv_dim(), nh / nkv.max(1));
    let eps = p.norm.eps;
    let order = rope_order(a);
    let h = e.rms_norm(
        &format!("l{i}_attn_norm"),
        x,
        &norm(p, l.attn_norm)?,
        eps,
        o.residual_scale,
    )?;
    // q only for a layer reading another's K/V
    let (mut wqkv, mut bias) = qkv_weights(p, a)?;
    let rotated = if a.kv_source.is_some() { qd } else { qd + kvd };
    if let Some(ord) = &order {
        permute_rows(&mut wqkv, 0..rotated, d, ord);
        if let Some(b) = bias.as_mut() {
            permute_rows(b, 0..rotated, 1, ord);
        }
    }
    e.block(ProjBlock::Attention(i));
    let qkv = e.projection(
        &format!("l{i}_qkv"),
        &h,
        &wqkv,
        l.mixer.in_width(d),
        bias.as_deref(),
    )?;
    let part =
        |e: &mut Emitter, name: &str, start: usize, len: usize, heads: usize| -> Result<Var> {
            let s = e.b.slice_by_size(
                &format!("l{i}_{name}_flat"),
                &qkv,
                &[0, start, 0, 0],
                &[1, len, 1, w],
            )?;
            Ok(e.b.reshape(&format!("l{i}_{name}"), &s, &[heads, hd, 1, w])?)
        };
    let mut q = part(e, "q", 0, qd, nh)?;
    // this layer's own new K and V (none when it reads another's)
    let mut kv = match a.kv_source {
        Some(_) => None,
        None => Some((
            part(e, "k", qd, kvd, nkv)?,
            part(e, "v", qd + kvd, kvd, nkv)?,
        )),
    };
    let head_gains = |name: &str| -> Result<Vec<f32>> {
        let mut gains = vector(p.weights.as_ref(), name, hd)?;
        gains.iter_mut().for_each(|x| *x += p.norm.weight_offset);
        if let Some(ord) = &order {
            permute_rows(&mut gains, 0..hd, 1, ord);
        }
        Ok(gains)
    };
    if let Some(n) = &a.q_norm {
        q = e.rms_norm(&format!("l{i}_q_norm"), &q, &head_gains(n)?, eps, 1.0)?;
    }
    // (a reader's k_norm and v_norm are its source's, applied there)
    if let Some((k, v)) = kv.as_mut() {
        if let Some(n) = &a.k_norm {
            *k = e.rms_norm(&format!("l{i}_k_norm"), k, &head_gains(n)?, eps, 1.0)?;
        }
        if a.v_norm {
            *v = e.rms_norm(&format!("l{i}_v_norm"), v, &vec![1.0; hd], eps, 1.0)?;
        }
    }
    if let Some(r) = &a.rope {
        let (c, s) = sh.rope(e, i, r)?;
        q = rope(e, &format!("l{i}_q_rope"), &q, (&c, &s), r.n_rot)?;
        if let Some((k, _)) = kv.as_mut() {
            *k = rope(e, &format!("l{i}_k_rope"), k, (&c, &s), r.n_rot)?;
        }
    }
    let scale = e.b.fp16(&format!("l{i}_q_scale_k"), f64::from(a.scale))?;
    let q = e.b.mul(&format!("l{i}_q_scaled"), &q, &scale)?;
    // the cache write: `cache · keep + new · write` (none for a layer
    // reading another's K/V, which attends over that one's after its write)
    let mut caches = Vec::with_capacity(2);
    let own = kv.as_ref().map(|(k, v)| [(false, k), (true, v)]);
    for (value, new) in own.into_iter().flatten() {
        let kv = if value { "v" } else { "k" };
        let cols =
            e.b.reshape(&format!("l{i}_{kv}_cols"), new, &[nkv, hd, w])?;
        let cache = (format!("{kv}_l{i}"), PortRole::Cache { layer: i, value });
        caches.push(sh.write_cache(e, outputs, cache, &format!("l{i}_{kv}"), &cols)?);
    }
    match (a.kv_source, &caches[..]) {
        (Some(j), _) => caches = sh.source_caches(e, j, &[nkv, hd, t])?.to_vec(),
        (None, [k, v]) => sh.caches.push((i, [k.clone(), v.clone()])),
        (None, _) => return Err(Error::Options(format!("layer {i}: no K/V"))),
    }
    // scores [KVH, G·W, T]
    let q4 =
        e.b.reshape(&format!("l{i}_q_groups"), &q, &[nkv, g, hd, w])?;
    let qt = e.b.transpose(&format!("l{i}_q_rows"), &q4, &[0, 1, 3, 2])?;
    let q3 =
        e.b.reshape(&format!("l{i}_q_mat"), &qt, &[nkv, g * w, hd])?;
    let mut s =
        e.b.matmul(&format!("l{i}_scores"), &q3, &caches[0], false, false)?;
    if let Some(cap) = a.softcap {
        let inv =
            e.b.fp16(&format!("l{i}_softcap_inv"), 1.0 / f64::from(cap))?;
        let capv = e.b.fp16(&format!("l{i}_softcap_k"), f64::from(cap))?;
        let sc = e.b.mul(&format!("l{i}_scores_in"), &s, &inv)?;
        let th = e.b.tanh(&format!("l{i}_scores_tanh"), &sc)?;
        s = e.b.mul(&format!("l{i}_scores_capped"), &th, &capv)?;
    }
    let mask = sh.mask(e, i, a.window, t)?;
    let s4 =
        e.b.reshape(&format!("l{i}_scores_g"), &s, &[nkv, g, w, t])?;
    let sm = e.b.add(&format!("l{i}_scores_masked"), &s4, &mask)?;
    let pr = e.b.softmax(&format!("l{i}_probs"), &sm, 3)?;
    let p3 =
        e.b.reshape(&format!("l{i}_probs_mat"), &pr, &[nkv, g * w, t])?;
    let c3 =
        e.b.matmul(&format!("l{i}_ctx_mat"), &p3, &caches[1], false, true)?;
    let c4 = e.b.reshape(&format!("l{i}_ctx_g"), &c3, &[nkv, g, w, hd])?;
    let ct = e.b.transpose(&format!("l{i}_ctx_t"), &c4, &[0, 1, 3, 2])?;
    Ok(e.b.reshape(&format!("l{i}_ctx"), &ct, &[1, qd, 1, w])?)
}

/// Half-split RoPE of `x: [heads, hd, 1, W]` over its first `n_rot`
/// elements: `[x1·c − x2·s; x1·s + x2·c; rest]`.
fn rope(e: &mut Emitter, p: &str, x: &Var, (c, s): (&Var, &Var), n_rot: usize) -> Result<Var> {
    let sh = x.shape().to_vec();
    let (heads, hd, w) = (sh[0], sh[1], sh[3]);
    let half = n_rot / 2;
    let x1 =
        e.b.slice_by_size(&format!("{p}_x1"), x, &[0, 0, 0, 0], &[heads, half, 1, w])?;
    let x2 = e.b.slice_by_size(
        &format!("{p}_x2"),
        x,
        &[0, half, 0, 0],
        &[heads, half, 1, w],
    )?;
    let x1c = e.b.mul(&format!("{p}_x1c"), &x1, c)?;
    let x2s = e.b.mul(&format!("{p}_x2s"), &x2, s)?;
    let x1s = e.b.mul(&format!("{p}_x1s"), &x1, s)?;
    let x2c = e.b.mul(&format!("{p}_x2c"), &x2, c)?;
    let a = e.b.sub(&format!("{p}_a"), &x1c, &x2s)?;
    let b = e.b.add(&format!("{p}_b"), &x1s, &x2c)?;
    let rotated = e.b.concat(&format!("{p}_rot"), &[&a, &b], 1)?;
    if n_rot == hd {
        return Ok(rotated);
    }
    let rest = e.b.slice_by_size(
        &format!("{p}_rest"),
        x,
        &[0, n_rot, 0, 0],
        &[heads, hd - n_rot, 1, w],
    )?;
    Ok(e.b.concat(p, &[&rotated, &rest], 1)?)
}

/// `lm_head`: the final norm and every vocabulary slice of at most
/// `vocab_slice` rows, one output each.
fn lm_head(p: &DecoderProgram, o: &LowerOptions) -> Result<Kernel> {
    let mut e = Emitter::for_options(o);
    let x = e.input(p.n_embd)?;
    let h = e.rms_norm(
        "output_norm",
        &x,
        &norm(p, &p.output_norm)?,
        p.norm.eps,
        o.residual_scale,
    )?;
    let mut slices = Vec::new();
    let mut first = 0;
    while first < p.n_vocab {
        let n = o.vocab_slice.min(p.n_vocab - first);
        let y = emit_logits(&mut e, p, slices.len(), &h, first..first + n)?;
        slices.push((first, n, y));
        first += n;
    }
    let mut slices = slices.into_iter();
    let (_, rows0, y0) = slices
        .next()
        .ok_or_else(|| Error::Options("an empty vocabulary".into()))?;
    let outputs = slices
        .map(|(first, rows, y)| {
            let port = Port {
                name: y.name().to_string(),
                shape: vec![1, rows, 1, o.width],
                role: PortRole::Logits { first, rows },
            };
            (port, y)
        })
        .collect();
    let kind = KernelKind::LmHead {
        first: 0,
        rows: rows0,
        norm_inside: true,
    };
    Ok(finish_ports(
        "lm_head".into(),
        kind,
        e,
        (&y0, p.n_embd),
        (Vec::new(), outputs),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_split_order_pairs_adjacent_elements() {
        // pairs (0,1), (2,3) become (0,2), (1,3); 4 and 5 pass through
        assert_eq!(half_split_order(6, 4), [0, 2, 1, 3, 4, 5]);
        let mut m: Vec<f32> = (0..12).map(|v| v as f32).collect();
        // two heads of 3 rows (n_rot 2 keeps the order), one column
        permute_rows(&mut m, 0..6, 2, &half_split_order(3, 2));
        assert_eq!(m[..6], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let mut m: Vec<f32> = (0..8).map(|v| v as f32).collect();
        permute_rows(&mut m, 0..8, 1, &half_split_order(4, 4));
        assert_eq!(m, [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
    }
}
