//! Quantized kernels: every SIMD table against its scalar twin (exactly on
//! inputs where float rounding cannot differ, within a named tolerance on
//! random data with ragged shapes), and the scalar twins against
//! `anedvd_quant::vec_dot` (dequantize-then-dot in f32) within the error the
//! activation quantization allows.

use anedvd_base::GgmlType;
use anedvd_cpu::qkernels::{ActFormat, IsaCap, KernelError, Kernels, QuantizedActivation};
use anedvd_quant::f32_to_f16;

/// Every weight type with a kernel.
const TYPES: [GgmlType; 15] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::IQ4NL,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::IQ4XS,
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
];

mod kernel_data;
use kernel_data::{cols_for, magnitude, random_weights, tol_simd, Rng};

#[test]
fn every_isa_matches_generic_on_random_ragged_shapes() {
    let generic = Kernels::generic();
    let isas = Kernels::available();
    eprintln!("ISAs on this machine: {isas:?}");
    let mut rng = Rng(7);
    let mut act = QuantizedActivation::new();
    for ty in TYPES {
        for n_blocks in [1usize, 2, 3, 5, 8, 20] {
            // Float types also get widths that are not multiples of 8.
            let mut widths = vec![cols_for(ty, n_blocks)];
            if ActFormat::for_weight(ty) == Some(ActFormat::F32) {
                widths.push(n_blocks * 7 + 1);
            }
            for n_cols in widths {
                let n_rows = [1usize, 3, 7, 17][(rng.below(4)) as usize];
                let w = random_weights(ty, n_rows, n_cols, &mut rng, |r| r.f() * 0.05);
                let x: Vec<f32> = (0..n_cols).map(|_| rng.f() * 3.0).collect();
                act.quantize_for(ty, &x, n_cols).unwrap();
                let mut want = vec![0.0; n_rows];
                generic
                    .matvec(ty, &w, 0..n_rows, n_cols, &act, &mut want)
                    .unwrap();
                let rb = w.len() / n_rows;
                for k in &isas {
                    let mut got = vec![0.0; n_rows];
                    k.matvec(ty, &w, 0..n_rows, n_cols, &act, &mut got).unwrap();
                    for r in 0..n_rows {
                        let mag = magnitude(ty, &w[r * rb..(r + 1) * rb], &x);
                        let tol = tol_simd(ty) * mag + 1e-30;
                        assert!(
                            (got[r] - want[r]).abs() <= tol,
                            "{} {ty} {n_rows}x{n_cols} row {r}: {} vs generic {} (tol {tol})",
                            k.name(),
                            got[r],
                            want[r]
                        );
                    }
                }
            }
        }
    }
}

/// Activation rows whose quantization is exact: integers in [-127, 127]
/// with a ±127 in every block, so every activation scale is ±1.
fn integer_activation(n_cols: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n_cols)
        .map(|i| {
            if i % 32 == 0 {
                if rng.below(2) == 0 {
                    127.0
                } else {
                    -127.0
                }
            } else {
                rng.below(255) as f32 - 127.0
            }
        })
        .collect()
}

/// With power-of-two scales, small sub-block scales and few blocks, every
/// partial sum is exactly representable, so any reduction order gives the
/// same f32: SIMD must equal generic bit for bit.
#[test]
fn every_isa_equals_generic_exactly_where_rounding_cannot_differ() {
    use GgmlType::*;
    let generic = Kernels::generic();
    let mut rng = Rng(11);
    let mut act = QuantizedActivation::new();
    for ty in TYPES {
        let (max_blocks, scale): (usize, fn(&mut Rng) -> f32) = match ty {
            F32 | F16 | BF16 => continue,
            Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | IQ4NL => {
                (4, |r| if r.below(2) == 0 { 0.5 } else { -1.0 })
            }
            IQ4XS => (1, |_| 0.0625),
            _ => (2, |_| 0.0625),
        };
        for n_blocks in 1..=max_blocks {
            let n_cols = cols_for(ty, n_blocks);
            let n_rows = 9;
            let mut w = random_weights(ty, n_rows, n_cols, &mut rng, scale);
            // Keep sub-block scales small so block sums stay below 2^20.
            let bb = ty.block_bytes() as usize;
            for blk in w.chunks_exact_mut(bb) {
                match ty {
                    Q4K | Q5K => blk[4..16].iter_mut().for_each(|b| *b &= 0x03),
                    Q3K => blk[96..108].iter_mut().for_each(|b| *b &= 0x03),
                    Q6K => blk[192..208]
                        .iter_mut()
                        .for_each(|b| *b = (*b % 7).wrapping_sub(3)),
                    IQ4XS => {
                        blk[2..4].copy_from_slice(&0xaaaau16.to_le_bytes());
                        blk[4..8].iter_mut().for_each(|b| *b &= 0x33);
                    }
                    _ => {}
                }
            }
            let x = integer_activation(n_cols, &mut rng);
            act.quantize_for(ty, &x, n_cols).unwrap();
            let mut want = vec![0.0; n_rows];
            generic
                .matvec(ty, &w, 0..n_rows, n_cols, &act, &mut want)
                .unwrap();
            for k in Kernels::available() {
                let mut got = vec![0.0; n_rows];
                k.matvec(ty, &w, 0..n_rows, n_cols, &act, &mut got).unwrap();
                assert_eq!(got, want, "{} {ty} {n_cols} columns", k.name());
            }
        }
    }
}

