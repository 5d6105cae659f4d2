//! `anedvd check`: every layer-0 kernel (both variants) and the first lm_head
//! slice, simulated, against an f32 CPU computation from the same weights.
//!
//! The reference is plain f32 matrix products over the dequantized weights
//! (plus `anedvd_cpu::kernels` RMSNorm and gated activations for the fused
//! kernels); inputs are deterministic pseudo-random values in [-1, 1] filling
//! all W columns.

use super::Error;
use crate::lower::{
    self, tensors, Kernel, KernelKind, LayerView, LowerOptions, MixerView, Variant,
};
use anedvd_cpu::kernels::{gated, rms_norm};
use anedvd_graph::{DecoderProgram, Result};
use anedvd_mil::rules::RuleConfig;
use anedvd_mil::sim::{Simulator, Tensor};

/// The outcome for one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelCheck {
    /// Variant the kernel belongs to.
    pub variant: Variant,
    /// Kernel name.
    pub name: String,
    /// Largest |simulated − reference|.
    pub max_abs: f32,
    /// `max_abs / max|reference|`.
    pub max_rel: f32,
    /// NaN or infinite outputs.
    pub nans: usize,
    /// `nans == 0 && max_rel <= tolerance`.
    pub ok: bool,
}

fn lcg(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// `n` deterministic pseudo-random values in [-1, 1) from `seed` (inputs of
/// checks, probes and tests; the same seed always gives the same values).
pub fn pseudo_random(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n).map(|_| lcg(&mut s)).collect()
}

/// `y[t] = W·x[t] (+ b)` for `n` rows; `w` is `[out, in]` row-major.
fn matmul(w: &[f32], b: Option<&[f32]>, x: &[f32], cin: usize, out: usize) -> Vec<f32> {
    let mut y = Vec::with_capacity(x.len() / cin * out);
    for row in x.chunks_exact(cin) {
        for o in 0..out {
            let wr = &w[o * cin..(o + 1) * cin];
            let mut acc: f32 = wr.iter().zip(row).map(|(a, b)| a * b).sum();
            if let Some(b) = b {
                acc += b[o];
            }
            y.push(acc);
        }
    }
    y
}

struct Ref<'a> {
    p: &'a DecoderProgram,
    layers: Vec<LayerView<'a>>,
}

