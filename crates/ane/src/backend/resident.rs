//! A session of the resident variant: the host embeds, builds each chunk's
//! position inputs and keeps the caches the programs update.
//!
//! Per chunk of ≤ W tokens at positions `pos0..pos0 + n` the host makes
//! the inputs every `blk.*.resident` program shares (`crate::lower::resident`):
//! the one-hot `write` and its `keep`, the cos/sin of each RoPE (the CPU
//! backend's own tables), the mask of each window and, for short
//! convolutions, the one-hot read of the `K - 1` positions before the
//! chunk, all with the chunk's tokens in columns `0..n` (the rest zero,
//! writing nothing). Each program takes the caches its layers hold and
//! returns them updated; on hardware those outputs are aliased onto the
//! inputs (no copy), here the session keeps the returned tensors. A group
//! that ends with a mixture of experts returns the residual after that
//! layer's mixer with its FFN-normed rows and shared expert's output: the
//! host finishes the layer on the chunk's columns as the fused variant's
//! host does (`super::session::finish_moe`: router, routed experts, the
//! shared expert's gate, post-FFN norm, residual add, layer scale) and
//! hands the residual to the next group. Then `lm_head` gives every
//! vocabulary slice.
//!
//! Gemma 4: first the `ple` program and the host make every layer's
//! per-layer input (`Model::per_layer_inputs`, as in the fused variant),
//! which each group takes as its layers' `ple_lI` ports. A layer reading
//! another's K/V keeps no cache: a program whose layer reads a cache an
//! earlier program keeps takes it as an input — here the session passes
//! that layer's tensor as the earlier program returned it; on a runtime
//! the input is bound to the earlier program's buffer when the session's
//! set opens (`PortedSource::bound`).
//!
//! Stale cache rows need no clearing while every value is finite: a query
//! sees only keys at or before its own position (the others are masked to
//! a weight of exactly 0), a short convolution reads only the positions
//! before the chunk (its own columns come from the chunk), and a chunk
//! writes its positions before attending, so rows past the session's
//! position (after a truncation, or a failed forward) are overwritten
//! before anything reads them. A non-finite row would not be: masked keys
//! (and the rows a conv does not read) still pass through the matmuls
//! (0 · inf is NaN), and the simulator refuses an op that makes a NaN, so
//! such a forward fails instead of running on.

use super::model::{mil_err, HostMixer, Model, SimKernel};
use super::session::{finish_moe, run_chunks, Scratch};
use crate::lower::resident::MASKED;
use crate::lower::{KernelKind, Port, PortRole};
use anedvd_cpu::attention::{first_visible, RopeTables};
use anedvd_cpu::kernels::softcap;
use anedvd_graph::dump::Dump;
use anedvd_graph::intermediate as names;
use anedvd_graph::{validate_forward, Attention, Error, LogitsMode, Result, Rope, Session};
use anedvd_mil::sim::Tensor;
use std::path::PathBuf;
use std::sync::Arc;

/// One sequence on resident programs.
pub(crate) struct ResidentSession {
    model: Arc<Model>,
    max_seq: usize,
    pos: usize,
    caches: Caches,
    rope_tables: RopeTables,
    /// The routed experts' scratch.
    scratch: Scratch,
    logits: Vec<f32>,
    dump_dir: Option<PathBuf>,
}

/// Where a session's caches live.
enum Caches {
    /// On the simulator, the session holds them, by role: every cache the
    /// programs write (`[KVH, hd, T]` K and V per attention layer that has
    /// its own, `[1, D, T]` per short convolution), fp16, passed in to every
    /// program that reads it and taken back from the one that writes it.
    Host(Vec<(PortRole, Tensor)>),
    /// On a runtime, in the buffers of the session's own set of programs
    /// (operations instantiated from the programs the worker compiled once
    /// at load: a session compiles nothing), each cache output aliased onto
    /// its input: they never cross. Dropping the session releases the set.
    Resident {
        /// The set's handle on the runtime worker.
        set: u64,
    },
}

