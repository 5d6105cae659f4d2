//! Activation quantization throughput: `QuantizedActivation::quantize` on a
//! prefill-sized batch (512 × 2048 values) for the Q8 and Q8_K formats.
//!
//! `cargo run --release -p anedvd-cpu --example act_quant_speed`

use anedvd_cpu::qkernels::{ActFormat, QuantizedActivation};
use std::time::Instant;

fn main() {
    let (n_tok, n_cols) = (512usize, 2048usize);
    let x: Vec<f32> = (0..n_tok * n_cols)
        .map(|i| ((i as f32) * 0.37).sin() * 3.0)
        .collect();
    let mut act = QuantizedActivation::new();
    for format in [ActFormat::Q8, ActFormat::Q8K] {
        let mut best = f64::INFINITY;
        for _ in 0..20 {
            let t = Instant::now();
            act.quantize(format, &x, n_cols).expect("quantize");
            best = best.min(t.elapsed().as_secs_f64());
        }
        let values = (n_tok * n_cols) as f64;
        println!(
            "{format:?}: {:.2} ms per {n_tok}x{n_cols} batch, {:.2} ns per 32 values, {:.1} GB/s in",
            best * 1e3,
            best * 1e9 / (values / 32.0),
            values * 4.0 / best / 1e9
        );
    }
}
