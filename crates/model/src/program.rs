//! Turns a [`DecoderConfig`] into a resolved [`DecoderProgram`]: per-layer
//! blocks with their RoPE frequencies (or none), windows, and the family
//! table's tensor names in typed fields.

use crate::config::{present_tensor, tensor_name, DecoderConfig, MoeConfig, RopeScaling};
use crate::family::Family;
use crate::views::{RowView, RowViews};
use crate::{Error, Result};
use anedvd_base::{GgmlType, WeightSource};
use anedvd_graph::{
    Activation, Attention, AttentionBias, Block, DecoderProgram, DenseFfn, ExpertTensors,
    FeedForward, Mixer, MoeFfn, NormPlacement, NormSpec, PerLayerEmbedding, PerLayerInput, Role,
    Rope, SharedExpert, ShortConv,
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

/// HF's LongRoPE frequencies (`_compute_longrope_parameters`): the base
/// frequencies divided by one factor per rotated pair.
pub fn longrope_inv_freq(theta: f64, n_rot: usize, factors: &[f64]) -> Vec<f64> {
    base_inv_freq(theta, n_rot)
        .iter()
        .zip(factors)
        .map(|(f, d)| f / d)
        .collect()
}

/// HF's LongRoPE cos/sin multiplier: `given`, else `sqrt(1 + ln(s) /
/// ln(original))` for the context ratio `s = context / original` (1 when
/// `s <= 1`).
pub fn longrope_attention_factor(context: f64, original_context: f64, given: Option<f64>) -> f64 {
    let s = context / original_context;
    given.unwrap_or(if s <= 1.0 {
        1.0
    } else {
        (1.0 + s.ln() / original_context.ln()).sqrt()
    })
}

/// HF's "proportional" RoPE (`_compute_proportional_rope_parameters`):
/// over the whole `head_dim`, the first `floor(fraction · head_dim / 2)`
/// pairs rotate at `theta^(-2j/head_dim) / factor`, the rest get frequency
/// 0 (they pass through).
pub fn proportional_inv_freq(theta: f64, head_dim: usize, fraction: f64, factor: f64) -> Vec<f64> {
    let rotated = (fraction * head_dim as f64 / 2.0).floor() as usize;
    base_inv_freq(theta, head_dim)
        .into_iter()
        .enumerate()
        .map(|(j, f)| if j < rotated { f / factor } else { 0.0 })
        .collect()
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
        RopeScaling::FreqFactors {
            tensor,
            attention_factor,
        } => {
            let factors = read_f32_vector(source, tensor, cfg.rope.n_rot / 2)?;
            let freqs = base.iter().zip(&factors).map(|(f, d)| f / d).collect();
            return Ok((freqs, *attention_factor as f32));
        }
        RopeScaling::LongRope {
            factors,
            attention_factor,
        } => {
            if factors.len() != base.len() {
                return Err(Error::Invalid(format!(
                    "{} LongRoPE factors for {} rotated pairs",
                    factors.len(),
                    base.len()
                )));
            }
            let freqs = longrope_inv_freq(cfg.rope.theta, cfg.rope.n_rot, factors);
            return Ok((freqs, *attention_factor as f32));
        }
        RopeScaling::Proportional { fraction, factor } => {
            proportional_inv_freq(cfg.rope.theta, cfg.rope.n_rot, *fraction, *factor)
        }
        RopeScaling::Yarn { .. } => base,
    };
    Ok((freqs, 1.0))
}

/// Names of one layer's tensors: the first of a role's names the source
/// has, and row views of fused tensors (registered as the layer is built).
struct Names<'a> {
    cfg: &'a DecoderConfig,
    family: &'a Family,
    source: &'a dyn WeightSource,
    layer: usize,
    views: &'a mut Vec<RowView>,
}

