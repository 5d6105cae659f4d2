//! The resolved decoder description: global hyperparameters, the layer
//! blocks, and the weight source they name tensors in.

use crate::block::{
    Attention, AttentionBias, Block, DenseFfn, ExpertTensors, FeedForward, Mixer, MoeFfn,
    NormPlacement, PerLayerInput, SharedExpert, ShortConv,
};
use crate::{Error, Result};
use anedvd_base::WeightSource;
use std::sync::Arc;

/// What a tensor does in the decoder, as family tables name it. Names follow
/// `docs/glossary.md` (the GGUF tensor-name stems). Backends never see roles:
/// the `model` crate resolves them into the typed fields of [`Block`].
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    TokenEmbd,
    OutputNorm,
    Output,
    AttnNorm,
    AttnQ,
    AttnK,
    AttnV,
    AttnOutput,
    AttnQBias,
    AttnKBias,
    AttnVBias,
    AttnOutputBias,
    AttnQNorm,
    AttnKNorm,
    PostAttnNorm,
    FfnNorm,
    FfnGate,
    FfnUp,
    FfnDown,
    PostFfnNorm,
    /// Fused `[q; k; v]` projection rows (Phi-3), split by the loader.
    AttnQkv,
    /// Fused `[gate; up]` rows (Phi-3), split by the loader.
    FfnGateUp,
    ShortConvInProj,
    ShortConvConv,
    ShortConvOutProj,
    /// MoE router.
    FfnGateInp,
    /// Per-expert (HF, `{e}` in the name) or stacked (GGUF) expert gates.
    FfnGateExps,
    FfnUpExps,
    FfnDownExps,
    FfnGateShexp,
    FfnUpShexp,
    FfnDownShexp,
    /// The shared expert's scalar sigmoid gate.
    FfnGateInpShexp,
    /// Gemma 4: the per-layer token table (global).
    PerLayerTokenEmbd,
    /// Gemma 4: the projection of the embedding to every layer's slice (global).
    PerLayerModelProj,
    /// Gemma 4: the norm of that projection's slices (global).
    PerLayerProjNorm,
    /// Gemma 4: a layer's gate of its per-layer input.
    PerLayerInpGate,
    /// Gemma 4: a layer's projection of its gated per-layer input.
    PerLayerProj,
    /// Gemma 4: the norm after that projection.
    PerLayerPostNorm,
    /// Gemma 4: the `[1]` scale of the residual after the layer.
    LayerOutputScale,
    /// LFM2-MoE: the router's selection bias `[n_expert]`.
    FfnExpProbsB,
}

impl Role {
    /// Every role, globals first.
    pub const ALL: [Role; 41] = [
        Role::TokenEmbd,
        Role::OutputNorm,
        Role::Output,
        Role::AttnNorm,
        Role::AttnQ,
        Role::AttnK,
        Role::AttnV,
        Role::AttnOutput,
        Role::AttnQBias,
        Role::AttnKBias,
        Role::AttnVBias,
        Role::AttnOutputBias,
        Role::AttnQNorm,
        Role::AttnKNorm,
        Role::PostAttnNorm,
        Role::FfnNorm,
        Role::FfnGate,
        Role::FfnUp,
        Role::FfnDown,
        Role::PostFfnNorm,
        Role::AttnQkv,
        Role::FfnGateUp,
        Role::ShortConvInProj,
        Role::ShortConvConv,
        Role::ShortConvOutProj,
        Role::FfnGateInp,
        Role::FfnGateExps,
        Role::FfnUpExps,
        Role::FfnDownExps,
        Role::FfnGateShexp,
        Role::FfnUpShexp,
        Role::FfnDownShexp,
        Role::FfnGateInpShexp,
        Role::PerLayerTokenEmbd,
        Role::PerLayerModelProj,
        Role::PerLayerProjNorm,
        Role::PerLayerInpGate,
        Role::PerLayerProj,
        Role::PerLayerPostNorm,
        Role::LayerOutputScale,
        Role::FfnExpProbsB,
    ];

