//! Builders of each kernel kind from a decoder program's weights.

use super::emit::Emitter;
use super::tensors::{rows, vector, WEIGHT_PATH};
use super::{Error, Kernel, KernelKind, LowerOptions, Result};
use anedvd_graph::{DecoderProgram, LayerSpec, Role};
use anedvd_mil::builder::{program as mil_program, Var};
use anedvd_mil::sim::Weights;

fn tensor_name(l: &LayerSpec, i: usize, role: Role) -> Result<&str> {
    l.tensor(role)
        .ok_or_else(|| Error::MissingTensor(format!("blk.{i}.{role}")))
}

/// Whole matrix bound to `role` in layer `i`, row-major `[out, in]`.
fn matrix(p: &DecoderProgram, i: usize, role: Role, out: usize) -> Result<Vec<f32>> {
    let name = tensor_name(&p.layers[i], i, role)?;
    Ok(rows(p.weights.as_ref(), name, 0, out)?.0)
}

/// Norm weight with the program's offset folded in (Gemma HF `(1 + w)`).
fn norm(p: &DecoderProgram, name: &str) -> Result<Vec<f32>> {
    let mut v = vector(p.weights.as_ref(), name, p.n_embd)?;
    let off = p.norm.weight_offset;
    if off != 0.0 {
        v.iter_mut().for_each(|x| *x += off);
    }
    Ok(v)
}

fn layer_norm(p: &DecoderProgram, i: usize, role: Role) -> Result<Option<Vec<f32>>> {
    match p.layers[i].tensor(role) {
        Some(name) => norm(p, name).map(Some),
        None => Ok(None),
    }
}

fn optional_vec(p: &DecoderProgram, i: usize, role: Role, len: usize) -> Result<Option<Vec<f32>>> {
    match p.layers[i].tensor(role) {
        Some(name) => vector(p.weights.as_ref(), name, len).map(Some),
        None => Ok(None),
    }
}

/// q/k/v widths of layer `i`.
pub fn qkv_dims(l: &LayerSpec) -> (usize, usize) {
    (l.n_head * l.head_dim, l.n_head_kv * l.head_dim)
}

/// Concatenated `[Wq; Wk; Wv]` and, if any bias exists, `[bq; bk; bv]`.
fn qkv_weights(p: &DecoderProgram, i: usize) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
    let (qd, kvd) = qkv_dims(&p.layers[i]);
    let mut w = matrix(p, i, Role::AttnQ, qd)?;
    w.extend(matrix(p, i, Role::AttnK, kvd)?);
    w.extend(matrix(p, i, Role::AttnV, kvd)?);
    let bq = optional_vec(p, i, Role::AttnQBias, qd)?;
    let bk = optional_vec(p, i, Role::AttnKBias, kvd)?;
    let bv = optional_vec(p, i, Role::AttnVBias, kvd)?;
    let bias = if bq.is_some() || bk.is_some() || bv.is_some() {
        let mut b = bq.unwrap_or_else(|| vec![0.0; qd]);
        b.extend(bk.unwrap_or_else(|| vec![0.0; kvd]));
        b.extend(bv.unwrap_or_else(|| vec![0.0; kvd]));
        Some(b)
    } else {
        None
    };
    Ok((w, bias))
}

fn finish(name: String, kind: KernelKind, e: Emitter, out: &Var, cin: usize) -> Kernel {
    let mut e = e;
    e.b.output(out);
    let out_channels = out.shape().get(1).copied().unwrap_or(0);
    let (bytes, macs) = (e.pack.bytes, e.pack.macs);
    let mut weights = Weights::new();
    weights.insert(WEIGHT_PATH, e.pack.finish());
    Kernel {
        name,
        kind,
        program: mil_program(vec![e.b.finish()]),
        weights,
        in_channels: cin,
        out_channels,
        weight_bytes: bytes,
        macs,
    }
}

/// Emits layer `i`'s attention norm (if `with_norm`) and q/k/v projection.
fn emit_qkv(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    i: usize,
    x: &Var,
    with_norm: bool,
) -> Result<Var> {
    let (qd, kvd) = qkv_dims(&p.layers[i]);
    let h = if with_norm {
        let g = norm(p, tensor_name(&p.layers[i], i, Role::AttnNorm)?)?;
        e.rms_norm(
            &format!("l{i}_attn_norm"),
            x,
            &g,
            p.norm.eps,
            o.residual_scale,
        )?
    } else {
        x.clone()
    };
    let (w, b) = qkv_weights(p, i)?;
    e.projection(&format!("l{i}_qkv"), &h, &w, qd + 2 * kvd, b.as_deref())
}

/// `blk.i.qkv` (split) or `entry` (fused, `with_norm`).
pub fn qkv(p: &DecoderProgram, o: &LowerOptions, i: usize, with_norm: bool) -> Result<Kernel> {
    let mut e = Emitter::new(o.width);
    let x = e.input(p.n_embd)?;
    let y = emit_qkv(&mut e, p, o, i, &x, with_norm)?;
    let (name, kind) = if with_norm {
        ("entry".to_string(), KernelKind::Entry)
    } else {
        (format!("blk.{i}.qkv"), KernelKind::Qkv { layer: i })
    };
    Ok(finish(name, kind, e, &y, p.n_embd))
}

fn emit_attn_out(e: &mut Emitter, p: &DecoderProgram, i: usize, att: &Var) -> Result<Var> {
    let w = matrix(p, i, Role::AttnOutput, p.n_embd)?;
    let b = optional_vec(p, i, Role::AttnOutputBias, p.n_embd)?;
    e.projection(&format!("l{i}_attn_out"), att, &w, p.n_embd, b.as_deref())
}

