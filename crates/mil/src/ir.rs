//! The MIL program IR: programs, functions, statements, types and literal values.

use std::collections::BTreeMap;
use std::fmt;

/// Element / scalar data types of the MIL text dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE binary16.
    Fp16,
    /// IEEE binary32.
    Fp32,
    /// IEEE binary64.
    Fp64,
    /// Signed 8-bit integer.
    Int8,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// Unsigned 4-bit integer (packed in weight blobs: palette indices).
    UInt4,
    /// Unsigned 6-bit integer (packed in weight blobs: palette indices).
    UInt6,
    /// Unsigned 8-bit integer.
    UInt8,
    /// Unsigned 16-bit integer.
    UInt16,
    /// Unsigned 32-bit integer.
    UInt32,
    /// Unsigned 64-bit integer.
    UInt64,
    /// Boolean.
    Bool,
    /// UTF-8 string (scalars only).
    String,
}

impl DType {
    const ALL: [(DType, &'static str); 15] = [
        (DType::Fp16, "fp16"),
        (DType::Fp32, "fp32"),
        (DType::Fp64, "fp64"),
        (DType::Int8, "int8"),
        (DType::Int16, "int16"),
        (DType::Int32, "int32"),
        (DType::Int64, "int64"),
        (DType::UInt4, "uint4"),
        (DType::UInt6, "uint6"),
        (DType::UInt8, "uint8"),
        (DType::UInt16, "uint16"),
        (DType::UInt32, "uint32"),
        (DType::UInt64, "uint64"),
        (DType::Bool, "bool"),
        (DType::String, "string"),
    ];

    /// The MIL spelling (`fp16`, `int32`, ...).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(d, _)| *d == self)
            .map_or("?", |(_, n)| n)
    }

    /// Parses a MIL dtype spelling.
    pub fn from_name(s: &str) -> Option<DType> {
        Self::ALL.iter().find(|(_, n)| *n == s).map(|(d, _)| *d)
    }

