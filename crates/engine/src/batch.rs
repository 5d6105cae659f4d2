//! Several sequences advancing in one forward pass, each remembering the
//! token ids its KV cache holds (so a new prompt that shares a prefix with a
//! sequence's cached tokens only prefills the rest).

use crate::Result;
use anedvd_graph::{BatchItem, BatchSession};

/// A backend batch session plus the tokens each sequence holds.
pub struct EngineBatch {
    inner: Box<dyn BatchSession>,
    cached: Vec<Vec<u32>>,
}

impl EngineBatch {
    /// Wraps a fresh backend batch session.
    pub fn new(inner: Box<dyn BatchSession>) -> Self {
        let cached = vec![Vec::new(); inner.n_seqs()];
        Self { inner, cached }
    }

    /// Number of sequences.
    pub fn n_seqs(&self) -> usize {
        self.cached.len()
    }

    /// Capacity of each sequence in positions.
    pub fn max_seq(&self) -> usize {
        self.inner.max_seq()
    }

    /// Positions held by sequence `seq`.
    pub fn position(&self, seq: usize) -> usize {
        self.inner.position(seq)
    }

    /// The token ids sequence `seq` holds, oldest first.
    pub fn cached_tokens(&self, seq: usize) -> &[u32] {
        self.cached.get(seq).map_or(&[], |c| c.as_slice())
    }

    /// Keeps the longest prefix of sequence `seq` shared with `prompt` that
    /// the backend can return to ([`BatchSession::reusable`]), but always
    /// leaves at least one prompt token to run (its logits start
    /// generation). Returns how many prompt tokens were reused.
    pub fn reuse_prefix(&mut self, seq: usize, prompt: &[u32]) -> usize {
        let keep = reusable_prefix(self.cached_tokens(seq), prompt);
        self.truncate(seq, keep)
    }

    /// The prompt tokens sequence `seq` would reuse for `prompt` (for
    /// choosing a slot without touching it).
    pub fn reusable_for(&self, seq: usize, prompt: &[u32]) -> usize {
        let keep = reusable_prefix(self.cached_tokens(seq), prompt);
        self.inner.reusable(seq, keep)
    }

    /// How many of `prompt`'s tokens sequence `src` holds and could give to
    /// another sequence by [`Self::copy_prefix`] (never the whole prompt).
    pub fn shareable_for(&self, src: usize, prompt: &[u32]) -> usize {
        reusable_prefix(self.cached_tokens(src), prompt)
    }

    /// Whether [`Self::copy_prefix`] can copy at all on this backend.
    pub fn can_copy_prefix(&self) -> bool {
        self.inner.can_copy_prefix()
    }

    /// Gives sequence `dst` the prefix of `prompt` that sequence `src`
    /// holds ([`BatchSession::copy_prefix`]); returns the prompt tokens
    /// `dst` now holds (0: the backend cannot copy, `dst` unchanged).
    pub fn copy_prefix(&mut self, src: usize, dst: usize, prompt: &[u32]) -> usize {
        let n = self.shareable_for(src, prompt);
        if n == 0 || src == dst {
            return 0;
        }
        let copied = self.inner.copy_prefix(src, dst, n);
        if copied > 0 {
            let tokens = self.cached[src][..copied].to_vec();
            self.cached[dst] = tokens;
        }
        copied
    }

    /// Drops positions at or beyond `n` of sequence `seq`; returns the
    /// positions kept (fewer where recurrent state has no snapshot at `n`).
    pub fn truncate(&mut self, seq: usize, n: usize) -> usize {
        self.inner.truncate(seq, n);
        let kept = self.inner.position(seq);
        if let Some(c) = self.cached.get_mut(seq) {
            c.truncate(kept);
        }
        kept
    }

    /// Runs one batched forward pass; see [`BatchSession::forward`].
    pub fn forward(&mut self, items: &[BatchItem<'_>]) -> Result<&mut [f32]> {
        let out = self.inner.forward(items)?;
        for item in items {
            self.cached[item.seq].extend_from_slice(item.tokens);
        }
        Ok(out)
    }
}

/// Cached tokens a new `prompt` can keep: the common prefix, but never the
/// whole prompt (its last token must run so its logits start generation).
pub(crate) fn reusable_prefix(cached: &[u32], prompt: &[u32]) -> usize {
    common_prefix(cached, prompt).min(prompt.len().saturating_sub(1))
}

/// Length of the common prefix of `a` and `b`.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
