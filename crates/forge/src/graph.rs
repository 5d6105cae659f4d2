//! The lazy tensor graph: nodes with shapes inferred as they are built.
//!
//! A [`Graph`] is an append-only arena shared by its [`Tensor`] handles;
//! building an op checks its operands and infers its shape at once, so a
//! shape error names the op that caused it, not a later compile. Every value
//! is fp16 on the engine (the ANE computes in fp16; `compile` says so).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{shape_err, Error, Result};

/// Index of a node in its graph.
pub type NodeId = usize;

/// Element-wise functions of one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unary {
    /// `e^x`.
    Exp,
    /// Natural log.
    Log,
    /// `√x`.
    Sqrt,
    /// `1/√x`.
    Rsqrt,
    /// `max(x, 0)`.
    Relu,
    /// `1/(1+e^-x)`.
    Sigmoid,
    /// `tanh x`.
    Tanh,
    /// `|x|`.
    Abs,
    /// −1, 0 or 1.
    Sign,
    /// `x²`.
    Square,
}

impl Unary {
    /// The MIL op that computes it.
    pub fn mil(self) -> &'static str {
        match self {
            Unary::Exp => "exp",
            Unary::Log => "log",
            Unary::Sqrt => "sqrt",
            Unary::Rsqrt => "rsqrt",
            Unary::Relu => "relu",
            Unary::Sigmoid => "sigmoid",
            Unary::Tanh => "tanh",
            Unary::Abs => "abs",
            Unary::Sign => "sign",
            Unary::Square => "square",
        }
    }
}

/// Element-wise functions of two operands (numpy broadcasting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {
    /// `x + y`.
    Add,
    /// `x − y`.
    Sub,
    /// `x · y`.
    Mul,
    /// `x / y`.
    Div,
    /// `max(x, y)`.
    Max,
    /// `min(x, y)`.
    Min,
}

impl Binary {
    /// The op's short name.
    pub fn name(self) -> &'static str {
        match self {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "mul",
            Binary::Div => "div",
            Binary::Max => "maximum",
            Binary::Min => "minimum",
        }
    }
}

/// Reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduce {
    /// Sum.
    Sum,
    /// Arithmetic mean.
    Mean,
    /// Maximum.
    Max,
}

/// A graph op. Operands are the node's `args`, in the order listed.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A value supplied at every run.
    Input,
    /// A trainable weight with initial values (baked into the program, or
    /// carried as state by a training step).
    Param,
    /// A constant tensor.
    Const,
    /// A constant scalar, broadcast.
    Scalar(f32),
    /// Element-wise unary.
    Unary(Unary),
    /// Element-wise binary (x, y).
    Binary(Binary),
    /// Batched matmul over the last two dims (x, y).
    MatMul {
        /// Transpose x's last two dims first.
        tx: bool,
        /// Transpose y's last two dims first.
        ty: bool,
    },
    /// 2-D convolution, NCHW (x, weight `[Cout, Cin/groups, KH, KW]`).
    Conv {
        /// Strides (h, w).
        stride: [usize; 2],
        /// Padding `[top, bottom, left, right]`.
        pad: [usize; 4],
        /// Channel groups.
        groups: usize,
    },
    /// Reduction over `axes`.
    Reduce {
        /// Which reduction.
        kind: Reduce,
        /// Reduced axes, ascending, non-negative.
        axes: Vec<usize>,
        /// Keep reduced axes as size 1.
        keep: bool,
    },
    /// Softmax along `axis` (native op or decomposed: a lowering choice).
    Softmax {
        /// The axis.
        axis: usize,
    },
    /// Row-major reshape to the node's shape.
    Reshape,
    /// Axis permutation.
    Transpose {
        /// `out.shape[i] = x.shape[perm[i]]`.
        perm: Vec<usize>,
    },
    /// Static slice of the node's shape starting at `begin`.
    Slice {
        /// First index per dim.
        begin: Vec<usize>,
    },
    /// Concatenation along `axis` (any number of operands).
    Concat {
        /// The axis.
        axis: usize,
    },
    /// Repetition along every dim.
    Tile {
        /// Repeats per dim.
        reps: Vec<usize>,
    },
    /// Zero padding.
    Pad {
        /// `[before, after]` per dim.
        pads: Vec<[usize; 2]>,
    },
    /// Order reversed along `axes`.
    Reverse {
        /// Reversed axes.
        axes: Vec<usize>,
    },
    /// `softmax(q·kᵀ/√d (+ causal mask))·v` over `[…, S, D]` operands (q, k, v):
    /// one composite op or its decomposition, a lowering choice.
    Attention {
        /// Query i attends to keys ≤ i only.
        causal: bool,
    },
    /// Mean softmax cross-entropy of logits `[B, C]` against targets `[B, C]`
    /// (one-hot or probabilities), a scalar; its gradient is the stable
    /// `(softmax − target)/B`.
    CrossEntropy,
}

