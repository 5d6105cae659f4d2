//! Several sequences run through one forward pass: the interface continuous
//! batching is built on, and the fallback for backends that run sequences one
//! at a time.

use crate::{Error, LogitsMode, Result, Session};

/// One sequence's share of a batched forward call.
#[derive(Debug, Clone, Copy)]
pub struct BatchItem<'a> {
    /// Which sequence (`0..n_seqs`); at most once per call.
    pub seq: usize,
    /// Tokens appended to it at its current position (non-empty).
    pub tokens: &'a [u32],
    /// Which of its tokens' logits are wanted: none, the last token's (a
    /// decode step, a prompt's end) or every token's (a speculative verify
    /// pass).
    pub logits: LogitsMode,
}

/// Positions of one sequence's caches copied out ([`BatchSession::save_rows`])
/// for a prefix cache: in the backend's own layout, opaque to the caller.
pub struct SavedRows {
    /// Bytes held.
    pub bytes: usize,
    /// Whether a sequence loaded up to the end of these rows can continue
    /// from there: false where recurrent state at that position was no
    /// longer held when they were saved (the rows still serve as the
    /// middle of a longer prefix).
    pub resumable: bool,
    /// The rows, for the backend that saved them.
    pub rows: Box<dyn std::any::Any + Send + Sync>,
}

/// `n_seqs` sequences, each with its own KV cache and position, sharing one
/// set of weights; a forward call advances any subset of them together.
pub trait BatchSession: Send {
    /// Number of sequences.
    fn n_seqs(&self) -> usize;
    /// Capacity of each sequence in positions.
    fn max_seq(&self) -> usize;
    /// Positions held by sequence `seq` (0 for an unknown one).
    fn position(&self, seq: usize) -> usize;
    /// Drops positions at or beyond `n` of sequence `seq`, keeping
    /// [`BatchSession::reusable`]`(seq, n)` (see [`Session::truncate`]).
    fn truncate(&mut self, seq: usize, n: usize);
    /// The most positions `truncate(seq, n)` keeps.
    fn reusable(&self, seq: usize, n: usize) -> usize {
        n.min(self.position(seq))
    }
    /// Makes sequence `dst` hold the first `n` positions of sequence `src`
    /// (what `dst` held is dropped), so a prompt another sequence already
    /// ran needs no second prefill. Returns the positions copied: 0 where
    /// the backend cannot copy (then `dst` is left as it was).
    fn copy_prefix(&mut self, src: usize, dst: usize, n: usize) -> usize {
        let _ = (src, dst, n);
        0
    }
    /// Whether [`BatchSession::copy_prefix`] copies (false: it always
    /// returns 0, so nobody should wait for a prefix to copy).
    fn can_copy_prefix(&self) -> bool {
        false
    }
    /// Bytes the KV caches of every sequence hold now (see
    /// [`Session::cache_bytes`]).
    fn cache_bytes(&self) -> usize {
        0
    }
    /// Copies positions `range` of sequence `seq` out of its caches, with
    /// its recurrent state at `range.end` where it has one; `None` where
    /// the backend cannot or those rows are no longer held.
    fn save_rows(&self, seq: usize, range: std::ops::Range<usize>) -> Option<SavedRows> {
        let _ = (seq, range);
        None
    }
    /// Makes sequence `seq` hold `blocks` (saved by this session from
    /// consecutive ranges starting at 0) and nothing else; returns the
    /// positions it now holds: all of them, or 0 (rows of another layout,
    /// the last block not resumable, more than the capacity).
    fn load_rows(&mut self, seq: usize, blocks: &[&SavedRows]) -> usize {
        let _ = (seq, blocks);
        0
    }
    /// Appends every item's tokens to its sequence. Returns its `n_vocab`
    /// logits rows per item (none, one, or one per token as its `logits`
    /// asks), in item order. Everything is checked
    /// before anything is appended: an error leaves every sequence as it was.
    /// The rows are the caller's to modify (sampling penalties work in place,
    /// so a batch of large vocabularies needs no copy).
    fn forward(&mut self, items: &[BatchItem<'_>]) -> Result<&mut [f32]>;
}

/// Checks a batch against `n_seqs` sequences of capacity `max_seq`:
/// sequence indices in range and unique, tokens present and below `n_vocab`,
/// every sequence staying within its capacity.
pub fn validate_batch(
    items: &[BatchItem<'_>],
    n_seqs: usize,
    max_seq: usize,
    n_vocab: usize,
    position: impl Fn(usize) -> usize,
) -> Result<()> {
    let mut seen = vec![false; n_seqs];
    for item in items {
        let Some(flag) = seen.get_mut(item.seq) else {
            return Err(Error::InvalidArgument(format!(
                "batch names sequence {} but there are {n_seqs}",
                item.seq
            )));
        };
        if std::mem::replace(flag, true) {
            return Err(Error::InvalidArgument(format!(
                "sequence {} appears twice in one batch",
                item.seq
            )));
        }
        if item.tokens.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "sequence {} has no tokens in the batch",
                item.seq
            )));
        }
        if let Some(&token) = item.tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { token, n_vocab });
        }
        let needed = position(item.seq) + item.tokens.len();
        if needed > max_seq {
            return Err(Error::ContextOverflow { needed, max_seq });
        }
    }
    Ok(())
}