impl Ref<'_> {
    /// The whole matrix `name`, row-major `[out, in]`.
    fn m(&self, name: &str) -> Result<Vec<f32>> {
        let n = self
            .p
            .weights
            .tensor(name)
            .map_or(0, |t| t.info.shape.get(1).copied().unwrap_or(1) as usize);
        Ok(tensors::rows(self.p.weights.as_ref(), name, 0, n)
            .map_err(Error::from)?
            .0)
    }

    fn v(&self, name: Option<&str>, len: usize, offset: f32) -> Result<Option<Vec<f32>>> {
        let Some(name) = name else {
            return Ok(None);
        };
        let mut v = tensors::vector(self.p.weights.as_ref(), name, len).map_err(Error::from)?;
        v.iter_mut().for_each(|x| *x += offset);
        Ok(Some(v))
    }

    fn norm(&self, name: &str, x: &[f32]) -> Result<Vec<f32>> {
        let off = self.p.norm.weight_offset;
        let g = self
            .v(Some(name), self.p.n_embd, off)?
            .ok_or_else(|| anedvd_graph::Error::MissingTensor(name.to_string()))?;
        let mut out = vec![0f32; x.len()];
        rms_norm(x, &g, self.p.norm.eps, &mut out);
        Ok(out)
    }

    fn maybe_norm(&self, name: Option<&str>, x: Vec<f32>) -> Result<Vec<f32>> {
        match name {
            Some(n) => self.norm(n, &x),
            None => Ok(x),
        }
    }

    fn qkv(&self, i: usize, x: &[f32]) -> Result<Vec<f32>> {
        let a = match self.layers[i].mixer {
            MixerView::Attention(a) => a,
            MixerView::ShortConv(c) => {
                let d = self.p.n_embd;
                return Ok(matmul(&self.m(&c.in_proj)?, None, x, d, 3 * d));
            }
        };
        let (qd, kvd) = (a.q_dim(), a.kv_dim());
        let d = self.p.n_embd;
        let b = &a.bias;
        let q = matmul(
            &self.m(&a.wq)?,
            self.v(b.q.as_deref(), qd, 0.0)?.as_deref(),
            x,
            d,
            qd,
        );
        if a.kv_source.is_some() {
            // K/V come from an earlier layer's cache
            return Ok(q);
        }
        let k = matmul(
            &self.m(&a.wk)?,
            self.v(b.k.as_deref(), kvd, 0.0)?.as_deref(),
            x,
            d,
            kvd,
        );
        let v = matmul(
            &self.m(&a.wv)?,
            self.v(b.v.as_deref(), kvd, 0.0)?.as_deref(),
            x,
            d,
            kvd,
        );
        let n = x.len() / d;
        let mut y = Vec::with_capacity(n * (qd + 2 * kvd));
        for t in 0..n {
            y.extend_from_slice(&q[t * qd..(t + 1) * qd]);
            y.extend_from_slice(&k[t * kvd..(t + 1) * kvd]);
            y.extend_from_slice(&v[t * kvd..(t + 1) * kvd]);
        }
        Ok(y)
    }

    fn attn_out(&self, i: usize, att: &[f32]) -> Result<Vec<f32>> {
        let d = self.p.n_embd;
        match self.layers[i].mixer {
            MixerView::Attention(a) => {
                let b = self.v(a.bias.o.as_deref(), d, 0.0)?;
                Ok(matmul(&self.m(&a.wo)?, b.as_deref(), att, a.q_dim(), d))
            }
            MixerView::ShortConv(c) => {
                // rows [u; C; carry]: the causal conv of u over the rows
                // (zeros before the first) plus carry, times C
                let k = c.kernel;
                let taps = tensors::elements(self.p.weights.as_ref(), &c.conv, k * d)
                    .map_err(Error::from)?;
                let rows: Vec<&[f32]> = att.chunks_exact(3 * d).collect();
                let mut y = Vec::with_capacity(rows.len() * d);
                for (t, row) in rows.iter().enumerate() {
                    for ch in 0..d {
                        let conv: f32 = (0..k)
                            .filter_map(|j| {
                                let src = (t + j).checked_sub(k - 1)?;
                                Some(taps[ch * k + j] * rows[src][ch])
                            })
                            .sum();
                        y.push(row[d + ch] * (conv + row[2 * d + ch]));
                    }
                }
                Ok(matmul(&self.m(&c.out_proj)?, None, &y, d, d))
            }
        }
    }

    /// `proj(act(gate · x) ⊙ e)` of layer `i`'s per-layer input from rows
    /// `[x; e]`.
    fn per_layer(&self, i: usize, xe: &[f32]) -> Result<Vec<f32>> {
        let d = self.p.n_embd;
        let Some(pl) = self.layers[i].per_layer else {
            return Ok(Vec::new());
        };
        let w = pl.width;
        let (mut x, mut e) = (Vec::new(), Vec::new());
        for row in xe.chunks_exact(d + w) {
            x.extend_from_slice(&row[..d]);
            e.extend_from_slice(&row[d..]);
        }
        let mut g = matmul(&self.m(&pl.gate)?, None, &x, d, w);
        gated(pl.activation, &mut g, &e);
        Ok(matmul(&self.m(&pl.proj)?, None, &g, w, d))
    }

    /// The dense FFN layer `i` runs on the ANE (a mixture's shared expert).
    fn ffn(&self, i: usize, x: &[f32]) -> Result<Vec<f32>> {
        let Some(f) = self.layers[i].ffn.on_ane() else {
            return Err(Error::Output {
                kernel: format!("blk.{i}.ffn"),
                msg: "no FFN on the ANE".into(),
            }
            .into());
        };
        let (d, ff) = (self.p.n_embd, f.n_ff);
        let mut g = matmul(&self.m(&f.gate)?, None, x, d, ff);
        let u = matmul(&self.m(&f.up)?, None, x, d, ff);
        gated(f.activation, &mut g, &u);
        Ok(matmul(&self.m(&f.down)?, None, &g, ff, d))
    }

    /// The reference of `kind` on input `x`; fused kernels take and return
    /// the residual divided by `s` (the lowering's residual scale).
    fn eval(&self, kind: KernelKind, x: &[f32], s: f32) -> Result<Vec<f32>> {
        let d = self.p.n_embd;
        let up = |v: &[f32]| -> Vec<f32> { v.iter().map(|x| x * s).collect() };
        match kind {
            KernelKind::Resident { first, .. } => Err(Error::Output {
                kernel: format!("blk.{first}.resident"),
                msg: "a resident program holds attention; it is checked whole by verify".into(),
            }
            .into()),
            KernelKind::Qkv { layer } => self.qkv(layer, x),
            KernelKind::AttnOut { layer } => self.attn_out(layer, x),
            KernelKind::Ffn { layer } => self.ffn(layer, x),
            KernelKind::Entry { layer } => {
                self.qkv(layer, &self.norm(self.layers[layer].attn_norm, &up(x))?)
            }
            KernelKind::PleProj => {
                let Some(e) = &self.p.per_layer_embd else {
                    return Ok(Vec::new());
                };
                let lw = e.width * self.p.layers.len();
                let mut y = matmul(&self.m(&e.model_proj)?, None, x, d, lw);
                y.iter_mut().for_each(|v| *v *= e.model_proj_scale);
                Ok(y)
            }
            KernelKind::PerLayer { layer } => {
                // `[residual / s; e]`
                let w = self.layers[layer].per_layer.map_or(0, |pl| pl.width);
                let xe: Vec<f32> = x
                    .chunks_exact(d + w)
                    .flat_map(|row| {
                        let (r, e) = row.split_at(d);
                        r.iter()
                            .map(|v| v * s)
                            .chain(e.iter().copied())
                            .collect::<Vec<_>>()
                    })
                    .collect();
                self.per_layer(layer, &xe)
            }
            KernelKind::Layer {
                layer: i,
                next_qkv,
                ffn_on_host,
            } => {
                let l = self.layers[i];
                let qd = l.mixer.ctx_width(d);
                let pw = l.per_layer.map_or(0, |pl| pl.width);
                let cin = qd + d + pw;
                let (mut att, mut res, mut e) = (Vec::new(), Vec::new(), Vec::new());
                for row in x.chunks_exact(cin) {
                    att.extend_from_slice(&row[..qd]);
                    res.extend(row[qd..qd + d].iter().map(|v| v * s));
                    e.extend_from_slice(&row[qd + d..]);
                }
                let a = self.maybe_norm(l.post_attn_norm, self.attn_out(i, &att)?)?;
                res.iter_mut().zip(&a).for_each(|(r, a)| *r += a);
                let hn = self.norm(l.ffn_norm, &res)?;
                if ffn_on_host {
                    // [residual / s; normed; shared expert]
                    let shared = match l.ffn.on_ane() {
                        Some(_) => Some(self.ffn(i, &hn)?),
                        None => None,
                    };
                    let mut y = Vec::new();
                    for (t, (r, h)) in res.chunks_exact(d).zip(hn.chunks_exact(d)).enumerate() {
                        y.extend(r.iter().map(|v| v / s));
                        y.extend_from_slice(h);
                        if let Some(sh) = &shared {
                            y.extend_from_slice(&sh[t * d..(t + 1) * d]);
                        }
                    }
                    return Ok(y);
                }
                let f = self.ffn(i, &hn)?;
                let f = self.maybe_norm(l.post_ffn_norm, f)?;
                res.iter_mut().zip(&f).for_each(|(r, a)| *r += a);
                if let Some(pl) = l.per_layer {
                    let xe: Vec<f32> = res
                        .chunks_exact(d)
                        .zip(e.chunks_exact(pw))
                        .flat_map(|(r, e)| r.iter().chain(e).copied())
                        .collect();
                    let v = self.norm(&pl.norm, &self.per_layer(i, &xe)?)?;
                    res.iter_mut().zip(&v).for_each(|(r, a)| *r += a);
                }
                if let Some(name) = l.layer_scale {
                    let k = lower::layer_scale(self.p, name).map_err(Error::from)?;
                    res.iter_mut().for_each(|r| *r *= k);
                }
                if !next_qkv {
                    return Ok(res.iter().map(|v| v / s).collect());
                }
                let next = self.layers[i + 1].attn_norm;
                let qkv = self.qkv(i + 1, &self.norm(next, &res)?)?;
                let w = qkv.len() / (res.len() / d);
                let mut y = Vec::new();
                for (r, q) in res.chunks_exact(d).zip(qkv.chunks_exact(w)) {
                    y.extend(r.iter().map(|v| v / s));
                    y.extend_from_slice(q);
                }
                Ok(y)
            }
            KernelKind::LmHead {
                first,
                rows,
                norm_inside,
            } => {
                let h = if norm_inside {
                    let mut g = tensors::vector(self.p.weights.as_ref(), &self.p.output_norm, d)
                        .map_err(Error::from)?;
                    g.iter_mut().for_each(|v| *v += self.p.norm.weight_offset);
                    let mut out = vec![0f32; x.len()];
                    rms_norm(&up(x), &g, self.p.norm.eps, &mut out);
                    out
                } else {
                    x.to_vec()
                };
                let name = self.p.output.as_deref().unwrap_or(&self.p.token_embd);
                let (w, _) = tensors::rows(self.p.weights.as_ref(), name, first, first + rows)
                    .map_err(Error::from)?;
                Ok(matmul(&w, None, &h, d, rows))
            }
        }
    }
}

