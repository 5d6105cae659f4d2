//! Reference kernels: f32 arithmetic on values read from fp16/fp32 storage, one rounding to the output dtype per op.

use super::tensor::{broadcast_index, broadcast_shape, strides, Tensor};
use crate::error::{Error, Result};
use crate::ir::DType;

type R = Result<Tensor>;

/// Largest tensor the simulator will allocate (elements), so a hostile
/// program run through `Simulator::new_unchecked` fails cleanly instead of
/// aborting on allocation.
pub(crate) const MAX_ELEMENTS: usize = 1 << 30;

/// Element count of `shape`, or an error above [`MAX_ELEMENTS`].
pub(crate) fn checked_numel(loc: &str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| {
            Error::sem(
                loc,
                format!("result shape {shape:?} is too large to simulate"),
            )
        })
}

fn float_dtype(loc: &str, t: &Tensor) -> Result<DType> {
    match t.dtype() {
        d @ (DType::Fp16 | DType::Fp32) => Ok(d),
        d => Err(Error::sem(
            loc,
            format!("expected an fp16/fp32 tensor, got {d}"),
        )),
    }
}

/// Stores f32 results in `dtype` (fp16: one round-to-nearest-even).
fn store(loc: &str, dtype: DType, shape: Vec<usize>, v: &[f32]) -> R {
    Tensor::from_f32(dtype, &shape, v).map_err(|e| Error::sem(loc, e.to_string()))
}

/// Normalises a possibly negative axis.
pub(crate) fn axis(loc: &str, a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let n = if a < 0 { a + r } else { a };
    if n < 0 || n >= r.max(1) {
        return Err(Error::sem(
            loc,
            format!("axis {a} out of range for rank {rank}"),
        ));
    }
    Ok(n as usize)
}

/// Element-wise binary op with numpy broadcasting.
pub(crate) fn binary(loc: &str, x: &Tensor, y: &Tensor, f: impl Fn(f32, f32) -> f32) -> R {
    let dt = float_dtype(loc, x)?;
    if y.dtype() != dt {
        return Err(Error::sem(
            loc,
            format!("dtype mismatch {dt} vs {}", y.dtype()),
        ));
    }
    let shape = broadcast_shape(&x.shape, &y.shape).ok_or_else(|| {
        Error::sem(
            loc,
            format!("shapes {:?} and {:?} do not broadcast", x.shape, y.shape),
        )
    })?;
    let (xv, yv) = (x.to_f32(), y.to_f32());
    let (xi, yi) = (
        broadcast_index(&x.shape, &shape),
        broadcast_index(&y.shape, &shape),
    );
    let out: Vec<f32> = xi.iter().zip(&yi).map(|(&a, &b)| f(xv[a], yv[b])).collect();
    store(loc, dt, shape, &out)
}

/// `pow`; an exponent of exactly -0.5 is computed as `1/sqrt(x)`.
pub(crate) fn pow(x: f32, y: f32) -> f32 {
    if y == -0.5 {
        1.0 / x.sqrt()
    } else {
        x.powf(y)
    }
}

/// Element-wise unary op.
pub(crate) fn unary(loc: &str, x: &Tensor, f: impl Fn(f32) -> f32) -> R {
    let dt = float_dtype(loc, x)?;
    let out: Vec<f32> = x.to_f32().into_iter().map(f).collect();
    store(loc, dt, x.shape.clone(), &out)
}

/// Convolution parameters (already resolved from the named consts).
pub(crate) struct ConvParams {
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    /// `[top, bottom, left, right]`, already resolved for `valid`/`same`.
    pub pad: [usize; 4],
    pub groups: usize,
}

