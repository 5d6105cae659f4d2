//! The e5rt path through the simulated driver: several inputs and outputs of
//! different sizes, a state aliased output → input accumulating across
//! executes, every refusal the evidence records (each with its own error),
//! weights read back from the model directory, one compiled function
//! serving several programs with their own buffers, release (and its
//! order), and the real driver's refusal where Espresso does not exist.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use anedvd_ane_runtime::e5rt::{
    E5rtApi, E5rtPrograms, E5rtRuntime, E5rtSim, MAIN_FUNCTION, PROGRAM_LIMIT,
};
use anedvd_ane_runtime::{E5rtStep, Error, ProgramSource};
use anedvd_mil::blob::{BlobLayout, BlobWriter};
use anedvd_mil::builder::{program, FunctionBuilder};
use anedvd_mil::ir::DType;

const W_KEY: &str = "@model_path/weights/w.bin";

fn text(b: FunctionBuilder) -> String {
    anedvd_mil::print(&program(vec![b.finish()]))
}

/// Inputs `a [1, 3, 1, 5]`, `b [1, 2, 1, 3]`; outputs `y = relu(a)` (15
/// values) and `z = b · b` (6 values), returned z first.
fn two_by_two() -> ProgramSource {
    let mut f = FunctionBuilder::new("main");
    let a = f.input("a", DType::Fp16, &[1, 3, 1, 5]).unwrap();
    let b = f.input("b", DType::Fp16, &[1, 2, 1, 3]).unwrap();
    let y = f.relu("y", &a).unwrap();
    let z = f.mul("z", &b, &b).unwrap();
    f.output(&z);
    f.output(&y);
    ProgramSource::new(text(f))
}

/// `s_next = s + x` over `[1, 4, 1, 8]` (64 bytes fp16 per port).
fn accumulator() -> ProgramSource {
    let mut f = FunctionBuilder::new("main");
    let s = f.input("s", DType::Fp16, &[1, 4, 1, 8]).unwrap();
    let x = f.input("x", DType::Fp16, &[1, 4, 1, 8]).unwrap();
    let n = f.add("s_next", &s, &x).unwrap();
    f.output(&n);
    ProgramSource::new(text(f))
}

/// `y = relu(x)` over `[1, 8, 1, 8]` (128 bytes fp16).
fn relu_8x8() -> ProgramSource {
    let mut f = FunctionBuilder::new("main");
    let x = f.input("x", DType::Fp16, &[1, 8, 1, 8]).unwrap();
    let y = f.relu("y", &x).unwrap();
    f.output(&y);
    ProgramSource::new(text(f))
}

/// `y[1, cout, 1, s] = W · x` as a 1×1 conv with a BLOBFILE weight.
fn projection(cin: usize, cout: usize, s: usize, w: &[f32]) -> ProgramSource {
    let mut blob = BlobWriter::new(BlobLayout::Aligned);
    let off = blob.add_f32_as_f16(w);
    let mut f = FunctionBuilder::new("main");
    let x = f.input("x", DType::Fp16, &[1, cin, 1, s]).unwrap();
    let wv = f
        .const_blob("w", DType::Fp16, &[cout, cin, 1, 1], W_KEY, off)
        .unwrap();
    let y = f.conv("y", &x, &wv).unwrap();
    f.output(&y);
    ProgramSource::new(text(f)).with_weight(W_KEY, blob.finish())
}

fn runtime() -> E5rtRuntime<E5rtSim> {
    E5rtRuntime::new(E5rtSim::new())
}

fn fp16(v: f32) -> f32 {
    half::f16::from_f32(v).to_f32()
}

fn e5rt_step(e: &Error) -> Option<E5rtStep> {
    match e {
        Error::E5rt { step, .. } => Some(*step),
        _ => None,
    }
}

/// Writes `src` as `dir/model.mil` (+ weights) for driver-level tests.
fn write_model(dir: &Path, src: &ProgramSource) -> PathBuf {
    anedvd_ane_runtime::modeldir::write_program_files(dir, src).unwrap();
    dir.join("model.mil")
}

