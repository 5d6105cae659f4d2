//! `anedvd inspect`: dumps a model's format header, metadata, tensor table,
//! per-type totals and architecture/tokenizer summaries (text or JSON), and
//! can write one tensor dequantized to f32.

use anedvd_base::{Metadata, MetadataValue, WeightSource};
use anedvd_weights::ModelFormat;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Arguments of `anedvd inspect`.
#[derive(Debug, Clone, clap::Args)]
pub struct InspectArgs {
    /// The model: a .gguf file, a Hugging Face directory or a .safetensors file.
    pub model: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Array items shown before a metadata array is abbreviated.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub max_array: usize,
    /// Omit the per-tensor table (summaries are still printed).
    #[arg(long)]
    pub no_tensors: bool,
    /// Show only this tensor (with its first values when its type can be dequantized).
    #[arg(long, value_name = "NAME")]
    pub tensor: Option<String>,
    /// Write the --tensor as little-endian f32 (ggml ne order, row-major) to this file.
    #[arg(long, value_name = "OUT", requires = "tensor")]
    pub dequantize: Option<PathBuf>,
}

/// Runs `anedvd inspect`, printing to stdout (progress and notes to stderr).
pub fn run(args: &InspectArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run_to(args, &mut out) {
        // `anedvd inspect model.gguf | head` is not an error.
        Err(e) if is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Runs `anedvd inspect`, printing the report to `out`.
pub fn run_to(args: &InspectArgs, out: &mut dyn Write) -> Result<()> {
    let model = anedvd_weights::open(&args.model)
        .with_context(|| format!("cannot open model {}", args.model.display()))?;
    let header = match model.kind {
        ModelFormat::Gguf => Some(gguf_header(&args.model)?),
        _ => None,
    };
    let source = model.source.as_ref();
    if let Some(name) = &args.tensor {
        return inspect_tensor(args, source, name, out);
    }
    let report = build_report(args, &model, header);
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        print_text(args, &report, out)?;
    }
    Ok(())
}

/// GGUF container figures not visible through `WeightSource`.
#[derive(Debug, Serialize)]
struct GgufHeader {
    version: u32,
    alignment: u64,
    data_offset: u64,
    file_size: u64,
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

#[derive(Debug, Serialize)]
struct MetaEntry {
    key: String,
    #[serde(rename = "type")]
    ty: String,
    /// Array length (arrays only).
    #[serde(skip_serializing_if = "Option::is_none")]
    len: Option<usize>,
    /// Arrays: the first `max_array` items.
    value: Value,
    /// True when `value` holds only the first items of a longer array.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
}

#[derive(Debug, Serialize)]
struct TensorRow {
    index: usize,
    name: String,
    #[serde(rename = "type")]
    ty: String,
    shape: Vec<u64>,
    elements: u64,
    bytes: u64,
}

#[derive(Debug, Default, Serialize)]
struct Totals {
    count: usize,
    elements: u64,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    path: String,
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    gguf: Option<GgufHeader>,
    metadata: Vec<MetaEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tensors: Vec<TensorRow>,
    types: BTreeMap<String, Totals>,
    totals: Totals,
    architecture: BTreeMap<&'static str, Value>,
    tokenizer: BTreeMap<&'static str, Value>,
}

fn build_report(
    args: &InspectArgs,
    model: &anedvd_weights::OpenedModel,
    gguf: Option<GgufHeader>,
) -> Report {
    let source = model.source.as_ref();
    let metadata = source
        .metadata()
        .iter()
        .map(|(k, v)| meta_entry(k, v, args.max_array))
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
        if !args.no_tensors {
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
        path: args.model.display().to_string(),
        format: model.kind.name(),
        gguf,
        metadata,
        tensors,
        types,
        totals,
        architecture: architecture(source.metadata(), model.kind),
        tokenizer: tokenizer(source.metadata(), model.dir.as_deref()),
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

/// Prints `s` shortened to `max` characters with control characters escaped.
fn short(s: &str, max: usize) -> String {
    let escaped: String = s.chars().flat_map(char::escape_debug).collect();
    let n = escaped.chars().count();
    if n <= max {
        format!("\"{escaped}\"")
    } else {
        let head: String = escaped.chars().take(max).collect();
        format!("\"{head}\"… ({} chars)", s.chars().count())
    }
}

fn text_value(v: &Value) -> String {
    match v {
        Value::String(s) => short(s, 60),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(text_value).collect();
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}

fn print_text(args: &InspectArgs, r: &Report, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "* File: {}", r.path)?;
    match &r.gguf {
        Some(h) => writeln!(
            out,
            "* Format: GGUF v{} (little-endian), alignment {}, data offset {}, file size {} bytes",
            h.version, h.alignment, h.data_offset, h.file_size
        )?,
        None => writeln!(out, "* Format: {}", r.format)?,
    }
    writeln!(out, "* {} key/value pairs:", r.metadata.len())?;
    for (i, e) in r.metadata.iter().enumerate() {
        let count = e.len.unwrap_or(1);
        let more = if e.truncated {
            format!(" … ({} more)", count - args.max_array)
        } else {
            String::new()
        };
        let value = text_value(&e.value);
        writeln!(
            out,
            "  {:>4}: {:<14} | {:>8} | {} = {value}{more}",
            i + 1,
            e.ty,
            count,
            e.key
        )?;
    }
    if !r.tensors.is_empty() {
        writeln!(out, "* {} tensors:", r.totals.count)?;
        for t in &r.tensors {
            let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
            let shape = if shape.is_empty() {
                "scalar".to_string()
            } else {
                shape.join(" x ")
            };
            writeln!(
                out,
                "  {:>4}: {:<8} | {:>24} | {:>12} bytes | {}",
                t.index, t.ty, shape, t.bytes, t.name
            )?;
        }
    }
    writeln!(out, "* Tensor types:")?;
    writeln!(
        out,
        "  {:<8} {:>6} {:>14} {:>14}",
        "type", "count", "elements", "bytes"
    )?;
    for (ty, t) in &r.types {
        writeln!(
            out,
            "  {ty:<8} {:>6} {:>14} {:>14}",
            t.count, t.elements, t.bytes
        )?;
    }
    let t = &r.totals;
    writeln!(
        out,
        "  {:<8} {:>6} {:>14} {:>14}  ({:.2} MiB, {:.3} bits/weight)",
        "total",
        t.count,
        t.elements,
        t.bytes,
        t.bytes as f64 / 1048576.0,
        if t.elements == 0 {
            0.0
        } else {
            t.bytes as f64 * 8.0 / t.elements as f64
        }
    )?;
    for (title, map) in [
        ("Architecture", &r.architecture),
        ("Tokenizer", &r.tokenizer),
    ] {
        writeln!(out, "* {title}:")?;
        if map.is_empty() {
            writeln!(out, "  (none found)")?;
        }
        for (k, v) in map {
            writeln!(out, "  {k:<20} {}", text_value(v))?;
        }
    }
    Ok(())
}

fn inspect_tensor(
    args: &InspectArgs,
    source: &dyn WeightSource,
    name: &str,
    out: &mut dyn Write,
) -> Result<()> {
    let Some(t) = source.tensor(name) else {
        let close: Vec<&str> = source
            .tensors()
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| n.contains(name) || name.contains(*n))
            .take(5)
            .collect();
        bail!(
            "no tensor named `{name}` in {}{}",
            args.model.display(),
            if close.is_empty() {
                String::new()
            } else {
                format!(" (similar: {})", close.join(", "))
            }
        );
    };
    let info = t.info;
    let elements = usize::try_from(info.elements()).context("tensor too large for this machine")?;
    let mut values = Vec::new();
    let decoded = match values.try_reserve_exact(elements) {
        Ok(()) => {
            values.resize(elements, 0.0f32);
            anedvd_quant::dequantize(info.dtype, t.data, &mut values)
                .map_err(|e| anyhow::anyhow!("cannot dequantize `{name}`: {e}"))
        }
        Err(e) => Err(anyhow::anyhow!("cannot allocate {elements} floats: {e}")),
    };
    let mut written = None;
    if let Some(path) = &args.dequantize {
        if let Err(e) = &decoded {
            bail!("{e}");
        }
        write_f32(path, &values)?;
        eprintln!(
            "wrote `{name}` ({} {:?}, {elements} values) as little-endian f32 to {} ({} bytes)",
            info.dtype,
            info.shape,
            path.display(),
            elements * 4
        );
        written = Some(path.display().to_string());
    }
    let first: Vec<f32> = if decoded.is_ok() {
        values.iter().take(8).copied().collect()
    } else {
        Vec::new()
    };
    if args.json {
        let report = json!({
            "name": info.name,
            "type": info.dtype.name(),
            "shape": info.shape,
            "elements": elements,
            "bytes": info.size_bytes,
            "first_values": first,
            "dequantize_error": decoded.as_ref().err().map(|e| e.to_string()),
            "written_to": written,
        });
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out, "name:     {}", info.name)?;
        writeln!(out, "type:     {}", info.dtype)?;
        writeln!(out, "shape:    {:?} (ggml ne order)", info.shape)?;
        writeln!(out, "elements: {elements}")?;
        writeln!(out, "bytes:    {}", info.size_bytes)?;
        match &decoded {
            Ok(()) => writeln!(out, "first:    {first:?}")?,
            Err(e) => writeln!(out, "first:    ({e})")?,
        }
    }
    Ok(())
}

fn write_f32(path: &Path, values: &[f32]) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for v in values {
        w.write_all(&v.to_le_bytes())?;
    }
    w.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use anedvd_base::{GgmlType, PackedStrings};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: InspectArgs,
    }

    fn args(list: &[&str]) -> InspectArgs {
        Cli::try_parse_from(std::iter::once("inspect").chain(list.iter().copied()))
            .unwrap()
            .args
    }

    /// A tiny GGUF written by our writer; the checks below are about the
    /// command's structure and format, not values computed by our reader.
    fn tiny_gguf(dir: &Path) -> PathBuf {
        let mut w = anedvd_gguf::GgufWriter::new();
        let s = |x: &str| MetadataValue::String(x.into());
        w.add_kv("general.architecture", s("llama")).unwrap();
        w.add_kv("llama.block_count", MetadataValue::U32(2))
            .unwrap();
        w.add_kv("llama.embedding_length", MetadataValue::U32(4))
            .unwrap();
        w.add_kv("tokenizer.ggml.model", s("llama")).unwrap();
        let tokens = PackedStrings::from_strs((0..20).map(|i| format!("t{i}"))).unwrap();
        w.add_kv("tokenizer.ggml.tokens", MetadataValue::Array(tokens.into()))
            .unwrap();
        w.add_kv("tokenizer.ggml.bos_token_id", MetadataValue::U32(1))
            .unwrap();
        w.add_kv("tokenizer.chat_template", s("{{ messages }}\n"))
            .unwrap();
        let emb: Vec<u8> = (0..12)
            .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
            .collect();
        w.add_tensor("token_embd.weight", GgmlType::F32, &[4, 3], emb)
            .unwrap();
        w.add_tensor(
            "blk.0.attn_q.weight",
            GgmlType::Q8_0,
            &[32, 2],
            vec![0u8; 68],
        )
        .unwrap();
        w.add_tensor("output_norm.weight", GgmlType::F16, &[4], vec![0u8; 8])
            .unwrap();
        let path = dir.join("tiny.gguf");
        w.write(std::fs::File::create(&path).unwrap()).unwrap();
        path
    }

    fn run_capture(a: &InspectArgs) -> Result<String> {
        let mut buf = Vec::new();
        run_to(a, &mut buf)?;
        Ok(String::from_utf8(buf).unwrap())
    }

    #[test]
    fn text_report_on_tiny_gguf() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tiny_gguf(tmp.path());
        let text = run_capture(&args(&[path.to_str().unwrap()])).unwrap();
        assert!(text.contains("* Format: GGUF v3"), "{text}");
        assert!(text.contains("* 7 key/value pairs:"), "{text}");
        assert!(text.contains("* 3 tensors:"), "{text}");
        for name in [
            "token_embd.weight",
            "blk.0.attn_q.weight",
            "output_norm.weight",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
        assert!(text.contains("(12 more)"), "{text}");
        assert!(text.contains("Q8_0") && text.contains("F16"), "{text}");
        assert!(text.contains("block_count"), "{text}");
        assert!(text.contains("has_chat_template    true"), "{text}");
    }

    #[test]
    fn json_report_on_tiny_gguf() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tiny_gguf(tmp.path());
        let text = run_capture(&args(&[
            path.to_str().unwrap(),
            "--json",
            "--max-array",
            "3",
        ]))
        .unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format"], "gguf");
        assert_eq!(v["gguf"]["version"], 3);
        assert_eq!(v["tensors"].as_array().unwrap().len(), 3);
        assert_eq!(v["totals"]["count"], 3);
        assert_eq!(v["types"].as_object().unwrap().len(), 3);
        assert_eq!(v["architecture"]["architecture"], "llama");
        assert_eq!(v["architecture"]["block_count"], 2);
        assert_eq!(v["tokenizer"]["vocab_size"], 20);
        assert_eq!(v["tokenizer"]["bos_id"], 1);
        let tokens = v["metadata"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == "tokenizer.ggml.tokens")
            .unwrap();
        assert_eq!(tokens["len"], 20);
        assert_eq!(tokens["truncated"], true);
        assert_eq!(tokens["value"].as_array().unwrap().len(), 3);
        let text = run_capture(&args(&[path.to_str().unwrap(), "--json", "--no-tensors"])).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v.get("tensors").is_none());
        assert_eq!(v["totals"]["count"], 3);
    }

    #[test]
    fn dequantize_writes_f32_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tiny_gguf(tmp.path());
        let out = tmp.path().join("emb.f32");
        let a = args(&[
            path.to_str().unwrap(),
            "--tensor",
            "token_embd.weight",
            "--dequantize",
            out.to_str().unwrap(),
        ]);
        let text = run_capture(&a).unwrap();
        assert!(text.contains("shape:    [4, 3]"), "{text}");
        let bytes = std::fs::read(&out).unwrap();
        let want: Vec<u8> = (0..12)
            .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
            .collect();
        assert_eq!(bytes, want);
        let e = run_capture(&args(&[path.to_str().unwrap(), "--tensor", "nope"])).unwrap_err();
        assert!(e.to_string().contains("no tensor named `nope`"), "{e}");
        assert!(Cli::try_parse_from(["inspect", "m.gguf", "--dequantize", "x"]).is_err());
    }

    #[test]
    fn hf_directory_report() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights/tests/fixtures/tiny_hf");
        let text = run_capture(&args(&[dir.to_str().unwrap(), "--json"])).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format"], "hf-safetensors");
        assert!(v.get("gguf").is_none());
        assert_eq!(v["architecture"]["embedding_length"], 4);
        assert_eq!(v["architecture"]["head_count"], 2);
        assert_eq!(v["tensors"].as_array().unwrap().len(), 8);
        assert_eq!(v["tokenizer"]["tokenizer_json"], false);
    }

    #[test]
    fn unreadable_model_is_a_clear_error() {
        let e = run_capture(&args(&["/nonexistent/model.gguf"])).unwrap_err();
        assert!(
            format!("{e:#}").contains("/nonexistent/model.gguf"),
            "{e:#}"
        );
    }
}
