//! The vocabulary: token texts, scores, attributes and the text → id map.

use crate::packed::{IdIndex, PackedStrs};
use crate::Result;

/// Per-token attributes (llama.cpp's `llama_token_attr`), a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenAttr(pub u16);

impl TokenAttr {
    /// Type not given.
    pub const UNDEFINED: TokenAttr = TokenAttr(1 << 0);
    /// The unknown token.
    pub const UNKNOWN: TokenAttr = TokenAttr(1 << 1);
    /// Reserved, never produced.
    pub const UNUSED: TokenAttr = TokenAttr(1 << 2);
    /// Ordinary vocabulary entry.
    pub const NORMAL: TokenAttr = TokenAttr(1 << 3);
    /// Control / special token (bos, eos, `<start_of_turn>`...).
    pub const CONTROL: TokenAttr = TokenAttr(1 << 4);
    /// Added token matched verbatim before the model runs, rendered as text.
    pub const USER_DEFINED: TokenAttr = TokenAttr(1 << 5);
    /// Byte-fallback token `<0xXX>`.
    pub const BYTE: TokenAttr = TokenAttr(1 << 6);
    /// Swallows whitespace on its left when matched in text.
    pub const LSTRIP: TokenAttr = TokenAttr(1 << 8);
    /// Swallows whitespace on its right when matched in text.
    pub const RSTRIP: TokenAttr = TokenAttr(1 << 9);
    /// Matched in normalized text (HF `normalized: true`).
    pub const NORMALIZED: TokenAttr = TokenAttr(1 << 10);
    /// Only matched as a whole word (HF `single_word`).
    pub const SINGLE_WORD: TokenAttr = TokenAttr(1 << 11);

    /// True if any bit of `other` is set.
    pub fn has(self, other: TokenAttr) -> bool {
        self.0 & other.0 != 0
    }

    /// Control or unknown: hidden by `skip_special`, matched only with `parse_special`.
    pub fn is_special(self) -> bool {
        self.has(TokenAttr(Self::CONTROL.0 | Self::UNKNOWN.0))
    }

    /// Sets the bits of `other`.
    pub fn insert(&mut self, other: TokenAttr) {
        self.0 |= other.0;
    }

    /// Clears the bits of `other`.
    pub fn remove(&mut self, other: TokenAttr) {
        self.0 &= !other.0;
    }

    /// Maps a GGUF `tokenizer.ggml.token_type` value.
    pub fn from_gguf_type(t: i64) -> Option<TokenAttr> {
        Some(match t {
            0 => Self::UNDEFINED,
            1 => Self::NORMAL,
            2 => Self::UNKNOWN,
            3 => Self::CONTROL,
            4 => Self::USER_DEFINED,
            5 => Self::UNUSED,
            6 => Self::BYTE,
            _ => return None,
        })
    }
}

/// Token texts with their scores and attributes. The texts live in one
/// packed buffer and the text → id map is an open-addressing table of ids
/// (see [`crate::packed`]), so the whole vocabulary is a few allocations.
#[derive(Debug, Clone, Default)]
pub(crate) struct Vocab {
    texts: PackedStrs,
    pub scores: Vec<f32>,
    pub attrs: Vec<TokenAttr>,
    index: IdIndex,
}

impl Vocab {
    /// Indexes `texts`; a later duplicate text wins, as in llama.cpp; empty
    /// texts (holes in a tokenizer.json vocabulary) are never found by text.
    /// `scores` and `attrs` have one entry per text.
    pub fn new(mut texts: PackedStrs, scores: Vec<f32>, attrs: Vec<TokenAttr>) -> Result<Self> {
        texts.shrink_to_fit();
        let index = IdIndex::build(&texts)?;
        Ok(Vocab {
            texts,
            scores,
            attrs,
            index,
        })
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Text of token `id`.
    pub fn text(&self, id: usize) -> Option<&str> {
        self.texts.get(id)
    }

    /// All texts, in id order.
    pub fn texts(&self) -> impl Iterator<Item = &str> + '_ {
        self.texts.iter()
    }

    /// Total bytes of all texts.
    pub fn text_bytes(&self) -> usize {
        self.texts.total_len()
    }

    #[inline]
    pub fn get(&self, text: &str) -> Option<u32> {
        self.index.get(&self.texts, text)
    }

    /// Id of the byte-fallback token `<0xXX>` for each byte.
    pub fn byte_tokens(&self) -> [Option<u32>; 256] {
        let mut out = [None; 256];
        for (b, slot) in out.iter_mut().enumerate() {
            *slot = self.get(&format!("<0x{b:02X}>"));
        }
        out
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.texts.heap_bytes()
            + self.index.heap_bytes()
            + self.scores.capacity() * std::mem::size_of::<f32>()
            + self.attrs.capacity() * std::mem::size_of::<TokenAttr>()
    }
}

/// Parses `<0xXX>` (upper- or lower-case hex).
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Texts that llama.cpp treats as end-of-generation wherever they appear in a vocabulary.
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Texts llama.cpp picks the EOT id from when the metadata names none.
pub(crate) const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0xZZ>"), None);
        assert_eq!(parse_byte_token("<0x0>"), None);
    }
}
