//! The RMS-norm weights of a model, decoded once with the program's weight
//! offset folded in (Gemma HF files store `w` for a `(1 + w)` norm) — shared
//! by this crate's decoder and the ANE backend's host side.

use crate::matmul::vector;
use anedvd_graph::{Attention, DecoderProgram, NormPlacement, Result};

/// The norm `name` of `len` values, offset folded in.
pub fn norm_weights(p: &DecoderProgram, name: &str, len: usize) -> Result<Vec<f32>> {
    let mut v = vector(p.weights.as_ref(), name, len)?;
    let offset = p.norm.weight_offset;
    if offset != 0.0 {
        v.iter_mut().for_each(|x| *x += offset);
    }
    Ok(v)
}

/// Every norm of one block.
pub struct LayerNorms {
    /// Before attention.
    pub attn: Vec<f32>,
    /// After attention (sandwich norms).
    pub post_attn: Option<Vec<f32>>,
    /// Before the feed-forward part.
    pub ffn: Vec<f32>,
    /// After the feed-forward part (sandwich norms).
    pub post_ffn: Option<Vec<f32>>,
    /// Per-head query norm.
    pub q: Option<Vec<f32>>,
    /// Per-head key norm.
    pub k: Option<Vec<f32>>,
}

impl LayerNorms {
    /// Decodes the norms of a block placed as `norms` around its mixer
    /// (`attn`'s q/k norms when it is an attention block).
    pub fn load(
        p: &DecoderProgram,
        norms: &NormPlacement,
        attn: Option<&Attention>,
    ) -> Result<Self> {
        let d = p.n_embd;
        let opt = |name: Option<&str>, len| name.map(|n| norm_weights(p, n, len)).transpose();
        // no catch-all: a new placement is a compile error here
        let (attn_norm, post_attn, ffn, post_ffn) = match norms {
            NormPlacement::Pre { mixer, ffn } => (mixer, None, ffn, None),
            NormPlacement::Sandwich {
                mixer,
                post_mixer,
                ffn,
                post_ffn,
            } => (
                mixer,
                Some(post_mixer.as_str()),
                ffn,
                Some(post_ffn.as_str()),
            ),
        };
        Ok(LayerNorms {
            attn: norm_weights(p, attn_norm, d)?,
            post_attn: opt(post_attn, d)?,
            ffn: norm_weights(p, ffn, d)?,
            post_ffn: opt(post_ffn, d)?,
            q: match attn {
                Some(a) => opt(a.q_norm.as_deref(), a.head_dim)?,
                None => None,
            },
            k: match attn {
                Some(a) => opt(a.k_norm.as_deref(), a.head_dim)?,
                None => None,
            },
        })
    }

    /// `(q, k)` norms as [`crate::attention::encode_positions`] takes them.
    pub fn qk(&self) -> (Option<&[f32]>, Option<&[f32]>) {
        (self.q.as_deref(), self.k.as_deref())
    }
}

/// Finishes Gemma 4's per-layer input embeddings in place: `e` holds each
/// token's projection of its embedding (`row_len = n_layer · width` values,
/// the projection scale already applied); each layer's `width`-wide slice is
/// RMS-normed with `proj_norm`, the token's table row (from `table_row`:
/// token, destination) added times `token_scale`, all times
/// `combine_scale`. Shared by this crate's decoder and the ANE backend's
/// host side.
pub fn finish_per_layer_inputs(
    e: &mut [f32],
    row_len: usize,
    tokens: impl Iterator<Item = u32>,
    (proj_norm, eps): (&[f32], f32),
    (token_scale, combine_scale): (f32, f32),
    mut table_row: impl FnMut(u32, &mut [f32]) -> Result<()>,
    row: &mut Vec<f32>,
) -> Result<()> {
    // `proj_norm` is `width` long: the norm runs over each layer's slice.
    crate::kernels::rms_norm_inplace(e, proj_norm, eps);
    row.resize(row_len, 0.0);
    for (out, tok) in e.chunks_exact_mut(row_len).zip(tokens) {
        table_row(tok, row)?;
        for (o, r) in out.iter_mut().zip(row.iter()) {
            *o = (*o + r * token_scale) * combine_scale;
        }
    }
    Ok(())
}
