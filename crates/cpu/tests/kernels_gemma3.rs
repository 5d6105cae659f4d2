//! The quantized kernels on real weights: a few rows of every 2-D tensor of
//! Gemma 3 270M (Q8_0, Q5_0, Q4_K, Q6_K), every instruction set against the
//! scalar twin and the twin against `anedvd_quant::vec_dot`. Skips with a
//! message when the model file is absent (path from $ANEDVD_GEMMA3_GGUF, else
//! /root/.cache/models/gemma3-270m-q4_k_m.gguf).

use anedvd_cpu::qkernels::{ActFormat, Kernels, QuantizedActivation};
use std::path::Path;

#[test]
fn kernels_agree_on_gemma3_270m_weights() {
    let model = std::env::var("ANEDVD_GEMMA3_GGUF")
        .unwrap_or_else(|_| "/root/.cache/models/gemma3-270m-q4_k_m.gguf".into());
    if !Path::new(&model).exists() {
        eprintln!("skipping: {model} absent (set ANEDVD_GEMMA3_GGUF)");
        return;
    }
    let opened = anedvd_weights::open(&model).unwrap();
    let source = opened.source;
    let isas = Kernels::available();
    let generic = Kernels::generic();
    let mut act = QuantizedActivation::new();
    let mut checked = 0;
    for info in source.tensors() {
        let ty = info.dtype;
        let [n_cols, n_rows] = info.shape[..] else {
            continue;
        };
        let (n_cols, n_rows) = (n_cols as usize, n_rows as usize);
        let Some(fmt) = ActFormat::for_weight(ty) else {
            continue;
        };
        let data = source.tensor(&info.name).unwrap().data;
        let x: Vec<f32> = (0..n_cols)
            .map(|i| ((i * 7919 + n_rows) as f32 * 0.013).sin() * 2.0)
            .collect();
        act.quantize(fmt, &x, n_cols).unwrap();
        let rb = data.len() / n_rows;
        // First, middle and last rows.
        for r0 in [0, n_rows / 2, n_rows.saturating_sub(5)] {
            let rows = r0..(r0 + 5).min(n_rows);
            let mut want = vec![0.0; rows.len()];
            generic
                .matvec(ty, data, rows.clone(), n_cols, &act, &mut want)
                .unwrap();
            for (i, r) in rows.clone().enumerate() {
                let row = &data[r * rb..(r + 1) * rb];
                let mut wf = vec![0.0; n_cols];
                anedvd_quant::dequantize(ty, row, &mut wf).unwrap();
                let mag: f32 = wf.iter().zip(&x).map(|(w, x)| (w * x).abs()).sum();
                // Activation quantization: half a step of the block's absmax
                // (<= 2/254 here) plus f16 scale rounding, per weight.
                let wsum: f32 = wf.iter().map(|w| w.abs()).sum();
                let reference = anedvd_quant::vec_dot(ty, row, &x).unwrap();
                let bound = wsum * (2.0 / 254.0 * 1.001 + 2.0 * 1e-3) + 1e-5 * mag;
                assert!(
                    (want[i] - reference).abs() <= bound,
                    "{} row {r}: generic {} vs reference {reference}",
                    info.name,
                    want[i]
                );
            }
            for k in &isas {
                let mut got = vec![0.0; rows.len()];
                k.matvec(ty, data, rows.clone(), n_cols, &act, &mut got)
                    .unwrap();
                for (i, r) in rows.clone().enumerate() {
                    let row = &data[r * rb..(r + 1) * rb];
                    let mut wf = vec![0.0; n_cols];
                    anedvd_quant::dequantize(ty, row, &mut wf).unwrap();
                    let mag: f32 = wf.iter().zip(&x).map(|(w, x)| (w * x).abs()).sum();
                    assert!(
                        (got[i] - want[i]).abs() <= 4e-6 * mag,
                        "{} {} row {r}: {} vs generic {}",
                        k.name(),
                        info.name,
                        got[i],
                        want[i]
                    );
                }
            }
            checked += 1;
        }
    }
    eprintln!("checked {checked} row groups on {isas:?}");
    assert!(checked > 100);
}