impl Drop for ResidentSession {
    fn drop(&mut self) {
        if let (Caches::Resident { set }, Some(w)) = (&self.caches, &self.model.worker) {
            w.close_ported(*set);
        }
    }
}

impl ResidentSession {
    pub fn new(model: Arc<Model>, max_seq: usize) -> Result<Self> {
        let t = model.options.context;
        if max_seq > t {
            return Err(Error::Backend {
                backend: model.exec.backend_name().into(),
                message: format!(
                    "the resident programs hold {t} positions per cache (--ane-context); a \
                     session of {max_seq} does not fit"
                ),
            });
        }
        let caches = match &model.worker {
            // the runtime zeroes every buffer it allocates
            Some(w) => Caches::Resident {
                set: w.open_ported(model.ported.clone())?,
            },
            None => Caches::Host(
                // each cache once: from the program writing it (a layer
                // reading another's K/V takes it as an input only)
                model
                    .kernels
                    .iter()
                    .filter(|k| matches!(k.kind, KernelKind::Resident { .. }))
                    .flat_map(|k| &k.ports.1)
                    .filter(|port| port.role.is_cache())
                    .map(|port| {
                        let zeros = vec![0f32; port.shape.iter().product()];
                        let z = Tensor::f16(&port.shape, &zeros).map_err(mil_err(&port.name))?;
                        Ok((port.role, z))
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        Ok(ResidentSession {
            model,
            max_seq,
            pos: 0,
            caches,
            rope_tables: RopeTables::default(),
            scratch: Scratch::default(),
            logits: Vec::new(),
            dump_dir: None,
        })
    }

    /// Runs one chunk of ≤ W tokens at `pos0`; returns the logits of the
    /// last row (`Some(false)`) or of every row (`Some(true)`).
    fn chunk(
        &mut self,
        tokens: &[u32],
        pos0: usize,
        want: Option<bool>,
        dump: &mut Option<Dump>,
    ) -> Result<Vec<f32>> {
        let m = self.model.clone();
        let (n, d, w, t) = (tokens.len(), m.n_embd, m.options.width, m.options.context);
        let s = m.options.residual_scale;
        let mut x = vec![0f32; d * w];
        let mut rows = vec![0f32; n * d];
        for (j, (&tok, row)) in tokens.iter().zip(rows.chunks_exact_mut(d)).enumerate() {
            m.embed(tok, row)?;
            for (c, v) in row.iter().enumerate() {
                x[c * w + j] = v / s;
            }
        }
        // Gemma 4: every layer's per-layer input, `n × (L · P)`
        let ple = m.per_layer_inputs(tokens, &rows)?;
        if dump.is_some() {
            Dump::put_opt(dump, None, "inp_embd", &rows_of(&x, d, w, n, s), n);
        }
        let positions: Vec<usize> = (pos0..pos0 + n).collect();
        self.rope_tables.new_pass();
        let (mut write, mut keep) = (vec![0f32; w * t], vec![1f32; t]);
        for (j, &p) in positions.iter().enumerate() {
            write[j * t + p] = 1.0;
            keep[p] = 0.0;
        }
        let groups = m
            .kernels
            .iter()
            .filter(|k| matches!(k.kind, KernelKind::Resident { .. }));
        // each distinct RoPE's and window's columns, made once per chunk
        let mut ropes: Vec<(Rope, bool, Vec<f32>)> = Vec::new();
        let mut masks: Vec<(Option<usize>, Vec<f32>)> = Vec::new();
        let mut prevs: Vec<(usize, Vec<f32>)> = Vec::new();
        for (g, k) in groups.enumerate() {
            // every input but the caches, which the programs hold or the
            // host passes below
            let mut inputs: Vec<(&Port, Vec<f32>)> = Vec::new();
            for port in &k.ports.0 {
                let values = match port.role {
                    PortRole::Write => write.clone(),
                    PortRole::Keep => keep.clone(),
                    PortRole::Rope { layer, sin } => {
                        let a = m.attention(layer)?;
                        let Some(r) = &a.rope else {
                            return Err(bad_port(k, &port.name));
                        };
                        match ropes.iter().find(|(x, s, _)| x == r && *s == sin) {
                            Some((_, _, v)) => v.clone(),
                            None => {
                                let v = self.rope_columns(a, &positions, sin, w);
                                ropes.push((r.clone(), sin, v.clone()));
                                v
                            }
                        }
                    }
                    PortRole::Mask { layer } => {
                        let window = m.attention(layer)?.window;
                        match masks.iter().find(|(x, _)| *x == window) {
                            Some((_, v)) => v.clone(),
                            None => {
                                let v = mask(window, &positions, w, t);
                                masks.push((window, v.clone()));
                                v
                            }
                        }
                    }
                    PortRole::ConvPrev { layer } => {
                        let k1 = m.conv_kernel(layer)?.saturating_sub(1);
                        match prevs.iter().find(|(x, _)| *x == k1) {
                            Some((_, v)) => v.clone(),
                            None => {
                                let v = conv_prev(k1, pos0, t);
                                prevs.push((k1, v.clone()));
                                v
                            }
                        }
                    }
                    PortRole::PerLayer { layer } => match (&ple, &m.ple) {
                        (Some(e), Some(h)) => {
                            let (pw, lw) = (h.width, h.width * m.layers.len());
                            let mut cols = vec![0f32; pw * w];
                            for (j, row) in e.chunks_exact(lw).take(n).enumerate() {
                                let e_l = &row[layer * pw..(layer + 1) * pw];
                                for (c, v) in e_l.iter().enumerate() {
                                    cols[c * w + j] = *v;
                                }
                            }
                            cols
                        }
                        _ => return Err(bad_port(k, &port.name)),
                    },
                    PortRole::Cache { .. } | PortRole::ConvCache { .. } => continue,
                    PortRole::Logits { .. }
                    | PortRole::MoeInput { .. }
                    | PortRole::SharedExpert { .. } => return Err(bad_port(k, &port.name)),
                };
                inputs.push((port, values));
            }
            // the outputs the host reads besides the residual: a mixture
            // of experts' FFN-normed rows and shared expert
            let to_host: Vec<&Port> = k.ports.1.iter().filter(|p| for_host(p)).collect();
            let extra;
            (x, extra) = match &mut self.caches {
                Caches::Host(caches) => run_host(&m, k, (&x, d, w), &inputs, caches)?,
                Caches::Resident { set } => {
                    let named = std::iter::once(("x".to_string(), x))
                        .chain(inputs.into_iter().map(|(p, v)| (p.name.clone(), v)))
                        .collect();
                    let names = std::iter::once(k.output.clone())
                        .chain(to_host.iter().map(|p| p.name.clone()))
                        .collect();
                    let mut out = m.run_on_worker((*set, g, k), named, names)?.into_iter();
                    let y = out.next().ok_or_else(|| bad_port(k, "the residual"))?;
                    (y, out.collect())
                }
            };
            if extra.len() != to_host.len() {
                return Err(bad_port(k, "count"));
            }
            self.finish_experts(k, &mut x, to_host.into_iter().zip(extra), n)?;
            if let (KernelKind::Resident { first, layers }, true) = (k.kind, dump.is_some()) {
                // the residual after the group's last layer, unscaled
                let li = Some(first + layers - 1);
                Dump::put_opt(dump, li, names::OUT, &rows_of(&x, d, w, n, s), n);
            }
        }
        let Some(all) = want else {
            return Ok(Vec::new());
        };
        let cols = if all { 0..n } else { n - 1..n };
        let logits = self.logits_of(&x, cols.clone())?;
        Dump::put_opt(dump, None, names::RESULT_OUTPUT, &logits, cols.len());
        Ok(logits)
    }

    /// Finishes the mixture of experts group `k` ended with, if any, on the
    /// chunk's `n` columns of the scaled residual `x` (`[D, W]`) from the
    /// group's outputs for the host, `parts` (`[D, W]` each).
    fn finish_experts<'k>(
        &mut self,
        k: &SimKernel,
        x: &mut [f32],
        parts: impl Iterator<Item = (&'k Port, Vec<f32>)>,
        n: usize,
    ) -> Result<()> {
        let (d, w) = (self.model.n_embd, self.model.options.width);
        let rows = |v: &[f32]| rows_of(v, d, w, n, 1.0);
        let (mut layer, mut h, mut shared) = (None, None, None);
        for (port, v) in parts {
            match port.role {
                PortRole::MoeInput { layer: i } => (layer, h) = (Some(i), Some(rows(&v))),
                PortRole::SharedExpert { .. } => shared = Some(rows(&v)),
                _ => return Err(bad_port(k, &port.name)),
            }
        }
        let (Some(i), Some(h)) = (layer, h) else {
            return Ok(());
        };
        let mut xr = rows(x);
        let m = &self.model;
        finish_moe(m, &mut self.scratch, i, &mut xr, &h, shared.as_deref())?;
        for (j, row) in xr.chunks_exact(d).enumerate() {
            for (c, v) in row.iter().enumerate() {
                x[c * w + j] = *v;
            }
        }
        Ok(())
    }

    /// The cos (or sin) of layer `a`'s RoPE, `[1, n_rot/2, 1, W]`, at the
    /// columns' positions.
    fn rope_columns(
        &mut self,
        a: &Attention,
        positions: &[usize],
        sin: bool,
        w: usize,
    ) -> Vec<f32> {
        let Some(r) = &a.rope else {
            return Vec::new();
        };
        let half = r.n_rot / 2;
        let table = self.rope_tables.get(r, positions);
        let mut out = vec![0f32; half * w];
        for (j, pairs) in table
            .chunks_exact(half.max(1))
            .take(positions.len())
            .enumerate()
        {
            for (i, &(c, s)) in pairs.iter().enumerate() {
                out[i * w + j] = if sin { s } else { c };
            }
        }
        out
    }

    /// Logits of columns `cols` of the scaled residual `x` from `lm_head`.
    fn logits_of(&self, x: &[f32], cols: std::ops::Range<usize>) -> Result<Vec<f32>> {
        let m = &self.model;
        let (d, w, v) = (m.n_embd, m.options.width, m.n_vocab);
        let k = m.find(|k| matches!(k, KernelKind::LmHead { .. }))?;
        let out: Vec<(String, Vec<usize>, Vec<f32>)> = match m.shared_set {
            Some(set) => {
                let names: Vec<String> = std::iter::once(k.output.clone())
                    .chain(k.ports.1.iter().map(|p| p.name.clone()))
                    .collect();
                let got =
                    m.run_on_worker((set, 0, k), vec![("x".into(), x.to_vec())], names.clone())?;
                let shapes = std::iter::once(vec![1, first_rows(k), 1, w])
                    .chain(k.ports.1.iter().map(|p| p.shape.clone()));
                names
                    .into_iter()
                    .zip(shapes)
                    .zip(got)
                    .map(|((n, s), v)| (n, s, v))
                    .collect()
            }
            None => {
                let xt = Tensor::f16(&[1, d, 1, w], x).map_err(mil_err(&k.name))?;
                m.run_ports(k, &[("x", xt)])?
                    .into_iter()
                    .map(|(n, t)| {
                        let v = t.to_f32();
                        (n, t.shape, v)
                    })
                    .collect()
            }
        };
        let first_rows = first_rows(k);
        if out.len() != 1 + k.ports.1.len() {
            return Err(bad_port(k, "count"));
        }
        let mut logits = vec![0f32; cols.len() * v];
        let slices =
            std::iter::once((0, first_rows)).chain(k.ports.1.iter().map(|p| match p.role {
                PortRole::Logits { first, rows } => (first, rows),
                _ => (v, 0),
            }));
        for ((name, shape, part), (first, rows)) in out.iter().zip(slices) {
            if *shape != [1, rows, 1, w] || part.len() != rows * w || first + rows > v {
                return Err(bad_port(k, name));
            }
            for (r, col) in cols.clone().enumerate() {
                for i in 0..rows {
                    logits[r * v + first + i] = part[i * w + col];
                }
            }
        }
        if let Some(cap) = m.final_softcap {
            softcap(&mut logits, cap);
        }
        Ok(logits)
    }
}

/// Rows of the lm_head's first slice.
fn first_rows(k: &SimKernel) -> usize {
    match k.kind {
        KernelKind::LmHead { rows, .. } => rows,
        _ => 0,
    }
}

/// Runs group `k` on the simulator with the host's caches: `x` (`[D, W]`
/// columns) and `inputs`, the caches passed in (a cache an earlier group
/// wrote, as it left it) and replaced by the program's cache outputs.
/// Returns the next residual and the other outputs in port order.
fn run_host(
    m: &Model,
    k: &SimKernel,
    (x, d, w): (&[f32], usize, usize),
    inputs: &[(&Port, Vec<f32>)],
    caches: &mut [(PortRole, Tensor)],
) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
    let f16 = |shape: &[usize], v: &[f32]| Tensor::f16(shape, v).map_err(mil_err(&k.name));
    let mut named = vec![("x", f16(&[1, d, 1, w], x)?)];
    for (port, values) in inputs {
        named.push((port.name.as_str(), f16(&port.shape, values)?));
    }
    for port in k.ports.0.iter().filter(|p| p.role.is_cache()) {
        let (_, cache) = caches
            .iter()
            .find(|(role, _)| *role == port.role)
            .ok_or_else(|| bad_port(k, &port.name))?;
        named.push((port.name.as_str(), cache.clone()));
    }
    let out = m.run_ports(k, &named)?;
    if out.len() != 1 + k.ports.1.len() {
        return Err(bad_port(k, "count"));
    }
    let mut out = out.into_iter();
    let (_, y) = out.next().ok_or_else(|| bad_port(k, "the residual"))?;
    let mut extra = Vec::new();
    for ((name, tensor), port) in out.zip(&k.ports.1) {
        match caches.iter_mut().find(|(role, _)| *role == port.role) {
            _ if name != port.name => return Err(bad_port(k, &name)),
            Some((_, cache)) if port.role.is_cache() => *cache = tensor,
            _ if for_host(port) => extra.push(tensor.to_f32()),
            _ => return Err(bad_port(k, &name)),
        }
    }
    Ok((y.to_f32(), extra))
}

/// Whether the host reads output `p` (besides the residual): a mixture of
/// experts' FFN-normed rows and shared expert output.
fn for_host(p: &Port) -> bool {
    matches!(
        p.role,
        PortRole::MoeInput { .. } | PortRole::SharedExpert { .. }
    )
}

/// Rows `0..n` of the `[D, W]` columns `x`, times `s`.
fn rows_of(x: &[f32], d: usize, w: usize, n: usize, s: f32) -> Vec<f32> {
    (0..n)
        .flat_map(|j| (0..d).map(move |c| x[c * w + j] * s))
        .collect()
}

/// `[1, 1, W, T]`: 0 where column j sees key t (causal, within `window`),
/// [`MASKED`] elsewhere; columns past the chunk see everything (their
/// results are dropped, and an all-masked row would be a uniform one).
fn mask(window: Option<usize>, positions: &[usize], w: usize, t: usize) -> Vec<f32> {
    let mut out = vec![0f32; w * t];
    for (j, &p) in positions.iter().enumerate() {
        let row = &mut out[j * t..(j + 1) * t];
        let seen = first_visible(p, window)..=p;
        for (key, v) in row.iter_mut().enumerate() {
            if !seen.contains(&key) {
                *v = MASKED;
            }
        }
    }
    out
}

/// `[1, K - 1, T]` (`k1 = K - 1`): 1 at (k, p₀ − k1 + k) where that
/// position is ≥ 0, the `K - 1` positions before the chunk's first `pos0`.
fn conv_prev(k1: usize, pos0: usize, t: usize) -> Vec<f32> {
    let mut out = vec![0f32; k1 * t];
    for k in 0..k1 {
        if let Some(p) = (pos0 + k).checked_sub(k1) {
            out[k * t + p] = 1.0;
        }
    }
    out
}

fn bad_port(k: &SimKernel, port: &str) -> Error {
    super::Error::Output {
        kernel: k.name.clone(),
        msg: format!("unexpected or missing port {port}"),
    }
    .into()
}

impl Session for ResidentSession {
    fn forward(&mut self, tokens: &[u32], mode: LogitsMode) -> Result<&[f32]> {
        let n_vocab = self.model.n_vocab;
        if !validate_forward(tokens, mode, self.pos, self.max_seq, n_vocab)? {
            return Ok(&[]);
        }
        let start = self.pos;
        let (w, dump_dir) = (self.model.options.width, self.dump_dir.take());
        let run = run_chunks(
            tokens,
            mode,
            (w, start),
            dump_dir,
            |part, pos0, want, dump| self.chunk(part, pos0, want, dump),
        );
        let logits = match run {
            Ok(l) => l,
            Err(e) => {
                // rows written past `start` are never read (module docs)
                self.pos = start;
                return Err(e);
            }
        };
        self.pos = start + tokens.len();
        self.logits = logits;
        Ok(&self.logits)
    }

    fn position(&self) -> usize {
        self.pos
    }

    fn truncate(&mut self, n: usize) {
        self.pos = self.pos.min(n);
    }

    fn max_seq(&self) -> usize {
        self.max_seq
    }

    /// Dumps the embeddings, each program's output residual (as its last
    /// layer's `l_out`) and the logits: what lies between stays inside
    /// the programs.
    fn set_dump(&mut self, dir: Option<PathBuf>) {
        self.dump_dir = dir;
    }
}

impl Model {
    /// Layer `i`'s attention.
    pub fn attention(&self, i: usize) -> Result<&Attention> {
        match self.layers.get(i).map(|l| &l.mixer) {
            Some(HostMixer::Attention(a)) => Ok(a),
            _ => Err(Error::InvalidProgram(format!("layer {i} has no attention"))),
        }
    }

    /// Layer `i`'s short-convolution taps `K`.
    pub fn conv_kernel(&self, i: usize) -> Result<usize> {
        match self.layers.get(i).map(|l| &l.mixer) {
            Some(HostMixer::ShortConv { kernel, .. }) => Ok(*kernel),
            _ => Err(Error::InvalidProgram(format!(
                "layer {i} has no short convolution"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_prev_selects_the_positions_before_the_chunk() {
        let ones = |v: &[f32], t: usize| -> Vec<(usize, usize)> {
            (v.iter().enumerate())
                .filter(|(_, x)| **x == 1.0)
                .map(|(i, _)| (i / t, i % t))
                .collect()
        };
        // a first chunk reads nothing: the causal zero padding
        assert!(ones(&conv_prev(2, 0, 8), 8).is_empty());
        // position 1: tap 0 would be position -1
        assert_eq!(ones(&conv_prev(2, 1, 8), 8), [(1, 0)]);
        assert_eq!(ones(&conv_prev(2, 5, 8), 8), [(0, 3), (1, 4)]);
        assert_eq!(ones(&conv_prev(3, 8, 16), 16), [(0, 5), (1, 6), (2, 7)]);
        assert!(conv_prev(0, 5, 8).is_empty());
    }
}
