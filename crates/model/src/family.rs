//! The shape of a family table, the hyperparameter keys shared by all
//! families, and family lookup.

use anedvd_graph::{Activation, Gating, Role, RopePairing};

/// A hyperparameter read from metadata. Names follow `docs/glossary.md`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    NEmbd,
    NLayer,
    NHead,
    NHeadKv,
    HeadDim,
    NFf,
    NCtxTrain,
    NVocab,
    RopeTheta,
    RopeThetaLocal,
    RopeScalingType,
    RopeScalingFactor,
    RopeLowFreqFactor,
    RopeHighFreqFactor,
    RopeOrigCtx,
    RopeBetaFast,
    RopeBetaSlow,
    RopeAttnFactor,
    RopeTruncate,
    NRot,
    PartialRotaryFactor,
    NormEps,
    SlidingWindow,
    SlidingWindowPattern,
    LayerTypes,
    NoRopeLayers,
    NoRopeLayerInterval,
    UseSlidingWindow,
    AttnSoftcap,
    FinalSoftcap,
    QueryPreAttnScalar,
    AttnScale,
    /// LongRoPE (Phi-3): per-pair divisors for contexts within the original.
    RopeShortFactor,
    /// LongRoPE: per-pair divisors past the original context.
    RopeLongFactor,
    /// LFM2: taps of the short convolution (`L_cache`).
    ConvKernel,
    /// LFM2 (HF): indices of the attention layers in older configs.
    FullAttnIdxs,
    /// LFM2 (HF): shrink `intermediate_size` to 2/3, times the multiplier,
    /// rounded up to `block_multiple_of`.
    BlockAutoAdjustFf,
    BlockFfMultiplier,
    BlockMultipleOf,
    NExpert,
    NExpertUsed,
    NFfExpert,
    NFfSharedExpert,
    /// Renormalise the top-k router probabilities.
    ExpertWeightsNorm,
    /// HF Qwen2/3-MoE: every `n`-th layer is sparse.
    DecoderSparseStep,
    /// HF Qwen2/3-MoE: layers that keep a dense FFN.
    MlpOnlyLayers,
    /// Head dimension of sliding layers when it differs (Gemma 4; `HeadDim`
    /// is then the full layers').
    HeadDimSwa,
    /// Rotated dimensions of sliding layers when they differ.
    NRotSwa,
    /// Gemma 4 (HF): the KV-shared layers' FFN is twice `intermediate_size`.
    UseDoubleWideMlp,
    /// The last `n` layers read K/V cached by earlier layers (Gemma 4).
    SharedKvLayers,
    /// Width of the per-layer input embeddings (Gemma 4); 0 is none.
    PerLayerInputWidth,
    /// Gemma 4 31B: full layers take V from the K projection.
    AttnKEqV,
    /// K/V heads of full-attention layers (Gemma 4 31B, with `AttnKEqV`).
    NHeadKvGlobal,
    /// Gemma 4 26B-A4B: experts beside the dense FFN.
    EnableMoeBlock,
    /// HF's "proportional" RoPE: the share of pairs that rotate.
    RopeProportionalFactor,
    /// llama.cpp's router score function (1 softmax, 2 sigmoid).
    ExpertGatingFunc,
    /// The first `n` layers keep a dense FFN (LFM2-MoE).
    LeadingDenseLayers,
    /// Multiplier on the routed experts' weights.
    ExpertWeightsScale,
}

/// Where a hyperparameter lives in each format. The first key present wins.
/// GGUF keys contain `{arch}`, replaced by `general.architecture`.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    /// The hyperparameter.
    pub param: Param,
    /// GGUF keys.
    pub gguf: &'static [&'static str],
    /// HF config.json keys (nested objects flattened with dots).
    pub hf: &'static [&'static str],
}

pub(crate) const fn key(
    param: Param,
    gguf: &'static [&'static str],
    hf: &'static [&'static str],
) -> KeySpec {
    KeySpec { param, gguf, hf }
}

