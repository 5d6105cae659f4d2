//! Measures prefill and decode speed of the CPU backend on a model file.
//!
//! `cargo run --release -p anedvd-cpu --example decode_speed -- [MODEL] [THREADS] [N_DECODE]`
//! (MODEL defaults to $ANEDVD_GEMMA3_GGUF or /root/.cache/models/gemma3-270m-q4_k_m.gguf).

use anedvd_base::WeightSource;
use anedvd_graph::{Backend, LogitsMode};
use std::sync::Arc;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| {
        std::env::var("ANEDVD_GEMMA3_GGUF")
            .unwrap_or_else(|_| "/root/.cache/models/gemma3-270m-q4_k_m.gguf".into())
    });
    let threads: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2);
    let n_decode: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(32);

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
    let mut s = exe.new_session(1024)?;
    let prompt: Vec<u32> = (0..64u32).map(|i| 2 + (i * 37) % 1000).collect();
    let t = Instant::now();
    let logits = s.forward(&prompt, LogitsMode::Last)?;
    let mut next = argmax(logits);
    let pp = t.elapsed();
    let t = Instant::now();
    let cpu0 = cpu_seconds();
    for _ in 0..n_decode {
        next = argmax(s.forward(&[next], LogitsMode::Last)?);
    }
    let tg = t.elapsed();
    if let (Some(a), Some(b)) = (cpu0, cpu_seconds()) {
        // On a shared machine wall time is inflated; CPU time per token divided
        // by the thread count estimates the unloaded wall time.
        let per_tok = (b - a) / n_decode as f64;
        println!(
            "decode CPU time {:.1} ms/token over all threads -> ~{:.2} tok/s if unloaded",
            per_tok * 1000.0,
            threads as f64 / per_tok
        );
    }
    println!(
        "threads {threads}: prefill {} tokens {:.1} tok/s, decode {n_decode} tokens {:.2} tok/s ({:.1} ms/token)",
        prompt.len(),
        prompt.len() as f64 / pp.as_secs_f64(),
        n_decode as f64 / tg.as_secs_f64(),
        tg.as_secs_f64() * 1000.0 / n_decode as f64
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