impl Op {
    /// A short name for messages and MIL value names.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::Param => "param",
            Op::Const => "const",
            Op::Scalar(_) => "scalar",
            Op::Unary(u) => u.mil(),
            Op::Binary(b) => b.name(),
            Op::MatMul { .. } => "matmul",
            Op::Conv { .. } => "conv",
            Op::Reduce { kind, .. } => match kind {
                Reduce::Sum => "reduce_sum",
                Reduce::Mean => "reduce_mean",
                Reduce::Max => "reduce_max",
            },
            Op::Softmax { .. } => "softmax",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Tile { .. } => "tile",
            Op::Pad { .. } => "pad",
            Op::Reverse { .. } => "reverse",
            Op::Attention { .. } => "attention",
            Op::CrossEntropy => "cross_entropy",
        }
    }
}

/// One node: its op, operands, inferred shape and name.
#[derive(Debug, Clone)]
pub struct Node {
    /// The op.
    pub op: Op,
    /// Operand node ids.
    pub args: Vec<NodeId>,
    /// Inferred shape (empty: a scalar).
    pub shape: Vec<usize>,
    /// Unique name: the caller's, or `{op}_{id}`.
    pub name: String,
}

#[derive(Debug, Default)]
pub(crate) struct Inner {
    pub(crate) nodes: Vec<Node>,
    /// Values of `Param` and `Const` nodes.
    pub(crate) values: HashMap<NodeId, Arc<Vec<f32>>>,
}

/// A graph under construction (cheap to clone: handles share it).
#[derive(Debug, Clone, Default)]
pub struct Graph(Arc<Mutex<Inner>>);

