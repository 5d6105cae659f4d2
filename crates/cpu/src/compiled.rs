//! The compiled model: matrix handles into the source, and the small vectors
//! (norm weights with their offset folded in, biases) decoded once.

use crate::matmul::{vector, Matrix};
use crate::qkernels::Kernels;
use anedvd_base::WeightSource;
use anedvd_graph::{Activation, DecoderProgram, Error, LayerSpec, Result, Role};
use std::sync::Arc;

/// One compiled layer.
pub struct Layer {
    pub spec: LayerSpec,
    pub attn_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub post_attn_norm: Option<Vec<f32>>,
    pub post_ffn_norm: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub bo: Option<Vec<f32>>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub wo: Matrix,
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
}

impl Layer {
    pub fn q_dim(&self) -> usize {
        self.spec.n_head * self.spec.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.spec.n_head_kv * self.spec.head_dim
    }
}

/// The compiled model.
pub struct Model {
    pub weights: Arc<dyn WeightSource>,
    pub n_embd: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub eps: f32,
    pub activation: Activation,
    pub embd_scale: f32,
    pub final_softcap: Option<f32>,
    pub token_embd: Matrix,
    pub output: Matrix,
    pub output_norm: Vec<f32>,
    pub layers: Vec<Layer>,
    /// The kernels chosen at compile time (attention uses them directly).
    pub kernels: Kernels,
}

impl Model {
    pub fn new(p: &DecoderProgram) -> Result<Self> {
        let src = p.weights.as_ref();
        let k = Kernels::detect();
        // `ANEDVD_PACK=0` keeps every matrix in the file's layout (A/B runs).
        let pack = std::env::var("ANEDVD_PACK").map_or(true, |v| v != "0" && v != "off");
        let packed = |m: Matrix| if pack { m.packed(src) } else { Ok(m) };
        let offset = p.norm.weight_offset;
        let norm = |name: &str, len: usize| -> Result<Vec<f32>> {
            let mut v = vector(src, name, len)?;
            v.iter_mut().for_each(|x| *x += offset);
            Ok(v)
        };
        let mut layers = Vec::with_capacity(p.layers.len());
        for (i, l) in p.layers.iter().enumerate() {
            let need = |role: Role| {
                l.tensor(role).ok_or_else(|| {
                    Error::InvalidProgram(format!("layer {i}: no tensor bound to {role}"))
                })
            };
            let opt_norm =
                |role: Role, len: usize| l.tensor(role).map(|n| norm(n, len)).transpose();
            let opt_vec =
                |role: Role, len: usize| l.tensor(role).map(|n| vector(src, n, len)).transpose();
            let (d, q, kv) = (p.n_embd, l.n_head * l.head_dim, l.n_head_kv * l.head_dim);
            layers.push(Layer {
                attn_norm: norm(need(Role::AttnNorm)?, d)?,
                ffn_norm: norm(need(Role::FfnNorm)?, d)?,
                post_attn_norm: opt_norm(Role::PostAttnNorm, d)?,
                post_ffn_norm: opt_norm(Role::PostFfnNorm, d)?,
                q_norm: opt_norm(Role::AttnQNorm, l.head_dim)?,
                k_norm: opt_norm(Role::AttnKNorm, l.head_dim)?,
                bq: opt_vec(Role::AttnQBias, q)?,
                bk: opt_vec(Role::AttnKBias, kv)?,
                bv: opt_vec(Role::AttnVBias, kv)?,
                bo: opt_vec(Role::AttnOutputBias, d)?,
                wq: packed(Matrix::new(src, need(Role::AttnQ)?, k)?)?,
                wk: packed(Matrix::new(src, need(Role::AttnK)?, k)?)?,
                wv: packed(Matrix::new(src, need(Role::AttnV)?, k)?)?,
                wo: packed(Matrix::new(src, need(Role::AttnOutput)?, k)?)?,
                gate: packed(Matrix::new(src, need(Role::FfnGate)?, k)?)?,
                up: packed(Matrix::new(src, need(Role::FfnUp)?, k)?)?,
                down: packed(Matrix::new(src, need(Role::FfnDown)?, k)?)?,
                spec: l.clone(),
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
        Ok(Model {
            weights: p.weights.clone(),
            n_embd: p.n_embd,
            n_vocab: p.n_vocab,
            n_ctx_train: p.n_ctx_train,
            eps: p.norm.eps,
            activation: p.activation,
            embd_scale: p.embd_scale,
            final_softcap: p.final_softcap,
            token_embd,
            output,
            output_norm: norm(&p.output_norm, p.n_embd)?,
            layers,
            kernels: k,
        })
    }
}
