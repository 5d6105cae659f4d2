//! `anedvd run`: one prompt in, streamed text out, stats on stderr.

use crate::common::{BackendArgs, GrammarArgs, ModelArgs, SamplingArgs, SpecArgs};
use anedvd_engine::speculative::Proposer;
use anedvd_engine::stats::{format_bytes, peak_rss_bytes};
use anedvd_engine::{generate_speculative, Engine, GenerateParams, Generation, Message};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

/// Arguments of `anedvd run`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["prompt", "prompt_ids"]))]
pub struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    backend: BackendArgs,
    /// The prompt text.
    #[arg(short, long)]
    prompt: Option<String>,
    /// Feed these token ids directly (comma-separated), skipping tokenizer and template.
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    prompt_ids: Option<Vec<u32>>,
    /// A system message (chat models only).
    #[arg(long)]
    system: Option<String>,
    /// Send the prompt as is, without the chat template.
    #[arg(long, conflicts_with = "chat")]
    raw: bool,
    /// Apply the chat template even to a model that looks like a base model.
    #[arg(long)]
    chat: bool,
    /// Maximum tokens to generate.
    #[arg(short = 'n', long, default_value_t = 256)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    spec: SpecArgs,
    #[command(flatten)]
    grammar: GrammarArgs,
    /// Keep generating through end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Context size in tokens (prompt + generation).
    #[arg(long, default_value_t = 4096)]
    max_seq: usize,
    /// If the prompt does not fit, keep its newest tokens instead of failing.
    #[arg(long)]
    truncate: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
    /// With --json: the K most likely tokens and log-probabilities at every step.
    #[arg(long, value_name = "K", default_value_t = 0)]
    top_logprobs: usize,
    /// Write every named intermediate of the prompt's forward pass into DIR.
    #[arg(long, value_name = "DIR")]
    dump_activations: Option<PathBuf>,
}

/// Runs `anedvd run`.
pub fn run(args: &RunArgs) -> Result<()> {
    let sampling = args.sampling.params()?;
    let engine = args.model.load(&args.backend, args.json)?;
    let speculation = args.spec.resolve(&args.model, &args.backend, args.json)?;
    let mut prompt = build_prompt(&engine, args)?;
    let max_seq = args.max_seq.min(engine.n_ctx_train().max(1));
    if args.max_seq > max_seq {
        eprintln!(
            "note: --max-seq {} exceeds the model's training context; using {max_seq}",
            args.max_seq
        );
    }
    let dropped = fit_prompt(&mut prompt, max_seq, args.max_tokens, args.truncate)?;
    if dropped > 0 {
        eprintln!("note: the prompt was truncated: dropped its {dropped} oldest tokens to fit --max-seq {max_seq}");
    }
    let mut session = engine.new_session(max_seq)?;
    session.set_dump(args.dump_activations.clone());
    let (speculative, mut draft) = speculation.parts(&engine.tokenizer, max_seq)?;
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling: sampling.clone(),
        ignore_eos: args.ignore_eos,
        top_logprobs: args.top_logprobs,
        speculative,
        grammar: args.grammar.compile(&engine)?,
        ..GenerateParams::default()
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut write_failed = false;
    let proposer = draft.as_mut().map(|d| d as &mut dyn Proposer);
    let generation = generate_speculative(
        &mut session,
        &engine.tokenizer,
        &prompt,
        &params,
        proposer,
        |ev| {
            if args.json {
                return ControlFlow::Continue(());
            }
            // A closed pipe (`| head`) ends generation quietly.
            if out
                .write_all(ev.text.as_bytes())
                .and_then(|_| out.flush())
                .is_err()
            {
                write_failed = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        },
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&json_report(
                &engine,
                &generation,
                sampling.seed,
                session.cache_bytes()
            ))?
        );
    } else if !write_failed {
        let _ = writeln!(out);
    }
    if !args.json {
        print_stats(
            &engine,
            &generation,
            (sampling.seed, max_seq),
            session.cache_bytes(),
        );
    }
    Ok(())
}

fn build_prompt(engine: &Engine, args: &RunArgs) -> Result<Vec<u32>> {
    if let Some(ids) = &args.prompt_ids {
        let vocab = engine.vocab_size();
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            bail!("--prompt-ids: token id {bad} is outside the vocabulary (size {vocab})");
        }
        return Ok(ids.clone());
    }
    let text = args.prompt.as_deref().unwrap_or_default();
    let use_template = !args.raw && (args.chat || engine.is_chat_model());
    if !use_template {
        if args.system.is_some() {
            eprintln!("note: --system is ignored without a chat template (base model or --raw)");
        }
        return Ok(engine.raw_prompt(text)?);
    }
    let mut messages = Vec::new();
    if let Some(s) = &args.system {
        messages.push(Message::system(s.clone()));
    }
    messages.push(Message::user(text));
    engine
        .chat_prompt(&messages)
        .context("applying the chat template")
}

