//! [`DecoderConfig`]: every option of the generic decoder as data, resolved
//! from metadata through a family table.

use crate::family::{Family, Param, SlidingDefault};
use crate::{Error, Result};
use anedvd_base::{Metadata, MetadataArray, MetadataValue, WeightSource};
use anedvd_graph::{Activation, Gating, Role, RopePairing};

/// The naming a weight source uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFormat {
    /// GGUF keys and tensor names (`blk.{i}.attn_q.weight`).
    Gguf,
    /// HF config.json keys and safetensors names (`model.layers.{i}...`).
    HuggingFace,
}

/// RoPE frequency scaling of global layers.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Frequencies divided by `factor` (position interpolation).
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// Llama 3.x smooth per-frequency scaling (HF `rope_type = "llama3"`).
    Llama3 {
        /// Divisor of low frequencies.
        factor: f64,
        /// `low_freq_factor`.
        low_freq_factor: f64,
        /// `high_freq_factor`.
        high_freq_factor: f64,
        /// `original_max_position_embeddings`.
        original_context: f64,
    },
    /// YaRN (HF `rope_type = "yarn"`): a ramp between interpolated and
    /// extrapolated frequencies plus a cos/sin multiplier.
    Yarn {
        /// Context extension factor.
        factor: f64,
        /// `original_max_position_embeddings`.
        original_context: f64,
        /// `beta_fast` (default 32).
        beta_fast: f64,
        /// `beta_slow` (default 1).
        beta_slow: f64,
        /// cos/sin multiplier; `0.1 ln(factor) + 1` when unset.
        attention_factor: Option<f64>,
        /// Round the correction range outwards (default true).
        truncate: bool,
    },
    /// Per-pair divisors stored in a tensor (llama.cpp's `rope_freqs.weight`,
    /// how GGUF files carry llama3 scaling, and `rope_factors_short.weight`
    /// for LongRoPE), with the cos/sin multiplier of
    /// `{arch}.rope.scaling.attn_factor` when set.
    FreqFactors {
        /// The tensor name.
        tensor: String,
        /// cos/sin multiplier (1 unless the file sets one).
        attention_factor: f64,
    },
    /// HF's "proportional" RoPE (Gemma 4's full layers): half-split pairs
    /// over the whole head dim, frequencies `theta^(-2j/d)` over that full
    /// width, and only the first `floor(fraction · d / 2)` pairs rotating
    /// (the others get frequency 0: pass-through).
    Proportional {
        /// The share of pairs that rotate (`partial_rotary_factor`).
        fraction: f64,
        /// Divisor of the rotating frequencies (`factor`, default 1).
        factor: f64,
    },
    /// LongRoPE (HF `rope_type = "longrope"`, Phi-3): frequencies divided by
    /// per-pair factors and cos/sin scaled by `sqrt(1 + ln(s) / ln(orig))`
    /// with `s = max_position_embeddings / orig`. transformers uses the
    /// short factors while a sequence fits the original context and the long
    /// ones past it; a program has one set of frequencies, so we keep the
    /// short ones (exact up to the original context; `model::notes` says so).
    LongRope {
        /// The short factors, one per rotated pair.
        factors: Vec<f64>,
        /// The cos/sin multiplier.
        attention_factor: f64,
    },
}

/// RoPE options.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeConfig {
    /// Base of global (full-attention) layers.
    pub theta: f64,
    /// Base of sliding layers, when they differ (Gemma 3); such layers get no scaling.
    pub theta_local: Option<f64>,
    /// Scaling of global layers.
    pub scaling: RopeScaling,
    /// Element pairing of the stored q/k rows.
    pub pairing: RopePairing,
    /// Rotated dimensions per head of global layers (partial rotary when
    /// below their head dim).
    pub n_rot: usize,
    /// Rotated dimensions of sliding layers when their head dim differs
    /// (Gemma 4).
    pub n_rot_local: Option<usize>,
}

/// Mixture-of-experts options, alike in every sparse layer.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Experts per sparse layer.
    pub n_expert: usize,
    /// Experts each token is routed to.
    pub n_expert_used: usize,
    /// Hidden width of one routed expert.
    pub n_ff_expert: usize,
    /// Hidden width of the shared expert, when the metadata gives one.
    pub n_ff_shared: Option<usize>,
    /// Renormalise the top-k probabilities.
    pub normalize_top_k: bool,
    /// Router scores.
    pub gating: Gating,
    /// Multiplier on the routed weights.
    pub weights_scale: f32,
}

