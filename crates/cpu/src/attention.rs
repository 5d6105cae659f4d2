//! The host side of attention, shared by every backend that runs attention
//! on the CPU (this crate's decoder and the ANE backend, whose programs
//! stop at the q/k/v projection): q/k norm and RoPE ([`encode_positions`]),
//! an f16 KV cache ([`KvCache`]), and attention over it ([`attend`]: GQA,
//! causal and sliding-window masks, optional score soft-cap, softmax in f32;
//! tiled with an online softmax for many queries, `tiled`).
//!
//! One step of an attention mixer over rows at positions `pos0..` is:
//! `encode_positions`, then `KvCache::store`, then `attend`.

use crate::kernels::{axpy, exp_fast, exp_scores, rms_norm_inplace, rope_cos_sin, rope_row};
use crate::qkernels::Kernels;
use anedvd_base::GgmlType;
use anedvd_graph::{Attention, Rope};
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;
use std::cell::RefCell;

mod tiled;

thread_local! {
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static HALF: RefCell<Vec<f16>> = const { RefCell::new(Vec::new()) };
}

/// Positions a sliding-window cache keeps below the oldest one its next
/// query can see, so that a sequence can step back this far (a rejected
/// speculative draft, a chat turn re-rendered from a few tokens back)
/// without losing rows it needs.
pub const WINDOW_REWIND: usize = 256;

/// Rows a sliding-window cache lets go stale before it drops them: the
/// kept rows move once per this many stored, (window + 256) / 64 row
/// moves per row stored (about 12 for Gemma 3), small beside computing it.
const WINDOW_SLACK: usize = 64;

/// Keys and values of one layer as little-endian f16 bytes, one contiguous
/// run of `head_dim`-wide rows per kv head (so a head's keys are a plain
/// matrix for the f16 row kernels).
///
/// A cache for a sliding-window layer ([`KvCache::windowed`]) keeps only
/// the rows its queries can still see plus [`WINDOW_REWIND`]: row 0 of its
/// buffers is position `base`, and older rows are dropped as new ones come
/// (at most `window + WINDOW_REWIND + WINDOW_SLACK` rows plus one forward
/// call's rows are held, whatever the context length).
#[derive(Default)]
pub struct KvCache {
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
    head_dim: usize,
    /// How rows are stored ([`KvType`]).
    kind: KvType,
    /// Position of the first row held.
    base: usize,
    /// The widest window of the layers reading this cache (`None`: some
    /// reader sees every position, so nothing is dropped).
    window: Option<usize>,
}

impl KvCache {
    /// An empty cache of `n_kv` heads of `head_dim` values per position,
    /// keeping every position.
    pub fn new(n_kv: usize, head_dim: usize) -> Self {
        Self::windowed(n_kv, head_dim, None)
    }

    /// An empty cache whose readers see at most `window` positions back
    /// (`None`: every position): older rows are dropped.
    pub fn windowed(n_kv: usize, head_dim: usize, window: Option<usize>) -> Self {
        Self {
            k: vec![Vec::new(); n_kv],
            v: vec![Vec::new(); n_kv],
            head_dim,
            kind: KvType::F16,
            base: 0,
            window,
        }
    }

    /// The cache storing its rows as `kind` (empty caches only; a head
    /// width `kind` cannot hold keeps f16, see [`KvType::holds`]).
    pub fn of_kind(mut self, kind: KvType) -> Self {
        if kind.holds(self.head_dim) && self.bytes() == 0 {
            self.kind = kind;
        }
        self
    }

    /// How rows are stored.
    pub fn kind(&self) -> KvType {
        self.kind
    }

    /// The element type rows are stored in.
    pub(crate) fn dtype(&self) -> GgmlType {
        self.kind.dtype()
    }

    /// Bytes of one row of one head.
    fn row_bytes(&self) -> usize {
        self.kind.row_bytes(self.head_dim)
    }

    /// Positions held (the next position to store).
    fn end(&self) -> usize {
        let held = self
            .k
            .first()
            .map_or(0, |k| k.len() / self.row_bytes().max(1));
        self.base + held
    }