#[test]
fn two_inputs_two_outputs_of_different_sizes() {
    let mut rt = runtime();
    let mut p = rt.prepare(&two_by_two()).unwrap();
    let ins: Vec<(String, usize)> = p.inputs().map(|s| (s.name.clone(), s.bytes())).collect();
    let outs: Vec<(String, usize)> = p.outputs().map(|s| (s.name.clone(), s.bytes())).collect();
    // dense fp16 in the MIL shape: 15 and 6 values, no row padding
    assert_eq!(ins, [("a".to_string(), 30), ("b".to_string(), 12)]);
    assert_eq!(outs, [("z".to_string(), 12), ("y".to_string(), 30)]);
    let a: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
    let b = [1.5, -2.0, 3.0, 0.1, -0.5, 4.0];
    // written in the other order than declared: ports are matched by name
    let out = rt.run(&mut p, &[("b", &b), ("a", &a)]).unwrap();
    let relu: Vec<f32> = a.iter().map(|v| v.max(0.0)).collect();
    let square: Vec<f32> = b.iter().map(|&v| fp16(fp16(v) * fp16(v))).collect();
    assert_eq!(out[0], ("z".to_string(), square));
    assert_eq!(out[1], ("y".to_string(), relu));
    // an input reads back what was written, rounded to fp16
    assert_eq!(rt.read(&mut p, "b").unwrap()[3], fp16(0.1));
    assert_ne!(fp16(0.1), 0.1);
    rt.release(p);
    assert_eq!(rt.api().live_objects(), 0);
}

#[test]
fn aliased_state_accumulates_across_three_executes() {
    let mut rt = runtime();
    let mut p = rt.prepare(&accumulator()).unwrap();
    let unaliased = rt.api().live_objects();
    rt.alias(&mut p, "s_next", "s").unwrap();
    assert_eq!(p.aliases(), [("s_next".to_string(), "s".to_string())]);
    // the input's own buffer is given back at once
    let before = rt.api().live_objects();
    assert_eq!(before, unaliased - 1);
    let seed: Vec<f32> = (0..32).map(|i| i as f32).collect();
    rt.write(&mut p, "s", &seed).unwrap();
    let steps = [
        vec![1.0; 32],
        (0..32).map(|i| 0.5 * i as f32).collect::<Vec<_>>(),
        vec![-2.0; 32],
    ];
    let mut want = seed.clone();
    for x in &steps {
        rt.write(&mut p, "x", x).unwrap();
        rt.execute(&mut p).unwrap();
        for (w, v) in want.iter_mut().zip(x) {
            *w += v;
        }
    }
    // by hand: s = i + 1 + i/2 - 2 = 1.5 i - 1
    let by_hand: Vec<f32> = (0..32).map(|i| 1.5 * i as f32 - 1.0).collect();
    assert_eq!(want, by_hand);
    assert_eq!(rt.read(&mut p, "s").unwrap(), by_hand);
    assert_eq!(rt.read(&mut p, "s_next").unwrap(), by_hand);
    assert_eq!(rt.api().live_objects(), before);
    let st = p.stats();
    assert_eq!(st.evals, 3);
    assert!(st.eval_min.unwrap() <= st.eval_mean().unwrap());
    rt.release(p);

    // without the alias the input keeps its seed: each execute starts over
    let mut q = rt.prepare(&accumulator()).unwrap();
    rt.write(&mut q, "s", &seed).unwrap();
    for x in &steps {
        rt.write(&mut q, "x", x).unwrap();
        rt.execute(&mut q).unwrap();
    }
    let last: Vec<f32> = seed.iter().map(|s| s - 2.0).collect();
    assert_eq!(rt.read(&mut q, "s_next").unwrap(), last);
    assert_eq!(rt.read(&mut q, "s").unwrap(), seed);
    rt.release(q);
    assert_eq!(rt.api().live_objects(), 0);
}

