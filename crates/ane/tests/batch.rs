//! Many sequences per dispatch (`Executable::new_batch`): each sequence's
//! logits equal what it gets alone, bit for bit, on every family and both
//! host-attention variants, directly on the simulator and through the
//! runtime's simulated driver; the programs run once per pass, not once per
//! sequence; a failed call appends nothing.
#![allow(clippy::unwrap_used)]

use anedvd_ane::{AneBackend, AneSimBackend, DriverKind, LowerOptions, Variant};
use anedvd_graph::{Backend, BatchItem, Executable, LogitsMode};
use anedvd_testkit::fixtures::{self, Format};

/// Prompts of different lengths cycling through the reference prompt.
fn prompts(family: &str) -> Vec<Vec<u32>> {
    let r = fixtures::reference(family).prompt;
    [5usize, 13, 1, 21]
        .iter()
        .enumerate()
        .map(|(k, &n)| r.iter().copied().cycle().skip(k).take(n).collect())
        .collect()
}

/// Runs every prompt alone (all rows), then 3 greedy-free decode steps of
/// fixed tokens; returns each sequence's logits rows in order.
fn alone(exe: &dyn Executable, prompts: &[Vec<u32>]) -> Vec<Vec<f32>> {
    prompts
        .iter()
        .map(|p| {
            let mut s = exe.new_session(64).unwrap();
            let mut rows = s.forward(p, LogitsMode::All).unwrap().to_vec();
            for step in 0..3u32 {
                rows.extend_from_slice(s.forward(&[step + 1], LogitsMode::Last).unwrap());
            }
            rows
        })
        .collect()
}

/// The same through one batch: the prompts in one call (26 + 14 rows at
/// W 32: two passes, the 21-token prompt split across them), then decode
/// steps with every sequence in one pass.
fn batched(exe: &dyn Executable, prompts: &[Vec<u32>]) -> Vec<Vec<f32>> {
    let v = exe.vocab_size();
    let mut b = exe.new_batch(prompts.len(), 64).unwrap();
    let items: Vec<BatchItem> = prompts
        .iter()
        .enumerate()
        .map(|(seq, p)| BatchItem {
            seq,
            tokens: p,
            logits: LogitsMode::All,
        })
        .collect();
    let out = b.forward(&items).unwrap().to_vec();
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut at = 0;
    for p in prompts {
        rows.push(out[at..at + p.len() * v].to_vec());
        at += p.len() * v;
    }
    for step in 0..3u32 {
        let tok = [step + 1];
        let items: Vec<BatchItem> = (0..prompts.len())
            .map(|seq| BatchItem {
                seq,
                tokens: &tok,
                logits: LogitsMode::Last,
            })
            .collect();
        let out = b.forward(&items).unwrap().to_vec();
        for (seq, r) in rows.iter_mut().enumerate() {
            r.extend_from_slice(&out[seq * v..(seq + 1) * v]);
        }
    }
    rows
}

fn options(variant: Variant) -> LowerOptions {
    LowerOptions {
        variant,
        width: 32,
        ..Default::default()
    }
}

fn check(family: &str, tag: &str, exe: &dyn Executable) {
    let prompts = prompts(family);
    let want = alone(exe, &prompts);
    let got = batched(exe, &prompts);
    for (seq, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g == w,
            "{family} {tag}: sequence {seq} differs from its run alone"
        );
    }
}

#[test]
fn batched_sequences_equal_their_runs_alone_bit_for_bit() {
    for family in fixtures::ane_families() {
        let p = fixtures::program(family, Format::GgufF32);
        for variant in [Variant::Fused, Variant::Split] {
            let exe = AneSimBackend::new(options(variant)).compile(&p).unwrap();
            check(family, variant.name(), exe.as_ref());
        }
    }
}

#[test]
fn batched_sequences_through_the_runtime_driver() {
    for family in ["qwen2", "lfm2", "gemma4"] {
        let p = fixtures::program(family, Format::GgufF32);
        let backend = AneBackend::new(options(Variant::Fused), DriverKind::Sim);
        let exe = backend.compile(&p).unwrap();
        check(family, "fused on the simulated driver", exe.as_ref());
    }
}

/// A decode step of four sequences dispatches each program once, not four
/// times.
#[test]
fn one_pass_dispatches_each_program_once() {
    let p = fixtures::program("llama", Format::GgufF32);
    let exe = AneSimBackend::new(options(Variant::Fused))
        .compile_sim(&p)
        .unwrap();
    let mut b = exe.new_batch(4, 64).unwrap();
    let tok = [3u32];
    let items: Vec<BatchItem> = (0..4)
        .map(|seq| BatchItem {
            seq,
            tokens: &tok,
            logits: LogitsMode::Last,
        })
        .collect();
    let before = exe.dispatches_executed();
    b.forward(&items).unwrap();
    let used = exe.dispatches_executed() - before;
    assert_eq!(used as usize, exe.dispatches_per_token());
}

/// A call that fails (a token past the vocabulary) appends nothing to any
/// sequence; an empty call runs nothing.
#[test]
fn a_failed_call_appends_nothing() {
    let p = fixtures::program("qwen2", Format::GgufF32);
    let exe = AneSimBackend::new(options(Variant::Fused))
        .compile_sim(&p)
        .unwrap();
    let mut b = exe.new_batch(2, 64).unwrap();
    let ok = [1u32, 2, 3];
    let bad = [1u32, u32::MAX];
    let items = [
        BatchItem {
            seq: 0,
            tokens: &ok,
            logits: LogitsMode::Last,
        },
        BatchItem {
            seq: 1,
            tokens: &bad,
            logits: LogitsMode::Last,
        },
    ];
    assert!(b.forward(&items).is_err());
    assert_eq!((b.position(0), b.position(1)), (0, 0));
    // nothing to run: no pass, no logits
    let before = exe.dispatches_executed();
    assert!(b.forward(&[]).unwrap().is_empty());
    assert_eq!(exe.dispatches_executed(), before);
}
