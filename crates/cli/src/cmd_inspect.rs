//! `anedvd inspect`: dumps a model's format header, metadata, tensor table,
//! per-type totals and architecture/tokenizer summaries (text or JSON), and
//! can write one tensor dequantized to f32.

use anedvd_engine::tools::inspect::{self, InspectOptions, Report};
use anyhow::Result;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;

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
    // `anedvd inspect model.gguf | head` is not an error.
    crate::common::ignore_broken_pipe(run_to(args, &mut out))
}

/// Runs `anedvd inspect`, printing the report to `out`.
pub fn run_to(args: &InspectArgs, out: &mut dyn Write) -> Result<()> {
    // only a failure to open the file gets the "cannot open" context; the
    // other errors (no such tensor, ...) already say what is wrong
    let open_context = |e: anedvd_engine::Error| match e {
        anedvd_engine::Error::Weights(_) => {
            anyhow::Error::new(e).context(format!("cannot open model {}", args.model.display()))
        }
        other => other.into(),
    };
    if let Some(name) = &args.tensor {
        let t =
            inspect::tensor(&args.model, name, args.dequantize.as_deref()).map_err(open_context)?;
        return print_tensor(args, &t, out);
    }
    let options = InspectOptions {
        max_array: args.max_array,
        tensor_table: !args.no_tensors,
    };
    let report = inspect::report(&args.model, &options).map_err(open_context)?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        print_text(args, &report, out)?;
    }
    Ok(())
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
    writeln!(out, "* Layers:")?;
    for run in &r.layers {
        writeln!(out, "  {run}")?;
    }
    if let Some(e) = &r.layers_error {
        writeln!(out, "  (not resolved: {e})")?;
    }
    for note in &r.notes {
        writeln!(out, "* Note: {note}")?;
    }
    Ok(())
}

fn print_tensor(args: &InspectArgs, t: &inspect::TensorReport, out: &mut dyn Write) -> Result<()> {
    if let Some(path) = &t.written_to {
        eprintln!(
            "wrote `{}` ({} {:?}, {} values) as little-endian f32 to {} ({} bytes)",
            t.name,
            t.dtype,
            t.shape,
            t.elements,
            path.display(),
            t.elements * 4
        );
    }
    if args.json {
        let report = json!({
            "name": t.name,
            "type": t.dtype.name(),
            "shape": t.shape,
            "elements": t.elements,
            "bytes": t.bytes,
            "first_values": t.first_values,
            "dequantize_error": t.dequantize_error,
            "written_to": t.written_to.as_ref().map(|p| p.display().to_string()),
        });
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out, "name:     {}", t.name)?;
        writeln!(out, "type:     {}", t.dtype)?;
        writeln!(out, "shape:    {:?} (ggml ne order)", t.shape)?;
        writeln!(out, "elements: {}", t.elements)?;
        writeln!(out, "bytes:    {}", t.bytes)?;
        match &t.dequantize_error {
            None => writeln!(out, "first:    {:?}", t.first_values)?,
            Some(e) => writeln!(out, "first:    ({e})")?,
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use anedvd_base::{GgmlType, MetadataValue, PackedStrings};
    use clap::Parser;
    use std::path::Path;

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
