//! Weights packed at load (`Kernels::pack_rows`, `Kernels::packed_matmul`):
//! every table's packing against the scalar twin's bytes, every table's
//! packed products against the scalar twin bit for bit, and the scalar
//! twin against the file-layout kernels (`Kernels::matvec`) within the f32
//! reduction-order tolerance, on ragged shapes (partial last panels, odd
//! block counts, token counts around the 4-token tile and past the 64-token
//! chunk; 5, 7 and 9 also reach the AVX-512 kernels' 1- and 3-token tails in
//! the Zen 4 tuning `avx512vnni-zen4`, where fewer than 4 tokens take the
//! AVX2 kernels) and row ranges split on panels as threads split them.

#![allow(clippy::unwrap_used)]

mod kernel_data;

use anedvd_base::GgmlType;
use anedvd_cpu::qkernels::{KernelError, Kernels, PackedWeights, QuantizedActivation};
use kernel_data::{cols_for, magnitude, random_weights, tol_simd, Rng};

/// The types with a packed layout.
const PACKED: [GgmlType; 6] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::IQ4NL,
    GgmlType::Q4K,
    GgmlType::Q6K,
];

fn pack(k: &Kernels, ty: GgmlType, w: &[u8], n_rows: usize, n_cols: usize) -> PackedWeights {
    let mut p = k.new_packed(ty, n_rows, n_cols).unwrap();
    // In two parts, as the loader's parallel jobs do (whole panels each).
    let rb = w.len() / n_rows.max(1);
    let pb = p.panel_bytes();
    let split = (n_rows / 2 / 16) * 16;
    let (d0, d1) = p.panels_mut().split_at_mut(split / 16 * pb);
    k.pack_rows(ty, &w[..split * rb], n_cols, d0).unwrap();
    k.pack_rows(ty, &w[split * rb..], n_cols, d1).unwrap();
    p
}

fn packed_bytes(p: &mut PackedWeights) -> Vec<u8> {
    p.panels_mut().to_vec()
}

