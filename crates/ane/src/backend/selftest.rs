//! A tiny random transformer (no files, no model crate) for `anedvd selftest`:
//! ane-sim against the CPU backend on a llama-like and a gemma-like program.

use anedvd_cpu::CpuBackend;
use anedvd_graph::{
    Activation, Attention, AttentionBias, Backend, Block, DecoderProgram, DenseFfn, FeedForward,
    LogitsMode, MemorySource, Mixer, NormPlacement, NormSpec, Result, Rope, RopePairing,
};
use std::sync::Arc;

use super::{AneSimBackend, LowerOptions, Variant};

/// Which quirks the random program has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// SiLU, q/k/v biases, GQA, adjacent-pair RoPE.
    LlamaLike,
    /// GELU (tanh), sandwich norms with `(1 + w)`, q/k norm, sliding window
    /// on layer 0, attention and final soft-caps, embedding scale, MQA.
    GemmaLike,
}

impl Flavor {
    /// Display name.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::LlamaLike => "llama-like",
            Flavor::GemmaLike => "gemma-like",
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32, bias: f32) -> Vec<f32> {
        (0..n).map(|_| bias + scale * self.next()).collect()
    }
}

/// A random 2-layer decoder (n_embd 64, vocab 256) of `flavor`.
pub fn random_program(flavor: Flavor, seed: u64) -> DecoderProgram {
    let gemma = flavor == Flavor::GemmaLike;
    let (d, vocab, ff, n_layer, hd) = (64usize, 256usize, 128usize, 2usize, 16usize);
    let (n_head, n_kv) = if gemma { (4, 1) } else { (4, 2) };
    let mut rng = Rng(seed);
    let mut src = MemorySource::new("gguf");
    let put = |src: &mut MemorySource,
               rng: &mut Rng,
               name: &str,
               shape: &[u64],
               scale: f32,
               bias: f32| {
        let n = shape.iter().product::<u64>() as usize;
        let v = rng.vec(n, scale, bias);
        src.insert_f32(name, shape, &v);
        name.to_string()
    };
    let (du, ffu, vu) = (d as u64, ff as u64, vocab as u64);
    let (qd, kvd) = ((n_head * hd) as u64, (n_kv * hd) as u64);
    let w_in = 1.0 / (d as f32).sqrt();
    let norm_bias = if gemma { 0.0 } else { 1.0 };
    let mut layers = Vec::new();
    for i in 0..n_layer {
        let t = |r: &str| format!("blk.{i}.{r}");
        let mut put = |name: &str, shape: &[u64], scale: f32, bias: f32| {
            put(&mut src, &mut rng, &t(name), shape, scale, bias)
        };
        let attn_norm = put("attn_norm", &[du], 0.2, norm_bias);
        let wq = put("attn_q", &[du, qd], w_in * 1.7, 0.0);
        let wk = put("attn_k", &[du, kvd], w_in * 1.7, 0.0);
        let wv = put("attn_v", &[du, kvd], w_in * 1.7, 0.0);
        let wo = put("attn_output", &[qd, du], w_in, 0.0);
        let ffn_norm = put("ffn_norm", &[du], 0.2, norm_bias);
        let gate = put("ffn_gate", &[du, ffu], w_in * 1.7, 0.0);
        let up = put("ffn_up", &[du, ffu], w_in * 1.7, 0.0);
        let down = put("ffn_down", &[ffu, du], 1.0 / (ff as f32).sqrt(), 0.0);
        let (norms, bias, q_norm, k_norm) = if gemma {
            let post_mixer = put("post_attention_norm", &[du], 0.2, 0.0);
            let post_ffn = put("post_ffw_norm", &[du], 0.2, 0.0);
            let q_norm = put("attn_q_norm", &[hd as u64], 0.2, 0.0);
            let k_norm = put("attn_k_norm", &[hd as u64], 0.2, 0.0);
            let norms = NormPlacement::Sandwich {
                mixer: attn_norm,
                post_mixer,
                ffn: ffn_norm,
                post_ffn,
            };
            (norms, AttentionBias::default(), Some(q_norm), Some(k_norm))
        } else {
            let bias = AttentionBias {
                q: Some(put("attn_q.bias", &[qd], 0.3, 0.0)),
                k: Some(put("attn_k.bias", &[kvd], 0.3, 0.0)),
                v: Some(put("attn_v.bias", &[kvd], 0.3, 0.0)),
                o: None,
            };
            let norms = NormPlacement::Pre {
                mixer: attn_norm,
                ffn: ffn_norm,
            };
            (norms, bias, None, None)
        };
        let theta: f64 = if gemma && i == 0 {
            10_000.0
        } else {
            1_000_000.0
        };
        let inv_freq = (0..hd / 2)
            .map(|j| theta.powf(-(2.0 * j as f64) / hd as f64))
            .collect();
        let attention = Attention {
            n_head,
            n_head_kv: n_kv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap: gemma.then_some(20.0),
            window: (gemma && i == 0).then_some(6),
            rope: Some(Rope {
                pairing: if gemma {
                    RopePairing::Neox
                } else {
                    RopePairing::Norm
                },
                n_rot: hd,
                inv_freq,
                attn_factor: 1.0,
            }),
            kv_source: None,
            wq,
            wk,
            wv,
            wo,
            bias,
            q_norm,
            k_norm,
            v_norm: false,
        };
        let ffn = DenseFfn {
            n_ff: ff,
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            gate,
            up,
            down,
        };
        layers.push(Block {
            norms,
            mixer: Mixer::Attention(attention),
            ffn: FeedForward::Dense(ffn),
            per_layer_input: None,
            layer_scale: None,
        });
    }
    let token_embd = put(
        &mut src,
        &mut rng,
        "token_embd",
        &[du, vu],
        if gemma { 0.15 } else { 1.0 },
        0.0,
    );
    let output_norm = put(&mut src, &mut rng, "output_norm", &[du], 0.2, norm_bias);
    let output = (!gemma).then(|| put(&mut src, &mut rng, "output", &[du, vu], w_in * 1.7, 0.0));
    DecoderProgram {
        family: flavor.name().into(),
        n_embd: d,
        n_vocab: vocab,
        n_ctx_train: 256,
        norm: NormSpec {
            eps: 1e-6,
            weight_offset: if gemma { 1.0 } else { 0.0 },
        },
        embd_scale: if gemma { (d as f32).sqrt() } else { 1.0 },
        final_softcap: gemma.then_some(15.0),
        token_embd,
        output_norm,
        output,
        layers,
        per_layer_embd: None,
        weights: Arc::new(src),
    }
}

