//! Builders of each kernel kind from a decoder program's weights.

use super::emit::Emitter;
use super::sensitivity::ProjBlock;
use super::tensors::{rows, vector, WEIGHT_PATH};
use super::{Error, Kernel, KernelKind, LowerOptions, Port, Result};
use super::{FfnView, LayerView, MixerView};
use anedvd_graph::{Attention, DecoderProgram, PerLayerEmbedding, PerLayerInput, ShortConv};
use anedvd_mil::builder::{program as mil_program, ConvOpts, Var};
use anedvd_mil::sim::Weights;

/// Whole matrix `name` of `out` rows, row-major `[out, in]`.
pub(super) fn matrix(p: &DecoderProgram, name: &str, out: usize) -> Result<Vec<f32>> {
    Ok(rows(p.weights.as_ref(), name, 0, out)?.0)
}

/// Norm weight with the program's offset folded in (Gemma HF `(1 + w)`).
pub(super) fn norm(p: &DecoderProgram, name: &str) -> Result<Vec<f32>> {
    let mut v = vector(p.weights.as_ref(), name, p.n_embd)?;
    let off = p.norm.weight_offset;
    if off != 0.0 {
        v.iter_mut().for_each(|x| *x += off);
    }
    Ok(v)
}

pub(super) fn optional_norm(p: &DecoderProgram, name: Option<&str>) -> Result<Option<Vec<f32>>> {
    name.map(|n| norm(p, n)).transpose()
}

pub(super) fn optional_vec(
    p: &DecoderProgram,
    name: &Option<String>,
    len: usize,
) -> Result<Option<Vec<f32>>> {
    name.as_deref()
        .map(|n| vector(p.weights.as_ref(), n, len))
        .transpose()
}

/// Concatenated `[Wq; Wk; Wv]` and, if any bias exists, `[bq; bk; bv]`;
/// only q's for a layer reading another's K/V.
pub(super) fn qkv_weights(
    p: &DecoderProgram,
    a: &Attention,
) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
    let (qd, kvd) = (a.q_dim(), a.kv_dim());
    let mut w = matrix(p, &a.wq, qd)?;
    if a.kv_source.is_some() {
        return Ok((w, optional_vec(p, &a.bias.q, qd)?));
    }
    w.extend(matrix(p, &a.wk, kvd)?);
    w.extend(matrix(p, &a.wv, kvd)?);
    let bq = optional_vec(p, &a.bias.q, qd)?;
    let bk = optional_vec(p, &a.bias.k, kvd)?;
    let bv = optional_vec(p, &a.bias.v, kvd)?;
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

pub(super) fn finish(name: String, kind: KernelKind, e: Emitter, out: &Var, cin: usize) -> Kernel {
    finish_ports(name, kind, e, (out, cin), (Vec::new(), Vec::new()))
}

/// [`finish`] of a kernel with further ports: `inputs` were declared after
/// `x`, `outputs` are emitted after `out` in their order.
pub(super) fn finish_ports(
    name: String,
    kind: KernelKind,
    e: Emitter,
    (out, cin): (&Var, usize),
    (inputs, outputs): (Vec<Port>, Vec<(Port, Var)>),
) -> Kernel {
    let mut e = e;
    e.b.output(out);
    for (_, v) in &outputs {
        e.b.output(v);
    }
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
        inputs,
        outputs: outputs.into_iter().map(|(p, _)| p).collect(),
    }
}

