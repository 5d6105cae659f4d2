//! Building a [`Tokenizer`] from HF `tokenizer.json` (+ optional
//! `tokenizer_config.json`) and the HF-style encode path.

mod pipeline;

use crate::merge::Scratch;
use crate::model::{build_merges, split_merge, Fallback, Model, ModelCtx};
use crate::packed::{PackedBytes, PackedStrs};
use crate::special::{Fragment, SpecialMatcher};
use crate::tokenizer::{encode_cached, FirstPiece, Front, Specials, Tokenizer};
use crate::unicode::FxHashMap;
use crate::vocab::{parse_byte_token, TokenAttr, Vocab, EOG_TEXTS, EOT_TEXTS};
use crate::{Error, Result};
use pipeline::{decode_piece, json_err, parse_decoder, Normalizer, PreTokenizer};
use serde_json::Value;

/// Largest token id accepted from a tokenizer.json (guards allocation).
const MAX_ID: u64 = 1 << 24;

/// The HF pipeline around the model.
#[derive(Debug, Clone)]
pub(crate) struct HfFront {
    normalizer: Option<Normalizer>,
    pre: Option<PreTokenizer>,
    /// Ids the post-processor puts before / after the sequence.
    pub prefix: Vec<u32>,
    pub suffix: Vec<u32>,
}

impl HfFront {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn encode(
        &self,
        tok: &Tokenizer,
        text: &str,
        parse_special: bool,
        ctx: &ModelCtx<'_>,
        scratch: &mut Scratch,
        cache: &mut FxHashMap<String, Vec<u32>>,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let allowed = |a: TokenAttr, normalized: bool| {
            a.has(TokenAttr::NORMALIZED) == normalized && (parse_special || !a.is_special())
        };
        for f in tok.matcher.partition_hf(text, |a| allowed(a, false)) {
            let r = match f {
                Fragment::Token(id) => {
                    out.push(id);
                    continue;
                }
                Fragment::Text(r) => r,
            };
            let first = r.start == 0;
            let norm = match &self.normalizer {
                Some(n) => n.apply(text[r].to_string())?,
                None => text[r].to_string(),
            };
            for g in tok.matcher.partition_hf(&norm, |a| allowed(a, true)) {
                let r2 = match g {
                    Fragment::Token(id) => {
                        out.push(id);
                        continue;
                    }
                    Fragment::Text(r2) => r2,
                };
                let pieces = vec![(norm[r2.clone()].to_string(), first && r2.start == 0)];
                let words = match &self.pre {
                    Some(p) => p.apply(pieces)?,
                    None => pieces,
                };
                for (w, _) in words {
                    encode_cached(ctx, &w, scratch, cache, out)?;
                }
            }
        }
        Ok(())
    }
}

fn parse_json(text: &str, file: &'static str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Json {
        file,
        detail: e.to_string(),
    })
}

/// `"<s>"` or `{"content": "<s>", ...}`.
fn token_content(v: Option<&Value>) -> Option<&str> {
    match v? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content").and_then(Value::as_str),
        _ => None,
    }
}

struct Added {
    id: u32,
    content: String,
    attr: TokenAttr,
}

/// One added token of `file`, at JSON path `at` (`added_tokens[3]`); `id`
/// when the key gives it (`added_tokens_decoder`).
fn parse_added(v: &Value, id: Option<u64>, file: &'static str, at: &str) -> Result<Added> {
    let err = |detail: String| Error::Json { file, detail };
    let id = match id {
        Some(id) => id,
        None => match v.get("id") {
            None => return Err(err(format!("{at}.id is missing"))),
            Some(x) => x
                .as_u64()
                .ok_or_else(|| err(format!("{at}.id = {x} is not a token id")))?,
        },
    };
    if id >= MAX_ID {
        return Err(err(format!(
            "{at}.id = {id} is too large (the limit is {MAX_ID})"
        )));
    }
    let content = v
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            err(format!(
                "{at}.content: added token {id} without a string content"
            ))
        })?
        .to_string();
    let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    let special = flag("special");
    let mut attr = if special {
        TokenAttr::CONTROL
    } else {
        TokenAttr::USER_DEFINED
    };
    let normalized = v
        .get("normalized")
        .and_then(Value::as_bool)
        .unwrap_or(!special);
    for (on, a) in [
        (flag("lstrip"), TokenAttr::LSTRIP),
        (flag("rstrip"), TokenAttr::RSTRIP),
        (flag("single_word"), TokenAttr::SINGLE_WORD),
        (normalized, TokenAttr::NORMALIZED),
    ] {
        if on {
            attr.insert(a);
        }
    }
    Ok(Added {
        id: id as u32,
        content,
        attr,
    })
}