    /// Bytes the cache holds (keys and values, every head).
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(Vec::len).sum()
    }

    /// The f16 key and value rows of kv head `kvh` at `positions` (which
    /// must be held: queries only ask for positions their window sees).
    pub(crate) fn rows(&self, kvh: usize, positions: std::ops::Range<usize>) -> (&[u8], &[u8]) {
        let rb = self.row_bytes();
        let span = (positions.start - self.base) * rb..(positions.end - self.base) * rb;
        (&self.k[kvh][span.clone()], &self.v[kvh][span])
    }

    /// Whether the cache can go back to `n` positions and continue: every
    /// row the query at `n` sees is still held (always, without a window).
    /// A cache of no heads (a layer reading another's) holds nothing to lose.
    pub fn can_rewind_to(&self, n: usize) -> bool {
        self.k.is_empty()
            || n == 0
            || (n <= self.end() && first_visible(n, self.window) >= self.base)
    }

    /// Drops rows no query from `pos` on can see, beyond the
    /// [`WINDOW_REWIND`] kept for stepping back; only once
    /// [`WINDOW_SLACK`] rows are stale, so rows move rarely.
    fn forget_before(&mut self, pos: usize) {
        let Some(window) = self.window else { return };
        let keep_from = first_visible(pos, Some(window))
            .saturating_sub(WINDOW_REWIND)
            .min(self.end());
        let stale = keep_from.saturating_sub(self.base);
        if stale < WINDOW_SLACK {
            return;
        }
        let cut = stale * self.row_bytes();
        for c in self.k.iter_mut().chain(self.v.iter_mut()) {
            c.drain(..cut.min(c.len()));
        }
        self.base = keep_from;
    }

    /// Writes `n_tok` rows of keys and values (`n_kv * head_dim` each) at
    /// positions `pos0..`, growing as needed. `pos0` is at most the
    /// positions held (the caller stores in order, after a truncation).
    pub fn store(&mut self, pos0: usize, k: &[f32], v: &[f32], n_tok: usize) {
        self.forget_before(pos0);
        let hd = self.head_dim;
        let dim = hd * self.k.len();
        let (base, rb, kind) = (self.base, self.row_bytes(), self.kind);
        HALF.with(|h| {
            let mut h = h.borrow_mut();
            h.resize(hd, f16::ZERO);
            for (src, heads) in [(k, &mut self.k), (v, &mut self.v)] {
                for (kvh, dst) in heads.iter_mut().enumerate() {
                    let end = (pos0 + n_tok - base) * rb;
                    dst.resize(end.max(dst.len()), 0);
                    for t in 0..n_tok {
                        let off = t * dim + kvh * hd;
                        let x = &src[off..off + hd];
                        let at = (pos0 - base + t) * rb;
                        let row = &mut dst[at..at + rb];
                        match kind {
                            KvType::F16 => {
                                h.convert_from_f32_slice(x);
                                for (b, x) in row.chunks_exact_mut(2).zip(h.iter()) {
                                    b.copy_from_slice(&x.to_le_bytes());
                                }
                            }
                            // `holds` checked the width: a whole number of blocks.
                            KvType::Q8_0 => {
                                let _ = anedvd_quant::quantize(GgmlType::Q8_0, x, row);
                            }
                        }
                    }
                }
            }
        });
    }

    /// The rows of every head at `positions`, if held.
    pub fn copy_rows(&self, positions: std::ops::Range<usize>) -> Option<KvRows> {
        // A cache of no heads (a layer reading another's) holds every
        // position trivially.
        if !self.k.is_empty() && (positions.start < self.base || positions.end > self.end()) {
            return None;
        }
        let rows = |heads: &[Vec<u8>]| -> Vec<Vec<u8>> {
            let rb = self.row_bytes();
            let span = (positions.start - self.base) * rb..(positions.end - self.base) * rb;
            heads.iter().map(|h| h[span.clone()].to_vec()).collect()
        };
        Some(KvRows {
            k: rows(&self.k),
            v: rows(&self.v),
            len: positions.len(),
        })
    }

    /// Appends `rows` (from [`Self::copy_rows`] of a cache of this shape)
    /// after the positions held; false, changing nothing, if the shape
    /// differs.
    pub fn append_rows(&mut self, rows: &KvRows) -> bool {
        let span = rows.len * self.row_bytes();
        let fits = |theirs: &[Vec<u8>]| {
            theirs.len() == self.k.len() && theirs.iter().all(|r| r.len() == span)
        };
        if !fits(&rows.k) || !fits(&rows.v) {
            return false;
        }
        for (dst, src) in self
            .k
            .iter_mut()
            .zip(&rows.k)
            .chain(self.v.iter_mut().zip(&rows.v))
        {
            dst.extend_from_slice(src);
        }
        let end = self.end();
        self.forget_before(end);
        true
    }

    /// Becomes the first `n` positions of `other` (same shape; keeps this
    /// cache's allocation where it is large enough). `other` must be able
    /// to go back to `n` ([`Self::can_rewind_to`]).
    pub fn copy_prefix_from(&mut self, other: &KvCache, n: usize) {
        debug_assert!(
            other.can_rewind_to(n),
            "copy of {n} from base {}",
            other.base
        );
        let held = n.saturating_sub(other.base) * other.row_bytes();
        self.head_dim = other.head_dim;
        self.kind = other.kind;
        self.base = if n == 0 { 0 } else { other.base.min(n) };
        self.window = other.window;
        self.k.resize(other.k.len(), Vec::new());
        self.v.resize(other.v.len(), Vec::new());
        for (dst, src) in self
            .k
            .iter_mut()
            .zip(&other.k)
            .chain(self.v.iter_mut().zip(&other.v))
        {
            dst.clear();
            if n > 0 {
                dst.extend_from_slice(&src[..held.min(src.len())]);
            }
        }
    }

    /// Forgets positions at and beyond `n` (keeps the allocation). Going
    /// back to 0 always works; elsewhere only as far as
    /// [`Self::can_rewind_to`] allows.
    pub fn truncate(&mut self, n: usize) {
        debug_assert!(
            self.can_rewind_to(n),
            "rewind to {n} from base {}",
            self.base
        );
        if n == 0 || n < self.base {
            // Nothing the query at `n` needs is held: hold nothing.
            self.base = 0;
            for c in self.k.iter_mut().chain(self.v.iter_mut()) {
                c.clear();
            }
            return;
        }
        let len = (n - self.base) * self.row_bytes();
        for c in self.k.iter_mut().chain(self.v.iter_mut()) {
            c.truncate(len);
        }
    }
}

