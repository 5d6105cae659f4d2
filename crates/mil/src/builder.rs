//! Typed builder: emits ANE-style MIL (named consts for every non-tensor argument, labels equal to SSA names) with shape inference.

use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, Result};
use crate::ir::{
    Arg, BlobRef, DType, Function, Program, Scalar, Statement, TensorLit, TensorType, Value,
    ValueType,
};

/// A handle to a value built so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Var {
    name: String,
    ty: ValueType,
}

impl Var {
    /// SSA name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Type.
    pub fn ty(&self) -> &ValueType {
        &self.ty
    }

    /// Tensor shape (empty for scalars).
    pub fn shape(&self) -> &[usize] {
        self.ty.as_tensor().map_or(&[], |t| &t.shape)
    }
}

/// Convolution options; `Default` is the 1x1, unit-stride, `valid` case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvOpts {
    /// `[sh, sw]`.
    pub strides: [usize; 2],
    /// `[dh, dw]`.
    pub dilations: [usize; 2],
    /// `[top, bottom, left, right]` (used with `pad_type = "custom"`).
    pub pad: [usize; 4],
    /// `"valid"`, `"same"` or `"custom"`.
    pub pad_type: &'static str,
    /// Groups.
    pub groups: usize,
}

impl Default for ConvOpts {
    fn default() -> Self {
        ConvOpts {
            strides: [1, 1],
            dilations: [1, 1],
            pad: [0; 4],
            pad_type: "valid",
            groups: 1,
        }
    }
}

/// Builds one function.
#[derive(Debug, Clone)]
pub struct FunctionBuilder {
    f: Function,
    names: HashSet<String>,
    /// names kept for later statements: generated names avoid them
    reserved: HashSet<String>,
    /// printed const value -> name, to share identical parameter consts
    consts: BTreeMap<String, Var>,
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

fn i32v(loc: &str, v: usize) -> Result<Scalar> {
    i32::try_from(v)
        .map(Scalar::int32)
        .map_err(|_| Error::sem(loc, format!("{v} does not fit int32")))
}

impl FunctionBuilder {
    /// A function `name` with opset `ios18`.
    pub fn new(name: &str) -> Self {
        FunctionBuilder {
            f: Function {
                name: name.into(),
                opset: "ios18".into(),
                inputs: Vec::new(),
                body: Vec::new(),
                outputs: Vec::new(),
            },
            names: HashSet::new(),
            reserved: HashSet::new(),
            consts: BTreeMap::new(),
        }
    }

    fn claim(&mut self, name: &str) -> Result<()> {
        if !is_ident(name) {
            return Err(Error::sem(name, "not a valid MIL identifier"));
        }
        if !self.names.insert(name.to_string()) {
            return Err(Error::sem(name, "name already used in this function"));
        }
        self.reserved.remove(name);
        Ok(())
    }

    /// Keeps `names` for statements added later: names the builder makes up
    /// (shared parameter consts, [`Self::fresh_name`]) never take them.
    pub fn reserve<'n>(&mut self, names: impl IntoIterator<Item = &'n str>) {
        self.reserved.extend(names.into_iter().map(str::to_string));
    }

    /// `base`, or `base_1`, `base_2`, ...: the first name neither used nor reserved.
    pub fn fresh_name(&self, base: &str) -> String {
        first_free(base, |n| {
            self.names.contains(n) || self.reserved.contains(n)
        })
    }

    /// Number of statements so far.
    pub fn len(&self) -> usize {
        self.f.body.len()
    }

    /// Whether no statement was added yet.
    pub fn is_empty(&self) -> bool {
        self.f.body.is_empty()
    }

    /// Names of the statements from index `from` on.
    pub fn statement_names(&self, from: usize) -> impl Iterator<Item = &str> {
        self.f.body.iter().skip(from).map(|s| s.name.as_str())
    }