#[test]
fn weights_are_read_from_the_model_directory() {
    let (cin, cout, s) = (6, 5, 3);
    let w: Vec<f32> = (0..cin * cout)
        .map(|i| (i % 7) as f32 * 0.25 - 0.75)
        .collect();
    let x: Vec<f32> = (0..cin * s).map(|i| (i % 5) as f32 - 2.0).collect();
    let tmp = tempfile::tempdir().unwrap();
    let mut rt = runtime().with_work_dir(tmp.path());
    let mut p = rt.prepare(&projection(cin, cout, s, &w)).unwrap();
    let dir = p.dir().path.clone();
    assert!(dir.join("weights/w.bin").is_file() && dir.join("model.mil").is_file());
    let y = rt.run(&mut p, &[("x", &x)]).unwrap().remove(0).1;
    for o in 0..cout {
        for t in 0..s {
            // small integers and quarters: every product and sum is exact in fp16
            let want: f32 = (0..cin).map(|i| w[o * cin + i] * x[i * s + t]).sum();
            assert_eq!(y[o * s + t], want, "({o}, {t})");
        }
    }
    rt.release(p);
    assert!(!dir.exists(), "the model directory is removed on release");
}

#[test]
fn unknown_port_names_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = E5rtSim::new();
    let lib = d
        .compile(&write_model(tmp.path(), &two_by_two()), tmp.path())
        .unwrap();
    let e = d.retain_function(lib, "other").unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::RetainFunction), "{e}");
    let f = d.retain_function(lib, MAIN_FUNCTION).unwrap();
    let op = d.create_operation(f).unwrap();
    let e = d.retain_input_port(op, "nope").unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::RetainPort));
    assert!(e.to_string().contains("no input port `nope`"), "{e}");
    // an output's name is not an input port, and the reverse
    assert!(d.retain_input_port(op, "y").is_err());
    assert!(d.retain_output_port(op, "a").is_err());
    d.retain_output_port(op, "y").unwrap();

    let mut rt = runtime();
    let mut p = rt.prepare(&two_by_two()).unwrap();
    let e = rt.write(&mut p, "nope", &[0.0]).unwrap_err().to_string();
    assert!(e.contains("no such input (inputs: a, b)"), "{e}");
    let e = rt.write(&mut p, "y", &[0.0; 15]).unwrap_err().to_string();
    assert!(e.contains("is an output"), "{e}");
    let e = rt.read(&mut p, "nope").unwrap_err().to_string();
    assert!(e.contains("no such port"), "{e}");
    let e = rt.alias(&mut p, "a", "b").unwrap_err().to_string();
    assert!(e.contains("no such output"), "{e}");
    rt.release(p);
}

#[test]
fn a_buffer_smaller_than_its_port_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = E5rtSim::new();
    let lib = d
        .compile(&write_model(tmp.path(), &relu_8x8()), tmp.path())
        .unwrap();
    let f = d.retain_function(lib, MAIN_FUNCTION).unwrap();
    let op = d.create_operation(f).unwrap();
    let port = d.retain_input_port(op, "x").unwrap();
    // 100 bytes are rounded up to the next multiple of 64: the port's 128
    let rounded = d.alloc_buffer(100).unwrap();
    assert_eq!(d.buffer_len(rounded).unwrap(), 128);
    let tiny = d.alloc_buffer(64).unwrap();
    assert_eq!(d.buffer_len(tiny).unwrap(), 64);
    let e = d.bind(port, tiny).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::Bind));
    assert!(
        e.to_string().contains("smaller than port `x` (128 bytes"),
        "{e}"
    );
    d.bind(port, rounded).unwrap();

    // shapes are baked: the runtime refuses a wrong number of values
    let mut rt = runtime();
    let mut p = rt.prepare(&relu_8x8()).unwrap();
    let e = rt.write(&mut p, "x", &[1.0; 63]).unwrap_err().to_string();
    assert!(e.contains("holds 64 values") && e.contains("baked"), "{e}");
    rt.release(p);
}

#[test]
fn execute_before_every_port_is_bound_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = E5rtSim::new();
    let lib = d
        .compile(&write_model(tmp.path(), &two_by_two()), tmp.path())
        .unwrap();
    let f = d.retain_function(lib, MAIN_FUNCTION).unwrap();
    let op = d.create_operation(f).unwrap();
    for (name, bytes) in [("a", 30), ("b", 12)] {
        let port = d.retain_input_port(op, name).unwrap();
        let buf = d.alloc_buffer(bytes).unwrap();
        d.bind(port, buf).unwrap();
    }
    let y = d.retain_output_port(op, "y").unwrap();
    let buf = d.alloc_buffer(30).unwrap();
    d.bind(y, buf).unwrap();
    let stream = d.create_stream().unwrap();
    let e = d.execute(stream).unwrap_err();
    assert!(e.to_string().contains("no operation is encoded"), "{e}");
    d.encode(stream, op).unwrap();
    let e = d.execute(stream).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::Execute));
    assert!(
        e.to_string().contains("port `z` has no buffer bound"),
        "{e}"
    );
}

