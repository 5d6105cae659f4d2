//! Turns a [`DecoderConfig`] into a resolved [`DecoderProgram`]: per-layer
//! blocks with their RoPE frequencies (or none), windows, and the family
//! table's tensor names in typed fields.

use crate::config::{tensor_name, DecoderConfig, RopeScaling};
use crate::family::Family;
use crate::{Error, Result};
use anedvd_base::{GgmlType, WeightSource};
use anedvd_graph::{
    Attention, AttentionBias, Block, DecoderProgram, DenseFfn, FeedForward, Mixer, NormPlacement,
    NormSpec, Role, Rope,
};
use std::sync::Arc;

/// Base frequencies `theta^(-2i/n_rot)` for `i < n_rot/2`.
pub fn base_inv_freq(theta: f64, n_rot: usize) -> Vec<f64> {
    (0..n_rot / 2)
        .map(|i| theta.powf(-((2 * i) as f64) / n_rot as f64))
        .collect()
}

/// Applies HF's llama3 frequency rule (`_compute_llama3_parameters`).
pub fn llama3_inv_freq(
    inv_freq: &[f64],
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    original_context: f64,
) -> Vec<f64> {
    let low_wavelen = original_context / low_freq_factor;
    let high_wavelen = original_context / high_freq_factor;
    inv_freq
        .iter()
        .map(|&f| {
            let wavelen = 2.0 * std::f64::consts::PI / f;
            if wavelen < high_wavelen {
                f
            } else if wavelen > low_wavelen {
                f / factor
            } else {
                let smooth = (original_context / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                (1.0 - smooth) * f / factor + smooth * f
            }
        })
        .collect()
}

/// HF's YaRN rule (`_compute_yarn_parameters`): frequencies and the cos/sin
/// multiplier.
pub fn yarn_inv_freq(
    theta: f64,
    n_rot: usize,
    factor: f64,
    original_context: f64,
    (beta_fast, beta_slow): (f64, f64),
    attention_factor: Option<f64>,
    truncate: bool,
) -> (Vec<f64>, f64) {
    let dim = n_rot as f64;
    let corr = |rot: f64| {
        dim * (original_context / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
    };
    let (mut low, mut high) = (corr(beta_fast), corr(beta_slow));
    if truncate {
        low = low.floor();
        high = high.ceil();
    }
    let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
    if low == high {
        high += 0.001;
    }
    let base = base_inv_freq(theta, n_rot);
    let freqs = base
        .iter()
        .enumerate()
        .map(|(i, &extrapolated)| {
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let extrapolation = 1.0 - ramp;
            extrapolated / factor * (1.0 - extrapolation) + extrapolated * extrapolation
        })
        .collect();
    let attn = attention_factor.unwrap_or(if factor <= 1.0 {
        1.0
    } else {
        0.1 * factor.ln() + 1.0
    });
    (freqs, attn)
}

fn read_f32_vector(source: &dyn WeightSource, name: &str, len: usize) -> Result<Vec<f64>> {
    let t = source
        .tensor(name)
        .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
    if t.info.dtype != GgmlType::F32 || t.info.elements() != len as u64 || t.data.len() != len * 4 {
        return Err(Error::Program(anedvd_graph::Error::Shape {
            tensor: name.to_string(),
            expected: vec![len as u64],
            found: t.info.shape.clone(),
        }));
    }
    Ok(t.data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
        .collect())
}

/// Frequencies and cos/sin multiplier of global layers.
fn global_inv_freq(cfg: &DecoderConfig, source: &dyn WeightSource) -> Result<(Vec<f64>, f32)> {
    let base = base_inv_freq(cfg.rope.theta, cfg.rope.n_rot);
    if let RopeScaling::Yarn {
        factor,
        original_context,
        beta_fast,
        beta_slow,
        attention_factor,
        truncate,
    } = &cfg.rope.scaling
    {
        let (f, a) = yarn_inv_freq(
            cfg.rope.theta,
            cfg.rope.n_rot,
            *factor,
            *original_context,
            (*beta_fast, *beta_slow),
            *attention_factor,
            *truncate,
        );
        return Ok((f, a as f32));
    }
    let freqs = match &cfg.rope.scaling {
        RopeScaling::None => base,
        RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_context,
        } => llama3_inv_freq(
            &base,
            *factor,
            *low_freq_factor,
            *high_freq_factor,
            *original_context,
        ),
        RopeScaling::FreqFactors { tensor } => {
            let factors = read_f32_vector(source, tensor, cfg.rope.n_rot / 2)?;
            base.iter().zip(&factors).map(|(f, d)| f / d).collect()
        }
        RopeScaling::Yarn { .. } => base,
    };
    Ok((freqs, 1.0))
}

/// Builds the program for `cfg` over `source`: every layer a block of the
/// variants the config implies, naming the family table's tensors, then
/// validates shapes.
pub(crate) fn build(
    cfg: &DecoderConfig,
    family: &Family,
    source: Arc<dyn WeightSource>,
) -> Result<DecoderProgram> {
    let (global, global_attn_factor) = global_inv_freq(cfg, source.as_ref())?;
    let local = cfg
        .rope
        .theta_local
        .map(|t| base_inv_freq(t, cfg.rope.n_rot));
    let mut layers = Vec::with_capacity(cfg.n_layer);
    for i in 0..cfg.n_layer {
        let sliding =
            cfg.sliding_layers.get(i).copied().unwrap_or(false) && cfg.sliding_window.is_some();
        let (inv_freq, attn_factor) = match (&local, sliding) {
            (Some(l), true) => (l.clone(), 1.0),
            _ => (global.clone(), global_attn_factor),
        };
        let name = |role: Role| tensor_name(family, cfg.format, role, i);
        let optional = |role: Role| Some(name(role)).filter(|n| source.tensor(n).is_some());
        let required = |role: Role| -> Result<String> {
            optional(role).ok_or_else(|| Error::MissingTensor(name(role)))
        };
        let required_if = |needed: bool, role: Role| -> Result<Option<String>> {
            if needed {
                required(role).map(Some)
            } else {
                Ok(optional(role))
            }
        };
        let norms = if cfg.sandwich_norm {
            NormPlacement::Sandwich {
                mixer: required(Role::AttnNorm)?,
                post_mixer: required(Role::PostAttnNorm)?,
                ffn: required(Role::FfnNorm)?,
                post_ffn: required(Role::PostFfnNorm)?,
            }
        } else {
            NormPlacement::Pre {
                mixer: required(Role::AttnNorm)?,
                ffn: required(Role::FfnNorm)?,
            }
        };
        let uses_rope = cfg.rope_layers.get(i).copied().unwrap_or(true);
        let attention = Attention {
            n_head: cfg.n_head,
            n_head_kv: cfg.n_head_kv,
            head_dim: cfg.head_dim,
            scale: cfg.attn_scale,
            softcap: cfg.attn_softcap,
            window: if sliding { cfg.sliding_window } else { None },
            rope: uses_rope.then_some(Rope {
                pairing: cfg.rope.pairing,
                n_rot: cfg.rope.n_rot,
                inv_freq,
                attn_factor,
            }),
            kv_source: None,
            wq: required(Role::AttnQ)?,
            wk: required(Role::AttnK)?,
            wv: required(Role::AttnV)?,
            wo: required(Role::AttnOutput)?,
            bias: AttentionBias {
                q: required_if(cfg.qkv_bias, Role::AttnQBias)?,
                k: required_if(cfg.qkv_bias, Role::AttnKBias)?,
                v: required_if(cfg.qkv_bias, Role::AttnVBias)?,
                o: optional(Role::AttnOutputBias),
            },
            q_norm: required_if(cfg.qk_norm, Role::AttnQNorm)?,
            k_norm: required_if(cfg.qk_norm, Role::AttnKNorm)?,
        };
        let ffn = DenseFfn {
            n_ff: cfg.n_ff,
            activation: cfg.activation,
            gate: required(Role::FfnGate)?,
            up: required(Role::FfnUp)?,
            down: required(Role::FfnDown)?,
        };
        layers.push(Block {
            norms,
            mixer: Mixer::Attention(attention),
            ffn: FeedForward::Dense(ffn),
            per_layer_input: None,
        });
    }
    let name = |role| tensor_name(family, cfg.format, role, 0);
    let program = DecoderProgram {
        family: cfg.family.to_string(),
        n_embd: cfg.n_embd,
        n_vocab: cfg.n_vocab,
        n_ctx_train: cfg.n_ctx_train,
        norm: NormSpec {
            eps: cfg.norm_eps,
            weight_offset: cfg.norm_weight_offset,
        },
        embd_scale: cfg.embd_scale,
        final_softcap: cfg.final_softcap,
        token_embd: name(Role::TokenEmbd),
        output_norm: name(Role::OutputNorm),
        output: if cfg.tied_output {
            None
        } else {
            Some(name(Role::Output))
        },
        layers,
        weights: source,
    };
    program.validate()?;
    Ok(program)
}
