//! What a sequence keeps between forward calls: per layer a KV cache or a
//! short-convolution history, its position, and snapshots of the
//! convolution states (recurrent state cannot be cut back like a KV
//! cache). Shared by this crate's decoder and the ANE backend's host side.

use crate::attention::{KvCache, KvRows};
use crate::conv::ConvHistory;
use anedvd_graph::SavedRows;

/// What one layer keeps per sequence.
pub enum LayerCache {
    /// Keys and values of an attention layer.
    Kv(KvCache),
    /// Recent gated inputs of a short-convolution layer.
    Conv(ConvHistory),
}

/// The convolution states of every conv layer at one position.
struct Snapshot {
    pos: usize,
    states: Vec<Vec<f32>>,
}

/// Snapshots kept per sequence (around its latest multi-token forward
/// calls: prompt boundaries, where chat turns and repeated prompts come
/// back to; three per call).
const SNAPSHOTS: usize = 12;

/// One layer's share of [`SavedSeqRows`].
enum SavedLayer {
    Kv(KvRows),
    /// The convolution state at the end of the rows, if it was held.
    Conv(Option<Vec<f32>>),
}

/// Consecutive positions of a sequence's caches copied out
/// ([`SeqState::save_rows`]), to be loaded into a sequence later.
pub struct SavedSeqRows {
    layers: Vec<SavedLayer>,
}

impl SavedSeqRows {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                SavedLayer::Kv(rows) => rows.bytes(),
                SavedLayer::Conv(state) => state.as_ref().map_or(0, |s| 4 * s.len()),
            })
            .sum()
    }

    /// Whether a sequence can continue from the end of these rows: every
    /// convolution layer's state there was saved.
    pub fn resumable(&self) -> bool {
        self.layers
            .iter()
            .all(|l| !matches!(l, SavedLayer::Conv(None)))
    }
}

/// The caches and position of one sequence.
pub struct SeqState {
    /// Positions held.
    pub pos: usize,
    /// One cache per layer.
    pub layers: Vec<LayerCache>,
    snapshots: Vec<Snapshot>,
}

impl SeqState {
    /// An empty sequence with these per-layer caches (all empty).
    pub fn from_layers(layers: Vec<LayerCache>) -> Self {
        Self {
            pos: 0,
            layers,
            snapshots: Vec::new(),
        }
    }

    fn convs(&self) -> impl Iterator<Item = &ConvHistory> {
        self.layers.iter().filter_map(|c| match c {
            LayerCache::Conv(h) => Some(h),
            LayerCache::Kv(_) => None,
        })
    }

    /// Whether some layer carries recurrent state.
    fn recurrent(&self) -> bool {
        self.convs().next().is_some()
    }

    /// Before a forward call of `n` tokens: a multi-token call (a prompt)
    /// snapshots its start, where a later chat turn comes back to (and
    /// where a failed call rolls back to).
    pub fn begin_forward(&mut self, n: usize) {
        if n > 1 {
            self.snapshot_at(self.pos);
        }
    }

    /// After a forward call of `n` tokens succeeded: advances the position;
    /// a multi-token call snapshots its last two positions (a repeated
    /// prompt re-runs its last token from there).
    pub fn end_forward(&mut self, n: usize) {
        self.pos += n;
        if n > 1 {
            self.snapshot_at(self.pos - 1);
            self.snapshot_at(self.pos);
        }
    }

    /// Remembers the convolution states at position `p` if every conv
    /// layer still holds them (no-op without recurrent state, for 0, or for
    /// a position already kept).
    fn snapshot_at(&mut self, p: usize) {
        if !self.recurrent() || p == 0 || self.snapshots.iter().any(|s| s.pos == p) {
            return;
        }
        let Some(states) = self
            .convs()
            .map(|h| h.state_at(p).map(<[f32]>::to_vec))
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        if self.snapshots.len() == SNAPSHOTS {
            self.snapshots.remove(0);
        }
        self.snapshots.push(Snapshot { pos: p, states });
    }

    fn kvs(&self) -> impl Iterator<Item = &KvCache> {
        self.layers.iter().filter_map(|c| match c {
            LayerCache::Kv(kv) => Some(kv),
            LayerCache::Conv(_) => None,
        })
    }

    /// The most positions [`Self::truncate`]`(n)` keeps: the latest
    /// position at or before `min(n, pos)` that every layer can continue
    /// from (0 at worst). A KV cache can go back to any position it holds,
    /// except that a sliding-window cache keeps only [`crate::attention::WINDOW_REWIND`]
    /// positions behind its window; a conv layer to a position it still
    /// holds the state of, or one a snapshot has.
    pub fn reusable(&self, n: usize) -> usize {
        let n = n.min(self.pos);
        let conv_ok = |p: usize| {
            self.convs().all(|h| h.can_rewind_to(p)) || self.snapshots.iter().any(|s| s.pos == p)
        };
        let mut snapshots: Vec<usize> = self
            .snapshots
            .iter()
            .map(|s| s.pos)
            .filter(|&p| p < n)
            .collect();
        snapshots.sort_unstable_by(|a, b| b.cmp(a));
        std::iter::once(n)
            .chain(snapshots)
            .find(|&p| conv_ok(p) && self.kvs().all(|kv| kv.can_rewind_to(p)))
            .unwrap_or(0)
    }

    /// Whether [`Self::copy_prefix_from`] copies (not with recurrent state).
    pub fn can_copy_prefix(&self) -> bool {
        !self.recurrent()
    }

