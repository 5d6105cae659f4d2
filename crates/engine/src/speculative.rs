//! Speculative decoding: a proposer drafts the tokens the model is likely
//! to produce next, the model verifies them all in one batched forward pass
//! (one logits row per position), and exact rejection sampling keeps the
//! output distribution that of plain sampling (greedy: identical tokens).
//!
//! Proposers sit behind [`Proposer`]: the n-gram one ([`NgramProposer`],
//! llama.cpp's "ngram-simple") and a smaller draft model with the same
//! vocabulary ([`DraftProposer`]). Both draft deterministically (the draft
//! model greedily), so verification is [`crate::Sampler::verify`]'s
//! point-mass rule; the loop is [`crate::generate_speculative`].

use crate::sampler::argmax;
use crate::session::EngineSession;
use crate::{Engine, Error, Result};
use anedvd_graph::LogitsMode;
use anedvd_tokenizer::Tokenizer;

/// Default n-gram length looked up in the history (llama.cpp
/// `common_params_speculative::ngram_simple.size_n`, 12).
pub const DEFAULT_N: usize = 12;
/// Default draft length (llama.cpp's `size_m` default is 48; a verify pass
/// of 17 rows costs about one decode step on our CPU backend, longer ones
/// start to cost more).
pub const DEFAULT_M: usize = 16;

/// Which proposer drafts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProposerKind {
    /// [`NgramProposer`] over the request's own history.
    #[default]
    Ngram,
    /// The loaded draft model ([`DraftProposer`]).
    Draft,
}

impl ProposerKind {
    /// `ngram` or `draft`, as the flags and request bodies spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProposerKind::Ngram => "ngram",
            ProposerKind::Draft => "draft",
        }
    }
}

/// Largest accepted n-gram and draft lengths (a verify pass of more rows
/// than a batch step's budget could not run in one step anyway).
pub const MAX_SPEC_LEN: usize = 256;

/// Speculation settings of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecParams {
    /// Who drafts.
    pub proposer: ProposerKind,
    /// Tokens matched in the history (`--spec-n`; n-gram proposer).
    pub n: usize,
    /// Most tokens drafted per verify pass (`--spec-m`).
    pub m: usize,
}

impl Default for SpecParams {
    fn default() -> Self {
        Self {
            proposer: ProposerKind::Ngram,
            n: DEFAULT_N,
            m: DEFAULT_M,
        }
    }
}

impl SpecParams {
    /// Checks the sizes: 1..=[`MAX_SPEC_LEN`] each.
    pub fn validate(&self) -> Result<(), String> {
        for (v, what) in [
            (self.n, "speculation n-gram length (--spec-n)"),
            (self.m, "speculation draft length (--spec-m)"),
        ] {
            if !(1..=MAX_SPEC_LEN).contains(&v) {
                return Err(format!("{what} must be in 1..={MAX_SPEC_LEN}, not {v}"));
            }
        }
        Ok(())
    }
}

/// Drafts tokens continuing a history.
pub trait Proposer: Send {
    /// Appends at most `max` draft tokens continuing `history` (prompt and
    /// generated tokens; the last one is sampled but not yet run) to `out`
    /// (left empty when there is nothing to propose).
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()>;
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
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        self.draft_into(history, max, out);
        Ok(())
    }
}

