//! A routed mixture of experts (Qwen2-MoE, Qwen3-MoE): a softmax router in
//! f32 picks `k` experts per token; their gated FFN outputs are summed with
//! the router's probabilities (renormalised over the `k` or not), plus an
//! optional shared expert scaled by `sigmoid(gate_inp · x)`.
//!
//! Experts are read in place (GGUF's stacked `ffn_*_exps` through
//! [`Matrix::expert`], HF's per-expert tensors as they are) by the same
//! quantized kernels as dense layers. Tokens are grouped by expert, so one
//! pass reads each chosen expert's rows once for all of its tokens; one
//! token (decode) runs all of its experts' gate/up products in one parallel
//! region and all down products in another.

use crate::compiled::{load_matrix, pack_matrix, DenseLayer, FfnScratch};
use crate::kernels::{gated, softmax};
use crate::matmul::{matvec_each, vector, Acts, Matrix, VecJob};
use crate::packing::Packing;
use crate::qkernels::Kernels;
use anedvd_base::WeightSource;
use anedvd_graph::{ExpertTensors, Gating, MoeFfn, Result, SharedExpert};

/// The shared expert and its optional scalar gate.
pub struct Shared {
    /// The expert.
    pub ffn: DenseLayer,
    /// `[n_embd]` weights of its scalar sigmoid gate, if any.
    pub gate_inp: Option<Vec<f32>>,
}

impl Shared {
    /// `sigmoid(gate_inp · x)`, or 1 without a gate.
    pub fn scale(&self, x: &[f32]) -> f32 {
        self.gate_inp.as_ref().map_or(1.0, |w| {
            let z: f32 = w.iter().zip(x).map(|(w, x)| w * x).sum();
            1.0 / (1.0 + (-z).exp())
        })
    }
}

/// One compiled mixture.
pub struct MoeLayer {
    /// How tokens pick and weigh experts.
    pub routing: Routing,
    /// Router `[n_embd] -> [n_expert]`.
    pub router: Matrix,
    /// The experts (their activation is the mixture's).
    pub experts: Vec<DenseLayer>,
    /// The always-on expert, if any (the ANE backend takes it out and runs
    /// it as a dense FFN program).
    pub shared: Option<Shared>,
}

/// Scratch of the mixture, reused across layers and passes.
#[derive(Default)]
pub struct MoeBuffers {
    logits: Vec<f32>,
    /// Per token: `(expert, weight)` of its picks.
    picks: Vec<(usize, f32)>,
    /// Per expert: the token rows routed to it.
    rows: Vec<Vec<(usize, f32)>>,
    x: Vec<f32>,
    y: Vec<f32>,
    ffn: FfnScratch,
    acts: Vec<Acts>,
}

/// How a mixture turns router logits into its experts' weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    /// Experts per token (top-k).
    pub k: usize,
    /// Scores from logits.
    pub gating: Gating,
    /// Added to the scores for the choice only (`[n_expert]`).
    pub bias: Option<Vec<f32>>,
    /// Renormalise the chosen scores.
    pub normalize: bool,
    /// Multiplier on the weights.
    pub scale: f32,
}

/// The top-`k` experts of one token's router `logits` as `(index,
/// weight)`, highest first (ties: lower index first): scores are the
/// softmax or the sigmoids of the logits, chosen by score plus the
/// selection bias, weighted by the unbiased score, renormalised when
/// `normalize` (sigmoid scores over `sum + 1e-6`, as transformers), then
/// scaled.
pub fn route(logits: &mut [f32], r: &Routing, out: &mut Vec<(usize, f32)>) {
    match r.gating {
        Gating::Softmax => softmax(logits),
        Gating::Sigmoid => logits
            .iter_mut()
            .for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
    }
    let start = out.len();
    for _ in 0..r.k {
        let mut best: Option<(usize, f32, f32)> = None;
        for (e, &p) in logits.iter().enumerate() {
            let key = p + r.bias.as_ref().map_or(0.0, |b| b[e]);
            let taken = out[start..].iter().any(|(i, _)| *i == e);
            if !taken && best.is_none_or(|(_, _, b)| key > b) {
                best = Some((e, p, key));
            }
        }
        if let Some((e, p, _)) = best {
            out.push((e, p));
        }
    }
    if r.normalize {
        let sum: f32 = out[start..].iter().map(|(_, p)| p).sum();
        let sum = match r.gating {
            Gating::Softmax => sum,
            Gating::Sigmoid => sum + 1e-6,
        };
        if sum > 0.0 {
            out[start..].iter_mut().for_each(|(_, p)| *p /= sum);
        }
    }
    if r.scale != 1.0 {
        out[start..].iter_mut().for_each(|(_, p)| *p *= r.scale);
    }
}

