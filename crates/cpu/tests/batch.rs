//! The batched multi-sequence forward against HF transformers: several
//! sequences walk the fixture prompt on different schedules (different
//! positions and chunk lengths in the same pass, some sequences idle), and
//! every logits row returned must match transformers' logits at that
//! position (tests/fixtures/models/<family>/reference.json, F32 GGUF).
#![allow(clippy::unwrap_used)]

use anedvd_cpu::CpuBackend;
use anedvd_graph::{Backend, BatchItem, Error, Executable, LogitsMode};
use anedvd_testkit::cosine;
use anedvd_testkit::fixtures::{self, Format};

/// Prompt ids and transformers' logits at every prompt position.
fn reference(family: &str) -> Option<(Vec<u32>, Vec<Vec<f32>>)> {
    let r = fixtures::reference(family);
    Some((r.prompt, r.all))
}

fn compile(family: &str) -> Option<Box<dyn Executable>> {
    let program = fixtures::program(family, Format::GgufF32);
    Some(CpuBackend::new(2).unwrap().compile(&program).unwrap())
}

/// Chunk length sequence `s` takes at step `step` (0 = sits this step out).
fn schedule(s: usize, step: usize) -> usize {
    match s {
        0 => 1,                         // decode-like: one token per step
        1 => [3, 0, 5, 1, 2][step % 5], // prefill-like, sometimes idle
        2 => usize::from(step >= 4),    // joins late
        _ => [7, 1][step % 2],
    }
}

fn walk(family: &str) {
    let (Some((prompt, all)), Some(exe)) = (reference(family), compile(family)) else {
        eprintln!("skipping {family}: fixture absent");
        return;
    };
    let n_vocab = exe.vocab_size();
    let n_seqs = 4;
    let mut batch = exe.new_batch(n_seqs, prompt.len()).unwrap();
    let mut done = vec![0usize; n_seqs];
    let mut checked = 0;
    for step in 0.. {
        let mut items = Vec::new();
        for (s, &d) in done.iter().enumerate() {
            let take = schedule(s, step).min(prompt.len() - d);
            if take > 0 {
                items.push(BatchItem {
                    seq: s,
                    tokens: &prompt[d..d + take],
                    // Leave one sequence's logits out now and then; one
                    // sequence asks for every row (a verify pass's shape).
                    logits: match s {
                        3 if step % 3 == 0 => LogitsMode::None,
                        1 => LogitsMode::All,
                        _ => LogitsMode::Last,
                    },
                });
            }
        }
        if items.is_empty() {
            break;
        }
        let rows = batch.forward(&items).unwrap().to_vec();
        let mut row = 0;
        for item in &items {
            let end = done[item.seq] + item.tokens.len();
            let positions = match item.logits {
                LogitsMode::None => 0..0,
                LogitsMode::Last => end - 1..end,
                LogitsMode::All => done[item.seq]..end,
            };
            for at in positions {
                let got = &rows[row * n_vocab..(row + 1) * n_vocab];
                let c = cosine(got, &all[at]);
                assert!(
                    c >= 0.99999,
                    "{family}: seq {} at position {at}: cosine {c} vs transformers",
                    item.seq,
                );
                row += 1;
                checked += 1;
            }
            done[item.seq] = end;
        }
        assert_eq!(rows.len(), row * n_vocab, "{family}: one row per request");
        for (s, &d) in done.iter().enumerate() {
            assert_eq!(batch.position(s), d, "{family}: seq {s} position");
        }
    }
    assert!(checked > 20, "{family}: only {checked} rows checked");
}

#[test]
fn llama() {
    walk("llama");
}

#[test]
fn mistral() {
    walk("mistral");
}

#[test]
fn qwen3() {
    walk("qwen3");
}

#[test]
fn gemma2() {
    walk("gemma2");
}

#[test]
fn gemma3() {
    walk("gemma3");
}

/// Short-conv state per sequence beside the KV caches.
#[test]
fn lfm2() {
    walk("lfm2");
}

/// Tokens of several sequences grouped by expert, with a shared expert.
#[test]
fn qwen2_moe() {
    walk("qwen2_moe");
}

#[test]
fn qwen3_moe() {
    walk("qwen3_moe");
}

/// Fused q/k/v and gate/up through row views.
#[test]
fn phi3() {
    walk("phi3");
}

#[test]
fn bad_batches_are_refused_and_append_nothing() {
    let Some(exe) = compile("qwen2") else { return };
    let mut batch = exe.new_batch(2, 8).unwrap();
    let ok = [1u32, 2, 3];
    batch
        .forward(&[BatchItem {
            seq: 0,
            tokens: &ok,
            logits: LogitsMode::None,
        }])
        .unwrap();
    let too_long = [1u32; 6];
    let bad_id = [u32::MAX];
    let cases: [(&[BatchItem<'_>], &str); 4] = [
        (
            &[
                BatchItem {
                    seq: 1,
                    tokens: &ok,
                    logits: LogitsMode::Last,
                },
                BatchItem {
                    seq: 0,
                    tokens: &too_long,
                    logits: LogitsMode::Last,
                },
            ],
            "overflow",
        ),
        (
            &[BatchItem {
                seq: 2,
                tokens: &ok,
                logits: LogitsMode::Last,
            }],
            "seq",
        ),
        (
            &[
                BatchItem {
                    seq: 1,
                    tokens: &ok,
                    logits: LogitsMode::Last,
                },
                BatchItem {
                    seq: 1,
                    tokens: &ok,
                    logits: LogitsMode::Last,
                },
            ],
            "twice",
        ),
        (
            &[BatchItem {
                seq: 1,
                tokens: &bad_id,
                logits: LogitsMode::Last,
            }],
            "id",
        ),
    ];
    for (items, what) in cases {
        let err = batch.forward(items).unwrap_err();
        match what {
            "overflow" => assert!(matches!(
                err,
                Error::ContextOverflow {
                    needed: 9,
                    max_seq: 8
                }
            )),
            "id" => assert!(matches!(err, Error::TokenOutOfRange { .. })),
            _ => assert!(matches!(err, Error::InvalidArgument(_)), "{what}: {err}"),
        }
        assert_eq!((batch.position(0), batch.position(1)), (3, 0), "{what}");
    }
}