impl NgramProposer {
    fn draft_into(&self, history: &[u32], max: usize, out: &mut Vec<u32>) {
        let (n, m) = (self.n, self.m);
        // llama.cpp's `tokens` is the history without the sampled token.
        let cur_len = history.len().saturating_sub(1);
        // "We need at least n_draft_min + n_draft_max + 1 tokens".
        if n == 0 || m == 0 || max == 0 || cur_len <= n.saturating_add(m).saturating_add(1) {
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

/// A draft model stops when its most likely next token is less likely than
/// this (llama.cpp's `--draft-p-min`, default 0 there; a draft the small
/// model itself doubts is mostly rejected and costs its verify row).
pub const DRAFT_P_MIN: f32 = 0.5;

/// A second, smaller model with the target's vocabulary, drafting greedily
/// with its own cache: up to `m` tokens per call, stopping early when its
/// top probability falls below a floor.
pub struct DraftProposer {
    session: EngineSession,
    m: usize,
    p_min: f32,
}

impl DraftProposer {
    /// A proposer over `draft` (a fresh session of `max_seq` positions)
    /// drafting up to `m` tokens while its top probability is at least
    /// `p_min` ([`DRAFT_P_MIN`] by default), after checking that its
    /// vocabulary is the target's token for token.
    pub fn new(
        draft: &Engine,
        target: &Tokenizer,
        max_seq: usize,
        m: usize,
        p_min: f32,
    ) -> Result<Self> {
        Self::check_p_min(p_min)?;
        check_vocabulary(draft, target)?;
        if m == 0 {
            return Err(Error::BadSpeculation(
                "speculation draft length (--spec-m) must be at least 1".into(),
            ));
        }
        Ok(Self {
            session: draft.new_session(max_seq)?,
            m,
            p_min,
        })
    }
}

impl DraftProposer {
    /// Checks a probability floor (`--draft-p-min`) is in 0..=1.
    pub fn check_p_min(p_min: f32) -> Result<()> {
        if (0.0..=1.0).contains(&p_min) {
            Ok(())
        } else {
            Err(Error::BadSpeculation(format!(
                "the draft model's probability floor {p_min} is not in 0..=1"
            )))
        }
    }
}

impl Proposer for DraftProposer {
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        let max = self
            .m
            .min(max)
            .min(self.session.max_seq().saturating_sub(history.len() + 1));
        if max == 0 || history.is_empty() {
            return Ok(());
        }
        // Catch the draft cache up with the history (it holds the previous
        // call's drafts, of which a prefix was accepted).
        let reused = self.session.reuse_prefix(history);
        let mut logits = self
            .session
            .forward(&history[reused..], LogitsMode::Last)?
            .to_vec();
        while out.len() < max {
            let t = argmax(&logits);
            if top_probability(&logits, t) < self.p_min {
                break;
            }
            out.push(t);
            if out.len() == max {
                break;
            }
            logits = self.session.forward(&[t], LogitsMode::Last)?.to_vec();
        }
        Ok(())
    }
}

/// Checks that `draft`'s vocabulary is `target`'s token for token (what a
/// draft model needs: its drafts are the target's token ids).
pub fn check_vocabulary(draft: &Engine, target: &Tokenizer) -> Result<()> {
    let (a, b) = (draft.tokenizer.vocab_size(), target.vocab_size());
    if a != b || draft.vocab_size() != target.vocab_size() {
        return Err(Error::BadSpeculation(format!(
            "the draft model's vocabulary has {a} tokens, the model's {b}: a draft model needs the same vocabulary"
        )));
    }
    if let Some(id) = (0..a as u32).find(|&i| draft.tokenizer.token_text(i) != target.token_text(i))
    {
        return Err(Error::BadSpeculation(format!(
            "the draft model's token {id} is {:?}, the model's {:?}: a draft model needs the same vocabulary",
            draft.tokenizer.token_text(id).unwrap_or(""),
            target.token_text(id).unwrap_or("")
        )));
    }
    Ok(())
}

/// The softmax probability of token `t` in `logits`.
fn top_probability(logits: &[f32], t: u32) -> f32 {
    let max = logits[t as usize];
    let z: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    (1.0 / z) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(p: &mut NgramProposer, h: &[u32], max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        p.draft_into(h, max, &mut out);
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
        // sizes near usize::MAX: no overflow, just no draft
        let mut huge = NgramProposer {
            n: usize::MAX,
            m: usize::MAX,
        };
        assert!(draft(&mut huge, &[0, 7, 8, 1, 2, 3, 7, 8], 16).is_empty());
        // a match only at position 0 is no match
        assert!(draft(&mut p, &[7, 8, 1, 2, 3, 4, 7, 8], 16).is_empty());
        assert_eq!(draft(&mut p, &[0, 7, 8, 1, 2, 3, 7, 8], 16), [1, 2]);
        // fewer than n tokens after the match: dropped
        let mut p = NgramProposer { n: 3, m: 4 };
        assert!(draft(&mut p, &[0, 1, 2, 3, 4, 5, 9, 7, 8, 6, 7, 8, 6], 16).is_empty());
    }
}