/// Emits layer `i`'s mixer norm (if `with_norm`) and input projection
/// (`[q; k; v]`, or a short conv's `[B; C; X]`).
pub(super) fn emit_qkv(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
    x: &Var,
    with_norm: bool,
) -> Result<Var> {
    let h = if with_norm {
        let g = norm(p, l.attn_norm)?;
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
    e.block(ProjBlock::Attention(i));
    match l.mixer {
        MixerView::Attention(a) => {
            let (w, b) = qkv_weights(p, a)?;
            let out = l.mixer.in_width(p.n_embd);
            e.projection(&format!("l{i}_qkv"), &h, &w, out, b.as_deref())
        }
        MixerView::ShortConv(c) => {
            let w = matrix(p, &c.in_proj, 3 * p.n_embd)?;
            e.projection(&format!("l{i}_conv_in"), &h, &w, 3 * p.n_embd, None)
        }
    }
}

/// `blk.i.qkv` (split) or, fused (`with_norm`), `entry` for layer 0 and
/// `blk.i.entry` after a mixture of experts.
pub fn qkv(
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
    with_norm: bool,
) -> Result<Kernel> {
    let mut e = Emitter::for_options(o);
    let x = e.input(p.n_embd)?;
    let y = emit_qkv(&mut e, p, o, (i, l), &x, with_norm)?;
    let (name, kind) = if with_norm {
        let name = if i == 0 {
            "entry".to_string()
        } else {
            format!("blk.{i}.entry")
        };
        (name, KernelKind::Entry { layer: i })
    } else {
        (format!("blk.{i}.qkv"), KernelKind::Qkv { layer: i })
    };
    Ok(finish(name, kind, e, &y, p.n_embd))
}

/// The output side of layer `i`'s mixer from what the host handed over
/// (`ctx`: the attention context, or a short conv's `[u; C; carry]`).
pub(super) fn emit_attn_out(
    e: &mut Emitter,
    p: &DecoderProgram,
    (i, l): (usize, &LayerView<'_>),
    ctx: &Var,
) -> Result<Var> {
    e.block(ProjBlock::Attention(i));
    match l.mixer {
        MixerView::Attention(a) => {
            let w = matrix(p, &a.wo, p.n_embd)?;
            let b = optional_vec(p, &a.bias.o, p.n_embd)?;
            e.projection(&format!("l{i}_attn_out"), ctx, &w, p.n_embd, b.as_deref())
        }
        MixerView::ShortConv(c) => emit_conv_out(e, p, i, c, ctx),
    }
}

/// `out_proj(C · (conv(u) + carry))` with `conv` the depthwise causal
/// convolution of the chunk's columns (zero left padding of `K - 1`; the
/// host's `carry` adds the previous rows' share), from `[u; C; carry]`.
fn emit_conv_out(
    e: &mut Emitter,
    p: &DecoderProgram,
    i: usize,
    c: &ShortConv,
    ctx: &Var,
) -> Result<Var> {
    let (d, w) = (p.n_embd, e.width);
    let part = |e: &mut Emitter, name: &str, k: usize| -> Result<Var> {
        Ok(e.b.slice_by_size(
            &format!("l{i}_{name}"),
            ctx,
            &[0, k * d, 0, 0],
            &[1, d, 1, w],
        )?)
    };
    let u = part(e, "conv_u", 0)?;
    let gate_c = part(e, "conv_c", 1)?;
    let carry = part(e, "conv_carry", 2)?;
    let wv = conv_weight(e, p, i, c)?;
    let opts = ConvOpts {
        pad: [0, 0, c.kernel - 1, 0],
        pad_type: "custom",
        groups: d,
        ..ConvOpts::default()
    };
    let v0 = e.b.conv_with(&format!("l{i}_conv"), &u, &wv, &opts)?;
    let v = e.b.add(&format!("l{i}_conv_v"), &v0, &carry)?;
    let y = e.b.mul(&format!("l{i}_conv_y"), &gate_c, &v)?;
    emit_conv_proj(e, p, i, c, &y)
}

/// Layer `i`'s depthwise conv weight `[D, 1, 1, K]` (fp16 in every weight
/// format): stored `[hidden][K]` (HF `[hidden, 1, K]`), used as it is.
pub(super) fn conv_weight(
    e: &mut Emitter,
    p: &DecoderProgram,
    i: usize,
    c: &ShortConv,
) -> Result<Var> {
    let d = p.n_embd;
    let taps = super::tensors::elements(p.weights.as_ref(), &c.conv, c.kernel * d)?;
    let off = e.pack.matrix(&taps);
    Ok(e.b.const_blob(
        &format!("l{i}_conv_w"),
        anedvd_mil::ir::DType::Fp16,
        &[d, 1, 1, c.kernel],
        WEIGHT_PATH,
        off,
    )?)
}

/// Layer `i`'s `out_proj` of the gated convolution `y`.
pub(super) fn emit_conv_proj(
    e: &mut Emitter,
    p: &DecoderProgram,
    i: usize,
    c: &ShortConv,
    y: &Var,
) -> Result<Var> {
    let d = p.n_embd;
    let wo = matrix(p, &c.out_proj, d)?;
    e.projection(&format!("l{i}_conv_out"), y, &wo, d, None)
}

/// `blk.i.attn_out`: the output side of layer `i`'s mixer.
pub fn attn_out(
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
) -> Result<Kernel> {
    let qd = l.mixer.ctx_width(p.n_embd);
    let mut e = Emitter::for_options(o);
    let x = e.input(qd)?;
    let y = emit_attn_out(&mut e, p, (i, l), &x)?;
    Ok(finish(
        format!("blk.{i}.attn_out"),
        KernelKind::AttnOut { layer: i },
        e,
        &y,
        qd,
    ))
}

/// The dense FFN of layer `i` that runs on the ANE (the layer's, or a
/// mixture's shared expert), if any.
pub(super) fn emit_ffn(
    e: &mut Emitter,
    p: &DecoderProgram,
    (i, l): (usize, &LayerView<'_>),
    h: &Var,
) -> Result<Option<Var>> {
    let Some(f) = l.ffn.on_ane() else {
        return Ok(None);
    };
    e.block(ProjBlock::Ffn(i));
    let ff = f.n_ff;
    let gate = matrix(p, &f.gate, ff)?;
    let up = matrix(p, &f.up, ff)?;
    let down = matrix(p, &f.down, p.n_embd)?;
    let name = match l.ffn {
        FfnView::Dense(_) => format!("l{i}_ffn"),
        FfnView::Moe(_) => format!("l{i}_shexp"),
    };
    e.ffn(&name, h, f.activation, &gate, &up, &down, ff, p.n_embd)
        .map(Some)
}

/// `blk.i.ffn`: the layer's dense FFN, or a mixture's shared expert
/// (without its gate, which the host applies).
pub fn ffn(
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
) -> Result<Kernel> {
    let mut e = Emitter::for_options(o);
    let x = e.input(p.n_embd)?;
    let y = emit_ffn(&mut e, p, (i, l), &x)?.ok_or_else(|| {
        Error::Options(format!("layer {i}: no feed-forward part runs on the ANE"))
    })?;
    Ok(finish(
        format!("blk.{i}.ffn"),
        KernelKind::Ffn { layer: i },
        e,
        &y,
        p.n_embd,
    ))
}

/// `ple`: the projection part of every layer's per-layer input from the
/// scaled token embedding, `model_proj · x · model_proj_scale` (the scale
/// folded into the weights).
pub fn ple_proj(p: &DecoderProgram, o: &LowerOptions, t: &PerLayerEmbedding) -> Result<Kernel> {
    let lw = t.width * p.layers.len();
    let mut w = matrix(p, &t.model_proj, lw)?;
    w.iter_mut().for_each(|v| *v *= t.model_proj_scale);
    let mut e = Emitter::for_options(o);
    let x = e.input(p.n_embd)?;
    let y = e.projection("ple_proj", &x, &w, lw, None)?;
    Ok(finish("ple".into(), KernelKind::PleProj, e, &y, p.n_embd))
}

/// `proj(act(gate · x) ⊙ e_l)` of layer `i`'s per-layer input; `gate_scale`
/// undoes a scaled residual (`x/s` in the fused variant) before the
/// activation.
fn emit_per_layer(
    e: &mut Emitter,
    p: &DecoderProgram,
    i: usize,
    pl: &PerLayerInput,
    (x, e_l): (&Var, &Var),
    gate_scale: f32,
) -> Result<Var> {
    // not a block of the sensitivity ranking: the format asked for
    e.base();
    let gate = matrix(p, &pl.gate, pl.width)?;
    let mut g = e.projection(&format!("l{i}_pl_gate"), x, &gate, pl.width, None)?;
    if gate_scale != 1.0 {
        let c =
            e.b.fp16(&format!("l{i}_pl_unscale_k"), f64::from(gate_scale))?;
        g = e.b.mul(&format!("l{i}_pl_unscale"), &g, &c)?;
    }
    let a = e.activate(&format!("l{i}_pl"), &g, pl.activation)?;
    let m = e.b.mul(&format!("l{i}_pl_in"), &a, e_l)?;
    let proj = matrix(p, &pl.proj, p.n_embd)?;
    e.projection(&format!("l{i}_pl_proj"), &m, &proj, p.n_embd, None)
}

/// `blk.i.ple` (split): `[residual / s; e_l]` → the per-layer input's
/// projection (the host norms and adds it); the residual crosses divided by
/// the residual scale, like the fused variant's, so it fits fp16.
pub fn per_layer(
    p: &DecoderProgram,
    o: &LowerOptions,
    i: usize,
    pl: &PerLayerInput,
) -> Result<Kernel> {
    let (d, w) = (p.n_embd, o.width);
    let mut e = Emitter::for_options(o);
    let xin = e.input(d + pl.width)?;
    let x =
        e.b.slice_by_size(&format!("l{i}_x"), &xin, &[0, 0, 0, 0], &[1, d, 1, w])?;
    let e_l = e.b.slice_by_size(
        &format!("l{i}_e"),
        &xin,
        &[0, d, 0, 0],
        &[1, pl.width, 1, w],
    )?;
    let y = emit_per_layer(&mut e, p, i, pl, (&x, &e_l), o.residual_scale)?;
    let kind = KernelKind::PerLayer { layer: i };
    Ok(finish(format!("blk.{i}.ple"), kind, e, &y, d + pl.width))
}

/// Layer `i`'s `[1]` residual scale.
pub fn layer_scale(p: &DecoderProgram, name: &str) -> Result<f32> {
    Ok(vector(p.weights.as_ref(), name, 1)?[0])
}

/// `v / s` (nothing when s = 1), to add a block output to the scaled residual.
pub(super) fn unscale(e: &mut Emitter, name: &str, v: &Var, s: f32) -> Result<Var> {
    if s == 1.0 {
        return Ok(v.clone());
    }
    let c = e.b.fp16(&format!("{name}_k"), 1.0 / f64::from(s))?;
    Ok(e.b.mul(name, v, &c)?)
}

/// The scaled residual after layer `i`'s mixer: output side of `ctx`
/// (the attention context), post-mixer norm, `x + out / s`.
pub(super) fn emit_mixer_residual(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
    ctx: &Var,
    x: &Var,
) -> Result<Var> {
    let a = emit_attn_out(e, p, (i, l), ctx)?;
    emit_mixer_out_residual(e, p, o, (i, l), &a, x)
}

/// The scaled residual after layer `i`'s mixer output `a` (after its
/// output projection): post-mixer norm, `x + a / s`.
pub(super) fn emit_mixer_out_residual(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
    a: &Var,
    x: &Var,
) -> Result<Var> {
    let mut a = a.clone();
    if let Some(g) = optional_norm(p, l.post_attn_norm)? {
        a = e.rms_norm(&format!("l{i}_post_attn_norm"), &a, &g, p.norm.eps, 1.0)?;
    }
    let a = unscale(e, &format!("l{i}_attn_out_s"), &a, o.residual_scale)?;
    Ok(e.b.add(&format!("l{i}_ffn_inp"), x, &a)?)
}

/// The scaled residual after layer `i`'s FFN output `f`: post-FFN norm,
/// `h + f / s`.
pub(super) fn emit_ffn_residual(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
    h: &Var,
    f: &Var,
) -> Result<Var> {
    let mut f = f.clone();
    if let Some(g) = optional_norm(p, l.post_ffn_norm)? {
        f = e.rms_norm(&format!("l{i}_post_ffn_norm"), &f, &g, p.norm.eps, 1.0)?;
    }
    let f = unscale(e, &format!("l{i}_ffn_out_s"), &f, o.residual_scale)?;
    Ok(e.b.add(&format!("l{i}_out"), h, &f)?)
}

/// `blk.i.layer` of the fused variant.
/// `next` is the following layer, whose attention norm and q/k/v
/// projection run at the end of this program.
pub fn fused_layer(
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
    next: Option<&LayerView<'_>>,
) -> Result<Kernel> {
    let qd = l.mixer.ctx_width(p.n_embd);
    let d = p.n_embd;
    let w = o.width;
    let pw = l.per_layer.map_or(0, |pl| pl.width);
    let mut e = Emitter::for_options(o);
    let xin = e.input(qd + d + pw)?;
    let att =
        e.b.slice_by_size(&format!("l{i}_ctx"), &xin, &[0, 0, 0, 0], &[1, qd, 1, w])?;
    let x =
        e.b.slice_by_size(&format!("l{i}_resid"), &xin, &[0, qd, 0, 0], &[1, d, 1, w])?;
    let h = emit_mixer_residual(&mut e, p, o, (i, l), &att, &x)?;
    let g = norm(p, l.ffn_norm)?;
    let hn = e.rms_norm(
        &format!("l{i}_ffn_norm"),
        &h,
        &g,
        p.norm.eps,
        o.residual_scale,
    )?;
    let ffn = emit_ffn(&mut e, p, (i, l), &hn)?;
    if l.ffn.on_host() {
        // The host routes the experts of `hn`, adds the gated shared
        // expert and finishes the residual.
        // Two values per concat: e5rt refuses more ("expects exactly 2
        // inputs", registry concat[more-than-two-values]).
        let out = match ffn.as_ref() {
            None => e.b.concat(&format!("l{i}_to_host"), &[&h, &hn], 1)?,
            Some(shared) => {
                let first = e.b.concat(&format!("l{i}_to_host_h"), &[&h, &hn], 1)?;
                e.b.concat(&format!("l{i}_to_host"), &[&first, shared], 1)?
            }
        };
        let kind = KernelKind::Layer {
            layer: i,
            next_qkv: false,
            ffn_on_host: true,
        };
        return Ok(finish(format!("blk.{i}.layer"), kind, e, &out, qd + d + pw));
    }
    let f = ffn.ok_or_else(|| Error::Options(format!("layer {i}: no FFN")))?;
    let y = emit_ffn_residual(&mut e, p, o, (i, l), &h, &f)?;
    let e_l = l.per_layer.map(|_| {
        let at = [0, qd + d, 0, 0];
        e.b.slice_by_size(&format!("l{i}_e"), &xin, &at, &[1, pw, 1, w])
    });
    let y = emit_layer_end(&mut e, p, o, (i, l), &y, e_l.transpose()?.as_ref())?;
    let out = match next {
        Some(n) => {
            let qkv = emit_qkv(&mut e, p, o, (i + 1, n), &y, true)?;
            e.b.concat(&format!("l{i}_packed"), &[&y, &qkv], 1)?
        }
        None => y,
    };
    let kind = KernelKind::Layer {
        layer: i,
        next_qkv: next.is_some(),
        ffn_on_host: false,
    };
    Ok(finish(format!("blk.{i}.layer"), kind, e, &out, qd + d + pw))
}

/// The end of Gemma 4's layer `i` on the scaled residual `y` after its
/// FFN: the per-layer input's branch `proj(act(gate · y) ⊙ e_l)` normed and
/// added (`e_l: [1, width, 1, W]`, when the layer has one), then the
/// layer's residual scale; `y` as it is for other layers. The fused and
/// resident variants' layer programs end with it.
pub(super) fn emit_layer_end(
    e: &mut Emitter,
    p: &DecoderProgram,
    o: &LowerOptions,
    (i, l): (usize, &LayerView<'_>),
    y: &Var,
    e_l: Option<&Var>,
) -> Result<Var> {
    let mut y = y.clone();
    if let Some(pl) = l.per_layer {
        let e_l = e_l.ok_or_else(|| {
            Error::Options(format!("layer {i}: a per-layer input without its e_l"))
        })?;
        let s = o.residual_scale;
        let v = emit_per_layer(e, p, i, pl, (&y, e_l), s)?;
        let g = norm(p, &pl.norm)?;
        let v = e.rms_norm(&format!("l{i}_pl_norm"), &v, &g, p.norm.eps, 1.0)?;
        let v = unscale(e, &format!("l{i}_pl_out_s"), &v, s)?;
        y = e.b.add(&format!("l{i}_pl_out"), &y, &v)?;
    }
    if let Some(name) = l.layer_scale {
        let c =
            e.b.fp16(&format!("l{i}_scale_k"), f64::from(layer_scale(p, name)?))?;
        y = e.b.mul(&format!("l{i}_scaled"), &y, &c)?;
    }
    Ok(y)
}

/// Slice `s` of the logits, vocabulary rows `rows`, from the normed `h`:
/// the output projection's rows (the tied embedding's without one).
pub(super) fn emit_logits(
    e: &mut Emitter,
    p: &DecoderProgram,
    s: usize,
    h: &Var,
    rows_: std::ops::Range<usize>,
) -> Result<Var> {
    let name = p.output.as_deref().unwrap_or(&p.token_embd);
    e.block(ProjBlock::LmHead);
    let (w, cols) = rows(p.weights.as_ref(), name, rows_.start, rows_.end)?;
    if cols != p.n_embd {
        return Err(Error::Tensor {
            tensor: name.to_string(),
            msg: format!("{cols} columns, expected n_embd {}", p.n_embd),
        });
    }
    e.projection(&format!("logits_{s}"), h, &w, rows_.len(), None)
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
    let mut e = Emitter::for_options(o);
    let x = e.input(p.n_embd)?;
    let h = if norm_inside {
        let g = norm(p, &p.output_norm)?;
        e.rms_norm("output_norm", &x, &g, p.norm.eps, o.residual_scale)?
    } else {
        x
    };
    let y = emit_logits(&mut e, p, s, &h, first..first + n)?;
    let kind = KernelKind::LmHead {
        first,
        rows: n,
        norm_inside,
    };
    Ok(finish(format!("lm_head.{s}"), kind, e, &y, p.n_embd))
}
