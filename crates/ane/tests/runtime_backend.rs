//! The `ane` backend (kernels through `anedvd_ane::runtime` on a driver):
//! the tiny qwen2 and gemma3 checkpoints through the simulated driver
//! against HF transformers (reference.json, produced outside anedvd) and the
//! exact CPU reference; the private driver off macOS; the compile budget.
#![allow(clippy::unwrap_used)]

use anedvd_ane::backend::selftest::{argmax, max_rel};
use anedvd_ane::{AneBackend, AneSimBackend, DriverKind, LowerOptions, Variant};
use anedvd_cpu::CpuBackend;
use anedvd_graph::{Backend, DecoderProgram, Executable, LogitsMode};
use anedvd_testkit::fixtures::{self, Format};
use serde_json::Value;
use std::sync::Arc;

/// Acceptance bound on max|Δ| / max|reference| of the last logits (as in families.rs).
const MAX_REL: f64 = 0.02;

fn reference(family: &str) -> Value {
    fixtures::reference(family).json
}

fn program(family: &str) -> DecoderProgram {
    fixtures::program(family, Format::GgufF32)
}

fn values(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn options(variant: Variant) -> LowerOptions {
    LowerOptions {
        variant,
        ..Default::default()
    }
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn executable_is_send_and_sync() {
    assert_send_sync::<anedvd_ane::AneExecutable>();
    assert_send_sync::<AneBackend>();
}

#[test]
fn tiny_models_through_the_sim_driver_match_transformers_and_cpu() {
    for family in ["qwen2", "gemma3"] {
        let r = reference(family);
        let prompt: Vec<u32> = values(&r["prompt_ids"]).iter().map(|&x| x as u32).collect();
        let hf: Vec<f32> = values(&r["last_logits"])
            .iter()
            .map(|&x| x as f32)
            .collect();
        let hf_top = r["last_argmax"].as_u64().unwrap() as usize;
        let p = program(family);
        let cpu = CpuBackend::new(1).unwrap().compile(&p).unwrap();
        let want = cpu
            .new_session(64)
            .unwrap()
            .forward(&prompt, LogitsMode::Last)
            .unwrap()
            .to_vec();
        for variant in [Variant::Split, Variant::Fused] {
            let tag = format!("{family}/{}", variant.name());
            let backend = AneBackend::new(options(variant), DriverKind::Sim);
            let exe = backend.compile_ane(&p).unwrap();
            let report = exe.compile_report().unwrap();
            // one compile per distinct program, all within the budget
            assert_eq!(
                report.compiles as usize + report.cache_hits as usize,
                exe.dispatches_per_token(),
                "{tag}: {report:?}"
            );
            assert!(report.compiles >= 1 && report.compiles_left < report.budget);
            let mut s = exe.new_session(64).unwrap();
            let got = s.forward(&prompt, LogitsMode::Last).unwrap().to_vec();
            assert_eq!(
                exe.dispatches_executed() as usize,
                exe.dispatches_per_token()
            );
            let (vs_cpu, vs_hf) = (max_rel(&got, &want), max_rel(&got, &hf));
            println!("{tag}: {report:?}; max rel vs cpu {vs_cpu:.5}, vs transformers {vs_hf:.5}");
            assert!(vs_cpu <= MAX_REL, "{tag}: rel error vs cpu {vs_cpu:.4}");
            assert!(
                vs_hf <= MAX_REL,
                "{tag}: rel error vs transformers {vs_hf:.4}"
            );
            assert_eq!(argmax(&got), argmax(&want), "{tag}: top-1 vs cpu");
            assert_eq!(argmax(&got), hf_top, "{tag}: top-1 vs transformers");
            // the runtime's packing at reported strides loses nothing: the
            // same kernels run directly on the simulator give the same logits
            let direct = AneSimBackend::new(options(variant)).compile(&p).unwrap();
            let d = direct
                .new_session(64)
                .unwrap()
                .forward(&prompt, LogitsMode::Last)
                .unwrap()
                .to_vec();
            assert_eq!(got, d, "{tag}: runtime vs direct simulator");
            // decode continues through the same worker
            let next = argmax(&got) as u32;
            let a = argmax(s.forward(&[next], LogitsMode::Last).unwrap());
            let mut cs = cpu.new_session(64).unwrap();
            cs.forward(&prompt, LogitsMode::None).unwrap();
            let b = argmax(cs.forward(&[next], LogitsMode::Last).unwrap());
            assert_eq!(a, b, "{tag}: decode step");
        }
    }
}

#[test]
fn sessions_on_other_threads_share_the_worker() {
    let p = program("qwen2");
    let exe = Arc::new(
        AneBackend::new(options(Variant::Fused), DriverKind::Sim)
            .compile_ane(&p)
            .unwrap(),
    );
    let run = |exe: &anedvd_ane::AneExecutable| {
        exe.new_session(8)
            .unwrap()
            .forward(&[1, 2, 3], LogitsMode::Last)
            .unwrap()
            .to_vec()
    };
    let here = run(&exe);
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let exe = exe.clone();
            std::thread::spawn(move || run(&exe))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), here);
    }
}

#[cfg(not(target_os = "macos"))]
#[test]
fn private_driver_off_macos_fails_compile_with_one_line() {
    let p = program("qwen2");
    let backend = AneBackend::new(LowerOptions::default(), DriverKind::Private);
    let e = backend.compile(&p).err().unwrap().to_string();
    assert!(e.contains("ANE unavailable: "), "{e}");
    assert!(e.starts_with("ane: ANE unavailable: "), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn compile_budget_is_enforced_and_named() {
    let p = program("gemma3");
    let o = options(Variant::Split);
    let needed = 3 * p.layers.len() + 1; // q/k/v, attn_out, ffn per layer + lm_head
    let exact = AneBackend::new(o, DriverKind::Sim).with_compile_budget(needed as u32);
    let exe = exact.compile_ane(&p).unwrap();
    let r = exe.compile_report().unwrap();
    assert_eq!(
        (r.compiles, r.compiles_left, r.budget),
        (needed as u32, 0, needed as u32)
    );
    let short = AneBackend::new(o, DriverKind::Sim).with_compile_budget(needed as u32 - 1);
    let e = short.compile(&p).err().unwrap().to_string();
    assert!(
        e.contains(&format!("needs {needed} ANE programs"))
            && e.contains(&format!("allows {} more", needed - 1))
            && e.contains(&format!("budget {}", needed - 1)),
        "{e}"
    );
}

#[test]
fn runtime_times_every_kernel() {
    let p = program("gemma3");
    let exe = AneBackend::new(options(Variant::Fused), DriverKind::Sim)
        .compile_ane(&p)
        .unwrap();
    let names: Vec<String> = exe.kernel_names().iter().map(|s| s.to_string()).collect();
    let mut s = exe.new_session(8).unwrap();
    s.forward(&[2, 10, 20], LogitsMode::Last).unwrap();
    s.forward(&[30], LogitsMode::Last).unwrap();
    let stats = exe.kernel_stats().unwrap().unwrap();
    assert_eq!(
        stats.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        names
    );
    for (n, st) in &stats {
        assert_eq!(st.evals, 2, "{n}");
        assert!(st.eval_min.unwrap() <= st.eval_mean().unwrap(), "{n}");
    }
    let direct = AneSimBackend::new(options(Variant::Fused))
        .compile_sim(&p)
        .unwrap();
    assert!(direct.kernel_stats().unwrap().is_none());
}
