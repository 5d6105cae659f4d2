//! Decoder → MIL lowering: per-layer programs and weight blobs.
//!
//! [`lower`] turns a [`DecoderProgram`] into ANE kernels: one-function MIL
//! programs (`main`, one fp16 input `x` of shape `[1, C, 1, W]`, one output)
//! with their weight file (`@model_path/weights/weight.bin`, MIL blob storage
//! v2, coremltools-aligned). Linear layers are 1×1 convs over channels; the
//! W columns are token positions (decode fills column 0, prefill up to W).
//! Weights of any ggml type are dequantized with `anedvd_quant::dequantize`
//! and stored as fp16, int8 or palettes ([`WeightFormat`]).
//!
//! Two [`Variant`]s:
//!
//! * [`Variant::Split`] (the seed's layout, norms on the CPU), per layer:
//!   `blk.i.qkv` (fused q/k/v projection, biases added), `blk.i.attn_out`
//!   (output projection), `blk.i.ffn` (gate/up/act/down) — 3 dispatches per
//!   layer.
//! * [`Variant::Fused`] (norms inside, RMSNorm as a constant-weight conv
//!   sum · `pow(-0.5)`):
//!   `entry` (layer 0's attention norm + q/k/v) and per layer `blk.i.layer`,
//!   whose input packs `[attention context; residual]` along channels and which
//!   runs output projection, post-attention norm, residual add, FFN norm,
//!   FFN, post-FFN norm, residual add, then the NEXT layer's attention norm
//!   and q/k/v projection; its output packs `[residual; next q/k/v]` (the
//!   last layer returns the residual only) — 1 dispatch per layer + 1. The
//!   residual crosses the ANE divided by [`LowerOptions::residual_scale`].
//!
//! A mixture of experts splits as in the earlier ANE engine: the shared
//! expert (if any) is the layer's `blk.i.ffn` (split) or runs inside
//! `blk.i.layer` (fused), the router and routed experts run on the host
//! (the CPU backend's `MoeLayer`, experts read in place), which also
//! applies the shared expert's sigmoid gate. In the fused variant such a
//! layer's program returns `[residual; FFN-normed residual; shared
//! output]` and the next layer starts from its own `blk.{i+1}.entry`; in
//! the resident variant a layer group ends with such a layer, returning
//! the residual and the other two as ports, and the next group starts
//! from the residual the host finished.
//!
//! Gemma 4: a `ple` program (first, every variant) projects the scaled
//! embedding for every layer's per-layer input (the host norms it and adds
//! the token table's rows); each layer's branch `proj(act(gate·x) ⊙ e_l)`
//! is `blk.i.ple` (split; the host norms, adds and applies the layer
//! scale) or runs inside `blk.i.layer` (fused, whose input then packs
//! `[context; residual; e_l]`, and which also applies the layer scale;
//! resident: inside the group program, `e_l` an input port of its own).
//! A layer reading another's K/V projects q only; the host attends over
//! the source's cache and applies the value norm (resident: the program
//! attends over the source's cache, [`resident`]).
//!
//! Both end with `lm_head.s`, the output projection split into vocabulary
//! slices of at most [`LowerOptions::vocab_slice`] rows (every dim ≤ 65536,
//! ane-spec.md §2.4); in the fused variant each slice applies the final norm
//! itself. Attention (q/k norm, RoPE, KV cache, softmax over keys), the
//! embedding lookup, and soft-caps stay on the CPU.
//!
//! Everything emitted passes `anedvd_mil::rules::check` for
//! [`LowerOptions::path`] with flat surfaces: one input and one output per
//! program (uniform I/O), named consts, ops the path's capability registry
//! shows working, W·2 bytes a multiple of 64. The one exception is
//! reported, not hidden: the fused variant's `concat`, contested on the
//! in-memory path (`anedvd kernels` lists it). Projection weights are fp16
//! consts, or compressed per [`LowerOptions::weights`] ([`quantize`]); the
//! RMS norm follows the precision rules (`anedvd_mil::precision`).

mod cost;
mod emit;
mod kernels;
pub mod quantize;
pub mod resident;
pub mod sensitivity;
pub mod tensors;

pub use cost::{CostModel, KernelCost};
pub use kernels::layer_scale;
pub use quantize::WeightFormat;

