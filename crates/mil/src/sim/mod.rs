//! The CPU simulator: executes a parsed program statement by statement over fp16 tensors.

mod ops;
mod tensor;

use std::collections::{BTreeMap, HashMap};

pub(crate) use tensor::broadcast_shape;
pub use tensor::{Data, Tensor};

use crate::blob::BlobFile;
use crate::error::{Error, Result};
use crate::ir::{Arg, BlobRef, DType, Function, Program, Scalar, Statement, Value, ValueType};
use crate::precision::PrecisionModel;
use crate::rules::{self, RuleConfig};

/// Weight files keyed by their MIL path (`@model_path/weights/weight.bin`).
#[derive(Debug, Clone, Default)]
pub struct Weights {
    files: BTreeMap<String, Vec<u8>>,
}

impl Weights {
    /// No weight files.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a file.
    pub fn insert(&mut self, path: impl Into<String>, bytes: Vec<u8>) {
        self.files.insert(path.into(), bytes);
    }

    /// The bytes of a file.
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    /// Paths present.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }
}

/// A value in the simulator's environment.
#[derive(Debug, Clone)]
enum Val {
    T(Tensor),
    Str(String),
}

/// Executes programs that passed the ANE rule check.
#[derive(Debug)]
pub struct Simulator<'a> {
    program: &'a Program,
    weights: &'a Weights,
    precision: PrecisionModel,
}

impl<'a> Simulator<'a> {
    /// Checks `program` against the rule table (with `cfg`) and returns a
    /// simulator for it, or the first violation as [`Error::Rule`].
    pub fn new(program: &'a Program, weights: &'a Weights, cfg: &RuleConfig) -> Result<Self> {
        rules::enforce(program, Some(weights), cfg)?;
        Ok(Self::new_unchecked(program, weights))
    }

    /// A simulator that skips the rule check (for programs the ANE would reject).
    pub fn new_unchecked(program: &'a Program, weights: &'a Weights) -> Self {
        Simulator {
            program,
            weights,
            precision: PrecisionModel::default(),
        }
    }

    /// The same simulator with other precision rules (default: [`PrecisionModel::ane`]).
    pub fn with_precision(mut self, precision: PrecisionModel) -> Self {
        self.precision = precision;
        self
    }

    /// Runs function `func` on named inputs (types must match the
    /// declaration exactly) and returns its outputs in return order.
    pub fn run(&self, func: &str, inputs: &[(&str, Tensor)]) -> Result<Vec<(String, Tensor)>> {
        let (f, env) = self.execute(func, inputs)?;
        f.outputs
            .iter()
            .map(|o| match env.get(o) {
                Some(Val::T(t)) => Ok((o.clone(), t.clone())),
                _ => Err(Error::sem(
                    format!("{func}:outputs"),
                    format!("`{o}` is not a tensor value"),
                )),
            })
            .collect()
    }

    /// Like [`Simulator::run`] but returns every tensor value (inputs,
    /// consts, intermediates) by SSA name, for pinning divergences.
    pub fn run_traced(
        &self,
        func: &str,
        inputs: &[(&str, Tensor)],
    ) -> Result<BTreeMap<String, Tensor>> {
        let (_, env) = self.execute(func, inputs)?;
        Ok(env
            .into_iter()
            .filter_map(|(k, v)| match v {
                Val::T(t) => Some((k, t)),
                Val::Str(_) => None,
            })
            .collect())
    }

