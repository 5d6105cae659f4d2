//! One hand-made bad program per ANE rule, the rule table itself, and the expected verdict for every fixture.

use std::path::Path;

use anedvd_mil::blob::{BlobLayout, BlobWriter};
use anedvd_mil::ir::Program;
use anedvd_mil::registry::RuntimePath;
use anedvd_mil::rules::{check, CompileBudget, ContestedPolicy, RuleConfig, RuleId, RULES};
use anedvd_mil::sim::{Simulator, Weights};
use anedvd_mil::{parse, Error};

fn fixture(rel: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Wraps statements into a program with fp16 input `x` of `xshape`.
fn prog(inputs: &str, body: &str, outputs: &str) -> Program {
    let src = format!(
        "program(1.3)\n{{\n func main<ios18>({inputs}) {{\n{body}\n }} -> ({outputs});\n}}\n"
    );
    parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

const X: &str = "tensor<fp16, [1, 4, 1, 32]> x";

/// The distinct rule ids violated, in table order.
fn ids(p: &Program, w: Option<&Weights>, cfg: &RuleConfig) -> Vec<RuleId> {
    let mut v: Vec<RuleId> = check(p, w, cfg).into_iter().map(|v| v.rule).collect();
    v.sort();
    v.dedup();
    v
}

fn assert_only(p: &Program, rule: RuleId) {
    assert_eq!(ids(p, None, &RuleConfig::default()), vec![rule]);
    // and the simulator refuses it with a typed error naming the rule
    // (with the one weight file the hand-made programs reference)
    let mut blob = BlobWriter::new(BlobLayout::Aligned);
    blob.add_f32_as_f16(&[0.5; 16]);
    let mut w = Weights::new();
    w.insert("@model_path/weights/w.bin", blob.finish());
    match Simulator::new(p, &w, &RuleConfig::default()) {
        Err(Error::Rule { rule: r, .. }) => assert_eq!(r, rule),
        other => panic!("expected rule {rule}, got {other:?}"),
    }
}

fn assert_clean(p: &Program) {
    assert_eq!(ids(p, None, &RuleConfig::default()), vec![]);
}

#[test]
fn rule_table_is_complete() {
    let all = [
        RuleId::UnprovenOp,
        RuleId::ContestedOp,
        RuleId::ConvBias,
        RuleId::InlineArg,
        RuleId::DanglingOutput,
        RuleId::Rank,
        RuleId::Dim,
        RuleId::SoftmaxPow2,
        RuleId::IoUniform,
        RuleId::SurfaceAlign,
        RuleId::BlobOffset,
        RuleId::CompileBudget,
    ];
    assert_eq!(RULES.len(), all.len());
    for id in all {
        let rows: Vec<_> = RULES.iter().filter(|r| r.id == id).collect();
        assert_eq!(rows.len(), 1, "{id:?}");
        assert!(rows[0].code.starts_with("ANE-") && !rows[0].description.is_empty());
        assert!(
            rows[0].source.contains("ane-spec.md §") || rows[0].source.contains("registry"),
            "{id:?} lacks a source"
        );
        assert_eq!(id.to_string(), rows[0].code);
    }
}

#[test]
fn unproven_op() {
    let body = "tensor<fp16, [1, 4, 1, 32]> y = real_div(x = x, y = x)[name = string(\"y\")];";
    let p = prog(X, body, "y");
    assert_only(&p, RuleId::UnprovenOp);
    let cfg = RuleConfig {
        extra_ops: vec!["real_div".into()],
        ..RuleConfig::default()
    };
    assert_eq!(ids(&p, None, &cfg), vec![]);
    assert_clean(&prog(X, &body.replace("real_div", "mul"), "y"));
}

const CONV_PARAMS: &str = r#"
 string pt = const()[name = string("pt"), val = string("valid")];
 tensor<int32, [2]> st = const()[name = string("st"), val = tensor<int32, [2]>([1, 1])];
 tensor<int32, [4]> pd = const()[name = string("pd"), val = tensor<int32, [4]>([0, 0, 0, 0])];
 tensor<int32, [2]> dl = const()[name = string("dl"), val = tensor<int32, [2]>([1, 1])];
 int32 gr = const()[name = string("gr"), val = int32(1)];
 tensor<fp16, [4, 4, 1, 1]> w = const()[name = string("w"), val = tensor<fp16, [4, 4, 1, 1]>(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(64)))];
 tensor<fp16, [4]> b = const()[name = string("b"), val = tensor<fp16, [4]>([1.0, 2.0, 3.0, 4.0])];
"#;

#[test]
fn conv_bias() {
    let conv = "tensor<fp16, [1, 4, 1, 32]> y = conv(BIAS dilations = dl, groups = gr, pad = pd, pad_type = pt, strides = st, weight = w, x = x)[name = string(\"y\")];";
    assert_only(
        &prog(
            X,
            &format!("{CONV_PARAMS}{}", conv.replace("BIAS", "bias = b,")),
            "y",
        ),
        RuleId::ConvBias,
    );
    assert_clean(&prog(
        X,
        &format!("{CONV_PARAMS}{}", conv.replace("BIAS", "")),
        "y",
    ));
}

#[test]
fn inline_args() {
    use RuleId::{ContestedOp as C, InlineArg as I};
    let x = "tensor<fp16, [1, 1, 32, 32]> x";
    let named = "bool f = const()[name = string(\"f\"), val = bool(false)];\n tensor<fp16, [1, 1, 32, 32]> y = matmul(transpose_x = f, transpose_y = f, x = x, y = x)[name = string(\"y\")];";
    // matmul itself is contested on the in-memory path (ANEDVD: 0x1d at eval)
    assert_eq!(
        ids(&prog(x, named, "y"), None, &RuleConfig::default()),
        vec![C]
    );
    let e5rt = RuleConfig {
        path: RuntimePath::E5rt,
        ..RuleConfig::default()
    };
    for inline in ["false", "bool(false)"] {
        let body = format!("tensor<fp16, [1, 1, 32, 32]> y = matmul(transpose_x = {inline}, transpose_y = {inline}, x = x, y = x)[name = string(\"y\")];");
        let mut p = prog(x, &body, "y");
        assert_eq!(ids(&p, None, &RuleConfig::default()), vec![C, I]);
        match Simulator::new(&p, &Weights::new(), &RuleConfig::default()) {
            Err(Error::Rule { rule, .. }) => assert_eq!(rule, I),
            other => panic!("expected ANE-INLINE-ARG, got {other:?}"),
        }
        // ANEForge writes matmul's flags inline on e5rt (registry matmul[inline-literal-args])
        assert_eq!(ids(&p, None, &e5rt), vec![]);
        // hoisting the literals into named consts satisfies the rule
        assert_eq!(p.hoist_inline_args(), 2);
        assert_eq!(ids(&p, None, &RuleConfig::default()), vec![C]);
        assert!(anedvd_mil::print(&p).contains("bool y_transpose_x = const()"));
    }
}

/// Ops are checked against the path the program will run on.
#[test]
fn ops_follow_the_paths_registry() {
    let e5rt = RuleConfig {
        path: RuntimePath::E5rt,
        ..RuleConfig::default()
    };
    let unary = |op: &str| {
        prog(
            X,
            &format!("tensor<fp16, [1, 4, 1, 32]> y = {op}(x = x)[name = string(\"y\")];"),
            "y",
        )
    };
    // rsqrt: rejected by ANECCompile in ANEDVD and the Espresso blog; correct on e5rt
    // (it takes an epsilon, which is optional in MIL).
    assert_eq!(
        ids(&unary("rsqrt"), None, &RuleConfig::default()),
        vec![RuleId::UnprovenOp]
    );
    assert_eq!(ids(&unary("rsqrt"), None, &e5rt), vec![]);
    // acos: no native lowering on e5rt; no evidence on the in-memory path
    let detail = |cfg: &RuleConfig| check(&unary("acos"), None, cfg)[0].detail.clone();
    assert!(
        detail(&e5rt).contains("rejected on the e5rt path"),
        "{}",
        detail(&e5rt)
    );
    assert!(detail(&RuleConfig::default()).contains("no evidence on the inmem path"));
    // not a MIL op at all
    let d = check(&unary("frobnicate"), None, &e5rt)[0].detail.clone();
    assert!(d.contains("not an op of the iOS18 MIL opset"), "{d}");
    // surfaces belong to the in-memory path
    let uneven = prog(
        "tensor<fp16, [1, 4, 1, 16]> x, tensor<fp16, [1, 8, 1, 32]> z",
        "tensor<fp16, [1, 4, 1, 16]> y = relu(x = x)[name = string(\"y\")];",
        "y",
    );
    assert_eq!(
        ids(&uneven, None, &RuleConfig::default()),
        vec![RuleId::IoUniform, RuleId::SurfaceAlign]
    );
    assert_eq!(ids(&uneven, None, &e5rt), vec![]);
}

/// A contested op is listed by `check`, passes `enforce` by default and is
/// refused under `ContestedPolicy::Refuse`.
#[test]
fn contested_ops_are_reported_never_assumed() {
    let body = "int32 ax = const()[name = string(\"ax\"), val = int32(1)];\n bool il = const()[name = string(\"il\"), val = bool(false)];\n tensor<fp16, [1, 8, 1, 32]> y = concat(axis = ax, interleave = il, values = (x, x))[name = string(\"y\")];";
    let p = prog(X, body, "y");
    let found = check(&p, None, &RuleConfig::default());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].rule, RuleId::ContestedOp);
    assert!(
        found[0].detail.contains("ORI rejected"),
        "{}",
        found[0].detail
    );
    assert!(
        found[0].detail.contains("MDX ESP works"),
        "{}",
        found[0].detail
    );
    let w = Weights::new();
    assert!(Simulator::new(&p, &w, &RuleConfig::default()).is_ok());
    let strict = RuleConfig {
        contested: ContestedPolicy::Refuse,
        ..RuleConfig::default()
    };
    match Simulator::new(&p, &w, &strict) {
        Err(Error::Rule { rule, .. }) => assert_eq!(rule, RuleId::ContestedOp),
        other => panic!("expected ANE-OP-CONTESTED, got {other:?}"),
    }
    // on e5rt concat is reachable+correct (relerr 0.0)
    let e5rt = RuleConfig {
        path: RuntimePath::E5rt,
        ..RuleConfig::default()
    };
    assert!(check(&p, None, &e5rt).is_empty());
}