/// Resolves `pad_type` + `pad` into explicit paddings for input `[h, w]`, kernel `[kh, kw]`.
pub(crate) fn resolve_pad(
    loc: &str,
    pad_type: &str,
    pad: &[i64],
    hw: [usize; 2],
    k: [usize; 2],
    strides: [usize; 2],
    dil: [usize; 2],
) -> Result<[usize; 4]> {
    match pad_type {
        "valid" => Ok([0; 4]),
        "custom" => {
            let p: Vec<usize> = pad
                .iter()
                .map(|&v| usize::try_from(v).unwrap_or(usize::MAX))
                .collect();
            if p.len() != 4 || p.iter().any(|&v| v > 1 << 20) {
                return Err(Error::sem(loc, format!("bad custom pad {pad:?}")));
            }
            Ok([p[0], p[1], p[2], p[3]])
        }
        "same" => {
            let mut out = [0; 4];
            for a in 0..2 {
                let o = hw[a].div_ceil(strides[a]);
                let need = (o - 1) * strides[a] + dil[a] * (k[a] - 1) + 1;
                let total = need.saturating_sub(hw[a]);
                out[2 * a] = total / 2;
                out[2 * a + 1] = total - total / 2;
            }
            Ok(out)
        }
        other => Err(Error::sem(loc, format!("unknown pad_type {other:?}"))),
    }
}

/// 2-D grouped convolution `x [N, Cin, H, W]` ⋆ `w [Cout, Cin/g, kH, kW]`, f32 accumulation.
pub(crate) fn conv(loc: &str, x: &Tensor, w: &Tensor, bias: Option<&Tensor>, p: &ConvParams) -> R {
    let dt = float_dtype(loc, x)?;
    let (xs, ws) = (&x.shape, &w.shape);
    if xs.len() != 4 || ws.len() != 4 {
        return Err(Error::sem(
            loc,
            format!("conv needs rank-4 x and weight, got {xs:?} {ws:?}"),
        ));
    }
    let (n, cin, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (cout, cpg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let g = p.groups;
    if g == 0 || cin % g != 0 || cout % g != 0 || cin / g != cpg {
        return Err(Error::sem(
            loc,
            format!("groups {g} incompatible with x {xs:?} weight {ws:?}"),
        ));
    }
    if p.strides.contains(&0) || p.dilations.contains(&0) {
        return Err(Error::sem(loc, "zero stride or dilation"));
    }
    let span = |i: usize, k: usize, d: usize, lo: usize, hi: usize, s: usize| -> Option<usize> {
        let padded = i + lo + hi;
        let eff = d * (k - 1) + 1;
        (padded >= eff).then(|| (padded - eff) / s + 1)
    };
    let (oh, ow) = match (
        span(h, kh, p.dilations[0], p.pad[0], p.pad[1], p.strides[0]),
        span(wd, kw, p.dilations[1], p.pad[2], p.pad[3], p.strides[1]),
    ) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(Error::sem(loc, "kernel larger than padded input")),
    };
    let (xv, wv) = (x.to_f32(), w.to_f32());
    let bv = match bias {
        Some(b) if b.numel() == cout => Some(b.to_f32()),
        Some(b) => return Err(Error::sem(loc, format!("bias shape {:?}", b.shape))),
        None => None,
    };
    let opg = cout / g;
    let mut out = vec![0f32; checked_numel(loc, &[n, cout, oh, ow])?];
    let pointwise = kh == 1 && kw == 1 && p.strides == [1, 1] && p.pad == [0; 4];
    if pointwise {
        // Same summation order as the general loop (channel ascending), so the
        // result is identical; only the loop nest is reordered for speed.
        let hw = h * wd;
        for b in 0..n {
            for o in 0..cout {
                let gi = o / opg;
                let acc = &mut out[(b * cout + o) * hw..(b * cout + o + 1) * hw];
                for ci in 0..cpg {
                    let wgt = wv[o * cpg + ci];
                    let xrow = &xv[(b * cin + gi * cpg + ci) * hw..][..hw];
                    for (a, &xx) in acc.iter_mut().zip(xrow) {
                        *a += wgt * xx;
                    }
                }
                if let Some(bv) = &bv {
                    acc.iter_mut().for_each(|a| *a += bv[o]);
                }
            }
        }
        return store(loc, dt, vec![n, cout, oh, ow], &out);
    }
    for b in 0..n {
        for o in 0..cout {
            let gi = o / opg;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = 0f32;
                    for ci in 0..cpg {
                        let c = gi * cpg + ci;
                        for ky in 0..kh {
                            let iy = (oy * p.strides[0] + ky * p.dilations[0]) as isize
                                - p.pad[0] as isize;
                            if iy < 0 || iy as usize >= h {
                                continue;
                            }
                            for kx in 0..kw {
                                let ix = (ox * p.strides[1] + kx * p.dilations[1]) as isize
                                    - p.pad[2] as isize;
                                if ix < 0 || ix as usize >= wd {
                                    continue;
                                }
                                let xi = ((b * cin + c) * h + iy as usize) * wd + ix as usize;
                                let wi = ((o * cpg + ci) * kh + ky) * kw + kx;
                                acc += xv[xi] * wv[wi];
                            }
                        }
                    }
                    if let Some(bv) = &bv {
                        acc += bv[o];
                    }
                    out[((b * cout + o) * oh + oy) * ow + ox] = acc;
                }
            }
        }
    }
    store(loc, dt, vec![n, cout, oh, ow], &out)
}

