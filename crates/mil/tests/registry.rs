//! The capability registry against the evidence it is derived from.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use anedvd_mil::registry::{claims_text, registry, Registry, RuntimePath, Status};

const INMEM: RuntimePath = RuntimePath::InMemory;
const E5RT: RuntimePath = RuntimePath::E5rt;

fn shared() -> Option<std::path::PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!("skipped: ../shared is absent (the evidence copies are checked where it exists)");
        None
    }
}

fn evidence_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("evidence")
}

#[test]
fn evidence_copies_equal_shared() {
    let Some(shared) = shared() else { return };
    let src = shared.join("fixtures/ane-evidence");
    for name in [
        "aneforge-mil-sweep.tsv",
        "aneforge-capabilities.tsv",
        "anedvd-zig-mil/01_qkv_h64_w128.mil",
        "anedvd-zig-mil/02_o_h64_w128.mil",
        "anedvd-zig-mil/03_ffn_fused_h64_i128_w128.mil",
        "anedvd-zig-mil/04a_ffn_split_gate_up_h64_i128_w128.mil",
        "anedvd-zig-mil/04b_ffn_split_down_i128_h64_w128.mil",
        "anedvd-zig-mil/05_lm_head_h64_v256_w1.mil",
        "anedvd-zig-mil/06_legacy_width1_qkv_h64.mil",
    ] {
        let ours = std::fs::read(evidence_dir().join(name)).unwrap();
        let theirs = std::fs::read(src.join(name)).unwrap();
        assert!(
            ours == theirs,
            "crates/mil/evidence/{name} differs from shared/"
        );
    }
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every transcribed claim quotes its doc verbatim (up to line breaks).
#[test]
fn every_claim_quotes_its_doc() {
    let Some(shared) = shared() else { return };
    let mut checked = 0;
    for line in claims_text()
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .skip(1)
    {
        let f: Vec<&str> = line.split('\t').collect();
        let doc = std::fs::read_to_string(shared.join("docs").join(f[6])).unwrap();
        assert!(
            squash(&doc).contains(&squash(f[7])),
            "claims.tsv: quote for {} not found in {}: {}",
            f[0],
            f[6],
            f[7]
        );
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} claims");
}

/// Statuses the evidence docs state in words (ane-evidence.md §a, ane-spec.md §3).
#[test]
fn statuses_match_what_the_docs_say() {
    let r = registry().unwrap();
    let relerr = |op: &str, path| match r.status(op, None, path) {
        Status::Correct { relerr } => relerr,
        other => panic!("{op} on {path}: {other}"),
    };
    // "matmul | ... | reachable+correct, relerr 3e-4 [F-SW]" vs ANEDVD's 0x1d at eval.
    assert_eq!(relerr("matmul", E5RT), Some(3e-4));
    assert_eq!(r.status("matmul", None, INMEM), Status::Contested);
    // "`rsqrt`, `reduce_mean`, `concat`, `gelu`": rejected by ANECCompile (ANEDVD)
    // vs all reachable+correct on e5rt (rsqrt 1.04e-3, reduce_mean 8e-4, concat 0.0).
    assert_eq!(r.status("rsqrt", None, INMEM), Status::Rejected);
    assert_eq!(relerr("rsqrt", E5RT), Some(1.04e-3));
    assert_eq!(relerr("reduce_mean", E5RT), Some(8e-4));
    assert_eq!(r.status("reduce_mean", None, INMEM), Status::Contested);
    assert_eq!(r.status("concat", None, INMEM), Status::Contested);
    assert_eq!(r.status("gelu", None, INMEM), Status::Rejected);
    // conv agrees on both paths; ANEDVD's per-kernel error bound.
    assert_eq!(relerr("conv", INMEM), Some(4.7e-4));
    assert_eq!(relerr("conv", E5RT), Some(2.8e-4));
    // silu: native ~1% off on e5rt; needs decomposition on the in-memory path.
    assert_eq!(relerr("silu", E5RT), Some(9.97e-3));
    assert_eq!(r.status("silu", None, INMEM), Status::Rejected);
    // cast: the sweep says not implemented, ANEForge's own compile emits it.
    assert_eq!(r.status("cast", None, E5RT), Status::Contested);
    // int8 weights: contested on the in-memory path, correct on e5rt (5e-4).
    assert_eq!(
        r.status("constexpr_affine_dequantize", None, INMEM),
        Status::Contested
    );
    assert_eq!(relerr("constexpr_affine_dequantize", E5RT), Some(5e-4));
    // "no native lowering (mask 0x4): gather*, scatter*, one_hot, cumsum, ..."
    for op in [
        "gather",
        "scatter_nd",
        "one_hot",
        "cumsum",
        "reduce_argmax",
        "slice_update",
    ] {
        assert_eq!(r.status(op, None, E5RT), Status::Rejected, "{op}");
    }
    // "compile-walled": argsort, cond, while_loop, read_state ...
    for op in ["argsort", "cond", "while_loop", "read_state", "identity"] {
        assert_eq!(r.status(op, None, E5RT), Status::Rejected, "{op}");
    }
    // Reachable but never numerically checked.
    assert_eq!(r.status("equal", None, E5RT), Status::Reachable);
    // Only ANEForge lists real_div: nothing about the in-memory path.
    assert_eq!(r.status("real_div", None, INMEM), Status::Untested);
    // Spellings.
    assert_eq!(r.status("conv", Some("bias"), INMEM), Status::Rejected);
    assert_eq!(
        r.status("matmul", Some("inline-literal-args"), INMEM),
        Status::Rejected
    );
    assert!(r
        .status("matmul", Some("inline-literal-args"), E5RT)
        .usable());
    assert_eq!(
        r.status("scaled_dot_product_attention", Some("attn_mask"), INMEM),
        Status::Rejected
    );
}

/// The sweep's class totals survive into the registry (97 / 19 / 36 / 14).
#[test]
fn every_sweep_row_is_evidence() {
    let r = registry().unwrap();
    let sweep = std::fs::read_to_string(evidence_dir().join("aneforge-mil-sweep.tsv")).unwrap();
    let mut by_class = std::collections::BTreeMap::<&str, usize>::new();
    for line in sweep.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        *by_class.entry(f[5]).or_default() += 1;
        let (op, variant) = match f[0].strip_prefix("gelu_") {
            Some(mode) => (
                "gelu",
                Some(match mode {
                    "exact" => "mode=EXACT",
                    "sigmoid_approx" => "mode=SIGMOID_APPROXIMATION",
                    _ => "mode=TANH_APPROXIMATION",
                }),
            ),
            None => (f[0], None),
        };
        let entry = r
            .entry(op, variant)
            .unwrap_or_else(|| panic!("{} missing", f[0]));
        assert!(
            entry.evidence.iter().any(|e| e.source == "F-SW"),
            "{}",
            f[0]
        );
        let st = entry.status(E5RT);
        match f[5] {
            "reachable+correct" | "reachable" => {
                assert!(st.usable() || st == Status::Contested, "{}: {st}", f[0])
            }
            _ => assert!(!st.usable(), "{}: {st}", f[0]),
        }
    }
    assert_eq!(by_class["reachable+correct"], 97);
    assert_eq!(by_class["reachable"], 19);
    assert_eq!(by_class["not-implemented-on-ANE"], 36);
    assert_eq!(by_class["compile-walled"], 14);
}