/// Simulates `k` (printed → parsed → rule-checked for `o.path`) on `x`
/// (`W × in_channels` rows).
fn simulate(k: &Kernel, x: &[f32], o: &LowerOptions) -> Result<Vec<f32>> {
    let width = o.width;
    let err = |source| Error::Mil {
        kernel: k.name.clone(),
        source,
    };
    let program = anedvd_mil::parse(&anedvd_mil::print(&k.program)).map_err(err)?;
    let rules = RuleConfig {
        path: o.path,
        ..RuleConfig::default()
    };
    let sim = Simulator::new(&program, &k.weights, &rules).map_err(err)?;
    let cin = k.in_channels;
    let mut cols = vec![0f32; cin * width];
    for (t, row) in x.chunks_exact(cin).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            cols[c * width + t] = v;
        }
    }
    let input = Tensor::f16(&[1, cin, 1, width], &cols).map_err(err)?;
    let out = sim.run("main", &[("x", input)]).map_err(err)?;
    let y = out
        .first()
        .map(|(_, t)| t.to_f32())
        .ok_or_else(|| Error::Output {
            kernel: k.name.clone(),
            msg: "no output".into(),
        })?;
    let cout = k.out_channels;
    let mut rows = vec![0f32; width * cout];
    for t in 0..width {
        for c in 0..cout {
            rows[t * cout + c] = y[c * width + t];
        }
    }
    Ok(rows)
}