/// How a [`KvCache`] stores keys and values (`--cache-type`, llama.cpp's
/// `-ctk`/`-ctv`): f16, or ggml's Q8_0 (blocks of 32 values sharing an f16
/// scale: 34 bytes per 32 values, 53% of f16).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KvType {
    /// Half precision.
    #[default]
    F16,
    /// 8-bit blocks with a scale each.
    Q8_0,
}

impl KvType {
    /// Parses `f16` or `q8_0`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "f16" => Some(Self::F16),
            "q8_0" => Some(Self::Q8_0),
            _ => None,
        }
    }

    /// The name `from_name` reads.
    pub fn name(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::Q8_0 => "q8_0",
        }
    }

    /// The ggml element type.
    pub fn dtype(self) -> GgmlType {
        match self {
            Self::F16 => GgmlType::F16,
            Self::Q8_0 => GgmlType::Q8_0,
        }
    }

    /// Whether rows of `head_dim` values can be stored this way (whole
    /// blocks of the type: 32 values for Q8_0).
    pub fn holds(self, head_dim: usize) -> bool {
        self.dtype().row_bytes(head_dim as u64).is_ok()
    }

    /// Bytes of one row of `head_dim` values (f16's for a width the type
    /// does not hold, which a cache then keeps: see [`Self::holds`]).
    pub fn row_bytes(self, head_dim: usize) -> usize {
        let f16 = 2 * head_dim;
        self.dtype()
            .row_bytes(head_dim as u64)
            .map_or(f16, |b| usize::try_from(b).unwrap_or(f16))
    }
}

/// Consecutive positions of a [`KvCache`] copied out: rows per head.
pub struct KvRows {
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
    len: usize,
}

impl KvRows {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(Vec::len).sum()
    }
}

/// The cos/sin of each distinct RoPE of a model (Gemma 3 has a local and a
/// global one) at every row position of a pass, computed once per pass.
#[derive(Default)]
pub struct RopeTables {
    tables: Vec<(Rope, Vec<(f32, f32)>)>,
    cs: Vec<(f32, f32)>,
}

impl RopeTables {
    /// Forgets the positions of the previous pass (keeps allocations).
    pub fn new_pass(&mut self) {
        self.tables.iter_mut().for_each(|(_, t)| t.clear());
    }

    /// `n_rot / 2` pairs per entry of `row_pos`, computed on first use in
    /// the pass.
    pub fn get(&mut self, rope: &Rope, row_pos: &[usize]) -> &[(f32, f32)] {
        let i = match self.tables.iter().position(|(r, _)| r == rope) {
            Some(i) => i,
            None => {
                self.tables.push((rope.clone(), Vec::new()));
                self.tables.len() - 1
            }
        };
        let table = &mut self.tables[i].1;
        if table.is_empty() {
            for &pos in row_pos {
                rope_cos_sin(rope, pos, &mut self.cs);
                table.extend_from_slice(&self.cs);
            }
        }
        table
    }
}

