//! A CPU session: KV cache, position, reusable scratch buffers, and the
//! layer-by-layer forward pass with named intermediates.

use crate::attention::{attend, KvCache};
use crate::compiled::Model;
use crate::dump::Dump;
use crate::kernels::{gated, rms_norm, rms_norm_inplace, rope_cos_sin, rope_row, softcap};
use crate::matmul::{matmul_group, Acts};
use anedvd_graph::intermediate as names;
use anedvd_graph::{Error, LogitsMode, Result, Session};
use std::path::PathBuf;
use std::sync::Arc;

/// Tokens processed together; longer batches are split (bounds scratch memory).
const MAX_CHUNK: usize = 256;

#[derive(Default)]
struct Buffers {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    part: Vec<f32>,
    o: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    tmp: Vec<f32>,
    tmp2: Vec<f32>,
    tmp3: Vec<f32>,
    cs: Vec<(f32, f32)>,
    acts: Acts,
}

/// One sequence on the CPU backend.
pub struct CpuSession {
    model: Arc<Model>,
    pool: Arc<rayon::ThreadPool>,
    max_seq: usize,
    pos: usize,
    kv: Vec<KvCache>,
    dump_dir: Option<PathBuf>,
    bufs: Buffers,
    logits: Vec<f32>,
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

fn add_bias(x: &mut [f32], bias: Option<&Vec<f32>>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            add(row, b);
        }
    }
}

fn put(
    dump: &mut Option<Dump>,
    layer: Option<usize>,
    name: &str,
    data: &[f32],
    rows: usize,
) -> Result<()> {
    if let Some(d) = dump.as_mut() {
        let full = match layer {
            Some(i) => names::layer_name(i, name),
            None => name.to_string(),
        };
        let cols = data.len().checked_div(rows).unwrap_or(0);
        d.write(&full, data, rows, cols)?;
    }
    Ok(())
}

impl CpuSession {
    pub fn new(model: Arc<Model>, pool: Arc<rayon::ThreadPool>, max_seq: usize) -> Self {
        let kv = model
            .layers
            .iter()
            .map(|l| KvCache::new(l.spec.n_head_kv, l.spec.head_dim))
            .collect();
        Self {
            model,
            pool,
            max_seq,
            pos: 0,
            kv,
            dump_dir: None,
            bufs: Buffers::default(),
            logits: Vec::new(),
        }
    }

    /// Runs `tokens` at positions `pos0..`; writes logits rows (all, or the last
    /// only) into `logits` when given.
    fn chunk(
        &mut self,
        tokens: &[u32],
        pos0: usize,
        logits: Option<(&mut [f32], bool)>,
        dump: &mut Option<Dump>,
    ) -> Result<()> {
        let m = self.model.clone();
        let src = m.weights.as_ref();
        let (n, d) = (tokens.len(), m.n_embd);
        let Buffers {
            x,
            h,
            q,
            k,
            v,
            att,
            part,
            o,
            g,
            u,
            tmp,
            tmp2,
            tmp3,
            cs,
            acts,
        } = &mut self.bufs;
        x.resize(n * d, 0.0);
        for (t, &tok) in tokens.iter().enumerate() {
            let row = &mut x[t * d..(t + 1) * d];
            m.token_embd.row(src, tok as usize, row)?;
            if m.embd_scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= m.embd_scale);
            }
        }
        put(dump, None, "inp_embd", x, n)?;
        for (il, l) in m.layers.iter().enumerate() {
            let (qd, kvd, hd, ff) = (l.q_dim(), l.kv_dim(), l.spec.head_dim, l.spec.n_ff);
            let li = Some(il);
            h.resize(n * d, 0.0);
            rms_norm(x, &l.attn_norm, m.eps, h);
            put(dump, li, names::ATTN_NORM, h, n)?;

            q.resize(n * qd, 0.0);
            k.resize(n * kvd, 0.0);
            v.resize(n * kvd, 0.0);
            acts.prepare(h, n, &[&l.wq, &l.wk, &l.wv])?;
            matmul_group(
                src,
                &mut [(&l.wq, q, tmp), (&l.wk, k, tmp2), (&l.wv, v, tmp3)],
                h,
                n,
                acts,
            )?;
            add_bias(q, l.bq.as_ref());
            add_bias(k, l.bk.as_ref());
            add_bias(v, l.bv.as_ref());
            put(dump, li, names::Q, q, n)?;
            put(dump, li, names::K, k, n)?;
            put(dump, li, names::V, v, n)?;
            if let Some(w) = &l.q_norm {
                rms_norm_inplace(q, w, m.eps);
            }
            if let Some(w) = &l.k_norm {
                rms_norm_inplace(k, w, m.eps);
            }
            for t in 0..n {
                rope_cos_sin(&l.spec.rope, pos0 + t, cs);
                rope_row(&mut q[t * qd..(t + 1) * qd], hd, &l.spec.rope, cs);
                rope_row(&mut k[t * kvd..(t + 1) * kvd], hd, &l.spec.rope, cs);
            }
            put(dump, li, names::Q_ROPE, q, n)?;
            put(dump, li, names::K_ROPE, k, n)?;

            self.kv[il].store(pos0, k, v, n);
            att.resize(n * qd, 0.0);
            attend(&m.kernels, &l.spec, &self.kv[il], q, pos0, n, att, part);
            put(dump, li, names::KQV_OUT, att, n)?;

            o.resize(n * d, 0.0);
            acts.prepare(att, n, &[&l.wo])?;
            l.wo.matmul(src, att, n, acts, o, tmp)?;
            add_bias(o, l.bo.as_ref());
            let attn_out: &[f32] = match &l.post_attn_norm {
                Some(w) => {
                    rms_norm(o, w, m.eps, h);
                    h
                }
                None => o,
            };
            put(dump, li, names::ATTN_OUT, attn_out, n)?;
            add(x, attn_out);
            put(dump, li, names::FFN_INP, x, n)?;

            rms_norm(x, &l.ffn_norm, m.eps, h);
            put(dump, li, names::FFN_NORM, h, n)?;
            g.resize(n * ff, 0.0);
            u.resize(n * ff, 0.0);
            acts.prepare(h, n, &[&l.gate, &l.up])?;
            matmul_group(src, &mut [(&l.gate, g, tmp), (&l.up, u, tmp2)], h, n, acts)?;
            gated(m.activation, g, u);
            put(dump, li, names::FFN_ACT, g, n)?;
            acts.prepare(g, n, &[&l.down])?;
            l.down.matmul(src, g, n, acts, o, tmp)?;
            let ffn_out: &[f32] = match &l.post_ffn_norm {
                Some(w) => {
                    rms_norm(o, w, m.eps, h);
                    h
                }
                None => o,
            };
            put(dump, li, names::FFN_OUT, ffn_out, n)?;
            add(x, ffn_out);
            put(dump, li, names::OUT, x, n)?;
        }
        let Some((out, all)) = logits else {
            return Ok(());
        };
        let first = if all { 0 } else { n - 1 };
        let rows = n - first;
        h.resize(rows * d, 0.0);
        rms_norm(&x[first * d..], &m.output_norm, m.eps, h);
        put(dump, None, names::RESULT_NORM, h, rows)?;
        let out = &mut out[..rows * m.n_vocab];
        acts.prepare(h, rows, &[&m.output])?;
        m.output.matmul(src, h, rows, acts, out, tmp)?;
        if let Some(cap) = m.final_softcap {
            softcap(out, cap);
        }
        put(dump, None, names::RESULT_OUTPUT, out, rows)?;
        Ok(())
    }
}