/// One comparison of ane-sim with the CPU backend.
#[derive(Debug, Clone, PartialEq)]
pub struct SelftestResult {
    /// Program flavor.
    pub flavor: Flavor,
    /// Lowering variant.
    pub variant: Variant,
    /// Cosine similarity of the last logits.
    pub cosine: f64,
    /// `max|Δ| / max|cpu|` over the last logits.
    pub max_rel: f64,
    /// Whether the arg-max tokens agree.
    pub top1_equal: bool,
}

/// Runs a 20-token random prompt through both backends for every flavor and variant.
pub fn run(seed: u64) -> Result<Vec<SelftestResult>> {
    let mut out = Vec::new();
    for flavor in [Flavor::LlamaLike, Flavor::GemmaLike] {
        let p = random_program(flavor, seed);
        p.validate()?;
        let mut rng = Rng(seed ^ 0x9e37_79b9);
        let prompt: Vec<u32> = (0..20)
            .map(|_| ((rng.next() + 1.0) * 127.9) as u32 % p.n_vocab as u32)
            .collect();
        let cpu = CpuBackend::new(1)?.compile(&p)?;
        let want = cpu
            .new_session(32)?
            .forward(&prompt, LogitsMode::Last)?
            .to_vec();
        for variant in [Variant::Split, Variant::Fused] {
            let exe = AneSimBackend::new(LowerOptions {
                variant,
                ..Default::default()
            })
            .compile(&p)?;
            let got = exe
                .new_session(32)?
                .forward(&prompt, LogitsMode::Last)?
                .to_vec();
            out.push(SelftestResult {
                flavor,
                variant,
                cosine: cosine(&got, &want),
                max_rel: max_rel(&got, &want),
                top1_equal: argmax(&got) == argmax(&want),
            });
        }
    }
    Ok(out)
}

/// Cosine similarity (f64 accumulation).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum();
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot / (na.sqrt() * nb.sqrt())
}

/// `max|a − b| / max|b|`; infinite if `a` holds a NaN or infinity.
pub fn max_rel(a: &[f32], b: &[f32]) -> f64 {
    if a.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    if scale == 0.0 {
        return f64::from(diff);
    }
    f64::from(diff) / f64::from(scale)
}

/// Index of the largest value (first on ties).
pub fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b })
}
