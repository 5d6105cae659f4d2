//! The graph API end to end on the simulator: validation names the node,
//! compression off changes nothing, training converges to a known answer,
//! and the tuner never picks a lowering beyond its tolerance.

use anedvd_forge::cost::{tune, TuneOptions};
use anedvd_forge::{
    compile, validate, CompileOptions, Error, Graph, Optimizer, RuntimePath, Trainer, WeightFormat,
};

fn lcg(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

#[test]
fn validate_names_the_refused_node_per_path() -> anyhow::Result<()> {
    let g = Graph::new();
    let x = g.input("x", &[4, 32])?;
    let y = x.mul(&x)?.add_scalar(1.0)?.log()?.named("the_log")?;
    let inmem = CompileOptions {
        path: RuntimePath::InMemory,
        ..CompileOptions::default()
    };
    match validate(&[&y], &inmem) {
        Err(Error::Invalid { node, rule, .. }) => {
            assert_eq!(node, "the_log");
            assert_eq!(rule, "ANE-OP");
        }
        other => panic!("expected the log to be refused on inmem, got {other:?}"),
    }
    assert!(
        matches!(compile(&[&y], &inmem), Err(Error::Invalid { .. })),
        "compile validates first"
    );
    validate(&[&y], &CompileOptions::default())?;
    Ok(())
}

#[test]
fn compression_off_is_byte_identical_and_on_uses_constexpr_ops() -> anyhow::Result<()> {
    let g = Graph::new();
    let mut seed = 3;
    let x = g.input("x", &[2, 32])?;
    let w = g.param("w", &[32, 32], (0..1024).map(|_| lcg(&mut seed)).collect())?;
    let y = x.matmul(&w)?;
    let plain = compile(&[&y], &CompileOptions::default())?;
    let none = compile(
        &[&y],
        &CompileOptions {
            compress: WeightFormat::Fp16,
            ..CompileOptions::default()
        },
    )?;
    assert_eq!(plain.mil(), none.mil());
    assert_eq!(
        plain
            .lowered()
            .weights
            .get(anedvd_forge::lower::WEIGHT_FILE),
        none.lowered().weights.get(anedvd_forge::lower::WEIGHT_FILE)
    );
    let xv: Vec<f32> = (0..64).map(|_| lcg(&mut seed)).collect();
    let want = compile(&[&y], &CompileOptions::default())?.run(&[("x", &xv)])?;
    for (c, op, limit) in [
        (WeightFormat::Int8, "constexpr_affine_dequantize", 0.02),
        (
            WeightFormat::Lut { bits: 8 },
            "constexpr_lut_to_dense",
            0.02,
        ),
        (
            WeightFormat::Lut { bits: 4 },
            "constexpr_lut_to_dense",
            0.15,
        ),
    ] {
        let mut exe = compile(
            &[&y],
            &CompileOptions {
                compress: c,
                ..CompileOptions::default()
            },
        )?;
        assert!(exe.mil().contains(op), "{}", c.name());
        let got = exe.run(&[("x", &xv)])?;
        let num: f32 = got[0]
            .values
            .iter()
            .zip(&want[0].values)
            .map(|(a, b)| (a - b).powi(2))
            .sum();
        let den: f32 = want[0].values.iter().map(|b| b * b).sum();
        assert!(
            (num / den).sqrt() < limit,
            "{}: {}",
            c.name(),
            (num / den).sqrt()
        );
    }
    Ok(())
}

#[test]
fn sgd_and_adam_recover_a_known_linear_map() -> anyhow::Result<()> {
    let mut seed = 11;
    let w_true: Vec<f32> = (0..8).map(|_| lcg(&mut seed)).collect();
    for opt in [Optimizer::sgd(0.1, 0.9), Optimizer::adam(0.02)] {
        let g = Graph::new();
        let x = g.input("x", &[16, 8])?;
        let t = g.input("t", &[16, 1])?;
        let w = g.param("w", &[8, 1], vec![0.0; 8])?;
        let loss = x.matmul(&w)?.sub(&t)?.square()?.mean(&[0, 1], false)?;
        let mut tr = Trainer::new(&loss, &[], opt, &CompileOptions::default())?;
        assert_eq!(tr.program().dispatches(), 1);
        let mut last = f32::INFINITY;
        for _ in 0..300 {
            let xv: Vec<f32> = (0..128).map(|_| lcg(&mut seed)).collect();
            let tv: Vec<f32> = (0..16)
                .map(|r| (0..8).map(|c| xv[r * 8 + c] * w_true[c]).sum())
                .collect();
            last = tr.step(&[("x", &xv), ("t", &tv)])?;
        }
        let got = tr.param("w").expect("w is trained");
        let err = got
            .iter()
            .zip(&w_true)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(
            err < 2e-2,
            "{opt:?}: max |w - w_true| = {err}, last loss {last}"
        );
    }
    Ok(())
}

#[test]
fn the_tuner_keeps_within_tolerance() -> anyhow::Result<()> {
    let g = Graph::new();
    let mut seed = 5;
    let x = g.input("x", &[8, 64])?;
    let w = g.param("w", &[64, 16], (0..1024).map(|_| lcg(&mut seed)).collect())?;
    let y = x
        .matmul(&w)?
        .softmax(-1)?
        .sum(&[1], false)?
        .add(&x.mean(&[1], false)?)?;
    for tolerance in [1e-9, 1e-2] {
        let t = TuneOptions {
            tolerance,
            allow_compression: true,
            survivors: 16,
            ..TuneOptions::default()
        };
        let tuned = tune(&[&y], &CompileOptions::default(), &t)?;
        assert!(!tuned.cached, "another tolerance is another tuning");
        let chosen = tuned
            .candidates
            .iter()
            .find(|c| c.options == tuned.options && c.dropped.is_none());
        match chosen {
            Some(c) => assert!(c.error.expect("survivors are measured") <= tolerance),
            // nothing passed: the literal lowering itself
            None => assert_eq!(tuned.options.compress, WeightFormat::Fp16),
        }
        let again = tune(&[&y], &CompileOptions::default(), &t)?;
        assert!(again.cached && again.options == tuned.options);
        assert!(tuned
            .candidates
            .iter()
            .all(|c| c.dropped.is_some() || c.error.is_some_and(|e| e <= tolerance)));
    }
    Ok(())
}

#[test]
fn bad_feeds_and_state_bindings_are_refused() -> anyhow::Result<()> {
    let g = Graph::new();
    let x = g.input("x", &[2, 2])?;
    let y = x.add_scalar(1.0)?;
    let mut exe = compile(&[&y], &CompileOptions::default())?;
    assert!(matches!(
        exe.run(&[("x", &[1.0, 2.0][..])]),
        Err(Error::Feed { .. })
    ));
    assert!(matches!(exe.run(&[]), Err(Error::Feed { .. })));
    assert!(matches!(
        exe.run(&[("x", &[0.0; 4][..]), ("z", &[0.0][..])]),
        Err(Error::Feed { .. })
    ));
    assert!(exe.bind_state("x", &[0.0; 4], "nope").is_err());
    exe.bind_state("x", &[0.0; 4], &y.name())?;
    exe.run(&[])?;
    let out = exe.run(&[])?;
    assert_eq!(out[0].values, vec![2.0; 4], "state carried: 0 → 1 → 2");
    Ok(())
}

#[test]
fn composite_attention_agrees_with_its_decomposition() -> anyhow::Result<()> {
    use anedvd_forge::Choice;
    let g = Graph::new();
    let mut seed = 9;
    let q = g.input("q", &[2, 8, 16])?;
    let k = g.input("k", &[2, 12, 16])?;
    let v = g.input("v", &[2, 12, 16])?;
    let y = q.attention(&k, &v, false)?;
    let feeds: Vec<(String, Vec<f32>)> = [("q", 256), ("k", 384), ("v", 384)]
        .iter()
        .map(|&(n, len)| (n.to_string(), (0..len).map(|_| lcg(&mut seed)).collect()))
        .collect();
    let refs: Vec<(&str, &[f32])> = feeds
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    let run = |attention| -> anyhow::Result<(String, Vec<f32>)> {
        let mut exe = compile(
            &[&y],
            &CompileOptions {
                attention,
                ..CompileOptions::default()
            },
        )?;
        Ok((exe.mil(), exe.run(&refs)?.remove(0).values))
    };
    let (composite_mil, composite) = run(Choice::Native)?;
    let (decomposed_mil, decomposed) = run(Choice::Decomposed)?;
    assert!(composite_mil.contains("scaled_dot_product_attention"));
    assert!(!decomposed_mil.contains("scaled_dot_product_attention"));
    let worst = composite
        .iter()
        .zip(&decomposed)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst < 2e-3, "max |composite − decomposed| = {worst}");
    // causal attention needs a mask, which the composite op cannot take
    let c = q.attention(&k, &v, true)?;
    let causal = compile(
        &[&c],
        &CompileOptions {
            attention: Choice::Native,
            ..CompileOptions::default()
        },
    )?;
    assert!(!causal.mil().contains("scaled_dot_product_attention"));
    Ok(())
}

