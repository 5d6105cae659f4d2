//! Tiled (flash-style) attention for many queries at once: prefill chunks
//! and speculative verification. Each task takes the query heads of one kv
//! head for a block of tokens ([`ROWS`] query rows) and walks the visible
//! keys in tiles of [`KEYS`], with an online softmax, so no score matrix
//! larger than one `KEYS × ROWS` tile ever exists and each cached key and
//! value row is decoded from f16 once per task instead of once per query.
//!
//! Per tile: decode K and V to f32, `S^T = K · (scale · Q)^T` (keys by
//! query rows, so the softmax below runs along contiguous query rows),
//! soft-cap and mask, raise the running maxima and rescale, `O += P · V`.
//! Both products are [`Kernels::gemm_f32`]. Tasks run in parallel over
//! (kv head, token block); the decode path ([`super::attend`] with one
//! query per sequence) keeps its split over positions.

use super::{first_visible, KvCache};
use crate::kernels::{exp_fast, exp_shifted_add, tanh_fast};
use crate::qkernels::Kernels;
use anedvd_graph::Attention;
use rayon::prelude::*;
use std::cell::RefCell;
use std::ops::Range;

/// Query rows (tokens × the query heads of one kv head) per task: the
/// output tile (`ROWS × head_dim` f32) and the transposed queries stay in
/// L2 while the keys stream past, and every task decodes all its visible
/// K/V rows, so more rows per task decode (and read) the cache fewer
/// times. pp512 (`anedvd bench -p 512 -n 0 -t 2`, Zen 5, alternating
/// runs), 64 -> 128 rows: Gemma 3 270M at depth 32000 556-560 -> 621-624
/// tok/s, at 8192 1239-1362 -> 1347-1399 (256: 1339-1343); the
/// Llama-3.2-1B-shaped file at depth 4096 181-195 -> 202-209; at depth 0
/// within the noise for both.
const ROWS: usize = 128;
/// Keys per tile (decoded K and V tiles of `KEYS × head_dim` f32 each).
const KEYS: usize = 64;
/// Fewest queries for which [`attend_tiled`] is used: below it the
/// per-query path's parallelism over positions wins.
pub(super) const MIN_TOKENS: usize = 4;

/// One task's working set, kept per thread between calls.
#[derive(Default)]
struct Scratch {
    /// Scaled queries, transposed: `qt[d * rows + r]`.
    qt: Vec<f32>,
    /// Key and value tiles as f32, row per key.
    kf: Vec<f32>,
    vf: Vec<f32>,
    /// Scores, then probabilities, of one tile: `s[i * rows + r]` for key
    /// `i` of the tile and query row `r`.
    s: Vec<f32>,
    /// Running maximum and sum of exponentials per query row.
    max: Vec<f32>,
    sum: Vec<f32>,
    /// Per-row factor of this tile's rescale, and the tile's new maxima
    /// (then the shift subtracted before exponentiation).
    alpha: Vec<f32>,
    new_max: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Whether [`attend_tiled`] serves `n_tok` queries with these kernels.
pub(super) fn applies(kern: &Kernels, n_tok: usize) -> bool {
    n_tok >= MIN_TOKENS && kern.has_gemm_f32()
}

/// Tokens per task: [`ROWS`] query rows, fewer when that would leave
/// threads idle.
fn tokens_per_task(spec: &Attention, n_tok: usize) -> usize {
    let group = (spec.n_head / spec.n_head_kv).max(1);
    let full = (ROWS / group).max(1);
    let threads = rayon::current_num_threads().max(1);
    let blocks_wanted = (2 * threads).div_ceil(spec.n_head_kv.max(1));
    full.min(n_tok.div_ceil(blocks_wanted).max(1))
}

/// [`super::attend`]'s contract (same inputs and output layout), tiled;
/// `part` is scratch for the per-task outputs.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_tiled(
    kern: &Kernels,
    spec: &Attention,
    cache: &KvCache,
    q: &[f32],
    pos0: usize,
    n_tok: usize,
    out: &mut [f32],
    part: &mut Vec<f32>,
) {
    let (hd, n_kv) = (spec.head_dim, spec.n_head_kv);
    let group = spec.n_head / n_kv;
    let tb = tokens_per_task(spec, n_tok);
    let n_blocks = n_tok.div_ceil(tb);
    let task_len = tb * group * hd;
    part.resize(n_blocks * n_kv * task_len, 0.0);
    // Later blocks see more keys: hand them out first.
    part.par_chunks_mut(task_len)
        .enumerate()
        .rev()
        .for_each(|(i, o)| {
            let (blk, kvh) = (i / n_kv, i % n_kv);
            let toks = blk * tb..((blk + 1) * tb).min(n_tok);
            let rows = toks.len() * group;
            task(kern, spec, cache, q, pos0, toks, kvh, &mut o[..rows * hd]);
        });
    let width = group * hd;
    for (i, o) in part.chunks_exact(task_len).enumerate() {
        let (blk, kvh) = (i / n_kv, i % n_kv);
        let toks = blk * tb..((blk + 1) * tb).min(n_tok);
        for (t, src) in toks.zip(o.chunks_exact(width)) {
            let at = (t * spec.n_head + kvh * group) * hd;
            out[at..at + width].copy_from_slice(src);
        }
    }
}

