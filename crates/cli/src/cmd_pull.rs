//! `anedvd pull`: fetch a model from the Hugging Face hub into the cache
//! `huggingface_hub` uses, and `--model hf://...` (the same, then load).

use anedvd_hub::{HubOptions, ModelRef, Progress, PullRequest, Pulled};
use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::Mutex;

/// The long help of `anedvd pull`.
pub const LONG_ABOUT: &str = "\
Download a model from the Hugging Face hub and print its local path.

What is fetched:
  ORG/REPO:FILE     that file (a split GGUF part: the whole set)
  ORG/REPO:Q4_K_M   the GGUF whose name carries the quant tag (case-insensitive);
                    a single file is preferred to a split -0000N-of-0000M set,
                    several matches are listed and you name one with :FILE
  ORG/REPO          a GGUF repo: its Q4_K_M (or its only model; else the GGUFs
                    are listed); a Hugging Face repo: config.json, tokenizer.json,
                    tokenizer_config.json, generation_config.json,
                    chat_template.jinja and the safetensors weights (the index
                    and the shards it names)
  --include GLOB    also these files (without :FILE/:QUANT: only these)

Files go into the huggingface_hub cache ($HF_HUB_CACHE, else $HF_HOME/hub, else
~/.cache/huggingface/hub) in its layout, so Python tools and anedvd share them.
Downloads resume after an interruption and are verified (sha256 for LFS files,
the git blob sha1 for small ones). The printed path is what --model takes; or
pass --model hf://ORG/REPO[:FILE|:QUANT] to any command to pull and load.

Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (or the
token file $HF_HOME/token) for gated and private repos, HF_HUB_OFFLINE=1 to use
the cache only (also used, with a note, when the hub cannot be reached).";

/// Arguments of `anedvd pull`.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// The repo and, after `:`, a file or a GGUF quant tag (an `hf://` prefix is accepted).
    #[arg(value_name = "ORG/REPO[:FILE|:QUANT]")]
    pub model: String,
    /// Branch, tag or commit hash to fetch.
    #[arg(long, default_value = "main", value_name = "REV")]
    pub revision: String,
    /// Also fetch the repo files matching GLOB (`*`, `?`, `[...]`, as
    /// huggingface-cli's --include); repeatable. Without :FILE or :QUANT,
    /// only these are fetched and the snapshot folder is printed.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// No progress bars or notes: print only the path.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs `anedvd pull`.
pub fn run(args: &PullArgs) -> Result<()> {
    let model = ModelRef::parse(&args.model)?;
    let request = PullRequest {
        model,
        revision: args.revision.clone(),
        include: args.include.clone(),
    };
    let pulled = fetch(&request, args.quiet)?;
    println!("{}", pulled.path.display());
    Ok(())
}

/// The local path of `hf://` reference `spec` (the part after `hf://`):
/// pulled at `main`, or found in the cache. Each reference is resolved once
/// per process.
pub fn resolve_hf(spec: &str) -> Result<PathBuf> {
    static RESOLVED: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    if let Ok(done) = RESOLVED.lock() {
        if let Some((_, p)) = done.iter().find(|(s, _)| s == spec) {
            return Ok(p.clone());
        }
    }
    let model = ModelRef::parse(spec)?;
    let pulled = fetch(&PullRequest::new(model), false)
        .with_context(|| format!("cannot get the model hf://{spec}"))?;
    eprintln!("note: hf://{spec} is {}", pulled.path.display());
    if let Ok(mut done) = RESOLVED.lock() {
        done.push((spec.to_string(), pulled.path.clone()));
    }
    Ok(pulled.path)
}

/// Pulls `request` with progress bars on stderr (none when `quiet`).
fn fetch(request: &PullRequest, quiet: bool) -> Result<Pulled> {
    let opts = HubOptions::from_env();
    let mut bars = Bars { quiet, bar: None };
    let pulled = anedvd_hub::pull(&opts, request, &mut bars)?;
    if !quiet {
        let commit: String = pulled.commit.chars().take(12).collect();
        let how = if pulled.offline {
            "from the cache".to_string()
        } else if pulled.downloaded > 0 {
            format!(
                "{:.1} MiB downloaded",
                pulled.downloaded as f64 / (1024.0 * 1024.0)
            )
        } else {
            "all cached".to_string()
        };
        eprintln!(
            "{}@{commit}: {} file(s), {how}",
            pulled.repo,
            pulled.files.len()
        );
    }
    Ok(pulled)
}

/// indicatif bars for [`Progress`].
struct Bars {
    quiet: bool,
    bar: Option<ProgressBar>,
}

fn byte_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {prefix} {bytes} ({bytes_per_sec})")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl Progress for Bars {
    fn file_start(&mut self, file: &str, total: Option<u64>, already: u64) {
        if self.quiet {
            return;
        }
        let bar = match total {
            Some(t) => ProgressBar::new(t).with_style(byte_style()),
            None => ProgressBar::new_spinner().with_style(spinner_style()),
        };
        bar.set_prefix(file.to_string());
        bar.set_position(already);
        bar.reset_eta();
        if already > 0 {
            bar.println(format!("{file}: resuming at {already} bytes"));
        }
        self.bar = Some(bar);
    }

    fn advance(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    fn restart(&mut self, at: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(at);
            bar.reset_eta();
        }
    }

    fn file_done(&mut self, _file: &str) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
    }

    fn note(&mut self, message: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("note: {message}")),
            None => eprintln!("note: {message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        pull: PullArgs,
    }

    #[test]
    fn parses_the_pull_flags() {
        let cli = Cli::try_parse_from([
            "pull",
            "org/repo:Q4_K_M",
            "--revision",
            "v1",
            "--include",
            "*.md",
            "--include",
            "*.json",
        ])
        .unwrap();
        assert_eq!(cli.pull.model, "org/repo:Q4_K_M");
        assert_eq!(cli.pull.revision, "v1");
        assert_eq!(cli.pull.include, vec!["*.md", "*.json"]);
        let cli = Cli::try_parse_from(["pull", "org/repo"]).unwrap();
        assert_eq!(cli.pull.revision, "main");
    }

    #[test]
    fn bad_references_fail_before_any_network() {
        let e = run(&PullArgs {
            model: "not a repo".into(),
            revision: "main".into(),
            include: vec![],
            quiet: true,
        })
        .unwrap_err();
        assert!(e.to_string().contains("bad model reference"), "{e}");
        assert!(resolve_hf("a/b/c").is_err());
    }
}
