//! A session: chunks tokens by W, runs the CPU half and dispatches the kernels.

use super::model::{HostMixer, HostMoe, Model};
use crate::lower::{KernelKind, Variant};
use anedvd_cpu::attention::{attend, cache_window, encode_positions, KvCache, RopeTables};
use anedvd_cpu::conv::ConvHistory;
use anedvd_cpu::kernels::{add, axpy, rms_norm, rms_norm_inplace, softcap};
use anedvd_cpu::moe::MoeBuffers;
use anedvd_cpu::state::{LayerCache, SeqState};
use anedvd_cpu::Acts;
use anedvd_graph::dump::Dump;
use anedvd_graph::intermediate as names;
use anedvd_graph::{validate_forward, LogitsMode, Result, Session};
use std::path::PathBuf;
use std::sync::Arc;

/// One sequence's host state: its position and per-layer caches (KV, or
/// convolution history, with the CPU backend's truncation and snapshot
/// rules) and the RoPE tables of the rows it runs in a pass.
pub(crate) struct SeqHost {
    pub(crate) seq: SeqState,
    rope_tables: RopeTables,
    /// Positions of this sequence's rows in the pass (its RoPE tables' rows).
    positions: Vec<usize>,
}

impl SeqHost {
    pub(crate) fn new(model: &Model) -> Self {
        let attns: Vec<_> = model
            .layers
            .iter()
            .map(|l| match &l.mixer {
                HostMixer::Attention(a) => Some(a),
                HostMixer::ShortConv { .. } => None,
            })
            .collect();
        let caches = model
            .layers
            .iter()
            .enumerate()
            .map(|(il, l)| match &l.mixer {
                // a layer reading another's K/V keeps none (zero heads)
                HostMixer::Attention(a) if a.kv_source.is_some() => {
                    LayerCache::Kv(KvCache::new(0, a.head_dim))
                }
                HostMixer::Attention(a) => LayerCache::Kv(KvCache::windowed(
                    a.n_head_kv,
                    a.head_dim,
                    cache_window(&attns, il),
                )),
                HostMixer::ShortConv { kernel, .. } => {
                    LayerCache::Conv(ConvHistory::new(*kernel, model.n_embd))
                }
            })
            .collect();
        SeqHost {
            seq: SeqState::from_layers(caches),
            rope_tables: RopeTables::default(),
            positions: Vec::new(),
        }
    }
}

/// Host scratch the sequences of a pass share (the routed experts').
#[derive(Default)]
pub(crate) struct Scratch {
    acts: Acts,
    moe: MoeBuffers,
}

/// One sequence's rows in a pass: `tokens` at `pos0`; `want` as
/// [`run_rows`] takes it.
pub(crate) struct Segment<'a> {
    pub host: &'a mut SeqHost,
    pub tokens: &'a [u32],
    pub pos0: usize,
    /// `None`: no logits; `Some(false)`: its last row's; `Some(true)`: every row's.
    pub want: Option<bool>,
}

/// One sequence on the ane-sim backend.
pub(crate) struct AneSession {
    model: Arc<Model>,
    max_seq: usize,
    host: SeqHost,
    scratch: Scratch,
    dump_dir: Option<PathBuf>,
    logits: Vec<f32>,
}

fn norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    rms_norm(x, w, eps, &mut out);
    out
}

/// A forward call's chunks of ≤ W tokens (`(W, first position)`), each run
/// by `chunk(tokens, pos0, wanted logits, dump)`, into the logits `mode`
/// asks for; dumps go to `dump_dir` if set. The caller rolls back on error.
pub(crate) fn run_chunks(
    tokens: &[u32],
    mode: LogitsMode,
    (w, start): (usize, usize),
    dump_dir: Option<PathBuf>,
    mut chunk: impl FnMut(&[u32], usize, Option<bool>, &mut Option<Dump>) -> Result<Vec<f32>>,
) -> Result<Vec<f32>> {
    let mut dump = dump_dir.map(Dump::new).transpose()?;
    let n_chunks = tokens.len().div_ceil(w.max(1));
    let mut logits = Vec::new();
    for (ci, part) in tokens.chunks(w.max(1)).enumerate() {
        let want = chunk_logits(mode, ci + 1 == n_chunks);
        logits.extend(chunk(part, start + ci * w, want, &mut dump)?);
    }
    if let Some(d) = dump {
        d.finish()?;
    }
    Ok(logits)
}