/// Batched matmul over the last two dims, leading dims broadcast; f32 accumulation.
pub(crate) fn matmul(loc: &str, x: &Tensor, y: &Tensor, tx: bool, ty: bool) -> R {
    let dt = float_dtype(loc, x)?;
    if y.dtype() != dt || x.shape.len() < 2 || y.shape.len() < 2 {
        return Err(Error::sem(
            loc,
            format!("matmul of {:?} and {:?}", x.shape, y.shape),
        ));
    }
    let (xr, yr) = (x.shape.len(), y.shape.len());
    let (xa, xb) = (x.shape[xr - 2], x.shape[xr - 1]);
    let (ya, yb) = (y.shape[yr - 2], y.shape[yr - 1]);
    let (m, k) = if tx { (xb, xa) } else { (xa, xb) };
    let (k2, n) = if ty { (yb, ya) } else { (ya, yb) };
    if k != k2 {
        return Err(Error::sem(
            loc,
            format!("contraction {k} vs {k2} ({:?} x {:?})", x.shape, y.shape),
        ));
    }
    let batch = broadcast_shape(&x.shape[..xr - 2], &y.shape[..yr - 2])
        .ok_or_else(|| Error::sem(loc, "batch dims do not broadcast"))?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    checked_numel(loc, &out_shape)?;
    let xbi = broadcast_index(&x.shape[..xr - 2], &batch);
    let ybi = broadcast_index(&y.shape[..yr - 2], &batch);
    let (xv, yv) = (x.to_f32(), y.to_f32());
    let mut out = Vec::with_capacity(xbi.len() * m * n);
    for (&bx, &by) in xbi.iter().zip(&ybi) {
        let (xo, yo) = (bx * xa * xb, by * ya * yb);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f32;
                for l in 0..k {
                    let a = if tx {
                        xv[xo + l * xb + i]
                    } else {
                        xv[xo + i * xb + l]
                    };
                    let b = if ty {
                        yv[yo + j * yb + l]
                    } else {
                        yv[yo + l * yb + j]
                    };
                    acc += a * b;
                }
                out.push(acc);
            }
        }
    }
    store(loc, dt, out_shape, &out)
}

/// Iterates (outer, inner) index pairs around axis `a` of `shape`.
fn around_axis(shape: &[usize], a: usize) -> (usize, usize, usize) {
    let outer: usize = shape[..a].iter().product();
    let inner: usize = shape[a + 1..].iter().product();
    (outer, shape[a], inner)
}

/// Softmax along `axis` with max subtraction, f32 internally.
pub(crate) fn softmax(loc: &str, x: &Tensor, ax: i64) -> R {
    let dt = float_dtype(loc, x)?;
    let a = axis(loc, ax, x.shape.len())?;
    let (outer, len, inner) = around_axis(&x.shape, a);
    let mut v = x.to_f32();
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * len + k) * inner + i;
            let mx = (0..len).map(|k| v[at(k)]).fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for k in 0..len {
                let e = (v[at(k)] - mx).exp();
                v[at(k)] = e;
                sum += e;
            }
            for k in 0..len {
                v[at(k)] /= sum;
            }
        }
    }
    store(loc, dt, x.shape.clone(), &v)
}