/// A handle to one node of a [`Graph`].
#[derive(Debug, Clone)]
pub struct Tensor {
    graph: Graph,
    id: NodeId,
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// numpy broadcast of two shapes.
pub(crate) fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = (i + a.len()).checked_sub(r).map_or(1, |j| a[j]);
            let db = (i + b.len()).checked_sub(r).map_or(1, |j| b[j]);
            match (da, db) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

fn norm_axis(op: &'static str, a: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let n = if a < 0 { a + r } else { a };
    if n < 0 || n >= r {
        return Err(shape_err(
            op,
            format!("axis {a} out of range for rank {rank}"),
        ));
    }
    Ok(n as usize)
}

fn norm_axes(op: &'static str, axes: &[isize], rank: usize) -> Result<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| norm_axis(op, a, rank))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    out.dedup();
    if out.len() != axes.len() {
        return Err(shape_err(op, format!("repeated axis in {axes:?}")));
    }
    Ok(out)
}

/// Largest element count of one tensor (2^28 fp16 values = 512 MiB).
const MAX_ELEMENTS: usize = 1 << 28;

fn check_shape(op: &'static str, shape: &[usize]) -> Result<()> {
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS);
    match n {
        Some(0) => Err(shape_err(op, format!("shape {shape:?} has a zero dim"))),
        Some(_) => Ok(()),
        None => Err(shape_err(op, format!("shape {shape:?} is too large"))),
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held cannot leave a half-built node (a
        // node is pushed whole), so a poisoned lock is still consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn same(&self, other: &Graph) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.lock().nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `base`, or `base_1`, `base_2`, ...: the first name no node has.
    pub fn fresh_name(&self, base: &str) -> String {
        let g = self.lock();
        anedvd_mil::builder::first_free(base, |n| g.nodes.iter().any(|x| x.name == n))
    }

    /// A copy of node `id`.
    pub fn node(&self, id: NodeId) -> Option<Node> {
        self.lock().nodes.get(id).cloned()
    }

    /// The values of a `Param`/`Const` node.
    pub fn values(&self, id: NodeId) -> Option<Arc<Vec<f32>>> {
        self.lock().values.get(&id).cloned()
    }

    /// The handle of node `id`.
    pub fn tensor(&self, id: NodeId) -> Option<Tensor> {
        (id < self.len()).then(|| Tensor {
            graph: self.clone(),
            id,
        })
    }

    fn push(
        &self,
        op: Op,
        args: Vec<NodeId>,
        shape: Vec<usize>,
        name: Option<&str>,
    ) -> Result<Tensor> {
        check_shape(op.name(), &shape)?;
        let mut g = self.lock();
        let id = g.nodes.len();
        let name = match name {
            Some(n) => {
                if !is_ident(n) {
                    return Err(shape_err(
                        op.name(),
                        format!("`{n}` is not a valid name (letters, digits, _)"),
                    ));
                }
                if g.nodes.iter().any(|x| x.name == n) {
                    return Err(shape_err(
                        op.name(),
                        format!("the name `{n}` is already used"),
                    ));
                }
                n.to_string()
            }
            None => format!("{}_{id}", op.name()),
        };
        g.nodes.push(Node {
            op,
            args,
            shape,
            name,
        });
        drop(g);
        Ok(Tensor {
            graph: self.clone(),
            id,
        })
    }

    /// A named input of `shape`, supplied at every run.
    pub fn input(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.push(Op::Input, vec![], shape.to_vec(), Some(name))
    }

    /// A named trainable weight with initial `values` (row-major).
    pub fn param(&self, name: &str, shape: &[usize], values: Vec<f32>) -> Result<Tensor> {
        self.valued(Op::Param, shape, values, Some(name))
    }

    /// A constant tensor.
    pub fn constant(&self, shape: &[usize], values: Vec<f32>) -> Result<Tensor> {
        self.valued(Op::Const, shape, values, None)
    }

    fn valued(
        &self,
        op: Op,
        shape: &[usize],
        values: Vec<f32>,
        name: Option<&str>,
    ) -> Result<Tensor> {
        let what = op.name();
        check_shape(what, shape)?;
        if values.len() != numel(shape) {
            return Err(shape_err(
                what,
                format!("{} values for shape {shape:?}", values.len()),
            ));
        }
        if values.iter().any(|v| !v.is_finite()) {
            return Err(shape_err(what, "values must be finite"));
        }
        let t = self.push(op, vec![], shape.to_vec(), name)?;
        self.lock().values.insert(t.id, Arc::new(values));
        Ok(t)
    }

    /// A constant scalar (broadcasts against anything).
    pub fn scalar(&self, v: f32) -> Result<Tensor> {
        if !v.is_finite() {
            return Err(shape_err("scalar", format!("{v} is not finite")));
        }
        self.push(Op::Scalar(v), vec![], vec![], None)
    }

    /// Concatenation along `axis`.
    pub fn concat(&self, xs: &[&Tensor], axis: isize) -> Result<Tensor> {
        if xs.is_empty() {
            return Err(shape_err("concat", "nothing to concatenate"));
        }
        let ids = xs.iter().map(|t| self.own(t)).collect::<Result<Vec<_>>>()?;
        let shapes: Vec<Vec<usize>> = xs.iter().map(|t| t.shape()).collect();
        let r = shapes[0].len();
        let a = norm_axis("concat", axis, r)?;
        let mut shape = shapes[0].clone();
        shape[a] = 0;
        for s in &shapes {
            if s.len() != r || (0..r).any(|d| d != a && s[d] != shapes[0][d]) {
                return Err(shape_err(
                    "concat",
                    format!("cannot concat {:?} with {s:?}", shapes[0]),
                ));
            }
            shape[a] += s[a];
        }
        self.push(Op::Concat { axis: a }, ids, shape, None)
    }

    fn own(&self, t: &Tensor) -> Result<NodeId> {
        if self.same(&t.graph) {
            Ok(t.id)
        } else {
            Err(Error::ForeignTensor)
        }
    }

    pub(crate) fn op(&self, op: Op, args: &[&Tensor]) -> Result<Tensor> {
        let ids = args
            .iter()
            .map(|t| self.own(t))
            .collect::<Result<Vec<_>>>()?;
        let shapes: Vec<Vec<usize>> = {
            let g = self.lock();
            ids.iter().map(|&i| g.nodes[i].shape.clone()).collect()
        };
        let shape = infer(&op, &shapes)?;
        self.push(op, ids, shape, None)
    }
}

/// The output shape of `op` on operands of `shapes`.
fn infer(op: &Op, shapes: &[Vec<usize>]) -> Result<Vec<usize>> {
    let name = op.name();
    let want = |n: usize| -> Result<()> {
        if shapes.len() == n {
            Ok(())
        } else {
            Err(shape_err(
                name,
                format!("takes {n} operands, got {}", shapes.len()),
            ))
        }
    };
    let x = shapes.first().cloned().unwrap_or_default();
    Ok(match op {
        Op::Input
        | Op::Param
        | Op::Const
        | Op::Scalar(_)
        | Op::Reshape
        | Op::Slice { .. }
        | Op::Concat { .. } => return Err(shape_err(name, "built by its own constructor")),
        Op::Unary(_) => {
            want(1)?;
            x
        }
        Op::Binary(_) => {
            want(2)?;
            broadcast(&x, &shapes[1]).ok_or_else(|| {
                shape_err(name, format!("{x:?} and {:?} do not broadcast", shapes[1]))
            })?
        }
        Op::MatMul { tx, ty } => {
            want(2)?;
            let y = &shapes[1];
            if x.len() < 2 || y.len() < 2 {
                return Err(shape_err(
                    name,
                    format!("needs rank >= 2, got {x:?} and {y:?}"),
                ));
            }
            let (xr, yr) = (x.len(), y.len());
            let (m, k) = if *tx {
                (x[xr - 1], x[xr - 2])
            } else {
                (x[xr - 2], x[xr - 1])
            };
            let (k2, n) = if *ty {
                (y[yr - 1], y[yr - 2])
            } else {
                (y[yr - 2], y[yr - 1])
            };
            let batch = broadcast(&x[..xr - 2], &y[..yr - 2]);
            match (k == k2, batch) {
                (true, Some(mut b)) => {
                    b.extend([m, n]);
                    b
                }
                _ => return Err(shape_err(name, format!("{x:?} @ {y:?}"))),
            }
        }
        Op::Conv {
            stride,
            pad,
            groups,
        } => {
            want(2)?;
            let w = &shapes[1];
            if x.len() != 4 || w.len() != 4 {
                return Err(shape_err(
                    name,
                    "x is [N, C, H, W] and weight [Cout, Cin/groups, KH, KW]",
                ));
            }
            let g = *groups;
            if g == 0
                || !x[1].is_multiple_of(g)
                || !w[0].is_multiple_of(g)
                || w[1] * g != x[1]
                || stride.contains(&0)
            {
                return Err(shape_err(
                    name,
                    format!("x {x:?}, weight {w:?}, groups {g}"),
                ));
            }
            let (h, wd) = (x[2] + pad[0] + pad[1], x[3] + pad[2] + pad[3]);
            if h < w[2] || wd < w[3] {
                return Err(shape_err(name, "kernel larger than the padded input"));
            }
            vec![
                x[0],
                w[0],
                (h - w[2]) / stride[0] + 1,
                (wd - w[3]) / stride[1] + 1,
            ]
        }
        Op::Reduce { axes, keep, .. } => {
            want(1)?;
            x.iter()
                .enumerate()
                .filter_map(|(d, &n)| match (axes.contains(&d), keep) {
                    (true, true) => Some(1),
                    (true, false) => None,
                    (false, _) => Some(n),
                })
                .collect()
        }
        Op::Softmax { .. } => {
            want(1)?;
            x
        }
        Op::Transpose { perm } => {
            want(1)?;
            let mut s = perm.clone();
            s.sort_unstable();
            if s != (0..x.len()).collect::<Vec<_>>() {
                return Err(shape_err(
                    name,
                    format!("{perm:?} is not a permutation of rank {}", x.len()),
                ));
            }
            perm.iter().map(|&p| x[p]).collect()
        }
        Op::Tile { reps } => {
            want(1)?;
            if reps.len() != x.len() || reps.contains(&0) {
                return Err(shape_err(name, format!("reps {reps:?} for {x:?}")));
            }
            x.iter().zip(reps).map(|(a, b)| a * b).collect()
        }
        Op::Pad { pads } => {
            want(1)?;
            if pads.len() != x.len() {
                return Err(shape_err(
                    name,
                    format!("{} pads for rank {}", pads.len(), x.len()),
                ));
            }
            x.iter().zip(pads).map(|(d, [a, b])| d + a + b).collect()
        }
        Op::Reverse { .. } => {
            want(1)?;
            x
        }
        Op::Attention { .. } => {
            want(3)?;
            let (k, v) = (&shapes[1], &shapes[2]);
            let r = x.len();
            let ok = r >= 2
                && k.len() == r
                && v.len() == r
                && x[..r - 2] == k[..r - 2]
                && k[..r - 2] == v[..r - 2]
                && x[r - 1] == k[r - 1]
                && k[r - 2] == v[r - 2];
            if !ok {
                return Err(shape_err(
                    name,
                    format!("q {x:?}, k {k:?}, v {v:?} (q [.., S, D], k [.., T, D], v [.., T, E])"),
                ));
            }
            let mut s = x.clone();
            s[r - 1] = v[r - 1];
            s
        }
        Op::CrossEntropy => {
            want(2)?;
            if x.len() != 2 || shapes[1] != x {
                return Err(shape_err(
                    name,
                    format!(
                        "logits {x:?} and targets {:?} must both be [B, C]",
                        shapes[1]
                    ),
                ));
            }
            vec![]
        }
    })
}

impl Tensor {
    /// The graph this tensor belongs to.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The inferred shape.
    pub fn shape(&self) -> Vec<usize> {
        self.graph.lock().nodes[self.id].shape.clone()
    }

    /// The node's name.
    pub fn name(&self) -> String {
        self.graph.lock().nodes[self.id].name.clone()
    }

    /// The node's op.
    pub fn op(&self) -> Op {
        self.graph.lock().nodes[self.id].op.clone()
    }

    /// Renames the node (names appear in validation errors and MIL).
    pub fn named(self, name: &str) -> Result<Tensor> {
        if !is_ident(name) {
            return Err(shape_err(
                "name",
                format!("`{name}` is not a valid name (letters, digits, _)"),
            ));
        }
        let mut g = self.graph.lock();
        if g.nodes
            .iter()
            .enumerate()
            .any(|(i, n)| n.name == name && i != self.id)
        {
            return Err(shape_err(
                "name",
                format!("the name `{name}` is already used"),
            ));
        }
        if matches!(g.nodes[self.id].op, Op::Input | Op::Param) {
            return Err(shape_err(
                "name",
                "inputs and params keep the name they were declared with",
            ));
        }
        g.nodes[self.id].name = name.to_string();
        drop(g);
        Ok(self)
    }

    fn un(&self, u: Unary) -> Result<Tensor> {
        self.graph.op(Op::Unary(u), &[self])
    }

    fn bin(&self, b: Binary, y: &Tensor) -> Result<Tensor> {
        self.graph.op(Op::Binary(b), &[self, y])
    }

    fn bin_scalar(&self, b: Binary, v: f32) -> Result<Tensor> {
        let s = self.graph.scalar(v)?;
        self.bin(b, &s)
    }

    /// `self + y`.
    pub fn add(&self, y: &Tensor) -> Result<Tensor> {
        self.bin(Binary::Add, y)
    }
    /// `self − y`.
    pub fn sub(&self, y: &Tensor) -> Result<Tensor> {
        self.bin(Binary::Sub, y)
    }
    /// `self · y` (element-wise).
    pub fn mul(&self, y: &Tensor) -> Result<Tensor> {
        self.bin(Binary::Mul, y)
    }
    /// `self / y`.
    pub fn div(&self, y: &Tensor) -> Result<Tensor> {
        self.bin(Binary::Div, y)
    }
    /// Element-wise maximum.
    pub fn maximum(&self, y: &Tensor) -> Result<Tensor> {
        self.bin(Binary::Max, y)
    }
    /// Element-wise minimum.
    pub fn minimum(&self, y: &Tensor) -> Result<Tensor> {
        self.bin(Binary::Min, y)
    }
    /// `self + v`.
    pub fn add_scalar(&self, v: f32) -> Result<Tensor> {
        self.bin_scalar(Binary::Add, v)
    }
    /// `self · v`.
    pub fn mul_scalar(&self, v: f32) -> Result<Tensor> {
        self.bin_scalar(Binary::Mul, v)
    }
    /// `v − self`.
    pub fn rsub_scalar(&self, v: f32) -> Result<Tensor> {
        self.graph.scalar(v)?.sub(self)
    }
    /// `v / self`.
    pub fn rdiv_scalar(&self, v: f32) -> Result<Tensor> {
        self.graph.scalar(v)?.div(self)
    }
    /// `−self`.
    pub fn neg(&self) -> Result<Tensor> {
        self.mul_scalar(-1.0)
    }
    /// `e^self`.
    pub fn exp(&self) -> Result<Tensor> {
        self.un(Unary::Exp)
    }
    /// Natural log.
    pub fn log(&self) -> Result<Tensor> {
        self.un(Unary::Log)
    }
    /// Square root.
    pub fn sqrt(&self) -> Result<Tensor> {
        self.un(Unary::Sqrt)
    }
    /// `1/√self`.
    pub fn rsqrt(&self) -> Result<Tensor> {
        self.un(Unary::Rsqrt)
    }
    /// ReLU.
    pub fn relu(&self) -> Result<Tensor> {
        self.un(Unary::Relu)
    }
    /// Logistic sigmoid.
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.un(Unary::Sigmoid)
    }
    /// tanh.
    pub fn tanh(&self) -> Result<Tensor> {
        self.un(Unary::Tanh)
    }
    /// `|self|`.
    pub fn abs(&self) -> Result<Tensor> {
        self.un(Unary::Abs)
    }
    /// Sign (−1, 0, 1).
    pub fn sign(&self) -> Result<Tensor> {
        self.un(Unary::Sign)
    }
    /// `self²`.
    pub fn square(&self) -> Result<Tensor> {
        self.un(Unary::Square)
    }
    /// SiLU as `x·sigmoid(x)`: the ANE's native silu loses precision
    /// (precision rule PREC-SILU), so it is never emitted.
    pub fn silu(&self) -> Result<Tensor> {
        self.mul(&self.sigmoid()?)
    }
    /// GELU, tanh approximation.
    pub fn gelu(&self) -> Result<Tensor> {
        let inner = self.add(&self.square()?.mul(self)?.mul_scalar(0.044715)?)?;
        let t = inner
            .mul_scalar((2.0 / std::f32::consts::PI).sqrt())?
            .tanh()?;
        self.mul(&t.add_scalar(1.0)?.mul_scalar(0.5)?)
    }

    /// Matrix product over the last two dims (batched, broadcasting).
    pub fn matmul(&self, y: &Tensor) -> Result<Tensor> {
        self.matmul_t(y, false, false)
    }
    /// Matrix product with optional transposes of either operand.
    pub fn matmul_t(&self, y: &Tensor, tx: bool, ty: bool) -> Result<Tensor> {
        self.graph.op(Op::MatMul { tx, ty }, &[self, y])
    }
    /// 2-D convolution (NCHW) with `weight` `[Cout, Cin/groups, KH, KW]`.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        stride: [usize; 2],
        pad: [usize; 4],
        groups: usize,
    ) -> Result<Tensor> {
        self.graph.op(
            Op::Conv {
                stride,
                pad,
                groups,
            },
            &[self, weight],
        )
    }