impl MoeLayer {
    /// Compiles `m` for kernels `k` (see [`load_matrix`] for `pack`); the
    /// router stays unpacked (it runs in f32 whatever the file stores).
    pub fn compile(src: &dyn WeightSource, m: &MoeFfn, k: Kernels, pack: Packing) -> Result<Self> {
        let MoeFfn {
            n_expert,
            n_expert_used,
            n_ff_expert,
            activation,
            router,
            gating,
            selection_bias,
            normalize_top_k,
            weights_scale,
            experts,
            shared,
        } = m;
        let expert = |gate: Matrix, up: Matrix, down: Matrix| DenseLayer {
            n_ff: *n_ff_expert,
            activation: *activation,
            gate,
            up,
            down,
        };
        let packed = |m: Matrix| pack_matrix(src, m, pack);
        let experts = match experts {
            ExpertTensors::Stacked { gate, up, down } => (0..*n_expert)
                .map(|e| {
                    let m = |name: &str| packed(Matrix::expert(src, name, e, k)?);
                    Ok(expert(m(gate)?, m(up)?, m(down)?))
                })
                .collect::<Result<Vec<_>>>()?,
            ExpertTensors::PerExpert { gate, up, down } => gate
                .iter()
                .zip(up)
                .zip(down)
                .map(|((g, u), dn)| {
                    let m = |name: &str| load_matrix(src, name, k, pack);
                    Ok(expert(m(g)?, m(u)?, m(dn)?))
                })
                .collect::<Result<Vec<_>>>()?,
        };
        // The router runs in f32 whatever the file stores; its input width
        // is the shared expert gate's.
        let router = Matrix::new(src, router, k)?;
        let d = router.n_in;
        let shared = match shared {
            None => None,
            Some(SharedExpert { ffn, gate_inp }) => Some(Shared {
                ffn: DenseLayer::compile(src, ffn, k, pack)?,
                gate_inp: gate_inp.as_deref().map(|g| vector(src, g, d)).transpose()?,
            }),
        };
        Ok(MoeLayer {
            routing: Routing {
                k: *n_expert_used,
                gating: *gating,
                bias: selection_bias
                    .as_deref()
                    .map(|b| vector(src, b, *n_expert))
                    .transpose()?,
                normalize: *normalize_top_k,
                scale: *weights_scale,
            },
            router,
            experts,
            shared,
        })
    }

    /// `out = moe(h)` for `n` rows of `h` (`n × d`, already normed).
    pub fn run(
        &self,
        src: &dyn WeightSource,
        h: &[f32],
        n: usize,
        acts: &mut Acts,
        bufs: &mut MoeBuffers,
        out: &mut [f32],
    ) -> Result<()> {
        let d = self.router.n_in;
        let ne = self.experts.len();
        let out = &mut out[..n * d];
        bufs.logits.resize(n * ne, 0.0);
        acts.prepare(h, n, &[&self.router])?;
        self.router
            .matmul(src, h, n, acts, &mut bufs.logits, &mut bufs.ffn.tmp)?;
        bufs.picks.clear();
        for row in bufs.logits.chunks_exact_mut(ne) {
            route(row, &self.routing, &mut bufs.picks);
        }
        out.fill(0.0);
        if n == 1 {
            return self.one_token(src, h, acts, bufs, out);
        }
        self.grouped(src, h, n, bufs, out)?;
        if let Some(s) = &self.shared {
            self.shared_expert(src, s, h, n, acts, bufs, out)?;
        }
        Ok(())
    }

