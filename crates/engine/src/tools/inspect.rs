//! `inspect`: a model file's format header, metadata, tensor table, per-type
//! totals and architecture/tokenizer summaries, and one tensor dequantized
//! to f32.

use crate::{Error, Result};
use anedvd_base::{Metadata, MetadataValue};
use anedvd_weights::ModelFormat;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What to put in a [`Report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InspectOptions {
    /// Array items kept before a metadata array is abbreviated.
    pub max_array: usize,
    /// Include the per-tensor table.
    pub tensor_table: bool,
}

/// Opens the model at `path` (a .gguf file, a Hugging Face directory or a
/// .safetensors file) and describes it.
pub fn report(path: &Path, options: &InspectOptions) -> Result<Report> {
    let model = anedvd_weights::open(path)?;
    let header = match model.kind {
        ModelFormat::Gguf => Some(gguf_header(path)?),
        _ => None,
    };
    let mut report = build_report(options, &model, header);
    let source: std::sync::Arc<dyn anedvd_base::WeightSource> = std::sync::Arc::from(model.source);
    match anedvd_model::load(source, &Default::default()) {
        Ok((_, p)) => report.layers = layer_runs(&p),
        Err(e) => report.layers_error = Some(e.to_string()),
    }
    Ok(report)
}

/// One tensor: its table entry and, when its type can be dequantized, its
/// first values.
#[derive(Debug, Clone)]
pub struct TensorReport {
    /// Name.
    pub name: String,
    /// The type.
    pub dtype: anedvd_base::GgmlType,
    /// Shape (ggml ne order).
    pub shape: Vec<u64>,
    /// Elements.
    pub elements: usize,
    /// Bytes in the file.
    pub bytes: u64,
    /// The first (up to 8) values; empty when it could not be dequantized.
    pub first_values: Vec<f32>,
    /// Why it could not be dequantized.
    pub dequantize_error: Option<String>,
    /// Where its f32 values were written.
    pub written_to: Option<PathBuf>,
}

/// Looks up tensor `name` of the model at `path`, dequantizes it, and when
/// `write_to` is given writes it there as little-endian f32 (ggml ne order,
/// row-major); failing to dequantize is then an error, else it is reported.
pub fn tensor(path: &Path, name: &str, write_to: Option<&Path>) -> Result<TensorReport> {
    let model = anedvd_weights::open(path)?;
    let source = model.source.as_ref();
    let Some(t) = source.tensor(name) else {
        let close: Vec<&str> = source
            .tensors()
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| n.contains(name) || name.contains(*n))
            .take(5)
            .collect();
        return Err(Error::Invalid(format!(
            "no tensor named `{name}` in {}{}",
            path.display(),
            if close.is_empty() {
                String::new()
            } else {
                format!(" (similar: {})", close.join(", "))
            }
        )));
    };
    let info = t.info;
    let elements = usize::try_from(info.elements())
        .map_err(|_| Error::Invalid("tensor too large for this machine".into()))?;
    let mut values = Vec::new();
    let decoded = match values.try_reserve_exact(elements) {
        Ok(()) => {
            values.resize(elements, 0.0f32);
            anedvd_quant::dequantize(info.dtype, t.data, &mut values)
                .map_err(|e| format!("cannot dequantize `{name}`: {e}"))
        }
        Err(e) => Err(format!("cannot allocate {elements} floats: {e}")),
    };
    let mut written_to = None;
    if let Some(out) = write_to {
        if let Err(e) = &decoded {
            return Err(Error::Invalid(e.clone()));
        }
        write_f32(out, &values)?;
        written_to = Some(out.to_path_buf());
    }
    let first_values = if decoded.is_ok() {
        values.iter().take(8).copied().collect()
    } else {
        Vec::new()
    };
    Ok(TensorReport {
        name: info.name.clone(),
        dtype: info.dtype,
        shape: info.shape.clone(),
        elements,
        bytes: info.size_bytes,
        first_values,
        dequantize_error: decoded.err(),
        written_to,
    })
}

fn write_f32(path: &Path, values: &[f32]) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    for v in values {
        w.write_all(&v.to_le_bytes()).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// GGUF container figures not visible through `WeightSource`.
#[derive(Debug, Clone, Serialize)]
pub struct GgufHeader {
    /// GGUF version.
    pub version: u32,
    /// Tensor data alignment.
    pub alignment: u64,
    /// Offset of the tensor data.
    pub data_offset: u64,
    /// File size in bytes.
    pub file_size: u64,
}

fn gguf_header(path: &Path) -> Result<GgufHeader> {
    let f = anedvd_gguf::GgufFile::open(path)?;
    Ok(GgufHeader {
        version: f.version(),
        alignment: f.alignment(),
        data_offset: f.data_offset(),
        file_size: f.file_size(),
    })
}

/// One metadata key/value pair.
#[derive(Debug, Clone, Serialize)]
pub struct MetaEntry {
    /// The key.
    pub key: String,
    /// The value's type name.
    #[serde(rename = "type")]
    pub ty: String,
    /// Array length (arrays only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub len: Option<usize>,
    /// Arrays: the first `max_array` items.
    pub value: Value,
    /// True when `value` holds only the first items of a longer array.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// One row of the tensor table.
#[derive(Debug, Clone, Serialize)]
pub struct TensorRow {
    /// Position in the file.
    pub index: usize,
    /// Tensor name.
    pub name: String,
    /// Type name.
    #[serde(rename = "type")]
    pub ty: String,
    /// Shape (ggml ne order).
    pub shape: Vec<u64>,
    /// Elements.
    pub elements: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Counts of tensors, elements and bytes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Tensors.
    pub count: usize,
    /// Elements.
    pub elements: u64,
    /// Bytes.
    pub bytes: u64,
}

/// What `inspect` reports about a model file.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The path as given.
    pub path: String,
    /// The format's name.
    pub format: &'static str,
    /// GGUF files: the container header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gguf: Option<GgufHeader>,
    /// Every metadata pair, in file order.
    pub metadata: Vec<MetaEntry>,
    /// The tensor table (empty when not asked for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tensors: Vec<TensorRow>,
    /// Totals per tensor type.
    pub types: BTreeMap<String, Totals>,
    /// Totals over all tensors.
    pub totals: Totals,
    /// Architecture fields found in the metadata.
    pub architecture: BTreeMap<&'static str, Value>,
    /// Tokenizer fields found in the metadata or next to the model.
    pub tokenizer: BTreeMap<&'static str, Value>,
    /// What a user should know about how the model will be read
    /// (`anedvd_model::notes`), e.g. a Mistral GGUF without its window.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// How the decoder resolves, layer by layer (runs of equal blocks, e.g.
    /// `0-1: short_conv (3 taps) + dense (8192)`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<String>,
    /// Why the decoder did not resolve (unknown family, bad metadata).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers_error: Option<String>,
}

/// Runs of consecutive equal block kinds of `p`, e.g. `2: attention (8 KV
/// heads) + moe (60 experts, top 4, shared)`.
fn layer_runs(p: &anedvd_graph::DecoderProgram) -> Vec<String> {
    use anedvd_graph::{FeedForward, Mixer};
    let kind = |b: &anedvd_graph::Block| {
        let mixer = match &b.mixer {
            Mixer::Attention(a) => format!(
                "attention ({} heads, {} KV, head dim {}{}{}{})",
                a.n_head,
                a.n_head_kv,
                a.head_dim,
                a.window.map_or(String::new(), |w| format!(", window {w}")),
                if a.rope.is_none() { ", no RoPE" } else { "" },
                a.kv_source
                    .map_or(String::new(), |l| format!(", K/V of layer {l}"))
            ),
            Mixer::ShortConv(c) => format!("short_conv ({} taps)", c.kernel),
        };
        let ffn = match &b.ffn {
            FeedForward::Dense(f) => format!("dense ({})", f.n_ff),
            FeedForward::Moe(m) => format!(
                "moe ({} experts of {}, top {}{}{})",
                m.n_expert,
                m.n_ff_expert,
                m.n_expert_used,
                if m.normalize_top_k {
                    " renormalised"
                } else {
                    ""
                },
                if m.shared.is_some() {
                    ", shared expert"
                } else {
                    ""
                }
            ),
        };
        let extras = match (&b.per_layer_input, &b.layer_scale) {
            (Some(pl), Some(_)) => format!(" + per-layer input ({}), scaled", pl.width),
            (Some(pl), None) => format!(" + per-layer input ({})", pl.width),
            (None, Some(_)) => ", scaled".to_string(),
            (None, None) => String::new(),
        };
        format!("{mixer} + {ffn}{extras}")
    };
    let mut runs: Vec<(usize, usize, String)> = Vec::new();
    for (i, b) in p.layers.iter().enumerate() {
        let k = kind(b);
        match runs.last_mut() {
            Some((_, end, last)) if *last == k => *end = i,
            _ => runs.push((i, i, k)),
        }
    }
    runs.into_iter()
        .map(|(a, b, k)| {
            if a == b {
                format!("{a}: {k}")
            } else {
                format!("{a}-{b}: {k}")
            }
        })
        .collect()
}

fn build_report(
    options: &InspectOptions,
    model: &anedvd_weights::OpenedModel,
    gguf: Option<GgufHeader>,
) -> Report {
    let source = model.source.as_ref();
    let metadata = source
        .metadata()
        .iter()
        .map(|(k, v)| meta_entry(k, v, options.max_array))
        .collect();
    let mut types: BTreeMap<String, Totals> = BTreeMap::new();
    let mut totals = Totals::default();
    let mut tensors = Vec::new();
    for (index, t) in source.tensors().iter().enumerate() {
        let elements = t.elements();
        let entry = types.entry(t.dtype.name().to_string()).or_default();
        for tot in [entry, &mut totals] {
            tot.count += 1;
            tot.elements += elements;
            tot.bytes += t.size_bytes;
        }
        if options.tensor_table {
            tensors.push(TensorRow {
                index,
                name: t.name.clone(),
                ty: t.dtype.name().to_string(),
                shape: t.shape.clone(),
                elements,
                bytes: t.size_bytes,
            });
        }
    }
    Report {
        path: model.path.display().to_string(),
        format: model.kind.name(),
        gguf,
        metadata,
        tensors,
        types,
        totals,
        architecture: architecture(source.metadata(), model.kind),
        tokenizer: tokenizer(source.metadata(), model.dir.as_deref()),
        notes: anedvd_model::notes(source, &Default::default()),
        layers: Vec::new(),
        layers_error: None,
    }
}

fn meta_entry(key: &str, v: &MetadataValue, max_array: usize) -> MetaEntry {
    match v {
        MetadataValue::Array(items) => MetaEntry {
            key: key.to_string(),
            ty: v.type_name(),
            len: Some(items.len()),
            value: Value::Array(items.iter().take(max_array).map(|x| to_json(&x)).collect()),
            truncated: items.len() > max_array,
        },
        _ => MetaEntry {
            key: key.to_string(),
            ty: v.type_name(),
            len: None,
            value: to_json(v),
            truncated: false,
        },
    }
}

fn to_json(v: &MetadataValue) -> Value {
    use MetadataValue as V;
    match v {
        V::U8(x) => json!(x),
        V::I8(x) => json!(x),
        V::U16(x) => json!(x),
        V::I16(x) => json!(x),
        V::U32(x) => json!(x),
        V::I32(x) => json!(x),
        V::U64(x) => json!(x),
        V::I64(x) => json!(x),
        // Shortest f32 text (1e-6, not 9.99999997e-7); non-finite floats
        // have no JSON form and become null.
        V::F32(x) => json!(x.to_string().parse::<f64>().unwrap_or(f64::NAN)),
        V::F64(x) => json!(x),
        V::Bool(x) => json!(x),
        V::String(s) => json!(s),
        V::Array(items) => Value::Array(items.iter().map(|x| to_json(&x)).collect()),
    }
}

/// Architecture fields: (label, GGUF key suffix after `{arch}.`, HF config keys).
const ARCH_FIELDS: &[(&str, &str, &[&str])] = &[
    (
        "block_count",
        "block_count",
        &["num_hidden_layers", "n_layer"],
    ),
    (
        "context_length",
        "context_length",
        &["max_position_embeddings", "n_positions"],
    ),
    (
        "embedding_length",
        "embedding_length",
        &["hidden_size", "n_embd"],
    ),
    (
        "feed_forward_length",
        "feed_forward_length",
        &["intermediate_size"],
    ),
    (
        "head_count",
        "attention.head_count",
        &["num_attention_heads", "n_head"],
    ),
    (
        "head_count_kv",
        "attention.head_count_kv",
        &["num_key_value_heads"],
    ),
    ("head_dim", "attention.key_length", &["head_dim"]),
    ("rope_freq_base", "rope.freq_base", &["rope_theta"]),
    (
        "rms_norm_eps",
        "attention.layer_norm_rms_epsilon",
        &["rms_norm_eps"],
    ),
    (
        "sliding_window",
        "attention.sliding_window",
        &["sliding_window"],
    ),
    ("vocab_size", "vocab_size", &["vocab_size"]),
    (
        "expert_count",
        "expert_count",
        &["num_local_experts", "num_experts"],
    ),
];

fn architecture(m: &Metadata, kind: ModelFormat) -> BTreeMap<&'static str, Value> {
    let mut out = BTreeMap::new();
    let get = |key: &str| m.get(key).map(to_json);
    if kind == ModelFormat::Gguf {
        let arch = m.opt_str("general.architecture").ok().flatten();
        if let Some(arch) = arch {
            out.insert("architecture", json!(arch));
        }
        for (label, key) in [("name", "general.name"), ("file_type", "general.file_type")] {
            if let Some(v) = get(key) {
                out.insert(label, v);
            }
        }
        for &(label, suffix, _) in ARCH_FIELDS {
            if let Some(v) = arch.and_then(|a| get(&format!("{a}.{suffix}"))) {
                out.insert(label, v);
            }
        }
    } else {
        for (label, key) in [
            ("architecture", "model_type"),
            ("architectures", "architectures"),
        ] {
            if let Some(v) = get(key) {
                out.insert(label, v);
            }
        }
        // Multimodal checkpoints keep the decoder's fields under `text_config.`.
        for &(label, _, keys) in ARCH_FIELDS {
            let found = keys
                .iter()
                .flat_map(|k| [k.to_string(), format!("text_config.{k}")])
                .find_map(|k| get(&k));
            if let Some(v) = found {
                out.insert(label, v);
            }
        }
    }
    out
}

fn tokenizer(m: &Metadata, dir: Option<&Path>) -> BTreeMap<&'static str, Value> {
    let mut out = BTreeMap::new();
    match dir {
        None => {
            let get = |key: &str| m.get(key).map(to_json);
            for (label, key) in [
                ("model", "tokenizer.ggml.model"),
                ("pre", "tokenizer.ggml.pre"),
                ("bos_id", "tokenizer.ggml.bos_token_id"),
                ("eos_id", "tokenizer.ggml.eos_token_id"),
                ("pad_id", "tokenizer.ggml.padding_token_id"),
                ("unk_id", "tokenizer.ggml.unknown_token_id"),
            ] {
                if let Some(v) = get(key) {
                    out.insert(label, v);
                }
            }
            if let Ok(Some(tokens)) = m.opt_array("tokenizer.ggml.tokens") {
                out.insert("vocab_size", json!(tokens.len()));
            }
            if let Ok(Some(merges)) = m.opt_array("tokenizer.ggml.merges") {
                out.insert("merges", json!(merges.len()));
            }
            out.insert(
                "has_chat_template",
                json!(m.contains("tokenizer.chat_template")),
            );
        }
        Some(dir) => hf_tokenizer(dir, &mut out),
    }
    out
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn hf_tokenizer(dir: &Path, out: &mut BTreeMap<&'static str, Value>) {
    let tok_path = dir.join("tokenizer.json");
    out.insert("tokenizer_json", json!(tok_path.is_file()));
    if let Some(tok) = read_json(&tok_path) {
        let model = &tok["model"];
        if let Some(kind) = model["type"].as_str() {
            out.insert("model", json!(kind));
        }
        let vocab = match &model["vocab"] {
            Value::Object(o) => o.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        let added = tok["added_tokens"].as_array().map_or(0, Vec::len);
        out.insert("vocab_size", json!(vocab));
        out.insert("added_tokens", json!(added));
        if let Some(merges) = model["merges"].as_array() {
            out.insert("merges", json!(merges.len()));
        }
    }
    let cfg = read_json(&dir.join("tokenizer_config.json")).unwrap_or(Value::Null);
    let token_text = |v: &Value| -> Option<Value> {
        match v {
            Value::String(s) => Some(json!(s)),
            Value::Object(o) => o.get("content").cloned(),
            _ => None,
        }
    };
    if let Some(bos) = token_text(&cfg["bos_token"]) {
        out.insert("bos_token", bos);
    }
    if let Some(eos) = token_text(&cfg["eos_token"]) {
        out.insert("eos_token", eos);
    }
    let has_template = !cfg["chat_template"].is_null()
        || dir.join("chat_template.jinja").is_file()
        || dir.join("chat_template.json").is_file();
    out.insert("has_chat_template", json!(has_template));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_reported_as_runs_or_why_not() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/models");
        let options = InspectOptions {
            max_array: 4,
            tensor_table: false,
        };
        let r = report(&dir.join("lfm2/model-f32.gguf"), &options).unwrap();
        assert_eq!(
            r.layers,
            [
                "0-1: short_conv (3 taps) + dense (64)",
                "2: attention (4 heads, 2 KV, head dim 16) + dense (64)",
                "3-4: short_conv (3 taps) + dense (64)",
                "5: attention (4 heads, 2 KV, head dim 16) + dense (64)",
            ]
        );
        assert!(r.layers_error.is_none());
        let r = report(&dir.join("qwen2_moe/model-f32.gguf"), &options).unwrap();
        assert_eq!(
            r.layers,
            ["0-1: attention (4 heads, 2 KV, head dim 16) + moe (4 experts of 32, top 2, shared expert)"]
        );
        let r = report(&dir.join("gemma4/model-f32.gguf"), &options).unwrap();
        let pl = "per-layer input (16), scaled";
        assert_eq!(
            r.layers,
            [
                format!("0-2: attention (4 heads, 2 KV, head dim 16, window 8) + dense (32) + {pl}"),
                format!("3: attention (4 heads, 2 KV, head dim 32) + dense (32) + {pl}"),
                format!("4: attention (4 heads, 2 KV, head dim 16, window 8, K/V of layer 2) + dense (64) + {pl}"),
                format!("5: attention (4 heads, 2 KV, head dim 32, K/V of layer 3) + dense (64) + {pl}"),
            ]
        );
        // A family this build does not know: no layers, the reason instead.
        let mut w = anedvd_gguf::GgufWriter::new();
        w.add_kv(
            "general.architecture",
            MetadataValue::String("no-such-arch".into()),
        )
        .unwrap();
        w.add_tensor(
            "token_embd.weight",
            anedvd_base::GgmlType::F32,
            &[4, 2],
            vec![0u8; 32],
        )
        .unwrap();
        let path = std::env::temp_dir().join(format!("anedvd-inspect-{}.gguf", std::process::id()));
        std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
        let r = report(&path, &options).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(r.layers.is_empty());
        let e = r.layers_error.unwrap_or_default();
        assert!(e.contains("unknown model family"), "{e}");
    }
}
