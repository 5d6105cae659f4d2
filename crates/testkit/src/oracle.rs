//! An f64 textbook forward pass, written from the equations of
//! `anedvd_graph`'s block types and sharing no code with any backend: the
//! reference of the op-level conformance cases. F32 tensors only (the
//! synthetic programs those cases build); attention mixers and dense FFNs
//! only (the variants every backend runs today).

use anedvd_graph::{
    Activation, Attention, Block, DecoderProgram, DenseFfn, FeedForward, Mixer, NormPlacement,
    RopePairing,
};

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
    let (w, cols) = tensor(p, name);
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

/// RMS norm of every `width`-wide chunk of every row by the weight `name`
/// (plus the program's offset).
fn rms_norm(p: &DecoderProgram, name: &str, x: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let (w, _) = tensor(p, name);
    let off = f64::from(p.norm.weight_offset);
    let eps = f64::from(p.norm.eps);
    x.iter()
        .map(|row| {
            row.chunks_exact(w.len())
                .flat_map(|c| {
                    let ms = c.iter().map(|v| v * v).sum::<f64>() / c.len() as f64;
                    let s = 1.0 / (ms + eps).sqrt();
                    c.iter().zip(&w).map(move |(v, g)| v * s * (g + off))
                })
                .collect()
        })
        .collect()
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

fn attention(p: &DecoderProgram, a: &Attention, h: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let mut q = linear(p, &a.wq, h);
    let mut k = linear(p, &a.wk, h);
    let mut v = linear(p, &a.wv, h);
    add_bias(p, &a.bias.q, &mut q);
    add_bias(p, &a.bias.k, &mut k);
    add_bias(p, &a.bias.v, &mut v);
    if let Some(n) = &a.q_norm {
        q = rms_norm(p, n, &q);
    }
    if let Some(n) = &a.k_norm {
        k = rms_norm(p, n, &k);
    }
    rotate(a, &mut q, a.n_head);
    rotate(a, &mut k, a.n_head_kv);
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
    o
}

fn dense(p: &DecoderProgram, f: &DenseFfn, h: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let g = linear(p, &f.gate, h);
    let u = linear(p, &f.up, h);
    let act = |x: f64| match f.activation {
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::GeluTanh => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
    };
    let gu: Vec<Vec<f64>> = g
        .iter()
        .zip(&u)
        .map(|(g, u)| g.iter().zip(u).map(|(g, u)| act(*g) * u).collect())
        .collect();
    linear(p, &f.down, &gu)
}

fn add(x: &mut [Vec<f64>], y: &[Vec<f64>]) {
    for (a, b) in x.iter_mut().zip(y) {
        a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
    }
}

fn block(p: &DecoderProgram, b: &Block, x: &mut [Vec<f64>]) {
    let (pre_m, post_m, pre_f, post_f) = match &b.norms {
        NormPlacement::Pre { mixer, ffn } => (mixer, None, ffn, None),
        NormPlacement::Sandwich {
            mixer,
            post_mixer,
            ffn,
            post_ffn,
        } => (mixer, Some(post_mixer), ffn, Some(post_ffn)),
    };
    let Mixer::Attention(a) = &b.mixer else {
        panic!("oracle: only attention mixers")
    };
    let FeedForward::Dense(f) = &b.ffn else {
        panic!("oracle: only dense FFNs")
    };
    let mut o = attention(p, a, &rms_norm(p, pre_m, x));
    if let Some(n) = post_m {
        o = rms_norm(p, n, &o);
    }
    add(x, &o);
    let mut o = dense(p, f, &rms_norm(p, pre_f, x));
    if let Some(n) = post_f {
        o = rms_norm(p, n, &o);
    }
    add(x, &o);
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
    for b in &p.layers {
        block(p, b, &mut x);
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