/// Makes `prompt` fit `max_seq` with room to generate; returns how many
/// tokens were dropped. Without `truncate`, an over-long prompt is an error.
pub fn fit_prompt(
    prompt: &mut Vec<u32>,
    max_seq: usize,
    max_tokens: usize,
    truncate: bool,
) -> Result<usize> {
    if prompt.len() < max_seq {
        return Ok(0);
    }
    if !truncate {
        bail!(
            "the prompt has {} tokens but the context holds {max_seq}; raise --max-seq or pass \
             --truncate to keep the newest tokens",
            prompt.len()
        );
    }
    // Leave room for generation: a quarter of the context at most.
    let keep = max_seq - max_tokens.clamp(1, max_seq / 4).min(max_seq - 1);
    let dropped = prompt.len() - keep;
    prompt.drain(..dropped);
    Ok(dropped)
}

/// `cache_bytes`: what the session's KV caches hold at the end.
fn json_report(
    engine: &Engine,
    g: &Generation,
    seed: u64,
    cache_bytes: usize,
) -> serde_json::Value {
    let t = &g.timings;
    let top: Vec<_> = g
        .top_logprobs
        .iter()
        .map(|step| {
            step.iter()
                .map(|&(id, lp)| json!({"id": id, "logprob": lp}))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut v = json!({
        "model": engine.name,
        "prompt_tokens": g.prompt_tokens,
        "tokens": g.tokens,
        "text": g.text,
        "finish_reason": g.finish_reason.as_str(),
        "seed": seed,
        "timings": {
            "load_ms": engine.load_time.as_secs_f64() * 1e3,
            "prompt_n": t.prefill_tokens,
            "prompt_ms": t.prefill.as_secs_f64() * 1e3,
            "prompt_per_second": t.prefill_tps(),
            "predicted_n": t.decode_tokens,
            "predicted_ms": t.decode.as_secs_f64() * 1e3,
            "predicted_per_second": t.decode_tps(),
            "peak_rss_bytes": peak_rss_bytes(),
            "kv_cache_bytes": cache_bytes,
        },
    });
    if !g.top_logprobs.is_empty() {
        v["top_logprobs"] = json!(top);
    }
    if t.verify_passes > 0 {
        v["speculative"] = json!({
            "verify_passes": t.verify_passes,
            "drafted": t.drafted_tokens,
            "accepted": t.accepted_tokens,
        });
    }
    v
}

fn print_stats(engine: &Engine, g: &Generation, (seed, max_seq): (u64, usize), cache_bytes: usize) {
    let t = &g.timings;
    let rss = peak_rss_bytes()
        .map(format_bytes)
        .unwrap_or_else(|| "n/a".into());
    eprintln!();
    eprintln!(
        "model    {} ({}, {})",
        engine.name,
        engine.config.family,
        format_bytes(engine.weight_bytes())
    );
    eprintln!("load     {:.0} ms", engine.load_time.as_secs_f64() * 1e3);
    eprintln!(
        "prefill  {} tokens in {:.0} ms ({:.1} tok/s)",
        t.prefill_tokens,
        t.prefill.as_secs_f64() * 1e3,
        t.prefill_tps()
    );
    eprintln!(
        "decode   {} tokens in {:.0} ms ({:.1} tok/s)",
        t.decode_tokens,
        t.decode.as_secs_f64() * 1e3,
        t.decode_tps()
    );
    if t.verify_passes > 0 {
        eprintln!(
            "spec     {} drafted, {} accepted ({:.0}%) in {} verify passes",
            t.drafted_tokens,
            t.accepted_tokens,
            100.0 * t.acceptance(),
            t.verify_passes
        );
    }
    eprintln!(
        "finish   {} · context {}/{} · seed {} · KV cache {} · peak RSS {}",
        g.finish_reason.as_str(),
        g.prompt_tokens.len() + g.tokens.len(),
        max_seq,
        seed,
        format_bytes(cache_bytes as u64),
        rss
    );
}

#[cfg(test)]
mod tests {
    use super::fit_prompt;

    #[test]
    fn long_prompt_is_an_error_naming_both_numbers() {
        let mut p = vec![1; 10];
        let e = fit_prompt(&mut p, 8, 4, false).unwrap_err().to_string();
        assert!(e.contains("10 tokens") && e.contains("8"), "{e}");
    }

    #[test]
    fn truncate_keeps_newest_and_leaves_room() {
        let mut p: Vec<u32> = (0..10).collect();
        let dropped = fit_prompt(&mut p, 8, 4, true).unwrap();
        assert_eq!(dropped, 4);
        assert_eq!(p, vec![4, 5, 6, 7, 8, 9]);
        let mut short = vec![1, 2];
        assert_eq!(fit_prompt(&mut short, 8, 4, true).unwrap(), 0);
    }
}
