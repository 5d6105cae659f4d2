//! The compiled model: matrix handles into the source, and the small vectors
//! (norm weights with their offset folded in, biases, conv taps) decoded once.

use crate::conv::{tap_major, ConvLayer};
use crate::kernels::gated;
use crate::matmul::{matmul_group, vector, Acts, Matrix};
use crate::moe::MoeLayer;
use crate::norms::{norm_weights, LayerNorms};
use crate::packing::Packing;
use crate::qkernels::Kernels;
use anedvd_base::WeightSource;
use anedvd_graph::{
    Activation, Attention, AttentionBias, Block, DecoderProgram, DenseFfn, FeedForward, Mixer,
    PerLayerEmbedding, PerLayerInput, Result, ShortConv,
};
use std::sync::Arc;

/// One compiled attention mixer.
pub struct AttnLayer {
    /// The attention block as described (head counts, scale, window, RoPE,
    /// the layer whose cache it reads when `kv_source` is set).
    pub attn: Attention,
    pub bq: Option<Vec<f32>>,
    pub bo: Option<Vec<f32>>,
    pub wq: Matrix,
    pub wo: Matrix,
    /// The K/V projections; `None` for a layer reading another's cache.
    pub kv: Option<KvProjection>,
}

/// The key and value projections of a layer that caches its own K/V.
pub struct KvProjection {
    pub wk: Matrix,
    pub wv: Matrix,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// Ones of `head_dim` when values get a weightless RMS norm (Gemma 4),
    /// so the one norm kernel serves it.
    pub v_norm: Option<Vec<f32>>,
}

/// Gemma 4's per-layer input branch of one compiled layer.
pub struct PerLayerBranch {
    pub width: usize,
    pub activation: Activation,
    pub gate: Matrix,
    pub proj: Matrix,
    pub norm: Vec<f32>,
}

/// Gemma 4's per-layer embeddings of the compiled model.
pub struct PerLayerTables {
    pub width: usize,
    pub token_table: Matrix,
    pub token_scale: f32,
    pub model_proj: Matrix,
    pub model_proj_scale: f32,
    pub proj_norm: Vec<f32>,
    pub combine_scale: f32,
}

/// What mixes positions in one compiled layer.
// One per layer, built once: unboxed variants keep the forward pass's
// matches plain (as in `anedvd_graph::Mixer`).
#[allow(clippy::large_enum_variant)]
pub enum LayerMixer {
    Attention(AttnLayer),
    ShortConv(ConvLayer),
}

/// One compiled dense gated FFN (a layer's, or one expert's).
pub struct DenseLayer {
    pub n_ff: usize,
    pub activation: Activation,
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
}

/// Scratch of [`DenseLayer::run`], reused across layers and passes.
#[derive(Default)]
pub struct FfnScratch {
    /// `act(gate(x)) · up(x)` after a run.
    pub g: Vec<f32>,
    pub u: Vec<f32>,
    pub tmp: Vec<f32>,
    pub tmp2: Vec<f32>,
}

/// The matrix `name` for kernels `k`, packed once when `pack` includes its
/// type (and the type has a packed layout on `k`).
pub fn load_matrix(
    src: &dyn WeightSource,
    name: &str,
    k: Kernels,
    pack: Packing,
) -> Result<Matrix> {
    pack_matrix(src, Matrix::new(src, name, k)?, pack)
}

/// `m`, packed when `pack` includes its type.
pub fn pack_matrix(src: &dyn WeightSource, m: Matrix, pack: Packing) -> Result<Matrix> {
    if pack.includes(m.dtype) {
        m.packed(src)
    } else {
        Ok(m)
    }
}

impl DenseLayer {
    /// Compiles `f` (see [`load_matrix`] for `pack`).
    pub fn compile(
        src: &dyn WeightSource,
        f: &DenseFfn,
        k: Kernels,
        pack: Packing,
    ) -> Result<Self> {
        let DenseFfn {
            n_ff,
            activation,
            gate,
            up,
            down,
        } = f;
        Ok(DenseLayer {
            n_ff: *n_ff,
            activation: *activation,
            gate: load_matrix(src, gate, k, pack)?,
            up: load_matrix(src, up, k, pack)?,
            down: load_matrix(src, down, k, pack)?,
        })
    }