/// The queries of tokens `toks` on kv head `kvh` into `o` (`rows × hd`,
/// row `(t - toks.start) * group + g`).
#[allow(clippy::too_many_arguments)]
fn task(
    kern: &Kernels,
    spec: &Attention,
    cache: &KvCache,
    q: &[f32],
    pos0: usize,
    toks: Range<usize>,
    kvh: usize,
    o: &mut [f32],
) {
    let hd = spec.head_dim;
    let group = spec.n_head / spec.n_head_kv;
    let rows = toks.len() * group;
    let (first, last) = (pos0 + toks.start, pos0 + toks.end - 1);
    let keys = first_visible(first, spec.window)..last + 1;
    SCRATCH.with(|s| {
        let s = &mut *s.borrow_mut();
        s.qt.resize(hd * rows, 0.0);
        for (tr, t) in toks.clone().enumerate() {
            for g in 0..group {
                let r = tr * group + g;
                let src = &q[(t * spec.n_head + kvh * group + g) * hd..][..hd];
                for (d, &x) in src.iter().enumerate() {
                    s.qt[d * rows + r] = x * spec.scale;
                }
            }
        }
        accumulate(kern, spec, cache, (kvh, first, rows, group), keys, o, s);
        for (orow, &z) in o.chunks_exact_mut(hd).zip(&s.sum) {
            // Each row sees at least its own position, so `z >= 1`.
            let inv = 1.0 / z;
            orow.iter_mut().for_each(|v| *v *= inv);
        }
    });
}

/// [`super::partial`] for any cache type: the unnormalized attention of
/// the `group` query heads `qg` of one query at `pos` (sharing kv head
/// `kvh`) over the cached positions `range`, into `o`, with
/// `ms[2g..2g + 2] = [max, sum]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn partial_tiled(
    kern: &Kernels,
    spec: &Attention,
    cache: &KvCache,
    qg: &[f32],
    (kvh, pos): (usize, usize),
    range: Range<usize>,
    o: &mut [f32],
    ms: &mut [f32],
) {
    let hd = spec.head_dim;
    let rows = ms.len() / 2;
    SCRATCH.with(|s| {
        let s = &mut *s.borrow_mut();
        s.qt.resize(hd * rows, 0.0);
        for (r, src) in qg.chunks_exact(hd).take(rows).enumerate() {
            for (d, &x) in src.iter().enumerate() {
                s.qt[d * rows + r] = x * spec.scale;
            }
        }
        // Every row is the same query position: one group of `rows`.
        let at = (kvh, pos, rows, rows);
        accumulate(kern, spec, cache, at, range, &mut o[..rows * hd], s);
        for (m, (&max, &sum)) in ms.chunks_exact_mut(2).zip(s.max.iter().zip(&s.sum)) {
            m[0] = max;
            m[1] = sum;
        }
    });
}

