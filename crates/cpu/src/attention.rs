//! Attention over an f16 KV cache: GQA, causal and sliding-window masks,
//! optional score soft-cap, softmax in f32.

use crate::kernels::{axpy, dot, softcap, softmax};
use anedvd_graph::LayerSpec;
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Keys and values of one layer, `dim = n_head_kv * head_dim` per position.
#[derive(Default)]
pub struct KvCache {
    k: Vec<f16>,
    v: Vec<f16>,
    dim: usize,
}

impl KvCache {
    /// An empty cache of `dim` values per position.
    pub fn new(dim: usize) -> Self {
        Self {
            k: Vec::new(),
            v: Vec::new(),
            dim,
        }
    }

    /// Writes `n_tok` rows of keys and values at positions `pos0..`, growing as needed.
    pub fn store(&mut self, pos0: usize, k: &[f32], v: &[f32], n_tok: usize) {
        let end = (pos0 + n_tok) * self.dim;
        if self.k.len() < end {
            self.k.resize(end, f16::ZERO);
            self.v.resize(end, f16::ZERO);
        }
        let range = pos0 * self.dim..end;
        self.k[range.clone()].convert_from_f32_slice(&k[..n_tok * self.dim]);
        self.v[range].convert_from_f32_slice(&v[..n_tok * self.dim]);
    }

    /// Forgets positions at and beyond `n` (keeps the allocation).
    pub fn truncate(&mut self, n: usize) {
        let len = n * self.dim;
        self.k.truncate(len);
        self.v.truncate(len);
    }
}

/// First key position a query at `pos` may see.
pub fn first_visible(pos: usize, window: Option<usize>) -> usize {
    match window {
        Some(w) => (pos + 1).saturating_sub(w),
        None => 0,
    }
}

/// For each of `n_tok` queries (row-major `n_tok × n_head·head_dim`, query `t`
/// at position `pos0 + t`) computes `softmax(scale·q·K^T)·V` over the visible
/// cached positions into `out` (same layout as `q`). One task per (token, kv
/// head) serves the whole group of query heads sharing that kv head, so each
/// cached row is converted from f16 once per group.
pub fn attend(
    spec: &LayerSpec,
    cache: &KvCache,
    q: &[f32],
    pos0: usize,
    n_tok: usize,
    out: &mut [f32],
) {
    let hd = spec.head_dim;
    let group = spec.n_head / spec.n_head_kv;
    let n_kv = spec.n_head_kv;
    let dim = cache.dim;
    out[..n_tok * spec.n_head * hd]
        .par_chunks_mut(group * hd)
        .enumerate()
        .for_each(|(idx, o)| {
            let (t, kvh) = (idx / n_kv, idx % n_kv);
            let pos = pos0 + t;
            let lo = first_visible(pos, spec.sliding_window);
            let len = pos + 1 - lo;
            // Query rows of this group are contiguous, like the output rows.
            let qg = &q[idx * group * hd..(idx + 1) * group * hd];
            SCRATCH.with(|s| {
                let (scores, row) = &mut *s.borrow_mut();
                row.resize(hd, 0.0);
                scores.resize(group * len, 0.0);
                for (jj, j) in (lo..=pos).enumerate() {
                    let off = j * dim + kvh * hd;
                    cache.k[off..off + hd].convert_to_f32_slice(row);
                    for g in 0..group {
                        scores[g * len + jj] =
                            dot(&qg[g * hd..(g + 1) * hd], row) * spec.attn_scale;
                    }
                }
                for sc in scores.chunks_exact_mut(len) {
                    if let Some(cap) = spec.attn_softcap {
                        softcap(sc, cap);
                    }
                    softmax(sc);
                }
                o.fill(0.0);
                for (jj, j) in (lo..=pos).enumerate() {
                    let off = j * dim + kvh * hd;
                    cache.v[off..off + hd].convert_to_f32_slice(row);
                    for g in 0..group {
                        axpy(&mut o[g * hd..(g + 1) * hd], scores[g * len + jj], row);
                    }
                }
            });
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use anedvd_graph::{Rope, RopePairing};

    fn spec(window: Option<usize>) -> LayerSpec {
        LayerSpec {
            n_head: 2,
            n_head_kv: 1,
            head_dim: 2,
            n_ff: 1,
            attn_scale: 1.0,
            attn_softcap: None,
            sliding_window: window,
            rope: Rope {
                pairing: RopePairing::Neox,
                n_rot: 0,
                inv_freq: vec![],
                attn_factor: 1.0,
            },
            tensors: vec![],
        }
    }

    #[test]
    fn window_bounds() {
        assert_eq!(first_visible(0, Some(3)), 0);
        assert_eq!(first_visible(2, Some(3)), 0);
        assert_eq!(first_visible(3, Some(3)), 1);
        assert_eq!(first_visible(10, None), 0);
    }

    #[allow(clippy::unwrap_used)]
    /// With zero queries every visible position gets equal weight, so the
    /// output is the mean of the visible values: this checks both masks.
    #[test]
    fn causal_and_sliding_masks_average_visible_values() {
        let mut cache = KvCache::new(2);
        let k = vec![0.0; 10];
        let v: Vec<f32> = (0..5).flat_map(|p| [p as f32, 10.0 * p as f32]).collect();
        cache.store(0, &k, &v, 5);
        let q = vec![0.0; 5 * 4];
        let mut out = vec![0.0; 5 * 4];
        attend(&spec(None), &cache, &q, 0, 5, &mut out);
        for t in 0..5usize {
            let mean = (0..=t).map(|p| p as f32).sum::<f32>() / (t + 1) as f32;
            for h in 0..2 {
                assert!((out[t * 4 + h * 2] - mean).abs() < 1e-5, "t={t}");
                assert!((out[t * 4 + h * 2 + 1] - 10.0 * mean).abs() < 1e-3);
            }
        }
        attend(&spec(Some(2)), &cache, &q, 0, 5, &mut out);
        for t in 0..5usize {
            let lo = t.saturating_sub(1);
            let mean = (lo..=t).map(|p| p as f32).sum::<f32>() / (t - lo + 1) as f32;
            assert!((out[t * 4] - mean).abs() < 1e-5, "t={t}");
        }
    }
}