use anedvd_graph::{
    Attention, AttentionBias, Block, DecoderProgram, DenseFfn, FeedForward, Mixer, MoeFfn,
    NormPlacement, PerLayerInput, ShortConv,
};
use anedvd_mil::ir::Program;
pub use anedvd_mil::registry::RuntimePath;
use anedvd_mil::sim::Weights;

/// Errors of the lowering.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor the program names is not in the weight source.
    #[error("tensor `{0}` is missing from the weights")]
    MissingTensor(String),
    /// A tensor has an unexpected shape or cannot be decoded.
    #[error("tensor `{tensor}`: {msg}")]
    Tensor {
        /// Tensor name.
        tensor: String,
        /// What is wrong.
        msg: String,
    },
    /// Building a MIL program failed.
    #[error("MIL: {0}")]
    Mil(#[from] anedvd_mil::Error),
    /// The program has a block variant the lowering does not handle.
    #[error(transparent)]
    Unsupported(anedvd_graph::Error),
    /// The options cannot be honoured.
    #[error("invalid lowering options: {0}")]
    Options(String),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// How much of a layer one program holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Projections only, norms on the CPU: 3 programs per layer.
    Split,
    /// Norms and residuals inside, layers chained: 1 program per layer + 1.
    Fused,
    /// Whole layers — norms, q/k norm, RoPE, attention and the KV cache —
    /// inside, several layers per program, the caches resident across
    /// steps (outputs aliased onto inputs): one program per layer group
    /// (⌈L/K⌉ for K layers per program; a group also ends after each
    /// mixture of experts, whose routed experts run on the host) + 1, + 1
    /// for Gemma 4's `ple` ([`resident`]). e5rt path only.
    Resident,
}

impl Variant {
    /// `"split"` or `"fused"`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Split => "split",
            Variant::Fused => "fused",
            Variant::Resident => "resident",
        }
    }

    /// Parses [`Variant::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "split" => Some(Variant::Split),
            "fused" => Some(Variant::Fused),
            "resident" => Some(Variant::Resident),
            _ => None,
        }
    }
}

/// Lowering options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LowerOptions {
    /// Activation width W (token columns per dispatch); a multiple of 32 so
    /// a flat fp16 surface row is 64-byte aligned. Default 64.
    pub width: usize,
    /// Program granularity. Default [`Variant::Fused`].
    pub variant: Variant,
    /// Largest vocabulary slice of the lm_head (≤ 65536). Default 32768.
    pub vocab_slice: usize,
    /// Fused variant: the residual stream crosses the ANE as `x / s` (a
    /// power of two, so exact), because fp16 tops out at 65504 and real
    /// residuals exceed it (Gemma 3 270M reaches ~88000 by layer 9). Block
    /// outputs are multiplied by `1/s` before the residual adds and every norm
    /// of the residual undoes the scale (`eps·(r/s)²`). The caller scales the
    /// embeddings by `1/s` before `entry` and reads `[residual/s; …]` back.
    /// Default 32. The split variant keeps the residual in f32 on the CPU
    /// and hands it over divided by `s` only where a program takes it raw
    /// (Gemma 4's `blk.i.ple`).
    pub residual_scale: f32,
    /// How projection weights are stored. Default [`WeightFormat::Fp16`]
    /// (fp16 consts, as without the option); int8 and the palettes have
    /// evidence only on the e5rt path (`anedvd ops`).
    pub weights: WeightFormat,
    /// The runtime path the programs are for: their rule check (ops,
    /// spellings, surfaces) follows its registry (`anedvd ops --path`).
    /// Default in-memory, the one path a runtime drives today.
    pub path: RuntimePath,
    /// Resident variant: layers per program; 0 picks the most that keep
    /// each program's weights within [`resident::MAX_PROGRAM_WEIGHT_BYTES`].
    pub layers_per_program: usize,
    /// Resident variant: positions each layer's resident KV cache holds
    /// (the context of a session; a power of two, softmax's axis).
    pub context: usize,
    /// Compressed weights: which projection blocks stay fp16, chosen by
    /// measured sensitivity ([`sensitivity`]), unless `fp16_blocks`
    /// already names blocks.
    pub keep_fp16: sensitivity::KeepFp16,
    /// The blocks stored fp16 whatever `weights` says; `lower` fills it
    /// from `keep_fp16` when empty (and reports it in [`Lowered::options`]).
    pub fp16_blocks: sensitivity::BlockMask,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            width: 64,
            variant: Variant::Fused,
            vocab_slice: 32768,
            residual_scale: 32.0,
            weights: WeightFormat::Fp16,
            path: RuntimePath::InMemory,
            layers_per_program: 0,
            context: 1024,
            keep_fp16: sensitivity::KeepFp16::Count(0),
            fp16_blocks: sensitivity::BlockMask::default(),
        }
    }
}

