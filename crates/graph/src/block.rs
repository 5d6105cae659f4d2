//! One decoder layer as a block of variants: how it is normed, what mixes
//! positions (attention, a short causal convolution), what transforms each
//! position (a dense gated FFN, a mixture of experts), and per-layer extras.
//!
//! Every backend's compile step destructures these types exhaustively (no
//! `..`, no catch-all arm), so a new variant or field is a compile error in
//! each backend until it is handled, and a variant a backend cannot run is
//! refused at load with [`Unsupported`](crate::Error::Unsupported) naming
//! backend, variant and layer — never silently wrong numbers.

use crate::Rope;

/// Feed-forward activation of a gated FFN: `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `x * sigmoid(x)`.
    Silu,
    /// GELU, tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
}

/// One decoder layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Where the norms sit around the mixer and the feed-forward part.
    pub norms: NormPlacement,
    /// What mixes information across positions.
    pub mixer: Mixer,
    /// What transforms each position.
    pub ffn: FeedForward,
    /// Gemma 4's per-layer input embedding, added after the FFN.
    pub per_layer_input: Option<PerLayerInput>,
    /// Gemma 4's `layer_scalar`: a `[1]` tensor multiplying the whole
    /// residual stream after the layer (last, after the per-layer input).
    pub layer_scale: Option<String>,
}

impl Block {
    /// The attention mixer, if this block has one (for tools and tests;
    /// backends match [`Mixer`] exhaustively instead).
    pub fn attention(&self) -> Option<&Attention> {
        match &self.mixer {
            Mixer::Attention(a) => Some(a),
            Mixer::ShortConv(_) => None,
        }
    }

    /// [`Block::attention`], mutable (tests edit programs).
    pub fn attention_mut(&mut self) -> Option<&mut Attention> {
        match &mut self.mixer {
            Mixer::Attention(a) => Some(a),
            Mixer::ShortConv(_) => None,
        }
    }
}

/// RMS norms of a block (tensor names; every norm is `[n_embd]`).
#[derive(Debug, Clone, PartialEq)]
pub enum NormPlacement {
    /// `x += mixer(norm(x)); x += ffn(norm(x))` (llama, qwen, mistral).
    Pre {
        /// Before the mixer.
        mixer: String,
        /// Before the feed-forward part.
        ffn: String,
    },
    /// Pre- and post-norms around both parts: `x += post(mixer(pre(x)))`
    /// (Gemma 2/3).
    Sandwich {
        /// Before the mixer.
        mixer: String,
        /// After the mixer, before the residual add.
        post_mixer: String,
        /// Before the feed-forward part.
        ffn: String,
        /// After the feed-forward part, before the residual add.
        post_ffn: String,
    },
}

impl NormPlacement {
    /// `(pre, post)` norm names of the mixer and of the feed-forward part
    /// (for tools and tests; backends match [`NormPlacement`] themselves, so
    /// that a new placement is a compile error there).
    #[allow(clippy::type_complexity)]
    pub fn split(&self) -> ((&str, Option<&str>), (&str, Option<&str>)) {
        match self {
            NormPlacement::Pre { mixer, ffn } => ((mixer, None), (ffn, None)),
            NormPlacement::Sandwich {
                mixer,
                post_mixer,
                ffn,
                post_ffn,
            } => ((mixer, Some(post_mixer)), (ffn, Some(post_ffn))),
        }
    }
}

/// What mixes information across positions.
// One per layer, built once: the size difference between variants costs
// nothing, and unboxed variants keep backends' matches plain.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Mixer {
    /// Multi-head (grouped-query) softmax attention over a KV cache.
    Attention(Attention),
    /// LFM2's gated short causal convolution over time.
    ShortConv(ShortConv),
}

impl Mixer {
    /// The variant's name in messages (`"attention"`, `"short_conv"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Mixer::Attention(_) => "attention",
            Mixer::ShortConv(_) => "short_conv",
        }
    }
}

/// Softmax attention of one layer, fully resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Attention {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (GQA when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Dimension of each head (for q, k and v).
    pub head_dim: usize,
    /// Multiplier on q·k before the soft-cap and softmax.
    pub scale: f32,
    /// `cap * tanh(score / cap)` applied to scores, if set.
    pub softcap: Option<f32>,
    /// Sliding window: a query at position `p` sees keys at `j` with
    /// `p - j < window`. `None` is full causal attention.
    pub window: Option<usize>,
    /// RoPE of this layer; `None` is no positional encoding (NoPE, as in
    /// SmolLM3's every fourth layer).
    pub rope: Option<Rope>,
    /// Take K/V from this earlier layer's cache instead of projecting and
    /// caching its own (Gemma 4's last layers); `None` for ordinary layers.
    /// The source must be an attention layer of the same K/V geometry that
    /// owns its cache; this layer keeps no cache. `wk`, `wv`, the k/v biases
    /// and `k_norm` then name the source layer's tensors (what produced the
    /// K/V read here) and are not applied by this layer.
    pub kv_source: Option<usize>,
    /// Query projection `[n_embd, n_head * head_dim]`.
    pub wq: String,
    /// Key projection `[n_embd, n_head_kv * head_dim]`.
    pub wk: String,
    /// Value projection `[n_embd, n_head_kv * head_dim]`.
    pub wv: String,
    /// Output projection `[n_head * head_dim, n_embd]`.
    pub wo: String,
    /// Biases of q/k/v and the output, each optional.
    pub bias: AttentionBias,
    /// Per-head RMS norm of queries `[head_dim]`.
    pub q_norm: Option<String>,
    /// Per-head RMS norm of keys `[head_dim]`.
    pub k_norm: Option<String>,
    /// Per-head RMS norm of values without a weight (Gemma 4), applied
    /// before they are cached.
    pub v_norm: bool,
}