    /// Becomes a copy of the first `n` positions of `other` (at most what
    /// `other` can go back to, [`Self::reusable`]); returns the positions
    /// copied. Sequences with recurrent state copy nothing (0: their state
    /// at `n` may be gone) and stay as they were.
    pub fn copy_prefix_from(&mut self, other: &SeqState, n: usize) -> usize {
        if self.recurrent() || other.recurrent() {
            return 0;
        }
        let n = other.reusable(n);
        if n == 0 {
            return 0;
        }
        for (mine, theirs) in self.layers.iter_mut().zip(&other.layers) {
            if let (LayerCache::Kv(dst), LayerCache::Kv(src)) = (mine, theirs) {
                dst.copy_prefix_from(src, n);
            }
        }
        self.snapshots.clear();
        self.pos = n;
        n
    }

    /// Copies positions `range` of every KV cache out, with each
    /// convolution layer's state at `range.end` where it is still held (or
    /// a snapshot has it); `None` if a KV cache no longer holds the rows.
    pub fn save_rows(&self, range: std::ops::Range<usize>) -> Option<SavedSeqRows> {
        if range.is_empty() || range.end > self.pos {
            return None;
        }
        let end = range.end;
        let snapshot = self.snapshots.iter().find(|s| s.pos == end);
        let mut conv_index = 0;
        let mut layers = Vec::with_capacity(self.layers.len());
        for c in &self.layers {
            layers.push(match c {
                LayerCache::Kv(kv) => SavedLayer::Kv(kv.copy_rows(range.clone())?),
                LayerCache::Conv(h) => {
                    let state = h
                        .state_at(end)
                        .map(<[f32]>::to_vec)
                        .or_else(|| snapshot.and_then(|s| s.states.get(conv_index).cloned()));
                    conv_index += 1;
                    SavedLayer::Conv(state)
                }
            });
        }
        Some(SavedSeqRows { layers })
    }

    /// Becomes `blocks` (saved from consecutive ranges starting at 0 of a
    /// sequence of this model) and nothing else; returns the positions
    /// held: all of theirs, or 0 (then the sequence is empty) if a block's
    /// layout differs or the last one is not resumable.
    pub fn load_rows(&mut self, blocks: &[&SavedSeqRows]) -> usize {
        self.truncate(0);
        let Some(last) = blocks.last() else { return 0 };
        if !last.resumable() {
            return 0;
        }
        let mut pos = 0;
        for block in blocks {
            if block.layers.len() != self.layers.len() {
                self.truncate(0);
                return 0;
            }
            let mut len = None;
            for (mine, saved) in self.layers.iter_mut().zip(&block.layers) {
                let ok = match (mine, saved) {
                    (LayerCache::Kv(kv), SavedLayer::Kv(rows)) => {
                        len.get_or_insert(rows.len()) == &rows.len() && kv.append_rows(rows)
                    }
                    (LayerCache::Conv(_), SavedLayer::Conv(_)) => true,
                    _ => false,
                };
                if !ok {
                    self.truncate(0);
                    return 0;
                }
            }
            pos += len.unwrap_or(0);
        }
        if pos == 0 {
            return 0;
        }
        for (mine, saved) in self.layers.iter_mut().zip(&last.layers) {
            if let (LayerCache::Conv(h), SavedLayer::Conv(Some(state))) = (mine, saved) {
                h.restore(pos, state);
            }
        }
        self.pos = pos;
        pos
    }

    /// [`Self::save_rows`] for a backend's [`BatchSession::save_rows`].
    ///
    /// [`BatchSession::save_rows`]: anedvd_graph::BatchSession::save_rows
    pub fn save(&self, range: std::ops::Range<usize>) -> Option<SavedRows> {
        let rows = self.save_rows(range)?;
        Some(SavedRows {
            bytes: rows.bytes(),
            resumable: rows.resumable(),
            rows: Box::new(rows),
        })
    }

    /// [`Self::load_rows`] of `blocks` saved by [`Self::save`] (rows of
    /// another backend, or more than `max_seq` positions, load nothing).
    pub fn load(&mut self, blocks: &[&SavedRows], max_seq: usize) -> usize {
        let saved: Option<Vec<&SavedSeqRows>> = blocks
            .iter()
            .map(|b| b.rows.downcast_ref::<SavedSeqRows>())
            .collect();
        let Some(saved) = saved else {
            self.truncate(0);
            return 0;
        };
        let n = self.load_rows(&saved);
        if n > max_seq {
            self.truncate(0);
            return 0;
        }
        n
    }

    /// Bytes held by the KV caches.
    pub fn kv_bytes(&self) -> usize {
        self.kvs().map(KvCache::bytes).sum()
    }

    /// Forgets positions at and beyond [`Self::reusable`]`(n)`.
    pub fn truncate(&mut self, n: usize) {
        let keep = self.reusable(n);
        let rewound = self.layers.iter_mut().all(|c| match c {
            LayerCache::Conv(h) => h.rewind_to(keep),
            LayerCache::Kv(_) => true,
        });
        if !rewound {
            if let Some(s) = self.snapshots.iter().find(|s| s.pos == keep) {
                let mut states = s.states.iter();
                for c in &mut self.layers {
                    if let LayerCache::Conv(h) = c {
                        if let Some(st) = states.next() {
                            h.restore(keep, st);
                        }
                    }
                }
            }
        }
        self.snapshots.retain(|s| s.pos <= keep);
        for c in &mut self.layers {
            if let LayerCache::Kv(kv) = c {
                kv.truncate(keep);
            }
        }
        self.pos = keep;
    }
}
