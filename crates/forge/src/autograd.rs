//! Reverse-mode gradients, emitted as ordinary graph ops: the backward pass
//! compiles to the same kind of program as the forward one.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::graph::{Binary, Graph, Node, NodeId, Op, Reduce, Tensor, Unary};
use crate::lower::{causal_mask, live_nodes};

/// Gradients of scalar `y` (one element) with respect to each of `wrt`.
///
/// A node in `wrt` that `y` does not depend on gets a zero gradient.
/// Sign and the comparison masks are treated as constants (gradient 0
/// almost everywhere); `reduce_max` and maximum/minimum route the gradient
/// to the maximal elements (ties share it in full).
pub fn grad(y: &Tensor, wrt: &[&Tensor]) -> Result<Vec<Tensor>> {
    let g = y.graph().clone();
    if wrt.iter().any(|t| !t.graph().same(&g)) {
        return Err(Error::ForeignTensor);
    }
    if y.shape().iter().product::<usize>() != 1 {
        return Err(crate::error::shape_err(
            "grad",
            format!(
                "the differentiated value must have one element, not {:?}",
                y.shape()
            ),
        ));
    }
    let order = live_nodes(&g, &[y.id()]);
    let nodes: HashMap<NodeId, Node> = order
        .iter()
        .filter_map(|&i| g.node(i).map(|n| (i, n)))
        .collect();
    // nodes on a path from some wrt to y
    let mut on_path: HashMap<NodeId, bool> = HashMap::new();
    for &i in &order {
        let n = &nodes[&i];
        let p = wrt.iter().any(|t| t.id() == i)
            || n.args
                .iter()
                .any(|a| on_path.get(a).copied().unwrap_or(false));
        on_path.insert(i, p);
    }
    let mut grads: HashMap<NodeId, Tensor> = HashMap::new();
    let seed = g.scalar(1.0)?;
    grads.insert(
        y.id(),
        if y.shape().is_empty() {
            seed
        } else {
            seed.broadcast_to(&y.shape())?
        },
    );
    for &i in order.iter().rev() {
        if !on_path[&i] {
            continue;
        }
        let Some(gout) = grads.get(&i).cloned() else {
            continue;
        };
        let n = &nodes[&i];
        let out = tensor(&g, i)?;
        let args: Vec<Tensor> = n
            .args
            .iter()
            .map(|&a| tensor(&g, a))
            .collect::<Result<_>>()?;
        let contributions = backward(n, &out, &args, &gout)?;
        for (k, c) in contributions.into_iter().enumerate() {
            let (a, Some(c)) = (n.args[k], c) else {
                continue;
            };
            if !on_path.get(&a).copied().unwrap_or(false) {
                continue;
            }
            let c = unbroadcast(&c, &nodes[&a].shape)?;
            let sum = match grads.remove(&a) {
                Some(prev) => prev.add(&c)?,
                None => c,
            };
            grads.insert(a, sum);
        }
    }
    wrt.iter()
        .map(|t| match grads.get(&t.id()) {
            Some(gr) => Ok(gr.clone()),
            None => {
                let s = t.shape();
                let zero = g.scalar(0.0)?;
                if s.is_empty() {
                    Ok(zero)
                } else {
                    zero.broadcast_to(&s)
                }
            }
        })
        .collect()
}

fn tensor(g: &Graph, id: NodeId) -> Result<Tensor> {
    g.tensor(id).ok_or(Error::ForeignTensor)
}

/// Sums `g` down to `shape` over the axes broadcasting expanded.
fn unbroadcast(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let gs = g.shape();
    if gs == shape {
        return Ok(g.clone());
    }
    let lead = gs.len() - shape.len().min(gs.len());
    let axes: Vec<isize> = (0..gs.len())
        .filter(|&d| d < lead || (shape[d - lead] == 1 && gs[d] != 1))
        .map(|d| d as isize)
        .collect();
    let s = if axes.is_empty() {
        g.clone()
    } else {
        g.sum(&axes, true)?
    };
    if shape.is_empty() {
        return if s.shape().is_empty() {
            Ok(s)
        } else {
            s.sum_all()
        };
    }
    s.reshape(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())
}