    /// `out = down(act(gate(x)) · up(x))` for `n` rows of `x` (`acts` is
    /// prepared here; `s.g` keeps the down projection's input).
    pub fn run(
        &self,
        src: &dyn WeightSource,
        x: &[f32],
        n: usize,
        acts: &mut Acts,
        s: &mut FfnScratch,
        out: &mut [f32],
    ) -> Result<()> {
        let ff = self.n_ff;
        s.g.resize(n * ff, 0.0);
        s.u.resize(n * ff, 0.0);
        acts.prepare(x, n, &[&self.gate, &self.up])?;
        matmul_group(
            src,
            &mut [
                (&self.gate, &mut s.g, &mut s.tmp),
                (&self.up, &mut s.u, &mut s.tmp2),
            ],
            x,
            n,
            acts,
        )?;
        gated(self.activation, &mut s.g, &s.u);
        acts.prepare(&s.g, n, &[&self.down])?;
        self.down.matmul(src, &s.g, n, acts, out, &mut s.tmp)
    }
}

/// What transforms positions in one compiled layer.
#[allow(clippy::large_enum_variant)] // as for LayerMixer
pub enum LayerFfn {
    Dense(DenseLayer),
    Moe(MoeLayer),
}

/// One compiled layer: its norms, mixer and feed-forward part, and Gemma
/// 4's extras.
pub struct Layer {
    pub norms: LayerNorms,
    pub mixer: LayerMixer,
    pub ffn: LayerFfn,
    pub per_layer: Option<PerLayerBranch>,
    /// Multiplier on the residual stream after the layer.
    pub scale: Option<f32>,
}

/// The compiled model.
pub struct Model {
    pub weights: Arc<dyn WeightSource>,
    pub n_embd: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub eps: f32,
    pub embd_scale: f32,
    pub final_softcap: Option<f32>,
    pub token_embd: Matrix,
    pub output: Matrix,
    pub output_norm: Vec<f32>,
    pub layers: Vec<Layer>,
    pub per_layer: Option<PerLayerTables>,
    /// The kernels chosen at compile time (attention uses them directly).
    pub kernels: Kernels,
    /// Sliding-window layers' caches keep every position
    /// ([`crate::CpuOptions::swa_full`]).
    pub swa_full: bool,
    /// How the KV caches store rows ([`crate::CpuOptions::kv_type`]).
    pub kv_type: crate::attention::KvType,
}

