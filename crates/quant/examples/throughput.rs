//! Prints the scalar reference throughput of `dequantize`, `vec_dot` and
//! `quantize` per type (elements per second), for comparing future SIMD
//! kernels against. Rows are quantized from smooth data where a quantizer
//! exists (random bytes otherwise, which may hit slow subnormals). Run: `cargo run --release -p anedvd-quant --example throughput`.

use anedvd_base::GgmlType;
use std::time::Instant;

fn main() -> Result<(), anedvd_quant::Error> {
    use GgmlType::*;
    let n = 1 << 16;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 300.0)
        .collect();
    println!("| type | dequantize Melem/s | vec_dot Melem/s | quantize Melem/s |");
    println!("|---|---|---|---|");
    for ty in [
        F16, BF16, Q4_0, Q5_0, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K, Q8K, TQ2_0, MXFP4, IQ2XXS, IQ4XS,
    ] {
        let bytes = ty
            .row_bytes(n as u64)
            .map_err(|e| anedvd_quant::Error::BadLength {
                ty,
                what: e.to_string(),
            })? as usize;
        let mut q: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
        let quant = if anedvd_quant::can_quantize(ty) {
            let t = Instant::now();
            let reps = 4;
            for _ in 0..reps {
                anedvd_quant::quantize(ty, &x, &mut q)?;
            }
            format!("{:.0}", (reps * n) as f64 / t.elapsed().as_secs_f64() / 1e6)
        } else {
            "-".to_string()
        };
        let mut y = vec![0.0f32; n];
        let reps = 20;
        let t = Instant::now();
        for _ in 0..reps {
            anedvd_quant::dequantize(ty, &q, &mut y)?;
        }
        let deq = (reps * n) as f64 / t.elapsed().as_secs_f64() / 1e6;
        let t = Instant::now();
        let mut acc = 0.0f32;
        for _ in 0..reps {
            acc += anedvd_quant::vec_dot(ty, &q, &x)?;
        }
        let dot = (reps * n) as f64 / t.elapsed().as_secs_f64() / 1e6;
        println!(
            "| {ty} | {deq:.0} | {dot:.0} | {quant} |{}",
            if acc.is_nan() { " " } else { "" }
        );
    }
    Ok(())
}
