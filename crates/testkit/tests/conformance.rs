//! The conformance suite: every family of the model registry × every
//! fixture format × every backend against HF transformers' logits and
//! greedy tokens (tests/fixtures/models, produced outside anedvd), the CPU
//! backend's GGUF logits against llama.cpp's, each block variant alone on
//! every backend against the f64 oracle, and every variant a backend does
//! not run refused by name. Bounds: `anedvd_testkit::tolerance`.
#![allow(clippy::unwrap_used)]

use anedvd_ane::backend::check::pseudo_random;
use anedvd_graph::{
    Activation, Attention, AttentionBias, Block, DecoderProgram, DenseFfn, Error, ExpertTensors,
    FeedForward, LogitsMode, MemorySource, Mixer, MoeFfn, NormPlacement, NormSpec, PerLayerInput,
    Rope, RopePairing, SharedExpert, ShortConv,
};
use anedvd_testkit::backends::TestBackend;
use anedvd_testkit::fixtures::{self, Format};
use anedvd_testkit::tolerance::{self, Tolerance};
use anedvd_testkit::{argmax, cosine, max_rel, oracle};
use std::sync::Arc;

/// Compares `rows` (one logits row per prompt position) with the
/// reference's; returns a failure message, if any.
fn compare(tag: &str, rows: &[&[f32]], want: &[Vec<f32>], t: Tolerance) -> Option<String> {
    let last = rows.len() - 1;
    let c = cosine(rows[last], &want[last]);
    let rel = max_rel(rows[last], &want[last]);
    let worst = rows
        .iter()
        .zip(want)
        .map(|(r, w)| cosine(r, w))
        .fold(1.0f64, f64::min);
    println!("{tag:32} cosine last {c:.9} worst {worst:.9} max rel {rel:.5}");
    if c < t.min_cos_last || worst < t.min_cos_worst || rel > t.max_rel_last {
        return Some(format!(
            "{tag}: cosine last {c:.9} (>= {}), worst {worst:.9} (>= {}), max rel {rel:.5} (<= {})",
            t.min_cos_last, t.min_cos_worst, t.max_rel_last
        ));
    }
    if t.top1 && argmax(rows[last]) != argmax(&want[last]) {
        return Some(format!("{tag}: top-1 differs"));
    }
    None
}

/// Checks a greedy continuation against the reference's, allowing the
/// reference's second token at a near-tie (see [`Tolerance::tie_margin`]),
/// after which the check ends.
fn compare_greedy(tag: &str, got: &[u32], r: &fixtures::Reference, t: Tolerance) -> Option<String> {
    for (step, (&g, &w)) in got.iter().zip(&r.greedy).enumerate() {
        if g == w {
            continue;
        }
        if let Some(&([_, second], margin)) = r.greedy_top2.get(step) {
            if margin < t.tie_margin && g == second {
                println!(
                    "{tag:32} greedy equal up to a near-tie at step {step} (margin {margin:.4})"
                );
                return None;
            }
        }
        return Some(format!(
            "{tag}: greedy step {step}: {g} != {w}\n  got  {got:?}\n  want {:?}",
            r.greedy
        ));
    }
    None
}

#[test]
fn every_registered_family_has_a_fixture() {
    for family in fixtures::families() {
        for format in Format::ALL {
            let p = fixtures::path(family, format);
            assert!(p.exists(), "{family}: {} missing", p.display());
        }
        let r = fixtures::reference(family);
        assert_eq!(r.all.len(), r.prompt.len(), "{family}: all_logits rows");
        assert_eq!(r.greedy.len(), 16, "{family}: greedy tokens");
    }
}

/// The block variant `backend` refuses in `program`, if any (today the ANE
/// path lowers attention and short-conv mixers with dense FFNs only).
fn refused_part(backend: TestBackend, program: &DecoderProgram) -> Option<String> {
    if !backend.is_ane() {
        return None;
    }
    program.layers.iter().find_map(|b| match &b.ffn {
        FeedForward::Moe(_) => Some(format!("feed-forward {}", b.ffn.kind())),
        FeedForward::Dense(_) => None,
    })
}

