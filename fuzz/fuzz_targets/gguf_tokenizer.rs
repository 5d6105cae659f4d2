//! GGUF tokenizer metadata to `Tokenizer::from_gguf_metadata`, then an
//! arbitrary text encoded and decoded.
//!
//! Input byte 0 picks the mode:
//! * even: raw — byte 1 is the text length `L`, bytes `2..2+L` the text, the
//!   rest a GGUF file parsed by `GgufFile::from_bytes` (seeds are the
//!   metadata of the tiny fixture models);
//! * odd: structured — the rest is decoded by `arbitrary` into a vocabulary
//!   (`llama` / `gpt2` / `gemma4`, fuzz-chosen tokens, types, scores,
//!   merges built from token pairs, special ids, flags; optionally the 256
//!   byte-level characters or `<0xXX>` tokens), written with `GgufWriter`
//!   and read back.
//!
//! Asserts: no panic; every id is below the vocabulary size and decodes; the
//! stream decoder agrees with `decode`; and `decode(encode(text)) == text`
//! when the vocabulary is lossless for that text (see `lossless`).
#![no_main]

#[path = "common/tok.rs"]
mod tok;

use anedvd_base::{Metadata, MetadataArray, MetadataValue, PackedStrings};
use anedvd_gguf::{GgufFile, GgufWriter};
use anedvd_tokenizer::Tokenizer;
use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;

const PRES: &[&str] = &[
    "default", "llama3", "qwen2", "qwen35", "gpt-2", "starcoder", "falcon", "deepseek-llm",
    "deepseek-coder", "deepseek-v3", "bloom", "viking", "gpt-4o", "tekken", "seed-coder",
    "no-such-pre",
];
const KINDS: &[&str] = &["llama", "gpt2", "gemma4", "bert"];
const SPECIAL_KEYS: &[&str] = &[
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.fim_pad_token_id",
];
/// Texts llama.cpp treats specially (end-of-generation markers and friends).
const MARKERS: &[&str] = &[
    "<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<|flush|>", "<end_of_turn>", "<|eot_id|>", "<|fim_prefix|>", "<|fim_pad|>", "<|channel|>",
    "<|tool_response>", "\n", "\n\n", " ", "\u{2581}", "\u{2581}\u{2581}", "<0x41>", "<0xZZ>",
];

#[derive(Debug, Arbitrary)]
enum Tok {
    Text(String),
    Marker(u8),
}

#[derive(Debug, Arbitrary)]
struct Spec {
    kind: u8,
    pre: u8,
    tokens: Vec<Tok>,
    byte_level_chars: bool,
    byte_tokens: bool,
    /// `tokenizer.ggml.token_type`: none, or one value per token (cycled).
    types: Option<Vec<u8>>,
    types_wrong_len: bool,
    scores: Option<Vec<f32>>,
    /// Merges as pairs of token indices (`"a b"`); the merged text is
    /// added as a token when `add_merged` is set.
    merges: Vec<(u16, u16)>,
    raw_merges: Vec<String>,
    add_merged: bool,
    specials: Vec<(u8, u32)>,
    add_bos: Option<bool>,
    add_eos: Option<bool>,
    add_space_prefix: Option<bool>,
    phi3_name: bool,
    text: String,
    add_special: bool,
    parse_special: bool,
}

fn token_text(t: &Tok) -> String {
    match t {
        Tok::Text(s) => s.clone(),
        Tok::Marker(i) => MARKERS[*i as usize % MARKERS.len()].to_string(),
    }
}

