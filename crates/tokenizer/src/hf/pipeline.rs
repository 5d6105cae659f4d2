//! The HF `tokenizers` components this crate implements: normalizers,
//! pre-tokenizers and per-token decoders, parsed from tokenizer.json.

use crate::pretok::{compile, Rule};
use crate::tokenizer::FirstPiece;
use crate::unicode::{byte_encode, char_to_byte};
use crate::vocab::parse_byte_token;
use crate::{Error, Result};
use serde_json::Value;
use unicode_normalization::UnicodeNormalization;

pub(crate) fn unsupported(component: &'static str, v: &Value) -> Error {
    Error::Unsupported {
        component,
        detail: v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string(),
    }
}

pub(crate) fn json_err(detail: impl Into<String>) -> Error {
    Error::Json {
        file: "tokenizer.json",
        detail: detail.into(),
    }
}

fn field_str<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a str> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| json_err(format!("{at}: `{key}` must be a string")))
}

/// A `pattern` object: `{"String": s}` or `{"Regex": r}`.
#[derive(Debug, Clone)]
pub(crate) enum Pattern {
    Literal(String),
    Regex(Box<fancy_regex::Regex>),
}

impl Pattern {
    fn parse(v: &Value, at: &str) -> Result<Pattern> {
        if let Some(s) = v.get("String").and_then(Value::as_str) {
            return Ok(Pattern::Literal(s.to_string()));
        }
        if let Some(r) = v.get("Regex").and_then(Value::as_str) {
            return Ok(Pattern::Regex(Box::new(compile(r)?)));
        }
        Err(json_err(format!(
            "{at}: pattern must be {{String}} or {{Regex}}"
        )))
    }

    fn find(&self, text: &str, out: &mut Vec<std::ops::Range<usize>>) -> Result<()> {
        match self {
            Pattern::Literal(s) => {
                if !s.is_empty() {
                    out.extend(text.match_indices(s.as_str()).map(|(i, m)| i..i + m.len()));
                }
                Ok(())
            }
            Pattern::Regex(re) => Rule::Regex(re.clone()).find(text, out),
        }
    }
}

/// A normalizer.
#[derive(Debug, Clone)]
pub(crate) enum Normalizer {
    Sequence(Vec<Normalizer>),
    Prepend(String),
    Replace(Pattern, String),
    Nfc,
    Nfd,
    Nfkc,
    Nfkd,
    Lowercase,
    Strip { left: bool, right: bool },
}

impl Normalizer {
    pub fn parse(v: &Value) -> Result<Normalizer> {
        let t = field_str(v, "type", "normalizer")?;
        Ok(match t {
            "Sequence" => Normalizer::Sequence(
                v.get("normalizers")
                    .and_then(Value::as_array)
                    .ok_or_else(|| json_err("normalizer Sequence without `normalizers`"))?
                    .iter()
                    .map(Normalizer::parse)
                    .collect::<Result<_>>()?,
            ),
            "Prepend" => Normalizer::Prepend(field_str(v, "prepend", "Prepend")?.to_string()),
            "Replace" => Normalizer::Replace(
                Pattern::parse(v.get("pattern").unwrap_or(&Value::Null), "Replace")?,
                field_str(v, "content", "Replace")?.to_string(),
            ),
            "NFC" => Normalizer::Nfc,
            "NFD" => Normalizer::Nfd,
            "NFKC" => Normalizer::Nfkc,
            "NFKD" => Normalizer::Nfkd,
            "Lowercase" => Normalizer::Lowercase,
            "Strip" => Normalizer::Strip {
                left: v.get("strip_left").and_then(Value::as_bool).unwrap_or(true),
                right: v
                    .get("strip_right")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            },
            _ => return Err(unsupported("normalizer", v)),
        })
    }