#[test]
fn dangling_output() {
    let body = "tensor<fp16, [1, 4, 1, 32]> y = relu(x = x)[name = string(\"y\")];";
    assert_only(&prog(X, body, "y_typo"), RuleId::DanglingOutput);
    assert_clean(&prog(X, body, "y"));
}

#[test]
fn rank_limit() {
    let x6 = "tensor<fp16, [1, 1, 1, 1, 4, 32]> x";
    let body = "tensor<fp16, [1, 1, 1, 1, 4, 32]> y = relu(x = x)[name = string(\"y\")];";
    assert_only(&prog(x6, body, "y"), RuleId::Rank);
    assert_clean(&prog(
        &x6.replace("1, 1, 1, 1,", "1, 1, 1,"),
        &body.replace("1, 1, 1, 1,", "1, 1, 1,"),
        "y",
    ));
}

#[test]
fn dim_limit() {
    let x = "tensor<fp16, [1, 70000, 1, 32]> x";
    let body = "tensor<fp16, [1, 70000, 1, 32]> y = relu(x = x)[name = string(\"y\")];";
    assert_only(&prog(x, body, "y"), RuleId::Dim);
    assert_clean(&prog(
        &x.replace("70000", "65536"),
        &body.replace("70000", "65536"),
        "y",
    ));
}

