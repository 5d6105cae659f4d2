//! API behaviour: length errors, unsupported types, and a quantize ->
//! dequantize round-trip sanity bound (the goldens are the real check).

#![allow(clippy::unwrap_used)]

use anedvd_base::GgmlType;
use anedvd_quant::{can_quantize, dequantize, quantize, vec_dot, Error};

/// Deterministic pseudo-random normal-ish values (xorshift + sum of uniforms).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.max(1);
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s as f32 / u32::MAX as f32
    };
    (0..n)
        .map(|_| (next() + next() + next() + next() - 2.0) * 1.7)
        .collect()
}

#[test]
fn dequantize_rejects_bad_lengths() {
    for &ty in GgmlType::all() {
        let bs = ty.block_size() as usize;
        let bb = ty.block_bytes() as usize;
        let src = vec![0u8; 4 * bb];
        // one byte short / long
        let mut dst = vec![0.0f32; 4 * bs];
        assert!(
            matches!(
                dequantize(ty, &src[1..], &mut dst),
                Err(Error::BadLength { .. })
            ),
            "{ty}"
        );
        let mut long = src.clone();
        long.push(0);
        assert!(
            matches!(
                dequantize(ty, &long, &mut dst),
                Err(Error::BadLength { .. })
            ),
            "{ty}"
        );
        // element count not a whole number of blocks
        if bs > 1 {
            let mut ragged = vec![0.0f32; 4 * bs - 1];
            assert!(
                matches!(
                    dequantize(ty, &src, &mut ragged),
                    Err(Error::BadLength { .. })
                ),
                "{ty}"
            );
        }
        // empty is fine
        dequantize(ty, &[], &mut []).unwrap();
        // zeroed blocks of the right size are accepted by every type
        dequantize(ty, &src, &mut dst).unwrap_or_else(|e| panic!("{ty}: {e}"));
    }
}

#[test]
fn vec_dot_rejects_bad_lengths() {
    let a = vec![1.0f32; 64];
    assert!(matches!(
        vec_dot(GgmlType::Q4_0, &[0u8; 35], &a),
        Err(Error::BadLength { .. })
    ));
    assert!(matches!(
        vec_dot(GgmlType::Q4K, &[0u8; 144], &a),
        Err(Error::BadLength { .. })
    ));
    assert_eq!(vec_dot(GgmlType::Q4_0, &[], &[]).unwrap(), 0.0);
}

#[test]
fn quantize_rejects_bad_lengths_and_unsupported() {
    let x = vec![0.5f32; 256];
    let mut small = vec![0u8; 143];
    assert!(matches!(
        quantize(GgmlType::Q4K, &x, &mut small),
        Err(Error::BadLength { .. })
    ));
    let mut q = vec![0u8; 18 * 8];
    assert!(matches!(
        quantize(GgmlType::Q4_0, &x[..255], &mut q),
        Err(Error::BadLength { .. })
    ));
    let mut iq = vec![0u8; 66];
    assert!(matches!(
        quantize(GgmlType::IQ2XXS, &x, &mut iq),
        Err(Error::Unsupported(_))
    ));
    assert!(!can_quantize(GgmlType::IQ2XXS));
    let mut blocks = vec![anedvd_quant::BlockQ8K::ZERO; 2];
    assert!(anedvd_quant::quantize_row_q8_k(&x, &mut blocks).is_err());
    let mut blocks = vec![anedvd_quant::BlockQ8_0::ZERO; 7];
    assert!(anedvd_quant::quantize_row_q8_0(&x, &mut blocks).is_err());
}

/// quantize -> dequantize stays within a per-type relative RMS error bound,
/// and vec_dot equals the dot over the dequantized row.
#[test]
fn round_trip_error_is_bounded() {
    use GgmlType::*;
    let table: [(GgmlType, f32); 18] = [
        (F32, 0.0),
        (F16, 1e-3),
        (BF16, 5e-3),
        (Q8_0, 0.01),
        (Q8_1, 0.01),
        (Q8K, 0.01),
        (Q6K, 0.02),
        (Q5_0, 0.05),
        (Q5_1, 0.05),
        (Q5K, 0.05),
        (Q4_0, 0.1),
        (Q4_1, 0.1),
        (Q4K, 0.1),
        (MXFP4, 0.2),
        (Q3K, 0.2),
        (Q2K, 0.4),
        (TQ2_0, 0.8),
        (TQ1_0, 0.8),
    ];
    let n = 1024;
    for (seed, &(ty, tol)) in table.iter().enumerate() {
        assert!(can_quantize(ty));
        let x = values(n, 0x9e37_79b9 ^ seed as u32);
        let mut q = vec![0u8; ty.row_bytes(n as u64).unwrap() as usize];
        quantize(ty, &x, &mut q).unwrap();
        let mut y = vec![0.0f32; n];
        dequantize(ty, &q, &mut y).unwrap();
        let err: f32 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
            .sqrt();
        let norm: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!(
            err <= tol * norm,
            "{ty}: relative rms error {} > {tol}",
            err / norm
        );

        let a = values(n, 7 + seed as u32);
        let mut want = 0.0f32;
        for (w, v) in y.iter().zip(&a) {
            want += w * v;
        }
        assert_eq!(
            vec_dot(ty, &q, &a).unwrap().to_bits(),
            want.to_bits(),
            "{ty}"
        );
    }
}

/// vec_dot over rows whose length is not a multiple of its 256-element chunk
/// (ragged tails) equals the in-order dot over `dequantize`'s output, for
/// every type; random bytes never make either panic.
#[test]
fn vec_dot_matches_dequantize_on_ragged_rows() {
    for &ty in GgmlType::all() {
        let bs = ty.block_size() as usize;
        let bb = ty.block_bytes() as usize;
        for blocks in [1usize, 3, 9, 17] {
            let n = blocks * bs;
            let raw: Vec<u8> = values(blocks * bb, 99 + blocks as u32)
                .iter()
                .map(|v| (v.to_bits() >> 7) as u8)
                .collect();
            let a = values(n, 5 + blocks as u32);
            let mut w = vec![0.0f32; n];
            dequantize(ty, &raw, &mut w).unwrap();
            let mut want = 0.0f32;
            for (x, y) in w.iter().zip(&a) {
                want += x * y;
            }
            let got = vec_dot(ty, &raw, &a).unwrap();
            assert!(
                (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits(),
                "{ty} x{blocks}: {got} vs {want}"
            );
        }
    }
}
