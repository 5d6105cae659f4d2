//! Dense tensors of the simulator, stored in their MIL dtype (fp16 as `half::f16`).

use half::f16;

use crate::error::{Error, Result};
use crate::ir::DType;

/// Element storage.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// fp16 elements.
    F16(Vec<f16>),
    /// fp32 elements.
    F32(Vec<f32>),
    /// int32 elements.
    I32(Vec<i32>),
    /// bool elements.
    Bool(Vec<bool>),
}

/// A dense row-major tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Dimensions (empty for a scalar).
    pub shape: Vec<usize>,
    /// Elements; `len == shape.iter().product()`.
    pub data: Data,
}

impl Tensor {
    /// Builds a tensor of `dtype` from f32 values, rounding to fp16 when
    /// `dtype` is fp16 (round to nearest even), truncating for int32.
    pub fn from_f32(dtype: DType, shape: &[usize], v: &[f32]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != v.len() {
            return Err(Error::sem(
                "tensor",
                format!("{} values for shape {shape:?}", v.len()),
            ));
        }
        let data = match dtype {
            DType::Fp16 => Data::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
            DType::Fp32 => Data::F32(v.to_vec()),
            DType::Int32 => Data::I32(v.iter().map(|&x| x as i32).collect()),
            DType::Bool => Data::Bool(v.iter().map(|&x| x != 0.0).collect()),
            d => return Err(Error::sem("tensor", format!("dtype {d} not simulated"))),
        };
        Ok(Tensor {
            shape: shape.to_vec(),
            data,
        })
    }

    /// An fp16 tensor from f32 values (rounded).
    pub fn f16(shape: &[usize], v: &[f32]) -> Result<Tensor> {
        Self::from_f32(DType::Fp16, shape, v)
    }

    /// The MIL dtype.
    pub fn dtype(&self) -> DType {
        match self.data {
            Data::F16(_) => DType::Fp16,
            Data::F32(_) => DType::Fp32,
            Data::I32(_) => DType::Int32,
            Data::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        match &self.data {
            Data::F16(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::Bool(v) => v.len(),
        }
    }

    /// Whether any float element is NaN.
    pub fn has_nan(&self) -> bool {
        match &self.data {
            Data::F16(v) => v.iter().any(|x| x.is_nan()),
            Data::F32(v) => v.iter().any(|x| x.is_nan()),
            Data::I32(_) | Data::Bool(_) => false,
        }
    }

    /// All elements widened to f32 (exact for fp16, bool as 0/1).
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            Data::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::F32(v) => v.clone(),
            Data::I32(v) => v.iter().map(|&x| x as f32).collect(),
            Data::Bool(v) => v.iter().map(|&x| f32::from(u8::from(x))).collect(),
        }
    }

    /// Integer view (int32 tensors and bools), for shape/axis parameters.
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        match &self.data {
            Data::I32(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
            Data::Bool(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
            _ => None,
        }
    }

    /// Gathers elements by flat source indices into a new tensor of `shape`
    /// (no arithmetic, so no rounding).
    pub(crate) fn gather(&self, shape: Vec<usize>, idx: &[usize]) -> Tensor {
        fn g<T: Copy>(v: &[T], idx: &[usize]) -> Vec<T> {
            idx.iter().map(|&i| v[i]).collect()
        }
        let data = match &self.data {
            Data::F16(v) => Data::F16(g(v, idx)),
            Data::F32(v) => Data::F32(g(v, idx)),
            Data::I32(v) => Data::I32(g(v, idx)),
            Data::Bool(v) => Data::Bool(g(v, idx)),
        };
        Tensor { shape, data }
    }
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// numpy broadcast of two shapes.
pub(crate) fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// For each element of `out_shape`, the flat index into a tensor of `shape`
/// broadcast to it.
pub(crate) fn broadcast_index(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let r = out_shape.len();
    let st = strides(shape);
    let n: usize = out_shape.iter().product();
    let mut idx = Vec::with_capacity(n);
    let mut coord = vec![0usize; r];
    for _ in 0..n {
        let mut flat = 0;
        for (k, &c) in coord.iter().enumerate() {
            if k + shape.len() >= r {
                let d = k + shape.len() - r;
                if shape[d] != 1 {
                    flat += c * st[d];
                }
            }
        }
        idx.push(flat);
        for k in (0..r).rev() {
            coord[k] += 1;
            if coord[k] < out_shape[k] {
                break;
            }
            coord[k] = 0;
        }
    }
    idx
}