#[test]
fn aliasing_after_the_first_encode_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = E5rtSim::new();
    let lib = d
        .compile(&write_model(tmp.path(), &accumulator()), tmp.path())
        .unwrap();
    let f = d.retain_function(lib, MAIN_FUNCTION).unwrap();
    let op = d.create_operation(f).unwrap();
    let mut ports = Vec::new();
    for name in ["s", "x"] {
        let port = d.retain_input_port(op, name).unwrap();
        let buf = d.alloc_buffer(64).unwrap();
        d.bind(port, buf).unwrap();
        ports.push(port);
    }
    let out = d.retain_output_port(op, "s_next").unwrap();
    let out_buf = d.alloc_buffer(64).unwrap();
    d.bind(out, out_buf).unwrap();
    let stream = d.create_stream().unwrap();
    d.encode(stream, op).unwrap();
    d.execute(stream).unwrap();
    let e = d.bind(ports[0], out_buf).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::Bind));
    assert!(e.to_string().contains("already encoded"), "{e}");
    let e = d.encode(stream, op).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::Encode));

    // the runtime encodes on the first execute, and refuses to alias after it
    let mut rt = runtime();
    let mut p = rt.prepare(&accumulator()).unwrap();
    rt.execute(&mut p).unwrap();
    assert!(p.is_encoded());
    let e = rt.alias(&mut p, "s_next", "s").unwrap_err().to_string();
    assert!(e.contains("after the first execute"), "{e}");
    rt.release(p);
}

/// `y = relu(s)` over `[1, 4, 1, 8]`: reads the accumulator's state.
fn state_reader() -> ProgramSource {
    let mut f = FunctionBuilder::new("main");
    let s = f.input("s", DType::Fp16, &[1, 4, 1, 8]).unwrap();
    let y = f.relu("y", &s).unwrap();
    f.output(&y);
    ProgramSource::new(text(f))
}

/// A state one program keeps (aliased) is read by a second program whose
/// input is bound to the same buffer: after each execute of the first, the
/// second reads the new state, with no host copy; the checks of `alias`
/// hold (shape, type, before the first execute), and the driver refuses a
/// port of another layout on a shared buffer.
#[test]
fn a_state_is_read_by_a_second_program_bound_to_its_buffer() {
    let mut rt = runtime();
    let mut a = rt.prepare(&accumulator()).unwrap();
    rt.alias(&mut a, "s_next", "s").unwrap();
    let mut b = rt.prepare(&state_reader()).unwrap();
    let own = rt.api().live_objects();
    rt.bind_from(&a, "s_next", &mut b, "s").unwrap();
    // the reader's own buffer is given back; the state stays the keeper's
    assert_eq!(rt.api().live_objects(), own - 1);
    let mut want = [0f32; 32];
    for step in 0..3 {
        let x: Vec<f32> = (0..32)
            .map(|i| (i as f32 - 10.0) * (step + 1) as f32)
            .collect();
        rt.write(&mut a, "x", &x).unwrap();
        rt.execute(&mut a).unwrap();
        want.iter_mut().zip(&x).for_each(|(w, v)| *w += v);
        rt.execute(&mut b).unwrap();
        let relu: Vec<f32> = want.iter().map(|v| v.max(0.0)).collect();
        assert_eq!(rt.read(&mut b, "y").unwrap(), relu, "step {step}");
    }
    // another shape, or after the first execute: refused
    let mut c = rt.prepare(&relu_8x8()).unwrap();
    let e = rt
        .bind_from(&a, "s_next", &mut c, "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("shapes or types differ"), "{e}");
    let e = rt
        .bind_from(&a, "s_next", &mut b, "s")
        .unwrap_err()
        .to_string();
    assert!(e.contains("after the first execute"), "{e}");
    // the reader first: it holds no buffer of the keeper's
    for p in [c, b, a] {
        rt.release(p);
    }
    assert_eq!(rt.api().live_objects(), 0);

    // the driver: a buffer shared by ports of one layout only
    let tmp = tempfile::tempdir().unwrap();
    let mut d = E5rtSim::new();
    let dir = |n: &str| {
        let p = tmp.path().join(n);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let lib = d
        .compile(&write_model(&dir("acc"), &accumulator()), tmp.path())
        .unwrap();
    let f = d.retain_function(lib, MAIN_FUNCTION).unwrap();
    let op = d.create_operation(f).unwrap();
    let out = d.retain_output_port(op, "s_next").unwrap();
    let buf = d.alloc_buffer(128).unwrap();
    d.bind(out, buf).unwrap();
    let lib = d
        .compile(&write_model(&dir("relu"), &relu_8x8()), tmp.path())
        .unwrap();
    let f = d.retain_function(lib, MAIN_FUNCTION).unwrap();
    let other = d.create_operation(f).unwrap();
    let x = d.retain_input_port(other, "x").unwrap();
    // 128 bytes hold the [1, 8, 1, 8] port, but the buffer is a [1, 4, 1, 8] one's
    let e = d.bind(x, buf).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::Bind));
    assert!(e.to_string().contains("one shape and type"), "{e}");
}