/// Every option of the generic decoder, as data.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    /// Family table name.
    pub family: &'static str,
    /// Naming of the source.
    pub format: SourceFormat,
    /// Residual stream width.
    pub n_embd: usize,
    /// Number of layers.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (of attention layers; see `n_head_kv_layers`).
    pub n_head_kv: usize,
    /// Key/value heads per layer (GGUF per-layer arrays; 0 on LFM2's
    /// convolution layers).
    pub n_head_kv_layers: Vec<usize>,
    /// Per layer: a short convolution instead of attention (LFM2).
    pub conv_layers: Vec<bool>,
    /// Taps of the short convolution, when any layer has one.
    pub conv_kernel: Option<usize>,
    /// Mixture of experts, when the model has one.
    pub moe: Option<MoeConfig>,
    /// Per layer: a mixture of experts instead of the dense FFN.
    pub moe_layers: Vec<bool>,
    /// Per-head dimension (of global layers; see `head_dim_layers`).
    pub head_dim: usize,
    /// Per-head dimension of each layer (Gemma 4: sliding and full differ).
    pub head_dim_layers: Vec<usize>,
    /// Feed-forward hidden width (of layer 0; see `n_ff_layers`).
    pub n_ff: usize,
    /// Feed-forward hidden width of each layer.
    pub n_ff_layers: Vec<usize>,
    /// Per layer: the earlier layer whose cached K/V it reads (Gemma 4's
    /// last `num_kv_shared_layers`), `None` for layers with their own cache.
    pub kv_sources: Vec<Option<usize>>,
    /// Per layer: V is the K projection before its norm and RoPE (Gemma 4
    /// 31B's `attention_k_eq_v` on full layers; in GGUF, such a layer has
    /// no `attn_v`).
    pub v_from_k_layers: Vec<bool>,
    /// Width of the per-layer input embeddings (Gemma 4), if any.
    pub per_layer_input: Option<usize>,
    /// Values get a weightless per-head RMS norm.
    pub v_norm: bool,
    /// Vocabulary size (rows of the embedding tensor).
    pub n_vocab: usize,
    /// Training context length.
    pub n_ctx_train: usize,
    /// RoPE.
    pub rope: RopeConfig,
    /// RMS norm epsilon.
    pub norm_eps: f32,
    /// Added to stored norm weights (`(1 + w)` convention when 1.0).
    pub norm_weight_offset: f32,
    /// Feed-forward activation (always gated).
    pub activation: Activation,
    /// Per-head q/k norms present.
    pub qk_norm: bool,
    /// q/k/v biases present.
    pub qkv_bias: bool,
    /// Embedding multiplier.
    pub embd_scale: f32,
    /// Multiplier on q·k.
    pub attn_scale: f32,
    /// Soft-cap on attention scores.
    pub attn_softcap: Option<f32>,
    /// Soft-cap on final logits.
    pub final_softcap: Option<f32>,
    /// Sliding window size (used by layers with `sliding_layers[i]`).
    pub sliding_window: Option<usize>,
    /// Per layer: true when it uses the sliding window.
    pub sliding_layers: Vec<bool>,
    /// Per layer: true for the sliding layer type (its own RoPE base and,
    /// in Gemma 4, head dim and K/V source), whether or not a window is
    /// applied.
    pub local_layers: Vec<bool>,
    /// Per layer: true when it applies RoPE (false: NoPE, SmolLM3's every
    /// fourth layer).
    pub rope_layers: Vec<bool>,
    /// Post-attention and post-ffn norms present.
    pub sandwich_norm: bool,
    /// Output projection tied to the token embedding.
    pub tied_output: bool,
}

/// Largest accepted width of any dimension.
const MAX_DIM: usize = 1 << 20;
/// Largest accepted layer count.
const MAX_LAYERS: usize = 4096;
/// Longest accepted short convolution (LFM2 uses 3); the per-sequence state
/// holds `kernel - 1` rows per layer.
pub const MAX_CONV_KERNEL: usize = 64;
/// Most experts accepted per layer.
const MAX_EXPERTS: usize = 4096;

/// Reads hyperparameters of one family in one naming.
pub(crate) struct Reader<'a> {
    pub md: &'a Metadata,
    pub family: &'static Family,
    pub format: SourceFormat,
    pub arch: String,
}

impl Reader<'_> {
    /// The first present key for `p`, with its value. Null-like empty values are skipped.
    fn find(&self, p: Param) -> Option<(String, &MetadataValue)> {
        for spec in self.family.keys(p) {
            let keys = match self.format {
                SourceFormat::Gguf => spec.gguf,
                SourceFormat::HuggingFace => spec.hf,
            };
            for k in keys {
                if let Some(found) = self.lookup(&k.replace("{arch}", &self.arch)) {
                    return Some(found);
                }
            }
        }
        None
    }

    /// `key`, or in a multimodal HF config (Gemma 3/4 `...ForConditionalGeneration`)
    /// first its decoder's `text_config.key`.
    fn lookup(&self, key: &str) -> Option<(String, &MetadataValue)> {
        if self.format == SourceFormat::HuggingFace {
            let nested = format!("text_config.{key}");
            if let Some(v) = self.md.get(&nested) {
                return Some((nested, v));
            }
        }
        self.md.get(key).map(|v| (key.to_string(), v))
    }

    fn all_keys(&self, p: Param) -> String {
        let mut out = Vec::new();
        for spec in self.family.keys(p) {
            let keys = match self.format {
                SourceFormat::Gguf => spec.gguf,
                SourceFormat::HuggingFace => spec.hf,
            };
            out.extend(keys.iter().map(|k| k.replace("{arch}", &self.arch)));
        }
        out.join(", ")
    }

    /// The key `p` was read from, or (absent) every key it may have.
    pub fn key(&self, p: Param) -> String {
        self.find(p).map_or_else(|| self.all_keys(p), |(k, _)| k)
    }

    /// A [`Error::BadValue`] about `p`'s key.
    pub fn bad(&self, p: Param, reason: impl Into<String>) -> Error {
        Error::BadValue {
            key: self.key(p),
            reason: reason.into(),
        }
    }

    pub fn f64(&self, p: Param) -> Result<Option<f64>> {
        match self.find(p) {
            None => Ok(None),
            Some((key, v)) => v.as_f64().map(Some).ok_or_else(|| Error::BadValue {
                key,
                reason: format!("expected a number, found {}", v.type_name()),
            }),
        }
    }

    pub fn usize(&self, p: Param) -> Result<Option<usize>> {
        match self.find(p) {
            None => Ok(None),
            Some((key, v)) => v
                .as_i64()
                .and_then(|i| usize::try_from(i).ok())
                .map(Some)
                .ok_or_else(|| Error::BadValue {
                    key,
                    reason: format!("expected a non-negative integer, found {v:?}"),
                }),
        }
    }

    pub fn require_usize(&self, p: Param) -> Result<usize> {
        self.usize(p)?.ok_or_else(|| Error::MissingParam {
            param: format!("{p:?}"),
            keys: self.all_keys(p),
        })
    }

    pub fn str(&self, p: Param) -> Result<Option<String>> {
        match self.find(p) {
            None => Ok(None),
            Some((key, v)) => {
                v.as_str()
                    .map(|s| Some(s.to_string()))
                    .ok_or_else(|| Error::BadValue {
                        key,
                        reason: format!("expected a string, found {}", v.type_name()),
                    })
            }
        }
    }

    pub fn bool(&self, p: Param) -> Result<Option<bool>> {
        match self.find(p) {
            None => Ok(None),
            Some((key, v)) => v.as_bool().map(Some).ok_or_else(|| Error::BadValue {
                key,
                reason: format!("expected a bool, found {}", v.type_name()),
            }),
        }
    }

    /// `p` as one value per layer: an array of `n_layer` non-negative
    /// integers, or one integer repeated. `None` when absent.
    pub fn per_layer_usize(&self, p: Param, n_layer: usize) -> Result<Option<Vec<usize>>> {
        let Some((key, v)) = self.find(p) else {
            return Ok(None);
        };
        let Some(items) = v.as_array() else {
            return self.usize(p).map(|o| o.map(|n| vec![n; n_layer]));
        };
        if items.len() != n_layer {
            return Err(Error::BadValue {
                key,
                reason: format!("{} entries for {n_layer} layers", items.len()),
            });
        }
        usizes(items).map(Some).ok_or_else(|| Error::BadValue {
            key,
            reason: format!(
                "expected non-negative integers, found array[{}]",
                items.elem_type().name()
            ),
        })
    }

    pub fn array(&self, p: Param) -> Option<(String, &MetadataArray)> {
        self.find(p).and_then(|(k, v)| v.as_array().map(|a| (k, a)))
    }
}