    pub fn apply(&self, s: String) -> Result<String> {
        Ok(match self {
            Normalizer::Sequence(list) => {
                let mut s = s;
                for n in list {
                    s = n.apply(s)?;
                }
                s
            }
            Normalizer::Prepend(p) => {
                if s.is_empty() {
                    s
                } else {
                    format!("{p}{s}")
                }
            }
            Normalizer::Replace(p, content) => {
                let mut ms = Vec::new();
                p.find(&s, &mut ms)?;
                let mut out = String::with_capacity(s.len());
                let mut at = 0;
                for m in ms {
                    out.push_str(&s[at..m.start]);
                    out.push_str(content);
                    at = m.end;
                }
                out.push_str(&s[at..]);
                out
            }
            Normalizer::Nfc => s.nfc().collect(),
            Normalizer::Nfd => s.nfd().collect(),
            Normalizer::Nfkc => s.nfkc().collect(),
            Normalizer::Nfkd => s.nfkd().collect(),
            Normalizer::Lowercase => s.to_lowercase(),
            Normalizer::Strip { left, right } => {
                let mut t = s.as_str();
                if *left {
                    t = t.trim_start();
                }
                if *right {
                    t = t.trim_end();
                }
                t.to_string()
            }
        })
    }
}

/// How a split keeps its delimiters (HF `SplitDelimiterBehavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behavior {
    Removed,
    Isolated,
    MergedWithPrevious,
    MergedWithNext,
    Contiguous,
}

impl Behavior {
    fn parse(v: &Value) -> Result<Behavior> {
        Ok(match v.as_str().unwrap_or("") {
            "Removed" => Behavior::Removed,
            "Isolated" => Behavior::Isolated,
            "MergedWithPrevious" => Behavior::MergedWithPrevious,
            "MergedWithNext" => Behavior::MergedWithNext,
            "Contiguous" => Behavior::Contiguous,
            other => return Err(json_err(format!("unknown split behavior `{other}`"))),
        })
    }
}

/// When Metaspace prepends its replacement character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prepend {
    Always,
    First,
    Never,
}

/// A pre-tokenizer.
#[derive(Debug, Clone)]
pub(crate) enum PreTokenizer {
    Sequence(Vec<PreTokenizer>),
    ByteLevel {
        add_prefix_space: bool,
        use_regex: bool,
    },
    Split {
        rule: SplitRule,
        behavior: Behavior,
        invert: bool,
    },
    Metaspace {
        replacement: char,
        prepend: Prepend,
        split: bool,
    },
    Digits {
        individual: bool,
    },
    WhitespaceSplit,
}

/// What a Split looks for.
#[derive(Debug, Clone)]
pub(crate) enum SplitRule {
    Pattern(Pattern),
    Rule(Rule),
}

fn parse_prepend(v: &Value) -> Prepend {
    match v.get("prepend_scheme").and_then(Value::as_str) {
        Some("first") => Prepend::First,
        Some("never") => Prepend::Never,
        Some(_) => Prepend::Always,
        None => {
            if v.get("add_prefix_space")
                .and_then(Value::as_bool)
                .unwrap_or(true)
            {
                Prepend::Always
            } else {
                Prepend::Never
            }
        }
    }
}

fn replacement(v: &Value) -> char {
    v.get("replacement")
        .and_then(Value::as_str)
        .and_then(|s| s.chars().next())
        .unwrap_or('\u{2581}')
}

impl PreTokenizer {
    pub fn parse(v: &Value) -> Result<PreTokenizer> {
        let t = field_str(v, "type", "pre_tokenizer")?;
        Ok(match t {
            "Sequence" => PreTokenizer::Sequence(
                v.get("pretokenizers")
                    .and_then(Value::as_array)
                    .ok_or_else(|| json_err("pre_tokenizer Sequence without `pretokenizers`"))?
                    .iter()
                    .map(PreTokenizer::parse)
                    .collect::<Result<_>>()?,
            ),
            "ByteLevel" => PreTokenizer::ByteLevel {
                add_prefix_space: v
                    .get("add_prefix_space")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
                use_regex: v.get("use_regex").and_then(Value::as_bool).unwrap_or(true),
            },
            "Split" => {
                let pat = v.get("pattern").unwrap_or(&Value::Null);
                let rule = match pat.get("Regex").and_then(Value::as_str) {
                    Some(r) => SplitRule::Rule(Rule::from_pattern(r)?),
                    None => SplitRule::Pattern(Pattern::parse(pat, "Split")?),
                };
                PreTokenizer::Split {
                    rule,
                    behavior: Behavior::parse(v.get("behavior").unwrap_or(&Value::Null))?,
                    invert: v.get("invert").and_then(Value::as_bool).unwrap_or(false),
                }
            }
            "Metaspace" => PreTokenizer::Metaspace {
                replacement: replacement(v),
                prepend: parse_prepend(v),
                split: v.get("split").and_then(Value::as_bool).unwrap_or(true),
            },
            "Digits" => PreTokenizer::Digits {
                individual: v
                    .get("individual_digits")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            },
            "WhitespaceSplit" => PreTokenizer::WhitespaceSplit,
            _ => return Err(unsupported("pre_tokenizer", v)),
        })
    }

