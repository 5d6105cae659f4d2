//! Lowering a graph to one MIL function and its weight file.
//!
//! Every node the outputs depend on becomes one or more MIL statements; the
//! node's value is named after the node, so a rule violation maps back to
//! the node that caused it. Where a graph op has more than one spelling
//! (softmax native or decomposed, a sum by `reduce_sum` or by a matmul with
//! ones), [`CompileOptions`] picks one, and `Auto` picks by the path's
//! capability registry and the precision rules.

use std::collections::{BTreeMap, HashMap, HashSet};

use anedvd_mil::blob::{BlobLayout, BlobWriter};
use anedvd_mil::builder::{self, ConvOpts, FunctionBuilder, Var};
use anedvd_mil::ir::{DType, Program, Scalar, TensorLit, TensorType, Value};
use anedvd_mil::registry::{self, RuntimePath};
use anedvd_mil::sim::Weights;

use crate::compress;
use crate::error::{Error, Result};
use crate::graph::{Binary, Graph, NodeId, Op, Reduce, Tensor};
use anedvd_mil::quantize::WeightFormat;

/// The MIL path of the one weight file.
pub const WEIGHT_FILE: &str = "@model_path/weights/weight.bin";

/// How a graph op with several spellings is lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Choice {
    /// By the path's registry and the precision rules.
    #[default]
    Auto,
    /// The single MIL op (`softmax`, `reduce_sum`).
    Native,
    /// Spelled out in simpler ops (max/sub/exp/sum/div; matmul with ones).
    Decomposed,
}

impl Choice {
    /// `auto`, `native` or `decomposed`.
    pub fn name(self) -> &'static str {
        match self {
            Choice::Auto => "auto",
            Choice::Native => "native",
            Choice::Decomposed => "decomposed",
        }
    }
}

/// How a product with a constant weight `x @ W` is lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MatmulStyle {
    /// `matmul`.
    #[default]
    Matmul,
    /// A 1×1 `conv` with the weight as `[N, K, 1, 1]` (the form the
    /// in-memory path's kernels use), for 2-D `x @ W` with W a param or const.
    Conv,
}

/// Where `Param` nodes live in the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParamMode {
    /// Constants in the weight file (compressed if asked).
    #[default]
    Baked,
    /// Program inputs, so a training step can update them (state).
    Inputs,
}

/// Compile options.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    /// The runtime path whose rules the program must pass.
    pub path: RuntimePath,
    /// Softmax spelling.
    pub softmax: Choice,
    /// Attention spelling (`Native`: the one `scaled_dot_product_attention`
    /// op, for unmasked attention only: its `attn_mask` is ignored or
    /// rejected by every path's evidence).
    pub attention: Choice,
    /// Sum/mean spelling (`Decomposed`: a matmul with a ones vector, which
    /// accumulates wide where `reduce_sum` accumulates in fp16).
    pub reduce: Choice,
    /// Products with a constant weight.
    pub matmul: MatmulStyle,
    /// Compression of baked params, unless `compress_param` names them.
    pub compress: WeightFormat,
    /// Per-param compression by param name.
    pub compress_param: BTreeMap<String, WeightFormat>,
    /// Where params live.
    pub params: ParamMode,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            path: RuntimePath::E5rt,
            softmax: Choice::Auto,
            attention: Choice::Auto,
            reduce: Choice::Auto,
            matmul: MatmulStyle::Matmul,
            compress: WeightFormat::Fp16,
            compress_param: BTreeMap::new(),
            params: ParamMode::Baked,
        }
    }
}

/// Reduced extents from which `Auto` sums by matmul: fp16 accumulation
/// loses about n·2⁻¹¹ relative (precision rule PREC-REDUCE-SUM-FP16).
const WIDE_SUM_FROM: usize = 16;