#[test]
fn softmax_power_of_two() {
    let x = "tensor<fp16, [1, 1, 48, 32]> x";
    let body = "int32 ax = const()[name = string(\"ax\"), val = int32(2)];\n tensor<fp16, [1, 1, 48, 32]> y = softmax(axis = ax, x = x)[name = string(\"y\")];";
    assert_only(&prog(x, body, "y"), RuleId::SoftmaxPow2);
    // the same tensor over the last axis (32) is fine
    assert_clean(&prog(x, &body.replace("int32(2)", "int32(-1)"), "y"));
}

#[test]
fn io_sizes_uniform() {
    let inputs = "tensor<fp16, [1, 4, 1, 32]> x, tensor<fp16, [1, 8, 1, 32]> z";
    let body = "tensor<fp16, [1, 4, 1, 32]> y = relu(x = x)[name = string(\"y\")];";
    assert_only(&prog(inputs, body, "y"), RuleId::IoUniform);
    assert_clean(&prog(
        &inputs.replace("[1, 8, 1, 32]", "[1, 2, 1, 64]"),
        body,
        "y",
    ));
    let cfg = RuleConfig {
        waived: vec![RuleId::IoUniform],
        ..RuleConfig::default()
    };
    assert_eq!(ids(&prog(inputs, body, "y"), None, &cfg), vec![]);
}

