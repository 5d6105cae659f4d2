//! One decode step's attention over a deep f16 cache, in µs per layer and
//! GB/s of K and V bytes read (`cargo bench -p anedvd-cpu --bench
//! attention_decode`). Shape: Gemma 3 270M's global layers (4 query heads
//! sharing one kv head of 256), `BENCH_DEPTH` cached positions (default
//! 32000). Three layers' caches are read in turn, as the model's three
//! global layers are, so the 98 MB they hold comes from DRAM rather than the
//! last-level cache. Runs on rayon's global pool (`RAYON_NUM_THREADS` sets
//! its size, the engine's `-t`); `BENCH_SECS` sets the time, the figure is
//! the best of 5 rounds.

use anedvd_cpu::attention::{attend, KvCache};
use anedvd_cpu::qkernels::Kernels;
use anedvd_graph::{Attention, AttentionBias};
use std::hint::black_box;

#[path = "common/timing.rs"]
mod timing;
use timing::time;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let depth: usize = env("BENCH_DEPTH", 32_000);
    let secs: f64 = env("BENCH_SECS", 2.0);
    let (n_head, hd, layers) = (4usize, 256usize, 3usize);
    let spec = Attention {
        n_head,
        n_head_kv: 1,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        softcap: None,
        window: None,
        rope: None,
        kv_source: None,
        wq: String::new(),
        wk: String::new(),
        wv: String::new(),
        wo: String::new(),
        bias: AttentionBias::default(),
        q_norm: None,
        k_norm: None,
        v_norm: false,
    };
    let wave = |i: usize, f: f32| ((i as f32) * f).sin();
    let k: Vec<f32> = (0..depth * hd).map(|i| wave(i, 0.37)).collect();
    let v: Vec<f32> = (0..depth * hd).map(|i| wave(i, 0.11)).collect();
    let caches: Vec<KvCache> = (0..layers)
        .map(|_| {
            let mut c = KvCache::new(1, hd);
            c.store(0, &k, &v, depth);
            c
        })
        .collect();
    let q: Vec<f32> = (0..n_head * hd).map(|i| wave(i, 0.7)).collect();
    let kern = Kernels::detect();
    let (mut out, mut part) = (vec![0.0f32; n_head * hd], Vec::new());
    let mut layer = 0;
    let step = || {
        attend(
            &kern,
            &spec,
            &caches[layer],
            &q,
            depth - 1,
            1,
            &mut out,
            &mut part,
        );
        black_box(&out);
        layer = (layer + 1) % layers;
    };
    let best = time(secs, step);
    let bytes = (2 * depth * hd * 2) as f64;
    println!("| threads | depth | µs/layer | GB/s (K+V) |");
    println!("|---|---|---|---|");
    println!(
        "| {} | {depth} | {:.0} | {:.1} |",
        rayon::current_num_threads(),
        best * 1e6,
        bytes / best / 1e9
    );
}
