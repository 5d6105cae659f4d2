//! CPU backend over tiny random in-memory models: RoPE pairing equivalence
//! under llama.cpp's q/k permutation, batched prefill vs incremental decode,
//! truncation, sliding windows, dumps, weight types and error cases.
#![allow(clippy::unwrap_used)]

use anedvd_base::{GgmlType, MetadataValue as V};
use anedvd_cpu::CpuBackend;
use anedvd_graph::{Backend, DecoderProgram, Error, LogitsMode, MemorySource, RopePairing};
use anedvd_model::{load, ConfigOverrides};
use std::sync::Arc;

const D: usize = 32;
const HD: usize = 8;
const NH: usize = 4;
const NKV: usize = 2;
const FF: usize = 64;
const VOCAB: usize = 40;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.8
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// llama.cpp's `LlamaModel.permute` on rows (`n_out` rows of `n_in`).
fn permute_rows(w: &[f32], n_head: usize, n_in: usize) -> Vec<f32> {
    let rows = w.len() / n_in;
    let hd = rows / n_head;
    let mut out = vec![0.0; w.len()];
    for h in 0..n_head {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let dst = h * hd + 2 * i + j;
                let src = h * hd + j * (hd / 2) + i;
                out[dst * n_in..(dst + 1) * n_in].copy_from_slice(&w[src * n_in..(src + 1) * n_in]);
            }
        }
    }
    out
}

/// A random llama model, HF-named (`permute == false`) or GGUF-named with
/// llama.cpp's q/k row permutation (`permute == true`).
fn llama(n_layer: usize, permute: bool, seed: u64) -> MemorySource {
    let mut r = Rng(seed);
    let gguf = permute;
    let mut s = MemorySource::new(if gguf { "gguf" } else { "safetensors" });
    let m = s.metadata_mut();
    if gguf {
        m.insert("general.architecture", V::String("llama".into()));
        m.insert("llama.embedding_length", V::U32(D as u32));
        m.insert("llama.block_count", V::U32(n_layer as u32));
        m.insert("llama.attention.head_count", V::U32(NH as u32));
        m.insert("llama.attention.head_count_kv", V::U32(NKV as u32));
        m.insert("llama.feed_forward_length", V::U32(FF as u32));
        m.insert("llama.rope.freq_base", V::F32(100.0));
        m.insert("llama.attention.layer_norm_rms_epsilon", V::F32(1e-5));
    } else {
        m.insert("model_type", V::String("llama".into()));
        m.insert("hidden_size", V::I64(D as i64));
        m.insert("num_hidden_layers", V::I64(n_layer as i64));
        m.insert("num_attention_heads", V::I64(NH as i64));
        m.insert("num_key_value_heads", V::I64(NKV as i64));
        m.insert("intermediate_size", V::I64(FF as i64));
        m.insert("rope_parameters.rope_theta", V::F64(100.0));
        m.insert("rms_norm_eps", V::F64(1e-5));
    }
    let name = |g: &str, h: &str| if gguf { g.to_string() } else { h.to_string() };
    let (d, q, kv, ff, v) = (
        D as u64,
        (NH * HD) as u64,
        (NKV * HD) as u64,
        FF as u64,
        VOCAB as u64,
    );
    s.insert_f32(
        &name("token_embd.weight", "model.embed_tokens.weight"),
        &[d, v],
        &r.vec(D * VOCAB),
    );
    let norm: Vec<f32> = (0..D).map(|i| 1.0 + 0.01 * i as f32).collect();
    s.insert_f32(
        &name("output_norm.weight", "model.norm.weight"),
        &[d],
        &norm,
    );
    for i in 0..n_layer {
        let g = |x: &str| format!("blk.{i}.{x}.weight");
        let h = |x: &str| format!("model.layers.{i}.{x}.weight");
        let mut wq = r.vec(D * NH * HD);
        let mut wk = r.vec(D * NKV * HD);
        if permute {
            wq = permute_rows(&wq, NH, D);
            wk = permute_rows(&wk, NKV, D);
        }
        s.insert_f32(&name(&g("attn_norm"), &h("input_layernorm")), &[d], &norm);
        s.insert_f32(&name(&g("attn_q"), &h("self_attn.q_proj")), &[d, q], &wq);
        s.insert_f32(&name(&g("attn_k"), &h("self_attn.k_proj")), &[d, kv], &wk);
        s.insert_f32(
            &name(&g("attn_v"), &h("self_attn.v_proj")),
            &[d, kv],
            &r.vec(D * NKV * HD),
        );
        s.insert_f32(
            &name(&g("attn_output"), &h("self_attn.o_proj")),
            &[q, d],
            &r.vec(D * NH * HD),
        );
        s.insert_f32(
            &name(&g("ffn_norm"), &h("post_attention_layernorm")),
            &[d],
            &norm,
        );
        s.insert_f32(
            &name(&g("ffn_gate"), &h("mlp.gate_proj")),
            &[d, ff],
            &r.vec(D * FF),
        );
        s.insert_f32(
            &name(&g("ffn_up"), &h("mlp.up_proj")),
            &[d, ff],
            &r.vec(D * FF),
        );
        s.insert_f32(
            &name(&g("ffn_down"), &h("mlp.down_proj")),
            &[ff, d],
            &r.vec(D * FF),
        );
    }
    s
}