    fn reduce(&self, kind: Reduce, axes: &[isize], keep: bool) -> Result<Tensor> {
        let name = Op::Reduce {
            kind,
            axes: vec![],
            keep,
        }
        .name();
        let axes = norm_axes(name, axes, self.shape().len())?;
        if axes.is_empty() {
            return Err(shape_err(name, "no axes"));
        }
        self.graph.op(Op::Reduce { kind, axes, keep }, &[self])
    }
    /// Sum over `axes`.
    pub fn sum(&self, axes: &[isize], keep: bool) -> Result<Tensor> {
        self.reduce(Reduce::Sum, axes, keep)
    }
    /// Mean over `axes`.
    pub fn mean(&self, axes: &[isize], keep: bool) -> Result<Tensor> {
        self.reduce(Reduce::Mean, axes, keep)
    }
    /// Maximum over `axes`.
    pub fn max(&self, axes: &[isize], keep: bool) -> Result<Tensor> {
        self.reduce(Reduce::Max, axes, keep)
    }
    /// Sum of every element, as a scalar.
    pub fn sum_all(&self) -> Result<Tensor> {
        let r = self.shape().len() as isize;
        let t = self.sum(&(0..r).collect::<Vec<_>>(), false)?;
        Ok(t)
    }
    /// Softmax along `axis`.
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        let axis = norm_axis("softmax", axis, self.shape().len())?;
        self.graph.op(Op::Softmax { axis }, &[self])
    }

    /// Row-major reshape (one dim may be `-1`).
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor> {
        let n = numel(&self.shape());
        let known: usize = shape
            .iter()
            .filter(|&&d| d > 0)
            .map(|&d| d as usize)
            .product();
        let free = shape.iter().filter(|&&d| d == -1).count();
        let bad = shape.iter().any(|&d| d == 0 || d < -1) || free > 1;
        let resolved: Vec<usize> = shape
            .iter()
            .map(|&d| {
                if d == -1 {
                    n / known.max(1)
                } else {
                    d as usize
                }
            })
            .collect();
        if bad || numel(&resolved) != n {
            return Err(shape_err(
                "reshape",
                format!("{:?} to {shape:?}", self.shape()),
            ));
        }
        let own = self.graph.own(self)?;
        self.graph.push(Op::Reshape, vec![own], resolved, None)
    }
    /// Axis permutation.
    pub fn transpose(&self, perm: &[usize]) -> Result<Tensor> {
        self.graph.op(
            Op::Transpose {
                perm: perm.to_vec(),
            },
            &[self],
        )
    }
    /// The last two dims swapped.
    pub fn t(&self) -> Result<Tensor> {
        let r = self.shape().len();
        if r < 2 {
            return Err(shape_err("transpose", "needs rank >= 2"));
        }
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.transpose(&perm)
    }
    /// Static slice `self[begin .. begin + size]`.
    pub fn slice(&self, begin: &[usize], size: &[usize]) -> Result<Tensor> {
        let s = self.shape();
        let ok = begin.len() == s.len()
            && size.len() == s.len()
            && (0..s.len())
                .all(|d| size[d] > 0 && begin[d].checked_add(size[d]).is_some_and(|e| e <= s[d]));
        if !ok {
            return Err(shape_err("slice", format!("{begin:?} + {size:?} of {s:?}")));
        }
        let own = self.graph.own(self)?;
        self.graph.push(
            Op::Slice {
                begin: begin.to_vec(),
            },
            vec![own],
            size.to_vec(),
            None,
        )
    }
    /// Repetition along every dim.
    pub fn tile(&self, reps: &[usize]) -> Result<Tensor> {
        self.graph.op(
            Op::Tile {
                reps: reps.to_vec(),
            },
            &[self],
        )
    }
    /// Zero padding, `[before, after]` per dim.
    pub fn pad(&self, pads: &[[usize; 2]]) -> Result<Tensor> {
        self.graph.op(
            Op::Pad {
                pads: pads.to_vec(),
            },
            &[self],
        )
    }
    /// Order reversed along `axes`.
    pub fn reverse(&self, axes: &[isize]) -> Result<Tensor> {
        let axes = norm_axes("reverse", axes, self.shape().len())?;
        self.graph.op(Op::Reverse { axes }, &[self])
    }
    /// Broadcast to `shape` (by `tile`, after padding the rank with 1s).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        let s = self.shape();
        if s == shape {
            return Ok(self.clone());
        }
        if broadcast(&s, shape).as_deref() != Some(shape) {
            return Err(shape_err("broadcast", format!("{s:?} to {shape:?}")));
        }
        let mut padded = vec![1usize; shape.len() - s.len()];
        padded.extend(&s);
        let x = if padded.len() == s.len() {
            self.clone()
        } else {
            self.reshape(&padded.iter().map(|&d| d as isize).collect::<Vec<_>>())?
        };
        let reps: Vec<usize> = shape
            .iter()
            .zip(&padded)
            .map(|(&t, &p)| if p == t { 1 } else { t })
            .collect();
        x.tile(&reps)
    }

    /// Scaled dot-product attention over `[…, S, D]` operands.
    pub fn attention(&self, k: &Tensor, v: &Tensor, causal: bool) -> Result<Tensor> {
        self.graph.op(Op::Attention { causal }, &[self, k, v])
    }
    /// Mean softmax cross-entropy of logits `[B, C]` against targets `[B, C]`.
    pub fn cross_entropy(&self, targets: &Tensor) -> Result<Tensor> {
        self.graph.op(Op::CrossEntropy, &[self, targets])
    }

    /// Layer norm over `axes` (mean and variance over them), then `· gamma + beta`.
    pub fn layer_norm(
        &self,
        axes: &[isize],
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        let mu = self.mean(axes, true)?;
        let c = self.sub(&mu)?;
        let var = c.square()?.mean(axes, true)?;
        let y = c.mul(&var.add_scalar(eps)?.rsqrt()?)?;
        affine(y, gamma, beta)
    }
    /// RMS norm over `axes`, then `· gamma`.
    pub fn rms_norm(&self, axes: &[isize], gamma: Option<&Tensor>, eps: f32) -> Result<Tensor> {
        let ms = self.square()?.mean(axes, true)?;
        affine(self.mul(&ms.add_scalar(eps)?.rsqrt()?)?, gamma, None)
    }
    /// Group norm of NCHW (or `[N, C, …]`) input over `groups` channel groups.
    pub fn group_norm(
        &self,
        groups: usize,
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        let s = self.shape();
        if s.len() < 2 || groups == 0 || !s[1].is_multiple_of(groups) {
            return Err(shape_err(
                "group_norm",
                format!("{groups} groups for {s:?}"),
            ));
        }
        let rest: usize = s[2..].iter().product();
        let g = self.reshape(&[
            s[0] as isize,
            groups as isize,
            (s[1] / groups * rest) as isize,
        ])?;
        let y = g.layer_norm(&[2], None, None, eps)?;
        let y = y.reshape(&s.iter().map(|&d| d as isize).collect::<Vec<_>>())?;
        affine(y, gamma, beta)
    }
}

