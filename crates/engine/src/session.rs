//! A backend session plus the token ids its KV cache holds, so a new prompt
//! that shares a prefix with the cached one only prefills the new suffix.

use crate::batch::reusable_prefix;
use crate::Result;
use anedvd_graph::{LogitsMode, Session};

/// A backend session that remembers which tokens it holds.
pub struct EngineSession {
    inner: Box<dyn Session>,
    cached: Vec<u32>,
}

impl EngineSession {
    /// Wraps a fresh backend session.
    pub fn new(inner: Box<dyn Session>) -> Self {
        Self {
            inner,
            cached: Vec::new(),
        }
    }

    /// Capacity in positions.
    pub fn max_seq(&self) -> usize {
        self.inner.max_seq()
    }

    /// Positions held.
    pub fn position(&self) -> usize {
        self.inner.position()
    }

    /// Bytes the KV caches hold now ([`Session::cache_bytes`]).
    pub fn cache_bytes(&self) -> usize {
        self.inner.cache_bytes()
    }

    /// The token ids held in the cache, oldest first.
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached[..self.inner.position().min(self.cached.len())]
    }

    /// Keeps the longest cached prefix shared with `prompt` that the backend
    /// can return to ([`Session::reusable`]), but always leaves at least one
    /// prompt token to run (its logits start generation). Returns how many
    /// prompt tokens were reused.
    pub fn reuse_prefix(&mut self, prompt: &[u32]) -> usize {
        let keep = reusable_prefix(self.cached_tokens(), prompt);
        self.truncate(keep)
    }

    /// Drops everything at or beyond position `n`; returns the positions
    /// kept (fewer than `n` where recurrent state has no snapshot at `n`).
    pub fn truncate(&mut self, n: usize) -> usize {
        self.inner.truncate(n);
        let kept = self.inner.position();
        self.cached.truncate(kept);
        kept
    }

    /// Forgets the whole cache.
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    /// Appends `tokens` and returns logits per `mode`.
    pub fn forward(&mut self, tokens: &[u32], mode: LogitsMode) -> Result<&[f32]> {
        // A failed call may not have gone back to where it started (a
        // sliding-window cache that dropped rows goes back to 0): the
        // backend's position says what is held.
        let held = self.inner.position();
        self.cached.truncate(held);
        let out = self.inner.forward(tokens, mode)?;
        self.cached.extend_from_slice(tokens);
        Ok(out)
    }

    /// Appends `tokens` and returns their final hidden states
    /// ([`Session::hidden_states`]).
    pub fn hidden_states(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let held = self.inner.position();
        self.cached.truncate(held);
        let out = self.inner.hidden_states(tokens)?;
        self.cached.extend_from_slice(tokens);
        Ok(out)
    }

    /// Dumps the intermediates of the next forward call into `dir`.
    pub fn set_dump(&mut self, dir: Option<std::path::PathBuf>) {
        self.inner.set_dump(dir);
    }
}