/// Which logits a chunk of a forward call in `mode` returns (`last`: it
/// is the call's last chunk): none, its last row's, or every row's.
pub(crate) fn chunk_logits(mode: LogitsMode, last: bool) -> Option<bool> {
    match mode {
        LogitsMode::None => None,
        LogitsMode::Last => last.then_some(false),
        LogitsMode::All => Some(true),
    }
}

/// The refusal of a resident lowering here: it has its own session
/// (`super::resident`), which the executable picks.
fn resident_elsewhere() -> anedvd_graph::Error {
    anedvd_graph::Error::InvalidProgram("resident programs run in their own session".into())
}

impl AneSession {
    pub fn new(model: Arc<Model>, max_seq: usize) -> Self {
        AneSession {
            host: SeqHost::new(&model),
            model,
            max_seq,
            scratch: Scratch::default(),
            dump_dir: None,
            logits: Vec::new(),
        }
    }
}

/// Rows `r` of `n`-row data `v` (`v.len() / n` values per row).
fn rows(v: &[f32], n: usize, r: std::ops::Range<usize>) -> &[f32] {
    let w = v.len() / n.max(1);
    &v[r.start * w..r.end * w]
}

/// `n` rows holding each part at its span's rows, zeros elsewhere; an
/// error if the parts are not one width.
fn at_rows(spans: &[std::ops::Range<usize>], parts: Vec<Vec<f32>>, n: usize) -> Result<Vec<f32>> {
    let width = spans
        .iter()
        .zip(&parts)
        .find(|(s, _)| !s.is_empty())
        .map_or(0, |(s, p)| p.len() / s.len());
    if spans.len() != parts.len()
        || spans
            .iter()
            .zip(&parts)
            .any(|(s, p)| p.len() != s.len() * width)
    {
        let what = "the host's rows of a pass differ in width".to_string();
        return Err(anedvd_graph::Error::InvalidProgram(what));
    }
    if spans.len() == 1 && spans[0].len() == n {
        return Ok(parts.into_iter().next().unwrap_or_default());
    }
    let mut out = vec![0f32; n * width];
    for (span, part) in spans.iter().zip(parts) {
        out[span.start * width..span.end * width].copy_from_slice(&part);
    }
    Ok(out)
}