/// Largest |x| of each activation block, per element.
fn block_amax(x: &[f32], block: usize) -> Vec<f32> {
    x.chunks(block)
        .flat_map(|c| {
            let m = c.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            std::iter::repeat_n(m, c.len())
        })
        .collect()
}

#[test]
fn generic_matches_float_reference_within_activation_quantization_error() {
    let mut rng = Rng(3);
    let mut act = QuantizedActivation::new();
    let k = Kernels::generic();
    for ty in TYPES {
        for n_blocks in [1usize, 3, 10] {
            let n_cols = cols_for(ty, n_blocks);
            let x: Vec<f32> = (0..n_cols).map(|_| rng.f() * 4.0).collect();
            let n_rows = 5;
            // Realistic rows from the reference quantizer where one exists.
            let w = if anedvd_quant::can_quantize(ty) {
                let rb = ty.row_bytes(n_cols as u64).unwrap() as usize;
                let mut w = vec![0u8; n_rows * rb];
                for row in w.chunks_exact_mut(rb) {
                    let src: Vec<f32> = (0..n_cols).map(|_| rng.f()).collect();
                    anedvd_quant::quantize(ty, &src, row).unwrap();
                }
                w
            } else {
                random_weights(ty, n_rows, n_cols, &mut rng, |r| r.f() * 0.05)
            };
            act.quantize_for(ty, &x, n_cols).unwrap();
            let fmt = act.format();
            let mut got = vec![0.0; n_rows];
            k.matvec(ty, &w, 0..n_rows, n_cols, &act, &mut got).unwrap();
            let rb = w.len() / n_rows;
            let amax = block_amax(&x, fmt.block());
            for r in 0..n_rows {
                let row = &w[r * rb..(r + 1) * rb];
                let want = anedvd_quant::vec_dot(ty, row, &x).unwrap();
                let mut wf = vec![0.0; n_cols];
                anedvd_quant::dequantize(ty, row, &mut wf).unwrap();
                // Per element: half a quantization step (amax/254), plus the
                // f16 rounding of Q8_0/Q8_1 scales (2^-11 relative), plus f32
                // summation error.
                let bound: f32 = wf
                    .iter()
                    .zip(&x)
                    .zip(&amax)
                    .map(|((w, x), a)| match fmt {
                        ActFormat::F32 => 0.0,
                        ActFormat::Q8 => w.abs() * (a / 254.0 * 1.001 + x.abs() * 1e-3),
                        ActFormat::Q8K => w.abs() * (a / 254.0 * 1.001 + x.abs() * 1e-6),
                    })
                    .sum::<f32>()
                    + 1e-5 * magnitude(ty, row, &x);
                assert!(
                    (got[r] - want).abs() <= bound,
                    "{ty} {n_cols} row {r}: generic {} vs reference {want} (bound {bound})",
                    got[r]
                );
            }
        }
    }
}