#[test]
fn save_writes_the_model_directory_and_never_overwrites() -> anyhow::Result<()> {
    let g = Graph::new();
    let x = g.input("x", &[2, 4])?;
    let w = g.param("w", &[4, 4], vec![0.5; 16])?;
    let exe = compile(&[&x.matmul(&w)?], &CompileOptions::default())?;
    let tmp = std::env::temp_dir().join(format!("forge-save-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    exe.save(&tmp)?;
    assert_eq!(std::fs::read_to_string(tmp.join("model.mil"))?, exe.mil());
    let blob = std::fs::read(tmp.join("weights/weight.bin"))?;
    let want = exe
        .lowered()
        .weights
        .get(anedvd_forge::lower::WEIGHT_FILE)
        .expect("one weight file");
    assert_eq!(blob, want);
    assert!(
        matches!(exe.save(&tmp), Err(Error::Io { .. })),
        "a non-empty directory is refused"
    );
    std::fs::remove_dir_all(&tmp)?;
    Ok(())
}

#[test]
fn programs_run_on_the_runtime_driver_of_their_path() -> anyhow::Result<()> {
    use anedvd_forge::{SimDriver, Unit};
    let g = Graph::new();
    let x = g.input("x", &[2, 64])?;
    let w = g.param(
        "w",
        &[64, 64],
        (0..4096).map(|i| ((i % 7) as f32 - 3.0) / 16.0).collect(),
    )?;
    let y = x.mul_scalar(2.0)?.add_scalar(1.0)?.relu()?.mul(&x)?;
    let inmem = CompileOptions {
        path: RuntimePath::InMemory,
        ..CompileOptions::default()
    };
    let mut exe = compile(&[&y], &inmem)?;
    let xv: Vec<f32> = (0..128).map(|i| (i as f32 - 64.0) / 32.0).collect();
    let want = exe.run(&[("x", &xv)])?;
    let mut loaded = exe.load(SimDriver::new())?;
    assert_eq!(loaded.unit(), Unit::Driver { name: "sim" });
    let got = loaded.run(&[("x", &xv)])?;
    assert_eq!(
        got, want,
        "the driver runs the same program the simulator ran"
    );
    assert!(matches!(
        loaded.run(&[("x", &xv[..3])]),
        Err(Error::Feed { .. })
    ));
    // a program of the e5rt path loads on the e5rt runtime, not this one
    let mut e5rt = compile(&[&x.matmul(&w)?], &CompileOptions::default())?;
    let want = e5rt.run(&[("x", &xv)])?;
    let e = e5rt.clone().load(SimDriver::new()).unwrap_err().to_string();
    assert!(e.contains("load_e5rt"), "{e}");
    let mut loaded = e5rt.load_e5rt(anedvd_forge::E5rtSim::new())?;
    assert_eq!(loaded.unit(), Unit::Driver { name: "e5rt-sim" });
    assert_eq!(
        loaded.run(&[("x", &xv)])?,
        want,
        "the e5rt runtime runs what the simulator ran"
    );
    Ok(())
}

/// On the e5rt runtime a state input stays in its aliased buffer between
/// runs (never passed back in): `s ← s + x` three times gives what the
/// simulator's carried state gives, and the buffer reads back.
#[test]
fn state_stays_resident_on_the_e5rt_runtime() -> anyhow::Result<()> {
    let g = Graph::new();
    let s = g.input("s", &[4])?;
    let x = g.input("x", &[4])?;
    let y = s.add(&x)?.mul_scalar(0.5)?;
    let mut exe = compile(&[&y], &CompileOptions::default())?;
    let init = [1.0, -2.0, 0.5, 8.0];
    exe.bind_state("s", &init, &y.name())?;
    let xv = [1.0f32, 2.0, 3.0, 4.0];
    let mut loaded = exe.clone().load_e5rt(anedvd_forge::E5rtSim::new())?;
    let mut want = init.to_vec();
    for step in 0..3 {
        let sim = exe.run(&[("x", &xv)])?;
        let got = loaded.run(&[("x", &xv)])?;
        // by hand, exact in fp16: s ← (s + x) / 2
        want = want.iter().zip(&xv).map(|(s, x)| (s + x) * 0.5).collect();
        assert_eq!(got, sim, "step {step}");
        assert_eq!(got[0].values, want, "step {step}");
        assert_eq!(loaded.state("s")?, want, "step {step}");
    }
    assert!(loaded.state("x").is_err(), "x is not state");
    // one output cannot carry two states (one buffer, one alias)
    let mut two = compile(&[&y], &CompileOptions::default())?;
    two.bind_state("s", &init, &y.name())?;
    assert!(two.bind_state("x", &xv, &y.name()).is_err());
    assert!(loaded.run(&[]).is_err(), "x must be fed");
    Ok(())
}

#[cfg(not(target_os = "macos"))]
#[test]
fn the_private_driver_says_when_there_is_no_ane() {
    let e = anedvd_forge::PrivateDriver::open().unwrap_err().to_string();
    assert!(e.contains("ANE unavailable"), "{e}");
}