#[test]
fn aliasing_ports_of_different_shapes_is_refused() {
    let mut rt = runtime();
    let mut p = rt.prepare(&two_by_two()).unwrap();
    let e = rt.alias(&mut p, "z", "a").unwrap_err().to_string();
    assert!(e.contains("shapes or types differ"), "{e}");
    assert!(p.aliases().is_empty());
    rt.release(p);
}

#[test]
fn one_compiled_function_serves_programs_with_separate_buffers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rt = runtime().with_work_dir(tmp.path());
    let f = rt.compile(&accumulator()).unwrap();
    // compiled, nothing loaded yet
    assert_eq!((rt.compiles(), rt.api().compiles()), (1, 1));
    assert_eq!(rt.api().loaded_programs(), 0);
    let (ins, outs) = rt.function_ports(f).unwrap();
    assert_eq!((ins.len(), outs.len()), (2, 1));
    let mut a = rt.instantiate(f).unwrap();
    let mut b = rt.instantiate(f).unwrap();
    // two operations from one compile
    assert_eq!(rt.compiles(), 1);
    assert_eq!(rt.api().compiles(), 1);
    assert_eq!(rt.api().operations_created(), 2);
    assert_eq!(rt.api().loaded_programs(), 2);
    assert_eq!(rt.programs_from(f), Some(2));
    assert_eq!(a.dir(), b.dir());
    // each keeps its own state: a accumulates 1s from 0, b 3s from 10
    for (p, seed) in [(&mut a, 0.0), (&mut b, 10.0)] {
        rt.alias(p, "s_next", "s").unwrap();
        rt.write(p, "s", &[seed; 32]).unwrap();
    }
    for _ in 0..2 {
        rt.write(&mut a, "x", &[1.0; 32]).unwrap();
        rt.execute(&mut a).unwrap();
        rt.write(&mut b, "x", &[3.0; 32]).unwrap();
        rt.execute(&mut b).unwrap();
    }
    assert_eq!(rt.read(&mut a, "s").unwrap(), [2.0; 32]);
    assert_eq!(rt.read(&mut b, "s").unwrap(), [16.0; 32]);

    // the function outlives its programs, never the reverse
    let e = rt.release_function(f).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::Release), "{e}");
    assert!(e.to_string().contains("2 live program(s)"), "{e}");
    rt.release(a);
    assert_eq!(rt.programs_from(f), Some(1));
    assert!(rt.release_function(f).is_err());
    // releasing a program leaves the function: a new one needs no compile
    let c = rt.instantiate(f).unwrap();
    assert_eq!(rt.api().compiles(), 1);
    rt.release(b);
    rt.release(c);
    assert_eq!(rt.programs_from(f), Some(0));
    let dir = tmp.path().read_dir().unwrap().count();
    assert_eq!(dir, 1, "the function's model directory stays");
    rt.release_function(f).unwrap();
    assert_eq!(tmp.path().read_dir().unwrap().count(), 0);
    assert_eq!(rt.api().live_objects(), 0);
    assert!(
        rt.api().violations().is_empty(),
        "{:?}",
        rt.api().violations()
    );

    // a released function is gone
    match rt.instantiate(f) {
        Err(Error::Handle {
            kind: "function", ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(rt.release_function(f), Err(Error::Handle { .. })));
    assert_eq!(rt.programs_from(f), None);

    // compiling loads nothing; each program counts against the budget
    let mut rt = runtime().with_program_budget(1);
    let f = rt.compile(&relu_8x8()).unwrap();
    let g = rt.compile(&accumulator()).unwrap();
    assert_eq!(rt.programs_left(), 1);
    let p = rt.instantiate(f).unwrap();
    match rt.instantiate(g) {
        Err(Error::ProgramBudget {
            loaded: 1,
            limit: 1,
        }) => {}
        other => panic!("{other:?}"),
    }
    // the refused instantiate left nothing behind, and the function stays
    assert_eq!(rt.programs_from(g), Some(0));
    rt.release(p);
    let q = rt.instantiate(g).unwrap();
    rt.release(q);
    // idle functions (and their libraries) are released with the runtime
    assert_eq!(rt.functions(), 2);
    let base = {
        let p = rt.instantiate(f).unwrap();
        let base = p.dir().path.parent().unwrap().to_path_buf();
        rt.release(p);
        base
    };
    assert!(base.exists());
    drop(rt);
    assert!(!base.exists());
}

#[test]
fn the_simulated_driver_refuses_releasing_what_is_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = E5rtSim::new();
    let lib = d
        .compile(&write_model(tmp.path(), &relu_8x8()), tmp.path())
        .unwrap();
    let f = d.retain_function(lib, MAIN_FUNCTION).unwrap();
    let op1 = d.create_operation(f).unwrap();
    let op2 = d.create_operation(f).unwrap();
    assert_eq!(d.operations_from(f), 2);
    assert_eq!(d.compiles(), 1);
    // out of order: the function has live operations, the library a function
    d.release_function(f);
    d.release_library(lib);
    assert_eq!(d.violations().len(), 2);
    assert!(
        d.violations()[0].contains("2 operation(s)"),
        "{:?}",
        d.violations()
    );
    assert!(
        d.violations()[1].contains("1 function(s)"),
        "{:?}",
        d.violations()
    );
    // both refused releases left the objects alive: one more operation works
    let op3 = d.create_operation(f).unwrap();
    // in order: operations, function, library
    for op in [op1, op2, op3] {
        d.release_operation(op);
    }
    d.release_function(f);
    d.release_library(lib);
    assert_eq!(d.violations().len(), 2);
    assert_eq!(d.live_objects(), 0);
}