    fn execute(
        &self,
        func: &str,
        inputs: &[(&str, Tensor)],
    ) -> Result<(&'a Function, HashMap<String, Val>)> {
        let f = self
            .program
            .function(func)
            .ok_or_else(|| Error::sem(func, "no such function"))?;
        let mut env: HashMap<String, Val> = HashMap::new();
        for (name, ty) in &f.inputs {
            let loc = format!("{func}:{name}");
            let t = inputs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t)
                .ok_or_else(|| Error::sem(&loc, "input not supplied"))?;
            if t.shape != ty.shape || t.dtype() != ty.dtype {
                return Err(Error::sem(
                    &loc,
                    format!(
                        "input is {} {:?}, declared {} {:?}",
                        t.dtype(),
                        t.shape,
                        ty.dtype,
                        ty.shape
                    ),
                ));
            }
            env.insert(name.clone(), Val::T(t.clone()));
        }
        for s in &f.body {
            let loc = format!("{func}/{}", s.name);
            let v = self.eval(&loc, s, &env)?;
            check_type(&loc, &s.ty, &v)?;
            if self.precision.refuse_new_nan {
                refuse_new_nan(&loc, s, &env, &v)?;
            }
            env.insert(s.name.clone(), v);
        }
        Ok((f, env))
    }

    fn eval(&self, loc: &str, s: &Statement, env: &HashMap<String, Val>) -> Result<Val> {
        let a = Args { loc, s, env };
        let t = match s.op.as_str() {
            "const" => return self.constant(loc, s),
            "constexpr_affine_dequantize" => self.affine_dequantize(loc, s)?,
            "constexpr_lut_to_dense" => self.lut_to_dense(loc, s)?,
            "add" => ops::binary(loc, a.t("x")?, a.t("y")?, |x, y| x + y)?,
            "sub" => ops::binary(loc, a.t("x")?, a.t("y")?, |x, y| x - y)?,
            "mul" => ops::binary(loc, a.t("x")?, a.t("y")?, |x, y| x * y)?,
            "real_div" => ops::binary(loc, a.t("x")?, a.t("y")?, |x, y| x / y)?,
            "pow" => ops::binary(loc, a.t("x")?, a.t("y")?, ops::pow)?,
            "sigmoid" => ops::unary(loc, a.t("x")?, |x| 1.0 / (1.0 + (-x).exp()))?,
            "tanh" => ops::unary(loc, a.t("x")?, f32::tanh)?,
            "exp" => ops::unary(loc, a.t("x")?, f32::exp)?,
            "relu" => ops::unary(loc, a.t("x")?, |x| x.max(0.0))?,
            "sqrt" => ops::unary(loc, a.t("x")?, f32::sqrt)?,
            "identity" => a.t("x")?.clone(),
            "log" => ops::unary(loc, a.t("x")?, f32::ln)?,
            "rsqrt" => {
                let eps = a.opt_float("epsilon")?.unwrap_or(1e-12);
                ops::unary(loc, a.t("x")?, |x| 1.0 / (x + eps).sqrt())?
            }
            "abs" => ops::unary(loc, a.t("x")?, f32::abs)?,
            "sign" => ops::unary(loc, a.t("x")?, |x| {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            })?,
            "square" => ops::unary(loc, a.t("x")?, |x| x * x)?,
            "maximum" => ops::binary(loc, a.t("x")?, a.t("y")?, f32::max)?,
            "minimum" => ops::binary(loc, a.t("x")?, a.t("y")?, f32::min)?,
            "tile" => ops::tile(loc, a.t("x")?, &a.ints("reps")?)?,
            "scaled_dot_product_attention" => {
                if s.args.contains_key("attn_mask") {
                    return Err(Error::sem(
                        loc,
                        "attn_mask is not simulated (the evidence shows it ignored or rejected)",
                    ));
                }
                ops::sdpa(loc, a.t("query")?, a.t("key")?, a.t("value")?)?
            }
            "reverse" => ops::reverse(loc, a.t("x")?, &a.ints("axes")?)?,
            "pad" => {
                let mode = a.string("mode")?;
                if mode != "constant" {
                    return Err(Error::sem(
                        loc,
                        format!("pad mode {mode:?} is not simulated"),
                    ));
                }
                let value = a.opt_float("constant_val")?.unwrap_or(0.0);
                ops::pad(loc, a.t("x")?, &a.ints("pad")?, value)?
            }
            "softmax" => ops::softmax(loc, a.t("x")?, a.int("axis")?)?,
            "reduce_sum" | "reduce_max" | "reduce_mean" => {
                let kind = match s.op.as_str() {
                    "reduce_sum" => ops::Reduce::Sum,
                    "reduce_max" => ops::Reduce::Max,
                    _ => ops::Reduce::Mean,
                };
                let keep = if s.args.contains_key("keep_dims") {
                    a.int("keep_dims")? != 0
                } else {
                    false
                };
                let narrow = self.precision.narrow_reduce_sum;
                ops::reduce(loc, a.t("x")?, &a.ints("axes")?, keep, kind, narrow)?
            }
            "reshape" => {
                let x = a.t("x")?;
                let shape = reshape_dims(loc, &a.ints("shape")?, x.numel())?;
                Tensor {
                    shape,
                    data: x.data.clone(),
                }
            }
            "transpose" => ops::transpose(loc, a.t("x")?, &a.ints("perm")?)?,
            "slice_by_size" => ops::slice(loc, a.t("x")?, &a.ints("begin")?, &a.ints("size")?)?,
            "concat" => {
                if s.args.contains_key("interleave") && a.int("interleave")? != 0 {
                    return Err(Error::sem(
                        loc,
                        "concat with interleave = true is not simulated",
                    ));
                }
                let names = match s.args.get("values") {
                    Some(Arg::Tuple(n)) => n.clone(),
                    _ => return Err(Error::sem(loc, "`values` must be a tuple")),
                };
                let ts: Vec<&Tensor> = names.iter().map(|n| a.var(n)).collect::<Result<_>>()?;
                ops::concat(loc, &ts, a.int("axis")?)?
            }
            "cast" => {
                let to = DType::from_name(&a.string("dtype")?)
                    .ok_or_else(|| Error::sem(loc, "unknown cast dtype"))?;
                let x = a.t("x")?;
                Tensor::from_f32(to, &x.shape, &x.to_f32())
                    .map_err(|e| Error::sem(loc, e.to_string()))?
            }
            "matmul" => {
                let tx = if s.args.contains_key("transpose_x") {
                    a.int("transpose_x")? != 0
                } else {
                    false
                };
                let ty = if s.args.contains_key("transpose_y") {
                    a.int("transpose_y")? != 0
                } else {
                    false
                };
                let y = ops::matmul(loc, a.t("x")?, a.t("y")?, tx, ty)?;
                match self.precision.matmul_saturation {
                    Some(limit) => ops::saturate(loc, &y, limit)?,
                    None => y,
                }
            }
            "conv" => self.conv(loc, &a)?,
            other => return Err(Error::sem(loc, format!("op `{other}` is not simulated"))),
        };
        Ok(Val::T(t))
    }

    fn conv(&self, loc: &str, a: &Args<'_>) -> Result<Tensor> {
        let x = a.t("x")?;
        let w = a.t("weight")?;
        let pair = |name: &str| -> Result<[usize; 2]> {
            if !a.s.args.contains_key(name) {
                return Ok([1, 1]);
            }
            match a.ints(name)?.as_slice() {
                [p, q] if *p > 0 && *q > 0 => Ok([*p as usize, *q as usize]),
                v => Err(Error::sem(
                    loc,
                    format!("`{name}` must be two positive ints, got {v:?}"),
                )),
            }
        };
        let strides = pair("strides")?;
        let dilations = pair("dilations")?;
        let groups = if a.s.args.contains_key("groups") {
            a.int("groups")?
        } else {
            1
        };
        let pad_type = if a.s.args.contains_key("pad_type") {
            a.string("pad_type")?
        } else {
            "valid".into()
        };
        let pad = if a.s.args.contains_key("pad") {
            a.ints("pad")?
        } else {
            vec![0; 4]
        };
        if x.shape.len() != 4 || w.shape.len() != 4 {
            return Err(Error::sem(loc, "conv needs rank-4 x and weight"));
        }
        let pad = ops::resolve_pad(
            loc,
            &pad_type,
            &pad,
            [x.shape[2], x.shape[3]],
            [w.shape[2], w.shape[3]],
            strides,
            dilations,
        )?;
        let bias = if a.s.args.contains_key("bias") {
            Some(a.t("bias")?)
        } else {
            None
        };
        let p = ops::ConvParams {
            strides,
            dilations,
            pad,
            groups: usize::try_from(groups).map_err(|_| Error::sem(loc, "negative groups"))?,
        };
        ops::conv(loc, x, w, bias, &p)
    }

    /// A BLOBFILE operand, written as an attribute (iOS16 constexpr ops) or
    /// as an inline input (iOS18 ones), as coremltools writes them.
    fn blob_operand<'s>(&self, loc: &str, s: &'s Statement, key: &str) -> Result<&'s BlobRef> {
        match (s.attrs.get(key), s.args.get(key)) {
            (Some(Value::Blob(b)), None) | (None, Some(Arg::Inline(Value::Blob(b)))) => Ok(b),
            _ => Err(Error::sem(
                loc,
                format!("`{}` needs one BLOBFILE `{key}`", s.op),
            )),
        }
    }

    /// The payload of a BLOBFILE reference, checked against its declared type.
    fn blob_view(&self, loc: &str, b: &BlobRef) -> Result<crate::blob::BlobView<'a>> {
        let bytes = self
            .weights
            .get(&b.path)
            .ok_or_else(|| Error::sem(loc, format!("weight file `{}` not supplied", b.path)))?;
        let view = BlobFile::parse(bytes)?.blob_at(b.offset)?;
        if crate::blob::BlobDType::from_mil(b.ty.dtype) != Some(view.dtype)
            || view.elements() != Some(b.ty.numel() as u64)
        {
            return Err(Error::sem(
                loc,
                format!(
                    "blob at {} is {:?} with {:?} elements, declared {} {:?}",
                    b.offset,
                    view.dtype,
                    view.elements(),
                    b.ty.dtype,
                    b.ty.shape
                ),
            ));
        }
        Ok(view)
    }

    /// `scale[c] · (q − zero_point)` along `axis`, rounded to fp16.
    fn affine_dequantize(&self, loc: &str, s: &Statement) -> Result<Tensor> {
        let qb = self.blob_operand(loc, s, "quantized_data")?;
        let sb = self.blob_operand(loc, s, "scale")?;
        let int = |key: &str| match s.attrs.get(key) {
            Some(Value::Scalar(v)) => v.as_int(),
            _ => None,
        };
        let (Some(axis), Some(zero)) = (int("axis"), int("zero_point")) else {
            return Err(Error::sem(loc, "needs scalar `axis` and `zero_point`"));
        };
        let q = self.blob_view(loc, qb)?.to_i8()?;
        let scale = self.blob_view(loc, sb)?.to_f16()?;
        let shape = &qb.ty.shape;
        let a = ops::axis(loc, axis as i64, shape.len())?;
        if scale.len() != shape[a] {
            return Err(Error::sem(
                loc,
                format!("{} scales for axis {a} of {shape:?}", scale.len()),
            ));
        }
        let inner: usize = shape[a + 1..].iter().product();
        let v: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &q)| scale[(i / inner) % shape[a]].to_f32() * (f32::from(q) - zero as f32))
            .collect();
        Tensor::from_f32(DType::Fp16, shape, &v).map_err(|e| Error::sem(loc, e.to_string()))
    }

    /// `lut[palette(i)][indices[i]]`: one palette per block of the indices,
    /// the blocks given by the lut's leading dims (iOS18 form, vector size 1).
    fn lut_to_dense(&self, loc: &str, s: &Statement) -> Result<Tensor> {
        let ib = self.blob_operand(loc, s, "indices")?;
        let lb = self.blob_operand(loc, s, "lut")?;
        let (shape, lshape) = (&ib.ty.shape, &lb.ty.shape);
        let r = shape.len();
        if !matches!(ib.ty.dtype, DType::UInt4 | DType::UInt6 | DType::UInt8) {
            return Err(Error::sem(
                loc,
                format!("indices of {} (uint4, uint6 or uint8)", ib.ty.dtype),
            ));
        }
        let entries = 1usize << ib.ty.dtype.bits();
        let ok = lshape.len() == r + 2
            && lshape[r] == entries
            && lshape[r + 1] == 1
            && (0..r).all(|d| lshape[d] > 0 && shape[d] % lshape[d] == 0);
        if !ok {
            return Err(Error::sem(
                loc,
                format!("lut {lshape:?} for indices {shape:?}"),
            ));
        }
        let idx = self.blob_view(loc, ib)?.to_unsigned()?;
        let lut = self.blob_view(loc, lb)?.to_f16()?;
        let xst = tensor::strides(shape);
        let lst = tensor::strides(&lshape[..r]);
        let v: Vec<f32> = idx
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let palette: usize = (0..r)
                    .map(|d| ((i / xst[d]) % shape[d]) / (shape[d] / lshape[d]) * lst[d])
                    .sum();
                lut[palette * entries + usize::from(k)].to_f32()
            })
            .collect();
        Tensor::from_f32(DType::Fp16, shape, &v).map_err(|e| Error::sem(loc, e.to_string()))
    }

    fn constant(&self, loc: &str, s: &Statement) -> Result<Val> {
        let v = s
            .attrs
            .get("val")
            .ok_or_else(|| Error::sem(loc, "const without `val`"))?;
        value_to_val(loc, v, Some(self.weights))
    }
}