/// The items of an integer array as non-negative integers, if they all are.
fn usizes(items: &MetadataArray) -> Option<Vec<usize>> {
    (0..items.len())
        .map(|i| items.i64_at(i).and_then(|x| usize::try_from(x).ok()))
        .collect()
}

/// Positive value or `None` (0 and negatives disable soft-caps).
fn positive(v: Option<f64>) -> Option<f32> {
    v.filter(|x| *x > 0.0).map(|x| x as f32)
}

/// Resolves the config of `family` from the source's metadata and tensors.
pub(crate) fn resolve(
    source: &dyn WeightSource,
    family: &'static Family,
    format: SourceFormat,
    arch: String,
    overrides: &crate::ConfigOverrides,
) -> Result<DecoderConfig> {
    let r = Reader {
        md: source.metadata(),
        family,
        format,
        arch,
    };
    let q = &family.quirks;
    let n_embd = r.require_usize(Param::NEmbd)?;
    let n_layer = r.require_usize(Param::NLayer)?;
    let n_head = r.require_usize(Param::NHead)?;
    // Sanity caps before anything is sized from these numbers (hostile metadata).
    if n_layer > MAX_LAYERS {
        return Err(r.bad(
            Param::NLayer,
            format!("{n_layer} layers exceeds the limit {MAX_LAYERS}"),
        ));
    }
    for (p, v) in [
        (Param::NLayer, n_layer),
        (Param::NEmbd, n_embd),
        (Param::NHead, n_head),
    ] {
        if v == 0 {
            return Err(r.bad(p, "must be positive, found 0"));
        }
    }
    for (p, v) in [(Param::NEmbd, n_embd), (Param::NHead, n_head)] {
        if v > MAX_DIM {
            return Err(r.bad(p, format!("{v} exceeds the limit {MAX_DIM}")));
        }
    }
    // transformers refuses a `layer_types` of another length in every
    // config that has one, whether or not this family reads it.
    if let Some((key, items)) = r.array(Param::LayerTypes) {
        if items.len() != n_layer {
            return Err(Error::BadValue {
                key,
                reason: format!(
                    "{} entries for {n_layer} layers ({})",
                    items.len(),
                    r.key(Param::NLayer)
                ),
            });
        }
    }
    let mut n_head_kv_layers = r
        .per_layer_usize(Param::NHeadKv, n_layer)?
        .unwrap_or_else(|| vec![n_head; n_layer]);
    // The layer types decide head dims, K/V heads and sources and RoPE
    // whether or not a window is applied (`--sliding-window 0` only drops
    // the mask). transformers' Gemma4TextConfig makes the last layer full
    // attention whatever `layer_types` says (`model::notes` tells the user).
    let mut local_layers = local_layers(&r, n_layer)?;
    let last_forced_full = last_layer_forced(&r, &local_layers);
    if last_forced_full {
        local_layers[n_layer - 1] = false;
    }
    // Gemma 4 31B: full layers take V from the K projection, and may have
    // their own K/V head count.
    let k_eq_v = r.bool(Param::AttnKEqV)? == Some(true);
    if r.format == SourceFormat::HuggingFace {
        hf_layer_kv_heads(&r, k_eq_v, n_head, &local_layers, &mut n_head_kv_layers)?;
    }
    let conv_layers = conv_layers(&r, n_layer, &n_head_kv_layers)?;
    // The scalar: the first attention layer's (per-layer zeros mark LFM2's
    // convolution layers, which have no heads).
    let n_head_kv = n_head_kv_layers
        .iter()
        .zip(&conv_layers)
        .find(|(_, conv)| !**conv)
        .map_or(n_head, |(n, _)| *n);
    let n_head_kv_layers: Vec<usize> = n_head_kv_layers
        .iter()
        .zip(&conv_layers)
        .map(|(n, conv)| if *conv { 0 } else { *n })
        .collect();
    if let Some((i, n)) = n_head_kv_layers
        .iter()
        .enumerate()
        .find(|(i, n)| !conv_layers[*i] && (**n == 0 || n_head % **n != 0))
    {
        let reason = if *n == 0 {
            format!("layer {i}: 0 key/value heads on an attention layer")
        } else {
            format!(
                "{n} key/value heads (layer {i}) do not divide {} = {n_head} query heads",
                r.key(Param::NHead)
            )
        };
        return Err(r.bad(Param::NHeadKv, reason));
    }
    if r.bool(Param::EnableMoeBlock)? == Some(true) {
        return Err(Error::Unsupported(
            "`enable_moe_block` (experts beside the dense FFN, Gemma 4 26B-A4B)".into(),
        ));
    }
    let head_dim = match r.usize(Param::HeadDim)? {
        Some(d) => d,
        // Without a head dim the heads split the residual width.
        None if !n_embd.is_multiple_of(n_head) => {
            return Err(r.bad(
                Param::NHead,
                format!(
                    "{n_head} heads do not divide {} = {n_embd}, and no head dim is given ({})",
                    r.key(Param::NEmbd),
                    r.all_keys(Param::HeadDim)
                ),
            ))
        }
        None => n_embd / n_head,
    };
    if head_dim == 0 {
        return Err(r.bad(Param::HeadDim, "must be positive, found 0"));
    }
    let head_dim_swa = r.usize(Param::HeadDimSwa)?;
    let conv_kernel = if conv_layers.contains(&true) {
        let k = r.require_usize(Param::ConvKernel)?;
        if k == 0 || k > MAX_CONV_KERNEL {
            return Err(Error::BadValue {
                key: r.all_keys(Param::ConvKernel),
                reason: format!("short convolution of {k} taps (supported: 1..={MAX_CONV_KERNEL})"),
            });
        }
        Some(k)
    } else {
        None
    };
    let moe = moe_config(&r)?;
    if moe.is_some()
        && tensor_names(family, format, Role::FfnGateInp, 0)
            .next()
            .is_none()
    {
        return Err(Error::Unsupported(format!(
            "experts in a {} model (the family has no expert tensors, e.g. Gemma 4 26B-A4B)",
            family.name
        )));
    }
    let moe_layers = moe_layers(&r, n_layer, moe.is_some())?;
    let mut n_ff_layers = match (r.per_layer_usize(Param::NFf, n_layer)?, &moe) {
        (Some(n), _) => n
            .into_iter()
            .map(|f| adjusted_ff(&r, f))
            .collect::<Result<Vec<_>>>()?,
        (None, Some(m)) => vec![m.n_ff_expert; n_layer],
        (None, None) => vec![r.require_usize(Param::NFf)?; n_layer],
    };
    // Sanity caps before anything is sized from these numbers (hostile metadata).
    let shared_kv = r.usize(Param::SharedKvLayers)?.unwrap_or(0);
    let per_layer_input = r.usize(Param::PerLayerInputWidth)?.filter(|w| *w > 0);
    for (p, v, cap) in [
        (
            Param::NFf,
            n_ff_layers.iter().copied().max().unwrap_or(0),
            MAX_DIM,
        ),
        (Param::HeadDim, head_dim, MAX_DIM),
        (Param::HeadDimSwa, head_dim_swa.unwrap_or(0), MAX_DIM),
        (
            Param::PerLayerInputWidth,
            per_layer_input.unwrap_or(0),
            MAX_DIM,
        ),
        (Param::SharedKvLayers, shared_kv, n_layer - 1),
        (Param::NHeadKv, n_head_kv, MAX_DIM),
        (
            Param::NFfExpert,
            moe.as_ref().map_or(0, |m| m.n_ff_expert),
            MAX_DIM,
        ),
        (
            Param::NFfSharedExpert,
            moe.as_ref().and_then(|m| m.n_ff_shared).unwrap_or(0),
            MAX_DIM,
        ),
    ] {
        if v > cap {
            return Err(r.bad(p, format!("{v} exceeds the limit {cap}")));
        }
    }
    let n_ctx_train = overrides
        .n_ctx_train
        .or(r.usize(Param::NCtxTrain)?)
        .unwrap_or(2048);

    let embd_name = present_tensor(source, family, format, Role::TokenEmbd, 0)
        .unwrap_or_else(|| tensor_name(family, format, Role::TokenEmbd, 0));
    let embd = source
        .tensor(&embd_name)
        .ok_or_else(|| Error::MissingTensor(embd_name.clone()))?;
    let n_vocab = match embd.info.shape.as_slice() {
        [d, v] if *d as usize == n_embd && *v > 0 => *v as usize,
        s => {
            return Err(Error::Program(anedvd_graph::Error::Shape {
                tensor: embd_name,
                expected: vec![n_embd as u64, 0],
                found: s.to_vec(),
            }))
        }
    };
    // The embedding's rows are the vocabulary; a config.json's size must
    // agree (transformers builds the embedding from it).
    let stated_vocab = match format {
        SourceFormat::HuggingFace => r.usize(Param::NVocab)?,
        SourceFormat::Gguf => None,
    };
    if let Some(v) = stated_vocab {
        if v != n_vocab {
            return Err(r.bad(
                Param::NVocab,
                format!("{v}, but the token embedding `{embd_name}` has {n_vocab} rows"),
            ));
        }
    }

    let sliding_window = match overrides.sliding_window {
        Some(w) => Some(w).filter(|w| *w > 0),
        None => r
            .usize(Param::SlidingWindow)?
            .filter(|w| *w > 0)
            .or(q.default_sliding_window),
    };
    let mut sliding_layers = sliding_layers(&r, n_layer, sliding_window.is_some())?;
    if last_forced_full {
        sliding_layers[n_layer - 1] = false;
    }
    let head_dim_layers = head_dims(&r, head_dim, head_dim_swa, &local_layers)?;
    // Global layers' RoPE width from theirs, sliding layers' from theirs.
    let full_hd = (0..n_layer)
        .find(|i| !local_layers[*i])
        .map_or(head_dim, |i| head_dim_layers[i]);
    // The scalar names the global layers' (HF Gemma 4's `head_dim` key is
    // the sliding layers').
    let head_dim = full_hd;
    let swa_hd = (0..n_layer)
        .find(|i| local_layers[*i])
        .map(|i| head_dim_layers[i]);
    let scaling = rope_scaling(&r, source)?;
    let partial = r.f64(Param::PartialRotaryFactor)?;
    let rotated = |hd: usize| partial.map_or(hd, |f| ((hd as f64) * f).round() as usize);
    // Proportional RoPE spans the whole head dim (its fraction picks the
    // rotating pairs, see `RopeScaling::Proportional`).
    let n_rot = match (r.usize(Param::NRot)?, &scaling) {
        (Some(n), _) => n,
        (None, RopeScaling::Proportional { .. }) => full_hd,
        (None, _) => rotated(full_hd),
    };
    let n_rot_local = match (r.usize(Param::NRotSwa)?, swa_hd) {
        (Some(n), _) => Some(n),
        (None, Some(hd)) if hd != full_hd => Some(rotated(hd)),
        _ => None,
    };
    for (n, hd) in [
        (Some(n_rot), full_hd),
        (n_rot_local, swa_hd.unwrap_or(full_hd)),
    ] {
        match n {
            Some(n) if n > hd || n % 2 != 0 => {
                return Err(Error::Invalid(format!(
                    "rotary dimensions {n} must be even and at most head_dim {hd}"
                )))
            }
            _ => {}
        }
    }
    let kv_sources = kv_sources(&r, shared_kv, &local_layers)?;
    let v_from_k_layers = (0..n_layer)
        .map(|i| {
            let full_own_kv = !local_layers[i] && kv_sources[i].is_none() && !conv_layers[i];
            full_own_kv
                && match format {
                    SourceFormat::HuggingFace => k_eq_v,
                    SourceFormat::Gguf => {
                        q.gguf_v_from_k_when_absent
                            && [Role::AttnV, Role::AttnQkv].iter().all(|role| {
                                present_tensor(source, family, format, *role, i).is_none()
                            })
                    }
                }
        })
        .collect();
    if r.bool(Param::UseDoubleWideMlp)? == Some(true) {
        for (ff, src) in n_ff_layers.iter_mut().zip(&kv_sources) {
            if src.is_some() {
                *ff *= 2;
            }
        }
    }
    if let Some(ff) = n_ff_layers.iter().find(|ff| **ff > MAX_DIM) {
        return Err(r.bad(
            Param::NFf,
            format!("{ff} (doubled by the double-wide MLP) exceeds the limit {MAX_DIM}"),
        ));
    }
    let n_ff = n_ff_layers[0];
    let theta = r.f64(Param::RopeTheta)?.unwrap_or(q.default_rope_theta);
    let theta_local = r.f64(Param::RopeThetaLocal)?.or(q.default_rope_theta_local);
    let pairing = overrides.rope_pairing.unwrap_or(match format {
        SourceFormat::Gguf => q.gguf_rope_pairing,
        SourceFormat::HuggingFace => q.hf_rope_pairing,
    });

    let norm_eps = r.f64(Param::NormEps)?.ok_or_else(|| Error::MissingParam {
        param: "NormEps".into(),
        keys: r.all_keys(Param::NormEps),
    })? as f32;

    let rope_layers = rope_layers(&r, n_layer)?;

    let attn_scale = if let Some(s) = r.f64(Param::QueryPreAttnScalar)? {
        (1.0 / s.sqrt()) as f32
    } else if let Some(s) = r.f64(Param::AttnScale)?.filter(|s| *s > 0.0) {
        s as f32
    } else if let Some(s) = q.fixed_attn_scale {
        s
    } else if format == SourceFormat::Gguf
        && q.gguf_attn_scale_embd_per_head_layers.contains(&n_layer)
    {
        (1.0 / ((n_embd / n_head) as f64).sqrt()) as f32
    } else {
        (1.0 / (head_dim as f64).sqrt()) as f32
    };

    let has = |role: Role| present_tensor(source, family, format, role, 0).is_some();
    Ok(DecoderConfig {
        family: family.name,
        format,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        n_head_kv_layers,
        conv_layers,
        conv_kernel,
        moe,
        moe_layers,
        head_dim,
        head_dim_layers,
        n_ff,
        n_ff_layers,
        kv_sources,
        v_from_k_layers,
        per_layer_input,
        v_norm: q.v_norm,
        n_vocab,
        n_ctx_train,
        rope: RopeConfig {
            theta,
            theta_local,
            scaling,
            pairing,
            n_rot,
            n_rot_local,
        },
        norm_eps,
        norm_weight_offset: match format {
            SourceFormat::Gguf => q.gguf_norm_offset,
            SourceFormat::HuggingFace => q.hf_norm_offset,
        },
        activation: q.activation,
        qk_norm: q.qk_norm || has(Role::AttnQNorm),
        qkv_bias: has(Role::AttnQBias),
        embd_scale: if q.embd_scale_sqrt {
            (n_embd as f64).sqrt() as f32
        } else {
            1.0
        },
        attn_scale,
        attn_softcap: positive(r.f64(Param::AttnSoftcap)?),
        final_softcap: positive(r.f64(Param::FinalSoftcap)?),
        sliding_window,
        sliding_layers,
        local_layers,
        rope_layers,
        sandwich_norm: q.sandwich_norm || has(Role::PostAttnNorm),
        tied_output: !has(Role::Output),
    })
}

