//! Names of the intermediates a backend exposes for dumping.
//!
//! Per-layer values are named `blk.{i}.{name}` with `name` one of the
//! constants below; the two final values have fixed names. Shapes are
//! `[n_tokens, width]`, row-major.

/// Input of layer `i` after the attention pre-norm.
pub const ATTN_NORM: &str = "attn_norm";
/// Query projection output (bias included), before q-norm and RoPE.
pub const Q: &str = "q";
/// Key projection output (bias included), before k-norm and RoPE.
pub const K: &str = "k";
/// Value projection output (bias included).
pub const V: &str = "v";
/// Queries after q-norm (if any) and RoPE.
pub const Q_ROPE: &str = "q_rope";
/// Keys after k-norm (if any) and RoPE.
pub const K_ROPE: &str = "k_rope";
/// Attention context (softmax(QK^T)V), before the output projection.
pub const KQV_OUT: &str = "kqv_out";
/// Short convolution: `in_proj` output `[B; C; X]`.
pub const CONV_IN: &str = "conv_in";
/// Short convolution: `C · conv(B · X)`, before the output projection.
pub const CONV_OUT: &str = "conv_out";
/// Attention (or short-convolution) output projection, after the post-attention norm if the model has one.
pub const ATTN_OUT: &str = "attn_out";
/// Residual stream after the attention block (`ffn_inp` in llama.cpp).
pub const FFN_INP: &str = "ffn_inp";
/// Input of the feed-forward block after its pre-norm.
pub const FFN_NORM: &str = "ffn_norm";
/// `act(gate) * up`, the input of the down projection.
pub const FFN_ACT: &str = "ffn_act";
/// Feed-forward output, after the post-ffn norm if the model has one.
pub const FFN_OUT: &str = "ffn_out";
/// Layer output (residual stream after the layer).
pub const OUT: &str = "out";
/// Output of the final norm.
pub const RESULT_NORM: &str = "result_norm";
/// Logits.
pub const RESULT_OUTPUT: &str = "result_output";

/// `blk.{layer}.{name}`.
pub fn layer_name(layer: usize, name: &str) -> String {
    format!("blk.{layer}.{name}")
}
