//! One forward pass over a batch of rows that may belong to several
//! sequences: the matrix products run once over every row, while RoPE, the
//! KV store and attention run per sequence segment against its own cache.

use crate::attention::{attend, cache_window, encode_positions, KvCache, RopeTables};
use crate::compiled::{AttnLayer, FfnScratch, LayerFfn, LayerMixer, Model, PerLayerTables};
use crate::conv::ConvHistory;
use crate::kernels::{add, gated, rms_norm, rms_norm_inplace, softcap};
use crate::matmul::{matmul_group, Acts};
use crate::moe::MoeBuffers;
use crate::norms::finish_per_layer_inputs;
pub use crate::state::{LayerCache, SeqState};
use anedvd_graph::dump::Dump;
use anedvd_graph::intermediate as names;
use anedvd_graph::Result;
use rayon::prelude::*;

/// An empty sequence for `model`: a KV cache per attention layer, a
/// convolution history per short-conv layer.
pub fn new_state(model: &Model) -> SeqState {
    let attns: Vec<_> = model
        .layers
        .iter()
        .map(|l| match &l.mixer {
            LayerMixer::Attention(a) => Some(&a.attn),
            LayerMixer::ShortConv(_) => None,
        })
        .collect();
    SeqState::from_layers(
        model
            .layers
            .iter()
            .enumerate()
            .map(|(il, l)| match &l.mixer {
                // A layer reading another's cache keeps none (zero heads).
                LayerMixer::Attention(a) => match a.kv {
                    Some(_) => LayerCache::Kv(
                        KvCache::windowed(
                            a.attn.n_head_kv,
                            a.attn.head_dim,
                            cache_window(&attns, il).filter(|_| !model.swa_full),
                        )
                        .of_kind(model.kv_type),
                    ),
                    None => LayerCache::Kv(KvCache::new(0, a.attn.head_dim)),
                },
                LayerMixer::ShortConv(c) => {
                    LayerCache::Conv(ConvHistory::new(c.kernel, model.n_embd))
                }
            })
            .collect(),
    )
}

/// Consecutive rows of a pass that continue one sequence.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// Index into the pass's sequence states.
    pub seq: usize,
    /// Its tokens, at positions `pos0..`.
    pub tokens: &'a [u32],
    /// Position of the first token.
    pub pos0: usize,
}

/// Scratch reused across passes (sized by the largest pass seen).
#[derive(Default)]
pub struct Buffers {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    parts: Vec<Vec<f32>>,
    o: Vec<f32>,
    ffn: FfnScratch,
    tmp: Vec<f32>,
    tmp2: Vec<f32>,
    tmp3: Vec<f32>,
    sel: Vec<f32>,
    rope_tables: RopeTables,
    row_pos: Vec<usize>,
    acts: Acts,
    moe: MoeBuffers,
    /// Per-layer input embeddings of every row, `n_layer · width` each.
    ple: Vec<f32>,
}

fn add_bias(x: &mut [f32], bias: Option<&Vec<f32>>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            add(row, b);
        }
    }
}

