//! The `ane` backend on the e5rt path (`--backend ane --ane-path e5rt`):
//! through the simulated e5rt driver the tiny qwen2 and gemma3 checkpoints
//! give the direct simulator's logits bit for bit (same programs, same
//! simulator; only the runtime between them differs), with dense named
//! ports instead of strided surfaces; the real e5rt driver off macOS; each
//! real driver refusing the other path; the loaded-program budget.
#![allow(clippy::unwrap_used)]

use anedvd_ane::backend::selftest::argmax;
use anedvd_ane::{AneBackend, AneSimBackend, DriverKind, LowerOptions, RuntimePath, Variant};
use anedvd_graph::{Backend, DecoderProgram, Executable, LogitsMode};
use anedvd_testkit::fixtures::{self, Format};

fn program(family: &str) -> DecoderProgram {
    fixtures::program(family, Format::GgufF32)
}

fn options(variant: Variant, path: RuntimePath) -> LowerOptions {
    LowerOptions {
        variant,
        path,
        ..Default::default()
    }
}

fn compile_error(backend: AneBackend, p: &DecoderProgram) -> String {
    backend
        .compile(p)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn the_simulated_e5rt_driver_matches_ane_sim_bit_for_bit() {
    for family in ["qwen2", "gemma3"] {
        let p = program(family);
        let prompt = fixtures::reference(family).prompt;
        for variant in [Variant::Split, Variant::Fused] {
            let tag = format!("{family}/{}", variant.name());
            let o = options(variant, RuntimePath::E5rt);
            let exe = AneBackend::new(o, DriverKind::Sim).compile_ane(&p).unwrap();
            // `sim` follows the lowering's path
            assert_eq!(exe.driver(), Some(DriverKind::E5rtSim), "{tag}");
            let report = exe.compile_report().unwrap();
            // e5rt loads every program (no sharing), within the budget
            assert_eq!(
                report.compiles as usize,
                exe.dispatches_per_token(),
                "{tag}"
            );
            assert_eq!(report.cache_hits, 0, "{tag}");
            assert_eq!(
                report.compiles_left + report.compiles,
                report.budget,
                "{tag}: {report:?}"
            );
            let mut s = exe.new_session(64).unwrap();
            let got = s.forward(&prompt, LogitsMode::Last).unwrap().to_vec();
            let direct = AneSimBackend::new(o).compile(&p).unwrap();
            let mut ds = direct.new_session(64).unwrap();
            let want = ds.forward(&prompt, LogitsMode::Last).unwrap().to_vec();
            assert_eq!(got, want, "{tag}: e5rt runtime vs ane-sim --ane-path e5rt");
            // decode continues through the same worker, still identical
            let next = argmax(&got) as u32;
            let a = s.forward(&[next], LogitsMode::Last).unwrap().to_vec();
            let b = ds.forward(&[next], LogitsMode::Last).unwrap().to_vec();
            assert_eq!(a, b, "{tag}: decode step");
            let stats = exe.kernel_stats().unwrap().unwrap();
            assert_eq!(stats.len(), exe.dispatches_per_token(), "{tag}");
            for (n, st) in &stats {
                assert_eq!(st.evals, 2, "{tag} {n}: prompt + one decode step");
            }
        }
    }
}

#[test]
fn the_in_memory_and_e5rt_runtimes_agree_closely() {
    // different paths, so the programs (and rule checks) may differ; the
    // logits of one family must still agree to fp16 noise
    let p = program("qwen2");
    let prompt = fixtures::reference("qwen2").prompt;
    let run = |path| {
        let exe = AneBackend::new(options(Variant::Fused, path), DriverKind::Sim)
            .compile(&p)
            .unwrap();
        let mut s = exe.new_session(64).unwrap();
        s.forward(&prompt, LogitsMode::Last).unwrap().to_vec()
    };
    let (inmem, e5rt) = (run(RuntimePath::InMemory), run(RuntimePath::E5rt));
    assert_eq!(argmax(&inmem), argmax(&e5rt));
    let rel = anedvd_ane::backend::selftest::max_rel(&e5rt, &inmem);
    assert!(rel < 0.02, "max rel {rel}");
}

#[test]
fn each_real_driver_refuses_the_other_path() {
    let p = program("qwen2");
    let e = compile_error(
        AneBackend::new(
            options(Variant::Fused, RuntimePath::E5rt),
            DriverKind::Private,
        ),
        &p,
    );
    assert!(
        e.contains("--driver ane") && e.contains("cannot run --ane-path e5rt"),
        "{e}"
    );
    let e = compile_error(
        AneBackend::new(
            options(Variant::Fused, RuntimePath::InMemory),
            DriverKind::E5rt,
        ),
        &p,
    );
    assert!(
        e.contains("--driver e5rt") && e.contains("runs only --ane-path e5rt"),
        "{e}"
    );
    // the simulated e5rt driver named outright is refused on the other path too
    let e = compile_error(
        AneBackend::new(
            options(Variant::Fused, RuntimePath::InMemory),
            DriverKind::E5rtSim,
        ),
        &p,
    );
    assert!(
        e.contains("--driver e5rt-sim simulates the e5rt path, not --ane-path inmem"),
        "{e}"
    );
}

#[cfg(not(target_os = "macos"))]
#[test]
fn the_e5rt_driver_off_macos_fails_compile_with_one_line() {
    let p = program("qwen2");
    let o = options(Variant::Fused, RuntimePath::E5rt);
    let e = compile_error(AneBackend::new(o, DriverKind::E5rt), &p);
    assert!(
        e.starts_with(
            "ane: ANE unavailable: cannot load /System/Library/PrivateFrameworks/Espresso"
        ),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn the_loaded_program_budget_is_enforced_and_named() {
    let p = program("gemma3");
    let o = options(Variant::Split, RuntimePath::E5rt);
    let needed = 3 * p.layers.len() + 1;
    let exact = AneBackend::new(o, DriverKind::Sim).with_compile_budget(needed as u32);
    let r = exact.compile_ane(&p).unwrap().compile_report().unwrap();
    assert_eq!((r.compiles, r.compiles_left), (needed as u32, 0));
    let short = AneBackend::new(o, DriverKind::Sim).with_compile_budget(needed as u32 - 1);
    let e = compile_error(short, &p);
    assert!(
        e.contains(&format!("needs {needed} ANE programs"))
            && e.contains(&format!("allows {} more", needed - 1)),
        "{e}"
    );
}

#[test]
fn driver_names_and_paths() {
    for (name, kind, path) in [
        ("sim", DriverKind::Sim, RuntimePath::InMemory),
        ("ane", DriverKind::Private, RuntimePath::InMemory),
        ("e5rt", DriverKind::E5rt, RuntimePath::E5rt),
        ("e5rt-sim", DriverKind::E5rtSim, RuntimePath::E5rt),
    ] {
        assert_eq!(DriverKind::from_name(name), Some(kind));
        assert_eq!(kind.name(), name);
        assert_eq!(kind.path(), path);
        assert_eq!(kind.path_refusal(path), None);
    }
    assert_eq!(DriverKind::from_name("private"), Some(DriverKind::Private));
    assert_eq!(DriverKind::from_name("gpu"), None);
    assert_eq!(
        DriverKind::Sim.for_path(RuntimePath::E5rt),
        DriverKind::E5rtSim
    );
    assert_eq!(
        DriverKind::Sim.for_path(RuntimePath::InMemory),
        DriverKind::Sim
    );
    assert_eq!(
        DriverKind::E5rtSim.for_path(RuntimePath::InMemory),
        DriverKind::E5rtSim
    );
    assert_eq!(
        DriverKind::Private.for_path(RuntimePath::E5rt),
        DriverKind::Private
    );
    assert_eq!(
        DriverKind::E5rt.for_path(RuntimePath::InMemory),
        DriverKind::E5rt
    );
}
