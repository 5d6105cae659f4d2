//! The runtime end to end through the simulated driver: projection vs an f32
//! CPU matmul, binding order, surface rules, budget, retries, weight keys,
//! model directory, and the private driver's refusal on this OS.

#![allow(clippy::unwrap_used)]

use anedvd_ane::backend::check::pseudo_random;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anedvd_ane::runtime::{
    Driver, Error, Op, ProgramSource, RetryPolicy, Runtime, SimDriver, DEFAULT_COMPILE_BUDGET,
};
use anedvd_mil::blob::{BlobLayout, BlobWriter};
use anedvd_mil::builder::{program, FunctionBuilder};
use anedvd_mil::ir::DType;

const W_KEY: &str = "@model_path/weights/w.bin";

/// `y[1, cout, 1, s] = W[cout, cin] · x[1, cin, 1, s]` as a 1×1 conv.
fn projection(cin: usize, cout: usize, s: usize, w: &[f32]) -> ProgramSource {
    let mut blob = BlobWriter::new(BlobLayout::Aligned);
    let off = blob.add_f32_as_f16(w);
    let mut b = FunctionBuilder::new("main");
    let x = b.input("x", DType::Fp16, &[1, cin, 1, s]).unwrap();
    let wv = b
        .const_blob("w", DType::Fp16, &[cout, cin, 1, 1], W_KEY, off)
        .unwrap();
    let y = b.conv("y", &x, &wv).unwrap();
    b.output(&y);
    let text = anedvd_mil::print(&program(vec![b.finish()]));
    ProgramSource::new(text).with_weight(W_KEY, blob.finish())
}

/// Plain f32 matmul over `[cin, s]` activations.
fn cpu_matmul(cin: usize, cout: usize, s: usize, w: &[f32], x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut y = vec![0f32; cout * s];
    let mut mag = vec![0f32; cout * s];
    for o in 0..cout {
        for t in 0..s {
            for i in 0..cin {
                y[o * s + t] += w[o * cin + i] * x[i * s + t];
                mag[o * s + t] += (w[o * cin + i] * x[i * s + t]).abs();
            }
        }
    }
    (y, mag)
}

type Slept = Arc<Mutex<Vec<Duration>>>;

fn no_sleep_runtime(d: SimDriver) -> (Runtime<SimDriver>, Slept) {
    let slept: Slept = Arc::default();
    let s2 = slept.clone();
    (
        Runtime::new(d).with_sleep(move |d| s2.lock().unwrap().push(d)),
        slept,
    )
}

#[test]
fn sim_runtime_is_send() {
    fn send<T: Send>(_: &T) {}
    send(&Runtime::new(SimDriver::new()));
}

#[test]
fn projection_matches_cpu_matmul_at_every_width() {
    let (cin, cout) = (64, 48);
    for s in [1usize, 16, 32, 64] {
        let w = pseudo_random(1, cout * cin);
        let x = pseudo_random(2 + s as u64, cin * s);
        let mut rt = Runtime::new(SimDriver::new());
        let mut k = rt.prepare(&projection(cin, cout, s, &w)).unwrap();
        let l = &k.attributes().inputs[0];
        assert_eq!(
            l.row_stride,
            (s * 2).div_ceil(64) * 64,
            "reported stride at width {s}"
        );
        let out = rt.run(&mut k, &[("x", &x)]).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "y");
        let (want, mag) = cpu_matmul(cin, cout, s, &w, &x);
        let got = &out[0].1;
        assert_eq!(got.len(), want.len());
        let mut worst = 0f32;
        for i in 0..want.len() {
            // fp16 inputs, weights and output: a few units of 2^-11 relative
            // to the sum of magnitudes.
            let tol = 3e-3 * mag[i] + 1e-4;
            let err = (got[i] - want[i]).abs();
            assert!(
                err <= tol,
                "width {s} elem {i}: {} vs {} (tol {tol})",
                got[i],
                want[i]
            );
            worst = worst.max(err / (mag[i] + 1e-6));
        }
        assert!(worst > 0.0, "fp16 rounding must show up somewhere");
        assert_eq!(k.stats().evals, 1);
        rt.release(k);
    }
}

