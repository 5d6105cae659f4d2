//! Constrained decoding: a grammar (a JSON schema, any JSON object, a Lark
//! or GBNF grammar, a regex) decides, token by token, which tokens may come
//! next, and the sampler only sees those. The grammar engine is llguidance
//! (the one llama.cpp and vLLM use), not ours: it is a well-kept crate made
//! for exactly this job. What is ours is the bridge: the token trie built
//! from our tokenizer ([`Constraints::new`]), GBNF translated to its Lark
//! syntax ([`gbnf`]), the mask applied to a logits row, and end-of-generation
//! handled for every end token of the model (its tokenizer may have several).
//!
//! A [`CompiledGrammar`] is compiled once per request (invalid grammars are
//! refused before the request is queued) and every generation of it starts
//! its own [`Constraint`] from it. A constraint's mask for the next token
//! depends only on the tokens already emitted, so it can be computed while
//! the forward pass for the last emitted token runs ([`Constraint::prepare`]).

pub mod gbnf;

use crate::{Error, Result};
use anedvd_tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// What the output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// JSON valid against this schema (an object, or `true` for any JSON).
    /// `strict` refuses schemas with keywords the engine cannot enforce
    /// (OpenAI's `strict: true`); otherwise they are ignored.
    JsonSchema {
        /// The schema.
        schema: Value,
        /// Refuse keywords that cannot be enforced.
        strict: bool,
    },
    /// Any JSON object (OpenAI's `json_object` mode).
    JsonObject,
    /// A grammar in llguidance's Lark syntax.
    Lark(String),
    /// A grammar in llama.cpp's GBNF (translated to Lark).
    Gbnf(String),
    /// A regular expression the whole output must match.
    Regex(String),
}

impl Grammar {
    /// The grammar as llguidance takes it (`trie` resolves GBNF's `<text>`
    /// tokens).
    fn to_llguidance(&self, trie: &TokTrie) -> std::result::Result<TopLevelGrammar, String> {
        Ok(match self {
            Grammar::JsonSchema { schema, strict } => {
                TopLevelGrammar::from_json_schema(json_schema_with_layout(schema, *strict)?)
            }
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(json_schema_with_layout(
                &json!({"type": "object"}),
                false,
            )?),
            Grammar::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
            Grammar::Gbnf(src) => {
                let token_id = |text: &str| {
                    trie.get_special_token(text)
                        .or_else(|| trie.token_id(text.as_bytes()))
                };
                TopLevelGrammar::from_lark(
                    gbnf::gbnf_to_lark(src, &token_id).map_err(|e| e.to_string())?,
                )
            }
            Grammar::Regex(rx) => TopLevelGrammar::from_regex(rx),
        })
    }
}

/// The schema with the output layout fixed: no free whitespace, `", "`
/// between items and `": "` after keys (Python's `json.dumps` layout). Free
/// whitespace lets a small model wander into endless newlines.
fn json_schema_with_layout(schema: &Value, strict: bool) -> std::result::Result<Value, String> {
    let layout = json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": !strict,
    });
    match schema {
        Value::Object(o) => {
            let mut o = o.clone();
            o.insert("x-guidance".into(), layout);
            Ok(Value::Object(o))
        }
        Value::Bool(true) => Ok(json!({"x-guidance": layout})),
        other => Err(format!(
            "a JSON schema must be an object (or `true`), got {}",
            kind_of(other)
        )),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Our tokenizer seen by llguidance: every token's bytes (control tokens
/// marked as special, so text never matches them) and the end tokens.
/// llguidance encodes text only to splice forced tokens or heal a prompt,
/// neither of which we use (hence "not canonical"), so no encoder is kept:
/// a greedy walk of the trie is enough for anything else.
struct TokenizerBridge {
    trie: TokTrie,
}

impl TokenizerEnv for TokenizerBridge {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// The grammar engine set up for one tokenizer (building the token trie
/// takes a while for a large vocabulary, so an engine keeps one).
pub struct Constraints {
    factory: ParserFactory,
    /// Every end-of-generation token, as the mask allows them together.
    eog: Vec<u32>,
    vocab: usize,
}

impl std::fmt::Debug for Constraints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraints")
            .field("vocab", &self.vocab)
            .field("eog", &self.eog)
            .finish()
    }
}