/// A lowered graph.
#[derive(Debug, Clone)]
pub struct Lowered {
    /// One function, `main`.
    pub program: Program,
    /// The weight file.
    pub weights: Weights,
    /// Program inputs: node name and graph shape, in declaration order.
    pub inputs: Vec<(String, Vec<usize>)>,
    /// Outputs: node name and graph shape, in the order asked.
    pub outputs: Vec<(String, Vec<usize>)>,
    /// The node each MIL statement was emitted for.
    pub origin: HashMap<String, NodeId>,
    /// The spelling chosen per node where there was a choice.
    pub choices: Vec<(String, &'static str)>,
}

/// The shape a graph value has in MIL: scalars are `[1]`.
pub(crate) fn mil_shape(shape: &[usize]) -> Vec<usize> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

fn usable(op: &str, variant: Option<&str>, path: RuntimePath) -> bool {
    registry::registry().is_ok_and(|r| r.status(op, variant, path).usable())
}

/// The nodes `outputs` depend on, ascending (a topological order, since
/// nodes only refer to earlier ones).
pub(crate) fn live_nodes(graph: &Graph, outputs: &[NodeId]) -> Vec<NodeId> {
    let g = graph.lock();
    let mut live = vec![false; g.nodes.len()];
    let mut stack: Vec<NodeId> = outputs.to_vec();
    while let Some(i) = stack.pop() {
        if !std::mem::replace(&mut live[i], true) {
            stack.extend(&g.nodes[i].args);
        }
    }
    (0..live.len()).filter(|&i| live[i]).collect()
}

/// Lowers the graph that computes `outputs`.
pub fn lower(outputs: &[&Tensor], opts: &CompileOptions) -> Result<Lowered> {
    let first = outputs
        .first()
        .ok_or_else(|| crate::error::shape_err("compile", "no outputs"))?;
    let graph = first.graph().clone();
    if outputs.iter().any(|t| !t.graph().same(&graph)) {
        return Err(Error::ForeignTensor);
    }
    let out_ids: Vec<NodeId> = outputs.iter().map(|t| t.id()).collect();
    let order = live_nodes(&graph, &out_ids);
    let nodes: HashMap<NodeId, crate::graph::Node> = order
        .iter()
        .filter_map(|&i| graph.node(i).map(|n| (i, n)))
        .collect();
    let mut l = Lowering {
        b: FunctionBuilder::new("main"),
        blob: BlobWriter::new(BlobLayout::Aligned),
        opts,
        vals: HashMap::new(),
        origin: HashMap::new(),
        choices: Vec::new(),
        inputs: Vec::new(),
        graph: &graph,
    };
    l.b.reserve(nodes.values().map(|n| n.name.as_str()));
    for &id in &order {
        let start = l.b.len();
        let node = &nodes[&id];
        let v = l.node(id, node)?;
        l.vals.insert(id, v);
        let made: Vec<String> = l.b.statement_names(start).map(str::to_string).collect();
        for s in made {
            l.origin.insert(s, id);
        }
    }
    let mut seen = HashSet::new();
    let mut outs = Vec::new();
    for &id in &out_ids {
        let n = &nodes[&id];
        if seen.insert(id) {
            l.b.output(&l.vals[&id]);
        }
        outs.push((n.name.clone(), n.shape.clone()));
    }
    let mut weights = Weights::new();
    weights.insert(WEIGHT_FILE, l.blob.finish());
    Ok(Lowered {
        program: builder::program(vec![l.b.finish()]),
        weights,
        inputs: l.inputs,
        outputs: outs,
        origin: l.origin,
        choices: l.choices,
    })
}

struct Lowering<'a> {
    b: FunctionBuilder,
    blob: BlobWriter,
    opts: &'a CompileOptions,
    vals: HashMap<NodeId, Var>,
    origin: HashMap<String, NodeId>,
    choices: Vec<(String, &'static str)>,
    inputs: Vec<(String, Vec<usize>)>,
    graph: &'a Graph,
}

impl Lowering<'_> {
    fn fresh(&self, base: &str) -> String {
        self.b.fresh_name(base)
    }

    fn blob_const(&mut self, name: &str, shape: &[usize], values: &[f32]) -> Result<Var> {
        let off = self.blob.add_f32_as_f16(values);
        Ok(self
            .b
            .const_blob(name, DType::Fp16, shape, WEIGHT_FILE, off)?)
    }

    fn constant(&mut self, base: &str, shape: &[usize], values: &[f32]) -> Result<Var> {
        let n = self.fresh(base);
        self.blob_const(&n, shape, values)
    }

    fn arg(&self, id: NodeId) -> Var {
        self.vals[&id].clone()
    }

