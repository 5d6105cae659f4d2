//! i-quant dequantization against gguf-py (`gguf.quants.dequantize`) goldens.
//!
//! Fixtures: `tests/golden/gguf_py/<TYPE>.blocks.bin` (random blocks whose f16
//! scales include ±0, subnormals, f16 max, ±Inf and NaN) and `<TYPE>.f32.bin`
//! (gguf-py's output), written by `tests/golden/gen_golden.py`; and
//! `tests/golden/ggml/<TYPE>.f32.bin`, ggml's own `dequantize_row_iq*` of the
//! same blocks, written by `tests/golden/gen_golden_ggml.py`.

use anedvd_base::GgmlType;
use anedvd_quant::{dequantize, Error};
use std::path::PathBuf;

const IQ: [GgmlType; 9] = [
    GgmlType::IQ1S,
    GgmlType::IQ1M,
    GgmlType::IQ2XXS,
    GgmlType::IQ2XS,
    GgmlType::IQ2S,
    GgmlType::IQ3XXS,
    GgmlType::IQ3S,
    GgmlType::IQ4NL,
    GgmlType::IQ4XS,
];

fn golden(dir: &str, name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(dir)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Little-endian f32 values of a fixture file.
fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `(blocks, gguf-py's expected values)` for `ty`.
fn load(ty: GgmlType) -> (Vec<u8>, Vec<f32>) {
    let blocks = golden("gguf_py", &format!("{}.blocks.bin", ty.name()));
    let expected = floats(&golden("gguf_py", &format!("{}.f32.bin", ty.name())));
    (blocks, expected)
}

/// Bit-exact comparison; NaN only has to be NaN. Returns the mismatch count.
fn mismatches(ty: GgmlType, got: &[f32], want: &[f32]) -> usize {
    assert_eq!(got.len(), want.len(), "{ty}");
    let mut bad = 0;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same = if w.is_nan() {
            g.is_nan()
        } else {
            g.to_bits() == w.to_bits()
        };
        if !same {
            if bad < 5 {
                let block = i / ty.block_size() as usize;
                eprintln!(
                    "{ty}[{i}] (block {block}): got {g:e} ({:#010x}), want {w:e} ({:#010x})",
                    g.to_bits(),
                    w.to_bits()
                );
            }
            bad += 1;
        }
    }
    bad
}

#[test]
fn iq_dequantize_matches_gguf_py_bit_exactly() {
    let mut failed = Vec::new();
    for ty in IQ {
        let (blocks, want) = load(ty);
        let n_blocks = blocks.len() / ty.block_bytes() as usize;
        assert!(n_blocks >= 12, "{ty}: fixture has only {n_blocks} blocks");
        assert_eq!(want.len(), n_blocks * ty.block_size() as usize, "{ty}");
        // The fixture must exercise the special scales: NaN, Inf and ±0 outputs.
        assert!(want.iter().any(|v| v.is_nan()), "{ty}: no NaN in fixture");
        assert!(
            want.iter().any(|v| v.is_infinite()),
            "{ty}: no Inf in fixture"
        );
        let mut got = vec![f32::from_bits(0x7fc0_dead); want.len()];
        dequantize(ty, &blocks, &mut got).unwrap_or_else(|e| panic!("{ty}: {e}"));
        let bad = mismatches(ty, &got, &want);
        if bad > 0 {
            failed.push(format!("{ty}: {bad} of {} values differ", want.len()));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn iq_dequantize_matches_ggml_bit_exactly() {
    let mut failed = Vec::new();
    for ty in IQ {
        let (blocks, _) = load(ty);
        let want = floats(&golden("ggml", &format!("{}.f32.bin", ty.name())));
        let mut got = vec![0f32; want.len()];
        dequantize(ty, &blocks, &mut got).unwrap_or_else(|e| panic!("{ty}: {e}"));
        let bad = mismatches(ty, &got, &want);
        if bad > 0 {
            failed.push(format!("{ty}: {bad} of {} values differ", want.len()));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn iq_dequantize_is_blockwise() {
    // Any whole-block prefix / suffix of the row dequantizes to the same values.
    for ty in IQ {
        let (blocks, want) = load(ty);
        let (bb, qk) = (ty.block_bytes() as usize, ty.block_size() as usize);
        let n = blocks.len() / bb;
        for k in [1, n / 2, n - 1] {
            let mut got = vec![0f32; (n - k) * qk];
            dequantize(ty, &blocks[k * bb..], &mut got).unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert_eq!(
                mismatches(ty, &got, &want[k * qk..]),
                0,
                "{ty} suffix from block {k}"
            );
        }
    }
}

#[test]
fn iq_length_errors_name_the_type() {
    for ty in IQ {
        let (bb, qk) = (ty.block_bytes() as usize, ty.block_size() as usize);
        let src = vec![0u8; 3 * bb];
        let mut dst = vec![7.0f32; 3 * qk];
        let cases: [(usize, usize); 5] = [
            (3 * bb - 1, 3 * qk),
            (2 * bb, 3 * qk),
            (3 * bb, 2 * qk),
            (3 * bb, 3 * qk - 1),
            (bb, 1),
        ];
        for (s, d) in cases {
            match dequantize(ty, &src[..s], &mut dst[..d]) {
                Err(Error::BadLength { ty: t, what }) => {
                    assert_eq!(t, ty);
                    assert!(!what.is_empty());
                }
                other => panic!("{ty} src {s} dst {d}: {other:?}"),
            }
        }
        // The output is untouched on error.
        assert!(dst.iter().all(|v| *v == 7.0));
        // Too long a source is an error as well.
        let long = vec![0u8; 3 * bb + 1];
        assert!(matches!(
            dequantize(ty, &long, &mut dst),
            Err(Error::BadLength { .. })
        ));
    }
}