#[test]
fn every_table_packs_like_the_scalar_twin_and_multiplies_bit_for_bit() {
    let generic = Kernels::generic();
    let mut rng = Rng(21);
    let mut act = QuantizedActivation::new();
    for ty in PACKED {
        for (n_blocks, n_rows) in [(1usize, 1usize), (3, 17), (5, 40), (20, 300), (2, 16)] {
            let n_cols = cols_for(ty, n_blocks);
            let w = random_weights(ty, n_rows, n_cols, &mut rng, |r| r.f() * 0.05);
            let mut want_p = pack(&generic, ty, &w, n_rows, n_cols);
            for n_tok in [1usize, 2, 3, 4, 5, 7, 9, 70] {
                let x: Vec<f32> = (0..n_cols * n_tok).map(|_| rng.f() * 3.0).collect();
                act.quantize_for(ty, &x, n_cols).unwrap();
                let mut want = vec![0.0; n_rows * n_tok];
                generic
                    .packed_matmul(&want_p, 0..n_rows, &act, &mut want)
                    .unwrap();
                for k in Kernels::available() {
                    let mut p = pack(&k, ty, &w, n_rows, n_cols);
                    assert_eq!(
                        packed_bytes(&mut p),
                        packed_bytes(&mut want_p),
                        "{} {ty} {n_rows}x{n_cols}: packed bytes",
                        k.name()
                    );
                    // Two row ranges split on a panel, as two threads would.
                    let mid = (n_rows / 32) * 16;
                    let mut got = vec![0.0; n_rows * n_tok];
                    let (a, b) = got.split_at_mut(mid * n_tok);
                    k.packed_matmul(&p, 0..mid, &act, a).unwrap();
                    k.packed_matmul(&p, mid..n_rows, &act, b).unwrap();
                    // Token-major per range: gather into one token-major matrix.
                    let mut merged = vec![0.0; n_rows * n_tok];
                    for t in 0..n_tok {
                        for r in 0..n_rows {
                            merged[t * n_rows + r] = if r < mid {
                                got[t * mid + r]
                            } else {
                                got[mid * n_tok + t * (n_rows - mid) + (r - mid)]
                            };
                        }
                    }
                    for (i, (g, e)) in merged.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            e.to_bits(),
                            "{} {ty} {n_rows}x{n_cols}, {n_tok} tokens, token {} row {}: {g} vs {e}",
                            k.name(),
                            i / n_rows,
                            i % n_rows
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn packed_products_match_the_file_layout_kernels() {
    let generic = Kernels::generic();
    let mut rng = Rng(22);
    let mut act = QuantizedActivation::new();
    let mut one = QuantizedActivation::new();
    for ty in PACKED {
        let (n_rows, n_cols, n_tok) = (37, cols_for(ty, 7), 6);
        let w = random_weights(ty, n_rows, n_cols, &mut rng, |r| r.f() * 0.05);
        let p = pack(&generic, ty, &w, n_rows, n_cols);
        let x: Vec<f32> = (0..n_cols * n_tok).map(|_| rng.f() * 3.0).collect();
        act.quantize_for(ty, &x, n_cols).unwrap();
        let mut got = vec![0.0; n_rows * n_tok];
        generic
            .packed_matmul(&p, 0..n_rows, &act, &mut got)
            .unwrap();
        let rb = w.len() / n_rows;
        for t in 0..n_tok {
            let xt = &x[t * n_cols..(t + 1) * n_cols];
            one.quantize_for(ty, xt, n_cols).unwrap();
            let mut want = vec![0.0; n_rows];
            generic
                .matvec(ty, &w, 0..n_rows, n_cols, &one, &mut want)
                .unwrap();
            for r in 0..n_rows {
                let tol = tol_simd(ty) * magnitude(ty, &w[r * rb..(r + 1) * rb], xt) + 1e-30;
                let g = got[t * n_rows + r];
                assert!(
                    (g - want[r]).abs() <= tol,
                    "{ty} token {t} row {r}: packed {g} vs file layout {} (tol {tol})",
                    want[r]
                );
            }
        }
    }
}

#[test]
fn packed_shapes_are_checked() {
    let k = Kernels::detect();
    let ty = GgmlType::Q8_0;
    let w = vec![0u8; 20 * 34];
    let mut act = QuantizedActivation::new();
    act.quantize_for(ty, &[0.5; 32], 32).unwrap();
    // No packed layout for the other K-quants, nor for partial blocks.
    assert!(k.new_packed(GgmlType::Q5K, 4, 256).is_err());
    assert!(k.new_packed(GgmlType::Q4K, 4, 320).is_err());
    assert!(k.new_packed(ty, 4, 40).is_err());
    assert_eq!(
        k.new_packed(GgmlType::Q4K, 20, 512).unwrap().panel_bytes(),
        2 * 16 * 144
    );
    // Q6_K panels: 16 rows of 210 bytes per block, padded to 64 bytes.
    assert_eq!(
        k.new_packed(GgmlType::Q6K, 20, 768).unwrap().panel_bytes(),
        3 * 16 * 210 + 32
    );
    let mut p = k.new_packed(ty, 20, 32).unwrap();
    assert_eq!(p.panel_bytes(), 16 * 34);
    assert_eq!(p.len(), 2 * 16 * 34);
    // Too many rows for the panels given; rows of the wrong width.
    assert!(matches!(
        k.pack_rows(ty, &w, 32, &mut p.panels_mut()[..16 * 34]),
        Err(KernelError::Shape(_))
    ));
    assert!(k.pack_rows(ty, &w[..33], 32, p.panels_mut()).is_err());
    k.pack_rows(ty, &w, 32, p.panels_mut()).unwrap();
    let mut out = vec![0.0; 20];
    k.packed_matmul(&p, 0..20, &act, &mut out).unwrap();
    // A range not starting on a panel, past the end, a wrong output length,
    // activations of another format.
    assert!(k.packed_matmul(&p, 3..20, &act, &mut out[..17]).is_err());
    assert!(k.packed_matmul(&p, 16..21, &act, &mut out[..5]).is_err());
    assert!(k.packed_matmul(&p, 0..20, &act, &mut out[..19]).is_err());
    act.quantize_for(GgmlType::F32, &[0.5; 32], 32).unwrap();
    assert!(k.packed_matmul(&p, 0..20, &act, &mut out).is_err());
    // Q4_K panels take Q8_K activations only.
    let q4k = k.new_packed(GgmlType::Q4K, 20, 256).unwrap();
    act.quantize_for(GgmlType::Q8_0, &[0.5; 256], 256).unwrap();
    assert!(k.packed_matmul(&q4k, 0..20, &act, &mut out).is_err());
    act.quantize_for(GgmlType::Q4K, &[0.5; 256], 256).unwrap();
    k.packed_matmul(&q4k, 0..20, &act, &mut out).unwrap();
}

#[test]
fn packed_rows_decode_to_the_files_dequantized_rows() {
    let mut rng = Rng(23);
    for k in Kernels::available() {
        for ty in PACKED {
            let (n_rows, n_cols) = (35, cols_for(ty, 3));
            let w = random_weights(ty, n_rows, n_cols, &mut rng, |r| r.f() * 0.05);
            let p = pack(&k, ty, &w, n_rows, n_cols);
            let rb = w.len() / n_rows;
            let (mut got, mut want) = (vec![0.0; n_cols], vec![0.0; n_cols]);
            for r in 0..n_rows {
                p.decode_row(r, &mut got).unwrap();
                anedvd_quant::dequantize(ty, &w[r * rb..(r + 1) * rb], &mut want).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{} {ty} row {r}", k.name());
            }
            assert!(p.decode_row(n_rows, &mut got).is_err());
            assert!(p.decode_row(0, &mut got[..n_cols - 1]).is_err());
        }
    }
}
