//! Golden tests: anedvd-quant against gguf-py and ggml (libggml-base) outputs
//! stored under tests/golden/ (see tests/golden/README.md for provenance).

#![allow(clippy::unwrap_used)]

use anedvd_base::GgmlType;
use std::path::PathBuf;

fn fixture(dir: &str, name: &str) -> Vec<u8> {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "golden", dir, name]
        .iter()
        .collect();
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Bit equality, except that any NaN matches any NaN.
fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// Compares `got` with `want`; returns a description of the first mismatches.
fn diff(what: &str, got: &[f32], want: &[f32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let bad: Vec<usize> = (0..got.len()).filter(|&i| !same(got[i], want[i])).collect();
    if bad.is_empty() {
        return None;
    }
    let show: Vec<String> = bad
        .iter()
        .take(4)
        .map(|&i| {
            format!(
                "[{i}] got {:e} ({:#010x}) want {:e} ({:#010x})",
                got[i],
                got[i].to_bits(),
                want[i],
                want[i].to_bits()
            )
        })
        .collect();
    Some(format!(
        "{what}: {} of {} differ: {}",
        bad.len(),
        got.len(),
        show.join(", ")
    ))
}

/// Dequantizes the gguf-py blocks of `ty` and checks against gguf-py's and
/// ggml's outputs (and `Q8_K` against ggml only). Also checks `vec_dot`
/// against the golden values on the finite blocks.
fn check_dequant(ty: GgmlType) -> Vec<String> {
    let name = ty.name();
    let mut errs = Vec::new();
    let (blocks, refs): (Vec<u8>, Vec<(&str, Vec<f32>)>) = if ty == GgmlType::Q8K {
        (
            fixture("ggml", "Q8_K.blocks.bin"),
            vec![("ggml", f32s(&fixture("ggml", "Q8_K.f32.bin")))],
        )
    } else {
        let mut refs = vec![(
            "gguf-py",
            f32s(&fixture("gguf_py", &format!("{name}.f32.bin"))),
        )];
        if ty != GgmlType::F32 {
            refs.push(("ggml", f32s(&fixture("ggml", &format!("{name}.f32.bin")))));
        }
        (fixture("gguf_py", &format!("{name}.blocks.bin")), refs)
    };
    let n = refs[0].1.len();
    let mut got = vec![0.0f32; n];
    if let Err(e) = anedvd_quant::dequantize(ty, &blocks, &mut got) {
        return vec![format!("{name}: dequantize failed: {e}")];
    }
    for (who, want) in &refs {
        if let Some(d) = diff(&format!("{name} vs {who}"), &got, want) {
            errs.push(d);
        }
    }

    // vec_dot in groups of 256 elements against a plain in-order f32 sum over
    // the golden values (NaN/Inf blocks included: NaN-ness must agree).
    let want = &refs[0].1;
    let bs = ty.block_size() as usize;
    let bb = ty.block_bytes() as usize;
    let group = 256usize;
    let act: Vec<f32> = (0..group)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
        .collect();
    let mut finite = 0;
    for (g, w) in want.chunks_exact(group).enumerate() {
        let row = &blocks[g * group / bs * bb..(g + 1) * group / bs * bb];
        let mut expect = 0.0f32;
        for (a, b) in w.iter().zip(&act) {
            expect += a * b;
        }
        match anedvd_quant::vec_dot(ty, row, &act) {
            Ok(d) if same(d, expect) => finite += usize::from(d.is_finite()),
            Ok(d) => errs.push(format!(
                "{name}: vec_dot group {g}: got {d:e}, want {expect:e}"
            )),
            Err(e) => errs.push(format!("{name}: vec_dot failed: {e}")),
        }
    }
    if finite == 0 && ty.is_quantized() && errs.is_empty() {
        errs.push(format!("{name}: no finite group to check vec_dot on"));
    }
    errs
}

fn check_family(types: &[GgmlType]) {
    let errs: Vec<String> = types.iter().flat_map(|&t| check_dequant(t)).collect();
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

#[test]
fn golden_float_types() {
    use GgmlType::*;
    check_family(&[F32, F16, BF16]);
}

#[test]
fn golden_legacy_types() {
    use GgmlType::*;
    check_family(&[Q4_0, Q4_1, Q5_0, Q5_1, Q8_0]);
}

#[test]
fn golden_k_types() {
    use GgmlType::*;
    check_family(&[Q2K, Q3K, Q4K, Q5K, Q6K, Q8K]);
}

#[test]
fn golden_ternary_and_mxfp4_types() {
    use GgmlType::*;
    check_family(&[TQ1_0, TQ2_0, MXFP4]);
}

/// The i-quant family; implemented in src/iq/ (separate owner).
#[test]
fn golden_iq_types() {
    use GgmlType::*;
    check_family(&[IQ1S, IQ1M, IQ2XXS, IQ2XS, IQ2S, IQ3XXS, IQ3S, IQ4NL, IQ4XS]);
}

/// Quantizes `input` with `ty` and compares bytes with `want`.
fn check_quant(who: &str, ty: GgmlType, input: &[f32], want: &[u8]) -> Option<String> {
    let name = ty.name();
    let mut got = vec![0u8; want.len()];
    if let Err(e) = anedvd_quant::quantize(ty, input, &mut got) {
        return Some(format!("{name}: quantize failed: {e}"));
    }
    let bb = ty.block_bytes() as usize;
    let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
    if bad.is_empty() {
        return None;
    }
    let blocks: std::collections::BTreeSet<usize> = bad.iter().map(|i| i / bb).collect();
    let i = bad[0];
    Some(format!(
        "{name} vs {who}: {} bytes differ in blocks {blocks:?}; first at byte {i} (block {} offset {}): got {:#04x} want {:#04x}",
        bad.len(),
        i / bb,
        i % bb,
        got[i],
        want[i]
    ))
}

#[test]
fn golden_quantize_gguf_py() {
    use GgmlType::*;
    let mut errs = Vec::new();
    for ty in [F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0, MXFP4] {
        let name = ty.name();
        let input = f32s(&fixture("gguf_py", &format!("quant_{name}.in.f32.bin")));
        let want = fixture("gguf_py", &format!("quant_{name}.out.bin"));
        errs.extend(check_quant("gguf-py", ty, &input, &want));
    }
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

#[test]
fn golden_quantize_ggml() {
    use GgmlType::*;
    let input = f32s(&fixture("ggml", "quant_input.f32.bin"));
    let mut errs = Vec::new();
    for ty in [
        F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q4K, Q6K, Q8K, TQ1_0, TQ2_0, MXFP4,
    ] {
        let want = fixture("ggml", &format!("quant_{}.out.bin", ty.name()));
        errs.extend(check_quant("ggml", ty, &input, &want));
    }
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

/// The typed Q8_0 / Q8_K quantizers agree with the byte ones (and so with ggml).
#[test]
fn golden_typed_q8() {
    let input = f32s(&fixture("ggml", "quant_input.f32.bin"));
    let want = fixture("ggml", "quant_Q8_0.out.bin");
    let mut blocks = vec![anedvd_quant::BlockQ8_0::ZERO; input.len() / 32];
    anedvd_quant::quantize_row_q8_0(&input, &mut blocks).unwrap();
    let got: Vec<u8> = blocks.iter().flat_map(|b| b.to_bytes()).collect();
    assert_eq!(got, want);
    for (b, w) in blocks.iter().zip(want.chunks_exact(34)) {
        assert_eq!(
            *b,
            anedvd_quant::BlockQ8_0::from_bytes(w.try_into().unwrap())
        );
    }

    let want = fixture("ggml", "quant_Q8_K.out.bin");
    let mut blocks = vec![anedvd_quant::BlockQ8K::ZERO; input.len() / 256];
    anedvd_quant::quantize_row_q8_k(&input, &mut blocks).unwrap();
    let got: Vec<u8> = blocks.iter().flat_map(|b| b.to_bytes()).collect();
    assert_eq!(got, want);
}

/// First rows of real Gemma 3 270M tensors (Q8_0, Q5_0, Q4_K, Q6_K) against
/// gguf-py: real scale statistics rather than random bytes.
#[test]
fn golden_real_model_rows() {
    use GgmlType::*;
    let mut errs = Vec::new();
    for ty in [Q8_0, Q5_0, Q4K, Q6K] {
        let name = ty.name();
        let blocks = fixture("gguf_py", &format!("model_{name}.blocks.bin"));
        let want = f32s(&fixture("gguf_py", &format!("model_{name}.f32.bin")));
        let mut got = vec![0.0f32; want.len()];
        anedvd_quant::dequantize(ty, &blocks, &mut got).unwrap();
        errs.extend(diff(&format!("model {name} vs gguf-py"), &got, &want));
        assert!(want.iter().all(|v| v.is_finite()), "{name}");
    }
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}