/// Keys shared by every family. A family's `extra_keys` are consulted first.
pub const COMMON_KEYS: &[KeySpec] = &[
    key(Param::NEmbd, &["{arch}.embedding_length"], &["hidden_size"]),
    key(
        Param::NLayer,
        &["{arch}.block_count"],
        &["num_hidden_layers"],
    ),
    key(
        Param::NHead,
        &["{arch}.attention.head_count"],
        &["num_attention_heads"],
    ),
    key(
        Param::NHeadKv,
        &["{arch}.attention.head_count_kv"],
        &["num_key_value_heads"],
    ),
    key(
        Param::HeadDim,
        &["{arch}.attention.key_length"],
        &["head_dim"],
    ),
    key(
        Param::NFf,
        &["{arch}.feed_forward_length"],
        &["intermediate_size"],
    ),
    key(
        Param::NCtxTrain,
        &["{arch}.context_length"],
        &["max_position_embeddings"],
    ),
    key(Param::NVocab, &["{arch}.vocab_size"], &["vocab_size"]),
    key(
        Param::RopeTheta,
        &["{arch}.rope.freq_base"],
        &[
            "rope_parameters.rope_theta",
            "rope_parameters.full_attention.rope_theta",
            "rope_theta",
        ],
    ),
    key(
        Param::RopeThetaLocal,
        &["{arch}.rope.freq_base_swa"],
        &[
            "rope_parameters.sliding_attention.rope_theta",
            "rope_local_base_freq",
        ],
    ),
    key(
        Param::RopeScalingType,
        &["{arch}.rope.scaling.type"],
        &[
            "rope_parameters.rope_type",
            "rope_parameters.full_attention.rope_type",
            "rope_scaling.rope_type",
            "rope_scaling.type",
        ],
    ),
    key(
        Param::RopeScalingFactor,
        &["{arch}.rope.scaling.factor"],
        &[
            "rope_parameters.factor",
            "rope_parameters.full_attention.factor",
            "rope_scaling.factor",
        ],
    ),
    key(
        Param::RopeLowFreqFactor,
        &[],
        &[
            "rope_parameters.low_freq_factor",
            "rope_scaling.low_freq_factor",
        ],
    ),
    key(
        Param::RopeHighFreqFactor,
        &[],
        &[
            "rope_parameters.high_freq_factor",
            "rope_scaling.high_freq_factor",
        ],
    ),
    key(
        Param::RopeOrigCtx,
        &["{arch}.rope.scaling.original_context_length"],
        &[
            "rope_parameters.original_max_position_embeddings",
            "rope_scaling.original_max_position_embeddings",
            "original_max_position_embeddings",
        ],
    ),
    key(
        Param::RopeBetaFast,
        &["{arch}.rope.scaling.yarn_beta_fast"],
        &["rope_parameters.beta_fast", "rope_scaling.beta_fast"],
    ),
    key(
        Param::RopeBetaSlow,
        &["{arch}.rope.scaling.yarn_beta_slow"],
        &["rope_parameters.beta_slow", "rope_scaling.beta_slow"],
    ),
    key(
        Param::RopeAttnFactor,
        &["{arch}.rope.scaling.attn_factor"],
        &[
            "rope_parameters.attention_factor",
            "rope_scaling.attention_factor",
        ],
    ),
    key(
        Param::RopeTruncate,
        &[],
        &["rope_parameters.truncate", "rope_scaling.truncate"],
    ),
    key(Param::NRot, &["{arch}.rope.dimension_count"], &[]),
    key(
        Param::PartialRotaryFactor,
        &[],
        &[
            "partial_rotary_factor",
            "rope_parameters.partial_rotary_factor",
        ],
    ),
    key(
        Param::NormEps,
        &["{arch}.attention.layer_norm_rms_epsilon"],
        &["rms_norm_eps"],
    ),
    key(
        Param::SlidingWindow,
        &["{arch}.attention.sliding_window"],
        &["sliding_window"],
    ),
    key(
        Param::SlidingWindowPattern,
        &["{arch}.attention.sliding_window_pattern"],
        &["sliding_window_pattern", "_sliding_window_pattern"],
    ),
    key(Param::LayerTypes, &[], &["layer_types"]),
    key(Param::NoRopeLayers, &[], &["no_rope_layers"]),
    key(Param::NoRopeLayerInterval, &[], &["no_rope_layer_interval"]),
    key(Param::UseSlidingWindow, &[], &["use_sliding_window"]),
    key(
        Param::AttnSoftcap,
        &["{arch}.attn_logit_softcapping"],
        &["attn_logit_softcapping"],
    ),
    key(
        Param::FinalSoftcap,
        &["{arch}.final_logit_softcapping"],
        &["final_logit_softcapping"],
    ),
    key(Param::QueryPreAttnScalar, &[], &["query_pre_attn_scalar"]),
    key(Param::AttnScale, &["{arch}.attention.scale"], &[]),
    key(
        Param::RopeShortFactor,
        &[],
        &["rope_parameters.short_factor", "rope_scaling.short_factor"],
    ),
    key(
        Param::RopeLongFactor,
        &[],
        &["rope_parameters.long_factor", "rope_scaling.long_factor"],
    ),
    key(
        Param::ConvKernel,
        &["{arch}.shortconv.l_cache"],
        &["conv_L_cache"],
    ),
    key(Param::FullAttnIdxs, &[], &["full_attn_idxs"]),
    key(Param::BlockAutoAdjustFf, &[], &["block_auto_adjust_ff_dim"]),
    key(Param::BlockFfMultiplier, &[], &["block_ffn_dim_multiplier"]),
    key(Param::BlockMultipleOf, &[], &["block_multiple_of"]),
    key(
        Param::NExpert,
        &["{arch}.expert_count"],
        &["num_experts", "num_local_experts"],
    ),
    key(
        Param::NExpertUsed,
        &["{arch}.expert_used_count"],
        &["num_experts_per_tok"],
    ),
    key(
        Param::NFfExpert,
        &["{arch}.expert_feed_forward_length"],
        &["moe_intermediate_size"],
    ),
    key(
        Param::NFfSharedExpert,
        &["{arch}.expert_shared_feed_forward_length"],
        &["shared_expert_intermediate_size"],
    ),
    key(
        Param::ExpertWeightsNorm,
        &["{arch}.expert_weights_norm"],
        &["norm_topk_prob"],
    ),
    key(Param::DecoderSparseStep, &[], &["decoder_sparse_step"]),
    key(Param::MlpOnlyLayers, &[], &["mlp_only_layers"]),
    key(Param::HeadDimSwa, &["{arch}.attention.key_length_swa"], &[]),
    key(Param::NRotSwa, &["{arch}.rope.dimension_count_swa"], &[]),
    key(Param::UseDoubleWideMlp, &[], &["use_double_wide_mlp"]),
    key(
        Param::SharedKvLayers,
        &["{arch}.attention.shared_kv_layers"],
        &["num_kv_shared_layers"],
    ),
    key(
        Param::PerLayerInputWidth,
        &["{arch}.embedding_length_per_layer_input"],
        &["hidden_size_per_layer_input"],
    ),
    key(Param::AttnKEqV, &[], &["attention_k_eq_v"]),
    key(Param::NHeadKvGlobal, &[], &["num_global_key_value_heads"]),
    key(Param::ExpertGatingFunc, &["{arch}.expert_gating_func"], &[]),
    key(
        Param::LeadingDenseLayers,
        &["{arch}.leading_dense_block_count"],
        &["num_dense_layers"],
    ),
    key(
        Param::ExpertWeightsScale,
        &["{arch}.expert_weights_scale"],
        &["routed_scaling_factor"],
    ),
    key(Param::EnableMoeBlock, &[], &["enable_moe_block"]),
    key(
        Param::RopeProportionalFactor,
        &[],
        &[
            "rope_parameters.full_attention.partial_rotary_factor",
            "rope_parameters.partial_rotary_factor",
        ],
    ),
];

