//! Row views: a weight source that adds tensors made of consecutive rows of
//! a stored 2-D tensor (Phi-3's fused `qkv` and `gate_up` matrices become
//! the separate projections every backend already runs). A view borrows the
//! stored bytes; nothing is copied.

use anedvd_base::{Metadata, TensorInfo, TensorRef, WeightSource};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// Rows `rows` of tensor `of`, published as `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowView {
    /// The view's name.
    pub name: String,
    /// The stored tensor.
    pub of: String,
    /// Rows of it (ggml `ne[1]` indices).
    pub rows: Range<usize>,
}

struct Resolved {
    info: TensorInfo,
    of: String,
    bytes: Range<usize>,
}

/// `inner` plus row views.
pub struct RowViews {
    inner: Arc<dyn WeightSource>,
    views: HashMap<String, Resolved>,
    all: Vec<TensorInfo>,
}

impl RowViews {
    /// Checks every view against `inner` (a 2-D tensor, rows in range) and
    /// wraps it. Errors name the view.
    pub fn new(inner: Arc<dyn WeightSource>, views: Vec<RowView>) -> Result<Self, String> {
        let mut resolved = HashMap::new();
        let mut all = inner.tensors().to_vec();
        for v in views {
            let t = inner
                .tensor(&v.of)
                .ok_or_else(|| format!("tensor `{}` not found", v.of))?;
            let (n_in, n_rows) = match t.info.shape.as_slice() {
                [a, b] => (*a, *b as usize),
                s => return Err(format!("tensor `{}`: expected 2-D, found {s:?}", v.of)),
            };
            if v.rows.start >= v.rows.end || v.rows.end > n_rows {
                return Err(format!(
                    "tensor `{}` has {n_rows} rows; its view `{}` needs rows {:?}",
                    v.of, v.name, v.rows
                ));
            }
            let row_bytes =
                t.info
                    .dtype
                    .row_bytes(n_in)
                    .map_err(|e| format!("tensor `{}`: {e}", v.of))? as usize;
            if row_bytes * n_rows != t.data.len() {
                return Err(format!(
                    "tensor `{}`: {} bytes for {n_rows} rows of {row_bytes}",
                    v.of,
                    t.data.len()
                ));
            }
            let n = v.rows.len();
            let info = TensorInfo {
                name: v.name.clone(),
                dtype: t.info.dtype,
                shape: vec![n_in, n as u64],
                size_bytes: (row_bytes * n) as u64,
            };
            all.push(info.clone());
            resolved.insert(
                v.name,
                Resolved {
                    info,
                    of: v.of,
                    bytes: v.rows.start * row_bytes..v.rows.end * row_bytes,
                },
            );
        }
        Ok(Self {
            inner,
            views: resolved,
            all,
        })
    }

    fn translate(&self, name: &str, bytes: Range<usize>) -> Option<(&str, Range<usize>)> {
        let v = self.views.get(name)?;
        let start = v.bytes.start + bytes.start.min(v.bytes.len());
        let end = v.bytes.start + bytes.end.min(v.bytes.len());
        Some((&v.of, start..end))
    }
}

impl WeightSource for RowViews {
    fn metadata(&self) -> &Metadata {
        self.inner.metadata()
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.all
    }

    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        match self.views.get(name) {
            None => self.inner.tensor(name),
            Some(v) => {
                let t = self.inner.tensor(&v.of)?;
                Some(TensorRef {
                    info: &v.info,
                    data: t.data.get(v.bytes.clone())?,
                })
            }
        }
    }

    fn format_name(&self) -> &'static str {
        self.inner.format_name()
    }

    fn will_read(&self, name: &str, bytes: Range<usize>) {
        match self.translate(name, bytes.clone()) {
            Some((of, b)) => self.inner.will_read(of, b),
            None => self.inner.will_read(name, bytes),
        }
    }

    fn release(&self, name: &str, bytes: Range<usize>) {
        match self.translate(name, bytes.clone()) {
            Some((of, b)) => self.inner.release(of, b),
            None => self.inner.release(name, bytes),
        }
    }
}