/// What a kernel computes; channel layouts of its input and output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelKind {
    /// Split: normed residual `[D]` → `[q; k; v]` (biases added).
    Qkv {
        /// Layer index.
        layer: usize,
    },
    /// Split: attention context `[q_dim]` → `[D]` (bias added).
    AttnOut {
        /// Layer index.
        layer: usize,
    },
    /// Split: normed residual `[D]` → FFN output `[D]` (before any post-norm).
    Ffn {
        /// Layer index.
        layer: usize,
    },
    /// Fused: residual `[D]` → layer `layer`'s `[q; k; v]` (attention norm
    /// inside): layer 0, and each layer after a mixture of experts.
    Entry {
        /// Layer index.
        layer: usize,
    },
    /// Fused: `[context; residual]` (Gemma 4: `[context; residual; e_l]`)
    /// → `[residual'; next q; k; v]`, or
    /// `[residual']` for the last layer; with `ffn_on_host` (a mixture of
    /// experts) the program stops before the routed experts and returns
    /// `[residual after attention; FFN-normed residual; shared expert's
    /// output]` (the last part only when there is a shared expert).
    Layer {
        /// Layer index.
        layer: usize,
        /// Whether the next layer's q/k/v follow the residual in the output.
        next_qkv: bool,
        /// Whether the host finishes the FFN (a mixture of experts).
        ffn_on_host: bool,
    },
    /// Gemma 4: the scaled token embedding `[D]` → the projection part of
    /// every layer's per-layer input `[n_layer · width]` (times its scale;
    /// the host adds the token table's rows and norms).
    PleProj,
    /// Split, Gemma 4: `[residual; e_l]` → `proj(act(gate · residual) ⊙
    /// e_l)` `[D]` (the host norms and adds it).
    PerLayer {
        /// Layer index.
        layer: usize,
    },
    /// Resident: layers `first..first + layers` whole, from the scaled
    /// residual `x` to the next one, with the ports of [`Kernel::inputs`]
    /// and [`Kernel::outputs`] (position tables, caches). When the last
    /// layer is a mixture of experts the program stops before its routed
    /// experts: the first output is that layer's residual after the mixer,
    /// and [`PortRole::MoeInput`] (and [`PortRole::SharedExpert`]) carry
    /// what the host finishes the layer with.
    Resident {
        /// First layer.
        first: usize,
        /// Layers inside.
        layers: usize,
    },
    /// Logits rows `first..first + rows` from the (normed, in the split
    /// variant; raw, in the fused one) residual `[D]`; in the resident
    /// variant the first slice of one program whose further outputs are
    /// the other slices ([`PortRole::Logits`]).
    LmHead {
        /// First vocabulary row.
        first: usize,
        /// Rows in this slice.
        rows: usize,
        /// Whether the final norm runs inside.
        norm_inside: bool,
    },
}

/// One lowered program and its weights.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// Name (`blk.0.qkv`, `entry`, `blk.3.layer`, `lm_head.1`).
    pub name: String,
    /// What it computes.
    pub kind: KernelKind,
    /// The MIL program (function `main`, input `x`, one output).
    pub program: Program,
    /// Its weight file, keyed by [`tensors::WEIGHT_PATH`].
    pub weights: Weights,
    /// Input channels C of `x: [1, C, 1, W]`.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// fp16 payload bytes in the weight file.
    pub weight_bytes: u64,
    /// Multiply-accumulates per activation column (conv weight elements).
    pub macs: u64,
    /// Inputs after `x` (resident variant; empty otherwise).
    pub inputs: Vec<Port>,
    /// Outputs after the first (resident variant; empty otherwise).
    pub outputs: Vec<Port>,
}

/// A named input or output of a kernel beyond `x` and its first output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// The MIL parameter or output name.
    pub name: String,
    /// Its fp16 shape.
    pub shape: Vec<usize>,
    /// What the host puts there or takes from there.
    pub role: PortRole,
}