/// 1 where `x ≥ y` (so ties count), 0 elsewhere, from `sign`.
fn ge_mask(x: &Tensor, y: &Tensor) -> Result<Tensor> {
    // sign(x - y) + 1 is 2, 1 or 0; min with 1 gives the mask
    x.sub(y)?
        .sign()?
        .add_scalar(1.0)?
        .minimum(&x.graph().scalar(1.0)?)
}

/// The gradient contribution to each operand of node `n` (None: none).
fn backward(n: &Node, out: &Tensor, a: &[Tensor], g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    Ok(match &n.op {
        Op::Input | Op::Param | Op::Const | Op::Scalar(_) => vec![],
        Op::Unary(u) => {
            let x = &a[0];
            vec![match u {
                Unary::Exp => Some(g.mul(out)?),
                Unary::Log => Some(g.div(x)?),
                Unary::Sqrt => Some(g.mul_scalar(0.5)?.div(out)?),
                Unary::Rsqrt => Some(g.mul(&out.square()?.mul(out)?)?.mul_scalar(-0.5)?),
                Unary::Relu => Some(g.mul(&out.sign()?)?),
                Unary::Sigmoid => Some(g.mul(&out.mul(&out.rsub_scalar(1.0)?)?)?),
                Unary::Tanh => Some(g.mul(&out.square()?.rsub_scalar(1.0)?)?),
                Unary::Abs => Some(g.mul(&x.sign()?)?),
                Unary::Sign => None,
                Unary::Square => Some(g.mul(x)?.mul_scalar(2.0)?),
            }]
        }
        Op::Binary(b) => {
            let (x, y) = (&a[0], &a[1]);
            match b {
                Binary::Add => vec![Some(g.clone()), Some(g.clone())],
                Binary::Sub => vec![Some(g.clone()), Some(g.neg()?)],
                Binary::Mul => vec![Some(g.mul(y)?), Some(g.mul(x)?)],
                Binary::Div => vec![Some(g.div(y)?), Some(g.mul(out)?.div(y)?.neg()?)],
                Binary::Max | Binary::Min => {
                    let mx = if *b == Binary::Max {
                        ge_mask(x, y)?
                    } else {
                        ge_mask(y, x)?
                    };
                    vec![Some(g.mul(&mx)?), Some(g.mul(&mx.rsub_scalar(1.0)?)?)]
                }
            }
        }
        Op::MatMul { tx, ty } => {
            let (x, y) = (&a[0], &a[1]);
            let dx = if *tx {
                y.matmul_t(g, *ty, true)?
            } else {
                g.matmul_t(y, false, !*ty)?
            };
            let dy = if *ty {
                g.matmul_t(x, true, *tx)?
            } else {
                x.matmul_t(g, !*tx, false)?
            };
            vec![Some(dx), Some(dy)]
        }
        Op::Conv {
            stride,
            pad,
            groups,
        } => {
            let (dx, dw) = conv_backward(&a[0], &a[1], g, *stride, *pad, *groups)?;
            vec![Some(dx), Some(dw)]
        }
        Op::Reduce { kind, axes, keep } => {
            let x = &a[0];
            let xs = x.shape();
            let keep_shape: Vec<isize> = xs
                .iter()
                .enumerate()
                .map(|(d, &s)| if axes.contains(&d) { 1 } else { s as isize })
                .collect();
            let gk = if *keep {
                g.clone()
            } else {
                g.reshape(&keep_shape)?
            };
            let count: usize = axes.iter().map(|&d| xs[d]).product();
            let dx = match kind {
                Reduce::Sum => gk.broadcast_to(&xs)?,
                Reduce::Mean => gk.mul_scalar(1.0 / count as f32)?.broadcast_to(&xs)?,
                Reduce::Max => {
                    let m = if *keep {
                        out.clone()
                    } else {
                        out.reshape(&keep_shape)?
                    };
                    gk.broadcast_to(&xs)?.mul(&ge_mask(x, &m)?)?
                }
            };
            vec![Some(dx)]
        }
        Op::Softmax { axis } => {
            let gs = g.mul(out)?.sum(&[*axis as isize], true)?;
            vec![Some(out.mul(&g.sub(&gs)?)?)]
        }
        Op::Reshape => vec![Some(
            g.reshape(&a[0].shape().iter().map(|&d| d as isize).collect::<Vec<_>>())?,
        )],
        Op::Transpose { perm } => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            vec![Some(g.transpose(&inv)?)]
        }
        Op::Slice { begin } => {
            let xs = a[0].shape();
            let pads: Vec<[usize; 2]> = (0..xs.len())
                .map(|d| [begin[d], xs[d] - begin[d] - n.shape[d]])
                .collect();
            vec![Some(g.pad(&pads)?)]
        }
        Op::Concat { axis } => {
            let mut off = 0;
            let mut v = Vec::with_capacity(a.len());
            for t in a {
                let s = t.shape();
                let mut begin = vec![0; s.len()];
                begin[*axis] = off;
                off += s[*axis];
                v.push(Some(g.slice(&begin, &s)?));
            }
            v
        }
        Op::Tile { reps } => {
            let xs = a[0].shape();
            // [r0, d0, r1, d1, …], summed over the r axes
            let split: Vec<isize> = reps
                .iter()
                .zip(&xs)
                .flat_map(|(&r, &d)| [r as isize, d as isize])
                .collect();
            let rep_axes: Vec<isize> = (0..xs.len()).map(|d| 2 * d as isize).collect();
            let s = g.reshape(&split)?.sum(&rep_axes, false)?;
            vec![Some(s)]
        }
        Op::Pad { pads } => {
            let xs = a[0].shape();
            let begin: Vec<usize> = pads.iter().map(|p| p[0]).collect();
            vec![Some(g.slice(&begin, &xs)?)]
        }
        Op::Reverse { axes } => vec![Some(
            g.reverse(&axes.iter().map(|&d| d as isize).collect::<Vec<_>>())?,
        )],
        Op::Attention { causal } => attention_backward(&a[0], &a[1], &a[2], g, *causal)?,
        Op::CrossEntropy => {
            let (x, t) = (&a[0], &a[1]);
            let bsz = x.shape()[0] as f32;
            let gb = g.mul_scalar(1.0 / bsz)?;
            let p = x.softmax(-1)?;
            let dx = p.sub(t)?.mul(&gb)?;
            // d/dt = −log softmax(x) / B
            let m = x.max(&[-1], true)?;
            let z = x.sub(&m)?;
            let lse = z.exp()?.sum(&[-1], true)?.log()?;
            let dt = lse.sub(&z)?.mul(&gb)?;
            vec![Some(dx), Some(dt)]
        }
    })
}

