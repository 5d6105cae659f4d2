//! What a sequence keeps between forward calls: per layer a KV cache or a
//! short-convolution history, its position, and snapshots of the
//! convolution states (recurrent state cannot be cut back like a KV
//! cache). Shared by this crate's decoder and the ANE backend's host side.

use crate::attention::KvCache;
use crate::conv::ConvHistory;

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

    /// The most positions [`Self::truncate`]`(n)` keeps: `min(n, pos)`
    /// without recurrent state; with it, the latest position at or before
    /// `n` whose state every conv layer still holds or a snapshot has (0
    /// at worst).
    pub fn reusable(&self, n: usize) -> usize {
        let n = n.min(self.pos);
        if !self.recurrent() || self.convs().all(|h| h.can_rewind_to(n)) {
            return n;
        }
        self.snapshots
            .iter()
            .map(|s| s.pos)
            .filter(|p| *p <= n)
            .max()
            .unwrap_or(0)
    }

    /// Whether [`Self::copy_prefix_from`] copies (not with recurrent state).
    pub fn can_copy_prefix(&self) -> bool {
        !self.recurrent()
    }

    /// Becomes a copy of the first `n` positions of `other` (at most its
    /// own); returns the positions copied. Sequences with recurrent state
    /// copy nothing (0: their state at `n` may be gone) and stay as they were.
    pub fn copy_prefix_from(&mut self, other: &SeqState, n: usize) -> usize {
        let n = n.min(other.pos);
        if n == 0 || self.recurrent() || other.recurrent() {
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