fn affine(y: Tensor, gamma: Option<&Tensor>, beta: Option<&Tensor>) -> Result<Tensor> {
    let y = match gamma {
        Some(g) => y.mul(g)?,
        None => y,
    };
    match beta {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_inferred_and_errors_name_the_op() -> Result<()> {
        let g = Graph::new();
        let x = g.input("x", &[4, 8])?;
        let w = g.param("w", &[8, 3], vec![0.0; 24])?;
        let y = x.matmul(&w)?;
        assert_eq!(y.shape(), vec![4, 3]);
        assert_eq!(y.sum(&[-1], true)?.shape(), vec![4, 1]);
        assert_eq!(y.t()?.shape(), vec![3, 4]);
        let e = x.matmul(&x).unwrap_err().to_string();
        assert!(e.starts_with("matmul:"), "{e}");
        let e = x.add(&g.input("z", &[3])?).unwrap_err().to_string();
        assert!(e.contains("do not broadcast"), "{e}");
        assert!(g.param("w", &[1], vec![0.0]).is_err(), "duplicate name");
        assert!(g.param("p", &[2], vec![0.0]).is_err(), "value count");
        assert!(g.input("bad name", &[2]).is_err());
        Ok(())
    }

    #[test]
    fn tensors_of_two_graphs_do_not_mix() -> Result<()> {
        let (a, b) = (Graph::new(), Graph::new());
        let x = a.input("x", &[2])?;
        let y = b.input("y", &[2])?;
        assert!(matches!(x.add(&y), Err(Error::ForeignTensor)));
        Ok(())
    }
}