/// Per-head q/k RMS norms (`(q_norm, k_norm)` weights, if any) and RoPE
/// (none for a NoPE layer), in place, on rows of queries `q` (`q_dim`
/// wide) and keys `k` (`kv_dim` wide) at positions `row_pos`. `k` is empty
/// for a layer that reads another layer's (already encoded) keys.
pub fn encode_positions(
    attn: &Attention,
    (q_norm, k_norm): (Option<&[f32]>, Option<&[f32]>),
    eps: f32,
    q: &mut [f32],
    k: &mut [f32],
    tables: &mut RopeTables,
    row_pos: &[usize],
) {
    if let Some(w) = q_norm {
        rms_norm_inplace(q, w, eps);
    }
    if let Some(w) = k_norm {
        rms_norm_inplace(k, w, eps);
    }
    let Some(rope) = &attn.rope else { return };
    let (qd, kvd, hd) = (attn.q_dim(), attn.kv_dim(), attn.head_dim);
    let table = tables.get(rope, row_pos);
    let half = rope.n_rot / 2;
    let per_row = || table.chunks_exact(half.max(1)).take(row_pos.len());
    for (row, cs_t) in q.chunks_exact_mut(qd).zip(per_row()) {
        rope_row(row, hd, rope, cs_t);
    }
    for (row, cs_t) in k.chunks_exact_mut(kvd).zip(per_row()) {
        rope_row(row, hd, rope, cs_t);
    }
}

/// The window of the cache layer `il` keeps, given every layer's attention
/// (`None` for a layer without one): its own window, widened to that of
/// each layer reading its keys and values, `None` (every position) if any
/// of them sees every position.
pub fn cache_window(attns: &[Option<&Attention>], il: usize) -> Option<usize> {
    let own = attns.get(il).copied().flatten()?.window?;
    attns
        .iter()
        .flatten()
        .filter(|a| a.kv_source == Some(il))
        .try_fold(own, |w, a| a.window.map(|r| w.max(r)))
}

/// First key position a query at `pos` may see.
pub fn first_visible(pos: usize, window: Option<usize>) -> usize {
    match window {
        Some(w) => (pos + 1).saturating_sub(w),
        None => 0,
    }
}

/// Positions per task below which a single query's attention is not split.
const MIN_SPLIT: usize = 256;

/// Unnormalized attention of the `group` query heads in `qg` (each
/// `head_dim` wide, sharing kv head `kvh`, of a query at `pos`) over the cached positions
/// `range`: `o[g]` = `sum_j exp(s_gj - m_g) * v_j`, and `ms[2g..2g + 2] =
/// [m_g, sum_j exp(s_gj - m_g)]` with `s_gj` the scaled (and soft-capped)
/// scores.
#[allow(clippy::too_many_arguments)]
fn partial(
    kern: &Kernels,
    spec: &Attention,
    cache: &KvCache,
    qg: &[f32],
    (kvh, pos): (usize, usize),
    range: std::ops::Range<usize>,
    o: &mut [f32],
    ms: &mut [f32],
) {
    // Q8_0 rows are decoded a tile at a time for the f32 tile products.
    if cache.kind() != KvType::F16 {
        return tiled::partial_tiled(kern, spec, cache, qg, (kvh, pos), range, o, ms);
    }
    let hd = spec.head_dim;
    let rb = 2 * hd;
    let group = ms.len() / 2;
    let len = range.len();
    let (keys, values) = cache.rows(kvh, range);
    SCORES.with(|s| {
        let scores = &mut *s.borrow_mut();
        scores.resize(group * len, 0.0);
        // Each key row is decoded from f16 once for the whole group.
        kern.dot_f16_rows_multi(keys, rb, &qg[..group * hd], group, scores);
        for (sc, m) in scores.chunks_exact_mut(len).zip(ms.chunks_exact_mut(2)) {
            let (max, sum) = exp_scores(sc, spec.scale, spec.softcap);
            m[0] = max;
            m[1] = sum;
        }
        kern.weighted_sum_f16_multi(
            values,
            rb,
            &scores[..group * len],
            group,
            &mut o[..group * hd],
        );
    });
}