impl Constraints {
    /// Builds the token trie of `tokenizer`.
    pub fn new(tokenizer: &Tokenizer) -> Result<Self> {
        let vocab = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..vocab as u32)
            .map(|id| token_word(tokenizer, id))
            .collect();
        let eog: Vec<u32> = tokenizer.eog_ids().to_vec();
        let Some(&first_eog) = eog.first() else {
            return Err(Error::BadGrammar(
                "the model's tokenizer has no end-of-generation token, so a grammar cannot end a reply"
                    .into(),
            ));
        };
        let vocab_size = u32::try_from(vocab).map_err(|_| {
            Error::BadGrammar(format!("a vocabulary of {vocab} tokens is too large"))
        })?;
        let info = TokRxInfo {
            vocab_size,
            tok_eos: first_eog,
            tok_bos: tokenizer.bos_id(),
            tok_pad: tokenizer.pad_id(),
            tok_unk: tokenizer.unk_id(),
            tok_end_of_turn: tokenizer.eot_id(),
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let env: TokEnv = Arc::new(TokenizerBridge { trie });
        // llguidance's general token slices: masks inside JSON strings and
        // the like come from precomputed sub-tries. For Gemma 3's 262k
        // vocabulary they cost ~65 MB more than no slices (118 vs 52 MB for
        // the whole engine) and make a mask ~25x cheaper (10 vs 250 µs).
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| Error::BadGrammar(format!("setting up the grammar engine: {e}")))?;
        factory.quiet();
        Ok(Self {
            factory,
            eog,
            vocab,
        })
    }

    /// Compiles `grammar`; an invalid one is an error naming the problem.
    pub fn compile(&self, grammar: &Grammar) -> Result<CompiledGrammar> {
        let compiled = catch_unwind(AssertUnwindSafe(|| {
            let top = grammar.to_llguidance(self.factory.tok_env().tok_trie())?;
            let parser = self.factory.create_parser(top).map_err(|e| e.to_string())?;
            let matcher = Matcher::new(Ok(parser));
            match matcher.get_error() {
                Some(e) => Err(e),
                None => Ok(matcher),
            }
        }));
        match compiled {
            Ok(Ok(matcher)) => Ok(CompiledGrammar {
                start: Arc::new(matcher),
                eog: self.eog.clone(),
                vocab: self.vocab,
            }),
            Ok(Err(message)) => Err(Error::BadGrammar(message)),
            Err(_) => Err(Error::BadGrammar(
                "the grammar engine failed on this grammar (an internal error)".into(),
            )),
        }
    }
}

/// The bytes llguidance matches a token against: a control token's text
/// behind the special marker (so literal text cannot produce it), else the
/// bytes it decodes to.
fn token_word(tokenizer: &Tokenizer, id: u32) -> Vec<u8> {
    let bytes = tokenizer.piece_bytes(id).unwrap_or_default();
    if tokenizer.is_special(id) {
        let name = tokenizer.token_text(id).unwrap_or_default();
        let mut word = Vec::with_capacity(name.len() + 1);
        word.push(TokTrie::SPECIAL_TOKEN_MARKER);
        word.extend_from_slice(name.as_bytes());
        word
    } else {
        bytes.to_vec()
    }
}

/// A compiled grammar, ready to start generations from (cheap to clone).
#[derive(Clone)]
pub struct CompiledGrammar {
    start: Arc<Matcher>,
    eog: Vec<u32>,
    vocab: usize,
}

impl std::fmt::Debug for CompiledGrammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompiledGrammar")
    }
}

impl PartialEq for CompiledGrammar {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.start, &other.start)
    }
}

impl CompiledGrammar {
    /// A fresh constraint at the start of the output.
    pub fn start(&self) -> Constraint {
        Constraint {
            matcher: self.start.deep_clone(),
            mask: None,
            eog: self.eog.clone(),
            vocab: self.vocab,
        }
    }
}

