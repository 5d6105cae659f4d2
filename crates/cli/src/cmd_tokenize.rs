//! `anedvd tokenize` / `anedvd detokenize`: text ↔ token ids with a model's vocabulary.

use anedvd_engine::tools::load_tokenizer;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `anedvd tokenize`.
#[derive(Debug, Args)]
pub struct TokenizeArgs {
    /// Model: a .gguf file, a Hugging Face directory or a tokenizer.json file.
    /// Default: $ANEDVD_MODEL, else ~/.cache/models/gemma3-270m-q4_k_m.gguf.
    #[arg(short, long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Text to tokenize.
    #[arg(
        long,
        value_name = "TEXT",
        conflicts_with = "file",
        required_unless_present = "file"
    )]
    pub text: Option<String>,
    /// Read the text verbatim from a file.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Treat special-token strings (`<start_of_turn>`) as plain text.
    #[arg(long)]
    pub no_special: bool,
    /// Do not add BOS/EOS even if the model asks for them.
    #[arg(long)]
    pub no_bos: bool,
    /// Print `id<TAB>piece` per line instead of a JSON array.
    #[arg(long)]
    pub show: bool,
}

/// Arguments of `anedvd detokenize`.
#[derive(Debug, Args)]
pub struct DetokenizeArgs {
    /// Model: a .gguf file, a Hugging Face directory or a tokenizer.json file.
    /// Default: $ANEDVD_MODEL, else ~/.cache/models/gemma3-270m-q4_k_m.gguf.
    #[arg(short, long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Ids as `1,2,3` or a JSON array `[1, 2, 3]`.
    #[arg(long, value_name = "IDS")]
    pub ids: String,
    /// Drop control tokens (bos, eos, `<end_of_turn>`...).
    #[arg(long)]
    pub skip_special: bool,
}

fn model_path(flag: &Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os("ANEDVD_MODEL") {
        return Ok(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME").context("no --model given and $HOME is unset")?;
    let p = PathBuf::from(home).join(".cache/models/gemma3-270m-q4_k_m.gguf");
    if !p.exists() {
        bail!(
            "no --model given and the default model {} is absent",
            p.display()
        );
    }
    Ok(p)
}

/// Parses `1,2,3`, `1 2 3` or `[1, 2, 3]`.
fn parse_ids(s: &str) -> Result<Vec<u32>> {
    let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>()
                .with_context(|| format!("`{t}` is not a token id"))
        })
        .collect()
}

/// Runs `anedvd tokenize`.
pub fn run_tokenize(args: &TokenizeArgs) -> Result<()> {
    let tok = load_tokenizer(&model_path(&args.model)?)?;
    let text = match (&args.text, &args.file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None) => bail!("give --text or --file"),
    };
    let ids = tok.encode(&text, !args.no_bos, !args.no_special)?;
    if args.show {
        for id in ids {
            let piece = tok.piece(id).unwrap_or_default();
            println!("{id}\t{}", piece.escape_debug());
        }
    } else {
        println!("{}", serde_json::to_string(&ids)?);
    }
    Ok(())
}

/// Runs `anedvd detokenize`.
pub fn run_detokenize(args: &DetokenizeArgs) -> Result<()> {
    let tok = load_tokenizer(&model_path(&args.model)?)?;
    let ids = parse_ids(&args.ids)?;
    print!("{}", tok.decode(&ids, args.skip_special)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_forms() {
        assert_eq!(parse_ids("1,2,3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_ids("[1, 2, 3]").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_ids(" 4 5 ").unwrap(), vec![4, 5]);
        assert!(parse_ids("1,x").is_err());
    }
}