/// The online-softmax pass over cached positions `keys` of kv head `kvh`
/// for `rows` query rows (the transposed scaled queries in `s.qt`; row `r`
/// at position `first + r / group`): leaves `o` unnormalized, with each
/// row's running maximum and sum in `s.max` and `s.sum`.
fn accumulate(
    kern: &Kernels,
    spec: &Attention,
    cache: &KvCache,
    (kvh, first, rows, group): (usize, usize, usize, usize),
    keys: Range<usize>,
    o: &mut [f32],
    s: &mut Scratch,
) {
    let hd = spec.head_dim;
    let last = first + (rows - 1) / group;
    // Every key from here on is visible to every row up to its own position.
    let unmasked_from = first_visible(last, spec.window);
    o.fill(0.0);
    s.max.clear();
    s.max.resize(rows, f32::NEG_INFINITY);
    s.sum.clear();
    s.sum.resize(rows, 0.0);
    let mut kb = keys.start;
    while kb < keys.end {
        let nk = (keys.end - kb).min(KEYS);
        s.kf.resize(nk * hd, 0.0);
        s.vf.resize(nk * hd, 0.0);
        let (kbytes, vbytes) = cache.rows(kvh, kb..kb + nk);
        // Lengths match by construction (nk rows of hd values each).
        let _ = crate::decode_row(cache.dtype(), kbytes, &mut s.kf);
        let _ = crate::decode_row(cache.dtype(), vbytes, &mut s.vf);
        s.s.clear();
        s.s.resize(nk * rows, 0.0);
        let _ = kern.gemm_f32(&s.kf, (hd, 1), &s.qt, rows, &mut s.s, rows, (nk, hd, rows));
        if let Some(cap) = spec.softcap {
            let inv = 1.0 / cap;
            s.s.iter_mut().for_each(|v| *v = cap * tanh_fast(*v * inv));
        }
        // Mask keys after a row's position (causal) or before its window.
        let needs_mask = kb + nk - 1 > first || kb < unmasked_from;
        if needs_mask {
            for (i, srow) in s.s.chunks_exact_mut(rows).enumerate() {
                let j = kb + i;
                for (r, v) in srow.iter_mut().enumerate() {
                    let pos = first + r / group;
                    if j > pos || j < first_visible(pos, spec.window) {
                        *v = f32::NEG_INFINITY;
                    }
                }
            }
        }
        online_softmax(s, rows, o, hd);
        let (p, vf) = (&s.s, &s.vf);
        let _ = kern.gemm_f32(p, (1, rows), vf, hd, o, hd, (rows, nk, hd));
        kb += nk;
    }
}

/// Raises each row's running maximum to cover this tile's scores, turns
/// the scores into `exp(s - max)`, adds them to the running sums and
/// rescales the rows of `o` whose maximum moved. The loops run along query
/// rows, the contiguous direction of `s`, so they vectorize.
fn online_softmax(s: &mut Scratch, rows: usize, o: &mut [f32], hd: usize) {
    s.new_max.clear();
    s.new_max.extend_from_slice(&s.max);
    for srow in s.s.chunks_exact(rows) {
        for (m, &v) in s.new_max.iter_mut().zip(srow) {
            *m = m.max(v);
        }
    }
    s.alpha.clear();
    s.alpha
        .extend(s.max.iter().zip(&s.new_max).map(|(&old, &new)| {
            // A row with no visible key yet keeps max = -inf and factor 1.
            if new == f32::NEG_INFINITY {
                1.0
            } else {
                exp_fast(old - new)
            }
        }));
    s.max.copy_from_slice(&s.new_max);
    // From here `new_max` is the shift: rows still at -inf subtract 0, so
    // their masked scores give exp(-inf) = 0 rather than NaN.
    for m in s.new_max.iter_mut() {
        if *m == f32::NEG_INFINITY {
            *m = 0.0;
        }
    }
    for (z, &a) in s.sum.iter_mut().zip(&s.alpha) {
        *z *= a;
    }
    for srow in s.s.chunks_exact_mut(rows) {
        exp_shifted_add(srow, &s.new_max, &mut s.sum);
    }
    for (orow, &a) in o.chunks_exact_mut(hd).zip(&s.alpha) {
        if a != 1.0 {
            orow.iter_mut().for_each(|v| *v *= a);
        }
    }
}