/// What a [`Port`] carries (resident variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRole {
    /// `[1, n_rot/2, 1, W]`: cos (`sin` false) or sin of layer `layer`'s
    /// RoPE angles at each column's position (times its attention factor);
    /// layers with an equal RoPE share it.
    Rope {
        /// The first layer of the program with this RoPE.
        layer: usize,
        /// Sine rather than cosine.
        sin: bool,
    },
    /// `[1, 1, W, T]`: 0 where column j may see key t (causal, within
    /// layer `layer`'s window), [`resident::MASKED`] elsewhere; layers with
    /// an equal window share it.
    Mask {
        /// The first layer of the program with this window.
        layer: usize,
    },
    /// `[1, W, T]`: one-hot, 1 at (j, position of column j) for the
    /// chunk's columns.
    Write,
    /// `[1, 1, T]`: 0 at the positions the chunk writes, 1 elsewhere.
    Keep,
    /// `[1, D, 1, W]`, an output: layer `layer`'s FFN-normed residual,
    /// which the host's router and routed experts take. A program ends
    /// after a mixture of experts: its first output is then that layer's
    /// residual after the mixer, and the host finishes the layer.
    MoeInput {
        /// Layer index (the program's last).
        layer: usize,
    },
    /// `[1, D, 1, W]`, an output: layer `layer`'s shared expert on the
    /// FFN-normed residual, before its sigmoid gate (the host applies it).
    SharedExpert {
        /// Layer index (the program's last).
        layer: usize,
    },
    /// `[KVH, hd, T]`: layer `layer`'s K (`value` false) or V cache. An
    /// input, and an output aliased onto that input; in a program whose
    /// layer reads the K/V of layer `layer` in an earlier program (Gemma
    /// 4), an input only, bound to that program's cache buffer.
    Cache {
        /// Layer index.
        layer: usize,
        /// V rather than K.
        value: bool,
    },
    /// `[1, D, T]`: layer `layer`'s short-convolution inputs `u = B ⊙ X`,
    /// one column per position. An input, and an output aliased onto that
    /// input, like [`PortRole::Cache`].
    ConvCache {
        /// Layer index.
        layer: usize,
    },
    /// `[1, T, K - 1]`: one-hot, 1 at (p₀ − (K−1) + k, k) for the `K - 1`
    /// positions before the chunk's first (p₀) that are ≥ 0, zero
    /// elsewhere: it reads those positions' `u` out of a conv cache. Layers
    /// with an equal `K` share it.
    ConvPrev {
        /// The first layer of the program with this `K`.
        layer: usize,
    },
    /// `[1, P, 1, W]`: Gemma 4's per-layer input `e_l` of layer `layer`
    /// (the host's, from the `ple` program's projection and the token
    /// table).
    PerLayer {
        /// Layer index.
        layer: usize,
    },
    /// `[1, rows, 1, W]`: logits rows `first..first + rows`.
    Logits {
        /// First vocabulary row.
        first: usize,
        /// Rows.
        rows: usize,
    },
}

impl PortRole {
    /// Whether it is a cache: an input whose updated value is an output
    /// aliased onto it (K, V or a short convolution's `u`).
    pub fn is_cache(&self) -> bool {
        matches!(self, PortRole::Cache { .. } | PortRole::ConvCache { .. })
    }
}

/// The lowered decoder.
#[derive(Debug, Clone)]
pub struct Lowered {
    /// Options used.
    pub options: LowerOptions,
    /// Kernels in dispatch order for one chunk of up to W tokens: every
    /// kernel runs exactly once per chunk (and per decode token).
    pub kernels: Vec<Kernel>,
}

impl Lowered {
    /// ANE dispatches per decode token (= per prefill chunk of ≤ W tokens).
    pub fn dispatches_per_token(&self) -> usize {
        self.kernels.len()
    }