/// LFM2's HF FFN sizing: with `block_auto_adjust_ff_dim`, `n_ff` becomes
/// `2/3` of itself, times `block_ffn_dim_multiplier`, rounded up to a
/// multiple of `block_multiple_of` (GGUFs store the adjusted width).
fn adjusted_ff(r: &Reader<'_>, n_ff: usize) -> Result<usize> {
    if r.bool(Param::BlockAutoAdjustFf)? != Some(true) {
        return Ok(n_ff);
    }
    let mut ff = 2 * n_ff / 3;
    if let Some(m) = r.f64(Param::BlockFfMultiplier)? {
        ff = (m * ff as f64) as usize;
    }
    let multiple = r.usize(Param::BlockMultipleOf)?.unwrap_or(256);
    if multiple == 0 {
        return Err(Error::BadValue {
            key: r.all_keys(Param::BlockMultipleOf),
            reason: "must be positive".into(),
        });
    }
    Ok(ff.div_ceil(multiple) * multiple)
}

/// Which layers are short convolutions: HF `layer_types` entries `"conv"`,
/// or every layer missing from `full_attn_idxs`, or (GGUF) a per-layer
/// head count of 0.
fn conv_layers(r: &Reader<'_>, n_layer: usize, heads_kv: &[usize]) -> Result<Vec<bool>> {
    if let Some((key, MetadataArray::String(types))) = r.array(Param::LayerTypes) {
        if types.iter().any(|t| t == "conv") {
            if types.len() != n_layer {
                return Err(Error::BadValue {
                    key,
                    reason: format!("{} entries for {n_layer} layers", types.len()),
                });
            }
            return Ok(types.iter().map(|t| t == "conv").collect());
        }
    }
    if let Some((key, items)) = r.array(Param::FullAttnIdxs) {
        let idx = usizes(items)
            .filter(|v| v.iter().all(|i| *i < n_layer))
            .ok_or_else(|| Error::BadValue {
                key,
                reason: format!("expected layer indices below {n_layer}"),
            })?;
        return Ok((0..n_layer).map(|i| !idx.contains(&i)).collect());
    }
    // In HF configs a 0 is a bad head count, not a conv layer.
    Ok(heads_kv
        .iter()
        .map(|n| *n == 0 && r.format == SourceFormat::Gguf)
        .collect())
}