/// Sets `logits[i]` to −∞ where bit `i` of `bits` (32 tokens per word) is
/// clear or `i ≥ vocab`; returns whether any token is left. Word at a time:
/// a 262k-token row is mostly all-clear or all-set words.
fn mask_row(bits: &[u32], vocab: usize, logits: &mut [f32]) -> bool {
    let mut any = false;
    let usable = vocab.min(logits.len());
    let (row, padding) = logits.split_at_mut(usable);
    padding.fill(f32::NEG_INFINITY);
    for (i, chunk) in row.chunks_mut(32).enumerate() {
        let word = bits.get(i).copied().unwrap_or(0);
        match word {
            0 => chunk.fill(f32::NEG_INFINITY),
            u32::MAX => any = true,
            _ => {
                for (j, l) in chunk.iter_mut().enumerate() {
                    if word & (1 << j) == 0 {
                        *l = f32::NEG_INFINITY;
                    } else {
                        any = true;
                    }
                }
            }
        }
    }
    any
}

/// One generation's grammar state.
pub struct Constraint {
    matcher: Matcher,
    /// The mask for the next token, once computed.
    mask: Option<SimpleVob>,
    eog: Vec<u32>,
    vocab: usize,
}

impl Constraint {
    /// Computes the mask for the next token if it is not yet known (the
    /// costly part; safe to run while the forward pass runs).
    pub fn prepare(&mut self) -> Result<()> {
        if self.mask.is_none() {
            let mask = self
                .matcher
                .compute_mask_or_eos()
                .map_err(|e| Error::BadGrammar(format!("the grammar failed mid-output: {e}")))?;
            self.mask = Some(mask);
        }
        Ok(())
    }

    /// Sets every token the grammar does not allow to −∞ in `logits` (one
    /// vocabulary row; rows wider than the tokenizer's vocabulary are padding
    /// and disallowed). The end tokens go together: allowed when the output
    /// may end here.
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<()> {
        self.prepare()?;
        let Some(mask) = &self.mask else {
            return Ok(());
        };
        let may_end = self.eog.iter().any(|&t| mask.is_allowed(t));
        // The mask names one end token; every end token of the model may
        // end the output, so keep their logits (or drop them all) together.
        let ends: Vec<(usize, f32)> = self
            .eog
            .iter()
            .filter_map(|&t| logits.get(t as usize).map(|&l| (t as usize, l)))
            .collect();
        let any = mask_row(mask.as_slice(), self.vocab, logits);
        for (t, raw) in ends {
            logits[t] = if may_end { raw } else { f32::NEG_INFINITY };
        }
        if !(any || may_end) {
            return Err(Error::BadGrammar(
                "the grammar allows no token here (it cannot be completed)".into(),
            ));
        }
        Ok(())
    }

    /// Records the emitted token. An end token ends the output; one the
    /// grammar did not allow is an error.
    pub fn commit(&mut self, id: u32) -> Result<()> {
        self.mask = None;
        if self.eog.contains(&id) {
            return Ok(());
        }
        self.matcher
            .consume_token(id)
            .map_err(|e| Error::BadGrammar(format!("token {id} does not fit the grammar: {e}")))
    }

    /// True once the grammar is complete and allows nothing more: the
    /// output ends here (no end token needs to be sampled).
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// True while the output so far may also end here.
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests;

/// The tiny qwen2 fixture's tokenizer, for other modules' tests.
#[cfg(test)]
pub(crate) fn tests_tokenizer() -> Tokenizer {
    tests::tokenizer()
}

/// Whether the Lark `grammar` accepts exactly `tokens` over a vocabulary of
/// one token per byte (ids 0–255), for tests.
#[cfg(test)]
pub(crate) fn lark_accepts_bytes(grammar: &str, tokens: &[u32]) -> bool {
    let env = llguidance::toktrie::ApproximateTokEnv::single_byte_env();
    let factory = ParserFactory::new_simple(&env).expect("factory");
    let parser = factory
        .create_parser(TopLevelGrammar::from_lark(grammar.to_owned()))
        .unwrap_or_else(|e| panic!("{e}\n{grammar}"));
    let mut m = Matcher::new(Ok(parser));
    tokens.iter().all(|&t| m.consume_token(t).is_ok()) && m.is_accepting().unwrap_or(false)
}