#[test]
fn malformed_evidence_is_refused_with_file_and_line() {
    let ops = "abs\nadd\n";
    let sweep_hdr = "op\tcompile\trun\tcorrect\trelerr\tklass\tfamily\n";
    let census_hdr = "name\tstatus\troute\tfrontend\tverified\tevidence\tnotes\n";
    let claims_hdr = "op\tvariant\tpath\toutcome\trelerr\tsource\tdoc\tquote\n";
    let build = |sweep: &str, claims: &str| {
        Registry::from_sources(
            &format!("{sweep_hdr}{sweep}"),
            census_hdr,
            &format!("{claims_hdr}{claims}"),
            ops,
            &[],
        )
    };
    assert!(build("abs\ttrue\ttrue\ttrue\t0.0\treachable+correct\tx\n", "").is_ok());
    let e = build("abs\ttrue\ttrue\n", "").unwrap_err();
    assert!(e.contains("aneforge-mil-sweep.tsv line 2"), "{e}");
    let e = build("abs\ttrue\ttrue\ttrue\t0.0\tsometimes\tx\n", "").unwrap_err();
    assert!(e.contains("unknown klass `sometimes`"), "{e}");
    let e = build("", "abs\t\tmars\tworks\t\tX\td\tq\n").unwrap_err();
    assert!(e.contains("claims.tsv line 2: unknown path"), "{e}");
    let e = build("", "abs\t\tinmem\tworks\tlots\tX\td\tq\n").unwrap_err();
    assert!(e.contains("bad relerr"), "{e}");
    let e = build("", "frobnicate\t\tinmem\tworks\t\tX\td\tq\n").unwrap_err();
    assert!(
        e.contains("`frobnicate`") && e.contains("not a MIL op"),
        "{e}"
    );
}

#[test]
fn contested_combines_positive_and_negative_sources() {
    let r = Registry::from_sources(
        "op\tcompile\trun\tcorrect\trelerr\tklass\tfamily\n",
        "name\tstatus\troute\tfrontend\tverified\tevidence\tnotes\n",
        "op\tvariant\tpath\toutcome\trelerr\tsource\tdoc\tquote\n\
         abs\t\tinmem\tworks\t0.01\tA\td\tq\n\
         abs\t\tinmem\tworks\t0.002\tB\td\tq\n\
         add\t\tinmem\treachable\t\tA\td\tq\n\
         add\t\tinmem\twrong-results\t\tB\td\tq\n",
        "abs\nadd\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        r.status("abs", None, INMEM),
        Status::Correct {
            relerr: Some(0.002)
        }
    );
    assert_eq!(r.status("abs", None, E5RT), Status::Untested);
    assert_eq!(r.status("add", None, INMEM), Status::Contested);
}
