//! The CPU half of a layer: q/k norm, RoPE, the f32 KV cache and softmax attention.

use crate::model::CpuLayer;
use anedvd_cpu::kernels::{axpy, dot, rms_norm_inplace, rope_cos_sin, rope_row, softcap, softmax};

/// One layer's cached keys and values, `dim` floats per position.
pub(crate) struct KvCache {
    dim: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl KvCache {
    pub fn new(dim: usize) -> Self {
        KvCache {
            dim,
            k: Vec::new(),
            v: Vec::new(),
        }
    }

    /// Keeps positions `< n`.
    pub fn truncate(&mut self, n: usize) {
        self.k.truncate(n * self.dim);
        self.v.truncate(n * self.dim);
    }

    fn store(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        self.truncate(pos0);
        self.k.extend_from_slice(k);
        self.v.extend_from_slice(v);
    }
}

/// Splits `qkv` (`n × (q + 2·kv)`) into q, k, v; applies q/k norm and RoPE;
/// caches k/v at `pos0..`; returns `(q, k, v, q_rope, k_rope, context)`, the
/// context being `n × q` rows of `softmax(scale·q·Kᵀ)·V` (soft-capped, windowed).
#[allow(clippy::type_complexity)]
pub(crate) fn attention(
    l: &CpuLayer,
    eps: f32,
    cache: &mut KvCache,
    qkv: &[f32],
    pos0: usize,
    n: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let s = &l.spec;
    let hd = s.head_dim;
    let (qd, kvd) = (s.n_head * hd, s.n_head_kv * hd);
    let width = qd + 2 * kvd;
    let mut q = Vec::with_capacity(n * qd);
    let mut k = Vec::with_capacity(n * kvd);
    let mut v = Vec::with_capacity(n * kvd);
    for row in qkv.chunks_exact(width).take(n) {
        q.extend_from_slice(&row[..qd]);
        k.extend_from_slice(&row[qd..qd + kvd]);
        v.extend_from_slice(&row[qd + kvd..]);
    }
    let (mut qr, mut kr) = (q.clone(), k.clone());
    if let Some(w) = &l.q_norm {
        rms_norm_inplace(&mut qr, w, eps);
    }
    if let Some(w) = &l.k_norm {
        rms_norm_inplace(&mut kr, w, eps);
    }
    let mut cs = Vec::new();
    for t in 0..n {
        rope_cos_sin(&s.rope, pos0 + t, &mut cs);
        rope_row(&mut qr[t * qd..(t + 1) * qd], hd, &s.rope, &cs);
        rope_row(&mut kr[t * kvd..(t + 1) * kvd], hd, &s.rope, &cs);
    }
    cache.store(pos0, &kr, &v);
    let group = s.n_head / s.n_head_kv;
    let mut ctx = vec![0f32; n * qd];
    let mut scores = Vec::new();
    for t in 0..n {
        let pos = pos0 + t;
        let lo = match s.sliding_window {
            Some(w) => (pos + 1).saturating_sub(w),
            None => 0,
        };
        for h in 0..s.n_head {
            let kvh = h / group;
            let qh = &qr[t * qd + h * hd..t * qd + (h + 1) * hd];
            scores.clear();
            for j in lo..=pos {
                let off = j * kvd + kvh * hd;
                scores.push(dot(qh, &cache.k[off..off + hd]) * s.attn_scale);
            }
            if let Some(cap) = s.attn_softcap {
                softcap(&mut scores, cap);
            }
            softmax(&mut scores);
            let out = &mut ctx[t * qd + h * hd..t * qd + (h + 1) * hd];
            for (jj, j) in (lo..=pos).enumerate() {
                let off = j * kvd + kvh * hd;
                axpy(out, scores[jj], &cache.v[off..off + hd]);
            }
        }
    }
    (q, k, v, qr, kr, ctx)
}