/// Reduction kinds.
#[derive(Clone, Copy)]
pub(crate) enum Reduce {
    Sum,
    Max,
    Mean,
}

/// Reduces over `axes`, optionally keeping the reduced dims. Sums accumulate
/// in f32, or with `narrow` (PREC-NARROW-REDUCE-SUM) in the tensor's own
/// dtype: the running sum is rounded to fp16 after every addition, in index
/// order, as the ANE's reduce_sum is measured to do.
pub(crate) fn reduce(
    loc: &str,
    x: &Tensor,
    axes: &[i64],
    keep: bool,
    kind: Reduce,
    narrow: bool,
) -> R {
    let dt = float_dtype(loc, x)?;
    let r = x.shape.len();
    let mut red = vec![false; r];
    for &a in axes {
        red[axis(loc, a, r)?] = true;
    }
    let kept: Vec<usize> = x
        .shape
        .iter()
        .zip(&red)
        .map(|(&d, &rd)| if rd { 1 } else { d })
        .collect();
    let n_out: usize = kept.iter().product();
    let count = x.numel() / n_out.max(1);
    let init = match kind {
        Reduce::Max => f32::NEG_INFINITY,
        _ => 0.0,
    };
    let mut acc = vec![init; n_out];
    let kst = strides(&kept);
    let xst = strides(&x.shape);
    for (flat, v) in x.to_f32().into_iter().enumerate() {
        let mut o = 0;
        for d in 0..r {
            let c = (flat / xst[d]) % x.shape[d];
            if !red[d] {
                o += c * kst[d];
            }
        }
        acc[o] = match kind {
            Reduce::Max => acc[o].max(v),
            _ if narrow && dt == DType::Fp16 => half::f16::from_f32(acc[o] + v).to_f32(),
            _ => acc[o] + v,
        };
    }
    if let Reduce::Mean = kind {
        acc.iter_mut().for_each(|a| *a /= count as f32);
    }
    let shape = if keep {
        kept
    } else {
        x.shape
            .iter()
            .zip(&red)
            .filter(|(_, &rd)| !rd)
            .map(|(&d, _)| d)
            .collect()
    };
    store(loc, dt, shape, &acc)
}

/// PREC-MATMUL-SATURATION: values at or beyond `limit` in magnitude become ±inf.
pub(crate) fn saturate(loc: &str, y: &Tensor, limit: f32) -> R {
    let v: Vec<f32> = y
        .to_f32()
        .into_iter()
        .map(|x| {
            if x.abs() >= limit {
                f32::INFINITY.copysign(x)
            } else {
                x
            }
        })
        .collect();
    store(loc, y.dtype(), y.shape.clone(), &v)
}

/// Axis permutation.
pub(crate) fn transpose(loc: &str, x: &Tensor, perm: &[i64]) -> R {
    let r = x.shape.len();
    let mut p = Vec::with_capacity(r);
    for &a in perm {
        p.push(axis(loc, a, r)?);
    }
    let mut seen = p.clone();
    seen.sort_unstable();
    if seen != (0..r).collect::<Vec<_>>() {
        return Err(Error::sem(
            loc,
            format!("perm {perm:?} is not a permutation of rank {r}"),
        ));
    }
    let shape: Vec<usize> = p.iter().map(|&a| x.shape[a]).collect();
    let xst = strides(&x.shape);
    let ost = strides(&shape);
    let n = x.numel();
    let idx: Vec<usize> = (0..n)
        .map(|flat| {
            (0..r)
                .map(|d| ((flat / ost[d]) % shape[d]) * xst[p[d]])
                .sum()
        })
        .collect();
    Ok(x.gather(shape, &idx))
}

