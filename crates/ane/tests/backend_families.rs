//! ane-sim on the six tiny family checkpoints: logits against HF transformers
//! (reference.json, produced outside anedvd) and against the CPU backend,
//! for both lowering variants; chunking, decode, dispatch counts and dumps.
#![allow(clippy::unwrap_used)]

use anedvd_ane::backend::selftest::{argmax, max_rel};
use anedvd_ane::{AneSimBackend, LowerOptions, Variant};
use anedvd_base::WeightSource;
use anedvd_cpu::CpuBackend;
use anedvd_graph::{Backend, DecoderProgram, Executable, LogitsMode};
use anedvd_model::ConfigOverrides;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

const FAMILIES: [&str; 6] = ["llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3"];
/// Acceptance bound on max|Δ| / max|reference| of the last logits.
const MAX_REL: f64 = 0.02;

fn dir(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/models")
        .join(family)
}

fn reference(family: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir(family).join("reference.json")).unwrap())
        .unwrap()
}

/// Mistral GGUFs lose the sliding window in conversion (see crates/cpu/tests/fixtures.rs).
fn overrides(family: &str, file: &str) -> ConfigOverrides {
    if family != "mistral" || file == "." {
        return ConfigOverrides::default();
    }
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(dir(family).join("config.json")).unwrap())
            .unwrap();
    ConfigOverrides {
        family: Some("mistral".into()),
        sliding_window: cfg["sliding_window"].as_u64().map(|w| w as usize),
        ..Default::default()
    }
}