fn program(s: MemorySource, o: &ConfigOverrides) -> DecoderProgram {
    load(Arc::new(s), o).unwrap().1
}

fn run(p: &DecoderProgram, tokens: &[u32], mode: LogitsMode) -> Vec<f32> {
    let exe = CpuBackend::new(2).unwrap().compile(p).unwrap();
    let mut s = exe.new_session(512).unwrap();
    s.forward(tokens, mode).unwrap().to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum();
    dot / (na.sqrt() * nb.sqrt())
}

const PROMPT: [u32; 9] = [1, 5, 9, 30, 2, 39, 17, 8, 8];

#[test]
fn norm_pairing_on_permuted_rows_equals_neox_on_hf_rows() {
    let hf = program(llama(2, false, 7), &ConfigOverrides::default());
    let gg = program(llama(2, true, 7), &ConfigOverrides::default());
    assert_eq!(
        hf.layers[0]
            .attention()
            .unwrap()
            .rope
            .as_ref()
            .unwrap()
            .pairing,
        RopePairing::Neox
    );
    assert_eq!(
        gg.layers[0]
            .attention()
            .unwrap()
            .rope
            .as_ref()
            .unwrap()
            .pairing,
        RopePairing::Norm
    );
    let a = run(&hf, &PROMPT, LogitsMode::All);
    let b = run(&gg, &PROMPT, LogitsMode::All);
    assert!(max_diff(&a, &b) < 1e-4, "{}", max_diff(&a, &b));
    // The wrong pairing on permuted rows must differ (the test can fail).
    let wrong = program(
        llama(2, true, 7),
        &ConfigOverrides {
            rope_pairing: Some(RopePairing::Neox),
            ..Default::default()
        },
    );
    let c = run(&wrong, &PROMPT, LogitsMode::All);
    assert!(max_diff(&a, &c) > 1e-3);
}

#[test]
fn batched_prefill_matches_incremental_decode() {
    let p = program(llama(2, false, 3), &ConfigOverrides::default());
    let all = run(&p, &PROMPT, LogitsMode::All);
    let exe = CpuBackend::new(2).unwrap().compile(&p).unwrap();
    let mut s = exe.new_session(64).unwrap();
    for (t, &tok) in PROMPT.iter().enumerate() {
        let l = s.forward(&[tok], LogitsMode::Last).unwrap();
        assert!(
            max_diff(l, &all[t * VOCAB..(t + 1) * VOCAB]) < 1e-4,
            "t={t}"
        );
    }
    assert_eq!(s.position(), PROMPT.len());
    let last = run(&p, &PROMPT, LogitsMode::Last);
    assert!(max_diff(&last, &all[(PROMPT.len() - 1) * VOCAB..]) < 1e-5);
}

#[test]
fn long_prompt_split_into_chunks_matches_incremental() {
    let p = program(llama(1, false, 11), &ConfigOverrides::default());
    let tokens: Vec<u32> = (0..300u32).map(|i| (i * 7 + 3) % VOCAB as u32).collect();
    let all = run(&p, &tokens, LogitsMode::All);
    let exe = CpuBackend::new(2).unwrap().compile(&p).unwrap();
    let mut s = exe.new_session(400).unwrap();
    s.forward(&tokens[..299], LogitsMode::None).unwrap();
    let l = s.forward(&tokens[299..], LogitsMode::Last).unwrap();
    assert!(max_diff(l, &all[299 * VOCAB..]) < 1e-4);
}

#[test]
fn truncate_then_replay_reproduces_logits() {
    let p = program(llama(2, false, 5), &ConfigOverrides::default());
    let exe = CpuBackend::new(1).unwrap().compile(&p).unwrap();
    let mut s = exe.new_session(32).unwrap();
    let first = s.forward(&PROMPT, LogitsMode::Last).unwrap().to_vec();
    s.forward(&[3, 4, 5], LogitsMode::Last).unwrap();
    s.truncate(PROMPT.len() - 1);
    assert_eq!(s.position(), PROMPT.len() - 1);
    let again = s
        .forward(&PROMPT[PROMPT.len() - 1..], LogitsMode::Last)
        .unwrap();
    assert!(max_diff(&first, again) < 1e-5);
}