/// Each layer's head dim: HF's `per_layer_config.{i}.head_dim` (keys
/// zero-padded to equal width from 10 layers on) where given, else the
/// sliding dim (`head_dim_swa`) on sliding layers, else `head_dim` — or,
/// in HF configs of a family with `hf_global_head_dim` (Gemma 4), as
/// transformers resolves them: with a `per_layer_config`, unlisted layers
/// take the top-level `head_dim` (`global_head_dim` is ignored); without
/// one, full-attention layers take `global_head_dim`, else the default.
fn head_dims(
    r: &Reader<'_>,
    head_dim: usize,
    head_dim_swa: Option<usize>,
    sliding: &[bool],
) -> Result<Vec<usize>> {
    let head_dim = match r.family.quirks.hf_global_head_dim {
        Some(default) if r.format == SourceFormat::HuggingFace => {
            if has_per_layer_config(r) {
                head_dim_swa.unwrap_or(head_dim)
            } else if r.lookup("global_head_dim").is_some() {
                head_dim
            } else {
                default
            }
        }
        _ => head_dim,
    };
    sliding
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Ok(match per_layer_dim(r, i, sliding.len(), "head_dim")? {
                Some(hd) => hd,
                None if *s => head_dim_swa.unwrap_or(head_dim),
                None => head_dim,
            })
        })
        .collect()
}