    /// Splits each piece further. `first` tells whether a piece starts the input.
    pub fn apply(&self, pieces: Vec<(String, bool)>) -> Result<Vec<(String, bool)>> {
        let mut out = Vec::with_capacity(pieces.len());
        match self {
            PreTokenizer::Sequence(list) => {
                let mut p = pieces;
                for pt in list {
                    p = pt.apply(p)?;
                }
                return Ok(p);
            }
            PreTokenizer::ByteLevel {
                add_prefix_space,
                use_regex,
            } => {
                let mut ranges = Vec::new();
                for (piece, first) in pieces {
                    let piece = if *add_prefix_space && !piece.starts_with(' ') {
                        format!(" {piece}")
                    } else {
                        piece
                    };
                    ranges.clear();
                    if *use_regex {
                        Rule::Gpt2.find(&piece, &mut ranges)?;
                    } else {
                        ranges.push(0..piece.len());
                    }
                    for (k, r) in ranges.iter().enumerate() {
                        let mut s = String::with_capacity(r.len() * 2);
                        byte_encode(piece[r.clone()].as_bytes(), &mut s);
                        out.push((s, first && k == 0));
                    }
                }
            }
            PreTokenizer::Split {
                rule,
                behavior,
                invert,
            } => {
                let mut ms = Vec::new();
                for (piece, first) in pieces {
                    ms.clear();
                    match rule {
                        SplitRule::Pattern(p) => p.find(&piece, &mut ms)?,
                        SplitRule::Rule(r) => r.find(&piece, &mut ms)?,
                    }
                    push_split(&piece, first, &ms, *behavior, *invert, &mut out);
                }
            }
            PreTokenizer::Metaspace {
                replacement,
                prepend,
                split,
            } => {
                let rep = replacement.to_string();
                for (piece, first) in pieces {
                    let mut s = piece.replace(' ', &rep);
                    let add = match prepend {
                        Prepend::Always => true,
                        Prepend::First => first,
                        Prepend::Never => false,
                    };
                    if add && !s.starts_with(*replacement) {
                        s.insert(0, *replacement);
                    }
                    if *split {
                        let ms: Vec<_> = s
                            .match_indices(*replacement)
                            .map(|(i, m)| i..i + m.len())
                            .collect();
                        push_split(&s, first, &ms, Behavior::MergedWithNext, false, &mut out);
                    } else {
                        out.push((s, first));
                    }
                }
            }
            PreTokenizer::Digits { individual } => {
                for (piece, first) in pieces {
                    // HF splits on `char::is_numeric` (every \p{N}, not only ASCII).
                    let ms: Vec<_> = piece
                        .char_indices()
                        .filter(|(_, c)| c.is_numeric())
                        .map(|(i, c)| i..i + c.len_utf8())
                        .collect();
                    let b = if *individual {
                        Behavior::Isolated
                    } else {
                        Behavior::Contiguous
                    };
                    push_split(&piece, first, &ms, b, false, &mut out);
                }
            }
            PreTokenizer::WhitespaceSplit => {
                for (piece, first) in pieces {
                    for (k, w) in piece.split_whitespace().enumerate() {
                        out.push((w.to_string(), first && k == 0));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Turns delimiter matches into pieces per `behavior` (HF `NormalizedString::split`).
fn push_split(
    s: &str,
    first: bool,
    ms: &[std::ops::Range<usize>],
    behavior: Behavior,
    invert: bool,
    out: &mut Vec<(String, bool)>,
) {
    // (range, is_delimiter) covering s.
    let mut parts: Vec<(std::ops::Range<usize>, bool)> = Vec::new();
    let mut at = 0;
    for m in ms {
        if m.start > at {
            parts.push((at..m.start, invert));
        }
        parts.push((m.clone(), !invert));
        at = m.end;
    }
    if at < s.len() {
        parts.push((at..s.len(), invert));
    }
    let mut pieces: Vec<std::ops::Range<usize>> = Vec::new();
    match behavior {
        Behavior::Removed => pieces.extend(parts.into_iter().filter(|p| !p.1).map(|p| p.0)),
        Behavior::Isolated => pieces.extend(parts.into_iter().map(|p| p.0)),
        Behavior::Contiguous => {
            let mut last_delim = false;
            for (r, d) in parts {
                match pieces.last_mut() {
                    Some(prev) if d && last_delim => prev.end = r.end,
                    _ => pieces.push(r),
                }
                last_delim = d;
            }
        }
        Behavior::MergedWithPrevious => {
            let mut prev_plain = false;
            for (r, d) in parts {
                match pieces.last_mut() {
                    Some(prev) if d && prev_plain => prev.end = r.end,
                    _ => pieces.push(r),
                }
                prev_plain = !d;
            }
        }
        Behavior::MergedWithNext => {
            let mut pending: Option<std::ops::Range<usize>> = None;
            for (r, d) in parts {
                if d {
                    if let Some(p) = pending.take() {
                        pieces.push(p);
                    }
                    pending = Some(r);
                } else {
                    match pending.take() {
                        Some(p) => pieces.push(p.start..r.end),
                        None => pieces.push(r),
                    }
                }
            }
            if let Some(p) = pending {
                pieces.push(p);
            }
        }
    }
    for (k, r) in pieces.into_iter().enumerate() {
        if !r.is_empty() {
            out.push((s[r].to_string(), first && k == 0));
        }
    }
}

/// A per-token decoding step.
#[derive(Debug, Clone)]
pub(crate) enum DecodeStep {
    ByteLevel,
    Replace(String, String),
    ByteFallback,
}

/// Parses the decoder into per-token steps plus "strip one leading space
/// from the start of the text".
pub(crate) fn parse_decoder(
    v: &Value,
    steps: &mut Vec<DecodeStep>,
    first: &mut FirstPiece,
) -> Result<()> {
    let t = field_str(v, "type", "decoder")?;
    match t {
        "Sequence" => {
            for d in v
                .get("decoders")
                .and_then(Value::as_array)
                .ok_or_else(|| json_err("decoder Sequence without `decoders`"))?
            {
                parse_decoder(d, steps, first)?;
            }
        }
        "ByteLevel" => steps.push(DecodeStep::ByteLevel),
        "ByteFallback" => steps.push(DecodeStep::ByteFallback),
        "Fuse" => {}
        "Replace" => {
            let pat = v.get("pattern").unwrap_or(&Value::Null);
            let from = pat
                .get("String")
                .and_then(Value::as_str)
                .ok_or_else(|| unsupported("decoder", v))?;
            steps.push(DecodeStep::Replace(
                from.to_string(),
                field_str(v, "content", "Replace")?.to_string(),
            ));
        }
        "Strip" => {
            let content = v.get("content").and_then(Value::as_str).unwrap_or(" ");
            let start = v.get("start").and_then(Value::as_u64).unwrap_or(0);
            if content == " " && start > 0 {
                *first = FirstPiece::StripOneSpace;
            }
        }
        "Metaspace" => {
            steps.push(DecodeStep::Replace(
                replacement(v).to_string(),
                " ".to_string(),
            ));
            if parse_prepend(v) != Prepend::Never {
                *first = FirstPiece::DropSpaces;
            }
        }
        _ => return Err(unsupported("decoder", v)),
    }
    Ok(())
}

/// Applies the per-token steps to one token's text.
pub(crate) fn decode_piece(text: &str, steps: &[DecodeStep]) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    for step in steps {
        bytes = match step {
            DecodeStep::Replace(from, to) => match std::str::from_utf8(&bytes) {
                Ok(s) => s.replace(from.as_str(), to).into_bytes(),
                Err(_) => bytes,
            },
            DecodeStep::ByteFallback => {
                match std::str::from_utf8(&bytes).ok().and_then(parse_byte_token) {
                    Some(b) => vec![b],
                    None => bytes,
                }
            }
            DecodeStep::ByteLevel => match std::str::from_utf8(&bytes) {
                Ok(s) => s
                    .chars()
                    .map(char_to_byte)
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(|| s.as_bytes().to_vec()),
                Err(_) => bytes,
            },
        };
    }
    bytes
}