    /// The glossary name (GGUF stem, with `_bias` for biases).
    pub fn name(self) -> &'static str {
        use Role::*;
        match self {
            TokenEmbd => "token_embd",
            OutputNorm => "output_norm",
            Output => "output",
            AttnNorm => "attn_norm",
            AttnQ => "attn_q",
            AttnK => "attn_k",
            AttnV => "attn_v",
            AttnOutput => "attn_output",
            AttnQBias => "attn_q_bias",
            AttnKBias => "attn_k_bias",
            AttnVBias => "attn_v_bias",
            AttnOutputBias => "attn_output_bias",
            AttnQNorm => "attn_q_norm",
            AttnKNorm => "attn_k_norm",
            PostAttnNorm => "post_attention_norm",
            FfnNorm => "ffn_norm",
            FfnGate => "ffn_gate",
            FfnUp => "ffn_up",
            FfnDown => "ffn_down",
            PostFfnNorm => "post_ffw_norm",
            AttnQkv => "attn_qkv",
            FfnGateUp => "ffn_gate_up",
            ShortConvInProj => "shortconv.in_proj",
            ShortConvConv => "shortconv.conv",
            ShortConvOutProj => "shortconv.out_proj",
            FfnGateInp => "ffn_gate_inp",
            FfnGateExps => "ffn_gate_exps",
            FfnUpExps => "ffn_up_exps",
            FfnDownExps => "ffn_down_exps",
            FfnGateShexp => "ffn_gate_shexp",
            FfnUpShexp => "ffn_up_shexp",
            FfnDownShexp => "ffn_down_shexp",
            FfnGateInpShexp => "ffn_gate_inp_shexp",
            PerLayerTokenEmbd => "per_layer_token_embd",
            PerLayerModelProj => "per_layer_model_proj",
            PerLayerProjNorm => "per_layer_proj_norm",
            PerLayerInpGate => "inp_gate",
            PerLayerProj => "proj",
            PerLayerPostNorm => "post_norm",
            LayerOutputScale => "layer_output_scale",
            FfnExpProbsB => "exp_probs_b",
        }
    }

    /// True for the roles that exist once per model rather than per layer.
    pub fn is_global(self) -> bool {
        matches!(
            self,
            Role::TokenEmbd
                | Role::OutputNorm
                | Role::Output
                | Role::PerLayerTokenEmbd
                | Role::PerLayerModelProj
                | Role::PerLayerProjNorm
        )
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which elements RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePairing {
    /// Adjacent pairs `(2i, 2i+1)`: llama-family GGUF files (the converter
    /// permutes q/k rows into this order).
    Norm,
    /// Half split `(i, i + n_rot/2)`: HF checkpoints, and Qwen/Gemma GGUFs.
    Neox,
}

impl RopePairing {
    /// `"norm"` or `"neox"`.
    pub fn name(self) -> &'static str {
        match self {
            RopePairing::Norm => "norm",
            RopePairing::Neox => "neox",
        }
    }
}

/// Rotary position embedding of one layer, fully resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    /// Element pairing.
    pub pairing: RopePairing,
    /// Rotated dimensions per head (`<= head_dim`, even); the rest pass through.
    pub n_rot: usize,
    /// Angular frequency of each pair (`n_rot / 2` entries): the angle at
    /// position `p` is `p * inv_freq[i]`. Scaling (linear, llama3, frequency
    /// factors) is already folded in.
    pub inv_freq: Vec<f64>,
    /// Multiplier on cos/sin (1.0 except for YaRN-style scaling).
    pub attn_factor: f32,
}

/// RMS norm parameters shared by every norm of the model:
/// `y = x / sqrt(mean(x^2) + eps) * (w + weight_offset)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormSpec {
    /// Epsilon inside the square root.
    pub eps: f32,
    /// Added to every stored norm weight (1.0 for Gemma HF files, which store
    /// `w` for a `(1 + w)` norm; 0.0 otherwise, including Gemma GGUFs, whose
    /// converter already stores `1 + w`).
    pub weight_offset: f32,
}

/// Gemma 4's per-layer input embeddings, computed once per token for every
/// layer: `e_l = (norm(slice_l(model_proj · x0) · proj_scale) + slice_l(
/// token_table[id]) · token_scale) · combine_scale`, where `x0` is the
/// scaled token embedding and `slice_l` takes columns `l·width ..
/// (l+1)·width`. Layer `l`'s [`PerLayerInput`] consumes `e_l`.
#[derive(Debug, Clone, PartialEq)]
pub struct PerLayerEmbedding {
    /// Width of one layer's slice.
    pub width: usize,
    /// `[n_layer · width, rows]` with `rows >= n_vocab`.
    pub token_table: String,
    /// Multiplier on the table rows (`sqrt(width)`).
    pub token_scale: f32,
    /// `[n_embd, n_layer · width]`.
    pub model_proj: String,
    /// Multiplier on the projection before its norm (`1/sqrt(n_embd)`).
    pub model_proj_scale: f32,
    /// RMS norm weight `[width]`, shared by every slice.
    pub proj_norm: String,
    /// Multiplier on the sum (`1/sqrt(2)`).
    pub combine_scale: f32,
}