/// Converts a literal to a simulator value (reading BLOBFILE data from `weights`).
fn value_to_val(loc: &str, v: &Value, weights: Option<&Weights>) -> Result<Val> {
    let num = |s: &Scalar| s.as_f64().unwrap_or(0.0) as f32;
    // int32 literals are kept exact (not routed through f32)
    let tensor = |shape: &[usize], vals: &[Scalar], dtype: DType| -> Result<Tensor> {
        if dtype == DType::Int32 {
            let v = vals
                .iter()
                .map(|s| s.as_int().and_then(|i| i32::try_from(i).ok()))
                .collect::<Option<Vec<i32>>>()
                .ok_or_else(|| Error::sem(loc, "bad int32 literal"))?;
            return Ok(Tensor {
                shape: shape.to_vec(),
                data: Data::I32(v),
            });
        }
        let v: Vec<f32> = vals.iter().map(num).collect();
        Tensor::from_f32(dtype, shape, &v).map_err(|e| Error::sem(loc, e.to_string()))
    };
    match v {
        Value::Scalar(Scalar::Str(s)) => Ok(Val::Str(s.clone())),
        Value::Scalar(s) => Ok(Val::T(tensor(&[], std::slice::from_ref(s), s.dtype())?)),
        Value::Tensor(t) => Ok(Val::T(tensor(&t.ty.shape, &t.values, t.ty.dtype)?)),
        Value::Blob(b) => {
            let bytes = weights
                .and_then(|w| w.get(&b.path))
                .ok_or_else(|| Error::sem(loc, format!("weight file `{}` not supplied", b.path)))?;
            let view = BlobFile::parse(bytes)?.blob_at(b.offset)?;
            let t = match b.ty.dtype {
                DType::Fp16 => Tensor {
                    shape: b.ty.shape.clone(),
                    data: Data::F16(view.to_f16()?),
                },
                d => return Err(Error::sem(loc, format!("BLOBFILE dtype {d} not simulated"))),
            };
            if t.numel() != b.ty.numel() {
                return Err(Error::sem(
                    loc,
                    format!(
                        "blob at {} holds {} elements, type needs {}",
                        b.offset,
                        t.numel(),
                        b.ty.numel()
                    ),
                ));
            }
            Ok(Val::T(t))
        }
    }
}

