//! Tensor layouts inside IOSurfaces and the fp16/fp32 scatter/gather against them.
//!
//! An ANE I/O tensor is `[C, H, W]` (batch 1), channels first, with the
//! sequence along `W`. In a surface, element `(c, h, w)` lives at byte
//! `c·plane_stride + h·row_stride + w·elem` (ane-spec.md §6.1–§6.3). The
//! hardware wants every stride to be a multiple of 64 bytes, so for fp16 a
//! row of `W < 32` elements is padded: the *planar* layout. The *flat* layout
//! (tightly packed, `row_stride = W·elem`) that maderix/Orion/Espresso use is
//! the same thing only when `W·elem` is a multiple of 64. The runtime always
//! packs with the strides the loaded model reports, never assumed ones.

use half::f16;

use super::error::{Error, Result};

/// Element type of an I/O tensor (`Type` in the model attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElemType {
    /// `Float16`.
    F16,
    /// `Float32`.
    F32,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::F16 => 2,
            ElemType::F32 => 4,
        }
    }
}

/// The hardware's stride granule in bytes (ane-spec.md §6.2).
pub const STRIDE_ALIGN: usize = 64;

/// One entry of `LiveInputList`/`LiveOutputList`: where a tensor lives in its surface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorLayout {
    /// `Name` (the MIL input/output name).
    pub name: String,
    /// `Symbol` (binding symbol; equal to the name in every known dump).
    pub symbol: String,
    /// `Type`.
    pub elem: ElemType,
    /// `Channels`.
    pub channels: usize,
    /// `Height`.
    pub height: usize,
    /// `Width`.
    pub width: usize,
    /// `RowStride` in bytes.
    pub row_stride: usize,
    /// `PlaneStride` in bytes (one channel).
    pub plane_stride: usize,
}

/// Rounds `n` up to a multiple of [`STRIDE_ALIGN`] (at least one granule).
pub fn round_up_64(n: usize) -> Option<usize> {
    let n = n.max(1);
    n.checked_add(STRIDE_ALIGN - 1)
        .map(|x| x / STRIDE_ALIGN * STRIDE_ALIGN)
}

/// Maps a MIL tensor shape to `(channels, height, width)`: the last axis is
/// the width, the one before it the height, every other axis folds into
/// channels (`[1, C, 1, S]` → `(C, 1, S)`).
pub fn chw_of_shape(shape: &[usize]) -> (usize, usize, usize) {
    let n = shape.len();
    let width = if n >= 1 { shape[n - 1] } else { 1 };
    let height = if n >= 2 { shape[n - 2] } else { 1 };
    let channels = shape[..n.saturating_sub(2)].iter().product();
    (channels, height, width)
}

impl TensorLayout {
    /// The layout the hardware reports: rows padded to 64 bytes, planes of
    /// `height` rows.
    pub fn planar(
        name: &str,
        elem: ElemType,
        channels: usize,
        height: usize,
        width: usize,
    ) -> Self {
        let row_stride = width
            .checked_mul(elem.size())
            .and_then(round_up_64)
            .unwrap_or(usize::MAX);
        TensorLayout {
            name: name.to_string(),
            symbol: name.to_string(),
            elem,
            channels,
            height,
            width,
            row_stride,
            plane_stride: row_stride.saturating_mul(height),
        }
    }

    /// The tightly packed layout (`row_stride = width·elem`) of the flat
    /// surface style.
    pub fn flat(name: &str, elem: ElemType, channels: usize, height: usize, width: usize) -> Self {
        let row_stride = width.saturating_mul(elem.size());
        TensorLayout {
            name: name.to_string(),
            symbol: name.to_string(),
            elem,
            channels,
            height,
            width,
            row_stride,
            plane_stride: row_stride.saturating_mul(height),
        }
    }

    /// Number of logical elements (`channels·height·width`).
    pub fn numel(&self) -> usize {
        self.channels
            .saturating_mul(self.height)
            .saturating_mul(self.width)
    }

    /// Bytes the surface must hold (`channels·plane_stride`).
    pub fn alloc_size(&self) -> usize {
        self.channels.saturating_mul(self.plane_stride)
    }

    /// Byte offset of element `(c, h, w)`.
    pub fn offset(&self, c: usize, h: usize, w: usize) -> usize {
        c * self.plane_stride + h * self.row_stride + w * self.elem.size()
    }