/// A decoder-only transformer, resolved and bound to a weight source.
#[derive(Clone)]
pub struct DecoderProgram {
    /// Family name, for messages only (backends must not branch on it).
    pub family: String,
    /// Residual stream width.
    pub n_embd: usize,
    /// Vocabulary size (rows of the embedding and output matrices).
    pub n_vocab: usize,
    /// Context length the model was trained with.
    pub n_ctx_train: usize,
    /// Norm parameters.
    pub norm: NormSpec,
    /// Multiplier applied to token embeddings (`sqrt(n_embd)` for Gemma).
    pub embd_scale: f32,
    /// `cap * tanh(logit / cap)` on the final logits, if set.
    pub final_softcap: Option<f32>,
    /// Token embedding tensor.
    pub token_embd: String,
    /// Final norm tensor.
    pub output_norm: String,
    /// Output projection; `None` means tied to `token_embd`.
    pub output: Option<String>,
    /// The layers, in order.
    pub layers: Vec<Block>,
    /// Per-layer input embeddings (Gemma 4), when the layers take them.
    pub per_layer_embd: Option<PerLayerEmbedding>,
    /// Where tensor bytes come from.
    pub weights: Arc<dyn WeightSource>,
}

impl std::fmt::Debug for DecoderProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecoderProgram")
            .field("family", &self.family)
            .field("n_embd", &self.n_embd)
            .field("n_vocab", &self.n_vocab)
            .field("n_ctx_train", &self.n_ctx_train)
            .field("norm", &self.norm)
            .field("embd_scale", &self.embd_scale)
            .field("final_softcap", &self.final_softcap)
            .field("token_embd", &self.token_embd)
            .field("output_norm", &self.output_norm)
            .field("output", &self.output)
            .field("layers", &self.layers)
            .field("per_layer_embd", &self.per_layer_embd)
            .field("weights", &self.weights.format_name())
            .finish()
    }
}

/// Shape checks of one program against its weight source.
struct Checker<'a> {
    p: &'a DecoderProgram,
}