    /// Total fp16 weight bytes.
    pub fn weight_bytes(&self) -> u64 {
        self.kernels.iter().map(|k| k.weight_bytes).sum()
    }

    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

/// The mixer of a lowered layer. Either way the ANE runs its input
/// projection (`blk.i.qkv` / inside the previous fused program) and its
/// output side (`blk.i.attn_out` / the fused layer); the host runs what lies
/// between, with the CPU backend's ops.
#[derive(Debug, Clone, Copy)]
pub enum MixerView<'a> {
    /// In: `[q; k; v]`; host: q/k norm, RoPE, KV cache, attention; out:
    /// context `[q_dim]` → output projection.
    Attention(&'a Attention),
    /// In: `in_proj` → `[B; C; X]`; host: `u = B·X` into the layer's
    /// history and the carry of the previous `K-1` rows (see
    /// `anedvd_cpu::conv::ConvHistory::carry`); out: `[u; C; carry]` →
    /// depthwise causal conv over the chunk (zero left padding) + carry,
    /// `· C`, `out_proj`. (The resident variant runs all of it inside its
    /// program, `u` in a resident cache: [`resident`].)
    ShortConv(&'a ShortConv),
}

impl MixerView<'_> {
    /// Channels of the input projection's output: `[q; k; v]` (only `q`
    /// for a layer reading another's K/V), or a short conv's `[B; C; X]`.
    pub fn in_width(&self, n_embd: usize) -> usize {
        match self {
            MixerView::Attention(a) if a.kv_source.is_some() => a.q_dim(),
            MixerView::Attention(a) => a.q_dim() + 2 * a.kv_dim(),
            MixerView::ShortConv(_) => 3 * n_embd,
        }
    }

    /// Channels the host hands to the output side.
    pub fn ctx_width(&self, n_embd: usize) -> usize {
        match self {
            MixerView::Attention(a) => a.q_dim(),
            MixerView::ShortConv(_) => 3 * n_embd,
        }
    }
}

/// Most taps of a short convolution the lowering emits (a depthwise conv's
/// kernel width: ≤ 15 on the ANE, ≤ 13 on M1; ane-spec.md, conv row).
pub const MAX_CONV_TAPS: usize = 13;

/// The feed-forward part of a lowered layer.
#[derive(Debug, Clone, Copy)]
pub enum FfnView<'a> {
    /// A dense gated FFN, on the ANE.
    Dense(&'a DenseFfn),
    /// A mixture of experts (the earlier ANE engine's split): the shared
    /// expert, if any, runs on the ANE as a dense FFN of the normed
    /// residual; the router and the routed experts run on the host with
    /// the CPU backend's `MoeLayer`, which also applies the shared
    /// expert's sigmoid gate.
    Moe(&'a MoeFfn),
}

impl<'a> FfnView<'a> {
    /// The dense FFN the ANE runs: the layer's, or the shared expert.
    pub fn on_ane(&self) -> Option<&'a DenseFfn> {
        match self {
            FfnView::Dense(f) => Some(f),
            FfnView::Moe(m) => m.shared.as_ref().map(|s| &s.ffn),
        }
    }

    /// Whether the host finishes the FFN.
    pub fn on_host(&self) -> bool {
        matches!(self, FfnView::Moe(_))
    }
}

/// The parts of one layer the lowering handles: an attention or
/// short-convolution mixer and a dense gated FFN or a mixture of experts,
/// with pre or sandwich norms.
#[derive(Debug, Clone, Copy)]
pub struct LayerView<'a> {
    /// The mixer.
    pub mixer: MixerView<'a>,
    /// The feed-forward block.
    pub ffn: FfnView<'a>,
    /// Norm before attention.
    pub attn_norm: &'a str,
    /// Norm after attention (sandwich), if any.
    pub post_attn_norm: Option<&'a str>,
    /// Norm before the FFN.
    pub ffn_norm: &'a str,
    /// Norm after the FFN (sandwich), if any.
    pub post_ffn_norm: Option<&'a str>,
    /// Gemma 4's per-layer input, if any.
    pub per_layer: Option<&'a PerLayerInput>,
    /// Gemma 4's residual scale tensor, if any.
    pub layer_scale: Option<&'a str>,
}