    /// Decode: gate/up of every picked expert and the shared one in one
    /// parallel region, their downs in another.
    fn one_token(
        &self,
        src: &dyn WeightSource,
        h: &[f32],
        acts: &mut Acts,
        bufs: &mut MoeBuffers,
        out: &mut [f32],
    ) -> Result<()> {
        let d = out.len();
        // The shared expert runs as one more pick, its weight the gate's.
        let mut picks: Vec<(&DenseLayer, f32)> = bufs
            .picks
            .iter()
            .map(|&(e, w)| (&self.experts[e], w))
            .collect();
        if let Some(s) = &self.shared {
            picks.push((&s.ffn, s.scale(h)));
        }
        let k = picks.len();
        // Hidden states side by side, each expert at its own offset (the
        // shared expert is wider).
        let offsets: Vec<usize> = picks
            .iter()
            .scan(0, |o, (e, _)| {
                let start = *o;
                *o += e.gate.n_out;
                Some(start)
            })
            .collect();
        let total = offsets.last().map_or(0, |o| o + picks[k - 1].0.gate.n_out);
        let mats: Vec<&Matrix> = picks.iter().flat_map(|(e, _)| [&e.gate, &e.up]).collect();
        acts.prepare(h, 1, &mats)?;
        bufs.ffn.g.resize(total, 0.0);
        bufs.ffn.u.resize(total, 0.0);
        {
            let acts: &Acts = acts;
            let mut jobs: Vec<VecJob<'_>> = Vec::with_capacity(2 * k);
            let (mut g_rest, mut u_rest) = (&mut bufs.ffn.g[..], &mut bufs.ffn.u[..]);
            for (e, _) in &picks {
                let ff = e.gate.n_out;
                let (g, gr) = std::mem::take(&mut g_rest).split_at_mut(ff);
                let (u, ur) = std::mem::take(&mut u_rest).split_at_mut(ff);
                (g_rest, u_rest) = (gr, ur);
                jobs.push((&e.gate, h, acts, g));
                jobs.push((&e.up, h, acts, u));
            }
            matvec_each(src, &mut jobs)?;
        }
        gated(picks[0].0.activation, &mut bufs.ffn.g, &bufs.ffn.u);
        bufs.acts.resize_with(k, Acts::default);
        for (((e, _), &o), a) in picks.iter().zip(&offsets).zip(&mut bufs.acts) {
            a.prepare(&bufs.ffn.g[o..o + e.gate.n_out], 1, &[&e.down])?;
        }
        bufs.y.resize(k * d, 0.0);
        {
            let g: &[f32] = &bufs.ffn.g;
            let mut jobs: Vec<VecJob<'_>> = picks
                .iter()
                .zip(&offsets)
                .zip(&bufs.acts)
                .zip(bufs.y.chunks_exact_mut(d))
                .map(|((((e, _), &o), a), y)| (&e.down, &g[o..o + e.gate.n_out], a, y))
                .collect();
            matvec_each(src, &mut jobs)?;
        }
        for ((_, w), y) in picks.iter().zip(bufs.y.chunks_exact(d)) {
            out.iter_mut().zip(y).for_each(|(o, y)| *o += w * y);
        }
        Ok(())
    }