/// Checks layer 0's kernels of both variants and `lm_head.0` (fused) with
/// relative tolerance `tolerance`.
pub fn check_layer0(
    p: &DecoderProgram,
    options: &LowerOptions,
    tolerance: f32,
) -> Result<Vec<KernelCheck>> {
    let r = Ref {
        p,
        layers: lower::layer_views(p, "ane-sim")?,
    };
    let mut out = Vec::new();
    for variant in [Variant::Split, Variant::Fused] {
        let o = LowerOptions {
            variant,
            ..*options
        };
        let lowered = lower::lower(p, &o).map_err(Error::from)?;
        let mut seed = 0x5eed_u64;
        for k in &lowered.kernels {
            let wanted = match k.kind {
                KernelKind::Qkv { layer }
                | KernelKind::AttnOut { layer }
                | KernelKind::Ffn { layer } => layer == 0,
                KernelKind::Layer { layer, .. } => layer == 0,
                KernelKind::Entry { layer } | KernelKind::PerLayer { layer } => layer == 0,
                KernelKind::PleProj => true,
                KernelKind::LmHead { first, .. } => first == 0,
                // attention with its cache inside: `verify` checks it whole
                KernelKind::Resident { .. } => false,
            };
            if !wanted {
                continue;
            }
            let x: Vec<f32> = (0..o.width * k.in_channels)
                .map(|_| lcg(&mut seed))
                .collect();
            let got = simulate(k, &x, &o)?;
            let want = r.eval(k.kind, &x, o.residual_scale)?;
            let nans = got.iter().filter(|v| !v.is_finite()).count();
            let max_abs = got
                .iter()
                .zip(&want)
                .filter(|(g, _)| g.is_finite())
                .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
            let scale = want
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()))
                .max(f32::MIN_POSITIVE);
            let max_rel = max_abs / scale;
            out.push(KernelCheck {
                variant,
                name: k.name.clone(),
                max_abs,
                max_rel,
                nans,
                ok: nans == 0 && max_rel <= tolerance && got.len() == want.len(),
            });
        }
    }
    Ok(out)
}