    fn node(&mut self, id: NodeId, node: &crate::graph::Node) -> Result<Var> {
        let name = node.name.as_str();
        let a: Vec<Var> = node.args.iter().map(|&i| self.arg(i)).collect();
        let shape = mil_shape(&node.shape);
        Ok(match &node.op {
            Op::Input => {
                self.inputs.push((name.to_string(), node.shape.clone()));
                self.b.input(name, DType::Fp16, &shape)?
            }
            Op::Param if self.opts.params == ParamMode::Inputs => {
                self.inputs.push((name.to_string(), node.shape.clone()));
                self.b.input(name, DType::Fp16, &shape)?
            }
            Op::Param => {
                let values = self.graph.values(id).unwrap_or_default();
                let how = self
                    .opts
                    .compress_param
                    .get(name)
                    .copied()
                    .unwrap_or(self.opts.compress);
                if how != WeightFormat::Fp16 {
                    self.choices.push((name.to_string(), how.name()));
                }
                compress::emit(&mut self.b, &mut self.blob, name, &shape, &values, how)?
            }
            Op::Const => {
                let values = self.graph.values(id).unwrap_or_default();
                self.blob_const(name, &shape, &values)?
            }
            // a [1] tensor, not a MIL scalar, so layout ops (reshape, tile) take it too
            Op::Scalar(v) => self.b.const_value(
                name,
                Value::Tensor(TensorLit {
                    ty: TensorType::new(DType::Fp16, &[1]),
                    values: vec![Scalar::fp16(f64::from(*v))],
                }),
            )?,
            Op::Unary(u) => self.b.unary(u.mil(), name, &a[0])?,
            Op::Binary(op) => self.binary(name, *op, &a[0], &a[1])?,
            Op::MatMul { tx, ty } => self.matmul(name, node, &a, *tx, *ty)?,
            Op::Conv {
                stride,
                pad,
                groups,
            } => {
                let o = ConvOpts {
                    strides: *stride,
                    pad: *pad,
                    pad_type: if pad.iter().all(|&p| p == 0) {
                        "valid"
                    } else {
                        "custom"
                    },
                    groups: *groups,
                    ..ConvOpts::default()
                };
                self.b.conv_with(name, &a[0], &a[1], &o)?
            }
            Op::Reduce { kind, axes, keep } => {
                self.reduce(name, &a[0], *kind, axes, *keep, &shape)?
            }
            Op::Softmax { axis } => self.softmax(name, &a[0], *axis)?,
            Op::Reshape => self.b.reshape(name, &a[0], &shape)?,
            Op::Transpose { perm } => self.b.transpose(name, &a[0], perm)?,
            Op::Slice { begin } => self.b.slice_by_size(name, &a[0], begin, &shape)?,
            Op::Concat { axis } => self.concat(name, &a, *axis)?,
            Op::Tile { reps } => self.b.tile(name, &a[0], reps)?,
            Op::Pad { pads } => self.b.pad(name, &a[0], pads, 0.0)?,
            Op::Reverse { axes } => self.b.reverse(
                name,
                &a[0],
                &axes.iter().map(|&x| x as i64).collect::<Vec<_>>(),
            )?,
            Op::Attention { causal } => self.attention(name, &a, *causal)?,
            Op::CrossEntropy => self.cross_entropy(name, &a[0], &a[1])?,
        })
    }

    fn binary(&mut self, name: &str, op: Binary, x: &Var, y: &Var) -> Result<Var> {
        Ok(match op {
            Binary::Add => self.b.add(name, x, y)?,
            Binary::Sub => self.b.sub(name, x, y)?,
            Binary::Mul => self.b.mul(name, x, y)?,
            Binary::Max => self.b.maximum(name, x, y)?,
            Binary::Min => self.b.minimum(name, x, y)?,
            Binary::Div => self.div(name, x, y)?,
        })
    }

    /// `x / y`: `real_div` where the path runs it, else `x · y^-1` by `pow`.
    fn div(&mut self, name: &str, x: &Var, y: &Var) -> Result<Var> {
        if usable("real_div", None, self.opts.path) {
            return Ok(self.b.real_div(name, x, y)?);
        }
        let m1 = self.fresh("minus_one");
        let m1 = self.b.fp16(&m1, -1.0)?;
        let inv = self.fresh(&format!("{name}_inv"));
        let inv = self.b.pow(&inv, y, &m1)?;
        Ok(self.b.mul(name, x, &inv)?)
    }

