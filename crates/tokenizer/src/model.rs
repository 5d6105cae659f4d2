//! The two model kinds on top of the merge engine: SentencePiece-style
//! (score of the merged token) and BPE (rank of the merge rule), with byte
//! fallback and unknown-token handling.

use crate::merge::{rank_priority, score_priority, PairRules, Scratch, Sym, NO_ID};
use crate::unicode::FxHashMap;
use crate::vocab::Vocab;
use crate::{Error, Result};

/// How characters missing from the vocabulary become tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fallback {
    /// llama.cpp SPM: `<0xXX>`, else the raw byte as a one-character token, else unk.
    SpmBytes,
    /// llama.cpp byte-level BPE: each byte's one-byte string if it is a token, else dropped.
    BpeRawBytes,
    /// `<0xXX>` tokens (HF `byte_fallback`, GGUF gemma4); dropped if absent.
    ByteTokens,
    /// HF without byte fallback: the unknown token (fused when `fuse`), or dropped.
    Unk { fuse: bool },
}

/// Merge rules of a BPE vocabulary: `(left id, right id) -> (rank, merged id)`.
pub(crate) type MergeMap = FxHashMap<(u32, u32), (u32, u32)>;

/// The merge model.
#[derive(Debug, Clone)]
pub(crate) enum Model {
    /// SentencePiece-style: merge the adjacent pair whose concatenation is the
    /// highest-scoring token.
    Spm,
    /// BPE: merge the adjacent pair with the lowest merge rank.
    Bpe {
        merges: MergeMap,
        /// A word that is itself a token is emitted without merging.
        ignore_merges: bool,
    },
}

struct SpmRules<'a>(&'a Vocab);

impl PairRules for SpmRules<'_> {
    fn pair(&self, text: &str, l: &Sym, r: &Sym) -> Option<(u64, u32)> {
        let id = self.0.get(&text[l.start as usize..r.end as usize])?;
        Some((score_priority(self.0.scores[id as usize]), id))
    }
}

struct BpeRules<'a>(&'a MergeMap);

impl PairRules for BpeRules<'_> {
    fn pair(&self, _text: &str, l: &Sym, r: &Sym) -> Option<(u64, u32)> {
        if l.id == NO_ID || r.id == NO_ID {
            return None;
        }
        self.0
            .get(&(l.id, r.id))
            .map(|&(rank, id)| (rank_priority(rank), id))
    }
}

/// Everything the model needs to encode a word.
pub(crate) struct ModelCtx<'a> {
    pub vocab: &'a Vocab,
    pub model: &'a Model,
    pub fallback: Fallback,
    pub byte_ids: &'a [Option<u32>; 256],
    pub unk: Option<u32>,
}

