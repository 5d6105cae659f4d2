//! Measures prefill and decode speed of the CPU backend on a model file.
//!
//! `cargo run --release -p anedvd-cpu --example decode_speed -- [MODEL] [THREADS] [N_DECODE] [DEPTH]`
//! (MODEL defaults to $ANEDVD_GEMMA3_GGUF or /root/.cache/models/gemma3-270m-q4_k_m.gguf).
//!
//! The context is first filled to DEPTH tokens (default 64), once; decode is
//! then timed in runs of 4 tokens, each run stepping back to DEPTH, and
//! reported as the min / median / max of the runs: on a shared host the
//! median of many short runs moves far less than one long run, so two
//! builds compare best with this example run alternately.

use anedvd_base::WeightSource;
use anedvd_graph::{Backend, LogitsMode};
use std::sync::Arc;
use std::time::Instant;

/// Tokens per timed decode run.
const RUN: usize = 4;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| {
        std::env::var("ANEDVD_GEMMA3_GGUF")
            .unwrap_or_else(|_| "/root/.cache/models/gemma3-270m-q4_k_m.gguf".into())
    });
    let threads: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2);
    let n_decode: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(32);
    let depth: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(64)
        .max(1);

    let t0 = Instant::now();
    let opened = anedvd_weights::open(&path)?;
    let source: Arc<dyn WeightSource> = Arc::from(opened.source);
    let mut types: Vec<String> = source
        .tensors()
        .iter()
        .map(|t| t.dtype.name().to_string())
        .collect();
    types.sort();
    types.dedup();
    let (cfg, program) = anedvd_model::load(source, &Default::default())?;
    let exe = anedvd_cpu::CpuBackend::new(threads)?.compile(&program)?;
    println!(
        "{path}: {} ({} layers, d={}, vocab={}), types {types:?}, loaded in {:.2?}",
        cfg.family,
        cfg.n_layer,
        cfg.n_embd,
        cfg.n_vocab,
        t0.elapsed()
    );
    let mut s = exe.new_session(depth + RUN)?;
    let prompt: Vec<u32> = (0..depth as u32).map(|i| 2 + (i * 37) % 1000).collect();
    let t = Instant::now();
    let mut next = 0;
    for chunk in prompt.chunks(512) {
        next = argmax(s.forward(chunk, LogitsMode::Last)?);
    }
    let pp = t.elapsed();
    let cpu0 = cpu_seconds();
    let mut runs = Vec::new();
    for _ in 0..n_decode.div_ceil(RUN) {
        let t = Instant::now();
        for _ in 0..RUN {
            next = argmax(s.forward(&[next], LogitsMode::Last)?);
        }
        runs.push(RUN as f64 / t.elapsed().as_secs_f64());
        s.truncate(prompt.len());
    }
    let n_done = runs.len() * RUN;
    if let (Some(a), Some(b)) = (cpu0, cpu_seconds()) {
        // On a shared machine wall time is inflated; CPU time per token divided
        // by the thread count estimates the unloaded wall time.
        let per_tok = (b - a) / n_done as f64;
        println!(
            "decode CPU time {:.1} ms/token over all threads -> ~{:.2} tok/s if unloaded",
            per_tok * 1000.0,
            threads as f64 / per_tok
        );
    }
    runs.sort_by(f64::total_cmp);
    println!(
        "threads {threads}: prefill {} tokens {:.1} tok/s; decode at depth {}, {} runs of {RUN} tokens: {:.2} / {:.2} / {:.2} tok/s (min / median / max)",
        prompt.len(),
        prompt.len() as f64 / pp.as_secs_f64(),
        prompt.len(),
        runs.len(),
        runs.first().copied().unwrap_or(0.0),
        runs.get(runs.len() / 2).copied().unwrap_or(0.0),
        runs.last().copied().unwrap_or(0.0),
    );
    Ok(())
}

/// User + system CPU seconds of this process (Linux `/proc/self/stat`, 100 Hz ticks).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}