/// `blk.i.attn_out`.
pub fn attn_out(p: &DecoderProgram, o: &LowerOptions, i: usize) -> Result<Kernel> {
    let (qd, _) = qkv_dims(&p.layers[i]);
    let mut e = Emitter::new(o.width);
    let x = e.input(qd)?;
    let y = emit_attn_out(&mut e, p, i, &x)?;
    Ok(finish(
        format!("blk.{i}.attn_out"),
        KernelKind::AttnOut { layer: i },
        e,
        &y,
        qd,
    ))
}

fn emit_ffn(e: &mut Emitter, p: &DecoderProgram, i: usize, h: &Var) -> Result<Var> {
    let ff = p.layers[i].n_ff;
    let gate = matrix(p, i, Role::FfnGate, ff)?;
    let up = matrix(p, i, Role::FfnUp, ff)?;
    let down = matrix(p, i, Role::FfnDown, p.n_embd)?;
    e.ffn(
        &format!("l{i}_ffn"),
        h,
        p.activation,
        &gate,
        &up,
        &down,
        ff,
        p.n_embd,
    )
}

/// `blk.i.ffn`.
pub fn ffn(p: &DecoderProgram, o: &LowerOptions, i: usize) -> Result<Kernel> {
    let mut e = Emitter::new(o.width);
    let x = e.input(p.n_embd)?;
    let y = emit_ffn(&mut e, p, i, &x)?;
    Ok(finish(
        format!("blk.{i}.ffn"),
        KernelKind::Ffn { layer: i },
        e,
        &y,
        p.n_embd,
    ))
}

/// `v / s` (nothing when s = 1), to add a block output to the scaled residual.
fn unscale(e: &mut Emitter, name: &str, v: &Var, s: f32) -> Result<Var> {
    if s == 1.0 {
        return Ok(v.clone());
    }
    let c = e.b.fp16(&format!("{name}_k"), 1.0 / f64::from(s))?;
    Ok(e.b.mul(name, v, &c)?)
}

/// `blk.i.layer` of the fused variant.
pub fn fused_layer(p: &DecoderProgram, o: &LowerOptions, i: usize) -> Result<Kernel> {
    let (qd, _) = qkv_dims(&p.layers[i]);
    let d = p.n_embd;
    let w = o.width;
    let mut e = Emitter::new(w);
    let xin = e.input(qd + d)?;
    let att =
        e.b.slice_by_size(&format!("l{i}_ctx"), &xin, &[0, 0, 0, 0], &[1, qd, 1, w])?;
    let x =
        e.b.slice_by_size(&format!("l{i}_resid"), &xin, &[0, qd, 0, 0], &[1, d, 1, w])?;
    let mut a = emit_attn_out(&mut e, p, i, &att)?;
    if let Some(g) = layer_norm(p, i, Role::PostAttnNorm)? {
        a = e.rms_norm(&format!("l{i}_post_attn_norm"), &a, &g, p.norm.eps, 1.0)?;
    }
    let a = unscale(&mut e, &format!("l{i}_attn_out_s"), &a, o.residual_scale)?;
    let h = e.b.add(&format!("l{i}_ffn_inp"), &x, &a)?;
    let g = norm(p, tensor_name(&p.layers[i], i, Role::FfnNorm)?)?;
    let hn = e.rms_norm(
        &format!("l{i}_ffn_norm"),
        &h,
        &g,
        p.norm.eps,
        o.residual_scale,
    )?;
    let mut f = emit_ffn(&mut e, p, i, &hn)?;
    if let Some(g) = layer_norm(p, i, Role::PostFfnNorm)? {
        f = e.rms_norm(&format!("l{i}_post_ffn_norm"), &f, &g, p.norm.eps, 1.0)?;
    }
    let f = unscale(&mut e, &format!("l{i}_ffn_out_s"), &f, o.residual_scale)?;
    let y = e.b.add(&format!("l{i}_out"), &h, &f)?;
    let next = i + 1 < p.layers.len();
    let out = if next {
        let qkv = emit_qkv(&mut e, p, o, i + 1, &y, true)?;
        e.b.concat(&format!("l{i}_packed"), &[&y, &qkv], 1)?
    } else {
        y
    };
    let kind = KernelKind::Layer {
        layer: i,
        next_qkv: next,
    };
    Ok(finish(format!("blk.{i}.layer"), kind, e, &out, qd + d))
}

/// `lm_head.s`: vocabulary rows `first..first + n`.
pub fn lm_head(
    p: &DecoderProgram,
    o: &LowerOptions,
    s: usize,
    first: usize,
    n: usize,
    norm_inside: bool,
) -> Result<Kernel> {
    let mut e = Emitter::new(o.width);
    let x = e.input(p.n_embd)?;
    let h = if norm_inside {
        let g = norm(p, &p.output_norm)?;
        e.rms_norm("output_norm", &x, &g, p.norm.eps, o.residual_scale)?
    } else {
        x
    };
    let name = p.output.as_deref().unwrap_or(&p.token_embd);
    let (w, cols) = rows(p.weights.as_ref(), name, first, first + n)?;
    if cols != p.n_embd {
        return Err(Error::Tensor {
            tensor: name.to_string(),
            msg: format!("{cols} columns, expected n_embd {}", p.n_embd),
        });
    }
    let y = e.projection(&format!("logits_{s}"), &h, &w, n, None)?;
    let kind = KernelKind::LmHead {
        first,
        rows: n,
        norm_inside,
    };
    Ok(finish(format!("lm_head.{s}"), kind, e, &y, p.n_embd))
}