/// Every layer of `p` as a [`LayerView`], or the first variant `backend`
/// cannot run, refused as [`anedvd_graph::Error::Unsupported`]. Every
/// variant is matched here with no catch-all arm, so a new one is a compile
/// error until the ANE path runs or refuses it.
pub fn layer_views<'a>(
    p: &'a DecoderProgram,
    backend: &str,
) -> std::result::Result<Vec<LayerView<'a>>, anedvd_graph::Error> {
    use anedvd_graph::Error as E;
    let mut views = Vec::with_capacity(p.layers.len());
    for (i, block) in p.layers.iter().enumerate() {
        let Block {
            norms,
            mixer,
            ffn,
            per_layer_input,
            layer_scale,
        } = block;
        let mixer = match mixer {
            Mixer::Attention(attn) => {
                let Attention {
                    n_head: _,
                    n_head_kv: _,
                    head_dim: _,
                    scale: _,
                    softcap: _,
                    window: _,
                    rope: _,
                    // a layer reading another's K/V projects q only (its
                    // `wk`/`wv` name the source's tensors); the host attends
                    // over the source's cache and norms values
                    kv_source: _,
                    wq: _,
                    wk: _,
                    wv: _,
                    wo: _,
                    bias:
                        AttentionBias {
                            q: _,
                            k: _,
                            v: _,
                            o: _,
                        },
                    q_norm: _,
                    k_norm: _,
                    v_norm: _,
                } = attn;
                MixerView::Attention(attn)
            }
            Mixer::ShortConv(conv) => {
                let ShortConv {
                    kernel,
                    in_proj: _,
                    conv: _,
                    out_proj: _,
                } = conv;
                if *kernel > MAX_CONV_TAPS {
                    let what = format!("short_conv of {kernel} taps (at most {MAX_CONV_TAPS})");
                    return Err(E::unsupported(backend, "mixer", &what, i));
                }
                MixerView::ShortConv(conv)
            }
        };
        let ffn = match ffn {
            FeedForward::Dense(f) => FfnView::Dense(f),
            // The fused variant finishes such a layer on the host, which
            // holds no per-layer input program.
            FeedForward::Moe(_) if per_layer_input.is_some() => {
                return Err(E::unsupported(
                    backend,
                    "feed-forward",
                    "moe with per-layer inputs",
                    i,
                ))
            }
            FeedForward::Moe(m) => FfnView::Moe(m),
        };
        let (attn_norm, post_attn_norm, ffn_norm, post_ffn_norm) = split_norms(norms);
        views.push(LayerView {
            mixer,
            ffn,
            attn_norm,
            post_attn_norm,
            ffn_norm,
            post_ffn_norm,
            per_layer: per_layer_input.as_ref(),
            layer_scale: layer_scale.as_deref(),
        });
    }
    Ok(views)
}

/// `(pre-mixer, post-mixer, pre-ffn, post-ffn)` norm names.
fn split_norms(norms: &NormPlacement) -> (&str, Option<&str>, &str, Option<&str>) {
    // no catch-all: a new placement is a compile error here
    match norms {
        NormPlacement::Pre { mixer, ffn } => (mixer, None, ffn, None),
        NormPlacement::Sandwich {
            mixer,
            post_mixer,
            ffn,
            post_ffn,
        } => (mixer, Some(post_mixer), ffn, Some(post_ffn)),
    }
}

/// Dispatches per decode token for `variant`, without building anything:
/// split `3·layers + slices` less one per mixture of experts without a
/// shared expert; fused `1 + layers + slices` plus one `entry` after each
/// mixture of experts but the last layer; resident one per layer group
/// ([`resident::groups`]: a group also ends after each mixture of experts)
/// plus the lm_head. Gemma 4 adds its `ple` program to each (and the
/// split variant a `blk.i.ple` per layer).
pub fn dispatch_count(variant: Variant, program: &DecoderProgram, options: &LowerOptions) -> usize {
    let slices = program.n_vocab.div_ceil(options.vocab_slice.max(1));
    let n = program.layers.len();
    let moe = |b: &Block| match &b.ffn {
        FeedForward::Moe(m) => Some(m.shared.is_some()),
        FeedForward::Dense(_) => None,
    };
    let ple = usize::from(program.per_layer_embd.is_some());
    match variant {
        Variant::Split => {
            let no_ffn_kernel = program.layers.iter().filter(|b| moe(b) == Some(false));
            let per_layer = program
                .layers
                .iter()
                .filter(|b| b.per_layer_input.is_some());
            ple + 3 * n - no_ffn_kernel.count() + per_layer.count() + slices
        }
        Variant::Fused => {
            let entries = program.layers[..n.saturating_sub(1)]
                .iter()
                .filter(|b| moe(b).is_some());
            ple + 1 + n + entries.count() + slices
        }
        Variant::Resident => ple + resident::groups(program, options).len() + 1,
    }
}

