//! Compressed weights (constexpr ops) in the builder, the rule check and the
//! simulator, against coremltools' own decompression
//! (scripts/fixtures/gen_constexpr_ref.py).
#![allow(clippy::unwrap_used)]

use std::path::Path;

use anedvd_mil::builder::{program, FunctionBuilder};
use anedvd_mil::ir::{BlobRef, DType, TensorType};
use anedvd_mil::registry::RuntimePath;
use anedvd_mil::rules::{check, RuleConfig, RuleId};
use anedvd_mil::sim::{Simulator, Tensor, Weights};

const PATH: &str = "@model_path/weights/weight.bin";

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/coremltools-written")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn blob(dtype: DType, shape: &[usize], offset: &serde_json::Value) -> BlobRef {
    BlobRef {
        ty: TensorType::new(dtype, shape),
        path: PATH.into(),
        offset: offset.as_u64().unwrap(),
    }
}

fn shape(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect()
}

#[test]
fn constexpr_ops_decompress_as_coremltools_does() {
    let spec: serde_json::Value = serde_json::from_slice(&fixture("constexpr.json")).unwrap();
    let mut weights = Weights::new();
    weights.insert(PATH, fixture("constexpr.bin"));
    let e5rt = RuleConfig {
        path: RuntimePath::E5rt,
        ..RuleConfig::default()
    };
    for case in spec["cases"].as_array().unwrap() {
        let s = shape(&case["shape"]);
        let mut b = FunctionBuilder::new("main");
        let x = b.input("x", DType::Fp16, &s).unwrap();
        let w = match case["op"].as_str().unwrap() {
            "constexpr_affine_dequantize" => b
                .constexpr_affine_dequantize(
                    "w",
                    blob(DType::Int8, &s, &case["quantized_data"]),
                    blob(DType::Fp16, &[s[0]], &case["scale"]),
                    0,
                )
                .unwrap(),
            _ => {
                let dtype = DType::from_name(&format!("uint{}", case["bits"])).unwrap();
                let indices = blob(dtype, &s, &case["indices"]);
                let lut = blob(DType::Fp16, &shape(&case["lut_shape"]), &case["lut"]);
                b.constexpr_lut_to_dense("w", indices, lut).unwrap()
            }
        };
        let y = b.add("y", &x, &w).unwrap();
        b.output(&y);
        let p = program(vec![b.finish()]);
        // the text round trip keeps the form coremltools writes: iOS16's
        // affine op with attribute operands, iOS18's lut op with inputs
        let text = anedvd_mil::print(&p);
        let form = match case["op"].as_str().unwrap() {
            "constexpr_affine_dequantize" => "constexpr_affine_dequantize()[",
            _ => "constexpr_lut_to_dense(indices = tensor<uint",
        };
        assert!(text.contains(form), "{text}");
        assert_eq!(anedvd_mil::parse(&text).unwrap(), p);
        assert_eq!(check(&p, Some(&weights), &e5rt), vec![], "{}", case["op"]);
        let n: usize = s.iter().product();
        let zeros = Tensor::f16(&s, &vec![0.0; n]).unwrap();
        let got = Simulator::new(&p, &weights, &e5rt)
            .unwrap()
            .run("main", &[("x", zeros)])
            .unwrap();
        let want: Vec<f32> = case["expected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(got[0].1.to_f32(), want, "{}", case["op"]);
    }
}

#[test]
fn compressed_weights_are_checked_against_the_path() {
    let spec: serde_json::Value = serde_json::from_slice(&fixture("constexpr.json")).unwrap();
    let mut weights = Weights::new();
    weights.insert(PATH, fixture("constexpr.bin"));
    let lut_case = &spec["cases"][1];
    let s = shape(&lut_case["shape"]);
    let build = |lut_offset: &serde_json::Value| {
        let mut b = FunctionBuilder::new("main");
        let x = b.input("x", DType::Fp16, &[1, 5, 1, 32]).unwrap();
        let w = b
            .constexpr_lut_to_dense(
                "w",
                blob(DType::UInt4, &s, &lut_case["indices"]),
                blob(DType::Fp16, &shape(&lut_case["lut_shape"]), lut_offset),
            )
            .unwrap();
        let y = b.conv("y", &x, &w).unwrap();
        b.output(&y);
        program(vec![b.finish()])
    };
    let p = build(&lut_case["lut"]);
    // no evidence for palettized weights on the in-memory path
    let inmem: Vec<RuleId> = check(&p, Some(&weights), &RuleConfig::default())
        .into_iter()
        .map(|v| v.rule)
        .collect();
    assert_eq!(inmem, vec![RuleId::UnprovenOp]);
    // a BLOBFILE operand at the wrong offset is caught like a const's
    let wrong = build(&lut_case["indices"]);
    let e5rt = RuleConfig {
        path: RuntimePath::E5rt,
        ..RuleConfig::default()
    };
    let v = check(&wrong, Some(&weights), &e5rt);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].rule, RuleId::BlobOffset);
}