#[test]
fn families_match_transformers_on_every_backend() {
    let mut failures = Vec::new();
    for family in fixtures::families() {
        let r = fixtures::reference(family);
        for backend in TestBackend::ALL {
            for format in Format::ALL {
                let tag = format!("{family}/{}/{}", format.name(), backend.name());
                let p = fixtures::program(family, format);
                let routed = p
                    .layers
                    .iter()
                    .any(|b| matches!(b.ffn, FeedForward::Moe(_)));
                let t = tolerance::against_transformers(backend, format, routed);
                let compiled = backend.build().compile(&p);
                if let Some(part) = refused_part(backend, &p) {
                    // A refusal by name, never a silent run.
                    match compiled {
                        Err(Error::Unsupported { .. }) => {
                            let e = compiled.err().map(|e| e.to_string()).unwrap_or_default();
                            if !e.contains(&part) {
                                failures.push(format!("{tag}: refused as `{e}`, not {part}"));
                            }
                        }
                        Err(e) => failures.push(format!("{tag}: {e} (want a refusal of {part})")),
                        Ok(_) => {
                            failures.push(format!("{tag}: compiled, want a refusal of {part}"))
                        }
                    }
                    continue;
                }
                let exe = match compiled {
                    Ok(e) => e,
                    Err(e) => {
                        failures.push(format!("{tag}: compile: {e}"));
                        continue;
                    }
                };
                let mut s = exe.new_session(r.prompt.len() + r.greedy.len()).unwrap();
                let all = s.forward(&r.prompt, LogitsMode::All).unwrap().to_vec();
                let rows: Vec<&[f32]> = all.chunks_exact(exe.vocab_size()).collect();
                let mut greedy = Vec::new();
                if t.greedy {
                    let mut next = argmax(rows[rows.len() - 1]) as u32;
                    greedy.push(next);
                    while greedy.len() < r.greedy.len() {
                        next = argmax(s.forward(&[next], LogitsMode::Last).unwrap()) as u32;
                        greedy.push(next);
                    }
                }
                failures.extend(compare(&tag, &rows, &r.all, t));
                if t.greedy {
                    failures.extend(compare_greedy(&tag, &greedy, &r, t));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Our GGUF logits against llama.cpp's on the same files
/// (`llamacpp_ref.json`, scripts/fixtures/gen_tiny_llamacpp_ref.py, f32 KV).
/// No overrides: llama.cpp reads the GGUF as it is (for Mistral: no window).
#[test]
fn cpu_gguf_logits_match_llamacpp() {
    for family in fixtures::families() {
        let path = fixtures::dir(family).join("llamacpp_ref.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            println!("{family}: no llamacpp_ref.json (needs a llama.cpp build to make)");
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let prompt = fixtures::ids(&v["prompt_ids"]);
        for format in [Format::GgufF32, Format::GgufQ8] {
            let Some(want) = v["gguf"][format.file()].get("last_logits") else {
                continue;
            };
            let want = fixtures::floats(want);
            let p = fixtures::program_with(family, format, &Default::default());
            let exe = TestBackend::Cpu.build().compile(&p).unwrap();
            let mut s = exe.new_session(prompt.len()).unwrap();
            let got = s.forward(&prompt, LogitsMode::Last).unwrap();
            let c = cosine(got, &want);
            println!("{family:8} {:5} vs llama.cpp: cosine {c:.9}", format.name());
            let min = tolerance::against_llamacpp(format);
            assert!(
                c >= min,
                "{family} {} vs llama.cpp: cosine {c}",
                format.name()
            );
            assert_eq!(
                argmax(got),
                argmax(&want),
                "{family} {}: top-1",
                format.name()
            );
        }
    }
}

// ---------------------------------------------------------------- op level

const D: usize = 64;
const VOCAB: usize = 96;

/// Deterministic tensors: each draw takes the next seed.
struct Lcg(u64);

impl Lcg {
    /// `n` values in `[-scale, scale) + bias`.
    fn vec(&mut self, n: usize, scale: f32, bias: f32) -> Vec<f32> {
        self.0 += 1;
        pseudo_random(self.0, n)
            .into_iter()
            .map(|v| v * scale + bias)
            .collect()
    }
}

/// A one-layer F32 program: pre-norm GQA attention (4 heads of 16, 2 KV
/// heads, NEOX RoPE) and a SiLU-gated FFN; `edit` turns it into the case.
fn synthetic(
    seed: u64,
    edit: impl FnOnce(&mut Block, &mut MemorySource, &mut Lcg),
) -> DecoderProgram {
    let mut src = MemorySource::new("gguf");
    let mut rng = Lcg(seed);
    let (d, q, kv, ff, v) = (D as u64, 64u64, 32u64, 96u64, VOCAB as u64);
    let put = insert;
    let w = 1.0 / (D as f32).sqrt();
    let mut block = Block {
        norms: NormPlacement::Pre {
            mixer: put(&mut src, &mut rng, "an", &[d], 0.2, 1.0),
            ffn: put(&mut src, &mut rng, "fn", &[d], 0.2, 1.0),
        },
        mixer: Mixer::Attention(Attention {
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
            scale: 0.25,
            softcap: None,
            window: None,
            rope: Some(Rope {
                pairing: RopePairing::Neox,
                n_rot: 16,
                inv_freq: (0..8)
                    .map(|i| 10_000f64.powf(-(2 * i) as f64 / 16.0))
                    .collect(),
                attn_factor: 1.0,
            }),
            kv_source: None,
            wq: put(&mut src, &mut rng, "q", &[d, q], w * 1.7, 0.0),
            wk: put(&mut src, &mut rng, "k", &[d, kv], w * 1.7, 0.0),
            wv: put(&mut src, &mut rng, "v", &[d, kv], w * 1.7, 0.0),
            wo: put(&mut src, &mut rng, "o", &[q, d], w, 0.0),
            bias: AttentionBias::default(),
            q_norm: None,
            k_norm: None,
            v_norm: false,
        }),
        ffn: FeedForward::Dense(DenseFfn {
            n_ff: ff as usize,
            activation: Activation::Silu,
            gate: put(&mut src, &mut rng, "g", &[d, ff], w * 1.7, 0.0),
            up: put(&mut src, &mut rng, "u", &[d, ff], w * 1.7, 0.0),
            down: put(
                &mut src,
                &mut rng,
                "dn",
                &[ff, d],
                1.0 / (ff as f32).sqrt(),
                0.0,
            ),
        }),
        per_layer_input: None,
        layer_scale: None,
    };
    put(&mut src, &mut rng, "tok", &[d, v], 1.0, 0.0);
    put(&mut src, &mut rng, "onorm", &[d], 0.2, 1.0);
    edit(&mut block, &mut src, &mut rng);
    DecoderProgram {
        family: "synthetic".into(),
        n_embd: D,
        n_vocab: VOCAB,
        n_ctx_train: 64,
        norm: NormSpec {
            eps: 1e-6,
            weight_offset: 0.0,
        },
        embd_scale: 1.0,
        final_softcap: None,
        token_embd: "tok".into(),
        output_norm: "onorm".into(),
        output: None,
        layers: vec![block],
        per_layer_embd: None,
        weights: Arc::new(src),
    }
}

fn attn(b: &mut Block) -> &mut Attention {
    b.attention_mut().unwrap()
}

fn insert(
    src: &mut MemorySource,
    rng: &mut Lcg,
    name: &str,
    shape: &[u64],
    scale: f32,
    bias: f32,
) -> String {
    let n = shape.iter().product::<u64>() as usize;
    src.insert_f32(name, shape, &rng.vec(n, scale, bias));
    name.to_string()
}

type Edit = Box<dyn Fn(&mut Block, &mut MemorySource, &mut Lcg)>;

/// One case per block variant and attention feature, each alone on the
/// plain one-layer program.
fn cases() -> Vec<(&'static str, Edit)> {
    let mut all = ane_cases();
    all.extend(cpu_only_cases());
    all
}

/// Cases the ANE backends run too.
fn ane_cases() -> Vec<(&'static str, Edit)> {
    vec![
        ("pre-norm attention + silu ffn", Box::new(|_, _, _| {})),
        (
            "qkv and output biases",
            Box::new(|b, s, r| {
                attn(b).bias = AttentionBias {
                    q: Some(insert(s, r, "bq", &[64], 0.5, 0.0)),
                    k: Some(insert(s, r, "bk", &[32], 0.5, 0.0)),
                    v: Some(insert(s, r, "bv", &[32], 0.5, 0.0)),
                    o: Some(insert(s, r, "bo", &[64], 0.5, 0.0)),
                };
            }),
        ),
        (
            "per-head q/k norm",
            Box::new(|b, s, r| {
                attn(b).q_norm = Some(insert(s, r, "qn", &[16], 0.3, 1.0));
                attn(b).k_norm = Some(insert(s, r, "kn", &[16], 0.3, 1.0));
            }),
        ),
        (
            "sandwich norms + gelu ffn",
            Box::new(|b, s, r| {
                let ((mixer, _), (ffn, _)) = b.norms.split();
                let (mixer, ffn) = (mixer.to_string(), ffn.to_string());
                b.norms = NormPlacement::Sandwich {
                    mixer,
                    post_mixer: insert(s, r, "pan", &[64], 0.2, 1.0),
                    ffn,
                    post_ffn: insert(s, r, "pfn", &[64], 0.2, 1.0),
                };
                if let FeedForward::Dense(f) = &mut b.ffn {
                    f.activation = Activation::GeluTanh;
                }
            }),
        ),
        (
            "sliding window 5",
            Box::new(|b, _, _| attn(b).window = Some(5)),
        ),
        (
            "score soft-cap 2",
            Box::new(|b, _, _| attn(b).softcap = Some(2.0)),
        ),
        ("no RoPE (NoPE)", Box::new(|b, _, _| attn(b).rope = None)),
        (
            "adjacent-pair RoPE on 8 of 16 dims",
            Box::new(|b, _, _| {
                let r = attn(b).rope.as_mut().unwrap();
                r.pairing = RopePairing::Norm;
                r.n_rot = 8;
                r.inv_freq = (0..4).map(|i| 100f64.powf(-(2 * i) as f64 / 8.0)).collect();
            }),
        ),
        (
            "short conv, 3 taps",
            Box::new(|b, s, r| {
                b.mixer = Mixer::ShortConv(ShortConv {
                    kernel: 3,
                    in_proj: insert(s, r, "in", &[64, 192], 0.4, 0.0),
                    conv: insert(s, r, "cv", &[3, 64], 0.8, 0.0),
                    out_proj: insert(s, r, "out", &[64, 64], 0.4, 0.0),
                })
            }),
        ),
    ]
}

/// Four experts for the MoE cases: stacked (GGUF) or per-expert (HF).
fn experts(s: &mut MemorySource, r: &mut Lcg, stacked: bool) -> ExpertTensors {
    if stacked {
        return ExpertTensors::Stacked {
            gate: insert(s, r, "ge", &[64, 32, 4], 0.3, 0.0),
            up: insert(s, r, "ue", &[64, 32, 4], 0.3, 0.0),
            down: insert(s, r, "de", &[32, 64, 4], 0.3, 0.0),
        };
    }
    let mut names = |p: &str, shape: &[u64]| -> Vec<String> {
        (0..4)
            .map(|e| insert(s, r, &format!("{p}{e}"), shape, 0.3, 0.0))
            .collect()
    };
    ExpertTensors::PerExpert {
        gate: names("g", &[64, 32]),
        up: names("u", &[64, 32]),
        down: names("d", &[32, 64]),
    }
}

/// Cases of variants only the CPU backend runs (the ANE backends refuse
/// them: see the refusal test).
fn cpu_only_cases() -> Vec<(&'static str, Edit)> {
    vec![
        (
            "moe top-2 of 4, stacked, shared expert with gate",
            Box::new(|b, s, r| {
                b.ffn = FeedForward::Moe(MoeFfn {
                    n_expert: 4,
                    n_expert_used: 2,
                    n_ff_expert: 32,
                    activation: Activation::Silu,
                    router: insert(s, r, "router", &[64, 4], 1.0, 0.0),
                    normalize_top_k: false,
                    experts: experts(s, r, true),
                    shared: Some(SharedExpert {
                        ffn: DenseFfn {
                            n_ff: 32,
                            activation: Activation::Silu,
                            gate: insert(s, r, "sg", &[64, 32], 0.3, 0.0),
                            up: insert(s, r, "su", &[64, 32], 0.3, 0.0),
                            down: insert(s, r, "sd", &[32, 64], 0.3, 0.0),
                        },
                        gate_inp: Some(insert(s, r, "sgi", &[64], 0.5, 0.0)),
                    }),
                })
            }),
        ),
        (
            "moe top-2 of 4, per-expert, renormalised",
            Box::new(|b, s, r| {
                b.ffn = FeedForward::Moe(MoeFfn {
                    n_expert: 4,
                    n_expert_used: 2,
                    n_ff_expert: 32,
                    activation: Activation::Silu,
                    router: insert(s, r, "router", &[64, 4], 1.0, 0.0),
                    normalize_top_k: true,
                    experts: experts(s, r, false),
                    shared: None,
                })
            }),
        ),
    ]
}

const SEED: u64 = 17;

fn op_prompt() -> Vec<u32> {
    (0..12).map(|i| (i * 37 + 5) % VOCAB as u32).collect()
}

#[test]
fn each_block_variant_matches_the_oracle_on_every_backend() {
    let prompt = op_prompt();
    let mut failures = Vec::new();
    let n_ane = ane_cases().len();
    for (i, (name, edit)) in cases().into_iter().enumerate() {
        let p = synthetic(SEED, |b, s, r| edit(b, s, r));
        p.validate().unwrap();
        let want: Vec<Vec<f32>> = oracle::forward(&p, &prompt)
            .into_iter()
            .map(|r| r.into_iter().map(|v| v as f32).collect())
            .collect();
        let backends = TestBackend::ALL.into_iter();
        for backend in backends.filter(|b| i < n_ane || !b.is_ane()) {
            let exe = backend.build().compile(&p).unwrap();
            let all = exe
                .new_session(prompt.len())
                .unwrap()
                .forward(&prompt, LogitsMode::All)
                .unwrap()
                .to_vec();
            let rows: Vec<&[f32]> = all.chunks_exact(VOCAB).collect();
            let tag = format!("{name} / {}", backend.name());
            let t = tolerance::against_oracle(backend);
            failures.extend(compare(&tag, &rows, &want, t));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// The oracle sees each feature: the case's logits differ from the plain
/// program's (same base weights: `synthetic` inserts them before the edit),
/// so a backend ignoring the feature cannot pass the case above.
#[test]
fn every_op_case_changes_the_oracle() {
    let prompt = op_prompt();
    let plain = oracle::forward(&synthetic(SEED, |_, _, _| {}), &prompt);
    for (name, edit) in cases().into_iter().skip(1) {
        let with = oracle::forward(&synthetic(SEED, |b, s, r| edit(b, s, r)), &prompt);
        let diff = (with.iter().flatten())
            .zip(plain.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f64, f64::max);
        println!("{name}: max |logit change| {diff:.4}");
        assert!(diff > 1e-2, "{name}: the feature changes nothing ({diff})");
    }
}

/// A variant a backend does not run is refused at compile time, naming the
/// backend, the variant and the layer — never run with wrong numbers.
/// (Where it runs, the oracle cases and the fixtures check its numbers.)
#[test]
fn unsupported_variants_are_refused_by_name() {
    // (variant, edit, which backends refuse it)
    type Refused = fn(TestBackend) -> bool;
    let edits: Vec<(&str, Edit, Refused)> = vec![
        (
            // the ANE lowering's depthwise conv is at most 13 wide
            "mixer short_conv of 14 taps (at most 13)",
            Box::new(|b, s, r| {
                b.mixer = Mixer::ShortConv(ShortConv {
                    kernel: 14,
                    in_proj: insert(s, r, "in", &[64, 192], 0.1, 0.0),
                    conv: insert(s, r, "cv", &[14, 64], 0.1, 0.0),
                    out_proj: insert(s, r, "out", &[64, 64], 0.1, 0.0),
                })
            }),
            |b| b.is_ane(),
        ),
        (
            "feed-forward moe",
            Box::new(|b, s, r| {
                b.ffn = FeedForward::Moe(MoeFfn {
                    n_expert: 2,
                    n_expert_used: 1,
                    n_ff_expert: 32,
                    activation: Activation::Silu,
                    router: insert(s, r, "router", &[64, 2], 0.1, 0.0),
                    normalize_top_k: false,
                    experts: ExpertTensors::Stacked {
                        gate: insert(s, r, "ge", &[64, 32, 2], 0.1, 0.0),
                        up: insert(s, r, "ue", &[64, 32, 2], 0.1, 0.0),
                        down: insert(s, r, "de", &[32, 64, 2], 0.1, 0.0),
                    },
                    shared: None,
                })
            }),
            |b| b.is_ane(),
        ),
        (
            "per-layer input embeddings",
            Box::new(|b, s, r| {
                b.per_layer_input = Some(PerLayerInput {
                    width: 8,
                    activation: Activation::GeluTanh,
                    gate: insert(s, r, "plg", &[64, 8], 0.1, 0.0),
                    proj: insert(s, r, "plp", &[8, 64], 0.1, 0.0),
                    norm: insert(s, r, "pln", &[64], 0.1, 1.0),
                })
            }),
            |_| true,
        ),
    ];
    for (what, edit, refused_by) in &edits {
        let mut p = synthetic(9, |b, s, r| edit(b, s, r));
        // on layer 1, behind a supported layer 0
        let first = synthetic(9, |_, _, _| {}).layers.remove(0);
        p.layers.insert(0, first);
        p.validate().unwrap();
        for backend in TestBackend::ALL.into_iter().filter(|b| refused_by(*b)) {
            let e = backend
                .build()
                .compile(&p)
                .err()
                .unwrap_or_else(|| panic!("{}: {what} compiled", backend.name()));
            assert!(matches!(e, Error::Unsupported { layer: 1, .. }), "{e}");
            let want = format!(
                "backend {} does not support {what} (layer 1)",
                backend.backend_name()
            );
            assert_eq!(e.to_string(), want);
        }
    }
    // K/V taken from an earlier layer
    let mut p = synthetic(9, |_, _, _| {});
    let mut second = p.layers[0].clone();
    second.attention_mut().unwrap().kv_source = Some(0);
    p.layers.push(second);
    p.validate().unwrap();
    for backend in TestBackend::ALL {
        let e = backend.build().compile(&p).err().unwrap();
        let want = format!(
            "backend {} does not support attention shared K/V (layer 1)",
            backend.backend_name()
        );
        assert_eq!(e.to_string(), want);
    }
}