    fn matmul(
        &mut self,
        name: &str,
        node: &crate::graph::Node,
        a: &[Var],
        tx: bool,
        ty: bool,
    ) -> Result<Var> {
        let weight_const = matches!(
            self.graph.node(node.args[1]).map(|n| n.op),
            Some(Op::Param | Op::Const)
        ) && self.opts.params == ParamMode::Baked;
        let (xs, ws) = (a[0].shape().to_vec(), a[1].shape().to_vec());
        if self.opts.matmul == MatmulStyle::Conv
            && weight_const
            && !tx
            && xs.len() == 2
            && ws.len() == 2
        {
            // x [M, K] @ W [K, N]  =  conv(x as [1, K, 1, M], W as [N, K, 1, 1]) → [1, N, 1, M]
            self.choices.push((name.to_string(), "conv1x1"));
            let (m, k) = (xs[0], xs[1]);
            let n = if ty { ws[0] } else { ws[1] };
            let w = if ty {
                a[1].clone()
            } else {
                let t = self.fresh(&format!("{name}_wt"));
                self.b.transpose(&t, &a[1], &[1, 0])?
            };
            let wn = self.fresh(&format!("{name}_w4"));
            let w4 = self.b.reshape(&wn, &w, &[n, k, 1, 1])?;
            let xt = self.fresh(&format!("{name}_xt"));
            let xt = self.b.transpose(&xt, &a[0], &[1, 0])?;
            let x4 = self.fresh(&format!("{name}_x4"));
            let x4 = self.b.reshape(&x4, &xt, &[1, k, 1, m])?;
            let c = self.fresh(&format!("{name}_conv"));
            let c = self.b.conv(&c, &x4, &w4)?;
            let c2 = self.fresh(&format!("{name}_nm"));
            let c2 = self.b.reshape(&c2, &c, &[n, m])?;
            return Ok(self.b.transpose(name, &c2, &[1, 0])?);
        }
        Ok(self.b.matmul(name, &a[0], &a[1], tx, ty)?)
    }

    /// The reduction spelling for a sum or mean over `count` elements.
    fn wide_sum(&mut self, name: &str, count: usize) -> bool {
        let wide = match self.opts.reduce {
            Choice::Native => false,
            Choice::Decomposed => true,
            Choice::Auto => count >= WIDE_SUM_FROM && usable("matmul", None, self.opts.path),
        };
        self.choices.push((
            name.to_string(),
            if wide { "sum-by-matmul" } else { "reduce" },
        ));
        wide
    }

    fn reduce(
        &mut self,
        name: &str,
        x: &Var,
        kind: Reduce,
        axes: &[usize],
        keep: bool,
        out: &[usize],
    ) -> Result<Var> {
        let xs = x.shape().to_vec();
        let count: usize = axes.iter().map(|&a| xs[a]).product();
        let op = match kind {
            Reduce::Sum => "reduce_sum",
            Reduce::Mean => "reduce_mean",
            Reduce::Max => "reduce_max",
        };
        let axes_i: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        if kind == Reduce::Max || !self.wide_sum(name, count) {
            // a full reduction keeps its dims so the result is [1, …], then [1]
            let full = out.len() == 1 && out[0] == 1 && !keep && axes.len() == xs.len();
            if full {
                let t = self.fresh(&format!("{name}_keep"));
                let r = self.b.reduce(op, &t, x, &axes_i, true)?;
                return Ok(self.b.reshape(name, &r, out)?);
            }
            return Ok(self.b.reduce(op, name, x, &axes_i, keep)?);
        }
        // wide: reduced axes last, [outer, count] @ ones[count, 1]
        let mut perm: Vec<usize> = (0..xs.len()).filter(|d| !axes.contains(d)).collect();
        perm.extend(axes);
        let moved = if perm.iter().enumerate().all(|(i, &p)| i == p) {
            x.clone()
        } else {
            let t = self.fresh(&format!("{name}_perm"));
            self.b.transpose(&t, x, &perm)?
        };
        let outer = xs.iter().product::<usize>() / count;
        let t = self.fresh(&format!("{name}_rows"));
        let rows = self.b.reshape(&t, &moved, &[outer, count])?;
        let scale = if kind == Reduce::Mean {
            1.0 / count as f32
        } else {
            1.0
        };
        let ones = self.constant(&format!("{name}_ones"), &[count, 1], &vec![scale; count])?;
        let t = self.fresh(&format!("{name}_mm"));
        let s = self.b.matmul(&t, &rows, &ones, false, false)?;
        Ok(self.b.reshape(name, &s, out)?)
    }

    fn softmax(&mut self, name: &str, x: &Var, axis: usize) -> Result<Var> {
        let n = x.shape()[axis];
        let path = self.opts.path;
        let native = match self.opts.softmax {
            Choice::Native => true,
            Choice::Decomposed => false,
            Choice::Auto => {
                usable("softmax", None, path)
                    && (n.is_power_of_two()
                        || usable("softmax", Some("non-power-of-two-axis"), path))
            }
        };
        self.choices.push((
            name.to_string(),
            if native {
                "softmax"
            } else {
                "softmax-decomposed"
            },
        ));
        if native {
            return Ok(self.b.softmax(name, x, axis as i32)?);
        }
        let keep = {
            let mut s = x.shape().to_vec();
            s[axis] = 1;
            s
        };
        let t = self.fresh(&format!("{name}_max"));
        let m = self.b.reduce("reduce_max", &t, x, &[axis as i64], true)?;
        let t = self.fresh(&format!("{name}_shift"));
        let z = self.b.sub(&t, x, &m)?;
        let t = self.fresh(&format!("{name}_exp"));
        let e = self.b.exp(&t, &z)?;
        let t = self.fresh(&format!("{name}_sum"));
        let s = self.reduce(&t, &e, Reduce::Sum, &[axis], true, &keep)?;
        self.div(name, &e, &s)
    }