#[test]
fn flat_surface_rows_are_64_bytes() {
    let body = "tensor<fp16, [1, 4, 1, 16]> y = relu(x = x)[name = string(\"y\")];";
    let p = prog("tensor<fp16, [1, 4, 1, 16]> x", body, "y");
    assert_only(&p, RuleId::SurfaceAlign);
    let cfg = RuleConfig {
        surface: anedvd_mil::rules::SurfaceStyle::Strided,
        ..RuleConfig::default()
    };
    assert_eq!(ids(&p, None, &cfg), vec![]);
    // 16 fp32 values are 64 bytes
    assert_clean(&prog(
        "tensor<fp32, [1, 4, 1, 16]> x",
        &body.replace("fp16", "fp32"),
        "y",
    ));
}

#[test]
fn blob_offset_points_at_metadata() {
    let src = String::from_utf8(fixture("generated/swiglu_ffn.mil")).unwrap_or_default();
    let mut w = Weights::new();
    w.insert(
        "@model_path/weights/weight.bin",
        fixture("generated/swiglu_ffn.weights.bin"),
    );
    let cfg = RuleConfig {
        surface: anedvd_mil::rules::SurfaceStyle::Strided,
        ..RuleConfig::default()
    };
    let good = parse(&src).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ids(&good, Some(&w), &cfg), vec![]);
    for bad in [
        src.replace("offset = uint64(192)", "offset = uint64(256)"), // the payload, not the block (ORI #8)
        src.replace("offset = uint64(64)", "offset = uint64(0)"),    // the file header
        src.replace("offset = uint64(320)", "offset = uint64(4096)"), // past the end
        src.replace(
            "@model_path/weights/weight.bin\"), offset = uint64(64)",
            "weights/weight.bin\"), offset = uint64(64)",
        ),
        src.replace(
            "tensor<fp16, [4, 6, 1, 1]>(BLOBFILE",
            "tensor<fp16, [4, 5, 1, 1]>(BLOBFILE",
        )
        .replace(
            "tensor<fp16, [4, 6, 1, 1]> w_down",
            "tensor<fp16, [4, 5, 1, 1]> w_down",
        ),
    ] {
        let p = parse(&bad).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ids(&p, Some(&w), &cfg), vec![RuleId::BlobOffset], "{bad}");
        match Simulator::new(&p, &w, &cfg) {
            Err(Error::Rule {
                rule: RuleId::BlobOffset,
                ..
            }) => {}
            other => panic!("expected ANE-BLOB-OFFSET, got {other:?}"),
        }
    }
}

#[test]
fn compile_budget() {
    let mut b = CompileBudget::default();
    for _ in 0..CompileBudget::OBSERVED_LIMIT {
        assert!(b.charge().is_ok());
    }
    assert_eq!(b.remaining(), 0);
    assert_eq!(
        b.charge().err().and_then(|e| e.rule()),
        Some(RuleId::CompileBudget)
    );
    assert_eq!(b.used(), 119);
    let mut safe = CompileBudget::new(CompileBudget::SAFE_LIMIT);
    let ok = (0..150).filter(|_| safe.charge().is_ok()).count();
    assert_eq!(ok, 100);
}