/// HF's `per_layer_config.{i}.<field>` (keys zero-padded to equal width
/// from 10 layers on) as a dimension in `1..=MAX_DIM`, if given.
fn per_layer_dim(r: &Reader<'_>, i: usize, n_layer: usize, field: &str) -> Result<Option<usize>> {
    let width = n_layer.saturating_sub(1).to_string().len();
    let keys = [
        format!("per_layer_config.{i}.{field}"),
        format!("per_layer_config.{i:0width$}.{field}"),
    ];
    let Some((key, v)) = keys.iter().find_map(|k| r.lookup(k)) else {
        return Ok(None);
    };
    v.as_i64()
        .and_then(|x| usize::try_from(x).ok())
        .filter(|x| (1..=MAX_DIM).contains(x))
        .map(Some)
        .ok_or_else(|| Error::BadValue {
            key,
            reason: format!("expected a value in 1..={MAX_DIM}, found {v:?}"),
        })
}

/// Whether the HF config lists any `per_layer_config`.
fn has_per_layer_config(r: &Reader<'_>) -> bool {
    r.md.iter().any(|(k, _)| {
        k.strip_prefix("text_config.")
            .unwrap_or(k)
            .starts_with("per_layer_config.")
    })
}

/// HF K/V heads per layer as transformers' Gemma 4 config resolves them:
/// `per_layer_config.{i}.num_key_value_heads` where listed; without a
/// `per_layer_config`, full layers (`local` false) of an
/// `attention_k_eq_v` model take `num_global_key_value_heads`, which must
/// divide the `n_head` query heads.
fn hf_layer_kv_heads(
    r: &Reader<'_>,
    k_eq_v: bool,
    n_head: usize,
    local: &[bool],
    heads: &mut [usize],
) -> Result<()> {
    let n_layer = heads.len();
    if has_per_layer_config(r) {
        for (i, h) in heads.iter_mut().enumerate() {
            if let Some(n) = per_layer_dim(r, i, n_layer, "num_key_value_heads")? {
                *h = n;
            }
        }
    } else if let (true, Some(n)) = (k_eq_v, r.usize(Param::NHeadKvGlobal)?) {
        if n == 0 || !n_head.is_multiple_of(n) {
            return Err(r.bad(
                Param::NHeadKvGlobal,
                format!("{n} key/value heads do not divide {n_head} query heads"),
            ));
        }
        for (h, _) in heads.iter_mut().zip(local).filter(|(_, l)| !**l) {
            *h = n;
        }
    }
    Ok(())
}

/// The K/V source of each layer: the last `shared` layers read the cache of
/// the last layer before them of the same type (sliding or full), as
/// transformers' `kv_sharing_modes` does (llama.cpp hard-codes "two layers
/// before" for the two types, which agrees on the released models).
fn kv_sources(r: &Reader<'_>, shared: usize, sliding: &[bool]) -> Result<Vec<Option<usize>>> {
    let n_layer = sliding.len();
    let first_shared = n_layer - shared;
    (0..n_layer)
        .map(|j| {
            if j < first_shared {
                return Ok(None);
            }
            (0..first_shared)
                .rev()
                .find(|i| sliding[*i] == sliding[j])
                .map(Some)
                .ok_or_else(|| Error::BadValue {
                    key: r.all_keys(Param::SharedKvLayers),
                    reason: format!(
                        "layer {j} shares K/V, but no earlier layer has its type ({})",
                        if sliding[j] { "sliding" } else { "full" }
                    ),
                })
        })
        .collect()
}

