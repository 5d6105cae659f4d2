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
    FeedForward, Gating, LogitsMode, MemorySource, Mixer, MoeFfn, NormPlacement, NormSpec,
    PerLayerInput, Rope, RopePairing, SharedExpert, ShortConv,
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

/// A backend that does not hold `p` refuses it at compile time, naming
/// itself and a layer (`Error::Unsupported`), never runs it.
fn refused_by_name(tag: &str, backend: TestBackend, p: &DecoderProgram) -> Option<String> {
    match backend.build().compile(p) {
        Err(Error::Unsupported { backend: b, .. }) if b == backend.backend_name() => None,
        Err(e) => Some(format!("{tag}: refused without naming the part: {e}")),
        Ok(_) => Some(format!("{tag}: compiled a program it does not hold")),
    }
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

/// Whether some layer attends with q·k unscaled (Gemma 4; see
/// `tolerance::against_transformers`).
fn unit_scale(p: &DecoderProgram) -> bool {
    p.layers
        .iter()
        .any(|b| b.attention().is_some_and(|a| a.scale == 1.0))
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
                let t = tolerance::against_transformers(backend, format, routed, unit_scale(&p));
                if !backend.holds(&p) {
                    failures.extend(refused_by_name(&tag, backend, &p));
                    continue;
                }
                let compiled = backend.build().compile(&p);
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
                    failures.extend(tolerance::greedy_mismatch(&tag, &greedy, &r, t.tie_margin));
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
            let min = tolerance::against_llamacpp(format, unit_scale(&p));
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

/// Plain layer `l` (its own tensors: layer 0's named by the bare stems):
/// pre-norm GQA attention (4 heads of 16, 2 KV heads, NEOX RoPE) and a
/// SiLU-gated FFN.
fn plain_layer(l: usize, src: &mut MemorySource, rng: &mut Lcg) -> Block {
    let mut put = |stem: &str, shape: &[u64], scale: f32, bias: f32| {
        let name = match l {
            0 => stem.to_string(),
            _ => format!("{stem}.{l}"),
        };
        insert(src, rng, &name, shape, scale, bias)
    };
    let (d, q, kv, ff) = (D as u64, 64u64, 32u64, 96u64);
    let w = 1.0 / (D as f32).sqrt();
    Block {
        norms: NormPlacement::Pre {
            mixer: put("an", &[d], 0.2, 1.0),
            ffn: put("fn", &[d], 0.2, 1.0),
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
            wq: put("q", &[d, q], w * 1.7, 0.0),
            wk: put("k", &[d, kv], w * 1.7, 0.0),
            wv: put("v", &[d, kv], w * 1.7, 0.0),
            wo: put("o", &[q, d], w, 0.0),
            bias: AttentionBias::default(),
            q_norm: None,
            k_norm: None,
            v_norm: false,
        }),
        ffn: FeedForward::Dense(DenseFfn {
            n_ff: ff as usize,
            activation: Activation::Silu,
            gate: put("g", &[d, ff], w * 1.7, 0.0),
            up: put("u", &[d, ff], w * 1.7, 0.0),
            down: put("dn", &[ff, d], 1.0 / (ff as f32).sqrt(), 0.0),
        }),
        per_layer_input: None,
        layer_scale: None,
    }
}

/// An F32 program of `n_layers` plain layers; `edit` turns it into the
/// case. The base tensors are drawn before the edit, so a case shares them
/// with the plain program of its layer count.
fn synthetic(
    seed: u64,
    n_layers: usize,
    edit: impl FnOnce(&mut DecoderProgram, &mut MemorySource, &mut Lcg),
) -> DecoderProgram {
    let mut src = MemorySource::new("gguf");
    let mut rng = Lcg(seed);
    let layers = (0..n_layers)
        .map(|l| plain_layer(l, &mut src, &mut rng))
        .collect();
    let (d, v) = (D as u64, VOCAB as u64);
    insert(&mut src, &mut rng, "tok", &[d, v], 1.0, 0.0);
    insert(&mut src, &mut rng, "onorm", &[d], 0.2, 1.0);
    let mut p = DecoderProgram {
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
        layers,
        per_layer_embd: None,
        // A placeholder: bound to `src` once the edit has added its tensors.
        weights: Arc::new(MemorySource::new("gguf")),
    };
    edit(&mut p, &mut src, &mut rng);
    p.weights = Arc::new(src);
    p
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

type Edit = Box<dyn Fn(&mut DecoderProgram, &mut MemorySource, &mut Lcg)>;

/// One op-level case: `edit` on the plain program of `layers` layers.
struct Case {
    name: &'static str,
    layers: usize,
    edit: Edit,
}

impl Case {
    fn program(&self) -> DecoderProgram {
        synthetic(SEED, self.layers, |p, s, r| (self.edit)(p, s, r))
    }

    /// The program the case edits.
    fn plain(&self) -> DecoderProgram {
        synthetic(SEED, self.layers, |_, _, _| {})
    }
}

/// A case editing the layer of a one-layer program.
fn one_layer(
    name: &'static str,
    edit: impl Fn(&mut Block, &mut MemorySource, &mut Lcg) + 'static,
) -> Case {
    Case {
        name,
        layers: 1,
        edit: Box::new(move |p, s, r| edit(&mut p.layers[0], s, r)),
    }
}

/// Top-2 of 4 SiLU experts of width 32 (stacked or per-expert), softmax
/// scores as they are, no shared expert: what the MoE cases vary.
fn moe(s: &mut MemorySource, r: &mut Lcg, stacked: bool) -> MoeFfn {
    MoeFfn {
        n_expert: 4,
        n_expert_used: 2,
        n_ff_expert: 32,
        activation: Activation::Silu,
        router: insert(s, r, "router", &[64, 4], 1.0, 0.0),
        gating: Gating::Softmax,
        selection_bias: None,
        normalize_top_k: false,
        weights_scale: 1.0,
        experts: experts(s, r, stacked),
        shared: None,
    }
}

/// Top-2 of 4 stacked experts plus a shared expert with its sigmoid gate.
fn shared_moe(s: &mut MemorySource, r: &mut Lcg) -> FeedForward {
    let base = moe(s, r, true);
    FeedForward::Moe(MoeFfn {
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
        ..base
    })
}

/// One case per block variant and attention feature, each alone on a plain
/// program (one layer, unless the feature needs more); every backend runs
/// every case.
fn cases() -> Vec<Case> {
    vec![
        one_layer("pre-norm attention + silu ffn", |_, _, _| {}),
        one_layer("qkv and output biases", |b, s, r| {
            attn(b).bias = AttentionBias {
                q: Some(insert(s, r, "bq", &[64], 0.5, 0.0)),
                k: Some(insert(s, r, "bk", &[32], 0.5, 0.0)),
                v: Some(insert(s, r, "bv", &[32], 0.5, 0.0)),
                o: Some(insert(s, r, "bo", &[64], 0.5, 0.0)),
            };
        }),
        one_layer("per-head q/k norm", |b, s, r| {
            attn(b).q_norm = Some(insert(s, r, "qn", &[16], 0.3, 1.0));
            attn(b).k_norm = Some(insert(s, r, "kn", &[16], 0.3, 1.0));
        }),
        one_layer("sandwich norms + gelu ffn", |b, s, r| {
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
        one_layer("sliding window 5", |b, _, _| attn(b).window = Some(5)),
        one_layer("score soft-cap 2", |b, _, _| attn(b).softcap = Some(2.0)),
        one_layer("no RoPE (NoPE)", |b, _, _| attn(b).rope = None),
        one_layer("adjacent-pair RoPE on 8 of 16 dims", |b, _, _| {
            let r = attn(b).rope.as_mut().unwrap();
            r.pairing = RopePairing::Norm;
            r.n_rot = 8;
            r.inv_freq = (0..4).map(|i| 100f64.powf(-(2 * i) as f64 / 8.0)).collect();
        }),
        one_layer("short conv, 3 taps", |b, s, r| {
            b.mixer = Mixer::ShortConv(ShortConv {
                kernel: 3,
                in_proj: insert(s, r, "in", &[64, 192], 0.4, 0.0),
                conv: insert(s, r, "cv", &[3, 64], 0.8, 0.0),
                out_proj: insert(s, r, "out", &[64, 64], 0.4, 0.0),
            })
        }),
        one_layer(
            "moe top-2 of 4, stacked, shared expert with gate",
            |b, s, r| b.ffn = shared_moe(s, r),
        ),
        one_layer("moe top-2 of 4, per-expert, renormalised", |b, s, r| {
            b.ffn = FeedForward::Moe(MoeFfn {
                normalize_top_k: true,
                ..moe(s, r, false)
            })
        }),
        one_layer(
            "moe sigmoid scores, selection bias, weights scale (lfm2_moe)",
            |b, s, r| {
                let base = moe(s, r, true);
                b.ffn = FeedForward::Moe(MoeFfn {
                    gating: Gating::Sigmoid,
                    // large enough to overturn some choices
                    selection_bias: Some(insert(s, r, "ebias", &[4], 0.5, 0.0)),
                    normalize_top_k: true,
                    weights_scale: 1.5,
                    ..base
                })
            },
        ),
        Case {
            // The fused variant finishes this layer on the host, scale too.
            name: "moe and a layer output scale on layer 0 of 2",
            layers: 2,
            edit: Box::new(|p, s, r| {
                p.layers[0].ffn = shared_moe(s, r);
                p.layers[0].layer_scale = Some(insert(s, r, "scale", &[1], 0.1, 0.4));
            }),
        },
        Case {
            // A residual of ~1e5 (beyond fp16) reaches layer 1's per-layer
            // gate: the ANE programs take it divided by the residual scale.
            name: "per-layer inputs over a residual beyond fp16 range",
            layers: 2,
            edit: Box::new(|p, s, r| {
                per_layer_inputs(p, s, r);
                p.embd_scale = 100.0;
                p.layers[0].layer_scale = Some(insert(s, r, "scale", &[1], 0.0, 1000.0));
                let gate = insert(s, r, "pl_gate_small", &[D as u64, 8], 0.0005, 0.0);
                if let Some(pl) = &mut p.layers[1].per_layer_input {
                    pl.gate = gate;
                }
            }),
        },
        Case {
            // On the fused variant the next layer then starts from its own
            // entry program (the host holds the residual).
            name: "moe with shared expert on layer 0 of 2",
            layers: 2,
            edit: Box::new(|p, s, r| p.layers[0].ffn = shared_moe(s, r)),
        },
        one_layer("weightless value norm", |b, _, _| attn(b).v_norm = true),
        Case {
            name: "per-layer input embeddings, 2 layers",
            layers: 2,
            edit: Box::new(per_layer_inputs),
        },
        Case {
            // On the first layer: the last one's would be undone by the
            // output norm.
            name: "layer output scale on layer 0 of 2",
            layers: 2,
            edit: Box::new(|p, s, r| {
                p.layers[0].layer_scale = Some(insert(s, r, "scale", &[1], 0.1, 0.4));
            }),
        },
        Case {
            // Past layer 1, which keeps its own: the source is the one named.
            name: "K/V of layer 0 read by layer 2 of 3",
            layers: 3,
            edit: Box::new(|p, _, _| share_kv(p, 0, 2)),
        },
        Case {
            name: "K/V of layer 0 read by layer 1 through a window of 5",
            layers: 2,
            edit: Box::new(|p, _, _| {
                share_kv(p, 0, 1);
                attn(&mut p.layers[1]).window = Some(5);
            }),
        },
        Case {
            // Gemma's norms store `weight - 1`; the value norm has no weight
            // to offset.
            name: "per-layer inputs and value norms, norm weight offset 1",
            layers: 2,
            edit: Box::new(|p, s, r| {
                per_layer_inputs(p, s, r);
                p.layers.iter_mut().for_each(|b| attn(b).v_norm = true);
                p.norm.weight_offset = 1.0;
            }),
        },
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

/// Gemma 4's per-layer input embeddings, 8 wide: the program's tables and
/// every layer's input (validation wants both), GELU gates on even layers
/// and SiLU on odd ones.
fn per_layer_inputs(p: &mut DecoderProgram, s: &mut MemorySource, r: &mut Lcg) {
    let (d, w, lw) = (D as u64, 8u64, 8 * p.layers.len() as u64);
    p.per_layer_embd = Some(anedvd_graph::PerLayerEmbedding {
        width: 8,
        token_table: insert(s, r, "ple_tok", &[lw, VOCAB as u64], 1.0, 0.0),
        token_scale: 8f32.sqrt(),
        model_proj: insert(s, r, "ple_proj", &[d, lw], 1.0, 0.0),
        model_proj_scale: 1.0 / (D as f32).sqrt(),
        proj_norm: insert(s, r, "ple_norm", &[w], 0.3, 1.0),
        combine_scale: std::f32::consts::FRAC_1_SQRT_2,
    });
    for (l, b) in p.layers.iter_mut().enumerate() {
        b.per_layer_input = Some(PerLayerInput {
            width: 8,
            activation: [Activation::GeluTanh, Activation::Silu][l % 2],
            gate: insert(s, r, &format!("pl_gate.{l}"), &[d, w], 0.2, 0.0),
            proj: insert(s, r, &format!("pl_proj.{l}"), &[w, d], 0.35, 0.0),
            norm: insert(s, r, &format!("pl_norm.{l}"), &[d], 0.2, 1.0),
        });
    }
}

/// Layer `to` attends over layer `from`'s cached K/V, projecting queries
/// only; its K/V tensor names become `from`'s (what produced what it reads).
fn share_kv(p: &mut DecoderProgram, from: usize, to: usize) {
    let source = p.layers[from].attention().unwrap().clone();
    let a = attn(&mut p.layers[to]);
    a.kv_source = Some(from);
    (a.wk, a.wv, a.k_norm) = (source.wk, source.wv, source.k_norm);
    (a.bias.k, a.bias.v) = (source.bias.k, source.bias.v);
}

const SEED: u64 = 17;

fn op_prompt() -> Vec<u32> {
    (0..12).map(|i| (i * 37 + 5) % VOCAB as u32).collect()
}

/// Prompt tokens of the decode run's prefill; the rest go one at a time.
const PREFILL: usize = 8;

#[test]
fn each_block_variant_matches_the_oracle_on_every_backend() {
    let prompt = op_prompt();
    let mut failures = Vec::new();
    for case in cases() {
        let p = case.program();
        p.validate().unwrap();
        let want: Vec<Vec<f32>> = oracle::forward(&p, &prompt)
            .into_iter()
            .map(|r| r.into_iter().map(|v| v as f32).collect())
            .collect();
        for backend in TestBackend::ALL {
            if !backend.holds(&p) {
                let tag = format!("{} / {}", case.name, backend.name());
                failures.extend(refused_by_name(&tag, backend, &p));
                continue;
            }
            let exe = backend.build().compile(&p).unwrap();
            let whole = exe
                .new_session(prompt.len())
                .unwrap()
                .forward(&prompt, LogitsMode::All)
                .unwrap()
                .to_vec();
            // Decoding reads what the prefill cached (and, where layers
            // share K/V, what an earlier layer cached in the same step).
            let mut s = exe.new_session(prompt.len()).unwrap();
            let mut stepped = s
                .forward(&prompt[..PREFILL], LogitsMode::All)
                .unwrap()
                .to_vec();
            for t in &prompt[PREFILL..] {
                let last = s.forward(std::slice::from_ref(t), LogitsMode::Last);
                stepped.extend_from_slice(last.unwrap());
            }
            let t = tolerance::against_oracle(backend);
            for (how, all) in [("", whole), (" / decode", stepped)] {
                let rows: Vec<&[f32]> = all.chunks_exact(VOCAB).collect();
                let tag = format!("{} / {}{how}", case.name, backend.name());
                failures.extend(compare(&tag, &rows, &want, t));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// The oracle sees each feature: the case's logits differ from its plain
/// program's (same layer count and base weights: `synthetic` draws them
/// before the edit), so a backend ignoring the feature cannot pass the case
/// above.
#[test]
fn every_op_case_changes_the_oracle() {
    let prompt = op_prompt();
    for case in cases().into_iter().skip(1) {
        let plain = oracle::forward(&case.plain(), &prompt);
        let with = oracle::forward(&case.program(), &prompt);
        let diff = (with.iter().flatten())
            .zip(plain.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f64, f64::max);
        let name = case.name;
        println!("{name}: max |logit change| {diff:.4}");
        assert!(diff > 1e-2, "{name}: the feature changes nothing ({diff})");
    }
}

/// A variant a backend does not run is refused at compile time, naming the
/// backend, the variant and the layer — never run with wrong numbers.
/// (Where it runs, the oracle cases and the fixtures check its numbers.)
/// Today the CPU backend runs every variant and the ANE backends refuse
/// these.
#[test]
fn unsupported_variants_are_refused_by_name() {
    // (variant, the layer refused, edit of a two-layer program: layer 1,
    // behind a supported layer 0, where it can)
    let edits: Vec<(&str, usize, Edit)> = vec![
        (
            // the ANE lowering's depthwise conv is at most 13 wide
            "mixer short_conv of 14 taps (at most 13)",
            1,
            Box::new(|p, s, r| {
                p.layers[1].mixer = Mixer::ShortConv(ShortConv {
                    kernel: 14,
                    in_proj: insert(s, r, "in", &[64, 192], 0.1, 0.0),
                    conv: insert(s, r, "cv", &[14, 64], 0.1, 0.0),
                    out_proj: insert(s, r, "out", &[64, 64], 0.1, 0.0),
                })
            }),
        ),
        (
            // the fused variant finishes a MoE layer on the host
            "feed-forward moe with per-layer inputs",
            0,
            Box::new(|p, s, r| {
                per_layer_inputs(p, s, r);
                p.layers[0].ffn = shared_moe(s, r);
            }),
        ),
    ];
    for (what, layer, edit) in &edits {
        let p = synthetic(9, 2, |p, s, r| edit(p, s, r));
        p.validate().unwrap();
        for backend in TestBackend::ALL.into_iter().filter(|b| b.is_ane()) {
            let e = backend
                .build()
                .compile(&p)
                .err()
                .unwrap_or_else(|| panic!("{}: {what} compiled", backend.name()));
            assert!(
                matches!(e, Error::Unsupported { layer: l, .. } if l == *layer),
                "{e}"
            );
            let want = format!(
                "backend {} does not support {what} (layer {layer})",
                backend.backend_name()
            );
            assert_eq!(e.to_string(), want);
        }
        let cpu = TestBackend::Cpu.build().compile(&p);
        assert!(cpu.is_ok(), "cpu: {what}: {:?}", cpu.err());
    }
}