    fn concat(&mut self, name: &str, a: &[Var], axis: usize) -> Result<Var> {
        // a path that rejects concat of more than two values gets a chain of pairs
        if a.len() <= 2 || usable("concat", Some("more-than-two-values"), self.opts.path) {
            let refs: Vec<&Var> = a.iter().collect();
            return Ok(self.b.concat(name, &refs, axis)?);
        }
        let mut acc = a[0].clone();
        for (i, v) in a.iter().enumerate().skip(1) {
            let t = if i + 1 == a.len() {
                name.to_string()
            } else {
                self.fresh(&format!("{name}_part"))
            };
            acc = self.b.concat(&t, &[&acc, v], axis)?;
        }
        Ok(acc)
    }

    fn attention(&mut self, name: &str, a: &[Var], causal: bool) -> Result<Var> {
        let (q, k, v) = (&a[0], &a[1], &a[2]);
        let qs = q.shape().to_vec();
        let r = qs.len();
        let (s, d, t) = (qs[r - 2], qs[r - 1], k.shape()[r - 2]);
        let composite = !causal
            && match self.opts.attention {
                Choice::Native => true,
                Choice::Decomposed => false,
                Choice::Auto => usable("scaled_dot_product_attention", None, self.opts.path),
            };
        if composite {
            self.choices.push((name.to_string(), "attention-composite"));
            return Ok(self.b.scaled_dot_product_attention(name, q, k, v)?);
        }
        self.choices
            .push((name.to_string(), "attention-decomposed"));
        let n = self.fresh(&format!("{name}_scores"));
        let sc = self.b.matmul(&n, q, k, false, true)?;
        let n = self.fresh(&format!("{name}_scale"));
        let scale = self.b.fp16(&n, 1.0 / (d as f64).sqrt())?;
        let n = self.fresh(&format!("{name}_scaled"));
        let mut sc = self.b.mul(&n, &sc, &scale)?;
        if causal {
            let mask = causal_mask(s, t);
            let m = self.constant(&format!("{name}_mask"), &[s, t], &mask)?;
            let n = self.fresh(&format!("{name}_masked"));
            sc = self.b.add(&n, &sc, &m)?;
        }
        let n = self.fresh(&format!("{name}_probs"));
        let p = self.softmax(&n, &sc, r - 1)?;
        Ok(self.b.matmul(name, &p, v, false, false)?)
    }

    fn cross_entropy(&mut self, name: &str, x: &Var, t: &Var) -> Result<Var> {
        let xs = x.shape().to_vec();
        let (bsz, _) = (xs[0], xs[1]);
        let col = [bsz, 1];
        let f = |s: &Self, base: &str| s.fresh(&format!("{name}_{base}"));
        let n = f(self, "max");
        let m = self.b.reduce("reduce_max", &n, x, &[1], true)?;
        let n = f(self, "shift");
        let z = self.b.sub(&n, x, &m)?;
        let n = f(self, "exp");
        let e = self.b.exp(&n, &z)?;
        let n = f(self, "sumexp");
        let se = self.reduce(&n, &e, Reduce::Sum, &[1], true, &col)?;
        let n = f(self, "lse");
        let lse = self.b.unary("log", &n, &se)?;
        let n = f(self, "tsum");
        let ts = self.reduce(&n, t, Reduce::Sum, &[1], true, &col)?;
        let n = f(self, "tz");
        let tz = self.b.mul(&n, t, &z)?;
        let n = f(self, "tzsum");
        let tzs = self.reduce(&n, &tz, Reduce::Sum, &[1], true, &col)?;
        let n = f(self, "lse_t");
        let a = self.b.mul(&n, &lse, &ts)?;
        let n = f(self, "per_row");
        let per = self.b.sub(&n, &a, &tzs)?;
        self.reduce(name, &per, Reduce::Mean, &[0, 1], false, &[1])
    }
}

/// Additive causal mask for `s` queries over `t` keys (the last `s` of them):
/// 0 where query i may see key j, −30000 elsewhere (exp underflows to 0 in
/// fp16; −inf would make NaN from inf − inf in the max shift).
pub(crate) fn causal_mask(s: usize, t: usize) -> Vec<f32> {
    let off = t.saturating_sub(s);
    (0..s * t)
        .map(|i| if i % t <= i / t + off { 0.0 } else { -30000.0 })
        .collect()
}