/// `matmul` (tiles of weight rows, four-token kernels where the table has
/// them) against per-token `matvec` over two row ranges, as two threads
/// would split it. Generic and the NEON tables (with and without dotprod)
/// use the same arithmetic in both paths (exact); the AVX-512 tables pair their two-block matvec kernels with
/// AVX2's four-token kernels, and the AVX2 and AVX-512 panel kernels (from
/// 4 tokens) accumulate 8 or 16 rows per register, the NEON i8mm ones
/// 2-row × 2-token tiles (reduction-order tolerance).
#[test]
fn matmul_matches_matvec_per_token_and_row_ranges_split_cleanly() {
    let mut rng = Rng(5);
    for k in Kernels::available() {
        let exact = matches!(k.name(), "generic" | "neon" | "neon-dotprod");
        for ty in TYPES {
            for n_tok in [1usize, 4, 5, 9] {
                let n_cols = cols_for(ty, 3);
                // More than one 128-row panel chunk, with a ragged last chunk.
                let n_rows = 300;
                let w = random_weights(ty, n_rows, n_cols, &mut rng, |r| r.f() * 0.05);
                let x: Vec<f32> = (0..n_cols * n_tok).map(|_| rng.f()).collect();
                let mut all = QuantizedActivation::new();
                all.quantize_for(ty, &x, n_cols).unwrap();
                let rows = 3..n_rows;
                let mut mm = vec![0.0; rows.len() * n_tok];
                k.matmul(ty, &w, rows.clone(), n_cols, &all, &mut mm)
                    .unwrap();
                let mut one = QuantizedActivation::new();
                for t in 0..n_tok {
                    let xt = &x[t * n_cols..(t + 1) * n_cols];
                    one.quantize_for(ty, xt, n_cols).unwrap();
                    let mut a = vec![0.0; 10];
                    let mut b = vec![0.0; n_rows - 13];
                    k.matvec(ty, &w, 3..13, n_cols, &one, &mut a).unwrap();
                    k.matvec(ty, &w, 13..n_rows, n_cols, &one, &mut b).unwrap();
                    let mv: Vec<f32> = a.into_iter().chain(b).collect();
                    let col: Vec<f32> = (0..rows.len()).map(|i| mm[i * n_tok + t]).collect();
                    if exact {
                        assert_eq!(col, mv, "{} {ty} {n_tok} tokens, token {t}", k.name());
                        continue;
                    }
                    let rb = w.len() / n_rows;
                    for (i, r) in rows.clone().enumerate() {
                        let mag = magnitude(ty, &w[r * rb..(r + 1) * rb], xt);
                        assert!(
                            (col[i] - mv[i]).abs() <= tol_simd(ty) * mag + 1e-30,
                            "{} {ty} {n_tok} tokens, token {t} row {r}: {} vs {}",
                            k.name(),
                            col[i],
                            mv[i]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn shape_errors_are_reported_not_panicked() {
    let k = Kernels::detect();
    let ty = GgmlType::Q8_0;
    let w = vec![0u8; 4 * 34];
    let mut act = QuantizedActivation::new();
    act.quantize_for(ty, &[0.5; 32], 32).unwrap();
    let mut out = vec![0.0; 4];
    assert!(k.matvec(ty, &w, 0..4, 32, &act, &mut out).is_ok());
    // Too many rows for the bytes.
    assert!(matches!(
        k.matvec(ty, &w, 0..5, 32, &act, &mut [0.0; 5]),
        Err(KernelError::Shape(_))
    ));
    // Output length mismatch.
    assert!(k.matvec(ty, &w, 0..4, 32, &act, &mut out[..3]).is_err());
    // Activation quantized for another format.
    act.quantize_for(GgmlType::F32, &[0.5; 32], 32).unwrap();
    assert!(k.matvec(ty, &w, 0..4, 32, &act, &mut out).is_err());
    // Unsupported weight type.
    assert!(matches!(
        k.matvec(GgmlType::IQ2XXS, &w, 0..1, 256, &act, &mut out[..1]),
        Err(KernelError::Unsupported(_))
    ));
    // Ragged activation width.
    assert!(act.quantize_for(ty, &[0.5; 40], 40).is_err());
    assert!(act.quantize_for(GgmlType::Q4K, &[0.5; 32], 32).is_err());
}

/// `dot_f16_rows_multi` and `weighted_sum_f16_multi` (each f16 row decoded
/// once for 1..=6 queries) on every ISA against f64 sums of the same f16
/// values, on ragged head widths (SIMD bodies plus scalar tails) and row
/// counts (9 and 19: the weighted sums' blocks of 8 rows, the last one
/// ragged), and falling back to per-query rows when the buffer ends early.
#[test]
fn f16_multi_query_dots_match_f64() {
    let mut rng = Rng(23);
    for k in Kernels::available() {
        for hd in [1usize, 7, 16, 17, 33, 64, 256] {
            for (n_q, n_rows) in (1..=6usize).flat_map(|n_q| [(n_q, 9usize), (n_q, 19)]) {
                let stride = 2 * hd + 4;
                let vals: Vec<f32> = (0..n_rows * stride / 2).map(|_| rng.f()).collect();
                let w: Vec<u8> = vals
                    .iter()
                    .flat_map(|&v| f32_to_f16(v).to_le_bytes())
                    .collect();
                let f16at = |i: usize| f64::from(anedvd_quant::f16_to_f32(f32_to_f16(vals[i])));
                let q: Vec<f32> = (0..n_q * hd).map(|_| rng.f()).collect();
                // Weighted sums of the rows, one weight vector per query.
                let p: Vec<f32> = (0..n_q * n_rows).map(|_| rng.f()).collect();
                let mut ws = vec![f32::NAN; n_q * hd];
                k.weighted_sum_f16_multi(&w, stride, &p, n_q, &mut ws);
                for g in 0..n_q {
                    for i in 0..hd {
                        let want: f64 = (0..n_rows)
                            .map(|r| f64::from(p[g * n_rows + r]) * f16at(r * stride / 2 + i))
                            .sum();
                        let got = f64::from(ws[g * hd + i]);
                        assert!(
                            (got - want).abs() < 1e-4,
                            "{} wsum hd={hd} n_q={n_q} q{g} i={i}: {got} vs {want}",
                            k.name()
                        );
                    }
                }
                // Each weight vector's sums are the single-vector kernel's,
                // bit for bit (every table accumulates each output in row
                // order from zero).
                for g in 0..n_q {
                    let mut one = vec![f32::NAN; hd];
                    k.weighted_sum_f16(&w, stride, &p[g * n_rows..(g + 1) * n_rows], &mut one);
                    assert_eq!(
                        &ws[g * hd..(g + 1) * hd],
                        &one[..],
                        "{} wsum hd={hd} n_q={n_q} q{g}: multi against single",
                        k.name()
                    );
                }
                // Rows beyond a short buffer are left out, as in `weighted_sum_f16`.
                let short = &w[..2 * stride + 2 * hd - 1];
                let mut ws = vec![f32::NAN; n_q * hd];
                k.weighted_sum_f16_multi(short, stride, &p, n_q, &mut ws);
                for g in 0..n_q {
                    let mut one = vec![f32::NAN; hd];
                    k.weighted_sum_f16(short, stride, &p[g * n_rows..(g + 1) * n_rows], &mut one);
                    assert_eq!(
                        &ws[g * hd..(g + 1) * hd],
                        &one[..],
                        "{} short wsum",
                        k.name()
                    );
                }
                for (buf, n) in [(&w[..], n_rows), (&w[..3 * stride + hd], 4)] {
                    let mut out = vec![f32::NAN; n_q * n];
                    k.dot_f16_rows_multi(buf, stride, &q, n_q, &mut out);
                    for g in 0..n_q {
                        for r in 0..n {
                            let want: f64 = if (r + 1) * stride - stride + 2 * hd <= buf.len() {
                                (0..hd)
                                    .map(|i| f16at(r * stride / 2 + i) * f64::from(q[g * hd + i]))
                                    .sum()
                            } else {
                                (0..(buf.len() - r * stride) / 2)
                                    .map(|i| f16at(r * stride / 2 + i) * f64::from(q[g * hd + i]))
                                    .sum()
                            };
                            let got = f64::from(out[g * n + r]);
                            assert!(
                                (got - want).abs() < 1e-4,
                                "{} hd={hd} n_q={n_q} q{g} row {r}: {got} vs {want}",
                                k.name()
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The attention kernels (`dot_f16_rows` over strided rows with a short last
/// row, `weighted_sum_f16`, `axpy_f16`) on every ISA against f64 sums of the same f16 values,
/// on ragged lengths (SIMD bodies plus scalar tails).
#[test]
fn f16_attention_kernels_match_f64_on_ragged_lengths() {
    let mut rng = Rng(11);
    for k in Kernels::available() {
        for n in [1usize, 7, 8, 9, 31, 32, 33, 64, 100, 256] {
            let (n_rows, stride) = (5usize, 2 * n + 6);
            let vals: Vec<f32> = (0..n_rows * stride / 2).map(|_| rng.f()).collect();
            let mut w: Vec<u8> = vals
                .iter()
                .flat_map(|&v| f32_to_f16(v).to_le_bytes())
                .collect();
            // The last row ends right after its `n` values.
            w.truncate((n_rows - 1) * stride + 2 * n);
            let f16at = |i: usize| f64::from(anedvd_quant::f16_to_f32(f32_to_f16(vals[i])));
            let a: Vec<f32> = (0..n).map(|_| rng.f()).collect();
            let mut out = vec![f32::NAN; n_rows];
            k.dot_f16_rows(&w, stride, &a, &mut out);
            for (r, got) in out.iter().enumerate() {
                let want: f64 = (0..n)
                    .map(|i| f16at(r * stride / 2 + i) * f64::from(a[i]))
                    .sum();
                let got = f64::from(*got);
                assert!(
                    (got - want).abs() < 1e-4,
                    "{} n={n} row {r}: {got} vs {want}",
                    k.name()
                );
            }
            // Probabilities times values: the rows above, 2n..stride bytes apart.
            let p: Vec<f32> = (0..n_rows).map(|_| rng.f()).collect();
            let mut ws = vec![f32::NAN; n];
            k.weighted_sum_f16(&w, stride, &p, &mut ws);
            for (i, got) in ws.iter().enumerate() {
                let want: f64 = (0..n_rows)
                    .map(|r| f64::from(p[r]) * f16at(r * stride / 2 + i))
                    .sum();
                let got = f64::from(*got);
                assert!(
                    (got - want).abs() < 1e-4,
                    "{} wsum n={n} i={i}: {got} vs {want}",
                    k.name()
                );
            }
            // Rows beyond the buffer are left out, not read.
            let mut part = vec![0.0; n];
            k.weighted_sum_f16(&w[..stride + 2 * n], stride, &p, &mut part);
            let want0: f64 = (0..2)
                .map(|r| f64::from(p[r]) * f16at(r * stride / 2))
                .sum();
            assert!(
                (f64::from(part[0]) - want0).abs() < 1e-4,
                "{} wsum short",
                k.name()
            );
            let mut y: Vec<f32> = (0..n).map(|_| rng.f()).collect();
            let y0 = y.clone();
            k.axpy_f16(&mut y, 0.75, &w[..2 * n]);
            for i in 0..n {
                let want = f64::from(y0[i]) + 0.75 * f16at(i);
                let got = f64::from(y[i]);
                assert!((got - want).abs() < 1e-5, "{} axpy n={n} i={i}", k.name());
            }
        }
    }
}

/// Prefill-sized activation batches (quantized in parallel chunks) equal
/// `anedvd_quant`'s row quantizers bit for bit, block by block, for both
/// the Q8 (Q8_0 scale and quants) and Q8_K formats.
#[test]
fn parallel_activation_quantization_matches_anedvd_quant_bit_for_bit() {
    use anedvd_quant::{f16_to_f32, quantize_row_q8_0, quantize_row_q8_k, BlockQ8K, BlockQ8_0};
    let mut rng = Rng(31);
    let (n_rows, n_cols) = (67usize, 1024usize);
    let x: Vec<f32> = (0..n_rows * n_cols)
        .map(|i| rng.f() * if i % 97 == 0 { 40.0 } else { 1.0 })
        .collect();
    let mut act = QuantizedActivation::new();
    act.quantize(ActFormat::Q8, &x, n_cols).unwrap();
    for t in 0..n_rows {
        let mut want = vec![BlockQ8_0 { d: 0, qs: [0; 32] }; n_cols / 32];
        quantize_row_q8_0(&x[t * n_cols..(t + 1) * n_cols], &mut want).unwrap();
        for (got, want) in act.q8_row(t).iter().zip(&want) {
            assert_eq!(
                got.d.to_bits(),
                f16_to_f32(want.d).to_bits(),
                "q8 d row {t}"
            );
            assert_eq!(got.qs, want.qs, "q8 qs row {t}");
        }
    }
    act.quantize(ActFormat::Q8K, &x, n_cols).unwrap();
    for t in 0..n_rows {
        let mut want = vec![BlockQ8K::ZERO; n_cols / 256];
        quantize_row_q8_k(&x[t * n_cols..(t + 1) * n_cols], &mut want).unwrap();
        for (got, want) in act.q8k_row(t).iter().zip(&want) {
            assert_eq!(got.d.to_bits(), want.d.to_bits(), "q8k d row {t}");
            assert_eq!(got.qs, want.qs, "q8k qs row {t}");
            assert_eq!(got.bsums, want.bsums, "q8k bsums row {t}");
        }
    }
}

/// Batched products (the multi-row × four-token prefill kernels, with their
/// row and token remainders) of every ISA against the generic kernels on
/// random ragged shapes: odd block counts, row counts that are not multiples
/// of the row groups or the 16-row tile, token counts around multiples of 4.
#[test]
fn every_isa_matmul_matches_generic_on_random_ragged_shapes() {
    let generic = Kernels::generic();
    let mut rng = Rng(11);
    let mut act = QuantizedActivation::new();
    for ty in TYPES {
        for n_blocks in [1usize, 2, 3, 5, 8, 20] {
            let n_cols = cols_for(ty, n_blocks);
            let n_rows = [1usize, 3, 4, 7, 17, 21, 33, 261][rng.below(8) as usize];
            let n_tok = [1usize, 3, 4, 5, 8, 11, 32, 37][rng.below(8) as usize];
            let w = random_weights(ty, n_rows, n_cols, &mut rng, |r| r.f() * 0.05);
            let x: Vec<f32> = (0..n_cols * n_tok).map(|_| rng.f() * 3.0).collect();
            act.quantize_for(ty, &x, n_cols).unwrap();
            let mut want = vec![0.0; n_rows * n_tok];
            generic
                .matmul(ty, &w, 0..n_rows, n_cols, &act, &mut want)
                .unwrap();
            let rb = w.len() / n_rows;
            for k in Kernels::available() {
                let mut got = vec![0.0; n_rows * n_tok];
                k.matmul(ty, &w, 0..n_rows, n_cols, &act, &mut got).unwrap();
                for r in 0..n_rows {
                    for t in 0..n_tok {
                        let xt = &x[t * n_cols..(t + 1) * n_cols];
                        let mag = magnitude(ty, &w[r * rb..(r + 1) * rb], xt);
                        let tol = tol_simd(ty) * mag + 1e-30;
                        let (g, e) = (got[r * n_tok + t], want[r * n_tok + t]);
                        assert!(
                            (g - e).abs() <= tol,
                            "{} {ty} {n_rows}x{n_cols}, {n_tok} tokens, row {r} token {t}: {g} vs generic {e} (tol {tol})",
                            k.name()
                        );
                    }
                }
            }
        }
    }
}

/// The activation quantizers this CPU uses (SIMD where detected) equal the
/// scalar ones bit for bit on edge cases: exact rounding ties (scale 1),
/// all-zero and signed-zero blocks, denormals, a repeated largest magnitude
/// with both signs, NaN and infinities (which take the scalar path).
#[test]
fn activation_quantization_edge_cases_match_scalar_bit_for_bit() {
    use anedvd_cpu::qkernels::Q8Block;
    use anedvd_quant::{quantize_row_q8_k, BlockQ8K};
    let mut rng = Rng(77);
    let mut blocks: Vec<Vec<f32>> = Vec::new();
    // Ties: amax 127 makes the Q8 scale exactly 1; max -127 the Q8_K one.
    let ties: Vec<f32> = (0..256)
        .map(|i| match i % 8 {
            0 => 127.0,
            1 => -127.0,
            2 => (i as f32 % 40.0) - 20.5,
            3 => 0.5,
            4 => -0.5,
            5 => -(i as f32 % 17.0) - 0.5,
            6 => 1.5,
            _ => -2.5,
        })
        .collect();
    blocks.push(ties.clone());
    let mut neg_first = ties;
    neg_first.swap(0, 1);
    blocks.push(neg_first);
    blocks.push(vec![0.0; 256]);
    blocks.push(
        (0..256)
            .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
            .collect(),
    );
    blocks.push((0..256).map(|i| f32::from_bits(1 + i as u32)).collect());
    for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut b: Vec<f32> = (0..256).map(|_| rng.f() * 5.0).collect();
        b[37] = special;
        b[200] = special;
        blocks.push(b);
    }
    for _ in 0..20 {
        let s = 10f32.powi(rng.below(12) as i32 - 6);
        blocks.push((0..256).map(|_| rng.f() * s).collect());
    }
    let x: Vec<f32> = blocks.concat();
    let n_cols = 256;
    let mut act = QuantizedActivation::new();
    act.quantize(ActFormat::Q8, &x, n_cols).unwrap();
    for t in 0..x.len() / n_cols {
        for (j, got) in act.q8_row(t).iter().enumerate() {
            let o = t * n_cols + 32 * j;
            let mut c = [0.0f32; 32];
            c.copy_from_slice(&x[o..o + 32]);
            let want = Q8Block::quantize(&c);
            assert_eq!(got.qs, want.qs, "q8 qs row {t} block {j}");
            assert_eq!(got.d.to_bits(), want.d.to_bits(), "q8 d row {t} block {j}");
            assert_eq!(got.s.to_bits(), want.s.to_bits(), "q8 s row {t} block {j}");
            assert_eq!(got.isum, want.isum, "q8 isum row {t} block {j}");
        }
    }
    act.quantize(ActFormat::Q8K, &x, n_cols).unwrap();
    for t in 0..x.len() / n_cols {
        let mut want = vec![BlockQ8K::ZERO; 1];
        quantize_row_q8_k(&x[t * n_cols..(t + 1) * n_cols], &mut want).unwrap();
        let got = &act.q8k_row(t)[0];
        assert_eq!(got.d.to_bits(), want[0].d.to_bits(), "q8k d row {t}");
        assert_eq!(got.qs, want[0].qs, "q8k qs row {t}");
        assert_eq!(got.bsums, want[0].bsums, "q8k bsums row {t}");
    }
}

/// The gated activation (SIMD and parallel where available) equals the
/// scalar reference bit for bit: random values over the whole range the
/// fast exp clamps, its boundaries, signed zeros, infinities and NaN, on a
/// ragged length and on one large enough to be split across threads.
#[test]
fn gated_activation_matches_scalar_bit_for_bit() {
    use anedvd_cpu::kernels::{gated, gated_scalar};
    use anedvd_graph::Activation;
    let mut rng = Rng(99);
    for n in [1usize, 15, 16, 17, 1000, 200_003] {
        let mut g: Vec<f32> = (0..n)
            .map(|i| match i % 97 {
                0 => -87.0,
                1 => 88.0,
                2 => -0.0,
                3 => 0.0,
                4 => f32::INFINITY,
                5 => f32::NEG_INFINITY,
                6 => f32::NAN,
                7 => -100.0,
                8 => 12.5,
                _ => rng.f() * 30.0,
            })
            .collect();
        let u: Vec<f32> = (0..n).map(|_| rng.f() * 4.0).collect();
        g.truncate(n);
        for act in [Activation::GeluTanh, Activation::Silu] {
            let mut want = g.clone();
            gated_scalar(act, &mut want, &u);
            let mut got = g.clone();
            gated(act, &mut got, &u);
            for i in 0..n {
                assert_eq!(
                    got[i].to_bits(),
                    want[i].to_bits(),
                    "{act:?} n={n} i={i}: g={} -> {} vs scalar {}",
                    g[i],
                    got[i],
                    want[i]
                );
            }
        }
    }
}

/// The token-major batched product equals the weight-row-major one,
/// transposed, bit for bit, where a table offers it (ragged row ranges, token
/// counts around the threshold and the token chunk); elsewhere it says so.
#[test]
fn token_major_matmul_is_the_transposed_matmul() {
    let mut rng = Rng(41);
    for k in Kernels::available() {
        for ty in TYPES {
            for n_tok in [7usize, 8, 13, 70] {
                let n_cols = cols_for(ty, 3);
                // More than one 128-row panel chunk, with a ragged last chunk.
                let n_rows = 300;
                let w = random_weights(ty, n_rows, n_cols, &mut rng, |r| r.f() * 0.05);
                let x: Vec<f32> = (0..n_cols * n_tok).map(|_| rng.f()).collect();
                let mut act = QuantizedActivation::new();
                act.quantize_for(ty, &x, n_cols).unwrap();
                let rows = 3..n_rows;
                let n = rows.len();
                let mut tm = vec![f32::NAN; n * n_tok];
                let r = k.matmul_token_major(ty, &w, rows.clone(), n_cols, &act, &mut tm);
                if !k.has_token_major(ty, n_tok) {
                    assert!(r.is_err(), "{} {ty} {n_tok}", k.name());
                    continue;
                }
                r.unwrap();
                let mut rm = vec![0.0; n * n_tok];
                k.matmul(ty, &w, rows.clone(), n_cols, &act, &mut rm)
                    .unwrap();
                for i in 0..n {
                    for t in 0..n_tok {
                        assert_eq!(
                            tm[t * n + i].to_bits(),
                            rm[i * n_tok + t].to_bits(),
                            "{} {ty} {n_tok} tokens, row {i} token {t}",
                            k.name()
                        );
                    }
                }
            }
        }
    }
}

/// f16 bytes to f32: every value (normal, subnormal, infinite, NaN) equal
/// to `half`'s own conversion of it, on SIMD and scalar paths alike,
/// including lengths that are not whole vectors and a short source.
#[test]
fn f16_to_f32_matches_half() {
    use anedvd_cpu::kernels::{f16_to_f32, f16_to_f32_scalar};
    let specials = [
        0x0000u16, 0x8000, 0x0001, 0x03ff, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x7e00,
    ];
    let mut rng = Rng(13);
    for n in [0usize, 1, 7, 8, 9, 33, 1000] {
        let bits: Vec<u16> = (0..n)
            .map(|i| {
                specials
                    .get(i)
                    .copied()
                    .unwrap_or_else(|| (rng.f().to_bits() >> 7) as u16)
            })
            .collect();
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        let want: Vec<u32> = bits
            .iter()
            .map(|&b| half::f16::from_bits(b).to_f32().to_bits())
            .collect();
        let (mut a, mut b) = (vec![1.5f32; n + 1], vec![1.5f32; n + 1]);
        f16_to_f32(&bytes, &mut a);
        f16_to_f32_scalar(&bytes, &mut b);
        for i in 0..n {
            assert_eq!(a[i].to_bits(), want[i], "simd n={n} i={i}");
            assert_eq!(b[i].to_bits(), want[i], "scalar n={n} i={i}");
        }
        // The slot past the source's end is left alone.
        assert_eq!((a[n], b[n]), (1.5, 1.5));
    }
}

/// The online-softmax row step: every exponential and running sum bit for
/// bit the scalar twin's, including the tail past the last 16 lanes and
/// shifts of -inf rows' stand-in 0 against -inf scores (masked keys).
#[test]
fn exp_shifted_add_matches_scalar() {
    use anedvd_cpu::kernels::{exp_shifted_add, exp_shifted_add_scalar};
    let mut rng = Rng(11);
    for n in [0usize, 1, 15, 16, 17, 100, 333] {
        let x: Vec<f32> = (0..n)
            .map(|i| match i % 37 {
                5 => f32::NEG_INFINITY,
                9 => -1e4,
                _ => rng.f() * 60.0,
            })
            .collect();
        let shift: Vec<f32> = (0..n)
            .map(|i| if i % 13 == 2 { 0.0 } else { rng.f() * 40.0 })
            .collect();
        let sum0: Vec<f32> = (0..n).map(|_| rng.f().abs() * 10.0).collect();
        let (mut a, mut b) = (x.clone(), x);
        let (mut sa, mut sb) = (sum0.clone(), sum0);
        exp_shifted_add(&mut a, &shift, &mut sa);
        exp_shifted_add_scalar(&mut b, &shift, &mut sb);
        for i in 0..n {
            assert_eq!(a[i].to_bits(), b[i].to_bits(), "n={n} i={i}");
            assert_eq!(sa[i].to_bits(), sb[i].to_bits(), "sum n={n} i={i}");
        }
    }
}

/// Attention score exponentiation (SIMD where available) equals the scalar
/// twin element for element and in its max, bit for bit; the lane-wise sum
/// within a relative 1e-6.
#[test]
fn exp_scores_match_scalar() {
    use anedvd_cpu::kernels::{exp_scores, exp_scores_scalar};
    let mut rng = Rng(5);
    for n in [0usize, 1, 15, 16, 17, 100, 333] {
        for cap in [None, Some(50.0f32)] {
            let x: Vec<f32> = (0..n)
                .map(|i| if i % 41 == 7 { -1e4 } else { rng.f() * 200.0 })
                .collect();
            let (mut a, mut b) = (x.clone(), x.clone());
            let (ma, sa) = exp_scores(&mut a, 0.0625, cap);
            let (mb, sb) = exp_scores_scalar(&mut b, 0.0625, cap);
            assert_eq!(ma.to_bits(), mb.to_bits(), "max n={n} cap={cap:?}");
            for i in 0..n {
                assert_eq!(a[i].to_bits(), b[i].to_bits(), "n={n} cap={cap:?} i={i}");
            }
            assert!(
                (sa - sb).abs() <= 1e-6 * sb.abs(),
                "sum n={n}: {sa} vs {sb}"
            );
        }
    }
}

/// The f32 tile product of tiled attention: every table equals the scalar
/// twin bit for bit (both are fused multiply-adds in the same order) on
/// ragged shapes, with `a` read row-major and transposed; the twin is
/// within f32 rounding of an f64 product; short slices are refused.
#[test]
fn gemm_f32_matches_scalar_bit_for_bit_and_f64() {
    let generic = Kernels::generic();
    let mut rng = Rng(11);
    for (m, k, n) in [
        (1, 1, 1),
        (3, 5, 7),
        (8, 64, 64),
        (9, 17, 33),
        (64, 64, 256),
        (13, 40, 48),
        (64, 3, 80),
    ] {
        for transposed in [false, true] {
            let (rs, cs) = if transposed { (1, m + 2) } else { (k + 1, 1) };
            let a: Vec<f32> = (0..(m - 1) * rs + (k - 1) * cs + 1)
                .map(|_| rng.f())
                .collect();
            let (ldb, ldc) = (n + 3, n + 1);
            let b: Vec<f32> = (0..(k - 1) * ldb + n).map(|_| rng.f()).collect();
            let c0: Vec<f32> = (0..(m - 1) * ldc + n).map(|_| rng.f()).collect();
            let mut want = c0.clone();
            generic
                .gemm_f32(&a, (rs, cs), &b, ldb, &mut want, ldc, (m, k, n))
                .unwrap();
            for i in 0..m {
                for j in 0..n {
                    let exact: f64 = f64::from(c0[i * ldc + j])
                        + (0..k)
                            .map(|p| f64::from(a[i * rs + p * cs]) * f64::from(b[p * ldb + j]))
                            .sum::<f64>();
                    let got = f64::from(want[i * ldc + j]);
                    assert!(
                        (got - exact).abs() <= 1e-5 * (k as f64 + 1.0),
                        "{m}x{k}x{n}"
                    );
                }
            }
            for isa in Kernels::available() {
                let mut got = c0.clone();
                isa.gemm_f32(&a, (rs, cs), &b, ldb, &mut got, ldc, (m, k, n))
                    .unwrap();
                for (x, y) in got.iter().zip(&want) {
                    assert_eq!(
                        x.to_bits(),
                        y.to_bits(),
                        "{isa:?} {m}x{k}x{n} t={transposed}"
                    );
                }
            }
        }
    }
    for isa in Kernels::available() {
        let (a, b) = (vec![1.0; 16], vec![1.0; 16]);
        let mut c = vec![0.0; 15];
        let err = isa.gemm_f32(&a, (4, 1), &b, 4, &mut c, 4, (4, 4, 4));
        assert!(matches!(err, Err(KernelError::Shape(_))), "{isa:?}");
        assert!(c.iter().all(|&x| x == 0.0));
        let mut c = vec![0.0; 16];
        let err = isa.gemm_f32(&a, (4, 4), &b, 4, &mut c, 4, (4, 4, 4));
        assert!(matches!(err, Err(KernelError::Shape(_))), "{isa:?}");
    }
}

/// Every `--isa` cap picks a table this CPU has, no more capable than the
/// cap: the NEON caps pick NEON tables on aarch64 and the scalar twins on
/// x86-64, and the reverse for the x86 caps.
#[test]
fn isa_caps_pick_the_most_capable_table_at_or_below_them() {
    let available: Vec<&str> = Kernels::available().iter().map(|k| k.name()).collect();
    let best_of = |allowed: &[&'static str]| -> &'static str {
        allowed
            .iter()
            .copied()
            .find(|n| available.contains(n))
            .unwrap_or("generic")
    };
    for cap in IsaCap::ALL {
        assert_eq!(IsaCap::from_name(cap.name()), Some(cap));
        let want = match cap {
            IsaCap::Best => best_of(&[
                "avx512vnni",
                "avx512",
                "avx2",
                "neon-i8mm",
                "neon-dotprod",
                "neon",
            ]),
            IsaCap::Avx512 => best_of(&["avx512", "avx2"]),
            IsaCap::Avx2 => best_of(&["avx2"]),
            IsaCap::NeonDotprod => best_of(&["neon-dotprod", "neon"]),
            IsaCap::Neon => best_of(&["neon"]),
            IsaCap::Generic => "generic",
        };
        // The Zen 4 tuning of a table counts as that table.
        let got = Kernels::capped(cap).name().trim_end_matches("-zen4");
        assert_eq!(got, want, "cap {}", cap.name());
    }
    if cfg!(target_arch = "aarch64") {
        assert!(available.contains(&"neon"), "{available:?}");
    }
}