impl Attention {
    /// Width of the query projection.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the key and value projections.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}

/// Optional projection biases of an attention block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttentionBias {
    /// `[q_dim]`.
    pub q: Option<String>,
    /// `[kv_dim]`.
    pub k: Option<String>,
    /// `[kv_dim]`.
    pub v: Option<String>,
    /// `[n_embd]`.
    pub o: Option<String>,
}

/// LFM2's short convolution block: `in_proj` gives `B, C, x`; `y = C ·
/// conv(B · x)` with a depthwise causal convolution of `kernel` taps over
/// time; `out_proj(y)`. Needs a per-sequence state of `kernel - 1` rows.
#[derive(Debug, Clone, PartialEq)]
pub struct ShortConv {
    /// Taps of the depthwise convolution (`L_cache`).
    pub kernel: usize,
    /// `[n_embd, 3 * n_embd]`.
    pub in_proj: String,
    /// Depthwise weights `[kernel, n_embd]` (or HF's `[kernel, 1, n_embd]`):
    /// tap `kernel - 1` multiplies the current position.
    pub conv: String,
    /// `[n_embd, n_embd]`.
    pub out_proj: String,
}

/// What transforms each position.
#[allow(clippy::large_enum_variant)] // as for Mixer
#[derive(Debug, Clone, PartialEq)]
pub enum FeedForward {
    /// `down(act(gate(x)) * up(x))`.
    Dense(DenseFfn),
    /// A routed mixture of gated experts, optionally with a shared expert.
    Moe(MoeFfn),
}

impl FeedForward {
    /// The variant's name in messages (`"dense"`, `"moe"`).
    pub fn kind(&self) -> &'static str {
        match self {
            FeedForward::Dense(_) => "dense",
            FeedForward::Moe(_) => "moe",
        }
    }
}

/// A dense gated feed-forward block.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseFfn {
    /// Hidden width.
    pub n_ff: usize,
    /// Activation of the gate.
    pub activation: Activation,
    /// `[n_embd, n_ff]`.
    pub gate: String,
    /// `[n_embd, n_ff]`.
    pub up: String,
    /// `[n_ff, n_embd]`.
    pub down: String,
}

/// How router logits become expert scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over every expert (Qwen2-MoE, Qwen3-MoE).
    Softmax,
    /// Independent sigmoids (LFM2-MoE).
    Sigmoid,
}

/// A mixture of experts (Qwen2-MoE, Qwen3-MoE, LFM2-MoE).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeFfn {
    /// Experts in the layer.
    pub n_expert: usize,
    /// Experts each token is routed to (top-k).
    pub n_expert_used: usize,
    /// Hidden width of one expert.
    pub n_ff_expert: usize,
    /// Activation of every expert's gate.
    pub activation: Activation,
    /// Router `[n_embd, n_expert]`, evaluated in f32.
    pub router: String,
    /// Scores from the router's logits.
    pub gating: Gating,
    /// `[n_expert]` added to the scores to choose the top-k only; the
    /// weights stay the unbiased scores (LFM2-MoE's `expert_bias`).
    pub selection_bias: Option<String>,
    /// Renormalise the top-k scores to sum to one (Qwen3-MoE; sigmoid
    /// scores as `w / (sum + 1e-6)`, as transformers' LFM2-MoE) or use them
    /// as they are (Qwen2-MoE).
    pub normalize_top_k: bool,
    /// Multiplier on the routed experts' weights (`routed_scaling_factor`).
    pub weights_scale: f32,
    /// The experts' weights.
    pub experts: ExpertTensors,
    /// An always-on expert beside the routed ones.
    pub shared: Option<SharedExpert>,
}

/// Where expert weights live.
#[derive(Debug, Clone, PartialEq)]
pub enum ExpertTensors {
    /// GGUF: one 3-D tensor per projection, `[n_embd, n_ff_expert,
    /// n_expert]` (`ffn_gate_exps`, `ffn_up_exps`) and `[n_ff_expert,
    /// n_embd, n_expert]` (`ffn_down_exps`).
    Stacked {
        /// Gates of every expert.
        gate: String,
        /// Ups of every expert.
        up: String,
        /// Downs of every expert.
        down: String,
    },
    /// HF: one 2-D tensor per expert and projection (`n_expert` each).
    PerExpert {
        /// `[n_embd, n_ff_expert]` per expert.
        gate: Vec<String>,
        /// `[n_embd, n_ff_expert]` per expert.
        up: Vec<String>,
        /// `[n_ff_expert, n_embd]` per expert.
        down: Vec<String>,
    },
}

/// Qwen2-MoE's shared expert: a dense gated FFN whose output is scaled by
/// `sigmoid(gate_inp · x)` when a gate is present.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedExpert {
    /// The expert.
    pub ffn: DenseFfn,
    /// `[n_embd]` (or `[n_embd, 1]`) scalar gate, if any.
    pub gate_inp: Option<String>,
}

/// Gemma 4's per-layer input: `x += norm(proj(act(gate(x)) * e_l))` with
/// `e_l` this layer's slice of the program's
/// [`PerLayerEmbedding`](crate::PerLayerEmbedding).
#[derive(Debug, Clone, PartialEq)]
pub struct PerLayerInput {
    /// Width of the per-layer embedding.
    pub width: usize,
    /// Activation of the gate.
    pub activation: Activation,
    /// `[n_embd, width]`.
    pub gate: String,
    /// `[width, n_embd]`.
    pub proj: String,
    /// `[n_embd]`.
    pub norm: String,
}