/// Runs the rows of every segment (together ≤ W) through every kernel once:
/// the ANE programs take all rows as columns, the host's part (attention,
/// a short convolution's history, routed experts) runs per segment on its
/// own sequence. Returns the wanted logits rows, segment by segment.
///
/// Each column is computed from its own data only — but for a short
/// convolution's taps over the previous columns, which is why segments lie
/// [`Model::segment_gap`] zero rows apart, the zero left padding a
/// segment sees alone — so a sequence's rows come out the same, bit for
/// bit, whatever else shares the pass.
pub(crate) fn run_rows(
    m: &Model,
    segs: &mut [Segment<'_>],
    scratch: &mut Scratch,
    dump: &mut Option<Dump>,
) -> Result<Vec<f32>> {
    // each segment's rows, `m.segment_gap()` zero rows apart
    let gap = m.segment_gap();
    let mut spans = Vec::with_capacity(segs.len());
    let mut tokens = Vec::new();
    for s in segs.iter_mut() {
        if !tokens.is_empty() {
            // gap rows hold token 0; their results are dropped
            tokens.resize(tokens.len() + gap, 0);
        }
        spans.push(tokens.len()..tokens.len() + s.tokens.len());
        tokens.extend_from_slice(s.tokens);
        // every layer of the pass sees the same positions: RoPE tables once
        s.host.positions.clear();
        s.host.positions.extend(s.pos0..s.pos0 + s.tokens.len());
        s.host.rope_tables.new_pass();
    }
    let (n, d) = (tokens.len(), m.n_embd);
    let mut x = vec![0f32; n * d];
    for span in &spans {
        for t in span.clone() {
            m.embed(tokens[t], &mut x[t * d..(t + 1) * d])?;
        }
    }
    Dump::put_opt(dump, None, "inp_embd", &x, n);
    let ple = m.per_layer_inputs(&tokens, &x)?;
    // layer `i`'s slice of row `t`
    let e_l = |i: usize, t: usize| -> &[f32] {
        match (&ple, &m.ple) {
            (Some(e), Some(h)) => {
                let lw = h.width * m.layers.len();
                &e[t * lw + i * h.width..t * lw + (i + 1) * h.width]
            }
            _ => &[],
        }
    };
    // the host's mixer of layer `i` on every segment's rows of `qkv`
    let mix = |segs: &mut [Segment<'_>], i: usize, qkv: &[f32], dump: &mut Option<Dump>| {
        let parts: Vec<Vec<f32>> = segs
            .iter_mut()
            .zip(&spans)
            .map(|(s, span)| {
                let part = rows(qkv, n, span.clone());
                host_mix(m, s.host, i, part, s.pos0, span.len(), dump)
            })
            .collect();
        at_rows(&spans, parts, n)
    };
    // the routed experts of `moe` on every segment's rows of `h`
    let experts = |scratch: &mut Scratch,
                   moe: &HostMoe,
                   h: &[f32],
                   shared: Option<&[f32]>|
     -> Result<Vec<f32>> {
        let mut parts = Vec::with_capacity(spans.len());
        for span in &spans {
            let (hs, sh) = (
                rows(h, n, span.clone()),
                shared.map(|y| rows(y, n, span.clone())),
            );
            parts.push(host_ffn(m, scratch, moe, hs, sh, span.len())?);
        }
        at_rows(&spans, parts, n)
    };
    match m.options.variant {
        Variant::Resident => return Err(resident_elsewhere()),
        Variant::Split => {
            for (i, l) in m.layers.iter().enumerate() {
                let li = Some(i);
                let h = norm(&x, &l.norms.attn, m.eps);
                Dump::put_opt(dump, li, names::ATTN_NORM, &h, n);
                let qkv = m.dispatch(m.find(|k| *k == KernelKind::Qkv { layer: i })?, &h, n)?;
                let att = mix(segs, i, &qkv, dump)?;
                let mut o =
                    m.dispatch(m.find(|k| *k == KernelKind::AttnOut { layer: i })?, &att, n)?;
                if let Some(w) = &l.norms.post_attn {
                    o = norm(&o, w, m.eps);
                }
                Dump::put_opt(dump, li, names::ATTN_OUT, &o, n);
                add(&mut x, &o);
                Dump::put_opt(dump, li, names::FFN_INP, &x, n);
                let h = norm(&x, &l.norms.ffn, m.eps);
                Dump::put_opt(dump, li, names::FFN_NORM, &h, n);
                let on_ane = m
                    .kernels
                    .iter()
                    .find(|k| k.kind == KernelKind::Ffn { layer: i });
                let ane = on_ane.map(|k| m.dispatch(k, &h, n)).transpose()?;
                let mut f = match (&l.moe, ane) {
                    (Some(moe), shared) => experts(scratch, moe, &h, shared.as_deref())?,
                    (None, Some(f)) => f,
                    (None, None) => {
                        let what = format!("layer {i} has no FFN kernel");
                        return Err(anedvd_graph::Error::InvalidProgram(what));
                    }
                };
                if let Some(w) = &l.norms.post_ffn {
                    f = norm(&f, w, m.eps);
                }
                Dump::put_opt(dump, li, names::FFN_OUT, &f, n);
                add(&mut x, &f);
                if let Some((_, post)) = &l.per_layer {
                    // the residual crosses as x / s (fp16 range)
                    let s = m.options.residual_scale;
                    let mut packed = Vec::new();
                    for t in 0..n {
                        packed.extend(x[t * d..(t + 1) * d].iter().map(|v| v / s));
                        packed.extend_from_slice(e_l(i, t));
                    }
                    let k = m.find(|k| *k == KernelKind::PerLayer { layer: i })?;
                    let v = norm(&m.dispatch(k, &packed, n)?, post, m.eps);
                    add(&mut x, &v);
                }
                if let Some(s) = l.scale {
                    x.iter_mut().for_each(|v| *v *= s);
                }
                Dump::put_opt(dump, li, names::OUT, &x, n);
            }
        }
        Variant::Fused => {
            // the residual crosses the ANE as x / s
            let s = m.options.residual_scale;
            x.iter_mut().for_each(|v| *v /= s);
            let entry = |layer| m.find(move |k| *k == KernelKind::Entry { layer });
            let mut qkv = m.dispatch(entry(0)?, &x, n)?;
            for i in 0..m.layers.len() {
                let att = mix(segs, i, &qkv, dump)?;
                let k = m.find(|k| matches!(k, KernelKind::Layer { layer, .. } if *layer == i))?;
                let mut packed = Vec::with_capacity(k.in_channels * n);
                let qd = att.len() / n.max(1);
                for t in 0..n {
                    packed.extend_from_slice(&att[t * qd..(t + 1) * qd]);
                    packed.extend_from_slice(&x[t * d..(t + 1) * d]);
                    packed.extend_from_slice(e_l(i, t));
                }
                let out = m.dispatch(k, &packed, n)?;
                let w = k.out_channels;
                qkv.clear();
                for t in 0..n {
                    x[t * d..(t + 1) * d].copy_from_slice(&out[t * w..t * w + d]);
                    qkv.extend_from_slice(&out[t * w + d..(t + 1) * w]);
                }
                if m.layers[i].moe.is_some() {
                    // `qkv` holds `[normed; shared expert?]`: the host
                    // finishes the FFN and the residual of each segment's
                    // rows, then the next layer starts from its entry
                    // program.
                    let rest = w - d;
                    let (mut hn, mut shared) = (Vec::with_capacity(n * d), Vec::new());
                    for row in qkv.chunks_exact(rest) {
                        hn.extend_from_slice(&row[..d]);
                        shared.extend_from_slice(&row[d..]);
                    }
                    let shared = (rest > d).then_some(&shared[..]);
                    for span in &spans {
                        let xs = &mut x[span.start * d..span.end * d];
                        let (hs, sh) = (
                            rows(&hn, n, span.clone()),
                            shared.map(|y| rows(y, n, span.clone())),
                        );
                        finish_moe(m, scratch, i, xs, hs, sh)?;
                    }
                    qkv.clear();
                    if i + 1 < m.layers.len() {
                        qkv = m.dispatch(entry(i + 1)?, &x, n)?;
                    }
                }
                if dump.is_some() {
                    let unscaled: Vec<f32> = x.iter().map(|v| v * s).collect();
                    Dump::put_opt(dump, Some(i), names::OUT, &unscaled, n);
                }
            }
        }
    }
    // the wanted rows, segment by segment
    let wanted: Vec<usize> = segs
        .iter()
        .zip(&spans)
        .flat_map(|(s, span)| match s.want {
            None => 0..0,
            Some(false) => span.end - 1..span.end,
            Some(true) => span.clone(),
        })
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let picked: Vec<f32> = wanted
        .iter()
        .flat_map(|&t| x[t * d..(t + 1) * d].iter().copied())
        .collect();
    let rows = wanted.len();
    let h = match m.options.variant {
        Variant::Split => {
            let h = norm(&picked, &m.output_norm, m.eps);
            Dump::put_opt(dump, None, names::RESULT_NORM, &h, rows);
            h
        }
        Variant::Fused => picked,
        Variant::Resident => return Err(resident_elsewhere()),
    };
    let mut logits = vec![0f32; rows * m.n_vocab];
    for (k, off) in m.lm_heads() {
        let part = m.dispatch(k, &h, rows)?;
        let w = k.out_channels;
        for t in 0..rows {
            logits[t * m.n_vocab + off..t * m.n_vocab + off + w]
                .copy_from_slice(&part[t * w..(t + 1) * w]);
        }
    }
    if let Some(cap) = m.final_softcap {
        softcap(&mut logits, cap);
    }
    Dump::put_opt(dump, None, names::RESULT_OUTPUT, &logits, rows);
    Ok(logits)
}

/// Finishes mixture-of-experts layer `i` on rows of one sequence, where
/// an ANE program (fused or resident) stopped: `x` holds the rows of the
/// residual after the mixer (scaled: `x / s`), `h` their FFN-normed rows
/// and `shared` the shared expert's output, if any. Runs the router and
/// the routed experts, gates the shared expert ([`host_ffn`]), applies the
/// post-FFN norm, adds the result to `x` (`/ s`) and applies the layer's
/// scale, if any.
pub(crate) fn finish_moe(
    m: &Model,
    scratch: &mut Scratch,
    i: usize,
    x: &mut [f32],
    h: &[f32],
    shared: Option<&[f32]>,
) -> Result<()> {
    let l = &m.layers[i];
    let Some(moe) = &l.moe else {
        let what = format!("layer {i} is no mixture of experts");
        return Err(anedvd_graph::Error::InvalidProgram(what));
    };
    let n = x.len() / m.n_embd.max(1);
    let mut f = host_ffn(m, scratch, moe, h, shared, n)?;
    if let Some(g) = &l.norms.post_ffn {
        f = norm(&f, g, m.eps);
    }
    let s = m.options.residual_scale;
    x.iter_mut().zip(&f).for_each(|(r, f)| *r += f / s);
    if let Some(k) = l.scale {
        x.iter_mut().for_each(|v| *v *= k);
    }
    Ok(())
}

/// A mixture of experts on `n` normed rows `h`: the routed experts here,
/// plus the shared expert's ANE output gated by `sigmoid(gate_inp · h)`.
fn host_ffn(
    m: &Model,
    scratch: &mut Scratch,
    moe: &HostMoe,
    h: &[f32],
    shared: Option<&[f32]>,
    n: usize,
) -> Result<Vec<f32>> {
    let d = m.n_embd;
    let mut out = vec![0f32; n * d];
    let src = m.source.as_ref();
    moe.routed
        .run(src, h, n, &mut scratch.acts, &mut scratch.moe, &mut out)?;
    if let (Some(s), Some(y)) = (&moe.shared, shared) {
        for ((o, hr), yr) in out
            .chunks_exact_mut(d)
            .zip(h.chunks_exact(d))
            .zip(y.chunks_exact(d))
        {
            axpy(o, s.scale(hr), yr);
        }
    }
    Ok(out)
}

/// The host half of layer `i` on one sequence, from its input projection's
/// rows to what its output side takes: for attention q/k norm, RoPE, KV
/// cache and attention (the context); for a short convolution `u = B·X`
/// into the layer's history and `[u; C; carry]` (the CPU backend's ops).
fn host_mix(
    m: &Model,
    host: &mut SeqHost,
    i: usize,
    qkv: &[f32],
    pos0: usize,
    n: usize,
    dump: &mut Option<Dump>,
) -> Vec<f32> {
    let l = &m.layers[i];
    let li = Some(i);
    let attn = match (&l.mixer, &mut host.seq.layers[i]) {
        (HostMixer::Attention(a), LayerCache::Kv(_)) if a.kv_source.is_some() => {
            return attend_shared(m, host, i, a, qkv, pos0, n, dump);
        }
        (HostMixer::Attention(a), LayerCache::Kv(kv)) => (a, kv),
        (HostMixer::ShortConv { taps, .. }, LayerCache::Conv(hist)) => {
            let d = m.n_embd;
            Dump::put_opt(dump, li, names::CONV_IN, qkv, n);
            let mut u = Vec::with_capacity(n * d);
            for row in qkv.chunks_exact(3 * d).take(n) {
                u.extend(row[..d].iter().zip(&row[2 * d..]).map(|(b, x)| b * x));
            }
            let mut carry = vec![0f32; n * d];
            hist.carry(taps, &mut carry);
            hist.push(&u);
            let mut packed = Vec::with_capacity(n * 3 * d);
            for t in 0..n {
                packed.extend_from_slice(&u[t * d..(t + 1) * d]);
                packed.extend_from_slice(&qkv[t * 3 * d + d..t * 3 * d + 2 * d]);
                packed.extend_from_slice(&carry[t * d..(t + 1) * d]);
            }
            return packed;
        }
        // The caches were made from the same layers.
        _ => return Vec::new(),
    };
    let (a, kv) = attn;
    let (qd, kvd) = (a.q_dim(), a.kv_dim());
    let mut q = Vec::with_capacity(n * qd);
    let mut k = Vec::with_capacity(n * kvd);
    let mut v = Vec::with_capacity(n * kvd);
    for row in qkv.chunks_exact(qd + 2 * kvd).take(n) {
        q.extend_from_slice(&row[..qd]);
        k.extend_from_slice(&row[qd..qd + kvd]);
        v.extend_from_slice(&row[qd + kvd..]);
    }
    if a.v_norm {
        rms_norm_inplace(&mut v, &vec![1.0; a.head_dim], m.eps);
    }
    Dump::put_opt(dump, li, names::Q, &q, n);
    Dump::put_opt(dump, li, names::K, &k, n);
    Dump::put_opt(dump, li, names::V, &v, n);
    encode_positions(
        a,
        l.norms.qk(),
        m.eps,
        &mut q,
        &mut k,
        &mut host.rope_tables,
        &host.positions,
    );
    Dump::put_opt(dump, li, names::Q_ROPE, &q, n);
    Dump::put_opt(dump, li, names::K_ROPE, &k, n);
    kv.store(pos0, &k, &v, n);
    let mut ctx = vec![0f32; n * qd];
    attend(&m.host, a, kv, &q, pos0, n, &mut ctx, &mut Vec::new());
    Dump::put_opt(dump, li, names::KQV_OUT, &ctx, n);
    ctx
}

/// Attention of layer `i`, which reads the K/V cached by layer
/// `a.kv_source` (already normed and rotated): its queries `q` (the whole
/// input projection) get their norm and RoPE, and attend.
#[allow(clippy::too_many_arguments)]
fn attend_shared(
    m: &Model,
    host: &mut SeqHost,
    i: usize,
    a: &anedvd_graph::Attention,
    q: &[f32],
    pos0: usize,
    n: usize,
    dump: &mut Option<Dump>,
) -> Vec<f32> {
    let (li, qd) = (Some(i), a.q_dim());
    let mut q = q[..n * qd].to_vec();
    Dump::put_opt(dump, li, names::Q, &q, n);
    let norms = m.layers[i].norms.qk();
    let tables = &mut host.rope_tables;
    encode_positions(a, norms, m.eps, &mut q, &mut [], tables, &host.positions);
    Dump::put_opt(dump, li, names::Q_ROPE, &q, n);
    let mut ctx = vec![0f32; n * qd];
    let src = a.kv_source.unwrap_or(i);
    if let LayerCache::Kv(kv) = &host.seq.layers[src] {
        attend(&m.host, a, kv, &q, pos0, n, &mut ctx, &mut Vec::new());
    }
    Dump::put_opt(dump, li, names::KQV_OUT, &ctx, n);
    ctx
}

impl Session for AneSession {
    fn forward(&mut self, tokens: &[u32], mode: LogitsMode) -> Result<&[f32]> {
        let n_vocab = self.model.n_vocab;
        if !validate_forward(tokens, mode, self.host.seq.pos, self.max_seq, n_vocab)? {
            return Ok(&[]);
        }
        self.host.seq.begin_forward(tokens.len());
        let start = self.host.seq.pos;
        let (model, dump_dir) = (self.model.clone(), self.dump_dir.take());
        let (host, scratch) = (&mut self.host, &mut self.scratch);
        let run = run_chunks(
            tokens,
            mode,
            (model.options.width, start),
            dump_dir,
            |part, pos0, want, dump| {
                let mut seg = [Segment {
                    host: &mut *host,
                    tokens: part,
                    pos0,
                    want,
                }];
                run_rows(&model, &mut seg, scratch, dump)
            },
        );
        let logits = match run {
            Ok(l) => l,
            Err(e) => {
                // nothing is appended on failure
                self.truncate(start);
                return Err(e);
            }
        };
        self.host.seq.end_forward(tokens.len());
        self.logits = logits;
        Ok(&self.logits)
    }

    fn position(&self) -> usize {
        self.host.seq.pos
    }

    fn truncate(&mut self, n: usize) {
        self.host.seq.truncate(n);
    }

    fn reusable(&self, n: usize) -> usize {
        self.host.seq.reusable(n)
    }

    fn cache_bytes(&self) -> usize {
        self.host.seq.kv_bytes()
    }

    fn max_seq(&self) -> usize {
        self.max_seq
    }

    fn set_dump(&mut self, dir: Option<PathBuf>) {
        self.dump_dir = dir;
    }
}
