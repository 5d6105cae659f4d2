//! Speculative decoding: a proposer drafts the tokens the model is likely
//! to produce next, the model verifies them all in one batched forward pass
//! (one logits row per position), and exact rejection sampling keeps the
//! output distribution that of plain sampling (greedy: identical tokens).
//!
//! Proposers sit behind [`Proposer`]; today the n-gram one
//! ([`NgramProposer`], llama.cpp's "ngram-simple"). Verification is
//! [`crate::Sampler::verify`]; the loop is in [`crate::generate`].

/// Default n-gram length looked up in the history (llama.cpp
/// `common_params_speculative::ngram_simple.size_n`, 12).
pub const DEFAULT_N: usize = 12;
/// Default draft length (llama.cpp's `size_m` default is 48; a verify pass
/// of 17 rows costs about one decode step on our CPU backend, longer ones
/// start to cost more).
pub const DEFAULT_M: usize = 16;

/// Speculation settings of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecParams {
    /// Tokens matched in the history (`--spec-n`).
    pub n: usize,
    /// Most tokens drafted per verify pass (`--spec-m`).
    pub m: usize,
}

impl Default for SpecParams {
    fn default() -> Self {
        Self {
            n: DEFAULT_N,
            m: DEFAULT_M,
        }
    }
}

impl SpecParams {
    /// Checks the sizes.
    pub fn validate(&self) -> Result<(), String> {
        if self.n == 0 {
            return Err("speculation n-gram length (--spec-n) must be at least 1".into());
        }
        if self.m == 0 {
            return Err("speculation draft length (--spec-m) must be at least 1".into());
        }
        Ok(())
    }
}

/// Drafts tokens continuing a history.
pub trait Proposer: Send {
    /// Appends at most `max` draft tokens continuing `history` (prompt and
    /// generated tokens; the last one is sampled but not yet run) to `out`
    /// (left empty when there is nothing to propose).
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>);
}

/// llama.cpp's "ngram-simple" proposer (`common_ngram_simple_draft` in
/// `common/ngram-map.cpp`, b11312): find the most recent earlier occurrence
/// of the history's last `n` tokens and draft the (up to) `m` tokens that
/// followed it. Stateless and cheap: one backwards scan, nothing when no
/// match.
#[derive(Debug, Clone, Copy)]
pub struct NgramProposer {
    /// Length of the pattern.
    pub n: usize,
    /// Longest draft.
    pub m: usize,
}

impl NgramProposer {
    /// A proposer with `params`' sizes.
    pub fn new(params: SpecParams) -> Self {
        Self {
            n: params.n,
            m: params.m,
        }
    }
}

impl Proposer for NgramProposer {
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) {
        let (n, m) = (self.n, self.m);
        // llama.cpp's `tokens` is the history without the sampled token.
        let cur_len = history.len().saturating_sub(1);
        // "We need at least n_draft_min + n_draft_max + 1 tokens".
        if n == 0 || m == 0 || max == 0 || cur_len <= n + m + 1 {
            return;
        }
        // The pattern: the last n-1 tokens and the sampled one.
        let pattern = &history[history.len() - n..];
        // "we ignore position 0, position 0 == no match"; searched
        // backwards from `cur_len - n - 1`, skipping the current occurrence.
        let Some(at) = (1..cur_len - n)
            .rev()
            .find(|&j| &history[j..j + n] == pattern)
        else {
            return;
        };
        // "copy_max = min(n_draft_max, cur_len - (match_pos + n_draft_min))",
        // and a draft shorter than n is dropped ("copy_max < n_draft_min").
        let copy = m.min(cur_len - (at + n));
        if copy < n {
            return;
        }
        // Then our cap (tokens left to generate, room in the context).
        let copy = copy.min(max);
        out.extend_from_slice(&history[at + n..at + n + copy]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(p: &mut NgramProposer, h: &[u32], max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        p.draft(h, max, &mut out);
        out
    }

    #[test]
    fn drafts_what_followed_the_latest_earlier_match() {
        let mut p = NgramProposer { n: 2, m: 3 };
        // ... 7 8 [9 1 2] ... 7 8 [3 4 5 6] ... | 7 8 (8 just sampled)
        let h = [0, 7, 8, 9, 1, 2, 5, 7, 8, 3, 4, 5, 6, 0, 7, 8];
        assert_eq!(draft(&mut p, &h, 16), [3, 4, 5]);
        // a cap (tokens left, context) shortens it
        assert_eq!(draft(&mut p, &h, 2), [3, 4]);
        // no earlier occurrence: nothing
        assert!(draft(&mut p, &[1, 2, 3, 4, 5, 6, 7, 8, 9], 16).is_empty());
    }

    #[test]
    fn follows_llamacpp_rules() {
        let mut p = NgramProposer { n: 2, m: 2 };
        // too short a history: needs more than n + m + 1 = 5 tokens besides
        // the sampled one
        assert!(draft(&mut p, &[7, 8, 1, 7, 8], 16).is_empty());
        // a match only at position 0 is no match
        assert!(draft(&mut p, &[7, 8, 1, 2, 3, 4, 7, 8], 16).is_empty());
        assert_eq!(draft(&mut p, &[0, 7, 8, 1, 2, 3, 7, 8], 16), [1, 2]);
        // fewer than n tokens after the match: dropped
        let mut p = NgramProposer { n: 3, m: 4 };
        assert!(draft(&mut p, &[0, 1, 2, 3, 4, 5, 9, 7, 8, 6, 7, 8, 6], 16).is_empty());
    }
}