/// For each of `n_tok` queries (row-major `n_tok × n_head·head_dim`, query `t`
/// at position `pos0 + t`) computes `softmax(scale·q·K^T)·V` over the visible
/// cached positions into `out` (same layout as `q`). One task per (token, kv
/// head) serves the whole group of query heads sharing that kv head, so each
/// cached row is converted from f16 once per group. When there are fewer
/// such tasks than threads (decode) and many positions, the positions are
/// split across threads and the partial softmaxes merged (`part` is scratch).
/// From [`tiled::MIN_TOKENS`] queries on, where the CPU has a SIMD f32
/// tile product, the tiled (flash-style) path in [`tiled`] runs instead.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    kern: &Kernels,
    spec: &Attention,
    cache: &KvCache,
    q: &[f32],
    pos0: usize,
    n_tok: usize,
    out: &mut [f32],
    part: &mut Vec<f32>,
) {
    let hd = spec.head_dim;
    let group = spec.n_head / spec.n_head_kv;
    let n_kv = spec.n_head_kv;
    if tiled::applies(kern, n_tok) {
        return tiled::attend_tiled(kern, spec, cache, q, pos0, n_tok, out, part);
    }
    let threads = rayon::current_num_threads().max(1);
    let last = pos0 + n_tok - 1;
    let longest = last + 1 - first_visible(last, spec.window);
    let n_split = if n_tok * n_kv < threads {
        (longest / MIN_SPLIT).clamp(1, 2 * threads)
    } else {
        1
    };
    if n_split > 1 {
        return attend_split(kern, spec, cache, q, pos0, n_tok, out, part, n_split);
    }
    out[..n_tok * spec.n_head * hd]
        .par_chunks_mut(group * hd)
        .enumerate()
        .for_each(|(idx, o)| {
            let (t, kvh) = (idx / n_kv, idx % n_kv);
            let pos = pos0 + t;
            let lo = first_visible(pos, spec.window);
            // Query rows of this group are contiguous, like the output rows.
            let qg = &q[idx * group * hd..(idx + 1) * group * hd];
            let mut ms = [0.0f32; 32];
            let mut ms_vec;
            let ms: &mut [f32] = if 2 * group <= ms.len() {
                &mut ms[..2 * group]
            } else {
                ms_vec = vec![0.0; 2 * group];
                &mut ms_vec
            };
            partial(kern, spec, cache, qg, (kvh, pos), lo..pos + 1, o, ms);
            for (og, m) in o.chunks_exact_mut(hd).zip(ms.chunks_exact(2)) {
                let inv = 1.0 / m[1];
                og.iter_mut().for_each(|v| *v *= inv);
            }
        });
}

