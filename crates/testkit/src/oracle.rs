//! An f64 textbook forward pass, written from the equations of
//! `anedvd_graph`'s block types and sharing no code with any backend: the
//! reference of the op-level conformance cases. F32 tensors only (the
//! synthetic programs those cases build); attention (K/V of its own or
//! read from an earlier layer) and short-convolution mixers, dense and
//! mixture-of-experts FFNs, Gemma 4's per-layer input embeddings and layer
//! output scale. The whole prompt runs at once: a layer's keys and values
//! of every position are kept for the layers that read them.

use anedvd_graph::{
    Activation, Attention, DecoderProgram, DenseFfn, ExpertTensors, FeedForward, Gating, Mixer,
    MoeFfn, NormPlacement, PerLayerEmbedding, RopePairing, ShortConv,
};

/// A layer's keys (after their norm and RoPE) and values (after theirs) of
/// every position: what an attention layer caches.
struct Kv {
    k: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
}

/// An F32 tensor as `[rows][cols]` (ggml `ne = [cols, rows]`), or a vector.
fn tensor(p: &DecoderProgram, name: &str) -> (Vec<f64>, usize) {
    let t = p
        .weights
        .tensor(name)
        .unwrap_or_else(|| panic!("oracle: tensor {name} missing"));
    assert_eq!(
        t.info.dtype,
        anedvd_base::GgmlType::F32,
        "oracle: {name} not F32"
    );
    let cols = t.info.shape[0] as usize;
    let v = t
        .data
        .chunks_exact(4)
        .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    (v, cols)
}

/// `W x` for every row of `x` (`W` is `[out][in]`).
fn linear(p: &DecoderProgram, name: &str, x: &[Vec<f64>]) -> Vec<Vec<f64>> {
    linear_of(p, name, None, x)
}

/// [`linear`] by matrix `index` of a stacked 3-D tensor (`[n][out][in]`),
/// or by the whole 2-D tensor.
fn linear_of(
    p: &DecoderProgram,
    name: &str,
    index: Option<usize>,
    x: &[Vec<f64>],
) -> Vec<Vec<f64>> {
    let (all, cols) = tensor(p, name);
    let w = match index {
        None => &all[..],
        Some(e) => {
            let per = cols
                * p.weights
                    .tensor(name)
                    .map_or(0, |t| t.info.shape[1] as usize);
            &all[e * per..(e + 1) * per]
        }
    };
    x.iter()
        .map(|row| {
            assert_eq!(row.len(), cols, "oracle: {name} input width");
            w.chunks_exact(cols)
                .map(|wr| wr.iter().zip(row).map(|(a, b)| a * b).sum())
                .collect()
        })
        .collect()
}

fn add_bias(p: &DecoderProgram, name: &Option<String>, x: &mut [Vec<f64>]) {
    if let Some(n) = name {
        let (b, _) = tensor(p, n);
        for row in x {
            row.iter_mut().zip(&b).for_each(|(v, b)| *v += b);
        }
    }
}

/// RMS norm of every `w.len()`-wide chunk of every row, times `w`.
fn rms_chunks(p: &DecoderProgram, w: &[f64], x: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let eps = f64::from(p.norm.eps);
    x.iter()
        .map(|row| {
            row.chunks_exact(w.len())
                .flat_map(|c| {
                    let ms = c.iter().map(|v| v * v).sum::<f64>() / c.len() as f64;
                    let s = 1.0 / (ms + eps).sqrt();
                    c.iter().zip(w).map(move |(v, g)| v * s * g)
                })
                .collect()
        })
        .collect()
}

/// RMS norm of every `width`-wide chunk of every row by the weight `name`
/// (plus the program's offset).
fn rms_norm(p: &DecoderProgram, name: &str, x: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let (w, _) = tensor(p, name);
    let off = f64::from(p.norm.weight_offset);
    let w: Vec<f64> = w.iter().map(|g| g + off).collect();
    rms_chunks(p, &w, x)
}

fn softcap(x: f64, cap: Option<f32>) -> f64 {
    match cap {
        Some(c) => f64::from(c) * (x / f64::from(c)).tanh(),
        None => x,
    }
}