impl Model {
    /// Compiles `p` for kernels `k`; the weight types `pack` includes that
    /// have a packed layout on `k` are packed once, here.
    pub fn new(p: &DecoderProgram, k: Kernels, pack: Packing) -> Result<Self> {
        let src = p.weights.as_ref();
        let packed = |m: Matrix| pack_matrix(src, m, pack);
        let opt_vec = |name: &Option<String>, len: usize| {
            name.as_deref().map(|n| vector(src, n, len)).transpose()
        };
        let matrix = |name: &str| load_matrix(src, name, k, pack);
        let d = p.n_embd;
        let mut layers = Vec::with_capacity(p.layers.len());
        for block in &p.layers {
            // Every variant is matched here with no catch-all: a new one is a
            // compile error until this backend runs or refuses it.
            let Block {
                norms,
                mixer,
                ffn,
                per_layer_input,
                layer_scale,
            } = block;
            let per_layer = match per_layer_input {
                None => None,
                Some(PerLayerInput {
                    width,
                    activation,
                    gate,
                    proj,
                    norm,
                }) => Some(PerLayerBranch {
                    width: *width,
                    activation: *activation,
                    gate: matrix(gate)?,
                    proj: matrix(proj)?,
                    norm: norm_weights(p, norm, d)?,
                }),
            };
            let scale = match layer_scale {
                None => None,
                Some(name) => Some(vector(src, name, 1)?[0]),
            };
            let (mixer, attn) = match mixer {
                Mixer::Attention(attn) => {
                    let Attention {
                        n_head: _,
                        n_head_kv: _,
                        head_dim: _,
                        scale: _,
                        softcap: _,
                        window: _,
                        rope: _,
                        kv_source,
                        wq,
                        wk,
                        wv,
                        wo,
                        bias:
                            AttentionBias {
                                q: bq,
                                k: bk,
                                v: bv,
                                o: bo,
                            },
                        q_norm: _,
                        k_norm: _,
                        v_norm,
                    } = attn;
                    let (q, kv) = (attn.q_dim(), attn.kv_dim());
                    // A layer reading another's cache projects no K/V.
                    let kv_proj = match kv_source {
                        Some(_) => None,
                        None => Some(KvProjection {
                            wk: matrix(wk)?,
                            wv: matrix(wv)?,
                            bk: opt_vec(bk, kv)?,
                            bv: opt_vec(bv, kv)?,
                            v_norm: v_norm.then(|| vec![1.0; attn.head_dim]),
                        }),
                    };
                    let layer = AttnLayer {
                        bq: opt_vec(bq, q)?,
                        bo: opt_vec(bo, d)?,
                        wq: matrix(wq)?,
                        wo: matrix(wo)?,
                        kv: kv_proj,
                        attn: attn.clone(),
                    };
                    (LayerMixer::Attention(layer), Some(attn))
                }
                Mixer::ShortConv(ShortConv {
                    kernel,
                    in_proj,
                    conv,
                    out_proj,
                }) => {
                    // transposed to tap-major once
                    let taps = tap_major(&vector(src, conv, kernel * d)?, *kernel, d);
                    let layer = ConvLayer {
                        kernel: *kernel,
                        in_proj: matrix(in_proj)?,
                        taps,
                        out_proj: matrix(out_proj)?,
                    };
                    (LayerMixer::ShortConv(layer), None)
                }
            };
            let ffn = match ffn {
                FeedForward::Dense(f) => LayerFfn::Dense(DenseLayer::compile(src, f, k, pack)?),
                FeedForward::Moe(m) => LayerFfn::Moe(MoeLayer::compile(src, m, k, pack)?),
            };
            layers.push(Layer {
                norms: LayerNorms::load(p, norms, attn)?,
                mixer,
                ffn,
                per_layer,
                scale,
            });
        }
        let token_embd = Matrix::new(src, &p.token_embd, k)?;
        // A tied embedding table is packed once and serves both the output
        // projection and the row lookups (which then never touch the file's
        // released pages: random token ids would fault most of them back in).
        let (token_embd, output) = match &p.output {
            Some(o) => (token_embd, packed(Matrix::new(src, o, k)?)?),
            None => {
                let tied = packed(token_embd)?;
                (tied.clone(), tied)
            }
        };
        let per_layer = match &p.per_layer_embd {
            None => None,
            Some(PerLayerEmbedding {
                width,
                token_table,
                token_scale,
                model_proj,
                model_proj_scale,
                proj_norm,
                combine_scale,
            }) => Some(PerLayerTables {
                width: *width,
                // Rows are looked up per token: left in place, like the
                // token embedding.
                token_table: Matrix::new(src, token_table, k)?,
                token_scale: *token_scale,
                model_proj: matrix(model_proj)?,
                model_proj_scale: *model_proj_scale,
                proj_norm: norm_weights(p, proj_norm, *width)?,
                combine_scale: *combine_scale,
            }),
        };
        Ok(Model {
            weights: p.weights.clone(),
            n_embd: p.n_embd,
            n_vocab: p.n_vocab,
            n_ctx_train: p.n_ctx_train,
            eps: p.norm.eps,
            embd_scale: p.embd_scale,
            final_softcap: p.final_softcap,
            token_embd,
            output,
            output_norm: norm_weights(p, &p.output_norm, p.n_embd)?,
            layers,
            per_layer,
            kernels: k,
            swa_full: false,
            kv_type: crate::attention::KvType::F16,
        })
    }
}
