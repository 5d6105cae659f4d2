//! ane-sim on the tiny family checkpoints, beyond the conformance suite
//! (crates/testkit/tests/conformance.rs, which compares every backend with
//! transformers): chunking against the CPU backend, decode, dispatch counts,
//! truncation, dumps, the layer-0 kernel check, the self-test and the
//! residual scale.
#![allow(clippy::unwrap_used)]

use anedvd_ane::backend::selftest::{argmax, max_rel};
use anedvd_ane::{AneSimBackend, LowerOptions, Variant};
use anedvd_cpu::CpuBackend;
use anedvd_graph::{Backend, DecoderProgram, Executable, LogitsMode};
use anedvd_testkit::fixtures::{self, Format};

/// Acceptance bound on max|Δ| / max|reference| of the last logits.
const MAX_REL: f64 = 0.02;

fn program(family: &str, format: Format) -> DecoderProgram {
    fixtures::program(family, format)
}

fn sim(variant: Variant, width: usize) -> AneSimBackend {
    AneSimBackend::new(LowerOptions {
        variant,
        width,
        ..Default::default()
    })
}

/// Width 32 splits a 40-token batch into two chunks; every row's logits and
/// then 8 greedy decode tokens must agree with the CPU backend.
#[test]
fn chunked_prefill_and_decode_follow_cpu() {
    for family in ["qwen2", "gemma3"] {
        let mut prompt = fixtures::reference(family).prompt;
        prompt.extend(prompt.clone().iter().skip(8));
        assert_eq!(prompt.len(), 40);
        let p = program(family, Format::GgufF32);
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
    let p = program("gemma3", Format::GgufF32);
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
    let p = program("llama", Format::GgufF32);
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
    let p = program("gemma2", Format::GgufF32);
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
    for family in fixtures::ane_families() {
        let p = program(family, Format::GgufF32);
        let checks =
            anedvd_ane::backend::check::check_layer0(&p, &LowerOptions::default(), 0.01).unwrap();
        // split: qkv, attn_out, ffn, lm_head.0; fused: entry, blk.0.layer,
        // lm_head.0 (no ffn program for experts without a shared one: they
        // run on the host); Gemma 4 adds `ple` to both and `blk.0.ple` to
        // split
        let ffn_on_ane = match &p.layers[0].ffn {
            anedvd_graph::FeedForward::Dense(_) => true,
            anedvd_graph::FeedForward::Moe(m) => m.shared.is_some(),
        };
        let ple = if p.per_layer_embd.is_some() { 3 } else { 0 };
        assert_eq!(checks.len(), 6 + usize::from(ffn_on_ane) + ple, "{family}");
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
        exe.new_session(8)
            .unwrap()
            .forward(&prompt, LogitsMode::Last)
            .map(|l| l.to_vec())
    };
    // Unscaled, the residual overflows fp16: inf·0 makes a NaN, which the
    // simulator refuses (the ANE does not propagate NaN: PREC-NO-NAN).
    match run(1.0) {
        Err(e) => assert!(e.to_string().contains("PREC-NO-NAN"), "{e}"),
        Ok(unscaled) => {
            assert!(unscaled.iter().any(|v| !v.is_finite()) || max_rel(&unscaled, &want) > MAX_REL)
        }
    }
    let scaled = run(32.0).unwrap();
    assert!(
        max_rel(&scaled, &want) <= MAX_REL,
        "{}",
        max_rel(&scaled, &want)
    );
    assert_eq!(argmax(&scaled), argmax(&want));
}