#[test]
fn a_wrong_weight_layout_is_caught() {
    // Transposed weights (W^T) must not pass the same comparison: the test can fail.
    let (cin, cout, s) = (32, 32, 32);
    let w = pseudo_random(7, cout * cin);
    let mut wt = vec![0f32; w.len()];
    for o in 0..cout {
        for i in 0..cin {
            wt[i * cout + o] = w[o * cin + i];
        }
    }
    let x = pseudo_random(8, cin * s);
    let mut rt = Runtime::new(SimDriver::new());
    let mut k = rt.prepare(&projection(cin, cout, s, &wt)).unwrap();
    let got = rt.run(&mut k, &[("x", &x)]).unwrap().remove(0).1;
    let (want, mag) = cpu_matmul(cin, cout, s, &w, &x);
    let bad = (0..want.len()).filter(|&i| (got[i] - want[i]).abs() > 3e-3 * mag[i] + 1e-4);
    assert!(bad.count() > want.len() / 2);
}

const TWO_INPUTS: &str = "program(1.3)
{
  func main<ios18>(tensor<fp16, [1, 2, 1, 8]> x, tensor<fp16, [1, 2, 1, 8]> a) {
    tensor<fp16, [1, 2, 1, 8]> y = sub(x = x, y = a)[name = string(\"y\")];
  } -> (y);
}
";

#[test]
fn inputs_bind_in_alphabetical_symbol_order() {
    let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let a: Vec<f32> = vec![1.0; 16];
    let want: Vec<f32> = x.iter().map(|v| v - 1.0).collect();
    let mut rt = Runtime::new(SimDriver::new());
    let mut k = rt.prepare(&ProgramSource::new(TWO_INPUTS)).unwrap();
    let names: Vec<&str> = k
        .attributes()
        .inputs
        .iter()
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(names, ["a", "x"]);
    // Any order of the named arguments works: the runtime binds by the attributes.
    assert_eq!(rt.run(&mut k, &[("x", &x), ("a", &a)]).unwrap()[0].1, want);
    assert_eq!(rt.run(&mut k, &[("a", &a), ("x", &x)]).unwrap()[0].1, want);
    let missing = rt.run(&mut k, &[("x", &x)]);
    assert!(matches!(missing, Err(Error::Binding { .. })), "{missing:?}");
    let unknown = rt.run(&mut k, &[("x", &x), ("a", &a), ("b", &a)]);
    assert!(matches!(unknown, Err(Error::Binding { .. })), "{unknown:?}");
    rt.release(k);

    // The raw driver shows what declaration order would do: x and a swap.
    let mut d = SimDriver::new();
    let m = d.compile(&ProgramSource::new(TWO_INPUTS)).unwrap();
    d.load(m).unwrap();
    let attrs = d.attributes(m).unwrap();
    let l = &attrs.inputs[0];
    let (sx, sa, sy) = (
        d.create_surface(l.alloc_size()).unwrap(),
        d.create_surface(l.alloc_size()).unwrap(),
        d.create_surface(attrs.outputs[0].alloc_size()).unwrap(),
    );
    let mut bx = vec![0u8; l.alloc_size()];
    let mut ba = vec![0u8; l.alloc_size()];
    anedvd_ane::runtime::layout::pack(l, &x, &mut bx).unwrap();
    anedvd_ane::runtime::layout::pack(l, &a, &mut ba).unwrap();
    d.write_surface(sx, &bx).unwrap();
    d.write_surface(sa, &ba).unwrap();
    let r = d.build_request(m, &[sx, sa], &[sy]).unwrap(); // declaration order: wrong
    d.evaluate(m, r).unwrap();
    let mut by = vec![0u8; attrs.outputs[0].alloc_size()];
    d.read_surface(sy, &mut by).unwrap();
    let got = anedvd_ane::runtime::layout::unpack(&attrs.outputs[0], &by).unwrap();
    let swapped: Vec<f32> = x.iter().map(|v| 1.0 - v).collect();
    assert_eq!(got, swapped);
}

#[test]
fn surfaces_must_be_uniform_and_large_enough() {
    let mut d = SimDriver::new();
    let m = d.compile(&ProgramSource::new(TWO_INPUTS)).unwrap();
    d.load(m).unwrap();
    let n = d.attributes(m).unwrap().inputs[0].alloc_size();
    let (s1, s2, s3, out) = (
        d.create_surface(n).unwrap(),
        d.create_surface(n + 64).unwrap(),
        d.create_surface(n).unwrap(),
        d.create_surface(n).unwrap(),
    );
    let r = d.build_request(m, &[s1, s2], &[out]).unwrap();
    match d.evaluate(m, r) {
        Err(Error::Driver {
            code: Some(0x1d),
            op: Op::Evaluate,
            ..
        }) => {}
        other => panic!("expected status 0x1d, got {other:?}"),
    }
    let r = d.build_request(m, &[s1], &[out]).unwrap();
    match d.evaluate(m, r) {
        Err(Error::Driver {
            code: Some(0x2), ..
        }) => {}
        other => panic!("expected status 0x2, got {other:?}"),
    }
    let small = d.create_surface(64).unwrap();
    let r = d.build_request(m, &[small, small], &[out]).unwrap();
    assert!(matches!(
        d.evaluate(m, r),
        Err(Error::Driver {
            code: Some(0x1d),
            ..
        })
    ));
    let r = d.build_request(m, &[s1, s3], &[out]).unwrap();
    d.evaluate(m, r).unwrap();
}

#[test]
fn runtime_pads_unequal_inputs_to_one_surface_size() {
    let mil = "program(1.3)
{
  func main<ios18>(tensor<fp16, [1, 4, 1, 8]> big, tensor<fp16, [1, 1, 1, 8]> small) {
    tensor<fp16, [1, 4, 1, 8]> y = add(x = big, y = small)[name = string(\"y\")];
  } -> (y);
}
";
    let mut rt = Runtime::new(SimDriver::new());
    let mut k = rt.prepare(&ProgramSource::new(mil)).unwrap();
    assert_eq!(k.input_surface_size(), 4 * 64);
    let big: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let small: Vec<f32> = (0..8).map(|i| 100.0 * i as f32).collect();
    let y = rt
        .run(&mut k, &[("big", &big), ("small", &small)])
        .unwrap()
        .remove(0)
        .1;
    for c in 0..4 {
        for t in 0..8 {
            assert_eq!(y[c * 8 + t], big[c * 8 + t] + small[t]);
        }
    }
}

fn relu_program(tag: usize) -> ProgramSource {
    let mut b = FunctionBuilder::new("main");
    let x = b.input("x", DType::Fp16, &[1, 2, 1, 32]).unwrap();
    let y = b.relu(&format!("y{tag}"), &x).unwrap();
    b.output(&y);
    ProgramSource::new(anedvd_mil::print(&program(vec![b.finish()])))
}

#[test]
fn compile_budget_is_enforced_and_reuse_is_free() {
    let mut rt = Runtime::new(SimDriver::new()).with_compile_budget(3);
    let k0 = rt.prepare(&relu_program(0)).unwrap();
    let k1 = rt.prepare(&relu_program(1)).unwrap();
    let k2 = rt.prepare(&relu_program(2)).unwrap();
    assert_eq!(rt.compiles_left(), 0);
    match rt.prepare(&relu_program(3)) {
        Err(Error::CompileBudget { used: 3, limit: 3 }) => {}
        other => panic!("expected budget error, got {other:?}"),
    }
    // The same program again is served by the compiled copy.
    let k0b = rt.prepare(&relu_program(0)).unwrap();
    assert_eq!(rt.stats().cache_hits, 1);
    assert_eq!(rt.driver().compiles(), 3);
    rt.release(k0);
    rt.release(k0b);
    // Once no kernel holds it, it is unloaded and would need a new compile.
    assert!(matches!(
        rt.prepare(&relu_program(0)),
        Err(Error::CompileBudget { .. })
    ));
    rt.release(k1);
    rt.release(k2);
    assert_eq!(DEFAULT_COMPILE_BUDGET, 100);
}

#[test]
fn sim_driver_fails_past_the_observed_compile_limit() {
    let mut d = SimDriver::new();
    assert_eq!(SimDriver::DEFAULT_COMPILE_LIMIT, 119);
    let src = relu_program(0);
    for _ in 0..119 {
        let m = d.compile(&src).unwrap();
        d.release_model(m); // releasing does not give the compile back
    }
    let e = d.compile(&src).unwrap_err();
    assert!(e.to_string().contains("ANECCompile() FAILED"), "{e}");
    assert!(!e.is_transient());
    assert_eq!(d.compiles(), 120);
}

#[test]
fn transient_errors_are_retried_with_backoff() {
    let (mut rt, slept) = no_sleep_runtime(SimDriver::new());
    rt.driver_mut().inject_transient(Op::Compile, 1);
    rt.driver_mut().inject_transient(Op::Load, 1);
    let mut k = rt.prepare(&relu_program(0)).unwrap();
    assert_eq!(rt.stats().retries, 2);
    assert_eq!(rt.driver().compiles(), 2, "a failed compile still counts");
    rt.driver_mut().inject_transient(Op::Evaluate, 2);
    let x = vec![-1.0f32; 64];
    let y = rt.run(&mut k, &[("x", &x)]).unwrap().remove(0).1;
    assert!(y.iter().all(|&v| v == 0.0));
    assert_eq!(k.stats().retries, 2);
    let ms = |v: &[Duration]| v.iter().map(|d| d.as_millis()).collect::<Vec<_>>();
    assert_eq!(ms(&slept.lock().unwrap()), [100, 100, 100, 200]);

    // Persisting past the policy gives up with the last error.
    slept.lock().unwrap().clear();
    rt.driver_mut().inject_transient(Op::Evaluate, 100);
    match rt.run(&mut k, &[("x", &x)]) {
        Err(Error::RetriesExhausted {
            op: Op::Evaluate,
            attempts: 7,
            last,
        }) => {
            assert!(last.is_transient());
            assert!(last.to_string().contains("No ANE resources"));
        }
        other => panic!("expected RetriesExhausted, got {other:?}"),
    }
    assert_eq!(ms(&slept.lock().unwrap()), [100, 200, 400, 800, 1600, 3200]);
}

#[test]
fn permanent_errors_are_not_retried() {
    let (rt, slept) = no_sleep_runtime(SimDriver::new());
    let mut rt = rt.with_retry(RetryPolicy::default());
    let bad = ProgramSource::new("program(1.3) { nonsense");
    let e = rt.prepare(&bad).unwrap_err();
    assert!(e.to_string().contains("InvalidMILProgram"), "{e}");
    assert!(slept.lock().unwrap().is_empty());
    // A rule violation (inline literal `axis`, ANE-INLINE-ARG) is a compile failure too.
    let mil = "program(1.3)
{
  func main<ios18>(tensor<fp16, [1, 2, 1, 32]> x) {
    tensor<fp16, [1, 2, 1, 32]> y = softmax(x = x, axis = 1)[name = string(\"y\")];
  } -> (y);
}
";
    let e = rt.prepare(&ProgramSource::new(mil)).unwrap_err();
    assert!(e.to_string().contains("ANECCompile() FAILED"), "{e}");
}

#[test]
fn path_traversal_weight_keys_are_rejected() {
    let base = tempfile::tempdir().unwrap();
    let inner = base.path().join("models");
    let (cin, cout, s) = (32, 32, 32);
    let w = pseudo_random(3, cin * cout);
    let good = projection(cin, cout, s, &w);
    let blob = good.weights[W_KEY].clone();
    for key in [
        "@model_path/../evil.bin",
        "@model_path/weights/../../evil.bin",
        "@model_path//etc/evil.bin",
        "@model_path/./w.bin",
        "@model_path/",
        "/etc/evil.bin",
        "weights/w.bin",
        "@model_path/weights\\..\\evil.bin",
    ] {
        let mut src = good.clone();
        src.weights.insert(key.to_string(), blob.clone());
        let mut rt = Runtime::new(SimDriver::new().with_model_dir(&inner));
        match rt.prepare(&src) {
            Err(Error::WeightKey { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{key}: expected WeightKey error, got {other:?}"),
        }
        assert_eq!(
            rt.driver().compiles(),
            0,
            "{key}: rejected before compiling"
        );
    }
    assert!(!base.path().join("evil.bin").exists());
    assert!(!inner.exists(), "nothing written for rejected programs");
}

#[test]
fn model_directory_is_written_and_removed() {
    let base = tempfile::tempdir().unwrap();
    let w = pseudo_random(4, 32 * 32);
    let src = projection(32, 32, 32, &w);
    let mut d = SimDriver::new().with_model_dir(base.path());
    let m = d.compile(&src).unwrap();
    let dir = d.model_dir(m).unwrap().unwrap().path.clone();
    assert_eq!(dir, base.path().join(d.hex_identifier(m).unwrap()));
    assert_eq!(
        std::fs::read_to_string(dir.join("model.mil")).unwrap(),
        src.mil
    );
    assert_eq!(
        std::fs::read(dir.join("weights/w.bin")).unwrap(),
        src.weights[W_KEY]
    );
    d.release_model(m);
    assert!(!dir.exists());
}

#[test]
fn evaluate_before_load_fails() {
    let mut d = SimDriver::new();
    let m = d.compile(&relu_program(0)).unwrap();
    assert!(d.attributes(m).is_err());
    let s = d.create_surface(128).unwrap();
    let o = d.create_surface(128).unwrap();
    let r = d.build_request(m, &[s], &[o]).unwrap();
    assert!(d.evaluate(m, r).is_err());
    d.load(m).unwrap();
    d.evaluate(m, r).unwrap();
}

#[cfg(not(target_os = "macos"))]
#[test]
fn private_driver_reports_unavailable_off_macos() {
    use anedvd_ane::runtime::private::{probe, PrivateDriver};
    let e = PrivateDriver::open().unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Unavailable { .. }));
    assert!(
        msg.starts_with("ANE unavailable: cannot load /usr/lib/libobjc.A.dylib"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
    assert!(matches!(probe(), Err(Error::Unavailable { .. })));
}
