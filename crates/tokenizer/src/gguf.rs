//! Building a [`Tokenizer`] from GGUF `tokenizer.ggml.*` metadata, following
//! llama.cpp's `llama_vocab::impl::load`.

use crate::model::{build_merges, split_merge, Fallback, Model};
use crate::packed::{PackedBytes, PackedStrs};
use crate::pretok::Rule;
use crate::special::SpecialMatcher;
use crate::tokenizer::{FirstPiece, Front, LlamaFront, Specials, Tokenizer};
use crate::unicode::char_to_byte;
use crate::vocab::{parse_byte_token, TokenAttr, Vocab, EOG_TEXTS, EOT_TEXTS};
use crate::{Error, Result};
use anedvd_base::Metadata;
use std::fmt::Write as _;

/// Pre-tokenizer settings for one `tokenizer.ggml.pre` value.
struct Pre {
    patterns: &'static [&'static str],
    ignore_merges: bool,
    add_bos: bool,
}

const GPT2: &[&str] = &[r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"];
const LLAMA3: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const QWEN2: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const QWEN35: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const DEFAULT: &[&str] = &[
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    "[0-9][0-9][0-9]",
];
const STARCODER: &[&str] = &[
    r"\p{N}",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
];
const FALCON: &[&str] = &[
    r"[\p{P}\$\+<=>\^~\|`]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    "[0-9][0-9][0-9]",
];
const DEEPSEEK_LLM: &[&str] = &[
    "[\r\n]",
    "\\s?[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+",
    "\\s?[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]+",
    "\\s+$",
    "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+",
    "\\p{N}+",
];
const DEEPSEEK_CODER: &[&str] = &[
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+",
    "\\p{N}",
];
const DEEPSEEK3: &[&str] = &[
    "\\p{N}{1,3}",
    "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
];
const BLOOM: &[&str] = &[" ?[^(\\s|.,!?\u{2026}\u{3002}\u{ff0c}\u{3001}\u{964}\u{6d4}\u{60c})]+"];
const VIKING: &[&str] = &[
    " ?[^(\\s|.,!?\u{2026}\u{3002}\u{ff0c}\u{3001}\u{964}\u{6d4}\u{60c})]+",
    "\\p{N}",
];
const GPT4O: &[&str] = &[
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
];
const TEKKEN: &[&str] = &[
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
];
const SEED_CODER: &[&str] = &[
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
];

/// llama.cpp's table from `tokenizer.ggml.pre` to splitting rules. Names
/// whose splitting needs llama.cpp-specific code we do not port are absent
/// and refused.
fn pre_for(name: &str) -> Option<Pre> {
    let p = |patterns, ignore_merges, add_bos| Pre {
        patterns,
        ignore_merges,
        add_bos,
    };
    Some(match name {
        "default" => p(DEFAULT, false, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => p(LLAMA3, true, true),
        "dbrx" | "smaug-bpe" | "chatglm-bpe" => p(LLAMA3, false, false),
        "glm4" | "glm5" => p(LLAMA3, true, false),
        "deepseek-llm" => p(DEEPSEEK_LLM, false, false),
        "deepseek-coder" => p(DEEPSEEK_CODER, false, false),
        "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => p(DEEPSEEK3, false, false),
        "falcon" => p(FALCON, false, false),
        "mpt" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
        | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code"
        | "roberta-bpe" | "olmo" | "jais" | "trillion" | "granite-docling" | "exaone4" => {
            p(GPT2, false, false)
        }
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => p(STARCODER, false, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "hunyuan"
        | "solar-open" | "megrez" | "grok-2" => p(QWEN2, false, false),
        "qwen35" => p(QWEN35, false, false),
        "poro-chat" | "bloom" | "gpt3-finnish" => p(BLOOM, false, false),
        "viking" => p(VIKING, false, false),
        "tekken" => p(TEKKEN, true, true),
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => p(GPT4O, false, false),
        "seed-coder" => p(SEED_CODER, false, false),
        _ => return None,
    })
}

/// Packs `tokenizer.ggml.tokens` into one buffer (an empty text becomes
/// `[EMPTY_{id}]`, as in llama.cpp). The texts are read in place from the
/// metadata's packed strings.
fn token_texts(md: &Metadata) -> Result<PackedStrs> {
    let tokens = md.strings("tokenizer.ggml.tokens")?;
    let empties = tokens.iter().filter(|t| t.is_empty()).count();
    let bytes = tokens
        .text_bytes()
        .saturating_add(empties.saturating_mul(20));
    let mut texts = PackedStrs::with_capacity(tokens.len(), bytes);
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            texts.push_with(|b| {
                // Writing to a String cannot fail.
                let _ = write!(b, "[EMPTY_{i}]");
            })?;
        } else {
            texts.push(t)?;
        }
    }
    Ok(texts)
}

/// The number array `key` (one entry per token) converted by `f`; any
/// integer or float element type is accepted.
fn numbers<T>(
    md: &Metadata,
    key: &str,
    n: usize,
    mut f: impl FnMut(usize, f64) -> Result<T>,
) -> Result<Option<Vec<T>>> {
    let Some(arr) = md.opt_array(key)? else {
        return Ok(None);
    };
    if !arr.is_numeric() {
        return Err(Error::Metadata(anedvd_base::Error::WrongType {
            key: key.to_string(),
            expected: "array[number]",
            found: format!("array[{}]", arr.elem_type().name()),
        }));
    }
    if arr.len() != n {
        return Err(Error::LengthMismatch {
            key: key.to_string(),
            expected: n,
            found: arr.len(),
        });
    }
    (0..n)
        .map(|i| {
            // In range and numeric, checked above; u64 values past i64::MAX
            // are the only elements without an exact f64 path.
            let x = arr.f64_at(i).unwrap_or(f64::NAN);
            f(i, x)
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The token of the earliest text in `texts` that the vocabulary has
/// (llama.cpp scans a hash map, so its pick among several is arbitrary; we
/// take the list order, most specific marker first).
fn first_with_text(vocab: &Vocab, texts: &[&str]) -> Option<u32> {
    texts.iter().find_map(|t| vocab.get(t))
}

impl Tokenizer {
    /// Builds the tokenizer described by GGUF `tokenizer.ggml.*` keys.
    /// Supports `tokenizer.ggml.model` = `llama` (SentencePiece-style),
    /// `gpt2` (byte-level BPE, `tokenizer.ggml.pre` picks the splitter) and
    /// `gemma4` (SentencePiece-style BPE).
    pub fn from_gguf_metadata(md: &Metadata) -> Result<Tokenizer> {
        let kind = md.str("tokenizer.ggml.model")?;
        let pre_name = md.opt_str("tokenizer.ggml.pre")?.unwrap_or("default");
        let texts = token_texts(md)?;
        let n = texts.len();
        if n == 0 {
            return Err(Error::EmptyVocab);
        }
        let scores = numbers(md, "tokenizer.ggml.scores", n, |_, x| Ok(x as f32))?
            .unwrap_or_else(|| vec![0.0; n]);
        let attrs = numbers(md, "tokenizer.ggml.token_type", n, |i, t| {
            TokenAttr::from_gguf_type(t as i64).ok_or(Error::BadTokenType {
                id: i as u32,
                value: t as i64,
            })
        })?
        .unwrap_or_else(|| vec![TokenAttr::NORMAL; n]);
        let mut vocab = Vocab::new(texts, scores, attrs)?;

        let mut specials = Specials::default();
        let (model, fallback, front) = match kind {
            "llama" => {
                specials.bos = Some(1);
                specials.eos = Some(2);
                specials.unk = Some(0);
                specials.add_bos = true;
                let front = LlamaFront {
                    rules: Vec::new(),
                    byte_encode: false,
                    escape_whitespace: true,
                    add_space_prefix: md
                        .opt_bool("tokenizer.ggml.add_space_prefix")?
                        .unwrap_or(true),
                    newline_words: false,
                };
                (Model::Spm, Fallback::SpmBytes, front)
            }
            "gpt2" | "gemma4" => {
                let gemma4 = kind == "gemma4";
                let merges = md.strings("tokenizer.ggml.merges").map_err(|e| match e {
                    anedvd_base::Error::MissingKey { key } => Error::MissingMerges(key),
                    e => Error::Metadata(e),
                })?;
                let merges = build_merges(
                    &vocab,
                    merges.iter().enumerate().map(|(i, m)| split_merge(i, m)),
                )?;
                let (rules, ignore_merges) = if gemma4 {
                    specials.add_bos = true;
                    (vec![Rule::Newlines], false)
                } else {
                    specials.bos = Some(11);
                    specials.eos = Some(11);
                    let pre =
                        pre_for(pre_name).ok_or_else(|| Error::UnknownPre(pre_name.to_string()))?;
                    specials.add_bos = pre.add_bos;
                    let rules = pre
                        .patterns
                        .iter()
                        .map(|p| Rule::from_llama_pattern(p))
                        .collect::<Result<Vec<_>>>()?;
                    (rules, pre.ignore_merges)
                };
                let front = LlamaFront {
                    rules,
                    byte_encode: !gemma4,
                    escape_whitespace: gemma4,
                    add_space_prefix: md
                        .opt_bool("tokenizer.ggml.add_space_prefix")?
                        .unwrap_or(false),
                    newline_words: gemma4,
                };
                let fallback = if gemma4 {
                    Fallback::ByteTokens
                } else {
                    Fallback::BpeRawBytes
                };
                (
                    Model::Bpe {
                        merges,
                        ignore_merges,
                    },
                    fallback,
                    front,
                )
            }
            other => {
                return Err(Error::UnknownModel {
                    key: "tokenizer.ggml.model",
                    name: other.to_string(),
                    supported: "llama, gpt2, gemma4",
                })
            }
        };

        // Special ids from metadata (defaults that fall outside the vocabulary are dropped).
        for slot in [&mut specials.bos, &mut specials.eos, &mut specials.unk] {
            if slot.is_some_and(|id| id as usize >= n) {
                *slot = None;
            }
        }
        let mut fim_keys_present = false;
        for (key, slot) in [
            ("tokenizer.ggml.bos_token_id", &mut specials.bos),
            ("tokenizer.ggml.eos_token_id", &mut specials.eos),
            ("tokenizer.ggml.eot_token_id", &mut specials.eot),
            ("tokenizer.ggml.eom_token_id", &mut specials.eom),
            ("tokenizer.ggml.unknown_token_id", &mut specials.unk),
            ("tokenizer.ggml.padding_token_id", &mut specials.pad),
        ] {
            if let Some(id) = md.opt_u64(key)? {
                if id as usize >= n {
                    return Err(Error::BadSpecialId {
                        key: key.to_string(),
                        id,
                        vocab_size: n,
                    });
                }
                *slot = Some(id as u32);
            }
        }
        for key in [
            "tokenizer.ggml.fim_pad_token_id",
            "tokenizer.ggml.fim_rep_token_id",
        ] {
            fim_keys_present |= md.contains(key);
        }
        if let Some(b) = md.opt_bool("tokenizer.ggml.add_bos_token")? {
            specials.add_bos = b;
        }
        if let Some(b) = md.opt_bool("tokenizer.ggml.add_eos_token")? {
            specials.add_eos = b;
        }
        if kind == "gemma4" {
            specials.add_bos = true;
        }

        let eog = detect_specials(&mut vocab, &mut specials, md, fim_keys_present)?;

        let pieces = pieces(&vocab, front.escape_whitespace)?;

        let matcher = SpecialMatcher::new(vocab.texts().zip(&vocab.attrs).enumerate().filter_map(
            |(i, (text, &a))| {
                a.has(TokenAttr(
                    TokenAttr::CONTROL.0 | TokenAttr::USER_DEFINED.0 | TokenAttr::UNKNOWN.0,
                ))
                .then_some((i as u32, text, a))
            },
        ));
        let byte_ids = vocab.byte_tokens();
        let first_piece = if front.add_space_prefix {
            FirstPiece::LlamaStrip
        } else {
            FirstPiece::Keep
        };
        Ok(Tokenizer {
            vocab,
            model,
            fallback,
            front: Front::Llama(front),
            matcher,
            specials,
            eog,
            byte_ids,
            pieces,
            first_piece,
        })
    }
}

/// The bytes each token decodes to (llama.cpp's `token_to_piece`), packed:
/// control, unknown and user-defined tokens as written, normal tokens with
/// `▁` as a space (or byte-level characters as bytes), byte tokens `<0xXX>`
/// as their byte, anything else as nothing.
fn pieces(vocab: &Vocab, escape_whitespace: bool) -> Result<PackedBytes> {
    let verbatim =
        TokenAttr(TokenAttr::CONTROL.0 | TokenAttr::UNKNOWN.0 | TokenAttr::USER_DEFINED.0);
    // No piece is longer than its text, so this capacity is never exceeded.
    let mut pieces = PackedBytes::with_capacity(vocab.len(), vocab.text_bytes());
    for (i, (text, &attr)) in vocab.texts().zip(&vocab.attrs).enumerate() {
        if attr.has(verbatim) {
            pieces.push(text.as_bytes())?;
        } else if attr.has(TokenAttr::NORMAL) {
            pieces.push_with(|b| {
                // 0xE2 leads the UTF-8 of `▁`; most texts have none.
                if escape_whitespace && text.as_bytes().contains(&0xE2) {
                    let mut parts = text.split('\u{2581}');
                    b.extend_from_slice(parts.next().unwrap_or_default().as_bytes());
                    for p in parts {
                        b.push(b' ');
                        b.extend_from_slice(p.as_bytes());
                    }
                } else if escape_whitespace {
                    b.extend_from_slice(text.as_bytes());
                } else {
                    for c in text.chars() {
                        match char_to_byte(c) {
                            Some(x) => b.push(x),
                            None => b.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                }
            })?;
        } else if attr.has(TokenAttr::BYTE) {
            let b = parse_byte_token(text).ok_or_else(|| Error::BadByteToken {
                id: i as u32,
                text: text.to_string(),
            })?;
            pieces.push(&[b])?;
        } else {
            pieces.push(&[])?;
        }
    }
    pieces.shrink_to_fit();
    Ok(pieces)
}

/// llama.cpp's text-based detection of EOT/EOM/FIM/EOG tokens and the
/// per-model attribute fix-ups. Returns the sorted EOG ids.
fn detect_specials(
    vocab: &mut Vocab,
    specials: &mut Specials,
    md: &Metadata,
    fim_keys_present: bool,
) -> Result<Vec<u32>> {
    let mark_control =
        |vocab: &mut Vocab, id: u32| vocab.attrs[id as usize].insert(TokenAttr::CONTROL);
    if specials.eot.is_none() {
        specials.eot = first_with_text(vocab, EOT_TEXTS);
        if let Some(id) = specials.eot {
            mark_control(vocab, id);
        }
    }
    if specials.eom.is_none() {
        specials.eom = first_with_text(vocab, &["<|eom_id|>"]);
        if let Some(id) = specials.eom {
            mark_control(vocab, id);
        }
    }
    let fim_lists: [&[&str]; 6] = [
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
        &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
        &["<|file_sep|>"],
    ];
    let mut eog: Vec<u32> = Vec::new();
    if !fim_keys_present {
        for (k, list) in fim_lists.iter().enumerate() {
            if let Some(id) = first_with_text(vocab, list) {
                mark_control(vocab, id);
                if k >= 3 {
                    eog.push(id);
                }
            }
        }
    }
    const USER_DEFINED_TEXTS: &[&str] =
        &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];
    // Most tokens are ruled out on length or first byte alone.
    let (mut longest, mut first) = (0, [false; 256]);
    for t in EOG_TEXTS.iter().chain(USER_DEFINED_TEXTS) {
        longest = longest.max(t.len());
        if let Some(&b) = t.as_bytes().first() {
            first[b as usize] = true;
        }
    }
    let eog_from = eog.len();
    let mut user_defined = Vec::new();
    for (i, text) in vocab.texts().enumerate() {
        let lead = text.as_bytes().first().is_some_and(|&b| first[b as usize]);
        if text.len() > longest || !lead {
            continue;
        }
        if EOG_TEXTS.contains(&text) {
            eog.push(i as u32);
        }
        if USER_DEFINED_TEXTS.contains(&text) {
            user_defined.push(i);
        }
    }
    for &id in &eog[eog_from..] {
        vocab.attrs[id as usize].insert(TokenAttr::CONTROL);
    }
    for i in user_defined {
        vocab.attrs[i] = TokenAttr::USER_DEFINED;
    }
    eog.extend(specials.eos);
    eog.extend(specials.eot);
    eog.extend(specials.eom);
    eog.sort_unstable();
    eog.dedup();
    let text_of = |id: &u32| vocab.text(*id as usize).unwrap_or_default();
    let has = |t: &str| eog.iter().any(|id| text_of(id) == t);
    let end = eog.iter().copied().find(|id| text_of(id) == "<|end|>");
    if let Some(end) = end {
        if (has("<|return|>") && (has("<|call|>") || has("<|calls|>")))
            || ((has("<|call|>") || has("<|calls|>")) && has("<|flush|>"))
        {
            eog.retain(|&x| x != end);
            vocab.attrs[end as usize] = TokenAttr::USER_DEFINED;
        }
    }
    let text_of = |id: &u32| vocab.text(*id as usize).unwrap_or_default();
    let s = eog.iter().copied().find(|id| text_of(id) == "</s>");
    let marker = eog
        .iter()
        .any(|id| matches!(text_of(id), "<|tool_response>" | "<|plamo:eos|>"));
    if let (Some(s), true) = (s, marker) {
        eog.retain(|&x| x != s);
        vocab.attrs[s as usize] = TokenAttr::NORMAL;
    }

    // phi-3: special tokens swallow whitespace on their right.
    let name = md.opt_str("general.name")?.unwrap_or("").to_lowercase();
    if name.contains("phi-3") || name.contains("phi3") {
        let special =
            TokenAttr(TokenAttr::CONTROL.0 | TokenAttr::USER_DEFINED.0 | TokenAttr::UNKNOWN.0);
        for i in 0..vocab.len() {
            if vocab.attrs[i].has(special) {
                vocab.attrs[i].insert(TokenAttr::RSTRIP);
            }
        }
        if let Some(id) = vocab.get("</s>") {
            vocab.attrs[id as usize].insert(TokenAttr::RSTRIP);
        }
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            if let Some(id) = vocab.get(t) {
                vocab.attrs[id as usize].remove(TokenAttr::RSTRIP);
            }
        }
    }
    Ok(eog)
}