fn reshape_dims(loc: &str, dims: &[i64], numel: usize) -> Result<Vec<usize>> {
    let known = dims
        .iter()
        .filter(|&&d| d != -1)
        .try_fold(1i64, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::sem(loc, format!("reshape dims {dims:?} overflow")))?;
    let holes = dims.iter().filter(|&&d| d == -1).count();
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        out.push(match d {
            -1 if holes == 1 && known > 0 => numel / known as usize,
            d if d > 0 => d as usize,
            _ => return Err(Error::sem(loc, format!("bad reshape dims {dims:?}"))),
        });
    }
    if out.iter().product::<usize>() != numel {
        return Err(Error::sem(
            loc,
            format!("reshape to {dims:?} of {numel} elements"),
        ));
    }
    Ok(out)
}

/// `PREC-NO-NAN`: the ANE does not propagate NaN, so an op that makes one
/// from NaN-free operands computes something else on the hardware.
fn refuse_new_nan(loc: &str, s: &Statement, env: &HashMap<String, Val>, v: &Val) -> Result<()> {
    let Val::T(out) = v else { return Ok(()) };
    if !out.has_nan() {
        return Ok(());
    }
    let operand_nan = s.args.values().any(|a| {
        let names: Vec<&String> = match a {
            Arg::Var(n) => vec![n],
            Arg::Tuple(ns) => ns.iter().collect(),
            Arg::Inline(_) => Vec::new(),
        };
        names
            .into_iter()
            .any(|n| matches!(env.get(n), Some(Val::T(t)) if t.has_nan()))
    });
    if operand_nan {
        return Ok(());
    }
    Err(Error::sem(
        loc,
        format!(
            "`{}` made a NaN from NaN-free operands; the ANE does not propagate NaN \
             (PREC-NO-NAN), so its value here is unknown",
            s.op
        ),
    ))
}