impl ModelCtx<'_> {
    /// Encodes one word (already normalized, pre-tokenized and, for
    /// byte-level vocabularies, byte-encoded), appending ids to `out`.
    pub fn encode_word(&self, word: &str, scratch: &mut Scratch, out: &mut Vec<u32>) -> Result<()> {
        if word.is_empty() {
            return Ok(());
        }
        let vocab = self.vocab;
        match self.model {
            Model::Spm => {
                scratch.init_chars(word, |c| vocab.get(c).unwrap_or(NO_ID));
                scratch.merge(word, &SpmRules(vocab));
            }
            Model::Bpe {
                merges,
                ignore_merges,
            } => {
                if *ignore_merges {
                    if let Some(id) = vocab.get(word) {
                        out.push(id);
                        return Ok(());
                    }
                }
                self.init_bpe_symbols(word, scratch);
                scratch.merge(word, &BpeRules(merges));
            }
        }
        for s in scratch.live() {
            if s.id != NO_ID {
                out.push(s.id);
            } else {
                self.fallback_bytes(&word.as_bytes()[s.start as usize..s.end as usize], out)?;
            }
        }
        Ok(())
    }

    fn init_bpe_symbols(&self, word: &str, scratch: &mut Scratch) {
        let vocab = self.vocab;
        match self.fallback {
            Fallback::ByteTokens | Fallback::Unk { .. } => {
                scratch.syms.clear();
                for (start, c) in word.char_indices() {
                    let end = start + c.len_utf8();
                    if let Some(id) = vocab.get(&word[start..end]) {
                        scratch.syms.push(Sym {
                            start: start as u32,
                            end: end as u32,
                            prev: 0,
                            next: 0,
                            id,
                        });
                        continue;
                    }
                    if self.fallback == Fallback::ByteTokens {
                        let bytes = &word.as_bytes()[start..end];
                        if bytes.iter().all(|&b| self.byte_ids[b as usize].is_some()) {
                            for (k, &b) in bytes.iter().enumerate() {
                                scratch.syms.push(Sym {
                                    start: (start + k) as u32,
                                    end: (start + k + 1) as u32,
                                    prev: 0,
                                    next: 0,
                                    id: self.byte_ids[b as usize].unwrap_or(NO_ID),
                                });
                            }
                            continue;
                        }
                    }
                    let Some(unk) = self.unk else { continue };
                    let fuse = matches!(self.fallback, Fallback::Unk { fuse: true });
                    match scratch.syms.last_mut() {
                        Some(last) if fuse && last.id == unk && last.end as usize == start => {
                            last.end = end as u32;
                        }
                        _ => scratch.syms.push(Sym {
                            start: start as u32,
                            end: end as u32,
                            prev: 0,
                            next: 0,
                            id: unk,
                        }),
                    }
                }
                scratch.link();
            }
            Fallback::SpmBytes | Fallback::BpeRawBytes => {
                scratch.init_chars(word, |c| vocab.get(c).unwrap_or(NO_ID));
            }
        }
    }

    fn fallback_bytes(&self, bytes: &[u8], out: &mut Vec<u32>) -> Result<()> {
        for &b in bytes {
            match self.fallback {
                Fallback::SpmBytes => {
                    let raw = (b < 0x80)
                        .then(|| self.vocab.get(char::from(b).encode_utf8(&mut [0; 4])))
                        .flatten();
                    match self.byte_ids[b as usize].or(raw).or(self.unk) {
                        Some(id) => out.push(id),
                        None => return Err(Error::NoByteToken { byte: b }),
                    }
                }
                Fallback::BpeRawBytes => {
                    if b < 0x80 {
                        if let Some(id) = self.vocab.get(char::from(b).encode_utf8(&mut [0; 4])) {
                            out.push(id);
                        }
                    }
                }
                Fallback::ByteTokens => {
                    if let Some(id) = self.byte_ids[b as usize] {
                        out.push(id);
                    }
                }
                Fallback::Unk { .. } => {
                    if let Some(id) = self.unk {
                        out.push(id);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Parses merge rules (`"left right"`) into a [`MergeMap`]. Rules whose
/// parts or result are not in the vocabulary can never apply and are skipped.
pub(crate) fn build_merges<'a>(
    vocab: &Vocab,
    rules: impl Iterator<Item = Result<(&'a str, &'a str)>>,
) -> Result<MergeMap> {
    let mut map = MergeMap::default();
    let mut joined = String::new();
    for (rank, rule) in rules.enumerate() {
        let (a, b) = rule?;
        joined.clear();
        joined.push_str(a);
        joined.push_str(b);
        if let (Some(ia), Some(ib), Some(im)) = (vocab.get(a), vocab.get(b), vocab.get(&joined)) {
            map.entry((ia, ib)).or_insert((rank as u32, im));
        }
    }
    Ok(map)
}

/// Splits a merge rule `"a b"` at the first space after the first byte (as llama.cpp does).
pub(crate) fn split_merge(index: usize, text: &str) -> Result<(&str, &str)> {
    let bad = || Error::BadMerge {
        index,
        text: text.to_string(),
    };
    let first = text.chars().next().ok_or_else(bad)?;
    let pos = text[first.len_utf8()..]
        .find(' ')
        .map(|p| p + first.len_utf8())
        .ok_or_else(bad)?;
    let (a, b) = (&text[..pos], &text[pos + 1..]);
    if b.is_empty() {
        return Err(bad());
    }
    Ok((a, b))
}