    /// Declares a tensor input.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<Var> {
        self.claim(name)?;
        let t = TensorType::new(dtype, shape);
        self.f.inputs.push((name.into(), t.clone()));
        Ok(Var {
            name: name.into(),
            ty: ValueType::Tensor(t),
        })
    }

    /// A named const holding `val`.
    pub fn const_value(&mut self, name: &str, val: Value) -> Result<Var> {
        self.claim(name)?;
        let ty = val.value_type();
        let mut attrs = BTreeMap::new();
        attrs.insert("val".to_string(), val);
        self.f.body.push(Statement {
            ty: ty.clone(),
            name: name.into(),
            op: "const".into(),
            args: BTreeMap::new(),
            label: name.into(),
            attrs,
        });
        Ok(Var {
            name: name.into(),
            ty,
        })
    }

    /// A tensor const read from a weight blob at MIL offset `offset`.
    pub fn const_blob(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        path: &str,
        offset: u64,
    ) -> Result<Var> {
        let b = BlobRef {
            ty: TensorType::new(dtype, shape),
            path: path.into(),
            offset,
        };
        self.const_value(name, Value::Blob(b))
    }

    /// A compile-time op whose operands are attributes, as coremltools writes
    /// the iOS16 ones and ANEForge runs them on e5rt (`op()[name = …, input =
    /// value]`, ane-evidence.md §a): the result is a constant tensor of type `ty`.
    fn constexpr(
        &mut self,
        name: &str,
        op: &str,
        attrs: Vec<(&str, Value)>,
        ty: TensorType,
    ) -> Result<Var> {
        let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        self.push_statement(name, op, BTreeMap::new(), attrs, ty)
    }

    /// `constexpr_affine_dequantize`: fp16 weights `scale[c] · q` from int8
    /// `quantized` (a blob of shape S) with one fp16 scale per index of axis
    /// `axis` (`scale`, a rank-1 blob) and zero point 0.
    pub fn constexpr_affine_dequantize(
        &mut self,
        name: &str,
        quantized: BlobRef,
        scale: BlobRef,
        axis: usize,
    ) -> Result<Var> {
        let shape = quantized.ty.shape.clone();
        let ok = quantized.ty.dtype == DType::Int8
            && scale.ty.dtype == DType::Fp16
            && axis < shape.len()
            && scale.ty.shape == [shape[axis]];
        if !ok {
            return Err(Error::sem(
                name,
                format!(
                    "affine dequantize of {} {:?} by {} {:?} along axis {axis}",
                    quantized.ty.dtype, shape, scale.ty.dtype, scale.ty.shape
                ),
            ));
        }
        let axis = i32v(name, axis)?;
        let attrs = vec![
            ("axis", Value::Scalar(axis)),
            ("quantized_data", Value::Blob(quantized)),
            ("scale", Value::Blob(scale)),
            ("zero_point", Value::Scalar(Scalar::Int(DType::Int8, 0))),
        ];
        self.constexpr(
            name,
            "constexpr_affine_dequantize",
            attrs,
            TensorType::new(DType::Fp16, &shape),
        )
    }

    /// `constexpr_lut_to_dense` (iOS18 form, operands as inputs, as
    /// coremltools writes it): fp16 weights `lut[g][indices]`
    /// from uint4/uint6/uint8 `indices` (a blob of shape S, rank r) and an
    /// fp16 `lut` blob of shape `[S₀/G, 1, …, 1, 2^bits, 1]` (rank r + 2):
    /// one palette per group of G consecutive indices along axis 0.
    pub fn constexpr_lut_to_dense(
        &mut self,
        name: &str,
        indices: BlobRef,
        lut: BlobRef,
    ) -> Result<Var> {
        let shape = indices.ty.shape.clone();
        let bits = indices.ty.dtype.bits();
        let r = shape.len();
        let ok = matches!(indices.ty.dtype, DType::UInt4 | DType::UInt6 | DType::UInt8)
            && lut.ty.dtype == DType::Fp16
            && lut.ty.shape.len() == r + 2
            && r > 0
            && lut.ty.shape[0] > 0
            && shape[0].is_multiple_of(lut.ty.shape[0])
            && lut.ty.shape[1..r].iter().all(|&d| d == 1)
            && lut.ty.shape[r] == 1 << bits
            && lut.ty.shape[r + 1] == 1;
        if !ok {
            return Err(Error::sem(
                name,
                format!(
                    "lut of {} {:?} with palettes {} {:?}",
                    indices.ty.dtype, shape, lut.ty.dtype, lut.ty.shape
                ),
            ));
        }
        // coremltools 9 writes this iOS18 op with its operands as inputs
        // (BLOBFILE literals), unlike the iOS16 constexpr ops
        let args = vec![
            ("indices", Arg::Inline(Value::Blob(indices))),
            ("lut", Arg::Inline(Value::Blob(lut))),
        ];
        self.push_op(
            name,
            "constexpr_lut_to_dense",
            args,
            TensorType::new(DType::Fp16, &shape),
        )
    }

    /// A named fp16 scalar const (e.g. an epsilon), rounded to fp16.
    pub fn fp16(&mut self, name: &str, v: f64) -> Result<Var> {
        self.const_value(name, Value::Scalar(Scalar::fp16(v)))
    }

    /// A parameter const shared by value: `base`, `base_1`, ...
    fn param(&mut self, base: &str, val: Value) -> Result<Var> {
        let key = format!(
            "{base}={}",
            crate::print::value_str(&val, crate::ir::ScalarStyle::Short)
        );
        if let Some(v) = self.consts.get(&key) {
            return Ok(v.clone());
        }
        let name = self.fresh_name(base);
        let v = self.const_value(&name, val)?;
        self.consts.insert(key, v.clone());
        Ok(v)
    }

    fn int_list(&mut self, base: &str, vals: &[i64]) -> Result<Var> {
        let values = vals
            .iter()
            .map(|&v| {
                i32::try_from(v)
                    .map(Scalar::int32)
                    .map_err(|_| Error::sem(base, "value does not fit int32"))
            })
            .collect::<Result<Vec<_>>>()?;
        let ty = TensorType::new(DType::Int32, &[vals.len()]);
        self.param(base, Value::Tensor(TensorLit { ty, values }))
    }

    fn push_op(
        &mut self,
        name: &str,
        op: &str,
        args: Vec<(&str, Arg)>,
        ty: TensorType,
    ) -> Result<Var> {
        let args = args.into_iter().map(|(k, a)| (k.to_string(), a)).collect();
        self.push_statement(name, op, args, BTreeMap::new(), ty)
    }

    /// Appends `name = op(args)[name, attrs]` of type `ty`.
    fn push_statement(
        &mut self,
        name: &str,
        op: &str,
        args: BTreeMap<String, Arg>,
        attrs: BTreeMap<String, Value>,
        ty: TensorType,
    ) -> Result<Var> {
        self.claim(name)?;
        let ty = ValueType::Tensor(ty);
        self.f.body.push(Statement {
            ty: ty.clone(),
            name: name.into(),
            op: op.into(),
            args,
            label: name.into(),
            attrs,
        });
        Ok(Var {
            name: name.into(),
            ty,
        })
    }

    fn tensor<'v>(&self, loc: &str, v: &'v Var) -> Result<&'v TensorType> {
        v.ty.as_tensor()
            .ok_or_else(|| Error::sem(loc, format!("`{}` is not a tensor", v.name)))
    }

    /// 1x1 (or any kernel) conv with default options.
    pub fn conv(&mut self, name: &str, x: &Var, weight: &Var) -> Result<Var> {
        self.conv_with(name, x, weight, &ConvOpts::default())
    }

    /// Conv with explicit options; weight is `[Cout, Cin/groups, kH, kW]`.
    pub fn conv_with(&mut self, name: &str, x: &Var, weight: &Var, o: &ConvOpts) -> Result<Var> {
        let (xt, wt) = (
            self.tensor(name, x)?.clone(),
            self.tensor(name, weight)?.clone(),
        );
        let (xs, ws) = (&xt.shape, &wt.shape);
        if xs.len() != 4
            || ws.len() != 4
            || o.groups == 0
            || xs[1] != ws[1] * o.groups
            || ws[0] % o.groups != 0
        {
            return Err(Error::sem(
                name,
                format!("conv of x {xs:?} with weight {ws:?}, groups {}", o.groups),
            ));
        }
        let pad = match o.pad_type {
            "valid" => [0; 4],
            "custom" => o.pad,
            "same" => {
                let mut p = [0; 4];
                for a in 0..2 {
                    let out = xs[2 + a].div_ceil(o.strides[a].max(1));
                    let need = (out - 1) * o.strides[a] + o.dilations[a] * (ws[2 + a] - 1) + 1;
                    let total = need.saturating_sub(xs[2 + a]);
                    p[2 * a] = total / 2;
                    p[2 * a + 1] = total - total / 2;
                }
                p
            }
            other => return Err(Error::sem(name, format!("unknown pad_type {other:?}"))),
        };
        let mut out = [0usize; 2];
        for a in 0..2 {
            let padded = xs[2 + a] + pad[2 * a] + pad[2 * a + 1];
            let eff = o.dilations[a] * (ws[2 + a] - 1) + 1;
            if padded < eff || o.strides[a] == 0 {
                return Err(Error::sem(name, "kernel larger than padded input"));
            }
            out[a] = (padded - eff) / o.strides[a] + 1;
        }
        let dil = self.int_list("dilations", &[o.dilations[0] as i64, o.dilations[1] as i64])?;
        let groups = self.param("groups", Value::Scalar(i32v(name, o.groups)?))?;
        let padv = self.int_list("pad", &o.pad.map(|p| p as i64))?;
        let pad_type = self.param("pad_type", Value::Scalar(Scalar::Str(o.pad_type.into())))?;
        let strides = self.int_list("strides", &[o.strides[0] as i64, o.strides[1] as i64])?;
        let ty = TensorType::new(xt.dtype, &[xs[0], ws[0], out[0], out[1]]);
        let v = |v: &Var| Arg::Var(v.name.clone());
        self.push_op(
            name,
            "conv",
            vec![
                ("dilations", v(&dil)),
                ("groups", v(&groups)),
                ("pad", v(&padv)),
                ("pad_type", v(&pad_type)),
                ("strides", v(&strides)),
                ("weight", v(weight)),
                ("x", v(x)),
            ],
            ty,
        )
    }

    /// Batched matmul over the last two dims with optional transposes.
    pub fn matmul(
        &mut self,
        name: &str,
        x: &Var,
        y: &Var,
        transpose_x: bool,
        transpose_y: bool,
    ) -> Result<Var> {
        let (xt, yt) = (self.tensor(name, x)?.clone(), self.tensor(name, y)?.clone());
        let (xr, yr) = (xt.shape.len(), yt.shape.len());
        if xr < 2 || yr < 2 {
            return Err(Error::sem(name, "matmul needs rank >= 2"));
        }
        let (m, k) = if transpose_x {
            (xt.shape[xr - 1], xt.shape[xr - 2])
        } else {
            (xt.shape[xr - 2], xt.shape[xr - 1])
        };
        let (k2, n) = if transpose_y {
            (yt.shape[yr - 1], yt.shape[yr - 2])
        } else {
            (yt.shape[yr - 2], yt.shape[yr - 1])
        };
        let batch = crate::sim::broadcast_shape(&xt.shape[..xr - 2], &yt.shape[..yr - 2]);
        let mut shape = match (k == k2, batch) {
            (true, Some(b)) => b,
            _ => {
                return Err(Error::sem(
                    name,
                    format!("matmul of {:?} and {:?}", xt.shape, yt.shape),
                ))
            }
        };
        shape.extend([m, n]);
        let tx = self.param("transpose_x", Value::Scalar(Scalar::Bool(transpose_x)))?;
        let ty_ = self.param("transpose_y", Value::Scalar(Scalar::Bool(transpose_y)))?;
        let args = vec![
            ("transpose_x", Arg::Var(tx.name)),
            ("transpose_y", Arg::Var(ty_.name)),
            ("x", Arg::Var(x.name.clone())),
            ("y", Arg::Var(y.name.clone())),
        ];
        self.push_op(name, "matmul", args, TensorType::new(xt.dtype, &shape))
    }

    fn binary(&mut self, op: &str, name: &str, x: &Var, y: &Var) -> Result<Var> {
        let (xs, ys) = (x.shape().to_vec(), y.shape().to_vec());
        let shape = crate::sim::broadcast_shape(&xs, &ys)
            .ok_or_else(|| Error::sem(name, format!("{xs:?} and {ys:?} do not broadcast")))?;
        let dt = x.ty.dtype();
        if y.ty.dtype() != dt {
            return Err(Error::sem(name, "dtype mismatch"));
        }
        let args = vec![
            ("x", Arg::Var(x.name.clone())),
            ("y", Arg::Var(y.name.clone())),
        ];
        self.push_op(name, op, args, TensorType::new(dt, &shape))
    }

    /// `x + y` (broadcasting).
    pub fn add(&mut self, name: &str, x: &Var, y: &Var) -> Result<Var> {
        self.binary("add", name, x, y)
    }
    /// `x - y`.
    pub fn sub(&mut self, name: &str, x: &Var, y: &Var) -> Result<Var> {
        self.binary("sub", name, x, y)
    }
    /// `x * y`.
    pub fn mul(&mut self, name: &str, x: &Var, y: &Var) -> Result<Var> {
        self.binary("mul", name, x, y)
    }
    /// `x / y` (not in the proven set: rule `ANE-OP`).
    pub fn real_div(&mut self, name: &str, x: &Var, y: &Var) -> Result<Var> {
        self.binary("real_div", name, x, y)
    }
    /// `x ^ y`.
    pub fn pow(&mut self, name: &str, x: &Var, y: &Var) -> Result<Var> {
        self.binary("pow", name, x, y)
    }

    /// Element-wise unary op `op` (`sigmoid`, `tanh`, `exp`, `relu`, `sqrt`, `identity`).
    pub fn unary(&mut self, op: &str, name: &str, x: &Var) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        self.push_op(name, op, vec![("x", Arg::Var(x.name.clone()))], t)
    }
    /// `sigmoid(x)`.
    pub fn sigmoid(&mut self, name: &str, x: &Var) -> Result<Var> {
        self.unary("sigmoid", name, x)
    }

    /// `tanh(x)`.
    pub fn tanh(&mut self, name: &str, x: &Var) -> Result<Var> {
        self.unary("tanh", name, x)
    }
    /// `exp(x)`.
    pub fn exp(&mut self, name: &str, x: &Var) -> Result<Var> {
        self.unary("exp", name, x)
    }
    /// `max(x, 0)`.
    pub fn relu(&mut self, name: &str, x: &Var) -> Result<Var> {
        self.unary("relu", name, x)
    }
    /// `sqrt(x)`.
    pub fn sqrt(&mut self, name: &str, x: &Var) -> Result<Var> {
        self.unary("sqrt", name, x)
    }

    /// `reduce_sum` over `axes`.
    pub fn reduce_sum(
        &mut self,
        name: &str,
        x: &Var,
        axes: &[i64],
        keep_dims: bool,
    ) -> Result<Var> {
        self.reduce("reduce_sum", name, x, axes, keep_dims)
    }
    /// `reduce_max` over `axes`.
    pub fn reduce_max(
        &mut self,
        name: &str,
        x: &Var,
        axes: &[i64],
        keep_dims: bool,
    ) -> Result<Var> {
        self.reduce("reduce_max", name, x, axes, keep_dims)
    }
    /// `reduce_mean` over `axes` (not in the proven set: rule `ANE-OP`).
    pub fn reduce_mean(
        &mut self,
        name: &str,
        x: &Var,
        axes: &[i64],
        keep_dims: bool,
    ) -> Result<Var> {
        self.reduce("reduce_mean", name, x, axes, keep_dims)
    }

    /// Softmax along `axis`.
    pub fn softmax(&mut self, name: &str, x: &Var, axis: i32) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        let a = self.param("axis", Value::Scalar(Scalar::int32(axis)))?;
        self.push_op(
            name,
            "softmax",
            vec![("axis", Arg::Var(a.name)), ("x", Arg::Var(x.name.clone()))],
            t,
        )
    }

    /// `reduce_sum` / `reduce_max` / `reduce_mean` over `axes`.
    pub fn reduce(
        &mut self,
        op: &str,
        name: &str,
        x: &Var,
        axes: &[i64],
        keep_dims: bool,
    ) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        let r = t.shape.len() as i64;
        let mut red = vec![false; t.shape.len()];
        for &a in axes {
            let n = if a < 0 { a + r } else { a };
            match usize::try_from(n).ok().filter(|&n| n < t.shape.len()) {
                Some(n) => red[n] = true,
                None => return Err(Error::sem(name, format!("axis {a} out of range"))),
            }
        }
        let shape: Vec<usize> = t
            .shape
            .iter()
            .zip(&red)
            .filter_map(|(&d, &rd)| match (rd, keep_dims) {
                (true, true) => Some(1),
                (true, false) => None,
                (false, _) => Some(d),
            })
            .collect();
        let ax = self.int_list("axes", axes)?;
        let kd = self.param("keep_dims", Value::Scalar(Scalar::Bool(keep_dims)))?;
        let args = vec![
            ("axes", Arg::Var(ax.name)),
            ("keep_dims", Arg::Var(kd.name)),
            ("x", Arg::Var(x.name.clone())),
        ];
        self.push_op(name, op, args, TensorType::new(t.dtype, &shape))
    }

    /// Row-major reshape.
    pub fn reshape(&mut self, name: &str, x: &Var, shape: &[usize]) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        if shape.iter().product::<usize>() != t.numel() {
            return Err(Error::sem(
                name,
                format!("reshape {:?} to {shape:?}", t.shape),
            ));
        }
        let s = self.int_list(
            "shape",
            &shape.iter().map(|&d| d as i64).collect::<Vec<_>>(),
        )?;
        self.push_op(
            name,
            "reshape",
            vec![("shape", Arg::Var(s.name)), ("x", Arg::Var(x.name.clone()))],
            TensorType::new(t.dtype, shape),
        )
    }

    /// Axis permutation.
    pub fn transpose(&mut self, name: &str, x: &Var, perm: &[usize]) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        let mut sorted = perm.to_vec();
        sorted.sort_unstable();
        if sorted != (0..t.shape.len()).collect::<Vec<_>>() {
            return Err(Error::sem(name, format!("bad perm {perm:?}")));
        }
        let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
        let p = self.int_list("perm", &perm.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
        self.push_op(
            name,
            "transpose",
            vec![("perm", Arg::Var(p.name)), ("x", Arg::Var(x.name.clone()))],
            TensorType::new(t.dtype, &shape),
        )
    }

    /// dtype conversion (`fp16`/`fp32`).
    pub fn cast(&mut self, name: &str, x: &Var, to: DType) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        let d = self.param("dtype", Value::Scalar(Scalar::Str(to.name().into())))?;
        self.push_op(
            name,
            "cast",
            vec![("dtype", Arg::Var(d.name)), ("x", Arg::Var(x.name.clone()))],
            TensorType::new(to, &t.shape),
        )
    }

    /// Static slice `x[begin .. begin + size]`.
    pub fn slice_by_size(
        &mut self,
        name: &str,
        x: &Var,
        begin: &[usize],
        size: &[usize],
    ) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        let ok = begin.len() == t.shape.len()
            && size.len() == t.shape.len()
            && (0..t.shape.len()).all(|d| size[d] > 0 && begin[d] + size[d] <= t.shape[d]);
        if !ok {
            return Err(Error::sem(
                name,
                format!("slice {begin:?}+{size:?} of {:?}", t.shape),
            ));
        }
        let b = self.int_list(
            "begin",
            &begin.iter().map(|&d| d as i64).collect::<Vec<_>>(),
        )?;
        let s = self.int_list("size", &size.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
        let args = vec![
            ("begin", Arg::Var(b.name)),
            ("size", Arg::Var(s.name)),
            ("x", Arg::Var(x.name.clone())),
        ];
        self.push_op(name, "slice_by_size", args, TensorType::new(t.dtype, size))
    }

    /// Concatenation along `axis` (non-interleaved).
    pub fn concat(&mut self, name: &str, values: &[&Var], axis: usize) -> Result<Var> {
        let first = values
            .first()
            .ok_or_else(|| Error::sem(name, "concat of nothing"))?;
        let t0 = self.tensor(name, first)?.clone();
        let mut shape = t0.shape.clone();
        if axis >= shape.len() {
            return Err(Error::sem(name, "axis out of range"));
        }
        shape[axis] = 0;
        for v in values {
            let t = self.tensor(name, v)?;
            if t.shape.len() != t0.shape.len()
                || (0..t.shape.len()).any(|d| d != axis && t.shape[d] != t0.shape[d])
            {
                return Err(Error::sem(
                    name,
                    format!("cannot concat {:?} with {:?}", t0.shape, t.shape),
                ));
            }
            shape[axis] += t.shape[axis];
        }
        let a = self.param("axis", Value::Scalar(i32v(name, axis)?))?;
        let il = self.param("interleave", Value::Scalar(Scalar::Bool(false)))?;
        let tuple = Arg::Tuple(values.iter().map(|v| v.name.clone()).collect());
        let args = vec![
            ("axis", Arg::Var(a.name)),
            ("interleave", Arg::Var(il.name)),
            ("values", tuple),
        ];
        self.push_op(name, "concat", args, TensorType::new(t0.dtype, &shape))
    }

    /// Element-wise `max(x, y)` (broadcasting).
    pub fn maximum(&mut self, name: &str, x: &Var, y: &Var) -> Result<Var> {
        self.binary("maximum", name, x, y)
    }

    /// Element-wise `min(x, y)` (broadcasting).
    pub fn minimum(&mut self, name: &str, x: &Var, y: &Var) -> Result<Var> {
        self.binary("minimum", name, x, y)
    }

    /// `tile`: `x` repeated `reps[d]` times along every dim `d`.
    pub fn tile(&mut self, name: &str, x: &Var, reps: &[usize]) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        if reps.len() != t.shape.len() || reps.contains(&0) {
            return Err(Error::sem(name, format!("tile {:?} by {reps:?}", t.shape)));
        }
        let shape: Vec<usize> = t.shape.iter().zip(reps).map(|(d, r)| d * r).collect();
        let r = self.int_list("reps", &reps.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
        let args = vec![("reps", Arg::Var(r.name)), ("x", Arg::Var(x.name.clone()))];
        self.push_op(name, "tile", args, TensorType::new(t.dtype, &shape))
    }

    /// Constant padding: `pads` holds `[before, after]` for every dim of `x`.
    pub fn pad(&mut self, name: &str, x: &Var, pads: &[[usize; 2]], value: f64) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        if pads.len() != t.shape.len() {
            return Err(Error::sem(
                name,
                format!("{} pads for {:?}", pads.len(), t.shape),
            ));
        }
        let shape: Vec<usize> = t
            .shape
            .iter()
            .zip(pads)
            .map(|(d, [a, b])| d + a + b)
            .collect();
        let flat: Vec<i64> = pads
            .iter()
            .flat_map(|[a, b]| [*a as i64, *b as i64])
            .collect();
        let p = self.int_list("pad", &flat)?;
        let mode = self.param("mode", Value::Scalar(Scalar::Str("constant".into())))?;
        let cv = match t.dtype {
            DType::Fp32 => Scalar::fp32(value),
            _ => Scalar::fp16(value),
        };
        let c = self.param("constant_val", Value::Scalar(cv))?;
        let args = vec![
            ("constant_val", Arg::Var(c.name)),
            ("mode", Arg::Var(mode.name)),
            ("pad", Arg::Var(p.name)),
            ("x", Arg::Var(x.name.clone())),
        ];
        self.push_op(name, "pad", args, TensorType::new(t.dtype, &shape))
    }

    /// `reverse`: `x` with the order of `axes` reversed.
    pub fn reverse(&mut self, name: &str, x: &Var, axes: &[i64]) -> Result<Var> {
        let t = self.tensor(name, x)?.clone();
        let a = self.int_list("axes", axes)?;
        let args = vec![("axes", Arg::Var(a.name)), ("x", Arg::Var(x.name.clone()))];
        self.push_op(name, "reverse", args, t)
    }

    /// `scaled_dot_product_attention(query, key, value)` (no mask: the
    /// evidence shows `attn_mask` ignored on one path and rejected on the
    /// other): `softmax(q·kᵀ/√E)·v` over the last two dims.
    pub fn scaled_dot_product_attention(
        &mut self,
        name: &str,
        q: &Var,
        k: &Var,
        v: &Var,
    ) -> Result<Var> {
        let (qs, ks, vs) = (q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec());
        let r = qs.len();
        let ok = r >= 2
            && ks.len() == r
            && vs.len() == r
            && qs[r - 1] == ks[r - 1]
            && ks[r - 2] == vs[r - 2];
        let batch = (r >= 2)
            .then(|| crate::sim::broadcast_shape(&qs[..r - 2], &ks[..r - 2]))
            .flatten();
        let (true, Some(mut shape)) = (ok, batch) else {
            return Err(Error::sem(
                name,
                format!("attention of q {qs:?}, k {ks:?}, v {vs:?}"),
            ));
        };
        shape.extend([qs[r - 2], vs[r - 1]]);
        let args = vec![
            ("key", Arg::Var(k.name.clone())),
            ("query", Arg::Var(q.name.clone())),
            ("value", Arg::Var(v.name.clone())),
        ];
        self.push_op(
            name,
            "scaled_dot_product_attention",
            args,
            TensorType::new(q.ty.dtype(), &shape),
        )
    }

    /// Appends `v` to the returned values.
    pub fn output(&mut self, v: &Var) {
        self.f.outputs.push(v.name.clone());
    }

    /// The finished function.
    pub fn finish(self) -> Function {
        self.f
    }
}

/// `base`, or `base_1`, `base_2`, ...: the first name `taken` refuses.
pub fn first_free(base: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while taken(&name) {
        name = format!("{base}_{k}");
        k += 1;
    }
    name
}

/// A `program(1.3)` with the default buildInfo holding `functions`.
pub fn program(functions: Vec<Function>) -> Program {
    let mut p = Program::new();
    p.functions = functions;
    p
}