#[test]
fn loaded_programs_are_a_counted_budget() {
    // the driver: ~128 live operations per process
    let tmp = tempfile::tempdir().unwrap();
    let mut d = E5rtSim::new();
    let lib = d
        .compile(&write_model(tmp.path(), &relu_8x8()), tmp.path())
        .unwrap();
    let f = d.retain_function(lib, MAIN_FUNCTION).unwrap();
    let ops: Vec<_> = (0..PROGRAM_LIMIT)
        .map(|_| d.create_operation(f).unwrap())
        .collect();
    assert_eq!(d.loaded_programs(), 128);
    let e = d.create_operation(f).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::CreateOperation));
    assert!(e.to_string().contains("128 programs already loaded"), "{e}");
    d.release_operation(ops[0]);
    d.create_operation(f).unwrap();

    // the runtime refuses before the driver's wall, and counts releases
    let mut rt = runtime().with_program_budget(2);
    let p1 = rt.prepare(&relu_8x8()).unwrap();
    let p2 = rt.prepare(&accumulator()).unwrap();
    assert_eq!(rt.programs_left(), 0);
    match rt.prepare(&relu_8x8()) {
        Err(Error::ProgramBudget {
            loaded: 2,
            limit: 2,
        }) => {}
        other => panic!("{other:?}"),
    }
    rt.release(p1);
    let p3 = rt.prepare(&relu_8x8()).unwrap();
    assert_eq!(rt.compiles(), 3);
    rt.release(p2);
    rt.release(p3);

    // the driver's own wall below the runtime's budget surfaces as is
    let mut rt = E5rtRuntime::new(E5rtSim::new().with_program_limit(1));
    let p = rt.prepare(&relu_8x8()).unwrap();
    let e = rt.prepare(&relu_8x8()).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::CreateOperation), "{e}");
    // the failed prepare left nothing behind
    let live = rt.api().live_objects();
    rt.release(p);
    assert!(live > 0);
    assert_eq!(rt.api().live_objects(), 0);
}

