//! Embeddings of a decoder model: its final hidden states (after the output
//! norm) pooled over a text's tokens and scaled to unit length. A model
//! trained for generation was not trained to make these comparable, so they
//! are what the model computes, not a retrieval model's vectors: use an
//! embedding model (trained with a pooling of its own) for search.

use crate::{Engine, Error, Result};

/// How one text's token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// The mean over every token.
    #[default]
    Mean,
    /// The last token's state (what a causal model has read everything by).
    Last,
}

impl std::str::FromStr for Pooling {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "last" => Ok(Pooling::Last),
            other => Err(format!("pooling {other:?}: expected mean or last")),
        }
    }
}

impl Engine {
    /// The final hidden state of each of `tokens` (`n_embd` per token), run
    /// from position 0 in a session of its own.
    pub fn hidden_states(&self, tokens: &[u32]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(Error::Invalid("nothing to embed: no tokens".into()));
        }
        let mut session = self.new_session(tokens.len())?;
        session.hidden_states(tokens)
    }

    /// `tokens` embedded: their hidden states pooled, then L2-normalised.
    pub fn embed(&self, tokens: &[u32], pooling: Pooling) -> Result<Vec<f32>> {
        let states = self.hidden_states(tokens)?;
        let d = states.len() / tokens.len();
        let mut v = match pooling {
            Pooling::Last => states[states.len() - d..].to_vec(),
            Pooling::Mean => {
                let mut sum = vec![0f64; d];
                for row in states.chunks_exact(d) {
                    for (s, x) in sum.iter_mut().zip(row) {
                        *s += f64::from(*x);
                    }
                }
                let n = tokens.len() as f64;
                sum.iter().map(|s| (s / n) as f32).collect()
            }
        };
        let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        if norm > 0.0 {
            v.iter_mut()
                .for_each(|x| *x = (f64::from(*x) / norm) as f32);
        }
        Ok(v)
    }
}