fn program(family: &str, file: &str) -> DecoderProgram {
    let opened = anedvd_weights::open(dir(family).join(file)).unwrap();
    let src: Arc<dyn WeightSource> = Arc::from(opened.source);
    anedvd_model::load(src, &overrides(family, file)).unwrap().1
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn sim(variant: Variant, width: usize) -> AneSimBackend {
    AneSimBackend::new(LowerOptions {
        variant,
        width,
        ..Default::default()
    })
}

#[test]
fn last_logits_match_transformers_and_cpu() {
    let mut worst: f64 = 0.0;
    for family in FAMILIES {
        let r = reference(family);
        let prompt = ids(&r["prompt_ids"]);
        let hf = floats(&r["last_logits"]);
        let hf_top = r["last_argmax"].as_u64().unwrap() as usize;
        for file in ["model-f32.gguf", "model-q8_0.gguf", "."] {
            let p = program(family, file);
            // exact f32 reference over the same weights (the CPU backend
            // quantizes activations for quantized weights, see reference.rs)
            let mut exact = p.clone();
            exact.weights =
                Arc::new(anedvd_ane::backend::reference::dequantized(p.weights.as_ref()).unwrap());
            let cpu = CpuBackend::new(1).unwrap().compile(&exact).unwrap();
            let native = CpuBackend::new(1).unwrap().compile(&p).unwrap();
            let native = native
                .new_session(64)
                .unwrap()
                .forward(&prompt, LogitsMode::Last)
                .unwrap()
                .to_vec();
            let want = cpu
                .new_session(64)
                .unwrap()
                .forward(&prompt, LogitsMode::Last)
                .unwrap()
                .to_vec();
            for variant in [Variant::Split, Variant::Fused] {
                let exe = sim(variant, 64).compile(&p).unwrap();
                let mut s = exe.new_session(64).unwrap();
                let got = s.forward(&prompt, LogitsMode::Last).unwrap().to_vec();
                let tag = format!("{family}/{file}/{}", variant.name());
                let vs_cpu = max_rel(&got, &want);
                assert!(vs_cpu <= MAX_REL, "{tag}: rel error vs cpu {vs_cpu:.4}");
                assert_eq!(argmax(&got), argmax(&want), "{tag}: top-1 vs cpu");
                assert_eq!(argmax(&got), argmax(&native), "{tag}: top-1 vs native cpu");
                worst = worst.max(vs_cpu);
                if file != "model-q8_0.gguf" {
                    let vs_hf = max_rel(&got, &hf);
                    assert!(
                        vs_hf <= MAX_REL,
                        "{tag}: rel error vs transformers {vs_hf:.4}"
                    );
                    assert_eq!(argmax(&got), hf_top, "{tag}: top-1 vs transformers");
                }
                println!(
                    "{tag}: max rel vs exact cpu {vs_cpu:.5}, vs native cpu {:.5}",
                    max_rel(&got, &native)
                );
            }
        }
    }
    println!("worst max rel vs cpu: {worst:.5}");
}

/// Width 32 splits a 40-token batch into two chunks; every row's logits and
/// then 8 greedy decode tokens must agree with the CPU backend.
#[test]
fn chunked_prefill_and_decode_follow_cpu() {
    for family in ["qwen2", "gemma3"] {
        let r = reference(family);
        let mut prompt = ids(&r["prompt_ids"]);
        prompt.extend(prompt.clone().iter().skip(8));
        assert_eq!(prompt.len(), 40);
        let p = program(family, "model-f32.gguf");
        let cpu = CpuBackend::new(1).unwrap().compile(&p).unwrap();
        let mut cs = cpu.new_session(64).unwrap();
        let want = cs.forward(&prompt, LogitsMode::All).unwrap().to_vec();
        for variant in [Variant::Split, Variant::Fused] {
            let exe = sim(variant, 32).compile(&p).unwrap();
            let mut s = exe.new_session(64).unwrap();
            let got = s.forward(&prompt, LogitsMode::All).unwrap().to_vec();
            assert_eq!(got.len(), want.len());
            let v = p.n_vocab;
            for t in 0..prompt.len() {
                let (g, w) = (&got[t * v..(t + 1) * v], &want[t * v..(t + 1) * v]);
                assert!(
                    max_rel(g, w) <= MAX_REL,
                    "{family} {} row {t}",
                    variant.name()
                );
                assert_eq!(argmax(g), argmax(w), "{family} {} row {t}", variant.name());
            }
            let mut cs = cpu.new_session(64).unwrap();
            cs.forward(&prompt, LogitsMode::None).unwrap();
            let mut next = argmax(&got[(prompt.len() - 1) * v..]) as u32;
            for step in 0..8 {
                let a = argmax(s.forward(&[next], LogitsMode::Last).unwrap());
                let b = argmax(cs.forward(&[next], LogitsMode::Last).unwrap());
                assert_eq!(a, b, "{family} {} decode step {step}", variant.name());
                next = a as u32;
            }
            assert_eq!(s.position(), 48);
        }
    }
}

#[test]
fn one_decode_token_costs_the_reported_dispatches() {
    let p = program("gemma3", "model-f32.gguf");
    let n = p.layers.len();
    for (variant, expect) in [(Variant::Split, 3 * n + 1), (Variant::Fused, n + 2)] {
        let exe = sim(variant, 64).compile_sim(&p).unwrap();
        assert_eq!(exe.dispatches_per_token(), expect);
        let mut s = exe.new_session(16).unwrap();
        s.forward(&[2, 374, 299], LogitsMode::Last).unwrap();
        let before = exe.dispatches_executed();
        s.forward(&[400], LogitsMode::Last).unwrap();
        assert_eq!((exe.dispatches_executed() - before) as usize, expect);
        // prefill without logits skips the lm_head
        let before = exe.dispatches_executed();
        s.forward(&[414], LogitsMode::None).unwrap();
        assert_eq!((exe.dispatches_executed() - before) as usize, expect - 1);
    }
}

#[test]
fn truncate_and_errors_behave_like_cpu() {
    let p = program("llama", "model-f32.gguf");
    let exe = sim(Variant::Fused, 64).compile(&p).unwrap();
    let mut s = exe.new_session(8).unwrap();
    let a = s.forward(&[1, 2, 3, 4], LogitsMode::Last).unwrap().to_vec();
    s.truncate(2);
    assert_eq!(s.position(), 2);
    let b = s.forward(&[3, 4], LogitsMode::Last).unwrap().to_vec();
    assert_eq!(a, b, "recomputing after truncate must give the same logits");
    assert!(s.forward(&[1; 7], LogitsMode::Last).is_err(), "overflow");
    assert_eq!(s.position(), 4);
    assert!(
        s.forward(&[100_000], LogitsMode::Last).is_err(),
        "token out of range"
    );
    assert!(s.forward(&[], LogitsMode::Last).is_err());
}

#[test]
fn dumps_name_every_layer_output() {
    let p = program("gemma2", "model-f32.gguf");
    let tmp = std::env::temp_dir().join(format!("anedvd-ane-sim-dump-{}", std::process::id()));
    let exe = sim(Variant::Split, 64).compile(&p).unwrap();
    let mut s = exe.new_session(16).unwrap();
    s.set_dump(Some(tmp.clone()));
    s.forward(&[2, 374, 299, 400], LogitsMode::Last).unwrap();
    let index = std::fs::read_to_string(tmp.join("index.json")).unwrap();
    for i in 0..p.layers.len() {
        assert!(
            index.contains(&format!("\"blk.{i}.out\", \"shape\": [4, {}]", p.n_embd)),
            "{index}"
        );
        assert!(tmp.join(format!("blk.{i}.out.npy")).exists());
    }
    assert!(
        index.contains("\"result_output\", \"shape\": [1, 512]"),
        "{index}"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn layer0_kernels_match_f32_matmuls() {
    for family in FAMILIES {
        let p = program(family, "model-f32.gguf");
        let checks =
            anedvd_ane::backend::check::check_layer0(&p, &LowerOptions::default(), 0.01).unwrap();
        // split: qkv, attn_out, ffn, lm_head.0; fused: entry, blk.0.layer, lm_head.0
        assert_eq!(checks.len(), 7, "{family}");
        for c in &checks {
            assert!(c.ok, "{family}: {c:?}");
            assert!(c.max_abs > 0.0, "{family}: fp16 rounding must show: {c:?}");
        }
        // with a zero tolerance the same comparison must fail
        let strict =
            anedvd_ane::backend::check::check_layer0(&p, &LowerOptions::default(), 0.0).unwrap();
        assert!(strict.iter().all(|c| !c.ok));
    }
}

#[test]
fn selftest_random_transformers_agree() {
    let results = anedvd_ane::backend::selftest::run(7).unwrap();
    assert_eq!(results.len(), 4);
    for r in &results {
        println!("{r:?}");
        assert!(
            r.cosine >= 0.999 && r.max_rel <= MAX_REL && r.top1_equal,
            "{r:?}"
        );
    }
}

/// Residuals above fp16's 65504 (Gemma 3 270M reaches ~88000) overflow the
/// fused programs unless the residual crosses the ANE scaled down.
#[test]
fn residual_scale_keeps_large_residuals_finite() {
    use anedvd_ane::backend::selftest::{random_program, Flavor};
    let mut p = random_program(Flavor::LlamaLike, 3);
    p.embd_scale = 100_000.0; // residual entries up to ~1e5
    let prompt = [5u32, 17, 99, 3, 42, 7];
    let cpu = CpuBackend::new(1).unwrap().compile(&p).unwrap();
    let want = cpu
        .new_session(8)
        .unwrap()
        .forward(&prompt, LogitsMode::Last)
        .unwrap()
        .to_vec();
    let run = |residual_scale: f32| {
        let o = LowerOptions {
            variant: Variant::Fused,
            residual_scale,
            ..Default::default()
        };
        let exe = AneSimBackend::new(o).compile(&p).unwrap();
        let got = exe
            .new_session(8)
            .unwrap()
            .forward(&prompt, LogitsMode::Last)
            .unwrap()
            .to_vec();
        got
    };
    let unscaled = run(1.0);
    assert!(unscaled.iter().any(|v| !v.is_finite()) || max_rel(&unscaled, &want) > MAX_REL);
    let scaled = run(32.0);
    assert!(
        max_rel(&scaled, &want) <= MAX_REL,
        "{}",
        max_rel(&scaled, &want)
    );
    assert_eq!(argmax(&scaled), argmax(&want));
}