impl Checker<'_> {
    /// `name` exists with exactly `expected` (ggml `ne` order).
    fn shape(&self, name: &str, expected: &[u64]) -> Result<()> {
        let t = self
            .p
            .weights
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        if t.info.shape != expected {
            return Err(Error::Shape {
                tensor: name.to_string(),
                expected: expected.to_vec(),
                found: t.info.shape.clone(),
            });
        }
        Ok(())
    }

    /// `name` has shape `expected` or `alternative` (errors name `expected`).
    fn shape_or(&self, name: &str, expected: &[u64], alternative: &[u64]) -> Result<()> {
        self.shape(name, expected)
            .or_else(|e| self.shape(name, alternative).map_err(|_| e))
    }

    fn opt(&self, name: &Option<String>, expected: &[u64]) -> Result<()> {
        name.as_deref().map_or(Ok(()), |n| self.shape(n, expected))
    }

    fn dense(&self, i: usize, f: &DenseFfn) -> Result<()> {
        let DenseFfn {
            n_ff,
            activation: _,
            gate,
            up,
            down,
        } = f;
        let (d, ff) = (self.p.n_embd as u64, *n_ff as u64);
        if *n_ff == 0 {
            return Err(invalid(i, "n_ff must be positive"));
        }
        self.shape(gate, &[d, ff])?;
        self.shape(up, &[d, ff])?;
        self.shape(down, &[ff, d])
    }

    fn attention(&self, i: usize, a: &Attention) -> Result<()> {
        let Attention {
            n_head,
            n_head_kv,
            head_dim,
            scale: _,
            softcap: _,
            window,
            rope,
            kv_source,
            wq,
            wk,
            wv,
            wo,
            bias: AttentionBias { q, k, v, o },
            q_norm,
            k_norm,
            v_norm: _,
        } = a;
        if *n_head == 0 || *n_head_kv == 0 || *head_dim == 0 {
            return Err(invalid(i, "head counts and head_dim must be positive"));
        }
        if n_head % n_head_kv != 0 {
            return Err(invalid(
                i,
                &format!("n_head {n_head} is not a multiple of n_head_kv {n_head_kv}"),
            ));
        }
        if let Some(r) = rope {
            if r.n_rot > *head_dim || r.n_rot % 2 != 0 {
                return Err(invalid(
                    i,
                    &format!(
                        "n_rot {} must be even and at most head_dim {head_dim}",
                        r.n_rot
                    ),
                ));
            }
            if r.inv_freq.len() != r.n_rot / 2 {
                return Err(invalid(
                    i,
                    &format!(
                        "{} rope frequencies for n_rot {}",
                        r.inv_freq.len(),
                        r.n_rot
                    ),
                ));
            }
        }
        if *window == Some(0) {
            return Err(invalid(i, "sliding window of 0"));
        }
        if let Some(src) = kv_source {
            let source = (*src < i)
                .then(|| self.p.layers[*src].attention())
                .flatten();
            let Some(source) = source else {
                return Err(invalid(
                    i,
                    &format!("takes K/V from layer {src}, which is not an earlier attention layer"),
                ));
            };
            if source.kv_source.is_some() {
                return Err(invalid(
                    i,
                    &format!("takes K/V from layer {src}, which keeps no cache of its own"),
                ));
            }
            if (source.n_head_kv, source.head_dim) != (*n_head_kv, *head_dim) {
                return Err(invalid(
                    i,
                    &format!(
                        "{n_head_kv} K/V heads of {head_dim} read from layer {src}, which caches {} of {}",
                        source.n_head_kv, source.head_dim
                    ),
                ));
            }
        }
        let d = self.p.n_embd as u64;
        let (qd, kvd) = (a.q_dim() as u64, a.kv_dim() as u64);
        self.shape(wq, &[d, qd])?;
        self.shape(wk, &[d, kvd])?;
        self.shape(wv, &[d, kvd])?;
        self.shape(wo, &[qd, d])?;
        self.opt(q, &[qd])?;
        self.opt(k, &[kvd])?;
        self.opt(v, &[kvd])?;
        self.opt(o, &[d])?;
        self.opt(q_norm, &[*head_dim as u64])?;
        self.opt(k_norm, &[*head_dim as u64])
    }

    fn short_conv(&self, i: usize, c: &ShortConv) -> Result<()> {
        let ShortConv {
            kernel,
            in_proj,
            conv,
            out_proj,
        } = c;
        if *kernel == 0 {
            return Err(invalid(i, "short conv of 0 taps"));
        }
        let d = self.p.n_embd as u64;
        self.shape(in_proj, &[d, 3 * d])?;
        // GGUF squeezes HF's Conv1d weight `[d, 1, k]` (ggml order `[k, 1, d]`).
        let k = *kernel as u64;
        self.shape_or(conv, &[k, d], &[k, 1, d])?;
        self.shape(out_proj, &[d, d])
    }

    fn moe(&self, i: usize, m: &MoeFfn) -> Result<()> {
        let MoeFfn {
            n_expert,
            n_expert_used,
            n_ff_expert,
            activation: _,
            router,
            gating: _,
            selection_bias,
            normalize_top_k: _,
            weights_scale: _,
            experts,
            shared,
        } = m;
        if *n_expert == 0 || *n_expert_used == 0 || n_expert_used > n_expert {
            return Err(invalid(
                i,
                &format!("{n_expert_used} of {n_expert} experts used"),
            ));
        }
        let (d, ff, ne) = (self.p.n_embd as u64, *n_ff_expert as u64, *n_expert as u64);
        self.shape(router, &[d, ne])?;
        self.opt(selection_bias, &[ne])?;
        match experts {
            ExpertTensors::Stacked { gate, up, down } => {
                self.shape(gate, &[d, ff, ne])?;
                self.shape(up, &[d, ff, ne])?;
                self.shape(down, &[ff, d, ne])?;
            }
            ExpertTensors::PerExpert { gate, up, down } => {
                for names in [gate, up, down] {
                    if names.len() != *n_expert {
                        return Err(invalid(
                            i,
                            &format!("{} expert tensors for {n_expert} experts", names.len()),
                        ));
                    }
                }
                for ((g, u), dn) in gate.iter().zip(up).zip(down) {
                    self.shape(g, &[d, ff])?;
                    self.shape(u, &[d, ff])?;
                    self.shape(dn, &[ff, d])?;
                }
            }
        }
        if let Some(SharedExpert { ffn, gate_inp }) = shared {
            self.dense(i, ffn)?;
            // `[d]` in GGUF, HF's `Linear(d, 1)` weight `[d, 1]`.
            if let Some(g) = gate_inp {
                self.shape_or(g, &[d], &[d, 1])?;
            }
        }
        Ok(())
    }

    fn block(&self, i: usize, b: &Block) -> Result<()> {
        let Block {
            norms,
            mixer,
            ffn,
            per_layer_input,
            layer_scale,
        } = b;
        let d = self.p.n_embd as u64;
        match norms {
            NormPlacement::Pre { mixer, ffn } => {
                self.shape(mixer, &[d])?;
                self.shape(ffn, &[d])?;
            }
            NormPlacement::Sandwich {
                mixer,
                post_mixer,
                ffn,
                post_ffn,
            } => {
                for n in [mixer, post_mixer, ffn, post_ffn] {
                    self.shape(n, &[d])?;
                }
            }
        }
        match mixer {
            Mixer::Attention(a) => self.attention(i, a)?,
            Mixer::ShortConv(c) => self.short_conv(i, c)?,
        }
        match ffn {
            FeedForward::Dense(f) => self.dense(i, f)?,
            FeedForward::Moe(m) => self.moe(i, m)?,
        }
        if let Some(PerLayerInput {
            width,
            activation: _,
            gate,
            proj,
            norm,
        }) = per_layer_input
        {
            let embedded = self.p.per_layer_embd.as_ref().map(|e| e.width);
            if embedded != Some(*width) {
                return Err(invalid(
                    i,
                    &format!(
                        "per-layer input of width {width}, but the program's per-layer embedding is {embedded:?} wide"
                    ),
                ));
            }
            let w = *width as u64;
            self.shape(gate, &[d, w])?;
            self.shape(proj, &[w, d])?;
            self.shape(norm, &[d])?;
        }
        self.opt(layer_scale, &[1])
    }

    fn per_layer_embd(&self, e: &PerLayerEmbedding) -> Result<()> {
        let PerLayerEmbedding {
            width,
            token_table,
            token_scale: _,
            model_proj,
            model_proj_scale: _,
            proj_norm,
            combine_scale: _,
        } = e;
        if *width == 0 {
            return Err(Error::InvalidProgram(
                "per-layer embedding of width 0".into(),
            ));
        }
        if let Some(i) = self
            .p
            .layers
            .iter()
            .position(|b| b.per_layer_input.is_none())
        {
            return Err(invalid(
                i,
                "has no per-layer input, but the program computes per-layer embeddings",
            ));
        }
        let (d, lw) = (self.p.n_embd as u64, (self.p.layers.len() * width) as u64);
        let t = self
            .p
            .weights
            .tensor(token_table)
            .ok_or_else(|| Error::MissingTensor(token_table.clone()))?;
        match t.info.shape.as_slice() {
            [w, rows] if *w == lw && *rows >= self.p.n_vocab as u64 => {}
            _ => {
                return Err(Error::Shape {
                    tensor: token_table.clone(),
                    expected: vec![lw, self.p.n_vocab as u64],
                    found: t.info.shape.clone(),
                })
            }
        }
        self.shape(model_proj, &[d, lw])?;
        self.shape(proj_norm, &[*width as u64])
    }
}

fn invalid(layer: usize, what: &str) -> Error {
    Error::InvalidProgram(format!("layer {layer}: {what}"))
}

impl DecoderProgram {
    /// Checks hyperparameters for consistency and every named tensor for
    /// presence and shape.
    pub fn validate(&self) -> Result<()> {
        if self.n_embd == 0 || self.n_vocab == 0 || self.layers.is_empty() {
            return Err(Error::InvalidProgram(format!(
                "n_embd {}, n_vocab {}, n_layer {} must all be positive",
                self.n_embd,
                self.n_vocab,
                self.layers.len()
            )));
        }
        let c = Checker { p: self };
        for (i, b) in self.layers.iter().enumerate() {
            c.block(i, b)?;
        }
        if let Some(e) = &self.per_layer_embd {
            c.per_layer_embd(e)?;
        }
        let (d, v) = (self.n_embd as u64, self.n_vocab as u64);
        c.shape(&self.token_embd, &[d, v])?;
        c.shape(&self.output_norm, &[d])?;
        c.opt(&self.output, &[d, v])
    }
}
