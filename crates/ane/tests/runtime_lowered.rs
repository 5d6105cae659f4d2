//! Lowered decoder kernels (`anedvd_ane::lower`, tiny qwen2 fixture) through
//! the runtime on the simulated driver: the q/k/v projection against an f32
//! matmul over the GGUF's own tensors, and every kernel of both variants
//! bit-identical to a direct simulator run (strides/binding/padding plumbing).

#![allow(clippy::unwrap_used)]

use anedvd_ane::backend::check::pseudo_random;
use anedvd_testkit::fixtures::{self, Format};

use anedvd_ane::lower::{lower, LowerOptions, Variant};
use anedvd_ane::runtime::{ProgramSource, Runtime, SimDriver};
use anedvd_base::WeightSource;
use anedvd_mil::sim::{Simulator, Tensor};

fn program() -> anedvd_graph::DecoderProgram {
    fixtures::program("qwen2", Format::GgufF32)
}

/// An f32 tensor straight from the GGUF bytes (ggml shape `[cols, rows]`).
fn f32_tensor(src: &dyn WeightSource, name: &str) -> (Vec<f32>, usize) {
    let t = src.tensor(name).unwrap();
    assert_eq!(format!("{:?}", t.info.dtype), "F32", "{name}");
    let v: Vec<f32> = t
        .data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (v, t.info.shape[0] as usize)
}

#[test]
fn lowered_qkv_matches_f32_matmul_over_gguf_tensors() {
    let p = program();
    let o = LowerOptions {
        variant: Variant::Split,
        ..Default::default()
    };
    let w = o.width;
    let l = lower(&p, &o).unwrap();
    let k = l.kernel("blk.0.qkv").unwrap();
    let d = p.n_embd;
    // Reference: [Wq; Wk; Wv] x + [bq; bk; bv], read from the file here.
    let a = p.layers[0].attention().unwrap();
    let mut wts = Vec::new();
    let mut bias = Vec::new();
    for (wr, br) in [(&a.wq, &a.bias.q), (&a.wk, &a.bias.k), (&a.wv, &a.bias.v)] {
        let (m, cols) = f32_tensor(p.weights.as_ref(), wr);
        assert_eq!(cols, d);
        let rows = m.len() / d;
        wts.extend(m);
        match br {
            Some(b) => bias.extend(f32_tensor(p.weights.as_ref(), b).0),
            None => bias.extend(vec![0.0; rows]),
        }
    }
    let cout = bias.len();
    assert_eq!(cout, k.out_channels);
    assert!(bias.iter().any(|&b| b != 0.0), "qwen2 has q/k/v biases");
    let x = pseudo_random(11, d * w);
    let mut rt = Runtime::new(SimDriver::new());
    let mut kern = rt
        .prepare(&ProgramSource::from_program(&k.program, &k.weights))
        .unwrap();
    let y = rt.run(&mut kern, &[("x", &x)]).unwrap().remove(0).1;
    assert_eq!(y.len(), cout * w);
    for o in 0..cout {
        for t in 0..w {
            let (mut r, mut mag) = (bias[o], bias[o].abs());
            for i in 0..d {
                r += wts[o * d + i] * x[i * w + t];
                mag += (wts[o * d + i] * x[i * w + t]).abs();
            }
            let got = y[o * w + t];
            assert!(
                (got - r).abs() <= 4e-3 * mag + 1e-4,
                "row {o} col {t}: {got} vs {r}"
            );
        }
    }
}

#[test]
fn every_lowered_kernel_runs_identically_through_the_runtime() {
    let p = program();
    let mut n = 0;
    for variant in [Variant::Split, Variant::Fused] {
        let o = LowerOptions {
            variant,
            vocab_slice: 128,
            ..Default::default()
        };
        let w = o.width;
        let mut rt = Runtime::new(SimDriver::new());
        for k in lower(&p, &o).unwrap().kernels {
            let x = pseudo_random(n as u64, k.in_channels * w);
            let mut kern = rt
                .prepare(&ProgramSource::from_program(&k.program, &k.weights))
                .unwrap();
            let got = rt.run(&mut kern, &[("x", &x)]).unwrap().remove(0).1;
            let direct = Simulator::new_unchecked(&k.program, &k.weights)
                .run(
                    "main",
                    &[("x", Tensor::f16(&[1, k.in_channels, 1, w], &x).unwrap())],
                )
                .unwrap()
                .remove(0)
                .1
                .to_f32();
            assert_eq!(got, direct, "{} ({})", k.name, variant.name());
            rt.release(kern);
            n += 1;
        }
    }
    assert!(n >= 8, "{n} kernels");
}

#[test]
fn programs_prepare_a_whole_lowering_once_and_dispatch_by_name() {
    use anedvd_ane::runtime::{Driver, Programs};
    let p = program();
    let o = LowerOptions {
        variant: Variant::Fused,
        vocab_slice: 128,
        ..Default::default()
    };
    let l = lower(&p, &o).unwrap();
    let mut progs = Programs::new(Runtime::new(SimDriver::new()));
    for k in &l.kernels {
        progs
            .add(
                &k.name,
                &ProgramSource::from_program(&k.program, &k.weights),
            )
            .unwrap();
    }
    assert_eq!(progs.names().count(), l.kernels.len());
    assert_eq!(
        progs.runtime().driver().compiles() as usize,
        l.kernels.len(),
        "one compile per program"
    );
    for (i, k) in l.kernels.iter().enumerate() {
        let x = pseudo_random(100 + i as u64, k.in_channels * o.width);
        for _ in 0..2 {
            let y = progs.run(&k.name, &x).unwrap();
            assert_eq!(y.len(), k.out_channels * o.width, "{}", k.name);
        }
        assert_eq!(progs.stats(&k.name).unwrap().evals, 2);
    }
    assert!(progs.run("nope", &[]).is_err());
    let two_inputs = "program(1.3)
{
  func main<ios18>(tensor<fp16, [1, 2, 1, 8]> x, tensor<fp16, [1, 2, 1, 8]> a) {
    tensor<fp16, [1, 2, 1, 8]> y = sub(x = x, y = a)[name = string(\"y\")];
  } -> (y);
}
";
    assert!(progs.add("two", &ProgramSource::new(two_inputs)).is_err());
}