    /// Prefill and batched decode: each expert's tokens gathered and run
    /// together, so its rows are read once per pass.
    fn grouped(
        &self,
        src: &dyn WeightSource,
        h: &[f32],
        n: usize,
        bufs: &mut MoeBuffers,
        out: &mut [f32],
    ) -> Result<()> {
        let d = self.router.n_in;
        let k = self.routing.k;
        bufs.rows.resize_with(self.experts.len(), Vec::new);
        bufs.rows.iter_mut().for_each(|r| r.clear());
        for (t, picks) in bufs.picks.chunks(k.max(1)).enumerate().take(n) {
            for &(e, w) in picks {
                bufs.rows[e].push((t, w));
            }
        }
        bufs.acts.resize_with(1, Acts::default);
        for (e, expert) in self.experts.iter().enumerate() {
            let rows = &bufs.rows[e];
            let m = rows.len();
            if m == 0 {
                continue;
            }
            bufs.x.clear();
            for &(t, _) in rows {
                bufs.x.extend_from_slice(&h[t * d..(t + 1) * d]);
            }
            bufs.y.resize(m * d, 0.0);
            expert.run(
                src,
                &bufs.x,
                m,
                &mut bufs.acts[0],
                &mut bufs.ffn,
                &mut bufs.y,
            )?;
            for (&(t, w), y) in rows.iter().zip(bufs.y.chunks_exact(d)) {
                out[t * d..(t + 1) * d]
                    .iter_mut()
                    .zip(y)
                    .for_each(|(o, y)| *o += w * y);
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn shared_expert(
        &self,
        src: &dyn WeightSource,
        s: &Shared,
        h: &[f32],
        n: usize,
        acts: &mut Acts,
        bufs: &mut MoeBuffers,
        out: &mut [f32],
    ) -> Result<()> {
        let d = self.router.n_in;
        bufs.y.resize(n * d, 0.0);
        s.ffn.run(src, h, n, acts, &mut bufs.ffn, &mut bufs.y)?;
        for ((o, y), x) in out
            .chunks_exact_mut(d)
            .zip(bufs.y.chunks_exact(d))
            .zip(h.chunks_exact(d))
        {
            let scale = s.scale(x);
            o.iter_mut().zip(y).for_each(|(o, y)| *o += scale * y);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{route, Routing};
    use anedvd_graph::Gating;

    fn routing(k: usize, normalize: bool) -> Routing {
        Routing {
            k,
            gating: Gating::Softmax,
            bias: None,
            normalize,
            scale: 1.0,
        }
    }

    #[test]
    fn route_picks_the_top_k_of_the_softmax() {
        let mut picks = Vec::new();
        let mut l = [1.0f32, 3.0, 2.0, 3.0];
        route(&mut l, &routing(2, false), &mut picks);
        let e: Vec<usize> = picks.iter().map(|p| p.0).collect();
        assert_eq!(e, [1, 3]);
        // softmax of [1,3,2,3]: exp(3)/(e+2e^3+e^2)
        let z = 1f32.exp() + 2.0 * 3f32.exp() + 2f32.exp();
        assert!((picks[0].1 - 3f32.exp() / z).abs() < 1e-6);
        let mut picks = Vec::new();
        let mut l = [1.0f32, 3.0, 2.0, 3.0];
        route(&mut l, &routing(3, true), &mut picks);
        let sum: f32 = picks.iter().map(|p| p.1).sum();
        assert!((sum - 1.0).abs() < 1e-6);
        assert_eq!(picks[2].0, 2);
    }

    /// LFM2-MoE: sigmoid scores, the bias moves the choice but not the
    /// weights, then `w / (sum + 1e-6) · scale`.
    #[test]
    fn route_with_sigmoid_scores_selection_bias_and_scale() {
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        let mut picks = Vec::new();
        let mut l = [2.0f32, 1.0, 0.0, -1.0];
        let r = Routing {
            k: 2,
            gating: Gating::Sigmoid,
            bias: Some(vec![0.0, 0.0, 0.0, 10.0]),
            normalize: true,
            scale: 1.5,
        };
        route(&mut l, &r, &mut picks);
        let e: Vec<usize> = picks.iter().map(|p| p.0).collect();
        assert_eq!(e, [3, 0]);
        let sum = sig(-1.0) + sig(2.0) + 1e-6;
        assert!((picks[0].1 - sig(-1.0) / sum * 1.5).abs() < 1e-6);
        assert!((picks[1].1 - sig(2.0) / sum * 1.5).abs() < 1e-6);
    }
}