/// The mixture-of-experts options, when the metadata declares experts.
fn moe_config(r: &Reader<'_>) -> Result<Option<MoeConfig>> {
    let Some(n_expert) = r.usize(Param::NExpert)? else {
        return Ok(None);
    };
    let bad = |p: Param, reason: String| Error::BadValue {
        key: r.all_keys(p),
        reason,
    };
    if n_expert == 0 || n_expert > MAX_EXPERTS {
        return Err(bad(
            Param::NExpert,
            format!("{n_expert} experts (supported: 1..={MAX_EXPERTS})"),
        ));
    }
    let n_expert_used = r.require_usize(Param::NExpertUsed)?;
    if n_expert_used == 0 || n_expert_used > n_expert {
        return Err(bad(
            Param::NExpertUsed,
            format!("{n_expert_used} experts per token of {n_expert}"),
        ));
    }
    let n_ff_expert = r.require_usize(Param::NFfExpert)?;
    if n_ff_expert == 0 {
        return Err(bad(Param::NFfExpert, "expert width 0".into()));
    }
    Ok(Some(MoeConfig {
        n_expert,
        n_expert_used,
        n_ff_expert,
        n_ff_shared: r.usize(Param::NFfSharedExpert)?.filter(|n| *n > 0),
        normalize_top_k: r
            .bool(Param::ExpertWeightsNorm)?
            .unwrap_or(r.family.quirks.default_expert_weights_norm),
        gating: match r.usize(Param::ExpertGatingFunc)? {
            None => r.family.quirks.expert_gating,
            // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_{SOFTMAX, SIGMOID}
            Some(1) => Gating::Softmax,
            Some(2) => Gating::Sigmoid,
            Some(other) => {
                return Err(Error::Unsupported(format!(
                    "expert gating function {other} (key {})",
                    r.all_keys(Param::ExpertGatingFunc)
                )))
            }
        },
        weights_scale: match r.f64(Param::ExpertWeightsScale)? {
            // llama.cpp treats 0 as unset
            None | Some(0.0) => 1.0,
            Some(s) if s.is_finite() && s > 0.0 => s as f32,
            Some(s) => {
                return Err(Error::BadValue {
                    key: r.all_keys(Param::ExpertWeightsScale),
                    reason: format!("expert weights scale {s}"),
                })
            }
        },
    }))
}

/// Which layers route through experts: HF Qwen-MoE's `decoder_sparse_step`
/// and `mlp_only_layers` (every layer by default), and LFM2-MoE's leading
/// dense layers (`num_dense_layers`, GGUF `leading_dense_block_count`).
fn moe_layers(r: &Reader<'_>, n_layer: usize, moe: bool) -> Result<Vec<bool>> {
    if !moe {
        return Ok(vec![false; n_layer]);
    }
    let step = r.usize(Param::DecoderSparseStep)?.unwrap_or(1);
    let dense_lead = r.usize(Param::LeadingDenseLayers)?.unwrap_or(0);
    let dense: Vec<usize> = match r.array(Param::MlpOnlyLayers) {
        None => Vec::new(),
        Some((key, items)) => usizes(items).ok_or_else(|| Error::BadValue {
            key,
            reason: "expected layer indices".into(),
        })?,
    };
    Ok((0..n_layer)
        .map(|i| i >= dense_lead && !dense.contains(&i) && step > 0 && (i + 1) % step == 0)
        .collect())
}

fn rope_scaling(r: &Reader<'_>, source: &dyn WeightSource) -> Result<RopeScaling> {
    if r.format == SourceFormat::Gguf {
        if let Some(t) = r.family.gguf_rope_freqs {
            if source.tensor(t).is_some() {
                let attention_factor = r
                    .f64(Param::RopeAttnFactor)?
                    .filter(|a| *a > 0.0)
                    .unwrap_or(1.0);
                return Ok(RopeScaling::FreqFactors {
                    tensor: t.into(),
                    attention_factor,
                });
            }
        }
    }
    let kind = r.str(Param::RopeScalingType)?;
    let factor = r.f64(Param::RopeScalingFactor)?;
    match kind.as_deref() {
        None | Some("default") | Some("none") => Ok(RopeScaling::None),
        Some("linear") => Ok(match factor {
            Some(f) if f > 0.0 && f != 1.0 => RopeScaling::Linear { factor: f },
            _ => RopeScaling::None,
        }),
        Some("llama3") => Ok(RopeScaling::Llama3 {
            factor: factor.unwrap_or(8.0),
            low_freq_factor: r.f64(Param::RopeLowFreqFactor)?.unwrap_or(1.0),
            high_freq_factor: r.f64(Param::RopeHighFreqFactor)?.unwrap_or(4.0),
            original_context: r.f64(Param::RopeOrigCtx)?.unwrap_or(8192.0),
        }),
        Some("yarn") => {
            let factor = factor.unwrap_or(1.0);
            Ok(RopeScaling::Yarn {
                factor,
                original_context: match r.f64(Param::RopeOrigCtx)? {
                    Some(c) => c,
                    None => r.f64(Param::NCtxTrain)?.unwrap_or(4096.0) / factor,
                },
                beta_fast: r
                    .f64(Param::RopeBetaFast)?
                    .filter(|b| *b != 0.0)
                    .unwrap_or(32.0),
                beta_slow: r
                    .f64(Param::RopeBetaSlow)?
                    .filter(|b| *b != 0.0)
                    .unwrap_or(1.0),
                attention_factor: r.f64(Param::RopeAttnFactor)?.filter(|a| *a > 0.0),
                truncate: r.bool(Param::RopeTruncate)?.unwrap_or(true),
            })
        }
        Some("proportional") => Ok(RopeScaling::Proportional {
            fraction: r.f64(Param::RopeProportionalFactor)?.unwrap_or(1.0),
            factor: factor.filter(|f| *f > 0.0).unwrap_or(1.0),
        }),
        Some("longrope") => {
            let (key, items) =
                r.array(Param::RopeShortFactor)
                    .ok_or_else(|| Error::MissingParam {
                        param: "RopeShortFactor".into(),
                        keys: r.all_keys(Param::RopeShortFactor),
                    })?;
            let factors = (0..items.len())
                .map(|i| items.f64_at(i).filter(|f| *f > 0.0))
                .collect::<Option<Vec<f64>>>()
                .ok_or_else(|| Error::BadValue {
                    key: key.clone(),
                    reason: "expected positive numbers".into(),
                })?;
            let max_pos = r.f64(Param::NCtxTrain)?.unwrap_or(4096.0);
            // Phi-3: the ratio of the two contexts, not `factor`.
            let (context, original_context) = match r.f64(Param::RopeOrigCtx)? {
                Some(o) if o > 0.0 => (max_pos, o),
                _ => (factor.unwrap_or(1.0) * max_pos, max_pos),
            };
            let given = r.f64(Param::RopeAttnFactor)?.filter(|a| *a > 0.0);
            let attention_factor =
                crate::longrope_attention_factor(context, original_context, given);
            Ok(RopeScaling::LongRope {
                factors,
                attention_factor,
            })
        }
        Some(other) => Err(Error::Unsupported(format!("rope scaling type `{other}`"))),
    }
}