impl Names<'_> {
    fn optional(&self, role: Role) -> Option<String> {
        present_tensor(self.source, self.family, self.cfg.format, role, self.layer)
    }

    fn required(&self, role: Role) -> Result<String> {
        self.optional(role).ok_or_else(|| {
            Error::MissingTensor(tensor_name(self.family, self.cfg.format, role, self.layer))
        })
    }

    fn required_if(&self, needed: bool, role: Role) -> Result<Option<String>> {
        if needed {
            self.required(role).map(Some)
        } else {
            Ok(self.optional(role))
        }
    }

    /// `separate` roles, or views of consecutive row ranges of the `fused`
    /// tensor (sizes `widths`) when the separate ones are absent.
    fn split<const N: usize>(
        &mut self,
        separate: [Role; N],
        fused: Role,
        widths: [usize; N],
        parts: [&str; N],
    ) -> Result<[String; N]> {
        let found = separate.map(|r| self.optional(r));
        if found.iter().all(|n| n.is_some()) {
            return Ok(found.map(|n| n.unwrap_or_default()));
        }
        let Some(of) = self.optional(fused) else {
            // Name the first missing separate tensor.
            let missing = separate[found.iter().position(|n| n.is_none()).unwrap_or(0)];
            return Err(Error::MissingTensor(tensor_name(
                self.family,
                self.cfg.format,
                missing,
                self.layer,
            )));
        };
        // The fused rows must be exactly the parts (a wider or narrower
        // tensor means the config and the file disagree).
        let total: usize = widths.iter().sum();
        if let Some(t) = self.source.tensor(&of) {
            let cols = t.info.shape.first().copied().unwrap_or(0);
            if t.info.shape != [cols, total as u64] {
                return Err(Error::Program(anedvd_graph::Error::Shape {
                    tensor: of,
                    expected: vec![cols, total as u64],
                    found: t.info.shape.clone(),
                }));
            }
        }
        let mut row = 0;
        let mut out: [String; N] = std::array::from_fn(|_| String::new());
        for ((w, part), name) in widths.iter().zip(parts).zip(out.iter_mut()) {
            *name = format!("{of}#{part}");
            self.views.push(RowView {
                name: name.clone(),
                of: of.clone(),
                rows: row..row + w,
            });
            row += w;
        }
        Ok(out)
    }

    /// Expert tensors of `role`: one per expert when the name template has
    /// `{e}` (HF), else the stacked 3-D tensor (GGUF).
    fn experts(&self, role: Role, n_expert: usize) -> Result<ExpertNames> {
        let template = tensor_name(self.family, self.cfg.format, role, self.layer);
        if !template.contains("{e}") {
            return self.required(role).map(ExpertNames::Stacked);
        }
        (0..n_expert)
            .map(|e| {
                let n = template.replace("{e}", &e.to_string());
                match self.source.tensor(&n) {
                    Some(_) => Ok(n),
                    None => Err(Error::MissingTensor(n)),
                }
            })
            .collect::<Result<_>>()
            .map(ExpertNames::PerExpert)
    }
}

enum ExpertNames {
    Stacked(String),
    PerExpert(Vec<String>),
}

/// The mixture of experts of layer `names.layer`.
fn moe_ffn(names: &Names<'_>, moe: &MoeConfig, activation: Activation) -> Result<MoeFfn> {
    let ne = moe.n_expert;
    let experts = match (
        names.experts(Role::FfnGateExps, ne)?,
        names.experts(Role::FfnUpExps, ne)?,
        names.experts(Role::FfnDownExps, ne)?,
    ) {
        (ExpertNames::Stacked(gate), ExpertNames::Stacked(up), ExpertNames::Stacked(down)) => {
            ExpertTensors::Stacked { gate, up, down }
        }
        (
            ExpertNames::PerExpert(gate),
            ExpertNames::PerExpert(up),
            ExpertNames::PerExpert(down),
        ) => ExpertTensors::PerExpert { gate, up, down },
        _ => {
            return Err(Error::Invalid(format!(
                "layer {}: expert tensors mix stacked and per-expert naming",
                names.layer
            )))
        }
    };
    let shared = match names.optional(Role::FfnGateShexp) {
        None => None,
        Some(gate) => {
            // The width from the metadata, else from the tensor itself.
            let n_ff = match moe.n_ff_shared {
                Some(n) => n,
                None => names
                    .source
                    .tensor(&gate)
                    .and_then(|t| t.info.shape.get(1).copied())
                    .unwrap_or(0) as usize,
            };
            Some(SharedExpert {
                ffn: DenseFfn {
                    n_ff,
                    activation,
                    gate,
                    up: names.required(Role::FfnUpShexp)?,
                    down: names.required(Role::FfnDownShexp)?,
                },
                gate_inp: names.optional(Role::FfnGateInpShexp),
            })
        }
    };
    Ok(MoeFfn {
        n_expert: ne,
        n_expert_used: moe.n_expert_used,
        n_ff_expert: moe.n_ff_expert,
        activation,
        router: names.required(Role::FfnGateInp)?,
        gating: moe.gating,
        selection_bias: names.optional(Role::FfnExpProbsB),
        normalize_top_k: moe.normalize_top_k,
        weights_scale: moe.weights_scale,
        experts,
        shared,
    })
}