/// Ids a post-processor puts around a single sequence.
fn post_ids(v: &Value, prefix: &mut Vec<u32>, suffix: &mut Vec<u32>) -> Result<()> {
    let t = v.get("type").and_then(Value::as_str).unwrap_or("");
    match t {
        "TemplateProcessing" => {
            let specials = v.get("special_tokens");
            let mut seen_seq = false;
            for item in v
                .get("single")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if item.get("Sequence").is_some() {
                    seen_seq = true;
                    continue;
                }
                let name = item
                    .get("SpecialToken")
                    .and_then(|s| s.get("id"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        json_err("TemplateProcessing item is neither Sequence nor SpecialToken")
                    })?;
                let ids = specials
                    .and_then(|s| s.get(name))
                    .and_then(|s| s.get("ids"))
                    .and_then(Value::as_array)
                    .ok_or_else(|| json_err(format!("TemplateProcessing: no ids for `{name}`")))?;
                for id in ids {
                    let id = id.as_u64().filter(|&i| i < MAX_ID).ok_or_else(|| {
                        json_err(format!("TemplateProcessing: bad id for `{name}`"))
                    })?;
                    if seen_seq {
                        suffix.push(id as u32);
                    } else {
                        prefix.push(id as u32);
                    }
                }
            }
        }
        "RobertaProcessing" | "BertProcessing" => {
            let id = |k: &str| {
                v.get(k)
                    .and_then(|p| p.get(1))
                    .and_then(Value::as_u64)
                    .filter(|&i| i < MAX_ID)
                    .map(|i| i as u32)
                    .ok_or_else(|| json_err(format!("{t}: bad `{k}`")))
            };
            prefix.push(id("cls")?);
            suffix.push(id("sep")?);
        }
        "Sequence" => {
            for p in v
                .get("processors")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                post_ids(p, prefix, suffix)?;
            }
        }
        "ByteLevel" | "" => {}
        _ => return Err(pipeline::unsupported("post_processor", v)),
    }
    Ok(())
}

