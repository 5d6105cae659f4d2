//! [`Tokenizer`]: the vocabulary, the merge model, the text front end
//! (llama.cpp-style for GGUF, HF-style for tokenizer.json) and decoding.

use crate::hf::HfFront;
use crate::merge::Scratch;
use crate::model::{Fallback, Model, ModelCtx};
use crate::packed::PackedBytes;
use crate::pretok::{split_sequence, Rule};
use crate::special::{Fragment, SpecialMatcher};
use crate::stream::StreamDecoder;
use crate::unicode::{byte_encode, FxHashMap};
use crate::vocab::{TokenAttr, Vocab};
use crate::{Error, Result};
use std::borrow::Cow;

/// The llama.cpp text front end used for GGUF vocabularies.
#[derive(Debug, Clone)]
pub(crate) struct LlamaFront {
    /// Pre-tokenizer rules (BPE only).
    pub rules: Vec<Rule>,
    /// Map bytes to GPT-2 byte-level characters before merging (BPE only).
    pub byte_encode: bool,
    /// Replace spaces with `▁` (SPM always; SPM-style BPE such as gemma4).
    pub escape_whitespace: bool,
    /// Prefix a space to text that starts the input or follows a special token (SPM).
    pub add_space_prefix: bool,
    /// gemma4: a word made only of newlines that is a token is emitted whole.
    pub newline_words: bool,
}

/// How text reaches the model.
#[derive(Debug, Clone)]
pub(crate) enum Front {
    Llama(LlamaFront),
    Hf(Box<HfFront>),
}

/// Ids of the special tokens and the add-bos/eos policy.
#[derive(Debug, Clone, Default)]
pub(crate) struct Specials {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
}

/// A tokenizer built from GGUF metadata or a tokenizer.json.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    pub(crate) vocab: Vocab,
    pub(crate) model: Model,
    pub(crate) fallback: Fallback,
    pub(crate) front: Front,
    pub(crate) matcher: SpecialMatcher,
    pub(crate) specials: Specials,
    pub(crate) eog: Vec<u32>,
    pub(crate) byte_ids: [Option<u32>; 256],
    /// Bytes each token decodes to.
    pub(crate) pieces: PackedBytes,
    /// What happens to the first decoded piece.
    pub(crate) first_piece: FirstPiece,
}

/// Treatment of the first decoded token (undoing the prefix space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstPiece {
    /// As is.
    Keep,
    /// Drop one leading space from the first non-empty piece (HF `Strip` decoder after `Fuse`).
    StripOneSpace,
    /// Drop one leading space from the piece of token 0 only, counting
    /// skipped special tokens (llama.cpp's detokenize with `add_space_prefix`).
    LlamaStrip,
    /// Drop every space that came from the replacement character (HF `Metaspace` decoder).
    DropSpaces,
}

/// Applies a [`FirstPiece`] policy over a sequence of tokens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FirstTracker {
    mode: FirstPiece,
    first: bool,
}

impl FirstTracker {
    pub(crate) fn new(mode: FirstPiece) -> Self {
        FirstTracker { mode, first: true }
    }

    /// Marks the start as already past (decoding a continuation).
    pub(crate) fn past_start(&mut self) {
        self.first = false;
    }

    /// The bytes to emit for the next token's `piece`; `None` when skipped.
    pub(crate) fn step<'p>(&mut self, piece: &'p [u8], skipped: bool) -> Option<Cow<'p, [u8]>> {
        if self.mode == FirstPiece::LlamaStrip {
            let was_first = std::mem::replace(&mut self.first, false);
            return (!skipped).then(|| {
                if was_first {
                    self.mode.apply(piece)
                } else {
                    piece.into()
                }
            });
        }
        if skipped {
            return None;
        }
        let out = if self.first {
            self.mode.apply(piece)
        } else {
            piece.into()
        };
        // HF's Metaspace decoder looks at token 0 only; a leading-space strip waits for text.
        self.first &= self.mode != FirstPiece::DropSpaces && out.is_empty();
        Some(out)
    }
}