    /// Checks that the strides are consistent: rows hold `width` elements,
    /// planes hold `height` rows, nothing overflows. Says nothing about
    /// 64-byte alignment (that is the hardware's business, checked by
    /// [`TensorLayout::is_hw_aligned`]).
    pub fn validate(&self) -> Result<()> {
        let e = |m: String| Error::layout(&self.name, m);
        if self.channels == 0 || self.height == 0 || self.width == 0 {
            return Err(e(format!(
                "empty tensor {}x{}x{}",
                self.channels, self.height, self.width
            )));
        }
        let row_bytes = self
            .width
            .checked_mul(self.elem.size())
            .ok_or_else(|| e("width overflows".into()))?;
        if self.row_stride < row_bytes {
            return Err(e(format!(
                "row stride {} < width {} × {} bytes",
                self.row_stride,
                self.width,
                self.elem.size()
            )));
        }
        let plane = self
            .height
            .checked_mul(self.row_stride)
            .ok_or_else(|| e("plane overflows".into()))?;
        if self.plane_stride < plane {
            return Err(e(format!(
                "plane stride {} < height {} × row stride {}",
                self.plane_stride, self.height, self.row_stride
            )));
        }
        self.channels
            .checked_mul(self.plane_stride)
            .ok_or_else(|| e("surface size overflows".into()))?;
        Ok(())
    }

    /// Whether row and plane strides are multiples of 64 bytes.
    pub fn is_hw_aligned(&self) -> bool {
        self.row_stride.is_multiple_of(STRIDE_ALIGN)
            && self.plane_stride.is_multiple_of(STRIDE_ALIGN)
    }

    fn check_fit(&self, n_values: usize, surface_len: usize) -> Result<()> {
        self.validate()?;
        if n_values != self.numel() {
            return Err(Error::layout(
                &self.name,
                format!(
                    "{n_values} values for {}x{}x{} = {}",
                    self.channels,
                    self.height,
                    self.width,
                    self.numel()
                ),
            ));
        }
        if surface_len < self.alloc_size() {
            return Err(Error::layout(
                &self.name,
                format!(
                    "surface of {surface_len} bytes < {} needed",
                    self.alloc_size()
                ),
            ));
        }
        Ok(())
    }
}

fn put(layout: &TensorLayout, dst: &mut [u8], at: usize, v: f32) {
    match layout.elem {
        ElemType::F16 => dst[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes()),
        ElemType::F32 => dst[at..at + 4].copy_from_slice(&v.to_le_bytes()),
    }
}

fn get(layout: &TensorLayout, src: &[u8], at: usize) -> f32 {
    match layout.elem {
        ElemType::F16 => f16::from_le_bytes([src[at], src[at + 1]]).to_f32(),
        ElemType::F32 => f32::from_le_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]]),
    }
}

/// Scatters `values` (row-major `[C, H, W]`) into `dst` at the layout's
/// strides, zeroing every padding byte of the tensor's extent. fp16 surfaces
/// round each value to nearest-even.
pub fn pack(layout: &TensorLayout, values: &[f32], dst: &mut [u8]) -> Result<()> {
    layout.check_fit(values.len(), dst.len())?;
    dst[..layout.alloc_size()].fill(0);
    let mut i = 0;
    for c in 0..layout.channels {
        for h in 0..layout.height {
            let row = layout.offset(c, h, 0);
            for w in 0..layout.width {
                put(layout, dst, row + w * layout.elem.size(), values[i]);
                i += 1;
            }
        }
    }
    Ok(())
}

/// [`pack`] for fp16 values (exact into fp16 surfaces).
pub fn pack_f16(layout: &TensorLayout, values: &[f16], dst: &mut [u8]) -> Result<()> {
    let wide: Vec<f32> = values.iter().map(|v| v.to_f32()).collect();
    pack(layout, &wide, dst)
}

/// Gathers a row-major `[C, H, W]` tensor out of `src` at the layout's strides.
pub fn unpack(layout: &TensorLayout, src: &[u8]) -> Result<Vec<f32>> {
    layout.check_fit(layout.numel(), src.len())?;
    let mut out = Vec::with_capacity(layout.numel());
    for c in 0..layout.channels {
        for h in 0..layout.height {
            let row = layout.offset(c, h, 0);
            for w in 0..layout.width {
                out.push(get(layout, src, row + w * layout.elem.size()));
            }
        }
    }
    Ok(out)
}
