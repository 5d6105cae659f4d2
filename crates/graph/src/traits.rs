//! The compile-then-run interface every backend implements.

use crate::{BatchSession, DecoderProgram, Result, SequentialBatch};
use std::path::PathBuf;

/// Which logits a forward call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsMode {
    /// None (prefill chunks whose logits are not needed); an empty slice.
    None,
    /// `n_vocab` floats for the last token of the batch.
    Last,
    /// `n_tokens * n_vocab` floats, row-major, one row per token.
    All,
}

/// A way of running decoder programs (CPU, ANE, ...).
pub trait Backend: Send + Sync {
    /// Short name (`"cpu"`).
    fn name(&self) -> &str;
    /// Prepares `program` for execution (checks tensors, types, shapes).
    fn compile(&self, program: &DecoderProgram) -> Result<Box<dyn Executable>>;
}

/// A compiled program; opens independent sessions that share its weights.
pub trait Executable: Send + Sync {
    /// Opens a session able to hold `max_seq` positions.
    fn new_session(&self, max_seq: usize) -> Result<Box<dyn Session>>;
    /// Vocabulary size (length of one logits row).
    fn vocab_size(&self) -> usize;
    /// Context length the model was trained with.
    fn n_ctx_train(&self) -> usize;
    /// Opens `n_seqs` sequences of `max_seq` positions each that advance
    /// together in one forward pass. The default runs independent sessions
    /// one after another; backends that can batch override it.
    fn new_batch(&self, n_seqs: usize, max_seq: usize) -> Result<Box<dyn BatchSession>> {
        let sessions = (0..n_seqs)
            .map(|_| self.new_session(max_seq))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(SequentialBatch::new(sessions, self.vocab_size())))
    }
}

/// One sequence: its KV cache, position and scratch buffers.
pub trait Session: Send {
    /// Appends `tokens` at the current position and returns logits per `mode`.
    /// Errors on an empty batch with logits requested, out-of-range ids, or
    /// exceeding [`Session::max_seq`] (nothing is appended then).
    fn forward(&mut self, tokens: &[u32], mode: LogitsMode) -> Result<&[f32]>;
    /// Appends `tokens` as [`Session::forward`] does and returns each
    /// token's final hidden state instead of logits: the output norm's
    /// result, `n_embd` values per token (for embeddings). Backends that do
    /// not expose it refuse.
    fn hidden_states(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let _ = tokens;
        Err(crate::Error::Backend {
            backend: "this backend".into(),
            message: "hidden states (embeddings) are computed by the cpu backend only".into(),
        })
    }
    /// Number of positions held.
    fn position(&self) -> usize;
    /// Drops every position at or beyond `n` (no-op if `n >= position()`).
    /// A session with recurrent state (LFM2's short convolutions) can only
    /// go back to positions it kept a snapshot of: it keeps
    /// [`Session::reusable`]`(n)` positions, so read [`Session::position`]
    /// afterwards.
    fn truncate(&mut self, n: usize);
    /// The most positions `truncate(n)` keeps: `min(n, position())` for a
    /// KV cache alone; at most that (down to 0) for recurrent state.
    fn reusable(&self, n: usize) -> usize {
        n.min(self.position())
    }
    /// Capacity in positions.
    fn max_seq(&self) -> usize;
    /// Bytes this sequence's KV caches hold now (0 where the backend keeps
    /// them out of the host's reach).
    fn cache_bytes(&self) -> usize {
        0
    }
    /// Dumps every named intermediate of the NEXT forward call into `dir`
    /// (one `.npy` f32 file per name plus `index.json`); `None` disables.
    fn set_dump(&mut self, dir: Option<PathBuf>);
}