    /// Size of one element in bytes (strings: 0; sub-byte types: 1, see
    /// [`DType::bits`]).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Int8 | DType::UInt8 | DType::Bool | DType::UInt4 | DType::UInt6 => 1,
            DType::Fp16 | DType::Int16 | DType::UInt16 => 2,
            DType::Fp32 | DType::Int32 | DType::UInt32 => 4,
            DType::Fp64 | DType::Int64 | DType::UInt64 => 8,
            DType::String => 0,
        }
    }

    /// Bits of one element as stored in a weight blob (sub-byte types are
    /// packed; strings: 0).
    pub fn bits(self) -> usize {
        match self {
            DType::UInt4 => 4,
            DType::UInt6 => 6,
            d => 8 * d.size_bytes(),
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::Fp16 | DType::Fp32 | DType::Fp64)
    }

    /// True for the integer types.
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::Int8
                | DType::Int16
                | DType::Int32
                | DType::Int64
                | DType::UInt4
                | DType::UInt6
                | DType::UInt8
                | DType::UInt16
                | DType::UInt32
                | DType::UInt64
        )
    }

    /// Inclusive value range of an integer type.
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            DType::Int8 => (i8::MIN.into(), i8::MAX.into()),
            DType::Int16 => (i16::MIN.into(), i16::MAX.into()),
            DType::Int32 => (i32::MIN.into(), i32::MAX.into()),
            DType::Int64 => (i64::MIN.into(), i64::MAX.into()),
            DType::UInt4 => (0, 15),
            DType::UInt6 => (0, 63),
            DType::UInt8 => (0, u8::MAX.into()),
            DType::UInt16 => (0, u16::MAX.into()),
            DType::UInt32 => (0, u32::MAX.into()),
            DType::UInt64 => (0, u64::MAX.into()),
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A statically shaped tensor type `tensor<dtype, [d0, d1, ...]>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first (empty for rank 0).
    pub shape: Vec<usize>,
}

impl TensorType {
    /// Builds a tensor type.
    pub fn new(dtype: DType, shape: &[usize]) -> Self {
        TensorType {
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// Number of elements (saturating on overflow).
    pub fn numel(&self) -> usize {
        self.shape.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }

    /// Size in bytes (saturating on overflow).
    pub fn size_bytes(&self) -> usize {
        self.numel().saturating_mul(self.dtype.size_bytes())
    }
}

/// The type of an SSA value: a tensor or a scalar.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `tensor<dtype, [...]>`.
    Tensor(TensorType),
    /// A scalar such as `int32`, `bool`, `string`, `fp16`.
    Scalar(DType),
}

impl ValueType {
    /// The tensor type, if this is a tensor.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            ValueType::Tensor(t) => Some(t),
            ValueType::Scalar(_) => None,
        }
    }

    /// The element / scalar dtype.
    pub fn dtype(&self) -> DType {
        match self {
            ValueType::Tensor(t) => t.dtype,
            ValueType::Scalar(d) => *d,
        }
    }
}

/// A scalar literal. Floats are stored already rounded to their dtype.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// `bool(true)`.
    Bool(bool),
    /// Integer of the given integer dtype (range checked at construction).
    Int(DType, i128),
    /// Float of the given float dtype; the value is exactly representable in it.
    Float(DType, f64),
    /// `string("...")`.
    Str(String),
}

impl Scalar {
    /// The dtype of this scalar.
    pub fn dtype(&self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(d, _) | Scalar::Float(d, _) => *d,
            Scalar::Str(_) => DType::String,
        }
    }

    /// Builds an fp16 scalar, rounding `v` to the nearest fp16.
    pub fn fp16(v: f64) -> Self {
        Scalar::Float(DType::Fp16, round_to(DType::Fp16, v))
    }

    /// Builds an fp32 scalar, rounding `v` to the nearest fp32.
    pub fn fp32(v: f64) -> Self {
        Scalar::Float(DType::Fp32, round_to(DType::Fp32, v))
    }

    /// Builds an int32 scalar.
    pub fn int32(v: i32) -> Self {
        Scalar::Int(DType::Int32, v.into())
    }

    /// Numeric value as f64 (bools as 0/1; strings: None).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::Bool(b) => Some(f64::from(u8::from(*b))),
            Scalar::Int(_, v) => Some(*v as f64),
            Scalar::Float(_, v) => Some(*v),
            Scalar::Str(_) => None,
        }
    }

    /// Integer value, if this is an integer.
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Scalar::Int(_, v) => Some(*v),
            _ => None,
        }
    }
}

/// Rounds `v` to the precision of a float dtype (identity for fp64 and non-floats).
pub fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::Fp16 => half::f16::from_f64(v).to_f64(),
        DType::Fp32 => f64::from(v as f32),
        _ => v,
    }
}

/// An inline tensor literal, elements in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorLit {
    /// Its type; `values.len() == ty.numel()`.
    pub ty: TensorType,
    /// Elements, row-major.
    pub values: Vec<Scalar>,
}

/// A `BLOBFILE(path = ..., offset = ...)` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// The declared tensor type of the constant.
    pub ty: TensorType,
    /// Weight path, e.g. `@model_path/weights/weight.bin`.
    pub path: String,
    /// Byte offset of the 64-byte metadata block in the file.
    pub offset: u64,
}

/// A literal value as it appears in attributes (`val = ...`) or inline arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A scalar.
    Scalar(Scalar),
    /// An inline tensor.
    Tensor(TensorLit),
    /// A tensor stored in a weight blob file.
    Blob(BlobRef),
}

impl Value {
    /// The type this literal denotes.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::Scalar(s) => ValueType::Scalar(s.dtype()),
            Value::Tensor(t) => ValueType::Tensor(t.ty.clone()),
            Value::Blob(b) => ValueType::Tensor(b.ty.clone()),
        }
    }

    /// Integer list of a scalar int or an int tensor literal.
    pub fn as_ints(&self) -> Option<Vec<i128>> {
        match self {
            Value::Scalar(s) => s.as_int().map(|v| vec![v]),
            Value::Tensor(t) => t.values.iter().map(Scalar::as_int).collect(),
            Value::Blob(_) => None,
        }
    }
}

/// An operation argument.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// Reference to an SSA value (function input or earlier statement).
    Var(String),
    /// A tuple of SSA names, e.g. `values = (a, b)` of `concat`.
    Tuple(Vec<String>),
    /// An inline literal (legal MIL, but rejected on the ANE for non-tensor
    /// arguments: see rule `ANE-INLINE-ARG`).
    Inline(Value),
}

/// One statement: `<type> <name> = <op>(<args>)[name = string("<label>"), <attrs>];`.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    /// Declared result type.
    pub ty: ValueType,
    /// SSA name of the result.
    pub name: String,
    /// Op name (`conv`, `const`, ...).
    pub op: String,
    /// Keyword arguments (printed in alphabetical order).
    pub args: BTreeMap<String, Arg>,
    /// The `name` attribute (op label); may differ from the SSA name.
    pub label: String,
    /// Other attributes (`val` for `const`), printed alphabetically with `name`.
    pub attrs: BTreeMap<String, Value>,
}

impl Statement {
    /// The `val` attribute of a `const` statement.
    pub fn const_val(&self) -> Option<&Value> {
        if self.op == "const" {
            self.attrs.get("val")
        } else {
            None
        }
    }
}

/// A function: `func <name><<opset>>(<inputs>) { <body> } -> (<outputs>);`.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    /// Function name (`main`).
    pub name: String,
    /// Opset (`ios18`).
    pub opset: String,
    /// Inputs in declaration order.
    pub inputs: Vec<(String, TensorType)>,
    /// Statements in order (SSA, topologically sorted).
    pub body: Vec<Statement>,
    /// Returned SSA names.
    pub outputs: Vec<String>,
}

impl Function {
    /// Type of a named value (input or statement result).
    pub fn value_type(&self, name: &str) -> Option<ValueType> {
        if let Some((_, t)) = self.inputs.iter().find(|(n, _)| n == name) {
            return Some(ValueType::Tensor(t.clone()));
        }
        self.body
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.ty.clone())
    }

    /// The statement defining `name`.
    pub fn statement(&self, name: &str) -> Option<&Statement> {
        self.body.iter().find(|s| s.name == name)
    }
}

/// How scalar literals are spelled: the two dialects of ane-spec.md §2.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarStyle {
    /// `string("x")`, `int32(1)` (program 1.3 / ios18).
    Short,
    /// `tensor<string, []>("x")` (program 1.0 / coremltools).
    RankZeroTensor,
}

/// A whole MIL program.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// `program(<major>.<minor>)`, kept as written (e.g. `"1.3"`).
    pub version: String,
    /// `buildInfo` entries in order.
    pub build_info: Vec<(String, String)>,
    /// Scalar spelling used when printing.
    pub scalar_style: ScalarStyle,
    /// Functions in order.
    pub functions: Vec<Function>,
}

/// The buildInfo values used by maderix/ANE, Orion and Espresso (ane-spec.md §2.2).
pub const DEFAULT_BUILD_INFO: [(&str, &str); 4] = [
    ("coremlc-component-MIL", "3510.2.1"),
    ("coremlc-version", "3505.4.1"),
    ("coremltools-component-milinternal", ""),
    ("coremltools-version", "9.0"),
];

impl Program {
    /// An empty `program(1.3)` with the default buildInfo.
    pub fn new() -> Self {
        Program {
            version: "1.3".into(),
            build_info: DEFAULT_BUILD_INFO
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            scalar_style: ScalarStyle::Short,
            functions: Vec::new(),
        }
    }

    /// The function called `name`.
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// Rewrites every inline literal argument into a named `const` placed
    /// just before its user (named `<ssa>_<arg>`, suffixed `_1`, `_2`... if
    /// taken), which is the form the ANE accepts (rule `ANE-INLINE-ARG`).
    /// Returns how many arguments were hoisted.
    pub fn hoist_inline_args(&mut self) -> usize {
        let mut count = 0;
        for f in &mut self.functions {
            let mut taken: std::collections::HashSet<String> = f
                .inputs
                .iter()
                .map(|(n, _)| n.clone())
                .chain(f.body.iter().map(|s| s.name.clone()))
                .collect();
            let mut body = Vec::with_capacity(f.body.len());
            for mut s in std::mem::take(&mut f.body) {
                for (k, a) in s.args.iter_mut() {
                    let Arg::Inline(v) = a else { continue };
                    let base = format!("{}_{k}", s.name);
                    let mut name = base.clone();
                    let mut i = 1;
                    while taken.contains(&name) {
                        name = format!("{base}_{i}");
                        i += 1;
                    }
                    taken.insert(name.clone());
                    let mut attrs = BTreeMap::new();
                    attrs.insert("val".to_string(), v.clone());
                    body.push(Statement {
                        ty: v.value_type(),
                        name: name.clone(),
                        op: "const".into(),
                        args: BTreeMap::new(),
                        label: name.clone(),
                        attrs,
                    });
                    *a = Arg::Var(name);
                    count += 1;
                }
                body.push(s);
            }
            f.body = body;
        }
        count
    }
}

impl Default for Program {
    fn default() -> Self {
        Self::new()
    }
}