/// `options` with `fp16_blocks` measured from `keep_fp16` when it names
/// none yet (CPU runs of the model, [`sensitivity`]); as they are otherwise.
/// Lowering resolves it itself; resolve once before lowering several
/// variants of one model.
pub fn resolve_precision(program: &DecoderProgram, options: &LowerOptions) -> Result<LowerOptions> {
    if options.keep_fp16.is_none() || !options.fp16_blocks.is_empty() {
        return Ok(*options);
    }
    Ok(LowerOptions {
        fp16_blocks: sensitivity::kept_blocks(program, options.weights, options.keep_fp16)?,
        // resolved: an `auto` that keeps nothing is not measured again
        keep_fp16: sensitivity::KeepFp16::Count(0),
        ..*options
    })
}

/// Lowers `program` into kernels (see the module docs).
pub fn lower(program: &DecoderProgram, options: &LowerOptions) -> Result<Lowered> {
    let views = layer_views(program, "ane").map_err(Error::Unsupported)?;
    lower_views(program, &views, options)
}

/// [`lower`] of `program` whose layers the caller has already matched into
/// `views` (with [`layer_views`], naming its own backend in refusals).
pub fn lower_views(
    program: &DecoderProgram,
    views: &[LayerView<'_>],
    options: &LowerOptions,
) -> Result<Lowered> {
    if options.width == 0 || !options.width.is_multiple_of(32) {
        return Err(Error::Options(format!(
            "width {} must be a positive multiple of 32 (64-byte fp16 rows)",
            options.width
        )));
    }
    let s = options.residual_scale;
    if !(s >= 1.0 && s.log2().fract() == 0.0 && s <= 16384.0) {
        return Err(Error::Options(format!(
            "residual scale {s} must be a power of two in 1..=16384"
        )));
    }
    if options.vocab_slice == 0 || options.vocab_slice > 65536 {
        return Err(Error::Options(format!(
            "vocab slice {} must be in 1..=65536",
            options.vocab_slice
        )));
    }
    if options.variant == Variant::Resident {
        // before the (costly) sensitivity measurement
        resident::check_options(options)?;
    }
    let options = &resolve_precision(program, options)?;
    let mut kernels = Vec::new();
    if let Some(e) = &program.per_layer_embd {
        kernels.push(kernels::ple_proj(program, options, e)?);
    }
    match options.variant {
        Variant::Split => {
            for (i, l) in views.iter().enumerate() {
                kernels.push(kernels::qkv(program, options, (i, l), false)?);
                kernels.push(kernels::attn_out(program, options, (i, l))?);
                if l.ffn.on_ane().is_some() {
                    kernels.push(kernels::ffn(program, options, (i, l))?);
                }
                if let Some(pl) = l.per_layer {
                    kernels.push(kernels::per_layer(program, options, i, pl)?);
                }
            }
        }
        Variant::Fused => {
            let first = views
                .first()
                .ok_or_else(|| Error::Options("a program without layers".into()))?;
            kernels.push(kernels::qkv(program, options, (0, first), true)?);
            for (i, l) in views.iter().enumerate() {
                // After a mixture of experts the host holds the residual:
                // the next layer starts from its own entry program.
                let host = l.ffn.on_host();
                let next = views.get(i + 1);
                kernels.push(kernels::fused_layer(
                    program,
                    options,
                    (i, l),
                    next.filter(|_| !host),
                )?);
                if let (true, Some(n)) = (host, next) {
                    kernels.push(kernels::qkv(program, options, (i + 1, n), true)?);
                }
            }
        }
        Variant::Resident => {
            // its own lm_head: one program, every slice an output
            kernels.extend(resident::lower(program, views, options)?);
            return Ok(Lowered {
                options: *options,
                kernels,
            });
        }
    }
    let norm_inside = options.variant == Variant::Fused;
    let mut first = 0;
    let mut s = 0;
    while first < program.n_vocab {
        let rows = options.vocab_slice.min(program.n_vocab - first);
        kernels.push(kernels::lm_head(
            program,
            options,
            s,
            first,
            rows,
            norm_inside,
        )?);
        first += rows;
        s += 1;
    }
    Ok(Lowered {
        options: *options,
        kernels,
    })
}