impl FirstPiece {
    fn apply(self, piece: &[u8]) -> Cow<'_, [u8]> {
        match self {
            FirstPiece::Keep => piece.into(),
            FirstPiece::StripOneSpace | FirstPiece::LlamaStrip => {
                piece.strip_prefix(b" ").unwrap_or(piece).into()
            }
            FirstPiece::DropSpaces => piece
                .iter()
                .copied()
                .filter(|&b| b != b' ')
                .collect::<Vec<u8>>()
                .into(),
        }
    }
}

impl Tokenizer {
    /// Encodes `text`. `add_special` adds BOS/EOS as the vocabulary asks;
    /// `parse_special` lets control tokens written in the text (e.g.
    /// `<start_of_turn>`) become their ids — template-built prompts need it.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        let ctx = ModelCtx {
            vocab: &self.vocab,
            model: &self.model,
            fallback: self.fallback,
            byte_ids: &self.byte_ids,
            unk: self.specials.unk,
        };
        let mut cache: FxHashMap<String, Vec<u32>> = FxHashMap::default();
        let mut scratch = Scratch::default();
        match &self.front {
            Front::Llama(front) => {
                if add_special && self.specials.add_bos {
                    out.push(self.specials.bos.ok_or(Error::MissingSpecial("BOS"))?);
                }
                let frags = self.matcher.partition_llama(text, parse_special);
                let mut prev_special = true;
                let mut buf = String::new();
                for frag in frags {
                    match frag {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(r) => {
                            buf.clear();
                            if front.add_space_prefix && prev_special {
                                buf.push(' ');
                            }
                            buf.push_str(&text[r]);
                            if front.escape_whitespace {
                                buf = buf.replace(' ', "\u{2581}");
                            }
                            prev_special = false;
                            match &self.model {
                                Model::Spm => ctx.encode_word(&buf, &mut scratch, &mut out)?,
                                Model::Bpe { .. } => self.encode_llama_bpe(
                                    front,
                                    &buf,
                                    &ctx,
                                    &mut scratch,
                                    &mut cache,
                                    &mut out,
                                )?,
                            }
                        }
                    }
                }
                if add_special && self.specials.add_eos {
                    out.push(self.specials.eos.ok_or(Error::MissingSpecial("EOS"))?);
                }
            }
            Front::Hf(front) => {
                front.encode(
                    self,
                    text,
                    parse_special,
                    &ctx,
                    &mut scratch,
                    &mut cache,
                    &mut out,
                )?;
                if add_special {
                    let mut with = Vec::with_capacity(out.len() + 2);
                    with.extend_from_slice(&front.prefix);
                    with.extend_from_slice(&out);
                    with.extend_from_slice(&front.suffix);
                    out = with;
                }
            }
        }
        Ok(out)
    }

    fn encode_llama_bpe(
        &self,
        front: &LlamaFront,
        text: &str,
        ctx: &ModelCtx<'_>,
        scratch: &mut Scratch,
        cache: &mut FxHashMap<String, Vec<u32>>,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut word = String::new();
        for r in split_sequence(text, &front.rules)? {
            let piece = &text[r];
            word.clear();
            if front.byte_encode {
                byte_encode(piece.as_bytes(), &mut word);
            } else {
                word.push_str(piece);
            }
            if front.newline_words && word.bytes().all(|b| b == b'\n') {
                if let Some(id) = self.vocab.get(&word) {
                    out.push(id);
                    continue;
                }
            }
            encode_cached(ctx, &word, scratch, cache, out)?;
        }
        Ok(())
    }

    /// Decodes ids to text. `skip_special` drops control and unknown tokens.
    /// The prefix space is undone as the source does: for GGUF SentencePiece
    /// vocabularies with `add_space_prefix`, one leading space of token 0
    /// (llama.cpp: none when token 0 is a skipped BOS); for tokenizer.json,
    /// per its decoder (`Strip`, `Metaspace`). Invalid UTF-8 (e.g. a cut-off
    /// byte sequence) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut bytes = Vec::new();
        let mut first = FirstTracker::new(self.first_piece);
        for &id in ids {
            let piece = self.piece_bytes(id)?;
            let skipped = skip_special && self.vocab.attrs[id as usize].is_special();
            if let Some(p) = first.step(piece, skipped) {
                bytes.extend_from_slice(&p);
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The bytes token `id` decodes to.
    pub fn piece_bytes(&self, id: u32) -> Result<&[u8]> {
        self.pieces.get(id as usize).ok_or(Error::IdOutOfRange {
            id,
            vocab_size: self.vocab.len(),
        })
    }

    /// The display form of a token: its decoded bytes as text (lossy for a
    /// partial UTF-8 sequence).
    pub fn piece(&self, id: u32) -> Option<String> {
        self.pieces
            .get(id as usize)
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }

    /// The token's vocabulary entry as stored (`▁Hello`, `ĠHello`, `<0x0A>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.text(id as usize)
    }

    /// The id of the token whose vocabulary entry is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.get(text)
    }

    /// The token's attributes.
    pub fn token_attr(&self, id: u32) -> Option<TokenAttr> {
        self.vocab.attrs.get(id as usize).copied()
    }

    /// True for control and unknown tokens (what `skip_special` hides).
    pub fn is_special(&self, id: u32) -> bool {
        self.token_attr(id).is_some_and(TokenAttr::is_special)
    }

    /// Approximate heap bytes held by the tokenizer's tables (vocabulary,
    /// text → id index, decoded pieces, merges, special-token trie); the
    /// front end's compiled regexes are not counted.
    pub fn heap_bytes(&self) -> usize {
        let merges = match &self.model {
            Model::Spm => 0,
            // hashbrown: one entry plus one control byte per bucket.
            Model::Bpe { merges, .. } => {
                merges.capacity() * (std::mem::size_of::<((u32, u32), (u32, u32))>() + 1)
            }
        };
        self.vocab.heap_bytes()
            + self.pieces.heap_bytes()
            + merges
            + self.matcher.heap_bytes()
            + self.eog.capacity() * std::mem::size_of::<u32>()
    }

    /// Number of token ids.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// Beginning-of-sequence id.
    pub fn bos_id(&self) -> Option<u32> {
        self.specials.bos
    }

    /// End-of-sequence id.
    pub fn eos_id(&self) -> Option<u32> {
        self.specials.eos
    }

    /// End-of-turn id (`<end_of_turn>`, `<|eot_id|>`, `<|im_end|>`...).
    pub fn eot_id(&self) -> Option<u32> {
        self.specials.eot
    }

    /// Padding id.
    pub fn pad_id(&self) -> Option<u32> {
        self.specials.pad
    }

    /// Unknown-token id.
    pub fn unk_id(&self) -> Option<u32> {
        self.specials.unk
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        match &self.front {
            Front::Llama(_) => self.specials.add_bos,
            Front::Hf(f) => !f.prefix.is_empty(),
        }
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        match &self.front {
            Front::Llama(_) => self.specials.add_eos,
            Front::Hf(f) => !f.suffix.is_empty(),
        }
    }

    /// Ids that end generation (eos, eot, eom and every token whose text is
    /// a known end marker, as llama.cpp decides), sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// True if `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// A decoder for a stream of ids that returns only complete UTF-8. Its
    /// output concatenates to [`Tokenizer::decode`] of the same ids; call
    /// [`StreamDecoder::continuing`] when the ids continue earlier text (e.g.
    /// generated tokens after a prompt) so no prefix space is removed.
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special)
    }
}

/// Encodes a word through the per-call cache.
pub(crate) fn encode_cached(
    ctx: &ModelCtx<'_>,
    word: &str,
    scratch: &mut Scratch,
    cache: &mut FxHashMap<String, Vec<u32>>,
    out: &mut Vec<u32>,
) -> Result<()> {
    if word.len() > 64 {
        return ctx.encode_word(word, scratch, out);
    }
    if let Some(ids) = cache.get(word) {
        out.extend_from_slice(ids);
        return Ok(());
    }
    let start = out.len();
    ctx.encode_word(word, scratch, out)?;
    cache.insert(word.to_string(), out[start..].to_vec());
    Ok(())
}