/// `slice_by_size`; a size of -1 means "to the end".
pub(crate) fn slice(loc: &str, x: &Tensor, begin: &[i64], size: &[i64]) -> R {
    let r = x.shape.len();
    if begin.len() != r || size.len() != r {
        return Err(Error::sem(loc, "begin/size rank mismatch"));
    }
    let mut b = vec![0usize; r];
    let mut shape = vec![0usize; r];
    for d in 0..r {
        let bd = usize::try_from(begin[d]).map_err(|_| Error::sem(loc, "negative begin"))?;
        let sd = if size[d] == -1 {
            x.shape[d].saturating_sub(bd)
        } else {
            usize::try_from(size[d]).map_err(|_| Error::sem(loc, "negative size"))?
        };
        if sd == 0 || bd.checked_add(sd).is_none_or(|e| e > x.shape[d]) {
            return Err(Error::sem(
                loc,
                format!("slice {begin:?}+{size:?} outside {:?}", x.shape),
            ));
        }
        b[d] = bd;
        shape[d] = sd;
    }
    let (xst, ost) = (strides(&x.shape), strides(&shape));
    let n: usize = shape.iter().product();
    let idx: Vec<usize> = (0..n)
        .map(|flat| {
            (0..r)
                .map(|d| ((flat / ost[d]) % shape[d] + b[d]) * xst[d])
                .sum()
        })
        .collect();
    Ok(x.gather(shape, &idx))
}

/// Concatenation along `axis` (non-interleaved).
pub(crate) fn concat(loc: &str, xs: &[&Tensor], ax: i64) -> R {
    let first = xs
        .first()
        .ok_or_else(|| Error::sem(loc, "concat of nothing"))?;
    let r = first.shape.len();
    let a = axis(loc, ax, r)?;
    let mut shape = first.shape.clone();
    shape[a] = 0;
    for t in xs {
        let same = t.shape.len() == r
            && t.dtype() == first.dtype()
            && (0..r).all(|d| d == a || t.shape[d] == first.shape[d]);
        if !same {
            return Err(Error::sem(
                loc,
                format!("cannot concat {:?} with {:?}", first.shape, t.shape),
            ));
        }
        shape[a] += t.shape[a];
    }
    let outer: usize = shape[..a].iter().product();
    let inner: usize = shape[a + 1..].iter().product();
    let mut bases = Vec::with_capacity(xs.len());
    let mut acc = 0;
    for t in xs {
        bases.push(acc);
        acc += t.numel();
    }
    let mut idx = Vec::with_capacity(acc);
    for o in 0..outer {
        for (k, t) in xs.iter().enumerate() {
            let len = t.shape[a] * inner;
            idx.extend((0..len).map(|j| bases[k] + o * len + j));
        }
    }
    Ok(join(xs).gather(shape, &idx))
}

fn join(ts: &[&Tensor]) -> Tensor {
    use super::tensor::Data;
    fn cat<T: Clone>(ts: &[&Tensor], f: impl Fn(&Data) -> Option<&Vec<T>>) -> Vec<T> {
        ts.iter()
            .filter_map(|t| f(&t.data))
            .flatten()
            .cloned()
            .collect()
    }
    let n = ts.iter().map(|t| t.numel()).sum();
    let data = match ts.first().map(|t| &t.data) {
        Some(Data::F16(_)) => Data::F16(cat(
            ts,
            |d| if let Data::F16(v) = d { Some(v) } else { None },
        )),
        Some(Data::F32(_)) => Data::F32(cat(
            ts,
            |d| if let Data::F32(v) = d { Some(v) } else { None },
        )),
        Some(Data::I32(_)) => Data::I32(cat(
            ts,
            |d| if let Data::I32(v) = d { Some(v) } else { None },
        )),
        _ => Data::Bool(cat(
            ts,
            |d| if let Data::Bool(v) = d { Some(v) } else { None },
        )),
    };
    Tensor {
        shape: vec![n],
        data,
    }
}

