//! Unit tests of the i-quant module: tables against gguf-py, dispatch, lengths.

use super::grids::*;
use super::*;
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

/// gguf-py's copy of a table, from `tests/iq_grids/<name>.bin`.
fn gguf_py_table(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/iq_grids")
        .join(format!("{name}.bin"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn grids_match_gguf_py() {
    let le64 = |t: &[u64]| t.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    let le32 = |t: &[u32]| t.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    let i8s = |t: &[i8]| t.iter().map(|v| *v as u8).collect::<Vec<u8>>();
    let ours: [(&str, Vec<u8>); 8] = [
        ("IQ2XXS_GRID", le64(&IQ2XXS_GRID)),
        ("IQ2XS_GRID", le64(&IQ2XS_GRID)),
        ("IQ2S_GRID", le64(&IQ2S_GRID)),
        ("IQ3XXS_GRID", le32(&IQ3XXS_GRID)),
        ("IQ3S_GRID", le32(&IQ3S_GRID)),
        ("IQ1S_GRID", le64(&IQ1S_GRID)),
        ("KSIGNS_IQ2XS", KSIGNS_IQ2XS.to_vec()),
        ("KVALUES_IQ4NL", i8s(&KVALUES_IQ4NL)),
    ];
    for (name, ours) in ours {
        let theirs = gguf_py_table(name);
        assert_eq!(ours.len(), theirs.len(), "{name} length");
        let first = ours.iter().zip(&theirs).position(|(a, b)| a != b);
        assert_eq!(first, None, "{name} differs from gguf-py at byte {first:?}");
    }
    assert_eq!(IQ1S_DELTA, 0.125);
    assert_eq!(IQ1M_DELTA, IQ1S_DELTA);
}

#[test]
fn ksigns_have_even_parity() {
    // ggml stores 7 sign bits; the 8th makes the count of negatives even.
    for (i, s) in KSIGNS_IQ2XS.iter().enumerate() {
        assert_eq!(usize::from(s & 127), i);
        assert_eq!(s.count_ones() % 2, 0, "entry {i}");
    }
}

#[test]
fn block_layouts_match_ggml_type_sizes() {
    let ours = [
        (GgmlType::IQ1S, iq1::IQ1_S_BYTES, QK_K),
        (GgmlType::IQ1M, iq1::IQ1_M_BYTES, QK_K),
        (GgmlType::IQ2XXS, iq2::IQ2_XXS_BYTES, QK_K),
        (GgmlType::IQ2XS, iq2::IQ2_XS_BYTES, QK_K),
        (GgmlType::IQ2S, iq2::IQ2_S_BYTES, QK_K),
        (GgmlType::IQ3XXS, iq3::IQ3_XXS_BYTES, QK_K),
        (GgmlType::IQ3S, iq3::IQ3_S_BYTES, QK_K),
        (GgmlType::IQ4NL, iq4::IQ4_NL_BYTES, iq4::QK4_NL),
        (GgmlType::IQ4XS, iq4::IQ4_XS_BYTES, QK_K),
    ];
    for (ty, bytes, qk) in ours {
        assert_eq!(ty.block_bytes(), bytes as u64, "{ty}");
        assert_eq!(ty.block_size(), qk as u64, "{ty}");
    }
}

#[test]
fn non_iq_types_are_not_claimed() {
    for ty in [
        GgmlType::F32,
        GgmlType::Q4_0,
        GgmlType::Q4K,
        GgmlType::TQ1_0,
    ] {
        assert!(dequantize(ty, &[], &mut []).is_none(), "{ty}");
    }
    for ty in IQ {
        assert!(dequantize(ty, &[], &mut []).is_some(), "{ty}");
    }
}

#[test]
fn length_errors() {
    for ty in IQ {
        let (qk, bb) = (ty.block_size() as usize, ty.block_bytes() as usize);
        let src = vec![0u8; 2 * bb + 1];
        let mut dst = vec![0f32; 2 * qk];
        let ok = dequantize(ty, &src[..2 * bb], &mut dst);
        assert!(matches!(ok, Some(Ok(()))), "{ty}");
        let empty = dequantize(ty, &[], &mut []);
        assert!(matches!(empty, Some(Ok(()))), "{ty} empty");
        for (s, d) in [
            (2 * bb - 1, 2 * qk),
            (2 * bb + 1, 2 * qk),
            (bb, 2 * qk),
            (2 * bb, qk),
            (bb, qk - 1),
        ] {
            let r = dequantize(ty, &src[..s], &mut dst[..d]);
            assert!(
                matches!(r, Some(Err(Error::BadLength { ty: t, .. })) if t == ty),
                "{ty} src {s} dst {d}: {r:?}"
            );
        }
    }
}

#[test]
fn zero_blocks_give_zeros() {
    // An all-zero block has scale +0.0 (IQ1_M's split scale too), and every
    // grid and code-book value is finite, so every output is ±0.
    for ty in IQ {
        let mut dst = vec![f32::NAN; ty.block_size() as usize];
        let src = vec![0u8; ty.block_bytes() as usize];
        assert!(matches!(dequantize(ty, &src, &mut dst), Some(Ok(()))));
        assert!(dst.iter().all(|v| *v == 0.0), "{ty}: {dst:?}");
    }
}

/// Reads `tests/iq_dot/<name>`.
fn iq_dot_fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/iq_dot")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn vec_dot_q8_matches_ggml_generic_bit_exactly() {
    // Rows as in gen_iq_dot.py: (first 256-element unit, units).
    let rows: Vec<(usize, usize)> = (0..24).map(|u| (u, 1)).chain([(24, 4), (28, 4)]).collect();
    let mut failed = Vec::new();
    for ty in IQ {
        let act_ty = vec_dot_type(ty).unwrap_or_else(|| panic!("{ty}"));
        let w = iq_dot_fixture(&format!("{}.w.bin", ty.name()));
        let act = iq_dot_fixture(if act_ty == GgmlType::Q8K {
            "q8_K.bin"
        } else {
            "q8_0.bin"
        });
        let want: Vec<f32> = iq_dot_fixture(&format!("{}.dot.bin", ty.name()))
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(want.len(), rows.len(), "{ty}");
        let wu = ty.row_bytes(256).unwrap_or_else(|e| panic!("{e}")) as usize;
        let au = act_ty.row_bytes(256).unwrap_or_else(|e| panic!("{e}")) as usize;
        assert_eq!(w.len(), 32 * wu, "{ty}");
        assert_eq!(act.len(), 32 * au, "{ty}");
        for (&(u0, nu), want) in rows.iter().zip(&want) {
            let got = vec_dot_q8(
                ty,
                &w[u0 * wu..(u0 + nu) * wu],
                &act[u0 * au..(u0 + nu) * au],
            );
            let got = match got {
                Some(Ok(v)) => v,
                other => panic!("{ty} row {u0}: {other:?}"),
            };
            let same = if want.is_nan() {
                got.is_nan()
            } else {
                got.to_bits() == want.to_bits()
            };
            if !same {
                failed.push(format!("{ty} row ({u0}, {nu}): got {got:e}, want {want:e}"));
            }
        }
        // The fixture covers non-finite and finite results.
        assert!(want.iter().any(|v| !v.is_finite()), "{ty}");
        assert!(
            want.iter().filter(|v| v.is_finite() && **v != 0.0).count() >= 20,
            "{ty}"
        );
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn vec_dot_q8_checks_lengths() {
    for ty in [GgmlType::F32, GgmlType::Q4K] {
        assert!(vec_dot_type(ty).is_none());
        assert!(vec_dot_q8(ty, &[], &[]).is_none());
    }
    for ty in IQ {
        let act_ty = vec_dot_type(ty).unwrap_or_else(|| panic!("{ty}"));
        let wb = ty.row_bytes(512).unwrap_or_else(|e| panic!("{e}")) as usize;
        let ab = act_ty.row_bytes(512).unwrap_or_else(|e| panic!("{e}")) as usize;
        let (w, a) = (vec![0u8; wb + 1], vec![0u8; ab + 1]);
        assert!(
            matches!(vec_dot_q8(ty, &w[..wb], &a[..ab]), Some(Ok(v)) if v == 0.0),
            "{ty}"
        );
        assert!(
            matches!(vec_dot_q8(ty, &[], &[]), Some(Ok(v)) if v == 0.0),
            "{ty}"
        );
        for (ws, as_) in [
            (wb - 1, ab),
            (wb + 1, ab),
            (wb, ab - 1),
            (wb, ab + 1),
            (wb / 2, ab),
        ] {
            let r = vec_dot_q8(ty, &w[..ws], &a[..as_]);
            assert!(
                matches!(r, Some(Err(Error::BadLength { ty: t, .. })) if t == ty),
                "{ty} w {ws} act {as_}: {r:?}"
            );
        }
    }
}

/// splitmix64: a small deterministic generator for property tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// A finite normal f16 in ±[2^-8, 2^0), as bits.
    fn f16_bits(&mut self) -> u16 {
        let r = self.next();
        let exp = 7 + (r % 8) as u16; // biased exponent 7..=14
        ((r >> 8) as u16 & 0x8000) | (exp << 10) | ((r >> 16) as u16 & 0x3ff)
    }
}

/// Overwrites the f16 super-block scale(s) of each block of `w` with finite values.
fn finite_scales(ty: GgmlType, w: &mut [u8], rng: &mut Rng) {
    for b in w.chunks_exact_mut(ty.block_bytes() as usize) {
        let v = rng.f16_bits();
        if ty == GgmlType::IQ1M {
            for k in 0..4 {
                let at = 48 + 2 * k;
                let word = u16::from_le_bytes([b[at], b[at + 1]]);
                let word = (word & 0x0fff) | (((v >> (4 * k)) & 0xf) << 12);
                b[at..at + 2].copy_from_slice(&word.to_le_bytes());
            }
        } else {
            b[..2].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Random Q8_K (consistent `bsums`) or Q8_0 activations for `n` elements, and their values.
fn random_q8(act_ty: GgmlType, n: usize, rng: &mut Rng) -> (Vec<u8>, Vec<f64>) {
    let (mut bytes, mut vals) = (Vec::new(), Vec::new());
    let qk = act_ty.block_size() as usize;
    for _ in 0..n / qk {
        let qs: Vec<i8> = (0..qk).map(|_| rng.next() as i8).collect();
        let d = if act_ty == GgmlType::Q8K {
            let d = (rng.next() % 1000 + 1) as f32 / 64_000.0;
            bytes.extend(d.to_le_bytes());
            bytes.extend(qs.iter().map(|q| *q as u8));
            for c in qs.chunks_exact(16) {
                let s: i16 = c.iter().map(|q| i16::from(*q)).sum();
                bytes.extend(s.to_le_bytes());
            }
            f64::from(d)
        } else {
            let bits = rng.f16_bits();
            bytes.extend(bits.to_le_bytes());
            bytes.extend(qs.iter().map(|q| *q as u8));
            f64::from(half::f16::from_bits(bits).to_f32())
        };
        vals.extend(qs.iter().map(|q| d * f64::from(*q)));
    }
    (bytes, vals)
}

#[test]
fn vec_dot_q8_agrees_with_dequantized_dot() {
    // The integer path sums exactly and rounds in f32 only a few times per
    // block, so it must agree with an f64 dot of the dequantized operands up
    // to a few f32 ulps of the sum of |products|.
    const REL_TOL: f64 = 1e-5;
    let mut rng = Rng(20261130);
    for ty in IQ {
        let act_ty = vec_dot_type(ty).unwrap_or_else(|| panic!("{ty}"));
        for round in 0..50 {
            let n = 256 * (1 + (rng.next() % 6) as usize);
            let wb = ty.row_bytes(n as u64).unwrap_or_else(|e| panic!("{e}")) as usize;
            let mut w = rng.bytes(wb);
            finite_scales(ty, &mut w, &mut rng);
            let (act, a) = random_q8(act_ty, n, &mut rng);
            let mut x = vec![0f32; n];
            assert!(matches!(dequantize(ty, &w, &mut x), Some(Ok(()))));
            let exact: f64 = x.iter().zip(&a).map(|(x, a)| f64::from(*x) * a).sum();
            let scale: f64 = x
                .iter()
                .zip(&a)
                .map(|(x, a)| (f64::from(*x) * a).abs())
                .sum();
            let got = match vec_dot_q8(ty, &w, &act) {
                Some(Ok(v)) => f64::from(v),
                other => panic!("{ty}: {other:?}"),
            };
            assert!(
                (got - exact).abs() <= REL_TOL * scale + 1e-30,
                "{ty} round {round} n {n}: got {got}, dequantized dot {exact} (scale {scale})"
            );
        }
    }
}