impl Session for CpuSession {
    fn forward(&mut self, tokens: &[u32], mode: LogitsMode) -> Result<&[f32]> {
        let n_vocab = self.model.n_vocab;
        if tokens.is_empty() {
            return match mode {
                LogitsMode::None => Ok(&[]),
                _ => Err(Error::InvalidArgument(
                    "forward with no tokens cannot return logits".into(),
                )),
            };
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { token, n_vocab });
        }
        let needed = self.pos + tokens.len();
        if needed > self.max_seq {
            return Err(Error::ContextOverflow {
                needed,
                max_seq: self.max_seq,
            });
        }
        let mut dump = self.dump_dir.take().map(Dump::new).transpose()?;
        let chunk = if dump.is_some() {
            tokens.len()
        } else {
            MAX_CHUNK
        };
        let rows = match mode {
            LogitsMode::None => 0,
            LogitsMode::Last => 1,
            LogitsMode::All => tokens.len(),
        };
        let mut logits = std::mem::take(&mut self.logits);
        logits.resize(rows * n_vocab, 0.0);
        let pool = self.pool.clone();
        let result = pool.install(|| -> Result<()> {
            let n_chunks = tokens.len().div_ceil(chunk);
            for (ci, part) in tokens.chunks(chunk).enumerate() {
                let pos0 = self.pos + ci * chunk;
                let out = match mode {
                    LogitsMode::None => None,
                    LogitsMode::Last if ci + 1 == n_chunks => Some((&mut logits[..], false)),
                    LogitsMode::Last => None,
                    LogitsMode::All => {
                        let start = ci * chunk * n_vocab;
                        Some((&mut logits[start..start + part.len() * n_vocab], true))
                    }
                };
                self.chunk(part, pos0, out, &mut dump)?;
            }
            Ok(())
        });
        self.logits = logits;
        result?;
        if let Some(d) = dump {
            d.finish()?;
        }
        self.pos = needed;
        Ok(&self.logits)
    }

    fn position(&self) -> usize {
        self.pos
    }

    fn truncate(&mut self, n: usize) {
        if n < self.pos {
            self.pos = n;
            for c in &mut self.kv {
                c.truncate(n);
            }
        }
    }

    fn max_seq(&self) -> usize {
        self.max_seq
    }

    fn set_dump(&mut self, dir: Option<PathBuf>) {
        self.dump_dir = dir;
    }
}