/// `tile`: `x` repeated `reps[d]` times along every dim.
pub(crate) fn tile(loc: &str, x: &Tensor, reps: &[i64]) -> R {
    if reps.len() != x.shape.len() || reps.iter().any(|&r| r < 1) {
        return Err(Error::sem(loc, format!("reps {reps:?} for {:?}", x.shape)));
    }
    let shape: Vec<usize> = x
        .shape
        .iter()
        .zip(reps)
        .map(|(&d, &r)| d * r as usize)
        .collect();
    let n = checked_numel(loc, &shape)?;
    let (src, dst) = (strides(&x.shape), strides(&shape));
    let idx: Vec<usize> = (0..n)
        .map(|i| {
            (0..shape.len())
                .map(|d| ((i / dst[d]) % shape[d] % x.shape[d]) * src[d])
                .sum()
        })
        .collect();
    Ok(x.gather(shape, &idx))
}

/// `reverse` along `axes`.
pub(crate) fn reverse(loc: &str, x: &Tensor, axes: &[i64]) -> R {
    let r = x.shape.len();
    let mut flip = vec![false; r];
    for &a in axes {
        flip[axis(loc, a, r)?] = true;
    }
    let st = strides(&x.shape);
    let idx: Vec<usize> = (0..x.numel())
        .map(|i| {
            (0..r)
                .map(|d| {
                    let c = (i / st[d]) % x.shape[d];
                    let c = if flip[d] { x.shape[d] - 1 - c } else { c };
                    c * st[d]
                })
                .sum()
        })
        .collect();
    Ok(x.gather(x.shape.clone(), &idx))
}

/// Constant padding; `pads` holds `[before, after]` pairs for the last
/// `pads.len() / 2` dims.
pub(crate) fn pad(loc: &str, x: &Tensor, pads: &[i64], value: f32) -> R {
    let r = x.shape.len();
    if !pads.len().is_multiple_of(2) || pads.len() / 2 > r || pads.iter().any(|&p| p < 0) {
        return Err(Error::sem(loc, format!("pad {pads:?} for {:?}", x.shape)));
    }
    let lead = r - pads.len() / 2;
    let before: Vec<usize> = (0..r)
        .map(|d| {
            if d < lead {
                0
            } else {
                pads[2 * (d - lead)] as usize
            }
        })
        .collect();
    let after: Vec<usize> = (0..r)
        .map(|d| {
            if d < lead {
                0
            } else {
                pads[2 * (d - lead) + 1] as usize
            }
        })
        .collect();
    let shape: Vec<usize> = (0..r).map(|d| x.shape[d] + before[d] + after[d]).collect();
    let n = checked_numel(loc, &shape)?;
    let (src, dst) = (strides(&x.shape), strides(&shape));
    let xv = x.to_f32();
    let out: Vec<f32> = (0..n)
        .map(|i| {
            let mut flat = 0;
            for d in 0..r {
                let c = (i / dst[d]) % shape[d];
                if c < before[d] || c >= before[d] + x.shape[d] {
                    return value;
                }
                flat += (c - before[d]) * src[d];
            }
            xv[flat]
        })
        .collect();
    store(loc, float_dtype(loc, x)?, shape, &out)
}

/// `scaled_dot_product_attention` without a mask: `softmax(q·kᵀ/√E)·v` over
/// the last two dims (batch dims broadcast), f32 inside, one rounding.
pub(crate) fn sdpa(loc: &str, q: &Tensor, k: &Tensor, v: &Tensor) -> R {
    let dt = float_dtype(loc, q)?;
    let wide = |t: &Tensor| store(loc, DType::Fp32, t.shape.clone(), &t.to_f32());
    let (q, k, v) = (wide(q)?, wide(k)?, wide(v)?);
    let e = *q
        .shape
        .last()
        .ok_or_else(|| Error::sem(loc, "query of rank 0"))?;
    let scores = matmul(loc, &q, &k, false, true)?;
    let scale = 1.0 / (e as f32).sqrt();
    let scaled = unary(loc, &scores, |x| x * scale)?;
    let p = softmax(loc, &scaled, -1)?;
    let out = matmul(loc, &p, &v, false, false)?;
    store(loc, dt, out.shape.clone(), &out.to_f32())
}