fn build(spec: &Spec) -> Option<Metadata> {
    let mut texts: Vec<String> = spec.tokens.iter().take(200).map(token_text).collect();
    let mut types: Vec<i32> = match &spec.types {
        Some(t) if !t.is_empty() => (0..texts.len()).map(|i| (t[i % t.len()] % 8) as i32).collect(),
        _ => vec![1; texts.len()],
    };
    if spec.byte_level_chars {
        for b in 0..=255u8 {
            texts.push(tok::byte_level_char(b).to_string());
            types.push(1);
        }
    }
    if spec.byte_tokens {
        for b in 0..=255u8 {
            texts.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
    }
    let mut merges = Vec::new();
    let base = texts.len();
    for &(a, b) in spec.merges.iter().take(300) {
        if base == 0 {
            break;
        }
        let (a, b) = (&texts[a as usize % base], &texts[b as usize % base]);
        if a.contains(' ') || b.contains(' ') {
            continue;
        }
        merges.push(format!("{a} {b}"));
        if spec.add_merged {
            let m = format!("{a}{b}");
            texts.push(m);
            types.push(1);
        }
    }
    merges.extend(spec.raw_merges.iter().take(20).cloned());
    let scores: Option<Vec<f32>> = spec.scores.as_ref().map(|s| {
        (0..texts.len())
            .map(|i| if s.is_empty() { 0.0 } else { s[i % s.len()] })
            .collect()
    });
    if spec.types_wrong_len {
        types.push(1);
    }

    let mut w = GgufWriter::new();
    let kind = KINDS[spec.kind as usize % KINDS.len()];
    let s = |x: &str| MetadataValue::String(x.to_string());
    w.add_kv("tokenizer.ggml.model", s(kind)).ok()?;
    w.add_kv("tokenizer.ggml.pre", s(PRES[spec.pre as usize % PRES.len()])).ok()?;
    let strs = |v: &[String]| {
        MetadataValue::Array(MetadataArray::String(PackedStrings::from_strs(v).unwrap()))
    };
    w.add_kv("tokenizer.ggml.tokens", strs(&texts)).ok()?;
    w.add_kv("tokenizer.ggml.merges", strs(&merges)).ok()?;
    if spec.types.is_some() || spec.types_wrong_len {
        w.add_kv("tokenizer.ggml.token_type", MetadataValue::Array(MetadataArray::I32(types))).ok()?;
    }
    if let Some(sc) = scores {
        w.add_kv("tokenizer.ggml.scores", MetadataValue::Array(MetadataArray::F32(sc))).ok()?;
    }
    for &(k, id) in spec.specials.iter().take(8) {
        let key = SPECIAL_KEYS[k as usize % SPECIAL_KEYS.len()];
        // Ids mostly inside the vocabulary, sometimes anywhere.
        let id = if k & 0x80 != 0 { id } else { id % (texts.len() as u32 + 1) };
        let _ = w.add_kv(key, MetadataValue::U32(id));
    }
    for (key, v) in [
        ("tokenizer.ggml.add_bos_token", spec.add_bos),
        ("tokenizer.ggml.add_eos_token", spec.add_eos),
        ("tokenizer.ggml.add_space_prefix", spec.add_space_prefix),
    ] {
        if let Some(b) = v {
            w.add_kv(key, MetadataValue::Bool(b)).ok()?;
        }
    }
    if spec.phi3_name {
        w.add_kv("general.name", s("Phi-3 mini")).ok()?;
    }
    let file = GgufFile::from_bytes(w.to_bytes().ok()?).expect("writer output parses");
    Some(file.metadata().clone())
}

/// Whether `decode(encode(text)) == text` must hold: only ordinary (and,
/// for SentencePiece-style vocabularies, byte) tokens were produced, and the
/// vocabulary can spell every byte — byte-level BPE (`gpt2`) through the
/// 256 byte-level characters; `llama` / `gemma4` through the 256 `<0xXX>`
/// tokens plus `▁` (the text must not contain `▁` itself, which they cannot
/// tell from a space, nor `<0x`, which can merge into a byte token).
fn lossless(t: &Tokenizer, md: &Metadata, text: &str, ids: &[u32]) -> bool {
    match md.opt_str("tokenizer.ggml.model").ok().flatten() {
        Some("gpt2") => ids.iter().all(|&i| tok::plain(t, i)) && tok::has_all_byte_level_chars(t),
        Some("llama") | Some("gemma4") => {
            !text.contains('\u{2581}')
                && !text.contains("<0x")
                && ids.iter().all(|&i| tok::plain(t, i) || tok::byte_token(t, i))
                && t.token_id("\u{2581}").is_some_and(|i| tok::plain(t, i))
                && tok::has_all_byte_tokens(t)
        }
        _ => false,
    }
}

fn run(md: &Metadata, text: &str, add_special: bool, parse_special: bool) {
    let Ok(t) = Tokenizer::from_gguf_metadata(md) else {
        return;
    };
    tok::check(&t, text, add_special, parse_special);
    if let Some(ids) = tok::check(&t, text, false, false) {
        if lossless(&t, md, text, &ids) {
            tok::assert_roundtrip(&t, text, &ids);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let Some((&len, rest)) = rest.split_first() else {
            return;
        };
        let len = (len as usize).min(rest.len());
        let text = String::from_utf8_lossy(&rest[..len]);
        let Ok(file) = GgufFile::from_bytes(rest[len..].to_vec()) else {
            return;
        };
        run(file.metadata(), &text, mode & 2 != 0, mode & 4 != 0);
    } else {
        let Ok(spec) = Spec::arbitrary_take_rest(Unstructured::new(rest)) else {
            return;
        };
        if let Some(md) = build(&spec) {
            run(&md, &spec.text, spec.add_special, spec.parse_special);
        }
    }
});