#[test]
fn symbolic_shapes_and_rejected_ops_do_not_compile() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = E5rtSim::new();
    let symbolic = "program(1.3)\n{\n  func main<ios18>(tensor<fp16, [1, is0]> x) {\n    \
                    tensor<fp16, [1, is0]> y = relu(x = x)[name = string(\"y\")];\n  } -> (y);\n}\n";
    let mil = write_model(tmp.path(), &ProgramSource::new(symbolic));
    let e = d.compile(&mil, tmp.path()).unwrap_err();
    assert_eq!(e5rt_step(&e), Some(E5rtStep::Compile));
    assert!(e.to_string().contains("shapes are baked"), "{e}");

    // `acos` is not implemented on the ANE through e5rt (ANEForge's sweep)
    let mut f = FunctionBuilder::new("main");
    let x = f.input("x", DType::Fp16, &[1, 4]).unwrap();
    let y = f.unary("acos", "y", &x).unwrap();
    f.output(&y);
    let mil = write_model(tmp.path(), &ProgramSource::new(text(f)));
    let e = d.compile(&mil, tmp.path()).unwrap_err().to_string();
    assert!(e.contains("ANE-OP") && e.contains("acos"), "{e}");

    // a referenced weight file that is not on disk
    std::fs::remove_file(tmp.path().join("weights/w.bin")).ok();
    let src = projection(2, 2, 1, &[1.0; 4]);
    let mil = tmp.path().join("model.mil");
    std::fs::write(&mil, &src.mil).unwrap();
    let e = d.compile(&mil, tmp.path()).unwrap_err().to_string();
    assert!(e.contains("weight file") && e.contains("w.bin"), "{e}");
    assert_eq!(d.compiles(), 0);
}

#[test]
fn named_programs_need_one_input_and_one_output() {
    let mut progs = E5rtPrograms::new(runtime());
    let e = progs.add("two", &two_by_two()).unwrap_err().to_string();
    assert!(e.contains("2 inputs and 2 outputs"), "{e}");
    progs.add("relu", &relu_8x8()).unwrap();
    let x: Vec<f32> = (0..64).map(|i| i as f32 - 30.0).collect();
    let y = progs.run("relu", &x).unwrap();
    assert_eq!(y, x.iter().map(|v| v.max(0.0)).collect::<Vec<_>>());
    assert!(progs.run("nope", &x).is_err());
    assert_eq!(progs.stats("relu").unwrap().evals, 1);
    assert_eq!(progs.names().collect::<Vec<_>>(), ["relu"]);
    // the refused program was released, the kept one is live
    assert_eq!(progs.runtime().api().loaded_programs(), 1);
}

#[test]
fn the_work_directory_is_removed_with_the_runtime() {
    let mut rt = runtime();
    let p = rt.prepare(&relu_8x8()).unwrap();
    let base = p.dir().path.parent().unwrap().to_path_buf();
    assert!(base.is_dir());
    rt.release(p);
    drop(rt);
    assert!(!base.exists(), "{}", base.display());
}

#[cfg(not(target_os = "macos"))]
#[test]
fn the_real_driver_reports_ane_unavailable_off_macos() {
    use anedvd_ane_runtime::e5rt::{private, E5rtPrivate};
    let e = E5rtPrivate::open().unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(
        msg.starts_with(
            "ANE unavailable: cannot load \
             /System/Library/PrivateFrameworks/Espresso.framework/Espresso"
        ),
        "{msg}"
    );
    assert!(msg.contains("the ANE needs macOS"), "{msg}");
    assert!(!msg.contains('\n'));
    assert!(matches!(private::probe(), Err(Error::Unavailable { .. })));
    assert_eq!(private::SYMBOLS.len(), 31);
}