fn rotate(a: &Attention, rows: &mut [Vec<f64>], heads: usize) {
    let Some(r) = &a.rope else { return };
    let (hd, half) = (a.head_dim, r.n_rot / 2);
    for (pos, row) in rows.iter_mut().enumerate() {
        for h in 0..heads {
            let x = &mut row[h * hd..(h + 1) * hd];
            for (i, f) in r.inv_freq.iter().enumerate() {
                let (i0, i1) = match r.pairing {
                    RopePairing::Norm => (2 * i, 2 * i + 1),
                    RopePairing::Neox => (i, i + half),
                };
                let (s, c) = (pos as f64 * f).sin_cos();
                let (s, c) = (s * f64::from(r.attn_factor), c * f64::from(r.attn_factor));
                let (x0, x1) = (x[i0], x[i1]);
                x[i0] = x0 * c - x1 * s;
                x[i1] = x0 * s + x1 * c;
            }
        }
    }
}

/// This layer's keys and values: `h` projected, biased, normed (values by
/// a weightless norm, if any) and the keys rotated.
fn keys_values(p: &DecoderProgram, a: &Attention, h: &[Vec<f64>]) -> Kv {
    let mut k = linear(p, &a.wk, h);
    let mut v = linear(p, &a.wv, h);
    add_bias(p, &a.bias.k, &mut k);
    add_bias(p, &a.bias.v, &mut v);
    if let Some(n) = &a.k_norm {
        k = rms_norm(p, n, &k);
    }
    if a.v_norm {
        v = rms_chunks(p, &vec![1.0; a.head_dim], &v);
    }
    rotate(a, &mut k, a.n_head_kv);
    Kv { k, v }
}

