//! The resolved decoder description: hyperparameters per layer and tensor
//! names bound to roles.

use crate::{Error, Result};
use anedvd_base::WeightSource;
use std::sync::Arc;

/// What a tensor does in the decoder. Names follow `docs/glossary.md` (the
/// GGUF tensor-name stems).
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
}

impl Role {
    /// Every role, globals first.
    pub const ALL: [Role; 20] = [
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
        }
    }

    /// True for the roles that exist once per model rather than per layer.
    pub fn is_global(self) -> bool {
        matches!(self, Role::TokenEmbd | Role::OutputNorm | Role::Output)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Feed-forward activation; the feed-forward block is always gated:
/// `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `x * sigmoid(x)`.
    Silu,
    /// GELU, tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
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

/// One decoder layer.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (GQA when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Dimension of each head (for q, k and v).
    pub head_dim: usize,
    /// Feed-forward hidden width.
    pub n_ff: usize,
    /// Multiplier on q·k before the soft-cap and softmax.
    pub attn_scale: f32,
    /// `cap * tanh(score / cap)` applied to attention scores, if set.
    pub attn_softcap: Option<f32>,
    /// Sliding window: a query at position `p` sees keys at `j` with
    /// `p - j < window`. `None` is full causal attention.
    pub sliding_window: Option<usize>,
    /// RoPE of this layer.
    pub rope: Rope,
    /// Tensor names bound to per-layer roles.
    pub tensors: Vec<(Role, String)>,
}

impl LayerSpec {
    /// The tensor bound to `role`, if any.
    pub fn tensor(&self, role: Role) -> Option<&str> {
        self.tensors
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, n)| n.as_str())
    }
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
    /// Feed-forward activation.
    pub activation: Activation,
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
    pub layers: Vec<LayerSpec>,
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
            .field("activation", &self.activation)
            .field("embd_scale", &self.embd_scale)
            .field("final_softcap", &self.final_softcap)
            .field("token_embd", &self.token_embd)
            .field("output_norm", &self.output_norm)
            .field("output", &self.output)
            .field("layers", &self.layers)
            .field("weights", &self.weights.format_name())
            .finish()
    }
}

impl DecoderProgram {
    /// The shape (ggml `ne` order) a tensor in `role` must have in `layer`
    /// (`layer` is ignored for global roles).
    pub fn expected_shape(&self, role: Role, layer: &LayerSpec) -> Vec<u64> {
        let d = self.n_embd as u64;
        let q = (layer.n_head * layer.head_dim) as u64;
        let kv = (layer.n_head_kv * layer.head_dim) as u64;
        let ff = layer.n_ff as u64;
        use Role::*;
        match role {
            TokenEmbd | Output => vec![d, self.n_vocab as u64],
            OutputNorm | AttnNorm | PostAttnNorm | FfnNorm | PostFfnNorm | AttnOutputBias => {
                vec![d]
            }
            AttnQ => vec![d, q],
            AttnK | AttnV => vec![d, kv],
            AttnOutput => vec![q, d],
            AttnQBias => vec![q],
            AttnKBias | AttnVBias => vec![kv],
            AttnQNorm | AttnKNorm => vec![layer.head_dim as u64],
            FfnGate | FfnUp => vec![d, ff],
            FfnDown => vec![ff, d],
        }
    }

    /// Checks hyperparameters for consistency and every bound tensor for
    /// presence and shape. Required per layer: attention norm, q/k/v/output
    /// projections, ffn norm, gate/up/down.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidProgram(m));
        if self.n_embd == 0 || self.n_vocab == 0 || self.layers.is_empty() {
            return bad(format!(
                "n_embd {}, n_vocab {}, n_layer {} must all be positive",
                self.n_embd,
                self.n_vocab,
                self.layers.len()
            ));
        }
        let check = |role: Role, name: &str, layer: &LayerSpec| -> Result<()> {
            let t = self
                .weights
                .tensor(name)
                .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
            let expected = self.expected_shape(role, layer);
            if t.info.shape != expected {
                return Err(Error::Shape {
                    tensor: name.to_string(),
                    expected,
                    found: t.info.shape.clone(),
                });
            }
            Ok(())
        };
        for (i, l) in self.layers.iter().enumerate() {
            if l.n_head == 0 || l.n_head_kv == 0 || l.head_dim == 0 || l.n_ff == 0 {
                return bad(format!(
                    "layer {i}: head counts, head_dim and n_ff must be positive"
                ));
            }
            if l.n_head % l.n_head_kv != 0 {
                return bad(format!(
                    "layer {i}: n_head {} is not a multiple of n_head_kv {}",
                    l.n_head, l.n_head_kv
                ));
            }
            if l.rope.n_rot > l.head_dim || l.rope.n_rot % 2 != 0 {
                return bad(format!(
                    "layer {i}: n_rot {} must be even and at most head_dim {}",
                    l.rope.n_rot, l.head_dim
                ));
            }
            if l.rope.inv_freq.len() != l.rope.n_rot / 2 {
                return bad(format!(
                    "layer {i}: {} rope frequencies for n_rot {}",
                    l.rope.inv_freq.len(),
                    l.rope.n_rot
                ));
            }
            if l.sliding_window == Some(0) {
                return bad(format!("layer {i}: sliding window of 0"));
            }
            use Role::*;
            for role in [
                AttnNorm, AttnQ, AttnK, AttnV, AttnOutput, FfnNorm, FfnGate, FfnUp, FfnDown,
            ] {
                if l.tensor(role).is_none() {
                    return bad(format!("layer {i}: no tensor bound to {role}"));
                }
            }
            for (role, name) in &l.tensors {
                if role.is_global() {
                    return bad(format!("layer {i}: global role {role} bound in a layer"));
                }
                check(*role, name, l)?;
            }
        }
        let first = &self.layers[0];
        check(Role::TokenEmbd, &self.token_embd, first)?;
        check(Role::OutputNorm, &self.output_norm, first)?;
        if let Some(out) = &self.output {
            check(Role::Output, out, first)?;
        }
        Ok(())
    }
}
