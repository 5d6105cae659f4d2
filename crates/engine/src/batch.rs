//! Several sequences advancing in one forward pass, each remembering the
//! token ids its KV cache holds (so a new prompt that shares a prefix with a
//! sequence's cached tokens only prefills the rest), and optionally a
//! [`PrefixCache`] of blocks every sequence saves into and loads from.

use crate::prefix_cache::{chain_keys, PrefixCache, PrefixStats, BLOCK};
use crate::Result;
use anedvd_graph::{BatchItem, BatchSession};

/// A backend batch session plus the tokens each sequence holds.
pub struct EngineBatch {
    inner: Box<dyn BatchSession>,
    cached: Vec<Vec<u32>>,
    prefix: Option<PrefixCache>,
    /// Per sequence: positions whose blocks are in the prefix cache (or
    /// were given up on), a multiple of [`BLOCK`].
    saved: Vec<usize>,
}

impl EngineBatch {
    /// Wraps a fresh backend batch session.
    pub fn new(inner: Box<dyn BatchSession>) -> Self {
        let cached = vec![Vec::new(); inner.n_seqs()];
        let saved = vec![0; cached.len()];
        Self {
            inner,
            cached,
            prefix: None,
            saved,
        }
    }

    /// Adds a prefix cache of at most `budget` bytes (0: none): every full
    /// block of [`BLOCK`] tokens a sequence computes is saved, and
    /// [`Self::load_cached_prefix`] gives a sequence the longest cached
    /// prefix of a prompt.
    pub fn with_prefix_cache(mut self, budget: usize) -> Self {
        self.prefix = (budget > 0).then(|| PrefixCache::new(budget));
        self
    }

    /// The prefix cache's figures (`None` without one).
    pub fn prefix_stats(&self) -> Option<PrefixStats> {
        self.prefix.as_ref().map(PrefixCache::stats)
    }

    /// Prompt tokens the prefix cache can give a sequence for `prompt`
    /// (whole blocks, never the whole prompt); counts a lookup.
    pub fn prefix_lookup(&mut self, prompt: &[u32]) -> usize {
        self.save_pending();
        let Some(cache) = self.prefix.as_mut() else {
            return 0;
        };
        cache.count_lookup();
        cache.lookup(prompt) * BLOCK
    }

    /// Makes sequence `seq` hold the longest prefix of `prompt` the prefix
    /// cache has (what it held is dropped); returns the prompt tokens it
    /// now holds (0: nothing cached or the backend refused the rows).
    pub fn load_cached_prefix(&mut self, seq: usize, prompt: &[u32]) -> usize {
        if seq >= self.cached.len() {
            return 0;
        }
        self.save_blocks(seq, usize::MAX);
        let Some(cache) = self.prefix.as_mut() else {
            return 0;
        };
        let blocks = cache.lookup(prompt);
        if blocks == 0 {
            return 0;
        }
        let Some(rows) = cache.take(prompt, blocks) else {
            return 0;
        };
        let loaded = self.inner.load_rows(seq, &rows);
        // A refused load leaves the sequence empty.
        let held = self.inner.position(seq).min(loaded).min(prompt.len());
        if held > 0 {
            cache.count_hit(held);
        }
        self.cached[seq] = prompt[..held].to_vec();
        self.saved[seq] = held / BLOCK * BLOCK;
        held
    }

    /// Saves every sequence's new full blocks into the prefix cache, before
    /// a forward pass or an admission can change the caches, so that each
    /// block is saved while its rows are held (a sliding-window cache drops
    /// old rows in the next forward pass).
    fn save_pending(&mut self) {
        for seq in 0..self.cached.len() {
            self.save_blocks(seq, usize::MAX);
        }
    }