/// Attention of `h` over this layer's keys and values, or over those of
/// the earlier layer `a.kv_source` (from `kept`, by layer): the output, and
/// the keys and values when they are this layer's own.
fn attention(
    p: &DecoderProgram,
    a: &Attention,
    h: &[Vec<f64>],
    kept: &[Option<Kv>],
) -> (Vec<Vec<f64>>, Option<Kv>) {
    let mut q = linear(p, &a.wq, h);
    add_bias(p, &a.bias.q, &mut q);
    if let Some(n) = &a.q_norm {
        q = rms_norm(p, n, &q);
    }
    rotate(a, &mut q, a.n_head);
    let own = a.kv_source.is_none().then(|| keys_values(p, a, h));
    let Kv { k, v } = match &own {
        Some(kv) => kv,
        None => (a.kv_source)
            .and_then(|src| kept[src].as_ref())
            .expect("oracle: the K/V source layer keeps none"),
    };
    let (hd, group) = (a.head_dim, a.n_head / a.n_head_kv);
    let ctx: Vec<Vec<f64>> = (0..h.len())
        .map(|t| {
            let lo = a.window.map_or(0, |w| (t + 1).saturating_sub(w));
            (0..a.n_head)
                .flat_map(|head| {
                    let kh = head / group;
                    let qh = &q[t][head * hd..(head + 1) * hd];
                    let scores: Vec<f64> = (lo..=t)
                        .map(|j| {
                            let kj = &k[j][kh * hd..(kh + 1) * hd];
                            let s = qh.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>();
                            softcap(s * f64::from(a.scale), a.softcap)
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    (0..hd)
                        .map(|c| {
                            (lo..=t)
                                .zip(&e)
                                .map(|(j, ej)| ej / z * v[j][kh * hd + c])
                                .sum::<f64>()
                        })
                        .collect::<Vec<f64>>()
                })
                .collect()
        })
        .collect();
    let mut o = linear(p, &a.wo, &ctx);
    add_bias(p, &a.bias.o, &mut o);
    (o, own)
}

fn dense(p: &DecoderProgram, f: &DenseFfn, h: &[Vec<f64>]) -> Vec<Vec<f64>> {
    gated_ffn(p, f.activation, (&f.gate, &f.up, &f.down), None, h)
}

fn act(a: Activation, x: f64) -> f64 {
    match a {
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::GeluTanh => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
    }
}

/// LFM2's block: `[B, C, X] = in_proj(h)`, `u = B·X`, `v[t] = Σ_k w[:, k] ·
/// u[t - (K-1) + k]` (zeros before the start), `out_proj(C·v)`.
fn short_conv(p: &DecoderProgram, c: &ShortConv, h: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let bcx = linear(p, &c.in_proj, h);
    let d = p.n_embd;
    let (w, kernel) = tensor(p, &c.conv);
    assert_eq!(kernel, c.kernel, "oracle: conv taps");
    let u: Vec<Vec<f64>> = bcx
        .iter()
        .map(|r| (0..d).map(|i| r[i] * r[2 * d + i]).collect())
        .collect();
    let y: Vec<Vec<f64>> = (0..h.len())
        .map(|t| {
            (0..d)
                .map(|ch| {
                    let v: f64 = (0..kernel)
                        .filter_map(|k| {
                            let src = (t + k).checked_sub(kernel - 1)?;
                            Some(w[ch * kernel + k] * u[src][ch])
                        })
                        .sum();
                    bcx[t][d + ch] * v
                })
                .collect()
        })
        .collect();
    linear(p, &c.out_proj, &y)
}

/// `down(act(gate(x)) * up(x))` by the given (possibly stacked) tensors.
fn gated_ffn(
    p: &DecoderProgram,
    a: Activation,
    (gate, up, down): (&str, &str, &str),
    index: Option<usize>,
    h: &[Vec<f64>],
) -> Vec<Vec<f64>> {
    let g = linear_of(p, gate, index, h);
    let u = linear_of(p, up, index, h);
    let gu: Vec<Vec<f64>> = g
        .iter()
        .zip(&u)
        .map(|(g, u)| g.iter().zip(u).map(|(g, u)| act(a, *g) * u).collect())
        .collect();
    linear_of(p, down, index, &gu)
}

/// Softmax router, top-k (ties: lower index), optionally renormalised;
/// routed experts summed with their weights, plus the shared expert scaled
/// by `sigmoid(gate_inp · h)`.
fn moe(p: &DecoderProgram, m: &MoeFfn, h: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let logits = linear(p, &m.router, h);
    let mut out = vec![vec![0.0; p.n_embd]; h.len()];
    let bias = m.selection_bias.as_ref().map(|b| tensor(p, b).0);
    for (t, l) in logits.iter().enumerate() {
        // scores: softmax, or independent sigmoids
        let score: Vec<f64> = match m.gating {
            Gating::Softmax => {
                let mx = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = l.iter().map(|v| (v - mx).exp()).collect();
                let z: f64 = e.iter().sum();
                e.iter().map(|v| v / z).collect()
            }
            Gating::Sigmoid => l.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect(),
        };
        // chosen by score plus bias, weighted by the score
        let key = |i: usize| score[i] + bias.as_ref().map_or(0.0, |b| b[i]);
        let mut order: Vec<usize> = (0..score.len()).collect();
        order.sort_by(|a, b| key(*b).total_cmp(&key(*a)).then(a.cmp(b)));
        let picked = &order[..m.n_expert_used];
        let total: f64 = picked.iter().map(|i| score[*i]).sum();
        let total = match m.gating {
            Gating::Softmax => total,
            Gating::Sigmoid => total + 1e-6,
        };
        for &x in picked {
            let mut w = score[x];
            if m.normalize_top_k {
                w /= total;
            }
            w *= f64::from(m.weights_scale);
            let y = match &m.experts {
                ExpertTensors::Stacked { gate, up, down } => {
                    gated_ffn(p, m.activation, (gate, up, down), Some(x), &h[t..t + 1])
                }
                ExpertTensors::PerExpert { gate, up, down } => gated_ffn(
                    p,
                    m.activation,
                    (&gate[x], &up[x], &down[x]),
                    None,
                    &h[t..t + 1],
                ),
            };
            out[t].iter_mut().zip(&y[0]).for_each(|(o, y)| *o += w * y);
        }
    }
    if let Some(s) = &m.shared {
        let y = dense(p, &s.ffn, h);
        for ((o, y), x) in out.iter_mut().zip(&y).zip(h) {
            let scale = s.gate_inp.as_ref().map_or(1.0, |g| {
                let (w, _) = tensor(p, g);
                let z: f64 = w.iter().zip(x).map(|(a, b)| a * b).sum();
                1.0 / (1.0 + (-z).exp())
            });
            o.iter_mut().zip(y).for_each(|(o, y)| *o += scale * y);
        }
    }
    out
}

fn add(x: &mut [Vec<f64>], y: &[Vec<f64>]) {
    for (a, b) in x.iter_mut().zip(y) {
        a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
    }
}

/// Runs layer `l` on `x`, pushing its keys and values (if it has its own)
/// onto `kept`; `ple` is every row's per-layer embeddings, if any.
fn block(
    p: &DecoderProgram,
    l: usize,
    x: &mut [Vec<f64>],
    kept: &mut Vec<Option<Kv>>,
    ple: Option<&[Vec<f64>]>,
) {
    let b = &p.layers[l];
    let (pre_m, post_m, pre_f, post_f) = match &b.norms {
        NormPlacement::Pre { mixer, ffn } => (mixer, None, ffn, None),
        NormPlacement::Sandwich {
            mixer,
            post_mixer,
            ffn,
            post_ffn,
        } => (mixer, Some(post_mixer), ffn, Some(post_ffn)),
    };
    let h = rms_norm(p, pre_m, x);
    let (mut o, kv) = match &b.mixer {
        Mixer::Attention(a) => attention(p, a, &h, kept),
        Mixer::ShortConv(c) => (short_conv(p, c, &h), None),
    };
    kept.push(kv);
    if let Some(n) = post_m {
        o = rms_norm(p, n, &o);
    }
    add(x, &o);
    let h = rms_norm(p, pre_f, x);
    let mut o = match &b.ffn {
        FeedForward::Dense(f) => dense(p, f, &h),
        FeedForward::Moe(m) => moe(p, m, &h),
    };
    if let Some(n) = post_f {
        o = rms_norm(p, n, &o);
    }
    add(x, &o);
    if let Some(pl) = &b.per_layer_input {
        let ple = ple.expect("oracle: a per-layer input without per-layer embeddings");
        let w = pl.width;
        let g = linear(p, &pl.gate, x);
        let ge: Vec<Vec<f64>> = g
            .iter()
            .zip(ple)
            .map(|(g, e)| {
                g.iter()
                    .zip(&e[l * w..(l + 1) * w])
                    .map(|(g, e)| act(pl.activation, *g) * e)
                    .collect()
            })
            .collect();
        let o = rms_norm(p, &pl.norm, &linear(p, &pl.proj, &ge));
        add(x, &o);
    }
    if let Some(name) = &b.layer_scale {
        let (s, _) = tensor(p, name);
        x.iter_mut().flatten().for_each(|v| *v *= s[0]);
    }
}

/// Every row's per-layer embeddings, `n_layer · width` each: `(norm_l(
/// model_proj · x0 · proj_scale) + table[id] · token_scale) ·
/// combine_scale`, the norm over each layer's `width` columns.
fn per_layer_embeddings(
    p: &DecoderProgram,
    e: &PerLayerEmbedding,
    tokens: &[u32],
    x0: &[Vec<f64>],
) -> Vec<Vec<f64>> {
    let mut proj = linear(p, &e.model_proj, x0);
    let s = f64::from(e.model_proj_scale);
    proj.iter_mut().flatten().for_each(|v| *v *= s);
    let normed = rms_norm(p, &e.proj_norm, &proj);
    let (table, cols) = tensor(p, &e.token_table);
    let (ts, cs) = (f64::from(e.token_scale), f64::from(e.combine_scale));
    normed
        .iter()
        .zip(tokens)
        .map(|(n, &t)| {
            let row = &table[t as usize * cols..(t as usize + 1) * cols];
            n.iter().zip(row).map(|(n, r)| (n + r * ts) * cs).collect()
        })
        .collect()
}

/// Logits of every position of `tokens` (one row per token).
pub fn forward(p: &DecoderProgram, tokens: &[u32]) -> Vec<Vec<f64>> {
    let (emb, d) = tensor(p, &p.token_embd);
    let mut x: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| {
            let t = t as usize;
            emb[t * d..(t + 1) * d]
                .iter()
                .map(|v| v * f64::from(p.embd_scale))
                .collect()
        })
        .collect();
    let ple = (p.per_layer_embd.as_ref()).map(|e| per_layer_embeddings(p, e, tokens, &x));
    let mut kept = Vec::with_capacity(p.layers.len());
    for l in 0..p.layers.len() {
        block(p, l, &mut x, &mut kept, ple.as_deref());
    }
    let h = rms_norm(p, &p.output_norm, &x);
    let out = p.output.as_deref().unwrap_or(&p.token_embd);
    linear(p, out, &h)
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|v| softcap(v, p.final_softcap))
                .collect()
        })
        .collect()
}