/// The checks every [`Session::forward`] makes before appending anything:
/// logits need tokens, ids below `n_vocab`, capacity for them. Returns
/// `Ok(false)` when there is nothing to run (no tokens, no logits wanted).
pub fn validate_forward(
    tokens: &[u32],
    mode: LogitsMode,
    position: usize,
    max_seq: usize,
    n_vocab: usize,
) -> Result<bool> {
    if tokens.is_empty() {
        return match mode {
            LogitsMode::None => Ok(false),
            _ => Err(Error::InvalidArgument(
                "forward with no tokens cannot return logits".into(),
            )),
        };
    }
    let item = BatchItem {
        seq: 0,
        tokens,
        logits: mode,
    };
    validate_batch(&[item], 1, max_seq, n_vocab, |_| position)?;
    Ok(true)
}

/// A [`BatchSession`] over independent [`Session`]s run one after another:
/// correct for any backend, with none of the speed of a batched pass.
pub struct SequentialBatch {
    sessions: Vec<Box<dyn Session>>,
    n_vocab: usize,
    logits: Vec<f32>,
}

impl SequentialBatch {
    /// Wraps `sessions` (all of the same capacity) whose logits rows are
    /// `n_vocab` wide.
    pub fn new(sessions: Vec<Box<dyn Session>>, n_vocab: usize) -> Self {
        Self {
            sessions,
            n_vocab,
            logits: Vec::new(),
        }
    }
}

impl BatchSession for SequentialBatch {
    fn n_seqs(&self) -> usize {
        self.sessions.len()
    }

    fn max_seq(&self) -> usize {
        self.sessions.first().map_or(0, |s| s.max_seq())
    }

    fn position(&self, seq: usize) -> usize {
        self.sessions.get(seq).map_or(0, |s| s.position())
    }

    fn truncate(&mut self, seq: usize, n: usize) {
        if let Some(s) = self.sessions.get_mut(seq) {
            s.truncate(n);
        }
    }

    fn reusable(&self, seq: usize, n: usize) -> usize {
        self.sessions.get(seq).map_or(0, |s| s.reusable(n))
    }

    fn cache_bytes(&self) -> usize {
        self.sessions.iter().map(|s| s.cache_bytes()).sum()
    }

    fn forward(&mut self, items: &[BatchItem<'_>]) -> Result<&mut [f32]> {
        validate_batch(
            items,
            self.sessions.len(),
            self.max_seq(),
            self.n_vocab,
            |s| self.position(s),
        )?;
        self.logits.clear();
        let starts: Vec<usize> = items.iter().map(|i| self.position(i.seq)).collect();
        for (k, item) in items.iter().enumerate() {
            match self.sessions[item.seq].forward(item.tokens, item.logits) {
                Ok(row) => self.logits.extend_from_slice(row),
                Err(e) => {
                    // Keep the promise that a failed call appends nothing.
                    for (done, &start) in items[..k].iter().zip(&starts) {
                        self.sessions[done.seq].truncate(start);
                    }
                    return Err(e);
                }
            }
        }
        Ok(&mut self.logits)
    }
}