/// What [`run`] writes for the rows it is asked for.
pub enum RowOutput<'a> {
    /// Logits, `n_vocab` per row.
    Logits(&'a mut [f32]),
    /// Final hidden states, `n_embd` per row (embeddings).
    Hidden(&'a mut [f32]),
}

/// Runs the rows of `segs` (concatenated in order) through the model, storing
/// each segment's keys and values in `seqs[seg.seq]` at `seg.pos0..` (the
/// caller advances positions). Writes the logits of the batch rows listed in
/// `logit_rows` (ascending) into `out`: one `n_vocab` row each, or for
/// [`RowOutput::Hidden`] their final hidden states (after the output norm),
/// one `n_embd` row each. Must run inside the backend's thread pool.
pub fn run(
    m: &Model,
    bufs: &mut Buffers,
    seqs: &mut [SeqState],
    segs: &[Segment<'_>],
    logit_rows: &[usize],
    out: RowOutput<'_>,
    dump: &mut Option<Dump>,
) -> Result<()> {
    let src = m.weights.as_ref();
    let n: usize = segs.iter().map(|s| s.tokens.len()).sum();
    let d = m.n_embd;
    let Buffers {
        x,
        h,
        q,
        k,
        v,
        att,
        parts,
        o,
        ffn,
        tmp,
        tmp2,
        tmp3,
        sel,
        rope_tables,
        row_pos,
        acts,
        moe,
        ple,
    } = bufs;
    x.resize(n * d, 0.0);
    row_pos.clear();
    for seg in segs {
        row_pos.extend((0..seg.tokens.len()).map(|t| seg.pos0 + t));
    }
    let tokens = segs.iter().flat_map(|s| s.tokens.iter());
    for (row, &tok) in x.chunks_exact_mut(d).zip(tokens) {
        m.token_embd.row(src, tok as usize, row)?;
        if m.embd_scale != 1.0 {
            row.iter_mut().for_each(|v| *v *= m.embd_scale);
        }
    }
    Dump::put_opt(dump, None, "inp_embd", x, n);
    if let Some(t) = &m.per_layer {
        per_layer_embeddings(m, t, segs, x, n, ple, acts, tmp)?;
    }
    // Positions change every pass; the tables are rebuilt lazily per RoPE.
    rope_tables.new_pass();
    parts.resize_with(segs.len(), Vec::new);
    for (il, l) in m.layers.iter().enumerate() {
        let li = Some(il);
        h.resize(n * d, 0.0);
        rms_norm(x, &l.norms.attn, m.eps, h);
        Dump::put_opt(dump, li, names::ATTN_NORM, h, n);
        o.resize(n * d, 0.0);
        match &l.mixer {
            LayerMixer::Attention(a) => {
                let (qd, kvd) = (a.attn.q_dim(), a.attn.kv_dim());
                q.resize(n * qd, 0.0);
                match &a.kv {
                    Some(p) => {
                        k.resize(n * kvd, 0.0);
                        v.resize(n * kvd, 0.0);
                        acts.prepare(h, n, &[&a.wq, &p.wk, &p.wv])?;
                        matmul_group(
                            src,
                            &mut [(&a.wq, q, tmp), (&p.wk, k, tmp2), (&p.wv, v, tmp3)],
                            h,
                            n,
                            acts,
                        )?;
                        add_bias(k, p.bk.as_ref());
                        add_bias(v, p.bv.as_ref());
                        if let Some(ones) = &p.v_norm {
                            rms_norm_inplace(v, ones, m.eps);
                        }
                    }
                    None => {
                        // Queries only: K/V come from the source layer's cache.
                        k.clear();
                        v.clear();
                        acts.prepare(h, n, &[&a.wq])?;
                        a.wq.matmul(src, h, n, acts, q, tmp)?;
                    }
                }
                add_bias(q, a.bq.as_ref());
                Dump::put_opt(dump, li, names::Q, q, n);
                Dump::put_opt(dump, li, names::K, k, n);
                Dump::put_opt(dump, li, names::V, v, n);
                encode_positions(&a.attn, l.norms.qk(), m.eps, q, k, rope_tables, row_pos);
                Dump::put_opt(dump, li, names::Q_ROPE, q, n);
                Dump::put_opt(dump, li, names::K_ROPE, k, n);

                if a.kv.is_some() {
                    let mut r0 = 0;
                    for seg in segs {
                        let len = seg.tokens.len();
                        let (ks, vs) = (
                            &k[r0 * kvd..(r0 + len) * kvd],
                            &v[r0 * kvd..(r0 + len) * kvd],
                        );
                        if let LayerCache::Kv(kv) = &mut seqs[seg.seq].layers[il] {
                            kv.store(seg.pos0, ks, vs, len);
                        }
                        r0 += len;
                    }
                }
                att.resize(n * qd, 0.0);
                let cache_layer = a.attn.kv_source.unwrap_or(il);
                attend_segments(m, a, seqs, segs, q, att, parts, cache_layer);
                Dump::put_opt(dump, li, names::KQV_OUT, att, n);
                acts.prepare(att, n, &[&a.wo])?;
                a.wo.matmul(src, att, n, acts, o, tmp)?;
                add_bias(o, a.bo.as_ref());
            }
            LayerMixer::ShortConv(c) => {
                // `[B; C; X]` rows, then the causal convolution per segment
                // against its own history, then the output projection.
                q.resize(n * 3 * d, 0.0);
                acts.prepare(h, n, &[&c.in_proj])?;
                c.in_proj.matmul(src, h, n, acts, q, tmp)?;
                Dump::put_opt(dump, li, names::CONV_IN, q, n);
                att.resize(n * d, 0.0);
                let mut r0 = 0;
                for seg in segs {
                    let len = seg.tokens.len();
                    if let LayerCache::Conv(hist) = &mut seqs[seg.seq].layers[il] {
                        c.mix(
                            hist,
                            &q[r0 * 3 * d..(r0 + len) * 3 * d],
                            &mut att[r0 * d..(r0 + len) * d],
                        );
                    }
                    r0 += len;
                }
                Dump::put_opt(dump, li, names::CONV_OUT, att, n);
                acts.prepare(att, n, &[&c.out_proj])?;
                c.out_proj.matmul(src, att, n, acts, o, tmp)?;
            }
        }
        let attn_out: &[f32] = match &l.norms.post_attn {
            Some(w) => {
                rms_norm(o, w, m.eps, h);
                h
            }
            None => o,
        };
        Dump::put_opt(dump, li, names::ATTN_OUT, attn_out, n);
        add(x, attn_out);
        Dump::put_opt(dump, li, names::FFN_INP, x, n);

        rms_norm(x, &l.norms.ffn, m.eps, h);
        Dump::put_opt(dump, li, names::FFN_NORM, h, n);
        match &l.ffn {
            LayerFfn::Dense(f) => {
                f.run(src, h, n, acts, ffn, o)?;
                Dump::put_opt(dump, li, names::FFN_ACT, &ffn.g, n);
            }
            LayerFfn::Moe(e) => e.run(src, h, n, acts, moe, o)?,
        }
        let ffn_out: &[f32] = match &l.norms.post_ffn {
            Some(w) => {
                rms_norm(o, w, m.eps, h);
                h
            }
            None => o,
        };
        Dump::put_opt(dump, li, names::FFN_OUT, ffn_out, n);
        add(x, ffn_out);
        if let (Some(b), Some(t)) = (&l.per_layer, &m.per_layer) {
            // x += norm(proj(act(gate(x)) * e_l)), e_l this layer's slice.
            let w = b.width;
            let (g, e) = (&mut ffn.g, &mut ffn.u);
            g.resize(n * w, 0.0);
            e.clear();
            for row in ple.chunks_exact(t.width * m.layers.len()) {
                e.extend_from_slice(&row[il * w..(il + 1) * w]);
            }
            acts.prepare(x, n, &[&b.gate])?;
            b.gate.matmul(src, x, n, acts, g, tmp)?;
            gated(b.activation, g, e);
            acts.prepare(g, n, &[&b.proj])?;
            b.proj.matmul(src, g, n, acts, o, tmp)?;
            rms_norm(o, &b.norm, m.eps, h);
            add(x, h);
        }
        if let Some(s) = l.scale {
            x.iter_mut().for_each(|v| *v *= s);
        }
        Dump::put_opt(dump, li, names::OUT, x, n);
    }

    let rows = logit_rows.len();
    if rows == 0 {
        return Ok(());
    }
    // Only the rows whose logits are wanted go through the output projection.
    let picked: &[f32] = if rows == n {
        x
    } else {
        sel.clear();
        for &r in logit_rows {
            sel.extend_from_slice(&x[r * d..(r + 1) * d]);
        }
        sel
    };
    h.resize(rows * d, 0.0);
    rms_norm(picked, &m.output_norm, m.eps, h);
    Dump::put_opt(dump, None, names::RESULT_NORM, h, rows);
    let out = match out {
        RowOutput::Hidden(states) => {
            states[..rows * d].copy_from_slice(h);
            return Ok(());
        }
        RowOutput::Logits(logits) => &mut logits[..rows * m.n_vocab],
    };
    acts.prepare(h, rows, &[&m.output])?;
    m.output.matmul(src, h, rows, acts, out, tmp)?;
    if let Some(cap) = m.final_softcap {
        softcap(out, cap);
    }
    Dump::put_opt(dump, None, names::RESULT_OUTPUT, out, rows);
    Ok(())
}

/// Gemma 4's per-layer input embeddings of the `n` rows (token embeddings
/// `x`, already scaled) into `ple`, `n_layer · width` per row:
/// `(norm(slice(model_proj · x) · proj_scale) + slice(table[id]) ·
/// token_scale) · combine_scale`.
#[allow(clippy::too_many_arguments)]
fn per_layer_embeddings(
    m: &Model,
    t: &PerLayerTables,
    segs: &[Segment<'_>],
    x: &[f32],
    n: usize,
    ple: &mut Vec<f32>,
    acts: &mut Acts,
    tmp: &mut Vec<f32>,
) -> Result<()> {
    let src = m.weights.as_ref();
    let lw = t.width * m.layers.len();
    ple.resize(n * lw, 0.0);
    acts.prepare(x, n, &[&t.model_proj])?;
    t.model_proj.matmul(src, x, n, acts, ple, tmp)?;
    ple.iter_mut().for_each(|v| *v *= t.model_proj_scale);
    let tokens = segs.iter().flat_map(|s| s.tokens.iter().copied());
    let mut row = std::mem::take(tmp);
    let done = finish_per_layer_inputs(
        ple,
        lw,
        tokens,
        (&t.proj_norm, m.eps),
        (t.token_scale, t.combine_scale),
        |tok, dst| t.token_table.row(src, tok as usize, dst),
        &mut row,
    );
    *tmp = row;
    done
}

/// Attention of every segment against its own cache (layer `il`'s, or the
/// layer it reads K/V from). One segment
/// parallelises inside [`attend`]; several (batched decode) run side by side.
#[allow(clippy::too_many_arguments)]
fn attend_segments(
    m: &Model,
    l: &AttnLayer,
    seqs: &[SeqState],
    segs: &[Segment<'_>],
    q: &[f32],
    att: &mut [f32],
    parts: &mut [Vec<f32>],
    il: usize,
) {
    let qd = l.attn.q_dim();
    let cache_of = |seq: usize| match &seqs[seq].layers[il] {
        LayerCache::Kv(kv) => Some(kv),
        LayerCache::Conv(_) => None,
    };
    if let [seg] = segs {
        let Some(cache) = cache_of(seg.seq) else {
            return;
        };
        let n = seg.tokens.len();
        attend(
            &m.kernels,
            &l.attn,
            cache,
            q,
            seg.pos0,
            n,
            att,
            &mut parts[0],
        );
        return;
    }
    let mut jobs = Vec::with_capacity(segs.len());
    let (mut q_rest, mut att_rest) = (q, att);
    for (seg, part) in segs.iter().zip(parts.iter_mut()) {
        let len = seg.tokens.len() * qd;
        let (qs, qr) = q_rest.split_at(len);
        let (os, or) = std::mem::take(&mut att_rest).split_at_mut(len);
        q_rest = qr;
        att_rest = or;
        jobs.push((seg, qs, os, part));
    }
    jobs.into_par_iter().for_each(|(seg, qs, os, part)| {
        let Some(cache) = cache_of(seg.seq) else {
            return;
        };
        attend(
            &m.kernels,
            &l.attn,
            cache,
            qs,
            seg.pos0,
            seg.tokens.len(),
            os,
            part,
        );
    });
}