/// Builds the program for `cfg` over `source`: every layer a block of the
/// variants the config implies, naming the family table's tensors (fused
/// ones through row views), then validates shapes.
pub(crate) fn build(
    cfg: &DecoderConfig,
    family: &Family,
    source: Arc<dyn WeightSource>,
) -> Result<DecoderProgram> {
    let (global, global_attn_factor) = global_inv_freq(cfg, source.as_ref())?;
    // Sliding layers' RoPE: their own base (Gemma 3/4) and width (Gemma 4).
    let local_n_rot = cfg.rope.n_rot_local.unwrap_or(cfg.rope.n_rot);
    let local = match (cfg.rope.theta_local, cfg.rope.n_rot_local) {
        (None, None) => None,
        (theta, _) => Some(base_inv_freq(theta.unwrap_or(cfg.rope.theta), local_n_rot)),
    };
    let mut layers = Vec::with_capacity(cfg.n_layer);
    let mut views = Vec::new();
    for i in 0..cfg.n_layer {
        let sliding =
            cfg.sliding_layers.get(i).copied().unwrap_or(false) && cfg.sliding_window.is_some();
        let local_type = cfg.local_layers.get(i).copied().unwrap_or(false);
        let (inv_freq, attn_factor, n_rot) = match (&local, local_type) {
            (Some(l), true) => (l.clone(), 1.0, local_n_rot),
            _ => (global.clone(), global_attn_factor, cfg.rope.n_rot),
        };
        let head_dim = cfg.head_dim_layers.get(i).copied().unwrap_or(cfg.head_dim);
        let n_ff = cfg.n_ff_layers.get(i).copied().unwrap_or(cfg.n_ff);
        let kv_source = cfg.kv_sources.get(i).copied().flatten();
        let mut names = Names {
            cfg,
            family,
            source: source.as_ref(),
            layer: i,
            views: &mut views,
        };
        let norms = if cfg.sandwich_norm {
            NormPlacement::Sandwich {
                mixer: names.required(Role::AttnNorm)?,
                post_mixer: names.required(Role::PostAttnNorm)?,
                ffn: names.required(Role::FfnNorm)?,
                post_ffn: names.required(Role::PostFfnNorm)?,
            }
        } else {
            NormPlacement::Pre {
                mixer: names.required(Role::AttnNorm)?,
                ffn: names.required(Role::FfnNorm)?,
            }
        };
        let mixer = match (cfg.conv_layers.get(i), cfg.conv_kernel) {
            (Some(true), Some(kernel)) => Mixer::ShortConv(ShortConv {
                kernel,
                in_proj: names.required(Role::ShortConvInProj)?,
                conv: names.required(Role::ShortConvConv)?,
                out_proj: names.required(Role::ShortConvOutProj)?,
            }),
            _ => {
                let n_head_kv = cfg
                    .n_head_kv_layers
                    .get(i)
                    .copied()
                    .unwrap_or(cfg.n_head_kv);
                let (q, kv) = (cfg.n_head * head_dim, n_head_kv * head_dim);
                let uses_rope = cfg.rope_layers.get(i).copied().unwrap_or(true);
                let (wq, wk, wv, k_bias, v_bias, k_norm) = match kv_source {
                    // K/V come from the source layer: name its tensors.
                    Some(src) => {
                        let Some(a) = layers.get(src).and_then(Block::attention) else {
                            return Err(Error::Invalid(format!(
                                "layer {i} reads K/V of layer {src}, which is not an attention layer"
                            )));
                        };
                        (
                            names.required(Role::AttnQ)?,
                            a.wk.clone(),
                            a.wv.clone(),
                            a.bias.k.clone(),
                            a.bias.v.clone(),
                            a.k_norm.clone(),
                        )
                    }
                    // V is the K projection (Gemma 4 31B): name K's
                    // tensors for both.
                    None if cfg.v_from_k_layers.get(i).copied().unwrap_or(false) => {
                        let wk = names.required(Role::AttnK)?;
                        let k_bias = names.required_if(cfg.qkv_bias, Role::AttnKBias)?;
                        (
                            names.required(Role::AttnQ)?,
                            wk.clone(),
                            wk,
                            k_bias.clone(),
                            k_bias,
                            names.required_if(cfg.qk_norm, Role::AttnKNorm)?,
                        )
                    }
                    None => {
                        let [wq, wk, wv] = names.split(
                            [Role::AttnQ, Role::AttnK, Role::AttnV],
                            Role::AttnQkv,
                            [q, kv, kv],
                            ["q", "k", "v"],
                        )?;
                        (
                            wq,
                            wk,
                            wv,
                            names.required_if(cfg.qkv_bias, Role::AttnKBias)?,
                            names.required_if(cfg.qkv_bias, Role::AttnVBias)?,
                            names.required_if(cfg.qk_norm, Role::AttnKNorm)?,
                        )
                    }
                };
                Mixer::Attention(Attention {
                    n_head: cfg.n_head,
                    n_head_kv,
                    head_dim,
                    scale: cfg.attn_scale,
                    softcap: cfg.attn_softcap,
                    window: if sliding { cfg.sliding_window } else { None },
                    rope: uses_rope.then_some(Rope {
                        pairing: cfg.rope.pairing,
                        n_rot,
                        inv_freq,
                        attn_factor,
                    }),
                    kv_source,
                    wq,
                    wk,
                    wv,
                    wo: names.required(Role::AttnOutput)?,
                    bias: AttentionBias {
                        q: names.required_if(cfg.qkv_bias, Role::AttnQBias)?,
                        k: k_bias,
                        v: v_bias,
                        o: names.optional(Role::AttnOutputBias),
                    },
                    q_norm: names.required_if(cfg.qk_norm, Role::AttnQNorm)?,
                    k_norm,
                    v_norm: cfg.v_norm,
                })
            }
        };
        let ffn = match (&cfg.moe, cfg.moe_layers.get(i)) {
            (Some(moe), Some(true)) => FeedForward::Moe(moe_ffn(&names, moe, cfg.activation)?),
            _ => {
                let [gate, up] = names.split(
                    [Role::FfnGate, Role::FfnUp],
                    Role::FfnGateUp,
                    [n_ff, n_ff],
                    ["gate", "up"],
                )?;
                FeedForward::Dense(DenseFfn {
                    n_ff,
                    activation: cfg.activation,
                    gate,
                    up,
                    down: names.required(Role::FfnDown)?,
                })
            }
        };
        let per_layer_input = match cfg.per_layer_input {
            None => None,
            Some(width) => Some(PerLayerInput {
                width,
                activation: cfg.activation,
                gate: names.required(Role::PerLayerInpGate)?,
                proj: names.required(Role::PerLayerProj)?,
                norm: names.required(Role::PerLayerPostNorm)?,
            }),
        };
        layers.push(Block {
            norms,
            mixer,
            ffn,
            per_layer_input,
            layer_scale: names.optional(Role::LayerOutputScale),
        });
    }
    let weights: Arc<dyn WeightSource> = if views.is_empty() {
        source
    } else {
        Arc::new(RowViews::new(source, views).map_err(Error::Invalid)?)
    };
    let global = |role| {
        present_tensor(weights.as_ref(), family, cfg.format, role, 0)
            .unwrap_or_else(|| tensor_name(family, cfg.format, role, 0))
    };
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
        token_embd: global(Role::TokenEmbd),
        output_norm: global(Role::OutputNorm),
        output: if cfg.tied_output {
            None
        } else {
            Some(global(Role::Output))
        },
        layers,
        // Gemma 4's scales are fixed by the architecture (no metadata key).
        per_layer_embd: cfg.per_layer_input.map(|width| PerLayerEmbedding {
            width,
            token_table: global(Role::PerLayerTokenEmbd),
            token_scale: (width as f32).sqrt(),
            model_proj: global(Role::PerLayerModelProj),
            model_proj_scale: 1.0 / (cfg.n_embd as f32).sqrt(),
            proj_norm: global(Role::PerLayerProjNorm),
            combine_scale: std::f32::consts::FRAC_1_SQRT_2,
        }),
        weights,
    };
    program.validate()?;
    Ok(program)
}