impl Tokenizer {
    /// Builds a tokenizer from the text of `tokenizer.json`, optionally with
    /// `tokenizer_config.json` (its bos/eos/pad names, `add_bos_token` /
    /// `add_eos_token` and `added_tokens_decoder`).
    pub fn from_tokenizer_json(json: &str, config_json: Option<&str>) -> Result<Tokenizer> {
        let root = parse_json(json, "tokenizer.json")?;
        let config = config_json
            .map(|c| parse_json(c, "tokenizer_config.json"))
            .transpose()?;
        let model_v = root.get("model").ok_or_else(|| json_err("no `model`"))?;
        let model_type = match model_v.get("type") {
            None => "BPE",
            Some(t) => t
                .as_str()
                .ok_or_else(|| json_err(format!("model.type = {t} is not a string")))?,
        };
        if model_type != "BPE" {
            return Err(Error::UnknownModel {
                key: "model.type",
                name: model_type.to_string(),
                supported: "BPE",
            });
        }
        for k in ["continuing_subword_prefix", "end_of_word_suffix"] {
            if model_v
                .get(k)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                return Err(Error::Unsupported {
                    component: "model",
                    detail: k.to_string(),
                });
            }
        }
        let vocab_obj = model_v
            .get("vocab")
            .and_then(Value::as_object)
            .ok_or_else(|| json_err("model.vocab must be an object"))?;
        let mut entries: Vec<(u32, String, TokenAttr)> = Vec::with_capacity(vocab_obj.len());
        for (text, id) in vocab_obj {
            let id = id.as_u64().filter(|&i| i < MAX_ID).ok_or_else(|| {
                json_err(format!(
                    "model.vocab[{text:?}] = {id} is not a token id below {MAX_ID}"
                ))
            })?;
            entries.push((id as u32, text.clone(), TokenAttr::NORMAL));
        }
        let mut added = Vec::new();
        for (i, a) in root
            .get("added_tokens")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let token = parse_added(a, None, "tokenizer.json", &format!("added_tokens[{i}]"))?;
            if let Some(j) = added.iter().position(|b: &Added| b.id == token.id) {
                return Err(json_err(format!(
                    "added_tokens[{i}].id = {} is also the id of added_tokens[{j}]",
                    token.id
                )));
            }
            added.push(token);
        }
        let n_listed = added.len();
        if let Some(dec) = config
            .as_ref()
            .and_then(|c| c.get("added_tokens_decoder"))
            .and_then(Value::as_object)
        {
            for (k, v) in dec {
                let id = k.parse::<u64>().map_err(|_| Error::Json {
                    file: "tokenizer_config.json",
                    detail: format!("added_tokens_decoder key `{k}` is not an id"),
                })?;
                if !added.iter().any(|a: &Added| a.id as u64 == id) {
                    let at = format!("added_tokens_decoder[\"{k}\"]");
                    added.push(parse_added(v, Some(id), "tokenizer_config.json", &at)?);
                }
            }
        }
        // Added tokens take ids inside the vocabulary or right after it; one
        // further out would leave ids that no token has (and size the tables
        // by a typo).
        let vocab_end = entries.iter().map(|e| e.0 as usize + 1).max().unwrap_or(0);
        let limit = vocab_end + added.len();
        if let Some((i, a)) = added
            .iter()
            .enumerate()
            .find(|(_, a)| a.id as usize >= limit)
        {
            let (file, at) = if i < n_listed {
                ("tokenizer.json", format!("added_tokens[{i}].id"))
            } else {
                (
                    "tokenizer_config.json",
                    format!("added_tokens_decoder key \"{}\"", a.id),
                )
            };
            return Err(Error::Json {
                file,
                detail: format!(
                    "{at} = {} is beyond the vocabulary: model.vocab ends at id {} and {} \
                     added tokens can take ids up to {}",
                    a.id,
                    vocab_end.saturating_sub(1),
                    added.len(),
                    limit - 1
                ),
            });
        }
        let n = entries
            .iter()
            .map(|e| e.0 as usize + 1)
            .chain(added.iter().map(|a| a.id as usize + 1))
            .max()
            .ok_or(Error::EmptyVocab)?;
        let mut texts = vec![String::new(); n];
        let mut attrs = vec![TokenAttr::UNUSED; n];
        let byte_fallback = model_v
            .get("byte_fallback")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        for (id, text, attr) in entries {
            let attr = if byte_fallback && parse_byte_token(&text).is_some() {
                TokenAttr::BYTE
            } else {
                attr
            };
            texts[id as usize] = text;
            attrs[id as usize] = attr;
        }
        for a in &added {
            texts[a.id as usize] = a.content.clone();
            attrs[a.id as usize] = a.attr;
        }
        let bytes = texts.iter().map(String::len).sum();
        let mut packed = PackedStrs::with_capacity(n, bytes);
        for t in &texts {
            packed.push(t)?;
        }
        drop(texts);
        // Holes (empty texts) are never found by text.
        let vocab = Vocab::new(packed, vec![0.0; n], attrs)?;

        let merges_v = model_v
            .get("merges")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::MissingMerges("model.merges".to_string()))?;
        let merges = build_merges(
            &vocab,
            merges_v.iter().enumerate().map(|(i, m)| {
                let (a, b) = match m {
                    Value::String(s) => split_merge(i, s)?,
                    Value::Array(p) => match (
                        p.first().and_then(Value::as_str),
                        p.get(1).and_then(Value::as_str),
                        p.len(),
                    ) {
                        (Some(a), Some(b), 2) => (a, b),
                        _ => {
                            return Err(Error::BadMerge {
                                index: i,
                                text: m.to_string(),
                            })
                        }
                    },
                    _ => {
                        return Err(Error::BadMerge {
                            index: i,
                            text: m.to_string(),
                        })
                    }
                };
                // As HF `tokenizers`: both sides and their join are vocabulary tokens.
                let joined = format!("{a}{b}");
                for token in [a, b, joined.as_str()] {
                    if !vocab_obj.contains_key(token) {
                        return Err(Error::MergeNotInVocab {
                            index: i,
                            text: m.to_string(),
                            token: token.to_string(),
                        });
                    }
                }
                Ok((a, b))
            }),
        )?;
        let ignore_merges = model_v
            .get("ignore_merges")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let unk = model_v
            .get("unk_token")
            .and_then(Value::as_str)
            .and_then(|t| vocab.get(t));
        let fallback = if byte_fallback {
            Fallback::ByteTokens
        } else {
            Fallback::Unk {
                fuse: model_v
                    .get("fuse_unk")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            }
        };

        let normalizer = match root.get("normalizer") {
            None | Some(Value::Null) => None,
            Some(v) => Some(Normalizer::parse(v)?),
        };
        let pre = match root.get("pre_tokenizer") {
            None | Some(Value::Null) => None,
            Some(v) => Some(PreTokenizer::parse(v)?),
        };
        let (mut prefix, mut suffix) = (Vec::new(), Vec::new());
        if let Some(p) = root.get("post_processor").filter(|v| !v.is_null()) {
            post_ids(p, &mut prefix, &mut suffix)?;
        }
        for &id in prefix.iter().chain(&suffix) {
            if id as usize >= n {
                return Err(Error::BadSpecialId {
                    key: "post_processor".to_string(),
                    id: id.into(),
                    vocab_size: n,
                });
            }
        }
        let mut steps = Vec::new();
        let mut first_piece = FirstPiece::Keep;
        if let Some(d) = root.get("decoder").filter(|v| !v.is_null()) {
            parse_decoder(d, &mut steps, &mut first_piece)?;
        }

        // Special ids.
        let cfg_tok = |k: &str| {
            token_content(config.as_ref().and_then(|c| c.get(k))).and_then(|t| vocab.get(t))
        };
        let cfg_flag = |k: &str| {
            config
                .as_ref()
                .and_then(|c| c.get(k))
                .and_then(Value::as_bool)
        };
        let mut specials = Specials {
            bos: cfg_tok("bos_token").or_else(|| prefix.first().copied()),
            eos: cfg_tok("eos_token").or_else(|| suffix.last().copied()),
            unk,
            pad: cfg_tok("pad_token"),
            ..Specials::default()
        };
        if let (Some(add), Some(bos)) = (cfg_flag("add_bos_token"), specials.bos) {
            prefix.retain(|&x| x != bos);
            if add {
                prefix.insert(0, bos);
            }
        }
        if let (Some(add), Some(eos)) = (cfg_flag("add_eos_token"), specials.eos) {
            suffix.retain(|&x| x != eos);
            if add {
                suffix.push(eos);
            }
        }
        specials.add_bos = !prefix.is_empty();
        specials.add_eos = !suffix.is_empty();
        specials.eot = EOT_TEXTS.iter().find_map(|t| vocab.get(t));
        let mut eog: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                vocab
                    .text(i as usize)
                    .is_some_and(|t| EOG_TEXTS.contains(&t))
            })
            .collect();
        eog.extend(specials.eos);
        eog.extend(specials.eot);
        eog.sort_unstable();
        eog.dedup();

        // Added tokens matched in normalized text are matched in their normalized form.
        let mut matched = Vec::new();
        for a in &added {
            let text = match (&normalizer, a.attr.has(TokenAttr::NORMALIZED)) {
                (Some(nz), true) => nz.apply(a.content.clone())?,
                _ => a.content.clone(),
            };
            matched.push((a.id, text, a.attr));
        }
        let matcher = SpecialMatcher::new(matched.iter().map(|(id, t, a)| (*id, t.as_str(), *a)));
        let mut pieces = PackedBytes::with_capacity(n, vocab.text_bytes());
        for t in vocab.texts() {
            pieces.push(&decode_piece(t, &steps))?;
        }
        pieces.shrink_to_fit();
        let byte_ids = vocab.byte_tokens();
        Ok(Tokenizer {
            vocab,
            model: Model::Bpe {
                merges,
                ignore_merges,
            },
            fallback,
            front: Front::Hf(Box::new(HfFront {
                normalizer,
                pre,
                prefix,
                suffix,
            })),
            matcher,
            specials,
            eog,
            byte_ids,
            pieces,
            first_piece,
        })
    }
}