/// [`attend`] with each (token, kv head) task's positions cut into
/// `n_split` ranges computed in parallel, then merged.
#[allow(clippy::too_many_arguments)]
fn attend_split(
    kern: &Kernels,
    spec: &Attention,
    cache: &KvCache,
    q: &[f32],
    pos0: usize,
    n_tok: usize,
    out: &mut [f32],
    part: &mut Vec<f32>,
    n_split: usize,
) {
    let hd = spec.head_dim;
    let group = spec.n_head / spec.n_head_kv;
    let n_kv = spec.n_head_kv;
    let n_task = n_tok * n_kv;
    // Per (task, split): `group` partial outputs of `hd`, then `group` (m, sum).
    let stride = group * (hd + 2);
    part.resize(n_task * n_split * stride, 0.0);
    let range = |idx: usize, c: usize| {
        let pos = pos0 + idx / n_kv;
        let lo = first_visible(pos, spec.window);
        let len = pos + 1 - lo;
        let per = len.div_ceil(n_split);
        (lo + c * per).min(pos + 1)..(lo + (c + 1) * per).min(pos + 1)
    };
    part.par_chunks_mut(stride).enumerate().for_each(|(i, p)| {
        let (idx, c) = (i / n_split, i % n_split);
        let kvh = idx % n_kv;
        let qg = &q[idx * group * hd..(idx + 1) * group * hd];
        let (o, m) = p.split_at_mut(group * hd);
        let r = range(idx, c);
        if r.is_empty() {
            m.chunks_exact_mut(2).for_each(|x| {
                x[0] = f32::NEG_INFINITY;
                x[1] = 0.0;
            });
            o.fill(0.0);
            return;
        }
        partial(kern, spec, cache, qg, (kvh, pos0 + idx / n_kv), r, o, m);
    });
    let part = &part[..];
    for (idx, o) in out[..n_tok * spec.n_head * hd]
        .chunks_exact_mut(group * hd)
        .enumerate()
    {
        let parts = &part[idx * n_split * stride..(idx + 1) * n_split * stride];
        for (g, og) in o.chunks_exact_mut(hd).enumerate() {
            let stat = |p: &[f32]| (p[group * hd + 2 * g], p[group * hd + 2 * g + 1]);
            let max = parts
                .chunks_exact(stride)
                .map(|p| stat(p).0)
                .fold(f32::NEG_INFINITY, f32::max);
            og.fill(0.0);
            let mut sum = 0.0;
            for p in parts.chunks_exact(stride) {
                let (m, s) = stat(p);
                if s == 0.0 {
                    continue;
                }
                let w = exp_fast(m - max);
                sum += w * s;
                axpy(og, w, &p[g * hd..(g + 1) * hd]);
            }
            let inv = 1.0 / sum;
            og.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anedvd_graph::AttentionBias;

    fn spec(window: Option<usize>) -> Attention {
        Attention {
            n_head: 2,
            n_head_kv: 1,
            head_dim: 2,
            scale: 1.0,
            softcap: None,
            window,
            rope: None,
            kv_source: None,
            wq: String::new(),
            wk: String::new(),
            wv: String::new(),
            wo: String::new(),
            bias: AttentionBias::default(),
            q_norm: None,
            k_norm: None,
            v_norm: false,
        }
    }

    #[test]
    fn window_bounds() {
        assert_eq!(first_visible(0, Some(3)), 0);
        assert_eq!(first_visible(2, Some(3)), 0);
        assert_eq!(first_visible(3, Some(3)), 1);
        assert_eq!(first_visible(10, None), 0);
    }

    /// Decode over many positions takes the split path (positions across
    /// threads, partial softmaxes merged): compared with a direct f64
    /// softmax over the same f16-rounded keys and values.
    #[test]
    fn split_decode_matches_direct_softmax() {
        let (hd, n) = (8usize, 1000usize);
        let mut sp = spec(None);
        sp.head_dim = hd;
        sp.scale = 0.3;
        let f = |i: usize, k: f32| ((i as f32) * k).sin() * 2.0;
        // Keys grow with position so each split range has its own maximum.
        let k: Vec<f32> = (0..n * hd)
            .map(|i| f(i, 0.37) * (1.0 + (i / hd) as f32 / 300.0))
            .collect();
        let v: Vec<f32> = (0..n * hd).map(|i| f(i, 0.11)).collect();
        let mut cache = KvCache::new(1, hd);
        cache.store(0, &k, &v, n);
        let q: Vec<f32> = (0..2 * hd).map(|i| f(i, 0.7)).collect();
        let out = attended(&Kernels::detect(), &sp, &cache, &q, (n - 1, 1));
        assert_reference("split", (&sp, &cache, &q), (n - 1, 1), &out, 1e-4);
    }

    /// Direct f64 attention of query row `(t, h)` over the cache's rows as
    /// it holds them (f16, or Q8_0 decoded by ggml's dequantizer): the
    /// reference for every path.
    fn reference(
        sp: &Attention,
        cache: &KvCache,
        q: &[f32],
        pos: usize,
        t: usize,
        h: usize,
    ) -> Vec<f64> {
        let hd = sp.head_dim;
        let kvh = h / (sp.n_head / sp.n_head_kv);
        let decoded = |b: &[u8]| -> Vec<f64> {
            let mut out = vec![0f32; b.len() / cache.row_bytes() * hd];
            crate::decode_row(cache.dtype(), b, &mut out).unwrap();
            out.into_iter().map(f64::from).collect()
        };
        let (kf, vf) = (decoded(&cache.k[kvh]), decoded(&cache.v[kvh]));
        let qh = &q[(t * sp.n_head + h) * hd..][..hd];
        let lo = first_visible(pos, sp.window);
        let s: Vec<f64> = (lo..=pos)
            .map(|j| {
                let d: f64 = (0..hd).map(|i| f64::from(qh[i]) * kf[j * hd + i]).sum();
                let d = d * f64::from(sp.scale);
                match sp.softcap {
                    Some(c) => f64::from(c) * (d / f64::from(c)).tanh(),
                    None => d,
                }
            })
            .collect();
        let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = w.iter().sum();
        (0..hd)
            .map(|i| {
                (lo..=pos)
                    .zip(&w)
                    .map(|(j, w)| w * vf[j * hd + i])
                    .sum::<f64>()
                    / z
            })
            .collect()
    }

    /// [`attend`] into a fresh output (NaN where nothing was written), on a
    /// pool of two threads so the split decode path is taken.
    fn attended(
        kern: &Kernels,
        sp: &Attention,
        cache: &KvCache,
        q: &[f32],
        (pos0, n_tok): (usize, usize),
    ) -> Vec<f32> {
        let mut out = vec![f32::NAN; n_tok * sp.n_head * sp.head_dim];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build();
        let Ok(pool) = pool else { return out };
        pool.install(|| attend(kern, sp, cache, q, pos0, n_tok, &mut out, &mut Vec::new()));
        out
    }

    /// Asserts every query row of `out` is [`reference`] within `tol`.
    fn assert_reference(
        name: &str,
        (sp, cache, q): (&Attention, &KvCache, &[f32]),
        (pos0, n_tok): (usize, usize),
        out: &[f32],
        tol: f64,
    ) {
        let hd = sp.head_dim;
        for t in 0..n_tok {
            for h in 0..sp.n_head {
                let want = reference(sp, cache, q, pos0 + t, t, h);
                for (i, w) in want.iter().enumerate() {
                    let got = f64::from(out[(t * sp.n_head + h) * hd + i]);
                    assert!(
                        (got - w).abs() < tol,
                        "{name} n_tok {n_tok} t={t} h={h} i={i}: {got} vs {w}"
                    );
                }
            }
        }
    }

    /// Tiled attention (every kernel table, and `attend`'s own choice)
    /// against direct f64 softmax attention: GQA, causal and sliding
    /// masks, soft-cap, a chunk after cached positions, ragged tiles.
    #[test]
    fn tiled_matches_direct_softmax() {
        let f = |i: usize, k: f32| ((i as f32) * k).sin() * 2.0;
        for (n_head, n_kv, hd, window, softcap, pos0, n_tok) in [
            (8usize, 2usize, 16usize, None, None, 0usize, 37usize),
            (4, 1, 64, Some(50), None, 30, 70),
            (2, 2, 24, None, Some(3.0f32), 100, 5),
            (4, 1, 32, Some(7), Some(5.0), 0, 130),
        ] {
            let mut sp = spec(window);
            (sp.n_head, sp.n_head_kv, sp.head_dim, sp.softcap) = (n_head, n_kv, hd, softcap);
            sp.scale = 1.0 / (hd as f32).sqrt();
            let n = pos0 + n_tok;
            let kvd = n_kv * hd;
            let k: Vec<f32> = (0..n * kvd).map(|i| f(i, 0.37) * 1.5).collect();
            let v: Vec<f32> = (0..n * kvd).map(|i| f(i, 0.11)).collect();
            let mut cache = KvCache::new(n_kv, hd);
            cache.store(0, &k, &v, n);
            let q: Vec<f32> = (0..n_tok * n_head * hd).map(|i| f(i, 0.7)).collect();
            let mut runs: Vec<(String, Vec<f32>)> = Vec::new();
            for kern in Kernels::available() {
                let mut out = vec![f32::NAN; n_tok * n_head * hd];
                tiled::attend_tiled(
                    &kern,
                    &sp,
                    &cache,
                    &q,
                    pos0,
                    n_tok,
                    &mut out,
                    &mut Vec::new(),
                );
                runs.push((format!("tiled {kern:?}"), out));
                let out = attended(&kern, &sp, &cache, &q, (pos0, n_tok));
                runs.push((format!("attend {kern:?}"), out));
            }
            for (name, out) in &runs {
                let name = format!("{name} heads {n_head}/{n_kv}");
                assert_reference(&name, (&sp, &cache, &q), (pos0, n_tok), out, 2e-5);
            }
        }
    }

    /// A sliding-window cache drops rows no query can see, yet attention
    /// over it is bit-identical to attention over a cache of every
    /// position, through prefill chunks, decode steps and a step back
    /// within [`WINDOW_REWIND`]; it holds a bounded number of rows, and
    /// refuses to go back further than it holds.
    #[test]
    fn windowed_cache_matches_full_cache_and_stays_bounded() {
        let (hd, window) = (16usize, 40usize);
        let mut sp = spec(Some(window));
        (sp.n_head, sp.n_head_kv, sp.head_dim) = (4, 2, hd);
        sp.scale = 0.25;
        let kvd = 2 * hd;
        let f = |i: usize, k: f32| ((i as f32) * k).sin() * 2.0;
        let mut full = KvCache::new(2, hd);
        let mut ring = KvCache::windowed(2, hd, Some(window));
        let kern = Kernels::detect();
        let (mut pos, mut step, mut peak) = (0usize, 0usize, 0usize);
        while pos < 3000 {
            // Prefill-sized chunks, then single decode steps; one step back
            // of 20 positions every 500.
            let n = if pos < 1500 { 1 + (step * 37) % 90 } else { 1 };
            if step % 50 == 49 {
                pos -= 20;
                assert!(ring.can_rewind_to(pos), "rewind to {pos}");
                full.truncate(pos);
                ring.truncate(pos);
            }
            let k: Vec<f32> = (0..n * kvd).map(|i| f(i + 7 * pos, 0.37)).collect();
            let v: Vec<f32> = (0..n * kvd).map(|i| f(i + 5 * pos, 0.11)).collect();
            full.store(pos, &k, &v, n);
            ring.store(pos, &k, &v, n);
            let q: Vec<f32> = (0..n * 4 * hd).map(|i| f(i + pos, 0.7)).collect();
            let a = attended(&kern, &sp, &full, &q, (pos, n));
            let b = attended(&kern, &sp, &ring, &q, (pos, n));
            assert!(a.iter().all(|x| x.is_finite()), "pos {pos} n {n}");
            assert_eq!(a, b, "pos {pos} n {n}");
            pos += n;
            step += 1;
            peak = peak.max(ring.bytes());
        }
        let row = 2 * 2 * hd * 2;
        assert!(
            peak <= (window + WINDOW_REWIND + WINDOW_SLACK + 90) * row,
            "peak {peak} bytes"
        );
        assert_eq!(full.bytes(), pos * row);
        assert!(!ring.can_rewind_to(pos - window - WINDOW_REWIND - WINDOW_SLACK - 1));
        assert!(ring.can_rewind_to(0) && ring.can_rewind_to(pos));
        ring.truncate(0);
        assert_eq!(ring.bytes(), 0);
        assert!(ring.can_rewind_to(0) && !ring.can_rewind_to(1));
    }

    /// A Q8_0 cache: attention (the tiled path for a chunk, the split path
    /// for one query over many positions) equals direct f64 softmax
    /// attention over the rows as the cache holds them (decoded by ggml's
    /// Q8_0 dequantizer), and holds 34 bytes per 32 values.
    #[test]
    fn q8_0_cache_matches_direct_softmax_over_its_rows() {
        let f = |i: usize, k: f32| ((i as f32) * k).sin() * 2.0;
        let (n_head, n_kv, hd) = (4usize, 2usize, 64usize);
        let mut sp = spec(Some(700));
        (sp.n_head, sp.n_head_kv, sp.head_dim) = (n_head, n_kv, hd);
        sp.scale = 1.0 / (hd as f32).sqrt();
        let n = 1200;
        let kvd = n_kv * hd;
        let k: Vec<f32> = (0..n * kvd).map(|i| f(i, 0.37) * 1.5).collect();
        let v: Vec<f32> = (0..n * kvd).map(|i| f(i, 0.11)).collect();
        let mut cache = KvCache::windowed(n_kv, hd, None).of_kind(KvType::Q8_0);
        assert_eq!(cache.kind(), KvType::Q8_0);
        cache.store(0, &k, &v, n);
        assert_eq!(cache.bytes(), 2 * n_kv * n * hd / 32 * 34);
        for (pos0, n_tok) in [(n - 1, 1usize), (900, 37)] {
            let q: Vec<f32> = (0..n_tok * n_head * hd).map(|i| f(i, 0.7)).collect();
            for kern in Kernels::available() {
                let out = attended(&kern, &sp, &cache, &q, (pos0, n_tok));
                let name = format!("{kern:?}");
                assert_reference(&name, (&sp, &cache, &q), (pos0, n_tok), &out, 2e-5);
            }
        }
        // A width Q8_0 cannot hold stays f16.
        assert_eq!(
            KvCache::new(1, 48).of_kind(KvType::Q8_0).kind(),
            KvType::F16
        );
    }

    /// The window a cache keeps is the widest of its readers'.
    #[test]
    fn cache_window_covers_every_reader() {
        let (w4, w8, full) = (spec(Some(4)), spec(Some(8)), spec(None));
        let mut reads0 = spec(Some(8));
        reads0.kv_source = Some(0);
        let mut full_reads0 = spec(None);
        full_reads0.kv_source = Some(0);
        assert_eq!(cache_window(&[Some(&w4), None, Some(&w8)], 0), Some(4));
        assert_eq!(cache_window(&[Some(&w4), Some(&reads0)], 0), Some(8));
        assert_eq!(cache_window(&[Some(&w4), Some(&full_reads0)], 0), None);
        assert_eq!(cache_window(&[Some(&full), Some(&reads0)], 0), None);
        assert_eq!(cache_window(&[None, Some(&w4)], 0), None);
    }

    #[allow(clippy::unwrap_used)]
    /// With zero queries every visible position gets equal weight, so the
    /// output is the mean of the visible values: this checks both masks.
    #[test]
    fn causal_and_sliding_masks_average_visible_values() {
        let mut cache = KvCache::new(1, 2);
        let k = vec![0.0; 10];
        let v: Vec<f32> = (0..5).flat_map(|p| [p as f32, 10.0 * p as f32]).collect();
        cache.store(0, &k, &v, 5);
        let q = vec![0.0; 5 * 4];
        let out = attended(&Kernels::detect(), &spec(None), &cache, &q, (0, 5));
        for t in 0..5usize {
            let mean = (0..=t).map(|p| p as f32).sum::<f32>() / (t + 1) as f32;
            for h in 0..2 {
                assert!((out[t * 4 + h * 2] - mean).abs() < 1e-5, "t={t}");
                assert!((out[t * 4 + h * 2 + 1] - 10.0 * mean).abs() < 1e-3);
            }
        }
        let out = attended(&Kernels::detect(), &spec(Some(2)), &cache, &q, (0, 5));
        for t in 0..5usize {
            let lo = t.saturating_sub(1);
            let mean = (lo..=t).map(|p| p as f32).sum::<f32>() / (t - lo + 1) as f32;
            assert!((out[t * 4] - mean).abs() < 1e-5, "t={t}");
        }
    }
}