/// The sliding (local) layer type of each layer, whether or not a window
/// is applied: the metadata's per-layer list or the family's period
/// (Gemma). Families whose window, when set, covers every layer (Mistral)
/// have no local type.
pub(crate) fn local_layers(r: &Reader<'_>, n_layer: usize) -> Result<Vec<bool>> {
    let listed =
        r.array(Param::LayerTypes).is_some() || r.array(Param::SlidingWindowPattern).is_some();
    match r.family.quirks.sliding {
        SlidingDefault::Pattern(_) => sliding_layers(r, n_layer, true),
        _ if listed => sliding_layers(r, n_layer, true),
        _ => Ok(vec![false; n_layer]),
    }
}

/// Whether the family's HF configs force the last layer to full attention
/// and these layer types say otherwise.
pub(crate) fn last_layer_forced(r: &Reader<'_>, types: &[bool]) -> bool {
    r.format == SourceFormat::HuggingFace
        && r.family.quirks.hf_last_layer_full
        && types.last() == Some(&true)
}

fn sliding_layers(r: &Reader<'_>, n_layer: usize, has_window: bool) -> Result<Vec<bool>> {
    if !has_window || r.bool(Param::UseSlidingWindow)? == Some(false) {
        return Ok(vec![false; n_layer]);
    }
    if let Some((key, items)) = r
        .array(Param::LayerTypes)
        .or(r.array(Param::SlidingWindowPattern))
    {
        if items.len() != n_layer {
            return Err(Error::BadValue {
                key,
                reason: format!("{} entries for {n_layer} layers", items.len()),
            });
        }
        return match items {
            MetadataArray::Bool(b) => Ok(b.clone()),
            MetadataArray::String(s) => Ok(s.iter().map(|t| t == "sliding_attention").collect()),
            other => Err(Error::BadValue {
                key,
                reason: format!(
                    "expected bools or layer type names, found array[{}]",
                    other.elem_type().name()
                ),
            }),
        };
    }
    Ok(match r.family.quirks.sliding {
        SlidingDefault::None => vec![false; n_layer],
        SlidingDefault::AllLayers => vec![true; n_layer],
        SlidingDefault::AllLayersInGguf => vec![r.format == SourceFormat::Gguf; n_layer],
        SlidingDefault::Pattern(default) => {
            let period = r.usize(Param::SlidingWindowPattern)?.unwrap_or(default);
            (0..n_layer)
                .map(|i| period == 0 || i % period < period - 1)
                .collect()
        }
    })
}

/// Which layers apply RoPE: HF's `no_rope_layers` list (1 = uses RoPE,
/// despite the name), else every layer but each `interval`-th one when the
/// metadata or the family sets an interval (llama.cpp hard-codes 4 for
/// SmolLM3 GGUFs), else every layer.
fn rope_layers(r: &Reader<'_>, n_layer: usize) -> Result<Vec<bool>> {
    if let Some((key, items)) = r.array(Param::NoRopeLayers) {
        let flags: Vec<bool> = match items {
            MetadataArray::Bool(b) => b.clone(),
            other => (0..other.len())
                .map(|i| other.i64_at(i).map(|v| v != 0))
                .collect::<Option<_>>()
                .ok_or_else(|| Error::BadValue {
                    key: key.clone(),
                    reason: format!(
                        "expected integers or bools, found array[{}]",
                        other.elem_type().name()
                    ),
                })?,
        };
        if flags.len() != n_layer {
            return Err(Error::BadValue {
                key,
                reason: format!("{} entries for {n_layer} layers", flags.len()),
            });
        }
        return Ok(flags);
    }
    let interval = r
        .usize(Param::NoRopeLayerInterval)?
        .or(r.family.quirks.nope_interval)
        .filter(|n| *n > 0);
    Ok((0..n_layer)
        .map(|i| interval.is_none_or(|n| (i + 1) % n != 0))
        .collect())
}

/// The names `role`'s tensor in `layer` may have for this family and
/// naming (templates with `{i}` replaced), in table order.
pub(crate) fn tensor_names(
    family: &Family,
    format: SourceFormat,
    role: Role,
    layer: usize,
) -> impl Iterator<Item = String> + '_ {
    family
        .tensors
        .iter()
        .flat_map(|table| table.iter())
        .filter(move |t| t.role == role)
        .flat_map(move |t| {
            let tpl = match format {
                SourceFormat::Gguf => t.gguf,
                SourceFormat::HuggingFace => t.hf,
            };
            let name = tpl.replace("{i}", &layer.to_string());
            // Multimodal HF checkpoints keep the decoder under
            // `model.language_model.`.
            let nested = match (format, name.strip_prefix("model.")) {
                (SourceFormat::HuggingFace, Some(rest)) => {
                    Some(format!("model.language_model.{rest}"))
                }
                _ => None,
            };
            std::iter::once(name).chain(nested)
        })
}

/// The first name of `role`'s tensor in `layer` ([`tensor_names`]). Empty
/// if the family has no template.
pub(crate) fn tensor_name(
    family: &Family,
    format: SourceFormat,
    role: Role,
    layer: usize,
) -> String {
    tensor_names(family, format, role, layer)
        .next()
        .unwrap_or_default()
}

/// The first of `role`'s names in `layer` that `source` has, if any.
pub(crate) fn present_tensor(
    source: &dyn WeightSource,
    family: &Family,
    format: SourceFormat,
    role: Role,
    layer: usize,
) -> Option<String> {
    tensor_names(family, format, role, layer).find(|n| source.tensor(n).is_some())
}