/// `g` `[N, C, H, W]` with `s − 1` zeros inserted between rows and between
/// columns (`[N, C, (H−1)·s₀+1, (W−1)·s₁+1]`): the stride undone.
fn dilate(g: &Tensor, s: [usize; 2]) -> Result<Tensor> {
    if s == [1, 1] {
        return Ok(g.clone());
    }
    let gs = g.shape();
    let (n, c, h, w) = (gs[0], gs[1], gs[2], gs[3]);
    let i = |v: usize| v as isize;
    // [N·C, H, 1, W, 1] padded to [N·C, H, s₀, W, s₁], then trimmed
    let spread = g
        .reshape(&[i(n * c), i(h), 1, i(w), 1])?
        .pad(&[[0, 0], [0, 0], [0, s[0] - 1], [0, 0], [0, s[1] - 1]])?
        .reshape(&[i(n), i(c), i(h * s[0]), i(w * s[1])])?;
    spread.slice(
        &[0, 0, 0, 0],
        &[n, c, (h - 1) * s[0] + 1, (w - 1) * s[1] + 1],
    )
}

/// Channel block `k` of `groups` along axis `axis` of a rank-4 tensor.
fn group_block(t: &Tensor, axis: usize, k: usize, groups: usize) -> Result<Tensor> {
    let mut size = t.shape();
    size[axis] /= groups;
    let mut begin = vec![0; 4];
    begin[axis] = k * size[axis];
    t.slice(&begin, &size)
}