/// Expected verdict of every fixture under the default config (flat surfaces,
/// no padding). Reasons:
/// * SURFACE-ALIGN: the tiny generator-parity shapes (`S = 2`, fixtures/SOURCES.md:
///   "not all of them are proven to compile"), `[1, 10]` coremltools I/O, and the
///   `S = 1` classifier (ane-spec.md §6.2, Orion #4).
/// * IO-UNIFORM: decode kernels whose KV caches / logits differ in size from
///   `x` — valid only if the runtime pads surfaces to the largest (§6.4).
/// * OP-CONTESTED: `matmul` (ANEDVD: 0x1d at eval) and `concat` (Orion:
///   ANECCompile fails) on the in-memory path (`anedvd ops --path inmem`).
/// * everything else (the `[1, C, 1, 32/256]` trunk kernels) passes.
#[test]
fn fixture_verdicts() {
    use RuleId::{ContestedOp as C, IoUniform as U, SurfaceAlign as A};
    let expected: [(&str, &[RuleId]); 32] = [
        ("coremltools/add_model.model.mil", &[A]),
        ("espresso/DecodeAttentionQKVGenerator.mil", &[U]),
        ("espresso/DecodeFFNGenerator.mil", &[]),
        ("espresso/DecodeQKVOnlyGenerator.mil", &[]),
        ("espresso/FFNForwardInferenceGenerator.mil", &[]),
        (
            "espresso/FactoredGenerationRMSNormClassifierGenerator.mil",
            &[],
        ),
        ("espresso/FusedDecodeLayerGenerator.mil", &[U]),
        ("espresso/FusedTwoLayerDecodeGenerator.mil", &[C, U]),
        ("espresso/GenerationClassifierGenerator.mil", &[A]),
        ("espresso/GenerationRMSNormClassifierGenerator.mil", &[U]),
        ("espresso/GenerationRMSNormProjectionGenerator.mil", &[]),
        (
            "espresso/RWKVStyleFusedThreeLayerFactoredClassifierGenerator.mil",
            &[U],
        ),
        (
            "espresso/RWKVStyleFusedThreeLayerRMSNormClassifierGenerator.mil",
            &[U],
        ),
        ("espresso/RWKVStyleFusedThreeLayerStepGenerator.mil", &[]),
        ("espresso/RWKVStyleFusedThreeLayerTwoStepGenerator.mil", &[]),
        ("espresso/RWKVStyleFusedTwoLayerStepGenerator.mil", &[]),
        ("espresso/RWKVStyleFusedTwoLayerTwoStepGenerator.mil", &[]),
        ("espresso/RWKVStyleRecurrentStepGenerator.mil", &[]),
        ("espresso/RWKVStyleTwoStepRecurrentGenerator.mil", &[]),
        ("espresso/SDPAForwardInferenceGenerator.mil", &[C]),
        ("espresso/conv.mil", &[A]),
        ("espresso/ffn_bwd.mil", &[C]),
        ("espresso/ffn_fwd_taps.mil", &[C]),
        ("espresso/fused_ffn.mil", &[A]),
        ("espresso/fused_qkv.mil", &[A]),
        ("espresso/matmul.mil", &[C, U, A]),
        ("espresso/qkvb.mil", &[]),
        ("espresso/sdpa_bwd1.mil", &[C]),
        ("espresso/sdpa_bwd2.mil", &[C]),
        ("espresso/sdpa_fwd_taps.mil", &[C]),
        ("generated/ffn_up_aligned.mil", &[A]),
        ("generated/swiglu_ffn.mil", &[A]),
    ];
    for (file, want) in expected {
        let p = parse(&String::from_utf8(fixture(file)).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut want = want.to_vec();
        want.sort();
        assert_eq!(ids(&p, None, &RuleConfig::default()), want, "{file}");
    }
}

/// ANEForge's concat "expects exactly 2 inputs" on e5rt; Espresso's blog
/// tested 12+ on the in-memory path, where concat itself is contested.
#[test]
fn concat_arity_follows_the_path() {
    let body = "int32 ax = const()[name = string(\"ax\"), val = int32(1)];\n bool il = const()[name = string(\"il\"), val = bool(false)];\n tensor<fp16, [1, 12, 1, 32]> y = concat(axis = ax, interleave = il, values = (x, x, x))[name = string(\"y\")];";
    let p = prog(X, body, "y");
    let e5rt = RuleConfig {
        path: RuntimePath::E5rt,
        ..RuleConfig::default()
    };
    assert_eq!(ids(&p, None, &e5rt), vec![RuleId::UnprovenOp]);
    assert_eq!(
        ids(&p, None, &RuleConfig::default()),
        vec![RuleId::ContestedOp]
    );
}