#[test]
fn sliding_window_limits_what_a_position_sees() {
    // One layer: logits at position p depend only on tokens in the window.
    let mut p = program(llama(1, false, 9), &ConfigOverrides::default());
    let a = run(&p, &[1, 2, 3, 4, 5, 6], LogitsMode::Last);
    let b = run(&p, &[7, 2, 3, 4, 5, 6], LogitsMode::Last);
    assert!(max_diff(&a, &b) > 1e-4, "full attention must see token 0");
    p.layers[0].attention_mut().unwrap().window = Some(5);
    let a = run(&p, &[1, 2, 3, 4, 5, 6], LogitsMode::Last);
    let b = run(&p, &[7, 2, 3, 4, 5, 6], LogitsMode::Last);
    assert!(
        max_diff(&a, &b) < 1e-6,
        "window 5 at position 5 must not see token 0"
    );
    let c = run(&p, &[1, 7, 3, 4, 5, 6], LogitsMode::Last);
    assert!(
        max_diff(&a, &c) > 1e-4,
        "window 5 at position 5 sees token 1"
    );
}

#[test]
fn f16_and_q8_0_weights_track_f32() {
    let src = llama(2, false, 13);
    let f32_logits = run(
        &program(src.clone(), &ConfigOverrides::default()),
        &PROMPT,
        LogitsMode::Last,
    );
    for ty in [GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0] {
        let mut s = src.clone();
        for info in anedvd_base::WeightSource::tensors(&src).to_vec() {
            if info.shape.len() != 2 {
                continue;
            }
            let t = anedvd_base::WeightSource::tensor(&src, &info.name).unwrap();
            let vals: Vec<f32> = t
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let mut bytes = vec![0u8; ty.tensor_bytes(&info.shape).unwrap() as usize];
            anedvd_quant::quantize(ty, &vals, &mut bytes).unwrap();
            s.insert_raw(&info.name, ty, &info.shape, bytes);
        }
        let l = run(
            &program(s, &ConfigOverrides::default()),
            &PROMPT,
            LogitsMode::Last,
        );
        let c = cosine(&l, &f32_logits);
        eprintln!("{ty}: cosine {c}, max diff {}", max_diff(&l, &f32_logits));
        let min = if ty == GgmlType::F16 { 0.99999 } else { 0.999 };
        assert!(c > min, "{ty}: cosine {c}");
    }
}

#[test]
fn errors_are_typed() {
    let p = program(llama(1, false, 1), &ConfigOverrides::default());
    let exe = CpuBackend::new(1).unwrap().compile(&p).unwrap();
    let mut s = exe.new_session(4).unwrap();
    let e = s.forward(&[1, VOCAB as u32], LogitsMode::Last).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TokenOutOfRange {
                token: 40,
                n_vocab: 40
            }
        ),
        "{e}"
    );
    assert_eq!(s.position(), 0);
    s.forward(&[1, 2, 3], LogitsMode::None).unwrap();
    let e = s.forward(&[1, 2], LogitsMode::Last).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ContextOverflow {
                needed: 5,
                max_seq: 4
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains('5') && e.to_string().contains('4'));
    assert!(s.forward(&[], LogitsMode::Last).is_err());
    assert!(s.forward(&[], LogitsMode::None).unwrap().is_empty());
    assert!(exe.new_session(0).is_err());
}

#[test]
fn dump_writes_named_intermediates_once() {
    let p = program(llama(2, false, 2), &ConfigOverrides::default());
    let exe = CpuBackend::new(1).unwrap().compile(&p).unwrap();
    let mut s = exe.new_session(16).unwrap();
    let dir = std::env::temp_dir().join(format!("anedvd-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    s.set_dump(Some(dir.clone()));
    s.forward(&PROMPT[..3], LogitsMode::Last).unwrap();
    let index = std::fs::read_to_string(dir.join("index.json")).unwrap();
    for name in [
        "blk.0.attn_norm",
        "blk.0.q",
        "blk.1.attn_out",
        "blk.1.ffn_out",
        "blk.1.out",
        "result_norm",
        "result_output",
    ] {
        assert!(index.contains(&format!("\"{name}\"")), "{name} missing");
        assert!(dir.join(format!("{name}.npy")).exists());
    }
    assert!(index.contains("\"blk.0.q\", \"shape\": [3, 32]"), "{index}");
    let npy = std::fs::read(dir.join("blk.1.out.npy")).unwrap();
    assert_eq!(&npy[..6], b"\x93NUMPY");
    assert_eq!(npy.len() % 16, 3 * 32 * 4 % 16);
    // Only the next forward is dumped.
    std::fs::remove_dir_all(&dir).unwrap();
    s.forward(&[4], LogitsMode::Last).unwrap();
    assert!(!dir.exists());
}