/// Gradients of `conv(x, w)` (NCHW, any stride, padding and groups) as convs:
/// dx is the full correlation of the stride-dilated gradient with the
/// flipped kernel (in/out swapped per group), trimmed to the unpadded input;
/// dw correlates the padded input with the dilated gradient, batch as
/// channels, one group at a time.
fn conv_backward(
    x: &Tensor,
    w: &Tensor,
    g: &Tensor,
    stride: [usize; 2],
    pad: [usize; 4],
    groups: usize,
) -> Result<(Tensor, Tensor)> {
    let (xs, ws) = (x.shape(), w.shape());
    let (kh, kw) = (ws[2], ws[3]);
    let (hp, wp) = (xs[2] + pad[0] + pad[1], xs[3] + pad[2] + pad[3]);
    let gd = dilate(g, stride)?;
    let gds = gd.shape();
    // rows/cols of the padded input no output position reached (stride leftovers)
    let (rh, rw) = (hp - (gds[2] + kh - 1), wp - (gds[3] + kw - 1));
    // flipped kernel, in/out swapped within each group: [Cin, Cout/groups, kh, kw]
    let (co, ci) = (ws[0], ws[1]);
    let wf = w
        .reverse(&[2, 3])?
        .reshape(&[
            groups as isize,
            (co / groups) as isize,
            ci as isize,
            kh as isize,
            kw as isize,
        ])?
        .transpose(&[0, 2, 1, 3, 4])?
        .reshape(&[
            (ci * groups) as isize,
            (co / groups) as isize,
            kh as isize,
            kw as isize,
        ])?;
    let full = gd
        .pad(&[[0, 0], [0, 0], [kh - 1, kh - 1 + rh], [kw - 1, kw - 1 + rw]])?
        .conv2d(&wf, [1, 1], [0; 4], groups)?;
    let dx = full.slice(&[0, 0, pad[0], pad[2]], &xs)?;
    let xp = x.pad(&[[0, 0], [0, 0], [pad[0], pad[1]], [pad[2], pad[3]]])?;
    let mut blocks = Vec::with_capacity(groups);
    for k in 0..groups {
        let xk = group_block(&xp, 1, k, groups)?.transpose(&[1, 0, 2, 3])?;
        let gk = group_block(&gd, 1, k, groups)?.transpose(&[1, 0, 2, 3])?;
        // [Cin/groups, Cout/groups, kh + rh, kw + rw] → the kernel's extent
        let d = xk.conv2d(&gk, [1, 1], [0; 4], 1)?;
        let d = d.slice(&[0, 0, 0, 0], &[ci, co / groups, kh, kw])?;
        blocks.push(d.transpose(&[1, 0, 2, 3])?);
    }
    let dw = if groups == 1 {
        blocks.remove(0)
    } else {
        let refs: Vec<&Tensor> = blocks.iter().collect();
        x.graph().concat(&refs, 0)?
    };
    Ok((dx, dw))
}

/// Gradients of `softmax(q·kᵀ/√d + mask)·v`, recomputing the probabilities.
fn attention_backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    causal: bool,
) -> Result<Vec<Option<Tensor>>> {
    let qs = q.shape();
    let r = qs.len();
    let (s, d, t) = (qs[r - 2], qs[r - 1], k.shape()[r - 2]);
    let scale = 1.0 / (d as f32).sqrt();
    let mut sc = q.matmul_t(k, false, true)?.mul_scalar(scale)?;
    if causal {
        sc = sc.add(&q.graph().constant(&[s, t], causal_mask(s, t))?)?;
    }
    let p = sc.softmax(-1)?;
    let dv = p.matmul_t(g, true, false)?;
    let dp = g.matmul_t(v, false, true)?;
    let ds = p
        .mul(&dp.sub(&dp.mul(&p)?.sum(&[-1], true)?)?)?
        .mul_scalar(scale)?;
    let dq = ds.matmul(k)?;
    let dk = ds.matmul_t(q, true, false)?;
    Ok(vec![Some(dq), Some(dk), Some(dv)])
}