fn check_type(loc: &str, declared: &ValueType, v: &Val) -> Result<()> {
    let ok = match (declared, v) {
        (ValueType::Tensor(t), Val::T(x)) => t.shape == x.shape && t.dtype == x.dtype(),
        (ValueType::Scalar(DType::String), Val::Str(_)) => true,
        (ValueType::Scalar(d), Val::T(x)) => {
            x.shape.is_empty()
                && (x.dtype() == *d
                    || !matches!(d, DType::Fp16 | DType::Fp32 | DType::Int32 | DType::Bool))
        }
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let got = match v {
        Val::T(x) => format!("{} {:?}", x.dtype(), x.shape),
        Val::Str(_) => "string".into(),
    };
    Err(Error::sem(
        loc,
        format!(
            "declared {}, computed {got}",
            crate::print::type_str(declared)
        ),
    ))
}

/// Argument accessors for one statement.
struct Args<'e> {
    loc: &'e str,
    s: &'e Statement,
    env: &'e HashMap<String, Val>,
}

impl<'e> Args<'e> {
    fn var(&self, name: &str) -> Result<&'e Tensor> {
        match self.env.get(name) {
            Some(Val::T(t)) => Ok(t),
            Some(Val::Str(_)) => Err(Error::sem(
                self.loc,
                format!("`{name}` is a string, not a tensor"),
            )),
            None => Err(Error::sem(self.loc, format!("undefined value `{name}`"))),
        }
    }

    fn val(&self, key: &str) -> Result<Val> {
        match self.s.args.get(key) {
            Some(Arg::Var(n)) => self
                .env
                .get(n)
                .cloned()
                .ok_or_else(|| Error::sem(self.loc, format!("undefined value `{n}`"))),
            Some(Arg::Inline(v)) => value_to_val(self.loc, v, None),
            Some(Arg::Tuple(_)) => Err(Error::sem(self.loc, format!("`{key}` is a tuple"))),
            None => Err(Error::sem(self.loc, format!("missing argument `{key}`"))),
        }
    }

    fn t(&self, key: &str) -> Result<&'e Tensor> {
        match self.s.args.get(key) {
            Some(Arg::Var(n)) => self.var(n),
            _ => Err(Error::sem(
                self.loc,
                format!("argument `{key}` must name a tensor value"),
            )),
        }
    }

    fn ints(&self, key: &str) -> Result<Vec<i64>> {
        match self.val(key)? {
            Val::T(t) => t
                .to_i64()
                .ok_or_else(|| Error::sem(self.loc, format!("`{key}` must be int32/bool"))),
            Val::Str(_) => Err(Error::sem(self.loc, format!("`{key}` must be int32/bool"))),
        }
    }

    fn int(&self, key: &str) -> Result<i64> {
        match self.ints(key)?.as_slice() {
            [v] => Ok(*v),
            v => Err(Error::sem(
                self.loc,
                format!("`{key}` must be one value, got {v:?}"),
            )),
        }
    }

    /// A scalar float argument, if given.
    fn opt_float(&self, key: &str) -> Result<Option<f32>> {
        if !self.s.args.contains_key(key) {
            return Ok(None);
        }
        match self.val(key)? {
            Val::T(t) if t.numel() == 1 => Ok(Some(t.to_f32()[0])),
            _ => Err(Error::sem(self.loc, format!("`{key}` must be one float"))),
        }
    }

    fn string(&self, key: &str) -> Result<String> {
        match self.val(key)? {
            Val::Str(s) => Ok(s),
            Val::T(_) => Err(Error::sem(self.loc, format!("`{key}` must be a string"))),
        }
    }
}