    /// Saves the full blocks below position `upto` that sequence `seq`
    /// holds and the prefix cache lacks (or holds without the recurrent
    /// state a sequence resumes from); stops at a block the backend can no
    /// longer give.
    fn save_blocks(&mut self, seq: usize, upto: usize) {
        let Some(cache) = self.prefix.as_mut() else {
            return;
        };
        let held = self.inner.position(seq).min(upto);
        let tokens = &self.cached[seq][..held.min(self.cached[seq].len())];
        let n = tokens.len() / BLOCK;
        let first = self.saved[seq] / BLOCK;
        if first >= n {
            return;
        }
        let keys = chain_keys(tokens, n);
        for i in first..n {
            let range = i * BLOCK..(i + 1) * BLOCK;
            if cache.needs_state(&keys, tokens, i) {
                if let Some(rows) = self.inner.save_rows(seq, range) {
                    cache.upgrade(&keys, tokens, i, rows);
                }
                continue;
            }
            if cache.contains(&keys, tokens, i) {
                cache.touch(&keys, i);
                continue;
            }
            let stored = self
                .inner
                .save_rows(seq, range)
                .is_some_and(|rows| cache.insert(&keys, tokens, i, rows));
            if !stored {
                break;
            }
        }
        // Blocks not stored now will not be: their rows may be gone.
        self.saved[seq] = n * BLOCK;
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

    /// Bytes the KV caches of every sequence hold now
    /// ([`BatchSession::cache_bytes`]).
    pub fn cache_bytes(&self) -> usize {
        self.inner.cache_bytes()
    }

    /// The token ids sequence `seq` holds, oldest first.
    pub fn cached_tokens(&self, seq: usize) -> &[u32] {
        let held = self.inner.position(seq);
        self.cached
            .get(seq)
            .map_or(&[], |c| &c[..held.min(c.len())])
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

    /// How many of `prompt`'s tokens sequence `src` holds (never the whole
    /// prompt).
    pub fn shareable_for(&self, src: usize, prompt: &[u32]) -> usize {
        reusable_prefix(self.cached_tokens(src), prompt)
    }

    /// How many of `prompt`'s tokens [`Self::copy_prefix`] could give
    /// another sequence from `src`: what it holds and can still go back to
    /// (a sliding-window cache far past the shared part cannot), 0 where
    /// the backend cannot copy.
    pub fn copyable_for(&self, src: usize, prompt: &[u32]) -> usize {
        if !self.can_copy_prefix() {
            return 0;
        }
        self.inner.reusable(src, self.shareable_for(src, prompt))
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
        self.save_blocks(dst, usize::MAX);
        let copied = self.inner.copy_prefix(src, dst, n);
        if copied > 0 {
            let tokens = self.cached[src][..copied].to_vec();
            self.cached[dst] = tokens;
            self.saved[dst] = copied / BLOCK * BLOCK;
        }
        copied
    }

    /// Drops positions at or beyond `n` of sequence `seq`; returns the
    /// positions kept (fewer where recurrent state has no snapshot at `n`).
    pub fn truncate(&mut self, seq: usize, n: usize) -> usize {
        // Blocks past `n` (rejected drafts) are not worth keeping.
        self.save_blocks(seq, n);
        self.inner.truncate(seq, n);
        self.sync(seq)
    }

    /// Trims sequence `seq`'s tokens (and saved blocks) to the positions
    /// the backend holds; returns them.
    fn sync(&mut self, seq: usize) -> usize {
        let kept = self.inner.position(seq);
        if let Some(c) = self.cached.get_mut(seq) {
            c.truncate(kept);
        }
        if let Some(s) = self.saved.get_mut(seq) {
            *s = (*s).min(kept / BLOCK * BLOCK);
        }
        kept
    }

    /// Runs one batched forward pass; see [`BatchSession::forward`].
    pub fn forward(&mut self, items: &[BatchItem<'_>]) -> Result<&mut [f32]> {
        // A failed call may not have gone back to where it started (a
        // sliding-window cache that dropped rows goes back to 0): the
        // backend's positions say what is held.
        for item in items {
            self.sync(item.seq);
        }
        self.save_pending();
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