/// A tensor-name template in both namings; `{i}` is the layer index, `{e}`
/// the expert index (HF per-expert tensors). A table may list a role twice:
/// the first name present in the source wins (LFM2's final norm).
#[derive(Debug, Clone, Copy)]
pub struct TensorName {
    /// The role.
    pub role: Role,
    /// GGUF name.
    pub gguf: &'static str,
    /// HF safetensors name.
    pub hf: &'static str,
}

const fn t(role: Role, gguf: &'static str, hf: &'static str) -> TensorName {
    TensorName { role, gguf, hf }
}

/// Tensor names of llama-style checkpoints (llama, mistral, qwen2, qwen3).
pub const LLAMA_TENSORS: &[TensorName] = &[
    t(
        Role::TokenEmbd,
        "token_embd.weight",
        "model.embed_tokens.weight",
    ),
    t(Role::OutputNorm, "output_norm.weight", "model.norm.weight"),
    t(Role::Output, "output.weight", "lm_head.weight"),
    t(
        Role::AttnNorm,
        "blk.{i}.attn_norm.weight",
        "model.layers.{i}.input_layernorm.weight",
    ),
    t(
        Role::AttnQ,
        "blk.{i}.attn_q.weight",
        "model.layers.{i}.self_attn.q_proj.weight",
    ),
    t(
        Role::AttnK,
        "blk.{i}.attn_k.weight",
        "model.layers.{i}.self_attn.k_proj.weight",
    ),
    t(
        Role::AttnV,
        "blk.{i}.attn_v.weight",
        "model.layers.{i}.self_attn.v_proj.weight",
    ),
    t(
        Role::AttnOutput,
        "blk.{i}.attn_output.weight",
        "model.layers.{i}.self_attn.o_proj.weight",
    ),
    t(
        Role::AttnQBias,
        "blk.{i}.attn_q.bias",
        "model.layers.{i}.self_attn.q_proj.bias",
    ),
    t(
        Role::AttnKBias,
        "blk.{i}.attn_k.bias",
        "model.layers.{i}.self_attn.k_proj.bias",
    ),
    t(
        Role::AttnVBias,
        "blk.{i}.attn_v.bias",
        "model.layers.{i}.self_attn.v_proj.bias",
    ),
    t(
        Role::AttnOutputBias,
        "blk.{i}.attn_output.bias",
        "model.layers.{i}.self_attn.o_proj.bias",
    ),
    t(
        Role::AttnQNorm,
        "blk.{i}.attn_q_norm.weight",
        "model.layers.{i}.self_attn.q_norm.weight",
    ),
    t(
        Role::AttnKNorm,
        "blk.{i}.attn_k_norm.weight",
        "model.layers.{i}.self_attn.k_norm.weight",
    ),
    t(
        Role::FfnNorm,
        "blk.{i}.ffn_norm.weight",
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    t(
        Role::FfnGate,
        "blk.{i}.ffn_gate.weight",
        "model.layers.{i}.mlp.gate_proj.weight",
    ),
    t(
        Role::FfnUp,
        "blk.{i}.ffn_up.weight",
        "model.layers.{i}.mlp.up_proj.weight",
    ),
    t(
        Role::FfnDown,
        "blk.{i}.ffn_down.weight",
        "model.layers.{i}.mlp.down_proj.weight",
    ),
];

/// Tensor names of Gemma 2/3 checkpoints (sandwich norms; HF's
/// `post_attention_layernorm` is a post-norm here, not the ffn pre-norm).
pub const GEMMA_TENSORS: &[TensorName] = &[
    t(
        Role::TokenEmbd,
        "token_embd.weight",
        "model.embed_tokens.weight",
    ),
    t(Role::OutputNorm, "output_norm.weight", "model.norm.weight"),
    t(Role::Output, "output.weight", "lm_head.weight"),
    t(
        Role::AttnNorm,
        "blk.{i}.attn_norm.weight",
        "model.layers.{i}.input_layernorm.weight",
    ),
    t(
        Role::AttnQ,
        "blk.{i}.attn_q.weight",
        "model.layers.{i}.self_attn.q_proj.weight",
    ),
    t(
        Role::AttnK,
        "blk.{i}.attn_k.weight",
        "model.layers.{i}.self_attn.k_proj.weight",
    ),
    t(
        Role::AttnV,
        "blk.{i}.attn_v.weight",
        "model.layers.{i}.self_attn.v_proj.weight",
    ),
    t(
        Role::AttnOutput,
        "blk.{i}.attn_output.weight",
        "model.layers.{i}.self_attn.o_proj.weight",
    ),
    t(
        Role::AttnQNorm,
        "blk.{i}.attn_q_norm.weight",
        "model.layers.{i}.self_attn.q_norm.weight",
    ),
    t(
        Role::AttnKNorm,
        "blk.{i}.attn_k_norm.weight",
        "model.layers.{i}.self_attn.k_norm.weight",
    ),
    t(
        Role::PostAttnNorm,
        "blk.{i}.post_attention_norm.weight",
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    t(
        Role::FfnNorm,
        "blk.{i}.ffn_norm.weight",
        "model.layers.{i}.pre_feedforward_layernorm.weight",
    ),
    t(
        Role::FfnGate,
        "blk.{i}.ffn_gate.weight",
        "model.layers.{i}.mlp.gate_proj.weight",
    ),
    t(
        Role::FfnUp,
        "blk.{i}.ffn_up.weight",
        "model.layers.{i}.mlp.up_proj.weight",
    ),
    t(
        Role::FfnDown,
        "blk.{i}.ffn_down.weight",
        "model.layers.{i}.mlp.down_proj.weight",
    ),
    t(
        Role::PostFfnNorm,
        "blk.{i}.post_ffw_norm.weight",
        "model.layers.{i}.post_feedforward_layernorm.weight",
    ),
];

/// Gemma 4's tensors beyond Gemma 3's (per-layer input embeddings, the
/// residual scale); the family searches this table, then [`GEMMA_TENSORS`].
pub const GEMMA4_TENSORS: &[TensorName] = &[
    t(
        Role::PerLayerTokenEmbd,
        "per_layer_token_embd.weight",
        "model.embed_tokens_per_layer.weight",
    ),
    t(
        Role::PerLayerModelProj,
        "per_layer_model_proj.weight",
        "model.per_layer_model_projection.weight",
    ),
    t(
        Role::PerLayerProjNorm,
        "per_layer_proj_norm.weight",
        "model.per_layer_projection_norm.weight",
    ),
    t(
        Role::PerLayerInpGate,
        "blk.{i}.inp_gate.weight",
        "model.layers.{i}.per_layer_input_gate.weight",
    ),
    t(
        Role::PerLayerProj,
        "blk.{i}.proj.weight",
        "model.layers.{i}.per_layer_projection.weight",
    ),
    t(
        Role::PerLayerPostNorm,
        "blk.{i}.post_norm.weight",
        "model.layers.{i}.post_per_layer_input_norm.weight",
    ),
    t(
        Role::LayerOutputScale,
        "blk.{i}.layer_output_scale.weight",
        "model.layers.{i}.layer_scalar",
    ),
];

/// Mixture-of-experts tensors of Qwen2-MoE / Qwen3-MoE checkpoints (GGUF:
/// stacked 3-D experts; HF: one tensor per expert and projection).
pub const QWEN_MOE_TENSORS: &[TensorName] = &[
    t(
        Role::FfnGateInp,
        "blk.{i}.ffn_gate_inp.weight",
        "model.layers.{i}.mlp.gate.weight",
    ),
    t(
        Role::FfnGateExps,
        "blk.{i}.ffn_gate_exps.weight",
        "model.layers.{i}.mlp.experts.{e}.gate_proj.weight",
    ),
    t(
        Role::FfnUpExps,
        "blk.{i}.ffn_up_exps.weight",
        "model.layers.{i}.mlp.experts.{e}.up_proj.weight",
    ),
    t(
        Role::FfnDownExps,
        "blk.{i}.ffn_down_exps.weight",
        "model.layers.{i}.mlp.experts.{e}.down_proj.weight",
    ),
    t(
        Role::FfnGateShexp,
        "blk.{i}.ffn_gate_shexp.weight",
        "model.layers.{i}.mlp.shared_expert.gate_proj.weight",
    ),
    t(
        Role::FfnUpShexp,
        "blk.{i}.ffn_up_shexp.weight",
        "model.layers.{i}.mlp.shared_expert.up_proj.weight",
    ),
    t(
        Role::FfnDownShexp,
        "blk.{i}.ffn_down_shexp.weight",
        "model.layers.{i}.mlp.shared_expert.down_proj.weight",
    ),
    t(
        Role::FfnGateInpShexp,
        "blk.{i}.ffn_gate_inp_shexp.weight",
        "model.layers.{i}.mlp.shared_expert_gate.weight",
    ),
];

/// Tensor names of LFM2 checkpoints where they differ from llama's
/// (lfm2-spec.md §7; the family searches this table, then
/// [`LLAMA_TENSORS`]). The final norm is `token_embd_norm` in llama.cpp's
/// naming, `output_norm` in older ollama conversions; HF calls it
/// `embedding_norm` although it follows the layers.
pub const LFM2_TENSORS: &[TensorName] = &[
    t(
        Role::OutputNorm,
        "token_embd_norm.weight",
        "model.embedding_norm.weight",
    ),
    t(
        Role::AttnNorm,
        "blk.{i}.attn_norm.weight",
        "model.layers.{i}.operator_norm.weight",
    ),
    t(
        Role::FfnNorm,
        "blk.{i}.ffn_norm.weight",
        "model.layers.{i}.ffn_norm.weight",
    ),
    t(
        Role::AttnOutput,
        "blk.{i}.attn_output.weight",
        "model.layers.{i}.self_attn.out_proj.weight",
    ),
    t(
        Role::AttnQNorm,
        "blk.{i}.attn_q_norm.weight",
        "model.layers.{i}.self_attn.q_layernorm.weight",
    ),
    t(
        Role::AttnKNorm,
        "blk.{i}.attn_k_norm.weight",
        "model.layers.{i}.self_attn.k_layernorm.weight",
    ),
    t(
        Role::ShortConvInProj,
        "blk.{i}.shortconv.in_proj.weight",
        "model.layers.{i}.conv.in_proj.weight",
    ),
    t(
        Role::ShortConvConv,
        "blk.{i}.shortconv.conv.weight",
        "model.layers.{i}.conv.conv.weight",
    ),
    t(
        Role::ShortConvOutProj,
        "blk.{i}.shortconv.out_proj.weight",
        "model.layers.{i}.conv.out_proj.weight",
    ),
    t(
        Role::FfnGate,
        "blk.{i}.ffn_gate.weight",
        "model.layers.{i}.feed_forward.w1.weight",
    ),
    t(
        Role::FfnUp,
        "blk.{i}.ffn_up.weight",
        "model.layers.{i}.feed_forward.w3.weight",
    ),
    t(
        Role::FfnDown,
        "blk.{i}.ffn_down.weight",
        "model.layers.{i}.feed_forward.w2.weight",
    ),
];

/// LFM2-MoE's router, experts and selection bias (GGUF: the stacked
/// `ffn_*_exps` of every MoE; HF: one tensor per expert, `w1` gate, `w3`
/// up, `w2` down); the family searches this table, then [`LFM2_TENSORS`].
pub const LFM2_MOE_TENSORS: &[TensorName] = &[
    t(
        Role::FfnGateInp,
        "blk.{i}.ffn_gate_inp.weight",
        "model.layers.{i}.feed_forward.gate.weight",
    ),
    t(
        Role::FfnGateExps,
        "blk.{i}.ffn_gate_exps.weight",
        "model.layers.{i}.feed_forward.experts.{e}.w1.weight",
    ),
    t(
        Role::FfnUpExps,
        "blk.{i}.ffn_up_exps.weight",
        "model.layers.{i}.feed_forward.experts.{e}.w3.weight",
    ),
    t(
        Role::FfnDownExps,
        "blk.{i}.ffn_down_exps.weight",
        "model.layers.{i}.feed_forward.experts.{e}.w2.weight",
    ),
    t(
        Role::FfnExpProbsB,
        "blk.{i}.exp_probs_b.bias",
        "model.layers.{i}.feed_forward.expert_bias",
    ),
];

/// Phi-3's fused tensors (q/k/v rows in one matrix, gate then up rows in
/// another), split into the llama roles by the loader; the rest of a Phi-3
/// checkpoint uses llama names.
pub const PHI3_FUSED_TENSORS: &[TensorName] = &[
    t(
        Role::AttnQkv,
        "blk.{i}.attn_qkv.weight",
        "model.layers.{i}.self_attn.qkv_proj.weight",
    ),
    t(
        Role::FfnGateUp,
        "blk.{i}.ffn_up.weight",
        "model.layers.{i}.mlp.gate_up_proj.weight",
    ),
];

/// Which layers use the sliding window when the metadata has no per-layer list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlidingDefault {
    /// No layer slides unless `layer_types` says so.
    None,
    /// Every layer slides when a window is set (Mistral).
    AllLayers,
    /// Every layer slides when a GGUF sets a window (Mistral GGUFs have
    /// architecture `llama`); HF configs never slide (transformers'
    /// `LlamaAttention` ignores a `sliding_window` key).
    AllLayersInGguf,
    /// Layer `i` slides unless `i % period == period - 1` (Gemma 2: 2, Gemma 3: 6);
    /// `sliding_window_pattern` in the metadata overrides the period.
    Pattern(usize),
}

/// Family quirks and defaults, all as data.
#[derive(Debug, Clone, Copy)]
pub struct Quirks {
    /// Feed-forward activation.
    pub activation: Activation,
    /// RoPE pairing of q/k rows in GGUF files of this family.
    pub gguf_rope_pairing: RopePairing,
    /// RoPE pairing of q/k rows in HF checkpoints (always half split).
    pub hf_rope_pairing: RopePairing,
    /// Added to stored norm weights of GGUF files.
    pub gguf_norm_offset: f32,
    /// Added to stored norm weights of HF files (1.0 for Gemma's `(1 + w)`).
    pub hf_norm_offset: f32,
    /// Scale embeddings by `sqrt(n_embd)`.
    pub embd_scale_sqrt: bool,
    /// Which layers slide.
    pub sliding: SlidingDefault,
    /// Window when the metadata sets none but sliding layers exist.
    pub default_sliding_window: Option<usize>,
    /// Local-layer RoPE base when the metadata sets none (Gemma 3: 10000).
    pub default_rope_theta_local: Option<f64>,
    /// Global RoPE base when the metadata sets none.
    pub default_rope_theta: f64,
    /// Every `n`-th layer (1-based) has no RoPE when the metadata gives no
    /// per-layer list (SmolLM3: 4, which llama.cpp hard-codes for GGUFs).
    pub nope_interval: Option<usize>,
    /// Requires q/k norms in every layer.
    pub qk_norm: bool,
    /// Requires post-attention and post-ffn norms in every layer.
    pub sandwich_norm: bool,
    /// GGUF files carry no `query_pre_attn_scalar`; llama.cpp uses
    /// `1/sqrt(n_embd / n_head)` instead of `1/sqrt(head_dim)` for the model
    /// sizes with these layer counts (Gemma 2/3 27B).
    pub gguf_attn_scale_embd_per_head_layers: &'static [usize],
    /// MoE: renormalise the top-k router probabilities when the metadata
    /// does not say (Qwen3-MoE: true, Qwen2-MoE: false).
    pub default_expert_weights_norm: bool,
    /// Multiplier on q·k when the metadata sets none (Gemma 4: 1.0, its
    /// q/k norms carry the scale); `None` is `1/sqrt(head_dim)`.
    pub fixed_attn_scale: Option<f32>,
    /// Values get a weightless per-head RMS norm (Gemma 4).
    pub v_norm: bool,
    /// MoE router scores when the metadata does not say (LFM2-MoE: sigmoid).
    pub expert_gating: Gating,
    /// HF configs: the last layer is full attention whatever `layer_types`
    /// says (transformers' `Gemma4TextConfig` forces it, with a warning).
    pub hf_last_layer_full: bool,
    /// HF configs without `per_layer_config`: full-attention layers take
    /// `global_head_dim`, this when it is absent (transformers'
    /// `Gemma4TextConfig`: 512); `None`: they take `head_dim`.
    pub hf_global_head_dim: Option<usize>,
    /// GGUF: a full-attention layer without `attn_v` takes V from the K
    /// projection (llama.cpp's gemma4 loader; how its converter writes
    /// `attention_k_eq_v` models).
    pub gguf_v_from_k_when_absent: bool,
}

impl Quirks {
    /// Llama's: the baseline every other family states its differences
    /// from (`Quirks { ..., ..Quirks::BASE }`).
    pub const BASE: Quirks = Quirks {
        activation: Activation::Silu,
        gguf_rope_pairing: RopePairing::Norm,
        hf_rope_pairing: RopePairing::Neox,
        gguf_norm_offset: 0.0,
        hf_norm_offset: 0.0,
        embd_scale_sqrt: false,
        sliding: SlidingDefault::AllLayersInGguf,
        default_sliding_window: None,
        default_rope_theta_local: None,
        default_rope_theta: 10_000.0,
        nope_interval: None,
        qk_norm: false,
        sandwich_norm: false,
        gguf_attn_scale_embd_per_head_layers: &[],
        default_expert_weights_norm: false,
        fixed_attn_scale: None,
        v_norm: false,
        expert_gating: Gating::Softmax,
        hf_last_layer_full: false,
        hf_global_head_dim: None,
        gguf_v_from_k_when_absent: false,
    };
}

/// A model family: names, keys, tensor names and quirks.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// Our name for the family.
    pub name: &'static str,
    /// `general.architecture` values of GGUF files of this family.
    pub gguf_archs: &'static [&'static str],
    /// `model_type` values of HF config.json files of this family.
    pub hf_model_types: &'static [&'static str],
    /// Family-specific keys, consulted before [`COMMON_KEYS`].
    pub extra_keys: &'static [KeySpec],
    /// Tensor-name tables, searched in order.
    pub tensors: &'static [&'static [TensorName]],
    /// GGUF name of a per-pair RoPE frequency-factor tensor (llama3 scaling), if any.
    pub gguf_rope_freqs: Option<&'static str>,
    /// Quirks and defaults.
    pub quirks: Quirks,
}

impl Family {
    /// The key specs for `param`: family-specific first, then common.
    pub fn keys(&self, param: Param) -> impl Iterator<Item = &'static KeySpec> + '_ {
        self.extra_keys
            .iter()
            .chain(COMMON_KEYS.iter())
            .filter(move |k| k.param == param)
    }
}

/// Every family this build knows.
pub fn all() -> &'static [&'static Family] {
    crate::families::ALL
}

/// The family whose GGUF architecture is `arch`.
pub fn by_gguf_arch(arch: &str) -> Option<&'static Family> {
    all().iter().copied().find(|f| f.gguf_archs.contains(&arch))
}

/// The family whose HF `model_type` is `model_type`.
pub fn by_hf_model_type(model_type: &str) -> Option<&'static Family> {
    all()
        .iter()
        .copied()
        .find(|f| f.hf_model_types.contains(&model_type))
}

/// The family called `name`.
pub fn by_name(name: &str) -> Option<&'static Family> {
    all().iter().copied().find(|f| f.name == name)
}
