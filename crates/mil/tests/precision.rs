//! The precision rules: each quote is in the evidence doc, and each rule the
//! simulator models changes its numbers as the evidence says.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use anedvd_mil::precision::{lint, PrecisionModel, PRECISION_RULES};
use anedvd_mil::rules::RuleConfig;
use anedvd_mil::sim::{Simulator, Tensor, Weights};
use anedvd_mil::{parse, Error};

fn prog(inputs: &str, body: &str, out: &str) -> anedvd_mil::ir::Program {
    let src =
        format!("program(1.3)\n{{\n func main<ios18>({inputs}) {{\n{body}\n }} -> ({out});\n}}\n");
    parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn run(p: &anedvd_mil::ir::Program, m: PrecisionModel, x: Tensor) -> anedvd_mil::Result<Vec<f32>> {
    let w = Weights::new();
    let sim = Simulator::new_unchecked(p, &w).with_precision(m);
    Ok(sim.run("main", &[("x", x)])?[0].1.to_f32())
}

#[test]
fn every_rule_quotes_the_evidence_doc() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/docs/ane-evidence.md");
    let Ok(doc) = std::fs::read_to_string(&doc) else {
        eprintln!("skipped: ../shared is absent");
        return;
    };
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    for r in &PRECISION_RULES {
        assert!(
            squash(&doc).contains(&squash(r.quote)),
            "{}: {}",
            r.code,
            r.quote
        );
        assert!(r.code.starts_with("PREC-") && !r.source.is_empty());
    }
}

/// F-NU: "A sum (or dot) of 16384 ones is bit-exact, where naive fp16
/// saturation of the running sum stalls at ~2048."
#[test]
fn reduce_sum_accumulates_narrow_matmul_wide() {
    let n = 16384;
    let x = Tensor::f16(&[1, n], &vec![1.0; n]).unwrap();
    let sum = prog(
        &format!("tensor<fp16, [1, {n}]> x"),
        "tensor<int32, [1]> ax = const()[name = string(\"ax\"), val = tensor<int32, [1]>([1])];\n\
         bool kd = const()[name = string(\"kd\"), val = bool(true)];\n\
         tensor<fp16, [1, 1]> y = reduce_sum(axes = ax, keep_dims = kd, x = x)[name = string(\"y\")];",
        "y",
    );
    assert_eq!(
        run(&sum, PrecisionModel::ane(), x.clone()).unwrap(),
        vec![2048.0]
    );
    assert_eq!(
        run(&sum, PrecisionModel::ideal(), x.clone()).unwrap(),
        vec![16384.0]
    );
    let dot = prog(
        &format!("tensor<fp16, [1, {n}]> x"),
        &format!(
            "bool f = const()[name = string(\"f\"), val = bool(false)];\n\
             tensor<fp16, [{n}, 1]> ones = const()[name = string(\"ones\"), val = tensor<fp16, [{n}, 1]>([{}])];\n\
             tensor<fp16, [1, 1]> y = matmul(transpose_x = f, transpose_y = f, x = x, y = ones)[name = string(\"y\")];",
            vec!["[1]"; n].join(", ")
        ),
        "y",
    );
    assert_eq!(run(&dot, PrecisionModel::ane(), x).unwrap(), vec![16384.0]);
    assert_eq!(lint(&sum).len(), 1);
    assert_eq!(lint(&sum)[0].code, "PREC-NARROW-REDUCE-SUM");
    assert!(lint(&dot).is_empty());
}

/// F-NC: a matmul output becomes ±inf near 32752 whatever K is.
#[test]
fn matmul_outputs_saturate_at_32752() {
    let p = prog(
        "tensor<fp16, [1, 2]> x",
        "bool f = const()[name = string(\"f\"), val = bool(false)];\n\
         tensor<fp16, [2, 1]> w = const()[name = string(\"w\"), val = tensor<fp16, [2, 1]>([[1], [1]])];\n\
         tensor<fp16, [1, 1]> y = matmul(transpose_x = f, transpose_y = f, x = x, y = w)[name = string(\"y\")];",
        "y",
    );
    let at = |a: f32, b: f32, m| run(&p, m, Tensor::f16(&[1, 2], &[a, b]).unwrap()).unwrap()[0];
    // 32736 is the largest fp16 value below the cliff (spacing 16 there).
    assert_eq!(at(16368.0, 16368.0, PrecisionModel::ane()), 32736.0);
    assert_eq!(at(16376.0, 16376.0, PrecisionModel::ane()), f32::INFINITY);
    assert_eq!(
        at(-16376.0, -16376.0, PrecisionModel::ane()),
        f32::NEG_INFINITY
    );
    assert_eq!(at(16376.0, 16376.0, PrecisionModel::ideal()), 32752.0);
}

/// F-FAQ: NaN is not propagated, so a NaN born in the simulation is refused.
#[test]
fn new_nan_is_refused_but_an_input_nan_passes() {
    let p = prog(
        "tensor<fp16, [1, 2]> x",
        "tensor<fp16, [1, 2]> y = mul(x = x, y = x)[name = string(\"y\")];\n\
         fp16 z0 = const()[name = string(\"z0\"), val = fp16(0)];\n\
         tensor<fp16, [1, 2]> z = mul(x = y, y = z0)[name = string(\"z\")];",
        "z",
    );
    let inf = Tensor::f16(&[1, 2], &[1000.0, 1.0]).unwrap(); // 1000² overflows fp16
    match run(&p, PrecisionModel::ane(), inf.clone()) {
        Err(Error::Semantic {
            location,
            msg: message,
        }) => {
            assert_eq!(location, "main/z");
            assert!(message.contains("PREC-NO-NAN"), "{message}");
        }
        other => panic!("expected PREC-NO-NAN, got {other:?}"),
    }
    assert!(run(&p, PrecisionModel::ideal(), inf).unwrap()[0].is_nan());
    let nan_in = Tensor::f16(&[1, 2], &[f32::NAN, 1.0]).unwrap();
    assert!(run(&p, PrecisionModel::ane(), nan_in).unwrap()[0].is_nan());
}

#[test]
fn simulator_defaults_to_the_measured_hardware() {
    let p = prog(
        "tensor<fp16, [1, 4, 1, 32]> x",
        "tensor<fp16, [1, 4, 1, 32]> y = silu(x = x)[name = string(\"y\")];",
        "y",
    );
    assert_eq!(lint(&p)[0].code, "PREC-SILU-NATIVE");
    assert_eq!(PrecisionModel::default(), PrecisionModel::ane());
    // `silu` is also refused by the rule check on the in-memory path.
    assert!(Simulator::new(&p, &Weights::new(), &RuleConfig::default()).is_err());
}
